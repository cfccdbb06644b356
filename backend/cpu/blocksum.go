package cpu

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// SumSquaresBlocks implements backend.BlockSumSquarer: each block of x(N) is summed in 16 lanes
// (element j of the block in lane j%16), the lanes then added in order; blocks run in parallel.
func (be *Backend) SumSquaresBlocks(dst []float64, x backend.Buf, N, block int) {
	if block <= 0 || block%16 != 0 || len(dst) != (N+block-1)/block {
		panic(fmt.Sprintf("cpu.SumSquaresBlocks: %d blocks of %d for %d elements", len(dst), block, N))
	}
	job := reuse[blockSumJob](&be.pool)
	*job = blockSumJob{x: Floats(x)[:N], block: block, dst: dst}
	be.pool.forRanges(len(dst), 1, job)
	*job = blockSumJob{}
}

type blockSumJob struct {
	x     []float32
	block int
	dst   []float64
}

func (job *blockSumJob) runRange(lo, hi int) {
	for i := lo; i < hi; i++ {
		var lanes [16]float64
		sumSquaresLanes(job.x[i*job.block:min((i+1)*job.block, len(job.x))], &lanes)
		var s float64
		for _, l := range lanes {
			s += l
		}
		job.dst[i] = s
	}
}

var _ backend.BlockSumSquarer = (*Backend)(nil)
