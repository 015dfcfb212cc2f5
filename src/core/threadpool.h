/* threadpool.h — a persistent pthread pool for data-parallel loops.
 * One caller at a time (the engine thread); the caller takes part as worker 0.
 * ft_pool_run(p, fn, ctx) calls fn(ctx, i, n) (under the watch: fn(the pool's copy of ctx, i,
 * n), see ft_pool_run_ctx) once for each task i in [0, n) and returns when all are done: task 0
 * on the caller, the others on whichever thread claims them first (the caller too, after task
 * 0), so a worker woken late does not hold the job back. A task may
 * wait for work another running task has claimed, never for a task to start (no barriers).
 * Work is split by the callee (fixed ranges by i, or an atomic counter). */
#ifndef FT_CORE_THREADPOOL_H
#define FT_CORE_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"

struct ft_pool;
typedef void (*ft_pool_fn)(void *ctx, int i, int n);

/* n_threads <= 0: physical cores. */
enum ft_status ft_pool_init(struct ft_pool **out, int n_threads);
/* The same with worker i (1 <= i < n) pinned to the i-th physical core this process may run on
 * (ft_sys_core_cpus; core 0 is left to the caller, worker 0), so workers neither migrate nor
 * share a core; n_threads <= 0: one per physical core of the process's CPU set. When fewer cores than threads are allowed, or pinning is refused, the workers
 * stay unpinned and one log line says why; never an error. */
enum ft_status ft_pool_init_pinned(struct ft_pool **out, int n_threads);
/* Workers pinned by ft_pool_init_pinned (0 for a plain pool). */
int ft_pool_pinned(const struct ft_pool *p);
void ft_pool_free(struct ft_pool *p);
int ft_pool_size(const struct ft_pool *p);
/* Tests: holds worker thread i (1 <= i < n) back from claiming tasks once it wakes for a job,
 * until released (hold 0), as an OS that wakes it late would. */
void ft_pool_hold_worker(struct ft_pool *p, int i, int hold);
/* The one CPU worker thread i (1 <= i < n) may run on, or -1 (not pinned, or no such worker). */
int ft_pool_worker_cpu(const struct ft_pool *p, int i);
/* ft_pool_run(p, fn, ctx): under the watch (ft_pool_watch), the job's tasks run on the pool's
 * own copy of *ctx (its sizeof *ctx bytes, copied in when the job starts and back into *ctx
 * once every task is done, not when the job is abandoned), so that a task of a job the watch
 * abandons, even one wedged before its first line, never reads the caller's frame, gone by
 * then: only what the context points to, which must outlive the job (the engine's buffers).
 * A task may write its context (counters, results): those writes come back; a watched job's
 * context must not point into itself, nor be changed by another thread while the job runs.
 * Unwatched jobs (never abandoned), and an untyped ctx (void *, NULL): the tasks get ctx. */
void ft_pool_run_ctx(struct ft_pool *p, ft_pool_fn fn, void *ctx, size_t ctx_bytes);
#ifndef __cplusplus
#define FT_POOL_CTX_BYTES(ctx)                                                                 \
    _Generic((ctx), void *: (size_t)0, const void *: (size_t)0,                                \
             default: sizeof *_Generic((ctx), void *: (char *)0, const void *: (char *)0,      \
                                       default: (ctx)))
#define ft_pool_run(p, fn, ctx) ft_pool_run_ctx((p), (fn), (ctx), FT_POOL_CTX_BYTES(ctx))
#endif
/* The same, but the caller stops waiting for the other threads' tasks once the clock
 * (ft_time_ns) passes deadline_ns (< 0: never) and returns FT_ERR_BUSY: the job's unclaimed
 * tasks are dropped; those already running go on, and the pool stays busy (ft_pool_busy) until
 * they return. The tasks must bound their own waits on each other (the CPU executor's
 * watchdog, moe/cpu_exec.c). A later ft_pool_run waits for them; check ft_pool_busy (or
 * ft_pool_drain) first so that it never does. */
enum ft_status ft_pool_run_until(struct ft_pool *p, ft_pool_fn fn, void *ctx, int64_t deadline_ns);
/* (Its ctx is not copied: it must outlive the job's tasks, abandoned ones too: the executor's
 * pass jobs and the scheduler's sampling job are their owners' heap objects.) */
/* The watch: the CPU forward's watchdog (engine/forward.c) over the jobs its ops run through
 * plain ft_pool_run (backend/cpu and its own). Until ft_pool_watch_end, each such job's caller
 * stops waiting for the other threads' tasks limit_ns after the job began (< 0: no watch) and
 * abandons the job as ft_pool_run_until does; a job that finds a task of an abandoned job
 * still running waits for it that long too. Either trips the watch: from then on every job
 * (ft_pool_run_until's too, returning FT_ERR_BUSY) returns at once without running a task, as
 * it would otherwise wait for the stuck one, and the caller, whose outputs are then left
 * unwritten, checks ft_pool_watch_tripped and fails its step. Clears a trip; call it when
 * ft_pool_busy is 0. */
void ft_pool_watch(struct ft_pool *p, int64_t limit_ns);
/* 1 when a job was abandoned (or not run) under the watch since ft_pool_watch. */
int ft_pool_watch_tripped(const struct ft_pool *p);
/* Ends the watch (plain jobs wait as long as they take again); returns ft_pool_watch_tripped. */
int ft_pool_watch_end(struct ft_pool *p);
/* Tests (the fault hook FT_TEST_POOL_STALL, engine/forward.c): the first worker other than the
 * caller to finish a task of the k-th job run under a watch from now (k 1: the next) holds it
 * ms ms before reporting it done, as a wedged worker would; k 0: off. ms < 0: the first worker
 * to claim a task of that job holds it -ms ms before it calls the task (a worker wedged before
 * its task's first line, which has read nothing of its context yet). */
void ft_pool_stall(struct ft_pool *p, long k, int ms);
/* Tests (FT_TEST_SAMPLE_STALL, engine/sched.c): the same for the next job of any kind (plain,
 * watched or ft_pool_run_until); ms 0: off. */
void ft_pool_stall_next(struct ft_pool *p, int ms);
/* 1 while a task of a job abandoned by ft_pool_run_until or under the watch still runs. */
int ft_pool_busy(const struct ft_pool *p);
/* Waits until no such task runs (FT_OK) or the clock passes deadline_ns (FT_ERR_BUSY). */
enum ft_status ft_pool_drain(struct ft_pool *p, int64_t deadline_ns);

/* Splits [0, n) into `parts` near-equal ranges and gives range i as [*lo, *hi). */
static inline void ft_split(long n, int i, int parts, long *lo, long *hi) {
    long q = n / parts, r = n % parts;
    *lo = i * q + (i < r ? i : r);
    *hi = *lo + q + (i < r ? 1 : 0);
}

#endif
