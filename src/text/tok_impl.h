/* tok_impl.h — internals of the tokenizer shared by tokenizer.c (tokenizer.json loader and the
 * building steps both loaders use), tok_gguf.c (GGUF loader), pretok.c (normalizers and
 * pre-tokenizers), bpe.c (the model and the encode driver), detok.c (decoding) and tokmap.c (hash
 * maps). Not a public header. Threading: everything here is read-only after loading. */
#ifndef FT_TEXT_TOK_IMPL_H
#define FT_TEXT_TOK_IMPL_H

#include <stdint.h>

#include <jansson.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/status.h"
#include "text/tokenizer.h"

/* uint64 -> uint64 open-addressing map (keys != UINT64_MAX). */
struct ft_u64map {
    uint64_t *keys; /* [cap], UINT64_MAX = empty */
    uint64_t *vals; /* [cap] */
    uint64_t mask;  /* cap - 1 */
    uint64_t n;
};
enum ft_status ft_u64map_init(struct ft_u64map *m, uint64_t n_expected);
void ft_u64map_free(struct ft_u64map *m);
void ft_u64map_put(struct ft_u64map *m, uint64_t key, uint64_t val); /* replaces; never grows */
/* o[key] as a string, or NULL when absent or not a string */
static inline const char *ft_jstr(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}
static inline uint64_t ft_hash64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}
static inline int ft_u64map_get(const struct ft_u64map *m, uint64_t key, uint64_t *val) {
    uint64_t i = ft_hash64(key) & m->mask;
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == key) {
            *val = m->vals[i];
            return 1;
        }
        if (k == UINT64_MAX) return 0;
        i = (i + 1) & m->mask;
    }
}
uint64_t ft_hash_bytes(const void *p, size_t n);

enum ft_norm_kind { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_PREPEND, NORM_REPLACE,
                    NORM_LOWERCASE };
struct ft_norm {
    enum ft_norm_kind kind;
    char *a, *b; /* Prepend: a; Replace: a -> b */
};

enum ft_split_behavior { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT,
                         SPLIT_CONTIGUOUS };
enum ft_pre_kind { PRE_SPLIT, PRE_BYTELEVEL };
struct ft_pre {
    enum ft_pre_kind kind;
    pcre2_code *re;         /* Split pattern, or ByteLevel's GPT-2 regex when use_regex */
    enum ft_split_behavior behavior;
    int invert;
    int add_prefix_space;   /* ByteLevel */
};

struct ft_added {
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word;
};

struct ft_tok {
    char *path;               /* tokenizer.json or the GGUF file, for messages */
    /* vocabulary: model vocab + added tokens, indexed by id */
    int n_vocab;
    char *piece_arena;
    uint32_t *piece_off, *piece_len; /* [n_vocab]; piece_len UINT32_MAX = unassigned id */
    int32_t *str_slots;       /* string -> id open addressing over pieces, -1 = empty */
    uint32_t str_mask;
    uint8_t *is_special;      /* [n_vocab] */
    /* decoded bytes of each id */
    char *dec_arena;
    uint32_t *dec_off, *dec_len; /* [n_vocab] */
    size_t max_dec;
    /* normalizer, pre-tokenizers */
    struct ft_norm *norms;
    int n_norms;
    struct ft_pre *pres;
    int n_pres;
    int byte_level;           /* a ByteLevel pre-tokenizer maps bytes to GPT-2 chars */
    /* BPE model */
    struct ft_u64map merges;  /* (left id << 32 | right id) -> (rank << 32 | new id) */
    int32_t byte_id[256];     /* byte-level: id of the GPT-2 char of each byte, -1 if none */
    int32_t fallback_id[256]; /* id of <0xNN>, -1 if none */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    /* SentencePiece-style files without a pre-tokenizer: when no vocabulary entry has the
     * metaspace (e.g. "▁") after another character, no merge can cross the boundary before a
     * metaspace that follows another character, so words split there (enabling the word cache)
     * give the same ids as BPE over the whole text. */
    char word_split[8];
    int word_split_len;
    /* added tokens: a byte trie, (node << 8 | byte) -> child node */
    struct ft_added *added;
    int n_added;
    struct ft_u64map trie;
    int32_t *trie_tok;        /* [n_nodes] index into added, -1 none */
    int n_nodes;
    uint8_t first_byte[256];  /* 1 when an added token starts with this byte */
    /* post-processor */
    int32_t *prefix, *suffix;
    int n_prefix, n_suffix;
    /* decoder */
    int dec_byte_level, dec_byte_fallback;
    struct ft_norm *dec_repl; /* decoder Replace steps (a -> b), in order */
    int n_dec_repl;
    int strip_n;              /* leading strip_c chars removed from the decoded text */
    char strip_c;
    /* tokenizer_config.json (GGUF: tokenizer.ggml.*_token_id, tokenizer.chat_template) */
    int32_t bos_id, eos_id;
    char *chat_template;
    /* tiktoken.model (tok_tiktoken.c): the text is cut as tokenization_kimi.py's encode cuts it
     * before tiktoken sees it (bpe.c) */
    int tiktoken_chunks;
};

int32_t ft_tok_lookup(const struct ft_tok *t, const char *s, size_t n);

/* GPT-2 byte <-> unicode mapping: the code point of byte b. */
uint32_t ft_bytelevel_cp(uint8_t b);
/* Byte of a code point in the mapping, -1 if the code point is not one of the 256. */
int ft_bytelevel_byte(uint32_t cp);
/* Length of the valid UTF-8 prefix of s (== n when all valid); with *bad the offending byte. */
size_t ft_utf8_valid(const char *s, size_t n);
/* Decodes one code point at s (valid UTF-8 assumed); returns its length. */
int ft_utf8_dec(const unsigned char *s, uint32_t *cp);
int ft_utf8_enc(uint32_t cp, char *out);

/* growable byte buffer / span list used by the encoder */
struct ft_buf {
    char *p;
    size_t n, cap;
};
enum ft_status ft_buf_put(struct ft_buf *b, const void *s, size_t n);
struct ft_span {
    uint32_t off, len;
};
struct ft_spans {
    struct ft_span *p;
    size_t n, cap;
};
enum ft_status ft_spans_add(struct ft_spans *s, uint32_t off, uint32_t len);

/* pretok.c: normalizes seg into out (appending) */
enum ft_status ft_tok_normalize(const struct ft_tok *t, const char *seg, size_t n, struct ft_buf *out);
/* A list of normalizer steps (the normalizer's, or the decoder's Replace steps): appends one
 * (strings copied; t names the file in errors), or runs them in order, appending to out. */
enum ft_status ft_norms_add(const struct ft_tok *t, struct ft_norm **steps, int *n,
                            enum ft_norm_kind kind, const char *a, const char *b);
enum ft_status ft_norms_apply(const struct ft_norm *steps, int n_steps, const char *seg, size_t n,
                              struct ft_buf *out);
/* pretok.c: splits buf into words (spans into *buf, which ByteLevel's prefix space may rewrite) */
enum ft_status ft_tok_pretokenize(const struct ft_tok *t, struct ft_buf *buf, struct ft_spans *words,
                                  struct ft_spans *tmp, struct ft_buf *tmpbuf,
                                  pcre2_match_data *md);
/* pretok.c / tokenizer.c: parse from JSON */
struct json_t;
enum ft_status ft_tok_parse_normalizer(struct ft_tok *t, const void *json);
enum ft_status ft_tok_parse_pretok(struct ft_tok *t, const void *json);
enum ft_status ft_tok_parse_decoder(struct ft_tok *t, const void *json);
enum ft_status ft_tok_build_decoded(struct ft_tok *t);

/* pretok.c: appends a pre-tokenizer. Split: pat (len bytes, a PCRE2 regex or, literal, a plain
 * string) with its behavior; ByteLevel: the GPT-2 byte mapping, with its regex when use_regex. */
enum ft_status ft_tok_add_split(struct ft_tok *t, const char *pat, size_t len, int literal,
                                enum ft_split_behavior behavior, int invert);
enum ft_status ft_tok_add_bytelevel(struct ft_tok *t, int add_prefix_space, int use_regex);

/* ---- building a struct ft_tok: tokenizer.c, shared by both loaders, in this order ---- */

/* A new empty tokenizer (no ids: bos/eos/unk -1); path names the source in messages. */
enum ft_status ft_tok_new(const char *path, struct ft_tok **out);
/* One vocabulary string: len bytes at s (may hold NULs), for id in [0, 2^24]. */
struct ft_tok_str {
    int32_t id;
    uint32_t len;
    const char *s;
};
/* The vocabulary (strings copied); n_vocab = 1 + the largest id. */
enum ft_status ft_tok_set_vocab(struct ft_tok *t, const struct ft_tok_str *p, size_t n);
/* Merge `a b` with rank i into t->merges (initialised by the caller); key names the merge list
 * and vocab_key the vocabulary in messages. */
enum ft_status ft_tok_add_merge(struct ft_tok *t, const char *key, size_t i, const char *a,
                                size_t la, const char *b, size_t lb, const char *vocab_key);
/* The added-token trie and is_special from t->added[0..n_added) (each matches its id's string). */
enum ft_status ft_tok_build_added(struct ft_tok *t);
/* Once normalizers, pre-tokenizers and the decoder are set: byte-level and <0xNN> ids, the word
 * split, the decoded bytes of every id. */
enum ft_status ft_tok_finish(struct ft_tok *t);
/* tok_gguf.c: the Split regexes a byte-level GGUF's tokenizer.ggml.pre stands for (NULL when
 * unknown), for tests that compare them with tokenizer.json files. */
const char *const *ft_tok_gguf_pre_regexes(const char *pre, int *n);
/* tokenizer.c: tokenizer_config.json at path: bos_token, eos_token, chat_template and, unless
 * have_template (a post-processor decided), add_bos_token / add_eos_token. */
enum ft_status ft_tok_load_config(struct ft_tok *t, const char *path, int have_template);
/* tok_tiktoken.c: dir/tiktoken.model + dir/tokenizer_config.json (Kimi-K2's tokenization_kimi.py). */
enum ft_status ft_tok_load_tiktoken(const char *dir, struct ft_tok **out);
/* tok_tiktoken.c: where tokenization_kimi.py's encode cuts text[0..len) before tiktoken sees it:
 * the end of its first 400,000 characters (runs 0), or, within such a piece, the end of the first
 * piece with no run of more than 25,000 whitespace or non-whitespace characters (runs 1); len
 * when there is no cut. */
size_t ft_tiktoken_cut(const char *text, size_t len, int runs);
/* Appends id to a prefix/suffix list. */
enum ft_status ft_tok_push_id(const struct ft_tok *t, int32_t **arr, int *n, int32_t id);

#endif
