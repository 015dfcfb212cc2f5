/* bench_policy.c — expert-cache policies compared on identical routing traces: LRU, LFRU and
 * Belady's oracle (the most hits the same slots can give), with the trace's skew (entropy over
 * log2 E, experts per layer serving 90% of lookups). Every miss is admitted, as the offload
 * backend's `--moe-backend offload` does; the hybrid split admits only some, so the hit rates of
 * a real run differ, but the policies' order does not depend on it.
 *   bench_policy --replay FILE [--slots N,...]         a trace from ft bench --record-routing
 *   bench_policy [--slots N,...] [--shape L,E,K] [--tokens T]   synthetic traces: uniform,
 *                zipf:0.8, zipf:1.2, sticky:0.8 (defaults: Qwen3-30B-A3B's 48,128,8; 512
 *                tokens; slots 10%, 25%, 50% of the experts) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/timer.h"
#include "moe/cache.h"
#include "moe/trace.h"

static int parse_list(const char *s, int *v, int cap) {
    int n = 0;
    while (s && *s && n < cap) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 1) return -1;
        v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static void row(const char *name, const struct ft_trace *t, int S) {
    uint64_t hl = 0, hf = 0, hs = 0, ho = 0, lk = 0;
    int64_t t0 = ft_time_ns();
    enum ft_status st = ft_trace_simulate(t, S, &ft_cache_lru, &hl, &lk);
    int64_t t1 = ft_time_ns();
    if (st == FT_OK) st = ft_trace_simulate(t, S, &ft_cache_lfru, &hf, &lk);
    int64_t t2 = ft_time_ns();
    if (st == FT_OK) st = ft_trace_simulate(t, S, &ft_cache_slru, &hs, &lk);
    int64_t t3 = ft_time_ns();
    if (st == FT_OK) st = ft_trace_oracle(t, S, &ho, &lk);
    if (st != FT_OK) {
        printf("| %s | %d | %s |\n", name, S, ft_error());
        return;
    }
    struct ft_trace_stats ts;
    ft_trace_stats(t, &ts);
    const double n = (double)lk, gap = (double)ho - (double)hl;
    char cf[32] = "-", cs[32] = "-";
    if (gap > 0) snprintf(cf, sizeof cf, "%.0f%%", 100 * ((double)hf - (double)hl) / gap);
    if (gap > 0) snprintf(cs, sizeof cs, "%.0f%%", 100 * ((double)hs - (double)hl) / gap);
    printf("| %s | %d | %.1f%% | %.1f%% (%s) | %.1f%% (%s) | %.1f%% | %.3f | %.1f | %.2f / %.2f / %.2f |\n",
           name, S, 100 * hl / n, 100 * hf / n, cf, 100 * hs / n, cs, 100 * ho / n, ts.entropy,
           ts.experts90, (t1 - t0) / 1e3 / t->n_steps, (t2 - t1) / 1e3 / t->n_steps,
           (t3 - t2) / 1e3 / t->n_steps);
}

int main(int argc, char **argv) {
    const char *replay = NULL;
    int slots[8], n_slots = 0, shape[3] = {48, 128, 8}, tokens = 512;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--replay") && i + 1 < argc) replay = argv[++i];
        else if (!strcmp(argv[i], "--slots") && i + 1 < argc) n_slots = parse_list(argv[++i], slots, 8);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc && parse_list(argv[i + 1], shape, 3) == 3) i++;
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_policy [--replay FILE] [--slots N,...] [--shape L,E,K] "
                            "[--tokens T]\n");
            return 2;
        }
    }
    if (n_slots < 0 || tokens < 1 || shape[2] > shape[1]) {
        fprintf(stderr, "bench_policy: --slots takes counts >= 1, --tokens >= 1, K <= E\n");
        return 2;
    }
    struct ft_trace tr[4];
    const char *names[4] = {"uniform", "zipf:0.8", "zipf:1.2", "sticky:0.8"};
    int n_tr = 0;
    if (replay) {
        if (ft_trace_load(&tr[0], replay) != FT_OK) {
            fprintf(stderr, "bench_policy: %s\n", ft_error());
            return 1;
        }
        names[0] = replay, n_tr = 1;
    } else {
        const double skew[4] = {0, 0.8, 1.2, 0}, sticky[4] = {0, 0, 0, 0.8};
        for (n_tr = 0; n_tr < 4; n_tr++)
            ft_trace_synthetic(&tr[n_tr], shape[0], shape[1], shape[2], tokens, skew[n_tr],
                               sticky[n_tr], 1234 + n_tr);
    }
    if (!n_slots) {
        const int all = tr[0].n_layers * tr[0].n_experts;
        slots[0] = all / 10, slots[1] = all / 4, slots[2] = all / 2, n_slots = 3;
    }
    printf("| trace | slots | LRU | LFRU (of the gap to the oracle) | SLRU (of the gap) | oracle | "
           "entropy | experts for 90%% | us per step LRU / LFRU / SLRU |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n_tr; i++) {
        for (int s = 0; s < n_slots; s++) row(names[i], &tr[i], slots[s]);
        ft_trace_free(&tr[i]);
    }
    return 0;
}
