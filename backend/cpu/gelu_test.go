package cpu

import (
	"math"
	"testing"
)

func TestGeluForward(t *testing.T) {
	r := newRand(9)
	inp := randoms[float64](r, 101)
	for i := range inp {
		inp[i] *= 4
	}
	out := make([]float64, len(inp))
	geluForward(testPool, out, inp, len(inp))
	want := make([]float64, len(inp))
	for i, x := range inp {
		want[i] = 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	checkClose(t, "out", out, want, 1e-15)
}

func TestGeluBackward(t *testing.T) {
	r := newRand(10)
	N := 101
	inp := randoms[float64](r, N)
	for i := range inp {
		inp[i] *= 4
	}
	R := randoms[float64](r, N)
	out := make([]float64, N)
	loss := func() float64 {
		geluForward(testPool, out, inp, N)
		return dot(out, R)
	}
	dinp0 := randoms[float64](r, N)
	dinp := clone(dinp0)
	geluBackward(testPool, dinp, inp, R, N)
	checkGrad(t, "dinp", inp, dinp, loss) // overwritten: its random start must not show
}

// erfSeries is erf(z) from its Maclaurin series, 2/sqrt(pi) * sum (-1)^n z^(2n+1)/(n!(2n+1)):
// a reference independent of math.Erf, good to ~1e-12 for |z| < 3.
func erfSeries(z float64) float64 {
	var sum float64
	term := z // (-1)^n z^(2n+1)/n!
	for n := 0; n < 200; n++ {
		sum += term / float64(2*n+1)
		term *= -z * z / float64(n+1)
	}
	return 2 / math.Sqrt(math.Pi) * sum
}

func TestGeluErfForward(t *testing.T) {
	r := newRand(91)
	inp := randoms[float64](r, 101)
	for i := range inp {
		inp[i] *= 4
	}
	out := make([]float64, len(inp))
	geluErfForward(testPool, out, inp, len(inp))
	want := make([]float64, len(inp))
	for i, x := range inp {
		want[i] = 0.5 * x * (1 + erfSeries(x/math.Sqrt2))
	}
	checkClose(t, "out", out, want, 1e-11)
	// Known values: gelu(x) = x*Phi(x), Phi(1) = 0.8413447460685429, Phi(-2) = 0.022750131948179195.
	x := []float64{1, -2, 0}
	y := make([]float64, 3)
	geluErfForward(testPool, y, x, 3)
	checkClose(t, "known values", y, []float64{0.8413447460685429, -0.04550026389635839, 0}, 1e-15)

	// float32 differs from the tanh approximation by the approximation's error (at most ~5e-4
	// on this range), not more.
	in32 := make([]float32, len(inp))
	for i, v := range inp {
		in32[i] = float32(v)
	}
	out32, tanh32 := make([]float32, len(inp)), make([]float32, len(inp))
	geluErfForward(testPool, out32, in32, len(in32))
	geluForward(testPool, tanh32, in32, len(in32))
	for i := range in32 {
		if d := math.Abs(float64(out32[i] - tanh32[i])); d > 5e-4 {
			t.Errorf("out[%d]: erf %g and tanh %g GELU differ by %g", i, out32[i], tanh32[i], d)
		}
	}
}

// The float32 kernels interpolate Phi and phi from erfTable: every input on a fine sweep of
// [-16, 16] (both tails, the table's knots and its end) gives the forward within 2 ulps of the
// exact value rounded to float32, and the backward's gradient within 3e-8 of the exact one beyond
// float32's own rounding, absolutely (it has a root near x = -0.75, where relative error means
// nothing).
func TestGeluErfFloat32Table(t *testing.T) {
	var xs []float32
	for x := -16.0; x <= 16; x += 1.0 / 1024 {
		xs = append(xs, float32(x), float32(x+1e-4))
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)))
	N := len(xs)
	out, dinp, ones := make([]float32, N), make([]float32, N), make([]float32, N)
	for i := range ones {
		ones[i] = 1
	}
	geluErfForward(testPool, out, xs, N)
	geluErfBackward(testPool, dinp, xs, ones, N)
	worstULP, worstGrad := 0.0, 0.0
	for i, x32 := range xs {
		x := float64(x32)
		want := float32(0.5 * x * (1 + math.Erf(x/math.Sqrt2)))
		if x < -5 { // 1 + erf cancels: use erfc
			want = float32(0.5 * x * math.Erfc(-x/math.Sqrt2))
		}
		u := float64(ulps(out[i], want)) // (ulps from elem_test.go)
		if math.Abs(float64(out[i]-want)) < 1e-38 {
			u = 0 // zeros of either sign, denormals
		}
		worstULP = max(worstULP, u)
		if u > 2 {
			t.Errorf("gelu(%g) = %g, want %g (%.1f ulps)", x, out[i], want, u)
		}
		wantGrad := 0.5*math.Erfc(-x/math.Sqrt2) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
		d := math.Abs(float64(dinp[i])-wantGrad) - 0x1p-24*math.Abs(wantGrad) // less float32's rounding
		worstGrad = max(worstGrad, d)
		if d > 3e-8 {
			t.Errorf("gelu'(%g) = %g, want %g", x, dinp[i], wantGrad)
		}
	}
	t.Logf("forward within %.1f ulps, gradient within %.2g", worstULP, worstGrad)
}

func TestGeluErfBackward(t *testing.T) {
	r := newRand(92)
	N := 101
	inp := randoms[float64](r, N)
	for i := range inp {
		inp[i] *= 4
	}
	R := randoms[float64](r, N)
	out := make([]float64, N)
	loss := func() float64 {
		geluErfForward(testPool, out, inp, N)
		return dot(out, R)
	}
	dinp := randoms[float64](r, N) // overwritten: its random start must not show
	geluErfBackward(testPool, dinp, inp, R, N)
	checkGrad(t, "dinp", inp, dinp, loss)
}
