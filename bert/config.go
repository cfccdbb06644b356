// Package bert is the BERT encoder trained by masked-language modelling (MLM): its configuration,
// its parameters in one flat buffer with a documented order, the forward and backward passes
// written as a sequence of backend ops (bidirectional attention, post-LN blocks, the MLM head),
// and the masking of a batch (mask.go). It never imports a backend.
package bert

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpt2go/gpt2go/gpt"
)

// Config describes a BERT encoder. The zero values of the options give the original BERT's
// architecture: post-LN blocks, exact-erf GELU, learned position embeddings. Every LayerNorm
// uses GPT-2's epsilon, 1e-5 (the backends' one value), not the original BERT's 1e-12, so the
// same weights give slightly different outputs here and in Hugging Face's BertForMaskedLM.
type Config struct {
	BlockSize       int `json:"block_size"`        // maxT: longest sequence, rows of wpe
	VocabSize       int `json:"vocab_size"`        // V: real vocabulary size (special tokens included)
	PaddedVocabSize int `json:"padded_vocab_size"` // Vp >= V: rows of wte; padded logits take no part in the loss
	NumLayers       int `json:"n_layer"`           // L
	NumHeads        int `json:"n_head"`            // NH
	Channels        int `json:"n_embd"`            // C; the MLP is 4C wide as in every BERT size
	// TypeVocabSize is the number of token types (segments, BERT's sentence A/B): 2 in BERT, 0 for
	// no token-type embedding at all.
	TypeVocabSize int `json:"type_vocab_size"`
	// PreLN puts each block's LayerNorms before its attention and MLP, as GPT-2 does, with a final
	// LayerNorm after the last block; the default is BERT's post-LN (LayerNorm after each residual
	// add, no final LayerNorm).
	PreLN bool `json:"pre_ln,omitempty"`
	// TanhGELU uses GELU's tanh approximation (GPT-2's) instead of BERT's exact erf form.
	TanhGELU         bool `json:"gelu_tanh,omitempty"`
	NoPositionalEmbs bool `json:"no_pos_emb,omitempty"`
}

// presets are the BERT sizes of Google's release (Turc et al. 2019 for the small ones), with
// bert-base-uncased's WordPiece vocabulary (30522, padded to a multiple of 64) and 512 positions.
// A trainer replaces the vocabulary with its data's.
var presets = map[string]Config{
	"bert-tiny":  {NumLayers: 2, Channels: 128, NumHeads: 2},
	"bert-mini":  {NumLayers: 4, Channels: 256, NumHeads: 4},
	"bert-small": {NumLayers: 4, Channels: 512, NumHeads: 8},
	"bert-base":  {NumLayers: 12, Channels: 768, NumHeads: 12},
}

// Preset returns the configuration of a named BERT size.
func Preset(name string) (Config, error) {
	c, ok := presets[name]
	if !ok {
		names := make([]string, 0, len(presets))
		for n := range presets {
			names = append(names, n)
		}
		sort.Strings(names)
		return Config{}, fmt.Errorf("unknown model %q; choose one of %s or give --n-layer/--n-head/--n-embd", name, strings.Join(names, ", "))
	}
	c.BlockSize, c.VocabSize, c.PaddedVocabSize, c.TypeVocabSize = 512, 30522, gpt.PadVocab(30522, 64), 2
	return c, nil
}

// Validate reports the first problem with c as a one-line error that names the fix: the checks
// of the sizes it shares with GPT-2 are gpt.Config's.
func (c Config) Validate() error {
	shared := gpt.Config{BlockSize: c.BlockSize, VocabSize: c.VocabSize, PaddedVocabSize: c.PaddedVocabSize,
		NumLayers: c.NumLayers, NumHeads: c.NumHeads, Channels: c.Channels}
	if err := shared.Validate(); err != nil {
		return err
	}
	if c.TypeVocabSize < 0 {
		return fmt.Errorf("type_vocab_size must be >= 0, got %d", c.TypeVocabSize)
	}
	return nil
}

// ParamSpecs lists the parameter tensors in their flat-buffer (and checkpoint) order, layer
// tensors stacked on a first dimension L, Linear weights (out, in):
//
//	wte (Vp,C)  wpe (maxT,C)  [wtype (TT,C)]  embedding: token, position, [token type]
//	embedlnw (C)  embedlnb (C)                 the embedding LayerNorm
//	qkvw (L,3C,C) qkvb (L,3C)                  attention: q | k | v rows, NH heads of HS channels each
//	attprojw (L,C,C) attprojb (L,C)
//	ln1w (L,C) ln1b (L,C)                      the attention sublayer's LayerNorm (after its add; before the attention with PreLN)
//	fcw (L,4C,C) fcb (L,4C) fcprojw (L,C,4C) fcprojb (L,C)
//	ln2w (L,C) ln2b (L,C)                      the MLP sublayer's LayerNorm
//	[lnfw (C) lnfb (C)]                        final LayerNorm, PreLN only
//	headw (C,C) headb (C)                      MLM head: dense, GELU,
//	headlnw (C) headlnb (C)                    LayerNorm, then the tied wte
//	outb (Vp)                                  plus this output bias
//
// wtype exists only when TypeVocabSize > 0. Decay marks the 2-D weights (AdamW's weight decay).
func (c Config) ParamSpecs() []gpt.ParamSpec {
	L, C, Vp, maxT := c.NumLayers, c.Channels, c.PaddedVocabSize, c.BlockSize
	specs := []gpt.ParamSpec{
		{Name: "wte", Shape: []int{Vp, C}, Decay: true},
		{Name: "wpe", Shape: []int{maxT, C}, Decay: true},
	}
	if c.TypeVocabSize > 0 {
		specs = append(specs, gpt.ParamSpec{Name: "wtype", Shape: []int{c.TypeVocabSize, C}, Decay: true})
	}
	specs = append(specs,
		gpt.ParamSpec{Name: "embedlnw", Shape: []int{C}},
		gpt.ParamSpec{Name: "embedlnb", Shape: []int{C}},
		gpt.ParamSpec{Name: "qkvw", Shape: []int{L, 3 * C, C}, Decay: true, PerLayer: true},
		gpt.ParamSpec{Name: "qkvb", Shape: []int{L, 3 * C}, PerLayer: true},
		gpt.ParamSpec{Name: "attprojw", Shape: []int{L, C, C}, Decay: true, PerLayer: true},
		gpt.ParamSpec{Name: "attprojb", Shape: []int{L, C}, PerLayer: true},
		gpt.ParamSpec{Name: "ln1w", Shape: []int{L, C}, PerLayer: true},
		gpt.ParamSpec{Name: "ln1b", Shape: []int{L, C}, PerLayer: true},
		gpt.ParamSpec{Name: "fcw", Shape: []int{L, 4 * C, C}, Decay: true, PerLayer: true},
		gpt.ParamSpec{Name: "fcb", Shape: []int{L, 4 * C}, PerLayer: true},
		gpt.ParamSpec{Name: "fcprojw", Shape: []int{L, C, 4 * C}, Decay: true, PerLayer: true},
		gpt.ParamSpec{Name: "fcprojb", Shape: []int{L, C}, PerLayer: true},
		gpt.ParamSpec{Name: "ln2w", Shape: []int{L, C}, PerLayer: true},
		gpt.ParamSpec{Name: "ln2b", Shape: []int{L, C}, PerLayer: true},
	)
	if c.PreLN {
		specs = append(specs,
			gpt.ParamSpec{Name: "lnfw", Shape: []int{C}},
			gpt.ParamSpec{Name: "lnfb", Shape: []int{C}})
	}
	return append(specs,
		gpt.ParamSpec{Name: "headw", Shape: []int{C, C}, Decay: true},
		gpt.ParamSpec{Name: "headb", Shape: []int{C}},
		gpt.ParamSpec{Name: "headlnw", Shape: []int{C}},
		gpt.ParamSpec{Name: "headlnb", Shape: []int{C}},
		gpt.ParamSpec{Name: "outb", Shape: []int{Vp}},
	)
}

// NumParams is the length of the flat parameter buffer (padded vocabulary rows included).
func (c Config) NumParams() int {
	n := 0
	for _, p := range c.ParamSpecs() {
		n += p.Size()
	}
	return n
}

// FlopsPerToken estimates training FLOPs per token (forward + backward) as gpt.Config does: 6 per
// non-embedding parameter plus the attention matmuls over all T keys (bidirectional), plus the
// MLM head's dense and vocabulary matmuls at the fraction maskRate of the tokens that reach it.
func (c Config) FlopsPerToken(seqLen int, maskRate float64) float64 {
	L, C, Vp := float64(c.NumLayers), float64(c.Channels), float64(c.PaddedVocabSize)
	blocks := L * (12*C*C + 13*C)
	head := C*C + Vp*C
	return 6*blocks + 12*L*C*float64(seqLen) + 6*head*maskRate
}
