/* openai_gen.c — turns a submitted request's events (engine/sched.h) into the response of the
 * API it came through: one JSON object after the request finishes, or an SSE stream. The text
 * goes through the reasoning splitter (<think> or harmony channels -> reasoning) and, when the
 * request has tools, the tool-call parser (text/tool_parse.h) -> tool_calls. This file writes
 * the OpenAI chat.completion / text_completion shapes; anthropic.c and responses.c write theirs
 * through struct ft_stream_api. A client that goes away cancels its request.
 * Called by openai.c (submit); the stream callbacks by http.c. Threading: one request is handled
 * by its connection's thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/timer.h"
#include "server/openai_impl.h"
#include "text/tok_bytes.h"
#include "text/tool_parse.h"

#define FT_EVENT_WAIT_MS 100

/* OpenAI's finish_reason values only: stop, length, tool_calls. */
static const char *finish_name(int f, int tool_calls) {
    if (tool_calls) return "tool_calls";
    return f == FT_FINISH_LENGTH ? "length" : "stop";
}

static int error_status(enum ft_status st) {
    return st == FT_ERR_INVALID_ARG ? 400 : st == FT_ERR_BUSY ? 503 : 500;
}

/* The fields every response and chunk of a job starts with. */
static json_t *envelope(const struct ft_server *s, const struct ft_gen_job *job, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", job->id, "object", object, "created",
                     (json_int_t)job->created, "model", s->model_id);
}

/* OpenAI's usage, with the prompt tokens the prefix cache held as cached_tokens */
static json_t *usage_obj(int n_prompt, int n_gen, int n_cached) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", n_prompt, "completion_tokens",
                     n_gen, "total_tokens", n_prompt + n_gen, "prompt_tokens_details",
                     "cached_tokens", n_cached);
}

/* --- logprobs ----------------------------------------------------------------------------- */

/* A token's text (its bytes; bytes that are not UTF-8 each read U+FFFD) and *bytes, its bytes as
 * a list of integers (OpenAI's "bytes"). */
static json_t *lp_token(const struct ft_server *s, int32_t id, json_t **bytes) {
    size_t n = 0;
    int special = 0;
    const char *b = ft_tok_bytes(s->tok, id, &n, &special);
    struct ft_sbuf t = {0};
    if (bytes) *bytes = json_array();
    for (size_t i = 0; b && i < n;) {
        const unsigned char c = (unsigned char)b[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = k && i + k <= n;
        for (size_t j = 1; ok && j < k; j++) ok = ((unsigned char)b[i + j] & 0xc0) == 0x80;
        json_t *v = ok ? json_stringn(b + i, k) : NULL; /* NULL: overlong or a surrogate */
        ok = v != NULL;
        json_decref(v);
        ft_sbuf_add(&t, ok ? b + i : "\xef\xbf\xbd", ok ? k : 3);
        i += ok ? k : 1;
    }
    for (size_t i = 0; bytes && b && i < n; i++)
        json_array_append_new(*bytes, json_integer((unsigned char)b[i]));
    json_t *j = json_stringn(t.p ? t.p : "", t.n);
    ft_sbuf_free(&t);
    return j;
}

/* One generated token in the chat shape: {token, logprob, bytes, top_logprobs: [...]} */
static json_t *lp_entry(const struct ft_server *s, const struct ft_token_lp *lp) {
    json_t *bytes, *top = json_array();
    json_t *e = json_pack("{s:o, s:f}", "token", lp_token(s, lp->id, &bytes), "logprob",
                          (double)lp->logprob);
    json_object_set_new(e, "bytes", bytes);
    for (int i = 0; i < lp->n_top; i++) {
        json_t *tb, *t = json_pack("{s:o, s:f}", "token", lp_token(s, lp->top_id[i], &tb),
                                   "logprob", (double)lp->top_lp[i]);
        json_object_set_new(t, "bytes", tb);
        json_array_append_new(top, t);
    }
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

/* The prompt's first token for echo with logprobs: nothing came before it to predict it, so
 * its logprob and alternatives are null (OpenAI's shape). */
static json_t *lp_first(const struct ft_server *s, int32_t id) {
    return json_pack("{s:o, s:n, s:n}", "token", lp_token(s, id, NULL), "logprob", "top_logprobs");
}

/* Chat: {"content": entries, "refusal": null} (takes the reference). */
static json_t *lp_chat(json_t *entries) {
    return json_pack("{s:o, s:n}", "content", entries, "refusal");
}

/* Completions: {"tokens", "token_logprobs", "top_logprobs" ({token: logprob} per token, or
 * null when no alternatives were asked for), "text_offset" (characters before each token,
 * counted from *offset, which moves on)}. */
static json_t *lp_completion(json_t *entries, int n_top, long *offset) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = n_top ? json_array() : json_null();
    json_t *offs = json_array(), *e;
    size_t i;
    json_array_foreach(entries, i, e) {
        const char *t = json_string_value(json_object_get(e, "token"));
        json_array_append(tokens, json_object_get(e, "token"));
        json_array_append(lps, json_object_get(e, "logprob"));
        json_array_append_new(offs, json_integer(*offset));
        for (const char *q = t; q && *q; q++) *offset += ((unsigned char)*q & 0xc0) != 0x80;
        if (!n_top) continue;
        if (json_is_null(json_object_get(e, "top_logprobs"))) { /* the prompt's first token */
            json_array_append_new(tops, json_null());
            continue;
        }
        json_t *d = json_object(), *a;
        size_t k;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, a) /* most likely first: */
            if (!json_object_get(d, json_string_value(json_object_get(a, "token")))) /* texts */
                json_object_set(d, json_string_value(json_object_get(a, "token")), /* may repeat */
                                json_object_get(a, "logprob"));
        json_array_append_new(tops, d);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static long utf8_chars(const char *s) {
    long n = 0;
    for (; s && *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

/* --- the text pipeline: reasoning split, then tool calls ------------------------------------ */

struct pipe {
    struct ft_think th;
    struct ft_tool_parser tp;
    int split, n_reported;
    unsigned long id_base;
};

static void pipe_init(struct pipe *p, const struct ft_gen_job *job) {
    ft_think_init(&p->th, job->in_think, job->harmony);
    ft_tool_parser_init(&p->tp, (enum ft_tool_fmt)job->tool_fmt, job->tools);
    p->split = job->split;
    p->n_reported = 0;
    p->id_base = (unsigned long)ft_time_us();
}

static void pipe_free(struct pipe *p) {
    ft_think_free(&p->th);
    ft_tool_parser_free(&p->tp);
}

/* Text in; reasoning and content out (appended), new calls in p->tp.calls[n_reported..). */
static void pipe_push(struct pipe *p, const char *s, size_t n, struct ft_sbuf *r, struct ft_sbuf *c,
                      int end) {
    struct ft_sbuf cc = {0};
    if (p->split) {
        if (n) ft_think_push(&p->th, s, n, r, &cc);
        if (end) ft_think_flush(&p->th, r, &cc);
    } else {
        ft_sbuf_add(&cc, s, n);
    }
    if (cc.n) ft_tool_parser_push(&p->tp, cc.p, cc.n);
    if (end) ft_tool_parser_finish(&p->tp);
    if (p->tp.n_out) ft_sbuf_add(c, p->tp.out, p->tp.n_out);
    p->tp.n_out = 0;
    ft_sbuf_free(&cc);
}

/* The id of the call with tool_calls index `index` (text/tool_parse.h: ft_tool_call.index). */
static void call_id(const struct pipe *p, int index, char *idbuf, size_t cap) {
    snprintf(idbuf, cap, "call_%012lx%04x", p->id_base & 0xffffffffffffUL, (unsigned)index);
}

static void call_out(struct pipe *p, int i, struct ft_tool_call_out *o, char *idbuf, size_t cap) {
    call_id(p, p->tp.calls[i].index, idbuf, cap);
    o->id = idbuf;
    o->name = p->tp.calls[i].name;
    o->args = p->tp.calls[i].args;
}

/* --- blocking responses ------------------------------------------------------------------- */

struct gen_result {
    struct ft_gen_out o;
    int failed, gone;
    struct ft_metrics *m;       /* the server's, for the latency histograms */
    struct ft_metrics_req mq;
    enum ft_status status;
    char message[256];
    char ids[64][32];
};

/* Pulls events until DONE/ERROR or the client goes away; releases r. */
static void collect(struct ft_server *s, struct ft_gen_job *job, struct ft_req *r,
                    struct ft_http_conn *conn, struct gen_result *g) {
    struct pipe p;
    pipe_init(&p, job);
    g->o.n_prompt = job->n_prompt;
    if (job->p.prompt_logprobs && job->n_prompt) g->o.plp = json_pack("[o]", lp_first(s, job->prompt[0]));
    for (;;) {
        struct ft_event ev;
        if (!ft_req_next_event(r, &ev, FT_EVENT_WAIT_MS)) {
            if (!ft_http_client_gone(conn)) continue;
            ft_req_cancel(r);
            g->gone = 1;
            break;
        }
        ft_metrics_req_event(g->m, &g->mq, &ev);
        if (ev.n_prompt) g->o.n_prompt = ev.n_prompt;
        g->o.n_gen = ev.n_gen;
        if (ev.type == FT_EV_DONE) g->o.n_cached = ev.n_cached;
        if (ev.type == FT_EV_DONE && ev.stop_index >= 0 && ev.stop_index < job->p.n_stop)
            g->o.stop_seq = job->p.stop[ev.stop_index];
        if (ev.type == FT_EV_TEXT && ev.prompt) { /* a prompt token's logprobs (echo) */
            if (ev.lp && g->o.plp) json_array_append_new(g->o.plp, lp_entry(s, ev.lp));
            free(ev.text);
            free(ev.lp);
            continue;
        }
        if (ev.type == FT_EV_TEXT) {
            if (ev.lp && !g->o.lp) g->o.lp = json_array();
            if (ev.lp) json_array_append_new(g->o.lp, lp_entry(s, ev.lp));
            pipe_push(&p, ev.text, ev.len, &g->o.reasoning, &g->o.content, 0);
            free(ev.text);
            free(ev.lp);
            /* checked after every event too (one a step while tokens flow), not only when the
             * engine is quiet: a client that went away stops its request within one step */
            if (!ft_http_client_gone(conn)) continue;
            ft_req_cancel(r);
            g->gone = 1;
            break;
        }
        if (ev.type == FT_EV_ERROR) {
            g->failed = 1, g->status = ev.status;
            memcpy(g->message, ev.message, sizeof g->message);
        }
        g->o.finish = ev.finish;
        break;
    }
    pipe_push(&p, NULL, 0, &g->o.reasoning, &g->o.content, 1);
    int n = p.tp.n_calls < 64 ? p.tp.n_calls : 64;
    g->o.calls = calloc((size_t)(n ? n : 1), sizeof *g->o.calls);
    for (int i = 0; g->o.calls && i < n; i++) {
        struct ft_tool_call_out c;
        call_out(&p, i, &c, g->ids[i], sizeof g->ids[i]);
        g->o.calls[i] = (struct ft_tool_call_out){strdup(c.id), strdup(c.name), strdup(c.args)};
    }
    g->o.n_calls = g->o.calls ? n : 0;
    pipe_free(&p);
    ft_req_release(r);
}

static void out_free(struct ft_gen_out *o) {
    for (int i = 0; i < o->n_calls; i++) free(o->calls[i].id), free(o->calls[i].name), free(o->calls[i].args);
    free(o->calls);
    ft_sbuf_free(&o->reasoning);
    ft_sbuf_free(&o->content);
    json_decref(o->lp);
    json_decref(o->plp);
}

static json_t *str_or_null(const struct ft_sbuf *b) {
    return b->n ? json_stringn(b->p, b->n) : json_null();
}

static json_t *chat_tool_calls(const struct ft_gen_out *o) {
    json_t *a = json_array();
    for (int i = 0; i < o->n_calls; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", o->calls[i].id,
                                           "type", "function", "function", "name",
                                           o->calls[i].name, "arguments", o->calls[i].args));
    return a;
}

/* content of a message with tool calls: null when only blanks are left around them */
static json_t *chat_content(const struct ft_gen_out *o) {
    size_t i = 0;
    while (o->n_calls && i < o->content.n && strchr(" \n\t\r", o->content.p[i])) i++;
    if (o->n_calls && i == o->content.n) return json_null();
    return json_stringn(o->content.p ? o->content.p : "", o->content.n);
}

static json_t *chat_json(struct ft_server *s, const struct ft_gen_job *job, const struct ft_gen_out *o) {
    json_t *msg = json_pack("{s:s, s:o, s:o}", "role", "assistant", "content", chat_content(o),
                            "reasoning_content", str_or_null(&o->reasoning));
    if (o->n_calls) json_object_set_new(msg, "tool_calls", chat_tool_calls(o));
    json_t *choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "message", msg, "logprobs",
                               "finish_reason", finish_name(o->finish, o->n_calls > 0));
    if (job->p.logprobs)
        json_object_set_new(choice, "logprobs", lp_chat(o->lp ? json_incref(o->lp) : json_array()));
    json_t *j = envelope(s, job, "chat.completion");
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    json_object_set_new(j, "usage", usage_obj(o->n_prompt, o->n_gen, o->n_cached));
    return j;
}

static json_t *completion_json(struct ft_server *s, const struct ft_gen_job *job,
                               const struct ft_gen_out *o) {
    struct ft_sbuf text = {0};
    if (job->echo_text) ft_sbuf_add(&text, job->echo_text, strlen(job->echo_text));
    ft_sbuf_add(&text, o->content.p ? o->content.p : "", o->content.n);
    json_t *choice = json_pack("{s:i, s:s%, s:n, s:s}", "index", 0, "text", text.p ? text.p : "",
                               text.n, "logprobs", "finish_reason", finish_name(o->finish, 0));
    ft_sbuf_free(&text);
    if (job->p.logprobs) { /* echo: the prompt's tokens first, their offsets from 0 */
        json_t *all = json_array();
        if (o->plp) json_array_extend(all, o->plp);
        if (o->lp) json_array_extend(all, o->lp);
        long off = o->plp ? 0 : utf8_chars(job->echo_text);
        json_object_set_new(choice, "logprobs", lp_completion(all, job->p.top_logprobs, &off));
        json_decref(all);
    }
    json_t *j = envelope(s, job, "text_completion");
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    json_object_set_new(j, "usage", usage_obj(o->n_prompt, o->n_gen, o->n_cached));
    return j;
}

void ft_srv_wait(struct ft_server *s, struct ft_gen_job *job, struct ft_req *r,
                 struct ft_http_conn *conn, struct ft_http_resp *resp) {
    struct gen_result *g = calloc(1, sizeof *g);
    if (!g) {
        ft_req_cancel(r);
        ft_req_release(r);
        ft_http_error(resp, 500, NULL, "out of memory");
        return;
    }
    g->m = &s->metrics;
    ft_metrics_req_begin(&g->mq);
    collect(s, job, r, conn, g);
    if (g->gone) {
        ft_http_error(resp, 499, NULL, "client closed the connection");
    } else if (g->failed) {
        ft_http_error(resp, error_status(g->status), NULL, "%s", g->message);
    } else {
        json_t *j = NULL;
        switch (job->api) {
        case FT_API_CHAT: j = chat_json(s, job, &g->o); break;
        case FT_API_COMPLETION: j = completion_json(s, job, &g->o); break;
        case FT_API_ANTHROPIC: j = ft_srv_anthropic_message(s, job, &g->o); break;
        case FT_API_RESPONSES: j = ft_srv_responses_object(s, job, &g->o, "completed"); break;
        }
        ft_srv_reply(resp, 200, j);
    }
    resp->n_tokens = g->o.n_gen;
    out_free(&g->o);
    free(g);
}

/* --- SSE streams -------------------------------------------------------------------------- */

struct gen_stream {
    struct ft_stream_base b; /* first: the writers' view */
    const struct ft_stream_api *api;
    struct ft_req *r;
    struct pipe p;
    struct ft_metrics_req mq; /* for /metrics */
    size_t off;
    int n_prompt, n_gen, finished;
    json_t *lp;   /* logprobs entries not sent yet (they go with the next chunk) */
    json_t *plp;  /* echo with logprobs: the prompt's entries, sent with the echo once all came */
    int tc_named[64];     /* calls streamed in pieces: named already */
    size_t tc_sent[64];   /* and the bytes of their arguments sent */
    long lp_off;  /* completions: characters of text before the next token */
};

/* OpenAI chunks: chat delta (role / content / reasoning / tool_calls) or completion text. */
static json_t *oa_chunk(struct gen_stream *g, json_t *delta_or_text, const char *finish) {
    json_t *c = json_pack("{s:i, s:n, s:o}", "index", 0, "logprobs", "finish_reason",
                          finish ? json_string(finish) : json_null());
    if (g->b.job.p.logprobs && g->lp && json_array_size(g->lp)) {
        json_object_set_new(c, "logprobs", g->b.job.chat ? lp_chat(json_incref(g->lp))
                                           : lp_completion(g->lp, g->b.job.p.top_logprobs,
                                                           &g->lp_off));
        json_decref(g->lp);
        g->lp = json_array(); /* the chunk holds the sent entries */
    }
    json_object_set_new(c, g->b.job.chat ? "delta" : "text", delta_or_text);
    json_t *j = envelope(g->b.s, &g->b.job, g->b.job.chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(j, "choices", json_pack("[o]", c));
    if (g->b.job.include_usage) json_object_set_new(j, "usage", json_null());
    return j;
}

/* Echo with logprobs: the prompt text in one chunk with its tokens' entries (offsets from 0). */
static void echo_flush(struct gen_stream *g) {
    json_t *gen = g->lp;
    g->lp = g->plp, g->plp = NULL, g->lp_off = 0;
    ft_sse_json(&g->b.out, oa_chunk(g, json_string(g->b.job.echo_text ? g->b.job.echo_text : ""), NULL));
    json_decref(g->lp);
    g->lp = gen;
    g->lp_off = utf8_chars(g->b.job.echo_text);
}

static void oa_start(void *ctx) {
    struct gen_stream *g = ctx;
    if (g->plp) return; /* echo with logprobs: sent once the prompt's entries came */
    if (!g->b.job.chat && g->b.job.echo_text) { /* echo: the prompt first */
        ft_sse_json(&g->b.out, oa_chunk(g, json_string(g->b.job.echo_text), NULL));
        g->lp_off = utf8_chars(g->b.job.echo_text);
    }
    if (g->b.job.chat)
        ft_sse_json(&g->b.out, oa_chunk(g, json_pack("{s:s, s:s}", "role", "assistant", "content", ""),
                                        NULL));
}

static void oa_text(void *ctx, const char *r, size_t nr, const char *c, size_t nc) {
    struct gen_stream *g = ctx;
    if (!g->b.job.chat) {
        if (nc) ft_sse_json(&g->b.out, oa_chunk(g, json_stringn(c, nc), NULL));
        return;
    }
    json_t *d = json_object();
    if (nc) json_object_set_new(d, "content", json_stringn(c, nc));
    if (nr) json_object_set_new(d, "reasoning_content", json_stringn(r, nr));
    ft_sse_json(&g->b.out, oa_chunk(g, d, NULL));
}

static void oa_call(void *ctx, int index, const struct ft_tool_call_out *c) {
    struct gen_stream *g = ctx;
    json_t *tc = json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", index, "id", c->id, "type",
                           "function", "function", "name", c->name, "arguments", c->args);
    ft_sse_json(&g->b.out, oa_chunk(g, json_pack("{s:[o]}", "tool_calls", tc), NULL));
}

/* OpenAI streams a call's arguments in pieces: the first delta names it, the rest only add
 * arguments text under its index */
static void oa_call_piece(void *ctx, int index, const char *id, const char *name, const char *args,
                          size_t n) {
    struct gen_stream *g = ctx;
    json_t *tc = id ? json_pack("{s:i, s:s, s:s, s:{s:s, s:s%}}", "index", index, "id", id, "type",
                                "function", "function", "name", name, "arguments", args, n)
                    : json_pack("{s:i, s:{s:s%}}", "index", index, "function", "arguments", args, n);
    if (tc) ft_sse_json(&g->b.out, oa_chunk(g, json_pack("{s:[o]}", "tool_calls", tc), NULL));
}

static void oa_end(void *ctx, int finish, int n_prompt, int n_gen, int tool_calls) {
    struct gen_stream *g = ctx;
    ft_sse_json(&g->b.out, oa_chunk(g, g->b.job.chat ? json_object() : json_string(""),
                                    finish_name(finish, tool_calls)));
    if (g->b.job.include_usage) {
        json_t *j = envelope(g->b.s, &g->b.job, g->b.job.chat ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(j, "choices", json_array());
        json_object_set_new(j, "usage", usage_obj(n_prompt, n_gen, g->b.n_cached));
        ft_sse_json(&g->b.out, j);
    }
    ft_sbuf_add(&g->b.out, "data: [DONE]\n\n", 14);
}

static void oa_error(void *ctx, const char *message, int status) {
    struct gen_stream *g = ctx;
    ft_sse_json(&g->b.out, json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", message,
                                     "type", status == 400 ? "invalid_request_error" : "internal_error",
                                     "param", "code", status));
    ft_sbuf_add(&g->b.out, "data: [DONE]\n\n", 14);
}

static const struct ft_stream_api k_openai_stream = {oa_start, oa_text, oa_call, oa_end, oa_error,
                                                     oa_call_piece, NULL};

/* Calls to the writer: the finished ones (the rest of their arguments when they went out in
 * pieces, else whole; then call_done), then, where the writer takes pieces, the open block's
 * calls as far as they are written (text/tool_parse.h: live). named_only: only the finished
 * calls that went out in pieces already (their blocks were open before this text, so they end
 * before it). Each goes under its parser index, rising: a live call goes out only after those
 * before it in its block; a live call whose block did not parse keeps its index (it ended as it
 * went out; the block's text follows as content), and the next call gets the next index, never
 * one a client already merged a name into. */
static void stream_calls(struct gen_stream *g, int named_only) {
    const struct ft_tool_parser *tp = &g->p.tp;
    const int pieces = g->api->call_piece != NULL;
    char id[32];
    for (; g->p.n_reported < tp->n_calls; g->p.n_reported++) {
        const int i = tp->calls[g->p.n_reported].index;
        const int named = pieces && i < 64 && g->tc_named[i];
        if (named_only && !named) return;
        struct ft_tool_call_out o;
        call_out(&g->p, g->p.n_reported, &o, id, sizeof id);
        if (named) {
            const size_t n = strlen(o.args), k = g->tc_sent[i];
            if (k < n) g->api->call_piece(g, i, NULL, NULL, o.args + k, n - k);
        } else if (pieces && i < 64) {
            g->api->call_piece(g, i, o.id, o.name, o.args, strlen(o.args));
            g->tc_named[i] = 1;
        } else {
            g->api->call(g, i, &o);
            continue;
        }
        if (g->api->call_done) g->api->call_done(g, i, &o);
    }
    for (int j = 0; !named_only && pieces && j < tp->n_live && tp->live_index + j < 64; j++) {
        const struct ft_tool_live *l = &tp->live[j];
        const int i = tp->live_index + j;
        if (l->no_stream || !l->name_done) break; /* it and those after it: whole when done */
        if (!g->tc_named[i]) {
            call_id(&g->p, i, id, sizeof id);
            char *name = strndup(l->name ? l->name : "", l->n_name);
            if (!name) continue;
            g->api->call_piece(g, i, id, name, l->args ? l->args : "", l->n_args);
            free(name);
            g->tc_named[i] = 1, g->tc_sent[i] = l->n_args;
        } else if (l->n_args > g->tc_sent[i]) {
            g->api->call_piece(g, i, NULL, NULL, l->args + g->tc_sent[i], l->n_args - g->tc_sent[i]);
            g->tc_sent[i] = l->n_args;
        }
    }
}

/* Text through the pipeline to the writer; calls the parser completed as they come. */
static void stream_text(struct gen_stream *g, const char *s, size_t n, int end) {
    struct ft_sbuf r = {0}, c = {0};
    pipe_push(&g->p, s, n, &r, &c, end);
    stream_calls(g, 1);
    if (r.n || c.n) g->api->text(g, r.p, r.n, c.p, c.n);
    stream_calls(g, 0);
    ft_sbuf_free(&r);
    ft_sbuf_free(&c);
}

static void stream_event(struct gen_stream *g, struct ft_event *ev) {
    if (ev->type == FT_EV_TEXT && ev->prompt) { /* a prompt token's logprobs (echo) */
        if (ev->lp && g->plp) json_array_append_new(g->plp, lp_entry(g->b.s, ev->lp));
        free(ev->text);
        free(ev->lp);
        return;
    }
    if (g->plp && ev->type != FT_EV_ERROR) echo_flush(g); /* the prompt is scored */
    if (ev->n_prompt) g->n_prompt = ev->n_prompt;
    g->n_gen = ev->n_gen;
    if (ev->type == FT_EV_DONE) g->b.n_cached = ev->n_cached;
    if (ev->type == FT_EV_DONE && ev->stop_index >= 0 && ev->stop_index < FT_MAX_STOP)
        g->b.stop_seq = g->b.stops[ev->stop_index];
    if (ev->type == FT_EV_TEXT) {
        if (ev->lp && !g->lp) g->lp = json_array();
        if (ev->lp) json_array_append_new(g->lp, lp_entry(g->b.s, ev->lp));
        stream_text(g, ev->text, ev->len, 0);
        free(ev->text);
        free(ev->lp);
        return;
    }
    if (ev->type == FT_EV_DONE) {
        stream_text(g, NULL, 0, 1);
        g->api->end(g, ev->finish, g->n_prompt, g->n_gen, g->p.tp.n_calls > 0);
    } else {
        g->api->error(g, ev->message, error_status(ev->status));
    }
    g->finished = 1;
}

static ssize_t stream_next(void *ctx, char *buf, size_t max) {
    struct gen_stream *g = ctx;
    if (g->off == g->b.out.n) {
        if (g->finished) return FT_HTTP_STREAM_END;
        g->off = g->b.out.n = 0;
        struct ft_event ev;
        if (!ft_req_next_event(g->r, &ev, FT_EVENT_WAIT_MS)) return 0;
        ft_metrics_req_event(&g->b.s->metrics, &g->mq, &ev);
        stream_event(g, &ev);
        if (g->off == g->b.out.n) return 0;
    }
    size_t n = g->b.out.n - g->off < max ? g->b.out.n - g->off : max;
    memcpy(buf, g->b.out.p + g->off, n);
    g->off += n;
    return (ssize_t)n;
}

static void stream_free(void *ctx) {
    struct gen_stream *g = ctx;
    if (!g->finished) ft_req_cancel(g->r);
    ft_req_release(g->r);
    pipe_free(&g->p);
    ft_sbuf_free(&g->b.out);
    ft_sbuf_free(&g->b.text);
    ft_sbuf_free(&g->b.reason);
    json_decref(g->b.items);
    json_decref(g->b.call);
    ft_sbuf_free(&g->b.call_args);
    json_decref(g->b.job.tools);
    json_decref(g->lp);
    json_decref(g->plp);
    free(g->b.job.echo_text);
    for (int i = 0; i < FT_MAX_STOP; i++) free(g->b.stops[i]);
    free(g);
}

static int stream_tokens(void *ctx) { return ((struct gen_stream *)ctx)->n_gen; }

void ft_srv_stream(struct ft_server *s, struct ft_gen_job *job, struct ft_req *r,
                   struct ft_http_resp *resp) {
    struct gen_stream *g = calloc(1, sizeof *g);
    if (!g) {
        ft_req_cancel(r);
        ft_req_release(r);
        ft_http_error(resp, 500, NULL, "out of memory");
        return;
    }
    g->b.s = s, g->r = r, g->b.job = *job, g->n_prompt = job->n_prompt;
    if (job->p.prompt_logprobs && job->n_prompt && job->api == FT_API_COMPLETION)
        g->plp = json_pack("[o]", lp_first(s, job->prompt[0]));
    g->b.job.prompt = NULL;
    job->echo_text = NULL; /* the stream has it now */
    g->b.job.tools = json_incref(job->tools);
    for (int i = 0; i < job->p.n_stop && i < FT_MAX_STOP; i++) /* for Anthropic's stop_sequence */
        g->b.stops[i] = job->p.stop[i] ? strdup(job->p.stop[i]) : NULL;
    memset(g->b.job.p.stop, 0, sizeof g->b.job.p.stop); /* they pointed into the request JSON */
    memset(&g->b.job.p.mask, 0, sizeof g->b.job.p.mask);
    g->api = job->api == FT_API_ANTHROPIC ? &ft_anthropic_stream
             : job->api == FT_API_RESPONSES ? &ft_responses_stream : &k_openai_stream;
    pipe_init(&g->p, &g->b.job);
    ft_metrics_req_begin(&g->mq);
    g->api->start(g);
    resp->status = 200;
    resp->content_type = "text/event-stream";
    resp->stream = stream_next;
    resp->stream_ctx = g;
    resp->stream_free = stream_free;
    resp->stream_tokens = stream_tokens;
}
