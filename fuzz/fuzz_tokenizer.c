/* fuzz_tokenizer.c — libFuzzer target for the tokenizer's encode and decode on the four real
 * tokenizers of tests/data/tok (Qwen3, Llama 3, DeepSeek-V3: byte-level BPE; Llama 2:
 * SentencePiece-style with byte fallback), unpacked once into a temporary directory. The
 * input's first byte picks the tokenizer and the flags (add_special, skip_special); the rest is
 * the text. Checks: encode accepts exactly the valid UTF-8 inputs (else FT_ERR_INVALID_ARG);
 * every id is in the vocabulary; the whole-sequence decode and the streaming decoder
 * (ft_detok_push, ft_detok_flush) give the same valid UTF-8; and for the byte-level tokenizers
 * printable-ASCII text (invariant under their normalisers) decodes back to itself.
 * Single-threaded. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "text/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *k_names[] = {"qwen3", "llama3", "deepseek_v3", "llama2"};
enum { N_TOK = 4, BYTE_LEVEL = 3 }; /* the first three are byte-level BPE */
static struct ft_tok *g_tok[N_TOK];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char dir[] = "/tmp/ft-fuzz-tok.XXXXXX";
    if (!mkdtemp(dir)) abort();
    for (int i = 0; i < N_TOK; i++) {
        char cmd[2048], path[512];
        snprintf(path, sizeof path, "%s/%s", dir, k_names[i]);
        snprintf(cmd, sizeof cmd,
                 "mkdir -p %s && xz -dc '%s/tok/%s/tokenizer.json.xz' > %s/tokenizer.json && "
                 "cp '%s/tok/%s/tokenizer_config.json' %s/",
                 path, FT_TEST_DATA, k_names[i], path, FT_TEST_DATA, k_names[i], path);
        if (system(cmd) != 0 || ft_tok_load(path, &g_tok[i]) != FT_OK) {
            fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", k_names[i], ft_error());
            abort();
        }
    }
    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0) fprintf(stderr, "fuzz_tokenizer: could not remove %s\n", dir);
    return 0;
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). */
static int utf8_valid(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const uint8_t c = s[i];
        uint32_t cp;
        int k;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) k = 1, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) k = 2, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) k = 3, cp = c & 0x07;
        else return 0;
        if (i + (size_t)k >= n) return 0; /* cut short */
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

static int printable_ascii(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const struct ft_tok *t = g_tok[data[0] % N_TOK];
    const int byte_level = data[0] % N_TOK < BYTE_LEVEL, add_special = (data[0] >> 2) & 1;
    const int skip_special = (data[0] >> 3) & 1;
    const uint8_t *text = data + 1;
    const size_t n = size - 1;
    int32_t *ids = NULL;
    int n_ids = 0;
    const enum ft_status st = ft_tok_encode(t, (const char *)text, n, add_special, &ids, &n_ids);
    if (!utf8_valid(text, n)) {
        if (st != FT_ERR_INVALID_ARG) abort(); /* invalid UTF-8 is refused, by name */
        free(ids);
        return 0;
    }
    if (st != FT_OK) abort();
    const int V = ft_tok_n_vocab(t);
    for (int i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= V) abort();
    char *whole = NULL;
    size_t wlen = 0;
    if (ft_tok_decode(t, ids, n_ids, skip_special, &whole, &wlen) != FT_OK) abort();
    if (strlen(whole) > wlen || !utf8_valid((const uint8_t *)whole, wlen)) abort();
    /* the streaming decoder gives the same text */
    struct ft_detok d;
    ft_detok_init(&d, t, skip_special);
    char *st_text = malloc((size_t)n_ids * FT_DETOK_CAP + FT_DETOK_CAP);
    size_t slen = 0;
    for (int i = 0; i < n_ids; i++) slen += ft_detok_push(&d, ids[i], st_text + slen, FT_DETOK_CAP);
    slen += ft_detok_flush(&d, st_text + slen, FT_DETOK_CAP);
    if (slen != wlen || memcmp(st_text, whole, wlen)) abort();
    if (byte_level && !add_special && !skip_special && printable_ascii(text, n) &&
        (wlen != n || memcmp(whole, text, n)))
        abort(); /* printable ASCII round-trips */
    free(st_text), free(whole), free(ids);
    return 0;
}
