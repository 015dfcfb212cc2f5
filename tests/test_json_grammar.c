/* test_json_grammar.c — the JSON Schema grammar (text/json_grammar.h): byte-level matching of
 * valid and invalid documents per keyword, the errors naming unsupported keywords, tool-call
 * sequences in the Hermes and Llama-3 formats, and token masks over a real tokenizer (the
 * qwen3_moe fixture's): random walks through the mask always end in a document that parses and
 * fits the schema. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/status.h"
#include "core/timer.h"
#include "test.h"
#include "text/json_grammar.h"
#include "text/tok_bytes.h"
#include "text/tokenizer.h"
#include "text/tool_parse.h"

static struct ft_jg *schema(const char *text, int strict) {
    json_error_t e;
    json_t *s = json_loads(text, JSON_DECODE_ANY, &e);
    if (!s) {
        fprintf(stderr, "  bad test schema: %s\n", e.text);
        return NULL;
    }
    struct ft_jg *g = NULL;
    enum ft_status st = ft_jg_compile_schema(s, strict, &g);
    json_decref(s);
    if (st != FT_OK) fprintf(stderr, "  compile: %s\n", ft_error());
    return g;
}

static int match(const struct ft_jg *g, const char *s) { return ft_jg_match(g, s, strlen(s)); }

TEST(types_and_required) {
    struct ft_jg *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                             "\"age\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},"
                             "\"ok\":{\"type\":\"boolean\"},\"none\":{\"type\":\"null\"}},"
                             "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}", 1);
    EXPECT(g != NULL);
    if (!g) return;
    EXPECT(match(g, "{\"name\":\"Bo\",\"age\":3}"));
    EXPECT(match(g, "{ \"age\": -12 , \"name\" : \"x\\\"\\u00e9\\n\", \"ok\": true, \"none\": null}"));
    EXPECT(match(g, "{\"name\":\"\",\"age\":0,\"score\":-1.5e+3}"));
    EXPECT(match(g, "\n{\"name\":\"a\",\"age\":1}\n"));
    EXPECT(!match(g, "{\"name\":\"Bo\"}"));                 /* age required */
    EXPECT(!match(g, "{\"name\":\"Bo\",\"age\":3.5}"));     /* integer */
    EXPECT(!match(g, "{\"name\":\"Bo\",\"age\":03}"));      /* leading zero */
    EXPECT(!match(g, "{\"name\":\"Bo\",\"age\":3,\"x\":1}")); /* no other keys */
    EXPECT(!match(g, "{\"name\":1,\"age\":3}"));
    EXPECT(!match(g, "{\"name\":\"a\",\"age\":1,}"));
    EXPECT(!match(g, "{\"name\":\"a\nb\",\"age\":1}"));     /* raw newline in a string */
    EXPECT(!match(g, "{\"name\":\"a\",\"age\":1"));         /* not closed */
    EXPECT(!match(g, "[]"));
    /* whitespace runs are bounded */
    char ws[128];
    snprintf(ws, sizeof ws, "{%*s\"name\":\"a\",\"age\":1}", FT_JG_MAX_WS + 1, "");
    EXPECT(!match(g, ws));
    ft_jg_free(g);
}

TEST(enums_arrays_nesting_refs) {
    struct ft_jg *g = schema(
        "{\"type\":\"object\",\"properties\":{"
        "\"color\":{\"enum\":[\"red\",\"green\",1,10,null]},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},"
        "\"minItems\":1,\"maxItems\":2},"
        "\"pt\":{\"$ref\":\"#/$defs/P\"},"
        "\"opt\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},"
        "\"k\":{\"const\":\"fixed\"}},"
        "\"required\":[\"color\",\"tags\"],"
        "\"$defs\":{\"P\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},"
        "\"required\":[\"x\"]}}}", 1);
    EXPECT(g != NULL);
    if (!g) return;
    EXPECT(match(g, "{\"color\":\"red\",\"tags\":[\"a\"]}"));
    EXPECT(match(g, "{\"color\":10,\"tags\":[\"abc\",\"\"],\"pt\":{\"x\":0.25}}"));
    EXPECT(match(g, "{\"color\":1,\"tags\":[\"a\"],\"opt\":null,\"k\":\"fixed\"}"));
    EXPECT(match(g, "{\"color\":null,\"tags\":[\"a\"],\"opt\":\"s\"}"));
    EXPECT(!match(g, "{\"color\":\"blue\",\"tags\":[\"a\"]}"));
    EXPECT(!match(g, "{\"color\":2,\"tags\":[\"a\"]}"));
    EXPECT(!match(g, "{\"color\":\"red\",\"tags\":[]}"));            /* minItems */
    EXPECT(!match(g, "{\"color\":\"red\",\"tags\":[\"a\",\"b\",\"c\"]}")); /* maxItems */
    EXPECT(!match(g, "{\"color\":\"red\",\"tags\":[\"abcd\"]}"));    /* maxLength */
    EXPECT(!match(g, "{\"color\":\"red\",\"tags\":[\"a\"],\"pt\":{}}")); /* x required */
    EXPECT(!match(g, "{\"color\":\"red\",\"tags\":[\"a\"],\"k\":\"other\"}"));
    ft_jg_free(g);
    /* recursive $ref */
    g = schema("{\"$ref\":\"#/$defs/N\",\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":"
               "{\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/N\"}}}}}}", 1);
    EXPECT(g != NULL);
    if (g) {
        EXPECT(match(g, "{\"kids\":[{\"kids\":[{}]},{}]}"));
        EXPECT(!match(g, "{\"kids\":[1]}"));
    }
    ft_jg_free(g);
}

TEST(any_json_object) {
    struct ft_jg *g = NULL;
    EXPECT_OK(ft_jg_compile_object(&g));
    EXPECT(match(g, "{}"));
    EXPECT(match(g, "{\"a\":[1,{\"b\":null},\"x\",true,-0.5e2],\"c\":{}}"));
    EXPECT(!match(g, "[1]"));
    EXPECT(!match(g, "\"s\""));
    EXPECT(!match(g, "{\"a\":tru}"));
    EXPECT(!match(g, "{\"a\":1}x"));
    ft_jg_free(g);
    /* numbers every JSON parser reads as a double: two exponent digits at most (the fuzzer's
     * 66e66666 is no number jansson accepts) */
    g = schema("{\"*s\":{\"a\":4}}", 0);
    if (!g) return;
    EXPECT(match(g, "66e66") && match(g, "-1.5E-99") && match(g, "2e+9"));
    EXPECT(!match(g, "66e666") && !match(g, "66e66666") && !match(g, "1e+100"));
    /* strings: \u escapes but for surrogates (the fuzzer's lone \udcec) */
    EXPECT(match(g, "\"a\\u00e9\\uecec\"") && !match(g, "\"\\udcec\"") && !match(g, "\"\\uD83D\\uDE00\"") &&
           !match(g, "\"\\u0000\""));
    ft_jg_free(g);
}

TEST(unsupported_keywords_are_named) {
    struct ft_jg *g = NULL;
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
                           "\"pattern\":\"^x\"}}}", 0, NULL);
    EXPECT_EQ(ft_jg_compile_schema(s, 1, &g), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "\"pattern\"");
    EXPECT_CONTAINS(ft_error(), "#/properties/a");
    EXPECT(g == NULL);
    EXPECT_OK(ft_jg_compile_schema(s, 0, &g)); /* lenient: ignored */
    EXPECT(match(g, "{\"a\":\"y\"}"));
    ft_jg_free(g);
    json_decref(s);
    g = NULL;
    s = json_loads("{\"type\":\"wat\"}", 0, NULL);
    EXPECT_EQ(ft_jg_compile_schema(s, 1, &g), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "wat");
    json_decref(s);
    s = json_loads("{\"anyOf\":[{\"type\":\"object\"},{\"type\":\"object\"}]}", 0, NULL);
    EXPECT_EQ(ft_jg_compile_schema(s, 1, &g), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "overlap");
    json_decref(s);
    s = json_loads("{\"$ref\":\"http://x/y\"}", 0, NULL);
    EXPECT_EQ(ft_jg_compile_schema(s, 1, &g), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "$ref");
    json_decref(s);
    s = json_loads("{\"type\":\"object\",\"required\":[\"zz\"],\"properties\":{}}", 0, NULL);
    EXPECT_EQ(ft_jg_compile_schema(s, 1, &g), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "required");
    json_decref(s);
}

static json_t *tools_json(void) {
    return json_loads(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":"
        "[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]", 0, NULL);
}

TEST(tool_call_sequences) {
    json_t *tools = tools_json();
    struct ft_jg *g = NULL;
    EXPECT_OK(ft_jg_compile_calls(tools, NULL, ft_tool_fmt_grammar(FT_TOOLS_HERMES), &g));
    EXPECT(match(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                    "\"Paris\"}}\n</tool_call>"));
    EXPECT(match(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"));
    EXPECT(match(g, "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}\n"
                    "</tool_call>"));
    EXPECT(!match(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
    EXPECT(!match(g, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
    EXPECT(!match(g, "Sure! <tool_call>"));
    EXPECT(!match(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}"));
    ft_jg_free(g);
    /* named: only that function */
    EXPECT_OK(ft_jg_compile_calls(tools, "get_time", ft_tool_fmt_grammar(FT_TOOLS_HERMES), &g));
    EXPECT(match(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
    EXPECT(!match(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                     "\"P\"}}\n</tool_call>"));
    ft_jg_free(g);
    EXPECT_EQ(ft_jg_compile_calls(tools, "missing", ft_tool_fmt_grammar(FT_TOOLS_HERMES), &g),
              FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "missing");
    /* llama3: bare objects with "parameters" */
    EXPECT_OK(ft_jg_compile_calls(tools, NULL, ft_tool_fmt_grammar(FT_TOOLS_LLAMA3), &g));
    EXPECT(match(g, "{\"name\": \"get_time\", \"parameters\": {}}"));
    EXPECT(match(g, "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", "
                    "\"parameters\": {\"city\": \"a\"}}"));
    ft_jg_free(g);
    json_decref(tools);
}

/* --- token masks over the qwen3_moe fixture's tokenizer --- */

static const char *bytes_of(void *ctx, int32_t id, size_t *len, int *special) {
    return ft_tok_bytes(ctx, id, len, special);
}

/* Random walks through the mask from state start: each ends accepting and its text matches. */
static void walks(struct ft_tok *tok, const struct ft_jg_vocab *v, const struct ft_jg *g,
                  int32_t end, int n_walks, int max_steps, int (*check)(const char *)) {
    int V = v->n_vocab, done = 0;
    float *logits = malloc((size_t)V * sizeof *logits);
    uint64_t rng = 12345;
    int64_t t0 = ft_time_us(), masks = 0;
    for (int w = 0; w < n_walks; w++) {
        struct ft_jg_state st;
        ft_jg_start(g, &st);
        char text[8192];
        size_t n = 0;
        int ended = 0;
        for (int step = 0; step < max_steps && !ended; step++) {
            for (int i = 0; i < V; i++) logits[i] = (float)ft_rng_unit(&rng);
            /* lean on the end token once it is allowed, so walks finish */
            logits[end] = 2.0f;
            ft_jg_mask(g, &st, v, &end, 1, logits);
            masks++;
            int best = -1;
            for (int i = 0; i < V; i++)
                if (logits[i] != -INFINITY && (best < 0 || logits[i] > logits[best])) best = i;
            if (best < 0) break;
            if (best == end) {
                ended = 1;
                break;
            }
            size_t k;
            const char *b = ft_tok_bytes(tok, best, &k, NULL);
            if (n + k >= sizeof text) break;
            memcpy(text + n, b, k);
            n += k;
            EXPECT(ft_jg_feed(g, &st, b, k) == 0);
        }
        text[n] = 0;
        CHECK_(ended && ft_jg_match(g, text, n), "walk %d did not end in a match: %s", w, text);
        CHECK_(check(text), "walk %d: text does not fit the schema: %s", w, text);
        done += ended;
    }
    fprintf(stderr, "  %d walks, %.2f ms a mask over %d tokens\n", done,
            (ft_time_us() - t0) / 1000.0 / (double)(masks ? masks : 1), V);
    free(logits);
}

static size_t n_chars(const char *s) {
    size_t n = 0;
    for (; s && *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static int check_person(const char *s) {
    json_t *j = json_loads(s, 0, NULL);
    int ok = json_is_object(j) && json_is_string(json_object_get(j, "name")) &&
             n_chars(json_string_value(json_object_get(j, "name"))) <= 4 &&
             json_is_integer(json_object_get(j, "age")) &&
             json_is_array(json_object_get(j, "pets")) &&
             json_array_size(json_object_get(j, "pets")) <= 2;
    json_t *kind = json_object_get(j, "kind");
    ok &= json_is_string(kind) &&
          (!strcmp(json_string_value(kind), "cat") || !strcmp(json_string_value(kind), "dog"));
    json_decref(j);
    return ok;
}

static int check_call(const char *s) {
    const char *a = strstr(s, "<tool_call>\n"), *b = strstr(s, "\n</tool_call>");
    if (a != s || !b) return 0;
    json_t *j = json_loadb(a + 12, (size_t)(b - a - 12), 0, NULL);
    const char *name = json_string_value(json_object_get(j, "name"));
    int ok = name && (!strcmp(name, "get_weather") || !strcmp(name, "get_time")) &&
             json_is_object(json_object_get(j, "arguments"));
    json_decref(j);
    return ok;
}

TEST(token_masks_walk_to_valid_documents) {
    struct ft_tok *tok = NULL;
    EXPECT_OK(ft_tok_load(FT_TEST_DATA "/models/qwen3_moe", &tok));
    if (!tok) return;
    struct ft_jg_vocab v;
    EXPECT_OK(ft_jg_vocab_init(&v, ft_tok_n_vocab(tok), bytes_of, tok));
    int32_t end = ft_tok_find(tok, "<|im_end|>");
    EXPECT(end >= 0);
    struct ft_jg *g = schema("{\"type\":\"object\",\"properties\":{"
                             "\"name\":{\"type\":\"string\",\"maxLength\":4},"
                             "\"age\":{\"type\":\"integer\"},"
                             "\"kind\":{\"enum\":[\"cat\",\"dog\"]},"
                             "\"pets\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"type\":"
                             "\"boolean\"}}},"
                             "\"required\":[\"name\",\"age\",\"kind\",\"pets\"]}", 1);
    if (g) walks(tok, &v, g, end, 12, 400, check_person);
    ft_jg_free(g);
    /* a forced tool call */
    json_t *tools = tools_json();
    g = NULL;
    EXPECT_OK(ft_jg_compile_calls(tools, NULL, ft_tool_fmt_grammar(FT_TOOLS_HERMES), &g));
    if (g) {
        /* city strings are unbounded: the walk leans on '"' through the end bias only, so allow
         * long walks; a first step must be the marker */
        struct ft_jg_state st;
        ft_jg_start(g, &st);
        int32_t tc = ft_tok_find(tok, "<tool_call>");
        if (tc >= 0) EXPECT(ft_jg_token_ok(g, &st, &v, tc));
        int32_t hello = ft_tok_find(tok, "Hello");
        if (hello >= 0) EXPECT(!ft_jg_token_ok(g, &st, &v, hello));
        walks(tok, &v, g, end, 4, 2000, check_call);
    }
    ft_jg_free(g);
    json_decref(tools);
    ft_jg_vocab_free(&v);
    ft_tok_free(tok);
}

TEST_MAIN("json_grammar")
