/* metrics.c — the Prometheus text of GET /metrics (metrics.h) and its latency histograms.
 * Called by openai_info.c (render) and openai_gen.c (events) on connection threads, many at
 * once: the histograms are atomics, rendered from one snapshot of their buckets so each one's
 * _count equals its +Inf bucket. */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/timer.h"

/* Upper bounds in seconds (the +Inf bucket follows). */
static const double k_ttft_le[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40,
                                   80, 160, 320, 640};
static const double k_itl_le[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                  0.15, 0.2, 0.3, 0.5, 1, 2.5, 5};
static const double k_e2e_le[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640,
                                  1280, 2560};
#define N_OF(a) ((int)(sizeof a / sizeof a[0]))

static void observe(struct ft_hist *h, const double *le, int n_le, double v, long times) {
    if (v < 0) v = 0;
    int b = 0;
    while (b < n_le && v > le[b]) b++;
    atomic_fetch_add(&h->n[b], times);
    atomic_fetch_add(&h->sum_us, (long long)(v * 1e6) * times);
}

void ft_metrics_req_begin(struct ft_metrics_req *q) {
    *q = (struct ft_metrics_req){.t_submit_us = ft_time_us()};
}

void ft_metrics_req_event(struct ft_metrics *m, struct ft_metrics_req *q,
                          const struct ft_event *ev) {
    int64_t now = ft_time_us();
    if (ev->n_gen > q->n_last) {
        /* the first token's wait is TTFT's; the gaps after it are split over their tokens */
        if (q->n_last > 0) {
            long k = ev->n_gen - q->n_last;
            observe(&m->itl, k_itl_le, N_OF(k_itl_le), (double)(now - q->t_last_us) / 1e6 / k, k);
        }
        q->n_last = ev->n_gen;
        q->t_last_us = now;
    }
    if (ev->type == FT_EV_DONE) {
        if (ev->ttft_s > 0) observe(&m->ttft, k_ttft_le, N_OF(k_ttft_le), ev->ttft_s, 1);
        observe(&m->e2e, k_e2e_le, N_OF(k_e2e_le), (double)(now - q->t_submit_us) / 1e6, 1);
    }
}

/* --- the text ------------------------------------------------------------------------------ */

struct out {
    struct ft_sbuf *b;
    char labels[300]; /* model_name="..." */
    int err;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    if (ft_sbuf_add(o->b, line, (size_t)n)) o->err = 1;
}

static void head(struct out *o, const char *name, const char *type, const char *help) {
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample: name{model_name="...",extra} value (whole numbers without an exponent). */
static void sample(struct out *o, const char *name, const char *extra, double v) {
    char num[40];
    if (v == (double)(long long)v && v > -1e15 && v < 1e15) snprintf(num, sizeof num, "%lld", (long long)v);
    else snprintf(num, sizeof num, "%.9g", v);
    put(o, "%s{%s%s%s} %s\n", name, o->labels, extra ? "," : "", extra ? extra : "", num);
}

static void metric(struct out *o, const char *name, const char *type, const char *help,
                   double v) {
    head(o, name, type, help);
    sample(o, name, NULL, v);
}

static void hist(struct out *o, const char *name, const char *help, struct ft_hist *h,
                 const double *le, int n_le) {
    long n[FT_METRICS_MAX_BUCKETS + 1], total = 0;
    for (int b = 0; b <= n_le; b++) n[b] = atomic_load(&h->n[b]);
    long long sum_us = atomic_load(&h->sum_us);
    char nm[128], lab[48];
    head(o, name, "histogram", help);
    snprintf(nm, sizeof nm, "%s_bucket", name);
    for (int b = 0; b <= n_le; b++) {
        total += n[b];
        if (b < n_le) snprintf(lab, sizeof lab, "le=\"%g\"", le[b]);
        else snprintf(lab, sizeof lab, "le=\"+Inf\"");
        sample(o, nm, lab, (double)total);
    }
    snprintf(nm, sizeof nm, "%s_count", name);
    sample(o, nm, NULL, (double)total);
    snprintf(nm, sizeof nm, "%s_sum", name);
    sample(o, nm, NULL, sum_us / 1e6);
}

/* A label value: backslash, quote and newline escaped. */
static void label_value(char *dst, size_t cap, const char *s) {
    size_t o = 0;
    for (; s && *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') dst[o++] = '\\', dst[o++] = *s;
        else if (*s == '\n') dst[o++] = '\\', dst[o++] = 'n';
        else dst[o++] = *s;
    }
    dst[o] = 0;
}

static void engine_metrics(struct out *o, const struct ft_sched_stats *t) {
    metric(o, "ft:num_requests_running", "gauge", "Requests being decoded or prefilled now.",
           t->running);
    metric(o, "ft:num_requests_waiting", "gauge", "Requests queued for a KV budget.", t->queued);
    head(o, "ft:requests_total", "counter", "Requests the engine ended, by outcome.");
    sample(o, "ft:requests_total", "status=\"completed\"", (double)t->completed);
    sample(o, "ft:requests_total", "status=\"cancelled\"", (double)t->cancelled);
    sample(o, "ft:requests_total", "status=\"failed\"", (double)t->failed);
    metric(o, "ft:prompt_tokens_total", "counter", "Prompt tokens of ended requests.",
           (double)t->prompt_tokens);
    metric(o, "ft:generation_tokens_total", "counter", "Tokens generated.",
           (double)t->generated_tokens);
    metric(o, "ft:kv_cache_usage_perc", "gauge", "Fraction of the KV pool in use (1 = full).",
           t->kv_total_tokens ? (double)t->kv_used_tokens / t->kv_total_tokens : 0);
    metric(o, "ft:kv_cache_used_tokens", "gauge", "KV positions in use.", t->kv_used_tokens);
    metric(o, "ft:kv_cache_total_tokens", "gauge", "KV positions in the pool.", t->kv_total_tokens);
    metric(o, "ft:prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache.", (double)t->prefix_query_tokens);
    metric(o, "ft:prefix_cache_hits_total", "counter",
           "Prompt tokens whose KV the prefix cache held.", (double)t->prefix_hit_tokens);
    metric(o, "ft:max_running_requests", "gauge", "Sequences decoded together at most.",
           t->max_running);
    metric(o, "ft:context_tokens", "gauge", "Positions one request may use.", t->ctx_size);
    if (!t->cache.active) return;
    const struct ft_gpu_offload_stats *c = &t->cache; /* offload: the GPU expert cache */
    metric(o, "ft:expert_cache_slots", "gauge", "GPU expert cache slots.", c->n_slots);
    metric(o, "ft:expert_cache_hit_rate", "gauge", "Expert lookups served from the GPU cache.",
           c->hit_rate);
    metric(o, "ft:expert_cache_hits_total", "counter", "Expert lookups that hit the cache.",
           (double)c->hits);
    metric(o, "ft:expert_cache_misses_total", "counter", "Expert lookups that missed.",
           (double)c->misses);
    metric(o, "ft:expert_copies_total", "counter", "Experts copied host to GPU.",
           (double)c->copies);
    metric(o, "ft:expert_copy_bytes_total", "counter", "Expert bytes copied host to GPU.",
           c->copy_bytes);
    metric(o, "ft:expert_copy_seconds_total", "counter", "Copy-stream seconds of those copies.",
           c->copy_s);
    metric(o, "ft:expert_copy_gbps", "gauge", "Expert copy rate so far (GB/s).", c->copy_gbps);
    metric(o, "ft:pcie_gbps", "gauge", "Pinned host-to-device rate measured at start (GB/s).",
           c->pcie_gbps);
    metric(o, "ft:expert_cpu_total", "counter", "Expert misses computed on the CPU.",
           (double)c->cpu_experts);
    metric(o, "ft:expert_copy_mismatches_total", "counter",
           "Copied experts whose checksum did not match (repaired).", (double)c->mismatches);
}

static void http_metrics(struct out *o, const struct ft_http_counts *hc) {
    head(o, "ft:http_responses_total", "counter", "HTTP responses, by status.");
    for (int i = 100; i < 600; i++) {
        if (!hc->by_status[i]) continue;
        char lab[24];
        snprintf(lab, sizeof lab, "code=\"%d\"", i);
        sample(o, "ft:http_responses_total", lab, (double)hc->by_status[i]);
    }
    metric(o, "ft:http_connections_total", "counter", "Connections accepted.",
           (double)hc->connections);
    metric(o, "ft:http_connections_open", "gauge", "Connections open now.", hc->open);
    metric(o, "ft:http_slow_closes_total", "counter",
           "Connections closed for a request head or body that came too slowly "
           "(--header-timeout).", (double)hc->head_timeouts);
    metric(o, "ft:http_evictions_total", "counter",
           "Idle or slow-head connections closed to make room in a full table (--max-connections).",
           (double)hc->evicted);
}

int ft_metrics_render(struct ft_metrics *m, const char *model_name,
                      const struct ft_sched_stats *t, const struct ft_http_counts *hc,
                      struct ft_sbuf *out) {
    struct out o = {.b = out};
    char v[256];
    label_value(v, sizeof v, model_name);
    snprintf(o.labels, sizeof o.labels, "model_name=\"%s\"", v);
    metric(&o, "ft:server_ready", "gauge", "1 once the model is loaded.", t ? 1 : 0);
    if (t) engine_metrics(&o, t);
    hist(&o, "ft:time_to_first_token_seconds", "Time from submit to the first token.", &m->ttft,
         k_ttft_le, N_OF(k_ttft_le));
    hist(&o, "ft:inter_token_latency_seconds", "Time between a request's generated tokens.",
         &m->itl, k_itl_le, N_OF(k_itl_le));
    hist(&o, "ft:e2e_request_latency_seconds", "Time from submit to the end of a request.",
         &m->e2e, k_e2e_le, N_OF(k_e2e_le));
    if (hc) http_metrics(&o, hc);
    return o.err ? -1 : 0;
}
