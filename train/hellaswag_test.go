package train

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/eval"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

const hellaSwagItems = "../eval/testdata/hellaswag_items.jsonl"

// byteConfig is a small byte-level run whose sequence length (64) fits all but one of the
// HellaSwag test items; batch size 2 makes the scorer run 2 forward passes per item.
func byteConfig(t *testing.T) Config {
	c := smallConfig(writeDataset(t, 257))
	c.Model = gpt.Config{BlockSize: 64, VocabSize: 257, PaddedVocabSize: 320, NumLayers: 2, NumHeads: 2, Channels: 16}
	setTokenizer(t, &c, &TokenizerInfo{Name: "byte", EOT: 256})
	c.BatchSize, c.SeqLen, c.Steps = 2, 64, 8
	return c
}

// hellaSwagLog returns the hellaswag entries of a JSONL log by step.
func hellaSwagLog(t *testing.T, path string) map[int][2]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int][2]float64{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var e struct {
			Step    int      `json:"step"`
			Acc     *float64 `json:"hellaswag_acc"`
			AccNorm *float64 `json:"hellaswag_acc_norm"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if (e.Acc == nil) != (e.AccNorm == nil) {
			t.Fatalf("log line %s has one of hellaswag_acc and hellaswag_acc_norm", sc.Text())
		}
		if e.Acc != nil {
			out[e.Step] = [2]float64{*e.Acc, *e.AccNorm}
		}
	}
	return out
}

func TestHellaSwagDuringTrainingKeepsTheTrajectory(t *testing.T) {
	cfg := byteConfig(t)
	plain := filepath.Join(t.TempDir(), "plain")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: plain}); err != nil {
		t.Fatal(err)
	}
	cfg.HellaSwag, cfg.HellaSwagEvery, cfg.HellaSwagLimit = hellaSwagItems, 3, 0
	scored := filepath.Join(t.TempDir(), "scored")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: scored}); err != nil {
		t.Fatal(err)
	}
	wantTrain, wantVal := readLog(t, filepath.Join(plain, logFile))
	gotTrain, gotVal := readLog(t, filepath.Join(scored, logFile))
	if len(wantTrain) != cfg.Steps || !reflect.DeepEqual(gotTrain, wantTrain) || !reflect.DeepEqual(gotVal, wantVal) {
		t.Fatalf("HellaSwag scoring changed training:\nwith    %v %v\nwithout %v %v", gotTrain, gotVal, wantTrain, wantVal)
	}
	hs := hellaSwagLog(t, filepath.Join(scored, logFile))
	if len(hs) != 3 || len(hellaSwagLog(t, filepath.Join(plain, logFile))) != 0 {
		t.Fatalf("hellaswag log entries %v; want steps 3, 6 and 8 (the last)", hs)
	}
	for _, step := range []int{3, 6, 8} {
		if _, ok := hs[step]; !ok {
			t.Errorf("no hellaswag entry at step %d: %v", step, hs)
		}
	}

	// The logged figures are what the standalone scorer gives on the saved final weights.
	loaded, err := LoadWeights(scored)
	if err != nil {
		t.Fatal(err)
	}
	items, err := eval.ReadHellaSwag(hellaSwagItems, 0)
	if err != nil {
		t.Fatal(err)
	}
	model, err := loaded.NewInferenceModel(cpu.New(2), 4, cfg.SeqLen, gpt.Precision{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := (&eval.Scorer{Model: model, Rows: 4, Window: cfg.SeqLen}).Run(context.Background(), eval.Render(items, mustTok(t, loaded)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := hs[8]; got != [2]float64{res.Acc, res.AccNorm} || res.N != 5 || res.Skipped != 1 {
		t.Errorf("logged at step 8: %v; scorer on the checkpoint: %+v (want n 5, 1 skipped)", got, res)
	}
}

func mustTok(t *testing.T, l *Loaded) tokenizer.Tokenizer {
	t.Helper()
	tok, err := l.Run.Tokenizer.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestHellaSwagConfig(t *testing.T) {
	cfg := byteConfig(t)
	cfg.HellaSwagEvery = 5
	if err := cfg.Validate(); err == nil {
		t.Error("--eval-hellaswag-every without --hellaswag: no error")
	}
	given := cfg
	given.HellaSwag, given.HellaSwagEvery, given.HellaSwagLimit = "items.jsonl", 7, 20
	out, err := ApplyOverrides(byteConfig(t), given, map[string]bool{"hellaswag": true, "eval-hellaswag-every": true, "hellaswag-limit": true})
	if err != nil || out.HellaSwag != "items.jsonl" || out.HellaSwagEvery != 7 || out.HellaSwagLimit != 20 {
		t.Errorf("resume overrides: %v %+v", err, out)
	}
	// A run without a tokenizer cannot be scored.
	cfg = byteConfig(t)
	cfg.Tokenizer = nil
	cfg.HellaSwag, cfg.HellaSwagEvery = hellaSwagItems, 2
	if _, err := runTrain(t, Options{Config: cfg, RunDir: t.TempDir()}); err == nil {
		t.Error("HellaSwag on a run without a tokenizer: no error")
	}
}

// cancelAt is a run's output that cancels the run's context once a line holding at has been
// written: Ctrl-C at a known point.
type cancelAt struct {
	at     string
	cancel context.CancelFunc
	out    strings.Builder
}

func (w *cancelAt) Write(p []byte) (int, error) {
	w.out.Write(p)
	if strings.Contains(w.out.String(), w.at) {
		w.cancel()
	}
	return len(p), nil
}

// Ctrl-C while HellaSwag or a sample is due does not wait for them: both are cut short and
// dropped, and the run saves its checkpoint and stops.
func TestInterruptCutsHellaSwagAndSample(t *testing.T) {
	cfg := byteConfig(t)
	cfg.HellaSwag, cfg.HellaSwagEvery, cfg.HellaSwagLimit = hellaSwagItems, 3, 0
	cfg.SampleEvery, cfg.SampleTokens, cfg.LogEvery, cfg.CkptEvery = 3, 40, 1, 0
	dir := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelAt{at: "step 3/8 | loss", cancel: cancel}
	_, err := Run(ctx, Options{Config: cfg, RunDir: dir, Backend: cpu.New(2), Out: out})
	if err == nil || !strings.Contains(err.Error(), "interrupted at step 3") {
		t.Fatalf("Run: %v; want interrupted at step 3", err)
	}
	if _, statErr := os.Stat(checkpoint.Path(dir, 3)); statErr != nil {
		t.Errorf("no checkpoint of step 3: %v", statErr)
	}
	if hs := hellaSwagLog(t, filepath.Join(dir, logFile)); len(hs) != 0 {
		t.Errorf("an interrupted HellaSwag evaluation was logged: %v", hs)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, samplesFile)); len(b) != 0 {
		t.Errorf("an interrupted sample was saved: %q", b)
	}
	for _, want := range []string{"hellaswag: interrupted after 0 of", "sample interrupted"} {
		if !strings.Contains(out.out.String(), want) {
			t.Errorf("output has no %q:\n%s", want, out.out.String())
		}
	}
}

// Ctrl-C during the last step's HellaSwag or sample is not a clean end either: the run says what
// was dropped (and that the training itself is complete and saved) instead of returning nil.
func TestInterruptAtTheLastStep(t *testing.T) {
	cfg := byteConfig(t)
	cfg.HellaSwag, cfg.HellaSwagEvery, cfg.HellaSwagLimit = hellaSwagItems, 100, 0
	cfg.SampleEvery, cfg.SampleTokens, cfg.LogEvery = 0, 40, 1
	dir := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelAt{at: "step 8/8 | loss", cancel: cancel}
	_, err := Run(ctx, Options{Config: cfg, RunDir: dir, Backend: cpu.New(2), Out: out})
	if err == nil || !strings.Contains(err.Error(), "interrupted after step 8") || !strings.Contains(err.Error(), "the run is complete") {
		t.Fatalf("Run: %v; want the interruption after step 8 named", err)
	}
	if _, statErr := os.Stat(checkpoint.Path(dir, 8)); statErr != nil {
		t.Errorf("no checkpoint of step 8: %v", statErr)
	}
}

// A sample that cannot be written to samples.txt (a full disk) is said once and the run goes on:
// it stopped the run, without a checkpoint since the last.
func TestSamplesFileFailureWarns(t *testing.T) {
	cfg := byteConfig(t)
	cfg.SampleEvery, cfg.SampleTokens, cfg.CkptEvery = 2, 8, 0
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(filepath.Join(dir, samplesFile), 0o755); err != nil { // not a file: every write fails
		t.Fatal(err)
	}
	var out strings.Builder
	sum, err := Run(context.Background(), Options{Config: cfg, RunDir: dir, Backend: cpu.New(2), Out: &out})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if sum.Checkpoint == "" || strings.Count(out.String(), "warning: "+filepath.Join(dir, samplesFile)) != 1 {
		t.Errorf("checkpoint %q; output:\n%s", sum.Checkpoint, out.String())
	}
}
