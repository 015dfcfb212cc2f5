/* detok.c — decoding ids to text: parses tokenizer.json's decoder (ByteLevel, Replace,
 * ByteFallback, Fuse, Strip, Metaspace, Sequence), precomputes the bytes each id decodes to, and
 * streams them out UTF-8-safely (an incomplete multi-byte character is held until a later token
 * completes it; invalid bytes become U+FFFD).
 * Threading: parsing runs in ft_tok_load; a struct ft_detok is one stream, owned by one thread. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_impl.h"

static enum ft_status add_repl(struct ft_tok *t, const char *a, const char *b) {
    return ft_norms_add(t, &t->dec_repl, &t->n_dec_repl, NORM_REPLACE, a, b);
}

enum ft_status ft_tok_parse_decoder(struct ft_tok *t, const void *jv) {
    const json_t *j = jv;
    enum ft_status st;
    if (!j || json_is_null(j)) return FT_OK;
    const char *type = ft_jstr(j, "type");
    if (!type) return ft_fail(FT_ERR_FORMAT, "%s: decoder: missing \"type\"", t->path);
    if (!strcmp(type, "Sequence")) {
        size_t i;
        const json_t *e;
        json_array_foreach(json_object_get(j, "decoders"), i, e) {
            if ((st = ft_tok_parse_decoder(t, e))) return st;
        }
        return FT_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        t->dec_byte_level = 1;
        return FT_OK;
    }
    if (!strcmp(type, "ByteFallback")) {
        t->dec_byte_fallback = 1;
        return FT_OK;
    }
    if (!strcmp(type, "Fuse")) return FT_OK;
    if (!strcmp(type, "Replace")) {
        const char *a = ft_jstr(json_object_get(j, "pattern"), "String"), *b = ft_jstr(j, "content");
        if (!a || !*a || !b)
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: decoder Replace: only a non-empty "
                           "{\"pattern\": {\"String\": ...}} with \"content\" is supported", t->path);
        return add_repl(t, a, b);
    }
    if (!strcmp(type, "Strip")) {
        const char *c = ft_jstr(j, "content");
        json_int_t start = json_integer_value(json_object_get(j, "start"));
        json_int_t stop = json_integer_value(json_object_get(j, "stop"));
        if (!c || strlen(c) != 1 || stop != 0 || start < 0 || start > 64)
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: decoder Strip: only an ASCII \"content\" with "
                           "\"stop\": 0 is supported", t->path);
        t->strip_c = c[0];
        t->strip_n = (int)start;
        return FT_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *r = ft_jstr(j, "replacement"), *scheme = ft_jstr(j, "prepend_scheme");
        if (!r) return ft_fail(FT_ERR_FORMAT, "%s: decoder Metaspace: missing \"replacement\"", t->path);
        if ((st = add_repl(t, r, " "))) return st;
        const json_t *aps = json_object_get(j, "add_prefix_space");
        if ((scheme && strcmp(scheme, "never")) || (!scheme && (!aps || json_is_true(aps)))) {
            t->strip_c = ' ';
            t->strip_n = 1;
        }
        return FT_OK;
    }
    return ft_fail(FT_ERR_UNSUPPORTED,
                   "%s: decoder type \"%s\" is not supported (supported: ByteLevel, Replace, "
                   "ByteFallback, Fuse, Strip, Metaspace, Sequence)",
                   t->path, type);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Bytes of one token per the decoder, appended to out. */
static enum ft_status decode_piece(const struct ft_tok *t, const char *p, size_t n,
                                   struct ft_buf *out) {
    enum ft_status st = FT_OK;
    /* A GGUF vocabulary is raw bytes; a piece that is not UTF-8 cannot be byte-level text and
     * is kept as is (ft_utf8_dec would read past its end). */
    if (t->dec_byte_level && ft_utf8_valid(p, n) == n) {
        size_t start = out->n;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            i += ft_utf8_dec((const unsigned char *)p + i, &cp);
            int b = ft_bytelevel_byte(cp);
            if (b < 0) { /* not a byte-level token (tokenizers keeps its text as is) */
                out->n = start;
                return ft_buf_put(out, p, n);
            }
            unsigned char c = (unsigned char)b;
            if ((st = ft_buf_put(out, &c, 1))) return st;
        }
        return FT_OK;
    }
    if (t->dec_byte_fallback && n == 6 && !memcmp(p, "<0x", 3) && p[5] == '>' &&
        hexval(p[3]) >= 0 && hexval(p[4]) >= 0) {
        unsigned char c = (unsigned char)(hexval(p[3]) * 16 + hexval(p[4]));
        return ft_buf_put(out, &c, 1);
    }
    return ft_norms_apply(t->dec_repl, t->n_dec_repl, p, n, out);
}

enum ft_status ft_tok_build_decoded(struct ft_tok *t) {
    enum ft_status st = FT_OK;
    struct ft_buf out = {0};
    t->dec_off = malloc(t->n_vocab * sizeof *t->dec_off);
    t->dec_len = calloc(t->n_vocab, sizeof *t->dec_len);
    if (!t->dec_off || !t->dec_len) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", t->path);
        goto fail;
    }
    for (int id = 0; id < t->n_vocab; id++) {
        t->dec_off[id] = (uint32_t)out.n;
        if (t->piece_len[id] == UINT32_MAX) continue;
        FT_TRY(decode_piece(t, t->piece_arena + t->piece_off[id], t->piece_len[id], &out));
        t->dec_len[id] = (uint32_t)(out.n - t->dec_off[id]);
        if (t->dec_len[id] > 1024) {
            st = ft_fail(FT_ERR_UNSUPPORTED, "%s: token %d decodes to %u bytes (more than 1024)",
                         t->path, id, t->dec_len[id]);
            goto fail;
        }
        if (t->dec_len[id] > t->max_dec) t->max_dec = t->dec_len[id];
    }
    t->dec_arena = out.p;
    out.p = NULL;
fail:
    free(out.p);
    return st;
}

/* ---------------- streaming ---------------- */

void ft_detok_init(struct ft_detok *d, const struct ft_tok *t, int skip_special) {
    memset(d, 0, sizeof *d);
    d->t = t;
    d->skip_special = skip_special;
    d->strip_left = t->strip_n;
}

static int seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0 && c >= 0xc2) return 2;
    if ((c & 0xf0) == 0xe0) return 3;
    if ((c & 0xf8) == 0xf0 && c <= 0xf4) return 4;
    return 0; /* never valid as a lead byte */
}

/* Whether byte c may follow the k bytes held in pend (k >= 1), per the UTF-8 well-formed table. */
static int cont_ok(const unsigned char *pend, int k, unsigned char c) {
    if ((c & 0xc0) != 0x80) return 0;
    if (k == 1) {
        if (pend[0] == 0xe0) return c >= 0xa0;
        if (pend[0] == 0xed) return c <= 0x9f;
        if (pend[0] == 0xf0) return c >= 0x90;
        if (pend[0] == 0xf4) return c <= 0x8f;
    }
    return 1;
}

static size_t put(char *out, size_t cap, size_t o, const void *s, size_t n) {
    if (o + n > cap) return o; /* cut at a character boundary */
    memcpy(out + o, s, n);
    return o + n;
}

size_t ft_detok_push(struct ft_detok *d, int32_t id, char *out, size_t cap) {
    const struct ft_tok *t = d->t;
    if (id < 0 || id >= t->n_vocab || (d->skip_special && t->is_special[id])) return 0;
    const unsigned char *s = (const unsigned char *)t->dec_arena + t->dec_off[id];
    size_t n = t->dec_len[id], o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (d->strip_left > 0) {
            if (c == (unsigned char)t->strip_c) {
                d->strip_left--;
                continue;
            }
            d->strip_left = 0;
        }
        if (d->n_pend == 0) {
            int l = seq_len(c);
            if (l == 1) {
                o = put(out, cap, o, &c, 1);
            } else if (l == 0) {
                o = put(out, cap, o, "\xEF\xBF\xBD", 3);
            } else {
                d->pend[d->n_pend++] = c;
            }
            continue;
        }
        if (!cont_ok(d->pend, d->n_pend, c)) { /* broken sequence: U+FFFD, then retry c */
            o = put(out, cap, o, "\xEF\xBF\xBD", 3);
            d->n_pend = 0;
            i--;
            continue;
        }
        d->pend[d->n_pend++] = c;
        if (d->n_pend == seq_len(d->pend[0])) {
            o = put(out, cap, o, d->pend, (size_t)d->n_pend);
            d->n_pend = 0;
        }
    }
    return o;
}

size_t ft_detok_flush(struct ft_detok *d, char *out, size_t cap) {
    size_t o = 0;
    if (d->n_pend) o = put(out, cap, 0, "\xEF\xBF\xBD", 3);
    d->n_pend = 0;
    return o;
}

enum ft_status ft_tok_decode(const struct ft_tok *t, const int32_t *ids, int n_ids,
                             int skip_special, char **text, size_t *len) {
    enum ft_status st = FT_OK;
    struct ft_buf b = {0};
    struct ft_detok d;
    char chunk[FT_DETOK_CAP];
    *text = NULL;
    ft_detok_init(&d, t, skip_special);
    FT_TRY(ft_buf_put(&b, "", 0));
    for (int i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            st = ft_fail(FT_ERR_INVALID_ARG, "decode: token id %d out of range [0, %d)", ids[i],
                         t->n_vocab);
            goto fail;
        }
        FT_TRY(ft_buf_put(&b, chunk, ft_detok_push(&d, ids[i], chunk, sizeof chunk)));
    }
    FT_TRY(ft_buf_put(&b, chunk, ft_detok_flush(&d, chunk, sizeof chunk)));
    *text = b.p;
    if (len) *len = b.n;
    return FT_OK;
fail:
    free(b.p);
    return st;
}
