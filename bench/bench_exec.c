/* bench_exec.c — the CPU expert executor sustained over many decode steps (not a test): each
 * step computes k experts of one token (ft_moe_exec_run_pairs, --cpu-act fast), the experts
 * rotating over enough for 3x the last-level cache (ft_bw_rotation_experts) so no step finds
 * its weights there, and the figure is the
 * mean over all steps (ft bench bw reports the best of 12, the number the hybrid split starts
 * from). Printed as GB/s of expert weights read, next to the host DRAM read bandwidth measured
 * in the same run (docs/ARCHITECTURE.md section 1) and round by round against probes taken between the
 * rounds (the median of those ratios: that host's DRAM reading drifts), then where a step goes: its phases (ft_moe_exec_timing), each
 * pass's worker start, busy and end-wait times, and the cost of an empty pool job.
 * Usage: bench_exec [--format FMT] [--threads N] [--hidden H] [--expert-width I] [-k K]
 *                   [--steps S] [--isa 0-3] [--experts N]
 *   FMT as ft bench's synthetic formats (bf16, mxfp4, nvfp4, fp8, q4_k, ...; default mxfp4);
 *   H and I default to Qwen3-30B-A3B's 2048 and 768; --threads: the pinned pool's size
 *   (default: one per physical core); --steps (default 400); --experts N rotates over N experts
 *   instead (N = k: the same experts every step, from the cache: the kernels' compute rate).
 * Threading: main thread drives one pinned pool, as the offload backend's executor. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/sys.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "mem/bank.h"
#include "model/model.h"
#include "moe/bw_profile.h"
#include "moe/cpu_exec.h"

static int usage(void) {
    fprintf(stderr, "usage: bench_exec [--format FMT] [--threads N] [--hidden H] "
                    "[--expert-width I] [-k K] [--steps S] [--isa 0-3] [--experts N]\n");
    return 2;
}

static void noop_task(void *ctx, int i, int n) { (void)ctx, (void)i, (void)n; }

/* Step s's round of `rounds` (steps / rounds each; the last takes the remainder). */
static int round_of(int s, int steps, int rounds) {
    int per = steps / rounds > 0 ? steps / rounds : 1, r = s / per;
    return r < rounds ? r : rounds - 1;
}

int main(int argc, char **argv) {
    const char *fmt_name = "mxfp4";
    int threads = 0, H = 2048, I = 768, k = 8, steps = 400, n_experts = 0;
    for (int i = 1; i < argc; i += 2) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(f, "--format")) fmt_name = v;
        else if (!strcmp(f, "--threads")) threads = atoi(v);
        else if (!strcmp(f, "--hidden")) H = atoi(v);
        else if (!strcmp(f, "--expert-width")) I = atoi(v);
        else if (!strcmp(f, "-k")) k = atoi(v);
        else if (!strcmp(f, "--steps")) steps = atoi(v);
        else if (!strcmp(f, "--experts")) n_experts = atoi(v);
        else if (!strcmp(f, "--isa")) ft_cpu_set_isa((enum ft_cpu_isa)atoi(v));
        else return usage();
    }
    enum ft_dtype fmt;
    if (ft_synthetic_format(fmt_name, &fmt) != FT_OK || H <= 0 || I <= 0 || k < 1 || k > 32 ||
        steps < 1) {
        fprintf(stderr, "bench_exec: %s\n", ft_error());
        return usage();
    }
    if (n_experts < 0 || (n_experts > 0 && n_experts < k)) { /* a step's k must be distinct */
        fprintf(stderr, "bench_exec: --experts %d: give at least -k (%d) experts, or 0 for the "
                        "default rotation over 3x the last-level cache\n", n_experts, k);
        return 2;
    }
    struct ft_pool *pool = NULL;
    struct ft_bank gu = {0}, dn = {0};
    struct ft_moe_exec *ex = NULL;
    const struct ft_row_schema *sch = ft_row_schema_for(fmt);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    uint64_t expert_bytes = (uint64_t)2 * I * ft_dtype_row_bytes(fmt, H) + (uint64_t)H * ft_dtype_row_bytes(fmt, I);
    const int N_EXPERTS = n_experts > 0 ? n_experts : ft_bw_rotation_experts(expert_bytes);
    enum ft_status st = ft_pool_init_pinned(&pool, threads);
    if (st == FT_OK) st = ft_bank_init(&gu, sch, FT_BANK_GATE_UP, N_EXPERTS, 2 * I, H);
    if (st == FT_OK) st = ft_bank_init(&dn, sch, FT_BANK_DOWN, N_EXPERTS, H, I);
    if (st == FT_OK) st = ft_moe_exec_init(&ex, 1, k, N_EXPERTS, H, I);
    if (st == FT_OK) st = ft_bank_fill_random(pool, &gu, &seed);
    if (st == FT_OK) st = ft_bank_fill_random(pool, &dn, &seed);
    float *x = malloc((size_t)H * sizeof *x), *out = calloc((size_t)H, sizeof *out);
    if (st != FT_OK || !x || !out) {
        fprintf(stderr, "bench_exec: %s\n", st != FT_OK ? ft_error() : "out of memory");
        return 1;
    }
    ft_moe_exec_set_fast_act(ex, 1);
    for (int h = 0; h < H; h++) x[h] = (float)((h * 7) % 13) * 0.1f - 0.6f;
    double dram = ft_cpu_dram_read_gbps(pool, (size_t)1 << 30, 3);
    int tok[32] = {0}, ids[32];
    float w[32];
    double best = 1e30;
    int64_t t_all = 0;
    /* the steps in ROUNDS rounds with a DRAM probe between each two (and the first probe
     * above): each round's executor rate against the probes just before and after it, since
     * that host's DRAM reading moves 95-140 GB/s within one call (paired, time-adjacent) */
    enum { ROUNDS = 4 };
    double probe[ROUNDS + 1], round_gbps[ROUNDS];
    int64_t round_us[ROUNDS] = {0};
    int round_n[ROUNDS] = {0};
    probe[0] = dram;
    const double bytes = (double)k * (double)(gu.row_bytes + dn.row_bytes);
    for (int s = -8; s < steps; s++) { /* 8 warm-up steps */
        for (int j = 0; j < k; j++) ids[j] = (s * k + j + 8 * k) % N_EXPERTS, w[j] = 1.0f / k;
        if (s == 0) ft_moe_exec_set_timing(ex, 1);
        int64_t t0 = ft_time_us();
        ft_moe_exec_run_pairs(ex, pool, &gu, &dn, NULL, x, tok, ids, w, k, out);
        int64_t dt = ft_time_us() - t0;
        if (s < 0) continue;
        t_all += dt;
        best = (double)dt < best ? (double)dt : best;
        const int r = round_of(s, steps, ROUNDS);
        round_us[r] += dt, round_n[r]++;
        if (steps >= ROUNDS && (s + 1 == steps || round_of(s + 1, steps, ROUNDS) != r)) {
            ft_moe_exec_set_timing(ex, 0); /* the probe is no phase of a step */
            probe[r + 1] = ft_cpu_dram_read_gbps(pool, (size_t)1 << 29, 2);
            ft_moe_exec_set_timing(ex, 2);
        }
    }
    double mean_gbps = bytes * steps / (t_all * 1e3), best_gbps = bytes / (best * 1e3);
    printf("bench_exec: %s experts of %.2f MiB (H=%d, I=%d), %d per step over %d (%.0f MiB; "
           "last-level cache %.0f MiB), %d threads, ISA %s\n", sch->name,
           (gu.row_bytes + dn.row_bytes) / 1048576.0, H, I, k, N_EXPERTS,
           N_EXPERTS * (gu.row_bytes + dn.row_bytes) / 1048576.0, ft_sys_llc_bytes() / 1048576.0,
           ft_pool_size(pool), ft_cpu_isa_name(ft_cpu_isa()));
    /* the probe again after the steps: that host's DRAM reading moves 80-140 GB/s within
     * minutes, so the ceiling is the better of the two */
    double dram2 = ft_cpu_dram_read_gbps(pool, (size_t)1 << 30, 3), dram1 = dram;
    if (steps >= ROUNDS) { /* each round against the mean of the probes around it */
        double ratio[ROUNDS];
        printf("executor against the DRAM read around it, round by round:");
        for (int r = 0; r < ROUNDS; r++) {
            round_gbps[r] = round_us[r] > 0 ? bytes * round_n[r] / (round_us[r] * 1e3) : 0;
            ratio[r] = round_gbps[r] / (0.5 * (probe[r] + probe[r + 1]));
            printf(" %.1f of %.1f-%.1f GB/s (%.0f%%)%s", round_gbps[r], probe[r], probe[r + 1],
                   100 * ratio[r], r + 1 < ROUNDS ? "," : "");
        }
        for (int i = 1; i < ROUNDS; i++) /* the median of the ratios */
            for (int j = i; j > 0 && ratio[j] < ratio[j - 1]; j--) {
                double t = ratio[j];
                ratio[j] = ratio[j - 1], ratio[j - 1] = t;
            }
        printf("; median %.0f%%\n", 100 * 0.5 * (ratio[ROUNDS / 2 - 1] + ratio[ROUNDS / 2]));
    }
    dram = dram2 > dram1 ? dram2 : dram1;
    printf("host DRAM read (ceiling, measured now): %.1f GB/s (%.1f before the steps, %.1f after)\n",
           dram, dram1, dram2);
    printf("executor over %d steps: mean %.1f GB/s (%.0f%% of DRAM), best step %.1f GB/s "
           "(%.0f%%); %.1f us per step\n", steps, mean_gbps, 100 * mean_gbps / dram, best_gbps,
           100 * best_gbps / dram, (double)t_all / steps);
    /* where a step goes: the phases, and per pass the workers' start, busy and end wait */
    struct ft_moe_exec_timing tm = ft_moe_exec_timing(ex);
    static const char *phase[FT_EXEC_PHASES] = {"gather", "pass1", "act", "pass2", "combine"};
    double c = (double)(tm.calls ? tm.calls : 1) * 1e3;
    printf("per step (us):");
    for (int i = 0; i < FT_EXEC_PHASES; i++) printf(" %s %.1f", phase[i], tm.ns[i] / c);
    printf("\n");
    const int fused = 1; /* the executor's default, one job: "pass1" is all of it */
    for (int i = 0; i < 2 - fused; i++) {
        double wall = tm.ns[i ? FT_EXEC_PASS2 : FT_EXEC_PASS1] / c;
        double pb = (double)k * (double)(i ? dn.row_bytes : gu.row_bytes + (fused ? dn.row_bytes : 0));
        printf("%s pass: %.0f stretches, wall %.1f us (%.1f GB/s), last worker started after %.1f us, "
               "busy mean %.1f max %.1f us (%.1f GB/s while busy)\n", i ? "down" : fused ? "fused step's" : "gate/up",
               (double)tm.tasks[i] / (double)tm.calls, wall, pb / (wall * 1e3),
               tm.start_max_ns[i] / c, tm.busy_mean_ns[i] / c, tm.busy_max_ns[i] / c,
               pb / (tm.busy_mean_ns[i] / c * 1e3));
    }
    ft_moe_exec_set_timing(ex, 0);
    /* the pool's own cost: empty jobs */
    int64_t e0 = ft_time_ns();
    for (int i = 0; i < 2000; i++) ft_pool_run(pool, noop_task, NULL);
    printf("empty pool job: %.2f us\n", (ft_time_ns() - e0) / 2000 / 1e3);
    printf("checksum %.6g\n", (double)out[0] + out[H / 2]);
    free(x), free(out);
    ft_moe_exec_free(ex);
    ft_bank_free(&gu);
    ft_bank_free(&dn);
    ft_pool_free(pool);
    return 0;
}
