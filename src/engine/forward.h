/* forward.h — the layer loop on the CPU backend (docs/ARCHITECTURE.md section 3): embed, attention with a
 * KV cache, dense MLP or MoE block, final norm and lm_head, for a chunk of tokens of one
 * sequence. Owns its KV cache, scratch and (borrowed) thread pool.
 * Engine thread only. */
#ifndef FT_ENGINE_FORWARD_H
#define FT_ENGINE_FORWARD_H

#include <stdint.h>

#include "core/threadpool.h"
#include "model/model.h"

/* Where routed expert ids come from. Benchmarks on random weights use a seeded distribution
 * instead of the router, because random weights collapse routing (llama-baseline.md). */
enum ft_routing { FT_ROUTING_MODEL, FT_ROUTING_UNIFORM, FT_ROUTING_ZIPF, FT_ROUTING_STICKY };

struct ft_trace;
struct ft_engine_opts {
    int max_ctx;      /* positions of one sequence (default: min(max_position_embeddings, 4096)) */
    int max_chunk;    /* tokens per forward call, all sequences together (default 512) */
    int kv_tokens;    /* positions in the paged KV pool (default max_ctx: one sequence) */
    enum ft_routing routing;
    double routing_param; /* zipf exponent S (0: 1), or sticky probability of keeping an expert
                             (0 <= P < 1; 0 keeps none) */
    uint64_t seed;
    enum ft_backend { FT_BACKEND_CPU, FT_BACKEND_CUDA, FT_BACKEND_OFFLOAD } backend;
    int backend_auto;     /* backend was chosen by --backend auto: may fall back to the CPU for
                             a model the GPU backends do not run */
    int device;           /* CUDA device */
    size_t vram_limit;    /* bytes the GPU backend may allocate (0 = free memory - 1 GiB) */
    int no_graphs;        /* GPU: run decode eagerly (tests compare with graph replay) */
    /* offload backend (experts in host banks, a GPU cache of hot ones) */
    int moe_cache_slots;  /* --moe-cache-size N (slots); 0 = from the rate or free VRAM */
    double moe_cache_rate;/* --moe-cache-rate F (fraction of all experts) */
    int verify_copies;    /* --verify-copies: -1 default, 0 off, 1 sample, 2 all */
    int copy_path;        /* 0 auto, 1 DMA, 2 gather kernel */
    const char *cache_policy; /* the expert cache's eviction: "lru" (NULL), "lfru", "slru" */
    struct ft_trace *record_routing; /* offload: every expert-cache lookup recorded into it */
    int hot_set;          /* offload: start the expert cache from the experts earlier runs of
                             this model used most, and save this run's (moe/hotset.h) */
    int moe_mode;         /* enum ft_moe_mode (moe/policy.h): 0 offload, 1 cpu, 2 hybrid */
    int moe_prefetch;     /* --moe-prefetch N: decode copies up to N predicted experts of the
                             next MoE layer ahead (0: none, the zeroed default) */
    double pred_noise;    /* synthetic routing: a predicted id is wrong with this probability */
    const char *pin_budget;  /* --pin-budget SIZE (offload: the residency manager's budget) */
    const char *cpu_layers;  /* --moe-cpu-layers SPEC (offload: layers decoded on the CPU) */
    int moe_cpu_threads;  /* --moe-cpu-threads: the offload backends' CPU executor pool (0:
                             physical cores; its workers pinned one per core) */
    int cpu_act_fast;     /* --cpu-act fast: CPU matmuls round their activations to int8 (block
                             formats) or bf16 (bf16 weights) where ops.h has the kernels
                             (ft_cpu_xq_bytes); 0 (exact fp32) unless set */
};

struct ft_engine;

#define FT_KV_BLOCK 16 /* positions per KV block */

/* One sequence's share of a batched forward: n tokens at positions pos0.., its KV block table
 * (block b holds positions b*FT_KV_BLOCK ..), and which logits it wants. */
enum ft_want_logits { FT_LOGITS_NONE, FT_LOGITS_LAST, FT_LOGITS_ALL };
struct ft_seg {
    const int32_t *ids;
    int n, pos0;
    const int32_t *blocks;
    enum ft_want_logits want;
};

enum ft_status ft_engine_init(struct ft_engine **out, const struct ft_model *m,
                              struct ft_pool *pool, const struct ft_engine_opts *opts);
/* How many of m's matrices --cpu-act fast computes with int8/bf16 activations on this CPU tier
 * (backend/cpu/ops.h: ft_cpu_xq_bytes); 0: fast and f32 give the same numbers. */
int ft_engine_fast_matrices(const struct ft_model *m);
/* Synthetic zipf:S routing over E expert ranks: cum[r] = sum of (i + 1)^-S for i <= r, in that
 * order (S = param, or 1 when param <= 0); the CPU draws from these sums, the GPU from a CDF
 * made of them. */
void ft_zipf_sums(int E, double param, double *cum);
void ft_engine_free(struct ft_engine *e);

/* One forward over several sequences (continuous batching): sum of n <= max_chunk. logits
 * receives, segment by segment, the rows each asked for ([rows, vocab]). Does not touch the
 * built-in sequence's n_past. */
enum ft_status ft_engine_forward_batch(struct ft_engine *e, const struct ft_seg *segs, int n_segs,
                                       float *logits);
/* The same, with top1 (may be NULL) receiving each logit row's greedy id (argmax, lowest id on
 * ties). With top1 set, logits may be NULL: on the GPU backend only the ids cross back to the
 * host (the lm_head's 4 * vocab bytes a row stay on the device). */
enum ft_status ft_engine_forward_batch_ex(struct ft_engine *e, const struct ft_seg *segs, int n_segs,
                                          float *logits, int32_t *top1);
/* The same with each row's token drawn by the engine: row r's by draws[r]
 * (ft_sampler_draw_row: temperature, top-k, top-p, min-p; temperature <= 0: the argmax), the
 * ids into ids. A masked row draws only among the tokens masks->fill gives it (may be NULL
 * when no row is masked), as ft_sampler_draw_row on logits masked first. On the GPU backend
 * the draw (and the mask) runs on the device and only the ids come back; the host fills the
 * masks while the device runs the layers (a row with more candidates than the device sorts on
 * chip brings its logits back, and is masked again on the host). */
struct ft_draw;
struct ft_draw_masks;
enum ft_status ft_engine_forward_batch_draw(struct ft_engine *e, const struct ft_seg *segs,
                                            int n_segs, const struct ft_draw *draws,
                                            const struct ft_draw_masks *masks, int32_t *ids);
/* Paged KV pool blocks: take n (FT_ERR_BUSY if fewer are free) / give back. The built-in
 * sequence of ft_engine_forward holds its own blocks from init. */
enum ft_status ft_engine_kv_alloc(struct ft_engine *e, int n, int32_t *blocks);
/* Drops one reference to each block; a block nobody holds any more is free again. */
void ft_engine_kv_free(struct ft_engine *e, const int32_t *blocks, int n);
/* One more holder of each block (a sequence sharing a prefix, the prefix cache): blocks are
 * shared read-only, so a sequence may hold another's only below its own first position. */
void ft_engine_kv_ref(struct ft_engine *e, const int32_t *blocks, int n);
int ft_engine_kv_refs(const struct ft_engine *e, int32_t block);
int ft_engine_kv_free_blocks(const struct ft_engine *e);
int ft_engine_kv_total_blocks(const struct ft_engine *e);

/* Recurrent state (hybrid models). A sequence's state slot is found by its first KV block and
 * freed with ft_engine_kv_free of its blocks, unless ft_engine_state_load bound it to the
 * sequence's block table (the `blocks` pointer its segments pass): then by that pointer, so
 * that sequences sharing their first blocks (the prefix cache) keep their own, until
 * ft_engine_state_drop. The bytes of one sequence's state (every DeltaNet layer's conv window
 * and delta-rule matrix; 0: the model has none): */
size_t ft_engine_state_bytes(const struct ft_engine *e);
/* Binds a state slot to the sequence with block table `blocks`, holding src (saved at position
 * P by ft_engine_state_save: its next segment continues at P, reading KV blocks that hold
 * positions < P), or with src NULL nothing yet (its first segment starts at position 0). */
enum ft_status ft_engine_state_load(struct ft_engine *e, const int32_t *blocks, const void *src);
/* Copies the state of that sequence (after the last token it ran) into dst (state_bytes); the
 * GPU backend copies it from the device. */
enum ft_status ft_engine_state_save(struct ft_engine *e, const int32_t *blocks, void *dst);
/* Frees that sequence's state slot (a no-op when it has none). */
void ft_engine_state_drop(struct ft_engine *e, const int32_t *blocks);

/* Runs T tokens at positions n_past .. n_past+T-1 (T <= max_chunk), appending to the KV cache.
 * logits: [T, vocab] when all_logits, else [1, vocab] for the last token; may be NULL. */
enum ft_status ft_engine_forward(struct ft_engine *e, const int32_t *ids, int T, float *logits,
                                 int all_logits);
/* The same with only the greedy id after the last token returned (*next): on the GPU backend
 * the argmax runs on the device and no logits cross back. */
enum ft_status ft_engine_forward_greedy(struct ft_engine *e, const int32_t *ids, int T, int32_t *next);
/* The same with the token drawn by the engine (ft_sampler_draw_row with d). */
enum ft_status ft_engine_forward_draw(struct ft_engine *e, const int32_t *ids, int T,
                                      const struct ft_draw *d, int32_t *next);
/* Processes any number of tokens in max_chunk pieces (same logits contract). */
enum ft_status ft_engine_prefill(struct ft_engine *e, const int32_t *ids, int T, float *logits,
                                 int all_logits);
void ft_engine_reset(struct ft_engine *e);   /* forget the sequence (n_past = 0) */
/* Keeps the first n positions of the KV cache (n <= n_past); later ones are overwritten. A model
 * with recurrent (Gated DeltaNet) layers or DeepSeek-V4 (its windows) cannot go back: it keeps
 * all or none. Returns n_past. */
int ft_engine_truncate(struct ft_engine *e, int n);
int ft_engine_n_past(const struct ft_engine *e);
int ft_engine_max_ctx(const struct ft_engine *e);
int ft_engine_max_chunk(const struct ft_engine *e); /* tokens per forward call */
/* Sequences one forward call may hold: the GPU backends take FT_GPU_MAX_SEQS (their logit rows
 * and block tables are sized for it), the CPU as many as tokens. */
#define FT_GPU_MAX_SEQS 64
int ft_engine_max_seqs(const struct ft_engine *e);
/* Rows the GPU backend drew (ft_engine_forward_batch_draw) and how many of them came back to the
 * host sampler (more candidates than the device sorts). */
void ft_engine_draw_stats(const struct ft_engine *e, long *rows, long *on_host);
int ft_engine_on_gpu(const struct ft_engine *e); /* a CUDA backend (cuda or offload) */
/* 1 when sampled tokens of requests without penalties are best drawn by the engine
 * (ft_engine_forward_batch_draw): a GPU backend, unless FT_ENGINE_DRAW=0 sends the logits to the
 * host sampler. */
int ft_engine_draws_on_device(const struct ft_engine *e);

/* Mean distinct experts per MoE layer per forward call since the last reset of the stats. */
double ft_engine_mean_distinct_experts(const struct ft_engine *e);
void ft_engine_reset_stats(struct ft_engine *e);

/* Name of the backend the engine runs ("cpu", "cuda", "offload"). */
const char *ft_engine_backend(const struct ft_engine *e);
/* GPU backend: bytes of device memory allocated (0 on CPU). */
size_t ft_engine_vram_used(const struct ft_engine *e);
/* Offload backend: cache and copy statistics (all zero otherwise). */
struct ft_gpu_offload_stats;
void ft_engine_offload_stats(const struct ft_engine *e, struct ft_gpu_offload_stats *out);
/* Offload: residency of the expert banks; 0 when the engine has none. */
struct ft_residency_stats;
int ft_engine_residency_stats(const struct ft_engine *e, struct ft_residency_stats *out);

/* Index of the largest value (first on ties). */
int ft_argmax(const float *x, int n);
/* The largest of x[0..n) (NaN never; -inf when none). */
float ft_max_f32(const float *x, int n);

#endif
