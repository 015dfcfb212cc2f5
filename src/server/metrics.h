/* metrics.h — GET /metrics: the server's state in the Prometheus text exposition format
 * (version 0.0.4), with vLLM's metric names under the "ft:" prefix where they mean the same:
 * requests by outcome, prompt / generated tokens, running and waiting requests, KV-cache use,
 * prefix-cache queries and hits, TTFT, inter-token and end-to-end latency histograms, HTTP
 * responses by status and slow-client closes, and when offloading the expert cache (hit rate,
 * copies, copy GB/s).
 * The histograms are observed on the connection threads as a request's events arrive
 * (ft_metrics_req_*); the counters come from ft_sched_stats and ft_http_counts at scrape time.
 * Threading: every function may run on many connection threads at once (atomics only); a
 * zeroed struct ft_metrics is ready to use. */
#ifndef FT_SERVER_METRICS_H
#define FT_SERVER_METRICS_H

#include <stdint.h>

#include "engine/sched.h"
#include "server/http.h"
#include "server/sse.h"

#define FT_METRICS_MAX_BUCKETS 20

struct ft_hist {
    _Atomic long n[FT_METRICS_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last: +Inf */
    _Atomic long long sum_us;
};

struct ft_metrics {
    struct ft_hist ttft, itl, e2e;
};

/* One request's clock, on its connection thread. */
struct ft_metrics_req {
    int64_t t_submit_us, t_last_us;
    int n_last;
};
/* Right after the submit. */
void ft_metrics_req_begin(struct ft_metrics_req *q);
/* Each event of the request: tokens since the last one feed the inter-token histogram (the
 * gap split over them); FT_EV_DONE feeds TTFT (the engine's) and end-to-end latency. */
void ft_metrics_req_event(struct ft_metrics *m, struct ft_metrics_req *q,
                          const struct ft_event *ev);

/* Appends the exposition text. t: NULL while the model loads; hc may be NULL. */
int ft_metrics_render(struct ft_metrics *m, const char *model_name,
                      const struct ft_sched_stats *t, const struct ft_http_counts *hc,
                      struct ft_sbuf *out);

#endif
