/* status.c — the thread-local error message behind ft_error(). Any thread. */
#include "core/status.h"

#include <stdarg.h>

static _Thread_local char g_msg[1024];

enum ft_status ft_fail(enum ft_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return st;
}

void ft_error_clear(void) { g_msg[0] = 0; }

const char *ft_error(void) { return g_msg; }

const char *ft_status_str(enum ft_status s) {
    switch (s) {
    case FT_OK: return "ok";
    case FT_ERR_INVALID_ARG: return "invalid argument";
    case FT_ERR_IO: return "I/O error";
    case FT_ERR_FORMAT: return "format error";
    case FT_ERR_UNSUPPORTED: return "unsupported";
    case FT_ERR_OOM: return "out of memory";
    case FT_ERR_CUDA: return "CUDA error";
    case FT_ERR_BUSY: return "busy";
    case FT_ERR_INTERNAL: return "internal error";
    }
    return "unknown";
}
