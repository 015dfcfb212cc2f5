/* openai.c — routes and request validation of the OpenAI-compatible API (see openai.h), the
 * JSON for models/health/stats/tokenize/detokenize, and the submission of generation requests.
 * The generation responses themselves (blocking JSON or SSE stream) are in openai_gen.c.
 * Called by server/http.c on connection threads, many at once; reads the server struct only. */
#include "server/openai.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "core/status.h"
#include "core/timer.h"
#include "engine/sched.h"
#include "server/openai_impl.h"
#include "text/chat.h"
#include "text/json_grammar.h"
#include "text/tokenizer.h"
#include "text/tool_parse.h"

void ft_server_init(struct ft_server *s, const char *model_id) {
    memset(s, 0, sizeof *s);
    s->model_id = model_id;
    s->start_us = ft_time_us();
    s->start_unix = (long)time(NULL);
    pthread_mutex_init(&s->vocab_mu, NULL);
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

/* Chat: logprobs true/false and top_logprobs 0..20; completions: logprobs 0..20 (the number of
 * alternatives, OpenAI's legacy integer). Either way the tokens are drawn on the host. */
static int parse_logprobs(json_t *root, struct ft_gen_job *job, struct ft_http_resp *resp) {
    json_t *lp = json_object_get(root, "logprobs");
    long top = -1;
    if (job->api == FT_API_CHAT) {
        if (ft_srv_bool(root, "logprobs", &job->p.logprobs, resp) ||
            ft_srv_int(root, "top_logprobs", 0, FT_MAX_TOP_LOGPROBS, &top, resp))
            return -1;
        if (top >= 0 && !job->p.logprobs)
            return ft_http_error(resp, 400, "top_logprobs", "top_logprobs needs logprobs: true"),
                   -1;
        job->p.top_logprobs = top > 0 ? (int)top : 0;
        return 0;
    }
    if (job->api == FT_API_COMPLETION) {
        if (lp && !json_is_null(lp) && !json_is_integer(lp))
            return ft_http_error(resp, 400, "logprobs", "logprobs must be an integer from 0 to "
                                 "%d (the alternatives per token) or null", FT_MAX_TOP_LOGPROBS),
                   -1;
        if (ft_srv_int(root, "logprobs", 0, FT_MAX_TOP_LOGPROBS, &top, resp)) return -1;
        job->p.logprobs = top >= 0;
        job->p.top_logprobs = top > 0 ? (int)top : 0;
        return 0;
    }
    if (lp && !json_is_null(lp) && !json_is_false(lp))
        return ft_http_error(resp, 400, "logprobs", "logprobs are not supported by this API"), -1;
    return 0;
}

int ft_srv_common(struct ft_server *s, json_t *root, struct ft_gen_job *job,
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
    job->p.sampling = s->defaults;
    job->p.skip_special = 1;
    if (ft_srv_int(root, "n", 1, 1L << 30, &n, resp) ||
        ft_srv_bool(root, "stream", &job->stream, resp) ||
        ft_srv_int(root, "max_tokens", job->api == FT_API_COMPLETION ? 0 : 1, 1L << 30, &max_tokens,
                   resp) || /* completions: 0 scores an echoed prompt */
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
    return parse_logprobs(root, job, resp);
}

static const char *id_prefix(enum ft_api api) {
    switch (api) {
    case FT_API_CHAT: return "chatcmpl-";
    case FT_API_COMPLETION: return "cmpl-";
    case FT_API_ANTHROPIC: return "msg_";
    case FT_API_RESPONSES: return "resp_";
    }
    return "";
}

void ft_gen_job_free(struct ft_gen_job *job) {
    free(job->prompt);
    job->prompt = NULL;
    free(job->echo_text);
    job->echo_text = NULL;
    json_decref(job->tools);
    job->tools = NULL;
    if (job->p.mask.free) job->p.mask.free(job->p.mask.ctx); /* never submitted */
    memset(&job->p.mask, 0, sizeof job->p.mask);
}

/* Submits job (prompt tokens already in job) and answers: JSON, SSE, or the error. */
static void submit(struct ft_server *s, const struct ft_http_req *req, struct ft_gen_job *job,
                   struct ft_http_resp *resp) {
    struct ft_req *r = NULL;
    job->p.prompt = job->prompt;
    job->p.n_prompt = job->n_prompt;
    enum ft_status st = ft_sched_submit(s->sched, &job->p, &r);
    if (st == FT_OK) memset(&job->p.mask, 0, sizeof job->p.mask); /* the engine has it now */
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
    snprintf(job->id, sizeof job->id, "%s%012llx%08lx", id_prefix(job->api),
             (unsigned long long)s->start_us & 0xffffffffffffull,
             atomic_fetch_add(&s->next_id, 1));
    job->created = (long)time(NULL); /* Unix time, as OpenAI's "created" */
    if (job->stream)
        ft_srv_stream(s, job, r, resp);
    else
        ft_srv_wait(s, job, r, req->conn, resp);
}

/* --- /v1/chat/completions ----------------------------------------------------------------- */

/* --- conversations ------------------------------------------------------------------------- */

struct ft_chat_msg *ft_chat_in_add(struct ft_chat_in *in, enum ft_chat_role role) {
    if (in->n == in->cap) {
        int cap = in->cap ? in->cap * 2 : 8;
        struct ft_chat_msg *m = realloc(in->msgs, (size_t)cap * sizeof *m);
        if (!m) return NULL;
        in->msgs = m, in->cap = cap;
    }
    struct ft_chat_msg *m = &in->msgs[in->n++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

const char *ft_chat_in_own(struct ft_chat_in *in, char *str) {
    if (!str) return NULL;
    if (in->n_owned == in->cap_owned) {
        int cap = in->cap_owned ? in->cap_owned * 2 : 16;
        char **o = realloc(in->owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(str);
            return NULL;
        }
        in->owned = o, in->cap_owned = cap;
    }
    return in->owned[in->n_owned++] = str;
}

void ft_chat_in_free(struct ft_chat_in *in) {
    for (int i = 0; i < in->n; i++) free((void *)in->msgs[i].tool_calls);
    free(in->msgs);
    for (int i = 0; i < in->n_owned; i++) free(in->owned[i]);
    free(in->owned);
    free(in->choice_name);
    json_decref(in->tools);
    json_decref(in->format);
    memset(in, 0, sizeof *in);
}

/* The text of a message's content: a string, null, or a list of {"type":"text","text":...}
 * parts (joined with newlines). */
static int message_text(json_t *c, size_t i, const char **text, struct ft_chat_in *in,
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
        if (!type || (strcmp(type, "text") && strcmp(type, "input_text") &&
                      strcmp(type, "output_text")) || !json_is_string(t)) {
            ft_sbuf_free(&b);
            ft_http_error(resp, 400, "messages", "messages[%zu].content[%zu]: only parts "
                          "{\"type\": \"text\", \"text\": \"...\"} are supported", i, k);
            return -1;
        }
        if (k) ft_sbuf_add(&b, "\n", 1);
        ft_sbuf_add(&b, json_string_value(t), json_string_length(t));
    }
    *text = ft_chat_in_own(in, b.p ? b.p : strdup(""));
    return *text ? 0 : (ft_http_error(resp, 500, NULL, "out of memory"), -1);
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

/* An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
 * "arguments": JSON text}}]. */
static int parse_tool_calls(json_t *tc, size_t i, struct ft_chat_msg *cm, struct ft_http_resp *resp) {
    if (!tc || json_is_null(tc)) return 0;
    if (!json_is_array(tc)) {
        ft_http_error(resp, 400, "messages", "messages[%zu].tool_calls must be a list", i);
        return -1;
    }
    size_t n = json_array_size(tc), k;
    struct ft_chat_tool_call *calls = calloc(n ? n : 1, sizeof *calls);
    if (!calls) return ft_http_error(resp, 500, NULL, "out of memory"), -1;
    cm->tool_calls = calls;
    json_t *c;
    json_array_foreach(tc, k, c) {
        json_t *fn = json_object_get(c, "function"), *args = json_object_get(fn, "arguments");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!json_is_object(c) || !name || (args && !json_is_string(args))) {
            ft_http_error(resp, 400, "messages", "messages[%zu].tool_calls[%zu] must be {\"id\", "
                          "\"type\": \"function\", \"function\": {\"name\": string, \"arguments\": "
                          "JSON string}}", i, k);
            return -1;
        }
        calls[k].id = json_string_value(json_object_get(c, "id"));
        calls[k].name = name;
        calls[k].arguments = args ? json_string_value(args) : "{}";
        cm->n_tool_calls = (int)k + 1;
    }
    return 0;
}

static int parse_messages(json_t *root, struct ft_chat_in *in, struct ft_http_resp *resp) {
    json_t *ms = json_object_get(root, "messages");
    if (!json_is_array(ms) || !json_array_size(ms)) {
        ft_http_error(resp, 400, "messages", "messages must be a non-empty list of "
                      "{\"role\", \"content\"} objects");
        return -1;
    }
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m) {
        enum ft_chat_role role;
        if (!json_is_object(m) || parse_role(json_string_value(json_object_get(m, "role")), &role)) {
            ft_http_error(resp, 400, "messages", "messages[%zu].role must be one of system, user, "
                          "assistant, tool", i);
            return -1;
        }
        struct ft_chat_msg *cm = ft_chat_in_add(in, role);
        if (!cm) return ft_http_error(resp, 500, NULL, "out of memory"), -1;
        if (message_text(json_object_get(m, "content"), i, &cm->content, in, resp)) return -1;
        if (role == FT_ROLE_ASSISTANT && parse_tool_calls(json_object_get(m, "tool_calls"), i, cm, resp))
            return -1;
        cm->reasoning = json_string_value(json_object_get(m, "reasoning_content"));
        cm->name = json_string_value(json_object_get(m, "tool_call_id"));
        if (!cm->name) cm->name = json_string_value(json_object_get(m, "name"));
    }
    return 0;
}

int ft_srv_tools(json_t *tools, json_t *choice, json_t *parallel, struct ft_chat_in *in,
                 struct ft_http_resp *resp) {
    in->parallel = 1;
    if (parallel && !json_is_null(parallel)) {
        if (!json_is_boolean(parallel))
            return ft_http_error(resp, 400, "parallel_tool_calls", "parallel_tool_calls must be "
                                 "true or false"), -1;
        in->parallel = json_is_true(parallel);
    }
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return ft_http_error(resp, 400, "tools", "tools must be a list of {\"type\": "
                                 "\"function\", \"function\": {\"name\", \"parameters\"}}"), -1;
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *fn = json_object_get(t, "function"), *params = json_object_get(fn, "parameters");
            const char *type = json_string_value(json_object_get(t, "type"));
            const char *name = json_string_value(json_object_get(fn, "name"));
            if (!json_is_object(t) || !type || strcmp(type, "function") || !json_is_object(fn) ||
                !name || !*name || (params && !json_is_object(params)) ||
                (json_object_get(fn, "description") &&
                 !json_is_string(json_object_get(fn, "description"))))
                return ft_http_error(resp, 400, "tools", "tools[%zu] must be {\"type\": "
                                     "\"function\", \"function\": {\"name\": non-empty string, "
                                     "\"description\"?: string, \"parameters\"?: JSON Schema "
                                     "object}}", i), -1;
        }
        if (json_array_size(tools)) in->tools = json_incref(tools);
    }
    in->choice = FT_TC_AUTO;
    if (!choice || json_is_null(choice)) return 0;
    const char *c = json_string_value(choice);
    if (c && !strcmp(c, "none")) in->choice = FT_TC_NONE;
    else if (c && !strcmp(c, "auto")) in->choice = FT_TC_AUTO;
    else if (c && !strcmp(c, "required")) in->choice = FT_TC_REQUIRED;
    else if (json_is_object(choice) && json_is_string(json_object_get(json_object_get(choice,
                                                                        "function"), "name"))) {
        in->choice = FT_TC_NAMED;
        in->choice_name = strdup(json_string_value(json_object_get(json_object_get(choice,
                                                                   "function"), "name")));
        if (!in->choice_name) return ft_http_error(resp, 500, NULL, "out of memory"), -1;
    } else {
        return ft_http_error(resp, 400, "tool_choice", "tool_choice must be \"none\", \"auto\", "
                             "\"required\" or {\"type\": \"function\", \"function\": {\"name\": "
                             "...}}"), -1;
    }
    if (in->choice >= FT_TC_REQUIRED && !in->tools)
        return ft_http_error(resp, 400, "tool_choice", "tool_choice %s needs a non-empty tools "
                             "list", c ? c : "naming a function"), -1;
    return 0;
}

/* response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
 * "schema", "strict"}}. */
static int parse_format(json_t *f, struct ft_chat_in *in, struct ft_http_resp *resp) {
    if (!f || json_is_null(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !type)
        return ft_http_error(resp, 400, "response_format", "response_format must be {\"type\": "
                             "\"text\" | \"json_object\" | \"json_schema\", ...}"), -1;
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_schema")) {
        json_t *js = json_object_get(f, "json_schema");
        json_t *schema = json_object_get(js, "schema");
        if (!json_is_object(js) || (schema && !json_is_object(schema) && !json_is_boolean(schema)))
            return ft_http_error(resp, 400, "response_format", "response_format.json_schema must "
                                 "be {\"name\": string, \"schema\": JSON Schema object, "
                                 "\"strict\"?: bool}"), -1;
    } else if (strcmp(type, "json_object")) {
        return ft_http_error(resp, 400, "response_format", "response_format.type '%s' is not "
                             "one of text, json_object, json_schema", type), -1;
    }
    in->format = json_incref(f);
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

/* --- rendering, tools, grammar, submission ------------------------------------------------- */

/* Renders and tokenises the conversation into job->prompt; decides the reasoning split. */
static int render_prompt(struct ft_server *s, struct ft_chat_in *in, struct ft_gen_job *job,
                         struct ft_http_resp *resp) {
    char *text = NULL, *tools = in->tools ? json_dumps(in->tools, JSON_COMPACT) : NULL;
    int rc = -1;
    size_t bl = 0, el = 0;
    const char *bos = ft_tok_bos(s->tok) >= 0 ? ft_tok_piece(s->tok, ft_tok_bos(s->tok), &bl) : NULL;
    const char *eos = ft_tok_eos(s->tok) >= 0 ? ft_tok_piece(s->tok, ft_tok_eos(s->tok), &el) : NULL;
    struct ft_chat_opts co = {.add_generation_prompt = 1, .enable_thinking = in->think,
                              .bos_token = bos, .eos_token = eos, .tools_json = tools};
    enum ft_status st = ft_chat_render(s->tmpl, in->msgs, in->n, &co, &text);
    if (st != FT_OK) {
        ft_http_error(resp, 400, st == FT_ERR_UNSUPPORTED && in->tools ? "tools" : "messages",
                      "%s", ft_error());
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
    free(text);
    free(tools);
    return rc;
}

/* The grammar of a required / named tool choice. A prompt that opened the reasoning block
 * (in_think) has it closed first, empty: the calls are content. */
static int calls_grammar(struct ft_chat_in *in, enum ft_tool_fmt fmt, int in_think,
                         struct ft_jg **g, struct ft_http_resp *resp) {
    const struct ft_jg_calls_fmt *gf = ft_tool_fmt_grammar(fmt);
    if (!gf)
        return ft_http_error(resp, 400, "tool_choice", "tool_choice %s cannot be enforced for "
                             "the %s tool-call format: use \"auto\"", in->choice == FT_TC_NAMED
                             ? "naming a function" : "\"required\"", ft_tool_fmt_name(fmt)), -1;
    struct ft_jg_calls_fmt one = *gf;
    if (!in->parallel || in->choice == FT_TC_NAMED) one.sep = NULL;
    char open[256];
    if (in_think) {
        snprintf(open, sizeof open, "</think>\n\n%s", gf->open);
        one.open = open;
    }
    if (ft_jg_compile_calls(in->tools, in->choice == FT_TC_NAMED ? in->choice_name : NULL, &one,
                            g) != FT_OK)
        return ft_http_error(resp, 400, in->choice == FT_TC_NAMED ? "tool_choice" : "tools", "%s",
                             ft_error()), -1;
    return 0;
}

static int format_grammar(struct ft_chat_in *in, struct ft_jg **g, struct ft_http_resp *resp) {
    const char *type = json_string_value(json_object_get(in->format, "type"));
    enum ft_status st;
    if (!strcmp(type, "json_object")) {
        st = ft_jg_compile_object(g);
    } else {
        json_t *schema = json_object_get(json_object_get(in->format, "json_schema"), "schema");
        json_t *any = schema ? NULL : json_true();
        st = ft_jg_compile_schema(schema ? schema : any, 1, g);
        json_decref(any);
    }
    if (st != FT_OK)
        return ft_http_error(resp, 400, "response_format", "response_format: %s", ft_error()), -1;
    return 0;
}

/* The output parser and the constraint: tools parsed unless tool_choice is none; required or
 * named calls, or a JSON response_format, enforced by a grammar. */
static int setup_tools(struct ft_server *s, struct ft_chat_in *in, struct ft_gen_job *job,
                       struct ft_http_resp *resp) {
    struct ft_jg *g = NULL;
    enum ft_tool_fmt fmt = (enum ft_tool_fmt)s->tool_fmt;
    if (in->tools && in->choice != FT_TC_NONE) {
        if (fmt == FT_TOOLS_NONE)
            return ft_http_error(resp, 400, "tools", "this model's chat template (%s) has no "
                                 "tool-call format: start the server with --tool-parser NAME "
                                 "(%s)", ft_chat_template_name(s->tmpl), ft_tool_fmt_names()), -1;
        job->tool_fmt = fmt;
        job->tools = json_incref(in->tools);
        for (const char *const *m = ft_tool_fmt_markers(fmt); *m; m++) {
            int32_t id = ft_tok_find(s->tok, *m);
            if (id >= 0 && ft_tok_is_special(s->tok, id)) job->p.skip_special = 0;
        }
        if (in->choice >= FT_TC_REQUIRED) {
            if (calls_grammar(in, fmt, job->split && job->in_think, &g, resp)) return -1;
            job->forced = 1;
        }
    }
    if (!g && in->format && format_grammar(in, &g, resp)) return -1;
    return g ? ft_srv_mask(s, g, &job->p.mask, resp) : 0;
}

void ft_srv_chat_submit(struct ft_server *s, const struct ft_http_req *req, struct ft_chat_in *in,
                        struct ft_gen_job *job, struct ft_http_resp *resp) {
    if (!render_prompt(s, in, job, resp) && !setup_tools(s, in, job, resp))
        submit(s, req, job, resp);
}

static void chat_completions(struct ft_server *s, const struct ft_http_req *req,
                             struct ft_http_resp *resp) {
    struct ft_gen_job job = {.api = FT_API_CHAT, .chat = 1};
    struct ft_chat_in in = {0};
    json_t *root = ft_srv_body(req, resp);
    if (root && !ft_srv_common(s, root, &job, resp) && !parse_messages(root, &in, resp) &&
        !parse_thinking(root, &in.think, resp) &&
        !ft_srv_tools(json_object_get(root, "tools"), json_object_get(root, "tool_choice"),
                      json_object_get(root, "parallel_tool_calls"), &in, resp) &&
        !parse_format(json_object_get(root, "response_format"), &in, resp))
        ft_srv_chat_submit(s, req, &in, &job, resp);
    ft_chat_in_free(&in);
    ft_gen_job_free(&job);
    json_decref(root);
}

/* --- /v1/completions ---------------------------------------------------------------------- */

static int completion_prompt(struct ft_server *s, json_t *root, struct ft_gen_job *job,
                             struct ft_http_resp *resp) {
    json_t *p = json_object_get(root, "prompt");
    if (ft_srv_bool(root, "echo", &job->echo, resp)) return -1;
    /* echo with logprobs: the prompt's tokens scored too; max_tokens 0: only that */
    job->p.prompt_logprobs = job->echo && job->p.logprobs;
    json_t *mt = json_object_get(root, "max_tokens");
    job->p.prompt_only = json_is_integer(mt) && json_integer_value(mt) == 0;
    if (job->p.prompt_only && !job->echo)
        return ft_http_error(resp, 400, "max_tokens", "max_tokens 0 generates nothing: it needs "
                             "echo: true (to score the prompt, with logprobs)"),
               -1;
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        if (ft_tok_encode(s->tok, json_string_value(p), json_string_length(p), 1, &job->prompt,
                          &job->n_prompt) != FT_OK)
            return ft_http_error(resp, 400, "prompt", "%s", ft_error()), -1;
        if (!job->n_prompt) return ft_http_error(resp, 400, "prompt", "prompt is empty"), -1;
        if (job->echo && !(job->echo_text = strdup(json_string_value(p))))
            return ft_http_error(resp, 500, NULL, "out of memory"), -1;
        return 0;
    }
    if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0))) {
        if (ft_srv_ids(s, p, "prompt", &job->prompt, &job->n_prompt, resp)) return -1;
        size_t n = 0;
        if (job->echo && ft_tok_decode(s->tok, job->prompt, job->n_prompt, job->p.skip_special,
                                       &job->echo_text, &n) != FT_OK)
            return ft_http_error(resp, 400, "prompt", "%s", ft_error()), -1;
        return 0;
    }
    ft_http_error(resp, 400, "prompt", "prompt must be a non-empty string or a list of token ids "
                  "(one prompt per request)");
    return -1;
}

static void completions(struct ft_server *s, const struct ft_http_req *req,
                        struct ft_http_resp *resp) {
    struct ft_gen_job job = {.api = FT_API_COMPLETION, .chat = 0};
    json_t *root = ft_srv_body(req, resp);
    if (root && !ft_srv_common(s, root, &job, resp) && !completion_prompt(s, root, &job, resp))
        submit(s, req, &job, resp);
    ft_gen_job_free(&job);
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
    {"GET", "/metrics", ft_srv_metrics, 0},
    {"POST", "/tokenize", ft_srv_tokenize, 1},
    {"POST", "/detokenize", ft_srv_detokenize, 1},
    {"POST", "/v1/messages", ft_srv_messages, 1},
    {"POST", "/v1/messages/count_tokens", ft_srv_count_tokens, 1},
    {"POST", "/v1/responses", ft_srv_responses, 1},
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
                      "/v1/chat/completions, POST /v1/completions, POST /v1/messages, POST /v1/responses)", req->method, req->path);
}
