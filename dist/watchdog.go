package dist

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// Watchdog bounds the collectives a communicator queues without waiting for them (NCCL queues
// them on a GPU stream and returns): a rank that died or hangs leaves them unfinished, and any
// later wait for the GPU (a loss read back, a gradient norm) would block forever, out of reach
// of Watch. A goroutine polls every queued collective; when one has not finished within the
// timeout it was queued with, or the communicator reports an asynchronous error, it writes one
// line naming the rank, the collective and the cause to stderr and ends the job through abort
// (which aborts the communicator, so the stuck kernels end, and exits): the launcher then ends
// the other ranks. This is PyTorch's NCCL watchdog, with the timeout counted, as there, from
// the moment the collective was queued.
type Watchdog struct {
	rank  int
	check func() error   // the communicator's asynchronous error; nil: none
	abort func(code int) // ends the job; does not return
	out   func(line string)

	mu      sync.Mutex
	pending []watched
	halted  bool // Halt: query nothing more
	stop    chan struct{}
	stopped sync.WaitGroup
}

// watched is one queued collective.
type watched struct {
	what     string
	deadline time.Time // zero: no bound
	timeout  time.Duration
	finished func() (bool, error) // whether it has finished, without waiting
	release  func()               // called once, when it has
}

// NewWatchdog starts a watchdog for rank's communicator polling every poll; check (may be nil)
// returns the communicator's asynchronous error, abort ends the job with an exit code.
func NewWatchdog(rank int, poll time.Duration, check func() error, abort func(code int)) *Watchdog {
	w := newWatchdog(rank, check, abort)
	w.start(poll)
	return w
}

// start starts w's goroutine.
func (w *Watchdog) start(poll time.Duration) {
	w.stopped.Add(1)
	go func() {
		defer w.stopped.Done()
		tick := time.NewTicker(poll)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case now := <-tick.C:
				if line, code := w.sweep(now); line != "" {
					w.out(line)
					w.abort(code)
					return
				}
			}
		}
	}()
}

// newWatchdog is a Watchdog without its goroutine (the tests call sweep themselves).
func newWatchdog(rank int, check func() error, abort func(code int)) *Watchdog {
	return &Watchdog{rank: rank, check: check, abort: abort, stop: make(chan struct{}),
		out: func(line string) { fmt.Fprintln(os.Stderr, line) }}
}

// Add watches a collective just queued, named what (e.g. "all-reduce"): finished says without
// waiting whether it has finished, release is called once it has (or when the watchdog
// stops). timeout 0 never ends the job for it.
func (w *Watchdog) Add(what string, timeout time.Duration, finished func() (bool, error), release func()) {
	c := watched{what: what, timeout: timeout, finished: finished, release: release}
	if timeout > 0 {
		c.deadline = time.Now().Add(timeout)
	}
	w.mu.Lock()
	w.pending = append(w.pending, c)
	w.mu.Unlock()
}

// Pending is how many watched collectives have not been seen to finish.
func (w *Watchdog) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// sweep releases the collectives that have finished and returns, when the job must end, the
// line to write and the exit code: a collective past its deadline (ExitTimeout), or an error
// from the communicator or from a collective's query (1).
func (w *Watchdog) sweep(now time.Time) (line string, code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.halted {
		return "", 0
	}
	if w.check != nil {
		if err := w.check(); err != nil {
			return fmt.Sprintf("rank %d: the communicator failed (%v) while %s; ending the job", w.rank, err, w.waitingFor()), 1
		}
	}
	kept := w.pending[:0]
	for _, c := range w.pending {
		done, err := c.finished()
		if err != nil {
			return fmt.Sprintf("rank %d: %s failed: %v; ending the job", w.rank, c.what, err), 1
		}
		if done {
			c.release()
			continue
		}
		if !c.deadline.IsZero() && now.After(c.deadline) {
			return fmt.Sprintf("rank %d: %s did not finish within %v (a rank died or hangs); ending the job", w.rank, c.what, c.timeout), ExitTimeout
		}
		kept = append(kept, c)
	}
	clear(w.pending[len(kept):])
	w.pending = kept
	return "", 0
}

// waitingFor names the oldest unfinished collective, for a message.
func (w *Watchdog) waitingFor() string {
	if len(w.pending) == 0 {
		return "no collective was pending"
	}
	return w.pending[0].what + " was pending"
}

// Halt makes the watchdog query nothing more (neither the communicator nor a collective), once a
// sweep in progress has ended, without waiting for its goroutine: for an abort, which may run
// on that goroutine and after which the communicator is gone.
func (w *Watchdog) Halt() {
	w.mu.Lock()
	w.halted = true
	w.mu.Unlock()
}

// Close stops the watchdog and releases what it still watched; call it before the collectives'
// resources go (it returns once the goroutine has stopped).
func (w *Watchdog) Close() {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	w.stopped.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.pending {
		c.release()
	}
	w.pending = nil
}
