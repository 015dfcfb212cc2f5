/* ggml_kernels.h — internal to backend/cpu: what ggml_dot.c (the driver behind
 * ft_cpu_ggml_dequant_row / ft_ggml_dot_row / ft_ggml_dot_rows) shares with ggml_simd.c,
 * ggml_x8.c and ggml_x32.c (the AVX2 and AVX-512 tiers): the per-tier kernel table and the
 * scalar helpers they use (the block layouts' own are in format/ggml_quant.h). Pure
 * functions: any thread. */
#ifndef FT_BACKEND_CPU_GGML_KERNELS_H
#define FT_BACKEND_CPU_GGML_KERNELS_H

#include <stdint.h>
#include <string.h>

#include "backend/cpu/ggml_dot.h"
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

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

extern const struct ft_ggml_tier ft_ggml_tier_avx2;
extern const struct ft_ggml_tier ft_ggml_tier_avx512;

/* The f16 at p as f32 by F16C (exact like ft_f16_to_f32; every vector tier's target has it). */
static inline __attribute__((always_inline, target("f16c"))) float ft_ggml_f16c(const uint8_t *p) {
    return _cvtsh_ss(ft_ggml_rd16(p));
}
#endif

#endif
