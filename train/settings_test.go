package train

import (
	"math"
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
