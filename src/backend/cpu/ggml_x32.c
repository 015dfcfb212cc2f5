/* ggml_x32.c — dot products of rows in the 32-element block formats (GGML's Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, MXFP4) and of NVFP4 rows (format/quant.h) with activations quantised to 8 bits
 * per 32 elements (an f32 scale, int8 codes, the codes' sums per 16), multiplied in integers
 * inside each block: the fast, approximate twin of ft_ggml_dot_rows and ft_nvfp4_r_dot_tokens
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
 *
 * How the vector tiers get there: each weight code is stored as the unsigned byte
 * u = w + off (off = 8 for Q4_0, 16 for Q5_0, 12 for the e2m1 formats, 128 for Q8_0, 0 for
 * Q4_1 / Q5_1), so sum w c = sum u c - off s, and u times the signed code is what vpdpbusd and
 * maddubs multiply (maddubs' int16 pair sums stay below 2^15 for u <= 31; without VNNI, Q8_0
 * instead multiplies |w| by c carrying w's sign). The activations are stored transposed per
 * chunk of 16 blocks (below), and the weights of 16 blocks are transposed to match, so that
 * the 8 multiply-adds of a chunk accumulate every int32 lane over one block: one lane per
 * block, and the f32 work (convert, times ws dx, add) is one vector per 16 blocks, not one
 * per 2. */
#include "backend/cpu/ggml_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/status.h"
#include "core/sys.h"
#include "format/fp_formats.h"

/* Activations, token by token: nb = n / 32 blocks take X32_BLOCK_BYTES each, as three arrays:
 *   int8_t  q[n];       codes round(x / d) in [-127, 127], by chunks of 16 blocks (the last
 *                       chunk may hold fewer, cb): chunk c's 32 cb codes at q + 512 c, in 8
 *                       groups k of 4 cb bytes, group k holding codes 4k .. 4k+3 of each of
 *                       the chunk's blocks in turn (code j of block 16c + b at
 *                       512 c + 4 cb (j / 4) + 4 b + j % 4);
 *   float   d[nb];      block scales max|x| / 127;
 *   int16_t h[2 nb];    h[2b] = sum of block b's codes 0..15, h[2b + 1] of codes 16..31. */
#define X32_BLOCK_BYTES 40
#define X32_CHUNK 16

struct x32_tok {
    const int8_t *q;
    const float *d;
    const int16_t *h;
};

static inline struct x32_tok x32_tok(const void *xq, int64_t nb, int t) {
    const uint8_t *p = (const uint8_t *)xq + (size_t)t * (size_t)nb * X32_BLOCK_BYTES;
    return (struct x32_tok){(const int8_t *)p, (const float *)(p + 32 * nb),
                            (const int16_t *)(p + 36 * nb)};
}

/* Where code j of block b sits in a token's q (nb blocks). */
static inline size_t x32_pos(int64_t b, int j, int64_t nb) {
    const int64_t c = b / X32_CHUNK,
                  cb = nb - c * X32_CHUNK < X32_CHUNK ? nb - c * X32_CHUNK : X32_CHUNK;
    return (size_t)(512 * c + 4 * cb * (j / 4) + 4 * (b % X32_CHUNK) + j % 4);
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
static inline int is_q5(int f) {
    return f == X_Q5_0 || f == X_Q5_1;
}
/* The offset that makes a format's codes unsigned (the header). */
static inline int foff(int f) {
    return f == X_Q4_0 ? 8 : f == X_Q5_0 ? 16 : f == X_Q8_0 ? 128 : has_min(f) ? 0 : 12;
}
/* Where block i's 16 (Q8_0: 32) code bytes start. */
static inline const uint8_t *fcodes(int f, struct wrow r, int64_t i) {
    return f == X_NVFP4 ? r.p + r.coff + 16 * i : r.p + (size_t)i * fbytes(f) + fqs(f);
}

static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* e2m1 code -> twice its value plus 12 (ft_ggml_lut_mxfp4 + 12: unsigned). */
static const int8_t k_lut_e2m1_u[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

/* ------------------------------------------------------------------ quantise x */

#if defined(__x86_64__) || defined(__i386__)
static void quant_block_512(const float *x, int8_t *c, float *d);
static void quant_block_256(const float *x, int8_t *c, float *d);
static void quant_x32_vec(const float *x, int ldx, int64_t nb, int T, void *xq, int nv,
                          void (*block)(const float *, int8_t *, float *));
#endif

/* One block: d = max|x| / 127, c = round(x * (127 / max)) clamped to +-127, in element order.
 * A block whose max is below 1e-30 gets codes 0 (127 / max would overflow to inf, and inf * 0
 * is NaN, which the tiers convert differently). */
static void quant_block_ref(const float *x, int8_t *c, float *d) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    const float id = amax > 1e-30f ? 127.0f / amax : 0.0f;
    *d = amax / 127.0f;
    for (int j = 0; j < 32; j++) {
        const int32_t v = ft_ggml_round_even(x[j] * id);
        c[j] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
}

/* The slot (position in the block's 8 groups of 4) of element e in NVFP4 nibble order:
 * e = 8k + 2i -> 4k + i, e = 8k + 2i + 1 -> 16 + 4k + i. */
static inline int nv_slot(int e) { return (e & 1) * 16 + 4 * (e >> 3) + ((e & 7) >> 1); }

static void quant_x32(const float *x, int ldx, int64_t n, int T, void *xq, int nv) {
    FT_ASSERT(n > 0 && n % 32 == 0 && T >= 0);
    const int64_t nb = n / 32;
    void (*block)(const float *, int8_t *, float *) = quant_block_ref;
#if defined(__x86_64__) || defined(__i386__)
    const enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX2) {
        quant_x32_vec(x, ldx, nb, T, xq, nv, isa >= FT_ISA_AVX512 ? quant_block_512 : quant_block_256);
        return;
    }
#endif
    for (int t = 0; t < T; t++) {
        const struct x32_tok o = x32_tok(xq, nb, t);
        const float *xt = x + (size_t)t * ldx;
        for (int64_t b = 0; b < nb; b++) {
            int8_t c[32];
            block(xt + 32 * b, c, (float *)o.d + b);
            int sum[2] = {0, 0};
            for (int j = 0; j < 32; j++)
                sum[j / 16] += c[j];
            ((int16_t *)o.h)[2 * b] = (int16_t)sum[0];
            ((int16_t *)o.h)[2 * b + 1] = (int16_t)sum[1];
            int8_t s[32];
            if (nv)
                for (int j = 0; j < 32; j++)
                    s[nv_slot(j)] = c[j];
            for (int k = 0; k < 8; k++) /* the chunk layout: 4 codes at a time */
                memcpy((int8_t *)o.q + x32_pos(b, 4 * k, nb), (nv ? s : c) + 4 * k, 4);
        }
    }
}

void ft_ggml_quant_x32(const float *x, int ldx, int64_t n, int T, void *xq) {
    quant_x32(x, ldx, n, T, xq, 0);
}

void ft_nvfp4_quant_x32(const float *x, int ldx, int64_t n, int T, void *xq) {
    quant_x32(x, ldx, n, T, xq, 1);
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
    const uint32_t qh = is_q5(f) ? rd32(b + fqh(f)) : 0;
    for (int j = 0; j < 32; j++) { /* element j < 16: low nibble of qs[j]; else high of j - 16 */
        const int u = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int)((qh >> j) & 1) << 4;
        w[j] = f == X_Q4_0 ? u - 8 : f == X_Q5_0 ? u - 16 : f == X_MXFP4 ? ft_ggml_lut_mxfp4[u] : u;
    }
}

static float row_ref(int f, struct wrow r, int64_t nb, struct x32_tok x) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int w[32], c[32];
        float ws[2], wm;
        block_ref(f, r, i, w, ws, &wm);
        for (int j = 0; j < 32; j++)
            c[j] = x.q[x32_pos(i, f == X_NVFP4 ? nv_slot(j) : j, nb)];
        const int groups = f == X_NVFP4 ? 2 : 1, len = 32 / groups;
        for (int g = 0; g < groups; g++) {
            int32_t isum = 0;
            for (int j = len * g; j < len * (g + 1); j++)
                isum += w[j] * c[j];
            acc += ws[g] * x.d[i] * (float)isum;
        }
        if (has_min(f)) acc += wm * x.d[i] * (float)(x.h[2 * i] + x.h[2 * i + 1]);
    }
    return acc;
}

/* ------------------------------------------------------------------ AVX-512 */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL512 static inline __attribute__((always_inline)) T512

/* quant_block_ref with the same f32 operations (so the same codes); the conversion rounds to
 * nearest even. */
T512 static void quant_block_512(const float *x, int8_t *c, float *d) {
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const __m512 id = _mm512_set1_ps(amax > 1e-30f ? 127.0f / amax : 0.0f);
    *d = amax / 127.0f;
    const __m512i c0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id));
    const __m512i c1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
    _mm_storeu_si128((__m128i *)c,
                     _mm512_cvtepi32_epi8(_mm512_max_epi32(_mm512_min_epi32(c0, hi), lo)));
    _mm_storeu_si128((__m128i *)(c + 16),
                     _mm512_cvtepi32_epi8(_mm512_max_epi32(_mm512_min_epi32(c1, hi), lo)));
}

/* quant_x32 for the AVX2 and AVX-512 tiers: each block's codes by the tier's block function,
 * then (AVX2 instructions only) the half sums (vpsadbw on the codes + 128), NVFP4's nibble
 * order (a byte shuffle inside each 128-bit lane, then the four quadwords reordered) and the
 * chunk layout's 4-byte groups with each block's position and stride worked out once. The
 * same bytes as the scalar tier (test_ggml_dot); the scalar sums, permutation and per-group
 * position arithmetic were 78% of quant_x32's time. */
__attribute__((target("avx2,fma,f16c"))) static void
quant_x32_vec(const float *x, int ldx, int64_t nb, int T, void *xq, int nv,
              void (*block)(const float *, int8_t *, float *)) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const __m256i nv_bytes = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                              0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (int t = 0; t < T; t++) {
        const struct x32_tok o = x32_tok(xq, nb, t);
        const float *xt = x + (size_t)t * ldx;
        int8_t *q = (int8_t *)o.q;
        int16_t *h = (int16_t *)o.h;
        for (int64_t b = 0; b < nb; b++) {
            _Alignas(32) int8_t c[32];
            block(xt + 32 * b, c, (float *)o.d + b);
            __m256i v = _mm256_load_si256((const __m256i *)c);
            /* sums of codes 0..15 and 16..31: byte sums of c + 128, less 16 x 128 each */
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(v, flip), _mm256_setzero_si256());
            const __m128i lo = _mm256_castsi256_si128(sad), hi = _mm256_extracti128_si256(sad, 1);
            h[2 * b] = (int16_t)(_mm_cvtsi128_si64(lo) + _mm_extract_epi64(lo, 1) - 2048);
            h[2 * b + 1] = (int16_t)(_mm_cvtsi128_si64(hi) + _mm_extract_epi64(hi, 1) - 2048);
            if (nv) /* even elements of each 8 then odd, per lane; then quadwords 0, 2, 1, 3 */
                v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, nv_bytes), 0xd8);
            _Alignas(32) uint32_t g[8];
            _mm256_store_si256((__m256i *)g, v);
            int8_t *base = q + x32_pos(b, 0, nb);
            const size_t stride = x32_pos(b, 4, nb) - x32_pos(b, 0, nb); /* group to group */
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) memcpy(base + stride * k, &g[k], 4);
        }
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

/* VBMI's vpermt2b: byte j of the result is byte idx[j] (7 bits) of the 128 bytes a, b; asm for
 * the reason dpbusd512 is (run only where ft_ggml_x32_vbmi says the CPU has it). */
INL512 __m512i permt2b512(__m512i a, __m512i idx, __m512i b) {
    __asm__("vpermt2b %2, %1, %0" : "+v"(a) : "v"(idx), "v"(b));
    return a;
}

/* ft_ggml_x32_vbmi: -1 unknown, 0 off, 1 the MXFP4 scales by permutes, 2 the codes' transpose
 * too (slower; kept for the tests' same-bits check) */
static int g_vbmi = -1;

/* The same with AVX-512BW: pairs to int16 (never saturating, see the header), then int32. */
INL512 __m512i dot_bw512(__m512i acc, __m512i a, __m512i b) {
    return _mm512_add_epi32(acc,
                            _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1)));
}

/* v[m] lane b = dword m of the 16 bytes at p[b] (lanes b set in lm; the others 0): a 16 x 4
 * transpose (128-bit lane l of z[j] holds block j + 4l; a 4 x 4 dword transpose inside each
 * lane). */
INL512 void transpose16x4_512(const uint8_t *const p[16], unsigned lm, __m512i v[4]) {
    __m512i z[4];
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        __m128i q[4];
#pragma GCC unroll 16
        for (int l = 0; l < 4; l++)
            q[l] = lm >> (j + 4 * l) & 1 ? _mm_loadu_si128((const __m128i *)p[j + 4 * l])
                                         : _mm_setzero_si128();
        z[j] = _mm512_inserti32x4(_mm512_castsi128_si512(q[0]), q[1], 1);
        z[j] = _mm512_inserti32x4(z[j], q[2], 2);
        z[j] = _mm512_inserti32x4(z[j], q[3], 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    v[0] = _mm512_unpacklo_epi64(t0, t2), v[1] = _mm512_unpackhi_epi64(t0, t2);
    v[2] = _mm512_unpacklo_epi64(t1, t3), v[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* 16 e4m3 bytes (one per int32 lane) as f32, exactly ft_e4m3_to_f32 (sign, subnormals
 * m * 2^-9, 0x7f NaN). */
INL512 __m512 e4m3_512(__m512i v) {
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

/* 16 e8m0 bytes (one per int32 lane) as half their value, exactly ft_ggml_e8m0_half:
 * 2^(e - 128) = (e - 1) << 23 as f32 bits, e = 0 and 1 the subnormals 2^-128, 2^-127. */
INL512 __m512 e8m0_half512(__m512i e) {
    const __m512i nrm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(
        _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), nrm, sub));
}

/* One chunk of weights (blocks c .. c + cb - 1), decoded once for every token: u[k] lane b =
 * the unsigned codes 4k .. 4k+3 of block b (Q8_0 without VNNI: |w|, with neg[k] its signs);
 * ws[0] the block scales (NVFP4: ws[0], ws[1] the scales of each block's halves); wm mins. */
struct wchunk512 {
    __m512i u[8];
    __mmask64 neg[8];
    __m512 ws[2], wm;
};

/* VBMI's transpose of a whole MXFP4 chunk of one row (16 blocks of 17 bytes from s0 = the
 * first block's scale byte), as transpose16x4_512's v: lane b of v[k] = code dword k of block
 * b, picked by byte permutes from the chunk's first 256 bytes (z[0..3], 64 each: blocks 0-6,
 * and 7's first two dwords, from z[0..1]; the rest of 7 and blocks 8-14 from z[2..3]) and
 * block 15's 16 code bytes (at s0 + 256) inserted. 16 one-op permutes and blends in place of
 * 16 loads, 12 inserts and 8 unpacks; only with ft_ggml_x32_vbmi(2) (slower on Zen 4). */
static const uint8_t k_mx_lo[4][64] = {
    {1, 2, 3, 4, 18, 19, 20, 21, 35, 36, 37, 38, 52, 53, 54, 55, 69, 70, 71, 72, 86, 87, 88, 89, 103, 104, 105, 106, 120, 121, 122, 123, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {5, 6, 7, 8, 22, 23, 24, 25, 39, 40, 41, 42, 56, 57, 58, 59, 73, 74, 75, 76, 90, 91, 92, 93, 107, 108, 109, 110, 124, 125, 126, 127, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {9, 10, 11, 12, 26, 27, 28, 29, 43, 44, 45, 46, 60, 61, 62, 63, 77, 78, 79, 80, 94, 95, 96, 97, 111, 112, 113, 114, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {13, 14, 15, 16, 30, 31, 32, 33, 47, 48, 49, 50, 64, 65, 66, 67, 81, 82, 83, 84, 98, 99, 100, 101, 115, 116, 117, 118, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
};
static const uint8_t k_mx_hi[4][64] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 10, 11, 12, 26, 27, 28, 29, 43, 44, 45, 46, 60, 61, 62, 63, 77, 78, 79, 80, 94, 95, 96, 97, 111, 112, 113, 114, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 13, 14, 15, 16, 30, 31, 32, 33, 47, 48, 49, 50, 64, 65, 66, 67, 81, 82, 83, 84, 98, 99, 100, 101, 115, 116, 117, 118, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 17, 18, 19, 20, 34, 35, 36, 37, 51, 52, 53, 54, 68, 69, 70, 71, 85, 86, 87, 88, 102, 103, 104, 105, 119, 120, 121, 122, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 5, 6, 7, 21, 22, 23, 24, 38, 39, 40, 41, 55, 56, 57, 58, 72, 73, 74, 75, 89, 90, 91, 92, 106, 107, 108, 109, 123, 124, 125, 126, 0, 0, 0, 0}
};

INL512 void mxfp4_codes_vbmi(const __m512i z[4], const uint8_t *b15, __m512i v[4]) {
    const __m512i x15 = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)b15));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i lo = permt2b512(z[0], _mm512_loadu_si512((const void *)k_mx_lo[k]), z[1]);
        const __m512i hi = permt2b512(z[2], _mm512_loadu_si512((const void *)k_mx_hi[k]), z[3]);
        v[k] = _mm512_mask_blend_epi32(k < 2 ? 0x7f00 : 0x7f80, lo, hi);
        v[k] = _mm512_mask_permutexvar_epi32(v[k], 0x8000, _mm512_set1_epi32(k), x15);
    }
}

/* The chunk whose lane b (set in lm) is the block whose codes start at p[b]; NVFP4: nv_sc the
 * lanes' scale bytes (16-bit pairs), nv_h half their rows' global scale. */
INL512 void chunk512_lanes(const int f, const int vnni, const uint8_t *const p[16], unsigned lm,
                           __m256i nv_sc, __m512 nv_h, struct wchunk512 *k) {
    /* a whole MXFP4 chunk of one row (not two rows' tails, chunk512_pair), where the CPU has
     * VBMI: its first 256 bytes once, for the scales and the codes' transpose */
    const int vb = f == X_MXFP4 && lm == 0xffffu && p[15] == p[0] + 15 * 17 &&
                   __atomic_load_n(&g_vbmi, __ATOMIC_RELAXED) > 0;
    __m512i z[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
    if (vb)
        for (int i = 0; i < 4; i++) z[i] = _mm512_loadu_si512((const void *)(p[0] - 1 + 64 * i));
    /* scales */
    if (f == X_NVFP4) {
        const __m512i sc = _mm512_cvtepu16_epi32(nv_sc);
        k->ws[0] = _mm512_mul_ps(e4m3_512(_mm512_and_si512(sc, _mm512_set1_epi32(0xff))), nv_h);
        k->ws[1] = _mm512_mul_ps(e4m3_512(_mm512_srli_epi32(sc, 8)), nv_h);
    } else if (vb) {
        /* each 64 bytes of the chunk hold 4 of the scale bytes (at 17 b), picked into the low
         * byte of lanes 0..7 from the first 128 and 8..15 from the next; the bytes between are
         * masked off. In place of the scalar conversions below, stored and loaded back as a
         * vector (one thread read ~8% faster from DRAM). */
        const __m512i idx = _mm512_set_epi32(127, 110, 93, 76, 59, 42, 25, 8, 119, 102, 85, 68, 51,
                                             34, 17, 0);
        const __m512i lo = permt2b512(z[0], idx, z[1]);
        const __m512i hi = permt2b512(z[2], idx, z[3]);
        const __m512i e = _mm512_and_si512(_mm512_mask_blend_epi32(0xff00, lo, hi),
                                           _mm512_set1_epi32(0xff));
        k->ws[0] = e8m0_half512(e);
    } else if (f == X_MXFP4) {
        _Alignas(64) float e[16] = {0};
#pragma GCC unroll 16
        for (int b = 0; b < 16; b++)
            if (lm >> b & 1) e[b] = ft_ggml_e8m0_half(p[b][-1]);
        k->ws[0] = _mm512_load_ps(e);
    } else {
        _Alignas(32) uint16_t h[16] = {0}, m[16] = {0};
#pragma GCC unroll 16
        for (int b = 0; b < 16; b++) {
            if (!(lm >> b & 1)) continue;
            h[b] = ft_ggml_rd16(p[b] - fqs(f));
            if (has_min(f)) m[b] = ft_ggml_rd16(p[b] - fqs(f) + 2);
        }
        k->ws[0] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)h));
        if (has_min(f)) k->wm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)m));
    }
    /* codes */
    __m512i v[4];
    if (vb && __atomic_load_n(&g_vbmi, __ATOMIC_RELAXED) == 2)
        mxfp4_codes_vbmi(z, p[15], v);
    else
        transpose16x4_512(p, lm, v);
    if (f == X_Q8_0) { /* dwords 4..7 from the second 16 bytes */
        const uint8_t *p2[16] = {0};
#pragma GCC unroll 16
        for (int b = 0; b < 16; b++)
            if (lm >> b & 1) p2[b] = p[b] + 16;
        __m512i v2[4];
        transpose16x4_512(p2, lm, v2);
#pragma GCC unroll 16
        for (int m = 0; m < 4; m++) {
            k->u[m] = v[m], k->u[4 + m] = v2[m];
        }
#pragma GCC unroll 16
        for (int m = 0; m < 8; m++) {
            if (vnni) {
                k->u[m] = _mm512_xor_si512(k->u[m], _mm512_set1_epi8((char)0x80)); /* w + 128 */
            } else {
                k->neg[m] = _mm512_movepi8_mask(k->u[m]);
                k->u[m] = _mm512_abs_epi8(k->u[m]);
            }
        }
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 16
    for (int m = 0; m < 4; m++) { /* low nibbles: elements 4m.., high: 16 + 4m.. (NVFP4: the
                                   * even and odd elements of 8m..8m+7, as its x is ordered) */
        k->u[m] = _mm512_and_si512(v[m], m4);
        k->u[4 + m] = _mm512_and_si512(_mm512_srli_epi16(v[m], 4), m4);
    }
    if (is_q5(f)) { /* bit j of qh is code j's bit 4: code 4k + i takes bit i of qh >> 4k */
        _Alignas(64) uint32_t qh[16] = {0};
#pragma GCC unroll 16
        for (int b = 0; b < 16; b++)
            if (lm >> b & 1) qh[b] = rd32(p[b] - fqs(f) + fqh(f));
        const __m512i q = _mm512_load_si512((const void *)qh);
        const __m512i b16 = _mm512_set1_epi8(0x10);
        const __m512i base =
            _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c));
#pragma GCC unroll 16
        for (int kk = 0; kk < 8; kk++) { /* byte kk / 2 of each lane's qh to its 4 bytes */
            const __m512i qb =
                _mm512_shuffle_epi8(q, _mm512_add_epi8(base, _mm512_set1_epi8((char)(kk / 2))));
            const __m512i bits = _mm512_set1_epi32(kk & 1 ? (int)0x80402010 : 0x08040201);
            const __mmask64 on = _mm512_test_epi8_mask(qb, bits);
            k->u[kk] = _mm512_mask_add_epi8(k->u[kk], on, k->u[kk], b16);
        }
    } else if (f == X_MXFP4 || f == X_NVFP4) {
        const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k_lut_e2m1_u));
#pragma GCC unroll 16
        for (int m = 0; m < 8; m++)
            k->u[m] = _mm512_shuffle_epi8(lut, k->u[m]);
    }
}

/* Blocks c .. c + cb - 1 of one row, in lanes 0 .. cb - 1. */
INL512 void chunk512(const int f, const int vnni, struct wrow r, int64_t c, int cb,
                     struct wchunk512 *k) {
    const uint8_t *p[16] = {0};
#pragma GCC unroll 16
    for (int b = 0; b < cb; b++)
        p[b] = fcodes(f, r, c + b);
    __m256i sc = _mm256_setzero_si256();
    __m512 h = _mm512_setzero_ps();
    if (f == X_NVFP4) {
        float s2;
        memcpy(&s2, r.p, 4);
        h = _mm512_set1_ps(s2 * 0.5f);
        const __mmask32 km = cb == 16 ? 0xffffffffu : (1u << (2 * cb)) - 1;
        sc = _mm256_maskz_loadu_epi8(km, r.p + 4 + 2 * c);
    }
    chunk512_lanes(f, vnni, p, cb == 16 ? 0xffffu : (1u << cb) - 1, sc, h, k);
}

/* The last tb <= 8 blocks (from c) of two rows: a's in lanes 0 .. tb - 1, b's in 8 .. 8 + tb - 1. */
INL512 void chunk512_pair(const int f, const int vnni, struct wrow a, struct wrow b, int64_t c,
                          int tb, struct wchunk512 *k) {
    const uint8_t *p[16] = {0};
#pragma GCC unroll 16
    for (int j = 0; j < tb; j++)
        p[j] = fcodes(f, a, c + j), p[8 + j] = fcodes(f, b, c + j);
    __m256i sc = _mm256_setzero_si256();
    __m512 h = _mm512_setzero_ps();
    if (f == X_NVFP4) {
        float sa, sb;
        memcpy(&sa, a.p, 4);
        memcpy(&sb, b.p, 4);
        h = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(sa * 0.5f), _mm512_set1_ps(sb * 0.5f));
        const __mmask16 km = (__mmask16)((1u << (2 * tb)) - 1);
        sc = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_maskz_loadu_epi8(km, a.p + 4 + 2 * c)),
            _mm_maskz_loadu_epi8(km, b.p + 4 + 2 * c), 1);
    }
    const unsigned lm = (1u << tb) - 1;
    chunk512_lanes(f, vnni, p, lm | lm << 8, sc, h, k);
}

/* Token loads: the 8 groups of a chunk's activation codes, and its 16 blocks' half sums.
 * dup: the chunk is a pair's tail (chunk512_pair): cb <= 8 blocks, the same in both halves. */
INL512 __m512i xload512(const int8_t *q, int cb, int kk, const int dup) {
    if (dup)
        return _mm512_broadcast_i64x4(
            _mm256_maskz_loadu_epi8((__mmask32)((1ull << (4 * cb)) - 1), q + 4 * cb * kk));
    if (cb == 16) return _mm512_loadu_si512((const void *)(q + 64 * kk));
    return _mm512_maskz_loadu_epi8((1ull << (4 * cb)) - 1, q + 4 * cb * kk);
}

/* One token's chunk: acc (f32 lanes, one per block) += the blocks' terms (but the min term,
 * into accm). */
INL512 void chunk_dot512(const int f, const int vnni, const struct wchunk512 *k, const int8_t *q,
                         const float *d, const int16_t *h, int cb, const int dup, __m512 *acc,
                         __m512 *accm) {
    const __mmask16 kb = (__mmask16)((1u << cb) - 1);
    __m512 dx;
    __m512i hs;
    if (dup) {
        dx = _mm512_castsi512_ps(_mm512_broadcast_i64x4(
            _mm256_castps_si256(_mm256_maskz_loadu_ps((__mmask8)kb, d))));
        hs = _mm512_broadcast_i64x4(
            _mm256_maskz_loadu_epi16((__mmask16)((1u << (2 * cb)) - 1), h));
    } else {
        dx = _mm512_maskz_loadu_ps(kb, d);
        hs = _mm512_maskz_loadu_epi16((__mmask32)((1ull << (2 * cb)) - 1), h);
    }
    const int off = foff(f), sgn = f == X_Q8_0 && !vnni;
    /* four independent sums (a chain of 8 multiply-adds would wait on their latency) */
    __m512i s[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
    if (f == X_NVFP4) { /* s[0], s[1]: elements 0..15 (groups 0, 1, 4, 5); s[2], s[3]: 16..31 */
        const __m512i ho = _mm512_mullo_epi16(hs, _mm512_set1_epi16((short)-off));
        s[0] = _mm512_srai_epi32(_mm512_slli_epi32(ho, 16), 16);
        s[2] = _mm512_srai_epi32(ho, 16);
    } else if (off && !sgn) {
        s[0] = _mm512_madd_epi16(hs, _mm512_set1_epi16((short)-off));
    }
#pragma GCC unroll 8
    for (int kk = 0; kk < 8; kk++) {
        __m512i x = xload512(q, cb, kk, dup);
        if (sgn) x = _mm512_mask_sub_epi8(x, k->neg[kk], _mm512_setzero_si512(), x);
        const int a = f == X_NVFP4 ? ((kk >> 1) & 1) * 2 + (kk & 1) : kk & 3;
        s[a] = vnni ? dpbusd512(s[a], k->u[kk], x) : dot_bw512(s[a], k->u[kk], x);
    }
    if (f == X_NVFP4) {
        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s[0], s[1])),
                               _mm512_mul_ps(k->ws[0], dx), *acc);
        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s[2], s[3])),
                               _mm512_mul_ps(k->ws[1], dx), *acc);
        return;
    }
    const __m512i st = _mm512_add_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_add_epi32(s[2], s[3]));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st), _mm512_mul_ps(k->ws[0], dx), *acc);
    if (has_min(f))
        *accm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(hs, _mm512_set1_epi16(1))),
                                _mm512_mul_ps(k->wm, dx), *accm);
}

#define TOK 16 /* tokens whose accumulators live on the stack per pass over a row */
/* Bytes prefetched ahead in the row stream. The executor runs on every core, where nearer is
 * better: 4096 read faster than 16384 from DRAM on 16 cores (2048 and 8192 no better); a guided
 * stretch is ~96 KB, so far ahead would read past its end. */
enum { PF_AHEAD = 4096 };
/* The same, bounded to the call's rows (pf_upto: one token's rows two at a time): the
 * stretch's first bytes are fetched at once and nothing past its end, so further ahead pays
 * (8192 bounded beat 4096 per row by 5-10%; 16384 no better). */
enum { PF_BOUNDED = 8192 };

/* Prefetches the row bytes of blocks c .. c + n - 1, pf bytes further on (pf 0: none). */
static inline void prefetch_blocks(int f, struct wrow r, int64_t c, int n, int pf) {
    if (!pf) return;
    const uint8_t *p = f == X_NVFP4 ? r.p + r.coff + 16 * c : r.p + (size_t)c * fbytes(f);
    const int bytes = n * (f == X_NVFP4 ? 16 : fbytes(f));
    for (int o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + pf + o, 0, 2); /* prefetcht1: nta, t2 and t0 no better */
    /* NVFP4 keeps a row's scales apart from its codes: the codes alone, pf on, leave the rows'
     * scale stretches (K/16 bytes each) to demand misses */
    if (f == X_NVFP4) __builtin_prefetch(r.p + 4 + 2 * c + pf, 0, 2);
}

/* Prefetch bounded to one call's rows, the contiguous bytes [next, end) of a stretch: every
 * line up to pf bytes past where the kernel is, none past the stretch's end, and the stretch's
 * first pf bytes at once (prefetch_blocks runs pf ahead of each row, so past the stretch's end,
 * and leaves its first pf bytes to demand misses). */
struct pf_cur {
    uintptr_t next, end;
};

/* Every line (one line in two or four, leaving the rest to the hardware, read 10-20% slower;
 * prefetching into the worker's next stretch gained nothing). */
INL512 void pf_upto(struct pf_cur *q, const uint8_t *at) {
    const uintptr_t t = (uintptr_t)at < q->end ? (uintptr_t)at : q->end;
    for (; q->next < t; q->next += 64) __builtin_prefetch((const void *)q->next, 0, 2);
}

/* Where the chunk of row r from block c (16 blocks, fewer at the row's end) ends */
INL512 const uint8_t *chunk_end(const int f, struct wrow r, int64_t c) {
    return f == X_NVFP4 ? r.p + r.coff + 16 * (c + X32_CHUNK) : r.p + fbytes(f) * (c + X32_CHUNK);
}

/* One chunk of a row for tokens [t0, t0 + tn): decoded once, then each token's terms. */
INL512 void chunk_tokens512(const int f, const int vnni, struct wrow r, int64_t c, const int cb,
                            int64_t nb, const void *xq, int t0, int tn, __m512 *acc, __m512 *accm) {
    struct wchunk512 k;
    chunk512(f, vnni, r, c, cb, &k);
    for (int t = 0; t < tn; t++) {
        const struct x32_tok x = x32_tok(xq, nb, t0 + t);
        chunk_dot512(f, vnni, &k, x.q + 32 * c, x.d + c, x.h + 2 * c, cb, 0, &acc[t], &accm[t]);
    }
}

/* Tokens [t0, t0 + tn) of one row of nb blocks into y[t * ldy]; inlined with tn = 1 for decode
 * (the chunk stays in registers), else each chunk decoded once for tn tokens. */
INL512 void row512(const int f, const int vnni, struct wrow r, int64_t nb, const void *xq, int t0,
                   int tn, float *y, int ldy) {
    __m512 acc[TOK], accm[TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = accm[t] = _mm512_setzero_ps();
    const int pf = PF_AHEAD;
    for (int64_t c = 0; c < nb; c += X32_CHUNK) {
        const int cb = nb - c < X32_CHUNK ? (int)(nb - c) : X32_CHUNK;
        prefetch_blocks(f, r, c, cb, pf);
        if (cb == X32_CHUNK) /* the constant lets the loads go unmasked */
            chunk_tokens512(f, vnni, r, c, X32_CHUNK, nb, xq, t0, tn, acc, accm);
        else
            chunk_tokens512(f, vnni, r, c, cb, nb, xq, t0, tn, acc, accm);
    }
    for (int t = 0; t < tn; t++)
        y[(size_t)(t0 + t) * ldy] =
            _mm512_reduce_add_ps(acc[t]) + (has_min(f) ? _mm512_reduce_add_ps(accm[t]) : 0.0f);
}

/* Rows go two at a time (row512_pair) for one token when they have whole chunks only or a
 * short last chunk (at most 8 blocks). */
static inline int pair_rows(int64_t nb) { return nb % X32_CHUNK ? nb % X32_CHUNK <= 8 : 1; }

/* Two rows' last chunks of tb <= 8 blocks (from block nf) as one chunk (chunk512_pair), their
 * terms added into the lanes row512 adds them to: lanes 0..7 of acc[0] and of acc[1]. */
INL512 void tails512_pair(const int f, const int vnni, struct wrow a, struct wrow b, int64_t nf,
                          int tb, const struct x32_tok x, int pf, __m512 acc[2], __m512 accm[2]) {
    struct wchunk512 k;
    prefetch_blocks(f, a, nf, tb, pf);
    prefetch_blocks(f, b, nf, tb, pf);
    chunk512_pair(f, vnni, a, b, nf, tb, &k);
    /* lanes 0..7: a's accumulators; 8..15: b's lanes 0..7 */
    __m512 t = _mm512_mask_blend_ps(0xff00, acc[0], _mm512_shuffle_f32x4(acc[1], acc[1], 0x4e));
    __m512 tm = _mm512_mask_blend_ps(0xff00, accm[0], _mm512_shuffle_f32x4(accm[1], accm[1], 0x4e));
    chunk_dot512(f, vnni, &k, x.q + 32 * nf, x.d + nf, x.h + 2 * nf, tb, 1, &t, &tm);
    acc[0] = _mm512_mask_blend_ps(0xff00, t, acc[0]);
    acc[1] = _mm512_mask_blend_ps(0xff00, _mm512_shuffle_f32x4(t, t, 0x4e), acc[1]);
    accm[0] = _mm512_mask_blend_ps(0xff00, tm, accm[0]);
    accm[1] = _mm512_mask_blend_ps(0xff00, _mm512_shuffle_f32x4(tm, tm, 0x4e), accm[1]);
}

/* Two rows of one token whose last chunks hold tb = nb % 16 <= 8 blocks (Qwen3-30B-A3B's down
 * rows: 24 blocks) or none (its gate/up rows: 64): each row's full chunks, then both tails as one
 * chunk (chunk512_pair), so the tails fill one chunk's 16 lanes instead of half of two. The same
 * bits as row512 for each row: the tails' terms are added into the lanes (and so the sums)
 * row512 adds them to. Prefetch bounded to the call's rows through q (b ends after a): a fixed
 * distance per row (prefetch_blocks) is wrong for two interleaved rows, as a's prefetch lands in
 * b, already being read, wherever a row is about that long (Q8_0 at K = 4096: 4352 bytes). Per
 * row at PF_AHEAD, Q8_0 read 9-20 GB/s from DRAM on one Zen 4 thread and 30% of the DRAM read on
 * two in the executor (rows of 2176 bytes); bounded, 36 GB/s and 80% (bench/RESULTS.md). */
INL512 void row512_pair(const int f, const int vnni, struct wrow a, struct wrow b, int64_t nb,
                        const void *xq, struct pf_cur *q, float *ya, float *yb) {
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 accm[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    const int pf = PF_BOUNDED;
    const int64_t nf = nb & ~(int64_t)(X32_CHUNK - 1);
    const int tb = (int)(nb - nf);
    const struct x32_tok x = x32_tok(xq, nb, 0);
    struct wchunk512 k;
    for (int64_t c = 0; c < nf; c += X32_CHUNK) {
        pf_upto(q, chunk_end(f, b, c) + pf);
        chunk512(f, vnni, a, c, X32_CHUNK, &k);
        chunk_dot512(f, vnni, &k, x.q + 32 * c, x.d + c, x.h + 2 * c, X32_CHUNK, 0, &acc[0],
                     &accm[0]);
        chunk512(f, vnni, b, c, X32_CHUNK, &k);
        chunk_dot512(f, vnni, &k, x.q + 32 * c, x.d + c, x.h + 2 * c, X32_CHUNK, 0, &acc[1],
                     &accm[1]);
    }
    if (tb) pf_upto(q, chunk_end(f, b, nf) + pf);
    if (tb) tails512_pair(f, vnni, a, b, nf, tb, x, 0, acc, accm); /* (none: whole chunks) */
    *ya = _mm512_reduce_add_ps(acc[0]) + (has_min(f) ? _mm512_reduce_add_ps(accm[0]) : 0.0f);
    *yb = _mm512_reduce_add_ps(acc[1]) + (has_min(f) ? _mm512_reduce_add_ps(accm[1]) : 0.0f);
}

/* VBMI's vpermb: byte j of the result is byte idx[j] (6 bits) of t (asm as permt2b512). */
INL512 __m512i permb512(__m512i idx, __m512i t) {
    __m512i r;
    __asm__("vpermb %2, %1, %0" : "=v"(r) : "v"(idx), "v"(t));
    return r;
}

/* MXFP4 and NVFP4 rows of one token by groups (AVX-512 VNNI + VBMI): a chunk's 16 blocks as
 * four groups of four, lane l of group g = block 4g + l in the block's own byte order. MXFP4's
 * group is one vpermt2b from two loads of the row; NVFP4's codes are contiguous, one load. That
 * replaces the 16 x 4 transpose (16 loads, 12 inserts, 8 unpacks a chunk); the e2m1 lookup is a
 * vpermb, whose 6-bit index needs no mask. The token's codes are transposed once per call
 * instead (mxg_x), and the groups' int32 partials summed per block back into row512's lanes:
 * the same integer sums, then the same scale terms in the same lanes, so the same bits as
 * row512 (test_ggml_dot x32_vbmi_same_bits). One core reads ~15-20% faster than through the
 * transpose; on 16 cores DRAM bounds the gain to a few percent. */
enum { MXG_MAX_NB = 256 }; /* rows of up to 8,192 elements (the token's transposed codes on the stack) */

/* The token's codes of full chunk c (x32 layout: row kk = dword kk of each of 16 blocks) as
 * o[g] (g < 4: codes 0..15 of blocks 4g..4g+3, the lanes' order) and o[4 + g] (codes 16..31):
 * a dword transpose inside each 128-bit lane, then a transpose of the 128-bit lanes. */
INL512 void mxg_x(const int8_t *q, __m512i o[8]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i r0 = _mm512_loadu_si512((const void *)(q + 256 * h)),
                      r1 = _mm512_loadu_si512((const void *)(q + 256 * h + 64)),
                      r2 = _mm512_loadu_si512((const void *)(q + 256 * h + 128)),
                      r3 = _mm512_loadu_si512((const void *)(q + 256 * h + 192));
        const __m512i t0 = _mm512_unpacklo_epi32(r0, r1), t1 = _mm512_unpackhi_epi32(r0, r1);
        const __m512i t2 = _mm512_unpacklo_epi32(r2, r3), t3 = _mm512_unpackhi_epi32(r2, r3);
        const __m512i a0 = _mm512_unpacklo_epi64(t0, t2), a1 = _mm512_unpackhi_epi64(t0, t2);
        const __m512i a2 = _mm512_unpacklo_epi64(t1, t3), a3 = _mm512_unpackhi_epi64(t1, t3);
        /* a_l's 128-bit lane g = block 4g + l's dwords 0..3; o[g]'s lane l = a_l's lane g */
        const __m512i u0 = _mm512_shuffle_i64x2(a0, a1, 0x44), u1 = _mm512_shuffle_i64x2(a0, a1, 0xee);
        const __m512i u2 = _mm512_shuffle_i64x2(a2, a3, 0x44), u3 = _mm512_shuffle_i64x2(a2, a3, 0xee);
        o[4 * h + 0] = _mm512_shuffle_i64x2(u0, u2, 0x88);
        o[4 * h + 1] = _mm512_shuffle_i64x2(u0, u2, 0xdd);
        o[4 * h + 2] = _mm512_shuffle_i64x2(u1, u3, 0x88);
        o[4 * h + 3] = _mm512_shuffle_i64x2(u1, u3, 0xdd);
    }
}

/* The constants of row512_mxg's chunks */
struct mxg_k {
    __m512i idx[4]; /* group g's bytes: 16 l + j = code byte j of block 4g + l, from z[g]'s start */
    __m512i sidx;   /* the 16 scale bytes (chunk512_lanes' VBMI path) */
    __m512i back;   /* the transpose-add's dword 4l + j holds block 4j + l's sum: to lane b */
    __m512i lut;
};

/* acc (row512's lanes: one per block) += full chunk c's terms */
INL512 void chunk512_mxg(const struct mxg_k *k, const uint8_t *b0, const __m512i *xc,
                         const struct x32_tok x, int64_t c, __m512 *acc) {
    __m512i z[5];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) z[i] = _mm512_loadu_si512((const void *)(b0 + 64 * i));
    z[4] = _mm512_maskz_loadu_epi8(0xffff, b0 + 256); /* block 15's last 16 bytes */
    const __m512i slo = permt2b512(z[0], k->sidx, z[1]), shi = permt2b512(z[2], k->sidx, z[3]);
    const __m512 ws = e8m0_half512(_mm512_and_si512(_mm512_mask_blend_epi32(0xff00, slo, shi),
                                                    _mm512_set1_epi32(0xff)));
    __m512i a[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m512i v = permt2b512(z[g], k->idx[g], z[g + 1]);
        const __m512i lo = permb512(v, k->lut), hi = permb512(_mm512_srli_epi16(v, 4), k->lut);
        a[g] = dpbusd512(dpbusd512(_mm512_setzero_si512(), lo, xc[g]), hi, xc[4 + g]);
    }
    /* each block's four partials summed: a 4 x 4 transpose-add inside the 128-bit lanes */
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]),
                                         _mm512_unpackhi_epi32(a[0], a[1]));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]),
                                         _mm512_unpackhi_epi32(a[2], a[3]));
    __m512i st = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    st = _mm512_permutexvar_epi32(k->back, st);
    const __m512 dx = _mm512_loadu_ps(x.d + c);
    const __m512i hs = _mm512_loadu_si512((const void *)(x.h + 2 * c));
    st = _mm512_add_epi32(_mm512_madd_epi16(hs, _mm512_set1_epi16((short)-foff(X_MXFP4))), st);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st), _mm512_mul_ps(ws, dx), *acc);
}

/* NVFP4 by groups: a chunk's codes are 256 contiguous bytes (16 per block), so group g is one
 * load; lane l of group g = block 4g + l, its dwords 0, 1 the first 16 elements (scale ws[0]),
 * 2, 3 the next (ws[1]). Each half's partials summed per block back into row512's lanes, with
 * the half's correction as chunk_dot512 adds it: the same bits as row512. */
INL512 void chunk512_nvg(const struct mxg_k *k, struct wrow r, const __m512i *xc,
                         const struct x32_tok x, int64_t c, __m512 *acc) {
    const uint8_t *b0 = r.p + r.coff + 16 * c;
    __m512i a[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m512i v = _mm512_loadu_si512((const void *)(b0 + 64 * g));
        const __m512i lo = permb512(v, k->lut), hi = permb512(_mm512_srli_epi16(v, 4), k->lut);
        a[g] = dpbusd512(dpbusd512(_mm512_setzero_si512(), lo, xc[g]), hi, xc[4 + g]);
    }
    float s2;
    memcpy(&s2, r.p, 4);
    const __m512 h = _mm512_set1_ps(s2 * 0.5f);
    const __m512i sc = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r.p + 4 + 2 * c)));
    const __m512 ws0 = _mm512_mul_ps(e4m3_512(_mm512_and_si512(sc, _mm512_set1_epi32(0xff))), h);
    const __m512 ws1 = _mm512_mul_ps(e4m3_512(_mm512_srli_epi32(sc, 8)), h);
    /* per 128-bit lane l: the halves' dword pairs of groups 0..3 (dword j of the sums = group j) */
    const __m512i f01 = _mm512_unpacklo_epi64(a[0], a[1]), f23 = _mm512_unpacklo_epi64(a[2], a[3]);
    const __m512i g01 = _mm512_unpackhi_epi64(a[0], a[1]), g23 = _mm512_unpackhi_epi64(a[2], a[3]);
#define EVEN_ODD(p, q)                                                                             \
    _mm512_add_epi32(                                                                              \
        _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(p), _mm512_castsi512_ps(q), 0x88)), \
        _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(p), _mm512_castsi512_ps(q), 0xdd)))
    __m512i s0 = _mm512_permutexvar_epi32(k->back, EVEN_ODD(f01, f23));
    __m512i s1 = _mm512_permutexvar_epi32(k->back, EVEN_ODD(g01, g23));
#undef EVEN_ODD
    const __m512 dx = _mm512_loadu_ps(x.d + c);
    const __m512i hs = _mm512_loadu_si512((const void *)(x.h + 2 * c));
    const __m512i ho = _mm512_mullo_epi16(hs, _mm512_set1_epi16((short)-foff(X_NVFP4)));
    s0 = _mm512_add_epi32(_mm512_srai_epi32(_mm512_slli_epi32(ho, 16), 16), s0);
    s1 = _mm512_add_epi32(_mm512_srai_epi32(ho, 16), s1);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(ws0, dx), *acc);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(ws1, dx), *acc);
}

/* acc += full chunk c of row r by groups (xc: the token's codes of that chunk, mxg_x) */
INL512 void chunk512_grp(const int f, const struct mxg_k *k, struct wrow r, const __m512i *xc,
                         const struct x32_tok x, int64_t c, __m512 *acc) {
    if (f == X_NVFP4) chunk512_nvg(k, r, xc, x, c, acc);
    else chunk512_mxg(k, r.p + (size_t)c * 17, xc, x, c, acc);
}

/* One row: full chunks by groups, a short last chunk as row512's */
INL512 void row512_mxg(const int f, const struct mxg_k *k, struct wrow r, int64_t nb,
                       const __m512i *xg, const struct x32_tok x, int pf, struct pf_cur *q,
                       float *y) {
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    const int64_t nf = nb & ~(int64_t)(X32_CHUNK - 1);
    for (int64_t c = 0; c < nf; c += X32_CHUNK) {
        if (q) pf_upto(q, chunk_end(f, r, c) + pf);
        else prefetch_blocks(f, r, c, X32_CHUNK, pf);
        chunk512_grp(f, k, r, xg + 8 * (c / X32_CHUNK), x, c, &acc);
    }
    if (nf < nb) {
        const int cb = (int)(nb - nf);
        struct wchunk512 w;
        if (q) pf_upto(q, chunk_end(f, r, nf) + pf);
        else prefetch_blocks(f, r, nf, cb, pf);
        chunk512(f, 1, r, nf, cb, &w);
        chunk_dot512(f, 1, &w, x.q + 32 * nf, x.d + nf, x.h + 2 * nf, cb, 0, &acc, &accm);
    }
    *y = _mm512_reduce_add_ps(acc);
}

/* Two rows whose last chunks hold tb <= 8 blocks (or none): full chunks by groups, the two rows
 * interleaved, both tails as one chunk, as row512_pair (the same lanes, so the same bits as
 * row512) */
INL512 void row512_mxg_pair(const int f, const struct mxg_k *k, struct wrow a, struct wrow b, int64_t nb,
                            const __m512i *xg, const struct x32_tok x, int pf, struct pf_cur *q,
                            float *ya, float *yb) {
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 accm[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    const int64_t nf = nb & ~(int64_t)(X32_CHUNK - 1);
    const int tb = (int)(nb - nf);
    for (int64_t c = 0; c < nf; c += X32_CHUNK) {
        if (q) { /* b ends after a */
            pf_upto(q, chunk_end(f, b, c) + pf);
        } else {
            prefetch_blocks(f, a, c, X32_CHUNK, pf);
            prefetch_blocks(f, b, c, X32_CHUNK, pf);
        }
        chunk512_grp(f, k, a, xg + 8 * (c / X32_CHUNK), x, c, &acc[0]);
        chunk512_grp(f, k, b, xg + 8 * (c / X32_CHUNK), x, c, &acc[1]);
    }
    if (tb && q) pf_upto(q, chunk_end(f, b, nf) + pf);
    if (tb) tails512_pair(f, 1, a, b, nf, tb, x, q ? 0 : pf, acc, accm); /* (none: whole chunks) */
    *ya = _mm512_reduce_add_ps(acc[0]);
    *yb = _mm512_reduce_add_ps(acc[1]);
}

INL512 void rows512_mxg(const int f, const uint8_t *w, size_t rb, size_t coff, int n_rows,
                        int64_t nb, const void *xq, float *y) {
    _Alignas(64) __m512i xg[MXG_MAX_NB / X32_CHUNK * 8];
    const struct x32_tok x = x32_tok(xq, nb, 0);
    const int64_t nf = nb & ~(int64_t)(X32_CHUNK - 1);
    for (int64_t c = 0; c < nf; c += X32_CHUNK) mxg_x(x.q + 32 * c, xg + 8 * (c / X32_CHUNK));
    _Alignas(64) uint8_t ib[64];
    for (int l = 0; l < 4; l++)
        for (int j = 0; j < 16; j++) ib[16 * l + j] = (uint8_t)(1 + 17 * l + j);
    struct mxg_k k = {
        .sidx = _mm512_set_epi32(127, 110, 93, 76, 59, 42, 25, 8, 119, 102, 85, 68, 51, 34, 17, 0),
        .back = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0),
        .lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k_lut_e2m1_u)),
    };
    for (int g = 0; g < 4; g++)
        k.idx[g] = _mm512_add_epi8(_mm512_load_si512((const void *)ib), _mm512_set1_epi8((char)(4 * g)));
    const int pf = PF_BOUNDED;
    struct pf_cur cur = {(uintptr_t)w & ~(uintptr_t)63, (uintptr_t)(w + (size_t)n_rows * rb)};
    struct pf_cur *q = &cur;
    pf_upto(q, w + pf);
    int r = 0;
    if (pair_rows(nb))
        for (; r + 1 < n_rows; r += 2)
            row512_mxg_pair(f, &k, (struct wrow){w + r * rb, coff}, (struct wrow){w + (r + 1) * rb, coff}, nb,
                            xg, x, pf, q, y + r, y + r + 1);
    for (; r < n_rows; r++) row512_mxg(f, &k, (struct wrow){w + r * rb, coff}, nb, xg, x, pf, q, y + r);
}
T512 static void rows512_mxg_mx(const uint8_t *w, size_t rb, size_t coff, int n_rows, int64_t nb,
                                const void *xq, float *y) {
    rows512_mxg(X_MXFP4, w, rb, coff, n_rows, nb, xq, y);
}
T512 static void rows512_mxg_nv(const uint8_t *w, size_t rb, size_t coff, int n_rows, int64_t nb,
                                const void *xq, float *y) {
    rows512_mxg(X_NVFP4, w, rb, coff, n_rows, nb, xq, y);
}

/* ------------------------------------------------------------------ AVX2 */

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INL256 static inline __attribute__((always_inline)) T256

T256 static void quant_block_256(const float *x, int8_t *c, float *d) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    __m256 v[4];
#pragma GCC unroll 16
    for (int k = 0; k < 4; k++)
        v[k] = _mm256_loadu_ps(x + 8 * k);
    const __m256 m =
        _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absm), _mm256_and_ps(v[1], absm)),
                      _mm256_max_ps(_mm256_and_ps(v[2], absm), _mm256_and_ps(v[3], absm)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const __m256 id = _mm256_set1_ps(amax > 1e-30f ? 127.0f / amax : 0.0f);
    *d = amax / 127.0f;
    __m256i q[4];
#pragma GCC unroll 16
    for (int k = 0; k < 4; k++)
        q[k] =
            _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[k], id)), hi), lo);
    /* packs interleave the 128-bit lanes: dwords [0..3 of q0, q1, q2, q3, 4..7 of each] */
    const __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)c,
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* As transpose16x4_512 for 8 blocks: v[m] lane b = dword m of the 16 bytes at p[b]. */
INL256 void transpose8x4_256(const uint8_t *const p[8], int cb, __m256i v[4]) {
    __m256i z[4];
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        const __m128i a = j < cb ? _mm_loadu_si128((const __m128i *)p[j]) : _mm_setzero_si128();
        const __m128i b =
            j + 4 < cb ? _mm_loadu_si128((const __m128i *)p[j + 4]) : _mm_setzero_si128();
        z[j] = _mm256_setr_m128i(a, b);
    }
    const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
    v[0] = _mm256_unpacklo_epi64(t0, t2), v[1] = _mm256_unpackhi_epi64(t0, t2);
    v[2] = _mm256_unpacklo_epi64(t1, t3), v[3] = _mm256_unpackhi_epi64(t1, t3);
}

INL256 __m256 e4m3_256(__m256i v) {
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

/* Half a chunk (8 blocks, one ymm lane each), as wchunk512; sg[k]: Q8_0's signed codes. */
struct wchunk256 {
    __m256i u[8], sg[8];
    __m256 ws[2], wm;
};

INL256 void chunk256(const int f, struct wrow r, int64_t c, int cb, struct wchunk256 *k) {
    const uint8_t *p[8] = {0};
#pragma GCC unroll 16
    for (int b = 0; b < cb; b++)
        p[b] = fcodes(f, r, c + b);
    if (f == X_NVFP4) {
        float s2;
        memcpy(&s2, r.p, 4);
        const __m256 h = _mm256_set1_ps(s2 * 0.5f);
        uint8_t sc[16] = {0};
        memcpy(sc, r.p + 4 + 2 * c, 2 * (size_t)cb);
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)sc));
        k->ws[0] = _mm256_mul_ps(e4m3_256(_mm256_and_si256(v, _mm256_set1_epi32(0xff))), h);
        k->ws[1] = _mm256_mul_ps(e4m3_256(_mm256_srli_epi32(v, 8)), h);
    } else if (f == X_MXFP4) {
        _Alignas(32) float e[8] = {0};
#pragma GCC unroll 16
        for (int b = 0; b < cb; b++)
            e[b] = ft_ggml_e8m0_half(p[b][-1]);
        k->ws[0] = _mm256_load_ps(e);
    } else {
        _Alignas(16) uint16_t h[8] = {0}, m[8] = {0};
#pragma GCC unroll 16
        for (int b = 0; b < cb; b++) {
            h[b] = ft_ggml_rd16(p[b] - fqs(f));
            if (has_min(f)) m[b] = ft_ggml_rd16(p[b] - fqs(f) + 2);
        }
        k->ws[0] = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)h));
        if (has_min(f)) k->wm = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)m));
    }
    __m256i v[4];
    transpose8x4_256(p, cb, v);
    if (f == X_Q8_0) {
        const uint8_t *p2[8] = {0};
#pragma GCC unroll 16
        for (int b = 0; b < cb; b++)
            p2[b] = p[b] + 16;
        __m256i v2[4];
        transpose8x4_256(p2, cb, v2);
#pragma GCC unroll 16
        for (int m = 0; m < 4; m++) {
            k->sg[m] = v[m], k->sg[4 + m] = v2[m];
        }
#pragma GCC unroll 16
        for (int m = 0; m < 8; m++)
            k->u[m] = _mm256_abs_epi8(k->sg[m]);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 16
    for (int m = 0; m < 4; m++) {
        k->u[m] = _mm256_and_si256(v[m], m4);
        k->u[4 + m] = _mm256_and_si256(_mm256_srli_epi16(v[m], 4), m4);
    }
    if (is_q5(f)) {
        _Alignas(32) uint32_t qh[8] = {0};
#pragma GCC unroll 16
        for (int b = 0; b < cb; b++)
            qh[b] = rd32(p[b] - fqs(f) + fqh(f));
        const __m256i q = _mm256_load_si256((const __m256i *)qh);
        const __m256i b16 = _mm256_set1_epi8(0x10);
        const __m256i base =
            _mm256_broadcastsi128_si256(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c));
#pragma GCC unroll 16
        for (int kk = 0; kk < 8; kk++) {
            const __m256i qb =
                _mm256_shuffle_epi8(q, _mm256_add_epi8(base, _mm256_set1_epi8((char)(kk / 2))));
            const __m256i bits = _mm256_set1_epi32(kk & 1 ? (int)0x80402010 : 0x08040201);
            const __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(qb, bits), bits);
            k->u[kk] = _mm256_or_si256(k->u[kk], _mm256_and_si256(on, b16));
        }
    } else if (f == X_MXFP4 || f == X_NVFP4) {
        const __m256i lut =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)k_lut_e2m1_u));
#pragma GCC unroll 16
        for (int m = 0; m < 8; m++)
            k->u[m] = _mm256_shuffle_epi8(lut, k->u[m]);
    }
}

/* Group kk of a token's half chunk (nh <= 8 blocks of a chunk of cb). */
INL256 __m256i xload256(const int8_t *q, int cb, int nh, int kk) {
    const int8_t *p = q + 4 * cb * kk;
    if (nh == 8) return _mm256_loadu_si256((const __m256i *)p);
    const __m256i km =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(nh), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_epi32((const int *)p, km);
}

INL256 __m256i dot256(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
}

/* As chunk_dot512 for nh blocks (q, d, h at the half chunk's first block; cb: the chunk's). */
INL256 void chunk_dot256(const int f, const struct wchunk256 *k, const int8_t *q, const float *d,
                         const int16_t *h, int cb, int nh, __m256 *acc, __m256 *accm) {
    const __m256i km =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(nh), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 dx = _mm256_maskload_ps(d, km);
    const __m256i hs = _mm256_maskload_epi32((const int *)h, km); /* one block's pair per lane */
    const int off = foff(f);
    __m256i s[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
    if (f == X_NVFP4) {
        const __m256i ho = _mm256_mullo_epi16(hs, _mm256_set1_epi16((short)-off));
        s[0] = _mm256_srai_epi32(_mm256_slli_epi32(ho, 16), 16);
        s[2] = _mm256_srai_epi32(ho, 16);
    } else if (off && f != X_Q8_0) {
        s[0] = _mm256_madd_epi16(hs, _mm256_set1_epi16((short)-off));
    }
#pragma GCC unroll 8
    for (int kk = 0; kk < 8; kk++) {
        __m256i x = xload256(q, cb, nh, kk);
        if (f == X_Q8_0) x = _mm256_sign_epi8(x, k->sg[kk]);
        const int a = f == X_NVFP4 ? ((kk >> 1) & 1) * 2 + (kk & 1) : kk & 3;
        s[a] = dot256(s[a], k->u[kk], x);
    }
    if (f == X_NVFP4) {
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s[0], s[1])),
                               _mm256_mul_ps(k->ws[0], dx), *acc);
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s[2], s[3])),
                               _mm256_mul_ps(k->ws[1], dx), *acc);
        return;
    }
    const __m256i st = _mm256_add_epi32(_mm256_add_epi32(s[0], s[1]), _mm256_add_epi32(s[2], s[3]));
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(st), _mm256_mul_ps(k->ws[0], dx), *acc);
    if (has_min(f))
        *accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(hs, _mm256_set1_epi16(1))),
                                _mm256_mul_ps(k->wm, dx), *accm);
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
    const int pf = PF_AHEAD;
    for (int64_t c = 0; c < nb; c += X32_CHUNK) {
        const int cb = nb - c < X32_CHUNK ? (int)(nb - c) : X32_CHUNK;
        prefetch_blocks(f, r, c, cb, pf);
        for (int hf = 0; hf < 2 && 8 * hf < cb; hf++) {
            const int nh = cb - 8 * hf < 8 ? cb - 8 * hf : 8;
            struct wchunk256 k;
            chunk256(f, r, c + 8 * hf, nh, &k);
            for (int t = 0; t < tn; t++) {
                const struct x32_tok x = x32_tok(xq, nb, t0 + t);
                chunk_dot256(f, &k, x.q + 32 * c + 32 * hf, x.d + c + 8 * hf,
                             x.h + 2 * (c + 8 * hf), cb, nh, &acc[t], &accm[t]);
            }
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
/* The AVX-512 tiers: for one token, rows two at a time through row512_pair where it applies:
 * rows with a short last chunk, and rows of whole chunks. */
#define ROWS_BODY512(call, pair)                                                                   \
    if (T == 1 && pair_rows(nb)) {                                                                 \
        struct pf_cur q = {(uintptr_t)w & ~(uintptr_t)63, (uintptr_t)(w + (size_t)n_rows * rb)};   \
        pf_upto(&q, w + PF_BOUNDED);                                                               \
        int r = 0;                                                                                 \
        for (; r + 1 < n_rows; r += 2)                                                             \
            pair((struct wrow){w + r * rb, coff}, (struct wrow){w + (r + 1) * rb, coff}, nb, xq,   \
                 &q, y + r, y + r + 1);                                                            \
        if (r < n_rows) call((struct wrow){w + r * rb, coff}, nb, xq, 0, 1, y + r, ldy);          \
        return;                                                                                    \
    }                                                                                              \
    ROWS_BODY(call)
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
    INL512 void pair512v_##sfx(struct wrow a, struct wrow b, int64_t nb, const void *xq,           \
                               struct pf_cur *q, float *ya, float *yb) {                           \
        row512_pair(f, 1, a, b, nb, xq, q, ya, yb);                                                \
    }                                                                                              \
    INL512 void pair512b_##sfx(struct wrow a, struct wrow b, int64_t nb, const void *xq,           \
                               struct pf_cur *q, float *ya, float *yb) {                           \
        row512_pair(f, 0, a, b, nb, xq, q, ya, yb);                                                \
    }                                                                                              \
    T512 static void rows512v_##sfx(ROWS_ARGS) { ROWS_BODY512(row512v_##sfx, pair512v_##sfx) }     \
    T512 static void rows512b_##sfx(ROWS_ARGS) { ROWS_BODY512(row512b_##sfx, pair512b_##sfx) }     \
    T256 static void rows256_##sfx(ROWS_ARGS) { ROWS_BODY(row256_one_##sfx) }

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
    static int has = -1; /* cached (relaxed atomics: a racing first call stores the same value) */
    int h = __atomic_load_n(&has, __ATOMIC_RELAXED);
#if defined(__x86_64__) || defined(__i386__)
    if (h < 0) __atomic_store_n(&has, h = __builtin_cpu_supports("avx512vnni") ? 1 : 0, __ATOMIC_RELAXED);
#else
    h = 0;
#endif
    if (use >= 0) __atomic_store_n(&g_no_vnni, !use, __ATOMIC_RELAXED);
    return h && !__atomic_load_n(&g_no_vnni, __ATOMIC_RELAXED);
}

int ft_ggml_x32_vbmi(int use) {
    static int has = -1;
    int h = __atomic_load_n(&has, __ATOMIC_RELAXED);
#if defined(__x86_64__) || defined(__i386__)
    if (h < 0) __atomic_store_n(&has, h = __builtin_cpu_supports("avx512vbmi") ? 1 : 0, __ATOMIC_RELAXED);
    if (use < 0 && __atomic_load_n(&g_vbmi, __ATOMIC_RELAXED) < 0) {
        use = 1; /* 2 (the codes' transpose by permutes too) ran slower; tests compare both */
    }
    if (use >= 0) __atomic_store_n(&g_vbmi, h ? use : 0, __ATOMIC_RELAXED);
    return __atomic_load_n(&g_vbmi, __ATOMIC_RELAXED);
#else
    (void)use, (void)h;
    return 0;
#endif
}

static void rows_x32(int f, const uint8_t *w, size_t rb, size_t coff, int n_rows, int64_t nb,
                     const void *xq, int T, float *y, int ldy) {
#if defined(__x86_64__) || defined(__i386__)
    const enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX512) {
        if (__atomic_load_n(&g_vbmi, __ATOMIC_RELAXED) < 0) ft_ggml_x32_vbmi(-1);
        if ((f == X_MXFP4 || f == X_NVFP4) && T == 1 && nb <= MXG_MAX_NB && nb >= X32_CHUNK &&
            __atomic_load_n(&g_vbmi, __ATOMIC_RELAXED) > 0 && ft_ggml_x32_vnni(-1)) {
            (f == X_NVFP4 ? rows512_mxg_nv : rows512_mxg_mx)(w, rb, coff, n_rows, nb, xq, y);
            return;
        }
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
