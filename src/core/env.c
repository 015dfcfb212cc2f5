/* env.c — the environment table (see env.h). The only file of the engine that calls getenv. */
#include "core/env.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct entry {
    const char *name, *dflt, *meaning;
    int test_only; /* read by FT_TESTING builds only */
};

static const struct entry k_table[FT_ENV_N] = {
    [FT_ENV_PIN_BUDGET_GB] = {"FREETOKEN_PIN_BUDGET_GB", "uncapped; WSL2: 40% of RAM, probed",
                              "pinned memory for expert banks: 8 (GiB), 12G, 512M; --pin-budget wins", 0},
    [FT_ENV_CACHE] = {"FREETOKEN_CACHE", "$XDG_CACHE_HOME/freetoken or ~/.cache/freetoken",
                      "where ft bench bw stores bandwidth profiles (the split reads them)", 0},
    [FT_ENV_XDG_CACHE_HOME] = {"XDG_CACHE_HOME", "~/.cache", "standard; see FREETOKEN_CACHE", 0},
    [FT_ENV_HOME] = {"HOME", "/tmp", "standard; see FREETOKEN_CACHE", 0},
    [FT_ENV_PROFILE] = {"FT_PROFILE", "0",
                        "1: GPU backends print at exit where decode time goes; 2: also per-op "
                        "GPU times (eager, no CUDA graphs)", 0},
    [FT_ENV_TEST_COPY_FAULT] = {"FT_TEST_COPY_FAULT", "unset",
                                "noop:K or zero:K: the K-th expert copy is dropped or zeroed", 1},
    [FT_ENV_TEST_KERNEL_RELEASE] = {"FT_TEST_KERNEL_RELEASE", "unset",
                                    "a kernel release (or /proc/version file) to detect", 1},
    [FT_ENV_TEST_SLOW_EMIT_MS] = {"FT_TEST_SLOW_EMIT_MS", "unset",
                                  "ft chat waits this long per printed piece", 1},
    [FT_ENV_TEST_UPLOAD_FAULT] = {"FT_TEST_UPLOAD_FAULT", "unset",
                                  "K: the K-th weight uploaded at load is zeroed on the device", 1},
    [FT_ENV_TEST_EXEC_STALL] = {"FT_TEST_EXEC_STALL", "unset",
                                "K:MS[:FLOOR_MS]: a worker of the K-th CPU-executor call stalls "
                                "MS ms; FLOOR_MS replaces the watchdog's 10 s floor", 1},
    [FT_ENV_TEST_POOL_STALL] = {"FT_TEST_POOL_STALL", "unset",
                                "K:MS[:FLOOR_MS]: a worker of the K-th pool job of the CPU forward "
                                "stalls MS ms after its task (-MS: before it); FLOOR_MS replaces "
                                "its watchdog's 10 s floor", 1},
    [FT_ENV_TEST_SAMPLE_STALL] = {"FT_TEST_SAMPLE_STALL", "unset",
                                  "K:MS[:FLOOR_MS]: a worker of the scheduler's K-th pool sampling "
                                  "job stalls MS ms after its rows (-MS: before it draws them); "
                                  "FLOOR_MS replaces its watchdog's 10 s floor", 1},
    [FT_ENV_TEST_ALLOC_FAULT] = {"FT_TEST_ALLOC_FAULT", "unset",
                                 "K: the K-th GPU allocation after load (a CUDA graph's "
                                 "instantiation, a buffer) fails as out of memory", 1},
    [FT_ENV_TEST_COPY_STALL] = {"FT_TEST_COPY_STALL", "unset",
                                "K:MS[:FLOOR_MS]: the copy stream stalls MS ms before the K-th "
                                "decode copy batch; FLOOR_MS replaces the copy watchdog's 10 s "
                                "floor", 1},
};

static const char *g_val[FT_ENV_N];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef FT_TESTING
static const int k_testing = 1;
#else
static const int k_testing = 0;
#endif

static void load(void) {
    for (int i = 0; i < FT_ENV_N; i++) {
        const char *v = k_table[i].test_only && !k_testing ? NULL : getenv(k_table[i].name);
        g_val[i] = v && *v ? v : NULL;
    }
}

const char *ft_env_str(enum ft_env id) {
    pthread_once(&g_once, load);
    return id >= 0 && id < FT_ENV_N ? g_val[id] : NULL;
}

int ft_env_int(enum ft_env id, int dflt) {
    const char *v = ft_env_str(id);
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    return v && end != v ? (int)x : dflt;
}

void ft_env_reload(void) {
    pthread_once(&g_once, load);
    load();
}

void ft_env_print(FILE *out) {
    pthread_once(&g_once, load);
    fputs("Environment variables ft reads (once, at start-up):\n", out);
    for (int i = 0; i < FT_ENV_N; i++) {
        const struct entry *e = &k_table[i];
        if (e->test_only && !k_testing) continue;
        fprintf(out, "  %-24s %s%s\n", e->name, e->test_only ? "(test builds) " : "", e->meaning);
        fprintf(out, "  %-24s default: %s%s%s\n", "", e->dflt, g_val[i] ? "; set now: " : "",
                g_val[i] ? g_val[i] : "");
    }
}

void ft_env_cache_dir(char *buf, size_t cap) {
    const char *e = ft_env_str(FT_ENV_CACHE), *x = ft_env_str(FT_ENV_XDG_CACHE_HOME);
    const char *h = ft_env_str(FT_ENV_HOME);
    if (e && *e) snprintf(buf, cap, "%s", e);
    else if (x && *x) snprintf(buf, cap, "%s/freetoken", x);
    else snprintf(buf, cap, "%s/.cache/freetoken", h && *h ? h : "/tmp");
}

void ft_env_file_word(const char *in, char *out, size_t cap) {
    size_t n = 0;
    for (; *in && n + 1 < cap; in++) {
        char c = *in;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (ok) out[n++] = c;
        else if (n && out[n - 1] != '-') out[n++] = '-';
    }
    out[n] = 0;
}

void ft_env_mkdirs(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
}
