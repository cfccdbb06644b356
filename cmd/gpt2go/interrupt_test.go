package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Ctrl-C (SIGINT) or SIGTERM stops sample, eval and bench, which each run until their work is
// done, within moments: one line saying so, and the exit status a shell gives a process the
// signal ended (128 + its number).
func TestInterrupt(t *testing.T) {
	dataDir := prepared(t)
	runDir := filepath.Join(t.TempDir(), "run")
	mustRun(t, trainArgs(dataDir, runDir, "--steps", "2", "--sample-tokens", "0")...)
	for _, c := range []struct {
		sig  syscall.Signal
		want string
		args []string
	}{
		{syscall.SIGINT, "gpt2go sample: interrupted after", []string{"sample", "--ckpt", runDir, "--tokens", "100000000"}},
		{syscall.SIGINT, "gpt2go sample: interrupted after", []string{"sample", "--ckpt", runDir, "--tokens", "100000000", "--no-cache"}},
		{syscall.SIGINT, "gpt2go eval: interrupted after", []string{"eval", "--ckpt", runDir, "--data", dataDir, "--batches", "100000000"}},
		{syscall.SIGTERM, "gpt2go bench: interrupted at step", []string{"bench", "--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--vocab-size", "256", "--steps", "100000000"}},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			code, stderr, took := interruptChild(t, c.sig, append(c.args, "--threads", "1"))
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if code != 128+int(c.sig) || !strings.HasPrefix(lines[len(lines)-1], c.want) || took > 10*time.Second {
				t.Errorf("%v %v: exit %d after %v, stderr:\n%s\nwant exit %d and a last line starting %q", c.sig, c.args, code, took, stderr, 128+int(c.sig), c.want)
			}
		})
	}
}

// A failure of a command whose context a signal cancelled exits 128 + the signal's number.
func TestInterruptExitCode(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stopSignal{syscall.SIGINT})
	var stderr bytes.Buffer
	code := run(ctx, []string{"bench", "--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--vocab-size", "256", "--threads", "1"}, &bytes.Buffer{}, &stderr)
	if code != 130 || !strings.Contains(stderr.String(), "gpt2go bench: interrupted at step 0 of 6") {
		t.Errorf("bench with its context cancelled by SIGINT: exit %d, stderr %q", code, stderr.String())
	}
	if code := run(context.Background(), []string{"sample"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 1 {
		t.Errorf("a failure without a signal: exit %d, want 1", code)
	}
}

// interruptChild starts gpt2go args in a child process, sends it sig once it has opened its
// device (its "device:" line, after the signal handler is installed) and returns its exit code,
// its stderr and how long it took to end after the signal.
func interruptChild(t *testing.T, sig syscall.Signal, args []string) (int, string, time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GPT2GO_TEST_CHILD=1")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	device := make(chan bool, 1)
	done := make(chan bool)
	go func() {
		defer close(done)
		for sc := bufio.NewScanner(pipe); sc.Scan(); {
			stderr.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "device:") {
				device <- true
			}
		}
	}()
	select {
	case <-device:
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("gpt2go %v did not open its device", args)
	}
	time.Sleep(200 * time.Millisecond) // into the work
	start := time.Now()
	cmd.Process.Signal(sig)
	timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	<-done
	err = cmd.Wait()
	took := time.Since(start)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String(), took
}
