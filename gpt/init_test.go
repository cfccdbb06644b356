package gpt_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

// InitGPT2's statistics, tensor by tensor and layer by layer: N(0, 0.02) weights, the two
// residual projections N(0, 0.02/sqrt(2L)), zero biases, unit LayerNorm weights, and padded
// vocabulary rows of wte exactly 0. Every other test that uses InitGPT2 compares two runs
// initialised the same way, so a wrong std (an unscaled residual projection) or random padded
// rows showed nowhere. Each checked slice holds at least 4096 values, where the rms of a
// Gaussian sample is within 1.1% (one standard deviation) of its std: 5% is 4.5 of those.
func TestInitGPT2Statistics(t *testing.T) {
	const L = 4
	cfg := gpt.Config{BlockSize: 128, VocabSize: 250, PaddedVocabSize: 256, NumLayers: L, NumHeads: 4, Channels: 64}
	be := cpu.New(1)
	model, err := gpt.New(be, cfg, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	model.InitGPT2(7)
	params := download(be, model.Params)
	residual := 0.02 / math.Sqrt(2*L)
	std := map[string]float64{"wte": 0.02, "wpe": 0.02, "qkvw": 0.02, "fcw": 0.02, "attprojw": residual, "fcprojw": residual}
	ones := map[string]bool{"ln1w": true, "ln2w": true, "lnfw": true}
	for i, s := range model.Specs() {
		x := params[model.Offsets()[i] : model.Offsets()[i]+s.Size()]
		if s.Name == "wte" {
			real, pad := x[:cfg.VocabSize*cfg.Channels], x[cfg.VocabSize*cfg.Channels:]
			if j := slices.IndexFunc(pad, func(v float32) bool { return v != 0 }); j >= 0 {
				t.Errorf("wte: padded row %d col %d = %g, want 0", cfg.VocabSize+j/cfg.Channels, j%cfg.Channels, pad[j])
			}
			x = real
		}
		parts := [][]float32{x}
		if s.PerLayer {
			parts = nil
			for l := range L {
				parts = append(parts, x[l*len(x)/L:(l+1)*len(x)/L])
			}
		}
		for p, part := range parts {
			name := s.Name
			if s.PerLayer {
				name = fmt.Sprintf("%s[layer %d]", s.Name, p)
			}
			sigma, random := std[s.Name]
			if !random {
				want := float32(0)
				if ones[s.Name] {
					want = 1
				}
				if j := slices.IndexFunc(part, func(v float32) bool { return v != want }); j >= 0 {
					t.Errorf("%s[%d] = %g, want %g", name, j, part[j], want)
				}
				continue
			}
			if len(part) < 4096 {
				t.Fatalf("%s: %d values, too few for the 5%% bound", name, len(part))
			}
			var sum, sq float64
			for _, v := range part {
				sum += float64(v)
				sq += float64(v) * float64(v)
			}
			n := float64(len(part))
			mean, rms := sum/n, math.Sqrt(sq/n)
			if math.Abs(rms-sigma) > 0.05*sigma {
				t.Errorf("%s: rms %.5f, want %.5f within 5%%", name, rms, sigma)
			}
			if math.Abs(mean) > 5*sigma/math.Sqrt(n) {
				t.Errorf("%s: mean %.3g, want |mean| < %.3g", name, mean, 5*sigma/math.Sqrt(n))
			}
		}
	}
}
