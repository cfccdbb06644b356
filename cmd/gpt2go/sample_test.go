package main

import (
	"path/filepath"
	"strings"
	"testing"
)

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
	mustFail(t, "temperature finite", append(base, "--temperature", "NaN")...)
}
