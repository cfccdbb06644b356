// int8 inference (backend.Ops.MatmulForwardInt8). A weight(OC,C) is quantized once, on the host,
// by backend.QuantizeRowInt8: rows of stride bytes (C int8 values, zero padded to a multiple of
// 16) and one float scale per row. Each product quantizes its input rows the same way on the
// GPU (quantize_rows_int8), takes the dot products with dp4a (four int8 products added to an
// int32 per instruction, sm_61 and newer) and scales them (matmul_int8). The int32 sums are exact,
// and every float step is one IEEE operation rounded to nearest even (no fused multiply-add), so
// the outputs are the CPU backend's bits.

// quantize_rows_int8: each row n of x(N,C) becomes q(N,stride) (int8, zero from C to stride) and
// scales(N), as backend.QuantizeRowInt8 does it: amax = max |x| (exact in any order), inv =
// 127/amax, q = rint(x*inv) clamped to [-127, 127] (the product rounded to float first), scale =
// amax/127. Its edge cases too: an all-zero row gets q = 0, scale 0; a row holding NaN or Inf
// (its amax taken as Inf here: fmaxf would drop a NaN) gets q = 0, scale NaN; a row with amax
// below 2^-64 is multiplied by 2^64 first (exact) so that 127/amax stays finite. One block per row.
template <typename X>
__device__ __forceinline__ void quantize_rows_int8_t(signed char* q, float* scales, const X* x, int C, int stride) {
    __shared__ float part[32];
    int n = blockIdx.x;
    const X* row = x + (long)n * C;
    float m = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float a = fabsf(ld(row + c));
        m = a <= 3.40282347e+38f ? fmaxf(m, a) : INFINITY; // NaN and Inf make the row's max Inf
    }
    m = warp_max(m);
    if (threadIdx.x % WARP == 0) part[threadIdx.x / WARP] = m;
    __syncthreads();
    if (threadIdx.x < WARP) {
        m = warp_max(threadIdx.x < blockDim.x / WARP ? part[threadIdx.x] : 0.0f);
        if (threadIdx.x == 0) part[0] = m;
    }
    __syncthreads();
    float amax = part[0];
    bool zero = amax == 0.0f || amax == INFINITY;      // q = 0
    bool tiny = amax < 5.42101086e-20f;                // 2^-64: scaled by 2^64 first
    float up = tiny ? 1.8446744e+19f : 1.0f;           // 2^64 or 1
    float inv = zero ? 0.0f : __fdiv_rn(127.0f, __fmul_rn(amax, up));
    signed char* qrow = q + (long)n * stride;
    for (int c = threadIdx.x; c < stride; c += blockDim.x) {
        float r = c < C && !zero ? rintf(__fmul_rn(__fmul_rn(ld(row + c), up), inv)) : 0.0f;
        qrow[c] = (signed char)(int)fminf(127.0f, fmaxf(-127.0f, r));
    }
    if (threadIdx.x == 0) scales[n] = amax == 0.0f ? 0.0f : amax == INFINITY ? __int_as_float(0x7fc00000) : __fdiv_rn(amax, 127.0f);
}

// dp4a adds the four products of a's and b's signed bytes to c (PTX dp4a, sm_61 and newer; the
// __dp4a intrinsic lives in a header these kernels do without).
__device__ __forceinline__ int dp4a(int a, int b, int c) {
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// INT8_ROWS is how many input rows each warp takes against its weight row.
#define INT8_ROWS 8

// matmul_int8: out(N,OC) = float(sum_c xq[n,c]*wq[oc,c]) * (xs[n]*ws[oc]) + bias[oc], rounded in
// that order; bias may be null. xq(N,stride), xs(N) from quantize_rows_int8; wq(OC,stride), ws(OC)
// the quantized weight. Each warp takes one weight row oc and INT8_ROWS input rows, its lanes
// striding over the row in 16-byte pieces (the reads of a weight row coalesce; the input rows,
// shared by the block's warps, come through L1). The 1-D grid is ceil(OC/warps) x
// ceil(N/INT8_ROWS) blocks, the weight rows varying fastest.
template <typename X>
__device__ __forceinline__ void matmul_int8_t(X* out, const signed char* xq, const float* xs, const signed char* wq,
                                              const float* ws, const X* bias, int N, int OC, int stride) {
    int warps = blockDim.x / WARP, warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int ocBlocks = (OC + warps - 1) / warps;
    int oc = (blockIdx.x % ocBlocks) * warps + warp;
    int n0 = (blockIdx.x / ocBlocks) * INT8_ROWS;
    if (oc >= OC) return; // the whole warp: no shuffle below misses a lane
    int rows = min(INT8_ROWS, N - n0);
    const int4* w = reinterpret_cast<const int4*>(wq + (long)oc * stride);
    const int4* x = reinterpret_cast<const int4*>(xq + (long)n0 * stride);
    int pieces = stride / 16;
    int acc[INT8_ROWS];
#pragma unroll
    for (int r = 0; r < INT8_ROWS; r++) acc[r] = 0;
    for (int i = lane; i < pieces; i += WARP) {
        int4 wv = w[i];
#pragma unroll
        for (int r = 0; r < INT8_ROWS; r++) {
            if (r < rows) {
                int4 xv = x[(long)r * pieces + i];
                acc[r] = dp4a(xv.x, wv.x, acc[r]);
                acc[r] = dp4a(xv.y, wv.y, acc[r]);
                acc[r] = dp4a(xv.z, wv.z, acc[r]);
                acc[r] = dp4a(xv.w, wv.w, acc[r]);
            }
        }
    }
    int mine = 0; // lane r keeps row r's total
#pragma unroll
    for (int r = 0; r < INT8_ROWS; r++) {
        int s = acc[r];
        for (int o = WARP / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == r) mine = s;
    }
    if (lane < rows) {
        int n = n0 + lane;
        float v = __fmul_rn(__int2float_rn(mine), __fmul_rn(xs[n], ws[oc]));
        if (bias) v = __fadd_rn(v, ld(bias + oc));
        st(out + (long)n * OC + oc, v);
    }
}

#define INT8_KERNELS(X, S)                                                                                               \
    extern "C" __global__ void quantize_rows_int8##S(signed char* q, float* scales, const X* x, int C, int stride) {      \
        quantize_rows_int8_t(q, scales, x, C, stride);                                                                   \
    }                                                                                                                    \
    extern "C" __global__ void matmul_int8##S(X* out, const signed char* xq, const float* xs, const signed char* wq,     \
                                              const float* ws, const X* bias, int N, int OC, int stride) {              \
        matmul_int8_t(out, xq, xs, wq, ws, bias, N, OC, stride);                                                        \
    }
X_VARIANTS(INT8_KERNELS)
