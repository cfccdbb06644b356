package hf

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

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
	// Removed are the tokenizer files of another model that were in the folder, removed when
	// this export writes none.
	Removed []string
}

// Write saves cfg and params (gpt.ParamSpecs order) as a Hugging Face GPT-2 folder that
// transformers' GPT2LMHeadModel.from_pretrained(dir) loads: config.json, model.safetensors (the
// names GPT2LMHeadModel.save_pretrained writes, "transformer." prefix, Conv1D weights (in, out),
// the padded vocabulary rows dropped, the tied lm_head left out as save_pretrained leaves it
// out), and, when tok is GPT-2's or the byte tokenizer, vocab.json and merges.txt for
// GPT2Tokenizer. tok may be nil. Every file is written atomically; dir is created if needed.
func Write(dir string, cfg gpt.Config, params []float32, tok tokenizer.Tokenizer) (*Written, error) {
	if len(params) != cfg.NumParams() {
		return nil, fmt.Errorf("write hf model: %d params, config needs %d", len(params), cfg.NumParams())
	}
	return WriteFrom(dir, cfg, gpt.HostParams(params), tok)
}

// WriteFrom is Write for weights that read hands over a chunk at a time in gpt2go's flat order
// (train.Loaded.ReadParams), so that an export never holds the whole model.
func WriteFrom(dir string, cfg gpt.Config, read gpt.ParamsReader, tok tokenizer.Tokenizer) (*Written, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NoPositionalEmbs {
		return nil, fmt.Errorf("the model was trained without position embeddings, which GPT-2's format cannot express")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	confTok := tok
	if tok != nil && !cfg.VocabFits(tok.VocabSize()) {
		confTok = nil // its EOT and [PAD] ids would name other tokens in config.json (writeTokenizer says why)
	}
	conf, err := configJSON(cfg, confTok)
	if err != nil {
		return nil, err
	}
	// The weights first: their reader can still fail (a checksum checked at the end, a truncated
	// file), and a config.json written before them would sit beside the folder's old weights.
	if err := writeWeights(filepath.Join(dir, WeightsFile), cfg, read); err != nil {
		return nil, err
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, ConfigFile), conf); err != nil {
		return nil, err
	}
	out := &Written{Files: []string{ConfigFile, WeightsFile}}
	files, why, err := writeTokenizer(dir, tok, cfg)
	if err != nil {
		return nil, err
	}
	out.Files = append(out.Files, files...)
	out.NoTokenizer = why
	if why != "" {
		// A tokenizer an earlier export (or a Hub snapshot) left here belongs to another model:
		// AutoTokenizer would load it beside this one's weights.
		for _, name := range staleTokenizerFiles {
			if err := os.Remove(filepath.Join(dir, name)); err == nil {
				out.Removed = append(out.Removed, name)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("export: remove the old %s: %w", name, err)
			}
		}
	}
	return out, nil // (atomicfile writes files readable by all: an export is made to be shared)
}

// writeWeights writes the tensors into path as read hands gpt2go's flat parameters over, in
// gpt2go's order (the file's data order is free; the padded vocabulary rows are left out), each
// Conv1D weight gathered whole and transposed: the process holds one tensor, not the model.
func writeWeights(path string, cfg gpt.Config, read gpt.ParamsReader) error {
	ts := tensors(cfg)
	slices.SortFunc(ts, func(a, b tensor) int { return a.offset - b.offset })
	specs := make([]safetensors.Spec, len(ts))
	for i, t := range ts {
		specs[i] = safetensors.Spec{Name: prefix + t.name, DType: "F32", Shape: t.shape}
	}
	n := cfg.NumParams()
	return atomicfile.Write(path, func(w io.Writer) error {
		// transformers refuses safetensors files whose metadata lacks format "pt".
		sw, err := safetensors.NewWriter(w, specs, map[string]string{"format": "pt"})
		if err != nil {
			return err
		}
		var whole, tmp []float32 // a Conv1D weight being gathered, and its transpose
		i := 0                   // the tensor being written
		order := gpt.ChunkOrder{What: "parameter", N: n}
		err = read(func(off int, chunk []float32) error {
			if err := order.Take(off, len(chunk)); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			for len(chunk) > 0 && i < len(ts) {
				t := ts[i]
				if off < t.offset { // rows no tensor holds (wte's padding)
					skip := min(len(chunk), t.offset-off)
					chunk, off = chunk[skip:], off+skip
					continue
				}
				end := t.offset + t.size()
				part := chunk[:min(len(chunk), end-off)]
				chunk, off = chunk[len(part):], off+len(part)
				if !t.conv1d {
					if err := sw.WriteFloat32s(part); err != nil {
						return err
					}
				} else if whole = append(whole, part...); off == end {
					// gpt2go's (out, in) = (shape[1], shape[0]) -> Hugging Face's (in, out).
					tmp = slices.Grow(tmp[:0], len(whole))[:len(whole)]
					transpose(tmp, whole, t.shape[1], t.shape[0])
					if err := sw.WriteFloat32s(tmp); err != nil {
						return err
					}
					whole = whole[:0]
				}
				if off == end {
					i++
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := order.Done(); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		if i != len(ts) { // cannot happen once all n values came: the last tensor ends at n
			return fmt.Errorf("export: %d of %d tensors written", i, len(ts))
		}
		return sw.Close()
	})
}

// staleTokenizerFiles are the tokenizer files transformers reads from a model folder.
var staleTokenizerFiles = []string{VocabFile, MergesFile, TokenizerConfigFile, "tokenizer.json", "special_tokens_map.json", "added_tokens.json"}
