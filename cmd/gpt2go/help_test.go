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
