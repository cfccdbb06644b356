package cuda

import (
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gpt2go/gpt2go/backend"
)

// What a communicator beside the backend (dist/nccl) needs to queue collectives in order with the
// backend's ops: the buffers' device addresses, the stream, the context.

// DevicePointer returns the device address of a buffer (or view) of this backend.
func DevicePointer(b backend.Buf) (uintptr, bool) {
	bb, ok := b.(*buf)
	if !ok {
		return 0, false
	}
	return bb.ptr, true
}

// Stream returns the CUDA stream that all of the device's work is queued on, in order.
func (g *Device) Stream() uintptr { return g.stream }

// Bind pins the calling goroutine to its OS thread with the device's context current there, for
// calls into other CUDA libraries; call the returned function when done.
func (g *Device) Bind() (unbind func()) { return g.bind() }

// SideStream returns a second stream, created on first use, for work that runs beside the ops
// on the main stream (a communicator's collectives while backward goes on). Work queued there is
// ordered against the main stream only by Fork and Join; Sync waits for both streams.
func (g *Device) SideStream() (uintptr, error) {
	if g.side != 0 {
		return g.side, nil
	}
	if err := g.refuseInCapture("creating a stream"); err != nil {
		return 0, err
	}
	defer g.bind()()
	// The events first, each kept once made (the driver has no handles to spare on a retry), and
	// the stream last: g.side set means all three exist.
	for _, e := range []*uintptr{&g.forkEv, &g.joinEv} {
		if *e != 0 {
			continue
		}
		if err := g.drv.check("cuEventCreate", first(purego.SyscallN(g.drv.eventCreate, uintptr(unsafe.Pointer(e)), 2 /* CU_EVENT_DISABLE_TIMING */))); err != nil {
			*e = 0
			return 0, err
		}
	}
	var side uintptr
	if err := g.drv.check("cuStreamCreate", first(purego.SyscallN(g.drv.streamCreate, uintptr(unsafe.Pointer(&side)), 1 /* CU_STREAM_NON_BLOCKING */))); err != nil {
		return 0, err
	}
	g.side = side
	return side, nil
}

// Fork makes the work queued on the side stream from now on wait for the work queued on the main
// stream so far (an event recorded on the main stream, waited for by the side stream; the host
// does not wait).
func (g *Device) Fork() error { return g.order(g.forkEv, g.stream, g.side) }

// Join makes the work queued on the main stream from now on wait for the work queued on the side
// stream so far.
func (g *Device) Join() error { return g.order(g.joinEv, g.side, g.stream) }

// order records e on from and makes to wait for it (nothing without a side stream: nothing was
// queued there). A stream waits for the event's latest record as of the wait call, so one event
// serves every Fork (and one every Join).
func (g *Device) order(e, from, to uintptr) error {
	if g.side == 0 {
		return nil
	}
	if err := g.refuseInCapture("ordering the side stream"); err != nil {
		return err
	}
	defer g.bind()()
	if err := g.drv.check("cuEventRecord", first(purego.SyscallN(g.drv.eventRecord, e, from))); err != nil {
		return err
	}
	return g.drv.check("cuStreamWaitEvent", first(purego.SyscallN(g.drv.streamWaitEvent, to, e, 0)))
}
