/* prefix.h — the prefix cache: full KV blocks of finished or prefilled requests, found again by
 * the tokens before and in them, so that the next request with the same prefix (an agent
 * resending its growing conversation) reuses their keys and values instead of prefilling them.
 * A block is identified by a chained hash of every token from the start of the sequence up to
 * its end (its parent's hash and its own FT_KV_BLOCK tokens), verified token by token.
 * The cache only indexes; the engine's block reference counts decide what is free: the
 * scheduler takes one reference per indexed block and drops it when the block is evicted.
 * Engine thread only. */
#ifndef FT_ENGINE_PREFIX_H
#define FT_ENGINE_PREFIX_H

#include <stdint.h>

#include "ft.h"

struct ft_prefix;

/* An index for block ids [0, n_blocks). */
enum ft_status ft_prefix_init(struct ft_prefix **out, int n_blocks);
void ft_prefix_free(struct ft_prefix *p);

/* The indexed blocks holding ids[0 .. 16 k) for the largest k <= max_blocks, into blocks[k];
 * returns k. Marks them used (a chain's first blocks the most recently: leaves go first). */
int ft_prefix_match(struct ft_prefix *p, const int32_t *ids, int max_blocks, int32_t *blocks);

/* Indexes blocks[0 .. n_full) as holding ids[0 .. 16 n_full); a position whose tokens are
 * indexed already (by this block or another) is left as it is. The blocks it newly indexed go
 * to added[]; returns their count (the caller takes a reference on each). */
int ft_prefix_insert(struct ft_prefix *p, const int32_t *ids, int n_full, const int32_t *blocks,
                     int32_t *added);

/* Every indexed block, in block order, into out[] (n_blocks long); returns the count. */
int ft_prefix_blocks(const struct ft_prefix *p, int32_t *out);
/* The same, least recently used first. */
int ft_prefix_lru(const struct ft_prefix *p, int32_t *out);

/* Drops block b from the index (a no-op when it is not indexed). */
void ft_prefix_remove(struct ft_prefix *p, int32_t b);

/* Blocks indexed now. */
int ft_prefix_size(const struct ft_prefix *p);

#endif
