/* dram.c — host DRAM read bandwidth probe: the ceiling the CPU expert executor and the GEMV
 * benchmark are compared with. Every pool thread first fills its own share of the buffer
 * (first touch places the pages), then streams it with the widest loads the ISA tier has,
 * summing with vector adds so nothing is optimised away; the best of `reps` is reported.
 * Called by `ft bench bw` and bench/bench_cpu. Threading: runs on the pool, one caller. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime in core/timer.h under -std=c11 */
#include "backend/cpu/ops.h"

#include <stdlib.h>

#include "core/log.h"
#include "core/sys.h"
#include "core/timer.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FT_X86 1
#endif

#define MAX_WORKERS 1024

struct dram_ctx {
    float *buf;              /* [n_floats] */
    size_t n_floats;         /* a multiple of 64 */
    int fill;                /* 1: write the share, 0: read it */
    float sink[MAX_WORKERS]; /* per-worker sums, so the reads are not optimised away */
};

static float read_scalar(const float *p, size_t n) {
    float s[8] = {0};
    for (size_t i = 0; i < n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += p[i + j];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

#ifdef FT_X86
/* Eight concurrent streams per thread (like the matmul kernel's 8 rows): one sequential
 * stream leaves the hardware prefetchers under-used on some parts and reads low. */
__attribute__((target("avx512f"))) static float read_512(const float *p, size_t n) {
    size_t part = n / 8 / 16 * 16;
    const float *q[8];
    __m512 a[8];
    for (int s = 0; s < 8; s++)
        q[s] = p + (size_t)s * part, a[s] = _mm512_setzero_ps();
    for (size_t i = 0; i < part; i += 16) {
        a[0] = _mm512_add_ps(a[0], _mm512_load_ps(q[0] + i));
        a[1] = _mm512_add_ps(a[1], _mm512_load_ps(q[1] + i));
        a[2] = _mm512_add_ps(a[2], _mm512_load_ps(q[2] + i));
        a[3] = _mm512_add_ps(a[3], _mm512_load_ps(q[3] + i));
        a[4] = _mm512_add_ps(a[4], _mm512_load_ps(q[4] + i));
        a[5] = _mm512_add_ps(a[5], _mm512_load_ps(q[5] + i));
        a[6] = _mm512_add_ps(a[6], _mm512_load_ps(q[6] + i));
        a[7] = _mm512_add_ps(a[7], _mm512_load_ps(q[7] + i));
    }
    for (size_t i = 8 * part; i < n; i += 16)
        a[0] = _mm512_add_ps(a[0], _mm512_load_ps(p + i));
    for (int s = 1; s < 8; s++)
        a[0] = _mm512_add_ps(a[0], a[s]);
    return _mm512_reduce_add_ps(a[0]);
}

__attribute__((target("avx2"))) static float read_256(const float *p, size_t n) {
    size_t part = n / 8 / 8 * 8;
    const float *q[8];
    __m256 a[8];
    for (int s = 0; s < 8; s++)
        q[s] = p + (size_t)s * part, a[s] = _mm256_setzero_ps();
    for (size_t i = 0; i < part; i += 8)
        for (int s = 0; s < 8; s++)
            a[s] = _mm256_add_ps(a[s], _mm256_load_ps(q[s] + i));
    for (size_t i = 8 * part; i < n; i += 8)
        a[0] = _mm256_add_ps(a[0], _mm256_load_ps(p + i));
    for (int s = 1; s < 8; s++)
        a[0] = _mm256_add_ps(a[0], a[s]);
    float lane[8];
    _mm256_storeu_ps(lane, a[0]);
    return lane[0] + lane[1] + lane[2] + lane[3] + lane[4] + lane[5] + lane[6] + lane[7];
}
#endif

static void dram_worker(void *arg, int i, int n) {
    struct dram_ctx *c = arg;
    long lo, hi;
    ft_split((long)(c->n_floats / 64), i, n, &lo, &hi);
    float *p = c->buf + (size_t)lo * 64;
    size_t len = (size_t)(hi - lo) * 64;
    if (c->fill) {
        for (size_t j = 0; j < len; j++)
            p[j] = 1.0f;
        return;
    }
    float s;
#ifdef FT_X86
    enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX512)
        s = read_512(p, len);
    else if (isa == FT_ISA_AVX2)
        s = read_256(p, len);
    else
        s = read_scalar(p, len);
#else
    s = read_scalar(p, len);
#endif
    if (i < MAX_WORKERS) c->sink[i] = s;
}

double ft_cpu_dram_read_gbps(struct ft_pool *pool, size_t bytes, int reps) {
    struct dram_ctx *c = calloc(1, sizeof *c);
    size_t n_floats = bytes / 4 / 64 * 64;
    float *buf = n_floats ? ft_sys_alloc_pages(n_floats * 4) : NULL;
    if (!c || !buf) {
        ft_log_warn("cpu: DRAM probe: cannot allocate %zu bytes", bytes);
        free(c);
        ft_sys_free_pages(buf, n_floats * 4);
        return 0.0;
    }
    c->buf = buf;
    c->n_floats = n_floats;
    c->fill = 1;
    (void)ft_cpu_isa();
    ft_pool_run(pool, dram_worker, c);
    c->fill = 0;
    double best = 0.0;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        int64_t t0 = ft_time_us();
        ft_pool_run(pool, dram_worker, c);
        int64_t us = ft_time_us() - t0;
        double gbps = (double)(n_floats * 4) / ((double)(us > 0 ? us : 1) * 1e3);
        best = gbps > best ? gbps : best;
    }
    ft_sys_free_pages(buf, n_floats * 4);
    free(c);
    return best;
}
