package cpu

import (
	"golang.org/x/sys/cpu"

	"github.com/gpt2go/gpt2go/backend"
)

// The rounding kernels of round_amd64.s: bf16 with AVX2 integer arithmetic, fp16 with F16C's
// conversions. Both give the bits of backend.RoundBF16 and backend.RoundF16 (tested over random
// bit patterns and every exponent). AVX-512 BF16's VCVTNEPS2BF16 is not used: it flushes
// subnormal inputs to zero, which round-to-nearest-even does not.
var (
	useRoundBF16AVX2 = cpu.X86.HasAVX2
	useRoundF16C     = cpu.X86.HasAVX2 && cpu.X86.HasF16C
)

//go:noescape
func roundBF16AVX2(dst, src *float32, n int)

//go:noescape
func roundF16F16C(dst, src *float32, n int)

// roundBF16Span sets dst[i] = backend.RoundBF16(src[i]).
func roundBF16Span(dst, src []float32) {
	dst = dst[:len(src)]
	body := len(src) &^ 7
	if useRoundBF16AVX2 && body > 0 {
		roundBF16AVX2(&dst[0], &src[0], body)
	} else {
		body = 0
	}
	for i := body; i < len(src); i++ {
		dst[i] = backend.RoundBF16(src[i])
	}
}

// roundF16Span sets dst[i] = backend.RoundF16(src[i]).
func roundF16Span(dst, src []float32) {
	dst = dst[:len(src)]
	body := len(src) &^ 7
	if useRoundF16C && body > 0 {
		roundF16F16C(&dst[0], &src[0], body)
	} else {
		body = 0
	}
	for i := body; i < len(src); i++ {
		dst[i] = backend.RoundF16(src[i])
	}
}
