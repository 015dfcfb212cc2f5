/* bench_ggml.c — standalone benchmark (not a test) of the block kernels: for each GGML block
 * type (and the NVFP4 / FP8_B128 rows of format/quant.h, through ft_cpu_matmul_rows as the MoE
 * executor calls it), ft_ggml_dot_rows over a weight matrix far larger than the caches, as GB/s of
 * quantised bytes read, with T = 1 (decode) on one thread and on every pool thread, and with
 * T = 8 on every thread; then the same three with int8 activations where the type has such a
 * path (ft_ggml_dot_rows_x8 for the K-quants, ft_ggml_dot_rows_x32 for the 32-element blocks,
 * ft_nvfp4_r_dot_rows_x32 for NVFP4 rows; x quantised once, outside the timing, as the engine
 * does once per step). Each is printed next to the DRAM read ceiling of the same run, for one
 * thread and for all (docs/ARCHITECTURE.md section 1).
 * With --gpu (CUDA builds): the GPU's decode GEMVs over the same formats instead, as GB/s of
 * weight bytes next to the HBM ceiling of the same run (a device-to-device copy, bytes read +
 * written, as ft bench prints it): the int8-activation GEMV (ggml_mmv.cu) on a dense [N, K]
 * matrix at T = 1 and 8 beside the bf16 GEMV of the same shape, then the routed experts of one
 * token in Qwen3-30B-A3B's shape (8 of 128 experts, gate_up [1536, 2048], down [2048, 768], a
 * different random 8 each call so they come from HBM) with the int8 kernel, the fp32-x kernel
 * it replaced and bf16 experts. Each figure: a CUDA graph of R calls, best of 5 replays.
 *   bench_ggml --gpu [--n N (rows, default 32768)] [--k K (default 4096)] [--reps R (50)]
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
#include "backend/cpu/ggml_dot.h"
#include "format/ggml_quant.h"
#include "format/quant.h"

struct job {
    int type;
    uint8_t *w; /* [n_rows, row_bytes] blocks of type */
    size_t row_bytes;
    int n_rows, K, T;
    const float *x;   /* [T, K] */
    const void *xq;   /* x quantised for ft_ggml_dot_rows_x8 (K-quants) */
    const void *xq32; /* x quantised for the x32 dots (NVFP4 rows: in its nibble order) */
    float *y;         /* [T, n_rows] */
    int mode;         /* FILL: write random blocks into the worker's rows, else the kernel */
    enum ft_dtype rows; /* FT_DTYPE_NVFP4 / FT_DTYPE_FP8_B128: row formats; else GGML `type` */
};

enum { FILL, DOT, DOT_X8, DOT_X32 };

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
        if (type == FT_GGML_Q4_K || type == FT_GGML_Q5_K || type == FT_GGML_Q4_1 ||
            type == FT_GGML_Q5_1)
            memcpy(blk + 2, &d, 2); /* dmin, m */
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
    } else if (j->rows && j->mode == DOT_X32) {
        ft_nvfp4_r_dot_rows_x32(w, j->row_bytes, r1 - r0, j->xq32, j->T, (size_t)j->K, j->y + r0,
                                j->n_rows);
    } else if (j->rows) {
        ft_cpu_matmul_rows(j->y + r0, j->n_rows, j->x, j->K, w, j->rows, j->T, 0, r1 - r0, j->K);
    } else if (j->mode == FILL)
        fill_blocks(j->type, w, (size_t)(r1 - r0) * j->row_bytes,
                    0x9e3779b97f4a7c15ull ^ (uint64_t)r0);
    else if (j->mode == DOT)
        ft_ggml_dot_rows(j->type, w, j->row_bytes, r1 - r0, j->x, j->K, j->T, j->y + r0, j->n_rows);
    else if (j->mode == DOT_X8)
        ft_ggml_dot_rows_x8(j->type, w, j->row_bytes, r1 - r0, j->xq, j->T, j->y + r0, j->n_rows);
    else
        ft_ggml_dot_rows_x32(j->type, w, j->row_bytes, r1 - r0, j->xq32, j->T, j->y + r0,
                             j->n_rows);
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

/* ------------------------------------------------------------------ --gpu */
#ifdef FT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_ops.h"

struct gcall {
    int kind; /* 0 dense int8, 1 dense bf16, 2 experts int8, 3 experts fp32 x, 4 experts bf16 */
    const void *w;
    enum ft_dtype dt;
    const float *x;
    float *y;
    int T, N, K, E, sets, i, xdiv; /* xdiv: pairs per x row (gate_up 8, down 1) */
    size_t stride;
    const int32_t *ids; /* [sets][8] */
};

static void gcall_run(struct gcall *c, cudaStream_t s) {
    const int32_t *ids = c->ids + (size_t)(c->i++ % c->sets) * 8;
    if (c->kind == 0) {
        struct ft_cuda_gemv_args a = {{c->y, NULL, NULL}, c->N, 0, c->N, {NULL, NULL, NULL}, c->x, NULL,
                                      NULL, 0.0f, NULL, 0, c->T, c->N, c->K};
        ft_cuda_gemv_q8(&a, c->w, c->dt, 0, c->N, s);
    } else if (c->kind == 1) {
        ft_cuda_gemv(c->y, c->N, c->x, c->w, NULL, c->T, c->N, c->K, s);
    } else if (c->kind == 2) {
        ft_cuda_moe_gemv_q8(c->y, c->x, c->xdiv, c->w, c->stride, c->dt, ids, 8, c->N, c->K, s);
    } else if (c->kind == 3) {
        ft_cuda_moe_gemv_blocks_f32(c->y, c->x, c->xdiv, c->w, c->stride, c->dt, ids, 8, c->N, c->K, s);
    } else {
        ft_cuda_moe_gemv(c->y, c->x, c->xdiv, c->w, c->stride / 2, ids, 8, c->N, c->K, s);
    }
}

/* seconds per call: a graph of reps calls, best of 5 replays (-1 on a CUDA error) */
static double gcall_time(struct gcall *c, cudaStream_t s, int reps) {
    gcall_run(c, s); /* eager first: lazy module loads, cached attributes */
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    if (cudaStreamSynchronize(s) != cudaSuccess ||
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return -1;
    for (int i = 0; i < reps; i++) gcall_run(c, s);
    if (cudaStreamEndCapture(s, &g) != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess)
        return -1;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        cudaEventRecord(e0, s);
        cudaGraphLaunch(ge, s);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r > 0 && ms < best) best = ms; /* replay 0 warms the graph */
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
    return ft_cuda_check("bench_ggml --gpu") == FT_OK ? best * 1e-3 / reps : -1;
}

static void *gup(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess) return NULL;
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}

/* a device matrix of `bytes` in GGML type ty (0: bf16), from random host blocks */
static void *gmat(int ty, size_t bytes, uint64_t seed) {
    uint8_t *h = malloc(bytes);
    if (!h) return NULL;
    if (ty) {
        fill_blocks(ty, h, bytes, seed);
    } else {
        for (size_t i = 0; i < bytes / 2; i++) {
            uint16_t b = ft_f32_to_bf16(0.01f * (float)((int)(ft_rng_next(&seed) % 201) - 100) / 100);
            memcpy(h + 2 * i, &b, 2);
        }
    }
    void *d = gup(h, bytes);
    free(h);
    return d;
}

static void gprint(double sec, double bytes, double hbm) {
    if (sec <= 0) printf(" %-21s", "error");
    else printf(" %6.0f (%3.0f%%) %5.1fus", bytes / sec * 1e-9, 100.0 * bytes / sec * 1e-9 / hbm, sec * 1e6);
}

static int gpu_main(int argc, char **argv) {
    long N = 32768, K = 4096;
    int reps = 50;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) N = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--k")) K = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else return fprintf(stderr, "bench_ggml --gpu: unknown flag %s\n", argv[i]), 2;
    }
    if (N <= 0 || K <= 0 || K % 256 || reps <= 0) {
        fprintf(stderr, "usage: bench_ggml --gpu [--n N] [--k K (multiple of 256)] [--reps R]\n");
        return 2;
    }
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "bench_ggml --gpu: no CUDA device\n");
        return 1;
    }
    const double hbm = ft_cuda_d2d_gbps((size_t)2 << 30, 5);
    printf("bench_ggml --gpu: HBM ceiling (device-to-device copy, read + written) %.0f GB/s\n", hbm);
    printf("GB/s of weight bytes read (%% of that ceiling), time per call; a graph of %d calls\n\n", reps);
    const int Tb = 8, E = 128, P = 8, GN = 1536, GK = 2048, DN = 2048, DK = 768, sets = 64;
    float *hx = malloc((size_t)Tb * (K > GK ? K : GK) * 4);
    for (long i = 0; i < Tb * (K > GK ? K : GK); i++) hx[i] = (float)(i % 97) * 0.01f - 0.48f;
    float *x = gup(hx, (size_t)Tb * (K > GK ? K : GK) * 4), *y = NULL;
    cudaMalloc((void **)&y, (size_t)Tb * (N > P * DN ? N : P * DN) * 4);
    int32_t *hids = malloc((size_t)sets * P * 4);
    uint64_t rng = 42;
    for (int i = 0; i < sets; i++)
        for (int j = 0; j < P; j++) {
            int e, dup;
            do {
                e = (int)(ft_rng_next(&rng) % E), dup = 0;
                for (int q = 0; q < j; q++) dup |= hids[i * P + q] == e;
            } while (dup);
            hids[i * P + j] = e;
        }
    int32_t *ids = gup(hids, (size_t)sets * P * 4);
    if (!x || !y || !ids) {
        fprintf(stderr, "bench_ggml --gpu: out of device memory\n");
        return 1;
    }
    static const int types[] = {FT_GGML_Q4_K, FT_GGML_Q5_K, FT_GGML_Q6_K, FT_GGML_Q8_0, FT_GGML_Q4_0,
                                FT_GGML_Q4_1, FT_GGML_Q5_0, FT_GGML_Q5_1, FT_GGML_MXFP4, 0};
    printf("dense [%ld, %ld]      | int8 x, T=1               | int8 x, T=8\n", N, K);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int ty = types[t];
        const size_t rb = ty ? ft_ggml_row_bytes(ty, K) : (size_t)K * 2;
        void *w = gmat(ty, rb * N, 7 + t);
        if (!w) {
            fprintf(stderr, "bench_ggml --gpu: out of device memory\n");
            return 1;
        }
        struct gcall c = {ty ? 0 : 1, w, ty ? ft_dtype_from_ggml(ty) : FT_DTYPE_BF16, x, y, 1, (int)N,
                          (int)K, 0, sets, 0, 1, 0, ids};
        printf("%-6s %5.2f bits/w |", ty ? ft_ggml_type_name(ty) : "bf16", 8.0 * rb / K);
        gprint(gcall_time(&c, s, reps), (double)rb * N, hbm);
        c.T = Tb;
        gprint(gcall_time(&c, s, reps), (double)rb * N, hbm);
        printf("%s\n", ty ? "" : "  (the bf16 GEMV, fp32 x)");
        fflush(stdout);
        cudaFree(w);
    }
    printf("\nexperts, one token: %d of %d, gate_up [%d, %d], down [%d, %d]\n", P, E, GN, GK, DN, DK);
    printf("type   | gate_up int8 x            gate_up fp32 x            | down int8 x               down fp32 x\n");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int ty = types[t];
        printf("%-6s |", ty ? ft_ggml_type_name(ty) : "bf16");
        for (int fam = 0; fam < 2; fam++) {
            const int n = fam ? DN : GN, k = fam ? DK : GK;
            const size_t rb = ty ? ft_ggml_row_bytes(ty, k) : (size_t)k * 2, stride = rb * n;
            void *w = gmat(ty, stride * E, 99 + t);
            if (!w) {
                fprintf(stderr, "bench_ggml --gpu: out of device memory\n");
                return 1;
            }
            struct gcall c = {ty ? 2 : 4, w, ty ? ft_dtype_from_ggml(ty) : FT_DTYPE_BF16, x, y, 1, n, k,
                              E, sets, 0, fam ? 1 : P, stride, ids};
            gprint(gcall_time(&c, s, reps), (double)stride * P, hbm);
            if (ty) {
                c.kind = 3;
                gprint(gcall_time(&c, s, reps), (double)stride * P, hbm);
            } else {
                printf(" %-21s", "");
            }
            printf("%s", fam ? "\n" : " |");
            cudaFree(w);
        }
        fflush(stdout);
    }
    cudaFree(x), cudaFree(y), cudaFree(ids);
    free(hx), free(hids);
    cudaStreamDestroy(s);
    return 0;
}
#endif

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--gpu")) {
#ifdef FT_HAVE_CUDA
        return gpu_main(argc - 1, argv + 1);
#else
        fprintf(stderr, "bench_ggml --gpu: built without CUDA\n");
        return 2;
#endif
    }
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
    printf("GB/s of quantised weight bytes read (%% of the DRAM read ceiling); fp32 x: "
           "ft_ggml_dot_rows / the row kernels,\nint8 x: the x8 (K-quants) or x32 dots; "
           "1t: one thread, %dt: %d threads\n\n",
           n, n);
    printf("              | fp32 x                                    | int8 x\n");
    printf("type   bits/w | T=1 1t        T=1 %2dt       T=8 %2dt       | T=1 1t        "
           "T=1 %2dt       T=8 %2dt\n",
           n, n, n, n);

    uint8_t *w = ft_sys_alloc_pages(bytes);
    void *xq = malloc(ft_ggml_x8_bytes(K) * Tb), *xq32 = malloc(ft_ggml_x32_bytes(K) * Tb);
    void *xq32nv = malloc(ft_ggml_x32_bytes(K) * Tb);
    float *x = malloc((size_t)Tb * K * sizeof *x);
    float *y = malloc((size_t)Tb * (bytes / (size_t)(K / 2)) * sizeof *y); /* >= 4 bits/weight */
    if (!w || !xq || !xq32 || !xq32nv || !x || !y) {
        fprintf(stderr, "bench_ggml: out of memory (try --mib smaller)\n");
        return 1;
    }
    for (long i = 0; i < Tb * K; i++)
        x[i] = (float)(i % 97) * 0.01f - 0.48f;
    ft_ggml_quant_x32(x, (int)K, K, Tb, xq32);
    ft_nvfp4_quant_x32(x, (int)K, K, Tb, xq32nv);
    /* GGML types, then the row formats (type -1: NVFP4, -2: FP8_B128) */
    static const int types[] = {FT_GGML_Q4_K, FT_GGML_Q5_K, FT_GGML_Q6_K, FT_GGML_Q8_0,
                                FT_GGML_Q4_0, FT_GGML_Q4_1, FT_GGML_Q5_0, FT_GGML_Q5_1,
                                FT_GGML_MXFP4, -1, -2};
    double check = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int ty = types[t];
        const enum ft_dtype rows = ty == -1 ? FT_DTYPE_NVFP4 : ty == -2 ? FT_DTYPE_FP8_B128 : 0;
        struct job j = {.type = ty,
                        .w = w,
                        .rows = rows,
                        .row_bytes = rows ? ft_dtype_row_bytes(rows, K) : ft_ggml_row_bytes(ty, K),
                        .K = (int)K,
                        .T = 1,
                        .x = x,
                        .xq = xq,
                        .xq32 = rows == FT_DTYPE_NVFP4 ? xq32nv : xq32,
                        .y = y,
                        .mode = FILL};
        j.n_rows = (int)(bytes / j.row_bytes);
        ft_pool_run(pool, job_worker, &j); /* first touch by the threads that read it */
        const char *name = ty == -1 ? "NVFP4" : ty == -2 ? "FP8B" : ft_ggml_type_name(ty);
        printf("%-6s %6.2f |", name, 8.0 * (double)j.row_bytes / (double)K);
        int modes[2] = {DOT, FILL}; /* FILL: no int8 path */
        if (rows == FT_DTYPE_NVFP4 || (!rows && ft_ggml_x32_supported(ty))) modes[1] = DOT_X32;
        if (!rows && ft_ggml_x8_supported(ty)) {
            modes[1] = DOT_X8;
            ft_ggml_quant_x8(ty, x, (int)K, K, Tb, xq); /* in the type's code order */
        }
        for (int m = 0; m < 2; m++) {
            if (modes[m] == FILL) {
                printf(" %-13s %-13s %-13s", "-", "-", "-");
                continue;
            }
            j.mode = modes[m], j.T = 1;
            const double g1 = run_gbps(one, &j, reps), gn = run_gbps(pool, &j, reps);
            j.T = Tb;
            const double g8 = run_gbps(pool, &j, reps > 2 ? 2 : reps);
            printf(" %6.2f (%3.0f%%) %6.1f (%3.0f%%) %6.1f (%3.0f%%)%s", g1, 100.0 * g1 / dram1, gn,
                   100.0 * gn / dramn, g8, 100.0 * g8 / dramn, m == 0 ? " |" : "");
            check += y[0] + y[j.n_rows - 1];
        }
        printf("\n");
        fflush(stdout);
    }
    printf("checksum %g\n", check);
    ft_sys_free_pages(w, bytes);
    free(x), free(y), free(xq), free(xq32), free(xq32nv);
    ft_pool_free(one);
    ft_pool_free(pool);
    return 0;
}
