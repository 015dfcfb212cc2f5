/* bench_ggml.c — standalone benchmark (not a test) of the block kernels: for each GGML block
 * type (and the NVFP4 / FP8_B128 rows of format/quant.h, through ft_cpu_matmul_rows as the MoE
 * executor calls it), ft_ggml_dot_rows over a weight matrix far larger than the caches, as GB/s of
 * quantised bytes read, with T = 1 (decode) on one thread and on every pool thread, and with
 * T = 8 on every thread; then the 8-bit-activation ft_ggml_dot_rows_x8 (K-quants; x
 * quantised once, outside the timing, as the engine does once per step) with T = 1. Each is
 * printed next to the DRAM read ceiling of the same run, for one thread and for all
 * (DESIGN.md 1.1).
 * Usage: bench_ggml [--mib M] [--k K] [--threads N] [--reps R] [--isa 0-3]
 *   --mib: bytes of blocks per type (default 1024 MiB: several times the last-level cache of a
 *   server part), --k: row length (default 4096, a multiple of 256), --threads: pool size
 *   (default physical cores), --isa: force a lower tier (0 scalar, 1 avx2, 2 avx512).
 * Threading: main thread drives the pools. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "bench_args.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/sys.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "format/ggml_quant.h"
#include "format/quant.h"

struct job {
    int type;
    uint8_t *w; /* [n_rows, row_bytes] blocks of type */
    size_t row_bytes;
    int n_rows, K, T;
    const float *x; /* [T, K] */
    const void *xq; /* x quantised for ft_ggml_dot_rows_x8 */
    float *y;       /* [T, n_rows] */
    int mode;       /* FILL: write random blocks into the worker's rows, else the kernel */
    enum ft_dtype rows; /* FT_DTYPE_NVFP4 / FT_DTYPE_FP8_B128: row formats; else GGML `type` */
};

enum { FILL, DOT, DOT_X8 };

/* Random codes; the f16 scales (or MXFP4's exponent) set to plausible finite values so no
 * arithmetic meets NaN, infinities or subnormals. */
static void fill_random(uint8_t *p, size_t n_bytes, uint64_t seed) {
    for (size_t i = 0; i + 8 <= n_bytes; i += 8) {
        uint64_t v = ft_rng_next(&seed);
        memcpy(p + i, &v, 8);
    }
}

static void fill_blocks(int type, uint8_t *p, size_t n_bytes, uint64_t seed) {
    fill_random(p, n_bytes, seed);
    const size_t bs = ft_ggml_type_size(type);
    for (size_t b = 0; b + bs <= n_bytes; b += bs) {
        uint8_t *blk = p + b;
        uint16_t d = ft_f32_to_f16(0.001f * (float)(1 + blk[7] % 16));
        if (type == FT_GGML_MXFP4)
            blk[0] = (uint8_t)(118 + blk[0] % 8);
        else if (type == FT_GGML_Q6_K)
            memcpy(blk + 208, &d, 2);
        else
            memcpy(blk, &d, 2);
        if (type == FT_GGML_Q4_K || type == FT_GGML_Q5_K) memcpy(blk + 2, &d, 2); /* dmin */
    }
}

/* Row formats: random codes (e4m3 with the NaN pattern masked off), scales of 1/64. */
static void fill_rows(enum ft_dtype t, uint8_t *p, size_t row_bytes, int n_rows, int K,
                      uint64_t seed) {
    fill_random(p, row_bytes * (size_t)n_rows, seed);
    for (int r = 0; r < n_rows; r++) {
        uint8_t *row = p + (size_t)r * row_bytes;
        float sc = 1.0f / 64;
        if (t == FT_DTYPE_NVFP4) { /* [f32 scale_2][K/16 e4m3 scales][K/2 code pairs] */
            memcpy(row, &sc, 4);
            memset(row + 4, 0x38, (size_t)K / 16); /* e4m3 1.0 */
        } else { /* FP8_B128: [K/128 f32 scale_inv][K e4m3] */
            for (int b = 0; b < K / 128; b++) memcpy(row + 4 * b, &sc, 4);
            for (int k = 0; k < K; k++) row[4 * (K / 128) + k] &= 0xf7;
        }
    }
}

static void job_worker(void *arg, int i, int n) {
    const struct job *j = arg;
    long lo, hi;
    ft_split((j->n_rows + 3) / 4, i, n, &lo, &hi); /* whole 4-row tiles per worker */
    int r0 = (int)lo * 4, r1 = (int)FT_MIN(hi * 4, (long)j->n_rows);
    if (r1 <= r0) return;
    uint8_t *w = j->w + (size_t)r0 * j->row_bytes;
    if (j->rows && j->mode == FILL) {
        fill_rows(j->rows, w, j->row_bytes, r1 - r0, j->K, 0x9e3779b97f4a7c15ull ^ (uint64_t)r0);
    } else if (j->rows) {
        ft_cpu_matmul_rows(j->y + r0, j->n_rows, j->x, j->K, w, j->rows, j->T, 0, r1 - r0, j->K);
    } else if (j->mode == FILL)
        fill_blocks(j->type, w, (size_t)(r1 - r0) * j->row_bytes,
                    0x9e3779b97f4a7c15ull ^ (uint64_t)r0);
    else if (j->mode == DOT)
        ft_ggml_dot_rows(j->type, w, j->row_bytes, r1 - r0, j->x, j->K, j->T, j->y + r0, j->n_rows);
    else
        ft_ggml_dot_rows_x8(j->type, w, j->row_bytes, r1 - r0, j->xq, j->T, j->y + r0, j->n_rows);
}

/* GB/s of weight bytes: best of reps runs of the job on the pool. */
static double run_gbps(struct ft_pool *pool, struct job *j, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = ft_time_us();
        ft_pool_run(pool, job_worker, j);
        double s = (double)(ft_time_us() - t0) * 1e-6;
        best = s < best ? s : best;
    }
    return (double)j->row_bytes * j->n_rows / best * 1e-9;
}

int main(int argc, char **argv) {
    struct bench_args a = {.mib = 1024, .k = 4096, .threads = 0, .reps = 5};
    if (!bench_parse(argc, argv, &a) || a.mib <= 0 || a.k <= 0 || a.k % 256 || a.reps <= 0) {
        fprintf(stderr, "usage: bench_ggml [--mib M] [--k K (multiple of 256)] [--threads N] "
                        "[--reps R] [--isa 0-3]\n");
        return 2;
    }
    const long mib = a.mib, K = a.k;
    const int threads = a.threads, reps = a.reps;
    struct ft_pool *pool = NULL, *one = NULL;
    if (ft_pool_init(&pool, threads) != FT_OK || ft_pool_init(&one, 1) != FT_OK) {
        fprintf(stderr, "bench_ggml: %s\n", ft_error());
        return 1;
    }
    const int n = ft_pool_size(pool), Tb = 8;
    const size_t bytes = (size_t)mib << 20;
    printf("bench_ggml: ISA %s, %d threads, rows of %ld elements, %ld MiB of blocks per type\n",
           ft_cpu_isa_name(ft_cpu_isa()), n, K, mib);
    const double dram1 = ft_cpu_dram_read_gbps(one, bytes, reps);
    const double dramn = ft_cpu_dram_read_gbps(pool, bytes, reps);
    printf("DRAM read ceiling: %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n\n", dram1, dramn, n);
    printf("GB/s of quantised weight bytes read (%% of the DRAM read ceiling)\n");
    printf("type   bits/w | dot_rows T=1    | dot_rows T=1    | dot_rows T=8    | "
           "dot_rows_x8 T=1 | dot_rows_x8 T=1\n");
    printf("              | 1 thread        | %2d threads      | %2d threads      | "
           "1 thread        | %2d threads\n",
           n, n, n);

    uint8_t *w = ft_sys_alloc_pages(bytes);
    void *xq = malloc(ft_ggml_x8_bytes(K));
    float *x = malloc((size_t)Tb * K * sizeof *x);
    float *y = malloc((size_t)Tb * (bytes / (size_t)(K / 2)) * sizeof *y); /* >= 4 bits/weight */
    if (!w || !xq || !x || !y) {
        fprintf(stderr, "bench_ggml: out of memory (try --mib smaller)\n");
        return 1;
    }
    for (long i = 0; i < Tb * K; i++)
        x[i] = (float)(i % 97) * 0.01f - 0.48f;
    ft_ggml_quant_x8(x, (int)K, K, 1, xq);
    static const int types[] = {FT_GGML_Q4_K, FT_GGML_Q6_K, FT_GGML_Q8_0,
                                FT_GGML_Q5_K, FT_GGML_Q4_0, FT_GGML_MXFP4};
    double check = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        struct job j = {.type = types[t],
                        .w = w,
                        .row_bytes = ft_ggml_row_bytes(types[t], K),
                        .K = (int)K,
                        .T = 1,
                        .x = x,
                        .xq = xq,
                        .y = y,
                        .mode = FILL};
        j.n_rows = (int)(bytes / j.row_bytes);
        ft_pool_run(pool, job_worker, &j); /* first touch by the threads that read it */
        j.mode = DOT;
        const double g1 = run_gbps(one, &j, reps), gn = run_gbps(pool, &j, reps);
        j.T = Tb;
        const double g8 = run_gbps(pool, &j, reps > 2 ? 2 : reps);
        printf("%-6s %6.2f | %6.2f (%3.0f%%)   | %6.1f (%3.0f%%)   | %6.1f (%3.0f%%)   | ",
               ft_ggml_type_name(types[t]),
               8.0 * (double)ft_ggml_type_size(types[t]) / ft_ggml_block_size(types[t]), g1,
               100.0 * g1 / dram1, gn, 100.0 * gn / dramn, g8, 100.0 * g8 / dramn);
        if (ft_ggml_x8_supported(types[t])) {
            j.mode = DOT_X8, j.T = 1;
            const double q1 = run_gbps(one, &j, reps), qn = run_gbps(pool, &j, reps);
            printf("%6.2f (%3.0f%%)   | %6.1f (%3.0f%%)\n", q1, 100.0 * q1 / dram1, qn,
                   100.0 * qn / dramn);
        } else {
            printf("%-15s | -\n", "-");
        }
        fflush(stdout);
        check += y[0] + y[j.n_rows - 1];
    }
    static const enum ft_dtype row_types[] = {FT_DTYPE_NVFP4, FT_DTYPE_FP8_B128};
    for (size_t t = 0; t < sizeof row_types / sizeof row_types[0]; t++) {
        struct job j = {.rows = row_types[t], .w = w, .row_bytes = ft_dtype_row_bytes(row_types[t], K),
                        .K = (int)K, .T = 1, .x = x, .y = y, .mode = FILL};
        j.n_rows = (int)(bytes / j.row_bytes);
        ft_pool_run(pool, job_worker, &j);
        j.mode = DOT;
        const double g1 = run_gbps(one, &j, reps), gn = run_gbps(pool, &j, reps);
        j.T = Tb;
        const double g8 = run_gbps(pool, &j, reps > 2 ? 2 : reps);
        printf("%-6s %6.2f | %6.2f (%3.0f%%)   | %6.1f (%3.0f%%)   | %6.1f (%3.0f%%)   | %-15s | -\n",
               row_types[t] == FT_DTYPE_NVFP4 ? "NVFP4" : "FP8B", 8.0 * (double)j.row_bytes / (double)K, g1,
               100.0 * g1 / dram1, gn, 100.0 * gn / dramn, g8, 100.0 * g8 / dramn, "-");
        fflush(stdout);
        check += y[0] + y[j.n_rows - 1];
    }
    printf("checksum %g\n", check);
    ft_sys_free_pages(w, bytes);
    free(x), free(y), free(xq);
    ft_pool_free(one);
    ft_pool_free(pool);
    return 0;
}
