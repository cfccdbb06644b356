package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --precision on the command line: recorded in run.json and printed with the first log lines,
// the checkpoint of a bf16 run samples and evaluates on the CPU in fp32 and in bf16, bench says
// which precision it timed, and a bad value is a one-line error.
func TestPrecisionFlag(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "abc.txt")
	os.WriteFile(text, []byte(strings.Repeat("abc cab bca\n", 300)), 0o644)
	run := filepath.Join(dir, "run")
	out := mustRun(t, trainArgs(text, run, "--steps", "2", "--cache-dir", filepath.Join(dir, "cache"), "--precision", "bf16")...)
	if !strings.Contains(out, "precision: bf16 (fp32 master weights") {
		t.Errorf("the first log lines do not give the precision:\n%s", out)
	}
	raw, err := os.ReadFile(filepath.Join(run, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Precision string `json:"precision"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil || cfg.Precision != "bf16" {
		t.Errorf("run.json precision %q (%v), want bf16", cfg.Precision, err)
	}
	for _, prec := range []string{"fp32", "bf16"} {
		mustRun(t, "sample", "--ckpt", run, "--tokens", "5", "--device", "cpu", "--precision", prec)
		mustRun(t, "eval", "--ckpt", run, "--text", text, "--device", "cpu", "--precision", prec)
	}
	js := mustRun(t, "bench", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--vocab-size", "100",
		"--batch-size", "2", "--seq-len", "8", "--steps", "1", "--threads", "1", "--device", "cpu", "--precision", "fp16", "--json")
	if !strings.Contains(js, `"precision":"fp16"`) {
		t.Errorf("bench --json does not say fp16: %s", js)
	}
	mustFail(t, "--precision", "bench", "--precision", "int8", "--device", "cpu")
}
