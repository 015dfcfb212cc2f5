/* bpe.c — the encoder: splits text on added tokens (longest match, a byte trie), normalizes and
 * pre-tokenizes the rest (pretok.c), then runs BPE merges by rank over each word (a linked list of
 * symbols plus a min-heap of candidate merges, as HF tokenizers' Word::merge_all), with a per-call
 * cache of repeated words. Byte-level vocabularies start from one symbol per byte (GPT-2 mapping);
 * SentencePiece-style ones from one symbol per character, with <0xNN> byte fallback or unk.
 * Threading: ft_tok_encode uses only its own scratch; any number of threads may call it at once. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_impl.h"

struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    int32_t alive;
};
struct cand {
    uint32_t rank, pos;
    int32_t new_id;
};
struct cache_ent {
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, n_ids;
};

struct enc {
    const struct ft_tok *t;
    struct ft_buf norm, tmpbuf, scratch, ckeys;
    struct ft_spans words, tmp;
    pcre2_match_data *md;
    struct sym *syms;
    size_t cap_syms;
    struct cand *heap;
    size_t n_heap, cap_heap;
    int32_t *ids;
    size_t n_ids, cap_ids;
    struct cache_ent *cache; /* direct-mapped, NULL when the input is short */
    uint32_t cache_mask;
    int32_t *cids;
    size_t n_cids, cap_cids;
};

static enum ft_status emit(struct enc *e, int32_t id) {
    if (e->n_ids == e->cap_ids) {
        size_t cap = e->cap_ids ? e->cap_ids * 2 : 256;
        int32_t *p = realloc(e->ids, cap * sizeof *p);
        if (!p) return ft_fail(FT_ERR_OOM, "tokenizer: out of memory (%zu ids)", cap);
        e->ids = p;
        e->cap_ids = cap;
    }
    e->ids[e->n_ids++] = id;
    return FT_OK;
}

/* --- min-heap of merge candidates ordered by (rank, pos) --- */

static int cand_less(const struct cand *a, const struct cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static enum ft_status heap_push(struct enc *e, struct cand c) {
    if (e->n_heap == e->cap_heap) {
        size_t cap = e->cap_heap ? e->cap_heap * 2 : 256;
        struct cand *p = realloc(e->heap, cap * sizeof *p);
        if (!p) return ft_fail(FT_ERR_OOM, "tokenizer: out of memory (BPE heap)");
        e->heap = p;
        e->cap_heap = cap;
    }
    size_t i = e->n_heap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!cand_less(&c, &e->heap[up])) break;
        e->heap[i] = e->heap[up];
        i = up;
    }
    e->heap[i] = c;
    return FT_OK;
}

static struct cand heap_pop(struct enc *e) {
    struct cand top = e->heap[0], last = e->heap[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct cand *best = &last;
        if (l < n && cand_less(&e->heap[l], best)) m = l, best = &e->heap[l];
        if (r < n && cand_less(&e->heap[r], best)) m = r;
        if (m == i) break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n) e->heap[i] = last;
    return top;
}

static enum ft_status add_cand(struct enc *e, int32_t pos) {
    const struct sym *s = e->syms;
    uint64_t v;
    if (!ft_u64map_get(&e->t->merges, (uint64_t)s[pos].id << 32 | (uint32_t)s[s[pos].next].id, &v))
        return FT_OK;
    struct cand c = {(uint32_t)(v >> 32), (uint32_t)pos, (int32_t)(uint32_t)v};
    return heap_push(e, c);
}

/* --- one word --- */

static enum ft_status push_sym(struct enc *e, size_t *n, int32_t id) {
    if (*n == e->cap_syms) {
        size_t cap = e->cap_syms ? e->cap_syms * 2 : 256;
        struct sym *p = realloc(e->syms, cap * sizeof *p);
        if (!p) return ft_fail(FT_ERR_OOM, "tokenizer: out of memory (BPE symbols)");
        e->syms = p;
        e->cap_syms = cap;
    }
    e->syms[*n].id = id;
    e->syms[*n].alive = 1;
    (*n)++;
    return FT_OK;
}

/* Initial symbols: bytes (byte-level) or characters with byte fallback / unk. */
static enum ft_status init_syms(struct enc *e, const char *w, size_t len, size_t *n_syms) {
    const struct ft_tok *t = e->t;
    enum ft_status st = FT_OK;
    size_t n = 0;
    if (t->byte_level) {
        for (size_t i = 0; i < len; i++) {
            int32_t id = t->byte_id[(unsigned char)w[i]];
            if (id >= 0) FT_TRY(push_sym(e, &n, id));
            else if (t->unk_id >= 0) FT_TRY(push_sym(e, &n, t->unk_id));
        }
    } else {
        int pending_unk = 0;
        for (size_t i = 0; i < len;) {
            size_t cl = 1;
            while (i + cl < len && ((unsigned char)w[i + cl] & 0xc0) == 0x80) cl++;
            int32_t id = ft_tok_lookup(t, w + i, cl);
            if (id >= 0) {
                if (pending_unk) FT_TRY(push_sym(e, &n, t->unk_id));
                pending_unk = 0;
                FT_TRY(push_sym(e, &n, id));
            } else {
                int fb = t->byte_fallback;
                for (size_t k = 0; fb && k < cl; k++) fb = t->fallback_id[(unsigned char)w[i + k]] >= 0;
                if (fb) {
                    for (size_t k = 0; k < cl; k++)
                        FT_TRY(push_sym(e, &n, t->fallback_id[(unsigned char)w[i + k]]));
                } else if (t->unk_id >= 0) {
                    if (pending_unk && !t->fuse_unk) FT_TRY(push_sym(e, &n, t->unk_id));
                    pending_unk = 1;
                }
            }
            i += cl;
        }
        if (pending_unk) FT_TRY(push_sym(e, &n, t->unk_id));
    }
    for (size_t i = 0; i < n; i++) {
        e->syms[i].prev = (int32_t)i - 1;
        e->syms[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    *n_syms = n;
fail:
    return st;
}

static enum ft_status merge_all(struct enc *e, size_t n) {
    enum ft_status st = FT_OK;
    struct sym *s = e->syms;
    e->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++) FT_TRY(add_cand(e, (int32_t)i));
    while (e->n_heap) {
        struct cand c = heap_pop(e);
        struct sym *a = &s[c.pos];
        if (!a->alive || a->next < 0) continue;
        int32_t nx = a->next;
        uint64_t v;
        if (!ft_u64map_get(&e->t->merges, (uint64_t)a->id << 32 | (uint32_t)s[nx].id, &v) ||
            (int32_t)(uint32_t)v != c.new_id)
            continue; /* stale candidate */
        a->id = c.new_id;
        s[nx].alive = 0;
        a->next = s[nx].next;
        if (a->next >= 0) s[a->next].prev = (int32_t)c.pos;
        if (a->prev >= 0) FT_TRY(add_cand(e, a->prev));
        if (a->next >= 0) FT_TRY(add_cand(e, (int32_t)c.pos));
    }
fail:
    return st;
}

/* The word as the vocabulary spells it (GPT-2 chars for byte-level), for ignore_merges. */
static int32_t whole_word_id(struct enc *e, const char *w, size_t len) {
    if (!e->t->byte_level) return ft_tok_lookup(e->t, w, len);
    e->scratch.n = 0;
    for (size_t i = 0; i < len; i++) {
        char c[4];
        int k = ft_utf8_enc(ft_bytelevel_cp((unsigned char)w[i]), c);
        if (ft_buf_put(&e->scratch, c, (size_t)k)) return -1;
    }
    return ft_tok_lookup(e->t, e->scratch.p, e->scratch.n);
}

static enum ft_status bpe_word(struct enc *e, const char *w, size_t len) {
    const struct ft_tok *t = e->t;
    enum ft_status st = FT_OK;
    if (len == 1 && t->byte_level && t->byte_id[(unsigned char)w[0]] >= 0)
        return emit(e, t->byte_id[(unsigned char)w[0]]);
    if (t->ignore_merges) {
        int32_t id = whole_word_id(e, w, len);
        if (id >= 0) return emit(e, id);
    }
    struct cache_ent *ce = NULL;
    uint64_t h = 0;
    if (e->cache && len <= 256) {
        h = ft_hash_bytes(w, len);
        ce = &e->cache[h & e->cache_mask];
        if (ce->hash == h && ce->key_len == len && !memcmp(e->ckeys.p + ce->key_off, w, len)) {
            for (uint32_t i = 0; i < ce->n_ids; i++) FT_TRY(emit(e, e->cids[ce->ids_off + i]));
            return FT_OK;
        }
    }
    size_t n;
    FT_TRY(init_syms(e, w, len, &n));
    FT_TRY(merge_all(e, n));
    size_t first = e->n_ids;
    for (int32_t i = n ? 0 : -1; i >= 0; i = e->syms[i].next) FT_TRY(emit(e, e->syms[i].id));
    if (ce) {
        size_t k = e->n_ids - first;
        if (e->n_cids + k > e->cap_cids) {
            size_t cap = e->cap_cids ? e->cap_cids : 1024;
            while (cap < e->n_cids + k) cap *= 2;
            int32_t *p = realloc(e->cids, cap * sizeof *p);
            if (!p) return ft_fail(FT_ERR_OOM, "tokenizer: out of memory (word cache)");
            e->cids = p;
            e->cap_cids = cap;
        }
        memcpy(e->cids + e->n_cids, e->ids + first, k * sizeof(int32_t));
        ce->hash = h;
        ce->key_off = (uint32_t)e->ckeys.n;
        ce->key_len = (uint32_t)len;
        ce->ids_off = (uint32_t)e->n_cids;
        ce->n_ids = (uint32_t)k;
        e->n_cids += k;
        FT_TRY(ft_buf_put(&e->ckeys, w, len));
    }
fail:
    return st;
}

/* Normalizes, pre-tokenizes and BPE-encodes one stretch of text between added tokens. */
static enum ft_status encode_segment(struct enc *e, const char *s, size_t n) {
    enum ft_status st = FT_OK;
    if (n == 0) return FT_OK;
    e->norm.n = 0;
    FT_TRY(ft_tok_normalize(e->t, s, n, &e->norm));
    if (e->t->word_split_len) { /* split before each metaspace run (see struct ft_tok) */
        const char *x = e->t->word_split, *b = e->norm.p;
        size_t lx = (size_t)e->t->word_split_len, start = 0;
        e->words.n = 0;
        for (size_t i = 1; i + lx <= e->norm.n; i++) {
            if (b[i] == x[0] && !memcmp(b + i, x, lx) && (i < lx || memcmp(b + i - lx, x, lx))) {
                FT_TRY(ft_spans_add(&e->words, (uint32_t)start, (uint32_t)(i - start)));
                start = i;
            }
        }
        if (start < e->norm.n)
            FT_TRY(ft_spans_add(&e->words, (uint32_t)start, (uint32_t)(e->norm.n - start)));
    } else {
        FT_TRY(ft_tok_pretokenize(e->t, &e->norm, &e->words, &e->tmp, &e->tmpbuf, e->md));
    }
    for (size_t w = 0; w < e->words.n; w++)
        FT_TRY(bpe_word(e, e->norm.p + e->words.p[w].off, e->words.p[w].len));
fail:
    return st;
}

static int is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static int is_word(unsigned char c) {
    return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
}

/* Longest added token starting at text[i]: its index in t->added and end, or -1. */
static int match_added(const struct ft_tok *t, const char *text, size_t len, size_t i, size_t *end) {
    uint64_t node = 0;
    int best = -1;
    for (size_t k = i; k < len; k++) {
        if (!ft_u64map_get(&t->trie, node << 8 | (unsigned char)text[k], &node)) break;
        if (t->trie_tok[node] >= 0) {
            best = t->trie_tok[node];
            *end = k + 1;
        }
    }
    return best;
}

/* Added tokens (longest match) and the segments between them. */
static enum ft_status encode_text(struct enc *e, const char *text, size_t len) {
    const struct ft_tok *t = e->t;
    enum ft_status st = FT_OK;
    size_t seg = 0, i = 0;
    while (i < len) {
        size_t end = 0;
        int k = t->first_byte[(unsigned char)text[i]] ? match_added(t, text, len, i, &end) : -1;
        if (k < 0) {
            i++;
            continue;
        }
        const struct ft_added *a = &t->added[k];
        if (a->single_word && ((i > 0 && is_word((unsigned char)text[i - 1])) ||
                               (end < len && is_word((unsigned char)text[end])))) {
            i++;
            continue;
        }
        size_t s = i;
        if (a->lstrip)
            while (s > seg && is_space((unsigned char)text[s - 1])) s--;
        if (a->rstrip)
            while (end < len && is_space((unsigned char)text[end])) end++;
        FT_TRY(encode_segment(e, text + seg, s - seg));
        FT_TRY(emit(e, a->id));
        seg = i = end;
    }
    FT_TRY(encode_segment(e, text + seg, len - seg));
fail:
    return st;
}

static void enc_free(struct enc *e) {
    free(e->norm.p);
    free(e->tmpbuf.p);
    free(e->scratch.p);
    free(e->ckeys.p);
    free(e->words.p);
    free(e->tmp.p);
    if (e->md) pcre2_match_data_free(e->md);
    free(e->syms);
    free(e->heap);
    free(e->cache);
    free(e->cids);
    free(e->ids);
}

enum ft_status ft_tok_encode(const struct ft_tok *t, const char *text, size_t len, int add_special,
                             int32_t **ids, int *n_ids) {
    enum ft_status st = FT_OK;
    struct enc e = {.t = t};
    *ids = NULL;
    *n_ids = 0;
    if (!text && len) return ft_fail(FT_ERR_INVALID_ARG, "prompt: NULL text");
    size_t valid = len ? ft_utf8_valid(text, len) : 0;
    if (valid != len) return ft_fail(FT_ERR_INVALID_ARG, "prompt: invalid UTF-8 at byte %zu", valid);
    if (len > 0x7fffffffu) return ft_fail(FT_ERR_INVALID_ARG, "prompt: longer than 2 GiB");
    if (!(e.md = pcre2_match_data_create(4, NULL))) {
        st = ft_fail(FT_ERR_OOM, "tokenizer: out of memory (match data)");
        goto fail;
    }
    if (len >= 4096) { /* worth a word cache: direct-mapped, sized to the input */
        uint32_t cap = 1024;
        while (cap < len / 8 && cap < (1u << 16)) cap <<= 1;
        if (!(e.cache = calloc(cap, sizeof *e.cache))) {
            st = ft_fail(FT_ERR_OOM, "tokenizer: out of memory (word cache)");
            goto fail;
        }
        e.cache_mask = cap - 1;
        for (uint32_t i = 0; i < cap; i++) e.cache[i].key_len = UINT32_MAX;
    }
    if (add_special)
        for (int i = 0; i < t->n_prefix; i++) FT_TRY(emit(&e, t->prefix[i]));
    if (t->tiktoken_chunks) { /* tokenization_kimi.py encodes each piece on its own */
        for (size_t at = 0, end; at < len; at = end) {
            end = at + ft_tiktoken_cut(text + at, len - at, 0);
            for (size_t p = at, q; p < end; p = q) {
                q = p + ft_tiktoken_cut(text + p, end - p, 1);
                FT_TRY(encode_text(&e, text + p, q - p));
            }
        }
    } else {
        FT_TRY(encode_text(&e, text, len));
    }
    if (add_special)
        for (int i = 0; i < t->n_suffix; i++) FT_TRY(emit(&e, t->suffix[i]));
    if (e.n_ids > 0x7fffffff) {
        st = ft_fail(FT_ERR_INVALID_ARG, "prompt: too many tokens");
        goto fail;
    }
    *ids = e.ids;
    *n_ids = (int)e.n_ids;
    e.ids = NULL;
fail:
    enc_free(&e);
    return st;
}
