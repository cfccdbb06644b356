package data

import (
	"slices"
	"testing"
)

// The shuffle order must follow the seed: the same seed gives the same batches, different seeds
// different ones. Shuffle mode draws windows uniformly with replacement (nanoGPT's get_batch,
// see Loader), not a permutation, so there is no epoch coverage to check; TestLoaderShuffle
// checks the windows themselves. TestLoaderShuffle uses one seed and TestLoaderStateRestore
// overrides the seed with a restored state, so a loader that ignored its seed passed both.
func TestLoaderShuffleSeed(t *testing.T) {
	paths := shardsOf(t, 40, 4, 100)
	// firstBatches is the inputs of a fresh loader's first three batches under seed.
	firstBatches := func(seed uint64) []int32 {
		l, err := NewLoader(paths, 4, 8, 0, true, seed)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var all []int32
		for range 3 {
			in, _ := batch(t, l)
			all = append(all, in...)
		}
		return all
	}
	seeds := []uint64{0, 1, 2, 42, 1 << 40}
	orders := make([][]int32, len(seeds))
	for i, seed := range seeds {
		orders[i] = firstBatches(seed)
		if again := firstBatches(seed); !slices.Equal(again, orders[i]) {
			t.Errorf("seed %d: two loaders gave different batches", seed)
		}
	}
	for i := range seeds {
		for j := range i {
			if slices.Equal(orders[i], orders[j]) {
				t.Errorf("seeds %d and %d gave the same batches: the seed is ignored", seeds[j], seeds[i])
			}
		}
	}
}
