/* bench_attention.c — standalone benchmark (not a test) of the CPU attention (ft_cpu_attention,
 * the kernel the CPU backend's prefill and decode run): T new tokens attending over a cache of
 * C positions, as GFLOP/s (4 * hd flops per query-position pair: q.k and the weighted sum of v),
 * next to the fp32 FMA peak of the same tier and threads measured in the same run (registers
 * only: the compute ceiling; the cache traffic of long contexts keeps attention below it).
 * Usage: bench_attention [--hd 128] [--heads 32] [--kv-heads 4] [--ctx 2048] [--tokens 256]
 *        [--threads N] [--reps 3] [--isa 0-3]
 *   defaults: Qwen3-30B-A3B's attention shape; --heads 14 --kv-heads 2 --hd 64 is the default
 *   model's. Threading: main thread drives one pool. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/threadpool.h"
#include "core/timer.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FMA_CHAINS 12 /* independent accumulators: enough to cover the FMA latency */

__attribute__((target("avx512f"))) static float fma_peak_512(long n) {
    __m512 a[FMA_CHAINS], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < n; k++) /* unrolled, so the accumulators live in registers */
#pragma GCC unroll 16
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    float s = 0;
    for (int i = 0; i < FMA_CHAINS; i++) s += _mm512_reduce_add_ps(a[i]);
    return s;
}

__attribute__((target("avx2,fma"))) static float fma_peak_256(long n) {
    __m256 a[FMA_CHAINS], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm256_set1_ps((float)i);
    for (long k = 0; k < n; k++)
#pragma GCC unroll 16
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
    float r[8], s = 0;
    for (int i = 0; i < FMA_CHAINS; i++) {
        _mm256_storeu_ps(r, a[i]);
        for (int j = 0; j < 8; j++) s += r[j];
    }
    return s;
}
#endif

struct peak {
    long n;
    volatile float sink[256];
};

static void peak_worker(void *arg, int i, int n) {
    struct peak *p = arg;
    (void)n;
#if defined(__x86_64__) || defined(__i386__)
    enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX512) p->sink[i % 256] = fma_peak_512(p->n);
    else if (isa == FT_ISA_AVX2) p->sink[i % 256] = fma_peak_256(p->n);
#endif
}

/* GFLOP/s of fp32 FMAs (2 flops each) on every pool thread; 0 on the scalar tier */
static double fma_peak_gflops(struct ft_pool *pool) {
    int lanes = ft_cpu_isa() >= FT_ISA_AVX512 ? 16 : ft_cpu_isa() == FT_ISA_AVX2 ? 8 : 0;
    if (!lanes) return 0;
    struct peak p = {.n = 20 * 1000 * 1000};
    ft_pool_run(pool, peak_worker, &p); /* warm-up (clocks) */
    int64_t t0 = ft_time_us();
    ft_pool_run(pool, peak_worker, &p);
    double s = (ft_time_us() - t0) / 1e6;
    return 2.0 * lanes * FMA_CHAINS * (double)p.n * ft_pool_size(pool) / s / 1e9;
}

int main(int argc, char **argv) {
    int hd = 128, nh = 32, nkv = 4, C = 2048, T = 256, threads = 0, reps = 3;
    for (int i = 1; i < argc; i += 2) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *dst = !strcmp(f, "--hd") ? &hd : !strcmp(f, "--heads") ? &nh
                 : !strcmp(f, "--kv-heads") ? &nkv : !strcmp(f, "--ctx") ? &C
                 : !strcmp(f, "--tokens") ? &T : !strcmp(f, "--threads") ? &threads
                 : !strcmp(f, "--reps") ? &reps : NULL;
        if (v && !strcmp(f, "--isa")) {
            ft_cpu_set_isa((enum ft_cpu_isa)atoi(v));
            continue;
        }
        if (!v || !dst) {
            fprintf(stderr, "usage: bench_attention [--hd H] [--heads N] [--kv-heads N] [--ctx C] "
                            "[--tokens T] [--threads N] [--reps R] [--isa 0-3]\n");
            return 2;
        }
        *dst = atoi(v);
    }
    if (hd <= 0 || nkv <= 0 || nh % nkv || T <= 0 || T > C || reps <= 0) {
        fprintf(stderr, "bench_attention: need heads a multiple of kv-heads and 0 < tokens <= ctx\n");
        return 2;
    }
    struct ft_pool *pool;
    if (ft_pool_init(&pool, threads) != FT_OK) return 1;
    size_t kvn = (size_t)C * nkv * hd, qn = (size_t)T * nh * hd;
    float *k = malloc(kvn * 4), *v = malloc(kvn * 4), *q = malloc(qn * 4), *o = malloc(qn * 4);
    int32_t *pos = malloc((size_t)T * sizeof *pos);
    if (!k || !v || !q || !o || !pos) return 1;
    for (size_t i = 0; i < kvn; i++)
        k[i] = (float)((i * 7) % 13) * 0.01f, v[i] = (float)((i * 5) % 11) * 0.01f;
    for (size_t i = 0; i < qn; i++) q[i] = (float)((i * 3) % 17) * 0.01f;
    for (int t = 0; t < T; t++) pos[t] = C - T + t; /* the last T positions of the cache */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = ft_time_us();
        ft_cpu_attention(pool, o, q, k, v, pos, T, nh, nkv, hd, 1.0f / 11.3f, 0);
        double s = (ft_time_us() - t0) / 1e6;
        best = s < best ? s : best;
    }
    double pairs = (double)T * nh * (C - T / 2.0 + 0.5); /* causal: token t sees C - T + t + 1 */
    double gf = 4.0 * hd * pairs / best / 1e9, peak = fma_peak_gflops(pool);
    printf("bench_attention: ISA %s, %d threads, hd %d, %d heads on %d KV heads, %d tokens over "
           "%d cached positions\n", ft_cpu_isa_name(ft_cpu_isa()), ft_pool_size(pool), hd, nh,
           nkv, T, C);
    printf("attention: %.1f ms, %.1f GFLOP/s", best * 1e3, gf);
    if (peak > 0) printf(" (%.0f%% of the fp32 FMA peak %.0f GFLOP/s measured now)", 100 * gf / peak, peak);
    printf("\nchecksum %g\n", (double)o[0] + o[qn - 1]);
    free(k), free(v), free(q), free(o), free(pos);
    ft_pool_free(pool);
    return 0;
}
