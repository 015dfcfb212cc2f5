/* threadpool.c — persistent workers woken per job by a generation counter. A job's tasks 1..n-1
 * go to whichever thread claims them first (the caller too, once task 0 is done): a worker the
 * OS wakes late (a busy or virtualised host: under gVisor one of 16 executor workers often
 * started 70-300 us into a ~250 us step) finds its task taken instead of holding the job back.
 * Workers spin briefly on the counter (decode issues thousands of small jobs per token, so a
 * futex round trip per job would dominate), then sleep on a condition variable. While spinning
 * they yield the core every 1,024 polls (SPIN_POLLS in all, about 1 ms).
 *
 * The watch (ft_pool_watch, the CPU forward's watchdog: engine/forward.c) gives each plain
 * ft_pool_run job a time limit: the caller stops waiting past it, the job is abandoned as
 * ft_pool_run_until's are, and the watch trips: until it ends, every job returns at once
 * without running (its caller fails the step), as a new job would otherwise wait for the
 * stuck task. Only the caller reads or writes the watch's fields.
 *
 * A job's context: under the watch, ft_pool_run copies *ctx into the pool's ctx_buf when the
 * job starts and hands the tasks that copy, so a task of an abandoned job, however late it starts (claimed,
 * then descheduled before its first line), reads the pool's copy and never the caller's frame.
 * ctx_buf is rewritten only when no task of an earlier job runs (pending 0), like fn and ctx:
 * a later job first waits for the stuck task (or gives up without touching them). The copy
 * goes back into *ctx once every task is done (tasks may count or leave results there).
 * Unwatched jobs, never abandoned, get ctx itself: another thread may change it under them
 * (bench_latency stops its background job through a flag there). */
#define _GNU_SOURCE
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/status.h"
#include "core/sys.h"
#include "core/timer.h"

struct ft_pool {
    int n, pinned;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int *held;      /* ft_pool_hold_worker: worker i held back from claiming */
    /* A cache line each for what the spinning workers poll (written once a job), the claims
     * and the count of tasks left: sharing one line, every claim and every finished task
     * invalidated the line 15 spinning workers read, and every job's lock the one they poll
     * stop on (an empty job cost about a quarter more; bench/RESULTS.md). */
    _Alignas(64) atomic_uint gen; /* bumped once per job */
    atomic_int stop;
    ft_pool_fn fn;
    void *ctx;
    _Alignas(64) _Atomic unsigned long long claim; /* the job's generation << 32 | its next unclaimed task */
    _Alignas(64) atomic_int pending; /* tasks 1..n-1 of the current job not yet finished */
    /* the watch (the caller's): a job's limit (< 0: none), tripped, watched jobs so far */
    int64_t watch_ns;
    int tripped;
    long watched;
    long stall_k;       /* ft_pool_stall: the watched job (counted from 1) whose worker stalls */
    int stall_ms;       /* its ms (< 0: before the task) */
    int stall_next;     /* ft_pool_stall_next: the next job's (0: none) */
    int stall_cur;      /* the armed job's: > 0 after a task, < 0 before one */
    unsigned char *ctx_buf; /* the current job's copy of its context [ctx_cap] (64-aligned) */
    size_t ctx_cap;
    /* the hook's flags, which every worker polls after each task: apart from what the caller
     * writes each job */
    _Alignas(64) atomic_int stall_armed;
    atomic_int stall_taken;
};

enum { SPIN_POLLS = 20000, YIELD_POLLS = 1024 }; /* polls before sleeping; between yields */

struct worker_arg {
    struct ft_pool *p;
    int i;
};

/* ft_pool_stall: the first worker to finish a task of the armed job holds it stall_cur ms
 * before reporting it done, as a wedged worker would; stall_cur < 0: the first to claim one
 * holds it -stall_cur ms before calling it (its context is the pool's copy: ctx_buf). before:
 * the point before the task (1) or after it (0). */
static void stall_point(struct ft_pool *p, int before) {
    if (!atomic_load_explicit(&p->stall_armed, memory_order_acquire) || (p->stall_cur < 0) != before ||
        !atomic_exchange(&p->stall_armed, 0))
        return;
    atomic_store(&p->stall_taken, 1);
    const int ms = p->stall_cur < 0 ? -p->stall_cur : p->stall_cur;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* Claims and runs job g's tasks until none is left (or job g is over: a thread that woke for
 * it late then finds the next job's generation and leaves that to its own wake-up). fn and
 * ctx are read after a claim succeeds: the job cannot end, and the caller cannot set the next
 * job's, before that task is finished. worker: not the caller (the stall hook's). */
static void run_claimed(struct ft_pool *p, unsigned g, int worker) {
    unsigned long long c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if ((unsigned)(c >> 32) != g || (int)(c & 0xffffffffu) >= p->n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acquire,
                                                   memory_order_acquire))
            continue;
        if (worker) stall_point(p, 1);
        p->fn(p->ctx, (int)(c & 0xffffffffu), p->n);
        if (worker) stall_point(p, 0);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *worker_main(void *arg) {
    struct worker_arg wa = *(struct worker_arg *)arg;
    free(arg);
    struct ft_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_POLLS) {
                ft_sys_pause();
                if (spins % YIELD_POLLS == 0) sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        for (int spins = 0; atomic_load_explicit(&p->held[wa.i], memory_order_acquire) &&
                            !atomic_load(&p->stop);)
            if (++spins % 1024 == 0) sched_yield();
            else ft_sys_pause();
        run_claimed(p, g, 1);
    }
}

static enum ft_status pool_init(struct ft_pool **out, int n_threads, const int *cpus);

enum ft_status ft_pool_init(struct ft_pool **out, int n_threads) {
    return pool_init(out, n_threads, NULL);
}

enum ft_status ft_pool_init_pinned(struct ft_pool **out, int n_threads) {
    int cores = ft_sys_physical_cores(), want = n_threads, cap = FT_MAX(cores, n_threads);
    int *cpus = malloc((size_t)cap * sizeof *cpus);
    int n = cpus ? ft_sys_core_cpus(cpus, cap) : 0;
    /* by default one thread per physical core this process may use (a cpuset or taskset
     * gives fewer than the machine has) */
    if (want <= 0) n_threads = n > 0 ? n : cores;
    if (n < n_threads) {
        ft_log_info("cpu pool: %d threads unpinned (this process may use %d physical core%s)",
                    n_threads, n, n == 1 ? "" : "s");
        free(cpus);
        return pool_init(out, n_threads, NULL);
    }
    enum ft_status st = pool_init(out, n_threads, cpus);
    if (st == FT_OK) {
        char list[256] = "";
        for (int i = 1, o = 0; i < n_threads && o < (int)sizeof list - 12; i++)
            o += snprintf(list + o, sizeof list - (size_t)o, "%s%d", i > 1 ? "," : "", cpus[i]);
        if ((*out)->pinned == n_threads - 1)
            ft_log_info("cpu pool: %d threads, workers pinned to CPUs %s (one per physical core)",
                        n_threads, n_threads > 1 ? list : "-");
        else
            ft_log_info("cpu pool: %d threads, %d of %d workers pinned (the others were refused)",
                        n_threads, (*out)->pinned, n_threads - 1);
    }
    free(cpus);
    return st;
}

int ft_pool_pinned(const struct ft_pool *p) { return p ? p->pinned : 0; }

static enum ft_status pool_init(struct ft_pool **out, int n_threads, const int *cpus) {
    *out = NULL;
    if (n_threads <= 0) n_threads = ft_sys_physical_cores();
    struct ft_pool *p = aligned_alloc(64, sizeof *p); /* (a multiple of 64: its alignment) */
    if (!p) return ft_fail(FT_ERR_OOM, "thread pool: out of memory");
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    p->watch_ns = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    p->held = calloc((size_t)n_threads, sizeof *p->held);
    if (!p->threads || !p->held) {
        free(p->threads);
        free(p->held);
        free(p);
        return ft_fail(FT_ERR_OOM, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->p = p;
            wa->i = i;
        }
        if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i;
            ft_pool_free(p);
            return ft_fail(FT_ERR_OOM, "thread pool: cannot start thread %d of %d", i, n_threads);
        }
        if (cpus) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpus[i], &set);
            p->pinned += pthread_setaffinity_np(p->threads[i], sizeof set, &set) == 0;
        }
    }
    *out = p;
    return FT_OK;
}

void ft_pool_free(struct ft_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p->held);
    free(p->ctx_buf);
    free(p);
}

void ft_pool_hold_worker(struct ft_pool *p, int i, int hold) {
    if (p && i >= 1 && i < p->n) atomic_store_explicit(&p->held[i], hold != 0, memory_order_release);
}

int ft_pool_size(const struct ft_pool *p) { return p ? p->n : 1; }

int ft_pool_worker_cpu(const struct ft_pool *p, int i) {
    cpu_set_t set;
    if (!p || i < 1 || i >= p->n || pthread_getaffinity_np(p->threads[i], sizeof set, &set) != 0 ||
        CPU_COUNT(&set) != 1)
        return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) return c;
    return -1;
}

/* Waits until no task of an earlier job is still running (pending 0) or the clock passes
 * deadline_ns (< 0: no limit); 1 when none is. limit_ns >= 0 (the watch) with deadline_ns < 0:
 * the deadline is limit_ns after the first look at the clock, 4,000 polls in, so that the
 * thousands of short jobs a decode step runs never read it. */
static int drained_within(struct ft_pool *p, int64_t deadline_ns, int64_t limit_ns) {
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins < 4000) {
            ft_sys_pause();
            continue;
        }
        /* the clock at every yield: on a busy host one yield can take a whole time slice */
        if (deadline_ns < 0 && limit_ns >= 0) deadline_ns = ft_time_ns() + limit_ns;
        if (deadline_ns >= 0 && ft_time_ns() > deadline_ns) return 0;
        sched_yield();
    }
    return 1;
}

static int drained(struct ft_pool *p, int64_t deadline_ns) { return drained_within(p, deadline_ns, -1); }

int ft_pool_busy(const struct ft_pool *p) {
    struct ft_pool *q = (struct ft_pool *)p; /* (an atomic load takes a non-const pointer) */
    return q && q->n > 1 && atomic_load_explicit(&q->pending, memory_order_acquire) > 0;
}

enum ft_status ft_pool_drain(struct ft_pool *p, int64_t deadline_ns) {
    if (!p || p->n == 1 || drained(p, deadline_ns)) return FT_OK;
    return ft_fail(FT_ERR_BUSY, "thread pool: a task of an abandoned job is still running");
}

/* Ends job g's claims: its tasks not yet claimed are never run (and no longer pending). */
static void stop_claims(struct ft_pool *p, unsigned g) {
    unsigned long long c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        int next = (int)(c & 0xffffffffu);
        if ((unsigned)(c >> 32) != g || next >= p->n) return;
        unsigned long long none = (unsigned long long)g << 32 | (unsigned)p->n;
        if (atomic_compare_exchange_weak_explicit(&p->claim, &c, none, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            atomic_fetch_sub_explicit(&p->pending, p->n - next, memory_order_release);
            return;
        }
    }
}

/* The tasks' context for a job whose caller's is ctx_bytes at ctx: the pool's copy in ctx_buf
 * (grown here: no task of an earlier job runs), or ctx itself when ctx_bytes is 0 or the copy
 * cannot be allocated. */
static void *job_ctx(struct ft_pool *p, void *ctx, size_t ctx_bytes) {
    if (!ctx || !ctx_bytes) return ctx;
    if (ctx_bytes > p->ctx_cap) {
        const size_t cap = (ctx_bytes + 255) & ~(size_t)255; /* (a multiple of 64) */
        unsigned char *b = aligned_alloc(64, cap);
        if (!b) return ctx; /* out of memory: the caller's, as before the copies */
        free(p->ctx_buf);
        p->ctx_buf = b, p->ctx_cap = cap;
    }
    memcpy(p->ctx_buf, ctx, ctx_bytes);
    return p->ctx_buf;
}

/* One job, waiting at most to deadline_ns (< 0: no limit); watched: a plain job under the
 * watch, waiting at most the watch's limit (and tripping it past that). ctx_bytes > 0: the
 * tasks run on the pool's copy of ctx (job_ctx), copied back once all are done. */
static enum ft_status run_job(struct ft_pool *p, ft_pool_fn fn, void *ctx, size_t ctx_bytes,
                              int64_t deadline_ns, int watched) {
    if (p && p->tripped) /* (no task runs: nothing waits for the stuck one) */
        return ft_fail(FT_ERR_BUSY, "thread pool: a job of this step was abandoned");
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return FT_OK;
    }
    /* a task of an abandoned job still running reads p->fn and p->ctx: never replace them under
     * it (callers check ft_pool_busy first; a watched job waits at most to its deadline) */
    const int64_t limit_ns = watched ? p->watch_ns : -1;
    if (!drained_within(p, deadline_ns, limit_ns)) {
        p->tripped |= watched;
        return ft_fail(FT_ERR_BUSY, "thread pool: a task of an abandoned job is still running");
    }
    int stall = watched && ++p->watched == p->stall_k ? p->stall_ms : 0;
    if (p->stall_next) stall = p->stall_next, p->stall_next = 0;
    p->fn = fn;
    void *const run_ctx = p->ctx = job_ctx(p, ctx, ctx_bytes);
    atomic_store(&p->pending, p->n - 1);
    if (stall) p->stall_cur = stall, atomic_store(&p->stall_taken, 0), atomic_store(&p->stall_armed, 1);
    const unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->claim, (unsigned long long)g << 32 | 1u, memory_order_release);
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->gen, g, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(run_ctx, 0, p->n); /* task 0 stays on the caller (the executor's hook makes CUDA calls) */
    /* the stall hook's job: a worker claims and stalls first (up to 2 s), whatever the OS's
     * wake-up order */
    if (stall) {
        for (int64_t t_end = ft_time_ns() + 2000000000LL;
             !atomic_load(&p->stall_taken) && ft_time_ns() < t_end;)
            sched_yield();
        atomic_store(&p->stall_armed, 0);
    }
    run_claimed(p, g, 0);
    /* spin briefly, then yield: on an oversubscribed host a spinning caller would otherwise
     * hold the core a descheduled worker needs for a whole time slice */
    if (drained_within(p, deadline_ns, limit_ns)) {
        if (run_ctx != ctx) memcpy(ctx, run_ctx, ctx_bytes); /* every task done: their writes */
        return FT_OK;
    }
    stop_claims(p, g); /* (the copy stays the late tasks': ctx_buf is kept until they are back) */
    p->tripped |= watched;
    return ft_fail(FT_ERR_BUSY, "thread pool: a job's tasks did not finish in time");
}

void ft_pool_run_ctx(struct ft_pool *p, ft_pool_fn fn, void *ctx, size_t ctx_bytes) {
    const int watched = p && p->watch_ns >= 0; /* (only those can be abandoned: copied) */
    (void)run_job(p, fn, ctx, watched ? ctx_bytes : 0, -1, watched);
}

enum ft_status ft_pool_run_until(struct ft_pool *p, ft_pool_fn fn, void *ctx, int64_t deadline_ns) {
    return run_job(p, fn, ctx, 0, deadline_ns, 0);
}

void ft_pool_watch(struct ft_pool *p, int64_t limit_ns) {
    if (!p) return;
    p->watch_ns = limit_ns < 0 ? -1 : limit_ns;
    p->tripped = 0;
}

int ft_pool_watch_tripped(const struct ft_pool *p) { return p && p->tripped; }

int ft_pool_watch_end(struct ft_pool *p) {
    if (!p) return 0;
    int t = p->tripped;
    p->watch_ns = -1;
    p->tripped = 0;
    return t;
}

void ft_pool_stall(struct ft_pool *p, long k, int ms) {
    if (!p) return;
    p->stall_k = k > 0 && ms != 0 ? p->watched + k : 0;
    p->stall_ms = ms;
}

void ft_pool_stall_next(struct ft_pool *p, int ms) {
    if (p) p->stall_next = ms;
}
