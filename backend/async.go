package backend

import "time"

// Async is implemented by backends whose ops run asynchronously from the host (a GPU queues
// them on a stream): the trainer then reads a step's loss and gradient norm while the next
// step is already queued, instead of waiting for the GPU after every step (a "sync").
type Async interface {
	// HostBuffer returns n float32s of host memory that DownloadAsync can copy into without the
	// host waiting (page-locked memory on a GPU). It lives as long as the backend.
	HostBuffer(n int) []float32
	// DownloadAsync queues a copy of src[:len(dst)] (an F32 buffer, its bits as they are)
	// into dst, memory from HostBuffer, behind the work queued so far, and returns at
	// once: dst holds the values when a Fence taken afterwards is done.
	DownloadAsync(dst []float32, src Buf)
	// Fence marks the work queued so far.
	Fence() Fence
}

// Fence is a point in a backend's queue of work.
type Fence interface {
	// Wait blocks until the work queued before the fence is done and returns the backend's
	// first error, as Sync does. Call it once.
	Wait() error
}

// AsyncOf returns be as an Async backend, or nil when its ops finish before they return (the
// CPU) or a wrapper (the profiler) hides it.
func AsyncOf(be Backend) Async {
	a, _ := be.(Async)
	return a
}

// HostBuffer returns n float32s of host memory for DownloadLater into: be's HostBuffer when it
// is Async, else ordinary memory.
func HostBuffer(be Backend, n int) []float32 {
	if a := AsyncOf(be); a != nil {
		return a.HostBuffer(n)
	}
	return make([]float32, n)
}

// DownloadLater copies src[:len(dst)] into dst, an F32 buffer's bits as they are:
// asynchronously on an Async backend (dst from HostBuffer; read it after FenceOf(be).Wait()),
// else at once.
func DownloadLater(be Backend, dst []float32, src Buf) {
	if a := AsyncOf(be); a != nil {
		a.DownloadAsync(dst, src)
		return
	}
	be.Download(dst, src)
}

// FenceOf marks the work queued so far on be: an Async backend's Fence, else one whose Wait is
// be.Sync.
func FenceOf(be Backend) Fence {
	if a := AsyncOf(be); a != nil {
		return a.Fence()
	}
	return syncFence{be}
}

type syncFence struct{ be Backend }

func (f syncFence) Wait() error { return f.be.Sync() }

// HostCalls counts the work a backend's host side queued: kernel launches (cuBLASLt matmuls
// and memsets included), graph launches and host<->device copies, with the host time spent in
// the launch calls. A GPU step's launches cost host time whether or not the GPU waits for them;
// graphs (Grapher) replace a part's launches by one.
type HostCalls struct {
	Launches, Graphs, Copies int64
	LaunchTime               time.Duration
}

// Sub is c - d, the calls between two readings.
func (c HostCalls) Sub(d HostCalls) HostCalls {
	return HostCalls{c.Launches - d.Launches, c.Graphs - d.Graphs, c.Copies - d.Copies, c.LaunchTime - d.LaunchTime}
}

// CallCounter is implemented by backends that queue work from the host (a GPU).
type CallCounter interface {
	HostCalls() HostCalls
}
