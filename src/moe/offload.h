/* offload.h — the GPU half of the offloaded MoE step: the expert cache's slots on the device,
 * the copy engine and its integrity guard, the residency of the host banks and the hybrid
 * split's feedback (moe/offload.c). The CUDA forward pass (engine/gpu.c) calls it per layer
 * step. Engine thread only; the functions exist only with FT_HAVE_CUDA. */
#ifndef FT_MOE_OFFLOAD_H
#define FT_MOE_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "moe/cache.h"

/* What the offload cache is asked for (the GPU backend's options, engine/gpu.h). */
struct ft_trace;
struct ft_offload_opts {
    int device;
    int cache_slots;        /* > 0: exactly this many slots */
    double cache_rate;      /* > 0: this fraction of all experts; else auto from the VRAM left */
    int verify;             /* -1 default (sample on WSL2, off on Linux), 0 off, 1 sample, 2 all */
    int copy_path;          /* 0 pick the faster at startup, 1 DMA, 2 gather kernel */
    int moe_mode;           /* enum ft_moe_mode */
    const char *pin_budget; /* --pin-budget (NULL: env / platform default) */
    const char *cpu_layers; /* --moe-cpu-layers (NULL: auto) */
    const char *policy;     /* the cache's eviction (NULL: LRU) */
    struct ft_trace *record; /* every lookup recorded into it (NULL: none) */
    int hot_set;            /* warm the cache from the model's hot set and save this run's */
    int prefetch;           /* decode: experts copied ahead for the next MoE layer, at most
                               this many a layer (0: none; FT_PREFETCH_MAX at most) */
    double pred_noise;      /* synthetic routing: each predicted id replaced at random with this
                               probability (its draws are otherwise known exactly) */
};
#define FT_PREFETCH_MAX 8

struct ft_gpu_offload_stats {
    int active, n_slots, path;      /* path: 1 DMA, 2 gather */
    double hit_rate;
    long hits, misses;              /* expert lookups so far */
    long copies, mismatches, repaired;
    long staged;                    /* copies of unpinned layers' experts through the ring */
    int staged_layers;              /* MoE layers over the pin budget that still fill slots */
    long warmed;                    /* experts copied in at start from the hot set */
    int verify;                     /* copies verified now: 0 none, 1 a sample, 2 all (after a
                                       mismatch) */
    long prefetch_unused;           /* experts copied ahead for the next layer's prefill that it
                                       did not route to */
    long prefetched, prefetch_used; /* decode: experts copied ahead for the next layer, and
                                       those it routed to */
    long prefetch_late;             /* used ones whose copy had not landed at their layer */
    long cpu_experts;               /* misses computed on the CPU (cpu / hybrid) */
    double cpu_s;                   /* CPU executor seconds */
    double copy_bytes, copy_s;      /* expert bytes copied, copy-stream seconds spent on them */
    double copy_gbps;               /* expert bytes / copy time (host-observed) */
    double pcie_gbps;               /* pinned H2D measured at startup */
};

#ifdef FT_HAVE_CUDA
#include <cuda_runtime_api.h>

struct ft_model;
struct ft_residency_plan;

struct ft_offload;

/* Sizes the slot pool from opts and the VRAM left (avail_bytes), allocates it (alloc: the GPU
 * backend's counted allocator), registers the banks, computes checksums when verifying,
 * probes and times both copy paths. */
typedef void *(*ft_dalloc_fn)(void *ctx, size_t bytes);
enum ft_status ft_offload_init(struct ft_offload **out, const struct ft_model *m,
                               const struct ft_offload_opts *o, size_t avail_bytes, int max_pairs,
                               ft_dalloc_fn dalloc, void *dctx);
void ft_offload_free(struct ft_offload *f);

/* Decode, in three calls with the CPU side free to start between them. The plan resolves
 * ids[0..n) (host, this layer): hits, plus the misses the split policy fetches (offload: all,
 * cpu: none, hybrid: the most used F of M) admitted to slots; cpu_pairs receives the indices of
 * the pairs left to the CPU (*n_cpu). The caller has synchronised `s` (nothing enqueued may still
 * read a slot). Then ft_offload_decode_slots uploads the slots on `s` as two lists of n
 * (pinned staging): d_slots[0, n) for the pairs whose expert is resident now (-1: a CPU pair,
 * -2: a fetched one, left alone), d_slots[n, 2n) for the fetched pairs (every other -2); it
 * returns how many experts are fetched. The GPU's kernels for the first list can run at once;
 * ft_offload_decode_copies then issues the copies and makes `s` wait for them, for the second
 * list. Every plan is followed by both. */
enum ft_status ft_offload_decode_plan(struct ft_offload *f, int layer, const int32_t *ids, int n,
                                      int *cpu_pairs, int *n_cpu);
int ft_offload_decode_slots(struct ft_offload *f, int32_t *d_slots, cudaStream_t s);
enum ft_status ft_offload_decode_copies(struct ft_offload *f, cudaStream_t s);
/* s's work on this step's fetched experts is issued: its end marks the copy side's end for
 * the split (after ft_offload_decode_copies). */
void ft_offload_decode_done(struct ft_offload *f, cudaStream_t s);
/* The copy watchdog: the host's wait for stream s (the compute stream, behind the expert
 * copies it waits on: a decode layer's router sync, a decode step's end) for a step of T
 * tokens, allowed max(10 s, 50x the learned time of such waits). Past that the step is given
 * up: logged once (a host-to-device copy not completed, or the GPU's own work), FT_ERR_BUSY
 * (its requests fail with the message: 503), and no step starts until the GPU is done
 * (ft_offload_check). FT_TESTING builds: FT_TEST_COPY_STALL=K:MS[:FLOOR_MS] holds the copy
 * stream MS ms before the K-th decode copy batch. */
enum ft_status ft_offload_sync(struct ft_offload *f, cudaStream_t s, int T);
/* FT_OK when a step may start on s: no work of a step ft_offload_sync gave up is still queued
 * (after waiting at most the floor for it; the first call that finds it done logs so), else
 * FT_ERR_BUSY. */
enum ft_status ft_offload_check(struct ft_offload *f, cudaStream_t s);
/* With staged layers beside a CPU executor, ft_offload_decode_copies may hand a staged layer's
 * copies to the stager thread and return at once (deferred: 1); ft_offload_decode_finish then
 * waits for them and makes s wait for their end, before the fetched experts' work; it must
 * come before any other call of this module. No-op when nothing was deferred. */
int ft_offload_decode_deferred(const struct ft_offload *f);
enum ft_status ft_offload_decode_finish(struct ft_offload *f, cudaStream_t s);
/* After layer l's copies are issued: pred[0..n) are the ids predicted for the next MoE layer
 * `layer` (most likely first); the first opts.prefetch of them that are not resident are
 * copied into slots this step does not use, on the copy stream behind l's copies. Nothing when
 * an earlier prefetch is still copying, copies are verified, or `layer` computes its misses on
 * the CPU or is staged. ft_offload_decode_plan of `layer` counts them as used or not and,
 * where a used one's copy is still running, puts it with the fetched pairs. */
enum ft_status ft_offload_decode_prefetch(struct ft_offload *f, int layer, const int32_t *pred, int n);
/* The CPU side of a layer step took `seconds` for n_experts distinct experts (hybrid
 * feedback). */
void ft_offload_observe_cpu(struct ft_offload *f, int layer, int n_experts, double seconds);
/* Prefill: experts[0..n) (distinct, ascending) of this layer: the cached ones where they are,
 * the others streamed through slots borrowed from the pool (not admitted to the cache), in
 * batches; for each batch, d_slot_of [E] is uploaded on s (slot or -1) and fn(ctx, 0, k)
 * runs the batch's kernels on s for the experts d_slot_of maps. The caller has synchronised s
 * (the layer's routing counts came back). */
typedef enum ft_status (*ft_offload_batch_fn)(void *ctx, int first, int last);
enum ft_status ft_offload_prefill(struct ft_offload *f, int layer, const int32_t *experts, int n,
                                  int32_t *d_slot_of, cudaStream_t s, ft_offload_batch_fn fn,
                                  void *ctx);
/* The end of a prefill step: the streaming buffers go back to the pool (copies on the copy
 * stream wait for s's work so far). */
void ft_offload_prefill_end(struct ft_offload *f, cudaStream_t s);
const void *ft_offload_gu(const struct ft_offload *f);   /* [S][2I, H] in each layer's format */
const void *ft_offload_down(const struct ft_offload *f); /* [S][H, I] */
/* Bytes between slots of family fam (0 gate_up, 1 down): the largest expert matrix. */
size_t ft_offload_slot_bytes(const struct ft_offload *f, int fam);
void ft_offload_get_stats(const struct ft_offload *f, struct ft_gpu_offload_stats *out);
/* 1 if the residency manager left some MoE layer unpinned: it decodes on the CPU executor. */
int ft_offload_has_cpu_layers(const struct ft_offload *f);
const struct ft_residency_plan *ft_offload_residency(const struct ft_offload *f);

#endif /* FT_HAVE_CUDA */
#endif
