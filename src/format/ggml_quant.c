/* ggml_quant.c — GGML block geometry, the scalar reference block decoders, and the drivers of
 * ft_ggml_dequant_row / ft_ggml_dot_row / ft_ggml_dot_rows over the ISA tier ft_cpu_isa()
 * picks (ggml_simd.c; the scalar tier is the reference). Called by format/gguf.c, the GGUF
 * model loader and the CPU backend. Pure functions over caller memory: any thread.
 * Each element's value is computed with the same f32 operations, in the same order, as GGML's
 * dequantize_row_* (ggml-quants.c), so results are bit-identical to GGML and to the gguf
 * Python package. Every multiply/subtract is its own statement so that no compiler contracts
 * them into an FMA (which would change the rounding). */
#include "format/ggml_quant.h"
#include "format/ggml_kernels.h"

#include <string.h>

#include "backend/cpu/ops.h"
#include "core/status.h"
#include "format/quant.h"

struct type_info {
    const char *name;
    int blck;      /* elements per block */
    size_t bytes;  /* bytes per block */
};

static const struct type_info k_types[FT_GGML_TYPE_COUNT] = {
    [FT_GGML_F32] = {"F32", 1, 4},
    [FT_GGML_F16] = {"F16", 1, 2},
    [FT_GGML_Q4_0] = {"Q4_0", 32, 2 + 16},
    [FT_GGML_Q4_1] = {"Q4_1", 32, 2 + 2 + 16},
    [FT_GGML_Q5_0] = {"Q5_0", 32, 2 + 4 + 16},
    [FT_GGML_Q5_1] = {"Q5_1", 32, 2 + 2 + 4 + 16},
    [FT_GGML_Q8_0] = {"Q8_0", 32, 2 + 32},
    [FT_GGML_Q8_1] = {"Q8_1", 32, 4 + 4 + 32},
    [FT_GGML_Q2_K] = {"Q2_K", 256, 2 + 2 + 256 / 16 + 256 / 4},
    [FT_GGML_Q3_K] = {"Q3_K", 256, 2 + 256 / 4 + 256 / 8 + 12},
    [FT_GGML_Q4_K] = {"Q4_K", 256, 2 + 2 + 256 / 2 + 12},
    [FT_GGML_Q5_K] = {"Q5_K", 256, 2 + 2 + 256 / 2 + 256 / 8 + 12},
    [FT_GGML_Q6_K] = {"Q6_K", 256, 2 + 256 / 2 + 256 / 4 + 256 / 16},
    [FT_GGML_Q8_K] = {"Q8_K", 256, 4 + 256 + 256 / 8},
    [FT_GGML_IQ2_XXS] = {"IQ2_XXS", 256, 2 + 256 / 4},
    [FT_GGML_IQ2_XS] = {"IQ2_XS", 256, 2 + 256 / 4 + 256 / 32},
    [FT_GGML_IQ3_XXS] = {"IQ3_XXS", 256, 2 + 256 / 4 + 256 / 8},
    [FT_GGML_IQ1_S] = {"IQ1_S", 256, 2 + 256 / 8 + 256 / 16},
    [FT_GGML_IQ4_NL] = {"IQ4_NL", 32, 2 + 16},
    [FT_GGML_IQ3_S] = {"IQ3_S", 256, 2 + 256 / 4 + 256 / 8 + 256 / 32 + 4},
    [FT_GGML_IQ2_S] = {"IQ2_S", 256, 2 + 256 / 4 + 256 / 16},
    [FT_GGML_IQ4_XS] = {"IQ4_XS", 256, 2 + 2 + 256 / 2 + 256 / 64},
    [FT_GGML_I8] = {"I8", 1, 1},
    [FT_GGML_I16] = {"I16", 1, 2},
    [FT_GGML_I32] = {"I32", 1, 4},
    [FT_GGML_I64] = {"I64", 1, 8},
    [FT_GGML_F64] = {"F64", 1, 8},
    [FT_GGML_IQ1_M] = {"IQ1_M", 256, 256 / 8 + 256 / 16 + 256 / 32},
    [FT_GGML_BF16] = {"BF16", 1, 2},
    [FT_GGML_TQ1_0] = {"TQ1_0", 256, 2 + 4 * 13},
    [FT_GGML_TQ2_0] = {"TQ2_0", 256, 2 + 64},
    [FT_GGML_MXFP4] = {"MXFP4", 32, 1 + 16},
};

static const struct type_info *info(int type) {
    if (type < 0 || type >= FT_GGML_TYPE_COUNT || !k_types[type].name) return NULL;
    return &k_types[type];
}

int ft_ggml_block_size(int type) {
    const struct type_info *t = info(type);
    return t ? t->blck : 0;
}

size_t ft_ggml_type_size(int type) {
    const struct type_info *t = info(type);
    return t ? t->bytes : 0;
}

const char *ft_ggml_type_name(int type) {
    const struct type_info *t = info(type);
    return t ? t->name : "?";
}

int ft_ggml_can_compute(int type) {
    switch (type) {
    case FT_GGML_F32: case FT_GGML_F16: case FT_GGML_BF16: case FT_GGML_Q8_0:
    case FT_GGML_Q4_0: case FT_GGML_Q4_1: case FT_GGML_Q5_0: case FT_GGML_Q5_1:
    case FT_GGML_Q4_K: case FT_GGML_Q5_K: case FT_GGML_Q6_K: case FT_GGML_MXFP4:
        return 1;
    default:
        return 0;
    }
}

size_t ft_ggml_row_bytes(int type, int64_t n) {
    const struct type_info *t = info(type);
    if (!t || n < 0 || n % t->blck) return 0;
    return (size_t)(n / t->blck) * t->bytes;
}

/* ------------------------------------------------------------------ block decoders */

static inline float rd_f16(const uint8_t *p) {
    return ft_f16_to_f32(ft_ggml_rd16(p));
}

static void deq_q8_0(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

static void deq_q4_0(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0x0f) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void deq_q4_1(const uint8_t *b, float *y) {
    const float d = rd_f16(b), m = rd_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        float a = (float)(qs[j] & 0x0f) * d, c = (float)(qs[j] >> 4) * d;
        y[j] = a + m;
        y[j + 16] = c + m;
    }
}

/* Q5_0 / Q5_1: the fifth bit of element j is bit j of the 32-bit qh */
static inline uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const uint32_t qh = rd_u32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        const int x0 = (int)((qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10)) - 16;
        const int x1 = (int)((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
        y[j] = (float)x0 * d;
        y[j + 16] = (float)x1 * d;
    }
}

static void deq_q5_1(const uint8_t *b, float *y) {
    const float d = rd_f16(b), m = rd_f16(b + 2);
    const uint32_t qh = rd_u32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        const int x0 = (int)((qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10));
        const int x1 = (int)((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
        float a = (float)x0 * d, c = (float)x1 * d;
        y[j] = a + m;
        y[j + 16] = c + m;
    }
}

/* The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes (get_scale_min_k4). */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void deq_q4_k(const uint8_t *b, float *y) {
    const float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int j = 0; j < 4; j++) { /* 64 elements: low nibbles then high nibbles of 32 bytes */
        int sc, m;
        scale_min_k4(2 * j, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        scale_min_k4(2 * j + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            float a = d1 * (float)(q[l] & 0x0f);
            y[l] = a - m1;
        }
        for (int l = 0; l < 32; l++) {
            float a = d2 * (float)(q[l] >> 4);
            y[32 + l] = a - m2;
        }
        q += 32;
        y += 64;
    }
}

static void deq_q5_k(const uint8_t *b, float *y) {
    const float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    for (int j = 0; j < 4; j++) {
        const uint8_t u1 = (uint8_t)(1u << (2 * j)), u2 = (uint8_t)(2u << (2 * j));
        int sc, m;
        scale_min_k4(2 * j, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        scale_min_k4(2 * j + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            float a = d1 * (float)((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0));
            y[l] = a - m1;
        }
        for (int l = 0; l < 32; l++) {
            float a = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0));
            y[32 + l] = a - m2;
        }
        ql += 32;
        y += 64;
    }
}

static void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = rd_f16(b + 208);
    for (int n = 0; n < 2; n++) { /* two halves of 128 elements */
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = (int)((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
            const int q2 = (int)((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
            const int q3 = (int)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            const int q4 = (int)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            const float s1 = d * (float)sc[is + 0], s2 = d * (float)sc[is + 2];
            const float s3 = d * (float)sc[is + 4], s4 = d * (float)sc[is + 6];
            y[l + 0] = s1 * (float)q1;
            y[l + 32] = s2 * (float)q2;
            y[l + 64] = s3 * (float)q3;
            y[l + 96] = s4 * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

const int8_t ft_ggml_lut_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
const int8_t ft_ggml_lut_q4_0[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

static void deq_mxfp4(const uint8_t *b, float *y) {
    const float d = ft_ggml_e8m0_half(b[0]);
    const uint8_t *qs = b + 1;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)ft_ggml_lut_mxfp4[qs[j] & 0x0f] * d;
        y[j + 16] = (float)ft_ggml_lut_mxfp4[qs[j] >> 4] * d;
    }
}

typedef void (*deq_fn)(const uint8_t *b, float *y);

static deq_fn block_decoder(int type) {
    switch (type) {
    case FT_GGML_Q8_0: return deq_q8_0;
    case FT_GGML_Q4_0: return deq_q4_0;
    case FT_GGML_Q4_1: return deq_q4_1;
    case FT_GGML_Q5_0: return deq_q5_0;
    case FT_GGML_Q5_1: return deq_q5_1;
    case FT_GGML_Q4_K: return deq_q4_k;
    case FT_GGML_Q5_K: return deq_q5_k;
    case FT_GGML_Q6_K: return deq_q6_k;
    case FT_GGML_MXFP4: return deq_mxfp4;
    default: return NULL;
    }
}

/* ------------------------------------------------------------------ tiers */

/* The tier ft_cpu_isa() picks (avx512-bf16 runs the avx512 kernels); NULL: scalar. The CPU
 * backend owns the ISA choice (and ft_cpu_set_isa, which tests use to compare tiers);
 * isa.c depends on nothing but core/, so format/ asking it is not a cycle. */
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
    deq_fn f = block_decoder(type);
    if (!f) { /* plain types, little-endian like the whole engine */
        ft_to_f32(y, s,
                  type == FT_GGML_F32   ? FT_DTYPE_F32
                  : type == FT_GGML_F16 ? FT_DTYPE_F16
                                        : FT_DTYPE_BF16,
                  (size_t)nb);
        return;
    }
    const size_t bytes = ft_ggml_type_size(type);
    const int blck = ft_ggml_block_size(type);
    for (int64_t i = 0; i < nb; i++) f(s + (size_t)i * bytes, y + i * blck);
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

enum ft_status ft_ggml_dequant_row(int type, const void *src, float *dst, int64_t n) {
    if (!ft_ggml_can_compute(type))
        return ft_fail(FT_ERR_UNSUPPORTED, "ggml: cannot dequantise type %s (%d)",
                       ft_ggml_type_name(type), type);
    const int blck = ft_ggml_block_size(type);
    if (n < 0 || n % blck)
        return ft_fail(FT_ERR_INVALID_ARG, "ggml: %s row of %lld elements is not a multiple of %d",
                       ft_ggml_type_name(type), (long long)n, blck);
    deq_blocks(tier_now(), type, src, n / blck, dst);
    return FT_OK;
}

/* ------------------------------------------------------------------ dot products */

/* A chunk is small so that decoding and multiplying overlap in the out-of-order window
 * (measured on the H200 host: 256 elements read 40% faster than 1024 with T = 1). */
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
 * next one while it computes (measured on the H200 host: +30% single-thread). */
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
