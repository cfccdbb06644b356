package cpu

import (
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// CrossEntropyForward writes losses(N) and the log-sum-exp lse(N) of each row of logits(N,Vp) over
// its first V columns; logits are left as they are. See backend.Ops.
func (be *Backend) CrossEntropyForward(losses, lse, logits, targets backend.Buf, N, V, Vp int) {
	crossEntropyForward(&be.pool, Floats(losses), Floats(lse), Floats(logits), Int32s(targets), N, V, Vp)
	be.round(losses, N)
	be.round(lse, N)
}

// CrossEntropyBackward writes dlogits(N,Vp) = (softmax(logits) - onehot(target))*dloss from the
// forward's lse(N); dlogits may be logits. See backend.Ops.
func (be *Backend) CrossEntropyBackward(dlogits, logits, lse, targets backend.Buf, dloss float32, N, V, Vp int) {
	crossEntropyBackward(&be.pool, Floats(dlogits), Floats(logits), Floats(lse), Int32s(targets), dloss, N, V, Vp)
	be.round(dlogits, N*Vp)
}

// CrossEntropyFused is CrossEntropyForward then an in-place CrossEntropyBackward, row by row
// while the row is in cache. See backend.Ops.
func (be *Backend) CrossEntropyFused(losses, lse, logits, targets backend.Buf, dloss float32, N, V, Vp int) {
	crossEntropyFused(&be.pool, Floats(losses), Floats(lse), Floats(logits), Int32s(targets), dloss, N, V, Vp)
	be.round(losses, N)
	be.round(lse, N)
	be.round(logits, N*Vp)
}

// crossEntropyFused runs crossEntropyForward's and then crossEntropyBackward's work on each row of
// logits(N,Vp) in turn, dlogits replacing the row: the row is read from memory once instead of
// twice, and every value is computed as the two functions compute it.
func crossEntropyFused[F Float](p *pool, losses, lse, logits []F, targets []int32, dloss F, N, V, Vp int) {
	job := reuse[crossEntropyFusedJob[F]](p)
	*job = crossEntropyFusedJob[F]{
		fwd: crossEntropyForwardJob[F]{losses: losses[:N], lse: lse[:N], logits: logits[:N*Vp], targets: targets[:N], V: V, Vp: Vp},
		bwd: crossEntropyBackwardJob[F]{dlogits: logits[:N*Vp], logits: logits[:N*Vp], lse: lse[:N], targets: targets[:N], dloss: dloss, V: V, Vp: Vp},
	}
	p.forRanges(N, 1, job)
	*job = crossEntropyFusedJob[F]{}
}

type crossEntropyFusedJob[F Float] struct {
	fwd crossEntropyForwardJob[F]
	bwd crossEntropyBackwardJob[F]
}

func (job *crossEntropyFusedJob[F]) runRange(lo, hi int) {
	for n := lo; n < hi; n++ {
		job.fwd.runRange(n, n+1)
		job.bwd.runRange(n, n+1)
	}
}

// crossEntropyForward: lse(N) = log(sum(exp(logits[n, :V]))) per row of logits(N,Vp), and
// losses(N) = lse - logits[n, targets[n]], which is -log softmax[target]. Columns V..Vp-1 are
// padding and take no part. In float32 a row is read once: an online maximum and sum of exps per
// SIMD lane (logSumExp32); the loss is formed in float64 before rounding.
func crossEntropyForward[F Float](p *pool, losses, lse, logits []F, targets []int32, N, V, Vp int) {
	job := reuse[crossEntropyForwardJob[F]](p)
	*job = crossEntropyForwardJob[F]{losses: losses[:N], lse: lse[:N], logits: logits[:N*Vp], targets: targets[:N], V: V, Vp: Vp}
	p.forRanges(N, 1, job)
	*job = crossEntropyForwardJob[F]{}
}

type crossEntropyForwardJob[F Float] struct {
	losses, lse, logits []F
	targets             []int32
	V, Vp               int
}

func (job *crossEntropyForwardJob[F]) runRange(lo, hi int) {
	V, Vp := job.V, job.Vp
	for n := lo; n < hi; n++ {
		x := job.logits[n*Vp : n*Vp+V]
		l := logSumExp(x)
		job.lse[n] = F(l)
		job.losses[n] = F(l - float64(x[job.targets[n]]))
	}
}

// crossEntropyBackward writes dlogits(N,Vp) = (exp(logits - lse) - onehot(targets))*dloss for the
// first V columns of each row and 0 for the padding, one pass over logits(N,Vp) with lse(N) from
// the forward. dlogits may alias logits.
func crossEntropyBackward[F Float](p *pool, dlogits, logits, lse []F, targets []int32, dloss F, N, V, Vp int) {
	job := reuse[crossEntropyBackwardJob[F]](p)
	*job = crossEntropyBackwardJob[F]{dlogits: dlogits[:N*Vp], logits: logits[:N*Vp], lse: lse[:N],
		targets: targets[:N], dloss: dloss, V: V, Vp: Vp}
	p.forRanges(N, 1, job)
	*job = crossEntropyBackwardJob[F]{}
}

type crossEntropyBackwardJob[F Float] struct {
	dlogits, logits, lse []F
	targets              []int32
	dloss                F
	V, Vp                int
}

func (job *crossEntropyBackwardJob[F]) runRange(lo, hi int) {
	V, Vp, dloss := job.V, job.Vp, job.dloss
	for n := lo; n < hi; n++ {
		x := job.logits[n*Vp : n*Vp+V]
		d := job.dlogits[n*Vp : n*Vp+Vp]
		softmaxScaled(d[:V], x, job.lse[n], dloss)
		d[job.targets[n]] -= dloss
		clear(d[V:])
	}
}

// logSumExp returns log(sum(exp(x))): the one-pass SIMD version for float32, a max-shifted float64
// sum for float64 (the tests' reference precision).
func logSumExp[F Float](x []F) float64 {
	if x32, ok := any(x).([]float32); ok {
		return logSumExp32(x32)
	}
	top := float64(x[0])
	for _, v := range x[1:] {
		top = max(top, float64(v))
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v) - top)
	}
	return top + math.Log(sum)
}

// softmaxScaled sets d[i] = exp(x[i] - lse) * scale; d may alias x.
func softmaxScaled[F Float](d, x []F, lse, scale F) {
	if x32, ok := any(x).([]float32); ok {
		expShiftScale(any(d).([]float32), x32, float32(lse), float32(scale))
		return
	}
	d = d[:len(x)]
	for i, v := range x {
		d[i] = F(math.Exp(float64(v-lse))) * scale
	}
}
