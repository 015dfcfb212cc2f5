/* device.cu — CUDA device discovery for `ft inspect` and the engine's startup line; the
 * watched stream wait of the expert-copy watchdog (moe/offload.c) and its test stall.
 * CUDA errors become FT_ERR_CUDA with the call named; a missing driver is "no devices". */
#include <cuda_runtime.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/device.h"
#include "core/status.h"

extern "C" int ft_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear: no driver / no device is not an error here */
        return 0;
    }
    return n;
}

extern "C" enum ft_status ft_cuda_device_query(int dev, struct ft_cuda_device *out) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess)
        return ft_fail(FT_ERR_CUDA, "cudaGetDeviceProperties(%d): %s (%s:%d)", dev,
                       cudaGetErrorString(e), __FILE__, __LINE__);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->n_sms = p.multiProcessorCount;
    int prev = 0;
    cudaGetDevice(&prev);
    if ((e = cudaSetDevice(dev)) == cudaSuccess) e = cudaMemGetInfo(&out->free_bytes, &out->total_bytes);
    cudaSetDevice(prev);
    if (e != cudaSuccess)
        return ft_fail(FT_ERR_CUDA, "cudaMemGetInfo(device %d): %s (%s:%d)", dev,
                       cudaGetErrorString(e), __FILE__, __LINE__);
    return FT_OK;
}

static int64_t now_ns(void) { /* ft_time_ns's clock (core/timer.h) */
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

extern "C" enum ft_status ft_cuda_stream_wait(struct CUstream_st *s, int64_t deadline_ns) {
    for (int polls = 0;; polls++) {
        const cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return FT_OK;
        if (e != cudaErrorNotReady)
            return ft_fail(FT_ERR_CUDA, "GPU stream: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        /* the clock every 64 polls (a query is a microsecond or two); from 4,096 on, the core
         * is yielded between polls, as a long wait should */
        if ((polls & 63) == 63 && now_ns() > deadline_ns) return FT_ERR_BUSY;
        if (polls >= 4096) sched_yield();
    }
}

__global__ void stall_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(100000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

extern "C" void ft_cuda_stall_stream(struct CUstream_st *s, int ms) {
    stall_kernel<<<1, 1, 0, s>>>((unsigned long long)(ms > 0 ? ms : 0) * 1000000ull);
}
