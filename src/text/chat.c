/* chat.c — chat template API: recognising the family of a tokenizer_config.json chat_template,
 * the output buffer and Python-compatible whitespace helpers; the per-family renderers are in
 * chat_render.c. Called by the CLI and the server; templates are immutable and thread-safe. */
#include "text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "text/chat_impl.h"

static const char *const k_names[CHAT_N_FAMILIES] = {
    [CHAT_CHATML] = "chatml",   [CHAT_QWEN3] = "qwen3",     [CHAT_LLAMA3] = "llama3",
    [CHAT_LLAMA2] = "llama2",   [CHAT_MISTRAL] = "mistral", [CHAT_DEEPSEEK3] = "deepseek3",
    [CHAT_HARMONY] = "harmony", [CHAT_QWEN2] = "qwen2",     [CHAT_LLAMA31] = "llama3_1",
    [CHAT_QWEN3_CODER] = "qwen3_coder", [CHAT_GLM4] = "glm4", [CHAT_MINIMAX] = "minimax",
    [CHAT_KIMI] = "kimi_k2",
};

const char *ft_chat_template_names(void) {
    return "chatml, qwen2, qwen3, qwen3_coder, llama3, llama3_1, llama2, mistral, deepseek3, "
           "harmony, glm4, minimax, kimi_k2";
}

const char *ft_chat_template_name(const struct ft_chat_template *t) {
    return t ? k_names[t->family] : "";
}

const char *ft_chat_role_name(enum ft_chat_role r) {
    switch (r) {
    case FT_ROLE_SYSTEM: return "system";
    case FT_ROLE_USER: return "user";
    case FT_ROLE_ASSISTANT: return "assistant";
    case FT_ROLE_TOOL: return "tool";
    }
    return "?";
}

static int has(const char *src, const char *needle) {
    return src && strstr(src, needle) != NULL;
}

/* Family from distinctive text of the template; -1 when none fits. *why names a near miss. */
static int detect_family(const char *src, const char **why) {
    *why = NULL;
    if (has(src, "<|channel|>") && has(src, "<|start|>")) return CHAT_HARMONY;
    if (has(src, "]~b]") && has(src, "<minimax:tool_call>")) return CHAT_MINIMAX;
    if (has(src, "[gMASK]<sop>") && has(src, "<arg_key>")) return CHAT_GLM4;
    if (has(src, "<|im_assistant|>") && has(src, "<|im_middle|>")) {
        if (has(src, "<think>")) { /* K2-Thinking, K2.5: <think> in every assistant turn */
            *why = "a Kimi-K2-Thinking/K2.5 template (thinking)";
            return -1;
        }
        return CHAT_KIMI;
    }
    if (has(src, "<|im_start|>")) {
        if (has(src, "enable_thinking") || has(src, "reasoning_content")) return CHAT_QWEN3;
        if (has(src, "<function=") && has(src, "<parameter=")) return CHAT_QWEN3_CODER;
        if (!has(src, "tool_response") && !has(src, "You are ")) return CHAT_CHATML;
        if (has(src, "messages[0]['role'] == 'system'") && has(src, "<tool_response>"))
            return CHAT_QWEN2; /* Qwen2/2.5: default system prompt, tool turns */
        *why = "a ChatML template with a default system prompt or tool handling";
        return -1;
    }
    if (has(src, "<|start_header_id|>")) {
        if (has(src, "Cutting Knowledge Date")) {
            if (has(src, "\"parameters\": dictionary of argument name")) return CHAT_LLAMA31;
            *why = "a Llama-3.1+ template of another version (date header, ipython tools)";
            return -1;
        }
        return CHAT_LLAMA3;
    }
    if (has(src, "<\xef\xbd\x9c"
                 "Assistant\xef\xbd\x9c>")) { /* <｜Assistant｜> */
        if (has(src, "</think>")) {
            *why = "a DeepSeek-R1/V3.1 template (thinking)";
            return -1;
        }
        return CHAT_DEEPSEEK3;
    }
    if (has(src, "[INST]")) {
        if (has(src, "<<SYS>>")) return CHAT_LLAMA2;
        if (has(src, "system_message") && has(src, "[/INST]") && !has(src, " [/INST]"))
            return CHAT_MISTRAL;                                                /* v0.3 */
        if (has(src, "' [/INST]'") && !has(src, "system")) return CHAT_MISTRAL; /* v0.1 */
        *why = "an [INST] template of another Mistral version";
        return -1;
    }
    return -1;
}

/* The literal default system prompt of a Qwen2/2.5 template: the text of
 * '<|im_start|>system\n...<|im_end|>' written when messages[0] is not a system message. */
static void qwen2_default_system(struct ft_chat_template *t, const char *src) {
    const char *k = "'<|im_start|>system\\n";
    snprintf(t->default_system, sizeof t->default_system, "You are a helpful assistant.");
    for (const char *p = src ? strstr(src, k) : NULL; p; p = strstr(p + 1, k)) {
        const char *a = p + strlen(k), *b = strstr(a, "<|im_end|>");
        if (!b || memchr(a, '\'', (size_t)(b - a)) || (size_t)(b - a) >= sizeof t->default_system)
            continue; /* '... + messages[0]['content'] + ...': not the literal one */
        snprintf(t->default_system, sizeof t->default_system, "%.*s", (int)(b - a), a);
        return;
    }
}

static void detect_variant(struct ft_chat_template *t, const char *src) {
    if (t->family == CHAT_QWEN2) qwen2_default_system(t, src);
    if (!src) return;
    if (t->family == CHAT_MISTRAL) t->mistral_v01 = has(src, "' [/INST]'");
    if (t->family == CHAT_LLAMA3) t->llama3_gen_always = !has(src, "add_generation_prompt");
    if (t->family == CHAT_LLAMA31) t->llama32 = has(src, "strftime_now");
    if (t->family == CHAT_GLM4) t->glm47 = !has(src, "<think></think>");
    if (t->family == CHAT_HARMONY) {
        const char *k = "Channel must be included for every message.";
        const char *p = strstr(src, k);
        t->harmony_v1 = p && p[strlen(k)] != '"';
    }
}

enum ft_status ft_chat_template_detect(const char *template_src, const char *override_name,
                                       struct ft_chat_template **out) {
    *out = NULL;
    int fam = -1;
    if (override_name && *override_name) {
        for (int i = 0; i < CHAT_N_FAMILIES; i++)
            if (strcmp(override_name, k_names[i]) == 0) fam = i;
        if (fam < 0)
            return ft_fail(FT_ERR_UNSUPPORTED,
                           "chat template: unknown name '%s'; known: %s (--chat-template NAME)",
                           override_name, ft_chat_template_names());
    } else {
        const char *why = NULL;
        if (!template_src || !*template_src)
            return ft_fail(FT_ERR_UNSUPPORTED,
                           "chat template: tokenizer_config.json has no chat_template; pass "
                           "--chat-template NAME (known: %s)",
                           ft_chat_template_names());
        fam = detect_family(template_src, &why);
        if (fam < 0)
            return ft_fail(FT_ERR_UNSUPPORTED,
                           "chat template: unrecognised chat_template%s%s%s; known: %s; pass "
                           "--chat-template NAME to use one of them",
                           why ? " (looks like " : "", why ? why : "", why ? ")" : "",
                           ft_chat_template_names());
    }
    struct ft_chat_template *t = calloc(1, sizeof *t);
    if (!t) return ft_fail(FT_ERR_OOM, "chat template: out of memory");
    t->family = (enum chat_family)fam;
    detect_variant(t, template_src);
    *out = t;
    return FT_OK;
}

void ft_chat_template_free(struct ft_chat_template *t) {
    free(t);
}

enum ft_status ft_chat_render(const struct ft_chat_template *t, const struct ft_chat_msg *msgs,
                              int n, const struct ft_chat_opts *o, char **out) {
    enum ft_status st = FT_OK;
    struct chat_out co = {0};
    struct ft_chat_opts defaults = {.enable_thinking = -1};
    *out = NULL;
    if (!t) return ft_fail(FT_ERR_INVALID_ARG, "chat render: no template");
    if (n <= 0 || !msgs) return ft_fail(FT_ERR_INVALID_ARG, "chat render: empty conversation");
    FT_TRY(chat_render_family(t, msgs, n, o ? o : &defaults, &co));
    co_putn(&co, "", 0); /* makes sure the buffer exists and is terminated */
    if (co.oom) {
        st = ft_fail(FT_ERR_OOM, "chat render: out of memory (%zu bytes)", co.n);
        goto fail;
    }
    *out = co.p;
    return FT_OK;
fail:
    free(co.p);
    return st;
}

/* ---- output buffer ---- */

void co_putn(struct chat_out *o, const char *s, size_t n) {
    if (o->oom) return;
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n + 1)
            cap *= 2;
        char *p = realloc(o->p, cap);
        if (!p) {
            o->oom = 1;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
    if (n) memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = 0;
}

void co_put(struct chat_out *o, const char *s) {
    if (s) co_putn(o, s, strlen(s));
}

/* ---- Python string semantics ---- */

/* Bytes of the whitespace character (Python str.isspace) starting at s (avail bytes), or 0. */
static size_t ws_at(const unsigned char *s, size_t avail) {
    if (avail >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
    if (avail >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (avail >= 3) {
        unsigned c = (unsigned)s[0] << 16 | (unsigned)s[1] << 8 | s[2];
        if (c == 0xe19a80 /* U+1680 */ || (c >= 0xe28080 && c <= 0xe2808a) /* U+2000..200A */ ||
            c == 0xe280a8 || c == 0xe280a9 || c == 0xe280af /* U+2028, 2029, 202F */ ||
            c == 0xe2819f /* U+205F */ || c == 0xe38080 /* U+3000 */)
            return 3;
    }
    return 0;
}

void py_strip(const char **s, size_t *n, int left, int right) {
    const unsigned char *p = (const unsigned char *)*s;
    size_t len = *n, k;
    if (left)
        while (len && (k = ws_at(p, len)) != 0)
            p += k, len -= k;
    if (right) {
        for (;;) {
            size_t cut = 0;
            for (k = 1; k <= 3 && k <= len && !cut; k++)
                if (ws_at(p + len - k, k) == k) cut = k;
            if (!cut) break;
            len -= cut;
        }
    }
    *s = (const char *)p;
    *n = len;
}

void py_strip_char(const char **s, size_t *n, char ch, int left, int right) {
    const char *p = *s;
    size_t len = *n;
    if (left)
        while (len && *p == ch)
            p++, len--;
    if (right)
        while (len && p[len - 1] == ch)
            len--;
    *s = p;
    *n = len;
}

size_t utf8_len(const char *s) {
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80) n++;
    return n;
}
