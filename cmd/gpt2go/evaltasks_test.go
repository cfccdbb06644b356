package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/prepare"
)

// The reference model and data of package eval (tools/reference/gen_hellaswag.py): a byte-level
// model (block size 128) and six HellaSwag items.
const (
	refModel = "../../eval/testdata/model.bin"
	refItems = "../../eval/testdata/hellaswag_items.jsonl"
	refText  = "../../eval/testdata/text.txt"
)

type refWindow struct {
	N       int     `json:"n"`
	Acc     float64 `json:"acc"`
	AccNorm float64 `json:"acc_norm"`
}

// refExpected reads the PyTorch figures: HellaSwag by window, and the text loss.
func refExpected(t *testing.T) (hellaswag map[int]refWindow, textLoss float64, textTokens int) {
	t.Helper()
	raw, err := os.ReadFile("../../eval/testdata/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Windows []struct {
			Window int `json:"window"`
			refWindow
		} `json:"windows"`
		Text struct {
			Loss   float64 `json:"loss"`
			Tokens int     `json:"tokens"`
		} `json:"text"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	hellaswag = map[int]refWindow{}
	for _, w := range e.Windows {
		hellaswag[w.Window] = w.refWindow
	}
	if len(hellaswag) != 2 {
		t.Fatalf("expected.json has windows %v, want 128 and 64", hellaswag)
	}
	return hellaswag, e.Text.Loss, e.Text.Tokens
}

func TestEvalHellaSwagAndText(t *testing.T) {
	hellaswag, textLoss, textTokens := refExpected(t)
	// By default the window is the block size (128), and the longest item (235 inputs) is cut;
	// --seq-len 64 cuts 5 items and skips one.
	for _, tc := range []struct {
		args              []string
		window, truncated int
	}{{nil, 128, 1}, {[]string{"--seq-len", "64"}, 64, 5}} {
		var got struct {
			refWindow
			Truncated int `json:"truncated"`
			Window    int `json:"window"`
		}
		out := mustRun(t, append([]string{"eval", "--init", refModel, "--tokenizer", "byte", "--hellaswag", refItems, "--json"}, tc.args...)...)
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if want := hellaswag[tc.window]; got.refWindow != want || got.Truncated != tc.truncated || got.Window != tc.window {
			t.Errorf("hellaswag %v: %+v; PyTorch %+v, %d truncated", tc.args, got, want, tc.truncated)
		}
	}
	out := mustRun(t, "eval", "--init", refModel, "--tokenizer", "byte", "--hellaswag", refItems, "--limit", "2")
	if !strings.Contains(out, "hellaswag acc ") || !strings.Contains(out, "| n 2 |") || strings.Contains(out, "note:") {
		t.Errorf("--limit 2: %q", out)
	}

	var text struct {
		Loss, Perplexity float64
		Tokens, Windows  int
	}
	out = mustRun(t, "eval", "--init", refModel, "--tokenizer", "byte", "--text", refText, "--seq-len", "32", "--batch-size", "4", "--json")
	if err := json.Unmarshal([]byte(out), &text); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if math.Abs(text.Loss-textLoss) > 1e-5*textLoss || text.Tokens != textTokens || text.Windows != (textTokens+31)/32 {
		t.Errorf("text: %+v; PyTorch loss %v over %d tokens", text, textLoss, textTokens)
	}
	out = mustRun(t, "eval", "--init", refModel, "--tokenizer", "byte", "--text", refText)
	if !strings.Contains(out, "perplexity") || !strings.Contains(out, "359 tokens (byte) in 3 windows of <= 128") {
		t.Errorf("text: %q", out)
	}
}

func TestEvalTaskErrors(t *testing.T) {
	old := prepare.HellaSwagValURL
	defer func() { prepare.HellaSwagValURL = old }()
	prepare.HellaSwagValURL = "http://127.0.0.1:1/hellaswag_val.jsonl" // offline: nothing listens on port 1
	cache := t.TempDir()
	mustFail(t, "cannot download", "eval", "--init", refModel, "--tokenizer", "byte", "--hellaswag", "val", "--cache-dir", cache)
	mustFail(t, "give one of --data, --hellaswag and --text", "eval", "--init", refModel, "--hellaswag", refItems, "--text", refText)
	mustFail(t, "nothing to evaluate on", "eval", "--init", refModel)
	mustFail(t, "pass --tokenizer", "eval", "--init", refModel, "--hellaswag", refItems)
	mustFail(t, "exceeds the model's block size", "eval", "--init", refModel, "--tokenizer", "byte", "--text", refText, "--seq-len", "129")
	mustFail(t, "--limit", "eval", "--init", refModel, "--tokenizer", "byte", "--hellaswag", refItems, "--limit", "-1")
	// A bad value names its flag.
	mustFail(t, "--batches must be >= 0 (0: the whole split), got -1", "eval", "--init", refModel, "--data", t.TempDir(), "--batches", "-1")
	mustFail(t, "--batch-size must be >= 1, got 0", "eval", "--init", refModel, "--data", t.TempDir(), "--batch-size", "0")
	mustFail(t, "--seq-len must be >= 0 (0: the model's block size), got -1", "eval", "--init", refModel, "--data", t.TempDir(), "--seq-len", "-1")
	// A flag the mode does not read is refused, not ignored.
	mustFail(t, "--limit is for eval --hellaswag; eval --text does not read it", "eval", "--init", refModel, "--tokenizer", "byte", "--text", refText, "--limit", "2")
	mustFail(t, "--batches is for eval --data; eval --hellaswag does not read it", "eval", "--init", refModel, "--tokenizer", "byte", "--hellaswag", refItems, "--batches", "2")
	mustFail(t, "--tokenizer is for eval --hellaswag and --text; eval --data does not read it", "eval", "--init", refModel, "--tokenizer", "byte", "--data", t.TempDir())

	// Training with --hellaswag val offline fails before it starts, on one line.
	dataDir := prepared(t)
	mustFail(t, "cannot download", trainArgs(dataDir, filepath.Join(t.TempDir(), "run"), "--steps", "2",
		"--hellaswag", "val", "--eval-hellaswag-every", "1", "--cache-dir", cache)...)
	if left, _ := os.ReadDir(cache); len(left) != 0 {
		t.Errorf("failed downloads left %v in the cache", left)
	}
}

func TestTrainWithHellaSwag(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "run")
	out := mustRun(t, trainArgs(prepared(t), runDir, "--steps", "4", "--block-size", "64", "--seq-len", "64",
		"--hellaswag", refItems, "--eval-hellaswag-every", "2", "--hellaswag-limit", "5")...)
	if strings.Count(out, "| hellaswag acc ") != 2 || !strings.Contains(out, "skipped 1 item: an ending longer than the 64-token window") {
		t.Errorf("train output lacks two hellaswag lines and the skip note:\n%s", out)
	}
	raw, err := os.ReadFile(filepath.Join(runDir, "log.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(string(raw), `"hellaswag_acc_norm"`); c != 2 {
		t.Errorf("log.jsonl has %d hellaswag entries, want 2 (steps 2 and 4)", c)
	}
}
