/* cache.h — the GPU expert cache's bookkeeping (docs/ARCHITECTURE.md section 5), pure C: one global pool
 * of S slots shared by all MoE layers (key = layer * E + expert), least-recently-used eviction
 * that never evicts an expert the current step uses, per-layer hit/miss counters. The copies
 * themselves are the GPU backend's; this module only decides. Deterministic. Engine thread only.
 * The victim choice is one function (struct ft_cache_policy) so a frequency-aware policy can be
 * added and compared on the same traces. */
#ifndef FT_MOE_CACHE_H
#define FT_MOE_CACHE_H

#include <stdint.h>

#include "ft.h"

struct ft_cache;

/* Picks the slot to evict among those not used by the current step (step_of[s] != step) and
 * not held; returns -1 when none is free. LRU: the least last_use, the lowest index among equal
 * ones (never-used slots first). */
struct ft_cache_policy {
    const char *name;
    int (*victim)(const struct ft_cache *c, uint64_t step);
    void (*hit)(struct ft_cache *c, int slot);  /* a lookup found the slot's expert (may be NULL) */
    void (*fill)(struct ft_cache *c, int slot); /* a slot took a new expert (may be NULL) */
};
extern const struct ft_cache_policy ft_cache_lru;
/* Frequency-aware (LFRU): among the evictable slots, a free one first (lowest index), else the
 * one whose expert has the fewest uses, each use's weight halving every FT_CACHE_HALF_LIFE
 * lookups of its layer (about that many tokens of decode), sparing the experts their layer used
 * in its last FT_CACHE_PROTECT lookups while any other is left (a newcomer gets its second use:
 * sticky routing needs it); ties: the least recent. Pools of more than 4 x
 * FT_CACHE_LFRU_SAMPLE slots take the best of FT_CACHE_LFRU_SAMPLE slots drawn at random
 * (deterministically, from the access counter) instead of scanning every slot, which cost up to
 * 69 us a layer step at 30 GiB; the scan remains when no drawn slot may be evicted.
 * bench/RESULTS.md has the measurements behind the constants. */
#define FT_CACHE_HALF_LIFE 16
#define FT_CACHE_PROTECT 1
#define FT_CACHE_LFRU_SAMPLE 64
extern const struct ft_cache_policy ft_cache_lfru;
/* Segmented LRU: an expert enters on probation and is protected from its first hit on; the
 * protected hold at most FT_CACHE_PROTECTED_PCT% of the slots (the least recent of them goes
 * back on probation); the victim is the least recent on probation (else of the protected). */
#define FT_CACHE_PROTECTED_PCT 80
extern const struct ft_cache_policy ft_cache_slru;
/* Next-use (markov): evicts the expert least likely to be used at its layer's next lookup, by a
 * two-state model learnt per expert from its own lookups: a = P(used | used at the layer's
 * previous lookup), b = P(used | not used at it), each a ratio of counts (uses, uses right after
 * a use, the layer's lookups) with a prior of FT_CACHE_MARKOV_PRIOR pseudo-lookups at k / E,
 * every count halved each FT_CACHE_MARKOV_HALVE lookups of its layer (the model follows a
 * drifting router). An expert used at its layer's last lookup scores a, any other b; ties go to
 * the least recent. On iid (zipf) routing a = b = the expert's frequency: LFU with the slots
 * split across layers by frequency; on sticky routing a >> b: LRU's keep-the-last-step. Free
 * slots first; pools of more than 4 x FT_CACHE_MARKOV_SAMPLE slots take the best of
 * FT_CACHE_MARKOV_SAMPLE drawn slots, as LFRU does. */
#define FT_CACHE_MARKOV_PRIOR 2.0f
#define FT_CACHE_MARKOV_HALVE 1024
#define FT_CACHE_MARKOV_SAMPLE 64
extern const struct ft_cache_policy ft_cache_markov;
/* The policy called name ("lru", "lfru", "slru", "markov"), or NULL. */
const struct ft_cache_policy *ft_cache_policy_find(const char *name);
/* LRU's victim by its definition, a scan of every slot (O(slots); ft_cache_lru keeps a recency
 * order instead): the reference for tests and bench_cache. */
int ft_cache_lru_scan(const struct ft_cache *c);

struct ft_cache {
    const struct ft_cache_policy *policy;
    int n_slots, n_layers, n_experts;
    int32_t *slot_of;       /* [n_layers * n_experts] slot or -1 */
    int32_t *key_of;        /* [n_slots] key or -1 */
    uint64_t *last_use;     /* [n_slots] access stamp of the last use (0 = never): recency */
    uint64_t *step_of;      /* [n_slots] the step that last used the slot */
    uint64_t tick;          /* access counter */
    uint64_t step;          /* the current step (a layer's lookup) */
    uint64_t *hits, *misses;/* [n_layers] */
    uint32_t *freq;         /* [n_layers * n_experts] uses so far (hybrid: fetch the most used) */
    uint8_t *held;          /* [n_slots] 1: borrowed (prefill scratch), out of circulation */
    /* recency order, kept by every operation so that LRU's victim is found at the front
     * instead of by a scan of every slot (2,970 slots at 30 GiB: ~4 us a fetch, on the decode
     * step's critical path): the slots with last_use > 0 and not held in a list, least recent
     * at head; the never-used ones (last_use 0, not held) as bits, lowest index first */
    int32_t *prev, *next;   /* [n_slots] -1: none */
    int32_t head, tail;
    uint64_t *unused;       /* [(n_slots + 63) / 64] */
    /* LFRU: each key's decayed use count as of its layer's lookup fstamp, the lookups of each
     * layer so far, 2^(-d / FT_CACHE_HALF_LIFE) for d lookups */
    float *fcount;          /* [n_layers * n_experts] */
    uint32_t *fstamp;       /* [n_layers * n_experts] */
    uint32_t *lsteps;       /* [n_layers] */
    float *decay;           /* [FT_CACHE_DECAY_LEN] */
    struct ft_trace *trace; /* every probe recorded into it, or NULL (ft_cache_record) */
    uint8_t *prot;          /* [n_slots] SLRU: protected */
    int n_prot;
    /* markov: per key its uses and the uses that followed a use at the layer's previous
     * lookup; per layer its lookups and the mean distinct ids a lookup (k); all halved each
     * FT_CACHE_MARKOV_HALVE lookups of the layer */
    float *muse, *mrep;     /* [n_layers * n_experts] */
    float *mlook, *mids, *mreps; /* [n_layers]; mreps: the sum of the layer's mrep */
};
#define FT_CACHE_DECAY_LEN (24 * FT_CACHE_HALF_LIFE)

struct ft_trace;
/* Records every following probe's (layer, ids) into t (NULL: stop); t outlives the recording. */
void ft_cache_record(struct ft_cache *c, struct ft_trace *t);

/* A miss to fill: copy expert `expert` of `layer` into `slot`. */
struct ft_cache_fill {
    int layer, expert, slot;
};

enum ft_status ft_cache_init(struct ft_cache **out, int n_slots, int n_layers, int n_experts,
                             const struct ft_cache_policy *policy);
void ft_cache_free(struct ft_cache *c);

/* One layer's step: resolves ids[0..n) (repeats allowed) to slots[0..n); the experts that were
 * not resident are assigned slots and listed in fills (at most n entries; *n_fills set).
 * Order of recency: the step's hits are refreshed first (in ids order), then its misses placed
 * (in ids order), each evicting the least recently used slot the step does not use.
 * Fails with FT_ERR_BUSY when the step needs more distinct experts than there are slots. */
enum ft_status ft_cache_lookup(struct ft_cache *c, int layer, const int32_t *ids, int n,
                               int32_t *slots, struct ft_cache_fill *fills, int *n_fills);
/* The two halves of ft_cache_lookup, for a caller that decides which misses to admit (the
 * hybrid backend computes the others on the CPU): probe starts a step, refreshes and resolves
 * the hits (misses get -1) and counts uses; admit places the chosen missing experts (distinct,
 * of the same layer and step) into slots, listing the fills. */
void ft_cache_probe(struct ft_cache *c, int layer, const int32_t *ids, int n, int32_t *slots);
enum ft_status ft_cache_admit(struct ft_cache *c, int layer, const int32_t *experts, int n,
                              struct ft_cache_fill *fills, int *n_fills);
/* Next-layer prefetch: places the experts of `layer` that are not resident (distinct) into
 * slots the current step does not use, as admit does, without counting lookups or misses (the
 * layer's own probe counts them when it comes); stops at the first that finds no evictable
 * slot. A guess enters at the least recent end of the order: used, its layer's lookup makes it
 * the most recent; wrong, it is the next victim instead of pushing out an expert in use (zipf
 * routing lost 8% decode to that pollution). Lists the fills and returns how many. */
int ft_cache_prefetch(struct ft_cache *c, int layer, const int32_t *experts, int n,
                      struct ft_cache_fill *fills);
/* Prefill streaming: takes up to n slots out of the cache as scratch (ft_cache_probe started
 * the step): each is the policy's victim among the slots the step does not use (free ones
 * first), its expert forgotten. Borrowed slots stay out of circulation (no lookup or admit
 * takes them, and they do not count as free) until ft_cache_return, so a prompt's layers reuse
 * one set of scratch slots instead of each evicting its own. Returns how many it got. */
int ft_cache_borrow(struct ft_cache *c, int n, int32_t *slots);
/* Gives every borrowed slot back, free and never-used (the next victims). */
void ft_cache_return(struct ft_cache *c);
/* Slots holding no expert and not borrowed (never used, dropped, or returned). */
int ft_cache_free_slots(const struct ft_cache *c);
/* Starts a new step without a lookup: the previous step's slots become evictable. */
void ft_cache_new_step(struct ft_cache *c);
/* Forgets a key (after a failed copy). */
void ft_cache_drop(struct ft_cache *c, int layer, int expert);
/* Hit rate over all lookups so far (0 when none). */
double ft_cache_hit_rate(const struct ft_cache *c);

#endif
