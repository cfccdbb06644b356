package cpu

import "unsafe"

// This file holds matmulForward's path for a few rows, which is what generation runs: with a KV
// cache each new token is one row through every matmul, so the product is a matrix-vector one
// whose cost is reading the weight once (GPT-2 124M: 500 MB per token). The blocked gemm packs
// (transposes) the weight into panels first, which at one row costs more than the product, so a
// few rows instead take plain dot products with the weight's rows, streamed in order.

// matvecMaxRows is the most rows that take the matrix-vector path. Up to here reading the weight
// dominates and a block of weight rows is reused from cache for every input row; beyond, the
// blocked gemm's reuse of each loaded value across rows wins.
const matvecMaxRows = 8

// matvecBlockBytes bounds a task's block of weight rows so that, after the first input row has
// brought it in from memory, it is still in L2 for the others.
const matvecBlockBytes = 64 << 10

// matvec is matmulForward for N <= matvecMaxRows: out(N,OC) = inp(N,C) @ weight(OC,C)^T +
// bias(OC); bias may be nil. Each output is one dot product of an input row with a weight row
// (matvecRows: a fixed order of lanes and reduction) plus the bias, so the bits do not depend on
// the thread count, nor on the blocking; they differ from the gemm's, which adds the products to
// the bias one by one, by float32 rounding. Tasks are blocks of weight rows.
func matvec[F Float](p *pool, out, inp, weight, bias []F, N, C, OC int) {
	var zero F
	rows := max(4, matvecBlockBytes/(C*int(unsafe.Sizeof(zero)))/4*4)
	if N == 1 {
		// Nothing to reuse: long runs of rows instead, so that each thread streams through few
		// separate stretches of memory (the prefetcher restarts at each), still a few per thread
		// so that a descheduled thread holds the others up by a fraction of the work.
		rows = max(rows, (OC+rangesPerThread*p.threads-1)/(rangesPerThread*p.threads))
	}
	job := reuse[matvecJob[F]](p)
	*job = matvecJob[F]{out: out, inp: inp, weight: weight, bias: bias, N: N, C: C, OC: OC, rows: rows}
	p.forTasks((OC+rows-1)/rows, job)
	*job = matvecJob[F]{}
}

type matvecJob[F Float] struct {
	out, inp, weight, bias []F
	N, C, OC, rows         int
}

func (j *matvecJob[F]) runTask(_, task int) {
	lo, hi := task*j.rows, min(j.OC, (task+1)*j.rows)
	block := j.weight[lo*j.C : hi*j.C]
	for n := range j.N {
		dst := j.out[n*j.OC+lo : n*j.OC+hi]
		matvecRows(dst, j.inp[n*j.C:(n+1)*j.C], block)
		if j.bias != nil {
			for i, b := range j.bias[lo:hi] {
				dst[i] += b
			}
		}
	}
}

// matvecRows sets dst[j] = x . rows[j*k:(j+1)*k] for j < len(dst), with k = len(x): on amd64 an
// assembly loop that streams the rows in order (matvec_amd64.s), else dotRows.
func matvecRows[F Float](dst, x, rows []F) {
	if !matvecRowsAccelerated(dst, x, rows) {
		dotRows(dst, x, rows, len(x), 1)
	}
}
