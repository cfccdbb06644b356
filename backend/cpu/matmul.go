package cpu

import "github.com/gpt2go/gpt2go/backend"

// MatmulForward: out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be nil.
func (be *Backend) MatmulForward(out, inp, weight, bias backend.Buf, N, C, OC int) {
	matmulForward(&be.pool, &be.gemm, Floats(out), Floats(inp), Floats(weight), Floats(bias), N, C, OC)
	be.round(out, N*OC)
}

// MatmulBackward writes dinp(N,C) = dout @ weight and accumulates dweight(OC,C) += dout^T @ inp
// and dbias(OC) += column sums of dout(N,OC); dinp and dbias may be nil.
func (be *Backend) MatmulBackward(dinp, dweight, dbias, dout, inp, weight backend.Buf, N, C, OC int) {
	matmulBackward(&be.pool, &be.gemm, Floats(dinp), Floats(dweight), Floats(dbias), Floats(dout),
		Floats(inp), Floats(weight), N, C, OC)
	be.round(dinp, N*C)
	be.round(dweight, OC*C)
	be.round(dbias, OC)
}

// matmulForward: out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be nil. Each output
// element starts from its bias (or 0) and adds the C products in order; a few rows (generation's
// one token at a time) take the matrix-vector path instead (matvec.go), unless C is 0: then out is
// the bias (or zeros), which gemm sets for an empty sum and matvec's blocking has no size for.
func matmulForward[F Float](p *pool, ws *gemmWorkspace[F], out, inp, weight, bias []F, N, C, OC int) {
	if N <= matvecMaxRows && C > 0 {
		matvec(p, out, inp, weight, bias, N, C, OC)
		return
	}
	gemm(p, ws, N, OC, C,
		strided[F]{data: inp, rowStride: C, colStride: 1},
		strided[F]{data: weight, rowStride: 1, colStride: C}, // weight^T
		out[:N*OC], OC, false, bias)
}

// matmulBackward writes dinp(N,C) = dout(N,OC) @ weight(OC,C) and accumulates
// dweight(OC,C) += dout^T @ inp(N,C) and dbias(OC) += sum over n of dout[n]. dinp and dbias may
// be nil. Each element sums its terms in order, whatever the thread count.
func matmulBackward[F Float](p *pool, ws *gemmWorkspace[F], dinp, dweight, dbias, dout, inp, weight []F, N, C, OC int) {
	if dinp != nil {
		gemm(p, ws, N, C, OC,
			strided[F]{data: dout, rowStride: OC, colStride: 1},
			strided[F]{data: weight, rowStride: C, colStride: 1},
			dinp, C, false, nil)
	}
	gemm(p, ws, OC, C, N,
		strided[F]{data: dout, rowStride: 1, colStride: OC}, // dout^T
		strided[F]{data: inp, rowStride: C, colStride: 1},
		dweight, C, true, nil)
	if dbias != nil {
		matmulBiasBackward(p, dbias[:OC], dout[:N*OC], N, OC)
	}
}

// matmulBiasBackward accumulates dbias(OC) += sum over n of dout[n], each column summed in order
// of n: a weighted row sum with weights of 1, whose FMAs add exactly, so the bits are those of
// any in-order sum. Tasks are blocks of biasBlock columns.
func matmulBiasBackward[F Float](p *pool, dbias, dout []F, N, OC int) {
	job := reuse[matmulBiasJob[F]](p)
	if len(job.ones) < N {
		job.ones = make([]F, N)
		for i := range job.ones {
			job.ones[i] = 1
		}
	}
	job.dbias, job.dout, job.N, job.OC = dbias, dout, N, OC
	p.forTasks((OC+biasBlock-1)/biasBlock, job)
	job.dbias, job.dout = nil, nil
}

// biasBlock is the columns of a bias-gradient task: 64, the assembly's widest block of columns.
const biasBlock = 64

type matmulBiasJob[F Float] struct {
	ones        []F // N ones, kept between calls
	dbias, dout []F
	N, OC       int
}

func (job *matmulBiasJob[F]) runTask(_, task int) {
	lo, hi := task*biasBlock, min(job.OC, (task+1)*biasBlock)
	// The whole multiples of 8 columns, then the rest (the assembly takes lengths of 8k).
	for lo < hi {
		end := hi
		if n8 := (hi - lo) / 8 * 8; n8 > 0 {
			end = lo + n8
		}
		addWeightedRows(job.dbias[lo:end], job.ones[:job.N], job.dout[lo:], job.OC)
		lo = end
	}
}
