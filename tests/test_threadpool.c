/* test_threadpool.c — the thread pool (core/threadpool.c): every task of each job runs once,
 * a late worker leaves its task to the others,
 * and the pinned pool (the offload backends' CPU executor) puts worker i on the i-th physical
 * core this process may use (core/sys.c: ft_sys_core_cpus), or, when fewer cores are allowed
 * than threads (checked in a child restricted by sched_setaffinity), stays unpinned with one
 * log line and still works; the watch (the CPU forward's watchdog) abandons a job whose worker
 * hangs and runs nothing more until it ends, and the watchdog's bookkeeping (core/watchdog.c)
 * learns its limits and waits for a stuck worker at most its floor. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/env.h"
#include "core/log.h"
#include "core/sys.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "core/watchdog.h"
#include "test.h"

#define MAXW 64

struct probe {
    atomic_int calls;
    atomic_int n_seen; /* every worker stores the same n */
    int ncpu[MAXW]; /* CPUs in each worker's affinity mask */
    int cpu[MAXW];  /* the one CPU, when ncpu is 1 */
};

static void probe_task(void *ctx, int i, int n) {
    struct probe *p = ctx;
    cpu_set_t set;
    atomic_fetch_add(&p->calls, 1);
    atomic_store(&p->n_seen, n);
    if (i >= MAXW || pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return;
    p->ncpu[i] = CPU_COUNT(&set);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) p->cpu[i] = c;
}

static char g_line[512];
static void sink(void *ctx, enum ft_log_level lvl, const char *line) {
    (void)ctx, (void)lvl;
    if (strstr(line, "cpu pool:")) snprintf(g_line, sizeof g_line, "%s", line);
}

/* The environment table: values read once and kept until ft_env_reload; a number, or the
 * default when unset, empty or not numeric. */
TEST(env_table_reads_once_until_reload) {
    setenv("FT_PROFILE", "2", 1);
    ft_env_reload();
    EXPECT_EQ(ft_env_int(FT_ENV_PROFILE, 7), 2);
    setenv("FT_PROFILE", "0", 1);
    EXPECT_EQ(ft_env_int(FT_ENV_PROFILE, 7), 2); /* kept */
    ft_env_reload();
    EXPECT_EQ(ft_env_int(FT_ENV_PROFILE, 7), 0);
    setenv("FT_PROFILE", "-12", 1);
    ft_env_reload();
    EXPECT_EQ(ft_env_int(FT_ENV_PROFILE, 7), -12);
    setenv("FT_PROFILE", "", 1);
    ft_env_reload();
    EXPECT_EQ(ft_env_int(FT_ENV_PROFILE, 7), 7);
    EXPECT(ft_env_str(FT_ENV_PROFILE) == NULL);
    setenv("FT_PROFILE", "split", 1);
    ft_env_reload();
    EXPECT_EQ(ft_env_int(FT_ENV_PROFILE, 7), 7);
    EXPECT_STREQ(ft_env_str(FT_ENV_PROFILE), "split");
    unsetenv("FT_PROFILE");
    ft_env_reload();
    EXPECT_EQ(ft_env_int(FT_ENV_PROFILE, 7), 7);
}

/* --help-env lists every entry with its default, and the value set now */
TEST(env_table_prints_every_entry) {
    setenv("FREETOKEN_PIN_BUDGET_GB", "6", 1);
    ft_env_reload();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ft_env_print(f);
    fclose(f);
    static const char *names[] = {"FREETOKEN_PIN_BUDGET_GB", "FREETOKEN_CACHE", "FT_PROFILE"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) EXPECT(strstr(buf, names[i]) != NULL);
#ifdef FT_TESTING /* the fault hooks, test builds only */
    EXPECT(strstr(buf, "FT_TEST_EXEC_STALL") != NULL);
    EXPECT(strstr(buf, "FT_TEST_POOL_STALL") != NULL);
    EXPECT(strstr(buf, "FT_TEST_SAMPLE_STALL") != NULL);
#endif
    EXPECT(strstr(buf, "set now: 6") != NULL);
    free(buf);
    unsetenv("FREETOKEN_PIN_BUDGET_GB");
    ft_env_reload();
}

TEST(core_cpus_one_per_physical_core_within_affinity) {
    int cpus[1024];
    int n = ft_sys_core_cpus(cpus, 1024);
    cpu_set_t set;
    EXPECT(sched_getaffinity(0, sizeof set, &set) == 0);
    EXPECT(n >= 1 && n <= CPU_COUNT(&set));
    EXPECT(n <= ft_sys_physical_cores());
    for (int i = 0; i < n; i++) {
        EXPECT(CPU_ISSET(cpus[i], &set));
        for (int j = 0; j < i; j++) EXPECT(cpus[i] != cpus[j]);
    }
    fprintf(stderr, "  %d physical cores allowed (of %d logical CPUs)\n", n, CPU_COUNT(&set));
}

TEST(pinned_pool_one_core_per_worker) {
    int cpus[MAXW];
    int n = ft_sys_core_cpus(cpus, MAXW);
    if (n > 8) n = 8;
    struct ft_pool *p = NULL;
    ft_log_set_sink(sink, NULL);
    EXPECT_OK(ft_pool_init_pinned(&p, n));
    ft_log_set_sink(NULL, NULL);
    if (!p) return;
    EXPECT_EQ(ft_pool_pinned(p), n - 1);
    struct probe pr = {0};
    for (int rep = 0; rep < 3; rep++) ft_pool_run(p, probe_task, &pr);
    EXPECT_EQ(atomic_load(&pr.calls), 3 * n);
    EXPECT_EQ(pr.n_seen, n);
    for (int i = 1; i < n; i++) {
        const int c = ft_pool_worker_cpu(p, i);
        CHECK_(c == cpus[i], "worker %d: pinned to CPU %d, want CPU %d", i, c, cpus[i]);
    }
    EXPECT_CONTAINS(g_line, n > 1 ? "workers pinned to CPUs" : "cpu pool: 1 threads");
    fprintf(stderr, "  %s\n", g_line);
    ft_pool_free(p);
    /* a plain pool pins nothing */
    EXPECT_OK(ft_pool_init(&p, 2));
    EXPECT_EQ(ft_pool_pinned(p), 0);
    ft_pool_free(p);
}

/* Every task of every job runs exactly once, on some thread. */
struct tally {
    atomic_int count[MAXW];
    atomic_int n;
};

static void tally_task(void *ctx, int i, int n) {
    struct tally *t = ctx;
    atomic_store(&t->n, n);
    atomic_fetch_add(&t->count[i], 1);
}

struct held_run {
    struct ft_pool *p;
    struct tally t;
    int jobs;
    atomic_int done;
};

static void *held_jobs(void *arg) {
    struct held_run *h = arg;
    for (int j = 0; j < h->jobs; j++) ft_pool_run(h->p, tally_task, &h->t);
    atomic_store(&h->done, 1);
    return NULL;
}

/* A worker held back (as an OS that wakes it late would) does not hold the job: its task is
 * claimed by the caller or another worker, and every task still runs exactly once. Before
 * tasks were claimed, worker i always ran task i, and these jobs waited for the held one. */
TEST(late_worker_leaves_its_task_to_others) {
    struct ft_pool *p = NULL;
    EXPECT_OK(ft_pool_init(&p, 4));
    if (!p) return;
    struct held_run h = {.p = p, .jobs = 200};
    for (int w = 1; w < 4; w++) ft_pool_hold_worker(p, w, w == 2);
    pthread_t th;
    EXPECT(pthread_create(&th, NULL, held_jobs, &h) == 0);
    for (int ms = 0; ms < 10000 && !atomic_load(&h.done); ms++) usleep(1000);
    const int finished = atomic_load(&h.done);
    ft_pool_hold_worker(p, 2, 0); /* released: the jobs end either way */
    pthread_join(th, NULL);
    CHECK_(finished, "200 jobs did not finish in 10 s while worker 2 was held: they wait for it");
    for (int i = 0; i < 4; i++) EXPECT_EQ(atomic_load(&h.t.count[i]), 200);
    EXPECT_EQ(atomic_load(&h.t.n), 4);
    /* released, and many short jobs back to back: still exactly once each */
    struct tally t = {0};
    for (int j = 0; j < 5000; j++) ft_pool_run(p, tally_task, &t);
    for (int i = 0; i < 4; i++) EXPECT_EQ(atomic_load(&t.count[i]), 5000);
    ft_pool_free(p);
}

/* In a child allowed one CPU: a pinned pool of 3 cannot have a core per worker, so it stays
 * unpinned (and says so) and still runs every job on every worker; the default size is 1. */
TEST(pinned_pool_with_too_few_cores_stays_unpinned) {
    pid_t pid = fork();
    if (pid == 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) _exit(10);
        int cpus[4];
        if (ft_sys_core_cpus(cpus, 4) != 1) _exit(11);
        struct ft_pool *p = NULL;
        ft_log_set_sink(sink, NULL);
        if (ft_pool_init_pinned(&p, 3) != FT_OK) _exit(12);
        if (ft_pool_pinned(p) != 0) _exit(13);
        if (!strstr(g_line, "cpu pool: 3 threads unpinned (this process may use 1 physical core)")) _exit(14);
        struct probe pr = {0};
        ft_pool_run(p, probe_task, &pr);
        if (atomic_load(&pr.calls) != 3) _exit(15);
        ft_pool_free(p);
        /* the default size follows the CPU set, not the machine: one thread here */
        if (ft_pool_init_pinned(&p, 0) != FT_OK || ft_pool_size(p) != 1) _exit(16);
        ft_pool_free(p);
        _exit(0);
    }
    int status = 0;
    EXPECT(waitpid(pid, &status, 0) == pid);
    CHECK_(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed at step %d",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static int tally_sum(struct tally *t) {
    int sum = 0;
    for (int i = 0; i < MAXW; i++) sum += atomic_load(&t->count[i]);
    return sum;
}

static double secs_since(int64_t t0) { return (ft_time_ns() - t0) / 1e9; }

/* The watch (ft_pool_watch) with a 100 ms limit a job and the hook stalling a worker of the
 * 2nd watched job 700 ms after its task (ft_pool_stall, as FT_TEST_POOL_STALL): the 1st job
 * runs whole; the caller of the 2nd returns at the limit, long before the stall ends, with
 * the watch tripped and the pool busy; later jobs (plain or ft_pool_run_until) run no task and
 * do not wait; a job started while the worker is still stuck waits at most the limit. Once
 * it is back, every job runs every task once again. Without the hook's stall reaching past the
 * limit (a 10 s limit), the stalled job just takes longer. */
TEST(watch_abandons_a_job_whose_worker_hangs) {
    struct ft_pool *p = NULL;
    EXPECT_OK(ft_pool_init(&p, 3));
    if (!p) return;
    struct tally t = {0};
    ft_pool_stall(p, 2, 700);
    ft_pool_watch(p, 100 * 1000000LL);
    ft_pool_run(p, tally_task, &t);
    EXPECT_EQ(tally_sum(&t), 3);
    EXPECT_EQ(ft_pool_watch_tripped(p), 0);
    int64_t t0 = ft_time_ns();
    ft_pool_run(p, tally_task, &t); /* a worker holds its task 700 ms */
    double took = secs_since(t0);
    CHECK_(took >= 0.09 && took < 0.5, "the stalled job returned after %.3f s (limit 0.1 s)", took);
    EXPECT_EQ(ft_pool_watch_tripped(p), 1);
    EXPECT_EQ(ft_pool_busy(p), 1);
    /* the abandoned job's tasks counted into the pool's copy of t, which does not come back */
    const int ran = tally_sum(&t);
    EXPECT_EQ(ran, 3);
    t0 = ft_time_ns();
    for (int j = 0; j < 100; j++) ft_pool_run(p, tally_task, &t); /* tripped: no task runs */
    EXPECT_EQ(ft_pool_run_until(p, tally_task, &t, -1), FT_ERR_BUSY);
    CHECK_(secs_since(t0) < 0.05, "jobs after the trip took %.3f s", secs_since(t0));
    EXPECT_EQ(tally_sum(&t), ran);
    EXPECT_EQ(ft_pool_watch_end(p), 1);
    EXPECT_EQ(ft_pool_watch_tripped(p), 0);
    /* still stuck: a new watch's job waits at most its limit for it, then trips */
    ft_pool_watch(p, 50 * 1000000LL);
    t0 = ft_time_ns();
    ft_pool_run(p, tally_task, &t);
    took = secs_since(t0);
    CHECK_(took >= 0.045 && took < 0.4, "a job behind the stuck worker returned after %.3f s", took);
    EXPECT_EQ(ft_pool_watch_tripped(p), 1);
    EXPECT_EQ(tally_sum(&t), ran);
    EXPECT_EQ(ft_pool_watch_end(p), 1);
    EXPECT_EQ(ft_pool_drain(p, ft_time_ns() + 2000000000LL), FT_OK); /* back after ~0.7 s */
    EXPECT_EQ(ft_pool_busy(p), 0);
    EXPECT_EQ(tally_sum(&t), ran);
    /* back: every task of every job once, watched or not */
    struct tally u = {0};
    ft_pool_watch(p, 100 * 1000000LL);
    for (int j = 0; j < 500; j++) ft_pool_run(p, tally_task, &u);
    EXPECT_EQ(ft_pool_watch_end(p), 0);
    for (int j = 0; j < 500; j++) ft_pool_run(p, tally_task, &u);
    for (int i = 0; i < 3; i++) EXPECT_EQ(atomic_load(&u.count[i]), 1000);
    /* a limit the stall stays within: the job waits the stall out, nothing trips */
    ft_pool_stall(p, 1, 300);
    ft_pool_watch(p, 10 * 1000000000LL);
    t0 = ft_time_ns();
    ft_pool_run(p, tally_task, &u);
    took = secs_since(t0);
    CHECK_(took >= 0.29, "the stalled job under a 10 s limit took %.3f s", took);
    EXPECT_EQ(ft_pool_watch_end(p), 0);
    EXPECT_EQ(ft_pool_busy(p), 0);
    for (int i = 0; i < 3; i++) EXPECT_EQ(atomic_load(&u.count[i]), 1001);
    ft_pool_free(p);
}

/* A task's context is the pool's copy, taken when the job starts: a task wedged before its first
 * line (the hook stalls the worker that claims it, -ms, before it calls the task) whose job is
 * abandoned reads, when it wakes, the context the caller gave, though the caller has freed
 * (and scribbled over) its own since: before the copy it read freed memory (ASan: heap use
 * after free; otherwise the scribbled value). Writes to the context come back once every task
 * is done, as before; untyped contexts (void *, NULL) and unwatched jobs' are not copied. */
struct late_ctx {
    int magic;
    atomic_int *seen; /* [4]: the magic each task saw, + 1 */
};

static void late_task(void *ctx, int i, int n) {
    (void)n;
    const struct late_ctx *c = ctx;
    atomic_store(&c->seen[i], c->magic + 1);
}

static _Atomic(void *) g_void_seen;
static void void_task(void *ctx, int i, int n) {
    (void)i, (void)n;
    atomic_store(&g_void_seen, ctx);
}

TEST(task_wedged_before_its_first_line_reads_the_pools_copy) {
    struct ft_pool *p = NULL;
    EXPECT_OK(ft_pool_init(&p, 3));
    if (!p) return;
    static atomic_int seen[4];
    for (int i = 0; i < 4; i++) atomic_store(&seen[i], 0);
    struct late_ctx *c = malloc(sizeof *c);
    c->magic = 4242, c->seen = seen;
    ft_pool_stall(p, 1, -400); /* before its task: it has not even read its context */
    ft_pool_watch(p, 50 * 1000000LL);
    int64_t t0 = ft_time_ns();
    ft_pool_run(p, late_task, c);
    EXPECT(secs_since(t0) < 0.35);
    EXPECT_EQ(ft_pool_watch_end(p), 1);
    EXPECT_EQ(ft_pool_busy(p), 1);
    int waiting = 0; /* the stalled worker's task has not run */
    for (int i = 0; i < 3; i++) waiting += atomic_load(&seen[i]) == 0;
    EXPECT_EQ(waiting, 1);
    memset(c, 0x5a, sizeof *c); /* the caller's frame reused, then gone */
    c->seen = seen;
    free(c);
    EXPECT_EQ(ft_pool_drain(p, ft_time_ns() + 2000000000LL), FT_OK);
    for (int i = 0; i < 3; i++) CHECK_(atomic_load(&seen[i]) == 4243, "task %d saw %d", i, atomic_load(&seen[i]) - 1);
    /* writes come back once a watched job is whole; an untyped context, or an unwatched
     * job's, is passed as it is */
    struct tally t = {0};
    ft_pool_watch(p, 1000 * 1000000LL);
    ft_pool_run(p, tally_task, &t);
    EXPECT_EQ(tally_sum(&t), 3);
    int x;
    void *vx = &x;
    ft_pool_run(p, void_task, vx);
    EXPECT(atomic_load(&g_void_seen) == vx);
    EXPECT_EQ(ft_pool_watch_end(p), 0);
    ft_pool_run(p, void_task, &x);
    EXPECT(atomic_load(&g_void_seen) == (void *)&x);
    ft_pool_free(p);
}

/* A one-thread pool has no worker to hang: watched jobs run on the caller, never trip. */
TEST(watch_on_a_one_thread_pool_runs_every_job) {
    struct ft_pool *p = NULL;
    EXPECT_OK(ft_pool_init(&p, 1));
    if (!p) return;
    struct tally t = {0};
    ft_pool_stall(p, 1, 500);
    ft_pool_watch(p, 1000000LL);
    for (int j = 0; j < 10; j++) ft_pool_run(p, tally_task, &t);
    EXPECT_EQ(ft_pool_watch_end(p), 0);
    EXPECT_EQ(atomic_load(&t.count[0]), 10);
    ft_pool_free(p);
}

static char g_wd_line[512];
static int g_wd_back;
static void wd_sink(void *ctx, enum ft_log_level lvl, const char *line) {
    (void)ctx, (void)lvl;
    if (strstr(line, "came back")) g_wd_back++, snprintf(g_wd_line, sizeof g_wd_line, "%s", line);
}

/* The watchdog's bookkeeping: the hook's K:MS:FLOOR_MS read from its variable; the limit is the
 * floor until a step of the size class (log2) is learned, then 50x its running mean; the check
 * passes at once on an idle pool, waits at most the floor for a stuck worker and fails with
 * FT_ERR_BUSY ("still stuck"), and once the worker is back passes and says so, once. */
TEST(watchdog_learns_limits_and_waits_for_a_stuck_worker) {
    setenv("FT_TEST_POOL_STALL", "3:400:150", 1);
    ft_env_reload();
    struct ft_watchdog w;
    ft_watchdog_init(&w, "test pool", "nothing", FT_ENV_TEST_POOL_STALL);
    unsetenv("FT_TEST_POOL_STALL");
    ft_env_reload();
    EXPECT_EQ(w.stall_k, 3);
    EXPECT_EQ(w.stall_ms, 400);
    EXPECT_EQ(w.floor_ns, 150 * 1000000LL);
    EXPECT_EQ(ft_watchdog_limit_ns(&w, 8), 150 * 1000000LL);
    ft_watchdog_learn(&w, 8, 10 * 1000000LL); /* 10 ms: 50x is 0.5 s */
    EXPECT_EQ(ft_watchdog_limit_ns(&w, 15), 500 * 1000000LL); /* the same class */
    EXPECT_EQ(ft_watchdog_limit_ns(&w, 16), 150 * 1000000LL); /* the next: not learned */
    ft_watchdog_learn(&w, 8, 18 * 1000000LL);                 /* mean += (18 - 10) / 8 */
    EXPECT_EQ(ft_watchdog_limit_ns(&w, 8), 550 * 1000000LL);
    char usual[64];
    ft_watchdog_usual(&w, 8, usual, sizeof usual);
    EXPECT_STREQ(usual, "usually 11.00 ms");
    ft_watchdog_usual(&w, 1, usual, sizeof usual);
    EXPECT_STREQ(usual, "not learned yet");
    struct ft_watchdog d;
    setenv("FT_TEST_SAMPLE_STALL", "2:-300", 1); /* -MS: before the task */
    ft_env_reload();
    ft_watchdog_init(&d, "test pool", "nothing", FT_ENV_TEST_SAMPLE_STALL);
    unsetenv("FT_TEST_SAMPLE_STALL");
    ft_env_reload();
    EXPECT_EQ(d.stall_k, 2);
    EXPECT_EQ(d.stall_ms, -300);
    ft_watchdog_init(&d, "test pool", "nothing", FT_ENV_TEST_POOL_STALL); /* unset: defaults */
    EXPECT_EQ(d.stall_k, 0);
    EXPECT_EQ(d.floor_ns, (int64_t)FT_WATCHDOG_FLOOR_S * 1000000000LL);

    struct ft_pool *p = NULL;
    EXPECT_OK(ft_pool_init(&p, 2));
    if (!p) return;
    EXPECT_OK(ft_watchdog_check(&w, p));
    struct tally t = {0};
    ft_pool_stall(p, 1, 600);
    ft_pool_watch(p, 20 * 1000000LL);
    ft_pool_run(p, tally_task, &t);
    EXPECT_EQ(ft_pool_watch_end(p), 1);
    EXPECT_EQ(ft_watchdog_abandoned(&w, p), 1);
    ft_log_set_sink(wd_sink, NULL);
    int64_t t0 = ft_time_ns();
    EXPECT_EQ(ft_watchdog_check(&w, p), FT_ERR_BUSY);
    double took = secs_since(t0);
    CHECK_(took >= 0.14 && took < 0.45, "the check waited %.3f s (floor 0.15 s)", took);
    EXPECT_CONTAINS(ft_error(), "test pool: a worker is still stuck");
    EXPECT_EQ(g_wd_back, 0);
    enum ft_status st = FT_ERR_BUSY;
    for (int i = 0; i < 8 && st != FT_OK; i++) st = ft_watchdog_check(&w, p); /* back at ~0.6 s */
    EXPECT_OK(st);
    EXPECT_OK(ft_watchdog_check(&w, p));
    ft_log_set_sink(NULL, NULL);
    EXPECT_EQ(g_wd_back, 1);
    EXPECT_CONTAINS(g_wd_line, "test pool: the worker stuck in an abandoned step came back");
    ft_pool_free(p);
}

TEST_MAIN("threadpool")
