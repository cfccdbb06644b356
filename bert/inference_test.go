package bert_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/gpt"
)

// NewInference's encoder (no gradients, moments or backward scratch) gives the bits of New's:
// the MLM loss, every logit row and every layer's attention map, in fp32 and bf16; it refuses
// backward.
func TestInferenceModelMatchesNew(t *testing.T) {
	be := cpu.New(0)
	cfg := bert.Config{BlockSize: 16, VocabSize: 23, PaddedVocabSize: 32, NumLayers: 2, NumHeads: 3, Channels: 12, TypeVocabSize: 2}
	for _, prec := range []gpt.Precision{{}, {Compute: backend.BF16}} {
		m, err := bert.NewWithPrecision(be, cfg, 2, 16, prec)
		if err != nil {
			t.Fatal(err)
		}
		m.Init(7)
		inf, err := bert.NewInference(be, cfg, 2, 16, prec)
		if err != nil {
			t.Fatal(err)
		}
		params := make([]float32, m.Params.Len())
		be.Download(params, m.Params)
		if err := inf.SetParams(params); err != nil {
			t.Fatal(err)
		}
		tokens := []int32{1, 5, 9, 2, 2, 7, 13, 4, 0, 22, 3}
		targets := []int32{-1, 6, -1, -1, 3, -1, -1, -1, 8, -1, -1}
		want, err := m.Forward(tokens, targets, 1, len(tokens))
		if err != nil {
			t.Fatal(err)
		}
		got, err := inf.Forward(tokens, targets, 1, len(tokens))
		if err != nil {
			t.Fatal(err)
		}
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("%v: MLM loss %v, New's %v", prec, got, want)
		}
		if err := inf.Backward(1); err == nil || !strings.Contains(err.Error(), "inference only") {
			t.Errorf("%v: backward on an inference model: %v, want a refusal", prec, err)
		}
		for _, mm := range []*bert.Model{m, inf} {
			if _, err := mm.Forward(tokens, nil, 1, len(tokens)); err != nil {
				t.Fatal(err)
			}
		}
		wantRow, gotRow := make([]float32, cfg.PaddedVocabSize), make([]float32, cfg.PaddedVocabSize)
		for pos := range tokens {
			if err := m.LogitsRow(wantRow, 0, pos); err != nil {
				t.Fatal(err)
			}
			if err := inf.LogitsRow(gotRow, 0, pos); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(gotRow, wantRow) {
				t.Fatalf("%v: logits at position %d differ", prec, pos)
			}
		}
		for layer := range cfg.NumLayers {
			w, err := m.Attention(tokens, layer)
			if err != nil {
				t.Fatal(err)
			}
			g, err := inf.Attention(tokens, layer)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(g.Probs, w.Probs) {
				t.Errorf("%v: layer %d's attention map differs", prec, layer)
			}
		}
	}
}
