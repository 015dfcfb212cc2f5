/* ggml.cu — experts in GGML block formats on the GPU (GGUF files keep them in the banks as
 * Q4_K, Q6_K, Q5_0, ...) and in NVFP4 / FP8_B128 rows: a decode GEMV that reads the blocks
 * directly (one warp per output row and (token, expert) pair, 8 elements per lane step, with
 * the widest loads the rows' alignment allows; one element for NVFP4/FP8 rows of widths not a
 * multiple of 8; Q8_0 rows of whole 16-byte words through ggml_mmv.cu's staged kernel), and for prefill a dequantiser into bf16
 * scratch for the tensor-core grouped GEMM, a chunk of experts at a time.
 * Each element gets exactly the value format/ggml_quant.c gives it (the same fp32 operations in
 * the same order, with __fmul_rn/__fadd_rn so nothing is contracted into an FMA), which is
 * bit-identical to GGML and the gguf package; test_gpu_ops checks the dequantiser against the
 * CPU bit for bit. ft_cuda_moe_gemv_blocks routes the formats where ggml_mmv.cu's int8 GEMV
 * measured faster (ft_cuda_q8_faster) there under rounded activations; every other case runs
 * the fp32-x kernel here.
 * C launchers (cuda_ops.h); everything enqueues on the given stream. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/ggml_dq.cuh"
#include "format/fp_formats.h"
#include "format/quant.h"

#define WARP 32
#define GQ_WARPS 8

/* y[p, n] = row n of expert ids[p] (format T) . x[p / x_div]; ids[p] -1: 0 (the CPU's pair),
 * -2: left alone (another launch's pair). */
template <int T, int AL>
__global__ void moe_gemv_q_kernel(float *y, const float *x, int x_div, const uint8_t *w,
                                  size_t expert_stride, size_t row_bytes, const int32_t *ids,
                                  int N, int K) {
    int lane = threadIdx.x % WARP, n = blockIdx.x * GQ_WARPS + threadIdx.x / WARP, p = blockIdx.y;
    if (n >= N) return;
    if (ids[p] < 0) {
        if (lane == 0 && ids[p] == -1) y[(size_t)p * N + n] = 0.0f;
        return;
    }
    const uint8_t *row = w + (size_t)ids[p] * expert_stride + (size_t)n * row_bytes;
    const float *xr = x + (size_t)(p / x_div) * K;
    float acc = 0.0f;
    if (any_width<T>() && (K & 7)) /* odd widths: one element per lane step */
        for (int c = lane; c < K; c += WARP) acc += dq1<T>(row, c, K) * xr[c];
    else
    for (int c = lane * 8; c < K; c += WARP * 8) {
        float wf[8];
        dq8<T, AL>(row, c, K, wf);
        const float4 a = *(const float4 *)(xr + c), b = *(const float4 *)(xr + c + 4);
        acc += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x + wf[5] * b.y +
               wf[6] * b.z + wf[7] * b.w;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[(size_t)p * N + n] = acc;
}

/* dst[c] (bf16 [rows, cols]) = expert src_ids[c] of src (format T); a negative id is skipped,
 * and so is an expert no row is routed to (offsets: the sorted rows' [E+1] offsets, or NULL). */
template <int T>
__global__ void dequant_bf16_kernel(uint16_t *dst, const uint8_t *src, size_t expert_stride,
                                    size_t row_bytes, const int32_t *src_of, const int32_t *offsets,
                                    int first, int rows, int cols) {
    int c = blockIdx.y, e = first + c;
    int id = src_of ? src_of[e] : e;
    if (id < 0 || (offsets && offsets[e] == offsets[e + 1])) return;
    if (any_width<T>() && (cols & 7)) { /* odd widths: one element at a time */
        size_t n = (size_t)rows * cols;
        for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n; g += (size_t)gridDim.x * blockDim.x) {
            size_t r = g / cols;
            float v = dq1<T>(src + (size_t)id * expert_stride + r * row_bytes, (int)(g % cols), cols);
            dst[(size_t)c * rows * cols + g] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
        }
        return;
    }
    size_t n8 = (size_t)rows * cols / 8;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n8; g += (size_t)gridDim.x * blockDim.x) {
        size_t r = g * 8 / cols;
        int i = (int)(g * 8 % cols);
        float wf[8];
        dq8<T>(src + (size_t)id * expert_stride + r * row_bytes, i, cols, wf);
        uint16_t *o = dst + (size_t)c * rows * cols + g * 8;
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = __bfloat16_as_ushort(__float2bfloat16_rn(wf[j]));
    }
}

__global__ void chunk_slots_kernel(int32_t *slot_of, const int32_t *src_of, int first, int n, int E) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    int in = e >= first && e < first + n && (!src_of || src_of[e] >= 0);
    slot_of[e] = in ? e - first : -1;
}

extern "C" int ft_cuda_block_format(int dtype) {
#define IS(t) if (dtype == t) return 1;
    FT_BLOCK_TYPES(IS)
#undef IS
    return 0;
}

extern "C" int ft_cuda_q8_faster(int dtype) {
    return dtype == FT_DTYPE_MXFP4 || dtype == FT_DTYPE_Q5_K || dtype == FT_DTYPE_Q5_1;
}

extern "C" void ft_cuda_moe_gemv_blocks(float *y, const float *x, int x_div, const void *w,
                                        size_t expert_stride, int dtype, const int32_t *ids, int P,
                                        int N, int K, int rounded, cudaStream_t s) {
    if (rounded && ft_cuda_q8_faster(dtype) && ft_cuda_q8_format(dtype))
        ft_cuda_moe_gemv_q8(y, x, x_div, w, expert_stride, dtype, ids, P, N, K, s);
    else ft_cuda_moe_gemv_blocks_f32(y, x, x_div, w, expert_stride, dtype, ids, P, N, K, s);
}

extern "C" void ft_cuda_moe_gemv_blocks_f32(float *y, const float *x, int x_div, const void *w,
                                            size_t expert_stride, int dtype, const int32_t *ids,
                                            int P, int N, int K, cudaStream_t s) {
    if (dtype == FT_DTYPE_Q8_0 && ft_cuda_moe_gemv_q8_0_staged(y, x, x_div, w, expert_stride, ids, P, N, K, s))
        return;
    dim3 grid((N + GQ_WARPS - 1) / GQ_WARPS, P);
    size_t rb = ft_dtype_row_bytes((enum ft_dtype)dtype, K);
    /* every row as aligned as w, the stride and the row size allow: the format's wider loads */
    uintptr_t bits = (uintptr_t)w | expert_stride | rb;
#define GO(t)                                                                                       \
    if (dtype == t) {                                                                               \
        if ((bits & (dq_align<t>() - 1)) == 0)                                                      \
            moe_gemv_q_kernel<t, dq_align<t>()><<<grid, GQ_WARPS * WARP, 0, s>>>(                   \
                y, x, x_div, (const uint8_t *)w, expert_stride, rb, ids, N, K);                     \
        else                                                                                        \
            moe_gemv_q_kernel<t, 1><<<grid, GQ_WARPS * WARP, 0, s>>>(                               \
                y, x, x_div, (const uint8_t *)w, expert_stride, rb, ids, N, K);                     \
        return;                                                                                     \
    }
    FT_BLOCK_TYPES(GO)
#undef GO
}

extern "C" void ft_cuda_dequant_experts(uint16_t *dst, const void *src, size_t expert_stride,
                                        int dtype, const int32_t *src_of, const int32_t *offsets,
                                        int first, int n, int rows, int cols, cudaStream_t s) {
    dim3 grid(n < 16 ? 1024 / n : 64, n); /* ~1,024 blocks: a single dense weight fills the GPU too */
    size_t rb = ft_dtype_row_bytes((enum ft_dtype)dtype, cols);
#define GO(t)                                                                                       \
    if (dtype == t) {                                                                               \
        dequant_bf16_kernel<t><<<grid, 256, 0, s>>>(dst, (const uint8_t *)src, expert_stride, rb,   \
                                                    src_of, offsets, first, rows, cols);    \
        return;                                                                                     \
    }
    FT_BLOCK_TYPES(GO)
#undef GO
}

extern "C" void ft_cuda_chunk_slots(int32_t *slot_of, const int32_t *src_of, int first, int n,
                                    int E, cudaStream_t s) {
    chunk_slots_kernel<<<(E + 255) / 256, 256, 0, s>>>(slot_of, src_of, first, n, E);
}
