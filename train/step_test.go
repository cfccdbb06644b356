package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/internal/graphrec"
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
		for _, k := range []string{"ms", "tok_s", "mfu", "comm_ms", "comm_wait_ms"} {
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
// stops and resumes the pipelined run; and the pipelined runs again with each part of a step
// recorded as a graph and replayed (graphs.go, on graphrec's recording of the CPU backend, which
// keeps arguments as a CUDA graph does): every logged number and the final weights must be the
// same bits, under a learning rate that changes at every step. All of it in fp32, in bf16
// with stochastic rounding, whose seed changes at every step too, and in fp16 with a loss scale
// that overflows and grows (its steps are never pipelined; the graphs are recorded per scale).
func TestPipelinedStepsMatch(t *testing.T) { testPipelinedStepsMatch(t, nil) }

// testPipelinedStepsMatch is TestPipelinedStepsMatch on be (nil: the CPU). A backend that records
// graphs itself uses them in the pipelined runs; the sync run never does.
func testPipelinedStepsMatch(t *testing.T, be backend.Backend) {
	dataDir := writeDataset(t, 50)
	for _, prec := range []string{"fp32", "bf16", "fp16"} {
		t.Run(prec, func(t *testing.T) {
			cfg := smallConfig(dataDir)
			cfg.GradAccum, cfg.GradClip = 2, 0.5 // clipping active: the norms here are above 0.5
			cfg.EvalEvery, cfg.CkptEvery = 5, 4
			if prec != "fp32" {
				cfg.Precision, cfg.StochasticRounding = prec, true
			}
			if prec == "fp16" { // overflows at first, then grows after every 2 clean steps
				cfg.LossScale = LossScaleConfig{Init: 0x1p21, Growth: 2, Backoff: 0.5, Window: 2}
			}
			pipelinedStepsMatch(t, be, cfg)
		})
	}
}

func pipelinedStepsMatch(t *testing.T, be backend.Backend, cfg Config) {
	dirs := map[string]string{}
	names := []string{"sync", "pipelined", "resumed"}
	if be == nil {
		names = append(names, "graphs", "graphs resumed")
	}
	for _, name := range names {
		dirs[name] = filepath.Join(t.TempDir(), name)
		var out bytes.Buffer
		opts := Options{Config: cfg, RunDir: dirs[name], Backend: be, pipeline: pipelineOn, Out: &out}
		if name == "sync" {
			opts.pipeline, opts.NoGraphs = pipelineOff, true
		}
		var rec *graphrec.Backend
		if strings.HasPrefix(name, "graphs") {
			rec = graphrec.Wrap(cpu.New(2))
			opts.Backend = rec
		}
		resumed, stopAt := strings.HasSuffix(name, "resumed"), 7
		if resumed {
			opts.StopAt = stopAt
		}
		if _, err := runTrain(t, opts); err != nil {
			t.Fatal(err)
		}
		if resumed {
			opts.StopAt, opts.Resume = 0, true
			if _, err := runTrain(t, opts); err != nil {
				t.Fatal(err)
			}
		}
		if backend.GrapherOf(opts.Backend) != nil && name != "sync" {
			if !strings.Contains(out.String(), "cuda graphs: on") || strings.Contains(out.String(), "cuda graphs: off") {
				t.Errorf("%s: the run did not keep graphs on:\n%s", name, out.String())
			}
		}
		if rec != nil {
			sessions := [][2]int{{1, cfg.Steps}}
			if resumed {
				sessions = [][2]int{{1, stopAt}, {stopAt + 1, cfg.Steps}}
			}
			captures, launches := wantGraphs(logEntries(t, dirs[name]), sessions)
			if rec.Captures != captures || rec.Launches != launches {
				t.Errorf("%s: %d graphs recorded and %d launched, want %d and %d", name, rec.Captures, rec.Launches, captures, launches)
			}
		}
	}
	want := logEntries(t, dirs["sync"])
	if len(want) != cfg.Steps {
		t.Fatalf("the sync run logged %d steps, want %d", len(want), cfg.Steps)
	}
	if cfg.Precision == "fp16" {
		scales := map[float64]bool{}
		skipped := 0.0
		for _, w := range want {
			scales[w["loss_scale"].(float64)] = true
			skipped += w["skipped"].(float64)
		}
		if len(scales) < 3 || skipped == 0 {
			t.Errorf("the fp16 run should skip steps and change its loss scale more than once (%d skipped, scales %v)", int(skipped), scales)
		}
	}
	clipped := 0
	for step, w := range want {
		if n, ok := w["grad_norm"].(float64); ok && n > cfg.GradClip {
			clipped++
		}
		for _, name := range names[1:] {
			got := logEntries(t, dirs[name])[step]
			for k, v := range w {
				if k == "val_loss" && strings.HasSuffix(name, "resumed") && got[k] == nil {
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
	w := finalParams(t, dirs["sync"])
	for _, name := range names[1:] {
		for i, x := range finalParams(t, dirs[name]) {
			if math.Float32bits(x) != math.Float32bits(w[i]) {
				t.Fatalf("%s: final parameter %d = %v, sync run %v", name, i, x, w[i])
			}
		}
	}
}

// wantGraphs is how many graphs a run records and launches, from its log: each of a step's three
// parts (the first and the last micro-batch, the update) runs directly at its first use, is
// recorded at its second and launched from then on, afresh in each session (from, to) and at
// each new loss scale (1 without fp16).
func wantGraphs(log map[int]map[string]any, sessions [][2]int) (captures, launches int) {
	for _, s := range sessions {
		run := 0 // steps so far at this scale
		for step := s[0]; step <= s[1]; step++ {
			scale, _ := log[step]["loss_scale"].(float64)
			if prev, _ := log[step-1]["loss_scale"].(float64); step > s[0] && scale != prev {
				run = 0
			}
			if run++; run >= 2 {
				launches += 3
				if run == 2 {
					captures += 3
				}
			}
		}
	}
	return captures, launches
}

// finalParams are the weights of a run's last checkpoint.
func finalParams(t *testing.T, dir string) []float32 {
	t.Helper()
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

// When the device refuses every recording, the run goes on without graphs; when a graph's memory
// moves (backend.ErrGraphStale), the work runs directly and is recorded again. Either way the
// numbers are those of a run that never recorded a graph, bit for bit.
func TestGraphFallbacks(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.GradAccum, cfg.Steps = 2, 8
	ref := filepath.Join(t.TempDir(), "direct")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: ref, pipeline: pipelineOff, NoGraphs: true}); err != nil {
		t.Fatal(err)
	}
	want, wantParams := logEntries(t, ref), finalParams(t, ref)
	for _, tc := range []struct {
		name     string
		set      func(r *graphrec.Backend)
		log      string
		captures int
	}{
		{"refused", func(r *graphrec.Backend) { r.FailEndCapture = errors.New("refused by the test") },
			`cuda graphs: off for the rest of the run, recording "micro-batch (first true, last false, loss scale 0.5)" failed: refused by the test`, 0},
		// Stale at the 4th launch (step 3's first micro-batch): its graph and the two others
		// are recorded again at their next uses.
		{"stale", func(r *graphrec.Backend) { r.StaleAtLaunch = 4 }, "is recorded again", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := graphrec.Wrap(cpu.New(2))
			tc.set(rec)
			dir := filepath.Join(t.TempDir(), tc.name)
			var out bytes.Buffer
			if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Backend: rec, pipeline: pipelineOn, Out: &out}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.log) || rec.Captures != tc.captures {
				t.Errorf("%d recordings (want %d); the log lacks %q:\n%s", rec.Captures, tc.captures, tc.log, out.String())
			}
			got := logEntries(t, dir)
			for step, w := range want {
				for k, v := range w {
					if got[step][k] != v {
						t.Errorf("step %d: %s = %v, %v without graphs", step, k, got[step][k], v)
					}
				}
			}
			for i, x := range finalParams(t, dir) {
				if math.Float32bits(x) != math.Float32bits(wantParams[i]) {
					t.Fatalf("final parameter %d = %v, %v without graphs", i, x, wantParams[i])
				}
			}
		})
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

// Only a GPT-2 samples text: a BERT run's sample steps do no host work, so they do not end the
// pipeline (or, data-parallel, meet in a barrier) for nothing.
func TestHostWorkSamplesOnlyGPT(t *testing.T) {
	tr := &Trainer{cfg: Config{Steps: 10, SampleEvery: 5, SampleTokens: 16}}
	if _, _, sample, _ := tr.hostWork(5); sample {
		t.Error("a run without a GPT-2 model samples at step 5")
	}
	tr.model = &gpt.Model{}
	if _, _, sample, _ := tr.hostWork(5); !sample {
		t.Error("a GPT-2 run does not sample at step 5")
	}
	if _, _, sample, _ := tr.hostWork(4); sample {
		t.Error("a GPT-2 run samples at step 4 with --sample-every 5")
	}
}
