package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
	"github.com/gpt2go/gpt2go/train"
	"github.com/gpt2go/gpt2go/viz"
	"gonum.org/v1/plot/vg"
)

// attnMap is one checkpoint's attention over the text.
type attnMap struct {
	label string // run and step, for titles
	m     *gpt.AttentionMap
}

func runAttn(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("attn")
	var lf loadFlags
	var dev deviceFlags
	var compare, text, out string
	var layer, head, maxTokens int
	fs.StringVar(&lf.ckpt, "ckpt", "", "run directory (newest checkpoint) or checkpoint file, e.g. RUNDIR/checkpoints/step_00000000.safetensors for the initial weights")
	fs.StringVar(&lf.init, "init", "", "pretrained weights instead of --ckpt: "+train.InitHelp)
	lf.progress = stderr
	fs.StringVar(&compare, "compare", "", "a second checkpoint (same tokenizer) drawn beside the first, e.g. initial vs trained")
	fs.StringVar(&lf.tokenizer, "tokenizer", "", "override the tokenizer: gpt2 or byte")
	fs.StringVar(&text, "text", "", "the text whose attention to draw")
	fs.StringVar(&out, "out", "attention.png", "output image, .png or .svg")
	fs.IntVar(&layer, "layer", 0, "layer (0 = first)")
	fs.IntVar(&head, "head", -1, "one head drawn large (default: a grid of all heads)")
	fs.IntVar(&maxTokens, "max-tokens", 32, "draw at most this many tokens of the text")
	dev.register(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	first := lf.ckpt
	switch {
	case lf.ckpt != "" && lf.init != "":
		return fmt.Errorf("give --ckpt or --init, not both")
	case lf.init != "":
		first = lf.init
	case lf.ckpt == "":
		return fmt.Errorf("no model: pass --ckpt RUNDIR|FILE or --init MODEL")
	}
	if text == "" {
		return fmt.Errorf("no text: pass --text \"some text the model should read\"")
	}
	if maxTokens < 1 || maxTokens > 256 {
		return fmt.Errorf("--max-tokens must be in 1..256 (labels get unreadable beyond ~48), got %d", maxTokens)
	}
	be, err := dev.open(stderr)
	if err != nil {
		return err
	}
	fig, T, err := attentionFigure(be, lf, []string{first, compare}, text, layer, head, maxTokens, stderr)
	if err != nil {
		return err
	}
	if err := fig.Save(out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (layer %d, %d tokens)\n", out, layer, T)
	return nil
}

// attentionFigure draws the attention of layer over text for each checkpoint in paths (empty
// entries are skipped): all heads, or one head when head >= 0. It returns the figure and the
// number of tokens drawn; notes about truncation go to warn.
func attentionFigure(be backend.Backend, lf loadFlags, paths []string, text string, layer, head, maxTokens int, warn io.Writer) (*viz.Figure, int, error) {
	var maps []attnMap
	var labels []string
	var ids []int32
	for _, path := range paths {
		if path == "" {
			continue
		}
		src := lf
		src.ckpt, src.init = path, ""
		if path == lf.init { // the --init weights; --compare is always a checkpoint
			src.ckpt, src.init = "", path
		}
		loaded, err := src.load()
		if err != nil {
			return nil, 0, err
		}
		tok, err := src.tok(loaded)
		if err != nil {
			return nil, 0, err
		}
		mine, err := encodeText(tok, text)
		if err != nil {
			return nil, 0, err
		}
		if ids == nil {
			if n := min(maxTokens, loaded.Config.BlockSize); len(mine) > n {
				fmt.Fprintf(warn, "the text is %d tokens; drawing the first %d (--max-tokens, block size %d)\n", len(mine), n, loaded.Config.BlockSize)
			}
			ids = mine[:min(len(mine), maxTokens, loaded.Config.BlockSize)]
			for _, id := range ids {
				labels = append(labels, viz.TokenLabel(tok.Decode([]int{int(id)}), 10))
			}
		} else if !slices.Equal(mine[:min(len(mine), len(ids))], ids) {
			return nil, 0, fmt.Errorf("%s tokenizes the text differently from %s; compare checkpoints of runs with the same tokenizer", path, paths[0])
		}
		if len(ids) > loaded.Config.BlockSize {
			return nil, 0, fmt.Errorf("%s: the text needs %d positions but the model's block size is %d; lower --max-tokens", path, len(ids), loaded.Config.BlockSize)
		}
		model, err := loaded.NewModel(be, 1, len(ids))
		if err != nil {
			return nil, 0, err
		}
		m, err := model.Attention(ids, layer)
		if err != nil {
			return nil, 0, err
		}
		if head >= m.NumHeads {
			return nil, 0, fmt.Errorf("--head %d does not exist; the model has heads 0..%d", head, m.NumHeads-1)
		}
		maps = append(maps, attnMap{label: ckptLabel(loaded), m: m})
	}
	fig, err := viz.Attention(attnLayout(maps, labels, layer, head))
	return fig, len(ids), err
}

// attnLayout arranges the maps: one checkpoint's heads in a near-square grid; two checkpoints as
// one row of heads each; a single --head large, side by side across checkpoints.
func attnLayout(maps []attnMap, labels []string, layer, head int) viz.AttentionOptions {
	opt := viz.AttentionOptions{Tokens: labels}
	NH, T := maps[0].m.NumHeads, len(labels)
	// Panels grow with the text so that each token's cell stays large enough for a label.
	small, large := max(3*vg.Inch, vg.Length(T)*9.5), max(5*vg.Inch, vg.Length(T)*14)
	heads := []int{head}
	switch {
	case head >= 0:
		opt.Cols, opt.PanelSize = len(maps), large
		opt.Title = fmt.Sprintf("attention, layer %d, head %d", layer, head)
	case len(maps) == 1:
		heads = nil
		opt.Cols, opt.PanelSize = int(math.Ceil(math.Sqrt(float64(NH)))), small
		opt.Title = fmt.Sprintf("attention, layer %d, all %d heads", layer, NH)
	default:
		heads = nil
		opt.Cols, opt.PanelSize = NH, small
		opt.Title = fmt.Sprintf("attention, layer %d: one row per checkpoint", layer)
	}
	if heads == nil {
		for h := range NH {
			heads = append(heads, h)
		}
	}
	if len(maps) == 1 {
		opt.Title += " - " + maps[0].label
	}
	for _, am := range maps {
		for _, h := range heads {
			title := fmt.Sprintf("head %d", h)
			if len(maps) > 1 {
				title = fmt.Sprintf("%s, head %d", am.label, h)
			}
			opt.Panels = append(opt.Panels, viz.AttentionPanel{Title: title, Probs: am.m.Probs[h*T*T : (h+1)*T*T]})
		}
	}
	return opt
}

// ckptLabel names a checkpoint in a title: its run directory and step.
func ckptLabel(l *train.Loaded) string {
	dir, file := filepath.Split(filepath.Clean(l.Source))
	if filepath.Base(dir) == "checkpoints" {
		return fmt.Sprintf("%s step %d", filepath.Base(filepath.Dir(filepath.Clean(dir))), l.Step)
	}
	if l.Run == nil {
		return file
	}
	return fmt.Sprintf("%s step %d", file, l.Step)
}

// encodeText tokenizes text, refusing characters a char tokenizer cannot represent.
func encodeText(tok tokenizer.Tokenizer, text string) ([]int32, error) {
	if c, ok := tok.(*tokenizer.Char); ok {
		if err := c.Check([]byte(text)); err != nil {
			return nil, fmt.Errorf("--text: %w", err)
		}
	}
	var ids []int32
	for _, id := range tok.Encode([]byte(text)) {
		ids = append(ids, int32(id))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("the text encodes to no tokens")
	}
	return ids, nil
}
