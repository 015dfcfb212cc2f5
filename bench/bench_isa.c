/* bench_isa.c — what one core of this host does per second with the instructions the CPU
 * executor's block-format kernels are made of (x86-64 with AVX-512 only): the clock, from a
 * chain of dependent scalar multiplies (three cycles each), then each zmm instruction's throughput with
 * eight independent registers, as instructions per ns and cycles each at that clock. With
 * --threads N the same runs on N threads at once (each thread's own figures, then their mean):
 * whether all-core AVX-512 work lowers the clock. A measurement, not a test: it asserts nothing.
 *
 * usage: bench_isa [--threads N] [--iters M] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

#if defined(__x86_64__)
#define BODY8(ins) ins(0) ins(1) ins(2) ins(3) ins(4) ins(5) ins(6) ins(7)
#define CLOB "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "cc"
#define ZERO "vpxord %%zmm0, %%zmm0, %%zmm0\n\t" "vmovdqa64 %%zmm0, %%zmm1\n\t"                   \
             "vmovdqa64 %%zmm0, %%zmm2\n\t" "vmovdqa64 %%zmm0, %%zmm3\n\t"                          \
             "vmovdqa64 %%zmm0, %%zmm4\n\t" "vmovdqa64 %%zmm0, %%zmm5\n\t"                          \
             "vmovdqa64 %%zmm0, %%zmm6\n\t" "vmovdqa64 %%zmm0, %%zmm7\n\t"                          \
             "vmovdqa64 %%zmm0, %%zmm8\n\t" "vmovdqa64 %%zmm0, %%zmm9\n\t"

/* one loop of eight independent instructions per iteration, `it` iterations */
#define LOOP(name, ins)                                                                            \
    static void name(long it) {                                                                    \
        __asm__ volatile(ZERO "1:\n\t" BODY8(ins) "dec %0\n\t"                                     \
                                                  "jnz 1b\n\t"                                     \
                         : "+r"(it)                                                                \
                         :                                                                         \
                         : CLOB);                                                                  \
    }
#define I_DPBUSD(r) "vpdpbusd %%zmm8, %%zmm9, %%zmm" #r "\n\t"
#define I_PERMB(r) "vpermb %%zmm8, %%zmm9, %%zmm" #r "\n\t"
#define I_PERMT2B(r) "vpermt2b %%zmm8, %%zmm9, %%zmm" #r "\n\t"
#define I_PSHUFB(r) "vpshufb %%zmm8, %%zmm9, %%zmm" #r "\n\t"
#define I_INSERT(r) "vinserti32x4 $1, %%xmm8, %%zmm9, %%zmm" #r "\n\t"
#define I_UNPACK(r) "vpunpckldq %%zmm8, %%zmm9, %%zmm" #r "\n\t"
#define I_SRLW(r) "vpsrlw $4, %%zmm9, %%zmm" #r "\n\t"
#define I_FMA(r) "vfmadd231ps %%zmm8, %%zmm9, %%zmm" #r "\n\t"
#define I_DPBF16(r) "vdpbf16ps %%zmm8, %%zmm9, %%zmm" #r "\n\t"
#define I_LOAD(r) "vmovdqu64 (%%rsp), %%zmm" #r "\n\t"
LOOP(run_dpbusd, I_DPBUSD)
LOOP(run_permb, I_PERMB)
LOOP(run_permt2b, I_PERMT2B)
LOOP(run_pshufb, I_PSHUFB)
LOOP(run_insert, I_INSERT)
LOOP(run_unpack, I_UNPACK)
LOOP(run_srlw, I_SRLW)
LOOP(run_fma, I_FMA)
LOOP(run_dpbf16, I_DPBF16)
LOOP(run_load, I_LOAD)

/* eight dependent multiplies per iteration, three cycles each on Intel and AMD cores alike:
 * the clock (dependent adds measure nothing on cores whose renamer folds add-immediates: the
 * H200 host's Xeon ran them at "6-10 GHz") */
static void run_imuls(long it) {
    long x = 3;
    __asm__ volatile("1:\n\t"
                     "imul %1, %1\n\t imul %1, %1\n\t imul %1, %1\n\t imul %1, %1\n\t"
                     "imul %1, %1\n\t imul %1, %1\n\t imul %1, %1\n\t imul %1, %1\n\t"
                     "dec %0\n\t jnz 1b\n\t"
                     : "+r"(it), "+r"(x)
                     :
                     : "cc");
}

static const struct op {
    const char *name, *feature;
    void (*run)(long);
} k_ops[] = {
    {"vpdpbusd zmm", "avx512vnni", run_dpbusd},  {"vpermb zmm", "avx512vbmi", run_permb},
    {"vpermt2b zmm", "avx512vbmi", run_permt2b}, {"vpshufb zmm", "avx512bw", run_pshufb},
    {"vinserti32x4 zmm", "avx512f", run_insert}, {"vpunpckldq zmm", "avx512f", run_unpack},
    {"vpsrlw zmm", "avx512bw", run_srlw},        {"vfmadd231ps zmm", "avx512f", run_fma},
    {"vdpbf16ps zmm", "avx512bf16", run_dpbf16}, {"vmovdqu64 load zmm", "avx512f", run_load},
};
enum { N_OPS = sizeof k_ops / sizeof k_ops[0] };

static int supported(const char *f) {
    if (!strcmp(f, "avx512f")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(f, "avx512bw")) return __builtin_cpu_supports("avx512bw");
    if (!strcmp(f, "avx512vnni")) return __builtin_cpu_supports("avx512vnni");
    if (!strcmp(f, "avx512vbmi")) return __builtin_cpu_supports("avx512vbmi");
    if (!strcmp(f, "avx512bf16")) return __builtin_cpu_supports("avx512bf16");
    return 0;
}

struct job {
    long iters;
    pthread_barrier_t *bar;
    double ghz, per_ns[N_OPS];
};

static double timed(void (*run)(long), long it) {
    run(it / 10); /* warm: the clock and the vector units up */
    int64_t t0 = ft_time_ns();
    run(it);
    return (double)(ft_time_ns() - t0);
}

static void *thread_main(void *arg) {
    struct job *j = arg;
    pthread_barrier_wait(j->bar);
    j->ghz = 3.0 * 8.0 * (double)j->iters / timed(run_imuls, j->iters);
    for (int o = 0; o < N_OPS; o++) {
        pthread_barrier_wait(j->bar);
        j->per_ns[o] = supported(k_ops[o].feature) ? 8.0 * (double)j->iters / timed(k_ops[o].run, j->iters) : 0;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 1;
    long iters = 20000000;
    for (int a = 1; a < argc; a += 2) {
        if (a + 1 < argc && !strcmp(argv[a], "--threads")) threads = atoi(argv[a + 1]);
        else if (a + 1 < argc && !strcmp(argv[a], "--iters")) iters = atol(argv[a + 1]);
        else { /* an unknown flag, or one without its value */
            fprintf(stderr, "usage: bench_isa [--threads N] [--iters M]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 256 || iters < 1000) {
        fprintf(stderr, "bench_isa: --threads 1-256, --iters at least 1000\n");
        return 2;
    }
    if (!__builtin_cpu_supports("avx512f")) {
        printf("bench_isa: this CPU has no AVX-512: nothing to measure\n");
        return 0;
    }
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    struct job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    if (!jobs || !th) return 1;
    for (int t = 0; t < threads; t++) {
        jobs[t].iters = iters;
        jobs[t].bar = &bar;
        if (t && pthread_create(&th[t], NULL, thread_main, &jobs[t]) != 0) {
            fprintf(stderr, "bench_isa: cannot start thread %d\n", t);
            return 1;
        }
    }
    thread_main(&jobs[0]);
    for (int t = 1; t < threads; t++) pthread_join(th[t], NULL);
    double ghz = 0;
    for (int t = 0; t < threads; t++) ghz += jobs[t].ghz / threads;
    printf("bench_isa: %d thread%s at once; clock (dependent multiplies) %.2f GHz mean", threads,
           threads > 1 ? "s" : "", ghz);
    if (threads > 1) printf(" (thread 0: %.2f)", jobs[0].ghz);
    printf("\n%-20s %10s %12s\n", "instruction", "per ns", "cycles each");
    for (int o = 0; o < N_OPS; o++) {
        double r = 0;
        for (int t = 0; t < threads; t++) r += jobs[t].per_ns[o] / threads;
        if (r == 0) printf("%-20s %10s %12s\n", k_ops[o].name, "-", "(no such ISA)");
        else printf("%-20s %10.2f %12.2f\n", k_ops[o].name, r, ghz / r);
    }
    free(jobs), free(th);
    return 0;
}
#else
int main(void) {
    printf("bench_isa: x86-64 only\n");
    return 0;
}
#endif
