package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/report"
	"github.com/gpt2go/gpt2go/train"
)

// runReport writes RUNDIR/report.html (or --out): one self-contained page about a run.
func runReport(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlags("report")
	out := fs.String("out", "", "HTML file to write (default RUNDIR/report.html)")
	attnText := fs.String("attn-text", "", "text for the attention maps (default: the start of the run's newest sample)")
	layer := fs.Int("attn-layer", 0, "layer of the attention maps")
	runs, err := parseInterleaved(fs, args, "RUNDIR", stdout) // the run before or after the flags
	if err != nil {
		return err
	}
	if len(runs) != 1 {
		return fmt.Errorf("give one run directory: gpt2go report RUNDIR [--out FILE.html] (got %d)", len(runs))
	}
	runDir := runs[0]
	if *out == "" {
		*out = filepath.Join(runDir, "report.html")
	}
	if err := checkOutputFile(*out, "--out", "report.html"); err != nil {
		return err
	}
	if err := checkAttnLayer(runDir, *layer); err != nil {
		return err
	}
	opts := report.Options{RunDir: runDir, Version: version, AttentionText: *attnText}
	// Attention maps of the first and last checkpoints, all heads of one layer, computed on the
	// CPU (one short sequence; no GPU needed to write a report).
	opts.Attention = func(first, last, text string) ([]byte, string, error) {
		textFlag := "--attn-text"
		if *attnText == "" {
			textFlag = "the newest sample's text"
		}
		fig, T, err := attentionFigure(cpu.New(0), gpt.Precision{}, loadFlags{}, []string{first, last}, text, textFlag, *layer, -1, 32, io.Discard)
		if err != nil {
			return nil, "", err
		}
		png, err := fig.PNG()
		caption := fmt.Sprintf("Layer %d, every head, over the first %d tokens of %q: the initial checkpoint (top) and the newest (bottom). Rows are queries, columns the keys they attend to.", *layer, T, text)
		return png, caption, err
	}
	if err := report.Write(opts, *out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return nil
}

// checkAttnLayer refuses an --attn-layer the run's model does not have, as attn --layer does
// (the page only noted it, and the command succeeded). A run.json that cannot be read is left
// for report.Write to name.
func checkAttnLayer(runDir string, layer int) error {
	var run train.Config
	b, err := os.ReadFile(filepath.Join(runDir, "run.json"))
	if err != nil || json.Unmarshal(b, &run) != nil || run.Model.NumLayers == 0 {
		return nil
	}
	if err := gpt.CheckAttentionArgs(layer, run.Model.NumLayers, 1); err != nil {
		return fmt.Errorf("--attn-layer: %w", err)
	}
	return nil
}
