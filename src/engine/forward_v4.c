/* forward_v4.c — DeepSeek-V4's layers on the CPU backend (model/deepseek_v4.c says what they
 * are): the hyper-connections around each sublayer, the shared-K=V attention over a sliding
 * window plus compressed entries (CSA with its lightning indexer, HCA), the hash-routed /
 * sqrtsoftplus MoE with clamped SwiGLU.
 *
 * The KV cache of a sequence is not per position: each sequence owns one state slot
 * (forward.c's state_slots, as the Gated DeltaNet layers' recurrent state: found by the
 * sequence's first KV block, freed with its blocks), holding per layer
 *   the window: the last sliding_window K=V rows (position p at row p % W);
 *   the compressor's pending rows: its kv and gate projections of the last ratio (HCA) or
 *     2 ratio (CSA: the previous window's first series joins each entry) positions;
 *   the compressed entries emitted so far, one per ratio positions (entry w from positions
 *     [w ratio, (w + 1) ratio), rotated at position w ratio), up to max_ctx / ratio of them;
 *   CSA: the indexer's own pending rows and compressed keys, alike at index_head_dim.
 * A query at p sees its window (p - W, p] and the entries w < (p + 1) / ratio: those all of
 * whose positions it has seen; a CSA query only the index_topk of them its indexer scores
 * best (every one while there are fewer; ties: the lower entry). Entries are exact functions of
 * positions, so any chunking of a prompt gives the same numbers.
 * Engine thread; attention and the indexer's scores split over the pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/status.h"
#include "core/sys.h"
#include "engine/forward_impl.h"
#include "moe/cpu_exec.h"

#define mm ft_engine_mm

struct ft_v4_scratch {
    size_t *off_win, *off_ring, *off_comp, *off_iring, *off_icomp; /* [L] floats into a slot */
    int max_keys;               /* window + the most compressed entries a query reads */
    int topk;                   /* the indexer's k (<= the entries a context holds) */
    float *xs;                  /* [C, n H] the residual streams */
    float *flat;                /* [C, n H] normalised streams, the new streams */
    float *mix;                 /* [C, (2 + n) n] */
    float *pre, *post, *comb;   /* [C, n], [C, n], [C, n n] */
    float *qa;                  /* [C, q_lora] */
    float *kv;                  /* [C, hd] */
    float *gin, *oa;            /* [C, nh hd / G] one group's inputs, [C, G olr] */
    float *ckv, *cg;            /* [C, 2 hd] the compressor's projections */
    float *ikv, *ig;            /* [C, 2 dI] the indexer's */
    float *iq, *iw;             /* [C, nI dI] its queries, [C, nI] their weights */
    float *pooled;              /* [2 hd] an entry being made */
    int32_t *sel, *nsel;        /* [C, topk] each query's entries (ascending), [C] their count */
    int *tseg;                  /* [C] each token's segment */
    int *seg_t0;                /* [C] each segment's first token */
};

static inline float *slot_of(const struct ft_engine *e, int seg) {
    return e->st + (size_t)e->seg_slot[seg] * e->st_floats;
}

enum ft_status ft_v4_engine_init(struct ft_engine *e) {
    const struct ft_model *m = e->m;
    const struct ft_v4 *z = m->v4;
    const int C = e->opts.max_chunk, Lc = m->n_layers, H = m->hidden, hd = m->head_dim, n = z->hc;
    const int ctx = e->opts.max_ctx, dI = z->idx_dim, nI = z->idx_heads, W = z->window;
    struct ft_v4_scratch *v = calloc(1, sizeof *v);
    if (!v) return ft_fail(FT_ERR_OOM, "engine: out of memory");
    e->v4 = v;
    v->off_win = calloc((size_t)Lc * 5, sizeof(size_t));
    if (!v->off_win) return ft_fail(FT_ERR_OOM, "engine: out of memory");
    v->off_ring = v->off_win + Lc, v->off_comp = v->off_ring + Lc;
    v->off_iring = v->off_comp + Lc, v->off_icomp = v->off_iring + Lc;
    v->topk = FT_MIN(z->idx_topk, FT_MAX(ctx / z->csa, 1));
    v->max_keys = W + FT_MAX(v->topk, ctx / z->hca + 1);
    size_t off = 0;
    for (int l = 0; l < Lc; l++) {
        const int kind = m->layers[l].v4->kind;
        v->off_win[l] = off;
        off += (size_t)W * hd;
        if (kind == 3) {
            v->off_ring[l] = off;
            off += (size_t)z->hca * 2 * hd;
            v->off_comp[l] = off;
            off += (size_t)(ctx / z->hca) * hd;
        } else if (kind == 2) {
            const size_t r2 = 2 * (size_t)z->csa;
            v->off_ring[l] = off;
            off += r2 * 4 * hd;
            v->off_comp[l] = off;
            off += (size_t)(ctx / z->csa) * hd;
            v->off_iring[l] = off;
            off += r2 * 4 * dI;
            v->off_icomp[l] = off;
            off += (size_t)(ctx / z->csa) * dI;
        }
    }
    e->st_floats = off;
    const size_t nH = (size_t)n * H, ql = (size_t)FT_MAX(m->cfg.q_lora_rank, 1);
    v->xs = malloc((size_t)C * nH * sizeof(float));
    v->flat = malloc((size_t)C * nH * sizeof(float));
    v->mix = malloc((size_t)C * (2 + n) * n * sizeof(float));
    v->pre = malloc((size_t)C * n * sizeof(float));
    v->post = malloc((size_t)C * n * sizeof(float));
    v->comb = malloc((size_t)C * n * n * sizeof(float));
    v->qa = malloc((size_t)C * ql * sizeof(float));
    v->kv = malloc((size_t)C * hd * sizeof(float));
    v->gin = malloc((size_t)C * m->n_heads * hd / z->groups * sizeof(float));
    v->oa = malloc((size_t)C * z->groups * z->o_lora * sizeof(float));
    v->ckv = malloc((size_t)C * 2 * hd * sizeof(float));
    v->cg = malloc((size_t)C * 2 * hd * sizeof(float));
    v->ikv = malloc((size_t)C * 2 * dI * sizeof(float));
    v->ig = malloc((size_t)C * 2 * dI * sizeof(float));
    v->iq = malloc((size_t)C * nI * dI * sizeof(float));
    v->iw = malloc((size_t)C * nI * sizeof(float));
    v->pooled = malloc((size_t)2 * FT_MAX(hd, dI) * sizeof(float));
    v->sel = malloc((size_t)C * v->topk * sizeof(int32_t));
    v->nsel = malloc((size_t)C * sizeof(int32_t));
    v->tseg = malloc((size_t)C * sizeof(int));
    v->seg_t0 = malloc((size_t)C * sizeof(int));
    if (!v->xs || !v->flat || !v->mix || !v->pre || !v->post || !v->comb || !v->qa || !v->kv || !v->gin ||
        !v->oa || !v->ckv || !v->cg || !v->ikv || !v->ig || !v->iq || !v->iw || !v->pooled || !v->sel ||
        !v->nsel || !v->tseg || !v->seg_t0)
        return ft_fail(FT_ERR_OOM, "engine: out of memory for DeepSeek-V4's scratch");
    return FT_OK;
}

void ft_v4_engine_free(struct ft_engine *e) {
    struct ft_v4_scratch *v = e->v4;
    if (!v) return;
    free(v->off_win);
    free(v->xs), free(v->flat), free(v->mix), free(v->pre), free(v->post), free(v->comb);
    free(v->qa), free(v->kv), free(v->gin), free(v->oa), free(v->ckv), free(v->cg), free(v->ikv);
    free(v->ig), free(v->iq), free(v->iw), free(v->pooled), free(v->sel), free(v->nsel);
    free(v->tseg), free(v->seg_t0);
    free(v);
    e->v4 = NULL;
}

/* RoPE on the last rd of each head's hd dims, adjacent pairs (2i, 2i + 1) at angle pos inv[i];
 * sign -1 rotates back (the attention output's). cos and sin times msc. */
static void rope_tail(float *x, int ld, int n_heads, int hd, int rd, const int32_t *pos, int T,
                      const float *inv, float msc, float sign) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < rd / 2; i++) {
            const float a = (float)pos[t] * inv[i], c = cosf(a) * msc, s = sign * sinf(a) * msc;
            for (int h = 0; h < n_heads; h++) {
                float *p = x + (size_t)t * ld + (size_t)h * hd + hd - rd + 2 * i;
                const float a0 = p[0], a1 = p[1];
                p[0] = a0 * c - a1 * s;
                p[1] = a1 * c + a0 * s;
            }
        }
}

/* x * rsqrt(mean(x^2) + eps), no weight */
static void rms_plain(float *y, const float *x, int n, float eps) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * r;
}

/* ---- hyper-connections ---- */

/* The mapping of site s (0 attention, 1 MLP) for every token: pre (the streams' collapse),
 * post (the sublayer output's placement), comb (the streams' mix, Sinkhorn-normalised); the
 * collapsed streams into e->x. */
static void hc_pre(struct ft_engine *e, const struct ft_v4_layer *X, int s, int T) {
    const struct ft_model *m = e->m;
    const struct ft_v4 *z = m->v4;
    struct ft_v4_scratch *v = e->v4;
    const int n = z->hc, H = m->hidden, M = (2 + n) * n;
    const float eps = z->hc_eps, *sc = X->hc_scale[s], *b = X->hc_base[s];
    for (int t = 0; t < T; t++) rms_plain(v->flat + (size_t)t * n * H, v->xs + (size_t)t * n * H, n * H, m->rms_eps);
    mm(e, v->mix, M, v->flat, &X->hc_fn[s], NULL, T);
    for (int t = 0; t < T; t++) {
        const float *mx = v->mix + (size_t)t * M;
        float *pre = v->pre + (size_t)t * n, *post = v->post + (size_t)t * n, *cb = v->comb + (size_t)t * n * n;
        for (int h = 0; h < n; h++) {
            pre[h] = ft_sigmoid(mx[h] * sc[0] + b[h]) + eps;
            post[h] = 2.0f * ft_sigmoid(mx[n + h] * sc[1] + b[n + h]);
        }
        for (int i = 0; i < n; i++) { /* softmax over each row, + eps */
            float *row = cb + (size_t)i * n, mxv = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                row[j] = mx[2 * n + i * n + j] * sc[2] + b[2 * n + i * n + j];
                mxv = row[j] > mxv ? row[j] : mxv;
            }
            for (int j = 0; j < n; j++) sum += row[j] = expf(row[j] - mxv);
            for (int j = 0; j < n; j++) row[j] = row[j] / sum + eps;
        }
        for (int it = 0; it < z->hc_iters; it++) { /* columns first, then rows and columns */
            if (it > 0)
                for (int i = 0; i < n; i++) {
                    float sum = 0;
                    for (int j = 0; j < n; j++) sum += cb[i * n + j];
                    for (int j = 0; j < n; j++) cb[i * n + j] /= sum + eps;
                }
            for (int j = 0; j < n; j++) {
                float sum = 0;
                for (int i = 0; i < n; i++) sum += cb[i * n + j];
                for (int i = 0; i < n; i++) cb[i * n + j] /= sum + eps;
            }
        }
        float *x = e->x + (size_t)t * H;
        const float *st = v->xs + (size_t)t * n * H;
        for (int d = 0; d < H; d++) {
            float a = 0;
            for (int h = 0; h < n; h++) a += pre[h] * st[(size_t)h * H + d];
            x[d] = a;
        }
    }
}

/* The new streams: stream k = post[k] y + sum_j comb[j][k] stream j. */
static void hc_post(struct ft_engine *e, int T) {
    const struct ft_model *m = e->m;
    struct ft_v4_scratch *v = e->v4;
    const int n = m->v4->hc, H = m->hidden;
    for (int t = 0; t < T; t++) {
        const float *st = v->xs + (size_t)t * n * H, *y = e->y + (size_t)t * H;
        const float *post = v->post + (size_t)t * n, *cb = v->comb + (size_t)t * n * n;
        float *o = v->flat + (size_t)t * n * H;
        for (int k = 0; k < n; k++)
            for (int d = 0; d < H; d++) {
                float a = post[k] * y[d];
                for (int j = 0; j < n; j++) a += cb[j * n + k] * st[(size_t)j * H + d];
                o[(size_t)k * H + d] = a;
            }
    }
    memcpy(v->xs, v->flat, (size_t)T * n * H * sizeof(float));
}

/* The final collapse (hc_head) into e->x. */
static void hc_head(struct ft_engine *e, int T) {
    const struct ft_model *m = e->m;
    const struct ft_v4 *z = m->v4;
    struct ft_v4_scratch *v = e->v4;
    const int n = z->hc, H = m->hidden;
    for (int t = 0; t < T; t++) rms_plain(v->flat + (size_t)t * n * H, v->xs + (size_t)t * n * H, n * H, m->rms_eps);
    mm(e, v->mix, n, v->flat, &z->hc_head_fn, NULL, T);
    for (int t = 0; t < T; t++) {
        float pre[n];
        for (int h = 0; h < n; h++)
            pre[h] = ft_sigmoid(v->mix[(size_t)t * n + h] * z->hc_head_scale[0] + z->hc_head_base[h]) + z->hc_eps;
        const float *st = v->xs + (size_t)t * n * H;
        for (int d = 0; d < H; d++) {
            float a = 0;
            for (int h = 0; h < n; h++) a += pre[h] * st[(size_t)h * H + d];
            e->x[(size_t)t * H + d] = a;
        }
    }
}

/* ---- compressors ---- */

/* One compressed entry of width d from its slots: per channel the softmax over the slots of
 * gate + position bias, the kv weighted by it; then the RMSNorm (norm) and RoPE at position
 * w ratio on the last rot dims, into out. CSA (two = 1): slots [0, r) the previous window's
 * first series (kv dims [0, d), gate [2d, 3d); none for w = 0), slots [r, 2r) this window's
 * second (kv [d, 2d), gate [3d, 4d)); rows 4d wide, position p's at ring row p % 2r. HCA: the
 * window's r rows [kv d | gate d], p's at p % r. ape: [r, d] (HCA) or [r, 2d] (CSA). */
static void emit_entry(const struct ft_engine *e, const float *ring, const float *ape, const float *norm,
                       int d, int r, int two, int w, float *pooled, float *out) {
    const struct ft_model *m = e->m;
    const struct ft_v4 *z = m->v4;
    const int rw = two ? 4 * d : 2 * d, pw = two ? 2 * d : d;
    for (int c = 0; c < d; c++) {
        float mx = -INFINITY;
        for (int pass = 0; pass < 2; pass++) { /* the max, then the weighted sum */
            float sum = 0, acc = 0;
            for (int sl = two && w == 0 ? r : 0; sl < (two ? 2 * r : r); sl++) {
                const int prev = two && sl < r, j = prev ? sl : sl - (two ? r : 0);
                const long p = (long)(prev ? w - 1 : w) * r + j;
                const float *row = ring + (size_t)(p % (two ? 2 * r : r)) * rw;
                const int kc = prev || !two ? c : d + c;
                const float g = row[(two ? 2 * d : d) + kc] + ape[(size_t)j * pw + kc];
                if (!pass) {
                    mx = g > mx ? g : mx;
                } else {
                    const float x = expf(g - mx);
                    sum += x;
                    acc += x * row[kc];
                }
            }
            if (pass) pooled[c] = acc / sum;
        }
    }
    ft_cpu_rmsnorm(out, pooled, norm, 1, d, m->rms_eps);
    const int32_t p0 = w * r;
    rope_tail(out, d, 1, d, z->rot, &p0, 1, z->inv_freq_c, z->mscale_c, 1.0f);
}

/* Layer l's compressor (and CSA's indexer): every token's projections into its sequence's
 * pending rows, an entry emitted at each window's last position. */
static void compress(struct ft_engine *e, const struct ft_layer *L, int l, const struct ft_seg *segs,
                     int n_segs, int T) {
    const struct ft_model *m = e->m;
    const struct ft_v4 *z = m->v4;
    const struct ft_v4_layer *X = L->v4;
    struct ft_v4_scratch *v = e->v4;
    const int hd = m->head_dim, dI = z->idx_dim, csa = X->kind == 2, r = csa ? z->csa : z->hca;
    const int ce = csa ? 2 * hd : hd;
    mm(e, v->ckv, ce, e->xn, &X->c_kv, NULL, T);
    mm(e, v->cg, ce, e->xn, &X->c_gate, NULL, T);
    if (csa) {
        mm(e, v->ikv, 2 * dI, e->xn, &X->i_kv, NULL, T);
        mm(e, v->ig, 2 * dI, e->xn, &X->i_gate, NULL, T);
    }
    for (int s = 0, t0 = 0; s < n_segs; t0 += segs[s++].n) {
        float *slot = slot_of(e, s);
        float *ring = slot + v->off_ring[l], *comp = slot + v->off_comp[l];
        float *iring = slot + v->off_iring[l], *icomp = slot + v->off_icomp[l];
        for (int t = t0; t < t0 + segs[s].n; t++) {
            const int p = e->pos[t], ri = p % (csa ? 2 * r : r);
            memcpy(ring + (size_t)ri * 2 * ce, v->ckv + (size_t)t * ce, (size_t)ce * sizeof(float));
            memcpy(ring + (size_t)ri * 2 * ce + ce, v->cg + (size_t)t * ce, (size_t)ce * sizeof(float));
            if (csa) {
                memcpy(iring + (size_t)ri * 4 * dI, v->ikv + (size_t)t * 2 * dI, (size_t)2 * dI * sizeof(float));
                memcpy(iring + (size_t)ri * 4 * dI + 2 * dI, v->ig + (size_t)t * 2 * dI, (size_t)2 * dI * sizeof(float));
            }
            if ((p + 1) % r) continue;
            const int w = p / r;
            emit_entry(e, ring, X->c_ape, X->c_norm, hd, r, csa, w, v->pooled, comp + (size_t)w * hd);
            if (csa) emit_entry(e, iring, X->i_ape, X->i_norm, dI, r, 1, w, v->pooled, icomp + (size_t)w * dI);
        }
    }
}

/* ---- the lightning indexer (CSA) ---- */

struct index_job {
    struct ft_engine *e;
    const struct ft_seg *segs;
    int l;
};

struct scored {
    float s;
    int32_t w;
};

static int by_score(const void *a, const void *b) { /* descending; ties: the lower entry */
    const struct scored *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? 1 : -1;
    return x->w - y->w;
}

static int by_entry(const void *a, const void *b) {
    return *(const int32_t *)a - *(const int32_t *)b;
}

static void index_task(void *ctx, int i, int nt) {
    /* copied: the job lives on the caller's stack, gone if a watchdog abandons it while this
     * task runs on (forward.c: the watchdog) */
    const struct index_job jc = *(const struct index_job *)ctx, *j = &jc;
    struct ft_engine *e = j->e;
    const struct ft_model *m = e->m;
    const struct ft_v4 *z = m->v4;
    struct ft_v4_scratch *v = e->v4;
    const int nI = z->idx_heads, dI = z->idx_dim, k = v->topk;
    const float scale = 1.0f / sqrtf((float)dI);
    long lo, hi;
    ft_split(e->step_tokens, i, nt, &lo, &hi);
    struct scored *sc = NULL;
    int cap = 0;
    for (long t = lo; t < hi; t++) {
        const int p = e->pos[t], nvis = (p + 1) / z->csa;
        int32_t *sel = v->sel + (size_t)t * k;
        if (nvis <= k) { /* every entry */
            for (int w = 0; w < nvis; w++) sel[w] = w;
            v->nsel[t] = nvis;
            continue;
        }
        if (nvis > cap) {
            struct scored *nsc = realloc(sc, (size_t)nvis * sizeof *sc);
            if (!nsc) { /* keep the first k: wrong but defined; cannot happen for sane sizes */
                for (int w = 0; w < k; w++) sel[w] = w;
                v->nsel[t] = k;
                continue;
            }
            sc = nsc, cap = nvis;
        }
        const float *icomp = slot_of(e, v->tseg[t]) + v->off_icomp[j->l];
        const float *q = v->iq + (size_t)t * nI * dI, *hw = v->iw + (size_t)t * nI;
        for (int w = 0; w < nvis; w++) {
            const float *key = icomp + (size_t)w * dI;
            float s = 0;
            for (int h = 0; h < nI; h++) {
                const float *qh = q + (size_t)h * dI;
                float d = 0;
                for (int c = 0; c < dI; c++) d += qh[c] * key[c];
                s += (d > 0 ? d * scale : 0.0f) * hw[h];
            }
            sc[w] = (struct scored){s, w};
        }
        qsort(sc, (size_t)nvis, sizeof *sc, by_score);
        for (int w = 0; w < k; w++) sel[w] = sc[w].w;
        qsort(sel, (size_t)k, sizeof *sel, by_entry);
        v->nsel[t] = k;
    }
    free(sc);
}

/* ---- attention ---- */

struct attn_job {
    struct ft_engine *e;
    const struct ft_layer *L;
    const struct ft_seg *segs;
    int l;
};

static void attn_task(void *ctx, int i, int nt) {
    const struct attn_job jc = *(const struct attn_job *)ctx, *j = &jc; /* (copied: index_task) */
    struct ft_engine *e = j->e;
    const struct ft_model *m = e->m;
    const struct ft_v4 *z = m->v4;
    struct ft_v4_scratch *v = e->v4;
    const int nh = m->n_heads, hd = m->head_dim, W = z->window, kind = j->L->v4->kind;
    const float scale = 1.0f / sqrtf((float)hd);
    long lo, hi;
    ft_split((long)e->step_tokens * nh, i, nt, &lo, &hi);
    if (lo >= hi) return;
    const float **keys = malloc((size_t)v->max_keys * sizeof *keys);
    float *lg = malloc((size_t)v->max_keys * sizeof *lg);
    if (!keys || !lg) { /* cannot happen for sane sizes: the output stays as it was */
        free(keys), free(lg);
        return;
    }
    int last_t = -1, nk = 0;
    for (long it = lo; it < hi; it++) {
        const int t = (int)(it / nh), h = (int)(it % nh);
        if (t != last_t) { /* the token's keys: its window, then its compressed entries */
            const int s = v->tseg[t], p = e->pos[t], pos0 = j->segs[s].pos0, t0 = v->seg_t0[s];
            const float *slot = slot_of(e, s), *win = slot + v->off_win[j->l];
            nk = 0;
            for (int q = p - W + 1 > 0 ? p - W + 1 : 0; q <= p; q++)
                keys[nk++] = q >= pos0 ? v->kv + (size_t)(t0 + q - pos0) * hd : win + (size_t)(q % W) * hd;
            const float *comp = slot + v->off_comp[j->l];
            if (kind == 3)
                for (int w = 0; w < (p + 1) / z->hca; w++) keys[nk++] = comp + (size_t)w * hd;
            else if (kind == 2)
                for (int x = 0; x < v->nsel[t]; x++) keys[nk++] = comp + (size_t)v->sel[(size_t)t * v->topk + x] * hd;
            last_t = t;
        }
        const float *q = e->q + ((size_t)t * nh + h) * hd;
        float mx = j->L->sinks[h];
        for (int x = 0; x < nk; x++) {
            float d = 0;
            for (int c = 0; c < hd; c++) d += q[c] * keys[x][c];
            lg[x] = d * scale;
            mx = lg[x] > mx ? lg[x] : mx;
        }
        float sum = expf(j->L->sinks[h] - mx);
        for (int x = 0; x < nk; x++) sum += lg[x] = expf(lg[x] - mx);
        float *o = e->att + ((size_t)t * nh + h) * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int x = 0; x < nk; x++) {
            const float pw = lg[x] / sum;
            for (int c = 0; c < hd; c++) o[c] += pw * keys[x][c];
        }
    }
    free(keys), free(lg);
}

static void attention(struct ft_engine *e, const struct ft_layer *L, int l, const struct ft_seg *segs,
                      int n_segs, int T) {
    const struct ft_model *m = e->m;
    const struct ft_v4 *z = m->v4;
    const struct ft_v4_layer *X = L->v4;
    struct ft_v4_scratch *v = e->v4;
    const int nh = m->n_heads, hd = m->head_dim, ql = m->cfg.q_lora_rank, rd = z->rot, W = z->window;
    const int G = z->groups, olr = z->o_lora, gi = nh * hd / G;
    const float *inv = X->kind == 1 ? m->inv_freq : z->inv_freq_c;
    const float msc = X->kind == 1 ? m->rope_mscale : z->mscale_c;
    mm(e, v->qa, ql, e->xn, &L->q_a, NULL, T);
    ft_cpu_rmsnorm(v->qa, v->qa, L->q_a_norm, T, ql, m->rms_eps);
    mm(e, e->q, nh * hd, v->qa, &L->q_b, NULL, T);
    for (int r = 0; r < T * nh; r++) rms_plain(e->q + (size_t)r * hd, e->q + (size_t)r * hd, hd, m->rms_eps);
    rope_tail(e->q, nh * hd, nh, hd, rd, e->pos, T, inv, msc, 1.0f);
    mm(e, v->kv, hd, e->xn, &X->kv, NULL, T);
    ft_cpu_rmsnorm(v->kv, v->kv, X->kv_norm, T, hd, m->rms_eps);
    rope_tail(v->kv, hd, 1, hd, rd, e->pos, T, inv, msc, 1.0f);
    if (X->kind >= 2) compress(e, L, l, segs, n_segs, T);
    if (X->kind == 2) {
        const int nI = z->idx_heads, dI = z->idx_dim;
        mm(e, v->iq, nI * dI, v->qa, &L->idx_wq, NULL, T);
        rope_tail(v->iq, nI * dI, nI, dI, rd, e->pos, T, z->inv_freq_c, z->mscale_c, 1.0f);
        mm(e, v->iw, nI, e->xn, &L->idx_w, NULL, T);
        const float hs = 1.0f / sqrtf((float)nI);
        for (int x = 0; x < T * nI; x++) v->iw[x] *= hs;
        struct index_job ij = {e, segs, l};
        ft_pool_run(e->pool, index_task, &ij);
    }
    struct attn_job aj = {e, L, segs, l};
    ft_pool_run(e->pool, attn_task, &aj);
    for (int s = 0, t0 = 0; s < n_segs; t0 += segs[s++].n) { /* the window keeps the last W rows */
        float *win = slot_of(e, s) + v->off_win[l];
        for (int t = t0 + FT_MAX(segs[s].n - W, 0); t < t0 + segs[s].n; t++)
            memcpy(win + (size_t)(e->pos[t] % W) * hd, v->kv + (size_t)t * hd, (size_t)hd * sizeof(float));
    }
    rope_tail(e->att, nh * hd, nh, hd, rd, e->pos, T, inv, msc, -1.0f); /* V picked up the rotation */
    for (int g = 0; g < G; g++) { /* group g's heads through its o_a rows */
        for (int t = 0; t < T; t++)
            memcpy(v->gin + (size_t)t * gi, e->att + (size_t)t * nh * hd + (size_t)g * gi, (size_t)gi * sizeof(float));
        struct ft_weight w = ft_weight_rows(&X->o_a, g * olr, olr);
        mm(e, v->oa + (size_t)g * olr, G * olr, v->gin, &w, NULL, T);
    }
    mm(e, e->y, m->hidden, v->oa, &X->o_b, NULL, T);
}

/* ---- MoE ---- */

/* FT_OK, or the executor's watchdog error (the step abandoned) */
static enum ft_status moe(struct ft_engine *e, const struct ft_layer *L, int l, int T) {
    const struct ft_model *m = e->m;
    const struct ft_v4 *z = m->v4;
    const struct ft_v4_layer *X = L->v4;
    const int H = m->hidden, E = m->n_experts, k = m->top_k, Is = m->shared_inter;
    mm(e, e->router, E, e->xn, &L->router, NULL, T);
    if (ft_pool_watch_tripped(e->pool)) return FT_ERR_BUSY; /* no router logits to route by */
    if (e->opts.routing != FT_ROUTING_MODEL) {
        ft_engine_route(e, l, T); /* benchmarks: synthetic ids */
    } else {
        for (int t = 0; t < T; t++) {
            float *p = e->router + (size_t)t * E, sel[E], val[k];
            int *ids = e->top_ids + (size_t)t * k;
            float *w = e->top_w + (size_t)t * k;
            if (z->scoring == 0) ft_cpu_softmax(p, E);
            for (int x = 0; x < E && z->scoring; x++)
                p[x] = z->scoring == 1 ? ft_sigmoid(p[x]) : sqrtf(p[x] > 20.0f ? p[x] : log1pf(expf(p[x])));
            if (X->hash) {
                for (int j = 0; j < k; j++) ids[j] = X->tid2eid[(size_t)e->ids[t] * k + j];
            } else {
                for (int x = 0; x < E; x++) sel[x] = p[x] + (L->router_score_bias ? L->router_score_bias[x] : 0.0f);
                ft_cpu_topk(sel, E, k, ids, val);
            }
            float sum = 0;
            for (int j = 0; j < k; j++) sum += w[j] = p[ids[j]];
            for (int j = 0; j < k; j++) w[j] = w[j] / (sum + 1e-20f) * m->routed_scale;
        }
    }
    memset(e->y, 0, (size_t)T * H * sizeof(float));
    int d = ft_moe_exec_run(e->moe, e->pool, &L->bank[FT_BANK_GATE_UP], &L->bank[FT_BANK_DOWN], &L->act,
                            e->xn, e->top_ids, e->top_w, T, k, e->y);
    if (d < 0) {
        e->exec_failed = 1;
        return FT_ERR_BUSY;
    }
    e->distinct_sum += d;
    e->distinct_n++;
    mm(e, e->gu, 2 * Is, e->xn, &L->sh_gate, NULL, T);
    mm(e, e->gu + Is, 2 * Is, e->xn, &L->sh_up, NULL, T);
    ft_cpu_swiglu(e->act, e->gu, T, Is, FT_SWIGLU_CLAMP, z->swiglu, 0.0f);
    mm(e, e->att, H, e->act, &L->sh_down, NULL, T);
    ft_cpu_add(e->y, e->att, (size_t)T * H);
    return FT_OK;
}

enum ft_status ft_v4_forward(struct ft_engine *e, const struct ft_seg *segs, int n_segs) {
    const struct ft_model *m = e->m;
    struct ft_v4_scratch *v = e->v4;
    const int H = m->hidden, n = m->v4->hc, T = e->step_tokens;
    for (int s = 0, t0 = 0; s < n_segs; t0 += segs[s++].n) {
        v->seg_t0[s] = t0;
        for (int t = t0; t < t0 + segs[s].n; t++) v->tseg[t] = s;
    }
    ft_cpu_embed(e->x, m->embed.data, m->embed.dtype, e->ids, T, H);
    for (int t = 0; t < T; t++) /* every stream starts as the embedding */
        for (int h = 0; h < n; h++)
            memcpy(v->xs + ((size_t)t * n + h) * H, e->x + (size_t)t * H, (size_t)H * sizeof(float));
    for (int l = 0; l < m->n_layers; l++) {
        const struct ft_layer *L = &m->layers[l];
        hc_pre(e, L->v4, 0, T);
        ft_cpu_rmsnorm(e->xn, e->x, L->attn_norm, T, H, m->rms_eps);
        attention(e, L, l, segs, n_segs, T);
        if (ft_pool_watch_tripped(e->pool)) return FT_ERR_BUSY; /* a pool job abandoned */
        hc_post(e, T);
        hc_pre(e, L->v4, 1, T);
        ft_cpu_rmsnorm(e->xn, e->x, L->ffn_norm, T, H, m->rms_eps);
        enum ft_status st = moe(e, L, l, T);
        if (st != FT_OK) return st;
        if (ft_pool_watch_tripped(e->pool)) return FT_ERR_BUSY;
        hc_post(e, T);
    }
    hc_head(e, T);
    return FT_OK;
}
