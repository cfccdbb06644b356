package gpt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// SampleOptions control autoregressive generation.
type SampleOptions struct {
	Tokens      int     // how many new tokens to generate
	Temperature float64 // 0 means greedy (argmax)
	TopK        int     // keep only the k most likely tokens; 0 keeps all
	Seed        uint64
}

// Generate extends prompt (at least one token) by opts.Tokens tokens, calling emit for each new
// token as soon as it is chosen. The model sees at most its planned sequence length of context.
func (m *Model) Generate(prompt []int32, opts SampleOptions, emit func(tok int32)) ([]int32, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	if opts.Temperature < 0 {
		return nil, fmt.Errorf("temperature must be >= 0, got %g", opts.Temperature)
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5a5a5a5a))
	V := m.Config.VocabSize
	logits := make([]float32, V)
	probs := make([]float64, V)
	order := make([]int, V)
	seq := append([]int32(nil), prompt...)
	for range opts.Tokens {
		window := seq[max(0, len(seq)-m.maxT):]
		T := len(window)
		if _, err := m.Forward(window, nil, 1, T); err != nil {
			return seq, err
		}
		m.LogitsRow(logits, 0, T-1)
		tok := pick(logits, probs, order, opts, rng)
		seq = append(seq, int32(tok))
		if emit != nil {
			emit(int32(tok))
		}
	}
	return seq, nil
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
	for i := range order {
		order[i] = i
	}
	cands := order
	if opts.TopK > 0 && opts.TopK < len(logits) {
		sort.Slice(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
		cands = order[:opts.TopK]
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
