// Package cpu is the CPU implementation of backend.Backend: float32 buffers in host memory, every
// op parallelised over a persistent pool of goroutines. Every kernel partitions work so that each
// output element is computed by one goroutine in a fixed order, so results are bit-identical for
// any thread count.
//
// On amd64 with AVX2 and FMA the hot loops run hand-written assembly (*_amd64.s: the SGEMM
// microkernel and packing, attention's dot products and exp, the elementwise ops, AdamW), picked
// at run time; every other CPU runs the pure-Go versions, which the tests compare them against.
// The Go kernels are generic over float32 and float64: the Backend runs float32, and the tests run
// the same code in float64 to check gradients against finite differences.
//
// A Backend keeps scratch space for its ops, so one Backend must not run ops concurrently.
package cpu

import (
	"fmt"
	"io"
	"runtime"

	"github.com/gpt2go/gpt2go/backend"
)

// Float is the element type the kernels are written for.
type Float interface {
	~float32 | ~float64
}

// Backend runs the ops on the CPU with a fixed number of goroutines.
type Backend struct {
	pool
	gemm      gemmWorkspace[float32]
	partials  [sumSquaresChunks]float64
	blockSums []float64   // GradStats' block sums
	int8      int8Scratch // MatmulForwardInt8's quantized inputs
	verbose   io.Writer   // where CheckMemory reports the memory plan; nil: nowhere
}

var _ backend.Backend = (*Backend)(nil)

// New returns a CPU backend that uses up to threads goroutines per op; threads <= 0 means
// runtime.GOMAXPROCS(0). Its threads-1 worker goroutines start with the first parallel op and
// stop on Close, or when the Backend is garbage-collected.
func New(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	be := &Backend{pool: pool{threads: threads}}
	be.gemm = newGemmWorkspace[float32](threads)
	return be
}

// Name reports the backend and its thread count, e.g. "cpu (2 threads)".
func (be *Backend) Name() string {
	if be.threads == 1 {
		return "cpu (1 thread)"
	}
	return fmt.Sprintf("cpu (%d threads)", be.threads)
}

// floatBuf is a float buffer; a View is another floatBuf over the same array. A 16-bit buffer
// (dtype BF16 or F16) stores float32 values that are always exactly representable in its format:
// every op rounds what it stores there (see dtype.go).
type floatBuf struct {
	data  []float32
	dtype backend.DType
}

func (b *floatBuf) Len() int             { return len(b.data) }
func (b *floatBuf) DType() backend.DType { return b.dtype }

// int32Buf holds tokens and targets.
type int32Buf struct{ data []int32 }

func (b *int32Buf) Len() int             { return len(b.data) }
func (b *int32Buf) DType() backend.DType { return backend.I32 }

// Floats returns the float32 elements of b without copying; nil for a nil Buf. It panics if b is
// not a float buffer of this backend.
func Floats(b backend.Buf) []float32 {
	if b == nil {
		return nil
	}
	fb, ok := b.(*floatBuf)
	if !ok {
		panic(fmt.Sprintf("cpu: %T is not a cpu float buffer", b))
	}
	return fb.data
}

// Int32s returns the int32 elements of b without copying; nil for a nil Buf. It panics if b is not
// an int32 buffer of this backend.
func Int32s(b backend.Buf) []int32 {
	if b == nil {
		return nil
	}
	ib, ok := b.(*int32Buf)
	if !ok {
		panic(fmt.Sprintf("cpu: %T is not a cpu int32 buffer", b))
	}
	return ib.data
}

// Alloc returns a zeroed float32 buffer of n elements.
func (be *Backend) Alloc(n int) backend.Buf { return &floatBuf{data: make([]float32, n)} }

// AllocInt32 returns a zeroed int32 buffer of n elements.
func (be *Backend) AllocInt32(n int) backend.Buf { return &int32Buf{data: make([]int32, n)} }

// View returns elements [off, off+n) of b, sharing memory; b may be a float or an int32 buffer.
func (be *Backend) View(b backend.Buf, off, n int) backend.Buf {
	switch b := b.(type) {
	case *floatBuf:
		return &floatBuf{data: b.data[off : off+n : off+n], dtype: b.dtype}
	case *int32Buf:
		return &int32Buf{data: b.data[off : off+n : off+n]}
	}
	panic(fmt.Sprintf("cpu: View of %T", b))
}

// Upload copies src into dst[:len(src)], rounded to dst's dtype.
func (be *Backend) Upload(dst backend.Buf, src []float32) {
	copy(Floats(dst)[:len(src)], src)
	be.round(dst, len(src))
}

// UploadInt32 copies src into dst[:len(src)].
func (be *Backend) UploadInt32(dst backend.Buf, src []int32) { copy(Int32s(dst)[:len(src)], src) }

// Download copies src[:len(dst)] into dst.
func (be *Backend) Download(dst []float32, src backend.Buf) { copy(dst, Floats(src)[:len(dst)]) }

// Zero sets every element of b (float or int32) to 0.
func (be *Backend) Zero(b backend.Buf) {
	switch b := b.(type) {
	case *floatBuf:
		job := reuse[zeroJob](&be.pool)
		job.data = b.data
		be.forRanges(len(b.data), 1<<14, job)
		job.data = nil
	case *int32Buf:
		clear(b.data)
	default:
		panic(fmt.Sprintf("cpu: Zero of %T", b))
	}
}

// zeroJob clears data in parallel ranges (a single core's memclr runs at a fraction of the
// memory bandwidth that two or more reach).
type zeroJob struct{ data []float32 }

func (j *zeroJob) runRange(lo, hi int) { clear(j.data[lo:hi]) }

// Sync is a no-op: every CPU op has finished when it returns.
func (be *Backend) Sync() error { return nil }

// Close stops the backend's worker goroutines; it must not run during an op. The backend stays
// usable: a later op starts new workers.
func (be *Backend) Close() error {
	be.pool.close()
	return nil
}
