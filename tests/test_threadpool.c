/* test_threadpool.c — the thread pool (core/threadpool.c): every task of each job runs once,
 * a late worker leaves its task to the others,
 * and the pinned pool (the offload backends' CPU executor) puts worker i on the i-th physical
 * core this process may use (core/sys.c: ft_sys_core_cpus), or, when fewer cores are allowed
 * than threads (checked in a child restricted by sched_setaffinity), stays unpinned with one
 * log line and still works. */
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

TEST_MAIN("threadpool")
