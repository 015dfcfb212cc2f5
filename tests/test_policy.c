/* test_policy.c — the hybrid split with synthetic costs (pure C): the modes, the optimum of
 * max(F * copy, (M - F) * cpu + fixed) checked against brute force, movement toward the cheaper
 * side as observed costs change, and stability under noisy observations. */
#include <math.h>
#include <stdint.h>

#include "moe/policy.h"
#include "test.h"

static int brute(double copy, double cpu, double fixed, int m) {
    int best = 0;
    double bt = INFINITY;
    for (int f = 0; f <= m; f++) {
        double t = fmax(f * copy, f < m ? (m - f) * cpu + fixed : 0.0);
        if (t < bt - 1e-12) bt = t, best = f;
    }
    return best;
}

TEST(modes_and_optimum) {
    struct ft_split s;
    EXPECT_OK(ft_split_init(&s, FT_MOE_OFFLOAD, 2, 1.0, 1.0, 0.0));
    EXPECT_EQ(ft_split_fetch_count(&s, 0, 7), 7);
    s.mode = FT_MOE_CPU;
    EXPECT_EQ(ft_split_fetch_count(&s, 0, 7), 0);
    s.mode = FT_MOE_HYBRID;
    int bad = 0;
    for (int m = 0; m <= 40; m++)
        for (double cpu = 0.2; cpu < 3; cpu += 0.37)
            for (double fixed = 0; fixed < 5; fixed += 1.3) {
                s.layer[1] = (struct ft_split_costs){.copy_s = 1.0, .cpu_s = cpu, .cpu_fixed_s = fixed};
                bad += ft_split_fetch_count(&s, 1, m) != brute(1.0, cpu, fixed, m);
            }
    EXPECT_EQ(bad, 0);
    ft_split_free(&s);
}

TEST(moves_toward_the_cheaper_side) {
    struct ft_split s;
    EXPECT_OK(ft_split_init(&s, FT_MOE_HYBRID, 1, 1e-3, 1e-3, 0.0));
    int f0 = ft_split_fetch_count(&s, 0, 20);
    EXPECT(f0 >= 9 && f0 <= 11); /* equal costs: about half */
    for (int i = 0; i < 60; i++) ft_split_observe(&s, 0, 10, 10 * 3e-3, 10, 10 * 1e-3); /* copies slow */
    int f1 = ft_split_fetch_count(&s, 0, 20);
    EXPECT(f1 < f0 && f1 >= 4 && f1 <= 6); /* copy 3x dearer: about a quarter fetched */
    for (int i = 0; i < 120; i++) ft_split_observe(&s, 0, 10, 10 * 1e-3, 10, 10 * 4e-3); /* CPU slow */
    int f2 = ft_split_fetch_count(&s, 0, 20);
    EXPECT(f2 > f0 && f2 >= 15);
    ft_split_free(&s);
}

TEST(stable_under_noise) {
    struct ft_split s;
    EXPECT_OK(ft_split_init(&s, FT_MOE_HYBRID, 1, 1e-3, 1e-3, 2e-4));
    uint64_t r = 1;
    int lo = 1 << 30, hi = -1;
    for (int i = 0; i < 2000; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        double noise = 0.7 + 0.6 * (double)(r >> 11) / 9007199254740992.0; /* +-30% */
        ft_split_observe(&s, 0, 8, 8 * 1.5e-3 * noise, 8, 2e-4 + 8 * 1e-3 / noise);
        if (i >= 200) {
            int f = ft_split_fetch_count(&s, 0, 24);
            lo = f < lo ? f : lo, hi = f > hi ? f : hi;
        }
    }
    fprintf(stderr, "  F over the last 1800 noisy steps: %d..%d of 24\n", lo, hi);
    EXPECT(hi - lo <= 3); /* the running average does not chase the noise */
    EXPECT(lo >= 7 && hi <= 12); /* around the noiseless optimum (9-10) */
    ft_split_free(&s);
}

/* One stalled step (a 0.1 ms expert taking 0.85 ms: seen on the H200 host under gVisor) moves
 * the CPU estimate by at most 20% and leaves the split where it was; a CPU that stays slow
 * still moves it. A side that no call used for 64 calls in a row gets one expert back, and
 * its estimate recovers from the samples that brings. */
TEST(a_stalled_step_does_not_swing_the_split) {
    struct ft_split s;
    EXPECT_OK(ft_split_init(&s, FT_MOE_HYBRID, 1, 0.2e-3, 0.1e-3, 0.05e-3));
    const int f0 = ft_split_fetch_count(&s, 0, 5);
    EXPECT_EQ(f0, brute(0.2e-3, 0.1e-3, 0.05e-3, 5));
    ft_split_observe(&s, 0, f0, f0 * 0.2e-3, 5 - f0, 0.05e-3 + (5 - f0) * 0.85e-3);
    fprintf(stderr, "  after one 0.85 ms sample: CPU %.3f ms an expert\n", 1e3 * s.layer[0].cpu_s);
    EXPECT(s.layer[0].cpu_s <= 1.2 * 0.1e-3 + 1e-12);
    EXPECT_EQ(ft_split_fetch_count(&s, 0, 5), f0);
    for (int i = 0; i < 40; i++) ft_split_observe(&s, 0, 2, 2 * 0.2e-3, 3, 0.05e-3 + 3 * 0.85e-3);
    fprintf(stderr, "  after 40 such samples: CPU %.3f ms an expert\n", 1e3 * s.layer[0].cpu_s);
    EXPECT(fabs(s.layer[0].cpu_s - 0.85e-3) < 0.05e-3);
    /* now every one of 3 misses is fetched; each 64th call gives one to the CPU */
    EXPECT_EQ(brute(0.2e-3, s.layer[0].cpu_s, s.layer[0].cpu_fixed_s, 3), 3);
    int cpu_calls = 0;
    for (int i = 0; i < 128; i++) cpu_calls += ft_split_fetch_count(&s, 0, 3) < 3;
    EXPECT_EQ(cpu_calls, 2);
    /* the CPU is fast again: the samples those calls bring pull the estimate back down */
    int calls = 0;
    while (brute(s.layer[0].copy_s, s.layer[0].cpu_s, s.layer[0].cpu_fixed_s, 3) == 3 && calls < 64 * 40) {
        calls++;
        const int f = ft_split_fetch_count(&s, 0, 3);
        if (f < 3) ft_split_observe(&s, 0, f, f * 0.2e-3, 3 - f, 0.05e-3 + (3 - f) * 0.1e-3);
    }
    fprintf(stderr, "  back to the CPU after %d calls (CPU %.3f ms an expert)\n", calls,
            1e3 * s.layer[0].cpu_s);
    EXPECT(calls < 64 * 40);
    ft_split_free(&s);
}

TEST_MAIN("policy")
