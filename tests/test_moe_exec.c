/* test_moe_exec.c — the CPU expert executor (moe/cpu_exec.c) against a dequantise-and-matmul
 * reference written here in double precision, for every expert format a bank can hold (bf16,
 * f16, f32 and the GGML block formats, with gate_up and down in different formats as Q4_K_M
 * files have them), on every ISA tier, for one token and a batch, through a 2-thread pool.
 * Block formats get random bytes with sane scale fields; their values are whatever the exact
 * dequantiser (format/ggml_quant.c, bit-exact against the gguf package) says they are.
 * Tolerance: 1e-5 of the sum of |terms| of each output of the down projection (fp32
 * accumulation of exact products; the gate/up error it inherits measured below 1% of that).
 * The int8-activation path (ft_moe_exec_set_fast_act) is checked against the same reference at
 * INT8_REL. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/ops.h"
#include "core/env.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "format/ggml_quant.h"
#include "ggml_fill.h"
#include "moe/cpu_exec.h"
#include "test.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;

#define INT8_REL 1e-2 /* fast (int8 / bf16) activations: of the sum of |terms| (see check_formats) */

static float frand(void) { return fill_frand(&g_rng); }

/* Row r of a matrix in format t, as floats. */
static void row_f32(enum ft_dtype t, const uint8_t *p, int r, int cols, float *out) {
    const uint8_t *row = p + (size_t)r * ft_dtype_row_bytes(t, cols);
    if (ft_dtype_is_block(t)) {
        EXPECT_OK(ft_ggml_dequant_row(ft_dtype_ggml(t), row, out, cols));
        return;
    }
    ft_to_f32(out, row, t, (size_t)cols);
}

/* E experts of hidden H and width I with random rows: gate_up in format tg, down in td. */
static void random_banks(struct ft_bank *gu, struct ft_bank *dn, enum ft_dtype tg,
                         enum ft_dtype td, int E, int H, int I) {
    EXPECT_OK(ft_bank_init(gu, ft_row_schema_for(tg), FT_BANK_GATE_UP, E, 2 * I, H));
    EXPECT_OK(ft_bank_init(dn, ft_row_schema_for(td), FT_BANK_DOWN, E, H, I));
    for (int e = 0; e < E; e++) {
        fill_matrix(tg, ft_bank_expert(gu, e), 2 * I, H, &g_rng);
        fill_matrix(td, ft_bank_expert(dn, e), H, I, &g_rng);
    }
}

/* One case: experts with gate_up in format tg and down in td. */
static void check_formats(enum ft_dtype tg, enum ft_dtype td, struct ft_pool *pool) {
    const int E = 5, H = 256, I = 512, k = 2, Tmax = 3;
    struct ft_bank gu, dn;
    random_banks(&gu, &dn, tg, td, E, H, I);
    /* dequantised reference weights */
    float *wg = malloc((size_t)E * 2 * I * H * sizeof *wg), *wd = malloc((size_t)E * H * I * sizeof *wd);
    for (int e = 0; e < E; e++) {
        for (int r = 0; r < 2 * I; r++) row_f32(tg, ft_bank_expert(&gu, e), r, H, wg + ((size_t)e * 2 * I + r) * H);
        for (int r = 0; r < H; r++) row_f32(td, ft_bank_expert(&dn, e), r, I, wd + ((size_t)e * H + r) * I);
    }
    float x[3 * 256], out[3 * 256];
    int ids[6] = {4, 1, 1, 3, 0, 4};
    float w[6] = {0.7f, 0.3f, 0.55f, 0.45f, 0.2f, 0.8f};
    for (int i = 0; i < Tmax * H; i++) x[i] = frand();
    struct ft_moe_exec *ex = NULL;
    EXPECT_OK(ft_moe_exec_init(&ex, Tmax, k, E, H, I));
    enum ft_cpu_isa best = ft_cpu_isa();
    /* fast activations (where the format has the path; bf16 weights on AVX512-BF16 tiers):
     * within INT8_REL of the same sum of |terms| instead: x is rounded to 8 bits (per-element
     * error <= max|x| / 254 of its block) or to bf16 before each projection, the weights still
     * exact (test_ggml_dot and test_cpu_ops check those dots exactly against the dequantised
     * weights and rounded activations). */
    const int quant = ft_cpu_xq_bytes(tg, H) > 0 || ft_cpu_xq_bytes(td, I) > 0;
    for (int pass = 0; ex && pass < 1 + quant; pass++)
    for (int tier = FT_ISA_SCALAR; ex && tier <= (int)best; tier++) {
        if ((int)ft_cpu_set_isa((enum ft_cpu_isa)tier) != tier) continue;
        ft_moe_exec_set_fast_act(ex, pass);
        const double rel = pass ? INT8_REL : 1e-5;
        for (int T = 1; T <= Tmax; T += Tmax - 1) {
            memset(out, 0, sizeof out);
            ft_moe_exec_set_fused(ex, 0); /* the four-job step first (the default is fused) */
            int nd = ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, out);
            { /* the fused step (one pool job) gives the same bits */
                float fo[3 * 256] = {0};
                ft_moe_exec_set_fused(ex, 1);
                EXPECT_EQ(ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, fo), nd);
                ft_moe_exec_set_fused(ex, 0);
                CHECK_(!memcmp(fo, out, (size_t)T * H * sizeof(float)), "%s/%s %s T=%d: fused differs",
                       ft_dtype_name(tg), ft_dtype_name(td), ft_cpu_isa_name((enum ft_cpu_isa)tier), T);
            }
            double worst = 0;
            for (int t = 0; t < T; t++) {
                double ref[256] = {0}, mag[256] = {0};
                for (int j = 0; j < k; j++) {
                    int e = ids[t * k + j];
                    double act[512];
                    for (int i = 0; i < I; i++) { /* silu(gate x) * up x, in double */
                        double g = 0, u = 0;
                        for (int h = 0; h < H; h++) {
                            double xg = (double)x[t * H + h];
                            g += xg * wg[((size_t)e * 2 * I + i) * H + h];
                            u += xg * wg[((size_t)e * 2 * I + I + i) * H + h];
                        }
                        act[i] = g / (1 + exp(-g)) * u;
                    }
                    for (int h = 0; h < H; h++) {
                        double y = 0, m = 0;
                        for (int i = 0; i < I; i++) {
                            double wi = wd[((size_t)e * H + h) * I + i];
                            y += act[i] * wi;
                            m += fabs(act[i] * wi);
                        }
                        ref[h] += w[t * k + j] * y;
                        mag[h] += w[t * k + j] * m;
                    }
                }
                for (int h = 0; h < H; h++) {
                    double err = fabs(out[t * H + h] - ref[h]) / (rel * mag[h] + 1e-30);
                    worst = err > worst ? err : worst;
                }
            }
            if (pass) { /* the rounded path ran exactly where this tier has it */
                float exact[3 * 256] = {0};
                int here = ft_cpu_xq_bytes(tg, H) > 0 || ft_cpu_xq_bytes(td, I) > 0;
                ft_moe_exec_set_fast_act(ex, 0);
                ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, exact);
                ft_moe_exec_set_fast_act(ex, 1);
                int differs = memcmp(exact, out, (size_t)T * H * sizeof(float)) != 0;
                CHECK_(differs == here, "%s/%s %s T=%d: the fast path %s the exact output",
                       ft_dtype_name(tg), ft_dtype_name(td), ft_cpu_isa_name((enum ft_cpu_isa)tier),
                       T, differs ? "differs from" : "gave");
            }
            int want = T == 1 ? 2 : 4; /* distinct experts: {4,1}, {4,1,3,0} */
            fprintf(stderr, "  %-5s x %-5s %-11s T=%d%s  err/tol %.3f\n", ft_dtype_name(tg),
                    ft_dtype_name(td), ft_cpu_isa_name((enum ft_cpu_isa)tier), T,
                    pass ? " int8" : "", worst);
            CHECK_(worst <= 1.0, "%s/%s %s T=%d%s: executor off the reference by %.2f x tolerance",
                   ft_dtype_name(tg), ft_dtype_name(td), ft_cpu_isa_name((enum ft_cpu_isa)tier), T,
                   pass ? " int8" : "", worst);
            EXPECT_EQ(nd, want);
        }
    }
    ft_cpu_set_isa(best);
    ft_moe_exec_free(ex);
    free(wg), free(wd);
    ft_bank_free(&gu);
    ft_bank_free(&dn);
}

TEST(executor_matches_dequantised_reference_every_format) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    static const enum ft_dtype fmts[][2] = {
        {FT_DTYPE_BF16, FT_DTYPE_BF16}, {FT_DTYPE_F16, FT_DTYPE_F32},   {FT_DTYPE_Q4_K, FT_DTYPE_Q6_K},
        {FT_DTYPE_Q4_K, FT_DTYPE_Q4_K}, {FT_DTYPE_Q5_K, FT_DTYPE_Q8_0}, {FT_DTYPE_Q4_0, FT_DTYPE_MXFP4},
        {FT_DTYPE_Q5_0, FT_DTYPE_Q4_1}, {FT_DTYPE_Q5_1, FT_DTYPE_Q6_K}, {FT_DTYPE_FP8_B128, FT_DTYPE_NVFP4},
    };
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) check_formats(fmts[i][0], fmts[i][1], pool);
    ft_pool_free(pool);
}

/* The pool splits (rows handed out in guided stretches, the activation and the combine split
 * over workers above ACT_POOL_MIN / COMBINE_POOL_MIN elements) change no bit of the output: 1, 2 and 3 workers agree,
 * with gpt-oss's biases and clamped SwiGLU, on both the exact and the rounded path, four
 * pool jobs or one (fused: the passes' rows on one cursor, repeated to catch a race); and the
 * pairs given in any order (run_pairs) equal the same pairs from run. */
TEST(executor_same_bits_any_pool_split_or_pair_order) {
    enum { E = 6, H = 512, I = 256, k = 4, T = 40 }; /* 160 rows: the activation pooled */
    struct ft_bank gu, dn;
    random_banks(&gu, &dn, FT_DTYPE_MXFP4, FT_DTYPE_BF16, E, H, I);
    static float gub[E * 2 * I], dnb[E * H], x[T * H], out[3][T * H], shuf[T * H], fo[T * H];
    for (int i = 0; i < E * 2 * I; i++) gub[i] = frand();
    for (int i = 0; i < E * H; i++) dnb[i] = frand();
    for (int i = 0; i < T * H; i++) x[i] = 3 * frand();
    struct ft_expert_act act = {.limit = 7.0f, .alpha = 1.702f, .gu_bias = gub, .down_bias = dnb};
    int ids[T * k], tok[T * k], sid[T * k], stok[T * k];
    float w[T * k], sw[T * k];
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) ids[t * k + j] = (t * 3 + j * 5) % E, w[t * k + j] = 0.1f + 0.2f * j;
    for (int p = 0; p < T * k; p++) { /* the same pairs, reversed */
        int q = T * k - 1 - p;
        sid[p] = ids[q], stok[p] = q / k, sw[p] = w[q], tok[p] = p / k;
    }
    (void)tok;
    struct ft_moe_exec *ex = NULL;
    EXPECT_OK(ft_moe_exec_init(&ex, T, k, E, H, I));
    for (int fast = 0; ex && fast < 2; fast++) {
        ft_moe_exec_set_fast_act(ex, fast);
        ft_moe_exec_set_fused(ex, 0); /* the four-job step is the reference (the default is fused) */
        for (int n = 1; n <= 3; n++) {
            struct ft_pool *pool;
            EXPECT_OK(ft_pool_init(&pool, n));
            memset(out[n - 1], 0, sizeof out[0]);
            EXPECT_EQ(ft_moe_exec_run(ex, pool, &gu, &dn, &act, x, ids, w, T, k, out[n - 1]), E);
            ft_moe_exec_set_fused(ex, 1);
            for (int rep = 0; rep < 20; rep++) {
                memset(fo, 0, sizeof fo);
                EXPECT_EQ(ft_moe_exec_run(ex, pool, &gu, &dn, &act, x, ids, w, T, k, fo), E);
                CHECK_(!memcmp(fo, out[n - 1], sizeof fo), "fast=%d, %d workers: fused differs (run %d)",
                       fast, n, rep);
                /* decode-sized: one token's k pairs, rows below the pooled combine */
                memset(fo, 0, sizeof fo), memset(shuf, 0, sizeof shuf);
                ft_moe_exec_run(ex, pool, &gu, &dn, &act, x, ids, w, 1, k, fo);
                ft_moe_exec_set_fused(ex, 0);
                ft_moe_exec_run(ex, pool, &gu, &dn, &act, x, ids, w, 1, k, shuf);
                ft_moe_exec_set_fused(ex, 1);
                CHECK_(!memcmp(fo, shuf, sizeof fo), "fast=%d, %d workers: fused T=1 differs", fast, n);
            }
            ft_moe_exec_set_fused(ex, 0);
            if (n == 3) {
                memset(shuf, 0, sizeof shuf);
                ft_moe_exec_run_pairs(ex, pool, &gu, &dn, &act, x, stok, sid, sw, T * k, shuf);
                CHECK_(!memcmp(shuf, out[0], sizeof shuf), "fast=%d: pairs in reverse order differ", fast);
                /* three tokens each through experts 0..k-1: every expert's rows are consecutive
                 * tokens, so the rounded path's gate/up pass reads each token's input where it
                 * was rounded; reversed, each expert's tokens run 2, 1, 0 and are copied per
                 * row. The same bits, fused or not. */
                int cid[3 * k], ctok[3 * k], rid[3 * k], rtok[3 * k];
                float cw[3 * k], rw[3 * k];
                for (int p = 0; p < 3 * k; p++) cid[p] = p % k, ctok[p] = p / k, cw[p] = w[p];
                for (int p = 0; p < 3 * k; p++)
                    rid[p] = cid[3 * k - 1 - p], rtok[p] = ctok[3 * k - 1 - p], rw[p] = cw[3 * k - 1 - p];
                for (int fu = 0; fu < 2; fu++) {
                    ft_moe_exec_set_fused(ex, fu);
                    memset(fo, 0, sizeof fo), memset(shuf, 0, sizeof shuf);
                    EXPECT_EQ(ft_moe_exec_run_pairs(ex, pool, &gu, &dn, &act, x, ctok, cid, cw, 3 * k, fo), k);
                    EXPECT_EQ(ft_moe_exec_run_pairs(ex, pool, &gu, &dn, &act, x, rtok, rid, rw, 3 * k, shuf), k);
                    CHECK_(!memcmp(fo, shuf, 3 * H * sizeof(float)) && fo[0] != 0.0f,
                           "fast=%d fused=%d: consecutive tokens in place differ from copied", fast, fu);
                }
                ft_moe_exec_set_fused(ex, 0);
            }
            ft_pool_free(pool);
        }
        double mag = 0;
        for (int i = 0; i < T * H; i++) mag += fabs(out[0][i]);
        CHECK_(mag > 0 && isfinite(mag), "fast=%d: output is %g", fast, mag);
        CHECK_(!memcmp(out[0], out[1], sizeof out[0]), "fast=%d: 1 and 2 workers differ", fast);
        CHECK_(!memcmp(out[0], out[2], sizeof out[0]), "fast=%d: 1 and 3 workers differ", fast);
    }
    ft_moe_exec_free(ex);
    ft_bank_free(&gu);
    ft_bank_free(&dn);
}

/* ft_moe_exec_set_hook: the hook runs once, in the next call, on the calling thread (the
 * pool's worker 0: the engine thread issues CUDA copies there), and changes no output bit;
 * the call after has no hook. Fused or not. */
struct hook_seen {
    int calls;
    pthread_t thread;
};
static void count_hook(void *ctx) {
    struct hook_seen *h = ctx;
    h->calls++;
    h->thread = pthread_self();
}

TEST(hook_runs_once_on_the_caller) {
    enum { E = 4, H = 256, I = 128, k = 2, T = 3 };
    struct ft_bank gu, dn;
    random_banks(&gu, &dn, FT_DTYPE_BF16, FT_DTYPE_BF16, E, H, I);
    static float x[T * H], a[T * H], b[T * H], c[T * H];
    for (int i = 0; i < T * H; i++) x[i] = frand();
    int ids[T * k] = {0, 3, 1, 2, 3, 0};
    float w[T * k] = {0.6f, 0.4f, 0.5f, 0.5f, 0.9f, 0.1f};
    struct ft_moe_exec *ex = NULL;
    struct ft_pool *pool = NULL;
    EXPECT_OK(ft_moe_exec_init(&ex, T, k, E, H, I));
    EXPECT_OK(ft_pool_init(&pool, 3));
    for (int fused = 0; ex && pool && fused < 2; fused++) { /* four pool jobs, or one */
        struct hook_seen h = {0};
        ft_moe_exec_set_fused(ex, fused);
        ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, a);
        ft_moe_exec_set_hook(ex, count_hook, &h);
        ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, b);
        EXPECT_EQ(h.calls, 1);
        EXPECT(h.calls == 1 && pthread_equal(h.thread, pthread_self()));
        ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, c);
        EXPECT_EQ(h.calls, 1);
        EXPECT(!memcmp(a, b, sizeof a) && !memcmp(a, c, sizeof a));
    }
    ft_pool_free(pool);
    ft_moe_exec_free(ex);
    ft_bank_free(&gu);
    ft_bank_free(&dn);
}

/* The watchdog (FT_TEST_EXEC_STALL=32:1200:100: a worker of the 32nd call stalls 1.2 s, the
 * floor is 100 ms), fused or as four pool jobs: the stalled call returns -1 at its limit (the
 * floor, or 50x the warm steps' time in a slow build), long before the stall ends, with a
 * message naming the hang; a call while the worker is still asleep fails within about the
 * floor; once it is back the pool is free and a call gives the bits of the
 * call before the fault. Without the watchdog the same stall only delays the call. */
TEST(watchdog_abandons_a_stalled_step_and_recovers) {
    enum { E = 6, H = 256, I = 256, k = 2, T = 8 };
    struct ft_bank gu, dn;
    random_banks(&gu, &dn, FT_DTYPE_BF16, FT_DTYPE_BF16, E, H, I);
    static float x[T * H], a[T * H], b[T * H];
    for (int i = 0; i < T * H; i++) x[i] = frand();
    int ids[T * k];
    float w[T * k];
    for (int p = 0; p < T * k; p++) ids[p] = (p * 5 + p / k) % E, w[p] = 0.3f + 0.1f * (p % k);
    struct ft_pool *pool = NULL;
    EXPECT_OK(ft_pool_init(&pool, 2));
    setenv("FT_TEST_EXEC_STALL", "32:1200:100", 1);
    ft_env_reload();
    for (int mode = 0; pool && mode < 3; mode++) { /* 0: four jobs, 1: fused, 2: watchdog off */
        struct ft_moe_exec *ex = NULL;
        EXPECT_OK(ft_moe_exec_init(&ex, T, k, E, H, I));
        if (!ex) break;
        ft_moe_exec_set_fused(ex, mode != 0);
        ft_moe_exec_set_watchdog(ex, mode != 2);
        for (int warm = 0; warm < 31; warm++) { /* the time learned: warm steps' (1st is cold) */
            memset(a, 0, sizeof a);
            EXPECT_EQ(ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, a), E);
        }
        double lim = ft_moe_exec_limit_ns(ex, T * k) / 1e9;
        if (mode != 2 && lim > 0.8) { /* a slow build (TSan on a busy host): 50x its steps */
            printf("  mode %d: the watchdog's limit is %.3f s, too near the 1.2 s stall: not tested\n",
                   mode, lim);
            ft_moe_exec_free(ex);
            continue;
        }
        int64_t t0 = ft_time_ns();
        memset(b, 0, sizeof b);
        int d = ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, b);
        double took = (ft_time_ns() - t0) / 1e9;
        if (mode == 2) { /* no watchdog: it waits the stall out */
            EXPECT_EQ(d, E);
            CHECK_(took >= 1.15, "mode %d: the stalled call took %.3f s", mode, took);
            EXPECT(!memcmp(a, b, sizeof a));
            ft_moe_exec_free(ex);
            continue;
        }
        EXPECT_EQ(d, -1);
        EXPECT_CONTAINS(ft_error(), "hung");
        CHECK_(took < lim + 0.2, "mode %d: the stalled call returned after %.3f s (limit %.3f s)", mode,
               took, lim);
        EXPECT(ft_pool_busy(pool));
        EXPECT_EQ(ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, b), -1);
        EXPECT_CONTAINS(ft_error(), "still stuck");
        EXPECT((ft_time_ns() - t0) / 1e9 < 1.15);
        usleep((useconds_t)FT_MAX(0, (int)(1300000 - (ft_time_ns() - t0) / 1000)));
        EXPECT(!ft_pool_busy(pool));
        memset(b, 0, sizeof b);
        EXPECT_EQ(ft_moe_exec_run(ex, pool, &gu, &dn, NULL, x, ids, w, T, k, b), E);
        CHECK_(!memcmp(a, b, sizeof a), "mode %d: the call after the hang differs", mode);
        ft_moe_exec_free(ex);
    }
    unsetenv("FT_TEST_EXEC_STALL");
    ft_env_reload();
    ft_pool_free(pool);
    ft_bank_free(&gu);
    ft_bank_free(&dn);
}

TEST_MAIN("moe_exec")
