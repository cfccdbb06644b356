package train

import (
	"fmt"

	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// TokenizerInfo records how a run's token ids map to text, so that a checkpoint can be sampled
// and evaluated on text without the dataset it was trained on.
type TokenizerInfo struct {
	Name     string `json:"name"`               // gpt2, byte, char or wordpiece
	Alphabet string `json:"alphabet,omitempty"` // char: the characters in id order
	EOT      int    `json:"eot"`                // end-of-text id, -1 if none
	// Specials, and wordpiece's casing and whole vocab, so a checkpoint needs no vocab.txt.
	tokenizer.Record
}

// TokenizerInfoFromMeta takes the tokenizer description of a prepared dataset.
func TokenizerInfoFromMeta(m *data.Meta) *TokenizerInfo {
	if m == nil || m.Tokenizer == "" {
		return nil
	}
	return &TokenizerInfo{Name: m.Tokenizer, Alphabet: m.Alphabet, EOT: m.EOT, Record: m.Record}
}

// Tokenizer rebuilds the tokenizer.
func (t *TokenizerInfo) Tokenizer() (tokenizer.Tokenizer, error) {
	if t == nil {
		return nil, fmt.Errorf("no tokenizer recorded")
	}
	return tokenizer.Spec{Name: t.Name, Alphabet: t.Alphabet, EOT: t.EOT >= 0, Record: t.Record}.Build()
}

// textCodec turns sampled ids into text and chooses the token a sample starts from.
type textCodec struct {
	tok   tokenizer.Tokenizer
	first []int32
}

func newTextCodec(info *TokenizerInfo) *textCodec {
	tok, err := info.Tokenizer()
	if err != nil {
		return nil
	}
	return &textCodec{tok: tok, first: []int32{int32(StartToken(tok))}}
}

// StartToken is the token an unprompted sample starts from: end-of-text (the start of a new
// document), or a newline for tokenizers without one.
func StartToken(tok tokenizer.Tokenizer) int {
	if tok.EOT() >= 0 {
		return tok.EOT()
	}
	if ids := tok.Encode([]byte("\n")); len(ids) == 1 {
		return ids[0]
	}
	return 0
}

func (c *textCodec) start() []int32 { return c.first }

func (c *textCodec) decode(ids []int32) string {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return c.tok.Decode(out)
}

// RandomTokensInfo is the tokenizer of random-token benches and profiles (no data): vocab ids
// whose last four are [PAD] [CLS] [SEP] [MASK] when bertSpecials (a BERT's masking needs them,
// as --bert-specials appends them), none otherwise.
func RandomTokensInfo(vocab int, bertSpecials bool) *TokenizerInfo {
	info := &TokenizerInfo{Name: "random", EOT: -1}
	if bertSpecials && vocab > 4 {
		info.Specials = &tokenizer.Specials{PAD: vocab - 4, UNK: -1, CLS: vocab - 3, SEP: vocab - 2, MASK: vocab - 1}
	}
	return info
}

// SameIDs reports whether two tokenizers give text the same ids: the same kind, alphabet, EOT,
// special tokens, casing and WordPiece vocab (where it was read from aside).
func (a *TokenizerInfo) SameIDs(b *TokenizerInfo) bool {
	specials := func(t *TokenizerInfo) tokenizer.Specials {
		if t.Specials == nil {
			return tokenizer.NoSpecials
		}
		return *t.Specials
	}
	return a.Name == b.Name && a.Alphabet == b.Alphabet && a.EOT == b.EOT && specials(a) == specials(b) &&
		a.Lowercase == b.Lowercase && a.VocabSHA256 == b.VocabSHA256
}

// checkDataTokens refuses data whose token ids mean something else to the run's model: for
// weights from --init, a vocabulary of another size than theirs (char or byte data under GPT-2
// weights); for a run that recorded its tokenizer, data tokenized another way since (a dataset
// prepared again in place, a cache rebuilt).
func checkDataTokens(cfg Config, meta *data.Meta) error {
	if meta == nil || meta.Tokenizer == "" {
		return nil
	}
	if cfg.Init != "" && !cfg.Model.VocabFits(meta.VocabSize) {
		return fmt.Errorf("--init %s has a %d-token vocabulary, but the data %s has the %s tokenizer's %d: the weights would read its ids as other tokens; prepare the data with the weights' tokenizer (--tokenizer gpt2 for GPT-2's)",
			cfg.Init, cfg.Model.VocabSize, cfg.Data, meta.Tokenizer, meta.VocabSize)
	}
	if have := TokenizerInfoFromMeta(meta); cfg.Tokenizer != nil && !cfg.Tokenizer.SameIDs(have) {
		what := "the " + have.Name + " tokenizer"
		if have.Name == cfg.Tokenizer.Name {
			what = "another " + have.Name + " tokenizer (other ids)"
		}
		return fmt.Errorf("the data %s is tokenized with %s now, not the %s tokenizer the run was trained with (it was prepared again since); prepare the run's own data there again, or start a new run",
			cfg.Data, what, cfg.Tokenizer.Name)
	}
	return nil
}
