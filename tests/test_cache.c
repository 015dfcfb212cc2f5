/* test_cache.c — the expert cache's bookkeeping (pure C, no GPU): LRU order, never evicting an
 * expert of the current step, repeats within a step, per-layer counters, determinism, and the
 * error when a step needs more distinct experts than there are slots. The reference is a
 * straightforward list-based LRU simulation written here. */
#include <stdlib.h>
#include <string.h>

#include "moe/cache.h"
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

TEST_MAIN("cache")
