/* test_prefix.c — the prefix cache's index (engine/prefix.h): chained block hashes found again
 * only for the same tokens from the start, a position indexed once, LRU order leaves first;
 * hybrid models' state checkpoints on the entries. */
#include <string.h>

#include "engine/forward.h"
#include "engine/prefix.h"
#include "test.h"

#define B FT_KV_BLOCK

TEST(match_only_the_same_tokens_from_the_start) {
    struct ft_prefix *p = NULL;
    EXPECT_OK(ft_prefix_init(&p, 64));
    if (!p) return;
    int32_t ids[4 * B], other[4 * B], blocks[4] = {7, 3, 9, 12}, got[4], added[4];
    for (int i = 0; i < 4 * B; i++) ids[i] = i * 31 % 1000, other[i] = ids[i];
    EXPECT_EQ(ft_prefix_match(p, ids, 4, got), 0);
    EXPECT_EQ(ft_prefix_insert(p, ids, 3, blocks, added), 3);
    EXPECT(added[0] == 7 && added[1] == 3 && added[2] == 9);
    EXPECT_EQ(ft_prefix_match(p, ids, 4, got), 3);
    EXPECT(got[0] == 7 && got[1] == 3 && got[2] == 9);
    EXPECT_EQ(ft_prefix_match(p, ids, 2, got), 2); /* at most max_blocks */
    other[B + 5] += 1;                             /* differs in the second block */
    EXPECT_EQ(ft_prefix_match(p, other, 4, got), 1);
    other[B + 5] -= 1, other[0] += 1;              /* differs in the first: the rest cannot match */
    EXPECT_EQ(ft_prefix_match(p, other, 4, got), 0);
    /* the same tokens in another block: left as indexed; a new fourth block is added */
    int32_t again[4] = {20, 21, 22, 23};
    EXPECT_EQ(ft_prefix_insert(p, ids, 4, again, added), 1);
    EXPECT_EQ(added[0], 23);
    EXPECT_EQ(ft_prefix_size(p), 4);
    EXPECT_EQ(ft_prefix_match(p, ids, 4, got), 4);
    EXPECT(got[0] == 7 && got[3] == 23);
    ft_prefix_free(p);
}

TEST(lru_evicts_leaves_first_and_remove_unlinks) {
    struct ft_prefix *p = NULL;
    EXPECT_OK(ft_prefix_init(&p, 16));
    if (!p) return;
    int32_t a[3 * B], b[3 * B], ba[3] = {0, 1, 2}, bb[3] = {3, 4, 5}, added[3], lru[16], got[3];
    for (int i = 0; i < 3 * B; i++) a[i] = i, b[i] = 500 + i;
    EXPECT_EQ(ft_prefix_insert(p, a, 3, ba, added), 3);
    EXPECT_EQ(ft_prefix_insert(p, b, 3, bb, added), 3);
    EXPECT_EQ(ft_prefix_match(p, a, 3, got), 3); /* a used last */
    int32_t all[16];
    EXPECT_EQ(ft_prefix_blocks(p, all), 6);
    EXPECT(all[0] == 0 && all[5] == 5); /* block order */
    EXPECT_EQ(ft_prefix_lru(p, lru), 6);
    /* b's chain first (older), its leaf before its root; then a's, leaf first */
    EXPECT(lru[0] == 5 && lru[1] == 4 && lru[2] == 3 && lru[3] == 2 && lru[5] == 0);
    ft_prefix_remove(p, 5);
    ft_prefix_remove(p, 5); /* no-op */
    EXPECT_EQ(ft_prefix_size(p), 5);
    EXPECT_EQ(ft_prefix_match(p, b, 3, got), 2);
    ft_prefix_remove(p, 0); /* a's root gone: nothing of a matches */
    EXPECT_EQ(ft_prefix_match(p, a, 3, got), 0);
    ft_prefix_free(p);
}

/* State checkpoints: found through the chain up to the block they end on (the longest
 * prefix that has one), at most the budget's count (least recently used evicted, its block
 * still indexed), dropped with their block. */
TEST(state_checkpoints_match_budget_and_go_with_their_block) {
    struct ft_prefix *p = NULL;
    EXPECT_OK(ft_prefix_init(&p, 16));
    if (!p) return;
    int32_t a[4 * B], b[4 * B], ba[4] = {0, 1, 2, 3}, bb[4] = {4, 5, 6, 7}, added[4], got[4];
    for (int i = 0; i < 4 * B; i++) a[i] = i, b[i] = 900 + i;
    const void *st = (const void *)1;
    EXPECT(ft_prefix_state_put(p, 0) == NULL); /* no budget set: none */
    ft_prefix_set_states(p, 100, 250);         /* room for two */
    EXPECT_EQ(ft_prefix_max_states(p), 2);
    EXPECT(ft_prefix_state_put(p, 2) == NULL); /* not indexed */
    EXPECT_EQ(ft_prefix_insert(p, a, 4, ba, added), 4);
    EXPECT_EQ(ft_prefix_insert(p, b, 4, bb, added), 4);
    EXPECT_EQ(ft_prefix_match_state(p, a, 4, got, &st), 0); /* blocks but no checkpoint */
    EXPECT(st == NULL);
    char *s1 = ft_prefix_state_put(p, 1);
    EXPECT(s1 != NULL);
    if (s1) memset(s1, 'a', 100);
    EXPECT_EQ(ft_prefix_match_state(p, a, 4, got, &st), 2); /* after block 1: 2 blocks */
    EXPECT(st == s1 && got[0] == 0 && got[1] == 1);
    EXPECT_EQ(ft_prefix_match_state(p, a, 1, got, &st), 0); /* block 1 beyond max_blocks */
    char *s3 = ft_prefix_state_put(p, 3);
    EXPECT_EQ(ft_prefix_match_state(p, a, 4, got, &st), 4); /* the longest wins */
    EXPECT(st == s3 && s3 != NULL);
    EXPECT(ft_prefix_state_put(p, 3) == s3); /* its own buffer again */
    EXPECT_EQ(ft_prefix_n_states(p), 2);
    /* a third: the least recently used (block 1's) goes, its block stays indexed */
    char *s6 = ft_prefix_state_put(p, 6);
    EXPECT(s6 != NULL && ft_prefix_state(p, 1) == NULL && ft_prefix_state(p, 3) == s3);
    EXPECT_EQ(ft_prefix_n_states(p), 2);
    EXPECT_EQ(ft_prefix_match(p, a, 4, got), 4);
    EXPECT_EQ(ft_prefix_match_state(p, b, 3, got, &st), 3);
    EXPECT(st == s6);
    ft_prefix_state_drop(p, 6);
    EXPECT_EQ(ft_prefix_match_state(p, b, 3, got, &st), 0);
    ft_prefix_remove(p, 3); /* its checkpoint goes with it */
    EXPECT(ft_prefix_state(p, 3) == NULL);
    EXPECT_EQ(ft_prefix_n_states(p), 0);
    EXPECT_EQ(ft_prefix_match_state(p, a, 4, got, &st), 0);
    /* a checkpoint larger than the budget: none */
    struct ft_prefix *q = NULL;
    EXPECT_OK(ft_prefix_init(&q, 4));
    if (q) ft_prefix_set_states(q, 100, 99);
    EXPECT_EQ(ft_prefix_max_states(q), 0);
    ft_prefix_free(q);
    ft_prefix_free(p);
}

TEST_MAIN("prefix")
