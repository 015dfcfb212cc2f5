/* trace.h — routing traces of the expert cache: every layer step's expert ids as the cache saw
 * them (ft_cache_probe), saved and loaded, replayed through a cache of any size and policy,
 * against Belady's oracle (the most hits that many slots can give the same trace), with the
 * routing's skew: its entropy and the experts that serve 90% of the lookups. `ft bench
 * --record-routing FILE` writes one; `bench_cache --replay FILE` compares the policies on it.
 * Pure C, no GPU. Engine thread only (a trace being recorded). */
#ifndef FT_MOE_TRACE_H
#define FT_MOE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"

struct ft_cache_policy;

/* Records back to back: layer, n, then n expert ids. */
struct ft_trace {
    int32_t *data;
    size_t len, cap;
    size_t n_steps, n_lookups;
    int n_layers, n_experts;
    int oom; /* an append failed: the trace is incomplete */
};

void ft_trace_init(struct ft_trace *t, int n_layers, int n_experts);
void ft_trace_free(struct ft_trace *t);
void ft_trace_add(struct ft_trace *t, int layer, const int32_t *ids, int n);

/* A little-endian file: "FTRT", version 1, layers, experts, words, then the records. */
enum ft_status ft_trace_save(const struct ft_trace *t, const char *path);
/* Loads and checks every record (layer and ids in range); one line naming the file on error. */
enum ft_status ft_trace_load(struct ft_trace *t, const char *path);

/* Replays t through a new cache of n_slots slots with policy p (every miss admitted, as the
 * offload backend does): its hits and lookups. */
enum ft_status ft_trace_simulate(const struct ft_trace *t, int n_slots,
                                 const struct ft_cache_policy *p, uint64_t *hits, uint64_t *lookups);
/* Belady's choice on t with n_slots slots: each miss evicts the resident expert used again
 * farthest ahead (never one the step uses); its hits and lookups. */
enum ft_status ft_trace_oracle(const struct ft_trace *t, int n_slots, uint64_t *hits,
                               uint64_t *lookups);

/* A synthetic decode trace of `tokens` steps through L layers, k distinct ids each: skew > 0
 * zipf(skew) over ranks mapped to experts by a per-layer permutation (as the engine's zipf:S
 * routing), else uniform; with probability sticky each choice keeps the layer's previous one
 * (sticky:P). Deterministic in seed. */
void ft_trace_synthetic(struct ft_trace *t, int L, int E, int k, int tokens, double skew,
                        double sticky, uint64_t seed);

struct ft_trace_stats {
    double entropy;       /* routing entropy per MoE layer over log2(experts), averaged: 1 uniform */
    double experts90;     /* experts per layer that serve 90% of its lookups, averaged */
};
void ft_trace_stats(const struct ft_trace *t, struct ft_trace_stats *out);

#endif
