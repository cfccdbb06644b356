#include "textflag.h"

// The AVX2+FMA micro-kernel of the float32 gemm (gemm_amd64.go). It keeps a 6x16 tile of C in 12
// YMM accumulators (row r in Y(2r) and Y(2r+1)); every k step loads 16 values of the packed B
// panel, broadcasts the 6 values of the packed A panel and issues 12 FMAs. Each accumulator lane
// is one output element, updated by one FMA per k in order.

// KSTEP does the FMAs of one k: A values at aoff(AX), B values at boff(BX).
#define KSTEP(aoff, boff) \
	VMOVUPS      boff(BX), Y12; \
	VMOVUPS      boff+32(BX), Y13; \
	VBROADCASTSS aoff(AX), Y14; \
	VBROADCASTSS aoff+4(AX), Y15; \
	VFMADD231PS  Y12, Y14, Y0; \
	VFMADD231PS  Y13, Y14, Y1; \
	VFMADD231PS  Y12, Y15, Y2; \
	VFMADD231PS  Y13, Y15, Y3; \
	VBROADCASTSS aoff+8(AX), Y14; \
	VBROADCASTSS aoff+12(AX), Y15; \
	VFMADD231PS  Y12, Y14, Y4; \
	VFMADD231PS  Y13, Y14, Y5; \
	VFMADD231PS  Y12, Y15, Y6; \
	VFMADD231PS  Y13, Y15, Y7; \
	VBROADCASTSS aoff+16(AX), Y14; \
	VBROADCASTSS aoff+20(AX), Y15; \
	VFMADD231PS  Y12, Y14, Y8; \
	VFMADD231PS  Y13, Y14, Y9; \
	VFMADD231PS  Y12, Y15, Y10; \
	VFMADD231PS  Y13, Y15, Y11

// func sgemmKernel6x16(kc int, a, b, c *float32, ldc int, init *float32, initStride int)
//
// c[r*ldc+j] = init[r*initStride+j] + sum over k < kc of a[6k+r]*b[16k+j], for r < 6, j < 16.
// init may be c (accumulate), a bias row with initStride 0, or zeros.
TEXT ·sgemmKernel6x16(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	MOVQ init+40(FP), SI
	MOVQ initStride+48(FP), DI
	SHLQ $2, R8
	SHLQ $2, DI

	// Prefetch the C tile 6 rows down, which the next call (the next tile of a column of tiles)
	// will load, so that it arrives while this one computes.
	LEAQ       (R8)(R8*2), R9
	LEAQ       (DX)(R9*2), R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)

	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	ADDQ    DI, SI
	VMOVUPS (SI), Y2
	VMOVUPS 32(SI), Y3
	ADDQ    DI, SI
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	ADDQ    DI, SI
	VMOVUPS (SI), Y6
	VMOVUPS 32(SI), Y7
	ADDQ    DI, SI
	VMOVUPS (SI), Y8
	VMOVUPS 32(SI), Y9
	ADDQ    DI, SI
	VMOVUPS (SI), Y10
	VMOVUPS 32(SI), Y11

	CMPQ CX, $4
	JLT  tail

loop4:
	PREFETCHT0 384(AX) // A, 16 steps ahead
	KSTEP(0, 0)
	KSTEP(24, 64)
	KSTEP(48, 128)
	KSTEP(72, 192)
	ADDQ $96, AX
	ADDQ $256, BX
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  loop4

tail:
	TESTQ CX, CX
	JEQ   store

loop1:
	KSTEP(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	DECQ CX
	JNE  loop1

store:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y2, (DX)
	VMOVUPS Y3, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y4, (DX)
	VMOVUPS Y5, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y6, (DX)
	VMOVUPS Y7, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y8, (DX)
	VMOVUPS Y9, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y10, (DX)
	VMOVUPS Y11, 32(DX)
	VZEROUPPER
	RET

// TRANSPOSE8 transposes the 8x8 block whose rows are Y0..Y7 into Y8..Y15 (row i of the result is
// column i of the block), using Y0..Y7 as scratch.
#define TRANSPOSE8 \
	VUNPCKLPS  Y1, Y0, Y8; \
	VUNPCKHPS  Y1, Y0, Y9; \
	VUNPCKLPS  Y3, Y2, Y10; \
	VUNPCKHPS  Y3, Y2, Y11; \
	VUNPCKLPS  Y5, Y4, Y12; \
	VUNPCKHPS  Y5, Y4, Y13; \
	VUNPCKLPS  Y7, Y6, Y14; \
	VUNPCKHPS  Y7, Y6, Y15; \
	VSHUFPS    $0x44, Y10, Y8, Y0; \
	VSHUFPS    $0xEE, Y10, Y8, Y1; \
	VSHUFPS    $0x44, Y11, Y9, Y2; \
	VSHUFPS    $0xEE, Y11, Y9, Y3; \
	VSHUFPS    $0x44, Y14, Y12, Y4; \
	VSHUFPS    $0xEE, Y14, Y12, Y5; \
	VSHUFPS    $0x44, Y15, Y13, Y6; \
	VSHUFPS    $0xEE, Y15, Y13, Y7; \
	VPERM2F128 $0x20, Y4, Y0, Y8; \
	VPERM2F128 $0x20, Y5, Y1, Y9; \
	VPERM2F128 $0x20, Y6, Y2, Y10; \
	VPERM2F128 $0x20, Y7, Y3, Y11; \
	VPERM2F128 $0x31, Y4, Y0, Y12; \
	VPERM2F128 $0x31, Y5, Y1, Y13; \
	VPERM2F128 $0x31, Y6, Y2, Y14; \
	VPERM2F128 $0x31, Y7, Y3, Y15

// LOADROWS8 loads 8 floats from each of the 8 rows at R10, R10+DX, ..., R10+7*DX (R9 = 3*DX).
#define LOADROWS8 \
	LEAQ    (R10)(DX*4), R11; \
	VMOVUPS (R10), Y0; \
	VMOVUPS (R10)(DX*1), Y1; \
	VMOVUPS (R10)(DX*2), Y2; \
	VMOVUPS (R10)(R9*1), Y3; \
	VMOVUPS (R11), Y4; \
	VMOVUPS (R11)(DX*1), Y5; \
	VMOVUPS (R11)(DX*2), Y6; \
	VMOVUPS (R11)(R9*1), Y7

// STORE8 stores Y8..Y15 at off(DI), off+64(DI), ..., off+448(DI): 8 consecutive k of a 16-column
// panel.
#define STORE8(off) \
	VMOVUPS Y8, off(DI); \
	VMOVUPS Y9, off+64(DI); \
	VMOVUPS Y10, off+128(DI); \
	VMOVUPS Y11, off+192(DI); \
	VMOVUPS Y12, off+256(DI); \
	VMOVUPS Y13, off+320(DI); \
	VMOVUPS Y14, off+384(DI); \
	VMOVUPS Y15, off+448(DI)

// func sgemmPackBT16(k8 int, src *float32, stride int, dst *float32)
//
// dst[16k+j] = src[j*stride+k] for j < 16 and k < 8*k8: packs 16 columns of b that are contiguous
// along k (rows of the stored transpose, stride apart) into a 16-column panel, 8x8 blocks at a time.
TEXT ·sgemmPackBT16(SB), NOSPLIT, $0-32
	MOVQ k8+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ dst+24(FP), DI
	SHLQ $2, DX
	LEAQ (DX)(DX*2), R9
	LEAQ (SI)(DX*8), R8 // columns 8..15
	TESTQ CX, CX
	JEQ  done

loop:
	MOVQ SI, R10
	LOADROWS8
	TRANSPOSE8
	STORE8(0)
	MOVQ R8, R10
	LOADROWS8
	TRANSPOSE8
	STORE8(32)
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $512, DI
	DECQ CX
	JNE  loop

done:
	VZEROUPPER
	RET

// func sgemmCopy16(kc int, src *float32, stride int, dst *float32)
//
// dst[16k+j] = src[k*stride+j] for j < 16 and k < kc: packs 16 columns of b whose rows are
// contiguous into a 16-column panel.
TEXT ·sgemmCopy16(SB), NOSPLIT, $0-32
	MOVQ  kc+0(FP), CX
	MOVQ  src+8(FP), SI
	MOVQ  stride+16(FP), DX
	MOVQ  dst+24(FP), DI
	SHLQ  $2, DX
	TESTQ CX, CX
	JEQ   copy16done

copy16loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    DX, SI
	ADDQ    $64, DI
	DECQ    CX
	JNE     copy16loop

copy16done:
	VZEROUPPER
	RET

// func sgemmCopy6(kc int, src *float32, stride int, dst *float32)
//
// dst[6k+r] = src[k*stride+r] for r < 6 and k < kc: packs 6 rows of a whose columns are
// contiguous into a 6-row panel.
TEXT ·sgemmCopy6(SB), NOSPLIT, $0-32
	MOVQ  kc+0(FP), CX
	MOVQ  src+8(FP), SI
	MOVQ  stride+16(FP), DX
	MOVQ  dst+24(FP), DI
	SHLQ  $2, DX
	TESTQ CX, CX
	JEQ   copy6done

copy6loop:
	MOVUPS (SI), X0
	MOVQ   16(SI), X1
	MOVUPS X0, (DI)
	MOVQ   X1, 16(DI)
	ADDQ   DX, SI
	ADDQ   $24, DI
	DECQ   CX
	JNE    copy6loop

copy6done:
	RET

// func sgemmPackA6(kc int, src *float32, stride int, dst *float32)
//
// dst[6k+r] = src[r*stride+k] for r < 6 and k < kc: six rows interleaved into an A panel, four k
// at a time as a 6x4 to 4x6 transpose in XMM registers.
TEXT ·sgemmPackA6(SB), NOSPLIT, $0-32
	MOVQ kc+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), R8
	MOVQ dst+24(FP), DI
	SHLQ $2, R8
	LEAQ (SI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	LEAQ (R11)(R8*1), R12
	LEAQ (R12)(R8*1), R13
	XORQ AX, AX // byte offset along k

pack4:
	CMPQ      CX, $4
	JLT       packtail
	VMOVUPS   (SI)(AX*1), X0
	VMOVUPS   (R9)(AX*1), X1
	VMOVUPS   (R10)(AX*1), X2
	VMOVUPS   (R11)(AX*1), X3
	VMOVUPS   (R12)(AX*1), X4
	VMOVUPS   (R13)(AX*1), X5
	VUNPCKLPS X1, X0, X6          // r0k0 r1k0 r0k1 r1k1
	VUNPCKHPS X1, X0, X7          // r0k2 r1k2 r0k3 r1k3
	VUNPCKLPS X3, X2, X8          // r2k0 r3k0 r2k1 r3k1
	VUNPCKHPS X3, X2, X9
	VUNPCKLPS X5, X4, X10         // r4k0 r5k0 r4k1 r5k1
	VUNPCKHPS X5, X4, X11
	VSHUFPS   $0x44, X8, X6, X0   // r0k0 r1k0 r2k0 r3k0
	VSHUFPS   $0xE4, X6, X10, X1  // r4k0 r5k0 r0k1 r1k1
	VSHUFPS   $0xEE, X10, X8, X2  // r2k1 r3k1 r4k1 r5k1
	VSHUFPS   $0x44, X9, X7, X3
	VSHUFPS   $0xE4, X7, X11, X4
	VSHUFPS   $0xEE, X11, X9, X5
	VMOVUPS   X0, (DI)
	VMOVUPS   X1, 16(DI)
	VMOVUPS   X2, 32(DI)
	VMOVUPS   X3, 48(DI)
	VMOVUPS   X4, 64(DI)
	VMOVUPS   X5, 80(DI)
	ADDQ      $16, AX
	ADDQ      $96, DI
	SUBQ      $4, CX
	JMP       pack4

packtail:
	TESTQ CX, CX
	JEQ   packdone
	MOVL  (SI)(AX*1), DX
	MOVL  DX, (DI)
	MOVL  (R9)(AX*1), DX
	MOVL  DX, 4(DI)
	MOVL  (R10)(AX*1), DX
	MOVL  DX, 8(DI)
	MOVL  (R11)(AX*1), DX
	MOVL  DX, 12(DI)
	MOVL  (R12)(AX*1), DX
	MOVL  DX, 16(DI)
	MOVL  (R13)(AX*1), DX
	MOVL  DX, 20(DI)
	ADDQ  $4, AX
	ADDQ  $24, DI
	DECQ  CX
	JMP   packtail

packdone:
	VZEROUPPER
	RET

// The AVX-512 micro-kernel: a 12x32 tile of C in 24 ZMM accumulators (row r in Z(2r) and
// Z(2r+1)), fed by two of the 6-row A panels and two of the 16-column B panels that the AVX2
// kernel reads, so that packing is the same for both. Every k step loads 32 values of B,
// broadcasts 12 values of A and issues 24 FMAs. Each accumulator lane is one output element,
// updated by one FMA per k in order, exactly as in the 6x16 kernel: both give the same bits.

// KSTEP512(aoff, boff) does the FMAs of one k: A values at aoff(AX) (rows 0-5) and aoff(R11)
// (rows 6-11), B values at boff(BX) (columns 0-15) and boff(R12) (columns 16-31).
#define KSTEP512(aoff, boff) \
	VMOVUPS      boff(BX), Z24; \
	VMOVUPS      boff(R12), Z25; \
	VBROADCASTSS aoff(AX), Z26; \
	VBROADCASTSS aoff+4(AX), Z27; \
	VBROADCASTSS aoff+8(AX), Z28; \
	VFMADD231PS  Z24, Z26, Z0; \
	VFMADD231PS  Z25, Z26, Z1; \
	VFMADD231PS  Z24, Z27, Z2; \
	VFMADD231PS  Z25, Z27, Z3; \
	VFMADD231PS  Z24, Z28, Z4; \
	VFMADD231PS  Z25, Z28, Z5; \
	VBROADCASTSS aoff+12(AX), Z29; \
	VBROADCASTSS aoff+16(AX), Z30; \
	VBROADCASTSS aoff+20(AX), Z31; \
	VFMADD231PS  Z24, Z29, Z6; \
	VFMADD231PS  Z25, Z29, Z7; \
	VFMADD231PS  Z24, Z30, Z8; \
	VFMADD231PS  Z25, Z30, Z9; \
	VFMADD231PS  Z24, Z31, Z10; \
	VFMADD231PS  Z25, Z31, Z11; \
	VBROADCASTSS aoff(R11), Z26; \
	VBROADCASTSS aoff+4(R11), Z27; \
	VBROADCASTSS aoff+8(R11), Z28; \
	VFMADD231PS  Z24, Z26, Z12; \
	VFMADD231PS  Z25, Z26, Z13; \
	VFMADD231PS  Z24, Z27, Z14; \
	VFMADD231PS  Z25, Z27, Z15; \
	VFMADD231PS  Z24, Z28, Z16; \
	VFMADD231PS  Z25, Z28, Z17; \
	VBROADCASTSS aoff+12(R11), Z29; \
	VBROADCASTSS aoff+16(R11), Z30; \
	VBROADCASTSS aoff+20(R11), Z31; \
	VFMADD231PS  Z24, Z29, Z18; \
	VFMADD231PS  Z25, Z29, Z19; \
	VFMADD231PS  Z24, Z30, Z20; \
	VFMADD231PS  Z25, Z30, Z21; \
	VFMADD231PS  Z24, Z31, Z22; \
	VFMADD231PS  Z25, Z31, Z23

// LOADROW512(z0, z1) loads row SI of init into z0, z1 and steps SI to the next row.
#define LOADROW512(z0, z1) \
	VMOVUPS (SI), z0; \
	VMOVUPS 64(SI), z1; \
	ADDQ    DI, SI

// STOREROW512(z0, z1) stores z0, z1 to row DX of C and steps DX to the next row.
#define STOREROW512(z0, z1) \
	VMOVUPS z0, (DX); \
	VMOVUPS z1, 64(DX); \
	ADDQ    R8, DX

// func sgemmKernel12x32(kc int, a, b, c *float32, ldc int, init *float32, initStride int)
//
// With a2 = a + 6*kc and b2 = b + 16*kc (the next A and B panels):
// c[r*ldc+j] = init[r*initStride+j] + sum over k < kc of A(r,k)*B(k,j) for r < 12, j < 32, where
// A(r,k) is a[6k+r] for r < 6 and a2[6k+r-6] after, and B(k,j) is b[16k+j] for j < 16 and
// b2[16k+j-16] after. init may be c (accumulate), a bias row with initStride 0, or zeros.
TEXT ·sgemmKernel12x32(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	MOVQ init+40(FP), SI
	MOVQ initStride+48(FP), DI
	SHLQ $2, R8
	SHLQ $2, DI

	// R11 = a + 24*kc bytes (the second A panel), R12 = b + 64*kc bytes (the second B panel).
	LEAQ (CX)(CX*2), R11
	SHLQ $3, R11
	ADDQ AX, R11
	MOVQ CX, R12
	SHLQ $6, R12
	ADDQ BX, R12

	LOADROW512(Z0, Z1)
	LOADROW512(Z2, Z3)
	LOADROW512(Z4, Z5)
	LOADROW512(Z6, Z7)
	LOADROW512(Z8, Z9)
	LOADROW512(Z10, Z11)
	LOADROW512(Z12, Z13)
	LOADROW512(Z14, Z15)
	LOADROW512(Z16, Z17)
	LOADROW512(Z18, Z19)
	LOADROW512(Z20, Z21)
	LOADROW512(Z22, Z23)

	CMPQ CX, $2
	JLT  tail512

loop512:
	KSTEP512(0, 0)
	KSTEP512(24, 64)
	ADDQ $48, AX
	ADDQ $48, R11
	ADDQ $128, BX
	ADDQ $128, R12
	SUBQ $2, CX
	CMPQ CX, $2
	JGE  loop512

tail512:
	TESTQ CX, CX
	JEQ   store512
	KSTEP512(0, 0)

store512:
	STOREROW512(Z0, Z1)
	STOREROW512(Z2, Z3)
	STOREROW512(Z4, Z5)
	STOREROW512(Z6, Z7)
	STOREROW512(Z8, Z9)
	STOREROW512(Z10, Z11)
	STOREROW512(Z12, Z13)
	STOREROW512(Z14, Z15)
	STOREROW512(Z16, Z17)
	STOREROW512(Z18, Z19)
	STOREROW512(Z20, Z21)
	STOREROW512(Z22, Z23)
	VZEROUPPER
	RET
