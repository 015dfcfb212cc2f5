/* gpu.c — the CUDA forward pass (see gpu.h). Weights are uploaded once at init into device
 * allocations counted against the VRAM limit; activations are fp32 (bf16 copies feed the
 * cuBLAS GEMMs of prefill); decode (every segment one token, at most 8) runs custom GEMV
 * kernels only, so the whole step is captured once per batch size and replayed.
 * Engine thread only. */
#include "engine/gpu.h"

#ifdef FT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device.h"
#include "backend/cuda/pin.h"
#include "backend/cuda/probe.h"
#include "engine/sample.h"
#include "moe/gpu_moe.h"
#include "mem/platform.h"
#include "mem/residency.h"
#include "core/checksum.h"
#include "core/env.h"
#include "core/timer.h"
#include "core/log.h"
#include "core/status.h"

#define MAX_GRAPH_T FT_GPU_MOE_MAX_T

struct gpu_layer {
    float *attn_norm, *ffn_norm, *q_norm, *k_norm, *bq, *bk, *bv, *bo;
    uint16_t *wqkv, *wo;              /* wqkv: [q_dim + 2 kv_dim, H] (q, k, v rows) */
    uint16_t *w_gu, *w_down;          /* dense: w_gu [2I, H] (gate rows, then up rows) */
    int I;
    uint16_t *router;                 /* MoE: [E, H] */
    struct ft_gpu_experts ex;         /* its routed experts (moe/gpu_moe.h) */
    uint16_t *sh_gu, *sh_down, *sh_score; /* sh_gu [2Is, H] */
    int is_moe, has_shared, window;
    /* gpt-oss: attention sinks [n_heads], router bias [E]; NULL otherwise */
    float *sinks, *router_b;
    /* Qwen3.5 gated attention: wgate [q_dim, H], each head's gate rows (the q rows in wqkv) */
    uint16_t *wgate;
    int qk_norm_all;                  /* q_norm / k_norm over all heads at once (MiniMax-M2) */
    float *score_bias;                /* sigmoid router: the selection-only bias [E] or NULL */
    /* Gated DeltaNet layer (gdn): wgdn [Cc + Dv + 2 Hv, H] = qkv, z, b, a rows; gdn_out [H, Dv] */
    int gdn, gl, kv;                  /* gl: its index among the DeltaNet layers; kv: this
                                         layer's in the KV cache (-1: none) */
    uint16_t *wgdn, *gdn_out;
    float *gdn_conv, *gdn_A, *gdn_dt, *gdn_norm;
    /* Multi-head Latent Attention (mla): q_a [q_lora, H] (or the plain q rows in wqkv), q_b,
     * kv_a [Lr + dr, H], uk [nh][Lr, dn] (W_UK per head, transposed), uv [nh][dv, Lr] */
    int mla;
    uint16_t *q_a, *q_b, *kv_a, *uk, *uv;
    float *q_a_norm, *kv_a_norm, *bq_a, *bkv_a;
    /* DeepSeek sparse attention's indexer (dsa 1: this layer runs it; 2: the previous layer's
     * choice stands): ix_wq [nI dI, q_lora], ix_wkw [dI + nI, H] (wk rows, then weights_proj),
     * the key's LayerNorm ix_kn, ix_kb [dI] */
    int dsa;
    uint16_t *ix_wq, *ix_wkw;
    float *ix_kn, *ix_kb;
};

struct ft_gpu {
    const struct ft_model *m;
    struct ft_gpu_opts o;
    cudaStream_t s;
    /* the load check: each weight uploaded at load checksummed on the device against the host
     * bytes (on where copies are verified: WSL2 by default, --verify-copies) */
    int load_check, up_fault, up_seen;
    long up_checked, up_repaired, up_unchecked;
    uint64_t *d_sum;
    struct ft_blas *blas;
    size_t used, limit;
    struct gpu_layer *L;
    uint16_t *embed, *lm_head;
    float *final_norm, *inv_freq;
    float *k_cache, *v_cache;          /* [attention layers, n_blocks*16, kv_dim] */
    int n_kv_layers;
    /* Gated DeltaNet: the projections of a step [C, gdn_ld] (q k v | z | b | a), the recurrent
     * state of n_slots sequences [n_slots, st_floats] (engine/forward.c's layout) */
    float *gp, *gate, *d_state;
    /* MLA: q_a rows (and bf16), the kv_a rows [C, Lr + dr], q_lat [C, nh, Lr + dr], latent
     * outputs [C, nh, Lr] */
    float *m_qa, *m_kva, *m_ql, *m_lat;
    uint16_t *m_qa16;
    /* DSA: the indexer's queries [C, nI dI], keys and weights [C, dI + nI], scores of ix_rows
     * tokens at a time [ix_rows, max_ctx], each token's ix_k kept positions [C, ix_k] and count */
    float *ix_q, *ix_kw, *ix_score;
    int32_t *ix_sel, *ix_n;
    int ix_k, ix_rows;
    int gdn_ld, n_slots, seg_grid; /* seg_grid: segments the DeltaNet kernels launch for */
    size_t st_floats;
    int max_blocks, kv_dim, q_dim, max_i, C, logit_rows;
    /* step inputs: ids, positions, token->sequence, logit rows and block tables are views of
     * one pinned block (h_in) and one device block (d_in), sent with one copy a step */
    int32_t *d_in, *h_in;
    int32_t *d_ids, *d_pos, *d_tok_seq, *d_tables, *d_rows, *d_att_tiles;
    int32_t *h_ids, *h_pos, *h_tok_seq, *h_tables, *h_rows, *h_att_tiles; /* pinned */
    int32_t *d_seg_t0, *d_seg_slot, *h_seg_t0, *h_seg_slot; /* segments' first tokens, state slots */
    int32_t *d_top1, *h_top1;          /* greedy ids per logit row (ft_gpu_forward's top1) */
    struct ft_draw *d_draw, *h_draw;   /* [logit_rows] ft_gpu_forward's draws */
    /* [logit_rows, mask_words] the masked rows' allow bitmasks (struct ft_draw_masks), in the
     * same allocations as the draws, after them */
    uint32_t *d_mask, *h_mask;
    int mask_words;
    int n_att_tiles; /* prefill attention's query tiles this step */
    uint32_t *d_step;
    /* activations */
    float *x, *xn, *q, *k, *v, *att, *y, *gu, *act, *router, *topw, *xl, *logits, *sh, *score;
    float *router_pred;               /* next-layer prefetch: the next router's logits [8, E] */
    uint16_t *xn16, *att16, *act16, *xl16;
    int32_t *topk;
    struct ft_gpu_moe *moe;            /* the routed experts' side of MoE layers (moe/gpu_moe.h) */
    float *att_part;                   /* flash-decoding partials */
    int att_split_small;
    float *h_logits;                   /* pinned [C, vocab] */
    /* synthetic zipf / sticky routing: the zipf CDF, the sticky ids [L, k], stats scratch */
    struct ft_cuda_synth synth;
    float *d_zipf_cdf, *d_synth_stats;
    int32_t *d_sticky;
    struct ft_gpu_probe *probe; /* FT_PROFILE timing; NULL: off */
    /* graphs per decode batch size: logits only, then the greedy argmax, then the draw at the end */
    cudaGraphExec_t graph[3][MAX_GRAPH_T + 1];
    int graph_seen[3][MAX_GRAPH_T + 1];
    /* offloaded decode: a graph per batch size and span start (span()), the MoE layer each
     * span ends at */
    cudaGraphExec_t *span_graph;
    uint8_t *span_seen;
    int *span_end;
    /* after load (ft_gpu_init done): the GPU allocations made since (late_alloc_refused), and
     * FT_TEST_ALLOC_FAULT's K (test builds; 0: none), the one refused */
    int loaded, alloc_fault;
    long late_allocs;
};

/* A graph (a decode batch size, or a span: graph_seen, span_seen) is captured at its second
 * step and replayed after. A capture whose instantiation fails (out of memory after load:
 * cudaGraphInstantiate allocates on the device) runs that step kernel by kernel instead, and
 * is tried again at the next such step, GRAPH_TRIES times in all; then never. seen: 0 never
 * run, 1..GRAPH_TRIES capture next time, above: eager for good. */
enum { GRAPH_TRIES = 3 };

int ft_gpu_available(void) { return ft_cuda_device_count() > 0; }

/* An allocation on the device after load: 1 when FT_TEST_ALLOC_FAULT (test builds) refuses
 * this one, as the driver would when out of memory. Load's own allocations are not counted. */
static int late_alloc_refused(struct ft_gpu *g) {
    if (!g->loaded) return 0;
    return ++g->late_allocs == g->alloc_fault;
}

/* cudaGraphInstantiate, which allocates the graph's device memory: counted as an allocation
 * after load. */
static cudaError_t instantiate(struct ft_gpu *g, cudaGraphExec_t *exec, cudaGraph_t graph) {
    if (late_alloc_refused(g)) {
        *exec = NULL;
        return cudaErrorMemoryAllocation;
    }
    return cudaGraphInstantiate(exec, graph, 0);
}

static void *dalloc(struct ft_gpu *g, size_t bytes, enum ft_status *st) {
    if (*st != FT_OK) return NULL;
    void *p = NULL;
    bytes = (bytes + 255) & ~(size_t)255;
    if (g->used + bytes > g->limit) {
        *st = ft_fail(FT_ERR_OOM, "GPU: the model needs more than the VRAM limit of %.1f GiB "
                      "(%.1f GiB allocated so far; raise --vram-limit or use a smaller model)",
                      g->limit / 1073741824.0, g->used / 1073741824.0);
        return NULL;
    }
    if (late_alloc_refused(g) || cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        *st = ft_fail(FT_ERR_OOM, "GPU: cudaMalloc of %.1f MiB failed after %.1f GiB (lower "
                      "--vram-limit, --ctx-size or the model size)", bytes / 1048576.0,
                      g->used / 1073741824.0);
        return NULL;
    }
    g->used += bytes;
    return p;
}

/* The offload cache allocates its slots through the same counted allocator. */
static void *dalloc_cb(void *ctx, size_t bytes) {
    enum ft_status st = FT_OK;
    return dalloc((struct ft_gpu *)ctx, bytes, &st);
}

/* One synchronous upload at load. With the load check on, the device bytes' checksum is
 * compared with the host bytes' (core/checksum.h, as the expert-copy guard does) and a copy that
 * did not land intact is made again; a second failure is an error naming the weight. The
 * silent no-op copies seen on WSL2 hit load-time uploads as well as expert copies. */
static void h2d(struct ft_gpu *g, void *d, const void *h, size_t bytes, const char *what,
                enum ft_status *st) {
    if (cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        *st = ft_cuda_check("GPU upload");
        return;
    }
    if (g->up_fault && ++g->up_seen == g->up_fault) cudaMemset(d, 0, bytes); /* tests only */
    if (!g->load_check) return;
    if ((uintptr_t)d % 8 || !bytes) { /* a stacked part off the 8-byte grid: the kernel reads words */
        g->up_unchecked++;
        return;
    }
    const uint64_t want = ft_checksum(h, bytes);
    for (int copy = 0; copy < 2; copy++) {
        uint64_t got = 0;
        const void *p = d;
        ft_cuda_checksums(&p, &bytes, 1, g->d_sum, g->s);
        if (cudaMemcpyAsync(&got, g->d_sum, 8, cudaMemcpyDeviceToHost, g->s) != cudaSuccess ||
            cudaStreamSynchronize(g->s) != cudaSuccess) {
            *st = ft_cuda_check("GPU upload check");
            return;
        }
        if (got == want) {
            g->up_checked++, g->up_repaired += copy;
            return;
        }
        if (!copy) {
            ft_log_warn("GPU upload: %s (%zu bytes) did not land intact (checksum mismatch); "
                        "copying it again", what, bytes);
            cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
        }
    }
    *st = ft_fail(FT_ERR_CUDA, "GPU upload: %s differs from the host's copy after two uploads: "
                  "host-to-device copies are unreliable here (see docs/wsl.md)", what);
}

/* Uploads a host weight as bf16 (converting F32/F16 checkpoints) into d, or into a new
 * allocation when d is NULL. */
static uint16_t *up_w_to(struct ft_gpu *g, uint16_t *d, const struct ft_weight *w, enum ft_status *st) {
    if (!w->data || *st != FT_OK) return NULL;
    size_t n = (size_t)w->rows * w->cols;
    if (!d) d = dalloc(g, n * 2, st);
    if (!d) return NULL;
    if (w->dtype == FT_DTYPE_BF16) {
        h2d(g, d, w->data, n * 2, "a weight matrix", st);
    } else { /* row by row: packed formats (GGML blocks, FP8_B128) convert whole rows */
        size_t K = (size_t)w->cols, rb = ft_dtype_row_bytes(w->dtype, w->cols);
        uint16_t *tmp = malloc(n * 2);
        float *f = malloc(K * 4);
        if (!tmp || !f) {
            free(tmp), free(f);
            *st = ft_fail(FT_ERR_OOM, "GPU upload: out of host memory");
            return NULL;
        }
        for (size_t r = 0; r < (size_t)w->rows; r++) {
            ft_to_f32(f, (const uint8_t *)w->data + r * rb, w->dtype, K);
            for (size_t i = 0; i < K; i++) tmp[r * K + i] = ft_f32_to_bf16(f[i]);
        }
        h2d(g, d, tmp, n * 2, "a converted weight matrix", st);
        free(tmp), free(f);
    }
    return d;
}

static uint16_t *up_w(struct ft_gpu *g, const struct ft_weight *w, enum ft_status *st) {
    return up_w_to(g, NULL, w, st);
}

static float *up_f(struct ft_gpu *g, const float *h, size_t n, enum ft_status *st) {
    if (!h || *st != FT_OK) return NULL;
    float *d = dalloc(g, n * 4, st);
    if (d) h2d(g, d, h, n * 4, "a norm or bias vector", st);
    return d;
}

/* Several host weights of the same width stacked into one device matrix (fused projections). */
static uint16_t *up_cat(struct ft_gpu *g, const struct ft_weight *const *ws, int n, enum ft_status *st) {
    if (*st != FT_OK) return NULL;
    size_t rows = 0, K = (size_t)ws[0]->cols, off = 0;
    for (int i = 0; i < n; i++) rows += (size_t)ws[i]->rows;
    uint16_t *d = dalloc(g, rows * K * 2, st);
    for (int i = 0; d && i < n && *st == FT_OK; i++) { /* each part straight into its rows */
        up_w_to(g, d + off, ws[i], st);
        off += (size_t)ws[i]->rows * K;
    }
    return d; /* even on failure: the layer owns it, so ft_gpu_free frees it */
}

/* 1 when the GPU kernels take experts of dtype t (bf16, GGML blocks, NVFP4 and FP8_B128 rows
 * of any width). */
static int gpu_expert_dtype(enum ft_dtype t) { return t == FT_DTYPE_BF16 || ft_cuda_block_format(t); }

/* A whole bank (E expert matrices, host stride >= row bytes) as a dense device array. */
static void *up_bank(struct ft_gpu *g, const struct ft_bank *b, enum ft_status *st) {
    if (*st != FT_OK) return NULL;
    if (!gpu_expert_dtype(b->schema->dtype)) {
        *st = ft_fail(FT_ERR_UNSUPPORTED, "GPU backend: %s experts are not supported (bf16, GGML "
                      "blocks, NVFP4 and FP8 blocks are); use --backend cpu", b->schema->name);
        return NULL;
    }
    uint8_t *d = dalloc(g, b->row_bytes * b->n_experts, st);
    if (d) cudaMemcpy2D(d, b->row_bytes, b->base, b->stride, b->row_bytes, b->n_experts,
                        cudaMemcpyHostToDevice);
    return d;
}


/* An attention layer: q, k, v rows stacked (Qwen3.5's per-head [q | gate] rows of wq split
 * into the q rows there and the gate rows in wgate), its norms and biases. */
static void upload_attention(struct ft_gpu *g, const struct ft_layer *hl, struct gpu_layer *L,
                             enum ft_status *st) {
    const struct ft_model *m = g->m;
    const int qd = g->q_dim, kd = g->kv_dim, hd = m->head_dim, nh = m->n_heads;
    L->qk_norm_all = hl->qk_norm_all;
    L->q_norm = up_f(g, hl->q_norm, hl->qk_norm_all ? qd : hd, st);
    L->k_norm = up_f(g, hl->k_norm, hl->qk_norm_all ? kd : hd, st);
    L->bq = up_f(g, hl->bq, qd, st);
    L->bk = up_f(g, hl->bk, kd, st);
    L->bv = up_f(g, hl->bv, kd, st);
    L->bo = up_f(g, hl->bo, m->hidden, st);
    L->sinks = up_f(g, hl->sinks, (size_t)nh, st);
    L->wo = up_w(g, &hl->wo, st);
    if (!hl->attn_gate) {
        const struct ft_weight *qkv[3] = {&hl->wq, &hl->wk, &hl->wv};
        L->wqkv = up_cat(g, qkv, 3, st);
        return;
    }
    struct ft_weight part[2 * nh + 2];
    const struct ft_weight *ws[nh + 2], *gs[nh];
    for (int h = 0; h < nh; h++) {
        part[h] = ft_weight_rows(&hl->wq, 2 * h * hd, hd), ws[h] = &part[h];
        part[nh + h] = ft_weight_rows(&hl->wq, (2 * h + 1) * hd, hd), gs[h] = &part[nh + h];
    }
    ws[nh] = &hl->wk, ws[nh + 1] = &hl->wv;
    L->wqkv = up_cat(g, ws, nh + 2, st);
    L->wgate = up_cat(g, gs, nh, st);
}

/* An MLA layer: q LoRA (or plain q), kv_a, W_UK as loaded (uk_t), each head's value rows of
 * kv_b stacked into uv. */
static void upload_mla(struct ft_gpu *g, const struct ft_layer *hl, struct gpu_layer *L,
                       enum ft_status *st) {
    const struct ft_model *m = g->m;
    const int nh = m->n_heads, dn = m->mla_nope, dv = m->mla_v;
    L->mla = 1;
    if (hl->q_a.data) {
        L->q_a = up_w(g, &hl->q_a, st);
        L->q_a_norm = up_f(g, hl->q_a_norm, (size_t)m->mla_q_lora, st);
        L->q_b = up_w(g, &hl->q_b, st);
    } else {
        L->wqkv = up_w(g, &hl->wq, st);
    }
    L->bq_a = up_f(g, hl->bq_a, (size_t)m->mla_q_lora, st);
    L->kv_a = up_w(g, &hl->kv_a, st);
    L->bkv_a = up_f(g, hl->bkv_a, (size_t)m->mla_kv_lora + m->mla_rope, st);
    L->kv_a_norm = up_f(g, hl->kv_a_norm, (size_t)m->mla_kv_lora, st);
    if (dn > 0) L->uk = up_w(g, &hl->uk_t, st);
    struct ft_weight part[nh];
    const struct ft_weight *ws[nh];
    for (int h = 0; h < nh; h++) part[h] = ft_weight_rows(&hl->kv_b, h * (dn + dv) + dn, dv), ws[h] = &part[h];
    L->uv = up_cat(g, ws, nh, st);
    L->wo = up_w(g, &hl->wo, st);
    L->bo = up_f(g, hl->bo, m->hidden, st);
    L->dsa = hl->dsa;
    if (hl->dsa == 1) {
        const struct ft_weight *kw[2] = {&hl->idx_wk, &hl->idx_w};
        L->ix_wq = up_w(g, &hl->idx_wq, st);
        L->ix_wkw = up_cat(g, kw, 2, st);
        L->ix_kn = up_f(g, hl->idx_k_norm, (size_t)m->dsa_dim, st);
        L->ix_kb = up_f(g, hl->idx_k_bias, (size_t)m->dsa_dim, st);
    }
}

/* A Gated DeltaNet layer: its four input projections stacked, the conv, decay and norm. */
static void upload_gdn(struct ft_gpu *g, const struct ft_layer *hl, struct gpu_layer *L,
                       enum ft_status *st) {
    const struct ft_model *m = g->m;
    const size_t Cc = 2 * (size_t)m->gdn_hk * m->gdn_dk + (size_t)m->gdn_hv * m->gdn_dv;
    const struct ft_weight *ws[4] = {&hl->gdn_qkv, &hl->gdn_z, &hl->gdn_b, &hl->gdn_a};
    L->gdn = 1;
    L->wgdn = up_cat(g, ws, 4, st);
    L->gdn_out = up_w(g, &hl->gdn_out, st);
    L->gdn_conv = up_f(g, hl->gdn_conv, Cc * m->gdn_kernel, st);
    L->gdn_A = up_f(g, hl->gdn_A, (size_t)m->gdn_hv, st);
    L->gdn_dt = up_f(g, hl->gdn_dt, (size_t)m->gdn_hv, st);
    L->gdn_norm = up_f(g, hl->gdn_norm, (size_t)m->gdn_dv, st);
}

static enum ft_status upload(struct ft_gpu *g) {
    const struct ft_model *m = g->m;
    enum ft_status st = FT_OK;
    int H = m->hidden;
    struct ft_platform plat;
    ft_platform_detect(&plat); /* the expert copies' default: verify on WSL2 */
    g->load_check = g->o.verify > 0 || (g->o.verify < 0 && plat.kind == FT_PLATFORM_WSL2);
#ifdef FT_TESTING
    g->up_fault = ft_env_int(FT_ENV_TEST_UPLOAD_FAULT, 0);
#endif
    if (g->load_check) g->d_sum = dalloc(g, 8, &st);
    g->embed = up_w(g, &m->embed, &st);
    g->lm_head = m->lm_head.data == m->embed.data ? g->embed : up_w(g, &m->lm_head, &st);
    g->final_norm = up_f(g, m->final_norm, H, &st);
    g->inv_freq = up_f(g, m->inv_freq, m->rot_dim / 2, &st);
    int n_gdn = 0;
    for (int l = 0; l < m->n_layers && st == FT_OK; l++) {
        const struct ft_layer *hl = &m->layers[l];
        struct gpu_layer *L = &g->L[l];
        L->attn_norm = up_f(g, hl->attn_norm, H, &st);
        L->ffn_norm = up_f(g, hl->ffn_norm, H, &st);
        L->kv = hl->gdn ? -1 : g->n_kv_layers++;
        L->gl = hl->gdn ? n_gdn++ : -1;
        if (hl->gdn) upload_gdn(g, hl, L, &st);
        else if (hl->mla) upload_mla(g, hl, L, &st);
        else upload_attention(g, hl, L, &st);
        L->window = hl->window;
        L->is_moe = hl->is_moe;
        if (!hl->is_moe) {
            L->I = hl->w_gate.rows;
            const struct ft_weight *gu[2] = {&hl->w_gate, &hl->w_up};
            L->w_gu = up_cat(g, gu, 2, &st);
            L->w_down = up_w(g, &hl->w_down, &st);
            continue;
        }
        L->router = up_w(g, &hl->router, &st);
        L->router_b = up_f(g, hl->router_bias, (size_t)m->n_experts, &st);
        L->score_bias = up_f(g, hl->router_score_bias, (size_t)m->n_experts, &st);
        L->ex.gu_b = up_f(g, hl->act.gu_bias, (size_t)m->n_experts * 2 * m->expert_inter, &st);
        L->ex.dn_b = up_f(g, hl->act.down_bias, (size_t)m->n_experts * H, &st);
        L->ex.act_mode = hl->act.mode, L->ex.act_limit = hl->act.limit, L->ex.act_alpha = hl->act.alpha;
        if (!g->o.offload) { /* resident; the offload backend keeps them in the host banks */
            L->ex.gu = up_bank(g, &hl->bank[FT_BANK_GATE_UP], &st);
            L->ex.down = up_bank(g, &hl->bank[FT_BANK_DOWN], &st);
        } else if (!gpu_expert_dtype(hl->bank[0].schema->dtype) ||
                   !gpu_expert_dtype(hl->bank[1].schema->dtype)) {
            st = ft_fail(FT_ERR_UNSUPPORTED, "GPU backend: %s/%s experts are not supported (bf16, "
                         "GGML blocks, NVFP4 and FP8 blocks are); use --backend cpu",
                         hl->bank[0].schema->name, hl->bank[1].schema->name);
        }
        L->ex.gu_dt = hl->bank[FT_BANK_GATE_UP].schema->dtype;
        L->ex.dn_dt = hl->bank[FT_BANK_DOWN].schema->dtype;
        L->has_shared = hl->has_shared;
        if (hl->has_shared) {
            const struct ft_weight *sgu[2] = {&hl->sh_gate, &hl->sh_up};
            L->sh_gu = up_cat(g, sgu, 2, &st);
            L->sh_down = up_w(g, &hl->sh_down, &st);
            L->sh_score = up_w(g, &hl->sh_score, &st);
        }
    }
    if (st == FT_OK) st = ft_cuda_check("GPU weight upload");
    return st;
}

/* Segments a step may have (decode-sized steps launch for MAX_GRAPH_T of them) */
static size_t seg_cap(const struct ft_gpu *g) {
    return (size_t)(g->o.max_seqs > MAX_GRAPH_T ? g->o.max_seqs : MAX_GRAPH_T);
}

/* The step inputs' words before the block tables: ids, positions, token -> sequence and logit
 * rows (C each), then the segments' first tokens (seg_cap + 1) and state slots (seg_cap). */
static size_t in_table_offset(const struct ft_gpu *g) {
    return 4 * (size_t)g->C + 2 * seg_cap(g) + 1;
}

/* Decode's next-layer prefetch: how many experts a layer (0: none; not for sticky routing,
 * whose draws cannot be made a layer early). */
static int o_prefetch(const struct ft_gpu *g) {
    return g->o.offload && g->m->n_experts && g->o.routing != FT_ROUTING_STICKY && g->o.prefetch > 0
               ? g->o.prefetch : 0;
}

static enum ft_status alloc_scratch(struct ft_gpu *g) {
    const struct ft_model *m = g->m;
    enum ft_status st = FT_OK;
    size_t C = (size_t)g->C, H = m->hidden, k = m->top_k > 0 ? m->top_k : 1, E = m->n_experts;
    size_t R = C * k, V = m->vocab, mi = (size_t)g->max_i;
    size_t kv = (size_t)g->n_kv_layers * g->o.n_blocks * FT_KV_BLOCK * g->kv_dim;
    const size_t Dv = (size_t)m->gdn_hv * m->gdn_dv;
    size_t aw = (size_t)(g->q_dim > (int)H ? g->q_dim : (int)H);
    if (aw < Dv) aw = Dv;
    if (aw < (size_t)m->n_heads * m->mla_v) aw = (size_t)m->n_heads * m->mla_v;
    g->k_cache = dalloc(g, (kv ? kv : 1) * 4, &st);
    g->v_cache = dalloc(g, (kv && !m->mla ? kv : 1) * 4, &st); /* MLA: one row per position */
    const size_t S = seg_cap(g), in_words = in_table_offset(g) + (size_t)g->o.max_seqs * g->max_blocks;
    g->d_in = dalloc(g, in_words * 4, &st);
    g->h_in = ft_cuda_staging_alloc(in_words * 4, &st);
    if (st == FT_OK) {
        g->d_ids = g->d_in, g->d_pos = g->d_in + C, g->d_tok_seq = g->d_in + 2 * C;
        g->d_rows = g->d_in + 3 * C, g->d_seg_t0 = g->d_in + 4 * C, g->d_seg_slot = g->d_seg_t0 + S + 1;
        g->d_tables = g->d_in + in_table_offset(g);
        g->h_ids = g->h_in, g->h_pos = g->h_in + C, g->h_tok_seq = g->h_in + 2 * C;
        g->h_rows = g->h_in + 3 * C, g->h_seg_t0 = g->h_in + 4 * C, g->h_seg_slot = g->h_seg_t0 + S + 1;
        g->h_tables = g->h_in + in_table_offset(g);
    }
    if (m->n_gdn) { /* the DeltaNet layers' projections and the sequences' recurrent state */
        g->gdn_ld = (int)(2 * (size_t)m->gdn_hk * m->gdn_dk + 2 * Dv + 2 * (size_t)m->gdn_hv);
        /* then the chunked prefill kernels' scratch (gdn_block: past the C rows of gp) */
        const size_t scr = C > MAX_GRAPH_T ? ft_cuda_gdn_chunk_scratch(m->gdn_hk, m->gdn_hv, m->gdn_dk,
                                                                       m->gdn_dv, m->gdn_kernel, (int)C, (int)S)
                                           : 0;
        g->gp = dalloc(g, (C * g->gdn_ld + scr) * 4, &st);
        g->st_floats = ft_model_state_bytes(m) / sizeof(float);
        g->d_state = dalloc(g, (size_t)g->n_slots * g->st_floats * 4, &st);
    }
    if (m->mla) {
        const size_t D = (size_t)m->mla_kv_lora + m->mla_rope, nh = (size_t)m->n_heads;
        const size_t ql = m->mla_q_lora > 0 ? (size_t)m->mla_q_lora : 1;
        g->m_qa = dalloc(g, C * ql * 4, &st);
        g->m_qa16 = dalloc(g, C * ql * 2, &st);
        g->m_kva = dalloc(g, C * D * 4, &st);
        g->m_ql = dalloc(g, C * nh * D * 4, &st);
        g->m_lat = dalloc(g, C * nh * m->mla_kv_lora * 4, &st);
    }
    if (m->mla && m->dsa_topk > 0) { /* the indexer's scratch: scores for ix_rows tokens a pass */
        const size_t nI = (size_t)m->dsa_heads, dI = (size_t)m->dsa_dim, ctx = (size_t)g->o.max_ctx;
        g->ix_k = m->dsa_topk < g->o.max_ctx ? m->dsa_topk : g->o.max_ctx;
        size_t rows = ((size_t)64 << 20) / (ctx * 4); /* 64 MiB of scores */
        if (rows < MAX_GRAPH_T) rows = MAX_GRAPH_T;
        if (rows > C) rows = C;
        g->ix_rows = (int)rows;
        g->ix_q = dalloc(g, C * nI * dI * 4, &st);
        g->ix_kw = dalloc(g, C * (dI + nI) * 4, &st);
        g->ix_score = dalloc(g, rows * ctx * 4, &st);
        g->ix_sel = dalloc(g, C * (size_t)(g->ix_k > 0 ? g->ix_k : 1) * 4, &st);
        g->ix_n = dalloc(g, C * 4, &st);
    }
    for (int l = 0; l < m->n_layers && !g->gate; l++)
        if (m->layers[l].attn_gate) g->gate = dalloc(g, C * g->q_dim * 4, &st);
    size_t n_tiles = C / FT_CUDA_ATT_TILE + (size_t)g->o.max_seqs + 1;
    g->d_att_tiles = dalloc(g, n_tiles * 2 * 4, &st);
    g->h_att_tiles = ft_cuda_staging_alloc(n_tiles * 2 * 4, &st);
    g->d_step = dalloc(g, 4, &st);
    g->x = dalloc(g, C * H * 4, &st);
    g->xn = dalloc(g, C * H * 4, &st);
    g->xn16 = dalloc(g, C * H * 2, &st);
    g->q = dalloc(g, C * g->q_dim * 4, &st);
    g->k = dalloc(g, C * g->kv_dim * 4, &st);
    g->v = dalloc(g, C * g->kv_dim * 4, &st);
    g->att = dalloc(g, C * aw * 4, &st);
    g->att16 = dalloc(g, C * aw * 2, &st);
    g->y = dalloc(g, C * H * 4, &st);
    g->sh = dalloc(g, C * H * 4, &st);
    g->score = dalloc(g, C * 4, &st);
    g->gu = dalloc(g, C * 2 * (mi ? mi : 1) * 4, &st);
    g->act = dalloc(g, C * (mi ? mi : 1) * 4, &st);
    g->act16 = dalloc(g, C * (mi ? mi : 1) * 2, &st);
    g->xl = dalloc(g, C * H * 4, &st);
    g->xl16 = dalloc(g, C * H * 2, &st);
    /* logits rows per lm_head pass: one per sequence in a step; all-position requests
     * (ft logits) are done in passes of this many rows */
    g->logit_rows = g->C < 64 ? g->C : 64;
    g->logits = dalloc(g, (size_t)g->logit_rows * V * 4, &st);
    g->h_logits = ft_cuda_staging_alloc((size_t)g->logit_rows * V * 4, &st);
    g->d_top1 = dalloc(g, (size_t)g->logit_rows * 4, &st);
    g->h_top1 = ft_cuda_staging_alloc((size_t)g->logit_rows * 4, &st);
    /* the draws, then (16-byte aligned) each row's allow bitmask for masked draws */
    g->mask_words = (int)((V + 31) / 32);
    const size_t draw_bytes = ((size_t)g->logit_rows * sizeof(struct ft_draw) + 15) & ~(size_t)15;
    const size_t mask_bytes = (size_t)g->logit_rows * g->mask_words * 4;
    g->d_draw = dalloc(g, draw_bytes + mask_bytes, &st);
    g->h_draw = ft_cuda_staging_alloc(draw_bytes + mask_bytes, &st);
    g->d_mask = g->d_draw ? (uint32_t *)((char *)g->d_draw + draw_bytes) : NULL;
    g->h_mask = g->h_draw ? (uint32_t *)((char *)g->h_draw + draw_bytes) : NULL;
    if (E) {
        g->router = dalloc(g, C * E * 4, &st);
        g->topk = dalloc(g, R * 4, &st);
        g->topw = dalloc(g, R * 4, &st);
        if (o_prefetch(g)) g->router_pred = dalloc(g, (size_t)MAX_GRAPH_T * E * 4, &st);
    }
    if (st == FT_OK) { /* the routed experts' ids and prefill scratch */
        struct ft_gpu_moe_io io = {g->x, g->xn, g->xn16, g->y, g->topk, g->topw};
        st = ft_gpu_moe_init(&g->moe, m, g->C, g->o.cpu_act_fast, &io, &(struct ft_gpu_alloc){dalloc_cb, g}, g->s, g->probe);
    }
    /* flash-decoding partials for decode steps, which split the whole context (up to 256
     * chunks); prefill's flash attention needs none (it used to take C x 16 splits of them:
     * over 0.5 GiB at Qwen3-30B-A3B's shape and a 2,048-token chunk) */
    g->att_split_small = (g->o.max_ctx + 63) / 64;
    if (g->att_split_small > 256) g->att_split_small = 256;
    g->att_part = dalloc(g, ft_cuda_attention_scratch(MAX_GRAPH_T, m->n_heads, m->head_dim,
                                                      g->att_split_small), &st);
    if (st == FT_OK) cudaMemsetAsync(g->d_step, 0, 4, g->s); /* on g->s: it is non-blocking */
    if (E && g->o.routing == FT_ROUTING_ZIPF) { /* the CPU's zipf:S over ranks 1..E */
        double *cum = malloc(E * sizeof *cum);
        float *cdf = malloc(E * sizeof *cdf);
        if (cum && cdf) {
            ft_zipf_sums((int)E, g->o.routing_param, cum);
            for (size_t r = 0; r < E; r++) cdf[r] = (float)(cum[r] / cum[E - 1]);
            cdf[E - 1] = 1.0f;
            g->d_zipf_cdf = up_f(g, cdf, E, &st);
        } else if (st == FT_OK) {
            st = ft_fail(FT_ERR_OOM, "GPU: out of host memory");
        }
        free(cum), free(cdf);
        g->synth.zipf_cdf = g->d_zipf_cdf;
    } else if (E && g->o.routing == FT_ROUTING_STICKY) {
        g->d_sticky = dalloc(g, (size_t)m->n_layers * k * 4, &st);
        g->d_synth_stats = dalloc(g, C * 2 * 4, &st);
        if (st == FT_OK) cudaMemsetAsync(g->d_sticky, 0xff, (size_t)m->n_layers * k * 4, g->s); /* -1 */
        g->synth.sticky = g->d_sticky, g->synth.stats = g->d_synth_stats;
        g->synth.keep = (float)g->o.routing_param; /* sticky:P (0 keeps none), as the CPU */
    }
    return st;
}

/* y[T, N] = x · W^T: GEMV kernel for decode-sized T, cuBLAS on the bf16 copy otherwise. */
static enum ft_status mm(struct ft_gpu *g, float *y, int ldy, const float *x, const uint16_t *x16,
                         const uint16_t *w, const float *bias, int T, int N, int K) {
    if (T <= MAX_GRAPH_T || !x16) {
        ft_cuda_gemv(y, ldy, x, w, bias, T, N, K, g->s);
        return FT_OK;
    }
    enum ft_status st = ft_blas_gemm(g->blas, y, ldy, x16, w, T, N, K);
    if (st == FT_OK && bias) ft_cuda_add_bias(y, ldy, bias, T, N, g->s);
    return st;
}

/* Marks the end of an op group (FT_PROFILE=2 only). */
static inline void prof_mark(struct ft_gpu *g, enum ft_probe_op op) {
    if (g->probe) ft_gpu_probe_op(g->probe, op, g->s);
}

/* Layer l's top-k ids and weights from its router logits (synthetic routing: drawn). */
static void route_from(struct ft_gpu *g, int l, int T, const float *logits, int32_t *ids, float *w) {
    const struct ft_model *m = g->m;
    if (g->o.routing == FT_ROUTING_MODEL && m->router_sigmoid)
        ft_cuda_router_sigmoid(logits, g->L[l].score_bias, T, m->n_experts, m->top_k, m->n_group,
                               m->topk_group, m->norm_topk, m->routed_scale, ids, w, g->s);
    else if (g->o.routing == FT_ROUTING_MODEL)
        ft_cuda_router_topk(logits, T, m->n_experts, m->top_k, m->norm_topk,
                            m->router_group_max ? m->n_group : 0, m->topk_group,
                            m->routed_scale > 0 ? m->routed_scale : 1.0f, ids, w, g->s);
    else
        ft_cuda_synthetic_route(ids, w, logits, T, m->n_experts, m->top_k, g->o.seed,
                                g->d_step, l, m->norm_topk, &g->synth, g->s);
}

static void route(struct ft_gpu *g, int l, int T, int32_t *ids) {
    route_from(g, l, T, g->router, ids, g->topw);
}

/* Next-layer prefetch: the experts MoE layer nl will route to, predicted at layer l's router:
 * nl's router on the residual as it is now (after l's attention; a real model's residual
 * changes little in one layer); synthetic uniform / zipf routing: nl's draws themselves (a
 * function of the step, layer and token; the offload cache adds the configured noise). Sticky
 * routing's draws carry state from token to token: no prediction (o_prefetch). */
static void predict(struct ft_gpu *g, int l, int T) {
    int32_t *ids;
    float *w;
    const int nl = ft_gpu_moe_next_predicted(g->moe, l, &ids, &w);
    if (nl < 0) return;
    const struct gpu_layer *N = &g->L[nl];
    const int E = g->m->n_experts, H = g->m->hidden;
    if (g->o.routing == FT_ROUTING_MODEL) {
        struct ft_cuda_gemv_args rt = {{g->router_pred, NULL, NULL}, E, 0, E, {N->router_b, NULL, NULL},
                                       g->x, N->router, N->ffn_norm, g->m->rms_eps, NULL, 0, T, E, H};
        ft_cuda_gemv_ex(&rt, g->s);
    }
    route_from(g, nl, T, g->o.routing == FT_ROUTING_MODEL ? g->router_pred : g->router, ids, w);
}

/* Offloaded decode spans run as graphs unless graphs are off (--no-graphs, FT_PROFILE=2). */
static int span_graphs(const struct ft_gpu *g, int T) {
    return ft_gpu_moe_offloading(g->moe) && g->o.graphs && !ft_gpu_probe_eager(g->probe) &&
           T <= MAX_GRAPH_T;
}

/* A span's graph: per batch size and start layer; span_keys of them */
static size_t span_key(const struct ft_gpu *g, int T, int l0) {
    return (size_t)T * (g->m->n_layers + 1) + l0;
}
static size_t span_keys(const struct ft_gpu *g) { return span_key(g, MAX_GRAPH_T + 1, 0); }

/* y += the shared expert's output in sh: gated by sigmoid(xn . sh_score) (Qwen2-MoE, Qwen3.5),
 * or plain (DeepSeek, GLM). */
static void shared_join(struct ft_gpu *g, const struct gpu_layer *L, float *y, int T) {
    const int H = g->m->hidden;
    if (!L->sh_score) {
        ft_cuda_add(y, g->sh, (size_t)T * H, g->s);
        return;
    }
    ft_cuda_gemv(g->score, 1, g->xn, L->sh_score, NULL, T, 1, H, g->s);
    ft_cuda_sigmoid_scale_add(y, g->sh, g->score, T, H, g->s);
}

/* The end of MoE layer l's decode step: the CPU's share of its experts joins x (cpu/hybrid:
 * always, from zeros when the CPU had none, so that a span graph holds one shape), then the
 * shared expert. */
static void moe_tail(struct ft_gpu *g, int l, int T) {
    const struct ft_model *m = g->m;
    const struct gpu_layer *L = &g->L[l];
    int H = m->hidden;
    cudaStream_t s = g->s;
    ft_gpu_moe_join(g->moe, T);
    prof_mark(g, FT_OP_EXPERTS);
    if (L->has_shared) {
        int Is = m->shared_inter;
        ft_cuda_gemv(g->gu, 2 * Is, g->xn, L->sh_gu, NULL, T, 2 * Is, H, s);
        ft_cuda_silu_mul(g->act, g->gu, T, Is, s);
        ft_cuda_gemv(g->sh, H, g->act, L->sh_down, NULL, T, H, Is, s);
        shared_join(g, L, g->x, T); /* x += shared expert */
        prof_mark(g, FT_OP_SHARED);
    }
}

static size_t kv_layer_off(const struct ft_gpu *g, const struct gpu_layer *L) {
    return (size_t)L->kv * g->o.n_blocks * FT_KV_BLOCK * g->kv_dim;
}

/* The norm of q and k (per head, or over all heads at once: MiniMax-M2), RoPE, and k and v
 * into layer L's part of the paged cache. */
static void rope_kv(struct ft_gpu *g, const struct gpu_layer *L, int T) {
    const struct ft_model *m = g->m;
    const int kd = g->kv_dim;
    cudaStream_t s = g->s;
    if (L->qk_norm_all) {
        ft_cuda_rmsnorm(g->q, NULL, g->q, L->q_norm, T, g->q_dim, m->rms_eps, s);
        ft_cuda_rmsnorm(g->k, NULL, g->k, L->k_norm, T, kd, m->rms_eps, s);
    }
    const size_t off = kv_layer_off(g, L);
    ft_cuda_qk_rope_kv(g->q, g->k, g->v, g->k_cache + off, g->v_cache + off,
                       L->qk_norm_all ? NULL : L->q_norm, L->qk_norm_all ? NULL : L->k_norm,
                       m->rms_eps, g->d_pos, g->inv_freq, m->rope_mscale, g->d_tok_seq, g->d_tables,
                       g->max_blocks, FT_KV_BLOCK, T, m->n_heads, m->n_kv_heads, m->head_dim,
                       m->rot_dim, s);
    prof_mark(g, FT_OP_ROPE_KV);
}

/* A decode step's attention block: x += o_proj(attention(norm(x))), the norm fused into the
 * QKV GEMV (which also leaves the normalised rows in xn for a gate projection). */
static void attention_decode(struct ft_gpu *g, const struct gpu_layer *L, int T) {
    const struct ft_model *m = g->m;
    const int H = m->hidden, hd = m->head_dim, qd = g->q_dim, kd = g->kv_dim;
    cudaStream_t s = g->s;
    struct ft_cuda_gemv_args qkv = {{g->q, g->k, g->v}, qd, kd, qd, {L->bq, L->bk, L->bv}, g->x,
                                    L->wqkv, L->attn_norm, m->rms_eps, L->wgate ? g->xn : NULL, 0,
                                    T, qd + 2 * kd, H};
    ft_cuda_gemv_ex(&qkv, s);
    if (L->wgate) ft_cuda_gemv(g->gate, qd, g->xn, L->wgate, NULL, T, qd, H, s);
    prof_mark(g, FT_OP_QKV);
    rope_kv(g, L, T);
    const size_t off = kv_layer_off(g, L);
    ft_cuda_attention(g->att, g->att_part, g->q, g->k_cache + off, g->v_cache + off, g->d_pos,
                      g->d_tok_seq, g->d_tables, g->max_blocks, FT_KV_BLOCK, T, m->n_heads,
                      m->n_kv_heads, hd, 1.0f / sqrtf((float)hd), L->window, L->sinks, g->o.max_ctx,
                      g->att_split_small, s);
    if (L->wgate) ft_cuda_mul_sigmoid(g->att, g->gate, (size_t)T * qd, s);
    prof_mark(g, FT_OP_ATTN);
    struct ft_cuda_gemv_args o = {{g->x, NULL, NULL}, H, 0, H, {L->bo, NULL, NULL}, g->att, L->wo,
                                  NULL, 0.0f, NULL, 1, T, H, qd};
    ft_cuda_gemv_ex(&o, s); /* x += o_proj(att) */
    prof_mark(g, FT_OP_OPROJ);
}

/* A Gated DeltaNet layer (the CPU's gdn() in engine/forward.c): decode-sized steps from the
 * residual x with the norm fused into the projection GEMV and the output added to x; prefill
 * from xn / xn16 into y. Each segment's conv window and S advance through its tokens. */
static enum ft_status gdn_block(struct ft_gpu *g, const struct gpu_layer *L, int T) {
    const struct ft_model *m = g->m;
    const int H = m->hidden, hv = m->gdn_hv, dv = m->gdn_dv, Dv = hv * dv, N = g->gdn_ld;
    const int Cc = 2 * m->gdn_hk * m->gdn_dk + Dv;
    cudaStream_t s = g->s;
    enum ft_status st = FT_OK;
    if (T <= MAX_GRAPH_T) {
        struct ft_cuda_gemv_args a = {{g->gp, NULL, NULL}, N, 0, N, {NULL, NULL, NULL}, g->x, L->wgdn,
                                      L->attn_norm, m->rms_eps, NULL, 0, T, N, H};
        ft_cuda_gemv_ex(&a, s);
    } else {
        st = mm(g, g->gp, N, g->xn, g->xn16, L->wgdn, NULL, T, N, H);
    }
    prof_mark(g, FT_OP_QKV);
    const struct ft_cuda_gdn d = {g->d_state, g->st_floats, (size_t)L->gl * (g->st_floats / m->n_gdn),
                                  g->d_seg_t0, g->d_seg_slot, m->gdn_hk, hv, m->gdn_dk, dv,
                                  m->gdn_kernel};
    if (T > MAX_GRAPH_T) { /* prefill: the chunked forms, parallel over tokens (scratch past gp) */
        float *scr = g->gp + (size_t)g->C * N;
        ft_cuda_gdn_conv_chunked(g->gp, N, &d, L->gdn_conv, T, g->seg_grid, scr, s);
        ft_cuda_gdn_rule_chunked(g->att, g->gp, N, Cc + Dv, Cc + Dv + hv, &d, L->gdn_A, L->gdn_dt, T,
                                 g->seg_grid, scr, s);
    } else { /* decode-sized steps (graph-captured): the recurrent forms */
        ft_cuda_gdn_conv(g->gp, N, &d, L->gdn_conv, g->seg_grid, s);
        ft_cuda_gdn_rule(g->att, g->gp, N, Cc + Dv, Cc + Dv + hv, &d, L->gdn_A, L->gdn_dt, g->seg_grid, s);
    }
    ft_cuda_gated_rmsnorm(g->att, g->gp + Cc, N, L->gdn_norm, T, hv, dv, m->rms_eps, s);
    prof_mark(g, FT_OP_ATTN);
    if (T <= MAX_GRAPH_T) {
        struct ft_cuda_gemv_args o = {{g->x, NULL, NULL}, H, 0, H, {NULL, NULL, NULL}, g->att,
                                      L->gdn_out, NULL, 0.0f, NULL, 1, T, H, Dv};
        ft_cuda_gemv_ex(&o, s); /* x += out_proj(o) */
    } else {
        ft_cuda_to_bf16(g->att16, g->att, (size_t)T * Dv, s);
        if (st == FT_OK) st = mm(g, g->y, H, g->att, g->att16, L->gdn_out, NULL, T, H, Dv);
    }
    prof_mark(g, FT_OP_OPROJ);
    return st;
}

/* DeepSeek sparse attention's lightning indexer for a layer that runs it (the CPU's dsa_index):
 * its queries from the normalised q LoRA (m_qa), its key and head weights from xn, the key
 * (LayerNorm, RoPE) into the cache rows at offset Lr + dr, then each token's ix_k best cached
 * positions into ix_sel / ix_n, scored ix_rows tokens at a time. max_n bounds every token's
 * context (decode: the context size, for graphs). */
static enum ft_status dsa_index(struct ft_gpu *g, const struct gpu_layer *L, int T, int max_n,
                                float *cache) {
    const struct ft_model *m = g->m;
    const int H = m->hidden, nI = m->dsa_heads, dI = m->dsa_dim, ql = m->mla_q_lora;
    const int dec = T <= MAX_GRAPH_T, off = m->mla_kv_lora + m->mla_rope;
    cudaStream_t s = g->s;
    enum ft_status st = FT_OK;
    if (dec) {
        ft_cuda_gemv(g->ix_q, nI * dI, g->m_qa, L->ix_wq, NULL, T, nI * dI, ql, s);
        ft_cuda_gemv(g->ix_kw, dI + nI, g->xn, L->ix_wkw, NULL, T, dI + nI, H, s);
    } else {
        /* fp32 GEMVs, not bf16 GEMMs: the selection must be the CPU's, and bf16 inputs move
         * scores across the top-k's ties (the test fixture's prefill went 1.37 off) */
        st = mm(g, g->ix_q, nI * dI, g->m_qa, NULL, L->ix_wq, NULL, T, nI * dI, ql);
        if (st == FT_OK) st = mm(g, g->ix_kw, dI + nI, g->xn, NULL, L->ix_wkw, NULL, T, dI + nI, H);
    }
    if (st != FT_OK) return st;
    ft_cuda_dsa_prep(g->ix_q, g->ix_kw, dI + nI, L->ix_kn, L->ix_kb, cache, g->kv_dim, off, g->d_pos,
                     g->d_tok_seq, g->d_tables, g->max_blocks, FT_KV_BLOCK, T, nI, dI, m->mla_rope,
                     g->inv_freq, m->rope_mscale, s);
    if (max_n > g->o.max_ctx) max_n = g->o.max_ctx;
    if (!dec && max_n <= g->ix_k) return FT_OK; /* every token keeps its whole context */
    for (int t0 = 0; t0 < T; t0 += g->ix_rows) {
        const int rows = T - t0 < g->ix_rows ? T - t0 : g->ix_rows;
        ft_cuda_dsa_scores(g->ix_score, g->o.max_ctx, g->ix_q, g->ix_kw, dI + nI, cache, g->kv_dim, off,
                           g->d_pos, g->d_tok_seq, g->d_tables, g->max_blocks, FT_KV_BLOCK, t0, rows,
                           max_n, nI, dI, 1.0f / sqrtf((float)dI), 1.0f / sqrtf((float)nI), g->ix_k, s);
        ft_cuda_dsa_topk(g->ix_sel, g->ix_n, g->ix_k, g->ix_score, g->o.max_ctx, g->d_pos, t0, rows, s);
    }
    return FT_OK;
}

/* An MLA layer in the absorbed form (the CPU's mla_attention): decode-sized steps from the
 * residual x, the norm fused into the first projection (which leaves the normalised rows in xn
 * for kv_a) and the output added to x; prefill from xn / xn16 into y. */
static enum ft_status mla_block(struct ft_gpu *g, const struct gpu_layer *L, int T) {
    const struct ft_model *m = g->m;
    const int H = m->hidden, nh = m->n_heads, dn = m->mla_nope, dr = m->mla_rope, dv = m->mla_v;
    const int Lr = m->mla_kv_lora, D = Lr + dr, ql = m->mla_q_lora, qd = nh * (dn + dr), od = nh * dv;
    const int dec = T <= MAX_GRAPH_T;
    cudaStream_t s = g->s;
    enum ft_status st = FT_OK;
    const uint16_t *w1 = L->q_a ? L->q_a : L->wqkv;
    float *y1 = L->q_a ? g->m_qa : g->q;
    const int n1 = L->q_a ? ql : qd;
    if (dec) {
        struct ft_cuda_gemv_args a = {{y1, NULL, NULL}, n1, 0, n1, {L->bq_a, NULL, NULL}, g->x, w1,
                                      L->attn_norm, m->rms_eps, g->xn, 0, T, n1, H};
        ft_cuda_gemv_ex(&a, s);
        ft_cuda_gemv(g->m_kva, D, g->xn, L->kv_a, L->bkv_a, T, D, H, s);
    } else {
        /* DSA: the q LoRA feeds the indexer's queries, so it stays fp32 (dsa_index) */
        st = mm(g, y1, n1, g->xn, L->dsa == 1 && L->q_a ? NULL : g->xn16, w1, L->bq_a, T, n1, H);
        if (st == FT_OK) st = mm(g, g->m_kva, D, g->xn, g->xn16, L->kv_a, L->bkv_a, T, D, H);
    }
    if (st == FT_OK && L->q_a) { /* the q LoRA's norm: eps 1e-6 fixed, as transformers */
        ft_cuda_rmsnorm(g->m_qa, dec ? NULL : g->m_qa16, g->m_qa, L->q_a_norm, T, ql, 1e-6f, s);
        st = mm(g, g->q, qd, g->m_qa, dec ? NULL : g->m_qa16, L->q_b, NULL, T, qd, ql);
    }
    if (st != FT_OK) return st;
    prof_mark(g, FT_OP_QKV);
    float *cache = g->k_cache + kv_layer_off(g, L);
    ft_cuda_mla_kv(g->m_kva, L->kv_a_norm, cache, g->kv_dim, g->d_pos, g->d_tok_seq, g->d_tables,
                   g->max_blocks, FT_KV_BLOCK, T, Lr, dr, g->inv_freq, m->rope_mscale, m->rope_pairs, s);
    /* DSA: decode-sized steps always through the selection (a graph serves every context);
     * prefill only when some token's context exceeds ix_k (else it is every position) */
    int use_sel = 0;
    if (L->dsa) {
        int max_n = g->o.max_ctx;
        if (!dec) {
            max_n = 1;
            for (int t = 0; t < T; t++) max_n = g->h_pos[t] + 1 > max_n ? g->h_pos[t] + 1 : max_n;
        }
        use_sel = dec || max_n > g->ix_k;
        if (L->dsa == 1) st = dsa_index(g, L, T, max_n, cache);
        if (st != FT_OK) return st;
    }
    if (dn == 0) cudaMemsetAsync(g->m_ql, 0, (size_t)T * nh * D * 4, s);
    ft_cuda_mla_q_pe(g->q, g->m_ql, g->d_pos, T, nh, dn, dr, Lr, g->inv_freq, m->rope_mscale,
                     m->rope_pairs, s);
    if (dn > 0) ft_cuda_bgemv(g->m_ql, D, g->q, dn + dr, L->uk, (size_t)Lr * dn, Lr, dn, T, nh, s);
    prof_mark(g, FT_OP_ROPE_KV);
    ft_cuda_mla_attention(g->m_lat, g->m_ql, cache, g->kv_dim, g->d_pos, g->d_tok_seq, g->d_tables,
                          g->max_blocks, FT_KV_BLOCK, T, nh, Lr, dr, m->attn_scale,
                          use_sel ? g->ix_sel : NULL, g->ix_n, g->ix_k, s);
    ft_cuda_bgemv(g->att, dv, g->m_lat, Lr, L->uv, (size_t)dv * Lr, dv, Lr, T, nh, s);
    prof_mark(g, FT_OP_ATTN);
    if (dec) {
        struct ft_cuda_gemv_args o = {{g->x, NULL, NULL}, H, 0, H, {L->bo, NULL, NULL}, g->att, L->wo,
                                      NULL, 0.0f, NULL, 1, T, H, od};
        ft_cuda_gemv_ex(&o, s); /* x += o_proj(att) */
    } else {
        ft_cuda_to_bf16(g->att16, g->att, (size_t)T * od, s);
        st = mm(g, g->y, H, g->att, g->att16, L->wo, L->bo, T, H, od);
    }
    prof_mark(g, FT_OP_OPROJ);
    return st;
}

/* A prefill step's attention block on xn / xn16 into y. */
static enum ft_status attention_prefill(struct ft_gpu *g, const struct gpu_layer *L, int T) {
    const struct ft_model *m = g->m;
    const int H = m->hidden, hd = m->head_dim, qd = g->q_dim, kd = g->kv_dim;
    cudaStream_t s = g->s;
    enum ft_status st = mm(g, g->q, qd, g->xn, g->xn16, L->wqkv, L->bq, T, qd, H);
    prof_mark(g, FT_OP_QKV);
    if (st == FT_OK) st = mm(g, g->k, kd, g->xn, g->xn16, L->wqkv + (size_t)qd * H, L->bk, T, kd, H);
    if (st == FT_OK) st = mm(g, g->v, kd, g->xn, g->xn16, L->wqkv + (size_t)(qd + kd) * H, L->bv, T, kd, H);
    if (st == FT_OK && L->wgate) st = mm(g, g->gate, qd, g->xn, g->xn16, L->wgate, NULL, T, qd, H);
    if (st != FT_OK) return st;
    prof_mark(g, FT_OP_KV);
    rope_kv(g, L, T);
    const size_t off = kv_layer_off(g, L);
    ft_cuda_attention_prefill(g->att, g->q, g->k_cache + off, g->v_cache + off, g->d_pos,
                              g->d_tok_seq, g->d_tables, g->max_blocks, FT_KV_BLOCK, g->d_att_tiles,
                              g->n_att_tiles, m->n_heads, m->n_kv_heads, hd, 1.0f / sqrtf((float)hd),
                              L->window, L->sinks, s);
    if (L->wgate) ft_cuda_mul_sigmoid(g->att, g->gate, (size_t)T * qd, s);
    ft_cuda_to_bf16(g->att16, g->att, (size_t)T * qd, s);
    prof_mark(g, FT_OP_ATTN);
    st = mm(g, g->y, H, g->att, g->att16, L->wo, L->bo, T, H, qd);
    prof_mark(g, FT_OP_OPROJ);
    return st;
}

/* One span of a decode step, all on the stream with no host sync: the tail of MoE layer l0 - 1
 * (l0 > 0), then layers l0.. through the next MoE layer's router (offloading: with its ids,
 * normalised rows and weights copied back). Returns that MoE layer, or n_layers. */
static int decode_span(struct ft_gpu *g, int T, int l0) {
    const struct ft_model *m = g->m;
    int H = m->hidden, E = m->n_experts;
    float eps = m->rms_eps;
    cudaStream_t s = g->s;
    if (l0 > 0) moe_tail(g, l0 - 1, T);
    int moe = m->n_layers;
    for (int l = l0; l < m->n_layers; l++) {
        const struct gpu_layer *L = &g->L[l];
        if (L->gdn) gdn_block(g, L, T);
        else if (L->mla) mla_block(g, L, T);
        else attention_decode(g, L, T);
        if (!L->is_moe) {
            int I = L->I;
            struct ft_cuda_gemv_args gu = {{g->gu, NULL, NULL}, 2 * I, 0, 2 * I, {NULL, NULL, NULL},
                                           g->x, L->w_gu, L->ffn_norm, eps, NULL, 0, T, 2 * I, H};
            ft_cuda_gemv_ex(&gu, s);
            ft_cuda_silu_mul(g->act, g->gu, T, I, s);
            struct ft_cuda_gemv_args dn = {{g->x, NULL, NULL}, H, 0, H, {NULL, NULL, NULL}, g->act,
                                           L->w_down, NULL, 0.0f, NULL, 1, T, H, I};
            ft_cuda_gemv_ex(&dn, s);
            prof_mark(g, FT_OP_DENSE);
            continue;
        }
        /* router logits with the fused ffn norm; the normalised rows land in xn for the experts */
        struct ft_cuda_gemv_args rt = {{g->router, NULL, NULL}, E, 0, E, {L->router_b, NULL, NULL},
                                       g->x, L->router, L->ffn_norm, eps, g->xn, 0, T, E, H};
        ft_cuda_gemv_ex(&rt, s);
        route(g, l, T, ft_gpu_moe_ids(g->moe, l));
        predict(g, l, T);
        prof_mark(g, FT_OP_ROUTER);
        ft_gpu_moe_stage(g->moe, l, T); /* offloading: the ids (and the CPU's inputs) to the host */
        moe = l;
        break;
    }
    return moe;
}

/* Offloaded decode syncs at every MoE layer's router, so the whole step cannot be one graph;
 * each span between two syncs is one instead (captured the second time a batch size reaches
 * it), which turns ~20 launches into one: a launch costs the engine thread microseconds on
 * the critical path of every layer step (more under a virtualised host such as gVisor). */
static enum ft_status span(struct ft_gpu *g, int T, int l0, int *moe_l) {
    if (!span_graphs(g, T)) {
        *moe_l = decode_span(g, T, l0);
        return FT_OK;
    }
    size_t n = span_keys(g);
    if (!g->span_graph) {
        g->span_graph = calloc(n, sizeof *g->span_graph);
        g->span_seen = calloc(n, sizeof *g->span_seen);
        g->span_end = calloc(g->m->n_layers + 1, sizeof *g->span_end);
        if (!g->span_graph || !g->span_seen || !g->span_end)
            return ft_fail(FT_ERR_OOM, "decode span graphs: out of memory");
    }
    size_t key = span_key(g, T, l0);
    if (g->span_graph[key]) {
        *moe_l = g->span_end[l0];
    } else if (!g->span_seen[key] || g->span_seen[key] > GRAPH_TRIES) {
        /* first time (lazy module loads), or no graph: one by one */
        if (!g->span_seen[key]) g->span_seen[key] = 1;
        *moe_l = decode_span(g, T, l0);
        return FT_OK;
    } else { /* second time (or again after a failure: GRAPH_TRIES): capture, then launch */
        cudaGraph_t graph = NULL;
        if (cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
            return ft_cuda_check("span graph capture");
        *moe_l = g->span_end[l0] = decode_span(g, T, l0);
        cudaError_t e = cudaStreamEndCapture(g->s, &graph);
        if (e == cudaSuccess) e = instantiate(g, &g->span_graph[key], graph);
        if (graph) cudaGraphDestroy(graph);
        if (e != cudaSuccess) { /* nothing was launched: this span goes one by one this time */
            cudaGetLastError();
            g->span_graph[key] = NULL;
            if (g->span_seen[key]++ == 1)
                ft_log_warn("decode span graph (batch %d, layer %d) failed to capture (%s); that "
                            "span is launched kernel by kernel (captured again at its next %d "
                            "steps at most)", T, l0, cudaGetErrorString(e), GRAPH_TRIES - 1);
            *moe_l = decode_span(g, T, l0);
            return FT_OK;
        }
    }
    return cudaGraphLaunch(g->span_graph[key], g->s) == cudaSuccess ? FT_OK
                                                                   : ft_cuda_check("span graph launch");
}

/* Decode-sized steps (T <= 8): GEMV kernels only, each input norm fused into the GEMV that
 * reads it, each residual add fused into the GEMV/combine that produces it. Resident, there is
 * no host sync and the whole step is graph-capturable. x holds the complete residual after
 * every layer. */
static enum ft_status decode_layers(struct ft_gpu *g, int T) {
    const struct ft_model *m = g->m;
    if (g->o.routing != FT_ROUTING_MODEL) ft_cuda_step_incr(g->d_step, g->s);
    ft_cuda_embed(g->x, g->embed, g->d_ids, T, m->hidden, g->s);
    prof_mark(g, FT_OP_NORM);
    for (int l0 = 0;;) {
        int l = m->n_layers;
        enum ft_status st = span(g, T, l0, &l);
        if (st != FT_OK || l >= m->n_layers) return st;
        if ((st = ft_gpu_moe_decode(g->moe, &g->L[l].ex, l, T)) != FT_OK) return st;
        l0 = l + 1;
    }
}

/* Prefill-sized steps (T > 8): cuBLAS GEMMs on bf16 copies of the activations, the MoE through
 * the device-side sort and grouped tensor-core GEMM. Each block's output waits in y and joins
 * the residual in the next add+norm. */
static enum ft_status prefill_layers(struct ft_gpu *g, int T, int max_pos) {
    const struct ft_model *m = g->m;
    int H = m->hidden, E = m->n_experts;
    cudaStream_t s = g->s;
    enum ft_status st = FT_OK;
    if (g->o.routing != FT_ROUTING_MODEL) ft_cuda_step_incr(g->d_step, s);
    ft_cuda_embed(g->x, g->embed, g->d_ids, T, H, s);
    prof_mark(g, FT_OP_NORM);
    for (int l = 0; l < m->n_layers && st == FT_OK; l++) {
        const struct gpu_layer *L = &g->L[l];
        ft_cuda_add_rmsnorm(g->x, l ? g->y : NULL, g->xn, g->xn16, L->attn_norm, T, H, m->rms_eps, s);
        prof_mark(g, FT_OP_NORM);
        st = L->gdn ? gdn_block(g, L, T) : L->mla ? mla_block(g, L, T) : attention_prefill(g, L, T);
        if (st != FT_OK) break;
        ft_cuda_add_rmsnorm(g->x, g->y, g->xn, g->xn16, L->ffn_norm, T, H, m->rms_eps, s);
        prof_mark(g, FT_OP_NORM);
        if (!L->is_moe) {
            int I = L->I;
            st = mm(g, g->gu, 2 * I, g->xn, g->xn16, L->w_gu, NULL, T, 2 * I, H);
            ft_cuda_silu_mul(g->act, g->gu, T, I, s);
            ft_cuda_to_bf16(g->act16, g->act, (size_t)T * I, s);
            if (st == FT_OK) st = mm(g, g->y, H, g->act, g->act16, L->w_down, NULL, T, H, I);
            prof_mark(g, FT_OP_DENSE);
            continue;
        }
        if ((st = mm(g, g->router, E, g->xn, g->xn16, L->router, L->router_b, T, E, H)) != FT_OK) break;
        route(g, l, T, g->topk);
        prof_mark(g, FT_OP_ROUTER);
        if ((st = ft_gpu_moe_prefill(g->moe, &L->ex, l, T)) != FT_OK) break;
        if (L->has_shared) {
            int Is = m->shared_inter;
            st = mm(g, g->gu, 2 * Is, g->xn, g->xn16, L->sh_gu, NULL, T, 2 * Is, H);
            ft_cuda_silu_mul(g->act, g->gu, T, Is, s);
            ft_cuda_to_bf16(g->act16, g->act, (size_t)T * Is, s);
            if (st == FT_OK) st = mm(g, g->sh, H, g->act, g->act16, L->sh_down, NULL, T, H, Is);
            shared_join(g, L, g->y, T);
            prof_mark(g, FT_OP_SHARED);
        }
    }
    return st;
}

/* Final norm + lm_head for the gathered rows (d_rows), into g->logits [rows, V]. */
static enum ft_status head(struct ft_gpu *g, const int32_t *d_rows, int rows, int pending_y) {
    const struct ft_model *m = g->m;
    int H = m->hidden, V = m->vocab;
    enum ft_status st = FT_OK;
    ft_cuda_gather_f32(g->xl, g->x, pending_y ? g->y : NULL, d_rows, rows, H, g->s);
    if (rows <= MAX_GRAPH_T) { /* final norm fused into the lm_head GEMV */
        struct ft_cuda_gemv_args a = {{g->logits, NULL, NULL}, V, 0, V, {NULL, NULL, NULL}, g->xl,
                                      g->lm_head, g->final_norm, m->rms_eps, NULL, 0, rows, V, H};
        ft_cuda_gemv_ex(&a, g->s);
    } else {
        ft_cuda_rmsnorm(g->xl, g->xl16, g->xl, g->final_norm, rows, H, m->rms_eps, g->s);
        st = mm(g, g->logits, V, g->xl, g->xl16, g->lm_head, NULL, rows, V, H);
    }
    prof_mark(g, FT_OP_HEAD);
    return st;
}

/* One step for T tokens whose inputs are on the device. */
static enum ft_status layers(struct ft_gpu *g, int T, int max_pos, int rows) {
    enum ft_status st = FT_OK;
    if (T <= MAX_GRAPH_T)
        st = decode_layers(g, T);
    else
        st = prefill_layers(g, T, max_pos);
    if (T > MAX_GRAPH_T) ft_gpu_moe_prefill_end(g->moe);
    if (st != FT_OK || rows > g->logit_rows) return st; /* many rows: ft_gpu_forward does passes */
    return head(g, g->d_rows, rows, T > MAX_GRAPH_T);
}

enum ft_status ft_gpu_row_logits(struct ft_gpu *g, int r, float *out) {
    const size_t V = (size_t)g->m->vocab;
    if (r < 0 || r >= g->logit_rows)
        return ft_fail(FT_ERR_INVALID_ARG, "GPU logit row %d of %d", r, g->logit_rows);
    cudaMemcpyAsync(g->h_logits, g->logits + (size_t)r * V, V * 4, cudaMemcpyDeviceToHost, g->s);
    if (cudaStreamSynchronize(g->s) != cudaSuccess) return ft_cuda_check("GPU logit row");
    memcpy(out, g->h_logits, V * 4);
    return FT_OK;
}

static enum ft_status state_copy(struct ft_gpu *g, int slot, void *host, int to_host) {
    if (!g->m->n_gdn || slot < 0 || slot >= g->n_slots)
        return ft_fail(FT_ERR_INVALID_ARG, "GPU state slot %d of %d", slot, g->n_slots);
    float *dev = g->d_state + (size_t)slot * g->st_floats;
    cudaMemcpyAsync(to_host ? host : dev, to_host ? (const void *)dev : host, g->st_floats * 4,
                    to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, g->s);
    if (cudaStreamSynchronize(g->s) != cudaSuccess) return ft_cuda_check("GPU state slot copy");
    return FT_OK;
}
enum ft_status ft_gpu_state_read(struct ft_gpu *g, int slot, float *out) { return state_copy(g, slot, out, 1); }
enum ft_status ft_gpu_state_write(struct ft_gpu *g, int slot, const float *in) {
    return state_copy(g, slot, (void *)in, 0);
}

/* The step's tokens on the device from its logit rows: argmax, or d_draw's draws (masked rows
 * by d_mask's words when masked). */
static void pick_tokens(struct ft_gpu *g, int rows, int draw, int masked) {
    if (draw)
        ft_cuda_sample_draw(g->logits, rows, g->m->vocab, g->d_draw, masked ? g->d_mask : NULL,
                            g->d_top1, g->s);
    else ft_cuda_argmax(g->logits, rows, g->m->vocab, g->d_top1, g->s);
}

enum ft_status ft_gpu_forward(struct ft_gpu *g, const struct ft_seg *segs, int n_segs,
                              const int *slots, float *logits, int32_t *top1,
                              const struct ft_draw *draws, const struct ft_draw_masks *masks,
                              double *distinct_out) {
    const struct ft_model *m = g->m;
    int T = 0, rows = 0, decode = n_segs <= g->o.max_seqs, max_pos = 1;
    /* a step the copy watchdog gave up may still run on the GPU, reading the pinned inputs
     * written below: none starts before it is done */
    enum ft_status st = ft_gpu_moe_check(g->moe);
    if (st != FT_OK) return st;
    if (n_segs > g->o.max_seqs)
        return ft_fail(FT_ERR_INVALID_ARG, "GPU forward: %d sequences in one step (max %d)", n_segs,
                       g->o.max_seqs);
    if (m->n_gdn && !slots)
        return ft_fail(FT_ERR_INVALID_ARG, "GPU forward: a hybrid model's step without state slots");
    for (int i = 0; i < n_segs; i++) {
        const struct ft_seg *sg = &segs[i];
        decode &= sg->n == 1 && sg->want == FT_LOGITS_LAST;
        g->h_seg_t0[i] = T;
        g->h_seg_slot[i] = slots ? slots[i] : 0;
        if (slots && (slots[i] < 0 || slots[i] >= g->n_slots))
            return ft_fail(FT_ERR_INVALID_ARG, "GPU forward: state slot %d of %d", slots[i], g->n_slots);
        memcpy(g->h_tables + (size_t)i * g->max_blocks, sg->blocks,
               (size_t)((sg->pos0 + sg->n + FT_KV_BLOCK - 1) / FT_KV_BLOCK) * 4);
        for (int t = 0; t < sg->n; t++, T++) {
            g->h_ids[T] = sg->ids[t];
            g->h_pos[T] = sg->pos0 + t;
            if (sg->pos0 + t + 1 > max_pos) max_pos = sg->pos0 + t + 1;
            g->h_tok_seq[T] = i;
            if (sg->want == FT_LOGITS_ALL || (sg->want == FT_LOGITS_LAST && t == sg->n - 1))
                g->h_rows[rows++] = T;
        }
    }
    /* decode-sized steps launch the DeltaNet kernels for T segments, the ones past n_segs empty,
     * so that a span graph captured for T tokens serves every split of them into sequences */
    g->seg_grid = T <= MAX_GRAPH_T ? T : n_segs;
    for (int i = n_segs; i <= g->seg_grid; i++) g->h_seg_t0[i] = T, g->h_seg_slot[i] = 0;
    if (top1 && (!logits || draws) && rows > g->logit_rows)
        return ft_fail(FT_ERR_INVALID_ARG, "GPU forward: tokens for %d rows drawn on the device "
                       "(at most %d rows a step)", rows, g->logit_rows);
    cudaStream_t s = g->s;
    /* one copy: ids .. logit rows up to the used block tables (the views' fixed offsets) */
    cudaMemcpyAsync(g->d_in, g->h_in, (in_table_offset(g) + (size_t)n_segs * g->max_blocks) * 4,
                    cudaMemcpyHostToDevice, s);
    for (int i = 0; m->n_gdn && i < n_segs; i++) /* a sequence starting over: its state from zeros */
        if (segs[i].pos0 == 0)
            cudaMemsetAsync(g->d_state + (size_t)slots[i] * g->st_floats, 0, g->st_floats * 4, s);
    if (T > MAX_GRAPH_T) { /* prefill attention's query tiles: per segment, 64 tokens each */
        int len[n_segs];
        for (int i = 0; i < n_segs; i++) len[i] = segs[i].n;
        g->n_att_tiles = ft_cuda_attention_tiles(g->h_att_tiles, len, n_segs);
        cudaMemcpyAsync(g->d_att_tiles, g->h_att_tiles, (size_t)g->n_att_tiles * 8, cudaMemcpyHostToDevice, s);
    }
    int use_graph = decode && g->o.graphs && T <= MAX_GRAPH_T && !ft_gpu_probe_eager(g->probe) &&
                    !ft_gpu_moe_offloading(g->moe);
    /* greedy ids on the device: after the head, unless the lm_head runs in passes (then from
     * the copied logits below) */
    int dev_top1 = top1 && rows <= g->logit_rows && rows > 0;
    /* masked draws: the layers (logits-only graph 0) go first, the host fills the masks while
     * the device runs them, then the masks' copy and the draw follow on the stream */
    int masked = 0;
    for (int r = 0; dev_top1 && draws && masks && r < rows; r++) masked |= draws[r].masked != 0;
    const int pick = dev_top1 && !masked, gi = pick ? (draws ? 2 : 1) : 0;
    if (dev_top1 && draws) { /* each row's parameters and uniform for the draw kernel */
        memcpy(g->h_draw, draws, (size_t)rows * sizeof *draws);
        cudaMemcpyAsync(g->d_draw, g->h_draw, (size_t)rows * sizeof *draws, cudaMemcpyHostToDevice, s);
    }
    ft_gpu_probe_step_begin(g->probe, T > MAX_GRAPH_T, decode && T <= MAX_GRAPH_T, s);
    int *seen = use_graph ? &g->graph_seen[gi][T] : NULL;
    if (use_graph && g->graph[gi][T]) {
        if (cudaGraphLaunch(g->graph[gi][T], s) != cudaSuccess) st = ft_cuda_check("cudaGraphLaunch");
    } else if (seen && *seen >= 1 && *seen <= GRAPH_TRIES) { /* second time at this size (or
                                                               * again: GRAPH_TRIES): capture */
        cudaGraph_t graph = NULL;
        if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
            return ft_cuda_check("cudaStreamBeginCapture");
        st = layers(g, T, max_pos, rows);
        if (st == FT_OK && pick) pick_tokens(g, rows, draws != NULL, 0);
        cudaError_t e = cudaStreamEndCapture(s, &graph);
        if (st == FT_OK && e == cudaSuccess) e = instantiate(g, &g->graph[gi][T], graph);
        if (graph) cudaGraphDestroy(graph);
        if (st == FT_OK && e == cudaSuccess) {
            if (cudaGraphLaunch(g->graph[gi][T], s) != cudaSuccess) st = ft_cuda_check("cudaGraphLaunch");
        } else if (st == FT_OK) {
            /* no graph (out of memory for its instantiation after load): nothing of the step
             * ran, so it runs kernel by kernel now and its requests are served as without
             * graphs; this size is captured again at its next steps (GRAPH_TRIES in all) */
            cudaGetLastError();
            g->graph[gi][T] = NULL;
            if ((*seen)++ == 1)
                ft_log_warn("decode graph (batch %d) failed to capture (%s); the step runs kernel "
                            "by kernel (captured again at its next %d steps at most, then never)",
                            T, cudaGetErrorString(e), GRAPH_TRIES - 1);
            st = layers(g, T, max_pos, rows);
            if (st == FT_OK && pick) pick_tokens(g, rows, draws != NULL, 0);
        }
    } else {
        if (seen && !*seen) *seen = 1;
        st = layers(g, T, max_pos, rows);
        if (st == FT_OK && pick) pick_tokens(g, rows, draws != NULL, 0);
    }
    if (st != FT_OK) return st;
    if (masked) {
        int last = 0;
        for (int r = 0; r < rows; r++)
            if (draws[r].masked) masks->fill(masks->ctx, r, g->h_mask + (size_t)r * g->mask_words), last = r + 1;
        cudaMemcpyAsync(g->d_mask, g->h_mask, (size_t)last * g->mask_words * 4, cudaMemcpyHostToDevice, s);
        pick_tokens(g, rows, 1, 1);
    }
    ft_gpu_probe_step_issued(g->probe, s);
    if (logits && rows > g->logit_rows) { /* all-position logits: lm_head in passes */
        for (int r0 = 0; r0 < rows && st == FT_OK; r0 += g->logit_rows) {
            int n = rows - r0 < g->logit_rows ? rows - r0 : g->logit_rows;
            st = head(g, g->d_rows + r0, n, T > MAX_GRAPH_T);
            cudaMemcpyAsync(g->h_logits, g->logits, (size_t)n * m->vocab * 4, cudaMemcpyDeviceToHost, s);
            if (cudaStreamSynchronize(s) != cudaSuccess) return ft_cuda_check("GPU lm_head");
            memcpy(logits + (size_t)r0 * m->vocab, g->h_logits, (size_t)n * m->vocab * 4);
        }
        if (st != FT_OK) return st;
        for (int r = 0; top1 && r < rows; r++) top1[r] = ft_argmax(logits + (size_t)r * m->vocab, m->vocab);
        logits = NULL; /* delivered */
    }
    if (logits) cudaMemcpyAsync(g->h_logits, g->logits, (size_t)rows * m->vocab * 4, cudaMemcpyDeviceToHost, s);
    if (dev_top1) cudaMemcpyAsync(g->h_top1, g->d_top1, (size_t)rows * 4, cudaMemcpyDeviceToHost, s);
    ft_gpu_moe_step_copies(g->moe, T);
    if (T <= MAX_GRAPH_T) { /* decode-sized: offloaded, under the copy watchdog */
        if ((st = ft_gpu_moe_sync(g->moe, s, T)) != FT_OK) return st;
    } else if (cudaStreamSynchronize(s) != cudaSuccess) {
        return ft_cuda_check("GPU forward");
    }
    ft_gpu_probe_step_synced(g->probe);
    if (logits) memcpy(logits, g->h_logits, (size_t)rows * m->vocab * 4);
    if (dev_top1) memcpy(top1, g->h_top1, (size_t)rows * 4);
    ft_gpu_probe_step_end(g->probe);
    if (distinct_out && m->n_experts) *distinct_out = ft_gpu_moe_distinct(g->moe, T);
    return FT_OK;
}

/* What the engine may allocate on device d: --vram-limit (at most the free memory), or the
 * free memory minus a margin, larger on WSL2, where a failed allocation through the dxg bridge
 * can stop the whole VM (mem/platform.c says why and logs it). Every buffer is allocated at
 * load, within it, and never grown while serving. */
static size_t vram_budget(const struct ft_cuda_device *d, size_t vram_limit) {
    struct ft_platform plat;
    struct ft_vram_margin vm;
    ft_platform_detect(&plat);
    ft_vram_margin(&plat, d->total_bytes, &vm);
    size_t headroom = (size_t)vm.bytes, limit = vram_limit ? vram_limit
                      : (d->free_bytes > headroom ? d->free_bytes - headroom : d->free_bytes / 2);
    return limit > d->free_bytes ? d->free_bytes : limit;
}

size_t ft_gpu_vram_budget(int device, size_t vram_limit) {
    struct ft_cuda_device d;
    if (ft_cuda_device_count() <= device || ft_cuda_device_query(device, &d) != FT_OK) return 0;
    return vram_budget(&d, vram_limit);
}

enum ft_status ft_gpu_init(struct ft_gpu **out, const struct ft_model *m,
                           const struct ft_gpu_opts *o) {
    *out = NULL;
    struct ft_cuda_device d;
    if (ft_cuda_device_count() <= o->device)
        return ft_fail(FT_ERR_UNSUPPORTED, "GPU backend: no CUDA device %d (use --backend cpu)", o->device);
    if (cudaSetDevice(o->device) != cudaSuccess) return ft_cuda_check("cudaSetDevice");
    enum ft_status st = ft_cuda_device_query(o->device, &d);
    if (st != FT_OK) return st;
    struct ft_gpu *g = calloc(1, sizeof *g);
    if (!g) return ft_fail(FT_ERR_OOM, "GPU: out of memory");
    g->m = m;
    g->o = *o;
    g->limit = vram_budget(&d, o->vram_limit);
    g->q_dim = m->n_heads * m->head_dim;
    /* MLA rows [latent | rotated key], DSA's indexer key after them */
    g->kv_dim = ft_model_kv_dim(m);
    g->max_i = m->cfg.intermediate_size > m->shared_inter ? m->cfg.intermediate_size : m->shared_inter;
    g->max_blocks = (o->max_ctx + FT_KV_BLOCK - 1) / FT_KV_BLOCK;
    g->C = o->max_chunk > MAX_GRAPH_T ? o->max_chunk : MAX_GRAPH_T;
    if (m->head_dim > 256 || (m->n_experts && m->n_experts > 1024) || m->top_k > 32) {
        free(g);
        return ft_fail(FT_ERR_UNSUPPORTED, "GPU backend: head_dim %d / %d experts / top-%d exceed "
                       "its limits (256 / 1024 / 32); use --backend cpu", m->head_dim, m->n_experts, m->top_k);
    }
    const int mla_big = m->mla && (m->mla_kv_lora > FT_CUDA_MLA_MAX_L || m->mla_nope > FT_CUDA_BGEMV_MAX_K ||
                                   m->mla_kv_lora + m->mla_rope > FT_CUDA_MLA_MAX_D);
    if (m->mla && m->dsa_topk > 0 &&
        (m->dsa_dim > FT_CUDA_DSA_MAX_DIM || m->dsa_heads > FT_CUDA_DSA_MAX_HEADS || m->dsa_heads < 1 ||
         m->mla_rope > m->dsa_dim || m->mla_rope % 2 || m->mla_q_lora <= 0)) {
        free(g);
        return ft_fail(FT_ERR_UNSUPPORTED, "GPU backend: a DSA indexer of %d heads of %d (at most %d "
                       "of %d, a q LoRA, an even rotated part within the head); use --backend cpu",
                       m->dsa_heads, m->dsa_dim, FT_CUDA_DSA_MAX_HEADS, FT_CUDA_DSA_MAX_DIM);
    }
    if (mla_big || (m->n_gdn && (m->gdn_dk > FT_CUDA_GDN_MAX_DK || m->gdn_kernel > FT_CUDA_GDN_MAX_K ||
                                 m->gdn_kernel < 1)) || (m->router_sigmoid && m->n_group > 32)) {
        free(g);
        return ft_fail(FT_ERR_UNSUPPORTED, "GPU backend: %s (use --backend cpu)",
                       mla_big ? "an MLA latent over 512 or q-k heads over 512 wide"
                       : m->n_gdn ? "DeltaNet key heads wider than 128 or a conv kernel over 8"
                                  : "more than 32 expert groups");
    }
    g->n_slots = m->n_gdn ? (o->state_slots > 0 ? o->state_slots : 1) : 0;
    g->L = calloc((size_t)m->n_layers, sizeof *g->L);
    if (!g->L || cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking) != cudaSuccess) {
        free(g->L);
        free(g);
        return ft_fail(FT_ERR_CUDA, "GPU: cannot create a stream");
    }
    st = ft_gpu_probe_init(&g->probe);
    if (st == FT_OK) st = ft_blas_init(&g->blas, g->s);
    if (st == FT_OK) st = upload(g);
    if (st == FT_OK && g->load_check)
        ft_log_info("GPU upload check: %ld weights matched their host checksums (%ld copied again, "
                    "%ld off the 8-byte grid unchecked)", g->up_checked, g->up_repaired, g->up_unchecked);
    if (st == FT_OK) st = alloc_scratch(g);
    if (st == FT_OK && o->offload) {
        size_t headroom = (size_t)256 << 20, left = g->limit > g->used + headroom ? g->limit - g->used - headroom : 0;
        struct ft_offload_opts oo = {o->device, o->cache_slots, o->cache_rate, o->verify, o->copy_path,
                                     o->moe_mode, o->pin_budget, o->cpu_layers, o->cache_policy,
                                     o->record_routing, o->hot_set, o_prefetch(g), o->pred_noise};
        st = ft_gpu_moe_offload(g->moe, &oo, left, o->cpu_threads, o->cpu_act_fast);
    }
    if (st != FT_OK) {
        ft_gpu_free(g);
        return st;
    }
    ft_log_info("GPU %s (sm_%d%d, %d SMs): %.1f of %.1f GiB free; engine allocated %.2f GiB "
                "(limit %.1f GiB), decode graphs %s", d.name, d.cc_major, d.cc_minor, d.n_sms,
                d.free_bytes / 1073741824.0, d.total_bytes / 1073741824.0, g->used / 1073741824.0,
                g->limit / 1073741824.0, o->graphs ? "on" : "off");
#ifdef FT_TESTING
    g->alloc_fault = ft_env_int(FT_ENV_TEST_ALLOC_FAULT, 0);
#endif
    g->loaded = 1; /* from here on an allocation can fail a step, never the load */
    *out = g;
    return FT_OK;
}

static void dfree(void *p) {
    if (p) cudaFree(p);
}

void ft_gpu_free(struct ft_gpu *g) {
    if (!g) return;
    cudaDeviceSynchronize();
    ft_gpu_probe_free(g->probe); /* its report first */
    ft_gpu_moe_free(g->moe); /* the offload report, then its buffers */
    dfree(g->d_zipf_cdf), dfree(g->d_sticky), dfree(g->d_synth_stats);
    for (int a = 0; a < 3; a++)
        for (int t = 0; t <= MAX_GRAPH_T; t++)
            if (g->graph[a][t]) cudaGraphExecDestroy(g->graph[a][t]);
    for (size_t i = 0; g->span_graph && i < span_keys(g); i++)
        if (g->span_graph[i]) cudaGraphExecDestroy(g->span_graph[i]);
    free(g->span_graph), free(g->span_seen), free(g->span_end);
    for (int l = 0; g->L && l < g->m->n_layers; l++) {
        struct gpu_layer *L = &g->L[l];
        void *ps[] = {L->attn_norm, L->ffn_norm, L->q_norm, L->k_norm, L->bq, L->bk, L->bv, L->bo,
                      L->wqkv, L->wo, L->w_gu, L->w_down, L->router, L->ex.gu, L->ex.down, L->sh_gu,
                      L->sh_down, L->sh_score, L->sinks, L->router_b, L->ex.gu_b, L->ex.dn_b, L->wgate,
                      L->score_bias, L->wgdn, L->gdn_out, L->gdn_conv, L->gdn_A, L->gdn_dt, L->gdn_norm,
                      L->q_a, L->q_b, L->kv_a, L->uk, L->uv, L->q_a_norm, L->kv_a_norm, L->bq_a, L->bkv_a,
                      L->ix_wq, L->ix_wkw, L->ix_kn, L->ix_kb};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) dfree(ps[i]);
    }
    if (g->lm_head != g->embed) dfree(g->lm_head);
    void *ds[] = {g->embed, g->final_norm, g->inv_freq, g->k_cache, g->v_cache, g->d_in, g->d_top1, g->d_draw,
                  g->d_step, g->x, g->xn,
                  g->q, g->k, g->v, g->att, g->y, g->gu, g->act, g->router, g->topw, g->xl,
                  g->logits, g->sh, g->score, g->xn16, g->att16, g->act16, g->xl16, g->topk,
                  g->att_part, g->d_att_tiles, g->gp, g->gate, g->d_state,
                  g->m_qa, g->m_qa16, g->m_kva, g->m_ql, g->m_lat, g->router_pred, g->d_sum,
                  g->ix_q, g->ix_kw, g->ix_score, g->ix_sel, g->ix_n};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) dfree(ds[i]);
    void *hs[] = {g->h_in, g->h_top1, g->h_draw, g->h_logits, g->h_att_tiles}; /* (pin.h's) */
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) ft_cuda_free_host(hs[i]);
    ft_blas_free(g->blas);
    if (g->s) cudaStreamDestroy(g->s);
    free(g->L);
    free(g);
    /* an error a teardown call left must not fail the next engine's first check */
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) ft_log_warn("GPU engine teardown: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
}

double ft_gpu_hbm_gbps(void) { return ft_cuda_d2d_gbps((size_t)2 << 30, 5); }

void ft_gpu_offload_stats(const struct ft_gpu *g, struct ft_gpu_offload_stats *out) {
    ft_gpu_moe_offload_stats(g ? g->moe : NULL, out);
}

int ft_gpu_residency_stats(const struct ft_gpu *g, struct ft_residency_stats *out) {
    return ft_gpu_moe_residency_stats(g ? g->moe : NULL, out);
}

size_t ft_gpu_vram_used(const struct ft_gpu *g) { return g ? g->used : 0; }
int ft_gpu_takes_experts(enum ft_dtype t) { return gpu_expert_dtype(t); }

#else /* no CUDA in this build */

#include "core/status.h"

int ft_gpu_available(void) { return 0; }
int ft_gpu_takes_experts(enum ft_dtype t) { return (void)t, 1; } /* ft_gpu_init refuses */
enum ft_status ft_gpu_init(struct ft_gpu **out, const struct ft_model *m,
                           const struct ft_gpu_opts *o) {
    (void)m, (void)o;
    *out = NULL;
    return ft_fail(FT_ERR_UNSUPPORTED, "this build has no CUDA backend (rebuild with nvcc on PATH, "
                   "or use --backend cpu)");
}
void ft_gpu_free(struct ft_gpu *g) { (void)g; }
enum ft_status ft_gpu_forward(struct ft_gpu *g, const struct ft_seg *segs, int n_segs,
                              const int *slots, float *logits, int32_t *top1,
                              const struct ft_draw *draws, const struct ft_draw_masks *masks,
                              double *distinct_out) {
    (void)g, (void)segs, (void)n_segs, (void)slots, (void)logits, (void)top1, (void)draws, (void)distinct_out;
    return ft_fail(FT_ERR_UNSUPPORTED, "no CUDA backend in this build");
}
enum ft_status ft_gpu_row_logits(struct ft_gpu *g, int r, float *out) {
    (void)g, (void)r, (void)out;
    return ft_fail(FT_ERR_UNSUPPORTED, "no CUDA backend in this build");
}
enum ft_status ft_gpu_state_read(struct ft_gpu *g, int slot, float *out) {
    (void)g, (void)slot, (void)out;
    return ft_fail(FT_ERR_UNSUPPORTED, "no CUDA backend in this build");
}
enum ft_status ft_gpu_state_write(struct ft_gpu *g, int slot, const float *in) {
    (void)g, (void)slot, (void)in;
    return ft_fail(FT_ERR_UNSUPPORTED, "no CUDA backend in this build");
}
double ft_gpu_hbm_gbps(void) { return 0.0; }
size_t ft_gpu_vram_budget(int device, size_t vram_limit) { return (void)device, (void)vram_limit, 0; }
void ft_gpu_offload_stats(const struct ft_gpu *g, struct ft_gpu_offload_stats *out) {
    (void)g;
    memset(out, 0, sizeof *out);
}
int ft_gpu_residency_stats(const struct ft_gpu *g, struct ft_residency_stats *out) {
    (void)g, (void)out;
    return 0;
}
size_t ft_gpu_vram_used(const struct ft_gpu *g) { (void)g; return 0; }

#endif
