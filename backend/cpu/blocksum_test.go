package cpu

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// The blocks' sums must be each block's own: the same bits for the block wherever it sits and
// however many threads run, and the whole's norm is their sum in order.
func TestSumSquaresBlocks(t *testing.T) {
	const block = 48
	for _, n := range []int{1, 47, 48, 49, 1000, 4099} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)*1.7)) * float32(1+i%7) * 1e-3
		}
		for _, threads := range []int{1, 3} {
			be := New(threads)
			buf := be.Alloc(n)
			be.Upload(buf, x)
			dst := make([]float64, (n+block-1)/block)
			backend.BlockSums(be).SumSquaresBlocks(dst, buf, n, block)
			for i := range dst {
				part := x[i*block : min((i+1)*block, n)]
				// The block alone, in a buffer of its own: the same bits.
				alone := be.Alloc(len(part))
				be.Upload(alone, part)
				one := make([]float64, 1)
				if len(part) == block {
					be.SumSquaresBlocks(one, alone, block, block)
				} else {
					padded := be.Alloc(block) // trailing zeros change nothing
					be.Upload(padded, part)
					be.SumSquaresBlocks(one, padded, block, block)
				}
				if one[0] != dst[i] {
					t.Fatalf("n=%d threads=%d block %d: %v in place, %v alone", n, threads, i, dst[i], one[0])
				}
				var want float64
				for _, v := range part {
					want += float64(v) * float64(v)
				}
				if math.Abs(dst[i]-want) > 1e-12*want {
					t.Fatalf("n=%d block %d: %v, float64 reference %v", n, i, dst[i], want)
				}
			}
		}
	}
}
