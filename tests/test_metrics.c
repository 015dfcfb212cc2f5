/* test_metrics.c — server/metrics.c and server/http_check.c without a server: the Prometheus text
 * of every branch (loading, CPU, offload with the expert cache, HTTP counts) is well formed
 * (HELP/TYPE before the samples of each family, every sample `name{labels} number`), histograms
 * are cumulative with _count equal to the +Inf bucket, label values are escaped; the events of
 * one request fill TTFT, inter-token and end-to-end histograms; Content-Length checks and log
 * escaping. (tests/server/test_hardening.py checks the same text through prometheus_client.) */
#include <stdlib.h>
#include <string.h>

#include "server/http_check.h"
#include "server/metrics.h"
#include "test.h"

/* Each line a comment or `name{...} value`; returns the number of samples, -1 when malformed. */
static int well_formed(const char *text) {
    int n = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        if (!e) return -1;
        if (*p == '#') {
            if (strncmp(p, "# HELP ", 7) && strncmp(p, "# TYPE ", 7)) return -1;
        } else {
            const char *b = memchr(p, '{', (size_t)(e - p)), *c = b ? memchr(b, '}', (size_t)(e - b)) : NULL;
            if (!b || !c || c[1] != ' ') return -1;
            for (const char *q = p; q < b; q++)
                if (!(*q == '_' || *q == ':' || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9')))
                    return -1;
            char *end;
            strtod(c + 2, &end);
            if (end != e) return -1;
            n++;
        }
        p = e + 1;
    }
    return n;
}

static double value_of(const char *text, const char *prefix) {
    const char *p = strstr(text, prefix);
    if (!p) return -1;
    p = strchr(p, '}');
    return p ? strtod(p + 2, NULL) : -1;
}

TEST(loading_server_renders_histograms_only) {
    struct ft_metrics m = {0};
    struct ft_sbuf out = {0};
    EXPECT_EQ(ft_metrics_render(&m, "a\"b\\c\nd", NULL, NULL, &out), 0);
    EXPECT(well_formed(out.p) > 0);
    EXPECT_CONTAINS(out.p, "ft:server_ready{model_name=\"a\\\"b\\\\c\\nd\"} 0\n");
    EXPECT(!strstr(out.p, "ft:num_requests_running"));
    EXPECT_CONTAINS(out.p, "# TYPE ft:time_to_first_token_seconds histogram\n");
    ft_sbuf_free(&out);
}

TEST(offload_stats_and_http_counts) {
    struct ft_metrics m = {0};
    struct ft_sched_stats t = {.running = 2, .queued = 3, .completed = 10, .cancelled = 4,
                               .failed = 1, .prompt_tokens = 1234, .generated_tokens = 987654321,
                               .kv_used_tokens = 256, .kv_total_tokens = 1024, .max_running = 4,
                               .ctx_size = 4096, .prefix_hit_tokens = 77,
                               .prefix_query_tokens = 100, .backend = "offload"};
    t.cache = (struct ft_gpu_offload_stats){.active = 1, .n_slots = 96, .hit_rate = 0.75,
                                            .hits = 300, .misses = 100, .copies = 90,
                                            .copy_bytes = 9e9, .copy_s = 0.5, .copy_gbps = 18,
                                            .pcie_gbps = 53.5, .cpu_experts = 10};
    struct ft_http_counts hc = {.connections = 9, .open = 2, .head_timeouts = 5, .evicted = 3};
    hc.by_status[200] = 7, hc.by_status[413] = 1;
    struct ft_sbuf out = {0};
    EXPECT_EQ(ft_metrics_render(&m, "m", &t, &hc, &out), 0);
    EXPECT(well_formed(out.p) > 40);
    EXPECT_CONTAINS(out.p, "ft:requests_total{model_name=\"m\",status=\"cancelled\"} 4\n");
    EXPECT_CONTAINS(out.p, "ft:generation_tokens_total{model_name=\"m\"} 987654321\n");
    EXPECT_NEAR(value_of(out.p, "ft:kv_cache_usage_perc{"), 0.25, 1e-12);
    EXPECT_EQ(value_of(out.p, "ft:prefix_cache_hits_total{"), 77);
    EXPECT_EQ(value_of(out.p, "ft:prefix_cache_queries_total{"), 100);
    EXPECT_NEAR(value_of(out.p, "ft:expert_cache_hit_rate{"), 0.75, 1e-12);
    EXPECT_NEAR(value_of(out.p, "ft:expert_copy_gbps{"), 18, 1e-12);
    EXPECT_EQ(value_of(out.p, "ft:expert_copy_bytes_total{"), 9e9);
    EXPECT_CONTAINS(out.p, "ft:http_responses_total{model_name=\"m\",code=\"413\"} 1\n");
    EXPECT(!strstr(out.p, "code=\"404\""));
    EXPECT_EQ(value_of(out.p, "ft:http_slow_closes_total{"), 5);
    EXPECT_EQ(value_of(out.p, "ft:http_evictions_total{"), 3);
    /* each family's HELP and TYPE come before its samples */
    const char *type = strstr(out.p, "# TYPE ft:expert_cache_slots gauge\n");
    const char *s = strstr(out.p, "ft:expert_cache_slots{");
    EXPECT(type && s && type < s);
    ft_sbuf_free(&out);
    t.cache.active = 0; /* not offloading: no expert metrics */
    EXPECT_EQ(ft_metrics_render(&m, "m", &t, &hc, &out), 0);
    EXPECT(!strstr(out.p, "ft:expert_"));
    ft_sbuf_free(&out);
}

TEST(request_events_fill_the_histograms) {
    struct ft_metrics m = {0};
    struct ft_metrics_req q;
    ft_metrics_req_begin(&q);
    q.t_submit_us -= 3000000; /* submitted 3 s ago */
    struct ft_event ev = {.type = FT_EV_TEXT, .n_gen = 1};
    ft_metrics_req_event(&m, &q, &ev);
    q.t_last_us -= 200000; /* the next 4 tokens came 0.2 s later */
    ev.n_gen = 5;
    ft_metrics_req_event(&m, &q, &ev);
    ev = (struct ft_event){.type = FT_EV_DONE, .n_gen = 5, .ttft_s = 0.3};
    ft_metrics_req_event(&m, &q, &ev);
    struct ft_sbuf out = {0};
    EXPECT_EQ(ft_metrics_render(&m, "m", NULL, NULL, &out), 0);
    EXPECT(well_formed(out.p) > 0);
    EXPECT_EQ(value_of(out.p, "ft:inter_token_latency_seconds_count{"), 4);
    EXPECT_EQ(value_of(out.p, "ft:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"0.04\"}"), 0);
    EXPECT_EQ(value_of(out.p, "ft:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"0.06\"}"), 4);
    EXPECT_NEAR(value_of(out.p, "ft:inter_token_latency_seconds_sum{"), 0.2, 0.01);
    EXPECT_EQ(value_of(out.p, "ft:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.25\"}"), 0);
    EXPECT_EQ(value_of(out.p, "ft:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.5\"}"), 1);
    EXPECT_EQ(value_of(out.p, "ft:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"}"), 1);
    EXPECT_EQ(value_of(out.p, "ft:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"2.5\"}"), 0);
    EXPECT_EQ(value_of(out.p, "ft:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"5\"}"), 1);
    EXPECT_EQ(value_of(out.p, "ft:e2e_request_latency_seconds_count{"), 1);
    ft_sbuf_free(&out);
}

TEST(content_length_values) {
    uint64_t len;
    char why[200];
    const char *one[] = {" 42 "}, *same[] = {"42", "42"}, *differ[] = {"5", "7"},
               *plus[] = {"+5"}, *list[] = {"5, 5"}, *huge[] = {"20000000000000000000"},
               *empty[] = {""};
    EXPECT_EQ(ft_http_content_length(one, 0, 0, &len, why, sizeof why), FT_HTTP_CL_NONE);
    EXPECT_EQ(ft_http_content_length(one, 1, 0, &len, why, sizeof why), FT_HTTP_CL_OK);
    EXPECT_EQ(len, 42);
    EXPECT_EQ(ft_http_content_length(same, 2, 0, &len, why, sizeof why), FT_HTTP_CL_OK);
    EXPECT_EQ(ft_http_content_length(differ, 2, 0, &len, why, sizeof why), FT_HTTP_CL_BAD);
    EXPECT_CONTAINS(why, "different values ('5' and '7')");
    EXPECT_EQ(ft_http_content_length(one, 1, 1, &len, why, sizeof why), FT_HTTP_CL_BAD);
    EXPECT_CONTAINS(why, "Transfer-Encoding");
    EXPECT_EQ(ft_http_content_length(plus, 1, 0, &len, why, sizeof why), FT_HTTP_CL_BAD);
    EXPECT_EQ(ft_http_content_length(list, 1, 0, &len, why, sizeof why), FT_HTTP_CL_BAD);
    EXPECT_EQ(ft_http_content_length(huge, 1, 0, &len, why, sizeof why), FT_HTTP_CL_BAD);
    EXPECT_EQ(ft_http_content_length(empty, 1, 0, &len, why, sizeof why), FT_HTTP_CL_BAD);
}

TEST(log_escape) {
    char out[64];
    EXPECT_EQ(ft_http_log_escape(out, sizeof out, "/a\nft: x", 8), 11);
    EXPECT_STREQ(out, "/a\\x0aft: x");
    ft_http_log_escape(out, sizeof out, "\\\x1b\xff", 3);
    EXPECT_STREQ(out, "\\x5c\\x1b\\xff");
    ft_http_log_escape(out, 8, "abcdefghij", 10); /* cut: "abcd..." */
    EXPECT_STREQ(out, "abcd...");
    ft_http_log_escape(out, 8, "abcdefg", 7); /* fits exactly */
    EXPECT_STREQ(out, "abcdefg");
    ft_http_log_escape(out, 1, "abc", 3);
    EXPECT_STREQ(out, "");
}

TEST_MAIN("metrics")
