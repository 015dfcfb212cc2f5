/* gpu_moe.c — the GPU half of a MoE block (see gpu_moe.h). */
#include "moe/gpu_moe.h"

#ifdef FT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/pin.h"
#include "backend/cuda/probe.h"
#include "core/log.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "mem/residency.h"
#include "model/model.h"
#include "moe/policy.h"
#include "moe/cpu_exec.h"

#define MAX_T FT_GPU_MOE_MAX_T
#define DEQ_CHUNK 16 /* experts per chunk when experts the GEMM cannot read are dequantised */

struct ft_gpu_moe {
    const struct ft_model *m;
    struct ft_gpu_moe_io io;
    struct ft_gpu_alloc alloc;
    cudaStream_t s;
    struct ft_gpu_probe *probe;
    int C, rounded; /* rounded: the CPU executor's and the block GEMVs' activations rounded */
    /* decode: each layer's ids [MAX_T * k], on the device and (pinned) on the host */
    int32_t *d_ids, *h_ids;
    /* prefill: the sorted rows, their expert outputs, the routing counts per layer */
    float *mgu, *mact, *my;
    uint16_t *xg16, *mact16;
    /* the int8 grouped GEMM's inputs (rounded, experts in its formats): the sorted rows' codes
     * [R, H] and the activations' [R, I], with their per-32 scales and sums */
    int8_t *xq, *aq;
    void *xqd, *aqd;
    uint16_t *deq;          /* block-format experts: DEQ_CHUNK of them dequantised */
    int32_t *chunk_slot_of; /* [E] the grouped GEMM's map onto deq */
    int32_t *rtok, *pair_dst, *offsets, *d_counts, *h_counts;
    /* offloading: the expert cache, slot lists, and the CPU executor's side */
    struct ft_offload *off;
    int32_t *d_slots, *d_slot_of;
    struct ft_moe_exec *exec;
    struct ft_pool *exec_pool;          /* its workers: one per physical core, pinned */
    float *h_xn, *h_topw, *h_cpu_out, *d_cpu_out; /* pinned [MAX_T, H] / [MAX_T * k]; device */
    /* the device's views of h_ids, h_xn, h_topw, h_cpu_out (mapped pinned memory; NULL: not
     * mapped): the spans' kernels read and write them directly */
    int32_t *m_ids;
    float *m_xn, *m_topw, *m_cpu_out;
    int *cpu_pairs, *cpu_tok, *cpu_ids;
    float *cpu_w;
    /* next-layer prefetch (offloading, opts.prefetch > 0): the ids and weights predicted for
     * the next MoE layer [MAX_T * k], on the device and (ids, pinned) on the host */
    int32_t *d_pred, *h_pred;
    float *d_predw;
    int *next_moe;          /* [L] the next MoE layer after l, or -1 */
};

static void *dalloc(struct ft_gpu_moe *gm, size_t bytes, enum ft_status *st) {
    if (*st != FT_OK) return NULL;
    void *p = gm->alloc.dev(gm->alloc.ctx, bytes);
    if (!p) *st = FT_ERR_OOM; /* the allocator said why */
    return p;
}

static void dfree(void *p) {
    if (p) cudaFree(p);
}

enum ft_status ft_gpu_moe_init(struct ft_gpu_moe **out, const struct ft_model *m, int C, int rounded,
                               const struct ft_gpu_moe_io *io, const struct ft_gpu_alloc *alloc,
                               cudaStream_t s, struct ft_gpu_probe *probe) {
    *out = NULL;
    struct ft_gpu_moe *gm = calloc(1, sizeof *gm);
    if (!gm) return ft_fail(FT_ERR_OOM, "GPU MoE: out of memory");
    gm->m = m, gm->io = *io, gm->alloc = *alloc, gm->s = s, gm->probe = probe, gm->C = C;
    gm->rounded = rounded;
    enum ft_status st = FT_OK;
    size_t k = m->top_k > 0 ? m->top_k : 1, E = m->n_experts, H = m->hidden, I = m->expert_inter;
    size_t R = (size_t)C * k, ids = (size_t)m->n_layers * MAX_T * k;
    gm->d_ids = dalloc(gm, ids * 4, &st);
    gm->h_ids = ft_cuda_staging_alloc(ids * 4, &st);
    if (E) {
        gm->mgu = dalloc(gm, R * 2 * I * 4, &st);
        gm->mact = dalloc(gm, R * I * 4, &st);
        gm->mact16 = dalloc(gm, R * I * 2, &st);
        gm->my = dalloc(gm, R * H * 4, &st);
        gm->xg16 = dalloc(gm, R * H * 2, &st);
        gm->rtok = dalloc(gm, R * 4, &st);
        gm->pair_dst = dalloc(gm, R * 4, &st);
        gm->offsets = dalloc(gm, ft_cuda_moe_offsets_len((int)E, (int)R) * 4, &st);
        gm->d_counts = dalloc(gm, (size_t)m->n_layers * E * 4, &st);
        gm->h_counts = ft_cuda_staging_alloc((size_t)m->n_layers * E * 4, &st);
        int chunked = 0, int8 = 0; /* experts the GEMM cannot read: prefill dequantises chunks */
        for (int l = 0; l < m->n_layers; l++) {
            if (!m->layers[l].is_moe) continue;
            int gu = m->layers[l].bank[0].schema->dtype, dn = m->layers[l].bank[1].schema->dtype;
            chunked |= !ft_cuda_moe_gemm_takes(gu, H) || !ft_cuda_moe_gemm_takes(dn, I);
            int8 |= rounded && (ft_cuda_moe_gemm_q8_takes(gu, H, NULL, 0) ||
                                ft_cuda_moe_gemm_q8_takes(dn, I, NULL, 0));
        }
        if (int8) {
            gm->xq = dalloc(gm, R * H, &st), gm->xqd = dalloc(gm, R * H / 4, &st);
            gm->aq = dalloc(gm, R * I, &st), gm->aqd = dalloc(gm, R * I / 4, &st);
        }
        if (chunked) {
            gm->deq = dalloc(gm, (size_t)DEQ_CHUNK * 2 * I * H * 2, &st);
            gm->chunk_slot_of = dalloc(gm, E * 4, &st);
        }
    }
    *out = gm; /* even on failure: ft_gpu_moe_free releases what was allocated */
    return st;
}

enum ft_status ft_gpu_moe_offload(struct ft_gpu_moe *gm, const struct ft_offload_opts *o,
                                  size_t vram_left, int cpu_threads, int cpu_act_fast) {
    const struct ft_model *m = gm->m;
    const int k = m->top_k > 0 ? m->top_k : 1, R = MAX_T * k, H = m->hidden;
    enum ft_status st = FT_OK;
    gm->d_slots = dalloc(gm, (size_t)2 * R * 4, &st); /* decode: two lists */
    gm->d_slot_of = dalloc(gm, (size_t)(m->n_experts > 0 ? m->n_experts : 1) * 4, &st);
    if (st == FT_OK) st = ft_offload_init(&gm->off, m, o, vram_left, R, gm->alloc.dev, gm->alloc.ctx);
    if (st == FT_OK && (o->moe_mode != FT_MOE_OFFLOAD || ft_offload_has_cpu_layers(gm->off))) {
        /* the CPU executor's side (cpu / hybrid, and the residency manager's CPU layers) */
        st = ft_pool_init_pinned(&gm->exec_pool, cpu_threads);
        if (st == FT_OK) st = ft_moe_exec_init(&gm->exec, MAX_T, m->top_k, m->n_experts, H, m->expert_inter);
        if (st == FT_OK) ft_moe_exec_set_fast_act(gm->exec, cpu_act_fast);
        if (st == FT_OK) ft_moe_exec_set_watchdog(gm->exec, 1); /* a hung step: cpu_experts */
        gm->h_xn = ft_cuda_staging_alloc((size_t)MAX_T * H * 4, &st);
        gm->h_cpu_out = ft_cuda_staging_alloc((size_t)MAX_T * H * 4, &st);
        gm->h_topw = ft_cuda_staging_alloc((size_t)R * 4, &st);
        gm->d_cpu_out = dalloc(gm, (size_t)MAX_T * H * 4, &st);
        if (st == FT_OK) {
            void *p[3] = {NULL, NULL, NULL};
            if (cudaHostGetDevicePointer(&p[0], gm->h_xn, 0) == cudaSuccess &&
                cudaHostGetDevicePointer(&p[1], gm->h_topw, 0) == cudaSuccess &&
                cudaHostGetDevicePointer(&p[2], gm->h_cpu_out, 0) == cudaSuccess)
                gm->m_xn = p[0], gm->m_topw = p[1], gm->m_cpu_out = p[2];
            cudaGetLastError();
        }
        gm->cpu_pairs = malloc((size_t)R * sizeof *gm->cpu_pairs);
        gm->cpu_tok = malloc((size_t)R * sizeof *gm->cpu_tok);
        gm->cpu_ids = malloc((size_t)R * sizeof *gm->cpu_ids);
        gm->cpu_w = malloc((size_t)R * sizeof *gm->cpu_w);
        if (st == FT_OK && (!gm->cpu_pairs || !gm->cpu_tok || !gm->cpu_ids || !gm->cpu_w))
            st = ft_fail(FT_ERR_OOM, "offload: out of memory");
    }
    if (st == FT_OK && o->prefetch > 0) {
        gm->d_pred = dalloc(gm, (size_t)R * 4, &st);
        gm->d_predw = dalloc(gm, (size_t)R * 4, &st);
        gm->h_pred = ft_cuda_staging_alloc((size_t)R * 4, &st);
        if (st == FT_OK && !(gm->next_moe = malloc((size_t)m->n_layers * sizeof *gm->next_moe)))
            st = ft_fail(FT_ERR_OOM, "offload: out of memory");
        for (int l = m->n_layers - 1, nx = -1; st == FT_OK && l >= 0; l--) {
            gm->next_moe[l] = nx;
            if (m->layers[l].is_moe) nx = l;
        }
    }
    void *p = NULL; /* the router's ids straight into host memory, with the rest mapped */
    if (st == FT_OK && (!gm->exec || gm->m_xn) && cudaHostGetDevicePointer(&p, gm->h_ids, 0) == cudaSuccess)
        gm->m_ids = p;
    cudaGetLastError();
    return st;
}

void ft_gpu_moe_free(struct ft_gpu_moe *gm) {
    if (!gm) return;
    if (gm->off) {
        struct ft_gpu_offload_stats os;
        ft_offload_get_stats(gm->off, &os);
        ft_log_info("offload: %ld expert copies (%ld staged), %ld misses computed on the CPU, hit "
                    "rate %.1f%%, copies at %.1f GB/s (PCIe probe %.1f GB/s), %ld verification "
                    "mismatches repaired", os.copies, os.staged, os.cpu_experts, 100 * os.hit_rate,
                    os.copy_gbps, os.pcie_gbps, os.repaired);
        ft_offload_free(gm->off);
    }
    ft_moe_exec_free(gm->exec);
    ft_pool_free(gm->exec_pool);
    void *ds[] = {gm->d_ids, gm->mgu, gm->mact, gm->my, gm->xg16, gm->mact16, gm->deq,
                  gm->xq, gm->xqd, gm->aq, gm->aqd,
                  gm->chunk_slot_of, gm->rtok, gm->pair_dst, gm->offsets, gm->d_counts,
                  gm->d_slots, gm->d_slot_of, gm->d_cpu_out, gm->d_pred, gm->d_predw};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) dfree(ds[i]);
    void *hs[] = {gm->h_ids, gm->h_counts, gm->h_xn, gm->h_topw, gm->h_cpu_out, gm->h_pred};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) ft_cuda_free_host(hs[i]);
    free(gm->next_moe);
    free(gm->cpu_pairs), free(gm->cpu_tok), free(gm->cpu_ids), free(gm->cpu_w);
    free(gm);
}

int ft_gpu_moe_offloading(const struct ft_gpu_moe *gm) { return gm && gm->off; }

/* Marks the end of an op group (FT_PROFILE=2 only). */
static inline void prof_mark(struct ft_gpu_moe *gm, enum ft_probe_op op) {
    if (gm->probe) ft_gpu_probe_op(gm->probe, op, gm->s);
}

/* y = the grouped GEMM of the sorted rows x against one family of experts (w: the layer's
 * device bank, or with slot_of the offload slots, expert_stride bytes apart, format dt). The
 * GEMM reads bf16 and the block formats directly; the rest (NVFP4/FP8 rows of widths not a
 * multiple of 8) go through bf16 scratch a chunk of experts at a time. */
static void expert_gemm(struct ft_gpu_moe *gm, float *y, const uint16_t *x, const void *w, int dt,
                        size_t expert_stride, const int32_t *slot_of, int N, int K, int R) {
    int E = gm->m->n_experts;
    cudaStream_t s = gm->s;
    if (ft_cuda_moe_gemm_takes(dt, K)) {
        ft_cuda_moe_gemm_q(y, x, w, dt, expert_stride, gm->offsets, slot_of, E, N, K, R, s);
        return;
    }
    for (int e0 = 0; e0 < E; e0 += DEQ_CHUNK) {
        int n = E - e0 < DEQ_CHUNK ? E - e0 : DEQ_CHUNK;
        ft_cuda_chunk_slots(gm->chunk_slot_of, slot_of, e0, n, E, s);
        ft_cuda_dequant_experts(gm->deq, w, expert_stride, dt, slot_of, gm->offsets, e0, n, N, K, s);
        ft_cuda_moe_gemm(y, x, gm->deq, gm->offsets, gm->chunk_slot_of, (size_t)N * K, E, N, K, R, s);
    }
}

/* y[p] = the decode GEMV of expert ids[p] (bf16 or a block format), expert_stride bytes apart */
static void expert_gemv(struct ft_gpu_moe *gm, float *y, const float *x, int x_div, const void *w,
                        int dt, size_t expert_stride, const int32_t *ids, int P, int N, int K) {
    if (dt == FT_DTYPE_BF16)
        ft_cuda_moe_gemv(y, x, x_div, w, expert_stride / 2, ids, P, N, K, gm->s);
    else
        ft_cuda_moe_gemv_blocks(y, x, x_div, w, expert_stride, dt, ids, P, N, K, gm->rounded, gm->s);
}

/* Bytes between experts of layer l's family fam on the device: the bank rows when resident,
 * the slot pitch when offloading. */
static size_t expert_stride(const struct ft_gpu_moe *gm, int l, int fam) {
    if (gm->off) return ft_offload_slot_bytes(gm->off, fam);
    return gm->m->layers[l].bank[fam].row_bytes;
}

/* The experts' activation on [rows, 2I] gate/up rows (the layer's enum ft_swiglu mode). */
static void expert_act(struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, float *out,
                       const float *gu, int rows, int I) {
    ft_cuda_swiglu(out, gu, rows, I, X->act_mode, X->act_limit, X->act_alpha, gm->s);
}

/* --- prefill --- */

/* Family fam's (0 gate_up, 1 down) expert matrices in prefill: the layer's device bank, or the
 * offload slots. */
static const void *family_w(const struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, int fam) {
    if (gm->off) return fam ? ft_offload_down(gm->off) : ft_offload_gu(gm->off);
    return fam ? X->down : X->gu;
}

/* 1 when family fam of layer l's experts X goes through the int8 grouped GEMM: activations
 * rounded, and a format, width and alignment it takes. */
static int int8_gemm(const struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, int l, int fam) {
    if (!gm->xq) return 0;
    const void *w = family_w(gm, X, fam);
    const int K = fam ? gm->m->expert_inter : gm->m->hidden;
    return ft_cuda_moe_gemm_q8_takes(fam ? X->dn_dt : X->gu_dt, K, w, expert_stride(gm, l, fam));
}

struct prefill_batch {
    struct ft_gpu_moe *gm;
    const struct ft_gpu_experts *X;
    int T, l;
};

/* One batch of experts (offload) or all of them (resident): gate_up, activation, down. */
static enum ft_status prefill_batch(void *ctx, int first, int last) {
    struct prefill_batch *pb = ctx;
    struct ft_gpu_moe *gm = pb->gm;
    const struct ft_gpu_experts *X = pb->X;
    const struct ft_model *m = gm->m;
    int k = m->top_k, H = m->hidden, I = m->expert_inter, R = pb->T * k, E = m->n_experts;
    cudaStream_t s = gm->s;
    (void)first, (void)last;
    const void *gu = family_w(gm, X, 0), *dn = family_w(gm, X, 1);
    const int32_t *slot_of = gm->off ? gm->d_slot_of : NULL;
    if (int8_gemm(gm, X, pb->l, 0))
        ft_cuda_moe_gemm_q8(gm->mgu, gm->xq, gm->xqd, gu, X->gu_dt, expert_stride(gm, pb->l, 0), gm->offsets,
                            slot_of, E, 2 * I, H, R, s);
    else
        expert_gemm(gm, gm->mgu, gm->xg16, gu, X->gu_dt, expert_stride(gm, pb->l, 0), slot_of, 2 * I, H, R);
    if (X->gu_b) ft_cuda_moe_add_bias_sorted(gm->mgu, X->gu_b, gm->offsets, slot_of, E, R, 2 * I, s);
    expert_act(gm, X, gm->mact, gm->mgu, R, I); /* rows of later batches are redone with them */
    if (int8_gemm(gm, X, pb->l, 1)) {
        ft_cuda_moe_quant(gm->aq, gm->aqd, gm->mact, NULL, R, I, s);
        ft_cuda_moe_gemm_q8(gm->my, gm->aq, gm->aqd, dn, X->dn_dt, expert_stride(gm, pb->l, 1), gm->offsets,
                            slot_of, E, H, I, R, s);
    } else {
        ft_cuda_to_bf16(gm->mact16, gm->mact, (size_t)R * I, s);
        expert_gemm(gm, gm->my, gm->mact16, dn, X->dn_dt, expert_stride(gm, pb->l, 1), slot_of, H, I, R);
    }
    if (X->dn_b) ft_cuda_moe_add_bias_sorted(gm->my, X->dn_b, gm->offsets, slot_of, E, R, H, s);
    return FT_OK;
}

/* The routing sort on the device, then one tensor-core GEMM launch per projection (offloaded:
 * per batch of experts that fits the slot pool), then the weighted unsort into y. */
enum ft_status ft_gpu_moe_prefill(struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, int l, int T) {
    const struct ft_model *m = gm->m;
    int E = m->n_experts, k = m->top_k, H = m->hidden, R = T * k;
    cudaStream_t s = gm->s;
    int32_t *counts = gm->d_counts + (size_t)l * E;
    ft_cuda_moe_sort(counts, gm->offsets, gm->rtok, gm->pair_dst, gm->io.topk, T, k, E, s);
    if (int8_gemm(gm, X, l, 0)) ft_cuda_moe_quant(gm->xq, gm->xqd, gm->io.xn, gm->rtok, R, H, s);
    else ft_cuda_gather_bf16(gm->xg16, gm->io.xn16, gm->rtok, R, H, s);
    prof_mark(gm, FT_OP_SORT);
    struct prefill_batch pb = {gm, X, T, l};
    enum ft_status st = FT_OK;
    if (!gm->off) {
        st = prefill_batch(&pb, 0, E);
    } else {
        int32_t *hc = gm->h_counts + (size_t)l * E, experts[E], n = 0;
        cudaMemcpyAsync(hc, counts, (size_t)E * 4, cudaMemcpyDeviceToHost, s);
        if (cudaStreamSynchronize(s) != cudaSuccess) return ft_cuda_check("MoE routing counts");
        for (int e = 0; e < E; e++)
            if (hc[e]) experts[n++] = e;
        st = ft_offload_prefill(gm->off, l, experts, n, gm->d_slot_of, s, prefill_batch, &pb);
    }
    if (st == FT_OK) ft_cuda_moe_unsort(gm->io.y, gm->my, gm->pair_dst, gm->io.topw, T, k, H, s);
    prof_mark(gm, FT_OP_EXPERTS);
    return st;
}

void ft_gpu_moe_prefill_end(struct ft_gpu_moe *gm) {
    if (gm->off) ft_offload_prefill_end(gm->off, gm->s);
}

/* --- decode --- */

int32_t *ft_gpu_moe_ids(struct ft_gpu_moe *gm, int l) {
    return gm->d_ids + (size_t)l * MAX_T * gm->m->top_k;
}

static const int32_t *host_ids(const struct ft_gpu_moe *gm, int l) {
    return gm->h_ids + (size_t)l * MAX_T * gm->m->top_k;
}

int ft_gpu_moe_next_predicted(const struct ft_gpu_moe *gm, int l, int32_t **ids, float **w) {
    if (!gm->d_pred || gm->next_moe[l] < 0) return -1;
    *ids = gm->d_pred, *w = gm->d_predw;
    return gm->next_moe[l];
}

void ft_gpu_moe_stage(struct ft_gpu_moe *gm, int l, int T) {
    if (!gm->off) return;
    const int k = gm->m->top_k, H = gm->m->hidden;
    const size_t ko = (size_t)l * MAX_T * k;
    cudaStream_t s = gm->s;
    if (gm->d_pred && gm->next_moe[l] >= 0) /* the next layer's predicted ids, for its prefetch */
        cudaMemcpyAsync(gm->h_pred, gm->d_pred, (size_t)T * k * 4, cudaMemcpyDeviceToHost, s);
    if (gm->m_ids) { /* the router's results written into host memory */
        ft_cuda_stage_out(gm->m_ids + ko, gm->d_ids + ko, gm->exec ? gm->m_topw : NULL, gm->io.topw,
                          T * k, gm->exec ? gm->m_xn : NULL, gm->io.xn, gm->exec ? T * H : 0, NULL,
                          NULL, s);
        return;
    } /* the router's ids come back; misses are copied into cache slots */
    cudaMemcpyAsync(gm->h_ids + ko, gm->d_ids + ko, (size_t)T * k * 4, cudaMemcpyDeviceToHost, s);
    if (gm->exec) { /* the CPU executor needs the normalised rows and the weights */
        cudaMemcpyAsync(gm->h_xn, gm->io.xn, (size_t)T * H * sizeof(float), cudaMemcpyDeviceToHost, s);
        cudaMemcpyAsync(gm->h_topw, gm->io.topw, (size_t)T * k * sizeof(float), cudaMemcpyDeviceToHost, s);
    }
}

/* The GPU's share of a decode layer's routed experts into my: the experts at ids (slots when
 * offloading; -1: a CPU pair, 0; -2: another launch's pair, left alone; eids: their expert ids,
 * for the biases). */
static void gpu_experts(struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, int l, int T,
                        const int32_t *ids, const int32_t *eids, const void *gu, const void *dn) {
    int k = gm->m->top_k, H = gm->m->hidden, I = gm->m->expert_inter;
    cudaStream_t s = gm->s;
    expert_gemv(gm, gm->mgu, gm->io.xn, k, gu, X->gu_dt, expert_stride(gm, l, 0), ids, T * k, 2 * I, H);
    if (X->gu_b) ft_cuda_moe_add_bias(gm->mgu, X->gu_b, eids, ids, T * k, 2 * I, s);
    expert_act(gm, X, gm->mact, gm->mgu, T * k, I);
    expert_gemv(gm, gm->my, gm->mact, 1, dn, X->dn_dt, expert_stride(gm, l, 1), ids, T * k, H, I);
    if (X->dn_b) ft_cuda_moe_add_bias(gm->my, X->dn_b, eids, ids, T * k, H, s);
}

/* x += the routed experts in my, weighted */
static void combine(struct ft_gpu_moe *gm, int T) {
    ft_cuda_moe_combine(gm->io.x, gm->my, gm->io.topw, T, gm->m->top_k, gm->m->hidden, 1, gm->s);
}

/* An offloaded layer step's GPU side after its plan: the experts already resident at once,
 * the copies of the fetched ones, then those experts behind the copies. The fetched are
 * ~1-2 of 8 in a hybrid step at 30G, so most of the GPU's expert time no longer waits for
 * (and follows) the copies. */
static enum ft_status offload_experts(struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, int l,
                                      int T, const int32_t *eids) {
    const void *gu = ft_offload_gu(gm->off), *dn = ft_offload_down(gm->off);
    int n = T * gm->m->top_k;
    int nf = ft_offload_decode_slots(gm->off, gm->d_slots, gm->s);
    gpu_experts(gm, X, l, T, gm->d_slots, eids, gu, dn);
    enum ft_status st = ft_offload_decode_copies(gm->off, gm->s);
    if (st != FT_OK) return st;
    if (ft_offload_decode_deferred(gm->off)) return FT_OK; /* the rest in finish_deferred */
    if (nf) gpu_experts(gm, X, l, T, gm->d_slots + n, eids, gu, dn);
    combine(gm, T);
    if (nf) ft_offload_decode_done(gm->off, gm->s);
    /* the link is free until the next layer's copies: its predicted misses go now */
    if (gm->d_pred && gm->next_moe[l] >= 0)
        return ft_offload_decode_prefetch(gm->off, gm->next_moe[l], gm->h_pred, n);
    return FT_OK;
}

/* A staged layer's copies went to the stager thread (moe/offload.c) while the CPU computed its
 * share: wait for them, then the fetched experts and the weighted sum. */
static enum ft_status finish_deferred(struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, int l,
                                      int T, const int32_t *eids) {
    if (!ft_offload_decode_deferred(gm->off)) return FT_OK;
    enum ft_status st = ft_offload_decode_finish(gm->off, gm->s);
    if (st != FT_OK) return st;
    gpu_experts(gm, X, l, T, gm->d_slots + T * gm->m->top_k, eids, ft_offload_gu(gm->off),
                ft_offload_down(gm->off));
    combine(gm, T);
    ft_offload_decode_done(gm->off, gm->s);
    return FT_OK;
}

/* A cpu/hybrid layer step issues its copies and GPU expert launches from inside the CPU
 * executor's gate/up pass (the engine thread is the pool's worker 0; the other workers start on
 * the CPU experts at once) instead of before it: issuing first put ~60 us of launches in front
 * of the CPU's share of every layer step. */
struct issue_hook {
    struct ft_gpu_moe *gm;
    const struct ft_gpu_experts *X;
    int l, T, ran;
    const int32_t *eids;
    enum ft_status st;
};

static void issue_hook(void *ctx) {
    struct issue_hook *h = ctx;
    h->ran = 1;
    h->st = offload_experts(h->gm, h->X, h->l, h->T, h->eids);
}

/* The CPU's share of layer l's routed experts (the pairs the plan left to it), computed from
 * the host banks while the GPU runs its share, which is issued from inside the executor. */
static enum ft_status cpu_experts(struct ft_gpu_moe *gm, int l, int n_cpu, struct issue_hook *hook) {
    const struct ft_model *m = gm->m;
    const int k = m->top_k;
    const int32_t *ids = host_ids(gm, l);
    int64_t t0 = ft_time_us();
    for (int i = 0; i < n_cpu; i++) {
        int p = gm->cpu_pairs[i];
        gm->cpu_tok[i] = p / k, gm->cpu_ids[i] = ids[p], gm->cpu_w[i] = gm->h_topw[p];
    }
    ft_moe_exec_set_hook(gm->exec, issue_hook, hook);
    int nd = ft_moe_exec_run_pairs(gm->exec, gm->exec_pool, &m->layers[l].bank[FT_BANK_GATE_UP],
                                   &m->layers[l].bank[FT_BANK_DOWN], &m->layers[l].act, gm->h_xn,
                                   gm->cpu_tok, gm->cpu_ids, gm->cpu_w, n_cpu, gm->h_cpu_out);
    if (!hook->ran) issue_hook(hook); /* the executor had no pass to run it in */
    if (nd < 0) { /* the watchdog abandoned the step, or a worker of an abandoned one is still
                     stuck (ft_error says which): the GPU's share is finished (the cache's
                     deferred copies closed) and nothing of this step is in flight when its
                     requests fail */
        if (hook->st == FT_OK) finish_deferred(gm, hook->X, l, hook->T, hook->eids);
        cudaStreamSynchronize(gm->s);
        return FT_ERR_BUSY;
    }
    if (hook->st != FT_OK) return hook->st;
    const double cpu_s = (ft_time_us() - t0) / 1e6;
    enum ft_status st = finish_deferred(gm, hook->X, l, hook->T, hook->eids);
    if (st != FT_OK) return st;
    ft_offload_observe_cpu(gm->off, l, nd, cpu_s);
    return FT_OK;
}

enum ft_status ft_gpu_moe_decode(struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, int l, int T) {
    const int32_t *eids = ft_gpu_moe_ids(gm, l);
    if (!gm->off) {
        gpu_experts(gm, X, l, T, eids, eids, X->gu, X->down);
        combine(gm, T);
        return FT_OK;
    }
    ft_gpu_probe_phase(gm->probe, FT_PH_LAUNCH);
    enum ft_status st = ft_offload_sync(gm->off, gm->s, T); /* router ids; the copy watchdog */
    if (st != FT_OK) return st;
    ft_gpu_probe_phase(gm->probe, FT_PH_WAIT);
    int n_cpu = 0;
    st = ft_offload_decode_plan(gm->off, l, host_ids(gm, l), T * gm->m->top_k, gm->cpu_pairs,
                                &n_cpu);
    if (st != FT_OK) return st;
    ft_gpu_probe_phase(gm->probe, FT_PH_PLAN);
    if (!gm->exec || !n_cpu) st = offload_experts(gm, X, l, T, eids);
    if (st == FT_OK && (!gm->exec || !n_cpu)) st = finish_deferred(gm, X, l, T, eids);
    ft_gpu_probe_phase(gm->probe, FT_PH_ISSUE);
    if (st != FT_OK) return st;
    if (gm->exec) memset(gm->h_cpu_out, 0, (size_t)T * gm->m->hidden * sizeof(float)); /* joined later */
    if (!n_cpu) return FT_OK;
    struct issue_hook hook = {gm, X, l, T, 0, eids, FT_OK};
    st = cpu_experts(gm, l, n_cpu, &hook);
    ft_gpu_probe_phase(gm->probe, FT_PH_CPU);
    return st;
}

enum ft_status ft_gpu_moe_sync(struct ft_gpu_moe *gm, cudaStream_t s, int T) {
    if (gm && gm->off) return ft_offload_sync(gm->off, s, T);
    return cudaStreamSynchronize(s) == cudaSuccess ? FT_OK : ft_cuda_check("GPU forward");
}

enum ft_status ft_gpu_moe_check(struct ft_gpu_moe *gm) {
    return gm && gm->off ? ft_offload_check(gm->off, gm->s) : FT_OK;
}

void ft_gpu_moe_join(struct ft_gpu_moe *gm, int T) {
    if (!gm->off || !gm->exec) return;
    const size_t n = (size_t)T * gm->m->hidden;
    if (gm->m_cpu_out) {
        ft_cuda_add(gm->io.x, gm->m_cpu_out, n, gm->s); /* x += CPU experts, read across PCIe */
        return;
    }
    cudaMemcpyAsync(gm->d_cpu_out, gm->h_cpu_out, n * sizeof(float), cudaMemcpyHostToDevice, gm->s);
    ft_cuda_add(gm->io.x, gm->d_cpu_out, n, gm->s); /* x += CPU experts */
}

/* --- the step's routing, for ft bench's distinct-experts count --- */

void ft_gpu_moe_step_copies(struct ft_gpu_moe *gm, int T) {
    const struct ft_model *m = gm->m;
    if (!m->n_experts) return;
    if (T <= MAX_T && !gm->off) /* offloading copied each layer's ids already */
        cudaMemcpyAsync(gm->h_ids, gm->d_ids, (size_t)m->n_layers * MAX_T * m->top_k * 4,
                        cudaMemcpyDeviceToHost, gm->s);
    if (T > MAX_T)
        cudaMemcpyAsync(gm->h_counts, gm->d_counts, (size_t)m->n_layers * m->n_experts * 4,
                        cudaMemcpyDeviceToHost, gm->s);
}

double ft_gpu_moe_distinct(const struct ft_gpu_moe *gm, int T) {
    const struct ft_model *m = gm->m;
    double distinct = 0;
    int moe = 0;
    for (int l = 0; l < m->n_layers; l++) {
        if (!m->layers[l].is_moe) continue;
        moe++;
        if (T <= MAX_T) { /* distinct ids from the copied top-k */
            const int32_t *ids = host_ids(gm, l);
            for (int i = 0; i < T * m->top_k; i++) {
                int dup = 0;
                for (int j = 0; j < i; j++) dup |= ids[j] == ids[i];
                distinct += !dup;
            }
        } else { /* experts with at least one row, from the routing counts */
            for (int e = 0; e < m->n_experts; e++) distinct += gm->h_counts[(size_t)l * m->n_experts + e] > 0;
        }
    }
    return moe ? distinct / moe : 0;
}

void ft_gpu_moe_offload_stats(const struct ft_gpu_moe *gm, struct ft_gpu_offload_stats *out) {
    memset(out, 0, sizeof *out);
    if (gm && gm->off) ft_offload_get_stats(gm->off, out);
}

int ft_gpu_moe_residency_stats(const struct ft_gpu_moe *gm, struct ft_residency_stats *out) {
    if (!gm || !gm->off || !ft_offload_residency(gm->off)) return 0;
    ft_residency_get_stats(ft_offload_residency(gm->off), out);
    return 1;
}

#endif /* FT_HAVE_CUDA */
