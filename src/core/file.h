/* file.h — read-only file mappings and whole-file reads. Any thread. */
#ifndef FT_CORE_FILE_H
#define FT_CORE_FILE_H

#include <stddef.h>

#include "ft.h"

struct ft_map {
    const void *data; /* read-only mapping of the whole file (NULL when size is 0) */
    size_t size;      /* bytes */
};

/* Maps `path` read-only. Errors name the path. */
enum ft_status ft_file_map(const char *path, struct ft_map *out);
void ft_file_unmap(struct ft_map *m);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
enum ft_status ft_file_read(const char *path, char **out, size_t *out_size);

/* 1 when `path` exists and is a regular file or directory. */
int ft_file_exists(const char *path);

/* Joins dir and name into buf; returns buf. */
char *ft_path_join(char *buf, size_t cap, const char *dir, const char *name);

#endif
