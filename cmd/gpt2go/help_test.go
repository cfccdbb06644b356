package main

import (
	"strings"
	"testing"
)

// helpFlags returns the flags `gpt2go command -h` lists.
func helpFlags(t *testing.T, command string) map[string]bool {
	t.Helper()
	code, out, errOut := gpt2go(t, command, "-h")
	if code != 0 {
		t.Fatalf("gpt2go %s -h: exit %d: %s", command, code, errOut)
	}
	flags := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		if name, ok := strings.CutPrefix(line, "  -"); ok {
			flags[strings.Fields(name)[0]] = true
		}
	}
	if len(flags) == 0 {
		t.Fatalf("gpt2go %s -h lists no flags:\n%s", command, out)
	}
	return flags
}

// -h lists --int8 only where it works: the GPT-2 forward passes of sample and eval.
func TestHelpInt8(t *testing.T) {
	for _, c := range []string{"train", "sample", "fill", "eval", "bench", "profile", "attn"} {
		if got, want := helpFlags(t, c)["int8"], c == "sample" || c == "eval"; got != want {
			t.Errorf("gpt2go %s -h lists --int8: %v, want %v", c, got, want)
		}
	}
}

// profile times steps: -h lists none of a run's bookkeeping flags, which it would ignore, and the
// step flags train has.
func TestHelpProfile(t *testing.T) {
	flags := helpFlags(t, "profile")
	for _, name := range []string{"eval-every", "eval-batches", "sample-every", "sample-tokens", "ckpt-every", "keep-ckpts",
		"log-every", "log", "hellaswag", "eval-hellaswag-every", "hellaswag-limit"} {
		if flags[name] {
			t.Errorf("profile -h lists --%s", name)
		}
	}
	for _, name := range []string{"steps", "lr", "batch-size", "grad-accum", "loss-scale", "seed"} {
		if !flags[name] {
			t.Errorf("profile -h lacks --%s", name)
		}
	}
	mustFail(t, "flag provided but not defined: -log", "profile", "--log", "x.jsonl")
}
