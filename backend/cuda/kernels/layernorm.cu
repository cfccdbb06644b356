// layernorm_forward: for each of the N rows of inp(N,C): mean(N), rstd(N) = 1/sqrt(var + 1e-5)
// (biased variance) and out(N,C) = (inp - mean) * rstd * weight(C) + bias(C).
// One warp per row; blockDim.x must be a multiple of 32.
template <typename X>
__device__ __forceinline__ void layernorm_forward_t(X* out, float* mean, float* rstd, const X* inp, const X* weight,
                                                    const X* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= N) return;
    const X* x = inp + (long)row * C;
    float s = 0;
    for (int c = lane; c < C; c += WARP) s += ld(x + c);
    float m = warp_sum(s) / C;
    float v = 0;
    for (int c = lane; c < C; c += WARP) {
        float d = ld(x + c) - m;
        v += d * d;
    }
    float r = rsqrtf(warp_sum(v) / C + 1e-5f);
    X* o = out + (long)row * C;
    for (int c = lane; c < C; c += WARP) st(o + c, (ld(x + c) - m) * r * ld(weight + c) + ld(bias + c));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// layernorm_backward: dinp(N,C) += the input gradient of every row, and, per block, the partial
// sums of dweight and dbias over the block's rows go to partial(gridDim.x, 2, C); the
// layernorm_backward_reduce kernel adds them up in block order. One warp per block, each block
// takes rows [blockIdx.x*rows, (blockIdx.x+1)*rows). Dynamic shared memory: 2*C floats.
template <typename X>
__device__ __forceinline__ void layernorm_backward_t(X* dinp, float* partial, const X* dout, const X* inp, const X* weight,
                                                     const float* mean, const float* rstd, int N, int C, int rows) {
    extern __shared__ float acc[]; // dweight (C), dbias (C)
    int lane = threadIdx.x;
    for (int c = lane; c < 2 * C; c += WARP) acc[c] = 0;
    __syncwarp();
    int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
    for (int row = r0; row < r1; row++) {
        const X* x = inp + (long)row * C;
        const X* dy = dout + (long)row * C;
        float m = mean[row], r = rstd[row];
        float a = 0, b = 0; // mean of dy*w, mean of dy*w*xhat
        for (int c = lane; c < C; c += WARP) {
            float xhat = (ld(x + c) - m) * r, g = ld(dy + c) * ld(weight + c);
            a += g;
            b += g * xhat;
        }
        a = warp_sum(a) / C;
        b = warp_sum(b) / C;
        X* dx = dinp + (long)row * C;
        for (int c = lane; c < C; c += WARP) {
            float d = ld(dy + c), xhat = (ld(x + c) - m) * r, g = d * ld(weight + c);
            st(dx + c, ld(dx + c) + (g - a - xhat * b) * r);
            acc[c] += d * xhat;
            acc[C + c] += d;
        }
    }
    __syncwarp();
    float* p = partial + (long)blockIdx.x * 2 * C;
    for (int c = lane; c < 2 * C; c += WARP) p[c] = acc[c];
}

// layernorm_backward4: layernorm_backward with 16-byte accesses, for fp32 buffers, C % 4 == 0 and
// 16-byte aligned rows: lane l takes the channel quads l, l+32, ... (so a lane's channels, and the order of
// its partial sums of a and b, differ from layernorm_backward's). Same launch and partial layout.
extern "C" __global__ void layernorm_backward4(float* dinp, float* partial, const float* dout, const float* inp,
                                               const float* weight, const float* mean, const float* rstd,
                                               int N, int C, int rows) {
    extern __shared__ float4 acc4[]; // dweight (C/4 quads), dbias (C/4 quads)
    int lane = threadIdx.x, C4 = C / 4;
    for (int q = lane; q < 2 * C4; q += WARP) acc4[q] = make_float4(0, 0, 0, 0);
    __syncwarp();
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
    for (int row = r0; row < r1; row++) {
        const float4* x4 = reinterpret_cast<const float4*>(inp + (long)row * C);
        const float4* dy4 = reinterpret_cast<const float4*>(dout + (long)row * C);
        float4* dx4 = reinterpret_cast<float4*>(dinp + (long)row * C);
        float m = mean[row], r = rstd[row];
        float a = 0, b = 0; // mean of dy*w, mean of dy*w*xhat
#pragma unroll 4
        for (int q = lane; q < C4; q += WARP) {
            float4 x = x4[q], dy = dy4[q], w = w4[q];
            float h0 = (x.x - m) * r, h1 = (x.y - m) * r, h2 = (x.z - m) * r, h3 = (x.w - m) * r;
            float g0 = dy.x * w.x, g1 = dy.y * w.y, g2 = dy.z * w.z, g3 = dy.w * w.w;
            a += g0;
            a += g1;
            a += g2;
            a += g3;
            b += g0 * h0;
            b += g1 * h1;
            b += g2 * h2;
            b += g3 * h3;
        }
        a = warp_sum(a) / C;
        b = warp_sum(b) / C;
#pragma unroll 4
        for (int q = lane; q < C4; q += WARP) {
            float4 x = x4[q], dy = dy4[q], w = w4[q], d = dx4[q], aw = acc4[q], ab = acc4[C4 + q];
            float h0 = (x.x - m) * r, h1 = (x.y - m) * r, h2 = (x.z - m) * r, h3 = (x.w - m) * r;
            d.x += (dy.x * w.x - a - h0 * b) * r;
            d.y += (dy.y * w.y - a - h1 * b) * r;
            d.z += (dy.z * w.z - a - h2 * b) * r;
            d.w += (dy.w * w.w - a - h3 * b) * r;
            dx4[q] = d;
            aw.x += dy.x * h0;
            aw.y += dy.y * h1;
            aw.z += dy.z * h2;
            aw.w += dy.w * h3;
            acc4[q] = aw;
            ab.x += dy.x;
            ab.y += dy.y;
            ab.z += dy.z;
            ab.w += dy.w;
            acc4[C4 + q] = ab;
        }
    }
    __syncwarp();
    float4* p = reinterpret_cast<float4*>(partial + (long)blockIdx.x * 2 * C);
    for (int q = lane; q < 2 * C4; q += WARP) p[q] = acc4[q];
}

// layernorm_backward_reduce: dweight(C) += sum of partial[k,0,:], dbias(C) += sum of partial[k,1,:]
// over k = 0..blocks-1. A block of 8 warps takes 32 channels: warp w sums k = w, w+8, ... and the
// eight warp sums are added in warp order, a fixed order. blockDim.x = 256, grid ceil(C/32).
template <typename G>
__device__ __forceinline__ void layernorm_backward_reduce_t(G* dweight, G* dbias, const float* partial, int blocks, int C) {
    __shared__ float sw[8][WARP], sb[8][WARP];
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    int c = blockIdx.x * WARP + lane;
    float a = 0, b = 0;
    if (c < C) {
        for (int k = w; k < blocks; k += 8) {
            a += partial[(long)k * 2 * C + c];
            b += partial[(long)k * 2 * C + C + c];
        }
    }
    sw[w][lane] = a;
    sb[w][lane] = b;
    __syncthreads();
    if (w == 0 && c < C) {
        a = b = 0;
        for (int i = 0; i < 8; i++) {
            a += sw[i][lane];
            b += sb[i][lane];
        }
        st(dweight + c, ld(dweight + c) + a);
        st(dbias + c, ld(dbias + c) + b);
    }
}

// residual_layernorm_forward: residual(N,C) = a + b, then layernorm_forward of residual into
// out(N,C), mean(N), rstd(N). One warp per row.
// The residual is rounded to its format before the statistics read it back, as the CPU's separate
// add and LayerNorm would.
template <typename X>
__device__ __forceinline__ void residual_layernorm_forward_t(X* residual, X* out, float* mean, float* rstd, const X* a,
                                                             const X* b, const X* weight, const X* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= N) return;
    long off = (long)row * C;
    float s = 0;
    for (int c = lane; c < C; c += WARP) {
        st(residual + off + c, ld(a + off + c) + ld(b + off + c));
        s += ld(residual + off + c);
    }
    float m = warp_sum(s) / C;
    float v = 0;
    for (int c = lane; c < C; c += WARP) {
        float d = ld(residual + off + c) - m; // each lane reads back what it wrote
        v += d * d;
    }
    float r = rsqrtf(warp_sum(v) / C + 1e-5f);
    for (int c = lane; c < C; c += WARP) st(out + off + c, (ld(residual + off + c) - m) * r * ld(weight + c) + ld(bias + c));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

#define LAYERNORM_KERNELS(X, S)                                                                                      \
    extern "C" __global__ void layernorm_forward##S(X* out, float* mean, float* rstd, const X* inp, const X* weight,  \
                                                    const X* bias, int N, int C) {                                  \
        layernorm_forward_t(out, mean, rstd, inp, weight, bias, N, C);                                               \
    }                                                                                                                \
    extern "C" __global__ void layernorm_backward##S(X* dinp, float* partial, const X* dout, const X* inp,            \
                                                     const X* weight, const float* mean, const float* rstd, int N,   \
                                                     int C, int rows) {                                             \
        layernorm_backward_t(dinp, partial, dout, inp, weight, mean, rstd, N, C, rows);                              \
    }                                                                                                                \
    extern "C" __global__ void layernorm_backward_reduce##S(X* dweight, X* dbias, const float* partial, int blocks,    \
                                                            int C) {                                                \
        layernorm_backward_reduce_t(dweight, dbias, partial, blocks, C);                                             \
    }                                                                                                                \
    extern "C" __global__ void residual_layernorm_forward##S(X* residual, X* out, float* mean, float* rstd,           \
                                                             const X* a, const X* b, const X* weight, const X* bias, \
                                                             int N, int C) {                                        \
        residual_layernorm_forward_t(residual, out, mean, rstd, a, b, weight, bias, N, C);                           \
    }
X_VARIANTS(LAYERNORM_KERNELS)
