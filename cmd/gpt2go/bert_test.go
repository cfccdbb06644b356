package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/prepare"
	"github.com/gpt2go/gpt2go/tokenizer"
	"github.com/gpt2go/gpt2go/train"
)

// preparedBERT is prepared's corpus in bytes with BERT's [PAD] [CLS] [SEP] [MASK] after them.
func preparedBERT(t *testing.T) string {
	t.Helper()
	return prepared(t, "--bert-specials")
}

func bertArgs(dataDir, out string, extra ...string) []string {
	args := []string{"train", "--arch", "bert", "--data", dataDir, "--out", out, "--n-layer", "2", "--n-head", "2",
		"--n-embd", "32", "--block-size", "32", "--seq-len", "32", "--batch-size", "4", "--steps", "12", "--warmup", "2",
		"--lr", "1e-3", "--eval-every", "6", "--eval-batches", "3", "--ckpt-every", "4", "--log-every", "4",
		"--threads", "1", "--tensorboard=false", "--dist-timeout", "20s", "--device", "cpu"}
	return append(args, extra...)
}

// A BERT run logs the MLM loss and masked-token accuracy (train and val), learns, records the
// encoder and its special tokens in run.json, and resumes bit for bit, masks included.
func TestBERTTrainResume(t *testing.T) {
	dataDir := preparedBERT(t)
	whole := filepath.Join(t.TempDir(), "whole")
	out := mustRun(t, bertArgs(dataDir, whole, "--pre-ln", "--lr", "3e-3")...)
	for _, want := range []string{"model: BERT encoder (pre-LN, erf GELU, 2 token types", "| acc 0.", "| val acc 0.", "val masked-token accuracy", "next: gpt2go fill --ckpt"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	run, err := os.ReadFile(filepath.Join(whole, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"arch": "bert"`, `"pre_ln": true`, `"cls": 258`, `"mask": 260`} {
		if !strings.Contains(string(run), want) {
			t.Fatalf("run.json lacks %s:\n%s", want, run)
		}
	}
	losses := readLosses(t, whole)
	if !(losses[12] < losses[1]-0.5) {
		t.Fatalf("MLM loss %v at step 1, %v at step 12: not learning", losses[1], losses[12])
	}
	// fill: the top-k tokens of each [MASK], most likely first, and the text with them in place.
	fill := mustRun(t, "fill", "--ckpt", whole, "--text", "\tfmt.Pr[MASK]ntln(x)\n", "--top-k", "3", "--threads", "1")
	lines := strings.Split(strings.TrimSpace(fill), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "[MASK] 1 of 1 (token 8): ") || strings.Count(lines[1], " | ") != 2 || !strings.HasPrefix(lines[2], "filled: \tfmt.Pr") {
		t.Fatalf("fill printed:\n%s", fill)
	}
	var p [3]float64
	var tok [3]string
	if n, _ := fmt.Sscanf(strings.TrimPrefix(lines[1], "[MASK] 1 of 1 (token 8): "), "%q %f | %q %f | %q %f", &tok[0], &p[0], &tok[1], &p[1], &tok[2], &p[2]); n != 6 || !(p[0] >= p[1] && p[1] >= p[2] && p[2] > 0 && p[0]+p[1]+p[2] <= 1) {
		t.Fatalf("fill's candidates are not in order of probability: %s", lines[1])
	}
	mustFail(t, "has no [MASK]", "fill", "--ckpt", whole, "--text", "no mask here")
	mustFail(t, "flag provided but not defined: -int8", "fill", "--ckpt", whole, "--text", "a [MASK]", "--int8")
	if out := mustRun(t, "fill", "--ckpt", whole, "--text", "a [MASK]", "--threads", "1", "--device", "cpu", "--precision", "bf16"); !strings.Contains(out, "[MASK] 1 of 1") {
		t.Errorf("fill --precision bf16 printed %q", out)
	}
	mustFail(t, "is a BERT encoder", "sample", "--ckpt", whole)
	// eval refuses an encoder first, before asking for the data it would score, and points to
	// what does measure one; also when named by a checkpoint file, and with --data.
	for _, args := range [][]string{{"--ckpt", whole}, {"--ckpt", checkpoint.Path(whole, 12)}, {"--ckpt", whole, "--data", dataDir}} {
		mustFail(t, "which eval cannot score (--data, --hellaswag and --text measure a GPT-2's next-token predictions); its run logs its own val_loss and val_acc", append([]string{"eval"}, args...)...)
	}
	mustFail(t, "the model reads at most 32", "fill", "--ckpt", whole, "--text", strings.Repeat("long ", 10)+"[MASK]")

	// attn draws the encoder's whole maps over [CLS] text [SEP].
	png := filepath.Join(t.TempDir(), "attn.png")
	if out := mustRun(t, "attn", "--ckpt", whole, "--text", "func main", "--layer", "1", "--out", png, "--threads", "1"); !strings.Contains(out, "(layer 1, 11 tokens)") {
		t.Fatalf("attn printed %q", out)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Fatalf("attn wrote no picture: %v", err)
	}
	// A [MASK] in the text is one token, as fill reads it: "func [MASK]ain" is 8 characters and
	// one mask between [CLS] and [SEP].
	if out := mustRun(t, "attn", "--ckpt", whole, "--text", "func [MASK]ain", "--layer", "0", "--out", png, "--threads", "1"); !strings.Contains(out, "(layer 0, 11 tokens)") {
		t.Fatalf("attn with a [MASK] printed %q", out)
	}
	mustFail(t, "one family", "attn", "--ckpt", whole, "--compare", gptRunOf(t), "--text", "func main", "--out", png)

	parted := filepath.Join(t.TempDir(), "parted")
	mustRun(t, bertArgs(dataDir, parted, "--pre-ln", "--lr", "3e-3", "--stop-at", "6")...)
	mustFail(t, "cannot change --gelu-tanh (saved false, given true)", "train", "--resume", parted, "--gelu-tanh")
	refusesHellaSwag(t, "train", "--resume", parted, "--eval-hellaswag-every", "1") // the run's family, not --arch
	// Repeating the run's own model-family flags is allowed.
	mustRun(t, "train", "--resume", parted, "--threads", "1", "--arch", "bert", "--pre-ln", "--type-vocab-size", "2")
	sameRun(t, whole, parted, 12)
}

// BERT in 16-bit precision (the CPU's emulation): a bf16 run says so, learns, resumes bit for
// bit, and its checkpoint (fp32 master weights) fills in fp32; an fp16 run logs its loss scale.
func TestBERTMixedPrecision(t *testing.T) {
	dataDir := preparedBERT(t)
	whole := filepath.Join(t.TempDir(), "whole")
	args := []string{"--pre-ln", "--lr", "3e-3", "--precision", "bf16"}
	out := mustRun(t, bertArgs(dataDir, whole, args...)...)
	if !strings.Contains(out, "precision: bf16 (fp32 master weights") {
		t.Fatalf("the first log lines do not give the precision:\n%s", out)
	}
	losses := readLosses(t, whole)
	if !(losses[12] < losses[1]-0.5) {
		t.Fatalf("bf16 MLM loss %v at step 1, %v at step 12: not learning", losses[1], losses[12])
	}
	fp32 := filepath.Join(t.TempDir(), "fp32")
	mustRun(t, bertArgs(dataDir, fp32, "--pre-ln", "--lr", "3e-3")...)
	if l := readLosses(t, fp32); l[1] == losses[1] || math.Abs(l[1]-losses[1]) > 0.01*l[1] {
		t.Errorf("step 1 MLM loss: bf16 %v, fp32 %v; want close but not equal", losses[1], l[1])
	}
	parted := filepath.Join(t.TempDir(), "parted")
	mustRun(t, bertArgs(dataDir, parted, append(args, "--stop-at", "6")...)...)
	mustRun(t, "train", "--resume", parted, "--threads", "1")
	sameRun(t, whole, parted, 12)
	if fill := mustRun(t, "fill", "--ckpt", whole, "--text", "func [MASK]ain", "--threads", "1"); !strings.Contains(fill, "filled: func ") {
		t.Fatalf("fill of a bf16 run printed:\n%s", fill)
	}

	half := filepath.Join(t.TempDir(), "fp16")
	mustRun(t, bertArgs(dataDir, half, "--precision", "fp16", "--steps", "4")...)
	steps := 0
	for i, line := range logLines(t, half) {
		if bytes.Contains(line, []byte(`"loss":`)) {
			steps++
			if !bytes.Contains(line, []byte(`"loss_scale":65536`)) {
				t.Fatalf("fp16 log line %d lacks the loss scale 65536: %s", i, line)
			}
		}
	}
	if steps == 0 {
		t.Fatal("the fp16 run logged no training step")
	}
}

// Data-parallel BERT: 2 ranks give the bits of one process with --grad-accum 2 (the masks are
// seeded by the global micro-batch index), with DDP and ZeRO-1.
func TestBERTDataParallelMatchesGradAccum(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns mpirun")
	}
	dataDir := preparedBERT(t)
	one := filepath.Join(t.TempDir(), "one")
	mustRun(t, bertArgs(dataDir, one, "--grad-accum", "2")...)
	for _, zero := range []string{"0", "1"} {
		t.Run("zero="+zero, func(t *testing.T) {
			two := filepath.Join(t.TempDir(), "two")
			out, err := mpirunGpt2go(t, 2, 2*time.Minute, "", bertArgs(dataDir, two, "--zero", zero)...)
			if err != nil {
				t.Fatalf("mpirun: %v\n%s", err, out)
			}
			sameRun(t, one, two, 12)
		})
	}
}

// refusesHellaSwag runs train args with --hellaswag val and an empty cache, offline, and wants
// BERT's refusal of HellaSwag before any download is tried.
func refusesHellaSwag(t *testing.T, args ...string) {
	t.Helper()
	old := prepare.HellaSwagValURL
	defer func() { prepare.HellaSwagValURL = old }()
	prepare.HellaSwagValURL = "http://127.0.0.1:1/hellaswag_val.jsonl" // offline: nothing listens on port 1
	args = append(args, "--hellaswag", "val", "--cache-dir", t.TempDir())
	code, _, errOut := gpt2go(t, args...)
	if code == 0 || strings.Contains(errOut, "download") || !strings.HasSuffix(strings.TrimSpace(errOut), train.ErrBERTHellaSwag.Error()) {
		t.Fatalf("gpt2go %s: exit %d, stderr %q; want BERT's refusal of HellaSwag, and no download", strings.Join(args, " "), code, errOut)
	}
}

// gptRunOf trains a one-step GPT-2 on the plain byte corpus.
func gptRunOf(t *testing.T) string {
	t.Helper()
	run := filepath.Join(t.TempDir(), "gpt")
	mustRun(t, trainArgs(prepared(t), run, "--steps", "1", "--sample-tokens", "0")...)
	return run
}

func TestBERTTrainErrors(t *testing.T) {
	plain := prepared(t) // bytes without BERT's special tokens
	bertData := preparedBERT(t)
	dir := t.TempDir()
	mustFail(t, "prepare it with --bert-specials", bertArgs(plain, filepath.Join(dir, "a"))...)
	mustFail(t, "--pre-ln is a BERT option; add --arch bert", trainArgs(plain, filepath.Join(dir, "b"), "--pre-ln")...)
	mustFail(t, `unknown --arch "t5"`, bertArgs(bertData, filepath.Join(dir, "d"), "--arch", "t5")...)
	mustFail(t, "too short for BERT", bertArgs(bertData, filepath.Join(dir, "e"), "--seq-len", "2")...)
	mustFail(t, "is a GPT-2 model", "fill", "--ckpt", gptRunOf(t), "--text", "a [MASK]")
	refusesHellaSwag(t, bertArgs(bertData, filepath.Join(dir, "i"), "--eval-hellaswag-every", "1")...)
	mustFail(t, `unknown model "bert-huge"`, bertArgs(bertData, filepath.Join(dir, "f"), "--model", "bert-huge")...)
	mustFail(t, "--model bert-mini is a BERT preset; add --arch bert", trainArgs(bertData, filepath.Join(dir, "g"), "--model", "bert-mini")...)
	mustFail(t, "--model bert-mini is a BERT preset; add --arch bert", "bench", "--model", "bert-mini")
	mustFail(t, "--model gpt2 is a GPT-2 preset; leave out --arch bert", bertArgs(bertData, filepath.Join(dir, "h"), "--model", "gpt2")...)
}

// A text file given to train --arch bert is prepared with BERT's special tokens (into its own
// cache folder), so an encoder trains on it without a prepare step, as GPT-2 does.
func TestBERTTrainOnText(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	run := filepath.Join(dir, "run")
	out := mustRun(t, append(bertArgs(text, run, "--steps", "2", "--eval-every", "0"), "--cache-dir", cache)...)
	if !strings.Contains(out, "done: 2 steps") {
		t.Fatalf("train --arch bert on a text file:\n%s", out)
	}
	// Resumed with the same --data but no --arch, and named by its checkpoints folder beside the
	// same --out, the run continues: the run's own family decides how the text is prepared.
	t.Chdir(dir) // relative names, as typed
	out = mustRun(t, "train", "--resume", checkpointsOf("run"), "--out", "run", "--data", "notes.txt", "--cache-dir", cache,
		"--steps", "3", "--threads", "1", "--tensorboard=false", "--device", "cpu")
	if !strings.Contains(out, "done: 3 steps") {
		t.Fatalf("resuming the BERT run with --data:\n%s", out)
	}
	mustFail(t, "--init loads GPT-2 weights", bertArgs(text, filepath.Join(dir, "run2"), "--init", filepath.Join(dir, "none.bin"))...)
}

// checkpointsOf is run's checkpoints folder.
func checkpointsOf(run string) string { return filepath.Join(run, "checkpoints") }

// profile and bench take --arch bert: profile's steps are the trainer's (the same losses and
// masked-token accuracies, bit for bit, with accumulation), profile --run profiles a BERT run,
// and bench times a BERT preset on random tokens.
func TestBERTProfileAndBench(t *testing.T) {
	dataDir := preparedBERT(t)
	run := filepath.Join(t.TempDir(), "run")
	mustRun(t, bertArgs(dataDir, run, "--steps", "3", "--log-every", "1", "--eval-every", "0", "--grad-accum", "2")...)
	trained := map[int][2]float64{}
	for _, line := range logLines(t, run) {
		var e struct {
			Step      int
			Loss, Acc *float64
		}
		if json.Unmarshal(line, &e) == nil && e.Loss != nil && e.Acc != nil {
			trained[e.Step] = [2]float64{*e.Loss, *e.Acc}
		}
	}
	js := filepath.Join(t.TempDir(), "p.json")
	out := mustRun(t, "profile", "--arch", "bert", "--data", dataDir, "--n-layer", "2", "--n-head", "2", "--n-embd", "32",
		"--block-size", "32", "--seq-len", "32", "--batch-size", "4", "--steps", "3", "--warmup-steps", "0", "--warmup", "2",
		"--lr", "1e-3", "--grad-accum", "2", "--threads", "1", "--device", "cpu", "--json", js)
	res := readProfile(t, js)
	if !strings.Contains(out, "BERT encoder 2 layers") || res.Arch != "bert" || len(res.Losses) != 3 || len(res.Accuracies) != 3 {
		t.Fatalf("profile --arch bert: arch %q, losses %v, accuracies %v; output:\n%s", res.Arch, res.Losses, res.Accuracies, out)
	}
	for i := range 3 {
		if got, want := [2]float64{res.Losses[i], res.Accuracies[i]}, trained[i+1]; got != want {
			t.Errorf("step %d: profiled loss and accuracy %v, trained %v", i+1, got, want)
		}
	}

	out = mustRun(t, "profile", "--run", run, "--steps", "1", "--warmup-steps", "0", "--threads", "1")
	if res := readProfile(t, filepath.Join(run, train.ProfileFile)); !strings.Contains(out, "BERT encoder") || res.Arch != "bert" || !strings.Contains(out, "GeluErfForward") {
		t.Errorf("profile --run of a BERT run: arch %q; output:\n%s", res.Arch, out)
	}
	mustFail(t, "--arch (saved bert, given gpt2) would change", "profile", "--run", run, "--arch", "gpt2", "--steps", "1")
	// Shape flags given on resume are compared with the run's: the same values are accepted.
	mustFail(t, "--n-layer (saved 2, given 3)", "train", "--resume", run, "--steps", "4", "--n-layer", "3")
	mustFail(t, "--n-embd (saved 32, given 128)", "train", "--resume", run, "--steps", "4", "--model", "bert-tiny") // 2 x 2 x 128
	mustRun(t, "train", "--resume", run, "--steps", "4", "--n-layer", "2", "--n-embd", "32", "--arch", "bert", "--threads", "1")

	// bench times the model train builds from the same flags: bert-base-uncased's 30522 tokens
	// unpadded, as a run on that vocab.txt has them (the bert-* presets give only the sizes),
	// 30528 with --pad-vocab 64.
	benchBERT := []string{"bench", "--arch", "bert", "--model", "bert-tiny", "--batch-size", "2", "--seq-len", "16", "--steps", "1", "--threads", "1"}
	var bench train.BenchResult
	out = mustRun(t, append(benchBERT, "--json")...)
	if err := json.Unmarshal([]byte(out), &bench); err != nil || bench.Arch != "bert" || bench.Model.VocabSize != 30522 || bench.Model.PaddedVocabSize != 30522 || bench.Model.Channels != 128 || !(bench.TokPerSec > 0) {
		t.Errorf("bench --arch bert --json: %v, %+v", err, bench)
	}
	out = mustRun(t, append(benchBERT, "--json", "--pad-vocab", "64")...)
	if err := json.Unmarshal([]byte(out), &bench); err != nil || bench.Model.PaddedVocabSize != 30528 {
		t.Errorf("bench --arch bert --pad-vocab 64: %v, padded vocabulary %d, want 30528", err, bench.Model.PaddedVocabSize)
	}
	var saved struct{ Model gpt.Config }
	if b, err := os.ReadFile(filepath.Join(run, "run.json")); err != nil || json.Unmarshal(b, &saved) != nil {
		t.Fatalf("run.json: %v", err)
	}
	out = mustRun(t, "bench", "--arch", "bert", "--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--block-size", "32", "--vocab-size", fmt.Sprint(saved.Model.VocabSize),
		"--batch-size", "2", "--seq-len", "16", "--steps", "1", "--threads", "1", "--json")
	if err := json.Unmarshal([]byte(out), &bench); err != nil || bench.Model != saved.Model {
		t.Errorf("bench with the run's flags: %v, model %+v; the run trained %+v", err, bench.Model, saved.Model)
	}
	// Its hints are a BERT's: --pad-vocab, not GPT-2's ladder, which bench --ladder refuses for BERT.
	if out := mustRun(t, benchBERT...); !strings.Contains(out, "hint: the vocabulary (30522) is not a multiple of 64") || strings.Contains(out, "ladder") {
		t.Errorf("bench --arch bert hints:\n%s", out)
	}
	mustFail(t, "bench --ladder times GPT-2", "bench", "--arch", "bert", "--ladder")
}

// fill reads a gpt2-tokenized text as training encodes it: the space before a [MASK] belongs to
// the masked word's token (" capital"), so no lone " " (id 220) precedes the mask, and the
// filled text has one space where the word goes. A second space stays a token of its own, as
// in training; byte-level text keeps its space byte.
func TestEncodeMaskedSpaceBeforeMask(t *testing.T) {
	g, err := tokenizer.GPT2()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.WithBERTSpecials(g)
	if err != nil {
		t.Fatal(err)
	}
	sp := tokenizer.SpecialsOf(tok)
	enc := func(s string) []int32 {
		var ids []int32
		for _, id := range tok.Encode([]byte(s)) {
			ids = append(ids, int32(id))
		}
		return ids
	}
	for _, tc := range []struct {
		masked  string
		words   []string // the token each [MASK] stands for
		trained string
	}{
		{"Paris is the [MASK] of France.", []string{" capital"}, "Paris is the capital of France."},
		{"[MASK] is the [MASK] of France.", []string{"Paris", " capital"}, "Paris is the capital of France."},
		{"Paris is the  [MASK].", []string{" capital"}, "Paris is the  capital."}, // two spaces: " " " capital"
		{"Paris is the\n[MASK].", []string{"capital"}, "Paris is the\ncapital."},
	} {
		ids, masks, err := encodeMasked(tok, sp, tc.masked, "--text")
		if err != nil || len(masks) != len(tc.words) {
			t.Fatalf("%q: masks %v, %v", tc.masked, masks, err)
		}
		filled := slices.Clone(ids)
		for i, pos := range masks {
			word := enc(tc.words[i])
			if filled[pos] != int32(sp.MASK) || len(word) != 1 {
				t.Fatalf("%q: position %d is %d, not [MASK]; %q is %v, not one token", tc.masked, pos, filled[pos], tc.words[i], word)
			}
			filled[pos] = word[0]
		}
		want := append(append([]int32{int32(sp.CLS)}, enc(tc.trained)...), int32(sp.SEP))
		if !slices.Equal(filled, want) {
			t.Errorf("%q encodes to %v with capital in place; training encodes %q as %v", tc.masked, filled, tc.trained, want)
		}
		if got := decodeText(tok, filled[1:len(filled)-1]); got != tc.trained {
			t.Errorf("%q filled reads %q, want %q", tc.masked, got, tc.trained)
		}
	}
	b, err := tokenizer.WithBERTSpecials(tokenizer.Byte())
	if err != nil {
		t.Fatal(err)
	}
	ids, _, err := encodeMasked(b, tokenizer.SpecialsOf(b), "a [MASK]", "--text")
	if bs := tokenizer.SpecialsOf(b); err != nil || !slices.Equal(ids, []int32{int32(bs.CLS), 'a', ' ', int32(bs.MASK), int32(bs.SEP)}) {
		t.Errorf("byte: \"a [MASK]\" encodes to %v, %v; want its space byte kept", ids, err)
	}
}

// fill and attn warn, in one line, when a text reaches past the --seq-len a run trained on
// (within its block size): those positions took no part in training. A text that fits, and a
// run that started from pretrained weights, get no warning.
func TestUntrainedPositionsWarning(t *testing.T) {
	short := []string{"--steps", "1", "--warmup", "1", "--block-size", "64", "--seq-len", "16", "--eval-every", "0"}
	bertRun := filepath.Join(t.TempDir(), "bert")
	mustRun(t, bertArgs(preparedBERT(t), bertRun, short...)...)
	gptRun := filepath.Join(t.TempDir(), "gpt")
	mustRun(t, trainArgs(prepared(t), gptRun, append(short, "--sample-tokens", "0")...)...)
	png := filepath.Join(t.TempDir(), "attn.png")
	long := "func main() { fmt.Println([MASK]) }" // a BERT reads 30 + 2 tokens, a GPT-2 the first 32 of 36
	for _, tc := range []struct {
		args []string
		want string // "" for no warning
	}{
		{[]string{"fill", "--ckpt", bertRun, "--text", long}, "reads 32 tokens (with [CLS] and [SEP]), but the run was trained on --seq-len 16: positions 16..31 were never trained"},
		{[]string{"fill", "--ckpt", bertRun, "--text", "func [MASK]ain"}, ""},
		{[]string{"attn", "--ckpt", bertRun, "--text", long, "--out", png}, "reads 32 tokens (with [CLS] and [SEP]), but bert step 1 was trained on --seq-len 16: positions 16..31 were never trained"},
		{[]string{"attn", "--ckpt", gptRun, "--text", long, "--out", png}, "reads 32 tokens, but gpt step 1 was trained on --seq-len 16: positions 16..31 were never trained"},
		{[]string{"attn", "--ckpt", gptRun, "--compare", gptRun, "--text", long, "--out", png}, "reads 32 tokens, but gpt step 1 was trained on --seq-len 16"},
		{[]string{"attn", "--ckpt", gptRun, "--text", "func main", "--out", png}, ""},
	} {
		code, _, errOut := gpt2go(t, append(tc.args, "--threads", "1")...)
		n := strings.Count(errOut, "warning: ")
		if code != 0 || (tc.want == "") != (n == 0) || n > 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("gpt2go %s: exit %d, stderr %q; want one warning containing %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	if note := untrainedNote(&train.Config{SeqLen: 16, Init: "gpt2"}, 32, false, "the run"); note != "" {
		t.Errorf("a run from pretrained weights: %q; want no warning (its positions were pretrained)", note)
	}
}
