package cpu

import (
	"fmt"
	"os"

	"golang.org/x/sys/cpu"
)

// int8Best is the fastest integer dot product kernel this CPU runs. GPT2GO_INT8=avx2 or go picks
// a slower one (to compare; the results are the same bits); tests set int8Kernels directly.
var int8Best = bestInt8(int8Features{
	avx2: cpu.X86.HasAVX2, avx512f: cpu.X86.HasAVX512F, avx512bw: cpu.X86.HasAVX512BW,
	avx512vl: cpu.X86.HasAVX512VL, avx512vnni: cpu.X86.HasAVX512VNNI,
}, os.Getenv("GPT2GO_INT8"))

// int8Features are the CPU features the int8 kernels need.
type int8Features struct {
	avx2, avx512f, avx512bw, avx512vl, avx512vnni bool
}

// bestInt8 is the fastest kernel a CPU with features f runs, or the slower one that env (the
// value of GPT2GO_INT8) asks for.
func bestInt8(f int8Features, env string) int8Kernel {
	best := int8Go
	if f.avx2 {
		best = int8AVX2
	}
	// VL too: the four-row kernel sums in Y24-Y27, which only EVEX encodes at 256 bits. No CPU
	// sold has VNNI without VL, but a virtual machine may hide one feature and not the other.
	if f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni {
		best = int8VNNI
	}
	switch env {
	case "go":
		best = int8Go
	case "avx2":
		best = min(best, int8AVX2)
	}
	return best
}

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

// dotsInt8VNNI4x4Asm is dotsInt8VNNIAsm for four input rows at x, x+k, x+2k, x+3k: it sets
// dst[i*ldd+j] for i < 4 and j < n, n a multiple of 4 (matmul_int8_amd64.s).
//
//go:noescape
func dotsInt8VNNI4x4Asm(dst *int32, ldd int, n int, x *int8, k int, rows *int8)

// dotsInt8AVX2x4Asm is dotsInt8AVX2Asm for four input rows at x, x+k, x+2k, x+3k: it sets
// dst[i*ldd+j] for i < 4 and j < n, n a multiple of 2 (matmul_int8_amd64.s).
//
//go:noescape
func dotsInt8AVX2x4Asm(dst *int32, ldd int, n int, x *int16, k int, rows *int8)

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

// dotsInt8VNNI4 is dotsInt8VNNI for the four input rows x[i*k:(i+1)*k], i < 4, and weight rows
// n - n%4 of rows: dst[i*ldd+j] for j < n - n%4. It returns how many weight rows it did.
func dotsInt8VNNI4(dst []int32, ldd int, n int, x, rows []int8) int {
	return fourRows(dst, ldd, n, 4, 64, x, rows, dotsInt8VNNI4x4Asm)
}

// dotsInt8AVX2x4 is dotsInt8AVX2 for the four input rows x[i*k:(i+1)*k], i < 4, and weight rows
// n - n%2 of rows: dst[i*ldd+j] for j < n - n%2. It returns how many weight rows it did.
func dotsInt8AVX2x4(dst []int32, ldd int, n int, x []int16, rows []int8) int {
	return fourRows(dst, ldd, n, 2, 32, x, rows, dotsInt8AVX2x4Asm)
}

// fourRows runs kernel, which takes four input rows (of k = len(x)/4 values, a multiple of
// kStep) against weight rows in groups of group, over the n - n%group rows it can take, after
// the bounds checks its assembly leaves out, and returns that count.
func fourRows[X int8 | int16](dst []int32, ldd, n, group, kStep int, x []X, rows []int8,
	kernel func(dst *int32, ldd int, n int, x *X, k int, rows *int8)) int {
	k := len(x) / 4
	n = n / group * group
	if n == 0 {
		return 0
	}
	if k%kStep != 0 || len(x) != 4*k {
		panic(fmt.Sprintf("cpu: a four-row int8 kernel needs four rows of a multiple of %d values, got %d", kStep, len(x)))
	}
	_ = rows[n*k-1]
	_ = dst[3*ldd+n-1]
	kernel(&dst[0], ldd, n, &x[0], k, &rows[0])
	return n
}
