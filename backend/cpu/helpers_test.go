package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Small odd shapes for the finite-difference tests.
const (
	tB, tT, tC, tNH = 2, 5, 12, 3
	tV, tVp         = 11, 16
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// randoms returns n values uniform in [-1, 1).
func randoms[F Float](r *rand.Rand, n int) []F {
	x := make([]F, n)
	for i := range x {
		x[i] = F(2*r.Float64() - 1)
	}
	return x
}

func randTokens(r *rand.Rand, n, vocab int) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(r.IntN(vocab))
	}
	return x
}

// dot is sum(x*r) in float64, the scalar loss whose gradient with respect to x is r.
func dot(x, r []float64) float64 {
	var s float64
	for i := range x {
		s += x[i] * r[i]
	}
	return s
}

// sub returns a - b.
func sub(a, b []float64) []float64 {
	d := make([]float64, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}

func clone[T any](x []T) []T { return append([]T(nil), x...) }

// checkGrad compares grad, the analytic gradient of loss with respect to x, against central
// differences with step 1e-6; loss must read x.
func checkGrad(t *testing.T, name string, x, grad []float64, loss func() float64) {
	t.Helper()
	const h = 1e-6
	if len(x) != len(grad) {
		t.Fatalf("%s: %d values, %d gradients", name, len(x), len(grad))
	}
	bad := 0
	for i := range x {
		orig := x[i]
		x[i] = orig + h
		plus := loss()
		x[i] = orig - h
		minus := loss()
		x[i] = orig
		numeric := (plus - minus) / (2 * h)
		if math.Abs(grad[i]-numeric) > 1e-6*max(1, math.Abs(numeric)) {
			t.Errorf("%s[%d]: analytic %.12g, finite difference %.12g", name, i, grad[i], numeric)
			if bad++; bad == 5 {
				return
			}
		}
	}
}

// checkClose reports elements of got that differ from want by more than tol*max(1,|want|).
func checkClose[F Float](t *testing.T, name string, got, want []F, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d, want %d", name, len(got), len(want))
	}
	bad := 0
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if !(math.Abs(g-w) <= tol*max(1, math.Abs(w))) {
			t.Errorf("%s[%d] = %.10g, want %.10g", name, i, g, w)
			if bad++; bad == 5 {
				return
			}
		}
	}
}

// testPool splits work three ways so the finite-difference tests run the parallel paths too.
var testPool = &pool{threads: 3}
