/* test_cpu_ops.c — every CPU op against a plain scalar reference written here (double
 * accumulation), on every ISA tier this machine has (forced with ft_cpu_set_isa), for F32/F16/BF16
 * weights and awkward sizes. Matmul tolerance: 1e-5 relative to sum |x w| (the condition of the
 * sum), so cancellation cannot make a correct fp32 result look wrong. */
#include "backend/cpu/ops.h"

#include <math.h>

#include "core/threadpool.h"
#include "format/fp_formats.h"
#include "test.h"

/* ---------------------------------------------------------------- helpers -- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *frand_buf(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

/* Weights of type wt in a buffer offset by one element (so rows are unaligned); wf gets the
 * exact values the kernel sees. Returns the allocation; *w points into it. */
static void *make_weights(enum ft_dtype wt, size_t n, const void **w, float *wf) {
    size_t esz = ft_dtype_size(wt);
    char *mem = malloc((n + 1) * esz);
    char *p = mem + esz;
    for (size_t i = 0; i < n; i++) {
        float f = frand();
        if (wt == FT_DTYPE_F32) {
            memcpy(p + i * 4, &f, 4);
            wf[i] = f;
        } else {
            uint16_t h = wt == FT_DTYPE_F16 ? ft_f32_to_f16(f) : ft_f32_to_bf16(f);
            memcpy(p + i * 2, &h, 2);
            wf[i] = wt == FT_DTYPE_F16 ? ft_f16_to_f32(h) : ft_bf16_to_f32(h);
        }
    }
    *w = p;
    return mem;
}

/* The distinct tiers this machine can run, best first. */
static int tiers(enum ft_cpu_isa *out) {
    int n = 0;
    for (int t = FT_ISA_AVX512_BF16; t >= FT_ISA_SCALAR; t--)
        if (ft_cpu_set_isa((enum ft_cpu_isa)t) == (enum ft_cpu_isa)t) out[n++] = (enum ft_cpu_isa)t;
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
    return n;
}

static const enum ft_dtype k_dtypes[3] = {FT_DTYPE_F32, FT_DTYPE_F16, FT_DTYPE_BF16};

/* Largest |y - ref| / (1e-5 * sum|x w| + 1e-30) over y[t, n] for n in [n0, n1): <= 1 passes. */
static double matmul_err(const float *y, int ldy, const float *x, int ldx, const float *wf, int T,
                         int n0, int n1, int K) {
    double worst = 0.0;
    for (int t = 0; t < T; t++)
        for (int n = n0; n < n1; n++) {
            double ref = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double p = (double)x[(size_t)t * ldx + k] * wf[(size_t)n * K + k];
                ref += p;
                mag += fabs(p);
            }
            double e = fabs(y[(size_t)t * ldy + n] - ref) / (1e-5 * mag + 1e-30);
            worst = e > worst ? e : worst;
        }
    return worst;
}

/* ---------------------------------------------------------------- isa ------ */

TEST(isa_detect_and_force) {
    enum ft_cpu_isa best = ft_cpu_isa();
    EXPECT(best >= FT_ISA_SCALAR && best <= FT_ISA_AVX512_BF16);
    EXPECT_STREQ(ft_cpu_isa_name(FT_ISA_AVX512), "avx512");
    EXPECT_STREQ(ft_cpu_isa_name(FT_ISA_SCALAR), "scalar");
    EXPECT_EQ(ft_cpu_set_isa(FT_ISA_SCALAR), FT_ISA_SCALAR);
    EXPECT_EQ(ft_cpu_isa(), FT_ISA_SCALAR);
    EXPECT(ft_cpu_set_isa(FT_ISA_AVX512_BF16) <= FT_ISA_AVX512_BF16);
    EXPECT_EQ(ft_cpu_isa(), ft_cpu_set_isa(FT_ISA_AVX512_BF16));
    enum ft_cpu_isa ts[4];
    int n = tiers(ts);
    EXPECT(n >= 1 && ts[n - 1] == FT_ISA_SCALAR);
    fprintf(stderr, "  tiers:");
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %s", ft_cpu_isa_name(ts[i]));
    fprintf(stderr, "\n");
}

/* ---------------------------------------------------------------- matmul --- */

/* One configuration: rows [n0, n1) of N, strides wider than the data, sentinels outside. */
static void check_rows(enum ft_cpu_isa isa, enum ft_dtype wt, int T, int N, int K, int n0, int n1) {
    int ldx = K + 3, ldy = N + 2;
    float *x = frand_buf((size_t)T * ldx), *wf = malloc((size_t)N * K * sizeof *wf + 4);
    float *y = malloc((size_t)T * ldy * sizeof *y);
    const void *w;
    void *mem = make_weights(wt, (size_t)N * K, &w, wf);
    for (int i = 0; i < T * ldy; i++)
        y[i] = 12345.0f;
    ft_cpu_matmul_rows(y, ldy, x, ldx, w, wt, T, n0, n1, K);
    double e = matmul_err(y, ldy, x, ldx, wf, T, n0, n1, K);
    int untouched = 1;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < ldy; c++)
            if ((c < n0 || c >= n1) && y[(size_t)t * ldy + c] != 12345.0f) untouched = 0;
    CHECK_(e <= 1.0 && untouched, "%s %s T=%d N=%d K=%d rows [%d,%d): err %.3g x tol, untouched %d",
           ft_cpu_isa_name(isa), ft_dtype_name(wt), T, N, K, n0, n1, e, untouched);
    free(x), free(wf), free(y), free(mem);
}

TEST(matmul_rows_all_tiers_dtypes_sizes) {
    static const int Ks[] = {1, 7, 24, 33, 100, 257};
    static const int Ts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17};
    enum ft_cpu_isa ts[4];
    int nt = tiers(ts);
    for (int a = 0; a < nt; a++) {
        ft_cpu_set_isa(ts[a]);
        for (int d = 0; d < 3; d++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
                for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
                    check_rows(ts[a], k_dtypes[d], Ts[ti], 13, Ks[ki], 0, 13);
                    check_rows(ts[a], k_dtypes[d], Ts[ti], 11, Ks[ki], 2, 9);
                }
    }
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
}

TEST(matmul_rows_long_k_and_many_rows) {
    enum ft_cpu_isa ts[4];
    int nt = tiers(ts);
    for (int a = 0; a < nt; a++) {
        ft_cpu_set_isa(ts[a]);
        for (int d = 0; d < 3; d++) {
            check_rows(ts[a], k_dtypes[d], 1, 67, 2049, 0, 67);
            check_rows(ts[a], k_dtypes[d], 21, 37, 1031, 3, 37);
        }
    }
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
}

/* bf16 weights with bf16 activations (ft_cpu_xq_*, vdpbf16ps): exact against the reference
 * on the rounded x (fp32 accumulation: 1e-5 of sum |x w|), and within 2^-8 of sum |x w| of the
 * fp32 x (rounding to nearest bf16 moves each x by at most 2^-9 of itself). On a CPU without
 * AVX512-BF16 the path must be off (ft_cpu_xq_bytes 0): the plain kernels run instead. */
/* 1 when this CPU has AVX512-BF16 (the tier is selected); else checks that weights of wt take
 * no bf16 activations and says so. */
static int bf16_path(enum ft_dtype wt) {
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
    if (ft_cpu_isa() >= FT_ISA_AVX512_BF16) return 1;
    EXPECT_EQ(ft_cpu_xq_bytes(wt, 128), 0);
    fprintf(stderr, "  no AVX512-BF16 here: %s weights take no bf16 activations (checked)\n",
            ft_dtype_name(wt));
    return 0;
}

TEST(matmul_rows_bf16_activations) {
    if (!bf16_path(FT_DTYPE_BF16)) return;
    static const int Ks[] = {1, 31, 32, 33, 100, 2049};
    static const int Ts[] = {1, 2, 3, 4, 5, 9};
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            int K = Ks[ki], T = Ts[ti], N = 13, ldx = K + 3, ldy = N + 2;
            EXPECT_EQ(ft_cpu_xq_bytes(FT_DTYPE_BF16, K), (size_t)K * 2);
            float *x = frand_buf((size_t)T * ldx), *xr = malloc((size_t)T * ldx * sizeof *xr);
            float *wf = malloc((size_t)N * K * sizeof *wf + 4), *y = malloc((size_t)T * ldy * sizeof *y);
            uint16_t *xq = malloc((size_t)T * K * 2);
            const void *w;
            void *mem = make_weights(FT_DTYPE_BF16, (size_t)N * K, &w, wf);
            for (int i = 0; i < T * ldx; i++) xr[i] = ft_bf16_to_f32(ft_f32_to_bf16(x[i]));
            ft_cpu_xq_quant(FT_DTYPE_BF16, x, ldx, K, T, xq);
            int same = 1;
            for (int t = 0; t < T; t++)
                for (int k = 0; k < K; k++) same &= xq[(size_t)t * K + k] == ft_f32_to_bf16(x[(size_t)t * ldx + k]);
            ft_cpu_matmul_rows_xq(y, ldy, xq, w, FT_DTYPE_BF16, T, 2, N, K);
            double e = matmul_err(y, ldy, xr, ldx, wf, T, 2, N, K);
            double e32 = matmul_err(y, ldy, x, ldx, wf, T, 2, N, K) * 1e-5 / 0.00390625;
            CHECK_(same && e <= 1.0 && e32 <= 1.0, "bf16 x T=%d K=%d: codes %s, err %.3g x tol on "
                   "the rounded x, %.3g x 2^-8 on fp32 x", T, K, same ? "ok" : "differ", e, e32);
            free(x), free(xr), free(wf), free(y), free(xq), free(mem);
        }
}

/* FP8_B128 rows with bf16 activations (ft_cpu_xq_*: every e4m3 widened to bf16 exactly,
 * vdpbf16ps): within 1e-5 of sum |x w| of the exact dot of the dequantised rows with the rounded
 * x, and within 2^-8 of it with the fp32 x; every e4m3 code (subnormals, both signs, the
 * largest) appears. Rows of widths around the 128-block and the 32-lane steps, 1-9 tokens.
 * Without AVX512-BF16 the path is off (ft_cpu_xq_bytes 0). */
TEST(matmul_rows_fp8_bf16_activations) {
    if (!bf16_path(FT_DTYPE_FP8_B128)) return;
    static const int Ks[] = {20, 32, 127, 128, 129, 300, 2048};
    static const int Ts[] = {1, 2, 3, 4, 5, 9};
    unsigned code = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            int K = Ks[ki], T = Ts[ti], N = 13, ldx = K + 3, ldy = N + 2;
            EXPECT_EQ(ft_cpu_xq_bytes(FT_DTYPE_FP8_B128, K), (size_t)K * 2);
            size_t nbk = ((size_t)K + 127) / 128, rb = ft_fp8_b128_row_bytes((size_t)K);
            uint8_t *codes = malloc((size_t)N * K), *rows = malloc(rb * N);
            float *sinv = malloc(((size_t)N + 127) / 128 * nbk * sizeof *sinv);
            for (size_t i = 0; i < (size_t)N * K; i++) { /* every code but the NaNs, in turn */
                do code = (code + 1) & 0xff;
                while ((code & 0x7f) == 0x7f);
                codes[i] = (uint8_t)code;
            }
            for (size_t i = 0; i < ((size_t)N + 127) / 128 * nbk; i++) sinv[i] = 1e-3f * (1.0f + (float)i);
            ft_fp8_b128_pack(rows, codes, sinv, (size_t)N, (size_t)K);
            float *wf = malloc((size_t)N * K * sizeof *wf);
            for (int n = 0; n < N; n++) ft_fp8_b128_dequant_row(rows + (size_t)n * rb, (size_t)K, wf + (size_t)n * K);
            float *x = frand_buf((size_t)T * ldx), *xr = malloc((size_t)T * ldx * sizeof *xr);
            float *y = malloc((size_t)T * ldy * sizeof *y);
            uint16_t *xq = malloc((size_t)T * K * 2);
            for (int i = 0; i < T * ldx; i++) xr[i] = ft_bf16_to_f32(ft_f32_to_bf16(x[i]));
            ft_cpu_xq_quant(FT_DTYPE_FP8_B128, x, ldx, K, T, xq);
            ft_cpu_matmul_rows_xq(y, ldy, xq, rows, FT_DTYPE_FP8_B128, T, 2, N, K);
            double e = matmul_err(y, ldy, xr, ldx, wf, T, 2, N, K);
            double e32 = matmul_err(y, ldy, x, ldx, wf, T, 2, N, K) * 1e-5 / 0.00390625;
            CHECK_(e <= 1.0 && e32 <= 1.0, "fp8 bf16 x T=%d K=%d: err %.3g x tol on the rounded x, "
                   "%.3g x 2^-8 on fp32 x", T, K, e, e32);
            free(codes), free(rows), free(sinv), free(wf), free(x), free(xr), free(y), free(xq);
        }
}

/* ft_cpu_matmul on pools of 1, 2, 3 threads, with and without bias. */
TEST(matmul_pool_split_and_bias) {
    static const int Ns[] = {1, 7, 37, 130};
    for (int p = 1; p <= 3; p++) {
        struct ft_pool *pool;
        EXPECT_OK(ft_pool_init(&pool, p));
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (int d = 0; d < 3; d++)
                for (int T = 1; T <= 5; T += 4) {
                    int N = Ns[ni], K = 33;
                    float *x = frand_buf((size_t)T * K), *bias = frand_buf((size_t)N);
                    float *wf = malloc((size_t)N * K * sizeof *wf), *y = malloc((size_t)T * N * 4);
                    const void *w;
                    void *mem = make_weights(k_dtypes[d], (size_t)N * K, &w, wf);
                    ft_cpu_matmul(pool, y, x, w, k_dtypes[d], NULL, T, N, K);
                    double e = matmul_err(y, N, x, K, wf, T, 0, N, K);
                    ft_cpu_matmul(pool, y, x, w, k_dtypes[d], bias, T, N, K);
                    double eb = 0.0;
                    for (int t = 0; t < T; t++)
                        for (int n = 0; n < N; n++) {
                            double ref = bias[n];
                            for (int k = 0; k < K; k++)
                                ref += (double)x[t * K + k] * wf[n * K + k];
                            eb = fmax(eb, fabs(y[t * N + n] - ref));
                        }
                    CHECK_(e <= 1.0 && eb < 1e-5, "pool %d N=%d T=%d %s: err %.3g, bias err %.3g",
                           p, N, T, ft_dtype_name(k_dtypes[d]), e, eb);
                    free(x), free(bias), free(wf), free(y), free(mem);
                }
        ft_pool_free(pool);
    }
}

/* ---------------------------------------------------------------- small ops */

TEST(embed_converts_rows) {
    int V = 9, H = 33, T = 4;
    int32_t ids[4] = {8, 0, 3, 3};
    for (int d = 0; d < 3; d++) {
        float *wf = malloc((size_t)V * H * 4), *out = malloc((size_t)T * H * 4);
        const void *w;
        void *mem = make_weights(k_dtypes[d], (size_t)V * H, &w, wf);
        ft_cpu_embed(out, w, k_dtypes[d], ids, T, H);
        int same = 1;
        for (int t = 0; t < T; t++)
            for (int i = 0; i < H; i++)
                same &= out[t * H + i] == wf[ids[t] * H + i];
        CHECK_(same, "embed %s", ft_dtype_name(k_dtypes[d]));
        free(wf), free(out), free(mem);
    }
}

TEST(rmsnorm_matches_reference_and_aliases) {
    int T = 3, H = 100;
    float eps = 1e-6f;
    float *x = frand_buf((size_t)T * H), *w = frand_buf((size_t)H), *y = malloc((size_t)T * H * 4);
    x[5] = 40.0f;
    ft_cpu_rmsnorm(y, x, w, T, H, eps);
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
        double ss = 0.0;
        for (int i = 0; i < H; i++)
            ss += (double)x[t * H + i] * x[t * H + i];
        double r = 1.0 / sqrt(ss / H + eps);
        for (int i = 0; i < H; i++) {
            double ref = x[t * H + i] * r * w[i];
            worst = fmax(worst, fabs(y[t * H + i] - ref) / (fabs(ref) + 1e-6));
        }
    }
    CHECK_(worst < 2e-6, "rmsnorm rel err %.3g", worst);
    ft_cpu_rmsnorm(x, x, w, T, H, eps); /* in place */
    int same = 1;
    for (int i = 0; i < T * H; i++)
        same &= x[i] == y[i];
    EXPECT(same);
    free(x), free(w), free(y);
}

TEST(rope_rotate_half_partial_and_mscale) {
    int T = 3, nh = 2, hd = 24, rot = 16;
    int32_t pos[3] = {0, 7, 4093};
    float inv[8], mscale = 1.25f;
    for (int i = 0; i < rot / 2; i++)
        inv[i] = powf(10000.0f, -2.0f * i / rot);
    float *x = frand_buf((size_t)T * nh * hd), *x0 = malloc((size_t)T * nh * hd * 4);
    memcpy(x0, x, (size_t)T * nh * hd * 4);
    ft_cpu_rope(x, pos, inv, mscale, T, nh, hd, rot);
    double worst = 0.0;
    int tail_same = 1;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *a = x0 + (t * nh + h) * hd, *b = x + (t * nh + h) * hd;
            for (int i = 0; i < rot / 2; i++) {
                double ang = (double)((float)pos[t] * inv[i]); /* fp32 angle, like HF */
                double c = cos(ang) * mscale, s = sin(ang) * mscale;
                worst = fmax(worst, fabs(b[i] - (a[i] * c - a[i + rot / 2] * s)));
                worst = fmax(worst, fabs(b[i + rot / 2] - (a[i + rot / 2] * c + a[i] * s)));
            }
            for (int i = rot; i < hd; i++)
                tail_same &= a[i] == b[i];
        }
    CHECK_(worst < 1e-5, "rope err %.3g", worst);
    EXPECT(tail_same);
    free(x), free(x0);
}

TEST(silu_mul_and_add) {
    int T = 2, I = 7;
    float *gu = frand_buf((size_t)T * 2 * I), out[14], y[5] = {1, 2, 3, 4, 5},
          d[5] = {1, 1, 1, 1, -5};
    gu[0] = 30.0f, gu[1] = -30.0f;
    ft_cpu_silu_mul(out, gu, T, I);
    double worst = 0.0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < I; i++) {
            double g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
            worst = fmax(worst, fabs(out[t * I + i] - g / (1.0 + exp(-g)) * u));
        }
    CHECK_(worst < 1e-6, "silu_mul err %.3g", worst);
    ft_cpu_add(y, d, 5);
    EXPECT(y[0] == 2 && y[3] == 5 && y[4] == 0);
    free(gu);
}

/* The gated activations on every ISA tier (vector e^x on AVX2 / AVX-512) against double:
 * within 1e-6 of each value plus the rounding of e^x's float argument a (|a| 2^-23 relative:
 * the scalar libm tier has it too), plus 1e-30 where e^x under- or overflows; g from -100 to
 * 100, a row length that leaves vector tails; gpt-oss's and DeepSeek-V4's clamped forms too; a
 * NaN u stays NaN. */
TEST(gated_activations_every_tier) {
    enum { T = 3, I = 37 };
    float gu[T * 2 * I], out[T * I];
    for (int i = 0; i < T * 2 * I; i++) gu[i] = -100.0f + 200.0f * (float)((i * 7919) % 1000) / 999.0f;
    gu[1] = 0.0f, gu[2] = -88.5f, gu[3] = 88.5f, gu[4] = 1e-3f, gu[I + 5] = NAN;
    enum ft_cpu_isa best = ft_cpu_isa();
    for (int tier = FT_ISA_SCALAR; tier <= (int)best; tier++) {
        if ((int)ft_cpu_set_isa((enum ft_cpu_isa)tier) != tier) continue;
        for (int clamped = 0; clamped < 3; clamped++) { /* PLAIN, OAI, CLAMP */
            if (clamped) ft_cpu_swiglu(out, gu, T, I, (enum ft_swiglu)clamped, 7.0f, 1.702f);
            else ft_cpu_silu_mul(out, gu, T, I);
            double worst = 0;
            int nan_ok = 1;
            for (int t = 0; t < T; t++)
                for (int i = 0; i < I; i++) {
                    double g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i], ref, a;
                    if (clamped) {
                        g = g < 7.0 ? g : 7.0;
                        u = u < -7.0 ? -7.0 : u > 7.0 ? 7.0 : u;
                        a = clamped == FT_SWIGLU_CLAMP ? -g : -(double)1.702f * g; /* alpha as the float it is */
                        ref = (u + (clamped == FT_SWIGLU_CLAMP ? 0.0 : 1.0)) * g / (1.0 + exp(a));
                    } else {
                        a = -g;
                        ref = g / (1.0 + exp(a)) * u;
                    }
                    double got = out[t * I + i];
                    if (isnan(u)) {
                        nan_ok &= isnan(got);
                        continue;
                    }
                    double rel = 1e-6 + fabs(a) * 0x1p-23;
                    worst = fmax(worst, fabs(got - ref) / (rel * fabs(ref) + 1e-30));
                }
            fprintf(stderr, "  %-11s %s: err/tol %.3f\n", ft_cpu_isa_name((enum ft_cpu_isa)tier),
                    clamped == 2 ? "V4 clamped" : clamped ? "clamped SwiGLU" : "SiLU * up", worst);
            CHECK_(worst <= 1.0, "%s %s: %.2f x tolerance", ft_cpu_isa_name((enum ft_cpu_isa)tier),
                   clamped ? "clamped" : "silu", worst);
            CHECK_(nan_ok, "%s: a NaN up value did not stay NaN", ft_cpu_isa_name((enum ft_cpu_isa)tier));
        }
    }
    ft_cpu_set_isa(best);
}

/* ft_cpu_exp_shift (the sampler's weights) on every tier against exp in double: each value
 * within 2 ulp-ish (1e-6 relative plus the float rounding of x - shift), exactly 0 where x is
 * -inf or NaN, and the returned sum within 1e-6 of the values' sum; 1..40 values (the masked
 * tails). */
TEST(exp_shift_every_tier) {
    float x[40], y[40];
    const float shift = 3.25f;
    for (int i = 0; i < 40; i++) x[i] = shift - 0.37f * (float)i * (float)(i % 3 + 1);
    x[5] = -INFINITY, x[17] = -INFINITY, x[39] = shift - 120.0f; /* far below: 0 or subnormal */
    x[2] = NAN, x[38] = NAN; /* a vector lane and a scalar tail */
    enum ft_cpu_isa best = ft_cpu_isa();
    for (int tier = FT_ISA_SCALAR; tier <= (int)best; tier++) {
        if ((int)ft_cpu_set_isa((enum ft_cpu_isa)tier) != tier) continue;
        for (int n = 1; n <= 40; n++) {
            double sum = ft_cpu_exp_shift(y, x, n, shift), want = 0, worst = 0;
            int zeros = 1;
            for (int i = 0; i < n; i++) {
                double d = (double)(x[i] - shift), ref = isinf(x[i]) ? 0.0 : exp(d);
                want += y[i];
                if (isinf(x[i]) || isnan(x[i])) {
                    zeros &= y[i] == 0.0f;
                    continue;
                }
                double tol = (1e-6 + fabs(d) * 0x1p-23) * ref + 1e-40;
                worst = fmax(worst, fabs(y[i] - ref) / tol);
            }
            CHECK_(worst <= 1.0 && zeros, "%s, n %d: %.2f x tolerance, -inf and NaN give 0: %d",
                   ft_cpu_isa_name((enum ft_cpu_isa)tier), n, worst, zeros);
            CHECK_(fabs(sum - want) <= 1e-6 * want, "%s, n %d: sum %.9g against %.9g",
                   ft_cpu_isa_name((enum ft_cpu_isa)tier), n, sum, want);
        }
    }
    ft_cpu_set_isa(best);
}

TEST(softmax_stable_with_large_values) {
    float a[4] = {1000.0f, 1001.0f, -1e30f, 1000.0f};
    ft_cpu_softmax(a, 4);
    double e = exp(-1.0), z = 2 * e + 1;
    EXPECT_NEAR(a[0], e / z, 1e-6);
    EXPECT_NEAR(a[1], 1 / z, 1e-6);
    EXPECT(a[2] == 0.0f);
    EXPECT_NEAR(a[0] + a[1] + a[2] + a[3], 1.0, 1e-6);
    float b[3] = {3e38f, 3e38f, 3e38f};
    ft_cpu_softmax(b, 3);
    EXPECT_NEAR(b[1], 1.0 / 3, 1e-7);
    float c[1] = {-50.0f};
    ft_cpu_softmax(c, 1);
    EXPECT(c[0] == 1.0f);
}

TEST(topk_order_and_ties) {
    float x[7] = {1, 3, 3, 2, 3, -1, 5};
    int idx[4];
    float val[4];
    ft_cpu_topk(x, 7, 4, idx, val);
    EXPECT(idx[0] == 6 && idx[1] == 1 && idx[2] == 2 && idx[3] == 4);
    EXPECT(val[0] == 5 && val[3] == 3);
    float eq[5] = {0, 0, 0, 0, 0};
    ft_cpu_topk(eq, 5, 3, idx, val);
    EXPECT(idx[0] == 0 && idx[1] == 1 && idx[2] == 2);
    /* random n = 512, k = 32 against a full selection sort with the same tie rule */
    float r[512];
    for (int i = 0; i < 512; i++)
        r[i] = (float)(int)(frand() * 50); /* many ties */
    int ki[32], ok = 1;
    float kv[32];
    ft_cpu_topk(r, 512, 32, ki, kv);
    char used[512] = {0};
    for (int j = 0; j < 32; j++) {
        int b = -1;
        for (int i = 0; i < 512; i++)
            if (!used[i] && (b < 0 || r[i] > r[b])) b = i;
        used[b] = 1;
        ok &= ki[j] == b && kv[j] == r[b];
    }
    EXPECT(ok);
}

/* ---------------------------------------------------------------- attention */

/* Double reference of one configuration; returns the largest abs error. */
static double attn_err(const float *out, const float *q, const float *k, const float *v,
                       const int32_t *pos, int T, int nh, int nkv, int hd, float scale,
                       int window) {
    int pmax = 0;
    for (int t = 0; t < T; t++)
        pmax = pos[t] > pmax ? pos[t] : pmax;
    double worst = 0.0, *s = malloc((size_t)(pmax + 1) * sizeof *s);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            int kvh = h / (nh / nkv), p0 = window > 0 ? pos[t] - window + 1 : 0;
            p0 = p0 < 0 ? 0 : p0;
            double m = -INFINITY, l = 0.0;
            for (int p = p0; p <= pos[t]; p++) {
                double d = 0.0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[(t * nh + h) * hd + i] * k[(p * nkv + kvh) * hd + i];
                s[p] = d * scale;
                m = fmax(m, s[p]);
            }
            for (int p = p0; p <= pos[t]; p++)
                l += exp(s[p] - m);
            for (int i = 0; i < hd; i++) {
                double o = 0.0;
                for (int p = p0; p <= pos[t]; p++)
                    o += exp(s[p] - m) / l * v[(p * nkv + kvh) * hd + i];
                worst = fmax(worst, fabs(out[(t * nh + h) * hd + i] - o));
            }
        }
    free(s);
    return worst;
}

TEST(attention_gqa_window_tiers_pools) {
    static const int Ts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17};
    int nh = 6, nkv = 2, S = 64;
    enum ft_cpu_isa ts[4];
    int nt = tiers(ts);
    for (int hdi = 0; hdi < 3; hdi++) { /* 64 and 128 take the AVX-512 register kernels */
        int hd = hdi == 2 ? 128 : hdi ? 64 : 24;
        float *k = frand_buf((size_t)S * nkv * hd), *v = frand_buf((size_t)S * nkv * hd);
        float *q = frand_buf((size_t)17 * nh * hd), *out = malloc((size_t)17 * nh * hd * 4);
        for (int i = 0; i < 17 * nh * hd; i++)
            q[i] *= 4.0f; /* peaky softmax */
        for (int p = 1; p <= 3; p++) {
            struct ft_pool *pool;
            EXPECT_OK(ft_pool_init(&pool, p));
            for (int a = 0; a < nt; a++) {
                ft_cpu_set_isa(ts[a]);
                for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
                    for (int window = 0; window <= 5; window += 5) {
                        int T = Ts[ti];
                        int32_t pos[17];
                        for (int t = 0; t < T; t++)
                            pos[t] = (T == 1 ? 40 : 30) + t; /* cache + new */
                        float scale = 1.0f / sqrtf((float)hd);
                        ft_cpu_attention(pool, out, q, k, v, pos, T, nh, nkv, hd, scale, window);
                        double e = attn_err(out, q, k, v, pos, T, nh, nkv, hd, scale, window);
                        CHECK_(e < 2e-5, "attention %s pool %d hd %d T %d window %d: err %.3g",
                               ft_cpu_isa_name(ts[a]), p, hd, T, window, e);
                    }
            }
            ft_pool_free(pool);
        }
        free(k), free(v), free(q), free(out);
    }
    ft_cpu_set_isa(FT_ISA_AVX512_BF16);
}

TEST(attention_long_context_blocks) {
    /* positions beyond one online-softmax block, MHA (ratio 1), NULL pool */
    int S = 300, nh = 2, nkv = 2, hd = 40, T = 2;
    float *k = frand_buf((size_t)S * nkv * hd), *v = frand_buf((size_t)S * nkv * hd);
    float *q = frand_buf((size_t)T * nh * hd), *out = malloc((size_t)T * nh * hd * 4);
    int32_t pos[2] = {200, 299};
    for (int i = 0; i < T * nh * hd; i++)
        q[i] *= 3.0f;
    ft_cpu_attention(NULL, out, q, k, v, pos, T, nh, nkv, hd, 0.2f, 0);
    double e = attn_err(out, q, k, v, pos, T, nh, nkv, hd, 0.2f, 0);
    CHECK_(e < 2e-5, "long attention err %.3g", e);
    ft_cpu_attention(NULL, out, q, k, v, pos, T, nh, nkv, hd, 0.2f, 100); /* window > block */
    e = attn_err(out, q, k, v, pos, T, nh, nkv, hd, 0.2f, 100);
    CHECK_(e < 2e-5, "long windowed attention err %.3g", e);
    free(k), free(v), free(q), free(out);
}

/* ---------------------------------------------------------------- dram ----- */

TEST(dram_probe_returns_a_rate) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    double g = ft_cpu_dram_read_gbps(pool, 16u << 20, 2);
    CHECK_(g > 0.1 && g < 10000.0, "dram probe %.2f GB/s", g);
    ft_pool_free(pool);
}

/* Paged attention == contiguous attention when the pool rows are the contiguous cache
 * scattered through a shuffled block table (two sequences of different lengths in one call). */
TEST(attention_paged_matches_contiguous) {
    enum { NH = 6, NKV = 2, HD = 24, BS = 16, S0 = 70, S1 = 37, NB = 16 };
    int kvd = NKV * HD;
    float *k0 = malloc((size_t)S0 * kvd * 4), *v0 = malloc((size_t)S0 * kvd * 4);
    float *k1 = malloc((size_t)S1 * kvd * 4), *v1 = malloc((size_t)S1 * kvd * 4);
    float *kp = calloc((size_t)NB * BS * kvd, 4), *vp = calloc((size_t)NB * BS * kvd, 4);
    float q[3 * NH * HD], ref[3 * NH * HD], got[3 * NH * HD];
    for (int i = 0; i < S0 * kvd; i++) k0[i] = frand(), v0[i] = frand();
    for (int i = 0; i < S1 * kvd; i++) k1[i] = frand(), v1[i] = frand();
    for (int i = 0; i < 3 * NH * HD; i++) q[i] = frand();
    int32_t bt0[5] = {7, 2, 11, 0, 5}, bt1[3] = {9, 14, 3};
    for (int p = 0; p < S0; p++) {
        size_t row = (size_t)bt0[p / BS] * BS + p % BS;
        memcpy(kp + row * kvd, k0 + (size_t)p * kvd, (size_t)kvd * 4);
        memcpy(vp + row * kvd, v0 + (size_t)p * kvd, (size_t)kvd * 4);
    }
    for (int p = 0; p < S1; p++) {
        size_t row = (size_t)bt1[p / BS] * BS + p % BS;
        memcpy(kp + row * kvd, k1 + (size_t)p * kvd, (size_t)kvd * 4);
        memcpy(vp + row * kvd, v1 + (size_t)p * kvd, (size_t)kvd * 4);
    }
    /* tokens: seq0 at positions 68, 69; seq1 at position 36 */
    int32_t pos[3] = {68, 69, 36};
    const int32_t *blocks[3] = {bt0, bt0, bt1};
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 3));
    for (int window = 0; window <= 20; window += 20) {
        ft_cpu_attention(pool, ref, q, k0, v0, pos, 2, NH, NKV, HD, 0.2f, window);
        ft_cpu_attention(pool, ref + 2 * NH * HD, q + 2 * NH * HD, k1, v1, pos + 2, 1, NH, NKV,
                         HD, 0.2f, window);
        ft_cpu_attention_paged(pool, got, q, kp, vp, pos, blocks, BS, 3, NH, NKV, HD, 0.2f, window, NULL);
        double e = 0;
        for (int i = 0; i < 3 * NH * HD; i++) e = fmax(e, fabs(ref[i] - got[i]));
        EXPECT(e < 1e-6);
    }
    ft_pool_free(pool);
    free(k0), free(v0), free(k1), free(v1), free(kp), free(vp);
}

TEST_MAIN("cpu_ops")
