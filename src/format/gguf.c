/* gguf.c — validated GGUF v2/v3 reader over an mmap or any in-memory image (gguf.h).
 * Used by the model loader (model/gguf_model.c), the tokenizer loader, tests/test_gguf.c and
 * fuzz/fuzz_gguf.c. Threading: parse/open on one thread; the parsed file is immutable and
 * may then be read from any number of threads.
 * Layout (little-endian): "GGUF" u32 version, u64 n_tensors, u64 n_kv, n_kv x {string key,
 * u32 type, value}, n_tensors x {string name, u32 n_dims, u64 ne[n_dims], u32 ggml type,
 * u64 offset}, padding to the alignment, the data section. A string is u64 len + bytes; an
 * array is u32 elem type + u64 count + elements. Every length and count is checked against
 * the bytes left before anything is allocated or read, so no read leaves the image and no
 * allocation exceeds a small multiple of its size. */
#include "format/gguf.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/file.h"
#include "core/status.h"

#define GGUF_MAX_DEPTH 8 /* nested arrays: deeper is surely hostile (stack guard) */

/* ------------------------------------------------------------------ arena */

/* Chunked bump allocator for strings and array items: pointers stay valid, one free. */
struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

struct arena {
    struct chunk *head;
};

static void *arena_alloc(struct arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof(*c) + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->mem + c->used;
    c->used += n;
    return p;
}

static void arena_free(struct arena *a) {
    for (struct chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
}

/* ------------------------------------------------------------------ file */

struct name_ix {
    const char *name;
    int64_t ix;
};

struct ft_gguf_file {
    struct ft_map map;  /* set by ft_gguf_open; empty for ft_gguf_parse */
    char *label;        /* owned */
    int version;
    uint32_t alignment;
    uint64_t data_offset;
    int64_t n_kv, n_tensors;
    struct ft_gguf_kv *kv;          /* [n_kv], file order */
    struct ft_gguf_tensor *t;       /* [n_tensors], file order */
    struct name_ix *kv_ix, *t_ix;   /* sorted by name */
    struct arena arena;             /* strings, array items */
    struct ft_gguf_file **shards;   /* split files 2..n (their tensors are merged into t) */
    int n_shards;
};

/* ------------------------------------------------------------------ reader */

struct rd {
    const uint8_t *p;
    size_t size, pos;
    const char *label;
    char what[192]; /* what is being read, for errors: "key 'a.b'", "tensor 'x'" */
    struct arena *arena;
};

static enum ft_status truncated(struct rd *r, size_t need) {
    return ft_fail(FT_ERR_FORMAT,
                   "%s: truncated GGUF: %s needs %zu bytes at offset %zu but the file has %zu "
                   "(incomplete download?)",
                   r->label, r->what, need, r->pos, r->size);
}

static enum ft_status rd_bytes(struct rd *r, size_t n, const uint8_t **out) {
    if (n > r->size - r->pos) return truncated(r, n);
    *out = r->p + r->pos;
    r->pos += n;
    return FT_OK;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static enum ft_status rd_u32(struct rd *r, uint32_t *out) {
    const uint8_t *b = NULL;
    enum ft_status st = rd_bytes(r, 4, &b);
    if (st == FT_OK) *out = (uint32_t)le(b, 4);
    return st;
}

static enum ft_status rd_u64(struct rd *r, uint64_t *out) {
    const uint8_t *b = NULL;
    enum ft_status st = rd_bytes(r, 8, &b);
    if (st == FT_OK) *out = le(b, 8);
    return st;
}

/* A GGUF string, copied NUL-terminated into the arena. */
static enum ft_status rd_str(struct rd *r, const char **s, uint64_t *len) {
    uint64_t n;
    enum ft_status st = rd_u64(r, &n);
    if (st != FT_OK) return st;
    if (n > r->size - r->pos)
        return ft_fail(FT_ERR_FORMAT,
                       "%s: %s: string length %" PRIu64 " at offset %zu runs past the end of "
                       "the file (%zu bytes; corrupt or truncated)",
                       r->label, r->what, n, r->pos - 8, r->size);
    char *c = arena_alloc(r->arena, (size_t)n + 1);
    if (!c) return ft_fail(FT_ERR_OOM, "%s: %s: out of memory", r->label, r->what);
    memcpy(c, r->p + r->pos, (size_t)n);
    c[n] = 0;
    r->pos += (size_t)n;
    *s = c;
    *len = n;
    return FT_OK;
}

/* A key or tensor name: a string that can be looked up with a C string. */
static enum ft_status rd_name(struct rd *r, const char **s) {
    uint64_t len;
    enum ft_status st = rd_str(r, s, &len);
    if (st != FT_OK) return st;
    if (strlen(*s) != len)
        return ft_fail(FT_ERR_FORMAT, "%s: %s: name contains a NUL byte", r->label, r->what);
    return FT_OK;
}

static size_t scalar_size(enum ft_gguf_type t) {
    switch (t) {
    case FT_GGUF_UINT8: case FT_GGUF_INT8: case FT_GGUF_BOOL: return 1;
    case FT_GGUF_UINT16: case FT_GGUF_INT16: return 2;
    case FT_GGUF_UINT32: case FT_GGUF_INT32: case FT_GGUF_FLOAT32: return 4;
    case FT_GGUF_UINT64: case FT_GGUF_INT64: case FT_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static const char *k_type_names[FT_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64"};

const char *ft_gguf_type_name(enum ft_gguf_type t) {
    return (unsigned)t < FT_GGUF_TYPE_COUNT ? k_type_names[t] : "?";
}

/* Decodes one scalar of type t at b into v. */
static void decode_scalar(enum ft_gguf_type t, const uint8_t *b, struct ft_gguf_value *v) {
    v->type = t;
    uint64_t u = le(b, (int)scalar_size(t));
    switch (t) {
    case FT_GGUF_INT8: v->v.i = (int8_t)u; break;
    case FT_GGUF_INT16: v->v.i = (int16_t)u; break;
    case FT_GGUF_INT32: v->v.i = (int32_t)u; break;
    case FT_GGUF_INT64: v->v.i = (int64_t)u; break;
    case FT_GGUF_FLOAT32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        v->v.f = f;
        break;
    }
    case FT_GGUF_FLOAT64: memcpy(&v->v.f, &u, 8); break;
    case FT_GGUF_BOOL: v->v.u = u != 0; break;
    default: v->v.u = u; break;
    }
}

static enum ft_status check_type(struct rd *r, uint32_t t, const char *role) {
    if (t >= FT_GGUF_TYPE_COUNT)
        return ft_fail(FT_ERR_FORMAT,
                       "%s: %s: unknown %s type %" PRIu32 " at offset %zu (valid: 0..12; "
                       "a newer GGUF revision or a corrupt file)",
                       r->label, r->what, role, t, r->pos - 4);
    return FT_OK;
}

static enum ft_status rd_value(struct rd *r, enum ft_gguf_type t, struct ft_gguf_value *v,
                               int depth) {
    enum ft_status st = FT_OK;
    const uint8_t *b = NULL;
    v->type = t;
    if (t == FT_GGUF_STRING) return rd_str(r, &v->v.str.s, &v->v.str.len);
    if (t != FT_GGUF_ARRAY) {
        FT_TRY(rd_bytes(r, scalar_size(t), &b));
        decode_scalar(t, b, v);
        return FT_OK;
    }
    if (depth >= GGUF_MAX_DEPTH)
        return ft_fail(FT_ERR_FORMAT, "%s: %s: arrays nested deeper than %d", r->label, r->what,
                       GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    FT_TRY(rd_u32(r, &et));
    FT_TRY(check_type(r, et, "array element"));
    FT_TRY(rd_u64(r, &n));
    v->v.arr.elem_type = (enum ft_gguf_type)et;
    v->v.arr.n = n;
    v->v.arr.raw = NULL;
    v->v.arr.items = NULL;
    const size_t left = r->size - r->pos;
    /* the least bytes one element can take: its scalar size, a string's length, an array's
     * type + count */
    size_t min = scalar_size((enum ft_gguf_type)et);
    if (et == FT_GGUF_STRING) min = 8;
    if (et == FT_GGUF_ARRAY) min = 12;
    if (n > left / min)
        return ft_fail(FT_ERR_FORMAT,
                       "%s: %s: array count %" PRIu64 " of %s at offset %zu cannot fit in the "
                       "%zu bytes left (corrupt or truncated file)",
                       r->label, r->what, n, ft_gguf_type_name((enum ft_gguf_type)et),
                       r->pos - 8, left);
    if (et != FT_GGUF_STRING && et != FT_GGUF_ARRAY) {
        FT_TRY(rd_bytes(r, (size_t)n * min, &b));
        v->v.arr.raw = b;
        return FT_OK;
    }
    struct ft_gguf_value *items = arena_alloc(r->arena, (size_t)(n ? n : 1) * sizeof(*items));
    if (!items) return ft_fail(FT_ERR_OOM, "%s: %s: out of memory", r->label, r->what);
    for (uint64_t i = 0; i < n; i++) FT_TRY(rd_value(r, (enum ft_gguf_type)et, &items[i], depth + 1));
    v->v.arr.items = items;
    return FT_OK;
fail:
    return st;
}

/* ------------------------------------------------------------------ lookup */

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const struct name_ix *)a)->name, ((const struct name_ix *)b)->name);
}

static int64_t find_ix(const struct name_ix *ix, int64_t n, const char *name) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ix[mid].name, name);
        if (c == 0) return ix[mid].ix;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* Builds a sorted index; the name of the first duplicate goes to *dup. */
static struct name_ix *build_ix(int64_t n, const char *(*name_of)(const struct ft_gguf_file *, int64_t),
                                const struct ft_gguf_file *f, const char **dup) {
    struct name_ix *ix = malloc((size_t)(n ? n : 1) * sizeof(*ix));
    if (!ix) return NULL;
    for (int64_t i = 0; i < n; i++) {
        ix[i].name = name_of(f, i);
        ix[i].ix = i;
    }
    qsort(ix, (size_t)n, sizeof(*ix), cmp_name);
    *dup = NULL;
    for (int64_t i = 1; i < n && !*dup; i++)
        if (strcmp(ix[i - 1].name, ix[i].name) == 0) *dup = ix[i].name;
    return ix;
}

static const char *kv_name(const struct ft_gguf_file *f, int64_t i) { return f->kv[i].key; }
static const char *t_name(const struct ft_gguf_file *f, int64_t i) { return f->t[i].name; }

/* ------------------------------------------------------------------ parse */

static int cmp_offset(const void *a, const void *b) {
    const struct ft_gguf_tensor *x = *(const struct ft_gguf_tensor *const *)a;
    const struct ft_gguf_tensor *y = *(const struct ft_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static enum ft_status parse_tensor_info(struct rd *r, struct ft_gguf_tensor *t, int64_t i) {
    enum ft_status st;
    snprintf(r->what, sizeof(r->what), "tensor info #%" PRId64, i);
    FT_TRY(rd_name(r, &t->name));
    snprintf(r->what, sizeof(r->what), "tensor '%.120s'", t->name);
    uint32_t n_dims, type;
    FT_TRY(rd_u32(r, &n_dims));
    if (n_dims < 1 || n_dims > FT_GGUF_MAX_DIMS)
        return ft_fail(FT_ERR_FORMAT, "%s: %s: %" PRIu32 " dimensions (GGUF allows 1..%d)",
                       r->label, r->what, n_dims, FT_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    int64_t n_elems = 1;
    for (int d = 0; d < FT_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne;
        FT_TRY(rd_u64(r, &ne));
        if (ne > (uint64_t)INT64_MAX || (ne && (uint64_t)n_elems > (uint64_t)INT64_MAX / ne))
            return ft_fail(FT_ERR_FORMAT,
                           "%s: %s: dimension %" PRIu32 " = %" PRIu64 " overflows the element "
                           "count", r->label, r->what, d, ne);
        t->ne[d] = (int64_t)ne;
        n_elems *= (int64_t)ne;
    }
    t->n_elems = n_elems;
    FT_TRY(rd_u32(r, &type));
    const int blck = ft_ggml_block_size((int)type);
    if (!blck)
        return ft_fail(FT_ERR_FORMAT,
                       "%s: %s: unknown ggml type %" PRIu32 " (a newer or removed quantisation; "
                       "re-quantise with a supported type such as Q4_K)", r->label, r->what, type);
    t->type = (int)type;
    if (t->ne[0] % blck)
        return ft_fail(FT_ERR_FORMAT,
                       "%s: %s: row length %" PRId64 " is not a multiple of the %s block size %d",
                       r->label, r->what, t->ne[0], ft_ggml_type_name(t->type), blck);
    /* n_elems / blck * type_size <= INT64_MAX / 32 * 256ish: check against SIZE_MAX properly */
    const uint64_t nb = (uint64_t)(n_elems / blck), bs = ft_ggml_type_size(t->type);
    if (nb > SIZE_MAX / bs)
        return ft_fail(FT_ERR_FORMAT, "%s: %s: byte size overflows", r->label, r->what);
    t->n_bytes = (size_t)(nb * bs);
    FT_TRY(rd_u64(r, &t->offset));
    return FT_OK;
fail:
    return st;
}

enum ft_status ft_gguf_parse(const void *buf, size_t size, const char *label,
                             struct ft_gguf_file **out) {
    enum ft_status st = FT_OK;
    *out = NULL;
    const char *lb = label ? label : "(gguf)";
    struct ft_gguf_file *f = calloc(1, sizeof(*f));
    struct ft_gguf_tensor **by_off = NULL;
    if (!f || !(f->label = strdup(lb))) {
        free(f);
        return ft_fail(FT_ERR_OOM, "%s: out of memory", lb);
    }
    struct rd r = {.p = buf, .size = buf ? size : 0, .label = f->label, .arena = &f->arena};
    const uint8_t *b = NULL;
    uint32_t version;
    uint64_t n_tensors, n_kv;

    snprintf(r.what, sizeof(r.what), "the header");
    FT_TRY(rd_bytes(&r, 4, &b));
    if (memcmp(b, "GGUF", 4) != 0) {
        st = ft_fail(FT_ERR_FORMAT,
                     "%s: not a GGUF file (magic %02x %02x %02x %02x, expected \"GGUF\")",
                     r.label, b[0], b[1], b[2], b[3]);
        goto fail;
    }
    FT_TRY(rd_u32(&r, &version));
    if (version != 2 && version != 3) {
        if (version == 1)
            st = ft_fail(FT_ERR_UNSUPPORTED,
                         "%s: GGUF version 1 (32-bit counts) is not supported; re-convert the "
                         "model with a current llama.cpp", r.label);
        else if ((version & 0xffff) == 0 && (version >> 16) != 0)
            st = ft_fail(FT_ERR_UNSUPPORTED,
                         "%s: GGUF version field 0x%08" PRIx32 " looks byte-swapped: big-endian "
                         "GGUF files are not supported (use the little-endian file)",
                         r.label, version);
        else
            st = ft_fail(FT_ERR_FORMAT, "%s: unsupported GGUF version %" PRIu32 " (2 or 3 expected)",
                         r.label, version);
        goto fail;
    }
    f->version = (int)version;
    FT_TRY(rd_u64(&r, &n_tensors));
    FT_TRY(rd_u64(&r, &n_kv));
    /* a kv takes >= 13 bytes (key length, type, 1-byte value); a tensor info >= 32 */
    if (n_kv > (r.size - r.pos) / 13 || n_tensors > (r.size - r.pos) / 32) {
        st = ft_fail(FT_ERR_FORMAT,
                     "%s: header counts (%" PRIu64 " tensors, %" PRIu64 " metadata keys) cannot "
                     "fit in a %zu-byte file (corrupt or truncated)",
                     r.label, n_tensors, n_kv, r.size);
        goto fail;
    }
    f->n_kv = (int64_t)n_kv;
    f->n_tensors = (int64_t)n_tensors;
    f->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof(*f->kv));
    f->t = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof(*f->t));
    if (!f->kv || !f->t) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", r.label);
        goto fail;
    }

    f->alignment = FT_GGUF_DEFAULT_ALIGNMENT;
    for (int64_t i = 0; i < f->n_kv; i++) {
        struct ft_gguf_kv *kv = &f->kv[i];
        uint32_t type;
        snprintf(r.what, sizeof(r.what), "metadata key #%" PRId64, i);
        FT_TRY(rd_name(&r, &kv->key));
        snprintf(r.what, sizeof(r.what), "key '%.120s'", kv->key);
        FT_TRY(rd_u32(&r, &type));
        FT_TRY(check_type(&r, type, "value"));
        FT_TRY(rd_value(&r, (enum ft_gguf_type)type, &kv->val, 0));
    }
    const char *dup;
    f->kv_ix = build_ix(f->n_kv, kv_name, f, &dup);
    if (!f->kv_ix) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", r.label);
        goto fail;
    }
    if (dup) {
        st = ft_fail(FT_ERR_FORMAT, "%s: metadata key '%.120s' appears twice", r.label, dup);
        goto fail;
    }
    const struct ft_gguf_value *al = ft_gguf_get(f, "general.alignment");
    if (al) {
        if (al->type != FT_GGUF_UINT32 || al->v.u == 0 || (al->v.u & (al->v.u - 1))) {
            st = ft_fail(FT_ERR_FORMAT,
                         "%s: key 'general.alignment' must be a uint32 power of two (is %s %" PRIu64 ")",
                         r.label, ft_gguf_type_name(al->type),
                         scalar_size(al->type) ? al->v.u : 0);
            goto fail;
        }
        f->alignment = (uint32_t)al->v.u;
    }

    for (int64_t i = 0; i < f->n_tensors; i++) FT_TRY(parse_tensor_info(&r, &f->t[i], i));
    f->t_ix = build_ix(f->n_tensors, t_name, f, &dup);
    if (!f->t_ix) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", r.label);
        goto fail;
    }
    if (dup) {
        st = ft_fail(FT_ERR_FORMAT, "%s: tensor '%.120s' appears twice", r.label, dup);
        goto fail;
    }

    /* data section: aligned end of the tensor infos (r.pos <= size, so no overflow) */
    f->data_offset = ((uint64_t)r.pos + f->alignment - 1) / f->alignment * f->alignment;
    if (f->n_tensors && f->data_offset > r.size) {
        st = ft_fail(FT_ERR_FORMAT,
                     "%s: the tensor data section (offset %" PRIu64 ") starts past the end of "
                     "the file (%zu bytes; truncated download?)", r.label, f->data_offset, r.size);
        goto fail;
    }
    const uint64_t data_size = f->data_offset <= r.size ? r.size - f->data_offset : 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        struct ft_gguf_tensor *t = &f->t[i];
        if (t->offset % f->alignment) {
            st = ft_fail(FT_ERR_FORMAT,
                         "%s: tensor '%.120s': data offset %" PRIu64 " is not a multiple of the "
                         "alignment %" PRIu32, r.label, t->name, t->offset, f->alignment);
            goto fail;
        }
        if (t->offset > data_size || t->n_bytes > data_size - t->offset) {
            st = ft_fail(FT_ERR_FORMAT,
                         "%s: tensor '%.120s': data [%" PRIu64 ", +%zu) at file offset %" PRIu64
                         " runs past the end of the file (%zu bytes; truncated download?)",
                         r.label, t->name, t->offset, t->n_bytes, f->data_offset, r.size);
            goto fail;
        }
        t->data = r.p + f->data_offset + t->offset;
    }
    by_off = malloc((size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof(*by_off));
    if (!by_off) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", r.label);
        goto fail;
    }
    for (int64_t i = 0; i < f->n_tensors; i++) by_off[i] = &f->t[i];
    qsort(by_off, (size_t)f->n_tensors, sizeof(*by_off), cmp_offset);
    for (int64_t i = 1; i < f->n_tensors; i++) {
        const struct ft_gguf_tensor *a = by_off[i - 1], *c = by_off[i];
        if (a->n_bytes && c->n_bytes && a->offset + a->n_bytes > c->offset) {
            st = ft_fail(FT_ERR_FORMAT,
                         "%s: tensors '%.120s' [%" PRIu64 ", +%zu) and '%.120s' [%" PRIu64
                         ", +%zu) overlap", r.label, a->name, a->offset, a->n_bytes, c->name,
                         c->offset, c->n_bytes);
            goto fail;
        }
    }
    free(by_off);
    *out = f;
    return FT_OK;
fail:
    free(by_off);
    ft_gguf_close(f);
    return st;
}

static enum ft_status open_one(const char *path, struct ft_gguf_file **out) {
    enum ft_status st;
    struct ft_map m = {0};
    *out = NULL;
    FT_TRY(ft_file_map(path, &m));
    FT_TRY(ft_gguf_parse(m.data, m.size, path, out));
    (*out)->map = m;
    return FT_OK;
fail:
    ft_file_unmap(&m);
    return st;
}

/* "NAME-00001-of-00003.gguf": the offset of the shard number "00001" in path, or -1. */
static long shard_digits(const char *path) {
    size_t n = strlen(path);
    if (n < 21) return -1;
    const char *p = path + n - 20; /* "-NNNNN-of-NNNNN.gguf" */
    if (p[0] != '-' || strncmp(p + 6, "-of-", 4) || strcasecmp(p + 15, ".gguf")) return -1;
    for (int i = 0; i < 5; i++)
        if (p[1 + i] < '0' || p[1 + i] > '9' || p[10 + i] < '0' || p[10 + i] > '9') return -1;
    return (long)(p + 1 - path);
}

/* A split model (llama.cpp's gguf-split: split.count files, the first with every key): opens
 * the other shards and merges their tensors into f, so callers see one file. */
static enum ft_status merge_shards(struct ft_gguf_file *f, const char *path) {
    uint64_t count = 0, no = 0, total = 0;
    if (!ft_gguf_get(f, "split.count")) return FT_OK;
    enum ft_status st = ft_gguf_get_u64(f, "split.count", &count);
    if (st == FT_OK && count <= 1) return FT_OK;
    if (st == FT_OK) st = ft_gguf_get_u64(f, "split.no", &no);
    if (st == FT_OK) st = ft_gguf_get_u64(f, "split.tensors.count", &total);
    if (st != FT_OK) return st;
    long at = shard_digits(path);
    if (no != 0 || at < 0 || count > 9999)
        return ft_fail(FT_ERR_INVALID_ARG, "%s: shard %llu of a %llu-file split model; open the first "
                       "one (NAME-00001-of-%05llu.gguf)", path, (unsigned long long)no + 1,
                       (unsigned long long)count, (unsigned long long)count);
    f->shards = calloc((size_t)count, sizeof *f->shards);
    if (!f->shards) return ft_fail(FT_ERR_OOM, "%s: out of memory", path);
    char sp[4096];
    snprintf(sp, sizeof sp, "%s", path);
    for (uint64_t i = 1; i < count; i++) {
        char num[24];
        snprintf(num, sizeof num, "%05llu", (unsigned long long)i + 1);
        memcpy(sp + at, num, 5);
        struct ft_gguf_file *s = NULL;
        FT_TRY(open_one(sp, &s));
        f->shards[f->n_shards++] = s;
        uint64_t sno = 0;
        if (ft_gguf_get_u64(s, "split.no", &sno) != FT_OK || sno != i)
            return ft_fail(FT_ERR_FORMAT, "%s: split.no is not %llu (a shard of another model?)",
                           sp, (unsigned long long)i);
        struct ft_gguf_tensor *t = realloc(f->t, (size_t)(f->n_tensors + s->n_tensors) * sizeof *t);
        if (!t) return ft_fail(FT_ERR_OOM, "%s: out of memory", sp);
        f->t = t;
        memcpy(f->t + f->n_tensors, s->t, (size_t)s->n_tensors * sizeof *t);
        f->n_tensors += s->n_tensors;
    }
    if ((uint64_t)f->n_tensors != total)
        return ft_fail(FT_ERR_FORMAT, "%s: the %llu shards hold %lld tensors, split.tensors.count "
                       "says %llu (a shard missing or from another model?)", path,
                       (unsigned long long)count, (long long)f->n_tensors, (unsigned long long)total);
    const char *dup;
    free(f->t_ix);
    f->t_ix = build_ix(f->n_tensors, t_name, f, &dup);
    if (!f->t_ix) return ft_fail(FT_ERR_OOM, "%s: out of memory", path);
    if (dup) return ft_fail(FT_ERR_FORMAT, "%s: tensor '%.120s' appears in two shards", path, dup);
    return FT_OK;
fail:
    return st;
}

enum ft_status ft_gguf_open(const char *path, struct ft_gguf_file **out) {
    enum ft_status st = open_one(path, out);
    if (st == FT_OK && (st = merge_shards(*out, path)) != FT_OK) {
        ft_gguf_close(*out);
        *out = NULL;
    }
    return st;
}

static int has_gguf_suffix(const char *name) {
    size_t n = strlen(name);
    return n > 5 && strcasecmp(name + n - 5, ".gguf") == 0;
}

int ft_gguf_model_path(const char *path, char *out, size_t cap) {
    struct stat sb;
    if (!path) return 0;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) { /* a missing x.gguf: opening it says so */
        if (!has_gguf_suffix(path)) return 0;
        snprintf(out, cap, "%s", path);
        return 1;
    }
    char cfg[4096];
    if (!S_ISDIR(sb.st_mode) || ft_file_exists(ft_path_join(cfg, sizeof cfg, path, "config.json")))
        return 0; /* a Hugging Face checkpoint directory wins over stray .gguf files */
    DIR *d = opendir(path);
    if (!d) return 0;
    int n = 0, n_first = 0;
    char first[1024] = "", second[1024] = "", shard1[1024] = "";
    for (struct dirent *e; (e = readdir(d));) {
        if (!has_gguf_suffix(e->d_name)) continue;
        snprintf(n ? second : first, sizeof first, "%s", e->d_name);
        n++;
        long at = shard_digits(e->d_name); /* a split model: its first shard opens the rest */
        if (at >= 0 && !strncmp(e->d_name + at, "00001", 5)) {
            snprintf(shard1, sizeof shard1, "%s", e->d_name);
            n_first++;
        }
    }
    closedir(d);
    if (n == 0) return 0;
    if (n > 1 && n_first == 1) {
        ft_path_join(out, cap, path, shard1);
        return 1;
    }
    if (n > 1) {
        ft_fail(FT_ERR_INVALID_ARG, "%s: holds %d .gguf files (%s, %s, ...); pass the one to "
                "load: --model %s/%s", path, n, first, second, path, first);
        return -1;
    }
    ft_path_join(out, cap, path, first);
    return 1;
}

void ft_gguf_close(struct ft_gguf_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_shards; i++) ft_gguf_close(f->shards[i]);
    free(f->shards);
    arena_free(&f->arena);
    free(f->kv);
    free(f->t);
    free(f->kv_ix);
    free(f->t_ix);
    free(f->label);
    if (f->map.data) ft_file_unmap(&f->map);
    free(f);
}

/* ------------------------------------------------------------------ accessors */

int ft_gguf_version(const struct ft_gguf_file *f) { return f->version; }
const char *ft_gguf_label(const struct ft_gguf_file *f) { return f->label; }
uint32_t ft_gguf_alignment(const struct ft_gguf_file *f) { return f->alignment; }
uint64_t ft_gguf_data_offset(const struct ft_gguf_file *f) { return f->data_offset; }
int64_t ft_gguf_kv_count(const struct ft_gguf_file *f) { return f->n_kv; }
int64_t ft_gguf_tensor_count(const struct ft_gguf_file *f) { return f->n_tensors; }

const struct ft_gguf_kv *ft_gguf_kv_at(const struct ft_gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_kv ? &f->kv[i] : NULL;
}

const struct ft_gguf_tensor *ft_gguf_tensor_at(const struct ft_gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_tensors ? &f->t[i] : NULL;
}

const struct ft_gguf_value *ft_gguf_get(const struct ft_gguf_file *f, const char *key) {
    int64_t i = find_ix(f->kv_ix, f->n_kv, key);
    return i < 0 ? NULL : &f->kv[i].val;
}

const struct ft_gguf_tensor *ft_gguf_find(const struct ft_gguf_file *f, const char *name) {
    int64_t i = find_ix(f->t_ix, f->n_tensors, name);
    return i < 0 ? NULL : &f->t[i];
}

static int is_signed(enum ft_gguf_type t) {
    return t == FT_GGUF_INT8 || t == FT_GGUF_INT16 || t == FT_GGUF_INT32 || t == FT_GGUF_INT64;
}
static int is_unsigned(enum ft_gguf_type t) {
    return t == FT_GGUF_UINT8 || t == FT_GGUF_UINT16 || t == FT_GGUF_UINT32 || t == FT_GGUF_UINT64;
}

static enum ft_status want(const struct ft_gguf_file *f, const char *key,
                           const struct ft_gguf_value **v, const char *kind) {
    *v = ft_gguf_get(f, key);
    if (!*v)
        return ft_fail(FT_ERR_FORMAT, "%s: metadata key '%s' (%s) is missing", f->label, key,
                       kind);
    return FT_OK;
}

static enum ft_status wrong(const struct ft_gguf_file *f, const char *key,
                            const struct ft_gguf_value *v, const char *kind) {
    return ft_fail(FT_ERR_FORMAT, "%s: metadata key '%s' is %s, expected %s", f->label, key,
                   ft_gguf_type_name(v->type), kind);
}

enum ft_status ft_gguf_get_u64(const struct ft_gguf_file *f, const char *key, uint64_t *out) {
    const struct ft_gguf_value *v;
    enum ft_status st = want(f, key, &v, "an unsigned integer");
    if (st) return st;
    if (is_unsigned(v->type)) *out = v->v.u;
    else if (is_signed(v->type) && v->v.i >= 0) *out = (uint64_t)v->v.i;
    else return wrong(f, key, v, "a non-negative integer");
    return FT_OK;
}

enum ft_status ft_gguf_get_i64(const struct ft_gguf_file *f, const char *key, int64_t *out) {
    const struct ft_gguf_value *v;
    enum ft_status st = want(f, key, &v, "an integer");
    if (st) return st;
    if (is_signed(v->type)) *out = v->v.i;
    else if (is_unsigned(v->type) && v->v.u <= (uint64_t)INT64_MAX) *out = (int64_t)v->v.u;
    else return wrong(f, key, v, "an integer that fits in int64");
    return FT_OK;
}

enum ft_status ft_gguf_get_f64(const struct ft_gguf_file *f, const char *key, double *out) {
    const struct ft_gguf_value *v;
    enum ft_status st = want(f, key, &v, "a float");
    if (st) return st;
    if (v->type != FT_GGUF_FLOAT32 && v->type != FT_GGUF_FLOAT64)
        return wrong(f, key, v, "float32 or float64");
    *out = v->v.f;
    return FT_OK;
}

enum ft_status ft_gguf_get_bool(const struct ft_gguf_file *f, const char *key, int *out) {
    const struct ft_gguf_value *v;
    enum ft_status st = want(f, key, &v, "a bool");
    if (st) return st;
    if (v->type != FT_GGUF_BOOL) return wrong(f, key, v, "bool");
    *out = (int)v->v.u;
    return FT_OK;
}

enum ft_status ft_gguf_get_str(const struct ft_gguf_file *f, const char *key, const char **out) {
    const struct ft_gguf_value *v;
    enum ft_status st = want(f, key, &v, "a string");
    if (st) return st;
    if (v->type != FT_GGUF_STRING) return wrong(f, key, v, "string");
    *out = v->v.str.s;
    return FT_OK;
}

static struct ft_gguf_value arr_elem(const struct ft_gguf_value *a, uint64_t i) {
    FT_ASSERT(a->type == FT_GGUF_ARRAY && a->v.arr.raw && i < a->v.arr.n);
    const size_t es = scalar_size(a->v.arr.elem_type);
    struct ft_gguf_value e;
    decode_scalar(a->v.arr.elem_type, (const uint8_t *)a->v.arr.raw + i * es, &e);
    return e;
}

uint64_t ft_gguf_arr_u64(const struct ft_gguf_value *a, uint64_t i) {
    struct ft_gguf_value e = arr_elem(a, i);
    if (is_signed(e.type)) return (uint64_t)e.v.i;
    if (e.type == FT_GGUF_FLOAT32 || e.type == FT_GGUF_FLOAT64)
        return e.v.f >= 0 && e.v.f < 18446744073709551616.0 ? (uint64_t)e.v.f : 0;
    return e.v.u;
}

int64_t ft_gguf_arr_i64(const struct ft_gguf_value *a, uint64_t i) {
    struct ft_gguf_value e = arr_elem(a, i);
    if (is_signed(e.type)) return e.v.i;
    if (e.type == FT_GGUF_FLOAT32 || e.type == FT_GGUF_FLOAT64)
        return e.v.f >= -9223372036854775808.0 && e.v.f < 9223372036854775808.0 ? (int64_t)e.v.f
                                                                                  : 0;
    return (int64_t)e.v.u;
}

double ft_gguf_arr_f64(const struct ft_gguf_value *a, uint64_t i) {
    struct ft_gguf_value e = arr_elem(a, i);
    if (is_signed(e.type)) return (double)e.v.i;
    if (e.type == FT_GGUF_FLOAT32 || e.type == FT_GGUF_FLOAT64) return e.v.f;
    return (double)e.v.u;
}
