package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A model too big for what the process may use stops before allocating, with the one-line error
// and advice that the GPU gives, not Go's "fatal error: out of memory" and a goroutine dump. The
// case is the one a new user tried: GPT-2 medium at B=8 T=1024 (about 21 GB) under a 6 GB
// address-space limit, set with the shell's ulimit on a child process.
func TestBenchTooBigForHostMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to set ulimit: ", err)
	}
	for _, prec := range []string{"fp32", "bf16"} {
		cmd := exec.Command("sh", "-c", `ulimit -v 6000000 && exec "$0" "$@"`, os.Args[0],
			"bench", "--device", "cpu", "--model", "gpt2-medium", "--batch-size", "8", "--seq-len", "1024", "--precision", prec)
		cmd.Env = append(os.Environ(), "GPT2GO_TEST_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s: bench of a 21 GB model under a 6 GB limit succeeded:\n%s", prec, out)
		}
		text := strings.TrimSpace(string(out))
		lines := strings.Split(text, "\n")
		last := lines[len(lines)-1]
		for _, want := range []string{"gpt2go bench: the model needs", "in host memory", "activations", "RLIMIT_AS",
			"--batch-size", "--grad-accum", "ulimit -v"} {
			if !strings.Contains(last, want) {
				t.Errorf("%s: last line %q lacks %q", prec, last, want)
			}
		}
		// On the CPU a 16-bit precision costs memory (its copy is float32 beside the fp32 master):
		// the advice says so, rather than leaving bf16 to look like a saving.
		const costs = "--precision bf16 needs 1.32 GiB more than fp32 here, not less"
		if strings.Contains(last, costs) != (prec == "bf16") {
			t.Errorf("%s: last line %q; want %q in bf16 only", prec, last, costs)
		}
		if len(lines) > 2 || strings.Contains(text, "fatal error") || strings.Contains(text, "goroutine") {
			t.Errorf("%s: want a device line and one error line, got:\n%s", prec, text)
		}
	}
}

// sample --num-samples more than memory holds stops with the KV cache's one-line refusal and its
// advice, printing no text: it died of Go's "fatal error: out of memory" when the command and
// the generation made room for every sample's tokens before the cache's memory plan could
// refuse (here 300 million samples: 7 GB of empty token lists alone, under a 6 GB limit).
func TestSampleTooManyForHostMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to set ulimit: ", err)
	}
	cmd := exec.Command("sh", "-c", `ulimit -v 6000000 && exec "$0" "$@"`, os.Args[0],
		"sample", "--init", refModel, "--tokenizer", "byte", "--device", "cpu", "--threads", "1",
		"--prompt", "Hi", "--tokens", "2", "--num-samples", "300000000")
	cmd.Env = append(os.Environ(), "GPT2GO_TEST_CHILD=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		t.Fatalf("300 million samples under a 6 GB limit succeeded:\n%s", stderr.String())
	}
	text := strings.TrimSpace(stderr.String())
	lines := strings.Split(text, "\n")
	last := lines[len(lines)-1]
	for _, want := range []string{"gpt2go sample: kv cache for 300000000 sequences", "KV cache", "--num-samples"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
	if len(lines) > 2 || strings.Contains(text, "fatal error") || strings.Contains(text, "goroutine") {
		t.Errorf("want a device line and one error line, got:\n%s", text)
	}
	if stdout.Len() > 0 {
		t.Errorf("a refusal printed text: %.200q", stdout.String())
	}
}
