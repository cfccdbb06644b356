package cpu

import (
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// GeluForward: out(N) = gelu(inp(N)), tanh approximation.
func (be *Backend) GeluForward(out, inp backend.Buf, N int) {
	geluForward(&be.pool, Floats(out), Floats(inp), N)
	be.round(out, N)
}

// MatmulGeluForward is MatmulForward into pre, then GeluForward from it into out. See
// backend.Ops.
func (be *Backend) MatmulGeluForward(out, pre, inp, weight, bias backend.Buf, N, C, OC int) {
	be.MatmulForward(pre, inp, weight, bias, N, C, OC)
	be.GeluForward(out, pre, N*OC)
}

// MatmulBackwardGelu is MatmulBackward, then GeluBackward on dinp in place. See backend.Ops.
func (be *Backend) MatmulBackwardGelu(dinp, dweight, dbias, dout, inp, weight, pre backend.Buf, N, C, OC int) {
	be.MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC)
	be.GeluBackward(dinp, pre, dinp, N*C)
}

// GeluBackward writes dinp(N) = gelu'(inp) * dout; dinp may be dout.
func (be *Backend) GeluBackward(dinp, inp, dout backend.Buf, N int) {
	geluBackward(&be.pool, Floats(dinp), Floats(inp), Floats(dout), N)
	be.round(dinp, N)
}

// geluScale is sqrt(2/pi).
var geluScale = math.Sqrt(2 / math.Pi)

// geluForward: out(N) = 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))) for x = inp(N). float32
// runs the SIMD kernels of elem.go (an exp-based form, no tanh); float64, the tests' reference,
// evaluates this formula with math.Tanh.
func geluForward[F Float](p *pool, out, inp []F, N int) {
	job := reuse[geluForwardJob[F]](p)
	*job = geluForwardJob[F]{out: out[:N], inp: inp[:N]}
	p.forRanges((N+7)/8, 512, job)
	*job = geluForwardJob[F]{}
}

type geluForwardJob[F Float] struct{ out, inp []F }

// runRange handles elements [8*lo, 8*hi): splitting at multiples of 8 keeps every element in the
// same place (SIMD body or tail, which round differently) whatever the thread count.
func (job *geluForwardJob[F]) runRange(lo, hi int) {
	lo, hi = 8*lo, min(8*hi, len(job.inp))
	x, y := job.inp[lo:hi], job.out[lo:hi]
	if x32, ok := any(x).([]float32); ok {
		geluForward32(any(y).([]float32), x32)
		return
	}
	for i, xi := range x {
		u := F(geluScale) * (xi + 0.044715*xi*xi*xi)
		y[i] = 0.5 * xi * (1 + F(math.Tanh(float64(u))))
	}
}

// geluBackward writes dinp(N) = gelu'(x)*dout(N) for x = inp(N), where
// gelu'(x) = 0.5*(1+tanh(u)) + 0.5*x*(1-tanh(u)^2)*du/dx and u is the tanh argument above;
// float32 runs the kernels of elem.go as in geluForward.
func geluBackward[F Float](p *pool, dinp, inp, dout []F, N int) {
	job := reuse[geluBackwardJob[F]](p)
	*job = geluBackwardJob[F]{dinp: dinp[:N], inp: inp[:N], dout: dout[:N]}
	p.forRanges((N+7)/8, 512, job)
	*job = geluBackwardJob[F]{}
}

type geluBackwardJob[F Float] struct{ dinp, inp, dout []F }

// runRange handles elements [8*lo, 8*hi), as geluForwardJob's.
func (job *geluBackwardJob[F]) runRange(lo, hi int) {
	lo, hi = 8*lo, min(8*hi, len(job.inp))
	x, dy, dx := job.inp[lo:hi], job.dout[lo:hi], job.dinp[lo:hi]
	if x32, ok := any(x).([]float32); ok {
		geluBackward32(any(dx).([]float32), x32, any(dy).([]float32))
		return
	}
	for i, xi := range x {
		u := F(geluScale) * (xi + 0.044715*xi*xi*xi)
		th := F(math.Tanh(float64(u)))
		du := F(geluScale) * (1 + 3*0.044715*xi*xi)
		grad := 0.5*(1+th) + 0.5*xi*(1-th*th)*du
		dx[i] = grad * dy[i]
	}
}

// GeluErfForward: out(N) = x*Phi(x) for x = inp(N), the exact GELU (BERT's).
func (be *Backend) GeluErfForward(out, inp backend.Buf, N int) {
	geluErfForward(&be.pool, Floats(out), Floats(inp), N)
	be.round(out, N)
}

// GeluErfBackward writes dinp(N) = (Phi(x) + x*phi(x)) * dout for x = inp(N).
func (be *Backend) GeluErfBackward(dinp, inp, dout backend.Buf, N int) {
	geluErfBackward(&be.pool, Floats(dinp), Floats(inp), Floats(dout), N)
	be.round(dinp, N)
}

// invSqrt2 and invSqrt2Pi are 1/sqrt(2) and 1/sqrt(2*pi): Phi(x) = 0.5*(1 + erf(x/sqrt(2))) is the
// standard normal CDF and phi(x) = exp(-x*x/2)/sqrt(2*pi) its density.
var invSqrt2, invSqrt2Pi = 1 / math.Sqrt2, 1 / math.Sqrt(2*math.Pi)

// geluErfForward: out(N) = 0.5*x*(1 + erf(x/sqrt(2))) for x = inp(N), in float64 and rounded
// once to F. float64, the tests' reference, calls math.Erf; float32 runs geluErfForward32 (the
// AVX2 kernel of elem_amd64.s, or geluErfForwardGo: the same bits), which evaluates Phi in
// float64 with normalCDFPDF's polynomials, within 1 ulp of the float32-rounded exact value.
// Either way an element's result does not depend on the thread count.
func geluErfForward[F Float](p *pool, out, inp []F, N int) {
	job := reuse[geluErfForwardJob[F]](p)
	*job = geluErfForwardJob[F]{out: out[:N], inp: inp[:N]}
	p.forRanges(N, 1024, job)
	*job = geluErfForwardJob[F]{}
}

type geluErfForwardJob[F Float] struct{ out, inp []F }

func (job *geluErfForwardJob[F]) runRange(lo, hi int) {
	x, y := job.inp[lo:hi], job.out[lo:hi]
	if x32, ok := any(x).([]float32); ok {
		geluErfForward32(any(y).([]float32), x32)
		return
	}
	for i, xi := range x {
		v := float64(xi)
		y[i] = F(0.5 * v * (1 + math.Erf(v*invSqrt2)))
	}
}

// geluErfBackward writes dinp(N) = gelu'(x)*dout(N) for x = inp(N), with
// gelu'(x) = Phi(x) + x*phi(x), in float64 (math.Erf and math.Exp, or for float32
// geluErfBackward32) as geluErfForward.
func geluErfBackward[F Float](p *pool, dinp, inp, dout []F, N int) {
	job := reuse[geluErfBackwardJob[F]](p)
	*job = geluErfBackwardJob[F]{dinp: dinp[:N], inp: inp[:N], dout: dout[:N]}
	p.forRanges(N, 1024, job)
	*job = geluErfBackwardJob[F]{}
}

type geluErfBackwardJob[F Float] struct{ dinp, inp, dout []F }

func (job *geluErfBackwardJob[F]) runRange(lo, hi int) {
	x, dy, dx := job.inp[lo:hi], job.dout[lo:hi], job.dinp[lo:hi]
	if x32, ok := any(x).([]float32); ok {
		geluErfBackward32(any(dx).([]float32), x32, any(dy).([]float32))
		return
	}
	for i, xi := range x {
		v := float64(xi)
		grad := 0.5*(1+math.Erf(v*invSqrt2)) + v*invSqrt2Pi*math.Exp(-0.5*v*v)
		dx[i] = F(grad * float64(dy[i]))
	}
}

// geluErfForwardGo sets y[i] = x[i]*Phi(x[i]), computed in float64 by normalCDFPDF and rounded
// once; the AVX2 kernel gives the same bits.
func geluErfForwardGo(y, x []float32) {
	y = y[:len(x)]
	for i, xi := range x {
		v := float64(xi)
		cdf, _ := normalCDFPDF(v)
		y[i] = float32(v * cdf)
	}
}

// geluErfBackwardGo sets dx[i] = (Phi(x) + x*phi(x)) * dy[i] for x = x[i] (dx may be dy), in
// float64 as geluErfForwardGo.
func geluErfBackwardGo(dx, x, dy []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	for i, xi := range x {
		v := float64(xi)
		dx[i] = float32(geluErfGrad(v) * float64(dy[i]))
	}
}

// geluErfGrad returns gelu'(x) = Phi(x) + x*phi(x) (ERF_GRAD after ERF_PHI in the kernel).
func geluErfGrad(x float64) float64 {
	cdf, pdf := normalCDFPDF(x)
	return math.FMA(x, pdf, cdf)
}

// normalCDFPDF returns Phi(x) and phi(x) = exp(-x*x/2)/sqrt(2*pi) for the float32 erf GELU, in
// float64 operations that the AVX2 kernel (ERF_PHI in elem_amd64.s) performs one for one:
// math.FMA where it fuses, and no expression the compiler could fuse (x*y + z) elsewhere, so
// both give identical bits on every architecture.
//
// Phi(-a) for a = |x| is phi(a)*m(a), with m Mills' ratio (smooth, m(0) = sqrt(pi/2), m(a) ~ 1/a):
// no 1 - erf cancellation in the negative tail, and the Gaussian serves the backward too.
//   - exp(v), v = -x*x/2 (exact: x is a float32): k = round(v/ln 2), r = v - k*ln 2 in two parts,
//     e^r by its Taylor series to r^9 (|r| <= ln2/2: relative error about 1e-11), times 2^k made
//     in the exponent bits. v is clamped at -128, and for |x| >= 16 (or NaN) phi is 0: x*Phi(x)
//     rounds to 0 or x in float32 there.
//   - m(a) is a degree-13 polynomial in t = 4/(4+a), interpolating m at the Chebyshev nodes of
//     t in [0.2, 1] (a in [0, 16]; TestGeluErfMillsFit derives the coefficients again): relative
//     error below 3e-11. a is clamped at 16, where phi is 0 anyway, so that the polynomial is
//     never used outside its range (it turns negative near a = 1e6, which would make Phi -0).
//
// Without FMA hardware (amd64 before Haswell) math.FMA is emulated and this path is slow.
//
// Phi(x) is then Phi(-a) for negative x (sign bit set) and 1 - Phi(-a) otherwise. Together the
// error is far below float32's half ulp (3e-8): the forward is within 1 ulp of the exact value.
func normalCDFPDF(x float64) (cdf, pdf float64) {
	a := math.Abs(x)
	v := max(-0.5*(x*x), -128)
	kd := math.FMA(v, expLog2E, expMagic) // k + 1.5*2^52: k in the low mantissa bits
	k := kd - expMagic
	r := math.FMA(-k, expLn2Hi, v)
	r = math.FMA(-k, expLn2Lo, r)
	s := expTaylor[len(expTaylor)-1]
	for i := len(expTaylor) - 2; i >= 0; i-- {
		s = math.FMA(s, r, expTaylor[i])
	}
	e := s * math.Float64frombits((math.Float64bits(kd)+1023)<<52)
	if !(a < erfCut) {
		e = 0
	}
	pdf = e * invSqrt2Pi
	t := 4 / (4 + min(a, erfCut))
	m := millsPoly[len(millsPoly)-1]
	for i := len(millsPoly) - 2; i >= 0; i-- {
		m = math.FMA(m, t, millsPoly[i])
	}
	q := float64(pdf * m) // Phi(-|x|); the conversion keeps 1 - q from being fused with it
	cdf = 1 - q
	if math.Signbit(x) {
		cdf = q
	}
	return cdf, pdf
}

// The constants of normalCDFPDF (and of ERF_PHI, which holds them again in elem_amd64.s).
const (
	erfCut   = 16
	expLog2E = 1.4426950408889634         // log2(e)
	expMagic = 6755399441055744           // 1.5*2^52: adding it rounds to an integer
	expLn2Hi = 6.93147180369123816490e-01 // ln 2, high part (32 bits: k*expLn2Hi is exact)
	expLn2Lo = 1.90821492927058770002e-10 // ln 2 - expLn2Hi
)

// expTaylor holds 1/i! for i = 0..9.
var expTaylor = [10]float64{1, 1, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880}

// millsPoly holds m(a)'s coefficients in t = 4/(4+a), constant term first.
var millsPoly = [14]float64{
	-9.069102122616357e-07, 0.2500296169351347, 0.24956100616636878, 0.23828880768580074,
	0.17968818703370493, 0.2588040350734354, -0.20101215004970302, 0.7693236312418306,
	-1.1867769575940572, 1.473037692783449, -1.2815629147518717, 0.6746253364992767,
	-0.1946295867083646, 0.023938339912448082,
}
