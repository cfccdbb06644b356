package tokenizer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// WordPiece is BERT's tokenizer over a vocab.txt (one token per line, id = line number, "##"
// marking a piece that continues a word). It gives the same ids as Hugging Face's
// BertTokenizer configured like bert-base's tokenizer.json (BertNormalizer with clean_text and
// handle_chinese_chars, BertPreTokenizer, WordPiece with 100 characters per word, the five
// specials as special added tokens), tested case by case against its JavaScript port
// (tools/reference/gen_wordpiece.mjs). Encode runs, on each stretch of text between special
// tokens:
//
//  1. clean: drop U+0000, U+FFFD (also what invalid UTF-8 becomes) and control characters
//     (categories Cc, Cf, Co, except tab, newline and carriage return); whitespace (JavaScript's
//     \s: Zs, tab, newline, CR, and the line and paragraph separators) becomes ' '.
//  2. put spaces around CJK ideographs (BERT's Unicode blocks), so each is a word.
//  3. uncased only: lower-case (full Unicode lower-casing, with Greek final sigma as in
//     transformers.js and Python's BertTokenizer, where BertTokenizerFast gives σ), then
//     decompose (NFD) and drop nonspacing marks (Mn): "Café" -> "cafe".
//  4. split into words at whitespace, and make every punctuation character a word of its own:
//     Unicode categories P* and all of ASCII's non-alphanumeric symbols ($ + < = > ^ ` | ~).
//  5. split each word greedily into the longest vocab entries from the left, continuation
//     pieces spelt "##..."; a word longer than 100 characters, or one with a part that no
//     entry matches, becomes [UNK] as a whole.
//
// "[PAD]", "[UNK]", "[CLS]", "[SEP]" and "[MASK]" written in the text (exactly so, before any
// lower-casing) are those tokens, as in Hugging Face: "Paris is the [MASK] of France." has
// one [MASK] id. Use Byte or GPT2 where text must never produce a special token.
type WordPiece struct {
	tokens    []string
	ids       map[string]int
	lowercase bool
	specials  Specials
	maxRunes  int    // length of the longest token in runes, "##" included: no match is longer
	source    string // file the vocab was read from, if any
}

// MaxWordRunes is the longest word WordPiece splits; longer words are [UNK] (BERT's
// max_input_chars_per_word).
const MaxWordRunes = 100

// continuation marks a piece that continues a word.
const continuation = "##"

// ReadWordPiece reads a BERT vocab.txt. lowercase selects the uncased normalizer (lower-case
// and strip accents, as bert-base-uncased); false keeps case and accents (bert-base-cased).
func ReadWordPiece(path string, lowercase bool) (*WordPiece, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("wordpiece vocab %s does not exist; pass a BERT vocab.txt (one token per line)", path)
		}
		return nil, fmt.Errorf("wordpiece vocab: %w", err)
	}
	w, err := parseWordPiece(path, string(b), lowercase)
	if err != nil {
		return nil, err
	}
	w.source = path
	return w, nil
}

// NewWordPiece builds a WordPiece tokenizer from a vocab.txt's text (as VocabText returns it).
func NewWordPiece(vocab string, lowercase bool) (*WordPiece, error) {
	return parseWordPiece("vocab", vocab, lowercase)
}

// parseWordPiece reads one token per line ("\n" or "\r\n" endings; the last line may lack one).
// Empty lines, repeated tokens and invalid UTF-8 are errors, as is a vocab without all five
// special tokens.
func parseWordPiece(name, text string, lowercase bool) (*WordPiece, error) {
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("wordpiece vocab %s is empty; want a BERT vocab.txt, one token per line", name)
	}
	text = strings.TrimSuffix(text, "\n")
	lines := strings.Split(text, "\n")
	w := &WordPiece{tokens: make([]string, len(lines)), ids: make(map[string]int, len(lines)), lowercase: lowercase}
	for i, line := range lines {
		tok := strings.TrimSuffix(line, "\r")
		switch {
		case tok == "":
			return nil, fmt.Errorf("wordpiece vocab %s: line %d is empty; every line must hold one token", name, i+1)
		case !utf8.ValidString(tok):
			return nil, fmt.Errorf("wordpiece vocab %s: line %d is not valid UTF-8", name, i+1)
		}
		if prev, dup := w.ids[tok]; dup {
			return nil, fmt.Errorf("wordpiece vocab %s: token %q is on lines %d and %d; each token must appear once", name, tok, prev+1, i+1)
		}
		w.tokens[i] = tok
		w.ids[tok] = i
		w.maxRunes = max(w.maxRunes, utf8.RuneCountInString(tok))
	}
	var missing []string
	id := func(tok string) int {
		id, ok := w.ids[tok]
		if !ok {
			missing = append(missing, tok)
			return -1
		}
		return id
	}
	w.specials = Specials{PAD: id(PadText), UNK: id(UnkText), CLS: id(ClsText), SEP: id(SepText), MASK: id(MaskText)}
	if len(missing) > 0 {
		return nil, fmt.Errorf("wordpiece vocab %s lacks %s; a BERT vocab needs [PAD], [UNK], [CLS], [SEP] and [MASK]", name, strings.Join(missing, ", "))
	}
	return w, nil
}

func (w *WordPiece) Name() string       { return "wordpiece" }
func (w *WordPiece) VocabSize() int     { return len(w.tokens) }
func (w *WordPiece) Specials() Specials { return w.specials }

// EOT is [SEP]: BERT has no end-of-text token, and [SEP] is what ends a segment, so prepare
// puts it between documents.
func (w *WordPiece) EOT() int { return w.specials.SEP }

// Lowercase reports whether the tokenizer is uncased.
func (w *WordPiece) Lowercase() bool { return w.lowercase }

// Token returns the vocab entry of id ("" if out of range).
func (w *WordPiece) Token(id int) string {
	if id < 0 || id >= len(w.tokens) {
		return ""
	}
	return w.tokens[id]
}

// ID returns the id of a vocab entry.
func (w *WordPiece) ID(token string) (int, bool) {
	id, ok := w.ids[token]
	return id, ok
}

// VocabText returns the vocab as a vocab.txt: each token followed by "\n", in id order.
func (w *WordPiece) VocabText() string {
	var s strings.Builder
	for _, t := range w.tokens {
		s.WriteString(t)
		s.WriteByte('\n')
	}
	return s.String()
}

// Encode returns the ids of text, without [CLS]/[SEP] around it (Hugging Face's
// add_special_tokens=False).
func (w *WordPiece) Encode(text []byte) []int {
	ids := make([]int, 0, len(text)/4+4)
	var scratch []byte
	s := string(text)
	for len(s) > 0 {
		at, special := w.nextSpecial(s)
		ids, scratch = w.encodeSection(ids, scratch, s[:at])
		if special == "" {
			break
		}
		ids = append(ids, w.ids[special])
		s = s[at+len(special):]
	}
	return ids
}

// nextSpecial finds the first special token written in s: its offset and text, or len(s) and "".
func (w *WordPiece) nextSpecial(s string) (int, string) {
	for off := 0; ; {
		i := strings.IndexByte(s[off:], '[')
		if i < 0 {
			return len(s), ""
		}
		off += i
		for _, sp := range [...]string{PadText, UnkText, ClsText, SepText, MaskText} {
			if strings.HasPrefix(s[off:], sp) {
				return off, sp
			}
		}
		off++
	}
}

// encodeSection normalizes, splits and encodes text that holds no special token.
func (w *WordPiece) encodeSection(ids []int, scratch []byte, text string) ([]int, []byte) {
	normalized := w.normalize(text)
	word := 0 // start of the current word in normalized
	for i, r := range normalized {
		switch {
		case isJSSpace(r):
			ids, scratch = w.encodeWord(ids, scratch, normalized[word:i])
			word = i + utf8.RuneLen(r)
		case isBertPunct(r):
			ids, scratch = w.encodeWord(ids, scratch, normalized[word:i])
			end := i + utf8.RuneLen(r)
			ids, scratch = w.encodeWord(ids, scratch, normalized[i:end])
			word = end
		}
	}
	return w.encodeWord(ids, scratch, normalized[word:])
}

// encodeWord appends the word pieces of one word: greedy longest match first, [UNK] for the
// whole word if some part matches nothing or the word is too long.
func (w *WordPiece) encodeWord(ids []int, scratch []byte, word string) ([]int, []byte) {
	if word == "" {
		return ids, scratch
	}
	n := utf8.RuneCountInString(word)
	if n > MaxWordRunes {
		return append(ids, w.specials.UNK), scratch
	}
	// bounds[k] is the byte offset of the k-th rune; bounds[n] == len(word).
	var buf [MaxWordRunes + 1]int
	bounds := buf[:0]
	for i := range word {
		bounds = append(bounds, i)
	}
	bounds = append(bounds, len(word))
	first := len(ids)
	for start := 0; start < n; {
		prefix := 0
		if start > 0 {
			prefix = utf8.RuneCountInString(continuation)
		}
		found := -1
		for end := min(n, start+w.maxRunes-prefix); end > start; end-- {
			scratch = scratch[:0]
			if start > 0 {
				scratch = append(scratch, continuation...)
			}
			scratch = append(scratch, word[bounds[start]:bounds[end]]...)
			if id, ok := w.ids[string(scratch)]; ok {
				ids = append(ids, id)
				found = end
				break
			}
		}
		if found < 0 {
			return append(ids[:first], w.specials.UNK), scratch
		}
		start = found
	}
	return ids, scratch
}

// normalize is Hugging Face's BertNormalizer: clean, space out CJK, and for uncased
// lower-case then strip accents.
func (w *WordPiece) normalize(text string) string {
	var s strings.Builder
	s.Grow(len(text))
	for _, r := range text {
		switch {
		case r == 0 || r == utf8.RuneError || isBertControl(r):
		case isJSSpace(r):
			s.WriteByte(' ')
		case isCJK(r):
			s.WriteByte(' ')
			s.WriteRune(r)
			s.WriteByte(' ')
		default:
			s.WriteRune(r)
		}
	}
	out := s.String()
	if !w.lowercase {
		return out
	}
	return stripAccents(lowerFull(out))
}

// isBertControl: the characters BERT's cleaning drops. Tab, newline and CR count as whitespace.
func isBertControl(r rune) bool {
	if r < utf8.RuneSelf {
		return (r < 0x20 || r == 0x7F) && r != '\t' && r != '\n' && r != '\r'
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co)
}

// isJSSpace is JavaScript's \s, the whitespace Hugging Face's JavaScript tokenizer splits on
// (the same set as Rust's char::is_whitespace on what cleaning leaves).
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x2028, 0x2029, 0xFEFF:
		return true
	}
	return r > 0x7F && unicode.Is(unicode.Zs, r)
}

// isBertPunct: Unicode punctuation (P*) and every ASCII character that is neither a letter,
// a digit, a control nor a space.
func isBertPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0x21 && r <= 0x2F || r >= 0x3A && r <= 0x40 || r >= 0x5B && r <= 0x60 || r >= 0x7B && r <= 0x7E
	}
	return unicode.IsPunct(r)
}

// isCJK: the CJK Unified Ideographs blocks (and extensions, and compatibility ideographs) that
// BERT treats as words of their own. Kana and Hangul are not among them.
func isCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF || r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F || r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B820 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}

// stripAccents decomposes s (NFD) and drops the nonspacing marks.
func stripAccents(s string) string {
	d := norm.NFD.String(s)
	if !strings.ContainsFunc(d, isMn) {
		return d
	}
	return strings.Map(func(r rune) rune {
		if isMn(r) {
			return -1
		}
		return r
	}, d)
}

func isMn(r rune) bool { return r > 0x7F && unicode.Is(unicode.Mn, r) }

// lowerFull lower-cases s as JavaScript's toLowerCase and Python's str.lower do (so as
// transformers.js, Python's BertTokenizer and Google's original BERT), up to what accent
// stripping removes afterwards: the simple per-rune mapping, except that Σ becomes ς at the end
// of a word (the Final_Sigma condition). Hugging Face's Rust tokenizers (BertTokenizerFast,
// AutoTokenizer's default) differ there: they lower-case a character at a time
// (char::to_lowercase, which has no Final_Sigma), so "ΟΔΟΣ" ends in ##σ with them and in ##ς
// here. (The full mapping's other difference, İ -> "i" + U+0307, only adds a mark that
// stripping drops.)
func lowerFull(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i, r := range s {
		switch {
		case r < utf8.RuneSelf:
			if 'A' <= r && r <= 'Z' {
				r += 'a' - 'A'
			}
			b.WriteByte(byte(r))
		case r == 'Σ':
			if finalSigma(s, i) {
				b.WriteRune('ς')
			} else {
				b.WriteRune('σ')
			}
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// finalSigma is Unicode's Final_Sigma condition for the Σ at byte i of s: a cased letter comes
// before it and none after it, skipping case-ignorable characters on both sides.
func finalSigma(s string, i int) bool {
	before := false
	for j := i; j > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:j])
		j -= size
		if !isCaseIgnorable(r) {
			before = isCased(r)
			break
		}
	}
	if !before {
		return false
	}
	for _, r := range s[i+len("Σ"):] {
		if !isCaseIgnorable(r) {
			return !isCased(r)
		}
	}
	return true
}

// isCased is Unicode's Cased property: Lu, Ll, Lt, Other_Uppercase and Other_Lowercase.
func isCased(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Ll, unicode.Lt, unicode.Other_Uppercase, unicode.Other_Lowercase)
}

// midLetterQuote is Word_Break MidLetter, MidNumLet and Single_Quote, the part of
// Case_Ignorable that is not a general category.
var midLetterQuote = []rune{'\'', '.', ':', 0xB7, 0x387, 0x55F, 0x5F4, 0x2018, 0x2019, 0x2024, 0x2027,
	0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A}

// isCaseIgnorable is Unicode's Case_Ignorable property.
func isCaseIgnorable(r rune) bool {
	return slices.Contains(midLetterQuote, r) || unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// Decode is Hugging Face's decode (skip_special_tokens=False, clean_up_tokenization_spaces=True):
// pieces are joined with spaces, a "##" piece glued to the one before, and the spaces before
// . ? ! , and in contractions ("don ' t" -> "don't") removed. Ids outside the vocab decode to
// U+FFFD, where Hugging Face gives "[UNK]".
func (w *WordPiece) Decode(ids []int) string { return w.decode(ids, false) }

// DecodeSkippingSpecials is Decode without the special tokens (skip_special_tokens=True).
func (w *WordPiece) DecodeSkippingSpecials(ids []int) string { return w.decode(ids, true) }

func (w *WordPiece) decode(ids []int, skipSpecials bool) string {
	var s strings.Builder
	first := true
	for _, id := range ids {
		tok := string(utf8.RuneError)
		if id >= 0 && id < len(w.tokens) {
			tok = w.tokens[id]
		}
		if _, special := w.specials.text(id); special && skipSpecials {
			continue
		}
		if !first {
			if rest, ok := strings.CutPrefix(tok, continuation); ok {
				tok = rest
			} else {
				tok = " " + tok
			}
		}
		first = false
		s.WriteString(cleanUpTokenization(tok))
	}
	return cleanUpTokenization(s.String())
}

// cleanUpTokenization removes the spaces a word-level join puts before punctuation and
// English contractions (Hugging Face's clean_up_tokenization, applied in the same order).
func cleanUpTokenization(s string) string {
	if !strings.Contains(s, " ") {
		return s
	}
	for _, p := range [...][2]string{
		{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
		{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
	} {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

// isWordPieceCut: cutting before ASCII whitespace is safe. No special token holds whitespace;
// cleaning, CJK spacing and accent stripping work per character (whitespace is a starter, so
// NFD never reorders across it); the Final_Sigma context stops at whitespace (neither cased nor
// case-ignorable); and words never span it.
func isWordPieceCut(text []byte, p int) bool {
	switch text[p] {
	case ' ', '\n', '\t', '\r':
		return true
	}
	return false
}
