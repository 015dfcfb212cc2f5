/* cpu_exec.c — CPU expert executor: groups the step's (token, expert) pairs by expert, rounds
 * each token's input once, then runs the gate/up pass and the down pass, whose rows are
 * claimed in guided stretches through an atomic cursor, with the activation between them and
 * the weighted combine after. Fused (the default; ft_moe_exec_set_fused(x, 0) gives four
 * separate pool jobs): one pool job, the two passes' rows on one cursor, each expert's
 * activation run by the worker that finishes its gate/up rows and its down rows waiting only
 * for that, the combine after the last down row (no barrier between the passes: a step about
 * 5-10% shorter, bench/RESULTS.md). Engine thread only.
 *
 * Watchdog (ft_moe_exec_set_watchdog; off: a step waits as long as it takes). A step waits at
 * most max(FT_WATCHDOG_FLOOR_S, FT_WATCHDOG_X x its learned time) (an average per size class of
 * the step, learned from the steps that finished: core/watchdog.c) for its workers:
 * every wait of the step (a down stretch for its expert's gate/up rows, the combine for the
 * last down row, the caller for the pool's tasks) watches the deadline. Past it the step is
 * abandoned: one error line, the call returns -1 with ft_error() set, and the caller fails
 * that step's requests. The worker that hung (a page fault on swapped-out banks, a starved
 * or stopped thread) may finish later; what it does then is safe because:
 *   - no work is left for it: claims return nothing once the step is abandoned, waits end,
 *     and the combine (the only write outside the executor's own scratch, into the caller's
 *     out) is skipped by every worker that reaches it afterwards;
 *   - what it still touches lives in the executor (the job's state is kept in x, not on the
 *     caller's stack; its scratch rows), or is the caller's out of the abandoned step;
 *   - no new step starts while it runs: the pool stays busy (ft_pool_busy) until its task
 *     returns, every call here first waits for that, bounded by the floor, and fails at once
 *     when it does not come back (ft_moe_exec_check; the CPU forward calls it before anything
 *     else of a step, as the pool and the out buffers are shared with the rest of the layer
 *     loop). So nothing of a later step can be overwritten by a late write, and the executor
 *     serves again by itself once the worker is back (one line says so).
 * FT_TESTING builds: FT_TEST_EXEC_STALL=K:MS[:FLOOR_MS] makes a worker (not the caller) of the
 * K-th call stall MS ms after its first claim, and sets the floor (ms) for the tests. */
#define _GNU_SOURCE
#include "moe/cpu_exec.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/ops.h"
#include "core/env.h"
#include "core/log.h"
#include "core/status.h"
#include "core/sys.h"
#include "core/timer.h"
#include "core/watchdog.h"
#include "format/quant.h"

/* Rows are handed out guided: a pass's rows (its active experts' rows one after another) are
 * claimed through an atomic cursor in chunks of what is left / (2 x workers), never fewer than
 * about TILE_BYTES of weights. The first claims give every worker a long contiguous stretch
 * (the hardware prefetcher and the kernels' prefetch run ahead undisturbed); the shrinking
 * tail keeps workers finishing together (the pass ends at a barrier). Fixed 32 KB tiles read
 * about a fifth slower; fixed 128 KB tiles left workers idle at the end. */
enum { TILE_BYTES = 32 << 10, TILE_MIN = 8, TILE_MAX = 512 };

static int min_rows(size_t row_bytes) {
    int t = (int)(TILE_BYTES / (row_bytes ? row_bytes : 1));
    return t < TILE_MIN ? TILE_MIN : t > TILE_MAX ? TILE_MAX : t;
}

struct fused;
struct pass;
struct act_job;
struct combine_job;

struct ft_moe_exec {
    int max_tokens, max_rows, n_experts, H, I;
    /* a step's pool jobs' state: here, not on the stack, as a worker of an abandoned step may
     * still read it after the call returned (the watchdog, above) */
    struct fused *fj;
    struct pass *pj;
    struct act_job *aj;
    struct combine_job *cj;
    int64_t *span;   /* [2 * TIMED_WORKERS] timing: worker spans of the current job */
    int watchdog;     /* ft_moe_exec_set_watchdog */
    int64_t deadline_ns, t0_ns;
    atomic_int abort; /* the current step is abandoned */
    struct ft_watchdog wd; /* limits learned by step size (pairs); FT_TEST_EXEC_STALL's call
                            * (from 1) a worker stalls in and for how long (wd.stall_k, _ms) */
    long steps;       /* calls so far */
    atomic_int stall_armed, stall_taken;
    pthread_t caller;
    int *count;      /* [E] tokens per expert this step */
    int *offset;     /* [E+1] first row of each expert in the gathered buffers */
    int *active;     /* [E] ids of active experts, in order */
    int *row_token;  /* [max_rows] source token of each gathered row */
    int *row_e;      /* [max_rows] expert of each gathered row */
    float *row_w;    /* [max_rows] router weight of each gathered row */
    float *xg;       /* [max_rows, H] gathered inputs (exact path) */
    float *gu;       /* [max_rows, 2I] gate/up outputs */
    float *act;      /* [max_rows, I] silu(gate) * up */
    float *y;        /* [max_rows, H] expert outputs */
    int fast;        /* round the pass inputs (ft_cpu_xq_quant) where the format has a path */
    void *xq;        /* [max_rows, 2 H] the gate/up pass's rounded inputs, gathered */
    void *xqd;       /* [max_rows, 2 I] the down pass's (apart: fused, both passes run at once) */
    int fused;       /* ft_moe_exec_set_fused */
    atomic_int *done1, *ready; /* fused: [E] gate/up rows done per active expert; its act done */
    void *xqt;       /* [max_tokens, 2 H] each token's input rounded once (gate/up) */
    int xq_tok;      /* this step's gate/up pass reads xqt by token (tokens_consecutive) */
    int timing;      /* ft_moe_exec_set_timing */
    int64_t t_mark;  /* timing: when the current phase began */
    struct ft_moe_exec_timing tm;
    void (*hook)(void *); /* ft_moe_exec_set_hook: run by worker 0 in the next gate/up pass */
    void *hook_ctx;
};

enum { TIMED_WORKERS = 256 };

/* timing: the phase that just ended gets the time since the last mark */
static void mark(struct ft_moe_exec *x, int phase) {
    if (!x->timing) return;
    int64_t now = ft_time_ns();
    x->tm.ns[phase] += now - x->t_mark;
    x->t_mark = now;
}

struct pass {
    struct ft_moe_exec *x;
    const struct ft_bank *bank;
    const float *in;  /* [rows, K] */
    const uint8_t *xq; /* in quantised (xq_bytes per row), or NULL */
    size_t xq_bytes;
    int xq_tok;       /* xq holds tokens, not rows: an expert's rows from its first row's token */
    float *out;       /* [rows, N] */
    void (*hook)(void *); /* run by worker 0 before it claims rows (the others start at once) */
    void *hook_ctx;
    int K, N, chunk_min, parts; /* parts: 2 x workers */
    long total;       /* n_active * N rows */
    atomic_long next;
    atomic_int tasks;
    int64_t launch_ns, *span; /* timing: launch time; [2 * worker] first start, last end */
};

/* A pass over bank's rows for n_active experts, from in (or its rounded form xq) into out,
 * its stretches sized for workers; no hook, timing off, nothing claimed yet. */
static void pass_init(struct pass *p, struct ft_moe_exec *x, const struct ft_bank *bank,
                      const float *in, const void *xq, size_t xq_bytes, float *out, int n_active,
                      int workers) {
    *p = (struct pass){.x = x, .bank = bank, .in = in, .xq = xq, .xq_bytes = xq_bytes, .out = out,
                       .K = bank->cols, .N = bank->rows};
    p->chunk_min = min_rows(ft_dtype_row_bytes(bank->schema->dtype, p->K));
    p->parts = 2 * workers;
    p->total = (long)n_active * p->N;
    atomic_init(&p->next, 0);
    atomic_init(&p->tasks, 0);
}

/* The next stretch's rows when rem of the pass are left (> 0). */
static long stretch(const struct pass *p, long rem) {
    long c = rem / p->parts;
    c = c < p->chunk_min ? p->chunk_min : (c + 7) & ~7L;
    return c > rem ? rem : c;
}

/* Claims the next rows [*g0, *g0 + return) of the pass; 0 when none are left. */
static long claim(struct pass *p, long *g0) {
    if (atomic_load_explicit(&p->x->abort, memory_order_relaxed)) return 0;
    long cur = atomic_load_explicit(&p->next, memory_order_relaxed);
    for (;;) {
        long rem = p->total - cur;
        if (rem <= 0) return 0;
        long c = stretch(p, rem);
        if (atomic_compare_exchange_weak_explicit(&p->next, &cur, cur + c, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *g0 = cur;
            return c;
        }
    }
}

/* Output rows [n0, n1) of active expert a for all its gathered rows. */
static void pass_rows(const struct pass *p, int a, int n0, int n1) {
    const struct ft_moe_exec *x = p->x;
    int e = x->active[a], r0 = x->offset[e], nr = x->count[e];
    if (p->xq)
        ft_cpu_matmul_rows_xq(p->out + (size_t)r0 * p->N, p->N,
                              p->xq + (size_t)(p->xq_tok ? x->row_token[r0] : r0) * p->xq_bytes,
                              ft_bank_expert(p->bank, e), p->bank->schema->dtype, nr, n0, n1, p->K);
    else
        ft_cpu_matmul_rows(p->out + (size_t)r0 * p->N, p->N, p->in + (size_t)r0 * p->K, p->K,
                           ft_bank_expert(p->bank, e), p->bank->schema->dtype, nr, n0, n1, p->K);
}

/* One worker's walk over the stretches it claims (pass_task, fused_task): claim() gives the next
 * stretch (its first row in *g0, base the row its pass starts at) and its pass; each stretch is
 * run split at experts (each piece's rows [n0, n1) of active expert a). A stretch is claimed
 * when the last one is done: claiming one ahead, so the kernels could prefetch into it, gained
 * nothing (ggml_x32.c's pf_upto). */
struct walk {
    long (*claim)(void *ctx, long *g0, long *base, const struct pass **p);
    void (*piece)(void *ctx, const struct pass *p, int a, int n0, int n1);
    void *ctx;
    atomic_int *tasks; /* timing: stretches counted, else NULL */
    struct ft_moe_exec *x;
};

/* FT_TEST_EXEC_STALL: the first worker other than the caller to claim rows in the armed
 * call sleeps, holding them */
static void stall_point(struct ft_moe_exec *x) {
    if (!x->wd.stall_ms || !atomic_load_explicit(&x->stall_armed, memory_order_relaxed) ||
        pthread_equal(pthread_self(), x->caller) || !atomic_exchange(&x->stall_armed, 0))
        return;
    atomic_store(&x->stall_taken, 1);
    struct timespec ts = {x->wd.stall_ms / 1000, (long)(x->wd.stall_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* The caller (task 0) of the armed call lets a worker claim first (up to 2 s), so that the
 * stall lands on a worker whatever the OS's wake-up order. */
static void stall_wait(struct ft_moe_exec *x) {
    if (!x->wd.stall_ms || !atomic_load(&x->stall_armed)) return;
    int64_t t_end = ft_time_ns() + 2000000000LL;
    while (!atomic_load(&x->stall_taken) && ft_time_ns() < t_end) sched_yield();
}

static void walk(const struct walk *w) {
    long g0, base, c;
    const struct pass *p;
    while ((c = w->claim(w->ctx, &g0, &base, &p)) > 0) {
        stall_point(w->x);
        if (w->tasks) atomic_fetch_add_explicit(w->tasks, 1, memory_order_relaxed);
        for (long g = g0 - base, end = g0 - base + c; g < end;) { /* the stretch, split at experts */
            int a = (int)(g / p->N), n0 = (int)(g % p->N);
            int n1 = (int)FT_MIN((long)p->N, n0 + (end - g));
            w->piece(w->ctx, p, a, n0, n1);
            g += n1 - n0;
        }
    }
}

static long pass_claim(void *ctx, long *g0, long *base, const struct pass **p) {
    *base = 0, *p = ctx;
    return claim(ctx, g0);
}

static void pass_piece(void *ctx, const struct pass *p, int a, int n0, int n1) {
    (void)ctx;
    pass_rows(p, a, n0, n1);
}

static void pass_task(void *ctx, int i, int n) {
    struct pass *p = ctx;
    (void)n;
    if (i == 0 && p->hook) p->hook(p->hook_ctx);
    if (i == 0) stall_wait(p->x);
    int64_t t_in = p->span ? ft_time_ns() : 0;
    walk(&(struct walk){pass_claim, pass_piece, p, p->span ? &p->tasks : NULL, p->x});
    if (p->span && i < TIMED_WORKERS) p->span[2 * i] = t_in, p->span[2 * i + 1] = ft_time_ns();
}

/* timing: a job's worker spans (span[2 * timed]), each preset to the launch; NULL when off */
static int64_t *timing_spans(const struct ft_moe_exec *x, int timed, int64_t *span, int64_t *launch_ns) {
    if (!x->timing) return NULL;
    *launch_ns = x->t_mark;
    for (int i = 0; i < 2 * timed; i++) span[i] = x->t_mark;
    return span;
}

/* Sums one pass's worker spans into x->tm (which = 0: gate/up, 1: down). */
static void add_spans(struct ft_moe_exec *x, struct pass *p, int workers, int which) {
    int64_t start_max = 0, busy_sum = 0, busy_max = 0;
    for (int i = 0; i < workers; i++) {
        int64_t s = p->span[2 * i] - p->launch_ns, b = p->span[2 * i + 1] - p->span[2 * i];
        start_max = FT_MAX(start_max, s);
        busy_max = FT_MAX(busy_max, b);
        busy_sum += b;
    }
    x->tm.start_max_ns[which] += start_max;
    x->tm.busy_mean_ns[which] += busy_sum / FT_MAX(workers, 1);
    x->tm.busy_max_ns[which] += busy_max;
    x->tm.tasks[which] += atomic_load(&p->tasks);
}

/* One pool job of the step, watched: 0, or -1 when the step is abandoned (the deadline
 * passed in it, or before). */
static int job(struct ft_moe_exec *x, struct ft_pool *pool, ft_pool_fn fn, void *ctx) {
    if (ft_pool_run_until(pool, fn, ctx, x->deadline_ns) != FT_OK) atomic_store(&x->abort, 1);
    return atomic_load(&x->abort) ? -1 : 0;
}

/* out[rows, N] = the bank's experts applied to their gathered rows: from xq (rounded, bytes
 * per row xq_bytes) when given, else from in [rows, K]. 0, or -1: the step abandoned. */
static int run_pass(struct ft_moe_exec *x, struct ft_pool *pool, const struct ft_bank *bank,
                    const float *in, const void *xq, size_t xq_bytes, float *out, int n_active,
                    int which) {
    struct pass *p = x->pj;
    int workers = ft_pool_size(pool);
    pass_init(p, x, bank, in, xq, xq_bytes, out, n_active, workers);
    int timed = FT_MIN(workers, TIMED_WORKERS);
    p->span = timing_spans(x, timed, x->span, &p->launch_ns);
    if (which == 0) p->hook = x->hook, p->hook_ctx = x->hook_ctx, x->hook = NULL, p->xq_tok = x->xq_tok;
    if (job(x, pool, pass_task, p)) return -1;
    if (x->timing) {
        add_spans(x, p, timed, which);
        mark(x, which ? FT_EXEC_PASS2 : FT_EXEC_PASS1);
    }
    return 0;
}

/* Between the passes, rows split over the workers: the gate/up bias, the activation, and (fast
 * path) the down pass's rounded input. */
struct act_job {
    struct ft_moe_exec *x;
    const struct ft_expert_act *act;
    int R;
    enum ft_dtype down_dt;
    size_t xq_bytes; /* of a down input row; 0: the exact path */
};

static void act_rows(const struct act_job *j, int r0, int r1) {
    struct ft_moe_exec *x = j->x;
    int I = x->I;
    for (int r = r0; r < r1; r++) {
        float *gu = x->gu + (size_t)r * 2 * I, *a = x->act + (size_t)r * I;
        if (j->act && j->act->gu_bias) {
            const float *b = j->act->gu_bias + (size_t)x->row_e[r] * 2 * I;
            for (int i = 0; i < 2 * I; i++) gu[i] += b[i];
        }
        if (j->act && j->act->mode != FT_SWIGLU_PLAIN)
            ft_cpu_swiglu(a, gu, 1, I, j->act->mode, j->act->limit, j->act->alpha);
        else
            ft_cpu_silu_mul(a, gu, 1, I);
        if (j->xq_bytes)
            ft_cpu_xq_quant(j->down_dt, a, I, I, 1, (uint8_t *)x->xqd + (size_t)r * j->xq_bytes);
    }
}

static void act_task(void *ctx, int i, int n) {
    const struct act_job *j = ctx;
    long lo, hi;
    ft_split(j->R, i, n, &lo, &hi);
    act_rows(j, (int)lo, (int)hi);
}

/* out[token] += w * (y + down bias) for every gathered row, columns split over the workers
 * (rows added in order per column: the same sums whatever the split). */
struct combine_job {
    struct ft_moe_exec *x;
    const float *bias;
    float *out;
    int R;
};

static void combine_cols(const struct combine_job *j, int h0, int h1) {
    const struct ft_moe_exec *x = j->x;
    int H = x->H;
    for (int r = 0; r < j->R; r++) {
        float *o = j->out + (size_t)x->row_token[r] * H;
        const float *y = x->y + (size_t)r * H;
        const float *b = j->bias ? j->bias + (size_t)x->row_e[r] * H : NULL;
        float wr = x->row_w[r];
        if (b)
            for (int h = h0; h < h1; h++) o[h] += wr * (y[h] + b[h]);
        else
            for (int h = h0; h < h1; h++) o[h] += wr * y[h];
    }
}

static void combine_task(void *ctx, int i, int n) {
    const struct combine_job *j = ctx;
    long lo, hi;
    ft_split((j->x->H + 15) / 16, i, n, &lo, &hi); /* 16-column pieces: whole cache lines */
    combine_cols(j, (int)lo * 16, (int)FT_MIN(hi * 16, (long)j->x->H));
}

/* Below this many output elements a step's activation or combine runs on the engine thread:
 * a pool job costs about 4 us on 16 cores (bench_exec's empty job), about what 4K
 * activations with their rounding for the down pass (~2 ns each) or combine terms take on one
 * core. */
enum { ACT_POOL_MIN = 4096, COMBINE_POOL_MIN = 4096 };

/* The fused step: one cursor over the gate/up rows then the down rows (each pass's rows in
 * active-expert order, in guided stretches sized for that pass), so the job has no barrier
 * between the passes: the worker whose stretch completes an expert's gate/up rows runs that
 * expert's activation and marks it ready; a down stretch waits only for its experts' marks
 * (their gate/up rows were all claimed before it, by workers that never wait in that pass, so
 * the wait ends). The combine, split over columns (COMBINE_POOL_MIN and up) or worker 0's,
 * waits for the last down row. The same kernels on the same rows as the four jobs: the same
 * bits. */
struct fused {
    struct ft_moe_exec *x;
    struct pass p[2];   /* their cursors unused: next is the one cursor */
    long total1, total; /* gate/up rows; both passes' */
    _Alignas(64) atomic_long next; /* each claimed by every worker: a cache line each */
    _Alignas(64) atomic_long done2; /* down rows finished */
    struct act_job aj;
    struct combine_job cj;
    int split_combine;
    void (*hook)(void *);
    void *hook_ctx;
    _Alignas(64) atomic_int tasks;
    int64_t launch_ns, *span;
};

/* A waiting worker's pause; after 4,000 it yields, as ft_pool_run's caller does: with more
 * threads than free cores (an unpinned pool, a busy host) a spinning waiter could otherwise
 * hold the core the worker it waits for needs. */
static void wait_pause(int *spins) {
    if (++*spins < 4000) ft_sys_pause();
    else sched_yield();
}

/* A wait's pause, watched: 1 when the step is abandoned (the wait must end). Any waiter that
 * sees the deadline pass marks it; the clock is read every 256th pause, and at every pause once
 * they yield (on a busy host one yield can take a time slice: 256 of them overran the limit by
 * most of a second). */
static int wait_watched(struct ft_moe_exec *x, int *spins) {
    if (atomic_load_explicit(&x->abort, memory_order_relaxed)) return 1;
    wait_pause(spins);
    if ((*spins % 256 == 0 || *spins >= 4000) && ft_time_ns() > x->deadline_ns) {
        atomic_store(&x->abort, 1);
        return 1;
    }
    return 0;
}

static long fused_claim(struct fused *f, long *g0) {
    if (atomic_load_explicit(&f->x->abort, memory_order_relaxed)) return 0;
    long cur = atomic_load_explicit(&f->next, memory_order_relaxed);
    for (;;) {
        int ph = cur >= f->total1;
        long rem = (ph ? f->total : f->total1) - cur;
        if (rem <= 0) return 0;
        long c = stretch(&f->p[ph], rem);
        if (atomic_compare_exchange_weak_explicit(&f->next, &cur, cur + c, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *g0 = cur;
            return c;
        }
    }
}

static long fused_walk_claim(void *ctx, long *g0, long *base, const struct pass **p) {
    struct fused *f = ctx;
    long c = fused_claim(f, g0);
    int ph = c > 0 && *g0 >= f->total1;
    *base = ph ? f->total1 : 0, *p = &f->p[ph];
    return c;
}

/* A down piece waits for its expert's activation; the piece that completes an expert's
 * gate/up rows runs it */
static void fused_piece(void *ctx, const struct pass *p, int a, int n0, int n1) {
    struct fused *f = ctx;
    struct ft_moe_exec *x = f->x;
    const int ph = p == &f->p[1];
    if (ph)
        for (int spins = 0; !atomic_load_explicit(&x->ready[a], memory_order_acquire);)
            if (wait_watched(x, &spins)) return; /* abandoned: its rows stay undone */
    pass_rows(p, a, n0, n1);
    if (!ph && atomic_fetch_add_explicit(&x->done1[a], n1 - n0, memory_order_acq_rel) + (n1 - n0) ==
                   p->N) { /* this expert's last gate/up rows */
        int e = x->active[a];
        act_rows(&f->aj, x->offset[e], x->offset[e] + x->count[e]);
        atomic_store_explicit(&x->ready[a], 1, memory_order_release);
    }
    if (ph) atomic_fetch_add_explicit(&f->done2, n1 - n0, memory_order_release);
}

static void fused_task(void *ctx, int i, int n) {
    struct fused *f = ctx;
    struct ft_moe_exec *x = f->x;
    if (i == 0 && f->hook) f->hook(f->hook_ctx);
    if (i == 0) stall_wait(x);
    int64_t t_in = f->span ? ft_time_ns() : 0;
    walk(&(struct walk){fused_walk_claim, fused_piece, f, f->span ? &f->tasks : NULL, x});
    if (f->split_combine || i == 0) {
        int abandoned = 0;
        const long down_rows = f->total - f->total1;
        for (int spins = 0; !abandoned && atomic_load_explicit(&f->done2, memory_order_acquire) < down_rows;)
            abandoned = wait_watched(x, &spins);
        /* abandoned (now, or while this worker was stalled): out is not written */
        if (abandoned || atomic_load(&x->abort)) {
        } else if (f->split_combine) combine_task(&f->cj, i, n);
        else combine_cols(&f->cj, 0, x->H);
    }
    if (f->span && i < TIMED_WORKERS) f->span[2 * i] = t_in, f->span[2 * i + 1] = ft_time_ns();
}

/* 0, or -1: the step abandoned */
static int run_fused(struct ft_moe_exec *x, struct ft_pool *pool, const struct ft_bank *gate_up,
                     const struct ft_bank *down, const void *gxq, size_t gxb, const void *dxq,
                     size_t dxb, int n_active, const struct act_job *aj, const struct combine_job *cj) {
    int workers = ft_pool_size(pool);
    struct fused *f = x->fj;
    memset(f, 0, sizeof *f);
    f->x = x, f->aj = *aj, f->cj = *cj, f->hook = x->hook, f->hook_ctx = x->hook_ctx;
    x->hook = NULL;
    pass_init(&f->p[0], x, gate_up, x->xg, gxq, gxb, x->gu, n_active, workers);
    f->p[0].xq_tok = x->xq_tok;
    pass_init(&f->p[1], x, down, x->act, dxq, dxb, x->y, n_active, workers);
    f->total1 = f->p[0].total;
    f->total = f->total1 + f->p[1].total;
    f->split_combine = (size_t)aj->R * x->H >= COMBINE_POOL_MIN && workers > 1;
    atomic_init(&f->next, 0);
    atomic_init(&f->done2, 0);
    atomic_init(&f->tasks, 0);
    for (int a = 0; a < n_active; a++) atomic_init(&x->done1[a], 0), atomic_init(&x->ready[a], 0);
    int timed = FT_MIN(workers, TIMED_WORKERS);
    f->span = timing_spans(x, timed, x->span, &f->launch_ns);
    if (job(x, pool, fused_task, f)) return -1;
    if (x->timing) { /* the whole job as the gate/up pass's figures */
        struct pass tp = {.launch_ns = f->launch_ns, .span = x->span};
        atomic_init(&tp.tasks, atomic_load(&f->tasks));
        add_spans(x, &tp, timed, 0);
        mark(x, FT_EXEC_PASS1);
    }
    return 0;
}

int64_t ft_moe_exec_limit_ns(const struct ft_moe_exec *x, int n_pairs) {
    return x->watchdog ? ft_watchdog_limit_ns(&x->wd, n_pairs) : INT64_MAX;
}

enum ft_status ft_moe_exec_check(struct ft_moe_exec *x, struct ft_pool *pool) {
    return x ? ft_watchdog_check(&x->wd, pool) : FT_OK;
}

/* The step of n_pairs pairs that began at x->t0_ns passed its deadline: reported, once. */
static int abandoned(struct ft_moe_exec *x, struct ft_pool *pool, int n_pairs, int n_active) {
    double waited = (ft_time_ns() - x->t0_ns) / 1e9;
    char usual_s[64];
    ft_watchdog_usual(&x->wd, n_pairs, usual_s, sizeof usual_s);
    int stuck = ft_watchdog_abandoned(&x->wd, pool);
    ft_log_error("cpu executor: a step of %d expert pairs (%d experts) hung: not finished after "
                 "%.1f s (%s; the limit is the larger of %g s and %dx that); its requests fail%s",
                 n_pairs, n_active, waited, usual_s, x->wd.floor_ns / 1e9, FT_WATCHDOG_X,
                 stuck ? "; no new step starts until its stuck worker returns" : "");
    ft_fail(FT_ERR_BUSY,
            "cpu executor: a step of %d expert pairs hung (not finished after %.1f s, %s); the "
            "request failed, retry it; if this repeats, look for swapping of the expert banks "
            "(free RAM, ulimit -l for mlock, fewer --moe-cpu-layers) or an overloaded host",
            n_pairs, waited, usual_s);
    return -1;
}

enum ft_status ft_moe_exec_init(struct ft_moe_exec **out, int max_tokens, int top_k,
                                int n_experts, int H, int I) {
    struct ft_moe_exec *x = calloc(1, sizeof *x);
    *out = NULL;
    if (!x) return ft_fail(FT_ERR_OOM, "moe executor: out of memory");
    x->max_tokens = max_tokens;
    x->max_rows = max_tokens * top_k;
    x->n_experts = n_experts;
    x->H = H;
    x->I = I;
    size_t R = (size_t)x->max_rows;
    x->count = calloc((size_t)n_experts, sizeof *x->count);
    x->offset = calloc((size_t)n_experts + 1, sizeof *x->offset);
    x->active = calloc((size_t)n_experts, sizeof *x->active);
    x->row_token = calloc(R, sizeof *x->row_token);
    x->row_e = calloc(R, sizeof *x->row_e);
    x->row_w = calloc(R, sizeof *x->row_w);
    x->xg = malloc(R * H * sizeof(float));
    x->gu = malloc(R * 2 * I * sizeof(float));
    x->act = malloc(R * I * sizeof(float));
    x->y = malloc(R * H * sizeof(float));
    x->xq = malloc(R * 2 * (size_t)H); /* ft_cpu_xq_bytes <= 2 K */
    x->xqd = malloc(R * 2 * (size_t)I);
    x->done1 = malloc((size_t)n_experts * sizeof *x->done1);
    x->ready = malloc((size_t)n_experts * sizeof *x->ready);
    x->fused = 1;
    x->xqt = malloc((size_t)max_tokens * 2 * (size_t)H);
    x->fj = malloc(sizeof *x->fj);
    x->pj = malloc(sizeof *x->pj);
    x->aj = malloc(sizeof *x->aj);
    x->cj = malloc(sizeof *x->cj);
    x->span = malloc(2 * TIMED_WORKERS * sizeof *x->span);
    ft_watchdog_init(&x->wd, "cpu executor", "swapping of the expert banks or an overloaded host",
                     FT_ENV_TEST_EXEC_STALL);
    atomic_init(&x->abort, 0);
    atomic_init(&x->stall_armed, 0);
    atomic_init(&x->stall_taken, 0);
    if (!x->fj || !x->pj || !x->aj || !x->cj || !x->span || !x->xq || !x->xqd || !x->done1 || !x->ready || !x->xqt || !x->count || !x->offset || !x->active || !x->row_token ||
        !x->row_e || !x->row_w || !x->xg || !x->gu || !x->act || !x->y) {
        ft_moe_exec_free(x);
        return ft_fail(FT_ERR_OOM, "moe executor: out of memory for %d tokens", max_tokens);
    }
    *out = x;
    return FT_OK;
}

void ft_moe_exec_free(struct ft_moe_exec *x) {
    if (!x) return;
    free(x->count);
    free(x->offset);
    free(x->active);
    free(x->row_token);
    free(x->row_e);
    free(x->row_w);
    free(x->xg);
    free(x->gu);
    free(x->act);
    free(x->y);
    free(x->xq);
    free(x->xqd);
    free((void *)x->done1);
    free((void *)x->ready);
    free(x->xqt);
    free(x->fj);
    free(x->pj);
    free(x->aj);
    free(x->cj);
    free(x->span);
    free(x);
}

void ft_moe_exec_set_fast_act(struct ft_moe_exec *x, int on) { x->fast = on; }

void ft_moe_exec_set_fused(struct ft_moe_exec *x, int on) { x->fused = on != 0; }

void ft_moe_exec_set_watchdog(struct ft_moe_exec *x, int on) { x->watchdog = on != 0; }

void ft_moe_exec_set_timing(struct ft_moe_exec *x, int on) {
    x->timing = on != 0;
    if (on == 1) memset(&x->tm, 0, sizeof x->tm);
}

struct ft_moe_exec_timing ft_moe_exec_timing(const struct ft_moe_exec *x) { return x->tm; }

void ft_moe_exec_set_hook(struct ft_moe_exec *x, void (*fn)(void *), void *ctx) {
    x->hook = fn, x->hook_ctx = ctx;
}

/* Whether each active expert's gathered rows are consecutive tokens (decode's k rows of one
 * token, always): the gate/up pass can then read each token's rounded input where it was
 * rounded (xqt) instead of a copy per row. The copies cost most of a decode step's gather:
 * their stores hit lines the last step's workers read (~5 of ~8 us on 2 threads). */
static int tokens_consecutive(const struct ft_moe_exec *x, int n_active) {
    for (int a = 0; a < n_active; a++) {
        int e = x->active[a], r0 = x->offset[e];
        for (int i = 1; i < x->count[e]; i++)
            if (x->row_token[r0 + i] != x->row_token[r0] + i) return 0;
    }
    return 1;
}

static int run_step(struct ft_moe_exec *x, struct ft_pool *pool, const struct ft_bank *gate_up,
                    const struct ft_bank *down, const struct ft_expert_act *act, const float *in,
                    const int *tok, const int *ids, const float *w, int n_pairs, float *out);

int ft_moe_exec_run_pairs(struct ft_moe_exec *x, struct ft_pool *pool,
                          const struct ft_bank *gate_up, const struct ft_bank *down,
                          const struct ft_expert_act *act, const float *in, const int *tok,
                          const int *ids, const float *w, int n_pairs, float *out) {
    int R = n_pairs;
    FT_ASSERT(R <= x->max_rows && gate_up->rows == 2 * x->I && down->cols == x->I);
    if (ft_moe_exec_check(x, pool) != FT_OK) return -1;
    x->t0_ns = ft_time_ns();
    x->deadline_ns = x->watchdog ? x->t0_ns + ft_watchdog_limit_ns(&x->wd, R) : INT64_MAX;
    atomic_store(&x->abort, 0);
    x->caller = pthread_self();
    if (++x->steps == x->wd.stall_k && ft_pool_size(pool) > 1) /* a worker to stall */
        atomic_store(&x->stall_armed, 1), atomic_store(&x->stall_taken, 0);
    int n_active = run_step(x, pool, gate_up, down, act, in, tok, ids, w, R, out);
    atomic_store(&x->stall_armed, 0);
    if (n_active < 0) return abandoned(x, pool, R, -1 - n_active); /* (the watchdog on) */
    ft_watchdog_learn(&x->wd, R, ft_time_ns() - x->t0_ns);
    return n_active;
}

/* The step; its distinct experts, or -1 - that when it was abandoned. */
static int run_step(struct ft_moe_exec *x, struct ft_pool *pool, const struct ft_bank *gate_up,
                    const struct ft_bank *down, const struct ft_expert_act *act, const float *in,
                    const int *tok, const int *ids, const float *w, int n_pairs, float *out) {
    int E = x->n_experts, H = x->H, I = x->I, R = n_pairs;
    if (x->timing) x->t_mark = ft_time_ns(), x->tm.calls++;
    memset(x->count, 0, (size_t)E * sizeof *x->count);
    int n_tok = 0;
    for (int i = 0; i < R; i++) x->count[ids[i]]++, n_tok = FT_MAX(n_tok, tok[i] + 1);
    FT_ASSERT(n_tok <= x->max_tokens);
    int n_active = 0;
    x->offset[0] = 0;
    for (int e = 0; e < E; e++) {
        x->offset[e + 1] = x->offset[e] + x->count[e];
        if (x->count[e]) x->active[n_active++] = e;
    }
    /* rows expert by expert (count reused as a fill cursor) */
    for (int e = 0; e < E; e++) x->count[e] = 0;
    for (int p = 0; p < R; p++) {
        int e = ids[p], r = x->offset[e] + x->count[e]++;
        x->row_token[r] = tok[p];
        x->row_e[r] = e;
        x->row_w[r] = w[p];
    }
    /* gate/up inputs: each token rounded once (decode's k rows share one token), then copied
     * to its rows; the exact path copies the floats. (Rounding inside the fused job while the
     * other workers wake shortened the gather but gained no GB/s.) */
    enum ft_dtype gdt = gate_up->schema->dtype, ddt = down->schema->dtype;
    size_t gxb = x->fast ? ft_cpu_xq_bytes(gdt, H) : 0, dxb = x->fast ? ft_cpu_xq_bytes(ddt, I) : 0;
    x->xq_tok = 0;
    if (gxb) {
        ft_cpu_xq_quant_pool(pool, gdt, in, H, H, n_tok, x->xqt);
        x->xq_tok = tokens_consecutive(x, n_active);
        for (int r = 0; !x->xq_tok && r < R; r++)
            memcpy((uint8_t *)x->xq + (size_t)r * gxb,
                   (const uint8_t *)x->xqt + (size_t)x->row_token[r] * gxb, gxb);
    } else {
        for (int r = 0; r < R; r++)
            memcpy(x->xg + (size_t)r * H, in + (size_t)x->row_token[r] * H, (size_t)H * sizeof(float));
    }
    mark(x, FT_EXEC_GATHER);
    struct act_job *aj = x->aj;
    struct combine_job *cj = x->cj;
    *aj = (struct act_job){x, act, R, ddt, dxb};
    *cj = (struct combine_job){x, act ? act->down_bias : NULL, out, R};
    const void *gxq = !gxb ? NULL : x->xq_tok ? x->xqt : x->xq;
    if (x->fused)
        return run_fused(x, pool, gate_up, down, gxq, gxb, dxb ? x->xqd : NULL, dxb, n_active, aj, cj)
                   ? -1 - n_active : n_active;
    if (run_pass(x, pool, gate_up, x->xg, gxq, gxb, x->gu, n_active, 0)) return -1 - n_active;
    if ((size_t)R * I < ACT_POOL_MIN) act_rows(aj, 0, R);
    else if (job(x, pool, act_task, aj)) return -1 - n_active;
    mark(x, FT_EXEC_ACT);
    if (run_pass(x, pool, down, x->act, dxb ? x->xqd : NULL, dxb, x->y, n_active, 1))
        return -1 - n_active;
    /* a combine task of an abandoned job still running writes out: it is the abandoned
     * step's, and no new step starts before it returns (the watchdog, above) */
    if ((size_t)R * H < COMBINE_POOL_MIN) combine_cols(cj, 0, H);
    else if (job(x, pool, combine_task, cj)) return -1 - n_active;
    mark(x, FT_EXEC_COMBINE);
    return n_active;
}

int ft_moe_exec_run(struct ft_moe_exec *x, struct ft_pool *pool, const struct ft_bank *gate_up,
                    const struct ft_bank *down, const struct ft_expert_act *act, const float *in,
                    const int *ids, const float *w, int T, int k, float *out) {
    int tok[T * k > 0 ? T * k : 1];
    for (int p = 0; p < T * k; p++) tok[p] = p / k;
    return ft_moe_exec_run_pairs(x, pool, gate_up, down, act, in, tok, ids, w, T * k, out);
}
