/* sample.c — the sampler. Penalty state is a per-vocabulary count array (prompt presence and
 * generated counts); filters work on a sorted copy of the candidates that can survive them,
 * found without sorting the vocabulary (a 152k-vocab qsort took 19 ms a token). */
#include "engine/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/timer.h"
#include "engine/forward.h"
#include "core/checksum.h"

struct ft_sampler {
    struct ft_sampling p;
    int vocab;
    uint64_t rng;
    uint8_t *in_prompt;   /* [vocab] */
    int32_t *n_generated; /* [vocab] */
    struct cand { float logit; int32_t id; } *sorted, *tmp; /* [vocab] scratch: the candidates */
    float *heap;          /* [vocab] top-k scratch */
    double *w;            /* [vocab] the candidates' weights */
    float *wf;            /* [vocab] every token's weight (ft_cpu_exp_shift) */
    int kept;             /* after a filter: its survivors are sorted[0..kept); else -1 */
    struct ft_logit_mask mask; /* apply == NULL: none */
    int lp_top;           /* logprobs: alternatives per token; -1: off */
    int lp_valid;         /* lp holds the last draw */
    float *lp_raw;        /* [vocab] the row as the model gave it (logprobs on) */
    struct ft_token_lp lp;
};

struct ft_sampling ft_sampling_default(void) {
    return (struct ft_sampling){.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
}

enum ft_status ft_sampling_validate(const struct ft_sampling *p) {
    if (!(p->temperature >= 0 && p->temperature <= 100))
        return ft_fail(FT_ERR_INVALID_ARG, "temperature %g is out of range [0, 100]", p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return ft_fail(FT_ERR_INVALID_ARG, "top_p %g is out of range (0, 1]", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return ft_fail(FT_ERR_INVALID_ARG, "min_p %g is out of range [0, 1]", p->min_p);
    if (p->top_k < 0) return ft_fail(FT_ERR_INVALID_ARG, "top_k %d must be >= 0", p->top_k);
    if (!(p->repetition_penalty > 0 && p->repetition_penalty <= 10))
        return ft_fail(FT_ERR_INVALID_ARG, "repetition_penalty %g is out of range (0, 10]",
                       p->repetition_penalty);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return ft_fail(FT_ERR_INVALID_ARG, "presence_penalty %g is out of range [-2, 2]",
                       p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return ft_fail(FT_ERR_INVALID_ARG, "frequency_penalty %g is out of range [-2, 2]",
                       p->frequency_penalty);
    return FT_OK;
}

enum ft_status ft_sampler_init(struct ft_sampler **out, const struct ft_sampling *p, int vocab) {
    *out = NULL;
    enum ft_status st = ft_sampling_validate(p);
    if (st != FT_OK) return st;
    struct ft_sampler *s = calloc(1, sizeof *s);
    if (!s) return ft_fail(FT_ERR_OOM, "sampler: out of memory");
    s->p = *p;
    s->vocab = vocab;
    s->lp_top = -1;
    /* splitmix64: nearby seeds, unrelated streams */
    s->rng = ft_mix64((p->seed ? p->seed : (uint64_t)ft_time_us()) + 0x9e3779b97f4a7c15ull) | 1;
    s->in_prompt = calloc((size_t)vocab, 1);
    s->n_generated = calloc((size_t)vocab, sizeof *s->n_generated);
    s->sorted = malloc((size_t)vocab * sizeof *s->sorted);
    s->heap = malloc((size_t)vocab * sizeof *s->heap);
    s->tmp = malloc((size_t)vocab * sizeof *s->tmp);
    s->w = malloc((size_t)vocab * sizeof *s->w);
    s->wf = malloc((size_t)vocab * sizeof *s->wf);
    if (!s->in_prompt || !s->n_generated || !s->sorted || !s->heap || !s->w || !s->tmp || !s->wf) {
        ft_sampler_free(s);
        return ft_fail(FT_ERR_OOM, "sampler: out of memory");
    }
    *out = s;
    return FT_OK;
}

void ft_sampler_free(struct ft_sampler *s) {
    if (!s) return;
    if (s->mask.free) s->mask.free(s->mask.ctx);
    free(s->in_prompt);
    free(s->n_generated);
    free(s->sorted);
    free(s->heap);
    free(s->tmp);
    free(s->w);
    free(s->wf);
    free(s->lp_raw);
    free(s);
}

enum ft_status ft_sampler_set_logprobs(struct ft_sampler *s, int n_top) {
    if (n_top < 0) {
        s->lp_top = -1;
        return FT_OK;
    }
    if (!s->lp_raw && !(s->lp_raw = malloc((size_t)s->vocab * sizeof *s->lp_raw)))
        return ft_fail(FT_ERR_OOM, "sampler: out of memory");
    s->lp_top = n_top < FT_MAX_TOP_LOGPROBS ? n_top : FT_MAX_TOP_LOGPROBS;
    return FT_OK;
}

const struct ft_token_lp *ft_sampler_last_logprobs(const struct ft_sampler *s) {
    return s->lp_top >= 0 && s->lp_valid ? &s->lp : NULL;
}

static float finite_lp(double v) {
    return v == v && v > -9999.0 ? (float)v : -9999.0f;
}

void ft_logprobs_row(const float *x, int V, int32_t id, int n_top, struct ft_token_lp *out) {
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double z = 0;
    if (mx > -INFINITY)
        for (int i = 0; i < V; i++) z += exp((double)x[i] - mx);
    const double lse = mx > -INFINITY ? mx + log(z) : 0;
    n_top = n_top < 0 ? 0 : n_top > FT_MAX_TOP_LOGPROBS ? FT_MAX_TOP_LOGPROBS : n_top;
    n_top = n_top < V ? n_top : V;
    out->id = id;
    out->logprob = id >= 0 && id < V ? finite_lp((double)x[id] - lse) : -9999.0f;
    /* the n_top largest by insertion into a short sorted list (ties keep the lower id) */
    int k = 0;
    for (int i = 0; i < V && n_top; i++) {
        const float v = x[i] == x[i] ? x[i] : -INFINITY;
        if (k == n_top && !(v > out->top_lp[k - 1])) continue;
        int j = k < n_top ? k++ : k - 1;
        for (; j > 0 && v > out->top_lp[j - 1]; j--)
            out->top_lp[j] = out->top_lp[j - 1], out->top_id[j] = out->top_id[j - 1];
        out->top_lp[j] = v, out->top_id[j] = i;
    }
    out->n_top = k;
    for (int j = 0; j < k; j++) out->top_lp[j] = finite_lp((double)out->top_lp[j] - lse);
}

void ft_sampler_add_prompt(struct ft_sampler *s, int32_t id) {
    if (id >= 0 && id < s->vocab) s->in_prompt[id] = 1;
}

void ft_sampler_accept(struct ft_sampler *s, int32_t id) {
    if (id >= 0 && id < s->vocab) s->n_generated[id]++;
    if (s->mask.accept) s->mask.accept(s->mask.ctx, id);
}

void ft_sampler_set_mask(struct ft_sampler *s, const struct ft_logit_mask *m) {
    if (s->mask.free) s->mask.free(s->mask.ctx);
    s->mask = *m;
}

/* A float's bits as a key that sorts descending (larger values first, -0 after +0). */
static inline uint32_t desc_key(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = u & 0x80000000u ? ~u : u | 0x80000000u; /* ascending */
    return ~u;
}

/* Descending logit by desc_key (so -0 after +0, as the radix sort and the GPU's order them),
 * ties by id. */
static int by_logit_desc(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    const uint32_t kx = desc_key(x->logit), ky = desc_key(y->logit);
    if (kx != ky) return kx < ky ? -1 : 1;
    return x->id - y->id;
}

/* x[i] /= t over [0, V), eight at once (vector code at -O2). */
static void divide_all(float *x, int V, float t) {
    int i = 0;
    for (; i + 8 <= V; i += 8)
        for (int j = 0; j < 8; j++) x[i + j] /= t;
    for (; i < V; i++) x[i] /= t;
}

static int has_penalties(const struct ft_sampling *p) {
    return p->repetition_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0;
}

/* A filter that removes tokens: top_k below the vocabulary, top_p below 1, min_p above 0. */
static int has_filters(const struct ft_sampling *p, int V) {
    return (p->top_k > 0 && p->top_k < V) || p->top_p < 1.0f || p->min_p > 0;
}

/* Sorts c[0..n) by logit descending, ties in the order given (the candidates come in id
 * order, so: by_logit_desc's order). Four stable byte passes over the float's bits made
 * monotone: a top-p over a flat 152k vocab keeps most of it, and qsort took 31 ms there. */
static void sort_desc(struct cand *c, struct cand *tmp, int n) {
    if (n <= 256) {
        qsort(c, (size_t)n, sizeof *c, by_logit_desc);
        return;
    }
    struct cand *src = c, *dst = tmp;
    for (int shift = 0; shift < 32; shift += 8) {
        int count[257] = {0};
        for (int i = 0; i < n; i++) count[((desc_key(src[i].logit) >> shift) & 255) + 1]++;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (int i = 0; i < n; i++) dst[count[(desc_key(src[i].logit) >> shift) & 255]++] = src[i];
        struct cand *t = src;
        src = dst, dst = t;
    }
    /* four passes: the result is back in c */
}

/* The k-th largest of x[0..n) (k <= n; NaN never counted; -inf when fewer than k others):
 * a min-heap of the k largest seen, O(n) for the small k of sampling. Every value that was at
 * least the heap's least when seen goes to log (in index order, *n_log of them): the least
 * only grows, so the log holds every value >= the result, and the candidates come from it
 * instead of a second pass over x. */
static float kth_largest(const float *x, int n, int k, float *heap, struct cand *log, int *n_log) {
    int h = 0, nl = 0;
    for (int i = 0; i < n; i++) {
        float v = x[i];
        if (v != v) continue;
        if (h < k) { /* sift up */
            int c = h++;
            while (c > 0 && heap[(c - 1) / 2] > v) heap[c] = heap[(c - 1) / 2], c = (c - 1) / 2;
            heap[c] = v;
            log[nl++] = (struct cand){v, i};
        } else if (v >= heap[0]) {
            log[nl++] = (struct cand){v, i};
            if (v == heap[0]) continue; /* a tie with the least: logged, the heap unchanged */
            int c = 0; /* replace the least, sift down */
            for (;;) {
                int l = 2 * c + 1, m = l;
                if (l >= k) break;
                if (l + 1 < k && heap[l + 1] < heap[l]) m = l + 1;
                if (heap[m] >= v) break;
                heap[c] = heap[m], c = m;
            }
            heap[c] = v;
        }
    }
    *n_log = nl;
    return h < k ? -INFINITY : heap[0];
}

void ft_sampler_process(struct ft_sampler *s, float *logits) {
    const struct ft_sampling *p = &s->p;
    int V = s->vocab;
    s->kept = -1; /* no filter ran (yet) */
    const int penalties = has_penalties(p);
    for (int i = 0; penalties && i < V; i++) {
        int seen = s->in_prompt[i] || s->n_generated[i];
        if (p->repetition_penalty != 1.0f && seen)
            logits[i] = logits[i] < 0 ? logits[i] * p->repetition_penalty
                                      : logits[i] / p->repetition_penalty;
        if (s->n_generated[i])
            logits[i] -= p->presence_penalty + p->frequency_penalty * (float)s->n_generated[i];
    }
    if (p->temperature > 0 && p->temperature != 1.0f) divide_all(logits, V, p->temperature);
    if (!has_filters(p, V)) return;
    int k_on = p->top_k > 0 && p->top_k < V, p_on = p->top_p < 1.0f, m_on = p->min_p > 0;
    /* The candidates: every token a filter can keep, the same prefix of the descending order
     * (logit, then id) that sorting all V would give. top_k: the values >= the k-th largest
     * (ties survive). Otherwise, from the mass of each 0.5-wide band below the maximum, the
     * bands that hold top_p of it (two more for margin), and for min_p those within
     * log(min_p) - 1 of the maximum. */
    float mx = ft_max_f32(logits, V);
    double z_all = 0;
    float tau;
    int n_log = 0;
    if (k_on) {
        tau = kth_largest(logits, V, p->top_k, s->heap, s->sorted, &n_log);
    } else {
        enum { NB = 64 };
        double band[NB] = {0};
        z_all = ft_cpu_exp_shift(s->wf, logits, V, mx); /* the bands' masses, in float */
        for (int i = 0; i < V; i++) {
            float d = (mx - logits[i]) * 2.0f;
            band[d < NB - 1 ? (int)d : NB - 1] += s->wf[i]; /* NaN: the last band */
        }
        int b = NB - 1;
        if (p_on) {
            double cum = 0;
            for (b = 0; b < NB - 1; b++)
                if ((cum += band[b]) >= p->top_p * z_all) break;
            b = b + 2 < NB - 1 ? b + 2 : NB - 1;
        }
        tau = b == NB - 1 ? -INFINITY : mx - 0.5f * (float)(b + 1);
        if (!p_on) tau = mx + logf(p->min_p) - 1.0f;
    }
    int nc = 0;
    if (k_on) /* from the heap's log */
        for (int i = 0; i < n_log; i++) {
            if (s->sorted[i].logit >= tau) s->sorted[nc++] = s->sorted[i];
        }
    else
        for (int i = 0; i < V; i++)
            if (logits[i] >= tau) s->sorted[nc++] = (struct cand){logits[i], i};
    sort_desc(s->sorted, s->tmp, nc);
    int keep = nc;
    if (p_on || m_on) {
        double z = 0, zc = 0, tail = 0, *e = s->w; /* e[i]: sorted[i]'s exp, in double */
        for (int i = 0; i < nc; i++) zc += e[i] = exp((double)s->sorted[i].logit - mx);
        if (!k_on) /* the non-candidates' mass: small, so its float weights cost no precision */
            for (int i = 0; i < V; i++) tail += logits[i] >= tau ? 0.0 : (double)s->wf[i];
        z = k_on ? zc : zc + tail; /* the mass of what top_k kept, or of every token */
        if (p_on) { /* smallest prefix whose mass reaches top_p (the token crossing it stays) */
            double cum = k_on ? 0 : tail / z; /* the non-candidates */
            int n = keep;
            for (int i = keep - 1; i >= 1; i--) { /* removed while ascending cumsum <= 1-top_p */
                cum += e[i] / z;
                if (cum <= 1.0 - p->top_p) n = i;
                else break;
            }
            keep = n;
            z = 0;
            for (int i = 0; i < keep; i++) z += e[i];
        }
        if (m_on) { /* probs of the survivors vs min_p * top prob */
            double top = 1.0 / z;
            int n = 1;
            while (n < keep && e[n] / z >= p->min_p * top) n++;
            keep = n;
        }
    }
    int i = 0;
    for (; i + 8 <= V; i += 8)
        for (int j = 0; j < 8; j++) logits[i + j] = -INFINITY;
    for (; i < V; i++) logits[i] = -INFINITY;
    for (i = 0; i < keep; i++) logits[s->sorted[i].id] = s->sorted[i].logit;
    s->kept = keep; /* the survivors are sorted[0..keep) */
}

static int by_id(const void *a, const void *b) {
    return ((const struct cand *)a)->id - ((const struct cand *)b)->id;
}

int ft_sampler_plain_greedy(const struct ft_sampler *s) {
    return s->p.temperature <= 0 && !has_penalties(&s->p) && !s->mask.apply && s->lp_top < 0;
}

static int32_t draw_scaled(const float *x, int V, double u01, float *w);

/* The next uniform, as a float in [0, 1): what the engine's draws carry (struct ft_draw), so a
 * seeded request draws the same tokens whichever path samples it. */
static float next_u(struct ft_sampler *s) {
    const float u = (float)ft_rng_unit(&s->rng);
    return u < 1.0f ? u : 0x1.fffffep-1f;
}

/* The draw after ft_sampler_process, with the uniform u01. */
static int32_t draw_processed(struct ft_sampler *s, float *logits, double u01) {
    if (s->kept > 0 && s->kept <= 4096) { /* a filter ran: its few survivors, in id order */
        struct cand *c = s->sorted;
        int n = s->kept;
        qsort(c, (size_t)n, sizeof *c, by_id);
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = c[i].logit > mx ? c[i].logit : mx;
        double z = 0;
        for (int i = 0; i < n; i++) z += s->w[i] = exp((double)c[i].logit - mx);
        double u = u01 * z, acc = 0;
        for (int i = 0; i < n; i++)
            if ((acc += s->w[i]) > u) return c[i].id;
        return c[n - 1].id;
    }
    return draw_scaled(logits, s->vocab, u01, s->wf);
}

static int32_t sample(struct ft_sampler *s, float *logits) {
    int V = s->vocab;
    if (s->mask.apply) s->mask.apply(s->mask.ctx, logits, V);
    if (s->p.temperature <= 0) { /* greedy still honours the penalties */
        struct ft_sampling saved = s->p;
        s->p.top_k = 0, s->p.top_p = 1, s->p.min_p = 0;
        ft_sampler_process(s, logits);
        s->p = saved;
        return ft_argmax(logits, V);
    }
    ft_sampler_process(s, logits);
    return draw_processed(s, logits, next_u(s));
}

int32_t ft_sampler_sample(struct ft_sampler *s, float *logits) {
    if (s->lp_top < 0) return sample(s, logits);
    memcpy(s->lp_raw, logits, (size_t)s->vocab * sizeof *logits); /* processing works in place */
    const int32_t id = sample(s, logits);
    ft_logprobs_row(s->lp_raw, s->vocab, id, s->lp_top, &s->lp);
    s->lp_valid = 1;
    return id;
}

int32_t ft_sampler_draw_row(struct ft_sampler *s, const struct ft_draw *d, float *logits) {
    if (!(d->temperature > 0)) return ft_argmax(logits, s->vocab);
    const struct ft_sampling saved = s->p;
    s->p = ft_sampling_default();
    s->p.temperature = d->temperature, s->p.top_k = d->top_k;
    s->p.top_p = d->top_p, s->p.min_p = d->min_p;
    ft_sampler_process(s, logits);
    const int32_t id = draw_processed(s, logits, d->u);
    s->p = saved;
    return id;
}

/* ft_draw_softmax on logits already divided by T (w: [V] scratch). */
static int32_t draw_scaled(const float *x, int V, double u01, float *w) {
    /* every weight once, vectorised (libm's exp in double, twice over a 152k vocab, cost 1.3 ms
     * a token); the draw finds its block of 256 from block sums, then the token in it */
    const float mx = ft_max_f32(x, V);
    const double z = ft_cpu_exp_shift(w, x, V, mx), u = u01 * z;
    double acc = 0;
    int last = 0;
    for (int b = 0; b < V; b += 256) {
        const int e = b + 256 < V ? b + 256 : V;
        double part[8] = {0}, sb = 0;
        for (int i = b; i < e; i++) part[i & 7] += w[i];
        for (int j = 0; j < 8; j++) sb += part[j];
        if (acc + sb <= u) {
            acc += sb;
            for (int i = e - 1; i >= b; i--)
                if (w[i] > 0) {
                    last = i;
                    break;
                }
            continue;
        }
        for (int i = b; i < e; i++) {
            if (w[i] <= 0) continue;
            last = i;
            if ((acc += w[i]) > u) return i;
        }
    }
    return last;
}

int32_t ft_draw_softmax(float *x, int V, float T, double u, float *scratch) {
    if (!(T > 0)) return ft_argmax(x, V);
    if (T != 1.0f) divide_all(x, V, T);
    return draw_scaled(x, V, u, scratch);
}

int ft_sampler_engine_drawable(const struct ft_sampler *s) {
    return !has_penalties(&s->p) && (!s->mask.apply || s->mask.bits) && s->lp_top < 0;
}

void ft_mask_apply_bits(float *logits, int V, const uint32_t *words) {
    for (int base = 0; base < V; base += 32) {
        const uint32_t w = words[base >> 5];
        if (w == ~0u) continue;
        const int n = V - base < 32 ? V - base : 32;
        for (int j = 0; j < n; j++)
            if (!(w >> j & 1)) logits[base + j] = -INFINITY;
    }
}

void ft_sampler_mask_bits(struct ft_sampler *s, uint32_t *words) {
    const int nw = ft_mask_words(s->vocab);
    if (s->mask.bits) {
        s->mask.bits(s->mask.ctx, words, s->vocab);
        return;
    }
    memset(words, 0xff, (size_t)nw * sizeof *words);
    if (s->vocab & 31) words[nw - 1] = (1u << (s->vocab & 31)) - 1;
}

void ft_sampler_engine_draw(struct ft_sampler *s, struct ft_draw *d) {
    const struct ft_sampling *p = &s->p;
    d->temperature = p->temperature > 0 ? p->temperature : 0.0f;
    d->u = d->temperature > 0 ? next_u(s) : 0.0f;
    d->top_k = p->top_k > 0 && p->top_k < s->vocab ? p->top_k : 0;
    d->top_p = p->top_p, d->min_p = p->min_p;
    d->masked = s->mask.apply != NULL;
}
