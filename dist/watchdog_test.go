package dist

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCollective is a queued collective whose end the test decides.
type fakeCollective struct {
	done     atomic.Bool
	err      error
	released atomic.Int32
}

func (f *fakeCollective) add(w *Watchdog, what string, timeout time.Duration) {
	w.Add(what, timeout, func() (bool, error) { return f.done.Load(), f.err }, func() { f.released.Add(1) })
}

// Collectives that finish are released once, in whatever order they finish (NCCL's main and
// side streams); none ends the job before its deadline; one past it does, named with the rank
// and its timeout; a timeout of 0 never does.
func TestWatchdogReleasesAndTimesOut(t *testing.T) {
	w := newWatchdog(3, nil, nil)
	var a, b, c, forever fakeCollective
	a.add(w, "all-reduce", time.Minute)
	b.add(w, "all-reduce beside backward", time.Minute)
	c.add(w, "all-gather", time.Minute)
	forever.add(w, "barrier", 0)
	now := time.Now()
	b.done.Store(true)
	if line, _ := w.sweep(now); line != "" || w.Pending() != 3 || b.released.Load() != 1 {
		t.Fatalf("after the second finished: %q, %d pending, released %d", line, w.Pending(), b.released.Load())
	}
	a.done.Store(true)
	if line, _ := w.sweep(now); line != "" || w.Pending() != 2 || a.released.Load() != 1 || b.released.Load() != 1 {
		t.Fatalf("after the first finished: %q, %d pending", line, w.Pending())
	}
	line, code := w.sweep(now.Add(2 * time.Minute))
	if code != ExitTimeout || !strings.Contains(line, "rank 3: all-gather did not finish within 1m0s") {
		t.Fatalf("a collective past its deadline: %q, exit %d", line, code)
	}
	c.done.Store(true)
	if line, _ := w.sweep(now.Add(time.Hour)); line != "" || w.Pending() != 1 {
		t.Fatalf("no deadline but the barrier's: %q, %d pending", line, w.Pending())
	}
	w.Close()
	if forever.released.Load() != 1 || c.released.Load() != 1 || w.Pending() != 0 {
		t.Errorf("Close released %d of the unfinished barrier, %d pending", forever.released.Load(), w.Pending())
	}
}

// The communicator's asynchronous error, or a failed query of a collective, ends the job at
// once (exit 1), naming the cause.
func TestWatchdogEndsOnErrors(t *testing.T) {
	var failed error
	w := newWatchdog(1, func() error { return failed }, nil)
	var a fakeCollective
	a.add(w, "all-reduce", time.Minute)
	if line, _ := w.sweep(time.Now()); line != "" {
		t.Fatalf("no error yet: %q", line)
	}
	failed = errors.New("ncclRemoteError (a rank died or the network failed)")
	line, code := w.sweep(time.Now())
	if code != 1 || !strings.Contains(line, "rank 1: the communicator failed (ncclRemoteError") || !strings.Contains(line, "all-reduce was pending") {
		t.Fatalf("async error: %q, exit %d", line, code)
	}
	failed = nil
	a.err = errors.New("cuEventQuery failed: an illegal memory access")
	if line, code := w.sweep(time.Now()); code != 1 || !strings.Contains(line, "rank 1: all-reduce failed: cuEventQuery failed") {
		t.Fatalf("query error: %q, exit %d", line, code)
	}
}

// The goroutine: a collective that never finishes ends the job soon after its timeout, with
// the line written once and the exit code of a timeout; a watchdog with nothing pending never
// does.
func TestWatchdogGoroutine(t *testing.T) {
	codes := make(chan int, 1)
	var lines atomic.Int32
	w := newWatchdog(2, nil, func(code int) { codes <- code })
	w.out = func(line string) {
		if strings.Contains(line, "rank 2: all-reduce did not finish within 20ms") {
			lines.Add(1)
		}
	}
	w.start(time.Millisecond)
	var stuck fakeCollective
	stuck.add(w, "all-reduce", 20*time.Millisecond)
	select {
	case code := <-codes:
		if code != ExitTimeout || lines.Load() != 1 {
			t.Fatalf("exit %d with %d lines naming the collective", code, lines.Load())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a stuck collective did not end the job")
	}

	idle := newWatchdog(0, nil, func(code int) { t.Errorf("an idle watchdog ended the job (%d)", code) })
	idle.start(time.Millisecond)
	var quick fakeCollective
	quick.done.Store(true)
	quick.add(idle, "all-reduce", 20*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	idle.Close()
	if quick.released.Load() != 1 {
		t.Errorf("a finished collective released %d times", quick.released.Load())
	}
}

// Halt: once it returns, no sweep queries anything (an abort is taking the communicator away).
func TestWatchdogHalt(t *testing.T) {
	queried := atomic.Int32{}
	w := newWatchdog(0, func() error { queried.Add(1); return nil }, nil)
	var a fakeCollective
	a.add(w, "all-reduce", time.Nanosecond)
	w.Halt()
	before := queried.Load()
	if line, code := w.sweep(time.Now().Add(time.Hour)); line != "" || code != 0 || queried.Load() != before {
		t.Errorf("a halted watchdog swept: %q, exit %d, %d queries", line, code, queried.Load()-before)
	}
}
