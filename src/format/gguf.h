/* gguf.h — validated reader for GGUF v2/v3 files (llama.cpp's model format): header, metadata
 * key/values of every type (scalars, strings, arrays of any of them, nested arrays), tensor
 * infos and the aligned data section, from memory (ft_gguf_parse, the fuzz entry point) or
 * from a file (ft_gguf_open, mmap). Called by the model loaders, the tokenizer loader,
 * `ft inspect`, the tests and fuzz/fuzz_gguf.c.
 * Threading: parse/open on one thread; a parsed file is immutable afterwards and may be read
 * from any number of threads. Every byte is treated as hostile: no read leaves [buf, buf+size). */
#ifndef FT_FORMAT_GGUF_H
#define FT_FORMAT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "format/ggml_quant.h"
#include "ft.h"

#define FT_GGUF_MAX_DIMS 4          /* GGML_MAX_DIMS */
#define FT_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types (GGUF numbering). */
enum ft_gguf_type {
    FT_GGUF_UINT8 = 0,
    FT_GGUF_INT8 = 1,
    FT_GGUF_UINT16 = 2,
    FT_GGUF_INT16 = 3,
    FT_GGUF_UINT32 = 4,
    FT_GGUF_INT32 = 5,
    FT_GGUF_FLOAT32 = 6,
    FT_GGUF_BOOL = 7,
    FT_GGUF_STRING = 8,
    FT_GGUF_ARRAY = 9,
    FT_GGUF_UINT64 = 10,
    FT_GGUF_INT64 = 11,
    FT_GGUF_FLOAT64 = 12,
    FT_GGUF_TYPE_COUNT
};

/* One metadata value. Scalars are decoded into the union; strings are NUL-terminated copies
 * owned by the file (len excludes the NUL; a string may hold embedded NULs). Arrays:
 * elem_type and n; scalar elements stay in the file image (read them with ft_gguf_arr_*),
 * string and array elements are decoded into items[n]. */
struct ft_gguf_value {
    enum ft_gguf_type type;
    union {
        uint64_t u;  /* UINT8..UINT64, BOOL (0/1) */
        int64_t i;   /* INT8..INT64 */
        double f;    /* FLOAT32, FLOAT64 */
        struct {
            const char *s;
            uint64_t len;
        } str;
        struct {
            enum ft_gguf_type elem_type;
            uint64_t n;
            const void *raw;                    /* scalar elements: n * size, little-endian */
            const struct ft_gguf_value *items;  /* string/array elements: [n]; else NULL */
        } arr;
    } v;
};

struct ft_gguf_kv {
    const char *key;
    struct ft_gguf_value val;
};

struct ft_gguf_tensor {
    const char *name;
    int type;                           /* enum ft_ggml_type */
    int n_dims;                         /* 1..FT_GGUF_MAX_DIMS */
    int64_t ne[FT_GGUF_MAX_DIMS];       /* GGML order: ne[0] is the innermost (row) length;
                                           unused dims are 1 */
    int64_t n_elems;
    uint64_t offset;                    /* from the start of the data section */
    size_t n_bytes;                     /* n_elems / block * type_size */
    const void *data;                   /* into the image; aligned to the file's alignment
                                           relative to the image start */
};

struct ft_gguf_file;

/* Parses a GGUF image in memory (no copy of the tensor data; tensors point into buf, which
 * must outlive the file). `label` names the source in errors. Rejects (FT_ERR_FORMAT, one
 * line naming the label and the key/tensor): bad magic, version other than 2/3 (including
 * big-endian files), truncation anywhere, string lengths or array counts past the end,
 * unknown value or tensor types, duplicate keys or tensor names, a bad general.alignment,
 * dims <= 0 or element-count overflow, a row length not a multiple of the block size,
 * misaligned offsets, data past the end, overlapping tensors. */
enum ft_status ft_gguf_parse(const void *buf, size_t size, const char *label,
                             struct ft_gguf_file **out);
/* Maps and parses `path`. */
enum ft_status ft_gguf_open(const char *path, struct ft_gguf_file **out);
void ft_gguf_close(struct ft_gguf_file *f);

/* Whether a --model argument names a GGUF model: a path ending in .gguf (existing or not:
 * opening it reports a missing file), or a directory with no config.json and exactly one .gguf
 * file. 1 with the file's path in out; 0 when it is not one (a Hugging Face directory, or
 * another path that does not exist: the caller's loader reports that); -1 (ft_fail set) for a
 * directory holding several .gguf files. */
int ft_gguf_model_path(const char *path, char *out, size_t cap);

int ft_gguf_version(const struct ft_gguf_file *f);
const char *ft_gguf_label(const struct ft_gguf_file *f);
uint32_t ft_gguf_alignment(const struct ft_gguf_file *f);
uint64_t ft_gguf_data_offset(const struct ft_gguf_file *f); /* bytes from the image start */

int64_t ft_gguf_kv_count(const struct ft_gguf_file *f);
const struct ft_gguf_kv *ft_gguf_kv_at(const struct ft_gguf_file *f, int64_t i); /* file order */
const struct ft_gguf_value *ft_gguf_get(const struct ft_gguf_file *f, const char *key);

/* Typed lookups: FT_OK, or FT_ERR_FORMAT naming the key when it is missing or of another
 * kind. Integers accept any integer type whose value fits; floats accept FLOAT32/64. */
enum ft_status ft_gguf_get_u64(const struct ft_gguf_file *f, const char *key, uint64_t *out);
enum ft_status ft_gguf_get_i64(const struct ft_gguf_file *f, const char *key, int64_t *out);
enum ft_status ft_gguf_get_f64(const struct ft_gguf_file *f, const char *key, double *out);
enum ft_status ft_gguf_get_bool(const struct ft_gguf_file *f, const char *key, int *out);
enum ft_status ft_gguf_get_str(const struct ft_gguf_file *f, const char *key, const char **out);

/* Scalar array elements (i < n, checked by FT_ASSERT: a bug otherwise). Integer elements are
 * widened (signed ones sign-extended into i64); FLOAT32/64 into double; BOOL into u64. */
uint64_t ft_gguf_arr_u64(const struct ft_gguf_value *a, uint64_t i);
int64_t ft_gguf_arr_i64(const struct ft_gguf_value *a, uint64_t i);
double ft_gguf_arr_f64(const struct ft_gguf_value *a, uint64_t i);

int64_t ft_gguf_tensor_count(const struct ft_gguf_file *f);
const struct ft_gguf_tensor *ft_gguf_tensor_at(const struct ft_gguf_file *f, int64_t i);
const struct ft_gguf_tensor *ft_gguf_find(const struct ft_gguf_file *f, const char *name);

const char *ft_gguf_type_name(enum ft_gguf_type t); /* "uint32"; "?" when unknown */

#endif
