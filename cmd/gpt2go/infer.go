package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/hf"
	"github.com/gpt2go/gpt2go/internal/progress"
	"github.com/gpt2go/gpt2go/tokenizer"
	"github.com/gpt2go/gpt2go/train"
)

// loadFlags pick the weights: --ckpt RUNDIR|FILE or --init (train.InitHelp).
type loadFlags struct {
	ckpt, init, tokenizer string
	progress              io.Writer       // download bars for --init hf:OWNER/NAME
	ctx                   context.Context // cancels that download
}

// open checks the weights the flags name and leaves them in their file until the command reads
// them, straight into a model or an export (train.OpenWeights, train.OpenInit).
func (l *loadFlags) open() (*train.Loaded, error) {
	switch {
	case l.ckpt != "" && l.init != "":
		return nil, fmt.Errorf("give --ckpt or --init, not both")
	case l.ckpt != "":
		return train.OpenWeights(l.ckpt)
	case l.init != "":
		return train.OpenInit(l.ctx, l.init, l.progress)
	default:
		return nil, fmt.Errorf("no model: pass --ckpt RUNDIR|FILE or --init MODEL (%s)", train.InitHelp)
	}
}

// tok returns the tokenizer: --tokenizer if given, else the one the run recorded, else GPT-2's
// for models with GPT-2's vocabulary (llm.c files, Hugging Face GPT-2).
func (l *loadFlags) tok(m *train.Loaded) (tokenizer.Tokenizer, error) {
	if l.tokenizer != "" {
		switch l.tokenizer {
		case "gpt2", "byte":
		case "char", "wordpiece":
			return nil, fmt.Errorf("--tokenizer %s needs the run's own alphabet or vocab, which its checkpoints record: leave out --tokenizer with a checkpoint of a %s run", l.tokenizer, l.tokenizer)
		default:
			return nil, fmt.Errorf("unknown --tokenizer %q; use gpt2 or byte (a run's own tokenizer needs no flag)", l.tokenizer)
		}
		tok, err := tokenizer.New(l.tokenizer, "", true)
		if err == nil && !m.Config.VocabFits(tok.VocabSize()) {
			than := "more than"
			if tok.VocabSize() < m.Config.VocabSize {
				than = "far fewer than"
			}
			return nil, fmt.Errorf("--tokenizer %s has %d tokens, %s the model's %d: it was trained with another; pass the tokenizer the model was trained with", l.tokenizer, tok.VocabSize(), than, m.Config.VocabSize)
		}
		return tok, err
	}
	if m.Run != nil && m.Run.Tokenizer != nil {
		return m.Run.Tokenizer.Tokenizer()
	}
	if m.Config.VocabFits(50257) { // GPT-2's, maybe padded (nanoGPT: 50304)
		return tokenizer.GPT2()
	}
	if m.Config.VocabFits(tokenizer.Byte().VocabSize()) {
		return nil, fmt.Errorf("the model %s (vocab %d) has no recorded tokenizer; its vocabulary is the byte tokenizer's size: pass --tokenizer byte", m.Source, m.Config.VocabSize)
	}
	return nil, fmt.Errorf("the model %s (vocab %d) has no recorded tokenizer, and neither gpt2 (50257 tokens) nor byte (257) fits it: a char or wordpiece model's alphabet or vocab is recorded only in its run's checkpoints, so pass --ckpt RUNDIR of the run that trained it", m.Source, m.Config.VocabSize)
}

func runSample(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sample")
	var lf loadFlags
	var dev deviceFlags
	var prompt string
	var opts gpt.SampleOptions
	fs.StringVar(&lf.ckpt, "ckpt", "", "run directory (newest checkpoint) or checkpoint file; llm.c model files work too")
	fs.StringVar(&lf.init, "init", "", "pretrained weights: "+train.InitHelp)
	lf.ctx, lf.progress = ctx, stderr
	fs.StringVar(&lf.tokenizer, "tokenizer", "", "override the tokenizer: gpt2 or byte")
	fs.StringVar(&prompt, "prompt", "", "text to continue (default: start of a new document)")
	fs.IntVar(&opts.Tokens, "tokens", 256, "tokens to generate")
	fs.IntVar(&opts.Tokens, "max-new-tokens", 256, "the same as --tokens")
	var numSamples int
	fs.IntVar(&numSamples, "num-samples", 1, "samples generated together as one batch, each with its own random stream, printed one after another")
	fs.BoolVar(&opts.NoCache, "no-cache", false, "recompute the whole window for every token instead of using the KV cache (the slow path, to compare)")
	fs.Float64Var(&opts.Temperature, "temperature", train.SampleTemperature, "sampling temperature (0 = greedy)")
	fs.IntVar(&opts.TopK, "top-k", train.SampleTopK, "sample from the k most likely tokens (0 = all)")
	fs.Uint64Var(&opts.Seed, "seed", 42, "random seed")
	dev.register(fs)
	dev.registerInt8(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	switch {
	case opts.Tokens < 0:
		return fmt.Errorf("--tokens must be >= 0, got %d", opts.Tokens)
	case opts.TopK < 0:
		return fmt.Errorf("--top-k must be >= 0 (0: all tokens), got %d", opts.TopK)
	case !(opts.Temperature >= 0) || math.IsInf(opts.Temperature, 0):
		return fmt.Errorf("--temperature must be a finite number >= 0 (0: greedy), got %g", opts.Temperature)
	case numSamples < 1:
		return fmt.Errorf("--num-samples must be >= 1, got %d", numSamples)
	case opts.NoCache && numSamples > 1:
		return fmt.Errorf("--no-cache generates one sample at a time: leave out --num-samples %d or --no-cache", numSamples)
	}
	loaded, err := lf.open()
	if err != nil {
		return err
	}
	defer loaded.Close()
	tok, err := lf.tok(loaded)
	if err != nil {
		return err
	}
	var ids []int32
	if prompt == "" {
		ids = []int32{int32(train.StartToken(tok))}
	} else {
		if c, ok := tok.(*tokenizer.Char); ok {
			if err := c.Check([]byte(prompt)); err != nil {
				return fmt.Errorf("prompt: %w", err)
			}
		}
		for _, id := range tok.Encode([]byte(prompt)) {
			ids = append(ids, int32(id))
		}
		if len(ids) == 0 {
			return fmt.Errorf("the prompt encodes to no tokens")
		}
	}
	be, err := dev.open(stderr)
	if err != nil {
		return err
	}
	// With the KV cache the model's own activations go unused (the cache has its own), so they
	// are planned for one position; without it, for a whole window.
	planT := 1
	if opts.NoCache {
		planT = loaded.Config.BlockSize
	}
	model, err := dev.newModel(loaded, be, 1, planT, "")
	if err != nil {
		return err
	}
	err = printSamples(ctx, model, ids, prompt, tok, opts, numSamples, stdout, stderr)
	return backend.WithAdvice(err, sampleCacheAdvice(dev.modelPrecision(), backend.ElementBytes(be, backend.BF16) < backend.ElementBytes(be, backend.F32)))
}

// sampleCacheAdvice is what to change when the KV cache does not fit beside the loaded model:
// it is (samples, prompt + tokens up to the block size) positions in the compute format, which
// --int8 leaves as it is (the weights, which it shrinks, fitted already), and a 16-bit one
// halves where the backend stores 16-bit formats in 2 bytes (half16; the CPU keeps them in
// float32).
func sampleCacheAdvice(prec gpt.Precision, half16 bool) string {
	if prec.Mixed() || !half16 {
		return "use a smaller --num-samples or --tokens, or a smaller model"
	}
	return "use a smaller --num-samples or --tokens, a smaller model, or --precision bf16 (a KV cache of half the bytes)"
}

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval")
	var lf loadFlags
	var dev deviceFlags
	var dataPath, split string
	var batches, B, T int
	var asJSON bool
	var tasks evalTaskFlags
	fs.StringVar(&lf.ckpt, "ckpt", "", "run directory (newest checkpoint) or checkpoint file")
	fs.StringVar(&lf.init, "init", "", "pretrained weights: "+train.InitHelp)
	lf.ctx, lf.progress = ctx, stderr
	fs.StringVar(&dataPath, "data", "", "prepared dataset DIR or SHARD.bin")
	tasks.register(fs, &lf)
	fs.StringVar(&split, "split", "val", "with a dataset DIR: val or train (val falls back to train when the data has no val shards); a SHARD.bin is evaluated as it is")
	fs.IntVar(&batches, "batches", 20, "batches to evaluate, spread evenly over the split (0 = the whole split)")
	fs.IntVar(&B, "batch-size", 8, "sequences per batch")
	fs.IntVar(&T, "seq-len", 0, "tokens per sequence (default: the model's block size, at most 1024)")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object")
	dev.register(fs)
	dev.registerInt8(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	switch {
	case batches < 0:
		return fmt.Errorf("--batches must be >= 0 (0: the whole split), got %d", batches)
	case B < 1:
		return fmt.Errorf("--batch-size must be >= 1, got %d", B)
	case T < 0:
		return fmt.Errorf("--seq-len must be >= 0 (0: the model's block size), got %d", T)
	}
	if lf.ckpt != "" && lf.init == "" && train.RunArch(lf.ckpt) == "bert" { // whatever else is given
		return fmt.Errorf("%s is a BERT encoder (masked-language model), which eval cannot score (--data, --hellaswag and --text measure a GPT-2's next-token predictions); its run logs its own val_loss and val_acc (gpt2go plot or report), and gpt2go fill --ckpt %s --text \"... [MASK] ...\" shows its predictions", lf.ckpt, lf.ckpt)
	}
	if n := countSet(dataPath, tasks.hellaswag, tasks.text); n == 0 {
		return fmt.Errorf("nothing to evaluate on: pass --data DIR|SHARD.bin, --hellaswag FILE.jsonl|val or --text FILE")
	} else if n > 1 {
		return fmt.Errorf("give one of --data, --hellaswag and --text")
	}
	if err := tasks.unread(setFlags(fs)); err != nil {
		return err
	}
	loaded, err := lf.open()
	if err != nil {
		return err
	}
	defer loaded.Close()
	if T == 0 {
		T = min(loaded.Config.BlockSize, 1024)
	}
	if T > loaded.Config.BlockSize {
		return fmt.Errorf("--seq-len %d exceeds the model's block size %d", T, loaded.Config.BlockSize)
	}
	switch {
	case tasks.hellaswag != "":
		return tasks.runHellaSwag(ctx, loaded, &lf, &dev, T, asJSON, stdout, stderr)
	case tasks.text != "":
		return tasks.runText(ctx, loaded, &lf, &dev, B, T, asJSON, stdout, stderr)
	}
	shards, split, err := evalShards(dataPath, split, setFlags(fs)["split"])
	if err != nil {
		return err
	}
	if err := sameTokens(loaded, dataPath); err != nil {
		return err
	}
	loader, err := data.NewEvalLoader(shards, B, T, loaded.Config.VocabSize, batches)
	if err != nil {
		return err
	}
	defer loader.Close()
	if batches == 0 {
		batches = max(1, int(loader.Batches()))
	}
	if rows, windows := int64(batches)*int64(B), loader.Windows(); rows > windows {
		fmt.Fprintf(stderr, "note: the %s split holds %d distinct windows of %d tokens; the %d rows of %d batches repeat them (about %.1f times each)\n",
			split, windows, T+1, rows, batches, float64(rows)/float64(windows))
	}
	be, err := dev.open(stderr)
	if err != nil {
		return err
	}
	model, err := dev.newModel(loaded, be, B, T, "a smaller --batch-size or --seq-len, ", lossOnly(be)...)
	if err != nil {
		return err
	}
	// One batch per call so the bar can move; the sum is the same as train.Evaluate's over all.
	bar := progress.New(stderr, int64(batches), "eval", "batches")
	var sum float64
	for i := range batches {
		if ctx.Err() != nil {
			bar.Finish()
			return fmt.Errorf("interrupted after %d of %d batches", i, batches)
		}
		l, err := train.Evaluate(model, loader, B, T, 1)
		if err != nil {
			return err
		}
		sum += l
		bar.Add(1)
	}
	bar.Finish()
	loss := sum / float64(batches)
	res := map[string]any{"loss": loss, "perplexity": math.Exp(loss), "batches": batches, "tokens": batches * B * T, "split": split, "model": loaded.Source}
	if asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s loss %.4f | perplexity %.3f | %d batches x %d x %d tokens | %s\n", split, loss, math.Exp(loss), batches, B, T, loaded.Source)
	return nil
}

// checkReplaceable refuses an export onto files that are not an earlier export of the format:
// an existing llm.c --out must be an llm.c model file (any file was replaced, a training text
// once), and a config.json in an hf folder a model's config.
func checkReplaceable(out, format string) error {
	if format == "hf" {
		b, err := os.ReadFile(filepath.Join(out, hf.ConfigFile))
		var conf struct {
			ModelType string `json:"model_type"`
		}
		if err == nil && (json.Unmarshal(b, &conf) != nil || conf.ModelType == "") {
			return fmt.Errorf("--out %s holds a %s that is not a model's config; export into a new folder or an earlier export's", out, hf.ConfigFile)
		}
		return nil
	}
	f, err := os.Open(out)
	if err != nil {
		return nil // nothing to replace, or the write says what is wrong
	}
	defer f.Close()
	var magic int32
	if binary.Read(f, binary.LittleEndian, &magic) != nil || magic != gpt.LLMCMagic {
		return fmt.Errorf("--out %s exists and is not an llm.c model file; choose another path (an earlier export is replaced)", out)
	}
	return nil
}

// sameTokens refuses a prepared dataset at path whose ids mean other tokens to the model:
// another tokenizer than the one its run recorded, or (weights without a run) a vocabulary of
// another size. A shard file alone, or a dataset without meta.json, says nothing either way.
func sameTokens(m *train.Loaded, path string) error {
	meta, err := data.ReadMeta(path)
	if err != nil || meta == nil || meta.Tokenizer == "" {
		return nil
	}
	have := train.TokenizerInfoFromMeta(meta)
	if m.Run != nil && m.Run.Tokenizer != nil {
		if !m.Run.Tokenizer.SameIDs(have) {
			what := fmt.Sprintf("the %s tokenizer (%d tokens)", meta.Tokenizer, meta.VocabSize)
			if meta.Tokenizer == m.Run.Tokenizer.Name {
				what = fmt.Sprintf("a %s tokenizer with other ids (%d tokens)", meta.Tokenizer, meta.VocabSize)
			}
			return fmt.Errorf("the data %s is tokenized with %s, not the model's %s tokenizer: its ids would be read as other tokens; evaluate on data prepared with the model's tokenizer",
				path, what, m.Run.Tokenizer.Name)
		}
		return nil
	}
	if !m.Config.VocabFits(meta.VocabSize) {
		return fmt.Errorf("the model %s has a %d-token vocabulary, but the data %s has the %s tokenizer's %d: its ids would be read as other tokens; evaluate on data prepared with the model's tokenizer (--tokenizer gpt2 for GPT-2's)",
			m.Source, m.Config.VocabSize, path, meta.Tokenizer, meta.VocabSize)
	}
	return nil
}

// evalShards picks what eval --data reads: a prepared directory's val shards (its train shards
// with --split train, or when it has no val split), or exactly the one shard file given. The
// returned split names what was read, for the output line.
func evalShards(path, split string, splitSet bool) ([]string, string, error) {
	if split != "val" && split != "train" {
		return nil, "", fmt.Errorf("unknown --split %q; use val or train", split)
	}
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		if splitSet {
			return nil, "", fmt.Errorf("--split chooses among a dataset directory's shards; %s is one shard and is evaluated as it is: drop --split or pass its directory", path)
		}
		if _, err := data.ReadShardHeader(path); err != nil {
			return nil, "", err
		}
		return []string{path}, filepath.Base(path), nil
	}
	ds, err := data.Open(path)
	if err != nil {
		return nil, "", err
	}
	if split == "train" || len(ds.ValShards) == 0 {
		return ds.TrainShards, "train", nil
	}
	return ds.ValShards, "val", nil
}

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("export")
	var lf loadFlags
	var format, out string
	fs.StringVar(&lf.ckpt, "ckpt", "", "run directory (newest checkpoint) or checkpoint file")
	fs.StringVar(&lf.init, "init", "", "pretrained weights: "+train.InitHelp)
	fs.StringVar(&lf.tokenizer, "tokenizer", "", "hf: the tokenizer whose files to write, gpt2 or byte (default: the run's; GPT-2's for a 50257-token vocabulary)")
	fs.StringVar(&format, "format", "llmc", "output format: llmc (llm.c fp32 model file, version 3) or hf (a Hugging Face GPT-2 folder for GPT2LMHeadModel.from_pretrained)")
	fs.StringVar(&out, "out", "", "output file (llmc) or folder (hf)")
	lf.ctx, lf.progress = ctx, stderr
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if out == "" {
		return fmt.Errorf("no output: pass --out FILE (llmc) or --out DIR (hf)")
	}
	if format != "llmc" && format != "hf" {
		return fmt.Errorf("unknown --format %q; supported: llmc, hf", format)
	}
	if format == "llmc" && lf.tokenizer != "" {
		return fmt.Errorf("--tokenizer picks the tokenizer files of --format hf; an llm.c model file holds no tokenizer (leave out --tokenizer)")
	}
	if st, err := os.Stat(out); err == nil && st.IsDir() != (format == "hf") {
		if format == "hf" {
			return fmt.Errorf("--out %s is a file; --format hf writes a folder", out)
		}
		return fmt.Errorf("--out %s is a folder; --format llmc writes one file (--out %s), --format hf a folder", out, filepath.Join(out, "model.bin"))
	}
	if err := train.CheckOutput(out, "--out"); err != nil {
		return err
	}
	if err := checkReplaceable(out, format); err != nil {
		return err
	}
	loaded, err := lf.open() // the weights go from their file to the export a piece at a time
	if err != nil {
		return err
	}
	defer loaded.Close()
	if loaded.Config.NoPositionalEmbs {
		return fmt.Errorf("the model was trained without position embeddings, which the %s format cannot express", format)
	}
	params := fmt.Sprintf("%.2fM params", float64(loaded.Config.NumParams())/1e6)
	if format == "hf" {
		tok, err := lf.tok(loaded)
		if err != nil && lf.tokenizer != "" {
			return err
		}
		w, err := hf.WriteFrom(out, loaded.Config, loaded.ReadParams, tok) // tok nil: no tokenizer files
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (Hugging Face GPT-2: %s; %s, from %s)\n", out, strings.Join(w.Files, ", "), params, loaded.Source)
		if w.NoTokenizer != "" {
			fmt.Fprintf(stdout, "no tokenizer files: %s\n", w.NoTokenizer)
		}
		if len(w.Removed) > 0 {
			fmt.Fprintf(stdout, "removed the folder's old tokenizer files (another model's): %s\n", strings.Join(w.Removed, ", "))
		}
		return nil
	}
	if err := gpt.WriteLLMCFrom(out, loaded.Config, loaded.ReadParams); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (llm.c v3, %s, from %s)\n", out, params, loaded.Source)
	return nil
}
