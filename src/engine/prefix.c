/* prefix.c — the prefix cache's index (prefix.h): one entry per block id, buckets of a hash
 * table chained through the entries. */
#include "engine/prefix.h"

#include <stdlib.h>
#include <string.h>

#include "core/checksum.h"
#include "core/status.h"
#include "engine/forward.h" /* FT_KV_BLOCK */

struct entry {
    uint64_t hash, parent; /* the chained hash through this block, and its parent's (0: none) */
    uint64_t used;         /* recency stamp */
    int32_t next;          /* next entry of the bucket, -1: none */
    int8_t valid;
    void *state;           /* the checkpoint after this block (NULL: none) */
    uint64_t state_used;   /* its recency stamp */
    int32_t toks[FT_KV_BLOCK];
};

struct ft_prefix {
    struct entry *e; /* [n_blocks], indexed by block id */
    int32_t *head;   /* [n_buckets] first entry, -1: none */
    int n_blocks, n_buckets, n;
    uint64_t clock;
    size_t state_bytes;    /* one checkpoint */
    int max_states, n_states;
};

enum ft_status ft_prefix_init(struct ft_prefix **out, int n_blocks) {
    *out = NULL;
    struct ft_prefix *p = calloc(1, sizeof *p);
    int nb = 16;
    while (nb < 2 * n_blocks) nb *= 2;
    if (p) p->e = calloc((size_t)(n_blocks > 0 ? n_blocks : 1), sizeof *p->e);
    if (p) p->head = malloc((size_t)nb * sizeof *p->head);
    if (!p || !p->e || !p->head) {
        ft_prefix_free(p);
        return ft_fail(FT_ERR_OOM, "prefix cache: out of memory");
    }
    for (int i = 0; i < nb; i++) p->head[i] = -1;
    p->n_blocks = n_blocks, p->n_buckets = nb;
    *out = p;
    return FT_OK;
}

void ft_prefix_free(struct ft_prefix *p) {
    if (!p) return;
    for (int b = 0; b < p->n_blocks; b++) free(p->e[b].state);
    free(p->e);
    free(p->head);
    free(p);
}

/* The chained hash of a block: its parent's and its tokens (never 0). */
static uint64_t chain(uint64_t parent, const int32_t *toks) {
    uint64_t h = ft_mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < FT_KV_BLOCK; i++) h = ft_mix64(h ^ (uint32_t)toks[i]);
    return h ? h : 1;
}

static int32_t find(const struct ft_prefix *p, uint64_t h, uint64_t parent, const int32_t *toks) {
    for (int32_t b = p->head[h & (uint64_t)(p->n_buckets - 1)]; b >= 0; b = p->e[b].next) {
        const struct entry *x = &p->e[b];
        if (x->hash == h && x->parent == parent && !memcmp(x->toks, toks, sizeof x->toks)) return b;
    }
    return -1;
}

int ft_prefix_match(struct ft_prefix *p, const int32_t *ids, int max_blocks, int32_t *blocks) {
    uint64_t parent = 0;
    int k = 0;
    for (; k < max_blocks; k++) {
        const int32_t *toks = ids + (size_t)k * FT_KV_BLOCK;
        const uint64_t h = chain(parent, toks);
        const int32_t b = find(p, h, parent, toks);
        if (b < 0) break;
        blocks[k] = b;
        parent = h;
    }
    p->clock += (uint64_t)k + 1;
    for (int i = 0; i < k; i++) p->e[blocks[i]].used = p->clock - (uint64_t)i;
    return k;
}

int ft_prefix_insert(struct ft_prefix *p, const int32_t *ids, int n_full, const int32_t *blocks,
                     int32_t *added) {
    uint64_t parent = 0;
    int n = 0;
    p->clock += (uint64_t)n_full + 1;
    for (int k = 0; k < n_full; k++) {
        const int32_t *toks = ids + (size_t)k * FT_KV_BLOCK;
        const uint64_t h = chain(parent, toks);
        int32_t b = find(p, h, parent, toks);
        if (b < 0 && blocks[k] >= 0 && blocks[k] < p->n_blocks && !p->e[blocks[k]].valid) {
            b = blocks[k];
            struct entry *x = &p->e[b];
            x->hash = h, x->parent = parent, x->valid = 1;
            memcpy(x->toks, toks, sizeof x->toks);
            const uint64_t bucket = h & (uint64_t)(p->n_buckets - 1);
            x->next = p->head[bucket];
            p->head[bucket] = b;
            p->n++;
            added[n++] = b;
        }
        if (b >= 0) p->e[b].used = p->clock - (uint64_t)k;
        parent = h;
    }
    return n;
}

struct use {
    uint64_t used;
    int32_t b;
};

static int by_use(const void *a, const void *b) {
    const uint64_t x = ((const struct use *)a)->used, y = ((const struct use *)b)->used;
    return x < y ? -1 : x > y;
}

int ft_prefix_blocks(const struct ft_prefix *p, int32_t *out) {
    int n = 0;
    for (int32_t b = 0; b < p->n_blocks; b++)
        if (p->e[b].valid) out[n++] = b;
    return n;
}

int ft_prefix_lru(const struct ft_prefix *p, int32_t *out) {
    struct use *u = malloc((size_t)(p->n > 0 ? p->n : 1) * sizeof *u);
    int n = 0;
    if (!u) return 0; /* out of memory: nothing evicted this time, never a wrong block */
    for (int32_t b = 0; b < p->n_blocks; b++)
        if (p->e[b].valid) u[n].used = p->e[b].used, u[n++].b = b;
    qsort(u, (size_t)n, sizeof *u, by_use);
    for (int i = 0; i < n; i++) out[i] = u[i].b;
    free(u);
    return n;
}

void ft_prefix_remove(struct ft_prefix *p, int32_t b) {
    if (b < 0 || b >= p->n_blocks || !p->e[b].valid) return;
    int32_t *link = &p->head[p->e[b].hash & (uint64_t)(p->n_buckets - 1)];
    while (*link != b) link = &p->e[*link].next;
    *link = p->e[b].next;
    ft_prefix_state_drop(p, b);
    p->e[b].valid = 0;
    p->n--;
}

int ft_prefix_size(const struct ft_prefix *p) { return p ? p->n : 0; }

void ft_prefix_set_states(struct ft_prefix *p, size_t bytes, size_t max_bytes) {
    p->state_bytes = bytes;
    p->max_states = bytes ? (int)FT_MIN(max_bytes / bytes, (size_t)p->n_blocks) : 0;
}

int ft_prefix_max_states(const struct ft_prefix *p) { return p ? p->max_states : 0; }
int ft_prefix_n_states(const struct ft_prefix *p) { return p ? p->n_states : 0; }

void ft_prefix_state_drop(struct ft_prefix *p, int32_t b) {
    if (b < 0 || b >= p->n_blocks || !p->e[b].state) return;
    free(p->e[b].state);
    p->e[b].state = NULL;
    p->n_states--;
}

const void *ft_prefix_state(const struct ft_prefix *p, int32_t b) {
    return b >= 0 && b < p->n_blocks ? p->e[b].state : NULL;
}

void *ft_prefix_state_put(struct ft_prefix *p, int32_t b) {
    if (p->max_states <= 0 || b < 0 || b >= p->n_blocks || !p->e[b].valid) return NULL;
    struct entry *x = &p->e[b];
    x->state_used = ++p->clock;
    if (x->state) return x->state;
    if (p->n_states >= p->max_states) { /* the least recently used one's buffer moves to b */
        int32_t lru = -1;
        for (int32_t i = 0; i < p->n_blocks; i++)
            if (p->e[i].state && (lru < 0 || p->e[i].state_used < p->e[lru].state_used)) lru = i;
        x->state = p->e[lru].state;
        p->e[lru].state = NULL;
        return x->state;
    }
    if (!(x->state = malloc(p->state_bytes))) return NULL;
    p->n_states++;
    return x->state;
}

void *ft_prefix_state_move(struct ft_prefix *p, int32_t from, int32_t to) {
    if (from == to || from < 0 || from >= p->n_blocks || !p->e[from].state) return ft_prefix_state_put(p, to);
    if (p->max_states <= 0 || to < 0 || to >= p->n_blocks || !p->e[to].valid || p->e[to].state) {
        ft_prefix_state_drop(p, from);
        return ft_prefix_state_put(p, to);
    }
    struct entry *x = &p->e[to];
    x->state = p->e[from].state;
    p->e[from].state = NULL;
    x->state_used = ++p->clock;
    return x->state;
}

int ft_prefix_match_state(struct ft_prefix *p, const int32_t *ids, int max_blocks, int32_t *blocks,
                          const void **state) {
    int k = ft_prefix_match(p, ids, max_blocks, blocks);
    while (k > 0 && !p->e[blocks[k - 1]].state) k--;
    *state = k > 0 ? p->e[blocks[k - 1]].state : NULL;
    if (k > 0) p->e[blocks[k - 1]].state_used = ++p->clock;
    return k;
}
