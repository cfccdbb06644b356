package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/checkpoint"
)

// pngSize decodes a PNG file and returns its width and height.
func pngSize(t *testing.T, path string) (int, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img.Bounds().Dx(), img.Bounds().Dy()
}

// trainedRun trains the tiny byte-level model for 10 steps, checkpointing at 0, 5 and 10.
func trainedRun(t *testing.T) string {
	t.Helper()
	run := filepath.Join(t.TempDir(), "run")
	mustRun(t, trainArgs(prepared(t), run, "--steps", "10", "--ckpt-every", "5")...)
	return run
}

func TestPlot(t *testing.T) {
	run := trainedRun(t)
	other := filepath.Join(t.TempDir(), "other")
	mustRun(t, trainArgs(prepared(t), other, "--steps", "6", "--lr", "1e-3")...)
	dir := t.TempDir()

	one := filepath.Join(dir, "one.png")
	out := mustRun(t, "plot", run, "--out", one)
	if !strings.Contains(out, "wrote "+one) {
		t.Errorf("plot output %q", out)
	}
	w1, h1 := pngSize(t, one)
	// Flags after the run directories, two runs, three panels: a taller picture.
	three := filepath.Join(dir, "three.png")
	mustRun(t, "plot", run, other, "--out", three, "--log-y", "--what", "loss,lr,grad_norm", "--smooth", "0.5")
	w3, h3 := pngSize(t, three)
	if w1 < 400 || h1 < 300 || w3 != w1 || h3 <= h1 {
		t.Errorf("picture sizes %dx%d (loss, lr) and %dx%d (three panels)", w1, h1, w3, h3)
	}
	svg := filepath.Join(dir, "c.svg")
	mustRun(t, "plot", filepath.Join(run, "log.jsonl"), "--out", svg)
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("SVG output: %v", err)
	}

	mustFail(t, "no runs", "plot", "--out", one)
	mustFail(t, "logged:", "plot", run, "--what", "perplexity")
	mustFail(t, "use .png or .svg", "plot", run, "--out", filepath.Join(dir, "x.jpg"))
	mustFail(t, `--what "" names no panels`, "plot", run, "--what", "")
	mustFail(t, "log.jsonl", "plot", filepath.Join(dir, "missing"))
}

func TestRunNames(t *testing.T) {
	got := runNames([]string{"runs/a", "x/b/log.jsonl", "one/c", "two/c/"})
	want := []string{"a", "b", "one/c", "two/c"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("runNames = %q, want %q", got, want)
			break
		}
	}
}

func TestAttn(t *testing.T) {
	run := trainedRun(t)
	initial := checkpoint.Path(run, 0)
	if _, err := os.Stat(initial); err != nil {
		t.Fatalf("training kept no step-0 checkpoint: %v", err)
	}
	dir := t.TempDir()
	text := "func f12(x int) int {\n\treturn x * 5\n}"

	grid := filepath.Join(dir, "grid.png")
	mustRun(t, "attn", "--ckpt", run, "--text", text, "--out", grid, "--layer", "1")
	gw, gh := pngSize(t, grid)

	code, out, errOut := gpt2go(t, "attn", "--ckpt", run, "--text", text, "--out", filepath.Join(dir, "short.png"), "--max-tokens", "8")
	if code != 0 || !strings.Contains(errOut, "drawing the first 8") || !strings.Contains(out, "8 tokens") {
		t.Errorf("--max-tokens 8: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// Initial vs trained: one row of heads per checkpoint, twice as tall as the grid of two heads.
	both := filepath.Join(dir, "both.png")
	mustRun(t, "attn", "--ckpt", initial, "--compare", run, "--text", text, "--out", both)
	bw, bh := pngSize(t, both)
	if bw != gw || bh < gh*3/2 {
		t.Errorf("compare picture %dx%d, single %dx%d", bw, bh, gw, gh)
	}
	mustRun(t, "attn", "--ckpt", run, "--text", text, "--out", filepath.Join(dir, "head.svg"), "--head", "1")

	mustFail(t, "no text", "attn", "--ckpt", run)
	mustFail(t, "no model", "attn", "--text", text)
	mustFail(t, "--head 2 does not exist", "attn", "--ckpt", run, "--text", text, "--head", "2")
	mustFail(t, "layer 2 does not exist", "attn", "--ckpt", run, "--text", text, "--layer", "2")
	mustFail(t, "--head must be a head's index (0 = first) or -1 for every head, got -2", "attn", "--ckpt", run, "--text", text, "--head", "-2")
	// report's --attn-layer is checked like attn's --layer: an error, not a note on the page.
	mustFail(t, "--attn-layer: layer 2 does not exist; the model has layers 0..1", "report", run, "--attn-layer", "2", "--out", filepath.Join(t.TempDir(), "r.html"))
	mustFail(t, "--attn-layer: layer -1 does not exist", "report", run, "--attn-layer", "-1", "--out", filepath.Join(t.TempDir(), "r.html"))
	mustFail(t, "--max-tokens", "attn", "--ckpt", run, "--text", text, "--max-tokens", "0")

	char := charRun(t)
	mustFail(t, "not in the char tokenizer", "attn", "--ckpt", char, "--text", "xyz")
	mustFail(t, "tokenizes the text differently", "attn", "--ckpt", char, "--compare", run, "--text", "abc cab")
	// Another head count (the grid panicked on the second model's missing heads).
	oneHead := filepath.Join(t.TempDir(), "one-head")
	mustRun(t, trainArgs(prepared(t), oneHead, "--steps", "1", "--n-head", "1")...)
	mustFail(t, "compare one head of each with --head N", "attn", "--ckpt", run, "--compare", oneHead, "--text", text)
}
