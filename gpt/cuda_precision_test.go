package gpt_test

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

// mixedSteps trains a tiny model for steps AdamW steps in plan prec on be, the same batch every
// step, and returns each step's loss and the final fp32 master weights. The loss is scaled by
// 1024 in backward (and the gradients unscaled in the update), so fp16's activation gradients
// stay in its range.
func mixedSteps(t *testing.T, be backend.Backend, prec gpt.Precision, steps int) ([]float32, []float32) {
	t.Helper()
	cfg := gpt.Config{BlockSize: 64, VocabSize: 100, PaddedVocabSize: 128, NumLayers: 2, NumHeads: 4, Channels: 64}
	const B, T, scale = 4, 64, 1024
	m, err := gpt.NewWithPrecision(be, cfg, B, T, prec)
	if err != nil {
		t.Fatal(err)
	}
	m.InitGPT2(11)
	inputs, targets := make([]int32, B*T), make([]int32, B*T)
	for i := range inputs {
		inputs[i] = int32((i*7 + i/5) % cfg.VocabSize)
		targets[i] = int32((i*7 + i/5 + 3) % cfg.VocabSize)
	}
	var losses []float32
	for step := 1; step <= steps; step++ {
		loss, err := m.Forward(inputs, targets, B, T)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss)
		m.ZeroGrad()
		if err := m.Backward(scale); err != nil {
			t.Fatal(err)
		}
		m.Update(gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}, 1e-3, step, 1.0/scale)
	}
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	params := make([]float32, m.Params.Len())
	be.Download(params, m.Params)
	return losses, params
}

// A few training steps in bf16 and fp16 on the GPU track the CPU's exact emulation of the same
// plan, and repeat bit for bit on the GPU. Both backends start from the same fp32 weights and the
// same 16-bit copy (Convert is bit-identical), so the first loss differs only by activations that
// round differently where the fp32 sums straddle a rounding boundary; later steps add the
// differences of the updates. Bound: every step's loss within 16 epsilon of the format relative
// (bf16 6.3%, fp16 0.8%): about 4 epsilon of forward differences per step, not growing faster
// than that over 6 steps at lr 1e-3.
func TestCUDAMixedPrecisionTracksCPU(t *testing.T) {
	g := cudaBackend(t)
	c := cpu.New(0)
	for _, prec := range []gpt.Precision{
		{Compute: backend.BF16}, {Compute: backend.BF16, Grads: backend.BF16}, {Compute: backend.BF16, StochasticRounding: true},
		{Compute: backend.F16}, {Compute: backend.F16, Grads: backend.F16},
	} {
		t.Run(prec.String(), func(t *testing.T) {
			if err := g.CheckDType(prec.Compute); err != nil {
				t.Skip(err)
			}
			const steps = 6
			want, _ := mixedSteps(t, c, prec, steps)
			got, params := mixedSteps(t, g, prec, steps)
			again, paramsAgain := mixedSteps(t, g, prec, steps)
			bound := 4 * prec.Compute.Epsilon()
			for i := range want {
				rel := math.Abs(float64(got[i])-float64(want[i])) / float64(want[i])
				t.Logf("step %d: GPU %.6f CPU %.6f (rel %.1e, bound %.1e)", i+1, got[i], want[i], rel, bound)
				if !(rel <= bound) {
					t.Errorf("step %d: GPU loss %v, CPU %v: relative difference %.2e > %.2e", i+1, got[i], want[i], rel, bound)
				}
				if math.Float32bits(got[i]) != math.Float32bits(again[i]) {
					t.Errorf("step %d: the GPU gave loss %v, then %v", i+1, got[i], again[i])
				}
			}
			if want[steps-1] >= want[0] {
				t.Errorf("the CPU's loss did not fall: %v", want)
			}
			for i := range params {
				if math.Float32bits(params[i]) != math.Float32bits(paramsAgain[i]) {
					t.Fatalf("master weight %d: %v, then %v on the same GPU", i, params[i], paramsAgain[i])
				}
			}
		})
	}
}

// On the GPU the plan of every precision is what New allocates: bf16 and fp16 buffers take their
// native 2 bytes an element, as the plan (checked against free memory before allocating) counts.
func TestCUDAPrecisionPlanMatchesAllocations(t *testing.T) {
	g := cudaBackend(t)
	cfg := gpt.Config{BlockSize: 64, VocabSize: 101, PaddedVocabSize: 128, NumLayers: 3, NumHeads: 3, Channels: 60}
	for _, prec := range []gpt.Precision{{}, {Compute: backend.BF16}, {Compute: backend.BF16, Grads: backend.BF16}, {Compute: backend.F16}} {
		if g.CheckDType(prec.Compute) != nil {
			continue
		}
		before := g.Allocated()
		if _, err := gpt.NewWithPrecision(g, cfg, 3, 11, prec); err != nil {
			t.Fatal(err)
		}
		if want, got := gpt.PlanBytes(cfg.PrecisionMemoryPlan(3, 11, prec)), g.Allocated()-before; got != want {
			t.Errorf("%v: plan says %d bytes, the GPU allocated %d", prec, want, got)
		}
	}
}
