package train

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/gpt"
)

// Loaded is a model read from a run directory, a checkpoint file or an llm.c model file.
type Loaded struct {
	Config gpt.Config
	Params []float32
	Run    *Config // the training config, when the source was a gpt2go checkpoint
	Step   int
	Source string
}

// LoadWeights reads model weights from path: a run directory (its newest good checkpoint), a
// gpt2go checkpoint file, or an llm.c model file (recognised by its magic number).
func LoadWeights(path string) (*Loaded, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	if !st.IsDir() && isLLMC(path) {
		return LoadLLMC(path)
	}
	var ck *checkpoint.Checkpoint
	src := path
	if st.IsDir() {
		var warnings []error
		ck, src, warnings, err = checkpoint.LoadLatest(path)
		for _, w := range warnings {
			fmt.Fprintf(os.Stderr, "warning: skipping %v\n", w)
		}
	} else {
		ck, err = checkpoint.Load(path)
	}
	if err != nil {
		return nil, err
	}
	var run Config
	if err := json.Unmarshal(ck.Config, &run); err != nil {
		return nil, fmt.Errorf("checkpoint %s has an unreadable config: %w", src, err)
	}
	if err := run.Model.Validate(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", src, err)
	}
	if len(ck.Params) != run.Model.NumParams() {
		return nil, fmt.Errorf("checkpoint %s holds %d params but its config needs %d", src, len(ck.Params), run.Model.NumParams())
	}
	return &Loaded{Config: run.Model, Params: ck.Params, Run: &run, Step: ck.Step, Source: src}, nil
}

// LoadLLMC reads an llm.c model file.
func LoadLLMC(path string) (*Loaded, error) {
	cfg, params, err := gpt.ReadLLMC(path)
	if err != nil {
		return nil, err
	}
	return &Loaded{Config: cfg, Params: params, Source: path}, nil
}

// isLLMC reports whether path starts with llm.c's model magic.
func isLLMC(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic int32
	return binary.Read(f, binary.LittleEndian, &magic) == nil && magic == gpt.LLMCMagic
}

// NewModel builds a model on be for batches up to (B,T) holding the loaded weights.
func (l *Loaded) NewModel(be backend.Backend, B, T int) (*gpt.Model, error) {
	m, err := gpt.New(be, l.Config, B, T)
	if err != nil {
		return nil, err
	}
	return m, m.SetParams(l.Params)
}
