/* log.c — leveled logging to stderr ("ft: warning: ..."), plus one optional sink (tests).
 * Any thread. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

static enum ft_log_level g_level = FT_LOG_INFO;
static ft_log_sink_fn g_sink;
static void *g_sink_ctx;

void ft_log_set_sink(ft_log_sink_fn fn, void *ctx) {
    g_sink_ctx = ctx;
    g_sink = fn;
}

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
    if (g_sink) g_sink(g_sink_ctx, lvl, buf);
}
