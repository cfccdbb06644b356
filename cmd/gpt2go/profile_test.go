package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend/profile"
	"github.com/gpt2go/gpt2go/train"
)

func readProfile(t *testing.T, path string) *train.ProfileResult {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res train.ProfileResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &res
}

func TestProfileTableTraceJSON(t *testing.T) {
	dir := t.TempDir()
	trace, js := filepath.Join(dir, "trace.json"), filepath.Join(dir, "profile.json")
	out := mustRun(t, "profile", "--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
		"--batch-size", "2", "--seq-len", "16", "--steps", "3", "--warmup-steps", "1", "--threads", "2",
		"--trace", trace, "--json", js, "--by-shape")
	for _, want := range []string{"3 profiled steps after 1 warm-up", "self ms", "GFLOP/s", "MatmulForward (N=32 C=16 OC=48)",
		"[step/forward/layer]", "AttentionBackward", "sums to 100", "trace: " + trace} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	res := readProfile(t, js)
	if res.Steps != 3 || len(res.Losses) != 4 || res.Model.VocabSize != 257 || res.Report == nil || len(res.Report.Rows) < 20 {
		t.Errorf("profile JSON: steps %d, losses %v, vocab %d, profile %v", res.Steps, res.Losses, res.Model.VocabSize, res.Report)
	}
	raw, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(raw, &tr); err != nil || len(tr.TraceEvents) < 100 {
		t.Fatalf("trace: %v, %d events", err, len(tr.TraceEvents))
	}
	mustFail(t, "--steps >= 1", "profile", "--steps", "0", "--n-layer", "1")
}

// The profiled steps are the trainer's steps: same data, same weights, bit-identical losses. With
// --run the profile reads the run's config and weights and writes RUNDIR/profile.json.
func TestProfileMatchesTrainingAndRun(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "abc.txt")
	os.WriteFile(text, []byte(strings.Repeat("abc cab bca\n", 300)), 0o644)
	cache := filepath.Join(dir, "cache")
	runDir := filepath.Join(dir, "run")
	mustRun(t, trainArgs(text, runDir, "--steps", "3", "--cache-dir", cache, "--grad-accum", "2", "--sample-tokens", "0")...)
	trained := readLosses(t, runDir)

	js := filepath.Join(dir, "p.json")
	mustRun(t, append(append([]string{"profile", "--data", text, "--cache-dir", cache, "--json", js}, withoutBookkeeping(tiny)...),
		"--steps", "3", "--warmup-steps", "0", "--grad-accum", "2")...)
	profiled := readProfile(t, js)
	if len(profiled.Losses) != 3 {
		t.Fatalf("profile losses %v", profiled.Losses)
	}
	for step, loss := range profiled.Losses {
		if trained[step+1] != loss {
			t.Errorf("step %d: profiled loss %v != trained %v", step+1, loss, trained[step+1])
		}
	}

	out := mustRun(t, "profile", "--run", runDir, "--steps", "1", "--warmup-steps", "0", "--threads", "2")
	res := readProfile(t, filepath.Join(runDir, train.ProfileFile))
	if !strings.Contains(out, "json: "+filepath.Join(runDir, train.ProfileFile)) || res.GradAccum != 2 || res.Data == "" || res.Steps != 1 {
		t.Errorf("profile --run: grad accum %d, data %q, steps %d; output:\n%s", res.GradAccum, res.Data, res.Steps, out)
	}
	// --n-embd 16 is not a multiple of 64: the hint, printed and kept for the report.
	if !strings.Contains(out, "hint: --n-embd 16 is not a multiple of 64") || len(res.Hints) == 0 {
		t.Errorf("profile --run: hints %q; output:\n%s", res.Hints, out)
	}
	// gpt2go report reads the same file as a bare profile table.
	raw, err := os.ReadFile(filepath.Join(runDir, train.ProfileFile))
	if err != nil {
		t.Fatal(err)
	}
	var table profile.Report
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Rows) < 20 || table.WallMs <= 0 || table.Backend == "" {
		t.Errorf("RUNDIR/%s as a profile.Report: %v, %d rows, %v ms, backend %q", train.ProfileFile, err, len(table.Rows), table.WallMs, table.Backend)
	}
	mustFail(t, "--run profiles the run as it was configured", "profile", "--run", runDir, "--batch-size", "3")
}

// withoutBookkeeping is a train command line's args without the flags of runBookkeeping (and
// their values), which profile does not take.
func withoutBookkeeping(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if slices.Contains(runBookkeeping, strings.TrimLeft(args[i], "-")) {
			i++ // its value
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// profile --precision profiles that precision: its header and JSON name it, and its losses are
// not fp32's; tf32 runs as fp32 on the CPU, and says so. bench names the precision the same way.
func TestProfilePrecision(t *testing.T) {
	dir := t.TempDir()
	prof := func(prec string) (string, *train.ProfileResult) {
		js := filepath.Join(dir, prec+".json")
		out := mustRun(t, "profile", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
			"--batch-size", "2", "--seq-len", "16", "--steps", "1", "--warmup-steps", "1", "--threads", "1",
			"--device", "cpu", "--precision", prec, "--json", js)
		return out, readProfile(t, js)
	}
	_, fp32 := prof("fp32")
	for _, c := range []struct{ prec, header, json string }{
		{"fp16", "B=2 T=16, fp16, accum 1 on", "fp16"},
		{"bf16", "B=2 T=16, bf16, accum 1 on", "bf16"},
		{"tf32", "B=2 T=16, fp32 (tf32 runs as fp32 on the CPU), accum 1 on", "fp32"},
	} {
		out, res := prof(c.prec)
		if !strings.Contains(out, c.header) || res.Precision != c.json {
			t.Errorf("profile --precision %s: want %q in the output and JSON precision %q, got %q; output:\n%s", c.prec, c.header, c.json, res.Precision, out)
		}
		if same := slices.Equal(res.Losses, fp32.Losses); same != (c.prec == "tf32") {
			t.Errorf("profile --precision %s: losses %v, fp32's %v", c.prec, res.Losses, fp32.Losses)
		}
	}
	bench := []string{"bench", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--vocab-size", "100",
		"--batch-size", "2", "--seq-len", "8", "--steps", "1", "--threads", "1", "--device", "cpu", "--precision", "tf32"}
	if out := mustRun(t, bench...); !strings.Contains(out, "B=2 T=8, fp32 (tf32 runs as fp32 on the CPU), on cpu") {
		t.Errorf("bench --precision tf32 on the CPU does not say it runs fp32:\n%s", out)
	}
	if js := mustRun(t, append(bench, "--json")...); !strings.Contains(js, `"precision":"fp32"`) {
		t.Errorf("bench --precision tf32 --json on the CPU does not say fp32: %s", js)
	}
	// Loss scaling is fp16's: profile refuses its flags in another precision, as train does.
	mustFail(t, "--loss-scale applies to --precision fp16 only", "profile", "--n-layer", "1", "--device", "cpu", "--precision", "bf16", "--loss-scale", "1024")
}
