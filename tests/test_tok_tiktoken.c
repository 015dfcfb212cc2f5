/* test_tok_tiktoken.c — the tiktoken-format tokenizer of Kimi-K2 (tiktoken.model +
 * tokenizer_config.json, src/text/tok_tiktoken.c) against tiktoken itself: tests/data/tiktoken
 * holds a small BPE vocabulary trained by tools/gen_tiktoken_ref.py and the ids tiktoken gives
 * (Kimi's pat_str in Rust regex syntax, encode(allowed_special="all") over tokenization_kimi.py's
 * 400k / 25k cuts) for Kimi-specific strings, every line of tests/data/tok/corpus.jsonl (as a
 * count and FNV-1a hash of the ids) and long generated texts. Also: round trips, streaming
 * decode, pieces, special ids, `ft tokenize`, and one-line errors for damaged tiktoken.model
 * files (written into toktik/ in the build directory). */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"
#include "text/tok_impl.h"
#include "text/tokenizer.h"
/* `ft tokenize` is compiled into this test, as in test_tokenizer.c */
#include "cli/cmd_tokenize.c"
#include "cli/opts.c"
#define TOK_DIR "toktik"
#include "tok_util.h"

#define FIXTURE FT_TEST_DATA "/tiktoken"

static json_t *g_ref;

static json_t *ref(void) {
    if (!g_ref) {
        json_error_t e;
        g_ref = json_load_file(FIXTURE "/ref.json", 0, &e);
        if (!g_ref) fprintf(stderr, "  %s: %s\n", FIXTURE "/ref.json", e.text);
    }
    return g_ref;
}

static int ref_int(const char *k) { return (int)json_integer_value(json_object_get(ref(), k)); }

static struct ft_tok *load(void) {
    struct ft_tok *t = NULL;
    if (ft_tok_load(FIXTURE, &t) != FT_OK) fprintf(stderr, "  cannot load: %s\n", ft_error());
    return t;
}

static uint64_t fnv(const int32_t *ids, int n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) h = (h ^ (((uint32_t)ids[i] >> (8 * k)) & 0xff)) * 0x100000001b3ULL;
    return h;
}

static void show_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "    %s:", what);
    for (int i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

TEST(vocab_and_specials) {
    struct ft_tok *t = load();
    EXPECT(t != NULL && ref() != NULL);
    if (!t || !ref()) return;
    int n_base = ref_int("n_base");
    EXPECT_EQ(ft_tok_n_vocab(t), ref_int("n_vocab"));
    EXPECT_EQ(ft_tok_bos(t), ref_int("bos"));
    EXPECT_EQ(ft_tok_eos(t), ref_int("eos"));
    EXPECT_EQ(ft_tok_add_bos(t), 0); /* tokenization_kimi.py's encode adds nothing */
    const char *k;
    json_t *v;
    int bad = 0;
    json_object_foreach(json_object_get(ref(), "specials"), k, v) {
        int32_t id = (int32_t)json_integer_value(v);
        bad += ft_tok_find(t, k) != id || !ft_tok_is_special(t, id);
        size_t len;
        const char *p = ft_tok_piece(t, id, &len);
        bad += !p || strcmp(p, k);
        int32_t *ids = NULL;
        int n = 0;
        EXPECT_OK(ft_tok_encode(t, k, strlen(k), 0, &ids, &n));
        bad += n != 1 || ids[0] != id;
        free(ids);
    }
    EXPECT_EQ(bad, 0);
    /* ids the config leaves out are tokenization_kimi.py's reserved names, special too */
    char name[64];
    snprintf(name, sizeof name, "<|reserved_token_%d|>", n_base + 5);
    EXPECT_EQ(ft_tok_find(t, name), n_base + 5);
    EXPECT(ft_tok_is_special(t, n_base + 5));
    EXPECT(!ft_tok_is_special(t, n_base - 1));
    EXPECT(ft_tok_chat_template(t) && strstr(ft_tok_chat_template(t), "<|im_middle|>"));
    EXPECT(ft_tok_piece(t, ft_tok_n_vocab(t), NULL) == NULL);
    /* pieces are GPT-2-mapped, as tokenization_kimi.py's decoder spells them */
    bad = 0;
    json_object_foreach(json_object_get(ref(), "pieces"), k, v) {
        const char *p = ft_tok_piece(t, atoi(k), NULL);
        if (!p || strcmp(p, json_string_value(v))) {
            if (bad++ < 5) fprintf(stderr, "  piece %s: \"%s\", expected \"%s\"\n", k, p ? p : "(null)",
                                   json_string_value(v));
        }
    }
    EXPECT_EQ(bad, 0);
    ft_tok_free(t);
}

/* The Kimi-specific strings and the seeded random mixes: ids, decode, streamed decode. */
TEST(cases_match_tiktoken) {
    struct ft_tok *t = load();
    EXPECT(t != NULL && ref() != NULL);
    if (!t || !ref()) return;
    json_t *cases = json_object_get(ref(), "cases"), *c;
    size_t i;
    int bad = 0, bad_rt = 0, bad_stream = 0;
    EXPECT(json_array_size(cases) > 300);
    json_array_foreach(cases, i, c) {
        const char *s = ft_jstr(c, "text");
        size_t len = json_string_length(json_object_get(c, "text"));
        json_t *want = json_object_get(c, "ids");
        int32_t *ids = NULL;
        int n = 0;
        if (ft_tok_encode(t, s, len, 0, &ids, &n) != FT_OK) {
            if (bad++ < 5) fprintf(stderr, "  case %zu: %s\n", i, ft_error());
            continue;
        }
        int same = (size_t)n == json_array_size(want);
        for (int k = 0; same && k < n; k++) same = ids[k] == json_integer_value(json_array_get(want, k));
        if (!same && bad++ < 8) {
            fprintf(stderr, "  case %zu \"%s\":\n", i, s);
            show_ids("ft      ", ids, n);
            int32_t w[64];
            int nw = 0;
            for (size_t k = 0; k < json_array_size(want) && nw < 64; k++)
                w[nw++] = (int32_t)json_integer_value(json_array_get(want, k));
            show_ids("tiktoken", w, nw);
        }
        char *back = NULL;
        size_t blen = 0;
        if (ft_tok_decode(t, ids, n, 0, &back, &blen) != FT_OK || blen != len || memcmp(back, s, len))
            if (bad_rt++ < 5) fprintf(stderr, "  case %zu: decode gives \"%s\"\n", i, back ? back : "");
        free(back);
        struct ft_detok d; /* token by token: only whole characters, the same text in the end */
        char out[FT_DETOK_CAP];
        struct ft_buf b = {0};
        ft_detok_init(&d, t, 0);
        for (int k = 0; k < n; k++) ft_buf_put(&b, out, ft_detok_push(&d, ids[k], out, sizeof out));
        ft_buf_put(&b, out, ft_detok_flush(&d, out, sizeof out));
        if (b.n != len || (len && memcmp(b.p, s, len))) bad_stream++;
        free(b.p);
        free(ids);
    }
    fprintf(stderr, "  %zu cases: %d id mismatches, %d decode, %d streamed decode failures\n",
            json_array_size(cases), bad, bad_rt, bad_stream);
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(bad_rt, 0);
    EXPECT_EQ(bad_stream, 0);
    ft_tok_free(t);
}

/* Every line of the shared tokenizer corpus, by count and hash of tiktoken's ids. */
TEST(corpus_matches_tiktoken) {
    struct ft_tok *t = load();
    EXPECT(t != NULL && ref() != NULL);
    if (!t || !ref()) return;
    int n_lines = 0, bad = 0, bad_rt = 0, checked = 0;
    json_t **lines = read_jsonl(FT_TEST_DATA "/tok/corpus.jsonl", &n_lines);
    json_t *hashes = json_object_get(ref(), "corpus");
    EXPECT_EQ((size_t)n_lines, json_array_size(hashes));
    for (int i = 0; i < n_lines && (size_t)i < json_array_size(hashes); i++) {
        json_t *h = json_array_get(hashes, (size_t)i);
        if (!json_is_array(h)) continue; /* not UTF-8 text */
        const char *s = json_string_value(lines[i]);
        size_t len = json_string_length(lines[i]);
        int32_t *ids = NULL;
        int n = 0;
        checked++;
        if (!s || ft_tok_encode(t, s, len, 0, &ids, &n) != FT_OK) {
            if (bad++ < 5) fprintf(stderr, "  line %d: %s\n", i + 1, ft_error());
            continue;
        }
        char hex[32];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv(ids, n));
        if ((json_integer_value(json_array_get(h, 0)) != n ||
             strcmp(hex, json_string_value(json_array_get(h, 1)))) && bad++ < 8) {
            fprintf(stderr, "  corpus line %d \"%.80s\": %d ids, tiktoken %lld\n", i + 1, s, n,
                    (long long)json_integer_value(json_array_get(h, 0)));
            show_ids("ft", ids, n);
        }
        char *back = NULL;
        size_t blen = 0;
        if (ft_tok_decode(t, ids, n, 0, &back, &blen) != FT_OK || blen != len || memcmp(back, s, len))
            bad_rt++;
        free(back);
        free(ids);
    }
    fprintf(stderr, "  corpus: %d lines checked, %d mismatches, %d round-trip failures\n", checked,
            bad, bad_rt);
    EXPECT(checked > 2000);
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(bad_rt, 0);
    free_jsonl(lines, n_lines);
    ft_tok_free(t);
}

/* Long texts: runs past 25,000 characters and the 400,000-character pieces of
 * tokenization_kimi.py's encode. */
TEST(long_texts_cut_like_kimi) {
    struct ft_tok *t = load();
    EXPECT(t != NULL && ref() != NULL);
    if (!t || !ref()) return;
    json_t *longs = json_object_get(ref(), "long"), *c;
    size_t i;
    EXPECT(json_array_size(longs) >= 5);
    json_array_foreach(longs, i, c) {
        /* parts: [[text, count], ...], the whole repeated */
        json_t *parts = json_object_get(c, "parts"), *pt;
        size_t rep = (size_t)json_integer_value(json_object_get(c, "repeat")), lu = 0, k, o = 0;
        json_array_foreach(parts, k, pt)
            lu += json_string_length(json_array_get(pt, 0)) *
                  (size_t)json_integer_value(json_array_get(pt, 1));
        char *s = malloc(lu * rep + 1);
        for (size_t r = 0; r < rep; r++)
            json_array_foreach(parts, k, pt) {
                const char *u = json_string_value(json_array_get(pt, 0));
                size_t l = strlen(u);
                for (json_int_t m = 0; m < json_integer_value(json_array_get(pt, 1)); m++, o += l)
                    memcpy(s + o, u, l);
            }
        const char *unit = json_string_value(json_array_get(json_array_get(parts, 0), 0));
        int32_t *ids = NULL;
        int n = 0;
        EXPECT_OK(ft_tok_encode(t, s, lu * rep, 0, &ids, &n));
        char hex[32];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv(ids, n));
        CHECK_(n == json_integer_value(json_object_get(c, "n_ids")) &&
                   !strcmp(hex, ft_jstr(c, "fnv")),
               "\"%.20s\" x %zu: %d ids (%s), tiktoken %lld (%s)", unit, rep, n, hex,
               (long long)json_integer_value(json_object_get(c, "n_ids")), ft_jstr(c, "fnv"));
        free(ids);
        free(s);
    }
    /* the cut itself: no run of more than 25,000 characters, 400,000 characters at most */
    char *s = malloc(400001 * 3);
    for (int k = 0; k < 25001; k++) memcpy(s + 3 * k, "\xE4\xB8\xAD", 3); /* 中 */
    EXPECT_EQ(ft_tiktoken_cut(s, 25000 * 3, 1), 25000 * 3);
    EXPECT_EQ(ft_tiktoken_cut(s, 25001 * 3, 1), 25000 * 3);
    EXPECT_EQ(ft_tiktoken_cut(s, 25001 * 3, 0), 25001 * 3);
    memset(s, 'a', 400001);
    s[25000] = ' ';
    EXPECT_EQ(ft_tiktoken_cut(s, 50001, 1), 50001); /* 25,000 + 1 + 25,000 */
    EXPECT_EQ(ft_tiktoken_cut(s, 50002, 1), 50001);
    EXPECT_EQ(ft_tiktoken_cut(s, 400001, 0), 400000);
    free(s);
    ft_tok_free(t);
}

TEST(cli_tokenize_fixture) {
    char *out = NULL, *err = NULL;
    mkdir(TOK_DIR, 0755);
    char *argv[] = {"tokenize", "--model", FIXTURE, "<|im_user|>user<|im_middle|>Hi"};
    EXPECT_EQ(run_cli(4, argv, &out, &err), 0);
    char want[64];
    snprintf(want, sizeof want, "[%d,", ref_int("n_base") + 3);
    EXPECT(out && !strncmp(out, want, strlen(want)));
    EXPECT_CONTAINS(out, "special");
    free(out), free(err);
}

/* ---------------- damaged files ---------------- */

/* Writes a fixture dir under TOK_DIR/NAME whose tiktoken.model is text (config from the
 * fixture when with_config), loads it and returns the status; the error in ft_error(). */
static enum ft_status load_model_text(const char *name, const char *text, int with_config,
                                      const char *py) {
    char dir[256], p[512], cmd[1024];
    snprintf(dir, sizeof dir, TOK_DIR "/%s", name);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && rm -f %s/*", dir, dir);
    if (system(cmd) != 0) return FT_ERR_IO;
    snprintf(p, sizeof p, "%s/tiktoken.model", dir);
    FILE *f = fopen(p, "wb");
    if (!f) return FT_ERR_IO;
    fputs(text, f);
    fclose(f);
    if (with_config) {
        snprintf(cmd, sizeof cmd, "cp '" FIXTURE "/tokenizer_config.json' %s/", dir);
        if (system(cmd) != 0) return FT_ERR_IO;
    }
    if (py) {
        snprintf(p, sizeof p, "%s/tokenization_kimi.py", dir);
        if (!(f = fopen(p, "wb"))) return FT_ERR_IO;
        fputs(py, f);
        fclose(f);
    }
    struct ft_tok *t = NULL;
    enum ft_status st = ft_tok_load(dir, &t);
    ft_tok_free(t);
    return st;
}

/* the 256 single bytes, ranks 0..255, and "ab" as 256 */
static char *bytes_model(void) {
    static const char *b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *s = malloc(256 * 16 + 64), *o = s;
    for (int b = 0; b < 256; b++)
        o += sprintf(o, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    sprintf(o, "YWI= 256\n");
    return s;
}

static void expect_err(const char *name, const char *text, const char *what, const char *where) {
    enum ft_status st = load_model_text(name, text, 0, NULL);
    const char *e = ft_error();
    CHECK_(st == FT_ERR_FORMAT, "%s: status %d (%s)", name, (int)st, e);
    EXPECT_CONTAINS(e, "tiktoken.model");
    EXPECT_CONTAINS(e, what);
    if (where) EXPECT_CONTAINS(e, where);
    EXPECT_CONTAINS(e, "download the model's tiktoken.model again");
    EXPECT(!strchr(e, '\n'));
}

TEST(good_minimal_model_loads) {
    char *m = bytes_model();
    EXPECT_OK(load_model_text("good", m, 0, NULL));
    struct ft_tok *t = NULL;
    EXPECT_OK(ft_tok_load(TOK_DIR "/good", &t));
    if (t) {
        EXPECT_EQ(ft_tok_n_vocab(t), 257 + 256);
        expect_ids(t, "ab", 0, (int32_t[]){256}, 1);
        expect_ids(t, "abab", 0, (int32_t[]){256, 256}, 2);
        ft_tok_free(t);
    }
    /* Kimi-Linear's tokenization_kimi.py has 2 more special ids */
    EXPECT_OK(load_model_text("py258", m, 0,
                              "num_reserved_special_tokens = 256\n"
                              "range(n, n + self.num_reserved_special_tokens + 2)\n"));
    EXPECT_OK(ft_tok_load(TOK_DIR "/py258", &t));
    if (t) EXPECT_EQ(ft_tok_n_vocab(t), 257 + 258);
    ft_tok_free(t);
    free(m);
}

TEST(damaged_models_fail_with_line) {
    char *m = bytes_model(), *s = malloc(strlen(m) + 256);
    /* bad base64 on line 3 */
    strcpy(s, m);
    s[strchr(strchr(s, '\n') + 1, '\n') + 1 - s] = '*';
    expect_err("b64", s, "is not base64", "tiktoken.model:3:");
    /* a duplicate rank: line 258 says 255 again */
    sprintf(s, "%sYWJj 255\n", m);
    expect_err("dup", s, "rank 255 appears twice", "tiktoken.model:258:");
    /* a gap: 256 tokens, then rank 300 */
    strcpy(s, m);
    strcpy(strstr(s, "YWI= 256"), "YWI= 300\n");
    expect_err("gap", s, "can hold ranks 0 to", "tiktoken.model:257: rank 300");
    /* a gap hidden by a blank line: 257 tokens on 258 lines, rank 257 for 256 */
    strcpy(s, m);
    strcpy(strstr(s, "YWI= 256"), "\nYWI= 257\n");
    expect_err("gap2", s, "rank 256 is missing", "tiktoken.model:258: rank 257");
    /* an empty file, and one of empty lines */
    expect_err("empty", "", "no tokens", NULL);
    expect_err("blank", "\n\n", "no tokens", NULL);
    /* a truncated last line: no rank, then half a base64 group */
    sprintf(s, "%sYWJj", m);
    expect_err("trunc", s, "expected \"BASE64 RANK\"", "tiktoken.model:258:");
    sprintf(s, "%sYW 257\n", m);
    expect_err("trunc64", s, "is not base64", "tiktoken.model:258:");
    /* a rank that is not a number */
    sprintf(s, "%sYWJj 2x7\n", m);
    expect_err("rank", s, "is not a number", "tiktoken.model:258:");
    /* a byte without a token */
    sprintf(s, "YWJj 0\n%s", strchr(m, '\n') + 1);
    expect_err("nobyte", s, "no token for the single byte", NULL);
    /* a config id inside the base tokens */
    {
        char dir[] = TOK_DIR "/cfg";
        load_model_text("cfg", m, 0, NULL);
        FILE *f = fopen(TOK_DIR "/cfg/tokenizer_config.json", "w");
        fputs("{\"added_tokens_decoder\": {\"5\": {\"content\": \"[BOS]\", \"special\": true}}}", f);
        fclose(f);
        struct ft_tok *t = NULL;
        EXPECT_EQ(ft_tok_load(dir, &t), FT_ERR_FORMAT);
        EXPECT_CONTAINS(ft_error(), "added_tokens_decoder[\"5\"]");
        ft_tok_free(t);
    }
    free(s);
    free(m);
}

int main(int argc, char **argv) {
    (void)tok_parity, (void)expect_cli_corpus, (void)tok_load_json; /* tok_util.h's others */
    mkdir(TOK_DIR, 0755);
    int rc = test_run("tok_tiktoken", argc, argv);
    json_decref(g_ref);
    return rc;
}
