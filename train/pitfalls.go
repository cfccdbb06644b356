package train

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/gpt"
)

// Pitfalls `gpt2go bench` names after its timing: settings that leave speed unused, each with
// the flag that fixes it. Their cost is not measured here: bench at the suggested flags, or the
// ladder's rungs (the vocabulary's padding, syncs), measure it.

// LargestBatch is the largest micro-batch B (a power of two, up to maxB) whose memory plan for
// cfg at sequence length T in precision prec fits budget with its reserve, or 0 when not even
// B=1 fits.
func LargestBatch(cfg gpt.Config, T int, prec gpt.Precision, budget backend.MemoryBudget, maxB int) int {
	best := 0
	for B := 1; B <= maxB; B *= 2 {
		if gpt.PlanBytes(cfg.PrecisionMemoryPlan(B, T, prec))+budget.Reserve > budget.Free {
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

// Pitfalls lists the hints for a bench of cfg at micro-batch B, sequence length T: the
// vocabulary or width not a multiple of 64, and (given the budget the plan was checked against,
// before the model's allocation: budget.Free 0 means unknown) a GPU micro-batch that leaves its
// memory unused or is too small to fill it. largest is LargestBatch's answer
// (0 when the budget is unknown).
func Pitfalls(cfg gpt.Config, B, T int, prec gpt.Precision, budget backend.MemoryBudget, gpu bool) (hints []string, largest int) {
	if cfg.PaddedVocabSize%64 != 0 {
		hints = append(hints, fmt.Sprintf("the vocabulary (%d) is not a multiple of 64: the LM head's matmuls, the largest of the step, run on ragged tiles; --pad-vocab 64 pads it to %d (masked out of the loss); the ladder's PyTorch rung '+ vocab 50304' measures the cost",
			cfg.PaddedVocabSize, (cfg.PaddedVocabSize+63)/64*64))
	}
	if cfg.Channels%64 != 0 {
		hints = append(hints, fmt.Sprintf("--n-embd %d is not a multiple of 64: every matmul runs on ragged tiles", cfg.Channels))
	}
	if budget.Free > 0 {
		largest = LargestBatch(cfg, T, prec, budget, 1024)
		used := gpt.PlanBytes(cfg.PrecisionMemoryPlan(B, T, prec))
		if gpu && largest > B { // a CPU's throughput does not grow with the batch
			hints = append(hints, fmt.Sprintf("--batch-size %d plans %s of the %s free %s; the largest micro-batch that fits is --batch-size %d (with --grad-accum to keep the tokens per step)",
				B, backend.FormatBytes(used), backend.FormatBytes(budget.Free), budget.Place, largest))
		}
	}
	if gpu && B*T < gpuMinTokens {
		hints = append(hints, fmt.Sprintf("a micro-batch of %d tokens (B=%d x T=%d) is too small to fill the GPU (under %d): time a larger --batch-size", B*T, B, T, gpuMinTokens))
	}
	return hints, largest
}
