// Tiled attention (causal or bidirectional, with padding: common.cuh's att_key_end) for head sizes
// 16, 32, 48 and 64 (every GPT-2 preset has 64): the same math as attention.cu, whose
// one-row-per-block kernels remain for other head sizes, but each block takes a 64-row tile of
// one (b, h) and streams the other side's 64-row tiles through shared memory, so every key and
// value read from global memory serves 64 rows. Nothing (T,T) is stored:
// the forward keeps an online softmax (running max m and sum l) and the backward recomputes the
// probabilities from lse, as FlashAttention does, all in fp32 FMAs.
//
// Shapes (as attention.cu): qkv (B,T,3C) holds q, k, v side by side, each NH heads of HS = C/NH;
// out and dout (B,T,C); lse and delta (B,NH,T); dqkv (B,T,3C), overwritten.
//
// Grid: one block per (row tile, b*NH + h), 1-D, the tiles with the most work first. Each row's HS
// is split between two lanes (adjacent threads) that add their halves of a dot product with a
// shuffle. The forward gives a lane pair two query rows (64 threads); dq and dkv give each query
// or key row a lane pair (128 threads). Inner loops take 16 rows (dq: 8) of the streamed tile at a
// time so that many dot products are in flight. At head size 64 on GPUs with enough shared memory
// the kernels at the end of this file (tile products) run instead. Every output element is
// written by one thread and summed in a fixed order: no atomics, the same bits every run.
//
// qkv, out, dout and dqkv are in the activations' format X (float, bf16 or fp16): tiles are widened
// to fp32 as they are copied into shared memory, every product and sum is fp32, and each output
// element is rounded to X once as it is stored. lse and delta are fp32.

#define ATT_TILE 64
#define ATT_CHUNK 16
#define ATT_DQ_CHUNK 8 // dq keeps three HS vectors in registers: 16 rows at a time spill

// Shared tiles hold 64 rows of HS floats, stride HS+4, with 4 floats of padding between the two
// halves of a row, so the two lanes of a row read different banks.
template <int HS>
__device__ __forceinline__ int att_col(int d) { return d + (d >= HS / 2 ? 4 : 0); }

// att_load starts copying rows [r0, r0+64) of one head's HS columns (rows rowStride floats apart)
// into sh, split in halves as att_col says (SPLIT) or as plain rows; rows at or past T become
// zeros. att_loaded waits for the copies; a __syncthreads must follow before other threads read
// them. On sm_80 and later the copies are cp.async, 16 bytes
// each, global to shared without passing through registers, all in flight at once (the source
// must be 16-byte aligned: the backend checks); before sm_80, plain loads. 16-bit sources take
// plain loads that widen each element (the overload below).
template <int HS, bool SPLIT = true>
__device__ __forceinline__ void att_load(float* sh, const float* src, long rowStride, int r0, int T) {
#if __CUDA_ARCH__ >= 800
    constexpr int Q = HS / 4; // 16-byte pieces per row
#pragma unroll 4
    for (int i = threadIdx.x; i < ATT_TILE * Q; i += blockDim.x) {
        int r = i / Q, d = (i % Q) * 4;
        bool live = r0 + r < T;
        const float* g = src + (long)(live ? r0 + r : 0) * rowStride + d; // a valid address even when zero-filling
        unsigned dst = (unsigned)__cvta_generic_to_shared(sh + r * (HS + 4) + (SPLIT ? att_col<HS>(d) : d));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(g), "r"(live ? 16 : 0));
    }
#else
    for (int i = threadIdx.x; i < ATT_TILE * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS;
        sh[r * (HS + 4) + (SPLIT ? att_col<HS>(d) : d)] = r0 + r < T ? src[(long)(r0 + r) * rowStride + d] : 0.0f;
    }
#endif
}

template <int HS, bool SPLIT = true, typename X>
__device__ __forceinline__ void att_load(float* sh, const X* src, long rowStride, int r0, int T) {
    for (int i = threadIdx.x; i < ATT_TILE * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS;
        sh[r * (HS + 4) + (SPLIT ? att_col<HS>(d) : d)] = r0 + r < T ? ld(src + (long)(r0 + r) * rowStride + d) : 0.0f;
    }
}

__device__ __forceinline__ void att_loaded() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
#endif
}

// reload_barrier tells the compiler that shared memory may have changed, so a chunk's values are
// read again for its updates rather than kept in registers from its dot products. (What removed
// ptxas's spills was the select in the masked exp; this stayed, as it was in the kernels measured.)
__device__ __forceinline__ void reload_barrier() { asm volatile("" ::: "memory"); }

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
    acc = fmaf(a.z, b.z, acc);
    return fmaf(a.w, b.w, acc);
}

__device__ __forceinline__ float4 axpy4(float a, float4 x, float4 y) {
    return make_float4(fmaf(a, x.x, y.x), fmaf(a, x.y, y.y), fmaf(a, x.z, y.z), fmaf(a, x.w, y.w));
}

// att_tile_key_end is the end of the keys that the queries [r0, r0+64) of a sequence of length len
// see: those of its last query below T, the most of any. A causal block stops at its diagonal
// tile; a bidirectional one streams every key tile below len.
__device__ __forceinline__ int att_tile_key_end(int r0, int T, int len, int causal) {
    return att_key_end(min(r0 + ATT_TILE, T) - 1, len, causal);
}

// att_chunks is how many ch-row chunks of the streamed tile starting at row s0 (< keyEnd) any of
// this block's queries can see, given keyEnd from att_tile_key_end.
__device__ __forceinline__ int att_chunks(int s0, int keyEnd, int ch) {
    return min(ATT_TILE / ch, (keyEnd - 1 - s0) / ch + 1);
}

// att_first_query_tile is the first query tile that sees any key of the tile starting at u0, or
// tiles when none does (keys past len: their dk and dv stay zero).
__device__ __forceinline__ int att_first_query_tile(int u0, int len, int causal, int tiles) {
    return u0 < len ? att_first_query(u0, causal) / ATT_TILE : tiles;
}

// The backward kernels' arguments, and the mask's two at the end of every kernel's.
#define ATT_BWD_ARGS(X)                                                                                     \
    X *dqkv, const X *dout, const X *qkv, const float *lse, const float *delta, int B, int T, int C, int NH, \
        const int *lengths, int causal
#define ATT_BWD_CALL dqkv, dout, qkv, lse, delta, B, T, C, NH, lengths, causal

// att_forward: thread pair p (lanes 0 and 1, each half of HS) takes query rows p and p+32 of the
// tile, so each key and value read from shared memory serves two rows. 64 threads.
template <int HS, typename X>
__device__ __forceinline__ void att_forward(X* out, float* lse, const X* qkv, int B, int T, int C, int NH,
                                            const int* lengths, int causal) {
    constexpr int RS = HS + 4, HD = HS / 2, NV = HD / 4, R = 2;
    __shared__ __align__(16) float Ks[ATT_TILE * RS];
    __shared__ __align__(16) float Vs[ATT_TILE * RS];
    int tiles = (T + ATT_TILE - 1) / ATT_TILE, BH = B * NH;
    int qt = tiles - 1 - blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    int pr = threadIdx.x >> 1, lane = threadIdx.x & 1, off = lane * (HD + 4);
    int rows[R] = {pr, pr + ATT_TILE / 2}, ke[R];
    int len = att_seq_len(lengths, b, T), keyEnd = att_tile_key_end(qt * ATT_TILE, T, len, causal);
    long rs = 3L * C;
    const X* base = qkv + (long)b * T * rs + h * HS;
    float scale = rsqrtf((float)HS);

    att_load<HS>(Ks, base, rs, qt * ATT_TILE, T); // this tile's queries, read back into registers
    att_loaded();
    __syncthreads();
    float4 q[R][NV], o[R][NV];
    float m[R], l[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        ke[r] = att_key_end(min(qt * ATT_TILE + rows[r], T - 1), len, causal);
        m[r] = -INFINITY;
        l[r] = 0;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            q[r][i] = ld4(&Ks[rows[r] * RS + off + 4 * i]);
            o[r][i] = make_float4(0, 0, 0, 0);
        }
    }
    for (int kt = 0; kt * ATT_TILE < keyEnd; kt++) {
        __syncthreads(); // everyone is done with the previous tile
        att_load<HS>(Ks, base + C, rs, kt * ATT_TILE, T);
        att_load<HS>(Vs, base + 2 * C, rs, kt * ATT_TILE, T);
        att_loaded();
        __syncthreads();
        int chunks = att_chunks(kt * ATT_TILE, keyEnd, ATT_CHUNK);
#pragma unroll 1
        for (int c = 0; c < chunks; c++) {
            int u0 = kt * ATT_TILE + c * ATT_CHUNK;
            const float* kc = Ks + c * ATT_CHUNK * RS + off;
            const float* vc = Vs + c * ATT_CHUNK * RS + off;
            float s[R][ATT_CHUNK];
#pragma unroll
            for (int j = 0; j < ATT_CHUNK; j++) s[0][j] = s[1][j] = 0;
#pragma unroll
            for (int i = 0; i < NV; i++) {
#pragma unroll
                for (int j = 0; j < ATT_CHUNK; j++) {
                    float4 k = ld4(&kc[j * RS + 4 * i]);
                    s[0][j] = dot4(q[0][i], k, s[0][j]);
                    s[1][j] = dot4(q[1][i], k, s[1][j]);
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                // Row t always sees key 0 in its first chunk, so m is finite from then on and a
                // chunk wholly past the row's keys only adds exp(-inf) = 0.
                float mc = -INFINITY;
#pragma unroll
                for (int j = 0; j < ATT_CHUNK; j++) {
                    s[r][j] += __shfl_xor_sync(0xffffffffu, s[r][j], 1);
                    s[r][j] = u0 + j < ke[r] ? s[r][j] * scale : -INFINITY;
                    mc = fmaxf(mc, s[r][j]);
                }
                float mn = fmaxf(m[r], mc), corr = expf(m[r] - mn);
                l[r] *= corr;
#pragma unroll
                for (int j = 0; j < ATT_CHUNK; j++) {
                    s[r][j] = expf(s[r][j] - mn);
                    l[r] += s[r][j];
                }
#pragma unroll
                for (int i = 0; i < NV; i++) o[r][i] = make_float4(o[r][i].x * corr, o[r][i].y * corr, o[r][i].z * corr, o[r][i].w * corr);
                m[r] = mn;
            }
            reload_barrier();
#pragma unroll
            for (int i = 0; i < NV; i++) {
#pragma unroll
                for (int j = 0; j < ATT_CHUNK; j++) {
                    float4 v = ld4(&vc[j * RS + 4 * i]);
                    o[0][i] = axpy4(s[0][j], v, o[0][i]);
                    o[1][i] = axpy4(s[1][j], v, o[1][i]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        int t = qt * ATT_TILE + rows[r];
        if (t < T) {
            X* dst = out + ((long)b * T + t) * C + h * HS + lane * HD;
#pragma unroll
            for (int i = 0; i < NV; i++) {
                st(dst + 4 * i, o[r][i].x / l[r]);
                st(dst + 4 * i + 1, o[r][i].y / l[r]);
                st(dst + 4 * i + 2, o[r][i].z / l[r]);
                st(dst + 4 * i + 3, o[r][i].w / l[r]);
            }
            if (lane == 0) lse[(long)bh * T + t] = m[r] + logf(l[r]);
        }
    }
}

// att_store_half writes one lane's half of a row: v[i] times scale at dst[4i..4i+3].
template <int NV, typename X>
__device__ __forceinline__ void att_store_half(X* dst, const float4* v, float scale) {
#pragma unroll
    for (int i = 0; i < NV; i++) {
        st(dst + 4 * i, v[i].x * scale);
        st(dst + 4 * i + 1, v[i].y * scale);
        st(dst + 4 * i + 2, v[i].z * scale);
        st(dst + 4 * i + 3, v[i].w * scale);
    }
}

// att_backward_dq: dq[t] = scale * sum over the keys u that t sees of ds[t,u] k[u], with
// p = exp(s - lse[t]), dp = dout[t].v[u], ds = p (dp - delta[t]). Block: 64 query rows, two lanes a row (128 threads).
template <int HS, int CH, typename X>
__device__ __forceinline__ void att_backward_dq(ATT_BWD_ARGS(X)) {
    constexpr int RS = HS + 4, HD = HS / 2, NV = HD / 4;
    __shared__ __align__(16) float Ks[ATT_TILE * RS];
    __shared__ __align__(16) float Vs[ATT_TILE * RS];
    int tiles = (T + ATT_TILE - 1) / ATT_TILE, BH = B * NH;
    int qt = tiles - 1 - blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    int r = threadIdx.x >> 1, lane = threadIdx.x & 1, off = lane * (HD + 4);
    int t = qt * ATT_TILE + r, tc = min(t, T - 1);
    int len = att_seq_len(lengths, b, T), keyEnd = att_tile_key_end(qt * ATT_TILE, T, len, causal);
    int ke = att_key_end(tc, len, causal);
    long rs = 3L * C;
    const X* base = qkv + (long)b * T * rs + h * HS;
    const X* dob = dout + (long)b * T * C + h * HS;
    float scale = rsqrtf((float)HS);

    att_load<HS>(Ks, base, rs, qt * ATT_TILE, T);
    att_load<HS>(Vs, dob, C, qt * ATT_TILE, T);
    att_loaded();
    __syncthreads();
    float4 q[NV], dy[NV], dq[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) {
        q[i] = ld4(&Ks[r * RS + off + 4 * i]);
        dy[i] = ld4(&Vs[r * RS + off + 4 * i]);
        dq[i] = make_float4(0, 0, 0, 0);
    }
    float L = lse[(long)bh * T + tc], D = delta[(long)bh * T + tc];
    for (int kt = 0; kt * ATT_TILE < keyEnd; kt++) {
        __syncthreads();
        att_load<HS>(Ks, base + C, rs, kt * ATT_TILE, T);
        att_load<HS>(Vs, base + 2 * C, rs, kt * ATT_TILE, T);
        att_loaded();
        __syncthreads();
        int chunks = att_chunks(kt * ATT_TILE, keyEnd, CH);
#pragma unroll 1
        for (int c = 0; c < chunks; c++) {
            int u0 = kt * ATT_TILE + c * CH;
            const float* kc = Ks + c * CH * RS + off;
            const float* vc = Vs + c * CH * RS + off;
            float s[CH], dp[CH];
#pragma unroll
            for (int j = 0; j < CH; j++) s[j] = dp[j] = 0;
#pragma unroll
            for (int i = 0; i < NV; i++) {
#pragma unroll
                for (int j = 0; j < CH; j++) {
                    s[j] = dot4(q[i], ld4(&kc[j * RS + 4 * i]), s[j]);
                    dp[j] = dot4(dy[i], ld4(&vc[j * RS + 4 * i]), dp[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < CH; j++) {
                s[j] += __shfl_xor_sync(0xffffffffu, s[j], 1);
                dp[j] += __shfl_xor_sync(0xffffffffu, dp[j], 1);
            }
#pragma unroll
            for (int j = 0; j < CH; j++) { // masked by a select, not a branch: the loop stays unrolled
                float p = expf(u0 + j < ke ? s[j] * scale - L : -INFINITY);
                s[j] = p * (dp[j] - D);
            }
            reload_barrier();
#pragma unroll
            for (int i = 0; i < NV; i++) {
#pragma unroll
                for (int j = 0; j < CH; j++) dq[i] = axpy4(s[j], ld4(&kc[j * RS + 4 * i]), dq[i]);
            }
        }
    }
    if (t < T) att_store_half<NV>(dqkv + ((long)b * T + t) * rs + h * HS + lane * HD, dq, scale);
}

// att_backward_dkv: for key u, summing over the queries t that see it (t >= u when causal; none
// for a padded key), dk[u] = scale * sum ds[t,u] q[t] and dv[u] = sum p[t,u] dout[t]. Block: 64
// key rows, two lanes a row (128 threads), walking the query tiles from the first that sees the
// tile (the diagonal when causal) to the end.
template <int HS, typename X>
__device__ __forceinline__ void att_backward_dkv(ATT_BWD_ARGS(X)) {
    constexpr int RS = HS + 4, HD = HS / 2, NV = HD / 4;
    __shared__ __align__(16) float Qs[ATT_TILE * RS];
    __shared__ __align__(16) float Ds[ATT_TILE * RS];
    __shared__ float Ls[ATT_TILE], Dl[ATT_TILE];
    int tiles = (T + ATT_TILE - 1) / ATT_TILE, BH = B * NH;
    int kt = blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    int r = threadIdx.x >> 1, lane = threadIdx.x & 1, off = lane * (HD + 4);
    int u = kt * ATT_TILE + r;
    int len = att_seq_len(lengths, b, T), firstQuery = att_first_query(u, causal);
    long rs = 3L * C;
    const X* base = qkv + (long)b * T * rs + h * HS;
    const X* dob = dout + (long)b * T * C + h * HS;
    float scale = rsqrtf((float)HS);

    att_load<HS>(Qs, base + C, rs, kt * ATT_TILE, T); // this tile's keys and values
    att_load<HS>(Ds, base + 2 * C, rs, kt * ATT_TILE, T);
    att_loaded();
    __syncthreads();
    float4 k[NV], v[NV], dk[NV], dv[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) {
        k[i] = ld4(&Qs[r * RS + off + 4 * i]);
        v[i] = ld4(&Ds[r * RS + off + 4 * i]);
        dk[i] = dv[i] = make_float4(0, 0, 0, 0);
    }
    for (int qt = att_first_query_tile(kt * ATT_TILE, len, causal, tiles); qt < tiles; qt++) {
        __syncthreads();
        att_load<HS>(Qs, base, rs, qt * ATT_TILE, T);
        att_load<HS>(Ds, dob, C, qt * ATT_TILE, T);
        for (int i = threadIdx.x; i < ATT_TILE; i += blockDim.x) {
            int tt = qt * ATT_TILE + i;
            Ls[i] = tt < T ? lse[(long)bh * T + tt] : INFINITY;
            Dl[i] = tt < T ? delta[(long)bh * T + tt] : 0.0f;
        }
        att_loaded();
        __syncthreads();
        int chunks = min(ATT_TILE / ATT_CHUNK, (T - 1 - qt * ATT_TILE) / ATT_CHUNK + 1);
#pragma unroll 1
        for (int c = 0; c < chunks; c++) {
            int t0 = qt * ATT_TILE + c * ATT_CHUNK;
            const float* qc = Qs + c * ATT_CHUNK * RS + off;
            const float* dc = Ds + c * ATT_CHUNK * RS + off;
            float s[ATT_CHUNK], dp[ATT_CHUNK];
#pragma unroll
            for (int j = 0; j < ATT_CHUNK; j++) s[j] = dp[j] = 0;
#pragma unroll
            for (int i = 0; i < NV; i++) {
#pragma unroll
                for (int j = 0; j < ATT_CHUNK; j++) {
                    s[j] = dot4(k[i], ld4(&qc[j * RS + 4 * i]), s[j]);
                    dp[j] = dot4(v[i], ld4(&dc[j * RS + 4 * i]), dp[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < ATT_CHUNK; j++) {
                s[j] += __shfl_xor_sync(0xffffffffu, s[j], 1);
                dp[j] += __shfl_xor_sync(0xffffffffu, dp[j], 1);
            }
#pragma unroll
            for (int j = 0; j < ATT_CHUNK; j++) { // rows past T have lse = +inf, so p = 0 there
                float p = expf(u < len && t0 + j >= firstQuery ? s[j] * scale - Ls[c * ATT_CHUNK + j] : -INFINITY);
                dp[j] = p * (dp[j] - Dl[c * ATT_CHUNK + j]); // ds
                s[j] = p;
            }
            reload_barrier();
#pragma unroll
            for (int i = 0; i < NV; i++) {
#pragma unroll
                for (int j = 0; j < ATT_CHUNK; j++) {
                    dk[i] = axpy4(dp[j], ld4(&qc[j * RS + 4 * i]), dk[i]);
                    dv[i] = axpy4(s[j], ld4(&dc[j * RS + 4 * i]), dv[i]);
                }
            }
        }
    }
    if (u < T) {
        X* dst = dqkv + ((long)b * T + u) * rs + h * HS + lane * HD;
        att_store_half<NV>(dst + C, dk, scale);
        att_store_half<NV>(dst + 2 * C, dv, 1.0f);
    }
}

// The entry points, one per head size and storage format. Launch: grid tiles * B * NH, blocks of
// 64 (forward) or 128.
#define ATT_TILED_HS(X, S, HSV)                                                                                      \
    extern "C" __global__ void __launch_bounds__(64) attention_forward_hs##HSV##S(X* out, float* lse, const X* qkv,   \
                                                                                  int B, int T, int C, int NH,      \
                                                                                  const int* lengths, int causal) { \
        att_forward<HSV>(out, lse, qkv, B, T, C, NH, lengths, causal);                                               \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(128) attention_backward_dq_hs##HSV##S(ATT_BWD_ARGS(X)) {             \
        att_backward_dq<HSV, ATT_DQ_CHUNK>(ATT_BWD_CALL);                                                            \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(128) attention_backward_dkv_hs##HSV##S(ATT_BWD_ARGS(X)) {            \
        att_backward_dkv<HSV>(ATT_BWD_CALL);                                                                         \
    }
#define ATT_TILED(X, S) ATT_TILED_HS(X, S, 16) ATT_TILED_HS(X, S, 32) ATT_TILED_HS(X, S, 48) ATT_TILED_HS(X, S, 64)
X_VARIANTS(ATT_TILED)

// ---- Backward for HS = 64 as small matrix products ---------------------------------------------
// The two-lane kernels above keep three or four HS vectors per row in registers and read every
// streamed row once per row they serve: shared-memory bound, with little occupancy. These treat a
// 64x64 tile pair as matrix products instead. 256 threads form a 16x16 grid (ty, tx). A tile of
// scores is 4x4 per thread at rows ty+16i and columns tx+16j (interleaved, so the rows a quarter
// warp reads fall in different banks); the HS-wide products are 4 rows (ty*4+i) by 4 columns
// (tx*4..tx*4+3) per thread. Each shared-memory read feeds 4 or 16 FMAs. Dynamic shared memory:
// dq 87,040 bytes, dkv 104,960 (the backend opts in, and falls back where a GPU has less).

#define PS 68 // row stride of the probability and dS tiles

// mm_rows: acc[i][j] += A[ty+16i] . B[tx+16j] over HS (tiles of 64 rows, stride HS+4).
template <int HS>
__device__ __forceinline__ void mm_rows(float acc[4][4], const float* A, const float* B, int ty, int tx) {
    constexpr int RS = HS + 4;
#pragma unroll 4
    for (int d = 0; d < HS; d += 4) {
        float4 a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            a[i] = ld4(&A[(ty + 16 * i) * RS + d]);
            b[i] = ld4(&B[(tx + 16 * i) * RS + d]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = dot4(a[i], b[j], acc[i][j]);
        }
    }
}

// mm_cols: acc[i] += sum over r < 64 of P[r][ty*4+i] * X[r][tx*4 .. tx*4+3] (P stride PS, X stride
// HS+4; HS = 64, so the 16 tx cover the row).
template <int HS>
__device__ __forceinline__ void mm_cols(float4 acc[4], const float* P, const float* X, int ty, int tx) {
    constexpr int RS = HS + 4;
#pragma unroll 4
    for (int r = 0; r < ATT_TILE; r++) {
        float4 p = ld4(&P[r * PS + ty * 4]), x = ld4(&X[r * RS + tx * 4]);
        acc[0] = axpy4(p.x, x, acc[0]);
        acc[1] = axpy4(p.y, x, acc[1]);
        acc[2] = axpy4(p.z, x, acc[2]);
        acc[3] = axpy4(p.w, x, acc[3]);
    }
}

// att_store_rows writes rows r0+ty*4+i (those below T) of one head's 64 columns at column offset
// col of rows rowStride apart: acc[i] times scale at columns tx*4..tx*4+3.
template <typename X>
__device__ __forceinline__ void att_store_rows(X* dst, const float4* acc, float scale, long rowStride, int r0, int T,
                                               int ty, int tx) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = r0 + ty * 4 + i;
        if (r < T) {
            X* p = dst + (long)r * rowStride + tx * 4;
            st(p, acc[i].x * scale);
            st(p + 1, acc[i].y * scale);
            st(p + 2, acc[i].z * scale);
            st(p + 3, acc[i].w * scale);
        }
    }
}

// attention_backward_dq_mm64: dq of a 64-query tile, over the key tiles up to the diagonal.
template <typename X>
__device__ __forceinline__ void att_backward_dq_mm64(ATT_BWD_ARGS(X)) {
    constexpr int HS = 64, RS = HS + 4;
    extern __shared__ __align__(16) float sm[];
    float *Qs = sm, *Os = Qs + ATT_TILE * RS, *Ks = Os + ATT_TILE * RS, *Vs = Ks + ATT_TILE * RS;
    float* Ss = Vs + ATT_TILE * RS; // dS, as [key][query]
    int tiles = (T + ATT_TILE - 1) / ATT_TILE, BH = B * NH;
    int qt = tiles - 1 - blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    long rs = 3L * C;
    const X* base = qkv + (long)b * T * rs + h * HS;
    const X* dob = dout + (long)b * T * C + h * HS;
    float scale = rsqrtf((float)HS);
    att_load<HS, false>(Qs, base, rs, qt * ATT_TILE, T);
    att_load<HS, false>(Os, dob, C, qt * ATT_TILE, T);
    float L[4], D[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int t = min(qt * ATT_TILE + ty + 16 * i, T - 1);
        L[i] = lse[(long)bh * T + t];
        D[i] = delta[(long)bh * T + t];
    }
    float4 dq[4];
#pragma unroll
    for (int i = 0; i < 4; i++) dq[i] = make_float4(0, 0, 0, 0);
    int len = att_seq_len(lengths, b, T), keyEnd = att_tile_key_end(qt * ATT_TILE, T, len, causal);
    for (int kt = 0; kt * ATT_TILE < keyEnd; kt++) {
        __syncthreads(); // everyone is done with the previous key tile and dS
        att_load<HS, false>(Ks, base + C, rs, kt * ATT_TILE, T);
        att_load<HS, false>(Vs, base + 2 * C, rs, kt * ATT_TILE, T);
        att_loaded();
        __syncthreads();
        float s[4][4] = {}, dp[4][4] = {};
        mm_rows<HS>(s, Qs, Ks, ty, tx);
        mm_rows<HS>(dp, Os, Vs, ty, tx);
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int t = qt * ATT_TILE + ty + 16 * i, u = kt * ATT_TILE + tx + 16 * j;
                float p = expf(u < att_key_end(t, len, causal) ? s[i][j] * scale - L[i] : -INFINITY);
                Ss[(tx + 16 * j) * PS + ty + 16 * i] = p * (dp[i][j] - D[i]);
            }
        }
        __syncthreads();
        mm_cols<HS>(dq, Ss, Ks, ty, tx);
    }
    att_store_rows(dqkv + (long)b * T * rs + h * HS, dq, scale, rs, qt * ATT_TILE, T, ty, tx);
}

// attention_backward_dkv_mm64: dk and dv of a 64-key tile, over the query tiles from the first that
// sees it (the diagonal when causal).
template <typename X>
__device__ __forceinline__ void att_backward_dkv_mm64(ATT_BWD_ARGS(X)) {
    constexpr int HS = 64, RS = HS + 4;
    extern __shared__ __align__(16) float sm[];
    float *Ks = sm, *Vs = Ks + ATT_TILE * RS, *Qs = Vs + ATT_TILE * RS, *Os = Qs + ATT_TILE * RS;
    float *Ps = Os + ATT_TILE * RS, *Ss = Ps + ATT_TILE * PS; // p and dS, as [query][key]
    float *Ls = Ss + ATT_TILE * PS, *Dl = Ls + ATT_TILE;
    int tiles = (T + ATT_TILE - 1) / ATT_TILE, BH = B * NH;
    int kt = blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    long rs = 3L * C;
    const X* base = qkv + (long)b * T * rs + h * HS;
    const X* dob = dout + (long)b * T * C + h * HS;
    float scale = rsqrtf((float)HS);
    att_load<HS, false>(Ks, base + C, rs, kt * ATT_TILE, T);
    att_load<HS, false>(Vs, base + 2 * C, rs, kt * ATT_TILE, T);
    float4 dk[4], dv[4];
#pragma unroll
    for (int i = 0; i < 4; i++) dk[i] = dv[i] = make_float4(0, 0, 0, 0);
    int len = att_seq_len(lengths, b, T);
    for (int qt = att_first_query_tile(kt * ATT_TILE, len, causal, tiles); qt < tiles; qt++) {
        __syncthreads(); // everyone is done with the previous query tile, p and dS
        att_load<HS, false>(Qs, base, rs, qt * ATT_TILE, T);
        att_load<HS, false>(Os, dob, C, qt * ATT_TILE, T);
        if (threadIdx.x < ATT_TILE) { // rows past T: lse +inf, so p = 0
            int t = qt * ATT_TILE + threadIdx.x;
            Ls[threadIdx.x] = t < T ? lse[(long)bh * T + t] : INFINITY;
            Dl[threadIdx.x] = t < T ? delta[(long)bh * T + t] : 0.0f;
        }
        att_loaded();
        __syncthreads();
        float s[4][4] = {}, dp[4][4] = {};
        mm_rows<HS>(s, Ks, Qs, ty, tx);
        mm_rows<HS>(dp, Vs, Os, ty, tx);
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int u = kt * ATT_TILE + ty + 16 * i, t = qt * ATT_TILE + tx + 16 * j;
                bool seen = u < len && t >= att_first_query(u, causal);
                float p = expf(seen ? s[i][j] * scale - Ls[tx + 16 * j] : -INFINITY);
                Ps[(tx + 16 * j) * PS + ty + 16 * i] = p;
                Ss[(tx + 16 * j) * PS + ty + 16 * i] = p * (dp[i][j] - Dl[tx + 16 * j]);
            }
        }
        __syncthreads();
        mm_cols<HS>(dv, Ps, Os, ty, tx);
        mm_cols<HS>(dk, Ss, Qs, ty, tx);
    }
    // A key tile no query sees (all padding) skips the loop: its K and V copies must still land
    // before the block exits and its shared memory goes to another block.
    att_loaded();
    X* dst = dqkv + (long)b * T * rs + h * HS;
    att_store_rows(dst + C, dk, scale, rs, kt * ATT_TILE, T, ty, tx);
    att_store_rows(dst + 2 * C, dv, 1.0f, rs, kt * ATT_TILE, T, ty, tx);
}

// attention_forward_mm64: the forward at head size 64 as tile products. s = q k^T is 4x4 per
// thread at rows ty+16i, columns tx+16j; the 16 threads of a row (one half warp) share its running
// max and sum by shuffles. p goes to shared memory as [key][query], and out += p v runs as 4 rows
// (ty*4+i) by 4 columns per thread; since those rows belong to other threads' softmax, each row's
// rescale factor and final sum pass through shared memory too. Dynamic shared memory: 70,144 bytes.
template <typename X>
__device__ __forceinline__ void att_forward_mm64(X* out, float* lse, const X* qkv, int B, int T, int C, int NH,
                                                 const int* lengths, int causal) {
    constexpr int HS = 64, RS = HS + 4;
    extern __shared__ __align__(16) float sm[];
    float *Qs = sm, *Ks = Qs + ATT_TILE * RS, *Vs = Ks + ATT_TILE * RS, *Ps = Vs + ATT_TILE * RS;
    float *Cs = Ps + ATT_TILE * PS, *Ls = Cs + ATT_TILE; // per query row: rescale factor, final sum
    int tiles = (T + ATT_TILE - 1) / ATT_TILE, BH = B * NH;
    int qt = tiles - 1 - blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    long rs = 3L * C;
    const X* base = qkv + (long)b * T * rs + h * HS;
    float scale = rsqrtf((float)HS);
    att_load<HS, false>(Qs, base, rs, qt * ATT_TILE, T);
    float m[4], l[4];
    float4 o[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
        o[i] = make_float4(0, 0, 0, 0);
    }
    int len = att_seq_len(lengths, b, T), keyEnd = att_tile_key_end(qt * ATT_TILE, T, len, causal);
    for (int kt = 0; kt * ATT_TILE < keyEnd; kt++) {
        __syncthreads(); // everyone is done with the previous key tile, p and the factors
        att_load<HS, false>(Ks, base + C, rs, kt * ATT_TILE, T);
        att_load<HS, false>(Vs, base + 2 * C, rs, kt * ATT_TILE, T);
        att_loaded();
        __syncthreads();
        float s[4][4] = {};
        mm_rows<HS>(s, Qs, Ks, ty, tx);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            // Every row sees key 0 in the first tile, so its running max is finite from then on
            // and masked keys add exp(-inf) = 0.
            int t = qt * ATT_TILE + ty + 16 * i;
            float mc = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int u = kt * ATT_TILE + tx + 16 * j;
                s[i][j] = u < att_key_end(t, len, causal) ? s[i][j] * scale : -INFINITY;
                mc = fmaxf(mc, s[i][j]);
            }
#pragma unroll
            for (int o2 = 1; o2 < 16; o2 <<= 1) mc = fmaxf(mc, __shfl_xor_sync(0xffffffffu, mc, o2));
            float mn = fmaxf(m[i], mc), corr = expf(m[i] - mn), sum = 0;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = expf(s[i][j] - mn);
                Ps[(tx + 16 * j) * PS + ty + 16 * i] = p;
                sum += p;
            }
#pragma unroll
            for (int o2 = 1; o2 < 16; o2 <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o2);
            l[i] = l[i] * corr + sum;
            m[i] = mn;
            if (tx == 0) Cs[ty + 16 * i] = corr;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float c = Cs[ty * 4 + i];
            o[i] = make_float4(o[i].x * c, o[i].y * c, o[i].z * c, o[i].w * c);
        }
        mm_cols<HS>(o, Ps, Vs, ty, tx);
    }
    if (tx == 0) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int t = qt * ATT_TILE + ty + 16 * i;
            Ls[ty + 16 * i] = l[i];
            if (t < T) lse[(long)bh * T + t] = m[i] + logf(l[i]);
        }
    }
    __syncthreads();
    X* dst = out + (long)b * T * C + h * HS;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int t = qt * ATT_TILE + ty * 4 + i;
        if (t < T) {
            float L = Ls[ty * 4 + i];
            X* p = dst + (long)t * C + tx * 4;
            st(p, o[i].x / L);
            st(p + 1, o[i].y / L);
            st(p + 2, o[i].z / L);
            st(p + 3, o[i].w / L);
        }
    }
}

#define ATT_MM64(X, S)                                                                                               \
    extern "C" __global__ void __launch_bounds__(256) attention_forward_mm64##S(X* out, float* lse, const X* qkv,     \
                                                                                int B, int T, int C, int NH,        \
                                                                                const int* lengths, int causal) {   \
        att_forward_mm64(out, lse, qkv, B, T, C, NH, lengths, causal);                                               \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256) attention_backward_dq_mm64##S(ATT_BWD_ARGS(X)) {                \
        att_backward_dq_mm64(ATT_BWD_CALL);                                                                          \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256) attention_backward_dkv_mm64##S(ATT_BWD_ARGS(X)) {               \
        att_backward_dkv_mm64(ATT_BWD_CALL);                                                                         \
    }
X_VARIANTS(ATT_MM64)
