/* tok_util.h — helpers shared by the tokenizer tests (test_tokenizer.c, test_tok_gguf.c): the
 * real tokenizer files unpacked into the build directory, jsonl reading, the corpus parity check
 * against HF ids, and running `ft tokenize` in-process. Include after test.h and after
 * cli/cmd_tokenize.c (the test compiles the command in). Files go under TOK_DIR in the build
 * directory, one per test executable, since ctest may run them at once. Single-threaded. */
#ifndef FT_TESTS_TOK_UTIL_H
#define FT_TESTS_TOK_UTIL_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <unistd.h>

#include "cli/cli.h"
#include "text/tokenizer.h"

#ifndef TOK_DIR
#define TOK_DIR "tok"
#endif

static const char *k_names[] = {"qwen3", "llama3", "deepseek_v3", "llama2"};

/* Unpacks, once per run, the test data of tokenizer NAME into the build directory and returns
 * its path: kind 0, tests/data/tok/NAME into TOK_DIR/NAME (tokenizer.json +
 * tokenizer_config.json); kind 1, tests/data/gguf/tok/NAME.gguf.xz into TOK_DIR/NAME.gguf. */
static const char *tok_unpack(const char *name, int kind) {
    static char paths[2][4][512];
    static int done[2][4];
    const char *d = FT_TEST_DATA;
    int k = 0;
    while (k < 4 && strcmp(k_names[k], name)) k++;
    if (k == 4) return NULL;
    char *p = paths[kind][k], cmd[2048];
    snprintf(p, sizeof paths[kind][k], kind ? TOK_DIR "/%s.gguf" : TOK_DIR "/%s", name);
    if (kind)
        snprintf(cmd, sizeof cmd, "mkdir -p " TOK_DIR " && xz -dc '%s/gguf/tok/%s.gguf.xz' > %s",
                 d, name, p);
    else
        snprintf(cmd, sizeof cmd, "mkdir -p %s && xz -dc '%s/tok/%s/tokenizer.json.xz' > "
                 "%s/tokenizer.json && cp '%s/tok/%s/tokenizer_config.json' %s/",
                 p, d, name, p, d, name, p);
    if (!done[kind][k] && system(cmd) != 0) return NULL;
    done[kind][k] = 1;
    return p;
}

static const char *tok_dir(const char *name) { return tok_unpack(name, 0); }

/* The tokenizer.json tokenizer of NAME, or NULL (reported). */
static struct ft_tok *tok_load_json(const char *name) {
    struct ft_tok *t = NULL;
    const char *d = tok_dir(name);
    if (!d || ft_tok_load(d, &t) != FT_OK)
        fprintf(stderr, "  cannot load %s: %s\n", name, ft_error());
    return t;
}

/* Expects text to encode to want[0..n_want). */
static void expect_ids(const struct ft_tok *t, const char *text, int add_special,
                       const int32_t *want, int n_want) {
    int32_t *ids = NULL;
    int n = 0;
    EXPECT(t != NULL);
    if (!t) return;
    EXPECT_OK(ft_tok_encode(t, text, strlen(text), add_special, &ids, &n));
    CHECK_(n == n_want, "\"%s\": %d ids, expected %d", text, n, n_want);
    for (int i = 0; i < n && i < n_want; i++)
        CHECK_(ids[i] == want[i], "\"%s\" id %d: %d, expected %d", text, i, ids[i], want[i]);
    free(ids);
}

/* Reads a jsonl file into an array of json values. */
static json_t **read_jsonl(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    json_t **v = NULL;
    *n = 0;
    if (!f) return NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        v = realloc(v, (*n + 1) * sizeof *v);
        v[(*n)++] = json_loadb(line, (size_t)len, JSON_ALLOW_NUL | JSON_DECODE_ANY, NULL);
    }
    free(line);
    fclose(f);
    return v;
}

static void free_jsonl(json_t **v, int n) {
    for (int i = 0; i < n; i++) json_decref(v[i]);
    free(v);
}

/* Encodes every corpus line with t and compares with tests/data/tok/NAME/ids.jsonl (HF ids); where
 * HF gives the line back (rt), decode(encode(line)) must too. Frees t. */
static void tok_parity(struct ft_tok *t, const char *name) {
    EXPECT(t != NULL);
    if (!t) return;
    char path[1024];
    int n_lines, n_refs;
    snprintf(path, sizeof path, "%s/tok/corpus.jsonl", FT_TEST_DATA);
    json_t **lines = read_jsonl(path, &n_lines);
    snprintf(path, sizeof path, "%s/tok/%s/ids.jsonl", FT_TEST_DATA, name);
    json_t **refs = read_jsonl(path, &n_refs);
    EXPECT(n_lines >= 2000);
    EXPECT_EQ(n_lines, n_refs);
    int bad_ids = 0, bad_rt = 0, n_rt = 0;
    for (int i = 0; i < n_lines && i < n_refs; i++) {
        const char *s = json_string_value(lines[i]);
        size_t len = json_string_length(lines[i]);
        json_t *ref = json_object_get(refs[i], "ids");
        int32_t *ids = NULL;
        int n = 0;
        if (!s || ft_tok_encode(t, s, len, 0, &ids, &n) != FT_OK) {
            if (bad_ids++ < 5) fprintf(stderr, "  %s line %d: encode failed: %s\n", name, i + 1, ft_error());
            continue;
        }
        int same = (size_t)n == json_array_size(ref);
        for (int k = 0; same && k < n; k++) same = ids[k] == json_integer_value(json_array_get(ref, k));
        if (!same && bad_ids++ < 5) {
            fprintf(stderr, "  %s line %d mismatch:\n    ours:", name, i + 1);
            for (int k = 0; k < n && k < 40; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n    ref: ");
            for (size_t k = 0; k < json_array_size(ref) && k < 40; k++)
                fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(ref, k)));
            fprintf(stderr, "\n");
        }
        if (json_is_true(json_object_get(refs[i], "rt"))) {
            n_rt++;
            char *back = NULL;
            size_t blen = 0;
            if (ft_tok_decode(t, ids, n, 0, &back, &blen) != FT_OK || blen != len ||
                memcmp(back, s, len)) {
                if (bad_rt++ < 5)
                    fprintf(stderr, "  %s line %d: decode(encode(x)) != x: \"%s\"\n", name, i + 1,
                            back ? back : "(error)");
            }
            free(back);
        }
        free(ids);
    }
    fprintf(stderr, "  %s: %d lines, %d id mismatches; %d round-trip lines, %d failed\n", name,
            n_lines, bad_ids, n_rt, bad_rt);
    EXPECT_EQ(bad_ids, 0);
    EXPECT_EQ(bad_rt, 0);
    EXPECT(n_rt > n_lines * 9 / 10);
    free_jsonl(lines, n_lines);
    free_jsonl(refs, n_refs);
    ft_tok_free(t);
}

/* Runs ft_cmd_tokenize with stdout/stderr sent to TOK_DIR/cli.out and cli.err; returns its exit
 * code and the two outputs (malloc'd). */
static int run_cli(int argc, char **argv, char **out, char **err) {
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(TOK_DIR "/cli.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(TOK_DIR "/cli.err", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = ft_cmd_tokenize(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so), close(se), close(fo), close(fe);
    const char *names[2] = {TOK_DIR "/cli.out", TOK_DIR "/cli.err"};
    char **dst[2] = {out, err};
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(names[k], "rb");
        size_t cap = 1 << 20, n = 0, r;
        char *b = malloc(cap);
        while (f && (r = fread(b + n, 1, cap - 1 - n, f)) > 0) {
            n += r;
            if (n == cap - 1) b = realloc(b, cap *= 2);
        }
        b[n] = 0;
        if (f) fclose(f);
        *dst[k] = b;
    }
    return rc;
}

/* `ft tokenize --model MODEL --jsonl` over the corpus: expects tests/data/tok/NAME/ids.jsonl
 * line for line. */
static void expect_cli_corpus(const char *model, const char *name) {
    char corpus[1024], refs[1024], *out = NULL, *err = NULL;
    snprintf(corpus, sizeof corpus, "%s/tok/corpus.jsonl", FT_TEST_DATA);
    snprintf(refs, sizeof refs, "%s/tok/%s/ids.jsonl", FT_TEST_DATA, name);
    char *argv[] = {"tokenize", "--model", (char *)model, "--jsonl", corpus};
    EXPECT_EQ(run_cli(5, argv, &out, &err), 0);
    int n_refs = 0, bad = 0, lines = 0;
    json_t **ref = read_jsonl(refs, &n_refs);
    for (char *p = out, *e; p && *p; p = e + 1, lines++) {
        if (!(e = strchr(p, '\n'))) break;
        json_t *ids = json_loadb(p, (size_t)(e - p), 0, NULL);
        if (lines >= n_refs || !json_equal(ids, json_object_get(ref[lines], "ids"))) bad++;
        json_decref(ids);
    }
    EXPECT_EQ(lines, n_refs);
    EXPECT_EQ(bad, 0);
    free_jsonl(ref, n_refs);
    free(out), free(err);
}

#endif
