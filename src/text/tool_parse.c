/* tool_parse.c — tool-call parsers for the families' output formats (tool_parse.h): a streaming
 * splitter that holds call blocks (from their start marker to their end marker, or to the end of
 * the text), and one body parser per format turning a block into calls. */
#include "text/tool_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DS_BAR "\xef\xbd\x9c" /* ｜ */
#define DS_SEP "\xe2\x96\x81" /* ▁ */
#define DS_CALLS_BEGIN "<" DS_BAR "tool" DS_SEP "calls" DS_SEP "begin" DS_BAR ">"
#define DS_CALLS_END "<" DS_BAR "tool" DS_SEP "calls" DS_SEP "end" DS_BAR ">"
#define DS_CALL_BEGIN "<" DS_BAR "tool" DS_SEP "call" DS_SEP "begin" DS_BAR ">"
#define DS_CALL_END "<" DS_BAR "tool" DS_SEP "call" DS_SEP "end" DS_BAR ">"
#define DS_TOOL_SEP "<" DS_BAR "tool" DS_SEP "sep" DS_BAR ">"
#define KM_CALLS_BEGIN "<|tool_calls_section_begin|>"
#define KM_CALLS_END "<|tool_calls_section_end|>"
#define KM_CALL_BEGIN "<|tool_call_begin|>"
#define KM_ARGS_BEGIN "<|tool_call_argument_begin|>"
#define KM_CALL_END "<|tool_call_end|>"

struct fmt_desc {
    const char *name;
    const char *start, *end; /* end NULL: the block runs to the end of the text */
    const char *const *markers;
};

static const char *const k_m_hermes[] = {"<tool_call>", "</tool_call>", NULL};
static const char *const k_m_llama3[] = {"<|python_tag|>", NULL};
static const char *const k_m_mistral[] = {"[TOOL_CALLS]", "[ARGS]", NULL};
static const char *const k_m_deepseek[] = {DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN,
                                           DS_CALL_END, DS_TOOL_SEP, NULL};
static const char *const k_m_glm[] = {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                                      "<arg_value>", "</arg_value>", NULL};
static const char *const k_m_minimax[] = {"<minimax:tool_call>", "</minimax:tool_call>", NULL};
static const char *const k_m_harmony[] = {"<|start|>", "<|channel|>", "<|constrain|>",
                                          "<|message|>", "<|call|>", NULL};
static const char *const k_m_kimi[] = {KM_CALLS_BEGIN, KM_CALLS_END, KM_CALL_BEGIN, KM_ARGS_BEGIN,
                                       KM_CALL_END, NULL};
static const char *const k_m_none[] = {NULL};

static const struct fmt_desc k_fmts[FT_TOOLS_N] = {
    [FT_TOOLS_NONE] = {"none", NULL, NULL, k_m_none},
    [FT_TOOLS_HERMES] = {"hermes", "<tool_call>", "</tool_call>", k_m_hermes},
    [FT_TOOLS_QWEN3_CODER] = {"qwen3_coder", "<tool_call>", "</tool_call>", k_m_hermes},
    [FT_TOOLS_LLAMA3] = {"llama3", "<|python_tag|>", NULL, k_m_llama3},
    [FT_TOOLS_MISTRAL] = {"mistral", "[TOOL_CALLS]", NULL, k_m_mistral},
    [FT_TOOLS_DEEPSEEK] = {"deepseek", DS_CALLS_BEGIN, DS_CALLS_END, k_m_deepseek},
    [FT_TOOLS_GLM] = {"glm", "<tool_call>", "</tool_call>", k_m_glm},
    [FT_TOOLS_MINIMAX] = {"minimax", "<minimax:tool_call>", "</minimax:tool_call>", k_m_minimax},
    [FT_TOOLS_HARMONY] = {"harmony", "<|start|>assistant", "<|call|>", k_m_harmony},
    [FT_TOOLS_KIMI] = {"kimi_k2", KM_CALLS_BEGIN, KM_CALLS_END, k_m_kimi},
};

/* The grammars forcing calls (json_grammar.h), as each family's template writes them; forbid:
 * the texts at which the body parser below (or the block splitter) would cut a value short. */
static const char *const k_f_hermes[] = {"</tool_call>", NULL};
static const char *const k_f_coder[] = {"</parameter>", "<parameter=", "</function>",
                                        "</tool_call>", NULL};
static const char *const k_f_glm[] = {"</arg_value>", "</tool_call>", NULL};
static const char *const k_f_minimax[] = {"</parameter>", "</invoke>", "</minimax:tool_call>", NULL};
static const char *const k_f_deepseek[] = {"```", DS_CALL_END, DS_CALLS_END, NULL};
/* the harmony splitter (server/sse.c) ends a message body at these */
static const char *const k_f_harmony[] = {"<|end|>", "<|return|>", "<|call|>", NULL};
static const char *const k_f_kimi[] = {KM_CALL_END, KM_CALLS_END, NULL};

static const struct ft_jg_calls_fmt k_g_hermes = {
    .name = "hermes", .open = "<tool_call>\n", .sep = "\n</tool_call>\n<tool_call>\n",
    .close = "\n</tool_call>", .close_alt = "\n</tool_call>\n", .args_key = "arguments",
    .forbid = k_f_hermes};
static const struct ft_jg_calls_fmt k_g_llama3 = {.name = "llama3", .open = "", .sep = "; ",
                                                  .close = "", .args_key = "parameters"};
static const struct ft_jg_calls_fmt k_g_mistral = {.name = "mistral", .open = "[TOOL_CALLS][",
                                                   .sep = ", ", .close = "]",
                                                   .args_key = "arguments"};
/* <tool_call>\n<function=N>\n<parameter=P>\nV\n</parameter>\n</function>\n</tool_call> */
static const struct ft_jg_calls_fmt k_g_coder = {
    .name = "qwen3_coder", .open = "<tool_call>\n<function=",
    .sep = "\n</tool_call>\n<tool_call>\n<function=", .close = "\n</tool_call>",
    .kind = FT_JG_CALLS_XML, .name_end = ">\n", .call_end = "</function>",
    .param_open = "<parameter=", .param_name_end = ">\n", .value_end = "\n</parameter>",
    .param_end = "\n", .forbid = k_f_coder};
/* GLM-4.5/4.6: <tool_call>N\n<arg_key>P</arg_key>\n<arg_value>V</arg_value>\n</tool_call> */
static const struct ft_jg_calls_fmt k_g_glm = {
    .name = "glm", .open = "<tool_call>", .sep = "\n<tool_call>", .close = "",
    .kind = FT_JG_CALLS_XML, .name_end = "\n", .call_end = "</tool_call>",
    .param_open = "<arg_key>", .param_name_end = "</arg_key>\n<arg_value>",
    .value_end = "</arg_value>", .param_end = "\n", .forbid = k_f_glm};
/* <minimax:tool_call>\n<invoke name="N">\n<parameter name="P">V</parameter>\n</invoke>\n
 * </minimax:tool_call> (the parser trims a '\n' around values: they neither begin nor end
 * with one) */
static const struct ft_jg_calls_fmt k_g_minimax = {
    .name = "minimax", .open = "<minimax:tool_call>\n<invoke name=\"",
    .sep = "<invoke name=\"", .close = "</minimax:tool_call>", .kind = FT_JG_CALLS_XML,
    .name_end = "\">\n", .call_end = "</invoke>\n", .param_open = "<parameter name=\"",
    .param_name_end = "\">", .value_end = "</parameter>", .param_end = "\n", .value_no_nl = 1,
    .forbid = k_f_minimax};
/* V3's template: calls begin, call begin, "function", sep, N, a fenced JSON block, call end */
static const struct ft_jg_calls_fmt k_g_deepseek = {
    .name = "deepseek", .open = DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_TOOL_SEP,
    .sep = "\n" DS_CALL_BEGIN "function" DS_TOOL_SEP, .close = DS_CALLS_END,
    .kind = FT_JG_CALLS_TAGGED, .name_end = "\n```json\n", .call_end = "\n```" DS_CALL_END,
    .forbid = k_f_deepseek};
/* gpt-oss after the prompt's "<|start|>assistant": one message to the function, its JSON body
 * ended by the <|call|> stop token (the splitter adds it back) */
static const struct ft_jg_calls_fmt k_g_harmony = {
    .name = "harmony", .open = "<|channel|>commentary to=functions.", .close = "",
    .kind = FT_JG_CALLS_TAGGED, .name_end = " <|constrain|>json<|message|>", .call_end = "",
    .forbid = k_f_harmony};

/* Kimi-K2: section begin, then per call its begin marker, the id functions.N:IDX, the argument
 * marker, the JSON object and the call's end marker. A grammar cannot count, so every forced
 * call is numbered 0 (the parser reads the name; the index only makes the id). */
static const struct ft_jg_calls_fmt k_g_kimi = {
    .name = "kimi_k2", .open = KM_CALLS_BEGIN KM_CALL_BEGIN "functions.",
    .sep = KM_CALL_BEGIN "functions.", .close = KM_CALLS_END, .kind = FT_JG_CALLS_TAGGED,
    .name_end = ":0" KM_ARGS_BEGIN, .call_end = KM_CALL_END, .forbid = k_f_kimi};

const char *ft_tool_fmt_name(enum ft_tool_fmt f) {
    return f >= 0 && f < FT_TOOLS_N ? k_fmts[f].name : "?";
}

int ft_tool_fmt_from_name(const char *name) {
    for (int i = 0; i < FT_TOOLS_N; i++)
        if (name && !strcmp(name, k_fmts[i].name)) return i;
    return -1;
}

const char *ft_tool_fmt_names(void) {
    return "hermes, qwen3_coder, llama3, mistral, deepseek, glm, minimax, harmony, kimi_k2, none";
}

enum ft_tool_fmt ft_tool_fmt_detect(const char *src) {
    if (!src) return FT_TOOLS_NONE;
    if (strstr(src, "<|call|>") && strstr(src, "<|channel|>") && strstr(src, "assistant to="))
        return FT_TOOLS_HARMONY; /* gpt-oss: "<|start|>assistant to=" + "functions." + name */
    if (strstr(src, KM_CALLS_BEGIN)) return FT_TOOLS_KIMI;
    if (strstr(src, "<minimax:tool_call>")) return FT_TOOLS_MINIMAX;
    if (strstr(src, "<arg_key>")) return FT_TOOLS_GLM;
    if (strstr(src, "<function=") && strstr(src, "<parameter=")) return FT_TOOLS_QWEN3_CODER;
    if (strstr(src, "<tool_call>")) return FT_TOOLS_HERMES;
    if (strstr(src, "tool" DS_SEP "calls" DS_SEP "begin")) return FT_TOOLS_DEEPSEEK;
    if (strstr(src, "[TOOL_CALLS]")) return FT_TOOLS_MISTRAL;
    if (strstr(src, "<|python_tag|>") || strstr(src, "\"parameters\": ")) return FT_TOOLS_LLAMA3;
    return FT_TOOLS_NONE;
}

enum ft_tool_fmt ft_tool_fmt_of_family(const char *family) {
    static const struct { const char *family; enum ft_tool_fmt fmt; } k_map[] = {
        {"qwen2", FT_TOOLS_HERMES},       {"qwen3", FT_TOOLS_HERMES},
        {"qwen3_coder", FT_TOOLS_QWEN3_CODER}, {"llama3_1", FT_TOOLS_LLAMA3},
        {"mistral", FT_TOOLS_MISTRAL},    {"deepseek3", FT_TOOLS_DEEPSEEK},
        {"glm4", FT_TOOLS_GLM},           {"minimax", FT_TOOLS_MINIMAX},
        {"harmony", FT_TOOLS_HARMONY},    {"kimi_k2", FT_TOOLS_KIMI},
    };
    for (size_t i = 0; family && i < sizeof k_map / sizeof k_map[0]; i++)
        if (!strcmp(family, k_map[i].family)) return k_map[i].fmt;
    return FT_TOOLS_NONE;
}

const struct ft_jg_calls_fmt *ft_tool_fmt_grammar(enum ft_tool_fmt f) {
    switch (f) {
    case FT_TOOLS_HERMES: return &k_g_hermes;
    case FT_TOOLS_LLAMA3: return &k_g_llama3;
    case FT_TOOLS_MISTRAL: return &k_g_mistral;
    case FT_TOOLS_QWEN3_CODER: return &k_g_coder;
    case FT_TOOLS_GLM: return &k_g_glm;
    case FT_TOOLS_MINIMAX: return &k_g_minimax;
    case FT_TOOLS_DEEPSEEK: return &k_g_deepseek;
    case FT_TOOLS_HARMONY: return &k_g_harmony;
    case FT_TOOLS_KIMI: return &k_g_kimi;
    default: return NULL;
    }
}

const char *const *ft_tool_fmt_markers(enum ft_tool_fmt f) {
    return f >= 0 && f < FT_TOOLS_N ? k_fmts[f].markers : k_m_none;
}

/* ---------------------------------------------------------------- buffers */

static void put(struct ft_tool_parser *p, char **b, size_t *n, size_t *cap, const char *s,
                size_t k) {
    if (p->oom || !k) return;
    if (*n + k + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n + k + 1) c *= 2;
        char *q = realloc(*b, c);
        if (!q) {
            p->oom = 1;
            return;
        }
        *b = q, *cap = c;
    }
    memcpy(*b + *n, s, k);
    *n += k;
    (*b)[*n] = 0;
}

static void emit(struct ft_tool_parser *p, const char *s, size_t k) {
    put(p, &p->out, &p->n_out, &p->cap_out, s, k);
    for (size_t i = 0; i < k && !p->seen_text; i++)
        p->seen_text = s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r';
}

/* A parsed call; id: the id the model wrote (NULL: none). */
static void add_call_id(struct ft_tool_parser *p, const char *id, const char *name,
                        json_t *args) {
    if (p->n_calls == p->cap_calls) {
        int c = p->cap_calls ? p->cap_calls * 2 : 4;
        struct ft_tool_call *q = realloc(p->calls, (size_t)c * sizeof *q);
        if (!q) {
            p->oom = 1;
            return;
        }
        p->calls = q, p->cap_calls = c;
    }
    /* the text streamed for this call (tool_parse.h), when it reads as the same value */
    const int k = p->n_calls - p->live_base;
    char *a = NULL;
    if (k >= 0 && k < p->n_live && p->live[k].args_done && !p->live[k].no_stream) {
        json_t *v = json_loadb(p->live[k].args, p->live[k].n_args, 0, NULL);
        if (v && json_equal(v, args)) a = strdup(p->live[k].args);
        json_decref(v);
    }
    if (!a) a = json_dumps(args, JSON_COMPACT);
    char *n = strdup(name), *d = id ? strdup(id) : NULL;
    if (!a || !n || (id && !d)) {
        free(a), free(n), free(d);
        p->oom = 1;
        return;
    }
    p->calls[p->n_calls++] = (struct ft_tool_call){n, a, p->live_index + k, d};
}

static void add_call(struct ft_tool_parser *p, const char *name, json_t *args) {
    add_call_id(p, NULL, name, args);
}

/* ---------------------------------------------------------------- body parsers */

static const char *skip_ws(const char *s, const char *e) {
    while (s < e && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')) s++;
    return s;
}

static const char *rskip_ws(const char *s, const char *e) {
    while (e > s && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\t' || e[-1] == '\r')) e--;
    return e;
}

static const char *find(const char *s, const char *e, const char *needle) {
    size_t k = strlen(needle);
    for (; s + k <= e; s++)
        if (!memcmp(s, needle, k)) return s;
    return NULL;
}

/* The arguments of a JSON call object: an object, or a string holding one. */
static json_t *call_args(json_t *o, const char *key) {
    json_t *a = json_object_get(o, key);
    if (!a) return json_object();
    if (json_is_object(a)) return json_incref(a);
    if (json_is_string(a)) {
        json_t *v = json_loads(json_string_value(a), 0, NULL);
        if (json_is_object(v)) return v;
        json_decref(v);
    }
    return NULL;
}

/* {"name": ..., "arguments"|"parameters": ...} -> a call; 0 or -1. */
static int json_call(struct ft_tool_parser *p, json_t *o) {
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!json_is_object(o) || !name || !*name) return -1;
    json_t *args = call_args(o, json_object_get(o, "arguments") ? "arguments" : "parameters");
    if (!args) return -1;
    add_call(p, name, args);
    json_decref(args);
    return 0;
}

/* Calls from a JSON object or a list of them. */
static int json_calls(struct ft_tool_parser *p, const char *s, const char *e) {
    json_error_t err;
    json_t *v = json_loadb(s, (size_t)(e - s), 0, &err);
    int rc = -1;
    if (json_is_object(v)) rc = json_call(p, v);
    else if (json_is_array(v) && json_array_size(v)) {
        size_t i;
        json_t *o;
        rc = 0;
        json_array_foreach(v, i, o) rc |= json_call(p, o);
    }
    json_decref(v);
    return rc;
}

/* The JSON type the tool's schema gives parameter param of function fn ("" when unknown). */
static const char *param_type(const json_t *tools, const char *fn, const char *param) {
    size_t i;
    json_t *t;
    json_array_foreach((json_t *)tools, i, t) {
        json_t *f = json_object_get(t, "function");
        if (!f) f = t;
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || strcmp(name, fn)) continue;
        json_t *params = json_object_get(f, "parameters");
        if (!params) params = json_object_get(f, "input_schema");
        return ft_jg_prop_type(params, param); /* the grammar writes values by the same rule */
    }
    return "";
}

/* The length of the valid UTF-8 sequence at s[0..n) (1 to 4; the rules jansson checks: no
 * overlong forms, surrogates or code points past U+10FFFF); 0 when none starts there; -1 when
 * the n bytes are a valid start too short to tell. */
static int utf8_seq(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    unsigned lo = 0x80, hi = 0xbf;
    int k;
    if (c < 0x80) return 1;
    if (c < 0xc2) return 0;
    if (c < 0xe0) k = 2;
    else if (c < 0xf0) k = 3, lo = c == 0xe0 ? 0xa0 : lo, hi = c == 0xed ? 0x9f : hi;
    else if (c < 0xf5) k = 4, lo = c == 0xf0 ? 0x90 : lo, hi = c == 0xf4 ? 0x8f : hi;
    else return 0;
    for (int i = 1; i < k; i++) {
        if ((size_t)i >= n) return -1;
        if (s[i] < (i == 1 ? lo : 0x80u) || s[i] > (i == 1 ? hi : 0xbfu)) return 0;
    }
    return k;
}

#define FFFD "\xef\xbf\xbd"

/* Raw parameter text as a valid UTF-8 C string (*m bytes): a NUL byte would leave as \u0000,
 * which strict JSON readers (and ours) refuse, and a byte that is not UTF-8 cannot be a JSON
 * string at all: each becomes U+FFFD. The live scanner below writes values by the same rule. */
static char *clean_text(const char *s, size_t n, size_t *m) {
    char *c = malloc(3 * n + 1);
    if (!c) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        int k = s[i] ? utf8_seq((const unsigned char *)s + i, n - i) : 0;
        if (k <= 0) memcpy(c + j, FFFD, 3), j += 3, i++;
        else memcpy(c + j, s + i, (size_t)k), j += (size_t)k, i += (size_t)k;
    }
    c[j] = 0;
    *m = j;
    return c;
}

/* A parameter's text as JSON: a string for "string" (or unknown) properties; parsed for others
 * when it parses. */
static json_t *typed_value(const json_t *tools, const char *fn, const char *param, const char *s,
                           size_t n) {
    const char *ty = param_type(tools, fn, param);
    if (*ty && strcmp(ty, "string")) {
        json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
        if (v) return v;
        if (!strcmp(ty, "boolean") && (n == 4 || n == 5)) /* Python-style True/False */
            return json_boolean(!memcmp(s, "True", n) || !memcmp(s, "true", n));
    }
    size_t m;
    char *c = clean_text(s, n, &m);
    json_t *v = c ? json_stringn(c, m) : NULL;
    free(c);
    return v;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

/* One leading and one trailing newline off (the XML formats put values on their own lines). */
static void trim_nl(const char **s, const char **e) {
    if (*s < *e && **s == '\n') (*s)++;
    if (*e > *s && (*e)[-1] == '\n') (*e)--;
}

static int set_param(struct ft_tool_parser *p, json_t *args, const char *fn, const char *k,
                     const char *ke, const char *v, const char *ve) {
    size_t m;
    char *key = clean_text(k, (size_t)(ke - k), &m);
    json_t *val = key ? typed_value(p->tools, fn, key, v, (size_t)(ve - v)) : NULL;
    int rc = val && !json_object_set_new(args, key, val) ? 0 : -1;
    free(key);
    if (rc) p->oom = 1;
    return rc;
}

/* <function=N>\n<parameter=P>\nV\n</parameter>...</function> */
static int qwen3_coder_body(struct ft_tool_parser *p, const char *s, const char *e) {
    const char *f = find(s, e, "<function=");
    if (!f) return -1;
    const char *ne = find(f, e, ">");
    if (!ne) return -1;
    char *fn = dupn(f + 10, (size_t)(ne - f - 10));
    json_t *args = json_object();
    int rc = fn && args ? 0 : -1;
    const char *fend = find(ne, e, "</function>");
    if (!fend) fend = e;
    for (const char *q = ne; rc == 0 && (q = find(q, fend, "<parameter=")) != NULL;) {
        const char *ke = find(q, fend, ">");
        if (!ke) break;
        const char *v = ke + 1, *ve = find(v, fend, "</parameter>");
        const char *next = find(v, fend, "<parameter=");
        if (!ve || (next && next < ve)) ve = next ? next : fend;
        const char *vs = v;
        trim_nl(&vs, &ve);
        rc = set_param(p, args, fn, q + 11, ke, vs, ve);
        q = ve;
    }
    if (rc == 0) add_call(p, fn, args);
    free(fn);
    json_decref(args);
    return rc;
}

/* N\n<arg_key>P</arg_key>\n<arg_value>V</arg_value>... */
static int glm_body(struct ft_tool_parser *p, const char *s, const char *e) {
    s = skip_ws(s, e);
    const char *ne = find(s, e, "<arg_key>");
    const char *nend = rskip_ws(s, ne ? ne : e);
    if (nend == s) return -1;
    char *fn = dupn(s, (size_t)(nend - s));
    json_t *args = json_object();
    int rc = fn && args ? 0 : -1;
    for (const char *q = ne; rc == 0 && q && (q = find(q, e, "<arg_key>")) != NULL;) {
        const char *ke = find(q, e, "</arg_key>");
        const char *v = ke ? find(ke, e, "<arg_value>") : NULL;
        const char *ve = v ? find(v, e, "</arg_value>") : NULL;
        if (!ve) {
            rc = -1;
            break;
        }
        rc = set_param(p, args, fn, q + 9, ke, v + 11, ve);
        q = ve;
    }
    if (rc == 0) add_call(p, fn, args);
    free(fn);
    json_decref(args);
    return rc;
}

/* <invoke name="N"><parameter name="P">V</parameter>...</invoke> ... */
static int minimax_body(struct ft_tool_parser *p, const char *s, const char *e) {
    int n = 0;
    for (const char *q = s; (q = find(q, e, "<invoke name=\"")) != NULL; n++) {
        const char *ne = find(q + 14, e, "\"");
        const char *iend = ne ? find(ne, e, "</invoke>") : NULL;
        if (!ne || !iend) return -1;
        char *fn = dupn(q + 14, (size_t)(ne - q - 14));
        json_t *args = json_object();
        int rc = fn && args ? 0 : -1;
        for (const char *r = ne; rc == 0 && (r = find(r, iend, "<parameter name=\"")) != NULL;) {
            const char *ke = find(r + 17, iend, "\"");
            const char *v = ke ? find(ke, iend, ">") : NULL;
            const char *ve = v ? find(v, iend, "</parameter>") : NULL;
            if (!ve) {
                rc = -1;
                break;
            }
            const char *vs = v + 1;
            trim_nl(&vs, &ve);
            rc = set_param(p, args, fn, r + 17, ke, vs, ve);
            r = ve;
        }
        if (rc == 0) add_call(p, fn, args);
        free(fn);
        json_decref(args);
        if (rc) return -1;
        q = iend;
    }
    return n ? 0 : -1;
}

/* <｜tool▁call▁begin｜>[function<｜tool▁sep｜>]N[\n]ARGS<｜tool▁call▁end｜> ...: V3's name after the
 * sep up to the first newline, V3.1's before the sep; ARGS: blanks, then ```json and the object
 * up to the next ```, or the bare object (a fence only where the arguments start: one met later
 * would be text of a string, and the live scanner streams from the start) */
static int deepseek_body(struct ft_tool_parser *p, const char *s, const char *e) {
    int n = 0;
    const size_t kb = strlen(DS_CALL_BEGIN), ks = strlen(DS_TOOL_SEP);
    for (const char *q = s; (q = find(q, e, DS_CALL_BEGIN)) != NULL; n++) {
        const char *b = q + kb, *ce = find(b, e, DS_CALL_END);
        if (!ce) ce = e;
        const char *sep = find(b, ce, DS_TOOL_SEP);
        if (!sep) return -1;
        const char *name = b, *name_end = sep, *a = sep + ks;
        if (sep - b == 8 && !memcmp(b, "function", 8)) { /* V3: type, sep, name, fenced json */
            name = a;
            const char *nl = find(a, ce, "\n");
            name_end = nl ? nl : ce;
            a = name_end;
        }
        const char *ae = ce;
        a = skip_ws(a, ce);
        if (ce - a >= 7 && !memcmp(a, "```json", 7)) {
            a += 7;
            const char *close = find(a, ce, "```");
            if (close) ae = close;
        }
        a = skip_ws(a, ae), ae = rskip_ws(a, ae);
        char *fn = dupn(name, (size_t)(rskip_ws(name, name_end) - name));
        json_t *args = json_loadb(a, (size_t)(ae - a), 0, NULL);
        int ok = fn && *fn && json_is_object(args);
        if (ok) add_call(p, fn, args);
        free(fn);
        json_decref(args);
        if (!ok) return -1;
        q = ce;
    }
    return n ? 0 : -1;
}

/* The name in a Kimi call id [s, e) (blanks off): after a leading "functions." and before a
 * trailing ":IDX" (digits), as vLLM's kimi_k2 parser reads functions.N:IDX; *ne == *ns: none. */
static void kimi_name(const char *s, const char *e, const char **ns, const char **ne) {
    s = skip_ws(s, e), e = rskip_ws(s, e);
    if (e - s > 10 && !memcmp(s, "functions.", 10)) s += 10;
    const char *c = e;
    while (c > s && c[-1] >= '0' && c[-1] <= '9') c--;
    if (c < e && c > s && c[-1] == ':') e = c - 1;
    *ns = s, *ne = e;
}

/* <|tool_call_begin|>functions.N:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|> ...: the
 * id up to the argument marker, the object (blanks around it) up to the call's end marker (or
 * the block's end) */
static int kimi_body(struct ft_tool_parser *p, const char *s, const char *e) {
    int n = 0;
    const size_t kb = strlen(KM_CALL_BEGIN), ka = strlen(KM_ARGS_BEGIN);
    for (const char *q = s; (q = find(q, e, KM_CALL_BEGIN)) != NULL; n++) {
        const char *b = q + kb, *ce = find(b, e, KM_CALL_END);
        if (!ce) ce = e;
        const char *am = find(b, ce, KM_ARGS_BEGIN);
        if (!am) return -1;
        const char *ns, *ne, *is = skip_ws(b, am), *ie = rskip_ws(is, am);
        kimi_name(b, am, &ns, &ne);
        const char *a = skip_ws(am + ka, ce), *ae = rskip_ws(a, ce);
        char *fn = dupn(ns, (size_t)(ne - ns)), *id = dupn(is, (size_t)(ie - is));
        json_t *args = json_loadb(a, (size_t)(ae - a), 0, NULL);
        int ok = fn && id && *fn && json_is_object(args);
        if (ok) add_call_id(p, id, fn, args);
        free(fn), free(id);
        json_decref(args);
        if (!ok) return -1;
        q = ce;
    }
    return n ? 0 : -1;
}

/* [{...}, ...] or {...}, or N[ARGS]{...}[TOOL_CALLS]N2[ARGS]{...} (v11 tokenizers) */
static int mistral_body(struct ft_tool_parser *p, const char *s, const char *e) {
    s = skip_ws(s, e), e = rskip_ws(s, e);
    if (s < e && (*s == '[' || *s == '{')) return json_calls(p, s, e);
    int n = 0;
    for (const char *q = s; q < e; n++) {
        const char *a = find(q, e, "[ARGS]");
        if (!a) return -1;
        const char *next = find(a, e, "[TOOL_CALLS]");
        const char *ae = next ? next : e;
        char *fn = dupn(q, (size_t)(a - q));
        json_t *args = json_loadb(a + 6, (size_t)(ae - a - 6), 0, NULL);
        int ok = fn && *fn && json_is_object(args);
        if (ok) add_call(p, fn, args);
        free(fn);
        json_decref(args);
        if (!ok) return -1;
        q = next ? next + 12 : e;
    }
    return n ? 0 : -1;
}

/* [ to=functions.N]<|channel|>commentary[ to=functions.N][ <|constrain|>json|json]<|message|>
 * {...}: the header names the function, the body is its arguments */
static int harmony_body(struct ft_tool_parser *p, const char *s, const char *e) {
    const char *msg = find(s, e, "<|message|>");
    const char *to = msg ? find(s, msg, "to=functions.") : NULL;
    if (!to) return -1;
    const char *n = to + 13, *ne = n;
    while (ne < msg && *ne != ' ' && *ne != '<' && *ne != '\n') ne++;
    const char *a = skip_ws(msg + 11, e), *ae = rskip_ws(a, e);
    char *fn = dupn(n, (size_t)(ne - n));
    json_t *args = json_loadb(a, (size_t)(ae - a), 0, NULL);
    int ok = fn && *fn && json_is_object(args);
    if (ok) add_call(p, fn, args);
    free(fn);
    json_decref(args);
    return ok ? 0 : -1;
}

/* {...}; {...} or a list */
static int llama3_body(struct ft_tool_parser *p, const char *s, const char *e) {
    s = skip_ws(s, e), e = rskip_ws(s, e);
    if (s < e && *s == '[') return json_calls(p, s, e);
    int n = 0;
    while (s < e) {
        json_error_t err;
        json_t *v = json_loadb(s, (size_t)(e - s), JSON_DISABLE_EOF_CHECK, &err);
        if (!v) return -1;
        int rc = json_call(p, v);
        json_decref(v);
        if (rc) return -1;
        n++;
        s = skip_ws(s + err.position, e);
        if (s < e && *s == ';') s = skip_ws(s + 1, e);
    }
    return n ? 0 : -1;
}

static int parse_body(struct ft_tool_parser *p, const char *s, const char *e) {
    int n0 = p->n_calls, rc = -1;
    switch (p->fmt) {
    case FT_TOOLS_HERMES: {
        const char *a = skip_ws(s, e), *b = rskip_ws(a, e);
        rc = json_calls(p, a, b);
        break;
    }
    case FT_TOOLS_QWEN3_CODER: rc = qwen3_coder_body(p, s, e); break;
    case FT_TOOLS_LLAMA3: rc = llama3_body(p, s, e); break;
    case FT_TOOLS_MISTRAL: rc = mistral_body(p, s, e); break;
    case FT_TOOLS_DEEPSEEK: rc = deepseek_body(p, s, e); break;
    case FT_TOOLS_GLM: rc = glm_body(p, s, e); break;
    case FT_TOOLS_MINIMAX: rc = minimax_body(p, s, e); break;
    case FT_TOOLS_HARMONY: rc = harmony_body(p, s, e); break;
    case FT_TOOLS_KIMI: rc = kimi_body(p, s, e); break;
    default: break;
    }
    if (rc) { /* all or nothing: calls of a bad block are dropped, its text kept */
        for (int i = n0; i < p->n_calls; i++)
            free(p->calls[i].name), free(p->calls[i].args), free(p->calls[i].id);
        p->n_calls = n0;
    }
    return rc;
}

/* ---------------------------------------------------------------- live calls */

static int live_fmt(const struct ft_tool_parser *p) {
    return p->fmt == FT_TOOLS_HERMES || p->fmt == FT_TOOLS_LLAMA3 || p->fmt == FT_TOOLS_MISTRAL;
}

/* A block opens (or closed): no calls in it yet. The closed block spends the indices of its
 * calls, or (it did not parse) of the calls it showed: a stream sent those names, and a client
 * merges deltas by index, so a later call under one of them would be glued onto that call. */
static void live_reset(struct ft_tool_parser *p) {
    const int n = p->n_calls - p->live_base;
    p->live_index += n > p->n_shown ? n : p->n_shown;
    p->n_shown = 0;
    for (int i = 0; i < p->n_live; i++) free(p->live[i].name), free(p->live[i].args);
    p->n_live = 0;
    p->live_base = p->n_calls;
    memset(&p->sc, 0, sizeof p->sc);
}

static struct ft_tool_live *live_new(struct ft_tool_parser *p) {
    if (p->n_live == p->cap_live) {
        int c = p->cap_live ? p->cap_live * 2 : 4;
        struct ft_tool_live *q = realloc(p->live, (size_t)c * sizeof *q);
        if (!q) {
            p->oom = 1;
            return NULL;
        }
        p->live = q, p->cap_live = c;
    }
    struct ft_tool_live *l = &p->live[p->n_live++];
    memset(l, 0, sizeof *l);
    return l;
}

static int blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* One byte of the block through a JSON scanner that knows only what it needs: the call objects
 * (the block's object, or the objects of its list), their "name" string and where their
 * "arguments"/"parameters" object starts and ends. */
static void live_byte(struct ft_tool_parser *p, char c) {
    struct ft_tool_scan *s = &p->sc;
    struct ft_tool_live *l = s->in_call && p->n_live ? &p->live[p->n_live - 1] : NULL;
    if (s->in_args) { /* inside the arguments: copied, blanks outside strings dropped */
        if (s->in_str) {
            if (s->esc) s->esc = 0;
            else if (c == '\\') s->esc = 1;
            else if (c == '"') s->in_str = 0;
        } else if (blank(c)) {
            return;
        } else if (c == '"') {
            s->in_str = 1;
        } else if (c == '{' || c == '[') {
            s->depth++;
        } else if (c == '}' || c == ']') {
            s->depth--;
        }
        if (l) put(p, &l->args, &l->n_args, &l->cap_args, &c, 1);
        if (s->depth == s->call_depth) {
            s->in_args = 0;
            if (l) l->args_done = 1;
        }
        return;
    }
    if (s->in_str) {
        if (s->esc || c == '\\') { /* an escape in a key or the name: not followed */
            s->esc = !s->esc;
            if (s->str == 1) s->kn = (int)sizeof s->kbuf;
            if (s->str == 2 && l) l->no_stream = 1;
        } else if (c == '"') {
            s->in_str = 0;
            if (s->str == 1) {
                s->key = s->kn == 4 && !memcmp(s->kbuf, "name", 4) ? 1
                         : (s->kn == 9 && !memcmp(s->kbuf, "arguments", 9)) ||
                                   (s->kn == 10 && !memcmp(s->kbuf, "parameters", 10))
                             ? 2 : 0;
            }
            if (s->str == 2 && l) l->name_done = 1, l->no_stream |= !l->n_name;
        } else if (s->str == 1) {
            if (s->kn < (int)sizeof s->kbuf) s->kbuf[s->kn++] = c;
        } else if (s->str == 2 && l) {
            put(p, &l->name, &l->n_name, &l->cap_name, &c, 1);
        }
        return;
    }
    if (blank(c)) return;
    const int at_call = s->in_call && s->depth == s->call_depth;
    if (s->depth == 0 && !s->in_call && c != '{' && c != '[' && c != ';' && !p->n_live) {
        s->off = 1; /* not JSON calls (mistral's N[ARGS]{...}, text) */
        return;
    }
    switch (c) {
    case '"':
        s->in_str = 1;
        s->str = at_call && !s->expect_value                              ? 1
                 : at_call && s->key == 1 && l && !l->name_done && !l->n_name ? 2
                                                                              : 0;
        if (s->str == 1) s->kn = 0;
        break;
    case ':':
        if (at_call) s->expect_value = 1;
        break;
    case ',':
        if (at_call) s->expect_value = 0, s->key = 0;
        break;
    case '{':
        if (at_call && s->expect_value && s->key == 2 && l) { /* the arguments start */
            s->depth++;
            s->in_args = 1;
            if (!l->name_done) l->no_stream = 1;
            put(p, &l->args, &l->n_args, &l->cap_args, "{", 1);
            break;
        }
        s->depth++;
        if (!s->in_call && (s->depth == 1 || (s->depth == 2 && s->call_depth == 2))) {
            s->call_depth = s->depth; /* a call object */
            s->in_call = 1, s->expect_value = 0, s->key = 0;
            live_new(p);
        }
        break;
    case '[':
        s->depth++;
        if (s->depth == 1 && !s->in_call) s->call_depth = 2; /* a list of calls */
        break;
    case '}':
    case ']':
        if (at_call) s->in_call = 0;
        if (s->depth > 0) s->depth--;
        if (s->depth == 0) s->call_depth = 0;
        break;
    default: break; /* numbers, true, false, null */
    }
}

/* The XML and harmony scanners read the held block in place: they stop at bytes that may begin
 * a marker until the bytes after them tell (or the block ends), so what they write does not
 * depend on how the text was cut into pushes. */
enum { XS_START, XS_NAME, XS_BODY, XS_KEY, XS_VAL, XS_BRACE, XS_ARGS, XS_DONE };

/* Which of the markers m begins at s[0..n): its index; -1 none; -2 s[0..n) is a proper prefix
 * of one (more bytes tell). */
static int at_marker(const char *s, size_t n, const char *const *m) {
    int part = 0;
    for (int i = 0; m[i]; i++) {
        const size_t k = strlen(m[i]);
        if (n >= k ? !memcmp(s, m[i], k) : (part |= !memcmp(s, m[i], n), 0)) return i;
    }
    return part ? -2 : -1;
}

static struct ft_tool_live *live_cur(struct ft_tool_parser *p) {
    return p->n_live ? &p->live[p->n_live - 1] : NULL;
}

/* Valid UTF-8 s[0..n) into the live call's arguments as JSON string text (as jansson writes). */
static void live_esc(struct ft_tool_parser *p, const char *s, size_t n) {
    struct ft_tool_live *l = live_cur(p);
    for (size_t i = 0; l && i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        static const char k_c[] = "\"\\\b\f\n\r\t", k_e[] = "\"\\bfnrt";
        char e[8];
        const char *q = c ? strchr(k_c, c) : NULL;
        if (q) e[0] = '\\', e[1] = k_e[q - k_c], e[2] = 0;
        else if (c < 0x20) snprintf(e, sizeof e, "\\u%04X", c);
        else e[0] = (char)c, e[1] = 0;
        put(p, &l->args, &l->n_args, &l->cap_args, e, strlen(e));
    }
}

static void live_args(struct ft_tool_parser *p, const char *s, size_t n) {
    struct ft_tool_live *l = live_cur(p);
    if (l) put(p, &l->args, &l->n_args, &l->cap_args, s, n);
}

/* The call's name hold[a, b) is read: it goes live, its arguments object opens. */
static void live_named(struct ft_tool_parser *p, size_t a, size_t b) {
    struct ft_tool_live *l = live_new(p);
    if (!l) return;
    put(p, &l->name, &l->n_name, &l->cap_name, p->hold + a, b - a);
    l->name_done = 1, l->no_stream = a == b;
    live_args(p, "{", 1);
}

static void live_close(struct ft_tool_parser *p) {
    struct ft_tool_live *l = live_cur(p);
    if (l && p->sc.xs != XS_DONE) live_args(p, "}", 1), l->args_done = 1;
    p->sc.xs = XS_DONE;
}

/* ,"KEY": (the comma after the first parameter) for the parameter name hold[kstart, kend) */
static void coder_key(struct ft_tool_parser *p, char **key) {
    struct ft_tool_scan *s = &p->sc;
    size_t m;
    *key = clean_text(p->hold + s->kstart, s->kend - s->kstart, &m);
    if (!*key) {
        p->oom = 1;
        return;
    }
    live_args(p, s->n_params ? ",\"" : "\"", s->n_params ? 2 : 1);
    s->n_params++;
    live_esc(p, *key, m);
    live_args(p, "\":", 2);
}

/* The value hold[vstart, ve) ends: a string's closing quote, or the whole typed value. */
static void coder_value_end(struct ft_tool_parser *p, size_t ve) {
    struct ft_tool_scan *s = &p->sc;
    struct ft_tool_live *l = live_cur(p);
    if (s->vstr) {
        live_args(p, "\"", 1);
        return;
    }
    const char *vs = p->hold + s->vstart, *e = p->hold + ve;
    if (p->fmt != FT_TOOLS_GLM) trim_nl(&vs, &e); /* GLM keeps its values as written */
    char *key = NULL, *text = NULL;
    coder_key(p, &key);
    json_t *v = key ? typed_value(p->tools, l && l->name ? l->name : "", key, vs,
                                  (size_t)(e - vs)) : NULL;
    if (v) text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) p->oom = 1;
    else live_args(p, text, strlen(text));
    free(text);
    free(key);
    json_decref(v);
}

/* The parameter hold[kstart, kend)'s value starts at hold[vstart]. */
static void coder_value_start(struct ft_tool_parser *p, size_t vstart) {
    struct ft_tool_scan *s = &p->sc;
    struct ft_tool_live *l = live_cur(p);
    s->vstart = vstart, s->vfirst = 1, s->vstr = 0;
    char *key = NULL;
    size_t m;
    if (!(key = clean_text(p->hold + s->kstart, s->kend - s->kstart, &m))) {
        p->oom = 1;
        return;
    }
    const char *ty = param_type(p->tools, l && l->name ? l->name : "", key);
    free(key);
    if (*ty && strcmp(ty, "string")) return; /* typed once whole */
    s->vstr = 1;
    coder_key(p, &key);
    free(key);
    live_args(p, "\"", 1);
}

/* One step in a string value at hold[pos] (not a marker): 0, or 1 to wait for more bytes. The
 * value as the whole-call parser writes it (trim_nl, clean_text), byte by byte. */
static int coder_string_byte(struct ft_tool_parser *p, size_t upto, int final,
                             const char *const *ends) {
    struct ft_tool_scan *s = &p->sc;
    const char *h = p->hold;
    const unsigned char c = (unsigned char)h[s->pos];
    const int trim = p->fmt != FT_TOOLS_GLM; /* GLM keeps its newlines */
    if (c == '\n' && trim && s->vfirst) { /* one leading newline off */
        s->vfirst = 0, s->pos++;
        return 0;
    }
    if (c == '\n' && trim) { /* and one trailing: the value ends after it */
        const size_t q = s->pos + 1;
        const int r = q < upto ? at_marker(h + q, upto - q, ends) : -2;
        if (r == -2 && !final) return 1;
        if (r >= 0 || q == upto) {
            s->pos++;
            return 0;
        }
    }
    int k = c ? utf8_seq((const unsigned char *)h + s->pos, upto - s->pos) : 0;
    if (k < 0 && !final) return 1;
    s->vfirst = 0;
    if (k <= 0) live_esc(p, FFFD, 3), s->pos++;
    else live_esc(p, h + s->pos, (size_t)k), s->pos += (size_t)k;
    return 0;
}

/* A string value's byte at hold[pos] or a typed value's (skipped: written whole at its end);
 * 1 to wait for more bytes. */
static int value_byte(struct ft_tool_parser *p, size_t upto, int final, const char *const *ends) {
    if (!p->sc.vstr) {
        p->sc.pos++;
        return 0;
    }
    return coder_string_byte(p, upto, final, ends);
}

/* <function=N>\n<parameter=P>\nV\n</parameter>...</function> as qwen3_coder_body reads it: the
 * name up to the first '>', parameters up to </function> (or the block's end), a value up to
 * the first </parameter>, <parameter= or </function>. */
static void coder_scan(struct ft_tool_parser *p, size_t upto, int final) {
    static const char *const k_pre[] = {"<function=", NULL};
    static const char *const k_body[] = {"<parameter=", "</function>", NULL};
    /* the block's end marker too: a value waits at its first bytes (the block may end there) */
    static const char *const k_val[] = {"</parameter>", "<parameter=", "</function>",
                                        "</tool_call>", NULL};
    struct ft_tool_scan *s = &p->sc;
    const char *h = p->hold;
    while (!p->oom && s->xs != XS_DONE) {
        if (s->pos >= upto) {
            if (!final) return;
            if (s->xs == XS_VAL) coder_value_end(p, upto);
            if (s->xs >= XS_BODY) live_close(p); /* parsed up to the end of the block */
            s->xs = XS_DONE;
            return;
        }
        int r;
        switch (s->xs) {
        case XS_START:
            r = at_marker(h + s->pos, upto - s->pos, k_pre);
            if (r == -2 && !final) return;
            s->pos += r == 0 ? strlen(k_pre[0]) : 1;
            if (r == 0) s->xs = XS_NAME, s->mark = s->pos;
            break;
        case XS_NAME:
            if (h[s->pos] == '>') live_named(p, s->mark, s->pos), s->xs = XS_BODY;
            s->pos++;
            break;
        case XS_BODY:
            r = at_marker(h + s->pos, upto - s->pos, k_body);
            if (r == -2 && !final) return;
            s->pos += r >= 0 ? strlen(k_body[r]) : 1;
            if (r == 0) s->xs = XS_KEY, s->kstart = s->pos;
            if (r == 1) live_close(p);
            break;
        case XS_KEY:
            if (h[s->pos] != '>') {
                s->pos++;
                break;
            }
            s->kend = s->pos++;
            if (s->kend - s->kstart >= 10 && !memcmp(h + s->kend - 10, "</function", 10)) {
                live_close(p); /* </function> before the name's end: no such parameter */
                break;
            }
            coder_value_start(p, s->kend + 1);
            s->xs = XS_VAL;
            break;
        case XS_VAL:
            r = at_marker(h + s->pos, upto - s->pos, k_val);
            if (r >= 0) {
                coder_value_end(p, s->pos);
                s->pos += strlen(k_val[r]);
                s->xs = r == 0 ? XS_BODY : XS_KEY;
                s->kstart = s->pos;
                if (r >= 2) live_close(p);
            } else if (r == -2 && !final) {
                return;
            } else if (value_byte(p, upto, final, k_val)) {
                return;
            }
            break;
        default: s->xs = XS_DONE; break;
        }
    }
}

/* N\n<arg_key>P</arg_key>\n<arg_value>V</arg_value>... as glm_body reads it: the name (blanks
 * off each side) up to the first <arg_key> (or the block's end), a key up to the first
 * </arg_key>, its value from the next <arg_value> to the first </arg_value>, as written. A
 * parameter without its end tags fails the block (the live call stays open). */
static void glm_scan(struct ft_tool_parser *p, size_t upto, int final) {
    static const char *const k_name[] = {"<arg_key>", "</tool_call>", NULL};
    static const char *const k_body[] = {"<arg_key>", NULL};
    static const char *const k_key[] = {"</arg_key>", NULL};
    static const char *const k_open[] = {"<arg_value>", NULL};
    static const char *const k_val[] = {"</arg_value>", "</tool_call>", NULL};
    struct ft_tool_scan *s = &p->sc;
    const char *h = p->hold;
    while (!p->oom && s->xs != XS_DONE) {
        if (s->pos >= upto) {
            if (!final) return;
            if (s->xs == XS_NAME) { /* a call without parameters */
                const size_t e = (size_t)(rskip_ws(h + s->mark, h + upto) - h);
                if (e > s->mark) live_named(p, s->mark, e), live_close(p);
            }
            if (s->xs == XS_BODY) live_close(p);
            s->xs = XS_DONE; /* elsewhere: the block does not parse */
            return;
        }
        int r;
        switch (s->xs) {
        case XS_START:
            if (blank(h[s->pos])) s->pos++;
            else s->xs = XS_NAME, s->mark = s->pos;
            break;
        case XS_NAME:
            r = at_marker(h + s->pos, upto - s->pos, k_name);
            if (r == -2 && !final) return;
            if (r == 0) {
                const size_t e = (size_t)(rskip_ws(h + s->mark, h + s->pos) - h);
                if (e == s->mark) {
                    s->xs = XS_DONE; /* no name: not a call */
                    break;
                }
                live_named(p, s->mark, e);
                s->xs = XS_BODY;
            } else {
                s->pos++;
            }
            break;
        case XS_BODY:
            r = at_marker(h + s->pos, upto - s->pos, k_body);
            if (r == -2 && !final) return;
            s->pos += r == 0 ? strlen(k_body[0]) : 1;
            if (r == 0) s->xs = XS_KEY, s->kstart = s->pos;
            break;
        case XS_KEY:
            r = at_marker(h + s->pos, upto - s->pos, k_key);
            if (r == -2 && !final) return;
            if (r == 0) s->kend = s->pos, s->pos += strlen(k_key[0]), s->xs = XS_BRACE;
            else s->pos++;
            break;
        case XS_BRACE: /* after </arg_key>: anything up to <arg_value> */
            r = at_marker(h + s->pos, upto - s->pos, k_open);
            if (r == -2 && !final) return;
            s->pos += r == 0 ? strlen(k_open[0]) : 1;
            if (r == 0) coder_value_start(p, s->pos), s->xs = XS_VAL;
            break;
        case XS_VAL:
            r = at_marker(h + s->pos, upto - s->pos, k_val);
            if (r == 0) {
                coder_value_end(p, s->pos);
                s->pos += strlen(k_val[0]);
                s->xs = XS_BODY;
            } else if (r == -2 && !final) {
                return;
            } else if (value_byte(p, upto, final, k_val)) {
                return;
            }
            break;
        default: s->xs = XS_DONE; break;
        }
    }
}

/* <invoke name="N"><parameter name="P">\nV\n</parameter>...</invoke>... as minimax_body reads
 * it: each invoke's name up to its '"', a parameter's name up to its '"', its value from the
 * next '>' to the first </parameter> (one newline off each side), all within the invoke's
 * </invoke>; a parameter or invoke left open fails the block (the live call stays open). */
static void minimax_scan(struct ft_tool_parser *p, size_t upto, int final) {
    static const char *const k_pre[] = {"<invoke name=\"", NULL};
    static const char *const k_body[] = {"<parameter name=\"", "</invoke>", NULL};
    static const char *const k_end[] = {"</invoke>", NULL};
    static const char *const k_val[] = {"</parameter>", "</invoke>", "</minimax:tool_call>", NULL};
    struct ft_tool_scan *s = &p->sc;
    const char *h = p->hold;
    while (!p->oom && s->xs != XS_DONE) {
        if (s->pos >= upto) {
            if (final) s->xs = XS_DONE; /* an open invoke: the block does not parse */
            return;
        }
        int r;
        switch (s->xs) {
        case XS_START:
            r = at_marker(h + s->pos, upto - s->pos, k_pre);
            if (r == -2 && !final) return;
            s->pos += r == 0 ? strlen(k_pre[0]) : 1;
            if (r == 0) s->xs = XS_NAME, s->mark = s->pos;
            break;
        case XS_NAME:
            if (h[s->pos] == '"') live_named(p, s->mark, s->pos), s->n_params = 0, s->xs = XS_BODY;
            s->pos++;
            break;
        case XS_BODY:
            r = at_marker(h + s->pos, upto - s->pos, k_body);
            if (r == -2 && !final) return;
            s->pos += r >= 0 ? strlen(k_body[r]) : 1;
            if (r == 0) s->xs = XS_KEY, s->kstart = s->pos;
            if (r == 1) live_close(p), s->xs = XS_START;
            break;
        case XS_KEY:
        case XS_BRACE: /* the name up to '"', then anything up to '>' */
            r = at_marker(h + s->pos, upto - s->pos, k_end);
            if (r == -2 && !final) return;
            if (r == 0) {
                s->xs = XS_DONE; /* </invoke> inside the parameter's tag: not a call */
                break;
            }
            if (s->xs == XS_KEY && h[s->pos] == '"') s->kend = s->pos, s->xs = XS_BRACE;
            else if (s->xs == XS_BRACE && h[s->pos] == '>')
                coder_value_start(p, s->pos + 1), s->xs = XS_VAL;
            s->pos++;
            break;
        case XS_VAL:
            r = at_marker(h + s->pos, upto - s->pos, k_val);
            if (r == 0) {
                coder_value_end(p, s->pos);
                s->pos += strlen(k_val[0]);
                s->xs = XS_BODY;
            } else if (r == 1) {
                s->xs = XS_DONE; /* </invoke> before </parameter>: not a call */
            } else if (r == -2 && !final) {
                return;
            } else if (value_byte(p, upto, final, k_val)) {
                return;
            }
            break;
        default: s->xs = XS_DONE; break;
        }
    }
}

/* [ to=functions.N]<|channel|>commentary[ to=functions.N]...<|message|>{...} as harmony_body
 * reads it: the name from the first "to=functions." before the first <|message|>; the
 * arguments through the JSON scanner once the body opens with '{'. */
static void harmony_scan(struct ft_tool_parser *p, size_t upto) {
    static const char *const k_msg[] = {"<|message|>", NULL};
    struct ft_tool_scan *s = &p->sc;
    const char *h = p->hold;
    for (; !p->oom && s->xs != XS_DONE && s->pos < upto;) {
        if (s->xs == XS_START) {
            const int r = at_marker(h + s->pos, upto - s->pos, k_msg);
            if (r == -2) return; /* the block's end tells nothing more: no body, no call */
            if (r < 0) {
                s->pos++;
                continue;
            }
            static const char k_to[] = "to=functions.";
            const char *to = find(h, h + s->pos, k_to);
            const char *n = to ? to + sizeof k_to - 1 : NULL, *e = n; /* the name: [n, e) */
            while (e && e < h + s->pos && *e != ' ' && *e != '<' && *e != '\n') e++;
            s->xs = to && e > n ? XS_BRACE : XS_DONE;
            if (to) s->mark = (size_t)(n - h), s->kend = (size_t)(e - h);
            s->pos += strlen(k_msg[0]);
        } else if (s->xs == XS_BRACE) {
            const char c = h[s->pos++];
            if (blank(c)) continue;
            if (c != '{') {
                s->xs = XS_DONE; /* not a JSON object: reported whole if at all */
                continue;
            }
            live_named(p, s->mark, s->kend);
            s->in_call = 1, s->in_args = 1, s->depth = 1, s->call_depth = 0;
            s->xs = XS_ARGS;
        } else {
            live_byte(p, h[s->pos++]); /* copies the arguments, ends them at their '}' */
            if (!s->in_args) s->xs = XS_DONE;
        }
    }
}

/* <｜tool▁call▁begin｜>[function<｜tool▁sep｜>]N[\n]ARGS<｜tool▁call▁end｜>... as deepseek_body
 * reads it: V3's name (after "function" and the sep) up to the first newline, V3.1's up to the
 * sep; then blanks, an optional ```json fence and the arguments object through the JSON scanner,
 * its bytes as they come except those that may begin what would end it (the fence's ```, the
 * call's end marker, the block's). A call end before the sep or the name's newline, anything
 * but '{' where the object starts, or an end met inside the object fails the block (nothing
 * more goes live; a call already shown stays as it went out). */
static void deepseek_scan(struct ft_tool_parser *p, size_t upto, int final) {
    static const char *const k_begin[] = {DS_CALL_BEGIN, NULL};
    static const char *const k_sep[] = {DS_TOOL_SEP, DS_CALL_END, NULL};
    static const char *const k_name[] = {"\n", DS_CALL_END, NULL};
    static const char *const k_fence[] = {"```json", NULL};
    static const char *const k_fenced[] = {"```", DS_CALL_END, DS_CALLS_END, NULL};
    static const char *const k_bare[] = {DS_CALL_END, DS_CALLS_END, NULL};
    static const char *const k_end[] = {DS_CALL_END, NULL};
    struct ft_tool_scan *s = &p->sc;
    const char *h = p->hold;
    while (!p->oom && s->xs != XS_DONE) {
        if (s->pos >= upto) {
            if (final) s->xs = XS_DONE; /* an object left open: the block does not parse */
            return;
        }
        int r;
        switch (s->xs) {
        case XS_START: /* up to a call's begin marker */
        case XS_BODY: { /* after the object: up to the call's end marker */
            const char *const *m = s->xs == XS_START ? k_begin : k_end;
            r = at_marker(h + s->pos, upto - s->pos, m);
            if (r == -2 && !final) return;
            s->pos += r == 0 ? strlen(m[0]) : 1;
            if (r == 0) s->mark = s->pos, s->xs = s->xs == XS_START ? XS_KEY : XS_START;
            break;
        }
        case XS_KEY: /* V3's "function" or V3.1's name, up to the sep */
            r = at_marker(h + s->pos, upto - s->pos, k_sep);
            if (r == -2 && !final) return;
            if (r == 1) {
                s->xs = XS_DONE; /* no sep in the call */
                break;
            }
            if (r < 0) {
                s->pos++;
                break;
            }
            if (s->pos - s->mark == 8 && !memcmp(h + s->mark, "function", 8)) {
                s->pos += strlen(DS_TOOL_SEP);
                s->mark = s->pos, s->xs = XS_NAME;
                break;
            }
            live_named(p, s->mark, (size_t)(rskip_ws(h + s->mark, h + s->pos) - h));
            s->pos += strlen(DS_TOOL_SEP);
            s->fenced = 0, s->xs = XS_BRACE;
            break;
        case XS_NAME: /* V3: the name up to its newline */
            r = at_marker(h + s->pos, upto - s->pos, k_name);
            if (r == -2 && !final) return;
            if (r == 1) {
                s->xs = XS_DONE; /* the call ends in its name: no arguments */
                break;
            }
            if (r == 0) {
                live_named(p, s->mark, (size_t)(rskip_ws(h + s->mark, h + s->pos) - h));
                s->fenced = 0, s->xs = XS_BRACE;
            }
            s->pos++;
            break;
        case XS_BRACE: /* blanks, at most one ```json, then the object's '{' */
            if (blank(h[s->pos])) {
                s->pos++;
                break;
            }
            r = s->fenced ? -1 : at_marker(h + s->pos, upto - s->pos, k_fence);
            if (r == -2 && !final) return;
            if (r == 0) {
                s->pos += strlen(k_fence[0]), s->fenced = 1;
            } else if (h[s->pos] == '{') {
                s->pos++;
                s->in_call = 1, s->in_args = 1, s->in_str = 0, s->esc = 0;
                s->depth = 1, s->call_depth = 0;
                s->xs = XS_ARGS; /* live_named wrote the '{' */
            } else {
                s->xs = XS_DONE; /* not a JSON object */
            }
            break;
        case XS_ARGS:
            r = at_marker(h + s->pos, upto - s->pos, s->fenced ? k_fenced : k_bare);
            if (r == -2 && !final) return;
            if (r >= 0) {
                s->xs = XS_DONE; /* the arguments end before the object closes */
                break;
            }
            live_byte(p, h[s->pos++]); /* copies the arguments, ends them at their '}' */
            if (!s->in_args) s->xs = XS_BODY;
            break;
        default: s->xs = XS_DONE; break;
        }
    }
}

/* <|tool_call_begin|>functions.N:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>... as
 * kimi_body reads it: the id up to the argument marker (the name in it: kimi_name), blanks, then
 * the arguments object through the JSON scanner, its bytes as they come except those that may
 * begin a call's or the block's end marker. A call end before the argument marker, anything but
 * '{' where the object starts, or an end met inside the object fails the block (nothing more
 * goes live; a call already shown stays as it went out). */
static void kimi_scan(struct ft_tool_parser *p, size_t upto, int final) {
    static const char *const k_begin[] = {KM_CALL_BEGIN, NULL};
    static const char *const k_id[] = {KM_ARGS_BEGIN, KM_CALL_END, NULL};
    static const char *const k_args[] = {KM_CALL_END, KM_CALLS_END, NULL};
    static const char *const k_end[] = {KM_CALL_END, NULL};
    struct ft_tool_scan *s = &p->sc;
    const char *h = p->hold;
    while (!p->oom && s->xs != XS_DONE) {
        if (s->pos >= upto) {
            if (final) s->xs = XS_DONE; /* an object left open: the block does not parse */
            return;
        }
        int r;
        switch (s->xs) {
        case XS_START: /* up to a call's begin marker */
        case XS_BODY: { /* after the object: up to the call's end marker */
            const char *const *m = s->xs == XS_START ? k_begin : k_end;
            r = at_marker(h + s->pos, upto - s->pos, m);
            if (r == -2 && !final) return;
            s->pos += r == 0 ? strlen(m[0]) : 1;
            if (r == 0) s->mark = s->pos, s->xs = s->xs == XS_START ? XS_KEY : XS_START;
            break;
        }
        case XS_KEY: /* the id, up to the argument marker */
            r = at_marker(h + s->pos, upto - s->pos, k_id);
            if (r == -2 && !final) return;
            if (r < 0) {
                s->pos++;
                break;
            }
            if (r == 1) {
                s->xs = XS_DONE; /* no arguments in the call */
                break;
            }
            const char *ns, *ne;
            kimi_name(h + s->mark, h + s->pos, &ns, &ne);
            live_named(p, (size_t)(ns - h), (size_t)(ne - h));
            s->pos += strlen(KM_ARGS_BEGIN);
            s->xs = XS_BRACE;
            break;
        case XS_BRACE: /* blanks, then the object's '{' */
            if (blank(h[s->pos])) {
                s->pos++;
            } else if (h[s->pos] == '{') {
                s->pos++;
                s->in_call = 1, s->in_args = 1, s->in_str = 0, s->esc = 0;
                s->depth = 1, s->call_depth = 0;
                s->xs = XS_ARGS; /* live_named wrote the '{' */
            } else {
                s->xs = XS_DONE; /* not a JSON object */
            }
            break;
        case XS_ARGS:
            r = at_marker(h + s->pos, upto - s->pos, k_args);
            if (r == -2 && !final) return;
            if (r >= 0) {
                s->xs = XS_DONE; /* the arguments end before the object closes */
                break;
            }
            live_byte(p, h[s->pos++]); /* copies the arguments, ends them at their '}' */
            if (!s->in_args) s->xs = XS_BODY;
            break;
        default: s->xs = XS_DONE; break;
        }
    }
}

/* The open block's bytes [sc.pos, upto) through the scanner; final: the block ends at upto. */
static void live_scan(struct ft_tool_parser *p, size_t upto, int final) {
    if (p->fmt == FT_TOOLS_QWEN3_CODER) coder_scan(p, upto, final);
    if (p->fmt == FT_TOOLS_HARMONY) harmony_scan(p, upto);
    if (p->fmt == FT_TOOLS_GLM) glm_scan(p, upto, final);
    if (p->fmt == FT_TOOLS_MINIMAX) minimax_scan(p, upto, final);
    if (p->fmt == FT_TOOLS_DEEPSEEK) deepseek_scan(p, upto, final);
    if (p->fmt == FT_TOOLS_KIMI) kimi_scan(p, upto, final);
    if (!live_fmt(p)) return;
    for (; p->sc.pos < upto && !p->sc.off && !p->oom; p->sc.pos++) live_byte(p, p->hold[p->sc.pos]);
}

/* ---------------------------------------------------------------- streaming */

void ft_tool_parser_init(struct ft_tool_parser *p, enum ft_tool_fmt fmt, const json_t *tools) {
    memset(p, 0, sizeof *p);
    p->fmt = fmt;
    p->tools = tools;
}

void ft_tool_parser_free(struct ft_tool_parser *p) {
    for (int i = 0; i < p->n_calls; i++)
        free(p->calls[i].name), free(p->calls[i].args), free(p->calls[i].id);
    free(p->calls);
    live_reset(p);
    free(p->live);
    free(p->hold);
    free(p->out);
    memset(p, 0, sizeof *p);
}

/* Length of the longest suffix of [s, s+n) that is a proper prefix of m. */
static size_t partial(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    for (size_t l = k - 1 < n ? k - 1 : n; l > 0; l--)
        if (!memcmp(s + n - l, m, l)) return l;
    return 0;
}

/* Drops the first k held bytes. */
static void consume(struct ft_tool_parser *p, size_t k) {
    memmove(p->hold, p->hold + k, p->n_hold - k);
    p->n_hold -= k;
}

/* llama3 writes a bare JSON call as its whole reply: '{' before any other text opens a block */
static int bare_json_start(const struct ft_tool_parser *p) {
    if (p->fmt != FT_TOOLS_LLAMA3 || p->seen_text) return 0;
    const char *s = skip_ws(p->hold, p->hold + p->n_hold);
    return s < p->hold + p->n_hold && *s == '{';
}

static void scan(struct ft_tool_parser *p) {
    const struct fmt_desc *d = &k_fmts[p->fmt];
    while (!p->oom && p->n_hold) {
        if (!p->in_block) {
            if (bare_json_start(p)) {
                p->in_block = 2; /* no marker to give back */
                live_reset(p);
                continue;
            }
            if (p->fmt == FT_TOOLS_LLAMA3 && !p->seen_text &&
                skip_ws(p->hold, p->hold + p->n_hold) == p->hold + p->n_hold)
                return; /* only blanks so far: a bare call may follow */
            const char *m = find(p->hold, p->hold + p->n_hold, d->start);
            if (!m) {
                size_t keep = partial(p->hold, p->n_hold, d->start);
                emit(p, p->hold, p->n_hold - keep);
                consume(p, p->n_hold - keep);
                return;
            }
            emit(p, p->hold, (size_t)(m - p->hold));
            consume(p, (size_t)(m - p->hold) + strlen(d->start));
            p->in_block = 1;
            live_reset(p);
            continue;
        }
        if (!d->end) { /* to the end of the text */
            live_scan(p, p->n_hold, 0);
            return;
        }
        const char *m = find(p->hold, p->hold + p->n_hold, d->end);
        if (!m) { /* not the first bytes of the end marker: they are no call's */
            live_scan(p, p->n_hold - partial(p->hold, p->n_hold, d->end), 0);
            return;
        }
        live_scan(p, (size_t)(m - p->hold), 1);
        if (parse_body(p, p->hold, m)) { /* not a call: give the block back as text */
            emit(p, d->start, strlen(d->start));
            emit(p, p->hold, (size_t)(m - p->hold) + strlen(d->end));
        }
        consume(p, (size_t)(m - p->hold) + strlen(d->end));
        p->in_block = 0;
        live_reset(p);
    }
}

void ft_tool_parser_push(struct ft_tool_parser *p, const char *s, size_t n) {
    if (p->fmt == FT_TOOLS_NONE) {
        emit(p, s, n);
        return;
    }
    put(p, &p->hold, &p->n_hold, &p->cap_hold, s, n);
    scan(p);
    /* a reader may show these now (in order: one that cannot be shown yet holds back those
     * after it, so indices go out rising); only calls shown are worth an index if the block
     * fails (a block that closed within this push showed nothing: none of it was read live) */
    while (p->n_shown < p->n_live && p->live[p->n_shown].name_done &&
           !p->live[p->n_shown].no_stream)
        p->n_shown++;
}

void ft_tool_parser_finish(struct ft_tool_parser *p) {
    if (p->in_block) {
        const struct fmt_desc *d = &k_fmts[p->fmt];
        live_scan(p, p->n_hold, 1);
        if (parse_body(p, p->hold, p->hold + p->n_hold)) {
            if (p->in_block == 1) emit(p, d->start, strlen(d->start));
            emit(p, p->hold, p->n_hold);
        }
    } else {
        emit(p, p->hold, p->n_hold);
    }
    p->n_hold = 0;
    p->in_block = 0;
    live_reset(p);
}
