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
