/* tok_tiktoken.c — builds a struct ft_tok from a tiktoken vocabulary, as Kimi-K2 / K2.5 ship it
 * (tiktoken.model + tokenizer_config.json + tokenization_kimi.py, no tokenizer.json):
 *   tiktoken.model          one line per base token: base64 of its bytes, a space, its rank (= id);
 *                           ranks 0..n-1, every single byte among them
 *   tokenizer_config.json   added_tokens_decoder (the special tokens, ids n, n+1, ...; the ids it
 *                           leaves out are "<|reserved_token_ID|>"), bos/eos, chat_template
 *   tokenization_kimi.py    read only for the number of special ids: 256, or 258 where the file
 *                           says `num_reserved_special_tokens + 2` (Kimi-Linear)
 * tiktoken merges bytes by rank: at each step the adjacent pair whose concatenation has the lowest
 * rank, leftmost first, after looking the whole pre-token up. That is bpe.c with ignore_merges and
 * one merge (a, b) -> ab for EVERY split of every token ab into two tokens, ranked by ab's rank
 * (not only the split that trained ab: tiktoken merges by the concatenation, so "a"+"bc" gives
 * "abc" even when "abc" was trained as "ab"+"c"). Pieces are stored GPT-2-mapped, as
 * tokenization_kimi.py's decoder spells them (ft_tok_piece), and decode to the raw bytes.
 * The pre-tokenizer is tokenization_kimi.py's pat_str in PCRE2 (see KIMI_RE); the text is cut
 * as its encode cuts it (ft_tiktoken_cut, used by bpe.c).
 * Called by ft_tok_load. Threading: built on the calling thread, then read-only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "text/tok_impl.h"

/* Rust regex's class intersection `[A&&[^\p{Han}]]`, which PCRE2 10.42 lacks, is written as the
 * negated class of A's complement and Han: the general categories partition the code points
 * (L = Lu Ll Lt Lm Lo, M, N, P, S, Z, C with Cn), so [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] minus Han is
 * [^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}Han]. One class keeps the JIT from stacking a frame per
 * character, as `(?:(?!Han)[A])*` would (a 25,000-letter run overflows its stack).
 * Rust's \p{Han} is the Script property: PCRE2 >= 10.40 reads a bare \p{Han} as
 * Script_Extensions (which holds CJK punctuation such as "。"), so it is spelled \p{sc:Han} there.
 * Rust's \s is the White_Space property; PCRE2's (UCP) differs (it holds U+180E, which
 * White_Space lost in Unicode 6.3), so \s is White_Space spelled out (a stable property) and \S
 * its complement. tests/test_tok_tiktoken.c checks all of it against
 * tiktoken. */
#if PCRE2_MAJOR > 10 || (PCRE2_MAJOR == 10 && PCRE2_MINOR >= 40)
#define HAN "\\p{sc:Han}"
#else
#define HAN "\\p{Han}"
#endif
#define WS                                                                           \
    "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define NOT_LMN "\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}" HAN "]" /* neither L, M nor Han */
#define UPPER "[^\\p{Ll}" NOT_LMN /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] */
#define LOWER "[^\\p{Lu}\\p{Lt}" NOT_LMN /* [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] */
#define CONTR "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
#define KIMI_RE                                                                              \
    "[" HAN "]+"                                                                             \
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+" CONTR                                      \
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*" CONTR                                      \
    "|\\p{N}{1,3}"                                                                           \
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"                                                     \
    "|[" WS "]*[\\r\\n]+"                                                                    \
    "|[" WS "]+(?![^" WS "])"                                                                \
    "|[" WS "]+"

#define MAX_TOKEN_BYTES 512 /* GPT-2-mapped, at most 1024 bytes: the decoder's limit */

/* ---------------- tokenization_kimi.py's cuts ---------------- */

/* Python's str.isspace(): category Zs, or bidirectional class WS, B or S. */
static int py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* encode() takes 400,000 characters at a time and cuts each where a run of whitespace or of
 * non-whitespace would pass 25,000 characters (_split_whitespaces_or_nonwhitespaces). Valid UTF-8
 * assumed (ft_tok_encode checks). */
size_t ft_tiktoken_cut(const char *text, size_t len, int runs) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, n_chars = 0, run = 0;
    int run_space = 0;
    if (len <= 25000) return len; /* no more characters than bytes */
    while (i < len) {
        uint32_t cp = s[i];
        int k = cp < 0x80 ? 1 : ft_utf8_dec(s + i, &cp);
        if (!runs) {
            if (n_chars++ == 400000) return i;
        } else if (n_chars++ == 0 || py_isspace(cp) != run_space) {
            run = 1;
            run_space = py_isspace(cp);
        } else if (++run > 25000) {
            return i;
        }
        i += (size_t)k;
    }
    return len;
}

/* ---------------- tiktoken.model ---------------- */

static int b64val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Strict standard base64 (padded) of s[0..n) into out; returns the length, or -1. */
static int b64dec(const char *s, size_t n, unsigned char *out, size_t cap) {
    size_t o = 0;
    if (n == 0 || n % 4) return -1;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad || (v[k] = b64val(c)) < 0) return -1; /* a character after '=' */
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        unsigned char b[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w};
        if (o + 3 - (size_t)pad > cap) return -1;
        memcpy(out + o, b, 3 - (size_t)pad);
        o += 3 - (size_t)pad;
    }
    return (int)o;
}

struct base {
    uint32_t off, len; /* raw bytes in the arena */
    uint32_t line;     /* in tiktoken.model, for messages */
};

#define FIX "(the file is damaged or not a tiktoken vocabulary: download the model's tiktoken.model again)"

/* Parses the lines into base[rank] (raw bytes in *arena); every rank 0..n-1 exactly once. */
static enum ft_status read_model(const char *path, struct base **out, unsigned char **arena,
                                 int *n_out) {
    enum ft_status st = FT_OK;
    char *text = NULL;
    size_t size;
    struct base *b = NULL;
    unsigned char *a = NULL;
    int n = 0, cap = 0;
    size_t n_arena = 0;
    *out = NULL;
    *arena = NULL;
    FT_TRY(ft_file_read(path, &text, &size));
    a = malloc(size + 1); /* the bytes are shorter than their base64 */
    if (!a) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }
    size_t line = 0, n_lines = 1; /* ranks are ids: below the number of lines */
    for (const char *q = text; (q = memchr(q, '\n', size - (size_t)(q - text))); q++) n_lines++;
    for (size_t p = 0; p < size;) {
        const char *s = text + p, *nl = memchr(s, '\n', size - p);
        size_t len = nl ? (size_t)(nl - s) : size - p;
        p += len + (nl != NULL);
        line++;
        if (len && s[len - 1] == '\r') len--;
        if (len == 0) continue; /* load_tiktoken_bpe skips empty lines */
        const char *sp = memchr(s, ' ', len);
        if (!sp || sp == s || sp + 1 == s + len) {
            st = ft_fail(FT_ERR_FORMAT, "%s:%zu: expected \"BASE64 RANK\" %s", path, line, FIX);
            goto fail;
        }
        size_t lb = (size_t)(sp - s);
        long long rank = 0;
        for (const char *q = sp + 1; q < s + len; q++) {
            if (*q < '0' || *q > '9' || rank > (1 << 24)) {
                st = ft_fail(FT_ERR_FORMAT, "%s:%zu: rank \"%.*s\" is not a number in [0, 2^24] %s",
                             path, line, (int)FT_MIN(s + len - sp - 1, 32), sp + 1, FIX);
                goto fail;
            }
            rank = rank * 10 + (*q - '0');
        }
        if (rank > (1 << 24) || (size_t)rank >= n_lines) {
            st = ft_fail(FT_ERR_FORMAT, "%s:%zu: rank %lld, but the file's %zu lines can hold "
                         "ranks 0 to %zu only %s", path, line, rank, n_lines, n_lines - 1, FIX);
            goto fail;
        }
        int nb = b64dec(s, lb, a + n_arena, MAX_TOKEN_BYTES);
        if (nb <= 0) {
            st = ft_fail(FT_ERR_FORMAT, "%s:%zu: \"%.*s\" is not base64 of 1 to %d bytes %s", path,
                         line, (int)FT_MIN(lb, 48), s, MAX_TOKEN_BYTES, FIX);
            goto fail;
        }
        if (rank >= cap) {
            int nc = cap ? cap : 1024;
            while (nc <= rank) nc *= 2;
            struct base *nbp = realloc(b, (size_t)nc * sizeof *nbp);
            if (!nbp) {
                st = ft_fail(FT_ERR_OOM, "%s: out of memory", path);
                goto fail;
            }
            memset(nbp + cap, 0xff, (size_t)(nc - cap) * sizeof *nbp);
            b = nbp;
            cap = nc;
        }
        if (b[rank].len != UINT32_MAX) {
            st = ft_fail(FT_ERR_FORMAT, "%s:%zu: rank %lld appears twice (ranks are token ids: each "
                         "once) %s", path, line, rank, FIX);
            goto fail;
        }
        b[rank] = (struct base){(uint32_t)n_arena, (uint32_t)nb, (uint32_t)line};
        n_arena += (size_t)nb;
        n++;
    }
    if (n == 0) {
        st = ft_fail(FT_ERR_FORMAT, "%s: no tokens (an empty file) %s", path, FIX);
        goto fail;
    }
    for (int r = 0; r < n; r++)
        if (b[r].len == UINT32_MAX) { /* then some line holds a rank >= n */
            int big = n;
            while (big < cap && b[big].len == UINT32_MAX) big++;
            st = ft_fail(FT_ERR_FORMAT, "%s:%u: rank %d, but rank %d is missing (the %d tokens "
                         "should have ranks 0 to %d) %s", path, big < cap ? b[big].line : 0, big,
                         r, n, n - 1, FIX);
            goto fail;
        }
    *out = b;
    *arena = a;
    *n_out = n;
    b = NULL;
    a = NULL;
fail:
    free(text);
    free(b);
    free(a);
    return st;
}

/* ---------------- tokenizer_config.json, tokenization_kimi.py ---------------- */

/* The number of special ids after the base tokens, as tokenization_kimi.py (when present)
 * builds its special_tokens range. */
static int n_special_ids(const char *dir) {
    char p[4096], *text = NULL;
    size_t size;
    int n = 256;
    ft_path_join(p, sizeof p, dir, "tokenization_kimi.py");
    if (!ft_file_exists(p) || ft_file_read(p, &text, &size) != FT_OK) return n;
    const char *k = "num_reserved_special_tokens = ", *s = strstr(text, k);
    if (s) n = atoi(s + strlen(k));
    if (n <= 0 || n > 65536) n = 256;
    if (strstr(text, "num_reserved_special_tokens + 2")) n += 2;
    free(text);
    return n;
}

/* added_tokens_decoder: content of each special id (NULL where the file names none). */
static enum ft_status read_specials(const char *path, int n_base, int n_spec, char **content,
                                    uint8_t *special) {
    json_error_t jerr;
    enum ft_status st = FT_OK;
    json_t *c = json_load_file(path, 0, &jerr);
    if (!c)
        return ft_fail(FT_ERR_FORMAT, "%s: line %d: %s (fix tokenizer_config.json)", path,
                       jerr.line, jerr.text);
    const json_t *atd = json_object_get(c, "added_tokens_decoder"), *v;
    const char *key;
    if (atd && !json_is_object(atd)) {
        st = ft_fail(FT_ERR_FORMAT, "%s: added_tokens_decoder must be an object of id -> "
                     "{\"content\": ...}", path);
        goto fail;
    }
    json_object_foreach((json_t *)atd, key, v) {
        char *end;
        long id = strtol(key, &end, 10);
        const char *s = ft_jstr(v, "content");
        if (*end || end == key || !s || !*s) {
            st = ft_fail(FT_ERR_FORMAT, "%s: added_tokens_decoder[\"%s\"]: needs a numeric id and "
                         "a non-empty \"content\"", path, key);
            goto fail;
        }
        if (id < n_base || id >= (long)n_base + n_spec) {
            st = ft_fail(FT_ERR_FORMAT, "%s: added_tokens_decoder[\"%s\"] \"%s\": id outside the "
                         "special ids [%d, %d) that follow tiktoken.model's %d tokens (is "
                         "tiktoken.model complete?)", path, key, s, n_base, n_base + n_spec, n_base);
            goto fail;
        }
        free(content[id - n_base]);
        if (!(content[id - n_base] = strdup(s))) {
            st = ft_fail(FT_ERR_OOM, "%s: out of memory", path);
            goto fail;
        }
        const json_t *sp = json_object_get(v, "special");
        special[id - n_base] = !sp || json_is_true(sp);
    }
fail:
    json_decref(c);
    return st;
}

/* ---------------- load ---------------- */

/* The GPT-2-mapped spelling of raw[0..n) into out (2n bytes at most); *offs[k] = where byte k
 * starts in it (offs[n] = the length). */
static size_t map_bytes(const unsigned char *raw, uint32_t n, char *out, uint32_t *offs) {
    size_t o = 0;
    for (uint32_t k = 0; k < n; k++) {
        offs[k] = (uint32_t)o;
        o += (size_t)ft_utf8_enc(ft_bytelevel_cp(raw[k]), out + o);
    }
    offs[n] = (uint32_t)o;
    return o;
}

/* One merge per split of each base token into two base tokens, ranked by the token (see top). */
static enum ft_status build_merges(struct ft_tok *t, int n_base) {
    enum ft_status st;
    for (int pass = 0; pass < 2; pass++) { /* count, then fill (the map does not grow) */
        uint64_t n_merges = 0;
        for (int32_t id = 0; id < n_base; id++) {
            const char *s = t->piece_arena + t->piece_off[id];
            uint32_t len = t->piece_len[id];
            for (uint32_t k = 1; k < len; k++) {
                if (((unsigned char)s[k] & 0xc0) == 0x80) continue; /* inside a mapped byte */
                int32_t a = ft_tok_lookup(t, s, k);
                int32_t b = a < 0 || a >= n_base ? -1 : ft_tok_lookup(t, s + k, len - k);
                if (b < 0 || b >= n_base) continue;
                n_merges++;
                if (pass)
                    ft_u64map_put(&t->merges, (uint64_t)a << 32 | (uint32_t)b,
                                  (uint64_t)(uint32_t)id << 32 | (uint32_t)id);
            }
        }
        if (!pass && (st = ft_u64map_init(&t->merges, n_merges))) return st;
    }
    return FT_OK;
}

/* Decoded bytes: raw bytes for base tokens, the text of special ones (as tiktoken decodes). */
static enum ft_status build_decoded(struct ft_tok *t, const struct base *b,
                                    const unsigned char *raw, int n_base) {
    struct ft_buf out = {0};
    enum ft_status st = FT_OK;
    t->max_dec = 0;
    for (int id = 0; id < t->n_vocab; id++) {
        t->dec_off[id] = (uint32_t)out.n;
        if (id < n_base) FT_TRY(ft_buf_put(&out, raw + b[id].off, b[id].len));
        else FT_TRY(ft_buf_put(&out, t->piece_arena + t->piece_off[id], t->piece_len[id]));
        t->dec_len[id] = (uint32_t)(out.n - t->dec_off[id]);
        if (t->dec_len[id] > t->max_dec) t->max_dec = t->dec_len[id];
    }
    free(t->dec_arena);
    t->dec_arena = out.p;
    out.p = NULL;
fail:
    free(out.p);
    return st;
}

enum ft_status ft_tok_load_tiktoken(const char *dir, struct ft_tok **out) {
    enum ft_status st = FT_OK;
    char mp[4096], cp[4096];
    struct ft_tok *t = NULL;
    struct base *b = NULL;
    unsigned char *raw = NULL;
    char *mapped = NULL, **content = NULL;
    uint8_t *special = NULL;
    struct ft_tok_str *strs = NULL;
    uint32_t *offs = NULL;
    int n_base = 0, n_spec = n_special_ids(dir);
    *out = NULL;
    ft_path_join(mp, sizeof mp, dir, "tiktoken.model");
    ft_path_join(cp, sizeof cp, dir, "tokenizer_config.json");
    FT_TRY(ft_tok_new(mp, &t));
    FT_TRY(read_model(mp, &b, &raw, &n_base));
    if (n_base + n_spec > (1 << 24)) {
        st = ft_fail(FT_ERR_FORMAT, "%s: %d tokens (at most 2^24 with the special ids)", mp, n_base);
        goto fail;
    }
    int n = n_base + n_spec;
    content = calloc((size_t)n_spec, sizeof *content);
    special = calloc((size_t)n_spec, 1);
    strs = malloc((size_t)n * sizeof *strs);
    size_t total = 0;
    for (int i = 0; i < n_base; i++) total += 2 * (size_t)b[i].len;
    mapped = malloc(total + 1);
    offs = malloc((MAX_TOKEN_BYTES + 1) * sizeof *offs);
    if (!content || !special || !strs || !mapped || !offs) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory for %d tokens", mp, n);
        goto fail;
    }
    if (ft_file_exists(cp)) FT_TRY(read_specials(cp, n_base, n_spec, content, special));
    size_t o = 0;
    for (int i = 0; i < n_base; i++) {
        size_t l = map_bytes(raw + b[i].off, b[i].len, mapped + o, offs);
        strs[i] = (struct ft_tok_str){i, (uint32_t)l, mapped + o};
        o += l;
    }
    for (int k = 0; k < n_spec; k++) {
        char name[64];
        if (!content[k]) { /* tokenization_kimi.py's name for an id the config leaves out */
            snprintf(name, sizeof name, "<|reserved_token_%d|>", n_base + k);
            if (!(content[k] = strdup(name))) {
                st = ft_fail(FT_ERR_OOM, "%s: out of memory", mp);
                goto fail;
            }
            special[k] = 1;
        }
        strs[n_base + k] = (struct ft_tok_str){n_base + k, (uint32_t)strlen(content[k]), content[k]};
    }
    FT_TRY(ft_tok_set_vocab(t, strs, (size_t)n));
    for (int v = 0; v < 256; v++) { /* tiktoken cannot encode a byte it has no token for */
        unsigned char c = (unsigned char)v;
        char s[4];
        int l = ft_utf8_enc(ft_bytelevel_cp(c), s);
        int32_t id = ft_tok_lookup(t, s, (size_t)l);
        if (id < 0 || id >= n_base) {
            st = ft_fail(FT_ERR_FORMAT, "%s: no token for the single byte 0x%02X (a byte-level "
                         "vocabulary has all 256) " FIX, mp, v);
            goto fail;
        }
    }
    FT_TRY(build_merges(t, n_base));
    /* every special id is matched in the text, as encode(allowed_special="all") does */
    if (!(t->added = calloc((size_t)n_spec, sizeof *t->added))) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", mp);
        goto fail;
    }
    for (int k = 0; k < n_spec; k++)
        t->added[t->n_added++] = (struct ft_added){.id = n_base + k, .special = special[k]};
    FT_TRY(ft_tok_build_added(t));
    FT_TRY(ft_tok_add_split(t, KIMI_RE, strlen(KIMI_RE), 0, SPLIT_ISOLATED, 0));
    FT_TRY(ft_tok_add_bytelevel(t, 0, 0));
    t->ignore_merges = 1; /* tiktoken looks the whole pre-token up first */
    t->dec_byte_level = 1;
    t->tiktoken_chunks = 1;
    FT_TRY(ft_tok_finish(t));
    FT_TRY(build_decoded(t, b, raw, n_base));
    /* tokenization_kimi.py's defaults; its encode never adds them (have_template = 1) */
    t->bos_id = ft_tok_lookup(t, "[BOS]", 5);
    t->eos_id = ft_tok_lookup(t, "[EOS]", 5);
    if (ft_file_exists(cp)) FT_TRY(ft_tok_load_config(t, cp, 1));
    *out = t;
    t = NULL;
fail:
    ft_tok_free(t);
    free(b);
    free(raw);
    free(mapped);
    free(strs);
    free(offs);
    for (int k = 0; content && k < n_spec; k++) free(content[k]);
    free(content);
    free(special);
    return st;
}
