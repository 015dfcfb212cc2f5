/* forward_impl.h — the CPU engine's state, shared by forward.c and the architectures whose layers
 * have their own file (forward_v4.c: DeepSeek-V4). Engine thread only. */
#ifndef FT_ENGINE_FORWARD_IMPL_H
#define FT_ENGINE_FORWARD_IMPL_H

#include "core/watchdog.h"
#include "engine/forward.h"

struct ft_moe_exec;
struct ft_gpu;
struct ft_sampler;
struct ft_v4_scratch;

struct ft_engine {
    const struct ft_model *m;
    struct ft_pool *pool;
    struct ft_engine_opts opts;
    int n_past, kv_dim, q_dim, max_i;
    int n_blocks;               /* KV pool blocks of FT_KV_BLOCK positions */
    float *k_cache, *v_cache;   /* [L, n_blocks * FT_KV_BLOCK, kv_dim] */
    int32_t *free_blocks;       /* [n_blocks] stack of free block ids */
    int n_free;
    uint16_t *refs;             /* [n_blocks] holders of each block (sequences, the prefix cache) */
    int32_t *seq0_blocks;       /* blocks of the built-in sequence (ft_engine_forward) */
    int seq0_n_blocks, seq0_ready;
    const int32_t **tok_blocks; /* [chunk] block table of each token's sequence */
    int32_t *blk_copy;          /* CPU steps: their block tables, copied (own_block_tables) */
    size_t blk_cap;
    int32_t *ids;               /* [chunk] token ids of the step */
    float *xl;                  /* [chunk, H] final-norm rows that want logits */
    float *x, *xn, *y;          /* [chunk, H] */
    float *q, *k, *v, *att;     /* [chunk, q_dim] / [chunk, kv_dim] */
    float *gu, *act;            /* [chunk, 2*max_i], [chunk, max_i] */
    float *router;              /* [chunk, E] */
    int *top_ids;               /* [chunk, k] */
    float *top_w;               /* [chunk, k] */
    int32_t *pos;               /* [chunk] */
    struct ft_moe_exec *moe;
    void *xq;                   /* [chunk, 2 * max K] int8/bf16 activations (--cpu-act fast), or NULL */
    uint64_t rng;
    int *sticky;                /* [L, k] last synthetic ids per layer (sticky routing) */
    double *zipf_cum;           /* [E] running sums of r^-S, r = 1..E (zipf routing), or NULL */
    double distinct_sum;
    long distinct_n;
    struct ft_gpu *gpu;         /* CUDA backend, or NULL */
    int step_tokens;            /* tokens of the batch being run */
    float *top1_logits;         /* ids without caller logits: [rows, V] (the CPU backend's logits,
                                   a GPU row the device could not draw) */
    int top1_rows;
    struct ft_sampler *draw_smp; /* the engine's draws: scratch for ft_sampler_draw_row */
    long draw_rows, draw_host;   /* rows the GPU drew, and of those sent back to the host */
    /* hybrid models (Gated DeltaNet layers among attention ones) */
    int *kv_of;                 /* [L] the layer's index in the KV cache, or -1 (no attention) */
    int n_kv_layers;
    int *gdn_of;                /* [L] the layer's index among the DeltaNet layers, or -1 */
    float *qg;                  /* [chunk, 2 q_dim] gated attention's q_proj rows, [q | gate] a head */
    float *g_qkv, *g_z, *g_b, *g_a, *g_o; /* [chunk, Cc], [chunk, Dv], [chunk, Hv] x2, [chunk, Dv] */
    /* recurrent state: one slot per live sequence, found by the sequence's first KV block (a
     * sequence owns its blocks until ft_engine_kv_free, which frees its slot too) or by the
     * block table ft_engine_state_load bound it to; per DeltaNet layer the conv's last K-1
     * inputs [Cc][K-1] then the delta-rule state [Hv][dk][dv], f32 */
    float *st;                  /* [n_st][st_floats] */
    int32_t *st_key;            /* [n_st] owner's first KV block, -1: free */
    const int32_t **st_table;   /* [n_st] the owner's bound block table, NULL: keyed by st_key */
    int n_st;
    size_t st_floats;
    int *seg_slot;              /* [chunk] the slot of each segment of the step */
    /* MLA (the KV cache rows hold the latent then the rotated shared key: kv_dim = L + dr) */
    float *m_qa;                /* [chunk, q_lora] */
    float *m_kva;               /* [chunk, L + dr] */
    float *m_qn;                /* [nh, chunk, dn] each head's q_nope, contiguous */
    float *m_ql;                /* [chunk, nh, L + dr] each head's query in the latent space */
    float *m_lat;               /* [nh, chunk, L] attention's output in the latent space */
    /* DSA (GLM-5): cache rows [latent (L) | k_pe (dr) | indexer key (dI)], kv_dim wide; the
     * indexer's queries [chunk, nI dI], keys [chunk, dI], head weights [chunk, nI]; each token's
     * kept positions [chunk, ix_k] ascending and their count [chunk] */
    float *ix_q, *ix_key, *ix_w;
    int32_t *ix_sel, *ix_n;
    int ix_k;
    struct ft_v4_scratch *v4;   /* DeepSeek-V4's scratch and state layout (forward_v4.c), or NULL */
    /* the CPU forward's watchdog over its pool jobs (cpu_forward): limits learned by step
     * tokens, FT_TEST_POOL_STALL's job and stall */
    struct ft_watchdog wd;
    int exec_failed;            /* the step's CPU executor call failed (and logged why) */
};

/* y[T, ldy] = x[T, w->cols] . w^T (+ bias), rows over the pool (--cpu-act fast: x rounded). */
void ft_engine_mm(struct ft_engine *e, float *y, int ldy, const float *x, const struct ft_weight *w,
                  const float *bias, int T);
/* The synthetic expert ids of a benchmark's routing (opts.routing != FT_ROUTING_MODEL) for layer
 * l: e->top_ids / top_w from the router logits in e->router. */
void ft_engine_route(struct ft_engine *e, int l, int T);

/* DeepSeek-V4 (forward_v4.c): scratch and each sequence's state layout (floats per sequence,
 * e->st_floats); the layers for the batch checked into e (tokens in e->ids / pos, each
 * segment's state slot in e->seg_slot), leaving the collapsed residual in e->x for the head. */
enum ft_status ft_v4_engine_init(struct ft_engine *e);
void ft_v4_engine_free(struct ft_engine *e);
/* FT_OK, or the CPU executor's watchdog error (ft_error() set), or FT_ERR_BUSY alone when a
 * pool job was abandoned (ft_pool_watch_tripped: cpu_forward reports it) */
enum ft_status ft_v4_forward(struct ft_engine *e, const struct ft_seg *segs, int n_segs);

#endif
