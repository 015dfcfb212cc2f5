/* test_quant.c — scalar conversions and the dtype table. f16 <-> f32 is checked against the
 * compiler's _Float16 (GCC on x86-64) and, always, against a reference built from exact
 * double arithmetic (ldexp decoding, nearest-value search with ties to even); bf16 rounding
 * against a straightforward nearest-even reference. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "format/quant.h"
#include "test.h"

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t u_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* xorshift64 */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

/* ---------------------------------------------------------------- f16 reference (exact math) */

static double ref_f16_decode(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -24);
    else v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* Nearest binary16 to x (finite or inf, not NaN), ties to even, overflow to inf: binary
 * search over the 0x7c00 non-negative finite encodings, which are ordered like their values.
 * Values at or past max + half an ulp (65520) go to inf, as IEEE rounding says. */
static uint16_t ref_f32_to_f16(float f) {
    double x = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (x >= 65520.0) return sign | 0x7c00;
    int lo = 0, hi = 0x7bff; /* largest encoding with value <= x */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (ref_f16_decode((uint16_t)mid) <= x) lo = mid;
        else hi = mid - 1;
    }
    int r = lo;
    if (r < 0x7bff) {
        double a = ref_f16_decode((uint16_t)r), b = ref_f16_decode((uint16_t)(r + 1));
        if (x - a > b - x || (x - a == b - x && (r & 1))) r++;
    }
    return sign | (uint16_t)r;
}

static int f16_same(uint16_t a, uint16_t b) {
    int nan_a = (a & 0x7fff) > 0x7c00, nan_b = (b & 0x7fff) > 0x7c00;
    return nan_a || nan_b ? nan_a && nan_b && (a & 0x8000) == (b & 0x8000) : a == b;
}

/* A mix of every sign/exponent/top-10-mantissa combination with rounding-critical low bits,
 * plus uniformly random patterns. Calls fn(bits) for each. */
static const uint32_t k_low13[] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x0800, 0x17ff};

TEST(f16_to_f32_exhaustive) {
    int bad_ref = 0, bad_hw = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = ft_f16_to_f32((uint16_t)h);
        double want = ref_f16_decode((uint16_t)h);
        if (isnan(want) ? !(isnan(got) && !!signbit(got) == !!(h & 0x8000))
                        : (double)got != want || !signbit(got) != !signbit(want))
            bad_ref++;
#ifdef __FLT16_MAX__
        _Float16 x;
        uint16_t hh = (uint16_t)h;
        memcpy(&x, &hh, 2);
        float hw = (float)x;
        if (isnan(hw) ? !isnan(got) : u_of(hw) != u_of(got)) bad_hw++;
#endif
    }
    EXPECT_EQ(bad_ref, 0);
    EXPECT_EQ(bad_hw, 0);
    EXPECT_EQ(u_of(ft_f16_to_f32(0x3c00)), u_of(1.0f));
    EXPECT_EQ(u_of(ft_f16_to_f32(0x0001)), u_of(ldexpf(1, -24)));
    EXPECT_EQ(u_of(ft_f16_to_f32(0x8000)), 0x80000000u);
    EXPECT(isinf(ft_f16_to_f32(0xfc00)) && ft_f16_to_f32(0xfc00) < 0);
}

TEST(f16_round_trip_every_value) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t back = ft_f32_to_f16(ft_f16_to_f32((uint16_t)h));
        if (!f16_same(back, (uint16_t)h)) bad++;
    }
    EXPECT_EQ(bad, 0);
}

static void check_f32_to_f16(uint32_t u, int *bad_ref, int *bad_hw) {
    float f = f_of(u);
    uint16_t got = ft_f32_to_f16(f);
    if (isnan(f)) {
        if (!((got & 0x7fff) > 0x7c00 && (got >> 15) == (u >> 31))) (*bad_ref)++;
    } else if (got != ref_f32_to_f16(f)) {
        (*bad_ref)++;
    }
#ifdef __FLT16_MAX__
    _Float16 x = (_Float16)f;
    uint16_t hw;
    memcpy(&hw, &x, 2);
    if (!f16_same(got, hw)) (*bad_hw)++;
#else
    (void)bad_hw;
#endif
}

TEST(f32_to_f16_rounding) {
    int bad_ref = 0, bad_hw = 0;
    long n = 0;
    /* every sign, exponent and top 10 mantissa bits, with tie/sticky low-bit patterns */
    for (uint32_t hi = 0; hi < (1u << 19); hi++) {
        for (size_t k = 0; k < sizeof k_low13 / sizeof k_low13[0]; k++, n++)
            check_f32_to_f16(hi << 13 | k_low13[k], &bad_ref, &bad_hw);
        check_f32_to_f16(hi << 13 | (rnd() & 0x1fff), &bad_ref, &bad_hw);
        n++;
    }
    /* exhaustive over the region that rounds into f16 subnormals (|x| in [2^-26, 2^-14)) at a
     * stride that still hits every rounding position's tie */
    for (uint32_t u = 0x32800000u; u < 0x38800000u; u += 0x101, n += 2) {
        check_f32_to_f16(u, &bad_ref, &bad_hw);
        check_f32_to_f16(u | 0x80000000u, &bad_ref, &bad_hw);
    }
    for (int i = 0; i < (1 << 21); i++, n++) check_f32_to_f16(rnd(), &bad_ref, &bad_hw);
    EXPECT(n > 5000000);
    EXPECT_EQ(bad_ref, 0);
    EXPECT_EQ(bad_hw, 0);
    /* spot values */
    EXPECT_EQ(ft_f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(ft_f32_to_f16(65519.996f), 0x7bff);
    EXPECT_EQ(ft_f32_to_f16(65520.0f), 0x7c00);
    EXPECT_EQ(ft_f32_to_f16(1e10f), 0x7c00);
    EXPECT_EQ(ft_f32_to_f16(-1e10f), 0xfc00);
    EXPECT_EQ(ft_f32_to_f16(ldexpf(1, -25)), 0x0000);              /* tie -> even (0) */
    EXPECT_EQ(ft_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);
    EXPECT_EQ(ft_f32_to_f16(ldexpf(3, -25)), 0x0002);              /* 1.5 ulp tie -> 2 */
    EXPECT_EQ(ft_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);       /* tie -> even */
    EXPECT_EQ(ft_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02);   /* tie -> even (up) */
    EXPECT_EQ(ft_f32_to_f16(-0.0f), 0x8000);
}

/* ---------------------------------------------------------------- bf16 */

/* Straightforward reference: the two bf16 neighbours of x by truncation, pick the nearer in
 * exact double arithmetic, ties to the even one; the neighbour past the largest finite bf16
 * is valued 2^128 so that rounding up overflows to inf exactly as IEEE says. */
static uint16_t ref_f32_to_bf16(float f) {
    uint32_t u = u_of(f);
    uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | a >> 16); /* inf */
    uint16_t lo = (uint16_t)(a >> 16), hi = (uint16_t)(lo + 1);
    double x = fabs((double)f), vlo = fabs((double)ft_bf16_to_f32(lo));
    double vhi = hi == 0x7f80 ? ldexp(1, 128) : fabs((double)ft_bf16_to_f32(hi));
    uint16_t r = lo;
    if (x - vlo > vhi - x || (x - vlo == vhi - x && (lo & 1))) r = hi;
    return (uint16_t)(sign | r);
}

TEST(bf16_rounding) {
    static const uint32_t low16[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
    int bad = 0, bad_nan = 0;
    long n = 0;
    for (uint32_t hi = 0; hi < 65536; hi++) {
        for (size_t k = 0; k <= sizeof low16 / sizeof low16[0]; k++, n++) {
            uint32_t u = hi << 16 | (k < sizeof low16 / sizeof low16[0] ? low16[k] : (rnd() & 0xffff));
            float f = f_of(u);
            uint16_t got = ft_f32_to_bf16(f);
            if (isnan(f)) {
                bad_nan += !((got & 0x7fff) > 0x7f80 && (got >> 15) == (u >> 31));
            } else {
                bad += got != ref_f32_to_bf16(f);
            }
        }
    }
    for (int i = 0; i < (1 << 21); i++, n++) {
        float f = f_of(rnd());
        if (!isnan(f)) bad += ft_f32_to_bf16(f) != ref_f32_to_bf16(f);
    }
    EXPECT(n > 2000000);
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(bad_nan, 0);
    /* every bf16 survives bf16 -> f32 -> bf16, and decode is a plain shift */
    int bad_rt = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ft_bf16_to_f32((uint16_t)h);
        bad_rt += u_of(f) != h << 16;
        if (!isnan(f)) bad_rt += ft_f32_to_bf16(f) != h;
    }
    EXPECT_EQ(bad_rt, 0);
    EXPECT_EQ(ft_f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(ft_f32_to_bf16(f_of(0x3f808000u)), 0x3f80); /* tie -> even */
    EXPECT_EQ(ft_f32_to_bf16(f_of(0x3f818000u)), 0x3f82); /* tie -> even (up) */
    EXPECT_EQ(ft_f32_to_bf16(f_of(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
    EXPECT_EQ(ft_f32_to_bf16(f_of(0x7fc00001u)) & 0x7fc0, 0x7fc0);
    EXPECT_EQ(ft_f32_to_bf16(f_of(0x7f800001u)) & 0x7fff, 0x7fc0); /* sNaN with low payload stays NaN */
}

/* ---------------------------------------------------------------- table and bulk */

TEST(dtype_table) {
    static const struct { enum ft_dtype t; const char *name; size_t size; } want[] = {
        {FT_DTYPE_F32, "F32", 4},  {FT_DTYPE_F16, "F16", 2},         {FT_DTYPE_BF16, "BF16", 2},
        {FT_DTYPE_F64, "F64", 8},  {FT_DTYPE_F8_E4M3, "F8_E4M3", 1}, {FT_DTYPE_F8_E5M2, "F8_E5M2", 1},
        {FT_DTYPE_I64, "I64", 8},  {FT_DTYPE_I32, "I32", 4},         {FT_DTYPE_I16, "I16", 2},
        {FT_DTYPE_I8, "I8", 1},    {FT_DTYPE_U8, "U8", 1},           {FT_DTYPE_U16, "U16", 2},
        {FT_DTYPE_U32, "U32", 4},  {FT_DTYPE_U64, "U64", 8},         {FT_DTYPE_BOOL, "BOOL", 1},
    };
    EXPECT_EQ(sizeof want / sizeof want[0], FT_DTYPE_Q8_0); /* the safetensors dtypes */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        EXPECT_STREQ(ft_dtype_name(want[i].t), want[i].name);
        EXPECT_EQ(ft_dtype_size(want[i].t), want[i].size);
        enum ft_dtype p = FT_DTYPE_COUNT;
        EXPECT_EQ(ft_dtype_parse(want[i].name, &p), 0);
        EXPECT_EQ(p, want[i].t);
    }
    enum ft_dtype p = FT_DTYPE_F32;
    EXPECT_EQ(ft_dtype_parse("bf16", &p), -1); /* safetensors spelling is upper case */
    EXPECT_EQ(ft_dtype_parse("", &p), -1);
    EXPECT_EQ(ft_dtype_parse("F8_E4M3FN", &p), -1);
    EXPECT_EQ(p, FT_DTYPE_F32);
    EXPECT_EQ(ft_dtype_size(FT_DTYPE_COUNT), 0);
    EXPECT_EQ(ft_dtype_size((enum ft_dtype)-1), 0);
    EXPECT_STREQ(ft_dtype_name(FT_DTYPE_COUNT), "?");
    /* GGML block formats: named, sized by row, mapped both ways, never parsed from safetensors;
     * row sizes from GGML's block geometry (ggml-common.h: 34 B / 32, 144 B / 256, ...) */
    static const struct { enum ft_dtype t; const char *name; int ggml; size_t row256; } blk[] = {
        {FT_DTYPE_Q8_0, "Q8_0", 8, 8 * 34},  {FT_DTYPE_Q4_0, "Q4_0", 2, 8 * 18},
        {FT_DTYPE_Q4_1, "Q4_1", 3, 8 * 20},  {FT_DTYPE_Q5_0, "Q5_0", 6, 8 * 22},
        {FT_DTYPE_Q5_1, "Q5_1", 7, 8 * 24},
        {FT_DTYPE_Q4_K, "Q4_K", 12, 144},    {FT_DTYPE_Q5_K, "Q5_K", 13, 176},
        {FT_DTYPE_Q6_K, "Q6_K", 14, 210},    {FT_DTYPE_MXFP4, "MXFP4", 39, 8 * 17},
    };
    EXPECT_EQ(FT_DTYPE_Q8_0 + sizeof blk / sizeof blk[0], FT_DTYPE_FP8_B128);
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
        EXPECT(ft_dtype_is_block(blk[i].t));
        EXPECT_STREQ(ft_dtype_name(blk[i].t), blk[i].name);
        EXPECT_EQ(ft_dtype_size(blk[i].t), 0);
        EXPECT_EQ(ft_dtype_row_bytes(blk[i].t, 256), blk[i].row256);
        EXPECT_EQ(ft_dtype_row_bytes(blk[i].t, 100), 0); /* not a whole number of blocks */
        EXPECT_EQ(ft_dtype_ggml(blk[i].t), blk[i].ggml);
        EXPECT_EQ(ft_dtype_from_ggml(blk[i].ggml), blk[i].t);
        EXPECT_EQ(ft_dtype_parse(blk[i].name, &p), -1);
    }
    EXPECT_EQ(ft_dtype_row_bytes(FT_DTYPE_BF16, 100), 200);
    EXPECT_EQ(ft_dtype_ggml(FT_DTYPE_BF16), 30);
    EXPECT_EQ(ft_dtype_ggml(FT_DTYPE_I8), -1);
    EXPECT_EQ(ft_dtype_from_ggml(10), FT_DTYPE_COUNT); /* Q2_K: not read */
    EXPECT(!ft_dtype_is_block(FT_DTYPE_F32));
    /* FP8_B128: a row of n carries ceil(n/128) f32 scales, then n codes padded to 4 bytes */
    EXPECT_EQ(FT_DTYPE_FP8_B128 + 3, FT_DTYPE_COUNT);
    /* NVFP4: f32 scale_2, ceil(n/16) scale bytes, ceil(n/2) code bytes, padded to 4 */
    EXPECT_EQ(ft_dtype_row_bytes(FT_DTYPE_NVFP4, 48), 4 + 3 + 24 + 1);
    EXPECT_EQ(ft_dtype_row_bytes(FT_DTYPE_NVFP4, 256), 4 + 16 + 128);
    EXPECT(ft_dtype_is_packed(FT_DTYPE_NVFP4));
    EXPECT_STREQ(ft_dtype_name(FT_DTYPE_FP8_B128), "FP8_B128");
    EXPECT_EQ(ft_dtype_row_bytes(FT_DTYPE_FP8_B128, 42), 4 + 44);
    EXPECT_EQ(ft_dtype_row_bytes(FT_DTYPE_FP8_B128, 256), 8 + 256);
    EXPECT_EQ(ft_dtype_row_bytes(FT_DTYPE_FP8_B128, 129), 8 + 132);
    EXPECT(ft_dtype_is_packed(FT_DTYPE_FP8_B128) && !ft_dtype_is_block(FT_DTYPE_FP8_B128));
    EXPECT_EQ(ft_dtype_ggml(FT_DTYPE_FP8_B128), -1);
    EXPECT_EQ(ft_dtype_parse("FP8_B128", &p), -1);
}

/* F8_E8M0 (DeepSeek-V4's scales): a safetensors element type of one byte, 2^(e-127), 0xFF NaN */
TEST(e8m0_element_type) {
    enum ft_dtype p;
    EXPECT_EQ(ft_dtype_parse("F8_E8M0", &p), 0);
    EXPECT_EQ(p, FT_DTYPE_F8_E8M0);
    EXPECT_EQ(ft_dtype_size(FT_DTYPE_F8_E8M0), 1);
    EXPECT(!ft_dtype_is_packed(FT_DTYPE_F8_E8M0));
    const uint8_t c[7] = {0, 1, 126, 127, 128, 254, 255};
    float out[7];
    ft_to_f32(out, c, FT_DTYPE_F8_E8M0, 7);
    EXPECT(out[0] == ldexpf(1.0f, -127)); /* the f32 subnormal */
    EXPECT(out[1] == ldexpf(1.0f, -126));
    EXPECT(out[2] == 0.5f && out[3] == 1.0f && out[4] == 2.0f);
    EXPECT(out[5] == ldexpf(1.0f, 127));
    EXPECT(isnan(out[6]));
}

TEST(to_f32_bulk) {
    float src[5] = {1.0f, -2.5f, 0.0f, 65504.0f, 3.1415926f}, out[5];
    uint16_t h[5], b[5];
    for (int i = 0; i < 5; i++) {
        h[i] = ft_f32_to_f16(src[i]);
        b[i] = ft_f32_to_bf16(src[i]);
    }
    ft_to_f32(out, src, FT_DTYPE_F32, 5);
    EXPECT(memcmp(out, src, sizeof src) == 0);
    ft_to_f32(out, h, FT_DTYPE_F16, 5);
    for (int i = 0; i < 5; i++) EXPECT_NEAR(out[i], src[i], fabs(src[i]) * 1e-3);
    ft_to_f32(out, b, FT_DTYPE_BF16, 5);
    for (int i = 0; i < 5; i++) EXPECT_NEAR(out[i], src[i], fabs(src[i]) * 8e-3);
    /* unaligned source */
    unsigned char raw[11];
    memcpy(raw + 1, b, 10);
    ft_to_f32(out, raw + 1, FT_DTYPE_BF16, 5);
    EXPECT_EQ(u_of(out[1]), (uint32_t)b[1] << 16);
}

TEST_MAIN("quant")
