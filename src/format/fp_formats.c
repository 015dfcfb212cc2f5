/* fp_formats.c — the quantised expert formats' CPU reference codecs (see fp_formats.h):
 * minifloat decode/encode, MXFP4 / NVFP4 / FP8 row dequantisation and dot products, with a
 * scalar path (the reference) and AVX2 / AVX-512 paths selected by the caller's tier.
 * Not yet wired into the loader or the CPU executor: tests/test_fp_formats.c calls it today.
 * Pure: any thread. */
#include "format/fp_formats.h"

#include <math.h>
#include <string.h>

#include "core/status.h"

/* ---- scalar codes ---- */

/* A minifloat with `mbits` mantissa bits and exponent bias `bias`, magnitude bits `mag`
 * (exponent field above the mantissa), finite code: exact in f32 (ldexpf of a small integer). */
static float minifloat_mag(unsigned mag, int mbits, int bias) {
    unsigned e = mag >> mbits, m = mag & ((1u << mbits) - 1);
    if (e == 0) return ldexpf((float)m, 1 - bias - mbits); /* subnormal: m * 2^(1-bias-mbits) */
    return ldexpf((float)((1u << mbits) | m), (int)e - bias - mbits);
}

float ft_e5m2_to_f32(uint8_t c) {
    unsigned mag = c & 0x7fu;
    float v;
    if (mag >= 0x7cu) v = mag == 0x7cu ? INFINITY : NAN;
    else v = minifloat_mag(mag, 2, 15);
    return (c & 0x80u) ? -v : v;
}

float ft_e2m1_to_f32(uint8_t c) {
    static const float k[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    return k[c & 15u];
}

float ft_e8m0_to_f32(uint8_t c) {
    if (c == 0xffu) return NAN;
    /* 2^(c-127): an f32 with exponent field c, or for c = 0 the subnormal 2^-127 (bit 22) */
    uint32_t u = c ? (uint32_t)c << 23 : 0x00400000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ft_ue4m3_to_f32(uint8_t c) { return ft_e4m3_to_f32(c & 0x7fu); }

/* Rounds the finite magnitude a >= 0 to a minifloat code magnitude (ties to even), with no
 * upper limit: the caller clamps. emin = 1 - bias. The spacing of representable values at
 * exponent e is 2^(max(e, emin) - mbits); the code of k steps of it is k for subnormals and
 * ((e - emin) << mbits) + k for normals, where k = 2^(mbits+1) (a carry) lands on the next
 * binade's first code. Codes are capped at `cap` (any value past it). */
static unsigned round_mag(float a, int mbits, int bias, unsigned cap) {
    if (a == 0.0f) return 0;
    int ex;
    frexpf(a, &ex); /* a = f * 2^ex, f in [0.5, 1): exponent e = ex - 1 */
    int e = ex - 1, emin = 1 - bias;
    if (e < emin) e = emin - 1; /* subnormal range: spacing 2^(emin - mbits) */
    int q = (e < emin ? emin : e) - mbits;
    float r = ldexpf(a, -q); /* exact: a power-of-two scale, r < 2^(mbits+1) */
    unsigned k = (unsigned)r;
    float frac = r - (float)k; /* exact: r has few integer bits */
    if (frac > 0.5f || (frac == 0.5f && (k & 1u))) k++;
    unsigned code = e < emin ? k : ((unsigned)(e - emin) << mbits) + k;
    return code > cap ? cap : code;
}

uint8_t ft_f32_to_e4m3(float f) {
    unsigned s = signbit(f) ? 0x80u : 0;
    if (isnan(f)) return (uint8_t)(s | 0x7fu);
    if (isinf(f)) return (uint8_t)(s | 0x7eu);
    return (uint8_t)(s | round_mag(fabsf(f), 3, 7, 0x7eu)); /* saturate at 448 */
}

uint8_t ft_f32_to_e5m2(float f) {
    unsigned s = signbit(f) ? 0x80u : 0;
    if (isnan(f)) return (uint8_t)(s | 0x7fu);
    if (isinf(f)) return (uint8_t)(s | 0x7cu);
    return (uint8_t)(s | round_mag(fabsf(f), 2, 15, 0x7cu)); /* past 57344: 0x7c = inf */
}

uint8_t ft_f32_to_e2m1(float f) {
    if (isnan(f)) return 0;
    unsigned s = signbit(f) ? 8u : 0;
    if (isinf(f)) return (uint8_t)(s | 7u);
    return (uint8_t)(s | round_mag(fabsf(f), 1, 1, 7u)); /* saturate at 6 */
}

/* ---- rows ---- */

static inline uint8_t nibble(const uint8_t *p, size_t i) {
    return (uint8_t)((i & 1) ? p[i >> 1] >> 4 : p[i >> 1] & 15u);
}

void ft_mxfp4_dequant_row(const uint8_t *blocks, const uint8_t *scales, size_t n, float *dst) {
    /* a gpt-oss block is 16 bytes = 32 elements, so the packed row is contiguous */
    for (size_t i = 0; i < n; i++)
        dst[i] = ft_e2m1_to_f32(nibble(blocks, i)) * ft_e8m0_to_f32(scales[i / 32]);
}

size_t ft_mxfp4_pack_ggml(uint8_t *dst, const uint8_t *codes, const uint8_t *scales, size_t rows,
                          size_t K) {
    size_t n_nan = 0, nb = K / 32;
    for (size_t b = 0; b < rows * nb; b++) { /* rows are contiguous in codes, scales and dst */
        const uint8_t *q = codes + b * 16;
        uint8_t *o = dst + b * 17;
        o[0] = scales[b];
        n_nan += scales[b] == 0xffu;
        for (size_t j = 0; j < 16; j++) o[1 + j] = (uint8_t)(nibble(q, j) | nibble(q, j + 16) << 4);
    }
    return n_nan;
}

void ft_nvfp4_dequant_row(const uint8_t *w, const uint8_t *scales, float scale_2, size_t n,
                          float *dst) {
    for (size_t i = 0; i < n; i++)
        dst[i] = (ft_e2m1_to_f32(nibble(w, i)) * ft_e4m3_to_f32(scales[i / 16])) * scale_2;
}

void ft_fp8_block_dequant_row_bs(const uint8_t *w_row, const float *scale_inv_row, size_t K,
                                 size_t bk, float *dst) {
    for (size_t c = 0; c < K; c++) dst[c] = ft_e4m3_to_f32(w_row[c]) * scale_inv_row[c / bk];
}

void ft_fp8_block_dequant_row(const uint8_t *w_row, const float *scale_inv_row, size_t K,
                              float *dst) {
    ft_fp8_block_dequant_row_bs(w_row, scale_inv_row, K, FT_FP8_BLOCK, dst);
}

void ft_fp8_block_dequant_bs(const uint8_t *w, const float *scale_inv, size_t N, size_t K,
                             size_t bn, size_t bk, float *dst) {
    size_t kb = (K + bk - 1) / bk; /* scale columns */
    for (size_t r = 0; r < N; r++)
        ft_fp8_block_dequant_row_bs(w + r * K, scale_inv + (r / bn) * kb, K, bk, dst + r * K);
}

void ft_fp8_block_dequant(const uint8_t *w, const float *scale_inv, size_t N, size_t K,
                          float *dst) {
    ft_fp8_block_dequant_bs(w, scale_inv, N, K, FT_FP8_BLOCK, FT_FP8_BLOCK, dst);
}

void ft_fp8_dequant_row(const uint8_t *w, float scale, size_t n, float *dst) {
    for (size_t i = 0; i < n; i++) dst[i] = ft_e4m3_to_f32(w[i]) * scale;
}

/* ---- dot products, scalar reference: per block, sum element * x in f32, then scale.
 * The _from variants start at block b0, so the SIMD paths finish a row's partial last block
 * with them. */

static float mxfp4_dot_from(const uint8_t *blocks, const uint8_t *scales, const float *x,
                            size_t b0, size_t n) {
    float acc = 0.0f;
    for (size_t b = b0; b * 32 < n; b++) {
        size_t end = FT_MIN(n, b * 32 + 32);
        float s = 0.0f;
        for (size_t i = b * 32; i < end; i++) s += ft_e2m1_to_f32(nibble(blocks, i)) * x[i];
        acc += s * ft_e8m0_to_f32(scales[b]);
    }
    return acc;
}

/* Without the global scale_2 (the caller multiplies once). */
static float nvfp4_dot_from(const uint8_t *w, const uint8_t *scales, const float *x, size_t b0,
                            size_t n) {
    float acc = 0.0f;
    for (size_t b = b0; b * 16 < n; b++) {
        size_t end = FT_MIN(n, b * 16 + 16);
        float s = 0.0f;
        for (size_t i = b * 16; i < end; i++) s += ft_e2m1_to_f32(nibble(w, i)) * x[i];
        acc += s * ft_e4m3_to_f32(scales[b]);
    }
    return acc;
}

/* Elements [i0, i1) of fp8 codes times x, unscaled. */
static float fp8_sum(const uint8_t *w, const float *x, size_t i0, size_t i1) {
    float s = 0.0f;
    for (size_t i = i0; i < i1; i++) s += ft_e4m3_to_f32(w[i]) * x[i];
    return s;
}

static float fp8_block_dot_scalar(const uint8_t *w, const float *scale_inv_row, const float *x,
                                  size_t K, size_t bk) {
    float acc = 0.0f;
    for (size_t b = 0; b * bk < K; b++)
        acc += fp8_sum(w, x, b * bk, FT_MIN(K, b * bk + bk)) * scale_inv_row[b];
    return acc;
}

/* ---- AVX-512 / AVX2 paths (runtime-selected target() functions; the build is plain -O2).
 * E2M1 -> f32 is a register lookup: AVX-512 permutes a 16-float table by the 4-bit code,
 * AVX2 permutes an 8-float table by the magnitude and xors the sign in. E4M3 -> f32 is bit
 * arithmetic: normals (mag << 20) + (120 << 23), subnormals mag * 2^-9, mag 0x7f NaN. ---- */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FT_FP_X86 1
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define T256 __attribute__((target("avx2,fma")))

/* 16 codes (low 4 bits of each byte of c, in order) -> the low 16 of the 32 elements */
T512 static inline __m512 e2m1x16_512(__m128i c) {
    const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                      -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c), lut);
}

/* Bytes q (two codes each, low nibble first) -> codes in element order: lo16 = elements of
 * bytes 0..7, hi16 = bytes 8..15. */
static inline void split_nibbles(__m128i q, __m128i *lo16, __m128i *hi16) {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    *lo16 = _mm_unpacklo_epi8(lo, hi);
    *hi16 = _mm_unpackhi_epi8(lo, hi);
}

T512 static inline __m512 e4m3x16_512(__m128i bytes) {
    __m512i v = _mm512_cvtepu8_epi32(bytes);
    __m512i mag = _mm512_and_si512(v, _mm512_set1_epi32(0x7f));
    __m512i nrm = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(1.0f / 512));
    __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8));
    __mmask16 is_nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
    __m512 f = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(nrm), sub);
    f = _mm512_mask_blend_ps(is_nan, f, _mm512_set1_ps(NAN));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f), sign));
}

T512 static float mxfp4_dot_512(const uint8_t *blocks, const uint8_t *scales, const float *x,
                                size_t n) {
    __m512 acc = _mm512_setzero_ps();
    size_t nb = n / 32;
    for (size_t b = 0; b < nb; b++) {
        __m128i c0, c1;
        split_nibbles(_mm_loadu_si128((const __m128i *)(blocks + 16 * b)), &c0, &c1);
        __m512 s = _mm512_mul_ps(e2m1x16_512(c0), _mm512_loadu_ps(x + 32 * b));
        s = _mm512_fmadd_ps(e2m1x16_512(c1), _mm512_loadu_ps(x + 32 * b + 16), s);
        acc = _mm512_fmadd_ps(s, _mm512_set1_ps(ft_e8m0_to_f32(scales[b])), acc);
    }
    return _mm512_reduce_add_ps(acc) + mxfp4_dot_from(blocks, scales, x, nb, n);
}

T512 static float nvfp4_dot_512(const uint8_t *w, const uint8_t *scales, const float *x,
                                size_t n) {
    __m512 acc = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    size_t nb = n / 16, b = 0;
    for (; b + 16 <= nb; b += 16) { /* 16 blocks: their scales decoded in one vector */
        __m512 sv = e4m3x16_512(_mm_loadu_si128((const __m128i *)(scales + b)));
        for (int j = 0; j < 16; j += 2) { /* 16 code bytes = blocks j and j + 1 */
            __m128i c0, c1;
            split_nibbles(_mm_loadu_si128((const __m128i *)(w + 8 * (b + j))), &c0, &c1);
            __m512 s0 = _mm512_mul_ps(e2m1x16_512(c0), _mm512_loadu_ps(x + 16 * (b + j)));
            __m512 s1 = _mm512_mul_ps(e2m1x16_512(c1), _mm512_loadu_ps(x + 16 * (b + j) + 16));
            acc = _mm512_fmadd_ps(s0, _mm512_permutexvar_ps(_mm512_set1_epi32(j), sv), acc);
            acc1 = _mm512_fmadd_ps(s1, _mm512_permutexvar_ps(_mm512_set1_epi32(j + 1), sv), acc1);
        }
    }
    for (; b < nb; b++) {
        __m128i c0, c1;
        split_nibbles(_mm_loadl_epi64((const __m128i *)(w + 8 * b)), &c0, &c1);
        __m512 s = _mm512_mul_ps(e2m1x16_512(c0), _mm512_loadu_ps(x + 16 * b));
        acc = _mm512_fmadd_ps(s, _mm512_set1_ps(ft_e4m3_to_f32(scales[b])), acc);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc, acc1)) + nvfp4_dot_from(w, scales, x, nb, n);
}

/* sum over [i0, i1) of e4m3(w) * x, 16 lanes with a masked remainder */
T512 static __m512 fp8_sum_512(const uint8_t *w, const float *x, size_t i0, size_t i1) {
    __m512 s = _mm512_setzero_ps();
    size_t i = i0;
    for (; i + 16 <= i1; i += 16)
        s = _mm512_fmadd_ps(e4m3x16_512(_mm_loadu_si128((const __m128i *)(w + i))),
                            _mm512_loadu_ps(x + i), s);
    if (i < i1) {
        __mmask16 m = (__mmask16)((1u << (i1 - i)) - 1);
        s = _mm512_fmadd_ps(e4m3x16_512(_mm_maskz_loadu_epi8(m, w + i)),
                            _mm512_maskz_loadu_ps(m, x + i), s);
    }
    return s;
}

T512 static float fp8_block_dot_512(const uint8_t *w, const float *scale_inv_row, const float *x,
                                    size_t K, size_t bk) {
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b * bk < K; b++)
        acc = _mm512_fmadd_ps(fp8_sum_512(w, x, b * bk, FT_MIN(K, b * bk + bk)),
                              _mm512_set1_ps(scale_inv_row[b]), acc);
    return _mm512_reduce_add_ps(acc);
}

T512 static float fp8_dot_512(const uint8_t *w, const float *x, size_t n) {
    return _mm512_reduce_add_ps(fp8_sum_512(w, x, 0, n));
}

#define FT_KERNEL inline __attribute__((always_inline)) /* specialised per token count */

/* The same dots for 8 or 4 tokens (x rows ldx apart) at once: each block is decoded once into
 * a register and multiplied into every token's accumulator, instead of once per token. */
T512 static FT_KERNEL void nvfp4_dot_tokens_512_n(const uint8_t *w, const uint8_t *scales,
                                                  const float *x, size_t ldx, size_t n, float *out,
                                                  int T) {
    __m512 acc[8];
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    size_t nb = n / 16;
    for (size_t b = 0; b < nb; b++) {
        __m128i c0, c1;
        split_nibbles(_mm_loadl_epi64((const __m128i *)(w + 8 * b)), &c0, &c1);
        __m512 v = _mm512_mul_ps(e2m1x16_512(c0), _mm512_set1_ps(ft_e4m3_to_f32(scales[b])));
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(v, _mm512_loadu_ps(x + t * ldx + 16 * b), acc[t]);
    }
    for (int t = 0; t < T; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]) + nvfp4_dot_from(w, scales, x + t * ldx, nb, n);
}
T512 static void nvfp4_dot_tokens_512(int T, const uint8_t *w, const uint8_t *scales,
                                      const float *x, size_t ldx, size_t n, float *out) {
    if (T == 8)
        nvfp4_dot_tokens_512_n(w, scales, x, ldx, n, out, 8); /* accumulators in registers */
    else
        nvfp4_dot_tokens_512_n(w, scales, x, ldx, n, out, 4);
}

T512 static FT_KERNEL void fp8_b128_dot_tokens_512_n(const uint8_t *w, const float *scale_inv,
                                                     const float *x, size_t ldx, size_t K,
                                                     float *out, int T) {
    __m512 acc[8];
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= K; i += 16) {
        __m512 v = _mm512_mul_ps(e4m3x16_512(_mm_loadu_si128((const __m128i *)(w + i))),
                                 _mm512_set1_ps(scale_inv[i / FT_FP8_BLOCK]));
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(v, _mm512_loadu_ps(x + t * ldx + i), acc[t]);
    }
    if (i < K) { /* K % 16 elements, inside one 128-block */
        __mmask16 m = (__mmask16)((1u << (K - i)) - 1);
        __m512 v = _mm512_mul_ps(e4m3x16_512(_mm_maskz_loadu_epi8(m, w + i)),
                                 _mm512_set1_ps(scale_inv[i / FT_FP8_BLOCK]));
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, x + t * ldx + i), acc[t]);
    }
    for (int t = 0; t < T; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
}
T512 static void fp8_b128_dot_tokens_512(int T, const uint8_t *w, const float *scale_inv,
                                         const float *x, size_t ldx, size_t K, float *out) {
    if (T == 8)
        fp8_b128_dot_tokens_512_n(w, scale_inv, x, ldx, K, out, 8);
    else
        fp8_b128_dot_tokens_512_n(w, scale_inv, x, ldx, K, out, 4);
}

T256 static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 codes (the low 8 bytes of c) -> f32 */
T256 static inline __m256 e2m1x8_256(__m128i c) {
    const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    __m256i v = _mm256_cvtepu8_epi32(c);
    __m256 mag = _mm256_permutevar8x32_ps(lut, v); /* uses the low 3 bits of each index */
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(8)), 28);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}

T256 static inline __m256 e4m3x8_256(__m128i bytes) {
    __m256i v = _mm256_cvtepu8_epi32(bytes);
    __m256i mag = _mm256_and_si256(v, _mm256_set1_epi32(0x7f));
    __m256i nrm = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(1.0f / 512));
    __m256 is_sub = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag));
    __m256 is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
    __m256 f = _mm256_blendv_ps(_mm256_castsi256_ps(nrm), sub, is_sub);
    f = _mm256_blendv_ps(f, _mm256_set1_ps(NAN), is_nan);
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(f), sign));
}

T256 static float mxfp4_dot_256(const uint8_t *blocks, const uint8_t *scales, const float *x,
                                size_t n) {
    __m256 acc = _mm256_setzero_ps();
    size_t nb = n / 32;
    for (size_t b = 0; b < nb; b++) {
        __m128i c0, c1;
        split_nibbles(_mm_loadu_si128((const __m128i *)(blocks + 16 * b)), &c0, &c1);
        const float *xb = x + 32 * b;
        __m256 s = _mm256_mul_ps(e2m1x8_256(c0), _mm256_loadu_ps(xb));
        s = _mm256_fmadd_ps(e2m1x8_256(_mm_srli_si128(c0, 8)), _mm256_loadu_ps(xb + 8), s);
        s = _mm256_fmadd_ps(e2m1x8_256(c1), _mm256_loadu_ps(xb + 16), s);
        s = _mm256_fmadd_ps(e2m1x8_256(_mm_srli_si128(c1, 8)), _mm256_loadu_ps(xb + 24), s);
        acc = _mm256_fmadd_ps(s, _mm256_set1_ps(ft_e8m0_to_f32(scales[b])), acc);
    }
    return hsum256(acc) + mxfp4_dot_from(blocks, scales, x, nb, n);
}

T256 static float nvfp4_dot_256(const uint8_t *w, const uint8_t *scales, const float *x, size_t n) {
    __m256 acc = _mm256_setzero_ps();
    size_t nb = n / 16;
    for (size_t b = 0; b < nb; b++) {
        __m128i c0, c1;
        split_nibbles(_mm_loadl_epi64((const __m128i *)(w + 8 * b)), &c0, &c1);
        __m256 s = _mm256_mul_ps(e2m1x8_256(c0), _mm256_loadu_ps(x + 16 * b));
        s = _mm256_fmadd_ps(e2m1x8_256(_mm_srli_si128(c0, 8)), _mm256_loadu_ps(x + 16 * b + 8), s);
        acc = _mm256_fmadd_ps(s, _mm256_set1_ps(ft_e4m3_to_f32(scales[b])), acc);
    }
    return hsum256(acc) + nvfp4_dot_from(w, scales, x, nb, n);
}

/* sum over [i0, i1) of e4m3(w) * x, 8 lanes, scalar remainder */
T256 static float fp8_sum_256(const uint8_t *w, const float *x, size_t i0, size_t i1) {
    __m256 s = _mm256_setzero_ps();
    size_t i = i0;
    for (; i + 8 <= i1; i += 8)
        s = _mm256_fmadd_ps(e4m3x8_256(_mm_loadl_epi64((const __m128i *)(w + i))),
                            _mm256_loadu_ps(x + i), s);
    return hsum256(s) + fp8_sum(w, x, i, i1);
}

T256 static float fp8_block_dot_256(const uint8_t *w, const float *scale_inv_row, const float *x,
                                    size_t K, size_t bk) {
    float acc = 0.0f;
    for (size_t b = 0; b * bk < K; b++)
        acc += fp8_sum_256(w, x, b * bk, FT_MIN(K, b * bk + bk)) * scale_inv_row[b];
    return acc;
}

/* The AVX2 twins of the 8- and 4-token dots (8 accumulators + the decoded vector + x fit in 16
 * ymm) */
T256 static FT_KERNEL void nvfp4_dot_tokens_256_n(const uint8_t *w, const uint8_t *scales,
                                                  const float *x, size_t ldx, size_t n, float *out,
                                                  int T) {
    __m256 acc[8];
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    size_t nb = n / 16;
    for (size_t b = 0; b < nb; b++) {
        __m128i c0, c1;
        split_nibbles(_mm_loadl_epi64((const __m128i *)(w + 8 * b)), &c0, &c1);
        __m256 s = _mm256_set1_ps(ft_e4m3_to_f32(scales[b]));
        __m256 v = _mm256_mul_ps(e2m1x8_256(c0), s);
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(v, _mm256_loadu_ps(x + t * ldx + 16 * b), acc[t]);
        v = _mm256_mul_ps(e2m1x8_256(_mm_srli_si128(c0, 8)), s);
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(v, _mm256_loadu_ps(x + t * ldx + 16 * b + 8), acc[t]);
    }
    for (int t = 0; t < T; t++)
        out[t] = hsum256(acc[t]) + nvfp4_dot_from(w, scales, x + t * ldx, nb, n);
}
T256 static void nvfp4_dot_tokens_256(int T, const uint8_t *w, const uint8_t *scales,
                                      const float *x, size_t ldx, size_t n, float *out) {
    if (T == 8)
        nvfp4_dot_tokens_256_n(w, scales, x, ldx, n, out, 8);
    else
        nvfp4_dot_tokens_256_n(w, scales, x, ldx, n, out, 4);
}

T256 static FT_KERNEL void fp8_b128_dot_tokens_256_n(const uint8_t *w, const float *scale_inv,
                                                     const float *x, size_t ldx, size_t K,
                                                     float *out, int T) {
    __m256 acc[8];
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= K; i += 8) {
        __m256 v = _mm256_mul_ps(e4m3x8_256(_mm_loadl_epi64((const __m128i *)(w + i))),
                                 _mm256_set1_ps(scale_inv[i / FT_FP8_BLOCK]));
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(v, _mm256_loadu_ps(x + t * ldx + i), acc[t]);
    }
    for (int t = 0; t < T; t++) /* K % 8 elements, inside one 128-block */
        out[t] = hsum256(acc[t]) +
                 (i < K ? fp8_sum(w, x + t * ldx, i, K) * scale_inv[i / FT_FP8_BLOCK] : 0.0f);
}
T256 static void fp8_b128_dot_tokens_256(int T, const uint8_t *w, const float *scale_inv,
                                         const float *x, size_t ldx, size_t K, float *out) {
    if (T == 8)
        fp8_b128_dot_tokens_256_n(w, scale_inv, x, ldx, K, out, 8);
    else
        fp8_b128_dot_tokens_256_n(w, scale_inv, x, ldx, K, out, 4);
}
#endif

/* ---- dispatch: tier >= 2 AVX-512, 1 AVX2, else scalar ---- */

float ft_mxfp4_dot(const uint8_t *blocks, const uint8_t *scales, const float *x, size_t n,
                   int tier) {
#ifdef FT_FP_X86
    if (tier >= FT_FP_AVX512) return mxfp4_dot_512(blocks, scales, x, n);
    if (tier == FT_FP_AVX2) return mxfp4_dot_256(blocks, scales, x, n);
#endif
    (void)tier;
    return mxfp4_dot_from(blocks, scales, x, 0, n);
}

float ft_nvfp4_dot(const uint8_t *w, const uint8_t *scales, float scale_2, const float *x,
                   size_t n, int tier) {
#ifdef FT_FP_X86
    if (tier >= FT_FP_AVX512) return nvfp4_dot_512(w, scales, x, n) * scale_2;
    if (tier == FT_FP_AVX2) return nvfp4_dot_256(w, scales, x, n) * scale_2;
#endif
    (void)tier;
    return nvfp4_dot_from(w, scales, x, 0, n) * scale_2;
}

float ft_fp8_block_dot_row(const uint8_t *w_row, const float *scale_inv_row, const float *x,
                           size_t K, size_t bk, int tier) {
#ifdef FT_FP_X86
    if (tier >= FT_FP_AVX512) return fp8_block_dot_512(w_row, scale_inv_row, x, K, bk);
    if (tier == FT_FP_AVX2) return fp8_block_dot_256(w_row, scale_inv_row, x, K, bk);
#endif
    (void)tier;
    return fp8_block_dot_scalar(w_row, scale_inv_row, x, K, bk);
}

float ft_fp8_dot(const uint8_t *w, float scale, const float *x, size_t n, int tier) {
#ifdef FT_FP_X86
    if (tier >= FT_FP_AVX512) return fp8_dot_512(w, x, n) * scale;
    if (tier == FT_FP_AVX2) return fp8_sum_256(w, x, 0, n) * scale;
#endif
    (void)tier;
    return fp8_sum(w, x, 0, n) * scale;
}

/* ---- FP8_B128 rows ---- */

size_t ft_fp8_b128_row_bytes(size_t K) {
    return 4 * ((K + FT_FP8_BLOCK - 1) / FT_FP8_BLOCK) + ((K + 3) & ~(size_t)3);
}

void ft_fp8_b128_pack(uint8_t *dst, const uint8_t *w, const float *scale_inv, size_t N, size_t K) {
    size_t nb = (K + FT_FP8_BLOCK - 1) / FT_FP8_BLOCK, rb = ft_fp8_b128_row_bytes(K);
    for (size_t r = 0; r < N; r++) {
        uint8_t *o = dst + r * rb;
        memcpy(o, scale_inv + (r / FT_FP8_BLOCK) * nb, nb * 4);
        memcpy(o + nb * 4, w + r * K, K);
        memset(o + nb * 4 + K, 0, rb - nb * 4 - K);
    }
}

void ft_fp8_b128_dequant_row(const void *row, size_t K, float *dst) {
    size_t nb = (K + FT_FP8_BLOCK - 1) / FT_FP8_BLOCK;
    ft_fp8_block_dequant_row((const uint8_t *)row + nb * 4, (const float *)row, K, dst);
}

float ft_fp8_b128_dot(const void *row, const float *x, size_t K, int tier) {
    size_t nb = (K + FT_FP8_BLOCK - 1) / FT_FP8_BLOCK;
    return ft_fp8_block_dot_row((const uint8_t *)row + nb * 4, (const float *)row, x, K,
                                FT_FP8_BLOCK, tier);
}

void ft_fp8_b128_dot_tokens(const void *row, const float *x, size_t ldx, int T, size_t K, float *y,
                            size_t ldy, int tier) {
    size_t nb = (K + FT_FP8_BLOCK - 1) / FT_FP8_BLOCK;
    float out[8];
    for (int t0 = 0; t0 < T;) {
        int n = T - t0 >= 8 ? 8 : T - t0 >= 4 ? 4 : 1;
#ifdef FT_FP_X86
        if (n > 1 && tier >= FT_FP_AVX2) {
            if (tier >= FT_FP_AVX512)
                fp8_b128_dot_tokens_512(n, (const uint8_t *)row + nb * 4, (const float *)row,
                                        x + (size_t)t0 * ldx, ldx, K, out);
            else
                fp8_b128_dot_tokens_256(n, (const uint8_t *)row + nb * 4, (const float *)row,
                                        x + (size_t)t0 * ldx, ldx, K, out);
            for (int t = 0; t < n; t++)
                y[(size_t)(t0 + t) * ldy] = out[t];
            t0 += n;
            continue;
        }
#endif
        y[(size_t)t0 * ldy] = ft_fp8_b128_dot(row, x + (size_t)t0 * ldx, K, tier);
        t0++;
    }
}

/* ---- NVFP4 rows ---- */

size_t ft_nvfp4_r_row_bytes(size_t K) {
    return (4 + (K + 15) / 16 + (K + 1) / 2 + 3) & ~(size_t)3;
}

void ft_nvfp4_r_pack(uint8_t *dst, const uint8_t *w, const uint8_t *scales, float scale_2, size_t N,
                     size_t K) {
    size_t ns = (K + 15) / 16, nw = (K + 1) / 2, rb = ft_nvfp4_r_row_bytes(K);
    for (size_t r = 0; r < N; r++) {
        uint8_t *o = dst + r * rb;
        memcpy(o, &scale_2, 4);
        memcpy(o + 4, scales + r * ns, ns);
        memcpy(o + 4 + ns, w + r * nw, nw);
        memset(o + 4 + ns + nw, 0, rb - 4 - ns - nw);
    }
}

void ft_nvfp4_r_dequant_row(const void *row, size_t K, float *dst) {
    const uint8_t *p = row;
    float s2;
    memcpy(&s2, p, 4);
    ft_nvfp4_dequant_row(p + 4 + (K + 15) / 16, p + 4, s2, K, dst);
}

float ft_nvfp4_r_dot(const void *row, const float *x, size_t K, int tier) {
    const uint8_t *p = row;
    float s2;
    memcpy(&s2, p, 4);
    return ft_nvfp4_dot(p + 4 + (K + 15) / 16, p + 4, s2, x, K, tier);
}

void ft_nvfp4_r_dot_tokens(const void *row, const float *x, size_t ldx, int T, size_t K, float *y,
                           size_t ldy, int tier) {
    const uint8_t *p = row;
    float s2, out[8];
    memcpy(&s2, p, 4);
    for (int t0 = 0; t0 < T;) {
        int n = T - t0 >= 8 ? 8 : T - t0 >= 4 ? 4 : 1;
#ifdef FT_FP_X86
        if (n > 1 && tier >= FT_FP_AVX2) {
            if (tier >= FT_FP_AVX512)
                nvfp4_dot_tokens_512(n, p + 4 + (K + 15) / 16, p + 4, x + (size_t)t0 * ldx, ldx, K,
                                     out);
            else
                nvfp4_dot_tokens_256(n, p + 4 + (K + 15) / 16, p + 4, x + (size_t)t0 * ldx, ldx, K,
                                     out);
            for (int t = 0; t < n; t++)
                y[(size_t)(t0 + t) * ldy] = out[t] * s2;
            t0 += n;
            continue;
        }
#endif
        y[(size_t)t0 * ldy] = ft_nvfp4_r_dot(row, x + (size_t)t0 * ldx, K, tier);
        t0++;
    }
}
