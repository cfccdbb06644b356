// Softmax cross-entropy over the first V of Vp columns of logits(N,Vp); targets(N) int. logits and
// dlogits are in the activations' format X; lse and losses are fp32.
//
// Every kernel here runs one block per row (blockDim.x a multiple of 32, at most 1024). With vec
// (Vp a multiple of 8 and logits 16-byte aligned, as GPT-2's padded vocabularies are) each thread
// takes chunks of 8 consecutive columns, read and written with 16-byte accesses (two for float),
// chunk c by thread c % blockDim.x; without, single columns the same way. The forward, the
// backward and the fused kernel visit columns alike, so they compute the same lse, bit for bit.

#define CE_VEC 8

// ce_online adds v to a running maximum m and sum s of exp(x - m).
__device__ __forceinline__ void ce_online(float v, float& m, float& s) {
    if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
    } else {
        s += expf(v - m);
    }
}

// ce_row_lse returns the log-sum-exp of x[0..V), the same value in every thread of the block.
// red is 32 floats of shared memory. It ends with a barrier after the last read of x.
template <typename X>
__device__ __forceinline__ float ce_row_lse(const X* x, int V, int Vp, bool vec, float* red) {
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    // m starts at -FLT_MAX, as on the CPU, so a -inf logit adds exp(-inf) = 0 instead of
    // exp(-inf - -inf) = NaN.
    float m = -3.40282347e38f, s = 0;
    if (vec) {
        for (int c = threadIdx.x; c * CE_VEC < V; c += blockDim.x) {
            float v[CE_VEC];
            ld8(x + c * CE_VEC, v);
            int n = min(CE_VEC, V - c * CE_VEC);
            for (int j = 0; j < CE_VEC; j++)
                if (j < n) ce_online(v[j], m, s);
        }
    } else {
        for (int i = threadIdx.x; i < V; i += blockDim.x) ce_online(ld(x + i), m, s);
    }
    float bm = warp_max(m);
    if (lane == 0) red[w] = bm;
    __syncthreads();
    bm = -INFINITY;
    for (int i = 0; i < nw; i++) bm = fmaxf(bm, red[i]);
    s *= expf(m - bm); // s is 0 for a thread that saw no columns
    s = warp_sum(s);
    __syncthreads();
    if (lane == 0) red[w] = s;
    __syncthreads();
    float total = 0;
    for (int i = 0; i < nw; i++) total += red[i];
    return bm + logf(total);
}

// ce_grad is one column's dlogit: (exp(x - l) - [col == target]) * dloss, 0 for padding.
__device__ __forceinline__ float ce_grad(float x, float l, int col, int target, float dloss, int V) {
    if (col >= V) return 0;
    float g = expf(x - l);
    if (col == target) g -= 1.0f;
    return g * dloss;
}

// ce_row_grad writes a row's dlogits d[0..Vp) from its logits x (d may be x) and lse l.
template <typename X>
__device__ __forceinline__ void ce_row_grad(X* d, const X* x, float l, int target, float dloss, int V, int Vp, bool vec) {
    if (vec) {
        for (int c = threadIdx.x; c * CE_VEC < Vp; c += blockDim.x) {
            int i0 = c * CE_VEC;
            float v[CE_VEC];
            ld8(x + i0, v);
            for (int j = 0; j < CE_VEC; j++) v[j] = ce_grad(v[j], l, i0 + j, target, dloss, V);
            st8(d + i0, v);
        }
    } else {
        for (int i = threadIdx.x; i < Vp; i += blockDim.x) st(d + i, ce_grad(ld(x + i), l, i, target, dloss, V));
    }
}

// crossentropy_forward: lse(N), the log-sum-exp of each row's first V logits, and
// losses(N) = lse - logits[target].
template <typename X>
__device__ __forceinline__ void crossentropy_forward_t(float* losses, float* lse, const X* logits, const int* targets,
                                                       int V, int Vp, int vec) {
    __shared__ float red[32];
    int row = blockIdx.x;
    const X* x = logits + (long)row * Vp;
    float l = ce_row_lse(x, V, Vp, vec, red);
    if (threadIdx.x == 0) {
        lse[row] = l;
        losses[row] = l - ld(x + targets[row]);
    }
}

// crossentropy_backward: dlogits(N,Vp) = (exp(logits - lse) - onehot(target)) * dloss for
// columns < V and 0 for padding columns. Writes, does not accumulate; dlogits may be logits.
template <typename X>
__device__ __forceinline__ void crossentropy_backward_t(X* dlogits, const X* logits, const float* lse, const int* targets,
                                                        float dloss, int V, int Vp, int vec) {
    long off = (long)blockIdx.x * Vp;
    ce_row_grad(dlogits + off, logits + off, lse[blockIdx.x], targets[blockIdx.x], dloss, V, Vp, vec);
}

// crossentropy_fused: the forward and then the backward of a row, dlogits replacing its logits.
// The second pass reads the row back from L2 (a row of GPT-2's 50304 bf16 logits is 100 KB),
// so memory sees the logits read once and written once, not read twice and written once.
template <typename X>
__device__ __forceinline__ void crossentropy_fused_t(float* losses, float* lse, X* logits, const int* targets,
                                                     float dloss, int V, int Vp, int vec) {
    __shared__ float red[32];
    int row = blockIdx.x, target = targets[row];
    X* x = logits + (long)row * Vp;
    float xt = threadIdx.x == 0 ? ld(x + target) : 0; // before any thread overwrites the row
    float l = ce_row_lse(x, V, Vp, vec, red);         // ends with a barrier: every read of x is done
    if (threadIdx.x == 0) {
        lse[row] = l;
        losses[row] = l - xt;
    }
    ce_row_grad(x, x, l, target, dloss, V, Vp, vec);
}

// argmax_better says whether the candidate (v, i) beats (best, bi): a larger value, or the same
// value at an earlier column; bi < 0 is no candidate yet.
__device__ __forceinline__ bool argmax_better(float v, int i, float best, int bi) {
    return i >= 0 && (bi < 0 || v > best || (v == best && i < bi));
}

// match_targets: hits[row] = 1 where the first largest of the row's first V logits is at column
// targets[row], else 0, as the CPU counts a masked-token prediction (first column on a tie; rows
// with NaN may differ). One block per row; the host then reads N floats, not N*Vp logits.
template <typename X>
__device__ __forceinline__ void match_targets_t(float* hits, const X* logits, const int* targets, int V, int Vp) {
    __shared__ float rv[32];
    __shared__ int ri[32];
    int row = blockIdx.x;
    const X* x = logits + (long)row * Vp;
    float best = 0;
    int bi = -1;
    for (int j = threadIdx.x; j < V; j += blockDim.x) { // columns in increasing order: the first of a tie stays
        float v = ld(x + j);
        if (bi < 0 || v > best) {
            best = v;
            bi = j;
        }
    }
    for (int o = WARP / 2; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (argmax_better(ov, oi, best, bi)) {
            best = ov;
            bi = oi;
        }
    }
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    if (lane == 0) {
        rv[w] = best;
        ri[w] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < nw; i++) {
            if (argmax_better(rv[i], ri[i], best, bi)) {
                best = rv[i];
                bi = ri[i];
            }
        }
        hits[row] = bi == targets[row] ? 1.0f : 0.0f;
    }
}

#define CROSSENTROPY_KERNELS(X, S)                                                                                   \
    extern "C" __global__ void crossentropy_forward##S(float* losses, float* lse, const X* logits, const int* targets, \
                                                       int V, int Vp, int vec) {                                    \
        crossentropy_forward_t(losses, lse, logits, targets, V, Vp, vec);                                            \
    }                                                                                                                \
    extern "C" __global__ void crossentropy_backward##S(X* dlogits, const X* logits, const float* lse, const int* targets, \
                                                        float dloss, int V, int Vp, int vec) {                      \
        crossentropy_backward_t(dlogits, logits, lse, targets, dloss, V, Vp, vec);                                   \
    }                                                                                                                \
    extern "C" __global__ void crossentropy_fused##S(float* losses, float* lse, X* logits, const int* targets,       \
                                                     float dloss, int V, int Vp, int vec) {                         \
        crossentropy_fused_t(losses, lse, logits, targets, dloss, V, Vp, vec);                                       \
    }                                                                                                                \
    extern "C" __global__ void match_targets##S(float* hits, const X* logits, const int* targets, int V, int Vp) {   \
        match_targets_t(hits, logits, targets, V, Vp);                                                               \
    }
X_VARIANTS(CROSSENTROPY_KERNELS)
