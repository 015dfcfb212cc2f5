/* safetensors.c — validated safetensors reader (over an mmap or any in-memory image), the
 * checkpoint "set" (model.safetensors or index.json + shards) and a writer.
 * Called by the model loaders, `ft inspect`, the tests and fuzz/fuzz_safetensors.c.
 * Threading: open/parse/write on one thread; a parsed file or set is immutable afterwards and
 * may be read from any number of threads. Every byte of the header is treated as hostile:
 * no read ever leaves [buf, buf+size). */
#define _GNU_SOURCE
#include "format/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/status.h"

#define ST_MAX_HEADER (100u * 1024u * 1024u) /* the Rust/Python reader's limit too */

struct ft_st_file {
    struct ft_map map;          /* set when opened from a path; empty for ft_st_parse */
    char *label;                /* path or caller's label, owned */
    int n;
    struct ft_st_tensor *t;     /* [n], ordered by data offset */
    int *by_name;               /* [n] indices into t, sorted by name */
    char *names;                /* storage for every t[i].name */
};

struct ft_st_set {
    int n_files;
    struct ft_st_file **files;  /* [n_files] */
    int n;
    const struct ft_st_tensor **t;  /* [n] pointers into the files, file order then offset */
    int *by_name;                   /* [n] sorted by name */
    unsigned char *used;            /* [n]: 1 once ft_st_set_find returned it (loader bookkeeping) */
};

/* ------------------------------------------------------------------ helpers */

/* "F32, F16, ..." into buf (per call: no shared static state). */
static const char *dtype_list(char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < FT_DTYPE_COUNT && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? ", " : "",
                              ft_dtype_name((enum ft_dtype)i));
    return buf;
}

static int64_t rd_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return (int64_t)v;
}

/* Name sort for the lookup index. qsort has no context argument in C11: a file-local
 * pointer would not be thread-safe, so we sort pointers to names instead. */
struct name_ix {
    const char *name;
    int ix;
};

static int cmp_name_ix(const void *a, const void *b) {
    return strcmp(((const struct name_ix *)a)->name, ((const struct name_ix *)b)->name);
}

/* Builds by_name[n] (indices sorted by name); *dup gets the index of a duplicated name
 * or -1. Returns 0, or -1 on OOM. */
static int build_name_index(const struct ft_st_tensor *const *t, int n, int *by_name, int *dup_a,
                            int *dup_b) {
    *dup_a = *dup_b = -1;
    struct name_ix *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return -1;
    for (int i = 0; i < n; i++) v[i] = (struct name_ix){t[i]->name, i};
    qsort(v, (size_t)n, sizeof *v, cmp_name_ix);
    for (int i = 0; i < n; i++) {
        by_name[i] = v[i].ix;
        if (i && *dup_a < 0 && strcmp(v[i - 1].name, v[i].name) == 0) {
            *dup_a = v[i - 1].ix;
            *dup_b = v[i].ix;
        }
    }
    free(v);
    return 0;
}

static int find_by_name(const struct ft_st_tensor *const *t, const int *by_name, int n,
                        const char *name) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(t[by_name[mid]]->name, name);
        if (c == 0) return by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* ------------------------------------------------------------------ parse */

struct entry {
    int64_t begin, end;
    int ix; /* index in parse order */
};

static int cmp_entry(const void *a, const void *b) {
    const struct entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->ix - y->ix;
}

/* Validates one header entry into *t (name and data set by the caller). */
static enum ft_status parse_entry(const char *label, const char *name, json_t *v,
                                  uint64_t data_size, struct ft_st_tensor *t, struct entry *e) {
    if (!json_is_object(v))
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': header entry is not a JSON object",
                       label, name);
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': 'dtype' %s", label, name,
                       jd ? "is not a string" : "is missing");
    if (ft_dtype_parse(json_string_value(jd), &t->dtype) != 0) {
        char list[256];
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s' (supported: %s)",
                       label, name, json_string_value(jd), dtype_list(list, sizeof list));
    }
    if (!json_is_array(js))
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': 'shape' %s", label, name,
                       js ? "is not an array" : "is missing");
    size_t nd = json_array_size(js);
    if (nd > FT_MAX_DIMS)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': shape has %zu dims (at most %d supported)",
                       label, name, nd, FT_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t n_el = 1;
    int overflow = 0;
    for (size_t d = 0; d < nd; d++) {
        json_t *x = json_array_get(js, d);
        if (!json_is_integer(x))
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not an integer", label,
                           name, d);
        json_int_t dim = json_integer_value(x);
        if (dim < 0)
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': shape[%zu] = %lld is negative", label,
                           name, d, (long long)dim);
        t->shape[d] = dim;
        if (dim != 0 && n_el > UINT64_MAX / (uint64_t)dim) overflow = 1;
        else n_el *= (uint64_t)dim;
    }
    for (size_t d = nd; d < FT_MAX_DIMS; d++) t->shape[d] = 0;
    /* A zero dim makes the product 0 whatever overflowed before it. */
    for (size_t d = 0; d < nd; d++)
        if (t->shape[d] == 0) overflow = 0, n_el = 0;
    uint64_t es = ft_dtype_size(t->dtype);
    if (overflow || (n_el && n_el > UINT64_MAX / es) || n_el * es > (uint64_t)INT64_MAX)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': shape element count overflows", label,
                       name);
    uint64_t want = n_el * es;
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)))
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' %s", label, name,
                       jo ? "is not an array of two integers [begin, end]" : "is missing");
    json_int_t b = json_integer_value(json_array_get(jo, 0));
    json_int_t en = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || en < 0)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] are negative",
                       label, name, (long long)b, (long long)en);
    if (en < b)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s': data_offsets end %lld < begin %lld",
                       label, name, (long long)en, (long long)b);
    if ((uint64_t)(en - b) != want)
        return ft_fail(FT_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets span %lld bytes but %s shape needs %llu",
                       label, name, (long long)(en - b), ft_dtype_name(t->dtype),
                       (unsigned long long)want);
    if ((uint64_t)en > data_size)
        return ft_fail(FT_ERR_FORMAT,
                       "%s: tensor '%s': offsets past end of file (end %lld > data size %llu): "
                       "truncated?",
                       label, name, (long long)en, (unsigned long long)data_size);
    t->n_bytes = (size_t)want;
    e->begin = b;
    e->end = en;
    return FT_OK;
}

enum ft_status ft_st_parse(const void *buf, size_t size, const char *label,
                           struct ft_st_file **out) {
    enum ft_status st = FT_OK;
    struct ft_st_file *f = NULL;
    json_t *root = NULL;
    struct entry *ents = NULL;
    struct ft_st_tensor *tmp = NULL;
    const struct ft_st_tensor **ptrs = NULL;
    *out = NULL;
    if (!label) label = "(safetensors)";
    const unsigned char *p = buf;
    if (size < 8)
        return ft_fail(FT_ERR_FORMAT, "%s: file is %zu bytes, too small for a safetensors header",
                       label, size);
    int64_t hn = rd_le64(p);
    if (hn < 0 || (uint64_t)hn > ST_MAX_HEADER)
        return ft_fail(FT_ERR_FORMAT,
                       "%s: header length %llu is implausible (> 100 MB): not a safetensors file?",
                       label, (unsigned long long)hn);
    if ((uint64_t)hn > size - 8)
        return ft_fail(FT_ERR_FORMAT,
                       "%s: header length %lld past end of file (size %zu): truncated file?",
                       label, (long long)hn, size);
    const unsigned char *data = p + 8 + hn;
    uint64_t data_size = size - 8 - (uint64_t)hn;

    json_error_t jerr;
    root = json_loadb((const char *)p + 8, (size_t)hn, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        /* jansson says: duplicate object key near '"NAME"' */
        const char *q = strstr(jerr.text, "duplicate");
        if (q) {
            const char *a = strstr(q, "'\""), *b = a ? strstr(a + 2, "\"'") : NULL;
            int len = a && b ? (int)(b - a - 2) : 0;
            return ft_fail(FT_ERR_FORMAT, "%s: duplicate key '%.*s' in the header (each tensor name must appear once)", label,
                           len, a && b ? a + 2 : "");
        }
        return ft_fail(FT_ERR_FORMAT, "%s: header is not valid JSON: %s (at byte %d)", label,
                       jerr.text, jerr.position);
    }
    if (!json_is_object(root)) {
        st = ft_fail(FT_ERR_FORMAT, "%s: header is not a JSON object", label);
        goto fail;
    }

    f = calloc(1, sizeof *f);
    if (!f || !(f->label = strdup(label))) goto oom;
    size_t cap = json_object_size(root);
    size_t names_bytes = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) names_bytes += strlen(key) + 1;
    ents = malloc((cap ? cap : 1) * sizeof *ents);
    tmp = malloc((cap ? cap : 1) * sizeof *tmp);
    f->names = malloc(names_bytes ? names_bytes : 1);
    if (!ents || !tmp || !f->names) goto oom;

    int n = 0;
    char *np = f->names;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                st = ft_fail(FT_ERR_FORMAT, "%s: __metadata__ is not a JSON object", label);
                goto fail;
            }
            continue;
        }
        struct ft_st_tensor *t = &tmp[n];
        FT_TRY(parse_entry(label, key, v, data_size, t, &ents[n]));
        size_t kl = strlen(key) + 1;
        memcpy(np, key, kl);
        t->name = np;
        np += kl;
        t->file = f->label;
        t->data = data + ents[n].begin;
        ents[n].ix = n;
        n++;
    }

    /* Order by data offset; any two non-empty ranges must not overlap. */
    qsort(ents, (size_t)n, sizeof *ents, cmp_entry);
    int last = -1; /* last non-empty range */
    for (int i = 0; i < n; i++) {
        if (ents[i].end == ents[i].begin) continue;
        if (last >= 0 && ents[i].begin < ents[last].end) {
            st = ft_fail(FT_ERR_FORMAT,
                         "%s: tensors '%s' [%lld, %lld) and '%s' [%lld, %lld) overlap in the data "
                         "region",
                         label, tmp[ents[last].ix].name, (long long)ents[last].begin,
                         (long long)ents[last].end, tmp[ents[i].ix].name,
                         (long long)ents[i].begin, (long long)ents[i].end);
            goto fail;
        }
        last = i;
    }
    f->n = n;
    f->t = malloc((size_t)(n ? n : 1) * sizeof *f->t);
    f->by_name = malloc((size_t)(n ? n : 1) * sizeof *f->by_name);
    ptrs = malloc((size_t)(n ? n : 1) * sizeof *ptrs);
    if (!f->t || !f->by_name || !ptrs) goto oom;
    for (int i = 0; i < n; i++) f->t[i] = tmp[ents[i].ix];
    for (int i = 0; i < n; i++) ptrs[i] = &f->t[i];
    int da, db;
    if (build_name_index(ptrs, n, f->by_name, &da, &db) != 0) goto oom;
    if (da >= 0) { /* JSON_REJECT_DUPLICATES catches this first; kept as a guard */
        st = ft_fail(FT_ERR_FORMAT, "%s: duplicate tensor name '%s'", label, f->t[da].name);
        goto fail;
    }
    free(ptrs);
    free(ents);
    free(tmp);
    json_decref(root);
    *out = f;
    return FT_OK;
oom:
    st = ft_fail(FT_ERR_OOM, "%s: out of memory parsing the safetensors header", label);
fail:
    free(ptrs);
    free(ents);
    free(tmp);
    json_decref(root);
    ft_st_close(f);
    return st;
}

enum ft_status ft_st_open(const char *path, struct ft_st_file **out) {
    enum ft_status st;
    struct ft_map m;
    *out = NULL;
    st = ft_file_map(path, &m);
    if (st != FT_OK) return st;
    st = ft_st_parse(m.data ? m.data : "", m.size, path, out);
    if (st != FT_OK) {
        ft_file_unmap(&m);
        return st;
    }
    (*out)->map = m;
    return FT_OK;
}

void ft_st_close(struct ft_st_file *f) {
    if (!f) return;
    ft_file_unmap(&f->map);
    free(f->label);
    free(f->t);
    free(f->by_name);
    free(f->names);
    free(f);
}

int ft_st_count(const struct ft_st_file *f) { return f ? f->n : 0; }

const struct ft_st_tensor *ft_st_at(const struct ft_st_file *f, int i) {
    return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}

/* Per-file lookup: by_name indexes f->t directly. */
const struct ft_st_tensor *ft_st_find(const struct ft_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const struct ft_st_tensor *t = &f->t[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

/* ------------------------------------------------------------------ set */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Indexes the tensors of the set's files, or (no files) the n tensors at extra. */
static enum ft_status set_index(struct ft_st_set *s, const char *dir, const struct ft_st_tensor *extra,
                                int n_extra) {
    int total = n_extra;
    for (int i = 0; i < s->n_files; i++) total += s->files[i]->n;
    s->t = malloc((size_t)(total ? total : 1) * sizeof *s->t);
    s->by_name = malloc((size_t)(total ? total : 1) * sizeof *s->by_name);
    s->used = calloc((size_t)(total ? total : 1), 1);
    if (!s->t || !s->by_name || !s->used)
        return ft_fail(FT_ERR_OOM, "%s: out of memory indexing tensors", dir);
    for (int i = 0; i < s->n_files; i++)
        for (int j = 0; j < s->files[i]->n; j++) s->t[s->n++] = &s->files[i]->t[j];
    for (int j = 0; j < n_extra; j++) s->t[s->n++] = &extra[j];
    int da, db;
    if (build_name_index(s->t, s->n, s->by_name, &da, &db) != 0)
        return ft_fail(FT_ERR_OOM, "%s: out of memory indexing tensors", dir);
    if (da >= 0)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' appears in both %s and %s", dir,
                       s->t[da]->name, s->t[da]->file, s->t[db]->file);
    return FT_OK;
}

static enum ft_status set_open_index(struct ft_st_set *s, const char *dir, const char *ipath) {
    enum ft_status st = FT_OK;
    char *text = NULL;
    size_t len = 0;
    json_t *root = NULL;
    const char **shards = NULL;
    char path[4096];
    FT_TRY(ft_file_read(ipath, &text, &len));
    json_error_t jerr;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        st = ft_fail(FT_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", ipath, jerr.text,
                     jerr.line);
        goto fail;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        st = ft_fail(FT_ERR_FORMAT, "%s: 'weight_map' %s", ipath,
                     wm ? "is not a JSON object" : "is missing");
        goto fail;
    }
    size_t nw = json_object_size(wm), ns = 0;
    shards = malloc((nw ? nw : 1) * sizeof *shards);
    if (!shards) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", ipath);
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) {
            st = ft_fail(FT_ERR_FORMAT, "%s: weight_map['%s'] is not a file name string", ipath,
                         key);
            goto fail;
        }
        const char *sh = json_string_value(v);
        if (!sh[0] || strchr(sh, '/') || strchr(sh, '\\') || strstr(sh, "..")) {
            st = ft_fail(FT_ERR_FORMAT,
                         "%s: weight_map['%s'] = '%s': shard must be a plain file name in the "
                         "checkpoint directory (no '/' or '..')",
                         ipath, key, sh);
            goto fail;
        }
        shards[ns++] = sh;
    }
    qsort(shards, ns, sizeof *shards, cmp_str);
    size_t nu = 0;
    for (size_t i = 0; i < ns; i++)
        if (!nu || strcmp(shards[nu - 1], shards[i]) != 0) shards[nu++] = shards[i];
    s->files = calloc(nu ? nu : 1, sizeof *s->files);
    if (!s->files) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", ipath);
        goto fail;
    }
    for (size_t i = 0; i < nu; i++) {
        ft_path_join(path, sizeof path, dir, shards[i]);
        FT_TRY(ft_st_open(path, &s->files[s->n_files]));
        s->n_files++;
    }
    FT_TRY(set_index(s, dir, NULL, 0));
    /* Every index entry must be in the shard the index names. */
    json_object_foreach(wm, key, v) {
        const char *sh = json_string_value(v);
        const struct ft_st_file *f = NULL;
        for (int i = 0; i < s->n_files && !f; i++) {
            const char *base = strrchr(s->files[i]->label, '/');
            base = base ? base + 1 : s->files[i]->label;
            if (strcmp(base, sh) == 0) f = s->files[i];
        }
        if (!f || !ft_st_find(f, key)) {
            const struct ft_st_tensor *t = ft_st_set_find(s, key);
            st = ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' is listed in %s but missing from shard %s%s%s",
                         dir, key, "model.safetensors.index.json", sh,
                         t ? "; it is in " : "", t ? t->file : "");
            goto fail;
        }
    }
fail:
    free(shards);
    json_decref(root);
    free(text);
    return st;
}

enum ft_status ft_st_set_open(const char *dir, struct ft_st_set **out) {
    enum ft_status st = FT_OK;
    char path[4096];
    *out = NULL;
    struct ft_st_set *s = calloc(1, sizeof *s);
    if (!s) return ft_fail(FT_ERR_OOM, "%s: out of memory", dir);
    ft_path_join(path, sizeof path, dir, "model.safetensors.index.json");
    if (ft_file_exists(path)) {
        FT_TRY(set_open_index(s, dir, path));
    } else {
        ft_path_join(path, sizeof path, dir, "model.safetensors");
        if (!ft_file_exists(path)) {
            st = ft_fail(FT_ERR_IO,
                         "%s: no model.safetensors or model.safetensors.index.json (is this a "
                         "Hugging Face checkpoint directory?)",
                         dir);
            goto fail;
        }
        s->files = calloc(1, sizeof *s->files);
        if (!s->files) {
            st = ft_fail(FT_ERR_OOM, "%s: out of memory", dir);
            goto fail;
        }
        FT_TRY(ft_st_open(path, &s->files[0]));
        s->n_files = 1;
        FT_TRY(set_index(s, dir, NULL, 0));
    }
    *out = s;
    return FT_OK;
fail:
    ft_st_set_close(s);
    return st;
}

enum ft_status ft_st_set_wrap(const struct ft_st_tensor *t, int n, const char *label,
                              struct ft_st_set **out) {
    enum ft_status st = FT_OK;
    *out = NULL;
    struct ft_st_set *s = calloc(1, sizeof *s);
    if (!s) return ft_fail(FT_ERR_OOM, "%s: out of memory", label);
    FT_TRY(set_index(s, label, t, n));
    *out = s;
    return FT_OK;
fail:
    ft_st_set_close(s);
    return st;
}

void ft_st_set_close(struct ft_st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) ft_st_close(s->files[i]);
    free(s->files);
    free(s->t);
    free(s->by_name);
    free(s->used);
    free(s);
}

int ft_st_set_count(const struct ft_st_set *s) { return s ? s->n : 0; }

const struct ft_st_tensor *ft_st_set_at(const struct ft_st_set *s, int i) {
    return s && i >= 0 && i < s->n ? s->t[i] : NULL;
}

const struct ft_st_tensor *ft_st_set_find(const struct ft_st_set *s, const char *name) {
    if (!s || !name || !s->by_name) return NULL;
    int i = find_by_name(s->t, s->by_name, s->n, name);
    if (i < 0) return NULL;
    s->used[i] = 1;
    return s->t[i];
}

int ft_st_set_is_unused(const struct ft_st_set *s, int i) {
    return s && s->used && i >= 0 && i < s->n && !s->used[i];
}


/* ------------------------------------------------------------------ write */

enum ft_status ft_st_write(const char *path, const struct ft_st_out *tensors, int n) {
    enum ft_status st = FT_OK;
    json_t *root = json_object();
    char *hdr = NULL;
    FILE *fp = NULL;
    char tmp[4096];
    size_t *sizes = NULL;
    if (!root) return ft_fail(FT_ERR_OOM, "%s: out of memory", path);
    if (n < 0) n = 0;
    sizes = calloc((size_t)(n ? n : 1), sizeof *sizes);
    if (!sizes) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }
    /* First pass: validate and size; second: assign offsets, largest element size first
     * (stable), so that every tensor is aligned to its element size with no gaps (the
     * reference reader rejects gaps). */
    for (int i = 0; i < n; i++) {
        const struct ft_st_out *t = &tensors[i];
        if (!t->name || strcmp(t->name, "__metadata__") == 0) {
            st = ft_fail(FT_ERR_INVALID_ARG, "%s: tensor %d: missing or reserved name", path, i);
            goto fail;
        }
        if ((unsigned)t->dtype >= FT_DTYPE_COUNT || t->n_dims < 0 || t->n_dims > FT_MAX_DIMS) {
            st = ft_fail(FT_ERR_INVALID_ARG, "%s: tensor '%s': bad dtype or n_dims %d", path,
                         t->name, t->n_dims);
            goto fail;
        }
        if (json_object_get(root, t->name)) {
            st = ft_fail(FT_ERR_INVALID_ARG, "%s: duplicate tensor name '%s'", path, t->name);
            goto fail;
        }
        uint64_t bytes = ft_dtype_size(t->dtype);
        json_t *shape = json_array();
        for (int d = 0; d < t->n_dims; d++) {
            if (t->shape[d] < 0 ||
                (t->shape[d] && bytes > (uint64_t)INT64_MAX / (uint64_t)t->shape[d])) {
                json_decref(shape);
                st = ft_fail(FT_ERR_INVALID_ARG, "%s: tensor '%s': bad shape[%d] = %lld", path,
                             t->name, d, (long long)t->shape[d]);
                goto fail;
            }
            bytes *= (uint64_t)t->shape[d];
            json_array_append_new(shape, json_integer(t->shape[d]));
        }
        if (bytes && !t->data) {
            json_decref(shape);
            st = ft_fail(FT_ERR_INVALID_ARG, "%s: tensor '%s': no data", path, t->name);
            goto fail;
        }
        sizes[i] = (size_t)bytes;
        json_t *e = json_pack("{s:s, s:o}", "dtype", ft_dtype_name(t->dtype), "shape", shape);
        if (!e || json_object_set_new(root, t->name, e) != 0) {
            st = ft_fail(FT_ERR_OOM, "%s: out of memory building the header", path);
            goto fail;
        }
    }
    uint64_t off = 0;
    for (size_t es = 8; es >= 1; es /= 2) {
        for (int i = 0; i < n; i++) {
            if (ft_dtype_size(tensors[i].dtype) != es) continue;
            json_t *e = json_object_get(root, tensors[i].name);
            json_t *o = json_pack("[I,I]", (json_int_t)off, (json_int_t)(off + sizes[i]));
            if (!o || json_object_set_new(e, "data_offsets", o) != 0) {
                st = ft_fail(FT_ERR_OOM, "%s: out of memory building the header", path);
                goto fail;
            }
            off += sizes[i];
        }
    }
    hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!hdr) {
        st = ft_fail(FT_ERR_OOM, "%s: out of memory building the header", path);
        goto fail;
    }
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fp = fopen(tmp, "wb");
    if (!fp) {
        st = ft_fail(FT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto fail;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(hdr, 1, hl, fp) == hl;
    for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', fp) != EOF;
    for (size_t es = 8; es >= 1; es /= 2)
        for (int i = 0; ok && i < n; i++)
            if (ft_dtype_size(tensors[i].dtype) == es)
                ok = !sizes[i] || fwrite(tensors[i].data, 1, sizes[i], fp) == sizes[i];
    if (fclose(fp) != 0) ok = 0;
    fp = NULL;
    if (!ok) {
        remove(tmp);
        st = ft_fail(FT_ERR_IO, "%s: write failed (disk full?)", tmp);
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        st = ft_fail(FT_ERR_IO, "%s: cannot rename from %s: %s", path, tmp, strerror(errno));
        remove(tmp);
        goto fail;
    }
fail:
    if (fp) {
        fclose(fp);
        remove(tmp);
    }
    free(sizes);
    free(hdr);
    json_decref(root);
    return st;
}
