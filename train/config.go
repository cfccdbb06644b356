// Package train runs the training loop: batches from a data loader through the model's forward
// and backward passes, AdamW with warmup and a decay schedule, gradient clipping and accumulation,
// periodic validation, samples and checkpoints, exact resume, and the JSONL log.
package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/gpt"
)

// Config is everything that defines a training run. It is saved in RUNDIR/run.json and in every
// checkpoint, so a run can be resumed from the directory alone.
type Config struct {
	// Arch is the model family: "" or "gpt2" (a GPT-2 decoder trained on next-token
	// prediction) or "bert" (an encoder trained by masked-language modelling, task.go). Model
	// holds the sizes of either; Encoder the options only BERT has.
	Arch  string     `json:"arch,omitempty"`
	Model gpt.Config `json:"model"`
	// PadVocab is --pad-vocab as given to a resume, which ApplyOverrides checks against the
	// padding Model holds; a run records only the padded size.
	PadVocab int             `json:"-"`
	Encoder  *EncoderOptions `json:"encoder,omitempty"`
	Data     string          `json:"data"`           // prepared dataset: a directory or one shard
	Init     string          `json:"init,omitempty"` // pretrained weights the run started from (--init)
	// Tokenizer of the data, kept so checkpoints can be sampled without the dataset.
	Tokenizer *TokenizerInfo `json:"tokenizer,omitempty"`

	BatchSize int `json:"batch_size"`
	SeqLen    int `json:"seq_len"`
	GradAccum int `json:"grad_accum"`
	Steps     int `json:"steps"`

	LR          float64 `json:"lr"`
	MinLR       float64 `json:"min_lr"`
	Warmup      int     `json:"warmup"`
	Schedule    string  `json:"lr_schedule"` // cosine | linear | constant
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	WeightDecay float64 `json:"weight_decay"`
	GradClip    float64 `json:"grad_clip"` // 0 = off

	Seed    uint64 `json:"seed"`
	Shuffle bool   `json:"shuffle"`

	// Mixed precision (precision.go): fp32, tf32, bf16 or fp16 ("" in older runs: fp32); the
	// parameter gradients' format (fp32 or the 16-bit one), stochastic rounding of the 16-bit
	// parameter copy, and fp16's dynamic loss scaling.
	Precision          string          `json:"precision,omitempty"`
	GradPrecision      string          `json:"grad_precision,omitempty"`
	StochasticRounding bool            `json:"stochastic_rounding,omitempty"`
	LossScale          LossScaleConfig `json:"loss_scale"`

	EvalEvery    int    `json:"eval_every"`
	EvalBatches  int    `json:"eval_batches"`
	SampleEvery  int    `json:"sample_every"`
	SampleTokens int    `json:"sample_tokens"`
	CkptEvery    int    `json:"ckpt_every"`
	KeepCkpts    int    `json:"keep_ckpts"`
	LogEvery     int    `json:"log_every"`
	LogFile      string `json:"log_file,omitempty"`

	// HellaSwag scoring during training (see hellaswag.go): a jsonl file, every N steps, on the
	// first HellaSwagLimit items.
	HellaSwag      string `json:"hellaswag,omitempty"`
	HellaSwagEvery int    `json:"eval_hellaswag_every,omitempty"`
	HellaSwagLimit int    `json:"hellaswag_limit,omitempty"`

	// The data-parallel layout of the session that wrote this config: ranks and --zero. They
	// come from the launcher and the flags, not from a saved run (a resume may change them); a
	// checkpoint's State records the layout that trained it.
	WorldSize int `json:"world_size,omitempty"`
	Zero      int `json:"zero,omitempty"`
}

// EncoderOptions are a BERT run's model options beyond the sizes in Config.Model (see
// bert.Config).
type EncoderOptions struct {
	TypeVocabSize int  `json:"type_vocab_size"` // token types (segments); 0 = no token-type embedding
	PreLN         bool `json:"pre_ln,omitempty"`
	TanhGELU      bool `json:"gelu_tanh,omitempty"`
}

// Architectures names the model families of --arch.
var Architectures = []string{"gpt2", "bert"}

// IsBERT says whether the run trains a BERT encoder.
func (c Config) IsBERT() bool { return c.Arch == "bert" }

// BERT is the encoder's configuration of a BERT run.
func (c Config) BERT() bert.Config {
	var e EncoderOptions
	if c.Encoder != nil {
		e = *c.Encoder
	}
	m := c.Model
	return bert.Config{BlockSize: m.BlockSize, VocabSize: m.VocabSize, PaddedVocabSize: m.PaddedVocabSize,
		NumLayers: m.NumLayers, NumHeads: m.NumHeads, Channels: m.Channels, TypeVocabSize: e.TypeVocabSize,
		PreLN: e.PreLN, TanhGELU: e.TanhGELU, NoPositionalEmbs: m.NoPositionalEmbs}
}

// NumParams is the number of parameters of the run's model (padded vocabulary rows included).
func (c Config) NumParams() int {
	if c.IsBERT() {
		return c.BERT().NumParams()
	}
	return c.Model.NumParams()
}

// Defaults returns the optimizer and bookkeeping defaults (GPT-3 paper / llm.c style AdamW).
func Defaults() Config {
	return Config{
		BatchSize: 8, SeqLen: 64, GradAccum: 1, Steps: 1000,
		LR: 6e-4, MinLR: 0, Warmup: 0, Schedule: "cosine",
		Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradClip: 1.0,
		Seed: 1337, EvalEvery: 250, EvalBatches: 20, SampleEvery: 0, SampleTokens: 200,
		CkptEvery: 500, KeepCkpts: 3, LogEvery: 10, HellaSwagLimit: 100,
		LossScale: DefaultLossScale(),
	}
}

// Validate checks the training settings (the model config is validated by gpt).
func (c Config) Validate() error {
	if err := c.Model.Validate(); err != nil {
		return err
	}
	if err := c.validateArch(); err != nil {
		return err
	}
	if err := c.validatePrecision(); err != nil {
		return err
	}
	for _, f := range []struct {
		flag string
		v    float64
	}{{"lr", c.LR}, {"min-lr", c.MinLR}, {"beta1", c.Beta1}, {"beta2", c.Beta2}, {"eps", c.Eps},
		{"weight-decay", c.WeightDecay}, {"grad-clip", c.GradClip}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("--%s must be a finite number, got %g", f.flag, f.v)
		}
	}
	switch {
	case c.BatchSize < 1:
		return fmt.Errorf("--batch-size must be >= 1, got %d", c.BatchSize)
	case c.SeqLen < 1:
		return fmt.Errorf("--seq-len must be >= 1, got %d", c.SeqLen)
	case c.SeqLen > c.Model.BlockSize:
		return fmt.Errorf("--seq-len %d exceeds the model's block size %d; use --seq-len <= %d or a larger --block-size", c.SeqLen, c.Model.BlockSize, c.Model.BlockSize)
	case c.GradAccum < 1:
		return fmt.Errorf("--grad-accum must be >= 1, got %d", c.GradAccum)
	case c.Steps < 0:
		return fmt.Errorf("--steps must be >= 0, got %d", c.Steps)
	case !(c.LR > 0):
		return fmt.Errorf("--lr must be a positive number, got %g", c.LR)
	case c.MinLR < 0 || c.MinLR > c.LR:
		return fmt.Errorf("--min-lr %g must be in [0, --lr %g]; pass a --min-lr between them (the schedule ends there)", c.MinLR, c.LR)
	case c.Warmup < 0:
		return fmt.Errorf("--warmup must be >= 0, got %d", c.Warmup)
	case c.Schedule != "cosine" && c.Schedule != "linear" && c.Schedule != "constant":
		return fmt.Errorf("unknown --lr-schedule %q; use cosine, linear or constant", c.Schedule)
	case c.Beta1 < 0 || c.Beta1 >= 1 || c.Beta2 < 0 || c.Beta2 >= 1:
		return fmt.Errorf("--beta1 and --beta2 must be in [0,1), got %g and %g", c.Beta1, c.Beta2)
	case !(c.Eps > 0):
		return fmt.Errorf("--eps must be > 0, got %g", c.Eps)
	case c.WeightDecay < 0:
		return fmt.Errorf("--weight-decay must be >= 0, got %g", c.WeightDecay)
	case c.GradClip < 0:
		return fmt.Errorf("--grad-clip must be >= 0 (0 = off), got %g", c.GradClip)
	case c.EvalEvery < 0 || c.SampleEvery < 0 || c.CkptEvery < 0 || c.LogEvery < 0 || c.EvalBatches < 0 || c.KeepCkpts < 0 || c.SampleTokens < 0:
		return fmt.Errorf("--eval-every, --eval-batches, --sample-every, --sample-tokens, --ckpt-every, --keep-ckpts and --log-every must be >= 0")
	case c.EvalEvery > 0 && c.EvalBatches == 0:
		return fmt.Errorf("--eval-batches 0 validates on nothing, so --eval-every %d would never run; give --eval-batches >= 1, or --eval-every 0 for no validation", c.EvalEvery)
	case c.HellaSwagEvery < 0 || c.HellaSwagLimit < 0:
		return fmt.Errorf("--eval-hellaswag-every and --hellaswag-limit must be >= 0")
	case c.HellaSwagEvery > 0 && c.HellaSwag == "":
		return fmt.Errorf("--eval-hellaswag-every needs --hellaswag FILE.jsonl|val")
	}
	return nil
}

// ErrBERTHellaSwag refuses HellaSwag scoring (--eval-hellaswag-every) in a BERT run. The CLI gives
// it before it resolves --hellaswag, so that a BERT run never downloads the file.
var ErrBERTHellaSwag = errors.New("HellaSwag scores a language model's continuations; --arch bert has none (drop --eval-hellaswag-every)")

// validateArch checks what a BERT run cannot combine with yet.
func (c Config) validateArch() error {
	switch c.Arch {
	case "", "gpt2":
		if c.Encoder != nil {
			return fmt.Errorf("encoder options (--pre-ln, --gelu-tanh, --type-vocab-size) need --arch bert")
		}
		return nil
	case "bert":
	default:
		return fmt.Errorf("unknown --arch %q; use %s", c.Arch, strings.Join(Architectures, " or "))
	}
	switch {
	case c.SeqLen < 3:
		return fmt.Errorf("--seq-len %d is too short for BERT: a sequence is [CLS], at least one token, [SEP]; use --seq-len >= 3", c.SeqLen)
	case c.Init != "":
		return fmt.Errorf("--init loads GPT-2 weights; a BERT run starts from its own initialisation")
	case c.HellaSwagEvery > 0:
		return ErrBERTHellaSwag
	case c.Tokenizer == nil || c.Tokenizer.Specials == nil || c.Tokenizer.Specials.MASK < 0:
		return fmt.Errorf("--arch bert needs data with [CLS], [SEP] and [MASK]: prepare it with --bert-specials (gpt2, byte, char) or --tokenizer wordpiece --vocab vocab.txt")
	}
	return c.BERT().Validate()
}

// LRAt is the learning rate of the update with 0-based index step: linear warmup over Warmup
// steps to LR ((step+1)/Warmup, as llm.c and nanoGPT do), then the schedule from LR down to
// MinLR at index Steps, one past the last update (index Steps-1), as in llm.c: the last update
// runs a little above MinLR.
func (c Config) LRAt(step int) float64 {
	if step < c.Warmup {
		return c.LR * float64(step+1) / float64(c.Warmup)
	}
	if c.Schedule == "constant" || c.Steps <= c.Warmup {
		return c.LR
	}
	ratio := float64(step-c.Warmup) / float64(c.Steps-c.Warmup)
	ratio = min(max(ratio, 0), 1)
	switch c.Schedule {
	case "linear":
		return c.LR - (c.LR-c.MinLR)*ratio
	default: // cosine
		return c.MinLR + 0.5*(1+math.Cos(math.Pi*ratio))*(c.LR-c.MinLR)
	}
}

// resumeSafe lists the flags that may change when a run is resumed: they change what happens
// next, not the meaning of the saved state. Everything else (model shape, data, batch shape,
// seed, shuffling, init) must stay as saved.
var resumeSafe = map[string]bool{
	// The loader's position counts global batches, so the accumulation (and the world size) may
	// change: the run continues with another global batch, not bit-exactly.
	"grad-accum": true,
	"steps":      true, "lr": true, "min-lr": true, "warmup": true, "lr-schedule": true,
	"grad-clip": true, "weight-decay": true, "beta1": true, "beta2": true, "eps": true,
	"eval-every": true, "eval-batches": true, "sample-every": true, "sample-tokens": true,
	"ckpt-every": true, "keep-ckpts": true, "log-every": true, "log": true,
	"hellaswag": true, "eval-hellaswag-every": true, "hellaswag-limit": true,
	// The master weights and moments are fp32 in every precision, so a run can continue in
	// another one (on another device, say); the loss scaler carries on from its saved state.
	"precision": true, "grad-precision": true, "stochastic-rounding": true,
	"loss-scale": true, "loss-scale-growth": true, "loss-scale-backoff": true, "loss-scale-window": true,
}

// ApplyOverrides returns saved with the explicitly given flags of given applied. set holds the
// names of the flags the user gave. A flag that is not safe to change is an error unless its value
// equals the saved one.
func ApplyOverrides(saved, given Config, set map[string]bool) (Config, error) {
	out := saved
	var unsafe []string
	savedFields, givenFields := fieldsByFlag(&saved), fieldsByFlag(&given)
	outFields := fieldsByFlag(&out)
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "pad-vocab" {
			if p := gpt.PadVocab(saved.Model.VocabSize, given.PadVocab); p != saved.Model.PaddedVocabSize {
				unsafe = append(unsafe, fmt.Sprintf("--pad-vocab (the run pads its vocabulary of %d to %d, given %d)", saved.Model.VocabSize, saved.Model.PaddedVocabSize, p))
			}
			continue
		}
		g, ok := givenFields[name]
		if !ok {
			continue // flags that are not part of the run config (device, threads, ...)
		}
		if resumeSafe[name] {
			outFields[name].set(g.get())
			continue
		}
		if s := savedFields[name].get(); s != g.get() {
			unsafe = append(unsafe, fmt.Sprintf("--%s (saved %v, given %v)", name, s, g.get()))
		}
	}
	if len(unsafe) > 0 {
		return saved, &OverrideError{Flags: unsafe}
	}
	return out, out.Validate()
}

// OverrideError is ApplyOverrides' refusal of flags that would change what a saved run means.
type OverrideError struct {
	Flags []string // each "--name (saved S, given G)"
}

func (e *OverrideError) Error() string {
	return fmt.Sprintf("cannot change %s when resuming; start a new run with --out or --force", strings.Join(e.Flags, ", "))
}

type field struct {
	get func() any
	set func(any)
}

// fieldsByFlag maps CLI flag names to the config fields they set.
func fieldsByFlag(c *Config) map[string]field {
	f := map[string]field{}
	add := func(name string, get func() any, set func(any)) { f[name] = field{get, set} }
	intF := func(name string, p *int) { add(name, func() any { return *p }, func(v any) { *p = v.(int) }) }
	floatF := func(name string, p *float64) { add(name, func() any { return *p }, func(v any) { *p = v.(float64) }) }
	intF("batch-size", &c.BatchSize)
	intF("seq-len", &c.SeqLen)
	intF("grad-accum", &c.GradAccum)
	intF("steps", &c.Steps)
	floatF("lr", &c.LR)
	floatF("min-lr", &c.MinLR)
	intF("warmup", &c.Warmup)
	add("lr-schedule", func() any { return c.Schedule }, func(v any) { c.Schedule = v.(string) })
	floatF("beta1", &c.Beta1)
	floatF("beta2", &c.Beta2)
	floatF("eps", &c.Eps)
	floatF("weight-decay", &c.WeightDecay)
	floatF("grad-clip", &c.GradClip)
	add("seed", func() any { return c.Seed }, func(v any) { c.Seed = v.(uint64) })
	add("shuffle", func() any { return c.Shuffle }, func(v any) { c.Shuffle = v.(bool) })
	intF("eval-every", &c.EvalEvery)
	intF("eval-batches", &c.EvalBatches)
	intF("sample-every", &c.SampleEvery)
	intF("sample-tokens", &c.SampleTokens)
	intF("ckpt-every", &c.CkptEvery)
	intF("keep-ckpts", &c.KeepCkpts)
	intF("log-every", &c.LogEvery)
	add("log", func() any { return c.LogFile }, func(v any) { c.LogFile = v.(string) })
	add("hellaswag", func() any { return c.HellaSwag }, func(v any) { c.HellaSwag = v.(string) })
	intF("eval-hellaswag-every", &c.HellaSwagEvery)
	intF("hellaswag-limit", &c.HellaSwagLimit)
	add("data", func() any { return c.Data }, func(v any) { c.Data = v.(string) })
	add("init", func() any { return c.Init }, func(v any) { c.Init = v.(string) })
	for name, p := range map[string]*int{"n-layer": &c.Model.NumLayers, "n-head": &c.Model.NumHeads, "n-embd": &c.Model.Channels, "block-size": &c.Model.BlockSize, "vocab-size": &c.Model.VocabSize} {
		intF(name, p)
	}
	// --model changes the whole model config; compare it as one value. (--pad-vocab is compared
	// by ApplyOverrides.)
	add("model", func() any { return c.Model }, func(v any) { c.Model = v.(gpt.Config) })
	add("arch", func() any { // "" is gpt2, as --arch's default reads
		if c.Arch == "" {
			return "gpt2"
		}
		return c.Arch
	}, func(v any) { c.Arch = v.(string) })
	enc := func() EncoderOptions {
		if c.Encoder == nil {
			return EncoderOptions{}
		}
		return *c.Encoder
	}
	add("pre-ln", func() any { return enc().PreLN }, func(any) {})
	add("gelu-tanh", func() any { return enc().TanhGELU }, func(any) {})
	add("type-vocab-size", func() any { return enc().TypeVocabSize }, func(any) {})
	add("no-pos-emb", func() any { return c.Model.NoPositionalEmbs }, func(v any) { c.Model.NoPositionalEmbs = v.(bool) })
	add("precision", func() any { return c.Precision }, func(v any) { c.Precision = v.(string) })
	add("grad-precision", func() any { return c.GradPrecision }, func(v any) { c.GradPrecision = v.(string) })
	add("stochastic-rounding", func() any { return c.StochasticRounding }, func(v any) { c.StochasticRounding = v.(bool) })
	floatF("loss-scale", &c.LossScale.Init)
	floatF("loss-scale-growth", &c.LossScale.Growth)
	floatF("loss-scale-backoff", &c.LossScale.Backoff)
	intF("loss-scale-window", &c.LossScale.Window)
	return f
}

func (c Config) marshal() []byte {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		panic(err) // plain struct of numbers and strings
	}
	return b
}

// describeModel is the training log's line on the model.
func (c Config) describeModel() string {
	m := c.Model
	kind := "GPT-2"
	if c.IsBERT() {
		b := c.BERT()
		kind = "BERT encoder (post-LN"
		if b.PreLN {
			kind = "BERT encoder (pre-LN"
		}
		gelu := "erf GELU"
		if b.TanhGELU {
			gelu = "tanh GELU"
		}
		kind += fmt.Sprintf(", %s, %d token types; masked-language modelling)", gelu, b.TypeVocabSize)
	}
	return fmt.Sprintf("%s, %d layers, %d heads, %d channels, vocab %d (padded %d), block %d: %.2fM params",
		kind, m.NumLayers, m.NumHeads, m.Channels, m.VocabSize, m.PaddedVocabSize, m.BlockSize, float64(c.NumParams())/1e6)
}
