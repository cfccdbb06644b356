package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/tokenizer"
	"github.com/gpt2go/gpt2go/train"
)

// runFill prints a BERT encoder's most likely tokens, with probabilities, for each [MASK] of a
// text: the model sees [CLS] text [SEP] once, with every [MASK] in place, as in training.
func runFill(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("fill")
	var ckpt, text string
	var topK int
	var dev deviceFlags
	fs.StringVar(&ckpt, "ckpt", "", "a BERT run directory (newest checkpoint) or checkpoint file (train --arch bert)")
	fs.StringVar(&text, "text", "", `text with one or more [MASK], e.g. "To be or not to [MASK], that is the question"`)
	fs.IntVar(&topK, "top-k", 5, "candidates shown per [MASK]")
	dev.register(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	switch {
	case ckpt == "":
		return fmt.Errorf("no model: pass --ckpt RUNDIR|FILE of a BERT run (train --arch bert)")
	case !strings.Contains(text, tokenizer.MaskText):
		return fmt.Errorf("--text has no %s; put %s where a token should be predicted, e.g. --text \"To be or not to %s\"", tokenizer.MaskText, tokenizer.MaskText, tokenizer.MaskText)
	case topK < 1:
		return fmt.Errorf("--top-k must be >= 1, got %d", topK)
	}
	loaded, err := train.OpenBERT(ckpt)
	if err != nil {
		return err
	}
	defer loaded.Close()
	if loaded.Run.Tokenizer == nil {
		return fmt.Errorf("%s records no tokenizer, so its text cannot be encoded", loaded.Source)
	}
	tok, err := loaded.Run.Tokenizer.Tokenizer()
	if err != nil {
		return err
	}
	sp := tokenizer.SpecialsOf(tok)
	ids, masks, err := encodeMasked(tok, sp, text, "--text")
	if err != nil {
		return err
	}
	T := len(ids)
	if T > loaded.Config.BlockSize {
		return fmt.Errorf("the text is %d tokens with [CLS] and [SEP]; the model reads at most %d; shorten --text", T, loaded.Config.BlockSize)
	}
	if note := untrainedNote(loaded.Run, T, true, "the run"); note != "" {
		fmt.Fprintln(stderr, note)
	}
	be, err := dev.open(stderr)
	if err != nil {
		return err
	}
	m, err := bert.NewInference(be, loaded.Config, 1, T, dev.modelPrecision())
	if err != nil {
		return err
	}
	if err := m.SetParamsFrom(loaded.ReadParams); err != nil {
		return err
	}
	if _, err := m.Forward(ids, nil, 1, T); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s (step %d): %d tokens, %d masked\n", loaded.Source, loaded.Step, T, len(masks))
	V := loaded.Config.VocabSize
	logits := make([]float32, V)
	filled := append([]int32(nil), ids...)
	for i, pos := range masks {
		if err := m.LogitsRow(logits, 0, pos); err != nil {
			return err
		}
		cands := topTokens(logits, sp, topK)
		filled[pos] = int32(cands[0].id)
		parts := make([]string, len(cands))
		for j, c := range cands {
			parts[j] = fmt.Sprintf("%q %.3f", decode(tok, c.id), c.p)
		}
		fmt.Fprintf(stdout, "[MASK] %d of %d (token %d): %s\n", i+1, len(masks), pos, strings.Join(parts, " | "))
	}
	fmt.Fprintf(stdout, "filled: %s\n", decodeText(tok, filled[1:T-1]))
	return nil
}

// untrainedNote is the one-line warning for a text of T tokens (with [CLS] and [SEP] for an
// encoder) read by a model whose run, named who, trained on shorter sequences: positions from the
// run's --seq-len up to its block size took no part in training, so what the model does there is
// untrained. It is "" for a text that fits, and when which positions were trained is unknown:
// weights without a run, and a run that started from pretrained weights (--init).
func untrainedNote(run *train.Config, T int, encoder bool, who string) string {
	if run == nil || run.Init != "" || run.SeqLen <= 0 || T <= run.SeqLen {
		return ""
	}
	with := ""
	if encoder {
		with = " (with [CLS] and [SEP])"
	}
	return fmt.Sprintf("warning: the model reads %d tokens%s, but %s was trained on --seq-len %d: positions %d..%d were never trained; shorten the text to stay within them",
		T, with, who, run.SeqLen, run.SeqLen, T-1)
}

// encodeMasked encodes [CLS] text [SEP] with every [MASK] of text as the [MASK] id, and returns
// the ids and the masked positions. The pieces between the masks are encoded one by one; errors
// name the text textFlag. With the gpt2 tokenizer, one space right before a [MASK] is dropped:
// GPT-2's byte-level BPE puts a word's leading space in the word's token (" capital"), so in
// training that space is part of whatever token the mask hides, never a token " " of its own
// (RoBERTa's <mask> strips it the same way, lstrip).
func encodeMasked(tok tokenizer.Tokenizer, sp tokenizer.Specials, text, textFlag string) (ids []int32, masks []int, err error) {
	if sp.CLS < 0 || sp.SEP < 0 || sp.MASK < 0 {
		return nil, nil, fmt.Errorf("the model's tokenizer has no [CLS] [SEP] [MASK]; it was not trained with --arch bert")
	}
	ids = []int32{int32(sp.CLS)}
	pieces := strings.Split(text, tokenizer.MaskText)
	for i, piece := range pieces {
		if i > 0 {
			masks = append(masks, len(ids))
			ids = append(ids, int32(sp.MASK))
		}
		if i < len(pieces)-1 && tok.Name() == "gpt2" {
			piece = strings.TrimSuffix(piece, " ")
		}
		pieceIDs, err := encodeChecked(tok, piece, textFlag)
		if err != nil && i > 0 { // the tokenizer counts bytes from the piece's start
			return nil, nil, fmt.Errorf("%w, counting from the end of [MASK] %d", err, i)
		} else if err != nil {
			return nil, nil, err
		}
		ids = append(ids, pieceIDs...)
	}
	return append(ids, int32(sp.SEP)), masks, nil
}

type candidate struct {
	id int
	p  float64
}

// topTokens returns the k most likely non-special tokens of a softmax over logits (the special
// tokens take part in the normalisation, as in training, but are never proposed).
func topTokens(logits []float32, sp tokenizer.Specials, k int) []candidate {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = max(mx, float64(l))
	}
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l) - mx)
	}
	special := map[int]bool{sp.PAD: true, sp.UNK: true, sp.CLS: true, sp.SEP: true, sp.MASK: true}
	var out []candidate
	for id, l := range logits {
		if !special[id] {
			out = append(out, candidate{id, math.Exp(float64(l)-mx) / z})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].p > out[j].p })
	return out[:min(k, len(out))]
}

func decode(tok tokenizer.Tokenizer, id int) string { return tok.Decode([]int{id}) }

func decodeText(tok tokenizer.Tokenizer, ids []int32) string {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return tok.Decode(out)
}
