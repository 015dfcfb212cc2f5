/* tokmap.c — small building blocks of the tokenizer: a uint64 hash map (merges, added-token
 * trie), byte hashing, UTF-8 helpers, the GPT-2 byte<->unicode mapping, growable buffers.
 * Called by the other src/text files. Threading: pure functions; maps are read-only after load. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_impl.h"

enum ft_status ft_u64map_init(struct ft_u64map *m, uint64_t n_expected) {
    uint64_t cap = 16;
    while (cap < n_expected * 2) cap <<= 1;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        ft_u64map_free(m);
        return ft_fail(FT_ERR_OOM, "tokenizer: out of memory for a hash map of %llu entries",
                       (unsigned long long)n_expected);
    }
    memset(m->keys, 0xff, cap * sizeof *m->keys);
    m->mask = cap - 1;
    m->n = 0;
    return FT_OK;
}

void ft_u64map_free(struct ft_u64map *m) {
    free(m->keys);
    free(m->vals);
    m->keys = m->vals = NULL;
}

void ft_u64map_put(struct ft_u64map *m, uint64_t key, uint64_t val) {
    uint64_t i = ft_hash64(key) & m->mask;
    while (m->keys[i] != UINT64_MAX && m->keys[i] != key) i = (i + 1) & m->mask;
    if (m->keys[i] == UINT64_MAX) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
}

uint64_t ft_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ ft_hash64(w)) * 0x100000001b3ULL;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ ft_hash64(w ^ ((uint64_t)n << 56))) * 0x100000001b3ULL;
    return ft_hash64(h);
}

/* --- UTF-8 --- */

size_t ft_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t min;
        if ((c & 0xe0) == 0xc0) len = 2, min = 0x80;
        else if ((c & 0xf0) == 0xe0) len = 3, min = 0x800;
        else if ((c & 0xf8) == 0xf0) len = 4, min = 0x10000;
        else return i;
        if (i + len > n) return i;
        uint32_t cp = c & (0x7f >> len);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
        i += len;
    }
    return n;
}

int ft_utf8_dec(const unsigned char *s, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if ((c & 0xe0) == 0xc0) { *cp = (c & 0x1f) << 6 | (s[1] & 0x3f); return 2; }
    if ((c & 0xf0) == 0xe0) {
        *cp = (c & 0x0f) << 12 | (s[1] & 0x3f) << 6 | (s[2] & 0x3f);
        return 3;
    }
    *cp = (c & 0x07) << 18 | (s[1] & 0x3f) << 12 | (s[2] & 0x3f) << 6 | (s[3] & 0x3f);
    return 4;
}

int ft_utf8_enc(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = cp; return 1; }
    if (cp < 0x800) { o[0] = 0xc0 | cp >> 6; o[1] = 0x80 | (cp & 0x3f); return 2; }
    if (cp < 0x10000) {
        o[0] = 0xe0 | cp >> 12; o[1] = 0x80 | (cp >> 6 & 0x3f); o[2] = 0x80 | (cp & 0x3f);
        return 3;
    }
    o[0] = 0xf0 | cp >> 18; o[1] = 0x80 | (cp >> 12 & 0x3f); o[2] = 0x80 | (cp >> 6 & 0x3f);
    o[3] = 0x80 | (cp & 0x3f);
    return 4;
}

/* --- GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order. The 68 are 0x00-0x20 (33), 0x7f-0xa0 (34) and 0xad, so a byte's rank
 * among them is closed-form (these run once per input byte when encoding). --- */

static int printable(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t ft_bytelevel_cp(uint8_t b) {
    if (printable(b)) return b;
    return 256 + (b <= 0x20 ? b : b <= 0xa0 ? 33u + (b - 0x7fu) : 67u);
}

int ft_bytelevel_byte(uint32_t cp) {
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    return n < 33 ? (int)n : n < 67 ? (int)(0x7f + n - 33) : n == 67 ? 0xad : -1;
}

/* --- buffers --- */

enum ft_status ft_buf_put(struct ft_buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return ft_fail(FT_ERR_OOM, "tokenizer: out of memory (%zu bytes)", cap);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return FT_OK;
}

enum ft_status ft_spans_add(struct ft_spans *s, uint32_t off, uint32_t len) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct ft_span *p = realloc(s->p, cap * sizeof *p);
        if (!p) return ft_fail(FT_ERR_OOM, "tokenizer: out of memory (%zu spans)", cap);
        s->p = p;
        s->cap = cap;
    }
    s->p[s->n].off = off;
    s->p[s->n].len = len;
    s->n++;
    return FT_OK;
}
