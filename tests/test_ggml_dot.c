/* test_ggml_dot.c — the GGML block kernels of every ISA tier this CPU has (scalar reference,
 * AVX2, AVX-512) on random valid blocks of every computable type:
 *   - ft_ggml_dequant_row bit-identical to the scalar reference (NaN/inf/subnormal scales too);
 *   - ft_ggml_dot_row / ft_ggml_dot_rows against dequantise-then-sum in double, for awkward n
 *     and T in {1, 2, 3, 8, 17}, within the fp32 summation bound stated below; a token's result
 *     bit-identical whatever T and the rows around it;
 *   - the 8-bit-activation path (Q4_K, Q5_K, Q6_K) against the exact dot with the quantised x
 *     and within the quantisation bound of the dot with x;
 *   - the 8-bit-per-32 path (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, NVFP4 rows): quantised bytes
 *     identical in every tier; every tier (AVX-512 with and without VNNI) against the scalar
 *     reference to f32 rounding; the reference against the exact dot of the dequantised
 *     weights with the dequantised x32 activations; and the error against the fp32 x within
 *     sum_blocks (d_b / 2) sum_i |w_i| (d_b the block's activation scale).
 * Single-threaded. */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/rng.h"
#include "format/fp_formats.h"
#include "backend/cpu/ggml_dot.h"
#include "format/ggml_quant.h"
#include "format/quant.h"
#include "test.h"

static const int k_types[] = {FT_GGML_Q4_K, FT_GGML_Q6_K, FT_GGML_Q8_0, FT_GGML_Q5_K,
                              FT_GGML_Q4_0, FT_GGML_Q5_0, FT_GGML_MXFP4, FT_GGML_F32,
                              FT_GGML_F16,  FT_GGML_BF16};
#define N_TYPES (int)(sizeof k_types / sizeof k_types[0])

static uint64_t g_rng = 0x243f6a8885a308d3ull;

/* A random finite f16 spanning 2^-14 .. 2^1 times `scale`, either sign. */
static uint16_t rand_f16(float scale) {
    const double u = ft_rng_unit(&g_rng);
    const float v = (float)(u - 0.5) * scale * (float)(1 << (ft_rng_next(&g_rng) % 16)) / 16384.0f;
    return ft_f32_to_f16(v);
}

/* n_bytes of random blocks of `type`; the scales finite unless `edge` (then every byte is
 * random: infinite, NaN and subnormal scales appear). Plain types get finite values. */
static uint8_t *rand_blocks(int type, size_t n_bytes, int edge) {
    uint8_t *p = malloc(n_bytes + 1);
    for (size_t i = 0; i < n_bytes; i++)
        p[i] = (uint8_t)(ft_rng_next(&g_rng) >> 24);
    if (edge) return p;
    const size_t bs = ft_ggml_type_size(type);
    for (size_t o = 0; o + bs <= n_bytes; o += bs) {
        uint8_t *b = p + o;
        uint16_t h[2] = {rand_f16(1.0f), rand_f16(0.5f)};
        switch (type) {
        case FT_GGML_F32: {
            const float f = (float)(ft_rng_unit(&g_rng) - 0.5);
            memcpy(b, &f, 4);
            break;
        }
        case FT_GGML_F16: memcpy(b, h, 2); break;
        case FT_GGML_BF16: {
            const uint16_t v = ft_f32_to_bf16((float)(ft_rng_unit(&g_rng) - 0.5));
            memcpy(b, &v, 2);
            break;
        }
        case FT_GGML_MXFP4: b[0] = (uint8_t)(100 + b[0] % 40); break;
        case FT_GGML_Q6_K: memcpy(b + 208, h, 2); break;
        case FT_GGML_Q4_K:
        case FT_GGML_Q5_K:
        case FT_GGML_Q4_1:
        case FT_GGML_Q5_1: memcpy(b, h, 4); break; /* d and dmin (or m) */
        default: memcpy(b, h, 2); break;           /* Q8_0, Q4_0, Q5_0 */
        }
    }
    return p;
}

static float *rand_x(size_t n) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(ft_rng_unit(&g_rng) * 2.0 - 1.0);
    return x;
}

/* The distinct kernel tiers this machine runs (avx512-bf16 runs the avx512 kernels). */
static int tiers(enum ft_cpu_isa *out) {
    int n = 0;
    for (int t = FT_ISA_SCALAR; t <= FT_ISA_AVX512; t++)
        if (ft_cpu_set_isa((enum ft_cpu_isa)t) == (enum ft_cpu_isa)t) out[n++] = (enum ft_cpu_isa)t;
    return n;
}

static int same_float(float a, float b) {
    return isnan(a) ? isnan(b) : memcmp(&a, &b, 4) == 0;
}

/* Every tier's dequantisation equals the scalar reference bit for bit, including blocks whose
 * scales are infinite, NaN or subnormal (a NaN must stay a NaN). */
TEST(dequant_every_tier_bit_exact) {
    enum ft_cpu_isa ts[3];
    const int nt = tiers(ts);
    const int64_t n = 4864;
    for (int k = 0; k < N_TYPES; k++)
        for (int edge = 0; edge < 2; edge++) {
            const int type = k_types[k];
            uint8_t *w = rand_blocks(type, ft_ggml_row_bytes(type, n), edge);
            float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
            ft_cpu_set_isa(FT_ISA_SCALAR);
            EXPECT_OK(ft_ggml_dequant_row(type, w, ref, n));
            for (int a = 1; a < nt; a++) {
                ft_cpu_set_isa(ts[a]);
                EXPECT_OK(ft_cpu_ggml_dequant_row(type, w, got, n));
                int64_t bad = 0;
                for (int64_t i = 0; i < n; i++)
                    bad += !same_float(got[i], ref[i]);
                CHECK_(bad == 0, "%s %s%s: %lld of %lld values differ", ft_cpu_isa_name(ts[a]),
                       ft_ggml_type_name(type), edge ? " (edge)" : "", (long long)bad,
                       (long long)n);
            }
            free(w), free(ref), free(got);
        }
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
}

/* Bound on |dot - exact| for fp32 accumulation (recursive summation, first order): each lane
 * sums its products in order, one rounding per product with FMA (AVX-512: 16 lanes, n / 16
 * each; AVX2: 8 lanes, n / 8), two without (scalar: 16 lanes, 2 n / 16), then the 16 lanes are
 * added pairwise (4 roundings): |err| <= (n / 8 + 5) u sum |w_i x_i|, u = 2^-24, every tier.
 * The exact dequantised values are the weights (dequant_every_tier_bit_exact). */
static double dot_bound(int64_t n) {
    return ((double)n / 8.0 + 5.0) * (FLT_EPSILON / 2) * 1.0001;
}

/* dot of w (decoded exactly, in double) with x: the exact value and sum |w_i x_i|. */
static void exact_dot(const float *wd, const float *x, int64_t n, double *dot, double *mag) {
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)wd[i] * x[i];
        m += fabs((double)wd[i] * x[i]);
    }
    *dot = s, *mag = m;
}

/* One type, tier and n: R rows, T tokens (strides wider than the data, sentinels outside). */
static double check_dot(int type, int64_t n, int R, int T) {
    const size_t rb = ft_ggml_row_bytes(type, n);
    const int ldx = (int)n + 5, ldy = R + 3;
    uint8_t *w = rand_blocks(type, rb * (size_t)R, 0);
    float *x = rand_x((size_t)T * ldx), *wd = malloc((size_t)n * sizeof *wd);
    float *y = malloc((size_t)T * ldy * sizeof *y);
    for (int i = 0; i < T * ldy; i++)
        y[i] = 12345.0f;
    ft_ggml_dot_rows(type, w, rb, R, x, ldx, T, y, ldy);
    double worst = 0;
    int untouched = 1, same = 1;
    for (int r = 0; r < R; r++) {
        EXPECT_OK(ft_ggml_dequant_row(type, w + r * rb, wd, n));
        for (int t = 0; t < T; t++) {
            double ref, mag;
            exact_dot(wd, x + (size_t)t * ldx, n, &ref, &mag);
            const double e = fabs(y[(size_t)t * ldy + r] - ref) / (mag * dot_bound(n) + 1e-30);
            worst = e > worst ? e : worst;
            /* the same token alone, and the row alone, give the same bits */
            const float one = ft_ggml_dot_row(type, w + r * rb, x + (size_t)t * ldx, n);
            same &= same_float(one, y[(size_t)t * ldy + r]);
        }
        for (int t = 0; t < T; t++)
            for (int c = R; c < ldy; c++)
                untouched &= y[(size_t)t * ldy + c] == 12345.0f;
    }
    CHECK_(worst <= 1.0 && untouched && same,
           "%s %s n=%lld R=%d T=%d: error %.3g x bound, untouched %d, T-independent %d",
           ft_cpu_isa_name(ft_cpu_isa()), ft_ggml_type_name(type), (long long)n, R, T, worst,
           untouched, same);
    free(w), free(x), free(wd), free(y);
    return worst;
}

TEST(dot_rows_every_tier_type_n_T) {
    static const int64_t ns[] = {256, 512, 2816, 4864};
    static const int Ts[] = {1, 2, 3, 8, 17};
    enum ft_cpu_isa ts[3];
    const int nt = tiers(ts);
    for (int a = 0; a < nt; a++) {
        ft_cpu_set_isa(ts[a]);
        double worst = 0;
        for (int k = 0; k < N_TYPES; k++)
            for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
                for (size_t j = 0; j < sizeof Ts / sizeof *Ts; j++) {
                    /* 1 row, a full tile of 4, and 4 + 3 (a tail tile) */
                    const int R = j % 3 == 0 ? 7 : j % 3 == 1 ? 4 : 1;
                    const double e = check_dot(k_types[k], ns[i], R, Ts[j]);
                    worst = e > worst ? e : worst;
                }
        fprintf(stderr, "  %s: worst error %.3f of the bound\n", ft_cpu_isa_name(ts[a]), worst);
    }
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
}

/* 32-element blocks and plain types at lengths that are not multiples of 256 (or of 16), and
 * more than 64 tokens (two passes over the rows). */
TEST(dot_rows_short_rows_and_many_tokens) {
    enum ft_cpu_isa ts[3];
    const int nt = tiers(ts);
    for (int a = 0; a < nt; a++) {
        ft_cpu_set_isa(ts[a]);
        for (int k = 0; k < N_TYPES; k++) {
            const int type = k_types[k], blck = ft_ggml_block_size(type);
            if (blck == 256) {
                check_dot(type, 1280, 5, 70);
                continue;
            }
            for (int64_t n = blck; n <= 1100; n += blck == 1 ? 37 : 3 * blck)
                check_dot(type, n, 5, 3);
            check_dot(type, blck == 1 ? 1001 : 4128, 6, 70);
        }
    }
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
}

/* ---------------------------------------------------------------- 8-bit x --- */

/* x quantised as the header specifies: per 256, d = max|x| / 127, c = round(x * 127 / max). */
static void quant_ref(const float *x, int64_t n, float *xq, float *half_step) {
    for (int64_t i = 0; i < n; i += 256) {
        float amax = 0;
        for (int j = 0; j < 256; j++)
            amax = fmaxf(amax, fabsf(x[i + j]));
        const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        for (int j = 0; j < 256; j++) {
            xq[i + j] = d * (float)lrintf(x[i + j] * id);
            half_step[i + j] = d / 2;
        }
    }
}

/* The bytes of a block that hold codes (zeroing them leaves the offset: -dmin*m or -32 d sc). */
static void zero_codes(int type, uint8_t *b) {
    if (type == FT_GGML_Q6_K)
        memset(b, 0, 192);
    else
        memset(b + 16, 0, type == FT_GGML_Q4_K ? 128 : 160);
}

static void check_x8(int type, int64_t n, int R, int T, double *worst_q, double *typ) {
    const size_t rb = ft_ggml_row_bytes(type, n), xb = ft_ggml_x8_bytes(n);
    uint8_t *w = rand_blocks(type, rb * (size_t)R, 0), *wz = malloc(rb);
    float *x = rand_x((size_t)T * n), *y = malloc((size_t)T * R * sizeof *y);
    float *wd = malloc(n * sizeof *wd), *zd = malloc(n * sizeof *zd);
    float *xh = malloc(n * sizeof *xh), *hs = malloc(n * sizeof *hs);
    void *xq = malloc(xb * T);
    for (int64_t i = 0; i < (int64_t)T * n; i++) /* blocks of very different scales */
        x[i] *= (float)(1 << ((i / 256) % 8));
    ft_ggml_quant_x8(type, x, (int)n, n, T, xq);
    ft_ggml_dot_rows_x8(type, w, rb, R, xq, T, y, R);
    int ok = 1;
    for (int r = 0; r < R; r++) {
        EXPECT_OK(ft_ggml_dequant_row(type, w + r * rb, wd, n));
        memcpy(wz, w + r * rb, rb);
        for (size_t o = 0; o < rb; o += ft_ggml_type_size(type))
            zero_codes(type, wz + o);
        EXPECT_OK(ft_ggml_dequant_row(type, wz, zd, n));
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * n;
            quant_ref(xt, n, xh, hs);
            /* vs the quantised x: the integer part is exact; the f32 part rounds each block's
             * two terms (each at most sum (|w| + 2|offset|) |xhat|) and their running sum */
            double ref = 0, mag = 0, exact = 0, qbound = 0, wmag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)wd[i] * xh[i];
                mag += (fabs(wd[i]) + 2 * fabs(zd[i])) * fabs(xh[i]);
                exact += (double)wd[i] * xt[i];
                qbound += fabs(wd[i]) * hs[i];
                wmag += fabs((double)wd[i] * xt[i]);
            }
            const double got = y[(size_t)t * R + r];
            const double fbound = ((double)n / 256 + 12) * (FLT_EPSILON / 2) * mag;
            const double e = fabs(got - ref) / (fbound + 1e-30);
            ok &= e <= 1.0 && fabs(got - exact) <= qbound * 1.0001 + fbound;
            *worst_q = fmax(*worst_q, e);
            *typ += fabs(got - exact) / wmag;
        }
    }
    /* one token alone gives the same bits */
    float one;
    ft_ggml_dot_rows_x8(type, w, rb, 1, (const uint8_t *)xq + (T - 1) * xb, 1, &one, 1);
    ok &= same_float(one, y[(size_t)(T - 1) * R]);
    CHECK_(ok, "%s x8 %s n=%lld R=%d T=%d", ft_cpu_isa_name(ft_cpu_isa()), ft_ggml_type_name(type),
           (long long)n, R, T);
    free(w), free(wz), free(x), free(y), free(wd), free(zd), free(xh), free(hs), free(xq);
}

/* Every tier quantises x to the same bytes (scale, codes, sums). */
TEST(quant_x8_every_tier_same_bytes) {
    enum ft_cpu_isa ts[3];
    const int nt = tiers(ts);
    const int64_t n = 2816;
    const int T = 3;
    const size_t xb = ft_ggml_x8_bytes(n) * T;
    float *x = rand_x((size_t)T * (n + 7));
    x[5] = 0.0f, x[300] = -3.5f; /* a block whose max is negative */
    for (int i = 512; i < 768; i++) x[i] = 0.0f; /* an all-zero block */
    for (int i = 768; i < 1024; i++) x[i] = 0.0f;
    x[800] = 1e-39f; /* max below 1e-30: codes 0 in every tier (127 / max would be inf) */
    uint8_t *ref = malloc(xb), *got = malloc(xb), *q6 = malloc(xb);
    static const int types[2] = {FT_GGML_Q6_K, FT_GGML_Q4_K}; /* element order, nibble order */
    for (int ty = 0; ty < 2; ty++) {
        ft_cpu_set_isa(FT_ISA_SCALAR);
        ft_ggml_quant_x8(types[ty], x, (int)n + 7, n, T, ref);
        for (int a = 1; a < nt; a++) {
            ft_cpu_set_isa(ts[a]);
            memset(got, 0xa5, xb);
            ft_ggml_quant_x8(types[ty], x, (int)n + 7, n, T, got);
            CHECK_(memcmp(got, ref, xb) == 0, "%s quantises x for %s like the scalar reference",
                   ft_cpu_isa_name(ts[a]), ft_ggml_type_name(types[ty]));
        }
        if (ty == 0) {
            memcpy(q6, ref, xb);
            continue;
        }
        /* Q4_K's blocks are Q6_K's with chunks [32..63] and [64..95] of each 128 swapped; the
         * scale and the per-16 sums (element order) are the same bytes */
        const size_t bb = ft_ggml_x8_bytes(256);
        int same = 1;
        for (size_t b = 0; b < xb / bb; b++) {
            const uint8_t *k4 = ref + b * bb, *e = q6 + b * bb;
            same &= !memcmp(k4, e, 4) && !memcmp(k4 + 4 + 256, e + 4 + 256, bb - 4 - 256);
            for (int j = 0; j < 256; j++) {
                int c = (j >> 5) & 3, at = (j & 128) | (c == 1 ? 2 : c == 2 ? 1 : c) << 5 | (j & 31);
                same &= k4[4 + at] == e[4 + j];
            }
        }
        EXPECT(same);
    }
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
    free(x), free(ref), free(got), free(q6);
}

TEST(dot_rows_x8_every_tier) {
    enum ft_cpu_isa ts[3];
    const int nt = tiers(ts);
    EXPECT(ft_ggml_x8_supported(FT_GGML_Q4_K) && !ft_ggml_x8_supported(FT_GGML_Q8_0));
    EXPECT_EQ(ft_ggml_x8_bytes(512), 2 * (4 + 256 + 32));
    EXPECT_EQ(ft_ggml_x8_bytes(100), 0);
    for (int a = 0; a < nt; a++) {
        ft_cpu_set_isa(ts[a]);
        static const int types[] = {FT_GGML_Q4_K, FT_GGML_Q5_K, FT_GGML_Q6_K};
        for (int k = 0; k < 3; k++) {
            double worst = 0, typ = 0;
            int count = 0;
            static const int64_t ns[] = {256, 2816, 4864};
            static const int Ts[] = {1, 3, 17};
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) {
                    check_x8(types[k], ns[i], 5, Ts[j], &worst, &typ);
                    count += 5 * Ts[j];
                }
            fprintf(stderr,
                    "  %s %s: f32 part %.3f of its bound; vs fp32 x: mean %.2e of sum|w x|\n",
                    ft_cpu_isa_name(ts[a]), ft_ggml_type_name(types[k]), worst, typ / count);
        }
    }
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
}

/* ---------------------------------------------------------- 8-bit x per 32 --- */

#define X32_NVFP4 (-1) /* NVFP4 rows in the tables below, next to the GGML types */

static const int k_x32_types[] = {FT_GGML_Q4_0, FT_GGML_Q4_1, FT_GGML_Q5_0, FT_GGML_Q5_1,
                                  FT_GGML_Q8_0, FT_GGML_MXFP4, X32_NVFP4};
#define N_X32 (int)(sizeof k_x32_types / sizeof k_x32_types[0])

static const char *x32_name(int type) {
    return type == X32_NVFP4 ? "NVFP4" : ft_ggml_type_name(type);
}

static size_t x32_row_bytes(int type, int64_t n) {
    return type == X32_NVFP4 ? ft_nvfp4_r_row_bytes((size_t)n) : ft_ggml_row_bytes(type, n);
}

/* R random rows of n elements with valid scales (NVFP4: scale_2 and finite e4m3 scales). */
static uint8_t *x32_rows(int type, int64_t n, int R) {
    const size_t rb = x32_row_bytes(type, n);
    if (type != X32_NVFP4) return rand_blocks(type, rb * (size_t)R, 0);
    uint8_t *p = malloc(rb * (size_t)R);
    for (size_t i = 0; i < rb * (size_t)R; i++)
        p[i] = (uint8_t)(ft_rng_next(&g_rng) >> 24);
    for (int r = 0; r < R; r++) {
        uint8_t *row = p + (size_t)r * rb;
        const float s2 = (float)(0.001 + 0.01 * ft_rng_unit(&g_rng));
        memcpy(row, &s2, 4);
        for (int64_t g = 0; g < n / 16; g++)
            if ((row[4 + g] & 0x7f) == 0x7f) row[4 + g] = 0x38; /* no NaN scales */
    }
    return p;
}

static void x32_dequant(int type, const uint8_t *row, int64_t n, float *dst) {
    if (type == X32_NVFP4)
        ft_nvfp4_r_dequant_row(row, (size_t)n, dst);
    else
        EXPECT_OK(ft_ggml_dequant_row(type, row, dst, n));
}

/* |min| of the block holding element i (Q4_1 / Q5_1; else 0). */
static double x32_min(int type, const uint8_t *row, int64_t i) {
    if (type != FT_GGML_Q4_1 && type != FT_GGML_Q5_1) return 0;
    const uint8_t *m = row + (i / 32) * ft_ggml_type_size(type) + 2;
    return fabs(ft_f16_to_f32((uint16_t)(m[0] | m[1] << 8)));
}

static void x32_dot(int type, const uint8_t *w, size_t rb, int R, const void *xq, int T, int64_t n,
                    float *y) {
    if (type == X32_NVFP4)
        ft_nvfp4_r_dot_rows_x32(w, rb, R, xq, T, (size_t)n, y, R);
    else
        ft_ggml_dot_rows_x32(type, w, rb, R, xq, T, y, R);
}

/* The layout ggml_quant.h documents: token t's codes (back in element order, into q[n]),
 * scales and half sums. nv: ft_nvfp4_quant_x32's order, where slot s of a block (group s / 4,
 * byte s % 4) holds element 8 (s / 4) + 2 (s % 4) for s < 16, and 8 ((s - 16) / 4) +
 * 2 (s % 4) + 1 above (ggml_quant.h's words, written out independently of the library). */
static void x32_token(const void *xq, int64_t n, int t, int8_t *q, const float **d,
                      const int16_t **h, int nv) {
    const uint8_t *p = (const uint8_t *)xq + (size_t)t * ft_ggml_x32_bytes(n);
    const int64_t nb = n / 32;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t c = b / 16, cb = nb - 16 * c < 16 ? nb - 16 * c : 16;
        for (int s = 0; s < 32; s++) {
            const int e = !nv ? s : s < 16 ? 8 * (s / 4) + 2 * (s % 4) : 8 * ((s - 16) / 4) + 2 * (s % 4) + 1;
            q[32 * b + e] = (int8_t)p[512 * c + 4 * cb * (s / 4) + 4 * (b % 16) + s % 4];
        }
    }
    *d = (const float *)(p + n), *h = (const int16_t *)(p + n + n / 8);
}

/* Worst errors over all checks, as fractions of their bounds. */
struct x32_worst {
    double tier, ref, fp32, typ;
    int count;
};

static void check_x32(int type, int64_t n, int R, int T, struct x32_worst *wst) {
    const size_t rb = x32_row_bytes(type, n), xb = ft_ggml_x32_bytes(n);
    const int64_t nb = n / 32;
    uint8_t *w = x32_rows(type, n, R);
    float *x = rand_x((size_t)T * n), *y = malloc((size_t)T * R * sizeof *y);
    float *yr = malloc((size_t)T * R * sizeof *yr), *wd = malloc(n * sizeof *wd);
    void *xq = malloc(xb * T);
    int8_t *q = malloc(n);
    for (int64_t i = 0; i < (int64_t)T * n; i++) /* blocks of very different scales */
        x[i] *= (float)(1 << ((i / 32) % 8));
    const enum ft_cpu_isa isa = ft_cpu_isa();
    if (type == X32_NVFP4) ft_nvfp4_quant_x32(x, (int)n, n, T, xq);
    else ft_ggml_quant_x32(x, (int)n, n, T, xq);
    x32_dot(type, w, rb, R, xq, T, n, y);
    ft_cpu_set_isa(FT_ISA_SCALAR);
    x32_dot(type, w, rb, R, xq, T, n, yr);
    ft_cpu_set_isa(isa);
    const double u = FLT_EPSILON / 2;
    int ok = 1;
    for (int r = 0; r < R; r++) {
        const uint8_t *row = w + r * rb;
        x32_dequant(type, row, n, wd);
        for (int t = 0; t < T; t++) {
            const float *d;
            const int16_t *h;
            x32_token(xq, n, t, q, &d, &h, type == X32_NVFP4);
            const float *xt = x + (size_t)t * n;
            double exact_q = 0, mag = 0, exact = 0, qbound = 0, wmag = 0;
            for (int64_t i = 0; i < n; i++) {
                const double xh = (double)d[i / 32] * q[i];
                exact_q += (double)wd[i] * xh;
                mag += (fabs(wd[i]) + 2 * x32_min(type, row, i)) * fabs(xh);
                exact += (double)wd[i] * xt[i];
                qbound += fabs(wd[i]) * d[i / 32] / 2;
                wmag += fabs((double)wd[i] * xt[i]);
            }
            const double got = y[(size_t)t * R + r], ref = yr[(size_t)t * R + r];
            /* (a) the tier against the scalar reference: both round each block's products
             * and their running sums (first order, (nb + 4) u of sum |terms| each) */
            const double ea = fabs(got - ref) / ((2 * (double)nb + 8) * u * mag + 1e-30);
            /* (b) the reference against the exact dot with xhat: the same, plus the
             * dequantiser's own rounding of each weight (Q4_1 / Q5_1: two; NVFP4: one) */
            const double bb = ((double)nb + 8) * u * mag;
            const double eb = fabs(ref - exact_q) / (bb + 1e-30);
            /* (c) against the fp32 x: the quantisation bound */
            const double ec = fabs(got - exact) / (qbound * 1.0001 + 3 * bb + 1e-30);
            ok &= ea <= 1.0 && eb <= 1.0 && ec <= 1.0;
            wst->tier = fmax(wst->tier, ea), wst->ref = fmax(wst->ref, eb);
            wst->fp32 = fmax(wst->fp32, ec);
            wst->typ += fabs(got - exact) / (wmag + 1e-30);
            wst->count++;
        }
    }
    /* the last token alone, and row 0 alone, give the same bits; for one token every row
     * alone (the AVX-512 tiers take one token's rows two at a time where their last chunks
     * are at most half full, and must give each row's bits) */
    float one;
    x32_dot(type, w, rb, 1, (const uint8_t *)xq + (T - 1) * xb, 1, n, &one);
    ok &= same_float(one, y[(size_t)(T - 1) * R]);
    for (int r = 1; T == 1 && r < R; r++) {
        x32_dot(type, w + r * rb, rb, 1, xq, 1, n, &one);
        ok &= same_float(one, y[r]);
    }
    CHECK_(ok, "%s%s%s x32 %s n=%lld R=%d T=%d", ft_cpu_isa_name(ft_cpu_isa()),
           ft_cpu_isa() >= FT_ISA_AVX512 && !ft_ggml_x32_vnni(-1) ? " (no VNNI)" : "",
           ft_cpu_isa() >= FT_ISA_AVX512 && !ft_ggml_x32_vbmi(-1) ? " (no VBMI)" : "",
           x32_name(type), (long long)n, R, T);
    free(w), free(x), free(y), free(yr), free(wd), free(xq), free(q);
}

/* Every tier quantises x to the same bytes, and they are the spec's: d = max|x| / 127,
 * c = round-to-even(x * (127 / max)) clamped to +-127, s = sum c. */
TEST(quant_x32_every_tier_same_bytes) {
    enum ft_cpu_isa ts[3];
    const int nt = tiers(ts);
    const int64_t n = 2880;
    const int T = 3, ldx = (int)n + 7;
    const size_t xb = ft_ggml_x32_bytes(n) * T;
    EXPECT_EQ(ft_ggml_x32_bytes(64), 80);
    EXPECT_EQ(ft_ggml_x32_bytes(48), 0);
    float *x = rand_x((size_t)T * ldx);
    x[5] = 0.0f, x[40] = -3.5f; /* a block whose max is negative */
    for (int i = 64; i < 96; i++)
        x[i] = 0.0f;                             /* an all-zero block */
    x[100] = 1.0f, x[101] = 0.5f * (1.0f / 127); /* a tie: x / d = 0.5 exactly, rounds to 0 */
    x[102] = 1.5f * (1.0f / 127);                /* 1.5 rounds to 2 */
    for (int i = 128; i < 160; i++)
        x[i] = (float)(i - 144) * 1e-3f; /* max 0.016, c in +-127 */
    for (int i = 192; i < 224; i++)
        x[i] = 0.0f;
    x[195] = 1e-39f, x[200] = -3e-38f; /* max below 1e-30: 127 / max would be inf, codes 0 */
    uint8_t *ref = malloc(xb), *got = malloc(xb);
    ft_cpu_set_isa(FT_ISA_SCALAR);
    ft_ggml_quant_x32(x, ldx, n, T, ref);
    int spec = 1;
    int8_t *q = malloc(n);
    for (int t = 0; t < T; t++) {
        const float *d;
        const int16_t *h;
        x32_token(ref, n, t, q, &d, &h, 0);
        for (int64_t b = 0; b < n / 32; b++) {
            const float *xt = x + (size_t)t * ldx + 32 * b;
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(xt[j]));
            const float id = amax > 1e-30f ? 127.0f / amax : 0.0f;
            int sum[2] = {0, 0};
            spec &= same_float(d[b], amax / 127.0f);
            for (int j = 0; j < 32; j++) {
                const long c = lrintf(xt[j] * id);
                spec &= q[32 * b + j] == (c > 127 ? 127 : c < -127 ? -127 : c);
                sum[j / 16] += q[32 * b + j];
            }
            spec &= h[2 * b] == sum[0] && h[2 * b + 1] == sum[1];
        }
    }
    EXPECT(spec);
    {
        const float *d;
        const int16_t *h;
        x32_token(ref, n, 0, q, &d, &h, 0);
        EXPECT(q[101] == 0 && q[102] == 2 && d[2] == 0.0f && h[4] == 0 && h[5] == 0);
        EXPECT(q[195] == 0 && q[200] == 0 && h[12] == 0 && h[13] == 0);
    }
    free(q);
    for (int a = 1; a < nt; a++) {
        ft_cpu_set_isa(ts[a]);
        memset(got, 0xa5, xb);
        ft_ggml_quant_x32(x, ldx, n, T, got);
        CHECK_(memcmp(got, ref, xb) == 0, "%s quantises x like the scalar reference",
               ft_cpu_isa_name(ts[a]));
    }
    /* NVFP4 order: the same codes, scales and sums, only moved within each block */
    for (int a = 0; a < nt; a++) {
        ft_cpu_set_isa(ts[a]);
        memset(got, 0xa5, xb);
        ft_nvfp4_quant_x32(x, ldx, n, T, got);
        int same = 1;
        int8_t *q1 = malloc(n), *q2 = malloc(n);
        for (int t = 0; t < T; t++) {
            const float *d1, *d2;
            const int16_t *h1, *h2;
            x32_token(ref, n, t, q1, &d1, &h1, 0);
            x32_token(got, n, t, q2, &d2, &h2, 1);
            same &= !memcmp(q1, q2, n) && !memcmp(d1, d2, (n / 32) * 4) && !memcmp(h1, h2, (n / 16) * 2);
        }
        CHECK_(same, "%s: ft_nvfp4_quant_x32 holds ft_ggml_quant_x32's codes in NVFP4 nibble order",
               ft_cpu_isa_name(ts[a]));
        free(q1), free(q2);
    }
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
    free(x), free(ref), free(got);
}

TEST(dot_rows_x32_every_tier) {
    enum ft_cpu_isa ts[3];
    const int nt = tiers(ts);
    EXPECT(ft_ggml_x32_supported(FT_GGML_Q4_0) && ft_ggml_x32_supported(FT_GGML_MXFP4));
    EXPECT(!ft_ggml_x32_supported(FT_GGML_Q4_K) && !ft_ggml_x32_supported(FT_GGML_F32));
    static const int64_t ns[] = {32, 64, 96, 608, 768, 2880, 4096}; /* 608, 768: 19, 24 blocks */
    static const int Ts[] = {1, 3, 8, 17};
    for (int a = 0; a < nt; a++)
        for (int mode = 0; mode < 6; mode++) { /* AVX-512 with and without VNNI; VBMI off,
                                                 * scales, scales and codes */
            const int vnni = mode & 1, vbmi = mode >> 1;
            if (ts[a] < FT_ISA_AVX512 && mode) continue; /* both only matter to AVX-512 */
            ft_cpu_set_isa(ts[a]);
            ft_ggml_x32_vnni(vnni || ts[a] < FT_ISA_AVX512);
            ft_ggml_x32_vbmi(vbmi);
            if (vnni && !ft_ggml_x32_vnni(-1)) continue; /* this CPU has none */
            if (vbmi && !ft_ggml_x32_vbmi(-1)) continue;
            for (int k = 0; k < N_X32; k++) {
                struct x32_worst wst = {0};
                for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
                    for (size_t j = 0; j < sizeof Ts / sizeof *Ts; j++)
                        for (int R = 2; R <= 5; R += 3) /* 5: T = 1's rows pair up but one */
                            if (R == (j % 2 ? 5 : 2) || Ts[j] == 1)
                                check_x32(k_x32_types[k], ns[i], R, Ts[j], &wst);
                fprintf(stderr,
                        "  %s%s%s x32 %-5s: vs scalar %.3f, ref vs exact %.3f, vs fp32 x %.3f of "
                        "the bounds; vs fp32 x: mean %.2e of sum|w x|\n",
                        ft_cpu_isa_name(ts[a]),
                        ts[a] >= FT_ISA_AVX512 ? (vnni ? "+vnni" : "-vnni") : "",
                        ts[a] >= FT_ISA_AVX512 ? (vbmi == 2 ? "+vbmi2" : vbmi ? "+vbmi" : "-vbmi") : "",
                        x32_name(k_x32_types[k]), wst.tier, wst.ref, wst.fp32, wst.typ / wst.count);
            }
        }
    ft_ggml_x32_vnni(1);
    ft_ggml_x32_vbmi(1);
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
}

/* The AVX-512 tier's VBMI paths (MXFP4: the scales by permutes, the codes' transpose; one
 * token's MXFP4 and NVFP4 rows by groups of four blocks) give the bits of the paths without
 * them: the same integer sums and the same scale terms in the same lanes. */
TEST(x32_vbmi_same_bits) {
    if (ft_cpu_isa() < FT_ISA_AVX512 || !ft_ggml_x32_vbmi(1) || !ft_ggml_x32_vnni(-1))
        SKIP("this CPU has no AVX-512 VBMI and VNNI, the kernels this test compares");
    static const int64_t ns[] = {512, 768, 2880, 4096, 8192, 8224}; /* whole chunks, tails <= 8
                                                                     * (pairs), > 8, past the
                                                                     * groups' 256 blocks */
    static const int Ts[] = {1, 3, 17};
    static const int types[] = {FT_GGML_MXFP4, X32_NVFP4};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            for (size_t j = 0; j < sizeof Ts / sizeof *Ts; j++) {
                const int ty = types[k];
                const int64_t n = ns[i];
                const int T = Ts[j], R = 7;
                uint8_t *w = x32_rows(ty, n, R);
                float *x = rand_x((size_t)T * n), *y[3];
                void *xq = malloc(ft_ggml_x32_bytes(n) * T);
                if (ty == X32_NVFP4) ft_nvfp4_quant_x32(x, (int)n, n, T, xq);
                else ft_ggml_quant_x32(x, (int)n, n, T, xq);
                for (int v = 0; v < 3; v++) {
                    y[v] = malloc((size_t)T * R * sizeof(float));
                    ft_ggml_x32_vbmi(v);
                    x32_dot(ty, w, x32_row_bytes(ty, n), R, xq, T, n, y[v]);
                }
                CHECK_(!memcmp(y[0], y[1], (size_t)T * R * 4) && !memcmp(y[0], y[2], (size_t)T * R * 4),
                       "%s n=%lld T=%d: the VBMI paths' bits differ", x32_name(ty), (long long)n, T);
                free(w), free(x), free(xq), free(y[0]), free(y[1]), free(y[2]);
            }
    ft_ggml_x32_vbmi(1);
}

TEST_MAIN("ggml_dot")
