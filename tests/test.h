/* test.h — the tiny test harness. One executable per module:
 *   #include "test.h"
 *   TEST(parses_header) { EXPECT(x == 1); EXPECT_NEAR(a, b, 1e-6); }
 *   TEST_MAIN("safetensors")
 * The last line printed is "test_<module>: N passed, N failed[, N skipped]"; exit status 1 on
 * any failure. A test passes when it ran at least one check and none failed (an empty test
 * fails). A test this machine cannot run (an instruction set it lacks) calls SKIP(reason)
 * before any check: it is reported as skipped with the reason, never counted as passed. */
#ifndef FT_TEST_H
#define FT_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
static struct { const char *name; test_fn fn; } g_tests[512];
static int g_n_tests, g_checks, g_failures;
static const char *g_skip; /* the running test's SKIP reason */

static void test_register(const char *name, test_fn fn) {
    g_tests[g_n_tests].name = name;
    g_tests[g_n_tests++].fn = fn;
}

#define TEST(name)                                                                        \
    static void name(void);                                                               \
    __attribute__((constructor)) static void reg_##name(void) { test_register(#name, name); } \
    static void name(void)

#define CHECK_(cond, ...)                                                                 \
    do {                                                                                  \
        g_checks++;                                                                       \
        if (!(cond)) {                                                                    \
            g_failures++;                                                                 \
            fprintf(stderr, "  FAIL %s:%d: ", __FILE__, __LINE__);                        \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
        }                                                                                 \
    } while (0)

#define SKIP(reason)                                                                      \
    do {                                                                                  \
        g_skip = (reason);                                                                \
        return;                                                                           \
    } while (0)

#define EXPECT(cond) CHECK_(cond, "%s", #cond)
#define EXPECT_EQ(a, b)                                                                   \
    do {                                                                                  \
        long long a_ = (long long)(a), b_ = (long long)(b);                               \
        CHECK_(a_ == b_, "%s == %s (%lld vs %lld)", #a, #b, a_, b_);                      \
    } while (0)
#define EXPECT_NEAR(a, b, tol)                                                            \
    do {                                                                                  \
        double a_ = (a), b_ = (b);                                                        \
        CHECK_(fabs(a_ - b_) <= (tol), "%s ~ %s (%.9g vs %.9g, tol %g)", #a, #b, a_, b_,  \
               (double)(tol));                                                            \
    } while (0)
#define EXPECT_STREQ(a, b)                                                                \
    do {                                                                                  \
        const char *a_ = (a), *b_ = (b);                                                  \
        CHECK_(a_ && b_ && strcmp(a_, b_) == 0, "%s == %s (\"%s\" vs \"%s\")", #a, #b,    \
               a_ ? a_ : "(null)", b_ ? b_ : "(null)");                                   \
    } while (0)
/* Checks that `s` contains `sub` (error messages name the thing). */
#define EXPECT_CONTAINS(s, sub)                                                           \
    do {                                                                                  \
        const char *s_ = (s), *u_ = (sub);                                                \
        CHECK_(s_ && strstr(s_, u_), "\"%s\" contains \"%s\"", s_ ? s_ : "(null)", u_);   \
    } while (0)
#define EXPECT_OK(expr)                                                                   \
    do {                                                                                  \
        int st_ = (int)(expr);                                                            \
        CHECK_(st_ == 0, "%s returned %d: %s", #expr, st_, ft_error());                   \
    } while (0)

/* Runs the tests whose name contains argv[1] (all without it). A test file that needs set-up
 * around the run (a thread pool, a temp folder) writes its own main and calls this. */
static int test_run(const char *module, int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_n_tests; i++) {
        if (argc > 1 && !strstr(g_tests[i].name, argv[1])) continue;
        int c0 = g_checks, f0 = g_failures;
        g_skip = NULL;
        g_tests[i].fn();
        if (g_skip && g_checks == c0) {
            fprintf(stderr, "skip %s: %s\n", g_tests[i].name, g_skip);
            skipped++;
            continue;
        }
        int ok = g_failures == f0 && g_checks > c0 && !g_skip;
        if (g_checks == c0) fprintf(stderr, "  FAIL %s: no checks ran\n", g_tests[i].name);
        fprintf(stderr, "%s %s\n", ok ? "ok  " : "FAIL", g_tests[i].name);
        ok ? passed++ : failed++;
    }
    if (skipped) printf("test_%s: %d passed, %d failed, %d skipped\n", module, passed, failed, skipped);
    else printf("test_%s: %d passed, %d failed\n", module, passed, failed);
    return failed ? 1 : 0;
}

#define TEST_MAIN(module) \
    int main(int argc, char **argv) { return test_run(module, argc, argv); }

#endif
