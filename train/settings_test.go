package train

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/gpt"
)

// The trainer's steps, rebuilt by hand: the same init (InitGPT2 with --seed), the loader's
// batches in order, Forward and Backward, the clip factor of backend.StepStatsOf from the
// gradient's norm, and Model.Update with the run's AdamW settings at LRAt(step-1) (LRAt's index
// is the 0-based update). The trainer's weights after a few steps, warmup and decay both, must
// be these bits. Every other train test compares runs with runs, which share any mistake in
// passing the settings on: a trainer that dropped --grad-clip or --weight-decay (the logged
// grad_norm is the true norm either way), or took the learning rate of the wrong step, passed
// them all. Each case also checks that the reference without the setting differs, so that the
// comparison can see the setting at all.
func TestTrainerStepsMatchHandMadeSteps(t *testing.T) {
	dataDir := writeDataset(t, 50)
	cases := []struct {
		name          string
		clip, decay   float64
		clips, decays bool // the setting is on: its absence must show
	}{
		{"clip and decay", 0.05, 0.5, true, true},
		{"clip only", 0.05, 0, true, false},
		{"decay only", 0, 0.5, false, true},
		{"neither", 0, 0, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallConfig(dataDir)
			cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.CkptEvery = 5, 2, 0, 0
			cfg.GradClip, cfg.WeightDecay = tc.clip, tc.decay
			run := filepath.Join(t.TempDir(), "run")
			if _, err := runTrain(t, Options{Config: cfg, RunDir: run}); err != nil {
				t.Fatal(err)
			}
			loaded, err := LoadWeights(run)
			if err != nil {
				t.Fatal(err)
			}
			if loaded.Step != cfg.Steps {
				t.Fatalf("checkpoint of step %d, want %d", loaded.Step, cfg.Steps)
			}
			want, clipped := handMadeSteps(t, cfg, cfg.GradClip, cfg.WeightDecay)
			if tc.clips && clipped == 0 {
				t.Fatalf("--grad-clip %g clipped none of the %d steps; lower it", cfg.GradClip, cfg.Steps)
			}
			if d := firstDiff(loaded.Params, want); d >= 0 {
				t.Fatalf("param %d after %d steps: trainer %g, by hand %g (%d steps clipped)", d, cfg.Steps, loaded.Params[d], want[d], clipped)
			}
			if tc.clips {
				if noClip, _ := handMadeSteps(t, cfg, 0, cfg.WeightDecay); firstDiff(noClip, want) < 0 {
					t.Error("the reference is the same without clipping: the test cannot see --grad-clip")
				}
			}
			if tc.decays {
				if noDecay, _ := handMadeSteps(t, cfg, cfg.GradClip, 0); firstDiff(noDecay, want) < 0 {
					t.Error("the reference is the same without weight decay: the test cannot see --weight-decay")
				}
			}
		})
	}
}

// handMadeSteps runs cfg's cfg.Steps steps (GPT-2, one process, fp32, in-order data, no
// accumulation) with the given clip and weight decay and returns the weights and how many
// steps were clipped.
func handMadeSteps(t *testing.T, cfg Config, clip, decay float64) (params []float32, clipped int) {
	t.Helper()
	if cfg.GradAccum != 1 || cfg.Shuffle || cfg.Precision != "" {
		t.Fatal("handMadeSteps: only fp32, in-order, unaccumulated steps")
	}
	be := cpu.New(1)
	defer be.Close()
	B, T := cfg.BatchSize, cfg.SeqLen
	m, err := gpt.New(be, cfg.Model, B, T)
	if err != nil {
		t.Fatal(err)
	}
	m.InitGPT2(cfg.Seed)
	ds, err := data.Open(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds.TrainShards, B, T, cfg.Model.VocabSize, false, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	opt := gpt.AdamWConfig{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: decay}
	inputs, targets := make([]int32, B*T), make([]int32, B*T)
	for step := 1; step <= cfg.Steps; step++ {
		if err := l.Next(inputs, targets); err != nil {
			t.Fatal(err)
		}
		m.ZeroGrad()
		if _, err := m.Forward(inputs, targets, B, T); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(1); err != nil {
			t.Fatal(err)
		}
		st := backend.StepStatsOf(m.GradSquares(), clip, 1)
		if st.Scale < 1 {
			clipped++
		}
		m.Update(opt, cfg.LRAt(step-1), step, float64(st.Scale))
	}
	params = make([]float32, m.Params.Len())
	be.Download(params, m.Params)
	return params, clipped
}

// firstDiff is the index of the first element whose bits differ, -1 if none (or lengths differ:
// 0).
func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// Each step's logged lr is LRAt(step-1), the learning rate its update used (LRAt's index is the
// 0-based update: step 1 is the first warmup step, lr LR/Warmup), through warmup and decay.
// TestLRSchedule checks LRAt itself; taking LRAt(step) instead was caught only by a loss
// threshold.
func TestLoggedLRIsTheSchedule(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.CkptEvery = 6, 3, 0, 0
	run := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: run}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(run, logFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[int]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Step int      `json:"step"`
			LR   *float64 `json:"lr"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("bad log line %q: %v", sc.Text(), err)
		}
		if e.LR != nil {
			got[e.Step] = *e.LR
		}
	}
	if len(got) != cfg.Steps {
		t.Fatalf("logged lr for %d steps, want %d", len(got), cfg.Steps)
	}
	// Spelt out for this config: LR 1e-2 reached at index 2 (the third step), then cosine from
	// index 3 (ratio 0) towards MinLR 1e-3 at index 6.
	cosine := func(ratio float64) float64 { return 1e-3 + 0.5*(1+math.Cos(math.Pi*ratio))*9e-3 }
	want := []float64{1e-2 / 3, 2e-2 / 3, 1e-2, 1e-2, cosine(1.0 / 3), cosine(2.0 / 3)}
	for step := 1; step <= cfg.Steps; step++ {
		if got[step] != cfg.LRAt(step-1) {
			t.Errorf("step %d: logged lr %v, want LRAt(%d) = %v", step, got[step], step-1, cfg.LRAt(step-1))
		}
		if math.Abs(got[step]-want[step-1]) > 1e-12 {
			t.Errorf("step %d: logged lr %v, want %v", step, got[step], want[step-1])
		}
	}
}
