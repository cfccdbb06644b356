package nccl

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/dist"
	"github.com/gpt2go/gpt2go/internal/gputest"
)

// pip's nvidia-nccl-cu12 wheel puts libnccl.so.2 in site-packages/nvidia/nccl/lib: a virtualenv
// with that layout is searched, and a file there that does not load is named in the one-line error.
func TestLibraryFromWheel(t *testing.T) {
	venv := t.TempDir()
	dir := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "nccl", "lib")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "libnccl.so.2")
	if err := os.WriteFile(fake, []byte("not an ELF file"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VIRTUAL_ENV", venv)
	t.Setenv(cuda.LibsEnv, t.TempDir())
	t.Setenv("LD_LIBRARY_PATH", "")
	lib := library()
	if !slices.Contains(lib.SearchDirs(), dir) {
		t.Fatalf("the wheel's folder %s is not searched: %v", dir, lib.SearchDirs())
	}
	if !slices.Contains(lib.Candidates(), fake) {
		t.Fatalf("%s is not a candidate: %v", fake, lib.Candidates())
	}
	lib.Names = []string{"libnccl.so.2"} // not the bare libnccl.so, which a system may have
	_, _, err := lib.Open()
	if err == nil {
		t.Skip("a real libnccl.so.2 loaded by bare name; the fake one was tried first")
	}
	for _, want := range []string{"cannot load NCCL", "libnccl.so.2", "pip install nvidia-nccl-cu12", "$" + cuda.LibsEnv} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
}

func TestResultError(t *testing.T) {
	for _, c := range []struct {
		code uintptr
		text string
		want string
	}{
		{6, "", "ncclAllReduce failed: ncclRemoteError (a rank died or the network failed)"},
		{5, "remote process exited or there was a network error", "ncclAllReduce failed: ncclInvalidUsage (ranks called different collectives, or a bad rank): remote process exited"},
		{42, "", "ncclAllReduce failed: ncclResult 42"},
	} {
		err := resultError("ncclAllReduce", c.code, c.text)
		if !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("code %d: %q, want one line starting %q", c.code, err, c.want)
		}
	}
	var l *lib
	if l.check("x", 0) != nil {
		t.Error("ncclSuccess is no error")
	}
}

// On a GPU: a communicator of one rank (no network) runs every collective on a known buffer.
func TestOneRank(t *testing.T) {
	be := gputest.Backend(t, cuda.Options{})
	if _, err := loadLib(); err != nil {
		if os.Getenv("GPT2GO_REQUIRE_NCCL") != "" {
			t.Fatalf("GPT2GO_REQUIRE_NCCL is set but %v", err)
		}
		t.Skipf("no NCCL, so this test did not run: %v", err)
	}
	comm, err := Open(be, dist.Env{Rank: 0, Size: 1, MasterAddr: "127.0.0.1", MasterPort: 1}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL %s", comm.Version())
	host := []float32{1, -2, 3.5, 0.25, 1e-3, 7}
	buf := be.Alloc(len(host))
	be.Upload(buf, host)
	got := make([]float32, len(host))
	check := func(what string, scale float32) {
		t.Helper()
		if err := comm.Barrier(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		be.Download(got, buf)
		for i := range host {
			if got[i] != host[i]*scale {
				t.Fatalf("%s: element %d is %g, want %g", what, i, got[i], host[i]*scale)
			}
		}
	}
	if err := comm.AllReduce(buf, 1); err != nil {
		t.Fatal(err)
	}
	check("all-reduce", 1)
	if err := comm.AllReduce(buf, 0.5); err != nil {
		t.Fatal(err)
	}
	check("all-reduce scaled by 0.5", 0.5)
	if err := comm.ReduceScatter(buf, 2); err != nil {
		t.Fatal(err)
	}
	check("reduce-scatter scaled by 2", 1)
	if err := comm.AllGather(buf); err != nil {
		t.Fatal(err)
	}
	if err := comm.Broadcast(buf, 0); err != nil {
		t.Fatal(err)
	}
	check("all-gather and broadcast", 1)
	if err := comm.Broadcast(buf, 1); err == nil || !strings.Contains(err.Error(), "root 1 is not a rank") {
		t.Fatalf("broadcast from rank 1 of 1: %v", err)
	}
	// The watchdog saw every collective finish (it polls every asyncErrorPollPeriod) and keeps
	// their events for reuse.
	deadline := time.Now().Add(5 * time.Second)
	for comm.watch.Pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(asyncErrorPollPeriod)
	}
	if n := comm.watch.Pending(); n > 0 {
		t.Errorf("the watchdog still follows %d finished collectives", n)
	}
	if err := comm.Close(); err != nil {
		t.Fatal(err)
	}
}

// On a GPU: a collective queued behind work that outlasts the timeout ends the job through the
// watchdog, though the host never waits for it (a rank that died looks the same from here).
func TestWatchdogEndsAStuckCollective(t *testing.T) {
	be := gputest.Backend(t, cuda.Options{})
	if _, err := loadLib(); err != nil {
		if os.Getenv("GPT2GO_REQUIRE_NCCL") != "" {
			t.Fatalf("GPT2GO_REQUIRE_NCCL is set but %v", err)
		}
		t.Skipf("no NCCL, so this test did not run: %v", err)
	}
	comm, err := Open(be, dist.Env{Rank: 0, Size: 1, MasterAddr: "127.0.0.1", MasterPort: 1}, Options{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	codes := make(chan int, 4)
	// Not restored: Abort's fallback calls exit again 10 s later, when other tests may run.
	exit = func(code int) {
		select {
		case codes <- code:
		default:
		}
	}
	const n = 8192 // each product 1.1 TFLOP: tens of ms on any GPU, 20 of them well past 50 ms
	a, out := be.Alloc(n*n), be.Alloc(n*n)
	for range 20 {
		be.MatmulForward(out, a, a, nil, n, n, n)
	}
	buf := be.Alloc(16)
	if err := comm.AllReduce(buf, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-codes:
		if code != dist.ExitTimeout {
			t.Errorf("the watchdog ended the job with %d, want %d", code, dist.ExitTimeout)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("a collective stuck past its timeout did not end the job (the matmuls before it: %v)", be.Sync())
	}
	comm.comm = 0 // aborted: nothing to close
	_ = be.Sync()
}
