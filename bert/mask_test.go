package bert_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// A byte-level vocabulary with BERT's specials appended, as prepare --bert-specials makes it.
var byteSpecials = tokenizer.Specials{PAD: 256, UNK: -1, CLS: 257, SEP: 258, MASK: 259}

const byteVocab = 260

// windows returns B packed windows [CLS] stream [SEP] of T tokens from a random byte stream.
func windows(t *testing.T, mk *bert.Masker, seed uint64, B, T int) []int32 {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	tokens := make([]int32, B*T)
	stream := make([]int32, T-2)
	for b := range B {
		for i := range stream {
			stream[i] = int32(r.IntN(256))
		}
		mk.Window(tokens[b*T:(b+1)*T], stream)
	}
	return tokens
}

func TestMaskRates(t *testing.T) {
	mk, err := bert.NewMasker(byteSpecials, byteVocab, 7)
	if err != nil {
		t.Fatal(err)
	}
	const B, T, batches = 16, 130, 100
	chosenPerPos := make([]int, T)
	var candidates, chosen, masked, random, kept int
	inputs, targets := make([]int32, B*T), make([]int32, B*T)
	for step := range batches {
		tokens := windows(t, mk, uint64(step), B, T)
		before := slices.Clone(tokens)
		if err := mk.Mask(inputs, targets, tokens, B, T, step, 0); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tokens, before) {
			t.Fatal("Mask modified its tokens")
		}
		for i, tok := range tokens {
			special := tok >= 256
			if !special {
				candidates++
			}
			if targets[i] == -1 {
				if inputs[i] != tok {
					t.Fatalf("position %d is not chosen but its input changed from %d to %d", i, tok, inputs[i])
				}
				continue
			}
			if special {
				t.Fatalf("special token %d at position %d was chosen", tok, i)
			}
			if targets[i] != tok {
				t.Fatalf("target %d at position %d, want the original token %d", targets[i], i, tok)
			}
			chosen++
			chosenPerPos[i%T]++
			switch in := inputs[i]; {
			case in == int32(byteSpecials.MASK):
				masked++
			case in == tok:
				kept++
			case in >= 256:
				t.Fatalf("position %d was replaced by the special token %d", i, in)
			default:
				random++
			}
		}
	}
	// round(0.15 * 128) = 19 of the 128 non-special positions of every window, exactly.
	if want := batches * B * 19; chosen != want {
		t.Errorf("chose %d positions, want %d (19 of 128 per window)", chosen, want)
	}
	// 30400 choices: the binomial standard deviations of the three shares are <= 0.0023, so
	// these bounds (5 sigma) fail by chance about once in a million runs. A random replacement
	// equal to the original (1 in 256) counts as kept.
	for _, c := range []struct {
		name       string
		got, share float64
	}{
		{"[MASK]", float64(masked), 0.8},
		{"random", float64(random), 0.1 * 255 / 256},
		{"kept", float64(kept), 0.1 + 0.1/256},
	} {
		got := c.got / float64(chosen)
		if sd := math.Sqrt(c.share * (1 - c.share) / float64(chosen)); math.Abs(got-c.share) > 5*sd {
			t.Errorf("%s share %.4f, want %.4f +- %.4f", c.name, got, c.share, 5*sd)
		}
		t.Logf("%-6s %.4f (want %.4f)", c.name, got, c.share)
	}
	// Every non-special position is as likely as any other: 1600 windows choose each ~238 times.
	if chosenPerPos[0] != 0 || chosenPerPos[T-1] != 0 {
		t.Errorf("[CLS] or [SEP] chosen: %d, %d", chosenPerPos[0], chosenPerPos[T-1])
	}
	mean := float64(chosen) / float64(T-2)
	for p := 1; p < T-1; p++ {
		if d := math.Abs(float64(chosenPerPos[p]) - mean); d > 5*math.Sqrt(mean) {
			t.Errorf("position %d chosen %d times, want %.0f +- %.0f", p, chosenPerPos[p], mean, 5*math.Sqrt(mean))
		}
	}
}

// The masking of a batch depends on (seed, step, micro-batch) alone, so a resumed run, which
// knows its step, masks each batch exactly as the uninterrupted run did.
func TestMaskDeterministic(t *testing.T) {
	const B, T = 4, 40
	run := func(seed uint64, step, micro int) ([]int32, []int32) {
		mk, err := bert.NewMasker(byteSpecials, byteVocab, seed)
		if err != nil {
			t.Fatal(err)
		}
		inputs, targets := make([]int32, B*T), make([]int32, B*T)
		if err := mk.Mask(inputs, targets, windows(t, mk, 3, B, T), B, T, step, micro); err != nil {
			t.Fatal(err)
		}
		return inputs, targets
	}
	in, tg := run(11, 500, 2)
	// A fresh masker, and one that masked other batches first, give the same bits.
	mk, _ := bert.NewMasker(byteSpecials, byteVocab, 11)
	scratchIn, scratchTg := make([]int32, B*T), make([]int32, B*T)
	for step := range 3 {
		_ = mk.Mask(scratchIn, scratchTg, windows(t, mk, 9, B, T), B, T, step, 0)
	}
	in2, tg2 := make([]int32, B*T), make([]int32, B*T)
	if err := mk.Mask(in2, tg2, windows(t, mk, 3, B, T), B, T, 500, 2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in, in2) || !slices.Equal(tg, tg2) {
		t.Error("the same (seed, step, micro-batch) masked differently after other batches")
	}
	for _, other := range []struct {
		seed        uint64
		step, micro int
	}{{12, 500, 2}, {11, 501, 2}, {11, 500, 3}} {
		if oi, ot := run(other.seed, other.step, other.micro); slices.Equal(oi, in) && slices.Equal(ot, tg) {
			t.Errorf("(seed %d, step %d, micro %d) masks exactly like (11, 500, 2)", other.seed, other.step, other.micro)
		}
	}
}

func TestMaskErrors(t *testing.T) {
	if _, err := bert.NewMasker(tokenizer.NoSpecials, 256, 1); err == nil {
		t.Error("a vocabulary without [MASK] was accepted")
	}
	if _, err := bert.NewMasker(byteSpecials, 200, 1); err == nil {
		t.Error("special ids past the vocabulary were accepted")
	}
	mk, _ := bert.NewMasker(byteSpecials, byteVocab, 1)
	in, tg := make([]int32, 10), make([]int32, 10)
	if err := mk.Mask(in, tg, make([]int32, 9), 1, 10, 0, 0); err == nil {
		t.Error("a short token array was accepted")
	}
	bad := make([]int32, 10)
	bad[3] = byteVocab
	if err := mk.Mask(in, tg, bad, 1, 10, 0, 0); err == nil {
		t.Error("a token outside the vocabulary was accepted")
	}
	// A window of specials only has nothing to choose.
	only := []int32{257, 256, 256, 258}
	in, tg = make([]int32, 4), make([]int32, 4)
	if err := mk.Mask(in, tg, only, 1, 4, 0, 0); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in, only) || !slices.Equal(tg, []int32{-1, -1, -1, -1}) {
		t.Errorf("specials-only window masked: inputs %v targets %v", in, tg)
	}
}

// Masker draws exactly what tools/reference/shakespeare_bert.py's Python port of it (GoMasker:
// Go's PCG, Rand.IntN and Float64 rewritten in Python) draws, so that script's PyTorch run masks
// the same positions with the same replacements as a gpt2go run; the fixture is that port's
// output (--mask-fixture), for two vocabularies and seeds, steps and micro-batches that use
// every bit of the seeding.
func TestMaskMatchesPythonPort(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "go_masker.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			VocabSize int `json:"vocab_size"`
			Specials  struct {
				PAD, UNK, CLS, SEP, MASK int
			}
			Seed                    string
			Step, Micro, B, T       int
			Tokens, Inputs, Targets []int32
		}
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) == 0 {
		t.Fatal("the fixture has no cases")
	}
	for i, c := range fx.Cases {
		seed, err := strconv.ParseUint(c.Seed, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		sp := tokenizer.Specials{PAD: c.Specials.PAD, UNK: c.Specials.UNK, CLS: c.Specials.CLS, SEP: c.Specials.SEP, MASK: c.Specials.MASK}
		mk, err := bert.NewMasker(sp, c.VocabSize, seed)
		if err != nil {
			t.Fatal(err)
		}
		n := c.B * c.T
		inputs, targets := make([]int32, n), make([]int32, n)
		if err := mk.Mask(inputs, targets, c.Tokens, c.B, c.T, c.Step, c.Micro); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(inputs, c.Inputs) || !slices.Equal(targets, c.Targets) {
			t.Errorf("case %d (seed %d, step %d, micro %d): Go masks\n inputs %v\ntargets %v\nPython port\n inputs %v\ntargets %v",
				i, seed, c.Step, c.Micro, inputs, targets, c.Inputs, c.Targets)
		}
	}
}
