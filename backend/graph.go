package backend

import "errors"

// Grapher is implemented by backends that can record the work queued between BeginCapture and
// EndCapture and replay it later as one launch (a CUDA graph: one launch for a training step's
// hundreds of kernels, and nothing for the host to do while they run).
//
// While recording, ops are not run: the graph keeps each op with the arguments it was called
// with (sizes and scalars by value, buffers by address) and a replay runs them again on what the
// buffers hold then. What changes between replays must therefore reach the ops through buffers
// written before each Launch (the tokens; the learning rate, see Ops.AdamWAll). Whatever a replay
// could not repeat is refused while recording: allocating, uploading, downloading, syncing,
// reading a result on the host. EndCapture then returns an error that names the first such call
// and drops the recording; the work recorded never ran, so the caller runs it again without a
// graph. Errors of the backend itself stay sticky as always.
type Grapher interface {
	// BeginCapture starts recording the ops queued from now on.
	BeginCapture() error
	// EndCapture stops recording and returns the graph, ready to Launch.
	EndCapture() (Graph, error)
}

// ErrGraphStale is what Graph.Launch returns, without launching, when memory the graph uses has
// moved since it was recorded (a backend's scratch buffer regrown for a larger op): the caller
// closes the graph, runs the work directly and may record it again.
var ErrGraphStale = errors.New("memory the graph uses has moved since it was recorded")

// Graph is recorded work.
type Graph interface {
	// Launch queues the recorded work behind the work queued so far, or returns an error
	// wrapping ErrGraphStale and queues nothing.
	Launch() error
	// Close frees the graph; it cannot be launched again.
	Close() error
}

// GrapherOf returns be as a Grapher, or nil when it records no graphs (the CPU, whose ops
// run as they are called, or a wrapper such as the profiler).
func GrapherOf(be Backend) Grapher {
	g, _ := be.(Grapher)
	return g
}
