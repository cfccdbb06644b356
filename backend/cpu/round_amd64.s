//go:build amd64

#include "textflag.h"

// Rounding to the 16-bit formats, 8 float32 lanes at a time (round_amd64.go declares them; the
// Go versions in backend/dtype.go are the reference). n is a multiple of 8; dst may be src.
// NaN lanes become the canonical quiet NaN 0x7fc00000, as the Go versions return.

DATA roundConsts<>+0(SB)/4, $0x00000001   // the lowest kept bit of a bf16
DATA roundConsts<>+4(SB)/4, $0x00007fff   // half a bf16 unit, less one
DATA roundConsts<>+8(SB)/4, $0xffff0000   // the bits a bf16 keeps
DATA roundConsts<>+12(SB)/4, $0x7fffffff  // everything but the sign
DATA roundConsts<>+16(SB)/4, $0x7f800000  // +Inf: magnitudes above it are NaN
DATA roundConsts<>+20(SB)/4, $0x7fc00000  // the canonical quiet NaN
GLOBL roundConsts<>(SB), RODATA|NOPTR, $24

// func roundBF16AVX2(dst, src *float32, n int)
// dst[i] = RoundBF16(src[i]): add 0x7fff plus the lowest kept bit, then clear the low 16 bits (a
// carry into the exponent is the correct result, up to +-Inf).
TEXT ·roundBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VPBROADCASTD roundConsts<>+0(SB), Y8
	VPBROADCASTD roundConsts<>+4(SB), Y9
	VPBROADCASTD roundConsts<>+8(SB), Y10
	VPBROADCASTD roundConsts<>+12(SB), Y11
	VPBROADCASTD roundConsts<>+16(SB), Y12
	VPBROADCASTD roundConsts<>+20(SB), Y13

bf16Loop:
	CMPQ      CX, $8
	JLT       bf16Done
	VMOVDQU   (SI), Y0
	VPSRLD    $16, Y0, Y1
	VPAND     Y8, Y1, Y1      // lowest kept bit
	VPADDD    Y9, Y0, Y2
	VPADDD    Y1, Y2, Y2
	VPAND     Y10, Y2, Y2     // rounded
	VPAND     Y11, Y0, Y3
	VPCMPGTD  Y12, Y3, Y3     // |x| > Inf: NaN
	VBLENDVPS Y3, Y13, Y2, Y2
	VMOVDQU   Y2, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       bf16Loop

bf16Done:
	VZEROUPPER
	RET

// func roundF16F16C(dst, src *float32, n int)
// dst[i] = RoundF16(src[i]) by the hardware conversion there and back (VCVTPS2PH with rounding
// mode 0, round to nearest even, which produces fp16 subnormals and +-Inf like RoundF16).
TEXT ·roundF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VPBROADCASTD roundConsts<>+12(SB), Y11
	VPBROADCASTD roundConsts<>+16(SB), Y12
	VPBROADCASTD roundConsts<>+20(SB), Y13

f16Loop:
	CMPQ      CX, $8
	JLT       f16Done
	VMOVDQU   (SI), Y0
	VCVTPS2PH $0, Y0, X1
	VCVTPH2PS X1, Y2
	VPAND     Y11, Y0, Y3
	VPCMPGTD  Y12, Y3, Y3
	VBLENDVPS Y3, Y13, Y2, Y2
	VMOVDQU   Y2, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       f16Loop

f16Done:
	VZEROUPPER
	RET
