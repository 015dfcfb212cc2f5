/* kernels.cuh — device helpers shared by the kernel files (ops.cu, hybrid.cu): bf16
 * conversions, warp and block reductions, programmatic dependent launch, the launcher, the
 * paged KV cache's row. Included by .cu files only. */
#ifndef FT_BACKEND_CUDA_KERNELS_CUH
#define FT_BACKEND_CUDA_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#define WARP 32

__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t f2bf(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The inclusive running sum of v over the warp's lanes (lane 0 first). */
template <typename T>
__device__ __forceinline__ T warp_scan(T v, int lane) {
    for (int o = 1; o < WARP; o <<= 1) {
        const T y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += y;
    }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* One 32-element activation block's scale and code sums (int8 activations: the GEMV's shared
 * memory, the grouped GEMM's input). */
struct __align__(8) q8ds {
    float d;
    int16_t s[2]; /* sums of codes 0..15 and 16..31 */
};

/* A warp quantises one 32-element block, element `lane` = v, as the CPU's ft_ggml_quant_x32
 * does with the same correctly rounded operations: d = max|x| / 127, codes round(x / d) (ties to
 * even, clamped to +-127) into q[lane], the scale and half sums into *ds. */
__device__ __forceinline__ void q8_quant32(float v, int lane, int8_t *q, q8ds *ds) {
    const float amax = warp_max(fabsf(v));
    const float id = amax > 1e-30f ? __fdiv_rn(127.0f, amax) : 0.0f;
    int c = __float2int_rn(__fmul_rn(v, id));
    c = c > 127 ? 127 : c < -127 ? -127 : c;
    q[lane] = (int8_t)c;
    int s = c; /* sums over each half warp */
    for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) ds->d = __fdiv_rn(amax, 127.0f);
    if (lane % 16 == 0) ds->s[lane / 16] = (int16_t)s;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024): every thread gets the same value,
 * added in the same order (deterministic). */
template <typename T>
__device__ T block_sum(T v) {
    __shared__ T part[32];
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    v = warp_sum(v);
    __syncthreads(); /* part's previous use is over */
    if (lane == 0) part[w] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : (T)0;
    return warp_sum(v);
}

/* --- programmatic dependent launch (Hopper): each kernel lets the next one launch at once and
 * waits for its predecessor's completion (and memory flush) before it touches activations, so
 * launch latency and weight prefetches overlap the previous kernel's tail. Every kernel here
 * calls pdl_enter() before any load or store of data another kernel writes (weights may be
 * read before it), which keeps stream order transitive. FT_PDL=0 turns it off (A/B runs). --- */
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

static inline int pdl_on(void) {
    static int on = -1;
    if (on < 0) {
        int dev = 0, major = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        on = major >= 9;
    }
    return on;
}

template <typename... KArgs, typename... Args>
static inline void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = pdl_on();
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

static inline unsigned cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

/* row of position p of sequence seq in the paged KV cache */
__device__ __forceinline__ size_t cache_row(const int32_t *tables, int max_blocks, int seq, int p,
                                            int bs) {
    return (size_t)tables[(size_t)seq * max_blocks + p / bs] * bs + (size_t)(p % bs);
}

#endif
