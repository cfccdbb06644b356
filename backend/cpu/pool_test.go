package cpu

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpt2go/gpt2go/backend"
)

// rangeRecorder records which ranges forRanges handed out.
type rangeRecorder struct {
	covered []atomic.Int32 // how many ranges covered each index
	short   atomic.Int32   // ranges shorter than the grain
	grain   int
}

func (r *rangeRecorder) runRange(lo, hi int) {
	if hi-lo < r.grain {
		r.short.Add(1)
	}
	for i := lo; i < hi; i++ {
		r.covered[i].Add(1)
	}
}

func TestForRanges(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := &pool{threads: threads}
		for _, n := range []int{0, 1, 5, 7, 64, 1000} {
			for _, grain := range []int{1, 4, 100} {
				r := &rangeRecorder{covered: make([]atomic.Int32, n), grain: grain}
				p.forRanges(n, grain, r)
				for i := range r.covered {
					if c := r.covered[i].Load(); c != 1 {
						t.Fatalf("threads %d, n %d, grain %d: index %d covered %d times", threads, n, grain, i, c)
					}
				}
				if n >= grain && r.short.Load() != 0 {
					t.Errorf("threads %d, n %d, grain %d: %d ranges shorter than the grain", threads, n, grain, r.short.Load())
				}
			}
		}
		p.close()
	}
}

// taskRecorder checks that every task runs once and that no worker runs two tasks at once.
type taskRecorder struct {
	runs    []atomic.Int32
	busy    []atomic.Int32 // per worker
	overlap atomic.Int32
	badID   atomic.Int32
}

func (r *taskRecorder) runTask(worker, task int) {
	if worker < 0 || worker >= len(r.busy) {
		r.badID.Add(1)
		return
	}
	if r.busy[worker].Add(1) != 1 {
		r.overlap.Add(1)
	}
	r.runs[task].Add(1)
	time.Sleep(10 * time.Microsecond) // give other workers the chance to collide
	r.busy[worker].Add(-1)
}

func TestForTasks(t *testing.T) {
	for _, threads := range []int{1, 3} {
		p := &pool{threads: threads}
		for _, n := range []int{0, 1, 2, 50} {
			r := &taskRecorder{runs: make([]atomic.Int32, n), busy: make([]atomic.Int32, threads)}
			p.forTasks(n, r)
			for i := range r.runs {
				if c := r.runs[i].Load(); c != 1 {
					t.Fatalf("threads %d, n %d: task %d ran %d times", threads, n, i, c)
				}
			}
			if r.overlap.Load() != 0 || r.badID.Load() != 0 {
				t.Errorf("threads %d, n %d: %d overlapping tasks on a worker, %d bad worker ids", threads, n, r.overlap.Load(), r.badID.Load())
			}
		}
		p.close()
	}
}

// TestPoolParkAndWake runs loops with gaps longer and shorter than spinWait, so that workers are
// both spinning and parked when a loop starts, and checks every loop's result.
func TestPoolParkAndWake(t *testing.T) {
	p := &pool{threads: 3}
	defer p.close()
	for i := range 60 {
		if i%3 == 0 {
			time.Sleep(3 * spinWait)
		}
		n := 1 + i%7
		r := &taskRecorder{runs: make([]atomic.Int32, n), busy: make([]atomic.Int32, 3)}
		p.forTasks(n, r)
		for task := range r.runs {
			if c := r.runs[task].Load(); c != 1 {
				t.Fatalf("loop %d: task %d ran %d times", i, task, c)
			}
		}
		if r.overlap.Load() != 0 || r.badID.Load() != 0 {
			t.Fatalf("loop %d: %d overlapping tasks on a worker, %d bad worker ids", i, r.overlap.Load(), r.badID.Load())
		}
	}
}

// countJob writes its indices (n <= 64); it is a preallocated job, so running it must not allocate.
type countJob struct{ sums [64]int64 }

func (j *countJob) runRange(lo, hi int) {
	for i := lo; i < hi; i++ {
		j.sums[i] = int64(i)
	}
}

func (j *countJob) runTask(_, task int) { j.sums[task] = int64(task) }

func TestPoolDoesNotAllocate(t *testing.T) {
	p := &pool{threads: 3}
	defer p.close()
	job := reuse[countJob](p)
	p.forTasks(64, job) // starts the workers
	if allocs := testing.AllocsPerRun(100, func() {
		p.forTasks(64, reuse[countJob](p))
		p.forRanges(3, 1, reuse[countJob](p))
	}); allocs != 0 {
		t.Errorf("%v allocations per loop with a reused job", allocs)
	}
	if reuse[countJob](p) != job || reuse[rangeRecorder](p) == nil {
		t.Error("reuse must return the same pointer per type")
	}
}

// waitGoroutines waits up to 5 s for the number of goroutines to drop to want.
func waitGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	return n
}

// settledGoroutines collects garbage until the number of goroutines stops falling (earlier tests
// may have dropped pools whose workers are still stopping) and returns it.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 100 {
		runtime.GC()
		time.Sleep(2 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			break
		}
		n = m
	}
	return n
}

func TestBackendWorkersStop(t *testing.T) {
	run := func(be *Backend) {
		x := be.Alloc(1 << 16)
		be.GeluForward(x, x, 1<<16)
		be.AttentionForward(be.Alloc(2*64*32), be.Alloc(2*2*64), be.Alloc(2*64*96), 2, 64, 32, 2, backend.AttentionMask{Causal: true})
	}
	t.Run("Close", func(t *testing.T) {
		base := settledGoroutines()
		be := New(4)
		run(be)
		if n := runtime.NumGoroutine(); n < base+3 {
			t.Fatalf("%d goroutines after ops on 4 threads, want at least %d", n, base+3)
		}
		be.Close()
		if n := waitGoroutines(base); n > base {
			t.Errorf("%d goroutines after Close, want %d", n, base)
		}
		run(be) // usable after Close
		be.Close()
	})
	t.Run("GC", func(t *testing.T) {
		base := settledGoroutines()
		for range 3 {
			run(New(4)) // dropped without Close
		}
		if n := waitGoroutines(base); n > base {
			t.Errorf("%d goroutines after dropping the backends, want %d", n, base)
		}
	})
}

func BenchmarkPool(b *testing.B) {
	p := &pool{threads: runtime.GOMAXPROCS(0)}
	defer p.close()
	job := reuse[countJob](p)
	for _, n := range []int{2, 64} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			for b.Loop() {
				p.forTasks(n, job)
			}
		})
	}
	// Loops with serial work between them, as in a training step: the workers must not have gone
	// to sleep in the gap. ns/op includes the gap.
	for _, gap := range []time.Duration{5 * time.Microsecond, 30 * time.Microsecond} {
		b.Run(fmt.Sprintf("tasks=2/gap=%v", gap), func(b *testing.B) {
			for b.Loop() {
				for start := time.Now(); time.Since(start) < gap; {
				}
				p.forTasks(2, job)
			}
		})
	}
}
