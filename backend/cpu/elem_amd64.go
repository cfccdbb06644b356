package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

// useElemKernels says whether the elementwise ops run the AVX2+FMA kernels of elem_amd64.s; each
// wrapper below runs the kernel on the largest multiple of its vector width and finishes the
// ragged tail with the Go version from elem.go.
var useElemKernels = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func lseLanesAVX2(x *float32, n int, m, s *[8]float32)

//go:noescape
func expShiftScaleAVX2(dst, x *float32, n int, shift, scale float32)

//go:noescape
func geluForwardAVX2(y, x *float32, n int)

//go:noescape
func geluBackwardAVX2(dx, x, dy *float32, n int)

//go:noescape
func geluErfForwardAVX2(y, x *float32, n int)

//go:noescape
func geluErfBackwardAVX2(dx, x, dy *float32, n int)

// normalCDFPDFAVX2 is the GELU kernels' Phi, phi and gelu' in float64, for the tests.
//
//go:noescape
func normalCDFPDFAVX2(cdf, pdf, grad *float64, x *float32, n int)

//go:noescape
func adamWAVX2(w, grad, m, v *float32, n int, k *adamWConsts)

//go:noescape
func sumSquaresAVX2(x *float32, n int, acc *[16]float64)

//go:noescape
func sumAVX2(x *float32, n int) float32

//go:noescape
func sumSqDevAVX2(x *float32, n int, m float32) float32

//go:noescape
func lnApplyAVX2(y, x, w, b *float32, n int, m, s float32)

//go:noescape
func lnBackwardSumsAVX2(dy, x, w *float32, n int, m, s float32) (sumG, sumGX float32)

//go:noescape
func lnBackwardApplyAVX2(dx, dy, x, w *float32, n int, m, s, meanG, meanGX float32)

//go:noescape
func lnColumnsAVX2(dw, db, dy, x *float32, n int, m, s float32)

//go:noescape
func addAVX2(y, a, b *float32, n int)

// lseLanes updates the lanes' running maxima m and sums s with x (len a multiple of 32); see
// lseLanesGo.
func lseLanes(x []float32, m, s *[8]float32) {
	if !useElemKernels || len(x) == 0 {
		lseLanesGo(x, m, s)
		return
	}
	lseLanesAVX2(&x[0], len(x)&^31, m, s)
}

// expShiftScale sets dst[i] = exp(x[i] - shift) * scale; dst may be x.
func expShiftScale(dst, x []float32, shift, scale float32) {
	dst = dst[:len(x)]
	body := 0
	if useElemKernels && len(x) >= 8 {
		body = len(x) &^ 7
		expShiftScaleAVX2(&dst[0], &x[0], body, shift, scale)
	}
	expShiftScaleGo(dst[body:], x[body:], shift, scale)
}

// geluForward32 sets y[i] = gelu(x[i]).
func geluForward32(y, x []float32) {
	y = y[:len(x)]
	body := 0
	if useElemKernels && len(x) >= 8 {
		body = len(x) &^ 7
		geluForwardAVX2(&y[0], &x[0], body)
	}
	geluForwardGo(y[body:], x[body:])
}

// geluBackward32 adds gelu'(x[i]) * dy[i] to dx[i].
func geluBackward32(dx, x, dy []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	body := 0
	if useElemKernels && len(x) >= 8 {
		body = len(x) &^ 7
		geluBackwardAVX2(&dx[0], &x[0], &dy[0], body)
	}
	geluBackwardGo(dx[body:], x[body:], dy[body:])
}

// geluErfForward32 sets y[i] = x[i]*Phi(x[i]); bit-identical to geluErfForwardGo.
func geluErfForward32(y, x []float32) {
	y = y[:len(x)]
	body := 0
	if useElemKernels {
		for end := len(x) &^ 7; body < end; { // in blocks, as adamWSpan
			n := min(adamWBlock, end-body)
			geluErfForwardAVX2(&y[body], &x[body], n)
			body += n
		}
	}
	geluErfForwardGo(y[body:], x[body:])
}

// geluErfBackward32 sets dx[i] = gelu'(x[i]) * dy[i] for the erf GELU (dx may be dy);
// bit-identical to geluErfBackwardGo.
func geluErfBackward32(dx, x, dy []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	body := 0
	if useElemKernels {
		for end := len(x) &^ 7; body < end; { // in blocks, as adamWSpan
			n := min(adamWBlock, end-body)
			geluErfBackwardAVX2(&dx[body], &x[body], &dy[body], n)
			body += n
		}
	}
	geluErfBackwardGo(dx[body:], x[body:], dy[body:])
}

// adamWSpan runs one AdamW step over w, g, m, v (same lengths); bit-identical to adamWGo. The
// kernel is called on blocks of adamWBlock elements: a goroutine cannot be preempted inside
// assembly, and a whole range of a 124M-parameter tensor would hold off the GC for tens of ms.
func adamWSpan(w, g, m, v []float32, k *adamWConsts) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	body := 0
	if useElemKernels {
		for end := len(w) &^ 7; body < end; {
			n := min(adamWBlock, end-body)
			adamWAVX2(&w[body], &g[body], &m[body], &v[body], n, k)
			body += n
		}
	}
	adamWGo(w[body:], g[body:], m[body:], v[body:], k)
}

// adamWBlock is how many elements one call of the AdamW kernel updates at most (a multiple of 8).
const adamWBlock = 1 << 16

// sumSquaresLanes adds float64(x[i])^2 to acc[i%16]; bit-identical to sumSquaresGo.
func sumSquaresLanes(x []float32, acc *[16]float64) {
	body := 0
	if useElemKernels && len(x) >= 16 {
		body = len(x) &^ 15
		sumSquaresAVX2(&x[0], body, acc)
	}
	sumSquaresGo(x[body:], acc) // the tail starts at a multiple of 16, so its lanes line up
}

// layernormRow32 is layernormRowGo for float32 rows: the sums run in 16 lanes (two 8-lane partial
// sums) over the multiple-of-8 body, to which the tail is added in order.
func layernormRow32(y, x, weight, bias []float32) (mean, rstd float32) {
	C := len(x)
	if !useElemKernels || C < 8 {
		return layernormRowGo(y, x, weight, bias)
	}
	y, weight, bias = y[:C], weight[:C], bias[:C]
	body := C &^ 7
	sum := sumAVX2(&x[0], body)
	for _, v := range x[body:] {
		sum += v
	}
	m := sum / float32(C)
	sq := sumSqDevAVX2(&x[0], body, m)
	for _, v := range x[body:] {
		sq += (v - m) * (v - m)
	}
	s := float32(1 / math.Sqrt(float64(sq/float32(C)+layernormEps)))
	lnApplyAVX2(&y[0], &x[0], &weight[0], &bias[0], body, m, s)
	for i := body; i < C; i++ {
		y[i] = (x[i]-m)*s*weight[i] + bias[i]
	}
	return m, s
}

// layernormBackwardRow32 is layernormBackwardRowGo for float32 rows.
func layernormBackwardRow32(dx, dy, x, weight []float32, m, s float32) {
	C := len(x)
	if !useElemKernels || C < 8 {
		layernormBackwardRowGo(dx, dy, x, weight, m, s)
		return
	}
	dx, dy, weight = dx[:C], dy[:C], weight[:C]
	body := C &^ 7
	sumG, sumGX := lnBackwardSumsAVX2(&dy[0], &x[0], &weight[0], body, m, s)
	for i := body; i < C; i++ {
		g := dy[i] * weight[i]
		sumG += g
		sumGX += g * ((x[i] - m) * s)
	}
	meanG, meanGX := sumG/float32(C), sumGX/float32(C)
	lnBackwardApplyAVX2(&dx[0], &dy[0], &x[0], &weight[0], body, m, s, meanG, meanGX)
	for i := body; i < C; i++ {
		xhat := (x[i] - m) * s
		dx[i] += s * (dy[i]*weight[i] - meanG - xhat*meanGX)
	}
}

// layernormColumns32 is layernormColumnsGo for float32. Callers must split columns at multiples of
// 8 so that a column's arithmetic (fused in the kernel, not in the tail) does not depend on the split.
func layernormColumns32(dw, db, dy, x []float32, m, s float32) {
	n := len(dy)
	dw, db, x = dw[:n], db[:n], x[:n]
	body := 0
	if useElemKernels && n >= 8 {
		body = n &^ 7
		lnColumnsAVX2(&dw[0], &db[0], &dy[0], &x[0], body, m, s)
	}
	layernormColumnsGo(dw[body:], db[body:], dy[body:], x[body:], m, s)
}

// add32 sets y[i] = a[i] + b[i]; y may be a or b.
func add32(y, a, b []float32) {
	y, b = y[:len(a)], b[:len(a)]
	body := 0
	if useElemKernels && len(a) >= 8 {
		body = len(a) &^ 7
		addAVX2(&y[0], &a[0], &b[0], body)
	}
	for i := body; i < len(a); i++ {
		y[i] = a[i] + b[i]
	}
}
