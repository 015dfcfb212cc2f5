/* ggml_mmv.cu — decode GEMV over GGML block rows with integer dot products (Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4). The engine runs it for the routed experts of the formats
 * ft_cuda_q8_faster names (resident banks and cache slots); its dense form (ft_cuda_gemv_q8) is
 * measured by `bench_ggml --gpu` and tested, but the engine keeps dense weights in bf16, which
 * the bf16 GEMV reads faster for T > 1 (bench/RESULTS.md).
 *
 * What each thread block does: 256 threads. First, with every thread, it quantises the fp32
 * activation rows it needs (T token rows for a dense weight, one row for an expert pair) into
 * shared memory (q8_rows): per 32 elements an f32 scale d = max|x| / 127, int8 codes
 * c = round(x / d) (ties to even, clamped to +-127) and the sums of codes 0..15 and 16..31 —
 * the same codes as the CPU's ft_ggml_quant_x32, computed with the same correctly rounded
 * operations — with the input RMSNorm applied first when one is fused. Every block quantises
 * again (an L2-resident row of a few KiB) so that no separate kernel sits on the decode chain.
 * Then each warp takes R = 4 consecutive output rows and one K slice (ks warps split a row
 * group's K when the rows alone would leave the GPU idle). A step of the warp covers 32 / LPB
 * consecutive blocks of each of its rows: lane l reads piece l % LPB of block l / LPB (the
 * lanes of one block read adjacent bytes, so a warp's loads of a row are one contiguous span):
 *   32-element formats: LPB 4, a piece is 8 elements (Q8_0: 8 codes; the nibble formats: 4
 *     bytes, elements 4p..4p+3 in the low nibbles and 16+4p.. in the high ones);
 *   Q4_K / Q5_K: LPB 8, a piece is 16 bytes of qs = 16 elements of each of two sub-blocks;
 *   Q6_K: LPB 16, a piece is 8 bytes of ql (and of qh) = 8 elements of each of two groups.
 * It decodes the piece once into packed int8 words, then for each token dp4a's them with the
 * codes in shared memory and adds the block's f32 terms (weight scale x activation scale x the
 * integer sum, minus the min term where the format has one) to its accumulator. The warp sums
 * its lanes, the K slices are added in a fixed order through shared memory, and the epilogue
 * stores (dense: the fused GEMV's three outputs, bias, accumulate). Deterministic.
 *
 * Loads: blocks are only as aligned as their size allows inside a row (Q4_K 144 and Q5_K 176
 * bytes: 16; Q5_1 24: 8; Q4_1 20: 4; Q8_0 34, Q4_0 18, Q5_0 22, Q6_K 210: 2; MXFP4 17: 1), so
 * each format is instantiated for its natural alignment (16-byte loads for the K-quants' qs),
 * used when the matrix base, expert stride and row bytes are all that aligned, and for byte
 * loads otherwise.
 *
 * Accuracy: the integer sums are exact, so the result is the dot of the exactly dequantised
 * weights with the dequantised int8 activations, to f32 rounding of the per-block terms and
 * their sum (ggml_dot.h's x32 statement; test_gpu_ops checks it against a double reference on
 * the same codes and the CPU's own x32 dot). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels.cuh"
#include "format/quant.h"

#define MV_THREADS 256
#define MV_WARPS (MV_THREADS / WARP)
#define MV_R 4        /* output rows per warp */
#define MV_MAX_T 8    /* tokens per dense launch */
#define MV_SMEM_MAX (200 * 1024) /* dynamic shared memory the launcher asks for at most */

/* ------------------------------------------------------------------ loads */

/* 4 / 16 / 2 bytes at p, p aligned to A bytes (A = 1, 2, 4, 8 or 16) */
template <int A> __device__ __forceinline__ uint32_t ld32(const uint8_t *p) {
    if constexpr (A >= 4) {
        return __ldg((const unsigned int *)p);
    } else if constexpr (A == 2) {
        const unsigned short *h = (const unsigned short *)p;
        return (uint32_t)__ldg(h) | (uint32_t)__ldg(h + 1) << 16;
    } else {
        return (uint32_t)__ldg(p) | (uint32_t)__ldg(p + 1) << 8 | (uint32_t)__ldg(p + 2) << 16 |
               (uint32_t)__ldg(p + 3) << 24;
    }
}

template <int A> __device__ __forceinline__ uint4 ld128(const uint8_t *p) {
    if constexpr (A >= 16) {
        return __ldg((const uint4 *)p);
    } else {
        return make_uint4(ld32<A>(p), ld32<A>(p + 4), ld32<A>(p + 8), ld32<A>(p + 12));
    }
}

template <int A> __device__ __forceinline__ uint32_t ld16(const uint8_t *p) {
    if constexpr (A >= 2) return __ldg((const unsigned short *)p);
    else return (uint32_t)__ldg(p) | (uint32_t)__ldg(p + 1) << 8;
}

__device__ __forceinline__ float f16v(uint32_t h) {
    return __half2float(__ushort_as_half((unsigned short)(h & 0xffffu)));
}

__device__ __forceinline__ float e8m0_half_f(uint32_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
    return __uint_as_float(bits);
}

__device__ __forceinline__ int dp4(uint32_t a, uint32_t b, int c) { return __dp4a((int)a, (int)b, c); }

/* bits 0..3 of v moved to bit 0 of bytes 0..3 */
__device__ __forceinline__ uint32_t spread4(uint32_t v) {
    return (v & 1u) | (v & 2u) << 7 | (v & 4u) << 14 | (v & 8u) << 21;
}

/* Each byte of u (a code 0..15) replaced by MXFP4's doubled E2M1 value as a signed byte. */
__device__ __forceinline__ uint32_t mxfp4_lut4(uint32_t u) {
    const uint32_t t0 = 0x03020100u, t1 = 0x0c080604u, t2 = 0xfdfeff00u, t3 = 0xf4f8fafcu;
    uint32_t x = u | u >> 4; /* byte 0: b0 | b1 << 4, byte 2: b2 | b3 << 4 */
    uint32_t s = (x & 0xffu) | (x >> 8 & 0xff00u); /* the four codes as nibbles */
    uint32_t lo = __byte_perm(t0, t1, s & 0x7777u), hi = __byte_perm(t2, t3, s & 0x7777u);
    return __byte_perm(lo, hi, 0x3210u | (s & 0x8888u) >> 1); /* code >= 8: the byte from hi */
}

/* ------------------------------------------------------------------ formats */

/* The shared-memory activations: token t's codes at q + t * K, its block scales at
 * d + t * (K / 32). */
struct xs {
    const int8_t *q;
    const q8ds *d;
    int K;
};

__device__ __forceinline__ uint32_t xw(const xs &x, int t, int e) { /* 4 codes at element e */
    return *(const uint32_t *)(x.q + (size_t)t * x.K + e);
}
__device__ __forceinline__ uint2 xw2(const xs &x, int t, int e) { /* 8 codes */
    return *(const uint2 *)(x.q + (size_t)t * x.K + e);
}
__device__ __forceinline__ uint4 xw4(const xs &x, int t, int e) { /* 16 codes */
    return *(const uint4 *)(x.q + (size_t)t * x.K + e);
}
__device__ __forceinline__ q8ds xd(const xs &x, int t, int ab) { return x.d[(size_t)t * (x.K / 32) + ab]; }

template <int F> struct fmt;

/* Q8_0 {f16 d; int8 qs[32]}: piece p = codes 8p..8p+7 */
template <> struct fmt<FT_DTYPE_Q8_0> {
    static constexpr int QK = 32, LPB = 4, NA = 2, BYTES = 34;
    struct raw { uint32_t d, q0, q1; };
    template <int A> static __device__ raw load(const uint8_t *b, int p) {
        return {ld16<A>(b), ld32<A>(b + 2 + 8 * p), ld32<A>(b + 6 + 8 * p)};
    }
    template <int TT> static __device__ void dot(const raw &r, int p, int blk, const xs &x, int T, float *acc) {
        const float d = f16v(r.d);
#pragma unroll
        for (int t = 0; t < TT; t++) {
            if (t >= T) break;
            uint2 a = xw2(x, t, 32 * blk + 8 * p);
            int s = dp4(r.q0, a.x, dp4(r.q1, a.y, 0));
            acc[t] += xd(x, t, blk).d * (d * (float)s);
        }
    }
};

/* The 32-element nibble formats: piece p = qs bytes 4p..4p+3, elements 4p.. (low nibbles) and
 * 16+4p.. (high). hb_lo / hb_hi: the fifth bits (Q5_*) as 0x10 per byte; off: the code offset
 * subtracted per byte (Q4_0 8, Q5_0 16) so the dp4a is on signed values. */
template <int TT>
__device__ __forceinline__ void nib_dot(uint32_t lo, uint32_t hi, int p, int blk, const xs &x, int T,
                                        float ws, float wm, float *acc) {
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t >= T) break;
        int s = dp4(lo, xw(x, t, 32 * blk + 4 * p), dp4(hi, xw(x, t, 32 * blk + 16 + 4 * p), 0));
        q8ds a = xd(x, t, blk);
        float v = ws * (float)s;
        if (wm != 0.0f && p == 0) v += wm * (float)(a.s[0] + a.s[1]); /* the min: once per block */
        acc[t] += a.d * v;
    }
}

/* Q4_0 {f16 d; u8 qs[16]}: (nibble - 8) d */
template <> struct fmt<FT_DTYPE_Q4_0> {
    static constexpr int QK = 32, LPB = 4, NA = 2, BYTES = 18;
    struct raw { uint32_t d, q; };
    template <int A> static __device__ raw load(const uint8_t *b, int p) {
        return {ld16<A>(b), ld32<A>(b + 2 + 4 * p)};
    }
    template <int TT> static __device__ void dot(const raw &r, int p, int blk, const xs &x, int T, float *acc) {
        uint32_t lo = __vsub4(r.q & 0x0f0f0f0fu, 0x08080808u), hi = __vsub4(r.q >> 4 & 0x0f0f0f0fu, 0x08080808u);
        nib_dot<TT>(lo, hi, p, blk, x, T, f16v(r.d), 0.0f, acc);
    }
};

/* Q4_1 {f16 d, m; u8 qs[16]}: nibble d + m */
template <> struct fmt<FT_DTYPE_Q4_1> {
    static constexpr int QK = 32, LPB = 4, NA = 4, BYTES = 20;
    struct raw { uint32_t dm, q; };
    template <int A> static __device__ raw load(const uint8_t *b, int p) {
        return {ld32<A>(b), ld32<A>(b + 4 + 4 * p)};
    }
    template <int TT> static __device__ void dot(const raw &r, int p, int blk, const xs &x, int T, float *acc) {
        nib_dot<TT>(r.q & 0x0f0f0f0fu, r.q >> 4 & 0x0f0f0f0fu, p, blk, x, T, f16v(r.dm), f16v(r.dm >> 16), acc);
    }
};

/* Q5_0 {f16 d; u32 qh; u8 qs[16]}: (5-bit code - 16) d, bit j of qh the fifth bit of element j */
template <> struct fmt<FT_DTYPE_Q5_0> {
    static constexpr int QK = 32, LPB = 4, NA = 2, BYTES = 22;
    struct raw { uint32_t d, qh, q; };
    template <int A> static __device__ raw load(const uint8_t *b, int p) {
        return {ld16<A>(b), ld32<A>(b + 2), ld32<A>(b + 6 + 4 * p)};
    }
    template <int TT> static __device__ void dot(const raw &r, int p, int blk, const xs &x, int T, float *acc) {
        uint32_t lo = (r.q & 0x0f0f0f0fu) | spread4(r.qh >> (4 * p) & 15u) << 4;
        uint32_t hi = (r.q >> 4 & 0x0f0f0f0fu) | spread4(r.qh >> (16 + 4 * p) & 15u) << 4;
        nib_dot<TT>(__vsub4(lo, 0x10101010u), __vsub4(hi, 0x10101010u), p, blk, x, T, f16v(r.d), 0.0f, acc);
    }
};

/* Q5_1 {f16 d, m; u32 qh; u8 qs[16]}: 5-bit code d + m */
template <> struct fmt<FT_DTYPE_Q5_1> {
    static constexpr int QK = 32, LPB = 4, NA = 8, BYTES = 24;
    struct raw { uint32_t dm, qh, q; };
    template <int A> static __device__ raw load(const uint8_t *b, int p) {
        return {ld32<A>(b), ld32<A>(b + 4), ld32<A>(b + 8 + 4 * p)};
    }
    template <int TT> static __device__ void dot(const raw &r, int p, int blk, const xs &x, int T, float *acc) {
        uint32_t lo = (r.q & 0x0f0f0f0fu) | spread4(r.qh >> (4 * p) & 15u) << 4;
        uint32_t hi = (r.q >> 4 & 0x0f0f0f0fu) | spread4(r.qh >> (16 + 4 * p) & 15u) << 4;
        nib_dot<TT>(lo, hi, p, blk, x, T, f16v(r.dm), f16v(r.dm >> 16), acc);
    }
};

/* MXFP4 {u8 e (E8M0); u8 qs[16] (E2M1)}: doubled E2M1 value times 2^(e-127) / 2 */
template <> struct fmt<FT_DTYPE_MXFP4> {
    static constexpr int QK = 32, LPB = 4, NA = 1, BYTES = 17;
    struct raw { uint32_t e, q; };
    template <int A> static __device__ raw load(const uint8_t *b, int p) {
        return {(uint32_t)__ldg(b), ld32<A>(b + 1 + 4 * p)};
    }
    template <int TT> static __device__ void dot(const raw &r, int p, int blk, const xs &x, int T, float *acc) {
        nib_dot<TT>(mxfp4_lut4(r.q & 0x0f0f0f0fu), mxfp4_lut4(r.q >> 4 & 0x0f0f0f0fu), p, blk, x, T,
                    e8m0_half_f(r.e), 0.0f, acc);
    }
};

/* The 6-bit scales and mins of sub-blocks 2c and 2c+1 of a Q4_K/Q5_K block (scale bytes in
 * s0..s2), as GGML's get_scale_min_k4. */
__device__ __forceinline__ void k4_scales(uint32_t s0, uint32_t s1, uint32_t s2, int c, int sc[2], int m[2]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int j = 2 * c + i, k = 8 * (j & 3);
        if (j < 4) {
            sc[i] = s0 >> k & 63, m[i] = s1 >> k & 63;
        } else {
            sc[i] = (s2 >> k & 0x0f) | (s0 >> k >> 6 & 3) << 4;
            m[i] = (s2 >> k >> 4 & 0x0f) | (s1 >> k >> 6 & 3) << 4;
        }
    }
}

/* Q4_K / Q5_K after decoding: the codes of sub-blocks 2c (lo) and 2c+1 (hi), elements
 * 16h..16h+15 of each (piece i = 2c + h). */
template <int TT>
__device__ __forceinline__ void k4_dot(const uint32_t lo[4], const uint32_t hi[4], uint32_t dm,
                                       uint32_t s0, uint32_t s1, uint32_t s2, int i, int blk,
                                       const xs &x, int T, float *acc) {
    const int c = i >> 1, h = i & 1;
    int sc[2], m[2];
    k4_scales(s0, s1, s2, c, sc, m);
    const float d = f16v(dm), dmin = f16v(dm >> 16);
    const int e = 256 * blk + 64 * c + 16 * h, ab = 8 * blk + 2 * c;
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t >= T) break;
        uint4 a = xw4(x, t, e), b = xw4(x, t, e + 32);
        int sl = dp4(lo[0], a.x, dp4(lo[1], a.y, dp4(lo[2], a.z, dp4(lo[3], a.w, 0))));
        int sh = dp4(hi[0], b.x, dp4(hi[1], b.y, dp4(hi[2], b.z, dp4(hi[3], b.w, 0))));
        const q8ds al = xd(x, t, ab), ah = xd(x, t, ab + 1);
        const int cl = h ? al.s[1] : al.s[0], ch = h ? ah.s[1] : ah.s[0]; /* the codes' sums */
        acc[t] += al.d * (d * (float)(sc[0] * sl) - dmin * (float)(m[0] * cl)) +
                  ah.d * (d * (float)(sc[1] * sh) - dmin * (float)(m[1] * ch));
    }
}

/* Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}: piece i = qs bytes 16i..16i+15 */
template <> struct fmt<FT_DTYPE_Q4_K> {
    static constexpr int QK = 256, LPB = 8, NA = 16, BYTES = 144;
    struct raw { uint32_t dm, s0, s1, s2; uint4 q; };
    template <int A> static __device__ raw load(const uint8_t *b, int i) {
        return {ld32<A>(b), ld32<A>(b + 4), ld32<A>(b + 8), ld32<A>(b + 12), ld128<A>(b + 16 + 16 * i)};
    }
    template <int TT> static __device__ void dot(const raw &r, int i, int blk, const xs &x, int T, float *acc) {
        const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int k = 0; k < 4; k++) lo[k] = q[k] & 0x0f0f0f0fu, hi[k] = q[k] >> 4 & 0x0f0f0f0fu;
        k4_dot<TT>(lo, hi, r.dm, r.s0, r.s1, r.s2, i, blk, x, T, acc);
    }
};

/* Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: as Q4_K, the fifth bit of element
 * 64j + l in bit 2j of qh[l] (of 64j + 32 + l in bit 2j + 1) */
template <> struct fmt<FT_DTYPE_Q5_K> {
    static constexpr int QK = 256, LPB = 8, NA = 16, BYTES = 176;
    struct raw { uint32_t dm, s0, s1, s2; uint4 q, qh; };
    template <int A> static __device__ raw load(const uint8_t *b, int i) {
        return {ld32<A>(b), ld32<A>(b + 4), ld32<A>(b + 8), ld32<A>(b + 12), ld128<A>(b + 48 + 16 * i),
                ld128<A>(b + 16 + 16 * (i & 1))};
    }
    template <int TT> static __device__ void dot(const raw &r, int i, int blk, const xs &x, int T, float *acc) {
        const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w}, qh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
        const int sh = 2 * (i >> 1);
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            lo[k] = (q[k] & 0x0f0f0f0fu) | (qh[k] >> sh & 0x01010101u) << 4;
            hi[k] = (q[k] >> 4 & 0x0f0f0f0fu) | (qh[k] >> (sh + 1) & 0x01010101u) << 4;
        }
        k4_dot<TT>(lo, hi, r.dm, r.s0, r.s1, r.s2, i, blk, x, T, acc);
    }
};

/* Q6_K {u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d}: piece i (0..15): half n = i / 8, group
 * pair t = i / 4 % 2, l0 = 8 (i % 4); ql bytes 64n + 32t + l0.. give elements 128n + 32t + l0..
 * (low nibbles, qh bits 2t) and 128n + 64 + 32t + l0.. (high nibbles, qh bits 4 + 2t) */
template <> struct fmt<FT_DTYPE_Q6_K> {
    static constexpr int QK = 256, LPB = 16, NA = 2, BYTES = 210;
    struct raw { uint32_t l0, l1, h0, h1, d; int sl, sh; };
    template <int A> static __device__ raw load(const uint8_t *b, int i) {
        const int n = i >> 3, t = i >> 2 & 1, g = i & 3;
        const uint8_t *ql = b + 64 * n + 32 * t + 8 * g, *qh = b + 128 + 32 * n + 8 * g;
        const int si = 8 * n + 2 * t + (g >> 1);
        return {ld32<A>(ql), ld32<A>(ql + 4), ld32<A>(qh), ld32<A>(qh + 4), ld16<A>(b + 208),
                (int)(int8_t)__ldg(b + 192 + si), (int)(int8_t)__ldg(b + 196 + si)};
    }
    template <int TT> static __device__ void dot(const raw &r, int i, int blk, const xs &x, int T, float *acc) {
        const int n = i >> 3, t2 = i >> 2 & 1, g = i & 3;
        const int s_lo = 2 * t2, s_hi = 4 + 2 * t2;
        uint32_t lo0 = __vsub4((r.l0 & 0x0f0f0f0fu) | (r.h0 >> s_lo & 0x03030303u) << 4, 0x20202020u);
        uint32_t lo1 = __vsub4((r.l1 & 0x0f0f0f0fu) | (r.h1 >> s_lo & 0x03030303u) << 4, 0x20202020u);
        uint32_t hi0 = __vsub4((r.l0 >> 4 & 0x0f0f0f0fu) | (r.h0 >> s_hi & 0x03030303u) << 4, 0x20202020u);
        uint32_t hi1 = __vsub4((r.l1 >> 4 & 0x0f0f0f0fu) | (r.h1 >> s_hi & 0x03030303u) << 4, 0x20202020u);
        const float d = f16v(r.d);
        const int e = 256 * blk + 128 * n + 32 * t2 + 8 * g, ab = 8 * blk + 4 * n + t2;
#pragma unroll
        for (int t = 0; t < TT; t++) {
            if (t >= T) break;
            uint2 a = xw2(x, t, e), b = xw2(x, t, e + 64);
            int sl = dp4(lo0, a.x, dp4(lo1, a.y, 0)), sh = dp4(hi0, b.x, dp4(hi1, b.y, 0));
            acc[t] += d * (xd(x, t, ab).d * (float)(r.sl * sl) + xd(x, t, ab + 2).d * (float)(r.sh * sh));
        }
    }
};

/* ------------------------------------------------------------------ activations */

/* rows x [rows, K] (row stride K) into shared codes q [rows, K] and scales d [rows, K / 32],
 * after the RMSNorm x * rsqrt(mean(x^2) + eps) * nw when nw is set (the normalised rows also
 * stored to xn_out when set). Every thread of the block calls it; ends with a barrier. */
__device__ void q8_rows(int8_t *q, q8ds *d, const float *x, int rows, int K, const float *nw,
                        float eps, float *xn_out, float *r_s) {
    if (nw) {
        for (int t = 0; t < rows; t++) {
            float ss = 0.0f;
            for (int k = threadIdx.x; k < K; k += blockDim.x) {
                float v = x[(size_t)t * K + k];
                ss += v * v;
            }
            ss = block_sum(ss);
            if (threadIdx.x == 0) r_s[t] = rsqrtf(ss / (float)K + eps);
        }
        __syncthreads();
    }
    const int lane = threadIdx.x % WARP, nb = K / 32;
    for (int i = threadIdx.x / WARP; i < rows * nb; i += blockDim.x / WARP) {
        const int t = i / nb, b = i % nb;
        const size_t e = (size_t)t * K + 32 * b + lane;
        float v = x[e];
        if (nw) v = __fmul_rn(__fmul_rn(v, r_s[t]), nw[32 * b + lane]);
        if (xn_out) xn_out[e] = v;
        q8_quant32(v, lane, q + e - lane, d + i);
    }
    __syncthreads();
}

static size_t q8_smem(int rows, int K) { return (size_t)rows * K + (size_t)rows * (K / 32) * sizeof(q8ds); }

/* ------------------------------------------------------------------ the GEMV */

struct mv_args {
    const uint8_t *w;    /* row n at w + n * rb (experts: + ids[p] * stride) */
    size_t stride, rb;
    const int32_t *ids;  /* experts: [P] (-1: zero rows, -2: left alone); NULL: dense */
    int x_div;           /* experts: pair p reads x row p / x_div */
    const float *x, *nw; /* fp32 input [T or pairs, K]; nw: fused RMSNorm weight (dense) */
    float eps;
    float *xn_out;
    float *y[3];         /* dense: rows n_off + n < n0 -> y[0] (ld ldy0), < n0 + n1 -> y[1], else y[2] */
    const float *b[3];
    int n0, n1, ldy0, n_off, n_all, accumulate;
    int T, N, K, ks;     /* ks: warps splitting each row group's K (1, 2, 4, 8) */
};

/* Row n (of this launch's N) for token t: dense epilogue (ft_cuda_gemv_ex's gemv_store) */
__device__ __forceinline__ void mv_store(const mv_args &a, int n, int t, float v) {
    if (a.ids) {
        a.y[0][(size_t)blockIdx.y * a.N + n] = v;
        return;
    }
    n += a.n_off;
    float *y = a.y[0];
    const float *b = a.b[0];
    int col = n, ld = a.ldy0;
    if (n >= a.n0 + a.n1) y = a.y[2], b = a.b[2], col = n - a.n0 - a.n1, ld = a.n_all - a.n0 - a.n1;
    else if (n >= a.n0) y = a.y[1], b = a.b[1], col = n - a.n0, ld = a.n1;
    v += b ? b[col] : 0.0f;
    float *o = y + (size_t)t * ld + col;
    *o = a.accumulate ? *o + v : v;
}

template <int F, int A, int TT>
__global__ void __launch_bounds__(MV_THREADS) mv_kernel(mv_args a) {
    using Fm = fmt<F>;
    constexpr int BPS = WARP / Fm::LPB; /* blocks of a row per warp step */
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float r_s[MV_MAX_T];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, ks = a.ks, gpb = MV_WARPS / ks;
    const int n_first = (blockIdx.x * gpb + warp / ks) * MV_R, kw = warp % ks;
    const uint8_t *w = a.w;
    if (!a.ids && n_first < a.N) { /* dense: the group's rows into L2 while the previous kernel ends */
        const size_t span = (size_t)min(MV_R, a.N - n_first) * a.rb;
        for (size_t off = ((size_t)kw * WARP + lane) * 128; off < span; off += (size_t)ks * WARP * 128)
            prefetch_l2(w + (size_t)n_first * a.rb + off);
    }
    pdl_enter();
    int rows = a.T;
    const float *x = a.x;
    if (a.ids) {
        const int id = a.ids[blockIdx.y];
        if (id < 0) { /* -1: a pair computed elsewhere, zero here; -2: another launch's */
            const int r0 = blockIdx.x * gpb * MV_R, r1 = min(r0 + gpb * MV_R, a.N);
            if (id == -1)
                for (int n = r0 + threadIdx.x; n < r1; n += blockDim.x) a.y[0][(size_t)blockIdx.y * a.N + n] = 0.0f;
            return;
        }
        w += (size_t)id * a.stride;
        rows = 1;
        x += (size_t)(blockIdx.y / a.x_div) * a.K;
    }
    int8_t *sq = (int8_t *)smem;
    q8ds *sd = (q8ds *)(smem + (size_t)rows * a.K);
    float *part = (float *)(sd + (size_t)rows * (a.K / 32));
    q8_rows(sq, sd, x, rows, a.K, a.ids ? NULL : a.nw, a.eps,
            blockIdx.x == 0 && blockIdx.y == 0 && a.nw ? a.xn_out : NULL, r_s);
    const xs xv = {sq, sd, a.K};
    const int T = a.ids ? 1 : a.T, nb = a.K / Fm::QK, nsteps = (nb + BPS - 1) / BPS;
    const int piece = lane % Fm::LPB;
    float acc[MV_R][TT];
#pragma unroll
    for (int r = 0; r < MV_R; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = 0.0f;
    for (int s = kw; s < nsteps; s += ks) {
        const int blk = s * BPS + lane / Fm::LPB;
        if (blk >= nb) continue;
        typename Fm::raw rw[MV_R];
#pragma unroll
        for (int r = 0; r < MV_R; r++) /* every row's loads first, then the arithmetic */
            if (n_first + r < a.N)
                rw[r] = Fm::template load<A>(w + (size_t)(n_first + r) * a.rb + (size_t)blk * Fm::BYTES, piece);
#pragma unroll
        for (int r = 0; r < MV_R; r++)
            if (n_first + r < a.N) Fm::template dot<TT>(rw[r], piece, blk, xv, T, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < MV_R; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = warp_sum(acc[r][t]);
    if (ks == 1) {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < MV_R; r++)
#pragma unroll
                for (int t = 0; t < TT; t++)
                    if (t < T && n_first + r < a.N) mv_store(a, n_first + r, t, acc[r][t]);
        return;
    }
    if (lane == 0) /* part[warp][r][t]; the K slices of a group added in slice order */
#pragma unroll
        for (int r = 0; r < MV_R; r++)
#pragma unroll
            for (int t = 0; t < TT; t++) part[(warp * MV_R + r) * TT + t] = acc[r][t];
    __syncthreads();
    if (kw != 0 || lane >= MV_R * TT) return;
    const int r = lane / TT, t = lane % TT;
    if (t >= T || n_first + r >= a.N) return;
    float v = 0.0f;
    for (int k = 0; k < ks; k++) v += part[((warp + k) * MV_R + r) * TT + t];
    mv_store(a, n_first + r, t, v);
}

/* ------------------------------------------------------------------ launchers */

static int sm_count(void) {
    static int n = 0;
    if (!n) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
        if (n <= 0) n = 1;
    }
    return n;
}

/* The largest power of two (<= 16) dividing every one of the addresses and sizes */
static int align_of(uintptr_t v) {
    int a = 1;
    while (a < 16 && !(v & (uintptr_t)a)) a <<= 1;
    return a;
}

template <int F, int A, int TT>
static void mv_go(const mv_args &a, int units, cudaStream_t s) {
    using Fm = fmt<F>;
    const int BPS = WARP / Fm::LPB, nsteps = (a.K / Fm::QK + BPS - 1) / BPS;
    mv_args b = a;
    /* split K until the row groups give the GPU ~32 warps an SM, while slices keep a step each */
    const int groups = (a.N + MV_R - 1) / MV_R, target = sm_count() * 32;
    b.ks = 1;
    while (b.ks < MV_WARPS && 2 * b.ks <= nsteps && (long)groups * units * b.ks < target) b.ks *= 2;
    const int rows = a.ids ? 1 : a.T;
    const size_t smem = q8_smem(rows, a.K) + (size_t)MV_WARPS * MV_R * TT * sizeof(float);
    if (smem > 48 * 1024)
        cudaFuncSetAttribute(mv_kernel<F, A, TT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const dim3 grid(cdiv(groups, MV_WARPS / b.ks), a.ids ? units : 1);
    launch(mv_kernel<F, A, TT>, grid, MV_THREADS, smem, s, b);
}

/* By format, alignment and token count (experts: one token per pair). */
template <int F>
static void mv_format(const mv_args &a, int units, int aligned, cudaStream_t s) {
    constexpr int NA = fmt<F>::NA;
    if (!aligned) {
        mv_go<F, 1, MV_MAX_T>(a, units, s); /* rare: byte loads, any token count */
    } else if (a.ids || a.T == 1) {
        mv_go<F, NA, 1>(a, units, s);
    } else if (a.T == 2) {
        mv_go<F, NA, 2>(a, units, s);
    } else if (a.T <= 4) {
        mv_go<F, NA, 4>(a, units, s);
    } else {
        mv_go<F, NA, 8>(a, units, s);
    }
}

#define MV_TYPES(X) X(FT_DTYPE_Q8_0) X(FT_DTYPE_Q4_0) X(FT_DTYPE_Q4_1) X(FT_DTYPE_Q5_0) \
    X(FT_DTYPE_Q5_1) X(FT_DTYPE_Q4_K) X(FT_DTYPE_Q5_K) X(FT_DTYPE_Q6_K) X(FT_DTYPE_MXFP4)

static int natural_align(int dtype) {
#define NAT(t) if (dtype == t) return fmt<t>::NA;
    MV_TYPES(NAT)
#undef NAT
    return 0;
}

static void mv_dispatch(const mv_args &a, int dtype, int units, uintptr_t addr_bits, cudaStream_t s) {
    const int aligned = align_of(addr_bits) >= natural_align(dtype);
#define GO(t)                                  \
    if (dtype == t) {                          \
        mv_format<t>(a, units, aligned, s);    \
        return;                                \
    }
    MV_TYPES(GO)
#undef GO
}

extern "C" int ft_cuda_q8_format(int dtype) { return natural_align(dtype) > 0; }

/* The longest row (K) ft_cuda_gemv_q8 takes for T tokens a launch (it splits longer steps). */
static int q8_max_k(int T) {
    const size_t per = (size_t)T * (1 + sizeof(q8ds) / 32.0) + 1;
    return (int)((MV_SMEM_MAX - MV_WARPS * MV_R * MV_MAX_T * sizeof(float)) / per) & ~255;
}

extern "C" void ft_cuda_moe_gemv_q8(float *y, const float *x, int x_div, const void *w,
                                    size_t expert_stride, int dtype, const int32_t *ids, int P, int N,
                                    int K, cudaStream_t s) {
    if (P <= 0 || N <= 0) return;
    mv_args a = {};
    a.w = (const uint8_t *)w, a.stride = expert_stride;
    a.rb = ft_dtype_row_bytes((enum ft_dtype)dtype, K);
    a.ids = ids, a.x_div = x_div > 0 ? x_div : 1, a.x = x;
    a.y[0] = y, a.T = 1, a.N = N, a.K = K;
    mv_dispatch(a, dtype, P, (uintptr_t)w | expert_stride | a.rb, s);
}

extern "C" void ft_cuda_gemv_q8(const struct ft_cuda_gemv_args *g, const void *w, int dtype,
                                int n_off, int n_rows, cudaStream_t s) {
    if (n_rows <= 0) return;
    mv_args a = {};
    a.rb = ft_dtype_row_bytes((enum ft_dtype)dtype, g->K);
    a.w = (const uint8_t *)w;
    a.nw = g->nw, a.eps = g->eps;
    a.y[0] = g->y[0], a.y[1] = g->y[1], a.y[2] = g->y[2];
    a.b[0] = g->b[0], a.b[1] = g->b[1], a.b[2] = g->b[2];
    a.n0 = g->n0, a.n1 = g->n1, a.ldy0 = g->ldy0, a.n_off = n_off, a.n_all = g->N;
    a.accumulate = g->accumulate, a.N = n_rows, a.K = g->K;
    /* tokens per launch: 8, fewer where K is so long that their codes would not fit */
    int tc = MV_MAX_T;
    while (tc > 1 && q8_max_k(tc) < g->K) tc /= 2;
    for (int t0 = 0; t0 < g->T; t0 += tc) {
        a.T = g->T - t0 < tc ? g->T - t0 : tc;
        a.x = g->x + (size_t)t0 * g->K;
        a.xn_out = g->xn_out ? g->xn_out + (size_t)t0 * g->K : NULL;
        a.y[0] = g->y[0] + (size_t)t0 * g->ldy0;
        a.y[1] = g->y[1] ? g->y[1] + (size_t)t0 * g->n1 : NULL;
        a.y[2] = g->y[2] ? g->y[2] + (size_t)t0 * (g->N - g->n0 - g->n1) : NULL;
        mv_dispatch(a, dtype, 1, (uintptr_t)w | a.rb, s);
    }
}

/* the activations' codes as the GEMV quantises them, for tests: one block per row */
__global__ void q8_out_kernel(int8_t *q, float *d, int16_t *sums, const float *x, int K,
                              const float *nw, float eps, float *xn_out) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float r_s[1];
    int8_t *sq = (int8_t *)smem;
    q8ds *sd = (q8ds *)(smem + K);
    const size_t r = blockIdx.x;
    q8_rows(sq, sd, x + r * K, 1, K, nw, eps, xn_out ? xn_out + r * K : NULL, r_s);
    for (int k = threadIdx.x; k < K; k += blockDim.x) q[r * K + k] = sq[k];
    for (int b = threadIdx.x; b < K / 32; b += blockDim.x) {
        d[r * (K / 32) + b] = sd[b].d;
        sums[2 * (r * (K / 32) + b)] = sd[b].s[0], sums[2 * (r * (K / 32) + b) + 1] = sd[b].s[1];
    }
}

extern "C" void ft_cuda_quant_q8(int8_t *q, float *d, int16_t *sums, const float *x, int rows, int K,
                                 const float *nw, float eps, float *xn_out, cudaStream_t s) {
    const size_t smem = q8_smem(1, K);
    if (smem > 48 * 1024)
        cudaFuncSetAttribute(q8_out_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    q8_out_kernel<<<rows, MV_THREADS, smem, s>>>(q, d, sums, x, K, nw, eps, xn_out);
}

/* ------------------------------------------------------------------ Q8_0 experts, staged */

/* Q8_0's 34-byte blocks are only 2-byte aligned, so reading them where they lie takes byte or
 * half-word loads, and the load units, not HBM, bound the GEMV. Rows whose size is a multiple
 * of 16 bytes (K a multiple of 256) are instead copied whole into shared memory with 16-byte
 * loads, RW rows a warp, and decoded from there: a lane takes one block at a time (the scale,
 * then the 32 codes as 9 aligned words funnel-shifted into place) against 8 float4 of x, fp32,
 * and the warp sums its lanes. Same activations as the fp32-x kernel (ggml.cu); the sum runs
 * per block (codes times x, then times the scale), so it rounds differently from that one. */
#define Q8S_WARPS 8
#define Q8S_SMEM_MAX (200 * 1024)

template <int RW>
__global__ void __launch_bounds__(Q8S_WARPS * WARP) q8_0_staged_kernel(
    float *y, const float *x, int x_div, const uint8_t *w, size_t stride, int rb, const int32_t *ids,
    int N, int K) {
    extern __shared__ __align__(16) uint8_t smem[];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, p = blockIdx.y;
    const int n0 = (blockIdx.x * Q8S_WARPS + warp) * RW;
    pdl_enter();
    if (n0 >= N) return;
    const int id = ids[p], rows = min(RW, N - n0);
    if (id < 0) { /* -1: a pair computed elsewhere, zero here; -2: another launch's */
        if (id == -1 && lane < rows) y[(size_t)p * N + n0 + lane] = 0.0f;
        return;
    }
    uint8_t *sw = smem + (size_t)warp * (RW * rb + 16); /* +16: the last block's ninth word */
    const uint4 *src = (const uint4 *)(w + (size_t)id * stride + (size_t)n0 * rb);
    uint4 *dst = (uint4 *)sw;
    const int n16 = rows * (rb / 16);
    for (int i = lane; i < n16; i += WARP) dst[i] = __ldg(src + i);
    if (lane == 0) dst[n16] = make_uint4(0, 0, 0, 0);
    __syncwarp();
    const float *xr = x + (size_t)(p / x_div) * K;
    const int nb = K / 32;
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = sw + (size_t)r * rb;
        float acc = 0.0f;
        for (int b = lane; b < nb; b += WARP) {
            const int base = 34 * b + 2, sh = (base & 3) * 8;
            const float d = __half2float(__ushort_as_half(*(const unsigned short *)(row + 34 * b)));
            const uint32_t *wp = (const uint32_t *)(row + (base & ~3));
            uint32_t wd[9];
#pragma unroll
            for (int i = 0; i < 9; i++) wd[i] = wp[i];
            const float4 *x4 = (const float4 *)(xr + 32 * b);
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t c = __funnelshift_r(wd[i], wd[i + 1], sh);
                const float4 xv = __ldg(x4 + i);
                s = fmaf((float)(int8_t)(c & 0xffu), xv.x, s);
                s = fmaf((float)(int8_t)(c >> 8 & 0xffu), xv.y, s);
                s = fmaf((float)(int8_t)(c >> 16 & 0xffu), xv.z, s);
                s = fmaf((float)(int8_t)(c >> 24), xv.w, s);
            }
            acc = fmaf(d, s, acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) y[(size_t)p * N + n0 + r] = acc;
    }
}

extern "C" int ft_cuda_moe_gemv_q8_0_staged(float *y, const float *x, int x_div, const void *w,
                                            size_t expert_stride, const int32_t *ids, int P, int N,
                                            int K, cudaStream_t s) {
    const size_t rb = ft_dtype_row_bytes(FT_DTYPE_Q8_0, K);
    if (P <= 0 || N <= 0 || K % 256 || (((uintptr_t)w | expert_stride | rb | (uintptr_t)x) & 15))
        return 0;
    const int rw = N >= 1024 ? 2 : 1;
    const size_t smem = (size_t)Q8S_WARPS * (rw * rb + 16);
    if (smem > Q8S_SMEM_MAX) return 0;
    const dim3 grid(cdiv(N, Q8S_WARPS * rw), P);
    if (rw == 2) {
        if (smem > 48 * 1024)
            cudaFuncSetAttribute(q8_0_staged_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        launch(q8_0_staged_kernel<2>, grid, Q8S_WARPS * WARP, smem, s, y, x, x_div > 0 ? x_div : 1,
               (const uint8_t *)w, expert_stride, (int)rb, ids, N, K);
    } else {
        if (smem > 48 * 1024)
            cudaFuncSetAttribute(q8_0_staged_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        launch(q8_0_staged_kernel<1>, grid, Q8S_WARPS * WARP, smem, s, y, x, x_div > 0 ? x_div : 1,
               (const uint8_t *)w, expert_stride, (int)rb, ids, N, K);
    }
    return 1;
}
