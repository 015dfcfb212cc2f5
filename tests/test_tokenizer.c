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

#include <fcntl.h>
#include <unistd.h>

#include "test.h"
#include "text/tok_impl.h"
#include "text/tokenizer.h"
/* `ft tokenize` is tested in-process (its file, and the CLI helpers it calls, are compiled
 * into this test) */
#include "cli/cmd_tokenize.c"
#include "cli/opts.c"

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

/* GPT-2's bytes_to_unicode as its reference code defines it: the printable ranges keep their
 * code point; every other byte, in byte order, gets 256 + its rank. */
TEST(bytelevel_map_matches_gpt2_definition) {
    uint32_t ref[256];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        ref[b] = keep ? (uint32_t)b : 256u + (uint32_t)n++;
    }
    EXPECT_EQ(n, 68);
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        bad += ft_bytelevel_cp((uint8_t)b) != ref[b];
        bad += ft_bytelevel_byte(ref[b]) != b;
    }
    for (uint32_t cp = 0; cp < 1024; cp++) { /* everything else maps to no byte */
        int is_image = 0;
        for (int b = 0; b < 256; b++) is_image |= ref[b] == cp;
        if (!is_image) bad += ft_bytelevel_byte(cp) != -1;
    }
    EXPECT_EQ(bad, 0);
}

TEST(detok_holds_split_multibyte) {
    struct ft_tok *t = load("llama2");
    EXPECT(t != NULL);
    if (!t) return;
    /* "🫠" is not in Llama-2's vocabulary: "▁" then <0xF0><0x9F><0xAB><0xA0> */
    int32_t *ids = NULL;
    int n = 0;
    EXPECT_OK(ft_tok_encode(t, "\xF0\x9F\xAB\xA0", 4, 0, &ids, &n));
    EXPECT_EQ(n, 5);
    if (n == 5) {
        EXPECT_EQ(ids[1], 243);
        struct ft_detok d;
        char out[FT_DETOK_CAP];
        ft_detok_init(&d, t, 1);
        EXPECT_EQ(ft_detok_push(&d, ids[0], out, sizeof out), 0); /* leading space stripped */
        EXPECT_EQ(ft_detok_push(&d, ids[1], out, sizeof out), 0); /* held */
        EXPECT_EQ(ft_detok_push(&d, ids[2], out, sizeof out), 0);
        EXPECT_EQ(ft_detok_push(&d, ids[3], out, sizeof out), 0);
        size_t k = ft_detok_push(&d, ids[4], out, sizeof out);
        EXPECT_EQ(k, 4);
        EXPECT(k == 4 && !memcmp(out, "\xF0\x9F\xAB\xA0", 4));
        EXPECT_EQ(ft_detok_flush(&d, out, sizeof out), 0);
        /* an incomplete sequence at the end comes out as U+FFFD on flush */
        ft_detok_init(&d, t, 1);
        EXPECT_EQ(ft_detok_push(&d, ids[1], out, sizeof out), 0);
        EXPECT_EQ(ft_detok_push(&d, ids[2], out, sizeof out), 0);
        k = ft_detok_flush(&d, out, sizeof out);
        EXPECT(k == 3 && !memcmp(out, "\xEF\xBF\xBD", 3));
    }
    free(ids);
    ft_tok_free(t);
}

TEST(detok_stream_equals_text) {
    struct ft_tok *t = load("qwen3");
    EXPECT(t != NULL);
    if (!t) return;
    const char *s = "\xF0\x9F\xAB\xA0 \xE4\xB8\xAD<|im_end|>caf\xC3\xA9 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9";
    int32_t *ids = NULL;
    int n = 0;
    EXPECT_OK(ft_tok_encode(t, s, strlen(s), 0, &ids, &n));
    EXPECT(n > 6);
    EXPECT_EQ(ids[0], 9284); /* "ðŁ" = F0 9F: half of the emoji */
    struct ft_detok d;
    char out[FT_DETOK_CAP], all[256] = "";
    size_t total = 0;
    int held = 0;
    ft_detok_init(&d, t, 1);
    for (int i = 0; i < n; i++) {
        size_t k = ft_detok_push(&d, ids[i], out, sizeof out);
        held += k == 0;
        memcpy(all + total, out, k);
        total += k;
        all[total] = 0;
    }
    total += ft_detok_flush(&d, all + total, sizeof all - total);
    all[total] = 0;
    EXPECT(held >= 2);
    EXPECT_STREQ(all, "\xF0\x9F\xAB\xA0 \xE4\xB8\xAD" "caf\xC3\xA9 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9");
    char *text = NULL;
    EXPECT_OK(ft_tok_decode(t, ids, n, 0, &text, NULL));
    EXPECT_STREQ(text, s);
    free(text);
    free(ids);
    ft_tok_free(t);
}

TEST(invalid_utf8_is_an_error) {
    struct ft_tok *t = load("qwen3");
    EXPECT(t != NULL);
    if (!t) return;
    int32_t *ids = (int32_t *)1;
    int n = 7;
    EXPECT_EQ(ft_tok_encode(t, "abc\xff", 4, 0, &ids, &n), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "prompt: invalid UTF-8 at byte 3");
    EXPECT(ids == NULL && n == 0);
    EXPECT_EQ(ft_tok_encode(t, "ok \xE4\xB8", 5, 0, &ids, &n), FT_ERR_INVALID_ARG); /* truncated */
    EXPECT_CONTAINS(ft_error(), "at byte 3");
    EXPECT_EQ(ft_tok_encode(t, "\xED\xA0\x80", 3, 0, &ids, &n), FT_ERR_INVALID_ARG); /* surrogate */
    EXPECT_EQ(ft_tok_encode(t, "\xC0\xAF", 2, 0, &ids, &n), FT_ERR_INVALID_ARG);     /* overlong */
    ft_tok_free(t);
}

TEST(empty_input) {
    for (int k = 0; k < 4; k++) {
        struct ft_tok *t = load(k_names[k]);
        EXPECT(t != NULL);
        if (!t) continue;
        int32_t *ids = NULL;
        int n = -1;
        EXPECT_OK(ft_tok_encode(t, "", 0, 0, &ids, &n));
        EXPECT(n == 0 && ids == NULL);
        EXPECT_OK(ft_tok_encode(t, NULL, 0, 0, &ids, &n));
        EXPECT_EQ(n, 0);
        char *text = NULL;
        EXPECT_OK(ft_tok_decode(t, NULL, 0, 1, &text, NULL));
        EXPECT_STREQ(text, "");
        free(text);
        ft_tok_free(t);
    }
}

TEST(special_tokens_and_bos) {
    struct ft_tok *q = load("qwen3"), *l2 = load("llama2"), *ds = load("deepseek_v3"), *l3 = load("llama3");
    EXPECT(q && l2 && ds && l3);
    if (!q || !l2 || !ds || !l3) goto done;
    int32_t *ids = NULL;
    int n = 0;
    /* Qwen3: no BOS; eos from tokenizer_config.json; ChatML template kept */
    EXPECT_EQ(ft_tok_find(q, "<|im_end|>"), 151645);
    EXPECT_EQ(ft_tok_eos(q), 151645);
    EXPECT_EQ(ft_tok_bos(q), -1);
    EXPECT(ft_tok_is_special(q, 151644) && !ft_tok_is_special(q, 151667) && !ft_tok_is_special(q, 100));
    EXPECT_CONTAINS(ft_tok_chat_template(q), "<|im_start|>");
    EXPECT_EQ(ft_tok_n_vocab(q), 151669);
    size_t len = 0;
    EXPECT_STREQ(ft_tok_piece(q, 151644, &len), "<|im_start|>");
    EXPECT_EQ(len, 12);
    EXPECT(ft_tok_piece(q, -1, NULL) == NULL && ft_tok_piece(q, 1 << 20, NULL) == NULL);
    EXPECT_OK(ft_tok_encode(q, "<|im_start|>user", 16, 1, &ids, &n));
    EXPECT(n == 2 && ids[0] == 151644 && ids[1] == 872);
    free(ids);
    /* Llama-2: TemplateProcessing puts <s> first */
    EXPECT_OK(ft_tok_encode(l2, "Hello world", 11, 1, &ids, &n));
    EXPECT(n == 3 && ids[0] == 1 && ids[1] == 22557 && ids[2] == 1526);
    free(ids);
    EXPECT_EQ(ft_tok_bos(l2), 1);
    EXPECT_EQ(ft_tok_eos(l2), 2);
    EXPECT(ft_tok_add_bos(l2) && !ft_tok_add_bos(q));
    /* DeepSeek-V3: add_bos_token in tokenizer_config.json */
    EXPECT_OK(ft_tok_encode(ds, "Hello world", 11, 1, &ids, &n));
    EXPECT(n == 3 && ids[0] == 0 && ids[1] == 19923 && ids[2] == 2058);
    free(ids);
    /* Llama-3 (this file's post_processor is plain ByteLevel, and the config has no add_bos_token,
     * so like transformers nothing is added; the chat template writes <|begin_of_text|>) */
    EXPECT_EQ(ft_tok_bos(l3), 128000);
    EXPECT(!ft_tok_add_bos(l3));
    /* skip_special drops special tokens on decode, keeps them otherwise */
    int32_t seq[] = {151644, 872, 151645};
    char *text = NULL;
    EXPECT_OK(ft_tok_decode(q, seq, 3, 1, &text, NULL));
    EXPECT_STREQ(text, "user");
    free(text);
    EXPECT_OK(ft_tok_decode(q, seq, 3, 0, &text, NULL));
    EXPECT_STREQ(text, "<|im_start|>user<|im_end|>");
    free(text);
    EXPECT_OK(ft_tok_decode(q, seq, 1, 1, &text, NULL)); /* only a skipped token */
    EXPECT_STREQ(text, "");
    free(text);
    int32_t bad = 1 << 24;
    EXPECT_EQ(ft_tok_decode(q, &bad, 1, 0, &text, NULL), FT_ERR_INVALID_ARG);
done:
    ft_tok_free(q);
    ft_tok_free(l2);
    ft_tok_free(ds);
    ft_tok_free(l3);
}

/* Writes text to ./tok/bad/tokenizer.json and tries to load it; returns the status. */
static enum ft_status load_text(const char *text) {
    EXPECT(system("mkdir -p tok/bad") == 0);
    FILE *f = fopen("tok/bad/tokenizer.json", "w");
    EXPECT(f != NULL);
    if (!f) return FT_ERR_IO;
    fputs(text, f);
    fclose(f);
    struct ft_tok *t = NULL;
    enum ft_status st = ft_tok_load("tok/bad", &t);
    if (st == FT_OK) ft_tok_free(t);
    return st;
}

TEST(bad_files_are_clear_errors) {
    struct ft_tok *t = (struct ft_tok *)1;
    EXPECT_EQ(ft_tok_load("tok/no-such-dir", &t), FT_ERR_IO);
    EXPECT(t == NULL);
    EXPECT_CONTAINS(ft_error(), "no tokenizer.json");
    EXPECT_EQ(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}}}"),
              FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "tok/bad/tokenizer.json");
    EXPECT_CONTAINS(ft_error(), "model.merges");
    EXPECT_EQ(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
                        "\"merges\": [\"a b\"]}}"), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "model.merges[0] \"a b\": the merged token is not in model.vocab");
    EXPECT_EQ(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
                        "\"merges\": [[\"a\", \"b\"]]}, \"pre_tokenizer\": {\"type\": \"Split\", "
                        "\"pattern\": {\"Regex\": \"(\\\\p{L}+\"}, \"behavior\": \"Isolated\"}}"),
              FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "(\\p{L}+");
    EXPECT_CONTAINS(ft_error(), "missing closing parenthesis");
    EXPECT_EQ(load_text("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}"), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "Unigram");
    EXPECT_EQ(load_text("{\"model\": "), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "not valid JSON");
    /* a minimal valid file works: merges in pair form, Split with Removed */
    EXPECT_OK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
                        "\"merges\": [[\"a\", \"b\"]]}, \"pre_tokenizer\": {\"type\": \"Split\", "
                        "\"pattern\": {\"String\": \" \"}, \"behavior\": \"Removed\"}}"));
    struct ft_tok *ok = NULL;
    EXPECT_OK(ft_tok_load("tok/bad", &ok));
    if (ok) {
        int32_t *ids = NULL;
        int n = 0;
        EXPECT_OK(ft_tok_encode(ok, "ab a  ba", 8, 1, &ids, &n));
        EXPECT(n == 4 && ids[0] == 2 && ids[1] == 0 && ids[2] == 1 && ids[3] == 0);
        free(ids);
        EXPECT_EQ(ft_tok_bos(ok), -1);
        EXPECT(ft_tok_chat_template(ok) == NULL);
    }
    ft_tok_free(ok);
    ft_tok_free(NULL);
}

/* Runs ft_cmd_tokenize with stdout/stderr sent to tok/cli.out and tok/cli.err; returns its exit
 * code and the two outputs (malloc'd). */
static int run_cli(int argc, char **argv, char **out, char **err) {
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open("tok/cli.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open("tok/cli.err", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = ft_cmd_tokenize(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so), close(se), close(fo), close(fe);
    const char *names[2] = {"tok/cli.out", "tok/cli.err"};
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

TEST(cli_tokenize) {
    const char *dir = tok_dir("llama2");
    EXPECT(dir != NULL);
    if (!dir) return;
    char corpus[1024], refs[1024], *out = NULL, *err = NULL;
    snprintf(corpus, sizeof corpus, "%s/tok/corpus.jsonl", FT_TEST_DATA);
    snprintf(refs, sizeof refs, "%s/tok/llama2/ids.jsonl", FT_TEST_DATA);
    /* --jsonl over the whole corpus gives the reference ids, line for line */
    char *a1[] = {"tokenize", "--model", (char *)dir, "--jsonl", corpus};
    EXPECT_EQ(run_cli(5, a1, &out, &err), 0);
    int n_refs = 0, bad = 0, lines = 0;
    json_t **ref = read_jsonl(refs, &n_refs);
    for (char *p = out, *e; p && *p; p = e + 1, lines++) {
        e = strchr(p, '\n');
        if (!e) break;
        json_t *ids = json_loadb(p, (size_t)(e - p), 0, NULL);
        if (lines >= n_refs || !json_equal(ids, json_object_get(ref[lines], "ids"))) bad++;
        json_decref(ids);
    }
    EXPECT_EQ(lines, n_refs);
    EXPECT_EQ(bad, 0);
    free_jsonl(ref, n_refs);
    free(out), free(err);
    /* text mode: ids then pieces */
    char *a2[] = {"tokenize", "--model", (char *)tok_dir("qwen3"), "<|im_start|>Hello world"};
    EXPECT_EQ(run_cli(4, a2, &out, &err), 0);
    EXPECT_CONTAINS(out, "[151644,9707,1879]\n");
    EXPECT_CONTAINS(out, "1879\t\"\xC4\xA0world\"\n");
    EXPECT_CONTAINS(out, "151644\t\"<|im_start|>\"\tspecial\n");
    free(out), free(err);
    char *a3[] = {"tokenize", "--model", (char *)dir, "--special", "Hello world"};
    EXPECT_EQ(run_cli(5, a3, &out, &err), 0);
    EXPECT_CONTAINS(out, "[1,22557,1526]\n");
    free(out), free(err);
    /* bad input: exit code 2 and one "ft: ..." line */
    char *a4[] = {"tokenize", "--model", (char *)dir, "bad \xff text"};
    EXPECT_EQ(run_cli(4, a4, &out, &err), 2);
    EXPECT_CONTAINS(err, "ft: prompt: invalid UTF-8 at byte 4");
    free(out), free(err);
    FILE *f = fopen("tok/bad.jsonl", "w");
    if (f) fputs("\"ok\"\n42\n", f), fclose(f);
    char *a5[] = {"tokenize", "--model", (char *)dir, "--jsonl", "tok/bad.jsonl"};
    EXPECT_EQ(run_cli(5, a5, &out, &err), 2);
    EXPECT_CONTAINS(err, "ft: tok/bad.jsonl:2: expected one JSON string per line");
    EXPECT_STREQ(out, "[3614]\n"); /* "▁ok" */
    free(out), free(err);
    char *a6[] = {"tokenize", "hello"};
    EXPECT_EQ(run_cli(2, a6, &out, &err), 2);
    EXPECT_CONTAINS(err, "--model DIR is required");
    free(out), free(err);
    char *a7[] = {"tokenize", "--model", "tok/no-such-dir", "x"};
    EXPECT_EQ(run_cli(4, a7, &out, &err), 2);
    EXPECT_CONTAINS(err, "no tokenizer.json");
    free(out), free(err);
    char *a8[] = {"tokenize", "--help"};
    EXPECT_EQ(run_cli(2, a8, &out, &err), 0);
    EXPECT_CONTAINS(out, "--jsonl FILE");
    free(out), free(err);
}

TEST_MAIN("tokenizer")
