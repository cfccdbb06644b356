// Package mpi implements dist.Comm with MPI over host memory: the CPU backend's buffers, on one
// machine or many. libmpi is opened at run time with purego (no cgo): Open MPI's libmpi.so.40 or
// MPICH's libmpi.so.12, whichever belongs to the mpirun that started the job, found like the CUDA
// libraries (internal/dynlib; $GPT2GO_MPI_LIBS first).
//
// Sums are in rank order. MPI's own reductions (MPI_Allreduce) choose their algorithm by message
// size and world size, and a ring or a tree adds the ranks' values in another order for each part
// of the buffer, so its float32 sums differ in the last bits from a sum over micro-batches in one
// process. Here a reduction is an MPI_Alltoallv that brings every rank's copy of a shard to the
// shard's owner, which adds them in rank order, ((x0 + x1) + x2) + ..., with dist.SumRanks; an
// all-reduce then all-gathers the shards. That moves as many bytes per rank as a ring, 2(P-1)/P
// of the buffer, and needs a scratch of one chunk (Options.ChunkElems). Options.Native uses
// MPI_Allreduce and MPI_Reduce_scatter_block instead.
//
// Every collective finishes before it returns. The communicator is not safe for concurrent use.
package mpi

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/dist"
)

// Options configure a communicator.
type Options struct {
	// Timeout bounds every collective: one that has not finished by then (a rank died or hangs)
	// ends the job (dist.Watch). 0 waits forever.
	Timeout time.Duration
	// ChunkElems bounds the elements a reduction moves in one step (and its scratch memory,
	// 4 bytes each); 0 means 1<<22 (16 MiB).
	ChunkElems int
	// Native uses MPI's own reductions: possibly faster, but summed in the library's order.
	Native bool
}

// Comm is an MPI communicator over MPI_COMM_WORLD.
type Comm struct {
	l          *lib
	mem        backend.HostMemory
	opts       Options
	rank, size int
	owned      bool // we called MPI_Init_thread, so Close calls MPI_Finalize
	scratch    []float32
	counts     [4][]int32 // Alltoallv's send/recv counts and displacements
}

var (
	openMu sync.Mutex
	opened bool
)

// Open initializes MPI (once per process; MPI cannot start again after Close) and returns the
// communicator of all ranks, for buffers of mem (the CPU backend; nil for a communicator that
// only broadcasts bytes, as ShareID's does).
func Open(mem backend.HostMemory, opts Options) (*Comm, error) {
	openMu.Lock()
	defer openMu.Unlock()
	if opened {
		return nil, fmt.Errorf("mpi: already opened in this process (MPI starts once per process)")
	}
	l, err := loadLib()
	if err != nil {
		return nil, err
	}
	if opts.ChunkElems <= 0 {
		opts.ChunkElems = 1 << 22
	}
	c := &Comm{l: l, mem: mem, opts: opts}
	var flag int32
	if err := l.call("MPI_Finalized", l.finalized, ptr1(&flag)); err != nil {
		return nil, err
	}
	if flag != 0 {
		return nil, fmt.Errorf("mpi: MPI was finalized in this process and cannot start again")
	}
	if err := l.call("MPI_Initialized", l.initialized, ptr1(&flag)); err != nil {
		return nil, err
	}
	if flag == 0 {
		// Open MPI catches SIGSEGV and friends to print its own backtrace; the Go runtime needs
		// them (a nil dereference is a Go panic), so leave them to Go unless asked otherwise.
		if _, set := os.LookupEnv("OMPI_MCA_opal_signal"); !set {
			os.Setenv("OMPI_MCA_opal_signal", "")
		}
		var provided int32
		if err := l.call("MPI_Init_thread", l.initThread, 0, 0, threadSerialized, ptr1(&provided)); err != nil {
			return nil, fmt.Errorf("%w (was this process started by the mpirun of %s?)", err, l.path)
		}
		if provided < threadSerialized {
			// Goroutines move between OS threads, so calls may come from any thread (one at a time).
			return nil, fmt.Errorf("mpi: %s gives thread level %d; gpt2go needs MPI_THREAD_SERIALIZED (2)", l.path, provided)
		}
		c.owned = true
	}
	var rank, size int32
	err = l.call("MPI_Comm_set_errhandler", l.commSetErrhandler, l.world, l.errorsReturn)
	if err == nil {
		err = l.call("MPI_Comm_rank", l.commRank, l.world, ptr1(&rank))
	}
	if err == nil {
		err = l.call("MPI_Comm_size", l.commSize, l.world, ptr1(&size))
	}
	if err != nil {
		return nil, err
	}
	c.rank, c.size = int(rank), int(size)
	opened = true
	return c, nil
}

// Library says which MPI was loaded: "Open MPI (/usr/lib/x86_64-linux-gnu/libmpi.so.40)".
func (c *Comm) Library() string { return fmt.Sprintf("%s (%s)", c.l.flavor, c.l.path) }

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// maxCount is MPI's limit: counts and displacements are C ints.
const maxCount = 1<<31 - 1

// host returns buf's memory, checked for a collective.
func (c *Comm) host(op string, buf backend.Buf, sharded bool) ([]float32, error) {
	if err := dist.CheckBuf(op, buf, c.size, sharded); err != nil {
		return nil, err
	}
	if buf.Len() > maxCount {
		return nil, fmt.Errorf("%s: %d elements is more than MPI's %d", op, buf.Len(), maxCount)
	}
	return c.mem.HostFloats(buf), nil
}

// scratchN returns the scratch buffer with at least n elements.
func (c *Comm) scratchN(n int) []float32 {
	if len(c.scratch) < n {
		c.scratch = make([]float32, n)
	}
	return c.scratch[:n]
}

// watch runs f under the timeout, then keeps the scratch buffer alive (MPI had its address).
func (c *Comm) watch(what string, f func() error) error {
	err := dist.Watch(c.rank, what, c.opts.Timeout, f)
	runtime.KeepAlive(c.scratch)
	return err
}

func (c *Comm) AllReduce(buf backend.Buf, scale float32) error {
	x, err := c.host("all-reduce", buf, false)
	if err != nil || c.size == 1 {
		dist.Scale(x, scale)
		return err
	}
	return c.watch("all-reduce", func() error {
		chunk := max(c.opts.ChunkElems, c.size)
		for lo := 0; lo < len(x); lo += chunk {
			seg := x[lo:min(lo+chunk, len(x))]
			if c.opts.Native {
				tmp := c.scratchN(len(seg))
				copy(tmp, seg)
				if err := c.l.call("MPI_Allreduce", c.l.allreduce, ptr(tmp), ptr(seg), uintptr(len(seg)), c.l.float, c.l.sum, c.l.world); err != nil {
					return err
				}
				dist.Scale(seg, scale)
				continue
			}
			if err := c.allReduceSeg(seg, scale); err != nil {
				return err
			}
		}
		return nil
	})
}

// allReduceSeg all-reduces one segment in rank order: each rank sums its (uneven) shard of the
// segment from every rank's copy, then the shards are all-gathered.
func (c *Comm) allReduceSeg(seg []float32, scale float32) error {
	counts, displs := c.counts32(0), c.counts32(1)
	for r := range c.size {
		off, n := dist.Shard(len(seg), c.size, r)
		counts[r], displs[r] = int32(n), int32(min(off, len(seg)))
	}
	mine := int(counts[c.rank])
	own := seg[displs[c.rank] : int(displs[c.rank])+mine]
	if err := c.gatherShard(seg, counts, displs, mine); err != nil {
		return err
	}
	// The summed shard goes out from the scratch's first part (MPI's send and receive buffers
	// must not overlap); its other parts are no longer needed.
	parts := c.scratch[:c.size*mine]
	dist.SumRanks(own, parts, scale)
	send := c.scratchN(max(mine, 1))[:mine]
	copy(send, own)
	return c.l.call("MPI_Allgatherv", c.l.allgatherv, ptr(send), uintptr(mine), c.l.float, ptr(seg), ptr(counts), ptr(displs), c.l.float, c.l.world)
}

// gatherShard brings every rank's elements [displs[me], +mine) of seg to this rank, rank r's at
// scratch[r*mine:], with one MPI_Alltoallv (counts and displs say what goes to each rank).
func (c *Comm) gatherShard(seg []float32, counts, displs []int32, mine int) error {
	recvCounts, recvDispls := c.counts32(2), c.counts32(3)
	for r := range c.size {
		recvCounts[r], recvDispls[r] = int32(mine), int32(r*mine)
	}
	recv := c.scratchN(max(c.size*mine, 1))
	return c.l.call("MPI_Alltoallv", c.l.alltoallv, ptr(seg), ptr(counts), ptr(displs), c.l.float,
		ptr(recv), ptr(recvCounts), ptr(recvDispls), c.l.float, c.l.world)
}

func (c *Comm) counts32(i int) []int32 {
	if len(c.counts[i]) != c.size {
		c.counts[i] = make([]int32, c.size)
	}
	return c.counts[i]
}

func (c *Comm) ReduceScatter(buf backend.Buf, scale float32) error {
	x, err := c.host("reduce-scatter", buf, true)
	if err != nil || c.size == 1 {
		dist.Scale(x, scale)
		return err
	}
	s := len(x) / c.size
	own := x[c.rank*s : (c.rank+1)*s]
	return c.watch("reduce-scatter", func() error {
		if c.opts.Native {
			tmp := c.scratchN(max(s, 1))[:s]
			if err := c.l.call("MPI_Reduce_scatter_block", c.l.reduceScatterBlock, ptr(x), ptr(tmp), uintptr(s), c.l.float, c.l.sum, c.l.world); err != nil {
				return err
			}
			copy(own, tmp)
			dist.Scale(own, scale)
			return nil
		}
		// Part [a, b) of every shard at a time: rank r sends x[r*s+a : r*s+b] to rank r.
		step := max(c.opts.ChunkElems/c.size, 1)
		counts, displs := c.counts32(0), c.counts32(1)
		for a := 0; a < s; a += step {
			b := min(a+step, s)
			for r := range c.size {
				counts[r], displs[r] = int32(b-a), int32(r*s+a)
			}
			if err := c.gatherShard(x, counts, displs, b-a); err != nil {
				return err
			}
			dist.SumRanks(own[a:b], c.scratch[:c.size*(b-a)], scale)
		}
		return nil
	})
}

func (c *Comm) AllGather(buf backend.Buf) error {
	x, err := c.host("all-gather", buf, true)
	if err != nil || c.size == 1 {
		return err
	}
	s := len(x) / c.size
	return c.watch("all-gather", func() error {
		send := c.scratchN(max(s, 1))[:s]
		copy(send, x[c.rank*s:(c.rank+1)*s])
		return c.l.call("MPI_Allgather", c.l.allgather, ptr(send), uintptr(s), c.l.float, ptr(x), uintptr(s), c.l.float, c.l.world)
	})
}

func (c *Comm) Broadcast(buf backend.Buf, root int) error {
	x, err := c.host("broadcast", buf, false)
	if err == nil {
		err = dist.CheckRoot("broadcast", root, c.size)
	}
	if err != nil || c.size == 1 {
		return err
	}
	return c.watch("broadcast", func() error {
		return c.l.call("MPI_Bcast", c.l.bcast, ptr(x), uintptr(len(x)), c.l.float, uintptr(root), c.l.world)
	})
}

// BroadcastBytes copies root's b into b on every rank (MPI_Bcast of bytes): for what is not a
// backend's float32 buffer, such as NCCL's unique id. Every rank passes the same length.
func (c *Comm) BroadcastBytes(b []byte, root int) error {
	if err := dist.CheckRoot("broadcast", root, c.size); err != nil || c.size == 1 {
		return err
	}
	if len(b) > maxCount {
		return fmt.Errorf("broadcast: %d bytes is more than MPI's %d", len(b), maxCount)
	}
	return c.watch("broadcast", func() error {
		err := c.l.call("MPI_Bcast", c.l.bcast, ptr(b), uintptr(len(b)), c.l.byte_, uintptr(root), c.l.world)
		runtime.KeepAlive(b)
		return err
	})
}

// ShareID starts MPI, hands the id that newID makes on rank 0 to every rank with MPI_Bcast, and
// shuts MPI down again, returning the id and this process's rank and the world size: how the
// ranks of mpirun get NCCL's unique id, with no address for rank 0 (MASTER_ADDR) on any node.
// When newID fails, rank 0 returns its error and the others one saying so; timeout bounds the
// whole exchange (0: no bound). MPI cannot start again in this process afterwards.
func ShareID(newID func() ([]byte, error), timeout time.Duration) (id []byte, rank, size int, err error) {
	c, err := Open(nil, Options{Timeout: timeout})
	if err != nil {
		return nil, 0, 0, err
	}
	// One status byte (0: the id follows; 1: rank 0 failed), then dist.IDSize bytes.
	msg := make([]byte, 1+dist.IDSize)
	var made error
	if c.rank == 0 {
		id, made = newID()
		switch {
		case made != nil:
			msg[0] = 1
		case len(id) != dist.IDSize:
			msg[0], made = 1, fmt.Errorf("the id is %d bytes, want %d", len(id), dist.IDSize)
		default:
			copy(msg[1:], id)
		}
	}
	err = c.BroadcastBytes(msg, 0)
	if err == nil {
		err = c.Close()
	}
	switch {
	case made != nil:
		return nil, c.rank, c.size, made
	case err != nil:
		return nil, c.rank, c.size, err
	case msg[0] != 0:
		return nil, c.rank, c.size, fmt.Errorf("rank 0 could not make the id (its own error says why)")
	}
	return msg[1:], c.rank, c.size, nil
}

func (c *Comm) Barrier() error {
	return c.watch("barrier", func() error { return c.l.call("MPI_Barrier", c.l.barrier, c.l.world) })
}

// Abort ends every rank of the job with MPI_Abort and this process with code.
func (c *Comm) Abort(code int) {
	go func() { // MPI_Abort should not return; if it does or stalls, exit anyway
		time.Sleep(10 * time.Second)
		os.Exit(code)
	}()
	c.l.call("MPI_Abort", c.l.abort, c.l.world, uintptr(code))
	os.Exit(code)
}

// Close waits for every rank (MPI_Finalize is collective) and shuts MPI down.
func (c *Comm) Close() error {
	if !c.owned {
		return nil
	}
	c.owned = false
	return c.watch("finalize", func() error { return c.l.call("MPI_Finalize", c.l.finalize) })
}

func ptr1[T any](x *T) uintptr { return ptr(unsafe.Slice(x, 1)) }

var _ dist.Comm = (*Comm)(nil)

// SetTimeout replaces the bound on every wait (Options.Timeout) and returns the old one.
func (c *Comm) SetTimeout(d time.Duration) time.Duration {
	old := c.opts.Timeout
	c.opts.Timeout = d
	return old
}
