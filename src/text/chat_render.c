/* chat_render.c — the per-family chat renderers. Each function mirrors one real chat template
 * (cited above it) statement by statement, including its quirks, so that the output equals
 * transformers' apply_chat_template(..., tokenize=False); where the template raises, we fail with
 * FT_ERR_INVALID_ARG. Called only by ft_chat_render (chat.c); no shared state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "core/status.h"
#include "text/chat_impl.h"

#define S(x) ((x) ? (x) : "")

static int starts_with(const char *s, const char *p) {
    return strncmp(s, p, strlen(p)) == 0;
}

static int ends_with(const char *s, const char *p) {
    size_t n = strlen(s), k = strlen(p);
    return n >= k && memcmp(s + n - k, p, k) == 0;
}

/* Last occurrence of needle in [s, s+n), or NULL. */
static const char *rfind(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    if (k > n) return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (memcmp(s + i, needle, k) == 0) return s + i;
    return NULL;
}

static void put_stripped(struct chat_out *o, const char *s) {
    size_t n = strlen(S(s));
    s = S(s);
    py_strip(&s, &n, 1, 1);
    co_putn(o, s, n);
}

/* ---- tools (the Hermes-style blocks of the Qwen templates) ---- */

/* The tools list of o, parsed; NULL when there is none. */
static json_t *tools_of(const struct ft_chat_opts *o) {
    json_t *t = o->tools_json ? json_loads(o->tools_json, 0, NULL) : NULL;
    if (json_is_array(t) && json_array_size(t)) return t;
    json_decref(t);
    return NULL;
}

/* {%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %} */
static void put_tools(struct chat_out *out, const json_t *tools) {
    size_t i;
    json_t *t;
    json_array_foreach((json_t *)tools, i, t) {
        co_put(out, "\n");
        co_pyjson(out, t);
    }
}

/* {{- tool_call.arguments | tojson }}: arguments arrive as JSON text and are rendered as the
 * object they hold (as vLLM parses them before rendering); text that is not JSON is a string. */
static void put_args(struct chat_out *out, const char *args) {
    json_t *v = args ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
    if (!v) v = json_string(args ? args : "");
    co_pyjson(out, v);
    json_decref(v);
}

/* '<tool_call>\n{"name": "' + name + '", "arguments": ' + args + '}\n</tool_call>' */
static void put_hermes_call(struct chat_out *out, const struct ft_chat_tool_call *c) {
    co_put(out, "<tool_call>\n{\"name\": \"");
    co_put(out, c->name);
    co_put(out, "\", \"arguments\": ");
    put_args(out, c->arguments);
    co_put(out, "}\n</tool_call>");
}

static const char k_hermes_tools_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char k_hermes_tools_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/* ---- generic ChatML (transformers docs template) ---- */
static void chatml_turn(struct chat_out *out, const struct ft_chat_msg *msg) {
    co_put(out, "<|im_start|>");
    co_put(out, ft_chat_role_name(msg->role));
    co_put(out, "\n");
    co_put(out, msg->content);
    co_put(out, "<|im_end|>\n");
}

static enum ft_status render_chatml(const struct ft_chat_msg *m, int n,
                                    const struct ft_chat_opts *o, struct chat_out *out) {
    for (int i = 0; i < n; i++) chatml_turn(out, &m[i]);
    if (o->add_generation_prompt) co_put(out, "<|im_start|>assistant\n");
    return FT_OK;
}

/* ---- Qwen2/2.5 (ChatML, a default system prompt, tools, tool results as user turns) ---- */
static void qwen2_system(const struct ft_chat_template *t, const struct ft_chat_msg *m, int n,
                         const json_t *tools, struct chat_out *out) {
    const char *sys = n > 0 && m[0].role == FT_ROLE_SYSTEM ? S(m[0].content) : t->default_system;
    co_put(out, "<|im_start|>system\n");
    co_put(out, sys);
    if (!tools) {
        co_put(out, "<|im_end|>\n");
        return;
    }
    co_put(out, "\n\n");
    co_put(out, k_hermes_tools_head);
    put_tools(out, tools);
    co_put(out, k_hermes_tools_tail);
}

static enum ft_status render_qwen2(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                   int n, const struct ft_chat_opts *o, struct chat_out *out) {
    json_t *tools = tools_of(o);
    qwen2_system(t, m, n, tools, out);
    json_decref(tools);
    for (int i = 0; i < n; i++) {
        if (m[i].role == FT_ROLE_TOOL) { /* consecutive tool results share one user turn */
            if (i == 0 || m[i - 1].role != FT_ROLE_TOOL) co_put(out, "<|im_start|>user");
            co_put(out, "\n<tool_response>\n");
            co_put(out, m[i].content);
            co_put(out, "\n</tool_response>");
            if (i == n - 1 || m[i + 1].role != FT_ROLE_TOOL) co_put(out, "<|im_end|>\n");
            continue;
        }
        if (m[i].role == FT_ROLE_ASSISTANT && m[i].n_tool_calls) {
            co_put(out, "<|im_start|>assistant");
            if (*S(m[i].content)) {
                co_put(out, "\n");
                co_put(out, m[i].content);
            }
            for (int k = 0; k < m[i].n_tool_calls; k++) {
                co_put(out, "\n");
                put_hermes_call(out, &m[i].tool_calls[k]);
            }
            co_put(out, "<|im_end|>\n");
            continue;
        }
        if (m[i].role != FT_ROLE_SYSTEM || i > 0) chatml_turn(out, &m[i]); /* first: above */
    }
    if (o->add_generation_prompt) co_put(out, "<|im_start|>assistant\n");
    return FT_OK;
}

/* ---- Qwen3 (ChatML + thinking), Qwen/Qwen3 tokenizer_config.json, no tools ---- */
static int qwen3_is_query(const struct ft_chat_msg *msg) {
    const char *c = S(msg->content);
    return msg->role == FT_ROLE_USER &&
           !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"));
}

static void qwen3_assistant(const struct ft_chat_msg *msg, int idx, int last_query, int is_last,
                            struct chat_out *out) {
    const char *c = S(msg->content);
    size_t cn = strlen(c);
    const char *r = "";
    size_t rn = 0;
    if (msg->reasoning) {
        r = msg->reasoning;
        rn = strlen(r);
    } else if (strstr(c, "</think>")) {
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        const char *first = strstr(c, "</think>");
        r = c;
        rn = (size_t)(first - c);
        py_strip_char(&r, &rn, '\n', 0, 1);
        const char *open = rfind(r, rn, "<think>");
        if (open) {
            rn -= (size_t)(open + 7 - r);
            r = open + 7;
        }
        py_strip_char(&r, &rn, '\n', 1, 0);
        /* content.split('</think>')[-1].lstrip('\n') */
        const char *lastc = rfind(c, cn, "</think>") + 8;
        cn -= (size_t)(lastc - c);
        c = lastc;
        py_strip_char(&c, &cn, '\n', 1, 0);
    }
    co_put(out, "<|im_start|>assistant\n");
    const int has_content = cn > 0; /* the template tests `content` before its lstrip */
    if (idx > last_query && (is_last || rn > 0)) {
        co_put(out, "<think>\n");
        py_strip_char(&r, &rn, '\n', 1, 1);
        co_putn(out, r, rn);
        co_put(out, "\n</think>\n\n");
        py_strip_char(&c, &cn, '\n', 1, 0);
    }
    co_putn(out, c, cn);
    for (int k = 0; k < msg->n_tool_calls; k++) {
        if (k > 0 || has_content) co_put(out, "\n");
        put_hermes_call(out, &msg->tool_calls[k]);
    }
    co_put(out, "<|im_end|>\n");
}

static enum ft_status render_qwen3(const struct ft_chat_msg *m, int n, const struct ft_chat_opts *o,
                                   struct chat_out *out) {
    json_t *tools = tools_of(o);
    if (tools) {
        co_put(out, "<|im_start|>system\n");
        if (m[0].role == FT_ROLE_SYSTEM) {
            co_put(out, m[0].content);
            co_put(out, "\n\n");
        }
        co_put(out, k_hermes_tools_head);
        put_tools(out, tools);
        co_put(out, k_hermes_tools_tail);
        json_decref(tools);
    } else if (m[0].role == FT_ROLE_SYSTEM) {
        co_put(out, "<|im_start|>system\n");
        co_put(out, m[0].content);
        co_put(out, "<|im_end|>\n");
    }
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (qwen3_is_query(&m[i])) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n; i++) {
        enum ft_chat_role r = m[i].role;
        if (r == FT_ROLE_USER || (r == FT_ROLE_SYSTEM && i > 0)) {
            co_put(out, "<|im_start|>");
            co_put(out, ft_chat_role_name(r));
            co_put(out, "\n");
            co_put(out, m[i].content);
            co_put(out, "<|im_end|>\n");
        } else if (r == FT_ROLE_ASSISTANT) {
            qwen3_assistant(&m[i], i, last_query, i == n - 1, out);
        } else if (r == FT_ROLE_TOOL) {
            if (i == 0 || m[i - 1].role != FT_ROLE_TOOL) co_put(out, "<|im_start|>user");
            co_put(out, "\n<tool_response>\n");
            co_put(out, m[i].content);
            co_put(out, "\n</tool_response>");
            if (i == n - 1 || m[i + 1].role != FT_ROLE_TOOL) co_put(out, "<|im_end|>\n");
        }
    }
    if (o->add_generation_prompt) {
        co_put(out, "<|im_start|>assistant\n");
        if (o->enable_thinking == 0) co_put(out, "<think>\n\n</think>\n\n");
    }
    return FT_OK;
}

/* ---- Llama-3 (Meta-Llama-3-*-Instruct tokenizer_config.json) ---- */
static enum ft_status render_llama3(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                    int n, const struct ft_chat_opts *o, struct chat_out *out) {
    for (int i = 0; i < n; i++) {
        if (i == 0) co_put(out, o->bos_token);
        co_put(out, "<|start_header_id|>");
        co_put(out, ft_chat_role_name(m[i].role));
        co_put(out, "<|end_header_id|>\n\n");
        put_stripped(out, m[i].content);
        co_put(out, "<|eot_id|>");
    }
    if (t->llama3_gen_always || o->add_generation_prompt)
        co_put(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return FT_OK;
}

/* ---- Llama-2 chat (meta-llama/Llama-2-7b-chat-hf) ---- */
static enum ft_status render_llama2(const struct ft_chat_msg *m, int n,
                                    const struct ft_chat_opts *o, struct chat_out *out) {
    const char *sys = NULL;
    if (m[0].role == FT_ROLE_SYSTEM) {
        sys = S(m[0].content);
        m++, n--;
    }
    for (int i = 0; i < n; i++)
        if ((m[i].role == FT_ROLE_USER) != (i % 2 == 0))
            return ft_fail(FT_ERR_INVALID_ARG,
                           "chat template llama2: conversation roles must alternate "
                           "user/assistant/user/assistant/... (message %d is %s)",
                           i + (sys ? 1 : 0), ft_chat_role_name(m[i].role));
    for (int i = 0; i < n; i++) {
        struct chat_out c = {0};
        if (i == 0 && sys) {
            co_put(&c, "<<SYS>>\n");
            co_put(&c, sys);
            co_put(&c, "\n<</SYS>>\n\n");
        }
        co_put(&c, m[i].content);
        co_putn(&c, "", 0);
        if (c.oom) {
            free(c.p);
            out->oom = 1;
            return FT_OK;
        }
        if (m[i].role == FT_ROLE_USER) {
            co_put(out, o->bos_token);
            co_put(out, "[INST] ");
            put_stripped(out, c.p);
            co_put(out, " [/INST]");
        } else if (m[i].role == FT_ROLE_ASSISTANT) {
            co_put(out, " ");
            put_stripped(out, c.p);
            co_put(out, " ");
            co_put(out, o->eos_token);
        }
        free(c.p);
    }
    return FT_OK;
}

/* ---- Mistral v0.1 (mistralai/Mixtral-8x7B-Instruct-v0.1): user/assistant only ---- */
static enum ft_status render_mistral_v01(const struct ft_chat_msg *m, int n,
                                         const struct ft_chat_opts *o, struct chat_out *out) {
    co_put(out, o->bos_token);
    for (int i = 0; i < n; i++) {
        if ((m[i].role == FT_ROLE_USER) != (i % 2 == 0))
            return ft_fail(FT_ERR_INVALID_ARG,
                           "chat template mistral: conversation roles must alternate "
                           "user/assistant/user/assistant/... (message %d is %s)",
                           i, ft_chat_role_name(m[i].role));
        if (m[i].role == FT_ROLE_USER) {
            co_put(out, "[INST] ");
            co_put(out, m[i].content);
            co_put(out, " [/INST]");
        } else if (m[i].role == FT_ROLE_ASSISTANT) {
            co_put(out, m[i].content);
            co_put(out, o->eos_token);
        } else {
            return ft_fail(FT_ERR_INVALID_ARG,
                           "chat template mistral: only user and assistant roles are supported");
        }
    }
    return FT_OK;
}

/* ---- Mistral v0.3 (mistralai/Mistral-7B-Instruct-v0.3): [AVAILABLE_TOOLS], [TOOL_CALLS] ---- */

/* "[AVAILABLE_TOOLS] [" + per tool '{"type": "function", "function": {' + each key of tool.function
 * but "return": a string value as '"key": "val"' (not escaped), others '"key": ' + tojson; ", "
 * between; "}}" + (", " | "]") ... "[/AVAILABLE_TOOLS]" */
static void mistral_tools(struct chat_out *out, const json_t *tools) {
    size_t i;
    json_t *t;
    co_put(out, "[AVAILABLE_TOOLS] [");
    json_array_foreach((json_t *)tools, i, t) {
        json_t *fn = json_object_get(t, "function"), *v;
        const char *key;
        int first = 1;
        co_put(out, "{\"type\": \"function\", \"function\": {");
        json_object_foreach(fn, key, v) {
            if (!strcmp(key, "return")) continue;
            if (!first) co_put(out, ", ");
            first = 0;
            co_put(out, "\"");
            co_put(out, key);
            co_put(out, "\": ");
            if (json_is_string(v)) {
                co_put(out, "\"");
                co_put(out, json_string_value(v));
                co_put(out, "\"");
            } else {
                co_pyjson(out, v);
            }
        }
        co_put(out, "}}");
        co_put(out, i + 1 < json_array_size(tools) ? ", " : "]");
    }
    co_put(out, "[/AVAILABLE_TOOLS]");
}

/* "[TOOL_CALLS] [" + per call (tool_call.function|tojson)[:-1] + ', "id": "' + id + '"}' joined
 * by ", ", then "]" + eos_token; an id that is not 9 characters raises. */
static enum ft_status mistral_calls(const struct ft_chat_msg *msg, int idx,
                                    const struct ft_chat_opts *o, struct chat_out *out) {
    co_put(out, "[TOOL_CALLS] [");
    for (int k = 0; k < msg->n_tool_calls; k++) {
        const struct ft_chat_tool_call *c = &msg->tool_calls[k];
        json_t *name = json_string(S(c->name));
        co_put(out, "{\"name\": ");
        co_pyjson(out, name);
        json_decref(name);
        co_put(out, ", \"arguments\": ");
        put_args(out, c->arguments);
        if (!c->id || utf8_len(c->id) != 9)
            return ft_fail(FT_ERR_INVALID_ARG,
                           "chat template mistral: message %d: tool call ids must be 9 "
                           "alphanumeric characters (got '%s')",
                           idx, S(c->id));
        co_put(out, ", \"id\": \"");
        co_put(out, c->id);
        co_put(out, "\"}");
        co_put(out, k + 1 < msg->n_tool_calls ? ", " : "]");
    }
    co_put(out, o->eos_token);
    return FT_OK;
}

static enum ft_status render_mistral(const struct ft_chat_msg *m, int n,
                                     const struct ft_chat_opts *o, struct chat_out *out) {
    const char *sys = NULL;
    const int m0 = m[0].role == FT_ROLE_SYSTEM;
    if (m0) {
        sys = S(m[0].content);
        m++, n--;
    }
    int last_user = -1;
    for (int i = 0, k = 0; i < n; i++) {
        if (m[i].role == FT_ROLE_USER) last_user = i;
        if (m[i].role == FT_ROLE_TOOL || m[i].n_tool_calls) continue;
        if ((m[i].role == FT_ROLE_USER) != (k % 2 == 0))
            return ft_fail(FT_ERR_INVALID_ARG,
                           "chat template mistral: after the optional system message, roles must "
                           "alternate user/assistant/... (message %d is %s)",
                           i + m0, ft_chat_role_name(m[i].role));
        k++;
    }
    json_t *tools = tools_of(o);
    enum ft_status st = FT_OK;
    co_put(out, o->bos_token);
    for (int i = 0; i < n && st == FT_OK; i++) {
        switch (m[i].role) {
        case FT_ROLE_USER:
            /* `message == user_messages[-1]`: compares the dicts, so an earlier user message
             * with the same text gets the tools too */
            if (tools && !strcmp(S(m[i].content), S(m[last_user].content)))
                mistral_tools(out, tools);
            co_put(out, "[INST] ");
            if (i == n - 1 && sys) {
                co_put(out, sys);
                co_put(out, "\n\n");
            }
            co_put(out, m[i].content);
            co_put(out, "[/INST]");
            break;
        case FT_ROLE_ASSISTANT:
            if (m[i].n_tool_calls) {
                st = mistral_calls(&m[i], i + m0, o, out);
                break;
            }
            co_put(out, " ");
            put_stripped(out, m[i].content);
            co_put(out, o->eos_token);
            break;
        case FT_ROLE_TOOL:
            co_put(out, "[TOOL_RESULTS] {\"content\": ");
            co_put(out, m[i].content);
            co_put(out, ", ");
            if (!m[i].name || utf8_len(m[i].name) != 9) {
                st = ft_fail(FT_ERR_INVALID_ARG,
                             "chat template mistral: tool message %d needs a 9-character tool "
                             "call id in its name (got '%s')",
                             i + m0, S(m[i].name));
                break;
            }
            co_put(out, "\"call_id\": \"");
            co_put(out, m[i].name);
            co_put(out, "\"}[/TOOL_RESULTS]");
            break;
        default:
            st = ft_fail(FT_ERR_INVALID_ARG,
                         "chat template mistral: only user and assistant roles are supported, "
                         "with the exception of an initial optional system message");
        }
    }
    json_decref(tools);
    return st;
}

/* ---- DeepSeek-V3 (deepseek-ai/DeepSeek-V3 tokenizer_config.json) ----
 * The template does not list `tools`; an assistant message whose content is none writes its
 * tool_calls (arguments as the request's text), one with content writes only the content. Its
 * ns.is_first flag is set by the first call of the conversation: that call opens
 * <｜tool▁calls▁begin｜> and writes no end; every later call (in any message) writes a "\n" before
 * and <｜tool▁calls▁end｜><｜end▁of▁sentence｜> after itself. */
#define DS_BAR "\xef\xbd\x9c" /* ｜ */
#define DS_SEP "\xe2\x96\x81" /* ▁ */
#define DS_CALLS_BEGIN "<" DS_BAR "tool" DS_SEP "calls" DS_SEP "begin" DS_BAR ">"
#define DS_CALLS_END "<" DS_BAR "tool" DS_SEP "calls" DS_SEP "end" DS_BAR ">"
#define DS_CALL_BEGIN "<" DS_BAR "tool" DS_SEP "call" DS_SEP "begin" DS_BAR ">"
#define DS_CALL_END "<" DS_BAR "tool" DS_SEP "call" DS_SEP "end" DS_BAR ">"
#define DS_TOOL_SEP "<" DS_BAR "tool" DS_SEP "sep" DS_BAR ">"
#define DS_EOS "<" DS_BAR "end" DS_SEP "of" DS_SEP "sentence" DS_BAR ">"
static enum ft_status render_deepseek3(const struct ft_chat_msg *m, int n,
                                       const struct ft_chat_opts *o, struct chat_out *out) {
    co_put(out, o->bos_token);
    int first_sp = 1;
    for (int i = 0; i < n; i++)
        if (m[i].role == FT_ROLE_SYSTEM) {
            if (!first_sp) co_put(out, "\n\n");
            co_put(out, m[i].content);
            first_sp = 0;
        }
    int is_tool = 0, output_first = 1, is_first = 0;
    for (int i = 0; i < n; i++) {
        switch (m[i].role) {
        case FT_ROLE_USER:
            is_tool = 0;
            co_put(out, "<" DS_BAR "User" DS_BAR ">");
            co_put(out, m[i].content);
            break;
        case FT_ROLE_ASSISTANT:
            if (!m[i].content) {
                is_tool = 0;
                for (int k = 0; k < m[i].n_tool_calls; k++) {
                    const struct ft_chat_tool_call *c = &m[i].tool_calls[k];
                    co_put(out, is_first ? "\n" DS_CALL_BEGIN
                                         : "<" DS_BAR "Assistant" DS_BAR ">" DS_CALLS_BEGIN
                                               DS_CALL_BEGIN);
                    co_put(out, "function" DS_TOOL_SEP);
                    co_put(out, c->name);
                    co_put(out, "\n```json\n");
                    co_put(out, c->arguments);
                    co_put(out, "\n```" DS_CALL_END);
                    if (is_first) co_put(out, DS_CALLS_END DS_EOS);
                    is_first = 1;
                }
                break;
            }
            if (is_tool) {
                co_put(out, "<" DS_BAR "tool" DS_SEP "outputs" DS_SEP "end" DS_BAR ">");
                is_tool = 0;
            } else {
                co_put(out, "<" DS_BAR "Assistant" DS_BAR ">");
            }
            co_put(out, m[i].content);
            co_put(out, "<" DS_BAR "end" DS_SEP "of" DS_SEP "sentence" DS_BAR ">");
            break;
        case FT_ROLE_TOOL:
            is_tool = 1;
            if (output_first) {
                co_put(out, "<" DS_BAR "tool" DS_SEP "outputs" DS_SEP "begin" DS_BAR ">");
                output_first = 0;
            } else {
                co_put(out, "\n");
            }
            co_put(out, "<" DS_BAR "tool" DS_SEP "output" DS_SEP "begin" DS_BAR ">");
            co_put(out, m[i].content);
            co_put(out, "<" DS_BAR "tool" DS_SEP "output" DS_SEP "end" DS_BAR ">");
            break;
        case FT_ROLE_SYSTEM: break;
        }
    }
    if (is_tool) co_put(out, "<" DS_BAR "tool" DS_SEP "outputs" DS_SEP "end" DS_BAR ">");
    if (o->add_generation_prompt && !is_tool) co_put(out, "<" DS_BAR "Assistant" DS_BAR ">");
    return FT_OK;
}

/* ---- gpt-oss harmony (openai/gpt-oss-20b chat_template.jinja) ---- */

/* jinja truthiness of a JSON value (absent = undefined = false) */
static int truthy(const json_t *v) {
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return 1;
    default: return 0;
    }
}

static int type_is(const json_t *spec, const char *t) {
    const char *v = json_string_value(json_object_get(spec, "type"));
    return v && !strcmp(v, t);
}

/* Python str() of a list item, as |join writes it */
static void put_pystr(struct chat_out *out, const json_t *v) {
    if (json_is_string(v)) co_put(out, json_string_value(v));
    else if (json_is_true(v)) co_put(out, "True");
    else if (json_is_false(v)) co_put(out, "False");
    else if (json_is_null(v)) co_put(out, "None");
    else co_pyjson(out, v);
}

static void put_join(struct chat_out *out, const json_t *list, const char *sep) {
    size_t i;
    json_t *v;
    json_array_foreach((json_t *)list, i, v) {
        if (i) co_put(out, sep);
        put_pystr(out, v);
    }
}

/* `x in (required or [])` */
static int is_required(const json_t *required, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach((json_t *)required, i, v)
        if (json_is_string(v) && !strcmp(json_string_value(v), name)) return 1;
    return 0;
}

static void ts_type(struct chat_out *out, const json_t *spec);

/* macro render_typescript_type, array branch */
static void ts_array(struct chat_out *out, const json_t *spec) {
    const json_t *items = json_object_get(spec, "items");
    if (!items) {
        co_put(out, "any[]");
    } else if (type_is(items, "string")) {
        co_put(out, "string[]");
    } else if (type_is(items, "number") || type_is(items, "integer")) {
        co_put(out, "number[]");
    } else if (type_is(items, "boolean")) {
        co_put(out, "boolean[]");
    } else {
        struct chat_out in = {0};
        ts_type(&in, items);
        co_putn(&in, "", 0);
        if (in.oom) out->oom = 1;
        else if (!strcmp(in.p, "object | object") || utf8_len(in.p) > 50) co_put(out, "any[]");
        else co_put(out, in.p), co_put(out, "[]");
        free(in.p);
    }
    if (truthy(json_object_get(spec, "nullable"))) co_put(out, " | null");
}

/* The oneOf branch. Its `set has_object_variants = true` happens inside a for loop, so jinja
 * scoping leaves the outer variable false: every oneOf is written variant by variant. The
 * default line keeps the 20 spaces before its `{{`, and " | " the newline after it. */
static void ts_one_of(struct chat_out *out, const json_t *one_of) {
    size_t i;
    json_t *v;
    json_array_foreach((json_t *)one_of, i, v) {
        ts_type(out, v);
        const json_t *d = json_object_get(v, "description");
        if (truthy(d)) {
            co_put(out, "// ");
            put_pystr(out, d);
        }
        const json_t *def = json_object_get(v, "default");
        if (def) {
            co_put(out, "                    // default: ");
            co_pyjson(out, def);
        }
        if (i + 1 < json_array_size(one_of)) co_put(out, " | \n");
    }
}

/* The object branch: each property's type after ": \n" and the 16 spaces before its `{{`. */
static void ts_object(struct chat_out *out, const json_t *spec) {
    const json_t *props = json_object_get(spec, "properties");
    const json_t *req = json_object_get(spec, "required");
    if (!truthy(props)) {
        co_put(out, "object");
        return;
    }
    const char *key;
    json_t *v;
    size_t k = 0;
    co_put(out, "{\n");
    json_object_foreach((json_t *)props, key, v) {
        if (k++) co_put(out, ", ");
        co_put(out, key);
        if (!is_required(req, key)) co_put(out, "?");
        co_put(out, ": \n                ");
        ts_type(out, v);
    }
    co_put(out, "}");
}

/* macro render_typescript_type(param_spec, required_params) */
static void ts_type(struct chat_out *out, const json_t *spec) {
    const json_t *type = json_object_get(spec, "type");
    if (type_is(spec, "array")) {
        ts_array(out, spec);
    } else if (json_is_array(type) && json_array_size(type)) {
        put_join(out, type, " | ");
    } else if (truthy(json_object_get(spec, "oneOf"))) {
        ts_one_of(out, json_object_get(spec, "oneOf"));
    } else if (type_is(spec, "string")) {
        const json_t *e = json_object_get(spec, "enum");
        if (truthy(e)) {
            co_put(out, "\"");
            put_join(out, e, "\" | \"");
            co_put(out, "\"");
        } else {
            co_put(out, "string");
            if (truthy(json_object_get(spec, "nullable"))) co_put(out, " | null");
        }
    } else if (type_is(spec, "number") || type_is(spec, "integer")) {
        co_put(out, "number");
    } else if (type_is(spec, "boolean")) {
        co_put(out, "boolean");
    } else if (type_is(spec, "object")) {
        ts_object(out, spec);
    } else {
        co_put(out, "any");
    }
}

/* macro render_tool_namespace("functions", tools). A tool without a description, or an enum
 * or oneOf default that is not a string, raises in the template (str + undefined / int). */
static enum ft_status harmony_tools(struct chat_out *out, const json_t *tools) {
    size_t i;
    json_t *t;
    co_put(out, "## functions\n\nnamespace functions {\n\n");
    json_array_foreach((json_t *)tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *desc = json_string_value(json_object_get(fn, "description"));
        if (!desc)
            return ft_fail(FT_ERR_INVALID_ARG, "chat template harmony: tool '%s' needs a "
                           "description (the gpt-oss template writes it)", S(name));
        co_put(out, "// ");
        co_put(out, desc);
        co_put(out, "\ntype ");
        co_put(out, name);
        co_put(out, " = ");
        const json_t *params = json_object_get(fn, "parameters");
        const json_t *props = json_object_get(params, "properties");
        if (!truthy(params) || !truthy(props)) {
            co_put(out, "() => any;\n\n");
            continue;
        }
        const json_t *req = json_object_get(params, "required");
        const char *key;
        json_t *spec;
        co_put(out, "(_: {\n");
        json_object_foreach((json_t *)props, key, spec) {
            const json_t *d = json_object_get(spec, "description");
            if (truthy(d)) {
                co_put(out, "// ");
                put_pystr(out, d);
                co_put(out, "\n");
            }
            co_put(out, key);
            if (!is_required(req, key)) co_put(out, "?");
            co_put(out, ": ");
            ts_type(out, spec);
            const json_t *def = json_object_get(spec, "default");
            if (def) {
                int en = truthy(json_object_get(spec, "enum"));
                if (en || truthy(json_object_get(spec, "oneOf"))) {
                    if (!json_is_string(def))
                        return ft_fail(FT_ERR_INVALID_ARG, "chat template harmony: tool '%s' "
                                       "parameter '%s': the template writes an enum or oneOf "
                                       "default only when it is a string", S(name), key);
                    co_put(out, en ? ", // default: " : "// default: ");
                    co_put(out, json_string_value(def));
                } else {
                    co_put(out, ", // default: ");
                    co_pyjson(out, def);
                }
            }
            co_put(out, ",\n");
        }
        co_put(out, "}) => any;\n\n");
    }
    co_put(out, "} // namespace functions");
    return FT_OK;
}

static int has_channel_tags(const char *s) {
    return strstr(s, "<|channel|>analysis<|message|>") || strstr(s, "<|channel|>final<|message|>");
}

/* An assistant message with tool_calls: the analysis text (content or thinking) unless a later
 * assistant message without calls exists, then the first call only ("max 1 tool call per
 * message"). */
static enum ft_status harmony_call(const struct ft_chat_msg *m, int n, int i,
                                   struct chat_out *out) {
    int future_final = 0;
    for (int j = i + 1; j < n; j++)
        future_final |= m[j].role == FT_ROLE_ASSISTANT && !m[j].n_tool_calls;
    const char *c = S(m[i].content), *r = S(m[i].reasoning);
    if (*c && *r)
        return ft_fail(FT_ERR_INVALID_ARG, "chat template harmony: assistant message %d has "
                       "both content and reasoning next to its tool calls; put the analysis "
                       "text in one of them", i);
    if ((*c || *r) && !future_final) {
        co_put(out, "<|start|>assistant<|channel|>analysis<|message|>");
        co_put(out, *c ? c : r);
        co_put(out, "<|end|>");
    }
    co_put(out, "<|start|>assistant to=functions.");
    co_put(out, m[i].tool_calls[0].name);
    co_put(out, "<|channel|>commentary json<|message|>");
    put_args(out, m[i].tool_calls[0].arguments);
    co_put(out, "<|call|>");
    return FT_OK;
}

static enum ft_status render_harmony(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                     int n, const struct ft_chat_opts *o, struct chat_out *out) {
    char today[32];
    const char *date = o->date;
    enum ft_status st = FT_OK;
    if (!date) {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        strftime(today, sizeof today, "%Y-%m-%d", &tm);
        date = today;
    }
    json_t *tools = tools_of(o);
    co_put(out, "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
                "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: ");
    co_put(out, date);
    co_put(out, "\n\nReasoning: ");
    co_put(out, o->reasoning_effort ? o->reasoning_effort : "medium");
    co_put(out, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
                "every message.");
    if (t->harmony_v1 || tools)
        co_put(out, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    co_put(out, "<|end|>");
    const char *dev = m[0].role == FT_ROLE_SYSTEM ? S(m[0].content) : "";
    if (m[0].role == FT_ROLE_SYSTEM) m++, n--;
    if (*dev || tools) {
        co_put(out, "<|start|>developer<|message|>");
        if (*dev) {
            co_put(out, "# Instructions\n\n");
            co_put(out, dev);
            if (!t->harmony_v1) co_put(out, "\n\n");
        }
        if (tools) {
            co_put(out, "# Tools\n\n");
            st = harmony_tools(out, tools);
        }
        co_put(out, "<|end|>");
    }
    json_decref(tools);
    const char *last_call = NULL; /* the name the next tool message answers for */
    for (int i = 0; i < n && st == FT_OK; i++) {
        const char *c = S(m[i].content);
        switch (m[i].role) {
        case FT_ROLE_ASSISTANT:
            if (has_channel_tags(c) || (m[i].reasoning && has_channel_tags(m[i].reasoning)))
                return ft_fail(FT_ERR_INVALID_ARG,
                               "chat template harmony: assistant message %d contains <|channel|> "
                               "tags; pass the analysis text as reasoning and the final text as "
                               "content",
                               i);
            if (m[i].n_tool_calls) {
                st = harmony_call(m, n, i, out);
                last_call = m[i].tool_calls[0].name;
            } else if (i == n - 1 && !o->add_generation_prompt) {
                if (m[i].reasoning) {
                    co_put(out, "<|start|>assistant<|channel|>analysis<|message|>");
                    co_put(out, m[i].reasoning);
                    co_put(out, "<|end|>");
                }
                co_put(out, "<|start|>assistant<|channel|>final<|message|>");
                co_put(out, c);
                co_put(out, "<|return|>");
            } else {
                co_put(out, "<|start|>assistant<|channel|>final<|message|>");
                co_put(out, c);
                co_put(out, "<|end|>");
                last_call = NULL;
            }
            break;
        case FT_ROLE_TOOL: {
            if (!last_call)
                return ft_fail(FT_ERR_INVALID_ARG,
                               "chat template harmony: tool message %d has no preceding assistant "
                               "message with a tool call",
                               i);
            json_t *js = json_string(c);
            co_put(out, "<|start|>functions.");
            co_put(out, last_call);
            co_put(out, " to=assistant<|channel|>commentary<|message|>");
            co_pyjson(out, js);
            co_put(out, "<|end|>");
            json_decref(js);
            break;
        }
        case FT_ROLE_USER:
            co_put(out, "<|start|>user<|message|>");
            co_put(out, c);
            co_put(out, "<|end|>");
            break;
        case FT_ROLE_SYSTEM: break; /* a later system message is not rendered by the template */
        }
    }
    if (st == FT_OK && o->add_generation_prompt) co_put(out, "<|start|>assistant");
    return st;
}

int ft_chat_supports_tools(const struct ft_chat_template *t) {
    return t && (t->family == CHAT_QWEN2 || t->family == CHAT_QWEN3 ||
                 t->family == CHAT_LLAMA31 || t->family == CHAT_QWEN3_CODER ||
                 t->family == CHAT_GLM4 || t->family == CHAT_MINIMAX || t->family == CHAT_KIMI ||
                 (t->family == CHAT_MISTRAL && !t->mistral_v01) || t->family == CHAT_DEEPSEEK3 ||
                 t->family == CHAT_HARMONY);
}

enum ft_status chat_render_family(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                  int n, const struct ft_chat_opts *o, struct chat_out *out) {
    int calls = 0;
    for (int i = 0; i < n; i++) calls |= m[i].n_tool_calls > 0;
    json_t *tools = tools_of(o);
    json_decref(tools);
    if ((tools || calls) && !ft_chat_supports_tools(t))
        return ft_fail(FT_ERR_UNSUPPORTED, "chat template %s: tools and assistant tool_calls are "
                       "not rendered for this family yet (they are for qwen2, qwen3, qwen3_coder, "
                       "llama3_1, mistral v0.3, deepseek3, harmony, glm4, minimax, kimi_k2); send "
                       "the request without tools, or start the server with --chat-template NAME "
                       "if the model was trained on that format", ft_chat_template_name(t));
    switch (t->family) {
    case CHAT_CHATML: return render_chatml(m, n, o, out);
    case CHAT_QWEN3: return render_qwen3(m, n, o, out);
    case CHAT_LLAMA3: return render_llama3(t, m, n, o, out);
    case CHAT_LLAMA2: return render_llama2(m, n, o, out);
    case CHAT_MISTRAL:
        return t->mistral_v01 ? render_mistral_v01(m, n, o, out) : render_mistral(m, n, o, out);
    case CHAT_DEEPSEEK3: return render_deepseek3(m, n, o, out);
    case CHAT_HARMONY: return render_harmony(t, m, n, o, out);
    case CHAT_QWEN2: return render_qwen2(t, m, n, o, out);
    case CHAT_LLAMA31: return chat_render_llama31(t, m, n, o, out);
    case CHAT_QWEN3_CODER: return chat_render_qwen3_coder(m, n, o, out);
    case CHAT_GLM4: return chat_render_glm4(t, m, n, o, out);
    case CHAT_MINIMAX: return chat_render_minimax(m, n, o, out);
    case CHAT_KIMI: return chat_render_kimi(m, n, o, out);
    case CHAT_N_FAMILIES: break;
    }
    return ft_fail(FT_ERR_INTERNAL, "chat render: bad family %d", (int)t->family);
}
