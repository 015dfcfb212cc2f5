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

/* ---- Mistral v0.3 (mistralai/Mistral-7B-Instruct-v0.3), no tools/tool_calls ---- */
static enum ft_status render_mistral(const struct ft_chat_msg *m, int n,
                                     const struct ft_chat_opts *o, struct chat_out *out) {
    const char *sys = NULL;
    if (m[0].role == FT_ROLE_SYSTEM) {
        sys = S(m[0].content);
        m++, n--;
    }
    for (int i = 0, k = 0; i < n; i++) {
        if (m[i].role == FT_ROLE_TOOL) continue;
        if ((m[i].role == FT_ROLE_USER) != (k % 2 == 0))
            return ft_fail(FT_ERR_INVALID_ARG,
                           "chat template mistral: after the optional system message, roles must "
                           "alternate user/assistant/... (message %d is %s)",
                           i + (sys ? 1 : 0), ft_chat_role_name(m[i].role));
        k++;
    }
    co_put(out, o->bos_token);
    for (int i = 0; i < n; i++) {
        switch (m[i].role) {
        case FT_ROLE_USER:
            co_put(out, "[INST] ");
            if (i == n - 1 && sys) {
                co_put(out, sys);
                co_put(out, "\n\n");
            }
            co_put(out, m[i].content);
            co_put(out, "[/INST]");
            break;
        case FT_ROLE_ASSISTANT:
            co_put(out, " ");
            put_stripped(out, m[i].content);
            co_put(out, o->eos_token);
            break;
        case FT_ROLE_TOOL:
            if (!m[i].name || utf8_len(m[i].name) != 9)
                return ft_fail(FT_ERR_INVALID_ARG,
                               "chat template mistral: tool message %d needs a 9-character tool "
                               "call id in its name (got '%s')",
                               i + (sys ? 1 : 0), S(m[i].name));
            co_put(out, "[TOOL_RESULTS] {\"content\": ");
            co_put(out, m[i].content);
            co_put(out, ", \"call_id\": \"");
            co_put(out, m[i].name);
            co_put(out, "\"}[/TOOL_RESULTS]");
            break;
        default:
            return ft_fail(FT_ERR_INVALID_ARG,
                           "chat template mistral: only user and assistant roles are supported, "
                           "with the exception of an initial optional system message");
        }
    }
    return FT_OK;
}

/* ---- DeepSeek-V3 (deepseek-ai/DeepSeek-V3 tokenizer_config.json), no tool_calls ---- */
#define DS_BAR "\xef\xbd\x9c" /* ｜ */
#define DS_SEP "\xe2\x96\x81" /* ▁ */
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
    int is_tool = 0, output_first = 1;
    for (int i = 0; i < n; i++) {
        switch (m[i].role) {
        case FT_ROLE_USER:
            is_tool = 0;
            co_put(out, "<" DS_BAR "User" DS_BAR ">");
            co_put(out, m[i].content);
            break;
        case FT_ROLE_ASSISTANT:
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

/* ---- gpt-oss harmony (openai/gpt-oss-20b chat_template.jinja), no tools/tool_calls ---- */
static int has_channel_tags(const char *s) {
    return strstr(s, "<|channel|>analysis<|message|>") || strstr(s, "<|channel|>final<|message|>");
}

static enum ft_status render_harmony(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                     int n, const struct ft_chat_opts *o, struct chat_out *out) {
    char today[32];
    const char *date = o->date;
    if (!date) {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        strftime(today, sizeof today, "%Y-%m-%d", &tm);
        date = today;
    }
    co_put(out, "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
                "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: ");
    co_put(out, date);
    co_put(out, "\n\nReasoning: ");
    co_put(out, o->reasoning_effort ? o->reasoning_effort : "medium");
    co_put(out, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
                "every message.");
    if (t->harmony_v1)
        co_put(out, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    co_put(out, "<|end|>");
    if (m[0].role == FT_ROLE_SYSTEM) {
        if (*S(m[0].content)) {
            co_put(out, "<|start|>developer<|message|># Instructions\n\n");
            co_put(out, m[0].content);
            if (!t->harmony_v1) co_put(out, "\n\n");
            co_put(out, "<|end|>");
        }
        m++, n--;
    }
    for (int i = 0; i < n; i++) {
        const char *c = S(m[i].content);
        switch (m[i].role) {
        case FT_ROLE_ASSISTANT:
            if (has_channel_tags(c) || (m[i].reasoning && has_channel_tags(m[i].reasoning)))
                return ft_fail(FT_ERR_INVALID_ARG,
                               "chat template harmony: assistant message %d contains <|channel|> "
                               "tags; pass the analysis text as reasoning and the final text as "
                               "content",
                               i);
            if (i == n - 1 && !o->add_generation_prompt) {
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
            }
            break;
        case FT_ROLE_TOOL:
            return ft_fail(FT_ERR_INVALID_ARG,
                           "chat template harmony: tool message %d has no preceding assistant "
                           "tool call (assistant tool calls are not supported yet)",
                           i);
        case FT_ROLE_USER:
            co_put(out, "<|start|>user<|message|>");
            co_put(out, c);
            co_put(out, "<|end|>");
            break;
        case FT_ROLE_SYSTEM: break; /* a later system message is not rendered by the template */
        }
    }
    if (o->add_generation_prompt) co_put(out, "<|start|>assistant");
    return FT_OK;
}

int ft_chat_supports_tools(const struct ft_chat_template *t) {
    return t && (t->family == CHAT_QWEN2 || t->family == CHAT_QWEN3);
}

enum ft_status chat_render_family(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                  int n, const struct ft_chat_opts *o, struct chat_out *out) {
    int calls = 0;
    for (int i = 0; i < n; i++) calls |= m[i].n_tool_calls > 0;
    json_t *tools = tools_of(o);
    json_decref(tools);
    if ((tools || calls) && !ft_chat_supports_tools(t))
        return ft_fail(FT_ERR_UNSUPPORTED, "chat template %s: tools and assistant tool_calls are "
                       "not rendered for this family yet (they are for qwen2, qwen3); send the "
                       "request without tools, or start the server with --chat-template qwen2|qwen3 "
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
    case CHAT_N_FAMILIES: break;
    }
    return ft_fail(FT_ERR_INTERNAL, "chat render: bad family %d", (int)t->family);
}
