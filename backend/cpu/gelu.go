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
// once to F. float64, the tests' reference, calls math.Erf; float32 interpolates Phi from a table
// (normalCDFPDF), several times faster and within 2 ulps of the float32-rounded exact value.
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
		y32 := any(y).([]float32)
		for i, xi := range x32 {
			cdf, _ := normalCDFPDF(float64(xi))
			y32[i] = float32(float64(xi) * cdf)
		}
		return
	}
	for i, xi := range x {
		v := float64(xi)
		y[i] = F(0.5 * v * (1 + math.Erf(v*invSqrt2)))
	}
}

// geluErfBackward writes dinp(N) = gelu'(x)*dout(N) for x = inp(N), with
// gelu'(x) = Phi(x) + x*phi(x), in float64 (math.Erf and math.Exp, or for float32 the table) as
// geluErfForward.
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
		dy32, dx32 := any(dy).([]float32), any(dx).([]float32)
		for i, xi := range x32 {
			cdf, pdf := normalCDFPDF(float64(xi))
			dx32[i] = float32((cdf + float64(xi)*pdf) * float64(dy32[i]))
		}
		return
	}
	for i, xi := range x {
		v := float64(xi)
		grad := 0.5*(1+math.Erf(v*invSqrt2)) + v*invSqrt2Pi*math.Exp(-0.5*v*v)
		dx[i] = F(grad * float64(dy[i]))
	}
}

// The float32 erf GELU reads the normal CDF and density from a table of cubics: for
// z = |x|/sqrt(2) in [i*h, (i+1)*h), h = 1/erfTableSteps, erfc(z) and exp(-z*z) are the cubic
// Hermite interpolants of their values and derivatives at the two ends, which the table holds as
// polynomials in t = z/h - i. Their error, h^4/384 times the largest fourth derivative, is below
// 1e-11 absolute, and relative to erfc below 2.5e-8 for z < 6 (x > -8.5), so
// Phi(x) = erfc(-x/sqrt(2))/2 is accurate in both tails (no 1 - erf cancellation for negative
// x). Past z = erfTableEnd both are 0 in float32 terms (erfc(10) = 2e-45).
const (
	erfTableSteps = 256
	erfTableEnd   = 10
)

// erfTableRow holds one interval's cubics, c[0] + t*(c[1] + t*(c[2] + t*c[3])): erfc in erfc,
// exp(-z*z) in gauss. 64 bytes, one cache line.
type erfTableRow struct{ erfc, gauss [4]float64 }

var erfTable = func() []erfTableRow {
	const h = 1.0 / erfTableSteps
	rows := make([]erfTableRow, erfTableEnd*erfTableSteps)
	hermite := func(f0, f1, d0, d1 float64) [4]float64 { // d0, d1: derivatives times h
		return [4]float64{f0, d0, 3*(f1-f0) - 2*d0 - d1, 2*(f0-f1) + d0 + d1}
	}
	for i := range rows {
		z0, z1 := float64(i)*h, float64(i+1)*h
		g0, g1 := math.Exp(-z0*z0), math.Exp(-z1*z1)
		rows[i].erfc = hermite(math.Erfc(z0), math.Erfc(z1), -2/math.SqrtPi*g0*h, -2/math.SqrtPi*g1*h)
		rows[i].gauss = hermite(g0, g1, -2*z0*g0*h, -2*z1*g1*h)
	}
	return rows
}()

// normalCDFPDF returns Phi(x) and phi(x) = exp(-x*x/2)/sqrt(2*pi) from erfTable.
func normalCDFPDF(x float64) (cdf, pdf float64) {
	s := math.Abs(x) * invSqrt2 * erfTableSteps
	if !(s < erfTableEnd*erfTableSteps) { // past the table, or NaN
		switch {
		case x > 0:
			return 1, 0
		case x < 0:
			return 0, 0
		}
		return x, x // NaN
	}
	i := int(s)
	t := s - float64(i)
	r := &erfTable[i]
	erfc := r.erfc[0] + t*(r.erfc[1]+t*(r.erfc[2]+t*r.erfc[3]))
	gauss := r.gauss[0] + t*(r.gauss[1]+t*(r.gauss[2]+t*r.gauss[3]))
	cdf = 0.5 * erfc // Phi(-|x|)
	if x > 0 {
		cdf = 1 - cdf
	}
	return cdf, gauss * invSqrt2Pi
}
