// Package dist is the communication layer for data-parallel training: one small interface, Comm,
// over flat float32 buffers, beside the backend the way backend.Backend is beside the model. Two
// packages implement it for several processes, dist/mpi (Open MPI or MPICH, host memory, the CPU
// backend) and dist/nccl (NVIDIA's NCCL, device memory, the CUDA backend); Single is the
// one-process communicator, so a trainer can always call it.
//
// This package also holds what every launcher-started job needs: the rank environment (Env, from
// torchrun, SLURM, Open MPI's mpirun or MPICH's), and the exchange of NCCL's unique id from rank 0
// to the other ranks over TCP (ServeID, FetchID, ExchangeID; under mpirun, dist/mpi's ShareID
// sends it with MPI_Bcast instead).
//
// The trainer's side (train/dist.go) uses it for DDP (an all-reduce of the gradient, on CPU ranks
// layer by layer while backward runs: gpt.Trainable.StreamGrads), ZeRO-1 (reduce-scatter of the
// gradient, AdamW on the rank's shard, all-gather of the parameters), split validation and rank
// 0's solo work; cmd/gpt2go opens the communicator for the launcher that started the job.
//
// Conventions for every Comm method:
//   - Buffers are flat float32 backend.Buf owned by the backend that the communicator was made for
//     (host memory for MPI, device memory for NCCL); every rank passes buffers of the same length.
//   - Sums are in float32, and their order is part of each implementation's contract (see its
//     package comment): for the host implementations it is rank order, ((x0 + x1) + x2) + ...,
//     which is what gradient accumulation over micro-batches does in one process.
//   - Sharded collectives work in place on a buffer of Size equal shards: rank r owns elements
//     [r*S, (r+1)*S), S = len/Size. A length that does not divide by the world size is padded:
//     allocate Padded(n, size) elements, keep the padding zero, and Shard says which real
//     elements a rank owns (the last ranks may own fewer, or none). Equal shards are what NCCL's
//     and MPI's fastest collectives need, and ZeRO's shard of the parameters, the gradients and
//     both AdamW moments is then one view of each flat buffer.
//   - Errors returned are misuse (a wrong length, a bad root): one line. A peer
//     that dies or hangs is a fault, not an error: the job ends (see Abort) instead of hanging.
package dist

import (
	"fmt"
	"os"
	"time"

	"github.com/gpt2go/gpt2go/backend"
)

// Comm is a communicator: Size processes (ranks) that call the same collectives in the same order.
type Comm interface {
	// Rank is this process's index, 0..Size-1.
	Rank() int
	// Size is the number of ranks.
	Size() int

	// AllReduce replaces buf(N) on every rank by scale * (the sum over ranks of buf), summed in
	// float32. scale 1 is a sum, 1/Size an average (exact only when Size is a power of two; for
	// results that must not depend on it, scale the loss instead and sum).
	AllReduce(buf backend.Buf, scale float32) error
	// ReduceScatter sums buf(Size*S) over ranks, shard by shard: afterwards the rank's own shard
	// buf[Rank*S:(Rank+1)*S] holds scale * (the sum over ranks of that shard); the other shards
	// are left undefined. buf's length must divide by Size (see Padded).
	ReduceScatter(buf backend.Buf, scale float32) error
	// AllGather copies every rank's own shard buf[r*S:(r+1)*S] into the same place on every rank,
	// so that all ranks end with the whole buf(Size*S). buf's length must divide by Size.
	AllGather(buf backend.Buf) error
	// Broadcast copies root's buf(N) into buf on every rank.
	Broadcast(buf backend.Buf, root int) error
	// Barrier returns when every rank has called it and every collective this rank queued before
	// it has finished (NCCL queues collectives on the backend's stream; MPI finishes each one
	// before returning).
	Barrier() error

	// Abort ends the job after a fault without waiting for the other ranks: it tears the
	// communicator down, makes sure no rank is left waiting in a collective (MPI_Abort ends them
	// all; with NCCL, the launcher ends them when this process exits non-zero) and exits this
	// process with status code. It does not return.
	Abort(code int)
	// Close waits for queued collectives and frees the communicator; every rank calls it.
	Close() error
}

// Overlapper is implemented by communicators whose all-reduces can run beside the backend's ops
// rather than in order with them (NCCL on a second CUDA stream), so that DDP sums each layer's
// gradient while backward computes the layers below without a goroutine waiting in the
// collective (what a host-memory communicator such as MPI needs instead).
type Overlapper interface {
	// AllReduceBeside queues AllReduce(buf, 1) of each of bufs behind the ops queued so far,
	// without holding up the ops queued after it, which must not touch bufs until JoinBeside.
	AllReduceBeside(bufs []backend.Buf) error
	// JoinBeside makes the ops queued after it wait for every AllReduceBeside before it.
	JoinBeside() error
}

// ExitTimeout is the exit status of a process whose communicator timed out.
const ExitTimeout = 124

// ShardLen is the length S of each of size equal shards covering n elements: ceil(n/size).
func ShardLen(n, size int) int { return (n + size - 1) / size }

// Padded is n rounded up to a multiple of size: the length to allocate for a sharded buffer.
func Padded(n, size int) int { return ShardLen(n, size) * size }

// Shard returns the first element and the number of real elements (not padding) that rank owns
// of n elements split into size equal shards of ShardLen(n, size). Ranks past the end of n own 0.
func Shard(n, size, rank int) (off, count int) {
	s := ShardLen(n, size)
	off = rank * s
	return off, max(0, min(s, n-off))
}

// CheckBuf returns a one-line error when b cannot take part in a collective of size ranks: a
// sharded collective's buffer whose length does not divide by the world size.
func CheckBuf(op string, b backend.Buf, size int, sharded bool) error {
	if b == nil {
		return fmt.Errorf("%s: nil buffer", op)
	}
	// Sums of 16-bit values would need rounding on the wire that nothing defines yet; gradients
	// are fp32 by default (see docs/mixed-precision.md).
	if dt := b.DType(); dt != backend.F32 {
		return fmt.Errorf("%s: a %s buffer; collectives run on fp32 buffers only (use --grad-precision fp32)", op, dt)
	}
	if sharded && b.Len()%size != 0 {
		return fmt.Errorf("%s: a buffer of %d elements does not split into %d equal shards; allocate dist.Padded(n, %d) = %d and keep the padding zero",
			op, b.Len(), size, size, Padded(b.Len(), size))
	}
	return nil
}

// CheckRoot returns a one-line error when root is not a rank of a communicator of size ranks.
func CheckRoot(op string, root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("%s: root %d is not a rank (0..%d)", op, root, size-1)
	}
	return nil
}

// exit ends the process; tests replace it.
var exit = os.Exit

// TimeoutSetter is implemented by communicators whose waits are bounded by a timeout (dist/mpi,
// dist/nccl): SetTimeout replaces the bound and returns the old one.
type TimeoutSetter interface {
	SetTimeout(d time.Duration) (old time.Duration)
}

// BarrierWithin is c.Barrier bounded by d instead of the communicator's own timeout: for ranks
// that wait while rank 0 works alone (a checkpoint, a sample), which may take longer than any
// collective should.
func BarrierWithin(c Comm, d time.Duration) error {
	if ts, ok := c.(TimeoutSetter); ok {
		old := ts.SetTimeout(d)
		defer ts.SetTimeout(old)
	}
	return c.Barrier()
}
