// encoder_forward: out(BT,C) = wte[tokens[bt]] + wpe[bt % T]; wte (Vp,C), wpe (maxT,C) or null.
// One thread per output element.
extern "C" __global__ void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe,
                                           int BT, int T, int C) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)BT * C) return;
    int bt = (int)(i / C), c = (int)(i % C);
    float v = wte[(long)tokens[bt] * C + c];
    if (wpe) v += wpe[(long)(bt % T) * C + c];
    out[i] = v;
}

// encoder_backward_wte: dwte(Vp,C)[tokens[bt]] += dout(BT,C)[bt] for every bt in order.
// One thread per channel walks all positions, so repeated tokens add up in a fixed order without
// atomics; neighbouring threads touch neighbouring channels, so the accesses coalesce.
extern "C" __global__ void encoder_backward_wte(float* dwte, const float* dout, const int* tokens, int BT, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int bt = 0; bt < BT; bt++) {
        dwte[(long)tokens[bt] * C + c] += dout[(long)bt * C + c];
    }
}

// encoder_backward_wte_index: the same sums in parallel, from the host-built index (tokenIndex in
// Go): index = order(BT) | start(U+1) | token(U), where order lists the positions grouped by
// token, each group in increasing position, and group u is order[start[u] : start[u+1]], of token
// token[u]. Block (u, cb) of a 1-D grid U * ceil(C/blockDim) takes token u's channels
// [cb*blockDim, (cb+1)*blockDim) and adds the group's rows in position order: the serial kernel's
// order, so the same bits.
extern "C" __global__ void encoder_backward_wte_index(float* dwte, const float* dout, const int* index, int U, int BT, int C) {
    int cblocks = (C + blockDim.x - 1) / blockDim.x;
    int u = blockIdx.x / cblocks, c = (blockIdx.x % cblocks) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int* order = index;
    const int* start = index + BT;
    const int* token = start + U + 1;
    float* dst = dwte + (long)token[u] * C + c;
    float acc = *dst;
    for (int i = start[u]; i < start[u + 1]; i++) acc += dout[(long)order[i] * C + c];
    *dst = acc;
}

// encoder_backward_wpe: dwpe(T,C)[t] += sum over b of dout(B,T,C)[b,t]. One thread per (t, c).
extern "C" __global__ void encoder_backward_wpe(float* dwpe, const float* dout, int B, int T, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * C) return;
    float s = 0;
    for (int b = 0; b < B; b++) s += dout[(long)b * T * C + i];
    dwpe[i] += s;
}
