/* chat.h — chat templates: turn a conversation into the prompt string a model was trained on.
 * The family is recognised from tokenizer_config.json's chat_template (or named by
 * --chat-template NAME) and rendered by a per-family C renderer that reproduces what
 * transformers' apply_chat_template(..., tokenize=False) produces with the real template, byte for
 * byte (tests/test_chat.c, references from tools/gen_chat_refs.py).
 * Called by the CLI (ft run --chat, ft chat) and the server. A template object is immutable after
 * ft_chat_template_detect and may be shared by threads; render allocates only its output. */
#ifndef FT_TEXT_CHAT_H
#define FT_TEXT_CHAT_H

#include "ft.h"

enum ft_chat_role { FT_ROLE_SYSTEM, FT_ROLE_USER, FT_ROLE_ASSISTANT, FT_ROLE_TOOL };

/* An assistant tool call (OpenAI "tool_calls" entry). */
struct ft_chat_tool_call {
    const char *id;        /* may be NULL */
    const char *name;
    const char *arguments; /* JSON object text (rendered the way the template's tojson writes it) */
};

struct ft_chat_msg {
    enum ft_chat_role role;
    const char *content;   /* UTF-8; NULL renders as "" (but a DeepSeek-V3 assistant message
                              writes its tool_calls only when content is NULL, as its template
                              tests `content is none`) */
    const char *reasoning; /* assistant thinking (Qwen3 reasoning_content, gpt-oss "thinking"); may
                              be NULL */
    const char *name; /* tool name / tool call id (Mistral needs a 9-character id); may be NULL */
    const struct ft_chat_tool_call *tool_calls; /* assistant: the calls it made */
    int n_tool_calls;
};

struct ft_chat_opts {
    int add_generation_prompt;
    int enable_thinking;   /* -1 = template default; 0/1 (Qwen3's switch) */
    const char *bos_token; /* from tokenizer_config.json; NULL renders as "" */
    const char *eos_token; /* NULL renders as "" */
    /* extras (zero-initialised = template default) */
    const char *date; /* gpt-oss "Current date: YYYY-MM-DD"; NULL = today (local time) */
    const char *reasoning_effort; /* gpt-oss "Reasoning: X"; NULL = "medium" */
    const char *tools_json; /* JSON list of OpenAI tools ({"type": "function", "function": {...}})
                               the template lists in its system turn; NULL or "[]" = none */
};

struct ft_chat_template;

/* Recognises the family from a tokenizer_config.json chat_template string, or takes it from
 * override_name (one of ft_chat_template_names(); then template_src may be NULL, and when given
 * it only selects the family's variant). Unrecognised or unknown: FT_ERR_UNSUPPORTED, with a
 * message that lists the known names and suggests --chat-template NAME. */
enum ft_status ft_chat_template_detect(const char *template_src, const char *override_name,
                                       struct ft_chat_template **out);
const char *ft_chat_template_name(const struct ft_chat_template *t);
/* "chatml, qwen2, qwen3, ..., minimax, kimi_k2" */
const char *ft_chat_template_names(void);

/* Renders msgs[0..n) into a malloc'd NUL-terminated string (*out; the caller frees it).
 * The result already holds the BOS text where the template writes it: tokenize it without adding
 * special tokens. A conversation the real template rejects (e.g. Llama-2 roles that do not
 * alternate, a Mistral tool message without a 9-character id) is FT_ERR_INVALID_ARG. */
enum ft_status ft_chat_render(const struct ft_chat_template *t, const struct ft_chat_msg *msgs,
                              int n, const struct ft_chat_opts *o, char **out);
void ft_chat_template_free(struct ft_chat_template *t);
/* 1 when the family's renderer writes tools and assistant tool calls (else ft_chat_render
 * fails on them with a message naming the family): qwen2, qwen3, qwen3_coder, llama3_1, glm4,
 * minimax, kimi_k2, mistral (v0.3), deepseek3 (its
 * template writes calls but never lists the tools), harmony. */
int ft_chat_supports_tools(const struct ft_chat_template *t);
/* Appends Python's json.dumps(v, ensure_ascii=False) text of a JSON document (what the
 * templates' tojson writes) to a malloc'd string; NULL when json is not valid JSON. */
char *ft_chat_tojson(const char *json);

/* "system", "user", "assistant", "tool" */
const char *ft_chat_role_name(enum ft_chat_role r);

#endif
