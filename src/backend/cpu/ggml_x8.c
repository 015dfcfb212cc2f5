/* ggml_x8.c — dot products of K-quant rows (Q4_K, Q5_K, Q6_K) with activations quantised to
 * 8 bits per 256-element block (llama.cpp's Q8_K: an f32 scale, int8 codes, the sums of each
 * 16 codes), computed with integer multiply-adds inside a block: the fast, approximate twin
 * of ft_ggml_dot_rows (ggml_quant.h states the accuracy). A scalar reference, an AVX2 and an
 * AVX-512 (F+BW) tier, picked by ft_cpu_isa(); unsigned x signed byte products summed in
 * pairs (maddubs), then times the int16 sub-block scales (madd). Pure functions over caller
 * memory: any thread.
 *
 * Per block, with weights w_i = d * sc_j * q_i - dmin * m_j (Q4_K, Q5_K: sub-blocks of 32) or
 * d * sc_j * (q_i - 32) (Q6_K: sub-blocks of 16) and activations dx * c_i:
 *   sum_i w_i x_i = d dx sum_j sc_j sum_{i in j} q_i c_i - dmin dx sum_j m_j csum_j
 *   (Q6_K: d dx (sum_j sc_j sum_{i in j} q_i c_i - 32 sum_j sc_j csum_j))
 * where the integer sums are exact and only the per-block products and the sum over blocks
 * are rounded (f32). */
#include "backend/cpu/ggml_kernels.h"

#include <math.h>

#include "backend/cpu/ops.h"
#include "core/status.h"

/* One block of activations (layout of llama.cpp's block_q8_K). For Q4_K/Q5_K weights the codes
 * are stored with the middle two 32-element chunks of each 128 swapped (x8_pos), the order those
 * formats' nibbles come in, so the AVX-512 dot loads them with no shuffle (measured 15-20% at
 * T = 8); Q6_K's are in element order. The sums stay in element order. */
struct x8_block {
    float d;           /* scale: the block's max |x| / 127 */
    int8_t q[FT_QK_K]; /* codes round(x / d), in [-127, 127] */
    int16_t bsum[16];  /* sum of codes 16i .. 16i+15 (elements) */
};

/* Where element j of a block is stored: element order, or for Q4_K/Q5_K (k4) chunks
 * [0..31 | 64..95 | 32..63 | 96..127] of each 128. */
static inline int x8_pos(int j, int k4) {
    if (!k4) return j;
    const int c = (j >> 5) & 3, cm = c == 1 ? 2 : c == 2 ? 1 : c;
    return (j & 128) | cm << 5 | (j & 31);
}

int ft_ggml_x8_supported(int type) {
    return type == FT_GGML_Q4_K || type == FT_GGML_Q5_K || type == FT_GGML_Q6_K;
}

size_t ft_ggml_x8_bytes(int64_t n) {
    return n > 0 && n % FT_QK_K == 0 ? (size_t)(n / FT_QK_K) * sizeof(struct x8_block) : 0;
}

#if defined(__x86_64__) || defined(__i386__)
static void quant_x8_512(const float *x, int ldx, int64_t n, int T, struct x8_block *b, int k4);
#endif

void ft_ggml_quant_x8(int type, const float *x, int ldx, int64_t n, int T, void *xq) {
    FT_ASSERT(ft_ggml_x8_supported(type) && n % FT_QK_K == 0 && T >= 0);
    const int k4 = type != FT_GGML_Q6_K;
    struct x8_block *b = xq;
#if defined(__x86_64__) || defined(__i386__)
    if (ft_cpu_isa() >= FT_ISA_AVX512) {
        quant_x8_512(x, ldx, n, T, b, k4);
        return;
    }
#endif
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * ldx;
        for (int64_t i = 0; i < n; i += FT_QK_K, b++) {
            float amax = 0.0f;
            for (int j = 0; j < FT_QK_K; j++) {
                const float a = fabsf(xt[i + j]);
                amax = a > amax ? a : amax;
            }
            const float id = amax > 1e-30f ? 127.0f / amax : 0.0f;
            b->d = amax / 127.0f;
            int8_t q[FT_QK_K];
            for (int j = 0; j < FT_QK_K; j++) {
                const int32_t c = ft_ggml_round_even(xt[i + j] * id);
                q[j] = (int8_t)(c > 127 ? 127 : c < -127 ? -127 : c);
                b->q[x8_pos(j, k4)] = q[j];
            }
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++)
                    s += q[16 * g + j];
                b->bsum[g] = (int16_t)s;
            }
        }
    }
}

/* ------------------------------------------------------------------ reference */

/* The 256 codes of a block in element order: Q4_K 0..15, Q5_K 0..31, Q6_K 0..63 (unsigned,
 * before Q6_K's -32), as GGML's dequantize_row_* reads them. */
static void codes_ref(int type, const uint8_t *b, uint8_t *q) {
    for (int i = 0; i < FT_QK_K; i++) {
        const int j = i / 32, l = i % 32;
        if (type == FT_GGML_Q6_K) {
            const int n = i / 128, g = (i % 128) / 32;
            const uint8_t ql = b[64 * n + l + 32 * (g & 1)], qh = b[128 + 32 * n + l];
            q[i] = (uint8_t)((g < 2 ? ql & 15 : ql >> 4) | ((qh >> (2 * g)) & 3) << 4);
        } else {
            const uint8_t *qs = b + (type == FT_GGML_Q4_K ? 16 : 48) + 32 * (j / 2);
            q[i] = (uint8_t)(j & 1 ? qs[l] >> 4 : qs[l] & 15);
            if (type == FT_GGML_Q5_K) q[i] |= (uint8_t)(((b[16 + l] >> j) & 1) << 4);
        }
    }
}

/* One block's contribution: sum_i w_i * dx c_i, from the integer sums of its sub-blocks (32
 * codes with a scale and a min: Q4_K, Q5_K; 16 codes with a signed scale: Q6_K). */
static float block_ref(int type, const uint8_t *b, const struct x8_block *x) {
    uint8_t q[FT_QK_K], sm[16];
    codes_ref(type, b, q);
    const int q6 = type == FT_GGML_Q6_K, len = q6 ? 16 : 32;
    int sc[16], off[16]; /* per sub-block: scale, and the multiplier of its code sum */
    if (!q6) ft_ggml_k4_scales(b + 4, sm);
    for (int j = 0; j < FT_QK_K / len; j++) {
        sc[j] = q6 ? (int8_t)b[192 + j] : sm[j];
        off[j] = q6 ? sc[j] : sm[8 + j];
    }
    int32_t isum = 0, osum = 0;
    for (int j = 0; j < FT_QK_K / len; j++) {
        int32_t s = 0, cs = 0;
        for (int i = len * j; i < len * (j + 1); i++)
            s += q[i] * x->q[x8_pos(i, !q6)];
        for (int g = len * j / 16; g < len * (j + 1) / 16; g++)
            cs += x->bsum[g];
        isum += sc[j] * s;
        osum += off[j] * cs;
    }
    if (q6) return ft_f16_to_f32(ft_ggml_rd16(b + 208)) * x->d * (float)(isum - 32 * osum);
    const float d = ft_f16_to_f32(ft_ggml_rd16(b)), dmin = ft_f16_to_f32(ft_ggml_rd16(b + 2));
    return d * x->d * (float)isum - dmin * x->d * (float)osum;
}

/* Rows at w, one token per x8 row of nb blocks: y[t * ldy + r]. */
static void rows_ref(int type, const uint8_t *w, size_t rb, int n_rows, int64_t nb,
                     const struct x8_block *xq, int T, float *y, int ldy) {
    const size_t bytes = ft_ggml_type_size(type);
    for (int r = 0; r < n_rows; r++)
        for (int t = 0; t < T; t++) {
            float s = 0.0f;
            for (int64_t i = 0; i < nb; i++)
                s += block_ref(type, w + r * rb + i * bytes, xq + t * nb + i);
            y[(size_t)t * ldy + r] = s;
        }
}

/* ------------------------------------------------------------------ AVX-512 */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL512 static inline __attribute__((always_inline)) T512

/* A block's codes and int16 scale vectors, decoded once and used for every token: code vector
 * k holds 64 codes; scale vector k the scale of each pair of codes (maddubs' int16 lanes).
 * Q4_K/Q5_K code vectors cover elements [0..31|64..95], [32..63|96..127], then +128 (the
 * nibble layout); x8 vectors are gathered to match. Q6_K's are in element order. */
struct kblock512 {
    __m512i c[4], s[4];
    __m256i m;   /* Q4_K/Q5_K: min of each bsum's sub-block (int16, one per 16 codes);
                  * Q6_K: the 16 scales, for the -32 term */
    float d, dm; /* d, and dmin (Q4_K/Q5_K) */
};

/* Scale vectors for maddubs lanes: lane l of vector k takes scale index pat[k][l]. */
INL512 void scales512(__m512i v, const uint16_t pat[4][32], __m512i *s) {
    for (int k = 0; k < 4; k++)
        s[k] = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)pat[k]), v);
}

static const uint16_t k_pat_k4[4][32] = {/* Q4_K/Q5_K: sub-blocks [0|2], [1|3], [4|6], [5|7] */
                                         {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2},
                                         {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                          3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
                                         {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                                          6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6},
                                         {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
                                          7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}};
static const uint16_t k_pat_q6[4][32] = {/* Q6_K: 16 codes (8 lanes) per scale, in order */
                                         {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
                                         {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5,
                                          6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
                                         {8,  8,  8,  8,  8,  8,  8,  8,  9,  9,  9,
                                          9,  9,  9,  9,  9,  10, 10, 10, 10, 10, 10,
                                          10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
                                         {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13,
                                          13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14,
                                          14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

/* ft_ggml_k4_scales in a register (the same 16 bytes: scales 0..7, mins 0..7) from the 12 bytes
 * at q (16 are read: a Q4_K / Q5_K block's scales are followed by its codes). Building them in
 * memory and loading them back stalled on the store-to-load forward. */
INL512 __m128i k4_scales128(const uint8_t *q) {
    const __m128i m6 = _mm_set1_epi8(0x3f), m4 = _mm_set1_epi8(0x0f), m2 = _mm_set1_epi8(0x03);
    const __m128i u = _mm_loadu_si128((const __m128i *)q);   /* dwords u0, u1, u2 */
    const __m128i lo = _mm_and_si128(u, m6);                 /* scales 0..3, mins 0..3 */
    const __m128i top = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(u, 6), m2), 4);
    const __m128i u2 = _mm_shuffle_epi32(u, 0xaa);
    const __m128i nib = _mm_and_si128(_mm_srlv_epi32(u2, _mm_setr_epi32(0, 4, 0, 0)), m4);
    const __m128i hi = _mm_or_si128(nib, top);               /* scales 4..7, mins 4..7 */
    return _mm_unpacklo_epi32(lo, hi); /* u0 & m6, hi0, u1 & m6, hi1 */
}

/* Q4_K / Q5_K: scales, mins and d, dmin (the codes are the caller's). */
INL512 void k4_common512(const uint8_t *b, struct kblock512 *k) {
    static const int8_t dup[16] = {8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15};
    const __m128i v = k4_scales128(b + 4);
    scales512(_mm512_cvtepu8_epi16(_mm256_zextsi128_si256(v)), k_pat_k4, k->s);
    k->m = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, _mm_loadu_si128((const __m128i *)dup)));
    k->d = ft_ggml_f16c(b);
    k->dm = ft_ggml_f16c(b + 2);
}

INL512 void q4_k_block512(const uint8_t *b, struct kblock512 *k) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    k4_common512(b, k);
    for (int h = 0; h < 2; h++) {
        const __m512i q = _mm512_loadu_si512((const void *)(b + 16 + 64 * h));
        k->c[2 * h] = _mm512_and_si512(q, m4);
        k->c[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    }
}

INL512 void q5_k_block512(const uint8_t *b, struct kblock512 *k) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    /* rotate qh bit s of each byte to bit 4 (per 64-bit lane; bits of the sub-block pair) */
    static const int64_t rot[4][2] = {{4, 2}, {3, 1}, {0, 62}, {63, 61}};
    k4_common512(b, k);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 16)));
    for (int h = 0; h < 2; h++) {
        const __m512i q = _mm512_loadu_si512((const void *)(b + 48 + 64 * h));
        const __m512i lh[2] = {_mm512_and_si512(q, m4),
                               _mm512_and_si512(_mm512_srli_epi16(q, 4), m4)};
        for (int e = 0; e < 2; e++) {
            const int64_t *r = rot[2 * h + e];
            const __m512i cnt = _mm512_set_epi64(r[1], r[1], r[1], r[1], r[0], r[0], r[0], r[0]);
            /* lh | (rotated & 0x10): 0xf8 = a | (b & c) */
            k->c[2 * h + e] =
                _mm512_ternarylogic_epi32(lh[e], _mm512_rolv_epi64(qh, cnt), b4, 0xf8);
        }
    }
}

INL512 void q6_k_block512(const uint8_t *b, struct kblock512 *k) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i sl = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4); /* qh pairs 1:0, 3:2 -> 5:4 */
    const __m512i sr = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0); /* pairs 5:4, 7:6 -> 5:4 */
    for (int n = 0; n < 2; n++) {
        const __m512i ql = _mm512_loadu_si512((const void *)(b + 64 * n));
        const __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * n)));
        k->c[2 * n] = _mm512_ternarylogic_epi32(
            ql, _mm512_and_si512(_mm512_sllv_epi64(qh, sl), m30), m4, 0xe4);
        k->c[2 * n + 1] = _mm512_ternarylogic_epi32(
            _mm512_srli_epi16(ql, 4), _mm512_and_si512(_mm512_srlv_epi64(qh, sr), m30), m4, 0xe4);
    }
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
    scales512(_mm512_zextsi256_si512(sc), k_pat_q6, k->s);
    k->m = sc;
    k->d = ft_ggml_f16c(b + 208);
    k->dm = 0.0f;
}

/* ft_ggml_quant_x8 with the same f32 operations (so the same codes): |x| max, x * (127 /
 * max) rounded to nearest even by the conversion, per-16 sums by reduction. */
T512 static void quant_x8_512(const float *x, int ldx, int64_t n, int T, struct x8_block *b,
                              int k4) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * ldx;
        for (int64_t i = 0; i < n; i += FT_QK_K, b++) {
            __m512 m = _mm512_setzero_ps();
            for (int j = 0; j < FT_QK_K; j += 16)
                m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xt + i + j)));
            const float amax = _mm512_reduce_max_ps(m);
            const __m512 id = _mm512_set1_ps(amax > 1e-30f ? 127.0f / amax : 0.0f);
            b->d = amax / 127.0f;
            for (int g = 0; g < 16; g++) {
                __m512i c = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xt + i + 16 * g), id));
                c = _mm512_max_epi32(_mm512_min_epi32(c, _mm512_set1_epi32(127)),
                                     _mm512_set1_epi32(-127));
                _mm_storeu_si128((__m128i *)(b->q + x8_pos(16 * g, k4)), _mm512_cvtepi32_epi8(c));
                b->bsum[g] = (int16_t)_mm512_reduce_add_epi32(c);
            }
        }
    }
}

/* Per-token accumulators: a (lanes) += d dx * the block's integer sums; m += dmin dx * the min
 * sums (Q4_K/Q5_K; Q6_K folds its -32 term into the integer sum). */
struct acc512 {
    __m512 a;
    __m256 m;
};

INL512 struct acc512 acc_zero512(void) {
    return (struct acc512){_mm512_setzero_ps(), _mm256_setzero_ps()};
}

INL512 float acc_sum512(const struct acc512 *c) {
    return _mm512_reduce_add_ps(c->a) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(c->m));
}

INL512 void block_dot512(const struct kblock512 *k, const struct x8_block *x, int q6,
                         struct acc512 *c) {
    const __m512i x0 = _mm512_loadu_si512((const void *)x->q),
                  x1 = _mm512_loadu_si512((const void *)(x->q + 64));
    const __m512i x2 = _mm512_loadu_si512((const void *)(x->q + 128)),
                  x3 = _mm512_loadu_si512((const void *)(x->q + 192));
    /* Q4_K/Q5_K codes are stored [0..31|64..95], [32..63|96..127] of each 128 (x8_pos): the
     * order of the weight vectors, no shuffle needed */
    const __m512i xv[4] = {x0, x1, x2, x3};
    __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(k->c[j], xv[j]), k->s[j]));
    const __m256i ms = _mm256_madd_epi16(k->m, _mm256_loadu_si256((const __m256i *)x->bsum));
    if (q6)
        s = _mm512_sub_epi32(s, _mm512_zextsi256_si512(_mm256_slli_epi32(ms, 5)));
    else
        c->m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(k->dm * x->d), c->m);
    c->a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(k->d * x->d), c->a);
}

/* ------------------------------------------------------------------ AVX2 */

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INL256 static inline __attribute__((always_inline)) T256

/* As kblock512 with 32 codes per vector, in element order (sub-block by sub-block), each
 * scale vector the int16 scale of each maddubs lane. */
struct kblock256 {
    __m256i c[8], s[8];
    __m256i m;
    float d, dm;
};

INL256 void k4_common256(const uint8_t *b, struct kblock256 *k) {
    uint8_t sm[16];
    ft_ggml_k4_scales(b + 4, sm);
    for (int j = 0; j < 8; j++)
        k->s[j] = _mm256_set1_epi16(sm[j]);
    const __m128i v = _mm_loadu_si128((const __m128i *)sm);
    const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    k->m = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, dup));
    k->d = ft_ggml_f16c(b);
    k->dm = ft_ggml_f16c(b + 2);
}

/* Sub-blocks 2j (low nibbles) and 2j+1 (high) of the 32 bytes at q, plus their fifth bits. */
INL256 void k4_codes256(const uint8_t *q, __m256i h, int j, struct kblock256 *k) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    const __m256i v = _mm256_loadu_si256((const __m256i *)q);
    k->c[2 * j] =
        _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), b4));
    k->c[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                      _mm256_and_si256(_mm256_slli_epi16(h, 3), b4));
}

INL256 void q4_k_block256(const uint8_t *b, struct kblock256 *k) {
    k4_common256(b, k);
    for (int j = 0; j < 4; j++)
        k4_codes256(b + 16 + 32 * j, _mm256_setzero_si256(), j, k);
}

INL256 void q5_k_block256(const uint8_t *b, struct kblock256 *k) {
    k4_common256(b, k);
    __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16)); /* qh >> 2j */
    for (int j = 0; j < 4; j++, h = _mm256_srli_epi16(h, 2))
        k4_codes256(b + 48 + 32 * j, h, j, k);
}

INL256 void q6_k_block256(const uint8_t *b, struct kblock256 *k) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    for (int n = 0; n < 2; n++) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * n));
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * n));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * n + 32));
        /* elements 0..31: ql[0..31] low | qh 1:0; 32..63: ql[32..63] low | 3:2; then highs */
        k->c[4 * n] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                      _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        k->c[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                          _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        k->c[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                          _mm256_and_si256(qh, m30));
        k->c[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
    }
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int j = 0; j < 8; j++)
        k->s[j] = _mm256_setr_m128i(_mm_set1_epi16(sc[2 * j]), _mm_set1_epi16(sc[2 * j + 1]));
    k->m = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
    k->d = ft_ggml_f16c(b + 208);
    k->dm = 0.0f;
}

struct acc256 {
    __m256 a, m;
};

INL256 struct acc256 acc_zero256(void) {
    return (struct acc256){_mm256_setzero_ps(), _mm256_setzero_ps()};
}

INL256 float acc_sum256(const struct acc256 *c) {
    const __m256 v = _mm256_sub_ps(c->a, c->m);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

INL256 void block_dot256(const struct kblock256 *k, const struct x8_block *x, int q6,
                         struct acc256 *c) {
    __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) { /* sub-block j's 32 codes, wherever x8_pos put them */
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(x->q + x8_pos(32 * j, !q6)));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(k->c[j], xv), k->s[j]));
    }
    const __m256i ms = _mm256_madd_epi16(k->m, _mm256_loadu_si256((const __m256i *)x->bsum));
    if (q6)
        s = _mm256_sub_epi32(s, _mm256_slli_epi32(ms, 5));
    else
        c->m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(k->dm * x->d), c->m);
    c->a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(k->d * x->d), c->a);
}

/* ------------------------------------------------------------------ rows */

#define TOK 16 /* tokens whose accumulators live on the stack per pass over a row */
#ifndef PF_AHEAD
#define PF_AHEAD 4096 /* bytes prefetched ahead in the row stream (measured: 2048 reads slower) */
#endif

/* Tokens [t0, t0 + tn) of one row of nb blocks into y[t * ldy], for tier SUF (512, 256);
 * inlined with tn = 1 for decode, so the accumulators stay in registers. Then all rows. */
#define ROWS(SUF, name, blk, bytes, q6)                                                            \
    INL##SUF void name(const uint8_t *row, int64_t nb, const struct x8_block *xq, int t0, int tn,  \
                       float *y, int ldy) {                                                        \
        struct acc##SUF acc[TOK];                                                                  \
        for (int t = 0; t < tn; t++)                                                               \
            acc[t] = acc_zero##SUF();                                                              \
        for (int64_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *p = row + i * bytes;                                                    \
            for (int o = 0; o < bytes; o += 64)                                                    \
                __builtin_prefetch(p + PF_AHEAD + o, 0, 2);                                        \
            struct kblock##SUF k;                                                                  \
            blk(p, &k);                                                                            \
            for (int t = 0; t < tn; t++)                                                           \
                block_dot##SUF(&k, xq + (t0 + t) * nb + i, q6, &acc[t]);                           \
        }                                                                                          \
        for (int t = 0; t < tn; t++)                                                               \
            y[(size_t)(t0 + t) * ldy] = acc_sum##SUF(&acc[t]);                                     \
    }                                                                                              \
    T##SUF static void name##s(const uint8_t *w, size_t rb, int n_rows, int64_t nb,                \
                               const struct x8_block *xq, int T, float *y, int ldy) {              \
        for (int r = 0; r < n_rows; r++)                                                           \
            for (int t0 = 0; t0 < T; t0 += TOK) {                                                  \
                if (T == 1)                                                                        \
                    name(w + r * rb, nb, xq, 0, 1, y + r, ldy);                                    \
                else                                                                               \
                    name(w + r * rb, nb, xq, t0, T - t0 < TOK ? T - t0 : TOK, y + r, ldy);         \
            }                                                                                      \
    }

ROWS(512, q4_k_row512, q4_k_block512, 144, 0)
ROWS(512, q5_k_row512, q5_k_block512, 176, 0)
ROWS(512, q6_k_row512, q6_k_block512, 210, 1)
ROWS(256, q4_k_row256, q4_k_block256, 144, 0)
ROWS(256, q5_k_row256, q5_k_block256, 176, 0)
ROWS(256, q6_k_row256, q6_k_block256, 210, 1)

typedef void (*rows_fn)(const uint8_t *, size_t, int, int64_t, const struct x8_block *, int,
                        float *, int);
#endif

/* ------------------------------------------------------------------ dispatch */

void ft_ggml_dot_rows_x8(int type, const void *w, size_t row_bytes, int n_rows, const void *xq,
                         int T, float *y, int ldy) {
    FT_ASSERT(ft_ggml_x8_supported(type));
    const size_t bytes = ft_ggml_type_size(type);
    FT_ASSERT(row_bytes % bytes == 0 && n_rows >= 0 && T >= 0);
    const int64_t nb = (int64_t)(row_bytes / bytes);
#if defined(__x86_64__) || defined(__i386__)
    const int k = type == FT_GGML_Q4_K ? 0 : type == FT_GGML_Q5_K ? 1 : 2;
    static const rows_fn k512[3] = {q4_k_row512s, q5_k_row512s, q6_k_row512s};
    static const rows_fn k256[3] = {q4_k_row256s, q5_k_row256s, q6_k_row256s};
    const enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX2) {
        (isa >= FT_ISA_AVX512 ? k512 : k256)[k](w, row_bytes, n_rows, nb, xq, T, y, ldy);
        return;
    }
#endif
    rows_ref(type, w, row_bytes, n_rows, nb, xq, T, y, ldy);
}
