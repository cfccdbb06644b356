// Softmax cross-entropy over the first V of Vp columns of logits(N,Vp); targets(N) int. logits and
// dlogits are in the activations' format X; lse and losses are fp32.

// crossentropy_forward: one block per row writes lse(N), the log-sum-exp of the row's first V
// logits, and losses(N) = lse - logits[target]. blockDim.x is a multiple of 32.
template <typename X>
__device__ __forceinline__ void crossentropy_forward_t(float* losses, float* lse, const X* logits, const int* targets,
                                                       int N, int V, int Vp) {
    __shared__ float red[32];
    int row = blockIdx.x;
    const X* x = logits + (long)row * Vp;
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    // Online max and sum of exp in one pass per thread. m starts at -FLT_MAX, as on the CPU, so a
    // -inf logit adds exp(-inf) = 0 instead of exp(-inf - -inf) = NaN.
    float m = -3.40282347e38f, s = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = ld(x + i);
        if (v > m) {
            s = s * expf(m - v) + 1.0f;
            m = v;
        } else {
            s += expf(v - m);
        }
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
    if (threadIdx.x == 0) {
        float total = 0;
        for (int i = 0; i < nw; i++) total += red[i];
        float l = bm + logf(total);
        lse[row] = l;
        losses[row] = l - ld(x + targets[row]);
    }
}

// crossentropy_backward: dlogits(N,Vp) = (exp(logits - lse) - onehot(target)) * dloss for
// columns < V and 0 for padding columns. Writes, does not accumulate; dlogits may be logits.
template <typename X>
__device__ __forceinline__ void crossentropy_backward_t(X* dlogits, const X* logits, const float* lse, const int* targets,
                                                        float dloss, int N, int V, int Vp) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)N * Vp) return;
    int row = (int)(i / Vp), col = (int)(i % Vp);
    float g = 0;
    if (col < V) {
        g = expf(ld(logits + i) - lse[row]);
        if (col == targets[row]) g -= 1.0f;
        g *= dloss;
    }
    st(dlogits + i, g);
}

#define CROSSENTROPY_KERNELS(X, S)                                                                                   \
    extern "C" __global__ void crossentropy_forward##S(float* losses, float* lse, const X* logits, const int* targets, \
                                                       int N, int V, int Vp) {                                      \
        crossentropy_forward_t(losses, lse, logits, targets, N, V, Vp);                                              \
    }                                                                                                                \
    extern "C" __global__ void crossentropy_backward##S(X* dlogits, const X* logits, const float* lse, const int* targets, \
                                                        float dloss, int N, int V, int Vp) {                        \
        crossentropy_backward_t(dlogits, logits, lse, targets, dloss, N, V, Vp);                                     \
    }
X_VARIANTS(CROSSENTROPY_KERNELS)
