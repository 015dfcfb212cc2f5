/* bench_policy.c — expert-cache policies compared on identical routing traces: LRU, LFRU, SLRU,
 * markov, the idealised online policy that knows the trace's distribution, and Belady's oracle (the most hits the same slots can give), with the trace's skew (entropy over
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

/* The idealised online policy: it knows the trace's generator as a two-state model per expert,
 * fitted on the whole trace (A = P(used | used at its layer's previous lookup), B = P(used | not
 * used at it)), and evicts the expert least likely to be used at its layer's next lookup (A when
 * its layer's last lookup used it, else B), ties to the least recent, over every slot. On iid
 * routing A = B = the expert's frequency: it keeps the most probable experts of every layer, the
 * slots split across layers by probability (the optimum for iid draws when every miss must be
 * admitted); on sticky routing it keeps each layer's last step. It sees the distribution, never
 * the sequence: Belady's oracle sees the future. */
static float *ideal_a, *ideal_b;

static float ideal_score(const struct ft_cache *c, int32_t key) {
    const int l = key / c->n_experts;
    return c->freq[key] && c->fstamp[key] == c->lsteps[l] ? ideal_a[key] : ideal_b[key];
}

static int ideal_victim(const struct ft_cache *c, uint64_t step) {
    int best = -1;
    float bs = 0;
    for (int s = 0; s < c->n_slots; s++) {
        if (c->step_of[s] == step || c->held[s]) continue;
        if (c->key_of[s] < 0) return s;
        const float sc = ideal_score(c, c->key_of[s]);
        if (best < 0 || sc < bs || (sc == bs && c->last_use[s] < c->last_use[best])) best = s, bs = sc;
    }
    return best;
}

static const struct ft_cache_policy ideal_policy = {"ideal", ideal_victim, NULL, NULL};

/* A and B of every key from the whole trace (0 when the trace is unusable) */
static int ideal_fit(const struct ft_trace *t) {
    const size_t E = (size_t)t->n_experts, keys = (size_t)t->n_layers * E;
    free(ideal_a), free(ideal_b);
    ideal_a = calloc(keys, sizeof *ideal_a), ideal_b = calloc(keys, sizeof *ideal_b);
    double *uu = calloc(keys, sizeof *uu), *nu = calloc(keys, sizeof *nu);  /* used at t: next used */
    double *un = calloc(keys, sizeof *un), *nn = calloc(keys, sizeof *nn);  /* not used at t: ... */
    uint8_t *prev = calloc(keys, 1), *cur = calloc(keys, 1);
    uint32_t *look = calloc((size_t)t->n_layers, sizeof *look);
    if (!ideal_a || !ideal_b || !uu || !nu || !un || !nn || !prev || !cur || !look) return 0;
    for (size_t i = 0; i < t->len; i += 2 + (size_t)t->data[i + 1]) {
        const size_t l = (size_t)t->data[i], b = l * E;
        memset(cur + b, 0, E);
        for (int j = 0; j < t->data[i + 1]; j++) cur[b + t->data[i + 2 + j]] = 1;
        if (look[l]++)
            for (size_t e = b; e < b + E; e++) {
                if (prev[e]) uu[e] += cur[e], nu[e] += 1;
                else un[e] += cur[e], nn[e] += 1;
            }
        memcpy(prev + b, cur + b, E);
    }
    for (size_t e = 0; e < keys; e++) {
        ideal_a[e] = nu[e] > 0 ? (float)(uu[e] / nu[e]) : 0.0f;
        ideal_b[e] = nn[e] > 0 ? (float)(un[e] / nn[e]) : 0.0f;
    }
    free(uu), free(nu), free(un), free(nn), free(prev), free(cur), free(look);
    return 1;
}

/* fit: the trace the ideal policy's model is fitted on (the generator's own long sample for
 * synthetic traces, the trace itself for a replay) */
static void row(const char *name, const struct ft_trace *t, const struct ft_trace *fit, int S) {
    const struct ft_cache_policy *p[5] = {&ft_cache_lru, &ft_cache_lfru, &ft_cache_slru,
                                          &ft_cache_markov, &ideal_policy};
    uint64_t h[6] = {0}, lk = 0;
    double us[5] = {0};
    enum ft_status st = ideal_fit(fit) ? FT_OK : ft_fail(FT_ERR_OOM, "out of memory");
    for (int i = 0; st == FT_OK && i < 5; i++) {
        int64_t t0 = ft_time_ns();
        st = ft_trace_simulate(t, S, p[i], &h[i], &lk);
        us[i] = (double)(ft_time_ns() - t0) / 1e3 / (double)t->n_steps;
    }
    if (st == FT_OK) st = ft_trace_oracle(t, S, &h[5], &lk);
    if (st != FT_OK) {
        printf("| %s | %d | %s |\n", name, S, ft_error());
        return;
    }
    struct ft_trace_stats ts;
    ft_trace_stats(t, &ts);
    const double n = (double)lk, gap = (double)h[5] - (double)h[0];
    printf("| %s | %d | %.1f%%", name, S, 100 * h[0] / n);
    for (int i = 1; i < 5; i++) {
        char g[32] = "-";
        if (gap > 0) snprintf(g, sizeof g, "%.0f%%", 100 * ((double)h[i] - (double)h[0]) / gap);
        printf(" | %.1f%% (%s)", 100 * h[i] / n, g);
    }
    printf(" | %.1f%% | %.3f | %.1f | %.2f / %.2f / %.2f / %.2f |\n", 100 * h[5] / n, ts.entropy,
           ts.experts90, us[0], us[1], us[2], us[3]);
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
    struct ft_trace tr[4], fit[4];
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
        for (n_tr = 0; n_tr < 4; n_tr++) { /* and 16 times as long a sample to fit the ideal on */
            ft_trace_synthetic(&tr[n_tr], shape[0], shape[1], shape[2], tokens, skew[n_tr],
                               sticky[n_tr], 1234 + n_tr);
            ft_trace_synthetic(&fit[n_tr], shape[0], shape[1], shape[2], 16 * tokens, skew[n_tr],
                               sticky[n_tr], 99 + n_tr);
        }
    }
    if (!n_slots) {
        const int all = tr[0].n_layers * tr[0].n_experts;
        slots[0] = all / 10, slots[1] = all / 4, slots[2] = all / 2, n_slots = 3;
    }
    printf("| trace | slots | LRU | LFRU (of the gap to the oracle) | SLRU (of the gap) | markov "
           "(of the gap) | ideal online (of the gap) | oracle | entropy | experts for 90%% | "
           "us per step LRU / LFRU / SLRU / markov |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n_tr; i++) {
        for (int s = 0; s < n_slots; s++) row(names[i], &tr[i], replay ? &tr[i] : &fit[i], slots[s]);
        ft_trace_free(&tr[i]);
        if (!replay) ft_trace_free(&fit[i]);
    }
    free(ideal_a), free(ideal_b);
    return 0;
}
