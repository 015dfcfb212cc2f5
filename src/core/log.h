/* log.h — leveled logging to stderr. Any thread; one line per call. */
#ifndef FT_CORE_LOG_H
#define FT_CORE_LOG_H

#include "core/status.h"

enum ft_log_level { FT_LOG_DEBUG, FT_LOG_INFO, FT_LOG_WARN, FT_LOG_ERROR, FT_LOG_QUIET };

void ft_log_set_level(enum ft_log_level lvl);

/* An extra destination for log lines, for tests that check exact messages (and later the
 * server's /v1/logs): fn receives each line that passes the level filter, without the "ft: "
 * prefix or the level tag, after it has been written to stderr. fn must be thread-safe (lines
 * come from any thread). Pass NULL to remove. Set it before starting threads that log. */
typedef void (*ft_log_sink_fn)(void *ctx, enum ft_log_level lvl, const char *line);
void ft_log_set_sink(ft_log_sink_fn fn, void *ctx);
void ft_log(enum ft_log_level lvl, const char *fmt, ...) FT_PRINTF(2, 3);

#define ft_log_debug(...) ft_log(FT_LOG_DEBUG, __VA_ARGS__)
#define ft_log_info(...) ft_log(FT_LOG_INFO, __VA_ARGS__)
#define ft_log_warn(...) ft_log(FT_LOG_WARN, __VA_ARGS__)
#define ft_log_error(...) ft_log(FT_LOG_ERROR, __VA_ARGS__)

#endif
