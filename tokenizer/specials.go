package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// BERT's special tokens, as Decode renders them and as a WordPiece vocab spells them.
const (
	PadText  = "[PAD]"
	UnkText  = "[UNK]"
	ClsText  = "[CLS]"
	SepText  = "[SEP]"
	MaskText = "[MASK]"
)

// Specials holds the ids of BERT's special tokens, -1 for those a tokenizer lacks. A
// WordPiece vocab has all five; gpt2, byte and char get [PAD] [CLS] [SEP] [MASK] only when
// asked (WithBERTSpecials), appended after their own vocabulary, and no [UNK] (they encode
// every text).
type Specials struct {
	PAD  int `json:"pad"`
	UNK  int `json:"unk"`
	CLS  int `json:"cls"`
	SEP  int `json:"sep"`
	MASK int `json:"mask"`
}

// NoSpecials is the Specials of a tokenizer without any.
var NoSpecials = Specials{PAD: -1, UNK: -1, CLS: -1, SEP: -1, MASK: -1}

// Any reports whether at least one special token exists.
func (s Specials) Any() bool { return s != NoSpecials }

// Is reports whether id is one of the special tokens.
func (s Specials) Is(id int) bool {
	_, ok := s.text(id)
	return ok
}

// text returns how Decode renders id, if it is one of the specials.
func (s Specials) text(id int) (string, bool) {
	if id < 0 {
		return "", false
	}
	switch id {
	case s.PAD:
		return PadText, true
	case s.UNK:
		return UnkText, true
	case s.CLS:
		return ClsText, true
	case s.SEP:
		return SepText, true
	case s.MASK:
		return MaskText, true
	}
	return "", false
}

// SpecialsOf returns tok's special-token ids (NoSpecials if it has none).
func SpecialsOf(tok Tokenizer) Specials {
	if s, ok := tok.(interface{ Specials() Specials }); ok {
		return s.Specials()
	}
	return NoSpecials
}

// appendedSpecials is embedded in the gpt2, byte and char tokenizers. When on, [PAD] [CLS]
// [SEP] [MASK] take the four ids right after the tokenizer's own vocabulary (EOT included), so
// every existing id keeps its meaning; off (the zero value), the vocabulary is unchanged, which
// keeps GPT-2's 50257 ids and llm.c / Hugging Face weights compatible.
type appendedSpecials struct {
	first int // id of [PAD]; 0 when off
}

// bertSpecialCount is how many ids appendedSpecials adds.
const bertSpecialCount = 4

func (a appendedSpecials) Specials() Specials {
	if a.first == 0 {
		return NoSpecials
	}
	return Specials{PAD: a.first, UNK: -1, CLS: a.first + 1, SEP: a.first + 2, MASK: a.first + 3}
}

// extra is the number of ids the specials add to the vocabulary.
func (a appendedSpecials) extra() int {
	if a.first == 0 {
		return 0
	}
	return bertSpecialCount
}

// WithBERTSpecials returns tok with [PAD] [CLS] [SEP] [MASK] appended to its vocabulary (ids
// VocabSize() .. VocabSize()+3). Encode never produces them from text (like EOT, they are put
// in by code); Decode renders them as "[PAD]" etc. A WordPiece tokenizer is returned as it is:
// its specials are its vocab's own entries.
func WithBERTSpecials(tok Tokenizer) (Tokenizer, error) {
	switch t := tok.(type) {
	case *WordPiece:
		return t, nil
	case byteTokenizer:
		if t.first == 0 {
			t.first = t.VocabSize()
		}
		return t, nil
	case *Char:
		c := *t
		if c.first == 0 {
			c.first = c.VocabSize()
		}
		return &c, nil
	case *gpt2Tokenizer:
		g := *t // shares the codecs and the segment caches: the ids of text are the same
		if g.first == 0 {
			g.first = g.VocabSize()
		}
		return &g, nil
	default:
		return nil, fmt.Errorf("tokenizer %s cannot take BERT special tokens", tok.Name())
	}
}

// Record is what a dataset's meta.json and a run's run.json keep about a tokenizer beyond its
// name, alphabet and EOT, so that Spec.Build gives back exactly the same ids wherever the files
// it was built from have gone. Both embed it, so its fields sit beside the others in the JSON;
// files written before it existed lack them all, which means no specials (as those files were).
type Record struct {
	// Specials are the ids of [PAD] [UNK] [CLS] [SEP] [MASK] (-1: none); absent for a
	// tokenizer without them.
	Specials *Specials `json:"specials,omitempty"`
	// Lowercase: a WordPiece tokenizer lower-cases and strips accents (BERT "uncased").
	Lowercase bool `json:"lowercase,omitempty"`
	// VocabFile is where the WordPiece vocab was read from, for people; it is not read back.
	VocabFile string `json:"vocab_file,omitempty"`
	// VocabSHA256 is the hex SHA-256 of Vocab, checked when the tokenizer is rebuilt.
	VocabSHA256 string `json:"vocab_sha256,omitempty"`
	// Vocab is the WordPiece vocab itself: its tokens in id order, each followed by "\n".
	Vocab string `json:"vocab,omitempty"`
}

// RecordOf describes tok for meta.json and run.json.
func RecordOf(tok Tokenizer) Record {
	var r Record
	if s := SpecialsOf(tok); s.Any() {
		r.Specials = &s
	}
	if w, ok := tok.(*WordPiece); ok {
		r.Lowercase = w.lowercase
		r.VocabFile = w.source
		r.Vocab = w.VocabText()
		r.VocabSHA256 = vocabHash(r.Vocab)
	}
	return r
}

func vocabHash(vocab string) string {
	sum := sha256.Sum256([]byte(vocab))
	return hex.EncodeToString(sum[:])
}
