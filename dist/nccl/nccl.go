// Package nccl implements dist.Comm with NVIDIA's NCCL over the CUDA backend's device buffers, one
// GPU per rank. libnccl.so.2 is opened at run time with purego (no cgo), found by the CUDA
// libraries' rules (backend/cuda: $GPT2GO_CUDA_LIBS, $LD_LIBRARY_PATH, the CUDA toolkit, the
// system, and pip's nvidia-nccl-cu* wheels in site-packages/nvidia/nccl/lib).
//
// Collectives are queued on the backend's stream, in order with its ops, and return at once; the
// results are there for the ops queued after them, and on the host after Barrier (or the
// backend's Sync). Faults surface in Barrier and Close: an asynchronous NCCL error (a peer died,
// the network failed) is returned, after which the caller should Abort; a wait longer than
// Options.Timeout ends the job (dist.Watch). Since the host may also wait for the GPU elsewhere
// (reading a loss back), out of Watch's reach, a watchdog (dist.Watchdog) follows every queued
// collective through an event recorded behind it and ends the job when one has not finished
// within Options.Timeout of being queued, or when NCCL reports an asynchronous error.
//
// Sums are NCCL's: the same bits run to run for a given world size, topology and NCCL version
// (NCCL_ALGO and NCCL_PROTO pin the algorithm), but not in rank order for more than 2 ranks: a
// ring adds each chunk starting at a different rank. With 2 ranks every element is one float32
// addition, a + b = b + a, so the result equals a sum over 2 micro-batches in one process. A scale
// other than 1 is applied to each rank's value before the sum (ncclRedOpCreatePreMulSum), which
// equals scaling the sum only for powers of two.
package nccl

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/dist"
	"github.com/gpt2go/gpt2go/internal/dynlib"
)

// library is libnccl.so.2, searched for like the CUDA libraries.
func library() dynlib.Library {
	return cuda.Library("NCCL", []string{"libnccl.so.2", "libnccl.so"},
		"install NCCL: pip install nvidia-nccl-cu12 (or -cu13), or the CUDA repository's libnccl2")
}

// NCCL's constants (nccl.h).
const (
	ncclFloat32          = 7
	ncclSum              = 0
	ncclScalarHostImmed  = 1 // ncclScalarResidence_t: the scalar is read from host memory at the call
	ncclSuccess          = 0
	ncclInProgress       = 7
	ncclUniqueIDBytes    = dist.IDSize
	asyncErrorPollPeriod = 20 * time.Millisecond
)

// resultNames are ncclResult_t's names and what they usually mean, for when the library cannot
// say (ncclGetErrorString is used first).
var resultNames = map[uintptr]string{
	1: "ncclUnhandledCudaError (a CUDA call failed)",
	2: "ncclSystemError (a system call failed: out of memory, a socket)",
	3: "ncclInternalError (an NCCL bug, or memory corruption)",
	4: "ncclInvalidArgument (a bad pointer, count or type)",
	5: "ncclInvalidUsage (ranks called different collectives, or a bad rank)",
	6: "ncclRemoteError (a rank died or the network failed)",
	7: "ncclInProgress",
}

type uniqueID struct{ Internal [ncclUniqueIDBytes]byte }

// lib is libnccl's functions, resolved once.
type lib struct {
	path                                                              string
	version                                                           int
	getUniqueID, allReduce, reduceScatter, allGather, broadcast       uintptr
	getAsyncError, commAbort, commDestroy, getErrorString, getVersion uintptr
	redOpCreatePreMulSum, redOpDestroy, groupStart, groupEnd          uintptr
	commInitRank                                                      func(comm *uintptr, nranks int32, id uniqueID, rank int32) int32 // the id by value
}

func loadLib() (*lib, error) {
	dl := library()
	h, path, err := dl.Open()
	if err != nil {
		return nil, err
	}
	l := &lib{path: path}
	var initRank uintptr
	err = dl.Symbols(h, map[string]*uintptr{
		"ncclGetUniqueId":          &l.getUniqueID,
		"ncclCommInitRank":         &initRank,
		"ncclAllReduce":            &l.allReduce,
		"ncclReduceScatter":        &l.reduceScatter,
		"ncclAllGather":            &l.allGather,
		"ncclBroadcast":            &l.broadcast,
		"ncclCommGetAsyncError":    &l.getAsyncError,
		"ncclCommAbort":            &l.commAbort,
		"ncclCommDestroy":          &l.commDestroy,
		"ncclGetErrorString":       &l.getErrorString,
		"ncclGetVersion":           &l.getVersion,
		"ncclRedOpCreatePreMulSum": &l.redOpCreatePreMulSum, // NCCL 2.11
		"ncclRedOpDestroy":         &l.redOpDestroy,
		"ncclGroupStart":           &l.groupStart,
		"ncclGroupEnd":             &l.groupEnd,
	})
	if err != nil {
		return nil, err
	}
	purego.RegisterFunc(&l.commInitRank, initRank)
	var v int32
	if err := l.check("ncclGetVersion", first(purego.SyscallN(l.getVersion, uintptr(unsafe.Pointer(&v))))); err != nil {
		return nil, err
	}
	l.version = int(v)
	return l, nil
}

func first(r1, _, _ uintptr) uintptr { return r1 }

// check turns a failed ncclResult_t of call into a one-line error.
func (l *lib) check(call string, code uintptr) error {
	if code == ncclSuccess {
		return nil
	}
	text := ""
	if l != nil && l.getErrorString != 0 {
		if s, _, _ := purego.SyscallN(l.getErrorString, code); s != 0 {
			text = goString(s)
		}
	}
	return resultError(call, code, text)
}

func resultError(call string, code uintptr, text string) error {
	name, ok := resultNames[code]
	if !ok {
		name = fmt.Sprintf("ncclResult %d", code)
	}
	if text != "" {
		return fmt.Errorf("%s failed: %s: %s", call, name, text)
	}
	return fmt.Errorf("%s failed: %s", call, name)
}

func goString(p uintptr) string {
	base := unsafe.Add(unsafe.Pointer(nil), p) // C memory, never moved by Go's GC
	n := 0
	for n < 4096 && *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// Options configure a communicator.
type Options struct {
	// Timeout bounds Barrier and Close: a wait longer than this (a rank died or hangs) ends the
	// job. 0 waits forever.
	Timeout time.Duration
	// IDTimeout bounds the exchange of NCCL's id at Open (rank 0 waiting for the others, the
	// others for rank 0); 0 means 5 minutes.
	IDTimeout time.Duration
}

// Comm is an NCCL communicator: one rank's GPU.
type Comm struct {
	l          *lib
	be         *cuda.Backend
	dev        *cuda.Device
	comm       uintptr
	rank, size int
	opts       Options
	one        backend.Buf // Barrier's buffer
	watch      *dist.Watchdog
	evMu       sync.Mutex
	events     []uintptr // the watchdog's events, free for reuse
	abortOnce  sync.Once
	aborted    atomic.Bool // Abort has begun: the communicator is not to be used
}

// Open starts NCCL for rank env.Rank of env.Size on be's GPU: rank 0 makes the id and hands it
// to the others over TCP (dist.ExchangeID), then every rank joins the communicator.
func Open(be *cuda.Backend, env dist.Env, opts Options) (*Comm, error) {
	l, err := loadLib()
	if err != nil {
		return nil, err
	}
	if opts.IDTimeout <= 0 {
		opts.IDTimeout = 5 * time.Minute
	}
	id, err := dist.ExchangeID(env, l.newID, opts.IDTimeout)
	if err != nil {
		return nil, err
	}
	return open(l, be, env.Rank, env.Size, id, opts)
}

// NewID makes the unique id of a new communicator (ncclGetUniqueId), on the rank that hands it to
// the others by its own means (mpi.ShareID), for OpenWithID.
func NewID() ([]byte, error) {
	l, err := loadLib()
	if err != nil {
		return nil, err
	}
	return l.newID()
}

func (l *lib) newID() ([]byte, error) {
	var id uniqueID
	if err := l.check("ncclGetUniqueId", first(purego.SyscallN(l.getUniqueID, uintptr(unsafe.Pointer(&id))))); err != nil {
		return nil, err
	}
	return id.Internal[:], nil
}

// OpenWithID joins the communicator of size ranks named by id (made by rank 0's NewID and sent
// by other means, such as MPI: mpi.ShareID).
func OpenWithID(be *cuda.Backend, rank, size int, id []byte, opts Options) (*Comm, error) {
	l, err := loadLib()
	if err != nil {
		return nil, err
	}
	return open(l, be, rank, size, id, opts)
}

func open(l *lib, be *cuda.Backend, rank, size int, id []byte, opts Options) (*Comm, error) {
	if len(id) != ncclUniqueIDBytes {
		return nil, fmt.Errorf("nccl: the id is %d bytes, want %d", len(id), ncclUniqueIDBytes)
	}
	c := &Comm{l: l, be: be, dev: be.Device(), rank: rank, size: size, opts: opts}
	var uid uniqueID
	copy(uid.Internal[:], id)
	unbind := c.dev.Bind()
	code := l.commInitRank(&c.comm, int32(size), uid, int32(rank))
	unbind()
	if err := l.check("ncclCommInitRank", uintptr(uint32(code))); err != nil {
		return nil, fmt.Errorf("rank %d of %d: %w (NCCL %s)", rank, size, err, c.Version())
	}
	c.one = be.Alloc(1)
	c.watch = dist.NewWatchdog(rank, asyncErrorPollPeriod, c.asyncError, c.Abort)
	return c, nil
}

// watched has the watchdog follow the collective just queued on stream (the main or the side
// stream), named what, through an event recorded behind it.
func (c *Comm) watched(what string, stream uintptr) error {
	c.evMu.Lock()
	var e uintptr
	if n := len(c.events); n > 0 {
		e, c.events = c.events[n-1], c.events[:n-1]
	}
	c.evMu.Unlock()
	if e == 0 {
		var err error
		if e, err = c.dev.NewEvent(); err != nil {
			return err
		}
	}
	release := func() {
		c.evMu.Lock()
		c.events = append(c.events, e)
		c.evMu.Unlock()
	}
	if err := c.dev.RecordOn(e, stream); err != nil {
		release()
		return err
	}
	c.watch.Add(what, c.opts.Timeout, func() (bool, error) { return c.dev.EventDone(e) }, release)
	return nil
}

// Version is the NCCL version and library, e.g. "2.21.5 (/usr/lib/.../libnccl.so.2)".
func (c *Comm) Version() string {
	v := c.l.version
	if v >= 10000 { // NCCL_VERSION(X,Y,Z) is X*10000+Y*100+Z from 2.9 on
		return fmt.Sprintf("%d.%d.%d (%s)", v/10000, v/100%100, v%100, c.l.path)
	}
	return fmt.Sprintf("%d.%d.%d (%s)", v/1000, v/100%10, v%100, c.l.path)
}

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// device returns buf's device address, checked for a collective.
func (c *Comm) device(op string, buf backend.Buf, sharded bool) (uintptr, error) {
	if err := dist.CheckBuf(op, buf, c.size, sharded); err != nil {
		return 0, err
	}
	p, ok := cuda.DevicePointer(buf)
	if !ok {
		return 0, fmt.Errorf("%s: %T is not a CUDA backend buffer", op, buf)
	}
	return p, nil
}

// errAborted is what a collective called during an abort returns.
var errAborted = errors.New("nccl: the communicator was aborted")

// enqueue queues one collective with op (a reduction for scale, or none) on the stream.
func (c *Comm) enqueue(name string, scale float32, call func(op uintptr) uintptr) error {
	if err := c.asyncError(); err != nil {
		return err
	}
	defer c.dev.Bind()()
	op := uintptr(ncclSum)
	if scale != 1 {
		var custom int32 // ncclRedOp_t
		s := scale
		if err := c.l.check("ncclRedOpCreatePreMulSum", first(purego.SyscallN(c.l.redOpCreatePreMulSum,
			uintptr(unsafe.Pointer(&custom)), uintptr(unsafe.Pointer(&s)), ncclFloat32, ncclScalarHostImmed, c.comm))); err != nil {
			return err
		}
		runtime.KeepAlive(&s)
		op = uintptr(custom)
		defer purego.SyscallN(c.l.redOpDestroy, op, c.comm) // allowed once the call is queued
	}
	if err := c.l.check(name, call(op)); err != nil {
		return err
	}
	return c.watched(name, c.dev.Stream())
}

func (c *Comm) AllReduce(buf backend.Buf, scale float32) error {
	p, err := c.device("all-reduce", buf, false)
	if err != nil {
		return err
	}
	return c.enqueue("ncclAllReduce", scale, func(op uintptr) uintptr {
		return first(purego.SyscallN(c.l.allReduce, p, p, uintptr(buf.Len()), ncclFloat32, op, c.comm, c.dev.Stream()))
	})
}

// AllReduceBeside (dist.Overlapper) queues the sums of bufs over the ranks, in one NCCL group, on
// the device's side stream: behind the ops queued so far (cuda.Device.Fork) and beside the ops
// queued after, which must leave bufs alone until JoinBeside. DDP hands it each layer's gradient
// as backward finishes the layer. Each element is summed as AllReduce sums it (a group changes
// how NCCL schedules the calls, not the arithmetic of each).
func (c *Comm) AllReduceBeside(bufs []backend.Buf) error {
	ptrs := make([]uintptr, len(bufs))
	for i, b := range bufs {
		p, err := c.device("all-reduce", b, false)
		if err != nil {
			return err
		}
		ptrs[i] = p
	}
	if len(bufs) == 0 {
		return nil
	}
	if err := c.asyncError(); err != nil {
		return err
	}
	side, err := c.dev.SideStream()
	if err != nil {
		return err
	}
	if err := c.dev.Fork(); err != nil {
		return err
	}
	defer c.dev.Bind()()
	if err := c.l.check("ncclGroupStart", first(purego.SyscallN(c.l.groupStart))); err != nil {
		return err
	}
	for i, p := range ptrs {
		if err := c.l.check("ncclAllReduce", first(purego.SyscallN(c.l.allReduce, p, p, uintptr(bufs[i].Len()), ncclFloat32, ncclSum, c.comm, side))); err != nil {
			purego.SyscallN(c.l.groupEnd)
			return err
		}
	}
	if err := c.l.check("ncclGroupEnd", first(purego.SyscallN(c.l.groupEnd))); err != nil {
		return err
	}
	return c.watched(fmt.Sprintf("ncclAllReduce of %d tensors beside backward", len(bufs)), side)
}

// JoinBeside (dist.Overlapper) makes the ops queued from now on wait for every AllReduceBeside
// queued before.
func (c *Comm) JoinBeside() error { return c.dev.Join() }

// ReduceScatter is NCCL's in place: the receive buffer is the rank's own shard of the send buffer.
func (c *Comm) ReduceScatter(buf backend.Buf, scale float32) error {
	p, err := c.device("reduce-scatter", buf, true)
	if err != nil {
		return err
	}
	s := uintptr(buf.Len() / c.size)
	return c.enqueue("ncclReduceScatter", scale, func(op uintptr) uintptr {
		return first(purego.SyscallN(c.l.reduceScatter, p, p+uintptr(c.rank)*s*4, s, ncclFloat32, op, c.comm, c.dev.Stream()))
	})
}

// AllGather is NCCL's in place: the send buffer is the rank's own shard of the receive buffer.
func (c *Comm) AllGather(buf backend.Buf) error {
	p, err := c.device("all-gather", buf, true)
	if err != nil {
		return err
	}
	s := uintptr(buf.Len() / c.size)
	return c.enqueue("ncclAllGather", 1, func(uintptr) uintptr {
		return first(purego.SyscallN(c.l.allGather, p+uintptr(c.rank)*s*4, p, s, ncclFloat32, c.comm, c.dev.Stream()))
	})
}

func (c *Comm) Broadcast(buf backend.Buf, root int) error {
	p, err := c.device("broadcast", buf, false)
	if err == nil {
		err = dist.CheckRoot("broadcast", root, c.size)
	}
	if err != nil {
		return err
	}
	return c.enqueue("ncclBroadcast", 1, func(uintptr) uintptr {
		return first(purego.SyscallN(c.l.broadcast, p, p, uintptr(buf.Len()), ncclFloat32, uintptr(root), c.comm, c.dev.Stream()))
	})
}

// Barrier all-reduces one element and waits for the stream: every rank has arrived and every
// collective queued before has finished.
func (c *Comm) Barrier() error {
	if err := c.AllReduce(c.one, 1); err != nil {
		return err
	}
	return c.wait("barrier")
}

// wait waits for the stream while watching for NCCL's asynchronous errors.
func (c *Comm) wait(what string) error {
	done := make(chan error, 1)
	go func() { done <- c.dev.Sync() }()
	return dist.Watch(c.rank, what, c.opts.Timeout, func() error {
		tick := time.NewTicker(asyncErrorPollPeriod)
		defer tick.Stop()
		for {
			select {
			case err := <-done:
				if err != nil {
					return err
				}
				return c.asyncError()
			case <-tick.C:
				if err := c.asyncError(); err != nil {
					return err // the caller aborts, which ends the stuck kernels
				}
			}
		}
	})
}

// asyncError returns the communicator's asynchronous error, if any (errAborted once Abort has
// begun: the handle is not to be used).
func (c *Comm) asyncError() error {
	if c.aborted.Load() {
		return errAborted
	}
	var res int32
	if err := c.l.check("ncclCommGetAsyncError", first(purego.SyscallN(c.l.getAsyncError, c.comm, uintptr(unsafe.Pointer(&res))))); err != nil {
		return err
	}
	if res != ncclSuccess && res != ncclInProgress {
		return fmt.Errorf("rank %d: %w", c.rank, c.l.check("NCCL", uintptr(res)))
	}
	return nil
}

// Abort aborts the communicator's pending collectives (ncclCommAbort) and exits with code; the
// launcher then ends the other ranks. It runs once: the main goroutine and the watchdog may both
// come here, and a second caller waits for the first (which exits). The watchdog is halted
// first, so that nothing queries the communicator while it goes.
func (c *Comm) Abort(code int) {
	c.abortOnce.Do(func() {
		c.aborted.Store(true)
		go func() { // ncclCommAbort should not block; exit anyway if it does
			time.Sleep(10 * time.Second)
			exit(code)
		}()
		if c.watch != nil {
			c.watch.Halt()
		}
		if c.comm != 0 {
			purego.SyscallN(c.l.commAbort, c.comm)
		}
		exit(code)
	})
}

// Close waits for the queued collectives and destroys the communicator.
func (c *Comm) Close() error {
	if c.comm == 0 {
		return nil
	}
	if err := c.wait("close"); err != nil {
		return err
	}
	c.watch.Close() // before the communicator goes: it queries it
	defer c.dev.Bind()()
	err := c.l.check("ncclCommDestroy", first(purego.SyscallN(c.l.commDestroy, c.comm)))
	c.comm = 0
	return err
}

// exit ends the process; tests replace it.
var exit = os.Exit

var _ dist.Comm = (*Comm)(nil)

// SetTimeout replaces the bound on every wait (Options.Timeout) and returns the old one.
func (c *Comm) SetTimeout(d time.Duration) time.Duration {
	old := c.opts.Timeout
	c.opts.Timeout = d
	return old
}
