package mpi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gpt2go/gpt2go/internal/dynlib"
)

// LibsEnv names a colon-separated list of folders searched for libmpi before all others.
const LibsEnv = "GPT2GO_MPI_LIBS"

// library returns libmpi's search: Open MPI's soname first, or MPICH's when MPICH's launcher
// started this process (the library must be the launcher's own).
func library() dynlib.Library {
	names := []string{"libmpi.so.40", "libmpi.so.12", "libmpich.so.12", "libmpi.so"}
	if os.Getenv("PMI_RANK") != "" && os.Getenv("OMPI_COMM_WORLD_RANK") == "" {
		names = []string{"libmpi.so.12", "libmpich.so.12", "libmpi.so.40", "libmpi.so"}
	}
	return dynlib.Library{What: "MPI", Names: names, Env: LibsEnv, Dirs: mpiDirs,
		Install: "install Open MPI (Debian: apt-get install openmpi-bin libopenmpi3) or MPICH, the same one whose mpirun starts the job"}
}

// mpiDirs are the folders after the environment's: next to the mpirun on $PATH (a custom
// install, HPC-X), Open MPI's $OPAL_PREFIX, the distributions' MPI folders, the system's.
func mpiDirs() []string {
	var dirs []string
	if mpirun, err := exec.LookPath("mpirun"); err == nil {
		if real, err := filepath.EvalSymlinks(mpirun); err == nil {
			mpirun = real
		}
		dirs = append(dirs, filepath.Join(filepath.Dir(filepath.Dir(mpirun)), "lib"))
	}
	if p := os.Getenv("OPAL_PREFIX"); p != "" {
		dirs = append(dirs, filepath.Join(p, "lib"))
	}
	dirs = append(dirs, "/usr/lib/x86_64-linux-gnu/openmpi/lib", "/usr/lib64/openmpi/lib", "/usr/lib64/mpich/lib",
		"/usr/lib/x86_64-linux-gnu/mpich/lib", "/opt/openmpi/lib", "/usr/local/lib")
	return append(dirs, dynlib.SystemDirs()...)
}

// Handles are the MPI objects the calls take. This is the one place where the two ABIs differ:
// Open MPI's handles are pointers to objects the library exports (MPI_COMM_WORLD is
// &ompi_mpi_comm_world), MPICH's are integer constants from its mpi.h.
type handles struct {
	flavor                   string // "Open MPI" or "MPICH"
	world, float, sum, byte_ uintptr
	errorsReturn             uintptr
}

// mpichHandles are MPICH's constants (mpi.h), shared by its derivatives (Intel MPI, MVAPICH,
// Cray MPICH).
var mpichHandles = handles{flavor: "MPICH", world: 0x44000000, float: 0x4c00040a, sum: 0x58000003,
	byte_: 0x4c00010d, errorsReturn: 0x54000001}

// findHandles tells the two ABIs apart by Open MPI's exported communicator.
func findHandles(h uintptr) (handles, error) {
	world, err := purego.Dlsym(h, "ompi_mpi_comm_world")
	if err != nil {
		return mpichHandles, nil
	}
	hs := handles{flavor: "Open MPI", world: world}
	for name, dst := range map[string]*uintptr{"ompi_mpi_float": &hs.float, "ompi_mpi_op_sum": &hs.sum,
		"ompi_mpi_byte": &hs.byte_, "ompi_mpi_errors_return": &hs.errorsReturn} {
		if *dst, err = purego.Dlsym(h, name); err != nil {
			return hs, fmt.Errorf("Open MPI lacks %s: %v", name, err)
		}
	}
	return hs, nil
}

// MPI_THREAD_* levels (the same in both ABIs).
const (
	threadSerialized = 2
)

// lib is libmpi's functions, resolved once.
type lib struct {
	path string
	handles
	initialized, finalized, initThread, finalize, commRank, commSize, commSetErrhandler, errorString,
	allreduce, reduceScatterBlock, alltoallv, allgather, allgatherv, bcast, barrier, abort uintptr
}

func loadLib() (*lib, error) {
	dl := library()
	h, path, err := dl.Open()
	if err != nil {
		return nil, err
	}
	l := &lib{path: path}
	if l.handles, err = findHandles(h); err != nil {
		return nil, err
	}
	err = dl.Symbols(h, map[string]*uintptr{
		"MPI_Initialized":          &l.initialized,
		"MPI_Finalized":            &l.finalized,
		"MPI_Init_thread":          &l.initThread,
		"MPI_Finalize":             &l.finalize,
		"MPI_Comm_rank":            &l.commRank,
		"MPI_Comm_size":            &l.commSize,
		"MPI_Comm_set_errhandler":  &l.commSetErrhandler,
		"MPI_Error_string":         &l.errorString,
		"MPI_Allreduce":            &l.allreduce,
		"MPI_Reduce_scatter_block": &l.reduceScatterBlock,
		"MPI_Alltoallv":            &l.alltoallv,
		"MPI_Allgather":            &l.allgather,
		"MPI_Allgatherv":           &l.allgatherv,
		"MPI_Bcast":                &l.bcast,
		"MPI_Barrier":              &l.barrier,
		"MPI_Abort":                &l.abort,
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// call runs an MPI function and turns its error code into a one-line error naming the call.
func (l *lib) call(name string, fn uintptr, args ...uintptr) error {
	code, _, _ := purego.SyscallN(fn, args...)
	if int32(code) == 0 {
		return nil
	}
	msg := make([]byte, 1024) // MPI_MAX_ERROR_STRING is 256 (Open MPI) or 512-1024 (MPICH)
	var n int32
	text := fmt.Sprintf("error %d", int32(code))
	if r, _, _ := purego.SyscallN(l.errorString, code, uintptr(unsafe.Pointer(&msg[0])), uintptr(unsafe.Pointer(&n))); r == 0 && n > 0 {
		text = string(msg[:min(int(n), len(msg))])
	}
	return fmt.Errorf("%s failed: %s", name, text)
}

// ptr is the address of x's first element, or nil for an empty slice (MPI reads nothing there).
func ptr[T any](x []T) uintptr {
	if len(x) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&x[0]))
}
