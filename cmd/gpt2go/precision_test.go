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
// which precision it timed, a bad value is a one-line error, and --tf32 alone means tf32.
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
	// --tf32 given alone asks for tf32 (fp32 storage, TF32 matmuls), which run.json records.
	tf32 := mustRun(t, trainArgs(text, filepath.Join(dir, "tf32"), "--steps", "1", "--cache-dir", filepath.Join(dir, "cache"), "--tf32")...)
	if !strings.Contains(tf32, "precision: tf32 (fp32 storage") {
		t.Errorf("train --tf32 does not run tf32:\n%s", tf32)
	}
}

// The precision a command runs in, for every combination of --precision, --tf32 and the device:
// --precision wins; --tf32 given alone keeps its meaning from before mixed precision (fp32
// storage, TF32 matmuls; =false exact fp32); with neither, a GPU runs its generation's 16-bit
// format (bf16 from sm_80, fp16 on sm_70/75) and the CPU fp32.
func TestResolvePrecision(t *testing.T) {
	const cpu = 0
	for _, c := range []struct {
		precision       string
		tf32, tf32Given bool
		gpuMajor        int
		want            string
	}{
		{"", true, false, cpu, "fp32"}, // the CPU's default
		{"", true, false, 7, "fp16"},   // sm_70, sm_75: no bf16 products
		{"", true, false, 8, "bf16"},   // sm_80 and newer
		{"", true, false, 9, "bf16"},
		{"", true, false, 10, "bf16"},
		{"", true, true, 9, "tf32"}, // --tf32: as before mixed precision
		{"", true, true, 7, "tf32"},
		{"", true, true, cpu, "tf32"}, // which the CPU runs as fp32
		{"", false, true, 9, "fp32"},  // --tf32=false: exact fp32
		{"", false, true, cpu, "fp32"},
		{"bf16", true, true, 9, "bf16"}, // --precision wins over --tf32
		{"fp16", false, true, 9, "fp16"},
		{"fp32", true, true, 9, "fp32"},
		{"tf32", false, true, 9, "tf32"},
		{"bf16", true, false, cpu, "bf16"},
		{"fp16", true, false, 8, "fp16"},
	} {
		if got := resolvePrecision(c.precision, c.tf32, c.tf32Given, c.gpuMajor); got != c.want {
			t.Errorf("--precision %q --tf32=%v (given %v) on major %d: %s, want %s", c.precision, c.tf32, c.tf32Given, c.gpuMajor, got, c.want)
		}
	}
}
