package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/dist"
	"github.com/gpt2go/gpt2go/dist/mpi"
	"github.com/gpt2go/gpt2go/dist/nccl"
)

// distFlags are train's data-parallel flags. The ranks themselves come from the launcher's
// environment (dist.FromEnv): torchrun, mpirun (Open MPI, MPICH) or srun.
type distFlags struct {
	zero    int
	overlap bool
	timeout time.Duration
	env     dist.Env
	comm    dist.Comm // nil in a job of one process
}

func (d *distFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&d.zero, "zero", 0, "data parallel: 0 (DDP: every rank keeps the whole optimizer state) or 1 (ZeRO-1: each rank keeps and updates 1/N of the AdamW moments, and with --precision bf16|fp16 of the fp32 master weights)")
	fs.BoolVar(&d.overlap, "overlap-grads", true, "data parallel, DDP: all-reduce each layer's gradient while backward computes the layers below it (CPU ranks: on a goroutine; GPUs: NCCL on a second stream), false: the whole gradient after backward; the same bits on CPU ranks and on 2 GPUs (with more, NCCL may order each sum differently)")
	fs.DurationVar(&d.timeout, "dist-timeout", time.Minute, "data parallel: end the job when a collective has waited this long for a rank that died or hangs (0 = wait forever)")
}

// readEnv reads the rank environment and checks the flags.
func (d *distFlags) readEnv() error {
	if d.zero != 0 && d.zero != 1 {
		return fmt.Errorf("--zero %d: use 0 (DDP) or 1 (ZeRO-1)", d.zero)
	}
	if d.timeout < 0 {
		return fmt.Errorf("--dist-timeout must be >= 0, got %v", d.timeout)
	}
	env, err := dist.FromEnv()
	if err != nil {
		return err
	}
	d.env = env
	return nil
}

// open starts the job's communicator when a launcher started the process (one rank or more):
// MPI for the CPU backend, NCCL for a GPU.
func (d *distFlags) open(be backend.Backend, stderr io.Writer) error {
	if d.env.Launcher == "" {
		return nil
	}
	var err error
	switch b := be.(type) {
	case *cuda.Backend:
		var c *nccl.Comm
		opts := nccl.Options{Timeout: d.timeout}
		if d.env.Launcher == "openmpi" || d.env.Launcher == "mpich" {
			// mpirun's ranks get NCCL's id over MPI_Bcast: no MASTER_ADDR, on any number of nodes.
			var id []byte
			var rank, size int
			if id, rank, size, err = mpi.ShareID(nccl.NewID, idTimeout); err == nil {
				c, err = nccl.OpenWithID(b, rank, size, id, opts)
			}
		} else {
			c, err = nccl.Open(b, d.env, opts)
		}
		if err == nil {
			d.comm = c
			if d.env.Rank == 0 {
				fmt.Fprintf(stderr, "data parallel: NCCL %s, %d ranks (%s)\n", c.Version(), d.env.Size, d.env.Launcher)
			}
		}
	case backend.HostMemory:
		if d.env.Launcher != "openmpi" && d.env.Launcher != "mpich" {
			if !d.env.Distributed() {
				return nil // one CPU rank from torchrun or srun: a plain process
			}
			return fmt.Errorf("%d ranks from %s on the CPU: CPU ranks talk over MPI; start them with mpirun -np %d gpt2go train ...", d.env.Size, d.env.Launcher, d.env.Size)
		}
		var c *mpi.Comm
		if c, err = mpi.Open(b, mpi.Options{Timeout: d.timeout}); err == nil {
			d.comm = c
			if c.Rank() == 0 {
				fmt.Fprintf(stderr, "data parallel: %s, %d ranks\n", c.Library(), c.Size())
			}
		}
	default:
		return fmt.Errorf("data parallel training needs the CPU or the CUDA backend, not %s", be.Name())
	}
	if err != nil {
		return rankError{d.env.Rank, d.env.Size, err}
	}
	return nil
}

// rankError is one rank's error in a job started by a launcher: "rank r of n: err". An error that
// carries it already names its rank (onRank leaves it as it is).
type rankError struct {
	rank, size int
	err        error
}

func (e rankError) Error() string { return fmt.Sprintf("rank %d of %d: %v", e.rank, e.size, e.err) }
func (e rankError) Unwrap() error { return e.err }

// inJob names this process's rank in err when a launcher started it as one rank of several: an
// error before the communicator opens (a flag, --resume, the device) is printed by every rank,
// and the lines should say whose they are, as later ones do.
func inJob(err error) error {
	env, envErr := dist.FromEnv()
	if envErr != nil { // the error is most likely about the environment itself
		return err
	}
	return onRank(env, err)
}

// onRank names env's rank in err when the job has more than one process, unless err already does.
func onRank(env dist.Env, err error) error {
	var named rankError
	if err == nil || !env.Distributed() || errors.As(err, &named) {
		return err
	}
	return rankError{env.Rank, env.Size, err}
}

// idTimeout bounds the hand-out of NCCL's id over MPI, as nccl.Options.IDTimeout's default does
// over TCP: ranks start at different times.
const idTimeout = 5 * time.Minute

// rank0First runs f on rank 0, then on the other ranks once rank 0 is done (data preparation into
// a shared cache: one writer). In a job of one process it just runs f.
func (d *distFlags) rank0First(f func() error) error {
	if d.comm == nil {
		return f()
	}
	if d.comm.Rank() == 0 {
		if err := f(); err != nil {
			return err
		}
	}
	if err := dist.BarrierWithin(d.comm, 30*time.Minute); err != nil {
		return err
	}
	if d.comm.Rank() != 0 {
		return f()
	}
	return nil
}

// panicked reports this rank's panic r in one line naming the rank (with the stack under
// GPT2GO_DEBUG), as run's recover does for a process of its own, and ends the job at once with
// status 2: the other ranks are waiting, or will wait, on this one in a collective.
func (d *distFlags) panicked(r any, stderr io.Writer) {
	if os.Getenv("GPT2GO_DEBUG") != "" {
		fmt.Fprintf(stderr, "gpt2go train: rank %d of %d: internal error: %v\n%s", d.comm.Rank(), d.comm.Size(), r, debug.Stack())
	} else {
		fmt.Fprintf(stderr, "gpt2go train: rank %d of %d: internal error: %v (set GPT2GO_DEBUG=1 for a stack trace and please report it)\n", d.comm.Rank(), d.comm.Size(), r)
	}
	d.comm.Abort(2)
}

// fail ends a data-parallel job after this rank's error: one line naming the rank, then every
// rank stops (Abort does not return). In a job of one process it returns err.
func (d *distFlags) fail(err error, stderr io.Writer) error {
	if d.comm == nil || err == nil {
		return err
	}
	fmt.Fprintf(stderr, "gpt2go train: rank %d of %d: %v\n", d.comm.Rank(), d.comm.Size(), err)
	d.comm.Abort(1)
	return err
}
