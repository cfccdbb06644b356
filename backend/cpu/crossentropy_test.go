package cpu

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// naiveCrossEntropy returns softmax(N,V) over the first V columns and losses(N) = -log softmax[target]
// straight from the definition, in float64.
func naiveCrossEntropy(logits []float64, targets []int32, N, V, Vp int) (probs, losses []float64) {
	probs, losses = make([]float64, N*V), make([]float64, N)
	for n := range N {
		row := logits[n*Vp : n*Vp+V]
		var sum float64
		for _, x := range row {
			sum += math.Exp(x)
		}
		for i, x := range row {
			probs[n*V+i] = math.Exp(x) / sum
		}
		losses[n] = -math.Log(probs[n*V+int(targets[n])])
	}
	return probs, losses
}

func TestCrossEntropyForward(t *testing.T) {
	r := newRand(12)
	N := tB * tT
	logits := randoms[float64](r, N*tVp)
	for i := range logits {
		logits[i] *= 5
	}
	targets := randTokens(r, N, tV)
	lse, losses := make([]float64, N), make([]float64, N)
	crossEntropyForward(testPool, losses, lse, logits, targets, N, tV, tVp)
	_, want := naiveCrossEntropy(logits, targets, N, tV, tVp)
	checkClose(t, "loss", losses, want, 1e-13)
	for n := range N {
		checkClose(t, "lse", lse[n:n+1], []float64{want[n] + logits[n*tVp+int(targets[n])]}, 1e-13)
	}
}

// TestCrossEntropyBackward checks dlogits for the mean loss against finite differences; the padding
// columns do not affect the loss, so their gradient is 0.
func TestCrossEntropyBackward(t *testing.T) {
	r := newRand(13)
	N := tB * tT
	logits := randoms[float64](r, N*tVp)
	targets := randTokens(r, N, tV)
	lse, losses := make([]float64, N), make([]float64, N)
	loss := func() float64 {
		crossEntropyForward(testPool, losses, lse, logits, targets, N, tV, tVp)
		var mean float64
		for _, l := range losses {
			mean += l / float64(N)
		}
		return mean
	}
	loss()
	dlogits := randoms[float64](r, N*tVp) // garbage: backward overwrites
	crossEntropyBackward(testPool, dlogits, logits, lse, targets, 1/float64(N), N, tV, tVp)
	checkGrad(t, "dlogits", logits, dlogits, loss)
}

// TestCrossEntropyFloat32 runs the float32 path (one-pass SIMD log-sum-exp, exp32) against the
// float64 definition for row lengths around the kernels' widths and GPT-2's, with a ragged padding
// tail: losses to 2e-6, dlogits to 2e-6 of the probability; padding gradients must be exactly 0 and the
// logits must be left untouched by the forward.
func TestCrossEntropyFloat32(t *testing.T) {
	r := newRand(14)
	for _, V := range []int{1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 101, 1000, 50257} {
		N, Vp := 3, V+V%5+1
		logits := randoms[float32](r, N*Vp)
		for i := range logits {
			logits[i] *= 8
		}
		logits[V-1] = 30 // a late maximum forces a rescale of the running sums
		targets := randTokens(r, N, V)
		logits64 := make([]float64, len(logits))
		for i, x := range logits {
			logits64[i] = float64(x)
		}
		probs, wantLoss := naiveCrossEntropy(logits64, targets, N, V, Vp)

		before := clone(logits)
		lse, losses := make([]float32, N), make([]float32, N)
		crossEntropyForward(testPool, losses, lse, logits, targets, N, V, Vp)
		checkClose(t, "logits after forward", logits, before, 0)
		checkClose(t, "loss", losses, float32s(wantLoss), 2e-6)

		const dloss = 0.25
		crossEntropyBackward(testPool, logits, logits, lse, targets, dloss, N, V, Vp) // in place
		for n := range N {
			want := make([]float32, Vp)
			for i := range V {
				want[i] = float32(probs[n*V+i] * dloss)
			}
			want[targets[n]] -= dloss
			got := logits[n*Vp : n*Vp+Vp]
			for i := range Vp {
				// exp(x - lse) with x, lse ~ 30 carries ~1e-6 relative error; at the target it is
				// then cancelled against dloss, so the bound is relative to the probability.
				tol := 2e-6*probs[n*V+min(i, V-1)]*dloss + 1e-9
				if i >= V {
					tol = 0
				}
				if d := math.Abs(float64(got[i] - want[i])); !(d <= tol) {
					t.Fatalf("V=%d row %d: dlogits[%d] = %g, want %g", V, n, i, got[i], want[i])
				}
			}
		}
	}
}

// TestCrossEntropyNaN: a NaN logit anywhere in a row, in the SIMD body or the tail, gives a NaN
// loss, which is what stops training.
func TestCrossEntropyNaN(t *testing.T) {
	V := 100
	for _, pos := range []int{0, 5, 40, 63, 64, 99} {
		logits := randoms[float32](newRand(15), V)
		logits[pos] = float32(math.NaN())
		lse, losses := make([]float32, 1), make([]float32, 1)
		crossEntropyForward(testPool, losses, lse, logits, []int32{3}, 1, V, V)
		if !math.IsNaN(float64(losses[0])) {
			t.Errorf("NaN at %d: loss %g", pos, losses[0])
		}
	}
}

func float32s(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

// The fused op gives the bits of the forward and the in-place backward, in fp32 and in the
// 16-bit formats (logits and dlogits rounded), with the padding columns zeroed.
func TestCrossEntropyFusedMatchesPair(t *testing.T) {
	be := New(3)
	const N, V, Vp = 37, 250, 256
	r := newRand(14)
	vals := randoms[float32](r, N*Vp)
	for i := range vals {
		vals[i] *= 6
	}
	targets := be.AllocInt32(N)
	be.UploadInt32(targets, randTokens(r, N, V))
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		run := func(fused bool) (losses, lse, dlogits []float32) {
			logits := be.AllocDType(N*Vp, dt)
			be.Upload(logits, vals)
			l, s := be.Alloc(N), be.Alloc(N)
			if fused {
				be.CrossEntropyFused(l, s, logits, targets, 1.0/N, N, V, Vp)
			} else {
				be.CrossEntropyForward(l, s, logits, targets, N, V, Vp)
				be.CrossEntropyBackward(logits, logits, s, targets, 1.0/N, N, V, Vp)
			}
			losses, lse, dlogits = make([]float32, N), make([]float32, N), make([]float32, N*Vp)
			be.Download(losses, l)
			be.Download(lse, s)
			be.Download(dlogits, logits)
			return
		}
		l1, s1, d1 := run(false)
		l2, s2, d2 := run(true)
		for _, c := range []struct {
			name      string
			want, got []float32
		}{{"losses", l1, l2}, {"lse", s1, s2}, {"dlogits", d1, d2}} {
			for i := range c.want {
				if math.Float32bits(c.want[i]) != math.Float32bits(c.got[i]) {
					t.Fatalf("%v %s[%d]: fused %v, forward+backward %v", dt, c.name, i, c.got[i], c.want[i])
				}
			}
		}
		for n := range N {
			for i := V; i < Vp; i++ {
				if d2[n*Vp+i] != 0 {
					t.Fatalf("%v: padding dlogit [%d,%d] = %v", dt, n, i, d2[n*Vp+i])
				}
			}
		}
	}
}
