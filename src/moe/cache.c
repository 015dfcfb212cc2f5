/* cache.c — expert slot bookkeeping and the LRU policy. Engine thread only. */
#include "moe/cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"

/* The least recently used slot not touched by the current step (never-used slots first, lowest
 * index among them, so the same trace always gives the same placement). */
static int lru_victim(const struct ft_cache *c, uint64_t step) {
    int best = -1;
    for (int s = 0; s < c->n_slots; s++) {
        if (c->step_of[s] == step || c->held[s]) continue;
        if (best < 0 || c->last_use[s] < c->last_use[best]) best = s;
    }
    return best;
}

const struct ft_cache_policy ft_cache_lru = {"lru", lru_victim};

enum ft_status ft_cache_init(struct ft_cache **out, int n_slots, int n_layers, int n_experts,
                             const struct ft_cache_policy *policy) {
    *out = NULL;
    if (n_slots <= 0 || n_layers <= 0 || n_experts <= 0)
        return ft_fail(FT_ERR_INVALID_ARG, "expert cache: %d slots for %d layers x %d experts",
                       n_slots, n_layers, n_experts);
    struct ft_cache *c = calloc(1, sizeof *c);
    if (!c) return ft_fail(FT_ERR_OOM, "expert cache: out of memory");
    size_t keys = (size_t)n_layers * n_experts;
    c->policy = policy ? policy : &ft_cache_lru;
    c->n_slots = n_slots;
    c->n_layers = n_layers;
    c->n_experts = n_experts;
    c->slot_of = malloc(keys * sizeof *c->slot_of);
    c->key_of = malloc((size_t)n_slots * sizeof *c->key_of);
    c->last_use = calloc((size_t)n_slots, sizeof *c->last_use);
    c->step_of = calloc((size_t)n_slots, sizeof *c->step_of);
    c->hits = calloc((size_t)n_layers, sizeof *c->hits);
    c->freq = calloc(keys, sizeof *c->freq);
    c->misses = calloc((size_t)n_layers, sizeof *c->misses);
    c->held = calloc((size_t)n_slots, 1);
    if (!c->slot_of || !c->key_of || !c->last_use || !c->step_of || !c->freq || !c->hits || !c->misses ||
        !c->held) {
        ft_cache_free(c);
        return ft_fail(FT_ERR_OOM, "expert cache: out of memory");
    }
    memset(c->slot_of, 0xff, keys * sizeof *c->slot_of);
    memset(c->key_of, 0xff, (size_t)n_slots * sizeof *c->key_of);
    *out = c;
    return FT_OK;
}

void ft_cache_free(struct ft_cache *c) {
    if (!c) return;
    free(c->slot_of);
    free(c->key_of);
    free(c->last_use);
    free(c->step_of);
    free(c->hits);
    free(c->misses);
    free(c->freq);
    free(c->held);
    free(c);
}

void ft_cache_probe(struct ft_cache *c, int layer, const int32_t *ids, int n, int32_t *slots) {
    uint64_t step = ++c->step;
    for (int i = 0; i < n; i++) {
        size_t key = (size_t)layer * c->n_experts + ids[i];
        int32_t s = c->slot_of[key];
        slots[i] = s;
        c->freq[key]++;
        if (s >= 0) {
            c->last_use[s] = ++c->tick, c->step_of[s] = step;
            c->hits[layer]++;
        }
    }
}

enum ft_status ft_cache_admit(struct ft_cache *c, int layer, const int32_t *experts, int n,
                              struct ft_cache_fill *fills, int *n_fills) {
    *n_fills = 0;
    for (int i = 0; i < n; i++) {
        size_t key = (size_t)layer * c->n_experts + experts[i];
        if (c->slot_of[key] >= 0) continue;
        int s = c->policy->victim(c, c->step);
        if (s < 0)
            return ft_fail(FT_ERR_BUSY, "expert cache: layer %d needs more than %d distinct "
                           "experts at once (raise --moe-cache-size)", layer, c->n_slots);
        if (c->key_of[s] >= 0) c->slot_of[c->key_of[s]] = -1;
        c->key_of[s] = (int32_t)key;
        c->slot_of[key] = s;
        c->last_use[s] = ++c->tick;
        c->step_of[s] = c->step;
        fills[(*n_fills)++] = (struct ft_cache_fill){layer, experts[i], s};
        c->misses[layer]++;
    }
    return FT_OK;
}

enum ft_status ft_cache_lookup(struct ft_cache *c, int layer, const int32_t *ids, int n,
                               int32_t *slots, struct ft_cache_fill *fills, int *n_fills) {
    ft_cache_probe(c, layer, ids, n, slots);
    *n_fills = 0;
    if (n <= 0) return FT_OK;
    /* the misses in order of first appearance (a repeated id is one miss) */
    int32_t miss[n];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (slots[i] >= 0) continue;
        int dup = 0;
        for (int j = 0; j < m; j++) dup |= miss[j] == ids[i];
        if (!dup) miss[m++] = ids[i];
        else c->hits[layer]++; /* served by the copy this step already makes */
    }
    enum ft_status st = ft_cache_admit(c, layer, miss, m, fills, n_fills);
    for (int i = 0; st == FT_OK && i < n; i++)
        if (slots[i] < 0) slots[i] = c->slot_of[(size_t)layer * c->n_experts + ids[i]];
    return st;
}

int ft_cache_borrow(struct ft_cache *c, int n, int32_t *slots) {
    int got = 0;
    for (; got < n; got++) {
        int s = c->policy->victim(c, c->step);
        if (s < 0) break;
        if (c->key_of[s] >= 0) c->slot_of[c->key_of[s]] = -1;
        c->key_of[s] = -1;
        c->last_use[s] = 0;
        c->held[s] = 1;
        slots[got] = s;
    }
    return got;
}

void ft_cache_return(struct ft_cache *c) {
    for (int s = 0; s < c->n_slots; s++)
        if (c->held[s]) c->held[s] = 0, c->step_of[s] = 0;
}

void ft_cache_new_step(struct ft_cache *c) { c->step++; }

int ft_cache_free_slots(const struct ft_cache *c) {
    int n = 0;
    for (int s = 0; s < c->n_slots; s++) n += c->key_of[s] < 0 && !c->held[s];
    return n;
}

void ft_cache_drop(struct ft_cache *c, int layer, int expert) {
    size_t key = (size_t)layer * c->n_experts + expert;
    int32_t s = c->slot_of[key];
    if (s < 0) return;
    c->slot_of[key] = -1;
    c->key_of[s] = -1;
    c->last_use[s] = 0;
    c->step_of[s] = 0;
}

double ft_cache_hit_rate(const struct ft_cache *c) {
    uint64_t h = 0, m = 0;
    for (int l = 0; l < c->n_layers; l++) h += c->hits[l], m += c->misses[l];
    return h + m ? (double)h / (double)(h + m) : 0.0;
}
