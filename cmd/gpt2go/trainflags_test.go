package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The schedule's defaults follow the run (--min-lr a tenth of --lr, a warmup no longer than
// --steps), the flags that would make no sense are refused in one line naming them, and
// run.json records an absolute --log path.
func TestTrainFlagDefaultsAndRefusals(t *testing.T) {
	dataDir := prepared(t)
	tmp := t.TempDir()
	runDir := filepath.Join(tmp, "run")
	t.Chdir(tmp)
	mustRun(t, trainArgs(dataDir, runDir, "--steps", "5", "--lr", "1e-4", "--log", "mylog.jsonl")...)
	var saved struct {
		LR      float64 `json:"lr"`
		MinLR   float64 `json:"min_lr"`
		Warmup  int     `json:"warmup"`
		LogFile string  `json:"log_file"`
	}
	b, _ := os.ReadFile(filepath.Join(runDir, "run.json"))
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatal(err)
	}
	if saved.MinLR != 1e-5 || saved.Warmup != 0 || saved.LogFile != filepath.Join(tmp, "mylog.jsonl") {
		t.Errorf("run.json: lr %g, min_lr %g, warmup %d, log_file %q; want min_lr lr/10, warmup 0 (5 steps), log_file absolute",
			saved.LR, saved.MinLR, saved.Warmup, saved.LogFile)
	}
	mustRun(t, "train", "--resume", runDir, "--steps", "6", "--pad-vocab", "0") // the run's own: no padding
	for _, c := range []struct {
		want string
		args []string
	}{
		{"--warmup 10 is longer than --steps 5", trainArgs(dataDir, filepath.Join(tmp, "w"), "--steps", "5", "--warmup", "10")},
		{"--vocab-size 300 differs from the data's vocabulary", trainArgs(dataDir, filepath.Join(tmp, "v"), "--vocab-size", "300")},
		{"--stop-at must be", trainArgs(dataDir, filepath.Join(tmp, "s"), "--stop-at", "-1")},
		{"--eval-batches 0", trainArgs(dataDir, filepath.Join(tmp, "e"), "--eval-batches", "0")},
		{"--min-lr 0.001 must be in [0, --lr 0.0001]", []string{"train", "--resume", runDir, "--steps", "7", "--min-lr", "1e-3"}},
		{"cannot change --pad-vocab (the run pads its vocabulary of", []string{"train", "--resume", runDir, "--steps", "7", "--pad-vocab", "100"}},
		{"--init starts a new run", []string{"train", "--resume", runDir, "--steps", "7", "--init", filepath.Join(tmp, "m.bin")}},
	} {
		mustFail(t, c.want, c.args...)
	}
	if _, err := os.Stat(filepath.Join(tmp, "w", "run.json")); err == nil || strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a refused run wrote run.json")
	}
	// --steps 0 saves the initial weights and keeps the default warmup for the steps a resume
	// gives it; profile's --steps are not a schedule's, so its --warmup may be longer.
	zero := filepath.Join(tmp, "zero")
	mustRun(t, trainArgs(dataDir, zero, "--steps", "0")...)
	if b, _ := os.ReadFile(filepath.Join(zero, "run.json")); !strings.Contains(string(b), `"warmup": 50,`) {
		t.Errorf("--steps 0 run.json: %s, want the default warmup 50", b)
	}
	mustRun(t, append([]string{"profile", "--steps", "1", "--warmup", "10"}, tiny[:10]...)...)
	// After --stop-at the run continues to its own --steps: the hint says just --resume.
	stopped := filepath.Join(tmp, "stopped")
	if out := mustRun(t, trainArgs(dataDir, stopped, "--steps", "4", "--stop-at", "2")...); !strings.HasSuffix(strings.TrimSpace(out), "gpt2go train --resume "+stopped) {
		t.Errorf("after --stop-at, the last line is not the plain resume hint:\n%s", out)
	}
	if out := mustRun(t, "train", "--resume", stopped); !strings.HasSuffix(strings.TrimSpace(out), "--resume "+stopped+" --steps N") {
		t.Errorf("a finished run's hint lacks --steps N:\n%s", out)
	}
	// A folder that holds no run is not resumed, and gets no lock file.
	plain := filepath.Join(tmp, "notes")
	os.MkdirAll(plain, 0o755)
	mustFail(t, "not a run directory", "train", "--resume", plain)
	if entries, _ := os.ReadDir(plain); len(entries) != 0 {
		t.Errorf("--resume of a plain folder left %d files in it", len(entries))
	}
}

// More threads than CPUs are allowed but warned about: every worker spins for work, so the
// steps only get slower.
func TestThreadsBeyondCPUsWarn(t *testing.T) {
	code, _, errOut := gpt2go(t, "bench", "--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--batch-size", "1", "--seq-len", "8", "--steps", "1", "--threads", "4096")
	if code != 0 || !strings.Contains(errOut, "warning: --threads 4096 is more than the") {
		t.Errorf("bench --threads 4096: exit %d, stderr %q; want a warning", code, errOut)
	}
}
