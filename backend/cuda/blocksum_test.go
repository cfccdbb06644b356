package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// SumSquaresBlocks on the GPU: each block's sum equals the CPU's to float64 rounding (both
// accumulate exact float32 squares in double, in different orders), a ragged last block
// included; a view that starts at a block boundary gives the bits the whole buffer gives for
// those blocks (the order depends on the block alone, which ZeRO-1's shard norms need); two
// calls give the same bits; and each 16-bit format reads its values.
func TestSumSquaresBlocksMatchesCPU(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	const block, N = 4096, 10*4096 + 1234
	rng := rand.New(rand.NewPCG(5, 6))
	host := make([]float32, N)
	for i := range host {
		host[i] = float32(rng.NormFloat64()) * float32(math.Pow(10, float64(i%7-3)))
	}
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		xc, xg := c.AllocDType(N, dt), g.AllocDType(N, dt)
		c.Upload(xc, host)
		g.Upload(xg, host)
		nb := (N + block - 1) / block
		want, got, again := make([]float64, nb), make([]float64, nb), make([]float64, nb)
		c.SumSquaresBlocks(want, xc, N, block)
		g.SumSquaresBlocks(got, xg, N, block)
		g.SumSquaresBlocks(again, xg, N, block)
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-12*want[i] {
				t.Errorf("%v block %d: GPU %.17g, CPU %.17g", dt, i, got[i], want[i])
			}
			if got[i] != again[i] {
				t.Errorf("%v block %d: two calls gave %.17g and %.17g", dt, i, got[i], again[i])
			}
		}
		const skip = 3
		tail := make([]float64, nb-skip)
		g.SumSquaresBlocks(tail, g.View(xg, skip*block, N-skip*block), N-skip*block, block)
		for i, v := range tail {
			if v != got[skip+i] {
				t.Errorf("%v block %d from a view: %.17g, from the whole buffer %.17g", dt, skip+i, v, got[skip+i])
			}
		}
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
}
