package train

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/profile"
	"github.com/gpt2go/gpt2go/gpt"
)

// Pitfalls `gpt2go bench` and `gpt2go profile` name after their timing: settings that leave
// speed unused, each with the flag that fixes it. bench at the suggested flags, or the ladder's
// rungs (the vocabulary's padding, syncs, graphs), measure what fixing one gains; the profile
// adds what the affected ops took (profileHints).

// LargestBatch is the largest micro-batch B (a power of two, up to maxB) whose memory plan for
// the model of run at its sequence length in precision prec fits budget with its reserve, or 0
// when not even B=1 fits.
func LargestBatch(run Config, prec gpt.Precision, budget backend.MemoryBudget, maxB int) int {
	best := 0
	for B := 1; B <= maxB; B *= 2 {
		if gpt.PlanBytes(run.memoryPlan(B, prec))+budget.Reserve > budget.Free {
			break
		}
		best = B
	}
	return best
}

// gpuMinTokens is the micro-batch (B*T tokens) below which a GPU's matmuls have too few tiles to
// fill an H100's 132 SMs (at 128x128 output tiles, 124M's C=768 products need B*T >= 8192 for
// one wave; llm.c and build-nanogpt train at 16K-64K).
const gpuMinTokens = 8192

// Pitfalls lists the hints for a bench of run's model at its micro-batch and sequence length:
// the vocabulary or width not a multiple of 64, and (given the budget the plan was checked
// against, before the model's allocation: budget.Free 0 means unknown) a GPU micro-batch that
// leaves its memory unused or is too small to fill it. largest is LargestBatch's answer
// (0 when the budget is unknown).
func Pitfalls(run Config, prec gpt.Precision, budget backend.MemoryBudget, gpu bool) (hints []string, largest int) {
	found, largest := findPitfalls(run, prec, budget, gpu)
	for _, p := range found {
		hints = append(hints, p.text)
	}
	return hints, largest
}

// pitfall is one of Pitfalls' hints, with its kind for a caller that adds what it measured.
type pitfall struct {
	kind pitfallKind
	text string
}

type pitfallKind int

const (
	raggedVocab pitfallKind = iota // the vocabulary is not a multiple of 64
	raggedWidth                    // the width is not
	memoryLeft                     // a larger micro-batch fits the GPU's memory
	smallBatch                     // the micro-batch is too small to fill the GPU
)

func findPitfalls(run Config, prec gpt.Precision, budget backend.MemoryBudget, gpu bool) (found []pitfall, largest int) {
	cfg, B, T := run.Model, run.BatchSize, run.SeqLen
	add := func(kind pitfallKind, format string, args ...any) {
		found = append(found, pitfall{kind, fmt.Sprintf(format, args...)})
	}
	if cfg.PaddedVocabSize%64 != 0 {
		ladder := "; the ladder's PyTorch rung '+ vocab 50304' measures the cost"
		if run.IsBERT() { // bench --ladder times GPT-2 only
			ladder = ""
		}
		add(raggedVocab, "the vocabulary (%d) is not a multiple of 64: the LM head's matmuls, the largest of the step, run on ragged tiles; --pad-vocab 64 pads it to %d (masked out of the loss)%s",
			cfg.PaddedVocabSize, (cfg.PaddedVocabSize+63)/64*64, ladder)
	}
	if cfg.Channels%64 != 0 {
		add(raggedWidth, "--n-embd %d is not a multiple of 64: every matmul runs on ragged tiles", cfg.Channels)
	}
	if budget.Free > 0 {
		largest = LargestBatch(run, prec, budget, 1024)
		used := gpt.PlanBytes(run.memoryPlan(B, prec))
		if gpu && largest > B { // a CPU's throughput does not grow with the batch
			add(memoryLeft, "--batch-size %d plans %s of the %s free %s; the largest micro-batch that fits is --batch-size %d (with --grad-accum to keep the tokens per step)",
				B, backend.FormatBytes(used), backend.FormatBytes(budget.Free), budget.Place, largest)
		}
	}
	if gpu && B*T < gpuMinTokens {
		add(smallBatch, "a micro-batch of %d tokens (B=%d x T=%d) is too small to fill the GPU (under %d): time a larger --batch-size", B*T, B, T, gpuMinTokens)
	}
	return found, largest
}

// profileHints are Pitfalls' hints for a profile, each followed by what the profile measured of
// it where it can (byShape is the profile's table with a row per op and shape, over steps
// steps): what the matmuls on ragged tiles took. Then two that only a profile sees: the
// host<->device copies when they take over 5% of the recorded time, and, on a backend that
// counts its calls, more than 50 kernel launches per step, which `train` and `bench` replay as
// graphs but a profile, timing each op, cannot.
func profileHints(run Config, prec gpt.Precision, budget backend.MemoryBudget, gpu bool,
	byShape *profile.Report, steps int, calls *StepCalls) []string {
	cfg := run.Model
	found, _ := findPitfalls(run, prec, budget, gpu)
	share := func(match func(r profile.Row) bool) (ms, pct float64, n int) {
		for _, r := range byShape.Rows {
			if r.Kind == "op" && match(r) {
				ms += r.SelfMs
				pct += r.SelfPct
				n += r.Calls
			}
		}
		return ms / float64(steps), pct, n / steps
	}
	isMatmul := func(r profile.Row) bool { return strings.HasPrefix(r.Name, "Matmul") }
	var hints []string
	for _, p := range found {
		h := p.text
		switch p.kind {
		case raggedVocab:
			oc := fmt.Sprintf("OC=%d", cfg.PaddedVocabSize)
			if ms, pct, _ := share(func(r profile.Row) bool { return isMatmul(r) && slices.Contains(strings.Fields(r.Shape), oc) }); ms > 0 {
				h += fmt.Sprintf(" (measured here: the LM head's matmuls took %.2f ms per step, %.0f%% of the recorded time)", ms, pct)
			}
		case raggedWidth:
			if ms, pct, _ := share(isMatmul); ms > 0 {
				h += fmt.Sprintf(" (measured here: the matmuls took %.2f ms per step, %.0f%% of the recorded time)", ms, pct)
			}
		}
		hints = append(hints, h)
	}
	copies := func(r profile.Row) bool {
		return r.Name == "Upload" || r.Name == "UploadInt32" || r.Name == "Download"
	}
	if ms, pct, n := share(copies); pct > 5 {
		hints = append(hints, fmt.Sprintf("%d host<->device copies per step took %.2f ms per step, %.0f%% of the recorded time (the profile's steps wait for each loss; `train` and `bench` copy from page-locked memory without waiting, and a larger --batch-size spreads the copies over more tokens)", n, ms, pct))
	}
	if calls != nil && calls.Launches > 50 {
		hints = append(hints, fmt.Sprintf("%.0f kernel launches per step took the host %.2f ms per step; `train` and `bench` record each part of a step as a CUDA graph and replay it in one launch (on unless --cuda-graphs=false or GPT2GO_CUDA_GRAPHS=0), which a profile cannot do while it times each op: compare `gpt2go bench` with and without --cuda-graphs=false for the gain",
			calls.Launches, calls.LaunchMs))
	}
	return hints
}

// stepCallsOf is the host calls d, queued over steps steps, per step.
func stepCallsOf(d backend.HostCalls, steps int) *StepCalls {
	n := float64(steps)
	return &StepCalls{Launches: float64(d.Launches) / n, Graphs: float64(d.Graphs) / n, Copies: float64(d.Copies) / n,
		LaunchMs: d.LaunchTime.Seconds() * 1000 / n}
}
