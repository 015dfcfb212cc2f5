/* device.cu — CUDA device discovery for `ft inspect` and the engine's startup line.
 * CUDA errors become FT_ERR_CUDA with the call named; a missing driver is "no devices". */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

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
