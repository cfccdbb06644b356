package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/gpt"
)

// mpirunGpt2go runs `gpt2go args...` as np ranks under mpirun (this test binary as gpt2go) and
// returns the combined output and mpirun's error. It skips without mpirun, unless
// GPT2GO_REQUIRE_MPI is set (CI), and fails when the job outlives limit. With pidDir, each rank
// writes its pid there (rank-N.pid).
func mpirunGpt2go(t *testing.T, np int, limit time.Duration, pidDir string, args ...string) (string, error) {
	t.Helper()
	cmd, out := startMpirun(t, np, pidDir, args...)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		t.Fatalf("mpirun -np %d gpt2go %s did not end within %v:\n%s", np, strings.Join(args, " "), limit, out.String())
		return "", nil
	}
}

func startMpirun(t *testing.T, np int, pidDir string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	perRank := make([][]string, np)
	for i := range perRank {
		perRank[i] = args
	}
	return startMpirunPerRank(t, pidDir, perRank...)
}

// startMpirunPerRank starts one rank per argument list (mpirun's MPMD form, "A : B").
func startMpirunPerRank(t *testing.T, pidDir string, perRank ...[]string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	path, err := exec.LookPath("mpirun")
	if err != nil {
		if os.Getenv("GPT2GO_REQUIRE_MPI") != "" {
			t.Fatal("GPT2GO_REQUIRE_MPI is set but there is no mpirun (apt-get install openmpi-bin libopenmpi3)")
		}
		t.Skip("there is no mpirun (apt-get install openmpi-bin libopenmpi3); the data-parallel training tests did not run")
	}
	mpiArgs := []string{"--oversubscribe"}
	if os.Getuid() == 0 {
		mpiArgs = append(mpiArgs, "--allow-run-as-root")
	}
	for i, args := range perRank {
		if i > 0 {
			mpiArgs = append(mpiArgs, ":")
		}
		mpiArgs = append(append(mpiArgs, "-np", "1", os.Args[0]), args...)
	}
	cmd := exec.Command(path, mpiArgs...)
	cmd.Env = append(os.Environ(), "GPT2GO_TEST_CHILD=1", "GPT2GO_TEST_PID_DIR="+pidDir,
		"OMPI_MCA_btl_vader_single_copy_mechanism=none") // containers often forbid the ptrace-based copy
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

// logEntries reads a run's log.jsonl as step -> the entry's raw numbers (loss, val_loss,
// grad_norm, and BERT's acc and val_acc), as written, so equal means equal bits.
func logEntries(t *testing.T, runDir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range logLines(t, runDir) {
		var e map[string]json.RawMessage
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"loss", "val_loss", "grad_norm", "acc", "val_acc"} {
			if v, ok := e[k]; ok {
				key := fmt.Sprintf("step %s %s", e["step"], k)
				if _, dup := out[key]; dup {
					t.Fatalf("%s: %s logged twice", runDir, key)
				}
				out[key] = string(v)
			}
		}
	}
	return out
}

// sameRun requires the same log numbers and the same final weights and AdamW moments, bit for bit.
func sameRun(t *testing.T, want, got string, step int) {
	t.Helper()
	w, g := logEntries(t, want), logEntries(t, got)
	if len(w) == 0 || len(w) != len(g) {
		t.Fatalf("%d log numbers, want %d", len(g), len(w))
	}
	for k, v := range w {
		if g[k] != v {
			t.Fatalf("%s: %s, one process %s", k, g[k], v)
		}
	}
	a, err := checkpoint.Load(checkpoint.Path(want, step))
	if err != nil {
		t.Fatal(err)
	}
	b, err := checkpoint.Load(checkpoint.Path(got, step))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2][]float32{{a.Params, b.Params}, {a.M, b.M}, {a.V, b.V}} {
		if len(p[0]) != len(p[1]) {
			t.Fatalf("checkpoint sizes %d and %d", len(p[0]), len(p[1]))
		}
		for i := range p[0] {
			if math.Float32bits(p[0][i]) != math.Float32bits(p[1][i]) {
				t.Fatalf("step %d checkpoint element %d: %v, one process %v", step, i, p[1][i], p[0][i])
			}
		}
	}
}

// sameParamsOnRanks requires the line in which the ranks of a finished run say they hold the
// same parameters (each hashed its own and they compared the hashes at every checkpoint), and
// in fp32, where those are the weights of the checkpoint at step, that they hash to its weights.
func sameParamsOnRanks(t *testing.T, out, run string, step int, fp32 bool) {
	t.Helper()
	m := regexp.MustCompile(fmt.Sprintf(`data parallel: the 2 ranks end with the same parameters \(CRC-32C ([0-9a-f]{8}) at step %d\)`, step)).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no line says the ranks end with the same parameters:\n%s", out)
	}
	if !fp32 {
		return
	}
	ck, err := checkpoint.Load(checkpoint.Path(run, step))
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, v := range ck.Params {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	if want := fmt.Sprintf("%08x", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))); m[1] != want {
		t.Fatalf("the ranks' parameters hash to %s, the checkpoint's weights to %s", m[1], want)
	}
}

// shardsPlanned requires the memory plan (--verbose) of a 2-rank run to count the AdamW moments
// of the parameters in the checkpoint at step 12: all of them with DDP, half (one padded shard)
// with ZeRO-1; and with ZeRO-1 in a mixed precision half the fp32 master weights too, beside the
// whole compute copy (padded like the gradients; 4 bytes a value in the CPU's host memory).
// Rank 0 prints it (the ranks' plans are the same size).
func shardsPlanned(t *testing.T, out, run string, zero, mixed bool) {
	t.Helper()
	ck, err := checkpoint.Load(checkpoint.Path(run, 12))
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(ck.Params))
	s := int64(gpt.ShardLen(int(n), 2))
	want := []string{"AdamW moments " + backend.FormatBytes(2*4*n)}
	if zero {
		want = []string{"AdamW moments (ZeRO-1: 1/2 shard) " + backend.FormatBytes(2*4*s)}
	}
	if zero && mixed {
		want = append(want, "parameters (ZeRO-1: 1/2 shard) "+backend.FormatBytes(4*s), "copy) "+backend.FormatBytes(4*2*s))
	}
	plans := regexp.MustCompile(`memory plan in host memory: .*`).FindAllString(out, -1)
	for _, w := range want {
		if len(plans) != 1 || !strings.Contains(plans[0], w+",") {
			t.Fatalf("rank 0's memory plan should say %q:\n%s", w, out)
		}
	}
}

func distArgs(dataDir, out string, extra ...string) []string {
	args := []string{"train", "--data", dataDir, "--out", out, "--n-layer", "2", "--n-head", "2", "--n-embd", "32",
		"--block-size", "32", "--seq-len", "32", "--batch-size", "4", "--steps", "12", "--warmup", "2",
		"--eval-every", "6", "--eval-batches", "3", "--sample-tokens", "0", "--ckpt-every", "4", "--log-every", "4",
		"--threads", "1", "--tensorboard=false", "--dist-timeout", "20s"}
	return append(args, extra...)
}

// The check: 2 ranks give the bits of one process with --grad-accum 2 (losses, val
// losses, grad norms, weights, moments), in order and shuffled, with DDP and with ZeRO-1.
func TestDataParallelMatchesGradAccum(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns mpirun")
	}
	dataDir := prepared(t)
	for _, shuffle := range []string{"false", "true"} {
		one := filepath.Join(t.TempDir(), "one")
		mustRun(t, distArgs(dataDir, one, "--shuffle="+shuffle, "--grad-accum", "2")...)
		for _, zero := range []string{"0", "1"} {
			t.Run("shuffle="+shuffle+"/zero="+zero, func(t *testing.T) {
				two := filepath.Join(t.TempDir(), "two")
				out, err := mpirunGpt2go(t, 2, 2*time.Minute, "", distArgs(dataDir, two, "--shuffle="+shuffle, "--zero", zero, "--verbose")...)
				if err != nil {
					t.Fatalf("mpirun: %v\n%s", err, out)
				}
				if want := "global batch 4 x 32 x 1 accum x 2 ranks = 256 tokens"; !strings.Contains(out, want) {
					t.Fatalf("the log does not say %q:\n%s", want, out)
				}
				if strings.Count(out, "done: 12 steps") != 1 || strings.Count(out, "device: ") != 1 {
					t.Fatalf("rank 0 alone should speak:\n%s", out)
				}
				sameRun(t, one, two, 12)
				sameParamsOnRanks(t, out, two, 12, true)
				shardsPlanned(t, out, two, zero == "1", false)
			})
		}
	}
	// DDP's all-reduce per layer during backward (the default on CPU ranks, run above) against
	// one all-reduce after it: the same bits, also through the accumulation scratch (2 ranks of
	// 2 micro-batches; not the bits of --grad-accum 4 in one process, which adds g2 to g0 + g1
	// where the ranks add g2 + g3).
	one := filepath.Join(t.TempDir(), "one")
	mustRun(t, distArgs(dataDir, one, "--grad-accum", "2")...)
	t.Run("overlap=false", func(t *testing.T) {
		runs := map[bool]string{}
		for _, overlap := range []bool{false, true} {
			runs[overlap] = filepath.Join(t.TempDir(), fmt.Sprint(overlap))
			out, err := mpirunGpt2go(t, 2, 2*time.Minute, "", distArgs(dataDir, runs[overlap], "--grad-accum", "2", fmt.Sprintf("--overlap-grads=%v", overlap))...)
			if err != nil {
				t.Fatalf("mpirun: %v\n%s", err, out)
			}
			sameParamsOnRanks(t, out, runs[overlap], 12, true)
			on := strings.Contains(out, "(DDP, all-reduce per layer during backward)")
			if waited := strings.Contains(out, "(waited "); on != overlap || waited != overlap {
				t.Fatalf("--overlap-grads=%v: the log says it is on: %v, logs its wait: %v:\n%s", overlap, on, waited, out)
			}
		}
		sameRun(t, runs[false], runs[true], 12)
	})
	// Mixed precision: fp32 gradients on the wire, fp16's loss scaler agreed on by all ranks;
	// DDP (all-reduce per layer during backward: the 16-bit copy rewritten from the whole fp32
	// weights, stochastically in bf16) and ZeRO-1 (each rank keeps its shard of the fp32 weights,
	// rewrites its shard of the 16-bit copy and the copy is all-gathered).
	for _, prec := range [][]string{{"--precision", "bf16", "--stochastic-rounding"}, {"--precision", "fp16"}} {
		one := filepath.Join(t.TempDir(), "one")
		mustRun(t, distArgs(dataDir, one, append(prec, "--grad-accum", "2")...)...)
		for _, zero := range []string{"0", "1"} {
			t.Run(prec[1]+"/zero="+zero, func(t *testing.T) {
				two := filepath.Join(t.TempDir(), "two")
				out, err := mpirunGpt2go(t, 2, 2*time.Minute, "", distArgs(dataDir, two, append(prec, "--zero", zero, "--verbose")...)...)
				if err != nil {
					t.Fatalf("mpirun: %v\n%s", err, out)
				}
				sameRun(t, one, two, 12)
				sameParamsOnRanks(t, out, two, 12, false)
				shardsPlanned(t, out, two, zero == "1", true)
				if zero == "0" {
					return
				}
				// Stopped and resumed: each rank takes its shard of the checkpoint's master and
				// rounds it as the last update did, and the copy is gathered again.
				half := filepath.Join(t.TempDir(), "half")
				for _, args := range [][]string{distArgs(dataDir, half, append(prec, "--zero", zero, "--stop-at", "6")...),
					{"train", "--resume", half, "--zero", zero, "--threads", "1", "--dist-timeout", "20s"}} {
					if out, err := mpirunGpt2go(t, 2, 2*time.Minute, "", args...); err != nil {
						t.Fatalf("mpirun: %v\n%s", err, out)
					}
				}
				sameRun(t, one, half, 12)
			})
		}
	}
	// One rank under mpirun goes through the communicator (MPI with one rank) and accumulates
	// its two micro-batches itself: the same bits again.
	for _, zero := range []string{"0", "1"} {
		t.Run("np=1/zero="+zero, func(t *testing.T) {
			run := filepath.Join(t.TempDir(), "run")
			out, err := mpirunGpt2go(t, 1, 2*time.Minute, "", distArgs(dataDir, run, "--grad-accum", "2", "--zero", zero)...)
			if err != nil || !strings.Contains(out, "data parallel: 1 ranks") {
				t.Fatalf("mpirun -np 1: %v\n%s", err, out)
			}
			sameRun(t, one, run, 12)
		})
	}
}

// A rank killed with SIGKILL ends the job quickly and leaves the run resumable: 2 ranks resume it
// exactly (the bits of an uninterrupted 1-process --grad-accum 2 run), and 1 process continues it.
func TestDataParallelKill9OneRankThenResume(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns mpirun")
	}
	dataDir := prepared(t)
	const steps = 400
	args := func(out string, extra ...string) []string {
		return distArgs(dataDir, out, append([]string{"--steps", fmt.Sprint(steps), "--ckpt-every", "100", "--eval-every", "0", "--n-embd", "64", "--keep-ckpts", "0"}, extra...)...)
	}
	one := filepath.Join(t.TempDir(), "one")
	mustRun(t, args(one, "--grad-accum", "2")...)

	run, pids := filepath.Join(t.TempDir(), "run"), t.TempDir()
	cmd, out := startMpirun(t, 2, pids, args(run, "--zero", "1")...)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(checkpoint.Path(run, 100)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no step-100 checkpoint:\n%s", out)
		}
		time.Sleep(time.Millisecond)
	}
	pid, err := os.ReadFile(filepath.Join(pids, "rank-1.pid"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(string(pid))
	killed := time.Now()
	syscall.Kill(p, syscall.SIGKILL)
	select {
	case err := <-done:
		if err == nil {
			t.Skipf("the job finished before rank 1 was killed:\n%s", out)
		}
		if took := time.Since(killed); took > 30*time.Second {
			t.Fatalf("the job ended %v after rank 1 was killed", took)
		}
		// A rank killed with SIGKILL prints nothing, and mpirun ends the survivors before
		// their --dist-timeout could (that line is TestDataParallelFaults' hanging rank), so
		// only mpirun's own message names rank 1. What gpt2go guarantees: the job ends, not
		// claiming success, and the newest checkpoint stays whole (the resume below is exact).
		if strings.Contains(out.String(), "done: ") {
			t.Fatalf("the job says it finished after rank 1 was killed:\n%s", out)
		}
		if ck, _, warnings, err := checkpoint.LoadLatestVerified(run); err != nil || len(warnings) > 0 || ck.Step < 100 {
			t.Fatalf("after the kill the newest checkpoint is not whole: %v %v", err, warnings)
		} else {
			ck.Close()
		}
		t.Logf("%s", out)
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("the job did not end within a minute of rank 1's kill -9:\n%s", out)
	}
	if _, err := os.Stat(checkpoint.Path(run, steps)); err == nil {
		t.Skip("the job finished before rank 1 was killed")
	}
	cont := filepath.Join(t.TempDir(), "cont")
	copyDir(t, run, cont)

	res, err := mpirunGpt2go(t, 2, 2*time.Minute, "", "train", "--resume", run, "--threads", "1", "--dist-timeout", "20s")
	if err != nil {
		t.Fatalf("resume on 2 ranks: %v\n%s", err, res)
	}
	sameRun(t, one, run, steps)

	// One process continues it with the same global batch: the same bits too.
	mustRun(t, "train", "--resume", cont, "--threads", "1", "--grad-accum", "2")
	sameRun(t, one, cont, steps)
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
}

// A rank that fails or panics ends the job at once with one line naming it; a rank that hangs
// (SIGSTOP) ends it within --dist-timeout, named by the rank that waited.
func TestDataParallelFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns mpirun")
	}
	dataDir := prepared(t)
	// Rank 1 alone is given data that does not exist (mpirun's per-rank command lines), so it
	// fails while rank 0 waits for it in a collective.
	t.Run("failing rank", func(t *testing.T) {
		run := filepath.Join(t.TempDir(), "run")
		start := time.Now()
		cmd, out := startMpirunPerRank(t, "", distArgs(dataDir, run), distArgs(dataDir, run, "--data", "/nonexistent/data"))
		err := cmd.Wait()
		if err == nil {
			t.Fatalf("a job with a failing rank succeeded:\n%s", out)
		}
		if !strings.Contains(out.String(), "gpt2go train: rank 1 of 2: ") {
			t.Fatalf("no line names the failing rank:\n%s", out)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("the job took %v to end", took)
		}
		t.Logf("%s", out)
	})
	// Rank 1 panics as training starts, while rank 0 waits for it: its message is printed,
	// naming it, and the job ends at once, even with --dist-timeout 0 (no watchdog).
	t.Run("panicking rank", func(t *testing.T) {
		t.Setenv("GPT2GO_TEST_PANIC_RANK", "1")
		t.Setenv("GPT2GO_DEBUG", "") // the one line, not the stack
		run := filepath.Join(t.TempDir(), "run")
		start := time.Now()
		out, err := mpirunGpt2go(t, 2, time.Minute, "", distArgs(dataDir, run, "--dist-timeout", "0")...)
		if err == nil {
			t.Fatalf("a job with a panicking rank succeeded:\n%s", out)
		}
		want := "gpt2go train: rank 1 of 2: internal error: a test's panic on rank 1 (set GPT2GO_DEBUG=1 for a stack trace and please report it)\n"
		if !strings.Contains(out, want) {
			t.Fatalf("no line gives rank 1's panic:\n%s", out)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("the job took %v to end", took)
		}
		t.Logf("%s", out)
	})
	t.Run("hanging rank", func(t *testing.T) {
		run, pids := filepath.Join(t.TempDir(), "run"), t.TempDir()
		cmd, out := startMpirun(t, 2, pids, distArgs(dataDir, run, "--steps", "100000", "--ckpt-every", "0", "--eval-every", "0", "--dist-timeout", "3s")...)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var pid int
		deadline := time.Now().Add(time.Minute)
		for pid == 0 || !strings.Contains(out.String(), "step ") {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("the job never started training:\n%s", out)
			}
			b, _ := os.ReadFile(filepath.Join(pids, "rank-1.pid"))
			pid, _ = strconv.Atoi(string(b))
			time.Sleep(10 * time.Millisecond)
		}
		syscall.Kill(pid, syscall.SIGSTOP)
		defer syscall.Kill(pid, syscall.SIGKILL)
		stopped := time.Now()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("the job succeeded with a stopped rank:\n%s", out)
			}
			if took := time.Since(stopped); took > 30*time.Second {
				t.Fatalf("the job ended %v after rank 1 stopped (timeout 3s)", took)
			}
			if !strings.Contains(out.String(), "rank 0: ") || !strings.Contains(out.String(), "did not finish within 3s") {
				t.Fatalf("no line says rank 0 timed out:\n%s", out)
			}
			t.Logf("%s", out)
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			t.Fatalf("the job did not end within a minute of rank 1 hanging (timeout 3s):\n%s", out)
		}
	})
}

// Errors before the communicator opens (flags, --resume, the device) name the rank once, as the
// later ones do, when the environment says the process is one rank of several; a process of its
// own prints them as before.
func TestErrorsBeforeCommNameTheRank(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	cases := []struct {
		args []string
		want string // after "gpt2go train: " and the rank
	}{
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--zero", "2", "--out", out}, "--zero 2: use 0 (DDP) or 1 (ZeRO-1)"},
		{[]string{"--resume", "/nonexistent/run"}, "resume /nonexistent/run: no such run directory"},
		{[]string{"--device", "cuda:99", "--out", out, "--data", "shakespeare"}, "--device cuda:99: "},
	}
	check := func(t *testing.T, prefix string) {
		t.Helper()
		for _, c := range cases {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"train"}, c.args...), &stdout, &stderr)
			line := stderr.String()
			if code == 0 || !strings.HasPrefix(line, prefix+c.want) || strings.Count(line, "\n") != 1 || strings.Count(line, "rank ") > 1 {
				t.Errorf("train %s: exit %d, stderr %q; want one line starting %q", strings.Join(c.args, " "), code, line, prefix+c.want)
			}
		}
	}
	t.Run("one process", func(t *testing.T) { check(t, "gpt2go train: ") })
	t.Run("torchrun rank", func(t *testing.T) {
		for k, v := range map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"} {
			t.Setenv(k, v)
		}
		check(t, "gpt2go train: rank 1 of 2: ")
	})
	t.Run("mpirun rank", func(t *testing.T) {
		for k, v := range map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "0"} {
			t.Setenv(k, v)
		}
		check(t, "gpt2go train: rank 2 of 3: ")
	})
}

// 16-bit gradients cannot go through the collectives (fp32 only): refused up front, in one line
// that says what to pass, rather than at step 1; from the flags, and from a resumed run's own
// --grad-precision.
func TestDataParallelRefuses16BitGradients(t *testing.T) {
	dataDir := prepared(t)
	run := filepath.Join(t.TempDir(), "run")
	want := "--grad-precision bf16: data-parallel training (1 rank, ZeRO-1) exchanges gradients in fp32 only"
	mustFail(t, want, distArgs(dataDir, run, "--zero", "1", "--precision", "bf16", "--grad-precision", "bf16")...)
	mustRun(t, distArgs(dataDir, run, "--steps", "2", "--precision", "bf16", "--grad-precision", "bf16")...)
	mustFail(t, want, "train", "--resume", run, "--steps", "4", "--zero", "1")
	mustRun(t, "train", "--resume", run, "--steps", "4", "--zero", "1", "--grad-precision", "fp32") // as it says

	if testing.Short() {
		return
	}
	out, err := mpirunGpt2go(t, 2, 2*time.Minute, "", distArgs(dataDir, filepath.Join(t.TempDir(), "two"), "--precision", "fp16", "--grad-precision", "fp16")...)
	if err == nil || !strings.Contains(out, "--grad-precision fp16: data-parallel training (2 ranks, DDP) exchanges gradients in fp32 only") || strings.Contains(out, "step 1/") {
		t.Fatalf("mpirun -np 2 with --grad-precision fp16: %v\n%s", err, out)
	}
}

// worldOf reads the data-parallel layout a run recorded: in run.json, and in the training state
// of its checkpoint at step.
func worldOf(t *testing.T, run string, step int) (cfgW, cfgZero, stateW, stateZero int) {
	t.Helper()
	var layout struct {
		WorldSize int `json:"world_size"`
		Zero      int `json:"zero"`
	}
	raw, err := os.ReadFile(filepath.Join(run, "run.json"))
	if err != nil || json.Unmarshal(raw, &layout) != nil {
		t.Fatalf("run.json: %v %s", err, raw)
	}
	cfgW, cfgZero = layout.WorldSize, layout.Zero
	ck, err := checkpoint.Load(checkpoint.Path(run, step))
	if err != nil {
		t.Fatal(err)
	}
	layout.WorldSize, layout.Zero = 0, 0
	if err := json.Unmarshal(ck.State, &layout); err != nil {
		t.Fatal(err)
	}
	return cfgW, cfgZero, layout.WorldSize, layout.Zero
}

// A run records its world size and --zero (run.json, each checkpoint's state); continued on
// another world size it says in one line how the global batch changes and which --grad-accum
// keeps it, from 1 process to 2 ranks and from 2 ranks to 1. With that --grad-accum the run
// continues with the bits of the uninterrupted run; without, it trains on (each step once in the
// log). A checkpoint from before the world size was recorded resumes without the line; one of
// step 0 (a run killed before its first periodic checkpoint) has it.
func TestDataParallelResumeOnOtherWorldSize(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns mpirun")
	}
	dataDir := prepared(t)
	one := filepath.Join(t.TempDir(), "one")
	mustRun(t, distArgs(dataDir, one, "--grad-accum", "2")...) // 12 steps of 256 tokens
	resume2 := func(t *testing.T, run string, extra ...string) string {
		t.Helper()
		out, err := mpirunGpt2go(t, 2, 2*time.Minute, "", append([]string{"train", "--resume", run, "--threads", "1", "--dist-timeout", "20s"}, extra...)...)
		if err != nil || !strings.Contains(out, "done: 12 steps") {
			t.Fatalf("resume on 2 ranks: %v\n%s", err, out)
		}
		return out
	}
	expect := func(t *testing.T, out, line string) {
		t.Helper()
		if strings.Count(out, "world size ") != 1 || !strings.Contains(out, line+"\n") {
			t.Fatalf("the output should say once %q:\n%s", line, out)
		}
	}
	layout := func(t *testing.T, run string, step int, want ...int) {
		t.Helper()
		cw, cz, sw, sz := worldOf(t, run, step)
		if got := []int{cw, cz, sw, sz}; !slices.Equal(got, want) {
			t.Fatalf("%s: run.json world size %d zero %d, checkpoint %d world size %d zero %d; want %v", run, cw, cz, step, sw, sz, want)
		}
	}

	t.Run("1 to 2", func(t *testing.T) {
		a := filepath.Join(t.TempDir(), "a")
		mustRun(t, distArgs(dataDir, a, "--grad-accum", "2", "--stop-at", "6")...)
		layout(t, a, 6, 1, 0, 1, 0)
		layout(t, a, 0, 1, 0, 1, 0) // step 0 records the layout too
		b, old := filepath.Join(t.TempDir(), "b"), filepath.Join(t.TempDir(), "old")
		copyDir(t, a, b)
		copyDir(t, a, old)

		expect(t, resume2(t, a, "--grad-accum", "1"), "world size 1 -> 2: global batch 256 tokens as before (B x T x grad-accum x ranks)")
		sameRun(t, one, a, 12)
		layout(t, a, 12, 2, 0, 2, 0)

		expect(t, resume2(t, b, "--zero", "1"), "world size 1 -> 2: global batch 256 -> 512 tokens (B x T x grad-accum x ranks); pass --grad-accum 1 to keep it")
		logEntries(t, b) // every step once
		layout(t, b, 12, 2, 1, 2, 1)

		// A checkpoint written before the world size was recorded: no line, the run goes on.
		path := checkpoint.Path(old, 6)
		ck, err := checkpoint.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		var state map[string]any
		if err := json.Unmarshal(ck.State, &state); err != nil || state["world_size"] != 1.0 {
			t.Fatalf("state %s: %v", ck.State, err)
		}
		delete(state, "world_size")
		delete(state, "zero")
		ck.State, _ = json.Marshal(state)
		if err := checkpoint.Save(path, ck); err != nil {
			t.Fatal(err)
		}
		if out := resume2(t, old, "--grad-accum", "1"); strings.Contains(out, "world size") {
			t.Fatalf("a world size from a checkpoint that has none:\n%s", out)
		}
		sameRun(t, one, old, 12)
	})

	t.Run("2 to 1", func(t *testing.T) {
		c, d := filepath.Join(t.TempDir(), "c"), filepath.Join(t.TempDir(), "d")
		out, err := mpirunGpt2go(t, 2, 2*time.Minute, "", distArgs(dataDir, c, "--zero", "1", "--stop-at", "6")...)
		if err != nil {
			t.Fatalf("mpirun: %v\n%s", err, out)
		}
		layout(t, c, 6, 2, 1, 2, 1)
		layout(t, c, 0, 2, 1, 2, 1)
		copyDir(t, c, d)

		// A run killed before its first periodic checkpoint resumes from step 0, whose world
		// size is known.
		g := filepath.Join(t.TempDir(), "g")
		copyDir(t, c, g)
		for _, step := range []int{4, 6} {
			if err := os.Remove(checkpoint.Path(g, step)); err != nil {
				t.Fatal(err)
			}
		}
		expect(t, mustRun(t, "train", "--resume", g, "--threads", "1", "--stop-at", "1"), "world size 2 -> 1: global batch 256 -> 128 tokens (B x T x grad-accum x ranks); pass --grad-accum 2 to keep it")
		e, f := filepath.Join(t.TempDir(), "e"), filepath.Join(t.TempDir(), "f")
		copyDir(t, c, e)
		copyDir(t, c, f)

		// On as many ranks, a ZeRO-1 run stays ZeRO-1 without --zero, and says so; --zero 0 wins.
		if out := resume2(t, e); !strings.Contains(out, "--zero 1, as the run was saved (ZeRO-1); pass --zero 0 for DDP\n") {
			t.Fatalf("a ZeRO-1 run resumed without --zero should say it stays ZeRO-1:\n%s", out)
		}
		layout(t, e, 12, 2, 1, 2, 1)
		if out := resume2(t, f, "--zero", "0"); strings.Contains(out, "as the run was saved") {
			t.Fatalf("--zero 0 given, yet:\n%s", out)
		}
		layout(t, f, 12, 2, 0, 2, 0)

		out = mustRun(t, "train", "--resume", c, "--threads", "1")
		expect(t, out, "world size 2 -> 1: global batch 256 -> 128 tokens (B x T x grad-accum x ranks); pass --grad-accum 2 to keep it")
		if !strings.Contains(out, "done: 12 steps") {
			t.Fatalf("the continued run did not finish:\n%s", out)
		}
		logEntries(t, c)
		layout(t, c, 12, 1, 0, 1, 0)

		expect(t, mustRun(t, "train", "--resume", d, "--threads", "1", "--grad-accum", "2"), "world size 2 -> 1: global batch 256 tokens as before (B x T x grad-accum x ranks)")
		sameRun(t, one, d, 12)
	})
}
