package prepare

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	tiktoken "github.com/tiktoken-go/tokenizer"

	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/tokenizer"
)

func shakespearePath(tb testing.TB) string {
	tb.Helper()
	path := os.Getenv("GPT2GO_SHAKESPEARE")
	if path == "" {
		path = filepath.Join("..", "..", "shared", "data", "tinyshakespeare.txt")
	}
	if _, err := os.Stat(path); err != nil {
		tb.Skipf("Tiny Shakespeare not available (%v); set GPT2GO_SHAKESPEARE to its path", err)
	}
	return path
}

// readAll concatenates the tokens of shards.
func readAll(t *testing.T, shards []string) []int {
	t.Helper()
	var all []int
	for _, s := range shards {
		tokens, err := data.ReadShard(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range tokens {
			all = append(all, int(tok))
		}
	}
	return all
}

// writeTree creates files (slash-separated names relative to root) with their contents.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// libraryEncode is the reference GPT-2 encoding: tiktoken-go over the whole text at once.
func libraryEncode(t testing.TB, text []byte) []int {
	c, err := tiktoken.Get(tiktoken.R50kBase)
	if err != nil {
		t.Fatal(err)
	}
	c.SetErrorMode(tiktoken.ErrorModeReplace)
	ids, _, err := c.Encode(string(text))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func TestShakespeareChar(t *testing.T) {
	path := shakespearePath(t)
	text, _ := os.ReadFile(path)
	out := filepath.Join(t.TempDir(), "ds")
	res, err := Run(Options{Inputs: []string{path}, Out: out, Tokenizer: "char"})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Meta
	// nanoGPT's shakespeare_char: vocab 65, 1,003,854 train and 111,540 val tokens.
	if m.VocabSize != 65 || m.EOT != -1 || m.TrainTokens != 1003854 || m.ValTokens != 111540 {
		t.Fatalf("meta = %+v", m)
	}
	ds, err := data.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ds.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Decode(readAll(t, slices.Concat(ds.TrainShards, ds.ValShards))); got != string(text) {
		t.Fatal("decoded shards differ from the text")
	}
}

func TestShakespeareGPT2(t *testing.T) {
	path := shakespearePath(t)
	text, _ := os.ReadFile(path)
	out := filepath.Join(t.TempDir(), "ds")
	res, err := Run(Options{Inputs: []string{path}, Out: out, ShardTokens: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	train, val := readAll(t, res.TrainShards), readAll(t, res.ValShards)
	want := append([]int{tokenizer.GPT2EOT}, libraryEncode(t, text)...)
	if got := append(train, val...); !slices.Equal(got, want) {
		t.Fatalf("chunked parallel encoding (%d tokens) differs from whole-file encoding (%d tokens, 338,025 + EOT)", len(got), len(want))
	}
	if len(res.TrainShards) != 4 || len(res.ValShards) != 1 {
		t.Fatalf("shards: %v %v", res.TrainShards, res.ValShards)
	}
	// Val starts at the first safe cut at or after 90% of the bytes.
	tok, _ := tokenizer.GPT2()
	cut := tokenizer.NextSafeCut(tok, text, len(text)*9/10)
	if wantVal := libraryEncode(t, text[cut:]); !slices.Equal(val, wantVal) {
		t.Fatalf("val split: %d tokens, want %d from byte %d", len(val), len(wantVal), cut)
	}
}

// TestChunkedEqualsWhole makes every document many tiny chunks and checks the shards against
// the library's whole-document encoding, for adversarial text.
func TestChunkedEqualsWhole(t *testing.T) {
	defer func(n int) { chunkBytes = n }(chunkBytes)
	docs := []string{
		"it's  a   test\n\n\n  of    spaces \t\n\tand\ttabs\r\nCRLF 's 't 're\n've 'm 'll 'd\n",
		"digits 1 22 333 4444\n55555 3.14159 1,000,000\nünïcödé wörds 日本語のテキスト\n한국어 텍스트 😀😀 😀\n",
		"<|endoftext|> in the text\n!!!???... ---\n### $$$ %%%\n\xff\xfe broken \xe2\x82 utf8\n" + strings.Repeat("x", 100) + "\n",
		strings.Repeat("  \n", 30) + strings.Repeat("word ", 40) + strings.Repeat("\n", 9) + "end",
	}
	dir := t.TempDir()
	var inputs []string
	for i, d := range docs {
		inputs = append(inputs, filepath.Join(dir, "in", string(rune('a'+i))+".txt"))
		os.MkdirAll(filepath.Dir(inputs[i]), 0o755)
		os.WriteFile(inputs[i], []byte(d), 0o644)
	}
	for _, size := range []int{1, 2, 5, 17, 64} {
		chunkBytes = size
		res, err := Run(Options{Inputs: []string{filepath.Join(dir, "in")}, Out: filepath.Join(dir, "out"), ValFraction: -1, Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		var want []int
		for _, d := range docs {
			want = append(want, tokenizer.GPT2EOT)
			want = append(want, libraryEncode(t, []byte(d))...)
		}
		if got := readAll(t, res.TrainShards); !slices.Equal(got, want) {
			t.Fatalf("chunk size %d: shards differ from whole-document encoding", size)
		}
		if len(res.ValShards) != 0 {
			t.Fatalf("ValFraction < 0 wrote val shards")
		}
	}
}

func TestByteDocumentsAndSplit(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	files := map[string]string{
		"b.txt":         "bbbbb",
		"a.txt":         "aaaaa",
		"sub/c.md":      "ccccc",
		".hidden":       "hidden",
		".git/config":   "hidden",
		"empty.txt":     "",
		"image.png":     "PNG\x00\x01",
		"sub/d.txt":     "ddddd",
		"sub/.e/ff.txt": "hidden",
	}
	writeTree(t, in, files)
	out := filepath.Join(dir, "out")
	res, err := Run(Options{Inputs: []string{in}, Out: out, Tokenizer: "byte", ValFraction: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	wantSources := []string{filepath.Join(in, "a.txt"), filepath.Join(in, "b.txt"), filepath.Join(in, "sub/c.md"), filepath.Join(in, "sub/d.txt")}
	if !slices.Equal(res.Meta.Sources, wantSources) || res.Bytes != 20 {
		t.Fatalf("sources %v, %d bytes", res.Meta.Sources, res.Bytes)
	}
	// 20 bytes, train gets floor(0.7*20) = 14: a, b, and 4 bytes of c; val the rest of c and d.
	const eot = 256
	train, val := readAll(t, res.TrainShards), readAll(t, res.ValShards)
	wantTrain := []int{eot, 'a', 'a', 'a', 'a', 'a', eot, 'b', 'b', 'b', 'b', 'b', eot, 'c', 'c', 'c', 'c'}
	wantVal := []int{'c', eot, 'd', 'd', 'd', 'd', 'd'}
	if !slices.Equal(train, wantTrain) || !slices.Equal(val, wantVal) {
		t.Fatalf("train %v\nval %v", train, val)
	}
	if res.Meta.TrainTokens != 17 || res.Meta.ValTokens != 7 {
		t.Fatalf("meta counts %+v", res.Meta)
	}

	// Output inside the input directory is not read back as input.
	inner := filepath.Join(in, "prepared")
	for range 2 {
		if res, err = Run(Options{Inputs: []string{in}, Out: inner, Tokenizer: "byte"}); err != nil || len(res.Meta.Sources) != 4 {
			t.Fatalf("output inside input: %v, %v", res.Meta.Sources, err)
		}
	}
	os.RemoveAll(inner)

	// Ext filter, and re-running into the same directory replaces the old output.
	res, err = Run(Options{Inputs: []string{in}, Out: out, Tokenizer: "byte", Ext: []string{".md"}, ValFraction: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Meta.Sources, []string{filepath.Join(in, "sub/c.md")}) {
		t.Fatalf("Ext filter: %v", res.Meta.Sources)
	}
	entries, _ := os.ReadDir(out)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"meta.json", "train_000000.bin"}) {
		t.Fatalf("after re-run the directory holds %v", names)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".out.tmp-*")); len(leftovers) != 0 {
		t.Fatalf("staging left behind: %v", leftovers)
	}
}

func TestCharMultiDocumentHasEOT(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "1.txt"), []byte("ab"), 0o644)
	os.WriteFile(filepath.Join(dir, "2.txt"), []byte("ba"), 0o644)
	res, err := Run(Options{Inputs: []string{dir}, Out: filepath.Join(dir, "out"), Tokenizer: "char", ValFraction: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Meta.Alphabet != "ab" || res.Meta.VocabSize != 3 || res.Meta.EOT != 2 {
		t.Fatalf("meta %+v", res.Meta)
	}
	if got := readAll(t, res.TrainShards); !slices.Equal(got, []int{2, 0, 1, 2, 1, 0}) {
		t.Fatalf("tokens %v", got)
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	os.WriteFile(text, []byte("hello"), 0o644)
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	foreign := filepath.Join(dir, "foreign")
	os.MkdirAll(foreign, 0o755)
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644)
	out := filepath.Join(dir, "out")
	gz := filepath.Join(dir, "t.txt.gz")
	os.WriteFile(gz, []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"), 0o644)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"binary file", Options{Inputs: []string{gz}, Out: out, Tokenizer: "char"}, "looks binary"},
		{"pipe", Options{Inputs: []string{"/dev/null"}, Out: out}, "not a regular file"},
		{"no inputs", Options{Out: out}, "no input files"},
		{"missing input", Options{Inputs: []string{filepath.Join(dir, "nope")}, Out: out}, "does not exist"},
		{"empty input", Options{Inputs: []string{empty}, Out: out}, "no text in"},
		{"out is a file", Options{Inputs: []string{text}, Out: text}, "is a file, not a directory"},
		{"out holds other files", Options{Inputs: []string{text}, Out: foreign}, "already holds notes.txt"},
		{"no out", Options{Inputs: []string{text}}, "no output directory"},
		{"tokenizer", Options{Inputs: []string{text}, Out: out, Tokenizer: "bpe"}, "unknown tokenizer"},
		{"val fraction", Options{Inputs: []string{text}, Out: out, ValFraction: 1}, "--val-fraction 1 must be in [0, 1)"},
		{"val fraction NaN", Options{Inputs: []string{text}, Out: out, ValFraction: math.NaN()}, "--val-fraction NaN must be in [0, 1)"},
		{"no train text", Options{Inputs: []string{text}, Out: out, ValFraction: 0.9}, "--val-fraction 0.9 leaves no text to train on: (1 - 0.9) x 5 bytes is under 1 byte; take a fraction below 0.8"},
		{"shard size", Options{Inputs: []string{text}, Out: out, ShardTokens: -1}, "--shard-tokens -1 must be between 65536 and 2147483647"},
		{"small shards", Options{Inputs: []string{text}, Out: out, ShardTokens: 1}, "--shard-tokens 1 must be between 65536"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a failed run created the output directory")
	}
}

func TestEncodeJobRejectsLargeIDs(t *testing.T) {
	r := encodeJob(hugeTokenizer{}, job{text: []byte("x")})
	if r.err == nil || !strings.Contains(r.err.Error(), "does not fit") {
		t.Fatalf("err = %v", r.err)
	}
}

// hugeTokenizer emits an id beyond uint16, which none of the real tokenizers can.
type hugeTokenizer struct{}

func (hugeTokenizer) Name() string        { return "huge" }
func (hugeTokenizer) VocabSize() int      { return 1 << 20 }
func (hugeTokenizer) EOT() int            { return -1 }
func (hugeTokenizer) Encode([]byte) []int { return []int{70000} }
func (hugeTokenizer) Decode([]int) string { return "" }

func TestProgressSummary(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), bytes.Repeat([]byte("to be or not to be\n"), 100), 0o644)
	var log bytes.Buffer
	if _, err := Run(Options{Inputs: []string{filepath.Join(dir, "a.txt")}, Out: filepath.Join(dir, "o"), Progress: &log}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "prepared 1 files, 0.0 MB -> ") || !strings.Contains(log.String(), " val tokens in ") {
		t.Fatalf("summary missing: %q", log.String())
	}
}

// BenchmarkPrepareGPT2 runs the whole prepare (read, parallel chunked encode, shards) on Tiny
// Shakespeare with the GPT-2 tokenizer.
func BenchmarkPrepareGPT2(b *testing.B) {
	path := shakespearePath(b)
	st, _ := os.Stat(path)
	out := filepath.Join(b.TempDir(), "ds")
	b.SetBytes(st.Size())
	for b.Loop() {
		if _, err := Run(Options{Inputs: []string{path}, Out: out}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLibraryEncodeGPT2 is the baseline: tiktoken-go encoding Tiny Shakespeare in one call
// on one core.
func BenchmarkLibraryEncodeGPT2(b *testing.B) {
	text, err := os.ReadFile(shakespearePath(b))
	if err != nil {
		b.Fatal(err)
	}
	c, _ := tiktoken.Get(tiktoken.R50kBase)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, _, err := c.Encode(string(text)); err != nil {
			b.Fatal(err)
		}
	}
}

// Inputs: a folder given as a symbolic link is walked (Debian's GOROOT/src is one); a file
// reached twice, under another spelling or inside a given folder, is read once, so validation
// never repeats training text; a binary file is taken by name only for the byte tokenizer.
func TestInputsResolved(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"corp/a.txt": "alpha alpha\n", "corp/b.txt": "beta beta\n"})
	if err := os.Symlink(filepath.Join(dir, "corp"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, inputs := range [][]string{{"link"}, {"corp", "./corp/b.txt", filepath.Join(dir, "corp")}} {
		res, err := Run(Options{Inputs: inputs, Out: filepath.Join(dir, "out"), Tokenizer: "byte", ValFraction: -1})
		if err != nil {
			t.Fatalf("%v: %v", inputs, err)
		}
		if res.Files != 2 || res.Bytes != 22 {
			t.Errorf("%v: %d files, %d bytes; want 2 files, 22 bytes", inputs, res.Files, res.Bytes)
		}
	}
	// Prepared into a folder inside the linked input twice: the second run skips the first's output.
	for range 2 {
		res, err := Run(Options{Inputs: []string{"link"}, Out: filepath.Join(dir, "link", "ds"), Tokenizer: "byte", ValFraction: -1})
		if err != nil || res.Files != 2 {
			t.Fatalf("into link's own folder: %v files, %v; want the 2 texts", res, err)
		}
	}
	bin := filepath.Join(dir, "x.bin.gz")
	os.WriteFile(bin, []byte("\x1f\x8b\x00abc"), 0o644)
	if _, err := Run(Options{Inputs: []string{bin}, Out: filepath.Join(dir, "bytes"), Tokenizer: "byte"}); err != nil {
		t.Errorf("byte tokenizer on a binary file: %v", err)
	}
}

// The output folder: "." names the current folder (its parent holds the staging), a new
// dataset folder is readable by others (0755 less the umask), and replacing a dataset when a
// move fails leaves the old one whole.
func TestOutputFolder(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	os.WriteFile(text, []byte(strings.Repeat("hello world\n", 50)), 0o644)
	out := filepath.Join(dir, "ds")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(out)
	if _, err := Run(Options{Inputs: []string{text}, Out: ".", Tokenizer: "char"}); err != nil {
		t.Fatalf("--out .: %v", err)
	}
	fresh := filepath.Join(dir, "fresh")
	if _, err := Run(Options{Inputs: []string{text}, Out: fresh, Tokenizer: "char"}); err != nil {
		t.Fatal(err)
	}
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o755&^os.FileMode(umask) {
		t.Errorf("dataset folder mode %v (%v), want %v", st.Mode().Perm(), err, 0o755&^os.FileMode(umask))
	}

	// A new shard that cannot move in (an I/O error, say): install fails and out holds the
	// old dataset, meta.json included.
	before, _ := os.ReadDir(out)
	staging := filepath.Join(dir, "staging")
	writeTree(t, staging, map[string]string{"train_000000.bin": "new", data.MetaFile: "{}", "val_000000.bin": "new"})
	failed := false
	rename = func(from, to string) error {
		if filepath.Base(to) == "val_000000.bin" && filepath.Dir(to) == out && !failed {
			failed = true
			return fmt.Errorf("injected failure")
		}
		return os.Rename(from, to)
	}
	defer func() { rename = os.Rename }()
	if err := install(staging, out); err == nil || !strings.Contains(err.Error(), "holds the old dataset still") {
		t.Fatalf("install: %v, want a failed move that restores the old dataset", err)
	}
	after, _ := os.ReadDir(out)
	if len(after) != len(before) {
		t.Fatalf("out holds %d entries after the failed install, %d before", len(after), len(before))
	}
	if _, err := data.Open(out); err != nil {
		t.Errorf("the old dataset does not open after the failed install: %v", err)
	}
	if left, _ := os.ReadDir(staging); len(left) != 3 {
		t.Errorf("staging holds %d entries, want its 3 back", len(left))
	}
}

// A cancelled preparation (Ctrl-C) stops, says so and leaves no output and no staging folder.
func TestRunInterrupted(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	os.WriteFile(text, bytes.Repeat([]byte("to be or not to be\n"), 1<<16), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(dir, "out")
	if _, err := Run(Options{Context: ctx, Inputs: []string{text}, Out: out, Tokenizer: "char"}); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("error %v, want an interruption", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the folder holds %d entries after the interruption, want the input alone", len(entries))
	}
}

// When the old dataset can neither move aside whole nor move back, what moved is kept where the
// error says (the aside folder was removed with it).
func TestInstallKeepsWhatItSetAside(t *testing.T) {
	dir := t.TempDir()
	out, staging := filepath.Join(dir, "out"), filepath.Join(dir, "staging")
	writeTree(t, out, map[string]string{"train_000000.bin": "old", data.MetaFile: "{}", "val_000000.bin": "old"})
	writeTree(t, staging, map[string]string{"train_000000.bin": "new", data.MetaFile: "{}", "val_000000.bin": "new"})
	rename = func(from, to string) error {
		if strings.Contains(to, ".out.old-") && filepath.Base(to) == "val_000000.bin" || filepath.Dir(to) == out {
			return fmt.Errorf("injected failure")
		}
		return os.Rename(from, to)
	}
	defer func() { rename = os.Rename }()
	err := install(staging, out)
	i := strings.Index(fmt.Sprint(err), " and ")
	if i < 0 || !strings.Contains(err.Error(), "split between "+out) {
		t.Fatalf("install: %v, want it to say where the old dataset is", err)
	}
	aside := strings.Fields(err.Error()[i+len(" and "):])[0]
	if b, err := os.ReadFile(filepath.Join(aside, data.MetaFile)); err != nil || string(b) != "{}" {
		t.Errorf("the old meta.json is not in %s: %v", aside, err)
	}
}

// A walk skips the folders gpt2go wrote, runs and prepared datasets, whose logs, samples,
// reports and meta.json are no corpus, and the summary names them; a lone run.json or meta.json
// is anyone's text and stays, as do a run's files named as inputs. A walk that finds only such
// folders says so.
func TestSkipsGpt2goOutput(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"corp/a.txt":                    "alpha alpha\n",
		"corp/run/run.json":             `{"steps": 10}`,
		"corp/run/log.jsonl":            `{"step": 1, "loss": 4.2}`,
		"corp/run/samples.txt":          "---- sample at step 10\n",
		"corp/run/report.html":          "<html></html>",
		"corp/old/run.json":             `{"steps": 10}`,
		"corp/old/checkpoints/notes.md": "kept aside",
		"corp/ds/meta.json":             `{"tokenizer": "byte"}`,
		"corp/ds/train_000000.bin":      "shard",
		"corp/json/run.json":            "b",
		"corp/json/meta.json":           "c",
	})
	var log bytes.Buffer
	res, err := Run(Options{Inputs: []string{filepath.Join(dir, "corp"), filepath.Join(dir, "corp/run/samples.txt")}, Out: filepath.Join(dir, "out"), Tokenizer: "byte", ValFraction: -1, Progress: &log})
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, s := range res.Meta.Sources {
		rel, _ := filepath.Rel(dir, s)
		sources = append(sources, filepath.ToSlash(rel))
	}
	if want := []string{"corp/a.txt", "corp/json/meta.json", "corp/json/run.json", "corp/run/samples.txt"}; !slices.Equal(sources, want) {
		t.Errorf("sources %v, want %v", sources, want)
	}
	want := fmt.Sprintf("skipped 3 folders gpt2go wrote, not text (name their files as --input to take them): %s (a prepared dataset), %s (a training run), %s (a training run)\n",
		filepath.Join(dir, "corp/ds"), filepath.Join(dir, "corp/old"), filepath.Join(dir, "corp/run"))
	if !strings.Contains(log.String(), want) {
		t.Errorf("summary %q lacks %q", log.String(), want)
	}
	_, err = Run(Options{Inputs: []string{filepath.Join(dir, "corp/run")}, Out: filepath.Join(dir, "out2"), Tokenizer: "byte"})
	if err == nil || !strings.Contains(err.Error(), "no text in "+filepath.Join(dir, "corp/run")+": every input is empty, hidden, binary or gpt2go's own output; skipped 1 folder gpt2go wrote") {
		t.Errorf("a run as the only input: %v", err)
	}
}

// What a killed prepare leaves beside its output, a staging folder (part of a dataset) or the
// old dataset set aside mid-replace, goes with the next prepare of that output; a staging
// folder too young to be sure of, another output's, or a user's own name, stays.
func TestRunRemovesAKilledPreparesFolders(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	os.WriteFile(text, []byte(strings.Repeat("hello world\n", 50)), 0o644)
	out := filepath.Join(dir, "ds")
	past := time.Now().Add(-2 * time.Hour)
	for _, name := range []string{".ds.tmp-1", ".ds.tmp-9", ".ds.old-2", ".other.tmp-3", ".ds.old-mine"} {
		writeTree(t, filepath.Join(dir, name), map[string]string{"train_000000.bin": "part"})
		if name != ".ds.tmp-9" { // too young to be sure of
			os.Chtimes(filepath.Join(dir, name), past, past)
		}
	}
	names := func() []string {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	if _, err := Run(Options{Inputs: []string{text}, Out: out, Tokenizer: "char"}); err != nil {
		t.Fatal(err)
	}
	if got, want := names(), []string{".ds.old-2", ".ds.old-mine", ".ds.tmp-9", ".other.tmp-3", "ds", "t.txt"}; !slices.Equal(got, want) {
		t.Errorf("after a new dataset: %v, want %v", got, want)
	}
	if _, err := Run(Options{Inputs: []string{text}, Out: out, Tokenizer: "char"}); err != nil {
		t.Fatal(err)
	}
	if got, want := names(), []string{".ds.old-mine", ".ds.tmp-9", ".other.tmp-3", "ds", "t.txt"}; !slices.Equal(got, want) {
		t.Errorf("after a replacement: %v, want %v", got, want)
	}
}

// Bytes that are not UTF-8 (Latin-1 text, say) become U+FFFD under a text tokenizer: prepare
// says how many, in how many files, and where the first is, counting across pieces; the byte
// tokenizer keeps them and says nothing.
func TestWarnsOfTextThatIsNotUTF8(t *testing.T) {
	defer func(n int) { chunkBytes = n }(chunkBytes)
	chunkBytes = 1000 // the offset counts the pieces before
	dir := t.TempDir()
	long := strings.Repeat("to be or not to be\n", 1000)
	writeTree(t, dir, map[string]string{
		"a.txt": "plain text\n",
		"b.txt": long + "caf\xe9\n" + long + "na\xefve\n", // in two pieces: one file
		"c.txt": "\xff\xfe\xfdbinary\n",
		"d.txt": "caf\u00e9 is fine\n",
	})
	prepare := func(tokenizer string) string {
		var log bytes.Buffer
		if _, err := Run(Options{Inputs: []string{dir}, Out: filepath.Join(t.TempDir(), "o"), Tokenizer: tokenizer, Progress: &log}); err != nil {
			t.Fatal(err)
		}
		return log.String()
	}
	for _, tok := range []string{"gpt2", "char"} {
		want := fmt.Sprintf("warning: 2 files hold 5 bytes that are not UTF-8 (the first at byte %d of %s)", len(long)+3, filepath.Join(dir, "b.txt"))
		if got := prepare(tok); !strings.Contains(got, want) {
			t.Errorf("%s: the log says %q, want %q", tok, got, want)
		}
	}
	if got := prepare("byte"); strings.Contains(got, "UTF-8") {
		t.Errorf("byte: the log says %q, want no word of UTF-8", got)
	}
	// WordPiece drops the bytes rather than encoding them, and a byte dataset is no BERT one.
	vocab, err := os.ReadFile(fixtureVocab)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Inputs: []string{dir}, Out: filepath.Join(t.TempDir(), "o"), Tokenizer: "wordpiece", Vocab: filepath.Join(t.TempDir(), "vocab.txt")}
	os.WriteFile(opts.Vocab, vocab, 0o644)
	var log bytes.Buffer
	opts.Progress = &log
	if _, err := Run(opts); err != nil {
		t.Fatal(err)
	}
	if got := log.String(); !strings.Contains(got, "which the WordPiece tokenizer drops") || strings.Contains(got, "U+FFFD") || strings.Contains(got, "--tokenizer byte") {
		t.Errorf("wordpiece: the log says %q", got)
	}
}
