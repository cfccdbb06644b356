package cuda

import "github.com/gpt2go/gpt2go/backend"

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
