/* test_cli_bench.c — `ft bench` as a user runs it (the ft binary through popen): comma lists
 * of --vram-limit / --moe-backend and --env's switch settings give one table per combination
 * on one loaded model, in order, each from a new engine, --cycles times over; a bad value
 * fails before anything loads, naming the flag and the value. (That a reload makes switches
 * read their variables again is test_threadpool's switch_caches_until_reload.) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

/* Runs cmd, its stdout and stderr into out (truncated to cap); returns the exit status. */
static int run(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int rc = pclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static char g_out[1 << 16];

TEST(bench_lists_give_one_table_per_combination) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' bench --synthetic tiny -p 4 -n 4 -r 1 -t 1 --backend cpu "
             "--moe-backend hybrid,cpu,offload 2>&1", FT_BIN);
    EXPECT_EQ(run(cmd, g_out, sizeof g_out), 0);
    EXPECT_EQ(count(g_out, "### configuration "), 3);
    const char *a = strstr(g_out, "### configuration 1 of 3: --moe-backend hybrid");
    const char *b = strstr(g_out, "### configuration 2 of 3: --moe-backend cpu");
    const char *c = strstr(g_out, "### configuration 3 of 3: --moe-backend offload");
    EXPECT(a && b && c && a < b && b < c);
    EXPECT_EQ(count(g_out, "| tg4 |"), 3);
    EXPECT_EQ(count(g_out, "| pp4 |"), 3);
    EXPECT_EQ(count(g_out, "generating"), 1); /* the model made and loaded once */
    EXPECT_EQ(count(g_out, "loaded synthetic:tiny"), 1);
    /* a single value: one table, no configuration lines (as before) */
    snprintf(cmd, sizeof cmd, "'%s' bench --synthetic tiny -p 0 -n 4 -r 1 -t 1 --backend cpu "
             "--moe-backend cpu 2>&1", FT_BIN);
    EXPECT_EQ(run(cmd, g_out, sizeof g_out), 0);
    EXPECT_EQ(count(g_out, "### configuration"), 0);
    EXPECT_EQ(count(g_out, "| tg4 |"), 1);
}

TEST(bench_configurations_alternate_over_cycles) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' bench --synthetic tiny -p 0 -n 4 -r 1 -t 1 --backend cpu "
             "--moe-backend hybrid,cpu --cycles 2 2>&1", FT_BIN);
    EXPECT_EQ(run(cmd, g_out, sizeof g_out), 0);
    static const char *want[] = {"### configuration 1 of 2: --moe-backend hybrid (cycle 1 of 2)",
                                 "### configuration 2 of 2: --moe-backend cpu (cycle 1 of 2)",
                                 "### configuration 1 of 2: --moe-backend hybrid (cycle 2 of 2)",
                                 "### configuration 2 of 2: --moe-backend cpu (cycle 2 of 2)"};
    const char *at = g_out;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const char *f = strstr(at, want[i]);
        CHECK_(f != NULL, "missing, or out of order: %s", want[i]);
        if (f) at = f;
    }
    EXPECT_EQ(count(g_out, "| tg4 |"), 4);
    EXPECT_EQ(count(g_out, "loaded synthetic:tiny"), 1);
    /* --env was a measuring aid and is gone: a usage error, not ignored */
    snprintf(cmd, sizeof cmd, "'%s' bench --synthetic tiny -p 0 -n 4 -r 1 --env X=1 2>&1", FT_BIN);
    EXPECT_EQ(run(cmd, g_out, sizeof g_out), 2);
    EXPECT(strstr(g_out, "unknown option '--env'") != NULL);
}

TEST(bench_list_errors_name_the_flag_and_value) {
    /* each: the arguments after --synthetic tiny, and what the one-line error says; exit 2 and
     * nothing loaded */
    static const char *cases[][2] = {
        {"--backend cpu --moe-backend hybrid,bogus", "--moe-backend: 'bogus' is not hybrid, offload, cpu or auto"},
        {"--vram-limit 12G,1K", "--vram-limit: '1K' is not a size of at least 256M"},
        {"--vram-limit 1G,2G,3G,4G,5G,6G,7G,8G,9G", "--vram-limit: give 1 to 8 comma-separated values"},
        {"--cycles 0", "--cycles"},
        {"-p 32 -n 16 -c 40", "-c 40: the tests need 56 positions (-p + -n + 8)"},
        {"-c many", "-c"},
    };
    /* oversized: a list of 8 values over 255 characters (not truncated) */
    static char long_list[400], long_args[1][1300];
    for (int i = 0; i < 8; i++) strcat(long_list, i ? ",000000000000000000000000000000000000000012G" : "000000000000000000000000000000000000000012G");
    snprintf(long_args[0], sizeof long_args[0], "--vram-limit %s", long_list);
    const char *more[][2] = {{long_args[0], "--vram-limit: the list is longer than 255 characters"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases + 1; i++) {
        const char *const *cs = i < sizeof cases / sizeof *cases ? cases[i] : more[i - sizeof cases / sizeof *cases];
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "'%s' bench --synthetic tiny %s 2>&1", FT_BIN, cs[0]);
        EXPECT_EQ(run(cmd, g_out, sizeof g_out), 2);
        CHECK_(strstr(g_out, cs[1]) != NULL, "%.60s: no '%s' in: %s", cs[0], cs[1], g_out);
        CHECK_(strstr(g_out, "loaded") == NULL, "%.60s: loaded a model", cs[0]);
    }
}

/* --emulate-pin-cap SIZE (issue 28): listed in one line of the help, and every impossible use is
 * one line naming the flag, exit 2, before anything loads: a bad size, the cpu backend (given
 * before or after it), a build or host with no GPU to pin for. */
TEST(emulate_pin_cap_flag_and_its_errors) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' bench --help 2>&1", FT_BIN);
    EXPECT_EQ(run(cmd, g_out, sizeof g_out), 0);
    EXPECT_EQ(count(g_out, "--emulate-pin-cap SIZE  refuse pins past SIZE, as WSL2's driver does "
                           "(docs/wsl.md)\n"), 1);
    static const char *cases[][2] = {
        {"--emulate-pin-cap lots", "ft bench: --emulate-pin-cap: 'lots' is not a size of at least 256M (e.g. 1G, 8G)\n"},
        {"--emulate-pin-cap 1K", "ft bench: --emulate-pin-cap: '1K' is not a size of at least 256M"},
        {"--emulate-pin-cap -1G", "ft bench: --emulate-pin-cap: '-1G' is not a size"},
        {"--backend cpu --emulate-pin-cap 8G", "ft bench: --emulate-pin-cap: the cpu backend pins nothing; "
                                               "use --backend offload (or drop --emulate-pin-cap)\n"},
#ifndef FT_HAVE_CUDA
        {"--backend offload --emulate-pin-cap 8G", "ft bench: --emulate-pin-cap: this build has no CUDA, "
                                                   "so nothing is pinned; build with -DFT_CUDA=ON (or drop the flag)\n"},
        {"--emulate-pin-cap 8G --backend cpu", "ft bench: --emulate-pin-cap: this build has no CUDA"},
#else
        {"--emulate-pin-cap 8G --backend cpu", "ft bench: --emulate-pin-cap: "},
#endif
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "'%s' bench --synthetic tiny -p 4 -n 4 -r 1 %s 2>&1", FT_BIN, cases[i][0]);
        EXPECT_EQ(run(cmd, g_out, sizeof g_out), 2);
        CHECK_(strstr(g_out, cases[i][1]) != NULL, "%s: no '%s' in: %s", cases[i][0], cases[i][1], g_out);
        CHECK_(count(g_out, "\n") == 1, "%s: not one line: %s", cases[i][0], g_out);
        CHECK_(strstr(g_out, "loaded") == NULL, "%s: loaded a model", cases[i][0]);
    }
}

TEST_MAIN("cli_bench")
