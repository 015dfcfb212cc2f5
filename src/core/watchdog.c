/* watchdog.c — the step watchdog's limit, learning and recovery check (see watchdog.h). */
#include "core/watchdog.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"

void ft_watchdog_init(struct ft_watchdog *w, const char *name, const char *cause, enum ft_env hook) {
    memset(w, 0, sizeof *w);
    w->name = name;
    w->cause = cause;
    w->floor_ns = (int64_t)FT_WATCHDOG_FLOOR_S * 1000000000LL;
    const char *v = ft_env_str(hook); /* "K:MS" or "K:MS:FLOOR_MS" (NULL unless FT_TESTING) */
    long k = 0, ms = 0, floor_ms = 0;
    int n = v ? sscanf(v, "%ld:%ld:%ld", &k, &ms, &floor_ms) : 0;
    if (n >= 2 && k > 0 && ms != 0) w->stall_k = k, w->stall_ms = (int)ms; /* < 0: before */
    if (n == 3 && floor_ms > 0) w->floor_ns = floor_ms * 1000000LL;
}

static int size_class(int size) {
    int c = 0;
    while (size > 1 && c < FT_WATCHDOG_CLASSES - 1) size >>= 1, c++;
    return c;
}

int64_t ft_watchdog_limit_ns(const struct ft_watchdog *w, int size) {
    double l = FT_WATCHDOG_X * w->learned_ns[size_class(size)];
    return l > (double)w->floor_ns ? (int64_t)l : w->floor_ns;
}

void ft_watchdog_learn(struct ft_watchdog *w, int size, int64_t ns) {
    double t = (double)ns, *l = &w->learned_ns[size_class(size)];
    *l = *l > 0 ? *l + (t - *l) / 8 : t;
}

void ft_watchdog_usual(const struct ft_watchdog *w, int size, char *buf, size_t cap) {
    double ms = w->learned_ns[size_class(size)] / 1e6;
    if (ms > 0) snprintf(buf, cap, "usually %.2f ms", ms);
    else snprintf(buf, cap, "not learned yet");
}

int ft_watchdog_abandoned(struct ft_watchdog *w, struct ft_pool *pool) {
    w->stuck = ft_pool_busy(pool);
    w->stuck_ns = ft_time_ns();
    return w->stuck;
}

enum ft_status ft_watchdog_check(struct ft_watchdog *w, struct ft_pool *pool) {
    if (!ft_pool_busy(pool)) {
        if (w->stuck) {
            w->stuck = 0;
            ft_log_warn("%s: the worker stuck in an abandoned step came back after %.1f s; "
                        "serving again", w->name, (ft_time_ns() - w->stuck_ns) / 1e9);
        }
        return FT_OK;
    }
    if (ft_pool_drain(pool, ft_time_ns() + w->floor_ns) == FT_OK) return ft_watchdog_check(w, pool);
    char ago[48] = ""; /* (not stuck: another owner's step on a shared pool) */
    if (w->stuck) snprintf(ago, sizeof ago, " %.1f s ago", (ft_time_ns() - w->stuck_ns) / 1e9);
    return ft_fail(FT_ERR_BUSY,
                   "%s: a worker is still stuck in a step abandoned%s, so no new step can start; "
                   "retry later (if it does not come back, restart the server and look for %s)",
                   w->name, ago, w->cause);
}
