/* pin.cu — page-locking host memory through the CUDA runtime, for mem/residency.c. The policy
 * (budget, probe loop, fallback chain) lives there; this file only makes the calls and turns a
 * refusal into FT_ERR_CUDA. Any thread. */
#include <cuda_runtime.h>

#include "backend/cuda/pin.h"
#include "core/status.h"

extern "C" int ft_cuda_pin_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

extern "C" enum ft_status ft_cuda_host_register(void *ptr, size_t bytes) {
    if (bytes == 0) bytes = 1; /* a 0-byte registration is an error in CUDA, not a no-op */
    cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e == cudaSuccess) return FT_OK;
    cudaGetLastError(); /* a refusal must not poison the next unrelated CUDA call */
    return ft_fail(FT_ERR_CUDA, "cudaHostRegister(%.2f GiB): %s", (double)bytes / (1 << 30),
                   cudaGetErrorString(e));
}

extern "C" void ft_cuda_host_unregister(void *ptr) {
    if (ptr && cudaHostUnregister(ptr) != cudaSuccess) cudaGetLastError();
}

extern "C" void *ft_cuda_host_alloc_pinned(size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess)
        return NULL;
    return p;
}

extern "C" void *ft_cuda_staging_alloc(size_t bytes, enum ft_status *st) {
    void *p = NULL;
    if (*st != FT_OK) return NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        *st = ft_fail(FT_ERR_OOM, "GPU: cannot pin %.1f MiB of host staging memory", bytes / 1048576.0);
        return NULL;
    }
    return p;
}

extern "C" void ft_cuda_free_host(void *ptr) {
    if (ptr && cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
}

extern "C" void ft_cuda_clear_error(void) { cudaGetLastError(); }

extern "C" void ft_cuda_bind_device(int device) {
    if (cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
}
