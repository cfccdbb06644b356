package main

import (
	"strings"
	"testing"
)

// helpFlags returns the flags `gpt2go command -h` lists, each with its usage text.
func helpFlags(t *testing.T, command string) map[string]string {
	t.Helper()
	code, out, errOut := gpt2go(t, command, "-h")
	if code != 0 {
		t.Fatalf("gpt2go %s -h: exit %d: %s", command, code, errOut)
	}
	flags := map[string]string{}
	name := ""
	for line := range strings.SplitSeq(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			name = strings.Fields(rest)[0]
			flags[name] = ""
		} else if name != "" {
			flags[name] += strings.TrimSpace(line)
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
		_, got := helpFlags(t, c)["int8"]
		if want := c == "sample" || c == "eval"; got != want {
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
		if _, ok := flags[name]; ok {
			t.Errorf("profile -h lists --%s", name)
		}
	}
	for _, name := range []string{"steps", "lr", "batch-size", "grad-accum", "loss-scale", "seed"} {
		if _, ok := flags[name]; !ok {
			t.Errorf("profile -h lacks --%s", name)
		}
	}
	mustFail(t, "flag provided but not defined: -log", "profile", "--log", "x.jsonl")
}

// bench has no data, and profile runs without: their --vocab-size help gives the vocabulary of
// their random tokens, and 0 is refused as a value, not as a missing meta.json.
func TestHelpVocabWithoutData(t *testing.T) {
	for _, c := range []string{"bench", "profile"} {
		flags := helpFlags(t, c)
		if vocab := flags["vocab-size"]; !strings.Contains(vocab, "random") || strings.Contains(vocab, "meta.json") {
			t.Errorf("%s -h: --vocab-size %q", c, vocab)
		}
		mustFail(t, "--vocab-size must be >= 1, got 0", c, "--vocab-size", "0", "--n-layer", "1", "--n-head", "2", "--n-embd", "16")
	}
	if arch := helpFlags(t, "bench")["arch"]; strings.Contains(arch, "dataset") {
		t.Errorf("bench -h: --arch %q speaks of data", arch)
	}
}

// -h starts with a usage line, which for report and plot names the run directories they need.
func TestHelpUsage(t *testing.T) {
	for c, want := range map[string]string{
		"report": "Usage: gpt2go report RUNDIR [flags]",
		"plot":   "Usage: gpt2go plot RUNDIR|LOG.jsonl... [flags]",
		"train":  "Usage: gpt2go train [flags]\n",
	} {
		if _, out, _ := gpt2go(t, c, "-h"); !strings.HasPrefix(out, want) {
			t.Errorf("gpt2go %s -h begins %q, want %q", c, out[:min(len(out), 60)], want)
		}
	}
}

// gpt2go help COMMAND prints the command's help; --version and -v print the version, as the
// version command does, which takes no arguments.
func TestHelpAndVersion(t *testing.T) {
	_, trainHelp, _ := gpt2go(t, "train", "-h")
	if got := mustRun(t, "help", "train"); got != trainHelp || !strings.HasPrefix(got, "Usage: gpt2go train") {
		t.Errorf("help train printed %.80q, want train -h's %.80q", got, trainHelp)
	}
	want := mustRun(t, "version")
	for _, flag := range []string{"--version", "-v"} {
		if got := mustRun(t, flag); got != want || !strings.HasPrefix(got, "gpt2go ") {
			t.Errorf("gpt2go %s printed %q, want %q", flag, got, want)
		}
	}
	mustFail(t, "flag provided but not defined: -bogus", "version", "--bogus")
	mustFail(t, `unknown command "bogus"`, "help", "bogus")
}
