package backend

// BlockSumSquarer is implemented by backends that can sum the squares of a buffer in fixed-size
// blocks. The model's gradient norm is then the float64 sum, in block order, of the blocks'
// sums, a definition that does not depend on how the buffer is split: data-parallel ranks that
// each hold a shard of the gradient (ZeRO-1) compute their blocks' sums, exchange them, and get the
// bits one process gets.
type BlockSumSquarer interface {
	// SumSquaresBlocks writes dst[i] = the sum of squares of x[i*block : min((i+1)*block, N)],
	// accumulated in float64 in an order fixed by the block alone (not its position in x or the
	// thread count), for i < len(dst) = ceil(N/block). block is a positive multiple of 16.
	SumSquaresBlocks(dst []float64, x Buf, N, block int)
}

// BlockSums returns be as a BlockSumSquarer, or nil when it cannot sum in blocks. A wrapper (the
// profiler, which has Unwrap) offers the method whatever it wraps, so the backends it wraps must
// have it too.
func BlockSums(be Backend) BlockSumSquarer {
	bs, ok := be.(BlockSumSquarer)
	for inner := be; ok; {
		u, wraps := inner.(interface{ Unwrap() Backend })
		if !wraps {
			break
		}
		inner = u.Unwrap()
		_, ok = inner.(BlockSumSquarer)
	}
	if !ok {
		return nil
	}
	return bs
}

// SumGroup is how many consecutive block sums SumBlockSums adds before adding the groups.
const SumGroup = 64

// SumBlockSums is the total of the block sums of squares the gradient norm is defined by, in
// float64: each group of SumGroup consecutive sums added in order, then the groups' sums in
// order. The grouping depends on each sum's index alone, so ranks that exchange their shards'
// sums get the bits of one process; and a GPU adds the groups in parallel (GradStats), a short
// chain of dependent additions where one over all of them would be 30,000 long for GPT-2 124M.
func SumBlockSums(sums []float64) float64 {
	var total float64
	for lo := 0; lo < len(sums); lo += SumGroup {
		var g float64
		for _, s := range sums[lo:min(lo+SumGroup, len(sums))] {
			g += s
		}
		total += g
	}
	return total
}
