package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gpt2go/gpt2go/backend"
)

// CUDA graphs (backend.Grapher): the stream records the kernels, memsets and device copies
// queued between BeginCapture and EndCapture (cuStreamBeginCapture in global mode), and the
// instantiated graph replays them with one cuGraphLaunch. While recording, the Device refuses
// what a replay could not repeat (refuseInCapture), and a failure of any op goes to the
// recording's error instead of the backend's sticky one: EndCapture returns it and the caller
// runs the work again without a graph.

// graphSymbols are the driver's graph calls, loaded on first use so that a driver without
// them still runs everything else.
type graphSymbols struct {
	begin, end, instantiate, launch, execDestroy, destroy uintptr
}

func (gs *graphSymbols) table() map[string]*uintptr {
	return map[string]*uintptr{
		"cuStreamBeginCapture_v2":     &gs.begin,
		"cuStreamEndCapture":          &gs.end,
		"cuGraphInstantiateWithFlags": &gs.instantiate,
		"cuGraphLaunch":               &gs.launch,
		"cuGraphExecDestroy":          &gs.execDestroy,
		"cuGraphDestroy":              &gs.destroy,
	}
}

// captureModeGlobal is CU_STREAM_CAPTURE_MODE_GLOBAL: unsafe calls from any thread during the
// capture are errors. The recording goroutine is locked to its OS thread from BeginCapture to
// EndCapture, which must come from the thread that began the capture.
const captureModeGlobal = 0

// errCaptureInvalidated is CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: the capture ended, refused.
const errCaptureInvalidated = 901

func (d *Driver) graphs() (*graphSymbols, error) {
	d.graphOnce.Do(func() {
		gs := &graphSymbols{}
		d.graphErr = symbols(libCUDA, d.handle, gs.table())
		if d.graphErr == nil {
			d.graphSyms = gs
		} else {
			d.graphErr = fmt.Errorf("%w (CUDA graphs need a driver for CUDA 11.4 or newer; --cuda-graphs=false runs without them)", d.graphErr)
		}
	})
	return d.graphSyms, d.graphErr
}

// BeginCapture starts recording the stream's work (backend.Grapher).
func (be *Backend) BeginCapture() error {
	if be.err != nil {
		return fmt.Errorf("cuda: %w", be.err)
	}
	if be.g.capturing {
		return fmt.Errorf("cuda: BeginCapture while a graph is being recorded")
	}
	gs, err := be.g.drv.graphs()
	if err != nil {
		return err
	}
	defer be.g.bind()()
	if err := be.g.drv.check("cuStreamBeginCapture", first(purego.SyscallN(gs.begin, be.g.stream, captureModeGlobal))); err != nil {
		return err
	}
	runtime.LockOSThread() // until EndCapture
	be.g.capturing, be.captureErr = true, nil
	return nil
}

// EndCapture stops recording and instantiates the graph (backend.Grapher).
func (be *Backend) EndCapture() (backend.Graph, error) {
	if !be.g.capturing {
		return nil, fmt.Errorf("cuda: EndCapture without BeginCapture")
	}
	gs, _ := be.g.drv.graphs()
	defer be.g.bind()()
	var graph uintptr
	err := be.g.drv.check("cuStreamEndCapture", first(purego.SyscallN(gs.end, be.g.stream, uintptr(unsafe.Pointer(&graph)))))
	runtime.UnlockOSThread() // BeginCapture's
	be.g.capturing = false
	if e := (*Error)(nil); errors.As(err, &e) && e.Code != errCaptureInvalidated {
		// Not a refused recording: the stream may still be capturing, and nothing queued on it
		// would run. The backend stops, as after any failed driver call.
		be.fail(err)
	}
	captureErr := be.captureErr
	be.captureErr = nil
	if graph != 0 && (err != nil || captureErr != nil) {
		purego.SyscallN(gs.destroy, graph)
	}
	if captureErr != nil {
		return nil, fmt.Errorf("cuda graph: %w", captureErr)
	}
	if err != nil {
		return nil, fmt.Errorf("cuda graph: %w", err)
	}
	var exec uintptr
	err = be.g.drv.check("cuGraphInstantiateWithFlags", first(purego.SyscallN(gs.instantiate, uintptr(unsafe.Pointer(&exec)), graph, 0)))
	purego.SyscallN(gs.destroy, graph) // the instance keeps what it needs
	if err != nil {
		return nil, fmt.Errorf("cuda graph: %w", err)
	}
	return &cudaGraph{be: be, exec: exec, scratchGen: be.scratchGen}, nil
}

// cudaGraph is an instantiated graph, with the scratch generation it was recorded in.
type cudaGraph struct {
	be         *Backend
	exec       uintptr
	scratchGen int
}

// Launch queues the graph on the backend's stream; a failure is the backend's sticky error.
func (gr *cudaGraph) Launch() error {
	be := gr.be
	if gr.exec == 0 {
		return fmt.Errorf("cuda: launch of a closed graph")
	}
	if gr.scratchGen != be.scratchGen {
		return fmt.Errorf("cuda graph: %w (scratch memory regrown)", backend.ErrGraphStale)
	}
	if be.err == nil {
		gs, _ := be.g.drv.graphs()
		start := time.Now()
		unbind := be.g.bind()
		be.fail(be.g.drv.check("cuGraphLaunch", first(purego.SyscallN(gs.launch, gr.exec, be.g.stream))))
		unbind()
		be.g.calls.Graphs++
		be.g.calls.LaunchTime += time.Since(start)
	}
	if be.err != nil {
		return fmt.Errorf("cuda: %w", be.err)
	}
	return nil
}

// Close destroys the graph's instance.
func (gr *cudaGraph) Close() error {
	if gr.exec == 0 {
		return nil
	}
	gs, _ := gr.be.g.drv.graphs()
	defer gr.be.g.bind()()
	err := gr.be.g.drv.check("cuGraphExecDestroy", first(purego.SyscallN(gs.execDestroy, gr.exec)))
	gr.exec = 0
	return err
}

var _ backend.Grapher = (*Backend)(nil)
