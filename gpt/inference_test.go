package gpt_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

// inferenceTwin builds NewInference's model with m's parameters and plan.
func inferenceTwin(t *testing.T, m *gpt.Model, B, T int) *gpt.Model {
	t.Helper()
	inf, err := gpt.NewInference(m.Backend(), m.Config, B, T, m.Precision())
	if err != nil {
		t.Fatal(err)
	}
	params := make([]float32, m.Params.Len())
	m.Backend().Download(params, m.Params)
	if err := inf.SetParams(params); err != nil {
		t.Fatal(err)
	}
	if !inf.Frozen() || m.Frozen() {
		t.Fatalf("Frozen: inference model %v, trainable model %v", inf.Frozen(), m.Frozen())
	}
	return inf
}

// TestInferenceModelMatchesNew: a model whose layers share one layer's activation buffers gives
// the bits of the trainable model (losses, every logit, every layer's attention map, greedy
// cached generation, int8), in fp32 and bf16, at the planned shape and a smaller one; and it
// refuses backward.
func TestInferenceModelMatchesNew(t *testing.T) {
	be := cpu.New(0)
	cfg := kvConfig
	for _, prec := range []gpt.Precision{{}, {Compute: backend.BF16}} {
		const B, T = 3, 24
		m := randomModel(t, be, cfg, B, T, prec)
		inf := inferenceTwin(t, m, B, T)
		sameForward(t, prec.String(), m, inf, rand.New(rand.NewPCG(5, 6)), [2]int{B, T}, [2]int{2, 7})
		tokens := []int32{3, 17, 9, 42, 0, 42, 7, 10, 17}
		sameMapsAndGreedy(t, prec.String(), m, inf, tokens, T, layers(cfg)...)
		if err := inf.Backward(1); err == nil || !strings.Contains(err.Error(), "inference only") {
			t.Errorf("%v: backward on an inference model: %v, want a refusal", prec, err)
		}
		if err := inf.BackwardAccumulate(1); err == nil || !strings.Contains(err.Error(), "inference only") {
			t.Errorf("%v: BackwardAccumulate on an inference model: %v, want a refusal", prec, err)
		}
		for _, mm := range []*gpt.Model{m, inf} {
			if _, err := mm.QuantizeInt8(); err != nil {
				t.Fatal(err)
			}
		}
		want8, err := m.Forward(tokens, tokens, 1, len(tokens))
		if err != nil {
			t.Fatal(err)
		}
		got8, err := inf.Forward(tokens, tokens, 1, len(tokens))
		if err != nil {
			t.Fatal(err)
		}
		if math.Float32bits(got8) != math.Float32bits(want8) {
			t.Errorf("%v int8: loss %v, the trainable model's %v", prec, got8, want8)
		}
	}
}

// sameForward runs want and got on the same random batch of each shape (B,T) and checks that
// the losses and every logit row are the same bits.
func sameForward(t *testing.T, label string, want, got *gpt.Model, rng *rand.Rand, shapes ...[2]int) {
	t.Helper()
	cfg := want.Config
	for _, bt := range shapes {
		b, tt := bt[0], bt[1]
		inputs, targets := make([]int32, b*tt), make([]int32, b*tt)
		for i := range inputs {
			inputs[i], targets[i] = rng.Int32N(int32(cfg.VocabSize)), rng.Int32N(int32(cfg.VocabSize))
		}
		wantLoss, err := want.Forward(inputs, targets, b, tt)
		if err != nil {
			t.Fatal(err)
		}
		gotLoss, err := got.Forward(inputs, targets, b, tt)
		if err != nil {
			t.Fatal(err)
		}
		if math.Float32bits(gotLoss) != math.Float32bits(wantLoss) {
			t.Errorf("%s (%d,%d): loss %v, want %v", label, b, tt, gotLoss, wantLoss)
		}
		wantRow, gotRow := make([]float32, cfg.PaddedVocabSize), make([]float32, cfg.PaddedVocabSize)
		for i := range b * tt {
			want.LogitsRow(wantRow, i/tt, i%tt)
			got.LogitsRow(gotRow, i/tt, i%tt)
			if !slices.Equal(gotRow, wantRow) {
				t.Fatalf("%s (%d,%d): logits of row %d differ", label, b, tt, i)
			}
		}
	}
}

// sameMapsAndGreedy checks that want and got give the same attention maps of tokens at the given
// layers and the same 12 greedy tokens after tokens[:3] (the KV-cached path), context T.
func sameMapsAndGreedy(t *testing.T, label string, want, got *gpt.Model, tokens []int32, T int, layers ...int) {
	t.Helper()
	for _, layer := range layers {
		wantMap, err := want.Attention(tokens, layer)
		if err != nil {
			t.Fatal(err)
		}
		gotMap, err := got.Attention(tokens, layer)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(gotMap.Probs, wantMap.Probs) {
			t.Errorf("%s: layer %d's attention map differs", label, layer)
		}
	}
	opts := gpt.SampleOptions{Tokens: 12, Temperature: 0, Seed: 1, Context: T}
	wantGen, err := want.Generate(tokens[:3], opts, func(int32) {})
	if err != nil {
		t.Fatal(err)
	}
	gotGen, err := got.Generate(tokens[:3], opts, func(int32) {})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gotGen, wantGen) {
		t.Errorf("%s: greedy generation %v, want %v", label, gotGen, wantGen)
	}
}

// layers lists every layer of cfg.
func layers(cfg gpt.Config) []int {
	out := make([]int, cfg.NumLayers)
	for l := range out {
		out[l] = l
	}
	return out
}

// chunked reads params in chunks of n values, as a checkpoint file is read.
func chunked(params []float32, n int) gpt.ParamsReader {
	return func(sink func(off int, chunk []float32) error) error {
		for off := 0; off < len(params); off += n {
			if err := sink(off, params[off:min(off+n, len(params))]); err != nil {
				return err
			}
		}
		return nil
	}
}

// SetParamsFrom with chunks that cut across tensors gives SetParams' model (fp32 and bf16, whose
// 16-bit copy is made once all are read); too few or too many values, chunks out of order and a
// reader's own error are refused.
func TestSetParamsFrom(t *testing.T) {
	be := cpu.New(0)
	cfg := kvConfig
	for _, prec := range []gpt.Precision{{}, {Compute: backend.BF16}} {
		m := randomModel(t, be, cfg, 2, 8, prec)
		params := make([]float32, m.Params.Len())
		be.Download(params, m.Params)
		inf, err := gpt.NewInference(be, cfg, 2, 8, prec)
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.SetParamsFrom(chunked(params, 1000)); err != nil {
			t.Fatal(err)
		}
		tokens := []int32{3, 17, 9, 42, 0, 42, 7, 10}
		want, err := m.Forward(tokens, tokens, 1, len(tokens))
		if err != nil {
			t.Fatal(err)
		}
		got, err := inf.Forward(tokens, tokens, 1, len(tokens))
		if err != nil {
			t.Fatal(err)
		}
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("%v: loss %v after SetParamsFrom, %v after SetParams", prec, got, want)
		}
	}
	m, err := gpt.NewInference(be, cfg, 1, 8, gpt.Precision{})
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.NumParams()
	for _, c := range []struct {
		name string
		read gpt.ParamsReader
		want string
	}{
		{"short", chunked(make([]float32, n-1), 100), "count mismatch"},
		{"long", chunked(make([]float32, n+1), 100), "count mismatch"},
		{"out of order", func(sink func(int, []float32) error) error { return sink(5, make([]float32, n-5)) }, "out of order"},
		{"reader error", func(func(int, []float32) error) error { return fmt.Errorf("disk on fire") }, "disk on fire"},
	} {
		if err := m.SetParamsFrom(c.read); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// A LossOnly model (the LM head and loss 128 rows at a time) gives NewInference's losses, bit for
// bit, over batches of one chunk and of two (the second partial), in fp32, bf16 and int8; it
// refuses a forward without targets and plans (and allocates) 128 rows of logits.
func TestLossOnly(t *testing.T) {
	be := cpu.New(0)
	cfg := kvConfig
	const B, T = 7, 24 // 168 rows
	for _, prec := range []gpt.Precision{{}, {Compute: backend.BF16}} {
		m := randomModel(t, be, cfg, B, T, prec)
		params := make([]float32, m.Params.Len())
		be.Download(params, m.Params)
		full := inferenceTwin(t, m, B, T)
		lossOnly, err := gpt.NewInference(be, cfg, B, T, prec, gpt.LossOnly)
		if err != nil {
			t.Fatal(err)
		}
		if err := lossOnly.SetParams(params); err != nil {
			t.Fatal(err)
		}
		full8, _, err := gpt.NewInferenceInt8(be, cfg, B, T, prec, gpt.HostParams(params))
		if err != nil {
			t.Fatal(err)
		}
		lossOnly8, _, err := gpt.NewInferenceInt8(be, cfg, B, T, prec, gpt.HostParams(params), gpt.LossOnly)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for _, bt := range [][2]int{{B, T}, {2, 24}, {7, 19}} {
			b, tt := bt[0], bt[1]
			inputs, targets := make([]int32, b*tt), make([]int32, b*tt)
			for i := range inputs {
				inputs[i], targets[i] = rng.Int32N(int32(cfg.VocabSize)), rng.Int32N(int32(cfg.VocabSize))
			}
			for _, pair := range [][2]*gpt.Model{{full, lossOnly}, {full8, lossOnly8}} {
				want, err := pair[0].Forward(inputs, targets, b, tt)
				if err != nil {
					t.Fatal(err)
				}
				got, err := pair[1].Forward(inputs, targets, b, tt)
				if err != nil {
					t.Fatal(err)
				}
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Errorf("%v (%d,%d) int8 %v: loss-only loss %v, want %v", prec, b, tt, pair[0].IsInt8(), got, want)
				}
			}
		}
		if _, err := lossOnly.Forward(make([]int32, T), nil, 1, T); err == nil || !strings.Contains(err.Error(), "loss-only") {
			t.Errorf("%v: a forward without targets: %v, want a refusal", prec, err)
		}
	}
	for _, bt := range [][2]int{{1, 1}, {7, 24}} {
		c := &counting{Backend: cpu.New(1)}
		if _, err := gpt.NewInference(c, cfg, bt[0], bt[1], gpt.Precision{}, gpt.LossOnly); err != nil {
			t.Fatal(err)
		}
		plan := cfg.InferenceMemoryPlan(bt[0], bt[1], gpt.Precision{}, gpt.LossOnly)
		if got := gpt.PlanBytes(plan); got != c.bytes || gpt.PlanBytes(c.checked) != got {
			t.Errorf("B=%d T=%d: plan says %d bytes, NewInference(LossOnly) allocated %d and checked %d", bt[0], bt[1], got, c.bytes, gpt.PlanBytes(c.checked))
		}
	}
	gpt2, err := gpt.Preset("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	lo, inf := gpt.PlanBytes(gpt2.InferenceMemoryPlan(8, 1024, gpt.Precision{}, gpt.LossOnly)), gpt.PlanBytes(gpt2.InferenceMemoryPlan(8, 1024, gpt.Precision{}))
	t.Logf("GPT-2 124M at B=8 T=1024: loss-only %.2f GB, inference %.2f GB", float64(lo)/1e9, float64(inf)/1e9)
}
