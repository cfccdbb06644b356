package cpu

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// ulps is the distance between a and b in float32 units in the last place (both finite, same sign).
func ulps(a, b float32) int64 {
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	return max(d, -d)
}

// TestExp32 checks exp32 against math.Exp on a dense grid of the whole clamped range and at the
// special values.
func TestExp32(t *testing.T) {
	worst := int64(0)
	for x := float32(expLo); x <= expHi; x += 0.001 {
		got, want := exp32(x), float32(math.Exp(float64(x)))
		if u := ulps(got, want); u > worst {
			worst = u
			if u > 2 {
				t.Fatalf("exp32(%g) = %g, want %g (%d ulps)", x, got, want, u)
			}
		}
	}
	t.Logf("worst error %d ulp", worst)
	for _, c := range []struct{ x, want float32 }{
		{0, 1}, {1, float32(math.E)}, {-1000, exp32(expLo)}, {1000, exp32(expHi)},
		{float32(math.Inf(-1)), exp32(expLo)}, {float32(math.Inf(1)), exp32(expHi)},
	} {
		if got := exp32(c.x); got != c.want {
			t.Errorf("exp32(%g) = %g, want %g", c.x, got, c.want)
		}
	}
	if exp32(expLo) <= 0 || math.IsInf(float64(exp32(expHi)), 0) {
		t.Errorf("clamped results %g, %g must be finite and positive", exp32(expLo), exp32(expHi))
	}
	if got := exp32(float32(math.NaN())); !math.IsNaN(float64(got)) {
		t.Errorf("exp32(NaN) = %g", got)
	}
}

// TestGeluFloat32 compares the float32 GELU kernels with GELU evaluated in float64 on inputs from
// -12 to 12, where the exp argument is clamped at both ends, and on a few huge values. The
// reference uses 1+tanh(u) = 2/(1+exp(-2u)): in float64 the tanh form cancels for x < -5.
func TestGeluFloat32(t *testing.T) {
	var x []float32
	for v := float32(-12); v <= 12; v += 0.0037 {
		x = append(x, v)
	}
	x = append(x, 0, -0.0, 1e-30, -1e-30, 50, -50, 1e6, -1e6)
	N := len(x)
	y, dx, dy := make([]float32, N), make([]float32, N), make([]float32, N)
	for i := range dy {
		dy[i] = 1
	}
	geluForward(testPool, y, x, N)
	geluBackward(testPool, dx, x, dy, N)
	for i, xi := range x {
		v := float64(xi)
		u := math.Sqrt(2/math.Pi) * (v + 0.044715*v*v*v)
		e := math.Exp(-2 * u)
		s := 1 / (1 + e) // (1+tanh(u))/2
		wantY := v * s
		wantD := s + 2*v*s*(e*s)*math.Sqrt(2/math.Pi)*(1+3*0.044715*v*v)
		if math.IsInf(e, 1) {
			wantD = 0
		}
		// The exp argument a = x*(geluA + geluB*x^2) is rounded to float32, and exp turns its
		// absolute error |a|*2^-24 into a relative one: the bound is a few ulps times 1+|a|.
		// gelu' crosses 0 near x = -0.75, so its bound is also relative to its terms (~0.5).
		cond := 1 + min(math.Abs(2*u), 90)
		if d := math.Abs(float64(y[i]) - wantY); d > 2.5e-7*cond*math.Abs(wantY)+1e-30 {
			t.Errorf("gelu(%g) = %g, want %g", xi, y[i], wantY)
		}
		if d := math.Abs(float64(dx[i]) - wantD); d > 2.5e-7*cond*(math.Abs(wantD)+0.5) {
			t.Errorf("gelu'(%g) = %g, want %g", xi, dx[i], wantD)
		}
	}
}

// TestGeluBackwardLimits: beyond ±geluLimit gelu' is exactly 1 or 0 on the kernel and in Go, up
// to the infinities, where the formula's clamped exp made it grow like x^3 (gelu'(1e13) was 6,
// gelu'(-1e15) -Inf), and NaN stays NaN. Each input sits in a kernel's 8 lanes and in the tail.
func TestGeluBackwardLimits(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, c := range []struct{ x, want float32 }{
		{geluLimit + 0.5, 1}, {1e11, 1}, {1e13, 1}, {1e15, 1}, {3e19, 1}, {math.MaxFloat32, 1}, {inf, 1},
		{-geluLimit - 0.5, 0}, {-1e11, 0}, {-1e13, 0}, {-1e15, 0}, {-3e19, 0}, {-math.MaxFloat32, 0}, {-inf, 0},
	} {
		x := make([]float32, 9)
		for i := range x {
			x[i] = c.x
		}
		dy := make([]float32, len(x))
		for i := range dy {
			dy[i] = 3
		}
		dx := make([]float32, len(x))
		geluBackward32(dx, x, dy)
		for i, d := range dx {
			if d != 3*c.want {
				t.Errorf("gelu'(%g) * 3 = %g at [%d], want %g", c.x, d, i, 3*c.want)
			}
		}
	}
	nan := float32(math.NaN())
	x, dy, dx := []float32{nan, nan, nan, nan, nan, nan, nan, nan, nan}, make([]float32, 9), make([]float32, 9)
	geluBackward32(dx, x, dy)
	for i, d := range dx {
		if d == d {
			t.Errorf("gelu'(NaN) = %g at [%d], want NaN", d, i)
		}
	}
}

// TestElemOpsAllocateNothing: after a first call, the ops of this file's kernels allocate nothing
// (their loop state lives in the pool's reused jobs), as the training step requires.
func TestElemOpsAllocateNothing(t *testing.T) {
	be := New(2)
	N, C, V, Vp := 16, 96, 1000, 1024
	x, y, z := be.Alloc(4*N*C), be.Alloc(4*N*C), be.Alloc(4*N*C)
	w, b, mean, rstd := be.Alloc(C), be.Alloc(C), be.Alloc(N), be.Alloc(N)
	logits, lse, losses := be.Alloc(N*Vp), be.Alloc(N), be.Alloc(N)
	tokens := be.AllocInt32(N)
	wte, wpe := be.Alloc(Vp*C), be.Alloc(N*C)
	h := backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, GradScale: 1, Step: 1}
	for name, op := range map[string]func(){
		"EncoderForward":           func() { be.EncoderForward(y, tokens, wte, wpe, 1, N, C) },
		"EncoderBackward":          func() { be.EncoderBackward(wte, wpe, y, tokens, 1, N, C) },
		"LayerNormForward":         func() { be.LayerNormForward(y, mean, rstd, x, w, b, N, C) },
		"ResidualLayerNormForward": func() { be.ResidualLayerNormForward(z, y, mean, rstd, x, y, w, b, N, C) },
		"LayerNormBackward":        func() { be.LayerNormBackward(z, w, b, y, x, w, mean, rstd, N, C) },
		"GeluForward":              func() { be.GeluForward(y, x, 4*N*C) },
		"GeluBackward":             func() { be.GeluBackward(z, x, y, 4*N*C) },
		"GeluErfForward":           func() { be.GeluErfForward(y, x, 4*N*C) },
		"GeluErfBackward":          func() { be.GeluErfBackward(z, x, y, 4*N*C) },
		"ResidualForward":          func() { be.ResidualForward(z, x, y, 4*N*C) },
		"ResidualBackward":         func() { be.ResidualBackward(z, y, x, 4*N*C) },
		"CrossEntropyForward":      func() { be.CrossEntropyForward(losses, lse, logits, tokens, N, V, Vp) },
		"CrossEntropyBackward":     func() { be.CrossEntropyBackward(logits, logits, lse, tokens, 0.1, N, V, Vp) },
		"AdamW":                    func() { be.AdamW(x, y, z, wte, 4*N*C, h) },
		"SumSquares":               func() { be.SumSquares(x, 4*N*C) },
	} {
		if n := testing.AllocsPerRun(10, op); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
}

// TestElemSplitDeterminism runs the float32 ops whose SIMD kernels leave a tail to Go, on sizes
// that are not multiples of 8, with 1 to 7 threads, and requires identical bits: the loops split
// their work at multiples of 8, so no element moves between kernel and tail.
func TestElemSplitDeterminism(t *testing.T) {
	r := newRand(46)
	const N, C = 37, 1003
	x, dy := randoms[float32](r, N*C), randoms[float32](r, N*C)
	weight, bias := randoms[float32](r, C), randoms[float32](r, C)
	type result struct{ gelu, dgelu, ln, mean, rstd, dinp, dweight, dbias []float32 }
	run := func(threads int) result {
		p := &pool{threads: threads}
		defer p.close()
		var res result
		res.gelu, res.dgelu = make([]float32, N*C), clone(dy)
		geluForward(p, res.gelu, x, N*C)
		geluBackward(p, res.dgelu, x, dy, N*C)
		res.ln, res.mean, res.rstd = make([]float32, N*C), make([]float32, N), make([]float32, N)
		layernormForward(p, res.ln, res.mean, res.rstd, x, weight, bias, N, C)
		res.dinp, res.dweight, res.dbias = make([]float32, N*C), make([]float32, C), make([]float32, C)
		layernormBackward(p, res.dinp, res.dweight, res.dbias, dy, x, weight, res.mean, res.rstd, N, C)
		return res
	}
	want := run(1)
	for threads := 2; threads <= 7; threads++ {
		got := run(threads)
		checkClose(t, "gelu", got.gelu, want.gelu, 0)
		checkClose(t, "dgelu", got.dgelu, want.dgelu, 0)
		checkClose(t, "layernorm", got.ln, want.ln, 0)
		checkClose(t, "layernorm dinp", got.dinp, want.dinp, 0)
		checkClose(t, "layernorm dweight", got.dweight, want.dweight, 0)
		checkClose(t, "layernorm dbias", got.dbias, want.dbias, 0)
	}
}
