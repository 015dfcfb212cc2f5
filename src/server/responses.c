/* responses.c — the OpenAI Responses API, POST /v1/responses, to the level Codex-style clients
 * use: input as a string or a list of message / function_call / function_call_output items,
 * instructions, function tools and tool_choice, text.format (json_object / json_schema),
 * max_output_tokens; answered as a response object or as the SSE events response.created,
 * response.in_progress, response.output_item.added / done, response.content_part.added / done,
 * response.output_text.delta / done, response.function_call_arguments.delta / done,
 * response.completed. Stateless: previous_response_id is refused.
 * Called by openai.c's router on connection threads; the stream writer by openai_gen.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/openai_impl.h"

static int bad(struct ft_http_resp *resp, const char *param, const char *what) {
    ft_http_error(resp, 400, param, "%s", what);
    return -1;
}

/* --- request ------------------------------------------------------------------------------- */

static int item_text(json_t *c, size_t i, const char **out, struct ft_chat_in *in,
                     struct ft_http_resp *resp) {
    if (json_is_string(c)) return *out = json_string_value(c), 0;
    if (!json_is_array(c)) {
        ft_http_error(resp, 400, "input", "input[%zu].content must be a string or a list of "
                      "input_text / output_text parts", i);
        return -1;
    }
    struct ft_sbuf b = {0};
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *t = json_object_get(part, "text");
        if (!type || (strcmp(type, "input_text") && strcmp(type, "output_text") &&
                      strcmp(type, "text")) || !json_is_string(t)) {
            ft_sbuf_free(&b);
            ft_http_error(resp, 400, "input", "input[%zu].content[%zu]: only input_text and "
                          "output_text parts are supported", i, k);
            return -1;
        }
        if (b.n) ft_sbuf_add(&b, "\n", 1);
        ft_sbuf_add(&b, json_string_value(t), json_string_length(t));
    }
    *out = ft_chat_in_own(in, b.p ? b.p : strdup(""));
    return *out ? 0 : bad(resp, NULL, "out of memory");
}

/* function_call items follow an assistant message (or start one). */
static int add_call(json_t *it, size_t i, struct ft_chat_in *in, struct ft_http_resp *resp) {
    const char *name = json_string_value(json_object_get(it, "name"));
    const char *args = json_string_value(json_object_get(it, "arguments"));
    if (!name || !args)
        return ft_http_error(resp, 400, "input", "input[%zu]: a function_call needs name and "
                             "arguments (a JSON string)", i), -1;
    struct ft_chat_msg *m = in->n ? &in->msgs[in->n - 1] : NULL;
    if (!m || m->role != FT_ROLE_ASSISTANT) {
        if (!(m = ft_chat_in_add(in, FT_ROLE_ASSISTANT))) return bad(resp, NULL, "out of memory");
        m->content = "";
    }
    struct ft_chat_tool_call *c = realloc((void *)m->tool_calls,
                                          (size_t)(m->n_tool_calls + 1) * sizeof *c);
    if (!c) return bad(resp, NULL, "out of memory");
    m->tool_calls = c;
    c[m->n_tool_calls++] = (struct ft_chat_tool_call){
        json_string_value(json_object_get(it, "call_id")), name, args};
    return 0;
}

static int parse_input(json_t *root, struct ft_chat_in *in, struct ft_http_resp *resp) {
    json_t *ins = json_object_get(root, "instructions"), *input = json_object_get(root, "input");
    if (ins && !json_is_null(ins)) {
        if (!json_is_string(ins)) return bad(resp, "instructions", "instructions must be a string");
        struct ft_chat_msg *m = ft_chat_in_add(in, FT_ROLE_SYSTEM);
        if (!m) return bad(resp, NULL, "out of memory");
        m->content = json_string_value(ins);
    }
    if (json_is_string(input)) {
        struct ft_chat_msg *m = ft_chat_in_add(in, FT_ROLE_USER);
        if (!m) return bad(resp, NULL, "out of memory");
        m->content = json_string_value(input);
        return 0;
    }
    if (!json_is_array(input) || !json_array_size(input))
        return bad(resp, "input", "input must be a string or a non-empty list of items");
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!json_is_object(it))
            return ft_http_error(resp, 400, "input", "input[%zu] must be an object", i), -1;
        if (type && !strcmp(type, "function_call")) {
            if (add_call(it, i, in, resp)) return -1;
        } else if (type && !strcmp(type, "function_call_output")) {
            json_t *out = json_object_get(it, "output");
            struct ft_chat_msg *m = ft_chat_in_add(in, FT_ROLE_TOOL);
            if (!m) return bad(resp, NULL, "out of memory");
            m->name = json_string_value(json_object_get(it, "call_id"));
            if (json_is_string(out)) m->content = json_string_value(out);
            else if (item_text(out, i, &m->content, in, resp)) return -1;
        } else if (type && !strcmp(type, "reasoning")) {
            continue; /* earlier reasoning is not replayed into the prompt */
        } else if ((!type || !strcmp(type, "message")) && role) {
            enum ft_chat_role r;
            if (!strcmp(role, "user")) r = FT_ROLE_USER;
            else if (!strcmp(role, "assistant")) r = FT_ROLE_ASSISTANT;
            else if (!strcmp(role, "system") || !strcmp(role, "developer")) r = FT_ROLE_SYSTEM;
            else return ft_http_error(resp, 400, "input", "input[%zu].role must be user, "
                                      "assistant, system or developer", i), -1;
            struct ft_chat_msg *m = ft_chat_in_add(in, r);
            if (!m || item_text(json_object_get(it, "content"), i, &m->content, in, resp)) return -1;
        } else {
            return ft_http_error(resp, 400, "input", "input[%zu]: type '%s' is not supported "
                                 "(message, function_call, function_call_output)", i,
                                 type ? type : "(none)"), -1;
        }
    }
    return 0;
}

/* Responses tools ({"type": "function", "name", "parameters"}) -> chat-shaped ones. */
static int parse_tools(json_t *root, struct ft_chat_in *in, struct ft_http_resp *resp) {
    json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    json_t *oa = NULL, *choice = NULL;
    int rc = -1;
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return bad(resp, "tools", "tools must be a list of {\"type\": \"function\", \"name\", "
                       "\"parameters\"}");
        oa = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            json_t *name = json_object_get(t, "name"), *params = json_object_get(t, "parameters");
            if (!json_is_object(t) || !type || strcmp(type, "function") || !json_is_string(name) ||
                (params && !json_is_null(params) && !json_is_object(params))) {
                ft_http_error(resp, 400, "tools", "tools[%zu] must be {\"type\": \"function\", "
                              "\"name\": string, \"parameters\": JSON Schema object} (built-in "
                              "tools are not supported)", i);
                goto done;
            }
            json_t *fn = json_pack("{s:O}", "name", name);
            if (json_is_string(json_object_get(t, "description")))
                json_object_set(fn, "description", json_object_get(t, "description"));
            if (json_is_object(params)) json_object_set(fn, "parameters", params);
            json_array_append_new(oa, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
    }
    if (json_is_object(tc) && json_is_string(json_object_get(tc, "name")))
        choice = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                           json_object_get(tc, "name"));
    else if (tc)
        choice = json_incref(tc);
    rc = ft_srv_tools(oa, choice, json_object_get(root, "parallel_tool_calls"), in, resp);
done:
    json_decref(oa);
    json_decref(choice);
    return rc;
}

/* text.format -> a chat response_format */
static int parse_format(json_t *root, struct ft_chat_in *in, struct ft_http_resp *resp) {
    json_t *text = json_object_get(root, "text"), *f = json_object_get(text, "format");
    if (!f || json_is_null(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !type)
        return bad(resp, "text.format", "text.format must be {\"type\": \"text\" | \"json_object\" "
                   "| \"json_schema\", ...}");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        in->format = json_pack("{s:s}", "type", "json_object");
        return 0;
    }
    json_t *schema = json_object_get(f, "schema");
    if (strcmp(type, "json_schema") || (schema && !json_is_object(schema)))
        return bad(resp, "text.format", "text.format.type must be text, json_object or "
                   "json_schema (with a schema object)");
    in->format = json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema", "schema",
                           schema ? schema : json_true());
    return 0;
}

static int parse_params(struct ft_server *s, json_t *root, struct ft_gen_job *job,
                        struct ft_http_resp *resp) {
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_string(model)) return bad(resp, "model", "model must be a string");
    json_t *prev = json_object_get(root, "previous_response_id");
    if (prev && !json_is_null(prev))
        return bad(resp, "previous_response_id", "previous_response_id is not supported: this "
                   "server keeps no responses; send the whole conversation in input");
    long max_tokens = 0;
    job->p.sampling = s->defaults;
    job->p.skip_special = 1;
    if (ft_srv_int(root, "max_output_tokens", 1, 1L << 30, &max_tokens, resp) ||
        ft_srv_bool(root, "stream", &job->stream, resp) ||
        ft_srv_num(root, "temperature", &job->p.sampling.temperature, resp) ||
        ft_srv_num(root, "top_p", &job->p.sampling.top_p, resp))
        return -1;
    job->p.max_tokens = (int)max_tokens;
    if (ft_sampling_validate(&job->p.sampling) != FT_OK) return bad(resp, NULL, ft_error());
    return 0;
}

void ft_srv_responses(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp) {
    struct ft_gen_job job = {.api = FT_API_RESPONSES, .chat = 1};
    struct ft_chat_in in = {0};
    json_t *root = ft_srv_body(req, resp);
    if (root && !parse_params(s, root, &job, resp) && !parse_input(root, &in, resp) &&
        !parse_tools(root, &in, resp) && !parse_format(root, &in, resp)) {
        in.think = -1;
        ft_srv_chat_submit(s, req, &in, &job, resp);
    }
    ft_chat_in_free(&in);
    ft_gen_job_free(&job);
    json_decref(root);
}

/* --- response ------------------------------------------------------------------------------ */

static json_t *usage(int n_prompt, int n_gen, int n_cached) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i}}", "input_tokens", n_prompt,
                     "output_tokens", n_gen, "total_tokens", n_prompt + n_gen,
                     "input_tokens_details", "cached_tokens", n_cached, "output_tokens_details",
                     "reasoning_tokens", 0);
}

static json_t *message_item(const struct ft_gen_job *job, const char *text, size_t n,
                            const char *status) {
    char id[64];
    snprintf(id, sizeof id, "msg_%s", job->id + 5);
    json_t *content = json_array();
    if (text)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:[]}", "type", "output_text",
                                                 "text", text, n, "annotations"));
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", id, "status", status,
                     "role", "assistant", "content", content);
}

static json_t *call_item(const struct ft_tool_call_out *c, const char *args, const char *status) {
    char id[48];
    snprintf(id, sizeof id, "fc_%s", c->id + (strncmp(c->id, "call_", 5) ? 0 : 5));
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "function_call", "id", id,
                     "call_id", c->id, "name", c->name, "arguments", args, "status", status);
}

static json_t *reasoning_item(const struct ft_gen_job *job, const char *r, size_t n) {
    char id[64];
    snprintf(id, sizeof id, "rs_%s", job->id + 5);
    return json_pack("{s:s, s:s, s:[{s:s, s:s%}]}", "type", "reasoning", "id", id, "summary",
                     "type", "summary_text", "text", r, n);
}

/* The response object around output items (taken). */
static json_t *response(struct ft_server *s, const struct ft_gen_job *job, json_t *output,
                        const char *status, int finish, int n_prompt, int n_gen, int n_cached) {
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:n, s:n, s:n, s:{}, s:b, s:s, s:[],"
                          " s:f, s:f, s:{s:{s:s}}}",
                          "id", job->id, "object", "response", "created_at",
                          (json_int_t)job->created, "status", status, "model", s->model_id,
                          "output", output, "error", "incomplete_details", "instructions",
                          "metadata", "parallel_tool_calls", 1, "tool_choice", "auto", "tools",
                          "temperature", (double)job->p.sampling.temperature, "top_p",
                          (double)job->p.sampling.top_p, "text", "format", "type", "text");
    if (!strcmp(status, "incomplete") || (!strcmp(status, "completed") && finish == FT_FINISH_LENGTH)) {
        json_object_set_new(j, "status", json_string("incomplete"));
        json_object_set_new(j, "incomplete_details", json_pack("{s:s}", "reason",
                                                               "max_output_tokens"));
    }
    if (job->p.max_tokens > 0)
        json_object_set_new(j, "max_output_tokens", json_integer(job->p.max_tokens));
    if (strcmp(status, "in_progress"))
        json_object_set_new(j, "usage", usage(n_prompt, n_gen, n_cached));
    return j;
}

json_t *ft_srv_responses_object(struct ft_server *s, const struct ft_gen_job *job,
                                const struct ft_gen_out *o, const char *status) {
    json_t *out = json_array();
    if (o->reasoning.n) json_array_append_new(out, reasoning_item(job, o->reasoning.p, o->reasoning.n));
    size_t lead = 0;
    while (o->n_calls && lead < o->content.n && strchr(" \n\t\r", o->content.p[lead])) lead++;
    if (o->content.n > lead || !o->n_calls)
        json_array_append_new(out, message_item(job, o->content.p ? o->content.p : "",
                                                o->content.n, "completed"));
    for (int i = 0; i < o->n_calls; i++)
        json_array_append_new(out, call_item(&o->calls[i], o->calls[i].args, "completed"));
    return response(s, job, out, status, o->finish, o->n_prompt, o->n_gen, o->n_cached);
}

/* --- stream -------------------------------------------------------------------------------- */

static void event(struct ft_stream_base *b, const char *type, json_t *j) {
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "sequence_number", json_integer(b->seq++));
    ft_sbuf_add(&b->out, "event: ", 7);
    ft_sbuf_add(&b->out, type, strlen(type));
    ft_sbuf_add(&b->out, "\n", 1);
    ft_sse_json(&b->out, j);
}

static void item_id(const struct ft_stream_base *b, char *id, size_t cap) {
    snprintf(id, cap, "msg_%s", b->job.id + 5);
}

static void r_start(void *g) {
    struct ft_stream_base *b = g;
    b->items = json_array();
    b->open = 0, b->index = 0;
    event(b, "response.created", json_pack("{s:o}", "response", response(b->s, &b->job,
                                            json_array(), "in_progress", 0, 0, 0, 0)));
    event(b, "response.in_progress", json_pack("{s:o}", "response", response(b->s, &b->job,
                                                json_array(), "in_progress", 0, 0, 0, 0)));
}

/* Closes the open message item (its text so far). */
static void close_message(struct ft_stream_base *b) {
    if (!b->open) return;
    char id[64];
    item_id(b, id, sizeof id);
    const char *t = b->text.p ? b->text.p : "";
    event(b, "response.output_text.done",
          json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index", b->index,
                    "content_index", 0, "text", t, b->text.n));
    event(b, "response.content_part.done",
          json_pack("{s:s, s:i, s:i, s:{s:s, s:s%, s:[]}}", "item_id", id, "output_index",
                    b->index, "content_index", 0, "part", "type", "output_text", "text", t,
                    b->text.n, "annotations"));
    json_t *item = message_item(&b->job, t, b->text.n, "completed");
    event(b, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", b->index, "item",
                                                    item));
    json_array_append_new(b->items, item);
    b->open = 0;
    b->index++;
}

/* Ends the function_call item being streamed with its arguments (args NULL: those sent). */
static void close_call(struct ft_stream_base *b, const char *args) {
    if (!b->call) return;
    json_t *item = b->call;
    b->call = NULL;
    if (!args) args = b->call_args.p ? b->call_args.p : "";
    const char *id = json_string_value(json_object_get(item, "id"));
    event(b, "response.function_call_arguments.done",
          json_pack("{s:s, s:i, s:s}", "item_id", id ? id : "fc", "output_index", b->index,
                    "arguments", args));
    json_object_set_new(item, "arguments", json_string(args));
    json_object_set_new(item, "status", json_string("completed"));
    event(b, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", b->index, "item",
                                                    item));
    json_array_append_new(b->items, item);
    b->index++;
    ft_sbuf_free(&b->call_args);
}

/* A function_call item streamed as it is written: output_item.added with empty arguments,
 * function_call_arguments.delta pieces, then .done and output_item.done (r_call_done). */
static void r_call_piece(void *g, int index, const char *id, const char *name, const char *args,
                         size_t n) {
    struct ft_stream_base *b = g;
    (void)index;
    if (id) {
        close_message(b);
        close_call(b, NULL);
        const struct ft_tool_call_out c = {(char *)id, (char *)name, (char *)""};
        b->call = call_item(&c, "", "in_progress");
        if (!b->call) return;
        event(b, "response.output_item.added", json_pack("{s:i, s:O}", "output_index", b->index,
                                                         "item", b->call));
    }
    if (!b->call || !n) return;
    ft_sbuf_add(&b->call_args, args, n);
    event(b, "response.function_call_arguments.delta",
          json_pack("{s:s, s:i, s:s%}", "item_id", json_string_value(json_object_get(b->call, "id")),
                    "output_index", b->index, "delta", args, n));
}

static void r_call_done(void *g, int index, const struct ft_tool_call_out *c) {
    (void)index;
    close_call(g, c->args);
}

static void r_text(void *g, const char *r, size_t nr, const char *c, size_t nc) {
    struct ft_stream_base *b = g;
    if (nr) ft_sbuf_add(&b->reason, r, nr); /* reported as a reasoning item at the end */
    if (nc) close_call(b, NULL); /* a call block that did not parse: ended as it went out */
    if (!nc) return;
    if (!b->open) {
        size_t k = 0;
        while (k < nc && strchr(" \n\t\r", c[k])) k++;
        if (k == nc) return; /* blanks around tool calls open no message */
        char id[64];
        item_id(b, id, sizeof id);
        ft_sbuf_free(&b->text);
        event(b, "response.output_item.added",
              json_pack("{s:i, s:o}", "output_index", b->index, "item",
                        message_item(&b->job, NULL, 0, "in_progress")));
        event(b, "response.content_part.added",
              json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", id, "output_index",
                        b->index, "content_index", 0, "part", "type", "output_text", "text", "",
                        "annotations"));
        b->open = 1;
    }
    char id[64];
    item_id(b, id, sizeof id);
    ft_sbuf_add(&b->text, c, nc);
    event(b, "response.output_text.delta",
          json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index", b->index,
                    "content_index", 0, "delta", c, nc));
}

static void r_call(void *g, int index, const struct ft_tool_call_out *c) {
    struct ft_stream_base *b = g;
    close_message(b);
    close_call(b, NULL);
    json_t *added = call_item(c, "", "in_progress");
    const char *fid = json_string_value(json_object_get(added, "id"));
    char id[48];
    snprintf(id, sizeof id, "%s", fid ? fid : "fc");
    event(b, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", b->index,
                                                     "item", added));
    event(b, "response.function_call_arguments.delta",
          json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", b->index, "delta", c->args));
    event(b, "response.function_call_arguments.done",
          json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", b->index, "arguments",
                    c->args));
    json_t *item = call_item(c, c->args, "completed");
    event(b, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", b->index, "item",
                                                    item));
    json_array_append_new(b->items, item);
    b->index++;
}

static void r_end(void *g, int finish, int n_prompt, int n_gen, int tool_calls) {
    struct ft_stream_base *b = g;
    close_message(b);
    close_call(b, NULL);
    json_t *out = json_array();
    if (b->reason.n) json_array_append_new(out, reasoning_item(&b->job, b->reason.p, b->reason.n));
    json_array_extend(out, b->items);
    if (!json_array_size(out)) json_array_append_new(out, message_item(&b->job, "", 0, "completed"));
    json_t *r = response(b->s, &b->job, out, "completed", finish, n_prompt, n_gen, b->n_cached);
    int incomplete = !strcmp(json_string_value(json_object_get(r, "status")), "incomplete");
    event(b, incomplete ? "response.incomplete" : "response.completed", json_pack("{s:o}",
                                                                                "response", r));
}

static void r_error(void *g, const char *message, int status) {
    struct ft_stream_base *b = g;
    json_t *r = response(b->s, &b->job, json_array(), "failed", 0, 0, 0, 0);
    json_object_set_new(r, "error", json_pack("{s:s, s:s}", "code", status == 400 ?
                                              "invalid_request" : "server_error", "message", message));
    event(b, "response.failed", json_pack("{s:o}", "response", r));
}

const struct ft_stream_api ft_responses_stream = {r_start, r_text, r_call, r_end, r_error,
                                                  r_call_piece, r_call_done};
