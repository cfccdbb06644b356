package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// wordpieceFixture is tokenizer/testdata/wordpiece/cases.json, written by
// tools/reference/gen_wordpiece.mjs from Hugging Face's tokenizer.
type wordpieceFixture struct {
	Reference     string   `json:"reference"`
	VocabSize     int      `json:"vocab_size"`
	JSPortDiffers []string `json:"js_port_differs"`
	Cases         []struct {
		Name    string          `json:"name"`
		Text    string          `json:"text"`
		Uncased wordpieceResult `json:"uncased"`
		Cased   wordpieceResult `json:"cased"`
	} `json:"cases"`
	DecodeCases []struct {
		IDs                []int  `json:"ids"`
		Decoded            string `json:"decoded"`
		DecodedSkipSpecial string `json:"decoded_skip_special"`
	} `json:"decode_cases"`
}

type wordpieceResult struct {
	IDs                []int    `json:"ids"`
	Tokens             []string `json:"tokens"`
	Decoded            *string  `json:"decoded"` // absent when there are no ids (HF refuses to decode [])
	DecodedSkipSpecial *string  `json:"decoded_skip_special"`
}

const fixtureVocab = "testdata/wordpiece/vocab.txt"

func readWordPieceFixture(t testing.TB) *wordpieceFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/wordpiece/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var f wordpieceFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return &f
}

func fixtureWordPiece(t testing.TB, lowercase bool) *WordPiece {
	t.Helper()
	w, err := ReadWordPiece(fixtureVocab, lowercase)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestWordPieceMatchesHuggingFace compares every fixture case, in both modes: ids, the tokens
// they stand for, decode and decode without specials.
func TestWordPieceMatchesHuggingFace(t *testing.T) {
	f := readWordPieceFixture(t)
	modes := []struct {
		name string
		tok  *WordPiece
		want func(i int) wordpieceResult
	}{
		{"uncased", fixtureWordPiece(t, true), func(i int) wordpieceResult { return f.Cases[i].Uncased }},
		{"cased", fixtureWordPiece(t, false), func(i int) wordpieceResult { return f.Cases[i].Cased }},
	}
	if got := modes[0].tok.VocabSize(); got != f.VocabSize {
		t.Fatalf("vocab size %d, fixture says %d", got, f.VocabSize)
	}
	if len(f.Cases) < 50 {
		t.Fatalf("only %d fixture cases", len(f.Cases))
	}
	checked := 0
	for _, m := range modes {
		for i, c := range f.Cases {
			want := m.want(i)
			got := m.tok.Encode([]byte(c.Text))
			if !slices.Equal(got, want.IDs) {
				var tokens []string
				for _, id := range got {
					tokens = append(tokens, m.tok.Token(id))
				}
				t.Errorf("%s %s: Encode(%q)\n got %q\nwant %q", m.name, c.Name, c.Text, tokens, want.Tokens)
				continue
			}
			for j, id := range got {
				if m.tok.Token(id) != want.Tokens[j] {
					t.Errorf("%s %s: id %d is %q, fixture says %q", m.name, c.Name, id, m.tok.Token(id), want.Tokens[j])
				}
			}
			if want.Decoded != nil {
				if d := m.tok.Decode(got); d != *want.Decoded {
					t.Errorf("%s %s: Decode = %q, want %q", m.name, c.Name, d, *want.Decoded)
				}
				if d := m.tok.DecodeSkippingSpecials(got); d != *want.DecodedSkipSpecial {
					t.Errorf("%s %s: DecodeSkippingSpecials = %q, want %q", m.name, c.Name, d, *want.DecodedSkipSpecial)
				}
			}
			checked++
		}
	}
	w := modes[0].tok
	for _, c := range f.DecodeCases {
		if d := w.Decode(c.IDs); d != c.Decoded {
			t.Errorf("Decode(%v) = %q, want %q", c.IDs, d, c.Decoded)
		}
		if d := w.DecodeSkippingSpecials(c.IDs); d != c.DecodedSkipSpecial {
			t.Errorf("DecodeSkippingSpecials(%v) = %q, want %q", c.IDs, d, c.DecodedSkipSpecial)
		}
	}
	t.Logf("%d encode cases (%d texts x 2 modes) and %d decode cases match %s", checked, len(f.Cases), len(f.DecodeCases), f.Reference)
}

func TestWordPieceSpecials(t *testing.T) {
	w := fixtureWordPiece(t, true)
	want := Specials{PAD: 0, UNK: 100, CLS: 101, SEP: 102, MASK: 103}
	if got := SpecialsOf(w); got != want {
		t.Fatalf("specials %+v, want bert-base's layout %+v", got, want)
	}
	if w.EOT() != 102 || w.Name() != "wordpiece" {
		t.Fatalf("eot %d name %q", w.EOT(), w.Name())
	}
	// Out-of-range ids decode to U+FFFD, like the other tokenizers.
	if got := w.Decode([]int{101, -1, w.VocabSize()}); got != "[CLS] \uFFFD \uFFFD" {
		t.Fatalf("Decode(out of range) = %q", got)
	}
	if got := w.Decode(nil); got != "" {
		t.Fatalf("Decode(nil) = %q", got)
	}
	// WithBERTSpecials leaves a WordPiece as it is.
	if same, err := WithBERTSpecials(w); err != nil || same != Tokenizer(w) {
		t.Fatalf("WithBERTSpecials(wordpiece) = %v, %v", same, err)
	}
}

func TestWordPieceVocabErrors(t *testing.T) {
	dir := t.TempDir()
	specials := "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"
	tests := []struct {
		name, vocab, want string
	}{
		{"empty", "", "is empty"},
		{"blank", "\n\n  \n", "is empty"},
		{"duplicate", specials + "the\nof\nthe\n", `token "the" is on lines 6 and 8`},
		{"empty line", specials + "the\n\nof\n", "line 7 is empty"},
		{"invalid utf8", specials + "a\xffb\n", "line 6 is not valid UTF-8"},
		{"no unk", "[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n", "lacks [UNK]; a BERT vocab needs"},
		{"no mask cls", "[PAD]\n[UNK]\n[SEP]\nthe\n", "lacks [CLS], [MASK];"},
		{"lower-case specials", "[pad]\n[unk]\n[cls]\n[sep]\n[mask]\n", "lacks [PAD], [UNK], [CLS], [SEP], [MASK]"},
	}
	for _, tc := range tests {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".txt")
		if err := os.WriteFile(path, []byte(tc.vocab), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadWordPiece(path, true)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line naming %s and saying %q", tc.name, err, path, tc.want)
		}
	}
	missing := filepath.Join(dir, "nope", "vocab.txt")
	if _, err := ReadWordPiece(missing, true); err == nil || !strings.Contains(err.Error(), missing+" does not exist") {
		t.Errorf("missing file: %v", err)
	}
	// CRLF line endings and a missing final newline are fine.
	path := filepath.Join(dir, "crlf.txt")
	os.WriteFile(path, []byte("[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nthe\r\n##s"), 0o644)
	w, err := ReadWordPiece(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Encode([]byte("The thes")); !slices.Equal(got, []int{5, 5, 6}) {
		t.Fatalf("CRLF vocab: Encode = %v", got)
	}
	if w.VocabText() != "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\n" {
		t.Fatalf("VocabText = %q", w.VocabText())
	}
}

// TestWordPieceSpecBuild: the tokenizer is rebuilt from its record alone (the file may be gone),
// and a record that does not match is refused.
func TestWordPieceSpecBuild(t *testing.T) {
	w := fixtureWordPiece(t, true)
	rec := RecordOf(w)
	if rec.Vocab != w.VocabText() || rec.VocabFile != fixtureVocab || !rec.Lowercase || len(rec.VocabSHA256) != 64 ||
		rec.Specials == nil || *rec.Specials != w.Specials() {
		t.Fatalf("RecordOf = %+v", rec)
	}
	back, err := Spec{Name: "wordpiece", Record: rec}.Build()
	if err != nil {
		t.Fatal(err)
	}
	text := []byte("Paris is the [MASK] of Café 日本.")
	if !slices.Equal(back.Encode(text), w.Encode(text)) || back.VocabSize() != w.VocabSize() || back.EOT() != w.EOT() {
		t.Fatal("rebuilt tokenizer differs")
	}
	cased := rec
	cased.Lowercase = false
	if c, _ := (Spec{Name: "wordpiece", Record: cased}).Build(); slices.Equal(c.Encode(text), w.Encode(text)) {
		t.Fatal("the recorded casing is ignored")
	}
	bad := rec
	bad.Vocab = strings.Replace(bad.Vocab, "the\n", "thee\n", 1)
	if _, err := (Spec{Name: "wordpiece", Record: bad}).Build(); err == nil || !strings.Contains(err.Error(), "vocab_sha256") {
		t.Fatalf("edited vocab: %v", err)
	}
	if _, err := New("wordpiece", "", false); err == nil || !strings.Contains(err.Error(), "--vocab") {
		t.Fatalf("wordpiece without vocab: %v", err)
	}
	moved := rec
	moved.Specials = &Specials{PAD: 1, UNK: 100, CLS: 101, SEP: 102, MASK: 103}
	if _, err := (Spec{Name: "wordpiece", Record: moved}).Build(); err == nil || !strings.Contains(err.Error(), "special token ids") {
		t.Fatalf("wrong specials: %v", err)
	}
}

func TestBERTSpecialsAppended(t *testing.T) {
	g := gpt2(t)
	char, _ := NewChar("ab", true)
	for _, tc := range []struct {
		base  Tokenizer
		first int
	}{{g, 50257}, {Byte(), 257}, {char, 3}} {
		tok, err := WithBERTSpecials(tc.base)
		if err != nil {
			t.Fatal(err)
		}
		name := tok.Name()
		if tc.base.VocabSize() != tc.first || SpecialsOf(tc.base).Any() {
			t.Errorf("%s: the base tokenizer changed: vocab %d, specials %+v", name, tc.base.VocabSize(), SpecialsOf(tc.base))
		}
		want := Specials{PAD: tc.first, UNK: -1, CLS: tc.first + 1, SEP: tc.first + 2, MASK: tc.first + 3}
		if got := SpecialsOf(tok); got != want || tok.VocabSize() != tc.first+4 || tok.EOT() != tc.base.EOT() {
			t.Errorf("%s: specials %+v vocab %d eot %d", name, got, tok.VocabSize(), tok.EOT())
		}
		text := []byte("ab [MASK] ab")
		if !slices.Equal(tok.Encode(text), tc.base.Encode(text)) {
			t.Errorf("%s: specials changed the ids of text", name)
		}
		got := tok.Decode(append(tc.base.Encode([]byte("ab")), tc.first, tc.first+1, tc.first+2, tc.first+3, tc.first+4))
		if got != "ab[PAD][CLS][SEP][MASK]\uFFFD" {
			t.Errorf("%s: Decode = %q", name, got)
		}
		again, _ := WithBERTSpecials(tok)
		if again.VocabSize() != tok.VocabSize() {
			t.Errorf("%s: specials appended twice", name)
		}
		rec := RecordOf(tok)
		back, err := Spec{Name: name, Alphabet: "ab", EOT: true, Record: rec}.Build()
		if err != nil || SpecialsOf(back) != want || back.VocabSize() != tok.VocabSize() {
			t.Errorf("%s: rebuilt from %+v: %v", name, rec, err)
		}
		if SafeCut(tok, []byte("ab ab cd")) != SafeCut(tc.base, []byte("ab ab cd")) {
			t.Errorf("%s: specials changed the safe cuts", name)
		}
	}
	if _, ok := mustSpecials(t, char).(*Char); !ok {
		t.Error("a char tokenizer with specials is no longer a *Char (prompt checks rely on it)")
	}
}

func mustSpecials(t *testing.T, tok Tokenizer) Tokenizer {
	t.Helper()
	s, err := WithBERTSpecials(tok)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wordpieceInvariants checks what holds for any text: ids in range, no panic, the same ids
// when the text is cut at any safe point, and Decode's words re-encoding to the same ids where
// nothing is unknown.
func wordpieceInvariants(t *testing.T, w *WordPiece, text []byte) {
	t.Helper()
	ids := w.Encode(text)
	for _, id := range ids {
		if id < 0 || id >= w.VocabSize() {
			t.Fatalf("Encode(%q) gave id %d outside [0, %d)", text, id, w.VocabSize())
		}
	}
	for p := 1; p < len(text); p++ {
		if !isSafeCut(w, text, p) {
			continue
		}
		split := append(w.Encode(text[:p]), w.Encode(text[p:])...)
		if !slices.Equal(split, ids) {
			t.Fatalf("cut at %d of %q: %v + ... != %v", p, text, split, ids)
		}
	}
	if p := SafeCut(w, text); p > 0 {
		if split := append(w.Encode(text[:p]), w.Encode(text[p:])...); !slices.Equal(split, ids) {
			t.Fatalf("SafeCut %d of %q is not safe", p, text)
		}
	}
	// Decoding normalized text and encoding it again is stable: the decoded string holds the
	// same words, so it encodes to the same ids (specials in the text re-match as specials),
	// unless an [UNK] or a cleanup of spaces around "'" changed the words.
	decoded := w.Decode(ids)
	if !utf8.ValidString(decoded) {
		t.Fatalf("Decode gave invalid UTF-8 for %q", text)
	}
	if !slices.Contains(ids, w.specials.UNK) && !strings.Contains(decoded, "'") && !strings.Contains(decoded, "#") {
		if again := w.Encode([]byte(decoded)); !slices.Equal(again, ids) {
			t.Fatalf("Encode(Decode(Encode(%q))) = %v, want %v (decoded %q)", text, again, ids, decoded)
		}
	}
}

func TestWordPieceInvariants(t *testing.T) {
	f := readWordPieceFixture(t)
	for _, lower := range []bool{true, false} {
		w := fixtureWordPiece(t, lower)
		for _, c := range f.Cases {
			wordpieceInvariants(t, w, []byte(c.Text))
		}
		for _, s := range adversarial {
			wordpieceInvariants(t, w, []byte(s))
		}
	}
}

func TestWordPieceShakespeare(t *testing.T) {
	text := shakespeare(t)
	w := fixtureWordPiece(t, true)
	ids := w.Encode(text)
	unk := 0
	for _, id := range ids {
		if id == w.specials.UNK {
			unk++
		}
	}
	// The fixture vocab is built from Tiny Shakespeare's own words and pieces: every word
	// splits, nothing is unknown.
	if unk != 0 || len(ids) < 250_000 {
		t.Fatalf("%d ids, %d [UNK]", len(ids), unk)
	}
	// Encoding in pieces cut by SafeCut gives the same ids (prepare does that).
	var pieces []int
	rest := text
	for len(rest) > 0 {
		p := SafeCut(w, rest[:min(len(rest), 4096)])
		if p == 0 || len(rest) <= 4096 {
			p = len(rest)
		}
		pieces = append(pieces, w.Encode(rest[:p])...)
		rest = rest[p:]
	}
	if !slices.Equal(pieces, ids) {
		t.Fatalf("piecewise encoding differs at %d", firstDiff(pieces, ids))
	}
}

func FuzzWordPiece(f *testing.F) {
	fixture := readWordPieceFixture(f)
	for _, c := range fixture.Cases {
		f.Add([]byte(c.Text), true)
	}
	for _, s := range adversarial {
		f.Add([]byte(s), false)
	}
	uncased, cased := fixtureWordPiece(f, true), fixtureWordPiece(f, false)
	f.Fuzz(func(t *testing.T, text []byte, lower bool) {
		if len(text) > 512 {
			return
		}
		w := cased
		if lower {
			w = uncased
		}
		wordpieceInvariants(t, w, text)
		// The bytes as ids too, in range or not: Decode must not panic and gives valid UTF-8.
		var ids []int
		for i := 0; i+1 < len(text); i += 2 {
			ids = append(ids, int(text[i])<<5|int(text[i+1])-200)
		}
		for _, d := range []string{w.Decode(ids), w.DecodeSkippingSpecials(ids)} {
			if !utf8.ValidString(d) {
				t.Fatalf("Decode(%v) is not valid UTF-8: %q", ids, d)
			}
		}
	})
}

func BenchmarkEncodeWordPiece(b *testing.B) {
	text := shakespeare(b)
	w := fixtureWordPiece(b, true)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		w.Encode(text)
	}
}
