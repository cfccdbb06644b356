package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gpt2go/gpt2go/prepare"
	"github.com/gpt2go/gpt2go/tokenizer"
	"github.com/gpt2go/gpt2go/train"
)

func runPrepare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("prepare")
	var inputs stringList
	opts := prepare.Options{Progress: stderr}
	fs.Var(&inputs, "input", "text file or directory (repeatable)")
	fs.StringVar(&opts.Out, "out", "", "output directory for train_*.bin, val_*.bin and meta.json")
	fs.StringVar(&opts.Tokenizer, "tokenizer", "gpt2", "tokenizer: "+strings.Join(tokenizer.Names, ", "))
	fs.StringVar(&opts.Vocab, "vocab", "", "wordpiece: BERT vocab.txt, one token per line (recorded whole in meta.json)")
	fs.BoolVar(&opts.Cased, "cased", false, "wordpiece: keep case and accents (default: lower-case and strip accents, as bert-base-uncased)")
	fs.BoolVar(&opts.BERTSpecials, "bert-specials", false, "gpt2, byte, char: append [PAD] [CLS] [SEP] [MASK] after the vocabulary (wordpiece has its own)")
	fs.Float64Var(&opts.ValFraction, "val-fraction", 0.1, "fraction of the input (at the end) held out for validation, in [0, 1) (0: no validation split)")
	fs.IntVar(&opts.ShardTokens, "shard-tokens", 100_000_000, fmt.Sprintf("tokens per shard file, at least %d", prepare.MinShardTokens))
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if len(inputs) == 0 {
		return fmt.Errorf("no input: pass --input FILE|DIR (repeatable)")
	}
	if opts.Out == "" {
		return fmt.Errorf("no output: pass --out DIR")
	}
	if err := train.CheckOutput(opts.Out, "--out"); err != nil {
		return err
	}
	// The flags' ranges: Options' 0 means the default and a negative fraction no split, which
	// given as flags would pass unnoticed.
	if err := prepare.CheckValFraction(opts.ValFraction); err != nil {
		return err
	}
	if err := prepare.CheckShardTokens(opts.ShardTokens); err != nil {
		return err
	}
	if opts.BERTSpecials && opts.Tokenizer == "wordpiece" { // harmless: a script may pass it for every BERT dataset
		fmt.Fprintln(stderr, "note: --bert-specials changes nothing with --tokenizer wordpiece: its vocab already holds [PAD] [CLS] [SEP] [MASK], whose ids the data uses")
	}
	opts.Inputs, opts.Context = inputs, ctx
	if opts.ValFraction == 0 {
		opts.ValFraction = -1 // asked for none (Options' 0 is the default)
	}
	if _, err := prepare.Run(opts); err != nil {
		// The command's name prefixes the message already ("gpt2go prepare: ...").
		return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "prepare: "))
	}
	return nil
}
