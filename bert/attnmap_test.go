package bert

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
)

// The encoder's attention maps are bidirectional: every row sums to 1 over all T keys, queries
// attend to later keys too, and the probabilities applied to the values give the attention op's
// output of the same forward pass, in every layer.
func TestAttentionMapBidirectional(t *testing.T) {
	cfg := Config{BlockSize: 16, VocabSize: 23, PaddedVocabSize: 23, NumLayers: 2, NumHeads: 3, Channels: 12, TypeVocabSize: 2}
	be := cpu.New(0)
	m, err := New(be, cfg, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(7)
	tokens := []int32{1, 5, 9, 2, 2, 7, 13, 4, 0, 22, 3}
	T, C := len(tokens), cfg.Channels
	HS := C / cfg.NumHeads
	for layer := range cfg.NumLayers {
		got, err := m.Attention(tokens, layer)
		if err != nil {
			t.Fatal(err)
		}
		qkv, atty := make([]float32, T*3*C), make([]float32, T*C)
		be.Download(qkv, be.View(m.a.qkv[layer], 0, T*3*C))
		be.Download(atty, be.View(m.a.atty[layer], 0, T*C))
		var later float64
		for h := range cfg.NumHeads {
			for q := range T {
				var sum float64
				for k := range T {
					sum += got.At(h, q, k)
					if k > q {
						later += got.At(h, q, k)
					}
				}
				if math.Abs(sum-1) > 1e-9 {
					t.Fatalf("layer %d head %d row %d sums to %v", layer, h, q, sum)
				}
				for i := range HS {
					var y float64
					for k := range T {
						y += got.At(h, q, k) * float64(qkv[k*3*C+2*C+h*HS+i])
					}
					if op := float64(atty[q*C+h*HS+i]); math.Abs(y-op) > 1e-5 {
						t.Fatalf("layer %d head %d query %d channel %d: probs x values %.7f, attention op %.7f", layer, h, q, i, y, op)
					}
				}
			}
		}
		if later < 1 {
			t.Fatalf("layer %d: only %g of the attention goes to later keys; the map looks causal", layer, later)
		}
	}
	if _, err := m.Attention(tokens, 2); err == nil {
		t.Fatal("layer 2 of 2 should be an error")
	}
}
