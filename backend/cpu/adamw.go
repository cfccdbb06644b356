package cpu

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// AdamW updates params(N) in place from grads(N) and the moments m, v(N) as torch.optim.AdamW.
func (be *Backend) AdamW(params, grads, m, v backend.Buf, N int, h backend.AdamWParams) {
	adamW(&be.pool, Floats(params), Floats(grads), Floats(m), Floats(v), N, h)
	be.round(params, N)
	be.round(m, N)
	be.round(v, N)
}

// SumSquares returns the sum of x(N)^2 accumulated in float64.
func (be *Backend) SumSquares(x backend.Buf, N int) float64 {
	return sumSquares(&be.pool, &be.partials, Floats(x), N)
}

// adamW is one step of torch.optim.AdamW (single-tensor, fp32) over params, grads, m, v (N):
//
//	g = grad*gradScale; p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g
//	p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//
// The bias corrections are computed in float64 on the host, the per-element math in float32 by
// adamWSpan (AVX2 where available; the same bits either way).
func adamW(p *pool, params, grads, m, v []float32, N int, h backend.AdamWParams) {
	var step [backend.AdamWStepLen]float32
	h.EncodeStep(step[:])
	adamWStep(p, params, grads, m, v, N, h, step[:])
}

// adamWStep is adamW with the step's scalars (backend.AdamWParams.EncodeStep) from step.
func adamWStep(p *pool, params, grads, m, v []float32, N int, h backend.AdamWParams, step []float32) {
	params, grads, m, v = params[:N], grads[:N], m[:N], v[:N]
	job := reuse[adamWJob](p)
	*job = adamWJob{params: params, grads: grads, m: m, v: v, k: adamWConsts{
		gradScale: h.GradScale, decay: step[0],
		beta1: h.Beta1, oneMinusB1: 1 - h.Beta1, beta2: h.Beta2, oneMinusB2: 1 - h.Beta2,
		bc2Sqrt: step[2], eps: h.Eps, stepSize: step[1],
	}}
	p.forRanges(N, 1<<13, job)
	*job = adamWJob{}
}

type adamWJob struct {
	params, grads, m, v []float32
	k                   adamWConsts
}

func (job *adamWJob) runRange(lo, hi int) {
	adamWSpan(job.params[lo:hi], job.grads[lo:hi], job.m[lo:hi], job.v[lo:hi], &job.k)
}

// sumSquaresChunks is how many partial sums SumSquares splits its input into; fixed so the
// summation order does not depend on the thread count.
const sumSquaresChunks = 64

// sumSquares returns the sum of x(N)^2 in float64. Each of sumSquaresChunks fixed ranges is summed
// in 16 lanes (sumSquaresLanes), the lanes are added in order, then the chunks in order: the bits
// depend neither on the thread count nor on whether the SIMD kernel runs.
func sumSquares(p *pool, partials *[sumSquaresChunks]float64, x []float32, N int) float64 {
	job := reuse[sumSquaresJob](p)
	*job = sumSquaresJob{x: x[:N], partials: partials}
	p.forRanges(sumSquaresChunks, 1, job)
	*job = sumSquaresJob{}
	var total float64
	for _, s := range partials {
		total += s
	}
	return total
}

type sumSquaresJob struct {
	x        []float32
	partials *[sumSquaresChunks]float64
}

// runRange sums chunks [lo, hi) into their partials.
func (job *sumSquaresJob) runRange(lo, hi int) {
	N := len(job.x)
	for c := lo; c < hi; c++ {
		var lanes [16]float64
		sumSquaresLanes(job.x[c*N/sumSquaresChunks:(c+1)*N/sumSquaresChunks], &lanes)
		var s float64
		for _, l := range lanes {
			s += l
		}
		job.partials[c] = s
	}
}

// GradStats writes stats(StepStatsLen) from the block sums of squares of grads(N)
// (backend.SumBlockSums, backend.StepStatsOf).
func (be *Backend) GradStats(stats, grads backend.Buf, N, block int, clip, lossScale float64) {
	n := (N + block - 1) / block
	if cap(be.blockSums) < n {
		be.blockSums = make([]float64, n)
	}
	sums := be.blockSums[:n]
	be.SumSquaresBlocks(sums, grads, N, block)
	backend.StepStatsOf(backend.SumBlockSums(sums), clip, lossScale).Encode(Floats(stats)[:backend.StepStatsLen])
}

// AdamWAll runs AdamW on each tensor of segs in turn, with the gradient scale from stats.
func (be *Backend) AdamWAll(params, grads, m, v backend.Buf, segs []backend.AdamWSegment, h backend.AdamWParams, step, stats backend.Buf) {
	if n := backend.SegmentsLen(segs); n != params.Len() {
		panic(fmt.Sprintf("cpu.AdamWAll: the segments cover %d of %d parameters", n, params.Len()))
	}
	st := backend.DecodeStepStats(Floats(stats))
	if !st.Finite {
		return
	}
	h.GradScale = st.Scale
	decay, noDecay := Floats(step)[:backend.AdamWStepLen], [backend.AdamWStepLen]float32{}
	copy(noDecay[1:], decay[1:]) // no weight decay: lr*wd is 0
	off := 0
	for _, s := range segs {
		k := noDecay[:]
		if s.Decay {
			k = decay
		}
		adamWStep(&be.pool, Floats(params)[off:], Floats(grads)[off:], Floats(m)[off:], Floats(v)[off:], s.Len, h, k)
		be.round(be.View(params, off, s.Len), s.Len)
		be.round(be.View(m, off, s.Len), s.Len)
		be.round(be.View(v, off, s.Len), s.Len)
		off += s.Len
	}
}
