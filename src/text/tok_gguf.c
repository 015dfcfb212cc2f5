/* tok_gguf.c — builds a struct ft_tok from a GGUF file's tokenizer metadata, the keys llama.cpp's
 * convert_hf_to_gguf.py writes and llama.cpp reads:
 *   tokenizer.ggml.model        "gpt2": byte-level BPE (tokens + merges; the pre-tokenizer regexes
 *                               follow from tokenizer.ggml.pre); "llama": SentencePiece BPE
 *                               (tokens + scores, "▁" for spaces, <0xNN> byte fallback)
 *   tokenizer.ggml.tokens       strings by id; token_type 1 normal, 2 unknown, 3 control,
 *                               4 user-defined, 5 unused, 6 byte; merges ("a b", rank = index)
 *   tokenizer.ggml.*_token_id, add_bos_token, add_eos_token, add_space_prefix,
 *   tokenizer.chat_template
 * into the same structure tokenizer.c builds from tokenizer.json, so that encoding gives the ids of
 * the Hugging Face tokenizer the file was converted from (tests/test_tok_gguf.c checks it).
 * Called by `ft tokenize --model FILE.gguf` (and by GGUF model loading once models load from
 * GGUF). Threading: like ft_tok_load: built on the calling thread, then read-only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "format/gguf.h"
#include "text/tok_impl.h"

enum { TOK_NORMAL = 1, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE };

#define KEY(k) "tokenizer.ggml." k
#define META "\xE2\x96\x81" /* U+2581 "▁", SentencePiece's space */

/* ---------------- pre-tokenizers of byte-level ("gpt2") vocabularies ---------------- */

/* llama.cpp maps tokenizer.ggml.pre to a list of regexes applied in turn, every piece kept
 * (tokenizers' Split with behavior Isolated). llama.cpp rewrites some of them for its own regex
 * engine (e.g. (?i:'s) as '[sS]); PCRE2 runs the originals, so these are the regexes of the
 * tokenizer.json files themselves (byte for byte: test_tok_gguf compares them), which also keeps
 * tokenizers' Unicode case folding ("'ſ" matches (?i:'s)). */
#define RE_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
/* Qwen2 and Llama-3 differ only in how many digits go together */
#define RE_WORDS_AFTER_DIGITS                                                                \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" RE_WORDS_AFTER_DIGITS
#define RE_LLAMA3 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" RE_WORDS_AFTER_DIGITS
/* Qwen3.5 / 3.6: a word's letters may carry combining marks (\p{M}: Devanagari vowel signs,
 * decomposed accents), which Qwen2's regex split off */
#define RE_QWEN35                                                                            \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"                            \
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek-V3: digits in threes, then runs of CJK ideographs, hiragana and katakana
 * (U+4E00-U+9FA5, U+3040-U+309F, U+30A0-U+30FF, written in UTF-8), then words and punctuation
 * (its [^\r\n...] hold the CR and LF characters themselves, as the file does) */
#define RE_DS3_CJK                                                                           \
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+"
#define RE_DS3_WORDS                                                                         \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"                                   \
    "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O_WORD(first, rest)                                                           \
    "[^\\r\\n\\p{L}\\p{N}]?" first rest "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
#define RE_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_GPT4O                                                                             \
    RE_GPT4O_WORD(RE_UPPER "*", RE_LOWER "+") "|" RE_GPT4O_WORD(RE_UPPER "+", RE_LOWER "*")  \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

struct pre_spec {
    const char *name;      /* a tokenizer.ggml.pre value (llama.cpp's aliases get a row each) */
    const char *re[4];     /* Isolated splits, in order */
    int gpt2_regex;        /* then GPT-2's own regex (ByteLevel with use_regex) */
    int nfc;               /* the tokenizer.json has an NFC normalizer (llama.cpp ignores it) */
    int ignore_merges;     /* a whole word in the vocabulary is one token (Llama-3) */
    int add_bos;           /* llama.cpp's add_bos when tokenizer.ggml.add_bos_token is absent */
};

/* llama.cpp's fallback for files without a known pre-tokenizer */
#define RE_DEFAULT                                                                          \
    "[\\p{P}\\$\\+<=>\\^~\\|]+",                                                              \
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",         \
        "\\p{N}+", "[0-9][0-9][0-9]"

static const struct pre_spec k_pres[] = {
    {.name = "qwen2", .re = {RE_QWEN2}, .nfc = 1},
    {.name = "deepseek-r1-qwen", .re = {RE_QWEN2}, .nfc = 1},
    {.name = "qwen35", .re = {RE_QWEN35}, .nfc = 1},
    {.name = "llama-bpe", .re = {RE_LLAMA3}, .ignore_merges = 1, .add_bos = 1},
    {.name = "llama3", .re = {RE_LLAMA3}, .ignore_merges = 1, .add_bos = 1},
    {.name = "llama-v3", .re = {RE_LLAMA3}, .ignore_merges = 1, .add_bos = 1},
    /* Llama-3 fine-tunes whose tokenizer.json adds no BOS (the converter's hash tells them
     * apart); llama.cpp then neither adds BOS nor ignores merges */
    {.name = "smaug-bpe", .re = {RE_LLAMA3}},
    /* GLM-4.5 / 4.6 / 4.7 (glm4moe, GLM-4.7-Flash's deepseek2): Llama-3's regex, whole words
     * kept, no BOS (llama.cpp's chatglm4 type) */
    {.name = "glm4", .re = {RE_LLAMA3}, .ignore_merges = 1},
    {.name = "glm5", .re = {RE_LLAMA3}, .ignore_merges = 1},
    {.name = "deepseek-v3", .re = {"\\p{N}{1,3}", RE_DS3_CJK, RE_DS3_WORDS}},
    {.name = "gpt-2", .re = {NULL}, .gpt2_regex = 1},
    {.name = "smollm", .re = {"\\p{N}"}, .gpt2_regex = 1},
    {.name = "gpt-4o", .re = {RE_GPT4O}},
    {.name = "llama4", .re = {RE_GPT4O}},
    {.name = "minimax-m2", .re = {RE_GPT4O}},
    {.name = "default", .re = {RE_DEFAULT}},
};
#define N_PRES (sizeof k_pres / sizeof k_pres[0])

static const struct pre_spec *find_pre(const char *pre) {
    for (size_t i = 0; i < N_PRES; i++)
        if (!strcmp(pre, k_pres[i].name)) return &k_pres[i];
    return NULL;
}

const char *const *ft_tok_gguf_pre_regexes(const char *pre, int *n) {
    const struct pre_spec *p = find_pre(pre);
    for (*n = 0; p && *n < 4 && p->re[*n];) (*n)++;
    return p ? p->re : NULL;
}

/* The normalizer and pre-tokenizers of tokenizer.ggml.pre; *add_bos gets its default. */
static enum ft_status set_pre(struct ft_tok *t, const struct ft_gguf_file *f, int *add_bos) {
    enum ft_status st;
    const char *pre = "default";
    const struct ft_gguf_value *v = ft_gguf_get(f, KEY("pre"));
    if (v && (st = ft_gguf_get_str(f, KEY("pre"), &pre))) return st;
    if (!v)
        ft_log_warn("%s: no " KEY("pre") " (pre-tokenizer); using llama.cpp's \"default\" "
                    "regexes, which may not split text as the original tokenizer did",
                    t->path);
    const struct pre_spec *p = find_pre(pre);
    if (!p) {
        char names[512] = "";
        for (size_t i = 0; i < N_PRES; i++) strcat(strcat(names, i ? ", " : ""), k_pres[i].name);
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: " KEY("pre") " \"%s\" is not a supported "
                       "pre-tokenizer (supported: %s)", t->path, pre, names);
    }
    if (p->nfc && (st = ft_norms_add(t, &t->norms, &t->n_norms, NORM_NFC, NULL, NULL))) return st;
    for (int k = 0; k < 4 && p->re[k]; k++)
        if ((st = ft_tok_add_split(t, p->re[k], strlen(p->re[k]), 0, SPLIT_ISOLATED, 0))) return st;
    t->ignore_merges = p->ignore_merges;
    t->dec_byte_level = 1;
    *add_bos = p->add_bos;
    return ft_tok_add_bytelevel(t, 0, p->gpt2_regex);
}

/* ---------------- arrays ---------------- */

/* The array at key, of strings (want_str) or of numbers, with exactly n_want elements when
 * n_want > 0; when absent, *out is NULL, or an error saying why the key is needed. */
static enum ft_status get_array(const struct ft_gguf_file *f, const char *key, const char *needed,
                                int want_str, uint64_t n_want, const struct ft_gguf_value **out) {
    const char *label = ft_gguf_label(f);
    const struct ft_gguf_value *v = ft_gguf_get(f, key);
    *out = NULL;
    if (!v && needed) return ft_fail(FT_ERR_FORMAT, "%s: %s missing (%s)", label, key, needed);
    if (!v) return FT_OK;
    enum ft_gguf_type et = v->type == FT_GGUF_ARRAY ? v->v.arr.elem_type : FT_GGUF_TYPE_COUNT;
    int is_str = et == FT_GGUF_STRING;
    int is_num = et < FT_GGUF_TYPE_COUNT && !is_str && et != FT_GGUF_BOOL && et != FT_GGUF_ARRAY;
    if (want_str ? !is_str : !is_num)
        return ft_fail(FT_ERR_FORMAT, "%s: %s must be an array of %s (it is %s%s%s)", label, key,
                       want_str ? "strings" : "numbers", ft_gguf_type_name(v->type),
                       v->type == FT_GGUF_ARRAY ? " of " : "",
                       v->type == FT_GGUF_ARRAY ? ft_gguf_type_name(et) : "");
    if (n_want && v->v.arr.n != n_want)
        return ft_fail(FT_ERR_FORMAT, "%s: %s has %llu entries, but " KEY("tokens") " has %llu",
                       label, key, (unsigned long long)v->v.arr.n, (unsigned long long)n_want);
    *out = v;
    return FT_OK;
}

/* ---------------- vocabulary, merges ---------------- */

static enum ft_status set_vocab(struct ft_tok *t, const struct ft_gguf_value *tokens) {
    uint64_t n = tokens->v.arr.n;
    if (n == 0 || n > (1u << 24))
        return ft_fail(FT_ERR_FORMAT, "%s: " KEY("tokens") " has %llu entries (expected 1 to 2^24)",
                       t->path, (unsigned long long)n);
    struct ft_tok_str *p = malloc(n * sizeof *p);
    if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory for %llu tokens", t->path,
                           (unsigned long long)n);
    enum ft_status st = FT_OK;
    for (uint64_t i = 0; i < n; i++) {
        const struct ft_gguf_value *s = &tokens->v.arr.items[i];
        if (s->v.str.len >= UINT32_MAX) {
            st = ft_fail(FT_ERR_FORMAT, "%s: " KEY("tokens") "[%llu] is 4 GiB long", t->path,
                         (unsigned long long)i);
            break;
        }
        p[i] = (struct ft_tok_str){(int32_t)i, (uint32_t)s->v.str.len, s->v.str.s};
    }
    if (!st) st = ft_tok_set_vocab(t, p, n);
    free(p);
    return st;
}

static enum ft_status bpe_merges(struct ft_tok *t, const struct ft_gguf_value *merges) {
    enum ft_status st;
    if ((st = ft_u64map_init(&t->merges, merges->v.arr.n))) return st;
    for (uint64_t i = 0; i < merges->v.arr.n; i++) {
        const struct ft_gguf_value *m = &merges->v.arr.items[i];
        const char *s = m->v.str.s, *sp = NULL;
        if (m->v.str.len > 1) /* the first space after the first byte, as llama.cpp reads it */
            sp = memchr(s + 1, ' ', m->v.str.len - 1);
        if (!sp)
            return ft_fail(FT_ERR_FORMAT, "%s: " KEY("merges") "[%llu] \"%.64s\": expected "
                           "\"left right\"", t->path, (unsigned long long)i, s);
        size_t la = (size_t)(sp - s);
        if ((st = ft_tok_add_merge(t, KEY("merges"), i, s, la, sp + 1, m->v.str.len - la - 1,
                                   KEY("tokens"))))
            return st;
    }
    return FT_OK;
}

struct scored {
    double score;
    int32_t id;
};

static int by_score_desc(const void *a, const void *b) {
    const struct scored *x = a, *y = b;
    return x->score > y->score ? -1 : x->score < y->score ? 1 : (x->id > y->id) - (x->id < y->id);
}

/* SentencePiece BPE has no merge list: it merges the adjacent pair whose concatenation is the
 * vocabulary entry with the highest score, the leftmost pair on ties. That is BPE with one merge
 * (a, b) -> ab for every split of every entry into two entries, ranked by the entry's score
 * (equal scores, equal rank: bpe.c's heap then takes the leftmost). Splits fall on UTF-8
 * character boundaries: SentencePiece's symbols are characters. */
static enum ft_status spm_merges(struct ft_tok *t, const struct ft_gguf_value *scores) {
    enum ft_status st = FT_OK;
    int n = t->n_vocab;
    struct scored *by = malloc((size_t)n * sizeof *by);
    uint32_t *rank = malloc((size_t)n * sizeof *rank);
    if (!by || !rank) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory for %d scores", t->path, n);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        by[i] = (struct scored){ft_gguf_arr_f64(scores, (uint64_t)i), i};
        if (isnan(by[i].score)) {
            st = ft_fail(FT_ERR_FORMAT, "%s: " KEY("scores") "[%d] is NaN", t->path, i);
            goto fail;
        }
    }
    qsort(by, (size_t)n, sizeof *by, by_score_desc);
    for (int i = 0, r = 0; i < n; i++) {
        r += i > 0 && by[i].score != by[i - 1].score;
        rank[by[i].id] = (uint32_t)r;
    }
    for (int pass = 0; pass < 2; pass++) { /* count, then fill (the map does not grow) */
        uint64_t n_merges = 0;
        for (int32_t id = 0; id < n; id++) {
            const char *s = t->piece_arena + t->piece_off[id];
            uint32_t len = t->piece_len[id];
            for (uint32_t k = 1; k < len; k++) {
                if (((unsigned char)s[k] & 0xc0) == 0x80) continue;
                int32_t a = ft_tok_lookup(t, s, k);
                int32_t b = a < 0 ? -1 : ft_tok_lookup(t, s + k, len - k);
                if (b < 0) continue;
                n_merges++;
                if (pass)
                    ft_u64map_put(&t->merges, (uint64_t)a << 32 | (uint32_t)b,
                                  (uint64_t)rank[id] << 32 | (uint32_t)id);
            }
        }
        if (!pass) FT_TRY(ft_u64map_init(&t->merges, n_merges));
    }
fail:
    free(by);
    free(rank);
    return st;
}

/* ---------------- special tokens ---------------- */

/* *id from key when present (must be a token), else keeps the default. */
static enum ft_status get_id(struct ft_tok *t, const struct ft_gguf_file *f, const char *key,
                             int32_t *id) {
    uint64_t v;
    enum ft_status st;
    if (!ft_gguf_get(f, key)) return FT_OK;
    if ((st = ft_gguf_get_u64(f, key, &v))) return st;
    if (v >= (uint64_t)t->n_vocab)
        return ft_fail(FT_ERR_FORMAT, "%s: %s = %llu is out of range (the vocabulary has %d "
                       "tokens)", t->path, key, (unsigned long long)v, t->n_vocab);
    *id = (int32_t)v;
    return FT_OK;
}

/* Flag key (def when absent) puts id in *list; a flag set true needs its token. */
static enum ft_status get_add(struct ft_tok *t, const struct ft_gguf_file *f, const char *key,
                              int def, int32_t id, int32_t **list, int *n) {
    enum ft_status st;
    int on = def, given = ft_gguf_get(f, key) != NULL;
    if (given && (st = ft_gguf_get_bool(f, key, &on))) return st;
    if (given && on && id < 0)
        return ft_fail(FT_ERR_FORMAT, "%s: %s is true but the file names no such token", t->path,
                       key);
    return on && id >= 0 ? ft_tok_push_id(t, list, n, id) : FT_OK;
}

static enum ft_status set_specials(struct ft_tok *t, const struct ft_gguf_file *f, int spm,
                                   int add_bos) {
    enum ft_status st;
    int32_t pad = -1; /* checked like the others; nothing pads yet */
    if (spm && t->n_vocab > 2) /* llama.cpp's SentencePiece defaults */
        t->unk_id = 0, t->bos_id = 1, t->eos_id = 2;
    if ((st = get_id(t, f, KEY("bos_token_id"), &t->bos_id)) ||
        (st = get_id(t, f, KEY("eos_token_id"), &t->eos_id)) ||
        (st = get_id(t, f, KEY("unknown_token_id"), &t->unk_id)) ||
        (st = get_id(t, f, KEY("padding_token_id"), &pad)))
        return st;
    if ((st = get_add(t, f, KEY("add_bos_token"), add_bos, t->bos_id, &t->prefix, &t->n_prefix)) ||
        (st = get_add(t, f, KEY("add_eos_token"), 0, t->eos_id, &t->suffix, &t->n_suffix)))
        return st;
    const char *tmpl;
    if (!ft_gguf_get(f, "tokenizer.chat_template")) return FT_OK;
    if ((st = ft_gguf_get_str(f, "tokenizer.chat_template", &tmpl))) return st;
    if (!(t->chat_template = strdup(tmpl)))
        return ft_fail(FT_ERR_OOM, "%s: out of memory", t->path);
    return FT_OK;
}

/* ---------------- load ---------------- */

/* Control, unknown and user-defined tokens are matched in the text before BPE, like
 * tokenizer.json's added_tokens; control and unknown ones are special. */
static int is_added(int64_t ty) {
    return ty == TOK_UNKNOWN || ty == TOK_CONTROL || ty == TOK_USER_DEFINED;
}

static enum ft_status set_added(struct ft_tok *t, const struct ft_gguf_value *types) {
    int cap = 0;
    for (int id = 0; types && id < t->n_vocab; id++) {
        int64_t ty = ft_gguf_arr_i64(types, (uint64_t)id);
        if (ty < 0 || ty > TOK_BYTE)
            return ft_fail(FT_ERR_FORMAT, "%s: " KEY("token_type") "[%d] = %lld is not a token "
                           "type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, "
                           "6 byte)", t->path, id, (long long)ty);
        if (!is_added(ty)) continue;
        if (t->n_added == cap) {
            struct ft_added *a = realloc(t->added, (size_t)(cap = 2 * cap + 64) * sizeof *a);
            if (!a) return ft_fail(FT_ERR_OOM, "%s: out of memory", t->path);
            t->added = a;
        }
        t->added[t->n_added++] = (struct ft_added){.id = id, .special = ty != TOK_USER_DEFINED};
    }
    return ft_tok_build_added(t);
}

/* SentencePiece: spaces become "▁", one is put before the text (and after each added token)
 * unless add_space_prefix is false, and decoding undoes both. */
static enum ft_status set_spm(struct ft_tok *t, const struct ft_gguf_file *f) {
    enum ft_status st;
    int prefix = 1;
    if (ft_gguf_get(f, KEY("add_space_prefix")) &&
        (st = ft_gguf_get_bool(f, KEY("add_space_prefix"), &prefix)))
        return st;
    if ((prefix && (st = ft_norms_add(t, &t->norms, &t->n_norms, NORM_PREPEND, META, NULL))) ||
        (st = ft_norms_add(t, &t->norms, &t->n_norms, NORM_REPLACE, " ", META)) ||
        (st = ft_norms_add(t, &t->dec_repl, &t->n_dec_repl, NORM_REPLACE, META, " ")))
        return st;
    t->byte_fallback = t->fuse_unk = t->dec_byte_fallback = 1;
    t->strip_c = ' ';
    t->strip_n = prefix;
    return FT_OK;
}

enum ft_status ft_tok_load_gguf(const struct ft_gguf_file *f, struct ft_tok **out) {
    enum ft_status st;
    struct ft_tok *t = NULL;
    const char *model = NULL;
    const struct ft_gguf_value *tokens, *types, *merges, *scores;
    *out = NULL;
    FT_TRY(ft_tok_new(ft_gguf_label(f), &t));
    if (!ft_gguf_get(f, KEY("model"))) {
        st = ft_fail(FT_ERR_FORMAT, "%s: " KEY("model") " missing (not a GGUF with a tokenizer)",
                     t->path);
        goto fail;
    }
    FT_TRY(ft_gguf_get_str(f, KEY("model"), &model));
    int spm = !strcmp(model, "llama");
    if (!spm && strcmp(model, "gpt2")) {
        st = ft_fail(FT_ERR_UNSUPPORTED, "%s: " KEY("model") " \"%s\" is not supported "
                     "(supported: gpt2, llama)", t->path, model);
        goto fail;
    }
    FT_TRY(get_array(f, KEY("tokens"), "not a GGUF with a tokenizer", 1, 0, &tokens));
    uint64_t n = tokens->v.arr.n;
    FT_TRY(get_array(f, KEY("token_type"), NULL, 0, n, &types));
    FT_TRY(get_array(f, KEY("merges"), spm ? NULL : "gpt2 tokenizer needs merges", 1, 0, &merges));
    FT_TRY(get_array(f, KEY("scores"), spm ? "llama tokenizer needs scores: they give the merge "
                     "order" : NULL, 0, n, &scores));
    FT_TRY(set_vocab(t, tokens));
    FT_TRY(spm ? spm_merges(t, scores) : bpe_merges(t, merges));
    FT_TRY(set_added(t, types));
    int add_bos = spm;
    FT_TRY(spm ? set_spm(t, f) : set_pre(t, f, &add_bos));
    FT_TRY(ft_tok_finish(t));
    for (int id = 0; types && id < t->n_vocab; id++) /* unused ids decode to nothing */
        if (ft_gguf_arr_i64(types, (uint64_t)id) == TOK_UNUSED) t->dec_len[id] = 0;
    FT_TRY(set_specials(t, f, spm, add_bos));
    *out = t;
    return FT_OK;
fail:
    ft_tok_free(t);
    return st;
}
