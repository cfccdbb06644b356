package cpu

import (
	"os"

	"golang.org/x/sys/cpu"
)

// int8Best is the fastest integer dot product kernel this CPU runs. GPT2GO_INT8=avx2 or go picks
// a slower one (to compare; the results are the same bits); tests set int8Kernels directly.
var int8Best = func() int8Kernel {
	best := int8Go
	if cpu.X86.HasAVX2 {
		best = int8AVX2
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI {
		best = int8VNNI
	}
	switch os.Getenv("GPT2GO_INT8") {
	case "go":
		best = int8Go
	case "avx2":
		best = min(best, int8AVX2)
	}
	return best
}()

// int8Force, when >= 0, is the kernel tests make MatmulForwardInt8 run instead of int8Best.
var int8Force int8Kernel = -1

func int8Active() int8Kernel {
	if int8Force >= 0 {
		return int8Force
	}
	return int8Best
}

// dotsInt8AVX2Asm sets dst[j] = x . rows[j*k:(j+1)*k] for j < n, x int16 and rows int8, k a
// multiple of 32 (matmul_int8_amd64.s).
//
//go:noescape
func dotsInt8AVX2Asm(dst *int32, n int, x *int16, k int, rows *int8)

// dotsInt8VNNIAsm sets dst[j] = sum of uint8(x[i]) * rows[j*k+i] for j < n (the caller subtracts
// 128*rowSum to undo x's shift), k a multiple of 64 (matmul_int8_amd64.s).
//
//go:noescape
func dotsInt8VNNIAsm(dst *int32, n int, x *int8, k int, rows *int8)

// dotsInt8AVX2 is dotsInt8 with x widened to int16.
func dotsInt8AVX2(dst []int32, x []int16, rows []int8) {
	n, k := len(dst), len(x)
	if n == 0 {
		return
	}
	if k%32 != 0 {
		panic("cpu: dotsInt8AVX2 needs rows of a multiple of 32")
	}
	_ = rows[n*k-1]
	dotsInt8AVX2Asm(&dst[0], n, &x[0], k, &rows[0])
}

// dotsInt8VNNI is dotsInt8 with x shifted to unsigned (x+128); dst is 128*rowSum too big.
func dotsInt8VNNI(dst []int32, x, rows []int8) {
	n, k := len(dst), len(x)
	if n == 0 {
		return
	}
	if k%64 != 0 {
		panic("cpu: dotsInt8VNNI needs rows of a multiple of 64")
	}
	_ = rows[n*k-1]
	dotsInt8VNNIAsm(&dst[0], n, &x[0], k, &rows[0])
}
