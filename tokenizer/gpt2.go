package tokenizer

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	tiktoken "github.com/tiktoken-go/tokenizer"
)

// GPT-2's vocabulary: 50,000 merges + 256 bytes + <|endoftext|>.
const (
	GPT2VocabSize = 50257
	GPT2EOT       = 50256
)

// gpt2Pattern is GPT-2's pre-tokenizer (see the cut-point proof below). Its \p{L} and \p{N}
// are Go's unicode tables (unicode.Version: 15.0), so a letter or digit that Unicode added later
// (CJK Extension I from U+2EBF0 in 15.1; U+1C89, Garay, the hieroglyphs from U+13460 in 16.0)
// is neither here, where tiktoken's newer tables have it: "x\U0002EBF0's" ends in "'" "s" here
// ([... 6 82]) and in the contraction "'s" there ([... 338]). The ids still decode to the text;
// the difference goes when Go's tables catch up.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// DEL (U+007F) and its token, the only one of GPT-2's tokens that holds the byte 0x7F.
const (
	del      = 0x7F
	delToken = 221
)

// gpt2Tokenizer is GPT-2's byte-pair encoding, computed by tiktoken-go's r50k_base codec (the
// same ids as OpenAI tiktoken's "gpt2"; the library's own GPT2 constant is broken in v0.10.0),
// except where the text has a DEL (encodeString).
//
// Encode cuts the text into segments at the safe cut points proved below and memoises each
// short segment's ids, so common words cost a map lookup instead of a regexp match and a BPE
// merge; the result is identical to encoding the whole text at once (tested on Tiny Shakespeare
// and fuzzed).
type gpt2Tokenizer struct {
	encoder *tiktoken.Codec // invalid UTF-8 in the input is replaced by U+FFFD, like tiktoken on a Python str
	decoder *tiktoken.Codec // returns the token bytes as they are, so split characters survive
	split   *regexp2.Regexp // gpt2Pattern in regexp2's interpreter, for text with DEL (encodeWithDEL)
	caches  chan *segmentCache
	appendedSpecials
}

var (
	gpt2Once     sync.Once
	gpt2Instance *gpt2Tokenizer
	gpt2Err      error
)

// GPT2 returns the GPT-2 tokenizer: vocab 50257, EOT 50256. Building the vocabulary takes
// ~100 ms the first time; the tokenizer is shared after that.
func GPT2() (Tokenizer, error) {
	gpt2Once.Do(func() {
		enc, err := tiktoken.Get(tiktoken.R50kBase)
		if err != nil {
			gpt2Err = fmt.Errorf("gpt2 tokenizer: %w", err)
			return
		}
		dec, err := tiktoken.Get(tiktoken.R50kBase)
		if err != nil {
			gpt2Err = fmt.Errorf("gpt2 tokenizer: %w", err)
			return
		}
		// Compile, unlike MustCompile, never picks up a generated matcher registered for the
		// pattern; the group keeps it so should that change.
		split, err := regexp2.Compile(`(?:`+gpt2Pattern+`)`, regexp2.None)
		if err != nil {
			gpt2Err = fmt.Errorf("gpt2 tokenizer: %w", err)
			return
		}
		enc.SetErrorMode(tiktoken.ErrorModeReplace)
		dec.SetErrorMode(tiktoken.ErrorModeNone)
		gpt2Instance = &gpt2Tokenizer{
			encoder: &enc,
			decoder: &dec,
			split:   split,
			caches:  make(chan *segmentCache, runtime.GOMAXPROCS(0)),
		}
	})
	return gpt2Instance, gpt2Err
}

func (*gpt2Tokenizer) Name() string     { return "gpt2" }
func (t *gpt2Tokenizer) VocabSize() int { return GPT2VocabSize + t.extra() }
func (*gpt2Tokenizer) EOT() int         { return GPT2EOT }

// Encode is OpenAI tiktoken's encode_ordinary for "gpt2": "<|endoftext|>" in text is
// ordinary text (the library never matches special tokens while encoding).
func (t *gpt2Tokenizer) Encode(text []byte) []int {
	cache := t.getCache()
	defer t.putCache(cache)
	ids := make([]int, 0, len(text)/3+8)
	start := 0
	for p := 1; p+1 < len(text); p++ {
		if isGPT2Cut(text, p) {
			ids = t.encodeSegment(cache, ids, text[start:p])
			start = p
		}
	}
	return t.encodeSegment(cache, ids, text[start:])
}

// encodeString encodes s as tiktoken does. Encode calls it per segment: the cut points are
// proved for the pattern, so they hold whichever engine matches it.
//
// tiktoken-go v0.10.0 matches gpt2Pattern with code that regexp2cg generated, and its ASCII
// table for [^\s\p{L}\p{N}] leaves out U+007F: no alternative matches a DEL, so the library
// skips it ("a\x7fb" came out as [64 65], tiktoken's is [64 221 65]). That bit is looked at
// only for a DEL, so text without one is the library's to encode; text with one is split by
// regexp2's interpreter instead (encodeWithDEL). testdata/gpt2/tiktoken.json, made by OpenAI's
// tiktoken, checks both ways.
func (t *gpt2Tokenizer) encodeString(s string) []uint {
	if strings.IndexByte(s, del) >= 0 {
		return t.encodeWithDEL(s)
	}
	return t.libraryEncode(s)
}

func (t *gpt2Tokenizer) libraryEncode(s string) []uint {
	ids, _, err := (*t.encoder).Encode(s)
	if err != nil {
		// The regexp engine only fails on a match timeout, which r50k_base doesn't set.
		panic(fmt.Sprintf("gpt2 tokenizer: %v", err))
	}
	return ids
}

// encodeWithDEL splits s into pieces with the interpreter and has the library encode each
// piece's runs between DELs. That is BPE on each piece: no token but delToken holds a DEL, so
// no merge joins one to its neighbours, and each run is a single match of the pattern by
// itself, so the library's own splitting leaves it whole. (A piece alone is one match: an
// alternative that failed on it within the text fails on it alone, since only \s+(?!\S) looks
// past its match and then \s+ takes the same whitespace; and a DEL is only ever in a
// ` ?[^\s\p{L}\p{N}]+` piece, whose runs are a space or that class after an optional space.)
func (t *gpt2Tokenizer) encodeWithDEL(s string) []uint {
	s = replaceInvalidUTF8(s) // as the library does before it splits
	var ids []uint
	m, err := t.split.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = t.split.FindNextMatch(m) {
		piece := m.String()
		for {
			i := strings.IndexByte(piece, del)
			if i < 0 {
				break
			}
			ids = append(ids, t.libraryEncode(piece[:i])...)
			ids = append(ids, delToken)
			piece = piece[i+1:]
		}
		ids = append(ids, t.libraryEncode(piece)...)
	}
	if err != nil {
		panic(fmt.Sprintf("gpt2 tokenizer: %v", err)) // no timeout is set, as in libraryEncode
	}
	return ids
}

// replaceInvalidUTF8 replaces each maximal invalid subpart of s (the longest prefix that could
// start a character, else one byte) with U+FFFD, as Python's decode(errors="replace") and the
// library do.
func replaceInvalidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			for n < len(s) && !utf8.FullRuneInString(s[:n+1]) {
				n++
			}
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

func toInts(dst []int, ids []uint) []int {
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}

func (t *gpt2Tokenizer) encodeSegment(cache *segmentCache, dst []int, seg []byte) []int {
	if len(seg) == 0 {
		return dst
	}
	if len(seg) > maxCachedSegment {
		return toInts(dst, t.encodeString(string(seg)))
	}
	if ids, ok := cache.ids[string(seg)]; ok {
		for _, id := range ids {
			dst = append(dst, int(id))
		}
		return dst
	}
	ids := t.encodeString(string(seg))
	cache.put(seg, ids)
	return toInts(dst, ids)
}

func (t *gpt2Tokenizer) Decode(ids []int) string {
	var s strings.Builder
	run := make([]uint, 0, len(ids))
	flush := func() {
		if len(run) == 0 {
			return
		}
		text, err := (*t.decoder).Decode(run)
		if err != nil {
			text = string(replacementChar) // unreachable: every id in run is in the vocabulary
		}
		s.WriteString(text)
		run = run[:0]
	}
	for _, id := range ids {
		if special, ok := decodeSpecial(t, id); ok {
			flush()
			s.WriteString(special)
			continue
		}
		run = append(run, uint(id))
	}
	flush()
	return s.String()
}

const replacementChar = '\uFFFD'

// Cut points for GPT-2's pre-tokenizer.
//
// GPT-2 first splits text into pieces with the regexp
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// matched left to right (a backtracking engine: at each position the first alternative that
// matches wins, the next match starts where it ended), then runs BPE inside each piece; BPE never
// merges across pieces. So cutting the text at p and encoding both parts separately gives the
// same ids iff both parts pre-tokenize into the same pieces as the whole text does, i.e. iff p is
// a piece boundary of the whole text and the pieces before it don't change when the text ends at
// p. Every character is matched by some alternative, so the pieces tile the text.
//
// Claim: p is safe when text[p] is ' ' or '\n' and text[p+1] is a printable non-space ASCII byte
// (0x21..0x7E), whatever comes before p or after p+1. Write w = text[p], c = text[p+1]; w is
// whitespace and c is not under every definition of \s (Unicode, .NET, Perl), and c is one byte.
//
// After p: the pattern has no lookbehind and no anchors, so a match starting at p (or later)
// sees only text[p:]. Once p is shown to be a boundary, the pieces after it are those of text[p:]
// alone.
//
// Before p: take a match starting at i < p and compare the whole text W with the prefix A =
// text[:p]. Each alternative either matches the same span in both or fails in both:
//   - the contractions are literals of letters and an apostrophe; one reaching p would need
//     text[p] to be a letter, but it is w. So it lies before p in both or fails in both.
//   - ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: the optional space is text[i] with i < p;
//     the class run that follows can't contain w (whitespace is in none of these classes), so
//     the greedy run stops at or before p in W and in A alike (if i+1 == p the run is empty and
//     the alternative fails in both).
//   - `\s+(?!\S)`: if the whitespace run from i ends at j < p (text[j] is not whitespace), W and
//     A agree. Otherwise the run covers text[i..p] in W, which is >= 2 characters, and stops at p+1
//     because c is not whitespace; the lookahead fails there, the engine backs off one character
//     and succeeds at p (text[p] = w is not \S): the match is text[i:p]. In A the run ends at the
//     end of the text, where the lookahead succeeds: also text[i:p].
//   - `\s+` is tried only when `\s+(?!\S)` failed, which by the above means a run that ends
//     before p (a run reaching p always succeeds), so it is the same in both.
//
// So every piece starting before p ends at or before p in W, the same as in A, and since pieces
// tile the text one starts exactly at p. Hence p is a boundary and both sides pre-tokenize as in
// the whole text. (At p itself, W yields w alone when w is '\n', and " c..." or " " for a space.)
//
// Invalid UTF-8: the encoder first replaces each maximal invalid sequence with U+FFFD. Such a
// sequence never contains an ASCII byte, so it never straddles p and replacing per part equals
// replacing the whole.
//
// Second claim: p is safe when text[p-1] and text[p] are printable ASCII of two different classes
// among letters [A-Za-z], digits [0-9] and the rest (0x21..0x7E: punctuation and symbols, in
// neither \p{L} nor \p{N}), unless text[p-1] is an apostrophe. This gives lines without
// whitespace (base64, minified code, hex) places to cut, which the first claim does not. After p
// the argument is as above. Before p, take the piece holding text[p-1], starting at i < p:
//   - a contraction ends in a letter that follows an apostrophe or a letter of the literal; one
//     reaching past p would need text[p] to be a letter after a letter, which a class boundary
//     is not, and one reaching p ends there in both W and A;
//   - ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: the run holds text[p-1]'s class and so stops
//     at p in W, and at the end in A: the same span. (The optional space is text[i], i < p-1 or
//     absent.) It could not be an earlier alternative instead: the contraction alternatives are
//     tried first in both and match or fail alike, by the point above;
//   - the whitespace alternatives cannot hold text[p-1]; a whitespace run before it ends before
//     p-1, where W and A agree, lookahead included.
//
// Pieces before the one holding text[p-1] end before p-1 and are the same in both. An apostrophe
// at p-1 is left out: "'s" is a contraction in the whole text, and "'" then "s" when cut.
func isGPT2Cut(text []byte, p int) bool {
	w, c := text[p], text[p+1]
	if (w == ' ' || w == '\n') && c > ' ' && c < 0x7F {
		return true
	}
	a := text[p-1]
	ca, cw := asciiClass(a), asciiClass(w)
	return ca != 0 && cw != 0 && ca != cw && a != '\''
}

// asciiClass is 1 for an ASCII letter, 2 for a digit, 3 for other printable non-space ASCII
// (0x21..0x7E), and 0 for everything else.
func asciiClass(b byte) int {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z':
		return 1
	case '0' <= b && b <= '9':
		return 2
	case b > ' ' && b < 0x7F:
		return 3
	}
	return 0
}

// Segment memo. Words recur (Tiny Shakespeare: ~250k segments, ~25k distinct), so encoding
// each distinct segment once makes Encode several times faster than the library alone. Caches
// are per goroutine (a small free list, not sync.Pool, whose contents a GC would drop), and
// bounded: a full cache is cleared, so memory does not grow with the corpus.
const (
	maxCachedSegment = 32      // bytes; longer segments are rare and go straight to the library
	maxCacheEntries  = 1 << 17 // ~10 MB per cache
	cacheSlabSize    = 1 << 16 // ids per arena slab
)

type segmentCache struct {
	ids  map[string][]int32
	slab []int32 // arena the map's values point into
}

func newSegmentCache() *segmentCache {
	return &segmentCache{ids: make(map[string][]int32)}
}

func (c *segmentCache) put(seg []byte, ids []uint) {
	if len(c.ids) >= maxCacheEntries {
		clear(c.ids)
	}
	if cap(c.slab)-len(c.slab) < len(ids) {
		c.slab = make([]int32, 0, max(cacheSlabSize, len(ids)))
	}
	start := len(c.slab)
	for _, id := range ids {
		c.slab = append(c.slab, int32(id))
	}
	c.ids[string(seg)] = c.slab[start:len(c.slab):len(c.slab)]
}

func (t *gpt2Tokenizer) getCache() *segmentCache {
	select {
	case c := <-t.caches:
		return c
	default:
		return newSegmentCache()
	}
}

func (t *gpt2Tokenizer) putCache(c *segmentCache) {
	select {
	case t.caches <- c:
	default: // free list full: let this one go
	}
}
