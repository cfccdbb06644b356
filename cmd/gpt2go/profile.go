package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/backend/profile"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/prepare"
	"github.com/gpt2go/gpt2go/train"
)

// runProfile times every op of a few training steps. It takes the train command's flags for the
// model and its steps, except that --steps counts profiled steps; not those of a run's
// bookkeeping (runBookkeeping), which it would ignore.
// With --run RUNDIR it profiles that run (its config and newest weights) and writes
// RUNDIR/profile.json for the run report.
func runProfile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("profile")
	cfg := train.Defaults()
	var mf modelFlags
	var dev deviceFlags
	var dataSpec, cacheDir, runDir, tracePath, jsonPath string
	var warmup int
	var byShape, noSync bool
	fs.StringVar(&dataSpec, "data", "", "batches from this data (as train's --data; default random byte tokens, vocab 257, and with --arch bert [PAD] [CLS] [SEP] [MASK] after them)")
	fs.StringVar(&cacheDir, "cache-dir", "", "where prepared corpora and downloads are kept (default ~/.cache/gpt2go)")
	fs.StringVar(&runDir, "run", "", "profile this run: its config and newest weights; writes RUNDIR/"+train.ProfileFile)
	fs.IntVar(&warmup, "warmup-steps", 1, "unrecorded steps first (--warmup is the learning-rate warmup)")
	fs.StringVar(&tracePath, "trace", "", "write a Chrome trace-event JSON timeline here (open in ui.perfetto.dev)")
	fs.StringVar(&jsonPath, "json", "", "write the result (table included) as JSON here (with --run: RUNDIR/"+train.ProfileFile+")")
	fs.BoolVar(&byShape, "by-shape", false, "one row per op and shape (tells the LM head's matmul from the layers')")
	fs.BoolVar(&noSync, "no-sync", false, "do not sync the backend after every op (op times of an asynchronous backend become launch times)")
	mf.register(fs)
	mf.registerArch(fs)
	stepFlags(fs, &cfg)
	dev.register(fs)
	fs.Lookup("vocab-size").Usage = "vocabulary size (default: the --data's; without --data 257 random byte tokens, with --arch bert 261)"
	steps := fs.Lookup("steps")
	steps.Usage, steps.DefValue = "profiled steps (after --warmup-steps)", "5"
	if err := steps.Value.Set(steps.DefValue); err != nil {
		return err
	}
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	set := setFlags(fs)
	if runDir == "" { // the schedule train would give these steps (--run takes the run's)
		if err := scheduleDefaults(&cfg, set, false); err != nil {
			return err
		}
	}
	if err := positiveVocab(set, mf.vocabSize); err != nil {
		return err
	}
	for _, o := range []struct{ flag, path, name string }{{"--trace", tracePath, "trace.json"}, {"--json", jsonPath, train.ProfileFile}} {
		if o.path == "" {
			continue
		}
		if err := checkOutputFile(o.path, o.flag, o.name); err != nil {
			return err
		}
	}

	opts := train.ProfileOptions{Warmup: warmup, Steps: cfg.Steps, ByShape: byShape, Progress: stderr,
		Profile: profile.Options{NoSync: noSync}}
	if runDir != "" {
		loaded, enc, err := train.OpenModel(runDir)
		if err != nil {
			return err
		}
		saved := loaded
		if enc != nil { // a BERT run
			defer enc.Close()
			saved = &train.Loaded{Run: enc.Run}
			opts.Params = enc.ReadParams
		} else {
			defer loaded.Close()
			opts.Params = loaded.ReadParams
		}
		if saved.Run == nil {
			return fmt.Errorf("--run %s holds no gpt2go run config", runDir)
		}
		if set["data"] {
			if cfg.Data, err = prepare.ResolveFor(ctx, dataSpec, cacheDir, stderr, saved.Run.IsBERT()); err != nil {
				return err
			}
		}
		if err := mf.asGivenFor(&cfg, set, saved.Run.Arch); err != nil {
			return err
		}
		if opts.Config, err = train.ApplyOverrides(*saved.Run, cfg, set); err != nil {
			if oe := (*train.OverrideError)(nil); errors.As(err, &oe) {
				return fmt.Errorf("--run profiles the run as it was configured, which %s would change; leave them out", strings.Join(oe.Flags, ", "))
			}
			return fmt.Errorf("--run %s: %w", runDir, err)
		}
		if _, err := data.Open(opts.Config.Data); err != nil {
			fmt.Fprintf(stderr, "profile: the run's data is unreadable (%v); using random tokens\n", err)
			opts.Config.Data = ""
		}
		if opts.Config.Data == "" && opts.Config.IsBERT() && opts.Config.Tokenizer == nil {
			opts.Config.Tokenizer = train.RandomTokensInfo(opts.Config.Model.VocabSize, true)
		}
		if !set["json"] {
			jsonPath = filepath.Join(runDir, train.ProfileFile)
		}
	} else {
		if mf.archName() == "bert" && mf.init != "" {
			return fmt.Errorf("--init loads GPT-2 weights; a BERT starts from its own initialisation (profile --run RUNDIR profiles a trained one)")
		}
		bert := mf.archName() == "bert"
		vocab := 257 // random bytes, like the default training corpus (presets bring their own vocab)
		if bert {
			vocab += 4 // and BERT's specials after them, as --bert-specials appends them
		}
		cfg.Tokenizer = train.RandomTokensInfo(vocab, bert)
		if dataSpec != "" {
			dir, ds, err := openData(ctx, dataSpec, cacheDir, stderr, bert)
			if err != nil {
				return err
			}
			if ds.Meta != nil {
				vocab = ds.Meta.VocabSize
				cfg.Tokenizer = train.TokenizerInfoFromMeta(ds.Meta)
			}
			cfg.Data = dir
		}
		if set["vocab-size"] {
			vocab = mf.vocabSize
		}
		var err error
		mf.ctx, mf.cacheDir, mf.progress = ctx, cacheDir, stderr
		if cfg.Model, err = mf.build(set, vocab); err != nil {
			return err
		}
		if cfg.Encoder, err = mf.encoder(set); err != nil {
			return err
		}
		cfg.Arch = mf.archName()
		if set["vocab-size"] && cfg.Data == "" {
			cfg.Tokenizer = train.RandomTokensInfo(cfg.Model.VocabSize, bert)
		}
		if !set["seq-len"] && cfg.SeqLen > cfg.Model.BlockSize {
			cfg.SeqLen = cfg.Model.BlockSize
		}
		cfg.Init = mf.init
		if mf.init != "" {
			loaded, err := train.OpenInit(ctx, mf.init, stderr)
			if err != nil {
				return err
			}
			defer loaded.Close()
			opts.Params = loaded.ReadParams
		}
		opts.Config = cfg
	}
	be, err := dev.open(stderr)
	if err != nil {
		return err
	}
	if runDir == "" || set["precision"] { // else the run's own precision
		opts.Config.Precision = dev.precision
	}
	if err := opts.Config.CheckLossScaleFlags(set); err != nil {
		return err
	}
	_, opts.GPU = be.(*cuda.Backend)
	res, err := train.Profile(ctx, be, opts)
	if err != nil {
		return err
	}
	c := res.Model
	fmt.Fprintf(stdout, "%s %d layers x %d heads x %d channels (%.1fM params), B=%d T=%d, %s, accum %d on %s\n",
		familyName(res.Arch), c.NumLayers, c.NumHeads, c.Channels, float64(opts.Config.NumParams())/1e6, res.BatchSize, res.SeqLen,
		precisionRun(opts.Config.PrecisionName(), res.Precision), res.GradAccum, res.Report.Backend)
	fmt.Fprintf(stdout, "%d profiled steps after %d warm-up: %.1f ms/step, %.0f tok/s; totals over the profiled steps:\n\n",
		res.Steps, res.WarmupSteps, res.StepMs, res.TokPerSec)
	if err := res.Report.WriteTable(stdout); err != nil {
		return err
	}
	sync := "the backend is synced after every op"
	if noSync {
		sync = "ops are not synced (--no-sync)"
	}
	fmt.Fprintf(stdout, "\nself %% is of the %.1f ms recorded and sums to 100; [scopes] include their children in total ms; %s\n",
		res.Report.WallMs, sync)
	if res.Report.PeakGFlops > 0 {
		fmt.Fprintf(stdout, "%% peak is of the backend's measured matmul peak, %.1f GFLOP/s\n", res.Report.PeakGFlops)
	}
	if res.Calls != nil {
		fmt.Fprintln(stdout, res.Calls)
	}
	for _, h := range res.Hints {
		fmt.Fprintf(stdout, "hint: %s\n", h)
	}
	if tracePath != "" {
		if err := writeJSONFile(tracePath, res.Trace); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", tracePath)
	}
	if jsonPath != "" {
		if err := writeJSONFile(jsonPath, res); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "json: %s\n", jsonPath)
	}
	return nil
}

// runBookkeeping are train's flags for what a run does besides its steps (validation, samples,
// checkpoints, the log, HellaSwag), which profile leaves out.
var runBookkeeping = []string{"eval-every", "eval-batches", "sample-every", "sample-tokens", "ckpt-every", "keep-ckpts",
	"log-every", "log", "hellaswag", "eval-hellaswag-every", "hellaswag-limit"}

// stepFlags binds train's flags to c, as trainFlags does, except runBookkeeping: profile times
// steps only, so that they would be accepted and ignored.
func stepFlags(fs *flag.FlagSet, c *train.Config) {
	all := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	trainFlags(all, c)
	all.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(runBookkeeping, f.Name) {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
}

// writeJSONFile writes v as JSON to path atomically.
func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
