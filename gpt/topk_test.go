package gpt

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// topK picks the same candidates in the same order as sorting the whole vocabulary by logit
// (descending, ties by index), including ties and k at the edges.
func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, V := range []int{1, 2, 7, 100, 1000} {
		logits := make([]float32, V)
		for i := range logits {
			logits[i] = float32(rng.IntN(V/3 + 1)) // many ties
		}
		all := make([]int, V)
		for i := range all {
			all[i] = i
		}
		sort.SliceStable(all, func(a, b int) bool { return logits[all[a]] > logits[all[b]] })
		for _, k := range []int{1, 2, V / 2, V - 1, V} {
			if k < 1 || k > V {
				continue
			}
			if got := topK(make([]int, k), logits); !slices.Equal(got, all[:k]) {
				t.Fatalf("V=%d k=%d: got %v, want %v", V, k, got, all[:k])
			}
		}
	}
}
