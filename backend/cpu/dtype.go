package cpu

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// The CPU emulates bf16 and fp16: a 16-bit buffer is a float32 array whose values are always
// exactly representable in its format, so every kernel reads it as float32 unchanged, and every op
// rounds its outputs to their buffers' formats (round) once it has written them, which is when a
// GPU kernel that computes in fp32 registers rounds what it stores. Keeping float32 storage lets
// every kernel, the assembly included, run unchanged; rounding is one extra pass over an op's
// outputs, over memory the op has just written.

// AllocDType returns a zeroed buffer of n elements holding dt's values (stored as float32).
func (be *Backend) AllocDType(n int, dt backend.DType) backend.Buf {
	if err := be.CheckDType(dt); err != nil {
		panic(err)
	}
	return &floatBuf{data: make([]float32, n), dtype: dt}
}

// CheckDType accepts fp32, bf16 and fp16.
func (be *Backend) CheckDType(dt backend.DType) error {
	switch dt {
	case backend.F32, backend.BF16, backend.F16:
		return nil
	}
	return fmt.Errorf("cpu: cannot store %v as floats", dt)
}

// ElementBytes is 4 for every format: 16-bit buffers are float32 arrays here.
func (be *Backend) ElementBytes(backend.DType) int { return 4 }

var _ backend.ElementSizer = (*Backend)(nil)

// Words is b as an fp32 buffer over the same float32 array (backend.WordViewer).
func (be *Backend) Words(b backend.Buf) backend.Buf {
	return &floatBuf{data: Floats(b), dtype: backend.F32}
}

var _ backend.WordViewer = (*Backend)(nil)

// round rounds b[:n] in place to b's dtype; float32 buffers (and nil) are left alone, so fp32
// runs are unchanged.
func (be *Backend) round(b backend.Buf, n int) {
	fb, ok := b.(*floatBuf)
	if !ok || fb.dtype == backend.F32 || n == 0 {
		return
	}
	job := reuse[convertJob](&be.pool)
	*job = convertJob{dst: fb.data[:n], src: fb.data[:n], dtype: fb.dtype}
	be.forRanges(n, 1<<14, job)
	*job = convertJob{}
}

// Convert writes dst(N) = src(N) in dst's dtype, rounding to nearest even (seed 0) or
// stochastically with the bits backend.StochasticBits(seed, i).
func (be *Backend) Convert(dst, src backend.Buf, N int, seed uint64) {
	d, s := Floats(dst)[:N], Floats(src)[:N]
	dt := dst.DType()
	if dt == backend.F32 {
		copy(d, s)
		return
	}
	job := reuse[convertJob](&be.pool)
	*job = convertJob{dst: d, src: s, dtype: dt, seed: seed}
	be.forRanges(N, 1<<14, job)
	*job = convertJob{}
}

// ConvertSeeded is Convert with the seed's bits read from seed(backend.SeedLen).
func (be *Backend) ConvertSeeded(dst, src backend.Buf, N int, seed backend.Buf) {
	be.Convert(dst, src, N, backend.Bits64(Floats(seed)))
}

// convertJob rounds src into dst (which may be src) element by element; with a seed the rounding
// is stochastic. The result of each element depends only on its value and index.
type convertJob struct {
	dst, src []float32
	dtype    backend.DType
	seed     uint64
}

func (job *convertJob) runRange(lo, hi int) {
	dst, src := job.dst[lo:hi], job.src[lo:hi]
	switch {
	case job.seed != 0:
		for i, v := range src {
			dst[i] = backend.RoundStochastic(job.dtype, v, backend.StochasticBits(job.seed, lo+i))
		}
	case job.dtype == backend.BF16:
		roundBF16Span(dst, src)
	case job.dtype == backend.F16:
		roundF16Span(dst, src)
	}
}

// roundSpan rounds x in place to dt (a 16-bit format).
func roundSpan(dt backend.DType, x []float32) {
	if dt == backend.BF16 {
		roundBF16Span(x, x)
	} else {
		roundF16Span(x, x)
	}
}
