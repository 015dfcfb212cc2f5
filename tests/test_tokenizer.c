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
#include "text/tok_impl.h"
#include "text/tokenizer.h"
/* `ft tokenize` is tested in-process (its file, and the CLI helpers it calls, are compiled
 * into this test) */
#include "cli/cmd_tokenize.c"
#include "cli/opts.c"
#include "tok_util.h"

static struct ft_tok *load(const char *name) { return tok_load_json(name); }

TEST(parity_qwen3) { tok_parity(load("qwen3"), "qwen3"); }
TEST(parity_llama3) { tok_parity(load("llama3"), "llama3"); }
TEST(parity_deepseek_v3) { tok_parity(load("deepseek_v3"), "deepseek_v3"); }
TEST(parity_llama2) { tok_parity(load("llama2"), "llama2"); }

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
    expect_ids(q, "<|im_start|>user", 1, (int32_t[]){151644, 872}, 2);
    /* Llama-2: TemplateProcessing puts <s> first */
    expect_ids(l2, "Hello world", 1, (int32_t[]){1, 22557, 1526}, 3);
    EXPECT_EQ(ft_tok_bos(l2), 1);
    EXPECT_EQ(ft_tok_eos(l2), 2);
    EXPECT(ft_tok_add_bos(l2) && !ft_tok_add_bos(q));
    /* DeepSeek-V3: add_bos_token in tokenizer_config.json */
    expect_ids(ds, "Hello world", 1, (int32_t[]){0, 19923, 2058}, 3);
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

/* ByteLevel with its own GPT-2 regex (use_regex true, GPT-2's own files): every piece the regex
 * splits off is kept (ids from HF tokenizers 0.23.3 on the same file) */
TEST(bytelevel_use_regex) {
    EXPECT_OK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, "
                        "\"ab\": 2, \"\u0120\": 3, \"\u0120ab\": 4}, "
                        "\"merges\": [\"a b\", \"\u0120 ab\"]}, \"pre_tokenizer\": "
                        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}, "
                        "\"decoder\": {\"type\": \"ByteLevel\"}}"));
    struct ft_tok *t = NULL;
    EXPECT_OK(ft_tok_load("tok/bad", &t));
    if (!t) return;
    int32_t *ids = NULL;
    int n = 0;
    EXPECT_OK(ft_tok_encode(t, "ab ab ba", 8, 0, &ids, &n));
    EXPECT(n == 5 && ids[0] == 2 && ids[1] == 4 && ids[2] == 3 && ids[3] == 1 && ids[4] == 0);
    free(ids);
    char *text = NULL;
    EXPECT_OK(ft_tok_decode(t, (int32_t[]){4, 2, 3, 1, 0}, 5, 0, &text, NULL));
    EXPECT_STREQ(text, " abab ba");
    free(text);
    ft_tok_free(t);
}

TEST(cli_tokenize) {
    const char *dir = tok_dir("llama2");
    EXPECT(dir != NULL);
    if (!dir) return;
    char *out = NULL, *err = NULL;
    /* --jsonl over the whole corpus gives the reference ids, line for line */
    expect_cli_corpus(dir, "llama2");
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
