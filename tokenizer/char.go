package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Char is a character-level tokenizer: the i-th rune of its alphabet has id i, like nanoGPT's
// shakespeare_char (Tiny Shakespeare gives 65 characters).
type Char struct {
	alphabet []rune
	ids      map[rune]int
	ascii    [utf8.RuneSelf]int32 // fast path: id+1 of each ASCII rune, 0 if absent
	eot      int
	appendedSpecials
}

// NewChar builds a char tokenizer over alphabet (distinct runes in ascending order, as
// Alphabet returns). With withEOT the vocabulary gets one more id, len(alphabet), for EOT;
// prepare adds it only when the corpus has more than one document, so a single text gets
// exactly its characters (Tiny Shakespeare: 65) and no unused id.
func NewChar(alphabet string, withEOT bool) (*Char, error) {
	if alphabet == "" {
		return nil, fmt.Errorf("char tokenizer: empty alphabet")
	}
	if !utf8.ValidString(alphabet) {
		return nil, fmt.Errorf("char tokenizer: alphabet is not valid UTF-8")
	}
	runes := []rune(alphabet)
	if !slices.IsSorted(runes) || len(slices.Compact(slices.Clone(runes))) != len(runes) {
		return nil, fmt.Errorf("char tokenizer: alphabet must hold distinct runes in ascending order")
	}
	c := &Char{alphabet: runes, ids: make(map[rune]int, len(runes)), eot: -1}
	for i, r := range runes {
		c.ids[r] = i
		if r < utf8.RuneSelf {
			c.ascii[r] = int32(i + 1)
		}
	}
	if withEOT {
		c.eot = len(runes)
	}
	return c, nil
}

// Alphabet returns the sorted distinct runes of text as a string, the argument NewChar takes.
// Invalid UTF-8 counts as U+FFFD, as Encode sees it.
func Alphabet(text []byte) string {
	var set AlphabetSet
	set.Add(text)
	return set.String()
}

// AlphabetSet collects the characters of a corpus read in pieces. Pieces must not split a
// multi-byte character (cut them with SafeCut).
type AlphabetSet struct {
	ascii [utf8.RuneSelf]bool
	other map[rune]bool
}

// Add records the runes of text.
func (s *AlphabetSet) Add(text []byte) {
	for i := 0; i < len(text); {
		if b := text[i]; b < utf8.RuneSelf {
			s.ascii[b] = true
			i++
			continue
		}
		r, n := utf8.DecodeRune(text[i:])
		if s.other == nil {
			s.other = make(map[rune]bool)
		}
		s.other[r] = true
		i += n
	}
}

// String returns the sorted alphabet.
func (s *AlphabetSet) String() string {
	var runes []rune
	for r, ok := range s.ascii {
		if ok {
			runes = append(runes, rune(r))
		}
	}
	others := make([]rune, 0, len(s.other))
	for r := range s.other {
		others = append(others, r)
	}
	slices.Sort(others)
	return string(append(runes, others...))
}

func (c *Char) Name() string { return "char" }

// Alphabet returns the characters in id order.
func (c *Char) Alphabet() string { return string(c.alphabet) }

func (c *Char) VocabSize() int {
	if c.eot >= 0 {
		return len(c.alphabet) + 1 + c.extra()
	}
	return len(c.alphabet) + c.extra()
}

func (c *Char) EOT() int { return c.eot }

// Encode maps each rune to its id. Runes outside the alphabet are dropped; use Check first
// where that matters (a user's prompt).
func (c *Char) Encode(text []byte) []int {
	ids := make([]int, 0, len(text))
	for i := 0; i < len(text); {
		if b := text[i]; b < utf8.RuneSelf {
			if id := c.ascii[b]; id > 0 {
				ids = append(ids, int(id-1))
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(text[i:])
		if id, ok := c.ids[r]; ok {
			ids = append(ids, id)
		}
		i += n
	}
	return ids
}

// Check reports the first rune of text that is not in the alphabet.
func (c *Char) Check(text []byte) error {
	for i, r := range string(text) {
		if _, ok := c.ids[r]; !ok {
			return fmt.Errorf("character %q at byte %d is not in the char tokenizer's %d-character alphabet", r, i, len(c.alphabet))
		}
	}
	return nil
}

func (c *Char) Decode(ids []int) string {
	var s strings.Builder
	for _, id := range ids {
		if special, ok := decodeSpecial(c, id); ok {
			s.WriteString(special)
			continue
		}
		s.WriteRune(c.alphabet[id])
	}
	return s.String()
}
