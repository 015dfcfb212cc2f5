/* sample.c — the sampler. Penalty state is a per-vocabulary count array (prompt presence and
 * generated counts); filters work on a sorted copy of the surviving logits. */
#include "engine/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/status.h"
#include "core/timer.h"
#include "engine/forward.h"
#include "moe/checksum.h"

struct ft_sampler {
    struct ft_sampling p;
    int vocab;
    uint64_t rng;
    uint8_t *in_prompt;   /* [vocab] */
    int32_t *n_generated; /* [vocab] */
    struct cand { float logit; int32_t id; } *sorted; /* [vocab] scratch */
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
    /* splitmix64: nearby seeds, unrelated streams */
    s->rng = ft_mix64((p->seed ? p->seed : (uint64_t)ft_time_us()) + 0x9e3779b97f4a7c15ull) | 1;
    s->in_prompt = calloc((size_t)vocab, 1);
    s->n_generated = calloc((size_t)vocab, sizeof *s->n_generated);
    s->sorted = malloc((size_t)vocab * sizeof *s->sorted);
    if (!s->in_prompt || !s->n_generated || !s->sorted) {
        ft_sampler_free(s);
        return ft_fail(FT_ERR_OOM, "sampler: out of memory");
    }
    *out = s;
    return FT_OK;
}

void ft_sampler_free(struct ft_sampler *s) {
    if (!s) return;
    free(s->in_prompt);
    free(s->n_generated);
    free(s->sorted);
    free(s);
}

void ft_sampler_add_prompt(struct ft_sampler *s, int32_t id) {
    if (id >= 0 && id < s->vocab) s->in_prompt[id] = 1;
}

void ft_sampler_accept(struct ft_sampler *s, int32_t id) {
    if (id >= 0 && id < s->vocab) s->n_generated[id]++;
}

static int by_logit_desc(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

void ft_sampler_process(struct ft_sampler *s, float *logits) {
    const struct ft_sampling *p = &s->p;
    int V = s->vocab;
    for (int i = 0; i < V; i++) {
        int seen = s->in_prompt[i] || s->n_generated[i];
        if (p->repetition_penalty != 1.0f && seen)
            logits[i] = logits[i] < 0 ? logits[i] * p->repetition_penalty
                                      : logits[i] / p->repetition_penalty;
        if (s->n_generated[i])
            logits[i] -= p->presence_penalty + p->frequency_penalty * (float)s->n_generated[i];
    }
    if (p->temperature > 0 && p->temperature != 1.0f)
        for (int i = 0; i < V; i++) logits[i] /= p->temperature;
    int k_on = p->top_k > 0 && p->top_k < V, p_on = p->top_p < 1.0f, m_on = p->min_p > 0;
    if (!k_on && !p_on && !m_on) return;
    for (int i = 0; i < V; i++) s->sorted[i] = (struct cand){logits[i], i};
    qsort(s->sorted, (size_t)V, sizeof *s->sorted, by_logit_desc);
    int keep = V;
    if (k_on) { /* transformers keeps every logit equal to the k-th (ties survive) */
        float kth = s->sorted[p->top_k - 1].logit;
        keep = p->top_k;
        while (keep < V && s->sorted[keep].logit >= kth) keep++;
    }
    if (p_on || m_on) {
        float mx = s->sorted[0].logit;
        double z = 0;
        for (int i = 0; i < keep; i++) z += exp((double)s->sorted[i].logit - mx);
        if (p_on) { /* smallest prefix whose mass reaches top_p (the token crossing it stays) */
            double cum = 0;
            int n = keep;
            for (int i = keep - 1; i >= 1; i--) { /* removed while ascending cumsum <= 1-top_p */
                cum += exp((double)s->sorted[i].logit - mx) / z;
                if (cum <= 1.0 - p->top_p) n = i;
                else break;
            }
            keep = n;
            z = 0;
            for (int i = 0; i < keep; i++) z += exp((double)s->sorted[i].logit - mx);
        }
        if (m_on) { /* probs of the survivors vs min_p * top prob */
            double top = 1.0 / z;
            int n = 1;
            while (n < keep && exp((double)s->sorted[n].logit - mx) / z >= p->min_p * top) n++;
            keep = n;
        }
    }
    for (int i = keep; i < V; i++) logits[s->sorted[i].id] = -INFINITY;
}

int ft_sampler_plain_greedy(const struct ft_sampler *s) {
    const struct ft_sampling *p = &s->p;
    return p->temperature <= 0 && p->repetition_penalty == 1.0f && p->presence_penalty == 0 &&
           p->frequency_penalty == 0;
}

int32_t ft_sampler_sample(struct ft_sampler *s, float *logits) {
    int V = s->vocab;
    if (s->p.temperature <= 0) { /* greedy still honours the penalties */
        struct ft_sampling saved = s->p;
        s->p.top_k = 0, s->p.top_p = 1, s->p.min_p = 0;
        ft_sampler_process(s, logits);
        s->p = saved;
        return ft_argmax(logits, V);
    }
    ft_sampler_process(s, logits);
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double z = 0;
    for (int i = 0; i < V; i++) z += isinf(logits[i]) ? 0 : exp((double)logits[i] - mx);
    double u = ft_rng_unit(&s->rng) * z, acc = 0;
    int last = 0;
    for (int i = 0; i < V; i++) {
        if (isinf(logits[i])) continue;
        last = i;
        acc += exp((double)logits[i] - mx);
        if (acc > u) return i;
    }
    return last;
}
