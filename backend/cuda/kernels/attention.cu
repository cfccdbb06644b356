// Multi-head self-attention without storing the (T,T) attention matrix.
// qkv(B,T,3C): q, k, v side by side, each NH heads of HS = C/NH; out(B,T,C); lse(B,NH,T).
// Score s[t,u] = q[t].k[u] * scale, scale = 1/sqrt(HS), for the keys u that query t sees
// (backend.AttentionMask): u < att_key_end(t, len, causal) (common.cuh), with len = lengths[b],
// the sequence's unpadded length (T when lengths is null), and u <= t too when causal.
// Each block handles one (b, h, row) and keeps that row's T scores in dynamic shared memory
// (T floats), plus HS floats for the row's own vector: the straightforward version, used for head
// sizes the tiled kernels (attention_tiled.cu) do not take and for inputs that are not 16-byte
// aligned. blockDim.x must be a multiple of 32 and at most 1024. qkv, out, dout and dqkv are in the
// activations' format X, lse and delta fp32; shared memory and all the math are fp32.

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads(); // red may still be read from a previous reduction
    if (lane == 0) red[w] = v;
    __syncthreads();
    float r = is_max ? -INFINITY : 0.0f;
    for (int i = 0; i < nw; i++) r = is_max ? fmaxf(r, red[i]) : r + red[i];
    return r;
}

template <typename A, typename B>
__device__ __forceinline__ float dot(const A* a, const B* b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += ld(a + i) * ld(b + i);
    return s;
}

// attention_forward: grid B*NH*T blocks, block (b, h, t) writes out[b,t,h*HS:(h+1)*HS] and lse[b,h,t].
template <typename X>
__device__ __forceinline__ void attention_forward_t(X* out, float* lse, const X* qkv, int B, int T, int C, int NH,
                                                    const int* lengths, int causal) {
    extern __shared__ float sh[]; // scores (T), q (HS), reduction space (32)
    int HS = C / NH;
    int t = blockIdx.x % T, h = (blockIdx.x / T) % NH, b = blockIdx.x / (T * NH);
    float* scores = sh;
    float* q = sh + T;
    float* red = q + HS;
    const X* base = qkv + (long)b * T * 3 * C;
    float scale = rsqrtf((float)HS);
    int end = att_key_end(t, att_seq_len(lengths, b, T), causal);
    for (int d = threadIdx.x; d < HS; d += blockDim.x) q[d] = ld(base + (long)t * 3 * C + h * HS + d);
    __syncthreads();
    float m = -INFINITY;
    for (int u = threadIdx.x; u < end; u += blockDim.x) {
        float s = dot(q, base + (long)u * 3 * C + C + h * HS, HS) * scale;
        scores[u] = s;
        m = fmaxf(m, s);
    }
    m = block_reduce(m, true, red);
    float l = 0;
    for (int u = threadIdx.x; u < end; u += blockDim.x) {
        float p = expf(scores[u] - m);
        scores[u] = p;
        l += p;
    }
    l = block_reduce(l, false, red); // the barrier inside also publishes scores
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0;
        for (int u = 0; u < end; u++) acc += scores[u] * ld(base + (long)u * 3 * C + 2 * C + h * HS + d);
        st(out + ((long)b * T + t) * C + h * HS + d, acc / l);
    }
    if (threadIdx.x == 0) lse[((long)b * NH + h) * T + t] = m + logf(l);
}

// attention_backward_delta: delta(B,NH,T) = sum over the head's HS of dout * out. One thread per entry.
template <typename X>
__device__ __forceinline__ void attention_backward_delta_t(float* delta, const X* dout, const X* out, int B, int T, int C, int NH) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * NH * T) return;
    int HS = C / NH;
    int t = i % T, h = (i / T) % NH, b = i / (T * NH);
    long off = ((long)b * T + t) * C + h * HS;
    delta[i] = dot(dout + off, out + off, HS);
}

// attention_backward_dq: block (b, h, t) writes dq[b,t,h] = scale * sum over the keys u it sees of
// ds[t,u] k[u], with p = exp(s - lse[t]), dp = dout[t].v[u], ds = p (dp - delta[t]).
template <typename X>
__device__ __forceinline__ void attention_backward_dq_t(X* dqkv, const X* dout, const X* qkv, const float* lse,
                                                        const float* delta, int B, int T, int C, int NH,
                                                        const int* lengths, int causal) {
    extern __shared__ float sh[]; // ds (T), q (HS), dout row (HS)
    int HS = C / NH;
    int t = blockIdx.x % T, h = (blockIdx.x / T) % NH, b = blockIdx.x / (T * NH);
    float* ds = sh;
    float* q = sh + T;
    float* dy = q + HS;
    const X* base = qkv + (long)b * T * 3 * C;
    float scale = rsqrtf((float)HS);
    long row = (long)b * NH * T + (long)h * T + t;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        q[d] = ld(base + (long)t * 3 * C + h * HS + d);
        dy[d] = ld(dout + ((long)b * T + t) * C + h * HS + d);
    }
    __syncthreads();
    float L = lse[row], D = delta[row];
    int end = att_key_end(t, att_seq_len(lengths, b, T), causal);
    for (int u = threadIdx.x; u < end; u += blockDim.x) {
        float p = expf(dot(q, base + (long)u * 3 * C + C + h * HS, HS) * scale - L);
        float dp = dot(dy, base + (long)u * 3 * C + 2 * C + h * HS, HS);
        ds[u] = p * (dp - D);
    }
    __syncthreads();
    X* dq = dqkv + (long)b * T * 3 * C + (long)t * 3 * C + h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0;
        for (int u = 0; u < end; u++) acc += ds[u] * ld(base + (long)u * 3 * C + C + h * HS + d);
        st(dq + d, acc * scale);
    }
}

// attention_backward_dkv: block (b, h, u) writes, summing over the queries t that see key u (t >= u
// when causal; none when u is padding, whose gradients are zero),
// dk[u] = scale * sum ds[t,u] q[t] and dv[u] = sum p[t,u] dout[t]. Each key has its own block,
// so no two blocks write the same element: no atomics, the same result every run.
template <typename X>
__device__ __forceinline__ void attention_backward_dkv_t(X* dqkv, const X* dout, const X* qkv, const float* lse,
                                                         const float* delta, int B, int T, int C, int NH,
                                                         const int* lengths, int causal) {
    extern __shared__ float sh[]; // p (T), ds (T), k (HS), v (HS)
    int HS = C / NH;
    int u = blockIdx.x % T, h = (blockIdx.x / T) % NH, b = blockIdx.x / (T * NH);
    float* p = sh;
    float* ds = sh + T;
    float* k = ds + T;
    float* v = k + HS;
    const X* base = qkv + (long)b * T * 3 * C;
    float scale = rsqrtf((float)HS);
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        k[d] = ld(base + (long)u * 3 * C + C + h * HS + d);
        v[d] = ld(base + (long)u * 3 * C + 2 * C + h * HS + d);
    }
    __syncthreads();
    long rows = (long)b * NH * T + (long)h * T;
    int first = u < att_seq_len(lengths, b, T) ? att_first_query(u, causal) : T;
    for (int t = first + threadIdx.x; t < T; t += blockDim.x) {
        float pt = expf(dot(base + (long)t * 3 * C + h * HS, k, HS) * scale - lse[rows + t]);
        float dp = dot(dout + ((long)b * T + t) * C + h * HS, v, HS);
        p[t] = pt;
        ds[t] = pt * (dp - delta[rows + t]);
    }
    __syncthreads();
    X* dk = dqkv + (long)b * T * 3 * C + (long)u * 3 * C + C + h * HS;
    X* dv = dk + C;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float ak = 0, av = 0;
        for (int t = first; t < T; t++) {
            ak += ds[t] * ld(base + (long)t * 3 * C + h * HS + d);
            av += p[t] * ld(dout + ((long)b * T + t) * C + h * HS + d);
        }
        st(dk + d, ak * scale);
        st(dv + d, av);
    }
}

#define ATTENTION_KERNELS(X, S)                                                                                      \
    extern "C" __global__ void attention_forward##S(X* out, float* lse, const X* qkv, int B, int T, int C, int NH,    \
                                                    const int* lengths, int causal) {                               \
        attention_forward_t(out, lse, qkv, B, T, C, NH, lengths, causal);                                            \
    }                                                                                                                \
    extern "C" __global__ void attention_backward_delta##S(float* delta, const X* dout, const X* out, int B, int T,    \
                                                           int C, int NH) {                                         \
        attention_backward_delta_t(delta, dout, out, B, T, C, NH);                                                   \
    }                                                                                                                \
    extern "C" __global__ void attention_backward_dq##S(X* dqkv, const X* dout, const X* qkv, const float* lse,       \
                                                        const float* delta, int B, int T, int C, int NH,            \
                                                        const int* lengths, int causal) {                           \
        attention_backward_dq_t(dqkv, dout, qkv, lse, delta, B, T, C, NH, lengths, causal);                          \
    }                                                                                                                \
    extern "C" __global__ void attention_backward_dkv##S(X* dqkv, const X* dout, const X* qkv, const float* lse,      \
                                                         const float* delta, int B, int T, int C, int NH,           \
                                                         const int* lengths, int causal) {                          \
        attention_backward_dkv_t(dqkv, dout, qkv, lse, delta, B, T, C, NH, lengths, causal);                         \
    }
X_VARIANTS(ATTENTION_KERNELS)
