/* test_bw_profile.c — `ft bench bw` profiles: save/load round trip keyed by GPU, CPU, format and
 * expert bytes; a missing profile is FT_ERR_IO, a corrupt one FT_ERR_FORMAT naming the file; the
 * benchmarks' rotation spans 3x the last-level cache; and
 * `ft bench bw` itself runs (CPU rows) and writes one. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/sys.h"
#include "moe/bw_profile.h"
#include "core/env.h"
#include "test.h"

static char g_dir[64];

TEST(round_trip_missing_and_corrupt) {
    snprintf(g_dir, sizeof g_dir, "/tmp/ft_bw_XXXXXX");
    EXPECT(mkdtemp(g_dir) != NULL);
    setenv("FREETOKEN_CACHE", g_dir, 1); ft_env_reload();
    struct ft_bw_profile p = {.expert_bytes = 9437184, .threads = 16, .dram_read_gbps = 106.5,
                              .cpu_expert_gbps = 91.25, .cpu_fixed_s = 4e-5,
                              .pinned_h2d_gbps = 54.9, .copy_dma_gbps = 55.0,
                              .copy_gather_gbps = 49.3, .conc_cpu_expert_gbps = 80.5,
                              .conc_copy_gbps = 50.25};
    snprintf(p.gpu, sizeof p.gpu, "NVIDIA H200");
    snprintf(p.cpu, sizeof p.cpu, "Intel(R) Xeon(R) Processor");
    snprintf(p.format, sizeof p.format, "bf16");
    char path[1024], path2[1024];
    EXPECT_OK(ft_bw_profile_save(&p, path, sizeof path));
    EXPECT_CONTAINS(path, g_dir);
    struct ft_bw_profile q;
    EXPECT_OK(ft_bw_profile_load(&p, &q, path2, sizeof path2));
    EXPECT_STREQ(path, path2);
    EXPECT_NEAR(q.cpu_expert_gbps, 91.25, 1e-9);
    EXPECT_NEAR(q.conc_copy_gbps, 50.25, 1e-9);
    EXPECT_NEAR(q.cpu_fixed_s, 4e-5, 1e-12);
    struct ft_bw_profile other = p; /* another expert size has no profile */
    other.expert_bytes = 1234;
    EXPECT_EQ(ft_bw_profile_load(&other, &q, path2, sizeof path2), FT_ERR_IO);
    EXPECT_CONTAINS(ft_error(), "ft bench bw");
    FILE *f = fopen(path, "w");
    if (f) fputs("{\"version\": 1, \"cpu_expert_gbps\": \"fast\"}", f), fclose(f);
    EXPECT_EQ(ft_bw_profile_load(&p, &q, path2, sizeof path2), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), path);
}

/* The executor benchmarks rotate over enough experts that a pass over them spans 3x the
 * last-level cache (so no step reads its experts from it), at least 64, at most 4096. */
TEST(rotation_spans_three_last_level_caches) {
    uint64_t llc = ft_sys_llc_bytes(), sizes[] = {196608, 2506752, 9437184, (uint64_t)1 << 30};
    EXPECT(llc >= ((uint64_t)256 << 10));
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int n = ft_bw_rotation_experts(sizes[i]);
        EXPECT(n >= 64 && n <= 4096);
        CHECK_(n == 4096 || (uint64_t)n * sizes[i] >= 3 * llc, "%d experts of %llu bytes under 3x "
               "the %llu-byte LLC", n, (unsigned long long)sizes[i], (unsigned long long)llc);
        CHECK_(n == 64 || (uint64_t)(n - 1) * sizes[i] < 3 * llc, "%d experts of %llu bytes: more "
               "than 3x the LLC needs", n, (unsigned long long)sizes[i]);
    }
}

TEST(bench_bw_writes_a_profile) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "FREETOKEN_CACHE='%s/cli' '%s' bench bw --hidden 256 --expert-width 128 "
             "-k 4 -t 1 --backend-none 2>/dev/null", g_dir, FT_BIN);
    int rc = system(cmd); /* an unknown flag: exit 2 */
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    snprintf(cmd, sizeof cmd, "FREETOKEN_CACHE='%s/cli' '%s' bench bw --hidden 256 --expert-width 128 "
             "-k 4 -t 1 > '%s/out.txt' 2>/dev/null && ls '%s/cli' | grep -q '^bw-.*-bf16-196608.json$'",
             g_dir, FT_BIN, g_dir, g_dir);
    rc = system(cmd);
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "  (could not remove %s)\n", g_dir);
}

TEST_MAIN("bw_profile")
