package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/prepare"
	"github.com/gpt2go/gpt2go/train"
)

// The default run: a small byte-level model on the Go standard library's sources that trains in
// a few minutes on two CPU cores and writes recognisable Go.
const (
	defaultLayers    = 4
	defaultHeads     = 4
	defaultChannels  = 128
	defaultBlockSize = 128
)

// modelFlags are the flags that define the model architecture.
type modelFlags struct {
	arch, preset                                      string
	preLN, geluTanh                                   bool
	typeVocab                                         int
	nLayer, nHead, nEmbd, blockSize, vocabSize, padTo int
	noPosEmb                                          bool
	init                                              string
	// For --init hf:OWNER/NAME: where the download is kept and where its progress is shown.
	cacheDir string
	progress io.Writer
	ctx      context.Context // cancels the download
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.preset, "model", "", "preset: gpt2, gpt2-medium, gpt2-large, gpt2-xl; with --arch bert: bert-tiny, bert-mini, bert-small, bert-base (default: a small custom model)")
	fs.IntVar(&m.nLayer, "n-layer", defaultLayers, "transformer layers")
	fs.IntVar(&m.nHead, "n-head", defaultHeads, "attention heads")
	fs.IntVar(&m.nEmbd, "n-embd", defaultChannels, "embedding width (a multiple of --n-head)")
	fs.IntVar(&m.blockSize, "block-size", defaultBlockSize, "maximum sequence length (rows of the position embedding)")
	fs.IntVar(&m.vocabSize, "vocab-size", 0, "vocabulary size (default: from the data's meta.json)")
	fs.IntVar(&m.padTo, "pad-vocab", 0, "round the vocabulary up to a multiple of this (e.g. 64 or 128; padded logits are masked out of the loss)")
	fs.BoolVar(&m.noPosEmb, "no-pos-emb", false, "ablation: no learned position embeddings")
	fs.StringVar(&m.init, "init", "", "start from pretrained weights, which fix the architecture: "+train.InitHelp)
}

// registerArch adds the model-family flags (train, bench and profile).
func (m *modelFlags) registerArch(fs *flag.FlagSet) {
	fs.StringVar(&m.arch, "arch", "gpt2", "model family: gpt2 (decoder, next-token prediction) or bert (encoder, masked-language modelling; a prepared dataset needs --bert-specials or a wordpiece vocab, the default corpus, shakespeare and text files get them)")
	fs.BoolVar(&m.preLN, "pre-ln", false, "bert: LayerNorm before attention and MLP (GPT-2's order) instead of BERT's post-LN")
	fs.BoolVar(&m.geluTanh, "gelu-tanh", false, "bert: GELU's tanh approximation instead of BERT's exact erf")
	fs.IntVar(&m.typeVocab, "type-vocab-size", 2, "bert: token types (segment embeddings; 0 = none)")
}

// encoder returns a BERT run's encoder options, or nil for GPT-2 (an error if encoder flags were
// given without --arch bert).
func (m *modelFlags) encoder(set map[string]bool) (*train.EncoderOptions, error) {
	if m.arch != "bert" {
		for _, name := range []string{"pre-ln", "gelu-tanh", "type-vocab-size"} {
			if set[name] {
				return nil, fmt.Errorf("--%s is a BERT option; add --arch bert", name)
			}
		}
		return nil, nil
	}
	if m.typeVocab < 0 {
		return nil, fmt.Errorf("--type-vocab-size must be >= 0, got %d", m.typeVocab)
	}
	return &train.EncoderOptions{TypeVocabSize: m.typeVocab, PreLN: m.preLN, TanhGELU: m.geluTanh}, nil
}

// asGivenFor puts the model flags as given into cfg, for ApplyOverrides to compare with a saved
// run of family arch (train --resume, profile --run): --arch, the encoder options, --model as
// the shape it stands for, and the shape flags.
func (m *modelFlags) asGivenFor(cfg *train.Config, set map[string]bool, arch string) error {
	cfg.Arch = m.archName()
	cfg.Encoder = &train.EncoderOptions{TypeVocabSize: m.typeVocab, PreLN: m.preLN, TanhGELU: m.geluTanh}
	if err := m.presetAsShape(set, arch); err != nil {
		return err
	}
	m.givenShape(&cfg.Model, set)
	cfg.PadVocab = m.padTo
	return nil
}

// presetAsShape turns --model, given for a saved run of family arch, into the shape flags it
// stands for, which ApplyOverrides compares with the run's (a preset's vocabulary and block
// size are not the run's to compare: those come from its data and flags).
func (m *modelFlags) presetAsShape(set map[string]bool, arch string) error {
	if !set["model"] {
		return nil
	}
	var L, H, C int
	if arch == "bert" {
		c, err := bert.Preset(m.preset)
		if err != nil {
			return err
		}
		L, H, C = c.NumLayers, c.NumHeads, c.Channels
	} else {
		c, err := gpt.Preset(m.preset)
		if err != nil {
			return err
		}
		L, H, C = c.NumLayers, c.NumHeads, c.Channels
	}
	for flag, p := range map[string][2]*int{"n-layer": {&m.nLayer, &L}, "n-head": {&m.nHead, &H}, "n-embd": {&m.nEmbd, &C}} {
		if !set[flag] {
			*p[0], set[flag] = *p[1], true
		}
	}
	delete(set, "model")
	return nil
}

// givenShape copies the shape flags that were given (set) into cfg, for ApplyOverrides to
// compare with a saved run's.
func (m *modelFlags) givenShape(cfg *gpt.Config, set map[string]bool) {
	for name, p := range map[string][2]*int{
		"n-layer": {&cfg.NumLayers, &m.nLayer}, "n-head": {&cfg.NumHeads, &m.nHead}, "n-embd": {&cfg.Channels, &m.nEmbd},
		"block-size": {&cfg.BlockSize, &m.blockSize}, "vocab-size": {&cfg.VocabSize, &m.vocabSize},
	} {
		if set[name] {
			*p[0] = *p[1]
		}
	}
	if set["no-pos-emb"] {
		cfg.NoPositionalEmbs = m.noPosEmb
	}
}

// archName is --arch as a run records it: "" for GPT-2 (as runs from before --arch read).
func (m *modelFlags) archName() string {
	if m.arch == "gpt2" {
		return ""
	}
	return m.arch
}

// build returns the model config the flags describe; dataVocab is the data's vocabulary size
// (0 if unknown).
func (m *modelFlags) build(set map[string]bool, dataVocab int) (gpt.Config, error) {
	var cfg gpt.Config
	switch {
	case m.init != "":
		path, err := train.ResolveInit(m.ctx, m.init, m.cacheDir, m.progress)
		if err != nil {
			return cfg, err
		}
		m.init = path // a run records the local copy, as it records the prepared data
		c, err := train.InitConfig(m.ctx, m.init, m.progress)
		if err != nil {
			return cfg, err
		}
		if set["model"] || set["pad-vocab"] {
			return cfg, fmt.Errorf("--model and --pad-vocab cannot be combined with --init (its model fixes the architecture)")
		}
		for name, pair := range map[string][2]int{
			"n-layer": {m.nLayer, c.NumLayers}, "n-head": {m.nHead, c.NumHeads}, "n-embd": {m.nEmbd, c.Channels},
			"block-size": {m.blockSize, c.BlockSize}, "vocab-size": {m.vocabSize, c.VocabSize},
		} {
			if set[name] && pair[0] != pair[1] {
				return cfg, fmt.Errorf("--%s %d contradicts --init %s, which has %d", name, pair[0], m.init, pair[1])
			}
		}
		c.NoPositionalEmbs = m.noPosEmb
		return c, nil
	case m.preset != "" && m.arch == "bert":
		c, err := bertPreset(m.preset)
		if err != nil {
			return cfg, err
		}
		// The sizes of the preset, the vocabulary of the data (below).
		cfg = gpt.Config{NumLayers: c.NumLayers, NumHeads: c.NumHeads, Channels: c.Channels, BlockSize: m.blockSize, VocabSize: dataVocab}
	case m.preset != "":
		c, err := gptPreset(m.preset)
		if err != nil {
			return cfg, err
		}
		cfg = c
	default:
		cfg = gpt.Config{NumLayers: m.nLayer, NumHeads: m.nHead, Channels: m.nEmbd, BlockSize: m.blockSize, VocabSize: dataVocab}
	}
	if m.preset != "" { // explicit shape flags refine a preset
		if set["n-layer"] {
			cfg.NumLayers = m.nLayer
		}
		if set["n-head"] {
			cfg.NumHeads = m.nHead
		}
		if set["n-embd"] {
			cfg.Channels = m.nEmbd
		}
		if set["block-size"] {
			cfg.BlockSize = m.blockSize
		}
	}
	if set["vocab-size"] {
		if dataVocab > 0 && m.vocabSize != dataVocab { // every id a model has must be one its data has
			return cfg, fmt.Errorf("--vocab-size %d differs from the data's vocabulary of %d tokens (its meta.json); leave it out, or round it up for speed with --pad-vocab 64 (padded logits are masked)", m.vocabSize, dataVocab)
		}
		cfg.VocabSize = m.vocabSize
	}
	if cfg.VocabSize == 0 {
		return cfg, fmt.Errorf("vocabulary size unknown: the data has no meta.json; pass --vocab-size (50257 for GPT-2 tokens)")
	}
	switch {
	case m.padTo > 0:
		cfg.PaddedVocabSize = gpt.PadVocab(cfg.VocabSize, m.padTo)
	case m.padTo < 0:
		return cfg, fmt.Errorf("--pad-vocab must be >= 0, got %d", m.padTo)
	case cfg.PaddedVocabSize < cfg.VocabSize:
		cfg.PaddedVocabSize = cfg.VocabSize
	}
	cfg.NoPositionalEmbs = m.noPosEmb
	return cfg, cfg.Validate()
}

// trainFlags binds the training flags to a Config.
func trainFlags(fs *flag.FlagSet, c *train.Config) {
	fs.IntVar(&c.BatchSize, "batch-size", 8, "sequences per micro-batch (B)")
	fs.IntVar(&c.SeqLen, "seq-len", defaultBlockSize, "tokens per sequence (T)")
	fs.IntVar(&c.GradAccum, "grad-accum", c.GradAccum, "micro-batches per optimizer step")
	fs.IntVar(&c.Steps, "steps", 4000, "optimizer steps")
	fs.Float64Var(&c.LR, "lr", 3e-3, "peak learning rate")
	fs.Float64Var(&c.MinLR, "min-lr", 0, "learning rate the schedule decays towards, reached after the last step (default: --lr / 10)")
	fs.IntVar(&c.Warmup, "warmup", defaultWarmup, "linear warmup steps (default 50, or a tenth of --steps when --steps is under 50)")
	fs.StringVar(&c.Schedule, "lr-schedule", c.Schedule, "cosine, linear or constant (after warmup)")
	fs.Float64Var(&c.Beta1, "beta1", c.Beta1, "AdamW beta1")
	fs.Float64Var(&c.Beta2, "beta2", c.Beta2, "AdamW beta2")
	fs.Float64Var(&c.Eps, "eps", c.Eps, "AdamW epsilon")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "AdamW weight decay (2-D weights only)")
	fs.Float64Var(&c.GradClip, "grad-clip", c.GradClip, "clip the global gradient norm to this (0 = off)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed (init, shuffling)")
	fs.BoolVar(&c.Shuffle, "shuffle", true, "sample random windows (nanoGPT); --shuffle=false reads the stream in order (llm.c)")
	fs.IntVar(&c.EvalEvery, "eval-every", 250, "validate every N steps (0 = never)")
	fs.IntVar(&c.EvalBatches, "eval-batches", c.EvalBatches, "validation batches per evaluation")
	fs.IntVar(&c.SampleEvery, "sample-every", 1000, "print a text sample every N steps (0 = only at the end)")
	fs.IntVar(&c.SampleTokens, "sample-tokens", 400, "tokens per sample (0 = no samples)")
	fs.IntVar(&c.CkptEvery, "ckpt-every", 500, "checkpoint every N steps (0 = only at the end)")
	fs.IntVar(&c.KeepCkpts, "keep-ckpts", c.KeepCkpts, "keep the newest K checkpoints besides step 0 (0 = all)")
	fs.IntVar(&c.LogEvery, "log-every", c.LogEvery, "print a log line every N steps")
	fs.StringVar(&c.LogFile, "log", "", "JSONL log file (default RUNDIR/log.jsonl)")
	fs.StringVar(&c.HellaSwag, "hellaswag", "", "HellaSwag .jsonl file, or val (the official validation set, downloaded once), for --eval-hellaswag-every")
	fs.IntVar(&c.HellaSwagEvery, "eval-hellaswag-every", 0, "score HellaSwag every N steps and at the end, logging hellaswag_acc and hellaswag_acc_norm (0 = never)")
	fs.IntVar(&c.HellaSwagLimit, "hellaswag-limit", c.HellaSwagLimit, "HellaSwag items scored during training: the first N (0 = all)")
	fs.StringVar(&c.GradPrecision, "grad-precision", "fp32", "with --precision bf16|fp16: parameter gradients in fp32, or in the 16-bit format (bf16, fp16)")
	fs.BoolVar(&c.StochasticRounding, "stochastic-rounding", false, "with --precision bf16|fp16: round the 16-bit parameter copy stochastically from the fp32 master")
	fs.Float64Var(&c.LossScale.Init, "loss-scale", c.LossScale.Init, "fp16 only: initial dynamic loss scale, a power of two (scaling by one is exact)")
	fs.Float64Var(&c.LossScale.Growth, "loss-scale-growth", c.LossScale.Growth, "fp16 only: multiply the loss scale by this power of two after --loss-scale-window clean steps")
	fs.Float64Var(&c.LossScale.Backoff, "loss-scale-backoff", c.LossScale.Backoff, "fp16 only: multiply the loss scale by this power of two when a gradient is inf/NaN (the step is skipped)")
	fs.IntVar(&c.LossScale.Window, "loss-scale-window", c.LossScale.Window, "fp16 only: clean steps in a row before the loss scale grows")
}

const defaultWarmup = 50

// scheduleDefaults fills in the schedule flags whose defaults follow others: --min-lr is a tenth
// of --lr (nanoGPT's rule), and the warmup is shortened for runs shorter than it, so that the
// learning rate reaches --lr. With strict (train), an explicit --warmup longer than --steps is an
// error; profile's --steps counts profiled steps, not a schedule's. A run of --steps 0 (its
// initial weights only) keeps the default warmup for the steps a resume gives it.
func scheduleDefaults(c *train.Config, set map[string]bool, strict bool) error {
	if !set["min-lr"] {
		c.MinLR, _ = strconv.ParseFloat(strconv.FormatFloat(c.LR/10, 'g', 12, 64), 64) // 3e-4, not 3.0000000000000003e-4
	}
	if c.Warmup > c.Steps && c.Steps > 0 {
		if set["warmup"] {
			if strict {
				return fmt.Errorf("--warmup %d is longer than --steps %d: the learning rate would never reach --lr; use --warmup <= %d", c.Warmup, c.Steps, c.Steps)
			}
			return nil
		}
		c.Warmup = c.Steps / 10
	}
	return nil
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("train")
	cfg := train.Defaults()
	var mf modelFlags
	var dev deviceFlags
	var df distFlags
	var dataSpec, out, resume, cacheDir, cpuProfile string
	var force, tensorBoard bool
	var stopAt int
	fs.StringVar(&dataSpec, "data", "go", "training data: go (the Go standard library's sources, bytes), shakespeare (chars), a text file (chars), a prepared DIR or a SHARD.bin")
	fs.StringVar(&out, "out", "", "run directory (default runs/YYYYMMDD-HHMMSS)")
	fs.StringVar(&resume, "resume", "", "continue the run in this directory from its newest good checkpoint")
	fs.BoolVar(&force, "force", false, "start a new run in --out even if it holds one (deletes its checkpoints and log)")
	fs.StringVar(&cacheDir, "cache-dir", "", "where prepared corpora and downloads are kept (default ~/.cache/gpt2go)")
	fs.IntVar(&stopAt, "stop-at", 0, "checkpoint and stop after this step, keeping the schedule of --steps (resume later)")
	fs.BoolVar(&tensorBoard, "tensorboard", true, "also write the log's numbers and the samples as TensorBoard events in the run directory")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the whole run to this file (go tool pprof)")
	mf.register(fs)
	mf.registerArch(fs)
	trainFlags(fs, &cfg)
	dev.register(fs)
	dev.registerGraphs(fs)
	df.register(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if err := df.readEnv(); err != nil {
		return err
	}
	if df.env.Distributed() || df.zero == 1 { // before the device and the data: it would fail at step 1
		if err := train.CheckGradExchange(cfg.GradPrecision, max(df.env.Size, 1), df.zero == 1); err != nil {
			return err
		}
	}
	set := setFlags(fs)
	if stopAt < 0 {
		return fmt.Errorf("--stop-at must be a step >= 1 (0 = run to --steps), got %d", stopAt)
	}
	if cfg.LogFile != "" { // run.json records it; plot and report read it from anywhere
		if cfg.LogFile, err = filepath.Abs(cfg.LogFile); err != nil {
			return err
		}
	}
	if resume == "" {
		if err := scheduleDefaults(&cfg, set, true); err != nil {
			return err
		}
	}
	if mf.archName() == "bert" && mf.init != "" { // before preparing data or downloading weights
		return fmt.Errorf("--init loads GPT-2 weights; a BERT run starts from its own initialisation")
	}
	resumeDir, bertData := "", mf.archName() == "bert"
	if resume != "" { // before the device starts: a wrong run should not wait for it
		if resumeDir, err = train.ResumeDir(resume); err != nil {
			return err
		}
		if set["out"] && !samePath(out, resume) && !samePath(out, resumeDir) {
			return fmt.Errorf("--out %s and --resume %s name different runs; give just --resume", out, resume)
		}
		if set["force"] {
			return fmt.Errorf("--force and --resume contradict each other")
		}
		if set["init"] {
			return fmt.Errorf("--init starts a new run from other weights; --resume continues from the run's own (leave --init out, or start a run with --out)")
		}
		if !set["arch"] { // the run's own family decides how --data is prepared
			bertData = train.SavedArch(resumeDir) == "bert"
		}
	}
	if cpuProfile != "" { // before data is prepared: a wrong path should not wait for it
		if err := checkProfileOutput(cpuProfile); err != nil {
			return err
		}
	}
	if bertData && cfg.HellaSwagEvery > 0 { // before --hellaswag val is downloaded
		return train.ErrBERTHellaSwag
	}
	// The backend first: with several ranks it carries the communicator, which orders the
	// ranks' data preparation (rank 0 first).
	dev.job = df.env
	devNote := stderr
	if df.env.Rank != 0 {
		devNote = io.Discard // one "device:" line per job, not per rank
	}
	be, err := dev.open(devNote)
	if err != nil {
		return err
	}
	if err := df.open(be, stderr); err != nil {
		return err
	}
	if df.comm != nil {
		defer df.comm.Close()
		// A rank's error ends every rank, in one line naming the rank. So does a panic, here,
		// before Close (MPI_Finalize, a collective) would wait on ranks that wait on this one.
		defer func() {
			if r := recover(); r != nil {
				df.panicked(r, stderr)
			}
			err = df.fail(err, stderr)
		}()
		if df.comm.Rank() != 0 {
			stdout = io.Discard // rank 0 speaks for the job
		}
	}
	if cfg.HellaSwag != "" {
		err := df.rank0First(func() error {
			path, err := prepare.ResolveHellaSwag(cfg.HellaSwag, cacheDir, stderr)
			cfg.HellaSwag = path
			return err
		})
		if err != nil {
			return err
		}
	}

	opts := train.Options{Set: set, Out: stdout, Version: version, StopAt: stopAt, TensorBoard: tensorBoard}
	if resume != "" {
		opts.RunDir, opts.Resume = resumeDir, true
		if set["data"] { // compare the resolved dataset with the saved one
			err := df.rank0First(func() error {
				dir, err := prepare.ResolveFor(ctx, dataSpec, cacheDir, stderr, bertData)
				cfg.Data = dir
				return err
			})
			if err != nil {
				return err
			}
		}
		if err := mf.asGivenFor(&cfg, set, train.SavedArch(resumeDir)); err != nil {
			return err
		}
	} else {
		var dir string
		var ds *data.Dataset
		err := df.rank0First(func() (err error) {
			dir, ds, err = openData(ctx, dataSpec, cacheDir, stderr, bertData)
			return err
		})
		if err != nil {
			return err
		}
		dataVocab := 0
		if ds.Meta != nil {
			dataVocab = ds.Meta.VocabSize
			cfg.Tokenizer = train.TokenizerInfoFromMeta(ds.Meta)
		}
		mf.ctx, mf.cacheDir, mf.progress = ctx, cacheDir, stderr
		if cfg.Model, err = mf.build(set, dataVocab); err != nil {
			return err
		}
		if cfg.Encoder, err = mf.encoder(set); err != nil {
			return err
		}
		cfg.Arch = mf.archName()
		if !set["seq-len"] && cfg.SeqLen > cfg.Model.BlockSize {
			cfg.SeqLen = cfg.Model.BlockSize
		}
		cfg.Data, cfg.Init = dir, mf.init
		if out == "" {
			if df.comm != nil {
				return fmt.Errorf("data parallel runs need --out RUNDIR (each rank would name its own default)")
			}
			out = filepath.Join("runs", time.Now().Format("20060102-150405"))
		}
		opts.RunDir, opts.Force = out, force
	}
	cfg.Precision = dev.precision // used unless resuming without --precision (then the run's own)
	opts.Backend, opts.Config = be, cfg
	opts.Comm, opts.Zero, opts.OverlapGrads = df.comm, df.zero == 1, df.overlap
	opts.NoGraphs = !dev.graphs
	stop, err := startCPUProfile(cpuProfile)
	if err != nil {
		return err
	}
	beforeTrainRun()
	sum, err := train.Run(ctx, opts)
	perr := stop() // a profile that failed fails the command, after the run's summary
	if err != nil {
		if perr != nil {
			fmt.Fprintf(stderr, "warning: %v\n", perr)
		}
		return err
	}
	val := "n/a"
	if !math.IsNaN(float64(sum.LastValLoss)) {
		val = fmt.Sprintf("%.4f", sum.LastValLoss)
	}
	if !math.IsNaN(sum.LastValAcc) {
		val += fmt.Sprintf(", val masked-token accuracy %.4f", sum.LastValAcc)
	}
	if sum.Steps == 0 {
		fmt.Fprintf(stdout, "done: no steps trained (--steps 0); initial weights in checkpoint %s\n", sum.Checkpoint)
	} else {
		fmt.Fprintf(stdout, "done: %d steps, train loss %.4f, val loss %s, %.1f ms/step; checkpoint %s\n",
			sum.Steps, sum.LastLoss, val, sum.MsPerStep, sum.Checkpoint)
	}
	run := shellQuote(opts.RunDir)
	use := "sample --ckpt " + run
	if sum.Arch == "bert" {
		use = fmt.Sprintf("fill --ckpt %s --text \"...[MASK]...\"", run)
	}
	next := "gpt2go train --resume " + run
	if sum.Steps >= sum.Planned { // done; stopped early (--stop-at), it continues to its --steps
		next += " --steps N"
	}
	fmt.Fprintf(stdout, "next: gpt2go %s   |   %s\n", use, next)
	return perr
}

// samePath reports whether a and b name the same path, relative or absolute.
func samePath(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// shellQuote returns path as a shell reads it back: as it is when it holds only characters no
// shell treats specially, else in single quotes.
func shellQuote(path string) string {
	if path != "" && strings.Trim(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+,:@%=") == "" {
		return path
	}
	return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
}

// openData resolves a --data spec (a prepared directory, a shard, a text file, `go` or
// `shakespeare`), preparing it into the cache when needed (with BERT's special tokens for an
// encoder), and opens the dataset.
func openData(ctx context.Context, spec, cacheDir string, progress io.Writer, bert bool) (string, *data.Dataset, error) {
	dir, err := prepare.ResolveFor(ctx, spec, cacheDir, progress, bert)
	if err != nil {
		return "", nil, err
	}
	ds, err := data.Open(dir)
	if err != nil {
		return "", nil, err
	}
	if ds.Meta != nil && ds.Meta.Tokenizer != "" { // caught now, not when a sample first decodes
		if _, err := ds.Tokenizer(); err != nil {
			return "", nil, fmt.Errorf("data %s: its %s names a tokenizer gpt2go cannot rebuild (%v); prepare it again", dir, data.MetaFile, err)
		}
	}
	return dir, ds, nil
}

// beforeTrainRun runs just before train.Run: a test makes it panic on one rank.
var beforeTrainRun = func() {}
