//go:build !amd64

package cpu

// No assembly gemm kernel on this architecture: gemm runs everything on its portable path.

// useSgemmKernel is false here; on amd64 it says whether float32 runs on the assembly kernel.
var useSgemmKernel = false

// accelWorkspace holds nothing here; on amd64 it is the assembly kernel's packing space.
type accelWorkspace struct{}

// gemmAccelerated reports that it ran nothing: there is no assembly kernel on this architecture.
func gemmAccelerated[F Float](*pool, *gemmWorkspace[F], int, int, int, strided[F], strided[F], []F, int, bool, []F) bool {
	return false
}

// useSgemm512 is false here; on amd64 it says whether full 12x32 tiles run on the AVX-512 kernel.
var useSgemm512, sgemm512Note = false, ""
