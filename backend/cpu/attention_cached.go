package cpu

import (
	"fmt"
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// Attention for generation with a key/value cache: the new positions' keys and values are appended
// to per-head caches laid out (B,NH,maxT,HS), so that one head's keys, and its values, are
// contiguous rows HS apart, and each new query takes one pass of dot products over them, a softmax
// and a weighted sum of the values. Decoding one token costs O(pos*HS) per head instead of
// recomputing the window.

// AttentionForwardCached appends the new positions' k, v to the caches and attends; see backend.Ops.
func (be *Backend) AttentionForwardCached(out, kcache, vcache, qkv backend.Buf, B, Tnew, pos, maxT, C, NH int) {
	attentionForwardCached(&be.pool, Floats(out), Floats(kcache), Floats(vcache), Floats(qkv), B, Tnew, pos, maxT, C, NH)
	be.round(out, B*Tnew*C) // the caches hold copies of qkv's (already rounded) values
}

// attentionForwardCached copies k and v of qkv(B,Tnew,3C) into kcache and vcache (B,NH,maxT,HS)
// at positions pos..pos+Tnew-1 and writes out(B,Tnew,C): for new position t, the softmax over the
// cached keys 0..pos+t of q.k/sqrt(HS), applied to the values. Tasks are (batch, head) pairs, each
// query's keys taken in order, so the bits do not depend on the thread count.
func attentionForwardCached[F Float](p *pool, out, kcache, vcache, qkv []F, B, Tnew, pos, maxT, C, NH int) {
	if pos < 0 || Tnew < 1 || pos+Tnew > maxT {
		panic(fmt.Sprintf("cpu: cached attention at positions %d..%d outside the cache's %d", pos, pos+Tnew-1, maxT))
	}
	HS := C / NH
	scratch := reuse[cachedAttentionScratch[F]](p)
	for len(scratch.scores) < p.threads {
		scratch.scores = append(scratch.scores, nil)
	}
	for w := range scratch.scores {
		if len(scratch.scores[w]) < maxT {
			scratch.scores[w] = make([]F, maxT)
		}
	}
	job := reuse[cachedAttentionJob[F]](p)
	*job = cachedAttentionJob[F]{
		out: out[:B*Tnew*C], kcache: kcache[:B*NH*maxT*HS], vcache: vcache[:B*NH*maxT*HS], qkv: qkv[:B*Tnew*3*C],
		Tnew: Tnew, pos: pos, maxT: maxT, C: C, NH: NH, HS: HS, scratch: scratch,
	}
	p.forTasks(B*NH, job)
	*job = cachedAttentionJob[F]{}
}

// cachedAttentionScratch holds each worker's scores of one query (maxT).
type cachedAttentionScratch[F Float] struct{ scores [][]F }

type cachedAttentionJob[F Float] struct {
	out, kcache, vcache, qkv   []F
	Tnew, pos, maxT, C, NH, HS int
	scratch                    *cachedAttentionScratch[F]
}

// runTask appends one (batch, head)'s new keys and values, then computes its new outputs.
func (job *cachedAttentionJob[F]) runTask(worker, bh int) {
	Tnew, pos, C, NH, HS := job.Tnew, job.pos, job.C, job.NH, job.HS
	b, h := bh/NH, bh%NH
	keys := job.kcache[bh*job.maxT*HS:][:job.maxT*HS]
	values := job.vcache[bh*job.maxT*HS:][:job.maxT*HS]
	rows := job.qkv[b*Tnew*3*C:][:Tnew*3*C]
	for t := range Tnew {
		copy(keys[(pos+t)*HS:][:HS], rows[t*3*C+C+h*HS:])
		copy(values[(pos+t)*HS:][:HS], rows[t*3*C+2*C+h*HS:])
	}
	scale := F(1 / math.Sqrt(float64(HS)))
	for t := range Tnew {
		s := job.scratch.scores[worker][:pos+t+1]
		dotRows(s, rows[t*3*C+h*HS:][:HS], keys, HS, scale)
		maxScore := s[0]
		for _, sj := range s[1:] {
			if sj > maxScore { // a NaN score is caught by the sum below
				maxScore = sj
			}
		}
		sum := expShifted(s, maxScore)
		o := job.out[(b*Tnew+t)*C+h*HS:][:HS]
		clear(o)
		addWeightedRows(o, s, values, HS)
		scaleVec(o, 1/sum)
	}
}
