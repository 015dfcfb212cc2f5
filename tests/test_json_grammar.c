/* test_json_grammar.c — the JSON Schema grammar (text/json_grammar.h): byte-level matching of
 * valid and invalid documents per keyword, the errors naming unsupported keywords, tool-call
 * sequences in every family's format (Hermes, Llama 3, Mistral, DeepSeek, Qwen3-Coder, GLM,
 * MiniMax, harmony): fixed documents in and out, and random byte walks through each grammar whose
 * text always goes through the server's text pipeline (the <think>/harmony splitter, then the
 * family's own parser, text/tool_parse.h) into calls whose arguments fit the tool's schema (a
 * small JSON Schema checker here); and token masks over a real tokenizer (the qwen3_moe
 * fixture's): random walks through the mask always end in a document that parses and fits; the
 * allow bitmask (ft_jg_allow) against the mask's -inf set and a token-by-token reference along
 * real documents over Qwen3's 151k vocabulary; the trie walk (ft_jg_allow) against the per-token
 * walk (ft_jg_allow_ref) at every byte of documents in every family's format; and the engine's
 * masked draws (the GPU backends' path, here on the CPU backend) against the host sampler's
 * masking. */
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
#include "server/sse.h"
#include "core/threadpool.h"
#include "engine/forward.h"
#include "model/model.h"
#define ENGINE_DRAWS_GRAMMAR
#include "engine_draws.h"

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

/* --- every family: forced calls read back by the family's parser --- */

static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"maxLength\":12},"
    "\"days\":{\"type\":\"integer\"},"
    "\"units\":{\"type\":\"string\",\"enum\":[\"metric\",\"imperial\"]},"
    "\"hot\":{\"type\":\"boolean\"},"
    "\"where\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"},"
    "\"tag\":{\"type\":\"string\",\"maxLength\":6}},\"required\":[\"lat\"]},"
    "\"note\":{\"description\":\"free text\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},\"maxItems\":2}},"
    "\"required\":[\"city\",\"days\",\"units\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_timezone\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{\"tz\":{\"type\":[\"string\",\"null\"],"
    "\"maxLength\":9}}}}}]";

/* A JSON Schema check of the keywords the tools above use (type, properties, required,
 * additionalProperties, enum, maxLength, items, maxItems). */
static int fits(const json_t *v, const json_t *s) {
    if (!s || !json_object_size(s)) return 1;
    json_t *ty = json_object_get(s, "type"), *e = json_object_get(s, "enum"), *x;
    size_t i;
    if (e) {
        int any = 0;
        json_array_foreach(e, i, x) any |= json_equal(x, v);
        if (!any) return 0;
    }
    if (ty) {
        int ok = 0;
        for (i = 0; i < (json_is_array(ty) ? json_array_size(ty) : 1); i++) {
            const char *t = json_string_value(json_is_array(ty) ? json_array_get(ty, i) : ty);
            ok |= (!strcmp(t, "string") && json_is_string(v)) ||
                  (!strcmp(t, "integer") && json_is_integer(v)) ||
                  (!strcmp(t, "number") && json_is_number(v)) ||
                  (!strcmp(t, "boolean") && json_is_boolean(v)) ||
                  (!strcmp(t, "null") && json_is_null(v)) ||
                  (!strcmp(t, "object") && json_is_object(v)) ||
                  (!strcmp(t, "array") && json_is_array(v));
        }
        if (!ok) return 0;
    }
    json_t *ml = json_object_get(s, "maxLength");
    if (ml && json_is_string(v) && n_chars(json_string_value(v)) > (size_t)json_integer_value(ml))
        return 0;
    if (json_is_object(v)) {
        json_t *props = json_object_get(s, "properties");
        json_array_foreach(json_object_get(s, "required"), i, x)
            if (!json_object_get(v, json_string_value(x))) return 0;
        const char *k;
        json_object_foreach((json_t *)v, k, x) {
            json_t *ps = json_object_get(props, k);
            if (!ps && props && json_is_false(json_object_get(s, "additionalProperties"))) return 0;
            if (ps && !fits(x, ps)) return 0;
        }
    }
    if (json_is_array(v)) {
        json_t *mi = json_object_get(s, "maxItems");
        if (mi && json_array_size(v) > (size_t)json_integer_value(mi)) return 0;
        json_array_foreach(v, i, x) if (!fits(x, json_object_get(s, "items"))) return 0;
    }
    return 1;
}

/* The calls text through the server's pipeline (in_think: the prompt opened <think>; harmony:
 * gpt-oss channels) and the family's parser: 1 when it gives >= 1 calls, only blanks as
 * content, each a declared tool whose arguments fit its schema. */
static int reads_back(enum ft_tool_fmt fmt, const json_t *tools, const char *only, int in_think,
                      const char *text, size_t n, int *n_calls) {
    struct ft_think th;
    struct ft_sbuf r = {0}, c = {0};
    ft_think_init(&th, in_think, fmt == FT_TOOLS_HARMONY);
    ft_think_push(&th, text, n, &r, &c);
    ft_think_flush(&th, &r, &c);
    ft_think_free(&th);
    struct ft_tool_parser p;
    ft_tool_parser_init(&p, fmt, tools);
    ft_tool_parser_push(&p, c.p ? c.p : "", c.n);
    ft_tool_parser_finish(&p);
    int ok = p.n_calls > 0 && !r.n;
    for (size_t i = 0; ok && i < p.n_out; i++) ok = strchr(" \n\t\r", p.out[i]) != NULL;
    for (int i = 0; ok && i < p.n_calls; i++) {
        json_t *schema = NULL, *t;
        int found = 0;
        size_t k;
        json_array_foreach((json_t *)tools, k, t) {
            json_t *fn = json_object_get(t, "function");
            if (strcmp(json_string_value(json_object_get(fn, "name")), p.calls[i].name)) continue;
            found = 1;
            schema = json_object_get(fn, "parameters");
        }
        json_t *args = json_loads(p.calls[i].args, 0, NULL);
        ok = found && (!only || !strcmp(only, p.calls[i].name)) && json_is_object(args) &&
             fits(args, schema);
        json_decref(args);
    }
    *n_calls = p.n_calls;
    ft_tool_parser_free(&p);
    ft_sbuf_free(&r);
    ft_sbuf_free(&c);
    return ok;
}

/* A random walk through g's bytes: each step a random allowed byte, or (more often as the walk
 * grows) one of the closing texts when it fits whole; ends where the text is complete. */
static size_t walk_bytes(const struct ft_jg *g, uint64_t *rng, const char *const *closers,
                         char *out, size_t cap) {
    struct ft_jg_state st;
    ft_jg_start(g, &st);
    size_t n = 0;
    for (int step = 0; n + 64 < cap && step < 20000; step++) {
        if (ft_jg_accepting(g, &st) && ft_rng_unit(rng) < 0.4) return n;
        if (ft_rng_unit(rng) < (step < 200 ? 0.2 : 0.8)) {
            int k = 0, fed = 0;
            while (closers[k]) k++;
            for (int tries = 0; tries < k && !fed; tries++) {
                const char *m = closers[(int)(ft_rng_unit(rng) * k) % k];
                struct ft_jg_state t = st;
                if (ft_jg_feed(g, &t, m, strlen(m)) == 0 && n + strlen(m) + 64 < cap) {
                    memcpy(out + n, m, strlen(m));
                    n += strlen(m), st = t, fed = 1;
                }
            }
            if (fed) continue;
        }
        unsigned char ok[256];
        int n_ok = 0;
        for (int b = 1; b < 256; b++) {
            struct ft_jg_state t = st;
            char c = (char)b;
            if (ft_jg_feed(g, &t, &c, 1) == 0) ok[n_ok++] = (unsigned char)b;
        }
        if (!n_ok) return ft_jg_accepting(g, &st) ? n : (size_t)-1;
        char c = (char)ok[(int)(ft_rng_unit(rng) * n_ok) % n_ok];
        ft_jg_feed(g, &st, &c, 1);
        out[n++] = c;
    }
    if (!ft_jg_accepting(g, &st)) /* for the failure message */
        fprintf(stderr, "  walk stuck after %zu bytes: ...%.120s\n", n, out + (n > 120 ? n - 120 : 0));
    return ft_jg_accepting(g, &st) ? n : (size_t)-1;
}

struct fam_case {
    enum ft_tool_fmt fmt;
    int in_think;                /* the prompt opened <think> (MiniMax's does) */
    const char *good[3], *bad[4]; /* calls of get_weather / get_time that must (not) match */
};

static const struct fam_case k_cases[] = {
    {FT_TOOLS_HERMES, 0,
     {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"},
     {"<tool_call>\n{\"name\": \"get_timezone\", \"arguments\": {\"tz\": \"a</tool_call>\"}}\n"
      "</tool_call>"}},
    {FT_TOOLS_LLAMA3, 0, {"{\"name\": \"get_time\", \"parameters\": {}}"}, {"get_time"}},
    {FT_TOOLS_MISTRAL, 0, {"[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]"},
     {"[TOOL_CALLS]get_time[ARGS]{}"}},
    {FT_TOOLS_DEEPSEEK, 0,
     {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Paris\", \"days\": 3, \"units\": \"metric\"}\n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
      "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
     {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_timezone\n```json\n"
      "{\"tz\": \"```\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{}\n"
      "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}},
    {FT_TOOLS_QWEN3_CODER, 0,
     {"<tool_call>\n<function=get_weather>\n<parameter=units>\nimperial\n</parameter>\n"
      "<parameter=city>\nNew\nYork\n</parameter>\n<parameter=days>\n-2\n</parameter>\n"
      "<parameter=where>\n{\"lat\": 1.5}\n</parameter>\n<parameter=note>\n42\n</parameter>\n"
      "</function>\n</tool_call>",
      "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n<tool_call>\n"
      "<function=get_timezone>\n<parameter=tz>\n\n</parameter>\n</function>\n</tool_call>"},
     {"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", /* units required */
      "<tool_call>\n<function=get_timezone>\n<parameter=tz>\na</function>\n</parameter>\n"
      "</function>\n</tool_call>",
      "<tool_call>\n<function=get_timezone>\n<parameter=tz>\n0123456789\n</parameter>\n"
      "</function>\n</tool_call>", /* maxLength 9 */
      "<tool_call>\n<function=get_time>\n<parameter=x>\n1\n</parameter>\n</function>\n"
      "</tool_call>"}},
    {FT_TOOLS_GLM, 0,
     {"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
      "<arg_key>days</arg_key>\n<arg_value>7</arg_value>\n<arg_key>units</arg_key>\n"
      "<arg_value>metric</arg_value>\n<arg_key>hot</arg_key>\n<arg_value>false</arg_value>\n"
      "</tool_call>",
      "<tool_call>get_time\n</tool_call>\n<tool_call>get_timezone\n<arg_key>tz</arg_key>\n"
      "<arg_value> x </arg_value>\n</tool_call>"},
     {"<tool_call>get_timezone\n<arg_key>tz</arg_key>\n<arg_value>a</tool_call></arg_value>\n"
      "</tool_call>",
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
      "<arg_key>days</arg_key>\n<arg_value>7.5</arg_value>\n<arg_key>units</arg_key>\n"
      "<arg_value>metric</arg_value>\n</tool_call>"}},
    {FT_TOOLS_MINIMAX, 1,
     {"</think>\n\n<minimax:tool_call>\n<invoke name=\"get_time\">\n</invoke>\n"
      "<invoke name=\"get_timezone\">\n<parameter name=\"tz\">a b</parameter>\n</invoke>\n"
      "</minimax:tool_call>"},
     {"</think>\n\n<minimax:tool_call>\n<invoke name=\"get_timezone\">\n<parameter name=\"tz\">\n"
      "a</parameter>\n</invoke>\n</minimax:tool_call>",
      "</think>\n\n<minimax:tool_call>\n<invoke name=\"get_timezone\">\n<parameter name=\"tz\">"
      "a\n</parameter>\n</invoke>\n</minimax:tool_call>",
      "<minimax:tool_call>\n<invoke name=\"get_time\">\n</invoke>\n</minimax:tool_call>"}},
    {FT_TOOLS_HARMONY, 0,
     {"<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}",
      "<|channel|>commentary to=functions.get_timezone <|constrain|>json<|message|>"
      "{\"tz\": null}"},
     {"<|channel|>commentary to=functions.get_timezone <|constrain|>json<|message|>"
      "{\"tz\": \"<|end|>\"}",
      "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>"}},
};

/* The grammar of case c as the server builds it (sep dropped: one call; in_think: "</think>"
 * first). */
static struct ft_jg *fam_grammar(const struct fam_case *c, const json_t *tools, const char *only,
                                 int one) {
    struct ft_jg_calls_fmt f = *ft_tool_fmt_grammar(c->fmt);
    char open[256];
    if (one) f.sep = NULL;
    if (c->in_think) snprintf(open, sizeof open, "</think>\n\n%s", f.open), f.open = open;
    struct ft_jg *g = NULL;
    if (ft_jg_compile_calls(tools, only, &f, &g) != FT_OK)
        fprintf(stderr, "  %s: %s\n", ft_tool_fmt_name(c->fmt), ft_error());
    return g;
}

TEST(every_family_forced_calls_read_back) {
    json_t *tools = json_loads(k_tools, 0, NULL);
    EXPECT(tools != NULL);
    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0]; ci++) {
        const struct fam_case *c = &k_cases[ci];
        const char *name = ft_tool_fmt_name(c->fmt);
        struct ft_jg *g = fam_grammar(c, tools, NULL, 0);
        CHECK_(g != NULL, "%s: compiles", name);
        if (!g) continue;
        int nc = 0;
        for (int i = 0; i < 3 && c->good[i]; i++) {
            const char *t = c->good[i];
            CHECK_(match(g, t), "%s: matches %s", name, t);
            CHECK_(reads_back(c->fmt, tools, NULL, c->in_think, t, strlen(t), &nc),
                   "%s: parses back %s", name, t);
        }
        for (int i = 0; i < 4 && c->bad[i]; i++)
            CHECK_(!match(g, c->bad[i]), "%s: refuses %s", name, c->bad[i]);
        /* random walks: any and named, several calls and one */
        const struct ft_jg_calls_fmt *f = ft_tool_fmt_grammar(c->fmt);
        const char *closers[] = {"\"", "}", "]", "0", "true", "null", ",",
                                 f->kind == FT_JG_CALLS_XML ? f->value_end : "}",
                                 f->param_end ? f->param_end : "\"", f->call_end ? f->call_end : "}",
                                 f->close, f->close_alt ? f->close_alt : "]",
                                 f->param_open ? f->param_open : ",", NULL};
        uint64_t rng = 1000 + ci;
        int walks = 0, multi = 0, named_ok = 1;
        for (int pass = 0; pass < 3; pass++) {
            const char *only = pass == 2 ? "get_weather" : NULL;
            struct ft_jg *w = pass == 0 ? g : fam_grammar(c, tools, only, pass == 2);
            for (int k = 0; w && k < 40; k++) {
                static char text[1 << 16];
                size_t n = walk_bytes(w, &rng, closers, text, sizeof text);
                CHECK_(n != (size_t)-1, "%s: walk %d/%d ends complete", name, pass, k);
                if (n == (size_t)-1) continue;
                CHECK_(ft_jg_match(w, text, n), "%s: walk matches", name);
                int ok = reads_back(c->fmt, tools, only, c->in_think, text, n, &nc);
                CHECK_(ok, "%s: walk %d/%d reads back into valid calls: %.*s", name, pass, k,
                       (int)n, text);
                walks += ok, multi += nc > 1, named_ok &= !only || ok;
            }
            if (w != g) ft_jg_free(w);
        }
        fprintf(stderr, "  %s: %d walks read back, %d with several calls\n", name, walks, multi);
        EXPECT(named_ok);
        if (c->fmt != FT_TOOLS_HARMONY) CHECK_(multi > 0, "%s: walks with several calls", name);
        ft_jg_free(g);
    }
    json_decref(tools);
}

TEST(calls_grammar_errors_name_the_problem) {
    struct ft_jg *g = NULL;
    json_t *t = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{"
                           "\"type\":\"object\",\"properties\":{\"a b\":{\"type\":\"string\"}}}}}]",
                           0, NULL);
    EXPECT_EQ(ft_jg_compile_calls(t, NULL, ft_tool_fmt_grammar(FT_TOOLS_QWEN3_CODER), &g),
              FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "a b");
    json_decref(t);
    t = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{"
                   "\"type\":\"object\",\"properties\":{\"n\":{\"enum\":[1,2]}}}}}]", 0, NULL);
    EXPECT_EQ(ft_jg_compile_calls(t, NULL, ft_tool_fmt_grammar(FT_TOOLS_GLM), &g),
              FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "'n'");
    EXPECT_OK(ft_jg_compile_calls(t, NULL, ft_tool_fmt_grammar(FT_TOOLS_HERMES), &g));
    ft_jg_free(g);
    json_decref(t);
    t = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"my tool\"}}]", 0, NULL);
    EXPECT_EQ(ft_jg_compile_calls(t, NULL, ft_tool_fmt_grammar(FT_TOOLS_HARMONY), &g),
              FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "my tool");
    json_decref(t);
}

/* --- the allow bitmask over a real vocabulary --- */

/* As server/constrain.c: special tokens out of reach but the families' tool-call markers. */
static const char *bytes_of_markers(void *ctx, int32_t id, size_t *len, int *special) {
    const char *b = ft_tok_bytes(ctx, id, len, special);
    if (b && *special)
        for (int f = 0; f < FT_TOOLS_N; f++)
            for (const char *const *m = ft_tool_fmt_markers(f); *m; m++)
                if (strlen(*m) == *len && !memcmp(*m, b, *len)) *special = 0;
    return b;
}

/* Along text tokenised by tok, at every state: ft_jg_allow's bits equal the -inf set ft_jg_mask
 * leaves and a token-by-token reference (ft_jg_token_ok; the end ids allowed exactly when the
 * match is complete or nothing else fits), and the next token of the text is allowed. Returns
 * the states checked (-1: a mismatch); *us: microseconds spent in ft_jg_allow. */
static int bits_along(const struct ft_tok *tok, const struct ft_jg_vocab *v, const struct ft_jg *g,
                      const char *text, const int32_t *end, int n_end, double *us) {
    const int V = v->n_vocab, nw = ft_mask_words(V);
    int32_t *ids = NULL;
    int n = 0, states = 0, bad = 0;
    if (ft_tok_encode(tok, text, strlen(text), 0, &ids, &n) != FT_OK) return -1;
    uint32_t *w = malloc((size_t)nw * 4);
    float *lg = malloc((size_t)V * 4);
    struct ft_jg_state st;
    ft_jg_start(g, &st);
    for (int t = 0; t <= n && !bad; t++) {
        const int64_t t0 = ft_time_us();
        ft_jg_allow(g, &st, v, end, n_end, w);
        *us += (double)(ft_time_us() - t0);
        for (int i = 0; i < V; i++) lg[i] = 1.0f;
        ft_jg_mask(g, &st, v, end, n_end, lg);
        int any = 0;
        for (int i = 0; i < V; i++) any |= ft_jg_token_ok(g, &st, v, i);
        const int ends = ft_jg_accepting(g, &st) || !any;
        for (int i = 0; i < V && bad < 5; i++) {
            int is_end = 0;
            for (int k = 0; k < n_end; k++) is_end |= end[k] == i;
            const int bit = (int)(w[i >> 5] >> (i & 31) & 1), ref = is_end ? ends : ft_jg_token_ok(g, &st, v, i);
            if (bit != (lg[i] != -INFINITY) || bit != ref) {
                fprintf(stderr, "  state %d of \"%.40s\": token %d bit %d, mask %d, reference %d\n", t,
                        text, i, bit, lg[i] != -INFINITY, ref);
                bad++;
            }
        }
        for (int i = V; i < 32 * nw; i++) bad += (int)(w[i >> 5] >> (i & 31) & 1); /* past V: 0 */
        states++;
        if (t == n) break;
        CHECK_(w[ids[t] >> 5] >> (ids[t] & 31) & 1, "\"%.40s\": its token %d (%d) is not allowed", text, t, ids[t]);
        if (!v->bytes[ids[t]] || ft_jg_feed(g, &st, v->bytes[ids[t]], v->len[ids[t]])) break;
    }
    CHECK_(ft_jg_accepting(g, &st), "\"%.60s\" ends accepted", text);
    free(ids), free(w), free(lg);
    return bad ? -1 : states;
}

TEST(allow_bits_equal_the_mask_on_a_real_vocab) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p jgtok/qwen3 && xz -dc '%s/tok/qwen3/tokenizer.json.xz' > "
             "jgtok/qwen3/tokenizer.json && cp '%s/tok/qwen3/tokenizer_config.json' jgtok/qwen3/",
             FT_TEST_DATA, FT_TEST_DATA);
    struct ft_tok *tok = NULL;
    EXPECT(system(cmd) == 0);
    EXPECT_OK(ft_tok_load("jgtok/qwen3", &tok));
    if (!tok) return;
    struct ft_jg_vocab v;
    EXPECT_OK(ft_jg_vocab_init(&v, ft_tok_n_vocab(tok), bytes_of_markers, tok));
    const int32_t end[2] = {ft_tok_find(tok, "<|im_end|>"), ft_tok_find(tok, "<|endoftext|>")};
    EXPECT(end[0] >= 0 && end[1] >= 0 && v.n_vocab > 150000);
    int states = 0, bad = 0;
    double us = 0;
    struct ft_jg *g = schema("{\"type\":\"object\",\"properties\":{"
                             "\"name\":{\"type\":\"string\",\"maxLength\":12},"
                             "\"age\":{\"type\":\"integer\"},"
                             "\"kind\":{\"enum\":[\"cat\",\"dog\"]},"
                             "\"pets\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"type\":"
                             "\"boolean\"}}},"
                             "\"required\":[\"name\",\"age\",\"kind\",\"pets\"]}", 1);
    const char *docs[] = {"{\"name\": \"Ada Lovelace\", \"age\": 36, \"kind\": \"cat\", \"pets\": [true, false]}",
                          "{\n  \"name\": \"\\u00e9t\u00e9\",\n  \"age\": -7,\n  \"kind\": \"dog\",\n  \"pets\": []\n}"};
    for (int d = 0; g && d < 2; d++) {
        const int k = bits_along(tok, &v, g, docs[d], end, 2, &us);
        CHECK_(k > 0, "schema document %d", d);
        states += k > 0 ? k : 0, bad += k < 0;
    }
    ft_jg_free(g);
    g = NULL;
    EXPECT_OK(ft_jg_compile_object(&g));
    if (g) {
        const int k = bits_along(tok, &v, g, "{\"a\": [1, 2.5e3, {\"b\": null}], \"c\": \"x y\", \"d\": true}", end, 2, &us);
        CHECK_(k > 0, "json_object document");
        states += k > 0 ? k : 0, bad += k < 0;
    }
    ft_jg_free(g);
    json_t *tools = json_loads(k_tools, 0, NULL);
    for (size_t ci = 0; tools && ci < sizeof k_cases / sizeof k_cases[0]; ci++) {
        const struct fam_case *c = &k_cases[ci];
        if (c->fmt == FT_TOOLS_DEEPSEEK || c->fmt == FT_TOOLS_HARMONY || c->fmt == FT_TOOLS_MISTRAL)
            continue; /* their markers are not Qwen3 tokens */
        g = fam_grammar(c, tools, NULL, 0);
        for (int i = 0; g && i < 3 && c->good[i]; i++) {
            const int k = bits_along(tok, &v, g, c->good[i], end, 2, &us);
            CHECK_(k > 0, "%s document %d", ft_tool_fmt_name(c->fmt), i);
            states += k > 0 ? k : 0, bad += k < 0;
        }
        ft_jg_free(g);
    }
    json_decref(tools);
    fprintf(stderr, "  %d grammar states: bits = mask = reference; %.2f ms a bitmask over %d tokens\n",
            states, us / 1000.0 / (states ? states : 1), v.n_vocab);
    EXPECT_EQ(bad, 0);
    EXPECT(states > 150);
    ft_jg_vocab_free(&v);
    ft_tok_free(tok);
}

/* --- the trie walk (ft_jg_allow) against the per-token walk, at every byte --- */

/* At every byte prefix of text (mid-character, mid-marker, at and past a maxLength, and the dead
 * state after a refused byte): ft_jg_allow's words equal ft_jg_allow_ref's (the per-token walk)
 * and the -inf set of ft_jg_mask, and every ref_every-th state also the token-by-token
 * reference (ft_jg_token_ok, the end rule of json_grammar.h). Returns the states (-1: a
 * mismatch); *fast_us / *ref_us: time in the two walks. */
static int walk_equal_along(const struct ft_jg_vocab *v, const struct ft_jg *g, const int32_t *end,
                            const char *text, int ref_every, double *fast_us, double *ref_us) {
    const int V = v->n_vocab, nw = (V + 31) / 32;
    uint32_t *a = malloc((size_t)nw * 4), *b = malloc((size_t)nw * 4);
    float *lg = malloc((size_t)V * 4);
    struct ft_jg_state st;
    ft_jg_start(g, &st);
    const size_t n = strlen(text);
    int states = 0, bad = 0;
    for (size_t k = 0; k <= n && !bad; k++) {
        memset(a, 0xa5, (size_t)nw * 4), memset(b, 0x5a, (size_t)nw * 4);
        int64_t t0 = ft_time_us();
        ft_jg_allow(g, &st, v, end, 3, a);
        int64_t t1 = ft_time_us();
        ft_jg_allow_ref(g, &st, v, end, 3, b);
        *fast_us += (double)(t1 - t0), *ref_us += (double)(ft_time_us() - t1);
        for (int i = 0; i < V; i++) lg[i] = 0.5f;
        ft_jg_mask(g, &st, v, end, 3, lg);
        for (int i = 0; i < nw && bad < 3; i++)
            if (a[i] != b[i]) {
                fprintf(stderr, "  byte %zu of \"%.50s\": word %d: trie %08x, per-token %08x\n", k,
                        text, i, a[i], b[i]);
                bad++;
            }
        int any = 0;
        if (states % ref_every == 0)
            for (int i = 0; i < V; i++) any |= ft_jg_token_ok(g, &st, v, i);
        const int ends = ft_jg_accepting(g, &st) || !any;
        for (int i = 0; i < V && bad < 3; i++) {
            const int bit = (int)(a[i >> 5] >> (i & 31) & 1);
            int ref = bit;
            if (states % ref_every == 0)
                ref = i == end[0] || i == end[1] ? ends : ft_jg_token_ok(g, &st, v, i);
            if (bit != (lg[i] != -INFINITY) || bit != ref) {
                fprintf(stderr, "  byte %zu of \"%.50s\": token %d: bit %d, mask %d, reference %d\n",
                        k, text, i, bit, lg[i] != -INFINITY, ref);
                bad++;
            }
        }
        states++;
        if (k == n || st.dead) break;
        ft_jg_feed(g, &st, text + k, 1); /* a refused byte: the dead state is checked next */
    }
    free(a), free(b), free(lg);
    return bad ? -1 : states;
}

TEST(trie_walk_equals_the_per_token_walk) {
    struct ft_tok *tok = NULL;
    EXPECT_OK(ft_tok_load("jgtok/qwen3", &tok)); /* written by the test above */
    if (!tok) return;
    struct ft_jg_vocab v;
    EXPECT_OK(ft_jg_vocab_init(&v, ft_tok_n_vocab(tok), bytes_of_markers, tok));
    /* the stop ids, one repeated */
    const int32_t end[3] = {ft_tok_find(tok, "<|im_end|>"), ft_tok_find(tok, "<|endoftext|>"),
                            ft_tok_find(tok, "<|im_end|>")};
    int states = 0, bad = 0, docs = 0;
    double fast_us = 0, ref_us = 0;
    struct { const char *schema, *text; } k_docs[] = {
        /* nested objects, arrays, enums, strings near their maxLength, numbers, a union */
        {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
         "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":40},\"maxItems\":3},"
         "\"loc\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"},"
         "\"city\":{\"type\":\"string\",\"minLength\":2}},\"required\":[\"lat\"]},"
         "\"kind\":{\"enum\":[\"cat\",\"dog\",3,null]},"
         "\"opt\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},\"n\":{\"type\":\"integer\"},"
         "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"kind\"],\"additionalProperties\":false}",
         "{\"name\": \"\xc3\xa9t\xc3\xa9\xe6\x97\xa5\", \"tags\": [\"a\\\"b\\\\n\\u00e9 x\", "
         "\"a long one, here with words: forty max\", \"\"], \"loc\": {\"lat\": -12.5e3, "
         "\"city\": \"Z\xc3\xbcrich \xf0\x9f\x98\x80\"}, \"kind\": \"dog\", \"opt\": null, "
         "\"n\": 42, \"ok\": true}"},
        {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":40}}}",
         "{\"s\": \"0123456789012345678901234567890123456789\"}"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"number\"}}", "[0, -1.5E+10, 3e2, 18]"},
        {NULL, /* json_object: free keys */
         "{\"a\": [1, 2.5e3, {\"b\": null}], \"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87\": "
         "\"\xe6\x97\xa5\xe6\x9c\xac \\t\", \"c\": {\"d e\": false}}"},
        {NULL, "{\"a\": tru}"}, /* refused: the dead state */
    };
    for (size_t d = 0; d < sizeof k_docs / sizeof k_docs[0]; d++) {
        struct ft_jg *g = NULL;
        if (k_docs[d].schema) g = schema(k_docs[d].schema, 1);
        else EXPECT_OK(ft_jg_compile_object(&g));
        if (!g) continue;
        CHECK_(d == 4 || match(g, k_docs[d].text), "document %zu matches", d);
        const int k = walk_equal_along(&v, g, end, k_docs[d].text, 16, &fast_us, &ref_us);
        CHECK_(k > 0, "document %zu", d);
        states += k > 0 ? k : 0, bad += k < 0, docs++;
        ft_jg_free(g);
    }
    /* tool calls: JSON (forbidden texts' partial matches inside strings), tagged, XML (raw
     * values with partial ends and forbidden texts, value_no_nl) */
    json_t *tools = json_loads(k_tools, 0, NULL);
    struct { enum ft_tool_fmt fmt; int in_think; const char *text; } k_calls[] = {
        {FT_TOOLS_HERMES, 0,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a</tool_ca\", "
         "\"days\": 3, \"units\": \"metric\", \"note\": {\"k\": \"<b> \\u00e9</to\"}, "
         "\"tags\": [\"x<\", \"</\"]}}\n</tool_call>"},
        {FT_TOOLS_QWEN3_CODER, 0,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\n</par Yo\n</parameter>\n"
         "<parameter=days>\n-2\n</parameter>\n<parameter=units>\nmetric\n</parameter>\n"
         "<parameter=note>\n<b>\xe6\x97\xa5 \"q\" \\ </functio\n</parameter>\n</function>\n"
         "</tool_call>"},
        {FT_TOOLS_GLM, 0,
         "<tool_call>get_timezone\n<arg_key>tz</arg_key>\n<arg_value>\xc3\xa9</arg_v"
         "</arg_value>\n</tool_call>"},
        {FT_TOOLS_MINIMAX, 1,
         "</think>\n\n<minimax:tool_call>\n<invoke name=\"get_timezone\">\n<parameter name=\"tz\">"
         "a\nb</para</parameter>\n</invoke>\n</minimax:tool_call>"},
        {FT_TOOLS_DEEPSEEK, 0,
         "<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c><\xef\xbd\x9c"
         "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>function<\xef\xbd\x9c"
         "tool\xe2\x96\x81" "sep\xef\xbd\x9c>get_timezone\n```json\n{\"tz\": \"``a`\"}\n```"
         "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c><\xef\xbd\x9c"
         "tool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"},
        {FT_TOOLS_HARMONY, 0,
         "<|channel|>commentary to=functions.get_timezone <|constrain|>json<|message|>"
         "{\"tz\": \"<|en\"}"},
        {FT_TOOLS_LLAMA3, 0, "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": "
         "\"get_timezone\", \"parameters\": {\"tz\": null}}"},
    };
    for (size_t ci = 0; tools && ci < sizeof k_calls / sizeof k_calls[0]; ci++) {
        const struct fam_case c = {k_calls[ci].fmt, k_calls[ci].in_think, {NULL}, {NULL}};
        struct ft_jg *g = fam_grammar(&c, tools, NULL, 0);
        if (!g) continue;
        const char *name = ft_tool_fmt_name(c.fmt);
        CHECK_(match(g, k_calls[ci].text), "%s: the document matches", name);
        const int k = walk_equal_along(&v, g, end, k_calls[ci].text, 16, &fast_us, &ref_us);
        CHECK_(k > 0, "%s document", name);
        states += k > 0 ? k : 0, bad += k < 0, docs++;
        ft_jg_free(g);
        g = fam_grammar(&c, tools, "get_timezone", 1); /* named, one call: the start state */
        if (g) {
            const int k2 = walk_equal_along(&v, g, end, "", 1, &fast_us, &ref_us);
            states += k2 > 0 ? k2 : 0, bad += k2 < 0;
        }
        ft_jg_free(g);
    }
    /* a forbidden text beginning with a letter (no list of the tokens holding it: walked) */
    static const char *const forbid_bye[] = {"</tool_call>", "bye", NULL};
    struct ft_jg_calls_fmt f = *ft_tool_fmt_grammar(FT_TOOLS_HERMES);
    f.forbid = forbid_bye;
    struct ft_jg *g = NULL;
    if (tools) EXPECT_OK(ft_jg_compile_calls(tools, NULL, &f, &g));
    if (g) {
        const char *t = "<tool_call>\n{\"name\": \"get_timezone\", \"arguments\": {\"tz\": \"a by x\"}}"
                        "\n</tool_call>";
        CHECK_(match(g, t), "forbidden \"bye\": the document matches");
        const int k = walk_equal_along(&v, g, end, t, 16, &fast_us, &ref_us);
        CHECK_(k > 0, "forbidden \"bye\" document");
        states += k > 0 ? k : 0, bad += k < 0, docs++;
    }
    ft_jg_free(g);
    json_decref(tools);
    fprintf(stderr, "  %d states of %d documents, every byte: trie walk = per-token walk; "
            "%.3f ms a mask against %.3f ms\n", states, docs, fast_us / 1000.0 / (states ? states : 1),
            ref_us / 1000.0 / (states ? states : 1));
    EXPECT_EQ(bad, 0);
    EXPECT(states > 700);
    ft_jg_vocab_free(&v);
    ft_tok_free(tok);
}

/* --- the engine's masked draws, on the CPU backend (the GPU backends' path) --- */

/* ft_engine_forward_batch_draw with masked rows equals ft_sampler_draw_row on the masked logits,
 * and a JSON-schema request drawn by the engine (greedy, then seeded top-k/top-p sampling)
 * gives exactly the tokens of the host sampler masking the logits itself. */
TEST(engine_masked_draws_follow_the_grammar) {
    struct ft_pool *pool = NULL;
    struct ft_model *m = NULL;
    struct ft_tok *tok = NULL;
    EXPECT_OK(ft_pool_init(&pool, 2));
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/qwen3_moe", &m));
    EXPECT_OK(ft_tok_load(FT_TEST_DATA "/models/qwen3_moe", &tok));
    struct ft_engine_opts eo = {.max_ctx = 128, .max_chunk = 64, .kv_tokens = 512};
    struct ft_engine *e = NULL;
    if (m) EXPECT_OK(ft_engine_init(&e, m, pool, &eo));
    struct ft_jg_vocab v = {0};
    struct ft_jg *g = NULL;
    if (!e || !tok) goto done;
    int fills = 0;
    EXPECT_EQ(engine_masked_draws_agree(e, m->vocab, 6, &fills), 6);
    EXPECT_EQ(fills, 24);
    EXPECT_OK(ft_jg_vocab_init(&v, ft_tok_n_vocab(tok), bytes_of, tok));
    g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},"
               "\"kind\":{\"enum\":[\"cat\",\"dog\"]},\"n\":{\"type\":\"integer\"}},"
               "\"required\":[\"name\",\"kind\"]}", 1);
    const int32_t end = ft_tok_find(tok, "<|im_end|>");
    const int32_t prompt[6] = {11, 42, 7, 99, 3, 250};
    for (int mode = 0; g && mode < 2; mode++) {
        struct ft_sampling sp = ft_sampling_default();
        if (mode == 0) sp.temperature = 0;
        else sp.temperature = 0.8f, sp.top_k = 20, sp.top_p = 0.9f, sp.seed = 5;
        int32_t a[48], b[48];
        int ok_a = 0, ok_b = 0;
        const int na = engine_grammar_run(e, m->vocab, g, &v, end, &sp, prompt, 6, 1, a, 48, &ok_a);
        const int nb = engine_grammar_run(e, m->vocab, g, &v, end, &sp, prompt, 6, 0, b, 48, &ok_b);
        fprintf(stderr, "  %s: %d tokens drawn by the engine, %d by the host sampler\n",
                mode ? "sampled" : "greedy", na, nb);
        CHECK_(na > 0 && na == nb && !memcmp(a, b, (size_t)na * 4), "%s: engine and host tokens differ",
               mode ? "sampled" : "greedy");
        EXPECT(ok_a && ok_b);
    }
done:
    ft_jg_free(g);
    if (v.bytes) ft_jg_vocab_free(&v);
    ft_engine_free(e);
    ft_tok_free(tok);
    ft_model_free(m);
    ft_pool_free(pool);
}

TEST_MAIN("json_grammar")
