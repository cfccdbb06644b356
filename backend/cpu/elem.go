package cpu

import "math"

// This file holds the float32 elementwise kernels in pure Go: the fallback where there is no
// assembly (elem_other.go) and the reference the assembly in elem_amd64.s is tested against. Both
// evaluate exp with exp32 below, a float32 Cephes expf accurate to about 1 ulp on [expLo, expHi]
// (outside, it returns its value at the nearer end), instead of float64 math.Exp.

// exp32 constants; elem_amd64.s holds the same values.
const (
	expHi    = 88.37626 // exp(expHi) < 2^127.5, so 2^n stays a normal float
	expLo    = -86.64   // exp(expLo) ~ 2.4e-38, the smallest result; 2^n stays normal
	expLog2e = 1.44269504088896341
	expC1    = 0.693359375    // ln 2 rounded to 9 bits: n*expC1 is exact
	expC2    = -2.12194440e-4 // ln 2 - expC1
	expP0    = 1.9875691500e-4
	expP1    = 1.3981999507e-3
	expP2    = 8.3334519073e-3
	expP3    = 4.1665795894e-2
	expP4    = 1.6666665459e-1
	expP5    = 5.0000001201e-1
)

// exp32 returns e^x for float32 x: x is clamped to [expLo, expHi], split as n*ln2 + r with
// |r| <= ln2/2, e^r comes from Cephes' degree-7 polynomial and 2^n is added into the exponent
// bits. Below expLo it returns ~2.4e-38 rather than a denormal or 0; NaN stays NaN.
func exp32(x float32) float32 {
	if x != x {
		return x
	}
	x = min(max(x, expLo), expHi)
	n := float32(math.RoundToEven(float64(x * expLog2e)))
	r := x - n*expC1
	r -= n * expC2
	p := float32(expP0)
	p = p*r + expP1
	p = p*r + expP2
	p = p*r + expP3
	p = p*r + expP4
	p = p*r + expP5
	p = p*r + 1
	p = p*r + 1
	return math.Float32frombits(math.Float32bits(p) + uint32(int32(n))<<23)
}

// lseLanesGo is lseLanes in Go: the online log-sum-exp of x (len a multiple of 8) in 8 lanes,
// lane l taking the elements with index l mod 8; m and s hold each lane's running maximum and its
// sum of exp(x - m), and are updated.
func lseLanesGo(x []float32, m, s *[8]float32) {
	for i := 0; i+8 <= len(x); i += 8 {
		for l, xi := range x[i : i+8] {
			if xi > m[l] {
				s[l] *= exp32(m[l] - xi)
				m[l] = xi
			}
			s[l] += exp32(xi - m[l])
		}
	}
}

// logSumExp32 returns log(sum(exp(x))) of a row in one pass over memory: the lane kernel keeps a
// running maximum per lane, and the lanes and the ragged tail are combined in float64. NaN
// anywhere gives NaN.
func logSumExp32(x []float32) float64 {
	m := [8]float32{-math.MaxFloat32, -math.MaxFloat32, -math.MaxFloat32, -math.MaxFloat32,
		-math.MaxFloat32, -math.MaxFloat32, -math.MaxFloat32, -math.MaxFloat32}
	var s [8]float32
	body := len(x) &^ 31
	lseLanes(x[:body], &m, &s)
	maxX := m[0]
	for _, v := range m[1:] {
		maxX = max(maxX, v)
	}
	for _, v := range x[body:] {
		maxX = max(maxX, v)
	}
	top := float64(maxX)
	var sum float64
	for l := range m {
		sum += float64(s[l]) * math.Exp(float64(m[l])-top)
	}
	for _, v := range x[body:] {
		sum += math.Exp(float64(v) - top)
	}
	return top + math.Log(sum)
}

// expShiftScaleGo sets dst[i] = exp32(x[i] - shift) * scale; dst may be x.
func expShiftScaleGo(dst, x []float32, shift, scale float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = exp32(v-shift) * scale
	}
}

// GELU constants: gelu(x) = 0.5*x*(1 + tanh(u)) with u = sqrt(2/pi)*(x + 0.044715*x^3) equals
// x * sigmoid(2u) = x / (1 + exp(x*(geluA + geluB*x^2))), which needs one exp and no tanh and does
// not cancel. geluDA + geluDB*x^2 is 2*du/dx.
const (
	geluA  = -2 * 0.7978845608028654 // -2*sqrt(2/pi)
	geluB  = geluA * 0.044715
	geluDA = 2 * 0.7978845608028654
	geluDB = geluDA * 3 * 0.044715
)

// geluForwardGo sets y[i] = gelu(x[i]) = x / (1 + e) with e = exp(x*(geluA + geluB*x^2)).
func geluForwardGo(y, x []float32) {
	y = y[:len(x)]
	for i, v := range x {
		e := exp32(v * (geluB*(v*v) + geluA))
		y[i] = v / (e + 1)
	}
}

// geluLimit is where gelu' is set rather than computed: 1 above it and 0 below -geluLimit, its
// float32 values there (|gelu'(x) - 1| and |gelu'(-x)| are below e^-600). The formula misses
// them because exp32 clamps its argument: for large x, e stays at 2.4e-38 instead of 0 and
// e*x^3 grew to gelu'(1e13) = 6, then Inf once x^2 overflowed; for large -x, s stays at 4e-39
// and s*x^3 reached -Inf at -1e15. From 10 to 20 the formula gives 1, and for -x values of
// magnitude below 1e-35 (0 would be right); the limit is not lower so that every input in
// [-20, 20] keeps the bits it had.
const geluLimit = 20

// geluBackwardGo sets dx[i] = gelu'(x[i]) * dy[i]. With s = 1/(1+e) = (1+tanh(u))/2, 1-s = e*s
// and gelu'(x) = s + 2*x*s*(1-s)*du/dx = s + x*(e*s)*s*(geluDA + geluDB*x^2); beyond
// ±geluLimit it is 1 or 0. NaN stays NaN.
func geluBackwardGo(dx, x, dy []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	for i, v := range x {
		x2 := v * v
		e := exp32(v * (geluB*x2 + geluA))
		s := 1 / (e + 1)
		q := e * s * (geluDB*x2 + geluDA) * v
		d := q*s + s
		if v > geluLimit {
			d = 1
		} else if v < -geluLimit {
			d = 0
		}
		dx[i] = d * dy[i]
	}
}

// adamWConsts are the per-step scalars of the AdamW kernels, in the order elem_amd64.s reads them.
type adamWConsts struct {
	gradScale, decay  float32 // decay = lr*weightDecay
	beta1, oneMinusB1 float32
	beta2, oneMinusB2 float32
	bc2Sqrt, eps      float32 // bc2Sqrt = sqrt(1 - beta2^step)
	stepSize          float32 // lr / (1 - beta1^step)
}

// adamWGo is one AdamW step over w, g, m, v (same lengths). The explicit float32 conversions
// forbid fused multiply-adds, so every platform rounds each operation as the assembly does.
func adamWGo(w, g, m, v []float32, k *adamWConsts) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	for i, p := range w {
		gi := g[i] * k.gradScale
		p -= float32(k.decay * p)
		mi := float32(k.beta1*m[i]) + float32(k.oneMinusB1*gi)
		vi := float32(k.beta2*v[i]) + float32(float32(k.oneMinusB2*gi)*gi)
		m[i], v[i] = mi, vi
		denom := float32(math.Sqrt(float64(vi)))/k.bc2Sqrt + k.eps
		w[i] = p - float32(k.stepSize*(mi/denom))
	}
}

// sumSquaresGo adds float64(x[i])^2 to acc[i%16]. The squares of float32 values are exact in
// float64, so only the order of the additions matters, and the 16 lanes fix it.
func sumSquaresGo(x []float32, acc *[16]float64) {
	for i, v := range x {
		acc[i%16] += float64(v) * float64(v)
	}
}
