package cuda

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// The CUDA backend stores fp32 only so far: its kernels read and write float32, and TF32 is a
// matmul mode (Options.TF32), not a storage format. bf16 and fp16 buffers need their own kernels.

// DType reports fp32: every CUDA buffer holds 4-byte elements (int32 buffers included).
func (b *buf) DType() backend.DType { return backend.F32 }

// CheckDType accepts fp32 and refuses the 16-bit formats, which have no kernels yet.
func (be *Backend) CheckDType(dt backend.DType) error {
	if dt == backend.F32 {
		return nil
	}
	return fmt.Errorf("--precision %v is not implemented on the GPU yet; use --precision tf32 (or fp32) on the GPU, or --device cpu", dt)
}

// AllocDType allocates fp32 buffers; other formats are refused by CheckDType, which callers
// must consult first.
func (be *Backend) AllocDType(n int, dt backend.DType) backend.Buf {
	if err := be.CheckDType(dt); err != nil {
		panic(err)
	}
	return be.alloc(n)
}

// Convert copies src(N) to dst(N): both are fp32, so there is nothing to round.
func (be *Backend) Convert(dst, src backend.Buf, N int, seed uint64) {
	if be.err == nil && N > 0 {
		be.fail(be.g.DtoD(ptrOf(dst), ptrOf(src), int64(N)*4))
	}
}
