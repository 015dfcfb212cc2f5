/* anthropic.c — the Anthropic Messages API: POST /v1/messages (system, text / tool_use /
 * tool_result / thinking blocks, stop_sequences, temperature / top_p / top_k, max_tokens,
 * tools and tool_choice, thinking -> the template's reasoning switch) answered as a message or
 * as the SSE event sequence of the official clients (message_start, ping, content_block_start /
 * delta / stop, message_delta, message_stop), and POST /v1/messages/count_tokens. Errors are
 * Anthropic-shaped ({"type": "error", "error": {"type", "message"}}).
 * Called by openai.c's router on connection threads; the stream writer by openai_gen.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/openai_impl.h"
#include "text/tokenizer.h"

/* --- errors -------------------------------------------------------------------------------- */

static const char *error_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return "api_error";
    }
}

void ft_srv_anthropic_error(struct ft_http_resp *resp) {
    if (resp->status < 400 || !resp->body) return;
    json_t *j = json_loadb(resp->body, resp->body_len, 0, NULL);
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    json_t *a = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                          error_type(resp->status), "message", msg ? msg : "error");
    json_decref(j);
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    if (!text) return;
    free(resp->body);
    resp->body = text;
    resp->body_len = strlen(text);
}

/* --- request ------------------------------------------------------------------------------- */

static int bad(struct ft_http_resp *resp, const char *param, const char *what) {
    ft_http_error(resp, 400, param, "%s", what);
    return -1;
}

/* Text of a string or a list of {"type": "text", "text"} blocks (newline-joined). */
static int blocks_text(json_t *c, const char *where, const char **out, struct ft_chat_in *in,
                       struct ft_http_resp *resp) {
    if (!c || json_is_null(c)) return *out = "", 0;
    if (json_is_string(c)) return *out = json_string_value(c), 0;
    if (!json_is_array(c)) {
        ft_http_error(resp, 400, where, "%s must be a string or a list of text blocks", where);
        return -1;
    }
    struct ft_sbuf b = {0};
    size_t i;
    json_t *blk;
    json_array_foreach(c, i, blk) {
        json_t *t = json_object_get(blk, "text");
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!type || strcmp(type, "text") || !json_is_string(t)) {
            ft_sbuf_free(&b);
            ft_http_error(resp, 400, where, "%s[%zu] must be {\"type\": \"text\", \"text\": ...}",
                          where, i);
            return -1;
        }
        if (b.n) ft_sbuf_add(&b, "\n", 1);
        ft_sbuf_add(&b, json_string_value(t), json_string_length(t));
    }
    *out = ft_chat_in_own(in, b.p ? b.p : strdup(""));
    return *out ? 0 : bad(resp, NULL, "out of memory");
}

/* A user message: tool_result blocks become tool messages, the text one user message. */
static int user_blocks(json_t *content, size_t mi, struct ft_chat_in *in, struct ft_http_resp *resp) {
    struct ft_sbuf text = {0};
    size_t i;
    json_t *blk;
    int rc = 0, has_text = 0;
    json_array_foreach(content, i, blk) {
        const char *type = json_string_value(json_object_get(blk, "type"));
        char where[64];
        snprintf(where, sizeof where, "messages[%zu].content[%zu]", mi, i);
        if (type && !strcmp(type, "text") && json_is_string(json_object_get(blk, "text"))) {
            if (text.n) ft_sbuf_add(&text, "\n", 1);
            ft_sbuf_add(&text, json_string_value(json_object_get(blk, "text")),
                        json_string_length(json_object_get(blk, "text")));
            has_text = 1;
        } else if (type && !strcmp(type, "tool_result") &&
                   json_is_string(json_object_get(blk, "tool_use_id"))) {
            struct ft_chat_msg *m = ft_chat_in_add(in, FT_ROLE_TOOL);
            if (!m || blocks_text(json_object_get(blk, "content"), where, &m->content, in, resp)) {
                rc = -1;
                break;
            }
            m->name = json_string_value(json_object_get(blk, "tool_use_id"));
        } else if (type && (!strcmp(type, "image") || !strcmp(type, "document"))) {
            rc = bad(resp, "messages", "image and document blocks are not supported (this server "
                     "runs the language model only)");
            break;
        } else {
            ft_http_error(resp, 400, "messages", "%s: a user block must be text or tool_result "
                          "(with tool_use_id)", where);
            rc = -1;
            break;
        }
    }
    if (!rc && has_text) {
        struct ft_chat_msg *m = ft_chat_in_add(in, FT_ROLE_USER);
        if (!m || !(m->content = ft_chat_in_own(in, text.p ? text.p : strdup("")))) rc = -1;
        text.p = NULL;
    }
    ft_sbuf_free(&text);
    return rc;
}

/* An assistant message: text, thinking and tool_use blocks. */
static int assistant_blocks(json_t *content, size_t mi, struct ft_chat_in *in,
                            struct ft_http_resp *resp) {
    struct ft_chat_msg *m = ft_chat_in_add(in, FT_ROLE_ASSISTANT);
    if (!m) return bad(resp, NULL, "out of memory");
    size_t n = json_array_size(content), i;
    struct ft_chat_tool_call *calls = calloc(n ? n : 1, sizeof *calls);
    if (!calls) return bad(resp, NULL, "out of memory");
    m->tool_calls = calls;
    struct ft_sbuf text = {0};
    json_t *blk;
    json_array_foreach(content, i, blk) {
        const char *type = json_string_value(json_object_get(blk, "type"));
        json_t *t = json_object_get(blk, "text");
        if (type && !strcmp(type, "text") && json_is_string(t)) {
            ft_sbuf_add(&text, json_string_value(t), json_string_length(t));
        } else if (type && !strcmp(type, "thinking")) {
            m->reasoning = json_string_value(json_object_get(blk, "thinking"));
        } else if (type && !strcmp(type, "tool_use") &&
                   json_is_string(json_object_get(blk, "name")) &&
                   json_is_object(json_object_get(blk, "input"))) {
            struct ft_chat_tool_call *c = &calls[m->n_tool_calls++];
            c->id = json_string_value(json_object_get(blk, "id"));
            c->name = json_string_value(json_object_get(blk, "name"));
            c->arguments = ft_chat_in_own(in, json_dumps(json_object_get(blk, "input"), JSON_COMPACT));
            if (!c->arguments) return ft_sbuf_free(&text), bad(resp, NULL, "out of memory");
        } else if (type && !strcmp(type, "redacted_thinking")) {
            continue;
        } else {
            ft_sbuf_free(&text);
            ft_http_error(resp, 400, "messages", "messages[%zu].content[%zu]: an assistant block "
                          "must be text, thinking or tool_use (with name and an input object)",
                          mi, i);
            return -1;
        }
    }
    m->content = ft_chat_in_own(in, text.p ? text.p : strdup(""));
    return m->content ? 0 : bad(resp, NULL, "out of memory");
}

static int parse_messages(json_t *root, struct ft_chat_in *in, struct ft_http_resp *resp) {
    json_t *sys = json_object_get(root, "system");
    if (sys && !json_is_null(sys)) {
        struct ft_chat_msg *m = ft_chat_in_add(in, FT_ROLE_SYSTEM);
        if (!m || blocks_text(sys, "system", &m->content, in, resp)) return -1;
    }
    json_t *ms = json_object_get(root, "messages"), *msg;
    if (!json_is_array(ms) || !json_array_size(ms))
        return bad(resp, "messages", "messages must be a non-empty list of {\"role\": \"user\" | "
                   "\"assistant\", \"content\"}");
    size_t i;
    json_array_foreach(ms, i, msg) {
        const char *role = json_string_value(json_object_get(msg, "role"));
        json_t *c = json_object_get(msg, "content");
        int user = role && !strcmp(role, "user"), asst = role && !strcmp(role, "assistant");
        if (!json_is_object(msg) || (!user && !asst)) {
            ft_http_error(resp, 400, "messages", "messages[%zu].role must be \"user\" or "
                          "\"assistant\" (the system prompt goes in \"system\")", i);
            return -1;
        }
        if (json_is_string(c)) {
            struct ft_chat_msg *m = ft_chat_in_add(in, user ? FT_ROLE_USER : FT_ROLE_ASSISTANT);
            if (!m) return bad(resp, NULL, "out of memory");
            m->content = json_string_value(c);
        } else if (json_is_array(c)) {
            if (user ? user_blocks(c, i, in, resp) : assistant_blocks(c, i, in, resp)) return -1;
        } else {
            ft_http_error(resp, 400, "messages", "messages[%zu].content must be a string or a "
                          "list of content blocks", i);
            return -1;
        }
    }
    if (!in->n || (in->n == 1 && in->msgs[0].role == FT_ROLE_SYSTEM))
        return bad(resp, "messages", "messages has no content");
    return 0;
}

/* Anthropic tools -> OpenAI-shaped tools; tool_choice -> ours. */
static int parse_tools(json_t *root, struct ft_chat_in *in, struct ft_http_resp *resp) {
    json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    json_t *oa = NULL, *choice = NULL, *parallel = NULL;
    int rc = -1;
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return bad(resp, "tools", "tools must be a list of {\"name\", \"description\", "
                       "\"input_schema\"}");
        oa = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
            json_t *desc = json_object_get(t, "description");
            if (!json_is_object(t) || !json_is_string(name) || (schema && !json_is_object(schema)) ||
                (desc && !json_is_string(desc))) {
                ft_http_error(resp, 400, "tools", "tools[%zu] must be {\"name\": string, "
                              "\"description\"?: string, \"input_schema\": JSON Schema object}", i);
                goto done;
            }
            json_t *fn = json_pack("{s:O}", "name", name);
            if (desc) json_object_set(fn, "description", desc);
            json_object_set_new(fn, "parameters", schema ? json_incref(schema)
                                                         : json_pack("{s:s}", "type", "object"));
            json_array_append_new(oa, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
    }
    if (tc && !json_is_null(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (!json_is_object(tc) || !type) {
            bad(resp, "tool_choice", "tool_choice must be {\"type\": \"auto\" | \"any\" | \"tool\" "
                "| \"none\"}");
            goto done;
        }
        if (!strcmp(type, "auto")) choice = json_string("auto");
        else if (!strcmp(type, "any")) choice = json_string("required");
        else if (!strcmp(type, "none")) choice = json_string("none");
        else if (!strcmp(type, "tool") && json_is_string(json_object_get(tc, "name")))
            choice = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                               json_object_get(tc, "name"));
        else {
            bad(resp, "tool_choice", "tool_choice.type must be auto, any, tool (with name) or none");
            goto done;
        }
        if (json_is_true(json_object_get(tc, "disable_parallel_tool_use"))) parallel = json_false();
    }
    rc = ft_srv_tools(oa, choice, parallel, in, resp);
done:
    json_decref(oa);
    json_decref(choice);
    json_decref(parallel);
    return rc;
}

static int parse_thinking(json_t *root, struct ft_chat_in *in, struct ft_http_resp *resp) {
    json_t *t = json_object_get(root, "thinking");
    in->think = -1;
    if (!t || json_is_null(t)) return 0;
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!json_is_object(t) || !type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
        return bad(resp, "thinking", "thinking must be {\"type\": \"enabled\", \"budget_tokens\": "
                   "N} or {\"type\": \"disabled\"}");
    in->think = !strcmp(type, "enabled");
    return 0;
}

/* max_tokens (required), stop_sequences, temperature, top_p, top_k, stream. */
static int parse_params(struct ft_server *s, json_t *root, struct ft_gen_job *job,
                        struct ft_http_resp *resp) {
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_string(model)) return bad(resp, "model", "model must be a string");
    long max_tokens = 0, top_k = -1;
    job->p.sampling = s->defaults;
    job->p.skip_special = 1;
    if (!json_is_integer(json_object_get(root, "max_tokens")))
        return bad(resp, "max_tokens", "max_tokens is required: an integer >= 1");
    if (ft_srv_int(root, "max_tokens", 1, 1L << 30, &max_tokens, resp) ||
        ft_srv_bool(root, "stream", &job->stream, resp) ||
        ft_srv_num(root, "temperature", &job->p.sampling.temperature, resp) ||
        ft_srv_num(root, "top_p", &job->p.sampling.top_p, resp) ||
        ft_srv_int(root, "top_k", -1, 1L << 24, &top_k, resp))
        return -1;
    if (top_k >= 0) job->p.sampling.top_k = (int)top_k;
    job->p.max_tokens = (int)max_tokens;
    if (ft_sampling_validate(&job->p.sampling) != FT_OK) return bad(resp, NULL, ft_error());
    json_t *st = json_object_get(root, "stop_sequences"), *v;
    size_t i;
    if (st && !json_is_null(st)) {
        if (!json_is_array(st) || json_array_size(st) > FT_MAX_STOP)
            return bad(resp, "stop_sequences", "stop_sequences must be a list of at most 8 strings");
        json_array_foreach(st, i, v) {
            if (!json_is_string(v) || !json_string_length(v))
                return bad(resp, "stop_sequences", "stop_sequences entries must be non-empty strings");
            job->p.stop[job->p.n_stop++] = json_string_value(v);
        }
    }
    return 0;
}

void ft_srv_messages(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp) {
    struct ft_gen_job job = {.api = FT_API_ANTHROPIC, .chat = 1};
    struct ft_chat_in in = {0};
    json_t *root = ft_srv_body(req, resp);
    if (root && !parse_params(s, root, &job, resp) && !parse_messages(root, &in, resp) &&
        !parse_tools(root, &in, resp) && !parse_thinking(root, &in, resp))
        ft_srv_chat_submit(s, req, &in, &job, resp);
    ft_chat_in_free(&in);
    ft_gen_job_free(&job);
    json_decref(root);
    ft_srv_anthropic_error(resp);
}

void ft_srv_count_tokens(struct ft_server *s, const struct ft_http_req *req,
                         struct ft_http_resp *resp) {
    struct ft_chat_in in = {0};
    json_t *root = ft_srv_body(req, resp);
    if (root && !parse_messages(root, &in, resp) && !parse_tools(root, &in, resp) &&
        !parse_thinking(root, &in, resp)) {
        char *text = NULL, *tools = in.tools ? json_dumps(in.tools, JSON_COMPACT) : NULL;
        struct ft_chat_opts co = {.add_generation_prompt = 1, .enable_thinking = in.think,
                                  .tools_json = tools};
        int32_t *ids = NULL;
        int n = 0;
        if (ft_chat_render(s->tmpl, in.msgs, in.n, &co, &text) != FT_OK ||
            ft_tok_encode(s->tok, text, strlen(text), 0, &ids, &n) != FT_OK)
            ft_http_error(resp, 400, "messages", "%s", ft_error());
        else
            ft_srv_reply(resp, 200, json_pack("{s:i}", "input_tokens", n));
        free(ids);
        free(text);
        free(tools);
    }
    ft_chat_in_free(&in);
    json_decref(root);
    ft_srv_anthropic_error(resp);
}

/* --- response ------------------------------------------------------------------------------ */

static const char *stop_reason(int finish, int tool_calls, const char *stop_seq) {
    if (tool_calls) return "tool_use";
    if (stop_seq) return "stop_sequence";
    return finish == FT_FINISH_LENGTH ? "max_tokens" : "end_turn";
}

/* stop_sequence: the one that matched, null otherwise (and for tool use) */
static json_t *stop_seq_json(const char *stop_seq, int tool_calls) {
    return stop_seq && !tool_calls ? json_string(stop_seq) : json_null();
}

static json_t *tool_use_block(const struct ft_tool_call_out *c) {
    json_t *input = json_loads(c->args, 0, NULL);
    char id[48];
    snprintf(id, sizeof id, "toolu_%s", c->id + (strncmp(c->id, "call_", 5) ? 0 : 5));
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", id, "name", c->name,
                     "input", input ? input : json_object());
}

static json_t *message_head(struct ft_server *s, const struct ft_gen_job *job) {
    return json_pack("{s:s, s:s, s:s, s:s, s:[], s:n, s:n}", "id", job->id, "type", "message",
                     "role", "assistant", "model", s->model_id, "content", "stop_reason",
                     "stop_sequence");
}

/* Anthropic's usage: the prompt tokens the prefix cache held count as cache reads, beside
 * (not within) input_tokens, as the API reports prompt caching */
static json_t *usage_json(int n_prompt, int n_gen, int n_cached) {
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", n_prompt - n_cached, "output_tokens",
                     n_gen, "cache_read_input_tokens", n_cached, "cache_creation_input_tokens", 0);
}

json_t *ft_srv_anthropic_message(struct ft_server *s, const struct ft_gen_job *job,
                                 const struct ft_gen_out *o) {
    json_t *j = message_head(s, job), *content = json_object_get(j, "content");
    if (o->reasoning.n)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking",
                                                 o->reasoning.p, o->reasoning.n, "signature", ""));
    size_t lead = 0;
    while (o->n_calls && lead < o->content.n && strchr(" \n\t\r", o->content.p[lead])) lead++;
    if (o->content.n > lead || (!o->n_calls && !o->reasoning.n))
        json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "text", "text",
                                                 o->content.p ? o->content.p : "", o->content.n));
    for (int i = 0; i < o->n_calls; i++) json_array_append_new(content, tool_use_block(&o->calls[i]));
    json_object_set_new(j, "stop_reason",
                        json_string(stop_reason(o->finish, o->n_calls > 0, o->stop_seq)));
    json_object_set_new(j, "stop_sequence", stop_seq_json(o->stop_seq, o->n_calls > 0));
    json_object_set_new(j, "usage", usage_json(o->n_prompt, o->n_gen, o->n_cached));
    return j;
}

/* --- stream -------------------------------------------------------------------------------- */

enum { BLK_NONE, BLK_TEXT, BLK_THINK, BLK_TOOL };

static void event(struct ft_sbuf *out, const char *name, json_t *j) {
    ft_sbuf_add(out, "event: ", 7);
    ft_sbuf_add(out, name, strlen(name));
    ft_sbuf_add(out, "\n", 1);
    ft_sse_json(out, j);
}

static void close_block(struct ft_stream_base *b, struct ft_stream_base *st) {
    if (st->open == BLK_NONE) return;
    event(&b->out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop",
                                                   "index", st->index));
    st->open = BLK_NONE;
    st->index++;
}

static void open_block(struct ft_stream_base *b, struct ft_stream_base *st, int kind) {
    if (st->open == kind) return;
    close_block(b, st);
    json_t *blk = kind == BLK_TEXT ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                                   : json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "",
                                               "signature", "");
    event(&b->out, "content_block_start", json_pack("{s:s, s:i, s:o}", "type",
                                                    "content_block_start", "index", st->index,
                                                    "content_block", blk));
    st->open = kind;
}

static void a_start(void *g) {
    struct ft_stream_base *b = g;
    struct ft_stream_base *st = g;
    st->open = BLK_NONE, st->index = 0;
    json_t *m = message_head(b->s, &b->job);
    json_object_set_new(m, "usage", json_pack("{s:i, s:i}", "input_tokens", b->job.n_prompt,
                                              "output_tokens", 0));
    event(&b->out, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", m));
    event(&b->out, "ping", json_pack("{s:s}", "type", "ping"));
}

static void a_text(void *g, const char *r, size_t nr, const char *c, size_t nc) {
    struct ft_stream_base *b = g;
    struct ft_stream_base *st = g;
    if (nr) {
        open_block(b, st, BLK_THINK);
        event(&b->out, "content_block_delta",
              json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index",
                        st->index, "delta", "type", "thinking_delta", "thinking", r, nr));
    }
    if (nc) {
        if (st->open != BLK_TEXT) { /* blanks around tool calls open no block */
            size_t k = 0;
            while (k < nc && strchr(" \n\t\r", c[k])) k++;
            if (k == nc && (st->open == BLK_TOOL || st->open == BLK_NONE)) return;
        }
        open_block(b, st, BLK_TEXT);
        event(&b->out, "content_block_delta",
              json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index",
                        st->index, "delta", "type", "text_delta", "text", c, nc));
    }
}

static void a_call(void *g, int index, const struct ft_tool_call_out *c) {
    struct ft_stream_base *b = g;
    struct ft_stream_base *st = g;
    close_block(b, st);
    json_t *blk = tool_use_block(c);
    json_object_set_new(blk, "input", json_object());
    event(&b->out, "content_block_start", json_pack("{s:s, s:i, s:o}", "type",
                                                    "content_block_start", "index", st->index,
                                                    "content_block", blk));
    event(&b->out, "content_block_delta",
          json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", st->index,
                    "delta", "type", "input_json_delta", "partial_json", c->args));
    st->open = BLK_TEXT; /* any open kind: close_block ends it */
    close_block(b, st);
}

/* A tool_use block streamed as it is written: content_block_start with an empty input, then
 * input_json_delta pieces of the arguments (the client joins and parses them), then
 * content_block_stop once the call is complete (a_call_done). */
static void a_call_piece(void *g, int index, const char *id, const char *name, const char *args,
                         size_t n) {
    struct ft_stream_base *b = g;
    (void)index;
    if (id) {
        close_block(b, b);
        const struct ft_tool_call_out c = {(char *)id, (char *)name, (char *)""};
        event(&b->out, "content_block_start", json_pack("{s:s, s:i, s:o}", "type",
                                                        "content_block_start", "index", b->index,
                                                        "content_block", tool_use_block(&c)));
        b->open = BLK_TOOL;
    }
    if (!n || b->open != BLK_TOOL) return;
    event(&b->out, "content_block_delta",
          json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", b->index,
                    "delta", "type", "input_json_delta", "partial_json", args, n));
}

static void a_call_done(void *g, int index, const struct ft_tool_call_out *c) {
    struct ft_stream_base *b = g;
    (void)index, (void)c;
    if (b->open == BLK_TOOL) close_block(b, b);
}

static void a_end(void *g, int finish, int n_prompt, int n_gen, int tool_calls) {
    struct ft_stream_base *b = g;
    struct ft_stream_base *st = g;
    if (st->index == 0 && st->open == BLK_NONE) open_block(b, st, BLK_TEXT); /* never empty */
    close_block(b, st);
    event(&b->out, "message_delta",
          json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason",
                    stop_reason(finish, tool_calls, b->stop_seq), "stop_sequence",
                    stop_seq_json(b->stop_seq, tool_calls), "usage",
                    usage_json(n_prompt, n_gen, b->n_cached)));
    event(&b->out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void a_error(void *g, const char *message, int status) {
    struct ft_stream_base *b = g;
    event(&b->out, "error", json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                                      error_type(status), "message", message));
}

const struct ft_stream_api ft_anthropic_stream = {a_start, a_text, a_call, a_end, a_error,
                                                  a_call_piece, a_call_done};
