/* forward.c — one sequence's forward pass on the CPU backend. Activations are fp32; weights
 * are read in their checkpoint dtype. The KV cache is fp32, [L][max_ctx][n_kv*hd] for k and v.
 * Engine thread only.
 *
 * Watchdog (cpu_forward, core/watchdog.h): a step's pool jobs (the matmuls, attention, the
 * DeltaNet passes) run under the pool's watch (ft_pool_watch), each allowed max(10 s, 50x the
 * learned time of a whole step of its size class in tokens). A job past that is abandoned
 * and the rest of the step's jobs do not run. Each op returns FT_ERR_BUSY right after the
 * abandoned job (WATCHED below): a task of that job may still run, reading the job's inputs
 * and writing its outputs, so nothing of the step touches either again (no bias add, KV write
 * or norm after it). The step is logged once and fails with FT_ERR_BUSY (the scheduler fails
 * its requests: 503), and no later step starts until the stuck worker is back
 * (ft_watchdog_check), so the late task's writes land in scratch no one reads. The CPU
 * executor's steps have their own limits (moe/cpu_exec.c). FT_TESTING builds:
 * FT_TEST_POOL_STALL=K:MS[:FLOOR_MS] stalls a worker of the K-th watched job after the
 * engine's init. */
#include "engine/forward.h"
#include "engine/forward_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/sys.h"
#include "core/timer.h"
#include "core/watchdog.h"
#include "engine/gpu.h"
#include "engine/sample.h"
#include "moe/cpu_exec.h"


/* --- matmul with an output row stride, rows split over the pool --- */
struct mm_job {
    float *y;
    int ldy;
    const float *x;
    const struct ft_weight *w;
    int T;
    const void *xq; /* x quantised for w (ft_cpu_xq_quant), or NULL */
};

static void mm_task(void *ctx, int i, int n) {
    struct mm_job *j = ctx;
    long lo, hi, blocks = (j->w->rows + 7) / 8;
    ft_split(blocks, i, n, &lo, &hi);
    int n0 = (int)(lo * 8), n1 = (int)FT_MIN(hi * 8, j->w->rows);
    if (n0 >= n1) return;
    if (j->xq)
        ft_cpu_matmul_rows_xq(j->y, j->ldy, j->xq, j->w->data, j->w->dtype, j->T, n0, n1,
                              j->w->cols);
    else
        ft_cpu_matmul_rows(j->y, j->ldy, j->x, j->w->cols, j->w->data, j->w->dtype, j->T, n0, n1,
                           j->w->cols);
}

void ft_engine_mm(struct ft_engine *e, float *y, int ldy, const float *x, const struct ft_weight *w,
                  const float *bias, int T) {
    struct mm_job j = {y, ldy, x, w, T, NULL};
    if (e->xq && ft_cpu_xq_bytes(w->dtype, w->cols)) { /* --cpu-act fast */
        ft_cpu_xq_quant_pool(e->pool, w->dtype, x, w->cols, w->cols, T, e->xq);
        j.xq = e->xq;
    }
    if (ft_pool_watch_tripped(e->pool)) return; /* (a late task may still write e->xq) */
    ft_pool_run(e->pool, mm_task, &j);
    if (ft_pool_watch_tripped(e->pool)) return; /* y may still be written: left alone */
    if (bias)
        for (int t = 0; t < T; t++)
            for (int n = 0; n < w->rows; n++) y[(size_t)t * ldy + n] += bias[n];
}

#define mm ft_engine_mm

/* After a pool job of the step (mm, attention, ...): under the watch, a tripped watch means a
 * job was abandoned with a task that may still read its inputs and write its outputs, so the
 * op stops there, before it reads those outputs or writes those inputs. */
#define WATCHED(e)                                                                             \
    do {                                                                                       \
        if (ft_pool_watch_tripped((e)->pool)) return FT_ERR_BUSY;                              \
    } while (0)

void ft_zipf_sums(int E, double param, double *cum) {
    double s = param > 0 ? param : 1.0, acc = 0;
    for (int r = 1; r <= E; r++) cum[r - 1] = acc += pow(r, -s);
}

/* The expert that zipf rank r0 (0: the most likely) stands for in layer l: a per-layer
 * permutation, so layers favour different experts. */
static int zipf_expert(int r0, int l, int E) {
    return (int)(((uint64_t)r0 * 2654435761u + (uint64_t)l * 40503u) % (uint64_t)E);
}

/* One synthetic expert id: uniform, zipf(S) over a per-layer permutation, or sticky. */
static int synth_id(struct ft_engine *e, int l, int j, int E) {
    if (e->opts.routing == FT_ROUTING_ZIPF) { /* the first rank whose running sum reaches u */
        const double u = ft_rng_unit(&e->rng) * e->zipf_cum[E - 1];
        int lo = 0, hi = E; /* hi = E: none (not reached: u < the total) */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (e->zipf_cum[mid] >= u) hi = mid;
            else lo = mid + 1;
        }
        return zipf_expert(lo, l, E);
    }
    if (e->opts.routing == FT_ROUTING_STICKY) {
        int *prev = &e->sticky[l * e->m->top_k + j];
        double keep = e->opts.routing_param; /* sticky:P, 0 <= P < 1 (0 keeps none) */
        if (*prev >= 0 && ft_rng_unit(&e->rng) < keep) return *prev;
        return *prev = (int)(ft_rng_next(&e->rng) % (uint64_t)E);
    }
    return (int)(ft_rng_next(&e->rng) % (uint64_t)E);
}

/* The first expert not among ids[0..j) in rank order (zipf: the layer's permutation of ranks,
 * as synth_id maps them) or id order: what a draw falls back to after 64 duplicates. */
static int synth_unused(const int *ids, int j, int l, int E, int zipf) {
    for (int r = 0; r < E; r++) {
        int id = zipf ? zipf_expert(r, l, E) : r;
        int used = 0;
        for (int i = 0; i < j; i++) used |= ids[i] == id;
        if (!used) return id;
    }
    return 0; /* not reached: j < k <= E */
}

/* keep[g] = 1 for the n_keep groups of the highest score (ties: the lower group), else 0 */
static void keep_top_groups(const float *score, int G, int n_keep, uint8_t *keep) {
    memset(keep, 0, (size_t)G);
    for (int j = 0; j < n_keep; j++) {
        int best = -1;
        for (int g = 0; g < G; g++)
            if (!keep[g] && (best < 0 || score[g] > score[best])) best = g;
        keep[best] = 1;
    }
}

/* Router: softmax over all experts, top-k, optional renormalisation (fp32, as transformers). */
/* The sigmoid router (DeepSeek-V3 style) for token row p of router logits: scores s = sigmoid,
 * chosen by s + bias within the topk_group groups of the highest sum of their two best, the
 * weights s (not the bias) of the chosen, renormalised (norm_topk), times routed_scale. */
static void route_sigmoid(const struct ft_model *m, const float *bias, const float *p, int *ids, float *w) {
    const int E = m->n_experts, k = m->top_k, G = m->n_group, gs = E / G;
    float s[E], sel[E];
    for (int x = 0; x < E; x++) s[x] = ft_sigmoid(p[x]), sel[x] = s[x] + (bias ? bias[x] : 0.0f);
    if (G > 1) {
        float gsc[G];
        for (int g = 0; g < G; g++) {
            float a = -INFINITY, b = -INFINITY;
            for (int x = g * gs; x < (g + 1) * gs; x++) {
                if (sel[x] > a) b = a, a = sel[x];
                else if (sel[x] > b) b = sel[x];
            }
            gsc[g] = a + (gs > 1 ? b : 0.0f);
        }
        uint8_t keep[G];
        keep_top_groups(gsc, G, m->topk_group, keep);
        for (int x = 0; x < E; x++)
            if (!keep[x / gs]) sel[x] = -INFINITY;
    }
    float sum = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int x = 0; x < E; x++)
            if (sel[x] > -INFINITY && (best < 0 || sel[x] > sel[best])) best = x;
        if (best < 0) best = 0; /* not reached: topk_group groups hold at least k experts */
        ids[j] = best, w[j] = s[best], sum += s[best];
        sel[best] = -INFINITY;
    }
    for (int j = 0; j < k; j++) w[j] = (m->norm_topk ? w[j] / (sum + 1e-20f) : w[j]) * m->routed_scale;
}

/* DeepSeek-V2's group_limited_greedy on softmax scores p: the topk_group groups with the highest
 * best score kept (ties: the lower group), every other expert's score zeroed, as transformers
 * masks them before its top-k. */
static void keep_groups(const struct ft_model *m, float *p) {
    const int G = m->n_group, gs = m->n_experts / G;
    float best[G];
    uint8_t keep[G];
    for (int g = 0; g < G; g++) {
        best[g] = p[g * gs];
        for (int x = g * gs + 1; x < (g + 1) * gs; x++) best[g] = best[g] > p[x] ? best[g] : p[x];
    }
    keep_top_groups(best, G, m->topk_group, keep);
    for (int x = 0; x < m->n_experts; x++)
        if (!keep[x / gs]) p[x] = 0.0f;
}

void ft_engine_route(struct ft_engine *e, int l, int T) {
    const struct ft_model *m = e->m;
    int E = m->n_experts, k = m->top_k;
    if (m->router_sigmoid && e->opts.routing == FT_ROUTING_MODEL) {
        for (int t = 0; t < T; t++)
            route_sigmoid(m, m->layers[l].router_score_bias, e->router + (size_t)t * E,
                          e->top_ids + (size_t)t * k, e->top_w + (size_t)t * k);
        return;
    }
    for (int t = 0; t < T; t++) {
        float *p = e->router + (size_t)t * E;
        int *ids = e->top_ids + (size_t)t * k;
        float *w = e->top_w + (size_t)t * k;
        ft_cpu_softmax(p, E);
        if (e->opts.routing == FT_ROUTING_MODEL) {
            if (m->router_group_max) keep_groups(m, p);
            ft_cpu_topk(p, E, k, ids, w);
        } else { /* distinct synthetic ids, weights from the router's probabilities */
            for (int j = 0; j < k; j++) {
                int id, dup, tries = 0;
                do {
                    id = synth_id(e, l, j, E);
                    dup = 0;
                    for (int i = 0; i < j; i++) dup |= ids[i] == id;
                    if (dup && e->opts.routing == FT_ROUTING_STICKY)
                        e->sticky[l * k + j] = -1;
                    if (dup && ++tries >= 64) { /* a steep zipf leaves too few reachable ranks */
                        id = synth_unused(ids, j, l, E, e->opts.routing == FT_ROUTING_ZIPF);
                        dup = 0;
                    }
                } while (dup);
                ids[j] = id;
                w[j] = p[id];
            }
        }
        if (m->norm_topk) {
            float s = 0;
            for (int j = 0; j < k; j++) s += w[j];
            for (int j = 0; j < k; j++) w[j] /= s;
        }
        if (m->routed_scale > 0) /* DeepSeek-V2 (the sigmoid routers scale in route_sigmoid) */
            for (int j = 0; j < k; j++) w[j] *= m->routed_scale;
    }
}

/* FT_OK, or the executor's watchdog error (the step abandoned, ft_error() set), or FT_ERR_BUSY
 * alone: a pool job abandoned (cpu_forward reports it) */
static enum ft_status moe_block(struct ft_engine *e, const struct ft_layer *L, int l, int T) {
    const struct ft_model *m = e->m;
    int H = m->hidden;
    mm(e, e->router, m->n_experts, e->xn, &L->router, L->router_bias, T);
    WATCHED(e); /* no router logits to route by */
    ft_engine_route(e, l, T);
    memset(e->y, 0, (size_t)T * H * sizeof(float));
    int d = ft_moe_exec_run(e->moe, e->pool, &L->bank[FT_BANK_GATE_UP], &L->bank[FT_BANK_DOWN],
                            &L->act, e->xn, e->top_ids, e->top_w, T, m->top_k, e->y);
    if (d < 0) {
        e->exec_failed = 1;
        return FT_ERR_BUSY;
    }
    e->distinct_sum += d;
    e->distinct_n++;
    if (L->has_shared) {
        int Is = m->shared_inter;
        mm(e, e->gu, 2 * Is, e->xn, &L->sh_gate, NULL, T);
        WATCHED(e);
        mm(e, e->gu + Is, 2 * Is, e->xn, &L->sh_up, NULL, T);
        WATCHED(e);
        ft_cpu_silu_mul(e->act, e->gu, T, Is);
        /* (the score's job must not write a frame the op leaves: engine scratch, the router's
         * logits, read by now: [T, E] >= [T]) */
        float *score = e->router;
        if (L->sh_score.data) mm(e, score, 1, e->xn, &L->sh_score, NULL, T);
        WATCHED(e);
        float *sh = e->att; /* free at this point; [T, H] fits in [T, q_dim >= ...] checked at init */
        mm(e, sh, H, e->act, &L->sh_down, NULL, T);
        WATCHED(e);
        for (int t = 0; t < T; t++) {
            float g = L->sh_score.data ? ft_sigmoid(score[t]) : 1.0f; /* plain shared experts */
            for (int h = 0; h < H; h++) e->y[(size_t)t * H + h] += g * sh[(size_t)t * H + h];
        }
    }
    return FT_OK;
}

static enum ft_status dense_mlp(struct ft_engine *e, const struct ft_layer *L, int T) {
    int I = L->w_gate.rows;
    mm(e, e->gu, 2 * I, e->xn, &L->w_gate, NULL, T);
    WATCHED(e);
    mm(e, e->gu + I, 2 * I, e->xn, &L->w_up, NULL, T);
    WATCHED(e);
    if (e->m->gelu_tanh) ft_cpu_gelu_tanh_mul(e->act, e->gu, T, I);
    else ft_cpu_silu_mul(e->act, e->gu, T, I);
    mm(e, e->y, e->m->hidden, e->act, &L->w_down, NULL, T);
    WATCHED(e);
    return FT_OK;
}

/* RoPE on dim dims at offset off of each of n_heads heads (hstride apart, rows ld apart):
 * adjacent pairs (2i, 2i + 1) when pairs (DeepSeek's interleaved layout), else dims i and
 * i + dim / 2 (rotate_half). The rotated dims stay in place: q and k rotate alike, so their
 * dot products are those of transformers' de-interleaved form. */
static void rope_at(float *x, int ld, int n_heads, int hstride, int off, int dim, const int32_t *pos,
                    int T, const float *inv, float msc, int pairs) {
    const int half = dim / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const float a = (float)pos[t] * inv[i], c = cosf(a) * msc, s = sinf(a) * msc;
            for (int h = 0; h < n_heads; h++) {
                float *p = x + (size_t)t * ld + (size_t)h * hstride + off;
                float *x0 = pairs ? p + 2 * i : p + i, *x1 = pairs ? p + 2 * i + 1 : p + i + half;
                const float a0 = *x0, a1 = *x1;
                *x0 = a0 * c - a1 * s;
                *x1 = a1 * c + a0 * s;
            }
        }
}


/* DeepSeek sparse attention's lightning indexer for a layer that runs it (L->dsa 1): each token's
 * queries from the normalised q LoRA (m_qa), its key from xn (LayerNorm, eps 1e-6), both rotated
 * on their first dr dims in pairs, the key stored at offset L + dr of the token's cache row kc
 * (kv_dim wide); then each token's ix_k best cached positions into ix_sel / ix_n. */
static enum ft_status dsa_index(struct ft_engine *e, const struct ft_layer *L, float *kc, int T) {
    const struct ft_model *m = e->m;
    const int nI = m->dsa_heads, dI = m->dsa_dim, dr = m->mla_rope, W = e->kv_dim;
    const int off = m->mla_kv_lora + dr;
    mm(e, e->ix_q, nI * dI, e->m_qa, &L->idx_wq, NULL, T);
    WATCHED(e);
    mm(e, e->ix_key, dI, e->xn, &L->idx_wk, NULL, T);
    WATCHED(e);
    mm(e, e->ix_w, nI, e->xn, &L->idx_w, NULL, T);
    WATCHED(e);
    const float hs = 1.0f / sqrtf((float)nI);
    for (int t = 0; t < T; t++) {
        float *k = e->ix_key + (size_t)t * dI, mean = 0, var = 0;
        for (int d = 0; d < dI; d++) mean += k[d];
        mean /= (float)dI;
        for (int d = 0; d < dI; d++) var += (k[d] - mean) * (k[d] - mean);
        const float r = 1.0f / sqrtf(var / (float)dI + 1e-6f);
        for (int d = 0; d < dI; d++) k[d] = (k[d] - mean) * r * L->idx_k_norm[d] + L->idx_k_bias[d];
        for (int h = 0; h < nI; h++) e->ix_w[(size_t)t * nI + h] *= hs;
    }
    rope_at(e->ix_q, nI * dI, nI, dI, 0, dr, e->pos, T, m->inv_freq, m->rope_mscale, 1);
    rope_at(e->ix_key, dI, 1, dI, 0, dr, e->pos, T, m->inv_freq, m->rope_mscale, 1);
    for (int t = 0; t < T; t++) {
        int p = e->pos[t];
        size_t row = (size_t)e->tok_blocks[t][p / FT_KV_BLOCK] * FT_KV_BLOCK + p % FT_KV_BLOCK;
        memcpy(kc + row * W + off, e->ix_key + (size_t)t * dI, (size_t)dI * sizeof(float));
    }
    ft_cpu_index_topk(e->pool, e->ix_sel, e->ix_n, e->ix_k, e->ix_q, e->ix_w, kc, W, off, e->pos,
                      e->tok_blocks, FT_KV_BLOCK, T, nI, dI, 1.0f / sqrtf((float)dI));
    WATCHED(e);
    return FT_OK;
}

/* Multi-head latent attention, absorbed: the cache row of a position is [c_kv (L) | k_pe (dr)],
 * c_kv the normalised latent and k_pe the rotated shared key; each head's q_nope is carried
 * into the latent space by its k_nope rows of kv_b (uk_t), so score = q_lat . c_kv + q_pe .
 * k_pe, and the head's value is its v rows of kv_b times the weighted sum of the c_kv. */
static enum ft_status mla_attention(struct ft_engine *e, const struct ft_layer *L, int l, int T) {
    const struct ft_model *m = e->m;
    const int nh = m->n_heads, dn = m->mla_nope, dr = m->mla_rope, dv = m->mla_v;
    const int Lr = m->mla_kv_lora, D = Lr + dr, qd = nh * (dn + dr);
    if (L->q_a.data) {
        mm(e, e->m_qa, m->mla_q_lora, e->xn, &L->q_a, L->bq_a, T);
        WATCHED(e);
        ft_cpu_rmsnorm(e->m_qa, e->m_qa, L->q_a_norm, T, m->mla_q_lora, 1e-6f); /* fixed, as HF */
        mm(e, e->q, qd, e->m_qa, &L->q_b, NULL, T);
    } else {
        mm(e, e->q, qd, e->xn, &L->wq, NULL, T);
    }
    WATCHED(e);
    mm(e, e->m_kva, D, e->xn, &L->kv_a, L->bkv_a, T);
    WATCHED(e);
    for (int t = 0; t < T; t++)
        ft_cpu_rmsnorm(e->m_kva + (size_t)t * D, e->m_kva + (size_t)t * D, L->kv_a_norm, 1, Lr, 1e-6f);
    rope_at(e->q, qd, nh, dn + dr, dn, dr, e->pos, T, m->inv_freq, m->rope_mscale, m->rope_pairs);
    rope_at(e->m_kva, D, 1, D, Lr, dr, e->pos, T, m->inv_freq, m->rope_mscale, m->rope_pairs);
    const int W = e->kv_dim; /* D, or D + dI with DSA's indexer key */
    float *kc = e->k_cache + (size_t)e->kv_of[l] * e->n_blocks * FT_KV_BLOCK * W;
    for (int t = 0; t < T; t++) {
        int p = e->pos[t];
        size_t row = (size_t)e->tok_blocks[t][p / FT_KV_BLOCK] * FT_KV_BLOCK + p % FT_KV_BLOCK;
        memcpy(kc + row * W, e->m_kva + (size_t)t * D, (size_t)D * sizeof(float));
    }
    if (L->dsa == 1) { /* 2: the previous layer's choice stands */
        enum ft_status st = dsa_index(e, L, kc, T);
        if (st != FT_OK) return st;
    }
    for (int h = 0; h < nh; h++) /* q_nope per head, contiguous; q_pe beside each q_lat */
        for (int t = 0; t < T; t++) {
            const float *qh = e->q + (size_t)t * qd + (size_t)h * (dn + dr);
            memcpy(e->m_qn + ((size_t)h * T + t) * dn, qh, (size_t)dn * sizeof(float));
            memcpy(e->m_ql + ((size_t)t * nh + h) * D + Lr, qh + dn, (size_t)dr * sizeof(float));
        }
    for (int h = 0; h < nh; h++) {
        struct ft_weight uk = ft_weight_rows(&L->uk_t, h * Lr, Lr);
        if (dn > 0) mm(e, e->m_ql + (size_t)h * D, nh * D, e->m_qn + (size_t)h * T * dn, &uk, NULL, T);
        else
            for (int t = 0; t < T; t++) memset(e->m_ql + ((size_t)t * nh + h) * D, 0, (size_t)Lr * sizeof(float));
        WATCHED(e);
    }
    ft_cpu_attention_latent_sel(e->pool, e->m_lat, e->m_ql, kc, W, e->pos, e->tok_blocks, FT_KV_BLOCK,
                                T, nh, D, Lr, m->attn_scale, L->dsa ? e->ix_sel : NULL, e->ix_n,
                                e->ix_k);
    WATCHED(e);
    for (int h = 0; h < nh; h++) {
        struct ft_weight uv = ft_weight_rows(&L->kv_b, h * (dn + dv) + dn, dv);
        mm(e, e->att + (size_t)h * dv, nh * dv, e->m_lat + (size_t)h * T * Lr, &uv, NULL, T);
        WATCHED(e);
    }
    mm(e, e->y, m->hidden, e->att, &L->wo, L->bo, T);
    WATCHED(e);
    return FT_OK;
}

static enum ft_status attention(struct ft_engine *e, const struct ft_layer *L, int l, int T) {
    const struct ft_model *m = e->m;
    int hd = m->head_dim, qd = e->q_dim, kd = e->kv_dim;
    if (L->attn_gate) { /* [q_h | gate_h] per head: q out of it, the gate stays in qg */
        mm(e, e->qg, 2 * qd, e->xn, &L->wq, L->bq, T);
        WATCHED(e);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < m->n_heads; h++)
                memcpy(e->q + (size_t)t * qd + (size_t)h * hd, e->qg + (size_t)t * 2 * qd + (size_t)h * 2 * hd,
                       (size_t)hd * sizeof(float));
    } else {
        mm(e, e->q, qd, e->xn, &L->wq, L->bq, T);
        WATCHED(e);
    }
    mm(e, e->k, kd, e->xn, &L->wk, L->bk, T);
    WATCHED(e);
    mm(e, e->v, kd, e->xn, &L->wv, L->bv, T);
    WATCHED(e); /* (the KV write below reads e->v) */
    if (L->q_norm && L->qk_norm_all) { /* over all heads at once (MiniMax-M2) */
        ft_cpu_rmsnorm(e->q, e->q, L->q_norm, T, qd, m->rms_eps);
        ft_cpu_rmsnorm(e->k, e->k, L->k_norm, T, kd, m->rms_eps);
    } else if (L->q_norm) {
        ft_cpu_rmsnorm(e->q, e->q, L->q_norm, T * m->n_heads, hd, m->rms_eps);
        ft_cpu_rmsnorm(e->k, e->k, L->k_norm, T * m->n_kv_heads, hd, m->rms_eps);
    }
    const float *inv = L->rope_local ? m->inv_freq_local : m->inv_freq;
    float msc = L->rope_local ? 1.0f : m->rope_mscale;
    ft_cpu_rope(e->q, e->pos, inv, msc, T, m->n_heads, hd, m->rot_dim);
    ft_cpu_rope(e->k, e->pos, inv, msc, T, m->n_kv_heads, hd, m->rot_dim);
    size_t layer_off = (size_t)e->kv_of[l] * e->n_blocks * FT_KV_BLOCK * kd;
    float *kc = e->k_cache + layer_off, *vc = e->v_cache + layer_off;
    for (int t = 0; t < T; t++) {
        int p = e->pos[t];
        size_t row = (size_t)e->tok_blocks[t][p / FT_KV_BLOCK] * FT_KV_BLOCK + p % FT_KV_BLOCK;
        memcpy(kc + row * kd, e->k + (size_t)t * kd, (size_t)kd * sizeof(float));
        memcpy(vc + row * kd, e->v + (size_t)t * kd, (size_t)kd * sizeof(float));
    }
    ft_cpu_attention_paged(e->pool, e->att, e->q, kc, vc, e->pos, e->tok_blocks, FT_KV_BLOCK, T,
                           m->n_heads, m->n_kv_heads, hd,
                           m->attn_scale > 0 ? m->attn_scale : 1.0f / sqrtf((float)hd), L->window,
                           L->sinks);
    WATCHED(e);
    if (L->attn_gate) /* the output times sigmoid(gate), per head and element */
        for (int t = 0; t < T; t++)
            for (int h = 0; h < m->n_heads; h++) {
                float *o = e->att + (size_t)t * qd + (size_t)h * hd;
                const float *gt = e->qg + (size_t)t * 2 * qd + (size_t)h * 2 * hd + hd;
                for (int d = 0; d < hd; d++) o[d] *= ft_sigmoid(gt[d]);
            }
    mm(e, e->y, m->hidden, e->att, &L->wo, L->bo, T);
    WATCHED(e);
    return FT_OK;
}

/* ---- Gated DeltaNet (linear attention) ---- */

/* Its tasks work from a copy: the job lives on the caller's stack, gone once the watchdog has
 * abandoned it while a task still runs (cpu_forward). */
struct gdn_job {
    struct ft_engine *e;
    const struct ft_layer *L;
    const struct ft_seg *segs;
    int n_segs, gl;             /* gl: the layer's index among the DeltaNet layers */
};

/* The state of DeltaNet layer gl in slot s: conv inputs [Cc][K-1], then S [Hv][dk][dv]. */
static float *gdn_state(const struct ft_engine *e, int s, int gl) {
    return e->st + (size_t)s * e->st_floats + (size_t)gl * (e->st_floats / e->m->n_gdn);
}

/* Channels of the causal depthwise conv, in place over g_qkv, each token after the sequence's
 * last K-1 inputs (its state), then SiLU: out[t] = silu(sum_j w[j] u[t - (K-1) + j]). */
static void gdn_conv_task(void *ctx, int i, int n) {
    const struct gdn_job jc = *(const struct gdn_job *)ctx, *j = &jc; /* (a copy: gdn_job) */
    const struct ft_model *m = j->e->m;
    const int K = m->gdn_kernel, Cc = 2 * m->gdn_hk * m->gdn_dk + m->gdn_hv * m->gdn_dv;
    long c0, c1;
    ft_split(Cc, i, n, &c0, &c1);
    for (int s = 0, t0 = 0; s < j->n_segs; t0 += j->segs[s++].n) {
        float *win0 = gdn_state(j->e, j->e->seg_slot[s], j->gl); /* [Cc][K-1] */
        for (long c = c0; c < c1; c++) {
            const float *w = j->L->gdn_conv + (size_t)c * K;
            float *win = win0 + (size_t)c * (K - 1);
            for (int t = t0; t < t0 + j->segs[s].n; t++) {
                float *u = j->e->g_qkv + (size_t)t * Cc + c, raw = *u, y = w[K - 1] * raw;
                for (int q = 0; q < K - 1; q++) y += w[q] * win[q];
                for (int q = 0; q + 1 < K - 1; q++) win[q] = win[q + 1];
                if (K > 1) win[K - 2] = raw;
                *u = y / (1.0f + expf(-y));
            }
        }
    }
}

/* x / sqrt(sum x^2 + 1e-6) (transformers' l2norm: the epsilon on the sum), times scale. */
static void l2norm(float *y, const float *x, int n, float scale) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float r = scale / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) y[i] = x[i] * r;
}

/* Value heads [h0, h1) through every token of every segment: the gated delta rule (recurrent
 * form) from the sequence's state, then the gated RMSNorm, into g_o. */
static void gdn_rule_task(void *ctx, int i, int n) {
    const struct gdn_job jc = *(const struct gdn_job *)ctx, *j = &jc; /* (a copy: gdn_job) */
    struct ft_engine *e = j->e;
    const struct ft_model *m = e->m;
    const struct ft_layer *L = j->L;
    const int Hk = m->gdn_hk, Hv = m->gdn_hv, dk = m->gdn_dk, dv = m->gdn_dv, r = Hv / Hk;
    const int Dk = Hk * dk, Dv = Hv * dv, Cc = 2 * Dk + Dv, K = m->gdn_kernel;
    long h0, h1;
    ft_split(Hv, i, n, &h0, &h1);
    float q[dk], k[dk], pred[dv];
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int s = 0, t0 = 0; s < j->n_segs; t0 += j->segs[s++].n) {
        float *S0 = gdn_state(e, e->seg_slot[s], j->gl) + (size_t)(K - 1) * Cc;
        for (long h = h0; h < h1; h++) {
            float *S = S0 + (size_t)h * dk * dv; /* [dk][dv] */
            const int kh = (int)(h / r);       /* value head h reads key head h / r */
            for (int t = t0; t < t0 + j->segs[s].n; t++) {
                const float *row = e->g_qkv + (size_t)t * Cc, *v = row + 2 * Dk + h * dv;
                l2norm(q, row + (size_t)kh * dk, dk, qscale);
                l2norm(k, row + Dk + (size_t)kh * dk, dk, 1.0f);
                const float beta = ft_sigmoid(e->g_b[(size_t)t * Hv + h]);
                const float x = e->g_a[(size_t)t * Hv + h] + L->gdn_dt[h];
                const float sp = x > 20.0f ? x : log1pf(expf(x)); /* softplus (torch's threshold) */
                const float decay = expf(L->gdn_A[h] * sp);
                for (int c = 0; c < dv; c++) pred[c] = 0;
                for (int a = 0; a < dk; a++) {
                    float *Sa = S + (size_t)a * dv;
                    for (int c = 0; c < dv; c++) {
                        Sa[c] *= decay;
                        pred[c] += k[a] * Sa[c];
                    }
                }
                for (int c = 0; c < dv; c++) pred[c] = beta * (v[c] - pred[c]);
                float *o = e->g_o + (size_t)t * Dv + (size_t)h * dv;
                for (int c = 0; c < dv; c++) o[c] = 0;
                for (int a = 0; a < dk; a++) {
                    float *Sa = S + (size_t)a * dv;
                    for (int c = 0; c < dv; c++) {
                        Sa[c] += k[a] * pred[c];
                        o[c] += q[a] * Sa[c];
                    }
                }
                /* gated RMSNorm: norm(o) * w * silu(z) */
                float ss = 0;
                for (int c = 0; c < dv; c++) ss += o[c] * o[c];
                const float rn = 1.0f / sqrtf(ss / (float)dv + m->rms_eps);
                const float *z = e->g_z + (size_t)t * Dv + (size_t)h * dv;
                for (int c = 0; c < dv; c++) o[c] = o[c] * rn * L->gdn_norm[c] * (z[c] / (1.0f + expf(-z[c])));
            }
        }
    }
}

static enum ft_status gdn(struct ft_engine *e, const struct ft_layer *L, int l,
                          const struct ft_seg *segs, int n_segs, int T) {
    const struct ft_model *m = e->m;
    const int Dk = m->gdn_hk * m->gdn_dk, Dv = m->gdn_hv * m->gdn_dv;
    mm(e, e->g_qkv, 2 * Dk + Dv, e->xn, &L->gdn_qkv, NULL, T);
    WATCHED(e);
    mm(e, e->g_z, Dv, e->xn, &L->gdn_z, NULL, T);
    WATCHED(e);
    mm(e, e->g_b, m->gdn_hv, e->xn, &L->gdn_b, NULL, T);
    WATCHED(e);
    mm(e, e->g_a, m->gdn_hv, e->xn, &L->gdn_a, NULL, T);
    WATCHED(e);
    struct gdn_job j = {e, L, segs, n_segs, e->gdn_of[l]};
    ft_pool_run(e->pool, gdn_conv_task, &j);
    WATCHED(e);
    ft_pool_run(e->pool, gdn_rule_task, &j);
    WATCHED(e);
    mm(e, e->y, m->hidden, e->g_o, &L->gdn_out, NULL, T);
    WATCHED(e);
    return FT_OK;
}

/* The recurrent-state slot of the sequence with block table `blocks` into *out: the one bound
 * to that table, else the unbound one keyed by its first block; with `take`, a free one (one
 * more on the CPU) becomes its slot when it has none; else -1. */
static enum ft_status slot_of(struct ft_engine *e, const int32_t *blocks, int take, int *out) {
    int s = -1, keyed = -1, free_s = -1;
    for (int q = 0; q < e->n_st && s < 0; q++) {
        if (e->st_table[q] == blocks) s = q;
        else if (!e->st_table[q] && e->st_key[q] == blocks[0] && keyed < 0) keyed = q;
        else if (e->st_key[q] < 0 && free_s < 0) free_s = q;
    }
    *out = s >= 0 ? s : keyed;
    if (*out >= 0 || !take) return FT_OK;
    if (free_s < 0 && e->gpu)
        return ft_fail(FT_ERR_INVALID_ARG, "forward: more than %d sequences with recurrent state "
                       "at once (the GPU holds that many; fewer running requests)", e->n_st);
    if (free_s < 0) { /* one more slot */
        float *st = realloc(e->st, (size_t)(e->n_st + 1) * e->st_floats * sizeof(float));
        if (st) e->st = st;
        int32_t *key2 = st ? realloc(e->st_key, (size_t)(e->n_st + 1) * sizeof *key2) : NULL;
        if (key2) e->st_key = key2;
        const int32_t **tab2 = key2 ? realloc(e->st_table, (size_t)(e->n_st + 1) * sizeof *tab2) : NULL;
        if (!tab2)
            return ft_fail(FT_ERR_OOM, "engine: out of memory for one more sequence's recurrent "
                           "state (%.1f MiB)", e->st_floats * 4 / 1048576.0);
        e->st_table = tab2;
        free_s = e->n_st++;
    }
    e->st_key[free_s] = blocks[0], e->st_table[free_s] = NULL;
    *out = free_s;
    return FT_OK;
}

/* Each segment's recurrent-state slot (e->seg_slot): the one its sequence owns, a free one
 * for a sequence starting at position 0 (zeroed; a restarted sequence's own is zeroed too). */
static enum ft_status state_slots(struct ft_engine *e, const struct ft_seg *segs, int n_segs) {
    for (int i = 0; i < n_segs; i++) {
        int s;
        enum ft_status st = slot_of(e, segs[i].blocks, segs[i].pos0 == 0, &s);
        if (st != FT_OK) return st;
        if (s < 0)
            return ft_fail(FT_ERR_INVALID_ARG, "forward: a sequence at position %d has no recurrent "
                           "state (hybrid models continue only the tokens they last ran)", segs[i].pos0);
        if (segs[i].pos0 == 0 && !e->gpu && e->m->n_gdn) /* the GPU zeroes its own; V4's state
                                                             is written before it is read */
            memset(e->st + (size_t)s * e->st_floats, 0, e->st_floats * sizeof(float));
        e->seg_slot[i] = s;
    }
    return FT_OK;
}

size_t ft_engine_state_bytes(const struct ft_engine *e) { return e->m->n_gdn ? e->st_floats * sizeof(float) : 0; }

enum ft_status ft_engine_state_load(struct ft_engine *e, const int32_t *blocks, const void *src) {
    if (!e->m->n_gdn) return ft_fail(FT_ERR_INVALID_ARG, "engine: the model keeps no recurrent state");
    int s;
    enum ft_status st = slot_of(e, blocks, 1, &s);
    if (st != FT_OK) return st;
    e->st_table[s] = blocks;
    if (src && e->gpu) st = ft_gpu_state_write(e->gpu, s, src);
    else if (src) memcpy(e->st + (size_t)s * e->st_floats, src, e->st_floats * sizeof(float));
    if (st != FT_OK) e->st_key[s] = -1, e->st_table[s] = NULL;
    return st;
}

enum ft_status ft_engine_state_save(struct ft_engine *e, const int32_t *blocks, void *dst) {
    int s = -1;
    if (e->m->n_gdn) slot_of(e, blocks, 0, &s);
    if (s < 0) return ft_fail(FT_ERR_INVALID_ARG, "engine: the sequence has no recurrent state");
    if (e->gpu) return ft_gpu_state_read(e->gpu, s, dst);
    memcpy(dst, e->st + (size_t)s * e->st_floats, e->st_floats * sizeof(float));
    return FT_OK;
}

void ft_engine_state_drop(struct ft_engine *e, const int32_t *blocks) {
    int s = -1;
    if (e->n_st > 0) slot_of(e, blocks, 0, &s);
    if (s >= 0) e->st_key[s] = -1, e->st_table[s] = NULL;
}

/* Validates a batch and lays its tokens out in e->ids / pos / tok_blocks. */
static enum ft_status check_batch(struct ft_engine *e, const struct ft_seg *segs, int n_segs) {
    const struct ft_model *m = e->m;
    int T = 0;
    for (int i = 0; i < n_segs; i++) {
        const struct ft_seg *g = &segs[i];
        if (g->n <= 0 || T + g->n > e->opts.max_chunk)
            return ft_fail(FT_ERR_INVALID_ARG, "forward: %d tokens in one call (1..%d)",
                           T + g->n, e->opts.max_chunk);
        if (g->pos0 < 0 || g->pos0 + g->n > e->opts.max_ctx)
            return ft_fail(FT_ERR_INVALID_ARG, "context full: %d + %d tokens > --ctx-size %d "
                           "(raise --ctx-size or shorten the prompt)", g->pos0, g->n,
                           e->opts.max_ctx);
        for (int t = 0; t < g->n; t++, T++) {
            if (g->ids[t] < 0 || g->ids[t] >= m->vocab)
                return ft_fail(FT_ERR_INVALID_ARG, "token id %d out of range [0, %d)", g->ids[t],
                               m->vocab);
            e->ids[T] = g->ids[t];
            e->pos[T] = g->pos0 + t;
            e->tok_blocks[T] = g->blocks;
        }
    }
    e->step_tokens = T;
    return FT_OK;
}

static enum ft_status cpu_head(struct ft_engine *e, const struct ft_seg *segs, int n_segs,
                               float *logits);

/* The layers and head of a step, under the pool's watch: FT_OK, an error, or FT_ERR_BUSY as
 * soon as a check finds the watch tripped. */
static enum ft_status cpu_layers(struct ft_engine *e, const struct ft_seg *segs, int n_segs,
                                 float *logits) {
    const struct ft_model *m = e->m;
    int H = m->hidden, T = e->step_tokens;
    if (m->n_gdn || m->v4) {
        enum ft_status st = state_slots(e, segs, n_segs);
        if (st != FT_OK) return st;
    }
    if (m->v4) { /* its own layers (forward_v4.c), the collapsed residual left in e->x */
        enum ft_status st = ft_v4_forward(e, segs, n_segs);
        if (st != FT_OK) return st;
        return logits ? cpu_head(e, segs, n_segs, logits) : FT_OK;
    }
    ft_cpu_embed(e->x, m->embed.data, m->embed.dtype, e->ids, T, H);
    if (m->embed_scale > 0)
        for (size_t i = 0; i < (size_t)T * H; i++) e->x[i] *= m->embed_scale;
    for (int l = 0; l < m->n_layers; l++) {
        const struct ft_layer *L = &m->layers[l];
        ft_cpu_rmsnorm(e->xn, e->x, L->attn_norm, T, H, m->rms_eps);
        enum ft_status st = L->gdn   ? gdn(e, L, l, segs, n_segs, T)
                            : L->mla ? mla_attention(e, L, l, T)
                                     : attention(e, L, l, T);
        if (st != FT_OK) return st; /* FT_ERR_BUSY: a pool job abandoned (WATCHED) */
        if (L->post_attn_norm) ft_cpu_rmsnorm(e->y, e->y, L->post_attn_norm, T, H, m->rms_eps);
        ft_cpu_add(e->x, e->y, (size_t)T * H);
        ft_cpu_rmsnorm(e->xn, e->x, L->ffn_norm, T, H, m->rms_eps);
        st = L->is_moe ? moe_block(e, L, l, T) : dense_mlp(e, L, T);
        if (st != FT_OK) return st;
        if (ft_pool_watch_tripped(e->pool)) return FT_ERR_BUSY; /* (the executor's quant job) */
        if (L->post_ffn_norm) ft_cpu_rmsnorm(e->y, e->y, L->post_ffn_norm, T, H, m->rms_eps);
        ft_cpu_add(e->x, e->y, (size_t)T * H);
    }
    if (!logits) return FT_OK;
    return cpu_head(e, segs, n_segs, logits);
}

/* A pool job of the step that began at t0 was abandoned under the watch: logged once; the
 * step fails with FT_ERR_BUSY. st: what the layers returned (the executor's error when its
 * call was the one refused, which it has already reported). */
static enum ft_status step_hung(struct ft_engine *e, int64_t t0, enum ft_status st) {
    if (e->exec_failed) return st;
    const int T = e->step_tokens;
    const double waited = (ft_time_ns() - t0) / 1e9;
    char usual[64];
    ft_watchdog_usual(&e->wd, T, usual, sizeof usual);
    int stuck = ft_watchdog_abandoned(&e->wd, e->pool);
    ft_log_error("cpu forward: a step of %d tokens hung: a thread-pool job (matmul, attention) "
                 "did not finish within %.1f s (such steps: %s; a job's limit is the larger of "
                 "%g s and %dx that), given up after %.1f s; its requests fail%s",
                 T, ft_watchdog_limit_ns(&e->wd, T) / 1e9, usual, e->wd.floor_ns / 1e9,
                 FT_WATCHDOG_X, waited,
                 stuck ? "; no new step starts until its stuck worker returns" : "");
    return ft_fail(FT_ERR_BUSY,
                   "cpu forward: a step of %d tokens hung (a thread-pool job not finished, given "
                   "up after %.1f s; such steps: %s); the request failed, retry it; if this "
                   "repeats, look for swapping of the model's weights (free RAM) or an overloaded "
                   "host (fewer -t threads)", T, waited, usual);
}

/* The step's block tables into the engine's memory, e->tok_blocks pointing there: a pool task
 * the watch abandons may still read them after the failed step's requests, who own the
 * originals, are released. Grown only when no abandoned task runs (cpu_forward's checks). */
static size_t seg_blocks(const struct ft_seg *g) { /* the KV blocks its positions reach */
    return g->blocks ? (size_t)(g->pos0 + g->n + FT_KV_BLOCK - 1) / FT_KV_BLOCK : 0;
}

static enum ft_status own_block_tables(struct ft_engine *e, const struct ft_seg *segs, int n_segs) {
    size_t need = 0;
    for (int i = 0; i < n_segs; i++) need += seg_blocks(&segs[i]);
    if (need > e->blk_cap) {
        int32_t *p = realloc(e->blk_copy, need * sizeof *p);
        if (!p) return ft_fail(FT_ERR_OOM, "engine: out of memory for %zu block ids", need);
        e->blk_copy = p, e->blk_cap = need;
    }
    size_t off = 0;
    for (int i = 0, T = 0; i < n_segs; i++) {
        const int32_t *own = NULL;
        if (segs[i].blocks) {
            const size_t nb = seg_blocks(&segs[i]);
            memcpy(e->blk_copy + off, segs[i].blocks, nb * sizeof(int32_t));
            own = e->blk_copy + off, off += nb;
        }
        for (int t = 0; t < segs[i].n; t++) e->tok_blocks[T++] = own;
    }
    return FT_OK;
}

/* FT_OK when a CPU step may start: a worker of a step a watchdog abandoned (this forward's,
 * or the executor's: moe/cpu_exec.c) may still write into the pool's jobs and this engine's
 * buffers (the logits scratch too: checked before it may grow), so no step starts before it
 * is back; the owner of the incident checks first (its lines). */
static enum ft_status cpu_ready(struct ft_engine *e) {
    enum ft_status ok = e->wd.stuck ? ft_watchdog_check(&e->wd, e->pool) : FT_OK;
    if (ok == FT_OK) ok = ft_moe_exec_check(e->moe, e->pool);
    if (ok == FT_OK) ok = ft_watchdog_check(&e->wd, e->pool);
    return ok;
}

static enum ft_status cpu_forward(struct ft_engine *e, const struct ft_seg *segs, int n_segs,
                                  float *logits) {
    enum ft_status ok = cpu_ready(e);
    if (ok == FT_OK) ok = own_block_tables(e, segs, n_segs);
    if (ok != FT_OK) return ok;
    const int T = e->step_tokens;
    const int64_t t0 = ft_time_ns();
    e->exec_failed = 0;
    ft_pool_watch(e->pool, ft_watchdog_limit_ns(&e->wd, T));
    enum ft_status st = cpu_layers(e, segs, n_segs, logits);
    if (ft_pool_watch_end(e->pool)) return step_hung(e, t0, st);
    if (st == FT_OK) ft_watchdog_learn(&e->wd, T, ft_time_ns() - t0);
    return st;
}

enum ft_status ft_engine_forward_batch(struct ft_engine *e, const struct ft_seg *segs, int n_segs,
                                       float *logits) {
    return ft_engine_forward_batch_ex(e, segs, n_segs, logits, NULL);
}

/* Scratch for ids without caller logits: rows of logits, and for draws a sampler's buffers. */
static enum ft_status top1_scratch(struct ft_engine *e, int rows, int draws) {
    const int V = e->m->vocab;
    if (rows > e->top1_rows) {
        float *p = realloc(e->top1_logits, (size_t)rows * V * sizeof(float));
        if (!p) return ft_fail(FT_ERR_OOM, "engine: out of memory for %d logit rows", rows);
        e->top1_logits = p, e->top1_rows = rows;
    }
    if (draws && !e->draw_smp) {
        const struct ft_sampling def = ft_sampling_default();
        return ft_sampler_init(&e->draw_smp, &def, V);
    }
    return FT_OK;
}

/* Row r of logits masked by its allow bitmask (masks->fill) on the host: the CPU backend's
 * masked draws, and a GPU row the device left to the host. words: [ft_mask_words(V)]. */
static void mask_row(const struct ft_draw_masks *masks, int r, uint32_t *words, float *row, int V) {
    masks->fill(masks->ctx, r, words);
    ft_mask_apply_bits(row, V, words);
}

/* The batch forward: logits as ft_engine_forward_batch's; top1: each row's token, the argmax
 * or (draws) ft_sampler_draw_row's draw, masked rows by masks' bits. */
static enum ft_status forward_rows(struct ft_engine *e, const struct ft_seg *segs, int n_segs,
                                   float *logits, int32_t *top1, const struct ft_draw *draws,
                                   const struct ft_draw_masks *masks) {
    enum ft_status st = check_batch(e, segs, n_segs);
    if (st != FT_OK) return st;
    const int V = e->m->vocab;
    int rows = 0, n_masked = 0;
    for (int i = 0; i < n_segs; i++)
        rows += segs[i].want == FT_LOGITS_ALL ? segs[i].n : segs[i].want == FT_LOGITS_LAST;
    for (int r = 0; draws && top1 && r < rows; r++) n_masked += draws[r].masked != 0;
    if (n_masked && (!masks || !masks->fill))
        return ft_fail(FT_ERR_INVALID_ARG, "engine draw: %d masked rows but no allow bitmasks", n_masked);
    uint32_t *words = NULL; /* [ft_mask_words(V)]: a masked row's bits on the host */
    if (n_masked && !(words = malloc((size_t)ft_mask_words(V) * sizeof *words)))
        return ft_fail(FT_ERR_OOM, "engine: out of memory for a token mask");
    if (!e->gpu && (st = cpu_ready(e)) != FT_OK) goto done; /* (before top1_scratch) */
    if (top1 && rows > 0) { /* scratch rows: the CPU backend's logits when the caller wants ids
                             * only; a GPU row the device leaves to the host sampler */
        const int need = e->gpu ? draws != NULL : logits ? 0 : rows;
        if ((need || draws) && (st = top1_scratch(e, need, draws != NULL)) != FT_OK) goto done;
    }
    if (!e->gpu) {
        float *l = logits ? logits : e->top1_logits; /* ids only: logits into scratch */
        st = cpu_forward(e, segs, n_segs, top1 && rows > 0 ? l : logits);
        for (int r = 0; st == FT_OK && top1 && r < rows; r++) {
            float *row = l + (size_t)r * V;
            if (draws && draws[r].masked) mask_row(masks, r, words, row, V);
            top1[r] = draws ? ft_sampler_draw_row(e->draw_smp, &draws[r], row) : ft_argmax(row, V);
        }
        goto done;
    }
    if (e->m->n_gdn && (st = state_slots(e, segs, n_segs)) != FT_OK) goto done;
    double distinct = 0;
    st = ft_gpu_forward(e->gpu, segs, n_segs, e->m->n_gdn ? e->seg_slot : NULL, logits, top1, draws,
                        n_masked ? masks : NULL, &distinct);
    if (st == FT_OK && e->m->n_experts) {
        e->distinct_sum += distinct;
        e->distinct_n++;
    }
    /* a row the device could not draw (more candidates than its on-chip sort holds: a flat
     * distribution under top-p or min-p): its logits to the host sampler, masked again */
    for (int r = 0; st == FT_OK && draws && r < rows; r++) {
        e->draw_rows++;
        if (top1[r] < 0 && (st = ft_gpu_row_logits(e->gpu, r, e->top1_logits)) == FT_OK) {
            if (draws[r].masked) mask_row(masks, r, words, e->top1_logits, V);
            top1[r] = ft_sampler_draw_row(e->draw_smp, &draws[r], e->top1_logits);
            e->draw_host++;
        }
    }
done:
    free(words);
    return st;
}

enum ft_status ft_engine_forward_batch_ex(struct ft_engine *e, const struct ft_seg *segs, int n_segs,
                                          float *logits, int32_t *top1) {
    return forward_rows(e, segs, n_segs, logits, top1, NULL, NULL);
}

enum ft_status ft_engine_forward_batch_draw(struct ft_engine *e, const struct ft_seg *segs,
                                            int n_segs, const struct ft_draw *draws,
                                            const struct ft_draw_masks *masks, int32_t *ids) {
    return forward_rows(e, segs, n_segs, NULL, ids, draws, masks);
}

static enum ft_status cpu_head(struct ft_engine *e, const struct ft_seg *segs, int n_segs,
                               float *logits) {
    const struct ft_model *m = e->m;
    int H = m->hidden, n_rows = 0;
    for (int i = 0, t0 = 0; i < n_segs; t0 += segs[i++].n) { /* gather the rows wanted */
        int first = segs[i].want == FT_LOGITS_ALL ? t0 : t0 + segs[i].n - 1;
        int n = segs[i].want == FT_LOGITS_ALL ? segs[i].n : segs[i].want == FT_LOGITS_LAST;
        memcpy(e->xl + (size_t)n_rows * H, e->x + (size_t)first * H, (size_t)n * H * sizeof(float));
        n_rows += n;
    }
    if (n_rows == 0) return FT_OK;
    ft_cpu_rmsnorm(e->xl, e->xl, m->final_norm, n_rows, H, m->rms_eps);
    mm(e, logits, m->vocab, e->xl, &m->lm_head, NULL, n_rows);
    WATCHED(e);
    return FT_OK;
}

static enum ft_status seq0_forward(struct ft_engine *e, const int32_t *ids, int T, float *logits,
                                   int all_logits, int32_t *top1, const struct ft_draw *draws) {
    if (!e->seq0_ready) {
        enum ft_status st = ft_engine_kv_alloc(e, e->seq0_n_blocks, e->seq0_blocks);
        if (st != FT_OK) return st;
        e->seq0_ready = 1;
    }
    struct ft_seg g = {ids, T, e->n_past, e->seq0_blocks,
                       !logits && !top1 ? FT_LOGITS_NONE : all_logits ? FT_LOGITS_ALL : FT_LOGITS_LAST};
    enum ft_status st = draws ? ft_engine_forward_batch_draw(e, &g, 1, draws, NULL, top1)
                              : ft_engine_forward_batch_ex(e, &g, 1, logits, top1);
    if (st == FT_OK) e->n_past += T;
    return st;
}

enum ft_status ft_engine_forward(struct ft_engine *e, const int32_t *ids, int T, float *logits,
                                 int all_logits) {
    return seq0_forward(e, ids, T, logits, all_logits, NULL, NULL);
}

enum ft_status ft_engine_forward_greedy(struct ft_engine *e, const int32_t *ids, int T, int32_t *next) {
    return seq0_forward(e, ids, T, NULL, 0, next, NULL);
}

enum ft_status ft_engine_forward_draw(struct ft_engine *e, const int32_t *ids, int T,
                                      const struct ft_draw *d, int32_t *next) {
    return seq0_forward(e, ids, T, NULL, 0, next, d);
}

enum ft_status ft_engine_kv_alloc(struct ft_engine *e, int n, int32_t *blocks) {
    if (n > e->n_free)
        return ft_fail(FT_ERR_BUSY, "KV cache: %d blocks wanted, %d free", n, e->n_free);
    for (int i = 0; i < n; i++) blocks[i] = e->free_blocks[--e->n_free], e->refs[blocks[i]] = 1;
    return FT_OK;
}

void ft_engine_kv_ref(struct ft_engine *e, const int32_t *blocks, int n) {
    for (int i = 0; i < n; i++) e->refs[blocks[i]]++;
}

int ft_engine_kv_refs(const struct ft_engine *e, int32_t block) { return e->refs[block]; }

void ft_engine_kv_free(struct ft_engine *e, const int32_t *blocks, int n) {
    for (int s = 0; n > 0 && s < e->n_st; s++) /* the sequence's recurrent state goes with it */
        if (e->st_key[s] == blocks[0] && !e->st_table[s]) e->st_key[s] = -1;
    for (int i = 0; i < n; i++) /* a block shared with the prefix cache or another sequence stays */
        if (e->refs[blocks[i]] > 0 && --e->refs[blocks[i]] == 0) e->free_blocks[e->n_free++] = blocks[i];
}

int ft_engine_kv_free_blocks(const struct ft_engine *e) { return e->n_free; }
int ft_engine_kv_total_blocks(const struct ft_engine *e) { return e->n_blocks; }

enum ft_status ft_engine_prefill(struct ft_engine *e, const int32_t *ids, int T, float *logits,
                                 int all_logits) {
    for (int done = 0; done < T;) {
        int n = FT_MIN(T - done, e->opts.max_chunk), last = done + n == T;
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)done * e->m->vocab;
        else if (logits && last) out = logits;
        enum ft_status st = ft_engine_forward(e, ids + done, n, out, all_logits);
        if (st != FT_OK) return st;
        done += n;
    }
    return FT_OK;
}

int ft_engine_fast_matrices(const struct ft_model *m) {
    int n = ft_cpu_xq_bytes(m->lm_head.dtype, m->lm_head.cols) > 0;
    for (int l = 0; l < m->n_layers; l++) {
        const struct ft_layer *L = &m->layers[l];
        const struct ft_weight *w[] = {&L->wq,     &L->wk,      &L->wv,    &L->wo,     &L->w_gate,
                                       &L->w_up,   &L->w_down,  &L->sh_gate, &L->sh_up, &L->sh_down};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            n += w[i]->data && ft_cpu_xq_bytes(w[i]->dtype, w[i]->cols) > 0;
        for (int f = 0; L->is_moe && f < FT_BANK_N_FAMILIES; f++)
            n += ft_cpu_xq_bytes(L->bank[f].schema->dtype, L->bank[f].cols) > 0;
    }
    return n;
}

/* Bytes a resident GPU engine needs at least: every weight (all experts included) and a
 * 1,024-token KV cache (keys and values in f32, as the GPU keeps them). */
static uint64_t resident_bytes(const struct ft_model *m) {
    uint64_t b = m->dense_bytes, kv = (uint64_t)m->n_layers * 1024 * 2 * 4 * m->n_kv_heads * m->head_dim;
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].is_moe) b += (uint64_t)m->n_experts * m->expert_bytes;
    return b + kv;
}

/* Sequences whose recurrent state the GPU holds: as many as the KV cache holds full contexts
 * (the scheduler's running requests), at least 4, at most a step's sequences. */
static int gpu_state_slots(const struct ft_engine *e) {
    const int full = e->n_blocks * FT_KV_BLOCK / FT_MAX(e->opts.max_ctx, 1) + 1;
    return FT_MIN(FT_MAX(full, 4), ft_engine_max_seqs(e));
}

/* The GPU backend for opts->backend cuda or offload: --backend auto picks offload (hybrid) for
 * a MoE model that does not fit the VRAM budget resident, and refuses a dense one; offload on a
 * model without experts runs it resident. Says so in one line. */
static enum ft_status pick_gpu_backend(const struct ft_model *m, struct ft_engine_opts *o) {
    const int moe = m->n_experts > 0;
    if (o->backend == FT_BACKEND_OFFLOAD && !moe) {
        ft_log_info("%s has no experts to offload: --backend offload runs it resident on the GPU",
                    m->arch->name);
        o->backend = FT_BACKEND_CUDA;
        return FT_OK;
    }
    if (!o->backend_auto || o->backend != FT_BACKEND_CUDA) return FT_OK;
    const uint64_t need = resident_bytes(m), have = ft_gpu_vram_budget(o->device, o->vram_limit);
    if (need <= have) return FT_OK;
    if (!moe)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: %.1f GiB of weights and KV cache do not fit the %.1f "
                       "GiB of GPU memory this engine may use (free VRAM or --vram-limit); use "
                       "--backend cpu", m->arch->name, need / 1073741824.0, have / 1073741824.0);
    ft_log_info("backend auto: %.1f GiB resident would not fit the %.1f GiB of GPU memory this engine "
                "may use; experts stay in host RAM (--backend offload, hybrid)", need / 1073741824.0,
                have / 1073741824.0);
    o->backend = FT_BACKEND_OFFLOAD;
    return FT_OK;
}

enum ft_status ft_engine_init(struct ft_engine **out, const struct ft_model *m,
                              struct ft_pool *pool, const struct ft_engine_opts *opts) {
    *out = NULL;
    int gpu = opts->backend == FT_BACKEND_CUDA || opts->backend == FT_BACKEND_OFFLOAD;
    if (gpu && (m->arch->flags & FT_ARCH_GEMMA)) { /* CPU-only archs */
        if (!opts->backend_auto)
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: the cuda and offload backends do not run it "
                           "yet (Gemma 3: extra norms, local RoPE); use --backend cpu", m->arch->name);
        ft_log_info("%s: the GPU backends do not run it yet; running on the CPU", m->arch->name);
        gpu = 0;
    }
    if (gpu && !m->router_sigmoid && m->router_group_max && (m->n_group > 32 || m->n_group < 1)) {
        if (!opts->backend_auto) /* DeepSeek-V2's groups: the GPU router takes at most 32 */
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: %d expert groups; the GPU router takes at most "
                           "32; use --backend cpu", m->arch->name, m->n_group);
        ft_log_info("%s: the GPU backends do not run it; running on the CPU", m->arch->name);
        gpu = 0;
    }
    if (gpu && (m->arch->flags & FT_ARCH_V4)) { /* no CUDA compressors / hyper-connections yet */
        if (!opts->backend_auto)
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: the cuda and offload backends do not run it "
                           "yet (DeepSeek-V4's compressed attention and hyper-connections); use "
                           "--backend cpu", m->arch->name);
        ft_log_info("%s: the GPU backends do not run it yet; running on the CPU", m->arch->name);
        gpu = 0;
    }
    for (int l = 0; gpu && l < m->n_layers; l++) { /* expert formats without GPU kernels yet */
        const struct ft_layer *L = &m->layers[l];
        if (!L->is_moe) continue;
        for (int f = 0; gpu && f < FT_BANK_N_FAMILIES; f++) {
            if (ft_gpu_takes_experts(L->bank[f].schema->dtype)) continue;
            if (!opts->backend_auto)
                return ft_fail(FT_ERR_UNSUPPORTED, "%s experts: the cuda and offload backends do "
                               "not compute them yet (bf16, GGML blocks, NVFP4, FP8 blocks); use "
                               "--backend cpu", L->bank[f].schema->name);
            ft_log_info("%s experts: the GPU backends do not compute them yet; running on the CPU",
                        L->bank[f].schema->name);
            gpu = 0;
        }
    }
    struct ft_engine *e = calloc(1, sizeof *e);
    if (!e) return ft_fail(FT_ERR_OOM, "engine: out of memory");
    e->m = m;
    e->pool = pool;
    e->opts = *opts;
    if (!gpu) e->opts.backend = FT_BACKEND_CPU;
    ft_watchdog_init(&e->wd, "cpu forward", "swapping of the model's weights or an overloaded host",
                     FT_ENV_TEST_POOL_STALL);
    if (!gpu && e->wd.stall_k) ft_pool_stall(pool, e->wd.stall_k, e->wd.stall_ms);
    enum ft_status st = gpu ? pick_gpu_backend(m, &e->opts) : FT_OK;
    if (st != FT_OK) {
        free(e);
        return st;
    }
    if (e->opts.max_ctx <= 0)
        e->opts.max_ctx = m->cfg.max_position_embeddings > 0
                              ? FT_MIN(m->cfg.max_position_embeddings, 4096) : 4096;
    if (e->opts.max_chunk <= 0) e->opts.max_chunk = 512;
    e->rng = opts->seed ? opts->seed : 0x9e3779b97f4a7c15ull;
    int C = e->opts.max_chunk, H = m->hidden, k = m->top_k > 0 ? m->top_k : 1;
    e->q_dim = m->n_heads * m->head_dim;
    e->kv_dim = ft_model_kv_dim(m);
    e->max_i = FT_MAX(m->cfg.intermediate_size, m->shared_inter);
    int seq_blocks = (e->opts.max_ctx + FT_KV_BLOCK - 1) / FT_KV_BLOCK;
    if (e->opts.kv_tokens <= 0) e->opts.kv_tokens = e->opts.max_ctx;
    e->n_blocks = FT_MAX((e->opts.kv_tokens + FT_KV_BLOCK - 1) / FT_KV_BLOCK, seq_blocks);
    e->kv_of = malloc((size_t)m->n_layers * sizeof *e->kv_of);
    e->gdn_of = malloc((size_t)m->n_layers * sizeof *e->gdn_of);
    int n_gdn = 0, gated = 0;
    for (int l = 0; e->kv_of && e->gdn_of && l < m->n_layers; l++) {
        const struct ft_layer *L = &m->layers[l];
        e->kv_of[l] = L->gdn || L->v4 ? -1 : e->n_kv_layers++; /* V4: per-sequence state instead */
        e->gdn_of[l] = L->gdn ? n_gdn++ : -1;
        gated |= L->attn_gate;
    }
    size_t kv = (size_t)e->n_kv_layers * e->n_blocks * FT_KV_BLOCK * e->kv_dim;
    int att_w = FT_MAX(FT_MAX(e->q_dim, H), m->n_heads * m->mla_v); /* att doubles as the shared
                                                                        expert's [T, H] output */
    e->k_cache = malloc((gpu || !kv ? 1 : kv) * sizeof(float)); /* the GPU keeps its own cache */
    e->v_cache = malloc((gpu || m->mla || !kv ? 1 : kv) * sizeof(float)); /* MLA: one row per position */
    e->x = malloc((size_t)C * H * sizeof(float));
    e->xn = malloc((size_t)C * H * sizeof(float));
    e->y = malloc((size_t)C * H * sizeof(float));
    e->q = malloc((size_t)C * e->q_dim * sizeof(float));
    e->att = malloc((size_t)C * att_w * sizeof(float));
    e->k = malloc((size_t)C * e->kv_dim * sizeof(float));
    e->v = malloc((size_t)C * e->kv_dim * sizeof(float));
    e->gu = malloc((size_t)C * 2 * FT_MAX(e->max_i, 1) * sizeof(float));
    e->act = malloc((size_t)C * FT_MAX(e->max_i, 1) * sizeof(float));
    e->router = malloc((size_t)C * FT_MAX(m->n_experts, 1) * sizeof(float));
    e->top_ids = malloc((size_t)C * k * sizeof(int));
    e->top_w = malloc((size_t)C * k * sizeof(float));
    e->pos = malloc((size_t)C * sizeof(int32_t));
    e->sticky = malloc((size_t)m->n_layers * k * sizeof(int));
    e->free_blocks = malloc((size_t)e->n_blocks * sizeof(int32_t));
    e->refs = calloc((size_t)e->n_blocks, sizeof *e->refs);
    e->seq0_blocks = malloc((size_t)seq_blocks * sizeof(int32_t));
    e->tok_blocks = malloc((size_t)C * sizeof *e->tok_blocks);
    e->ids = malloc((size_t)C * sizeof(int32_t));
    e->xl = malloc((size_t)C * H * sizeof(float));
    e->seg_slot = malloc((size_t)C * sizeof *e->seg_slot);
    int hybrid_ok = 1;
    if (gated) hybrid_ok &= (e->qg = malloc((size_t)C * 2 * e->q_dim * sizeof(float))) != NULL;
    if (n_gdn) {
        const size_t Dk = (size_t)m->gdn_hk * m->gdn_dk, Dv = (size_t)m->gdn_hv * m->gdn_dv;
        e->g_qkv = malloc((size_t)C * (2 * Dk + Dv) * sizeof(float));
        e->g_z = malloc((size_t)C * Dv * sizeof(float));
        e->g_o = malloc((size_t)C * Dv * sizeof(float));
        e->g_b = malloc((size_t)C * m->gdn_hv * sizeof(float));
        e->g_a = malloc((size_t)C * m->gdn_hv * sizeof(float));
        hybrid_ok &= e->g_qkv && e->g_z && e->g_o && e->g_b && e->g_a;
        e->st_floats = ft_model_state_bytes(m) / sizeof(float);
    }
    if (m->mla) {
        const size_t nh = (size_t)m->n_heads, Lr = (size_t)m->mla_kv_lora, D = Lr + m->mla_rope;
        e->m_qa = malloc((size_t)C * FT_MAX(m->mla_q_lora, 1) * sizeof(float));
        e->m_kva = malloc((size_t)C * D * sizeof(float));
        e->m_qn = malloc((size_t)C * nh * FT_MAX(m->mla_nope, 1) * sizeof(float));
        e->m_ql = malloc((size_t)C * nh * D * sizeof(float));
        e->m_lat = malloc((size_t)C * nh * Lr * sizeof(float));
        hybrid_ok &= e->m_qa && e->m_kva && e->m_qn && e->m_ql && e->m_lat;
    }
    if (m->dsa_topk) { /* a query keeps at most its context */
        e->ix_k = FT_MIN(m->dsa_topk, e->opts.max_ctx);
        e->ix_q = malloc((size_t)C * m->dsa_heads * m->dsa_dim * sizeof(float));
        e->ix_key = malloc((size_t)C * m->dsa_dim * sizeof(float));
        e->ix_w = malloc((size_t)C * m->dsa_heads * sizeof(float));
        e->ix_sel = malloc((size_t)C * e->ix_k * sizeof(int32_t));
        e->ix_n = malloc((size_t)C * sizeof(int32_t));
        hybrid_ok &= e->ix_q && e->ix_key && e->ix_w && e->ix_sel && e->ix_n;
    }
    if (!hybrid_ok || !e->kv_of || !e->gdn_of || !e->seg_slot || !e->k_cache || !e->v_cache || !e->x || !e->xn || !e->y || !e->q || !e->att || !e->k ||
        !e->v || !e->gu || !e->act || !e->router || !e->top_ids || !e->top_w || !e->pos ||
        !e->sticky || !e->free_blocks || !e->refs || !e->seq0_blocks || !e->tok_blocks || !e->ids || !e->xl) {
        st = ft_fail(FT_ERR_OOM, "engine: out of memory for a %d-token KV cache (%.1f GiB); "
                     "lower --ctx-size", e->opts.max_ctx, 2.0 * kv * 4 / (1 << 30));
    }
    for (int i = 0; e->sticky && i < m->n_layers * k; i++) e->sticky[i] = -1;
    for (int b = 0; e->free_blocks && b < e->n_blocks; b++) e->free_blocks[b] = e->n_blocks - 1 - b;
    e->n_free = e->n_blocks;
    e->seq0_n_blocks = seq_blocks; /* taken from the pool at the first ft_engine_forward */
    int n8 = opts->cpu_act_fast && (!gpu || e->opts.backend == FT_BACKEND_OFFLOAD) ? ft_engine_fast_matrices(m) : 0;
    if (n8) ft_log_info("cpu: int8/bf16 activations for %d matrices (--cpu-act f32: exact fp32)", n8);
    if (st == FT_OK && !gpu && m->n_experts > 0 && opts->routing == FT_ROUTING_ZIPF) {
        /* synth_id's running sums of r^-S, once (the GPU draws from its own table) */
        if (!(e->zipf_cum = malloc((size_t)m->n_experts * sizeof *e->zipf_cum)))
            st = ft_fail(FT_ERR_OOM, "engine: out of memory");
        else
            ft_zipf_sums(m->n_experts, opts->routing_param, e->zipf_cum);
    }
    if (st == FT_OK && !gpu && opts->cpu_act_fast) { /* mm()'s buffer; ft_cpu_xq_bytes <= 2 K */
        int max_k = FT_MAX(FT_MAX(H, e->q_dim), FT_MAX(e->max_i, m->expert_inter));
        max_k = FT_MAX(max_k, FT_MAX(m->mla_kv_lora, m->mla_q_lora));
        if (m->v4) /* the hyper-connections' n H, the groups' inputs, o_b's G olr, q LoRA */
            max_k = FT_MAX(FT_MAX(max_k, m->v4->hc * H), FT_MAX(m->v4->groups * m->v4->o_lora, m->cfg.q_lora_rank));
        if (!(e->xq = malloc((size_t)C * 2 * max_k)))
            st = ft_fail(FT_ERR_OOM, "engine: out of memory for quantised activations");
    }
    if (st == FT_OK && m->v4 && !gpu) st = ft_v4_engine_init(e); /* sets st_floats */
    if (st == FT_OK && m->n_experts > 0) {
        st = ft_moe_exec_init(&e->moe, C, m->top_k, m->n_experts, H, m->expert_inter);
        if (st == FT_OK) ft_moe_exec_set_fast_act(e->moe, opts->cpu_act_fast);
        if (st == FT_OK) ft_moe_exec_set_watchdog(e->moe, 1); /* a hung step fails its requests */
    }
    if (st == FT_OK && gpu) {
        struct ft_gpu_opts go = {.device = e->opts.device, .vram_limit = e->opts.vram_limit,
                                 .max_ctx = e->opts.max_ctx, .max_chunk = C,
                                 .n_blocks = e->n_blocks, .max_seqs = FT_MIN(C, FT_GPU_MAX_SEQS),
                                 .graphs = !e->opts.no_graphs, .routing = e->opts.routing,
                                 .routing_param = e->opts.routing_param,
                                 .seed = e->rng,
                                 .offload = e->opts.backend == FT_BACKEND_OFFLOAD,
                                 .cache_slots = e->opts.moe_cache_slots,
                                 .cache_rate = e->opts.moe_cache_rate,
                                 .verify = e->opts.verify_copies, .copy_path = e->opts.copy_path,
                                 .moe_mode = e->opts.moe_mode,
                                 .pin_budget = e->opts.pin_budget,
                                 .cpu_layers = e->opts.cpu_layers,
                                 .cpu_act_fast = e->opts.cpu_act_fast,
                                 .cpu_threads = e->opts.moe_cpu_threads,
                                 .state_slots = n_gdn ? gpu_state_slots(e) : 0,
                                 .cache_policy = e->opts.cache_policy,
                                 .record_routing = e->opts.record_routing,
                                 .hot_set = e->opts.hot_set,
                                 .prefetch = e->opts.moe_prefetch,
                                 .pred_noise = e->opts.pred_noise};
        if (n_gdn && (!(e->st_key = malloc((size_t)go.state_slots * sizeof *e->st_key)) ||
                      !(e->st_table = calloc((size_t)go.state_slots, sizeof *e->st_table))))
            st = ft_fail(FT_ERR_OOM, "engine: out of memory");
        for (int q = 0; st == FT_OK && q < go.state_slots; q++) e->st_key[q] = -1;
        e->n_st = go.state_slots; /* fixed: the device holds the states */
        if (st == FT_OK) st = ft_gpu_init(&e->gpu, m, &go);
    }
    if (st != FT_OK) {
        ft_engine_free(e);
        return st;
    }
    *out = e;
    return FT_OK;
}

void ft_engine_free(struct ft_engine *e) {
    if (!e) return;
    free(e->top1_logits);
    ft_sampler_free(e->draw_smp);
    free(e->k_cache);
    free(e->v_cache);
    free(e->x);
    free(e->xn);
    free(e->y);
    free(e->q);
    free(e->att);
    free(e->k);
    free(e->v);
    free(e->gu);
    free(e->act);
    free(e->router);
    free(e->top_ids);
    free(e->top_w);
    free(e->pos);
    free(e->sticky);
    free(e->zipf_cum);
    free(e->free_blocks);
    free(e->refs);
    free(e->seq0_blocks);
    free(e->tok_blocks);
    free(e->blk_copy);
    free(e->ids);
    free(e->xl);
    free(e->kv_of), free(e->gdn_of), free(e->seg_slot), free(e->qg);
    free(e->g_qkv), free(e->g_z), free(e->g_o), free(e->g_b), free(e->g_a);
    free(e->st), free(e->st_key), free(e->st_table);
    free(e->m_qa), free(e->m_kva), free(e->m_qn), free(e->m_ql), free(e->m_lat);
    free(e->ix_q), free(e->ix_key), free(e->ix_w), free(e->ix_sel), free(e->ix_n);
    ft_moe_exec_free(e->moe);
    ft_v4_engine_free(e);
    free(e->xq);
    ft_gpu_free(e->gpu);
    free(e);
}

const char *ft_engine_backend(const struct ft_engine *e) {
    return !e->gpu ? "cpu" : e->opts.backend == FT_BACKEND_OFFLOAD ? "offload" : "cuda";
}
size_t ft_engine_vram_used(const struct ft_engine *e) { return ft_gpu_vram_used(e->gpu); }
void ft_engine_offload_stats(const struct ft_engine *e, struct ft_gpu_offload_stats *out) {
    ft_gpu_offload_stats(e->gpu, out);
}
int ft_engine_residency_stats(const struct ft_engine *e, struct ft_residency_stats *out) {
    return ft_gpu_residency_stats(e->gpu, out);
}

void ft_engine_reset(struct ft_engine *e) { e->n_past = 0; }
int ft_engine_truncate(struct ft_engine *e, int n) {
    /* a recurrent state cannot go back: a hybrid model keeps all or nothing */
    if (n >= 0 && n < e->n_past) e->n_past = e->m->n_gdn || e->m->v4 ? 0 : n; /* V4: its window */
    return e->n_past;
}
int ft_engine_n_past(const struct ft_engine *e) { return e->n_past; }
int ft_engine_max_ctx(const struct ft_engine *e) { return e->opts.max_ctx; }
int ft_engine_max_chunk(const struct ft_engine *e) { return e->opts.max_chunk; }
int ft_engine_on_gpu(const struct ft_engine *e) { return e->gpu != NULL; }

int ft_engine_draws_on_device(const struct ft_engine *e) { return e->gpu != NULL; }

void ft_engine_draw_stats(const struct ft_engine *e, long *rows, long *on_host) {
    *rows = e->draw_rows, *on_host = e->draw_host;
}

int ft_engine_max_seqs(const struct ft_engine *e) {
    return e->gpu ? FT_MIN(e->opts.max_chunk, FT_GPU_MAX_SEQS) : e->opts.max_chunk;
}

double ft_engine_mean_distinct_experts(const struct ft_engine *e) {
    return e->distinct_n ? e->distinct_sum / (double)e->distinct_n : 0.0;
}

void ft_engine_reset_stats(struct ft_engine *e) {
    e->distinct_sum = 0;
    e->distinct_n = 0;
}

/* Eight independent lanes (vector code at -O2): the one-pass form is a chain of dependent
 * compares; for ft_argmax's (if x[i] > x[best]) of dependent loads, 550 us over a 152k vocab
 * against 34. */
float ft_max_f32(const float *x, int n) {
    float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    float mx = -INFINITY;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int j = 0; j < 8; j++) mx = m[j] > mx ? m[j] : mx;
    return mx;
}

/* The maximum, then its first position. */
int ft_argmax(const float *x, int n) {
    float mx = ft_max_f32(x, n);
    for (int i = 0; i < n; i++)
        if (x[i] == mx) return i;
    return 0; /* every value NaN */
}
