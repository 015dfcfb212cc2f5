/* ggml_quant.c — GGML block geometry and the scalar reference block decoders (the vector tiers
 * and the dot products: backend/cpu/ggml_dot.c). Called by format/gguf.c, the GGUF model
 * loader and the CPU backend. Pure functions over caller memory: any thread.
 * Each element's value is computed with the same f32 operations, in the same order, as GGML's
 * dequantize_row_* (ggml-quants.c), so results are bit-identical to GGML and to the gguf
 * Python package. Every multiply/subtract is its own statement so that no compiler contracts
 * them into an FMA (which would change the rounding). */
#include "format/ggml_quant.h"

#include <string.h>

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

/* ------------------------------------------------------------------ reference */

void ft_ggml_dequant_blocks(int type, const void *src, int64_t nb, float *y) {
    const uint8_t *s = src;
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

enum ft_status ft_ggml_check_row(int type, int64_t n) {
    if (!ft_ggml_can_compute(type))
        return ft_fail(FT_ERR_UNSUPPORTED, "ggml: cannot dequantise type %s (%d)",
                       ft_ggml_type_name(type), type);
    const int blck = ft_ggml_block_size(type);
    if (n < 0 || n % blck)
        return ft_fail(FT_ERR_INVALID_ARG, "ggml: %s row of %lld elements is not a multiple of %d",
                       ft_ggml_type_name(type), (long long)n, blck);
    return FT_OK;
}

enum ft_status ft_ggml_dequant_row(int type, const void *src, float *dst, int64_t n) {
    enum ft_status st = ft_ggml_check_row(type, n);
    if (st == FT_OK) ft_ggml_dequant_blocks(type, src, n / ft_ggml_block_size(type), dst);
    return st;
}

