/* bench_cpu.c — standalone CPU backend benchmark (not a test): host DRAM read GB/s, then the
 * bf16 GEMV (T = 1, decode) of ft_cpu_matmul as weight GB/s and the T = 64 GEMM (prefill) as
 * GFLOP/s, each printed next to the DRAM ceiling measured in the same run (docs/ARCHITECTURE.md section 1);
 * then both again with bf16 activations (--cpu-act fast) where the CPU has AVX512-BF16.
 * Usage: bench_cpu [--mib M] [--k K] [--threads N] [--reps R] [--isa 0-3]
 *   --mib: weight matrix size (default 1024 MiB; use several GiB on the target machine so it
 *   is far larger than the caches), --k: row length (default 4096), --threads: pool size
 *   (default physical cores), --isa: force a lower tier (0 scalar, 1 avx2, 2 avx512).
 * Threading: main thread drives one pool. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "bench_args.h"
#include "core/sys.h"
#include "core/threadpool.h"
#include "core/timer.h"

struct fill_ctx {
    uint16_t *w; /* [N, K] bf16 */
    size_t n;
};

/* First touch by the threads that will read it; small values keep sums finite. */
static void fill_worker(void *arg, int i, int n) {
    struct fill_ctx *c = arg;
    long lo, hi;
    ft_split((long)(c->n / 4096), i, n, &lo, &hi);
    size_t end = hi == (long)(c->n / 4096) ? c->n : (size_t)hi * 4096;
    for (size_t j = (size_t)lo * 4096; j < end; j++)
        c->w[j] = ft_f32_to_bf16((float)((j * 2654435761u) % 1000) * 1e-3f - 0.5f);
}

/* Best seconds of `reps` calls of ft_cpu_matmul with T tokens. */
static double time_matmul(struct ft_pool *pool, float *y, const float *x, const uint16_t *w, int T,
                          int N, int K, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = ft_time_us();
        ft_cpu_matmul(pool, y, x, w, FT_DTYPE_BF16, NULL, T, N, K);
        double s = (double)(ft_time_us() - t0) * 1e-6;
        best = s < best ? s : best;
    }
    return best;
}

/* The same with bf16 activations (--cpu-act fast on AVX512-BF16): x rounded once per call,
 * rows split over the pool as ft_cpu_matmul splits them. */
struct xq_ctx {
    float *y;
    const void *xq, *w;
    int T, N, K;
};

static void xq_worker(void *arg, int i, int n) {
    const struct xq_ctx *c = arg;
    long lo, hi;
    ft_split((c->N + 7) / 8, i, n, &lo, &hi);
    int n0 = (int)(lo * 8), n1 = (int)(hi * 8 < c->N ? hi * 8 : c->N);
    ft_cpu_matmul_rows_xq(c->y, c->N, c->xq, c->w, FT_DTYPE_BF16, c->T, n0, n1, c->K);
}

static double time_matmul_xq(struct ft_pool *pool, float *y, const float *x, void *xq,
                             const uint16_t *w, int T, int N, int K, int reps) {
    double best = 1e30;
    struct xq_ctx c = {y, xq, w, T, N, K};
    for (int r = 0; r < reps; r++) {
        int64_t t0 = ft_time_us();
        ft_cpu_xq_quant_pool(pool, FT_DTYPE_BF16, x, K, K, T, xq);
        ft_pool_run(pool, xq_worker, &c);
        double s = (double)(ft_time_us() - t0) * 1e-6;
        best = s < best ? s : best;
    }
    return best;
}

int main(int argc, char **argv) {
    struct bench_args a = {.mib = 1024, .k = 4096, .threads = 0, .reps = 5};
    if (!bench_parse(argc, argv, &a)) {
        fprintf(stderr, "usage: bench_cpu [--mib M] [--k K] [--threads N] [--reps R] [--isa 0-3]\n");
        return 2;
    }
    const long mib = a.mib, K = a.k;
    const int threads = a.threads, reps = a.reps;
    struct ft_pool *pool;
    if (ft_pool_init(&pool, threads) != FT_OK) {
        fprintf(stderr, "bench_cpu: %s\n", ft_error());
        return 1;
    }
    size_t bytes = (size_t)mib << 20;
    int N = (int)(bytes / 2 / (size_t)K), Tp = 64;
    bytes = (size_t)N * (size_t)K * 2;
    printf("bench_cpu: ISA %s, %d threads, weight [%d, %ld] bf16 = %.2f GiB\n",
           ft_cpu_isa_name(ft_cpu_isa()), ft_pool_size(pool), N, K, (double)bytes / (1u << 30));

    double dram = ft_cpu_dram_read_gbps(pool, bytes, reps);
    printf("DRAM read                : %7.1f GB/s\n", dram);

    uint16_t *w = ft_sys_alloc_pages(bytes);
    float *x = malloc((size_t)Tp * K * sizeof *x), *y = malloc((size_t)Tp * N * sizeof *y);
    if (!w || !x || !y) {
        fprintf(stderr, "bench_cpu: out of memory (try --mib smaller)\n");
        return 1;
    }
    struct fill_ctx fc = {w, (size_t)N * (size_t)K};
    ft_pool_run(pool, fill_worker, &fc);
    for (long i = 0; i < Tp * K; i++)
        x[i] = (float)(i % 97) * 0.01f - 0.48f;

    double s1 = time_matmul(pool, y, x, w, 1, N, K, reps);
    double gemv = (double)bytes / s1 * 1e-9;
    printf("GEMV bf16 T=1            : %7.1f GB/s  (%.0f%% of DRAM read; %.2f ms)\n", gemv,
           100.0 * gemv / dram, s1 * 1e3);

    double s64 = time_matmul(pool, y, x, w, Tp, N, K, reps > 2 ? 2 : reps);
    double gflops = 2.0 * Tp * (double)N * (double)K / s64 * 1e-9;
    double wgbs = (double)bytes / s64 * 1e-9;
    printf("GEMM bf16 T=%d           : %7.1f GFLOP/s (weights at %.1f GB/s = %.0f%% of DRAM "
           "read; DRAM-bound ceiling %.0f GFLOP/s)\n",
           Tp, gflops, wgbs, 100.0 * wgbs / dram, dram * 1e9 / 2.0 * 2.0 * Tp * 1e-9);
    void *xq = ft_cpu_xq_bytes(FT_DTYPE_BF16, (int)K) ? malloc((size_t)Tp * K * 2) : NULL;
    if (xq) { /* --cpu-act fast: bf16 activations, vdpbf16ps */
        double q1 = time_matmul_xq(pool, y, x, xq, w, 1, N, (int)K, reps);
        printf("GEMV bf16 T=1, bf16 x    : %7.1f GB/s  (%.0f%% of DRAM read; %.2f ms)\n",
               (double)bytes / q1 * 1e-9, 100.0 * bytes / q1 * 1e-9 / dram, q1 * 1e3);
        double q64 = time_matmul_xq(pool, y, x, xq, w, Tp, N, (int)K, reps > 2 ? 2 : reps);
        printf("GEMM bf16 T=%d, bf16 x   : %7.1f GFLOP/s (%.2fx the fp32-activation GEMM)\n", Tp,
               2.0 * Tp * (double)N * (double)K / q64 * 1e-9, s64 / q64);
        free(xq);
    } else {
        printf("bf16 activations         : not on this CPU tier (no AVX512-BF16)\n");
    }
    printf("checksum %g\n", (double)y[0] + y[(size_t)N - 1]);
    ft_sys_free_pages(w, bytes);
    free(x), free(y);
    ft_pool_free(pool);
    return 0;
}
