/* pretok.c — the normalizer (NFC/NFD/NFKC/NFKD via utf8proc, Prepend, Replace, Lowercase,
 * Sequence) and pre-tokenizers (Split with a PCRE2 regex and its delimiter behaviors, ByteLevel)
 * of a tokenizer.json: parsed at load, run per text segment by the encoder (bpe.c).
 * Threading: parsing runs once in ft_tok_load; the run functions only read struct ft_tok and use
 * caller-owned scratch (buffers, pcre2 match data), so any number of threads may encode at once. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/tok_impl.h"

#define GPT2_REGEX                                                                              \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* ---------------- normalizer ---------------- */

enum ft_status ft_norms_add(const struct ft_tok *t, struct ft_norm **steps, int *n,
                            enum ft_norm_kind kind, const char *a, const char *b) {
    struct ft_norm *p = realloc(*steps, (size_t)(*n + 1) * sizeof *p);
    if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory", t->path);
    *steps = p;
    p[*n].kind = kind;
    p[*n].a = a ? strdup(a) : NULL;
    p[*n].b = b ? strdup(b) : NULL;
    if ((a && !p[*n].a) || (b && !p[*n].b)) {
        free(p[*n].a);
        free(p[*n].b);
        return ft_fail(FT_ERR_OOM, "%s: out of memory", t->path);
    }
    (*n)++;
    return FT_OK;
}

static enum ft_status add_norm(struct ft_tok *t, enum ft_norm_kind kind, const char *a,
                               const char *b) {
    return ft_norms_add(t, &t->norms, &t->n_norms, kind, a, b);
}

enum ft_status ft_tok_parse_normalizer(struct ft_tok *t, const void *jv) {
    const json_t *j = jv;
    if (!j || json_is_null(j)) return FT_OK;
    const char *type = ft_jstr(j, "type");
    if (!type) return ft_fail(FT_ERR_FORMAT, "%s: normalizer: missing \"type\"", t->path);
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(j, "normalizers");
        if (!json_is_array(arr))
            return ft_fail(FT_ERR_FORMAT, "%s: normalizer Sequence: missing \"normalizers\" array",
                           t->path);
        size_t i;
        const json_t *e;
        json_array_foreach(arr, i, e) {
            enum ft_status st = ft_tok_parse_normalizer(t, e);
            if (st) return st;
        }
        return FT_OK;
    }
    if (!strcmp(type, "NFC")) return add_norm(t, NORM_NFC, NULL, NULL);
    if (!strcmp(type, "NFD")) return add_norm(t, NORM_NFD, NULL, NULL);
    if (!strcmp(type, "NFKC")) return add_norm(t, NORM_NFKC, NULL, NULL);
    if (!strcmp(type, "NFKD")) return add_norm(t, NORM_NFKD, NULL, NULL);
    if (!strcmp(type, "Lowercase")) return add_norm(t, NORM_LOWERCASE, NULL, NULL);
    if (!strcmp(type, "Prepend")) {
        const char *p = ft_jstr(j, "prepend");
        if (!p) return ft_fail(FT_ERR_FORMAT, "%s: normalizer Prepend: missing \"prepend\"", t->path);
        return add_norm(t, NORM_PREPEND, p, NULL);
    }
    if (!strcmp(type, "Replace")) {
        const char *a = ft_jstr(json_object_get(j, "pattern"), "String");
        const char *b = ft_jstr(j, "content");
        if (!a || !b)
            return ft_fail(FT_ERR_UNSUPPORTED,
                           "%s: normalizer Replace: only {\"pattern\": {\"String\": ...}, "
                           "\"content\": ...} is supported",
                           t->path);
        if (!*a) return ft_fail(FT_ERR_FORMAT, "%s: normalizer Replace: empty pattern", t->path);
        return add_norm(t, NORM_REPLACE, a, b);
    }
    return ft_fail(FT_ERR_UNSUPPORTED,
                   "%s: normalizer type \"%s\" is not supported (supported: NFC, NFD, NFKC, NFKD, "
                   "Lowercase, Prepend, Replace, Sequence)",
                   t->path, type);
}

static int all_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

static enum ft_status apply_norm(const struct ft_norm *nm, const char *s, size_t n,
                                 struct ft_buf *out) {
    enum ft_status st = FT_OK;
    switch (nm->kind) {
    case NORM_NFC: case NORM_NFD: case NORM_NFKC: case NORM_NFKD: {
        if (all_ascii(s, n) || n == 0) return ft_buf_put(out, s, n);
        int opt = UTF8PROC_STABLE;
        if (nm->kind == NORM_NFC) opt |= UTF8PROC_COMPOSE;
        if (nm->kind == NORM_NFD) opt |= UTF8PROC_DECOMPOSE;
        if (nm->kind == NORM_NFKC) opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        if (nm->kind == NORM_NFKD) opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        utf8proc_uint8_t *r = NULL;
        utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &r, opt);
        if (m < 0)
            return ft_fail(FT_ERR_INVALID_ARG, "prompt: normalization failed: %s",
                           utf8proc_errmsg(m));
        st = ft_buf_put(out, r, (size_t)m);
        free(r);
        return st;
    }
    case NORM_LOWERCASE:
        for (size_t i = 0; i < n && !st;) {
            uint32_t cp;
            char enc[4];
            i += ft_utf8_dec((const unsigned char *)s + i, &cp);
            st = ft_buf_put(out, enc, ft_utf8_enc((uint32_t)utf8proc_tolower((int32_t)cp), enc));
        }
        return st;
    case NORM_PREPEND:
        if (n) st = ft_buf_put(out, nm->a, strlen(nm->a));
        return st ? st : ft_buf_put(out, s, n);
    case NORM_REPLACE: {
        size_t la = strlen(nm->a), lb = strlen(nm->b), i = 0, last = 0;
        while (i + la <= n && !st) {
            if (s[i] == nm->a[0] && !memcmp(s + i, nm->a, la)) {
                st = ft_buf_put(out, s + last, i - last);
                if (!st) st = ft_buf_put(out, nm->b, lb);
                i += la;
                last = i;
            } else {
                i++;
            }
        }
        return st ? st : ft_buf_put(out, s + last, n - last);
    }
    }
    return FT_OK;
}

enum ft_status ft_norms_apply(const struct ft_norm *steps, int n_steps, const char *seg, size_t n,
                              struct ft_buf *out) {
    if (n_steps == 0) return ft_buf_put(out, seg, n);
    struct ft_buf a = {0}, b = {0};
    enum ft_status st = FT_OK;
    const char *cur = seg;
    size_t cur_n = n;
    for (int i = 0; i < n_steps; i++) {
        struct ft_buf *dst = (i == n_steps - 1) ? out : (i % 2 ? &b : &a);
        if (dst != out) dst->n = 0;
        FT_TRY(apply_norm(&steps[i], cur, cur_n, dst));
        if (dst != out) {
            cur = dst->p;
            cur_n = dst->n;
        }
    }
fail:
    free(a.p);
    free(b.p);
    return st;
}

enum ft_status ft_tok_normalize(const struct ft_tok *t, const char *seg, size_t n,
                                struct ft_buf *out) {
    return ft_norms_apply(t->norms, t->n_norms, seg, n, out);
}

/* ---------------- pre-tokenizers ---------------- */

static enum ft_status compile_re(struct ft_tok *t, const char *pat, size_t len, int literal,
                                 pcre2_code **out) {
    int err;
    PCRE2_SIZE eoff;
    uint32_t opt = literal ? (PCRE2_LITERAL | PCRE2_UTF) : (PCRE2_UTF | PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, opt, &err, &eoff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return ft_fail(FT_ERR_FORMAT,
                       "%s: pre_tokenizer Split pattern \"%.200s\": PCRE2 error at offset %zu: %s "
                       "(fix the Regex in tokenizer.json)",
                       t->path, pat, (size_t)eoff, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT the interpreter still works */
    *out = re;
    return FT_OK;
}

static enum ft_status add_pre(struct ft_tok *t, struct ft_pre **p) {
    struct ft_pre *n = realloc(t->pres, (t->n_pres + 1) * sizeof *n);
    if (!n) return ft_fail(FT_ERR_OOM, "%s: out of memory", t->path);
    t->pres = n;
    *p = &n[t->n_pres++];
    memset(*p, 0, sizeof **p);
    return FT_OK;
}

enum ft_status ft_tok_add_split(struct ft_tok *t, const char *pat, size_t len, int literal,
                                enum ft_split_behavior behavior, int invert) {
    struct ft_pre *p;
    enum ft_status st = add_pre(t, &p);
    if (st) return st;
    p->kind = PRE_SPLIT;
    p->behavior = behavior;
    p->invert = invert;
    return compile_re(t, pat, len, literal, &p->re);
}

enum ft_status ft_tok_add_bytelevel(struct ft_tok *t, int add_prefix_space, int use_regex) {
    struct ft_pre *p;
    enum ft_status st = add_pre(t, &p);
    if (st) return st;
    p->kind = PRE_BYTELEVEL;
    p->behavior = SPLIT_ISOLATED; /* the regex splits, keeping every piece */
    p->add_prefix_space = add_prefix_space;
    t->byte_level = 1;
    return use_regex ? compile_re(t, GPT2_REGEX, strlen(GPT2_REGEX), 0, &p->re) : FT_OK;
}

enum ft_status ft_tok_parse_pretok(struct ft_tok *t, const void *jv) {
    const json_t *j = jv;
    enum ft_status st;
    if (!j || json_is_null(j)) return FT_OK;
    const char *type = ft_jstr(j, "type");
    if (!type) return ft_fail(FT_ERR_FORMAT, "%s: pre_tokenizer: missing \"type\"", t->path);
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(j, "pretokenizers");
        if (!json_is_array(arr))
            return ft_fail(FT_ERR_FORMAT,
                           "%s: pre_tokenizer Sequence: missing \"pretokenizers\" array", t->path);
        size_t i;
        const json_t *e;
        json_array_foreach(arr, i, e) {
            if ((st = ft_tok_parse_pretok(t, e))) return st;
        }
        return FT_OK;
    }
    if (!strcmp(type, "Split")) {
        const json_t *pat = json_object_get(j, "pattern");
        const json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        if (!json_is_string(re) && !json_is_string(lit))
            return ft_fail(FT_ERR_FORMAT,
                           "%s: pre_tokenizer Split: missing \"pattern\": {\"Regex\"|\"String\": ...}",
                           t->path);
        const char *beh = ft_jstr(j, "behavior");
        static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                      "MergedWithNext", "Contiguous"};
        int b = -1;
        for (int k = 0; k < 5 && beh; k++)
            if (!strcmp(beh, names[k])) b = k;
        if (b < 0)
            return ft_fail(FT_ERR_FORMAT,
                           "%s: pre_tokenizer Split: \"behavior\" must be one of Removed, Isolated, "
                           "MergedWithPrevious, MergedWithNext, Contiguous (got %s)",
                           t->path, beh ? beh : "nothing");
        const json_t *s = re ? re : lit;
        return ft_tok_add_split(t, json_string_value(s), json_string_length(s), re == NULL,
                                (enum ft_split_behavior)b,
                                json_is_true(json_object_get(j, "invert")));
    }
    if (!strcmp(type, "ByteLevel")) {
        const json_t *ur = json_object_get(j, "use_regex");
        return ft_tok_add_bytelevel(t, json_is_true(json_object_get(j, "add_prefix_space")),
                                    !ur || json_is_true(ur));
    }
    return ft_fail(FT_ERR_UNSUPPORTED,
                   "%s: pre_tokenizer type \"%s\" is not supported (supported: Split, ByteLevel, "
                   "Sequence)",
                   t->path, type);
}

#define MATCH_BIT 0x80000000u

/* Splits words by re into out, applying the behavior (tokenizers' SplitDelimiterBehavior). */
static enum ft_status split_re(const struct ft_pre *p, const char *buf, const struct ft_spans *in,
                               struct ft_spans *out, struct ft_spans *m, pcre2_match_data *md) {
    enum ft_status st = FT_OK;
    out->n = 0;
    for (size_t w = 0; w < in->n; w++) {
        const char *subj = buf + in->p[w].off;
        size_t len = in->p[w].len, pos = 0, prev = 0;
        uint32_t base = in->p[w].off;
        m->n = 0;
        /* 1. matches and gaps, in order: len | MATCH_BIT for a match */
        while (pos < len) {
            int rc = pcre2_match(p->re, (PCRE2_SPTR)subj, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return ft_fail(FT_ERR_INTERNAL, "tokenizer: regex match failed: %s",
                               (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t s = ov[0], e = ov[1];
            if (e == s) { /* empty match: step one character */
                pos = s + 1;
                while (pos < len && ((unsigned char)subj[pos] & 0xc0) == 0x80) pos++;
                continue;
            }
            if (s > prev) FT_TRY(ft_spans_add(m, base + prev, (uint32_t)(s - prev)));
            FT_TRY(ft_spans_add(m, base + s, (uint32_t)(e - s) | MATCH_BIT));
            prev = pos = e;
        }
        if (prev < len) FT_TRY(ft_spans_add(m, base + prev, (uint32_t)(len - prev)));
        /* 2. behavior */
        size_t out0 = out->n;
        int prev_match = 0;
        if (p->behavior == SPLIT_MERGED_NEXT) {
            /* walk backwards, merging each match into the piece after it */
            for (size_t k = m->n; k-- > 0;) {
                int is_m = !!(m->p[k].len & MATCH_BIT) ^ p->invert;
                uint32_t off = m->p[k].off, l = m->p[k].len & ~MATCH_BIT;
                if (is_m && !prev_match && out->n > out0) {
                    struct ft_span *last = &out->p[out->n - 1];
                    last->len += last->off - off;
                    last->off = off;
                } else {
                    FT_TRY(ft_spans_add(out, off, l));
                }
                prev_match = is_m;
            }
            for (size_t a = out0, b = out->n; a + 1 < b; a++, b--) {
                struct ft_span tmp = out->p[a];
                out->p[a] = out->p[b - 1];
                out->p[b - 1] = tmp;
            }
            continue;
        }
        for (size_t k = 0; k < m->n; k++) {
            int is_m = !!(m->p[k].len & MATCH_BIT) ^ p->invert;
            uint32_t off = m->p[k].off, l = m->p[k].len & ~MATCH_BIT;
            switch (p->behavior) {
            case SPLIT_REMOVED:
                if (!is_m) FT_TRY(ft_spans_add(out, off, l));
                break;
            case SPLIT_ISOLATED:
                FT_TRY(ft_spans_add(out, off, l));
                break;
            case SPLIT_MERGED_PREV:
                if (is_m && !prev_match && out->n > out0) out->p[out->n - 1].len += l;
                else FT_TRY(ft_spans_add(out, off, l));
                break;
            case SPLIT_CONTIGUOUS:
                if (is_m == prev_match && out->n > out0) out->p[out->n - 1].len += l;
                else FT_TRY(ft_spans_add(out, off, l));
                break;
            default: break;
            }
            prev_match = is_m;
        }
    }
fail:
    return st;
}

enum ft_status ft_tok_pretokenize(const struct ft_tok *t, struct ft_buf *buf, struct ft_spans *words,
                                  struct ft_spans *tmp, struct ft_buf *tmpbuf,
                                  pcre2_match_data *md) {
    enum ft_status st = FT_OK;
    struct ft_spans m = {0};
    words->n = 0;
    if (buf->n == 0) return FT_OK;
    FT_TRY(ft_spans_add(words, 0, (uint32_t)buf->n));
    for (int i = 0; i < t->n_pres; i++) {
        const struct ft_pre *p = &t->pres[i];
        if (p->kind == PRE_BYTELEVEL && p->add_prefix_space) {
            tmpbuf->n = 0;
            for (size_t w = 0; w < words->n; w++) {
                uint32_t off = (uint32_t)tmpbuf->n;
                if (buf->p[words->p[w].off] != ' ') FT_TRY(ft_buf_put(tmpbuf, " ", 1));
                FT_TRY(ft_buf_put(tmpbuf, buf->p + words->p[w].off, words->p[w].len));
                words->p[w].off = off;
                words->p[w].len = (uint32_t)tmpbuf->n - off;
            }
            struct ft_buf sw = *buf;
            *buf = *tmpbuf;
            *tmpbuf = sw;
        }
        if (p->re) {
            FT_TRY(split_re(p, buf->p, words, tmp, &m, md));
            struct ft_spans sw = *words;
            *words = *tmp;
            *tmp = sw;
        }
    }
    /* drop empty pieces */
    size_t k = 0;
    for (size_t w = 0; w < words->n; w++)
        if (words->p[w].len) words->p[k++] = words->p[w];
    words->n = k;
fail:
    free(m.p);
    return st;
}
