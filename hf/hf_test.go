package hf_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/hf"
	"github.com/gpt2go/gpt2go/safetensors"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// The fixture written by tools/reference/gen_hf_fixture.py: a tiny GPT-2 in the Hub's older
// layout (no "transformer." prefix, attention buffers included) and its logits from PyTorch.
const fixtureDir = "testdata/tiny"

var fixtureConfig = gpt.Config{BlockSize: 20, VocabSize: 99, PaddedVocabSize: 128, NumLayers: 2, NumHeads: 3, Channels: 36}

// logitsTol is the PyTorch fixture tolerance of tools/reference/README.md: 1e-4, absolute or
// relative.
const logitsTol = 1e-4

// logits runs the model on tokens (B,T) and returns the (B,T,V) logits.
func logits(t *testing.T, cfg gpt.Config, params []float32, tokens []int32, B, T int) []float32 {
	t.Helper()
	model, err := gpt.New(cpu.New(0), cfg, B, T)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.SetParams(params); err != nil {
		t.Fatal(err)
	}
	if _, err := model.Forward(tokens, nil, B, T); err != nil {
		t.Fatal(err)
	}
	V := cfg.VocabSize
	out := make([]float32, B*T*V)
	for b := range B {
		for tt := range T {
			model.LogitsRow(out[(b*T+tt)*V:(b*T+tt+1)*V], b, tt)
		}
	}
	return out
}

// expected returns the fixture's tokens and PyTorch logits.
func expected(t *testing.T) (tokens []int32, want []float32, B, T int) {
	t.Helper()
	f, err := safetensors.ReadFile("testdata/expected.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := f.Get("tokens")
	lg, _ := f.Get("logits")
	if tokens, err = tok.Int32s(); err != nil {
		t.Fatal(err)
	}
	if want, err = lg.Float32s(); err != nil {
		t.Fatal(err)
	}
	return tokens, want, tok.Shape[0], tok.Shape[1]
}

func compareLogits(t *testing.T, got, want []float32) {
	t.Helper()
	bad, worst := 0, 0.0
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		worst = max(worst, d)
		if d > logitsTol && d > logitsTol*math.Abs(float64(want[i])) {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d logits differ from PyTorch's by more than %g (max abs diff %g)", bad, len(want), logitsTol, worst)
	}
}

// variant writes a copy of the fixture into a temp folder after edit has changed its tensors
// (in file order) and config (decoded JSON); either func may be nil.
func variant(t *testing.T, edit func([]safetensors.Tensor) []safetensors.Tensor, editConfig func(map[string]any)) string {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join(fixtureDir, hf.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	ts := f.Tensors
	if edit != nil {
		ts = edit(slices.Clone(ts))
	}
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, ts, f.Metadata); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, hf.WeightsFile), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(fixtureDir, hf.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if editConfig != nil {
		var c map[string]any
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		editConfig(c)
		raw, _ = json.Marshal(c)
	}
	if err := os.WriteFile(filepath.Join(dir, hf.ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// prefixed gives every tensor the "transformer." prefix GPT2LMHeadModel.save_pretrained writes,
// drops the attention buffers newer files leave out, and adds the tied lm_head as a copy of wte,
// as some converted files carry it.
func prefixed(ts []safetensors.Tensor) []safetensors.Tensor {
	var out []safetensors.Tensor
	for _, t := range ts {
		if strings.HasSuffix(t.Name, ".attn.bias") || strings.HasSuffix(t.Name, ".attn.masked_bias") {
			continue
		}
		if t.Name == "wte.weight" {
			head := t
			head.Name = "lm_head.weight"
			out = append(out, head)
		}
		t.Name = "transformer." + t.Name
		out = append(out, t)
	}
	return out
}

func TestFixtureLogitsMatchPyTorch(t *testing.T) {
	tokens, want, B, T := expected(t)
	for _, c := range []struct {
		name string
		path func(t *testing.T) string
	}{
		{"folder, Hub's old names with attention buffers", func(*testing.T) string { return fixtureDir }},
		{"model.safetensors file", func(*testing.T) string { return filepath.Join(fixtureDir, hf.WeightsFile) }},
		{"transformer. prefix, tied lm_head, no buffers", func(t *testing.T) string { return variant(t, prefixed, nil) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.path(t)
			cfg, err := hf.Inspect(path)
			if err != nil || cfg != fixtureConfig {
				t.Fatalf("Inspect: %+v, %v; want %+v", cfg, err, fixtureConfig)
			}
			m, err := hf.Read(path)
			if err != nil {
				t.Fatal(err)
			}
			if m.Config != fixtureConfig || len(m.Ignored) != 0 {
				t.Errorf("config %+v, ignored %v", m.Config, m.Ignored)
			}
			wte := m.Params[:m.Config.PaddedVocabSize*m.Config.Channels]
			for i, v := range wte[m.Config.VocabSize*m.Config.Channels:] {
				if v != 0 {
					t.Fatalf("padded wte element %d is %g, want 0", i, v)
				}
			}
			compareLogits(t, logits(t, m.Config, m.Params, tokens, B, T), want)
		})
	}
}

// TestHalfPrecisionWeights loads the fixture stored as BF16: every weight must be the BF16 value
// widened exactly, and the logits stay close to PyTorch's.
func TestHalfPrecisionWeights(t *testing.T) {
	full, err := hf.Read(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	toBF16 := func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i, tn := range ts {
			x, _ := tn.Float32s()
			data := make([]byte, 2*len(x))
			for j, v := range x {
				bits := math.Float32bits(v) >> 16 // truncation: any exact BF16 value will do
				data[2*j], data[2*j+1] = byte(bits), byte(bits>>8)
			}
			ts[i] = safetensors.Tensor{Name: tn.Name, DType: "BF16", Shape: tn.Shape, Data: data}
		}
		return ts
	}
	half, err := hf.Read(variant(t, toBF16, nil))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range full.Params {
		if want := math.Float32frombits(math.Float32bits(v) &^ 0xffff); half.Params[i] != want {
			t.Fatalf("param %d: BF16 read as %g, want %g", i, half.Params[i], want)
		}
	}
	// F64 holds every float32 exactly.
	toF64 := func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i, tn := range ts {
			x, _ := tn.Float32s()
			data := make([]byte, 8*len(x))
			for j, v := range x {
				binary.LittleEndian.PutUint64(data[8*j:], math.Float64bits(float64(v)))
			}
			ts[i] = safetensors.Tensor{Name: tn.Name, DType: "F64", Shape: tn.Shape, Data: data}
		}
		return ts
	}
	// Every dtype read a few elements at a time (the wte fixture spans many such pieces) and
	// whole: the same values.
	for _, chunk := range []int{7, 1 << 20} {
		restore := hf.SetReadChunk(chunk)
		for _, c := range []struct {
			dir  string
			want []float32
		}{{fixtureDir, full.Params}, {variant(t, toBF16, nil), half.Params}, {variant(t, toF64, nil), full.Params}} {
			again, err := hf.Read(c.dir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(again.Params, c.want) {
				t.Errorf("%s read %d elements at a time differs", c.dir, chunk)
			}
		}
		restore()
	}
}

// randomModel is a gpt2go model with random weights and zero padded vocabulary rows, as training
// leaves them.
func randomModel(cfg gpt.Config, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	params := make([]float32, cfg.NumParams())
	for i := range params {
		params[i] = float32(rng.NormFloat64() * 0.1)
	}
	for i := cfg.VocabSize * cfg.Channels; i < cfg.PaddedVocabSize*cfg.Channels; i++ {
		params[i] = 0
	}
	return params
}

// TestRoundTrip: gpt2go -> Hugging Face -> gpt2go gives the same bits, and exporting the result
// again gives the same files.
func TestRoundTrip(t *testing.T) {
	cfg := gpt.Config{BlockSize: 24, VocabSize: 257, PaddedVocabSize: 384, NumLayers: 3, NumHeads: 2, Channels: 10}
	params := randomModel(cfg, 7)
	dir := t.TempDir()
	w, err := hf.Write(dir, cfg, params, tokenizer.Byte())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"config.json", "model.safetensors", "vocab.json", "merges.txt", "tokenizer_config.json"}; !slices.Equal(w.Files, want) || w.NoTokenizer != "" {
		t.Errorf("wrote %v (%q), want %v", w.Files, w.NoTokenizer, want)
	}
	m, err := hf.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Config != cfg {
		t.Fatalf("config %+v, want %+v", m.Config, cfg)
	}
	for i := range params {
		if math.Float32bits(m.Params[i]) != math.Float32bits(params[i]) {
			t.Fatalf("param %d: %g after the round trip, was %g", i, m.Params[i], params[i])
		}
	}
	// Open leaves the weights in the file; ReadParams streams them in gpt2go's order, in
	// consecutive chunks (zeros for the padded vocabulary rows), the same bits.
	lazy, err := hf.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var streamed []float32
	if err := lazy.ReadParams(func(off int, chunk []float32) error {
		if off != len(streamed) {
			t.Fatalf("a chunk at %d after %d values", off, len(streamed))
		}
		streamed = append(streamed, chunk...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if lazy.Params != nil || lazy.Config != cfg || !slices.Equal(streamed, params) {
		t.Fatalf("Open + ReadParams: %d values (held %d), config %+v", len(streamed), len(lazy.Params), lazy.Config)
	}
	// ReadParams reads the file Open checked, even after another model of the same shape has
	// been moved to its path; after Close it says so.
	moved := t.TempDir()
	if _, err := hf.Write(moved, cfg, randomModel(cfg, 8), tokenizer.Byte()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(moved, hf.WeightsFile), filepath.Join(dir, hf.WeightsFile)); err != nil {
		t.Fatal(err)
	}
	if again, err := gpt.ReadAll(lazy.ReadParams, cfg.NumParams()); err != nil || !slices.Equal(again, params) {
		t.Fatalf("ReadParams after the file was replaced: %v", err)
	}
	lazy.Close()
	if err := lazy.ReadParams(func(int, []float32) error { return nil }); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("ReadParams after Close: %v, want an error saying the file was closed", err)
	}
	if _, err := hf.Write(dir, cfg, params, tokenizer.Byte()); err != nil { // back, for what follows
		t.Fatal(err)
	}
	again := t.TempDir()
	if _, err := hf.Write(again, m.Config, m.Params, tokenizer.Byte()); err != nil {
		t.Fatal(err)
	}
	// WriteFrom, handed the weights 7 values at a time (chunks that straddle tensors, the padded
	// rows and Conv1D weights), writes the same bytes; a reader that stops early or skips ahead
	// is refused.
	chunked := t.TempDir()
	if _, err := hf.WriteFrom(chunked, cfg, pieces(params, 7, len(params)), tokenizer.Byte()); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(dir, hf.WeightsFile))
	b, _ := os.ReadFile(filepath.Join(chunked, hf.WeightsFile))
	if !bytes.Equal(a, b) {
		t.Error("WriteFrom in 7-value chunks wrote other bytes than Write")
	}
	// A failed export over an existing one leaves that one whole: the weights are written before
	// config.json, so a config for other heads never sits beside the old weights.
	before := map[string][]byte{}
	for _, f := range w.Files {
		before[f], _ = os.ReadFile(filepath.Join(chunked, f))
	}
	otherHeads := cfg
	otherHeads.NumHeads = 5
	for name, read := range map[string]gpt.ParamsReader{
		"short": pieces(params, 7, len(params)-3),
		"a gap": func(sink func(int, []float32) error) error { return sink(5, params[5:]) },
	} {
		if _, err := hf.WriteFrom(chunked, otherHeads, read, nil); err == nil {
			t.Errorf("WriteFrom with a reader that gives %s: no error", name)
		}
		for f, b := range before {
			if now, _ := os.ReadFile(filepath.Join(chunked, f)); !bytes.Equal(now, b) {
				t.Errorf("a failed WriteFrom (%s) changed %s", name, f)
			}
		}
	}
	for _, f := range w.Files {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, _ := os.ReadFile(filepath.Join(again, f))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs after a second export", f)
		}
	}

	// What transformers reads: the config, and the tensors in save_pretrained's names and layout.
	var conf map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, hf.ConfigFile))
	if err := json.Unmarshal(raw, &conf); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{
		"model_type": "gpt2", "n_embd": 10.0, "n_layer": 3.0, "n_head": 2.0, "n_positions": 24.0, "n_ctx": 24.0,
		"vocab_size": 257.0, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "eos_token_id": 256.0,
		"tie_word_embeddings": true,
	} {
		if conf[k] != v {
			t.Errorf("config.json %s = %v, want %v", k, conf[k], v)
		}
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, hf.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata %v; transformers needs format pt", f.Metadata)
	}
	if len(f.Tensors) != 2+12*cfg.NumLayers+2 {
		t.Errorf("%d tensors, want %d (no lm_head, no buffers)", len(f.Tensors), 2+12*cfg.NumLayers+2)
	}
	wte, _ := f.Get("transformer.wte.weight")
	fc, ok := f.Get("transformer.h.1.mlp.c_fc.weight")
	if !ok || !slices.Equal(wte.Shape, []int{257, 10}) || !slices.Equal(fc.Shape, []int{10, 40}) {
		t.Fatalf("wte %v, c_fc %v; want [257 10] and the Conv1D layout [10 40]", wte.Shape, fc.Shape)
	}
	// c_fc.weight[i][o] is gpt2go's fcw[layer 1][o][i].
	x, _ := fc.Float32s()
	C := cfg.Channels
	offset := 0
	for _, s := range cfg.ParamSpecs() {
		if s.Name == "fcw" {
			break
		}
		offset += s.Size()
	}
	fcw := params[offset+4*C*C : offset+2*4*C*C]
	if x[3*4*C+7] != fcw[7*C+3] {
		t.Errorf("c_fc.weight[3][7] = %g, want gpt2go's fcw[1][7][3] = %g", x[3*4*C+7], fcw[7*C+3])
	}
}

// pieces reads params[:n] in chunks of k values.
func pieces(params []float32, k, n int) gpt.ParamsReader {
	return func(sink func(off int, chunk []float32) error) error {
		for off := 0; off < n; off += k {
			if err := sink(off, params[off:min(off+k, n)]); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestWriteRefuses(t *testing.T) {
	cfg := fixtureConfig
	if _, err := hf.Write(t.TempDir(), cfg, make([]float32, 5), nil); err == nil || !strings.Contains(err.Error(), "params") {
		t.Errorf("short params: %v", err)
	}
	cfg.NoPositionalEmbs = true
	if _, err := hf.Write(t.TempDir(), cfg, make([]float32, cfg.NumParams()), nil); err == nil || !strings.Contains(err.Error(), "position embeddings") {
		t.Errorf("no-pos-emb: %v", err)
	}
}

// TestReadErrors: each broken input gives one line naming the problem and the fix.
func TestReadErrors(t *testing.T) {
	drop := func(name string) func([]safetensors.Tensor) []safetensors.Tensor {
		return func(ts []safetensors.Tensor) []safetensors.Tensor {
			return slices.DeleteFunc(ts, func(t safetensors.Tensor) bool { return t.Name == name })
		}
	}
	set := func(key string, v any) func(map[string]any) { return func(c map[string]any) { c[key] = v } }
	empty := func(t *testing.T, files ...string) string {
		dir := t.TempDir()
		for _, f := range files {
			os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o644)
		}
		return dir
	}
	for _, c := range []struct {
		name string
		path func(t *testing.T) string
		want []string
	}{
		{"empty folder", func(t *testing.T) string { return empty(t) }, []string{"has no model.safetensors", "hf:openai-community/gpt2"}},
		{"only config.json", func(t *testing.T) string { return empty(t, "config.json") }, []string{"but no model.safetensors", "download the weights"}},
		{"pytorch_model.bin", func(t *testing.T) string { return empty(t, "config.json", "pytorch_model.bin") }, []string{"pytorch_model.bin", "safe_serialization=True"}},
		{"sharded", func(t *testing.T) string { return empty(t, "config.json", "model.safetensors.index.json") }, []string{"sharded"}},
		{"no config.json", func(t *testing.T) string {
			dir := variant(t, nil, nil)
			os.Remove(filepath.Join(dir, "config.json"))
			return dir
		}, []string{"no config.json", "config.json and model.safetensors"}},
		{"weights file alone", func(t *testing.T) string {
			dir := variant(t, nil, nil)
			os.Remove(filepath.Join(dir, "config.json"))
			return filepath.Join(dir, hf.WeightsFile)
		}, []string{"no config.json beside", "n_head"}},
		{"not GPT-2", func(t *testing.T) string { return variant(t, nil, set("model_type", "llama")) }, []string{`model_type "llama"`, "GPT-2 models only"}},
		{"config not JSON", func(t *testing.T) string {
			dir := variant(t, nil, nil)
			os.WriteFile(filepath.Join(dir, "config.json"), []byte("n_layer: 2"), 0o644)
			return dir
		}, []string{"not valid JSON"}},
		{"exact GELU", func(t *testing.T) string { return variant(t, nil, set("activation_function", "gelu")) }, []string{`activation_function "gelu"`, "gelu_new"}},
		{"other epsilon", func(t *testing.T) string { return variant(t, nil, set("layer_norm_epsilon", 1e-6)) }, []string{"layer_norm_epsilon", "1e-05"}},
		{"untied", func(t *testing.T) string { return variant(t, nil, set("tie_word_embeddings", false)) }, []string{"tie_word_embeddings"}},
		{"missing tensor", func(t *testing.T) string { return variant(t, drop("h.1.mlp.c_fc.bias"), nil) }, []string{"lacks tensor h.1.mlp.c_fc.bias", "not a complete GPT-2"}},
		{"wrong width", func(t *testing.T) string { return variant(t, nil, set("n_embd", 48)) }, []string{"has shape [99 36], want [99 48]", "do not belong together"}},
		{"too few layers in config", func(t *testing.T) string { return variant(t, nil, set("n_layer", 1)) }, []string{"h.1.", "n_layer 1"}},
		// Refused before listing 12 tensors per layer of config.json's, which took 25 s and 6 GB
		// for n_layer 1e6 and ran out of memory for 3e7.
		{"too many layers in config", func(t *testing.T) string { return variant(t, nil, set("n_layer", 1000)) }, []string{"holds layers up to h.1.", "n_layer 1000;"}},
		{"implausible n_layer", func(t *testing.T) string { return variant(t, nil, set("n_layer", 30_000_000)) }, []string{"n_layer 30000000 is implausible"}},
		{"implausible n_positions", func(t *testing.T) string { return variant(t, nil, set("n_positions", 1<<40)) }, []string{"block_size 1099511627776 is implausible"}},
		// Not GPT2Config's default 12, which divides n_embd 36 too: no shape would catch it.
		{"n_head null", func(t *testing.T) string { return variant(t, nil, set("n_head", nil)) }, []string{"n_head is null"}},
		{"n_layer null", func(t *testing.T) string { return variant(t, nil, set("n_layer", nil)) }, []string{"n_layer is null"}},
		{"heads do not divide", func(t *testing.T) string { return variant(t, nil, set("n_head", 5)) }, []string{"not divisible by n_head 5"}},
		{"untied lm_head", func(t *testing.T) string {
			return variant(t, func(ts []safetensors.Tensor) []safetensors.Tensor {
				ts = prefixed(ts)
				for i := range ts {
					if ts[i].Name == "lm_head.weight" {
						ts[i].Data = slices.Clone(ts[i].Data)
						ts[i].Data[100] ^= 1
					}
				}
				return ts
			}, nil)
		}, []string{"lm_head.weight differs from wte.weight", "ties them"}},
		{"both names", func(t *testing.T) string {
			return variant(t, func(ts []safetensors.Tensor) []safetensors.Tensor {
				extra := ts[len(ts)-1]
				extra.Name = "transformer." + extra.Name
				return append(ts, extra)
			}, nil)
		}, []string{"holds both"}},
		{"integer weights", func(t *testing.T) string {
			return variant(t, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == "ln_f.bias" {
						ts[i].DType = "I32"
					}
				}
				return ts
			}, nil)
		}, []string{"dtype I32"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.path(t)
			_, err := hf.Read(path)
			_, ierr := hf.Inspect(path)
			for _, e := range []error{err, ierr} {
				if c.name == "untied lm_head" && e == ierr {
					continue // Inspect reads no data
				}
				if e == nil {
					t.Fatalf("no error")
				}
				msg := e.Error()
				for _, w := range c.want {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q does not mention %q", msg, w)
					}
				}
				if strings.Contains(msg, "\n") {
					t.Errorf("error is not one line: %q", msg)
				}
			}
		})
	}
}

// TestIgnoredTensors: a head GPT-2's language model does not have (here a classifier's score) is
// skipped and reported.
func TestIgnoredTensors(t *testing.T) {
	dir := variant(t, func(ts []safetensors.Tensor) []safetensors.Tensor {
		return append(ts, safetensors.FromFloat32("score.weight", []int{2, 36}, make([]float32, 72)))
	}, nil)
	m, err := hf.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Ignored, []string{"score.weight"}) {
		t.Errorf("ignored %v, want [score.weight]", m.Ignored)
	}
}

func TestIsWeightsFile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(fixtureDir, hf.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), hf.WeightsFile)
	if err := os.WriteFile(truncated, raw[:len(raw)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		filepath.Join(fixtureDir, hf.WeightsFile): true,
		truncated:                                 true, // the header names GPT-2's tensors; Read says the file is cut short
		"testdata/expected.safetensors":           false,
		filepath.Join(fixtureDir, hf.ConfigFile):  false,
		"../gpt/testdata/ref_model.bin":           false,
		filepath.Join(fixtureDir, "no-such-file"): false,
	} {
		if got := hf.IsWeightsFile(path); got != want {
			t.Errorf("IsWeightsFile(%s) = %v, want %v", path, got, want)
		}
	}
}

// An export over an earlier one that fails half-way (its weights written, then config.json
// refused) leaves the earlier export as it was, every file, and no staging folder beside it: not
// the new weights beside the old config. With other files in the folder too (moved one at a
// time); those stay.
func TestWriteFailureKeepsOldExport(t *testing.T) {
	small := gpt.Config{BlockSize: 24, VocabSize: 257, PaddedVocabSize: 384, NumLayers: 1, NumHeads: 2, Channels: 10}
	big := small
	big.NumLayers = 3
	for _, extra := range []bool{false, true} {
		parent := t.TempDir()
		dir := filepath.Join(parent, "hf")
		if _, err := hf.Write(dir, big, randomModel(big, 1), tokenizer.Byte()); err != nil {
			t.Fatal(err)
		}
		if extra {
			os.WriteFile(filepath.Join(dir, "README.md"), []byte("mine"), 0o644)
		}
		snapshot := func() map[string][]byte {
			m := map[string][]byte{}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				m[e.Name()], _ = os.ReadFile(filepath.Join(dir, e.Name()))
			}
			return m
		}
		before := snapshot()
		restore := hf.SetWriteFile(func(path string, data []byte) error {
			if filepath.Base(path) == hf.ConfigFile {
				return errors.New("disk full")
			}
			return os.WriteFile(path, data, 0o644)
		})
		_, err := hf.Write(dir, small, randomModel(small, 2), tokenizer.Byte())
		restore()
		if err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("export with config.json failing: %v", err)
		}
		after := snapshot()
		if len(after) != len(before) {
			t.Errorf("other files: %v; the folder held %d files, now %d", extra, len(before), len(after))
		}
		for name, b := range before {
			if !bytes.Equal(after[name], b) {
				t.Errorf("other files: %v; %s changed by the failed export", extra, name)
			}
		}
		if m, err := hf.Read(dir); err != nil || m.Config != big {
			t.Errorf("other files: %v; the old export reads back as %+v (%v)", extra, m, err)
		}
		if entries, _ := os.ReadDir(parent); len(entries) != 1 {
			t.Errorf("other files: %v; left beside the export: %v", extra, entries)
		}
	}
}
