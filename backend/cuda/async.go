package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gpt2go/gpt2go/backend"
)

// The asynchronous half of the backend (backend.Async): page-locked host buffers the stream
// copies into without the host waiting, and fences (CUDA events) that say when it has.

// AllocHost allocates bytes of page-locked host memory, which the GPU copies to and from
// asynchronously; it is never freed (the backend keeps a few small buffers for its lifetime).
func (g *Device) AllocHost(bytes int64) (unsafe.Pointer, error) {
	if err := g.refuseInCapture("allocating page-locked memory"); err != nil {
		return nil, err
	}
	defer g.bind()()
	var p unsafe.Pointer
	err := g.drv.check(fmt.Sprintf("cuMemAllocHost(%d bytes)", bytes), first(purego.SyscallN(g.drv.memAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(bytes))))
	return p, err
}

// DtoHAsync queues a copy of bytes from device memory at src to page-locked host memory at dst
// behind the work queued so far, and returns at once.
func (g *Device) DtoHAsync(dst unsafe.Pointer, src uintptr, bytes int64) error {
	if err := g.refuseInCapture("a copy to the host"); err != nil {
		return err
	}
	if bytes == 0 {
		return nil
	}
	g.calls.Copies++
	defer g.bind()()
	return g.drv.check("cuMemcpyDtoHAsync", first(purego.SyscallN(g.drv.memcpyDtoHAsync, uintptr(dst), src, uintptr(bytes), g.stream)))
}

// NewEvent creates an event without timing (cheaper to record and wait for).
func (g *Device) NewEvent() (uintptr, error) {
	defer g.bind()()
	var e uintptr
	err := g.drv.check("cuEventCreate", first(purego.SyscallN(g.drv.eventCreate, uintptr(unsafe.Pointer(&e)), 2 /* CU_EVENT_DISABLE_TIMING */)))
	return e, err
}

// Record marks the work queued so far with e.
func (g *Device) Record(e uintptr) error { return g.RecordOn(e, g.stream) }

// RecordOn marks the work queued so far on stream (Stream or SideStream) with e.
func (g *Device) RecordOn(e, stream uintptr) error {
	if err := g.refuseInCapture("recording an event"); err != nil {
		return err
	}
	defer g.bind()()
	return g.drv.check("cuEventRecord", first(purego.SyscallN(g.drv.eventRecord, e, stream)))
}

// WaitEvent blocks until the work e marks is done.
func (g *Device) WaitEvent(e uintptr) error {
	if err := g.refuseInCapture("waiting for an event"); err != nil {
		return err
	}
	defer g.bind()()
	return g.drv.check("cuEventSynchronize", first(purego.SyscallN(g.drv.eventSynchronize, e)))
}

// EventDone says, without waiting, whether the work e marks is done.
func (g *Device) EventDone(e uintptr) (bool, error) {
	if err := g.refuseInCapture("querying an event"); err != nil {
		return false, err
	}
	defer g.bind()()
	r := first(purego.SyscallN(g.drv.eventQuery, e))
	if r == 600 { // CUDA_ERROR_NOT_READY
		return false, nil
	}
	return r == 0, g.drv.check("cuEventQuery", r)
}

// HostBuffer returns n float32s of page-locked memory (backend.Async). After a failure it
// returns ordinary memory: DownloadAsync never writes it once the backend has failed (the error
// is sticky); refused while a graph is recorded (not a failure of the backend), it is written,
// by a copy that returns only when done.
func (be *Backend) HostBuffer(n int) []float32 {
	if n == 0 {
		return nil
	}
	if be.err == nil {
		p, err := be.g.AllocHost(int64(4 * n))
		if err == nil {
			return unsafe.Slice((*float32)(p), n)
		}
		be.fail(err)
	}
	return make([]float32, n)
}

// DownloadAsync queues the copy of src[:len(dst)] into dst (backend.Async).
func (be *Backend) DownloadAsync(dst []float32, src backend.Buf) {
	if be.err != nil || len(dst) == 0 {
		return
	}
	if src.DType() != backend.F32 || len(dst) > src.Len() {
		be.fail(fmt.Errorf("DownloadAsync: %d elements from a %v buffer of %d", len(dst), src.DType(), src.Len()))
		return
	}
	be.fail(be.g.DtoHAsync(unsafe.Pointer(&dst[0]), ptrOf(src), int64(4*len(dst))))
}

// fence is a recorded event from the backend's pool.
type fence struct {
	be    *Backend
	event uintptr
}

// Fence records an event behind the work queued so far (backend.Async).
func (be *Backend) Fence() backend.Fence {
	f := &fence{be: be}
	if be.err != nil {
		return f
	}
	if n := len(be.events); n > 0 {
		f.event, be.events = be.events[n-1], be.events[:n-1]
	} else {
		e, err := be.g.NewEvent()
		if err != nil {
			be.fail(err)
			return f
		}
		f.event = e
	}
	be.fail(be.g.Record(f.event))
	return f
}

// Wait waits for the event, gives it back to the pool and returns the backend's first error.
func (f *fence) Wait() error {
	be := f.be
	if f.event != 0 {
		if be.err == nil {
			be.fail(be.g.WaitEvent(f.event))
		}
		be.events = append(be.events, f.event)
		f.event = 0
	}
	if be.err != nil {
		return fmt.Errorf("cuda: %w", be.err)
	}
	return nil
}

var _ backend.Async = (*Backend)(nil)
