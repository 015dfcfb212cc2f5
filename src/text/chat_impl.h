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
    CHAT_N_FAMILIES,
};

struct ft_chat_template {
    enum chat_family family;
    int llama3_gen_always; /* Llama-3 template that writes the assistant header unconditionally */
    int mistral_v01;       /* Mistral/Mixtral v0.1 template: ' [/INST]', no system, no strip */
    int harmony_v1;        /* first gpt-oss release: tools line always present, no "\n\n" after
                              the developer instructions */
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

enum ft_status chat_render_family(const struct ft_chat_template *t, const struct ft_chat_msg *m,
                                  int n, const struct ft_chat_opts *o, struct chat_out *out);

#endif
