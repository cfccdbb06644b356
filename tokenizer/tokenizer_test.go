package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// shakespeare returns Tiny Shakespeare (env GPT2GO_SHAKESPEARE or the shared copy) or skips.
func shakespeare(tb testing.TB) []byte {
	tb.Helper()
	path := os.Getenv("GPT2GO_SHAKESPEARE")
	if path == "" {
		path = filepath.Join("..", "..", "shared", "data", "tinyshakespeare.txt")
	}
	text, err := os.ReadFile(path)
	if err != nil {
		tb.Skipf("Tiny Shakespeare not available (%v); set GPT2GO_SHAKESPEARE to its path", err)
	}
	return text
}

func gpt2(tb testing.TB) *gpt2Tokenizer {
	tb.Helper()
	tok, err := GPT2()
	if err != nil {
		tb.Fatal(err)
	}
	return tok.(*gpt2Tokenizer)
}

// encodeWhole is the whole text encoded in one call, without segments or cache: the reference
// Encode must equal.
func (t *gpt2Tokenizer) encodeWhole(text []byte) []int {
	return toInts(nil, t.encodeString(string(text)))
}

func TestGPT2Shakespeare(t *testing.T) {
	text := shakespeare(t)
	tok := gpt2(t)
	ids := tok.Encode(text)
	if len(ids) != 338025 {
		t.Fatalf("Tiny Shakespeare encodes to %d tokens, want 338,025 (tiktoken gpt2)", len(ids))
	}
	if want := tok.encodeWhole(text); !slices.Equal(ids, want) {
		t.Fatalf("segmented Encode differs from the library's whole-text encoding at %d", firstDiff(ids, want))
	}
	if got := tok.Decode(ids); got != string(text) {
		t.Fatalf("Decode(Encode(text)) != text")
	}
	// Encoding again hits the warm cache and must give the same ids.
	if again := tok.Encode(text); !slices.Equal(again, ids) {
		t.Fatalf("second Encode differs")
	}
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestGPT2KnownIDs(t *testing.T) {
	tok := gpt2(t)
	tests := []struct {
		text string
		want []int
	}{
		{"Hello world", []int{15496, 995}},
		// encode_ordinary: the special string is plain text, not EOT 50256.
		{"hello <|endoftext|> world", []int{31373, 1279, 91, 437, 1659, 5239, 91, 29, 995}},
		{"", []int{}},
	}
	for _, tc := range tests {
		got := tok.Encode([]byte(tc.text))
		if !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	if tok.VocabSize() != 50257 || tok.EOT() != 50256 || tok.Name() != "gpt2" {
		t.Errorf("gpt2: vocab %d eot %d name %q", tok.VocabSize(), tok.EOT(), tok.Name())
	}
}

// TestGPT2MatchesTiktoken compares Encode with OpenAI's tiktoken on
// testdata/gpt2/tiktoken.json (tools/reference/gen_tiktoken.mjs): every ASCII character in
// context, DEL, and random texts of many scripts, whitespace and contractions. Both ways of
// encoding are checked on every text: the library's (for text without DEL) and the
// interpreter's split (encodeWithDEL), so each stands for the other where it is not used.
func TestGPT2MatchesTiktoken(t *testing.T) {
	b, err := os.ReadFile("testdata/gpt2/tiktoken.json")
	if err != nil {
		t.Fatal(err)
	}
	var fixture struct {
		Cases []struct {
			Name         string `json:"name"`
			Text         string `json:"text"`
			IDs          []int  `json:"ids"`
			NewerUnicode bool   `json:"newer_unicode"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &fixture); err != nil {
		t.Fatal(err)
	}
	if len(fixture.Cases) < 1000 {
		t.Fatalf("only %d fixture cases", len(fixture.Cases))
	}
	tok := gpt2(t)
	for _, c := range fixture.Cases {
		if c.NewerUnicode && strings.ContainsFunc(c.Text, func(r rune) bool { return r >= utf8.RuneSelf && !unicode.IsLetter(r) }) {
			// A letter that Go's tables (unicode.Version) don't have yet: see gpt2.go.
			continue
		}
		if got := tok.Encode([]byte(c.Text)); !slices.Equal(got, c.IDs) {
			t.Errorf("%s: Encode(%q) = %v, tiktoken gives %v", c.Name, c.Text, got, c.IDs)
		}
		if got := toInts(nil, tok.encodeWithDEL(c.Text)); !slices.Equal(got, c.IDs) {
			t.Errorf("%s: encodeWithDEL(%q) = %v, tiktoken gives %v", c.Name, c.Text, got, c.IDs)
		}
		if !strings.ContainsRune(c.Text, del) {
			if got := toInts(nil, tok.libraryEncode(c.Text)); !slices.Equal(got, c.IDs) {
				t.Errorf("%s: the library encodes %q as %v, tiktoken as %v", c.Name, c.Text, got, c.IDs)
			}
		}
		if got := tok.Decode(c.IDs); got != c.Text {
			t.Errorf("%s: Decode(%v) = %q, want %q", c.Name, c.IDs, got, c.Text)
		}
	}
}

// adversarial strings for the cut-point proof: whitespace runs around cuts, contractions,
// digits, unicode letters and spaces, CRLF, invalid UTF-8.
var adversarial = []string{
	"a b", "a  b", "a   b", "  a", "a  ", "a \n b", "a\n\nb", "a \nb", "a\n b", "\n\n\nx",
	"x \n\n y", "x\t\nY", "x\r\nY", "x \r\n Y", "it's I'm we'll they've he'd you're don't",
	" 's 't\n're\n've 'm 'll 'd", "'\n's", "''s", "x's\n'S", "1 2  3\n4\n 5 12345 3.14 1,000",
	"héllo wörld\nÜber\n日本語 テキスト\n한국어", "\u00a0a\u00a0 b\u2003\nc\u3000d", "a\u0085\nb",
	"!!! ??? ... --- \n### $$$", " !\n!", "tab\there\n\tindent\n  two\n    four\nend",
	"\xff\xfe a\n\xc3b \xe2\x82\n!", "emoji 😀 😀😀\n😀x", "<|endoftext|>\n<|endoftext|> x",
	"     \n     ", "\n", " ", "", "a", "MixedCase WORDS\nCAPS's", "x\v\fy \v z",
	"a\x7fb 't\x7f's\n\x7f \x7f", "\xe2\x82\x7f\xff \x7f\xed\xa0\x80",
	// class boundaries without whitespace (base64, minified code, contractions glued on)
	"TWFuIGlzIGRpc3Rpbmd1aXNoZWQsIG5vdCBvbmx5IGJ5IGhpcyByZWFzb24sIGJ1dCBi+/9ab==",
	"function(a,b){return a.x[0]+b['y']*3.5e-7;}var c=d||{};", "x's'5'a'ra'Ab'dd'LL1's'", "it's'ten's2'3ve",
	"0x7fFF_a9;;a9Z", "日本a1b2日'本's", "a'", "'a", "9'", "_'t", "e'\x7f's", "ab\x00cd1\xff2",
}

func TestGPT2Adversarial(t *testing.T) {
	tok := gpt2(t)
	for _, s := range adversarial {
		checkGPT2Cuts(t, tok, []byte(s))
	}
	// the same strings glued together, so that cuts fall between them
	checkGPT2Cuts(t, tok, []byte(strings.Join(adversarial, "")))
	checkGPT2Cuts(t, tok, []byte(strings.Join(adversarial, " ")))
	checkGPT2Cuts(t, tok, []byte(strings.Join(adversarial, "\n")))
}

// checkGPT2Cuts checks that Encode, and encoding the parts between every safe cut separately,
// equal the library's encoding of the whole text.
func checkGPT2Cuts(t *testing.T, tok *gpt2Tokenizer, text []byte) {
	t.Helper()
	want := tok.encodeWhole(text)
	if got := tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, library gives %v", text, got, want)
	}
	if !slices.Contains(text, del) {
		// The interpreter's split, which text with DEL takes, agrees with the library.
		if got := toInts(nil, tok.encodeWithDEL(string(text))); !slices.Equal(got, want) {
			t.Errorf("encodeWithDEL(%q) = %v, library gives %v", text, got, want)
		}
	}
	var pieces []int
	start := 0
	for p := 1; p+1 < len(text); p++ {
		if isGPT2Cut(text, p) {
			pieces = append(pieces, tok.encodeWhole(text[start:p])...)
			start = p
		}
	}
	pieces = append(pieces, tok.encodeWhole(text[start:])...)
	if !slices.Equal(pieces, want) {
		t.Errorf("encoding %q cut at every safe point gives %v, whole gives %v", text, pieces, want)
	}
	// SafeCut and NextSafeCut on every prefix must give safe cuts of the whole text.
	for end := 0; end <= len(text); end++ {
		for _, p := range []int{SafeCut(tok, text[:end]), NextSafeCut(tok, text[:end], end/2)} {
			if p <= 0 {
				continue
			}
			split := append(tok.encodeWhole(text[:p]), tok.encodeWhole(text[p:])...)
			if !slices.Equal(split, want) {
				t.Errorf("cut at %d of %q is not safe in %q", p, text[:end], text)
			}
		}
	}
}

func FuzzGPT2Cuts(f *testing.F) {
	for _, s := range adversarial {
		f.Add([]byte(s))
	}
	tok := gpt2(f)
	f.Fuzz(func(t *testing.T, text []byte) {
		if len(text) > 256 {
			return
		}
		checkGPT2Cuts(t, tok, text)
	})
}

// TestGPT2InvalidUTF8WithDEL: text with DEL replaces invalid UTF-8 as the library does, each
// maximal invalid subpart by one U+FFFD (E2 82 is one, ED A0 80 three), as Python's
// decode(errors="replace") before tiktoken.
func TestGPT2InvalidUTF8WithDEL(t *testing.T) {
	tok := gpt2(t)
	for invalid, replaced := range map[string]string{
		"\xe2\x82\x7f\xff":                "\ufffd\x7f\ufffd",
		"a\xf0\x9f\x98\x7f\xed\xa0\x80 b": "a\ufffd\x7f\ufffd\ufffd\ufffd b",
		"\x7f\xc3":                        "\x7f\ufffd",
	} {
		got, want := tok.Encode([]byte(invalid)), tok.Encode([]byte(replaced))
		if !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v as for %q", invalid, got, want, replaced)
		}
	}
}

func TestGPT2DecodePieces(t *testing.T) {
	tok := gpt2(t)
	text := []byte("日本語 and 😀 emoji")
	ids := tok.Encode(text)
	var joined string
	for _, id := range ids {
		joined += tok.Decode([]int{id}) // token by token, as a sampler streams
	}
	if joined != string(text) {
		t.Errorf("token-by-token decode = %q, want %q", joined, text)
	}
	got := tok.Decode([]int{15496, GPT2EOT, 995, 50300, -1})
	if want := "Hello" + EOTText + " world\uFFFD\uFFFD"; got != want {
		t.Errorf("Decode = %q, want %q", got, want)
	}
}

func TestByte(t *testing.T) {
	tok := Byte()
	text := []byte("a\x00\xff€")
	ids := tok.Encode(text)
	if !slices.Equal(ids, []int{'a', 0, 255, 0xe2, 0x82, 0xac}) {
		t.Fatalf("Encode = %v", ids)
	}
	if got := tok.Decode(ids); got != string(text) {
		t.Fatalf("Decode = %q", got)
	}
	if got := tok.Decode([]int{'x', 256, 257}); got != "x"+EOTText+"\uFFFD" {
		t.Fatalf("Decode specials = %q", got)
	}
	if tok.VocabSize() != 257 || tok.EOT() != 256 || tok.Name() != "byte" {
		t.Fatalf("byte: vocab %d eot %d", tok.VocabSize(), tok.EOT())
	}
}

func TestCharShakespeare(t *testing.T) {
	text := shakespeare(t)
	alphabet := Alphabet(text)
	c, err := NewChar(alphabet, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.VocabSize() != 65 || c.EOT() != -1 {
		t.Fatalf("Tiny Shakespeare char vocab = %d (eot %d), want 65 like nanoGPT", c.VocabSize(), c.EOT())
	}
	ids := c.Encode(text)
	if len(ids) != utf8.RuneCount(text) {
		t.Fatalf("%d ids for %d runes", len(ids), utf8.RuneCount(text))
	}
	if c.Decode(ids) != string(text) {
		t.Fatal("Decode(Encode(text)) != text")
	}
	// nanoGPT: stoi is the sorted character list, so '\n' is 0, ' ' is 1, 'a' is 39.
	if got := c.Encode([]byte("\n a")); !slices.Equal(got, []int{0, 1, 39}) {
		t.Fatalf("Encode(\"\\n a\") = %v, want [0 1 39]", got)
	}
}

func TestChar(t *testing.T) {
	c, err := NewChar(Alphabet([]byte("hello é\xff")), true)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Alphabet(); got != " ehloé\uFFFD" {
		t.Fatalf("Alphabet = %q", got)
	}
	if c.VocabSize() != 8 || c.EOT() != 7 {
		t.Fatalf("vocab %d eot %d", c.VocabSize(), c.EOT())
	}
	if got := c.Encode([]byte("hé!o")); !slices.Equal(got, []int{2, 5, 4}) {
		t.Fatalf("Encode drops unknown runes: got %v", got)
	}
	if err := c.Check([]byte("hé!o")); err == nil || !strings.Contains(err.Error(), `'!'`) {
		t.Fatalf("Check = %v", err)
	}
	if err := c.Check([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got := c.Decode([]int{2, 7, 8}); got != "h"+EOTText+"\uFFFD" {
		t.Fatalf("Decode = %q", got)
	}
	for _, bad := range []string{"", "ba", "aa", "\xff"} {
		if _, err := NewChar(bad, false); err == nil {
			t.Errorf("NewChar(%q) accepted", bad)
		}
	}
}

func TestAlphabetSetPieces(t *testing.T) {
	text := []byte("zebra 日本 apple\nÜ")
	var set AlphabetSet
	c, _ := NewChar(Alphabet(text), false)
	for len(text) > 0 {
		p := SafeCut(c, text)
		if p == 0 {
			p = len(text)
		}
		set.Add(text[:p])
		text = text[p:]
	}
	if set.String() != Alphabet([]byte("zebra 日本 apple\nÜ")) {
		t.Fatalf("piecewise alphabet %q", set.String())
	}
}

func TestNew(t *testing.T) {
	for _, name := range Names {
		if name == "wordpiece" {
			continue // needs its vocab: TestWordPieceSpecBuild
		}
		tok, err := New(name, "ab", true)
		if err != nil || tok.Name() != name {
			t.Fatalf("New(%q) = %v, %v", name, tok, err)
		}
	}
	if _, err := New("bpe", "", false); err == nil || !strings.Contains(err.Error(), "gpt2, byte, char") {
		t.Fatalf("New(unknown) error = %v", err)
	}
	if _, err := New("char", "", false); err == nil {
		t.Fatal("char without alphabet accepted")
	}
}

func TestSafeCutByteAndChar(t *testing.T) {
	if p := SafeCut(Byte(), []byte("abc")); p != 3 {
		t.Fatalf("byte SafeCut = %d", p)
	}
	c, _ := NewChar("ab", false)
	if p := SafeCut(c, []byte("a日本")); p != 0 {
		t.Fatalf("char SafeCut with no ASCII after 0 = %d", p)
	}
	if p := SafeCut(c, []byte("日a\xe6\x97")); p != 3 {
		t.Fatalf("char SafeCut = %d, want 3 (before 'a')", p)
	}
	if p := NextSafeCut(c, []byte("a日a日a"), 2); p != 4 {
		t.Fatalf("char NextSafeCut = %d, want 4", p)
	}
	if p := NextSafeCut(c, []byte("a日"), 1); p != -1 {
		t.Fatalf("char NextSafeCut with none = %d", p)
	}
	if p := NextSafeCut(Byte(), []byte("abc"), 0); p != 1 {
		t.Fatalf("byte NextSafeCut = %d", p)
	}
	g := gpt2(t)
	if p := NextSafeCut(g, []byte("ab cd ef"), 3); p != 5 {
		t.Fatalf("gpt2 NextSafeCut = %d, want 5", p)
	}
	if p := NextSafeCut(g, []byte("ab cd "), 3); p != -1 {
		t.Fatalf("gpt2 NextSafeCut needs the byte after the space: got %d", p)
	}
}

// BenchmarkEncodeGPT2 measures this package's Encode (segment cache, one goroutine) and the
// library's whole-text encode, on Tiny Shakespeare.
func BenchmarkEncodeGPT2(b *testing.B) {
	text := shakespeare(b)
	tok := gpt2(b)
	b.Run("segmented", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tok.Encode(text)
		}
	})
	b.Run("library", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tok.encodeWhole(text)
		}
	})
}
