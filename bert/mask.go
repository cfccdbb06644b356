package bert

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gpt2go/gpt2go/tokenizer"
)

// Masker makes MLM batches as BERT's pre-training does: each window is [CLS] + T-2 tokens of the
// stream + [SEP]; of its non-special positions, round(Rate * count) (at least one) are chosen;
// a chosen position's input becomes [MASK] with probability 0.8, a random non-special token
// with 0.1, and stays itself with 0.1; its target is the original token, and every other
// target is -1.
//
// The random numbers come from a PCG seeded with (Seed, step, micro-batch), so the masking of a
// batch is a function of those three integers: a resumed run, which knows its step, masks
// exactly as the uninterrupted one did, with no RNG state to save.
type Masker struct {
	Specials  tokenizer.Specials // [CLS], [SEP], [MASK] required; [PAD] and [UNK] never chosen either
	VocabSize int                // random replacements are drawn from [0, VocabSize) minus the specials
	Rate      float64            // fraction of non-special positions chosen; BERT's is 0.15
	Seed      uint64
	special   []bool
	order     []int // scratch: candidate positions of one sequence
}

// NewMasker returns a Masker with BERT's rate 0.15, or a one-line error when the vocabulary
// lacks the special tokens or has no ordinary token to draw.
func NewMasker(specials tokenizer.Specials, vocabSize int, seed uint64) (*Masker, error) {
	if specials.CLS < 0 || specials.SEP < 0 || specials.MASK < 0 {
		return nil, fmt.Errorf("masked-language modelling needs [CLS], [SEP] and [MASK] in the vocabulary; prepare the data with --bert-specials or a WordPiece vocab.txt")
	}
	mk := &Masker{Specials: specials, VocabSize: vocabSize, Rate: MaskRate, Seed: seed, special: make([]bool, vocabSize)}
	for _, id := range []int{specials.PAD, specials.UNK, specials.CLS, specials.SEP, specials.MASK} {
		if id >= vocabSize {
			return nil, fmt.Errorf("special token id %d is outside the vocabulary [0,%d)", id, vocabSize)
		}
		if id >= 0 {
			mk.special[id] = true
		}
	}
	if !slices.Contains(mk.special, false) {
		return nil, fmt.Errorf("the vocabulary of %d tokens has no token that is not special", vocabSize)
	}
	return mk, nil
}

// Window writes dst (len T >= 3) = [CLS] stream[:T-2] [SEP]; stream must hold at least T-2 tokens.
func (mk *Masker) Window(dst, stream []int32) {
	T := len(dst)
	dst[0], dst[T-1] = int32(mk.Specials.CLS), int32(mk.Specials.SEP)
	copy(dst[1:T-1], stream[:T-2])
}

// rng is the generator of one micro-batch: a function of (Seed, step, micro) only.
func (mk *Masker) rng(step, micro int) *rand.Rand {
	return rand.New(rand.NewPCG(mk.Seed^0x5851f42d4c957f2d, uint64(step)<<20^uint64(micro)))
}

// Mask masks the B windows of T tokens in tokens (B,T) for optimizer step step and micro-batch
// micro: it writes inputs (B,T), the tokens with the chosen positions replaced, and targets
// (B,T), the original token at the chosen positions and -1 elsewhere. tokens is not modified.
func (mk *Masker) Mask(inputs, targets, tokens []int32, B, T, step, micro int) error {
	if len(tokens) != B*T || len(inputs) != B*T || len(targets) != B*T {
		return fmt.Errorf("mask: tokens, inputs and targets must hold B*T = %d ids (have %d, %d, %d)", B*T, len(tokens), len(inputs), len(targets))
	}
	rng := mk.rng(step, micro)
	copy(inputs, tokens)
	for i := range targets {
		targets[i] = -1
	}
	for b := range B {
		seq := tokens[b*T : b*T+T]
		mk.order = mk.order[:0]
		for t, tok := range seq {
			if tok < 0 || int(tok) >= mk.VocabSize {
				return fmt.Errorf("mask: token %d at position %d is outside the vocabulary [0,%d)", tok, b*T+t, mk.VocabSize)
			}
			if !mk.special[tok] {
				mk.order = append(mk.order, t)
			}
		}
		if len(mk.order) == 0 {
			continue
		}
		n := max(1, int(math.Round(mk.Rate*float64(len(mk.order)))))
		// A partial Fisher-Yates shuffle draws the n chosen positions without replacement.
		for i := range n {
			j := i + rng.IntN(len(mk.order)-i)
			mk.order[i], mk.order[j] = mk.order[j], mk.order[i]
			t := b*T + mk.order[i]
			targets[t] = seq[mk.order[i]]
			switch r := rng.Float64(); {
			case r < 0.8:
				inputs[t] = int32(mk.Specials.MASK)
			case r < 0.9:
				inputs[t] = mk.randomToken(rng)
			}
		}
	}
	return nil
}

// MaxMasked is the most positions Mask chooses in B windows of T tokens (it chooses
// max(1, round(Rate*n)) of a window's n <= T non-special positions; the trainer's windows have
// T-2, so this may allow a row more than they use): NewMasked's maxMasked, with Rate as it is now.
func (mk *Masker) MaxMasked(B, T int) int { return MaxMaskedAt(mk.Rate, B, T) }

// MaskRate is BERT's share of chosen positions, a new Masker's Rate.
const MaskRate = 0.15

// MaxMaskedAt is MaxMasked for a Masker with the given Rate.
func MaxMaskedAt(rate float64, B, T int) int {
	return B * max(1, int(math.Round(rate*float64(T))))
}

// randomToken draws a token uniformly from the non-special part of the vocabulary.
func (mk *Masker) randomToken(rng *rand.Rand) int32 {
	for {
		if tok := rng.IntN(mk.VocabSize); !mk.special[tok] {
			return int32(tok)
		}
	}
}
