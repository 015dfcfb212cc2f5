/* openai.c — routes and request validation of the OpenAI-compatible API (see openai.h), the
 * JSON for models/health/stats/tokenize/detokenize, and the submission of generation requests.
 * The generation responses themselves (blocking JSON or SSE stream) are in openai_gen.c.
 * Called by server/http.c on connection threads, many at once; reads the server struct only. */
#include "server/openai.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/status.h"
#include "core/timer.h"
#include "engine/sched.h"
#include "server/openai_impl.h"
#include "text/chat.h"
#include "text/tokenizer.h"

void ft_server_init(struct ft_server *s, const char *model_id) {
    memset(s, 0, sizeof *s);
    s->model_id = model_id;
    s->start_us = ft_time_us();
    atomic_init(&s->state, FT_SERVER_LOADING);
    atomic_init(&s->next_id, 1);
}

void ft_server_set_ready(struct ft_server *s) { atomic_store(&s->state, FT_SERVER_READY); }

void ft_srv_reply(struct ft_http_resp *resp, int status, json_t *j) {
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) {
        ft_http_error(resp, 500, NULL, "out of memory");
        return;
    }
    ft_http_json(resp, status, text);
}

/* --- field readers: absent or null leaves *out unchanged; a wrong type is a 400 ------------ */

int ft_srv_num(json_t *o, const char *key, float *out, struct ft_http_resp *resp) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) {
        ft_http_error(resp, 400, key, "%s must be a number", key);
        return -1;
    }
    *out = (float)json_number_value(v);
    return 0;
}

int ft_srv_int(json_t *o, const char *key, long lo, long hi, long *out,
               struct ft_http_resp *resp) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        ft_http_error(resp, 400, key, "%s must be an integer in [%ld, %ld]", key, lo, hi);
        return -1;
    }
    *out = (long)json_integer_value(v);
    return 0;
}

int ft_srv_bool(json_t *o, const char *key, int *out, struct ft_http_resp *resp) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) {
        ft_http_error(resp, 400, key, "%s must be true or false", key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

/* Parses the body into a JSON object, or answers 400. */
json_t *ft_srv_body(const struct ft_http_req *req, struct ft_http_resp *resp) {
    json_error_t err;
    json_t *root = json_loadb(req->body, req->body_len, 0, &err);
    if (!root) {
        ft_http_error(resp, 400, NULL, "request body is not valid JSON (line %d, column %d: %s)",
                      err.line, err.column, err.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        ft_http_error(resp, 400, NULL, "request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* --- sampling, stop, limits: the fields shared by both generation endpoints --------------- */

static int parse_stop(json_t *root, struct ft_req_params *p, struct ft_http_resp *resp) {
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        if (json_string_length(v)) p->stop[p->n_stop++] = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > FT_MAX_STOP) {
        ft_http_error(resp, 400, "stop", "stop must be a string or a list of at most %d strings",
                      FT_MAX_STOP);
        return -1;
    }
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s) || !json_string_length(s)) {
            ft_http_error(resp, 400, "stop", "stop[%zu] must be a non-empty string", i);
            return -1;
        }
        p->stop[p->n_stop++] = json_string_value(s);
    }
    return 0;
}

static int parse_sampling(json_t *root, struct ft_sampling *sp, struct ft_http_resp *resp) {
    long top_k = sp->top_k, seed = -1;
    if (ft_srv_num(root, "temperature", &sp->temperature, resp) ||
        ft_srv_num(root, "top_p", &sp->top_p, resp) || ft_srv_num(root, "min_p", &sp->min_p, resp) ||
        ft_srv_num(root, "presence_penalty", &sp->presence_penalty, resp) ||
        ft_srv_num(root, "frequency_penalty", &sp->frequency_penalty, resp) ||
        ft_srv_num(root, "repetition_penalty", &sp->repetition_penalty, resp) ||
        ft_srv_int(root, "top_k", -1, 1L << 24, &top_k, resp) ||
        ft_srv_int(root, "seed", -(1L << 62), 1L << 62, &seed, resp))
        return -1;
    sp->top_k = top_k < 0 ? 0 : (int)top_k; /* -1 = off, as in vLLM */
    if (json_object_get(root, "seed") && !json_is_null(json_object_get(root, "seed")))
        sp->seed = (uint64_t)seed ? (uint64_t)seed : 0x5eed; /* 0 would mean "from the clock" */
    if (ft_sampling_validate(sp) != FT_OK) {
        char param[32];
        sscanf(ft_error(), "%31s", param); /* the message starts with the field name */
        ft_http_error(resp, 400, param, "%s", ft_error());
        return -1;
    }
    return 0;
}

static int parse_common(struct ft_server *s, json_t *root, struct ft_gen_job *job,
                        struct ft_http_resp *resp) {
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_string(model)) {
        ft_http_error(resp, 400, "model", "model must be a string");
        return -1;
    }
    if (model && strcmp(json_string_value(model), s->model_id)) {
        ft_http_error(resp, 404, "model", "model '%s' does not exist: this server serves '%s' "
                      "(GET /v1/models)", json_string_value(model), s->model_id);
        return -1;
    }
    long n = 1, max_tokens = 0, max_completion = 0;
    int logprobs = 0;
    job->p.sampling = s->defaults;
    job->p.skip_special = 1;
    if (ft_srv_int(root, "n", 1, 1L << 30, &n, resp) ||
        ft_srv_bool(root, "stream", &job->stream, resp) ||
        ft_srv_int(root, "max_tokens", 1, 1L << 30, &max_tokens, resp) ||
        ft_srv_int(root, "max_completion_tokens", 1, 1L << 30, &max_completion, resp) ||
        ft_srv_bool(root, "ignore_eos", &job->p.ignore_eos, resp) ||
        parse_sampling(root, &job->p.sampling, resp) || parse_stop(root, &job->p, resp))
        return -1;
    if (n != 1) {
        ft_http_error(resp, 400, "n", "n = %ld is not supported: only n = 1 (send several "
                      "requests instead)", n);
        return -1;
    }
    job->p.max_tokens = (int)(max_completion ? max_completion : max_tokens);
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            ft_http_error(resp, 400, "stream_options", "stream_options must be an object");
            return -1;
        }
        if (ft_srv_bool(so, "include_usage", &job->include_usage, resp)) return -1;
    }
    json_t *lp = json_object_get(root, "logprobs");
    if (lp && (json_is_true(lp) || json_is_integer(lp))) logprobs = 1;
    if (logprobs) {
        ft_http_error(resp, 400, "logprobs", "logprobs are not supported yet");
        return -1;
    }
    return 0;
}

/* Submits job (prompt tokens already in job) and answers: JSON, SSE, or the error. */
static void submit(struct ft_server *s, const struct ft_http_req *req, struct ft_gen_job *job,
                   struct ft_http_resp *resp) {
    struct ft_req *r = NULL;
    job->p.prompt = job->prompt;
    job->p.n_prompt = job->n_prompt;
    enum ft_status st = ft_sched_submit(s->sched, &job->p, &r);
    if (st == FT_ERR_BUSY) {
        ft_http_error(resp, 429, NULL, "%s (the queue is full: retry later, or start the server "
                      "with a larger --max-running-requests)", ft_error());
        return;
    }
    if (st == FT_ERR_INVALID_ARG) {
        ft_http_error(resp, 400, strstr(ft_error(), "max_tokens") ? "max_tokens" : "messages",
                      "%s", ft_error());
        return;
    }
    if (st != FT_OK) {
        ft_http_error(resp, 500, NULL, "engine: %s", ft_error());
        return;
    }
    snprintf(job->id, sizeof job->id, "%s-%012llx%08lx", job->chat ? "chatcmpl" : "cmpl",
             (unsigned long long)s->start_us & 0xffffffffffffull,
             atomic_fetch_add(&s->next_id, 1));
    job->created = (long)(ft_time_us() / 1000000) + 0;
    if (job->stream)
        ft_srv_stream(s, job, r, resp);
    else
        ft_srv_wait(s, job, r, req->conn, resp);
}

/* --- /v1/chat/completions ----------------------------------------------------------------- */

/* The text of a message's content: a string, null, or a list of {"type":"text","text":...}
 * parts (joined with newlines into *owned). */
static int message_text(json_t *c, size_t i, const char **text, char **owned,
                        struct ft_http_resp *resp) {
    if (!c || json_is_null(c)) return *text = "", 0;
    if (json_is_string(c)) return *text = json_string_value(c), 0;
    if (!json_is_array(c)) {
        ft_http_error(resp, 400, "messages", "messages[%zu].content must be a string or a list "
                      "of text parts", i);
        return -1;
    }
    struct ft_sbuf b = {0};
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *t = json_object_get(part, "text");
        const char *type = json_string_value(json_object_get(part, "type"));
        if (type && (!strcmp(type, "image_url") || !strcmp(type, "input_image") || !strcmp(type, "image"))) {
            ft_sbuf_free(&b);
            ft_http_error(resp, 400, "messages", "messages[%zu].content[%zu]: image input is not "
                          "supported (this server runs the language model only)", i, k);
            return -1;
        }
        if (!type || strcmp(type, "text") || !json_is_string(t)) {
            ft_sbuf_free(&b);
            ft_http_error(resp, 400, "messages", "messages[%zu].content[%zu]: only parts "
                          "{\"type\": \"text\", \"text\": \"...\"} are supported", i, k);
            return -1;
        }
        if (k) ft_sbuf_add(&b, "\n", 1);
        ft_sbuf_add(&b, json_string_value(t), json_string_length(t));
    }
    *owned = b.p ? b.p : strdup("");
    *text = *owned;
    return 0;
}

static int parse_role(const char *r, enum ft_chat_role *out) {
    if (!r) return -1;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) *out = FT_ROLE_SYSTEM;
    else if (!strcmp(r, "user")) *out = FT_ROLE_USER;
    else if (!strcmp(r, "assistant")) *out = FT_ROLE_ASSISTANT;
    else if (!strcmp(r, "tool")) *out = FT_ROLE_TOOL;
    else return -1;
    return 0;
}

static int parse_messages(json_t *root, struct ft_chat_msg **out, char ***owned, int *n,
                          struct ft_http_resp *resp) {
    json_t *ms = json_object_get(root, "messages");
    if (!json_is_array(ms) || !json_array_size(ms)) {
        ft_http_error(resp, 400, "messages", "messages must be a non-empty list of "
                      "{\"role\", \"content\"} objects");
        return -1;
    }
    size_t cnt = json_array_size(ms), i;
    *out = calloc(cnt, sizeof **out);
    *owned = calloc(cnt, sizeof **owned);
    *n = (int)cnt;
    if (!*out || !*owned) return ft_http_error(resp, 500, NULL, "out of memory"), -1;
    json_t *m;
    json_array_foreach(ms, i, m) {
        struct ft_chat_msg *cm = &(*out)[i];
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || parse_role(role, &cm->role)) {
            ft_http_error(resp, 400, "messages", "messages[%zu].role must be one of system, user, "
                          "assistant, tool", i);
            return -1;
        }
        if (message_text(json_object_get(m, "content"), i, &cm->content, &(*owned)[i], resp))
            return -1;
        cm->reasoning = json_string_value(json_object_get(m, "reasoning_content"));
        cm->name = json_string_value(json_object_get(m, "tool_call_id"));
        if (!cm->name) cm->name = json_string_value(json_object_get(m, "name"));
    }
    return 0;
}

/* enable_thinking: top level or chat_template_kwargs; -1 = the template's default. */
static int parse_thinking(json_t *root, int *out, struct ft_http_resp *resp) {
    *out = -1;
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw)) {
        ft_http_error(resp, 400, "chat_template_kwargs", "chat_template_kwargs must be an object");
        return -1;
    }
    if (ft_srv_bool(root, "enable_thinking", out, resp)) return -1;
    return kw ? ft_srv_bool(kw, "enable_thinking", out, resp) : 0;
}

/* Renders and tokenises the conversation into job->prompt; decides the reasoning split. */
static int chat_prompt(struct ft_server *s, json_t *root, struct ft_gen_job *job,
                       struct ft_http_resp *resp) {
    struct ft_chat_msg *msgs = NULL;
    char **owned = NULL, *text = NULL;
    int n = 0, rc = -1, think = -1;
    if (parse_messages(root, &msgs, &owned, &n, resp) || parse_thinking(root, &think, resp))
        goto done;
    size_t bl = 0, el = 0;
    const char *bos = ft_tok_bos(s->tok) >= 0 ? ft_tok_piece(s->tok, ft_tok_bos(s->tok), &bl) : NULL;
    const char *eos = ft_tok_eos(s->tok) >= 0 ? ft_tok_piece(s->tok, ft_tok_eos(s->tok), &el) : NULL;
    struct ft_chat_opts co = {.add_generation_prompt = 1, .enable_thinking = think,
                              .bos_token = bos, .eos_token = eos};
    if (ft_chat_render(s->tmpl, msgs, n, &co, &text) != FT_OK) {
        ft_http_error(resp, 400, "messages", "%s", ft_error());
        goto done;
    }
    if (ft_tok_encode(s->tok, text, strlen(text), 0, &job->prompt, &job->n_prompt) != FT_OK) {
        ft_http_error(resp, 400, "messages", "%s", ft_error());
        goto done;
    }
    /* split <think> only for tokenizers that know it; a prompt ending in "<think>\n" has
     * already opened the block (DeepSeek-R1 style) */
    job->split = ft_tok_find(s->tok, "<think>") >= 0;
    size_t tl = strlen(text);
    while (tl && (text[tl - 1] == '\n' || text[tl - 1] == ' ')) tl--;
    job->in_think = job->split && tl >= 7 && !memcmp(text + tl - 7, "<think>", 7);
    if (!strcmp(ft_chat_template_name(s->tmpl), "harmony")) { /* gpt-oss: channels, not <think> */
        job->split = 1, job->harmony = 1, job->in_think = 0;
        job->p.skip_special = 0; /* the splitter needs the markers; it drops them */
    }
    rc = 0;
done:
    for (int i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(msgs);
    free(text);
    return rc;
}

static void chat_completions(struct ft_server *s, const struct ft_http_req *req,
                             struct ft_http_resp *resp) {
    struct ft_gen_job job = {.chat = 1};
    json_t *root = ft_srv_body(req, resp);
    if (root && !parse_common(s, root, &job, resp) && !chat_prompt(s, root, &job, resp))
        submit(s, req, &job, resp);
    free(job.prompt);
    json_decref(root);
}

/* --- /v1/completions ---------------------------------------------------------------------- */

static int completion_prompt(struct ft_server *s, json_t *root, struct ft_gen_job *job,
                             struct ft_http_resp *resp) {
    json_t *p = json_object_get(root, "prompt");
    int echo = 0;
    if (ft_srv_bool(root, "echo", &echo, resp)) return -1;
    if (echo) return ft_http_error(resp, 400, "echo", "echo is not supported"), -1;
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        if (ft_tok_encode(s->tok, json_string_value(p), json_string_length(p), 1, &job->prompt,
                          &job->n_prompt) != FT_OK)
            return ft_http_error(resp, 400, "prompt", "%s", ft_error()), -1;
        if (!job->n_prompt) return ft_http_error(resp, 400, "prompt", "prompt is empty"), -1;
        return 0;
    }
    if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0)))
        return ft_srv_ids(s, p, "prompt", &job->prompt, &job->n_prompt, resp);
    ft_http_error(resp, 400, "prompt", "prompt must be a non-empty string or a list of token ids "
                  "(one prompt per request)");
    return -1;
}

static void completions(struct ft_server *s, const struct ft_http_req *req,
                        struct ft_http_resp *resp) {
    struct ft_gen_job job = {.chat = 0};
    json_t *root = ft_srv_body(req, resp);
    if (root && !parse_common(s, root, &job, resp) && !completion_prompt(s, root, &job, resp))
        submit(s, req, &job, resp);
    free(job.prompt);
    json_decref(root);
}

/* --- routes ------------------------------------------------------------------------------- */

struct route {
    const char *method, *path;
    void (*fn)(struct ft_server *, const struct ft_http_req *, struct ft_http_resp *);
    int needs_model;
};

static const struct route k_routes[] = {
    {"POST", "/v1/chat/completions", chat_completions, 1},
    {"POST", "/v1/completions", completions, 1},
    {"GET", "/v1/models", ft_srv_models, 0},
    {"GET", "/health", ft_srv_health, 0},
    {"GET", "/v1/stats", ft_srv_stats, 1},
    {"POST", "/tokenize", ft_srv_tokenize, 1},
    {"POST", "/detokenize", ft_srv_detokenize, 1},
};

void ft_server_handle(void *ctx, const struct ft_http_req *req, struct ft_http_resp *resp) {
    struct ft_server *s = ctx;
    const struct route *path_match = NULL;
    size_t n = sizeof k_routes / sizeof k_routes[0];
    if (!strncmp(req->path, "/v1/models/", 11)) return ft_srv_model(s, req, resp);
    for (size_t i = 0; i < n; i++) {
        const struct route *r = &k_routes[i];
        if (strcmp(r->path, req->path)) continue;
        path_match = r;
        if (strcmp(r->method, req->method)) continue;
        if (r->needs_model && atomic_load(&s->state) != FT_SERVER_READY) {
            ft_http_error(resp, 503, NULL, "the model is still loading: retry in a moment "
                          "(GET /health says when it is ready)");
            return;
        }
        r->fn(s, req, resp);
        return;
    }
    if (path_match)
        ft_http_error(resp, 405, NULL, "method %s is not allowed on %s (use %s)", req->method,
                      req->path, path_match->method);
    else
        ft_http_error(resp, 404, NULL, "no route %s %s (see GET /v1/models, POST "
                      "/v1/chat/completions, POST /v1/completions)", req->method, req->path);
}
