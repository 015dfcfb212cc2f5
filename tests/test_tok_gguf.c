/* test_tok_gguf.c — the tokenizer loaded from GGUF metadata (ft_tok_load_gguf): parity with HF
 * `tokenizers` ids on the corpus for vocab-only GGUF files of the real Qwen3, Llama-3, DeepSeek-V3
 * and Llama-2 tokenizers (tests/data/gguf/tok, made by tools/gen_gguf_tok.py the way llama.cpp's
 * convert_hf_to_gguf.py writes them), agreement with the tokenizer.json loader, special tokens,
 * SentencePiece merge order from scores, `ft tokenize --model FILE.gguf`, and one-line errors for
 * bad files (hand-built in memory). The .gguf.xz files are unpacked with `xz -dc` into tokg/. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "format/gguf.h"
#include "test.h"
#include "gguf_build.h"
#include "text/tok_impl.h"
#include "text/tokenizer.h"
/* `ft tokenize` is compiled into this test, as in test_tokenizer.c */
#include "cli/cmd_tokenize.c"
#include "cli/opts.c"
#define TOK_DIR "tokg"
#include "tok_util.h"

static const char *gguf_path(const char *name) { return tok_unpack(name, 1); }

static struct ft_tok *load_gguf(const char *name) {
    struct ft_gguf_file *f = NULL;
    struct ft_tok *t = NULL;
    const char *p = gguf_path(name);
    if (!p || ft_gguf_open(p, &f) != FT_OK || ft_tok_load_gguf(f, &t) != FT_OK)
        fprintf(stderr, "  cannot load %s: %s\n", p ? p : name, ft_error());
    ft_gguf_close(f); /* the tokenizer keeps nothing of the file */
    return t;
}

TEST(parity_qwen3) { tok_parity(load_gguf("qwen3"), "qwen3"); }
TEST(parity_llama3) { tok_parity(load_gguf("llama3"), "llama3"); }
TEST(parity_deepseek_v3) { tok_parity(load_gguf("deepseek_v3"), "deepseek_v3"); }
TEST(parity_llama2) { tok_parity(load_gguf("llama2"), "llama2"); }

/* Every id of the tokenizer.json has the same string and decodes to the same bytes; the chat
 * template is tokenizer_config.json's; ids past the tokenizer.json (config.json's vocab_size
 * padding, "[PAD<id>]", unused) decode to nothing. */
TEST(same_vocab_as_tokenizer_json) {
    for (int k = 0; k < 4; k++) {
        struct ft_tok *g = load_gguf(k_names[k]), *j = tok_load_json(k_names[k]);
        EXPECT(g && j);
        if (!g || !j) {
            ft_tok_free(g);
            ft_tok_free(j);
            continue;
        }
        int bad_piece = 0, bad_dec = 0, n = ft_tok_n_vocab(j);
        EXPECT(ft_tok_n_vocab(g) >= n);
        for (int32_t id = 0; id < n; id++) {
            size_t lg, lj;
            const char *pg = ft_tok_piece(g, id, &lg), *pj = ft_tok_piece(j, id, &lj);
            bad_piece += !pg || !pj || lg != lj || memcmp(pg, pj, lg);
            char *dg = NULL, *dj = NULL;
            size_t ng = 0, nj = 0;
            if (ft_tok_decode(g, &id, 1, 0, &dg, &ng) || ft_tok_decode(j, &id, 1, 0, &dj, &nj) ||
                ng != nj || memcmp(dg, dj, ng))
                bad_dec++;
            free(dg);
            free(dj);
        }
        for (int32_t id = n; id < ft_tok_n_vocab(g); id++) {
            char want[32], *d = NULL;
            snprintf(want, sizeof want, "[PAD%d]", id);
            bad_piece += !ft_tok_piece(g, id, NULL) || strcmp(ft_tok_piece(g, id, NULL), want);
            bad_dec += ft_tok_decode(g, &id, 1, 0, &d, NULL) || *d;
            free(d);
        }
        fprintf(stderr, "  %s: %d ids (gguf %d): %d piece and %d decode differences\n",
                k_names[k], n, ft_tok_n_vocab(g), bad_piece, bad_dec);
        EXPECT_EQ(bad_piece, 0);
        EXPECT_EQ(bad_dec, 0);
        EXPECT_EQ(ft_tok_eos(g), ft_tok_eos(j));
        EXPECT_EQ(ft_tok_max_token_bytes(g), ft_tok_max_token_bytes(j));
        /* chat template: the string of tokenizer_config.json (none for this Llama-2) */
        char path[1024];
        snprintf(path, sizeof path, "%s/tok/%s/tokenizer_config.json", FT_TEST_DATA, k_names[k]);
        json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL);
        const char *want = json_string_value(json_object_get(cfg, "chat_template"));
        EXPECT(cfg != NULL);
        if (want) EXPECT_STREQ(ft_tok_chat_template(g), want);
        else EXPECT(ft_tok_chat_template(g) == NULL);
        json_decref(cfg);
        ft_tok_free(g);
        ft_tok_free(j);
    }
}

/* The regexes behind each tokenizer.ggml.pre are, byte for byte, the Split patterns of the
 * tokenizer.json files that llama.cpp's converter gives that name. */
TEST(pre_regexes_are_the_tokenizer_json_ones) {
    static const char *pre[3] = {"qwen2", "llama-bpe", "deepseek-v3"};
    for (int k = 0; k < 3; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tokenizer.json", tok_dir(k_names[k]));
        json_t *root = json_load_file(path, 0, NULL);
        const json_t *pre_tok = json_object_get(root, "pre_tokenizer");
        const json_t *seq = json_object_get(pre_tok, "pretokenizers");
        int n = 0, n_split = 0;
        const char *const *re = ft_tok_gguf_pre_regexes(pre[k], &n);
        size_t i;
        const json_t *e;
        EXPECT(re != NULL && n > 0);
        json_array_foreach(seq, i, e) {
            const char *type = ft_jstr(e, "type");
            if (!type || strcmp(type, "Split")) continue;
            EXPECT_STREQ(ft_jstr(e, "behavior"), "Isolated");
            const char *want = ft_jstr(json_object_get(e, "pattern"), "Regex");
            if (re && n_split < n) EXPECT_STREQ(re[n_split], want);
            n_split++;
        }
        EXPECT_EQ(n_split, n);
        json_decref(root);
    }
    int n = 1;
    EXPECT(ft_tok_gguf_pre_regexes("no-such-pre", &n) == NULL && n == 0);
}

TEST(special_tokens_and_bos) {
    struct ft_tok *q = load_gguf("qwen3"), *l3 = load_gguf("llama3");
    struct ft_tok *ds = load_gguf("deepseek_v3"), *l2 = load_gguf("llama2");
    EXPECT(q && l3 && ds && l2);
    if (!q || !l3 || !ds || !l2) goto done;
    /* Qwen3: bos from config.json, no BOS added, 151936 ids (config.json's vocab_size) */
    EXPECT_EQ(ft_tok_bos(q), 151643);
    EXPECT_EQ(ft_tok_eos(q), 151645);
    EXPECT(!ft_tok_add_bos(q));
    EXPECT_EQ(ft_tok_n_vocab(q), 151936);
    expect_ids(q, "<|im_start|>user", 1, (int32_t[]){151644, 872}, 2);
    /* added tokens: "<think>" is user-defined (matched, not special); "<|fim_prefix|>" is not
     * special in HF but looks special, so the converter made it a control token */
    EXPECT(!ft_tok_is_special(q, 151667) && ft_tok_is_special(q, 151659));
    expect_ids(q, "a<think>b", 0, (int32_t[]){64, 151667, 65}, 3);
    /* Llama-3: no add_bos_token in the file, so llama.cpp's default for llama-bpe: add BOS */
    EXPECT_EQ(ft_tok_bos(l3), 128000);
    EXPECT_EQ(ft_tok_eos(l3), 128001);
    EXPECT(ft_tok_add_bos(l3));
    expect_ids(l3, "Hello", 1, (int32_t[]){128000, 9906}, 2);
    /* DeepSeek-V3: add_bos_token true */
    expect_ids(ds, "Hello", 1, (int32_t[]){0, 19923}, 2);
    EXPECT_EQ(ft_tok_eos(ds), 1);
    /* Llama-2 (SentencePiece): "▁" prefix, BOS added, EOS not */
    expect_ids(l2, "Hello", 1, (int32_t[]){1, 22557}, 2);
    EXPECT(ft_tok_bos(l2) == 1 && ft_tok_eos(l2) == 2 && ft_tok_add_bos(l2));
    EXPECT(ft_tok_is_special(l2, 0) && ft_tok_is_special(l2, 1) && !ft_tok_is_special(l2, 3));
    char *text = NULL;
    int32_t seq[] = {1, 22557, 1526, 2};
    EXPECT_OK(ft_tok_decode(l2, seq, 4, 1, &text, NULL));
    EXPECT_STREQ(text, "Hello world");
    free(text);
done:
    ft_tok_free(q);
    ft_tok_free(l3);
    ft_tok_free(ds);
    ft_tok_free(l2);
}

/* ------------------------------------------------------------------ hand-built files */

/* Key/values appended to a GGUF image with no tensors (begun by header(w, 0, 0)); each bumps
 * the header's key count. */
static void key(struct bld *w, const char *k, uint32_t type) {
    uint64_t n_kv;
    memcpy(&n_kv, w->b + 16, 8);
    n_kv++;
    memcpy(w->b + 16, &n_kv, 8);
    str(w, k);
    u32(w, type);
}
static void kv_str(struct bld *w, const char *k, const char *v) {
    key(w, k, FT_GGUF_STRING);
    str(w, v);
}
static void kv_u32(struct bld *w, const char *k, uint32_t v) {
    key(w, k, FT_GGUF_UINT32);
    u32(w, v);
}
static void kv_bool(struct bld *w, const char *k, int v) {
    uint8_t b = (uint8_t)v;
    key(w, k, FT_GGUF_BOOL);
    put(w, &b, 1);
}
static void kv_strs(struct bld *w, const char *k, const char *const *v, int n) {
    key(w, k, FT_GGUF_ARRAY);
    u32(w, FT_GGUF_STRING);
    u64(w, (uint64_t)n);
    for (int i = 0; i < n; i++) str(w, v[i]);
}
/* an array of n 4-byte numbers of GGUF type `type` */
static void kv_arr4(struct bld *w, const char *k, uint32_t type, const void *v, int n) {
    key(w, k, FT_GGUF_ARRAY);
    u32(w, type);
    u64(w, (uint64_t)n);
    put(w, v, 4 * (size_t)n);
}

/* Parses the image as "bad.gguf" and loads its tokenizer; w is begun again for the next file. */
static enum ft_status load_built(struct bld *w, struct ft_tok **t) {
    struct ft_gguf_file *f = NULL;
    pad(w, 32, 0);
    *t = NULL;
    enum ft_status st = ft_gguf_parse(w->b, w->n, "bad.gguf", &f);
    if (st == FT_OK) st = ft_tok_load_gguf(f, t);
    ft_gguf_close(f);
    header(w, 0, 0);
    return st;
}

/* Loads and expects `want` with one line naming bad.gguf and containing sub. */
static void expect_bad(struct bld *w, enum ft_status want, const char *sub) {
    struct ft_tok *t = NULL;
    enum ft_status st = load_built(w, &t);
    CHECK_(st == want && !t, "status %d, expected %d (%s)", st, want, ft_error());
    EXPECT_CONTAINS(ft_error(), "bad.gguf: ");
    EXPECT_CONTAINS(ft_error(), sub);
    EXPECT(!strchr(ft_error(), '\n'));
    ft_tok_free(t);
}

/* A small byte-level vocabulary: "a", "b", "ab", "Ġ", "Ġab", "<|end|>" (control), "[PAD6]". */
static const char *k_bpe_tokens[] = {"a", "b", "ab", "\304\240", "\304\240ab", "<|end|>", "[PAD6]"};
static const int32_t k_bpe_types[] = {1, 1, 1, 1, 1, 3, 5};
static const char *k_bpe_merges[] = {"a b", "\304\240 ab"};

static void bpe_file(struct bld *w, const char *pre) {
    kv_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) kv_str(w, "tokenizer.ggml.pre", pre);
    kv_strs(w, "tokenizer.ggml.tokens", k_bpe_tokens, 7);
}

static void keep_line(void *ctx, enum ft_log_level lvl, const char *line) {
    if (lvl == FT_LOG_WARN) snprintf(ctx, 512, "%s", line);
}

TEST(hand_built_bpe) {
    struct bld w;
    header(&w, 0, 0);
    struct ft_tok *t = NULL;
    bpe_file(&w, "gpt-2");
    kv_arr4(&w, "tokenizer.ggml.token_type", FT_GGUF_INT32, k_bpe_types, 7);
    kv_strs(&w, "tokenizer.ggml.merges", k_bpe_merges, 2);
    kv_u32(&w, "tokenizer.ggml.eos_token_id", 5);
    kv_bool(&w, "tokenizer.ggml.add_eos_token", 1);
    kv_str(&w, "tokenizer.chat_template", "{{ messages }}");
    EXPECT_OK(load_built(&w, &t));
    if (!t) return;
    int32_t *ids = NULL;
    int n = 0;
    EXPECT_OK(ft_tok_encode(t, "ab ab<|end|>ba", 14, 1, &ids, &n));
    int32_t want[] = {2, 4, 5, 1, 0, 5}; /* "ab" " ab" <|end|> "b" "a" + EOS */
    EXPECT_EQ(n, 6);
    for (int i = 0; i < n && i < 6; i++) EXPECT_EQ(ids[i], want[i]);
    free(ids);
    EXPECT(ft_tok_bos(t) == -1 && !ft_tok_add_bos(t) && ft_tok_eos(t) == 5);
    EXPECT(ft_tok_is_special(t, 5) && !ft_tok_is_special(t, 2));
    EXPECT_STREQ(ft_tok_chat_template(t), "{{ messages }}");
    char *text = NULL;
    int32_t seq[] = {4, 6, 5};
    EXPECT_OK(ft_tok_decode(t, seq, 3, 0, &text, NULL));
    EXPECT_STREQ(text, " ab<|end|>"); /* the unused id decodes to nothing */
    free(text);
    ft_tok_free(t);
    /* no tokenizer.ggml.pre: llama.cpp's "default" regexes, with one warning */
    char warned[512] = "";
    bpe_file(&w, NULL);
    kv_strs(&w, "tokenizer.ggml.merges", k_bpe_merges, 2);
    ft_log_set_sink(keep_line, warned);
    EXPECT_OK(load_built(&w, &t));
    ft_log_set_sink(NULL, NULL);
    EXPECT_CONTAINS(warned, "bad.gguf: no tokenizer.ggml.pre");
    EXPECT_CONTAINS(warned, "\"default\"");
    ft_tok_free(t);
}

/* The pieces each tokenizer.ggml.pre splits a text into: HF tokenizers 0.23.3's pre_tokenize_str
 * with the pre-tokenizer of the tokenizer.json that name stands for (qwen2, llama-bpe,
 * deepseek-v3: the real files; qwen35, glm4, minimax-m2: llama.cpp's regexes for those names;
 * gpt-2: ByteLevel with its regex; smollm: Digits(individual) then
 * ByteLevel; gpt-4o: Split on the o200k regex; default: llama.cpp's four regexes as Splits). */
TEST(pre_tokenizer_splits) {
    static const char *text = "Hello world 12345 \xE4\xB8\xAD\xE6\x96\x87 it's\n\n x";
    /* " \u0939\u093F\u0928\u094D\u0926\u0940 x" (Hindi): letters and vowel signs (\p{M}) */
#define HINDI " \xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80"
    static const char *want[][3] = {
        {"qwen2", "Hello| world| |1|2|3|4|5| \xE4\xB8\xAD\xE6\x96\x87| it|'s|\n\n| x"},
        {"qwen35", "Hello| world| |1|2|3|4|5| \xE4\xB8\xAD\xE6\x96\x87| it|'s|\n\n| x"},
        /* Qwen2 splits the marks off ([^\r\n\p{L}\p{N}]? takes one before the next letter);
         * Qwen3.5 keeps the word whole */
        {"qwen2", " \xE0\xA4\xB9|\xE0\xA4\xBF\xE0\xA4\xA8|\xE0\xA5\x8D\xE0\xA4\xA6|\xE0\xA5\x80| x", HINDI " x"},
        {"qwen35", HINDI "| x", HINDI " x"},
        {"llama-bpe", "Hello| world| |123|45| \xE4\xB8\xAD\xE6\x96\x87| it|'s|\n\n| x"},
        {"smaug-bpe", "Hello| world| |123|45| \xE4\xB8\xAD\xE6\x96\x87| it|'s|\n\n| x"},
        {"deepseek-v3", "Hello| world| |123|45| |\xE4\xB8\xAD\xE6\x96\x87| it|'s|\n\n| x"},
        {"gpt-2", "Hello| world| 12345| \xE4\xB8\xAD\xE6\x96\x87| it|'s|\n\n| x"},
        {"smollm", "Hello| world| |1|2|3|4|5| \xE4\xB8\xAD\xE6\x96\x87| it|'s|\n\n| x"},
        {"gpt-4o", "Hello| world| |123|45| \xE4\xB8\xAD\xE6\x96\x87| it's|\n\n| x"},
        {"minimax-m2", "Hello| world| |123|45| \xE4\xB8\xAD\xE6\x96\x87| it's|\n\n| x"},
        {"glm4", "Hello| world| |123|45| \xE4\xB8\xAD\xE6\x96\x87| it|'s|\n\n| x"},
        {"default", "Hello| world| |123|45| \xE4\xB8\xAD\xE6\x96\x87| it|'|s|\n\n| x"},
    };
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        struct bld w;
        struct ft_tok *t = NULL;
        header(&w, 0, 0);
        bpe_file(&w, want[k][0]);
        kv_strs(&w, "tokenizer.ggml.merges", k_bpe_merges, 2);
        EXPECT_OK(load_built(&w, &t));
        if (!t) continue;
        struct ft_buf buf = {0}, tmpbuf = {0}, got = {0};
        struct ft_spans words = {0}, tmp = {0};
        const char *in = want[k][2] ? want[k][2] : text;
        EXPECT_OK(ft_tok_normalize(t, in, strlen(in), &buf));
        EXPECT_OK(ft_tok_pretokenize(t, &buf, &words, &tmp, &tmpbuf, md));
        for (size_t i = 0; i < words.n; i++) {
            if (i) ft_buf_put(&got, "|", 1);
            ft_buf_put(&got, buf.p + words.p[i].off, words.p[i].len);
        }
        CHECK_(got.p && !strcmp(got.p, want[k][1]), "%s: \"%s\"", want[k][0], got.p);
        free(buf.p), free(tmpbuf.p), free(got.p), free(words.p), free(tmp.p);
        ft_tok_free(t);
    }
    pcre2_match_data_free(md);
}

/* SentencePiece BPE: the pair whose merged entry scores highest merges first, the leftmost on
 * equal scores; "▁" before the text unless add_space_prefix is false; byte fallback. */
static struct ft_tok *spm(float score_ab, float score_ba, int prefix_key, int prefix) {
    static const char *tokens[] = {"<unk>", "<s>", "</s>", "<0x41>", "\xE2\x96\x81", "a", "b",
                                   "ab", "ba", "\342\226\201a"};
    int32_t types[] = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1};
    float scores[] = {0, 0, 0, 0, -5, -6, -7, score_ab, score_ba, -3};
    struct bld w;
    header(&w, 0, 0);
    struct ft_tok *t = NULL;
    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_strs(&w, "tokenizer.ggml.tokens", tokens, 10);
    kv_arr4(&w, "tokenizer.ggml.scores", FT_GGUF_FLOAT32, scores, 10);
    kv_arr4(&w, "tokenizer.ggml.token_type", FT_GGUF_INT32, types, 10);
    if (prefix_key) kv_bool(&w, "tokenizer.ggml.add_space_prefix", prefix);
    EXPECT_OK(load_built(&w, &t));
    return t;
}

TEST(hand_built_spm_merge_order) {
    struct ft_tok *t = spm(-1, -1, 0, 0);
    /* "▁aba": ▁a (-3) loses to ab/ba (-1, the leftmost, "ab", wins): ▁ ab a */
    expect_ids(t, "aba", 0, (int32_t[]){4, 7, 5}, 3);
    expect_ids(t, "aba", 1, (int32_t[]){1, 4, 7, 5}, 4); /* BOS by default */
    /* "A" is not in the vocabulary: byte fallback to <0x41>; "Z" has no byte token: <unk> */
    expect_ids(t, "A", 0, (int32_t[]){4, 3}, 2);
    expect_ids(t, "Z", 0, (int32_t[]){4, 0}, 2);
    char *text = NULL;
    EXPECT(t && ft_tok_decode(t, (int32_t[]){1, 4, 7, 3, 4, 5}, 6, 1, &text, NULL) == FT_OK);
    EXPECT_STREQ(text, "abA a"); /* leading space stripped */
    free(text);
    ft_tok_free(t);
    t = spm(-2, -1, 0, 0); /* "ba" now scores higher */
    expect_ids(t, "aba", 0, (int32_t[]){9, 8}, 2); /* ▁a (-3) after ba (-1): ▁ a ba -> ▁a ba */
    ft_tok_free(t);
    t = spm(-1, -1, 1, 0); /* add_space_prefix false */
    expect_ids(t, "aba", 0, (int32_t[]){7, 5}, 2);
    expect_ids(t, "a b", 0, (int32_t[]){5, 4, 6}, 3);
    EXPECT(t && ft_tok_decode(t, (int32_t[]){4, 5}, 2, 1, &text, NULL) == FT_OK);
    EXPECT_STREQ(text, " a"); /* nothing stripped */
    free(text);
    ft_tok_free(t);
}

TEST(bad_files_are_clear_errors) {
    struct bld w;
    header(&w, 0, 0);
    int32_t types_short[] = {1, 1, 1};
    int32_t types_bad[] = {1, 1, 1, 1, 1, 9, 5};
    static const char *bad_merge[] = {"a c"}, *no_space[] = {"ab"};
    /* no tokenizer at all */
    kv_str(&w, "general.architecture", "llama");
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.model missing");
    /* missing tokens */
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.tokens missing");
    /* tokens of the wrong type */
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_arr4(&w, "tokenizer.ggml.tokens", FT_GGUF_INT32, types_short, 3);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.tokens must be an array of strings");
    /* gpt2 without merges */
    bpe_file(&w, "gpt-2");
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.merges missing (gpt2 tokenizer needs merges)");
    /* a merge of tokens that do not exist, and one without a space */
    bpe_file(&w, "gpt-2");
    kv_strs(&w, "tokenizer.ggml.merges", bad_merge, 1);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.merges[0] \"a c\": the right part is not in "
                                  "tokenizer.ggml.tokens");
    bpe_file(&w, "gpt-2");
    kv_strs(&w, "tokenizer.ggml.merges", no_space, 1);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.merges[0] \"ab\": expected \"left right\"");
    /* unknown pre-tokenizer: the message lists the supported ones */
    bpe_file(&w, "tekken");
    kv_strs(&w, "tokenizer.ggml.merges", k_bpe_merges, 2);
    expect_bad(&w, FT_ERR_UNSUPPORTED, "tokenizer.ggml.pre \"tekken\" is not a supported "
                                       "pre-tokenizer (supported: qwen2, ");
    EXPECT_CONTAINS(ft_error(), "llama-bpe");
    EXPECT_CONTAINS(ft_error(), "deepseek-v3");
    /* token_type with the wrong length, or an unknown type */
    bpe_file(&w, "gpt-2");
    kv_strs(&w, "tokenizer.ggml.merges", k_bpe_merges, 2);
    kv_arr4(&w, "tokenizer.ggml.token_type", FT_GGUF_INT32, types_short, 3);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.token_type has 3 entries, but "
                                  "tokenizer.ggml.tokens has 7");
    bpe_file(&w, "gpt-2");
    kv_strs(&w, "tokenizer.ggml.merges", k_bpe_merges, 2);
    kv_arr4(&w, "tokenizer.ggml.token_type", FT_GGUF_INT32, types_bad, 7);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.token_type[5] = 9 is not a token type");
    /* special ids out of range */
    bpe_file(&w, "gpt-2");
    kv_strs(&w, "tokenizer.ggml.merges", k_bpe_merges, 2);
    kv_u32(&w, "tokenizer.ggml.bos_token_id", 7);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.bos_token_id = 7 is out of range (the "
                                  "vocabulary has 7 tokens)");
    bpe_file(&w, "gpt-2");
    kv_strs(&w, "tokenizer.ggml.merges", k_bpe_merges, 2);
    kv_u32(&w, "tokenizer.ggml.padding_token_id", 100);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.padding_token_id = 100 is out of range");
    /* add_bos_token without a BOS */
    bpe_file(&w, "gpt-2");
    kv_strs(&w, "tokenizer.ggml.merges", k_bpe_merges, 2);
    kv_bool(&w, "tokenizer.ggml.add_bos_token", 1);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.add_bos_token is true but the file names no "
                                  "such token");
    /* a model this engine does not read */
    kv_str(&w, "tokenizer.ggml.model", "bert");
    expect_bad(&w, FT_ERR_UNSUPPORTED, "tokenizer.ggml.model \"bert\" is not supported "
                                       "(supported: gpt2, llama)");
    /* llama without scores */
    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_strs(&w, "tokenizer.ggml.tokens", k_bpe_tokens, 7);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.scores missing (llama tokenizer needs scores");
}

/* `ft tokenize --model FILE.gguf` gives the reference ids, and keeps working with a directory. */
TEST(cli_tokenize_gguf) {
    const char *path = gguf_path("qwen3");
    EXPECT(path != NULL);
    if (!path) return;
    char *out = NULL, *err = NULL;
    expect_cli_corpus(path, "qwen3");
    char *a2[] = {"tokenize", "--model", (char *)gguf_path("llama2"), "--special", "Hello world"};
    EXPECT_EQ(run_cli(5, a2, &out, &err), 0);
    EXPECT_CONTAINS(out, "[1,22557,1526]\n");
    EXPECT_CONTAINS(out, "1\t\"<s>\"\tspecial\n");
    free(out), free(err);
    char *a3[] = {"tokenize", "--model", (char *)tok_dir("llama2"), "Hello world"};
    EXPECT_EQ(run_cli(4, a3, &out, &err), 0);
    EXPECT_CONTAINS(out, "[22557,1526]\n");
    free(out), free(err);
    char *a4[] = {"tokenize", "--model", TOK_DIR "/no-such.gguf", "x"};
    EXPECT_EQ(run_cli(4, a4, &out, &err), 2);
    EXPECT_CONTAINS(err, "ft: " TOK_DIR "/no-such.gguf");
    free(out), free(err);
    FILE *f = fopen(TOK_DIR "/not-gguf.gguf", "w");
    if (f) fputs("{\"model\": 1}", f), fclose(f);
    char *a5[] = {"tokenize", "--model", TOK_DIR "/not-gguf.gguf", "x"};
    EXPECT_EQ(run_cli(4, a5, &out, &err), 2);
    EXPECT_CONTAINS(err, TOK_DIR "/not-gguf.gguf");
    free(out), free(err);
    char *a6[] = {"tokenize", "--help"};
    EXPECT_EQ(run_cli(2, a6, &out, &err), 0);
    EXPECT_CONTAINS(out, ".gguf");
    free(out), free(err);
}

TEST_MAIN("tok_gguf")
