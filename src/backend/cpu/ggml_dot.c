/* ggml_dot.c — the drivers of ft_cpu_ggml_dequant_row / ft_ggml_dot_row / ft_ggml_dot_rows
 * over the ISA tier ft_cpu_isa() picks (ggml_simd.c; format/ggml_quant.c's scalar decoders are
 * the reference). Pure functions over caller memory: any thread. */
#include "backend/cpu/ggml_dot.h"

#include <string.h>

#include "backend/cpu/ggml_kernels.h"
#include "backend/cpu/ops.h"
#include "core/status.h"

/* ------------------------------------------------------------------ tiers */

/* The tier ft_cpu_isa() picks (avx512-bf16 runs the avx512 kernels); NULL: scalar. The CPU
 * backend owns the ISA choice (and ft_cpu_set_isa, which tests use to compare tiers). */
static const struct ft_ggml_tier *tier_now(void) {
#if defined(__x86_64__) || defined(__i386__)
    enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX512) return &ft_ggml_tier_avx512;
    if (isa == FT_ISA_AVX2) return &ft_ggml_tier_avx2;
#endif
    return NULL;
}

/* nb blocks (elements, for the plain types) of `type` at s into y, by tier k's decoder or
 * the scalar reference. */
static void deq_blocks(const struct ft_ggml_tier *k, int type, const uint8_t *s, int64_t nb,
                       float *y) {
    if (k && k->deq[type]) {
        k->deq[type](s, nb, y);
        return;
    }
    ft_ggml_dequant_blocks(type, s, nb, y);
}

/* The scalar tier's ft_ggml_acc_fn: 16 lanes, k mod 16. */
static void acc_scalar(const float *buf, int ldb, int R, int n, const float *x, int ldx, int T,
                       float *acc) {
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float *a = acc + ((size_t)r * T + t) * FT_GGML_LANES;
            const float *w = buf + (size_t)r * ldb, *xt = x + (size_t)t * ldx;
            for (int k = 0; k < n; k++) a[k % FT_GGML_LANES] += w[k] * xt[k];
        }
}

enum ft_status ft_cpu_ggml_dequant_row(int type, const void *src, float *dst, int64_t n) {
    enum ft_status st = ft_ggml_check_row(type, n);
    if (st == FT_OK) deq_blocks(tier_now(), type, src, n / ft_ggml_block_size(type), dst);
    return st;
}

/* ------------------------------------------------------------------ dot products */

/* A chunk is small so that decoding and multiplying overlap in the out-of-order window
 * (256 elements read 40% faster than 1024 with T = 1). */
#define CHUNK 256 /* elements of a row decoded at once: a multiple of every block size */
#define ROWS 4    /* rows decoded per chunk (their blocks are read as 4 streams) */
#define TOKENS 64 /* tokens per pass over the rows (more: the rows are decoded again) */

static float sum_lanes(const float *a) {
    float s[8];
    for (int i = 0; i < 8; i++) s[i] = a[i] + a[i + 8];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

/* y[t * ldy + r] for r < R rows at w (row_bytes apart, n elements each), t < T tokens:
 * each CHUNK of the R rows is decoded once into buf, then every token's partial sums are
 * accumulated from it. The Rn rows after them (the next tile) are prefetched meanwhile. */
static void dot_tile(const struct ft_ggml_tier *k, int type, const uint8_t *w, size_t row_bytes,
                     int R, int Rn, int64_t n, const float *x, int ldx, int T, float *y, int ldy) {
    _Alignas(64) float buf[ROWS * CHUNK];                  /* [R, CHUNK] decoded rows */
    _Alignas(64) float acc[ROWS * TOKENS * FT_GGML_LANES]; /* [R, T, 16] partial sums */
    const int blck = ft_ggml_block_size(type);
    const size_t bytes = ft_ggml_type_size(type);
    const ft_ggml_acc_fn accf = k ? k->acc : acc_scalar;
    memset(acc, 0, sizeof(float) * (size_t)(R * T * FT_GGML_LANES));
    for (int64_t k0 = 0; k0 < n; k0 += CHUNK) {
        const int ch = (int)FT_MIN(n - k0, CHUNK), c16 = ch & ~15;
        const uint8_t *src = w + (size_t)(k0 / blck) * bytes;
        const size_t cb = (size_t)(ch / blck) * bytes;
        for (int r = R; r < R + Rn; r++)
            for (size_t o = 0; o < cb; o += 64) __builtin_prefetch(src + r * row_bytes + o, 0, 2);
        for (int r = 0; r < R; r++)
            deq_blocks(k, type, src + r * row_bytes, ch / blck, buf + r * CHUNK);
        accf(buf, CHUNK, R, c16, x + k0, ldx, T, acc);
        for (int j = c16; j < ch; j++) /* plain types: n need not be a multiple of 16 */
            for (int r = 0; r < R; r++)
                for (int t = 0; t < T; t++)
                    acc[((size_t)r * T + t) * FT_GGML_LANES + j % FT_GGML_LANES] +=
                        buf[r * CHUNK + j] * x[(size_t)t * ldx + k0 + j];
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            y[(size_t)t * ldy + r] = sum_lanes(acc + ((size_t)r * T + t) * FT_GGML_LANES);
}

/* One token through the tier's fused kernel: rows in tiles of 4, each tile prefetching the
 * next one while it computes (+30% on one thread). */
static void dot_rows_fused(ft_ggml_dot_fn dot, int type, const uint8_t *w, size_t row_bytes,
                           int n_rows, const float *x, float *y) {
    _Alignas(64) float acc[ROWS * FT_GGML_LANES];
    const int64_t nb = (int64_t)(row_bytes / ft_ggml_type_size(type));
    for (int r0 = 0; r0 < n_rows; r0 += ROWS) {
        const int R = FT_MIN(n_rows - r0, ROWS);
        memset(acc, 0, sizeof acc);
        dot(w + (size_t)r0 * row_bytes, row_bytes, R, nb, x,
            n_rows - r0 >= 2 * ROWS ? ROWS * row_bytes : 0, acc);
        for (int r = 0; r < R; r++) y[r0 + r] = sum_lanes(acc + r * FT_GGML_LANES);
    }
}

void ft_ggml_dot_rows(int type, const void *w, size_t row_bytes, int n_rows, const float *x,
                      int ldx, int T, float *y, int ldy) {
    FT_ASSERT(ft_ggml_can_compute(type));
    const size_t bytes = ft_ggml_type_size(type);
    FT_ASSERT(row_bytes % bytes == 0 && n_rows >= 0 && T >= 0);
    const int64_t n = (int64_t)(row_bytes / bytes) * ft_ggml_block_size(type);
    const struct ft_ggml_tier *k = tier_now();
    if (T == 1 && k && k->dot[type]) {
        dot_rows_fused(k->dot[type], type, w, row_bytes, n_rows, x, y);
        return;
    }
    for (int r0 = 0; r0 < n_rows; r0 += ROWS)
        for (int t0 = 0; t0 < T; t0 += TOKENS)
            dot_tile(k, type, (const uint8_t *)w + (size_t)r0 * row_bytes, row_bytes,
                     FT_MIN(n_rows - r0, ROWS), FT_MAX(FT_MIN(n_rows - r0 - ROWS, ROWS), 0), n,
                     x + (size_t)t0 * ldx, ldx, FT_MIN(T - t0, TOKENS), y + (size_t)t0 * ldy + r0,
                     ldy);
}

float ft_ggml_dot_row(int type, const void *src, const float *x, int64_t n) {
    FT_ASSERT(ft_ggml_can_compute(type));
    const int blck = ft_ggml_block_size(type);
    FT_ASSERT(n >= 0 && n % blck == 0);
    float y = 0.0f;
    if (n) ft_ggml_dot_rows(type, src, ft_ggml_row_bytes(type, n), 1, x, 0, 1, &y, 1);
    return y;
}
