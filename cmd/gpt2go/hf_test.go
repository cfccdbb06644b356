package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/hf"
)

// hfFixture is the Hugging Face GPT-2 fixture of the hf package (V=99, no tokenizer).
const hfFixture = "../../hf/testdata/tiny"

// TestHFExportAndInit: a run exported with --format hf gives the same losses, samples and
// attention maps when read back with --init (folder or model.safetensors), and fine-tuning
// starts from it.
func TestHFExportAndInit(t *testing.T) {
	dataDir := prepared(t)
	runDir := filepath.Join(t.TempDir(), "run")
	mustRun(t, trainArgs(dataDir, runDir, "--steps", "3")...)
	export := filepath.Join(t.TempDir(), "export")
	out := mustRun(t, "export", "--ckpt", runDir, "--format", "hf", "--out", export)
	if !strings.Contains(out, "config.json, model.safetensors, vocab.json, merges.txt, tokenizer_config.json") {
		t.Errorf("export output %q; want the byte tokenizer's files listed", out)
	}
	// An export never lands on the run's own files: the checkpoint it reads stays as it was.
	ckpt := filepath.Join(runDir, "checkpoints", "step_00000003.safetensors")
	before, err := os.ReadFile(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	mustFail(t, "would overwrite part of the training run", "export", "--ckpt", runDir, "--out", ckpt)
	mustFail(t, "would overwrite part of the training run", "export", "--ckpt", runDir, "--format", "hf", "--out", runDir)
	if after, err := os.ReadFile(ckpt); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the checkpoint changed (%v)", err)
	}
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	if st, err := os.Stat(filepath.Join(export, "model.safetensors")); err != nil || st.Mode().Perm() != 0o644&^os.FileMode(umask) {
		t.Errorf("model.safetensors: %v, %v; want a 0644 file less the umask %03o", st, err, umask)
	}

	evalLoss := func(args ...string) float64 {
		t.Helper()
		var res struct{ Loss float64 }
		js := mustRun(t, append([]string{"eval", "--data", dataDir, "--batches", "3", "--seq-len", "32", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(js), &res); err != nil {
			t.Fatal(err)
		}
		return res.Loss
	}
	want := evalLoss("--ckpt", runDir)
	for _, init := range []string{export, filepath.Join(export, "model.safetensors")} {
		if got := evalLoss("--init", init); got != want {
			t.Errorf("eval --init %s: loss %v, the checkpoint's is %v", init, got, want)
		}
	}
	sample := []string{"--tokens", "20", "--prompt", "func ", "--threads", "1"}
	if a, b := mustRun(t, append([]string{"sample", "--ckpt", runDir}, sample...)...),
		mustRun(t, append([]string{"sample", "--init", export, "--tokenizer", "byte"}, sample...)...); a != b {
		t.Errorf("sample from the export %q differs from the checkpoint's %q", b, a)
	}
	png := filepath.Join(t.TempDir(), "a.png")
	mustRun(t, "attn", "--init", export, "--tokenizer", "byte", "--text", "func f", "--out", png)
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Errorf("attn --init wrote no picture: %v", err)
	}

	// Fine-tuning from the export starts from its weights (real vocabulary rows; gpt2go pads an
	// imported vocabulary to a multiple of 128, where the run had none).
	ft := filepath.Join(t.TempDir(), "ft")
	mustRun(t, trainArgs(dataDir, ft, "--steps", "1", "--init", export, "--ckpt-every", "1")...)
	first, err := checkpoint.Load(filepath.Join(ft, "checkpoints", "step_00000000.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	orig, _, _, err := checkpoint.LoadLatest(runDir)
	if err != nil {
		t.Fatal(err)
	}
	const V, C = 257, 16
	if !slices.Equal(first.Params[:V*C], orig.Params[:V*C]) || !slices.Equal(first.Params[384*C:], orig.Params[V*C:]) {
		t.Errorf("the fine-tuning run's initial weights are not the exported ones")
	}
}

// TestHFConvertsWithLLMC: Hugging Face -> llm.c -> Hugging Face keeps every weight.
func TestHFConvertsWithLLMC(t *testing.T) {
	dir := t.TempDir()
	llmc := filepath.Join(dir, "tiny.bin")
	mustRun(t, "export", "--init", hfFixture, "--format", "llmc", "--out", llmc)
	back := filepath.Join(dir, "back")
	out := mustRun(t, "export", "--init", llmc, "--format", "hf", "--out", back)
	if !strings.Contains(out, "no tokenizer files") {
		t.Errorf("export of a 99-token model: %q; want a note that no tokenizer files were written", out)
	}
	a, err := hf.Read(hfFixture)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hf.Read(back)
	if err != nil {
		t.Fatal(err)
	}
	if a.Config != b.Config || !slices.Equal(a.Params, b.Params) {
		t.Errorf("weights changed on the way through llm.c's format")
	}
}

// TestInitFromHub: --init hf:OWNER/NAME downloads into the cache once (with a progress bar) and
// says how to work offline when the Hub cannot be reached.
func TestInitFromHub(t *testing.T) {
	weights, _ := os.ReadFile(filepath.Join(hfFixture, "model.safetensors"))
	config, _ := os.ReadFile(filepath.Join(hfFixture, "config.json"))
	sum := sha256.Sum256(weights)
	requests := 0
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		switch r.URL.Path {
		case "/someone/tiny-gpt2/resolve/main/config.json":
			w.Write(config)
		case "/someone/tiny-gpt2/resolve/main/model.safetensors":
			w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(sum[:])+`"`)
			w.Header().Set("X-Linked-Size", strconv.Itoa(len(weights)))
			http.Redirect(w, r, "/lfs/blob", http.StatusFound)
		case "/lfs/blob":
			w.Write(weights)
		default:
			http.NotFound(w, r)
		}
	}))
	defer hub.Close()
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_HUB_OFFLINE", "")
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)

	out := filepath.Join(t.TempDir(), "tiny.bin")
	code, stdout, stderr := gpt2go(t, "export", "--init", "hf:someone/tiny-gpt2", "--format", "llmc", "--out", out)
	if code != 0 || !strings.Contains(stdout, "from hf:someone/tiny-gpt2") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "downloading model.safetensors from "+hub.URL) || !strings.Contains(stderr, "model.safetensors: 100.0%") {
		t.Errorf("stderr %q; want the download and its progress", stderr)
	}
	if _, err := os.Stat(filepath.Join(cache, "gpt2go", "hf", "someone--tiny-gpt2", "main", "model.safetensors")); err != nil {
		t.Errorf("not cached: %v", err)
	}
	n := requests
	mustRun(t, "export", "--init", "hf:someone/tiny-gpt2", "--format", "llmc", "--out", out)
	if requests != n {
		t.Errorf("the second use made %d requests; want none", requests-n)
	}

	// train keeps the download in its --cache-dir and records the local copy as it records data.
	shards := t.TempDir()
	toks := make([]uint16, 4000)
	for i := range toks {
		toks[i] = uint16(i * 7 % 99)
	}
	data.WriteShard(filepath.Join(shards, "train_000000.bin"), toks)
	trainCache := t.TempDir()
	runDir := filepath.Join(t.TempDir(), "run")
	mustRun(t, "train", "--data", shards, "--out", runDir, "--init", "hf:someone/tiny-gpt2", "--cache-dir", trainCache,
		"--steps", "1", "--batch-size", "2", "--eval-every", "0", "--sample-every", "0", "--threads", "1")
	local := filepath.Join(trainCache, "hf", "someone--tiny-gpt2", "main")
	var run struct{ Init string }
	raw, _ := os.ReadFile(filepath.Join(runDir, "run.json"))
	if err := json.Unmarshal(raw, &run); err != nil || run.Init != local {
		t.Errorf("run.json init %q (%v), want the local copy %s", run.Init, err, local)
	}

	hub.Close()
	mustFail(t, "pass the folder: --init DIR", "export", "--init", "hf:someone/other-model", "--out", out)
}

func TestHFInitErrorsAreOneLine(t *testing.T) {
	tmp := t.TempDir()
	dataDir := prepared(t)
	runDir := filepath.Join(tmp, "run")
	mustRun(t, trainArgs(dataDir, runDir, "--steps", "1")...)
	ckpts, _ := checkpoint.List(runDir)
	noWeights := filepath.Join(tmp, "empty")
	os.MkdirAll(noWeights, 0o755)
	os.WriteFile(filepath.Join(noWeights, "config.json"), []byte(`{"model_type":"gpt2"}`), 0o644)
	pickle := filepath.Join(tmp, "pytorch_model.bin")
	os.WriteFile(pickle, []byte("PK\x03\x04 a zip"), 0o644)
	notGPT2 := filepath.Join(tmp, "bert")
	os.MkdirAll(notGPT2, 0o755)
	os.WriteFile(filepath.Join(notGPT2, "config.json"), []byte(`{"model_type":"bert"}`), 0o644)
	weights, _ := os.ReadFile(filepath.Join(hfFixture, "model.safetensors"))
	os.WriteFile(filepath.Join(notGPT2, "model.safetensors"), weights, 0o644)

	for _, c := range []struct {
		want string
		args []string
	}{
		{"has config.json but no model.safetensors", []string{"eval", "--init", noWeights, "--data", dataDir}},
		{"is a gpt2go run; continue it with train --resume", []string{"sample", "--init", runDir}},
		{"is a gpt2go checkpoint", []string{"export", "--init", ckpts[0].Path, "--format", "hf", "--out", filepath.Join(tmp, "x")}},
		{"is a PyTorch pickle", []string{"sample", "--init", pickle}},
		{"safetensors file without GPT-2's tensors", []string{"sample", "--init", "../../hf/testdata/expected.safetensors"}},
		{`model_type "bert"`, []string{"train", "--data", dataDir, "--init", notGPT2}},
		{"contradicts --init", []string{"train", "--data", dataDir, "--init", hfFixture, "--n-embd", "48"}},
		{"unknown --format \"onnx\"; supported: llmc, hf", []string{"export", "--ckpt", runDir, "--format", "onnx", "--out", filepath.Join(tmp, "y")}},
		{"give --ckpt or --init, not both", []string{"attn", "--ckpt", runDir, "--init", hfFixture, "--text", "x"}},
		{"no model: pass --ckpt RUNDIR|FILE or --init MODEL", []string{"attn", "--text", "x"}},
	} {
		mustFail(t, c.want, c.args...)
	}
}

// Exports refuse what they cannot write well: a tokenizer that does not fit the model (its ids
// went into config.json), an llm.c file onto a folder (found only after writing it all), onto a
// file that is not an earlier export or with a --tokenizer it would ignore; and a model without
// GPT2Tokenizer files removes the tokenizer files another model left in the folder.
func TestExportRefusals(t *testing.T) {
	run := charRun(t)
	dir := filepath.Join(t.TempDir(), "hf")
	os.MkdirAll(dir, 0o755)
	for _, name := range []string{"vocab.json", "merges.txt", "tokenizer.json"} {
		os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o644)
	}
	mustFail(t, "--tokenizer gpt2 has 50257 tokens, more than the model's", "export", "--ckpt", run, "--format", "hf", "--out", dir, "--tokenizer", "gpt2")
	mustFail(t, "--format llmc writes one file", "export", "--ckpt", run, "--out", dir)
	mustFail(t, "an llm.c model file holds no tokenizer", "export", "--ckpt", run, "--out", filepath.Join(dir, "model.bin"), "--tokenizer", "byte")
	// An existing file is replaced only when it is an earlier export: not a text, nor a folder
	// with another config.json.
	text := filepath.Join(t.TempDir(), "book.txt")
	os.WriteFile(text, []byte("the training text\n"), 0o644)
	mustFail(t, "exists and is not an llm.c model file", "export", "--ckpt", run, "--out", text)
	if b, _ := os.ReadFile(text); string(b) != "the training text\n" {
		t.Errorf("the refused export changed %s: %q", text, b)
	}
	llmc := filepath.Join(t.TempDir(), "model.bin")
	mustRun(t, "export", "--ckpt", run, "--out", llmc)
	mustRun(t, "export", "--ckpt", run, "--out", llmc)
	app := t.TempDir()
	os.WriteFile(filepath.Join(app, "config.json"), []byte(`{"port": 8080}`), 0o644)
	mustFail(t, "holds a config.json that is not a model's config", "export", "--ckpt", run, "--format", "hf", "--out", app)
	out := mustRun(t, "export", "--ckpt", run, "--format", "hf", "--out", dir)
	if !strings.Contains(out, "removed the folder's old tokenizer files (another model's): vocab.json, merges.txt, tokenizer.json") {
		t.Errorf("export output %q", out)
	}
	for _, name := range []string{"vocab.json", "merges.txt", "tokenizer.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s is still beside the char model", name)
		}
	}
	conf, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if strings.Contains(string(conf), "eos_token_id") {
		t.Errorf("config.json names an EOS id for a tokenizer it has not: %s", conf)
	}
}

// Ctrl-C during an --init hf: download stops it at once, on a command reading weights (loadFlags:
// sample, eval, attn, export) and on one building a model (modelFlags: train, profile, bench).
func TestInitDownloadStopsOnSignal(t *testing.T) {
	config, _ := os.ReadFile(filepath.Join(hfFixture, "config.json"))
	midway := make(chan struct{}, 1)
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/someone/slow/resolve/main/config.json":
			w.Write(config)
		case "/someone/slow/resolve/main/model.safetensors":
			w.Header().Set("Content-Length", "1000000")
			w.Write(make([]byte, 1000))
			w.(http.Flusher).Flush()
			midway <- struct{}{}
			<-r.Context().Done() // the rest never comes
		default:
			http.NotFound(w, r)
		}
	}))
	defer hub.Close()
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, args := range [][]string{
		{"export", "--init", "hf:someone/slow", "--out", filepath.Join(t.TempDir(), "m.bin")},
		{"train", "--data", prepared(t), "--out", filepath.Join(t.TempDir(), "run"), "--init", "hf:someone/slow", "--cache-dir", t.TempDir()},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		var stdout, stderr bytes.Buffer
		done := make(chan int)
		go func() { done <- run(ctx, args, &stdout, &stderr) }()
		select {
		case <-midway:
			cancel(stopSignal{os.Interrupt}) // Ctrl-C, in the middle of the file
		case code := <-done:
			t.Fatalf("%s: exit %d before the download, stderr %q", args[0], code, stderr.String())
		}
		select {
		case code := <-done:
			if code != 130 {
				t.Errorf("%s: exit %d, stderr %q; want 130", args[0], code, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still downloading 20 s after Ctrl-C", args[0])
		}
	}
}
