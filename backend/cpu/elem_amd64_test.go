package cpu

import (
	"math"
	"testing"
)

// Each assembly kernel runs beside its pure-Go version from elem.go over every length from 0 to 67
// and a few large ragged ones, inside guarded buffers (matmul_test.go) to catch stray writes.

var kernelLengths = func() []int {
	var n []int
	for i := range 68 {
		n = append(n, i)
	}
	return append(n, 255, 1000, 4099)
}()

// closeUlps reports whether got and want agree to within rel (relative) or abs.
func closeUlps(got, want float32, rel, abs float64) bool {
	d := math.Abs(float64(got) - float64(want))
	return d <= rel*math.Abs(float64(want)) || d <= abs
}

func requireKernels(t *testing.T) {
	if !useElemKernels {
		t.Skip("no AVX2+FMA on this CPU: the Go versions run, tested elsewhere")
	}
}

func TestExpShiftScaleKernel(t *testing.T) {
	requireKernels(t)
	r := newRand(40)
	for _, n := range kernelLengths {
		x := randoms[float32](r, n)
		for i := range x {
			x[i] *= 100 // both clamps
		}
		want := make([]float32, n)
		expShiftScaleGo(want, x, 3, 0.5)
		got, all := guarded(make([]float32, n))
		expShiftScale(got, x, 3, 0.5)
		checkGuards(t, "expShiftScale", all)
		for i := range want {
			if !closeUlps(got[i], want[i], 2.5e-7, 0) {
				t.Fatalf("n=%d [%d] exp(%g-3)/2 = %g, Go %g", n, i, x[i], got[i], want[i])
			}
		}
		// In place, as the cross-entropy backward runs it.
		expShiftScale(x, x, 3, 0.5)
		checkClose(t, "expShiftScale in place", x, got, 0)
	}
}

func TestLseLanesKernel(t *testing.T) {
	requireKernels(t)
	r := newRand(41)
	for _, n := range []int{0, 32, 64, 96, 1024, 50240} {
		x := randoms[float32](r, n)
		for i := range x {
			x[i] *= 10 + float32(i%7) // maxima that rise now and then
		}
		var mGo, sGo, mAsm, sAsm [8]float32
		for l := range mGo {
			mGo[l], mAsm[l] = -math.MaxFloat32, -math.MaxFloat32
		}
		lseLanesGo(x, &mGo, &sGo)
		lseLanes(x, &mAsm, &sAsm)
		if mGo != mAsm {
			t.Fatalf("n=%d: lane maxima %v, Go %v", n, mAsm, mGo)
		}
		for l := range sGo {
			// float32 sums of n/8 terms grouped differently: rounding grows like sqrt(n).
			if !closeUlps(sAsm[l], sGo[l], 2e-7*math.Sqrt(float64(n)), 0) {
				t.Fatalf("n=%d lane %d: sum %g, Go %g", n, l, sAsm[l], sGo[l])
			}
		}
	}
}

func TestGeluKernels(t *testing.T) {
	requireKernels(t)
	r := newRand(42)
	for _, n := range kernelLengths {
		x, dy, dx0 := randoms[float32](r, n), randoms[float32](r, n), randoms[float32](r, n)
		for i := range x {
			x[i] *= 12
		}
		want := make([]float32, n)
		geluForwardGo(want, x)
		got, all := guarded(make([]float32, n))
		geluForward32(got, x)
		checkGuards(t, "geluForward", all)
		for i, v := range x {
			// The kernel's fused multiply-adds round the exp argument a differently, and exp
			// scales that by |a| (see TestGeluFloat32).
			cond := 1 + min(math.Abs(float64(v*(geluA+geluB*v*v))), 90)
			if !closeUlps(got[i], want[i], 2.5e-7*cond, 1e-37) {
				t.Fatalf("n=%d: gelu(%g) = %g, Go %g", n, v, got[i], want[i])
			}
		}
		wantD := clone(dx0)
		geluBackwardGo(wantD, x, dy)
		gotD, all := guarded(dx0)
		geluBackward32(gotD, x, dy)
		checkGuards(t, "geluBackward", all)
		for i, v := range x {
			cond := 1 + min(math.Abs(float64(v*(geluA+geluB*v*v))), 90)
			if !closeUlps(gotD[i], wantD[i], 2.5e-7*cond, 2.5e-7*cond*math.Abs(float64(dy[i]))) {
				t.Fatalf("n=%d: dx[%d] = %g, Go %g (x %g)", n, i, gotD[i], wantD[i], x[i])
			}
		}
	}
}

// TestGeluErfKernels requires identical bits: the kernel performs normalCDFPDF's float64
// operations one for one. The inputs cover both tails, the cut at |x| = 16, zeros of both signs,
// infinities and NaN.
func TestGeluErfKernels(t *testing.T) {
	requireKernels(t)
	r := newRand(45)
	special := []float32{0, float32(math.Copysign(0, -1)), 16, -16, math.Nextafter32(16, 0), -math.Nextafter32(16, 0),
		15.5, -15.5, 1e-30, -1e-30, 1e-45, 3e38, -3e38, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	for _, n := range kernelLengths {
		x, dy, dx0 := randoms[float32](r, n), randoms[float32](r, n), randoms[float32](r, n)
		for i := range x {
			x[i] *= 20
			if i%5 == 0 {
				x[i] = special[(i/5)%len(special)]
			}
		}
		want := make([]float32, n)
		geluErfForwardGo(want, x)
		got, all := guarded(make([]float32, n))
		geluErfForward32(got, x)
		checkGuards(t, "geluErfForward", all)
		sameBits(t, "geluErfForward", n, x, got, want)
		wantD := clone(dx0)
		geluErfBackwardGo(wantD, x, dy)
		gotD, all := guarded(dx0)
		geluErfBackward32(gotD, x, dy)
		checkGuards(t, "geluErfBackward", all)
		sameBits(t, "geluErfBackward", n, x, gotD, wantD)
		// In place (dx = dy), as the MLP backward runs it.
		geluErfBackward32(dy, x, dy)
		sameBits(t, "geluErfBackward in place", n, x, dy, wantD)
	}
	// Below the float32 results: Phi and phi in float64, the same bits over a dense sweep of
	// [-17, 17] and the special values.
	x := append(special, make([]float32, 1<<20)...)
	x = x[:len(x)&^3]
	for i := len(special); i < len(x); i++ {
		x[i] = -17 + 34*float32(i)/float32(len(x))
	}
	cdf, pdf, grad := make([]float64, len(x)), make([]float64, len(x)), make([]float64, len(x))
	normalCDFPDFAVX2(&cdf[0], &pdf[0], &grad[0], &x[0], len(x))
	for i, v := range x {
		c, p := normalCDFPDF(float64(v))
		g := geluErfGrad(float64(v))
		if v == v && (math.Float64bits(c) != math.Float64bits(cdf[i]) || math.Float64bits(p) != math.Float64bits(pdf[i]) ||
			math.Float64bits(g) != math.Float64bits(grad[i])) { // (NaN: in and out, see ERF_PHI)
			t.Fatalf("x = %g: kernel Phi %v phi %v gelu' %v, Go %v %v %v", v, cdf[i], pdf[i], grad[i], c, p, g)
		}
	}
}

// sameBits fails unless got and want hold the same bits (any NaN matching any NaN).
func sameBits(t *testing.T, name string, n int, x, got, want []float32) {
	t.Helper()
	for i := range want {
		g, w := got[i], want[i]
		if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			t.Fatalf("n=%d: %s at x = %g: %g (%#x), Go %g (%#x)", n, name, x[i], g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
}

// TestAdamWKernel requires identical bits: the kernel rounds every operation as adamWGo does.
func TestAdamWKernel(t *testing.T) {
	requireKernels(t)
	r := newRand(43)
	k := adamWConsts{gradScale: 0.7, decay: 1e-4, beta1: 0.9, oneMinusB1: 1 - float32(0.9), beta2: 0.95,
		oneMinusB2: 1 - float32(0.95), bc2Sqrt: 0.3, eps: 1e-8, stepSize: 1e-2}
	for _, n := range append(kernelLengths, adamWBlock, 2*adamWBlock+13) { // blocks of the kernel
		w, g := randoms[float32](r, n), randoms[float32](r, n)
		m, v := randoms[float32](r, n), randoms[float32](r, n)
		for i := range v {
			v[i] *= v[i]
		}
		wantW, wantM, wantV := clone(w), clone(m), clone(v)
		adamWGo(wantW, g, wantM, wantV, &k)
		gotW, allW := guarded(w)
		gotM, allM := guarded(m)
		gotV, allV := guarded(v)
		adamWSpan(gotW, g, gotM, gotV, &k)
		checkGuards(t, "adamW params", allW)
		checkGuards(t, "adamW m", allM)
		checkGuards(t, "adamW v", allV)
		checkClose(t, "adamW params", gotW, wantW, 0)
		checkClose(t, "adamW m", gotM, wantM, 0)
		checkClose(t, "adamW v", gotV, wantV, 0)
	}
}

// TestSumSquaresKernel requires identical bits: the lanes fix the order of the float64 additions.
func TestSumSquaresKernel(t *testing.T) {
	requireKernels(t)
	r := newRand(44)
	for _, n := range kernelLengths {
		x := randoms[float32](r, n)
		var want, got [16]float64
		want[3], got[3] = 1, 1 // the lanes accumulate onto what is there
		sumSquaresGo(x, &want)
		sumSquaresLanes(x, &got)
		if got != want {
			t.Fatalf("n=%d: lanes %v, Go %v", n, got, want)
		}
	}
}

// TestElemOpsWithoutKernels runs the float32 op tests again on the pure-Go path, the one other
// architectures take.
func TestElemOpsWithoutKernels(t *testing.T) {
	requireKernels(t)
	useElemKernels = false
	defer func() { useElemKernels = true }()
	t.Run("CrossEntropyFloat32", TestCrossEntropyFloat32)
	t.Run("CrossEntropyNaN", TestCrossEntropyNaN)
	t.Run("GeluFloat32", TestGeluFloat32)
	t.Run("GeluErfFloat32", TestGeluErfFloat32)
	t.Run("AdamW", TestAdamW)
	t.Run("SumSquares", TestSumSquares)
	t.Run("LayerNormForward", TestLayerNormForward)
	t.Run("ResidualLayerNormForward", TestResidualLayerNormForward)
	t.Run("ThreadDeterminism", TestThreadDeterminism)
	t.Run("ElemSplitDeterminism", TestElemSplitDeterminism)
}

func TestLayerNormKernels(t *testing.T) {
	requireKernels(t)
	r := newRand(45)
	for _, C := range kernelLengths {
		x, weight, bias := randoms[float32](r, C), randoms[float32](r, C), randoms[float32](r, C)
		dy, dx0 := randoms[float32](r, C), randoms[float32](r, C)
		for i := range x {
			x[i] = 3*x[i] + 1 // a mean away from 0
		}
		want := make([]float32, C)
		var wantM, wantS float32
		if C > 0 {
			wantM, wantS = layernormRowGo(want, x, weight, bias)
		}
		got, all := guarded(make([]float32, C))
		var m, s float32
		if C > 0 {
			m, s = layernormRow32(got, x, weight, bias)
		}
		checkGuards(t, "layernorm row", all)
		checkClose(t, "layernorm mean", []float32{m}, []float32{wantM}, 1e-6)
		checkClose(t, "layernorm rstd", []float32{s}, []float32{wantS}, 1e-5)
		checkClose(t, "layernorm out", got, want, 1e-5)

		wantDx := clone(dx0)
		layernormBackwardRowGo(wantDx, dy, x, weight, wantM, wantS)
		gotDx, all := guarded(dx0)
		layernormBackwardRow32(gotDx, dy, x, weight, wantM, wantS)
		checkGuards(t, "layernorm backward row", all)
		checkClose(t, "layernorm dx", gotDx, wantDx, 1e-5)

		dw0, db0 := randoms[float32](r, C), randoms[float32](r, C)
		wantDw, wantDb := clone(dw0), clone(db0)
		layernormColumnsGo(wantDw, wantDb, dy, x, wantM, wantS)
		gotDw, allW := guarded(dw0)
		gotDb, allB := guarded(db0)
		layernormColumns32(gotDw, gotDb, dy, x, wantM, wantS)
		checkGuards(t, "layernorm dweight", allW)
		checkGuards(t, "layernorm dbias", allB)
		checkClose(t, "layernorm dweight", gotDw, wantDw, 1e-6)
		checkClose(t, "layernorm dbias", gotDb, wantDb, 0)

		a, b := randoms[float32](r, C), randoms[float32](r, C)
		wantSum := make([]float32, C)
		for i := range a {
			wantSum[i] = a[i] + b[i]
		}
		gotSum, all := guarded(make([]float32, C))
		add32(gotSum, a, b)
		checkGuards(t, "add", all)
		checkClose(t, "add", gotSum, wantSum, 0)
	}
}
