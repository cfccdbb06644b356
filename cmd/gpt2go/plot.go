package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/gpt2go/gpt2go/viz"
)

// runPlot draws the training curves of one or more run directories. Flags may come before or
// after the run directories.
func runPlot(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlags("plot")
	var out, what, title string
	var logY bool
	var smooth float64
	fs.StringVar(&out, "out", "curves.png", "output image, .png or .svg")
	fs.StringVar(&what, "what", "loss,lr", "panels, top to bottom: loss (train and val), lr, grad_norm, ms, tok_s or any logged key")
	fs.BoolVar(&logY, "log-y", false, "logarithmic y axes")
	fs.Float64Var(&smooth, "smooth", 0, "draw noisy curves (all but lr and val_loss) smoothed by an exponential moving average with this decay, e.g. 0.9, over the faded raw values")
	fs.StringVar(&title, "title", "", "figure title (default: the run's name)")
	runs, err := parseInterleaved(fs, args, "RUNDIR|LOG.jsonl...", stdout)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("no runs: pass one or more RUNDIRs (or log.jsonl files), e.g. gpt2go plot runs/shk --out shk.png")
	}
	if err := checkOutputFile(out, "--out", "curves.png"); err != nil {
		return err
	}
	names := runNames(runs)
	logs := make([]*viz.Log, len(runs))
	for i, r := range runs {
		l, err := viz.ReadLog(r, names[i])
		if err != nil {
			return err
		}
		logs[i] = l
	}
	var panels []string
	for p := range strings.SplitSeq(what, ",") {
		if p = strings.TrimSpace(p); p != "" {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		return fmt.Errorf("--what %q names no panels; e.g. --what loss,lr,grad_norm", what)
	}
	fig, err := viz.Curves(logs, viz.CurvesOptions{Panels: panels, LogY: logY, Smooth: smooth, Title: title})
	if err != nil {
		return err
	}
	if err := fig.Save(out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s of %s)\n", out, strings.Join(panels, ", "), strings.Join(names, ", "))
	return nil
}

// runNames names runs for a legend: each run directory's base name, or the whole path when two
// runs share a base name. A log.jsonl file is named by its directory.
func runNames(paths []string) []string {
	names := make([]string, len(paths))
	count := map[string]int{}
	for i, p := range paths {
		p = filepath.Clean(p)
		if filepath.Ext(p) == ".jsonl" {
			p = filepath.Dir(p)
		}
		names[i] = filepath.Base(p)
		count[names[i]]++
	}
	for i, p := range paths {
		if count[names[i]] > 1 {
			names[i] = filepath.Clean(p)
		}
	}
	return names
}

// parseInterleaved parses args whose flags may come before, between or after the positional
// arguments, which it returns in order. -h prints the usage line (the command's name, then
// positional) and the flags.
func parseInterleaved(fs *flag.FlagSet, args []string, positional string, stdout io.Writer) ([]string, error) {
	var given []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return nil, help(fs, fs.Name()+" "+positional+" [flags]   (the flags may also come first)", stdout)
		case err != nil:
			return nil, fmt.Errorf("%v (see %s -h)", err, fs.Name())
		}
		if fs.NArg() == 0 {
			return given, nil
		}
		given, args = append(given, fs.Arg(0)), fs.Args()[1:]
	}
}
