// Package gpt is the GPT-2 model: its configuration, its parameters in llm.c's flat layout, and the
// forward and backward passes written as a sequence of backend ops. It never imports a backend.
package gpt

import (
	"fmt"
	"sort"
	"strings"
)

// Config describes a GPT-2 decoder.
type Config struct {
	BlockSize        int  `json:"block_size"`        // maxT: longest sequence, rows of wpe
	VocabSize        int  `json:"vocab_size"`        // V: real vocabulary size
	PaddedVocabSize  int  `json:"padded_vocab_size"` // Vp >= V: rows of wte; padded logits are masked out of the loss
	NumLayers        int  `json:"n_layer"`           // L
	NumHeads         int  `json:"n_head"`            // NH
	Channels         int  `json:"n_embd"`            // C
	NoPositionalEmbs bool `json:"no_pos_emb,omitempty"`
}

// presets are the four released GPT-2 sizes (vocab padded to 50304 as llm.c does).
var presets = map[string]Config{
	"gpt2":        {BlockSize: 1024, VocabSize: 50257, PaddedVocabSize: 50304, NumLayers: 12, NumHeads: 12, Channels: 768},
	"gpt2-medium": {BlockSize: 1024, VocabSize: 50257, PaddedVocabSize: 50304, NumLayers: 24, NumHeads: 16, Channels: 1024},
	"gpt2-large":  {BlockSize: 1024, VocabSize: 50257, PaddedVocabSize: 50304, NumLayers: 36, NumHeads: 20, Channels: 1280},
	"gpt2-xl":     {BlockSize: 1024, VocabSize: 50257, PaddedVocabSize: 50304, NumLayers: 48, NumHeads: 25, Channels: 1600},
}

// Preset returns the configuration of a named GPT-2 size.
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
	return c, nil
}

// PadVocab rounds v up to a multiple of multiple (multiple <= 1 leaves v unchanged).
func PadVocab(v, multiple int) int {
	if multiple <= 1 {
		return v
	}
	return (v + multiple - 1) / multiple * multiple
}

// Validate reports the first problem with c as a one-line error that names the fix.
func (c Config) Validate() error {
	switch {
	case c.NumLayers < 1:
		return fmt.Errorf("n_layer must be >= 1, got %d", c.NumLayers)
	case c.NumHeads < 1:
		return fmt.Errorf("n_head must be >= 1, got %d", c.NumHeads)
	case c.Channels < 1:
		return fmt.Errorf("n_embd must be >= 1, got %d", c.Channels)
	case c.Channels%c.NumHeads != 0:
		return fmt.Errorf("n_embd %d is not divisible by n_head %d; choose n_embd a multiple of n_head", c.Channels, c.NumHeads)
	case c.BlockSize < 1:
		return fmt.Errorf("block_size must be >= 1, got %d", c.BlockSize)
	case c.VocabSize < 1:
		return fmt.Errorf("vocab_size must be >= 1, got %d", c.VocabSize)
	case c.PaddedVocabSize < c.VocabSize:
		return fmt.Errorf("padded vocab size %d is smaller than vocab size %d", c.PaddedVocabSize, c.VocabSize)
	case c.VocabSize > 1<<24: // a sanity bound; training data's uint16 ids need only be below it
		return fmt.Errorf("vocab_size %d is beyond any tokenizer's (max %d)", c.VocabSize, 1<<24)
	}
	return nil
}

// Bounds on the sizes of a model read from a file, far above any GPT-2's (GPT-2 XL: 48 layers,
// 1600 channels, 1024 positions), so that a corrupt or mistyped header is refused before its
// sizes are allocated or looped over.
const (
	maxFileLayers    = 1 << 10
	maxFileChannels  = 1 << 16
	maxFileBlockSize = 1 << 20
)

// Plausible reports a size of c beyond those bounds as a one-line error naming it.
func (c Config) Plausible() error {
	switch {
	case c.NumLayers > maxFileLayers:
		return fmt.Errorf("n_layer %d is implausible (at most %d)", c.NumLayers, maxFileLayers)
	case c.Channels > maxFileChannels:
		return fmt.Errorf("n_embd %d is implausible (at most %d)", c.Channels, maxFileChannels)
	case c.BlockSize > maxFileBlockSize:
		return fmt.Errorf("block_size %d is implausible (at most %d)", c.BlockSize, maxFileBlockSize)
	}
	return nil
}

// VocabFits says whether ids from a tokenizer (or data) of vocab of them are the model's own
// vocabulary, up to the padding a trainer may have added (nanoGPT's GPT-2 has 50304 for
// GPT-2's 50257): not more ids than the model, nor 128 or more fewer (byte or char ids under
// GPT-2 weights).
func (c Config) VocabFits(vocab int) bool { return vocab <= c.VocabSize && c.VocabSize-vocab < 128 }

// ParamSpec names one parameter tensor. Layer tensors are stacked: their first dimension is L,
// and PerLayer says so.
type ParamSpec struct {
	Name     string
	Shape    []int
	Decay    bool // AdamW weight decay applies (2-D weight matrices only)
	PerLayer bool // Shape[0] is the layer: layer l's part is the l-th of L equal slices
}

// Size is the number of elements.
func (p ParamSpec) Size() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// ParamSpecs lists the parameters in llm.c's order, which is also their order in the flat
// parameter buffer, in checkpoints and in llm.c model files.
func (c Config) ParamSpecs() []ParamSpec {
	L, C, Vp, maxT := c.NumLayers, c.Channels, c.PaddedVocabSize, c.BlockSize
	return []ParamSpec{
		{"wte", []int{Vp, C}, true, false},
		{"wpe", []int{maxT, C}, true, false},
		{"ln1w", []int{L, C}, false, true},
		{"ln1b", []int{L, C}, false, true},
		{"qkvw", []int{L, 3 * C, C}, true, true},
		{"qkvb", []int{L, 3 * C}, false, true},
		{"attprojw", []int{L, C, C}, true, true},
		{"attprojb", []int{L, C}, false, true},
		{"ln2w", []int{L, C}, false, true},
		{"ln2b", []int{L, C}, false, true},
		{"fcw", []int{L, 4 * C, C}, true, true},
		{"fcb", []int{L, 4 * C}, false, true},
		{"fcprojw", []int{L, C, 4 * C}, true, true},
		{"fcprojb", []int{L, C}, false, true},
		{"lnfw", []int{C}, false, false},
		{"lnfb", []int{C}, false, false},
	}
}

// NumParams is the length of the flat parameter buffer (including padded vocab rows).
func (c Config) NumParams() int {
	n := 0
	for _, p := range c.ParamSpecs() {
		n += p.Size()
	}
	return n
}

// FlopsPerToken estimates training FLOPs per token (forward + backward) as in the PaLM paper's
// appendix: 6 per parameter plus the attention score and value matmuls.
func (c Config) FlopsPerToken(seqLen int) float64 {
	nonEmb := c.NumParams() - c.PaddedVocabSize*c.Channels - c.BlockSize*c.Channels
	params := float64(nonEmb + c.PaddedVocabSize*c.Channels) // the LM head is a real matmul
	return 6*params + 12*float64(c.NumLayers*c.Channels*seqLen)
}
