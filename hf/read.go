package hf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/safetensors"
)

// Model is a Hugging Face GPT-2 model in gpt2go's layout.
type Model struct {
	Config gpt.Config
	// Params are the weights in gpt.ParamSpecs order, the padded vocabulary rows zero; nil from
	// Open, whose ReadParams reads them from the file.
	Params []float32
	Source string // the model.safetensors read
	// Ignored lists the file's tensors that a GPT-2 language model does not use (say, a
	// classification head), which were skipped. The attention buffers are not listed.
	Ignored []string
	// Open's file and its checked header: ReadParams reads the file that was checked, even if
	// another is moved to its path since (the OS closes it at exit, or Close).
	src *source
	f   *os.File
}

// Close closes the file Open left open for ReadParams.
func (m *Model) Close() error {
	if m.f == nil {
		return nil
	}
	f := m.f
	m.f = nil
	return f.Close()
}

// prefix is what GPT2LMHeadModel puts before its GPT2Model's tensor names.
const prefix = "transformer."

// bufferName matches the attention buffers older files carry: the causal mask and masked_bias.
var bufferName = regexp.MustCompile(`^h\.\d+\.attn\.(bias|masked_bias)$`)

// layerName extracts the layer number of a per-layer tensor name.
var layerName = regexp.MustCompile(`^h\.(\d+)\.`)

// source is a model.safetensors whose header has been checked against its config.json.
type source struct {
	cfg     gpt.Config
	path    string
	header  *safetensors.Header
	found   map[string]safetensors.TensorInfo // by name without the prefix
	lmHead  *safetensors.TensorInfo
	ignored []string
}

// IsWeightsFile reports whether path is a safetensors file with GPT-2's Hugging Face names
// (wte.weight, with or without the "transformer." prefix). It looks at the names only, so a
// file cut short after its header counts, and Read says what is wrong with it.
func IsWeightsFile(path string) bool {
	names, err := safetensors.ReadTensorNames(path)
	if err != nil {
		return false
	}
	return slices.Contains(names, "wte.weight") || slices.Contains(names, prefix+"wte.weight")
}

// Inspect checks a Hugging Face GPT-2 model without reading its weights and returns its gpt2go
// config. path is a folder holding config.json and model.safetensors, or the model.safetensors
// file itself with config.json beside it. Every tensor's presence, dtype and shape is checked.
func Inspect(path string) (gpt.Config, error) {
	src, f, err := open(path)
	if err != nil {
		return gpt.Config{}, err
	}
	f.Close()
	return src.cfg, nil
}

// Read reads a Hugging Face GPT-2 model (see Inspect for path) into gpt2go's flat layout.
func Read(path string) (*Model, error) {
	m, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if m.Params, err = gpt.ReadAll(m.ReadParams, m.Config.NumParams()); err != nil {
		return nil, err
	}
	return m, nil
}

// readChunk is how many elements of a tensor that needs no transpose ReadParams reads at a time
// (a variable for the tests).
var readChunk = 1 << 20

// Open is Read without reading the weights: it checks the model as Inspect does, and
// ReadParams then hands them over a tensor at a time, so that a model on a backend is filled
// without a host copy of them all.
func Open(path string) (*Model, error) {
	src, f, err := open(path)
	if err != nil {
		return nil, err
	}
	return &Model{Config: src.cfg, Source: src.path, Ignored: src.ignored, src: src, f: f}, nil
}

// ReadParams hands the weights to sink in gpt2go's flat layout (a gpt.ParamsReader): from
// Params, or from the file Open checked, in consecutive chunks, each tensor converted to
// float32 and, for Conv1D weights, transposed to (out, in); the padded vocabulary rows are
// zeros. A tied lm_head.weight must equal wte.weight.
func (m *Model) ReadParams(sink func(off int, chunk []float32) error) error {
	if m.Params != nil {
		return gpt.HostParams(m.Params)(sink)
	}
	src, f := m.src, m.f
	if f == nil {
		return fmt.Errorf("%s: the model file was closed; open it again", m.Source)
	}
	cfg := src.cfg
	var buf []byte
	// read fills dst with the tensor's elements from lo on.
	read := func(info safetensors.TensorInfo, lo int, dst []float32) error {
		size := dtypeBytes(info.DType)
		n := size * int64(len(dst))
		section := io.NewSectionReader(f, src.header.DataOffset+info.Begin+size*int64(lo), n)
		var err error
		if info.DType == "F32" { // straight into dst on little-endian hosts
			err = safetensors.ReadFloat32s(section, dst)
		} else {
			if int64(cap(buf)) < n {
				buf = make([]byte, n)
			}
			buf = buf[:n]
			if _, err = io.ReadFull(section, buf); err == nil {
				decode(dst, buf, info.DType)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: read tensor %s: %w", src.path, info.Name, err)
		}
		return nil
	}
	ts := tensors(cfg)
	slices.SortFunc(ts, func(a, b tensor) int { return a.offset - b.offset }) // gpt2go's order
	chunkLen := readChunk
	var tmp, out, head, zeros []float32
	next := 0
	pad := func(to int) error { // zeros up to offset to (the padded vocabulary rows)
		for next < to {
			if zeros == nil {
				zeros = make([]float32, 1<<16)
			}
			n := min(len(zeros), to-next)
			if err := sink(next, zeros[:n]); err != nil {
				return err
			}
			next += n
		}
		return nil
	}
	for _, t := range ts {
		if err := pad(t.offset); err != nil {
			return err
		}
		info, size := src.found[t.name], t.size()
		if t.conv1d { // a whole (in, out) weight, transposed
			tmp, out = slices.Grow(tmp[:0], size)[:size], slices.Grow(out[:0], size)[:size]
			if err := read(info, 0, tmp); err != nil {
				return err
			}
			transpose(out, tmp, t.shape[0], t.shape[1])
			if err := sink(t.offset, out); err != nil {
				return err
			}
			next = t.offset + size
			continue
		}
		for lo := 0; lo < size; lo += chunkLen {
			n := min(chunkLen, size-lo)
			tmp = slices.Grow(tmp[:0], n)[:n]
			if err := read(info, lo, tmp); err != nil {
				return err
			}
			if t.offset == 0 && src.lmHead != nil { // wte, and a stored LM head that must be it
				head = slices.Grow(head[:0], n)[:n]
				if err := read(*src.lmHead, lo, head); err != nil {
					return err
				}
				for i, v := range head {
					if math.Float32bits(v) != math.Float32bits(tmp[i]) {
						return fmt.Errorf("%s: lm_head.weight differs from wte.weight (first at element %d): the LM head is not tied to the token embedding, and gpt2go's GPT-2 ties them", src.path, lo+i)
					}
				}
			}
			if err := sink(t.offset+lo, tmp); err != nil {
				return err
			}
		}
		next = t.offset + size
	}
	return pad(cfg.NumParams())
}

// open finds config.json and model.safetensors for path, reads the config and checks the
// weights' header against it. The caller closes the returned file.
func open(path string) (*source, *os.File, error) {
	configPath, weightsPath, err := locate(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := readConfig(configPath)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(weightsPath)
	if err != nil {
		return nil, nil, fmt.Errorf("hf model: %w", err)
	}
	src, err := checkHeader(f, weightsPath, cfg)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return src, f, nil
}

// locate returns the config.json and model.safetensors paths for a folder or a weights file.
func locate(path string) (configPath, weightsPath string, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", "", fmt.Errorf("hf model: %w", err)
	}
	if !st.IsDir() {
		configPath = filepath.Join(filepath.Dir(path), ConfigFile)
		if _, err := os.Stat(configPath); err != nil {
			return "", "", fmt.Errorf("no %s beside %s, and the weights alone do not give n_head; put the model's config.json next to it or pass the folder", ConfigFile, path)
		}
		return configPath, path, nil
	}
	weightsPath = filepath.Join(path, WeightsFile)
	if _, err := os.Stat(weightsPath); err == nil {
		return filepath.Join(path, ConfigFile), weightsPath, nil
	}
	has := func(name string) bool {
		_, err := os.Stat(filepath.Join(path, name))
		return err == nil
	}
	switch {
	case has("model.safetensors.index.json"):
		return "", "", fmt.Errorf("%s holds a sharded checkpoint (model.safetensors.index.json), which gpt2go does not read; save it as one file with save_pretrained(dir, max_shard_size=\"100GB\")", path)
	case has("pytorch_model.bin"):
		return "", "", fmt.Errorf("%s has pytorch_model.bin but no %s, and gpt2go reads safetensors only; download the repository's model.safetensors or save the model with save_pretrained(dir, safe_serialization=True)", path, WeightsFile)
	case has(ConfigFile):
		return "", "", fmt.Errorf("%s has %s but no %s; download the weights into it (or pass hf:OWNER/NAME to download both)", path, ConfigFile, WeightsFile)
	}
	return "", "", fmt.Errorf("%s has no %s; pass a Hugging Face GPT-2 folder (config.json + model.safetensors), its model.safetensors, hf:openai-community/gpt2 or an llm.c model file", path, WeightsFile)
}

// checkHeader maps the file's tensors to cfg's and checks their dtypes and shapes.
func checkHeader(f *os.File, path string, cfg gpt.Config) (*source, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("hf model: %w", err)
	}
	h, err := safetensors.ReadHeader(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s is not a valid safetensors file: %w", path, err)
	}
	src := &source{cfg: cfg, path: path, header: h, found: map[string]safetensors.TensorInfo{}}
	layers := 0 // the highest h.N. plus one
	for _, t := range h.Tensors {
		name := strings.TrimPrefix(t.Name, prefix)
		if _, dup := src.found[name]; dup {
			return nil, fmt.Errorf("%s holds both %s and %s%s; it is not one model", path, name, prefix, name)
		}
		switch {
		case name == "lm_head.weight":
			src.lmHead = &t
			continue
		case bufferName.MatchString(name):
			continue
		}
		if m := layerName.FindStringSubmatch(name); m != nil {
			l, _ := strconv.Atoi(m[1])
			if l >= cfg.NumLayers {
				return nil, fmt.Errorf("%s holds tensor %s but config.json says n_layer %d; config.json and the weights do not belong together", path, t.Name, cfg.NumLayers)
			}
			layers = max(layers, l+1)
		}
		src.found[name] = t
	}
	// Before listing cfg's tensors, which are 12 per layer of config.json's.
	if layers > 0 && layers < cfg.NumLayers {
		return nil, fmt.Errorf("%s holds layers up to h.%d. but config.json says n_layer %d; config.json and the weights do not belong together", path, layers-1, cfg.NumLayers)
	}
	want := tensors(cfg)
	known := map[string]bool{}
	var missing string // the first
	nMissing := 0
	for _, w := range want {
		known[w.name] = true
		info, ok := src.found[w.name]
		if !ok {
			if nMissing == 0 {
				missing = w.name
			}
			nMissing++
			continue
		}
		if err := checkTensor(info, w.shape); err != nil {
			return nil, fmt.Errorf("%s: %w; config.json (n_embd %d, n_head %d, n_layer %d, n_positions %d, vocab_size %d) and the weights do not belong together", path, err, cfg.Channels, cfg.NumHeads, cfg.NumLayers, cfg.BlockSize, cfg.VocabSize)
		}
	}
	if nMissing > 0 {
		more := ""
		if nMissing > 1 {
			more = fmt.Sprintf(" and %d more", nMissing-1)
		}
		return nil, fmt.Errorf("%s lacks tensor %s%s (with or without the %q prefix); it is not a complete GPT-2 model", path, missing, more, prefix)
	}
	if src.lmHead != nil {
		if err := checkTensor(*src.lmHead, []int{cfg.VocabSize, cfg.Channels}); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	for _, t := range h.Tensors {
		if name := strings.TrimPrefix(t.Name, prefix); src.found[name].Name == t.Name && !known[name] {
			src.ignored = append(src.ignored, t.Name)
		}
	}
	return src, nil
}

// checkTensor checks that a tensor holds floats of the given shape.
func checkTensor(info safetensors.TensorInfo, shape []int) error {
	if !slices.Equal(info.Shape, shape) {
		return fmt.Errorf("tensor %s has shape %v, want %v", info.Name, info.Shape, shape)
	}
	switch info.DType {
	case "F32", "F16", "BF16", "F64":
		return nil
	}
	return fmt.Errorf("tensor %s has dtype %s; gpt2go reads F32, F16, BF16 and F64 weights", info.Name, info.DType)
}

// dtypeBytes is the size of one element of a dtype checkTensor accepts.
func dtypeBytes(dtype string) int64 {
	switch dtype {
	case "F64":
		return 8
	case "F32":
		return 4
	}
	return 2 // F16, BF16
}

// decode converts little-endian src of dtype (F32, F16, BF16 or F64) to float32s.
func decode(dst []float32, src []byte, dtype string) {
	le := binary.LittleEndian
	switch dtype {
	case "F32":
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(src[4*i:]))
		}
	case "BF16":
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(le.Uint16(src[2*i:])) << 16)
		}
	case "F16":
		for i := range dst {
			dst[i] = halfToFloat(le.Uint16(src[2*i:]))
		}
	case "F64":
		for i := range dst {
			dst[i] = float32(math.Float64frombits(le.Uint64(src[8*i:])))
		}
	default:
		panic("hf: decode " + dtype) // checkTensor lets no other dtype through
	}
}

// halfToFloat converts an IEEE 754 binary16 to float32 exactly.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, nan
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
	case frac == 0: // zero
		return math.Float32frombits(sign)
	}
	// subnormal: frac * 2^-24
	v := float32(frac) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// transpose writes the (rows, cols) row-major matrix src into dst as (cols, rows), in 32x32
// tiles so that both sides stay in cache (a plain loop is 3x slower on GPT-2's matrices).
func transpose(dst, src []float32, rows, cols int) {
	const tile = 32
	for r0 := 0; r0 < rows; r0 += tile {
		r1 := min(r0+tile, rows)
		for c0 := 0; c0 < cols; c0 += tile {
			c1 := min(c0+tile, cols)
			for r := r0; r < r1; r++ {
				row := src[r*cols : r*cols+c1]
				for c := c0; c < c1; c++ {
					dst[c*rows+r] = row[c]
				}
			}
		}
	}
}
