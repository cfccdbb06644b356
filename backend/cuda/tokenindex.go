package cuda

import "slices"

// tokenIndex groups a batch's positions by token for EncoderBackward (encoder_backward_wte_index
// in encoder.cu). host holds, as uploaded: the number of groups (distinct), order (n positions
// grouped by token, each group in increasing position), start (distinct+1 group offsets into
// order) and token (distinct ids). The kernel reads the group count from the index, so a launch
// recorded in a CUDA graph serves every batch of n tokens. It is rebuilt on every full upload
// without allocating once its slices have grown.
type tokenIndex struct {
	n        int     // positions indexed
	distinct int     // groups
	host     []int32 // order | start | token
	count    []int32 // per token id: scratch for the counting sort
	dev      uintptr // device copy: room for 3n+2 ints (n+2*distinct+2, distinct <= n)
	devN     int64
}

// maxIndexedToken bounds the counting sort's table; larger ids (not a GPT-2 vocabulary) go without
// an index.
const maxIndexedToken = 1 << 20

// build indexes tokens, returning false (and indexing nothing) when an id is out of range.
func (x *tokenIndex) build(tokens []int32) bool {
	x.n, x.distinct = 0, 0
	hi := int32(0)
	for _, t := range tokens {
		if t < 0 || t >= maxIndexedToken {
			return false
		}
		hi = max(hi, t)
	}
	x.count = slices.Grow(x.count[:0], int(hi)+1)[:hi+1]
	clear(x.count)
	for _, t := range tokens {
		x.count[t]++
	}
	n := len(tokens)
	distinct := 0
	for _, c := range x.count {
		if c > 0 {
			distinct++
		}
	}
	x.host = slices.Grow(x.host[:0], n+2*distinct+2)[:n+2*distinct+2]
	x.host[0] = int32(distinct)
	order, start, token := x.host[1:n+1], x.host[n+1:n+distinct+2], x.host[n+distinct+2:]
	// Prefix sums turn counts into each token's first slot; count keeps the next free slot.
	g, off := 0, int32(0)
	for t, c := range x.count {
		if c > 0 {
			start[g], token[g] = off, int32(t)
			x.count[t] = off
			off += c
			g++
		}
	}
	start[distinct] = off
	for p, t := range tokens { // positions in increasing order: each group stays sorted
		order[x.count[t]] = int32(p)
		x.count[t]++
	}
	x.n, x.distinct = n, distinct
	return true
}
