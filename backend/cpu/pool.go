package cpu

import (
	"sync"
	"sync/atomic"
)

// pool runs loops on up to threads goroutines (the caller's included). It is a plain fork-join for
// now: goroutines are started per call and joined before the call returns.
type pool struct {
	threads int
}

// parallelFor calls fn(lo, hi) on disjoint ranges that cover [0, n), each at least grain long
// (except a short last one), concurrently. fn must compute each index the same way however [0, n)
// is split, which is what keeps results independent of the thread count.
func (p *pool) parallelFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	chunks := min(p.threads, (n+grain-1)/max(grain, 1))
	if chunks <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for c := 1; c < chunks; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(c*n/chunks, (c+1)*n/chunks)
		}()
	}
	fn(0, n/chunks)
	wg.Wait()
}

// parallelTasks calls fn(worker, task) once for every task in [0, n), handing tasks out dynamically
// to up to threads workers numbered 0..threads-1; a worker runs one task at a time, so fn may use
// per-worker scratch space. Tasks must not depend on which worker runs them.
func (p *pool) parallelTasks(n int, fn func(worker, task int)) {
	workers := min(p.threads, n)
	if workers <= 1 {
		for t := range n {
			fn(0, t)
		}
		return
	}
	var next atomic.Int64
	run := func(worker int) {
		for {
			t := int(next.Add(1) - 1)
			if t >= n {
				return
			}
			fn(worker, t)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(w)
		}()
	}
	run(0)
	wg.Wait()
}
