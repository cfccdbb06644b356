//go:build amd64

#include "textflag.h"

// AVX2+FMA kernels for the elementwise ops (elem_amd64.go declares them; elem.go holds the pure-Go
// versions they are tested against). Every kernel takes element counts that are multiples of its
// vector width; the Go callers finish ragged tails.

// SPLAT fills 32 bytes of elemConsts at off with the float32 whose bits are v.
#define SPLAT(off, v) \
	DATA elemConsts<>+(off)(SB)/4, v; DATA elemConsts<>+(off+4)(SB)/4, v; \
	DATA elemConsts<>+(off+8)(SB)/4, v; DATA elemConsts<>+(off+12)(SB)/4, v; \
	DATA elemConsts<>+(off+16)(SB)/4, v; DATA elemConsts<>+(off+20)(SB)/4, v; \
	DATA elemConsts<>+(off+24)(SB)/4, v; DATA elemConsts<>+(off+28)(SB)/4, v

SPLAT(0, $0x42b0c0a5) // EXP_HI = 88.37625885009766: upper clamp: exp(88.376) is below 2^127.5 so 2^n stays a normal float
SPLAT(32, $0xc2ad47ae) // EXP_LO = -86.63999938964844: lower clamp: exp(-86.64) ~ 2.4e-38 keeps 2^n normal
SPLAT(64, $0x3fb8aa3b) // EXP_LOG2E = 1.4426950216293335: log2(e)
SPLAT(96, $0x3f318000) // EXP_C1 = 0.693359375: ln 2, high part (exact in 9 bits, so n*C1 is exact)
SPLAT(128, $0xb95e8083) // EXP_C2 = -0.00021219444170128554: ln 2 - C1
SPLAT(160, $0x39506967) // EXP_P0 = 0.00019875691214110702: Cephes expf polynomial
SPLAT(192, $0x3ab743ce) // EXP_P1 = 0.001398199936375022
SPLAT(224, $0x3c088908) // EXP_P2 = 0.008333452045917511
SPLAT(256, $0x3d2aa9c1) // EXP_P3 = 0.04166579619050026
SPLAT(288, $0x3e2aaaaa) // EXP_P4 = 0.1666666567325592
SPLAT(320, $0x3f000000) // EXP_P5 = 0.5
SPLAT(352, $0x3f800000) // ONE = 1.0
SPLAT(384, $0xbfcc422a) // GELU_A = -1.5957691669464111: -2*sqrt(2/pi)
SPLAT(416, $0xbd922279) // GELU_B = -0.07135481387376785: -2*sqrt(2/pi)*0.044715
SPLAT(448, $0x3fcc422a) // GELU_DA = 1.5957691669464111: 2*sqrt(2/pi)
SPLAT(480, $0x3e5b33b6) // GELU_DB = 0.21406444907188416: 2*sqrt(2/pi)*3*0.044715
SPLAT(512, $0x41a00000) // GELU_LIMIT = 20: gelu' is 1 above it (geluLimit in elem.go)
SPLAT(544, $0xc1a00000) // GELU_NEG_LIMIT = -20: and 0 below this
#define EXP_HI elemConsts<>+0(SB)
#define EXP_LO elemConsts<>+32(SB)
#define EXP_LOG2E elemConsts<>+64(SB)
#define EXP_C1 elemConsts<>+96(SB)
#define EXP_C2 elemConsts<>+128(SB)
#define EXP_P0 elemConsts<>+160(SB)
#define EXP_P1 elemConsts<>+192(SB)
#define EXP_P2 elemConsts<>+224(SB)
#define EXP_P3 elemConsts<>+256(SB)
#define EXP_P4 elemConsts<>+288(SB)
#define EXP_P5 elemConsts<>+320(SB)
#define ONE elemConsts<>+352(SB)
#define GELU_A elemConsts<>+384(SB)
#define GELU_B elemConsts<>+416(SB)
#define GELU_DA elemConsts<>+448(SB)
#define GELU_DB elemConsts<>+480(SB)
#define GELU_LIMIT elemConsts<>+512(SB)
#define GELU_NEG_LIMIT elemConsts<>+544(SB)
GLOBL elemConsts<>(SB), RODATA|NOPTR, $576

// EXP sets X = exp(X) for 8 float32 lanes (Cephes expf: n = round(x*log2e), r = x - n*ln2 in two
// parts, e^r by a degree-7 polynomial, then 2^n added into the exponent bits), clobbering N and T.
// The clamps keep NaN in X (VMINPS/VMAXPS return their second source, X, for NaN).
#define EXP(X, N, T) \
	VMOVUPS      EXP_HI, T; \
	VMINPS       X, T, X; \
	VMOVUPS      EXP_LO, T; \
	VMAXPS       X, T, X; \
	VMULPS       EXP_LOG2E, X, N; \
	VROUNDPS     $0, N, N; \
	VFNMADD231PS EXP_C1, N, X; \
	VFNMADD231PS EXP_C2, N, X; \
	VMOVUPS      EXP_P0, T; \
	VFMADD213PS  EXP_P1, X, T; \
	VFMADD213PS  EXP_P2, X, T; \
	VFMADD213PS  EXP_P3, X, T; \
	VFMADD213PS  EXP_P4, X, T; \
	VFMADD213PS  EXP_P5, X, T; \
	VFMADD213PS  ONE, X, T; \
	VFMADD213PS  ONE, X, T; \
	VCVTPS2DQ    N, N; \
	VPSLLD       $23, N, N; \
	VPADDD       N, T, X

// func lseLanesAVX2(x *float32, n int, m, s *[8]float32)
// Online log-sum-exp over x[0:n], n a multiple of 32, in 8 lanes: lane l sees the elements with
// index = l mod 8. m holds each lane's running maximum, s its sum of exp(x - m); both are read and
// updated. A lane's sum is rescaled only when a block of 32 raises its maximum.
TEXT ·lseLanesAVX2(SB), NOSPLIT, $0-32
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	MOVQ    m+16(FP), DI
	MOVQ    s+24(FP), DX
	VMOVUPS (DI), Y0             // running max
	VMOVUPS (DX), Y1             // four partial sums
	VXORPS  Y2, Y2, Y2
	VXORPS  Y3, Y3, Y3
	VXORPS  Y4, Y4, Y4

lseLoop:
	CMPQ    CX, $32
	JLT     lseDone
	VMOVUPS (SI), Y5
	VMOVUPS 32(SI), Y6
	VMOVUPS 64(SI), Y7
	VMOVUPS 96(SI), Y8
	VMAXPS  Y6, Y5, Y9
	VMAXPS  Y8, Y7, Y10
	VMAXPS  Y10, Y9, Y9
	VMAXPS  Y9, Y0, Y9           // new max
	VCMPPS  $0x1e, Y0, Y9, Y10   // new > old (ordered)
	VMOVMSKPS Y10, AX
	TESTL   AX, AX
	JZ      lseSum
	VSUBPS  Y9, Y0, Y11
	EXP(Y11, Y12, Y13)
	VMULPS  Y11, Y1, Y1
	VMULPS  Y11, Y2, Y2
	VMULPS  Y11, Y3, Y3
	VMULPS  Y11, Y4, Y4
	VMOVAPS Y9, Y0

lseSum:
	VSUBPS  Y0, Y5, Y5
	EXP(Y5, Y12, Y13)
	VADDPS  Y5, Y1, Y1
	VSUBPS  Y0, Y6, Y6
	EXP(Y6, Y14, Y15)
	VADDPS  Y6, Y2, Y2
	VSUBPS  Y0, Y7, Y7
	EXP(Y7, Y12, Y13)
	VADDPS  Y7, Y3, Y3
	VSUBPS  Y0, Y8, Y8
	EXP(Y8, Y14, Y15)
	VADDPS  Y8, Y4, Y4
	ADDQ    $128, SI
	SUBQ    $32, CX
	JMP     lseLoop

lseDone:
	VADDPS  Y2, Y1, Y1
	VADDPS  Y4, Y3, Y3
	VADDPS  Y3, Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, (DX)
	VZEROUPPER
	RET

// func expShiftScaleAVX2(dst, x *float32, n int, shift, scale float32)
// dst[i] = exp(x[i] - shift) * scale for i < n, n a multiple of 8; dst may be x.
TEXT ·expShiftScaleAVX2(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS shift+24(FP), Y8
	VBROADCASTSS scale+28(FP), Y9

essLoop16:
	CMPQ    CX, $16
	JLT     essLoop8
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y3
	VSUBPS  Y8, Y0, Y0
	VSUBPS  Y8, Y3, Y3
	EXP(Y0, Y1, Y2)
	EXP(Y3, Y4, Y5)
	VMULPS  Y9, Y0, Y0
	VMULPS  Y9, Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     essLoop16

essLoop8:
	CMPQ    CX, $8
	JLT     essDone
	VMOVUPS (SI), Y0
	VSUBPS  Y8, Y0, Y0
	EXP(Y0, Y1, Y2)
	VMULPS  Y9, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     essLoop8

essDone:
	VZEROUPPER
	RET

// GELU_FWD sets Y = gelu(X) = x / (1 + exp(x*(GELU_A + GELU_B*x^2))), clobbering N and T.
#define GELU_FWD(X, Y, N, T) \
	VMULPS      X, X, Y; \
	VMOVUPS     GELU_B, T; \
	VFMADD213PS GELU_A, Y, T; \
	VMULPS      X, T, Y; \
	EXP(Y, N, T); \
	VADDPS      ONE, Y, Y; \
	VDIVPS      Y, X, Y

// func geluForwardAVX2(y, x *float32, n int)
// y[i] = gelu(x[i]) for i < n, n a multiple of 8.
TEXT ·geluForwardAVX2(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX

gfLoop16:
	CMPQ    CX, $16
	JLT     gfLoop8
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y4
	GELU_FWD(Y0, Y1, Y2, Y3)
	GELU_FWD(Y4, Y5, Y6, Y7)
	VMOVUPS Y1, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     gfLoop16

gfLoop8:
	CMPQ    CX, $8
	JLT     gfDone
	VMOVUPS (SI), Y0
	GELU_FWD(Y0, Y1, Y2, Y3)
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     gfLoop8

gfDone:
	VZEROUPPER
	RET

// GELU_BWD sets D = gelu'(X) = s + x*e*s*s*(GELU_DA + GELU_DB*x^2) with
// e = exp(x*(GELU_A + GELU_B*x^2)) and s = 1/(1+e), then 1 where x > GELU_LIMIT and 0 where
// x < GELU_NEG_LIMIT (ordered compares: NaN stays NaN), clobbering X2, E, N and T.
#define GELU_BWD(X, D, X2, E, N, T) \
	VMULPS      X, X, X2; \
	VMOVUPS     GELU_B, T; \
	VFMADD213PS GELU_A, X2, T; \
	VMULPS      X, T, E; \
	EXP(E, N, T); \
	VADDPS      ONE, E, T; \
	VMOVUPS     ONE, D; \
	VDIVPS      T, D, D; \
	VMULPS      D, E, E; \
	VMOVUPS     GELU_DB, T; \
	VFMADD213PS GELU_DA, X2, T; \
	VMULPS      T, E, E; \
	VMULPS      X, E, E; \
	VFMADD213PS D, E, D; \
	VCMPPS      $0x1e, GELU_LIMIT, X, T; \
	VBLENDVPS   T, ONE, D, D; \
	VCMPPS      $0x11, GELU_NEG_LIMIT, X, T; \
	VANDNPS     D, T, D

// func geluBackwardAVX2(dx, x, dy *float32, n int)
// dx[i] = gelu'(x[i]) * dy[i] for i < n, n a multiple of 8.
TEXT ·geluBackwardAVX2(SB), NOSPLIT, $0-32
	MOVQ dx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), CX

gbLoop16:
	CMPQ        CX, $16
	JLT         gbLoop8
	VMOVUPS     (SI), Y0
	VMOVUPS     32(SI), Y6
	GELU_BWD(Y0, Y1, Y2, Y3, Y4, Y5)
	GELU_BWD(Y6, Y7, Y8, Y9, Y10, Y11)
	VMULPS      (DX), Y1, Y2
	VMULPS      32(DX), Y7, Y8
	VMOVUPS     Y2, (DI)
	VMOVUPS     Y8, 32(DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	ADDQ        $64, DX
	SUBQ        $16, CX
	JMP         gbLoop16

gbLoop8:
	CMPQ        CX, $8
	JLT         gbDone
	VMOVUPS     (SI), Y0
	GELU_BWD(Y0, Y1, Y2, Y3, Y4, Y5)
	VMULPS      (DX), Y1, Y2
	VMOVUPS     Y2, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, DX
	SUBQ        $8, CX
	JMP         gbLoop8

gbDone:
	VZEROUPPER
	RET

// The erf GELU's float64 constants, 4 lanes each (normalCDFPDF in gelu.go holds them too).
#define SPLAT64(off, v) \
	DATA erfConsts<>+(off)(SB)/8, v; DATA erfConsts<>+(off+8)(SB)/8, v; \
	DATA erfConsts<>+(off+16)(SB)/8, v; DATA erfConsts<>+(off+24)(SB)/8, v

SPLAT64(0, $0x7fffffffffffffff) // ERF_ABS: all bits but the sign
SPLAT64(32, $0xbfe0000000000000) // ERF_NEGHALF = -0.5
SPLAT64(64, $0xc060000000000000) // ERF_VMIN = -128
SPLAT64(96, $0x3ff71547652b82fe) // ERF_LOG2E = 1.4426950408889634
SPLAT64(128, $0x4338000000000000) // ERF_MAGIC = 6.755399441055744e+15
SPLAT64(160, $0x3fe62e42fee00000) // ERF_LN2HI = 0.6931471803691238
SPLAT64(192, $0x3dea39ef35793c76) // ERF_LN2LO = 1.9082149292705877e-10
SPLAT64(224, $0x3ec71de3a556c734) // ERF_E9 = 2.7557319223985893e-06
SPLAT64(256, $0x3efa01a01a01a01a) // ERF_E8 = 2.48015873015873e-05
SPLAT64(288, $0x3f2a01a01a01a01a) // ERF_E7 = 0.0001984126984126984
SPLAT64(320, $0x3f56c16c16c16c17) // ERF_E6 = 0.001388888888888889
SPLAT64(352, $0x3f81111111111111) // ERF_E5 = 0.008333333333333333
SPLAT64(384, $0x3fa5555555555555) // ERF_E4 = 0.041666666666666664
SPLAT64(416, $0x3fc5555555555555) // ERF_E3 = 0.16666666666666666
SPLAT64(448, $0x3fe0000000000000) // ERF_E2 = 0.5
SPLAT64(480, $0x3ff0000000000000) // ERF_E1 = 1
SPLAT64(512, $0x3ff0000000000000) // ERF_E0 = 1
SPLAT64(544, $0x00000000000003ff) // ERF_BIAS: 1023 as an int64
SPLAT64(576, $0x4030000000000000) // ERF_CUT = 16
SPLAT64(608, $0x3fd9884533d43651) // ERF_INVSQRT2PI = 0.3989422804014327
SPLAT64(640, $0x4010000000000000) // ERF_FOUR = 4
SPLAT64(672, $0x3f98834acc2d905d) // ERF_M13 = 0.023938339912448082
SPLAT64(704, $0xbfc8e99f4edf8ac4) // ERF_M12 = -0.1946295867083646
SPLAT64(736, $0x3fe59687dfaa280c) // ERF_M11 = 0.6746253364992767
SPLAT64(768, $0xbff481481d6a02f8) // ERF_M10 = -1.2815629147518717
SPLAT64(800, $0x3ff7918ff8c47bbc) // ERF_M9 = 1.473037692783449
SPLAT64(832, $0xbff2fd09d5c834a7) // ERF_M8 = -1.1867769575940572
SPLAT64(864, $0x3fe89e4c978727f2) // ERF_M7 = 0.7693236312418306
SPLAT64(896, $0xbfc9bac42147f386) // ERF_M6 = -0.20101215004970302
SPLAT64(928, $0x3fd0903eccada5c2) // ERF_M5 = 0.2588040350734354
SPLAT64(960, $0x3fc70005c364c60c) // ERF_M4 = 0.17968818703370493
SPLAT64(992, $0x3fce803f6601b560) // ERF_M3 = 0.23828880768580074
SPLAT64(1024, $0x3fcff19d73ebb344) // ERF_M2 = 0.24956100616636878
SPLAT64(1056, $0x3fd0007c38f123d2) // ERF_M1 = 0.2500296169351347
SPLAT64(1088, $0xbeae6e4ca5c00000) // ERF_M0 = -9.069102122616357e-07
SPLAT64(1120, $0x3ff0000000000000) // ERF_ONE = 1
#define ERF_ABS erfConsts<>+0(SB)
#define ERF_NEGHALF erfConsts<>+32(SB)
#define ERF_VMIN erfConsts<>+64(SB)
#define ERF_LOG2E erfConsts<>+96(SB)
#define ERF_MAGIC erfConsts<>+128(SB)
#define ERF_LN2HI erfConsts<>+160(SB)
#define ERF_LN2LO erfConsts<>+192(SB)
#define ERF_E9 erfConsts<>+224(SB)
#define ERF_E8 erfConsts<>+256(SB)
#define ERF_E7 erfConsts<>+288(SB)
#define ERF_E6 erfConsts<>+320(SB)
#define ERF_E5 erfConsts<>+352(SB)
#define ERF_E4 erfConsts<>+384(SB)
#define ERF_E3 erfConsts<>+416(SB)
#define ERF_E2 erfConsts<>+448(SB)
#define ERF_E1 erfConsts<>+480(SB)
#define ERF_E0 erfConsts<>+512(SB)
#define ERF_BIAS erfConsts<>+544(SB)
#define ERF_CUT erfConsts<>+576(SB)
#define ERF_INVSQRT2PI erfConsts<>+608(SB)
#define ERF_FOUR erfConsts<>+640(SB)
#define ERF_M13 erfConsts<>+672(SB)
#define ERF_M12 erfConsts<>+704(SB)
#define ERF_M11 erfConsts<>+736(SB)
#define ERF_M10 erfConsts<>+768(SB)
#define ERF_M9 erfConsts<>+800(SB)
#define ERF_M8 erfConsts<>+832(SB)
#define ERF_M7 erfConsts<>+864(SB)
#define ERF_M6 erfConsts<>+896(SB)
#define ERF_M5 erfConsts<>+928(SB)
#define ERF_M4 erfConsts<>+960(SB)
#define ERF_M3 erfConsts<>+992(SB)
#define ERF_M2 erfConsts<>+1024(SB)
#define ERF_M1 erfConsts<>+1056(SB)
#define ERF_M0 erfConsts<>+1088(SB)
#define ERF_ONE erfConsts<>+1120(SB)
GLOBL erfConsts<>(SB), RODATA|NOPTR, $1152

// ERF_PHI sets PHI = Phi(x) and G = phi(x) for 4 float64 lanes X with exactly the operations of
// normalCDFPDF (gelu.go), in its order, so both give the same bits; A, R, K, T and P are
// clobbered. Phi(-|x|) = phi(|x|)*m(|x|): exp(-x*x/2) by k = round(v*log2e), r = v - k*ln2 and
// e^r's Taylor series, zeroed for |x| >= 16 (and NaN); m by a polynomial in t = 4/(4+|x|). Phi is
// Phi(-|x|) where x's sign bit is set (VBLENDVPD reads it), else 1 - Phi(-|x|). For NaN x, VMAXPD
// and VMINPD give -128 and 16 where Go's max and min give NaN: the |x| < 16 mask zeroes phi there
// either way, and the result is NaN in both.
#define ERF_PHI(X, PHI, G, A, R, K, T, P) \
	VANDPD       ERF_ABS, X, A; \
	VMULPD       X, X, R; \
	VMULPD       ERF_NEGHALF, R, R; \
	VMAXPD       ERF_VMIN, R, R; \
	VMOVUPD      ERF_MAGIC, K; \
	VFMADD231PD  ERF_LOG2E, R, K; \
	VSUBPD       ERF_MAGIC, K, T; \
	VFNMADD231PD ERF_LN2HI, T, R; \
	VFNMADD231PD ERF_LN2LO, T, R; \
	VMOVUPD      ERF_E9, P; \
	VFMADD213PD  ERF_E8, R, P; \
	VFMADD213PD  ERF_E7, R, P; \
	VFMADD213PD  ERF_E6, R, P; \
	VFMADD213PD  ERF_E5, R, P; \
	VFMADD213PD  ERF_E4, R, P; \
	VFMADD213PD  ERF_E3, R, P; \
	VFMADD213PD  ERF_E2, R, P; \
	VFMADD213PD  ERF_E1, R, P; \
	VFMADD213PD  ERF_E0, R, P; \
	VPADDQ       ERF_BIAS, K, K; \
	VPSLLQ       $52, K, K; \
	VMULPD       K, P, P; \
	VCMPPD       $0x11, ERF_CUT, A, K; \
	VANDPD       K, P, G; \
	VMULPD       ERF_INVSQRT2PI, G, G; \
	VMINPD       ERF_CUT, A, T; \
	VADDPD       ERF_FOUR, T, T; \
	VMOVUPD      ERF_FOUR, P; \
	VDIVPD       T, P, T; \
	VMOVUPD      ERF_M13, P; \
	VFMADD213PD  ERF_M12, T, P; \
	VFMADD213PD  ERF_M11, T, P; \
	VFMADD213PD  ERF_M10, T, P; \
	VFMADD213PD  ERF_M9, T, P; \
	VFMADD213PD  ERF_M8, T, P; \
	VFMADD213PD  ERF_M7, T, P; \
	VFMADD213PD  ERF_M6, T, P; \
	VFMADD213PD  ERF_M5, T, P; \
	VFMADD213PD  ERF_M4, T, P; \
	VFMADD213PD  ERF_M3, T, P; \
	VFMADD213PD  ERF_M2, T, P; \
	VFMADD213PD  ERF_M1, T, P; \
	VFMADD213PD  ERF_M0, T, P; \
	VMULPD       G, P, P; \
	VMOVUPD      ERF_ONE, PHI; \
	VSUBPD       P, PHI, PHI; \
	VBLENDVPD    X, P, PHI, PHI

// ERF_GRAD sets GRAD = gelu'(x) = Phi + x*phi from ERF_PHI's results (geluErfGrad).
#define ERF_GRAD(X, PHI, G, GRAD) \
	VMOVAPD     PHI, GRAD; \
	VFMADD231PD X, G, GRAD

// func normalCDFPDFAVX2(cdf, pdf, grad *float64, x *float32, n int)
// cdf[i], pdf[i] = ERF_PHI(x[i]) and grad[i] = ERF_GRAD for i < n, n a multiple of 4: the float64
// values the GELU kernels round, for TestGeluErfKernels to compare with normalCDFPDF's and
// geluErfGrad's bit for bit.
TEXT ·normalCDFPDFAVX2(SB), NOSPLIT, $0-40
	MOVQ cdf+0(FP), DI
	MOVQ pdf+8(FP), DX
	MOVQ grad+16(FP), R8
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), CX

ncLoop:
	CMPQ      CX, $4
	JLT       ncDone
	VCVTPS2PD (SI), Y0
	ERF_PHI(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	ERF_GRAD(Y0, Y1, Y2, Y8)
	VMOVUPD   Y1, (DI)
	VMOVUPD   Y2, (DX)
	VMOVUPD   Y8, (R8)
	ADDQ      $16, SI
	ADDQ      $32, DI
	ADDQ      $32, DX
	ADDQ      $32, R8
	SUBQ      $4, CX
	JMP       ncLoop

ncDone:
	VZEROUPPER
	RET

// func geluErfForwardAVX2(y, x *float32, n int)
// y[i] = x[i]*Phi(x[i]) for i < n, n a multiple of 8, in float64 rounded once (as geluErfForwardGo).
TEXT ·geluErfForwardAVX2(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX

efLoop:
	CMPQ       CX, $8
	JLT        efDone
	VCVTPS2PD  (SI), Y0
	VCVTPS2PD  16(SI), Y8
	ERF_PHI(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	ERF_PHI(Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15)
	VMULPD     Y1, Y0, Y1
	VMULPD     Y9, Y8, Y9
	VCVTPD2PSY Y1, X1
	VCVTPD2PSY Y9, X9
	VMOVUPS    X1, (DI)
	VMOVUPS    X9, 16(DI)
	ADDQ       $32, SI
	ADDQ       $32, DI
	SUBQ       $8, CX
	JMP        efLoop

efDone:
	VZEROUPPER
	RET

// func geluErfBackwardAVX2(dx, x, dy *float32, n int)
// dx[i] = (Phi(x) + x*phi(x)) * dy[i] for x = x[i], i < n, n a multiple of 8 (as
// geluErfBackwardGo); dx may be dy.
TEXT ·geluErfBackwardAVX2(SB), NOSPLIT, $0-32
	MOVQ dx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), CX

ebLoop:
	CMPQ        CX, $8
	JLT         ebDone
	VCVTPS2PD   (SI), Y0
	VCVTPS2PD   16(SI), Y8
	ERF_PHI(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	ERF_PHI(Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15)
	ERF_GRAD(Y0, Y1, Y2, Y4)
	ERF_GRAD(Y8, Y9, Y10, Y12)
	VCVTPS2PD   (DX), Y3
	VCVTPS2PD   16(DX), Y11
	VMULPD      Y3, Y4, Y1
	VMULPD      Y11, Y12, Y9
	VCVTPD2PSY  Y1, X1
	VCVTPD2PSY  Y9, X9
	VMOVUPS     X1, (DI)
	VMOVUPS     X9, 16(DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, DX
	SUBQ        $8, CX
	JMP         ebLoop

ebDone:
	VZEROUPPER
	RET

// func adamWAVX2(w, grad, m, v *float32, n int, k *adamWConsts)
// One AdamW step over n elements (a multiple of 8) with the same float32 operations, in the same
// order and without fused multiply-adds, as adamWGo, so both give identical bits.
TEXT ·adamWAVX2(SB), NOSPLIT, $0-48
	MOVQ         w+0(FP), DI
	MOVQ         grad+8(FP), SI
	MOVQ         m+16(FP), R8
	MOVQ         v+24(FP), R9
	MOVQ         n+32(FP), CX
	MOVQ         k+40(FP), AX
	VBROADCASTSS 0(AX), Y7       // gradScale
	VBROADCASTSS 4(AX), Y8       // decay = lr*weightDecay
	VBROADCASTSS 8(AX), Y9       // beta1
	VBROADCASTSS 12(AX), Y10     // 1-beta1
	VBROADCASTSS 16(AX), Y11     // beta2
	VBROADCASTSS 20(AX), Y12     // 1-beta2
	VBROADCASTSS 24(AX), Y13     // sqrt(1-beta2^t)
	VBROADCASTSS 28(AX), Y14     // eps
	VBROADCASTSS 32(AX), Y15     // lr/(1-beta1^t)

adamLoop:
	CMPQ    CX, $8
	JLT     adamDone
	VMULPS  (SI), Y7, Y0         // g
	VMOVUPS (DI), Y1             // p
	VMULPS  Y1, Y8, Y2
	VSUBPS  Y2, Y1, Y1           // p -= decay*p
	VMULPS  (R8), Y9, Y3
	VMULPS  Y0, Y10, Y2
	VADDPS  Y2, Y3, Y3           // m = b1*m + (1-b1)*g
	VMULPS  (R9), Y11, Y4
	VMULPS  Y0, Y12, Y2
	VMULPS  Y0, Y2, Y2
	VADDPS  Y2, Y4, Y4           // v = b2*v + ((1-b2)*g)*g
	VMOVUPS Y3, (R8)
	VMOVUPS Y4, (R9)
	VSQRTPS Y4, Y5
	VDIVPS  Y13, Y5, Y5
	VADDPS  Y14, Y5, Y5          // denom = sqrt(v)/sqrt(bc2) + eps
	VDIVPS  Y5, Y3, Y6
	VMULPS  Y6, Y15, Y6
	VSUBPS  Y6, Y1, Y1           // p -= stepSize*(m/denom)
	VMOVUPS Y1, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	ADDQ    $32, R8
	ADDQ    $32, R9
	SUBQ    $8, CX
	JMP     adamLoop

adamDone:
	VZEROUPPER
	RET

// func sumSquaresAVX2(x *float32, n int, acc *[16]float64)
// acc[i%16] += float64(x[i])^2 for i < n, n a multiple of 16. The products are exact in float64,
// so the fused multiply-add gives the same bits as a multiply and an add.
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-24
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	MOVQ    acc+16(FP), DI
	VMOVUPD (DI), Y4
	VMOVUPD 32(DI), Y5
	VMOVUPD 64(DI), Y6
	VMOVUPD 96(DI), Y7

ssLoop:
	CMPQ        CX, $16
	JLT         ssDone
	VCVTPS2PD   (SI), Y0
	VCVTPS2PD   16(SI), Y1
	VCVTPS2PD   32(SI), Y2
	VCVTPS2PD   48(SI), Y3
	VFMADD231PD Y0, Y0, Y4
	VFMADD231PD Y1, Y1, Y5
	VFMADD231PD Y2, Y2, Y6
	VFMADD231PD Y3, Y3, Y7
	ADDQ        $64, SI
	SUBQ        $16, CX
	JMP         ssLoop

ssDone:
	VMOVUPD Y4, (DI)
	VMOVUPD Y5, 32(DI)
	VMOVUPD Y6, 64(DI)
	VMOVUPD Y7, 96(DI)
	VZEROUPPER
	RET

// HSUM sets the low float32 of X (a Y register's low half) to the sum of Y's 8 lanes, clobbering T
// (an X register).
#define HSUM(Y, X, T) \
	VEXTRACTF128 $1, Y, T; \
	VADDPS       T, X, X; \
	VMOVHLPS     X, T, T; \
	VADDPS       T, X, X; \
	VMOVSHDUP    X, T; \
	VADDSS       T, X, X

// func sumAVX2(x *float32, n int) float32
// Sum of x[0:n], n a multiple of 8, in two 8-lane partial sums (16 elements per step).
TEXT ·sumAVX2(SB), NOSPLIT, $0-20
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

sumLoop16:
	CMPQ   CX, $16
	JLT    sumLoop8
	VADDPS (SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	ADDQ   $64, SI
	SUBQ   $16, CX
	JMP    sumLoop16

sumLoop8:
	CMPQ   CX, $8
	JLT    sumDone
	VADDPS (SI), Y0, Y0
	ADDQ   $32, SI
	SUBQ   $8, CX
	JMP    sumLoop8

sumDone:
	VADDPS Y1, Y0, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func sumSqDevAVX2(x *float32, n int, m float32) float32
// Sum of (x[i]-m)^2 for i < n, n a multiple of 8, in two 8-lane partial sums.
TEXT ·sumSqDevAVX2(SB), NOSPLIT, $0-28
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS m+16(FP), Y8
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1

ssdLoop16:
	CMPQ        CX, $16
	JLT         ssdLoop8
	VMOVUPS     (SI), Y2
	VMOVUPS     32(SI), Y3
	VSUBPS      Y8, Y2, Y2
	VSUBPS      Y8, Y3, Y3
	VFMADD231PS Y2, Y2, Y0
	VFMADD231PS Y3, Y3, Y1
	ADDQ        $64, SI
	SUBQ        $16, CX
	JMP         ssdLoop16

ssdLoop8:
	CMPQ        CX, $8
	JLT         ssdDone
	VMOVUPS     (SI), Y2
	VSUBPS      Y8, Y2, Y2
	VFMADD231PS Y2, Y2, Y0
	ADDQ        $32, SI
	SUBQ        $8, CX
	JMP         ssdLoop8

ssdDone:
	VADDPS Y1, Y0, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func lnApplyAVX2(y, x, w, b *float32, n int, m, s float32)
// y[i] = (x[i]-m)*s*w[i] + b[i] for i < n, n a multiple of 8.
TEXT ·lnApplyAVX2(SB), NOSPLIT, $0-48
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         w+16(FP), R8
	MOVQ         b+24(FP), R9
	MOVQ         n+32(FP), CX
	VBROADCASTSS m+40(FP), Y8
	VBROADCASTSS s+44(FP), Y9

lnaLoop:
	CMPQ        CX, $8
	JLT         lnaDone
	VMOVUPS     (SI), Y0
	VSUBPS      Y8, Y0, Y0
	VMULPS      Y9, Y0, Y0
	VMOVUPS     (R9), Y1
	VFMADD231PS (R8), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, R8
	ADDQ        $32, R9
	SUBQ        $8, CX
	JMP         lnaLoop

lnaDone:
	VZEROUPPER
	RET

// func lnBackwardSumsAVX2(dy, x, w *float32, n int, m, s float32) (sumG, sumGX float32)
// With g = dy*w and xhat = (x-m)*s: the sums of g and of g*xhat over i < n, n a multiple of 8.
TEXT ·lnBackwardSumsAVX2(SB), NOSPLIT, $0-48
	MOVQ         dy+0(FP), DX
	MOVQ         x+8(FP), SI
	MOVQ         w+16(FP), R8
	MOVQ         n+24(FP), CX
	VBROADCASTSS m+32(FP), Y8
	VBROADCASTSS s+36(FP), Y9
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1

lnbsLoop:
	CMPQ        CX, $8
	JLT         lnbsDone
	VMOVUPS     (DX), Y2
	VMULPS      (R8), Y2, Y2
	VADDPS      Y2, Y0, Y0
	VMOVUPS     (SI), Y3
	VSUBPS      Y8, Y3, Y3
	VMULPS      Y9, Y3, Y3
	VFMADD231PS Y3, Y2, Y1
	ADDQ        $32, DX
	ADDQ        $32, SI
	ADDQ        $32, R8
	SUBQ        $8, CX
	JMP         lnbsLoop

lnbsDone:
	HSUM(Y0, X0, X2)
	HSUM(Y1, X1, X2)
	VMOVSS X0, sumG+40(FP)
	VMOVSS X1, sumGX+44(FP)
	VZEROUPPER
	RET

// func lnBackwardApplyAVX2(dx, dy, x, w *float32, n int, m, s, meanG, meanGX float32)
// dx[i] += s * (dy[i]*w[i] - meanG - xhat*meanGX) with xhat = (x[i]-m)*s, for i < n, n a
// multiple of 8.
TEXT ·lnBackwardApplyAVX2(SB), NOSPLIT, $0-56
	MOVQ         dx+0(FP), DI
	MOVQ         dy+8(FP), DX
	MOVQ         x+16(FP), SI
	MOVQ         w+24(FP), R8
	MOVQ         n+32(FP), CX
	VBROADCASTSS m+40(FP), Y8
	VBROADCASTSS s+44(FP), Y9
	VBROADCASTSS meanG+48(FP), Y10
	VBROADCASTSS meanGX+52(FP), Y11

lnbaLoop:
	CMPQ         CX, $8
	JLT          lnbaDone
	VMOVUPS      (SI), Y0
	VSUBPS       Y8, Y0, Y0
	VMULPS       Y9, Y0, Y0          // xhat
	VMOVUPS      (DX), Y1
	VMULPS       (R8), Y1, Y1        // g = dy*w
	VSUBPS       Y10, Y1, Y1         // g - meanG
	VFNMADD231PS Y11, Y0, Y1         // - xhat*meanGX
	VMOVUPS      (DI), Y2
	VFMADD231PS  Y9, Y1, Y2          // dx += s*(...)
	VMOVUPS      Y2, (DI)
	ADDQ         $32, DI
	ADDQ         $32, DX
	ADDQ         $32, SI
	ADDQ         $32, R8
	SUBQ         $8, CX
	JMP          lnbaLoop

lnbaDone:
	VZEROUPPER
	RET

// func lnColumnsAVX2(dw, db, dy, x *float32, n int, m, s float32)
// db[i] += dy[i] and dw[i] += (x[i]-m)*s*dy[i] for i < n, n a multiple of 8.
TEXT ·lnColumnsAVX2(SB), NOSPLIT, $0-48
	MOVQ         dw+0(FP), DI
	MOVQ         db+8(FP), R9
	MOVQ         dy+16(FP), DX
	MOVQ         x+24(FP), SI
	MOVQ         n+32(FP), CX
	VBROADCASTSS m+40(FP), Y8
	VBROADCASTSS s+44(FP), Y9

lncLoop:
	CMPQ        CX, $8
	JLT         lncDone
	VMOVUPS     (DX), Y1
	VADDPS      (R9), Y1, Y2
	VMOVUPS     Y2, (R9)
	VMOVUPS     (SI), Y0
	VSUBPS      Y8, Y0, Y0
	VMULPS      Y9, Y0, Y0
	VMOVUPS     (DI), Y3
	VFMADD231PS Y1, Y0, Y3
	VMOVUPS     Y3, (DI)
	ADDQ        $32, DI
	ADDQ        $32, R9
	ADDQ        $32, DX
	ADDQ        $32, SI
	SUBQ        $8, CX
	JMP         lncLoop

lncDone:
	VZEROUPPER
	RET

// func addAVX2(y, a, b *float32, n int)
// y[i] = a[i] + b[i] for i < n, n a multiple of 8; y may be a or b.
TEXT ·addAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX

addLoop16:
	CMPQ    CX, $16
	JLT     addLoop8
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VADDPS  (DX), Y0, Y0
	VADDPS  32(DX), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	ADDQ    $64, DX
	SUBQ    $16, CX
	JMP     addLoop16

addLoop8:
	CMPQ    CX, $8
	JLT     addDone
	VMOVUPS (SI), Y0
	VADDPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	ADDQ    $32, DX
	SUBQ    $8, CX
	JMP     addLoop8

addDone:
	VZEROUPPER
	RET
