package hf

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// GPT-2's merges.txt as published (openai's vocab.bpe, the Hub's merges.txt): its first and last
// lines. The file has the version line and 50,000 merges, each line ending in "\n".
var (
	mergesHead = "#version: 0.2\nĠ t\nĠ a\nh e\ni n\nr e\no n\nĠt he\ne r\nĠ s\na t\nĠ w\nĠ o\ne n\nĠ c\ni t\ni s\na n\no r\ne s\nĠ b\ne d\nĠ f\nin g\nĠ p\no u\nĠa n\na l\na r\nĠt o\n"
	mergesTail = "Com par\nĠampl ification\nom inated\nĠreg ress\nĠColl ider\nĠinform ants\nĠg azed\n"
)

// writeGPT2Tokenizer writes the GPT-2 tokenizer files into a temp dir and returns it.
func writeGPT2Tokenizer(t *testing.T) (string, tokenizer.Tokenizer) {
	t.Helper()
	tok, err := tokenizer.GPT2()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, why, err := writeTokenizer(dir, tok, gpt.Config{VocabSize: tokenizer.GPT2VocabSize, BlockSize: 1024})
	if err != nil || why != "" || !slices.Equal(files, []string{VocabFile, MergesFile, TokenizerConfigFile}) {
		t.Fatalf("wrote %v (%q), err %v", files, why, err)
	}
	return dir, tok
}

func TestGPT2TokenizerFilesMatchPublished(t *testing.T) {
	dir, _ := writeGPT2Tokenizer(t)
	merges, err := os.ReadFile(filepath.Join(dir, MergesFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(merges, []byte("\n")); n != 50001 {
		t.Errorf("merges.txt has %d lines, want 50001", n)
	}
	if !bytes.HasPrefix(merges, []byte(mergesHead)) {
		t.Errorf("merges.txt starts\n%s\nwant\n%s", merges[:len(mergesHead)], mergesHead)
	}
	if !bytes.HasSuffix(merges, []byte(mergesTail)) {
		t.Errorf("merges.txt ends\n%s\nwant\n%s", merges[len(merges)-len(mergesTail):], mergesTail)
	}
	raw, err := os.ReadFile(filepath.Join(dir, VocabFile))
	if err != nil {
		t.Fatal(err)
	}
	var vocab map[string]int
	if err := json.Unmarshal(raw, &vocab); err != nil {
		t.Fatal(err)
	}
	if len(vocab) != 50257 {
		t.Errorf("vocab.json has %d entries, want 50257", len(vocab))
	}
	// Known ids of GPT-2's encoder.json.
	for token, id := range map[string]int{
		"!": 0, "\"": 1, "~": 93, "¡": 94, "ÿ": 187, "Ā": 188, "Ġ": 220, "Ń": 255,
		"Ġt": 256, "Ġthe": 262, "Ċ": 198, "Ġgazed": 50255, "<|endoftext|>": 50256,
	} {
		if vocab[token] != id {
			t.Errorf("vocab.json: %q is %d, want %d", token, vocab[token], id)
		}
	}
	if !bytes.HasPrefix(raw, []byte(`{"!":0,"\"":1,"#":2,`)) || !bytes.HasSuffix(raw, []byte(`"Ġgazed":50255,"<|endoftext|>":50256}`)) {
		t.Errorf("vocab.json is not compact JSON in id order: %.40s ... %s", raw, raw[len(raw)-40:])
	}
}

// TestGPT2TokenizerFilesEncodeLikeGPT2go runs GPT-2's own algorithm (pre-tokenize, map bytes to
// characters, apply merges.txt by rank, look up vocab.json) over the written files and checks that
// it gives gpt2go's ids.
func TestGPT2TokenizerFilesEncodeLikeGPT2go(t *testing.T) {
	dir, tok := writeGPT2Tokenizer(t)
	bpe := loadBPE(t, dir)
	texts := []string{
		"Hello, world! It's a test: don't we'll they've I'm you'd she's 12345 + 3.14159 = x\n\n  indented\tand tabbed   \n",
		"Ünïcödé: café, naïve, 日本語のテキスト, Ελληνικά, 🙂👍🏽 — «quotes» and … ellipses",
		"<|endoftext|> is plain text here; so are  double  spaces and trailing spaces   ",
	}
	if path := shakespearePath(); path != "" {
		if text, err := os.ReadFile(path); err == nil {
			texts = append(texts, string(text[:200_000]))
		}
	}
	for _, text := range texts {
		want := tok.Encode([]byte(text))
		got := bpe.encode(text)
		if !slices.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("ids differ at %d (of %d/%d): got %v, want %v (text %.40q)", i, len(got), len(want), got[i:min(i+5, len(got))], want[i:min(i+5, len(want))], text)
		}
	}
}

func shakespearePath() string {
	if p := os.Getenv("GPT2GO_SHAKESPEARE"); p != "" {
		return p
	}
	p := filepath.Join("..", "..", "shared", "data", "tinyshakespeare.txt")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

func TestByteTokenizerFiles(t *testing.T) {
	dir := t.TempDir()
	files, why, err := writeTokenizer(dir, tokenizer.Byte(), gpt.Config{VocabSize: 257, BlockSize: 64})
	if err != nil || why != "" || len(files) != 3 {
		t.Fatalf("wrote %v (%q), err %v", files, why, err)
	}
	bpe := loadBPE(t, dir)
	text := "byte level: ÿ\x00\x01 \n\t日本"
	want := tokenizer.Byte().Encode([]byte(text))
	if got := bpe.encode(text); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// BERT's specials appended to the byte tokenizer keep their ids and roles.
	withSpecials, err := tokenizer.WithBERTSpecials(tokenizer.Byte())
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if _, why, err := writeTokenizer(dir, withSpecials, gpt.Config{VocabSize: 261, BlockSize: 64}); err != nil || why != "" {
		t.Fatalf("byte with specials: %q, %v", why, err)
	}
	bpe = loadBPE(t, dir)
	if got := bpe.encode(text); !slices.Equal(got, want) {
		t.Errorf("with specials: got %v, want %v", got, want)
	}
	var tc map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, TokenizerConfigFile))
	json.Unmarshal(raw, &tc)
	for id, text := range map[int]string{256: "<|endoftext|>", 257: "[PAD]", 258: "[CLS]", 259: "[SEP]", 260: "[MASK]"} {
		if bpe.vocab[text] != id {
			t.Errorf("vocab.json: %s is %d, want %d", text, bpe.vocab[text], id)
		}
	}
	if tc["pad_token"] != "[PAD]" || tc["mask_token"] != "[MASK]" || tc["eos_token"] != "<|endoftext|>" {
		t.Errorf("tokenizer_config.json %v; want the specials' roles", tc)
	}

	// A char tokenizer has no GPT2Tokenizer form: no files, and a reason.
	char, err := tokenizer.NewChar("abc", true)
	if err != nil {
		t.Fatal(err)
	}
	files, why, err = writeTokenizer(t.TempDir(), char, gpt.Config{VocabSize: 4})
	if err != nil || files != nil || !strings.Contains(why, "char") {
		t.Errorf("char tokenizer: wrote %v, why %q, err %v", files, why, err)
	}
}

// gpt2ByteChars is GPT-2's bytes_to_unicode as published, built independently of byteRunes: the
// bytes that print as themselves, in order, then every other byte mapped to 256, 257, ...
func gpt2ByteChars() map[byte]string {
	var bs []int
	for _, r := range [][2]int{{'!', '~'}, {0xA1, 0xAC}, {0xAE, 0xFF}} {
		for b := r[0]; b <= r[1]; b++ {
			bs = append(bs, b)
		}
	}
	cs := slices.Clone(bs)
	n := 0
	for b := range 256 {
		if !slices.Contains(bs, b) {
			bs = append(bs, b)
			cs = append(cs, 256+n)
			n++
		}
	}
	m := map[byte]string{}
	for i, b := range bs {
		m[byte(b)] = string(rune(cs[i]))
	}
	return m
}

// testBPE is GPT-2's encoder written from its published description, reading only vocab.json and
// merges.txt.
type testBPE struct {
	chars map[byte]string
	vocab map[string]int
	ranks map[[2]string]int
}

func loadBPE(t *testing.T, dir string) *testBPE {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, VocabFile))
	if err != nil {
		t.Fatal(err)
	}
	b := &testBPE{chars: gpt2ByteChars(), ranks: map[[2]string]int{}}
	if err := json.Unmarshal(raw, &b.vocab); err != nil {
		t.Fatal(err)
	}
	merges, err := os.ReadFile(filepath.Join(dir, MergesFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(merges), "\n"), "\n")
	if lines[0] != "#version: 0.2" {
		t.Fatalf("merges.txt starts with %q", lines[0])
	}
	for i, line := range lines[1:] {
		left, right, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(right, " ") {
			t.Fatalf("merges.txt line %d is %q", i+2, line)
		}
		b.ranks[[2]string{left, right}] = i
	}
	return b
}

func (b *testBPE) encode(text string) []int {
	var ids []int
	for _, piece := range pretokenize(text) {
		var word []string
		for _, c := range []byte(piece) {
			word = append(word, b.chars[c])
		}
		for len(word) > 1 {
			best, at := -1, -1
			for i := 0; i+1 < len(word); i++ {
				if r, ok := b.ranks[[2]string{word[i], word[i+1]}]; ok && (best < 0 || r < best) {
					best, at = r, i
				}
			}
			if at < 0 {
				break
			}
			word = append(word[:at], append([]string{word[at] + word[at+1]}, word[at+2:]...)...)
		}
		for _, w := range word {
			id, ok := b.vocab[w]
			if !ok {
				panic("token not in vocab.json: " + w)
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// pretokenize splits text as GPT-2's pattern does, trying at each position in order:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func pretokenize(text string) []string {
	var pieces []string
	run := func(s string, in func(rune) bool) int { // bytes of the longest prefix of s in the class
		n := 0
		for n < len(s) {
			r, size := utf8.DecodeRuneInString(s[n:])
			if !in(r) {
				break
			}
			n += size
		}
		return n
	}
	other := func(r rune) bool { return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) }
	for len(text) > 0 {
		n := 0
		for _, c := range []string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"} {
			if strings.HasPrefix(text, c) {
				n = len(c)
				break
			}
		}
		for _, class := range []func(rune) bool{unicode.IsLetter, unicode.IsNumber, other} {
			if n > 0 {
				break
			}
			s := strings.TrimPrefix(text, " ")
			if m := run(s, class); m > 0 {
				n = len(text) - len(s) + m
			}
		}
		if n == 0 { // whitespace: leave the last one for the next piece if a non-space follows
			n = run(text, unicode.IsSpace)
			if n < len(text) {
				_, last := utf8.DecodeLastRuneInString(text[:n])
				if n > last {
					n -= last
				}
			}
		}
		pieces = append(pieces, text[:n])
		text = text[n:]
	}
	return pieces
}

// TestGPT2WithSpecialsFiles: GPT-2 with BERT's specials appended keeps GPT-2's merges and ids.
func TestGPT2WithSpecialsFiles(t *testing.T) {
	plain, _ := writeGPT2Tokenizer(t)
	gpt2, _ := tokenizer.GPT2()
	tok, err := tokenizer.WithBERTSpecials(gpt2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, why, err := writeTokenizer(dir, tok, gpt.Config{VocabSize: tok.VocabSize(), BlockSize: 1024}); err != nil || why != "" {
		t.Fatalf("%q, %v", why, err)
	}
	a, _ := os.ReadFile(filepath.Join(plain, MergesFile))
	b, _ := os.ReadFile(filepath.Join(dir, MergesFile))
	if !bytes.Equal(a, b) {
		t.Errorf("merges.txt changed with the specials appended")
	}
	bpe := loadBPE(t, dir)
	if len(bpe.vocab) != 50261 || bpe.vocab["[MASK]"] != 50260 || bpe.vocab["Ġthe"] != 262 {
		t.Errorf("vocab.json: %d entries, [MASK] %d, Ġthe %d", len(bpe.vocab), bpe.vocab["[MASK]"], bpe.vocab["Ġthe"])
	}
}
