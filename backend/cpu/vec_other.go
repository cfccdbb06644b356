//go:build !amd64

package cpu

// No assembly vector kernels on this architecture: vec.go's loops run everything.

// useVecKernels is false here; on amd64 it says whether float32 runs on the assembly kernels.
var useVecKernels = false

func dotRowsAccelerated[F Float](dst, x, rows []F, stride int, scale F) bool { return false }

func addWeightedRowsAccelerated[F Float](acc, w, rows []F, stride int) bool { return false }

func expShiftedAccelerated[F Float](x []F, shift F) (F, bool) { return 0, false }

// spinPause would be a spin-wait hint; there is none here.
func spinPause() {}
