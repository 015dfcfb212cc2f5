/* policy.c — the hybrid fetch-vs-compute split. Engine thread only. */
#include "moe/policy.h"

#include <math.h>
#include <stdlib.h>

#include "core/status.h"

const char *ft_moe_mode_name(enum ft_moe_mode m) {
    return m == FT_MOE_CPU ? "cpu" : m == FT_MOE_HYBRID ? "hybrid" : "offload";
}

enum ft_status ft_split_init(struct ft_split *s, enum ft_moe_mode mode, int n_layers,
                             double copy_s, double cpu_s, double cpu_solo_s, double cpu_fixed_s) {
    s->mode = mode;
    s->n_layers = n_layers;
    s->alpha = 0.1;
    s->layer = calloc((size_t)n_layers, sizeof *s->layer);
    if (!s->layer) return ft_fail(FT_ERR_OOM, "split policy: out of memory");
    for (int l = 0; l < n_layers; l++)
        s->layer[l] = (struct ft_split_costs){.copy_s = copy_s, .cpu_s = cpu_s, .cpu_solo_s = cpu_solo_s,
                                              .cpu_fixed_s = cpu_fixed_s};
    return FT_OK;
}

/* est moved a step alpha toward sample, the sample first held within [est / 10, 3 est] once
 * there is an estimate: one stalled step (a page-fault storm under a virtualised host made one
 * expert take 8x its time) moves it by at most 20%, while a lasting change still gets there in
 * a few steps. The starting guess counts as one sample: the first 8 samples (n: those before
 * this one) are averaged in with it, or a guess 3x off would take a thousand steps to leave,
 * sampled once in 64 calls. Letting the first sample replace the guess instead once learnt a
 * CPU rate 10x too slow and lost 40% of tok/s. */
static void ewma(double *est, double sample, double alpha, long n) {
    if (!isfinite(*est)) { /* a start from a profile rate of 0: the first sample replaces it */
        *est = sample;
        return;
    }
    if (*est > 0) sample = fmin(fmax(sample, 0.1 * *est), 3.0 * *est);
    *est += (n < 8 ? 1.0 / (double)(n + 2) : alpha) * (sample - *est);
}

void ft_split_free(struct ft_split *s) {
    if (!s) return;
    free(s->layer);
    s->layer = NULL;
}

/* With copies, both sides run at once: max(F * copy, (M - F) * cpu + fixed [if M > F]), least
 * at the integer next to where the two lines cross (both neighbours checked); without, the
 * CPU alone at its own rate. */
int ft_split_fetch_count(struct ft_split *s, int layer, int m) {
    if (m <= 0 || s->mode == FT_MOE_OFFLOAD) return m > 0 ? m : 0;
    if (s->mode == FT_MOE_CPU) return 0;
    struct ft_split_costs *c = &s->layer[layer];
    double x = (m * c->cpu_s + c->cpu_fixed_s) / (c->copy_s + c->cpu_s);
    int best = 0, lo = (int)floor(x) - 1, hi = (int)ceil(x) + 1;
    double best_t = m * c->cpu_solo_s + c->cpu_fixed_s; /* F = 0 */
    lo = lo < 1 ? 1 : lo > m ? m : lo; /* the crossing may lie outside [1, m] */
    hi = hi < 1 ? 1 : hi > m ? m : hi;
    for (int f = lo; f <= hi; f++) {
        double t = fmax(f * c->copy_s, f < m ? (m - f) * c->cpu_s + c->cpu_fixed_s : 0.0);
        if (t < best_t - 1e-12) best_t = t, best = f;
    }
    /* one side unused for 64 calls of the layer: this call gives it one expert, so that its
     * estimate can come back down after a slow spell (otherwise nothing would ever sample it);
     * likewise the CPU alone after 64 calls that split */
    c->unused = best == m || best == 0 ? c->unused + 1 : 0;
    c->fetching = best > 0 && best < m ? c->fetching + 1 : 0;
    if (c->unused >= 64) {
        c->unused = 0;
        return best == m ? m - 1 : 1;
    }
    if (c->fetching >= (c->samples_solo < 8 ? 8 : 64)) { /* sooner while it has few samples */
        c->fetching = 0;
        return 0;
    }
    return best;
}

void ft_split_observe_copy(struct ft_split *s, int layer, int n, double seconds) {
    struct ft_split_costs *c = &s->layer[layer];
    if (n <= 0 || seconds <= 0) return;
    ewma(&c->copy_s, seconds / n, s->alpha, c->samples_copy);
    c->samples_copy++;
}

void ft_split_observe_cpu(struct ft_split *s, int layer, int n, double seconds, int beside_copies) {
    struct ft_split_costs *c = &s->layer[layer];
    if (n <= 0 || seconds <= 0) return;
    long *k = beside_copies ? &c->samples_cpu : &c->samples_solo;
    /* the fixed part stays; the rest is per expert */
    ewma(beside_copies ? &c->cpu_s : &c->cpu_solo_s, (seconds - c->cpu_fixed_s) / n, s->alpha, *k);
    (*k)++;
}
