#include "textflag.h"

// func matvecRowsAVX2(dst *float32, n int, x *float32, k int, rows *float32)
//
// dst[j] = sum over i < k of x[i]*rows[j*k+i], for j < n: the dot products of x with n contiguous
// rows of k values (k a multiple of 8). One row at a time, so the rows are read as one sequential
// stream, which the hardware prefetcher follows at the full memory bandwidth; four accumulators
// per row (lanes i mod 32), added pairwise and then across lanes in a fixed order.
TEXT ·matvecRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ x+16(FP), SI
	MOVQ k+24(FP), DX
	MOVQ rows+32(FP), R8
	SHLQ $2, DX          // row length in bytes
	MOVQ DX, BX
	ANDQ $-128, BX       // bytes covered 32 values at a time
	TESTQ CX, CX
	JEQ  done

row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

loop32:
	CMPQ        AX, BX
	JGE         loop8
	VMOVUPS     (SI)(AX*1), Y4
	VMOVUPS     32(SI)(AX*1), Y5
	VMOVUPS     64(SI)(AX*1), Y6
	VMOVUPS     96(SI)(AX*1), Y7
	VFMADD231PS (R8)(AX*1), Y4, Y0
	VFMADD231PS 32(R8)(AX*1), Y5, Y1
	VFMADD231PS 64(R8)(AX*1), Y6, Y2
	VFMADD231PS 96(R8)(AX*1), Y7, Y3
	ADDQ        $128, AX
	JMP         loop32

loop8:
	CMPQ        AX, DX
	JGE         reduce
	VMOVUPS     (SI)(AX*1), Y4
	VFMADD231PS (R8)(AX*1), Y4, Y0
	ADDQ        $32, AX
	JMP         loop8

reduce:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, (DI)
	ADDQ         $4, DI
	ADDQ         DX, R8
	DECQ         CX
	JNZ          row

done:
	VZEROUPPER
	RET
