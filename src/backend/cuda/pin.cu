/* pin.cu — page-locking host memory through the CUDA runtime, for mem/residency.c and the
 * engines' staging buffers. The policy (budget, probe loop, fallback chain) lives in
 * mem/residency.c; this file makes the calls, turns a refusal into FT_ERR_CUDA, counts what it
 * pinned, and (--emulate-pin-cap) refuses past a cap as a WSL2 driver's wall does. Any thread:
 * the counts are under one mutex. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/pin.h"
#include "core/status.h"

/* What these wrappers pinned and have not released: registrations and allocations (the probe's
 * chunks, staging buffers). An allocation freed by a plain cudaFreeHost elsewhere stays here
 * until a refusal would need its bytes: then sweep() asks the runtime which entries are still
 * page-locked and drops the others. */
namespace {
struct pinned {
    void *p;
    size_t bytes;
};
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pinned *g_tab;
int g_n, g_tab_cap;
uint64_t g_cap, g_now, g_peak; /* g_cap 0: no emulated wall */
long g_refused;

double gib(uint64_t b) { return (double)b / (1 << 30); }

void sweep(void) {
    for (int i = 0; i < g_n;) {
        cudaPointerAttributes a;
        if (cudaPointerGetAttributes(&a, g_tab[i].p) == cudaSuccess && a.type == cudaMemoryTypeHost) {
            i++;
            continue;
        }
        cudaGetLastError();
        g_now -= g_tab[i].bytes;
        g_tab[i] = g_tab[--g_n];
    }
}

/* Reserves bytes under the wall (1), or counts a refusal (0). */
int admit(size_t bytes) {
    pthread_mutex_lock(&g_mu);
    if (g_cap && g_now + bytes > g_cap) sweep();
    int ok = !g_cap || g_now + bytes <= g_cap;
    if (ok) {
        g_now += bytes;
        if (g_now > g_peak) g_peak = g_now;
    } else {
        g_refused++;
    }
    pthread_mutex_unlock(&g_mu);
    return ok;
}

void unreserve(size_t bytes) {
    pthread_mutex_lock(&g_mu);
    g_now -= bytes;
    pthread_mutex_unlock(&g_mu);
}

/* p now holds the bytes admit() reserved; an entry at the same address was freed behind our
 * back (its memory went back and came out again). A full table just leaves p uncounted. */
void track(void *p, size_t bytes) {
    pthread_mutex_lock(&g_mu);
    int i = 0;
    while (i < g_n && g_tab[i].p != p) i++;
    if (i < g_n) {
        g_now -= g_tab[i].bytes;
        g_tab[i].bytes = bytes;
    } else {
        if (g_n == g_tab_cap) {
            int cap = g_tab_cap ? 2 * g_tab_cap : 256;
            pinned *t = (pinned *)realloc(g_tab, (size_t)cap * sizeof *t);
            if (t) g_tab = t, g_tab_cap = cap;
        }
        if (g_n < g_tab_cap) g_tab[g_n++] = pinned{p, bytes};
        else g_now -= bytes;
    }
    pthread_mutex_unlock(&g_mu);
}

void untrack(void *p) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++)
        if (g_tab[i].p == p) {
            g_now -= g_tab[i].bytes;
            g_tab[i] = g_tab[--g_n];
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

/* " (--emulate-pin-cap 1.00 GiB, 0.80 GiB pinned)" when the wall refused, else "" */
void wall_text(char *buf, size_t cap, int refused_by_wall) {
    buf[0] = 0;
    if (!refused_by_wall) return;
    pthread_mutex_lock(&g_mu);
    snprintf(buf, cap, " (--emulate-pin-cap %.2f GiB, %.2f GiB pinned)", gib(g_cap), gib(g_now));
    pthread_mutex_unlock(&g_mu);
}
} // namespace

extern "C" int ft_cuda_pin_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

extern "C" void ft_cuda_pin_set_cap(uint64_t bytes) {
    pthread_mutex_lock(&g_mu);
    g_cap = bytes;
    pthread_mutex_unlock(&g_mu);
}

extern "C" void ft_cuda_pin_get_stats(struct ft_cuda_pin_stats *out) {
    pthread_mutex_lock(&g_mu);
    out->cap_bytes = g_cap, out->pinned_bytes = g_now, out->peak_bytes = g_peak;
    out->refused = g_refused;
    pthread_mutex_unlock(&g_mu);
}

extern "C" void ft_cuda_pin_reset_peak(void) {
    pthread_mutex_lock(&g_mu);
    g_peak = g_now, g_refused = 0;
    pthread_mutex_unlock(&g_mu);
}

extern "C" enum ft_status ft_cuda_host_register(void *ptr, size_t bytes) {
    if (bytes == 0) bytes = 1; /* a 0-byte registration is an error in CUDA, not a no-op */
    if (!admit(bytes)) {
        char w[96];
        wall_text(w, sizeof w, 1);
        return ft_fail(FT_ERR_CUDA, "cudaHostRegister(%.2f GiB): out of memory%s", gib(bytes), w);
    }
    cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e == cudaSuccess) {
        track(ptr, bytes);
        return FT_OK;
    }
    unreserve(bytes);
    cudaGetLastError(); /* a refusal must not poison the next unrelated CUDA call */
    return ft_fail(FT_ERR_CUDA, "cudaHostRegister(%.2f GiB): %s", gib(bytes), cudaGetErrorString(e));
}

extern "C" void ft_cuda_host_unregister(void *ptr) {
    if (!ptr) return;
    untrack(ptr);
    if (cudaHostUnregister(ptr) != cudaSuccess) cudaGetLastError();
}

extern "C" void *ft_cuda_host_alloc_pinned(size_t bytes) {
    void *p = NULL;
    if (!admit(bytes)) return NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
        unreserve(bytes);
        return NULL;
    }
    track(p, bytes);
    return p;
}

extern "C" void *ft_cuda_staging_alloc(size_t bytes, enum ft_status *st) {
    void *p = NULL;
    if (*st != FT_OK) return NULL;
    if (!bytes) bytes = 1;
    const int walled = !admit(bytes);
    if (walled || cudaMallocHost(&p, bytes) != cudaSuccess) {
        if (!walled) unreserve(bytes);
        cudaGetLastError();
        char w[96];
        wall_text(w, sizeof w, walled);
        *st = ft_fail(FT_ERR_OOM, "GPU: cannot pin %.1f MiB of host staging memory%s",
                      bytes / 1048576.0, w);
        return NULL;
    }
    track(p, bytes);
    return p;
}

extern "C" void ft_cuda_free_host(void *ptr) {
    if (!ptr) return;
    untrack(ptr);
    if (cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
}

extern "C" void ft_cuda_clear_error(void) { cudaGetLastError(); }

extern "C" void ft_cuda_bind_device(int device) {
    if (cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
}
