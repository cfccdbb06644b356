package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useVecKernels says whether float32 vector kernels run on the AVX2+FMA assembly (vec_amd64.s);
// tests turn it off to compare with the portable loops.
var useVecKernels = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The assembly kernels need the vector length to be a multiple of 8 (one YMM register); GPT-2's
// head sizes are 64. They take raw pointers: the Go wrappers below check the bounds first.

// dotRowsAVX2 is dotRows for n rows of hs values.
//
//go:noescape
func dotRowsAVX2(dst *float32, n int, x *float32, hs int, rows *float32, stride int, scale float32)

// addWeightedRowsAVX2 is addWeightedRows for n rows of hs values.
//
//go:noescape
func addWeightedRowsAVX2(acc *float32, hs int, w *float32, n int, rows *float32, stride int)

// expShiftedAVX2 is expShifted for n values.
//
//go:noescape
func expShiftedAVX2(x *float32, n int, shift float32) float32

// asFloat32 reinterprets x as []float32; only for F whose size is 4, i.e. float32.
func asFloat32[F Float](x []F) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
}

// vecKernelApplies reports whether the assembly runs vectors of hs elements of type F.
func vecKernelApplies[F Float](hs int) bool {
	var zero F
	return useVecKernels && unsafe.Sizeof(zero) == 4 && hs > 0 && hs%8 == 0
}

// dotRowsAccelerated runs dotRows on the assembly kernel if it applies and reports whether it did.
func dotRowsAccelerated[F Float](dst, x, rows []F, stride int, scale F) bool {
	n, hs := len(dst), len(x)
	if !vecKernelApplies[F](hs) {
		return false
	}
	_ = rows[(n-1)*stride+hs-1]
	dotRowsAVX2(&asFloat32(dst)[0], n, &asFloat32(x)[0], hs, &asFloat32(rows)[0], stride, float32(scale))
	return true
}

// addWeightedRowsAccelerated runs addWeightedRows on the assembly kernel if it applies and reports
// whether it did.
func addWeightedRowsAccelerated[F Float](acc, w, rows []F, stride int) bool {
	n, hs := len(w), len(acc)
	if !vecKernelApplies[F](hs) {
		return false
	}
	_ = rows[(n-1)*stride+hs-1]
	addWeightedRowsAVX2(&asFloat32(acc)[0], hs, &asFloat32(w)[0], n, &asFloat32(rows)[0], stride)
	return true
}

// expShiftedAccelerated runs expShifted on the assembly kernel (a float32 exp accurate to about 1
// ulp) when F is float32 and the CPU has AVX2 and FMA; ok reports whether it did.
func expShiftedAccelerated[F Float](x []F, shift F) (sum F, ok bool) {
	var zero F
	if !useVecKernels || unsafe.Sizeof(zero) != 4 {
		return 0, false
	}
	return F(expShiftedAVX2(&asFloat32(x)[0], len(x), float32(shift))), true
}

// spinPause executes one PAUSE instruction, for spin-wait loops.
//
//go:noescape
func spinPause()
