package train

import (
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/profile"
	"github.com/gpt2go/gpt2go/gpt"
)

// LargestBatch follows the memory plan: the answer fits, twice it does not; and Pitfalls names
// the unpadded vocabulary, the unused memory and the small GPU micro-batch, and nothing for a
// padded model at its largest batch.
func TestPitfalls(t *testing.T) {
	cfg, err := gpt.Preset("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	cfg.PaddedVocabSize = cfg.VocabSize // 50257
	prec := gpt.Precision{}
	const T = 1024
	plan := func(B int) int64 { return gpt.PlanBytes(cfg.PrecisionMemoryPlan(B, T, prec)) }
	budget := backend.MemoryBudget{Place: "on the GPU", Free: plan(8) + plan(8)/3, Total: 80 << 30, Reserve: 256 << 20}
	run := func(B, T int) Config { return Config{Model: cfg, BatchSize: B, SeqLen: T} }
	if got := LargestBatch(run(1, T), prec, budget, 1024); got != 8 {
		t.Errorf("LargestBatch = %d, want 8 (B=8 plans %d, B=16 %d, free %d)", got, plan(8), plan(16), budget.Free)
	}
	if got := LargestBatch(run(1, T), prec, backend.MemoryBudget{Free: plan(1) - 1}, 1024); got != 0 {
		t.Errorf("LargestBatch with too little memory = %d, want 0", got)
	}
	hints, largest := Pitfalls(run(2, T), prec, budget, true)
	text := strings.Join(hints, "\n")
	for _, want := range []string{"50257", "--pad-vocab 64", "50304", "--batch-size 8", "2048 tokens"} {
		if !strings.Contains(text, want) {
			t.Errorf("hints lack %q:\n%s", want, text)
		}
	}
	if largest != 8 {
		t.Errorf("largest = %d, want 8", largest)
	}
	cfg.PaddedVocabSize = 50304
	if hints, _ := Pitfalls(run(8, T), prec, backend.MemoryBudget{Free: budget.Free, Reserve: budget.Reserve}, true); len(hints) != 0 {
		t.Errorf("a padded model at its largest batch got hints: %v", hints)
	}
	if hints, largest := Pitfalls(run(1, 64), prec, backend.MemoryBudget{}, false); len(hints) != 0 || largest != 0 {
		t.Errorf("unknown budget on the CPU: hints %v, largest %d", hints, largest)
	}
	if hints, largest := Pitfalls(run(1, T), prec, budget, false); len(hints) != 0 || largest != 8 {
		t.Errorf("the CPU with room for B=8: hints %v (want none: its speed does not grow with B), largest %d", hints, largest)
	}
}

// The launch hint names the measured host time of a step's launches when graphs are off, and
// stays quiet with graphs on, few launches or no counts (the CPU).
func TestLaunchHint(t *testing.T) {
	off := &BenchResult{MsPerStep: 35, Graphs: "off (--cuda-graphs=false or GPT2GO_CUDA_GRAPHS=0)", Calls: &StepCalls{Launches: 700, Copies: 6, LaunchMs: 3.5}}
	h := off.LaunchHint()
	for _, want := range []string{"700 kernel launches", "3.50 ms per step", "(10% of the step)", "--cuda-graphs=false"} {
		if !strings.Contains(h, want) {
			t.Errorf("hint %q lacks %q", h, want)
		}
	}
	for name, r := range map[string]*BenchResult{
		"graphs on":      {MsPerStep: 30, Graphs: "on: 3 graphs recorded and replayed", Calls: &StepCalls{Launches: 4, Graphs: 3, LaunchMs: 0.1}},
		"few launches":   {MsPerStep: 30, Graphs: "off: fp16", Calls: &StepCalls{Launches: 40}},
		"no call counts": {MsPerStep: 30, Graphs: "off: fp16"},
	} {
		if h := r.LaunchHint(); h != "" {
			t.Errorf("%s: hint %q, want none", name, h)
		}
	}
}

// profileHints adds to Pitfalls' hints what the profile's table measured: the LM head's
// matmuls (the rows whose OC is the vocabulary) for a ragged vocabulary, every matmul for a
// ragged width; and names copies over 5% of the time and over 50 launches per step.
func TestProfileHints(t *testing.T) {
	cfg := gpt.Config{NumLayers: 2, NumHeads: 4, Channels: 96, BlockSize: 64, VocabSize: 1000, PaddedVocabSize: 1000}
	table := &profile.Report{Rows: []profile.Row{
		{Name: "step", Kind: "scope", Calls: 2, SelfMs: 1, TotalMs: 20, SelfPct: 5, TotalPct: 100},
		{Name: "MatmulForward", Kind: "op", Shape: "N=256 C=96 OC=1000", Calls: 2, SelfMs: 2, SelfPct: 10},
		{Name: "MatmulBackward", Kind: "op", Shape: "N=256 C=96 OC=1000", Calls: 2, SelfMs: 2.4, SelfPct: 12},
		{Name: "MatmulBackward", Kind: "op", Shape: "N=256 C=96 OC=288", Calls: 4, SelfMs: 4, SelfPct: 20},
		{Name: "Upload", Kind: "op", Shape: "N=3", Calls: 2, SelfMs: 0.4, SelfPct: 2},
		{Name: "UploadInt32", Kind: "op", Shape: "N=256", Calls: 4, SelfMs: 0.8, SelfPct: 4},
	}}
	calls := &StepCalls{Launches: 300, LaunchMs: 1.5}
	hints := profileHints(Config{Model: cfg, BatchSize: 4, SeqLen: 64}, gpt.Precision{}, backend.MemoryBudget{}, false, table, 2, calls)
	text := strings.Join(hints, "\n")
	for _, want := range []string{
		"the LM head's matmuls took 2.20 ms per step, 22% of the recorded time",
		"--n-embd 96 is not a multiple of 64: every matmul runs on ragged tiles (measured here: the matmuls took 4.20 ms per step, 42%",
		"3 host<->device copies per step took 0.60 ms per step, 6% of the recorded time",
		"300 kernel launches per step took the host 1.50 ms per step",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("hints lack %q:\n%s", want, text)
		}
	}
	if len(hints) != 4 {
		t.Errorf("%d hints, want 4:\n%s", len(hints), text)
	}
	cfg.PaddedVocabSize, cfg.Channels = 1024, 128
	table.Rows = table.Rows[:5] // copies 2%
	if hints := profileHints(Config{Model: cfg, BatchSize: 4, SeqLen: 64}, gpt.Precision{}, backend.MemoryBudget{}, false, table, 2, &StepCalls{Launches: 40}); len(hints) != 0 {
		t.Errorf("a padded model with few copies and launches got hints: %v", hints)
	}
}
