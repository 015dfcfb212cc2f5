/* moe.cu — MoE prefill on the device: a routing sort (count, scan, scatter) that needs no host
 * round trip, a tensor-core (WMMA bf16, fp32 accumulation) GEMM over every expert's group of
 * rows in one launch (bf16 experts, or block-format ones dequantised to bf16 as the kernel
 * fetches them), and a deterministic weighted un-sort. Engine thread; launchers only
 * enqueue on their stream. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/ggml_dq.cuh"
#include "format/quant.h"
using namespace nvcuda;

__global__ void moe_count_kernel(int32_t *counts, const int32_t *ids, int R) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < R) atomicAdd(counts + ids[r], 1);
}

#define MG_TM 32 /* the smallest row tile (the tile list's bound is R / MG_TM + E) */

/* Rows (tokens) per tile of the grouped GEMMs: 32, or 64 once the experts average 64 rows or
 * more (an expert with 33-64 rows then reads its weights once, not twice; at pp512, ~32 rows
 * an expert, 64 was no faster); ft_cuda_moe_set_tile_rows forces one (tests run both). The
 * sort's tile list and the GEMMs use the same. */
static int g_tile_rows;

extern "C" void ft_cuda_moe_set_tile_rows(int tm) { g_tile_rows = tm == 64 || tm == 32 ? tm : 0; }

extern "C" int ft_cuda_moe_tile_rows(int E, int R) {
    if (g_tile_rows) return g_tile_rows;
    return R >= 64 * E ? 64 : 32;
}

/* Inclusive scan of buf[0..1024) by one block of 1024 threads (Hillis-Steele). */
__device__ void block_scan_1024(int32_t *buf) {
    int i = threadIdx.x;
    for (int o = 1; o < 1024; o <<= 1) {
        int v = i >= o ? buf[i - o] : 0;
        __syncthreads();
        buf[i] += v;
        __syncthreads();
    }
}

/* One block (E <= 1024): offsets [E+1] = exclusive scan of counts, and the
 * GEMM's row tiles after them: offsets[E+1] = their number, then (expert, first row) pairs, an
 * expert's tiles adjacent and in row order. */
__global__ void moe_scan_kernel(int32_t *offsets, const int32_t *counts, int E, int tm) {
    __shared__ int32_t buf[1024];
    int i = threadIdx.x, c = i < E ? counts[i] : 0;
    buf[i] = c;
    __syncthreads();
    block_scan_1024(buf);
    int ex = i ? buf[i - 1] : 0;
    if (i < E) offsets[i] = ex;
    if (i == E - 1) offsets[E] = buf[i];
    __syncthreads();
    int nt = (c + tm - 1) / tm;
    buf[i] = nt;
    __syncthreads();
    block_scan_1024(buf);
    int32_t *tiles = offsets + E + 2;
    for (int j = 0, t = buf[i] - nt; j < nt; j++, t++) tiles[2 * t] = i, tiles[2 * t + 1] = ex + j * tm;
    if (i == E - 1) offsets[E + 1] = buf[i];
}

/* One block per expert: its pairs found in chunks of blockDim.x and placed in pair (token)
 * order, a chunk's matches after the previous chunk's (ballots within warps, the warps'
 * counts in order): deterministic, and R / blockDim.x steps instead of R per expert. */
__global__ void moe_place_kernel(int32_t *rtok, int32_t *pair_dst, const int32_t *offsets,
                                 const int32_t *ids, int R, int k) {
    __shared__ int wcount[32];
    int e = blockIdx.x, tid = threadIdx.x, lane = tid % 32, w = tid / 32, nw = blockDim.x / 32;
    int base = offsets[e];
    for (int r0 = 0; r0 < R; r0 += blockDim.x) {
        int r = r0 + tid, hit = r < R && ids[r] == e;
        unsigned b = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) wcount[w] = __popc(b);
        __syncthreads();
        int before = 0, total = 0;
        for (int i = 0; i < nw; i++) before += i < w ? wcount[i] : 0, total += wcount[i];
        if (hit) {
            int c = base + before + __popc(b & ((1u << lane) - 1u));
            rtok[c] = r / k;
            pair_dst[r] = c;
        }
        base += total;
        __syncthreads();
    }
}

extern "C" size_t ft_cuda_moe_offsets_len(int E, int R) {
    return (size_t)E + 2 + 2 * ((size_t)R / MG_TM + (size_t)E);
}

extern "C" void ft_cuda_moe_sort(int32_t *counts, int32_t *offsets, int32_t *rtok,
                                 int32_t *pair_dst, const int32_t *ids, int T, int k, int E,
                                 cudaStream_t s) {
    int R = T * k;
    cudaMemsetAsync(counts, 0, (size_t)E * sizeof(int32_t), s);
    moe_count_kernel<<<(R + 255) / 256, 256, 0, s>>>(counts, ids, R);
    moe_scan_kernel<<<1, 1024, 0, s>>>(offsets, counts, E, ft_cuda_moe_tile_rows(E, R));
    moe_place_kernel<<<E, 256, 0, s>>>(rtok, pair_dst, offsets, ids, R, k);
}

#define MG_TN 64
#define MG_TK 64 /* K per slice: 2 x 32 columns per thread in flight */
#define MG_LD (MG_TK + 8) /* bf16 elements per smem row (multiple of 8, breaks bank conflicts) */

/* 8 bf16 of row `r` (< rows) from column kk of a [rows, K] matrix; zeros outside. */
__device__ __forceinline__ uint4 load8(const __nv_bfloat16 *m, int r, int rows, int kk, int K, int vec) {
    if (r >= rows) return make_uint4(0, 0, 0, 0);
    const __nv_bfloat16 *p = m + (size_t)r * K + kk;
    if (vec && kk + 8 <= K) return __ldg((const uint4 *)p);
    union {
        uint4 u;
        __nv_bfloat16 h[8];
    } v;
#pragma unroll
    for (int q = 0; q < 8; q++) v.h[q] = kk + q < K ? p[q] : __float2bfloat16(0.0f);
    return v.u;
}

/* 8 weights of row r (< rows) from column kk of an expert whose rows are rb bytes apart, as
 * bf16: format BT's values (ggml_dq.cuh) rounded to bf16, exactly what ft_cuda_dequant_experts
 * writes, so the fused GEMM equals the dequantise-then-GEMM one bit for bit. Zeros outside. */
template <int BT>
__device__ __forceinline__ uint4 loadw8(const uint8_t *we, size_t rb, int r, int rows, int kk, int K,
                                        int vec) {
    if (BT == FT_DTYPE_BF16) return load8((const __nv_bfloat16 *)(we + (size_t)r * rb), 0, rows - r, kk, K, vec);
    if (r >= rows || kk >= K) return make_uint4(0, 0, 0, 0);
    float f[8];
    dq8<BT>(we + (size_t)r * rb, kk, K, f); /* block formats: K % 8 == 0 (ft_cuda_moe_gemm_takes) */
    union {
        uint4 u;
        __nv_bfloat16 h[8];
    } v;
#pragma unroll
    for (int q = 0; q < 8; q++) v.h[q] = __float2bfloat16_rn(f[q]);
    return v.u;
}

/* Block: 4 warps (2 x 2), a TM x 64 output tile of one expert (each warp TM/2 x 32: TM/32 x 2
 * fragments); the next K slice is fetched into registers while tensor cores work on the
 * current one. The weights are bf16 or block format BT, dequantised as they are fetched (no
 * scratch copy of the experts): expert e's matrix is w + slot_of[e] * w_stride bytes (w +
 * e * w_stride without slot_of), rows rb bytes apart. */
template <int TM, int BT>
__global__ void moe_gemm_kernel(float *y, const __nv_bfloat16 *x, const uint8_t *w,
                               const int32_t *offsets, const int32_t *slot_of, size_t w_stride,
                               size_t rb, int E, int N, int K) {
    constexpr int FM = TM / 32, LA = TM / 32; /* fragments per warp in M; A loads per thread */
    const int32_t *tile = offsets + E + 2 + 2 * blockIdx.x;
    if ((int)blockIdx.x >= offsets[E + 1]) return;
    int e = tile[0], n0 = blockIdx.y * MG_TN, r0 = tile[1], r1 = offsets[e + 1];
    int slot = slot_of ? slot_of[e] : e;
    if (slot < 0) return; /* not in this batch */
    const uint8_t *we = w + (size_t)slot * w_stride;
    __shared__ __align__(32) __nv_bfloat16 As[TM * MG_LD];
    __shared__ __align__(32) __nv_bfloat16 Bs[MG_TN * MG_LD];
    __shared__ __align__(32) float Cs[TM * (MG_TN + 4)];
    int tid = threadIdx.x, warp = tid / 32, wy = warp / 2, wx = warp % 2, vec = (K % 8) == 0;
    /* thread's chunks: A rows tid/4 + 32 i, B rows tid/4 and 32 + tid/4; cols (tid%4)*8 + 32 h */
    int ar = tid / 4, ac = (tid % 4) * 8;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[FM][2];
#pragma unroll
    for (int i = 0; i < FM; i++) wmma::fill_fragment(c[i][0], 0.0f), wmma::fill_fragment(c[i][1], 0.0f);
    uint4 ra[LA][2], rbv[2][2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int i = 0; i < LA; i++) ra[i][h] = load8(x, r0 + ar + 32 * i, r1, ac + 32 * h, K, vec);
#pragma unroll
        for (int i = 0; i < 2; i++) rbv[i][h] = loadw8<BT>(we, rb, n0 + 32 * i + ar, N, ac + 32 * h, K, vec);
    }
    for (int k0 = 0; k0 < K; k0 += MG_TK) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int i = 0; i < LA; i++) *(uint4 *)(As + (ar + 32 * i) * MG_LD + ac + 32 * h) = ra[i][h];
#pragma unroll
            for (int i = 0; i < 2; i++) *(uint4 *)(Bs + (32 * i + ar) * MG_LD + ac + 32 * h) = rbv[i][h];
        }
        __syncthreads();
        if (k0 + MG_TK < K) { /* prefetch the next slice while the tensor cores run */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int kk = k0 + MG_TK + ac + 32 * h;
#pragma unroll
                for (int i = 0; i < LA; i++) ra[i][h] = load8(x, r0 + ar + 32 * i, r1, kk, K, vec);
#pragma unroll
                for (int i = 0; i < 2; i++) rbv[i][h] = loadw8<BT>(we, rb, n0 + 32 * i + ar, N, kk, K, vec);
            }
        }
#pragma unroll
        for (int ks = 0; ks < MG_TK; ks += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < FM; i++)
                wmma::load_matrix_sync(a[i], As + (wy * 16 * FM + 16 * i) * MG_LD + ks, MG_LD);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                wmma::load_matrix_sync(b[j], Bs + (wx * 32 + j * 16) * MG_LD + ks, MG_LD);
#pragma unroll
                for (int i = 0; i < FM; i++) wmma::mma_sync(c[i][j], a[i], b[j], c[i][j]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (wy * 16 * FM + 16 * i) * (MG_TN + 4) + wx * 32 + j * 16,
                                    c[i][j], MG_TN + 4, wmma::mem_row_major);
    __syncthreads();
    for (int ci = tid; ci < TM * MG_TN; ci += blockDim.x) {
        int row = ci / MG_TN, col = ci % MG_TN;
        if (r0 + row < r1 && n0 + col < N) y[(size_t)(r0 + row) * N + n0 + col] = Cs[row * (MG_TN + 4) + col];
    }
}

template <int BT>
static void moe_gemm_go(float *y, const uint16_t *x, const void *w, const int32_t *offsets,
                        const int32_t *slot_of, size_t w_stride, size_t rb, int E, int N, int K, int R,
                        cudaStream_t s) {
    int tm = ft_cuda_moe_tile_rows(E, R);
    dim3 grid((unsigned)(R / tm + E), (N + MG_TN - 1) / MG_TN); /* bounds the tile count */
    const __nv_bfloat16 *xb = (const __nv_bfloat16 *)x;
    if (tm == 64)
        moe_gemm_kernel<64, BT><<<grid, 128, 0, s>>>(y, xb, (const uint8_t *)w, offsets, slot_of, w_stride, rb, E, N, K);
    else
        moe_gemm_kernel<32, BT><<<grid, 128, 0, s>>>(y, xb, (const uint8_t *)w, offsets, slot_of, w_stride, rb, E, N, K);
}

extern "C" void ft_cuda_moe_gemm(float *y, const uint16_t *x, const uint16_t *w,
                                 const int32_t *offsets, const int32_t *slot_of, size_t w_stride,
                                 int E, int N, int K, int R, cudaStream_t s) {
    size_t stride = (slot_of ? w_stride : (size_t)N * K) * 2;
    moe_gemm_go<FT_DTYPE_BF16>(y, x, w, offsets, slot_of, stride, (size_t)K * 2, E, N, K, R, s);
}

extern "C" int ft_cuda_moe_gemm_takes(int dtype, int K) {
    return dtype == FT_DTYPE_BF16 || (K % 8 == 0 && ft_cuda_block_format(dtype));
}

extern "C" void ft_cuda_moe_gemm_q(float *y, const uint16_t *x, const void *w, int dtype,
                                   size_t expert_stride, const int32_t *offsets,
                                   const int32_t *slot_of, int E, int N, int K, int R,
                                   cudaStream_t s) {
    size_t rb = ft_dtype_row_bytes((enum ft_dtype)dtype, K);
#define GO(t)                                                                                       \
    if (dtype == t) {                                                                               \
        moe_gemm_go<t>(y, x, w, offsets, slot_of, expert_stride, rb, E, N, K, R, s);                \
        return;                                                                                     \
    }
    GO(FT_DTYPE_BF16)
    FT_BLOCK_TYPES(GO)
#undef GO
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
