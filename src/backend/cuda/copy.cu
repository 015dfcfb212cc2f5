/* copy.cu — the expert copy engine's device side: batched DMA (cudaMemcpyBatchAsync, falling
 * back to one cudaMemcpyAsync per copy), a gather kernel that reads mapped pinned host memory
 * directly (16-byte loads, 8 blocks), and the device half of the integrity checksum. C
 * launchers; engine thread; everything enqueues on the given stream. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "core/checksum.h"

extern "C" enum ft_status ft_cuda_copy_dma(void *const *dst, const void *const *src,
                                           const size_t *bytes, int n, cudaStream_t s) {
    if (n <= 0) return FT_OK;
    struct cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t idx = 0;
    cudaError_t e = cudaMemcpyBatchAsync(dst, src, bytes, (size_t)n, &attr, &idx, 1, s);
    if (e == cudaSuccess) return FT_OK;
    cudaGetLastError(); /* batch API refused (e.g. pageable source): one copy at a time */
    for (int i = 0; i < n; i++)
        if (cudaMemcpyAsync(dst[i], src[i], bytes[i], cudaMemcpyHostToDevice, s) != cudaSuccess)
            return ft_cuda_check("expert copy (cudaMemcpyAsync)");
    return FT_OK;
}

/* grid-stride 16-byte copy from mapped host memory; the tail byte by byte */
__global__ void gather_copy_kernel(uint8_t *dst, const uint8_t *src, size_t bytes) {
    size_t n16 = bytes / 16, i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = i; j < n16; j += stride)
        ((uint4 *)dst)[j] = __ldcs((const uint4 *)src + j);
    for (size_t j = n16 * 16 + i; j < bytes; j += stride) dst[j] = src[j];
}

extern "C" enum ft_status ft_cuda_copy_gather(void *const *dst, const void *const *src_mapped,
                                              const size_t *bytes, int n, cudaStream_t s) {
    for (int i = 0; i < n; i++) {
        if (((uintptr_t)dst[i] | (uintptr_t)src_mapped[i]) & 15) { /* misaligned: this one by DMA */
            enum ft_status st = ft_cuda_copy_dma(dst + i, src_mapped + i, bytes + i, 1, s);
            if (st != FT_OK) return st;
            continue;
        }
        gather_copy_kernel<<<8, 1024, 0, s>>>((uint8_t *)dst[i], (const uint8_t *)src_mapped[i], bytes[i]);
    }
    return FT_OK;
}

__global__ void checksum_kernel(const uint8_t *p, size_t bytes, unsigned long long *out) {
    size_t n = (bytes + 7) / 8, i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    uint64_t s = 0;
    for (size_t j = i; j < n; j += stride) {
        uint64_t w = 0;
        if (8 * j + 8 <= bytes) {
            w = ((const uint64_t *)p)[j];
        } else {
            for (size_t b = 0; b < bytes - 8 * j; b++) w |= (uint64_t)p[8 * j + b] << (8 * b);
        }
        s += ft_mix64(w ^ (uint64_t)j * FT_CHECKSUM_K);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) atomicAdd(out, (unsigned long long)s);
}

extern "C" void ft_cuda_checksums(const void *const *p, const size_t *bytes, int n, uint64_t *out,
                                  cudaStream_t s) {
    cudaMemsetAsync(out, 0, (size_t)n * sizeof(uint64_t), s);
    for (int i = 0; i < n; i++)
        checksum_kernel<<<32, 256, 0, s>>>((const uint8_t *)p[i], bytes[i], (unsigned long long *)(out + i));
}
