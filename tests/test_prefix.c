/* test_prefix.c — the prefix cache's index (engine/prefix.h): chained block hashes found again
 * only for the same tokens from the start, a position indexed once, LRU order leaves first. */
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

TEST_MAIN("prefix")
