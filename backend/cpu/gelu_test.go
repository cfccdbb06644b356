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

	// float32 is the float64 value rounded once, and it differs from the tanh approximation by
	// the approximation's error (at most ~5e-4 on this range), not more.
	in32 := make([]float32, len(inp))
	for i, v := range inp {
		in32[i] = float32(v)
	}
	out32, tanh32 := make([]float32, len(inp)), make([]float32, len(inp))
	geluErfForward(testPool, out32, in32, len(in32))
	geluForward(testPool, tanh32, in32, len(in32))
	for i, v := range in32 {
		x := float64(v)
		if want := float32(0.5 * x * (1 + math.Erf(x/math.Sqrt2))); out32[i] != want {
			t.Errorf("float32 out[%d] = %g, want %g (the float64 value rounded)", i, out32[i], want)
		}
		if d := math.Abs(float64(out32[i] - tanh32[i])); d > 5e-4 {
			t.Errorf("out[%d]: erf %g and tanh %g GELU differ by %g", i, out32[i], tanh32[i], d)
		}
	}
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
