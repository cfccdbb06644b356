package profile

import "github.com/gpt2go/gpt2go/backend"

// SumSquaresBlocks passes backend.BlockSumSquarer through (the gradient norm's bits then do not
// change under the profiler). backend.BlockSums offers it only when the profiled backend has it.
func (p *Backend) SumSquaresBlocks(dst []float64, x backend.Buf, N, block int) {
	start := p.now()
	p.Backend.(backend.BlockSumSquarer).SumSquaresBlocks(dst, x, N, block)
	p.record("SumSquares", start, p.finish(), sumSquaresCost(N))
}
