/* log.c — leveled logging to stderr ("ft: warning: ..."). Any thread. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

static enum ft_log_level g_level = FT_LOG_INFO;

void ft_log_set_level(enum ft_log_level lvl) { g_level = lvl; }

void ft_log(enum ft_log_level lvl, const char *fmt, ...) {
    if (lvl < g_level) return;
    static const char *const tag[] = {"debug: ", "", "warning: ", "error: "};
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ft: %s%s\n", tag[lvl], buf);
}
