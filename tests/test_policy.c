/* test_policy.c — the hybrid split with synthetic costs (pure C): the modes, the optimum of
 * max(F * copy, (M - F) * cpu + fixed) (F > 0; M * cpu_alone + fixed at F = 0) checked against
 * brute force, movement toward the cheaper side as observed costs change, stability under
 * noisy observations, and copies that slow the CPU learnt as such. */
#include <math.h>
#include <stdint.h>

#include "moe/policy.h"
#include "test.h"

static int brute2(double copy, double cpu, double solo, double fixed, int m) {
    int best = 0;
    double bt = INFINITY;
    for (int f = 0; f <= m; f++) {
        double t = f ? fmax(f * copy, f < m ? (m - f) * cpu + fixed : 0.0) : m * solo + fixed;
        if (t < bt - 1e-12) bt = t, best = f;
    }
    return best;
}

static int brute(double copy, double cpu, double fixed, int m) { return brute2(copy, cpu, cpu, fixed, m); }

/* a finished step as the engine reports it: the copies, then the CPU's share beside them */
static void observe(struct ft_split *s, int layer, int nc, double copy_s, int ncpu, double cpu_s) {
    ft_split_observe_copy(s, layer, nc, copy_s);
    ft_split_observe_cpu(s, layer, ncpu, cpu_s, nc > 0);
}

TEST(modes_and_optimum) {
    struct ft_split s;
    EXPECT_OK(ft_split_init(&s, FT_MOE_OFFLOAD, 2, 1.0, 1.0, 1.0, 0.0));
    EXPECT_EQ(ft_split_fetch_count(&s, 0, 7), 7);
    s.mode = FT_MOE_CPU;
    EXPECT_EQ(ft_split_fetch_count(&s, 0, 7), 0);
    s.mode = FT_MOE_HYBRID;
    int bad = 0;
    for (int m = 0; m <= 40; m++)
        for (double cpu = 0.2; cpu < 3; cpu += 0.37)
            for (double fixed = 0; fixed < 5; fixed += 1.3)
                for (double solo = 0.5; solo <= 1.0; solo += 0.25) { /* alone: up to 2x faster */
                    s.layer[1] = (struct ft_split_costs){.copy_s = 1.0, .cpu_s = cpu,
                                                         .cpu_solo_s = solo * cpu, .cpu_fixed_s = fixed};
                    bad += ft_split_fetch_count(&s, 1, m) != brute2(1.0, cpu, solo * cpu, fixed, m);
                }
    EXPECT_EQ(bad, 0);
    ft_split_free(&s);
}

TEST(moves_toward_the_cheaper_side) {
    struct ft_split s;
    EXPECT_OK(ft_split_init(&s, FT_MOE_HYBRID, 1, 1e-3, 1e-3, 1e-3, 0.0));
    int f0 = ft_split_fetch_count(&s, 0, 20);
    EXPECT(f0 >= 9 && f0 <= 11); /* equal costs: about half */
    for (int i = 0; i < 60; i++) observe(&s, 0, 10, 10 * 3e-3, 10, 10 * 1e-3); /* copies slow */
    int f1 = ft_split_fetch_count(&s, 0, 20);
    EXPECT(f1 < f0 && f1 >= 4 && f1 <= 6); /* copy 3x dearer: about a quarter fetched */
    for (int i = 0; i < 120; i++) observe(&s, 0, 10, 10 * 1e-3, 10, 10 * 4e-3); /* CPU slow */
    int f2 = ft_split_fetch_count(&s, 0, 20);
    EXPECT(f2 > f0 && f2 >= 15);
    ft_split_free(&s);
}

TEST(stable_under_noise) {
    struct ft_split s;
    EXPECT_OK(ft_split_init(&s, FT_MOE_HYBRID, 1, 1e-3, 1e-3, 1e-3, 2e-4));
    uint64_t r = 1;
    int lo = 1 << 30, hi = -1, none = 0;
    for (int i = 0; i < 2000; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        double noise = 0.7 + 0.6 * (double)(r >> 11) / 9007199254740992.0; /* +-30% */
        observe(&s, 0, 8, 8 * 1.5e-3 * noise, 8, 2e-4 + 8 * 1e-3 / noise);
        int f = ft_split_fetch_count(&s, 0, 24);
        if (!f) /* the one-in-64 sample of the CPU alone, which is slower */
            ft_split_observe_cpu(&s, 0, 24, 2e-4 + 24 * 1e-3 / noise, 0);
        if (i >= 200) {
            if (!f) {
                none++;
                continue;
            }
            lo = f < lo ? f : lo, hi = f > hi ? f : hi;
        }
    }
    fprintf(stderr, "  F over the last 1800 noisy steps: %d..%d of 24, and none %d times\n", lo, hi, none);
    EXPECT(none <= 1800 / 64 + 1);
    EXPECT(hi - lo <= 3); /* the running average does not chase the noise */
    EXPECT(lo >= 7 && hi <= 12); /* around the noiseless optimum (9-10) */
    ft_split_free(&s);
}

/* Once the estimates have their first 8 samples, one stalled step (a 0.1 ms expert taking
 * 0.85 ms: seen on the H200 host under gVisor) moves the CPU estimate by at most 20% and leaves
 * the split where it was; a CPU that stays slow still moves it. A side that no call used for 64
 * calls in a row gets one expert back, and its estimate recovers from the samples that brings. */
TEST(a_stalled_step_does_not_swing_the_split) {
    struct ft_split s;
    EXPECT_OK(ft_split_init(&s, FT_MOE_HYBRID, 1, 0.2e-3, 0.1e-3, 0.1e-3, 0.05e-3));
    for (int i = 0; i < 8; i++) { /* the costs as guessed */
        observe(&s, 0, 2, 2 * 0.2e-3, 3, 0.05e-3 + 3 * 0.1e-3);
        ft_split_observe_cpu(&s, 0, 5, 0.05e-3 + 5 * 0.1e-3, 0);
    }
    const int f0 = ft_split_fetch_count(&s, 0, 5);
    EXPECT_EQ(f0, brute(0.2e-3, 0.1e-3, 0.05e-3, 5));
    observe(&s, 0, f0, f0 * 0.2e-3, 5 - f0, 0.05e-3 + (5 - f0) * 0.85e-3);
    fprintf(stderr, "  after one 0.85 ms sample: CPU %.3f ms an expert\n", 1e3 * s.layer[0].cpu_s);
    EXPECT(s.layer[0].cpu_s <= 1.2 * 0.1e-3 + 1e-12);
    EXPECT_EQ(ft_split_fetch_count(&s, 0, 5), f0);
    for (int i = 0; i < 40; i++) { /* slow beside copies and alone */
        observe(&s, 0, 2, 2 * 0.2e-3, 3, 0.05e-3 + 3 * 0.85e-3);
        ft_split_observe_cpu(&s, 0, 3, 0.05e-3 + 3 * 0.85e-3, 0);
    }
    fprintf(stderr, "  after 40 such samples: CPU %.3f ms an expert (%.3f alone)\n",
            1e3 * s.layer[0].cpu_s, 1e3 * s.layer[0].cpu_solo_s);
    EXPECT(fabs(s.layer[0].cpu_s - 0.85e-3) < 0.05e-3);
    EXPECT(fabs(s.layer[0].cpu_solo_s - 0.85e-3) < 0.05e-3);
    /* now every one of 3 misses is fetched; each 64th call gives one to the CPU */
    EXPECT_EQ(brute2(0.2e-3, s.layer[0].cpu_s, s.layer[0].cpu_solo_s, s.layer[0].cpu_fixed_s, 3), 3);
    int cpu_calls = 0;
    for (int i = 0; i < 128; i++) cpu_calls += ft_split_fetch_count(&s, 0, 3) < 3;
    EXPECT_EQ(cpu_calls, 2);
    /* the CPU is fast again: the samples those calls bring pull the estimate back down */
    int calls = 0;
    while (brute2(s.layer[0].copy_s, s.layer[0].cpu_s, s.layer[0].cpu_solo_s, s.layer[0].cpu_fixed_s, 3) == 3 &&
           calls < 64 * 40) {
        calls++;
        const int f = ft_split_fetch_count(&s, 0, 3);
        if (f < 3) observe(&s, 0, f, f * 0.2e-3, 3 - f, 0.05e-3 + (3 - f) * 0.1e-3);
    }
    fprintf(stderr, "  back to the CPU after %d calls (CPU %.3f ms an expert)\n", calls,
            1e3 * s.layer[0].cpu_s);
    EXPECT(calls < 64 * 40);
    ft_split_free(&s);
}

/* Shaped like the H200 host at 30G (2026-11-30): an expert copied in 0.215 ms, computed on the
 * CPU in 0.077 ms beside the copies (the split's log) and, as the cpu backend's shorter layer
 * steps suggest, 0.048 ms alone (they read the same DRAM); 0.05 ms fixed; four misses. From
 * one guess for both CPU rates the split must learn to fetch none (4 x 0.048 + 0.05 = 0.24 ms
 * against max(0.215, 3 x 0.077 + 0.05) = 0.28 with one fetched), while the same costs without
 * the slowdown keep one fetched. */
static int run_contention(double alone, int steps) {
    struct ft_split s;
    if (ft_split_init(&s, FT_MOE_HYBRID, 1, 0.2e-3, 0.07e-3, 0.07e-3, 0.05e-3) != FT_OK) return -1;
    int none = 0;
    for (int i = 0; i < steps; i++) {
        int f = ft_split_fetch_count(&s, 0, 4);
        ft_split_observe_copy(&s, 0, f, f * 0.215e-3);
        ft_split_observe_cpu(&s, 0, 4 - f, 0.05e-3 + (4 - f) * (f ? 0.077e-3 : alone), f > 0);
        if (i >= steps - 256) none += f == 0;
    }
    fprintf(stderr, "  CPU alone %.3f ms an expert: learnt %.3f alone, %.3f beside copies; fetched "
            "none in %d of the last 256 steps\n", 1e3 * alone, 1e3 * s.layer[0].cpu_solo_s,
            1e3 * s.layer[0].cpu_s, none);
    ft_split_free(&s);
    return none;
}

/* A starting guess 3x off: 8 samples take the estimate within 25% of the truth (the guess counts
 * as one sample), where a 10% running average alone would still be 86% off. */
TEST(a_far_guess_is_left_quickly) {
    struct ft_split s;
    EXPECT_OK(ft_split_init(&s, FT_MOE_HYBRID, 1, 0.2e-3, 0.15e-3, 0.15e-3, 0.05e-3));
    for (int i = 0; i < 8; i++) ft_split_observe_cpu(&s, 0, 4, 0.05e-3 + 4 * 0.05e-3, 0);
    fprintf(stderr, "  after 8 samples of 0.05 ms from a guess of 0.15: %.4f ms\n", 1e3 * s.layer[0].cpu_solo_s);
    EXPECT(s.layer[0].cpu_solo_s < 1.25 * 0.05e-3);
    EXPECT_EQ(s.layer[0].cpu_s, 0.15e-3); /* beside copies: not sampled, left alone */
    ft_split_free(&s);
}

TEST(copies_that_slow_the_cpu) {
    int none = run_contention(0.048e-3, 2000);
    EXPECT(none >= 250); /* all but the one-in-64 samples of the other side */
    EXPECT_EQ(brute2(0.215e-3, 0.077e-3, 0.048e-3, 0.05e-3, 4), 0);
    none = run_contention(0.077e-3, 2000); /* no slowdown: one of four fetched */
    EXPECT(none <= 6); /* only the one-in-64 samples of the CPU alone */
    EXPECT_EQ(brute2(0.215e-3, 0.077e-3, 0.077e-3, 0.05e-3, 4), 1);
}

TEST_MAIN("policy")
