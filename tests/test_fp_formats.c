/* test_fp_formats.c — src/format/fp_formats.c against the spec reference's vectors
 * (tools/fp_reference.py -> tests/data/fp/{codes,encode,rows}.safetensors): every code of E4M3, E5M2, E2M1, E8M0
 * and UE4M3 bit-exact; the encoders on every value, tie, near-tie, subnormal, overflow and NaN
 * case; MXFP4 / NVFP4 / FP8 (block and per-tensor) rows bit-exact; the dot products of every
 * code path this CPU runs within 1e-6 (relative to sum |w_i x_i|) of dequantise-then-dot. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/status.h"
#include "format/fp_formats.h"
#include "format/safetensors.h"
#include "test.h"

/* ---- helpers ---- */

static struct ft_st_file *open_vectors(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/fp/%s.safetensors", FT_TEST_DATA, name);
    struct ft_st_file *f = NULL;
    EXPECT_OK(ft_st_open(path, &f));
    return f;
}

/* The tensor `name` of dtype t with `count` elements (count 0: any), or NULL with a failure. */
static const struct ft_st_tensor *vec(struct ft_st_file *f, const char *name, enum ft_dtype t,
                                      size_t count) {
    const struct ft_st_tensor *x = f ? ft_st_find(f, name) : NULL;
    CHECK_(x != NULL, "vector %s present", name);
    if (!x) return NULL;
    size_t n = x->n_bytes / ft_dtype_size(t);
    CHECK_(x->dtype == t && (count == 0 || n == count), "vector %s: dtype %s, %zu elements",
           name, ft_dtype_name(x->dtype), n);
    return x->dtype == t && (count == 0 || n == count) ? x : NULL;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Bit-equal, any NaN equal to any NaN. */
static int same_f32(float a, float b) { return (isnan(a) && isnan(b)) || bits(a) == bits(b); }

static float f32_at(const struct ft_st_tensor *t, size_t i) {
    float f;
    memcpy(&f, (const char *)t->data + 4 * i, 4);
    return f;
}

/* Counts the elements of got[] that differ from the vector, reporting the first few. */
static int compare_rows(const char *what, const float *got, const struct ft_st_tensor *ref,
                        size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = f32_at(ref, i);
        if (!same_f32(got[i], want) && bad++ < 5)
            fprintf(stderr, "  %s[%zu]: %.9g (0x%08x) vs reference %.9g (0x%08x)\n", what, i,
                    got[i], bits(got[i]), want, bits(want));
    }
    return bad;
}

/* ---- codes ---- */

static void check_codes(const char *name, float (*dec)(uint8_t), int n_codes) {
    struct ft_st_file *f = open_vectors("codes");
    const struct ft_st_tensor *t = vec(f, name, FT_DTYPE_F32, (size_t)n_codes);
    if (t) {
        int bad = 0;
        for (int c = 0; c < n_codes; c++) {
            float got = dec((uint8_t)c), want = f32_at(t, (size_t)c);
            if (!same_f32(got, want) && bad++ < 5)
                fprintf(stderr, "  %s code 0x%02x: %.9g vs reference %.9g\n", name, c, got, want);
        }
        CHECK_(bad == 0, "%s: %d of %d codes differ", name, bad, n_codes);
    }
    ft_st_close(f);
}

TEST(e4m3_every_code) { check_codes("e4m3", ft_e4m3_to_f32, 256); }
TEST(e5m2_every_code) { check_codes("e5m2", ft_e5m2_to_f32, 256); }
TEST(e2m1_every_code) { check_codes("e2m1", ft_e2m1_to_f32, 16); }
TEST(e8m0_every_code) { check_codes("e8m0", ft_e8m0_to_f32, 256); }
TEST(ue4m3_every_code) { check_codes("ue4m3", ft_ue4m3_to_f32, 256); }

/* Facts the specs state outright, independent of the vector files. */
TEST(spec_facts) {
    EXPECT(ft_e4m3_to_f32(0x7e) == 448.0f && isnan(ft_e4m3_to_f32(0x7f)));
    EXPECT(ft_e4m3_to_f32(0x01) == ldexpf(1, -9) && ft_e4m3_to_f32(0x08) == ldexpf(1, -6));
    EXPECT(ft_e5m2_to_f32(0x7b) == 57344.0f && isinf(ft_e5m2_to_f32(0xfc)));
    EXPECT(ft_e5m2_to_f32(0xfc) < 0 && isnan(ft_e5m2_to_f32(0x7d)));
    EXPECT(ft_e2m1_to_f32(7) == 6.0f && ft_e2m1_to_f32(1) == 0.5f && ft_e2m1_to_f32(13) == -3.0f);
    EXPECT(signbit(ft_e2m1_to_f32(8)) && ft_e2m1_to_f32(8) == 0.0f);
    EXPECT(ft_e8m0_to_f32(127) == 1.0f && ft_e8m0_to_f32(0) == ldexpf(1, -127));
    EXPECT(ft_e8m0_to_f32(254) == ldexpf(1, 127) && isnan(ft_e8m0_to_f32(255)));
    EXPECT(ft_ue4m3_to_f32(0xfe) == 448.0f);
}

/* ---- encoders ---- */

static void check_encoder(const char *name, uint8_t (*enc)(float)) {
    struct ft_st_file *f = open_vectors("encode");
    char in_name[32], out_name[32];
    snprintf(in_name, sizeof in_name, "%s.in", name);
    snprintf(out_name, sizeof out_name, "%s.out", name);
    const struct ft_st_tensor *in = vec(f, in_name, FT_DTYPE_F32, 0);
    const struct ft_st_tensor *out = in ? vec(f, out_name, FT_DTYPE_U8, in->n_bytes / 4) : NULL;
    if (in && out) {
        size_t n = in->n_bytes / 4;
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float x = f32_at(in, i);
            uint8_t got = enc(x), want = ((const uint8_t *)out->data)[i];
            if (got != want && bad++ < 5)
                fprintf(stderr, "  %s(%.9g = 0x%08x) = 0x%02x, reference 0x%02x\n", name, x,
                        bits(x), got, want);
        }
        CHECK_(bad == 0, "%s: %d of %zu cases differ", name, bad, n);
        CHECK_(n > 500, "%s: %zu cases", name, n);
    }
    ft_st_close(f);
}

TEST(e4m3_encoder_matches_reference) { check_encoder("e4m3", ft_f32_to_e4m3); }
TEST(e5m2_encoder_matches_reference) { check_encoder("e5m2", ft_f32_to_e5m2); }
TEST(e2m1_encoder_matches_reference) { check_encoder("e2m1", ft_f32_to_e2m1); }

TEST(encoders_round_trip_every_code) {
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) != 0x7f && ft_f32_to_e4m3(ft_e4m3_to_f32((uint8_t)c)) != c) bad++;
        if ((c & 0x7f) < 0x7c && ft_f32_to_e5m2(ft_e5m2_to_f32((uint8_t)c)) != c) bad++;
        if (c < 16 && ft_f32_to_e2m1(ft_e2m1_to_f32((uint8_t)c)) != c) bad++;
    }
    EXPECT_EQ(bad, 0);
    /* ties to even, saturation, overflow, the spec's NaN codes */
    EXPECT_EQ(ft_f32_to_e4m3(464.0f), 0x7e);       /* tie 448 | 480: 448 (even) */
    EXPECT_EQ(ft_f32_to_e4m3(1e30f), 0x7e);        /* saturates */
    EXPECT_EQ(ft_f32_to_e4m3(-INFINITY), 0xfe);
    EXPECT_EQ(ft_f32_to_e4m3(ldexpf(1, -10)), 0);  /* tie 0 | 2^-9: 0 */
    EXPECT_EQ(ft_f32_to_e4m3(ldexpf(3, -10)), 2);  /* tie 2^-9 | 2^-8: 2 * 2^-9 (even) */
    EXPECT_EQ(ft_f32_to_e4m3(ldexpf(3, -11)), 1);  /* 0.75 * 2^-9: nearest 2^-9 */
    EXPECT_EQ(ft_f32_to_e4m3(NAN) & 0x7f, 0x7f);
    EXPECT_EQ(ft_f32_to_e5m2(61440.0f), 0x7c);     /* tie 57344 | 65536: inf (even) */
    EXPECT_EQ(ft_f32_to_e5m2(61439.0f), 0x7b);
    EXPECT_EQ(ft_f32_to_e2m1(5.0f), 6);            /* tie 4 | 6: 4 (code 6, even) */
    EXPECT_EQ(ft_f32_to_e2m1(0.25f), 0);           /* tie 0 | 0.5: 0 */
    EXPECT_EQ(ft_f32_to_e2m1(0.75f), 2);           /* tie 0.5 | 1: 1 */
    EXPECT_EQ(ft_f32_to_e2m1(-100.0f), 15);        /* saturates to -6 */
}

/* ---- rows ---- */

TEST(mxfp4_rows_bit_exact) {
    struct ft_st_file *f = open_vectors("rows");
    static const struct { const char *key; size_t rows, n, nb; } cases[] = {
        {"mxfp4", 8, 1024, 32}, {"mxfp4_tail", 1, 70, 3}};
    for (int k = 0; k < 2; k++) {
        char b[64], s[64], d[64];
        snprintf(b, sizeof b, "%s.blocks", cases[k].key);
        snprintf(s, sizeof s, "%s.scales", cases[k].key);
        snprintf(d, sizeof d, "%s.deq", cases[k].key);
        size_t R = cases[k].rows, n = cases[k].n, nb = cases[k].nb;
        const struct ft_st_tensor *tb = vec(f, b, FT_DTYPE_U8, R * nb * 16);
        const struct ft_st_tensor *ts = vec(f, s, FT_DTYPE_U8, R * nb);
        const struct ft_st_tensor *td = vec(f, d, FT_DTYPE_F32, R * n);
        if (!tb || !ts || !td) continue;
        float *row = malloc(n * sizeof *row);
        int bad = 0;
        for (size_t r = 0; r < R; r++) {
            ft_mxfp4_dequant_row((const uint8_t *)tb->data + r * nb * 16,
                                 (const uint8_t *)ts->data + r * nb, n, row);
            for (size_t i = 0; i < n; i++) bad += !same_f32(row[i], f32_at(td, r * n + i));
        }
        CHECK_(bad == 0, "%s: %d elements differ", cases[k].key, bad);
        free(row);
    }
    ft_st_close(f);
}

/* The same rows repacked into GGML MXFP4 blocks (the banks' format, DeepSeek-V4's FP4 experts)
 * decode to the reference values, except the block whose scale is 0xFF, which GGML cannot
 * express as NaN (the packer counts it for the loader to refuse), and -0 (code 8), which GGML's
 * table reads as +0: the same number in every product and sum. */
TEST(mxfp4_pack_ggml_bit_exact) {
    struct ft_st_file *f = open_vectors("rows");
    const size_t R = 8, n = 1024, nb = 32;
    const struct ft_st_tensor *tb = vec(f, "mxfp4.blocks", FT_DTYPE_U8, R * nb * 16);
    const struct ft_st_tensor *ts = vec(f, "mxfp4.scales", FT_DTYPE_U8, R * nb);
    const struct ft_st_tensor *td = vec(f, "mxfp4.deq", FT_DTYPE_F32, R * n);
    if (tb && ts && td) {
        uint8_t *g = malloc(R * nb * 17);
        float *row = malloc(n * sizeof *row);
        EXPECT_EQ(ft_mxfp4_pack_ggml(g, tb->data, ts->data, R, n), 1); /* every e8m0 code once */
        int bad = 0, nan_blocks = 0;
        for (size_t r = 0; r < R; r++) {
            ft_to_f32(row, g + r * nb * 17, FT_DTYPE_MXFP4, n);
            for (size_t i = 0; i < n; i++) {
                if (((const uint8_t *)ts->data)[r * nb + i / 32] == 0xff) {
                    nan_blocks += i % 32 == 0;
                    continue;
                }
                const float want = f32_at(td, r * n + i);
                bad += !(same_f32(row[i], want) || (row[i] == 0 && want == 0));
            }
        }
        EXPECT_EQ(nan_blocks, 1);
        CHECK_(bad == 0, "mxfp4 repacked: %d elements differ", bad);
        free(g), free(row);
    }
    ft_st_close(f);
}

TEST(nvfp4_rows_bit_exact) {
    struct ft_st_file *f = open_vectors("rows");
    static const struct { const char *key; size_t rows, n; } cases[] = {{"nvfp4", 8, 512},
                                                                         {"nvfp4_tail", 1, 37}};
    for (int k = 0; k < 2; k++) {
        char w[64], s[64], s2[64], d[64];
        snprintf(w, sizeof w, "%s.w", cases[k].key);
        snprintf(s, sizeof s, "%s.scales", cases[k].key);
        snprintf(s2, sizeof s2, "%s.scale_2", cases[k].key);
        snprintf(d, sizeof d, "%s.deq", cases[k].key);
        size_t R = cases[k].rows, n = cases[k].n, wb = (n + 1) / 2, sb = (n + 15) / 16;
        const struct ft_st_tensor *tw = vec(f, w, FT_DTYPE_U8, R * wb);
        const struct ft_st_tensor *ts = vec(f, s, FT_DTYPE_U8, R * sb);
        const struct ft_st_tensor *t2 = vec(f, s2, FT_DTYPE_F32, R);
        const struct ft_st_tensor *td = vec(f, d, FT_DTYPE_F32, R * n);
        if (!tw || !ts || !t2 || !td) continue;
        float *row = malloc(n * sizeof *row);
        int bad = 0;
        for (size_t r = 0; r < R; r++) {
            ft_nvfp4_dequant_row((const uint8_t *)tw->data + r * wb,
                                 (const uint8_t *)ts->data + r * sb, f32_at(t2, r), n, row);
            char what[64];
            snprintf(what, sizeof what, "%s row %zu", cases[k].key, r);
            for (size_t i = 0; i < n; i++) {
                float want = f32_at(td, r * n + i);
                if (!same_f32(row[i], want) && bad++ < 5)
                    fprintf(stderr, "  %s[%zu]: %.9g vs reference %.9g\n", what, i, row[i], want);
            }
        }
        CHECK_(bad == 0, "%s: %d elements differ", cases[k].key, bad);
        free(row);
    }
    ft_st_close(f);
}

TEST(fp8_block_128_bit_exact) {
    struct ft_st_file *f = open_vectors("rows");
    size_t N = 130, K = 136;
    const struct ft_st_tensor *tw = vec(f, "fp8b.w", FT_DTYPE_U8, N * K);
    const struct ft_st_tensor *ts = vec(f, "fp8b.scale_inv", FT_DTYPE_F32, 2 * 2);
    const struct ft_st_tensor *td = vec(f, "fp8b.deq", FT_DTYPE_F32, N * K);
    if (tw && ts && td) {
        float *out = malloc(N * K * sizeof *out);
        ft_fp8_block_dequant(tw->data, ts->data, N, K, out);
        EXPECT_EQ(compare_rows("fp8b", out, td, N * K), 0);
        /* the row variant, on the last row (second block row, partial) */
        float row[136];
        size_t r = N - 1;
        ft_fp8_block_dequant_row((const uint8_t *)tw->data + r * K,
                                 (const float *)ts->data + (r / 128) * 2, K, row);
        EXPECT(memcmp(row, out + r * K, sizeof row) == 0);
        free(out);
    }
    ft_st_close(f);
}

TEST(fp8_block_small_and_per_tensor_bit_exact) {
    struct ft_st_file *f = open_vectors("rows");
    size_t N = 10, K = 21;
    const struct ft_st_tensor *tb = vec(f, "fp8s.block", FT_DTYPE_I32, 2);
    const struct ft_st_tensor *tw = vec(f, "fp8s.w", FT_DTYPE_U8, N * K);
    const struct ft_st_tensor *ts = vec(f, "fp8s.scale_inv", FT_DTYPE_F32, 3 * 3);
    const struct ft_st_tensor *td = vec(f, "fp8s.deq", FT_DTYPE_F32, N * K);
    if (tb && tw && ts && td) {
        const int32_t *bs = tb->data;
        EXPECT(bs[0] == 4 && bs[1] == 8);
        float out[210];
        ft_fp8_block_dequant_bs(tw->data, ts->data, N, K, (size_t)bs[0], (size_t)bs[1], out);
        EXPECT_EQ(compare_rows("fp8s", out, td, N * K), 0);
    }
    const struct ft_st_tensor *pw = vec(f, "fp8t.w", FT_DTYPE_U8, 4 * 256);
    const struct ft_st_tensor *ps = vec(f, "fp8t.scale", FT_DTYPE_F32, 4);
    const struct ft_st_tensor *pd = vec(f, "fp8t.deq", FT_DTYPE_F32, 4 * 256);
    if (pw && ps && pd) {
        float out[4 * 256];
        for (size_t r = 0; r < 4; r++)
            ft_fp8_dequant_row((const uint8_t *)pw->data + r * 256, f32_at(ps, r), 256,
                               out + r * 256);
        EXPECT_EQ(compare_rows("fp8t", out, pd, 4 * 256), 0);
    }
    ft_st_close(f);
}

/* ---- dot products: realistic random rows, every tier this CPU has ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float rnd_normalish(void) { /* sum of uniforms: mean 0, sd ~1 */
    float s = 0;
    for (int i = 0; i < 4; i++) s += (float)(rnd() & 0xffff) / 65536.0f - 0.5f;
    return s * 1.7f;
}

static int max_tier(void) {
    int isa = (int)ft_cpu_isa();
    return isa > FT_FP_AVX512 ? FT_FP_AVX512 : isa;
}

/* |got - sum deq*x| <= 1e-6 * sum |deq*x| (in double), plus a floor for an all-zero row. */
static int dot_close(float got, const float *deq, const float *x, size_t n) {
    double ref = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
        ref += (double)deq[i] * x[i];
        mag += fabs((double)deq[i] * x[i]);
    }
    return isfinite(got) && fabs(got - ref) <= 1e-6 * mag + 1e-30;
}

enum { DOT_MAX = 4096 + 64 };
static const size_t k_lengths[] = {2880, 4096, 1, 15, 16, 17, 31, 32, 33, 70, 100, 200};
#define N_LENGTHS (sizeof k_lengths / sizeof k_lengths[0])

TEST(mxfp4_dot_every_tier) {
    static uint8_t blocks[DOT_MAX / 2], scales[DOT_MAX / 32];
    static float x[DOT_MAX], deq[DOT_MAX];
    int runs = 0, bad = 0;
    for (size_t L = 0; L < N_LENGTHS; L++) {
        size_t n = k_lengths[L];
        for (size_t i = 0; i < DOT_MAX / 2; i++) blocks[i] = (uint8_t)rnd();
        for (size_t i = 0; i < DOT_MAX / 32; i++) scales[i] = (uint8_t)(118 + rnd() % 12);
        for (size_t i = 0; i < n; i++) x[i] = rnd_normalish();
        ft_mxfp4_dequant_row(blocks, scales, n, deq);
        for (int t = 0; t <= max_tier(); t++, runs++) {
            float d = ft_mxfp4_dot(blocks, scales, x, n, t);
            if (!dot_close(d, deq, x, n) && bad++ < 5)
                fprintf(stderr, "  mxfp4 dot n=%zu tier %d: %.9g\n", n, t, d);
        }
    }
    EXPECT_EQ(bad, 0);
    EXPECT(runs >= (int)N_LENGTHS);
}

TEST(nvfp4_dot_every_tier) {
    static uint8_t w[DOT_MAX / 2], scales[DOT_MAX / 16];
    static float x[DOT_MAX], deq[DOT_MAX];
    int runs = 0, bad = 0;
    for (size_t L = 0; L < N_LENGTHS; L++) {
        size_t n = k_lengths[L];
        for (size_t i = 0; i < DOT_MAX / 2; i++) w[i] = (uint8_t)rnd();
        for (size_t i = 0; i < DOT_MAX / 16; i++) scales[i] = (uint8_t)(0x20 + rnd() % 0x5e);
        for (size_t i = 0; i < n; i++) x[i] = rnd_normalish();
        float s2 = 1.0f / (6 * 448) * (1 + (float)(rnd() % 100) / 100);
        ft_nvfp4_dequant_row(w, scales, s2, n, deq);
        for (int t = 0; t <= max_tier(); t++, runs++) {
            float d = ft_nvfp4_dot(w, scales, s2, x, n, t);
            if (!dot_close(d, deq, x, n) && bad++ < 5)
                fprintf(stderr, "  nvfp4 dot n=%zu tier %d: %.9g\n", n, t, d);
        }
    }
    EXPECT_EQ(bad, 0);
    EXPECT(runs >= (int)N_LENGTHS);
}

/* The multi-token row dots (prefill) against the dequantised rows, for token counts around the
 * 8-token kernel, every length and tier; x rows are ldx apart (ldx > K). */
TEST(row_dots_over_tokens_every_tier) {
    enum { TMAX = 17 };
    static float x[TMAX * DOT_MAX], deq[DOT_MAX], y[TMAX * 3];
    static uint8_t row[DOT_MAX * 2], codes[DOT_MAX], sc8[DOT_MAX / 16 + 1];
    static float sinv[DOT_MAX / 128 + 1];
    static const int counts[] = {1, 3, 4, 5, 8, 11, 12, 15, 16, 17}; /* the 8- and 4-token kernels */
    int bad = 0, runs = 0;
    for (size_t L = 0; L < N_LENGTHS; L++) {
        size_t K = k_lengths[L], ldx = K + 5;
        for (size_t i = 0; i < TMAX * ldx; i++) x[i] = rnd_normalish();
        for (size_t i = 0; i < K; i++) codes[i] = (uint8_t)rnd(); /* NVFP4: every nibble */
        for (size_t i = 0; i <= K / 16; i++) sc8[i] = (uint8_t)(0x20 + rnd() % 0x5e);
        for (size_t i = 0; i <= K / 128; i++) sinv[i] = 0.001f * (float)(1 + rnd() % 50);
        for (int f = 0; f < 2; f++) {
            if (f == 0) ft_nvfp4_r_pack(row, codes, sc8, 0.37f, 1, K), ft_nvfp4_r_dequant_row(row, K, deq);
            else {
                for (size_t i = 0; i < K; i++) codes[i] &= 0xf7; /* FP8: no e4m3 NaN */
                ft_fp8_b128_pack(row, codes, sinv, 1, K), ft_fp8_b128_dequant_row(row, K, deq);
            }
            for (int t = 0; t <= max_tier(); t++)
                for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                    int T = counts[c];
                    if (f == 0) ft_nvfp4_r_dot_tokens(row, x, ldx, T, K, y, 3, t);
                    else ft_fp8_b128_dot_tokens(row, x, ldx, T, K, y, 3, t);
                    for (int k = 0; k < T; k++, runs++)
                        if (!dot_close(y[3 * k], deq, x + (size_t)k * ldx, K) && bad++ < 5)
                            fprintf(stderr, "  %s K=%zu tier %d T=%d token %d: %.9g\n",
                                    f ? "fp8_b128" : "nvfp4", K, t, T, k, y[3 * k]);
                }
        }
    }
    EXPECT_EQ(bad, 0);
    EXPECT(runs > 1000);
}

TEST(fp8_dots_every_tier) {
    static uint8_t w[DOT_MAX];
    static float sinv[DOT_MAX], x[DOT_MAX], deq[DOT_MAX];
    static const size_t bks[] = {128, 16, 7};
    int runs = 0, bad = 0;
    for (size_t L = 0; L < N_LENGTHS; L++) {
        size_t n = k_lengths[L];
        for (size_t i = 0; i < DOT_MAX; i++) {
            w[i] = (uint8_t)rnd();
            if ((w[i] & 0x7f) == 0x7f) w[i] = 0x3c; /* no NaN codes */
        }
        for (size_t i = 0; i < DOT_MAX; i++)
            sinv[i] = ldexpf(1.0f + (float)(rnd() % 1000) / 1000, -(int)(rnd() % 12));
        for (size_t i = 0; i < n; i++) x[i] = rnd_normalish();
        for (size_t b = 0; b < 3; b++) {
            ft_fp8_block_dequant_row_bs(w, sinv, n, bks[b], deq);
            for (int t = 0; t <= max_tier(); t++, runs++) {
                float d = ft_fp8_block_dot_row(w, sinv, x, n, bks[b], t);
                if (!dot_close(d, deq, x, n) && bad++ < 5)
                    fprintf(stderr, "  fp8 block dot n=%zu bk=%zu tier %d: %.9g\n", n, bks[b], t, d);
            }
        }
        ft_fp8_dequant_row(w, sinv[0], n, deq);
        for (int t = 0; t <= max_tier(); t++, runs++) {
            float d = ft_fp8_dot(w, sinv[0], x, n, t);
            if (!dot_close(d, deq, x, n) && bad++ < 5)
                fprintf(stderr, "  fp8 dot n=%zu tier %d: %.9g\n", n, t, d);
        }
    }
    EXPECT_EQ(bad, 0);
    EXPECT(runs >= 4 * (int)N_LENGTHS);
}

/* Equal as numbers (a sum of +0 and -0 is +0), any NaN equal to any NaN. */
static int same_value(float a, float b) { return (isnan(a) && isnan(b)) || a == b; }

/* One code at a time at every position of a 40-element row (SIMD lanes and scalar tails), the
 * rest zero, x = 1: every tier's dot must equal the code's value times its scale exactly (a
 * wrong subnormal or sign in a register lookup would hide under the 1e-6 tolerance above). */
TEST(dots_decode_every_code_in_every_lane) {
    enum { N = 40 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = 1.0f;
    int bad = 0, runs = 0;
    for (int t = 0; t <= max_tier(); t++) {
        for (int pos = 0; pos < N; pos++) {
            for (int c = 0; c < 256; c++) {
                uint8_t w8[N] = {0};
                float sinv[N / 8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
                w8[pos] = (uint8_t)c;
                float want = ft_e4m3_to_f32((uint8_t)c) * 0.5f;
                float got = ft_fp8_block_dot_row(w8, sinv, x, N, 8, t);
                float got2 = ft_fp8_dot(w8, 0.5f, x, N, t);
                bad += !same_value(got, want) + !same_value(got2, want);
                runs += 2;
                if (c >= 16) continue;
                uint8_t p4[N / 2] = {0}, e8[2] = {126, 128}, u8[3] = {0x38, 0x40, 0x30};
                p4[pos / 2] = (uint8_t)(pos & 1 ? c << 4 : c);
                float v = ft_e2m1_to_f32((uint8_t)c);
                got = ft_mxfp4_dot(p4, e8, x, N, t);
                bad += !same_value(got, v * ft_e8m0_to_f32(e8[pos / 32]));
                got = ft_nvfp4_dot(p4, u8, 0.25f, x, N, t);
                bad += !same_value(got, v * ft_e4m3_to_f32(u8[pos / 16]) * 0.25f);
                runs += 2;
            }
        }
    }
    CHECK_(bad == 0, "%d of %d single-code dots differ", bad, runs);
    EXPECT(runs > 0);
}

TEST_MAIN("fp_formats")
