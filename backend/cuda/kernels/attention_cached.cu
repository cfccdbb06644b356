// Attention for generation with a key/value cache (AttentionForwardCached in Go).
// qkv(B,Tnew,3C) holds q, k, v of the Tnew new positions pos..pos+Tnew-1 of each sequence, each
// NH heads of HS = C/NH; kcache and vcache are (B,NH,maxT,HS), so one head's keys (and values) are
// contiguous rows. Two launches: the first appends the new keys and values to the caches, the
// second attends, so every block sees all keys up to its own position. qkv, the caches and out are
// in one format X (the model's activations); the math is fp32.

// attention_cache_append: kcache[b,h,pos+t,:] = k[b,t,h,:] and vcache likewise. One thread per
// element of (B,Tnew,C).
template <typename X>
__device__ __forceinline__ void attention_cache_append_t(X* kcache, X* vcache, const X* qkv, int B, int Tnew, int pos,
                                                         int maxT, int C, int NH) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * Tnew * C) return;
    int HS = C / NH;
    int c = (int)(i % C), t = (int)((i / C) % Tnew), b = (int)(i / ((long)C * Tnew));
    int h = c / HS, d = c % HS;
    long src = ((long)b * Tnew + t) * 3 * C + c;
    long dst = (((long)b * NH + h) * maxT + pos + t) * HS + d;
    kcache[dst] = qkv[src + C];
    vcache[dst] = qkv[src + 2 * C];
}

// attention_forward_cached: block (b, h, t), one warp, writes out[b,t,h*HS:(h+1)*HS], the softmax
// over the cached keys u <= pos+t of q.k[u]/sqrt(HS), applied to the values. Lane j takes keys
// j, j+32, ...; the maximum and the sum are warp reductions in a fixed order, so the result is the
// same every run. Dynamic shared memory: the scores (pos+Tnew floats) and q (HS floats).
template <typename X>
__device__ __forceinline__ void attention_forward_cached_t(X* out, const X* kcache, const X* vcache, const X* qkv, int B,
                                                           int Tnew, int pos, int maxT, int C, int NH) {
    extern __shared__ float sh[];
    int HS = C / NH;
    int t = blockIdx.x % Tnew, h = (blockIdx.x / Tnew) % NH, b = blockIdx.x / (Tnew * NH);
    int n = pos + t + 1; // keys this query sees
    float* scores = sh;
    float* q = sh + pos + Tnew;
    const X* keys = kcache + ((long)b * NH + h) * maxT * HS;
    const X* values = vcache + ((long)b * NH + h) * maxT * HS;
    float scale = rsqrtf((float)HS);
    for (int d = threadIdx.x; d < HS; d += WARP) q[d] = ld(qkv + ((long)b * Tnew + t) * 3 * C + h * HS + d);
    __syncwarp();
    float m = -INFINITY;
    for (int u = threadIdx.x; u < n; u += WARP) {
        const X* k = keys + (long)u * HS;
        float s = 0;
        for (int d = 0; d < HS; d++) s += q[d] * ld(k + d);
        s *= scale;
        scores[u] = s;
        m = fmaxf(m, s);
    }
    m = warp_max(m);
    float l = 0;
    for (int u = threadIdx.x; u < n; u += WARP) {
        float p = expf(scores[u] - m);
        scores[u] = p;
        l += p;
    }
    l = warp_sum(l);
    __syncwarp(); // every lane's probabilities are in shared memory
    for (int d = threadIdx.x; d < HS; d += WARP) {
        float acc = 0;
        for (int u = 0; u < n; u++) acc += scores[u] * ld(values + (long)u * HS + d);
        st(out + ((long)b * Tnew + t) * C + h * HS + d, acc / l);
    }
}

#define ATTENTION_CACHED_KERNELS(X, S)                                                                               \
    extern "C" __global__ void attention_cache_append##S(X* kcache, X* vcache, const X* qkv, int B, int Tnew, int pos, \
                                                         int maxT, int C, int NH) {                                 \
        attention_cache_append_t(kcache, vcache, qkv, B, Tnew, pos, maxT, C, NH);                                    \
    }                                                                                                                \
    extern "C" __global__ void attention_forward_cached##S(X* out, const X* kcache, const X* vcache, const X* qkv,    \
                                                           int B, int Tnew, int pos, int maxT, int C, int NH) {     \
        attention_forward_cached_t(out, kcache, vcache, qkv, B, Tnew, pos, maxT, C, NH);                             \
    }
X_VARIANTS(ATTENTION_CACHED_KERNELS)
