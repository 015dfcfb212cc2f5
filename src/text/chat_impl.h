/* chat_impl.h — private to chat.c and chat_render.c: the template object, a growing output
 * string, and the Python-compatible string helpers (str.strip() etc.) the renderers need to match
 * jinja2 byte for byte. Not thread-shared: each render owns its struct chat_out. */
#ifndef FT_TEXT_CHAT_IMPL_H
#define FT_TEXT_CHAT_IMPL_H

#include <stddef.h>

#include "text/chat.h"

enum chat_family {
    CHAT_CHATML,
    CHAT_QWEN3,
    CHAT_LLAMA3,
    CHAT_LLAMA2,
    CHAT_MISTRAL,
    CHAT_DEEPSEEK3,
    CHAT_HARMONY,
    CHAT_QWEN2,
    CHAT_LLAMA31,     /* Llama 3.1/3.2/3.3: JSON tool calls, ipython tool results */
    CHAT_QWEN3_CODER, /* Qwen3-Coder: XML tool calls */
    CHAT_GLM4,        /* GLM-4.5/4.6/4.7: <arg_key>/<arg_value> tool calls */
    CHAT_MINIMAX,     /* MiniMax-M2: <minimax:tool_call> */
    CHAT_KIMI,        /* Kimi-K2: <|im_user|>..<|im_middle|>, <|tool_calls_section_begin|> */
    CHAT_N_FAMILIES,
};

struct ft_chat_template {
    enum chat_family family;
    int llama3_gen_always; /* Llama-3 template that writes the assistant header unconditionally */
    int mistral_v01;       /* Mistral/Mixtral v0.1 template: ' [/INST]', no system, no strip */
    int harmony_v1;        /* first gpt-oss release: tools line always present, no "\n\n" after
                              the developer instructions */
    int llama32;           /* Llama 3.2 template: strftime_now date, no builtin tools */
    int glm47;             /* GLM-4.7 template: no newlines between the parts of a turn */
    char default_system[256]; /* Qwen2/2.5: the system message used when the chat has none */
};

struct chat_out {
    char *p;
    size_t n, cap;
    int oom;
};

void co_putn(struct chat_out *o, const char *s, size_t n);
void co_put(struct chat_out *o, const char *s); /* NULL puts nothing */

/* Python str.strip()/lstrip()/rstrip() with no argument (Unicode whitespace, as jinja's |trim):
 * narrow [*s, *s+*n) in place. */
void py_strip(const char **s, size_t *n, int left, int right);
/* Python strip(ch) for one ASCII character. */
void py_strip_char(const char **s, size_t *n, char ch, int left, int right);
/* Python len() of a UTF-8 string (code points). */
size_t utf8_len(const char *s);

/* Python json.dumps(v, ensure_ascii=False) of a jansson value (', ' and ': ' separators, float
 * repr), appended to o. */
struct json_t;
void co_pyjson(struct chat_out *o, const struct json_t *v);

/* The same with indent=n (tojson(indent=n)), at nesting depth level (0 at the top). */
void co_pyjson_indent(struct chat_out *o, const struct json_t *v, int indent, int level);
/* Python str() of a JSON value (jinja's |string): text as is, True/False/None, numbers as their
 * repr, lists and dicts as Python's repr ('single-quoted' strings). */
void co_pystr(struct chat_out *o, const struct json_t *v);

/* chat_render_tools.c: the families added for their tool calls */
enum ft_status chat_render_llama31(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                   int n, const struct ft_chat_opts *o, struct chat_out *out);
enum ft_status chat_render_qwen3_coder(const struct ft_chat_msg *m, int n,
                                       const struct ft_chat_opts *o, struct chat_out *out);
enum ft_status chat_render_glm4(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                int n, const struct ft_chat_opts *o, struct chat_out *out);
enum ft_status chat_render_minimax(const struct ft_chat_msg *m, int n,
                                   const struct ft_chat_opts *o, struct chat_out *out);
enum ft_status chat_render_kimi(const struct ft_chat_msg *m, int n, const struct ft_chat_opts *o,
                                struct chat_out *out);

enum ft_status chat_render_family(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                  int n, const struct ft_chat_opts *o, struct chat_out *out);

#endif
