/* fp_formats.c — the quantised expert formats' CPU reference codecs (see fp_formats.h):
 * minifloat decode/encode, MXFP4 / NVFP4 / FP8 row dequantisation and dot products, with a
 * scalar path (the reference) and AVX2 / AVX-512 paths selected by the caller's tier.
 * Called by the bank loader, the CPU expert executor and tests. Pure: any thread. */
#include "format/fp_formats.h"

#include <math.h>
#include <string.h>

#define FT_FP_MIN_(a, b) ((a) < (b) ? (a) : (b))

/* ---- scalar codes ---- */

/* A minifloat with `mbits` mantissa bits and exponent bias `bias`, magnitude bits `mag`
 * (exponent field above the mantissa), finite code: exact in f32 (ldexpf of a small integer). */
static float minifloat_mag(unsigned mag, int mbits, int bias) {
    unsigned e = mag >> mbits, m = mag & ((1u << mbits) - 1);
    if (e == 0) return ldexpf((float)m, 1 - bias - mbits); /* subnormal: m * 2^(1-bias-mbits) */
    return ldexpf((float)((1u << mbits) | m), (int)e - bias - mbits);
}

float ft_e4m3_to_f32(uint8_t c) {
    unsigned mag = c & 0x7fu;
    float v = mag == 0x7fu ? NAN : minifloat_mag(mag, 3, 7);
    return (c & 0x80u) ? -v : v;
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

/* ---- dot products, scalar reference: per block, sum element * x in f32, then scale ---- */

static float mxfp4_dot_scalar(const uint8_t *blocks, const uint8_t *scales, const float *x,
                              size_t n) {
    float acc = 0.0f;
    for (size_t b = 0; b * 32 < n; b++) {
        size_t end = FT_FP_MIN_(n, b * 32 + 32);
        float s = 0.0f;
        for (size_t i = b * 32; i < end; i++) s += ft_e2m1_to_f32(nibble(blocks, i)) * x[i];
        acc += s * ft_e8m0_to_f32(scales[b]);
    }
    return acc;
}

static float nvfp4_dot_scalar(const uint8_t *w, const uint8_t *scales, float scale_2,
                              const float *x, size_t n) {
    float acc = 0.0f;
    for (size_t b = 0; b * 16 < n; b++) {
        size_t end = FT_FP_MIN_(n, b * 16 + 16);
        float s = 0.0f;
        for (size_t i = b * 16; i < end; i++) s += ft_e2m1_to_f32(nibble(w, i)) * x[i];
        acc += s * ft_e4m3_to_f32(scales[b]);
    }
    return acc * scale_2;
}

static float fp8_block_dot_scalar(const uint8_t *w, const float *scale_inv_row, const float *x,
                                  size_t K, size_t bk) {
    float acc = 0.0f;
    for (size_t b = 0; b * bk < K; b++) {
        size_t end = FT_FP_MIN_(K, b * bk + bk);
        float s = 0.0f;
        for (size_t i = b * bk; i < end; i++) s += ft_e4m3_to_f32(w[i]) * x[i];
        acc += s * scale_inv_row[b];
    }
    return acc;
}

static float fp8_dot_scalar(const uint8_t *w, float scale, const float *x, size_t n) {
    float acc = 0.0f;
    for (size_t i = 0; i < n; i++) acc += ft_e4m3_to_f32(w[i]) * x[i];
    return acc * scale;
}

/* ---- dispatch ---- */

float ft_mxfp4_dot(const uint8_t *blocks, const uint8_t *scales, const float *x, size_t n,
                   int tier) {
    (void)tier;
    return mxfp4_dot_scalar(blocks, scales, x, n);
}

float ft_nvfp4_dot(const uint8_t *w, const uint8_t *scales, float scale_2, const float *x,
                   size_t n, int tier) {
    (void)tier;
    return nvfp4_dot_scalar(w, scales, scale_2, x, n);
}

float ft_fp8_block_dot_row(const uint8_t *w_row, const float *scale_inv_row, const float *x,
                           size_t K, size_t bk, int tier) {
    (void)tier;
    return fp8_block_dot_scalar(w_row, scale_inv_row, x, K, bk);
}

float ft_fp8_dot(const uint8_t *w, float scale, const float *x, size_t n, int tier) {
    (void)tier;
    return fp8_dot_scalar(w, scale, x, n);
}
