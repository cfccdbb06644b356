package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpt2go/gpt2go/checkpoint"
)

// While a training process writes a run directory, a second `train --resume` of it is refused in
// one line naming the holder; after a kill -9 of the holder the lock is gone with it, and the
// resume runs.
func TestSecondWriterRefusedUntilKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dataDir := prepared(t)
	runDir := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(os.Args[0], trainArgs(dataDir, runDir, "--steps", "100000", "--ckpt-every", "5", "--eval-every", "0", "--sample-tokens", "0")...)
	cmd.Env = append(os.Environ(), "GPT2GO_TEST_CHILD=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(checkpoint.Path(runDir, 5)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never wrote its step-5 checkpoint")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mustFail(t, fmt.Sprintf("is being written by pid %d on ", cmd.Process.Pid), "train", "--resume", runDir, "--steps", "20")
	cmd.Process.Kill() // SIGKILL: no chance to clean up
	cmd.Wait()
	entries, err := checkpoint.List(runDir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("checkpoints after the kill: %v, %v", entries, err)
	}
	steps := fmt.Sprint(entries[len(entries)-1].Step + 5)
	out := mustRun(t, "train", "--resume", runDir, "--steps", steps, "--threads", "1")
	if want := "done: " + steps + " steps"; !strings.Contains(out, want) {
		t.Fatalf("resume after kill -9: output lacks %q:\n%s", want, out)
	}
}
