package cpu

import "testing"

func TestResidual(t *testing.T) {
	r := newRand(11)
	N := 37
	a, b := randoms[float64](r, N), randoms[float64](r, N)
	R := randoms[float64](r, N)
	out := make([]float64, N)
	residualForward(testPool, out, a, b, N)
	want := make([]float64, N)
	for i := range want {
		want[i] = a[i] + b[i]
	}
	checkClose(t, "out", out, want, 0)

	loss := func() float64 {
		residualForward(testPool, out, a, b, N)
		return dot(out, R)
	}
	da0, db0 := randoms[float64](r, N), randoms[float64](r, N)
	da, db := clone(da0), clone(db0)
	residualBackward(testPool, da, db, R, N)
	checkGrad(t, "da", a, sub(da, da0), loss)
	checkGrad(t, "db", b, sub(db, db0), loss)
}
