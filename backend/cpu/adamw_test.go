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

// TestGradStats checks GradStats against its definition (backend.StepStatsOf of
// backend.SumBlockSums of the block sums) and a float64 sum, with and without clipping, under
// a loss scale, and on a gradient with a NaN.
func TestGradStats(t *testing.T) {
	be := New(2)
	r := newRand(21)
	const block = 64
	N := 300*block + 17 // 301 blocks: several groups of backend.SumGroup
	grads := be.Alloc(N)
	g := randoms[float32](r, N)
	be.Upload(grads, g)
	stats := be.Alloc(backend.StepStatsLen)
	sums := make([]float64, (N+block-1)/block)
	be.SumSquaresBlocks(sums, grads, N, block)
	var plain float64
	for _, x := range g {
		plain += float64(x) * float64(x)
	}
	for _, c := range []struct{ clip, lossScale float64 }{{0, 1}, {1, 1}, {100, 1}, {1, 1024}} {
		be.GradStats(stats, grads, N, block, c.clip, c.lossScale)
		got := backend.DecodeStepStats(Floats(stats))
		want := backend.StepStatsOf(backend.SumBlockSums(sums), c.clip, c.lossScale)
		if got != want {
			t.Errorf("clip %g, loss scale %g: %+v, want %+v", c.clip, c.lossScale, got, want)
		}
		norm := math.Sqrt(plain) / c.lossScale
		if math.Abs(got.Norm-norm) > 1e-12*norm {
			t.Errorf("clip %g, loss scale %g: norm %v, float64 sum gives %v", c.clip, c.lossScale, got.Norm, norm)
		}
		factor := 1.0
		if c.clip > 0 && norm > c.clip {
			factor = c.clip / norm
		}
		if math.Abs(float64(got.Scale)-factor/c.lossScale) > 1e-6*factor/c.lossScale || !got.Finite {
			t.Errorf("clip %g, loss scale %g: scale %v finite %v, want %v", c.clip, c.lossScale, got.Scale, got.Finite, factor/c.lossScale)
		}
	}
	g[N/2] = float32(math.NaN())
	be.Upload(grads, g)
	be.GradStats(stats, grads, N, block, 1, 1)
	if got := backend.DecodeStepStats(Floats(stats)); got.Finite || !math.IsNaN(got.Norm) || got.Scale != 0 {
		t.Errorf("NaN gradient: %+v, want a NaN norm, not finite, scale 0", got)
	}
}

// TestAdamWAll checks that one AdamWAll over tensors with and without decay gives each element
// the bits of AdamW on its tensor with the scale GradStats wrote, and that a stats buffer
// saying "not finite" leaves everything as it was.
func TestAdamWAll(t *testing.T) {
	be := New(2)
	r := newRand(22)
	segs := []backend.AdamWSegment{{Len: 300, Decay: true}, {Len: 7}, {Len: 64, Decay: true}, {Len: 1}, {Len: 129}}
	N := backend.SegmentsLen(segs)
	h := backend.AdamWParams{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3, GradScale: 99}
	p0, g0, m0, v0 := randoms[float32](r, N), randoms[float32](r, N), randoms[float32](r, N), randoms[float32](r, N)
	for i := range v0 {
		v0[i] *= v0[i]
	}
	bufs := func() (p, g, m, v backend.Buf) {
		p, g, m, v = be.Alloc(N), be.Alloc(N), be.Alloc(N), be.Alloc(N)
		be.Upload(p, p0)
		be.Upload(g, g0)
		be.Upload(m, m0)
		be.Upload(v, v0)
		return p, g, m, v
	}
	stats := be.Alloc(backend.StepStatsLen)
	st := backend.StepStats{Norm: 3.5, Scale: 0.25, Finite: true}
	st.Encode(Floats(stats))
	// The step's scalars come from the step buffer only: AdamWAll gets h without them.
	step := be.Alloc(backend.AdamWStepLen)
	h.EncodeStep(Floats(step))
	stale := h
	stale.LR, stale.WeightDecay, stale.Step = 1, 0.5, 1
	p, g, m, v := bufs()
	be.AdamWAll(p, g, m, v, segs, stale, step, stats)

	wp, wg, wm, wv := bufs()
	hs := h
	hs.GradScale = st.Scale
	backend.AdamWEach(be, wp, wg, wm, wv, segs, hs)
	for _, c := range []struct {
		name      string
		got, want backend.Buf
	}{{"params", p, wp}, {"m", m, wm}, {"v", v, wv}} {
		for i, x := range Floats(c.got) {
			if math.Float32bits(x) != math.Float32bits(Floats(c.want)[i]) {
				t.Fatalf("%s[%d] = %v, per-tensor AdamW gives %v", c.name, i, x, Floats(c.want)[i])
			}
		}
	}

	backend.StepStats{Norm: math.Inf(1)}.Encode(Floats(stats))
	p, g, m, v = bufs()
	be.AdamWAll(p, g, m, v, segs, h, step, stats)
	for i := range N {
		if Floats(p)[i] != p0[i] || Floats(m)[i] != m0[i] || Floats(v)[i] != v0[i] {
			t.Fatalf("not finite: element %d changed", i)
		}
	}
}
