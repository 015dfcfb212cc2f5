/* file.c — read-only mmap of checkpoint files and small whole-file reads. Any thread. */
#define _GNU_SOURCE
#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"

enum ft_status ft_file_map(const char *path, struct ft_map *out) {
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ft_fail(FT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return ft_fail(FT_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size > 0) {
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ft_fail(FT_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
        out->data = p;
    }
    out->size = (size_t)sb.st_size;
    close(fd);
    return FT_OK;
}

void ft_file_unmap(struct ft_map *m) {
    if (!m) return;
    if (m->data) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

enum ft_status ft_file_read(const char *path, char **out, size_t *out_size) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ft_fail(FT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return ft_fail(FT_ERR_OOM, "%s: out of memory reading file", path);
    if (err) {
        free(buf);
        return ft_fail(FT_ERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    if (out_size) *out_size = n;
    return FT_OK;
}

int ft_file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

char *ft_path_join(char *buf, size_t cap, const char *dir, const char *name) {
    size_t n = strlen(dir);
    snprintf(buf, cap, "%s%s%s", dir, (n && dir[n - 1] == '/') ? "" : "/", name);
    return buf;
}
