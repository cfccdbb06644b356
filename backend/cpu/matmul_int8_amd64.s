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
