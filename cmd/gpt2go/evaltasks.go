package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpt2go/gpt2go/eval"
	"github.com/gpt2go/gpt2go/internal/progress"
	"github.com/gpt2go/gpt2go/prepare"
	"github.com/gpt2go/gpt2go/train"
)

// evalTaskFlags are gpt2go eval's modes besides --data: HellaSwag and a text file.
type evalTaskFlags struct {
	hellaswag, text, cacheDir string
	limit                     int
}

func (e *evalTaskFlags) register(fs *flag.FlagSet, lf *loadFlags) {
	fs.StringVar(&e.hellaswag, "hellaswag", "", "score HellaSwag: a .jsonl file in the official format, or val (the official validation set, downloaded once into --cache-dir); the window is the longest item, at most --seq-len")
	fs.IntVar(&e.limit, "limit", 0, "with --hellaswag: score only the first N items (0 = all)")
	fs.StringVar(&e.text, "text", "", "mean loss and perplexity on a text file, tokenized with the run's tokenizer (windows of --seq-len)")
	fs.StringVar(&e.cacheDir, "cache-dir", "", "where --hellaswag val is kept (default ~/.cache/gpt2go)")
	fs.StringVar(&lf.tokenizer, "tokenizer", "", "with --hellaswag or --text: override the tokenizer (gpt2 or byte)")
}

// modeFlags are the eval flags that only some of its modes read, with those modes.
var modeFlags = []struct{ name, modes string }{
	{"split", "--data"},
	{"batches", "--data"},
	{"batch-size", "--data and --text"},
	{"limit", "--hellaswag"},
	{"tokenizer", "--hellaswag and --text"},
	{"cache-dir", "--hellaswag"},
}

// unread refuses a flag given (set) that the mode eval runs in (--hellaswag, --text, else
// --data) would ignore.
func (e *evalTaskFlags) unread(set map[string]bool) error {
	mode := "--data"
	switch {
	case e.hellaswag != "":
		mode = "--hellaswag"
	case e.text != "":
		mode = "--text"
	}
	for _, f := range modeFlags {
		if set[f.name] && !strings.Contains(f.modes, mode) {
			return fmt.Errorf("--%s is for eval %s; eval %s does not read it", f.name, f.modes, mode)
		}
	}
	return nil
}

// countSet counts the non-empty strings.
func countSet(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
}

// runHellaSwag scores a model on HellaSwag with a window of maxT tokens (--seq-len, default the
// block size), or the longest item if shorter, and the 4 candidates of an item in one batch.
func (e *evalTaskFlags) runHellaSwag(ctx context.Context, loaded *train.Loaded, lf *loadFlags, dev *deviceFlags, maxT int, asJSON bool, stdout, stderr io.Writer) error {
	if e.limit < 0 {
		return fmt.Errorf("--limit must be >= 0, got %d", e.limit)
	}
	tok, err := lf.tok(loaded)
	if err != nil {
		return err
	}
	path, err := prepare.ResolveHellaSwag(e.hellaswag, e.cacheDir, stderr)
	if err != nil {
		return err
	}
	items, err := eval.ReadHellaSwag(path, e.limit)
	if err != nil {
		return err
	}
	rendered := eval.Render(items, tok)
	window := eval.Window(rendered, maxT)
	be, err := dev.open(stderr)
	if err != nil {
		return err
	}
	model, err := dev.newModel(loaded, be, 4, window, "")
	if err != nil {
		return err
	}
	bar := progress.New(stderr, int64(len(rendered)), "hellaswag", "items")
	scorer := &eval.Scorer{Model: model, Rows: 4, Window: window}
	res, err := scorer.Run(ctx, rendered, func(done int) { bar.Set(int64(done)) })
	bar.Finish()
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"hellaswag": path, "acc": res.Acc, "acc_norm": res.AccNorm, "n": res.N, "correct": res.Correct,
			"correct_norm": res.CorrectNorm, "truncated": res.Truncated, "skipped": res.Skipped,
			"window": window, "model": loaded.Source,
		})
	}
	fmt.Fprintf(stdout, "hellaswag acc %.4f | acc_norm %.4f | n %d | %s | %s\n", res.Acc, res.AccNorm, res.N, path, loaded.Source)
	if note := res.Summary(); note != "" {
		fmt.Fprintf(stdout, "note: %s (window %d tokens)\n", note, window)
	}
	return nil
}

// runText is the loss and perplexity of a model on a text file, in non-overlapping windows of T
// tokens, B windows at a time.
func (e *evalTaskFlags) runText(ctx context.Context, loaded *train.Loaded, lf *loadFlags, dev *deviceFlags, B, T int, asJSON bool, stdout, stderr io.Writer) error {
	tok, err := lf.tok(loaded)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(e.text)
	if err != nil {
		return fmt.Errorf("text: %w", err)
	}
	ids, err := eval.EncodeText(tok, raw)
	if err != nil {
		return fmt.Errorf("text %s: %w", e.text, err)
	}
	be, err := dev.open(stderr)
	if err != nil {
		return err
	}
	B = min(B, (len(ids)-1+T-1)/T) // no larger than the text needs
	model, err := dev.newModel(loaded, be, B, T, "a smaller --batch-size or --seq-len, ", lossOnly(be)...)
	if err != nil {
		return err
	}
	bar := progress.New(stderr, int64(len(ids)-1), "eval", "tok")
	res, err := eval.TextLoss(ctx, model, ids, B, T, func(done int) { bar.Set(int64(done)) })
	bar.Finish()
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"text": e.text, "loss": res.Loss, "perplexity": res.Perplexity, "tokens": res.Tokens,
			"windows": res.Windows, "seq_len": T, "tokenizer": tok.Name(), "model": loaded.Source,
		})
	}
	windows := fmt.Sprintf("%d windows", res.Windows)
	if res.Windows == 1 {
		windows = "1 window"
	}
	fmt.Fprintf(stdout, "%s loss %.4f | perplexity %.3f | %d tokens (%s) in %s of <= %d | %s\n",
		e.text, res.Loss, res.Perplexity, res.Tokens, tok.Name(), windows, T, loaded.Source)
	return nil
}
