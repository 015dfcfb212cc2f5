/* bench_grammar.c — grammar-constrained token masks (text/json_grammar.h): milliseconds a mask
 * for one row, the trie walk (ft_jg_allow, and ft_jg_mask on logits) against the per-token
 * walk it replaced (ft_jg_allow_ref), on the same states of a JSON Schema, a json_object and
 * tool-call grammars.
 *   bench_grammar TOKENIZER_DIR [REPS]
 * TOKENIZER_DIR holds tokenizer.json (Qwen3's: xz -dc tests/data/tok/qwen3/tokenizer.json.xz);
 * REPS (default 200) masks a state for the trie walk, a tenth of them for the per-token one.
 * Prints mean and p99 per state, the allowed tokens, and whether the two walks' bits agree.
 * Single-threaded; asserts nothing. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/status.h"
#include "text/json_grammar.h"
#include "text/tok_bytes.h"
#include "text/tokenizer.h"
#include "text/tool_parse.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* As server/constrain.c: special tokens out of reach but the families' tool-call markers. */
static const char *bytes_of(void *ctx, int32_t id, size_t *len, int *special) {
    const char *b = ft_tok_bytes(ctx, id, len, special);
    if (b && *special)
        for (int f = 0; f < FT_TOOLS_N; f++)
            for (const char *const *m = ft_tool_fmt_markers(f); *m; m++)
                if (strlen(*m) == *len && !memcmp(*m, b, *len)) *special = 0;
    return b;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* mean and p99 of t[0..n) (sorts t) */
static void stats(double *t, int n, double *mean, double *p99) {
    double s = 0;
    for (int i = 0; i < n; i++) s += t[i];
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    *mean = s / n;
    *p99 = t[(int)(0.99 * (n - 1) + 0.5)];
}

static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\"},\"kind\":{\"enum\":[\"cat\",\"dog\"]},"
    "\"bio\":{\"type\":\"string\"}},\"required\":[\"name\",\"age\",\"kind\"]}";
static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]";

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_grammar TOKENIZER_DIR [REPS]\n");
        return 2;
    }
    const int reps = argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 200;
    const int reps_ref = reps / 10 > 0 ? reps / 10 : 1;
    struct ft_tok *tok = NULL;
    if (ft_tok_load(argv[1], &tok) != FT_OK) {
        fprintf(stderr, "ft: %s\n", ft_error());
        return 2;
    }
    struct ft_jg_vocab v;
    double t0 = now_ms();
    if (ft_jg_vocab_init(&v, ft_tok_n_vocab(tok), bytes_of, tok) != FT_OK) {
        fprintf(stderr, "ft: %s\n", ft_error());
        return 2;
    }
    printf("vocabulary: %d tokens, tables built in %.1f ms\n", v.n_vocab, now_ms() - t0);
    const int32_t end[2] = {ft_tok_find(tok, "<|im_end|>"), ft_tok_find(tok, "<|endoftext|>")};
    struct ft_jg *gs = NULL, *go = NULL, *gh = NULL, *gc = NULL;
    json_t *sch = json_loads(k_schema, 0, NULL), *tools = json_loads(k_tools, 0, NULL);
    if (ft_jg_compile_schema(sch, 1, &gs) != FT_OK || ft_jg_compile_object(&go) != FT_OK ||
        ft_jg_compile_calls(tools, NULL, ft_tool_fmt_grammar(FT_TOOLS_HERMES), &gh) != FT_OK ||
        ft_jg_compile_calls(tools, NULL, ft_tool_fmt_grammar(FT_TOOLS_QWEN3_CODER), &gc) != FT_OK) {
        fprintf(stderr, "ft: %s\n", ft_error());
        return 2;
    }
    json_decref(sch), json_decref(tools);
    static const char coder[] = "<tool_call>\n<function=get_weather>\n<parameter=city>\n";
    const struct { const char *what; const struct ft_jg *g; const char *text; } k_states[] = {
        {"schema: start", gs, ""},
        {"schema: after '{' (a key or '}')", gs, "{"},
        {"schema: between keys (after ',')", gs, "{\"name\": \"Ada\", "},
        {"schema: in a key", gs, "{\"name\": \"Ada\", \"ag"},
        {"schema: after ':' (an integer)", gs, "{\"name\": \"Ada\", \"age\":"},
        {"schema: in a number", gs, "{\"name\": \"Ada\", \"age\": 3"},
        {"schema: in an enum", gs, "{\"name\": \"Ada\", \"age\": 3, \"kind\": \"c"},
        {"schema: string, maxLength 12, 7 left", gs, "{\"name\": \"Ada L"},
        {"schema: string, maxLength 12, 1 left", gs, "{\"name\": \"Ada Lovelac"},
        {"schema: string, no maxLength", gs, "{\"name\": \"Ada\", \"age\": 3, \"bio\": \"Born in"},
        {"schema: string, mid-character", gs, "{\"name\": \"Ada\", \"age\": 3, \"bio\": \"\xe6\x97"},
        {"json_object: string", go, "{\"a\": \"Hello wor"},
        {"json_object: free key", go, "{\"a\": 1, \"ke"},
        {"json_object: after ':' (any value)", go, "{\"a\":"},
        {"hermes: start", gh, ""},
        {"hermes: tool-call name", gh, "<tool_call>\n{\"name\": \"get_"},
        {"hermes: string", gh, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par"},
        {"hermes: string, partial </tool_call>", gh,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a</tool_"},
        {"hermes: after the call", gh, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}"},
        {"qwen3_coder: raw value", gc, coder},
        {"qwen3_coder: raw value, in text", gc, "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew Yo"},
        {"qwen3_coder: raw value, partial end", gc, "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\n</par"},
        {"qwen3_coder: parameter name", gc, "<tool_call>\n<function=get_weather>\n<parameter=c"},
    };
    const int n_states = (int)(sizeof k_states / sizeof k_states[0]);
    const int nw = (v.n_vocab + 31) / 32;
    uint32_t *a = malloc((size_t)nw * 4), *b = malloc((size_t)nw * 4);
    float *lg = malloc((size_t)v.n_vocab * 4);
    double *ta = malloc((size_t)reps * sizeof *ta), *tm = malloc((size_t)reps * sizeof *tm);
    double *tr = malloc((size_t)reps_ref * sizeof *tr);
    double all_new = 0, all_ref = 0, worst_new = 0, worst_ref = 0;
    int agree = 1;
    printf("%-40s %7s | %-17s | %-17s | %-17s | %s\n", "state", "allowed", "per-token mean p99",
           "trie mean p99", "trie mask mean p99", "same");
    for (int s = 0; s < n_states; s++) {
        struct ft_jg_state st;
        ft_jg_start(k_states[s].g, &st);
        if (ft_jg_feed(k_states[s].g, &st, k_states[s].text, strlen(k_states[s].text))) {
            printf("%-40s refused its text\n", k_states[s].what);
            continue;
        }
        for (int r = 0; r < reps_ref; r++) {
            const double t = now_ms();
            ft_jg_allow_ref(k_states[s].g, &st, &v, end, 2, b);
            tr[r] = now_ms() - t;
        }
        for (int r = 0; r < reps; r++) {
            const double t = now_ms();
            ft_jg_allow(k_states[s].g, &st, &v, end, 2, a);
            ta[r] = now_ms() - t;
        }
        for (int r = 0; r < reps; r++) {
            for (int i = 0; i < v.n_vocab; i++) lg[i] = 0.0f;
            const double t = now_ms();
            ft_jg_mask(k_states[s].g, &st, &v, end, 2, lg);
            tm[r] = now_ms() - t;
        }
        const int same = !memcmp(a, b, (size_t)nw * 4);
        int allowed = 0;
        for (int i = 0; i < nw; i++) allowed += __builtin_popcount(a[i]);
        double rm, rp, am, ap, mm, mp;
        stats(tr, reps_ref, &rm, &rp);
        stats(ta, reps, &am, &ap);
        stats(tm, reps, &mm, &mp);
        printf("%-40s %7d | %7.3f %7.3f ms | %7.3f %7.3f ms | %7.3f %7.3f ms | %s\n",
               k_states[s].what, allowed, rm, rp, am, ap, mm, mp, same ? "yes" : "NO");
        agree &= same;
        all_new += am, all_ref += rm;
        if (ap > worst_new) worst_new = ap;
        if (rp > worst_ref) worst_ref = rp;
    }
    printf("mean over the states: per-token %.3f ms, trie %.3f ms (%.0fx); worst p99: %.3f ms, "
           "%.3f ms; bits %s\n", all_ref / n_states, all_new / n_states,
           all_new > 0 ? all_ref / all_new : 0.0, worst_ref, worst_new,
           agree ? "identical in every state" : "DIFFER");
    free(a), free(b), free(lg), free(ta), free(tm), free(tr);
    ft_jg_free(gs), ft_jg_free(go), ft_jg_free(gh), ft_jg_free(gc);
    ft_jg_vocab_free(&v);
    ft_tok_free(tok);
    return 0;
}
