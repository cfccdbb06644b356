// Package graphrec gives any backend the semantics of CUDA graph capture (backend.Grapher), so
// that tests on the CPU can check what a recorded training step needs to be right on a GPU:
// while recording, ops are kept as closures with the arguments they were called with (scalars
// and slices copied, buffers by reference, as a graph keeps device addresses) and not run; a
// Launch runs them again, reading the buffers as they are then. What a graph cannot replay —
// allocating, uploading, downloading, syncing, an op whose result the host reads — fails the
// recording, as the CUDA backend's does.
//
// A step that passes its value through a kernel argument instead of a buffer (the learning rate,
// a seed, the number of distinct tokens) replays with the stale value here too, and a test that
// compares a recorded run with a direct one catches it.
package graphrec

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// Backend records and replays the ops of the backend it wraps. It is not an embedding, so the
// compiler checks that every method of backend.Backend is here.
type Backend struct {
	inner     backend.Backend
	capturing bool
	ops       []func()
	err       error // the recording's first refusal
	// Captures and Launches count recordings ended well and graph launches.
	Captures, Launches int
	// For tests of what a device may do: FailEndCapture, when set, is every EndCapture's
	// error (the recording dropped); StaleAtLaunch > 0 makes every graph recorded so far
	// stale (backend.ErrGraphStale) when that many launches have been made, as a backend
	// that moves its scratch memory would.
	FailEndCapture error
	StaleAtLaunch  int
	generation     int
}

// Wrap returns a recording wrapper around be.
func Wrap(be backend.Backend) *Backend { return &Backend{inner: be} }

// Unwrap returns the wrapped backend.
func (r *Backend) Unwrap() backend.Backend { return r.inner }

// op runs f, or records it while capturing.
func (r *Backend) op(f func()) {
	if r.capturing {
		r.ops = append(r.ops, f)
		return
	}
	f()
}

// refuse fails the recording, if there is one, with what.
func (r *Backend) refuse(what string) {
	if r.capturing && r.err == nil {
		r.err = fmt.Errorf("%s while recording a graph", what)
	}
}

// BeginCapture starts a recording.
func (r *Backend) BeginCapture() error {
	if r.capturing {
		return fmt.Errorf("graphrec: BeginCapture while recording")
	}
	r.capturing, r.ops, r.err = true, nil, nil
	return nil
}

// EndCapture ends the recording and returns it, or the first refusal.
func (r *Backend) EndCapture() (backend.Graph, error) {
	if !r.capturing {
		return nil, fmt.Errorf("graphrec: EndCapture without BeginCapture")
	}
	r.capturing = false
	ops, err := r.ops, r.err
	r.ops, r.err = nil, nil
	if err == nil {
		err = r.FailEndCapture
	}
	if err != nil {
		return nil, err
	}
	r.Captures++
	return &graph{r: r, ops: ops, generation: r.generation}, nil
}

type graph struct {
	r          *Backend
	ops        []func()
	generation int
}

func (g *graph) Launch() error {
	if g.ops == nil {
		return fmt.Errorf("graphrec: launch of a closed graph")
	}
	if g.r.capturing {
		return fmt.Errorf("graphrec: launch while recording")
	}
	if g.r.StaleAtLaunch > 0 && g.r.Launches == g.r.StaleAtLaunch {
		g.r.generation++
		g.r.StaleAtLaunch = 0
	}
	if g.generation != g.r.generation {
		return fmt.Errorf("graphrec: %w", backend.ErrGraphStale)
	}
	g.r.Launches++
	for _, f := range g.ops {
		f()
	}
	return nil
}

func (g *graph) Close() error { g.ops = nil; return nil }

func (r *Backend) Name() string { return r.inner.Name() + ", graphs recorded" }

func (r *Backend) Alloc(n int) backend.Buf {
	r.refuse("Alloc")
	return r.inner.Alloc(n)
}

func (r *Backend) AllocDType(n int, dt backend.DType) backend.Buf {
	r.refuse("AllocDType")
	return r.inner.AllocDType(n, dt)
}

func (r *Backend) CheckDType(dt backend.DType) error { return r.inner.CheckDType(dt) }

func (r *Backend) AllocInt32(n int) backend.Buf {
	r.refuse("AllocInt32")
	return r.inner.AllocInt32(n)
}

// View passes through: a view is an address, which a graph may keep.
func (r *Backend) View(b backend.Buf, off, n int) backend.Buf { return r.inner.View(b, off, n) }

func (r *Backend) Upload(dst backend.Buf, src []float32) {
	r.refuse("Upload")
	r.inner.Upload(dst, src)
}

func (r *Backend) UploadInt32(dst backend.Buf, src []int32) {
	r.refuse("UploadInt32")
	r.inner.UploadInt32(dst, src)
}

func (r *Backend) Download(dst []float32, src backend.Buf) {
	r.refuse("Download")
	r.inner.Download(dst, src)
}

// Zero is recorded, as a memset node is.
func (r *Backend) Zero(b backend.Buf) { r.op(func() { r.inner.Zero(b) }) }

func (r *Backend) QuantizeInt8(weight backend.Buf, OC, C int) (backend.Buf, error) {
	r.refuse("QuantizeInt8")
	return r.inner.QuantizeInt8(weight, OC, C)
}

func (r *Backend) Sync() error {
	r.refuse("Sync")
	return r.inner.Sync()
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Grapher = (*Backend)(nil)
)
