#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)

// gelu_forward: out(N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of inp(N).
extern "C" __global__ void gelu_forward(float* out, const float* inp, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

// gelu_backward: dinp(N) = gelu'(inp) * dout (overwritten).
extern "C" __global__ void gelu_backward(float* dinp, const float* inp, const float* dout, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float x = inp[i];
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float sech2 = 1.0f - t * t;
    float grad = 0.5f * (1.0f + t) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
}

// residual_forward: out(N) = a(N) + b(N).
extern "C" __global__ void residual_forward(float* out, const float* a, const float* b, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = a[i] + b[i];
}

// residual_backward: da(N) += dout(N), db(N) += dout(N).
extern "C" __global__ void residual_backward(float* da, float* db, const float* dout, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    da[i] += dout[i];
    db[i] += dout[i];
}

// adamw: one torch.optim.AdamW step on params(N) from grads(N) with moments m(N), v(N):
// g = grads*grad_scale; p *= 1 - lr*weight_decay; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= step_size * m / (sqrt(v)/bc2_sqrt + eps) with step_size = lr/(1-b1^t), bc2_sqrt = sqrt(1-b2^t).
extern "C" __global__ void adamw(float* params, const float* grads, float* m, float* v, long N,
                                 float grad_scale, float decay, float beta1, float beta2,
                                 float step_size, float bc2_sqrt, float eps) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float g = grads[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = params[i] * (1.0f - decay);
    params[i] = p - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
}

// sum_squares_partial: partial(gridDim.x) = sums of x^2 over fixed grid-stride slices of x(N),
// in double. The grid size is fixed by the caller, so the result does not depend on timing.
extern "C" __global__ void sum_squares_partial(double* partial, const float* x, long N) {
    __shared__ double warps[32];
    double s = 0;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
        double xi = x[i];
        s += xi * xi;
    }
    s = warp_sum_d(s);
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    if (lane == 0) warps[w] = s;
    __syncthreads();
    if (w == 0) {
        s = lane < blockDim.x / WARP ? warps[lane] : 0.0;
        s = warp_sum_d(s);
        if (lane == 0) partial[blockIdx.x] = s;
    }
}

// sum_squares_final: out[0] = sum of partial(n) in index order (one thread).
extern "C" __global__ void sum_squares_final(double* out, const double* partial, int n) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double s = 0;
    for (int i = 0; i < n; i++) s += partial[i];
    out[0] = s;
}

// column_sum_partial: partial(chunks, OC)[k, j] = sum of x(N,OC)[i, j] over the rows i of chunk k
// (rows [k*rows, (k+1)*rows)). One thread per (chunk, column).
extern "C" __global__ void column_sum_partial(float* partial, const float* x, int N, int OC, int rows) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    int chunks = (N + rows - 1) / rows;
    if (i >= (long)chunks * OC) return;
    int k = (int)(i / OC), j = (int)(i % OC);
    float s = 0;
    for (int r = k * rows; r < min(N, (k + 1) * rows); r++) s += x[(long)r * OC + j];
    partial[i] = s;
}

// column_sum_reduce: out(OC) += sum over k of partial(chunks, OC)[k, :], in chunk order.
extern "C" __global__ void column_sum_reduce(float* out, const float* partial, int chunks, int OC) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= OC) return;
    float s = 0;
    for (int k = 0; k < chunks; k++) s += partial[(long)k * OC + j];
    out[j] += s;
}
