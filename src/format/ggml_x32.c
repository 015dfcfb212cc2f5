/* ggml_x32.c — dot products of rows in the 32-element block formats (GGML's Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, MXFP4) and of NVFP4 rows (format/quant.h) with activations quantised to 8 bits
 * per 32 elements (an f32 scale, int8 codes, the codes' sum), multiplied in integers inside
 * each block: the fast, approximate twin of ft_ggml_dot_rows and ft_nvfp4_r_dot_tokens
 * (ggml_quant.h states the accuracy). A scalar reference (the spec), an AVX2 and an AVX-512
 * (F+BW) tier picked by ft_cpu_isa(); on AVX-512 the integer dot is VNNI's vpdpbusd where the
 * CPU has it, else maddubs + madd. Pure functions over caller memory: any thread.
 *
 * Every weight block is small integer codes w_i times a scale ws (per 32 elements; per 16 for
 * NVFP4) plus, for Q4_1/Q5_1, a min wm:
 *   Q8_0  w = qs (int8)            ws = d          Q4_1  w = nibble       ws = d, wm = m
 *   Q4_0  w = nibble - 8           ws = d          Q5_1  w = 5-bit code   ws = d, wm = m
 *   Q5_0  w = 5-bit code - 16      ws = d
 *   MXFP4 w = 2 e2m1 (in 0, +-1, +-2, +-3, +-4, +-6, +-8, +-12)    ws = 2^(e - 127) / 2
 *   NVFP4 w = 2 e2m1, per 16:  ws = e4m3(scale) * (scale_2 / 2)
 * and with activation block (dx, codes c_i, s = sum c_i):
 *   y = sum_blocks [ sum_groups (ws dx) * sum_{i in group} w_i c_i  +  (wm dx) * s ]
 * where the integer sums are exact and the f32 products and the sum over blocks round.
 * The vector tiers multiply |w_i| (unsigned bytes) with c_i carrying w_i's sign (signed
 * bytes): |w| <= 128 and |c| <= 127, so maddubs' pair sums (< 2^15) never saturate. They
 * accumulate each int32 lane group's sum times its own (ws dx) in f32 lanes, reduced at the
 * end of the row. */
#include "format/ggml_kernels.h"

#include <math.h>

#include "backend/cpu/ops.h"
#include "core/status.h"
#include "format/fp_formats.h"

/* Activations, token by token: nb = n / 32 blocks take X32_BLOCK_BYTES each, stored as three
 * arrays so vectors load codes and scales of several blocks at once:
 *   int8_t  q[n];   codes round(x / d) in [-127, 127]
 *   float   d[nb];  block scales max|x| / 127
 *   int32_t s[nb];  sums of each block's 32 codes (Q4_1 / Q5_1's min term) */
#define X32_BLOCK_BYTES 40

struct x32_tok {
    const int8_t *q;
    const float *d;
    const int32_t *s;
};

static inline struct x32_tok x32_tok(const void *xq, int64_t nb, int t) {
    const uint8_t *p = (const uint8_t *)xq + (size_t)t * (size_t)nb * X32_BLOCK_BYTES;
    return (struct x32_tok){(const int8_t *)p, (const float *)(p + 32 * nb),
                            (const int32_t *)(p + 36 * nb)};
}

/* The weight formats, as kernels see them. */
enum x32_fmt { X_Q4_0, X_Q4_1, X_Q5_0, X_Q5_1, X_Q8_0, X_MXFP4, X_NVFP4, X_COUNT };

static int fmt_of(int type) {
    switch (type) {
    case FT_GGML_Q4_0: return X_Q4_0;
    case FT_GGML_Q4_1: return X_Q4_1;
    case FT_GGML_Q5_0: return X_Q5_0;
    case FT_GGML_Q5_1: return X_Q5_1;
    case FT_GGML_Q8_0: return X_Q8_0;
    case FT_GGML_MXFP4: return X_MXFP4;
    default: return -1;
    }
}

int ft_ggml_x32_supported(int type) {
    return fmt_of(type) >= 0;
}

size_t ft_ggml_x32_bytes(int64_t n) {
    return n > 0 && n % 32 == 0 ? (size_t)(n / 32) * X32_BLOCK_BYTES : 0;
}

/* One row of weights: its first byte, and for NVFP4 where its codes start (after the f32
 * scale_2 and the K / 16 e4m3 scales). */
struct wrow {
    const uint8_t *p;
    size_t coff;
};

/* GGML block geometry: bytes, offset of qs, of qh (Q5_0 / Q5_1). */
static inline int fbytes(int f) {
    return f == X_Q4_0   ? 18
           : f == X_Q4_1 ? 20
           : f == X_Q5_0 ? 22
           : f == X_Q5_1 ? 24
           : f == X_Q8_0 ? 34
                         : 17;
}
static inline int fqs(int f) {
    return f == X_Q4_1 ? 4 : f == X_Q5_0 ? 6 : f == X_Q5_1 ? 8 : f == X_MXFP4 ? 1 : 2;
}
static inline int fqh(int f) {
    return f == X_Q5_0 ? 2 : 4;
}
static inline int has_min(int f) {
    return f == X_Q4_1 || f == X_Q5_1;
}
static inline int is_signed(int f) {
    return !has_min(f);
}

static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* round(f) to nearest, ties to even, for |f| < 2^22 (as in ggml_x8.c: the integer lands in the
 * low mantissa bits of f + 1.5 * 2^23; what the vector tiers' conversions do). */
static inline int32_t round_even(float f) {
    const float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* ------------------------------------------------------------------ quantise x */

#if defined(__x86_64__) || defined(__i386__)
static void quant_x32_512(const float *x, int64_t n, int8_t *q, float *d, int32_t *s);
static void quant_x32_256(const float *x, int64_t n, int8_t *q, float *d, int32_t *s);
#endif

/* One token: d = max|x| / 127, c = round(x * (127 / max)) clamped to +-127, s = sum c. */
static void quant_x32_ref(const float *x, int64_t n, int8_t *q, float *d, int32_t *s) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float a = fabsf(xb[j]);
            amax = a > amax ? a : amax;
        }
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        d[b] = amax / 127.0f;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            const int32_t c = round_even(xb[j] * id);
            q[32 * b + j] = (int8_t)(c > 127 ? 127 : c < -127 ? -127 : c);
            sum += q[32 * b + j];
        }
        s[b] = sum;
    }
}

void ft_ggml_quant_x32(const float *x, int ldx, int64_t n, int T, void *xq) {
    FT_ASSERT(n > 0 && n % 32 == 0 && T >= 0);
    const int64_t nb = n / 32;
    for (int t = 0; t < T; t++) {
        const struct x32_tok o = x32_tok(xq, nb, t);
        const float *xt = x + (size_t)t * ldx;
#if defined(__x86_64__) || defined(__i386__)
        const enum ft_cpu_isa isa = ft_cpu_isa();
        if (isa >= FT_ISA_AVX2) {
            (isa >= FT_ISA_AVX512 ? quant_x32_512 : quant_x32_256)(xt, n, (int8_t *)o.q,
                                                                   (float *)o.d, (int32_t *)o.s);
            continue;
        }
#endif
        quant_x32_ref(xt, n, (int8_t *)o.q, (float *)o.d, (int32_t *)o.s);
    }
}

/* ------------------------------------------------------------------ reference */

/* Block i of a row: its 32 codes, its group scales (ws[0] for the 32; NVFP4: ws[0], ws[1] for
 * the two halves) and its min (0 where the format has none). */
static void block_ref(int f, struct wrow r, int64_t i, int w[32], float ws[2], float *wm) {
    *wm = 0.0f;
    if (f == X_NVFP4) {
        float s2;
        memcpy(&s2, r.p, 4);
        for (int h = 0; h < 2; h++)
            ws[h] = ft_e4m3_to_f32(r.p[4 + 2 * i + h]) * (s2 * 0.5f);
        const uint8_t *c = r.p + r.coff + 16 * i; /* element 2j low nibble, 2j + 1 high */
        for (int j = 0; j < 16; j++) {
            w[2 * j] = ft_ggml_lut_mxfp4[c[j] & 15];
            w[2 * j + 1] = ft_ggml_lut_mxfp4[c[j] >> 4];
        }
        return;
    }
    const uint8_t *b = r.p + (size_t)i * fbytes(f), *qs = b + fqs(f);
    ws[0] = f == X_MXFP4 ? ft_ggml_e8m0_half(b[0]) : ft_f16_to_f32(ft_ggml_rd16(b));
    ws[1] = ws[0];
    if (has_min(f)) *wm = ft_f16_to_f32(ft_ggml_rd16(b + 2));
    if (f == X_Q8_0) {
        for (int j = 0; j < 32; j++)
            w[j] = (int8_t)qs[j];
        return;
    }
    const uint32_t qh = f == X_Q5_0 || f == X_Q5_1 ? rd32(b + fqh(f)) : 0;
    for (int j = 0; j < 32; j++) { /* element j < 16: low nibble of qs[j]; else high of j - 16 */
        const int u = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int)((qh >> j) & 1) << 4;
        w[j] = f == X_Q4_0 ? u - 8 : f == X_Q5_0 ? u - 16 : f == X_MXFP4 ? ft_ggml_lut_mxfp4[u] : u;
    }
}

static float row_ref(int f, struct wrow r, int64_t nb, struct x32_tok x) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int w[32];
        float ws[2], wm;
        block_ref(f, r, i, w, ws, &wm);
        const int8_t *c = x.q + 32 * i;
        if (f == X_NVFP4) {
            for (int h = 0; h < 2; h++) {
                int32_t isum = 0;
                for (int j = 16 * h; j < 16 * h + 16; j++)
                    isum += w[j] * c[j];
                acc += ws[h] * x.d[i] * (float)isum;
            }
        } else {
            int32_t isum = 0;
            for (int j = 0; j < 32; j++)
                isum += w[j] * c[j];
            acc += ws[0] * x.d[i] * (float)isum;
            if (has_min(f)) acc += wm * x.d[i] * (float)x.s[i];
        }
    }
    return acc;
}

/* ------------------------------------------------------------------ AVX-512 */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL512 static inline __attribute__((always_inline)) T512

T512 static void quant_x32_512(const float *x, int64_t n, int8_t *q, float *d, int32_t *s) {
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    for (int64_t b = 0; b < n / 32; b++) {
        const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
        const float amax =
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        d[b] = amax / 127.0f;
        __m512i c0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id));
        __m512i c1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
        c0 = _mm512_max_epi32(_mm512_min_epi32(c0, hi), lo);
        c1 = _mm512_max_epi32(_mm512_min_epi32(c1, hi), lo);
        _mm_storeu_si128((__m128i *)(q + 32 * b), _mm512_cvtepi32_epi8(c0));
        _mm_storeu_si128((__m128i *)(q + 32 * b + 16), _mm512_cvtepi32_epi8(c1));
        s[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
    }
}

/* acc + the sums of 4 products u8(a) * s8(b) per int32 lane: VNNI's vpdpbusd, written as asm
 * so the one kernel body serves CPUs with and without VNNI (the instruction only runs when
 * the caller checked the CPU has it; a target("avx512vnni") intrinsic could not be inlined
 * into the non-VNNI body). */
INL512 __m512i dpbusd512(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* The same sums with AVX-512BW: pairs to int16 (never saturating, see the header), then to
 * int32. */
INL512 __m512i dot_bw512(__m512i a, __m512i b) {
    return _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1));
}

/* Chunks of 16 blocks (8 pairs of 64 codes, one zmm each). Lane scale index tables: pair p of
 * a 32-element format takes block 2p in lanes 0..7 and 2p + 1 in 8..15 (vpdpbusd lane l sums
 * codes 4l..4l+3); NVFP4's pair p takes groups 4p..4p+3, four lanes each, from a table of 16
 * groups (p mod 4); k_dup512 spreads 16 block scales over 32 groups. */
static const int32_t k_idx2_512[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};
static const int32_t k_idx4_512[4][16] = {
    {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
    {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
    {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
    {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}};
static const int32_t k_dup512[2][16] = {
    {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7},
    {8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15}};

INL512 __m512i ld512(const int32_t *p) {
    return _mm512_loadu_si512((const void *)p);
}

/* 16 e4m3 bytes as f32 (exactly ft_e4m3_to_f32: sign, subnormals m * 2^-9, 0x7f NaN). */
INL512 __m512 e4m3_512(__m128i bytes) {
    const __m512i v = _mm512_cvtepu8_epi32(bytes);
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi32(0x7f));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
    const __m512i nrm = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(1.0f / 512));
    __m512 r = _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)),
                                    _mm512_castsi512_ps(nrm), sub);
    r = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
    return _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)), r,
                                _mm512_set1_ps(NAN));
}

/* The chunk's weight scales (blocks c .. c + cb - 1): ws[0] = block scale per block (NVFP4:
 * ws[0], ws[1] = scale per group of 16), wm = mins; lanes past the chunk 0. */
INL512 void chunk_scales512(const int f, struct wrow r, int64_t c, int cb, __m512 ws[2],
                            __m512 *wm) {
    if (f == X_NVFP4) {
        float s2;
        memcpy(&s2, r.p, 4);
        const __m512 h = _mm512_set1_ps(s2 * 0.5f);
        const __mmask32 k = cb == 16 ? 0xffffffffu : (1u << (2 * cb)) - 1;
        const __m256i sc = _mm256_maskz_loadu_epi8(k, r.p + 4 + 2 * c);
        ws[0] = _mm512_mul_ps(e4m3_512(_mm256_castsi256_si128(sc)), h);
        ws[1] = _mm512_mul_ps(e4m3_512(_mm256_extracti128_si256(sc, 1)), h);
        return;
    }
    const int bs = fbytes(f);
    const uint8_t *b = r.p + (size_t)c * bs;
    if (f == X_MXFP4) {
        _Alignas(64) float e[16] = {0};
        for (int i = 0; i < cb; i++)
            e[i] = ft_ggml_e8m0_half(b[i * bs]);
        ws[0] = _mm512_load_ps(e);
        return;
    }
    _Alignas(32) uint16_t h[16] = {0}, m[16] = {0};
    for (int i = 0; i < cb; i++) {
        h[i] = ft_ggml_rd16(b + i * bs);
        if (has_min(f)) m[i] = ft_ggml_rd16(b + i * bs + 2);
    }
    ws[0] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)h));
    if (has_min(f)) *wm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)m));
}

/* The 64 codes of blocks i, i + 1 (only i when !two: the upper half 0) in element order:
 * *a = |w| as unsigned bytes, *neg = the lanes where w < 0 (signed formats). */
INL512 void pair_codes512(const int f, struct wrow r, int64_t i, int two, __m512i *a,
                          __mmask64 *neg) {
    const __mmask64 km = two ? ~0ull : 0xffffffffull;
    __m512i w;
    if (f == X_NVFP4) { /* 32 bytes; element 2j low nibble, 2j + 1 high: bytes to words lo|hi<<8 */
        const __m256i v =
            _mm256_maskz_loadu_epi8((__mmask32)(two ? ~0u : 0xffffu), r.p + r.coff + 16 * i);
        const __m512i x = _mm512_cvtepu8_epi16(v);
        const __m512i u = _mm512_and_si512(_mm512_or_si512(x, _mm512_slli_epi16(x, 4)),
                                           _mm512_set1_epi16(0x0f0f));
        w = _mm512_shuffle_epi8(
            _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ft_ggml_lut_mxfp4)), u);
    } else {
        const int bs = fbytes(f);
        const uint8_t *b = r.p + (size_t)i * bs, *qs = b + fqs(f);
        if (f == X_Q8_0) {
            const __m256i lo = _mm256_loadu_si256((const __m256i *)qs);
            const __m256i hi =
                two ? _mm256_loadu_si256((const __m256i *)(qs + bs)) : _mm256_setzero_si256();
            w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        } else { /* 128-bit lanes [qs(i), qs(i), qs(i+1), qs(i+1)]; lanes 1, 3 take high nibbles */
            const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
            const __m256i hi =
                two ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(qs + bs)))
                    : _mm256_setzero_si256();
            const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xff00ff00u, v, 4),
                                         _mm512_set1_epi8(0x0f));
            if (f == X_Q5_0 || f == X_Q5_1) {
                const uint64_t qh =
                    (uint64_t)rd32(b + fqh(f)) | (two ? (uint64_t)rd32(b + bs + fqh(f)) << 32 : 0);
                u = _mm512_mask_add_epi8(u, (__mmask64)qh, u, _mm512_set1_epi8(0x10));
            }
            if (f == X_Q4_0 || f == X_MXFP4) {
                const int8_t *lut = f == X_Q4_0 ? ft_ggml_lut_q4_0 : ft_ggml_lut_mxfp4;
                w = _mm512_shuffle_epi8(
                    _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut)), u);
            } else if (f == X_Q5_0) {
                w = _mm512_sub_epi8(u, _mm512_set1_epi8(16));
            } else {
                w = u; /* Q4_1, Q5_1: unsigned */
            }
        }
    }
    w = _mm512_maskz_mov_epi8(km, w);
    if (is_signed(f)) {
        *neg = _mm512_movepi8_mask(w);
        *a = _mm512_abs_epi8(w);
    } else {
        *neg = 0;
        *a = w;
    }
}

/* The int32 lane sums of pair codes a with the 64 activation codes at q (upper 32 masked off
 * when !two), as f32. */
INL512 __m512 pair_dot512(const int f, const int vnni, __m512i a, __mmask64 neg, const int8_t *q,
                          int two) {
    __m512i x = _mm512_maskz_loadu_epi8(two ? ~0ull : 0xffffffffull, q);
    if (is_signed(f)) x = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    const __m512i s = vnni ? dpbusd512(_mm512_setzero_si512(), a, x) : dot_bw512(a, x);
    return _mm512_cvtepi32_ps(s);
}

/* Per token and chunk: the products ws dx per block (NVFP4: per group, two vectors). */
INL512 void scale_table512(const int f, const __m512 ws[2], __m512 dx, __m512 st[2]) {
    if (f == X_NVFP4) {
        st[0] = _mm512_mul_ps(ws[0], _mm512_permutexvar_ps(ld512(k_dup512[0]), dx));
        st[1] = _mm512_mul_ps(ws[1], _mm512_permutexvar_ps(ld512(k_dup512[1]), dx));
    } else {
        st[0] = _mm512_mul_ps(ws[0], dx);
    }
}

INL512 __m512 lane_scale512(const int f, const __m512 st[2], int p) {
    if (f == X_NVFP4) return _mm512_permutexvar_ps(ld512(k_idx4_512[p & 3]), st[p >> 2]);
    return _mm512_permutexvar_ps(ld512(k_idx2_512[p]), st[0]);
}

#define TOK 16 /* tokens whose accumulators live on the stack per pass over a row */
#ifndef PF_AHEAD
#define PF_AHEAD 4096 /* bytes prefetched ahead in the row stream */
#endif
#define X32_PF(f, r, c, cb, bs)                                                                    \
    do {                                                                                           \
        const uint8_t *pf_ = (f) == X_NVFP4 ? (r).p + (r).coff + 16 * (c) : (r).p + (c) * (bs);    \
        for (int o_ = 0; o_ < 16 * (bs); o_ += 64)                                                 \
            __builtin_prefetch(pf_ + PF_AHEAD + o_, 0, 2);                                         \
    } while (0)

/* Tokens [t0, t0 + tn) of one row of nb blocks into y[t * ldy]; inlined with tn = 1 for decode
 * (each pair decoded and used at once, in registers), else each chunk decoded once for tn. */
INL512 void row512(const int f, const int vnni, struct wrow r, int64_t nb, const void *xq, int t0,
                   int tn, float *y, int ldy) {
    __m512 acc[TOK], accm[TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = accm[t] = _mm512_setzero_ps();
    const int bs = f == X_NVFP4 ? 16 : fbytes(f);
    for (int64_t c = 0; c < nb; c += 16) {
        const int cb = nb - c < 16 ? (int)(nb - c) : 16, np = (cb + 1) / 2;
        const __mmask16 kb = (__mmask16)((1u << cb) - 1);
        X32_PF(f, r, c, cb, bs);
        __m512 ws[2], wm = _mm512_setzero_ps(), st[2];
        chunk_scales512(f, r, c, cb, ws, &wm);
        if (tn == 1) {
            const struct x32_tok x = x32_tok(xq, nb, t0);
            scale_table512(f, ws, _mm512_maskz_loadu_ps(kb, x.d + c), st);
            for (int p = 0; p < np; p++) {
                const int two = 2 * p + 1 < cb;
                __m512i a;
                __mmask64 neg;
                pair_codes512(f, r, c + 2 * p, two, &a, &neg);
                acc[0] = _mm512_fmadd_ps(pair_dot512(f, vnni, a, neg, x.q + 32 * (c + 2 * p), two),
                                         lane_scale512(f, st, p), acc[0]);
            }
            if (has_min(f))
                accm[0] = _mm512_fmadd_ps(_mm512_mul_ps(wm, _mm512_maskz_loadu_ps(kb, x.d + c)),
                                          _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(kb, x.s + c)),
                                          accm[0]);
            continue;
        }
        __m512i a[8];
        __mmask64 neg[8];
        for (int p = 0; p < np; p++)
            pair_codes512(f, r, c + 2 * p, 2 * p + 1 < cb, &a[p], &neg[p]);
        for (int t = 0; t < tn; t++) {
            const struct x32_tok x = x32_tok(xq, nb, t0 + t);
            const __m512 dx = _mm512_maskz_loadu_ps(kb, x.d + c);
            scale_table512(f, ws, dx, st);
            for (int p = 0; p < np; p++) {
                const int two = 2 * p + 1 < cb;
                acc[t] =
                    _mm512_fmadd_ps(pair_dot512(f, vnni, a[p], neg[p], x.q + 32 * (c + 2 * p), two),
                                    lane_scale512(f, st, p), acc[t]);
            }
            if (has_min(f))
                accm[t] = _mm512_fmadd_ps(_mm512_mul_ps(wm, dx),
                                          _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(kb, x.s + c)),
                                          accm[t]);
        }
    }
    for (int t = 0; t < tn; t++)
        y[(size_t)(t0 + t) * ldy] =
            _mm512_reduce_add_ps(acc[t]) + (has_min(f) ? _mm512_reduce_add_ps(accm[t]) : 0.0f);
}

/* ------------------------------------------------------------------ AVX2 */

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INL256 static inline __attribute__((always_inline)) T256

T256 static void quant_x32_256(const float *x, int64_t n, int8_t *q, float *d, int32_t *s) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    const __m256i ord = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / 32; b++) {
        __m256 v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm256_loadu_ps(x + 32 * b + 8 * k);
        const __m256 m =
            _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absm), _mm256_and_ps(v[1], absm)),
                          _mm256_max_ps(_mm256_and_ps(v[2], absm), _mm256_and_ps(v[3], absm)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        d[b] = amax / 127.0f;
        __m256i c[4];
        for (int k = 0; k < 4; k++) {
            c[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
            c[k] = _mm256_max_epi32(_mm256_min_epi32(c[k], hi), lo);
        }
        const __m256i p =
            _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
        _mm256_storeu_si256((__m256i *)(q + 32 * b), _mm256_permutevar8x32_epi32(p, ord));
        const __m256i t =
            _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
        __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4e));
        t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xb1));
        s[b] = _mm_cvtsi128_si32(t4);
    }
}

/* Chunks of 8 blocks, one ymm of 32 codes each; maddubs + madd lane l sums codes 4l..4l+3. */
INL256 __m256 e4m3_256(__m128i bytes8) {
    const __m256i v = _mm256_cvtepu8_epi32(bytes8);
    const __m256i mag = _mm256_and_si256(v, _mm256_set1_epi32(0x7f));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    const __m256i nrm = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(1.0f / 512));
    const __m256 small = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag));
    __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(nrm), sub, small);
    r = _mm256_or_ps(r, _mm256_castsi256_ps(sign));
    const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
    return _mm256_blendv_ps(r, _mm256_set1_ps(NAN), nan);
}

INL256 void chunk_scales256(const int f, struct wrow r, int64_t c, int cb, __m256 ws[2],
                            __m256 *wm) {
    if (f == X_NVFP4) {
        float s2;
        memcpy(&s2, r.p, 4);
        const __m256 h = _mm256_set1_ps(s2 * 0.5f);
        uint8_t sc[16] = {0};
        memcpy(sc, r.p + 4 + 2 * c, 2 * (size_t)cb);
        ws[0] = _mm256_mul_ps(e4m3_256(_mm_loadl_epi64((const __m128i *)sc)), h);
        ws[1] = _mm256_mul_ps(e4m3_256(_mm_loadl_epi64((const __m128i *)(sc + 8))), h);
        return;
    }
    const int bs = fbytes(f);
    const uint8_t *b = r.p + (size_t)c * bs;
    if (f == X_MXFP4) {
        _Alignas(32) float e[8] = {0};
        for (int i = 0; i < cb; i++)
            e[i] = ft_ggml_e8m0_half(b[i * bs]);
        ws[0] = _mm256_load_ps(e);
        return;
    }
    _Alignas(16) uint16_t h[8] = {0}, m[8] = {0};
    for (int i = 0; i < cb; i++) {
        h[i] = ft_ggml_rd16(b + i * bs);
        if (has_min(f)) m[i] = ft_ggml_rd16(b + i * bs + 2);
    }
    ws[0] = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)h));
    if (has_min(f)) *wm = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)m));
}

/* Block i's 32 codes in element order: *a = |w| (unsigned formats: w), *sg = w (its signs). */
INL256 void block_codes256(const int f, struct wrow r, int64_t i, __m256i *a, __m256i *sg) {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256i w;
    if (f == X_NVFP4) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(r.p + r.coff + 16 * i));
        const __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
        const __m256i u = _mm256_setr_m128i(_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi));
        w = _mm256_shuffle_epi8(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ft_ggml_lut_mxfp4)), u);
    } else {
        const uint8_t *b = r.p + (size_t)i * fbytes(f), *qs = b + fqs(f);
        if (f == X_Q8_0) {
            w = _mm256_loadu_si256((const __m256i *)qs);
        } else {
            const __m128i v = _mm_loadu_si128((const __m128i *)qs);
            __m256i u =
                _mm256_setr_m128i(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
            if (f == X_Q5_0 || f == X_Q5_1) { /* bit j of qh to bit 4 of byte j */
                const __m256i q = _mm256_set1_epi32((int)rd32(b + fqh(f)));
                const __m256i bytes = _mm256_shuffle_epi8(
                    q, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                        2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
                const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
                const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
                u = _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
            }
            if (f == X_Q4_0 || f == X_MXFP4) {
                const int8_t *lut = f == X_Q4_0 ? ft_ggml_lut_q4_0 : ft_ggml_lut_mxfp4;
                w = _mm256_shuffle_epi8(
                    _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lut)), u);
            } else if (f == X_Q5_0) {
                w = _mm256_sub_epi8(u, _mm256_set1_epi8(16));
            } else {
                w = u;
            }
        }
    }
    *sg = w;
    *a = is_signed(f) ? _mm256_abs_epi8(w) : w;
}

INL256 __m256 block_dot256(const int f, __m256i a, __m256i sg, const int8_t *q) {
    __m256i x = _mm256_loadu_si256((const __m256i *)q);
    if (is_signed(f)) x = _mm256_sign_epi8(x, sg);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(a, x), _mm256_set1_epi16(1)));
}

INL256 void scale_table256(const int f, const __m256 ws[2], __m256 dx, __m256 st[2]) {
    if (f == X_NVFP4) {
        st[0] = _mm256_mul_ps(
            ws[0], _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
        st[1] = _mm256_mul_ps(
            ws[1], _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)));
    } else {
        st[0] = _mm256_mul_ps(ws[0], dx);
    }
}

INL256 __m256 lane_scale256(const int f, const __m256 st[2], int b) {
    if (f == X_NVFP4) {
        const int g = 2 * (b & 3);
        return _mm256_permutevar8x32_ps(st[b >> 2],
                                        _mm256_setr_epi32(g, g, g, g, g + 1, g + 1, g + 1, g + 1));
    }
    return _mm256_permutevar8x32_ps(st[0], _mm256_set1_epi32(b));
}

/* The first cb (<= 8) floats / ints at p, the rest 0. */
INL256 __m256i first_mask256(int cb) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(cb), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INL256 float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

INL256 void row256(const int f, struct wrow r, int64_t nb, const void *xq, int t0, int tn, float *y,
                   int ldy) {
    __m256 acc[TOK], accm[TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = accm[t] = _mm256_setzero_ps();
    const int bs = f == X_NVFP4 ? 16 : fbytes(f);
    for (int64_t c = 0; c < nb; c += 8) {
        const int cb = nb - c < 8 ? (int)(nb - c) : 8;
        const __m256i km = first_mask256(cb);
        for (int o = 0; o < 8 * bs; o += 64)
            __builtin_prefetch((f == X_NVFP4 ? r.p + r.coff + 16 * c : r.p + c * bs) + PF_AHEAD + o,
                               0, 2);
        __m256 ws[2], wm = _mm256_setzero_ps(), st[2];
        chunk_scales256(f, r, c, cb, ws, &wm);
        if (tn == 1) {
            const struct x32_tok x = x32_tok(xq, nb, t0);
            const __m256 dx = _mm256_maskload_ps(x.d + c, km);
            scale_table256(f, ws, dx, st);
            for (int b = 0; b < cb; b++) {
                __m256i a, sg;
                block_codes256(f, r, c + b, &a, &sg);
                acc[0] = _mm256_fmadd_ps(block_dot256(f, a, sg, x.q + 32 * (c + b)),
                                         lane_scale256(f, st, b), acc[0]);
            }
            if (has_min(f))
                accm[0] = _mm256_fmadd_ps(
                    _mm256_mul_ps(wm, dx),
                    _mm256_cvtepi32_ps(_mm256_maskload_epi32((const int *)x.s + c, km)), accm[0]);
            continue;
        }
        __m256i a[8], sg[8];
        for (int b = 0; b < cb; b++)
            block_codes256(f, r, c + b, &a[b], &sg[b]);
        for (int t = 0; t < tn; t++) {
            const struct x32_tok x = x32_tok(xq, nb, t0 + t);
            const __m256 dx = _mm256_maskload_ps(x.d + c, km);
            scale_table256(f, ws, dx, st);
            for (int b = 0; b < cb; b++)
                acc[t] = _mm256_fmadd_ps(block_dot256(f, a[b], sg[b], x.q + 32 * (c + b)),
                                         lane_scale256(f, st, b), acc[t]);
            if (has_min(f))
                accm[t] = _mm256_fmadd_ps(
                    _mm256_mul_ps(wm, dx),
                    _mm256_cvtepi32_ps(_mm256_maskload_epi32((const int *)x.s + c, km)), accm[t]);
        }
    }
    for (int t = 0; t < tn; t++)
        y[(size_t)(t0 + t) * ldy] = hsum256(acc[t]) + (has_min(f) ? hsum256(accm[t]) : 0.0f);
}

/* ------------------------------------------------------------------ rows */

/* All rows (w + r * rb; NVFP4 codes at coff), tokens in passes of TOK; T = 1 separately so
 * row512 / row256 inline with tn = 1 (decode keeps everything in registers). */
#define ROWS_BODY(call)                                                                            \
    for (int r = 0; r < n_rows; r++) {                                                             \
        const struct wrow row = {w + r * rb, coff};                                                \
        if (T == 1) {                                                                              \
            call(row, nb, xq, 0, 1, y + r, ldy);                                                   \
            continue;                                                                              \
        }                                                                                          \
        for (int t0 = 0; t0 < T; t0 += TOK)                                                        \
            call(row, nb, xq, t0, T - t0 < TOK ? T - t0 : TOK, y + r, ldy);                        \
    }
#define ROWS_ARGS                                                                                  \
    const uint8_t *w, size_t rb, size_t coff, int n_rows, int64_t nb, const void *xq, int T,       \
        float *y, int ldy
#define ROWS_FMT(f, sfx)                                                                           \
    INL512 void row512v_##sfx(struct wrow r, int64_t nb, const void *xq, int t0, int tn, float *y, \
                              int ldy) {                                                           \
        row512(f, 1, r, nb, xq, t0, tn, y, ldy);                                                   \
    }                                                                                              \
    INL512 void row512b_##sfx(struct wrow r, int64_t nb, const void *xq, int t0, int tn, float *y, \
                              int ldy) {                                                           \
        row512(f, 0, r, nb, xq, t0, tn, y, ldy);                                                   \
    }                                                                                              \
    T512 static void rows512v_##sfx(ROWS_ARGS){                                                    \
        ROWS_BODY(row512v_##sfx)} T512 static void rows512b_##sfx(ROWS_ARGS){                      \
        ROWS_BODY(row512b_##sfx)} T256 static void rows256_##sfx(ROWS_ARGS) {                      \
        ROWS_BODY(row256_one_##sfx)                                                                \
    }

#define ROW256_FMT(f, sfx)                                                                         \
    INL256 void row256_one_##sfx(struct wrow r, int64_t nb, const void *xq, int t0, int tn,        \
                                 float *y, int ldy) {                                              \
        row256(f, r, nb, xq, t0, tn, y, ldy);                                                      \
    }

ROW256_FMT(X_Q4_0, q4_0)
ROW256_FMT(X_Q4_1, q4_1)
ROW256_FMT(X_Q5_0, q5_0)
ROW256_FMT(X_Q5_1, q5_1)
ROW256_FMT(X_Q8_0, q8_0)
ROW256_FMT(X_MXFP4, mxfp4)
ROW256_FMT(X_NVFP4, nvfp4)
ROWS_FMT(X_Q4_0, q4_0)
ROWS_FMT(X_Q4_1, q4_1)
ROWS_FMT(X_Q5_0, q5_0)
ROWS_FMT(X_Q5_1, q5_1)
ROWS_FMT(X_Q8_0, q8_0)
ROWS_FMT(X_MXFP4, mxfp4)
ROWS_FMT(X_NVFP4, nvfp4)

typedef void (*rows_fn)(ROWS_ARGS);
#define TABLE(pre)                                                                                 \
    { pre##q4_0, pre##q4_1, pre##q5_0, pre##q5_1, pre##q8_0, pre##mxfp4, pre##nvfp4 }
static const rows_fn k_rows512v[X_COUNT] = TABLE(rows512v_);
static const rows_fn k_rows512b[X_COUNT] = TABLE(rows512b_);
static const rows_fn k_rows256[X_COUNT] = TABLE(rows256_);
#endif

/* ------------------------------------------------------------------ dispatch */

static int g_no_vnni; /* tests: 1 runs the AVX-512 tier without VNNI */

int ft_ggml_x32_vnni(int use) {
    static int has = -1; /* cached: a racing first call stores the same value */
#if defined(__x86_64__) || defined(__i386__)
    if (has < 0) has = __builtin_cpu_supports("avx512vnni") ? 1 : 0;
#else
    has = 0;
#endif
    if (use >= 0) g_no_vnni = !use;
    return has && !g_no_vnni;
}

static void rows_x32(int f, const uint8_t *w, size_t rb, size_t coff, int n_rows, int64_t nb,
                     const void *xq, int T, float *y, int ldy) {
#if defined(__x86_64__) || defined(__i386__)
    const enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX512) {
        (ft_ggml_x32_vnni(-1) ? k_rows512v : k_rows512b)[f](w, rb, coff, n_rows, nb, xq, T, y, ldy);
        return;
    }
    if (isa >= FT_ISA_AVX2) {
        k_rows256[f](w, rb, coff, n_rows, nb, xq, T, y, ldy);
        return;
    }
#endif
    for (int r = 0; r < n_rows; r++)
        for (int t = 0; t < T; t++)
            y[(size_t)t * ldy + r] =
                row_ref(f, (struct wrow){w + r * rb, coff}, nb, x32_tok(xq, nb, t));
}

void ft_ggml_dot_rows_x32(int type, const void *w, size_t row_bytes, int n_rows, const void *xq,
                          int T, float *y, int ldy) {
    const int f = fmt_of(type);
    FT_ASSERT(f >= 0 && n_rows >= 0 && T >= 0);
    const size_t bytes = ft_ggml_type_size(type);
    FT_ASSERT(row_bytes % bytes == 0);
    rows_x32(f, w, row_bytes, 0, n_rows, (int64_t)(row_bytes / bytes), xq, T, y, ldy);
}

void ft_nvfp4_r_dot_rows_x32(const void *w, size_t row_bytes, int n_rows, const void *xq, int T,
                             size_t K, float *y, int ldy) {
    FT_ASSERT(K > 0 && K % 32 == 0 && row_bytes >= ft_nvfp4_r_row_bytes(K) && n_rows >= 0 &&
              T >= 0);
    rows_x32(X_NVFP4, w, row_bytes, 4 + K / 16, n_rows, (int64_t)(K / 32), xq, T, y, ldy);
}
