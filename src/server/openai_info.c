/* openai_info.c — the endpoints that do not generate: /v1/models, /health, /v1/stats,
 * /metrics (Prometheus text, server/metrics.c), /tokenize, /detokenize. Called by openai.c's
 * router on connection threads, many at once. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/timer.h"
#include "server/openai_impl.h"
#include "text/tokenizer.h"

static json_t *model_obj(struct ft_server *s) {
    return json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", s->model_id, "object", "model", "created",
                     (json_int_t)(s->start_us / 1000000), "owned_by", "freetoken", "max_model_len",
                     s->ctx_size);
}

void ft_srv_models(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp) {
    ft_srv_reply(resp, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_obj(s)));
}

void ft_srv_model(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp) {
    const char *id = req->path + strlen("/v1/models/");
    if (strcmp(req->method, "GET"))
        ft_http_error(resp, 405, NULL, "method %s is not allowed on %s (use GET)", req->method,
                      req->path);
    else if (strcmp(id, s->model_id))
        ft_http_error(resp, 404, "model", "model '%s' does not exist: this server serves '%s'",
                      id, s->model_id);
    else
        ft_srv_reply(resp, 200, model_obj(s));
}

void ft_srv_health(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp) {
    int st = atomic_load(&s->state);
    if (st == FT_SERVER_READY) {
        json_t *j = json_pack("{s:s, s:s}", "status", "ok", "model", s->model_id);
        struct ft_sched_stats t;
        ft_sched_stats(s->sched, &t);
        json_object_set_new(j, "backend", json_string(t.backend));
        if (t.has_residency) /* offload: where the expert banks live */
            json_object_set_new(j, "residency", json_pack("{s:s, s:i, s:i, s:i}", "platform",
                                t.residency.platform, "pinned_layers", t.residency.n_layers[0],
                                "locked_layers", t.residency.n_layers[1], "pageable_layers",
                                t.residency.n_layers[2]));
        ft_srv_reply(resp, 200, j);
    }
    else /* loading; a failed load ends the process (ft serve exits 1 or 2) */
        ft_srv_reply(resp, 503, json_pack("{s:s, s:s, s:f, s:f}", "status", "loading", "model",
                                          s->model_id, "progress",
                                          atomic_load(&s->load_permille) / 1000.0, "elapsed_s",
                                          (double)(ft_time_us() - s->start_us) / 1e6));
}

void ft_srv_stats(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp) {
    struct ft_sched_stats t;
    ft_sched_stats(s->sched, &t);
    json_t *j = json_pack(
        "{s:s, s:f, s:{s:i, s:i, s:I, s:I, s:I}, s:{s:I, s:I, s:f}, s:{s:f, s:f, s:f, s:f},"
        " s:{s:i, s:i}, s:i, s:i}",
        "model", s->model_id, "uptime_s", (double)(ft_time_us() - s->start_us) / 1e6,
        "requests", "running", t.running, "queued", t.queued, "completed", (json_int_t)t.completed,
        "cancelled", (json_int_t)t.cancelled, "failed", (json_int_t)t.failed,
        "tokens", "prompt", (json_int_t)t.prompt_tokens, "generated",
        (json_int_t)t.generated_tokens, "gen_tok_per_s", t.gen_tok_per_s,
        "latency_s", "ttft_p50", t.ttft_p50_s, "ttft_p95", t.ttft_p95_s, "total_p50",
        t.latency_p50_s, "total_p95", t.latency_p95_s,
        "kv", "used_tokens", t.kv_used_tokens, "total_tokens", t.kv_total_tokens,
        "max_running", t.max_running, "ctx_size", t.ctx_size);
    json_object_set_new(j, "backend", json_string(t.backend));
    if (t.cache.active) /* offload: the GPU expert cache and its copy engine */
        json_object_set_new(j, "expert_cache", json_pack(
            "{s:i, s:f, s:I, s:I, s:f, s:f, s:I, s:I}", "slots", t.cache.n_slots, "hit_rate",
            t.cache.hit_rate, "lookups", (json_int_t)(t.cache.hits + t.cache.misses), "copies",
            (json_int_t)t.cache.copies, "copy_gbps", t.cache.copy_gbps, "pcie_gbps",
            t.cache.pcie_gbps, "verify_mismatches", (json_int_t)t.cache.mismatches, "repaired",
            (json_int_t)t.cache.repaired));
    if (t.has_residency) { /* where the expert banks live (docs/ARCHITECTURE.md section 4) */
        const struct ft_residency_stats *r = &t.residency;
        json_object_set_new(j, "residency", json_pack(
            "{s:s, s:s, s:f, s:f, s:{s:i, s:i, s:i}, s:s, s:b}", "platform", r->platform,
            "budget_source", r->budget_source, "budget_gib",
            r->budget_bytes == UINT64_MAX ? -1.0 : r->budget_bytes / 1073741824.0, "pinned_gib",
            r->charged_bytes / 1073741824.0, "layers", "pinned", r->n_layers[0], "locked",
            r->n_layers[1], "pageable", r->n_layers[2], "cpu_layers", r->cpu_layers,
            "mlock_failed", r->mlock_failed));
    }
    ft_srv_reply(resp, 200, j);
}

void ft_srv_metrics(struct ft_server *s, const struct ft_http_req *req,
                    struct ft_http_resp *resp) {
    struct ft_sched_stats t;
    struct ft_http_counts hc;
    struct ft_sbuf out = {0};
    int ready = atomic_load(&s->state) == FT_SERVER_READY;
    if (ready) ft_sched_stats(s->sched, &t);
    ft_http_counts(req->conn, &hc);
    if (ft_metrics_render(&s->metrics, s->model_id, ready ? &t : NULL, &hc, &out)) {
        ft_sbuf_free(&out);
        ft_http_error(resp, 500, NULL, "out of memory");
        return;
    }
    free(resp->body);
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp->body = out.p ? out.p : strdup("");
    resp->body_len = out.n;
}

int ft_srv_ids(struct ft_server *s, json_t *a, const char *param, int32_t **ids, int *n,
               struct ft_http_resp *resp) {
    size_t cnt = json_array_size(a), i;
    int vocab = ft_tok_n_vocab(s->tok);
    json_t *v;
    if (!json_is_array(a)) {
        ft_http_error(resp, 400, param, "%s must be a list of token ids", param);
        return -1;
    }
    *ids = malloc((cnt ? cnt : 1) * sizeof **ids);
    if (!*ids) return ft_http_error(resp, 500, NULL, "out of memory"), -1;
    json_array_foreach(a, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
            free(*ids);
            *ids = NULL;
            ft_http_error(resp, 400, param, "%s[%zu] is not a token id in [0, %d)", param, i, vocab);
            return -1;
        }
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    *n = (int)cnt;
    return 0;
}

void ft_srv_tokenize(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp) {
    json_t *root = ft_srv_body(req, resp), *p = root ? json_object_get(root, "prompt") : NULL;
    int add_special = 1, n = 0;
    int32_t *ids = NULL;
    if (!root) return;
    if (!json_is_string(p)) {
        ft_http_error(resp, 400, "prompt", "prompt must be a string");
    } else if (!ft_srv_bool(root, "add_special_tokens", &add_special, resp)) {
        if (ft_tok_encode(s->tok, json_string_value(p), json_string_length(p), add_special, &ids,
                          &n) != FT_OK) {
            ft_http_error(resp, 400, "prompt", "%s", ft_error());
        } else {
            json_t *a = json_array();
            for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
            ft_srv_reply(resp, 200, json_pack("{s:o, s:i, s:i}", "tokens", a, "count", n,
                                              "max_model_len", s->ctx_size));
            resp->n_tokens = n;
        }
    }
    free(ids);
    json_decref(root);
}

void ft_srv_detokenize(struct ft_server *s, const struct ft_http_req *req,
                       struct ft_http_resp *resp) {
    json_t *root = ft_srv_body(req, resp);
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    size_t len = 0;
    if (!root) return;
    if (!ft_srv_ids(s, json_object_get(root, "tokens"), "tokens", &ids, &n, resp)) {
        if (ft_tok_decode(s->tok, ids, n, 0, &text, &len) != FT_OK)
            ft_http_error(resp, 400, "tokens", "%s", ft_error());
        else
            ft_srv_reply(resp, 200, json_pack("{s:s%}", "prompt", text, len));
    }
    free(text);
    free(ids);
    json_decref(root);
}
