/* openai_gen.c — turns a submitted request's events (engine/sched.h) into the OpenAI response:
 * one JSON object after the request finishes, or an SSE stream of chat.completion.chunk /
 * text_completion chunks, usage, and [DONE]. Text between <think> and </think> goes to
 * reasoning_content. A client that goes away cancels its request.
 * Called by openai.c (submit); the stream callbacks by http.c. Threading: one request is handled
 * by its connection's thread only. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/openai_impl.h"

#define FT_EVENT_WAIT_MS 100

static const char *finish_name(enum ft_finish f) {
    return f == FT_FINISH_STOP ? "stop" : f == FT_FINISH_LENGTH ? "length" : "abort";
}

static int error_status(enum ft_status st) {
    return st == FT_ERR_INVALID_ARG ? 400 : st == FT_ERR_BUSY ? 503 : 500;
}

/* The fields every response and chunk of a job starts with. */
static json_t *envelope(const struct ft_server *s, const struct ft_gen_job *job, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", job->id, "object", object, "created",
                     (json_int_t)job->created, "model", s->model_id);
}

static json_t *usage_obj(int n_prompt, int n_gen) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", n_prompt, "completion_tokens", n_gen,
                     "total_tokens", n_prompt + n_gen);
}

/* --- blocking responses ------------------------------------------------------------------- */

struct gen_result {
    struct ft_sbuf reasoning, content;
    int n_prompt, n_gen;
    enum ft_finish finish;
    int failed, gone;
    enum ft_status status;
    char message[256];
};

/* Pulls events until DONE/ERROR or the client goes away; releases r. */
static void collect(struct ft_gen_job *job, struct ft_req *r, struct ft_http_conn *conn,
                    struct gen_result *g) {
    struct ft_think th;
    ft_think_init(&th, job->in_think, job->harmony);
    g->n_prompt = job->n_prompt;
    for (;;) {
        struct ft_event ev;
        if (!ft_req_next_event(r, &ev, FT_EVENT_WAIT_MS)) {
            if (!ft_http_client_gone(conn)) continue;
            ft_req_cancel(r);
            g->gone = 1;
            break;
        }
        if (ev.n_prompt) g->n_prompt = ev.n_prompt;
        g->n_gen = ev.n_gen;
        if (ev.type == FT_EV_TEXT) {
            if (job->split) ft_think_push(&th, ev.text, ev.len, &g->reasoning, &g->content);
            else ft_sbuf_add(&g->content, ev.text, ev.len);
            free(ev.text);
            continue;
        }
        if (ev.type == FT_EV_ERROR) {
            g->failed = 1, g->status = ev.status;
            memcpy(g->message, ev.message, sizeof g->message);
        }
        g->finish = ev.finish;
        break;
    }
    ft_think_flush(&th, &g->reasoning, &g->content);
    ft_think_free(&th);
    ft_req_release(r);
}

static json_t *str_or_null(const struct ft_sbuf *b) {
    return b->n ? json_stringn(b->p, b->n) : json_null();
}

void ft_srv_wait(struct ft_server *s, struct ft_gen_job *job, struct ft_req *r,
                 struct ft_http_conn *conn, struct ft_http_resp *resp) {
    struct gen_result g = {0};
    collect(job, r, conn, &g);
    if (g.gone) {
        ft_http_error(resp, 499, NULL, "client closed the connection");
    } else if (g.failed) {
        ft_http_error(resp, error_status(g.status), NULL, "%s", g.message);
    } else {
        json_t *choice;
        if (job->chat)
            choice = json_pack("{s:i, s:{s:s, s:o, s:o}, s:n, s:s}", "index", 0, "message", "role",
                               "assistant", "content", json_stringn(g.content.p ? g.content.p : "",
                                                                    g.content.n),
                               "reasoning_content", str_or_null(&g.reasoning), "logprobs",
                               "finish_reason", finish_name(g.finish));
        else
            choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "text",
                               json_stringn(g.content.p ? g.content.p : "", g.content.n),
                               "logprobs", "finish_reason", finish_name(g.finish));
        json_t *j = envelope(s, job, job->chat ? "chat.completion" : "text_completion");
        json_object_set_new(j, "choices", json_pack("[o]", choice));
        json_object_set_new(j, "usage", usage_obj(g.n_prompt, g.n_gen));
        ft_srv_reply(resp, 200, j);
    }
    resp->n_tokens = g.n_gen;
    ft_sbuf_free(&g.reasoning);
    ft_sbuf_free(&g.content);
}

/* --- SSE streams -------------------------------------------------------------------------- */

struct gen_stream {
    struct ft_server *s;
    struct ft_req *r;
    struct ft_gen_job job; /* prompt not owned */
    struct ft_think th;
    struct ft_sbuf out;    /* SSE bytes not yet handed to http.c */
    size_t off;
    int n_prompt, n_gen, finished;
};

/* One chunk: chat delta (role / content / reasoning) or completion text, with finish_reason. */
static void chunk(struct gen_stream *g, const struct ft_sbuf *content, const struct ft_sbuf *reason,
                  int role, const char *finish) {
    json_t *c = json_pack("{s:i, s:n, s:o}", "index", 0, "logprobs", "finish_reason",
                          finish ? json_string(finish) : json_null());
    if (g->job.chat) {
        json_t *d = json_object();
        if (role) json_object_set_new(d, "role", json_string("assistant"));
        if (role || (content && content->n))
            json_object_set_new(d, "content", json_stringn(content && content->p ? content->p : "",
                                                           content ? content->n : 0));
        if (reason && reason->n)
            json_object_set_new(d, "reasoning_content", json_stringn(reason->p, reason->n));
        json_object_set_new(c, "delta", d);
    } else {
        json_object_set_new(c, "text", json_stringn(content && content->p ? content->p : "",
                                                    content ? content->n : 0));
    }
    json_t *j = envelope(g->s, &g->job, g->job.chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(j, "choices", json_pack("[o]", c));
    if (g->job.include_usage) json_object_set_new(j, "usage", json_null());
    ft_sse_json(&g->out, j);
}

static void stream_end(struct gen_stream *g, const char *finish) {
    struct ft_sbuf r = {0}, c = {0};
    ft_think_flush(&g->th, &r, &c);
    if (r.n || c.n) chunk(g, &c, &r, 0, NULL);
    chunk(g, NULL, NULL, 0, finish);
    if (g->job.include_usage) {
        json_t *j = envelope(g->s, &g->job, g->job.chat ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(j, "choices", json_array());
        json_object_set_new(j, "usage", usage_obj(g->n_prompt, g->n_gen));
        ft_sse_json(&g->out, j);
    }
    ft_sbuf_free(&r);
    ft_sbuf_free(&c);
}

static void stream_event(struct gen_stream *g, struct ft_event *ev) {
    if (ev->n_prompt) g->n_prompt = ev->n_prompt;
    g->n_gen = ev->n_gen;
    if (ev->type == FT_EV_TEXT) {
        struct ft_sbuf r = {0}, c = {0};
        if (g->job.split) ft_think_push(&g->th, ev->text, ev->len, &r, &c);
        else ft_sbuf_add(&c, ev->text, ev->len);
        if (r.n || c.n) chunk(g, &c, &r, 0, NULL);
        ft_sbuf_free(&r);
        ft_sbuf_free(&c);
        free(ev->text);
        return;
    }
    if (ev->type == FT_EV_DONE) {
        stream_end(g, finish_name(ev->finish));
    } else {
        ft_sse_json(&g->out, json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", ev->message,
                                       "type", ev->status == FT_ERR_INVALID_ARG
                                                   ? "invalid_request_error" : "internal_error",
                                       "param", "code", error_status(ev->status)));
    }
    ft_sbuf_add(&g->out, "data: [DONE]\n\n", 14);
    g->finished = 1;
}

static ssize_t stream_next(void *ctx, char *buf, size_t max) {
    struct gen_stream *g = ctx;
    if (g->off == g->out.n) {
        if (g->finished) return FT_HTTP_STREAM_END;
        g->off = g->out.n = 0;
        struct ft_event ev;
        if (!ft_req_next_event(g->r, &ev, FT_EVENT_WAIT_MS)) return 0;
        stream_event(g, &ev);
        if (g->off == g->out.n) return 0;
    }
    size_t n = g->out.n - g->off < max ? g->out.n - g->off : max;
    memcpy(buf, g->out.p + g->off, n);
    g->off += n;
    return (ssize_t)n;
}

static void stream_free(void *ctx) {
    struct gen_stream *g = ctx;
    if (!g->finished) ft_req_cancel(g->r);
    ft_req_release(g->r);
    ft_think_free(&g->th);
    ft_sbuf_free(&g->out);
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
    g->s = s, g->r = r, g->job = *job, g->n_prompt = job->n_prompt;
    g->job.prompt = NULL;
    memset(g->job.p.stop, 0, sizeof g->job.p.stop); /* they pointed into the request JSON */
    ft_think_init(&g->th, job->in_think, job->harmony);
    if (job->chat) chunk(g, NULL, NULL, 1, NULL); /* first delta: role */
    resp->status = 200;
    resp->content_type = "text/event-stream";
    resp->stream = stream_next;
    resp->stream_ctx = g;
    resp->stream_free = stream_free;
    resp->stream_tokens = stream_tokens;
}
