/* hotset.h — the expert cache's hot set across restarts (moe/hotset.c): how often each expert of
 * each layer was used, saved when an offloading engine stops and read when the next one starts,
 * so that the GPU cache starts with the experts a model's traffic used most instead of empty.
 * One little-endian file per model in the cache directory ($FREETOKEN_CACHE, else
 * ~/.cache/freetoken): "FTHS", version, layers, experts, expert bytes, then a float per
 * (layer, expert). Any thread (no shared state). */
#ifndef FT_MOE_HOTSET_H
#define FT_MOE_HOTSET_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"

struct ft_hotset {
    int n_layers, n_experts;
    uint64_t expert_bytes;
    float *count; /* [n_layers * n_experts] uses, older runs' halved at every save */
};

/* The file of a model (its label: directory or GGUF path) of this shape. */
void ft_hotset_path(const char *label, int n_layers, int n_experts, uint64_t expert_bytes,
                    char *buf, size_t cap);
/* Writes h to path (its directory made); one line naming the file on failure. */
enum ft_status ft_hotset_save(const struct ft_hotset *h, const char *path);
/* Reads path into h (allocating count) when it holds a hot set of exactly this shape: FT_ERR_IO
 * when there is no file, FT_ERR_FORMAT (one line naming the file) when it is not one. */
enum ft_status ft_hotset_load(const char *path, int n_layers, int n_experts, uint64_t expert_bytes,
                              struct ft_hotset *h);
void ft_hotset_free(struct ft_hotset *h);
/* The n (layer * n_experts + expert) keys of the largest counts, largest first (ties: lower
 * key), skipping keys whose layer has skip[layer] set (skip may be NULL) and counts of 0;
 * returns how many (<= n). */
int ft_hotset_top(const struct ft_hotset *h, const uint8_t *skip, int n, int32_t *keys);

#endif
