//go:build !amd64

package cpu

// No assembly integer kernels on this architecture: the portable loop runs every int8 product.
var int8Best = int8Go

var int8Force int8Kernel = -1

func int8Active() int8Kernel {
	if int8Force >= 0 {
		return int8Force
	}
	return int8Best
}

func dotsInt8AVX2(dst []int32, x []int16, rows []int8) { panic("cpu: no AVX2 on this architecture") }
func dotsInt8VNNI(dst []int32, x, rows []int8)         { panic("cpu: no VNNI on this architecture") }

func dotsInt8VNNI4(dst []int32, ldd int, n int, x, rows []int8) int {
	panic("cpu: no VNNI on this architecture")
}

func dotsInt8AVX2x4(dst []int32, ldd int, n int, x []int16, rows []int8) int {
	panic("cpu: no AVX2 on this architecture")
}
