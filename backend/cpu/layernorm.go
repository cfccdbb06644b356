package cpu

import (
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// layernormEps is GPT-2's epsilon, added to the biased variance.
const layernormEps = 1e-5

// LayerNormForward normalises the N rows of inp(N,C); see backend.Ops.
func (be *Backend) LayerNormForward(out, mean, rstd, inp, weight, bias backend.Buf, N, C int) {
	layernormForward(&be.pool, Floats(out), Floats(mean), Floats(rstd), Floats(inp), Floats(weight), Floats(bias), N, C)
	be.roundLayerNorm(out, mean, rstd, N, C)
}

// ResidualLayerNormForward writes residual(N,C) = a + b and its LayerNorm; see backend.Ops.
func (be *Backend) ResidualLayerNormForward(residual, out, mean, rstd, a, b, weight, bias backend.Buf, N, C int) {
	residualLayernormForwardAs(&be.pool, Floats(residual), Floats(out), Floats(mean), Floats(rstd),
		Floats(a), Floats(b), Floats(weight), Floats(bias), N, C, residual.DType())
	be.roundLayerNorm(out, mean, rstd, N, C)
}

// roundLayerNorm rounds a LayerNorm's outputs to their formats (the statistics stay fp32 in the
// model's plan, but the op does not assume it).
func (be *Backend) roundLayerNorm(out, mean, rstd backend.Buf, N, C int) {
	be.round(out, N*C)
	be.round(mean, N)
	be.round(rstd, N)
}

// LayerNormBackward accumulates into dinp(N,C), dweight(C) and dbias(C); see backend.Ops.
func (be *Backend) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd backend.Buf, N, C int) {
	layernormBackward(&be.pool, Floats(dinp), Floats(dweight), Floats(dbias), Floats(dout), Floats(inp),
		Floats(weight), Floats(mean), Floats(rstd), N, C)
	be.round(dinp, N*C)
	be.round(dweight, C)
	be.round(dbias, C)
}

// layernormForward: out(N,C) = (inp(N,C) - mean) * rstd * weight(C) + bias(C) per row, saving
// mean(N) and rstd(N) = 1/sqrt(biased variance + eps).
func layernormForward[F Float](p *pool, out, mean, rstd, inp, weight, bias []F, N, C int) {
	residualLayernormForward(p, nil, out, mean, rstd, inp, nil, weight, bias, N, C)
}

// residualLayernormForward: residual(N,C) = a(N,C) + b(N,C), then out(N,C), mean(N), rstd(N) as
// layernormForward of residual. Each row of the sum is normalised while it is still in L1, so the
// pair reads a and b and writes residual and out once, instead of reading residual back.
// With residual and b nil it is layernormForward of a.
func residualLayernormForward[F Float](p *pool, residual, out, mean, rstd, a, b, weight, bias []F, N, C int) {
	residualLayernormForwardAs(p, residual, out, mean, rstd, a, b, weight, bias, N, C, backend.F32)
}

// residualLayernormForwardAs is residualLayernormForward with a residual stored as residualType:
// a 16-bit residual is rounded before it is normalised, so the statistics are those of the
// stored residual, which the backward reads.
func residualLayernormForwardAs[F Float](p *pool, residual, out, mean, rstd, a, b, weight, bias []F, N, C int, residualType backend.DType) {
	job := reuse[layernormForwardJob[F]](p)
	*job = layernormForwardJob[F]{out: out[:N*C], mean: mean[:N], rstd: rstd[:N], a: a[:N*C],
		weight: weight[:C], bias: bias[:C], C: C, residualType: residualType}
	if residual != nil {
		job.residual, job.b = residual[:N*C], b[:N*C]
	}
	p.forRanges(N, 8, job)
	*job = layernormForwardJob[F]{}
}

type layernormForwardJob[F Float] struct {
	residual, out, mean, rstd, a, b, weight, bias []F
	C                                             int
	residualType                                  backend.DType
}

func (job *layernormForwardJob[F]) runRange(lo, hi int) {
	C := job.C
	for n := lo; n < hi; n++ {
		x := job.a[n*C : n*C+C]
		if job.residual != nil {
			r := job.residual[n*C : n*C+C]
			add(r, x, job.b[n*C:n*C+C])
			if job.residualType.Is16() {
				roundSpan(job.residualType, any(r).([]float32))
			}
			x = r
		}
		job.mean[n], job.rstd[n] = layernormRow(job.out[n*C:n*C+C], x, job.weight, job.bias)
	}
}

// layernormRow normalises one row x(C) into y(C) and returns its mean and rstd; float32 runs
// layernormRow32 (AVX2 where available).
func layernormRow[F Float](y, x, weight, bias []F) (mean, rstd F) {
	if x32, ok := any(x).([]float32); ok {
		m, s := layernormRow32(any(y).([]float32), x32, any(weight).([]float32), any(bias).([]float32))
		return F(m), F(s)
	}
	return layernormRowGo(y, x, weight, bias)
}

// layernormRowGo is layernormRow in Go. The sums run in four interleaved partial sums (element i
// in sum i%4, then added in order), which keeps four additions in flight instead of one.
func layernormRowGo[F Float](y, x, weight, bias []F) (mean, rstd F) {
	C := len(x)
	y, weight, bias = y[:C], weight[:C], bias[:C]
	body := C &^ 3
	var s0, s1, s2, s3 F
	for i := 0; i < body; i += 4 {
		s0 += x[i]
		s1 += x[i+1]
		s2 += x[i+2]
		s3 += x[i+3]
	}
	for i := body; i < C; i++ {
		s0 += x[i]
	}
	m := ((s0 + s1) + (s2 + s3)) / F(C)
	s0, s1, s2, s3 = 0, 0, 0, 0
	for i := 0; i < body; i += 4 {
		d0, d1, d2, d3 := x[i]-m, x[i+1]-m, x[i+2]-m, x[i+3]-m
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for i := body; i < C; i++ {
		d := x[i] - m
		s0 += d * d
	}
	s := F(1 / math.Sqrt(float64(((s0+s1)+(s2+s3))/F(C)+layernormEps)))
	for i, xi := range x {
		y[i] = (xi-m)*s*weight[i] + bias[i]
	}
	return m, s
}

// layernormBackward accumulates into dinp(N,C), dweight(C) and dbias(C) given dout(N,C) and the
// forward's inp(N,C), weight(C), mean(N), rstd(N). dinp is computed row by row; dweight and dbias
// reduce over rows, so for them goroutines split the channels and each sums rows 0..N-1 in order.
func layernormBackward[F Float](p *pool, dinp, dweight, dbias, dout, inp, weight, mean, rstd []F, N, C int) {
	rows := reuse[layernormBackwardRowsJob[F]](p)
	*rows = layernormBackwardRowsJob[F]{dinp: dinp[:N*C], dout: dout[:N*C], inp: inp[:N*C], weight: weight[:C],
		mean: mean[:N], rstd: rstd[:N], C: C}
	p.forRanges(N, 8, rows)
	*rows = layernormBackwardRowsJob[F]{}
	cols := reuse[layernormBackwardColsJob[F]](p)
	*cols = layernormBackwardColsJob[F]{dweight: dweight[:C], dbias: dbias[:C], dout: dout[:N*C], inp: inp[:N*C],
		mean: mean[:N], rstd: rstd[:N], N: N, C: C}
	p.forRanges((C+7)/8, 4, cols)
	*cols = layernormBackwardColsJob[F]{}
}

type layernormBackwardRowsJob[F Float] struct {
	dinp, dout, inp, weight, mean, rstd []F
	C                                   int
}

func (job *layernormBackwardRowsJob[F]) runRange(lo, hi int) {
	C := job.C
	for n := lo; n < hi; n++ {
		dx, dy, x := job.dinp[n*C:n*C+C], job.dout[n*C:n*C+C], job.inp[n*C:n*C+C]
		if x32, ok := any(x).([]float32); ok {
			layernormBackwardRow32(any(dx).([]float32), any(dy).([]float32), x32, any(job.weight).([]float32),
				float32(job.mean[n]), float32(job.rstd[n]))
			continue
		}
		layernormBackwardRowGo(dx, dy, x, job.weight, job.mean[n], job.rstd[n])
	}
}

type layernormBackwardColsJob[F Float] struct {
	dweight, dbias, dout, inp, mean, rstd []F
	N, C                                  int
}

// runRange sums the channels of groups [lo, hi) of 8 of dweight and dbias over rows 0..N-1 in
// order. Splitting at multiples of 8 keeps every channel in the same place (SIMD body or tail)
// whatever the thread count.
func (job *layernormBackwardColsJob[F]) runRange(lo, hi int) {
	C := job.C
	lo, hi = 8*lo, min(8*hi, C)
	dw, db := job.dweight[lo:hi], job.dbias[lo:hi]
	for n := range job.N {
		x := job.inp[n*C+lo : n*C+hi]
		dy := job.dout[n*C+lo : n*C+hi]
		if dy32, ok := any(dy).([]float32); ok {
			layernormColumns32(any(dw).([]float32), any(db).([]float32), dy32, any(x).([]float32),
				float32(job.mean[n]), float32(job.rstd[n]))
			continue
		}
		layernormColumnsGo(dw, db, dy, x, job.mean[n], job.rstd[n])
	}
}

// layernormColumnsGo adds one row's dy to db and (x-m)*s*dy to dw (all the same length).
func layernormColumnsGo[F Float](dw, db, dy, x []F, m, s F) {
	dw, db, x = dw[:len(dy)], db[:len(dy)], x[:len(dy)]
	for i, g := range dy {
		db[i] += g
		dw[i] += (x[i] - m) * s * g
	}
}

// layernormBackwardRowGo adds one row's input gradient to dx(C): with xhat = (x-m)*s and
// g = dy*weight, dx += s * (g - mean(g) - xhat*mean(g*xhat)). The two means use four interleaved
// partial sums as in layernormRowGo. float32 runs layernormBackwardRow32 (AVX2 where available).
func layernormBackwardRowGo[F Float](dx, dy, x, weight []F, m, s F) {
	C := len(x)
	dx, dy, weight = dx[:C], dy[:C], weight[:C]
	body := C &^ 3
	var g0, g1, g2, g3, h0, h1, h2, h3 F
	for i := 0; i < body; i += 4 {
		a0, a1, a2, a3 := dy[i]*weight[i], dy[i+1]*weight[i+1], dy[i+2]*weight[i+2], dy[i+3]*weight[i+3]
		g0 += a0
		g1 += a1
		g2 += a2
		g3 += a3
		h0 += a0 * ((x[i] - m) * s)
		h1 += a1 * ((x[i+1] - m) * s)
		h2 += a2 * ((x[i+2] - m) * s)
		h3 += a3 * ((x[i+3] - m) * s)
	}
	for i := body; i < C; i++ {
		a := dy[i] * weight[i]
		g0 += a
		h0 += a * ((x[i] - m) * s)
	}
	meanG, meanGX := ((g0+g1)+(g2+g3))/F(C), ((h0+h1)+(h2+h3))/F(C)
	for i, xi := range x {
		xhat := (xi - m) * s
		dx[i] += s * (dy[i]*weight[i] - meanG - xhat*meanGX)
	}
}
