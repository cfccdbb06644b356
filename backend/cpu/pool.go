package cpu

import (
	"runtime"
	"sync/atomic"
	"time"
)

// pool runs an op's loop on up to threads goroutines: the caller's (worker 0) and threads-1
// workers (1..threads-1) that are started on the first parallel loop and then wait between loops
// (spinning briefly, then parked), so an op costs no goroutine start and, in a training step, no
// wake-up of a parked goroutine. A pool runs one loop at a time: ops must not
// run concurrently on one pool, nor start a loop from inside one.
//
// Two ways to hand it work:
//   - parallelFor and parallelTasks take a closure. A closure that captures variables (in a
//     generic function, any closure: it carries the type dictionary) escapes to the workers and
//     is heap-allocated on every call, which is fine outside the training step.
//   - forRanges and forTasks take a rangeJob or taskJob, usually a pointer to a struct that holds
//     the loop's arguments and comes from reuse (so it is allocated once per pool). Ops in the
//     training step use these so that a step allocates nothing.
//
// Results never depend on which goroutine runs which piece: the split of [0, n) into ranges
// depends only on n, grain and threads, and the functions must compute each index the same way
// however it is split.
type pool struct {
	threads int
	crew    *crew       // the workers; nil until the first parallel loop and after close
	jobs    map[any]any // reuse's values, keyed by a typed nil pointer per type
	ranges  rangeTasks  // forRanges' adapter, kept here so it is not allocated per call
}

// A rangeJob is a loop over an index range; runRange(lo, hi) handles indices [lo, hi).
type rangeJob interface{ runRange(lo, hi int) }

// A taskJob is a set of independent tasks; runTask(worker, task) runs one task on the given
// worker (0..threads-1), which can index per-worker scratch space.
type taskJob interface{ runTask(worker, task int) }

// parallelFor calls fn(lo, hi) on disjoint ranges that cover [0, n), each at least grain long,
// concurrently. fn must compute each index the same way however [0, n) is split, which is what
// keeps results independent of the thread count. fn is heap-allocated if it captures variables;
// forRanges is the allocation-free form.
func (p *pool) parallelFor(n, grain int, fn func(lo, hi int)) {
	p.forRanges(n, grain, rangeFunc(fn))
}

// parallelTasks calls fn(worker, task) once for every task in [0, n), handing tasks out dynamically
// to up to threads workers numbered 0..threads-1; a worker runs one task at a time, so fn may use
// per-worker scratch space. Tasks must not depend on which worker runs them. forTasks is the
// allocation-free form.
func (p *pool) parallelTasks(n int, fn func(worker, task int)) {
	p.forTasks(n, taskFunc(fn))
}

// rangesPerThread is how many ranges forRanges cuts per thread (when n allows), so that a thread
// that is descheduled on a busy machine holds up the loop by a fraction of its share.
const rangesPerThread = 4

// forRanges calls job.runRange(lo, hi) on disjoint ranges that cover [0, n), each at least grain
// long (one range when n < 2*grain), concurrently; see parallelFor.
func (p *pool) forRanges(n, grain int, job rangeJob) {
	if n <= 0 {
		return
	}
	chunks := min(rangesPerThread*p.threads, n/max(grain, 1))
	if p.threads <= 1 || chunks <= 1 {
		job.runRange(0, n)
		return
	}
	p.ranges = rangeTasks{job: job, n: n, chunks: chunks}
	p.forTasks(chunks, &p.ranges)
	p.ranges = rangeTasks{}
}

// forTasks calls job.runTask(worker, task) once for every task in [0, n); see parallelTasks.
func (p *pool) forTasks(n int, job taskJob) {
	if n <= 0 {
		return
	}
	helpers := min(p.threads, n) - 1
	if helpers <= 0 {
		for t := range n {
			job.runTask(0, t)
		}
		return
	}
	if p.crew == nil {
		p.crew = startCrew(p.threads - 1)
		// The workers hold only the crew, never the pool, so a pool that is no longer referenced
		// can be collected; its cleanup then stops the workers.
		runtime.AddCleanup(p, (*crew).stop, p.crew)
	}
	p.crew.run(n, helpers, job)
	runtime.KeepAlive(p)
}

// close stops the workers, if any were started. A later parallel loop starts new ones.
func (p *pool) close() {
	if p.crew != nil {
		p.crew.stop()
		p.crew = nil
	}
}

// reuse returns a *T that belongs to p: the same pointer on every call for the same type T, zeroed
// when first allocated. Ops keep their job structs and scratch space in it, so that after the first
// call they allocate nothing. Ops share a type only to share its memory (attention's forward and
// backward share their scratch space), since ops never run at the same time on one pool.
func reuse[T any](p *pool) *T {
	key := any((*T)(nil))
	if v, ok := p.jobs[key]; ok {
		return v.(*T)
	}
	if p.jobs == nil {
		p.jobs = map[any]any{}
	}
	v := new(T)
	p.jobs[key] = v
	return v
}

// crew is the state that the workers share with the goroutine that runs a loop (the caller).
//
// A loop is a generation: the caller sets job and tasks, then publishes the generation in gen.
// Workers that see it join it (a CAS on state, which holds the generation and how many workers
// joined), take tasks from next until none are left, and leave (left). When the caller runs out of
// tasks it closes the generation, so that no worker joins late, and waits until every worker that
// joined has left; only then may job be rewritten, so a worker never reads another loop's job.
//
// Waiting (workers for the next loop, the caller for the last worker to leave) spins for up to
// spinWait and then parks on a channel: a training step runs hundreds of loops a few tens of
// microseconds apart, and waking a parked goroutine costs about as much as a short loop itself.
type crew struct {
	job   taskJob // the current loop; written only while no worker is joined
	tasks int
	next  atomic.Int64 // the next task to hand out
	gen   atomic.Uint32
	state atomic.Uint64 // generation<<32 | closed<<31 | workers joined
	left  atomic.Int32  // workers that joined the current generation and have left it

	sleepers []sleeper // one per worker (index w-1)
	caller   sleeper   // the caller, parked until the last worker leaves
	stopped  atomic.Bool
}

const closedBit = 1 << 31

// spinWait is how long a waiting goroutine spins before it parks.
const spinWait = 50 * time.Microsecond

// A sleeper is a goroutine that may park. Waking and parking race safely: the sleeper sets asleep
// and then looks at its condition once more; a waker that swaps asleep from true to false owns the
// wake-up and sends exactly one token.
type sleeper struct {
	asleep atomic.Bool
	wake   chan struct{}
}

func (s *sleeper) wakeUp() {
	if s.asleep.Swap(false) {
		s.wake <- struct{}{}
	}
}

// wait returns when ready() is true: it spins for up to spinWait, then parks until a waker calls
// wakeUp, and checks again.
func (s *sleeper) wait(ready func() bool) {
	var start time.Time
	for i := 0; !ready(); i++ {
		if i&63 != 63 {
			spinPause()
			continue
		}
		if start.IsZero() {
			start = time.Now()
			continue
		}
		if time.Since(start) < spinWait {
			continue
		}
		// A swap, not a store: the sleeper's write of asleep must be visible before it reads
		// its condition (the waker writes the condition and then reads asleep). Go's atomics
		// promise that order for a store too, but an emulator may not keep it (qemu-aarch64 on
		// an x86 host translating a store-release and a later load-acquire to a plain store
		// and load is the likely reason an arm64 test binary in CI once parked the caller for
		// good); a swap is an atomic exchange, a full barrier, on every host.
		s.asleep.Swap(true)
		if ready() && s.asleep.Swap(false) {
			return // nobody saw us asleep
		}
		<-s.wake // a waker took asleep (before or after ready() turned true) and sends one token
	}
}

func startCrew(workers int) *crew {
	c := &crew{sleepers: make([]sleeper, workers)}
	c.caller.wake = make(chan struct{}, 1)
	for w := 1; w <= workers; w++ {
		c.sleepers[w-1].wake = make(chan struct{}, 1)
		go c.work(w)
	}
	return c
}

// work is worker w's loop: wait for a new generation, join it if it is still open, run tasks until
// none are left, leave, repeat.
func (c *crew) work(w int) {
	s := &c.sleepers[w-1]
	seen := c.gen.Load()
	for {
		s.wait(func() bool { return c.gen.Load() != seen || c.stopped.Load() })
		if c.stopped.Load() {
			return
		}
		seen = c.gen.Load()
		if !c.join(seen) {
			continue // the caller finished that loop without us
		}
		c.runTasks(w)
		c.left.Add(1)
		c.caller.wakeUp()
	}
}

// join adds the calling worker to generation g unless it is closed or over.
func (c *crew) join(g uint32) bool {
	for {
		st := c.state.Load()
		if uint32(st>>32) != g || st&closedBit != 0 {
			return false
		}
		if c.state.CompareAndSwap(st, st+1) {
			return true
		}
	}
}

// run hands the n tasks of job to the calling goroutine (worker 0) and to up to helpers workers,
// and returns when all tasks are done and every worker that joined has left.
func (c *crew) run(n, helpers int, job taskJob) {
	c.job, c.tasks = job, n
	c.next.Store(0)
	c.left.Store(0)
	g := c.gen.Load() + 1
	c.state.Store(uint64(g) << 32)
	c.gen.Store(g)
	for i := 0; i < helpers && i < len(c.sleepers); i++ {
		c.sleepers[i].wakeUp()
	}
	c.runTasks(0)
	// Close the generation; the workers that joined are all that can still be running tasks.
	var joined int32
	for {
		st := c.state.Load()
		if c.state.CompareAndSwap(st, st|closedBit) {
			joined = int32(st & (closedBit - 1))
			break
		}
	}
	c.caller.wait(func() bool { return c.left.Load() == joined })
	c.job = nil // do not keep the job's buffers reachable between loops
}

func (c *crew) runTasks(worker int) {
	for {
		t := int(c.next.Add(1) - 1)
		if t >= c.tasks {
			return
		}
		c.job.runTask(worker, t)
	}
}

// stop ends the workers once they finish the current loop; it may be called more than once.
func (c *crew) stop() {
	if c.stopped.Swap(true) {
		return
	}
	for i := range c.sleepers {
		c.sleepers[i].wakeUp()
	}
}

// rangeTasks runs a rangeJob as chunks tasks: task i is the range [i*n/chunks, (i+1)*n/chunks).
type rangeTasks struct {
	job       rangeJob
	n, chunks int
}

func (r *rangeTasks) runTask(_, task int) {
	r.job.runRange(task*r.n/r.chunks, (task+1)*r.n/r.chunks)
}

// rangeFunc and taskFunc adapt closures to the job interfaces.
type (
	rangeFunc func(lo, hi int)
	taskFunc  func(worker, task int)
)

func (f rangeFunc) runRange(lo, hi int)     { f(lo, hi) }
func (f taskFunc) runTask(worker, task int) { f(worker, task) }
