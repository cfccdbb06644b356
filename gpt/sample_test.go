package gpt

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

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

// drawFrequencies draws n tokens from logits with pick and returns how often each came.
func drawFrequencies(logits []float32, opts SampleOptions, n int) []float64 {
	V := len(logits)
	probs, order, freq := make([]float64, V), make([]int, V), make([]float64, V)
	rng := rand.New(rand.NewPCG(11, 12))
	for range n {
		freq[pick(logits, probs, order, opts, rng)]++
	}
	for i := range freq {
		freq[i] /= float64(n)
	}
	return freq
}

// softmaxOf is softmax(logits/T) over the indices in keep, zero elsewhere.
func softmaxOf(logits []float32, T float64, keep []int) []float64 {
	p := make([]float64, len(logits))
	var sum float64
	for _, i := range keep {
		p[i] = math.Exp(float64(logits[i]) / T)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// sameDistribution fails t unless every frequency of n draws is within 4 standard errors of
// want (1e-3 more, for the rounding of tiny probabilities): for n = 20000 at most 0.014 off.
func sameDistribution(t *testing.T, label string, freq, want []float64, n int) {
	t.Helper()
	for i := range want {
		if tol := 4*math.Sqrt(want[i]*(1-want[i])/float64(n)) + 1e-3; math.Abs(freq[i]-want[i]) > tol {
			t.Errorf("%s: token %d drawn %.4f of the time, want %.4f (within %.4f)\nfrequencies %.4f\nwant        %.4f", label, i, freq[i], want[i], tol, freq, want)
			return
		}
	}
}

// pick draws from softmax(logits/T): at T=0.5 and T=2 the frequencies of 20000 draws (fixed seed)
// match it, where the distributions at T and at 1/T (temperature multiplied instead of divided)
// are far apart.
func TestPickTemperature(t *testing.T) {
	logits := []float32{2, 1, 0.5, 0, -1, 1.5}
	all := []int{0, 1, 2, 3, 4, 5}
	const n = 20000
	for _, T := range []float64{0.5, 1, 2} {
		freq := drawFrequencies(logits, SampleOptions{Temperature: T}, n)
		sameDistribution(t, fmt.Sprintf("T=%g", T), freq, softmaxOf(logits, T, all), n)
	}
}

// With top-k, pick draws only the k most likely tokens, each as often as softmax(logits/T) over
// those k gives, even at a temperature that would make the others likely.
func TestPickTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	logits := make([]float32, 40)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	byLogit := make([]int, len(logits))
	for i := range byLogit {
		byLogit[i] = i
	}
	slices.SortFunc(byLogit, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
	const n = 20000
	for _, k := range []int{1, 3, 7} {
		for _, T := range []float64{1, 5} {
			freq := drawFrequencies(logits, SampleOptions{Temperature: T, TopK: k}, n)
			for i, f := range freq {
				if f > 0 && !slices.Contains(byLogit[:k], i) {
					t.Fatalf("k=%d T=%g: drew token %d (rank %d) %.4f of the time, want only the %d best %v", k, T, i, slices.Index(byLogit, i)+1, f, k, byLogit[:k])
				}
			}
			sameDistribution(t, fmt.Sprintf("k=%d T=%g", k, T), freq, softmaxOf(logits, T, byLogit[:k]), n)
		}
	}
}

// The speeds that gpt2go sample prints: the prompt's tokens of every sample over the prompt's
// time, and the new tokens after the first of every sample over the rest.
func TestGenerateStatsRates(t *testing.T) {
	s := GenerateStats{Samples: 3, PromptTokens: 5, NewTokens: 11, Prompt: 500 * time.Millisecond, Gen: 2 * time.Second}
	if got := s.PromptTokPerSec(); got != 30 { // 3*5 / 0.5
		t.Errorf("PromptTokPerSec %v, want 30", got)
	}
	if got := s.GenTokPerSec(); got != 15 { // 3*10 / 2
		t.Errorf("GenTokPerSec %v, want 15", got)
	}
	s.NewTokens = 0
	if got := s.GenTokPerSec(); got != 0 {
		t.Errorf("GenTokPerSec with no tokens %v, want 0", got)
	}
}

// The cache length does not overflow for a --tokens near MaxInt (generation until Ctrl-C).
func TestCacheLenHugeTokens(t *testing.T) {
	for _, tokens := range []int{math.MaxInt, math.MaxInt - 1, 1 << 62} {
		g := &generation{ctxLen: 64, window: 3, opts: SampleOptions{Tokens: tokens}}
		if got := g.cacheLen(); got != 64 {
			t.Errorf("--tokens %d: cache of %d positions, want the context's 64", tokens, got)
		}
	}
}
