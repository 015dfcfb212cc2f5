/* test_cache.c — the expert cache's bookkeeping (pure C, no GPU): LRU order, never evicting an
 * expert of the current step, repeats within a step, per-layer counters, determinism, and the
 * error when a step needs more distinct experts than there are slots. The reference is a
 * straightforward list-based LRU simulation written here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/cache.h"
#include "moe/hotset.h"
#include "moe/trace.h"
#include "test.h"

TEST(hits_misses_and_lru_order) {
    struct ft_cache *c;
    EXPECT_OK(ft_cache_init(&c, 3, 2, 8, NULL));
    int32_t slots[4];
    struct ft_cache_fill f[4];
    int nf;
    int32_t a[2] = {1, 2};
    EXPECT_OK(ft_cache_lookup(c, 0, a, 2, slots, f, &nf));
    EXPECT_EQ(nf, 2);
    EXPECT(f[0].expert == 1 && f[1].expert == 2 && slots[0] != slots[1]);
    int32_t b[1] = {5}; /* layer 1, expert 5: third slot */
    EXPECT_OK(ft_cache_lookup(c, 1, b, 1, slots, f, &nf));
    EXPECT_EQ(nf, 1);
    int32_t h[1] = {1}; /* hit refreshes (0,1) */
    EXPECT_OK(ft_cache_lookup(c, 0, h, 1, slots, f, &nf));
    EXPECT_EQ(nf, 0);
    int32_t d[1] = {7}; /* evicts the LRU: (0,2) */
    EXPECT_OK(ft_cache_lookup(c, 0, d, 1, slots, f, &nf));
    EXPECT_EQ(nf, 1);
    EXPECT(c->slot_of[0 * 8 + 2] < 0 && c->slot_of[0 * 8 + 1] >= 0 && c->slot_of[1 * 8 + 5] >= 0);
    EXPECT_EQ(c->hits[0], 1);
    EXPECT_EQ(c->misses[0], 3);
    EXPECT_EQ(c->misses[1], 1);
    ft_cache_free(c);
}

/* A dropped expert (its copy failed) is a miss again and its slot is free for the next fill. */
TEST(drop_forgets_a_failed_fill) {
    struct ft_cache *c;
    EXPECT_OK(ft_cache_init(&c, 2, 1, 8, NULL));
    int32_t slots[2];
    struct ft_cache_fill f[2];
    int nf;
    int32_t a[2] = {3, 4};
    EXPECT_OK(ft_cache_lookup(c, 0, a, 2, slots, f, &nf));
    EXPECT_EQ(nf, 2);
    int32_t dropped_slot = f[0].slot;
    ft_cache_drop(c, 0, 3);
    ft_cache_drop(c, 0, 6); /* not cached: nothing happens */
    EXPECT(c->slot_of[3] < 0 && c->slot_of[4] >= 0);
    int32_t b[2] = {3, 4}; /* 3 is fetched again, into the freed slot; 4 still hits */
    EXPECT_OK(ft_cache_lookup(c, 0, b, 2, slots, f, &nf));
    EXPECT_EQ(nf, 1);
    EXPECT(f[0].expert == 3 && f[0].slot == dropped_slot && slots[0] == dropped_slot);
    EXPECT_EQ(c->hits[0], 1);
    ft_cache_free(c);
}

/* Prefill streaming borrows scratch slots: never the step's hits, the least recently used
 * first (its expert forgotten); they stay borrowed across layers (not free, never a victim),
 * so a long prompt's layers evict only what the first borrow took, and come back free. */
TEST(borrow_takes_lru_slots_and_holds_them) {
    struct ft_cache *c;
    EXPECT_OK(ft_cache_init(&c, 4, 2, 8, NULL));
    int32_t slots[4], got[4];
    struct ft_cache_fill f[4];
    int nf;
    int32_t a[4] = {0, 1, 2, 3}; /* layer 0: experts 0..3 fill the 4 slots, 0 the LRU */
    EXPECT_OK(ft_cache_lookup(c, 0, a, 4, slots, f, &nf));
    EXPECT_EQ(ft_cache_free_slots(c), 0);
    int32_t hit[1] = {2};
    ft_cache_probe(c, 0, hit, 1, slots); /* a prefill step: expert 2 hits */
    EXPECT_EQ(slots[0], f[2].slot);
    EXPECT_EQ(ft_cache_borrow(c, 2, got), 2); /* the LRU two: experts 0 and 1 */
    EXPECT(got[0] == f[0].slot && got[1] == f[1].slot);
    EXPECT(c->slot_of[0] < 0 && c->slot_of[1] < 0 && c->slot_of[2] >= 0 && c->slot_of[3] >= 0);
    EXPECT_EQ(ft_cache_free_slots(c), 0); /* borrowed slots are not free */
    EXPECT_EQ(ft_cache_borrow(c, 2, got + 2), 1); /* expert 3's slot; never the step's hit */
    EXPECT_EQ(got[2], f[3].slot);
    int32_t miss[1] = {5};
    ft_cache_probe(c, 1, miss, 1, slots); /* next layer: a miss; no borrowed slot is a victim */
    EXPECT_EQ(slots[0], -1);
    EXPECT_OK(ft_cache_admit(c, 1, miss, 1, f, &nf));
    EXPECT(nf == 1 && f[0].slot == c->slot_of[1 * 8 + 5]);
    EXPECT(f[0].slot != got[0] && f[0].slot != got[1] && f[0].slot != got[2]); /* expert 2's */
    EXPECT(c->slot_of[2] < 0);
    ft_cache_return(c);
    EXPECT_EQ(ft_cache_free_slots(c), 3); /* back, free, and the next victims */
    int32_t again[4];
    ft_cache_new_step(c);
    EXPECT_EQ(ft_cache_borrow(c, 3, again), 3);
    EXPECT(again[0] == got[0] && again[1] == got[1] && again[2] == got[2]);
    ft_cache_free(c);
}

TEST(never_evicts_the_current_step_and_handles_repeats) {
    struct ft_cache *c;
    EXPECT_OK(ft_cache_init(&c, 4, 1, 16, NULL));
    int32_t warm[4] = {0, 1, 2, 3}, slots[8];
    struct ft_cache_fill f[8];
    int nf;
    EXPECT_OK(ft_cache_lookup(c, 0, warm, 4, slots, f, &nf));
    /* a step using 0 and 3 (hits) and 9, 9 (one miss, repeated): the victim must be 1 or 2 */
    int32_t step[4] = {0, 9, 3, 9};
    EXPECT_OK(ft_cache_lookup(c, 0, step, 4, slots, f, &nf));
    EXPECT_EQ(nf, 1);
    EXPECT(slots[1] == slots[3]);
    EXPECT(c->slot_of[0] >= 0 && c->slot_of[3] >= 0 && c->slot_of[9] >= 0);
    EXPECT((c->slot_of[1] < 0) != (c->slot_of[2] < 0));
    /* five distinct experts cannot fit four slots */
    int32_t big[5] = {10, 11, 12, 13, 14};
    EXPECT_EQ(ft_cache_lookup(c, 0, big, 5, slots, f, &nf), FT_ERR_BUSY);
    EXPECT_CONTAINS(ft_error(), "--moe-cache-size");
    ft_cache_free(c);
}

/* Next-layer prefetch: the next layer's predicted experts take slots the current step does
 * not use (never the step's own), count no lookup or miss, skip what is resident, stop when no
 * slot is evictable, and are hits when their layer comes. */
TEST(prefetch_spares_the_step_and_counts_as_a_later_hit) {
    struct ft_cache *c;
    EXPECT_OK(ft_cache_init(&c, 4, 2, 8, NULL));
    int32_t slots[4];
    struct ft_cache_fill f[4];
    int nf;
    int32_t warm[4] = {0, 1, 2, 3};
    EXPECT_OK(ft_cache_lookup(c, 0, warm, 4, slots, f, &nf));
    int32_t step[2] = {2, 3}; /* layer 0's step uses 2 and 3: prefetch may take only 0 and 1 */
    EXPECT_OK(ft_cache_lookup(c, 0, step, 2, slots, f, &nf));
    const uint64_t h0 = c->hits[0], m0 = c->misses[0];
    int32_t pred[4] = {5, 6, 5, 7}; /* layer 1; 5 repeated; 7 finds no evictable slot */
    EXPECT_EQ(ft_cache_prefetch(c, 1, pred, 4, f), 2);
    EXPECT(f[0].layer == 1 && f[0].expert == 5 && f[1].expert == 6);
    EXPECT(c->slot_of[0] < 0 && c->slot_of[1] < 0 && c->slot_of[2] >= 0 && c->slot_of[3] >= 0);
    EXPECT(c->slot_of[8 + 7] < 0);
    EXPECT(c->hits[0] == h0 && c->misses[0] == m0 && c->hits[1] == 0 && c->misses[1] == 0);
    /* guesses enter least recent: used (5) it becomes the most recent; the next miss evicts
     * the unused guess (6), not the step's experts 2 and 3 that were used before it */
    int32_t l1[1] = {5};
    EXPECT_OK(ft_cache_lookup(c, 1, l1, 1, slots, f, &nf));
    EXPECT(nf == 0 && slots[0] == c->slot_of[8 + 5]);
    EXPECT_EQ(c->hits[1], 1);
    int32_t l2[1] = {4};
    EXPECT_OK(ft_cache_lookup(c, 0, l2, 1, slots, f, &nf));
    EXPECT(nf == 1 && c->slot_of[8 + 6] < 0 && c->slot_of[2] >= 0 && c->slot_of[8 + 5] >= 0);
    ft_cache_free(c);
}

/* Against a plain move-to-front list (the LRU spec, no slots or stamps) on a long random trace:
 * same misses, and every id resolved to a slot that really holds it. The spec's order: a step's
 * hits are refreshed first, then its misses placed, each evicting the oldest entry that the step
 * does not use. */
TEST(matches_reference_lru_on_random_trace) {
    enum { S = 6, L = 3, E = 10, STEPS = 4000, K = 3 };
    struct ft_cache *c;
    EXPECT_OK(ft_cache_init(&c, S, L, E, NULL));
    int list[S], n_list = 0; /* keys, least recent first */
    long ref_miss = 0, miss = 0, bad = 0;
    uint64_t r = 7;
    for (int t = 0; t < STEPS; t++) {
        int layer = t % L;
        int32_t ids[K], slots[K];
        struct ft_cache_fill f[K];
        int nf, keys[K];
        for (int j = 0; j < K; j++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            ids[j] = (int32_t)(r % (j ? 4 : E)); /* skewed: later slots favour low ids */
            keys[j] = layer * E + ids[j];
        }
        if (ft_cache_lookup(c, layer, ids, K, slots, f, &nf) != FT_OK) bad++;
        miss += nf;
        for (int j = 0; j < K; j++) bad += c->key_of[slots[j]] != keys[j];
        /* reference, pass 1: refresh hits in order */
        int hit[K];
        for (int j = 0; j < K; j++) {
            int at = -1;
            for (int i = 0; i < n_list; i++) at = list[i] == keys[j] ? i : at;
            hit[j] = at >= 0;
            if (at >= 0) {
                memmove(list + at, list + at + 1, (size_t)(n_list - at - 1) * sizeof *list);
                list[n_list - 1] = keys[j];
            }
        }
        /* pass 2: place misses (a repeat of an earlier miss in the same step is a hit) */
        for (int j = 0; j < K; j++) {
            if (hit[j]) continue;
            int present = 0;
            for (int i = 0; i < n_list; i++) present |= list[i] == keys[j];
            if (present) continue;
            ref_miss++;
            if (n_list == S) {
                int v = 0, used = 1;
                for (; v < n_list && used; v += used) {
                    used = 0;
                    for (int q = 0; q < K; q++) used |= list[v] == keys[q];
                }
                memmove(list + v, list + v + 1, (size_t)(n_list - v - 1) * sizeof *list);
                n_list--;
            }
            list[n_list++] = keys[j];
        }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(miss, ref_miss);
    fprintf(stderr, "  random trace: %ld misses of %d lookups, hit rate %.3f\n", miss, STEPS * K,
            ft_cache_hit_rate(c));
    ft_cache_free(c);
}

/* The LRU policy keeps a recency list and never-used bits instead of scanning: on a random mix
 * of every operation (lookups, probe + admit of a subset, borrows, returns, drops, new steps)
 * its victim is the scan's before each operation, for 70 slots (two words of bits). */
TEST(victim_equals_the_scan_under_every_operation) {
    enum { S = 70, L = 4, E = 40, OPS = 20000, K = 8 };
    struct ft_cache *c;
    EXPECT_OK(ft_cache_init(&c, S, L, E, NULL));
    long differ = 0, borrowed = 0, dropped = 0, admitted = 0;
    uint64_t r = 11;
#define RND() (r ^= r << 13, r ^= r >> 7, r ^= r << 17, r)
    for (int t = 0; t < OPS; t++) {
        differ += ft_cache_lru.victim(c, c->step) != ft_cache_lru_scan(c);
        int layer = (int)(RND() % L), op = (int)(RND() % 16);
        int32_t ids[K], slots[K + S];
        struct ft_cache_fill f[K];
        int nf = 0;
        for (int j = 0; j < K; j++) ids[j] = (int32_t)(RND() % (j < 4 ? E : 6));
        if (op < 8) {
            ft_cache_lookup(c, layer, ids, K, slots, f, &nf);
        } else if (op < 12) { /* hybrid: probe, then admit some of the distinct misses */
            ft_cache_probe(c, layer, ids, K, slots);
            int32_t miss[K];
            int m = 0;
            for (int j = 0; j < K; j++) {
                int dup = 0;
                for (int q = 0; q < m; q++) dup |= miss[q] == ids[j];
                if (slots[j] < 0 && !dup) miss[m++] = ids[j];
            }
            ft_cache_admit(c, layer, miss, (int)(RND() % (m + 1)), f, &nf);
            admitted += nf;
        } else if (op == 12) {
            ft_cache_probe(c, layer, ids, 2, slots);
            borrowed += ft_cache_borrow(c, (int)(RND() % 6), slots);
        } else if (op == 13) {
            ft_cache_return(c);
        } else if (op == 14) {
            ft_cache_drop(c, layer, ids[0]);
            dropped++;
        } else {
            ft_cache_new_step(c);
        }
    }
#undef RND
    fprintf(stderr, "  %d operations: %ld victims differ from the scan; %ld admitted, %ld borrowed, "
            "%ld drops\n", OPS, differ, admitted, borrowed, dropped);
    EXPECT_EQ(differ, 0);
    EXPECT(admitted > 0 && borrowed > 0);
    ft_cache_free(c);
}

/* LFRU by its definition, independently: slots with their key, last use stamp and step; keys'
 * decayed counts in float like the cache's. */
struct ref_lfru {
    int S, E;
    int32_t key[64];
    uint64_t last[64], stepv[64], tick, step;
    float cnt[4096];
    uint32_t stamp[4096], lsteps[16];
};

static float ref_count(const struct ref_lfru *r, int key) {
    uint32_t d = r->lsteps[key / r->E] - r->stamp[key];
    return d < FT_CACHE_DECAY_LEN ? r->cnt[key] * exp2f(-(float)d / FT_CACHE_HALF_LIFE) : 0.0f;
}

static int ref_slot_of(const struct ref_lfru *r, int key) {
    for (int s = 0; s < r->S; s++)
        if (r->key[s] == key) return s;
    return -1;
}

TEST(lfru_matches_its_definition_on_random_traces) {
    for (int trial = 0; trial < 6; trial++) {
        const int L = 3, E = 24, k = 4, S = 10 + trial * 3;
        struct ft_trace t;
        ft_trace_synthetic(&t, L, E, k, 400, 0.4 + 0.2 * trial, trial % 2 ? 0.5 : 0.0, 77 + trial);
        struct ft_cache *c = NULL;
        EXPECT_OK(ft_cache_init(&c, S, L, E, &ft_cache_lfru));
        static struct ref_lfru r;
        memset(&r, 0, sizeof r);
        r.S = S, r.E = E;
        for (int s = 0; s < S; s++) r.key[s] = -1;
        long differ = 0, hits = 0;
        for (size_t i = 0; c && i < t.len; i += 2 + (size_t)t.data[i + 1]) {
            const int layer = t.data[i], n = t.data[i + 1];
            const int32_t *ids = t.data + i + 2;
            int32_t slots[8];
            struct ft_cache_fill f[8];
            int nf = 0;
            EXPECT_OK(ft_cache_lookup(c, layer, ids, n, slots, f, &nf));
            /* the reference: hits refreshed in order, then each miss evicts by the definition */
            r.step++;
            uint32_t now = ++r.lsteps[layer];
            for (int j = 0; j < n; j++) {
                int key = layer * E + ids[j], s = ref_slot_of(&r, key);
                r.cnt[key] = ref_count(&r, key) + 1.0f, r.stamp[key] = now;
                if (s >= 0) r.last[s] = ++r.tick, r.stepv[s] = r.step, hits++;
            }
            int q = 0;
            for (int j = 0; j < n; j++) {
                int key = layer * E + ids[j];
                if (ref_slot_of(&r, key) >= 0) continue;
                /* a free slot first (lowest index); else the least count among the experts
                 * not used by their layer's last FT_CACHE_PROTECT lookups (else among all),
                 * ties to the least recent */
                int best = -1, best_recent = 1;
                float bn = 0;
                for (int s = 0; s < S && best < 0; s++)
                    if (r.key[s] < 0 && r.stepv[s] != r.step) best = s;
                const int have_free = best >= 0;
                for (int s = 0; !have_free && s < S; s++) {
                    if (r.stepv[s] == r.step || r.key[s] < 0) continue;
                    const int key = r.key[s];
                    const int recent = r.lsteps[key / E] - r.stamp[key] < FT_CACHE_PROTECT;
                    const float cn = ref_count(&r, key);
                    if (best < 0 || recent < best_recent ||
                        (recent == best_recent && (cn < bn || (cn == bn && r.last[s] < r.last[best]))))
                        best = s, bn = cn, best_recent = recent;
                }
                differ += q >= nf || f[q].slot != best || f[q].expert != ids[j];
                q++;
                r.key[best] = key, r.last[best] = ++r.tick, r.stepv[best] = r.step;
            }
            differ += q != nf;
        }
        uint64_t h = 0, lk = 0;
        EXPECT_OK(ft_trace_simulate(&t, S, &ft_cache_lfru, &h, &lk));
        CHECK_(differ == 0, "trial %d: %ld fills differ from the definition", trial, differ);
        CHECK_((long)h == hits && lk == t.n_lookups, "trial %d: replay %llu hits, reference %ld", trial,
               (unsigned long long)h, hits);
        ft_cache_free(c);
        ft_trace_free(&t);
    }
}

/* Pools past 4 x FT_CACHE_LFRU_SAMPLE slots pick LFRU's victim from a sample: it must still
 * close most of the gap the exact scan closes over LRU (bench/RESULTS.md: the scan closes 59% of
 * LRU's gap to the oracle on this trace at 10% slots), and never lose to LRU on sticky routing
 * by more than noise. The exact scan is the reference: the same victim rule over every slot. */
TEST(lfru_sampled_keeps_the_scans_gain_on_large_pools) {
    const int L = 12, E = 128, k = 8, S = 4 * FT_CACHE_LFRU_SAMPLE + 1;
    struct ft_trace z, st;
    ft_trace_synthetic(&z, L, E, k, 400, 1.2, 0.0, 5);
    ft_trace_synthetic(&st, L, E, k, 400, 0.0, 0.8, 6);
    uint64_t hl = 0, hf = 0, ho = 0, lk = 0, sl = 0, sf = 0;
    EXPECT_OK(ft_trace_simulate(&z, S, &ft_cache_lru, &hl, &lk));
    EXPECT_OK(ft_trace_simulate(&z, S, &ft_cache_lfru, &hf, &lk));
    EXPECT_OK(ft_trace_oracle(&z, S, &ho, &lk));
    EXPECT_OK(ft_trace_simulate(&st, S, &ft_cache_lru, &sl, &lk));
    EXPECT_OK(ft_trace_simulate(&st, S, &ft_cache_lfru, &sf, &lk));
    const double closed = (double)(hf - hl) / (double)(ho - hl);
    printf("  zipf:1.2 at %d slots: LRU %llu, sampled LFRU %llu, oracle %llu hits (%.0f%% of the "
           "gap); sticky:0.8 LRU %llu, LFRU %llu\n", S, (unsigned long long)hl,
           (unsigned long long)hf, (unsigned long long)ho, 100 * closed, (unsigned long long)sl,
           (unsigned long long)sf);
    CHECK_(hf > hl && closed > 0.3, "sampled LFRU closes %.0f%% of LRU's gap", 100 * closed);
    CHECK_((double)sf >= 0.99 * (double)sl, "sticky: LFRU %llu hits, LRU %llu", (unsigned long long)sf,
           (unsigned long long)sl);
    ft_trace_free(&z);
    ft_trace_free(&st);
}

/* markov by its definition, independently (no sampling below 4 x FT_CACHE_MARKOV_SAMPLE
 * slots): each key's uses, uses right after a use and last lookup; each layer's lookups, ids
 * and repeats; the victim is a free slot (lowest index), else the least probability of use at
 * its layer's next lookup, ties to the least recent. */
struct ref_markov {
    int S, E;
    int32_t key[64];
    uint64_t last[64], stepv[64], tick, step;
    float use[4096], rep[4096], look[16], ids[16], reps[16];
    uint32_t stamp[4096], lsteps[16], seen[4096];
};

static float ref_markov_p(const struct ref_markov *r, int key) {
    const int l = key / r->E;
    const float m = FT_CACHE_MARKOV_PRIOR, u = r->use[key], n = r->look[l];
    if (r->seen[key] && r->stamp[key] == r->lsteps[l]) {
        const float prior = r->ids[l] > 0 ? r->reps[l] / r->ids[l] : 0.0f;
        return (r->rep[key] + m * prior) / ((u > 1 ? u - 1 : 0) + m);
    }
    const float N = n * (float)r->E;
    const float prior = N > r->ids[l] ? (r->ids[l] - r->reps[l]) / (N - r->ids[l]) : 0.0f;
    return (u - r->rep[key] + m * prior) / ((n > u ? n - u : 0) + m);
}

TEST(markov_matches_its_definition_on_random_traces) {
    for (int trial = 0; trial < 6; trial++) {
        const int L = 3, E = 24, k = 4, S = 10 + trial * 3;
        struct ft_trace t;
        ft_trace_synthetic(&t, L, E, k, 400, trial % 3 ? 0.5 + 0.3 * trial : 0.0,
                           trial % 2 ? 0.7 : 0.0, 31 + trial);
        struct ft_cache *c = NULL;
        EXPECT_OK(ft_cache_init(&c, S, L, E, &ft_cache_markov));
        static struct ref_markov r;
        memset(&r, 0, sizeof r);
        r.S = S, r.E = E;
        for (int s = 0; s < S; s++) r.key[s] = -1;
        long differ = 0, hits = 0;
        for (size_t i = 0; c && i < t.len; i += 2 + (size_t)t.data[i + 1]) {
            const int layer = t.data[i], n = t.data[i + 1];
            const int32_t *ids = t.data + i + 2;
            int32_t slots[8];
            struct ft_cache_fill f[8];
            int nf = 0;
            EXPECT_OK(ft_cache_lookup(c, layer, ids, n, slots, f, &nf));
            r.step++;
            const uint32_t now = ++r.lsteps[layer];
            r.look[layer] += 1;
            for (int j = 0; j < n; j++) {
                const int key = layer * E + ids[j];
                int s = -1;
                for (int q = 0; q < S; q++) s = r.key[q] == key ? q : s;
                const float rep = r.seen[key] && r.stamp[key] == now - 1;
                r.use[key] += 1, r.rep[key] += rep, r.ids[layer] += 1, r.reps[layer] += rep;
                r.seen[key] = 1, r.stamp[key] = now;
                if (s >= 0) r.last[s] = ++r.tick, r.stepv[s] = r.step, hits++;
            }
            int q = 0;
            for (int j = 0; j < n; j++) {
                const int key = layer * E + ids[j];
                int s = -1, best = -1;
                for (int z = 0; z < S; z++) s = r.key[z] == key ? z : s;
                if (s >= 0) continue;
                for (int z = 0; z < S && best < 0; z++)
                    if (r.key[z] < 0 && r.stepv[z] != r.step) best = z;
                float bp = 0;
                for (int z = 0; best < 0 || r.key[best] >= 0 ? z < S : 0; z++) {
                    if (r.stepv[z] == r.step || r.key[z] < 0) continue;
                    const float p = ref_markov_p(&r, r.key[z]);
                    if (best < 0 || r.key[best] < 0 || p < bp || (p == bp && r.last[z] < r.last[best]))
                        best = z, bp = p;
                }
                differ += q >= nf || f[q].slot != best || f[q].expert != ids[j];
                q++;
                r.key[best] = key, r.last[best] = ++r.tick, r.stepv[best] = r.step;
            }
            differ += q != nf;
        }
        uint64_t h = 0, lk = 0, ho = 0;
        EXPECT_OK(ft_trace_simulate(&t, S, &ft_cache_markov, &h, &lk));
        EXPECT_OK(ft_trace_oracle(&t, S, &ho, &lk));
        CHECK_(differ == 0, "trial %d: %ld fills differ from the definition", trial, differ);
        CHECK_((long)h == hits && h <= ho, "trial %d: replay %llu hits, reference %ld, oracle %llu",
               trial, (unsigned long long)h, hits, (unsigned long long)ho);
        ft_cache_free(c);
        ft_trace_free(&t);
    }
}

/* Sampled markov on a large pool: on zipf it closes more of LRU's gap to the oracle than LFRU
 * (bench/RESULTS.md), on sticky routing it stays within noise of LRU, and the oracle bounds it. */
TEST(markov_sampled_beats_lfru_on_zipf_and_holds_lru_on_sticky) {
    const int L = 12, E = 128, k = 8, S = 4 * FT_CACHE_MARKOV_SAMPLE + 1;
    struct ft_trace z, st;
    ft_trace_synthetic(&z, L, E, k, 400, 1.2, 0.0, 5);
    ft_trace_synthetic(&st, L, E, k, 400, 0.0, 0.8, 6);
    uint64_t hl = 0, hf = 0, hm = 0, ho = 0, lk = 0, sl = 0, sm = 0, so = 0;
    EXPECT_OK(ft_trace_simulate(&z, S, &ft_cache_lru, &hl, &lk));
    EXPECT_OK(ft_trace_simulate(&z, S, &ft_cache_lfru, &hf, &lk));
    EXPECT_OK(ft_trace_simulate(&z, S, &ft_cache_markov, &hm, &lk));
    EXPECT_OK(ft_trace_oracle(&z, S, &ho, &lk));
    EXPECT_OK(ft_trace_simulate(&st, S, &ft_cache_lru, &sl, &lk));
    EXPECT_OK(ft_trace_simulate(&st, S, &ft_cache_markov, &sm, &lk));
    EXPECT_OK(ft_trace_oracle(&st, S, &so, &lk));
    printf("  zipf:1.2 at %d slots: LRU %llu, LFRU %llu, markov %llu, oracle %llu hits; sticky:0.8 "
           "LRU %llu, markov %llu, oracle %llu\n", S, (unsigned long long)hl, (unsigned long long)hf,
           (unsigned long long)hm, (unsigned long long)ho, (unsigned long long)sl,
           (unsigned long long)sm, (unsigned long long)so);
    CHECK_(hm >= hf && hm <= ho, "zipf: markov %llu, LFRU %llu, oracle %llu", (unsigned long long)hm,
           (unsigned long long)hf, (unsigned long long)ho);
    CHECK_((double)sm >= 0.995 * (double)sl && sm <= so, "sticky: markov %llu hits, LRU %llu",
           (unsigned long long)sm, (unsigned long long)sl);
    ft_trace_free(&z);
    ft_trace_free(&st);
}

/* The most hits by exhaustive search (single-id steps, a few keys). */
static int best_hits(const int *seq, int n, int i, int S, int *res, int n_res) {
    if (i == n) return 0;
    for (int q = 0; q < n_res; q++)
        if (res[q] == seq[i]) return 1 + best_hits(seq, n, i + 1, S, res, n_res);
    if (n_res < S) {
        res[n_res] = seq[i];
        return best_hits(seq, n, i + 1, S, res, n_res + 1);
    }
    int best = 0;
    for (int q = 0; q < n_res; q++) {
        int old = res[q];
        res[q] = seq[i];
        int h = best_hits(seq, n, i + 1, S, res, n_res);
        best = h > best ? h : best;
        res[q] = old;
    }
    return best;
}

TEST(oracle_is_optimal_and_bounds_every_policy) {
    uint64_t x = 12345;
    for (int trial = 0; trial < 40; trial++) { /* Belady equals the exhaustive optimum */
        const int n = 12, S = 2 + trial % 2;
        int seq[12], res[4];
        struct ft_trace t;
        ft_trace_init(&t, 1, 5);
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            seq[i] = (int)(x >> 33) % 5;
            int32_t id = seq[i];
            ft_trace_add(&t, 0, &id, 1);
        }
        uint64_t h = 0, lk = 0;
        EXPECT_OK(ft_trace_oracle(&t, S, &h, &lk));
        int want = best_hits(seq, n, 0, S, res, 0);
        CHECK_((int)h == want && lk == (uint64_t)n, "trial %d: oracle %llu hits, optimum %d", trial,
               (unsigned long long)h, want);
        ft_trace_free(&t);
    }
    for (int trial = 0; trial < 8; trial++) { /* multi-id steps: above LRU and LFRU */
        struct ft_trace t;
        ft_trace_synthetic(&t, 4, 64, 8, 300, 0.3 * trial, trial % 3 ? 0.6 : 0.0, 9 + trial);
        uint64_t ho, hl, hf, lk;
        const int S = 40 + 20 * (trial % 4);
        EXPECT_OK(ft_trace_oracle(&t, S, &ho, &lk));
        EXPECT_OK(ft_trace_simulate(&t, S, &ft_cache_lru, &hl, &lk));
        EXPECT_OK(ft_trace_simulate(&t, S, &ft_cache_lfru, &hf, &lk));
        uint64_t hm = 0;
        EXPECT_OK(ft_trace_simulate(&t, S, &ft_cache_markov, &hm, &lk));
        CHECK_(ho >= hm, "trial %d: oracle %llu below markov %llu", trial, (unsigned long long)ho,
               (unsigned long long)hm);
        CHECK_(ho >= hl && ho >= hf, "trial %d: oracle %llu below lru %llu or lfru %llu", trial,
               (unsigned long long)ho, (unsigned long long)hl, (unsigned long long)hf);
        ft_trace_free(&t);
    }
}

TEST(trace_saves_loads_and_refuses_a_bad_file) {
    struct ft_trace t, u;
    ft_trace_synthetic(&t, 3, 16, 2, 50, 1.0, 0.0, 5);
    const char *path = "test_cache_trace.bin";
    EXPECT_OK(ft_trace_save(&t, path));
    EXPECT_OK(ft_trace_load(&u, path));
    EXPECT(u.len == t.len && u.n_steps == t.n_steps && u.n_layers == 3 && u.n_experts == 16 &&
           !memcmp(u.data, t.data, t.len * sizeof *t.data));
    struct ft_trace_stats a;
    ft_trace_stats(&u, &a);
    EXPECT(a.entropy > 0 && a.entropy < 1 && a.experts90 >= 1 && a.experts90 <= 16);
    ft_trace_free(&u);
    FILE *f = fopen(path, "r+b"); /* an expert id out of range */
    if (f) {
        int32_t bad = 99;
        fseek(f, 20 + 2 * 4, SEEK_SET);
        fwrite(&bad, 4, 1, f);
        fclose(f);
    }
    EXPECT_EQ(ft_trace_load(&u, path), FT_ERR_FORMAT);
    EXPECT(strstr(ft_error(), "out of range") != NULL);
    f = fopen(path, "wb");
    if (f) fputs("nope", f), fclose(f);
    EXPECT_EQ(ft_trace_load(&u, path), FT_ERR_FORMAT);
    remove(path);
    ft_trace_free(&t);
}

/* The hot set: a save reads back as written; its top keys are the brute-force ranking (largest
 * count first, ties to the lower key, zero counts and skipped layers left out); a file of
 * another shape, a truncated or padded one, and one with a NaN are refused, a missing one is
 * FT_ERR_IO. */
TEST(hotset_saves_loads_ranks_and_refuses_bad_files) {
    char dir[] = "/tmp/ft_hotset_XXXXXX", path[512];
    if (!mkdtemp(dir)) return;
    snprintf(path, sizeof path, "%s/sub/hot.bin", dir);
    const int L = 4, E = 16, n = L * E;
    struct ft_hotset h = {L, E, 12345, malloc((size_t)n * sizeof(float))}, g;
    for (int k = 0; k < n; k++) h.count[k] = (float)((k * 37) % 11) * (k % 5 ? 1.0f : 0.0f);
    EXPECT_OK(ft_hotset_save(&h, path));
    EXPECT_OK(ft_hotset_load(path, L, E, 12345, &g));
    EXPECT(g.count && !memcmp(g.count, h.count, (size_t)n * sizeof(float)));
    const uint8_t skip[4] = {0, 1, 0, 0};
    for (int want = 1; want <= n; want += 7) {
        int32_t keys[64], ref[64];
        int got = ft_hotset_top(&g, skip, want, keys), m = 0;
        for (int round = 0; round < want; round++) { /* the reference: repeated argmax */
            int best = -1;
            for (int k = 0; k < n; k++) {
                int used = 0;
                for (int j = 0; j < m; j++) used |= ref[j] == k;
                if (used || skip[k / E] || !(g.count[k] > 0)) continue;
                if (best < 0 || g.count[k] > g.count[best]) best = k;
            }
            if (best < 0) break;
            ref[m++] = best;
        }
        EXPECT_EQ(got, m);
        for (int j = 0; j < got && j < m; j++) EXPECT_EQ(keys[j], ref[j]);
    }
    ft_hotset_free(&g);
    EXPECT_EQ(ft_hotset_load(path, L, E + 1, 12345, &g), FT_ERR_FORMAT);
    EXPECT_EQ(ft_hotset_load(path, L, E, 999, &g), FT_ERR_FORMAT);
    EXPECT(g.count == NULL);
    FILE *f = fopen(path, "ab"); /* one byte too many */
    if (f) fputc(0, f), fclose(f);
    EXPECT_EQ(ft_hotset_load(path, L, E, 12345, &g), FT_ERR_FORMAT);
    EXPECT(truncate(path, 30) == 0);
    EXPECT_EQ(ft_hotset_load(path, L, E, 12345, &g), FT_ERR_FORMAT);
    h.count[3] = NAN;
    EXPECT_OK(ft_hotset_save(&h, path));
    EXPECT_EQ(ft_hotset_load(path, L, E, 12345, &g), FT_ERR_FORMAT);
    remove(path);
    EXPECT_EQ(ft_hotset_load(path, L, E, 12345, &g), FT_ERR_IO);
    ft_hotset_free(&h);
    snprintf(path, sizeof path, "%s/sub", dir);
    rmdir(path);
    rmdir(dir);
}

TEST_MAIN("cache")
