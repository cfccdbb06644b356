package train

import (
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
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
	if got := LargestBatch(cfg, T, prec, budget, 1024); got != 8 {
		t.Errorf("LargestBatch = %d, want 8 (B=8 plans %d, B=16 %d, free %d)", got, plan(8), plan(16), budget.Free)
	}
	if got := LargestBatch(cfg, T, prec, backend.MemoryBudget{Free: plan(1) - 1}, 1024); got != 0 {
		t.Errorf("LargestBatch with too little memory = %d, want 0", got)
	}
	hints, largest := Pitfalls(cfg, 2, T, prec, budget, true)
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
	if hints, _ := Pitfalls(cfg, 8, T, prec, backend.MemoryBudget{Free: budget.Free, Reserve: budget.Reserve}, true); len(hints) != 0 {
		t.Errorf("a padded model at its largest batch got hints: %v", hints)
	}
	if hints, largest := Pitfalls(cfg, 1, 64, prec, backend.MemoryBudget{}, false); len(hints) != 0 || largest != 0 {
		t.Errorf("unknown budget on the CPU: hints %v, largest %d", hints, largest)
	}
	if hints, largest := Pitfalls(cfg, 1, T, prec, budget, false); len(hints) != 0 || largest != 8 {
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
