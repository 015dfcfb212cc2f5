/* ggml_kernels.h — internal to format/: what ggml_quant.c (the scalar reference and the
 * driver behind ft_ggml_dequant_row / ft_ggml_dot_row / ft_ggml_dot_rows) shares with
 * ggml_simd.c (the AVX2 and AVX-512 tiers): the per-tier kernel table and the small scalar
 * pieces of block decoding every tier uses. Pure functions: any thread. */
#ifndef FT_FORMAT_GGML_KERNELS_H
#define FT_FORMAT_GGML_KERNELS_H

#include <stdint.h>
#include <string.h>

#include "format/ggml_quant.h"

/* Lanes of one dot-product accumulator in memory: an AVX-512 register (AVX2 uses the first
 * 8 and leaves the rest 0; the scalar tier uses all 16). */
#define FT_GGML_LANES 16

/* Decodes nb consecutive blocks of one type at src into dst[nb * block size], each element
 * bit-identical to the scalar reference decoder. */
typedef void (*ft_ggml_deq_fn)(const uint8_t *src, int64_t nb, float *dst);

/* For r < R (R <= 4), t < T, k < n (n a multiple of 16):
 *   acc[(r * T + t) * 16 + lane] += buf[r * ldb + k] * x[t * ldx + k]
 * with the k of each lane (k mod 16, or k mod 8 on AVX2) summed in increasing order (fp32,
 * fused multiply-add on the vector tiers). acc: [R, T, 16] f32, 64-byte aligned. */
typedef void (*ft_ggml_acc_fn)(const float *buf, int ldb, int R, int n, const float *x, int ldx,
                               int T, float *acc);

/* One token, R <= 4 rows of nb blocks each (row r at w + r * rb): acc[r * 16 + lane] = the
 * lane sums ft_ggml_acc_fn would give over the decoded rows (bit-identical: the same fused
 * multiply-adds in the same order), decoding in registers instead of through a buffer.
 * pf (used when R = 4): bytes from a row to the one to prefetch (the next tile's), 0 for
 * none. acc zeroed. */
typedef void (*ft_ggml_dot_fn)(const uint8_t *w, size_t rb, int R, int64_t nb, const float *x,
                               size_t pf, float *acc);

struct ft_ggml_tier {
    ft_ggml_deq_fn deq[FT_GGML_TYPE_COUNT]; /* NULL: the scalar reference decoder serves */
    ft_ggml_dot_fn dot[FT_GGML_TYPE_COUNT]; /* NULL: decode through the buffer and acc */
    ft_ggml_acc_fn acc;
};

/* round(f) to nearest, ties to even, for |f| < 2^22: adding 1.5 * 2^23 leaves the integer in
 * the low mantissa bits (what lrintf does in the default rounding mode and the vector tiers'
 * conversions do, without a call, so the int8-activation quantisers' loops vectorise). */
static inline int32_t ft_ggml_round_even(float f) {
    const float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The little-endian 16 bits at p. */
static inline uint16_t ft_ggml_rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

extern const struct ft_ggml_tier ft_ggml_tier_avx2;
extern const struct ft_ggml_tier ft_ggml_tier_avx512;

/* The f16 at p as f32 by F16C (exact like ft_f16_to_f32; every vector tier's target has it). */
static inline __attribute__((always_inline, target("f16c"))) float ft_ggml_f16c(const uint8_t *p) {
    return _cvtsh_ss(ft_ggml_rd16(p));
}
#endif

/* E8M0 exponent byte -> 2^(e-127) / 2 (GGML's ggml_e8m0_to_fp32_half: the E2M1 table below
 * holds doubled values). */
static inline float ft_ggml_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* MXFP4's E2M1 code -> twice its value (kvalues_mxfp4); Q4_0's code -> code - 8. Both are
 * "a 16-entry table times the block scale", which is how the vector tiers decode them. */
extern const int8_t ft_ggml_lut_mxfp4[16];
extern const int8_t ft_ggml_lut_q4_0[16];

/* The packed 6-bit scales and mins of a Q4_K / Q5_K block (12 bytes at q) as 16 bytes:
 * out[j] = scale of sub-block j, out[8 + j] = its min (GGML's get_scale_min_k4 for j = 0..7,
 * unpacked four at a time as in ggml-cpu's quants.c). */
static inline void ft_ggml_k4_scales(const uint8_t *q, uint8_t out[16]) {
    uint32_t u[4];
    memcpy(u, q, 12);
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4); /* mins 4..7 */
    const uint32_t mins = u[1] & m6;                       /* mins 0..3 */
    u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);        /* scales 4..7 */
    u[2] = mins;
    u[0] &= m6; /* scales 0..3 */
    memcpy(out, u, 16);
}

#endif
