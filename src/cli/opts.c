/* opts.c — flag parsing helpers for the subcommands. */
#include "cli/opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

int ft_cli_exit_code(enum ft_status st) {
    switch (st) {
    case FT_OK: return 0;
    case FT_ERR_INVALID_ARG:
    case FT_ERR_IO:
    case FT_ERR_FORMAT:
    case FT_ERR_UNSUPPORTED: return 2;
    default: return 1;
    }
}

int ft_cli_fail(enum ft_status st) {
    fprintf(stderr, "ft: %s\n", ft_error()[0] ? ft_error() : ft_status_str(st));
    return ft_cli_exit_code(st);
}

int ft_cli_usage_error(const char *cmd, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ft %s: %s (try: ft %s --help)\n", cmd, buf, cmd);
    return 2;
}

const char *ft_cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "ft %s: option %s needs a value\n", argv[0], argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int ft_cli_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

enum ft_status ft_cli_ids(const char *s, int32_t **ids, int *n) {
    int cap = 16, k = 0;
    int32_t *a = malloc((size_t)cap * sizeof *a);
    const char *p = s;
    if (!a) return ft_fail(FT_ERR_OOM, "out of memory");
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(a);
            return ft_fail(FT_ERR_INVALID_ARG, "--ids: '%s' is not a comma-separated list of "
                           "token ids (e.g. --ids 1,2,3)", s);
        }
        if (k == cap) {
            int32_t *b = realloc(a, (size_t)(cap *= 2) * sizeof *a);
            if (!b) {
                free(a);
                return ft_fail(FT_ERR_OOM, "out of memory");
            }
            a = b;
        }
        a[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(a);
        return ft_fail(FT_ERR_INVALID_ARG, "--ids: empty list (e.g. --ids 1,2,3)");
    }
    *ids = a;
    *n = k;
    return FT_OK;
}
