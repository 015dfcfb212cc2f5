/* safetensors.h — reader (mmap, validated header) and writer for safetensors files, and a
 * checkpoint "set": one model.safetensors or the shards listed by model.safetensors.index.json.
 * Read-only after open: any number of threads may read a file or set concurrently. */
#ifndef FT_FORMAT_SAFETENSORS_H
#define FT_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"
#include "format/quant.h"

#define FT_MAX_DIMS 8

struct ft_st_tensor {
    const char *name;
    enum ft_dtype dtype;
    int n_dims;
    int64_t shape[FT_MAX_DIMS];
    const void *data;  /* into the file's read-only mapping; never written */
    size_t n_bytes;    /* == product(shape) * ft_dtype_size(dtype), checked at parse */
    const char *file;  /* path of the file holding it (for error messages) */
};

struct ft_st_file;

/* Parses a whole safetensors image held in memory (no copy; tensors point into buf).
 * `label` names the source in errors. Rejects: size < 8, header length past the end or
 * > 100 MB, invalid JSON, wrongly typed or missing fields, unknown dtype, negative dims,
 * more than FT_MAX_DIMS dims, element-count overflow, end < begin, shape/byte-size mismatch,
 * offsets past the end, overlapping ranges (header order is free; gaps are tolerated),
 * duplicate names. __metadata__ is allowed and ignored. ft_st_at order is data-offset order;
 * ft_st_find is a binary search over a name index.
 * This is the fuzz entry point. */
enum ft_status ft_st_parse(const void *buf, size_t size, const char *label,
                           struct ft_st_file **out);
/* Maps and parses `path`. */
enum ft_status ft_st_open(const char *path, struct ft_st_file **out);
void ft_st_close(struct ft_st_file *f);
int ft_st_count(const struct ft_st_file *f);
const struct ft_st_tensor *ft_st_at(const struct ft_st_file *f, int i);
const struct ft_st_tensor *ft_st_find(const struct ft_st_file *f, const char *name);

/* A checkpoint directory: model.safetensors, or model.safetensors.index.json + shards
 * (each shard opened once; a name listed in the index but absent from its shard is an error
 * naming both). */
struct ft_st_set;
enum ft_status ft_st_set_open(const char *dir, struct ft_st_set **out);
/* A set over n tensors held by the caller (a checkpoint of another format, renamed and
 * converted: GGUF); t must outlive the set. Duplicate names are an error naming label. */
enum ft_status ft_st_set_wrap(const struct ft_st_tensor *t, int n, const char *label,
                              struct ft_st_set **out);
void ft_st_set_close(struct ft_st_set *s);
int ft_st_set_count(const struct ft_st_set *s);
const struct ft_st_tensor *ft_st_set_at(const struct ft_st_set *s, int i);
const struct ft_st_tensor *ft_st_set_find(const struct ft_st_set *s, const char *name);
/* 1 if ft_st_set_find never returned tensor ft_st_set_at(s, i) (a loader's leftover). find
 * records its hits in the set: one thread at a time, like loading. */
int ft_st_set_is_unused(const struct ft_st_set *s, int i);

/* Writes a safetensors file (header padded with spaces to a multiple of 8; the header lists
 * tensors in the given order; the data region holds them largest element size first, stable,
 * with no gaps, so each tensor is aligned to its element size). Writes path.tmp, then renames. */
struct ft_st_out {
    const char *name;
    enum ft_dtype dtype;
    int n_dims;
    int64_t shape[FT_MAX_DIMS];
    const void *data;
};
enum ft_status ft_st_write(const char *path, const struct ft_st_out *tensors, int n);

#endif
