package gpt

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/safetensors"
)

// llm.c model files (train_gpt2.c's gpt2_build_from_checkpoint): a header of 256 little-endian
// int32 — magic 20240326, version 3 (fp32), maxT, V, L, NH, C, Vp — then every parameter as fp32
// in ParamSpecs order.
const (
	LLMCMagic      = 20240326 // first int32 of an llm.c model file
	llmcVersion    = 3
	llmcHeaderInts = 256
)

// ReadLLMC reads an llm.c fp32 model file and returns its config and flat parameters.
func ReadLLMC(path string) (Config, []float32, error) {
	cfg, read, closeFile, err := OpenLLMC(path)
	if err != nil {
		return Config{}, nil, err
	}
	defer closeFile()
	params, err := ReadAll(read, cfg.NumParams())
	if err != nil {
		return Config{}, nil, err
	}
	return cfg, params, nil
}

// InspectLLMC checks an llm.c fp32 model file's header and size and returns its config.
func InspectLLMC(path string) (Config, error) {
	f, cfg, err := openLLMC(path)
	if err != nil {
		return Config{}, err
	}
	f.Close()
	return cfg, nil
}

// OpenLLMC checks an llm.c fp32 model file's header and size and returns its config and a
// reader of its flat parameters, which reads them from the file a chunk at a time when called
// (as often as needed), so that a model on a backend is filled without a host copy. The file
// stays open, so the reader reads the file that was checked even if another is moved to its path
// since, until closeFile (or the process's exit) closes it.
func OpenLLMC(path string) (cfg Config, read ParamsReader, closeFile func() error, err error) {
	f, cfg, err := openLLMC(path)
	if err != nil {
		return Config{}, nil, nil, err
	}
	n := cfg.NumParams()
	read = func(sink func(off int, chunk []float32) error) error {
		r := io.NewSectionReader(f, llmcHeaderInts*4, 4*int64(n))
		buf := make([]float32, min(n, 1<<20))
		for off := 0; off < n; off += len(buf) {
			chunk := buf[:min(len(buf), n-off)]
			if err := safetensors.ReadFloat32s(r, chunk); err != nil {
				return fmt.Errorf("llm.c model %s: %w", path, err)
			}
			if err := sink(off, chunk); err != nil {
				return err
			}
		}
		return nil
	}
	return cfg, read, f.Close, nil
}

// openLLMC opens an llm.c model file and checks its header and size, leaving the file at the
// first parameter.
func openLLMC(path string) (*os.File, Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Config{}, fmt.Errorf("llm.c model: %w", err)
	}
	cfg, err := checkLLMC(f, path)
	if err != nil {
		f.Close()
		return nil, Config{}, err
	}
	return f, cfg, nil
}

func checkLLMC(f *os.File, path string) (Config, error) {
	st, err := f.Stat()
	if err != nil {
		return Config{}, fmt.Errorf("llm.c model %s: %w", path, err)
	}
	if st.Size() == 0 {
		return Config{}, fmt.Errorf("llm.c model %s is empty", path)
	}
	var hdr [llmcHeaderInts]int32
	if st.Size() < llmcHeaderInts*4 {
		return Config{}, fmt.Errorf("llm.c model %s is truncated: %d bytes, shorter than its 1024-byte header", path, st.Size())
	}
	if err := binary.Read(f, binary.LittleEndian, hdr[:]); err != nil {
		return Config{}, fmt.Errorf("llm.c model %s: read header: %w", path, err)
	}
	if hdr[0] != LLMCMagic {
		return Config{}, fmt.Errorf("llm.c model %s has wrong magic %d (want %d); is it an llm.c gpt2_*.bin model file?", path, hdr[0], LLMCMagic)
	}
	if hdr[1] != llmcVersion {
		hint := ""
		if hdr[1] == 5 {
			hint = " (bf16); export an fp32 model (version 3) instead"
		}
		return Config{}, fmt.Errorf("llm.c model %s has version %d%s; gpt2go reads version %d", path, hdr[1], hint, llmcVersion)
	}
	cfg := Config{
		BlockSize: int(hdr[2]), VocabSize: int(hdr[3]), NumLayers: int(hdr[4]),
		NumHeads: int(hdr[5]), Channels: int(hdr[6]), PaddedVocabSize: int(hdr[7]),
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("llm.c model %s has a bad header: %w", path, err)
	}
	if cfg.Plausible() != nil || cfg.PaddedVocabSize > 1<<22 {
		return Config{}, fmt.Errorf("llm.c model %s has an implausible header (%+v); the file is corrupt", path, cfg)
	}
	n := cfg.NumParams()
	want := int64(llmcHeaderInts*4) + int64(n)*4
	if st.Size() != want {
		return Config{}, fmt.Errorf("llm.c model %s is %d bytes but its header implies %d (%d params); the file is truncated or corrupt", path, st.Size(), want, n)
	}
	return cfg, nil
}

// WriteLLMC writes cfg and flat parameters as an llm.c fp32 model file, atomically.
func WriteLLMC(path string, cfg Config, params []float32) error {
	if len(params) != cfg.NumParams() {
		return fmt.Errorf("write llm.c model: %d params, config needs %d", len(params), cfg.NumParams())
	}
	return WriteLLMCFrom(path, cfg, HostParams(params))
}

// WriteLLMCFrom is WriteLLMC for parameters that read hands over a chunk at a time, in order, so
// that the writer never holds them all.
func WriteLLMCFrom(path string, cfg Config, read ParamsReader) error {
	n := cfg.NumParams()
	var hdr [llmcHeaderInts]int32
	hdr[0], hdr[1] = LLMCMagic, llmcVersion
	hdr[2], hdr[3], hdr[4] = int32(cfg.BlockSize), int32(cfg.VocabSize), int32(cfg.NumLayers)
	hdr[5], hdr[6], hdr[7] = int32(cfg.NumHeads), int32(cfg.Channels), int32(cfg.PaddedVocabSize)
	return atomicfile.Write(path, func(w io.Writer) error {
		if err := binary.Write(w, binary.LittleEndian, hdr[:]); err != nil {
			return err
		}
		order := ChunkOrder{What: "parameter", N: n}
		err := read(func(off int, chunk []float32) error {
			if err := order.Take(off, len(chunk)); err != nil {
				return err
			}
			return safetensors.WriteFloat32s(w, chunk)
		})
		if err == nil {
			err = order.Done()
		}
		if err != nil {
			return fmt.Errorf("write llm.c model: %w", err)
		}
		return nil
	})
}
