package train

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/checkpoint"
)

// logEntries reads a run's log.jsonl as step -> the fields that must repeat bit for bit
// (times excluded).
func logEntries(t *testing.T, dir string) map[int]map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, logFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int]map[string]any{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		step := int(e["step"].(float64))
		for _, k := range []string{"ms", "tok_s", "mfu"} {
			delete(e, k)
		}
		if out[step] == nil {
			out[step] = map[string]any{}
		}
		for k, v := range e {
			out[step][k] = v
		}
	}
	return out
}

// TestPipelinedStepsMatch runs the same training with each step finished before the next is
// queued and with the next queued first (step.go's pipelining, forced on the CPU), with
// gradient accumulation and clipping, validation and checkpoints between pipelined steps, then
// stops and resumes the pipelined run: every logged number and the final weights must be the
// same bits.
func TestPipelinedStepsMatch(t *testing.T) { testPipelinedStepsMatch(t, nil) }

// testPipelinedStepsMatch is TestPipelinedStepsMatch on be (nil: the CPU).
func testPipelinedStepsMatch(t *testing.T, be backend.Backend) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.GradAccum, cfg.GradClip = 2, 0.5 // clipping active: the norms here are above 0.5
	cfg.EvalEvery, cfg.CkptEvery = 5, 4
	dirs := map[string]string{}
	for _, name := range []string{"sync", "pipelined", "resumed"} {
		dirs[name] = filepath.Join(t.TempDir(), name)
		opts := Options{Config: cfg, RunDir: dirs[name], Backend: be, pipeline: pipelineOn}
		if name == "sync" {
			opts.pipeline = pipelineOff
		}
		if name == "resumed" {
			opts.StopAt = 7
		}
		if _, err := runTrain(t, opts); err != nil {
			t.Fatal(err)
		}
		if name == "resumed" {
			opts.StopAt, opts.Resume = 0, true
			if _, err := runTrain(t, opts); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := logEntries(t, dirs["sync"])
	if len(want) != cfg.Steps {
		t.Fatalf("the sync run logged %d steps, want %d", len(want), cfg.Steps)
	}
	clipped := 0
	for step, w := range want {
		if n, ok := w["grad_norm"].(float64); ok && n > cfg.GradClip {
			clipped++
		}
		for _, name := range []string{"pipelined", "resumed"} {
			got := logEntries(t, dirs[name])[step]
			for k, v := range w {
				if k == "val_loss" && name == "resumed" && got[k] == nil {
					continue
				}
				if got[k] != v {
					t.Errorf("%s, step %d: %s = %v, sync run %v", name, step, k, got[k], v)
				}
			}
		}
	}
	if clipped == 0 {
		t.Error("no step was clipped; the test should exercise the clip factor")
	}
	final := func(dir string) []float32 {
		entries, err := checkpoint.List(dir)
		if err != nil || len(entries) == 0 {
			t.Fatalf("%s: %v", dir, err)
		}
		ck, err := checkpoint.Load(entries[len(entries)-1].Path)
		if err != nil {
			t.Fatal(err)
		}
		return ck.Params
	}
	w := final(dirs["sync"])
	for _, name := range []string{"pipelined", "resumed"} {
		for i, x := range final(dirs[name]) {
			if math.Float32bits(x) != math.Float32bits(w[i]) {
				t.Fatalf("%s: final parameter %d = %v, sync run %v", name, i, x, w[i])
			}
		}
	}
}

// TestPipelinedNonFiniteStops: a NaN found while the next step is already queued still stops
// the run at the step that had it, and no checkpoint but step 0's is written.
func TestPipelinedNonFiniteStops(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Init = nanInit(t, cfg)
	dir := filepath.Join(t.TempDir(), "run")
	_, err := runTrain(t, Options{Config: cfg, RunDir: dir, pipeline: pipelineOn})
	if err == nil || !strings.Contains(err.Error(), "step 1:") || !strings.Contains(err.Error(), "not finite") {
		t.Fatalf("NaN loss: %v", err)
	}
	entries, _ := checkpoint.List(dir)
	if len(entries) != 1 || entries[0].Step != 0 {
		t.Fatalf("checkpoints after NaN stop: %+v, want only step 0", entries)
	}
}
