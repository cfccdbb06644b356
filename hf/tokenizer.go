package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// The tokenizer files GPT2Tokenizer (and GPT2TokenizerFast) read.
const (
	VocabFile           = "vocab.json"
	MergesFile          = "merges.txt"
	TokenizerConfigFile = "tokenizer_config.json"
	mergesHeader        = "#version: 0.2\n"
)

// byteRunes is GPT-2's byte-to-unicode table: the character that stands for each byte in
// vocab.json and merges.txt. Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68 bytes, in order, get U+0100, U+0101, ... (so ' ' is 'Ġ', U+0120).
var byteRunes = func() [256]rune {
	var table [256]rune
	next := rune(256)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			table[b] = rune(b)
		} else {
			table[b] = next
			next++
		}
	}
	return table
}()

// unicodeToken writes a token's bytes as GPT-2's characters.
func unicodeToken(tok []byte) string {
	rs := make([]rune, len(tok))
	for i, b := range tok {
		rs[i] = byteRunes[b]
	}
	return string(rs)
}

// bpeVocab is a byte-level BPE vocabulary: each id's bytes, the merges in rank order (each a
// pair of ids), and the special tokens (end-of-text, BERT's when appended), which have no bytes
// but a text of their own.
type bpeVocab struct {
	tokens   [][]byte
	merges   [][2]int
	specials map[int]string // id -> "<|endoftext|>", "[PAD]", ...
}

// specialTokens returns tok's special tokens by id: EOT and BERT's appended [PAD] [CLS] [SEP]
// [MASK].
func specialTokens(tok tokenizer.Tokenizer) map[int]string {
	m := map[int]string{}
	if eot := tok.EOT(); eot >= 0 {
		m[eot] = tokenizer.EOTText
	}
	s := tokenizer.SpecialsOf(tok)
	for id, text := range map[int]string{s.PAD: tokenizer.PadText, s.CLS: tokenizer.ClsText, s.SEP: tokenizer.SepText, s.MASK: tokenizer.MaskText, s.UNK: tokenizer.UnkText} {
		if id >= 0 {
			m[id] = text
		}
	}
	return m
}

// gpt2Vocab recovers GPT-2's vocabulary and merge list from the tokenizer. In GPT-2 (and
// tiktoken's "gpt2"/r50k_base) ids 0..255 are the single bytes and id 256+i is the token made by
// merge i, so merge i joins the two tokens that BPE, restricted to the merges before it, splits
// token 256+i into.
func gpt2Vocab(tok tokenizer.Tokenizer) (*bpeVocab, error) {
	v := &bpeVocab{tokens: make([][]byte, tok.VocabSize()), specials: specialTokens(tok)}
	rank := make(map[string]int, len(v.tokens))
	for id := range v.tokens {
		if _, special := v.specials[id]; special {
			continue
		}
		v.tokens[id] = []byte(tok.Decode([]int{id}))
		rank[string(v.tokens[id])] = id
	}
	for id := range 256 {
		if len(v.tokens[id]) != 1 {
			return nil, fmt.Errorf("gpt2 vocabulary: id %d is %q, not a single byte", id, v.tokens[id])
		}
	}
	for id := 256; id < len(v.tokens); id++ {
		if _, special := v.specials[id]; special {
			continue
		}
		parts := bpeSplit(v.tokens[id], rank, id)
		if len(parts) != 2 {
			return nil, fmt.Errorf("gpt2 vocabulary: token %d (%q) is not one merge of earlier tokens", id, v.tokens[id])
		}
		v.merges = append(v.merges, [2]int{rank[string(parts[0])], rank[string(parts[1])]})
	}
	return v, nil
}

// bpeSplit runs byte-pair encoding on word with the merges of rank below limit: starting from
// single bytes, it joins the adjacent pair whose joined token has the lowest rank until no pair
// joins into a token of rank < limit.
func bpeSplit(word []byte, rank map[string]int, limit int) [][]byte {
	bounds := make([]int, len(word)+1) // part i is word[bounds[i]:bounds[i+1]]
	for i := range bounds {
		bounds[i] = i
	}
	for len(bounds) > 2 {
		best, at := limit, -1
		for i := 0; i+2 < len(bounds); i++ {
			if r, ok := rank[string(word[bounds[i]:bounds[i+2]])]; ok && r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		bounds = append(bounds[:at+1], bounds[at+2:]...)
	}
	parts := make([][]byte, len(bounds)-1)
	for i := range parts {
		parts[i] = word[bounds[i]:bounds[i+1]]
	}
	return parts
}

// byteVocab is the byte tokenizer as a BPE without merges: id b is byte b.
func byteVocab(tok tokenizer.Tokenizer) *bpeVocab {
	v := &bpeVocab{tokens: make([][]byte, tok.VocabSize()), specials: specialTokens(tok)}
	for b := range 256 {
		v.tokens[b] = []byte{byte(b)}
	}
	return v
}

// vocabJSON is vocab.json: every token (as GPT-2 characters) to its id, in id order, compact.
func (v *bpeVocab) vocabJSON() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for id, t := range v.tokens {
		if id > 0 {
			b.WriteByte(',')
		}
		s, special := v.specials[id]
		if !special {
			s = unicodeToken(t)
		}
		writeJSONString(&b, s)
		fmt.Fprintf(&b, ":%d", id)
	}
	b.WriteString("}")
	return b.Bytes()
}

// mergesTxt is merges.txt: the version line, then one "left right" line per merge in rank order.
func (v *bpeVocab) mergesTxt() []byte {
	var b bytes.Buffer
	b.WriteString(mergesHeader)
	for _, m := range v.merges {
		b.WriteString(unicodeToken(v.tokens[m[0]]))
		b.WriteByte(' ')
		b.WriteString(unicodeToken(v.tokens[m[1]]))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// writeJSONString writes s as a JSON string, without Go's escaping of <, > and &.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}

// writeTokenizer writes vocab.json, merges.txt and tokenizer_config.json for tok when
// GPT2Tokenizer can express it (GPT-2's BPE, the byte tokenizer) and it matches the model's
// vocabulary; otherwise it writes nothing and says why.
func writeTokenizer(dir string, tok tokenizer.Tokenizer, cfg gpt.Config) (files []string, why string, err error) {
	if tok == nil {
		return nil, "the model records no tokenizer", nil
	}
	if !cfg.VocabFits(tok.VocabSize()) {
		return nil, fmt.Sprintf("the %s tokenizer has %d tokens but the model %d", tok.Name(), tok.VocabSize(), cfg.VocabSize), nil
	}
	var v *bpeVocab
	switch tok.Name() {
	case "gpt2":
		if v, err = gpt2Vocab(tok); err != nil {
			return nil, "", err
		}
	case "byte":
		v = byteVocab(tok)
	default:
		return nil, fmt.Sprintf("GPT2Tokenizer cannot express the %s tokenizer", tok.Name()), nil
	}
	// GPT2Tokenizer's special tokens: EOT is GPT-2's bos, eos and unk; BERT's appended ones keep
	// their roles. Their strings are in vocab.json, so they keep their ids.
	tc := map[string]any{"model_max_length": cfg.BlockSize, "add_prefix_space": false, "tokenizer_class": "GPT2Tokenizer"}
	roles := map[string]string{tokenizer.EOTText: "eos_token", tokenizer.PadText: "pad_token", tokenizer.ClsText: "cls_token",
		tokenizer.SepText: "sep_token", tokenizer.MaskText: "mask_token", tokenizer.UnkText: "unk_token"}
	for _, text := range v.specials {
		tc[roles[text]] = text
		if text == tokenizer.EOTText {
			tc["bos_token"], tc["unk_token"] = text, text
		}
	}
	tcfg, err := indentJSON(tc)
	if err != nil {
		return nil, "", err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{VocabFile, v.vocabJSON()}, {MergesFile, v.mergesTxt()}, {TokenizerConfigFile, tcfg}} {
		if err := writeFile(filepath.Join(dir, f.name), f.data); err != nil {
			return nil, "", err
		}
		files = append(files, f.name)
	}
	return files, "", nil
}
