/* json_grammar.h — grammar-constrained decoding for JSON: a JSON Schema (or "any JSON object",
 * or a sequence of tool calls wrapped in a model family's markers) compiled into a byte-level
 * pushdown matcher, and the per-token mask built from it (which vocabulary entries may come
 * next, given the bytes each token decodes to).
 *
 * Supported schema keywords: type (one or a list), properties, required, additionalProperties
 * (bool or schema), items, minItems, maxItems, enum, const, anyOf / oneOf (alternatives must
 * begin with different characters: object, array, string, number, true/false, null), $ref to
 * "#/$defs/..." or "#/definitions/...", minLength, maxLength; annotations (title,
 * description, default, examples, format, $schema, $id, $comment, deprecated, readOnly,
 * writeOnly) are ignored. Any other keyword is FT_ERR_UNSUPPORTED naming it, unless lenient
 * (then ignored: the output is still valid JSON of the right shape). Whitespace between tokens
 * is allowed in runs of at most FT_JG_MAX_WS bytes, so a model cannot loop on blanks.
 *
 * Called by the server (server/openai*.c) on connection threads: a compiled struct ft_jg is
 * immutable and may be shared; a struct ft_jg_state and a constraint belong to one request
 * (the engine thread runs it through struct ft_logit_mask). */
#ifndef FT_TEXT_JSON_GRAMMAR_H
#define FT_TEXT_JSON_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ft.h"

#define FT_JG_MAX_DEPTH 32 /* nesting of objects/arrays (deeper: the opening byte is refused) */
#define FT_JG_MAX_WS 8     /* whitespace bytes in a row between JSON tokens */

struct ft_jg;
struct ft_jg_vtab;

/* How a family writes tool calls: open CALL (sep CALL)* close (sep NULL: one call only), where
 * CALL is, by kind:
 *   FT_JG_CALLS_JSON    {"name": NAME, "<args_key>": ARGS}            (Hermes/Qwen, Llama 3, Mistral)
 *   FT_JG_CALLS_TAGGED  NAME name_end ARGS call_end                   (DeepSeek, gpt-oss harmony)
 *   FT_JG_CALLS_XML     NAME name_end PARAM* call_end, each PARAM
 *                       param_open PNAME param_name_end VALUE value_end param_end
 *                                                             (Qwen3-Coder, GLM-4.5+, MiniMax-M2)
 * NAME is one of the tools' names written raw; ARGS the JSON arguments object; PNAME one of the
 * tool's schema properties (each once, the required ones all present). An XML VALUE is the
 * property's text raw when its schema's type is "string" or absent (what tool_parse.c reads as
 * a string: ft_jg_prop_type), else JSON of its schema. No string (raw or JSON) may contain one
 * of forbid[] (the texts at which the family's parser would end the value or the block), nor
 * a raw value value_end; value_no_nl: a raw value neither begins nor ends with '\n' (the parser
 * trims one there). Tool and property names must not hold blanks or <>" (they could not be
 * read back). */
enum ft_jg_calls_kind { FT_JG_CALLS_JSON, FT_JG_CALLS_TAGGED, FT_JG_CALLS_XML };
#define FT_JG_MAX_FORBID 7
struct ft_jg_calls_fmt {
    const char *name;               /* the format's name, for errors */
    const char *open, *sep, *close; /* e.g. "<tool_call>\n", "\n</tool_call>\n<tool_call>\n",
                                       "\n</tool_call>" */
    const char *close_alt;          /* another accepted ending (e.g. close + "\n"), or NULL */
    const char *args_key;           /* JSON: "arguments" (Hermes/Qwen, Mistral) or "parameters" */
    enum ft_jg_calls_kind kind;
    const char *name_end;           /* TAGGED, XML: after the name (non-empty) */
    const char *call_end;           /* TAGGED (may be ""), XML (non-empty): ends a call */
    const char *param_open, *param_name_end, *value_end, *param_end; /* XML */
    int value_no_nl;
    const char *const *forbid;      /* NULL-terminated, at most FT_JG_MAX_FORBID; may be NULL */
};
/* The JSON type a tool's parameters schema gives property prop: its "type" when a string, the
 * first entry when a list, else "" (the XML families' parsers type values by it). */
const char *ft_jg_prop_type(const json_t *params, const char *prop);

/* A value matching schema (a JSON object; true/{} = any value). strict: unsupported keywords are
 * an error; else ignored. Errors name the keyword and its JSON pointer. */
enum ft_status ft_jg_compile_schema(const json_t *schema, int strict, struct ft_jg **out);
/* Any JSON object (response_format json_object). */
enum ft_status ft_jg_compile_object(struct ft_jg **out);
/* Tool calls of the OpenAI-style tools array ([{"type": "function", "function": {"name",
 * "parameters"}}]) written as fmt says; only: restrict to that function's name (NULL: any of
 * them). The parameters schemas are compiled leniently; an enum value holding a forbidden text
 * is left out. Errors (a name that cannot be written, an XML property with no string form)
 * name the tool and the property. */
enum ft_status ft_jg_compile_calls(const json_t *tools, const char *only,
                                   const struct ft_jg_calls_fmt *fmt, struct ft_jg **out);
void ft_jg_free(struct ft_jg *g);

/* The matcher state (small, copied by value). */
struct ft_jg_frame {
    int32_t node;
    uint8_t phase, ws;
    int16_t sel;     /* chosen property / tool / alternative, -1 none */
    uint32_t pos;    /* bytes into a literal / key / number; chars into a string */
    uint32_t count;  /* array items so far */
    uint64_t alive;  /* literal or key candidates still possible; strings: the forbidden
                        texts' partial matches (a byte each) */
    uint64_t seen;   /* object, XML call: properties written; raw value: '\n' history */
};
struct ft_jg_state {
    int depth;
    int dead;        /* a byte was refused: nothing more is accepted */
    struct ft_jg_frame f[FT_JG_MAX_DEPTH + 2];
};

void ft_jg_start(const struct ft_jg *g, struct ft_jg_state *st);
/* Feeds bytes; returns 0 when all were accepted, -1 at the first refused one (st is then dead). */
int ft_jg_feed(const struct ft_jg *g, struct ft_jg_state *st, const char *s, size_t n);
/* 1 when the text so far is a complete match (generation may end here). */
int ft_jg_accepting(const struct ft_jg *g, const struct ft_jg_state *st);
/* 1 when text is a complete match from the start. */
int ft_jg_match(const struct ft_jg *g, const char *s, size_t n);

/* The vocabulary as bytes: what each token decodes to (special tokens other than the end ids
 * are never allowed); end ids are allowed only when the match is complete. */
struct ft_jg_vocab {
    int n_vocab;
    const char *const *bytes; /* [n_vocab] decoded bytes, NULL = never allowed */
    const uint32_t *len;      /* [n_vocab] */
    const uint8_t *plain;     /* [n_vocab] 1: bytes are plain string content (no '"', '\\', < 0x20) */
    const struct ft_jg_vtab *tab; /* the mask walk's tables (a byte trie of the tokens, string
                                     content bitmasks), built by ft_jg_vocab_init; NULL: the
                                     per-token walk */
};
/* Builds the table from a token -> bytes function (special ids excluded). */
enum ft_status ft_jg_vocab_init(struct ft_jg_vocab *v, int n_vocab,
                                const char *(*bytes_of)(void *ctx, int32_t id, size_t *len,
                                                        int *special),
                                void *ctx);
void ft_jg_vocab_free(struct ft_jg_vocab *v);

/* The tokens that may come next in st as a bitmask: bit (id & 31) of words[id >> 5] is set
 * when token id is allowed (words: [(n_vocab + 31) / 32]; bits past n_vocab are left 0). end:
 * the stop token ids (the first FT_JG_MAX_END; later ones count as ordinary tokens), allowed
 * only when the match is complete, or when no other token at all fits (cannot happen for a
 * well-formed grammar). One walk over the vocabulary's byte trie (shared prefixes fed once, a
 * refused byte skipping every token under it; string content mostly from precomputed
 * bitmasks), exact: bit for bit the per-token walk's (ft_jg_allow_ref). The engine sends these
 * words to the GPU backend's draw (engine/sample.h's struct ft_logit_mask bits). */
#define FT_JG_MAX_END 16
void ft_jg_allow(const struct ft_jg *g, const struct ft_jg_state *st, const struct ft_jg_vocab *v,
                 const int32_t *end, int n_end, uint32_t *words);
/* The same bits as ft_jg_allow by the per-token walk (each token's bytes fed from st, plain
 * tokens inside an unbounded string taken whole): the reference ft_jg_allow is held equal to
 * (tests/test_json_grammar.c, bench/bench_grammar.c); about 10-100x slower. */
void ft_jg_allow_ref(const struct ft_jg *g, const struct ft_jg_state *st,
                     const struct ft_jg_vocab *v, const int32_t *end, int n_end, uint32_t *words);
/* Sets logits[id] = -INFINITY for every token ft_jg_allow leaves out (the same walk: the two
 * never disagree) and leaves the others as they were. The server wraps it into
 * engine/sample.h's struct ft_logit_mask. */
void ft_jg_mask(const struct ft_jg *g, const struct ft_jg_state *st, const struct ft_jg_vocab *v,
                const int32_t *end, int n_end, float *logits);
/* 1 when token id may come next in state st (end ids excluded: see ft_jg_mask). */
int ft_jg_token_ok(const struct ft_jg *g, const struct ft_jg_state *st, const struct ft_jg_vocab *v,
                   int32_t id);

#endif
