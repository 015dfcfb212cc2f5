/* trace.c — routing traces, their replay and Belady's oracle (trace.h). */
#include "moe/trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "moe/cache.h"

#define TRACE_MAGIC 0x54525446u /* "FTRT" little-endian */
#define TRACE_VERSION 1u

void ft_trace_init(struct ft_trace *t, int n_layers, int n_experts) {
    memset(t, 0, sizeof *t);
    t->n_layers = n_layers, t->n_experts = n_experts;
}

void ft_trace_free(struct ft_trace *t) {
    free(t->data);
    memset(t, 0, sizeof *t);
}

void ft_trace_add(struct ft_trace *t, int layer, const int32_t *ids, int n) {
    if (t->oom || n < 0) return;
    if (t->len + 2 + (size_t)n > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap < t->len + 2 + (size_t)n) cap *= 2;
        int32_t *d = realloc(t->data, cap * sizeof *d);
        if (!d) {
            t->oom = 1;
            return;
        }
        t->data = d, t->cap = cap;
    }
    t->data[t->len++] = layer;
    t->data[t->len++] = n;
    memcpy(t->data + t->len, ids, (size_t)n * sizeof *ids);
    t->len += (size_t)n;
    t->n_steps++, t->n_lookups += (size_t)n;
}

enum ft_status ft_trace_save(const struct ft_trace *t, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return ft_fail(FT_ERR_IO, "routing trace %s: cannot create it", path);
    uint32_t h[5] = {TRACE_MAGIC, TRACE_VERSION, (uint32_t)t->n_layers, (uint32_t)t->n_experts,
                     (uint32_t)t->len};
    int ok = t->len <= UINT32_MAX && fwrite(h, sizeof h, 1, f) == 1 &&
             fwrite(t->data, sizeof *t->data, t->len, f) == t->len;
    ok &= fclose(f) == 0;
    return ok ? FT_OK : ft_fail(FT_ERR_IO, "routing trace %s: write failed (disk full?)", path);
}

enum ft_status ft_trace_load(struct ft_trace *t, const char *path) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return ft_fail(FT_ERR_IO, "routing trace %s: cannot open it", path);
    uint32_t h[5];
    enum ft_status st = FT_OK;
    if (fread(h, sizeof h, 1, f) != 1 || h[0] != TRACE_MAGIC || h[1] != TRACE_VERSION ||
        h[2] < 1 || h[2] > 4096 || h[3] < 1 || h[3] > 65536) {
        st = ft_fail(FT_ERR_FORMAT, "routing trace %s: not a version-1 trace (ft bench "
                     "--record-routing writes them)", path);
    } else {
        ft_trace_init(t, (int)h[2], (int)h[3]);
        t->data = malloc(((size_t)h[4] + 1) * sizeof *t->data);
        if (!t->data) st = ft_fail(FT_ERR_OOM, "routing trace %s: out of memory", path);
        else if (fread(t->data, sizeof *t->data, h[4], f) != h[4])
            st = ft_fail(FT_ERR_FORMAT, "routing trace %s: truncated", path);
        t->len = t->cap = h[4];
    }
    fclose(f);
    for (size_t i = 0; st == FT_OK && i < t->len;) { /* every record in range */
        if (i + 2 > t->len || t->data[i] < 0 || t->data[i] >= t->n_layers || t->data[i + 1] < 0 ||
            i + 2 + (size_t)t->data[i + 1] > t->len) {
            st = ft_fail(FT_ERR_FORMAT, "routing trace %s: record at word %zu is malformed", path, i);
            break;
        }
        const int n = t->data[i + 1];
        for (int j = 0; j < n; j++)
            if (t->data[i + 2 + j] < 0 || t->data[i + 2 + j] >= t->n_experts) {
                st = ft_fail(FT_ERR_FORMAT, "routing trace %s: expert id %d out of range [0, %d)",
                             path, t->data[i + 2 + j], t->n_experts);
                break;
            }
        t->n_steps++, t->n_lookups += (size_t)n;
        i += 2 + (size_t)n;
    }
    if (st != FT_OK) ft_trace_free(t);
    return st;
}

enum ft_status ft_trace_simulate(const struct ft_trace *t, int n_slots,
                                 const struct ft_cache_policy *p, uint64_t *hits, uint64_t *lookups) {
    struct ft_cache *c = NULL;
    *hits = *lookups = 0;
    enum ft_status st = ft_cache_init(&c, n_slots, t->n_layers, t->n_experts, p);
    if (st != FT_OK) return st;
    int cap = 64;
    int32_t *slots = malloc((size_t)cap * sizeof *slots);
    struct ft_cache_fill *fills = malloc((size_t)cap * sizeof *fills);
    for (size_t i = 0; st == FT_OK && i < t->len; i += 2 + (size_t)t->data[i + 1]) {
        const int n = t->data[i + 1];
        if (n > cap) {
            cap = n;
            free(slots), free(fills);
            slots = malloc((size_t)cap * sizeof *slots);
            fills = malloc((size_t)cap * sizeof *fills);
        }
        if (!slots || !fills) {
            st = ft_fail(FT_ERR_OOM, "routing trace replay: out of memory");
            break;
        }
        int nf = 0;
        st = ft_cache_lookup(c, t->data[i], t->data + i + 2, n, slots, fills, &nf);
    }
    for (int l = 0; l < t->n_layers; l++) *hits += c->hits[l], *lookups += c->hits[l] + c->misses[l];
    free(slots), free(fills);
    ft_cache_free(c);
    return st;
}

/* --- Belady: a max-heap of (next use, key) with stale entries skipped when popped --- */
struct use {
    uint64_t next;
    int32_t key;
};

static void heap_push(struct use *h, size_t *n, struct use u) {
    size_t i = (*n)++;
    for (; i > 0 && h[(i - 1) / 2].next < u.next; i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = u;
}

static struct use heap_pop(struct use *h, size_t *n) {
    struct use top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].next > h[c].next) c++;
        if (h[c].next <= last.next) break;
        h[i] = h[c], i = c;
    }
    if (*n) h[i] = last;
    return top;
}

enum ft_status ft_trace_oracle(const struct ft_trace *t, int n_slots, uint64_t *hits,
                               uint64_t *lookups) {
    const size_t keys = (size_t)t->n_layers * t->n_experts, N = t->n_lookups;
    const uint64_t never = UINT64_MAX;
    *hits = *lookups = 0;
    uint64_t *next = malloc((N + 1) * sizeof *next), *cur = malloc(keys * sizeof *cur);
    uint64_t *step_of = calloc(keys, sizeof *step_of);
    uint8_t *in = calloc(keys, 1);
    struct use *heap = malloc((N + 1) * sizeof *heap), *stash = malloc((N + 1) * sizeof *stash);
    enum ft_status st = FT_OK;
    if (!next || !cur || !step_of || !in || !heap || !stash) {
        st = ft_fail(FT_ERR_OOM, "routing trace oracle: out of memory");
        goto done;
    }
    /* next[a]: the access index of the next use of access a's key (records walked backwards) */
    size_t *start = malloc((t->n_steps + 1) * sizeof *start), ns0 = 0;
    if (!start) {
        st = ft_fail(FT_ERR_OOM, "routing trace oracle: out of memory");
        goto done;
    }
    for (size_t i = 0; i < t->len; i += 2 + (size_t)t->data[i + 1]) start[ns0++] = i;
    for (size_t k = 0; k < keys; k++) cur[k] = never;
    size_t a = N;
    for (size_t r = ns0; r-- > 0;) {
        const int layer = t->data[start[r]], n = t->data[start[r] + 1];
        for (int j = n - 1; j >= 0; j--) {
            const size_t key = (size_t)layer * t->n_experts + t->data[start[r] + 2 + j];
            next[--a] = cur[key];
            cur[key] = a;
        }
    }
    free(start);
    size_t nh = 0, resident = 0;
    uint64_t step = 0;
    a = 0;
    for (size_t i = 0; i < t->len; i += 2 + (size_t)t->data[i + 1]) {
        const int layer = t->data[i], n = t->data[i + 1];
        const int32_t *ids = t->data + i + 2;
        step++;
        uint8_t hit[n > 0 ? n : 1];
        for (int j = 0; j < n; j++, a++) { /* hits first, as ft_cache_lookup */
            const size_t key = (size_t)layer * t->n_experts + ids[j];
            hit[j] = in[key];
            if (in[key]) {
                (*hits)++;
                cur[key] = next[a], step_of[key] = step;
                heap_push(heap, &nh, (struct use){next[a], (int32_t)key});
            }
        }
        a -= (size_t)n;
        for (int j = 0; j < n; j++, a++) { /* then the misses, each evicting the farthest */
            const size_t key = (size_t)layer * t->n_experts + ids[j];
            if (in[key]) { /* a hit, or a repeat of a miss this step fetched: one copy serves it */
                if (!hit[j]) (*hits)++, cur[key] = next[a];
                if (!hit[j]) heap_push(heap, &nh, (struct use){next[a], (int32_t)key});
                continue;
            }
            if (resident == (size_t)n_slots) {
                size_t ns = 0;
                int32_t victim = -1;
                while (nh) {
                    struct use u = heap_pop(heap, &nh);
                    if (!in[u.key] || cur[u.key] != u.next) continue; /* stale */
                    if (step_of[u.key] == step) {                    /* the step uses it */
                        stash[ns++] = u;
                        continue;
                    }
                    victim = u.key;
                    break;
                }
                for (size_t q = 0; q < ns; q++) heap_push(heap, &nh, stash[q]);
                if (victim < 0) {
                    st = ft_fail(FT_ERR_BUSY, "routing trace oracle: a step needs more than %d "
                                 "distinct experts", n_slots);
                    goto done;
                }
                in[victim] = 0, resident--;
            }
            in[key] = 1, resident++;
            cur[key] = next[a], step_of[key] = step;
            heap_push(heap, &nh, (struct use){next[a], (int32_t)key});
        }
        *lookups += (uint64_t)n;
    }
done:
    free(next), free(cur), free(step_of), free(in), free(heap), free(stash);
    return st;
}

void ft_trace_synthetic(struct ft_trace *t, int L, int E, int k, int tokens, double skew,
                        double sticky, uint64_t seed) {
    ft_trace_init(t, L, E);
    double *cdf = malloc((size_t)E * sizeof *cdf);
    int32_t *prev = malloc((size_t)L * k * sizeof *prev), ids[k > 0 ? k : 1];
    if (!cdf || !prev || k > E) {
        t->oom = 1;
        free(cdf), free(prev);
        return;
    }
    double sum = 0;
    for (int r = 0; r < E; r++) sum += skew > 0 ? pow(r + 1.0, -skew) : 1.0, cdf[r] = sum;
    for (int i = 0; i < L * k; i++) prev[i] = -1;
    uint64_t x = seed;
    for (int tok = 0; tok < tokens; tok++)
        for (int l = 0; l < L; l++) {
            for (int j = 0; j < k; j++) {
                int32_t *pj = prev + (size_t)l * k + j, id;
                int dup;
                do {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    const double u = (double)(x >> 11) / 9007199254740992.0;
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    if (*pj >= 0 && (double)(x >> 11) / 9007199254740992.0 < sticky) {
                        id = *pj;
                    } else {
                        int lo = 0, hi = E - 1; /* the first rank whose cdf reaches u */
                        while (lo < hi) {
                            int mid = (lo + hi) / 2;
                            if (cdf[mid] >= u * sum) hi = mid;
                            else lo = mid + 1;
                        }
                        id = (int32_t)(((uint64_t)lo * 2654435761u + (uint64_t)l * 40503u) % (uint64_t)E);
                    }
                    dup = 0;
                    for (int q = 0; q < j; q++) dup |= ids[q] == id;
                    if (dup) *pj = -1;
                } while (dup);
                ids[j] = *pj = id;
            }
            ft_trace_add(t, l, ids, k);
        }
    free(cdf), free(prev);
}

void ft_trace_stats(const struct ft_trace *t, struct ft_trace_stats *out) {
    memset(out, 0, sizeof *out);
    const size_t E = (size_t)t->n_experts;
    uint64_t *cnt = calloc((size_t)t->n_layers * E, sizeof *cnt);
    if (!cnt) return;
    for (size_t i = 0; i < t->len; i += 2 + (size_t)t->data[i + 1])
        for (int j = 0; j < t->data[i + 1]; j++) cnt[(size_t)t->data[i] * E + t->data[i + 2 + j]]++;
    int layers = 0;
    for (int l = 0; l < t->n_layers; l++) {
        uint64_t *c = cnt + (size_t)l * E, total = 0;
        for (size_t e = 0; e < E; e++) total += c[e];
        if (!total) continue;
        double h = 0;
        for (size_t e = 0; e < E; e++)
            if (c[e]) h -= (double)c[e] / total * log2((double)c[e] / total);
        /* the experts serving 90%: the most used first (a partial selection sort: E <= 65536) */
        uint64_t got = 0;
        int k = 0;
        while (got * 10 < total * 9) {
            size_t best = 0;
            for (size_t e = 1; e < E; e++)
                if (c[e] > c[best]) best = e;
            got += c[best], c[best] = 0, k++;
        }
        out->entropy += E > 1 ? h / log2((double)E) : 0;
        out->experts90 += k;
        layers++;
    }
    if (layers) out->entropy /= layers, out->experts90 /= layers;
    free(cnt);
}
