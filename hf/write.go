package hf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/safetensors"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// Written lists what Write wrote, for the caller's message.
type Written struct {
	Files []string // file names inside the folder
	// NoTokenizer says why no tokenizer files were written ("" when they were).
	NoTokenizer string
}

// Write saves cfg and params (gpt.ParamSpecs order) as a Hugging Face GPT-2 folder that
// transformers' GPT2LMHeadModel.from_pretrained(dir) loads: config.json, model.safetensors (the
// names GPT2LMHeadModel.save_pretrained writes, "transformer." prefix, Conv1D weights (in, out),
// the padded vocabulary rows dropped, the tied lm_head left out as save_pretrained leaves it
// out), and, when tok is GPT-2's or the byte tokenizer, vocab.json and merges.txt for
// GPT2Tokenizer. tok may be nil. Every file is written atomically; dir is created if needed.
func Write(dir string, cfg gpt.Config, params []float32, tok tokenizer.Tokenizer) (*Written, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NoPositionalEmbs {
		return nil, fmt.Errorf("the model was trained without position embeddings, which GPT-2's format cannot express")
	}
	if len(params) != cfg.NumParams() {
		return nil, fmt.Errorf("write hf model: %d params, config needs %d", len(params), cfg.NumParams())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	conf, err := configJSON(cfg, tok)
	if err != nil {
		return nil, err
	}
	out := &Written{}
	if err := atomicfile.WriteBytes(filepath.Join(dir, ConfigFile), conf); err != nil {
		return nil, err
	}
	out.Files = append(out.Files, ConfigFile)
	if err := writeWeights(filepath.Join(dir, WeightsFile), cfg, params); err != nil {
		return nil, err
	}
	out.Files = append(out.Files, WeightsFile)
	files, why, err := writeTokenizer(dir, tok, cfg)
	if err != nil {
		return nil, err
	}
	out.Files = append(out.Files, files...)
	out.NoTokenizer = why
	// The temp files behind the atomic writes are private (0600); an export is made to be shared.
	for _, f := range out.Files {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
	}
	return out, nil
}

// writeWeights streams the tensors into path, transposing the Conv1D weights one at a time.
func writeWeights(path string, cfg gpt.Config, params []float32) error {
	ts := tensors(cfg)
	specs := make([]safetensors.Spec, len(ts))
	for i, t := range ts {
		specs[i] = safetensors.Spec{Name: prefix + t.name, DType: "F32", Shape: t.shape}
	}
	var tmp []float32
	return atomicfile.Write(path, func(w io.Writer) error {
		// transformers refuses safetensors files whose metadata lacks format "pt".
		sw, err := safetensors.NewWriter(w, specs, map[string]string{"format": "pt"})
		if err != nil {
			return err
		}
		for _, t := range ts {
			data := params[t.offset : t.offset+t.size()]
			if t.conv1d {
				if cap(tmp) < len(data) {
					tmp = make([]float32, len(data))
				}
				tmp = tmp[:len(data)]
				// gpt2go's (out, in) = (shape[1], shape[0]) -> Hugging Face's (in, out).
				transpose(tmp, data, t.shape[1], t.shape[0])
				data = tmp
			}
			if err := sw.WriteFloat32s(data); err != nil {
				return err
			}
		}
		return sw.Close()
	})
}
