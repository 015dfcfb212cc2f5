/* fuzz_json_grammar.c — libFuzzer target for text/json_grammar: the input up to the first NUL
 * byte is a JSON Schema (compiled strictly and leniently), the rest a document matched against
 * it byte by byte. Any schema either fails with a status or compiles; matching never crashes,
 * and a document the matcher accepts is valid JSON (jansson parses it). The schema is also the
 * parameters of a tool forced in every family's call format (text/tool_parse.h), matched
 * against the family's open marker followed by the document: an accepted text must read back
 * through the server's text pipeline and the family's parser into at least one call whose
 * arguments are a JSON object. Single-threaded. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/sse.h"
#include "text/json_grammar.h"
#include "text/tool_parse.h"

/* A forced call text of format f reads back into calls (aborts otherwise). */
static void read_back(enum ft_tool_fmt f, const json_t *tools, const char *text, size_t n) {
    struct ft_think th;
    struct ft_sbuf r = {0}, c = {0};
    ft_think_init(&th, 0, f == FT_TOOLS_HARMONY);
    ft_think_push(&th, text, n, &r, &c);
    ft_think_flush(&th, &r, &c);
    ft_think_free(&th);
    struct ft_tool_parser p;
    ft_tool_parser_init(&p, f, tools);
    ft_tool_parser_push(&p, c.p ? c.p : "", c.n);
    ft_tool_parser_finish(&p);
    int ok = p.n_calls > 0 && !p.oom;
    for (int i = 0; ok && i < p.n_calls; i++) {
        json_t *a = json_loads(p.calls[i].args, 0, NULL);
        ok = json_is_object(a);
        json_decref(a);
    }
    if (!ok) abort();
    ft_tool_parser_free(&p);
    ft_sbuf_free(&r);
    ft_sbuf_free(&c);
}

static void calls(json_t *schema, const char *doc, size_t nd) {
    json_t *tools = json_pack("[{s:s, s:{s:s, s:O}}]", "type", "function", "function", "name",
                              "f", "parameters", schema);
    for (int f = FT_TOOLS_HERMES; tools && f < FT_TOOLS_N; f++) {
        const struct ft_jg_calls_fmt *gf = ft_tool_fmt_grammar(f);
        struct ft_jg *g = NULL;
        if (!gf || ft_jg_compile_calls(tools, NULL, gf, &g) != FT_OK) continue;
        size_t no = strlen(gf->open);
        char *text = malloc(no + nd + 1);
        if (text) {
            memcpy(text, gf->open, no);
            memcpy(text + no, doc, nd);
            if (ft_jg_match(g, text, no + nd)) read_back(f, tools, text, no + nd);
        }
        free(text);
        ft_jg_free(g);
    }
    json_decref(tools);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t ns = nul ? (size_t)(nul - data) : size;
    const char *doc = nul ? (const char *)nul + 1 : "";
    size_t nd = nul ? size - ns - 1 : 0;
    json_t *schema = json_loadb((const char *)data, ns, JSON_DECODE_ANY, NULL);
    if (!schema) return 0;
    for (int strict = 0; strict < 2; strict++) {
        struct ft_jg *g = NULL;
        if (ft_jg_compile_schema(schema, strict, &g) != FT_OK) continue;
        if (ft_jg_match(g, doc, nd)) {
            json_t *v = json_loadb(doc, nd, JSON_DECODE_ANY, NULL);
            /* jansson refuses integers past int64 and some huge exponents; the grammar keeps
             * integers short, so an accepted document must parse */
            if (!v) abort();
            json_decref(v);
        }
        ft_jg_free(g);
    }
    if (json_is_object(schema)) calls(schema, doc, nd);
    json_decref(schema);
    return 0;
}
