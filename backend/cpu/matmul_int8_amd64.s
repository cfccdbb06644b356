#include "textflag.h"

// func dotsInt8AVX2Asm(dst *int32, n int, x *int16, k int, rows *int8)
//
// dst[j] = sum over i < k of x[i]*rows[j*k+i] for j < n, k a multiple of 32. Each weight byte is
// widened to int16 (VPMOVSXBW) and multiplied with x by VPMADDWD, which adds pairs of products
// into int32 lanes exactly (|x|,|w| <= 127; VPMADDUBSW would saturate int16 sums instead).
TEXT ·dotsInt8AVX2Asm(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ x+16(FP), SI
	MOVQ k+24(FP), DX
	MOVQ rows+32(FP), R8

avx2row:
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	XORQ  AX, AX         // byte offset into the row; x's is twice it

avx2loop:
	VPMOVSXBW (R8)(AX*1), Y2
	VPMOVSXBW 16(R8)(AX*1), Y3
	VPMADDWD  (SI)(AX*2), Y2, Y2
	VPMADDWD  32(SI)(AX*2), Y3, Y3
	VPADDD    Y2, Y0, Y0
	VPADDD    Y3, Y1, Y1
	ADDQ      $32, AX
	CMPQ      AX, DX
	JLT       avx2loop

	VPADDD       Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPADDD       X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPADDD       X1, X0, X0
	VMOVD        X0, (DI)
	ADDQ         $4, DI
	ADDQ         DX, R8
	DECQ         CX
	JNZ          avx2row
	VZEROUPPER
	RET

// func dotsInt8VNNIAsm(dst *int32, n int, x *int8, k int, rows *int8)
//
// dst[j] = sum over i < k of uint8(x[i])*rows[j*k+i] for j < n, k a multiple of 64: VPDPBUSD
// multiplies unsigned by signed bytes and adds each group of four products into an int32 lane,
// without saturation (VPDPBUSDS would saturate). Four rows at a time share each load of x and one
// reduction across lanes (integer sums: any order gives the same result), then one at a time.
TEXT ·dotsInt8VNNIAsm(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ x+16(FP), SI
	MOVQ k+24(FP), DX
	MOVQ rows+32(FP), R8

vnni4:
	CMPQ   CX, $4
	JLT    vnnitail
	LEAQ   (R8)(DX*1), R10
	LEAQ   (R8)(DX*2), R11
	LEAQ   (R10)(DX*2), R12
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ   AX, AX

vnni4loop:
	VMOVDQU8 (SI)(AX*1), Z4
	VPDPBUSD (R8)(AX*1), Z4, Z0
	VPDPBUSD (R10)(AX*1), Z4, Z1
	VPDPBUSD (R11)(AX*1), Z4, Z2
	VPDPBUSD (R12)(AX*1), Z4, Z3
	ADDQ     $64, AX
	CMPQ     AX, DX
	JLT      vnni4loop

	VEXTRACTI64X4 $1, Z0, Y4
	VEXTRACTI64X4 $1, Z1, Y5
	VEXTRACTI64X4 $1, Z2, Y6
	VEXTRACTI64X4 $1, Z3, Y7
	VPADDD        Y4, Y0, Y0
	VPADDD        Y5, Y1, Y1
	VPADDD        Y6, Y2, Y2
	VPADDD        Y7, Y3, Y3
	VPHADDD       Y1, Y0, Y0 // per 128-bit lane: row 0's pair sums, then row 1's
	VPHADDD       Y3, Y2, Y2 // rows 2 and 3
	VPHADDD       Y2, Y0, Y0 // per lane: one partial sum of each of rows 0-3
	VEXTRACTI128  $1, Y0, X1
	VPADDD        X1, X0, X0
	VMOVDQU       X0, (DI)
	ADDQ          $16, DI
	LEAQ          (R8)(DX*4), R8
	SUBQ          $4, CX
	JMP           vnni4

vnnitail:
	TESTQ CX, CX
	JEQ   vnnidone

vnnirow:
	VPXORD Z0, Z0, Z0
	XORQ   AX, AX

vnniloop:
	VMOVDQU8 (SI)(AX*1), Z2
	VPDPBUSD (R8)(AX*1), Z2, Z0
	ADDQ     $64, AX
	CMPQ     AX, DX
	JLT      vnniloop

	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD        Y1, Y0, Y0
	VEXTRACTI128  $1, Y0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0x4e, X0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0xb1, X0, X1
	VPADDD        X1, X0, X0
	VMOVD         X0, (DI)
	ADDQ          $4, DI
	ADDQ          DX, R8
	DECQ          CX
	JNZ           vnnirow

vnnidone:
	VZEROUPPER
	RET

// X4REDUCE adds up the lanes of four accumulators za..zd (one input row against four weight rows)
// and stores the four int32 sums at (R9): halves first, then VPHADDD pairs (VEX-only, so the
// accumulators are among Z0-Z15), then the two 128-bit lanes.
#define X4REDUCE(za, zb, zc, zd, ya, yb, yc, yd, xa, xb) \
	VEXTRACTI64X4 $1, za, Y24 \
	VEXTRACTI64X4 $1, zb, Y25 \
	VEXTRACTI64X4 $1, zc, Y26 \
	VEXTRACTI64X4 $1, zd, Y27 \
	VPADDD        Y24, ya, ya \
	VPADDD        Y25, yb, yb \
	VPADDD        Y26, yc, yc \
	VPADDD        Y27, yd, yd \
	VPHADDD       yb, ya, ya \
	VPHADDD       yd, yc, yc \
	VPHADDD       yc, ya, ya \
	VEXTRACTI128  $1, ya, xb \
	VPADDD        xb, xa, xa \
	VMOVDQU       xa, (R9)

// func dotsInt8VNNI4x4Asm(dst *int32, ldd int, n int, x *int8, k int, rows *int8)
//
// dotsInt8VNNIAsm for four input rows at once: dst[i*ldd+j] = sum over l < k of
// uint8(x[i*k+l])*rows[j*k+l] for i < 4 and j < n, n a multiple of 4 and k of 64. Each step of 64
// bytes loads the four input rows and four weight rows into registers and makes their sixteen
// products (Z0-Z15: input row i, weight row r in Z(4i+r)), so every byte loaded serves four
// VPDPBUSDs instead of one.
TEXT ·dotsInt8VNNI4x4Asm(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ n+16(FP), CX
	MOVQ x+24(FP), SI
	MOVQ k+32(FP), DX
	MOVQ rows+40(FP), R8

x4block:
	LEAQ   (SI)(DX*1), R13 // input rows 1, 2, 3 (R14 and R15 are left alone: Go's g and GOT registers)
	LEAQ   (SI)(DX*2), BX
	LEAQ   (R13)(DX*2), R9
	LEAQ   (R8)(DX*1), R10 // weight rows 1, 2, 3
	LEAQ   (R8)(DX*2), R11
	LEAQ   (R10)(DX*2), R12
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	XORQ   AX, AX

x4loop:
	VMOVDQU8 (SI)(AX*1), Z16
	VMOVDQU8 (R13)(AX*1), Z17
	VMOVDQU8 (BX)(AX*1), Z18
	VMOVDQU8 (R9)(AX*1), Z19
	VMOVDQU8 (R8)(AX*1), Z20
	VMOVDQU8 (R10)(AX*1), Z21
	VMOVDQU8 (R11)(AX*1), Z22
	VMOVDQU8 (R12)(AX*1), Z23
	VPDPBUSD Z20, Z16, Z0
	VPDPBUSD Z21, Z16, Z1
	VPDPBUSD Z22, Z16, Z2
	VPDPBUSD Z23, Z16, Z3
	VPDPBUSD Z20, Z17, Z4
	VPDPBUSD Z21, Z17, Z5
	VPDPBUSD Z22, Z17, Z6
	VPDPBUSD Z23, Z17, Z7
	VPDPBUSD Z20, Z18, Z8
	VPDPBUSD Z21, Z18, Z9
	VPDPBUSD Z22, Z18, Z10
	VPDPBUSD Z23, Z18, Z11
	VPDPBUSD Z20, Z19, Z12
	VPDPBUSD Z21, Z19, Z13
	VPDPBUSD Z22, Z19, Z14
	VPDPBUSD Z23, Z19, Z15
	ADDQ     $64, AX
	CMPQ     AX, DX
	JLT      x4loop

	// Each input row's four sums, reduced as in dotsInt8VNNIAsm, to dst's rows 0-3.
	MOVQ ldd+8(FP), R13
	SHLQ $2, R13 // ldd in bytes
	MOVQ DI, R9
	X4REDUCE(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1)
	ADDQ R13, R9
	X4REDUCE(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5)
	ADDQ R13, R9
	X4REDUCE(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9)
	ADDQ R13, R9
	X4REDUCE(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12, X13)

	ADDQ $16, DI
	LEAQ (R8)(DX*4), R8
	SUBQ $4, CX
	JNZ  x4block
	VZEROUPPER
	RET

// AVX2X4STEP is one step of 16 columns of dotsInt8AVX2x4Asm at byte offset woff of the weight rows
// and xoff = 2*woff of the input rows: both weight rows widened once, then each input row's two products.
#define AVX2X4STEP(woff, xoff) \
	VPMOVSXBW woff(R8)(AX*1), Y0 \
	VPMOVSXBW woff(R12)(AX*1), Y1 \
	VMOVDQU   xoff(SI)(AX*2), Y2 \
	VMOVDQU   xoff(R9)(AX*2), Y12 \
	VPMADDWD  Y0, Y2, Y3 \
	VPMADDWD  Y1, Y2, Y2 \
	VPADDD    Y3, Y4, Y4 \
	VPADDD    Y2, Y5, Y5 \
	VPMADDWD  Y0, Y12, Y3 \
	VPMADDWD  Y1, Y12, Y12 \
	VPADDD    Y3, Y6, Y6 \
	VPADDD    Y12, Y7, Y7 \
	VMOVDQU   xoff(R10)(AX*2), Y2 \
	VMOVDQU   xoff(R11)(AX*2), Y12 \
	VPMADDWD  Y0, Y2, Y3 \
	VPMADDWD  Y1, Y2, Y2 \
	VPADDD    Y3, Y8, Y8 \
	VPADDD    Y2, Y9, Y9 \
	VPMADDWD  Y0, Y12, Y3 \
	VPMADDWD  Y1, Y12, Y12 \
	VPADDD    Y3, Y10, Y10 \
	VPADDD    Y12, Y11, Y11

// func dotsInt8AVX2x4Asm(dst *int32, ldd int, n int, x *int16, k int, rows *int8)
//
// dotsInt8AVX2Asm for four input rows at once: dst[i*ldd+j] = sum over l < k of
// x[i*k+l]*rows[j*k+l] for i < 4 and j < n, n a multiple of 2 and k of 32. Two weight rows at a
// time are widened once per step and multiplied with all four input rows (Y4-Y11: input row i,
// weight row r in Y(4+2i+r)), so each widening serves four VPMADDWDs instead of one; with 16 YMM
// registers, four by two is the largest block that keeps its sums, operands and a temporary.
TEXT ·dotsInt8AVX2x4Asm(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R13
	SHLQ $2, R13            // ldd in bytes
	MOVQ n+16(FP), CX
	MOVQ x+24(FP), SI
	MOVQ k+32(FP), DX
	MOVQ rows+40(FP), R8
	LEAQ (SI)(DX*2), R9     // input rows 1, 2, 3 (int16: 2k bytes apart)
	LEAQ (SI)(DX*4), R10
	LEAQ (R9)(DX*4), R11

x2pair:
	LEAQ  (R8)(DX*1), R12   // weight row 1
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	XORQ  AX, AX

x2loop:
	AVX2X4STEP(0, 0)
	AVX2X4STEP(16, 32)
	ADDQ $32, AX
	CMPQ AX, DX
	JLT  x2loop

	// Input rows 0 and 1, then 2 and 3: each VPHADDD chain leaves per 128-bit lane one partial sum
	// of (row a, weight 0), (a, 1), (b, 0), (b, 1); adding the lanes gives the four sums.
	VPHADDD      Y5, Y4, Y4
	VPHADDD      Y7, Y6, Y6
	VPHADDD      Y6, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPADDD       X5, X4, X4
	VPHADDD      Y9, Y8, Y8
	VPHADDD      Y11, Y10, Y10
	VPHADDD      Y10, Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VPADDD       X9, X8, X8
	LEAQ         (DI)(R13*2), BX
	VMOVQ        X4, (DI)
	VPEXTRQ      $1, X4, (DI)(R13*1)
	VMOVQ        X8, (BX)
	VPEXTRQ      $1, X8, (BX)(R13*1)

	ADDQ $8, DI
	LEAQ (R8)(DX*2), R8
	SUBQ $2, CX
	JNZ  x2pair
	VZEROUPPER
	RET
