/* moe.cu — MoE prefill on the device: a routing sort (count, scan, scatter) that needs no host
 * round trip, a tensor-core (WMMA bf16, fp32 accumulation) GEMM over every expert's group of
 * rows in one launch, and a deterministic weighted un-sort. Engine thread; launchers only
 * enqueue on their stream. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"

using namespace nvcuda;

__global__ void moe_count_kernel(int32_t *counts, const int32_t *ids, int R) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < R) atomicAdd(counts + ids[r], 1);
}

/* one block: exclusive scan of counts into offsets and cursor (E <= 1024) */
__global__ void moe_scan_kernel(int32_t *offsets, int32_t *cursor, const int32_t *counts, int E) {
    __shared__ int32_t buf[1024];
    int i = threadIdx.x;
    buf[i] = i < E ? counts[i] : 0;
    __syncthreads();
    for (int o = 1; o < 1024; o <<= 1) { /* Hillis-Steele inclusive scan */
        int v = i >= o ? buf[i - o] : 0;
        __syncthreads();
        buf[i] += v;
        __syncthreads();
    }
    if (i < E) {
        int ex = i ? buf[i - 1] : 0;
        offsets[i] = ex;
        cursor[i] = ex;
    }
    if (i == E - 1) offsets[E] = buf[i];
}

/* Pairs are placed in token order within each expert: the single-thread-per-expert loop keeps
 * the layout deterministic (R is small: T * k <= a few thousand). */
__global__ void moe_place_kernel(int32_t *rtok, int32_t *pair_dst, int32_t *cursor,
                                 const int32_t *ids, int R, int k, int E) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    int c = cursor[e];
    for (int r = 0; r < R; r++)
        if (ids[r] == e) {
            rtok[c] = r / k;
            pair_dst[r] = c++;
        }
}

extern "C" void ft_cuda_moe_sort(int32_t *counts, int32_t *offsets, int32_t *cursor, int32_t *rtok,
                                 int32_t *pair_dst, const int32_t *ids, int T, int k, int E,
                                 cudaStream_t s) {
    int R = T * k;
    cudaMemsetAsync(counts, 0, (size_t)E * sizeof(int32_t), s);
    moe_count_kernel<<<(R + 255) / 256, 256, 0, s>>>(counts, ids, R);
    moe_scan_kernel<<<1, 1024, 0, s>>>(offsets, cursor, counts, E);
    moe_place_kernel<<<(E + 127) / 128, 128, 0, s>>>(rtok, pair_dst, cursor, ids, R, k, E);
}

#define MG_TM 64
#define MG_TN 64
#define MG_TK 32
#define MG_LD (MG_TK + 8) /* bf16 elements per smem row (multiple of 8, breaks bank conflicts) */

/* Block: 4 warps, a 64x64 output tile of one expert; each warp a 32x32 quarter (2x2 fragments). */
__global__ void moe_gemm_kernel(float *y, const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                               const int32_t *offsets, int N, int K) {
    int e = blockIdx.x, n0 = blockIdx.y * MG_TN;
    int r0 = offsets[e] + blockIdx.z * MG_TM, r1 = offsets[e + 1];
    if (r0 >= r1) return;
    const __nv_bfloat16 *we = w + (size_t)e * N * K;
    __shared__ __align__(32) __nv_bfloat16 As[MG_TM * MG_LD];
    __shared__ __align__(32) __nv_bfloat16 Bs[MG_TN * MG_LD];
    __shared__ __align__(32) float Cs[MG_TM * (MG_TN + 4)];
    int warp = threadIdx.x / 32, wy = warp / 2, wx = warp % 2;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(c[i][j], 0.0f);
    int vec = (K % 8) == 0;
    for (int k0 = 0; k0 < K; k0 += MG_TK) {
        /* 64 rows x 32 cols of A and of B: 256 chunks of 8 each, 2 per thread */
        for (int ci = threadIdx.x; ci < MG_TM * MG_TK / 8; ci += blockDim.x) {
            int row = ci / (MG_TK / 8), col = (ci % (MG_TK / 8)) * 8, kk = k0 + col;
            __nv_bfloat16 *da = As + row * MG_LD + col, *db = Bs + row * MG_LD + col;
            int ra = r0 + row, nb = n0 + row;
            if (vec && kk + 8 <= K) {
                uint4 za = {0, 0, 0, 0}, zb = {0, 0, 0, 0};
                if (ra < r1) za = *(const uint4 *)(x + (size_t)ra * K + kk);
                if (nb < N) zb = *(const uint4 *)(we + (size_t)nb * K + kk);
                *(uint4 *)da = za;
                *(uint4 *)db = zb;
            } else {
                for (int q = 0; q < 8; q++) {
                    int kq = kk + q;
                    da[q] = (ra < r1 && kq < K) ? x[(size_t)ra * K + kq] : __float2bfloat16(0.0f);
                    db[q] = (nb < N && kq < K) ? we[(size_t)nb * K + kq] : __float2bfloat16(0.0f);
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < MG_TK; ks += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(a[i], As + (wy * 32 + i * 16) * MG_LD + ks, MG_LD);
#pragma unroll
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(b[j], Bs + (wx * 32 + j * 16) * MG_LD + ks, MG_LD);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(c[i][j], a[i], b[j], c[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (wy * 32 + i * 16) * (MG_TN + 4) + wx * 32 + j * 16, c[i][j],
                                    MG_TN + 4, wmma::mem_row_major);
    __syncthreads();
    for (int ci = threadIdx.x; ci < MG_TM * MG_TN; ci += blockDim.x) {
        int row = ci / MG_TN, col = ci % MG_TN;
        if (r0 + row < r1 && n0 + col < N) y[(size_t)(r0 + row) * N + n0 + col] = Cs[row * (MG_TN + 4) + col];
    }
}

extern "C" void ft_cuda_moe_gemm(float *y, const uint16_t *x, const uint16_t *w,
                                 const int32_t *offsets, int E, int N, int K, int max_rows,
                                 cudaStream_t s) {
    dim3 grid(E, (N + MG_TN - 1) / MG_TN, (max_rows + MG_TM - 1) / MG_TM);
    moe_gemm_kernel<<<grid, 128, 0, s>>>(y, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)w,
                                         offsets, N, K);
}

__global__ void moe_unsort_kernel(float *out, const float *y, const int32_t *pair_dst,
                                  const float *wts, int k, int H) {
    int t = blockIdx.x;
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        float a = 0.0f;
        for (int j = 0; j < k; j++) a += wts[t * k + j] * y[(size_t)pair_dst[t * k + j] * H + h];
        out[(size_t)t * H + h] = a;
    }
}

extern "C" void ft_cuda_moe_unsort(float *out, const float *y, const int32_t *pair_dst,
                                   const float *wts, int T, int k, int H, cudaStream_t s) {
    moe_unsort_kernel<<<T, 256, 0, s>>>(out, y, pair_dst, wts, k, H);
}
