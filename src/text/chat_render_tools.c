/* chat_render_tools.c — the renderers of the families added for their tool calls: Llama 3.1/3.2/
 * 3.3 (JSON calls, "ipython" results), Qwen3-Coder (XML <function=...> calls), GLM-4.5/4.6/4.7
 * (<arg_key>/<arg_value> calls), MiniMax-M2 (<minimax:tool_call>) and Kimi-K2
 * (<|tool_calls_section_begin|>). Like chat_render.c, each function follows one real template
 * statement by statement (the templates are stored under tests/data/chat/{llama3_1,llama3_2,
 * qwen3_coder,glm4_6,glm4_7,minimax_m2,kimi_k2}; where they come from is in
 * tools/gen_chat_tool_refs.py), so the output equals transformers' apply_chat_template.
 * Called only by chat_render_family (chat_render.c); no shared state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "core/status.h"
#include "text/chat_impl.h"

#define S(x) ((x) ? (x) : "")

static json_t *tools_list(const struct ft_chat_opts *o) {
    json_t *t = o->tools_json ? json_loads(o->tools_json, 0, NULL) : NULL;
    if (json_is_array(t) && json_array_size(t)) return t;
    json_decref(t);
    return NULL;
}

/* A call's arguments as the mapping the templates iterate; NULL (and an error naming the
 * family) when the text is not a JSON object. */
static json_t *call_args(const char *family, const struct ft_chat_tool_call *c) {
    json_t *v = c->arguments && *c->arguments ? json_loads(c->arguments, 0, NULL) : json_object();
    if (json_is_object(v)) return v;
    json_decref(v);
    ft_fail(FT_ERR_INVALID_ARG, "chat template %s: tool call '%s': arguments must be a JSON "
            "object (got '%.40s')", family, S(c->name), S(c->arguments));
    return NULL;
}

static void put_trimmed(struct chat_out *out, const char *s) {
    size_t n = strlen(S(s));
    s = S(s);
    py_strip(&s, &n, 1, 1);
    co_putn(out, s, n);
}

/* A value the way `v | tojson if v is not string else v` writes it. */
static void put_value(struct chat_out *out, const json_t *v) {
    if (json_is_string(v)) co_putn(out, json_string_value(v), json_string_length(v));
    else co_pyjson(out, v);
}

/* Reasoning and answer of an assistant message: its reasoning field, else the text inside
 * <think>...</think> of the content (split on the first and last '</think>'); `strip_both`
 * strips '\n' on both sides of each part (MiniMax) instead of GLM's one-sided strips. */
static void split_reasoning(const struct ft_chat_msg *m, int strip_both, const char **r,
                            size_t *rn, const char **c, size_t *cn) {
    const char *content = S(m->content);
    *c = content, *cn = strlen(content);
    *r = m->reasoning ? m->reasoning : "", *rn = strlen(*r);
    if (m->reasoning || !strstr(content, "</think>")) return;
    const char *first = strstr(content, "</think>"), *last = first;
    for (const char *p = first; (p = strstr(p + 1, "</think>")) != NULL;) last = p;
    const char *a = content;
    size_t an = (size_t)(first - content);
    py_strip_char(&a, &an, '\n', strip_both, 1);
    for (size_t i = an; i-- > 0;) /* after the last '<think>' */
        if (an - i >= 7 && !memcmp(a + i, "<think>", 7)) {
            a += i + 7, an -= i + 7;
            break;
        }
    py_strip_char(&a, &an, '\n', 1, strip_both);
    *r = a, *rn = an;
    *c = last + 8, *cn = strlen(last + 8);
    py_strip_char(c, cn, '\n', 1, strip_both);
}

/* ---- Llama 3.1 / 3.3 (meta-llama/Llama-3.1-8B-Instruct) and 3.2 (Llama-3.2-3B-Instruct) ---- */

/* "Today Date: ": 3.1/3.3 write "26 Jul 2024"; 3.2 strftime_now("%d %b %Y") (o->date, as
 * YYYY-MM-DD, pins it; else today). */
static void llama31_date(const struct ft_chat_template *t, const struct ft_chat_opts *o,
                         struct chat_out *out) {
    if (!t->llama32) return co_put(out, "26 Jul 2024");
    struct tm tm = {0};
    char b[32];
    int y, mo, d;
    if (o->date && sscanf(o->date, "%d-%d-%d", &y, &mo, &d) == 3) {
        tm.tm_year = y - 1900, tm.tm_mon = mo - 1, tm.tm_mday = d;
    } else {
        time_t now = time(NULL);
        localtime_r(&now, &tm);
    }
    static const char *const k_mon[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    snprintf(b, sizeof b, "%02d %s %d", tm.tm_mday, k_mon[tm.tm_mon % 12], tm.tm_year + 1900);
    co_put(out, b);
}

enum ft_status chat_render_llama31(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                   int n, const struct ft_chat_opts *o, struct chat_out *out) {
    json_t *tools = tools_list(o);
    const char *sys = "";
    if (m[0].role == FT_ROLE_SYSTEM) sys = S(m[0].content), m++, n--;
    co_put(out, o->bos_token);
    co_put(out, "<|start_header_id|>system<|end_header_id|>\n\n");
    if (tools) co_put(out, "Environment: ipython\n");
    co_put(out, "Cutting Knowledge Date: December 2023\nToday Date: ");
    llama31_date(t, o, out);
    co_put(out, "\n\n");
    put_trimmed(out, sys);
    co_put(out, "<|eot_id|>");
    if (tools) { /* tools_in_user_message: the list goes before the first message's text */
        if (n == 0) {
            json_decref(tools);
            return ft_fail(FT_ERR_INVALID_ARG, "chat template llama3_1: the tools go into the "
                           "first user message, and there is none");
        }
        co_put(out, "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, "
                    "please respond with a JSON for a function call with its proper arguments "
                    "that best answers the given prompt.\n\nRespond in the format {\"name\": "
                    "function name, \"parameters\": dictionary of argument name and its value}."
                    "Do not use variables.\n\n");
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool) {
            co_pyjson_indent(out, tool, 4, 0);
            co_put(out, "\n\n");
        }
        json_decref(tools);
        put_trimmed(out, m[0].content);
        co_put(out, "<|eot_id|>");
        m++, n--;
    }
    for (int i = 0; i < n; i++) {
        if (m[i].n_tool_calls) {
            if (m[i].n_tool_calls != 1)
                return ft_fail(FT_ERR_INVALID_ARG, "chat template llama3_1: an assistant message "
                               "has %d tool calls; the template takes one per message (send "
                               "parallel_tool_calls false)", m[i].n_tool_calls);
            json_t *args = call_args("llama3_1", &m[i].tool_calls[0]);
            if (!args) return FT_ERR_INVALID_ARG;
            co_put(out, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
            co_put(out, m[i].tool_calls[0].name);
            co_put(out, "\", \"parameters\": ");
            co_pyjson(out, args);
            co_put(out, "}<|eot_id|>");
            json_decref(args);
        } else if (m[i].role == FT_ROLE_TOOL) {
            json_t *s = json_string(S(m[i].content)); /* a str is iterable: written by tojson */
            co_put(out, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            if (s) co_pyjson(out, s);
            co_put(out, "<|eot_id|>");
            json_decref(s);
        } else {
            co_put(out, "<|start_header_id|>");
            co_put(out, ft_chat_role_name(m[i].role));
            co_put(out, "<|end_header_id|>\n\n");
            put_trimmed(out, m[i].content);
            co_put(out, "<|eot_id|>");
        }
    }
    if (o->add_generation_prompt) co_put(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return FT_OK;
}

/* ---- Qwen3-Coder (Qwen/Qwen3-Coder-30B-A3B-Instruct) ---- */

/* macro render_extra_keys: every key but the handled ones as "\n<key>value</key>" (lists and
 * dicts as JSON, the rest as Python's str()). */
static void extra_keys(struct chat_out *out, const json_t *d, const char *const *handled) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)d, key, v) {
        int skip = 0;
        for (const char *const *h = handled; *h; h++) skip |= !strcmp(*h, key);
        if (skip) continue;
        co_put(out, "\n<"), co_put(out, key), co_put(out, ">");
        if (json_is_object(v) || json_is_array(v)) co_pyjson(out, v);
        else co_pystr(out, v);
        co_put(out, "</"), co_put(out, key), co_put(out, ">");
    }
}

static const char k_coder_format[] =
    "\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n"
    "</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: "
    "the tool calling block MUST begin with an opening <tool_call> tag and end with a closing "
    "</tool_call> tag.\n- Required parameters MUST be specified\n- You may provide optional "
    "reasoning for your function call in natural language BEFORE the function call, but NOT "
    "after\n- If there is no function call available, answer the question like normal with "
    "your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

static void coder_tools(struct chat_out *out, const json_t *tools) {
    static const char *const k_param_keys[] = {"name", "type", "description", NULL};
    static const char *const k_params_keys[] = {"type", "properties", NULL};
    static const char *const k_tool_keys[] = {"type", "name", "description", "parameters", NULL};
    size_t i;
    json_t *tool;
    co_put(out, "\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>");
    json_array_foreach((json_t *)tools, i, tool) {
        const json_t *f = json_object_get(tool, "function") ? json_object_get(tool, "function")
                                                            : tool;
        co_put(out, "\n<function>\n<name>");
        co_pystr(out, json_object_get(f, "name"));
        co_put(out, "</name>");
        const json_t *desc = json_object_get(f, "description");
        if (desc) {
            struct chat_out d = {0};
            co_pystr(&d, desc);
            co_putn(&d, "", 0);
            co_put(out, "\n<description>");
            put_trimmed(out, d.p);
            co_put(out, "</description>");
            free(d.p);
        }
        co_put(out, "\n<parameters>");
        const json_t *params = json_object_get(f, "parameters");
        const json_t *props = json_object_get(params, "properties");
        if (json_is_object(params) && json_is_object(props)) {
            const char *pn;
            json_t *pf;
            json_object_foreach((json_t *)props, pn, pf) {
                co_put(out, "\n<parameter>\n<name>"), co_put(out, pn), co_put(out, "</name>");
                if (json_object_get(pf, "type")) {
                    co_put(out, "\n<type>");
                    co_pystr(out, json_object_get(pf, "type"));
                    co_put(out, "</type>");
                }
                if (json_object_get(pf, "description")) {
                    struct chat_out d = {0};
                    co_pystr(&d, json_object_get(pf, "description"));
                    co_putn(&d, "", 0);
                    co_put(out, "\n<description>");
                    put_trimmed(out, d.p);
                    co_put(out, "</description>");
                    free(d.p);
                }
                if (json_is_object(pf)) extra_keys(out, pf, k_param_keys);
                co_put(out, "\n</parameter>");
            }
        }
        if (json_is_object(params)) extra_keys(out, params, k_params_keys);
        co_put(out, "\n</parameters>");
        if (json_is_object(f)) extra_keys(out, f, k_tool_keys);
        co_put(out, "\n</function>");
    }
    co_put(out, "\n</tools>");
    co_put(out, k_coder_format);
}

enum ft_status chat_render_qwen3_coder(const struct ft_chat_msg *m, int n,
                                       const struct ft_chat_opts *o, struct chat_out *out) {
    json_t *tools = tools_list(o);
    const int has_sys = m[0].role == FT_ROLE_SYSTEM;
    if (has_sys || tools) {
        co_put(out, "<|im_start|>system\n");
        co_put(out, has_sys ? S(m[0].content) : "You are Qwen, a helpful AI assistant that can "
                                                "interact with a computer to solve tasks.");
        if (tools) coder_tools(out, tools);
        co_put(out, "<|im_end|>\n");
    }
    json_decref(tools);
    if (has_sys) m++, n--;
    for (int i = 0; i < n; i++) {
        const struct ft_chat_msg *msg = &m[i];
        if (msg->role == FT_ROLE_ASSISTANT && msg->n_tool_calls) {
            co_put(out, "<|im_start|>assistant");
            const char *c = S(msg->content);
            size_t cn = strlen(c);
            py_strip(&c, &cn, 1, 1);
            if (cn) co_put(out, "\n"), co_putn(out, c, cn), co_put(out, "\n");
            for (int k = 0; k < msg->n_tool_calls; k++) {
                json_t *args = call_args("qwen3_coder", &msg->tool_calls[k]), *v;
                if (!args) return FT_ERR_INVALID_ARG;
                const char *key;
                co_put(out, "\n<tool_call>\n<function=");
                co_put(out, msg->tool_calls[k].name);
                co_put(out, ">\n");
                json_object_foreach(args, key, v) {
                    co_put(out, "<parameter="), co_put(out, key), co_put(out, ">\n");
                    if (json_is_object(v) || json_is_array(v)) co_pyjson(out, v);
                    else co_pystr(out, v);
                    co_put(out, "\n</parameter>\n");
                }
                co_put(out, "</function>\n</tool_call>");
                json_decref(args);
            }
            co_put(out, "<|im_end|>\n");
        } else if (msg->role == FT_ROLE_TOOL) {
            /* `loop.previtem and ...`: the first message has no previous one, so no header */
            if (i > 0 && m[i - 1].role != FT_ROLE_TOOL) co_put(out, "<|im_start|>user\n");
            co_put(out, "<tool_response>\n");
            co_put(out, msg->content);
            co_put(out, "\n</tool_response>\n");
            if (i == n - 1 || m[i + 1].role != FT_ROLE_TOOL) co_put(out, "<|im_end|>\n");
        } else {
            co_put(out, "<|im_start|>");
            co_put(out, ft_chat_role_name(msg->role));
            co_put(out, "\n");
            co_put(out, msg->content);
            co_put(out, "<|im_end|>\n");
        }
    }
    if (o->add_generation_prompt) co_put(out, "<|im_start|>assistant\n");
    return FT_OK;
}

/* ---- GLM-4.5/4.6 (zai-org/GLM-4.6) and GLM-4.7 (zai-org/GLM-4.7-Flash) ---- */

static const char k_glm_tools_tail46[] =
    "</tools>\n\nFor each function call, output the function name and arguments within the "
    "following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
    "<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n"
    "<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>";
static const char k_glm_tools_tail47[] =
    "</tools>\n\nFor each function call, output the function name and arguments within the "
    "following XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key>"
    "<arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key>"
    "<arg_value>{arg-value-2}</arg_value>...</tool_call>";

static int ends_with(const char *s, const char *p) {
    size_t n = strlen(s), k = strlen(p);
    return n >= k && !memcmp(s + n - k, p, k);
}

static enum ft_status glm_calls(const struct ft_chat_msg *msg, int nl, struct chat_out *out) {
    for (int k = 0; k < msg->n_tool_calls; k++) {
        json_t *args = call_args("glm4", &msg->tool_calls[k]), *v;
        if (!args) return FT_ERR_INVALID_ARG;
        const char *key;
        co_put(out, nl ? "\n<tool_call>" : "<tool_call>");
        co_put(out, msg->tool_calls[k].name);
        if (nl) co_put(out, "\n");
        json_object_foreach(args, key, v) {
            co_put(out, "<arg_key>"), co_put(out, key), co_put(out, "</arg_key>");
            co_put(out, nl ? "\n<arg_value>" : "<arg_value>");
            put_value(out, v);
            co_put(out, nl ? "</arg_value>\n" : "</arg_value>");
        }
        co_put(out, "</tool_call>");
        json_decref(args);
    }
    return FT_OK;
}

enum ft_status chat_render_glm4(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                int n, const struct ft_chat_opts *o, struct chat_out *out) {
    const int nl = !t->glm47; /* 4.5/4.6 put each part of a turn on its own line */
    json_t *tools = tools_list(o);
    co_put(out, "[gMASK]<sop>");
    if (tools) {
        size_t i;
        json_t *tool;
        co_put(out, "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the "
                    "user query.\n\nYou are provided with function signatures within "
                    "<tools></tools> XML tags:\n<tools>\n");
        json_array_foreach(tools, i, tool) {
            co_pyjson(out, tool);
            co_put(out, "\n");
        }
        co_put(out, nl ? k_glm_tools_tail46 : k_glm_tools_tail47);
        json_decref(tools);
    }
    int last_user = -1;
    for (int i = 0; i < n; i++)
        if (m[i].role == FT_ROLE_USER) last_user = i;
    for (int i = 0; i < n; i++) {
        const struct ft_chat_msg *msg = &m[i];
        switch (msg->role) {
        case FT_ROLE_USER:
            co_put(out, nl ? "<|user|>\n" : "<|user|>");
            co_put(out, msg->content);
            if (nl && o->enable_thinking == 0 && !ends_with(S(msg->content), "/nothink"))
                co_put(out, "/nothink");
            break;
        case FT_ROLE_ASSISTANT: {
            const char *r, *c;
            size_t rn, cn;
            split_reasoning(msg, 0, &r, &rn, &c, &cn);
            co_put(out, "<|assistant|>");
            if (i > last_user && rn) {
                py_strip(&r, &rn, 1, 1);
                co_put(out, nl ? "\n<think>" : "<think>");
                co_putn(out, r, rn);
                co_put(out, "</think>");
            } else {
                co_put(out, nl ? "\n<think></think>" : "</think>");
            }
            py_strip(&c, &cn, 1, 1);
            if (cn) {
                if (nl) co_put(out, "\n");
                co_putn(out, c, cn);
            }
            enum ft_status st = glm_calls(msg, nl, out);
            if (st != FT_OK) return st;
            break;
        }
        case FT_ROLE_TOOL:
            if (i == 0 || m[i - 1].role != FT_ROLE_TOOL) co_put(out, "<|observation|>");
            co_put(out, nl ? "\n<tool_response>\n" : "<tool_response>");
            co_put(out, msg->content);
            co_put(out, nl ? "\n</tool_response>" : "</tool_response>");
            break;
        case FT_ROLE_SYSTEM:
            co_put(out, nl ? "<|system|>\n" : "<|system|>");
            co_put(out, msg->content);
            break;
        }
    }
    if (o->add_generation_prompt) {
        co_put(out, "<|assistant|>");
        if (nl && o->enable_thinking == 0) co_put(out, "\n<think></think>");
        if (!nl) co_put(out, o->enable_thinking == 0 ? "</think>" : "<think>");
    }
    return FT_OK;
}

/* ---- MiniMax-M2 (MiniMaxAI/MiniMax-M2) ---- */

static const char k_minimax_tools_tail[] =
    "</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass parameters:\n"
    "\n<minimax:tool_call>\n<invoke name=\"tool-name-1\">\n<parameter name=\"param-key-1\">"
    "param-value-1</parameter>\n<parameter name=\"param-key-2\">param-value-2</parameter>\n...\n"
    "</invoke>\n</minimax:tool_call>";

enum ft_status chat_render_minimax(const struct ft_chat_msg *m, int n,
                                   const struct ft_chat_opts *o, struct chat_out *out) {
    json_t *tools = tools_list(o);
    const char *sys = m[0].role == FT_ROLE_SYSTEM ? S(m[0].content) : "";
    if (m[0].role == FT_ROLE_SYSTEM) m++, n--;
    co_put(out, "]~!b[]~b]system\n");
    co_put(out, *sys ? sys : "You are a helpful assistant.");
    if (tools) {
        size_t i;
        json_t *tool;
        co_put(out, "\n\n# Tools\nYou may call one or more tools to assist with the user query.\n"
                    "Here are the tools available in JSONSchema format:\n\n<tools>\n");
        json_array_foreach(tools, i, tool) {
            const json_t *f = json_object_get(tool, "function");
            co_put(out, "<tool>");
            co_pyjson(out, f ? f : tool);
            co_put(out, "</tool>\n");
        }
        co_put(out, k_minimax_tools_tail);
        json_decref(tools);
    }
    co_put(out, "[e~[\n");
    int last_user = -1;
    for (int i = 0; i < n; i++)
        if (m[i].role == FT_ROLE_USER) last_user = i;
    int last_call = 0; /* the previous assistant message made calls */
    for (int i = 0; i < n; i++) {
        const struct ft_chat_msg *msg = &m[i];
        if (msg->role == FT_ROLE_ASSISTANT) {
            const char *r, *c;
            size_t rn, cn;
            split_reasoning(msg, 1, &r, &rn, &c, &cn);
            co_put(out, "]~b]ai\n");
            if (rn && i > last_user) {
                co_put(out, "<think>\n");
                co_putn(out, r, rn);
                co_put(out, "\n</think>\n\n");
            }
            co_putn(out, c, cn);
            if (msg->n_tool_calls) {
                co_put(out, "\n<minimax:tool_call>\n");
                for (int k = 0; k < msg->n_tool_calls; k++) {
                    json_t *args = call_args("minimax", &msg->tool_calls[k]), *v;
                    if (!args) return FT_ERR_INVALID_ARG;
                    const char *key;
                    co_put(out, "<invoke name=\"");
                    co_put(out, msg->tool_calls[k].name);
                    co_put(out, "\">\n");
                    json_object_foreach(args, key, v) {
                        co_put(out, "<parameter name=\""), co_put(out, key), co_put(out, "\">");
                        put_value(out, v);
                        co_put(out, "</parameter>\n");
                    }
                    co_put(out, "</invoke>\n");
                    json_decref(args);
                }
                co_put(out, "</minimax:tool_call>");
            }
            last_call = msg->n_tool_calls > 0;
            co_put(out, "[e~[\n");
        } else if (msg->role == FT_ROLE_TOOL) {
            if (!last_call)
                return ft_fail(FT_ERR_INVALID_ARG, "chat template minimax: tool message %d has "
                               "no preceding assistant message with a tool call", i);
            if (i == 0 || m[i - 1].role != FT_ROLE_TOOL) co_put(out, "]~b]tool");
            co_put(out, "\n<response>");
            co_put(out, msg->content);
            co_put(out, "</response>");
            if (i == n - 1 || m[i + 1].role != FT_ROLE_TOOL) co_put(out, "[e~[\n");
        } else if (msg->role == FT_ROLE_USER) {
            co_put(out, "]~b]user\n");
            co_put(out, msg->content);
            co_put(out, "[e~[\n");
        } /* a later system message is not written by the template */
    }
    if (o->add_generation_prompt) co_put(out, "]~b]ai\n<think>\n");
    return FT_OK;
}

/* ---- Kimi-K2 (moonshotai/Kimi-K2-Instruct, tests/data/chat/kimi_k2/chat_template.jinja) ---- */

#define KIMI_SYS "<|im_system|>"
#define KIMI_MID "<|im_middle|>"
#define KIMI_END "<|im_end|>"

/* A turn's header: <|im_user|> / <|im_assistant|> / <|im_system|> (system and tool) and the
 * role name, `message.get('name') or message['role']`. A tool message's name field holds its
 * tool_call_id (chat.h), so a tool turn is always named "tool". */
static void kimi_header(struct chat_out *out, const struct ft_chat_msg *msg) {
    const char *name = msg->role != FT_ROLE_TOOL && msg->name && *msg->name
                           ? msg->name : ft_chat_role_name(msg->role);
    co_put(out, msg->role == FT_ROLE_USER        ? "<|im_user|>"
                : msg->role == FT_ROLE_ASSISTANT ? "<|im_assistant|>"
                                                 : KIMI_SYS);
    co_put(out, name);
    co_put(out, KIMI_MID);
}

enum ft_status chat_render_kimi(const struct ft_chat_msg *m, int n, const struct ft_chat_opts *o,
                                struct chat_out *out) {
    json_t *tools = tools_list(o);
    if (tools) { /* the template's text between the tags is kept as indented there */
        co_put(out, KIMI_SYS "tool_declare" KIMI_MID "\n  # Tools\n  ");
        co_pyjson(out, tools);
        co_put(out, KIMI_END);
        json_decref(tools);
    }
    if (m[0].role != FT_ROLE_SYSTEM)
        co_put(out, KIMI_SYS "system" KIMI_MID
                    "You are Kimi, an AI assistant created by Moonshot AI." KIMI_END);
    for (int i = 0; i < n; i++) {
        const struct ft_chat_msg *msg = &m[i];
        kimi_header(out, msg);
        if (msg->role == FT_ROLE_ASSISTANT && msg->n_tool_calls) {
            co_put(out, msg->content);
            co_put(out, "<|tool_calls_section_begin|>");
            for (int k = 0; k < msg->n_tool_calls; k++) {
                /* arguments arrive as text: `is string`, written as they are */
                co_put(out, "<|tool_call_begin|>");
                co_put(out, msg->tool_calls[k].id);
                co_put(out, "<|tool_call_argument_begin|>");
                co_put(out, msg->tool_calls[k].arguments);
                co_put(out, "<|tool_call_end|>");
            }
            co_put(out, "<|tool_calls_section_end|>");
        } else if (msg->role == FT_ROLE_TOOL) {
            co_put(out, "## Return of ");
            co_put(out, msg->name);
            co_put(out, "\n    "); /* the indent of the template's next line */
            co_put(out, msg->content);
        } else {
            co_put(out, msg->content);
        }
        co_put(out, KIMI_END);
    }
    if (o->add_generation_prompt) co_put(out, "<|im_assistant|>assistant" KIMI_MID);
    return FT_OK;
}
