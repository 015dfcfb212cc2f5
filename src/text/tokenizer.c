/* tokenizer.c — loads a Hugging Face tokenizer.json (+ tokenizer_config.json) into struct ft_tok:
 * vocabulary, merges, added tokens, post-processor and config; the building steps it shares with
 * the GGUF loader (tok_gguf.c); and the small accessors.
 * Called by the engine, server and `ft tokenize`. Threading: ft_tok_load builds the tokenizer
 * on the calling thread; afterwards it is read-only and shared freely. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "format/gguf.h"
#include "text/tok_impl.h"

int32_t ft_tok_lookup(const struct ft_tok *t, const char *s, size_t n) {
    uint32_t i = (uint32_t)ft_hash_bytes(s, n) & t->str_mask;
    for (;;) {
        int32_t id = t->str_slots[i];
        if (id < 0) return -1;
        if (t->piece_len[id] == n && !memcmp(t->piece_arena + t->piece_off[id], s, n)) return id;
        i = (i + 1) & t->str_mask;
    }
}

/* ---------------- shared by both loaders (tok_impl.h) ---------------- */

enum ft_status ft_tok_new(const char *path, struct ft_tok **out) {
    struct ft_tok *t = calloc(1, sizeof *t);
    *out = NULL;
    if (!t || !(t->path = strdup(path))) {
        free(t);
        return ft_fail(FT_ERR_OOM, "%s: out of memory", path);
    }
    t->bos_id = t->eos_id = t->unk_id = -1;
    *out = t;
    return FT_OK;
}

enum ft_status ft_tok_set_vocab(struct ft_tok *t, const struct ft_tok_str *p, size_t n) {
    int max_id = -1;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        FT_ASSERT(p[i].id >= 0 && p[i].id <= (1 << 24));
        max_id = FT_MAX(max_id, (int)p[i].id);
        total += (size_t)p[i].len + 1;
    }
    if (max_id < 0) return ft_fail(FT_ERR_FORMAT, "%s: empty vocabulary", t->path);
    t->n_vocab = max_id + 1;
    t->piece_arena = malloc(total + 1);
    t->piece_off = calloc(t->n_vocab, sizeof *t->piece_off);
    t->piece_len = malloc(t->n_vocab * sizeof *t->piece_len);
    t->is_special = calloc(t->n_vocab, 1);
    uint32_t cap = 16;
    while (cap < (uint32_t)t->n_vocab * 2) cap <<= 1;
    t->str_slots = malloc(cap * sizeof *t->str_slots);
    t->str_mask = cap - 1;
    if (!t->piece_arena || !t->piece_off || !t->piece_len || !t->is_special || !t->str_slots)
        return ft_fail(FT_ERR_OOM, "%s: out of memory for %d vocabulary entries", t->path,
                       t->n_vocab);
    memset(t->piece_len, 0xff, t->n_vocab * sizeof *t->piece_len);
    memset(t->str_slots, 0xff, cap * sizeof *t->str_slots);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) { /* a later string of the same id replaces an earlier one */
        memcpy(t->piece_arena + off, p[i].s, p[i].len);
        t->piece_arena[off + p[i].len] = 0;
        t->piece_off[p[i].id] = (uint32_t)off;
        t->piece_len[p[i].id] = p[i].len;
        off += (size_t)p[i].len + 1;
    }
    for (int id = 0; id < t->n_vocab; id++) { /* the first id of a repeated string wins */
        if (t->piece_len[id] == UINT32_MAX) continue;
        uint32_t len = t->piece_len[id];
        if (ft_tok_lookup(t, t->piece_arena + t->piece_off[id], len) >= 0) continue;
        uint32_t h = (uint32_t)ft_hash_bytes(t->piece_arena + t->piece_off[id], len) & t->str_mask;
        while (t->str_slots[h] >= 0) h = (h + 1) & t->str_mask;
        t->str_slots[h] = id;
    }
    return FT_OK;
}

enum ft_status ft_tok_add_merge(struct ft_tok *t, const char *key, size_t i, const char *a,
                                size_t la, const char *b, size_t lb, const char *vocab_key) {
    char tmp[1024];
    if (la + lb > sizeof tmp)
        return ft_fail(FT_ERR_FORMAT, "%s: %s[%zu]: merge longer than %zu bytes", t->path, key, i,
                       sizeof tmp);
    int32_t ia = ft_tok_lookup(t, a, la), ib = ft_tok_lookup(t, b, lb);
    memcpy(tmp, a, la);
    memcpy(tmp + la, b, lb);
    int32_t in = ft_tok_lookup(t, tmp, la + lb);
    if (ia < 0 || ib < 0 || in < 0)
        return ft_fail(FT_ERR_FORMAT, "%s: %s[%zu] \"%.*s %.*s\": %s is not in %s", t->path, key,
                       i, (int)la, a, (int)lb, b,
                       ia < 0 ? "the left part" : ib < 0 ? "the right part" : "the merged token",
                       vocab_key);
    ft_u64map_put(&t->merges, (uint64_t)ia << 32 | (uint32_t)ib, (uint64_t)i << 32 | (uint32_t)in);
    return FT_OK;
}

enum ft_status ft_tok_build_added(struct ft_tok *t) {
    enum ft_status st;
    size_t bytes = 0;
    for (int k = 0; k < t->n_added; k++) bytes += t->piece_len[t->added[k].id];
    t->trie_tok = malloc((bytes + 1) * sizeof *t->trie_tok);
    if (!t->trie_tok) return ft_fail(FT_ERR_OOM, "%s: out of memory", t->path);
    if ((st = ft_u64map_init(&t->trie, bytes + 1))) return st;
    t->trie_tok[0] = -1;
    t->n_nodes = 1;
    for (int k = 0; k < t->n_added; k++) {
        const struct ft_added *a = &t->added[k];
        const unsigned char *c = (const unsigned char *)t->piece_arena + t->piece_off[a->id];
        uint32_t len = t->piece_len[a->id];
        if (a->special) t->is_special[a->id] = 1;
        if (!len) continue; /* an empty token never matches */
        uint64_t node = 0, child;
        t->first_byte[c[0]] = 1;
        for (uint32_t i = 0; i < len; i++) {
            if (!ft_u64map_get(&t->trie, node << 8 | c[i], &child)) {
                child = (uint64_t)t->n_nodes;
                t->trie_tok[t->n_nodes++] = -1;
                ft_u64map_put(&t->trie, node << 8 | c[i], child);
            }
            node = child;
        }
        t->trie_tok[node] = k;
    }
    return FT_OK;
}

enum ft_status ft_tok_push_id(const struct ft_tok *t, int32_t **arr, int *n, int32_t id) {
    int32_t *p = realloc(*arr, (*n + 1) * sizeof *p);
    if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory", t->path);
    p[(*n)++] = id;
    *arr = p;
    return FT_OK;
}

/* See struct ft_tok.word_split: set when no piece has the metaspace after another character
 * (runs of metaspaces excepted). */
static void detect_word_split(struct ft_tok *t) {
    const char *x = NULL;
    for (int i = 0; i < t->n_norms; i++)
        if (t->norms[i].kind == NORM_REPLACE && !strcmp(t->norms[i].a, " ")) x = t->norms[i].b;
    if (t->byte_level || t->n_pres || !x || !*x || strlen(x) >= sizeof t->word_split) return;
    size_t lx = strlen(x);
    for (int id = 0; id < t->n_vocab; id++) {
        const char *s = t->piece_arena + t->piece_off[id];
        size_t n = t->piece_len[id], p = 0;
        if (n == UINT32_MAX) continue;
        while (p + lx <= n) {
            if (s[p] != x[0] || memcmp(s + p, x, lx)) {
                p++;
                continue;
            }
            if (p > 0 && (p < lx || memcmp(s + p - lx, x, lx))) return; /* "a▁" inside a piece */
            p += lx;
        }
    }
    memcpy(t->word_split, x, lx + 1);
    t->word_split_len = (int)lx;
}

enum ft_status ft_tok_finish(struct ft_tok *t) {
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        t->fallback_id[b] = ft_tok_lookup(t, s, strlen(s));
        int n = ft_utf8_enc(ft_bytelevel_cp((uint8_t)b), s);
        t->byte_id[b] = ft_tok_lookup(t, s, (size_t)n);
    }
    detect_word_split(t);
    return ft_tok_build_decoded(t);
}

/* ---------------- vocabulary ---------------- */

static enum ft_status load_vocab(struct ft_tok *t, const json_t *vocab, const json_t *added) {
    size_t n = json_object_size(vocab) + json_array_size(added), k = 0, i;
    struct ft_tok_str *p = malloc((n ? n : 1) * sizeof *p);
    const char *key;
    const json_t *v, *e;
    if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory for %zu vocabulary entries", t->path, n);
    enum ft_status st = FT_OK;
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 24)) {
            st = ft_fail(FT_ERR_FORMAT, "%s: model.vocab[\"%s\"]: id must be an integer in "
                         "[0, 2^24]", t->path, key);
            goto fail;
        }
        p[k++] = (struct ft_tok_str){(int32_t)json_integer_value(v), (uint32_t)strlen(key), key};
    }
    json_array_foreach(added, i, e) {
        const json_t *id = json_object_get(e, "id");
        const char *c = ft_jstr(e, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) > (1 << 24) || !c) {
            st = ft_fail(FT_ERR_FORMAT, "%s: added_tokens[%zu]: needs \"id\" (integer) and "
                         "\"content\" (string)", t->path, i);
            goto fail;
        }
        p[k++] = (struct ft_tok_str){(int32_t)json_integer_value(id), (uint32_t)strlen(c), c};
    }
    if (k == 0) {
        st = ft_fail(FT_ERR_FORMAT, "%s: model.vocab: empty vocabulary", t->path);
        goto fail;
    }
    st = ft_tok_set_vocab(t, p, k);
fail:
    free(p);
    return st;
}

/* ---------------- merges ---------------- */

static enum ft_status load_merges(struct ft_tok *t, const json_t *merges) {
    enum ft_status st;
    if (!json_is_array(merges))
        return ft_fail(FT_ERR_FORMAT, "%s: model.merges: missing (a BPE tokenizer.json needs its "
                       "merges list; use the file exported with the model)", t->path);
    size_t n = json_array_size(merges), i;
    if ((st = ft_u64map_init(&t->merges, n))) return st;
    const json_t *m;
    json_array_foreach(merges, i, m) {
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) {
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return ft_fail(FT_ERR_FORMAT, "%s: model.merges[%zu] \"%s\": expected \"left right\"",
                               t->path, i, s);
            a = s, la = (size_t)(sp - s), b = sp + 1, lb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            la = strlen(a), lb = strlen(b);
        } else {
            return ft_fail(FT_ERR_FORMAT, "%s: model.merges[%zu]: expected \"left right\" or "
                           "[\"left\", \"right\"]", t->path, i);
        }
        if ((st = ft_tok_add_merge(t, "model.merges", i, a, la, b, lb, "model.vocab"))) return st;
    }
    return FT_OK;
}

/* ---------------- added tokens ---------------- */

static enum ft_status load_added(struct ft_tok *t, const json_t *added) {
    size_t n = json_array_size(added), i;
    const json_t *e;
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return ft_fail(FT_ERR_OOM, "%s: out of memory", t->path);
    json_array_foreach(added, i, e) {
        struct ft_added *a = &t->added[t->n_added++];
        a->id = (int32_t)json_integer_value(json_object_get(e, "id"));
        a->special = json_is_true(json_object_get(e, "special"));
        a->lstrip = json_is_true(json_object_get(e, "lstrip"));
        a->rstrip = json_is_true(json_object_get(e, "rstrip"));
        a->single_word = json_is_true(json_object_get(e, "single_word"));
    }
    return ft_tok_build_added(t);
}

/* ---------------- post-processor ---------------- */

/* Returns 1 in *found when the post-processor decides the special tokens. */
static enum ft_status load_post(struct ft_tok *t, const json_t *pp, int *found) {
    enum ft_status st;
    const char *type = ft_jstr(pp, "type");
    if (!type) return FT_OK;
    if (!strcmp(type, "Sequence")) {
        size_t i;
        const json_t *e;
        json_array_foreach(json_object_get(pp, "processors"), i, e) {
            if ((st = load_post(t, e, found))) return st;
        }
        return FT_OK;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        const json_t *cls = json_object_get(pp, "cls"), *sep = json_object_get(pp, "sep");
        *found = 1;
        if ((st = ft_tok_push_id(t, &t->prefix, &t->n_prefix,
                          (int32_t)json_integer_value(json_array_get(cls, 1)))))
            return st;
        return ft_tok_push_id(t, &t->suffix, &t->n_suffix,
                       (int32_t)json_integer_value(json_array_get(sep, 1)));
    }
    if (strcmp(type, "TemplateProcessing")) return FT_OK;
    const json_t *single = json_object_get(pp, "single"), *specials = json_object_get(pp, "special_tokens");
    if (!json_is_array(single))
        return ft_fail(FT_ERR_FORMAT, "%s: post_processor TemplateProcessing: missing \"single\"",
                       t->path);
    *found = 1;
    int after = 0;
    size_t i;
    const json_t *e;
    json_array_foreach(single, i, e) {
        const json_t *sp = json_object_get(e, "SpecialToken");
        if (!sp) {
            after = 1;
            continue;
        }
        const char *name = ft_jstr(sp, "id");
        const json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (json_is_array(ids)) {
            size_t k;
            const json_t *x;
            json_array_foreach(ids, k, x) {
                if ((st = ft_tok_push_id(t, after ? &t->suffix : &t->prefix,
                                  after ? &t->n_suffix : &t->n_prefix,
                                  (int32_t)json_integer_value(x))))
                    return st;
            }
        } else {
            int32_t id = name ? ft_tok_lookup(t, name, strlen(name)) : -1;
            if (id < 0)
                return ft_fail(FT_ERR_FORMAT, "%s: post_processor: special token \"%s\" is not in "
                               "the vocabulary", t->path, name ? name : "(none)");
            if ((st = ft_tok_push_id(t, after ? &t->suffix : &t->prefix,
                                     after ? &t->n_suffix : &t->n_prefix, id)))
                return st;
        }
    }
    return FT_OK;
}

/* ---------------- tokenizer_config.json ---------------- */

static int32_t config_token(const struct ft_tok *t, const json_t *v) {
    const char *s = json_is_string(v) ? json_string_value(v) : ft_jstr(v, "content");
    return s ? ft_tok_lookup(t, s, strlen(s)) : -1;
}

enum ft_status ft_tok_load_config(struct ft_tok *t, const char *path, int have_template) {
    enum ft_status st = FT_OK;
    json_error_t jerr;
    json_t *c = json_load_file(path, JSON_DECODE_INT_AS_REAL, &jerr);
    if (!c)
        return ft_fail(FT_ERR_FORMAT, "%s: line %d: %s (fix or remove tokenizer_config.json)",
                       path, jerr.line, jerr.text);
    if (!json_is_object(c)) {
        json_decref(c);
        return ft_fail(FT_ERR_FORMAT, "%s: expected a JSON object", path);
    }
    int32_t bos = config_token(t, json_object_get(c, "bos_token"));
    int32_t eos = config_token(t, json_object_get(c, "eos_token"));
    if (bos >= 0) t->bos_id = bos;
    if (eos >= 0) t->eos_id = eos;
    const json_t *ct = json_object_get(c, "chat_template");
    if (json_is_array(ct)) {
        size_t i;
        const json_t *e, *pick = NULL;
        json_array_foreach(ct, i, e) {
            if (!pick || (ft_jstr(e, "name") && !strcmp(ft_jstr(e, "name"), "default"))) pick = e;
        }
        ct = json_object_get(pick, "template");
    }
    if (json_is_string(ct) && !(t->chat_template = strdup(json_string_value(ct)))) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }
    if (!have_template) {
        if (json_is_true(json_object_get(c, "add_bos_token")) && t->bos_id >= 0)
            FT_TRY(ft_tok_push_id(t, &t->prefix, &t->n_prefix, t->bos_id));
        if (json_is_true(json_object_get(c, "add_eos_token")) && t->eos_id >= 0)
            FT_TRY(ft_tok_push_id(t, &t->suffix, &t->n_suffix, t->eos_id));
    }
fail:
    json_decref(c);
    return st;
}

/* ---------------- load ---------------- */

static enum ft_status load_model(struct ft_tok *t, const json_t *root) {
    enum ft_status st;
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return ft_fail(FT_ERR_FORMAT, "%s: missing \"model\" object (not a tokenizer.json?)", t->path);
    const char *type = ft_jstr(model, "type");
    if (type && strcmp(type, "BPE"))
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: model.type \"%s\" is not supported (supported: BPE)",
                       t->path, type);
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        return ft_fail(FT_ERR_FORMAT, "%s: model.vocab: missing or not an object", t->path);
    const json_t *added = json_object_get(root, "added_tokens");
    json_t *empty = json_array();
    if (!json_is_array(added)) added = empty;
    st = load_vocab(t, vocab, added);
    if (!st) st = load_merges(t, json_object_get(model, "merges"));
    if (!st) st = load_added(t, added);
    json_decref(empty);
    if (st) return st;
    for (const char *k = "continuing_subword_prefix"; k;
         k = strcmp(k, "end_of_word_suffix") ? "end_of_word_suffix" : NULL) {
        const char *s = ft_jstr(model, k);
        if (s && *s)
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: model.%s \"%s\" is not supported", t->path, k, s);
    }
    t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    t->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    const char *unk = ft_jstr(model, "unk_token");
    t->unk_id = unk ? ft_tok_lookup(t, unk, strlen(unk)) : -1;
    return FT_OK;
}

enum ft_status ft_tok_load_files(const char *json_path, const char *config_path,
                                 struct ft_tok **out) {
    enum ft_status st = FT_OK;
    json_t *root = NULL;
    char *text = NULL;
    size_t size;
    struct ft_tok *t;
    *out = NULL;
    if ((st = ft_tok_new(json_path, &t))) return st;
    FT_TRY(ft_file_read(json_path, &text, &size));
    json_error_t jerr;
    root = json_loadb(text, size, 0, &jerr);
    if (!root) {
        st = ft_fail(FT_ERR_FORMAT, "%s: line %d: %s (not valid JSON)", json_path, jerr.line, jerr.text);
        goto fail;
    }
    free(text);
    text = NULL;
    FT_TRY(load_model(t, root));
    FT_TRY(ft_tok_parse_normalizer(t, json_object_get(root, "normalizer")));
    FT_TRY(ft_tok_parse_pretok(t, json_object_get(root, "pre_tokenizer")));
    FT_TRY(ft_tok_parse_decoder(t, json_object_get(root, "decoder")));
    FT_TRY(ft_tok_finish(t));
    int have_template = 0;
    const json_t *pp = json_object_get(root, "post_processor");
    if (json_is_object(pp)) FT_TRY(load_post(t, pp, &have_template));
    if (have_template && t->n_prefix == 1 && t->is_special[t->prefix[0]]) t->bos_id = t->prefix[0];
    if (config_path) FT_TRY(ft_tok_load_config(t, config_path, have_template));
    json_decref(root);
    *out = t;
    return FT_OK;
fail:
    free(text);
    json_decref(root);
    ft_tok_free(t);
    return st;
}

enum ft_status ft_tok_load(const char *dir, struct ft_tok **out) {
    char jp[4096], cp[4096];
    *out = NULL;
    int g = ft_gguf_model_path(dir, jp, sizeof jp); /* a GGUF model carries its tokenizer */
    if (g < 0) return FT_ERR_INVALID_ARG;
    if (g) {
        struct ft_gguf_file *f = NULL;
        enum ft_status st = ft_gguf_open(jp, &f);
        if (st == FT_OK) st = ft_tok_load_gguf(f, out);
        ft_gguf_close(f);
        return st;
    }
    ft_path_join(jp, sizeof jp, dir, "tokenizer.json");
    ft_path_join(cp, sizeof cp, dir, "tokenizer_config.json");
    *out = NULL;
    if (!ft_file_exists(jp)) {
        char tp[4096];
        ft_path_join(tp, sizeof tp, dir, "tiktoken.model"); /* Kimi-K2: tokenization_kimi.py */
        if (ft_file_exists(tp)) return ft_tok_load_tiktoken(dir, out);
        return ft_fail(FT_ERR_IO, "%s: no tokenizer.json (nor tiktoken.model) in this directory "
                       "(give --model the directory holding the model's tokenizer files)", dir);
    }
    return ft_tok_load_files(jp, ft_file_exists(cp) ? cp : NULL, out);
}

void ft_tok_free(struct ft_tok *t) {
    if (!t) return;
    free(t->path);
    free(t->piece_arena);
    free(t->piece_off);
    free(t->piece_len);
    free(t->str_slots);
    free(t->is_special);
    free(t->dec_arena);
    free(t->dec_off);
    free(t->dec_len);
    for (int i = 0; i < t->n_norms; i++) {
        free(t->norms[i].a);
        free(t->norms[i].b);
    }
    free(t->norms);
    for (int i = 0; i < t->n_pres; i++) pcre2_code_free(t->pres[i].re);
    free(t->pres);
    for (int i = 0; i < t->n_dec_repl; i++) {
        free(t->dec_repl[i].a);
        free(t->dec_repl[i].b);
    }
    free(t->dec_repl);
    ft_u64map_free(&t->merges);
    ft_u64map_free(&t->trie);
    free(t->added);
    free(t->trie_tok);
    free(t->prefix);
    free(t->suffix);
    free(t->chat_template);
    free(t);
}

/* ---------------- accessors ---------------- */

int ft_tok_n_vocab(const struct ft_tok *t) { return t->n_vocab; }

const char *ft_tok_piece(const struct ft_tok *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || t->piece_len[id] == UINT32_MAX) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->piece_len[id];
    return t->piece_arena + t->piece_off[id];
}

int32_t ft_tok_find(const struct ft_tok *t, const char *piece) {
    return ft_tok_lookup(t, piece, strlen(piece));
}

int32_t ft_tok_bos(const struct ft_tok *t) { return t->bos_id; }
int32_t ft_tok_eos(const struct ft_tok *t) { return t->eos_id; }
int ft_tok_is_special(const struct ft_tok *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->is_special[id];
}
int ft_tok_add_bos(const struct ft_tok *t) {
    return t->n_prefix > 0 && t->bos_id >= 0 && t->prefix[0] == t->bos_id;
}
const char *ft_tok_chat_template(const struct ft_tok *t) { return t->chat_template; }
size_t ft_tok_max_token_bytes(const struct ft_tok *t) { return t->max_dec; }
