/* openai.h — the OpenAI-compatible API on top of the serving engine (engine/sched.h):
 * /v1/chat/completions, /v1/completions, /v1/models, /health, /v1/stats, /tokenize, /detokenize,
 * the Anthropic Messages API (/v1/messages, anthropic.c) and the Responses API (/v1/responses,
 * responses.c). Tool calls are rendered by the chat template and parsed from the output
 * (text/tool_parse.h); required tool calls and response_format are enforced by a JSON grammar
 * (text/json_grammar.h) masking the logits.
 * Validates request bodies (400 naming the field), renders chat templates, tokenises, submits to
 * the scheduler and turns its events into JSON or SSE chunks, splitting <think>...</think> into
 * reasoning_content.
 * Called by server/http.c (ft_server_handle as the request handler) and set up by cmd_serve.
 * Threading: ft_server_handle runs on many connection threads at once; the struct is read-only
 * for them once ft_server_set_ready has published the loaded model. */
#ifndef FT_SERVER_OPENAI_H
#define FT_SERVER_OPENAI_H

#include <stdatomic.h>
#include <stdint.h>

#include <pthread.h>

#include "engine/sample.h"
#include "server/http.h"
#include "server/metrics.h"
#include "text/json_grammar.h"

enum ft_server_state { FT_SERVER_LOADING, FT_SERVER_READY };

struct ft_sched;
struct ft_tok;
struct ft_chat_template;

struct ft_server {
    /* set before the HTTP server starts */
    const char *model_id;       /* the name clients pass as "model" */
    int64_t start_us;
    long start_unix;            /* wall clock at start (the models' "created") */
    /* set before ft_server_set_ready, read-only afterwards */
    struct ft_sched *sched;
    const struct ft_tok *tok;
    const struct ft_chat_template *tmpl;
    struct ft_sampling defaults; /* generation_config.json's sampling */
    int ctx_size;
    int tool_fmt;               /* enum ft_tool_fmt: --tool-parser, else from the template */
    /* built on first use (vocab_mu): the vocabulary as bytes, for constrained decoding */
    pthread_mutex_t vocab_mu;
    int vocab_ready;
    struct ft_jg_vocab vocab;
    /* shared */
    _Atomic int state;          /* enum ft_server_state */
    _Atomic int load_permille;  /* model layers loaded, for /health while loading */
    _Atomic unsigned long next_id;
    struct ft_metrics metrics;  /* /metrics histograms (zeroed by ft_server_init) */
};

void ft_server_init(struct ft_server *s, const char *model_id);
void ft_server_set_ready(struct ft_server *s);
void ft_server_free(struct ft_server *s); /* what the server built on first use */

/* The HTTP handler (ft_http_handler_fn); ctx is the struct ft_server. */
void ft_server_handle(void *ctx, const struct ft_http_req *req, struct ft_http_resp *resp);

#endif
