#include "textflag.h"

// AVX2+FMA kernels for vec.go (see vec_amd64.go). Vector lengths are multiples of 8; strides and
// lengths arrive in elements and are turned into bytes here.

// func dotRowsAVX2(dst *float32, n int, x *float32, hs int, rows *float32, stride int, scale float32)
//
// dst[j] = scale * sum over i < hs of x[i]*rows[j*stride+i], for j < n. Each row's 8 lanes of
// partial sums are reduced in the same order whether the row is in a group of four or alone, so a
// score does not depend on n.
TEXT ·dotRowsAVX2(SB), NOSPLIT, $0-52
	MOVQ         dst+0(FP), DI
	MOVQ         n+8(FP), CX
	MOVQ         x+16(FP), SI
	MOVQ         hs+24(FP), DX
	MOVQ         rows+32(FP), R8
	MOVQ         stride+40(FP), R9
	VBROADCASTSS scale+48(FP), X15
	SHLQ         $2, DX
	SHLQ         $2, R9
	LEAQ         (R9)(R9*2), R10 // 3 rows
	VXORPS       Y14, Y14, Y14

rows4:
	CMPQ   CX, $4
	JLT    rows1
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

loop4:
	VMOVUPS     (SI)(AX*1), Y4
	LEAQ        (R8)(AX*1), R11
	VFMADD231PS (R11), Y4, Y0
	VFMADD231PS (R11)(R9*1), Y4, Y1
	VFMADD231PS (R11)(R9*2), Y4, Y2
	VFMADD231PS (R11)(R10*1), Y4, Y3
	ADDQ        $32, AX
	CMPQ        AX, DX
	JLT         loop4

	// [a b c d] -> [a01 a23 b01 b23 | a45 a67 b45 b67], [c.. d..] -> [a0123 b0123 c0123 d0123 | ..4567]
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMULPS       X15, X0, X0
	VMOVUPS      X0, (DI)
	ADDQ         $16, DI
	LEAQ         (R8)(R9*4), R8
	SUBQ         $4, CX
	JMP          rows4

rows1:
	TESTQ  CX, CX
	JEQ    dotdone
	VXORPS Y0, Y0, Y0
	XORQ   AX, AX

loop1:
	VMOVUPS     (SI)(AX*1), Y4
	VFMADD231PS (R8)(AX*1), Y4, Y0
	ADDQ        $32, AX
	CMPQ        AX, DX
	JLT         loop1

	// The same reduction as above with zeros for the other rows.
	VHADDPS      Y14, Y0, Y0
	VHADDPS      Y14, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSS       X1, X0, X0
	VMULSS       X15, X0, X0
	VMOVSS       X0, (DI)
	ADDQ         $4, DI
	ADDQ         R9, R8
	DECQ         CX
	JMP          rows1

dotdone:
	VZEROUPPER
	RET

// func addWeightedRowsAVX2(acc *float32, hs int, w *float32, n int, rows *float32, stride int)
//
// acc[i] += sum over j < n of w[j]*rows[j*stride+i], for i < hs: one FMA per row, rows in order.
// 64 columns at a time are held in eight registers while the rows stream by.
TEXT ·addWeightedRowsAVX2(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), DI
	MOVQ hs+8(FP), DX
	MOVQ w+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ rows+32(FP), R8
	MOVQ stride+40(FP), R9
	SHLQ $2, R9

chunk64:
	CMPQ    DX, $64
	JLT     chunk8
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7
	MOVQ    R8, R11
	XORQ    AX, AX

loop64:
	VBROADCASTSS (SI)(AX*4), Y8
	VFMADD231PS  (R11), Y8, Y0
	VFMADD231PS  32(R11), Y8, Y1
	VFMADD231PS  64(R11), Y8, Y2
	VFMADD231PS  96(R11), Y8, Y3
	VFMADD231PS  128(R11), Y8, Y4
	VFMADD231PS  160(R11), Y8, Y5
	VFMADD231PS  192(R11), Y8, Y6
	VFMADD231PS  224(R11), Y8, Y7
	ADDQ         R9, R11
	INCQ         AX
	CMPQ         AX, CX
	JLT          loop64

	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	ADDQ    $256, DI
	ADDQ    $256, R8
	SUBQ    $64, DX
	JMP     chunk64

chunk8:
	CMPQ    DX, $8
	JLT     wdone
	VMOVUPS (DI), Y0
	MOVQ    R8, R11
	XORQ    AX, AX

loop8:
	VBROADCASTSS (SI)(AX*4), Y8
	VFMADD231PS  (R11), Y8, Y0
	ADDQ         R9, R11
	INCQ         AX
	CMPQ         AX, CX
	JLT          loop8

	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, R8
	SUBQ    $8, DX
	JMP     chunk8

wdone:
	VZEROUPPER
	RET

// Constants of expShiftedAVX2: Cephes' expf. exp(x) = 2^n * exp(r) with n = round(x*log2(e)) and
// r = x - n*ln(2) (ln(2) split in two for precision), exp(r) = 1 + r + r^2*p(r) with p of degree 5.
DATA expConsts<>+0(SB)/4, $0x3fb8aa3b  // log2(e)
DATA expConsts<>+4(SB)/4, $0x42b00000  // 88: larger x is clamped (exp(88) is finite)
DATA expConsts<>+8(SB)/4, $0xc2ae0000  // -87: smaller x gives 0
DATA expConsts<>+12(SB)/4, $0x3f318000 // ln(2), high part
DATA expConsts<>+16(SB)/4, $0xb95e8083 // ln(2) - the high part: -2.12194440e-4
DATA expConsts<>+20(SB)/4, $0x3f800000 // 1
DATA expConsts<>+24(SB)/4, $0x39506967 // p0
DATA expConsts<>+28(SB)/4, $0x3ab743ce // p1
DATA expConsts<>+32(SB)/4, $0x3c088908 // p2
DATA expConsts<>+36(SB)/4, $0x3d2aa9c1 // p3
DATA expConsts<>+40(SB)/4, $0x3e2aaaaa // p4
DATA expConsts<>+44(SB)/4, $0x3f000000 // p5
DATA expConsts<>+48(SB)/4, $127        // the exponent bias
GLOBL expConsts<>(SB), RODATA|NOPTR, $52

// Lane numbers 0..7, to build the mask of a partial vector.
DATA expLanes<>+0(SB)/4, $0
DATA expLanes<>+4(SB)/4, $1
DATA expLanes<>+8(SB)/4, $2
DATA expLanes<>+12(SB)/4, $3
DATA expLanes<>+16(SB)/4, $4
DATA expLanes<>+20(SB)/4, $5
DATA expLanes<>+24(SB)/4, $6
DATA expLanes<>+28(SB)/4, $7
GLOBL expLanes<>(SB), RODATA|NOPTR, $32

// EXP8 sets Y0 = exp(Y0 - Y15) lane by lane, using Y1-Y5 and the constants in Y7-Y13. NaN stays
// NaN (min and max return their second source, x, for NaN; the mask keeps unordered lanes).
#define EXP8 \
	VSUBPS       Y15, Y0, Y0; \
	VCMPPS       $0x05, Y11, Y0, Y4; \
	VMINPS       Y0, Y12, Y0; \
	VMAXPS       Y0, Y11, Y0; \
	VMULPS       Y13, Y0, Y1; \
	VROUNDPS     $0, Y1, Y1; \
	VFNMADD231PS Y10, Y1, Y0; \
	VFNMADD231PS Y9, Y1, Y0; \
	VMULPS       Y0, Y0, Y3; \
	VBROADCASTSS expConsts<>+24(SB), Y2; \
	VBROADCASTSS expConsts<>+28(SB), Y5; \
	VFMADD213PS  Y5, Y0, Y2; \
	VBROADCASTSS expConsts<>+32(SB), Y5; \
	VFMADD213PS  Y5, Y0, Y2; \
	VBROADCASTSS expConsts<>+36(SB), Y5; \
	VFMADD213PS  Y5, Y0, Y2; \
	VBROADCASTSS expConsts<>+40(SB), Y5; \
	VFMADD213PS  Y5, Y0, Y2; \
	VBROADCASTSS expConsts<>+44(SB), Y5; \
	VFMADD213PS  Y5, Y0, Y2; \
	VFMADD213PS  Y0, Y3, Y2; \
	VADDPS       Y8, Y2, Y2; \
	VCVTPS2DQ    Y1, Y1; \
	VPADDD       Y7, Y1, Y1; \
	VPSLLD       $23, Y1, Y1; \
	VMULPS       Y1, Y2, Y0; \
	VANDPS       Y4, Y0, Y0

// func expShiftedAVX2(x *float32, n int, shift float32) float32
//
// x[j] = exp(x[j] - shift) for j < n; returns the sum of the new x, accumulated in 8 lanes and
// then reduced as dotRowsAVX2 reduces a row.
TEXT ·expShiftedAVX2(SB), NOSPLIT, $0-28
	MOVQ         x+0(FP), DI
	MOVQ         n+8(FP), CX
	VBROADCASTSS shift+16(FP), Y15
	VXORPS       Y14, Y14, Y14
	VBROADCASTSS expConsts<>+0(SB), Y13
	VBROADCASTSS expConsts<>+4(SB), Y12
	VBROADCASTSS expConsts<>+8(SB), Y11
	VBROADCASTSS expConsts<>+12(SB), Y10
	VBROADCASTSS expConsts<>+16(SB), Y9
	VBROADCASTSS expConsts<>+20(SB), Y8
	VPBROADCASTD expConsts<>+48(SB), Y7

exp8:
	CMPQ    CX, $8
	JLT     exptail
	VMOVUPS (DI), Y0
	EXP8
	VMOVUPS Y0, (DI)
	VADDPS  Y0, Y14, Y14
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     exp8

exptail:
	TESTQ        CX, CX
	JEQ          expsum
	MOVQ         CX, X6
	VPBROADCASTD X6, Y6
	VMOVDQU      expLanes<>(SB), Y5
	VPCMPGTD     Y5, Y6, Y6 // lanes below n
	VMASKMOVPS   (DI), Y6, Y0
	EXP8
	VANDPS       Y6, Y0, Y0
	VMASKMOVPS   Y0, Y6, (DI)
	VADDPS       Y0, Y14, Y14

expsum:
	VXORPS       Y1, Y1, Y1
	VHADDPS      Y1, Y14, Y0
	VHADDPS      Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSS       X1, X0, X0
	VMOVSS       X0, ret+24(FP)
	VZEROUPPER
	RET

// func spinPause()
// One PAUSE: tells the core that this is a spin-wait loop (saves power, and on SMT gives the
// sibling thread the pipeline).
TEXT ·spinPause(SB), NOSPLIT, $0-0
	PAUSE
	RET
