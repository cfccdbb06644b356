package gpt

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// SampleOptions control autoregressive generation.
type SampleOptions struct {
	Tokens      int     // how many new tokens to generate
	Temperature float64 // 0 means greedy (argmax)
	TopK        int     // keep only the k most likely tokens; 0 keeps all
	Seed        uint64
	// Context is the most positions the model sees (0: the model's planned sequence length). With
	// the KV cache it may be up to the block size; without, up to the planned length.
	Context int
	// NoCache recomputes the whole window for every new token instead of using a KV cache: the
	// slow path, kept to compare against.
	NoCache bool
	// Notices, when set, receives one line when the context fills and the cache starts sliding.
	Notices io.Writer
}

// GenerateStats are the timings of one generation. Prompt is encoding the prompt, which gives the
// first new token's logits; Gen is everything after: the other NewTokens-1 tokens of every sample.
type GenerateStats struct {
	Samples, PromptTokens, NewTokens int // NewTokens per sample
	Prompt, Gen                      time.Duration
	Slides                           int // times the full cache was re-encoded from its last half
}

// PromptTokPerSec is the prompt's tokens (of every sample) encoded per second.
func (s GenerateStats) PromptTokPerSec() float64 {
	return float64(s.Samples*s.PromptTokens) / s.Prompt.Seconds()
}

// GenTokPerSec is new tokens (of every sample) per second after the first.
func (s GenerateStats) GenTokPerSec() float64 {
	return float64(s.Samples*max(0, s.NewTokens-1)) / s.Gen.Seconds()
}

// Generate extends prompt (at least one token) by opts.Tokens tokens, calling emit for each new
// token as soon as it is chosen; it returns the prompt followed by the new tokens.
func (m *Model) Generate(prompt []int32, opts SampleOptions, emit func(tok int32)) ([]int32, error) {
	seqs, _, err := m.GenerateBatch(context.Background(), prompt, 1, opts, func(_ int, tok int32) {
		if emit != nil {
			emit(tok)
		}
	})
	if len(seqs) == 0 {
		return nil, err
	}
	return seqs[0], err
}

// GenerateBatch extends prompt by opts.Tokens tokens in n samples at once, a batch of n sequences,
// calling emit(sample, tok) for each new token as it is chosen. Sample i draws from its own random
// stream of opts.Seed (sample 0's is Generate's), so samples differ from each other but each is
// reproducible.
//
// With the KV cache (the default) the prompt is encoded once and every new token costs one
// position. The cache holds what the generation needs, the prompt and the new tokens, up to
// opts.Context positions, and its memory is checked before anything of n's size is allocated.
// The model sees at most opts.Context positions: when the cache is full it slides, re-encoding
// the last half of the window once and continuing from there, so the context then spans between
// half and all of the window (without the cache, always the last full window).
//
// Cancelling ctx stops the generation before its next token, with an error that says so; the
// sequences hold the tokens emitted until then.
func (m *Model) GenerateBatch(ctx context.Context, prompt []int32, n int, opts SampleOptions, emit func(sample int, tok int32)) ([][]int32, GenerateStats, error) {
	stats := GenerateStats{Samples: n, PromptTokens: len(prompt)}
	switch {
	case len(prompt) == 0:
		return nil, stats, fmt.Errorf("generate: empty prompt")
	case opts.Temperature < 0:
		return nil, stats, fmt.Errorf("temperature must be >= 0, got %g", opts.Temperature)
	case n < 1:
		return nil, stats, fmt.Errorf("generate: need at least one sample, got %d", n)
	}
	g := &generation{ctx: ctx, m: m, opts: opts, emit: emit, stats: &stats}
	g.ctxLen = opts.Context
	if g.ctxLen == 0 {
		g.ctxLen = m.maxT
	}
	g.window = min(len(prompt), g.ctxLen)
	// The cache, and so its memory plan's refusal, comes before anything of n samples' size:
	// --num-samples may ask for more than memory holds.
	var kc *KVCache
	if opts.NoCache {
		if g.ctxLen > m.maxT || n > m.maxB {
			return nil, stats, fmt.Errorf("generate without the cache: %d samples of %d positions exceed the model's planned (%d,%d)", n, g.ctxLen, m.maxB, m.maxT)
		}
	} else {
		var err error
		if kc, err = m.generationCache(n, g.cacheLen()); err != nil {
			return nil, stats, err
		}
	}
	g.seqs = make([][]int32, n)
	for i := range n {
		g.seqs[i] = slices.Clone(prompt) // grown by append as tokens come
		g.rngs = append(g.rngs, rand.New(rand.NewPCG(opts.Seed, 0x5a5a5a5a+uint64(i))))
	}
	V := m.Config.VocabSize
	g.logits, g.probs, g.order = make([]float32, V), make([]float64, V), make([]int, V)
	var err error
	if opts.NoCache {
		err = g.uncached()
	} else {
		err = g.cached(kc)
	}
	return g.seqs, stats, err
}

// generation is the state of one GenerateBatch.
type generation struct {
	ctx    context.Context
	m      *Model
	ctxLen int // the most positions the model sees: opts.Context, or the planned length
	window int // how many of the prompt's last tokens the model reads first: at most ctxLen
	opts   SampleOptions
	seqs   [][]int32
	rngs   []*rand.Rand
	emit   func(int, int32)
	stats  *GenerateStats
	logits []float32
	probs  []float64
	order  []int
}

// cacheLen is how many positions the KV cache needs: the prompt's window and the new tokens fed
// back to the model (all but the last), at most the context, beyond which it slides. A cache of
// the whole context would hold the same positions and slide at the same points, so give the same
// tokens, but take the block size's memory however short the generation (GPT-2's 1024 positions,
// 75 MB per sample in fp32).
func (g *generation) cacheLen() int {
	return min(g.ctxLen, g.window+min(max(0, g.opts.Tokens-1), g.ctxLen)) // (no overflow for --tokens near MaxInt)
}

// cached generates with kc, the model's KV cache for this batch of cacheLen positions.
func (g *generation) cached(kc *KVCache) error {
	start := time.Now()
	window := g.promptWindow()
	kc.Truncate(0)
	if err := kc.Append(g.lastTokens(window), window); err != nil {
		return err
	}
	newTok := make([]int32, len(g.seqs))
	var err error
	for step := range g.opts.Tokens {
		if err := g.interrupted(step); err != nil {
			return err
		}
		if err := g.pick(kc.Logits, newTok); err != nil {
			return err
		}
		if step == 0 {
			g.stats.Prompt = time.Since(start)
			start = time.Now()
		}
		if step == g.opts.Tokens-1 {
			break
		}
		if kc.Len() < kc.Cap() {
			err = kc.Append(newTok, 1)
		} else {
			err = g.slide(kc)
		}
		if err != nil {
			return err
		}
	}
	g.stats.Gen = time.Since(start)
	g.stats.NewTokens = g.opts.Tokens
	return nil
}

// slide re-encodes the last half of the full window (the token just chosen included) into the
// emptied cache.
func (g *generation) slide(kc *KVCache) error {
	keep := max(1, kc.Cap()/2)
	if g.stats.Slides == 0 && g.opts.Notices != nil {
		fmt.Fprintf(g.opts.Notices, "context full at %d tokens: sliding the KV cache, re-encoding the last %d tokens each time it fills\n", kc.Cap(), keep)
	}
	g.stats.Slides++
	kc.Truncate(0)
	return kc.Append(g.lastTokens(keep), keep)
}

// uncached generates by running the model on the whole window for every new token.
func (g *generation) uncached() error {
	m, n, ctx := g.m, len(g.seqs), g.ctxLen
	start := time.Now()
	g.promptWindow()
	for step := range g.opts.Tokens {
		if err := g.interrupted(step); err != nil {
			return err
		}
		T := min(len(g.seqs[0]), ctx)
		if _, err := m.Forward(g.lastTokens(T), nil, n, T); err != nil {
			return err
		}
		if err := g.pick(func(dst []float32, b int) { m.LogitsRow(dst, b, T-1) }, nil); err != nil {
			return err
		}
		if step == 0 {
			g.stats.Prompt = time.Since(start)
			start = time.Now()
		}
	}
	g.stats.Gen = time.Since(start)
	g.stats.NewTokens = g.opts.Tokens
	return nil
}

// interrupted returns an error when the caller cancelled the generation, step tokens into it.
func (g *generation) interrupted(step int) error {
	if g.ctx.Err() != nil {
		return fmt.Errorf("interrupted after %d of %d tokens", step, g.opts.Tokens)
	}
	return nil
}

// promptWindow returns how many of the prompt's last tokens the model reads, at most the
// context, as the stats' prompt length, saying so in the notices when that cuts the prompt.
func (g *generation) promptWindow() int {
	n, window := len(g.seqs[0]), g.window
	if window < n && g.opts.Notices != nil {
		fmt.Fprintf(g.opts.Notices, "the prompt is %d tokens; the model reads its last %d (its context)\n", n, window)
	}
	g.stats.PromptTokens = window
	return window
}

// lastTokens returns the last T tokens of every sequence, (n,T) row-major.
func (g *generation) lastTokens(T int) []int32 {
	out := make([]int32, 0, len(g.seqs)*T)
	for _, s := range g.seqs {
		out = append(out, s[len(s)-T:]...)
	}
	return out
}

// pick chooses every sample's next token from its logits (read by logitsOf), appends and emits
// it, and also stores it in chosen when that is not nil.
func (g *generation) pick(logitsOf func(dst []float32, b int), chosen []int32) error {
	for i := range g.seqs {
		logitsOf(g.logits, i)
		tok := int32(pick(g.logits, g.probs, g.order, g.opts, g.rngs[i]))
		g.seqs[i] = append(g.seqs[i], tok)
		if chosen != nil {
			chosen[i] = tok
		}
		if g.emit != nil {
			g.emit(i, tok)
		}
	}
	return g.m.be.Sync()
}

// generationCache returns the model's KV cache for n sequences of maxT positions, kept between
// calls (training samples every few hundred steps) and replaced when the shape changes.
func (m *Model) generationCache(n, maxT int) (*KVCache, error) {
	if kc := m.genCache; kc != nil && kc.B == n && kc.maxT == maxT {
		return kc, nil
	}
	kc, err := m.NewKVCache(n, maxT)
	if err != nil {
		return nil, err
	}
	m.genCache = kc
	return kc, nil
}

// pick chooses the next token from logits (V) with temperature and top-k.
func pick(logits []float32, probs []float64, order []int, opts SampleOptions, rng *rand.Rand) int {
	if opts.Temperature == 0 {
		best := 0
		for i, l := range logits {
			if l > logits[best] {
				best = i
			}
		}
		return best
	}
	cands := order
	if opts.TopK > 0 && opts.TopK < len(logits) {
		cands = topK(order[:opts.TopK], logits)
	} else {
		for i := range order {
			order[i] = i
		}
	}
	maxLogit := math.Inf(-1)
	for _, i := range cands {
		maxLogit = math.Max(maxLogit, float64(logits[i]))
	}
	var sum float64
	for _, i := range cands {
		probs[i] = math.Exp((float64(logits[i]) - maxLogit) / opts.Temperature)
		sum += probs[i]
	}
	r := rng.Float64() * sum
	for _, i := range cands {
		r -= probs[i]
		if r <= 0 {
			return i
		}
	}
	return cands[len(cands)-1]
}

// topK fills dst with the indices of the len(dst) largest logits, largest first (ties by index).
// A min-heap of the best so far makes this one pass over the vocabulary, where sorting all of it
// took a sizable part of a token's time with the KV cache.
func topK(dst []int, logits []float32) []int {
	k := len(dst)
	// worse reports whether index a ranks below index b.
	worse := func(a, b int) bool { return logits[a] < logits[b] || (logits[a] == logits[b] && a > b) }
	down := func(i int) { // restore the heap below i
		for {
			c := 2*i + 1
			if c >= k {
				return
			}
			if c+1 < k && worse(dst[c+1], dst[c]) {
				c++
			}
			if !worse(dst[c], dst[i]) {
				return
			}
			dst[i], dst[c] = dst[c], dst[i]
			i = c
		}
	}
	for i := range dst {
		dst[i] = i
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for i := k; i < len(logits); i++ {
		if worse(dst[0], i) {
			dst[0] = i
			down(0)
		}
	}
	sort.Slice(dst, func(a, b int) bool { return worse(dst[b], dst[a]) })
	return dst
}
