package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/bert"
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

func runAttn(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("attn")
	var lf loadFlags
	var dev deviceFlags
	var compare, text, out string
	var layer, head, maxTokens int
	fs.StringVar(&lf.ckpt, "ckpt", "", "run directory (newest checkpoint) or checkpoint file, e.g. RUNDIR/checkpoints/step_00000000.safetensors for the initial weights")
	fs.StringVar(&lf.init, "init", "", "pretrained weights instead of --ckpt: "+train.InitHelp)
	lf.ctx, lf.progress = ctx, stderr
	fs.StringVar(&compare, "compare", "", "a second checkpoint (same tokenizer) drawn beside the first, e.g. initial vs trained")
	fs.StringVar(&lf.tokenizer, "tokenizer", "", "override the tokenizer: gpt2 or byte")
	fs.StringVar(&text, "text", "", "the text whose attention to draw")
	fs.StringVar(&out, "out", "attention.png", "output image, .png or .svg")
	fs.IntVar(&layer, "layer", 0, "layer (0 = first)")
	fs.IntVar(&head, "head", -1, "one head drawn large (0 = first; -1 = a grid of all heads)")
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
	if err := checkOutputFile(out, "--out", "attention.png"); err != nil {
		return err
	}
	if head < -1 {
		return fmt.Errorf("--head must be a head's index (0 = first) or -1 for every head, got %d", head)
	}
	if maxTokens < 1 || maxTokens > 256 {
		return fmt.Errorf("--max-tokens must be in 1..256 (labels get unreadable beyond ~48), got %d", maxTokens)
	}
	be, err := dev.open(stderr)
	if err != nil {
		return err
	}
	fig, T, err := attentionFigure(be, dev.modelPrecision(), lf, []string{first, compare}, text, "--text", layer, head, maxTokens, stderr)
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
// entries are skipped): all heads, or one head when head >= 0. textFlag names where the text
// came from in errors about it. It returns the figure and the
// number of tokens drawn; notes about truncation, and about positions past the --seq-len the
// run trained on, go to warn. A BERT encoder reads the text as
// [CLS] text [SEP], as in training, and its maps are drawn whole (bidirectional).
func attentionFigure(be backend.Backend, prec gpt.Precision, lf loadFlags, paths []string, text, textFlag string, layer, head, maxTokens int, warn io.Writer) (*viz.Figure, int, error) {
	var maps []attnMap
	var labels []string
	var ids []int32
	encoders, warned := 0, false
	for _, path := range paths {
		if path == "" {
			continue
		}
		src := lf
		src.ckpt, src.init = path, ""
		if path == lf.init { // the --init weights; --compare is always a checkpoint
			src.ckpt, src.init = "", path
		}
		am, err := loadAttention(src)
		if err != nil {
			return nil, 0, err
		}
		defer am.close()
		if am.encoder {
			encoders++
		}
		if encoders != 0 && encoders != len(maps)+1 {
			return nil, 0, fmt.Errorf("--compare draws two checkpoints of one family; %s and %s are a GPT-2 and a BERT encoder", paths[0], paths[1])
		}
		mine, err := attnTokens(am, text, textFlag)
		if err != nil {
			return nil, 0, err
		}
		n := min(maxTokens, am.blockSize)
		if am.encoder {
			n -= 2 // [CLS] and [SEP]
			if n < 1 {
				return nil, 0, fmt.Errorf("--max-tokens %d leaves no room for text between [CLS] and [SEP]", maxTokens)
			}
		}
		if ids == nil && len(mine) > n {
			fmt.Fprintf(warn, "the text is %d tokens; drawing the first %d (--max-tokens, block size %d)\n", len(mine), n, am.blockSize)
		}
		mine = mine[:min(len(mine), n)]
		if am.encoder {
			sp := tokenizer.SpecialsOf(am.tok)
			mine = append(append([]int32{int32(sp.CLS)}, mine...), int32(sp.SEP))
		}
		if ids == nil {
			ids = mine
			for _, id := range ids {
				labels = append(labels, viz.TokenLabel(am.tok.Decode([]int{int(id)}), 10))
			}
		} else if !slices.Equal(mine, ids) {
			if short := min(len(mine), len(ids)); slices.Equal(mine[:short], ids[:short]) {
				fewer, other := path, paths[0]
				if len(ids) < len(mine) {
					fewer, other = paths[0], path
				}
				return nil, 0, fmt.Errorf("%s reads fewer of the text's tokens than %s (a smaller block size); pass --max-tokens %d", fewer, other, short)
			}
			return nil, 0, fmt.Errorf("%s tokenizes the text differently from %s; compare checkpoints of runs with the same tokenizer", path, paths[0])
		}
		if note := untrainedNote(am.run, len(ids), am.encoder, am.label); note != "" && !warned {
			fmt.Fprintln(warn, note)
			warned = true
		}
		m, err := am.attention(be, prec, ids, layer)
		if err != nil {
			return nil, 0, err
		}
		if head >= m.NumHeads {
			return nil, 0, fmt.Errorf("--head %d does not exist; the model has heads 0..%d", head, m.NumHeads-1)
		}
		if head < 0 && len(maps) > 0 && m.NumHeads != maps[0].m.NumHeads {
			return nil, 0, fmt.Errorf("%s has %d heads and %s %d: compare one head of each with --head N", paths[0], maps[0].m.NumHeads, path, m.NumHeads)
		}
		maps = append(maps, attnMap{label: am.label, m: m})
	}
	opt := attnLayout(maps, labels, layer, head)
	opt.Bidirectional = encoders > 0
	fig, err := viz.Attention(opt)
	return fig, len(ids), err
}

// attnSource is a checkpoint of either family, ready to compute attention maps.
type attnSource struct {
	label     string
	tok       tokenizer.Tokenizer
	blockSize int
	encoder   bool
	run       *train.Config // the training config, nil for weights without a run (--init)
	attention func(be backend.Backend, prec gpt.Precision, ids []int32, layer int) (*gpt.AttentionMap, error)
	close     func() error // closes the weights' file
}

// loadAttention reads the model --ckpt or --init names: a GPT-2 or a BERT encoder (checkpoints
// only). The weights stay in their file, which the source's close closes.
func loadAttention(lf loadFlags) (*attnSource, error) {
	var l *train.Loaded
	var enc *train.LoadedBERT
	var err error
	if lf.ckpt != "" && lf.init == "" {
		l, enc, err = train.OpenModel(lf.ckpt)
	} else {
		l, err = lf.open()
	}
	if err != nil {
		return nil, err
	}
	var src *attnSource
	var closeFile func() error
	if enc != nil {
		src, err = bertAttention(enc)
		closeFile = enc.Close
	} else {
		src, err = gptAttention(lf, l)
		closeFile = l.Close
	}
	if err != nil {
		closeFile()
		return nil, err
	}
	src.close = closeFile
	return src, nil
}

func gptAttention(lf loadFlags, l *train.Loaded) (*attnSource, error) {
	tok, err := lf.tok(l)
	if err != nil {
		return nil, err
	}
	return &attnSource{label: ckptLabel(l.Source, l.Step, l.Run != nil), tok: tok, blockSize: l.Config.BlockSize, run: l.Run,
		attention: func(be backend.Backend, prec gpt.Precision, ids []int32, layer int) (*gpt.AttentionMap, error) {
			model, err := l.NewInferenceModel(be, 1, len(ids), prec)
			if err != nil {
				return nil, err
			}
			return model.Attention(ids, layer)
		}}, nil
}

func bertAttention(l *train.LoadedBERT) (*attnSource, error) {
	if l.Run.Tokenizer == nil {
		return nil, fmt.Errorf("%s records no tokenizer, so its text cannot be encoded", l.Source)
	}
	tok, err := l.Run.Tokenizer.Tokenizer()
	if err != nil {
		return nil, err
	}
	return &attnSource{label: ckptLabel(l.Source, l.Step, true), tok: tok, blockSize: l.Config.BlockSize, encoder: true, run: l.Run,
		attention: func(be backend.Backend, prec gpt.Precision, ids []int32, layer int) (*gpt.AttentionMap, error) {
			model, err := bert.NewInference(be, l.Config, 1, len(ids), prec)
			if err != nil {
				return nil, err
			}
			if err := model.SetParamsFrom(l.ReadParams); err != nil {
				return nil, err
			}
			return model.Attention(ids, layer)
		}}, nil
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

// ckptLabel names a checkpoint in a title: its run directory and step (a file without a run,
// such as an llm.c model, by its name).
func ckptLabel(source string, step int, run bool) string {
	dir, file := filepath.Split(filepath.Clean(source))
	if filepath.Base(dir) == "checkpoints" {
		return fmt.Sprintf("%s step %d", filepath.Base(filepath.Dir(filepath.Clean(dir))), step)
	}
	if !run {
		return file
	}
	return fmt.Sprintf("%s step %d", file, step)
}

// attnTokens encodes the text attn draws: as it is for GPT-2; for an encoder with every [MASK]
// as the [MASK] id, as fill reads it, so that a map shows where a masked position looks. The
// [CLS] and [SEP] around it are left to the caller. textFlag names the text in errors.
func attnTokens(am *attnSource, text, textFlag string) ([]int32, error) {
	if !am.encoder {
		return encodeText(am.tok, text, textFlag)
	}
	ids, _, err := encodeMasked(am.tok, tokenizer.SpecialsOf(am.tok), text, textFlag)
	if err != nil {
		return nil, err
	}
	if len(ids) == 2 {
		return nil, fmt.Errorf("the text encodes to no tokens")
	}
	return ids[1 : len(ids)-1], nil
}

// encodeText tokenizes text, refusing characters a char tokenizer cannot represent in an error
// that names the text textFlag (e.g. "--text").
func encodeText(tok tokenizer.Tokenizer, text, textFlag string) ([]int32, error) {
	ids, err := encodeChecked(tok, text, textFlag)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("the text encodes to no tokens")
	}
	return ids, nil
}

// encodeChecked is encodeText without its check that there is at least one token.
func encodeChecked(tok tokenizer.Tokenizer, text, textFlag string) ([]int32, error) {
	if c, ok := tok.(*tokenizer.Char); ok {
		if err := c.Check([]byte(text)); err != nil {
			return nil, fmt.Errorf("%s: %w", textFlag, err)
		}
	}
	var ids []int32
	for _, id := range tok.Encode([]byte(text)) {
		ids = append(ids, int32(id))
	}
	return ids, nil
}
