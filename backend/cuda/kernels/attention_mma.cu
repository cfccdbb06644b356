// Attention on tensor cores at head size 64, sm_80 and later (the kernels compile to nothing
// before sm_80; the backend launches them only on such GPUs): bf16 and fp16 storage with
// mma.sync.m16n8k16, and fp32 storage with TF32 products (mma.sync.m16n8k8, inputs rounded to
// TF32 as cuBLAS's TF32 mode does; the backend uses them only when TF32 matmuls are on). The same
// math, masks, grid and launch as attention_tiled.cu's head-size-64 kernels, but every product
// runs as warp-wide mma.sync with fp32 accumulation, reading the storage format straight from
// shared memory.
//
// Shapes (as attention.cu): qkv (B,T,3C) holds q, k, v side by side, each NH heads of HS = 64 =
// C/NH; out and dout (B,T,C); lse and delta (B,NH,T), fp32; dqkv (B,T,3C), overwritten.
//
// A block (4 warps, 128 threads) takes a 64-row tile of one (b, h), each warp 16 of its rows, and
// streams the other side's 64-row tiles through shared memory (dynamic: 3 or 4 tiles of 64 rows of
// TC_RS elements, and 2x64 floats in dkv). Scores, the online softmax's running max and sum,
// log-sum-exp, delta and every accumulator are fp32. What differs from the fp32-FMA kernels, as in
// FlashAttention-2: the probabilities p (forward, and dv's products) and dS (dq's and dk's products)
// are rounded to the input format of the second product of each pair, and exponentials are exp2
// of log2e-scaled scores (ex2.approx). Nothing is (T,T); no atomics: dq and (dk, dv) are separate
// kernels that each recompute s and dp, so every output element is summed by one warp in a fixed
// order and the bits repeat from run to run.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k8"): in a warp, lane = 4*g + q (g =
// lane>>2 the group, q = lane&3 its place in it). C and D, 16x8 fp32, are four floats per lane:
// (g, 2q), (g, 2q+1), (g+8, 2q), (g+8, 2q+1).
//  - k16 (16-bit): A, 16x16 row-major, is four 32-bit registers of two elements each, the lower
//    half the lower column: (g, 2q..2q+1), (g+8, 2q..), (g, 8+2q..), (g+8, 8+2q..); B, 16x8 (k by
//    n), is (k 2q..2q+1, n g) and (k 8+2q.., n g). The C fragments of n-tiles 2j and 2j+1 of one
//    product, packed in pairs, are the A fragment of k-step j of the next.
//  - k8 (TF32): A, 16x8, is (g, q), (g+8, q), (g, q+4), (g+8, q+4); B, 8x8, is (k q, n g) and
//    (k q+4, n g). A product sums over k in any order, so k-step j takes its k index q from column
//    8j+2q and q+4 from column 8j+2q+1, in A and B alike: then A's registers are adjacent pairs of
//    a row (one 8-byte load), and the C fragment of n-tile j is the A fragment of k-step j.
// So p and dS never leave registers.

#define TC_TILE 64 // rows per block and per streamed tile
#define TC_HS 64   // head size
#define TC_RS 72   // shared row stride in elements: HS + 8. 16-bit: the 8 rows of a fragment load
                   // start 4 banks apart; fp32: 8 banks apart, so each half warp's 8-byte loads
                   // hit 32 banks

typedef unsigned short u16;

// TC<X> describes format X's tensor-core path: shared elements E, products of K (16 or 8) along k.
template <typename X> struct TC;
template <> struct TC<bf16> {
    typedef u16 E;
    enum { K = 16 };
};
template <> struct TC<fp16> {
    typedef u16 E;
    enum { K = 16 };
};
template <> struct TC<float> {
    typedef float E;
    enum { K = 8 };
};

// tc_load starts copying rows [r0, r0+64) of one head's 64 columns (rows rowStride elements apart)
// into sh as cp.async 16-byte pieces (the backend checks 16-byte alignment); rows at or past T
// become zeros. tc_loaded waits for every copy this thread started; a __syncthreads must follow
// before other threads read them.
template <typename X>
__device__ __forceinline__ void tc_load(typename TC<X>::E* sh, const X* src, long rowStride, int r0, int T) {
#if __CUDA_ARCH__ >= 800
    constexpr int PER = 16 / sizeof(X), PIECES = TC_TILE * TC_HS / PER; // elements a piece, pieces a tile
#pragma unroll
    for (int it = 0; it < PIECES / 128; it++) { // blocks of 128 threads
        int i = threadIdx.x + 128 * it, r = i / (TC_HS / PER), c = (i % (TC_HS / PER)) * PER;
        bool live = r0 + r < T;
        const X* g = src + (long)(live ? r0 + r : 0) * rowStride + c; // a valid address even when zero-filling
        unsigned dst = (unsigned)__cvta_generic_to_shared(sh + r * TC_RS + c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(g), "r"(live ? 16 : 0));
    }
#endif
}

__device__ __forceinline__ void tc_loaded() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
#endif
}

// tf32 rounds x to TF32 (10-bit mantissa, to nearest, ties away), as an mma.tf32 operand.
__device__ __forceinline__ unsigned tf32(float x) {
    unsigned r = __float_as_uint(x);
#if __CUDA_ARCH__ >= 800
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#endif
    return r;
}

// tc_pair reads two adjacent 16-bit elements of a row as one register; tc_col reads the elements
// at p and one row below, the lower row in the lower half.
__device__ __forceinline__ unsigned tc_pair(const u16* p) { return *reinterpret_cast<const unsigned*>(p); }
__device__ __forceinline__ unsigned tc_col(const u16* p) { return (unsigned)p[0] | ((unsigned)p[TC_RS] << 16); }

// tc_frag_a loads the A fragment of k-step k0 (a column) of the 16 rows from r0 of a shared tile.
__device__ __forceinline__ void tc_frag_a(unsigned a[4], const u16* sh, int r0, int k0, int g, int q) {
    const u16* p = sh + (r0 + g) * TC_RS + k0 + 2 * q;
    a[0] = tc_pair(p);
    a[1] = tc_pair(p + 8 * TC_RS);
    a[2] = tc_pair(p + 8);
    a[3] = tc_pair(p + 8 * TC_RS + 8);
}
__device__ __forceinline__ void tc_frag_a(unsigned a[4], const float* sh, int r0, int k0, int g, int q) {
    float2 lo = *reinterpret_cast<const float2*>(sh + (r0 + g) * TC_RS + k0 + 2 * q);
    float2 hi = *reinterpret_cast<const float2*>(sh + (r0 + g + 8) * TC_RS + k0 + 2 * q);
    a[0] = tf32(lo.x);
    a[1] = tf32(hi.x);
    a[2] = tf32(lo.y);
    a[3] = tf32(hi.y);
}

// tc_frag_bt loads the B fragment B[k][n] = M[n0+n][k0+k] (M's rows are B's columns: the k^T of
// q k^T); tc_frag_b loads B[k][n] = M[k0+k][n0+n] (M's rows are B's k: the v of p v).
__device__ __forceinline__ void tc_frag_bt(unsigned b[2], const u16* sh, int n0, int k0, int g, int q) {
    const u16* p = sh + (n0 + g) * TC_RS + k0 + 2 * q;
    b[0] = tc_pair(p);
    b[1] = tc_pair(p + 8);
}
__device__ __forceinline__ void tc_frag_bt(unsigned b[2], const float* sh, int n0, int k0, int g, int q) {
    float2 v = *reinterpret_cast<const float2*>(sh + (n0 + g) * TC_RS + k0 + 2 * q);
    b[0] = tf32(v.x);
    b[1] = tf32(v.y);
}
__device__ __forceinline__ void tc_frag_b(unsigned b[2], const u16* sh, int k0, int n0, int g, int q) {
    const u16* p = sh + (k0 + 2 * q) * TC_RS + n0 + g;
    b[0] = tc_col(p);
    b[1] = tc_col(p + 8 * TC_RS);
}
__device__ __forceinline__ void tc_frag_b(unsigned b[2], const float* sh, int k0, int n0, int g, int q) {
    const float* p = sh + (k0 + 2 * q) * TC_RS + n0 + g;
    b[0] = tf32(p[0]);
    b[1] = tf32(p[TC_RS]);
}

// tc_mma: c += a b, one product in the format's inputs with fp32 accumulation.
__device__ __forceinline__ void tc_mma(float c[4], const unsigned a[4], const unsigned b[2], const bf16*) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
__device__ __forceinline__ void tc_mma(float c[4], const unsigned a[4], const unsigned b[2], const fp16*) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
__device__ __forceinline__ void tc_mma(float c[4], const unsigned a[4], const unsigned b[2], const float*) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// tc_pack rounds lo and hi to the format (to nearest even) and packs them, lo in the lower half.
__device__ __forceinline__ unsigned tc_pack(float lo, float hi, const bf16*) {
    unsigned r = 0;
#if __CUDA_ARCH__ >= 800
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}
__device__ __forceinline__ unsigned tc_pack(float lo, float hi, const fp16*) {
    unsigned r = 0;
#if __CUDA_ARCH__ >= 800
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

// tc_a_from_c makes the A fragment of k-step k of a product from the C fragments c (8 n-tiles, 64
// columns) of the one before.
template <typename X>
__device__ __forceinline__ void tc_a_from_c(unsigned a[4], const float c[8][4], int k) {
    a[0] = tc_pack(c[2 * k][0], c[2 * k][1], (const X*)0);
    a[1] = tc_pack(c[2 * k][2], c[2 * k][3], (const X*)0);
    a[2] = tc_pack(c[2 * k + 1][0], c[2 * k + 1][1], (const X*)0);
    a[3] = tc_pack(c[2 * k + 1][2], c[2 * k + 1][3], (const X*)0);
}
template <>
__device__ __forceinline__ void tc_a_from_c<float>(unsigned a[4], const float c[8][4], int k) {
    a[0] = tf32(c[k][0]);
    a[1] = tf32(c[k][2]);
    a[2] = tf32(c[k][1]);
    a[3] = tf32(c[k][3]);
}

__device__ __forceinline__ float tc_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// tc_qk: s[j] (8 n-tiles: the 64 columns of the streamed tile M) = A . M^T for the 16 rows from
// r0 of the shared tile A (their HS columns are the k dimension).
template <typename X, typename E>
__device__ __forceinline__ void tc_qk(float s[8][4], const E* A, int r0, const E* M, int g, int q) {
#pragma unroll
    for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0;
#pragma unroll
    for (int k = 0; k < TC_HS / TC<X>::K; k++) {
        unsigned a[4];
        tc_frag_a(a, A, r0, k * TC<X>::K, g, q);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            unsigned b[2];
            tc_frag_bt(b, M, 8 * j, k * TC<X>::K, g, q);
            tc_mma(s[j], a, b, (const X*)0);
        }
    }
}

// tc_pv: acc[n] (8 n-tiles over HS) += P . M for the 16 rows whose 64 columns of P are the C
// fragments p (8 n-tiles) and the streamed tile M (rows are P's columns).
template <typename X, typename E>
__device__ __forceinline__ void tc_pv(float acc[8][4], const float p[8][4], const E* M, int g, int q) {
#pragma unroll
    for (int k = 0; k < TC_TILE / TC<X>::K; k++) {
        unsigned a[4];
        tc_a_from_c<X>(a, p, k);
#pragma unroll
        for (int n = 0; n < 8; n++) {
            unsigned b[2];
            tc_frag_b(b, M, k * TC<X>::K, 8 * n, g, q);
            tc_mma(acc[n], a, b, (const X*)0);
        }
    }
}

// tc_store writes the rows r (and r+8) of a warp's 16x64 accumulator, those below T, times scale
// at dst + row*rowStride + column.
template <typename X>
__device__ __forceinline__ void tc_store(X* dst, const float acc[8][4], float scale, long rowStride, int r, int T, int q) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
        int row = r + 8 * half;
        if (row < T) {
            X* p = dst + (long)row * rowStride + 2 * q;
#pragma unroll
            for (int n = 0; n < 8; n++) {
                st(p + 8 * n, acc[n][2 * half] * scale);
                st(p + 8 * n + 1, acc[n][2 * half + 1] * scale);
            }
        }
    }
}

#define LOG2E 1.4426950408889634f

// tc_forward: out = softmax(q k^T / 8) v and lse for the 64 query rows of one tile. Each thread
// holds rows g and g+8 of its warp's 16: its quarter of their scores, running maxima m (log2
// units) and partial sums l, which the four lanes of a group combine at the end.
template <typename X>
__device__ __forceinline__ void tc_forward(X* out, float* lse, const X* qkv, int B, int T, int C, int NH,
                                           const int* lengths, int causal) {
#if __CUDA_ARCH__ >= 800
    typedef typename TC<X>::E E;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    E *Qs = (E*)tc_smem, *Ks = Qs + TC_TILE * TC_RS, *Vs = Ks + TC_TILE * TC_RS;
    int tiles = (T + TC_TILE - 1) / TC_TILE, BH = B * NH;
    int qt = tiles - 1 - blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    long rs = 3L * C;
    const X* base = qkv + (long)b * T * rs + h * TC_HS;
    int len = att_seq_len(lengths, b, T);
    int keyEnd = att_key_end(min(qt * TC_TILE + TC_TILE, T) - 1, len, causal);
    const float sl2 = 0.125f * LOG2E; // 1/sqrt(HS), in log2 units

    tc_load(Qs, base, rs, qt * TC_TILE, T);
    tc_loaded();
    __syncthreads();
    int row = qt * TC_TILE + 16 * w + g; // and row + 8
    int ke[2] = {att_key_end(min(row, T - 1), len, causal), att_key_end(min(row + 8, T - 1), len, causal)};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, o[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;

    for (int kt = 0; kt * TC_TILE < keyEnd; kt++) {
        __syncthreads(); // everyone is done with the previous tile
        tc_load(Ks, base + C, rs, kt * TC_TILE, T);
        tc_load(Vs, base + 2 * C, rs, kt * TC_TILE, T);
        tc_loaded();
        __syncthreads();
        float s[8][4];
        tc_qk<X>(s, Qs, 16 * w, Ks, g, q);
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int u = kt * TC_TILE + 8 * j + 2 * q + (e & 1), hr = e >> 1;
                s[j][e] = u < ke[hr] ? s[j][e] * sl2 : -INFINITY;
                mx[hr] = fmaxf(mx[hr], s[j][e]);
            }
        }
        float corr[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            // Every row sees key 0 in the first tile, so its maximum is finite from then on and a
            // masked key adds exp2(-inf) = 0.
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
            corr[hr] = tc_exp2(m[hr] - mx[hr]);
            m[hr] = mx[hr];
            l[hr] *= corr[hr];
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[j][e] = tc_exp2(s[j][e] - m[e >> 1]);
                l[e >> 1] += s[j][e];
            }
        }
#pragma unroll
        for (int n = 0; n < 8; n++) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }
        tc_pv<X>(o, s, Vs, g, q);
    }
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
        if (q == 0 && row + 8 * hr < T) lse[(long)bh * T + row + 8 * hr] = (m[hr] + log2f(l[hr])) * 0.6931471805599453f;
    }
    X* dst = out + (long)b * T * C + h * TC_HS;
#pragma unroll
    for (int n = 0; n < 8; n++) {
        o[n][0] /= l[0];
        o[n][1] /= l[0];
        o[n][2] /= l[1];
        o[n][3] /= l[1];
    }
    tc_store(dst, o, 1.0f, C, row, T, q);
#endif
}

// The backward kernels' arguments, as attention_tiled.cu's.
#define TC_BWD_ARGS(X)                                                                                      \
    X *dqkv, const X *dout, const X *qkv, const float *lse, const float *delta, int B, int T, int C, int NH, \
        const int *lengths, int causal
#define TC_BWD_CALL dqkv, dout, qkv, lse, delta, B, T, C, NH, lengths, causal

// tc_backward_dq: dq[t] = (1/8) sum over the keys u that t sees of ds[t,u] k[u], where
// p = exp(s - lse[t]), dp = dout[t].v[u] and ds = p (dp - delta[t]), for 64 query rows.
template <typename X>
__device__ __forceinline__ void tc_backward_dq(TC_BWD_ARGS(X)) {
#if __CUDA_ARCH__ >= 800
    typedef typename TC<X>::E E;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    E *Qs = (E*)tc_smem, *Os = Qs + TC_TILE * TC_RS, *Ks = Os + TC_TILE * TC_RS, *Vs = Ks + TC_TILE * TC_RS;
    int tiles = (T + TC_TILE - 1) / TC_TILE, BH = B * NH;
    int qt = tiles - 1 - blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    long rs = 3L * C;
    const X* base = qkv + (long)b * T * rs + h * TC_HS;
    const X* dob = dout + (long)b * T * C + h * TC_HS;
    int len = att_seq_len(lengths, b, T);
    int keyEnd = att_key_end(min(qt * TC_TILE + TC_TILE, T) - 1, len, causal);
    const float sl2 = 0.125f * LOG2E;

    tc_load(Qs, base, rs, qt * TC_TILE, T);
    tc_load(Os, dob, C, qt * TC_TILE, T);
    tc_loaded();
    __syncthreads();
    int row = qt * TC_TILE + 16 * w + g;
    int ke[2], rc[2] = {min(row, T - 1), min(row + 8, T - 1)};
    float L[2], D[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        ke[hr] = att_key_end(rc[hr], len, causal);
        L[hr] = lse[(long)bh * T + rc[hr]] * LOG2E;
        D[hr] = delta[(long)bh * T + rc[hr]];
    }
    float dq[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0;

    for (int kt = 0; kt * TC_TILE < keyEnd; kt++) {
        __syncthreads();
        tc_load(Ks, base + C, rs, kt * TC_TILE, T);
        tc_load(Vs, base + 2 * C, rs, kt * TC_TILE, T);
        tc_loaded();
        __syncthreads();
        float s[8][4], dp[8][4];
        tc_qk<X>(s, Qs, 16 * w, Ks, g, q);
        tc_qk<X>(dp, Os, 16 * w, Vs, g, q);
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) { // masked by a select, not a branch
                int u = kt * TC_TILE + 8 * j + 2 * q + (e & 1), hr = e >> 1;
                float p = tc_exp2(u < ke[hr] ? s[j][e] * sl2 - L[hr] : -INFINITY);
                s[j][e] = p * (dp[j][e] - D[hr]);
            }
        }
        tc_pv<X>(dq, s, Ks, g, q);
    }
    tc_store(dqkv + (long)b * T * rs + h * TC_HS, dq, 0.125f, rs, row, T, q);
#endif
}

// tc_backward_dkv: for the 64 keys u of a tile, summing over the queries t that see them (t >= u
// when causal; none for a padded key), dk[u] = (1/8) sum ds[t,u] q[t] and dv[u] = sum p[t,u]
// dout[t]. Each warp computes its 16 keys' s^T = k q^T and dp^T = v dout^T for a 64-query tile,
// whose lse and delta the block keeps in shared memory (lse +inf past T, so p = 0 there).
template <typename X>
__device__ __forceinline__ void tc_backward_dkv(TC_BWD_ARGS(X)) {
#if __CUDA_ARCH__ >= 800
    typedef typename TC<X>::E E;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    E *Ks = (E*)tc_smem, *Vs = Ks + TC_TILE * TC_RS, *Qs = Vs + TC_TILE * TC_RS, *Os = Qs + TC_TILE * TC_RS;
    float *Ls = (float*)(Os + TC_TILE * TC_RS), *Dl = Ls + TC_TILE;
    int tiles = (T + TC_TILE - 1) / TC_TILE, BH = B * NH;
    int kt = blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    long rs = 3L * C;
    const X* base = qkv + (long)b * T * rs + h * TC_HS;
    const X* dob = dout + (long)b * T * C + h * TC_HS;
    int len = att_seq_len(lengths, b, T);
    const float sl2 = 0.125f * LOG2E;

    tc_load(Ks, base + C, rs, kt * TC_TILE, T);
    tc_load(Vs, base + 2 * C, rs, kt * TC_TILE, T);
    tc_loaded();
    __syncthreads();
    int row = kt * TC_TILE + 16 * w + g; // this thread's keys: row and row + 8
    int fq[2];                           // the first query that sees each, or T when none does
#pragma unroll
    for (int hr = 0; hr < 2; hr++) fq[hr] = row + 8 * hr < len ? att_first_query(row + 8 * hr, causal) : T;
    float dk[8][4], dv[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++) dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0;

    for (int qt = kt * TC_TILE < len ? att_first_query(kt * TC_TILE, causal) / TC_TILE : tiles; qt < tiles; qt++) {
        __syncthreads(); // everyone is done with the previous query tile
        tc_load(Qs, base, rs, qt * TC_TILE, T);
        tc_load(Os, dob, C, qt * TC_TILE, T);
        if (threadIdx.x < TC_TILE) {
            int t = qt * TC_TILE + threadIdx.x;
            Ls[threadIdx.x] = t < T ? lse[(long)bh * T + t] * LOG2E : INFINITY;
            Dl[threadIdx.x] = t < T ? delta[(long)bh * T + t] : 0.0f;
        }
        tc_loaded();
        __syncthreads();
        float s[8][4], dp[8][4];
        tc_qk<X>(s, Ks, 16 * w, Qs, g, q);
        tc_qk<X>(dp, Vs, 16 * w, Os, g, q);
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int c = 8 * j + 2 * q + (e & 1), hr = e >> 1;
                float p = tc_exp2(qt * TC_TILE + c >= fq[hr] ? s[j][e] * sl2 - Ls[c] : -INFINITY);
                s[j][e] = p;
                dp[j][e] = p * (dp[j][e] - Dl[c]); // ds
            }
        }
        tc_pv<X>(dv, s, Os, g, q);
        tc_pv<X>(dk, dp, Qs, g, q);
    }
    X* dst = dqkv + (long)b * T * rs + h * TC_HS;
    tc_store(dst + C, dk, 0.125f, rs, row, T, q);
    tc_store(dst + 2 * C, dv, 1.0f, rs, row, T, q);
#endif
}

// The entry points, one per storage format (float: TF32 products). Launch: grid tiles * B * NH,
// blocks of 128, dynamic shared memory 3 (forward) or 4 tiles of 64 x TC_RS elements, plus 512
// bytes for dkv.
#define ATT_TC(X, S)                                                                                                 \
    extern "C" __global__ void __launch_bounds__(128) attention_forward_tc##S(X* out, float* lse, const X* qkv,      \
                                                                              int B, int T, int C, int NH,          \
                                                                              const int* lengths, int causal) {     \
        tc_forward(out, lse, qkv, B, T, C, NH, lengths, causal);                                                     \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(128) attention_backward_dq_tc##S(TC_BWD_ARGS(X)) {                   \
        tc_backward_dq(TC_BWD_CALL);                                                                                 \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(128) attention_backward_dkv_tc##S(TC_BWD_ARGS(X)) {                  \
        tc_backward_dkv(TC_BWD_CALL);                                                                                \
    }
X_VARIANTS(ATT_TC)
