/* bench_latency.c — how long the host and the GPU take to see each other, the wait offloaded
 * decode pays at every MoE layer (the host waits for the router's ids; with FT_SPAN_GATE the
 * GPU waits for the host's CPU experts). Medians (and 90th percentiles) over many rounds, with
 * the production kernels (ft_cuda_stage_out with its done flag, ft_cuda_gate):
 *   launch+sync   a one-block kernel launched, then cudaStreamSynchronize
 *   launch+flag   the stage-out launched, then its done flag polled in mapped memory
 *   release+flag  a gate kernel already spinning on the GPU, the host's store that releases it,
 *                 then the stage-out's done flag behind it: host->GPU->host through memory only
 *   graph+flag    a CUDA graph of 12 one-block kernels and the stage-out (a decode span's
 *                 shape) launched, then the flag (and the launch call's own host time)
 *   13 kern+flag  the same 13 kernels launched one by one, then the flag
 * each (a) on an idle host, (b) with 15 threads streaming DRAM (the CPU experts' load), (c) with
 * host-to-device copies running on another stream (the cache fills' PCIe load). The floor is
 * a PCIe round trip, ~1-2 us on bare metal. Then, per kind of host memory (pageable,
 * cudaMallocHost, cudaHostAlloc mapped), 8 KB stored + a fence, read, and stored right before
 * a release+flag (the CPU experts' output before the gate). Last, a layer step's shape: the
 * release right after 15 workers streamed DRAM for 250 us, with and without a 9 MiB copy
 * before the gate. Then launch+flag and graph+flag after the GPU (and its link) sat idle for
 * 0-500 us, with and without a gate kernel polling host memory on another stream through the
 * gap: in offloaded decode the GPU idles 50-150 us before each layer step's span, and the span
 * starts 30-57 us after its launch where back-to-back launches take ~10 (an idle power state
 * of the GPU or of the PCIe link, ASPM L1, would show as latency growing with the gap, and a
 * poller keeping the link busy would hide it).
 *   bench_latency [ROUNDS]   (default 2000) */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "core/sys.h"
#include "core/threadpool.h"
#include "core/timer.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the background loads, run on a pool while the rounds go */
struct load {
    atomic_int stop;
    float *dram;        /* 15 x 64 MiB read over and over */
    size_t per;         /* floats per worker */
    void *dst, *src;    /* device and pinned 256 MiB for the copies */
    cudaStream_t cs;
};

static void stream_dram(void *ctx, int i, int n) {
    struct load *ld = ctx;
    (void)n;
    const float *p = ld->dram + (size_t)i * ld->per; /* worker 0: the background thread */
    volatile float sink = 0;
    while (!atomic_load_explicit(&ld->stop, memory_order_relaxed)) {
        float s = 0;
        for (size_t j = 0; j < ld->per; j += 16) s += p[j];
        sink += s;
    }
}

struct bg {
    struct ft_pool *pool;
    struct load *ld;
};

static void *bg_main(void *ctx) {
    struct bg *b = ctx;
    ft_pool_run(b->pool, stream_dram, b->ld);
    return NULL;
}

/* Polls the stage-out's done flag until it reaches launched; 0 (said on stderr) when the
 * stream finished without it. */
static int wait_flag(const unsigned *h_done, unsigned launched, cudaStream_t s) {
    for (long n = 1; (int)(__atomic_load_n(h_done, __ATOMIC_ACQUIRE) - launched) < 0; n++) {
        ft_sys_pause();
        if (n % 4096 == 0 && cudaStreamQuery(s) != cudaErrorNotReady &&
            (int)(__atomic_load_n(h_done, __ATOMIC_ACQUIRE) - launched) < 0) {
            fprintf(stderr, "bench_latency: the stream ended without the flag (%s)\n",
                    cudaGetErrorString(cudaGetLastError()));
            return 0;
        }
    }
    return 1;
}

/* A burst like a layer step's CPU experts: each worker streams its share of the DRAM buffer
 * until `until` (ft_time_ns), then returns. */
struct burst {
    const float *dram;
    size_t per;
    int64_t until;
};

static void burst_dram(void *ctx, int i, int n) {
    const struct burst *b = ctx;
    (void)n;
    const float *p = b->dram + (size_t)i * b->per;
    volatile float sink = 0;
    for (size_t j = 0; ft_time_ns() < b->until; j = (j + 4096) % b->per) {
        float sum = 0;
        for (size_t q = j; q < j + 4096 && q < b->per; q += 16) sum += p[q];
        sink += sum;
    }
}

enum { N_MODES = 3 };

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 2000;
    if (rounds < 10) {
        fprintf(stderr, "usage: bench_latency [ROUNDS >= 10]\n");
        return 2;
    }
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "bench_latency: no CUDA device (%s)\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    int32_t *h_ids, *d_ids;
    float *h_w, *d_w, *d_x;
    unsigned *h_done, *d_seq;
    int *h_gate;
    void *m_ids, *m_w, *m_done, *m_gate;
    cudaHostAlloc((void **)&h_ids, 64, cudaHostAllocMapped), cudaHostAlloc((void **)&h_w, 64, cudaHostAllocMapped);
    cudaHostAlloc((void **)&h_done, 64, cudaHostAllocMapped), cudaHostAlloc((void **)&h_gate, 64, cudaHostAllocMapped);
    cudaHostGetDevicePointer(&m_ids, h_ids, 0), cudaHostGetDevicePointer(&m_w, h_w, 0);
    cudaHostGetDevicePointer(&m_done, h_done, 0), cudaHostGetDevicePointer(&m_gate, h_gate, 0);
    cudaMalloc((void **)&d_ids, 64), cudaMalloc((void **)&d_w, 64), cudaMalloc((void **)&d_x, 64);
    cudaMalloc((void **)&d_seq, 8);
    cudaMemset(d_ids, 0, 64), cudaMemset(d_w, 0, 64), cudaMemset(d_x, 0, 64), cudaMemset(d_seq, 0, 8);
    *h_done = 0, h_gate[0] = h_gate[1] = 0;
    unsigned launched = 0;

    struct load ld = {0};
    ld.per = (size_t)16 << 20; /* 64 MiB of floats a worker */
    ld.dram = ft_sys_alloc_pages(15 * ld.per * sizeof(float));
    if (ld.dram) memset(ld.dram, 1, 15 * ld.per * sizeof(float));
    size_t cbytes = (size_t)256 << 20;
    cudaMalloc(&ld.dst, cbytes);
    cudaHostAlloc(&ld.src, cbytes, cudaHostAllocDefault);
    cudaStreamCreateWithFlags(&ld.cs, cudaStreamNonBlocking);
    if (!ld.dram || !ld.dst || !ld.src || cudaGetLastError() != cudaSuccess) {
        fprintf(stderr, "bench_latency: cannot allocate the load buffers\n");
        return 1;
    }
    struct ft_pool *pool = NULL;
    if (ft_pool_init(&pool, 15) != FT_OK) return 1; /* 15 readers; the 16th core measures */

    double *t = malloc((size_t)rounds * sizeof *t), *tc = malloc((size_t)rounds * sizeof *tc);
    /* a decode span's shape: 12 one-block kernels and the stage-out, as one graph */
    cudaGraphExec_t span = NULL;
    {
        cudaGraph_t gr = NULL;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        for (int j = 0; j < 12; j++) ft_cuda_add(d_x, d_x + 8, 1, s);
        ft_cuda_stage_out(m_ids, d_ids, m_w, d_w, 8, NULL, d_x, 0, d_seq, m_done, s);
        if (cudaStreamEndCapture(s, &gr) != cudaSuccess || cudaGraphInstantiate(&span, gr, 0) != cudaSuccess) {
            fprintf(stderr, "bench_latency: cannot capture the span graph (%s)\n",
                    cudaGetErrorString(cudaGetLastError()));
            return 1;
        }
        cudaGraphDestroy(gr);
    }
    double *leg[2] = {malloc((size_t)rounds * sizeof(double)), malloc((size_t)rounds * sizeof(double))};
    const char *mode_name[N_MODES] = {"idle host", "15 threads reading DRAM", "H2D copies running"};
    printf("bench_latency: %d rounds each, us (median / p90)\n", rounds);
    for (int mode = 0; mode < N_MODES; mode++) {
        pthread_t th;
        struct bg b = {pool, &ld};
        atomic_store(&ld.stop, 0);
        if (mode == 1 && pthread_create(&th, NULL, bg_main, &b) != 0) {
            fprintf(stderr, "bench_latency: cannot start the DRAM readers\n");
            return 1;
        }
        double med[5], p90[5], call = 0;
        for (int kind = 0; kind < 5; kind++) {
            for (int r = -20; r < rounds; r++) {
                if (mode == 2 && cudaStreamQuery(ld.cs) != cudaErrorNotReady) /* keep ~2 copies queued */
                    for (int c = 0; c < 2; c++) cudaMemcpyAsync(ld.dst, ld.src, cbytes, cudaMemcpyHostToDevice, ld.cs);
                int64_t t0 = 0, t1, real0 = 0;
                if (kind == 0) {
                    t0 = ft_time_ns();
                    ft_cuda_add(d_x, d_x + 8, 1, s);
                    cudaStreamSynchronize(s);
                } else {
                    if (kind == 2) ft_cuda_gate(m_gate, s);
                    if (kind != 2) t0 = ft_time_ns();
                    if (kind == 3) {
                        cudaGraphLaunch(span, s);
                        if (r >= 0) tc[r] = (ft_time_ns() - t0) / 1e3;
                    } else {
                        for (int j = 0; kind == 4 && j < 12; j++) ft_cuda_add(d_x, d_x + 8, 1, s);
                        ft_cuda_stage_out(m_ids, d_ids, m_w, d_w, 8, NULL, d_x, 0, d_seq, m_done, s);
                    }
                    launched++;
                    if (kind == 2) { /* the gate kernel is spinning by now */
                        int64_t w = ft_time_ns();
                        while (ft_time_ns() - w < 100000) ft_sys_pause();
                        t0 = ft_time_ns();
                        real0 = ft_time_real_ns();
                        __atomic_store_n(&h_gate[0], 1, __ATOMIC_RELEASE);
                    }
                    if (cudaGetLastError() != cudaSuccess) {
                        fprintf(stderr, "bench_latency: launch failed\n");
                        return 1;
                    }
                    if (!wait_flag(h_done, launched, s)) return 1;
                    if (kind == 2 && r >= 0) { /* the two legs, if %globaltimer reads as CLOCK_REALTIME */
                        int64_t real1 = ft_time_real_ns();
                        unsigned long long opened, stored;
                        memcpy(&opened, h_gate + 2, 8), memcpy(&stored, h_done + 2, 8);
                        leg[0][r] = ((int64_t)opened - real0) / 1e3, leg[1][r] = (real1 - (int64_t)stored) / 1e3;
                    }
                }
                t1 = ft_time_ns();
                if (r >= 0) t[r] = (t1 - t0) / 1e3;
                cudaStreamSynchronize(s);
            }
            qsort(t, rounds, sizeof *t, cmp_d);
            med[kind] = t[rounds / 2], p90[kind] = t[rounds * 9 / 10];
            if (kind == 3) qsort(tc, rounds, sizeof *tc, cmp_d), call = tc[rounds / 2];
        }
        atomic_store(&ld.stop, 1);
        if (mode == 1) pthread_join(th, NULL);
        cudaStreamSynchronize(ld.cs);
        printf("  %-24s launch+sync %6.1f / %6.1f   launch+flag %6.1f / %6.1f   release+flag %6.1f / %6.1f\n",
               mode_name[mode], med[0], p90[0], med[1], p90[1], med[2], p90[2]);
        printf("  %-24s graph+flag %6.1f / %6.1f (the launch call %.1f)   13 kern+flag %6.1f / %6.1f\n", "",
               med[3], p90[3], call, med[4], p90[4]);
        qsort(leg[0], rounds, sizeof(double), cmp_d), qsort(leg[1], rounds, sizeof(double), cmp_d);
        printf("  %-24s release+flag's legs by CLOCK_REALTIME against %%globaltimer: host to GPU "
               "%.1f, GPU to host %.1f (medians)\n", "", leg[0][rounds / 2], leg[1][rounds / 2]);
    }
    /* The host memory the CPU experts' output goes to: 8 KB (a token's hidden row) stored, then
     * a fence; read back; and stored right before the gate's release (what offloaded decode
     * does at the end of each layer step's CPU share), per kind of host memory. Where the host
     * maps pinned memory uncached or write-combining, those stores drain slowly and the release
     * (and any doorbell) waits behind them. */
    enum { NK = 3, NF = 2048 };
    const char *kname[NK] = {"pageable (malloc)", "cudaMallocHost", "cudaHostAlloc mapped"};
    float *buf[NK] = {malloc(NF * sizeof(float)), NULL, NULL};
    cudaMallocHost((void **)&buf[1], NF * sizeof(float));
    cudaHostAlloc((void **)&buf[2], NF * sizeof(float), cudaHostAllocMapped);
    int kr = rounds < 500 ? rounds : 500;
    double *kt[3] = {malloc((size_t)kr * sizeof(double)), malloc((size_t)kr * sizeof(double)),
                     malloc((size_t)kr * sizeof(double))};
    for (int k = 0; k < NK && buf[0] && buf[1] && buf[2] && kt[0] && kt[1] && kt[2]; k++) {
        volatile float sink = 0;
        for (int r = -20; r < kr; r++) {
            int64_t t0 = ft_time_ns();
            for (int i = 0; i < NF; i++) buf[k][i] = (float)(i + r);
            atomic_thread_fence(memory_order_seq_cst);
            int64_t t1 = ft_time_ns();
            float sum = 0;
            for (int i = 0; i < NF; i++) sum += buf[k][i];
            sink += sum;
            int64_t t2 = ft_time_ns();
            ft_cuda_gate(m_gate, s);
            ft_cuda_stage_out(m_ids, d_ids, m_w, d_w, 8, NULL, d_x, 0, d_seq, m_done, s);
            launched++;
            int64_t w = ft_time_ns();
            while (ft_time_ns() - w < 100000) ft_sys_pause();
            int64_t t3 = ft_time_ns();
            for (int i = 0; i < NF; i++) buf[k][i] = (float)(i - r);
            __atomic_store_n(&h_gate[0], 1, __ATOMIC_RELEASE);
            if (!wait_flag(h_done, launched, s)) return 1;
            int64_t t4 = ft_time_ns();
            cudaStreamSynchronize(s);
            if (r >= 0) kt[0][r] = (t1 - t0) / 1e3, kt[1][r] = (t2 - t1) / 1e3, kt[2][r] = (t4 - t3) / 1e3;
        }
        for (int j = 0; j < 3; j++) qsort(kt[j], kr, sizeof(double), cmp_d);
        printf("  host memory %-22s 8 KB stored + fence %6.2f   read %6.2f   stored, then release+flag %6.1f (us, medians of %d)\n",
               kname[k], kt[0][kr / 2], kt[1][kr / 2], kt[2][kr / 2], kr);
    }
    free(buf[0]), cudaFreeHost(buf[1]), cudaFreeHost(buf[2]);
    /* A layer step as offloaded decode runs it: the gate already polling behind the GPU's
     * share (optionally a 9 MiB expert copy and a kernel waiting for it), the pool's 15
     * workers (the caller one of them) streaming DRAM for 250 us, then the release the moment
     * they are done. On the H200 host the engine saw the gate open 35-42 us after the release
     * while the rounds above took 5 us: does this reproduce it? */
    cudaEvent_t copied = NULL;
    cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
    for (int copy = 0; copy < 2 && copied; copy++) {
        struct burst b = {ld.dram, ld.per, 0};
        for (int r = -20; r < kr; r++) {
            if (copy) {
                cudaMemcpyAsync(ld.dst, ld.src, (size_t)9 << 20, cudaMemcpyHostToDevice, ld.cs);
                cudaEventRecord(copied, ld.cs);
                cudaStreamWaitEvent(s, copied, 0);
                ft_cuda_add(d_x, d_x + 8, 1, s); /* the fetched expert, behind its copy */
            }
            ft_cuda_gate(m_gate, s);
            ft_cuda_stage_out(m_ids, d_ids, m_w, d_w, 8, NULL, d_x, 0, d_seq, m_done, s);
            launched++;
            b.until = ft_time_ns() + 250000;
            ft_pool_run(pool, burst_dram, &b);
            int64_t t3 = ft_time_ns();
            __atomic_store_n(&h_gate[0], 1, __ATOMIC_RELEASE);
            if (!wait_flag(h_done, launched, s)) return 1;
            int64_t t4 = ft_time_ns();
            cudaStreamSynchronize(s);
            if (r >= 0) kt[0][r] = (t4 - t3) / 1e3;
        }
        qsort(kt[0], kr, sizeof(double), cmp_d);
        printf("  after 15 workers stream DRAM for 250 us%s: release+flag %6.1f / %6.1f (us, median / p90 of %d)\n",
               copy ? ", a 9 MiB copy before the gate" : "", kt[0][kr / 2], kt[0][kr * 9 / 10], kr);
    }
    if (copied) cudaEventDestroy(copied);
    /* After an idle gap (see the header) */
    static const int gaps[] = {0, 20, 50, 100, 200, 500};
    enum { NG = sizeof gaps / sizeof *gaps };
    cudaStream_t s2 = NULL;
    int *h_keep = NULL;
    void *m_keep = NULL;
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaHostAlloc((void **)&h_keep, 64, cudaHostAllocMapped);
    if (h_keep) cudaHostGetDevicePointer(&m_keep, h_keep, 0);
    for (int keep = 0; keep < 2 && s2 && m_keep; keep++) {
        double gm[2][NG], gp[2][NG];
        for (int kind = 0; kind < 2; kind++)
            for (int gi = 0; gi < NG; gi++) {
                for (int r = -20; r < kr; r++) {
                    cudaStreamSynchronize(s);
                    if (keep) {
                        memset(h_keep, 0, 64);
                        ft_cuda_gate(m_keep, s2); /* polls host memory until released */
                    }
                    int64_t w = ft_time_ns();
                    while (ft_time_ns() - w < (int64_t)gaps[gi] * 1000) ft_sys_pause();
                    int64_t t0 = ft_time_ns();
                    if (kind) cudaGraphLaunch(span, s);
                    else ft_cuda_stage_out(m_ids, d_ids, m_w, d_w, 8, NULL, d_x, 0, d_seq, m_done, s);
                    launched++;
                    if (!wait_flag(h_done, launched, s)) return 1;
                    int64_t t1 = ft_time_ns();
                    if (keep) {
                        __atomic_store_n(&h_keep[0], 1, __ATOMIC_RELEASE);
                        cudaStreamSynchronize(s2);
                    }
                    if (r >= 0) kt[0][r] = (t1 - t0) / 1e3;
                }
                qsort(kt[0], kr, sizeof(double), cmp_d);
                gm[kind][gi] = kt[0][kr / 2], gp[kind][gi] = kt[0][kr * 9 / 10];
            }
        for (int kind = 0; kind < 2; kind++) {
            printf("  after an idle gap%s, %s (us, median / p90 of %d):", keep ? " with a poller" : "",
                   kind ? "graph+flag" : "launch+flag", kr);
            for (int gi = 0; gi < NG; gi++) printf("  %d us %.1f / %.1f", gaps[gi], gm[kind][gi], gp[kind][gi]);
            printf("\n");
        }
    }
    if (s2) cudaStreamDestroy(s2);
    if (h_keep) cudaFreeHost(h_keep);
    free(kt[0]), free(kt[1]), free(kt[2]);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || h_gate[1]) {
        fprintf(stderr, "bench_latency: %s%s\n", cudaGetErrorString(e), h_gate[1] ? " (a gate timed out)" : "");
        return 1;
    }
    ft_pool_free(pool);
    free(t), free(tc), free(leg[0]), free(leg[1]);
    cudaGraphExecDestroy(span);
    return 0;
}
