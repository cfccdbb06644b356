package hf

import (
	"fmt"
	"io"
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
// GPT2Tokenizer. tok may be nil. The files replace an earlier export in dir all together or not
// at all (atomicfile.WriteDir; the folder's other files stay); dir is created if needed.
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
	confTok := tok
	if tok != nil && !cfg.VocabFits(tok.VocabSize()) {
		confTok = nil // its EOT and [PAD] ids would name other tokens in config.json (writeTokenizer says why)
	}
	conf, err := configJSON(cfg, confTok)
	if err != nil {
		return nil, err
	}
	// The files go into a staging folder that then replaces the folder's old export as a whole:
	// a failure half-way (the weights' reader finds a bad checksum at the end, a full disk at
	// config.json) leaves the old export as it was, not new weights beside an old config.
	out := &Written{Files: []string{ConfigFile, WeightsFile}}
	err = atomicfile.WriteDir(dir, isExportFile, func(staging string) error {
		if err := writeWeights(filepath.Join(staging, WeightsFile), cfg, read); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(staging, ConfigFile), conf); err != nil {
			return err
		}
		files, why, err := writeTokenizer(staging, tok, cfg)
		if err != nil {
			return err
		}
		out.Files = append(out.Files, files...)
		out.NoTokenizer = why
		// A tokenizer an earlier export (or a Hub snapshot) left here that this export does not
		// write again belongs to another model (AutoTokenizer would load it beside this one's
		// weights): it goes with the old export.
		for _, name := range staleTokenizerFiles {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil && !slices.Contains(files, name) {
				out.Removed = append(out.Removed, name)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
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

// isExportFile reports whether name is one of the files of an export, which the next export
// into its folder replaces or removes; the folder's other files stay.
func isExportFile(name string) bool {
	return name == ConfigFile || name == WeightsFile || slices.Contains(staleTokenizerFiles, name)
}

// writeFile is atomicfile.WriteBytes; tests make it fail.
var writeFile = atomicfile.WriteBytes
