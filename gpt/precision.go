package gpt

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// Precision is the model's storage plan for mixed-precision training; the zero value is plain
// fp32. In a 16-bit plan (Compute bf16 or fp16):
//   - Params stays the fp32 master copy that AdamW updates and checkpoints hold, with the AdamW
//     moments (fp32); a Compute copy of the parameters, rewritten after every update, is what
//     forward and backward read;
//   - activations, the logits and the activation gradients are Compute;
//   - LayerNorm means and rstds, attention's and the loss's log-sum-exps and the per-position
//     losses stay fp32; every op accumulates in fp32 (see backend.DType);
//   - the parameter gradients are Grads: fp32 by default (every micro-batch's contribution is
//     added to an fp32 sum), or Compute.
type Precision struct {
	Compute backend.DType
	Grads   backend.DType
	// StochasticRounding makes the parameter copy stochastically rounded from the master
	// (backend.RoundStochastic, seeded by the step) instead of rounded to nearest.
	StochasticRounding bool
}

// String names the plan as the command line does: fp32, bf16, fp16, with the options that differ
// from the defaults in brackets ("bf16 (bf16 grads, stochastic rounding)").
func (p Precision) String() string {
	s := p.Compute.String()
	var opts []string
	if p.Grads != backend.F32 {
		opts = append(opts, p.Grads.String()+" grads")
	}
	if p.StochasticRounding {
		opts = append(opts, "stochastic rounding")
	}
	for i, o := range opts {
		if i == 0 {
			s += " (" + o
		} else {
			s += ", " + o
		}
	}
	if len(opts) > 0 {
		s += ")"
	}
	return s
}

// Mixed says whether the plan keeps a 16-bit parameter copy beside the fp32 master.
func (p Precision) Mixed() bool { return p.Compute != backend.F32 }

// Validate checks that the plan is one the model implements.
func (p Precision) Validate() error {
	switch p.Compute {
	case backend.F32, backend.BF16, backend.F16:
	default:
		return fmt.Errorf("unsupported compute precision %v; use fp32, bf16 or fp16", p.Compute)
	}
	if p.Grads != backend.F32 && p.Grads != p.Compute {
		return fmt.Errorf("gradients in %v with %v compute: gradients are fp32 or the compute format", p.Grads, p.Compute)
	}
	if p.StochasticRounding && !p.Mixed() {
		return fmt.Errorf("stochastic rounding needs a 16-bit precision (bf16 or fp16)")
	}
	return nil
}

// stochasticSeed is the Convert seed of the parameter copy after update step (never 0, which
// means round to nearest): it depends on the step alone, so a resumed run draws the same bits.
func stochasticSeed(step int) uint64 { return uint64(step)*0x9e37_79b9_7f4a_7c15 | 1 }
