// Package hf converts GPT-2 models between gpt2go and Hugging Face's format: a folder with
// config.json and model.safetensors, as transformers' GPT2LMHeadModel.save_pretrained writes and
// the Hub serves. It reads such folders (read.go), writes them with the GPT-2 tokenizer files
// (write.go, tokenizer.go), and downloads them from the Hub into gpt2go's cache (hub.go).
//
// The layouts differ in three ways, all handled here:
//   - names: Hugging Face names each layer's tensors (h.N.attn.c_attn.weight, ...), optionally
//     under a "transformer." prefix; gpt2go stacks the layers in llm.c's flat order (gpt.ParamSpecs).
//   - Conv1D: Hugging Face's c_attn, c_proj, c_fc weights are stored (in, out) and applied as
//     x @ W; gpt2go's are (out, in), so they are transposed both ways.
//   - the vocabulary: gpt2go pads wte with zero rows (50257 -> 50304, as llm.c does); the padded
//     rows are dropped on export and added on import. The LM head is tied to wte in both.
//
// Older Hub files also carry each layer's causal mask (h.N.attn.bias) and h.N.attn.masked_bias;
// these are buffers, not weights, and are ignored.
package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// The files of a Hugging Face model folder.
const (
	ConfigFile  = "config.json"
	WeightsFile = "model.safetensors"
)

// VocabMultiple is what an imported vocabulary is padded to a multiple of: 50257 becomes 50304,
// the size gpt2go's GPT-2 presets (and llm.c) use.
const VocabMultiple = 128

// layerNormEps is the epsilon of every LayerNorm in gpt2go, GPT-2's.
const layerNormEps = 1e-5

// config is the part of transformers' GPT2Config that decides the computation. Pointers tell an
// absent field (which gets GPT2Config's default) from a given one.
type config struct {
	ModelType            string   `json:"model_type"`
	Architectures        []string `json:"architectures"`
	VocabSize            *int     `json:"vocab_size"`
	NPositions           *int     `json:"n_positions"`
	NEmbd                *int     `json:"n_embd"`
	NLayer               *int     `json:"n_layer"`
	NHead                *int     `json:"n_head"`
	NInner               *int     `json:"n_inner"`
	Activation           *string  `json:"activation_function"`
	LayerNormEpsilon     *float64 `json:"layer_norm_epsilon"`
	ScaleAttnWeights     *bool    `json:"scale_attn_weights"`
	ScaleByInverseLayer  bool     `json:"scale_attn_by_inverse_layer_idx"`
	AddCrossAttention    bool     `json:"add_cross_attention"`
	TieWordEmbeddings    *bool    `json:"tie_word_embeddings"`
	ReorderAndUpcastAttn bool     `json:"reorder_and_upcast_attn"` // changes nothing in fp32
}

// or returns *p, or def when p is nil.
func or[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// readConfig reads a GPT-2 config.json and returns the gpt2go config it describes, the
// vocabulary padded to a multiple of VocabMultiple. Anything gpt2go cannot compute exactly (another
// model type, another activation or LayerNorm epsilon, cross-attention, untied embeddings) is a
// one-line error that says so.
func readConfig(path string) (gpt.Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return gpt.Config{}, fmt.Errorf("no %s at %s; a Hugging Face GPT-2 folder holds config.json and model.safetensors", ConfigFile, filepath.Dir(path))
		}
		return gpt.Config{}, fmt.Errorf("hf config: %w", err)
	}
	var c config
	if err := json.Unmarshal(raw, &c); err != nil {
		return gpt.Config{}, fmt.Errorf("%s is not valid JSON (%v); it should be a Hugging Face GPT-2 config.json", path, err)
	}
	bad := func(format string, args ...any) (gpt.Config, error) {
		return gpt.Config{}, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...))
	}
	// A null size would read as absent, and get the 124M model's size below, where
	// transformers fails on it; n_head in particular no shape check would catch.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return gpt.Config{}, fmt.Errorf("%s is not valid JSON (%v); it should be a Hugging Face GPT-2 config.json", path, err)
	}
	for _, key := range []string{"vocab_size", "n_positions", "n_embd", "n_layer", "n_head"} {
		if string(fields[key]) == "null" {
			return bad("%s is null; give the model's %s (GPT2Config's default applies only when it is absent)", key, key)
		}
	}
	if c.ModelType != "gpt2" {
		what := "no model_type"
		if c.ModelType != "" {
			what = fmt.Sprintf("model_type %q", c.ModelType)
		}
		return bad("%s, not \"gpt2\"; gpt2go loads GPT-2 models only (openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl and their fine-tunes)", what)
	}
	// GPT2Config's defaults are those of the 124M model.
	cfg := gpt.Config{
		VocabSize: or(c.VocabSize, 50257), BlockSize: or(c.NPositions, 1024),
		Channels: or(c.NEmbd, 768), NumLayers: or(c.NLayer, 12), NumHeads: or(c.NHead, 12),
	}
	cfg.PaddedVocabSize = gpt.PadVocab(cfg.VocabSize, VocabMultiple)
	switch act := or(c.Activation, "gelu_new"); act {
	case "gelu_new", "gelu_pytorch_tanh", "gelu_fast": // the tanh approximation, as gpt2go computes it
	default:
		return bad("activation_function %q; gpt2go computes GELU's tanh approximation (\"gelu_new\") only", act)
	}
	if eps := or(c.LayerNormEpsilon, layerNormEps); math.Abs(eps-layerNormEps) > 1e-12 {
		return bad("layer_norm_epsilon %g; gpt2go's LayerNorm uses GPT-2's 1e-05", eps)
	}
	switch {
	case c.NInner != nil && *c.NInner != 4*cfg.Channels:
		return bad("n_inner %d; gpt2go's MLP is 4 x n_embd = %d wide", *c.NInner, 4*cfg.Channels)
	case !or(c.ScaleAttnWeights, true):
		return bad("scale_attn_weights is false; gpt2go always scales attention by 1/sqrt(head size)")
	case c.ScaleByInverseLayer:
		return bad("scale_attn_by_inverse_layer_idx is true; gpt2go does not scale attention by layer")
	case c.AddCrossAttention:
		return bad("add_cross_attention is true; gpt2go's GPT-2 is a decoder without cross-attention")
	case !or(c.TieWordEmbeddings, true):
		return bad("tie_word_embeddings is false; gpt2go's LM head is tied to the token embedding")
	}
	if err := cfg.Validate(); err != nil {
		return bad("%v", err)
	}
	if err := cfg.Plausible(); err != nil {
		return bad("%v", err)
	}
	return cfg, nil
}

// configJSON is the config.json written for cfg: GPT2Config's fields for a GPT2LMHeadModel that
// computes what gpt2go computes (no dropout: gpt2go trains without it). tok (may be nil) gives
// the special token ids.
func configJSON(cfg gpt.Config, tok tokenizer.Tokenizer) ([]byte, error) {
	c := map[string]any{
		"activation_function":             "gelu_new",
		"architectures":                   []string{"GPT2LMHeadModel"},
		"attn_pdrop":                      0.0,
		"embd_pdrop":                      0.0,
		"resid_pdrop":                     0.0,
		"initializer_range":               0.02,
		"layer_norm_epsilon":              layerNormEps,
		"model_type":                      "gpt2",
		"n_ctx":                           cfg.BlockSize,
		"n_embd":                          cfg.Channels,
		"n_head":                          cfg.NumHeads,
		"n_inner":                         nil,
		"n_layer":                         cfg.NumLayers,
		"n_positions":                     cfg.BlockSize,
		"reorder_and_upcast_attn":         false,
		"scale_attn_by_inverse_layer_idx": false,
		"scale_attn_weights":              true,
		"tie_word_embeddings":             true,
		"torch_dtype":                     "float32",
		"use_cache":                       true,
		"vocab_size":                      cfg.VocabSize,
	}
	if tok != nil && tok.EOT() >= 0 {
		c["bos_token_id"], c["eos_token_id"] = tok.EOT(), tok.EOT()
	}
	if tok != nil && tokenizer.SpecialsOf(tok).PAD >= 0 {
		c["pad_token_id"] = tokenizer.SpecialsOf(tok).PAD
	}
	return indentJSON(c)
}

// indentJSON formats v as transformers writes its JSON files: keys sorted, two-space indents, a
// final newline, and no escaping of <, > and & (which "<|endoftext|>" has).
func indentJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(v)
	return b.Bytes(), err
}

// tensorName maps gpt2go's parameters to Hugging Face's tensor names: per layer ("%d" is the
// layer) or whole. conv1d marks weights stored transposed, (in, out).
var tensorNames = []struct {
	param, name string
	perLayer    bool
	conv1d      bool
}{
	{"wte", "wte.weight", false, false},
	{"wpe", "wpe.weight", false, false},
	{"ln1w", "h.%d.ln_1.weight", true, false},
	{"ln1b", "h.%d.ln_1.bias", true, false},
	{"qkvw", "h.%d.attn.c_attn.weight", true, true},
	{"qkvb", "h.%d.attn.c_attn.bias", true, false},
	{"attprojw", "h.%d.attn.c_proj.weight", true, true},
	{"attprojb", "h.%d.attn.c_proj.bias", true, false},
	{"ln2w", "h.%d.ln_2.weight", true, false},
	{"ln2b", "h.%d.ln_2.bias", true, false},
	{"fcw", "h.%d.mlp.c_fc.weight", true, true},
	{"fcb", "h.%d.mlp.c_fc.bias", true, false},
	{"fcprojw", "h.%d.mlp.c_proj.weight", true, true},
	{"fcprojb", "h.%d.mlp.c_proj.bias", true, false},
	{"lnfw", "ln_f.weight", false, false},
	{"lnfb", "ln_f.bias", false, false},
}

// tensor is one Hugging Face tensor's place in gpt2go's flat parameters.
type tensor struct {
	name   string // without the "transformer." prefix
	shape  []int  // Hugging Face's shape
	offset int    // of its first element in the flat parameters
	conv1d bool   // stored (in, out): shape[0] x shape[1] here is shape[1] x shape[0] there
}

// tensors lists every Hugging Face tensor of cfg in the order of GPT2Model's state dict (wte,
// wpe, layer by layer, ln_f), which export writes, with its shape and place in gpt2go's flat
// parameters. wte's shape has the real vocabulary: the padded rows are gpt2go's alone.
func tensors(cfg gpt.Config) []tensor {
	offsets, layerSizes, shapes := map[string]int{}, map[string]int{}, map[string][]int{}
	off := 0
	for _, s := range cfg.ParamSpecs() {
		offsets[s.Name], shapes[s.Name] = off, s.Shape
		layerSizes[s.Name] = s.Size() / cfg.NumLayers // used for per-layer tensors only
		off += s.Size()
	}
	var out []tensor
	whole := func(final bool) {
		for _, tn := range tensorNames {
			if !tn.perLayer && strings.HasPrefix(tn.name, "ln_f") == final {
				shape := shapes[tn.param]
				if tn.param == "wte" {
					shape = []int{cfg.VocabSize, cfg.Channels}
				}
				out = append(out, tensor{name: tn.name, shape: shape, offset: offsets[tn.param]})
			}
		}
	}
	whole(false)
	for l := range cfg.NumLayers {
		for _, tn := range tensorNames {
			if !tn.perLayer {
				continue
			}
			shape := shapes[tn.param][1:] // gpt2go's (out, in) for weights
			if tn.conv1d {
				shape = []int{shape[1], shape[0]}
			}
			out = append(out, tensor{name: fmt.Sprintf(tn.name, l), shape: shape,
				offset: offsets[tn.param] + l*layerSizes[tn.param], conv1d: tn.conv1d})
		}
	}
	whole(true)
	return out
}

// size is the tensor's element count.
func (t tensor) size() int {
	n := 1
	for _, d := range t.shape {
		n *= d
	}
	return n
}
