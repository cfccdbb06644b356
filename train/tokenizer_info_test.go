package train

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// TestTokenizerInfoKeepsWordPiece: run.json carries a wordpiece tokenizer whole (vocab, casing,
// specials), so a checkpoint rebuilds it without the dataset or the vocab.txt.
func TestTokenizerInfoKeepsWordPiece(t *testing.T) {
	wp, err := tokenizer.ReadWordPiece("../tokenizer/testdata/wordpiece/vocab.txt", false)
	if err != nil {
		t.Fatal(err)
	}
	meta := &data.Meta{Tokenizer: wp.Name(), VocabSize: wp.VocabSize(), EOT: wp.EOT(), Record: tokenizer.RecordOf(wp)}
	b, err := json.Marshal(TokenizerInfoFromMeta(meta))
	if err != nil {
		t.Fatal(err)
	}
	var info TokenizerInfo
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	tok, err := info.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	text := []byte("Paris is the [MASK] of France, Café.")
	if !slices.Equal(tok.Encode(text), wp.Encode(text)) || tokenizer.SpecialsOf(tok) != wp.Specials() {
		t.Fatalf("rebuilt tokenizer differs: %v vs %v", tok.Encode(text), wp.Encode(text))
	}
	// A byte run with BERT's specials keeps them too.
	bs, _ := tokenizer.WithBERTSpecials(tokenizer.Byte())
	meta = &data.Meta{Tokenizer: "byte", VocabSize: bs.VocabSize(), EOT: bs.EOT(), Record: tokenizer.RecordOf(bs)}
	b, _ = json.Marshal(TokenizerInfoFromMeta(meta))
	info = TokenizerInfo{}
	json.Unmarshal(b, &info)
	if tok, err := info.Tokenizer(); err != nil || tok.VocabSize() != 261 || tokenizer.SpecialsOf(tok).MASK != 260 {
		t.Fatalf("byte with specials: %v, %v", tok, err)
	}
}
