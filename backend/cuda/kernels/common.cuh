// Shared helpers, prepended to every kernel file before NVRTC compiles it. Kernels use no CUDA
// headers, so they compile with a bare NVRTC (no toolkit install needed).
//
// Conventions: buffers are row-major (int for tokens); shapes are in each kernel's comment.
// Reductions run in a fixed order (no atomics), so results do not change from run to run.
//
// Storage formats (backend.DType): a float buffer holds float, bf16 or fp16 elements. Kernels are
// templates over their buffers' storage types, read every element as float (ld), compute and
// accumulate in float and round each output once, to nearest even, as they store it (st): the
// contract of backend.DType, which the CPU emulates. The 16-bit types and their conversions are
// written here with bit operations, the same on every architecture (sm_70 has no bf16
// instructions), and give the bits of backend.RoundBF16 and backend.RoundF16: NaN becomes the
// quiet NaN 0x7fc0 / 0x7e00 (0x7fc00000 widened, as on the CPU), overflow becomes infinity, fp16
// keeps its subnormals. Each extern "C" kernel exists once per storage type, its name suffixed
// _bf16 or _fp16 for the 16-bit formats (none for float); see the *_VARIANTS macros.

#define WARP 32
#define INFINITY __int_as_float(0x7f800000)

struct bf16 {
    unsigned short bits;
};
struct fp16 {
    unsigned short bits;
};

// bf16_round_bits rounds x to bfloat16 (RNE) and returns its 16 bits.
__device__ __forceinline__ unsigned short bf16_round_bits(float x) {
    unsigned b = __float_as_uint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; // NaN
    b += 0x7fffu + ((b >> 16) & 1u); // a carry into the exponent is right, up to infinity
    return (unsigned short)(b >> 16);
}

// fp16_bits_of packs a float32 magnitude m (bits, sign cleared) that is already a multiple of
// fp16's quantum at its exponent and at least 2^-14 (fp16's smallest normal), or infinity.
__device__ __forceinline__ unsigned short fp16_bits_of_normal(unsigned m) {
    if (m > 0x477fe000u) return 0x7c00;              // above 65504: infinity
    return (unsigned short)((m >> 13) - (112u << 10)); // rebias the exponent from 127 to 15
}

// fp16_round_bits rounds x to IEEE binary16 (RNE, with subnormals) and returns its 16 bits.
__device__ __forceinline__ unsigned short fp16_round_bits(float x) {
    unsigned b = __float_as_uint(x);
    unsigned short sign = (unsigned short)((b >> 16) & 0x8000u);
    unsigned m = b & 0x7fffffffu;
    if (m > 0x7f800000u) return 0x7e00; // NaN
    if (m < 0x38800000u) {              // below 2^-14: a multiple of 2^-24, fp16's subnormal quantum
        // In [0.5, 1) float's quantum is 2^-24, so adding 0.5 rounds to that grid, ties to even.
        unsigned k = __float_as_uint(__fadd_rn(__uint_as_float(m), 0.5f)) - 0x3f000000u; // 0..1024
        return (unsigned short)(sign | k);
    }
    m += 0xfffu + ((m >> 13) & 1u); // keep 10 of 23 mantissa bits, ties to even
    m &= ~0x1fffu;
    return (unsigned short)(sign | fp16_bits_of_normal(m));
}

__device__ __forceinline__ float bf16_to_float(unsigned short h) { return __uint_as_float((unsigned)h << 16); }

__device__ __forceinline__ float fp16_to_float(unsigned short h) {
    unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (e == 0) { // zero or subnormal: mant * 2^-24, exact in float
        return __uint_as_float(__float_as_uint((float)mant * 5.9604644775390625e-8f) | sign);
    }
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13)); // infinity, NaN
    return __uint_as_float(sign | ((e + 112u) << 23) | (mant << 13));
}

// ld reads one element as float; st rounds v to the element's format and stores it.
__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const bf16* p) { return bf16_to_float(p->bits); }
__device__ __forceinline__ float ld(const fp16* p) { return fp16_to_float(p->bits); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16* p, float v) { p->bits = bf16_round_bits(v); }
__device__ __forceinline__ void st(fp16* p, float v) { p->bits = fp16_round_bits(v); }

// ld8 reads 8 consecutive elements at a 16-byte aligned p as floats; st8 rounds and stores them.
__device__ __forceinline__ void ld8(const float* p, float* v) {
    float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void st8(float* p, const float* v) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
// The 16-bit formats (bf16, fp16): one 16-byte load of 8 elements, each converted by ld / st.
template <typename H>
__device__ __forceinline__ void ld8(const H* p, float* v) {
    uint4 u = *reinterpret_cast<const uint4*>(p);
    unsigned w[4] = {u.x, u.y, u.z, u.w};
    for (int i = 0; i < 4; i++) {
        H lo = {(unsigned short)(w[i] & 0xffffu)}, hi = {(unsigned short)(w[i] >> 16)};
        v[2 * i] = ld(&lo), v[2 * i + 1] = ld(&hi);
    }
}
template <typename H>
__device__ __forceinline__ void st8(H* p, const float* v) {
    unsigned w[4];
    for (int i = 0; i < 4; i++) {
        H lo, hi;
        st(&lo, v[2 * i]), st(&hi, v[2 * i + 1]);
        w[i] = lo.bits | ((unsigned)hi.bits << 16);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// X_VARIANTS(M) expands M(type, suffix) once per storage format; XG_VARIANTS(M) expands
// M(activation type, gradient type, suffix) for the pairs a model uses: parameter gradients in
// fp32, or in the activations' 16-bit format.
#define X_VARIANTS(M) M(float, ) M(bf16, _bf16) M(fp16, _fp16)
#define XG_VARIANTS(M) \
    M(float, float, ) M(bf16, float, _bf16_fp32) M(bf16, bf16, _bf16_bf16) M(fp16, float, _fp16_fp32) M(fp16, fp16, _fp16_fp16)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Attention masks (backend.AttentionMask), shared by attention.cu and attention_tiled.cu: lengths
// (B) holds each sequence's unpadded length, or is null (every sequence is T long); causal is 0
// or 1. att_seq_len is sequence b's length; a length past T is taken as T, so that a bad length
// cannot make a kernel read past its sequence (or the buffer); callers validate lengths (the
// CPU panics on them).
__device__ __forceinline__ int att_seq_len(const int* lengths, int b, int T) { return lengths ? min(lengths[b], T) : T; }

// att_key_end: query t of a sequence of length len sees the keys [0, att_key_end).
__device__ __forceinline__ int att_key_end(int t, int len, int causal) { return causal ? min(t + 1, len) : len; }

// att_first_query: the first query that sees key u (when u < len); every later query sees it too.
__device__ __forceinline__ int att_first_query(int u, int causal) { return causal ? u : 0; }
