package cpu

import (
	"math"
	"unsafe"
)

// This file is attention for short sequences in float32 on the gemm's assembly micro-kernel
// (gemm_amd64.go): for T <= smallAttnMaxT a (batch, head) task holds its whole (T,T) block of
// scores, so each of the products S = Q K^T, O = P V and, in the backward, dP = dO V^T,
// dQ = dS K, dK = dS^T Q, dV = P^T dO is a handful of 6x16 tiles over packed panels instead of
// one short dot product or weighted row sum per query, which at nanoGPT's T = 64, HS = 32 cost
// more in calls and horizontal sums than in arithmetic. Tiles of keys that no row of the tile sees
// (above the causal diagonal, past the sequence's length) are skipped, and a product over keys
// stops at the last key its rows can see; masked probabilities inside a tile are exact zeros. Every output
// element is still one lane summed in a fixed order, so results do not depend on the thread
// count. The forward saves only lse, as the flash path does, and the backward recomputes P.

// smallAttnMaxT is the longest sequence that takes this path (its scratch is O(T^2) per thread).
const smallAttnMaxT = 128

// useSmallAttention lets tests and benchmarks turn this path off to compare with the flash path.
var useSmallAttention = true

// smallAttentionApplies says whether attention of this shape runs on this file's path.
func smallAttentionApplies[F Float](T, HS int) bool {
	var zero F
	return useSmallAttention && useSgemmKernel && unsafe.Sizeof(zero) == 4 && T <= smallAttnMaxT && HS > 0 && HS%sgemmNR == 0
}

// smallAttnWorkspace is one worker's scratch: packed panels (A-style: 6 rows interleaved along
// k; B-style: 16 columns interleaved along k) and (T6,T16) score-sized matrices.
type smallAttnWorkspace struct {
	qA, doA    []float32 // (T6, HS) as A panels: q rows, dout rows
	kTB, vTB   []float32 // (HS, T16) as B panels: K^T, V^T
	kB, vB     []float32 // (T, HS) as B panels: K, V
	qB, doB    []float32 // (T, HS) as B panels: Q, dout
	scores, dp []float32 // (T6, T16) row-major: S, dP
	pA, dsA    []float32 // (T6, T) as A panels: P, dS (rows queries, k keys)
	pTA, dsTA  []float32 // (T6, T) as A panels: P^T, dS^T (rows keys, k queries)
	dotOut     []float32 // (T): D_i = dout_i . o_i
	T, HS      int       // the largest sizes allocated for
}

type smallAttnScratch struct{ workers []smallAttnWorkspace }

// ensure sizes the scratch for workers workers, sequences of T tokens and heads of HS; every size
// grows with T and HS, so it allocates only when a larger T or HS is first seen (sampling runs
// every length up to the context).
func (s *smallAttnScratch) ensure(workers, T, HS int) {
	for len(s.workers) < workers {
		s.workers = append(s.workers, smallAttnWorkspace{})
	}
	for w := range s.workers[:workers] {
		ws := &s.workers[w]
		if T <= ws.T && HS <= ws.HS {
			continue
		}
		ws.T, ws.HS = max(T, ws.T), max(HS, ws.HS)
		T, HS := ws.T, ws.HS
		T6, T16 := roundUp(T, sgemmMR), roundUp(T, sgemmNR)
		f := func(n int) []float32 { return make([]float32, n) }
		ws.qA, ws.doA = f(T6*HS), f(T6*HS)
		ws.kTB, ws.vTB = f(T16*HS), f(T16*HS)
		ws.kB, ws.vB, ws.qB, ws.doB = f(T*HS), f(T*HS), f(T*HS), f(T*HS)
		ws.scores, ws.dp = f(T6*T16), f(T6*T16)
		ws.pA, ws.dsA, ws.pTA, ws.dsTA = f(T6*T), f(T6*T), f(T6*T), f(T6*T)
		ws.dotOut = f(T)
	}
}

// smallAttnPackA packs the T rows of HS values, stride apart in src, as 6-row panels of depth HS.
func smallAttnPackA(dst, src []float32, T, HS, stride int) {
	m := strided[float32]{data: src, rowStride: stride, colStride: 1}
	for i := 0; i < T; i += sgemmMR {
		sgemmPackA(dst[i*HS:(i+sgemmMR)*HS], m, i, 0, min(sgemmMR, T-i), HS)
	}
}

// smallAttnPackTransposedB packs the transpose of the T rows of HS values, stride apart in src,
// as 16-column panels of depth HS (column j is row j of src).
func smallAttnPackTransposedB(dst, src []float32, T, HS, stride int) {
	m := strided[float32]{data: src, rowStride: 1, colStride: stride}
	for j := 0; j < T; j += sgemmNR {
		sgemmPackB(dst[j*HS:(j+sgemmNR)*HS], m, 0, j, HS, min(sgemmNR, T-j))
	}
}

// smallAttnPackB packs the T rows of HS values, stride apart in src, as 16-column panels of
// depth T.
func smallAttnPackB(dst, src []float32, T, HS, stride int) {
	m := strided[float32]{data: src, rowStride: stride, colStride: 1}
	for j := 0; j < HS; j += sgemmNR {
		sgemmPackB(dst[j*T:(j+sgemmNR)*T], m, 0, j, T, sgemmNR)
	}
}

// smallAttnScores sets the tiles of s (row stride T16) that hold any key j seen by query i to
// a @ b for the A panels a (T6 rows) and B panels b (T16 columns) of depth HS.
func smallAttnScores(s, a, b []float32, sh attentionShape, seqLen int) {
	T, HS := sh.T, sh.HS
	T16 := roundUp(T, sgemmNR)
	for i := 0; i < T; i += sgemmMR {
		for j := 0; j < sh.keyEnd(min(i+sgemmMR, T)-1, seqLen); j += sgemmNR {
			c := s[i*T16+j:]
			_ = c[(sgemmMR-1)*T16+sgemmNR-1]
			sgemmKernel6x16(HS, &a[i*HS], &b[j*HS], &c[0], T16, &sgemmZeros[0], 0)
		}
	}
}

// smallAttnProduct sets or adds (accumulate) the (T, HS) product of the A panels a (row panel
// r at a[r*6*T:], depth T) and the B panels b (depth T) into c (row stride ldc). Only part of the
// depth may be nonzero: when queryRows, a's rows are queries and the panel of rows i..i+5 sees
// keys [0, keyEnd(i+5)); otherwise they are keys, seen by queries [firstQuery(i), T) (or none,
// past the sequence's length, whose entries are zeros).
func smallAttnProduct(c, a, b []float32, sh attentionShape, seqLen, ldc int, accumulate, queryRows bool) {
	T, HS := sh.T, sh.HS
	for i := 0; i < T; i += sgemmMR {
		k0, k1 := sh.firstQuery(i), T
		if queryRows {
			k0, k1 = 0, sh.keyEnd(min(T, i+sgemmMR)-1, seqLen)
		}
		if k1 <= k0 {
			continue
		}
		tileRows := min(sgemmMR, T-i)
		for j := 0; j < HS; j += sgemmNR {
			pa, pb := &a[i*T+sgemmMR*k0], &b[j*T+sgemmNR*k0]
			off := i*ldc + j
			if tileRows == sgemmMR {
				_ = c[off+(sgemmMR-1)*ldc+sgemmNR-1]
				init, initStride := &sgemmZeros[0], 0
				if accumulate {
					init, initStride = &c[off], ldc
				}
				sgemmKernel6x16(k1-k0, pa, pb, &c[off], ldc, init, initStride)
				continue
			}
			var tile [sgemmMR * sgemmNR]float32
			if accumulate {
				for r := range tileRows {
					copy(tile[r*sgemmNR:(r+1)*sgemmNR], c[off+r*ldc:])
				}
			}
			sgemmKernel6x16(k1-k0, pa, pb, &tile[0], sgemmNR, &tile[0], sgemmNR)
			for r := range tileRows {
				copy(c[off+r*ldc:off+r*ldc+sgemmNR], tile[r*sgemmNR:])
			}
		}
	}
}

// smallAttnSoftmaxRow turns row, a query's scores of the n keys it sees (row[j] for j < n, room
// for at least roundUp(n, 8) values), into exp(scale*row[j] - shift) and returns their sum; shift
// is the scaled maximum when useMax, else the given lse. It also zeroes the keys j in
// [n, lastKey] that the 6-row panels of the products read (smallAttnLastKey).
func smallAttnSoftmaxRow(row []float32, n, lastKey int, scale float32, useMax bool, shift float32) (sum, maxScore float32) {
	n8 := roundUp(n, 8)
	row = row[:max(n8, lastKey+1)]
	if useMax {
		maxScore = float32(math.Inf(-1))
		for j, v := range row[:n] {
			v *= scale
			row[j] = v
			if v > maxScore { // a NaN score is caught by the sum
				maxScore = v
			}
		}
		shift = maxScore
	} else {
		for j := range row[:n] {
			row[j] *= scale
		}
	}
	// exp(-inf) is exactly 0 and adds nothing to the sum, which lets the kernel run on whole vectors.
	for j := n; j < n8; j++ {
		row[j] = float32(math.Inf(-1))
	}
	sum = expShifted(row[:n8], shift)
	if lastKey >= n8 {
		clear(row[n8 : lastKey+1])
	}
	return sum, maxScore
}

// smallAttnLastKey is the last key of query i's row of probabilities that the products read:
// the query panel's last key (causal) or the sequence's last (the key panels' products read
// every query's row).
func smallAttnLastKey(sh attentionShape, i int) int {
	if sh.causal {
		return min(sh.T, i/sgemmMR*sgemmMR+sgemmMR) - 1
	}
	return sh.T - 1
}

// smallAttnPackRowsA packs rows [0, T) of the row-major (T, T) block m (row stride ld) as A
// panels of depth T, or, when transposed, the rows of its transpose.
func smallAttnPackRowsA(dst, m []float32, T, ld int, transposed bool) {
	v := strided[float32]{data: m, rowStride: ld, colStride: 1}
	if transposed {
		v = v.transpose()
	}
	for i := 0; i < T; i += sgemmMR {
		sgemmPackA(dst[i*T:(i+sgemmMR)*T], v, i, 0, min(sgemmMR, T-i), T)
	}
}

// smallAttentionForward is attentionForward's task for one (batch, head) on this path.
func smallAttentionForward(ws *smallAttnWorkspace, out, lse, qkv []float32, s attentionShape, bh int) {
	T, C, NH, HS := s.T, s.C, s.NH, s.HS
	b, h := bh/NH, bh%NH
	T16 := roundUp(T, sgemmNR)
	stride := 3 * C
	smallAttnPackA(ws.qA, qkv[s.rowBase(b, 3*C, h*HS):], T, HS, stride)
	smallAttnPackTransposedB(ws.kTB, qkv[s.rowBase(b, 3*C, C+h*HS):], T, HS, stride)
	smallAttnPackB(ws.vB, qkv[s.rowBase(b, 3*C, 2*C+h*HS):], T, HS, stride)
	seqLen := s.seqLen(b)
	smallAttnScores(ws.scores, ws.qA, ws.kTB, s, seqLen)
	scale := float32(1 / math.Sqrt(float64(HS)))
	lse = lse[bh*T:][:T]
	for i := range T {
		row := ws.scores[i*T16 : (i+1)*T16]
		n := s.keyEnd(i, seqLen)
		sum, maxScore := smallAttnSoftmaxRow(row, n, smallAttnLastKey(s, i), scale, true, 0)
		lse[i] = maxScore + float32(math.Log(float64(sum)))
		inv := 1 / sum
		for j := range row[:n] {
			row[j] *= inv
		}
	}
	smallAttnPackRowsA(ws.pA, ws.scores, T, T16, false)
	smallAttnProduct(out[s.rowBase(b, C, h*HS):], ws.pA, ws.vB, s, seqLen, C, false, true)
}

// smallAttentionBackward is attentionBackward's task for one (batch, head) on this path.
func smallAttentionBackward(ws *smallAttnWorkspace, dqkv, dout, qkv, out, lse []float32, s attentionShape, bh int) {
	T, C, NH, HS := s.T, s.C, s.NH, s.HS
	b, h := bh/NH, bh%NH
	T16 := roundUp(T, sgemmNR)
	stride := 3 * C
	q, k, v := qkv[s.rowBase(b, 3*C, h*HS):], qkv[s.rowBase(b, 3*C, C+h*HS):], qkv[s.rowBase(b, 3*C, 2*C+h*HS):]
	do, o := dout[s.rowBase(b, C, h*HS):], out[s.rowBase(b, C, h*HS):]
	smallAttnPackA(ws.qA, q, T, HS, stride)
	smallAttnPackTransposedB(ws.kTB, k, T, HS, stride)
	smallAttnPackA(ws.doA, do, T, HS, C)
	smallAttnPackTransposedB(ws.vTB, v, T, HS, stride)
	smallAttnPackB(ws.kB, k, T, HS, stride)
	smallAttnPackB(ws.qB, q, T, HS, stride)
	smallAttnPackB(ws.doB, do, T, HS, C)
	seqLen := s.seqLen(b)
	smallAttnScores(ws.scores, ws.qA, ws.kTB, s, seqLen)
	smallAttnScores(ws.dp, ws.doA, ws.vTB, s, seqLen)
	scale := float32(1 / math.Sqrt(float64(HS)))
	lse = lse[bh*T:][:T]
	dotOut := ws.dotOut[:T]
	for i := range T {
		dotRows(dotOut[i:i+1], do[i*C:][:HS], o[i*C:], 0, 1)
	}
	for i := range T {
		// p_ij = exp(scale*s_ij - lse_i), and ds_ij = p_ij (dp_ij - D_i) scale in place of dp_ij.
		lastKey, n := smallAttnLastKey(s, i), s.keyEnd(i, seqLen)
		p := ws.scores[i*T16 : (i+1)*T16]
		smallAttnSoftmaxRow(p, n, lastKey, scale, false, lse[i])
		ds := ws.dp[i*T16 : (i+1)*T16]
		for j, pij := range p[:n] {
			ds[j] = pij * (ds[j] - dotOut[i]) * scale
		}
		if lastKey >= n {
			clear(ds[n : lastKey+1])
		}
	}
	smallAttnPackRowsA(ws.dsA, ws.dp, T, T16, false)
	smallAttnPackRowsA(ws.dsTA, ws.dp, T, T16, true)
	smallAttnPackRowsA(ws.pTA, ws.scores, T, T16, true)
	smallAttnProduct(dqkv[s.rowBase(b, 3*C, h*HS):], ws.dsA, ws.kB, s, seqLen, stride, false, true)
	smallAttnProduct(dqkv[s.rowBase(b, 3*C, C+h*HS):], ws.dsTA, ws.qB, s, seqLen, stride, false, false)
	smallAttnProduct(dqkv[s.rowBase(b, 3*C, 2*C+h*HS):], ws.pTA, ws.doB, s, seqLen, stride, false, false)
}

// smallAttentionForwardJob and smallAttentionBackwardJob run the tasks above over (batch, head)
// pairs.
type smallAttentionForwardJob struct {
	attentionShape
	out, lse, qkv []float32
	scratch       *smallAttnScratch
}

func (job *smallAttentionForwardJob) runTask(worker, bh int) {
	smallAttentionForward(&job.scratch.workers[worker], job.out, job.lse, job.qkv, job.attentionShape, bh)
}

type smallAttentionBackwardJob struct {
	attentionShape
	dqkv, dout, qkv, out, lse []float32
	scratch                   *smallAttnScratch
}

func (job *smallAttentionBackwardJob) runTask(worker, bh int) {
	smallAttentionBackward(&job.scratch.workers[worker], job.dqkv, job.dout, job.qkv, job.out, job.lse, job.attentionShape, bh)
}

// smallAttentionForwardRun runs attentionForward on this file's path if it applies and reports
// whether it did.
func smallAttentionForwardRun[F Float](p *pool, out, lse, qkv []F, s attentionShape) bool {
	if !smallAttentionApplies[F](s.T, s.HS) {
		return false
	}
	job := reuse[smallAttentionForwardJob](p)
	scratch := reuse[smallAttnScratch](p)
	scratch.ensure(p.threads, s.T, s.HS)
	*job = smallAttentionForwardJob{attentionShape: s, out: asFloat32(out), lse: asFloat32(lse), qkv: asFloat32(qkv), scratch: scratch}
	p.forTasks(s.B*s.NH, job)
	*job = smallAttentionForwardJob{}
	return true
}

// smallAttentionBackwardRun runs attentionBackward on this file's path if it applies and reports
// whether it did.
func smallAttentionBackwardRun[F Float](p *pool, dqkv, dout, qkv, out, lse []F, s attentionShape) bool {
	if !smallAttentionApplies[F](s.T, s.HS) {
		return false
	}
	job := reuse[smallAttentionBackwardJob](p)
	scratch := reuse[smallAttnScratch](p)
	scratch.ensure(p.threads, s.T, s.HS)
	*job = smallAttentionBackwardJob{attentionShape: s, dqkv: asFloat32(dqkv), dout: asFloat32(dout),
		qkv: asFloat32(qkv), out: asFloat32(out), lse: asFloat32(lse), scratch: scratch}
	p.forTasks(s.B*s.NH, job)
	*job = smallAttentionBackwardJob{}
	return true
}
