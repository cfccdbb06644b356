package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// A model file without a recorded tokenizer (llm.c) is refused with the advice that fits its
// vocabulary: --tokenizer byte for a byte model's, the run's checkpoints for a char model's.
func TestSampleWithoutTokenizer(t *testing.T) {
	dir := t.TempDir()
	byteRun, byteFile, charFile := filepath.Join(dir, "byte"), filepath.Join(dir, "byte.bin"), filepath.Join(dir, "char.bin")
	mustRun(t, trainArgs(prepared(t), byteRun, "--steps", "1", "--sample-tokens", "0")...)
	mustRun(t, "export", "--ckpt", byteRun, "--out", byteFile)
	mustRun(t, "export", "--ckpt", charRun(t), "--out", charFile)
	mustFail(t, "its vocabulary is the byte tokenizer's size: pass --tokenizer byte", "sample", "--init", byteFile)
	mustFail(t, "neither gpt2 (50257 tokens) nor byte (257) fits it", "sample", "--init", charFile)
	mustRun(t, "sample", "--init", byteFile, "--tokenizer", "byte", "--tokens", "2", "--threads", "1")
}

// sample with the KV cache: several samples as one batch, each printed after a separator, with
// the speeds on stderr; greedy text the same as without the cache; a notice when the context
// fills; --max-new-tokens as --tokens.
func TestSampleBatchAndCache(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "run")
	mustRun(t, trainArgs(prepared(t), runDir, "--steps", "10", "--ckpt-every", "10")...)
	base := []string{"sample", "--ckpt", runDir, "--prompt", "func ", "--threads", "2"}

	code, out, errOut := gpt2go(t, append(base, "--max-new-tokens", "20", "--num-samples", "3", "--temperature", "1")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	parts := strings.Split(out, "---- sample ")
	if len(parts) != 4 || parts[0] != "" || !strings.HasPrefix(parts[3], "3 of 3 ----\nfunc ") {
		t.Fatalf("want three samples after separators, got %q", out)
	}
	if parts[1] == parts[2] && parts[2] == parts[3] {
		t.Errorf("the three samples are identical: %q", out)
	}
	if !strings.Contains(errOut, "prompt: 5 tokens x 3") || !strings.Contains(errOut, "then 19 tokens x 3") || !strings.Contains(errOut, "KV cache") {
		t.Errorf("stderr lacks the speeds: %q", errOut)
	}

	greedy := append(base, "--tokens", "25", "--temperature", "0")
	if cached, uncached := mustRun(t, greedy...), mustRun(t, append(greedy, "--no-cache")...); cached != uncached {
		t.Errorf("greedy text with the cache %q, without %q", cached, uncached)
	}

	_, _, errOut = gpt2go(t, append(base, "--tokens", "60")...) // block size 32
	if strings.Count(errOut, "context full") != 1 {
		t.Errorf("want one notice that the context filled, stderr %q", errOut)
	}
	mustFail(t, "--num-samples", append(base, "--no-cache", "--num-samples", "2")...)
	mustFail(t, "--num-samples", append(base, "--num-samples", "0")...)
	mustFail(t, "--temperature must be a finite number >= 0 (0: greedy), got NaN", append(base, "--temperature", "NaN")...)
	mustFail(t, "--top-k must be >= 0 (0: all tokens), got -1", append(base, "--top-k", "-1")...)
}

// A sample's text after its prompt is what decoding them together adds: WordPiece spaces words
// ("the" "king" reads "the king") and joins pieces ("king" "##s" reads "kings"), which decoding
// each new token alone (streaming) or the new tokens alone (later samples) got wrong.
func TestContinuation(t *testing.T) {
	wp, err := tokenizer.ReadWordPiece("../../tokenizer/testdata/wordpiece/vocab.txt", true)
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) int { return wp.Encode([]byte(s))[0] }
	the, king, s := id("the"), id("king"), 443 // "##s", line 444 of vocab.txt
	for _, c := range []struct {
		before int
		ids    []int
		want   string
	}{{the, []int{king}, " king"}, {king, []int{s}, "s"}, {the, []int{king, s, the}, " kings the"}} {
		if got := continuation(wp, c.before, c.ids); got != c.want {
			t.Errorf("continuation(%d, %v) = %q, want %q", c.before, c.ids, got, c.want)
		}
	}
	byteTok, err := tokenizer.New("byte", "", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := continuation(byteTok, 'a', []int{0xc3, 0xa9}); got != "\xc3\xa9" {
		t.Errorf("byte tokens: %q, want the bytes as they are", got)
	}
}

// An explicit --tokenizer must be the model's, up to padding: byte ids under a GPT-2
// vocabulary are refused (they sampled replacement characters), gpt2 under 50304 is taken.
func TestSampleTokenizerMustFit(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	os.WriteFile(text, []byte(strings.Repeat("To be, or not to be: that is the question.\n", 40)), 0o644)
	data := filepath.Join(dir, "data")
	mustRun(t, "prepare", "--input", text, "--out", data, "--tokenizer", "gpt2")
	run := filepath.Join(dir, "run")
	mustRun(t, "train", "--data", data, "--out", run, "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
		"--seq-len", "16", "--batch-size", "2", "--steps", "1", "--pad-vocab", "64", "--threads", "1", "--sample-tokens", "0")
	mustFail(t, "--tokenizer byte has 257 tokens, far fewer than the model's 50257", "sample", "--ckpt", run, "--tokenizer", "byte")
	mustRun(t, "sample", "--ckpt", run, "--tokenizer", "gpt2", "--tokens", "2", "--threads", "1")
}

// When the KV cache does not fit, sample's advice names what shrinks it: fewer samples or
// tokens, a smaller model, a 16-bit precision when it computes in fp32; not --int8, which it
// offered even when given, and which leaves the cache as it is.
func TestSampleCacheRefusalAdvice(t *testing.T) {
	base := []string{"sample", "--init", refModel, "--tokenizer", "byte", "--device", "cpu", "--threads", "1", "--tokens", "2", "--num-samples", "2000000000"}
	for _, c := range []struct {
		flags    []string
		bf16Hint bool
	}{{nil, false}, {[]string{"--int8"}, false}, {[]string{"--precision", "bf16"}, false}, {[]string{"--int8", "--precision", "bf16"}, false}} { // the CPU stores bf16 in float32
		code, out, errOut := gpt2go(t, append(base, c.flags...)...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		last := lines[len(lines)-1]
		if code == 0 || !strings.Contains(last, "KV cache") || out != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want the KV cache's refusal", c.flags, code, out, errOut)
		}
		if !strings.Contains(last, "use a smaller --num-samples or --tokens") || !strings.Contains(last, "a smaller model") || strings.Contains(last, "--int8") {
			t.Errorf("%v: advice in %q", c.flags, last)
		}
		if got := strings.Contains(last, "--precision bf16"); got != c.bf16Hint {
			t.Errorf("%v: advice offers --precision bf16: %v, want %v: %q", c.flags, got, c.bf16Hint, last)
		}
	}
}

// The speed line gives the prompt's rate, then the rate of the tokens after the first when there
// are any: --tokens 1 printed "then 0 tokens x 1 in 0.00 s (0.0 tok/s)".
func TestSampleSpeedLine(t *testing.T) {
	base := []string{"sample", "--init", refModel, "--tokenizer", "byte", "--device", "cpu", "--threads", "1", "--prompt", "Hi"}
	for _, c := range []struct {
		tokens, then string
	}{{"1", ""}, {"3", " | then 2 tokens x 1 in "}} {
		code, _, errOut := gpt2go(t, append(base, "--tokens", c.tokens)...)
		if code != 0 {
			t.Fatalf("--tokens %s: exit %d: %s", c.tokens, code, errOut)
		}
		line := errOut[strings.Index(errOut, "prompt: 2 tokens x 1 in "):]
		if c.then == "" && strings.Contains(line, "then") || !strings.Contains(line, c.then) {
			t.Errorf("--tokens %s: speed line %q, want the tokens after the first %q", c.tokens, line, c.then)
		}
	}
}

// A 16-bit --precision is offered for a KV cache that does not fit only where it halves the
// cache: in fp32 on a backend that stores bf16 in 2 bytes (CUDA), not on the CPU (float32).
func TestSampleCacheAdviceHalf(t *testing.T) {
	for _, c := range []struct {
		prec   gpt.Precision
		half16 bool
		want   bool
	}{{gpt.Precision{}, true, true}, {gpt.Precision{}, false, false}, {gpt.Precision{Compute: backend.BF16}, true, false}} {
		if got := strings.Contains(sampleCacheAdvice(c.prec, c.half16), "--precision bf16"); got != c.want {
			t.Errorf("%+v, 2-byte bf16 %v: offers --precision bf16 %v, want %v", c.prec, c.half16, got, c.want)
		}
	}
}
