package prepare

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// fixtureVocab is the WordPiece vocab the tokenizer tests use (bert-base's special ids).
const fixtureVocab = "../tokenizer/testdata/wordpiece/vocab.txt"

// TestWordPiecePrepare: shards hold each document's WordPiece ids after [SEP], chunked parallel
// encoding equals encoding each document whole, and meta.json alone rebuilds the tokenizer once
// the vocab.txt is gone.
func TestWordPiecePrepare(t *testing.T) {
	dir := t.TempDir()
	vocab := filepath.Join(dir, "vocab.txt")
	b, err := os.ReadFile(fixtureVocab)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(vocab, b, 0o644)
	docs := map[string]string{
		"a.txt": strings.Repeat("ROMEO: But soft! what light through yonder window breaks? Café [MASK] 日本語.\n", 300),
		"b.txt": strings.Repeat("It is the east, and Juliet is the sun.  ΣΟΦΟΣ\t\u00a0don't\n", 200),
	}
	writeTree(t, filepath.Join(dir, "in"), docs)
	defer func(old int) { chunkBytes = old }(chunkBytes)
	chunkBytes = 1000 // many chunks per document: the cuts must be safe
	out := filepath.Join(dir, "ds")
	res, err := Run(Options{Inputs: []string{filepath.Join(dir, "in")}, Out: out, Tokenizer: "wordpiece", Vocab: vocab, Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Meta
	want := tokenizer.Specials{PAD: 0, UNK: 100, CLS: 101, SEP: 102, MASK: 103}
	if m.Tokenizer != "wordpiece" || m.VocabSize != strings.Count(string(b), "\n") || m.EOT != 102 || !m.Lowercase ||
		m.Specials == nil || *m.Specials != want || m.Vocab != string(b) || m.VocabFile != vocab || len(m.VocabSHA256) != 64 {
		t.Fatalf("meta: %+v", m.Record.Specials)
	}
	tok, err := tokenizer.ReadWordPiece(vocab, true)
	if err != nil {
		t.Fatal(err)
	}
	var wantIDs []int
	for _, name := range []string{"a.txt", "b.txt"} {
		wantIDs = append(wantIDs, 102)
		wantIDs = append(wantIDs, tok.Encode([]byte(docs[name]))...)
	}
	if got := readAll(t, slices.Concat(res.TrainShards, res.ValShards)); !slices.Equal(got, wantIDs) {
		t.Fatalf("shards hold %d ids, whole-document encoding gives %d (first difference at %d)", len(got), len(wantIDs), firstDiffAt(got, wantIDs))
	}
	if !slices.Contains(wantIDs, 103) || slices.Contains(wantIDs, 100) {
		t.Fatal("[MASK] in the text should be the [MASK] id, and nothing unknown")
	}

	// meta.json on disk: the vocab comes last, and the tokenizer rebuilds without vocab.txt.
	raw, _ := os.ReadFile(filepath.Join(out, data.MetaFile))
	if i, j := strings.Index(string(raw), `"vocab":`), strings.Index(string(raw), `"train_tokens"`); i < j {
		t.Fatalf("vocab is not last in meta.json")
	}
	os.Remove(vocab)
	meta, err := data.ReadMeta(out)
	if err != nil {
		t.Fatal(err)
	}
	back, err := meta.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	text := []byte("Paris is the [MASK] of FRANCE, ΣΟΦΟΣ.")
	if !slices.Equal(back.Encode(text), tok.Encode(text)) || tokenizer.SpecialsOf(back) != want {
		t.Fatal("tokenizer rebuilt from meta.json differs")
	}
	// A hand-edited vocab in meta.json is caught.
	var edited map[string]any
	json.Unmarshal(raw, &edited)
	edited["vocab"] = strings.Replace(edited["vocab"].(string), "the\n", "thee\n", 1)
	raw, _ = json.Marshal(edited)
	os.WriteFile(filepath.Join(out, data.MetaFile), raw, 0o644)
	if meta, err := data.ReadMeta(out); err != nil {
		t.Fatal(err)
	} else if _, err := meta.NewTokenizer(); err == nil || !strings.Contains(err.Error(), "vocab_sha256") {
		t.Fatalf("edited vocab: %v", err)
	}

	// Cased keeps case and accents.
	res, err = Run(Options{Inputs: []string{filepath.Join(dir, "in", "a.txt")}, Out: filepath.Join(dir, "cased"), Tokenizer: "wordpiece",
		Vocab: fixtureVocab, Cased: true, ValFraction: -1})
	if err != nil {
		t.Fatal(err)
	}
	cased, _ := tokenizer.ReadWordPiece(fixtureVocab, false)
	if res.Meta.Lowercase || !slices.Equal(readAll(t, res.TrainShards), append([]int{102}, cased.Encode([]byte(docs["a.txt"]))...)) {
		t.Fatal("cased prepare differs")
	}
}

func firstDiffAt(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestBERTSpecialsPrepare: --bert-specials appends four ids and records them; the shards are
// the same as without (text never produces a special), and without the flag meta.json has no
// specials, as before.
func TestBERTSpecialsPrepare(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.txt")
	os.WriteFile(in, []byte("Hello [MASK] world\n"), 0o644)
	for _, name := range []string{"gpt2", "byte", "char"} {
		plain, err := Run(Options{Inputs: []string{in}, Out: filepath.Join(dir, name), Tokenizer: name, ValFraction: -1})
		if err != nil {
			t.Fatal(err)
		}
		with, err := Run(Options{Inputs: []string{in}, Out: filepath.Join(dir, name+"-bert"), Tokenizer: name, ValFraction: -1, BERTSpecials: true})
		if err != nil {
			t.Fatal(err)
		}
		v := plain.Meta.VocabSize
		want := tokenizer.Specials{PAD: v, UNK: -1, CLS: v + 1, SEP: v + 2, MASK: v + 3}
		if plain.Meta.Specials != nil || with.Meta.Specials == nil || *with.Meta.Specials != want || with.Meta.VocabSize != v+4 || with.Meta.EOT != plain.Meta.EOT {
			t.Errorf("%s: plain %+v / with specials %+v", name, plain.Meta, with.Meta)
		}
		if name == "gpt2" && v != tokenizer.GPT2VocabSize {
			t.Errorf("gpt2 without --bert-specials has vocab %d", v)
		}
		if !slices.Equal(readAll(t, plain.TrainShards), readAll(t, with.TrainShards)) {
			t.Errorf("%s: specials changed the shards", name)
		}
		raw, _ := os.ReadFile(filepath.Join(dir, name, data.MetaFile))
		if strings.Contains(string(raw), "specials") || strings.Contains(string(raw), "vocab\"") {
			t.Errorf("%s: meta.json without specials mentions them: %s", name, raw)
		}
		meta, err := data.ReadMeta(filepath.Join(dir, name+"-bert"))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := meta.NewTokenizer()
		if err != nil || tokenizer.SpecialsOf(tok) != want {
			t.Errorf("%s: rebuilt %v, %v", name, tok, err)
		}
	}
}

// TestOldMetaLoads: a meta.json written before specials existed still loads, without them.
func TestOldMetaLoads(t *testing.T) {
	dir := t.TempDir()
	old := `{"tokenizer": "gpt2", "vocab_size": 50257, "eot": 50256, "train_tokens": 10, "val_tokens": 0, "val_fraction": 0.1, "sources": ["a.txt"]}`
	os.WriteFile(filepath.Join(dir, data.MetaFile), []byte(old), 0o644)
	m, err := data.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := m.NewTokenizer()
	if err != nil || tok.VocabSize() != 50257 || tokenizer.SpecialsOf(tok).Any() {
		t.Fatalf("old meta: %v, %v", tok, err)
	}
}

func TestWordPiecePrepareErrors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	os.WriteFile(text, []byte("hello"), 0o644)
	huge := filepath.Join(dir, "huge.txt")
	var s strings.Builder
	s.WriteString("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
	for i := range 70000 {
		fmt.Fprintf(&s, "w%d\n", i)
	}
	os.WriteFile(huge, []byte(s.String()), 0o644)
	noMask := filepath.Join(dir, "nomask.txt")
	os.WriteFile(noMask, []byte("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n"), 0o644)
	out := filepath.Join(dir, "out")
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no vocab", Options{Tokenizer: "wordpiece"}, "needs its vocab: pass --vocab"},
		{"vocab for gpt2", Options{Tokenizer: "gpt2", Vocab: fixtureVocab}, "--vocab is for --tokenizer wordpiece"},
		{"cased for byte", Options{Tokenizer: "byte", Cased: true}, "--cased is for --tokenizer wordpiece"},
		{"missing vocab", Options{Tokenizer: "wordpiece", Vocab: filepath.Join(dir, "nope.txt")}, "nope.txt does not exist"},
		{"no mask", Options{Tokenizer: "wordpiece", Vocab: noMask}, "lacks [MASK]"},
		{"too big", Options{Tokenizer: "wordpiece", Vocab: huge}, "has 70005 ids, but shards store uint16 (at most 65536 ids)"},
	}
	for _, tc := range tests {
		tc.opts.Inputs, tc.opts.Out = []string{text}, out
		_, err := Run(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line with %q", tc.name, err, tc.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a failed run created the output directory")
	}
}
