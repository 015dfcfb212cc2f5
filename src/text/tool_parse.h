/* tool_parse.h — model output -> tool calls, per family format:
 *   hermes       <tool_call>{"name": N, "arguments": {...}}</tool_call> ...  (Qwen2.5, Qwen3)
 *   qwen3_coder  <tool_call><function=N><parameter=P>value</parameter></function></tool_call>
 *   llama3       {"name": N, "parameters": {...}} (the whole reply; ';' between calls), or
 *                after <|python_tag|>
 *   mistral      [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]  or [TOOL_CALLS]N[ARGS]{...}
 *   deepseek     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```
 *                <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>  (V3; also V3.1's N<｜tool▁sep｜>{...})
 *   glm          <tool_call>N\n<arg_key>P</arg_key>\n<arg_value>V</arg_value>...</tool_call> (GLM-4.5)
 *   minimax      <minimax:tool_call><invoke name="N"><parameter name="P">V</parameter></invoke>
 *                </minimax:tool_call>  (MiniMax-M2)
 *   kimi_k2      <|tool_calls_section_begin|><|tool_call_begin|>functions.N:IDX
 *                <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
 *                (Kimi-K2: the name is the id's part between "functions." and ":IDX")
 *   harmony      <|start|>assistant<|channel|>commentary to=functions.N <|constrain|>json
 *                <|message|>{...}<|call|>  (gpt-oss; the recipient may also stand before
 *                <|channel|>). The server's harmony splitter (server/sse.h) passes each message
 *                addressed to a function through to content in this form.
 * Text outside the call blocks is content. Parameter values of the XML formats are typed by the
 * tool's JSON schema (a "string" property stays a string; others are parsed as JSON when they
 * can be). A block that does not parse is given back as content, never dropped.
 * Streaming: push text as it comes; content is released at once except bytes that may begin a
 * call marker; each call is reported once its block closes. The JSON formats (hermes, llama3,
 * mistral's list), deepseek, kimi_k2 and harmony also show the calls of the open block as they
 * are written (live[]): a call's name once read (deepseek V3's at the newline after it, V3.1's
 * at its sep, kimi_k2's at its argument begin marker), then its arguments so far, the text as
 * written less the blanks outside strings (deepseek and kimi_k2 hold back only bytes that may
 * begin the ``` closing deepseek's fence or an end marker). qwen3_coder, glm and minimax show their calls too: the name once read (glm's at its
 * first <arg_key>), then the arguments object as compact JSON, a "string" (or unknown)
 * parameter's value as it comes, any other one whole when it closes (its type is known only
 * then). A finished call takes that text as its args when it parses to the same value, so the
 * pieces a stream sent add up to the final arguments, however the text was cut into pushes.
 * A block that does not parse after it showed calls: a stream cannot take them back, so they
 * end as they were shown (the server's writers close them when the block's text follows as
 * content, as in a reply that is not streamed), and their indices stay spent: the next call
 * gets the next index (live_index), never one a client already holds a name for.
 * Used by the server; one parser belongs to one request (one thread). */
#ifndef FT_TEXT_TOOL_PARSE_H
#define FT_TEXT_TOOL_PARSE_H

#include <stddef.h>

#include <jansson.h>

#include "text/json_grammar.h"

enum ft_tool_fmt {
    FT_TOOLS_NONE,
    FT_TOOLS_HERMES,
    FT_TOOLS_QWEN3_CODER,
    FT_TOOLS_LLAMA3,
    FT_TOOLS_MISTRAL,
    FT_TOOLS_DEEPSEEK,
    FT_TOOLS_GLM,
    FT_TOOLS_MINIMAX,
    FT_TOOLS_HARMONY,
    FT_TOOLS_KIMI,
    FT_TOOLS_N,
};

const char *ft_tool_fmt_name(enum ft_tool_fmt f);
/* -1 for an unknown name */
int ft_tool_fmt_from_name(const char *name);
/* "hermes, qwen3_coder, llama3, mistral, deepseek, glm, minimax, harmony, kimi_k2, none" */
const char *ft_tool_fmt_names(void);
/* The format a chat template writes, from its source text (tools markers); FT_TOOLS_NONE when
 * it has no tool calls. */
enum ft_tool_fmt ft_tool_fmt_detect(const char *template_src);
/* The format a chat template family (ft_chat_template_name) renders its calls in;
 * FT_TOOLS_NONE for the families without tool calls. */
enum ft_tool_fmt ft_tool_fmt_of_family(const char *chat_family);
/* How to force calls of this format with a grammar (json_grammar.h); NULL for none. */
const struct ft_jg_calls_fmt *ft_tool_fmt_grammar(enum ft_tool_fmt f);
/* The special-token texts this format's markers use (NULL-terminated list). */
const char *const *ft_tool_fmt_markers(enum ft_tool_fmt f);

struct ft_tool_call {
    char *name;
    char *args; /* compact JSON object text */
    int index;  /* its tool_calls index in a stream (live_index below): never reused */
    char *id;   /* the id the model wrote (kimi_k2: "functions.N:IDX", which its template
                   writes back in the assistant turn and in "## Return of ID"); NULL where the
                   format has none */
};

/* A call of the open block while it is written (call index live_index + its place in live[]).
 * A stream shows it once it and every call before it in live[] are name_done and not
 * no_stream (so the indices it sends rise). */
struct ft_tool_live {
    char *name;          /* as read so far; complete once name_done */
    size_t n_name, cap_name;
    char *args;          /* the arguments object so far (blanks outside strings dropped) */
    size_t n_args, cap_args;
    int name_done, args_done;
    int no_stream;       /* arguments before the name, or an escaped name: report it whole */
};

/* The byte scanner behind live[] (tool_parse.c). */
struct ft_tool_scan {
    size_t pos;          /* block bytes scanned */
    int off;             /* the block is not JSON calls: nothing live */
    int depth, call_depth, in_call, in_args, in_str, esc;
    int str;             /* the string being read: 0 other, 1 a key of the call, 2 its name */
    int expect_value;    /* at the call's level: after a ':' (else a key comes) */
    int key;             /* the call-level key last read: 0 other, 1 name, 2 arguments */
    char kbuf[12];
    int kn;
    /* the XML formats and harmony: positions in the block (tool_parse.c: coder_scan, ...) */
    int xs;              /* state: 0 before the name (harmony: in the header), ... */
    size_t mark, kstart, kend; /* where the name (harmony) or the parameter name starts, ends */
    size_t vstart;       /* where the parameter's value starts */
    int fenced;          /* deepseek: the arguments follow a ```json fence (``` ends them) */
    int vstr, vfirst, n_params; /* the value is a string (written as it comes); at its first
                                   byte; parameters written so far */
};

struct ft_tool_parser {
    enum ft_tool_fmt fmt;
    const json_t *tools; /* the request's tools (for typing XML parameters); may be NULL */
    int in_block, seen_text;
    char *hold;          /* bytes held back: a possible marker start, or an open block */
    size_t n_hold, cap_hold;
    char *out;           /* content released by push/finish (the caller consumes, sets n_out 0) */
    size_t n_out, cap_out;
    struct ft_tool_call *calls; /* every call parsed so far */
    int n_calls, cap_calls;
    struct ft_tool_live *live; /* calls of the open block so far */
    int n_live, cap_live, live_base; /* live_base: n_calls when the block opened */
    int live_index;      /* the tool_calls index of live[0]: the next index not spent. A block
                            spends one per call it gives, and when it does not parse, one per
                            call it showed (n_shown): a client saw those */
    int n_shown;         /* live[0..n_shown): the calls showable when a push returned (what a
                            reader of live[] between pushes may have sent) */
    struct ft_tool_scan sc;
    int oom;
};

void ft_tool_parser_init(struct ft_tool_parser *p, enum ft_tool_fmt fmt, const json_t *tools);
void ft_tool_parser_push(struct ft_tool_parser *p, const char *s, size_t n);
/* End of the text: an open block is parsed if it can be (else released as content). */
void ft_tool_parser_finish(struct ft_tool_parser *p);
void ft_tool_parser_free(struct ft_tool_parser *p);

#endif
