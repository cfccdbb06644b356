// Package tokenizer turns text into token ids and back. Four tokenizers cover the corpora gpt2go
// trains on: "gpt2" (OpenAI's GPT-2 byte-pair encoding, for real text and pretrained checkpoints),
// "byte" (every byte is a token, for code and any file), "char" (one token per distinct
// character of the corpus, like nanoGPT's shakespeare_char) and "wordpiece" (BERT's tokenizer
// over a vocab.txt, giving Hugging Face's ids).
//
// BERT's special tokens [PAD] [CLS] [SEP] [MASK] are a WordPiece vocab's own entries; the other
// tokenizers get them only on request (WithBERTSpecials), as ids after their own vocabulary,
// so GPT-2 data and weights keep their 50257 ids.
package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Tokenizer maps text to token ids in [0, VocabSize()) and back. Implementations in this
// package are safe for concurrent use.
type Tokenizer interface {
	// Name is the name New accepts: "gpt2", "byte", "char" or "wordpiece".
	Name() string
	// VocabSize is the number of distinct ids, EOT included.
	VocabSize() int
	// EOT is the id of the end-of-text token that separates documents, or -1 when the
	// tokenizer has none (a char tokenizer built from a single document). WordPiece has no
	// such token and separates documents with [SEP].
	EOT() int
	// Encode tokenizes text. Text that looks like a special token ("<|endoftext|>", "[MASK]")
	// is encoded as ordinary text, never as EOT or a special, except by WordPiece, which
	// matches "[MASK]" etc. in the text as Hugging Face's BERT tokenizer does.
	Encode(text []byte) []int
	// Decode turns ids back into text. EOT decodes to "<|endoftext|>", BERT's specials to
	// "[MASK]" etc., and ids the tokenizer doesn't know (e.g. a padded vocabulary's extra rows)
	// to U+FFFD. Decoding ids one at a time and concatenating gives the same bytes as decoding
	// them together, except for WordPiece, which joins words with spaces as Hugging Face does.
	Decode(ids []int) string
}

// EOTText is how Decode renders the end-of-text token.
const EOTText = "<|endoftext|>"

// Names lists the tokenizers New knows, for flag help.
var Names = []string{"gpt2", "byte", "char", "wordpiece"}

// New rebuilds a tokenizer by name. alphabet is only used by "char": the characters in id
// order; withEOT says whether the char vocabulary has an EOT after them (see NewChar). Other
// tokenizers ignore both. "wordpiece" needs its vocab: use Spec.
func New(name, alphabet string, withEOT bool) (Tokenizer, error) {
	return Spec{Name: name, Alphabet: alphabet, EOT: withEOT}.Build()
}

// Spec is everything a dataset's meta.json or a run records about its tokenizer.
type Spec struct {
	Name     string
	Alphabet string // char: the characters in id order
	EOT      bool   // char: an EOT id follows the alphabet
	Record          // specials, and WordPiece's vocab and casing
}

// Build rebuilds the tokenizer Spec describes and checks it against what was recorded: the
// vocab's hash and the special tokens' ids.
func (s Spec) Build() (Tokenizer, error) {
	var tok Tokenizer
	var err error
	switch s.Name {
	case "gpt2":
		tok, err = GPT2()
	case "byte":
		tok = Byte()
	case "char":
		tok, err = NewChar(s.Alphabet, s.EOT)
	case "wordpiece":
		if s.Vocab == "" {
			return nil, fmt.Errorf("wordpiece tokenizer: no vocab recorded; prepare the data with --tokenizer wordpiece --vocab vocab.txt")
		}
		if s.VocabSHA256 != "" && vocabHash(s.Vocab) != s.VocabSHA256 {
			return nil, fmt.Errorf("wordpiece tokenizer: the recorded vocab does not match its vocab_sha256 (edited by hand?); re-run gpt2go prepare")
		}
		tok, err = NewWordPiece(s.Vocab, s.Lowercase)
	default:
		return nil, fmt.Errorf("unknown tokenizer %q: want one of %s", s.Name, strings.Join(Names, ", "))
	}
	if err != nil {
		return nil, err
	}
	if s.Specials != nil {
		if tok, err = WithBERTSpecials(tok); err != nil {
			return nil, err
		}
		if got := SpecialsOf(tok); got != *s.Specials {
			return nil, fmt.Errorf("%s tokenizer: recorded special token ids %+v, but the tokenizer has %+v", s.Name, *s.Specials, got)
		}
	}
	return tok, nil
}

// SafeCut returns the largest p <= len(text) at which text can be cut so that encoding the two
// parts separately gives exactly the ids of encoding them together, whatever follows text; 0 if
// text holds no such point yet. Prepare uses it to encode one document in parallel chunks.
func SafeCut(t Tokenizer, text []byte) int {
	if _, ok := t.(byteTokenizer); ok {
		return len(text)
	}
	for p := len(text) - 1; p > 0; p-- {
		if isSafeCut(t, text, p) {
			return p
		}
	}
	return 0
}

// NextSafeCut returns the smallest safe cut p >= from (see SafeCut) with 0 < p < len(text), or
// -1 if text holds none (more text may be needed to tell).
func NextSafeCut(t Tokenizer, text []byte, from int) int {
	for p := max(from, 1); p < len(text); p++ {
		if isSafeCut(t, text, p) {
			return p
		}
	}
	return -1
}

// isSafeCut reports whether cutting text before text[p] (0 < p < len(text)) is safe. For GPT-2
// it must also see text[p+1].
func isSafeCut(t Tokenizer, text []byte, p int) bool {
	switch t.(type) {
	case byteTokenizer:
		return true
	case *gpt2Tokenizer:
		return p+1 < len(text) && isGPT2Cut(text, p)
	case *WordPiece:
		return isWordPieceCut(text, p)
	default:
		// Char (and any other rune-based tokenizer): cut right before an ASCII byte. An ASCII
		// byte always is a rune of its own and never part of an invalid sequence before it, so
		// UTF-8 decoding on both sides is unchanged.
		return text[p] < utf8.RuneSelf
	}
}

// decodeSpecial handles the ids every tokenizer renders alike: EOT, BERT's specials and
// unknown ids. It returns false for ordinary ids.
func decodeSpecial(t Tokenizer, id int) (string, bool) {
	switch {
	case id == t.EOT() && id >= 0:
		return EOTText, true
	case id < 0 || id >= t.VocabSize():
		return string(utf8.RuneError), true
	}
	return SpecialsOf(t).text(id)
}
