/* test_residency.c — the host residency manager (mem/residency.c, mem/platform.c) on a plain
 * CPU: size and --moe-cpu-layers grammars, pin budget sources on a faked WSL2, the pin probe
 * and the pinned -> locked -> pageable chain against a fake pinner (refuses after N bytes,
 * fails on the k-th call), a real RLIMIT_MEMLOCK in a forked child, the exact log lines, and a
 * fixture model whose banks exceed the budget generating the same tokens as the uncapped run. */
#define _GNU_SOURCE
#include <linux/capability.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/threadpool.h"
#include "engine/forward.h"
#include "format/safetensors.h"
#include "mem/platform.h"
#include "mem/residency.h"
#include "model/model.h"
#include "core/env.h"
#include "test.h"

#ifndef FT_TESTING
/* The fake pinner and the kernel-release override exist only in FT_TESTING builds. */
/* A build without them cannot test anything here: fail loudly rather than pass by skipping. */
TEST(needs_ft_testing_build) {
    CHECK_(0, "this build has no FT_TESTING hooks: configure with -DFT_TESTING=ON to run it");
}
#else

/* Every test's profiles (the pin walls the fake drivers leave) in a directory of its own, not
 * in the user's ~/.cache: set before the first read of the environment. */
static char g_cache[64] = "/tmp/ft_test_cache_XXXXXX";
__attribute__((constructor)) static void isolate_cache(void) {
    if (mkdtemp(g_cache)) setenv("FREETOKEN_CACHE", g_cache, 1);
}

#define KIB ((uint64_t)1024)
#define MIB ((uint64_t)1 << 20)
#define GIB_ ((uint64_t)1 << 30)

/* ---- log capture ------------------------------------------------------------------------ */

static struct {
    pthread_mutex_t mu;
    char lines[256][512];
    enum ft_log_level lvl[256];
    int n;
} g_log = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void sink(void *ctx, enum ft_log_level lvl, const char *line) {
    (void)ctx;
    pthread_mutex_lock(&g_log.mu);
    if (g_log.n < 256) {
        snprintf(g_log.lines[g_log.n], sizeof g_log.lines[0], "%s", line);
        g_log.lvl[g_log.n++] = lvl;
    }
    pthread_mutex_unlock(&g_log.mu);
}
static void log_start(void) {
    g_log.n = 0;
    ft_log_set_sink(sink, NULL);
}
static void log_stop(void) { ft_log_set_sink(NULL, NULL); }
static int log_has(const char *line) {
    for (int i = 0; i < g_log.n; i++)
        if (!strcmp(g_log.lines[i], line)) return 1;
    fprintf(stderr, "  missing log line: \"%s\"\n", line);
    return 0;
}
static int log_count(enum ft_log_level lvl, const char *sub) {
    int n = 0;
    for (int i = 0; i < g_log.n; i++) n += g_log.lvl[i] == lvl && strstr(g_log.lines[i], sub);
    return n;
}

/* ---- fake models: n_layers, dense where dense[l] == 'd'; bf16 banks of E experts, gate_up
 * [rows, cols] and down [rows, cols/2] ---- */

static struct ft_model *fake_model(int n_layers, const char *dense, int E, int rows, int cols,
                                   int fill) {
    struct ft_model *m = calloc(1, sizeof *m);
    m->n_layers = n_layers;
    m->layers = calloc((size_t)n_layers, sizeof *m->layers);
    for (int l = 0; l < n_layers; l++) {
        if (dense && dense[l] == 'd') continue;
        m->layers[l].is_moe = 1;
        for (int f = 0; f < FT_BANK_N_FAMILIES; f++) {
            struct ft_bank *b = &m->layers[l].bank[f];
            ft_bank_init(b, ft_row_schema_for(FT_DTYPE_BF16), (enum ft_bank_family)f, E, rows,
                         f == FT_BANK_DOWN ? cols / 2 : cols);
            if (fill) memset(b->base, 0xAB, b->bytes);
        }
    }
    return m;
}
static void fake_model_free(struct ft_model *m) {
    for (int l = 0; l < m->n_layers; l++)
        for (int f = 0; f < FT_BANK_N_FAMILIES; f++) ft_bank_free(&m->layers[l].bank[f]);
    free(m->layers);
    free(m);
}
static uint64_t layer_bytes(const struct ft_model *m, int l) {
    return m->layers[l].bank[0].bytes + m->layers[l].bank[1].bytes;
}

static const struct ft_platform k_linux = {.kind = FT_PLATFORM_LINUX, .kernel = "6.1.0"};
static const struct ft_platform k_wsl = {.kind = FT_PLATFORM_WSL2,
                                         .kernel = "5.15.90.1-microsoft-standard-WSL2"};

/* ---- grammars --------------------------------------------------------------------------- */

TEST(parse_size_units) {
    uint64_t b = 0;
    EXPECT_OK(ft_parse_size("24G", "--pin-budget", &b)); EXPECT_EQ(b, 24 * GIB_);
    EXPECT_OK(ft_parse_size("512M", "--pin-budget", &b)); EXPECT_EQ(b, 512 * MIB);
    EXPECT_OK(ft_parse_size("0.5T", "--pin-budget", &b)); EXPECT_EQ(b, 512 * GIB_);
    EXPECT_OK(ft_parse_size("24", "--pin-budget", &b)); EXPECT_EQ(b, 24 * GIB_);
    EXPECT_OK(ft_parse_size("1.5", "--pin-budget", &b)); EXPECT_EQ(b, 3 * GIB_ / 2);
    EXPECT_OK(ft_parse_size("64k", "--pin-budget", &b)); EXPECT_EQ(b, 64 * KIB);
    EXPECT_OK(ft_parse_size("24GiB", "--pin-budget", &b)); EXPECT_EQ(b, 24 * GIB_);
    EXPECT_OK(ft_parse_size("24GB", "--pin-budget", &b)); EXPECT_EQ(b, 24 * GIB_);
    EXPECT_OK(ft_parse_size("0", "--pin-budget", &b)); EXPECT_EQ(b, 0);
    const char *bad[] = {"", "-1", "abc", "24X", "1e3", "0x10", "inf", "nan", "24 G", "G", "24Gx",
                         "99999999999T"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_(ft_parse_size(bad[i], "--pin-budget", &b) == FT_ERR_INVALID_ARG, "'%s' accepted",
               bad[i]);
    ft_parse_size("24X", "--pin-budget", &b);
    EXPECT_STREQ(ft_error(), "--pin-budget '24X': not a size (write e.g. 24G, 512M, 0.5T, or a "
                             "plain number of GiB)");
}

TEST(cpu_layers_grammar) {
    struct ft_cpu_layers_spec s;
    EXPECT_OK(ft_cpu_layers_parse(NULL, &s)); EXPECT_EQ(s.mode, FT_CPU_LAYERS_AUTO);
    EXPECT_OK(ft_cpu_layers_parse("auto", &s)); EXPECT_EQ(s.mode, FT_CPU_LAYERS_AUTO);
    EXPECT_OK(ft_cpu_layers_parse("0", &s)); EXPECT_EQ(s.mode, FT_CPU_LAYERS_NONE);
    EXPECT_OK(ft_cpu_layers_parse("0.0", &s)); EXPECT_EQ(s.mode, FT_CPU_LAYERS_NONE);
    EXPECT_OK(ft_cpu_layers_parse("8", &s)); EXPECT_EQ(s.mode, FT_CPU_LAYERS_COUNT);
    EXPECT_EQ(s.count, 8);
    EXPECT_OK(ft_cpu_layers_parse("0.25", &s)); EXPECT_EQ(s.mode, FT_CPU_LAYERS_FRACTION);
    EXPECT_NEAR(s.fraction, 0.25, 0);
    EXPECT_OK(ft_cpu_layers_parse("3,7,11", &s)); EXPECT_EQ(s.mode, FT_CPU_LAYERS_IDS);
    EXPECT_EQ(s.n_ids, 3); EXPECT_EQ(s.ids[0], 3); EXPECT_EQ(s.ids[2], 11);
    EXPECT_OK(ft_cpu_layers_parse("3,", &s)); EXPECT_EQ(s.mode, FT_CPU_LAYERS_IDS);
    EXPECT_EQ(s.n_ids, 1);
    const char *bad[] = {"-1", "abc", "1.5", "3,3", "1..2", ".5", "5.", "3, 7", "3,,7", "auto ",
                         ",3", "12345678"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_(ft_cpu_layers_parse(bad[i], &s) == FT_ERR_INVALID_ARG, "'%s' accepted", bad[i]);
    ft_cpu_layers_parse("3,3", &s);
    EXPECT_STREQ(ft_error(), "--moe-cpu-layers '3,3': layer 3 is listed twice");
    ft_cpu_layers_parse("abc", &s);
    EXPECT_STREQ(ft_error(), "--moe-cpu-layers 'abc': expected auto, ids (3,7,11), a count (8), "
                             "a fraction (0.25) or 0");
}

/* n odd: the extra layer comes from the head (head = ceil(n/2), tail = floor(n/2)). */
TEST(head_tail_choice) {
    unsigned char m[10];
    memset(m, 0, sizeof m);
    ft_cpu_layers_head_tail(10, 3, m);
    EXPECT(m[0] && m[1] && m[9] && !m[2] && !m[8]);
    memset(m, 0, sizeof m);
    ft_cpu_layers_head_tail(10, 4, m);
    EXPECT(m[0] && m[1] && m[8] && m[9] && !m[2] && !m[7]);
    memset(m, 0, sizeof m);
    ft_cpu_layers_head_tail(10, 1, m);
    EXPECT(m[0] && !m[9]);
    memset(m, 0, sizeof m);
    ft_cpu_layers_head_tail(10, 99, m);
    int n = 0;
    for (int i = 0; i < 10; i++) n += m[i];
    EXPECT_EQ(n, 10);
    EXPECT_EQ(ft_cpu_layers_auto_count(48, 100, 60), 20); /* ceil(48 * 0.4) = ceil(19.2) */
    EXPECT_EQ(ft_cpu_layers_auto_count(48, 100, 100), 0);
    EXPECT_EQ(ft_cpu_layers_auto_count(48, 100, 0), 48);
    EXPECT_EQ(ft_cpu_layers_auto_count(4, 100, 75), 1);   /* exactly 1.0: no rounding up */
    EXPECT_EQ(ft_cpu_layers_auto_count(48, (uint64_t)1 << 60, (uint64_t)1 << 59), 24);
}

/* ---- platform --------------------------------------------------------------------------- */

TEST(platform_detection_and_override) {
    EXPECT_EQ(ft_platform_classify("5.15.90.1-microsoft-standard-WSL2"), FT_PLATFORM_WSL2);
    EXPECT_EQ(ft_platform_classify("4.4.0-19041-Microsoft"), FT_PLATFORM_WSL2);
    EXPECT_EQ(ft_platform_classify("6.1.0-18-amd64"), FT_PLATFORM_LINUX);
    struct ft_platform p;
    log_start();
    setenv("FT_TEST_KERNEL_RELEASE", "5.15.90.1-microsoft-standard-WSL2", 1); ft_env_reload();
    ft_platform_detect(&p);
    EXPECT_EQ(p.kind, FT_PLATFORM_WSL2);
    EXPECT(p.faked);
    ft_platform_log(&p);
    EXPECT(log_has("platform: WSL2 (kernel 5.15.90.1-microsoft-standard-WSL2)"));
    char path[] = "/tmp/ft_test_version_XXXXXX";
    int fd = mkstemp(path);
    const char *v = "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@x) (gcc) #1 SMP\n";
    EXPECT(write(fd, v, strlen(v)) == (ssize_t)strlen(v));
    close(fd);
    setenv("FT_TEST_KERNEL_RELEASE", path, 1); ft_env_reload();
    ft_platform_detect(&p);
    EXPECT_EQ(p.kind, FT_PLATFORM_WSL2);
    EXPECT_STREQ(p.kernel, "5.15.153.1-microsoft-standard-WSL2");
    setenv("FT_TEST_KERNEL_RELEASE", "6.1.0-18-amd64", 1); ft_env_reload();
    ft_platform_detect(&p);
    EXPECT_EQ(p.kind, FT_PLATFORM_LINUX);
    ft_platform_log(&p);
    EXPECT(log_has("platform: Linux"));
    unsetenv("FT_TEST_KERNEL_RELEASE"); ft_env_reload();
    unlink(path);
    log_stop();
}

TEST(vram_margin_larger_on_wsl) {
    struct ft_vram_margin w, n;
    log_start();
    ft_vram_margin(&k_wsl, 24 * GIB_, &w);
    ft_vram_margin(&k_linux, 24 * GIB_, &n);
    EXPECT_EQ(w.bytes, 2 * GIB_);
    EXPECT_EQ(n.bytes, 512 * MIB);
    EXPECT(w.bytes > n.bytes);
    ft_vram_margin(&k_wsl, 100 * GIB_, &w);
    EXPECT_EQ(w.bytes, 100 * GIB_ / 100 * 8);
    EXPECT(log_has("vram margin 2.00 GiB (WSL2: max(2 GiB, 8% of 24.0 GiB); GPU allocations go "
                   "through the dxg bridge, whose failure can stop the WSL VM)"));
    EXPECT(log_has("vram margin 0.50 GiB (Linux: max(512 MiB, 2% of 24.0 GiB) for the driver and "
                   "workspaces)"));
    log_stop();
}

/* ---- pin budget ------------------------------------------------------------------------- */

TEST(budget_sources) {
    struct ft_pin_budget b;
    struct ft_pin_fake f;
    const struct ft_pin_backend *fake = ft_pin_fake_init(&f, 0, 0);
    struct ft_pin_budget_opts o = {.env = "", .ram_bytes = 100 * GIB_};
    log_start();
    EXPECT_OK(ft_pin_budget_init(&b, &k_linux, fake, &o));
    EXPECT_EQ(b.source, FT_PIN_SRC_UNCAPPED);
    EXPECT(b.limit_bytes == FT_PIN_UNLIMITED);
    EXPECT(log_has("pin budget unlimited (source: uncapped)"));
    /* WSL2 without a GPU: 40% of RAM, nothing to probe */
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, ft_pin_backend_none(), &o));
    EXPECT_EQ(b.source, FT_PIN_SRC_DEFAULT);
    EXPECT_EQ(b.limit_bytes, 40 * GIB_);
    EXPECT(log_has("pin budget 40.00 GiB (source: default)"));
    /* env beats the platform and skips the probe */
    o.env = "24";
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(b.source, FT_PIN_SRC_ENV);
    EXPECT_EQ(b.limit_bytes, 24 * GIB_);
    EXPECT_EQ(f.probe_bytes, 0);
    EXPECT(log_has("pin budget 24.00 GiB (source: env)"));
    /* the flag beats env, also on native Linux */
    o.flag = "512M";
    EXPECT_OK(ft_pin_budget_init(&b, &k_linux, fake, &o));
    EXPECT_EQ(b.source, FT_PIN_SRC_FLAG);
    EXPECT_EQ(b.limit_bytes, 512 * MIB);
    EXPECT(log_has("pin budget 0.50 GiB (source: flag)"));
    /* the environment variable itself */
    o.flag = NULL;
    o.env = NULL;
    setenv("FREETOKEN_PIN_BUDGET_GB", "1.5", 1); ft_env_reload();
    EXPECT_OK(ft_pin_budget_init(&b, &k_linux, fake, &o));
    EXPECT_EQ(b.source, FT_PIN_SRC_ENV);
    EXPECT_EQ(b.limit_bytes, 3 * GIB_ / 2);
    setenv("FREETOKEN_PIN_BUDGET_GB", "lots", 1); ft_env_reload();
    EXPECT_EQ(ft_pin_budget_init(&b, &k_linux, fake, &o), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "FREETOKEN_PIN_BUDGET_GB 'lots': not a size");
    unsetenv("FREETOKEN_PIN_BUDGET_GB"); ft_env_reload();
    EXPECT_EQ(f.probe_bytes, 0);
    log_stop();
}

TEST(probe_keeps_80_percent_of_what_succeeded) {
    struct ft_pin_budget b;
    struct ft_pin_fake f;
    /* the driver refuses past 10 GiB; the default would be 40 GiB (no wall remembered) */
    const struct ft_pin_backend *fake = ft_pin_fake_init(&f, 10 * GIB_, 0);
    struct ft_pin_budget_opts o = {.env = "", .ram_bytes = 100 * GIB_, .wall_file = ""};
    log_start();
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(b.source, FT_PIN_SRC_PROBE);
    EXPECT_EQ(b.probe_ok_bytes, 10 * GIB_);
    EXPECT_EQ(b.limit_bytes, 8 * GIB_);
    EXPECT_EQ(f.n_pin_calls, 41);           /* 40 steps of 256 MiB, then the refusal */
    EXPECT_EQ(f.pinned_bytes, 0);           /* everything freed */
    EXPECT_EQ(f.peak_pinned_bytes, 10 * GIB_);
    EXPECT_EQ(f.sticky, 0);                 /* the sticky error was cleared */
    EXPECT_EQ(f.n_clears, 1);
    EXPECT(log_has("pin probe: the driver refused after 10.00 GiB (256 MiB steps); keeping 80%"));
    EXPECT(log_has("pin budget 8.00 GiB (source: probe)"));
    /* a refusal at 1000 MiB: 3 steps (768 MiB) succeeded */
    fake = ft_pin_fake_init(&f, 1000 * MIB, 0);
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(b.limit_bytes, 768 * MIB / 10 * 8);
    /* no refusal up to the default: the default stands */
    fake = ft_pin_fake_init(&f, 0, 0);
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(b.source, FT_PIN_SRC_DEFAULT);
    EXPECT_EQ(b.limit_bytes, 40 * GIB_);
    EXPECT_EQ(f.probe_bytes, 40 * GIB_);
    EXPECT_EQ(f.pinned_bytes, 0);
    EXPECT(log_has("pin probe: 40.00 GiB pinned without refusal; keeping the default (40% of RAM)"));
    /* skip_probe (ft inspect) */
    fake = ft_pin_fake_init(&f, 1 * GIB_, 0);
    o.skip_probe = 1;
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(f.n_pin_calls, 0);
    EXPECT_EQ(b.source, FT_PIN_SRC_DEFAULT);
    log_stop();
}

/* The wall a probe met is remembered per machine and never probed again: the next start keeps
 * 80% of what stays below it without a single pin; the probe goes above the default only up to
 * the ceiling --pin-budget probe:SIZE gives, and stops there or at a refusal (remembered too). */
TEST(pin_wall_remembered_and_never_crossed) {
    char path[256];
    snprintf(path, sizeof path, "%s/pinwall-test.txt", g_cache);
    remove(path);
    struct ft_pin_budget b;
    struct ft_pin_fake f;
    struct ft_pin_budget_opts o = {.env = "", .ram_bytes = 100 * GIB_, .wall_file = path};
    const struct ft_pin_backend *fake = ft_pin_fake_init(&f, 10 * GIB_, 0);
    log_start();
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(b.limit_bytes, 8 * GIB_);
    EXPECT_EQ(f.n_refused, 1);
    /* the next start: a driver that would refuse at the same wall is never asked */
    fake = ft_pin_fake_init(&f, 10 * GIB_, 0);
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(f.n_pin_calls, 0);
    EXPECT_EQ(f.n_refused, 0);
    EXPECT_EQ(b.source, FT_PIN_SRC_PROBE);
    EXPECT_EQ(b.limit_bytes, 8 * GIB_);
    EXPECT(log_count(FT_LOG_INFO, "refused at 10.25 GiB before") == 1);
    /* the user's ceiling above the default (40 GiB): probed up to 60, where this driver refuses */
    remove(path);
    fake = ft_pin_fake_init(&f, 60 * GIB_, 0);
    o.flag = "probe:80G";
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(b.probe_ok_bytes, 60 * GIB_);
    EXPECT_EQ(b.limit_bytes, 48 * GIB_);
    EXPECT(f.peak_pinned_bytes <= 60 * GIB_);
    /* a ceiling below the driver's wall: all of it, no refusal, nothing remembered past it */
    remove(path);
    fake = ft_pin_fake_init(&f, 60 * GIB_, 0);
    o.flag = "probe:20G";
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(b.limit_bytes, 20 * GIB_);
    EXPECT_EQ(f.n_refused, 0);
    EXPECT(f.peak_pinned_bytes <= 20 * GIB_);
    /* without the flag the probe never goes past the default guess, whatever the driver allows */
    o.flag = NULL;
    fake = ft_pin_fake_init(&f, 0, 0);
    EXPECT_OK(ft_pin_budget_init(&b, &k_wsl, fake, &o));
    EXPECT_EQ(b.limit_bytes, 40 * GIB_);
    EXPECT(f.peak_pinned_bytes <= 40 * GIB_);
    o.flag = "probe:lots";
    EXPECT_EQ(ft_pin_budget_init(&b, &k_wsl, fake, &o), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "probe:");
    log_stop();
    remove(path);
}

struct charge_ctx {
    struct ft_pin_budget *b;
    _Atomic int ok;
};
static void *charger(void *arg) {
    struct charge_ctx *c = arg;
    for (int i = 0; i < 2000; i++)
        if (ft_pin_budget_charge(c->b, KIB, "test buffer") == FT_OK) c->ok++;
    return NULL;
}

TEST(budget_charge_and_release) {
    struct ft_pin_budget b;
    struct ft_pin_budget_opts o = {.env = "", .flag = "10M"};
    EXPECT_OK(ft_pin_budget_init(&b, &k_linux, ft_pin_backend_none(), &o));
    EXPECT_OK(ft_pin_budget_charge(&b, 6 * MIB, "staging buffer"));
    EXPECT_EQ(ft_pin_budget_charge(&b, 5 * MIB, "KV offload"), FT_ERR_OOM);
    EXPECT_STREQ(ft_error(), "pin budget: KV offload needs 0.00 GiB pinned but 0.00 of 0.01 GiB "
                             "(source: flag) is left; raise it with --pin-budget or "
                             "FREETOKEN_PIN_BUDGET_GB (docs/wsl.md)");
    EXPECT_EQ(ft_pin_budget_available(&b), 4 * MIB);
    ft_pin_budget_release(&b, 6 * MIB);
    EXPECT_EQ(ft_pin_budget_available(&b), 10 * MIB);
    /* 8 threads make 16000 attempts at 10240 KiB: exactly 10240 one-KiB charges succeed */
    struct charge_ctx c = {.b = &b};
    pthread_t t[8];
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, charger, &c);
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    EXPECT_EQ(c.ok, 10240);
    EXPECT_EQ(b.used_bytes, 10 * MIB);
}

/* ---- the chain -------------------------------------------------------------------------- */

static uint64_t pinned_sum(const struct ft_residency_plan *p, const struct ft_model *m) {
    uint64_t s = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const struct ft_residency_layer *y = ft_residency_layer(p, l);
        if (y->is_moe && y->got == FT_RES_PINNED) s += y->bytes;
    }
    return s;
}

/* fake_model(10, LAYOUT, 8, 64, 64): layer 1 dense, 9 MoE layers of 2 banks (gate_up 8x[64,64]
 * bf16 = 64 KiB, down 8x[64,32] = 32 KiB): 96 KiB per layer, 864 KiB in all. */
#define LAYOUT "mdmmmmmmmm"
#define LAYER_KIB 96

TEST(auto_head_tail_under_budget) {
    struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 1);
    EXPECT_EQ(layer_bytes(m, 0), LAYER_KIB * KIB);
    struct ft_pin_fake f;
    /* budget 5.5 layers: n = ceil(9 * (1 - 5.5/9)) = 4 -> head 2 (layers 0, 2) + tail 2 (8, 9) */
    struct ft_residency_opts o = {.pin_budget = "528K", .backend = ft_pin_fake_init(&f, 0, 0),
                                  .platform = &k_wsl, .budget.env = ""};
    struct ft_residency_plan *p = NULL;
    log_start();
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT(log_has("platform: WSL2 (kernel 5.15.90.1-microsoft-standard-WSL2)"));
    EXPECT(log_has("pin budget 0.00 GiB (source: flag)"));
    EXPECT(log_has("--moe-cpu-layers auto: banks 0.00 GiB > pin budget 0.00 GiB; 4 of 9 MoE "
                   "layers stay unpinned for CPU decode (head 2 + tail 2: layers 0,2,8-9)"));
    EXPECT_OK(ft_residency_apply(p, m));
    int want_cpu[10] = {1, 0, 1, 0, 0, 0, 0, 0, 1, 1};
    for (int l = 0; l < 10; l++) {
        CHECK_(ft_residency_is_cpu_layer(p, l) == want_cpu[l], "layer %d cpu", l);
        if (m->layers[l].is_moe)
            EXPECT_EQ(ft_residency_layer(p, l)->got, want_cpu[l] ? FT_RES_LOCKED : FT_RES_PINNED);
    }
    EXPECT_EQ(pinned_sum(p, m), 5 * LAYER_KIB * KIB);
    EXPECT(pinned_sum(p, m) <= 528 * KIB);
    EXPECT_EQ(f.pinned_bytes, 5 * LAYER_KIB * KIB);
    EXPECT_EQ(log_count(FT_LOG_INFO, "residency of 9 MoE layers (pin backend fake, budget 0.00 GiB, "
                                     "0.00 GiB charged; pinning took "), 1);
    EXPECT(log_has("  pinned      5 layers      0.00 GiB"));
    EXPECT(log_has("  locked      4 layers      0.00 GiB  layers 0,2,8-9"));
    EXPECT(log_has("  pageable    0 layers      0.00 GiB"));
    struct ft_residency_stats s;
    ft_residency_get_stats(p, &s);
    EXPECT_EQ(s.n_layers[FT_RES_PINNED], 5);
    EXPECT_EQ(s.bytes[FT_RES_LOCKED], 4 * LAYER_KIB * KIB);
    EXPECT_EQ(s.charged_bytes, 5 * LAYER_KIB * KIB);
    EXPECT(s.charged_bytes <= s.budget_bytes);
    EXPECT_STREQ(s.cpu_layers, "0,2,8-9");
    EXPECT_STREQ(s.budget_source, "flag");
    EXPECT_STREQ(s.platform, "WSL2");
    char text[1024];
    ft_residency_format(p, text, sizeof text);
    EXPECT_CONTAINS(text, "cpu layers    0,2,8-9 (misses decoded on the CPU executor)\n");
    EXPECT_CONTAINS(text, "residency     5 pinned (0.00 GiB), 4 locked (0.00 GiB)");
    ft_residency_plan_free(p);
    EXPECT_EQ(f.pinned_bytes, 0);
    /* odd n: budget 6.5 layers -> n = ceil(9 * 2.5/9) = 3: head 2 (0, 2) + tail 1 (9) */
    o.pin_budget = "624K";
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT(log_has("--moe-cpu-layers auto: banks 0.00 GiB > pin budget 0.00 GiB; 3 of 9 MoE "
                   "layers stay unpinned for CPU decode (head 2 + tail 1: layers 0,2,9)"));
    ft_residency_get_stats(p, &s);
    EXPECT_STREQ(s.cpu_layers, "0,2,9");
    EXPECT_EQ(s.applied, 0);
    ft_residency_plan_free(p);
    log_stop();
    fake_model_free(m);
}

TEST(cpu_layers_resolve_and_errors) {
    struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 1);
    struct ft_pin_fake f;
    struct ft_residency_opts o = {.backend = ft_pin_fake_init(&f, 0, 0), .platform = &k_linux,
                                  .budget.env = ""};
    struct ft_residency_plan *p = NULL;
    struct ft_residency_stats s;
    log_start();
    o.cpu_layers = "3,7,9";
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    ft_residency_get_stats(p, &s);
    EXPECT_STREQ(s.cpu_layers, "3,7,9");
    EXPECT(log_has("--moe-cpu-layers 3,7,9: 3 of 9 MoE layers decode their misses on the CPU (layers 3,7,9)"));
    ft_residency_plan_free(p);
    o.cpu_layers = "3";  /* a count: head 2 + tail 1 of the MoE layers 0,2..9 */
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    ft_residency_get_stats(p, &s);
    EXPECT_STREQ(s.cpu_layers, "0,2,9");
    ft_residency_plan_free(p);
    o.cpu_layers = "0.5"; /* round(4.5) = 5: head 3 + tail 2 */
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    ft_residency_get_stats(p, &s);
    EXPECT_STREQ(s.cpu_layers, "0,2-3,8-9");
    ft_residency_plan_free(p);
    o.cpu_layers = "1.0";
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    ft_residency_get_stats(p, &s);
    EXPECT_STREQ(s.cpu_layers, "0,2-9");
    ft_residency_plan_free(p);
    o.cpu_layers = "10";
    EXPECT_EQ(ft_residency_plan(m, &o, &p), FT_ERR_INVALID_ARG);
    EXPECT_STREQ(ft_error(), "--moe-cpu-layers 10: the model has only 9 MoE layers");
    EXPECT(p == NULL);
    o.cpu_layers = "1,4";
    EXPECT_EQ(ft_residency_plan(m, &o, &p), FT_ERR_INVALID_ARG);
    EXPECT_STREQ(ft_error(), "--moe-cpu-layers 1,4: layer 1 is a dense layer (it has no experts)");
    o.cpu_layers = "4,12";
    EXPECT_EQ(ft_residency_plan(m, &o, &p), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "layer 12 does not exist");
    /* "0": fine when everything fits, a clear error when it cannot */
    o.cpu_layers = "0";
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    ft_residency_get_stats(p, &s);
    EXPECT_STREQ(s.cpu_layers, "");
    ft_residency_plan_free(p);
    o.pin_budget = "512K";
    EXPECT_EQ(ft_residency_plan(m, &o, &p), FT_ERR_INVALID_ARG);
    EXPECT_STREQ(ft_error(), "--moe-cpu-layers 0: the expert banks need 0.00 GiB pinned but the "
                             "pin budget has 0.00 GiB (source: flag); use --moe-cpu-layers auto, "
                             "or raise the budget with --pin-budget or FREETOKEN_PIN_BUDGET_GB "
                             "(docs/wsl.md)");
    /* under the budget, auto pins everything and says nothing about CPU layers */
    o.cpu_layers = NULL;
    o.pin_budget = "1G";
    g_log.n = 0;
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_EQ(log_count(FT_LOG_INFO, "--moe-cpu-layers"), 0);
    ft_residency_get_stats(p, &s);
    EXPECT_EQ(s.n_layers[FT_RES_PINNED], 9);
    ft_residency_plan_free(p);
    log_stop();
    fake_model_free(m);
}

TEST(chain_refuse_after_n_bytes) {
    struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 1);
    uint64_t lb = layer_bytes(m, 0);
    struct ft_pin_fake f;
    /* the budget (uncapped, native) thinks all fits; the "driver" refuses the second bank
     * (32 KiB) of the fourth MoE layer: 3 layers + 64 KiB + 16 KiB is its limit */
    struct ft_residency_opts o = {.backend = ft_pin_fake_init(&f, 3 * lb + 80 * KIB, 0),
                                  .platform = &k_linux, .budget.env = ""};
    struct ft_residency_plan *p = NULL;
    log_start();
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_OK(ft_residency_apply(p, m));
    /* MoE layers 0,2,3 pinned; 4's second bank is refused, the first is undone; the rest
     * are never offered to the driver (no pin past a refusal) and locked */
    for (int l = 0; l < 10; l++) {
        if (!m->layers[l].is_moe) continue;
        enum ft_residency want = l <= 3 ? FT_RES_PINNED : FT_RES_LOCKED;
        CHECK_(ft_residency_layer(p, l)->got == want, "layer %d got %s", l,
               ft_residency_name(ft_residency_layer(p, l)->got));
    }
    EXPECT_EQ(f.pinned_bytes, 3 * lb);
    EXPECT_EQ(pinned_sum(p, m), 3 * lb);
    EXPECT_EQ(ft_residency_budget(p)->used_bytes, 3 * lb);
    EXPECT(f.n_clears >= 1);
    EXPECT_EQ(f.n_pin_calls, 8);
    EXPECT_EQ(f.n_pin_refused, 1);
    EXPECT_EQ(f.n_pin_after_refusal, 0);
    EXPECT_EQ(ft_residency_budget(p)->limit_bytes, 3 * lb); /* the wall: nothing else asks */
    EXPECT_EQ(ft_pin_budget_charge(ft_residency_budget(p), 256, "the expert staging ring"), FT_ERR_OOM);
    EXPECT_EQ(log_count(FT_LOG_INFO, "pinning 0.00 GiB refused (cudaHostRegister(0.00 GiB): out "
                                     "of memory (fake"), 1);
    EXPECT(log_has("layer 4: pinning 0.00 GiB refused (cudaHostRegister(0.00 GiB): out of memory "
                   "(fake, call 8)); the layer moves to the CPU (mlock). No pin is asked past a "
                   "refusal: the pin budget is now the 0.00 GiB pinned, and 5 later layers are "
                   "locked for the CPU without asking"));
    EXPECT(log_has("  locked      6 layers      0.00 GiB  layers 4-9"));
    EXPECT(ft_residency_is_cpu_layer(p, 4));
    EXPECT(!ft_residency_is_cpu_layer(p, 3));
    ft_residency_plan_free(p);
    EXPECT_EQ(f.pinned_bytes, 0);
    log_stop();
    fake_model_free(m);
}

TEST(chain_fail_on_kth_call) {
    struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 1);
    uint64_t lb = layer_bytes(m, 0);
    struct ft_pin_fake f;
    /* call 4 = layer 2's second bank: layer 2 and every later layer move down (a refusal is
     * the driver's wall: nothing past it is asked) */
    struct ft_residency_opts o = {.backend = ft_pin_fake_init(&f, 0, 4), .platform = &k_wsl,
                                  .pin_budget = "1G", .budget.env = ""};
    struct ft_residency_plan *p = NULL;
    log_start();
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_OK(ft_residency_apply(p, m));
    for (int l = 0; l < 10; l++)
        if (m->layers[l].is_moe)
            EXPECT_EQ(ft_residency_layer(p, l)->got, l >= 2 ? FT_RES_LOCKED : FT_RES_PINNED);
    EXPECT_EQ(f.pinned_bytes, 1 * lb);
    EXPECT_EQ(ft_residency_budget(p)->used_bytes, 1 * lb);
    EXPECT_EQ(f.sticky, 0);
    EXPECT_EQ(f.n_pin_calls, 4);
    EXPECT_EQ(f.n_pin_after_refusal, 0);
    EXPECT(log_has("layer 2: pinning 0.00 GiB refused (cudaHostRegister(0.00 GiB): out of memory "
                   "(fake, call 4)); the layer moves to the CPU (mlock). No pin is asked past a "
                   "refusal: the pin budget is now the 0.00 GiB pinned, and 7 later layers are "
                   "locked for the CPU without asking"));
    EXPECT(log_has("  locked      8 layers      0.00 GiB  layers 2-9"));
    ft_residency_plan_free(p);
    EXPECT_EQ(f.pinned_bytes, 0);
    /* explicit ids that do not fit the budget: the budget refuses, the chain locks */
    o.backend = ft_pin_fake_init(&f, 0, 0);
    o.cpu_layers = "0,";
    o.pin_budget = "300K"; /* 3 layers of 96 KiB fit */
    g_log.n = 0;
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT(log_has("--moe-cpu-layers 0,: the pinned layers need 0.00 GiB but the pin budget has "
                   "0.00 GiB; layers that do not fit will be locked for the CPU instead"));
    EXPECT_OK(ft_residency_apply(p, m));
    EXPECT(pinned_sum(p, m) <= 300 * KIB);
    EXPECT_EQ(pinned_sum(p, m), 3 * lb);
    EXPECT_EQ(f.n_pin_calls, 6); /* the budget refused the rest before the driver was asked */
    EXPECT_EQ(log_count(FT_LOG_INFO, "the layer moves to the CPU (mlock)"), 5);
    ft_residency_plan_free(p);
    log_stop();
    fake_model_free(m);
}

/* --emulate-pin-cap (issue 28) on native Linux: the budget is chosen as on WSL2, so the probe
 * meets the emulated wall, keeps 80% and remembers it under the cap's own file; the plan then
 * never registers past the cap and the driver never refuses a registration. */
TEST(emulated_cap_probed_and_never_crossed) {
    char path[256];
    snprintf(path, sizeof path, "%s/pinwall-emu-test.txt", g_cache);
    remove(path);
    struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 1);
    const uint64_t cap = 400 * KIB;
    struct ft_pin_fake f;
    struct ft_residency_opts o = {.backend = ft_pin_fake_init(&f, cap, 0), .platform = &k_linux,
                                  .budget = {.env = "", .ram_bytes = 100 * GIB_, .wall_file = path,
                                             .probe_step_bytes = 16 * KIB, .emulated_cap_bytes = cap}};
    struct ft_residency_plan *p = NULL;
    log_start();
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT(log_has("--emulate-pin-cap 0.00 GiB: the fake pinner refuses past 0.00 GiB pinned, as a "
                   "WSL2 driver's wall; the pin budget is chosen as on WSL2"));
    struct ft_pin_budget *b = ft_residency_budget(p);
    EXPECT_EQ(b->source, FT_PIN_SRC_PROBE);
    EXPECT_EQ(b->probe_ok_bytes, cap);
    EXPECT_EQ(b->limit_bytes, cap / 10 * 8);
    EXPECT_EQ(f.n_refused, 1); /* the probe's, which found the wall */
    EXPECT_OK(ft_residency_apply(p, m));
    EXPECT(pinned_sum(p, m) <= cap / 10 * 8);
    EXPECT_EQ(pinned_sum(p, m), 3 * LAYER_KIB * KIB); /* 320 KiB hold 3 layers of 96 */
    EXPECT(f.peak_pinned_bytes <= cap);
    EXPECT_EQ(f.n_pin_refused, 0);
    EXPECT_EQ(f.n_refused, 1);
    ft_residency_plan_free(p);
    /* the next start: the wall is remembered, nothing is probed */
    o.backend = ft_pin_fake_init(&f, cap, 0);
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_EQ(f.probe_bytes, 0);
    EXPECT_EQ(f.n_refused, 0);
    EXPECT_EQ(ft_residency_budget(p)->source, FT_PIN_SRC_PROBE);
    EXPECT_OK(ft_residency_apply(p, m));
    EXPECT(f.peak_pinned_bytes <= cap);
    EXPECT_EQ(f.n_pin_refused, 0);
    ft_residency_plan_free(p);
    /* no emulated cap: native Linux stays uncapped and unprobed */
    o.budget.emulated_cap_bytes = 0;
    o.backend = ft_pin_fake_init(&f, 0, 0);
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_EQ(ft_residency_budget(p)->source, FT_PIN_SRC_UNCAPPED);
    EXPECT_EQ(f.n_pin_calls, 0);
    ft_residency_plan_free(p);
    /* the emulated wall has a file of its own, never the real wall's */
    char w0[1024], w1[1024];
    ft_pin_wall_path(&k_linux, 100 * GIB_, 0, w0, sizeof w0);
    ft_pin_wall_path(&k_linux, 100 * GIB_, 8 * GIB_, w1, sizeof w1);
    EXPECT_CONTAINS(w0, "/pinwall-6-1-0-102400.txt");
    EXPECT_CONTAINS(w1, "/pinwall-6-1-0-102400-emu8192.txt");
    log_stop();
    remove(path);
    fake_model_free(m);
}

/* A budget above the emulated wall (--pin-budget skips the probe): registration meets the wall,
 * and that refusal is the last pin asked; a probed budget whose wall moved (the driver refuses
 * below it) remembers the lower wall for the next start. */
TEST(emulated_cap_no_pin_past_a_refusal) {
    char path[256];
    snprintf(path, sizeof path, "%s/pinwall-emu-test2.txt", g_cache);
    remove(path);
    struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 1);
    const uint64_t cap = 400 * KIB, lb = layer_bytes(m, 0);
    struct ft_pin_fake f;
    struct ft_residency_opts o = {.backend = ft_pin_fake_init(&f, cap, 0), .platform = &k_linux,
                                  .pin_budget = "1G",
                                  .budget = {.env = "", .wall_file = path, .emulated_cap_bytes = cap}};
    struct ft_residency_plan *p = NULL;
    log_start();
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_EQ(f.n_pin_calls, 0); /* the flag: no probe */
    EXPECT_OK(ft_residency_apply(p, m));
    uint64_t sum = pinned_sum(p, m);
    EXPECT(sum <= cap);
    EXPECT_EQ(sum, 4 * lb);         /* 384 KiB; the fifth layer's gate_up would cross 400 */
    EXPECT(f.peak_pinned_bytes <= cap);
    EXPECT_EQ(f.n_pin_refused, 1);
    EXPECT_EQ(f.n_pin_after_refusal, 0);
    EXPECT_EQ(f.n_pin_calls, 9);    /* 4 layers of 2 banks, then the refused one */
    EXPECT_EQ(ft_residency_budget(p)->limit_bytes, 4 * lb);
    EXPECT_EQ(log_count(FT_LOG_INFO, "No pin is asked past a refusal"), 1);
    FILE *wf = fopen(path, "r");
    EXPECT(wf == NULL); /* a flag's budget was not probed: nothing to remember */
    if (wf) fclose(wf);
    ft_residency_plan_free(p);
    EXPECT_EQ(f.pinned_bytes, 0);
    /* probed on a faked WSL2 without a wall, then the driver refuses below the budget */
    o.pin_budget = NULL;
    o.platform = &k_wsl;
    o.budget.ram_bytes = 100 * GIB_;
    o.budget.probe_step_bytes = 16 * GIB_;
    o.budget.emulated_cap_bytes = 0;
    o.backend = ft_pin_fake_init(&f, 0, 0);
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_EQ(ft_residency_budget(p)->source, FT_PIN_SRC_DEFAULT);
    f.refuse_after_bytes = 2 * lb + 10 * KIB;
    EXPECT_OK(ft_residency_apply(p, m));
    EXPECT_EQ(pinned_sum(p, m), 2 * lb);
    EXPECT_EQ(f.n_pin_after_refusal, 0);
    ft_residency_plan_free(p);
    o.backend = ft_pin_fake_init(&f, 0, 0);
    g_log.n = 0;
    EXPECT_OK(ft_residency_plan(m, &o, &p)); /* remembered: no probe, 80% below it */
    EXPECT_EQ(f.probe_bytes, 0);
    EXPECT_EQ(ft_residency_budget(p)->source, FT_PIN_SRC_PROBE);
    EXPECT_EQ(log_count(FT_LOG_INFO, "refused at 0.00 GiB before"), 1);
    ft_residency_plan_free(p);
    log_stop();
    remove(path);
    fake_model_free(m);
}

/* Registration overlaps filling: nothing is pinned before the loader says the layer is filled. */
TEST(async_registration_waits_for_fill) {
    struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 0);
    struct ft_pin_fake f;
    struct ft_residency_opts o = {.backend = ft_pin_fake_init(&f, 0, 0), .platform = &k_linux,
                                  .budget.env = ""};
    struct ft_residency_plan *p = NULL;
    log_start();
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_OK(ft_residency_apply_async(p, m));
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    EXPECT_EQ(f.n_pin_calls, 0);
    for (int l = 0; l < 9; l++) { /* layer 9 is never marked filled */
        for (int b = 0; b < 2; b++)
            if (m->layers[l].is_moe) memset(m->layers[l].bank[b].base, 0xAB, m->layers[l].bank[b].bytes);
        ft_residency_layer_filled(p, l);
    }
    EXPECT_OK(ft_residency_wait(p));
    EXPECT_EQ(f.n_pin_saw_zero, 0);
    EXPECT_EQ(ft_residency_layer(p, 8)->got, FT_RES_PINNED);
    EXPECT_EQ(ft_residency_layer(p, 9)->got, FT_RES_PAGEABLE);
    EXPECT(log_has("layer 9: the loader never marked its banks filled; left pageable"));
    ft_residency_plan_free(p);
    EXPECT_EQ(f.pinned_bytes, 0);
    /* freeing a plan mid-load (the loader failed) stops the thread and undoes everything */
    o.backend = ft_pin_fake_init(&f, 0, 0);
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_OK(ft_residency_apply_async(p, m));
    ft_residency_layer_filled(p, 0);
    ft_residency_plan_free(p);
    EXPECT_EQ(f.pinned_bytes, 0);
    ft_residency_plan_free(NULL);
    log_stop();
    fake_model_free(m);
}

TEST(no_gpu_backend_keeps_host_layers) {
    struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 1);
    struct ft_residency_opts o = {.backend = ft_pin_backend_none(), .platform = &k_wsl,
                                  .cpu_layers = "0", .budget.env = "", .budget.ram_bytes = GIB_};
    struct ft_residency_plan *p = NULL;
    log_start();
    EXPECT_OK(ft_residency_plan(m, &o, &p)); /* "0" is not an error: nothing is pinned */
    EXPECT(log_has("residency: no GPU (pin backend none): all 9 MoE layers (0.00 GiB) stay in "
                   "host memory and decode on the CPU; --moe-cpu-layers does not apply"));
    EXPECT_OK(ft_residency_apply(p, m));
    for (int l = 0; l < 10; l++) EXPECT_EQ(ft_residency_is_cpu_layer(p, l), l != 1);
    EXPECT(log_has("  pageable    9 layers      0.00 GiB  layers 0,2-9"));
    EXPECT_EQ(log_count(FT_LOG_WARN, ""), 0);
    ft_residency_plan_free(p);
    log_stop();
    fake_model_free(m);
}

/* mlock refused (fake) for every CPU layer: pageable, and exactly one warning. */
TEST(mlock_failure_one_warning_fake) {
    struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 1);
    struct ft_pin_fake f;
    struct ft_residency_opts o = {.backend = ft_pin_fake_init(&f, 0, 0), .platform = &k_linux,
                                  .cpu_layers = "4", .budget.env = ""};
    f.fail_lock = 1;
    struct ft_residency_plan *p = NULL;
    log_start();
    EXPECT_OK(ft_residency_plan(m, &o, &p));
    EXPECT_OK(ft_residency_apply(p, m));
    EXPECT_EQ(log_count(FT_LOG_WARN, "ulimit -l"), 1);
    EXPECT_EQ(log_count(FT_LOG_WARN, ""), 1);
    struct ft_residency_stats s;
    ft_residency_get_stats(p, &s);
    EXPECT_EQ(s.n_layers[FT_RES_PAGEABLE], 4);
    EXPECT_EQ(s.n_layers[FT_RES_PINNED], 5);
    EXPECT(s.mlock_failed);
    ft_residency_plan_free(p);
    log_stop();
    fake_model_free(m);
}

/* Drops CAP_IPC_LOCK (root ignores RLIMIT_MEMLOCK otherwise); 0 on success. */
static int drop_ipc_lock(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0) return -1;
    d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    d[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
    return (int)syscall(SYS_capset, &h, d);
}

/* The real thing: RLIMIT_MEMLOCK = 0 in a child, mlock fails, CPU layers stay pageable with
 * exactly one warning naming `ulimit -l` and its value. */
TEST(mlock_failure_real_rlimit_in_child) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int f0 = g_failures;
        struct rlimit r = {0, 0};
        EXPECT_EQ(drop_ipc_lock(), 0);
        EXPECT_EQ(setrlimit(RLIMIT_MEMLOCK, &r), 0);
        struct ft_model *m = fake_model(10, LAYOUT, 8, 64, 64, 1);
        struct ft_pin_fake f;
        struct ft_residency_opts o = {.backend = ft_pin_fake_init(&f, 0, 0), .platform = &k_linux,
                                      .cpu_layers = "3", .budget.env = ""};
        struct ft_residency_plan *p = NULL;
        log_start();
        EXPECT_OK(ft_residency_plan(m, &o, &p));
        EXPECT_OK(ft_residency_apply(p, m));
        EXPECT_EQ(log_count(FT_LOG_WARN, ""), 1);
        EXPECT_EQ(log_count(FT_LOG_WARN, "RLIMIT_MEMLOCK (`ulimit -l`) is 0 KiB: CPU layers stay "
                                         "in pageable memory"), 1);
        EXPECT_EQ(log_count(FT_LOG_WARN, "layer 0: mlock(0.00 GiB): "), 1);
        EXPECT(log_has("  pageable    3 layers      0.00 GiB  layers 0,2,9"));
        EXPECT(log_has("  locked      0 layers      0.00 GiB"));
        struct ft_residency_stats s;
        ft_residency_get_stats(p, &s);
        EXPECT_EQ(s.memlock_limit_bytes, 0);
        EXPECT_EQ(s.n_layers[FT_RES_PINNED], 6);
        ft_residency_plan_free(p);
        log_stop();
        fake_model_free(m);
        _exit(g_failures == f0 ? 0 : 1);
    }
    int status = -1;
    EXPECT(pid > 0);
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- a real model ----------------------------------------------------------------------- */

/* Greedy tokens of the qwen3_moe fixture after prefilling its reference prompt. */
static int greedy(struct ft_model *m, struct ft_pool *pool, const int32_t *ids, int T, int n,
                  int32_t *out) {
    struct ft_engine *e = NULL;
    struct ft_engine_opts eo = {.max_ctx = T + n};
    if (ft_engine_init(&e, m, pool, &eo) != FT_OK) return -1;
    float *logits = malloc((size_t)m->vocab * sizeof *logits);
    int rc = ft_engine_prefill(e, ids, T, logits, 0) == FT_OK ? 0 : -1;
    for (int g = 0; g < n && rc == 0; g++) {
        out[g] = ft_argmax(logits, m->vocab);
        if (g + 1 < n && ft_engine_forward(e, &out[g], 1, logits, 0) != FT_OK) rc = -1;
    }
    free(logits);
    ft_engine_free(e);
    return rc;
}

/* at_load: the plan is made from the checkpoint's sizes and each layer registered as the
 * loader fills it (ft_model_load_opts; the model owns the plan), else after the load. */
static void run_fixture(const char *budget, const struct ft_platform *plat, int fail_call,
                        const int32_t *ids, int T, int n, int32_t *out, struct ft_pool *pool,
                        struct ft_residency_stats *s, uint64_t *peak, int at_load) {
    struct ft_model *m = NULL;
    struct ft_residency_plan *p = NULL;
    struct ft_pin_fake f;
    struct ft_residency_opts o = {.backend = ft_pin_fake_init(&f, 0, fail_call), .platform = plat,
                                  .pin_budget = budget, .budget.env = ""};
    struct ft_load_opts lo = {.residency = at_load ? &o : NULL};
    EXPECT_OK(ft_model_load_opts(FT_TEST_DATA "/models/qwen3_moe", &lo, &m));
    if (!m) return;
    if (at_load) {
        p = m->residency;
        EXPECT(p != NULL);
    } else {
        EXPECT(m->residency == NULL);
        EXPECT_OK(ft_residency_plan(m, &o, &p));
        if (p) EXPECT_OK(ft_residency_apply(p, m));
    }
    if (p) {
        ft_residency_get_stats(p, s);
        *peak = f.peak_pinned_bytes;
        uint64_t banks = 0; /* what was charged is what the banks hold */
        for (int l = 0; l < m->n_layers; l++)
            if (ft_residency_layer(p, l)->got == FT_RES_PINNED)
                banks += m->layers[l].bank[0].bytes + m->layers[l].bank[1].bytes;
        EXPECT_EQ(s->bytes[FT_RES_PINNED], banks);
        EXPECT_EQ(f.pinned_bytes, banks);
        EXPECT_EQ(greedy(m, pool, ids, T, n, out), 0);
    }
    if (!at_load) ft_residency_plan_free(p);
    ft_model_free(m); /* frees the model's own plan first: unpinned before the banks go */
    EXPECT_EQ(f.pinned_bytes, 0);
}

TEST(capped_model_generates_same_tokens) {
    struct ft_st_file *ref = NULL;
    EXPECT_OK(ft_st_open(FT_TEST_DATA "/models/qwen3_moe/reference.safetensors", &ref));
    if (!ref) return;
    const struct ft_st_tensor *ti = ft_st_find(ref, "ids"), *tg = ft_st_find(ref, "greedy");
    int T = (int)ti->shape[0], n = (int)tg->shape[0];
    const int32_t *ids = ti->data, *want = tg->data;
    struct ft_pool *pool = NULL;
    EXPECT_OK(ft_pool_init(&pool, 2));
    int32_t base[64] = {0}, capped[64] = {1}, refused[64] = {2};
    struct ft_residency_stats s0, s1, s2;
    uint64_t peak0 = 0, peak1 = 0, peak2 = 0;
    log_start();
    /* after the load, then (ft_model_load_opts) registering each layer as it is read */
    for (int at_load = 0; at_load < 2; at_load++) {
        fprintf(stderr, "  %s\n", at_load ? "registered while loading" : "registered after the load");
        /* uncapped: both MoE layers (0 and 2; 1 is dense) pinned */
        run_fixture(NULL, &k_linux, 0, ids, T, n, base, pool, &s0, &peak0, at_load);
        EXPECT_EQ(s0.n_layers[FT_RES_PINNED], 2);
        /* faked WSL2, 40 KiB budget < 72 KiB of banks: auto keeps layer 0 on the CPU */
        run_fixture("40K", &k_wsl, 0, ids, T, n, capped, pool, &s1, &peak1, at_load);
        EXPECT_EQ(s1.n_layers[FT_RES_PINNED], 1);
        EXPECT_EQ(s1.n_layers[FT_RES_LOCKED], 1);
        EXPECT_STREQ(s1.cpu_layers, "0");
        EXPECT(s1.bytes[FT_RES_PINNED] <= s1.budget_bytes);
        EXPECT(peak1 <= 40 * KIB);
        EXPECT(s1.bank_bytes > s1.budget_bytes);
        /* and the one pinned layer refused by the "driver": everything on the CPU */
        run_fixture("40K", &k_wsl, 1, ids, T, n, refused, pool, &s2, &peak2, at_load);
        EXPECT_EQ(s2.n_layers[FT_RES_LOCKED], 2);
        EXPECT_EQ(peak2, 0);
        int same = 1;
        for (int g = 0; g < n; g++)
            same &= base[g] == want[g] && capped[g] == base[g] && refused[g] == base[g];
        CHECK_(same, "greedy tokens differ between the uncapped, capped and refused runs (%s)",
               at_load ? "at load" : "after the load");
    }
    log_stop();
    ft_pool_free(pool);
    ft_st_close(ref);
}

/* The sizes a plan made before loading starts from are the banks' payload (bf16 and GGML
 * blocks are copied as they are; the banks add alignment padding per expert, which
 * registration charges), for a safetensors and a GGUF checkpoint. */
TEST(file_expert_bytes_are_the_banks) {
    static const char *const models[] = {FT_TEST_DATA "/models/qwen3_moe",
                                         FT_TEST_DATA "/gguf/models/qwen3moe_q4km.gguf"};
    for (int i = 0; i < 2; i++) {
        struct ft_model *m = NULL;
        EXPECT_OK(ft_model_load(models[i], &m));
        if (!m) continue;
        uint64_t bank[64] = {0};
        EXPECT(m->n_layers <= 64);
        ft_model_file_expert_bytes(m->gguf ? NULL : m->st, m->gguf, m->n_layers, bank);
        int moe = 0;
        for (int l = 0; l < m->n_layers; l++) {
            const struct ft_bank *bk = m->layers[l].bank;
            uint64_t b = m->layers[l].is_moe ? (uint64_t)bk[0].n_experts * (bk[0].row_bytes + bk[1].row_bytes) : 0;
            moe += b > 0;
            CHECK_(bank[l] == b, "%s layer %d: %llu bytes of expert tensors, banks %llu", models[i], l,
                   (unsigned long long)bank[l], (unsigned long long)b);
        }
        EXPECT(moe > 0);
        ft_model_free(m);
    }
}

#endif /* FT_TESTING */

TEST_MAIN("residency")
