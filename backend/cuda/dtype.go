package cuda

import (
	"fmt"
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// The CUDA backend stores bf16 and fp16 natively, 2 bytes an element. Its kernels are written
// once over the storage type (kernels/common.cuh) and exist per format; each op picks the
// variant of its buffers' formats (formatSuffix, pairSuffix). Matmuls run in cuBLASLt on
// 16-bit A and B with fp32 accumulation (cublaslt.go). TF32 is a matmul mode of fp32 buffers
// (Options.TF32), not a storage format.

// CheckDType accepts fp32 and fp16 everywhere, and bf16 on GPUs of compute capability 8.0 and
// newer: cuBLASLt has no bf16 matrix products before Ampere.
func (be *Backend) CheckDType(dt backend.DType) error {
	switch dt {
	case backend.F32, backend.F16:
		return nil
	case backend.BF16:
		if be.g.Info.Major < 8 {
			return fmt.Errorf("--precision bf16 needs a GPU of compute capability 8.0 or newer (Ampere); this one is sm_%d%d: use --precision fp16", be.g.Info.Major, be.g.Info.Minor)
		}
		return nil
	}
	return fmt.Errorf("cuda: cannot store %v as floats", dt)
}

// DefaultDType is the compute format of a training run that names no --precision: bf16 where
// the GPU multiplies bf16 (compute capability 8.0 and newer), else fp16.
func (be *Backend) DefaultDType() backend.DType { return DefaultDTypeFor(be.g.Info.Major) }

// ComputeCapability is the GPU's compute capability, e.g. 8, 0 for sm_80.
func (be *Backend) ComputeCapability() (major, minor int) { return be.g.Info.Major, be.g.Info.Minor }

// DefaultDTypeFor is DefaultDType for a GPU of compute capability major.x.
func DefaultDTypeFor(major int) backend.DType {
	if major >= 8 {
		return backend.BF16
	}
	return backend.F16
}

// AllocDType returns n zeroed elements of dt (fp32, bf16 or fp16) of device memory; CheckDType
// must accept dt.
func (be *Backend) AllocDType(n int, dt backend.DType) backend.Buf {
	if err := be.CheckDType(dt); err != nil {
		panic(err)
	}
	return be.alloc(n, dt)
}

// Convert writes dst(N) = src(N) in dst's format: fp32 to bf16 or fp16 rounded to nearest even
// (seed 0) or stochastically with backend.StochasticBits(seed, i), bit for bit as the CPU does;
// a 16-bit buffer to fp32 exactly; equal formats as a copy.
func (be *Backend) Convert(dst, src backend.Buf, N int, seed uint64) {
	be.convert(dst, src, N, seed, nil)
}

// ConvertSeeded is Convert with the seed's bits read by the kernel from seed(backend.SeedLen).
func (be *Backend) ConvertSeeded(dst, src backend.Buf, N int, seed backend.Buf) {
	if seed.DType() != backend.F32 || seed.Len() < backend.SeedLen {
		be.fail(fmt.Errorf("ConvertSeeded: a seed buffer of %d %v elements; it holds the seed's bits in %d float32 elements", seed.Len(), seed.DType(), backend.SeedLen))
		return
	}
	be.convert(dst, src, N, 0, seed)
}

// convert is Convert with the seed read on the device from seedBuf (every thread reads its two
// words) when seedBuf is not nil.
func (be *Backend) convert(dst, src backend.Buf, N int, seed uint64, seedBuf backend.Buf) {
	if be.err != nil || N == 0 {
		return
	}
	d, s := dst.(*buf), src.(*buf)
	if d.dt == s.dt {
		be.fail(be.g.DtoD(d.ptr, s.ptr, d.bytes(N)))
		return
	}
	name := "convert_" + d.dt.String() + "_" + s.dt.String()
	be.launch("Convert", name, Blocks(int64(N), threads), threads, 0, func(k *Kernel) {
		k.Ptr(d.ptr).Ptr(s.ptr).Long(int64(N)).Long(int64(seed)).Ptr(ptrOf(seedBuf))
	})
}

// sameFormat fails the op unless every non-nil buffer is stored as dt (the kernels take one
// format per role).
func (be *Backend) sameFormat(op string, dt backend.DType, bufs ...backend.Buf) bool {
	for _, b := range bufs {
		if b != nil && b.DType() != dt {
			be.fail(fmt.Errorf("%s: a %v buffer where %v is expected", op, b.DType(), dt))
			return false
		}
	}
	return true
}

// pack16 rounds src to dt (bf16 or fp16) to nearest even and returns the 16-bit patterns.
func pack16(dt backend.DType, src []float32) []uint16 {
	bits := make([]uint16, len(src))
	if dt == backend.BF16 {
		for i, x := range src {
			bits[i] = uint16(math.Float32bits(backend.RoundBF16(x)) >> 16)
		}
		return bits
	}
	for i, x := range src {
		bits[i] = f16Bits(backend.RoundF16(x))
	}
	return bits
}

// unpack16 widens the 16-bit patterns of dt into dst, exactly.
func unpack16(dt backend.DType, dst []float32, bits []uint16) {
	if dt == backend.BF16 {
		for i, h := range bits {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
		return
	}
	for i, h := range bits {
		dst[i] = f16Value(h)
	}
}

// f16Bits packs x, a value that fp16 represents exactly (backend.RoundF16's result), into its
// binary16 pattern; NaN becomes the quiet NaN 0x7e00.
func f16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	m := b &^ 0x8000_0000
	switch {
	case m > 0x7f80_0000:
		return 0x7e00
	case m >= 0x7f80_0000:
		return sign | 0x7c00
	case m < 0x3880_0000: // below 2^-14: a subnormal, a whole number of 2^-24
		return sign | uint16(math.Float32frombits(m)*0x1p24)
	}
	return sign | uint16(m>>13-112<<10) // rebias the exponent from 127 to 15
}

// f16Value widens a binary16 pattern to float32, exactly.
func f16Value(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	e, mant := uint32(h>>10)&0x1f, uint32(h&0x3ff)
	switch e {
	case 0:
		return math.Float32frombits(math.Float32bits(float32(mant)*0x1p-24) | sign)
	case 31:
		return math.Float32frombits(sign | 0x7f80_0000 | mant<<13)
	}
	return math.Float32frombits(sign | (e+112)<<23 | mant<<13)
}
