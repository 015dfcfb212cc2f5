/* ggml_simd.c — the AVX2 and AVX-512 tiers of the GGML block kernels (ggml_kernels.h): one
 * decoder per block type, producing exact f32 values (bit-identical to the scalar reference
 * in ggml_quant.c) that go either to memory (dequantise; a chunk decoded once for T > 1
 * tokens, then ggml_acc.inc's multiply-accumulate) or straight into a fused multiply-add with
 * one token's x (decode, T = 1: no round trip through memory, 1.7x faster in cache).
 * Runtime-dispatched target() functions like backend/cpu/matmul.c (the build is plain -O2);
 * ggml_dot.c picks the tier from ft_cpu_isa(). Pure functions: any thread.
 *
 * Exactness: each element is computed with GGML's f32 operations in GGML's order (a scale
 * times the integer code, minus a min for Q4_K/Q5_K), each its own intrinsic so nothing is
 * contracted into an FMA. Where a block has few distinct values per scale (Q4_0, MXFP4,
 * Q4_K, Q5_K: 16 or 32 codes per sub-block) AVX-512 computes them once into a register table
 * and looks each element up with a permute, instead of converting and scaling every element. */
#include "backend/cpu/ggml_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define INL static inline __attribute__((always_inline))

/* Per tier SUF (512 or 256): the vector type __m<SUF> and its intrinsics _mm<SUF>_*. */
#define CAT(a, b) CAT_(a, b)
#define CAT_(a, b) a##b
#define VEC(SUF, op) CAT(CAT(_mm, SUF), op)

/* Where a block decoder's vectors go, in increasing element order: stored at out (dequantise,
 * or decode once for several tokens), or, with out NULL, multiplied with x and added to acc
 * (one token). The fused multiply-adds are those of ggml_acc.inc in the same order, so a
 * token's result is bit-identical either way. */
#define SINK(SUF)                                                                                  \
    struct sink##SUF {                                                                             \
        float *out;                                                                                \
        const float *x;                                                                            \
        __m##SUF acc;                                                                              \
    };
#define PUT(SUF, s, off, v)                                                                        \
    do {                                                                                           \
        if ((s)->out)                                                                              \
            VEC(SUF, _storeu_ps)((s)->out + (off), (v));                                           \
        else                                                                                       \
            (s)->acc = VEC(SUF, _fmadd_ps)((v), VEC(SUF, _loadu_ps)((s)->x + (off)), (s)->acc);    \
    } while (0)

/* The two entry points of the block decoder `blk` of tier SUF: dequantise nb blocks, and the
 * one-token dot of R <= 4 rows (rb bytes apart, read as R interleaved streams), prefetching,
 * when R = 4, the rows pf bytes further (the next tile; 0: none). acc: [R, 16] f32; lanes a tier
 * does not write (AVX2: 8..15) keep the caller's zeros. */
#define BLOCK_KERNELS(SUF, blk, bytes, blck)                                                       \
    T##SUF static void blk##_deq(const uint8_t *s, int64_t nb, float *y) {                         \
        struct sink##SUF k = {y, NULL, VEC(SUF, _setzero_ps)()};                                   \
        for (int64_t i = 0; i < nb; i++, s += bytes, k.out += blck)                                \
            blk(s, &k);                                                                            \
    }                                                                                              \
    T##SUF static void blk##_dot(const uint8_t *w, size_t rb, int R, int64_t nb, const float *x,   \
                                 size_t pf, float *acc) {                                          \
        if (R == 4) {                                                                              \
            struct sink##SUF k0 = {NULL, x, VEC(SUF, _setzero_ps)()}, k1 = k0, k2 = k0, k3 = k0;   \
            for (int64_t i = 0; i < nb; i++, w += bytes) {                                         \
                for (int o = 0; pf && o < bytes; o += 64)                                          \
                    for (int r = 0; r < 4; r++)                                                    \
                        __builtin_prefetch(w + r * rb + pf + o, 0, 2);                             \
                blk(w, &k0), blk(w + rb, &k1), blk(w + 2 * rb, &k2), blk(w + 3 * rb, &k3);         \
                k0.x += blck, k1.x += blck, k2.x += blck, k3.x += blck;                            \
            }                                                                                      \
            VEC(SUF, _store_ps)(acc, k0.acc), VEC(SUF, _store_ps)(acc + 16, k1.acc);               \
            VEC(SUF, _store_ps)(acc + 32, k2.acc), VEC(SUF, _store_ps)(acc + 48, k3.acc);          \
            return;                                                                                \
        }                                                                                          \
        for (int r = 0; r < R; r++) {                                                              \
            struct sink##SUF k = {NULL, x, VEC(SUF, _setzero_ps)()};                               \
            const uint8_t *p = w + r * rb;                                                         \
            for (int64_t i = 0; i < nb; i++, p += bytes, k.x += blck)                              \
                blk(p, &k);                                                                        \
            VEC(SUF, _store_ps)(acc + 16 * r, k.acc);                                              \
        }                                                                                          \
    }

/* Everything of tier SUF after its decoders <type>_<SUF>: the kernels of the seven types, the
 * multiply-accumulate (ggml_acc.inc) and the table ggml_dot.c dispatches through. */
#define TIER_ENTRY(t, blk) .deq[t] = blk##_deq, .dot[t] = blk##_dot
#define TIER(SUF, name)                                                                            \
    BLOCK_KERNELS(SUF, q8_0_##SUF, 34, 32)                                                         \
    BLOCK_KERNELS(SUF, q4_0_##SUF, 18, 32)                                                         \
    BLOCK_KERNELS(SUF, q5_0_##SUF, 22, 32)                                                         \
    BLOCK_KERNELS(SUF, mxfp4_##SUF, 17, 32)                                                        \
    BLOCK_KERNELS(SUF, q4_k_##SUF, 144, 256)                                                       \
    BLOCK_KERNELS(SUF, q5_k_##SUF, 176, 256)                                                       \
    BLOCK_KERNELS(SUF, q6_k_##SUF, 210, 256)                                                       \
    const struct ft_ggml_tier name = {                                                             \
        TIER_ENTRY(FT_GGML_Q8_0, q8_0_##SUF),                                                      \
        TIER_ENTRY(FT_GGML_Q4_0, q4_0_##SUF),                                                      \
        TIER_ENTRY(FT_GGML_Q5_0, q5_0_##SUF),                                                      \
        TIER_ENTRY(FT_GGML_MXFP4, mxfp4_##SUF),                                                    \
        TIER_ENTRY(FT_GGML_Q4_K, q4_k_##SUF),                                                      \
        TIER_ENTRY(FT_GGML_Q5_K, q5_k_##SUF),                                                      \
        TIER_ENTRY(FT_GGML_Q6_K, q6_k_##SUF),                                                      \
        .acc = acc##SUF,                                                                           \
    };

/* Q4_0 and MXFP4 blocks through a tier's lut4_<SUF>: the block scale (f16 or E8M0) times a
 * 16-entry code table. */
#define LUT4_TYPES(SUF)                                                                            \
    INL##SUF void q4_0_##SUF(const uint8_t *b, struct sink##SUF *s) {                              \
        lut4_##SUF(b + 2, ft_ggml_f16c(b), ft_ggml_lut_q4_0, s);                                   \
    }                                                                                              \
    INL##SUF void mxfp4_##SUF(const uint8_t *b, struct sink##SUF *s) {                             \
        lut4_##SUF(b + 1, ft_ggml_e8m0_half(b[0]), ft_ggml_lut_mxfp4, s);                          \
    }

/* dm[j] = d * scale_j, dm[8 + j] = dmin * min_j of a Q4_K / Q5_K block. */
INL __attribute__((target("avx2,f16c"))) void k4_scales(const uint8_t *b, float *dm) {
    uint8_t sm[16];
    ft_ggml_k4_scales(b + 4, sm);
    for (int h = 0; h < 2; h++) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + 8 * h)));
        const __m256 d = _mm256_set1_ps(ft_ggml_f16c(b + 2 * h));
        _mm256_storeu_ps(dm + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
    }
}

/* ================================================================ AVX-512 ===== */

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL512 INL T512

SINK(512)
#define PUT512(s, off, v) PUT(512, s, off, v)

INL512 __m512 iota512(int from) {
    return _mm512_add_ps(_mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_ps((float)from));
}

/* Table of the 16 values fl(fl(d * code) - m) for code = from..from+15 (Q4_K / Q5_K). */
INL512 __m512 affine_table512(int from, float d, float m) {
    __m512 a = _mm512_mul_ps(iota512(from), _mm512_set1_ps(d));
    return _mm512_sub_ps(a, _mm512_set1_ps(m));
}

/* The 16 bytes at q widened to 32-bit lanes (permute indices: bits 3:0 are the low nibble). */
INL512 __m512i bytes512(const uint8_t *q) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
}

/* Codes (int8, 16 at q) times the scale s. */
INL512 __m512 scale_i8_512(const int8_t *q, float s) {
    const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(s));
}

INL512 void q8_0_512(const uint8_t *b, struct sink512 *s) {
    const float d = ft_ggml_f16c(b);
    PUT512(s, 0, scale_i8_512((const int8_t *)(b + 2), d));
    PUT512(s, 16, scale_i8_512((const int8_t *)(b + 18), d));
}

/* Q4_0 and MXFP4: a 16-entry code table times the block scale, looked up per nibble. */
INL512 void lut4_512(const uint8_t *q, float d, const int8_t *lut, struct sink512 *s) {
    const __m512 codes =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)lut)));
    const __m512 t = _mm512_mul_ps(codes, _mm512_set1_ps(d));
    const __m512i i = bytes512(q);
    PUT512(s, 0, _mm512_permutexvar_ps(i, t));
    PUT512(s, 16, _mm512_permutexvar_ps(_mm512_srli_epi32(i, 4), t));
}

LUT4_TYPES(512)

INL512 void q4_k_512(const uint8_t *b, struct sink512 *s) {
    _Alignas(64) float dm[16];
    k4_scales(b, dm);
    const uint8_t *q = b + 16;
    for (int j = 0; j < 4; j++, q += 32) { /* sub-blocks 2j (low nibbles), 2j+1 (high) */
        const __m512 t1 = affine_table512(0, dm[2 * j], dm[8 + 2 * j]);
        const __m512 t2 = affine_table512(0, dm[2 * j + 1], dm[9 + 2 * j]);
        const __m512i i0 = bytes512(q), i1 = bytes512(q + 16);
        PUT512(s, 64 * j, _mm512_permutexvar_ps(i0, t1));
        PUT512(s, 64 * j + 16, _mm512_permutexvar_ps(i1, t1));
        PUT512(s, 64 * j + 32, _mm512_permutexvar_ps(_mm512_srli_epi32(i0, 4), t2));
        PUT512(s, 64 * j + 48, _mm512_permutexvar_ps(_mm512_srli_epi32(i1, 4), t2));
    }
}

/* Table lookup of 5-bit codes: bits 3:0 from lo4's low nibble, bit 4 from hi's bit 4 (0xe4:
 * the first operand's bits where the mask is set, the second's elsewhere). */
INL512 __m512 lookup32_512(__m512i lo4, __m512i hi, __m512 ta, __m512 tb) {
    const __m512i i = _mm512_ternarylogic_epi32(lo4, hi, _mm512_set1_epi32(0x0f), 0xe4);
    return _mm512_permutex2var_ps(ta, i, tb);
}

/* Q5_0: 5-bit codes (nibble, bit j of qh as bit 4), the 32-entry table (code - 16) * d */
INL512 void q5_0_512(const uint8_t *b, struct sink512 *s) {
    const float d = ft_ggml_f16c(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const __m512 ta = _mm512_mul_ps(iota512(-16), _mm512_set1_ps(d));
    const __m512 tb = _mm512_mul_ps(iota512(0), _mm512_set1_ps(d));
    const __m512i i = bytes512(b + 6), q = _mm512_set1_epi32((int)qh);
    const __m512i sh = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i h0 = _mm512_slli_epi32(_mm512_srlv_epi32(q, sh), 4);
    const __m512i h1 = _mm512_slli_epi32(_mm512_srlv_epi32(q, _mm512_add_epi32(sh, _mm512_set1_epi32(16))), 4);
    PUT512(s, 0, lookup32_512(i, h0, ta, tb));
    PUT512(s, 16, lookup32_512(_mm512_srli_epi32(i, 4), h1, ta, tb));
}

INL512 void q5_k_512(const uint8_t *b, struct sink512 *s) {
    _Alignas(64) float dm[16];
    k4_scales(b, dm);
    const uint8_t *ql = b + 48;
    /* qh[16k .. 16k+15] >> 2j: bit 0 is sub-block 2j's fifth bit, bit 1 is 2j+1's */
    __m512i h[2] = {bytes512(b + 16), bytes512(b + 32)};
    for (int j = 0; j < 4; j++, ql += 32) {
        const __m512 t[2][2] = {{affine_table512(0, dm[2 * j], dm[8 + 2 * j]),
                                 affine_table512(16, dm[2 * j], dm[8 + 2 * j])},
                                {affine_table512(0, dm[2 * j + 1], dm[9 + 2 * j]),
                                 affine_table512(16, dm[2 * j + 1], dm[9 + 2 * j])}};
        const __m512i l[2] = {bytes512(ql), bytes512(ql + 16)};
        for (int e = 0; e < 2;
             e++) /* sub-block 2j + e: low nibbles and qh bit 0, then high, bit 1 */
            for (int k = 0; k < 2; k++)
                PUT512(s, 64 * j + 32 * e + 16 * k,
                       lookup32_512(e ? _mm512_srli_epi32(l[k], 4) : l[k],
                                    _mm512_slli_epi32(h[k], 4 - e), t[e][0], t[e][1]));
        h[0] = _mm512_srli_epi32(h[0], 2), h[1] = _mm512_srli_epi32(h[1], 2);
    }
}

/* The 16 scales d * sc[j] of a Q6_K block. */
INL512 void q6_scales512(const uint8_t *b, float *s) {
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192)));
    _mm512_store_ps(s,
                    _mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_set1_ps(ft_ggml_f16c(b + 208))));
}

/* The 256 6-bit codes of a Q6_K block as bytes in element order (not yet minus 32): per
 * 128-element half, low nibbles of ql[0..63] are elements 0..63 and high nibbles 64..127;
 * qh[l] holds the top two bits of elements l, l+32, l+64, l+96 in bit pairs 1:0 .. 7:6. */
INL512 void q6_codes512(const uint8_t *b, uint8_t *q) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i sl = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4); /* pairs 1:0, 3:2 -> 5:4 */
    const __m512i sr = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0); /* pairs 5:4, 7:6 -> 5:4 */
    for (int n = 0; n < 2; n++) {
        const __m512i ql = _mm512_loadu_si512((const void *)(b + 64 * n));
        const __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * n)));
        const __m512i h01 = _mm512_and_si512(_mm512_sllv_epi64(qh, sl), m30);
        const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi64(qh, sr), m30);
        _mm512_storeu_si512((void *)(q + 128 * n), _mm512_ternarylogic_epi32(ql, h01, m4, 0xe4));
        _mm512_storeu_si512((void *)(q + 128 * n + 64),
                            _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), h23, m4, 0xe4));
    }
}

INL512 void q6_k_512(const uint8_t *b, struct sink512 *s) {
    _Alignas(64) float sc[16];
    _Alignas(64) uint8_t q[256];
    q6_scales512(b, sc);
    q6_codes512(b, q);
    for (int j = 0; j < 256; j += 64) /* codes minus 32 as int8 */
        _mm512_store_si512(
            (void *)(q + j),
            _mm512_sub_epi8(_mm512_load_si512((const void *)(q + j)), _mm512_set1_epi8(32)));
    for (int j = 0; j < 16; j++)
        PUT512(s, 16 * j, scale_i8_512((const int8_t *)q + 16 * j, sc[j]));
}

#define ACC_SUF 512
#include "backend/cpu/ggml_acc.inc"
TIER(512, ft_ggml_tier_avx512)

/* ================================================================ AVX2 ======== */

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INL256 INL T256

SINK(256)
#define PUT256(s, off, v) PUT(256, s, off, v)

/* n (a multiple of 8) int8 codes at q, each times s[j / per] (per: 16 or 32), to the sink. */
INL256 void scale_i8_256(const int8_t *q, const float *s, int per, int n, struct sink256 *k) {
    for (int j = 0; j < n; j += 8) {
        const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + j)));
        PUT256(k, j, _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(s[j / per])));
    }
}

/* fl(fl(d * (float)q[j]) - m) for 32 unsigned codes (Q4_K / Q5_K sub-blocks) to the sink. */
INL256 void affine_u8_256(const uint8_t *q, float d, float m, int off, struct sink256 *k) {
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    for (int j = 0; j < 32; j += 8) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + j)));
        const __m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(v), vd);
        PUT256(k, off + j, _mm256_sub_ps(a, vm));
    }
}

/* The two nibbles of the 32 bytes at p: lo = p & 15, hi = p >> 4 (as bytes). */
INL256 void split256(const uint8_t *p, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), v = _mm256_loadu_si256((const __m256i *)p);
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
}

INL256 void q8_0_256(const uint8_t *b, struct sink256 *s) {
    const float d = ft_ggml_f16c(b);
    scale_i8_256((const int8_t *)(b + 2), &d, 32, 32, s);
}

/* Q4_0 and MXFP4: the int8 code of each nibble by a byte shuffle, times the block scale. */
INL256 void lut4_256(const uint8_t *qs, float d, const int8_t *lut, struct sink256 *s) {
    const __m128i t = _mm_loadu_si128((const __m128i *)lut), m4 = _mm_set1_epi8(0x0f);
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    _Alignas(32) int8_t q[32];
    _mm_store_si128((__m128i *)q, _mm_shuffle_epi8(t, _mm_and_si128(v, m4)));
    _mm_store_si128((__m128i *)(q + 16),
                    _mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(v, 4), m4)));
    scale_i8_256(q, &d, 32, 32, s);
}

LUT4_TYPES(256)

/* Sub-blocks 2j and 2j+1 of a Q4_K / Q5_K block from their codes (lo, hi: 32 bytes each). */
INL256 void k4_pair256(__m256i lo, __m256i hi, const float *dm, int j, struct sink256 *s) {
    _Alignas(32) uint8_t q[64];
    _mm256_store_si256((__m256i *)q, lo);
    _mm256_store_si256((__m256i *)(q + 32), hi);
    affine_u8_256(q, dm[2 * j], dm[8 + 2 * j], 64 * j, s);
    affine_u8_256(q + 32, dm[2 * j + 1], dm[9 + 2 * j], 64 * j + 32, s);
}

INL256 void q4_k_256(const uint8_t *b, struct sink256 *s) {
    float dm[16];
    k4_scales(b, dm);
    for (int j = 0; j < 4; j++) {
        __m256i lo, hi;
        split256(b + 16 + 32 * j, &lo, &hi);
        k4_pair256(lo, hi, dm, j, s);
    }
}

INL256 void q5_k_256(const uint8_t *b, struct sink256 *s) {
    const __m256i b16 = _mm256_set1_epi8(0x10);
    float dm[16];
    k4_scales(b, dm);
    __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16)); /* qh >> 2j */
    for (int j = 0; j < 4; j++) {
        __m256i lo, hi;
        split256(b + 48 + 32 * j, &lo, &hi);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(h, 4), b16));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(h, 3), b16));
        k4_pair256(lo, hi, dm, j, s);
        h = _mm256_srli_epi16(h, 2);
    }
}

/* Q5_0: the codes assembled as int8 (code - 16), times the block scale */
INL256 void q5_0_256(const uint8_t *b, struct sink256 *s) {
    const float d = ft_ggml_f16c(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    _Alignas(32) int8_t q[32];
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((b[6 + j] & 0x0f) | (((qh >> j) << 4) & 0x10)) - 16);
        q[j + 16] = (int8_t)(((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16);
    }
    scale_i8_256(q, &d, 32, 32, s);
}

INL256 void q6_k_256(const uint8_t *b, struct sink256 *s) {
    const __m256i m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    float sc[16];
    _Alignas(32) int8_t q[256]; /* codes minus 32, in element order */
    const float d = ft_ggml_f16c(b + 208);
    for (int j = 0; j < 16; j++)
        sc[j] = d * (float)(int8_t)b[192 + j];
    for (int n = 0; n < 2; n++) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * n));
        /* qh bit pairs 1:0, 3:2, 5:4, 7:6 moved to bits 5:4 */
        const __m256i h[4] = {_mm256_and_si256(_mm256_slli_epi16(qh, 4), m30),
                              _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30),
                              _mm256_and_si256(qh, m30),
                              _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)};
        __m256i lo[2], hi[2];
        split256(b + 64 * n, &lo[0], &hi[0]);
        split256(b + 64 * n + 32, &lo[1], &hi[1]);
        const __m256i g[4] = {lo[0], lo[1], hi[0], hi[1]};
        for (int k = 0; k < 4; k++)
            _mm256_store_si256((__m256i *)(q + 128 * n + 32 * k),
                               _mm256_sub_epi8(_mm256_or_si256(g[k], h[k]), k32));
    }
    scale_i8_256(q, sc, 16, 256, s);
}

#define ACC_SUF 256
#include "backend/cpu/ggml_acc.inc"
TIER(256, ft_ggml_tier_avx2)

#endif /* x86 */
