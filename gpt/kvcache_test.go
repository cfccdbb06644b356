package gpt_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

// kvConfig is a small model whose head size (16) takes the CPU's assembly dot products, with a
// padded vocabulary.
var kvConfig = gpt.Config{BlockSize: 24, VocabSize: 50, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 4, Channels: 64}

// randomModel returns a model on be with parameters large enough that every layer moves the
// logits (N(0, 0.1) weights and biases, LayerNorm weights 1 + N(0, 0.1)).
func randomModel(t testing.TB, be backend.Backend, cfg gpt.Config, B, T int, prec gpt.Precision) *gpt.Model {
	t.Helper()
	m, err := gpt.NewWithPrecision(be, cfg, B, T, prec)
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

// TestKVCacheMatchesForward on the CPU; gpt/kvcache_cuda_test.go runs it on a GPU.
func TestKVCacheMatchesForward(t *testing.T) { testKVCacheMatchesForward(t, cpu.New(0)) }

// testKVCacheMatchesForward feeds two different sequences through the cache, one position at a
// time and in uneven chunks, and compares the logits after every Append with the uncached
// forward's at that position, with and without position embeddings: in fp32 to float32 rounding
// (1e-5 of the largest logit); in bf16, where the backend has it, to bf16 rounding (each op
// rounds its outputs, and the few-row matmuls sum in another order than the gemm, so a value
// may round the other way).
func testKVCacheMatchesForward(t *testing.T, be backend.Backend) {
	precisions := []gpt.Precision{{}}
	if be.CheckDType(backend.BF16) == nil {
		precisions = append(precisions, gpt.Precision{Compute: backend.BF16})
	}
	for _, c := range []struct {
		noPos bool
		prec  gpt.Precision
	}{{false, precisions[0]}, {true, precisions[0]}, {false, precisions[len(precisions)-1]}} {
		noPos, tol := c.noPos, 1e-5
		if c.prec.Mixed() {
			tol = 5e-3
		}
		cfg := kvConfig
		cfg.NoPositionalEmbs = noPos
		const B = 2
		T := cfg.BlockSize
		m := randomModel(t, be, cfg, B, T, c.prec)
		rng := rand.New(rand.NewPCG(5, 6))
		tokens := make([]int32, B*T)
		for i := range tokens {
			tokens[i] = int32(rng.IntN(cfg.VocabSize))
		}
		if _, err := m.Forward(tokens, nil, B, T); err != nil {
			t.Fatal(err)
		}
		want := make([][]float32, B*T) // want[b*T+t]: the uncached logits of sequence b at position t
		var scale float64
		for b := range B {
			for pos := range T {
				row := make([]float32, cfg.VocabSize)
				m.LogitsRow(row, b, pos)
				want[b*T+pos] = row
				for _, x := range row {
					scale = max(scale, math.Abs(float64(x)))
				}
			}
		}
		kc, err := m.NewKVCache(B, T)
		if err != nil {
			t.Fatal(err)
		}
		for name, schedule := range map[string][]int{"one at a time": ones(T), "prompt then ones": append([]int{7}, ones(T-7)...), "chunks": {3, 5, 1, 8, 2, 5}} {
			kc.Truncate(0)
			var worst float64
			for _, n := range schedule {
				chunk := make([]int32, 0, B*n)
				for b := range B {
					chunk = append(chunk, tokens[b*T+kc.Len():b*T+kc.Len()+n]...)
				}
				if err := kc.Append(chunk, n); err != nil {
					t.Fatal(err)
				}
				for b := range B {
					got := make([]float32, cfg.VocabSize)
					kc.Logits(got, b)
					for i, g := range got {
						d := math.Abs(float64(g) - float64(want[b*T+kc.Len()-1][i]))
						worst = max(worst, d)
						if !(d <= tol*scale) {
							t.Fatalf("%v noPos=%v %s: sequence %d position %d logit %d: cached %g, uncached %g", c.prec, noPos, name, b, kc.Len()-1, i, g, want[b*T+kc.Len()-1][i])
						}
					}
				}
			}
			if kc.Len() != T {
				t.Fatalf("%s: cache holds %d positions, want %d", name, kc.Len(), T)
			}
			t.Logf("%v noPos=%v %s: largest logit difference %.2g (logits up to %.2g)", c.prec, noPos, name, worst, scale)
		}
		if err := kc.Append(tokens[:B], 1); err == nil {
			t.Error("appending to a full cache did not fail")
		}
		kc.Truncate(0)
		if err := kc.Append([]int32{0, int32(cfg.VocabSize)}, 1); err == nil {
			t.Error("a token outside the vocabulary did not fail")
		}
	}
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// patternText is what trainedModel learns: a short cycle of character ids that greedy decoding
// can continue.
var patternText = []byte("the cat sat on the mat. a dog ran to the log. ")

// trainedModel trains kvConfig's shape on patternText (characters as ids mod V) for a few dozen
// AdamW steps: enough that greedy decoding follows the text rather than noise.
func trainedModel(t *testing.T, be backend.Backend) *gpt.Model {
	t.Helper()
	const B = 4
	T := kvConfig.BlockSize
	m, err := gpt.New(be, kvConfig, B, T)
	if err != nil {
		t.Fatal(err)
	}
	m.InitGPT2(1)
	ids := func(i int) int32 { return int32(patternText[i%len(patternText)]) % int32(kvConfig.VocabSize) }
	inputs, targets := make([]int32, B*T), make([]int32, B*T)
	opt := gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	var first, last float32
	for step := range 150 {
		for b := range B {
			for i := range T {
				inputs[b*T+i], targets[b*T+i] = ids(step*7+b*11+i), ids(step*7+b*11+i+1)
			}
		}
		m.ZeroGrad()
		loss, err := m.Forward(inputs, targets, B, T)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(1); err != nil {
			t.Fatal(err)
		}
		m.Update(opt, 1e-2, step+1, 1)
		if step == 0 {
			first = loss
		}
		last = loss
	}
	if !(last < first/4) {
		t.Fatalf("training did not take: loss %.3f -> %.3f", first, last)
	}
	t.Logf("trained on the pattern: loss %.3f -> %.3f", first, last)
	return m
}

// A trained model gives the same greedy tokens with the cache as without, within the context;
// past it, the cached generation slides (once per half window, saying so once) and still gives
// exactly what the uncached forward gives on the windows the cache holds.
func TestGreedyCachedMatchesUncached(t *testing.T) {
	m := trainedModel(t, cpu.New(0))
	ctx := kvConfig.BlockSize
	prompt := []int32{'t' % 50, 'h' % 50, 'e' % 50, ' ' % 50}
	greedy := gpt.SampleOptions{Tokens: ctx - len(prompt), Temperature: 0}
	cached, err := m.Generate(prompt, greedy, nil)
	if err != nil {
		t.Fatal(err)
	}
	greedy.NoCache = true
	uncached, err := m.Generate(prompt, greedy, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cached, uncached) {
		t.Fatalf("greedy tokens differ:\ncached   %v\nuncached %v", cached, uncached)
	}
	t.Logf("greedy continuation: %v", cached[len(prompt):])
	if distinct(cached[len(prompt):]) < 5 {
		t.Fatalf("the trained model's greedy text %v is too repetitive to test anything", cached)
	}

	// Past the context: the reference runs the uncached forward on the window the cache holds,
	// which restarts from the last ctx/2 tokens whenever it would exceed ctx.
	const tokens = 70
	var notices bytes.Buffer
	long, stats, err := m.GenerateBatch(context.Background(), prompt, 1, gpt.SampleOptions{Tokens: tokens, Notices: &notices}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := slices.Clone(prompt)
	start, slides := 0, 0
	logits := make([]float32, kvConfig.VocabSize)
	for range tokens {
		if len(ref)-start > ctx {
			start, slides = len(ref)-ctx/2, slides+1
		}
		window := ref[start:]
		if _, err := m.Forward(window, nil, 1, len(window)); err != nil {
			t.Fatal(err)
		}
		m.LogitsRow(logits, 0, len(window)-1)
		ref = append(ref, int32(slices.Index(logits, slices.Max(logits))))
	}
	if !slices.Equal(long[0], ref) {
		t.Fatalf("greedy tokens past the context differ:\ncached    %v\nreference %v", long[0], ref)
	}
	if stats.Slides != slides || slides < 2 {
		t.Errorf("the cache slid %d times, the reference %d (want >= 2)", stats.Slides, slides)
	}
	if lines := strings.Count(notices.String(), "\n"); lines != 1 || !strings.Contains(notices.String(), "context full") {
		t.Errorf("want one notice line about the full context, got %q", notices.String())
	}
}

func distinct(s []int32) int {
	seen := map[int32]bool{}
	for _, x := range s {
		seen[x] = true
	}
	return len(seen)
}

// Samples of one batch each follow their own random stream: reproducible, different from each
// other, and all equal to the single greedy sequence when greedy.
func TestGenerateBatch(t *testing.T) {
	m := trainedModel(t, cpu.New(0))
	prompt := []int32{'a' % 50}
	run := func(opts gpt.SampleOptions) [][]int32 {
		t.Helper()
		var emitted [3][]int32
		seqs, stats, err := m.GenerateBatch(context.Background(), prompt, 3, opts, func(i int, tok int32) { emitted[i] = append(emitted[i], tok) })
		if err != nil {
			t.Fatal(err)
		}
		if stats.Samples != 3 || stats.NewTokens != opts.Tokens || stats.PromptTokens != 1 {
			t.Errorf("stats %+v", stats)
		}
		for i, s := range seqs {
			if !slices.Equal(s[1:], emitted[i]) {
				t.Errorf("sample %d: emitted %v, returned %v", i, emitted[i], s[1:])
			}
		}
		return seqs
	}
	hot := gpt.SampleOptions{Tokens: 40, Temperature: 1.5, Seed: 9}
	a, b := run(hot), run(hot)
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			t.Errorf("sample %d is not reproducible", i)
		}
	}
	if slices.Equal(a[0], a[1]) || slices.Equal(a[1], a[2]) {
		t.Errorf("samples share a random stream: %v", a)
	}
	greedy := run(gpt.SampleOptions{Tokens: 40})
	single, err := m.Generate(prompt, gpt.SampleOptions{Tokens: 40}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range greedy {
		if !slices.Equal(s, single) {
			t.Errorf("greedy sample %d %v differs from the single greedy sequence %v", i, s, single)
		}
	}
}

// Cancelling the context (Ctrl-C in gpt2go sample) stops a generation before its next token, with
// and without the cache, keeping what was emitted.
func TestGenerateBatchInterrupted(t *testing.T) {
	m := trainedModel(t, cpu.New(0))
	for _, noCache := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		emitted := 0
		seqs, _, err := m.GenerateBatch(ctx, []int32{1}, 1, gpt.SampleOptions{Tokens: 2000, NoCache: noCache}, func(int, int32) {
			if emitted++; emitted == 5 {
				cancel()
			}
		})
		if err == nil || !strings.Contains(err.Error(), "interrupted after 5 of 2000 tokens") || len(seqs[0]) != 6 {
			t.Errorf("no cache %v: cancelled after 5 tokens: %d tokens, err %v", noCache, len(seqs[0])-1, err)
		}
	}
}

// BenchmarkKVCacheDecode times one new token of GPT-2 124M (random weights) with the cache at an
// early and at a late position: the cost per token should barely grow with the position (only
// attention reads more cached keys; the weights, read once per token, dominate).
func BenchmarkKVCacheDecode(b *testing.B) {
	cfg, err := gpt.Preset("gpt2")
	if err != nil {
		b.Fatal(err)
	}
	m, err := gpt.New(cpu.New(0), cfg, 1, 1)
	if err != nil {
		b.Fatal(err)
	}
	m.InitGPT2(1)
	kc, err := m.NewKVCache(1, cfg.BlockSize)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int32, cfg.BlockSize-16)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(cfg.VocabSize))
	}
	logits := make([]float32, cfg.VocabSize)
	for _, pos := range []int{16, cfg.BlockSize - 16} {
		kc.Truncate(0)
		if err := kc.Append(prompt[:pos], pos); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("pos=%d", pos), func(b *testing.B) {
			for b.Loop() {
				kc.Truncate(pos)
				if err := kc.Append(prompt[:1], 1); err != nil {
					b.Fatal(err)
				}
				kc.Logits(logits, 0)
			}
			perToken := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(perToken*1000, "ms/token")
			b.ReportMetric(1/perToken, "tok/s")
		})
	}
}

// A cache too large for memory is refused by its plan, in one line, before anything is
// allocated (many samples at once filled the host and ended in Go's fatal out-of-memory).
func TestKVCacheTooLargeIsRefused(t *testing.T) {
	be := cpu.New(1)
	m := randomModel(t, be, kvConfig, 1, 1, gpt.Precision{})
	_, err := m.NewKVCache(1<<28, kvConfig.BlockSize) // 2*2*2^28*24*64 floats: 6 TiB
	if err == nil || !strings.Contains(err.Error(), "KV cache") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %v, want the memory plan's one-line refusal", err)
	}
}

// GenerateBatch refuses more samples than memory holds with the KV cache's one-line plan error
// before allocating anything per sample: it once made each sample's sequence (about a KB at 256
// tokens) and random stream first, so that gpt2go sample --num-samples 5000000 died of Go's
// fatal out-of-memory instead. n is twice what fits in memory at 2 KB of cache per sample
// (kvConfig at its fewest positions), for which the old code allocated about 100 bytes per
// sample, over 100 MB, before the refusal.
func TestGenerateBatchTooManySamplesIsRefused(t *testing.T) {
	be := cpu.New(1)
	m := randomModel(t, be, kvConfig, 1, 1, gpt.Precision{})
	budget, err := be.MemoryBudget()
	if err != nil {
		t.Fatal(err)
	}
	n := int(max(1<<20, 2*budget.Free/2048))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err = m.GenerateBatch(context.Background(), []int32{1}, n, gpt.SampleOptions{Tokens: 2}, nil)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "KV cache") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("%d samples: error %v, want the memory plan's one-line refusal", n, err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("refusing %d samples allocated %d bytes first, want under 1 MiB", n, got)
	}
}
