/* cmd_bench_bw.c — `ft bench bw`: the rates the hybrid split is made of, measured with the
 * production code paths: host DRAM read, the CPU expert executor (bf16 experts of a given shape,
 * one token's k experts), a large pinned host-to-device copy, expert copies by DMA and by the
 * gather kernel, and the executor and DMA copies running at the same time. Prints them next to
 * each other and saves a profile (moe/bw_profile.h) that the offload backend starts from. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "core/status.h"
#include "core/sys.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "mem/bank.h"
#include "model/model.h"
#include "moe/bw_profile.h"
#include "moe/cpu_exec.h"
#ifdef FT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device.h"
#endif

static const char k_usage[] =
    "usage: ft bench bw [--hidden H] [--expert-width I] [-k K] [-t THREADS] [--device N]\n"
    "                   [--format FMT] [--cpu-act fast|f32]\n"
    "  Measures host DRAM read, the CPU expert executor (H=2048 I=768 k=8 by default:\n"
    "  Qwen3-30B-A3B; experts in FMT: bf16 (default), q4_k, q6_k, q8_0, mxfp4, nvfp4, fp8, ...,\n"
    "  with int8/bf16 activations where the format has them, as ft serve computes), pinned\n"
    "  host-to-device copies, expert copies by DMA and by the gather kernel, and executor +\n"
    "  copies at once; saves a profile the offload backend's hybrid split starts from when the\n"
    "  model's experts have that format and size ($FREETOKEN_CACHE or ~/.cache/freetoken).\n";

/* Experts read in rotating sets of k over ft_bw_rotation_experts (3x the last-level cache), so
 * no rep finds its experts there (a fixed 64 fit a 300 MiB L3 and read faster than DRAM) */
struct bw {
    struct ft_pool *pool;
    struct ft_moe_exec *exec;
    struct ft_bank gu, dn;
    float *x, *out;
    int H, I, k, n_rot;
    uint64_t expert_bytes;
};

/* Seconds for one executor call on n experts of one token (experts from set `set`). */
static double exec_once(struct bw *b, int n, int set) {
    int tok[64], ids[64];
    float w[64];
    for (int j = 0; j < n; j++) tok[j] = 0, ids[j] = (set * b->k + j) % b->n_rot, w[j] = 1.0f / n;
    memset(b->out, 0, (size_t)b->H * sizeof(float));
    int64_t t0 = ft_time_us();
    ft_moe_exec_run_pairs(b->exec, b->pool, &b->gu, &b->dn, NULL, b->x, tok, ids, w, n, b->out);
    return (ft_time_us() - t0) / 1e6;
}

static double exec_best(struct bw *b, int n, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = exec_once(b, n, r);
        best = t < best ? t : best;
    }
    return best;
}

#ifdef FT_HAVE_CUDA
struct copier {
    struct bw *b;
    void *slots;       /* device [k][expert bytes] */
    atomic_int stop;
    double bytes, seconds;
};

/* k experts (gate_up + down each) into the slots by DMA; returns seconds (host-observed).
 * poll: wait by polling the stream with 20 us sleeps instead of cudaDeviceSynchronize, which
 * spins a core: next to the pinned executor pool a spinning copier took a worker's core and
 * the executor measured a tenth of its speed. The engine never
 * spins while the executor runs (its copies are asynchronous), so the concurrent figure must
 * not either. */
static double copy_k(struct bw *b, void *slots, int set, int gather, const void *map_gu,
                     const void *map_dn, int poll) {
    void *dst[128];
    const void *src[128];
    size_t by[128];
    int c = 0;
    size_t gub = b->gu.row_bytes, dnb = b->dn.row_bytes;
    for (int j = 0; j < b->k; j++) {
        int e = (set * b->k + j) % b->n_rot;
        dst[c] = (char *)slots + (size_t)j * (gub + dnb);
        src[c] = gather ? (const char *)map_gu + (size_t)e * b->gu.stride
                        : (const char *)ft_bank_expert(&b->gu, e);
        by[c++] = gub;
        dst[c] = (char *)slots + (size_t)j * (gub + dnb) + gub;
        src[c] = gather ? (const char *)map_dn + (size_t)e * b->dn.stride
                        : (const char *)ft_bank_expert(&b->dn, e);
        by[c++] = dnb;
    }
    int64_t t0 = ft_time_us();
    if (gather) ft_cuda_copy_gather(dst, src, by, c, 0);
    else ft_cuda_copy_dma(dst, src, by, c, 0);
    if (poll) {
        const struct timespec ts = {0, 20000};
        while (cudaStreamQuery(0) == cudaErrorNotReady) nanosleep(&ts, NULL);
    }
    cudaDeviceSynchronize();
    return (ft_time_us() - t0) / 1e6;
}

static void *copy_loop(void *arg) {
    struct copier *cp = arg;
    for (int i = 0; !atomic_load(&cp->stop); i++) {
        cp->seconds += copy_k(cp->b, cp->slots, i, 0, NULL, NULL, 1);
        cp->bytes += (double)cp->b->k * cp->b->expert_bytes;
    }
    return NULL;
}
#endif

/* "12.3", or "n/a" for a path this machine could not measure (no GPU) */
static const char *rate(double gbps, char *buf) {
    if (gbps > 0) snprintf(buf, 32, "%.1f", gbps);
    else snprintf(buf, 32, "n/a");
    return buf;
}

int ft_cmd_bench_bw(int argc, char **argv) {
    long H = 2048, I = 768, k = 8, threads = 0, device = 0;
    enum ft_dtype fmt = FT_DTYPE_BF16;
    int fast = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--format") || !strcmp(a, "--cpu-act")) {
            if (!(v = ft_cli_value(argc, argv, &i))) return 2;
            if (!strcmp(a, "--format") && ft_synthetic_format(v, &fmt) != FT_OK)
                return ft_cli_usage_error("bench bw", "--format: %s", ft_error());
            if (!strcmp(a, "--cpu-act") && (fast = ft_cli_cpu_act("bench bw", v)) < 0) return 2;
            continue;
        }
        long *t = !strcmp(a, "--hidden") ? &H : !strcmp(a, "--expert-width") ? &I
                  : !strcmp(a, "-k") ? &k : !strcmp(a, "-t") || !strcmp(a, "--threads") ? &threads
                  : !strcmp(a, "--device") ? &device : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(k_usage, stdout);
            return 0;
        }
        if (!t) return ft_cli_usage_error("bench bw", "unknown option '%s'", a);
        if (!(v = ft_cli_value(argc, argv, &i))) return 2;
        if (ft_cli_int(v, t == &threads ? 1 : 0, 1 << 16, t) || (t == &k && (k < 1 || k > 32)))
            return ft_cli_usage_error("bench bw", "%s: '%s' is out of range", a, v);
    }
    struct bw b = {.H = (int)H, .I = (int)I, .k = (int)k};
    const struct ft_row_schema *sch = ft_row_schema_for(fmt);
    if (!ft_dtype_row_bytes(fmt, H) || !ft_dtype_row_bytes(fmt, I))
        return ft_cli_usage_error("bench bw", "--format %s: --hidden %ld and --expert-width %ld must "
                                  "be whole blocks of the format", sch->name, H, I);
    b.n_rot = ft_bw_rotation_experts((uint64_t)2 * I * ft_dtype_row_bytes(fmt, H) +
                                     (uint64_t)H * ft_dtype_row_bytes(fmt, I));
    enum ft_status st = ft_pool_init_pinned(&b.pool, (int)threads); /* as the offload executor */
    if (st == FT_OK) st = ft_bank_init(&b.gu, sch, FT_BANK_GATE_UP, b.n_rot, 2 * b.I, b.H);
    if (st == FT_OK) st = ft_bank_init(&b.dn, sch, FT_BANK_DOWN, b.n_rot, b.H, b.I);
    if (st == FT_OK) st = ft_moe_exec_init(&b.exec, 1, b.k, b.n_rot, b.H, b.I);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    if (st == FT_OK) st = ft_bank_fill_random(b.pool, &b.gu, &seed);
    if (st == FT_OK) st = ft_bank_fill_random(b.pool, &b.dn, &seed);
    b.x = calloc((size_t)b.H, sizeof *b.x);
    b.out = calloc((size_t)b.H, sizeof *b.out);
    if (st == FT_OK && (!b.x || !b.out)) st = ft_fail(FT_ERR_OOM, "bench bw: out of memory");
    if (st != FT_OK) return ft_cli_fail(st);
    ft_moe_exec_set_fast_act(b.exec, fast);
    for (int h = 0; h < b.H; h++) b.x[h] = (float)((h * 7) % 13) * 0.1f - 0.6f;
    b.expert_bytes = b.gu.row_bytes + b.dn.row_bytes;
    struct ft_bw_profile p = {.expert_bytes = b.expert_bytes, .threads = ft_pool_size(b.pool)};
    snprintf(p.format, sizeof p.format, "%s", sch->name);
    snprintf(p.gpu, sizeof p.gpu, "no GPU");
    ft_sys_cpu_model(p.cpu, sizeof p.cpu);
    p.dram_read_gbps = ft_cpu_dram_read_gbps(b.pool, (size_t)1 << 30, 3);
    exec_best(&b, b.k, 2); /* warm-up */
    double tk = exec_best(&b, b.k, 12), t1 = exec_best(&b, 1, 12);
    p.cpu_expert_gbps = b.k * (double)b.expert_bytes / tk / 1e9;
    p.cpu_fixed_s = t1 - (tk - t1) / (b.k - 1 > 0 ? b.k - 1 : 1);
    if (p.cpu_fixed_s < 0) p.cpu_fixed_s = 0;
#ifdef FT_HAVE_CUDA
    struct ft_cuda_device d;
    if (ft_cuda_device_count() > device && cudaSetDevice((int)device) == cudaSuccess &&
        ft_cuda_device_query((int)device, &d) == FT_OK) {
        snprintf(p.gpu, sizeof p.gpu, "%.127s", d.name);
        size_t big = (size_t)512 << 20;
        void *hbuf = NULL, *dbuf = NULL, *slots = NULL, *map_gu = NULL, *map_dn = NULL;
        cudaMallocHost(&hbuf, big);
        cudaMalloc(&dbuf, big);
        cudaMalloc(&slots, (size_t)b.k * b.expert_bytes);
        if (hbuf && dbuf) {
            double best = 1e30;
            for (int r = 0; r < 4; r++) {
                int64_t t0 = ft_time_us();
                cudaMemcpy(dbuf, hbuf, big, cudaMemcpyHostToDevice);
                double t = (ft_time_us() - t0) / 1e6;
                best = r && t < best ? t : best;
            }
            p.pinned_h2d_gbps = big / best / 1e9;
        }
        int reg = cudaHostRegister(b.gu.base, b.gu.bytes, cudaHostRegisterMapped) == cudaSuccess &&
                  cudaHostRegister(b.dn.base, b.dn.bytes, cudaHostRegisterMapped) == cudaSuccess &&
                  cudaHostGetDevicePointer(&map_gu, b.gu.base, 0) == cudaSuccess &&
                  cudaHostGetDevicePointer(&map_dn, b.dn.base, 0) == cudaSuccess;
        cudaGetLastError();
        if (slots && reg) {
            double td = 1e30, tg = 1e30;
            for (int r = 0; r < 6; r++) {
                double t = copy_k(&b, slots, r, 0, NULL, NULL, 0);
                td = r && t < td ? t : td;
                t = copy_k(&b, slots, r + 3, 1, map_gu, map_dn, 0);
                tg = r && t < tg ? t : tg;
            }
            p.copy_dma_gbps = b.k * (double)b.expert_bytes / td / 1e9;
            p.copy_gather_gbps = b.k * (double)b.expert_bytes / tg / 1e9;
            /* both at once for about a second: the executor here, DMA copies on a thread */
            struct copier cp = {.b = &b, .slots = slots};
            pthread_t th;
            if (pthread_create(&th, NULL, copy_loop, &cp) == 0) {
                double cs = 0;
                int n = 0;
                int64_t t0 = ft_time_us();
                while (ft_time_us() - t0 < 1000000) cs += exec_once(&b, b.k, 5 + n++);
                atomic_store(&cp.stop, 1);
                pthread_join(th, NULL);
                p.conc_cpu_expert_gbps = n * b.k * (double)b.expert_bytes / cs / 1e9;
                p.conc_copy_gbps = cp.seconds > 0 ? cp.bytes / cp.seconds / 1e9 : 0;
            }
        }
        if (reg) {
            cudaHostUnregister(b.gu.base);
            cudaHostUnregister(b.dn.base);
        }
        cudaFreeHost(hbuf);
        cudaFree(dbuf);
        cudaFree(slots);
        cudaGetLastError();
    }
#endif
    printf("bandwidth profile: %s | %s | %d threads | %s experts of %.2f MiB (H=%d, I=%d), k=%d of %d "
           "rotating (at least 3x the %.0f MiB last-level cache), %s activations\n\n", p.gpu, p.cpu,
           p.threads, p.format, b.expert_bytes / 1048576.0, b.H, b.I, b.k, b.n_rot,
           ft_sys_llc_bytes() / 1048576.0,
           !fast || !(ft_cpu_xq_bytes(fmt, b.H) || ft_cpu_xq_bytes(fmt, b.I)) ? "fp32"
           : ft_cpu_xq_bytes(fmt, b.H) == 2 * (size_t)b.H                   ? "bf16" : "int8");
    char c1[32], c2[32], c3[32], c4[32], c5[32];
    printf("| path | alone GB/s | with the other running GB/s |\n|---|---:|---:|\n");
    printf("| host DRAM read (ceiling of the CPU side) | %.1f | - |\n", p.dram_read_gbps);
    printf("| CPU executor, %d experts of one token | %.1f (%.0f%% of DRAM; fixed %.3f ms per "
           "step) | %s |\n", b.k, p.cpu_expert_gbps, 100 * p.cpu_expert_gbps / p.dram_read_gbps,
           1e3 * p.cpu_fixed_s, rate(p.conc_cpu_expert_gbps, c1));
    printf("| pinned host-to-device, 512 MiB (ceiling of the copy side) | %s | - |\n",
           rate(p.pinned_h2d_gbps, c2));
    printf("| expert copies, batched DMA | %s | %s |\n", rate(p.copy_dma_gbps, c3),
           rate(p.conc_copy_gbps, c4));
    printf("| expert copies, gather kernel | %s | - |\n", rate(p.copy_gather_gbps, c5));
    char path[1024];
    st = ft_bw_profile_save(&p, path, sizeof path);
    if (st == FT_OK) printf("\nprofile saved to %s\n", path);
    ft_moe_exec_free(b.exec);
    ft_bank_free(&b.gu);
    ft_bank_free(&b.dn);
    free(b.x);
    free(b.out);
    ft_pool_free(b.pool);
    return st == FT_OK ? 0 : ft_cli_fail(st);
}
