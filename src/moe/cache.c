/* cache.c — expert slot bookkeeping and the LRU policy. Engine thread only. */
#include "moe/cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "moe/trace.h"

/* The recency order (struct ft_cache): every change of a slot's last_use or held goes
 * through these. */
static int in_list(const struct ft_cache *c, int s) { return c->last_use[s] > 0 && !c->held[s]; }

static void unlink_slot(struct ft_cache *c, int s) {
    if (in_list(c, s)) {
        int p = c->prev[s], n = c->next[s];
        if (p >= 0) c->next[p] = n;
        else c->head = n;
        if (n >= 0) c->prev[n] = p;
        else c->tail = p;
        c->prev[s] = c->next[s] = -1;
    } else if (!c->held[s]) {
        c->unused[s / 64] &= ~(1ull << (s % 64));
    }
}

static void link_slot(struct ft_cache *c, int s) { /* after last_use / held were set */
    if (in_list(c, s)) { /* the newest stamp: at the tail */
        c->prev[s] = c->tail, c->next[s] = -1;
        if (c->tail >= 0) c->next[c->tail] = s;
        else c->head = s;
        c->tail = s;
    } else if (!c->held[s]) {
        c->unused[s / 64] |= 1ull << (s % 64);
    }
}

static void touch(struct ft_cache *c, int s) { /* last_use = a new stamp */
    unlink_slot(c, s);
    c->last_use[s] = ++c->tick;
    link_slot(c, s);
}

static void set_state(struct ft_cache *c, int s, uint64_t last_use, uint8_t held) {
    unlink_slot(c, s);
    c->last_use[s] = last_use, c->held[s] = held;
    link_slot(c, s);
}

/* The never-used slots by index, then the list from its least recent, skipping the slots the
 * current step uses: both already in the order of (last_use, index). */
static int lru_victim(const struct ft_cache *c, uint64_t step) {
    for (int w = 0; w < (c->n_slots + 63) / 64; w++)
        for (uint64_t b = c->unused[w]; b; b &= b - 1) {
            int s = w * 64 + __builtin_ctzll(b);
            if (c->step_of[s] != step) return s;
        }
    for (int s = c->head; s >= 0; s = c->next[s])
        if (c->step_of[s] != step) return s;
    return -1;
}

int ft_cache_lru_scan(const struct ft_cache *c) {
    int best = -1;
    for (int s = 0; s < c->n_slots; s++) {
        if (c->step_of[s] == c->step || c->held[s]) continue;
        if (best < 0 || c->last_use[s] < c->last_use[best]) best = s;
    }
    return best;
}

const struct ft_cache_policy ft_cache_lru = {"lru", lru_victim, NULL, NULL};

/* key's decayed use count now */
static float lfru_count(const struct ft_cache *c, int32_t key) {
    const uint32_t d = c->lsteps[key / c->n_experts] - c->fstamp[key];
    return d < FT_CACHE_DECAY_LEN ? c->fcount[key] * c->decay[d] : 0.0f;
}

/* An expert its layer used within its last FT_CACHE_PROTECT lookups (a newcomer waiting for its
 * second use, as sticky routing brings it) is evicted only when every other one is. */
static int lfru_recent(const struct ft_cache *c, int32_t key) {
    return c->lsteps[key / c->n_experts] - c->fstamp[key] < FT_CACHE_PROTECT;
}

/* 1 when slot a is the better LFRU victim than b (b < 0: none yet): not recent before recent,
 * then the smaller decayed count, then the least recent */
static int lfru_better(const struct ft_cache *c, int a, int b) {
    if (b < 0) return 1;
    const int ra = lfru_recent(c, c->key_of[a]), rb = lfru_recent(c, c->key_of[b]);
    if (ra != rb) return ra < rb;
    const float na = lfru_count(c, c->key_of[a]), nb = lfru_count(c, c->key_of[b]);
    return na < nb || (na == nb && c->last_use[a] < c->last_use[b]);
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Free slots first, then the best victim by `better` (1 when slot a beats b, b < 0: none yet):
 * over pools of more than 4 x sample slots the best of `sample` slots drawn from the access
 * counter, else (or when no drawn slot may be evicted) over the whole pool. */
static int sampled_victim(const struct ft_cache *c, uint64_t step, int sample,
                          int (*better)(const struct ft_cache *, int, int)) {
    int best = -1;
    if (c->n_slots > sample * 4) {
        for (int w = 0; w < (c->n_slots + 63) / 64; w++) /* never-used slots first */
            for (uint64_t b = c->unused[w]; b; b &= b - 1) {
                int s = w * 64 + __builtin_ctzll(b);
                if (c->step_of[s] != step && c->key_of[s] < 0) return s;
            }
        for (int i = 0; i < sample; i++) {
            int s = (int)(mix64(c->tick * (uint64_t)sample + (uint64_t)i) % (uint64_t)c->n_slots);
            if (c->step_of[s] == step || c->held[s]) continue;
            if (c->key_of[s] < 0) return s;
            if (better(c, s, best)) best = s;
        } /* the best of a sample drawn from the access counter */
        if (best >= 0) return best;
    }
    for (int s = 0; s < c->n_slots; s++) { /* the whole pool */
        if (c->step_of[s] == step || c->held[s]) continue;
        if (c->key_of[s] < 0) return s; /* free */
        if (better(c, s, best)) best = s;
    }
    return best;
}

static int lfru_victim(const struct ft_cache *c, uint64_t step) {
    return sampled_victim(c, step, FT_CACHE_LFRU_SAMPLE, lfru_better);
}

const struct ft_cache_policy ft_cache_lfru = {"lfru", lfru_victim, NULL, NULL};

/* markov: the probability that key is used at its layer's next lookup (cache.h) */
static float markov_score(const struct ft_cache *c, int32_t key) {
    const int l = key / c->n_experts;
    const float n = c->mlook[l], u = c->muse[key], r = c->mrep[key], m = FT_CACHE_MARKOV_PRIOR;
    const float U = c->mids[l], R = c->mreps[l], N = n * (float)c->n_experts;
    const int last = c->freq[key] && c->fstamp[key] == c->lsteps[l];
    if (last) { /* the prior: the layer's pooled P(used | used before) */
        const float d = u - 1.0f > 0 ? u - 1.0f : 0.0f; /* uses with a next lookup */
        return (r + m * (U > 0 ? R / U : 0.0f)) / (d + m);
    }
    const float d = n - u > 0 ? n - u : 0.0f;
    return (u - r + m * (N > U ? (U - R) / (N - U) : 0.0f)) / (d + m);
}

static int markov_better(const struct ft_cache *c, int a, int b) {
    if (b < 0) return 1;
    const float pa = markov_score(c, c->key_of[a]), pb = markov_score(c, c->key_of[b]);
    return pa < pb || (pa == pb && c->last_use[a] < c->last_use[b]);
}

static int markov_victim(const struct ft_cache *c, uint64_t step) {
    return sampled_victim(c, step, FT_CACHE_MARKOV_SAMPLE, markov_better);
}

const struct ft_cache_policy ft_cache_markov = {"markov", markov_victim, NULL, NULL};

/* SLRU: never-used slots first, then the recency list from its least recent: the first on
 * probation, else the first of any, skipping the current step's */
static int slru_victim(const struct ft_cache *c, uint64_t step) {
    for (int w = 0; w < (c->n_slots + 63) / 64; w++)
        for (uint64_t b = c->unused[w]; b; b &= b - 1) {
            int s = w * 64 + __builtin_ctzll(b);
            if (c->step_of[s] != step) return s;
        }
    int any = -1;
    for (int s = c->head; s >= 0; s = c->next[s]) {
        if (c->step_of[s] == step) continue;
        if (!c->prot[s]) return s;
        if (any < 0) any = s;
    }
    return any;
}

static void slru_hit(struct ft_cache *c, int slot) {
    if (c->prot[slot]) return;
    c->prot[slot] = 1, c->n_prot++;
    if (c->n_prot * 100 <= c->n_slots * FT_CACHE_PROTECTED_PCT) return;
    for (int s = c->head; s >= 0; s = c->next[s]) /* the least recent protected goes back */
        if (c->prot[s] && s != slot) {
            c->prot[s] = 0, c->n_prot--;
            return;
        }
}

static void slru_fill(struct ft_cache *c, int slot) {
    if (c->prot[slot]) c->prot[slot] = 0, c->n_prot--;
}

const struct ft_cache_policy ft_cache_slru = {"slru", slru_victim, slru_hit, slru_fill};

const struct ft_cache_policy *ft_cache_policy_find(const char *name) {
    const struct ft_cache_policy *all[] = {&ft_cache_lru, &ft_cache_lfru, &ft_cache_slru,
                                           &ft_cache_markov};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, all[i]->name)) return all[i];
    return NULL;
}

void ft_cache_record(struct ft_cache *c, struct ft_trace *t) { c->trace = t; }

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
    c->prev = malloc((size_t)n_slots * sizeof *c->prev);
    c->next = malloc((size_t)n_slots * sizeof *c->next);
    c->unused = calloc((size_t)(n_slots + 63) / 64, sizeof *c->unused);
    c->fcount = calloc(keys, sizeof *c->fcount);
    c->fstamp = calloc(keys, sizeof *c->fstamp);
    c->lsteps = calloc((size_t)n_layers, sizeof *c->lsteps);
    c->decay = malloc(FT_CACHE_DECAY_LEN * sizeof *c->decay);
    c->prot = calloc((size_t)n_slots, 1);
    c->muse = calloc(keys, sizeof *c->muse);
    c->mrep = calloc(keys, sizeof *c->mrep);
    c->mlook = calloc((size_t)n_layers, sizeof *c->mlook);
    c->mids = calloc((size_t)n_layers, sizeof *c->mids);
    c->mreps = calloc((size_t)n_layers, sizeof *c->mreps);
    if (!c->slot_of || !c->key_of || !c->last_use || !c->step_of || !c->freq || !c->hits || !c->misses ||
        !c->held || !c->prev || !c->next || !c->unused || !c->fcount || !c->fstamp || !c->lsteps ||
        !c->decay || !c->prot || !c->muse || !c->mrep || !c->mlook || !c->mids || !c->mreps) {
        ft_cache_free(c);
        return ft_fail(FT_ERR_OOM, "expert cache: out of memory");
    }
    memset(c->slot_of, 0xff, keys * sizeof *c->slot_of);
    memset(c->key_of, 0xff, (size_t)n_slots * sizeof *c->key_of);
    c->head = c->tail = -1;
    for (int s = 0; s < n_slots; s++) c->prev[s] = c->next[s] = -1, link_slot(c, s);
    for (int d = 0; d < FT_CACHE_DECAY_LEN; d++) c->decay[d] = exp2f(-(float)d / FT_CACHE_HALF_LIFE);
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
    free(c->prev);
    free(c->next);
    free(c->unused);
    free(c->fcount);
    free(c->fstamp);
    free(c->lsteps);
    free(c->decay);
    free(c->prot);
    free(c->muse);
    free(c->mrep);
    free(c->mlook);
    free(c->mids);
    free(c->mreps);
    free(c);
}

void ft_cache_probe(struct ft_cache *c, int layer, const int32_t *ids, int n, int32_t *slots) {
    uint64_t step = ++c->step;
    const uint32_t now = ++c->lsteps[layer];
    if (c->trace) ft_trace_add(c->trace, layer, ids, n);
    const size_t base = (size_t)layer * c->n_experts;
    if (now % FT_CACHE_MARKOV_HALVE == 0) { /* markov's counts follow a drifting router */
        for (int e = 0; e < c->n_experts; e++) c->muse[base + e] *= 0.5f, c->mrep[base + e] *= 0.5f;
        c->mlook[layer] *= 0.5f, c->mids[layer] *= 0.5f, c->mreps[layer] *= 0.5f;
    }
    c->mlook[layer] += 1.0f;
    for (int i = 0; i < n; i++) {
        size_t key = base + ids[i];
        int32_t s = c->slot_of[key];
        slots[i] = s;
        if (!c->freq[key] || c->fstamp[key] != now) { /* the first of repeats in a step */
            const float rep = c->freq[key] && c->fstamp[key] == now - 1;
            c->mrep[key] += rep, c->mreps[layer] += rep;
            c->muse[key] += 1.0f, c->mids[layer] += 1.0f;
        }
        c->freq[key]++;
        c->fcount[key] = lfru_count(c, (int32_t)key) + 1.0f, c->fstamp[key] = now;
        if (s >= 0) {
            touch(c, s);
            c->step_of[s] = step;
            c->hits[layer]++;
            if (c->policy->hit) c->policy->hit(c, s);
        }
    }
}

/* Places expert `expert` of layer into the policy's victim slot (marked used by this step);
 * returns the slot, or -1 when no slot may be evicted. */
static int place(struct ft_cache *c, int layer, int expert) {
    size_t key = (size_t)layer * c->n_experts + expert;
    int s = c->policy->victim(c, c->step);
    if (s < 0) return -1;
    if (c->key_of[s] >= 0) c->slot_of[c->key_of[s]] = -1;
    c->key_of[s] = (int32_t)key;
    c->slot_of[key] = s;
    touch(c, s);
    c->step_of[s] = c->step;
    if (c->policy->fill) c->policy->fill(c, s);
    return s;
}

enum ft_status ft_cache_admit(struct ft_cache *c, int layer, const int32_t *experts, int n,
                              struct ft_cache_fill *fills, int *n_fills) {
    *n_fills = 0;
    for (int i = 0; i < n; i++) {
        if (c->slot_of[(size_t)layer * c->n_experts + experts[i]] >= 0) continue;
        int s = place(c, layer, experts[i]);
        if (s < 0)
            return ft_fail(FT_ERR_BUSY, "expert cache: layer %d needs more than %d distinct "
                           "experts at once (raise --moe-cache-size)", layer, c->n_slots);
        fills[(*n_fills)++] = (struct ft_cache_fill){layer, experts[i], s};
        c->misses[layer]++;
    }
    return FT_OK;
}

/* Moves slot s to the least recent end of the recency order (a stamp below the head's; none
 * free when the head's is 1: s stays where it is). */
static void to_front(struct ft_cache *c, int s) {
    if (!in_list(c, s) || c->head == s || c->head < 0 || c->last_use[c->head] <= 1) return;
    const uint64_t stamp = c->last_use[c->head] - 1;
    unlink_slot(c, s);
    c->last_use[s] = stamp;
    c->prev[s] = -1, c->next[s] = c->head;
    c->prev[c->head] = s;
    c->head = s;
}

int ft_cache_prefetch(struct ft_cache *c, int layer, const int32_t *experts, int n,
                      struct ft_cache_fill *fills) {
    int nf = 0;
    for (int i = 0; i < n; i++) {
        if (c->slot_of[(size_t)layer * c->n_experts + experts[i]] >= 0) continue;
        int s = place(c, layer, experts[i]);
        if (s < 0) break;
        fills[nf++] = (struct ft_cache_fill){layer, experts[i], s};
    }
    for (int i = nf - 1; i >= 0; i--) to_front(c, fills[i].slot); /* the first guess frontmost */
    return nf;
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
        if (c->prot[s]) c->prot[s] = 0, c->n_prot--;
        set_state(c, s, 0, 1);
        slots[got] = s;
    }
    return got;
}

void ft_cache_return(struct ft_cache *c) {
    for (int s = 0; s < c->n_slots; s++)
        if (c->held[s]) set_state(c, s, 0, 0), c->step_of[s] = 0;
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
    if (c->prot[s]) c->prot[s] = 0, c->n_prot--;
    set_state(c, s, 0, c->held[s]);
    c->step_of[s] = 0;
}

double ft_cache_hit_rate(const struct ft_cache *c) {
    uint64_t h = 0, m = 0;
    for (int l = 0; l < c->n_layers; l++) h += c->hits[l], m += c->misses[l];
    return h + m ? (double)h / (double)(h + m) : 0.0;
}
