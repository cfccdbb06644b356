package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// TestPrepareWordPiece: prepare --tokenizer wordpiece records the vocab in meta.json, a run
// trained on it samples after the vocab.txt is gone, and the flags' misuse fails in one line.
func TestPrepareWordPiece(t *testing.T) {
	dir := t.TempDir()
	vocab := filepath.Join(dir, "vocab.txt")
	b, err := os.ReadFile("../../tokenizer/testdata/wordpiece/vocab.txt")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(vocab, b, 0o644)
	src := filepath.Join(dir, "corpus.txt")
	os.WriteFile(src, []byte(strings.Repeat("ROMEO: But soft! what light through yonder window breaks? [MASK] Café\n", 200)), 0o644)
	out := filepath.Join(dir, "data")
	mustRun(t, "prepare", "--input", src, "--out", out, "--tokenizer", "wordpiece", "--vocab", vocab)
	m, err := data.ReadMeta(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Tokenizer != "wordpiece" || m.EOT != 102 || !m.Lowercase || m.Specials == nil || m.Specials.MASK != 103 || m.Vocab != string(b) {
		t.Fatalf("meta.json: tokenizer %q eot %d lowercase %v specials %+v", m.Tokenizer, m.EOT, m.Lowercase, m.Specials)
	}
	// --bert-specials is redundant with wordpiece (its vocab has the specials): a note, the same data.
	again := filepath.Join(dir, "again")
	code, _, errOut := gpt2go(t, "prepare", "--input", src, "--out", again, "--tokenizer", "wordpiece", "--vocab", vocab, "--bert-specials")
	if m2, err := data.ReadMeta(again); code != 0 || err != nil || strings.Count(errOut, "note: --bert-specials changes nothing with --tokenizer wordpiece") != 1 ||
		m2.VocabSize != m.VocabSize || *m2.Specials != *m.Specials || m2.Vocab != m.Vocab {
		t.Fatalf("prepare --tokenizer wordpiece --bert-specials: exit %d, %v, stderr %q", code, err, errOut)
	}
	os.Remove(vocab)
	runDir := filepath.Join(dir, "run")
	mustRun(t, trainArgs(out, runDir, "--steps", "4", "--eval-every", "2")...)
	if got := mustRun(t, "sample", "--ckpt", runDir, "--prompt", "romeo", "--tokens", "4", "--threads", "2"); !strings.HasPrefix(got, "romeo") {
		t.Fatalf("sample = %q", got)
	}

	// An encoder on the same word pieces: fill reads the text with the vocab's own [MASK] (one
	// id, not five pieces), proposes word pieces and writes the text back as BERT's decoder
	// does (lower-cased, "##" pieces joined, the spaces before ! ? . , cleaned up but not before :).
	bertDir := filepath.Join(dir, "bert")
	mustRun(t, bertArgs(out, bertDir, "--steps", "4", "--eval-every", "2", "--ckpt-every", "4")...)
	fill := mustRun(t, "fill", "--ckpt", bertDir, "--text", "ROMEO: But soft! what [MASK] through yonder window breaks?", "--top-k", "2", "--threads", "1")
	lines := strings.Split(strings.TrimSpace(fill), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "[MASK] 1 of 1 (token 7): ") || !strings.HasPrefix(lines[2], "filled: romeo : but soft! what") || !strings.HasSuffix(lines[2], "through yonder window breaks?") {
		t.Fatalf("fill on word pieces printed:\n%s", fill)
	}

	mustFail(t, "needs its vocab: pass --vocab", "prepare", "--input", src, "--out", filepath.Join(dir, "x"), "--tokenizer", "wordpiece")
	mustFail(t, "does not exist", "prepare", "--input", src, "--out", filepath.Join(dir, "x"), "--tokenizer", "wordpiece", "--vocab", vocab)
	mustFail(t, "--vocab is for --tokenizer wordpiece", "prepare", "--input", src, "--out", filepath.Join(dir, "x"), "--vocab", vocab)

	// --bert-specials on GPT-2: four more ids after 50257, recorded.
	gpt2Out := filepath.Join(dir, "gpt2")
	mustRun(t, "prepare", "--input", src, "--out", gpt2Out, "--bert-specials")
	if m, err := data.ReadMeta(gpt2Out); err != nil || m.VocabSize != 50261 || m.Specials == nil ||
		*m.Specials != (tokenizer.Specials{PAD: 50257, UNK: -1, CLS: 50258, SEP: 50259, MASK: 50260}) {
		t.Fatalf("gpt2 --bert-specials meta: %+v, %v", m, err)
	}
}

// --val-fraction 0 asks for no validation split (the library's 0 is its default, 0.1).
func TestPrepareNoValidation(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	os.WriteFile(text, []byte(strings.Repeat("to be or not to be\n", 40)), 0o644)
	mustRun(t, "prepare", "--input", text, "--out", filepath.Join(dir, "none"), "--tokenizer", "char", "--val-fraction", "0")
	if meta, err := data.ReadMeta(filepath.Join(dir, "none")); err != nil || meta.ValTokens != 0 || meta.TrainTokens == 0 {
		t.Errorf("--val-fraction 0: %+v, %v; want every token in train", meta, err)
	}
}

// prepare's numeric flags outside their ranges are refused in one line naming the flag and the
// range, where a negative fraction meant no split, 0 shard tokens the default and 1 a file per
// token.
func TestPrepareFlagRanges(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	os.WriteFile(text, []byte(strings.Repeat("to be or not to be\n", 40)), 0o644)
	out := filepath.Join(dir, "ds")
	for _, c := range []struct{ flag, value, want string }{
		{"--val-fraction", "-0.1", "--val-fraction -0.1 must be in [0, 1)"},
		{"--val-fraction", "1", "--val-fraction 1 must be in [0, 1)"},
		{"--val-fraction", "NaN", "--val-fraction NaN must be in [0, 1)"},
		{"--val-fraction", "0.9999999", "--val-fraction 0.9999999 leaves no text to train on: (1 - 0.9999999) x 760 bytes is under 1 byte; take a fraction below 0.998684"},
		{"--shard-tokens", "0", "--shard-tokens 0 must be between 65536 and 2147483647"},
		{"--shard-tokens", "-5", "--shard-tokens -5 must be between 65536 and 2147483647"},
		{"--shard-tokens", "1", "--shard-tokens 1 must be between 65536 and 2147483647"},
	} {
		mustFail(t, c.want, "prepare", "--input", text, "--out", out, "--tokenizer", "char", c.flag, c.value)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused prepare wrote its output")
	}
}

// A prepared dataset is no run directory: train --resume and --out on it are refused before a
// .lock is written there, so prepare can still replace the dataset afterwards.
func TestTrainRefusesDataset(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	os.WriteFile(text, []byte(textCorpus()), 0o644)
	ds := filepath.Join(dir, "ds")
	mustRun(t, "prepare", "--input", text, "--out", ds, "--tokenizer", "char")
	mustFail(t, ds+" is a prepared dataset (meta.json and shards), not a run directory", "train", "--resume", ds)
	mustFail(t, ds+" is a prepared dataset", trainArgs(ds, ds, "--steps", "1")...)
	if entries, _ := os.ReadDir(ds); len(entries) != 3 {
		t.Errorf("the dataset holds %d entries after the refusals, want its 3", len(entries))
	}
	mustRun(t, "prepare", "--input", text, "--out", ds, "--tokenizer", "char")
}
