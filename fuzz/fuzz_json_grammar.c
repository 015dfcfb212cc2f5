/* fuzz_json_grammar.c — libFuzzer target for text/json_grammar: the input up to the first NUL
 * byte is a JSON Schema (compiled strictly and leniently), the rest a document matched against
 * it byte by byte. Any schema either fails with a status or compiles; matching never crashes,
 * and a document the matcher accepts is valid JSON (jansson parses it). Single-threaded. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/json_grammar.h"

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
    json_decref(schema);
    return 0;
}
