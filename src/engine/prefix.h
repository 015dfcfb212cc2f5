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

#include <stddef.h>
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

/* State checkpoints (hybrid models): a sequence's whole recurrent state after the last token of
 * an indexed block, kept in host memory on that block's entry (found by its chained hash, gone
 * when the block is removed), `bytes` each, at most max_bytes in all: the least recently used
 * checkpoint goes first (its block stays indexed). Set once, before any is put. */
void ft_prefix_set_states(struct ft_prefix *p, size_t bytes, size_t max_bytes);
/* Checkpoints the budget holds (0: none fits, or not set). */
int ft_prefix_max_states(const struct ft_prefix *p);
/* A buffer of `bytes` for indexed block b's checkpoint, for the caller to fill (its old one if
 * it had one; the least recently used other one evicted when the budget is full); NULL when
 * no checkpoint fits the budget, b is not indexed, or out of memory. A buffer the caller could
 * not fill goes back with ft_prefix_state_drop. */
void *ft_prefix_state_put(struct ft_prefix *p, int32_t b);
void ft_prefix_state_drop(struct ft_prefix *p, int32_t b);
/* A checkpoint moving along its chain (a decoding request's, from one block boundary to the
 * next): ft_prefix_state_put(p, to), except that when `from` has a checkpoint and `to` none,
 * from's buffer moves to `to` (no allocation, nothing else evicted); from's is dropped in any
 * case (from < 0: none). NULL as ft_prefix_state_put. */
void *ft_prefix_state_move(struct ft_prefix *p, int32_t from, int32_t to);
/* Block b's checkpoint (NULL: none). */
const void *ft_prefix_state(const struct ft_prefix *p, int32_t b);
/* ft_prefix_match for a hybrid model: of the k leading blocks found, the first k' <= k where
 * block k'-1 carries a checkpoint (the largest such k'; 0: none), into blocks[k']; its
 * checkpoint into *state (NULL when k' is 0), marked used. Returns k'. */
int ft_prefix_match_state(struct ft_prefix *p, const int32_t *ids, int max_blocks, int32_t *blocks,
                          const void **state);
/* Checkpoints held now. */
int ft_prefix_n_states(const struct ft_prefix *p);

#endif
