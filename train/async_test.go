package train

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/dist"
)

// lateCopies is the CPU backend made asynchronous the way a GPU is (backend.Async): the values
// of a DownloadAsync reach its host buffer only when a fence taken after it is waited for, or
// at a Sync or a blocking Download; until then the buffer holds NaN. On the plain CPU backend
// every copy lands at once, so a host read that comes before its fence passes there and shows
// here (it did in data-parallel steps, which read their losses before any wait).
type lateCopies struct {
	*cpu.Backend
	pending   []func() // copies not delivered yet, in queue order
	delivered int      // copies delivered so far
}

func (l *lateCopies) HostBuffer(n int) []float32 {
	b := make([]float32, n)
	for i := range b {
		b[i] = float32(math.NaN())
	}
	return b
}

// DownloadAsync takes src's values now (they are final in queue order) and delivers them later.
func (l *lateCopies) DownloadAsync(dst []float32, src backend.Buf) {
	vals := make([]float32, len(dst))
	l.Backend.Download(vals, src)
	for i := range dst {
		dst[i] = float32(math.NaN())
	}
	l.pending = append(l.pending, func() { copy(dst, vals) })
}

// deliver delivers the copies up to the queue's n-th.
func (l *lateCopies) deliver(n int) {
	for l.delivered < n && len(l.pending) > 0 {
		l.pending[0]()
		l.pending = l.pending[1:]
		l.delivered++
	}
}

func (l *lateCopies) queued() int { return l.delivered + len(l.pending) }

func (l *lateCopies) Sync() error {
	l.deliver(l.queued())
	return l.Backend.Sync()
}

func (l *lateCopies) Download(dst []float32, src backend.Buf) {
	l.deliver(l.queued())
	l.Backend.Download(dst, src)
}

func (l *lateCopies) Fence() backend.Fence { return lateFence{l, l.queued()} }

type lateFence struct {
	l *lateCopies
	n int
}

func (f lateFence) Wait() error {
	f.l.deliver(f.n)
	return nil
}

// Every figure the trainer reads back asynchronously is read after its fence: runs on a backend
// whose copies land late, in one process and as a data-parallel rank (its steps read the losses
// before reducing), log the bits of the same runs on the plain CPU backend.
func TestAsyncCopiesReadAfterTheirFence(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps, cfg.GradAccum = 5, 2
	for _, ddp := range []bool{false, true} {
		dirs := map[bool]string{}
		for _, late := range []bool{false, true} {
			be := backend.Backend(cpu.New(2))
			if late {
				be = &lateCopies{Backend: cpu.New(2)}
			}
			dirs[late] = filepath.Join(t.TempDir(), "run")
			opts := Options{Config: cfg, RunDir: dirs[late], Backend: be}
			if ddp {
				opts.Comm = dist.NewSingle(be)
			}
			if _, err := runTrain(t, opts); err != nil {
				t.Fatalf("data parallel %v, late copies %v: %v", ddp, late, err)
			}
		}
		want, got := logEntries(t, dirs[false]), logEntries(t, dirs[true])
		for step, w := range want {
			for k, v := range w {
				if got[step][k] != v {
					t.Errorf("data parallel %v, step %d: %s = %v with late copies, %v without", ddp, step, k, got[step][k], v)
				}
			}
		}
	}
}

// TestPipelinedStepsMatch with copies that land late: the pipelined runs read each step's
// figures only after its fence.
func TestPipelinedStepsMatchLateCopies(t *testing.T) {
	testPipelinedStepsMatch(t, &lateCopies{Backend: cpu.New(2)})
}
