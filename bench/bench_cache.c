/* bench_cache.c — the expert cache's host bookkeeping per decode layer step, which the decode
 * step waits for before any expert starts: probe a token's 8 ids, then admit up to F of the
 * misses (a hybrid step fetches 1-3 of them at 30 GiB), over uniform routing. Printed beside it,
 * from the same run: the probe alone (the floor: no victim to find), and one victim found by
 * scanning every slot (how LRU chose before it kept a recency list, ~4 us a fill at 2,970
 * slots on this dev VM).
 *   bench_cache [SLOTS] [FETCHES] [LAYERS] [EXPERTS]   (defaults 2970 3 48 128: Qwen3-30B-A3B
 *   with 30 GiB of VRAM) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/timer.h"
#include "moe/cache.h"

enum { K = 8, STEPS = 200000 };

static uint64_t rnd(uint64_t *r) {
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    return *r;
}

/* us per layer step: probe, then (admit) up to F of the distinct misses */
static double run(struct ft_cache *c, int L, int E, int F, int admit, long *fills) {
    uint64_t r = 5;
    int32_t ids[K], slots[K], miss[K];
    struct ft_cache_fill f[K];
    int64_t t0 = ft_time_ns();
    for (int t = 0; t < STEPS; t++) {
        for (int j = 0; j < K; j++) ids[j] = (int32_t)(rnd(&r) % (uint64_t)E);
        ft_cache_probe(c, t % L, ids, K, slots);
        if (!admit) continue;
        int m = 0, nf = 0;
        for (int j = 0; j < K; j++) {
            int dup = 0;
            for (int q = 0; q < m; q++) dup |= miss[q] == ids[j];
            if (slots[j] < 0 && !dup) miss[m++] = ids[j];
        }
        if (ft_cache_admit(c, t % L, miss, m < F ? m : F, f, &nf) != FT_OK) return -1;
        *fills += nf;
    }
    return (double)(ft_time_ns() - t0) / 1e3 / STEPS;
}

int main(int argc, char **argv) {
    int S = argc > 1 ? atoi(argv[1]) : 2970, F = argc > 2 ? atoi(argv[2]) : 3;
    int L = argc > 3 ? atoi(argv[3]) : 48, E = argc > 4 ? atoi(argv[4]) : 128;
    if (S < K || F < 0 || F > K || L < 1 || E < K) {
        fprintf(stderr, "usage: bench_cache [SLOTS >= 8] [FETCHES 0-8] [LAYERS >= 1] [EXPERTS >= 8]\n");
        return 2;
    }
    struct ft_cache *c;
    if (ft_cache_init(&c, S, L, E, NULL) != FT_OK) return 1;
    long fills = 0, none = 0;
    run(c, L, E, F, 1, &fills); /* warm: the slots fill */
    fills = 0;
    double step = run(c, L, E, F, 1, &fills), probe = run(c, L, E, F, 0, &none);
    int64_t t0 = ft_time_ns();
    volatile int sink = 0;
    for (int i = 0; i < 2000; i++) sink += ft_cache_lru_scan(c);
    double scan = (double)(ft_time_ns() - t0) / 1e3 / 2000;
    printf("bench_cache: %d slots, %d layers x %d experts, %d ids a step, up to %d fetched\n", S, L,
           E, K, F);
    printf("layer step (probe + admit): %.3f us, %.2f fills; floor (the probe alone): %.3f us; "
           "a victim by scanning every slot: %.3f us (x %.2f fills = %.2f us a step)\n", step,
           (double)fills / STEPS, probe, scan, (double)fills / STEPS, scan * fills / STEPS);
    ft_cache_free(c);
    return sink == -12345;
}
