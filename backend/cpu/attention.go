package cpu

import (
	"fmt"
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// Attention is computed the way FlashAttention does it, one (batch, head) at a time and one block
// of attnKeyBlock keys at a time, so no (T,T) matrix of scores or probabilities ever exists: the
// forward keeps a running maximum and sum per query (an online softmax) and saves only the output
// and each query's log-sum-exp; the backward recomputes each block of probabilities from the
// log-sum-exp. Memory is O(T) per thread instead of O(B*NH*T^2) per layer. Short sequences in
// float32 (T <= 128, head sizes a multiple of 16, on CPUs with AVX2 and FMA) take instead a
// whole-block path built on the gemm's micro-kernel (attention_amd64.go), with the same inputs
// and outputs.
//
// Notation for one batch b and head h, with HS = C/NH: q_i, k_j, v_j are the HS-wide head slices
// of qkv(B,T,3C) at query i and key j (q at column h*HS, k at C+h*HS, v at 2C+h*HS),
// s_ij = q_i.k_j/sqrt(HS) for the keys j that query i sees (j <= i when causal, every j when
// not, and j < len_b, the sequence's length, with padding: see backend.AttentionMask), p_ij = exp(s_ij - lse_i) with lse_i = log(sum_j exp(s_ij)),
// and o_i = sum_j p_ij v_j.

const (
	attnQueryBlock = 32 // queries per block: a forward task, a step of the backward
	attnKeyBlock   = 64 // keys whose scores are held at a time
)

// AttentionForward runs multi-head self-attention; see backend.Ops.
func (be *Backend) AttentionForward(out, lse, qkv backend.Buf, B, T, C, NH int, mask backend.AttentionMask) {
	attentionForward(&be.pool, Floats(out), Floats(lse), Floats(qkv), B, T, C, NH, cpuMask(mask))
	be.round(out, B*T*C)
	be.round(lse, B*NH*T)
}

// AttentionBackward writes dqkv(B,T,3C); see backend.Ops.
func (be *Backend) AttentionBackward(dqkv, dout, qkv, out, lse backend.Buf, B, T, C, NH int, mask backend.AttentionMask) {
	attentionBackward(&be.pool, Floats(dqkv), Floats(dout), Floats(qkv), Floats(out), Floats(lse), B, T, C, NH, cpuMask(mask))
	be.round(dqkv, B*T*3*C)
}

// attentionMask is backend.AttentionMask on host memory.
type attentionMask struct {
	causal  bool
	lengths []int32 // (B), or nil: every sequence is T long
}

// causalMask is GPT-2's mask.
var causalMask = attentionMask{causal: true}

func cpuMask(m backend.AttentionMask) attentionMask {
	return attentionMask{causal: m.Causal, lengths: Int32s(m.Lengths)}
}

// attentionShape is the geometry and mask shared by the forward and backward jobs.
type attentionShape struct {
	B, T, C, NH, HS int
	attentionMask
}

// newAttentionShape checks the mask's lengths, which must lie in [1, T].
func newAttentionShape(B, T, C, NH int, mask attentionMask) attentionShape {
	if mask.lengths != nil {
		mask.lengths = mask.lengths[:B]
		for b, n := range mask.lengths {
			if n < 1 || int(n) > T {
				panic(fmt.Sprintf("cpu: attention: sequence %d has length %d, want 1..%d", b, n, T))
			}
		}
	}
	return attentionShape{B: B, T: T, C: C, NH: NH, HS: C / NH, attentionMask: mask}
}

// seqLen is the number of valid (unpadded) positions of sequence b.
func (s attentionShape) seqLen(b int) int {
	if s.lengths == nil {
		return s.T
	}
	return int(s.lengths[b])
}

// keyEnd returns the end of the keys [0, keyEnd) that query i of a sequence of length seqLen sees;
// it never decreases with i.
func (s attentionShape) keyEnd(i, seqLen int) int {
	if s.causal {
		return min(i+1, seqLen)
	}
	return seqLen
}

// firstQuery returns the first query that sees key j (when j < seqLen); every later query sees
// it too.
func (s attentionShape) firstQuery(j int) int {
	if s.causal {
		return j
	}
	return 0
}

// rowBase returns the offset in a (B,T,width) buffer of batch b, time 0, column col.
func (s attentionShape) rowBase(b, width, col int) int { return b*s.T*width + col }

// attentionWorkspace is one worker's scratch space, O(T) in all. A task first copies its head's
// queries, keys, values (and output gradients) into contiguous arrays, because their rows are 3C
// apart in qkv, a stride that maps them onto few cache sets and defeats prefetching.
type attentionWorkspace[F Float] struct {
	scores, dscores   []F // (attnKeyBlock): one query's scores or probabilities, and their gradients
	scoresT, dscoresT []F // (attnKeyBlock, attnQueryBlock): the same for a query block, transposed
	runMax, runSum    []F // (attnQueryBlock): the forward's online softmax state
	dotOut            []F // (T): D_i = dout_i.out_i for one head
	queries, keys     []F // (T, HS): one head's q and k
	values, douts     []F // (T, HS): one head's v and dout
	dkeys, dvalues    []F // (attnKeyBlock, HS): one key block's gradients
}

// attentionScratch holds the workers' workspaces.
type attentionScratch[F Float] struct {
	workers []attentionWorkspace[F]
}

// ensure sizes the scratch for workers workers, sequences of T tokens and heads of HS; it
// allocates only when a larger size is first needed.
func (s *attentionScratch[F]) ensure(workers, T, HS int) {
	for len(s.workers) < workers {
		s.workers = append(s.workers, attentionWorkspace[F]{
			scores: make([]F, attnKeyBlock), dscores: make([]F, attnKeyBlock),
			scoresT: make([]F, attnKeyBlock*attnQueryBlock), dscoresT: make([]F, attnKeyBlock*attnQueryBlock),
			runMax: make([]F, attnQueryBlock), runSum: make([]F, attnQueryBlock),
		})
	}
	for w := range s.workers[:workers] {
		ws := &s.workers[w]
		if len(ws.dotOut) < T {
			ws.dotOut = make([]F, T)
		}
		if len(ws.keys) < T*HS {
			ws.queries, ws.keys = make([]F, T*HS), make([]F, T*HS)
			ws.values, ws.douts = make([]F, T*HS), make([]F, T*HS)
		}
		if len(ws.dkeys) < attnKeyBlock*HS {
			ws.dkeys, ws.dvalues = make([]F, attnKeyBlock*HS), make([]F, attnKeyBlock*HS)
		}
	}
}

// packHead copies head h of batch b's q, k and v rows (each T x HS, from qkv (B,T,3C)) into the
// worker's contiguous scratch.
func packHead[F Float](s attentionShape, ws *attentionWorkspace[F], qkv []F, b, h int) (q, k, v []F) {
	T, C, HS := s.T, s.C, s.HS
	q = packRows(ws.queries, qkv[s.rowBase(b, 3*C, h*HS):], T, HS, 3*C)
	k = packRows(ws.keys, qkv[s.rowBase(b, 3*C, C+h*HS):], T, HS, 3*C)
	v = packRows(ws.values, qkv[s.rowBase(b, 3*C, 2*C+h*HS):], T, HS, 3*C)
	return q, k, v
}

// packRows copies n rows of hs values, stride apart in src, into dst contiguously.
func packRows[F Float](dst, src []F, n, hs, stride int) []F {
	dst = dst[:n*hs]
	for j := range n {
		copy(dst[j*hs:(j+1)*hs], src[j*stride:])
	}
	return dst
}

// unpackRows copies the n contiguous rows of hs values in src to rows stride apart in dst
// (packRows' inverse).
func unpackRows[F Float](dst, src []F, n, hs, stride int) {
	for j := range n {
		copy(dst[j*stride:][:hs], src[j*hs:(j+1)*hs])
	}
}

// attentionForward writes out(B,T,C), o_i for every batch, head and query, and lse(B,NH,T), the
// log-sum-exp of each query's scaled scores, given qkv(B,T,3C). Tasks are (batch, head) pairs;
// each query's output is computed in a fixed order of keys.
func attentionForward[F Float](p *pool, out, lse, qkv []F, B, T, C, NH int, mask attentionMask) {
	shape := newAttentionShape(B, T, C, NH, mask)
	if smallAttentionForwardRun(p, out[:B*T*C], lse[:B*NH*T], qkv[:B*T*3*C], shape) {
		return
	}
	job := reuse[attentionForwardJob[F]](p)
	scratch := reuse[attentionScratch[F]](p)
	scratch.ensure(p.threads, T, C/NH)
	*job = attentionForwardJob[F]{
		attentionShape: shape,
		out:            out[:B*T*C], lse: lse[:B*NH*T], qkv: qkv[:B*T*3*C], scratch: scratch,
	}
	p.forTasks(B*NH, job)
	*job = attentionForwardJob[F]{}
}

type attentionForwardJob[F Float] struct {
	attentionShape
	out, lse, qkv []F
	scratch       *attentionScratch[F]
}

// runTask computes the output of one (batch, head), a query block at a time.
func (job *attentionForwardJob[F]) runTask(worker, bh int) {
	T, C, NH, HS := job.T, job.C, job.NH, job.HS
	b, h := bh/NH, bh%NH
	ws := &job.scratch.workers[worker]
	queries, keys, values := packHead(job.attentionShape, ws, job.qkv, b, h)
	outs := job.out[job.rowBase(b, C, h*HS):]
	lse := job.lse[bh*T:][:T]
	scale := F(1 / math.Sqrt(float64(HS)))
	seqLen := job.seqLen(b)

	for i0 := 0; i0 < T; i0 += attnQueryBlock {
		i1 := min(T, i0+attnQueryBlock)
		runMax, runSum := ws.runMax[:i1-i0], ws.runSum[:i1-i0]
		for i := i0; i < i1; i++ {
			clear(outs[i*C:][:HS])
			runMax[i-i0] = F(math.Inf(-1))
			runSum[i-i0] = 0
		}
		keyEnd := job.keyEnd(i1-1, seqLen) // the block's last query sees the most keys
		for j0 := 0; j0 < keyEnd; j0 += attnKeyBlock {
			j1 := min(j0+attnKeyBlock, keyEnd)
			for i := i0; i < i1; i++ {
				// Keys j0..min(j1, keyEnd(i))-1 are visible to query i.
				n := min(j1, job.keyEnd(i, seqLen)) - j0
				if n <= 0 {
					continue
				}
				s := ws.scores[:n]
				dotRows(s, queries[i*HS:][:HS], keys[j0*HS:], HS, scale)
				oldMax := runMax[i-i0]
				newMax := oldMax
				for _, sj := range s {
					if sj > newMax { // a NaN score is caught by the sum below
						newMax = sj
					}
				}
				o := outs[i*C:][:HS]
				if newMax > oldMax && runSum[i-i0] != 0 {
					// Rescale what was summed against the old maximum.
					alpha := F(math.Exp(float64(oldMax - newMax)))
					runSum[i-i0] *= alpha
					scaleVec(o, alpha)
				}
				runSum[i-i0] += expShifted(s, newMax)
				runMax[i-i0] = newMax
				addWeightedRows(o, s, values[j0*HS:], HS)
			}
		}
		for i := i0; i < i1; i++ {
			scaleVec(outs[i*C:][:HS], 1/runSum[i-i0])
			lse[i] = runMax[i-i0] + F(math.Log(float64(runSum[i-i0])))
		}
	}
}

// attentionBackward writes into dqkv(B,T,3C) the gradient of the loss given dout(B,T,C), the
// forward's input qkv(B,T,3C) and its results out(B,T,C) and lse(B,NH,T). With
// D_i = dout_i.o_i and ds_ij = p_ij (dout_i.v_j - D_i):
//
//	dq_i = sum_j ds_ij k_j / sqrt(HS),  dk_j = sum_i ds_ij q_i / sqrt(HS),  dv_j = sum_i p_ij dout_i
//
// Keys and values receive gradient from every later query, so a task owns a whole (batch, head)
// and its slice of dqkv. It walks the key blocks in order and, for each, the query blocks that see
// it in order: the block's probabilities and score gradients, kept transposed, then update dk and
// dv key by key with the block's queries, each sum accumulated in registers.
func attentionBackward[F Float](p *pool, dqkv, dout, qkv, out, lse []F, B, T, C, NH int, mask attentionMask) {
	shape := newAttentionShape(B, T, C, NH, mask)
	if smallAttentionBackwardRun(p, dqkv[:B*T*3*C], dout[:B*T*C], qkv[:B*T*3*C], out[:B*T*C], lse[:B*NH*T], shape) {
		return
	}
	job := reuse[attentionBackwardJob[F]](p)
	scratch := reuse[attentionScratch[F]](p)
	scratch.ensure(p.threads, T, C/NH)
	*job = attentionBackwardJob[F]{
		attentionShape: shape,
		dqkv:           dqkv[:B*T*3*C], dout: dout[:B*T*C], qkv: qkv[:B*T*3*C], out: out[:B*T*C],
		lse: lse[:B*NH*T], scratch: scratch,
	}
	p.forTasks(B*NH, job)
	*job = attentionBackwardJob[F]{}
}

type attentionBackwardJob[F Float] struct {
	attentionShape
	dqkv, dout, qkv, out, lse []F
	scratch                   *attentionScratch[F]
}

// runTask computes the gradient of one (batch, head).
func (job *attentionBackwardJob[F]) runTask(worker, bh int) {
	T, C, NH, HS := job.T, job.C, job.NH, job.HS
	b, h := bh/NH, bh%NH
	stride := 3 * C
	ws := &job.scratch.workers[worker]
	queries, keys, values := packHead(job.attentionShape, ws, job.qkv, b, h)
	douts := packRows(ws.douts, job.dout[job.rowBase(b, C, h*HS):], T, HS, C)
	dqs := job.dqkv[job.rowBase(b, 3*C, h*HS):]
	dks := job.dqkv[job.rowBase(b, 3*C, C+h*HS):]
	dvs := job.dqkv[job.rowBase(b, 3*C, 2*C+h*HS):]
	outs := job.out[job.rowBase(b, C, h*HS):]
	lse := job.lse[bh*T:][:T]
	scale := F(1 / math.Sqrt(float64(HS)))
	seqLen := job.seqLen(b)

	// D_i, one dot product per query; and dq, which sums over the key blocks below, from zero.
	dotOut := ws.dotOut[:T]
	for i := range T {
		dotRows(dotOut[i:i+1], douts[i*HS:][:HS], outs[i*C:], 0, 1)
		clear(dqs[i*stride:][:HS])
	}
	for j0 := 0; j0 < T; j0 += attnKeyBlock {
		j1 := min(j0+attnKeyBlock, T)
		keyBlock, valueBlock := keys[j0*HS:j1*HS], values[j0*HS:j1*HS]
		dkeys, dvalues := ws.dkeys[:len(keyBlock)], ws.dvalues[:len(keyBlock)]
		clear(dkeys)
		clear(dvalues)
		// Keys at or past seqLen are seen by no query: their dk and dv stay zero.
		first := job.firstQuery(j0)
		for i0 := first - first%attnQueryBlock; i0 < T && j0 < seqLen; i0 += attnQueryBlock {
			i1 := min(i0+attnQueryBlock, T)
			nq := i1 - i0
			// probsT[j*nq+i-i0] is p for query i and key j0+j, dscoresT[...] its ds, where query i
			// sees key j0+j.
			probsT, dscoresT := ws.scoresT[:(j1-j0)*nq], ws.dscoresT[:(j1-j0)*nq]
			for i := i0; i < i1; i++ {
				n := min(j1, job.keyEnd(i, seqLen)) - j0
				if n <= 0 {
					continue
				}
				q, do := queries[i*HS:][:HS], douts[i*HS:][:HS]
				p, ds := ws.scores[:n], ws.dscores[:n]
				dotRows(p, q, keyBlock, HS, scale)
				expShifted(p, lse[i])
				dotRows(ds, do, valueBlock, HS, 1)
				for j, dpj := range ds {
					ds[j] = p[j] * (dpj - dotOut[i]) * scale
				}
				addWeightedRows(dqs[i*stride:][:HS], ds, keyBlock, HS)
				for j := range n {
					probsT[j*nq+i-i0], dscoresT[j*nq+i-i0] = p[j], ds[j]
				}
			}
			for j := range j1 - j0 {
				first := max(job.firstQuery(j0+j), i0) // the block's first query that sees key j0+j
				if first >= i1 || j0+j >= seqLen {
					break
				}
				f := first - i0
				addWeightedRows(dkeys[j*HS:][:HS], dscoresT[j*nq+f:(j+1)*nq], queries[first*HS:], HS)
				addWeightedRows(dvalues[j*HS:][:HS], probsT[j*nq+f:(j+1)*nq], douts[first*HS:], HS)
			}
		}
		unpackRows(dks[j0*stride:], dkeys, j1-j0, HS, stride)
		unpackRows(dvs[j0*stride:], dvalues, j1-j0, HS, stride)
	}
}
