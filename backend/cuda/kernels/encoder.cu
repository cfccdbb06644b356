// Storage: out, wte and wpe in the activations' format X; the gradients dwte and dwpe in G (fp32
// or X), dout in X.

// encoder_forward: out(BT,C) = wte[tokens[bt]] + wpe[bt % T]; wte (Vp,C), wpe (maxT,C) or null.
// One thread per output element.
template <typename X>
__device__ __forceinline__ void encoder_forward_t(X* out, const int* tokens, const X* wte, const X* wpe, int BT, int T, int C) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)BT * C) return;
    int bt = (int)(i / C), c = (int)(i % C);
    float v = ld(wte + (long)tokens[bt] * C + c);
    if (wpe) v += ld(wpe + (long)(bt % T) * C + c);
    st(out + i, v);
}

// encoder_backward_wte: dwte(Vp,C)[tokens[bt]] += dout(BT,C)[bt] for every bt in order.
// One thread per channel walks all positions, so repeated tokens add up in a fixed order without
// atomics; neighbouring threads touch neighbouring channels, so the accesses coalesce. With a
// 16-bit dwte each addition is rounded (a repeated token's row is rounded once per occurrence, not
// once as on the CPU); the model's fp32 gradients, and the indexed kernel, round once.
template <typename X, typename G>
__device__ __forceinline__ void encoder_backward_wte_t(G* dwte, const X* dout, const int* tokens, int BT, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int bt = 0; bt < BT; bt++) {
        G* d = dwte + (long)tokens[bt] * C + c;
        st(d, ld(d) + ld(dout + (long)bt * C + c));
    }
}

// encoder_backward_wte_index: the same sums in parallel, from the host-built index (tokenIndex in
// Go): index = U | order(BT) | start(U+1) | token(U), where U is the number of distinct tokens,
// order lists the positions grouped by token, each group in increasing position, and group u is
// order[start[u] : start[u+1]], of token token[u]. The 1-D grid is G * ceil(C/blockDim) blocks
// for any G (it does not depend on U, so a CUDA graph serves every batch): block (g, cb) takes
// the groups u = g, g+G, ... and, of each, channels [cb*blockDim, (cb+1)*blockDim), adding the
// group's rows in position order in fp32 and rounding once: for fp32 gradients the serial
// kernel's order, so the same bits.
template <typename X, typename G>
__device__ __forceinline__ void encoder_backward_wte_index_t(G* dwte, const X* dout, const int* index, int BT, int C) {
    int cblocks = (C + blockDim.x - 1) / blockDim.x;
    int groups = gridDim.x / cblocks;
    int c = (blockIdx.x % cblocks) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int U = index[0];
    const int* order = index + 1;
    const int* start = order + BT;
    const int* token = start + U + 1;
    for (int u = blockIdx.x / cblocks; u < U; u += groups) {
        G* dst = dwte + (long)token[u] * C + c;
        float acc = ld(dst);
        for (int i = start[u]; i < start[u + 1]; i++) acc += ld(dout + (long)order[i] * C + c);
        st(dst, acc);
    }
}

// encoder_backward_wpe: dwpe(T,C)[t] += sum over b of dout(B,T,C)[b,t]. One thread per (t, c).
template <typename X, typename G>
__device__ __forceinline__ void encoder_backward_wpe_t(G* dwpe, const X* dout, int B, int T, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * C) return;
    float s = 0;
    for (int b = 0; b < B; b++) s += ld(dout + (long)b * T * C + i);
    st(dwpe + i, ld(dwpe + i) + s);
}

#define ENCODER_FORWARD(X, S)                                                                                         \
    extern "C" __global__ void encoder_forward##S(X* out, const int* tokens, const X* wte, const X* wpe, int BT, int T, int C) { \
        encoder_forward_t(out, tokens, wte, wpe, BT, T, C);                                                          \
    }
X_VARIANTS(ENCODER_FORWARD)

#define ENCODER_BACKWARD(X, G, S)                                                                                     \
    extern "C" __global__ void encoder_backward_wte##S(G* dwte, const X* dout, const int* tokens, int BT, int C) {     \
        encoder_backward_wte_t(dwte, dout, tokens, BT, C);                                                            \
    }                                                                                                                 \
    extern "C" __global__ void encoder_backward_wte_index##S(G* dwte, const X* dout, const int* index, int BT, int C) { \
        encoder_backward_wte_index_t(dwte, dout, index, BT, C);                                                       \
    }                                                                                                                 \
    extern "C" __global__ void encoder_backward_wpe##S(G* dwpe, const X* dout, int B, int T, int C) {                 \
        encoder_backward_wpe_t(dwpe, dout, B, T, C);                                                                  \
    }
XG_VARIANTS(ENCODER_BACKWARD)
