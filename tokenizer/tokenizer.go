// Package tokenizer turns text into token ids and back. Three tokenizers cover the corpora gpt2go
// trains on: "gpt2" (OpenAI's GPT-2 byte-pair encoding, for real text and pretrained checkpoints),
// "byte" (every byte is a token, for code and any file) and "char" (one token per distinct
// character of the corpus, like nanoGPT's shakespeare_char).
package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// Tokenizer maps text to token ids in [0, VocabSize()) and back. Implementations in this
// package are safe for concurrent use.
type Tokenizer interface {
	// Name is the name New accepts: "gpt2", "byte" or "char".
	Name() string
	// VocabSize is the number of distinct ids, EOT included.
	VocabSize() int
	// EOT is the id of the end-of-text token that separates documents, or -1 when the
	// tokenizer has none (a char tokenizer built from a single document).
	EOT() int
	// Encode tokenizes text. Text that looks like a special token ("<|endoftext|>") is
	// encoded as ordinary text, never as EOT.
	Encode(text []byte) []int
	// Decode turns ids back into text. EOT decodes to "<|endoftext|>" and ids the tokenizer
	// doesn't know (e.g. a padded vocabulary's extra rows) to U+FFFD. Decoding ids one at a
	// time and concatenating gives the same bytes as decoding them together.
	Decode(ids []int) string
}

// EOTText is how Decode renders the end-of-text token.
const EOTText = "<|endoftext|>"

// Names lists the tokenizers New knows, for flag help.
var Names = []string{"gpt2", "byte", "char"}

// New rebuilds a tokenizer by name, as recorded in a dataset's meta.json. alphabet is only used
// by "char": the characters in id order; withEOT says whether the char vocabulary has an EOT
// after them (see NewChar). Other tokenizers ignore both.
func New(name, alphabet string, withEOT bool) (Tokenizer, error) {
	switch name {
	case "gpt2":
		return GPT2()
	case "byte":
		return Byte(), nil
	case "char":
		return NewChar(alphabet, withEOT)
	default:
		return nil, fmt.Errorf("unknown tokenizer %q: want one of gpt2, byte, char", name)
	}
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
	default:
		// Char (and any other rune-based tokenizer): cut right before an ASCII byte. An ASCII
		// byte always is a rune of its own and never part of an invalid sequence before it, so
		// UTF-8 decoding on both sides is unchanged.
		return text[p] < utf8.RuneSelf
	}
}

// decodeSpecial handles the ids every tokenizer renders alike: EOT and unknown ids. It returns
// false for ordinary ids.
func decodeSpecial(t Tokenizer, id int) (string, bool) {
	switch {
	case id == t.EOT() && id >= 0:
		return EOTText, true
	case id < 0 || id >= t.VocabSize():
		return string(utf8.RuneError), true
	}
	return "", false
}
