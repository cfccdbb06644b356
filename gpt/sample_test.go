package gpt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
)

// sampleModel is a 2-layer model of block size 24 with N(0, 0.1) weights (LayerNorm weights
// 1 + N(0, 0.1)): large enough that every position of the context moves the logits.
func sampleModel(t *testing.T) *Model {
	t.Helper()
	cfg := Config{BlockSize: 24, VocabSize: 50, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 4, Channels: 64}
	m, err := New(cpu.New(1), cfg, 1, cfg.BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	params := make([]float32, cfg.NumParams())
	for i, s := range m.Specs() {
		part := params[m.Offsets()[i] : m.Offsets()[i]+s.Size()]
		for j := range part {
			part[j] = float32(0.1 * rng.NormFloat64())
			if strings.HasPrefix(s.Name, "ln") && strings.HasSuffix(s.Name, "w") {
				part[j]++
			}
		}
	}
	if err := m.SetParams(params); err != nil {
		t.Fatal(err)
	}
	return m
}

// The generation's KV cache holds the prompt's window and the new tokens but the last, up to the
// context, and the samples are the ones a cache of the whole context gives (its size before):
// the same tokens and slides, whether the generation fits in the context, fills it exactly, or
// slides past it, and with a prompt longer than the context.
func TestGenerationCacheSize(t *testing.T) {
	m := sampleModel(t)
	for _, c := range []struct {
		prompt, tokens, context int
		wantCap, wantSlides     int
	}{
		{prompt: 3, tokens: 0, wantCap: 3},
		{prompt: 3, tokens: 1, wantCap: 3},
		{prompt: 3, tokens: 10, wantCap: 12},
		{prompt: 3, tokens: 21, wantCap: 23},
		{prompt: 3, tokens: 22, wantCap: 24},                // fills the context, no slide
		{prompt: 3, tokens: 23, wantCap: 24, wantSlides: 1}, // one past it
		{prompt: 3, tokens: 60, wantCap: 24, wantSlides: 3}, // slides again and again
		{prompt: 30, tokens: 5, wantCap: 24, wantSlides: 1}, // the prompt alone fills it
		{prompt: 3, tokens: 8, context: 16, wantCap: 10},    // a shorter context
		{prompt: 3, tokens: 30, context: 16, wantCap: 16, wantSlides: 2},
	} {
		t.Run(fmt.Sprintf("prompt%d_tokens%d_context%d", c.prompt, c.tokens, c.context), func(t *testing.T) {
			prompt := make([]int32, c.prompt)
			for i := range prompt {
				prompt[i] = int32(7*i+1) % 50
			}
			opts := SampleOptions{Tokens: c.tokens, Temperature: 1, Seed: 5, Context: c.context}
			seqs, stats, err := m.GenerateBatch(context.Background(), prompt, 2, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.genCache.Cap(); got != c.wantCap {
				t.Errorf("the cache holds %d positions, want %d", got, c.wantCap)
			}
			whole, wholeStats := generateWholeContext(t, m, prompt, 2, opts)
			for i := range seqs {
				if !slices.Equal(seqs[i], whole[i]) {
					t.Errorf("sample %d differs from a cache of the whole context:\n%v\n%v", i, seqs[i], whole[i])
				}
			}
			if stats.Slides != wholeStats.Slides || stats.Slides != c.wantSlides {
				t.Errorf("slid %d times, with a cache of the whole context %d, want %d", stats.Slides, wholeStats.Slides, c.wantSlides)
			}
		})
	}
}

// generateWholeContext is GenerateBatch with the KV cache sized as it was before it was sized by
// the generation: the whole context.
func generateWholeContext(t *testing.T, m *Model, prompt []int32, n int, opts SampleOptions) ([][]int32, GenerateStats) {
	t.Helper()
	stats := GenerateStats{Samples: n}
	g := &generation{ctx: context.Background(), m: m, opts: opts, stats: &stats, ctxLen: opts.Context}
	if g.ctxLen == 0 {
		g.ctxLen = m.maxT
	}
	g.window = min(len(prompt), g.ctxLen)
	for i := range n {
		g.seqs = append(g.seqs, slices.Clone(prompt))
		g.rngs = append(g.rngs, rand.New(rand.NewPCG(opts.Seed, 0x5a5a5a5a+uint64(i))))
	}
	V := m.Config.VocabSize
	g.logits, g.probs, g.order = make([]float32, V), make([]float64, V), make([]int, V)
	kc, err := m.NewKVCache(n, g.ctxLen)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cached(kc); err != nil {
		t.Fatal(err)
	}
	return g.seqs, stats
}
