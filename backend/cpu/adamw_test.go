package cpu

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// TestAdamW runs the float32 kernel for a few steps beside a float64 transcription of
// torch.optim.AdamW's single-tensor update.
func TestAdamW(t *testing.T) {
	r := newRand(15)
	N := 1000
	h := backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 0.7}
	params := randoms[float32](r, N)
	m, v := make([]float32, N), make([]float32, N)
	ref := make([]float64, N)
	refM, refV := make([]float64, N), make([]float64, N)
	for i, p := range params {
		ref[i] = float64(p)
	}
	lr, b1, b2 := float64(h.LR), float64(h.Beta1), float64(h.Beta2)
	eps, wd, scale := float64(h.Eps), float64(h.WeightDecay), float64(h.GradScale)
	for step := 1; step <= 5; step++ {
		h.Step = step
		grads := randoms[float32](r, N)
		grads[0] = 0 // a parameter with no gradient still decays
		adamW(testPool, params, grads, m, v, N, h)

		bc1 := 1 - math.Pow(b1, float64(step))
		bc2 := 1 - math.Pow(b2, float64(step))
		for i := range ref {
			g := float64(grads[i]) * scale
			ref[i] -= lr * wd * ref[i]
			refM[i] = b1*refM[i] + (1-b1)*g
			refV[i] = b2*refV[i] + (1-b2)*g*g
			ref[i] -= lr / bc1 * refM[i] / (math.Sqrt(refV[i])/math.Sqrt(bc2) + eps)
		}
		for i := range N {
			// Absolute bounds: m can cancel to a tiny value, so its error scales with the terms.
			if math.Abs(float64(params[i])-ref[i]) > 1e-6 ||
				math.Abs(float64(m[i])-refM[i]) > 5e-7 ||
				math.Abs(float64(v[i])-refV[i]) > 5e-8 {
				t.Fatalf("step %d [%d]: p, m, v = %g %g %g, want %g %g %g",
					step, i, params[i], m[i], v[i], ref[i], refM[i], refV[i])
			}
		}
	}
}

func TestSumSquares(t *testing.T) {
	r := newRand(16)
	for _, N := range []int{0, 1, 7, 63, 64, 65, 1000, 12345} {
		x := randoms[float32](r, N)
		var want float64
		for _, xi := range x {
			want += float64(xi) * float64(xi)
		}
		var partials [sumSquaresChunks]float64
		got := sumSquares(testPool, &partials, x, N)
		if math.Abs(got-want) > 1e-12*max(1, want) {
			t.Errorf("N=%d: %g, want %g", N, got, want)
		}
	}
}
