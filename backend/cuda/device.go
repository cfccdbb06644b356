package cuda

import (
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gpt2go/gpt2go/backend"
)

// Device is one GPU with its primary context and the stream all work is queued on.
//
// A CUDA context is current per OS thread, and goroutines move between threads, so every method
// that calls the driver first pins the goroutine to its thread and makes the context current
// (bind); the pair costs two cheap driver calls, small next to a kernel launch.
type Device struct {
	drv    *Driver
	Info   DeviceInfo
	ctx    uintptr
	stream uintptr
	// capturing is set while the stream records a graph (graph.go): the calls a graph cannot
	// replay (allocating, host copies, syncs, events) then fail with errCapture instead of
	// reaching the driver.
	capturing bool
	calls     backend.HostCalls // what the host queued (HostCalls)
	// side is a second stream for work beside the ops (comm.go: Fork, Join), created on first
	// use, with the events that order it against the main stream.
	side           uintptr
	forkEv, joinEv uintptr
}

// OpenDevice opens GPU ordinal with the driver's primary context and a new stream.
func OpenDevice(ordinal int) (*Device, error) {
	drv, err := LoadDriver()
	if err != nil {
		return nil, err
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("the CUDA driver sees no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)")
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("no GPU %d: the driver sees %d (0..%d)", ordinal, n, n-1)
	}
	info, err := drv.Device(ordinal)
	if err != nil {
		return nil, err
	}
	g := &Device{drv: drv, Info: info}
	var dev int32
	if err := drv.check("cuDeviceGet", first(purego.SyscallN(drv.deviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal)))); err != nil {
		return nil, err
	}
	if err := drv.check("cuDevicePrimaryCtxRetain", first(purego.SyscallN(drv.primaryCtxRetain, uintptr(unsafe.Pointer(&g.ctx)), uintptr(dev)))); err != nil {
		return nil, err
	}
	defer g.bind()()
	if err := drv.check("cuStreamCreate", first(purego.SyscallN(drv.streamCreate, uintptr(unsafe.Pointer(&g.stream)), 1 /* CU_STREAM_NON_BLOCKING */))); err != nil {
		return nil, err
	}
	return g, nil
}

// bind pins the goroutine to its OS thread and makes the context current there; call the
// returned function when done.
func (g *Device) bind() (unbind func()) {
	runtime.LockOSThread()
	purego.SyscallN(g.drv.ctxSetCurrent, g.ctx)
	return runtime.UnlockOSThread
}

// MemInfo returns the free and total device memory in bytes.
func (g *Device) MemInfo() (free, total int64, err error) {
	if err := g.refuseInCapture("reading free memory"); err != nil {
		return 0, 0, err
	}
	defer g.bind()()
	var f, t uintptr
	err = g.drv.check("cuMemGetInfo", first(purego.SyscallN(g.drv.memGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t)))))
	return int64(f), int64(t), err
}

// launched counts a launch that began at start.
func (g *Device) launched(start time.Time) {
	g.calls.Launches++
	g.calls.LaunchTime += time.Since(start)
}

// HostCalls returns what the host has queued on the stream so far.
func (g *Device) HostCalls() backend.HostCalls { return g.calls }

// refuseInCapture returns an error naming what while a graph is recorded.
func (g *Device) refuseInCapture(what string) error {
	if g.capturing {
		return fmt.Errorf("%s while recording a CUDA graph", what)
	}
	return nil
}

// Alloc allocates bytes of device memory.
func (g *Device) Alloc(bytes int64) (uintptr, error) {
	if err := g.refuseInCapture("allocating GPU memory"); err != nil {
		return 0, err
	}
	defer g.bind()()
	var p uintptr
	err := g.drv.check(fmt.Sprintf("cuMemAlloc(%d bytes)", bytes), first(purego.SyscallN(g.drv.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes))))
	return p, err
}

// Free releases memory from Alloc.
func (g *Device) Free(p uintptr) error {
	if err := g.refuseInCapture("freeing GPU memory"); err != nil {
		return err
	}
	defer g.bind()()
	return g.drv.check("cuMemFree", first(purego.SyscallN(g.drv.memFree, p)))
}

// HtoD copies bytes from host memory at src to device memory at dst, in stream order; it returns
// when src may be reused.
func (g *Device) HtoD(dst uintptr, src unsafe.Pointer, bytes int64) error {
	if err := g.refuseInCapture("a copy from the host"); err != nil {
		return err
	}
	if bytes == 0 {
		return nil
	}
	g.calls.Copies++
	defer g.bind()()
	return g.drv.check("cuMemcpyHtoDAsync", first(purego.SyscallN(g.drv.memcpyHtoDAsync, dst, uintptr(src), uintptr(bytes), g.stream)))
}

// DtoH copies bytes from device memory at src to host memory at dst after all queued work, and
// waits for the copy.
func (g *Device) DtoH(dst unsafe.Pointer, src uintptr, bytes int64) error {
	if bytes == 0 {
		return g.refuseInCapture("a copy to the host")
	}
	if err := g.DtoHAsync(dst, src, bytes); err != nil {
		return err
	}
	return g.Sync()
}

// DtoD copies bytes between device buffers in stream order.
func (g *Device) DtoD(dst, src uintptr, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	defer g.bind()()
	return g.drv.check("cuMemcpyDtoDAsync", first(purego.SyscallN(g.drv.memcpyDtoDAsync, dst, src, uintptr(bytes), g.stream)))
}

// Memset32 sets n 32-bit words at p to value, in stream order.
func (g *Device) Memset32(p uintptr, value uint32, n int64) error {
	if n == 0 {
		return nil
	}
	defer g.launched(time.Now())
	defer g.bind()()
	return g.drv.check("cuMemsetD32Async", first(purego.SyscallN(g.drv.memsetD32Async, p, uintptr(value), uintptr(n), g.stream)))
}

// Memset16 sets n 16-bit words at p to value, in stream order.
func (g *Device) Memset16(p uintptr, value uint16, n int64) error {
	if n == 0 {
		return nil
	}
	defer g.launched(time.Now())
	defer g.bind()()
	return g.drv.check("cuMemsetD16Async", first(purego.SyscallN(g.drv.memsetD16Async, p, uintptr(value), uintptr(n), g.stream)))
}

// Sync waits for all work queued on the device's stream, and on the side stream if there is one.
func (g *Device) Sync() error {
	if err := g.refuseInCapture("waiting for the GPU"); err != nil {
		return err
	}
	defer g.bind()()
	if err := g.drv.check("cuStreamSynchronize", first(purego.SyscallN(g.drv.streamSynchronize, g.stream))); err != nil {
		return err
	}
	if g.side == 0 {
		return nil
	}
	return g.drv.check("cuStreamSynchronize (side stream)", first(purego.SyscallN(g.drv.streamSynchronize, g.side)))
}

// Module is loaded GPU code.
type Module struct {
	g      *Device
	handle uintptr
}

// LoadModule loads a cubin or PTX image.
func (g *Device) LoadModule(image []byte) (*Module, error) {
	defer g.bind()()
	var m uintptr
	err := g.drv.check("cuModuleLoadData", first(purego.SyscallN(g.drv.moduleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&image[0])))))
	runtime.KeepAlive(image)
	if err != nil {
		return nil, err
	}
	return &Module{g: g, handle: m}, nil
}

// Kernel looks up an extern "C" kernel of the module.
func (m *Module) Kernel(name string) (*Kernel, error) {
	defer m.g.bind()()
	var f uintptr
	cname := cString(name)
	err := m.g.drv.check("cuModuleGetFunction("+name+")", first(purego.SyscallN(m.g.drv.moduleGetFunction, uintptr(unsafe.Pointer(&f)), m.handle, uintptr(unsafe.Pointer(&cname[0])))))
	runtime.KeepAlive(cname)
	if err != nil {
		return nil, err
	}
	k := &Kernel{g: m.g, Name: name, fn: f}
	for i := range k.params {
		k.params[i] = uintptr(unsafe.Pointer(&k.vals[i]))
	}
	return k, nil
}

// maxKernelArgs bounds the arguments of one kernel.
const maxKernelArgs = 24

// Kernel is a launchable function. Arguments are staged in the Kernel itself (its heap memory
// does not move), so a launch allocates nothing:
//
//	k.Args().Ptr(out).Ptr(inp).Int(n).Launch(grid, block, 0)
//
// A Kernel is not safe for concurrent use.
type Kernel struct {
	g      *Device
	Name   string
	fn     uintptr
	vals   [maxKernelArgs]uint64
	params [maxKernelArgs]uintptr // params[i] = &vals[i], what cuLaunchKernel reads
	n      int
	shared int // dynamic shared memory opted in to with SetMaxDynamicShared
}

// defaultSharedLimit is the dynamic shared memory every block may use without opting in.
const defaultSharedLimit = 48 << 10

// Args starts a new argument list.
func (k *Kernel) Args() *Kernel { k.n = 0; return k }

func (k *Kernel) push(v uint64) *Kernel {
	if k.n == maxKernelArgs {
		panic("cuda: too many kernel arguments for " + k.Name)
	}
	k.vals[k.n] = v
	k.n++
	return k
}

// Ptr adds a device pointer argument (0 for a null pointer).
func (k *Kernel) Ptr(p uintptr) *Kernel { return k.push(uint64(p)) }

// Int adds a C int argument.
func (k *Kernel) Int(v int) *Kernel { return k.push(uint64(uint32(int32(v)))) }

// Long adds a C long (64-bit) argument.
func (k *Kernel) Long(v int64) *Kernel { return k.push(uint64(v)) }

// Float adds a C float argument.
func (k *Kernel) Float(v float32) *Kernel { return k.push(uint64(math.Float32bits(v))) }

// Double adds a C double argument.
func (k *Kernel) Double(v float64) *Kernel { return k.push(math.Float64bits(v)) }

// SetMaxDynamicShared lets the kernel use up to bytes of dynamic shared memory (above 48 KiB
// needs this opt-in).
func (k *Kernel) SetMaxDynamicShared(bytes int) error {
	defer k.g.bind()()
	return k.g.drv.check("cuFuncSetAttribute("+k.Name+")", first(purego.SyscallN(k.g.drv.funcSetAttribute, k.fn, 8 /* MAX_DYNAMIC_SHARED_SIZE_BYTES */, uintptr(bytes))))
}

// Launch queues the kernel on the device's stream with a 1-D grid of grid blocks of block threads.
func (k *Kernel) Launch(grid, block, shared int) error {
	if grid <= 0 {
		return nil
	}
	if shared > defaultSharedLimit && shared > k.shared {
		// Attention keeps rows of T floats (T > ~6000 needs more than 48 KiB), layernorm
		// backward 2*C floats: opt in, or the launch fails.
		if err := k.SetMaxDynamicShared(shared); err != nil {
			return fmt.Errorf("%w (%d bytes of shared memory per block; this GPU allows %d)", err, shared, k.g.Info.MaxSharedOpt)
		}
		k.shared = shared
	}
	defer k.g.launched(time.Now())
	defer k.g.bind()()
	r, _, _ := purego.SyscallN(k.g.drv.launchKernel, k.fn, uintptr(grid), 1, 1, uintptr(block), 1, 1,
		uintptr(shared), k.g.stream, uintptr(unsafe.Pointer(&k.params[0])), 0)
	if r != 0 {
		return k.g.drv.check("cuLaunchKernel("+k.Name+")", r)
	}
	return nil
}

// Blocks returns how many blocks of size block cover n items.
func Blocks(n int64, block int) int { return int((n + int64(block) - 1) / int64(block)) }
