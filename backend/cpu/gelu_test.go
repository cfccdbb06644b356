package cpu

import (
	"encoding/binary"
	"hash/crc32"
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

// The float32 erf GELU (normalCDFPDF's float64 polynomials, in the AVX2 kernel or in Go): every
// input on a fine sweep of [-20, 20] (both tails, the cut at 16), and the special values, gives
// the forward within 1 ulp of the exact value rounded to float32, and the backward's gradient
// within 1e-9 of the exact one beyond float32's own rounding, absolutely (it has a root near
// x = -0.75, where relative error means nothing).
func TestGeluErfFloat32(t *testing.T) {
	var xs []float32
	for x := -20.0; x <= 20; x += 1.0 / 1024 {
		xs = append(xs, float32(x), float32(x+1e-4))
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), 1e-45, -1e-45, 1e-20, -1e-20, 3e38, -3e38)
	N := len(xs)
	out, dinp, ones := make([]float32, N), make([]float32, N), make([]float32, N)
	for i := range ones {
		ones[i] = 1
	}
	geluErfForward(testPool, out, xs, N)
	geluErfBackward(testPool, dinp, xs, ones, N)
	worstULP, worstGrad, worstX := 0.0, 0.0, float32(0)
	for i, x32 := range xs {
		x := float64(x32)
		want := float32(0.5 * x * math.Erfc(-x/math.Sqrt2)) // erfc: no 1 + erf cancellation
		u := float64(ulps(out[i], want))                    // (ulps from elem_test.go)
		if out[i] == want {
			u = 0 // zeros of either sign
		}
		if u > worstULP {
			worstULP, worstX = u, x32
		}
		if u > 1 {
			t.Errorf("gelu(%g) = %g, want %g (%.1f ulps)", x, out[i], want, u)
		}
		wantGrad := 0.5*math.Erfc(-x/math.Sqrt2) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
		d := math.Abs(float64(dinp[i])-wantGrad) - 0x1p-24*math.Abs(wantGrad) // less float32's rounding
		worstGrad = max(worstGrad, d)
		if d > 1e-9 {
			t.Errorf("gelu'(%g) = %g, want %g", x, dinp[i], wantGrad)
		}
	}
	t.Logf("forward within %.1f ulps (the worst at x = %g), gradient within %.2g", worstULP, worstX, worstGrad)

	// Infinities and NaN: gelu(+Inf) = +Inf; -Inf*Phi(-Inf) is NaN, as the formula with erf gives
	// it (CUDA's erff too), and so are both gradients (Inf*phi = Inf*0); NaN stays NaN.
	sp := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	y, d := make([]float32, 3), make([]float32, 3)
	geluErfForward(testPool, y, sp, 3)
	geluErfBackward(testPool, d, sp, ones[:3], 3)
	if !math.IsInf(float64(y[0]), 1) || y[1] == y[1] || y[2] == y[2] || d[0] == d[0] || d[1] == d[1] || d[2] == d[2] {
		t.Errorf("gelu(+Inf, -Inf, NaN) = %v, gradients %v", y, d)
	}
}

// TestGeluErfMillsFit derives normalCDFPDF's Mills-ratio polynomial again (interpolation at the 14
// Chebyshev nodes of t = 4/(4+a) in [0.2, 1], through Newton's divided differences) and checks the
// polynomial of gelu.go against it and against m(a) = Phi(-a)/phi(a) on [0, 16]. (It compares
// values, not coefficients: powers of t are an ill-conditioned basis, and an ulp's difference in
// math.Exp moves a coefficient by 1e-7 but the polynomial's values by 1e-15.)
func TestGeluErfMillsFit(t *testing.T) {
	mills := func(a float64) float64 { return 0.5 * math.Erfc(a/math.Sqrt2) * math.Sqrt(2*math.Pi) * math.Exp(a*a/2) }
	n := len(millsPoly)
	nodes, d := make([]float64, n), make([]float64, n)
	for k := range n {
		u := math.Cos(math.Pi * (float64(k) + 0.5) / float64(n))
		nodes[k] = 0.6 + 0.4*u
		d[k] = mills(4/nodes[k] - 4)
	}
	for j := 1; j < n; j++ { // divided differences
		for i := n - 1; i >= j; i-- {
			d[i] = (d[i] - d[i-1]) / (nodes[i] - nodes[i-j])
		}
	}
	c := make([]float64, n) // Newton form to powers of t
	for i := n - 1; i >= 0; i-- {
		for k := n - 1; k > 0; k-- {
			c[k] = c[k-1] - nodes[i]*c[k]
		}
		c[0] = d[i] - nodes[i]*c[0]
	}
	poly := func(c []float64, t float64) float64 {
		p := c[len(c)-1]
		for i := len(c) - 2; i >= 0; i-- {
			p = math.FMA(p, t, c[i])
		}
		return p
	}
	worst, worstDerived := 0.0, 0.0
	for a := 0.0; a <= 16; a += 1.0 / 4096 {
		tt, m := 4/(4+a), mills(a)
		p := poly(millsPoly[:], tt)
		worst = max(worst, math.Abs(p/m-1))
		worstDerived = max(worstDerived, math.Abs(p/poly(c, tt)-1))
	}
	if worstDerived > 1e-13 {
		t.Errorf("gelu.go's Mills polynomial differs from the derived one by %.3g (relative)", worstDerived)
	}
	if worst > 5e-11 {
		t.Errorf("Mills polynomial: relative error %.3g on [0, 16], want below 5e-11", worst)
	}
	t.Logf("Mills polynomial within %.3g of m(a) on [0, 16], %.3g of the derived one", worst, worstDerived)
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

// TestGeluErfSameEverywhere pins the float32 erf GELU's results on a sweep of [-17, 17] by their
// CRC: the AVX2 kernel and the Go version on amd64, and Go on arm64 (which fuses x*y + z unless
// told not to, CI's qemu run), must all give these bits.
func TestGeluErfSameEverywhere(t *testing.T) {
	x := make([]float32, 1<<18)
	for i := range x {
		x[i] = -17 + 34*float32(i)/float32(len(x))
	}
	y, d := make([]float32, len(x)), make([]float32, len(x))
	for i := range d {
		d[i] = 1 + float32(i%7)/8
	}
	geluErfForward(testPool, y, x, len(x))
	geluErfBackward(testPool, d, x, d, len(x))
	h := crc32.NewIEEE()
	binary.Write(h, binary.LittleEndian, y)
	binary.Write(h, binary.LittleEndian, d)
	if got, want := h.Sum32(), uint32(0xa85ae394); got != want {
		t.Errorf("erf GELU results' CRC %#08x, want %#08x: some path rounds differently", got, want)
	}
	// The float64 values they are rounded from, in Go (TestGeluErfKernels holds the kernel to
	// them): a fused multiply-add the compiler slipped in on one architecture shows here first.
	h.Reset()
	for _, v := range x {
		cdf, pdf := normalCDFPDF(float64(v))
		binary.Write(h, binary.LittleEndian, [3]float64{cdf, pdf, geluErfGrad(float64(v))})
	}
	if got, want := h.Sum32(), uint32(0x9016f2b5); got != want {
		t.Errorf("erf GELU float64 values' CRC %#08x, want %#08x: some architecture computes them differently", got, want)
	}
	// Far in the negative tail gelu is -0 (x times a zero Phi), not +0.
	y = y[:1]
	geluErfForward(testPool, y, []float32{-2e6}, 1)
	if math.Float32bits(y[0]) != math.Float32bits(float32(math.Copysign(0, -1))) {
		t.Errorf("gelu(-2e6) = %g (bits %#x), want -0", y[0], math.Float32bits(y[0]))
	}
}
