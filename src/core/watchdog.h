/* watchdog.h — the step watchdog's bookkeeping, shared by the CPU expert executor
 * (moe/cpu_exec.c) and the CPU forward (engine/forward.c), which both run steps as jobs on a
 * thread pool whose worker may hang (a page fault on swapped-out weights, a starved or stopped
 * thread). A step may take max(floor, FT_WATCHDOG_X x the learned time of steps of its size);
 * the owner passes that deadline to the pool (ft_pool_run_until, ft_pool_watch), and when a step
 * is abandoned, calls ft_watchdog_abandoned; before its next step, ft_watchdog_check waits (at
 * most the floor) for the stuck worker and fails the step when it is not back, so that nothing
 * of a new step runs beside it. The fault hook (FT_TESTING builds) is read here too: "K:MS" or
 * "K:MS:FLOOR_MS" in the owner's variable (MS < 0: the worker stalls before its task, not
 * after: ft_pool_stall). One owner thread (the engine thread). The scheduler's sampling job
 * (engine/sched.c) is a third owner, on the CPU pool. */
#ifndef FT_CORE_WATCHDOG_H
#define FT_CORE_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

#include "core/env.h"
#include "core/threadpool.h"

/* the floor (overridable by the hook), the multiple of the learned time, size classes (log2) */
enum { FT_WATCHDOG_FLOOR_S = 10, FT_WATCHDOG_X = 50, FT_WATCHDOG_CLASSES = 16 };

struct ft_watchdog {
    const char *name;   /* "cpu executor", "cpu forward": starts its log lines and errors */
    const char *cause;  /* what to look for when a worker does not come back */
    int64_t floor_ns;
    double learned_ns[FT_WATCHDOG_CLASSES]; /* finished steps' mean time per class, the newest
                                               weighing 1/8 (0: none yet) */
    int stuck;          /* a step was abandoned with a task still running, not seen back yet */
    int64_t stuck_ns;   /* when */
    long stall_k;       /* the hook: K (0: no hook) */
    int stall_ms;       /* and MS (< 0: before the task) */
};

/* Sets the floor to FT_WATCHDOG_FLOOR_S and reads the hook from variable hook (FT_TESTING
 * builds; its FLOOR_MS replaces the floor). */
void ft_watchdog_init(struct ft_watchdog *w, const char *name, const char *cause, enum ft_env hook);
/* The limit for a step of `size` (pairs, tokens): max(floor, FT_WATCHDOG_X x its class's time). */
int64_t ft_watchdog_limit_ns(const struct ft_watchdog *w, int size);
/* A step of `size` finished in ns. */
void ft_watchdog_learn(struct ft_watchdog *w, int size, int64_t ns);
/* "usually 1.23 ms" for steps of `size`, or "not learned yet". */
void ft_watchdog_usual(const struct ft_watchdog *w, int size, char *buf, size_t cap);
/* A step was abandoned: remembers whether a task of it still runs on pool (returned). */
int ft_watchdog_abandoned(struct ft_watchdog *w, struct ft_pool *pool);
/* FT_OK when a step may start on pool: no task of an abandoned job runs there (after waiting
 * at most the floor for one; the first call that finds this owner's stuck worker back logs
 * so). FT_ERR_BUSY (ft_error() says why and what to do) when one still runs. */
enum ft_status ft_watchdog_check(struct ft_watchdog *w, struct ft_pool *pool);

#endif
