#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)

// The elementwise kernels below: each thread takes EW consecutive elements i0 = EW*(thread
// index) .. i0+EW-1 of its buffers, with one 16-byte access per buffer (two for fp32) when vec
// says every buffer starts on a 16-byte boundary and all EW are in range, else one element at
// a time (the buffer's tail, or views at odd offsets). Each element's value is the same either way.
#define EW 8

// ew_ld reads the n <= EW elements at p into v (0 beyond n); ew_st stores v's first n.
template <typename X>
__device__ __forceinline__ void ew_ld(const X* p, float* v, int n, int vec) {
    if (vec && n == EW) {
        ld8(p, v);
        return;
    }
#pragma unroll
    for (int k = 0; k < EW; k++) v[k] = k < n ? ld(p + k) : 0.0f;
}
template <typename X>
__device__ __forceinline__ void ew_st(X* p, const float* v, int n, int vec) {
    if (vec && n == EW) {
        st8(p, v);
        return;
    }
#pragma unroll
    for (int k = 0; k < EW; k++)
        if (k < n) st(p + k, v[k]);
}

// ew_first returns this thread's first element i0 and sets n to how many of i0..i0+EW-1 are < N
// (n <= 0: nothing to do).
__device__ __forceinline__ long ew_first(long N, int* n) {
    long i0 = ((long)blockIdx.x * blockDim.x + threadIdx.x) * EW;
    *n = (int)min((long)EW, N - i0);
    return i0;
}

// The GELUs in forms that do not cancel for x < 0 (the CPU backend's too): 0.5 x (1 + tanh u)
// with u = sqrt(2/pi) (x + 0.044715 x^3) is x s with s = sigmoid(2u) = 1/(1 + e), e = exp(-2u),
// and 1 - s = e s; 0.5 x (1 + erf(x/sqrt(2))) is 0.5 x erfc(-x/sqrt(2)). 1 + tanh(u) and
// 1 + erf(.) lose every digit below x = -4 (the result is 30% off at x = -4.5 and -0 from -5.2).
#define GELU_A (-2.0f * GELU_SCALE)           // -2u = x (GELU_A + GELU_B x^2)
#define GELU_B (-2.0f * GELU_SCALE * 0.044715f)

__device__ __forceinline__ float gelu_tanh(float x) {
    return x / (1.0f + expf(x * (GELU_B * (x * x) + GELU_A))); // e = inf: -0
}

// gelu_tanh_grad = s + x (1 - s) s 2 du/dx with 2 du/dx = 2 sqrt(2/pi) (1 + 3 0.044715 x^2).
// Beyond +-20 it is 1 or 0, its float32 values, as on the CPU: the formula gave NaN past
// 1.8e19, where x * x overflows and e s is 0 * inf.
__device__ __forceinline__ float gelu_tanh_grad(float x) {
    if (x > 20.0f) return 1.0f;
    if (x < -20.0f) return 0.0f;
    float x2 = x * x;
    float e = expf(x * (GELU_B * x2 + GELU_A));
    if (e == INFINITY) return 0.0f; // s = 0: the limit, where e s would be inf * 0
    float s = 1.0f / (1.0f + e);
    return s + x * (e * s) * s * (2.0f * GELU_SCALE) * (1.0f + 3.0f * 0.044715f * x2);
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * erfcf(-0.7071067811865476f * x); }

__device__ __forceinline__ float gelu_erf_grad(float x) {
    float cdf = 0.5f * erfcf(-0.7071067811865476f * x);
    float pdf = 0.3989422804014327f * expf(-0.5f * x * x); // 1/sqrt(2 pi)
    return cdf + x * pdf;
}

// gelu_forward: out(N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of inp(N).
// gelu_erf_forward: out(N) = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))) of inp(N), the exact GELU.
template <typename X, float (*F)(float)>
__device__ __forceinline__ void ew_map_t(X* out, const X* inp, long N, int vec) {
    int n;
    long i0 = ew_first(N, &n);
    if (n <= 0) return;
    float x[EW];
    ew_ld(inp + i0, x, n, vec);
#pragma unroll
    for (int k = 0; k < EW; k++) x[k] = F(x[k]);
    ew_st(out + i0, x, n, vec);
}

// gelu_backward: dinp(N) = gelu'(inp) * dout (overwritten).
// gelu_erf_backward: dinp(N) = (Phi(x) + x phi(x)) * dout (overwritten), phi the normal density.
template <typename X, float (*F)(float)>
__device__ __forceinline__ void ew_grad_t(X* dinp, const X* inp, const X* dout, long N, int vec) {
    int n;
    long i0 = ew_first(N, &n);
    if (n <= 0) return;
    float x[EW], d[EW];
    ew_ld(inp + i0, x, n, vec);
    ew_ld(dout + i0, d, n, vec);
#pragma unroll
    for (int k = 0; k < EW; k++) x[k] = F(x[k]) * d[k];
    ew_st(dinp + i0, x, n, vec);
}

// residual_forward: out(N) = a(N) + b(N).
template <typename X>
__device__ __forceinline__ void residual_forward_t(X* out, const X* a, const X* b, long N, int vec) {
    int n;
    long i0 = ew_first(N, &n);
    if (n <= 0) return;
    float x[EW], y[EW];
    ew_ld(a + i0, x, n, vec);
    ew_ld(b + i0, y, n, vec);
#pragma unroll
    for (int k = 0; k < EW; k++) x[k] += y[k];
    ew_st(out + i0, x, n, vec);
}

// residual_backward: da(N) += dout(N), db(N) += dout(N).
template <typename X>
__device__ __forceinline__ void residual_backward_t(X* da, X* db, const X* dout, long N, int vec) {
    int n;
    long i0 = ew_first(N, &n);
    if (n <= 0) return;
    float d[EW], x[EW];
    ew_ld(dout + i0, d, n, vec);
    ew_ld(da + i0, x, n, vec);
#pragma unroll
    for (int k = 0; k < EW; k++) x[k] += d[k];
    ew_st(da + i0, x, n, vec);
    ew_ld(db + i0, x, n, vec);
#pragma unroll
    for (int k = 0; k < EW; k++) x[k] += d[k];
    ew_st(db + i0, x, n, vec);
}

// adamw_elem is one element of a torch.optim.AdamW step (adamw and adamw_all share it, so both
// give each element the same bits): with g the scaled gradient,
// p -= decay p; m = b1 m + (1-b1) g; v = b2 v + ((1-b2) g) g;
// p -= step_size * (m / (sqrt(v)/bc2_sqrt + eps)) with step_size = lr/(1-b1^t), bc2_sqrt =
// sqrt(1-b2^t) and decay = lr*weight_decay. Every operation is one IEEE rounding in the CPU
// backend's order (adamWGo), with no fused multiply-add, so the update is the CPU's bits.
__device__ __forceinline__ void adamw_elem(float& p, float g, float& m, float& v, float decay, float beta1, float beta2,
                                           float step_size, float bc2_sqrt, float eps) {
    float q = __fsub_rn(p, __fmul_rn(decay, p));
    float mi = __fadd_rn(__fmul_rn(beta1, m), __fmul_rn(1.0f - beta1, g));
    float vi = __fadd_rn(__fmul_rn(beta2, v), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
    m = mi;
    v = vi;
    float den = __fadd_rn(__fdiv_rn(sqrtf(vi), bc2_sqrt), eps);
    p = __fsub_rn(q, __fmul_rn(step_size, __fdiv_rn(mi, den)));
}

// adamw: one AdamW step (adamw_elem) on the fp32 params(N) from grads(N) (fp32 or 16-bit) times
// grad_scale, with fp32 moments m(N), v(N).
template <typename G>
__device__ __forceinline__ void adamw_t(float* params, const G* grads, float* m, float* v, long N, float grad_scale,
                                        float decay, float beta1, float beta2, float step_size, float bc2_sqrt, float eps, int vec) {
    int n;
    long i0 = ew_first(N, &n);
    if (n <= 0) return;
    float p[EW], g[EW], mm[EW], vv[EW];
    ew_ld(params + i0, p, n, vec);
    ew_ld(grads + i0, g, n, vec);
    ew_ld(m + i0, mm, n, vec);
    ew_ld(v + i0, vv, n, vec);
#pragma unroll
    for (int k = 0; k < EW; k++) adamw_elem(p[k], __fmul_rn(g[k], grad_scale), mm[k], vv[k], decay, beta1, beta2, step_size, bc2_sqrt, eps);
    ew_st(params + i0, p, n, vec);
    ew_st(m + i0, mm, n, vec);
    ew_st(v + i0, vv, n, vec);
}

// adamw_all: adamw over the nseg tensors of flat buffers of N elements in one launch. segs[j] is
// (end of tensor j) << 1 | (1 when it decays, with decay lr_wd; else 0), the ends increasing to
// N. stats is backend.StepStats' layout: the gradient scale is stats[2], and nothing is written
// unless stats[3] == 1 (the gradient norm is finite). step is backend.AdamWParams.EncodeStep's
// layout: lr_wd, step_size, bc2_sqrt (read here, not passed, so that a CUDA graph replays a step
// with the current learning rate).
template <typename G>
__device__ __forceinline__ void adamw_all_t(float* params, const G* grads, float* m, float* v, long N, const long long* segs,
                                            int nseg, const float* stats, const float* step, float beta1, float beta2, float eps,
                                            int vec) {
    if (stats[3] != 1.0f) return;
    float grad_scale = stats[2];
    float lr_wd = step[0], step_size = step[1], bc2_sqrt = step[2];
    int n;
    long i0 = ew_first(N, &n);
    if (n <= 0) return;
    int lo = 0, hi = nseg - 1; // the tensor of i0: the first j whose end is past i0
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((segs[mid] >> 1) > i0) hi = mid;
        else lo = mid + 1;
    }
    long long seg = segs[lo];
    float p[EW], g[EW], mm[EW], vv[EW];
    ew_ld(params + i0, p, n, vec);
    ew_ld(grads + i0, g, n, vec);
    ew_ld(m + i0, mm, n, vec);
    ew_ld(v + i0, vv, n, vec);
#pragma unroll
    for (int k = 0; k < EW; k++) {
        while (k < n && i0 + k >= (seg >> 1)) seg = segs[++lo];
        adamw_elem(p[k], __fmul_rn(g[k], grad_scale), mm[k], vv[k], (seg & 1) ? lr_wd : 0.0f, beta1, beta2, step_size, bc2_sqrt, eps);
    }
    ew_st(params + i0, p, n, vec);
    ew_st(m + i0, mm, n, vec);
    ew_st(v + i0, vv, n, vec);
}

// block_sum_d: thread 0 writes *out = the sum of every thread's s over the thread block, in a
// fixed tree (the lanes of each warp, then the warps' sums in the same way), so the bits depend on
// blockDim and the values only. Every thread of the block must call it.
__device__ __forceinline__ void block_sum_d(double s, double* out) {
    __shared__ double warps[32];
    s = warp_sum_d(s);
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    if (lane == 0) warps[w] = s;
    __syncthreads();
    if (w == 0) {
        s = lane < blockDim.x / WARP ? warps[lane] : 0.0;
        s = warp_sum_d(s);
        if (lane == 0) *out = s;
    }
}

// sum_squares_partial: partial(gridDim.x) = sums of x^2 over fixed grid-stride slices of x(N),
// in double. The grid size is fixed by the caller, so the result does not depend on timing.
template <typename G>
__device__ __forceinline__ void sum_squares_partial_t(double* partial, const G* x, long N) {
    double s = 0;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
        double xi = ld(x + i);
        s += xi * xi;
    }
    block_sum_d(s, partial + blockIdx.x);
}

// sum_squares_blocks: dst[b] = sum of x^2 over x[b*block, min((b+1)*block, N)) in double, one
// thread block per block of x (backend.BlockSumSquarer). Thread t sums elements t, t+blockDim, ...
// of its block, then the warps' sums are added in a fixed tree: the order depends only on the
// block's contents and blockDim (fixed by the caller), never on where the block lies in a larger
// buffer, so a shard's blocks give the bits the whole buffer's do.
template <typename G>
__device__ __forceinline__ void sum_squares_blocks_t(double* dst, const G* x, long N, int block) {
    long lo = (long)blockIdx.x * block;
    long n = min((long)block, N - lo);
    double s = 0;
    for (long i = threadIdx.x; i < n; i += blockDim.x) {
        double xi = ld(x + lo + i);
        s += xi * xi;
    }
    block_sum_d(s, dst + blockIdx.x);
}

// sum_squares_final: out[0] = sum of partial(n) in index order (one thread).
extern "C" __global__ void sum_squares_final(double* out, const double* partial, int n) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double s = 0;
    for (int i = 0; i < n; i++) s += partial[i];
    out[0] = s;
}

// grad_stats writes backend.StepStatsOf into stats(4) from the n block sums of squares in sums,
// added as backend.SumBlockSums does: each group of SUM_GROUP consecutive sums in order (a thread
// per group, into groups(ceil(n/SUM_GROUP))), then the groups' sums in order (thread 0). The norm
// goes in as its two 32-bit halves. One thread block.
#define SUM_GROUP 64 // backend.SumGroup
extern "C" __global__ void grad_stats(float* stats, const double* sums, int n, double* groups, double clip, double loss_scale) {
    int ng = (n + SUM_GROUP - 1) / SUM_GROUP;
    for (int gi = threadIdx.x; gi < ng; gi += blockDim.x) {
        double s = 0;
        for (int i = gi * SUM_GROUP; i < min(n, (gi + 1) * SUM_GROUP); i++) s += sums[i];
        groups[gi] = s;
    }
    __syncthreads();
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double s = 0;
    for (int gi = 0; gi < ng; gi++) s += groups[gi];
    double norm = __ddiv_rn(sqrt(s), loss_scale);
    unsigned long long b = (unsigned long long)__double_as_longlong(norm);
    unsigned* w = (unsigned*)stats;
    w[0] = (unsigned)b, w[1] = (unsigned)(b >> 32);
    if (isnan(norm) || isinf(norm)) {
        stats[2] = 0.0f, stats[3] = 0.0f;
        return;
    }
    double factor = 1.0;
    if (clip > 0) factor = fmin(1.0, __ddiv_rn(clip, __dadd_rn(norm, 1e-6)));
    stats[2] = __double2float_rn(__ddiv_rn(factor, loss_scale));
    stats[3] = 1.0f;
}

// column_sum_partial: partial(chunks, OC)[k, j] = sum of x(N,OC)[i, j] over the rows i of chunk k
// (rows [k*rows, (k+1)*rows)), in fp32. One thread per (chunk, column).
template <typename X>
__device__ __forceinline__ void column_sum_partial_t(float* partial, const X* x, int N, int OC, int rows) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    int chunks = (N + rows - 1) / rows;
    if (i >= (long)chunks * OC) return;
    int k = (int)(i / OC), j = (int)(i % OC);
    float s = 0;
    for (int r = k * rows; r < min(N, (k + 1) * rows); r++) s += ld(x + (long)r * OC + j);
    partial[i] = s;
}

// column_sum_reduce: out(OC) += sum over k of partial(chunks, OC)[k, :], in chunk order.
template <typename G>
__device__ __forceinline__ void column_sum_reduce_t(G* out, const float* partial, int chunks, int OC) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= OC) return;
    float s = 0;
    for (int k = 0; k < chunks; k++) s += partial[(long)k * OC + j];
    st(out + j, ld(out + j) + s);
}

// broadcast_rows: out(N,OC)[i, j] = row(OC)[j], copied unchanged (MatmulForward's bias where
// cuBLASLt has no bias epilogue: the product then accumulates onto it).
template <typename X>
__device__ __forceinline__ void broadcast_rows_t(X* out, const X* row, long N, int OC) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * OC) return;
    out[i] = row[i % OC];
}

#define ELEMENTWISE_KERNELS(X, S)                                                                                      \
    extern "C" __global__ void gelu_forward##S(X* out, const X* inp, long N, int vec) {                                \
        ew_map_t<X, gelu_tanh>(out, inp, N, vec);                                                                      \
    }                                                                                                                  \
    extern "C" __global__ void gelu_backward##S(X* dinp, const X* inp, const X* dout, long N, int vec) {              \
        ew_grad_t<X, gelu_tanh_grad>(dinp, inp, dout, N, vec);                                                         \
    }                                                                                                                  \
    extern "C" __global__ void gelu_erf_forward##S(X* out, const X* inp, long N, int vec) {                            \
        ew_map_t<X, gelu_erf>(out, inp, N, vec);                                                                       \
    }                                                                                                                  \
    extern "C" __global__ void gelu_erf_backward##S(X* dinp, const X* inp, const X* dout, long N, int vec) {          \
        ew_grad_t<X, gelu_erf_grad>(dinp, inp, dout, N, vec);                                                          \
    }                                                                                                                  \
    extern "C" __global__ void residual_forward##S(X* out, const X* a, const X* b, long N, int vec) {                  \
        residual_forward_t(out, a, b, N, vec);                                                                         \
    }                                                                                                                  \
    extern "C" __global__ void residual_backward##S(X* da, X* db, const X* dout, long N, int vec) {                    \
        residual_backward_t(da, db, dout, N, vec);                                                                     \
    }                                                                                                                  \
    extern "C" __global__ void adamw##S(float* params, const X* grads, float* m, float* v, long N, float grad_scale,   \
                                       float decay, float beta1, float beta2, float step_size, float bc2_sqrt, float eps, \
                                       int vec) {                                                                      \
        adamw_t(params, grads, m, v, N, grad_scale, decay, beta1, beta2, step_size, bc2_sqrt, eps, vec);              \
    }                                                                                                                  \
    extern "C" __global__ void adamw_all##S(float* params, const X* grads, float* m, float* v, long N,                 \
                                           const long long* segs, int nseg, const float* stats, const float* step,     \
                                           float beta1, float beta2, float eps, int vec) {                             \
        adamw_all_t(params, grads, m, v, N, segs, nseg, stats, step, beta1, beta2, eps, vec);                          \
    }                                                                                                                  \
    extern "C" __global__ void sum_squares_partial##S(double* partial, const X* x, long N) { sum_squares_partial_t(partial, x, N); } \
    extern "C" __global__ void sum_squares_blocks##S(double* dst, const X* x, long N, int block) {                      \
        sum_squares_blocks_t(dst, x, N, block);                                                                        \
    }                                                                                                                  \
    extern "C" __global__ void column_sum_partial##S(float* partial, const X* x, int N, int OC, int rows) {            \
        column_sum_partial_t(partial, x, N, OC, rows);                                                                 \
    }                                                                                                                  \
    extern "C" __global__ void column_sum_reduce##S(X* out, const float* partial, int chunks, int OC) {                \
        column_sum_reduce_t(out, partial, chunks, OC);                                                                 \
    }                                                                                                                  \
    extern "C" __global__ void broadcast_rows##S(X* out, const X* row, long N, int OC) {                               \
        broadcast_rows_t(out, row, N, OC);                                                                             \
    }
X_VARIANTS(ELEMENTWISE_KERNELS)

// convert: dst(N) = src(N) in dst's format. With seed 0 (or a float dst) it rounds to nearest
// even; otherwise stochastically, element i with the 32 bits stochastic_bits(seed, i), exactly
// as backend.RoundStochastic and backend.StochasticBits define it, so every backend writes the
// same bits.
__device__ __forceinline__ unsigned stochastic_bits(unsigned long long seed, unsigned long long i) {
    unsigned long long z = seed + i * 0x9e3779b97f4a7c15ull; // SplitMix64's finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (unsigned)(z >> 32);
}

// round_stochastic stores x into *p rounded down or up to its neighbours in p's format, up with
// probability (x - down) / (up - down) as decided by r.
__device__ __forceinline__ void round_stochastic(bf16* p, float x, unsigned r) {
    unsigned b = __float_as_uint(x), m = b & 0x7fffffffu;
    if (m > 0x7f800000u) {
        p->bits = 0x7fc0;
        return;
    }
    if (m < 0x7f800000u) m = (m + (r >> 16)) & ~0xffffu; // the low 16 bits are the fraction of a bf16 unit
    p->bits = (unsigned short)(((b & 0x80000000u) | m) >> 16);
}

__device__ __forceinline__ void round_stochastic(fp16* p, float x, unsigned r) {
    unsigned b = __float_as_uint(x), m = b & 0x7fffffffu;
    unsigned short sign = (unsigned short)((b >> 16) & 0x8000u);
    if (m > 0x7f800000u) {
        p->bits = 0x7e00;
        return;
    }
    if (m < 0x38800000u) { // subnormal: units of 2^-24, exact in double; up if r/2^32 < the fraction
        double v = (double)__uint_as_float(m) * 16777216.0;
        double f = floor(v);
        if ((double)r * 0x1p-32 < v - f) f += 1.0;
        p->bits = (unsigned short)(sign | (unsigned)f);
        return;
    }
    if (m < 0x7f800000u) m = (m + (r >> 19)) & ~0x1fffu;
    p->bits = (unsigned short)(sign | fp16_bits_of_normal(m));
}

template <typename D, typename S>
__device__ __forceinline__ void convert_t(D* dst, const S* src, long N, unsigned long long seed,
                                          const unsigned* seedp) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    st(dst + i, ld(src + i));
}

// seedp, when not null, holds the seed instead of seed (ConvertSeeded): its low 32 bits, then
// its high 32 bits (read as two words, so that any 4-byte aligned view of a buffer works).
template <typename D>
__device__ __forceinline__ void convert_t(D* dst, const float* src, long N, unsigned long long seed,
                                          const unsigned* seedp) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    if (seedp) seed = (unsigned long long)seedp[0] | (unsigned long long)seedp[1] << 32;
    if (seed == 0) {
        st(dst + i, src[i]);
    } else {
        round_stochastic(dst + i, src[i], stochastic_bits(seed, (unsigned long long)i));
    }
}

// Kernels named convert_DST_SRC, for the conversions the backend makes: fp32 to a 16-bit format
// (the parameter copy) and back.
#define CONVERT_KERNEL(D, S, NAME)                                                                                  \
    extern "C" __global__ void NAME(D* dst, const S* src, long N, unsigned long long seed, const unsigned* seedp) { \
        convert_t(dst, src, N, seed, seedp);                                                                        \
    }
CONVERT_KERNEL(bf16, float, convert_bf16_fp32)
CONVERT_KERNEL(fp16, float, convert_fp16_fp32)
CONVERT_KERNEL(float, bf16, convert_fp32_bf16)
CONVERT_KERNEL(float, fp16, convert_fp32_fp16)
