/* fuzz_server.c — libFuzzer target for the request bodies of the OpenAI, Anthropic and
 * Responses APIs: the whole handler (server/openai.c's router, validation, templates, tools,
 * response_format grammars, the scheduler and the streamed writers) on the tiny qwen3_moe
 * fixture, as `ft serve` runs it but without the HTTP layer. The input's first byte picks the
 * endpoint; the rest is the body. Checks: every answer has an HTTP status in 200..599; a body
 * answer is JSON (an "error" object at 400 and up); a streamed one runs to its end. The
 * context is 96 tokens, so a request generates for at most a few milliseconds.
 * Single-threaded caller (the scheduler runs its own thread). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/threadpool.h"
#include "engine/sample.h"
#include "engine/sched.h"
#include "model/model.h"
#include "server/openai.h"
#include "text/chat.h"
#include "text/tokenizer.h"
#include "text/tool_parse.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ft_server g_srv;

static const char *k_paths[] = {"/v1/chat/completions", "/v1/completions", "/v1/messages",
                                "/v1/messages/count_tokens", "/v1/responses", "/tokenize",
                                "/detokenize"};
enum { N_PATHS = sizeof k_paths / sizeof k_paths[0] };

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = FT_TEST_DATA "/models/qwen3_moe";
    struct ft_tok *tok = NULL;
    struct ft_chat_template *tmpl = NULL;
    struct ft_pool *pool = NULL;
    struct ft_model *m = NULL;
    struct ft_sched *s = NULL;
    struct ft_sched_opts so = {.max_running = 2, .ctx_size = 96, .queue_cap = 8};
    if (ft_tok_load(dir, &tok) != FT_OK ||
        ft_chat_template_detect(ft_tok_chat_template(tok), NULL, &tmpl) != FT_OK ||
        ft_pool_init(&pool, 1) != FT_OK || ft_model_load(dir, &m) != FT_OK ||
        ft_sched_init(&s, m, tok, pool, &so) != FT_OK) {
        fprintf(stderr, "fuzz_server: cannot set up %s: %s\n", dir, ft_error());
        abort();
    }
    ft_server_init(&g_srv, "fuzz");
    struct ft_sched_stats st;
    ft_sched_stats(s, &st);
    g_srv.sched = s, g_srv.tok = tok, g_srv.tmpl = tmpl;
    g_srv.defaults = ft_sampling_default(), g_srv.ctx_size = st.ctx_size;
    g_srv.tool_fmt = (int)ft_tool_fmt_detect(ft_tok_chat_template(tok));
    ft_server_set_ready(&g_srv);
    return 0; /* kept for the process's life */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *body = malloc(size);
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    struct ft_http_req req = {"POST", k_paths[data[0] % N_PATHS], body, size - 1, NULL};
    struct ft_http_resp resp = {0};
    ft_server_handle(&g_srv, &req, &resp);
    if (resp.status < 200 || resp.status > 599) abort();
    if (resp.stream) {
        char buf[4096];
        for (ssize_t n; (n = resp.stream(resp.stream_ctx, buf, sizeof buf)) != FT_HTTP_STREAM_END;)
            if (n < 0 || (size_t)n > sizeof buf) abort();
        if (resp.stream_free) resp.stream_free(resp.stream_ctx);
    } else {
        json_error_t e;
        json_t *j = resp.body ? json_loadb(resp.body, resp.body_len, JSON_ALLOW_NUL, &e) : NULL;
        if (!j || (resp.status >= 400 && !json_object_get(j, "error"))) {
            fprintf(stderr, "fuzz_server: %s answered %d with '%.*s'\n", req.path, resp.status,
                    (int)resp.body_len, resp.body ? resp.body : "");
            abort();
        }
        json_decref(j);
    }
    free(resp.body);
    free(body);
    return 0;
}
