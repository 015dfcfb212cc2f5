/* cmd_serve.c — `ft serve`: the OpenAI-compatible HTTP server. Starts listening first (so
 * /health answers "loading"), then loads tokenizer, chat template and model, starts the
 * scheduler, and serves until SIGINT/SIGTERM, then shuts down gracefully: stop accepting, cancel
 * or finish the running requests (ft_sched_shutdown), close the connections.
 * Threading: the main thread parses flags, loads and then waits for a signal; HTTP connections
 * have their own threads (server/http.c), the engine its own (engine/sched.c). */
#include <libgen.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "core/log.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "engine/generate.h"
#include "engine/sched.h"
#include "mem/residency.h"
#include "model/model.h"
#include "server/http.h"
#include "server/openai.h"
#include "text/chat.h"
#include "text/tokenizer.h"
#include "text/tool_parse.h"

static const char k_usage[] =
    "usage: ft serve --model DIR [options]   (OpenAI-compatible API; README: Serving)\n"
    "  --host ADDR                 listen address (default 127.0.0.1; 0.0.0.0 for all)\n"
    "  --port N                    port (default 1919; 0 = any free port)\n"
    "  --api-key KEY               require 'Authorization: Bearer KEY' (not on /health)\n"
    "  --cors-origins LIST         allow browser origins: '*' or 'https://a,https://b'\n"
    "  --served-model-name NAME    model id in the API (default: the directory's name)\n"
    "  --max-running-requests N    sequences decoded together (default 4)\n"
    "  --max-prefill-length N      prompt tokens per step, chunked prefill (default 2048)\n"
    "  -c, --ctx-size N            positions one request may use (default: the model's)\n"
    "  --kv-tokens N               KV cache positions shared by all requests\n"
    "  --queue-size N              waiting requests before 429 (default 64)\n"
    "  --no-prefix-cache           re-prefill every prompt (default: reuse the KV blocks of a\n"
    "                              prompt prefix seen before)\n"
    "  --prefix-state-mem SIZE     hybrid (DeltaNet) models: host memory for the prefix cache's\n"
    "                              recurrent-state checkpoints, e.g. 2G (default 1G; 0: no\n"
    "                              prefix cache for them)\n"
    "  -t, --threads N             CPU threads (default: physical cores)\n"
    "  --chat-template NAME        override the detected chat template family\n"
    "  --tool-parser NAME          tool-call format of the model's output (default: from the\n"
    "                              chat template): hermes, qwen3_coder, llama3, mistral,\n"
    "                              deepseek, glm, minimax, harmony, none\n"
    "  --request-timeout S         cancel a request running longer (default 0 = none)\n"
    "  --http-timeout S            close idle kept-alive connections after S s (default 30)\n"
    "  --header-timeout S          a request head must arrive within S s (default 10)\n"
    "  --max-conns-per-ip N        connections one client address may hold (default 128)\n"
    "  --max-connections N         open at once (default 512); past it the oldest idle one closes\n"
    "  --max-body SIZE             largest request body, e.g. 16M (default: 32 bytes per\n"
    "                              context token, at least 1M; larger: 413)\n"
    "  --backend B / --device N / --vram-limit SIZE / --no-graphs / --emulate-pin-cap SIZE\n"
    "                              and the other engine flags: as in ft run --help\n";

struct serve_opts {
    const char *model, *host, *api_key, *cors, *name, *tmpl, *tool_parser;
    long port, max_running, max_prefill, ctx, kv, queue, threads, req_timeout, http_timeout, body_mb;
    long header_timeout, conns_per_ip, max_conns;
    int no_prefix_cache;
    long long prefix_state_mem; /* --prefix-state-mem: 0 default, -1 none */
    size_t max_body;            /* --max-body; 0 = from the context */
    struct ft_engine_opts be; /* backend flags */
    int be_auto;
};

static volatile sig_atomic_t g_stop; /* set by the signal handler only */
static void on_signal(int sig) { g_stop = sig; }

static int parse(int argc, char **argv, struct serve_opts *o) {
    ft_cli_backend_init(&o->be, &o->be_auto);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], **str = NULL;
        long *num = NULL, lo = 1, hi = 1 << 24;
        int rb = ft_cli_backend_flag("serve", argc, argv, &i, &o->be, &o->be_auto);
        if (rb < 0) return 2;
        if (rb > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("%s", k_usage);
            return 1;
        }
        if (!strcmp(a, "--no-prefix-cache")) {
            o->no_prefix_cache = 1;
            continue;
        }
        if (!strcmp(a, "--model") || !strcmp(a, "-m")) str = &o->model;
        else if (!strcmp(a, "--host")) str = &o->host;
        else if (!strcmp(a, "--api-key")) str = &o->api_key;
        else if (!strcmp(a, "--cors-origins")) str = &o->cors;
        else if (!strcmp(a, "--served-model-name")) str = &o->name;
        else if (!strcmp(a, "--chat-template")) str = &o->tmpl;
        else if (!strcmp(a, "--tool-parser")) str = &o->tool_parser;
        else if (!strcmp(a, "--port")) num = &o->port, lo = 0, hi = 65535;
        else if (!strcmp(a, "--max-running-requests")) num = &o->max_running, hi = 1024;
        else if (!strcmp(a, "--max-prefill-length")) num = &o->max_prefill;
        else if (!strcmp(a, "--ctx-size") || !strcmp(a, "-c")) num = &o->ctx;
        else if (!strcmp(a, "--kv-tokens")) num = &o->kv;
        else if (!strcmp(a, "--queue-size")) num = &o->queue;
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) num = &o->threads, hi = 4096;
        else if (!strcmp(a, "--request-timeout")) num = &o->req_timeout, lo = 0;
        else if (!strcmp(a, "--http-timeout")) num = &o->http_timeout;
        else if (!strcmp(a, "--max-body-mb")) num = &o->body_mb, hi = 4096; /* older spelling */
        else if (!strcmp(a, "--header-timeout")) num = &o->header_timeout, hi = 3600;
        else if (!strcmp(a, "--max-conns-per-ip")) num = &o->conns_per_ip, hi = 65536;
        else if (!strcmp(a, "--max-connections")) num = &o->max_conns, lo = 8, hi = 16384;
        else if (!strcmp(a, "--prefix-state-mem")) {
            const char *v = ft_cli_value(argc, argv, &i);
            if (!v) return 2;
            size_t b = 0;
            if (ft_cli_size(v, &b))
                return ft_cli_usage_error("serve", "--prefix-state-mem: '%s' is not a size (e.g. 1G, "
                                          "512M; 0: none)", v);
            o->prefix_state_mem = b ? (long long)FT_MIN(b, (size_t)1 << 50) : -1;
            continue;
        }
        else if (!strcmp(a, "--max-body")) {
            const char *v = ft_cli_value(argc, argv, &i);
            if (!v) return 2;
            /* a plain number is bytes here (ft_cli_size reads it as GiB) */
            char *end;
            unsigned long long b = strtoull(v, &end, 10);
            if (*v >= '0' && *v <= '9' && !*end) o->max_body = (size_t)b;
            else if (ft_cli_size(v, &o->max_body)) o->max_body = 0;
            if (o->max_body < 1024 || o->max_body > ((size_t)4 << 30))
                return ft_cli_usage_error("serve", "--max-body: '%s' is not a size from 1K to 4G "
                                          "(e.g. 16M)", v);
            continue;
        }
        else return ft_cli_usage_error("serve", "unknown option '%s'", a);
        if (num) {
            if (ft_cli_num("serve", argc, argv, &i, lo, hi, num)) return 2;
        } else if (!(*str = ft_cli_value(argc, argv, &i))) {
            return 2;
        }
    }
    if (!o->model) return ft_cli_usage_error("serve", "--model DIR is required");
    if (o->tool_parser && ft_tool_fmt_from_name(o->tool_parser) < 0)
        return ft_cli_usage_error("serve", "--tool-parser '%s' is not one of %s", o->tool_parser,
                                  ft_tool_fmt_names());
    return 0;
}

/* The model id clients use: --served-model-name, else the directory's base name. */
static void model_id(const struct serve_opts *o, char *out, size_t cap) {
    if (o->name) {
        snprintf(out, cap, "%s", o->name);
        return;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", o->model);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    snprintf(out, cap, "%s", basename(tmp));
}

struct loaded {
    struct ft_tok *tok;
    struct ft_chat_template *tmpl;
    struct ft_pool *pool;
    struct ft_model *model;
    struct ft_sched *sched;
};

/* /health reports the fraction of layers loaded. */
static void load_progress(void *ctx, double frac) {
    atomic_store(&((struct ft_server *)ctx)->load_permille, (int)(frac * 1000));
}

static enum ft_status load(const struct serve_opts *o, struct ft_server *srv, struct loaded *l) {
    enum ft_status st;
    FT_TRY(ft_tok_load(o->model, &l->tok));
    FT_TRY(ft_chat_template_detect(ft_tok_chat_template(l->tok), o->tmpl, &l->tmpl));
    FT_TRY(ft_pool_init(&l->pool, (int)o->threads));
    struct ft_sched_opts so = {.max_running = (int)o->max_running, .max_prefill = (int)o->max_prefill,
                               .ctx_size = (int)o->ctx, .kv_tokens = (int)o->kv,
                               .queue_cap = (int)o->queue, .request_timeout_s = (double)o->req_timeout,
                               .prefix_cache = o->no_prefix_cache ? -1 : 0,
                               .prefix_state_mem = o->prefix_state_mem};
    ft_cli_backend_apply(&so.engine, &o->be, o->be_auto);
    /* offload: the banks are registered while the checkpoint is read */
    struct ft_residency_opts ro = {.pin_budget = so.engine.pin_budget, .cpu_layers = so.engine.cpu_layers,
                                   .device = so.engine.device};
    struct ft_load_opts lo = {.progress = load_progress, .progress_ctx = srv,
                              .residency = so.engine.backend == FT_BACKEND_OFFLOAD ? &ro : NULL};
    FT_TRY(ft_model_load_opts(o->model, &lo, &l->model));
    FT_TRY(ft_sched_init(&l->sched, l->model, l->tok, l->pool, &so));
    struct ft_gen_params gp = {0};
    ft_cli_sampling_defaults(&l->model->cfg, &gp);
    struct ft_sched_stats stats;
    ft_sched_stats(l->sched, &stats);
    srv->sched = l->sched, srv->tok = l->tok, srv->tmpl = l->tmpl;
    srv->defaults = gp.sampling;
    srv->ctx_size = stats.ctx_size;
    /* --tool-parser, else the format of the --chat-template family, else the template's own */
    srv->tool_fmt = o->tool_parser ? ft_tool_fmt_from_name(o->tool_parser)
                    : o->tmpl      ? (int)ft_tool_fmt_of_family(ft_chat_template_name(l->tmpl))
                                   : (int)ft_tool_fmt_detect(ft_tok_chat_template(l->tok));
    ft_log_info("chat template %s; tool calls %s; context %d tokens; up to %d requests at once",
                ft_chat_template_name(l->tmpl), ft_tool_fmt_name(srv->tool_fmt), stats.ctx_size,
                stats.max_running);
    return FT_OK;
fail:
    return st;
}

static void unload(struct loaded *l) {
    if (l->sched) ft_sched_free(l->sched);
    ft_model_free(l->model);
    ft_pool_free(l->pool);
    ft_chat_template_free(l->tmpl);
    ft_tok_free(l->tok);
}

static void install_signals(void) {
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int ft_cmd_serve(int argc, char **argv) {
    struct serve_opts o = {.host = "127.0.0.1", .port = 1919, .max_running = 4,
                           .max_prefill = 2048, .queue = 64, .http_timeout = 30,
                           .header_timeout = 10, .conns_per_ip = 128,
                           .max_conns = 512};
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    char id[256];
    model_id(&o, id, sizeof id);
    struct ft_server srv;
    ft_server_init(&srv, id);
    install_signals();
    if (!o.max_body && o.body_mb) o.max_body = (size_t)o.body_mb << 20;
    struct ft_http_opts ho = {.host = o.host, .port = (int)o.port, .api_key = o.api_key,
                              .cors_origins = o.cors, .max_body_bytes = o.max_body,
                              .conn_timeout_s = (int)o.http_timeout,
                              .header_timeout_s = (int)o.header_timeout,
                              .max_conns_per_ip = (int)o.conns_per_ip,
                              .max_connections = (int)o.max_conns};
    struct ft_http *http = NULL;
    enum ft_status st = ft_http_start(&http, &ho, ft_server_handle, &srv);
    if (st != FT_OK) return ft_cli_fail(st);
    struct loaded l = {0};
    st = load(&o, &srv, &l);
    if (st != FT_OK) {
        rc = ft_cli_fail(st);
        ft_http_stop(http);
        ft_server_free(&srv);
        unload(&l);
        return rc;
    }
    if (!o.max_body) /* a body that large cannot fit the context: refused before parsing */
        ft_http_set_max_body(http, FT_MAX((size_t)1 << 20, (size_t)srv.ctx_size * 32));
    ft_log_info("http: bodies up to %.1f MiB (--max-body), request heads within %ld s "
                "(--header-timeout), %ld connections per client address (--max-conns-per-ip), "
                "%ld in all (--max-connections)", ft_http_max_body(http) / 1048576.0,
                o.header_timeout, o.conns_per_ip, o.max_conns);
    ft_server_set_ready(&srv);
    printf("FreeToken-C ready: serving %s on http://%s:%d\n", id, o.host, ft_http_port(http));
    fflush(stdout);
    while (!g_stop) usleep(50 * 1000);
    ft_log_info("%s: shutting down (finishing or cancelling running requests)",
                g_stop == SIGINT ? "SIGINT" : "SIGTERM");
    ft_http_quiesce(http);
    ft_sched_shutdown(l.sched);
    ft_http_stop(http);
    ft_server_free(&srv);
    unload(&l);
    ft_log_info("stopped");
    return 0;
}
