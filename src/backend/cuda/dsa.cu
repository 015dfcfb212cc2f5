/* dsa.cu — DeepSeek sparse attention's lightning indexer on the GPU (cuda_ops.h), the twin of
 * the CPU's dsa_index (engine/forward.c) and ft_cpu_index_topk: the key's LayerNorm and RoPE
 * into its cache row, the queries' RoPE, each query's index scores over its causal context and
 * an exact top-k (radix select, ties to the lower position, the kept positions ascending) that
 * ft_cuda_mla_attention then reads. Engine thread only (launchers enqueue on the stream). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels.cuh"

#define DSA_PREP_THREADS 128

/* Block per token: kw's key (the first dI of its row) LayerNorm-ed (eps 1e-6, weight and
 * bias), its first dr dims rotated in adjacent pairs, into the cache row at offset off; the
 * token's nI query heads rotated in place the same way. */
__global__ void __launch_bounds__(DSA_PREP_THREADS) dsa_prep_kernel(
    float *q, const float *kw, int kw_ld, const float *k_norm, const float *k_bias, float *cache,
    int ld, int off, const int32_t *pos, const int32_t *tok_seq, const int32_t *tables,
    int max_blocks, int bs, int nI, int dI, int dr, const float *inv_freq, float msc) {
    pdl_enter();
    __shared__ float kn[FT_CUDA_DSA_MAX_DIM];
    const int t = blockIdx.x, p = pos[t];
    const float *k = kw + (size_t)t * kw_ld;
    float s = 0.0f;
    for (int d = threadIdx.x; d < dI; d += blockDim.x) s += k[d];
    const float mean = block_sum(s) / (float)dI;
    float v = 0.0f;
    for (int d = threadIdx.x; d < dI; d += blockDim.x) v += (k[d] - mean) * (k[d] - mean);
    const float r = 1.0f / sqrtf(block_sum(v) / (float)dI + 1e-6f);
    for (int d = threadIdx.x; d < dI; d += blockDim.x) kn[d] = (k[d] - mean) * r * k_norm[d] + k_bias[d];
    __syncthreads();
    float *dst = cache + cache_row(tables, max_blocks, tok_seq[t], p, bs) * ld + off;
    for (int d = threadIdx.x; d < dI; d += blockDim.x) {
        float o = kn[d];
        if (d < (dr & ~1)) { /* pair (2i, 2i + 1) */
            const int i = d / 2;
            const float a = (float)p * inv_freq[i], c = cosf(a) * msc, sn = sinf(a) * msc;
            const float x0 = kn[2 * i], x1 = kn[2 * i + 1];
            o = d % 2 == 0 ? x0 * c - x1 * sn : x1 * c + x0 * sn;
        }
        dst[d] = o;
    }
    const int half = dr / 2;
    for (int j = threadIdx.x; j < nI * half; j += blockDim.x) {
        const int h = j / half, i = j % half;
        float *qh = q + ((size_t)t * nI + h) * dI;
        const float a = (float)p * inv_freq[i], c = cosf(a) * msc, sn = sinf(a) * msc;
        const float x0 = qh[2 * i], x1 = qh[2 * i + 1];
        qh[2 * i] = x0 * c - x1 * sn;
        qh[2 * i + 1] = x1 * c + x0 * sn;
    }
}

extern "C" void ft_cuda_dsa_prep(float *q, const float *kw, int kw_ld, const float *k_norm,
                                 const float *k_bias, float *cache, int ld, int off,
                                 const int32_t *pos, const int32_t *tok_seq, const int32_t *tables,
                                 int max_blocks, int block_size, int T, int nI, int dI, int dr,
                                 const float *inv_freq, float mscale, cudaStream_t s) {
    if (T <= 0 || dI <= 0 || dI > FT_CUDA_DSA_MAX_DIM) return;
    launch(dsa_prep_kernel, T, DSA_PREP_THREADS, 0, s, q, kw, kw_ld, k_norm, k_bias, cache, ld, off,
           pos, tok_seq, tables, max_blocks, block_size, nI, dI, dr, inv_freq, mscale);
}

/* Block per (query row, DSA_TP positions), a thread per position: the query's heads (zero
 * padded to FT_CUDA_DSA_MAX_DIM) and weights in shared memory, the position's key in
 * registers; score = sum_h w_h relu(scale q_h . key), heads in order, as the CPU sums them. Rows
 * whose context fits in k are skipped (the top-k keeps all of it). */
#define DSA_TP 128
__global__ void __launch_bounds__(DSA_TP) dsa_scores_kernel(
    float *scores, int ld_s, const float *q, const float *kw, int kw_ld, const float *cache, int ld,
    int off, const int32_t *pos, const int32_t *tok_seq, const int32_t *tables, int max_blocks,
    int bs, int t0, int nI, int dI, float scale, float w_scale, int k) {
    pdl_enter();
    __shared__ __align__(16) float qs[FT_CUDA_DSA_MAX_HEADS * FT_CUDA_DSA_MAX_DIM];
    __shared__ float ws[FT_CUDA_DSA_MAX_HEADS];
    const int r = blockIdx.y, t = t0 + r, n = pos[t] + 1, p0 = blockIdx.x * DSA_TP;
    if (n <= k || p0 >= n) return; /* the whole block: before any barrier */
    for (int i = threadIdx.x; i < nI * FT_CUDA_DSA_MAX_DIM; i += blockDim.x) {
        const int h = i / FT_CUDA_DSA_MAX_DIM, d = i % FT_CUDA_DSA_MAX_DIM;
        qs[i] = d < dI ? q[((size_t)t * nI + h) * dI + d] : 0.0f;
    }
    for (int h = threadIdx.x; h < nI; h += blockDim.x) ws[h] = kw[(size_t)t * kw_ld + dI + h] * w_scale;
    __syncthreads();
    const int p = p0 + threadIdx.x;
    if (p >= n) return;
    const float *key = cache + cache_row(tables, max_blocks, tok_seq[t], p, bs) * ld + off;
    float kr[FT_CUDA_DSA_MAX_DIM];
#pragma unroll
    for (int d = 0; d < FT_CUDA_DSA_MAX_DIM; d++) kr[d] = d < dI ? key[d] : 0.0f;
    float sc = 0.0f;
    for (int h = 0; h < nI; h++) {
        const float4 *qh = reinterpret_cast<const float4 *>(qs + h * FT_CUDA_DSA_MAX_DIM);
        float dot = 0.0f;
#pragma unroll
        for (int x = 0; x < FT_CUDA_DSA_MAX_DIM / 4; x++) {
            const float4 q4 = qh[x];
            dot += q4.x * kr[4 * x];
            dot += q4.y * kr[4 * x + 1];
            dot += q4.z * kr[4 * x + 2];
            dot += q4.w * kr[4 * x + 3];
        }
        dot *= scale;
        sc += ws[h] * (dot > 0.0f ? dot : 0.0f);
    }
    scores[(size_t)r * ld_s + p] = sc;
}

extern "C" void ft_cuda_dsa_scores(float *scores, int ld_s, const float *q, const float *kw,
                                   int kw_ld, const float *cache, int ld, int off,
                                   const int32_t *pos, const int32_t *tok_seq,
                                   const int32_t *tables, int max_blocks, int block_size, int t0,
                                   int rows, int max_n, int nI, int dI, float scale, float w_scale,
                                   int k, cudaStream_t s) {
    if (rows <= 0 || max_n <= 0 || nI > FT_CUDA_DSA_MAX_HEADS || dI > FT_CUDA_DSA_MAX_DIM) return;
    launch(dsa_scores_kernel, dim3(cdiv(max_n, DSA_TP), rows), DSA_TP, 0, s, scores, ld_s, q, kw,
           kw_ld, cache, ld, off, pos, tok_seq, tables, max_blocks, block_size, t0, nI, dI, scale,
           w_scale, k);
}

/* A score as an unsigned key in the same order (a higher score, a higher key); +-0 as one
 * value (the CPU's == ties them), NaN below everything. */
__device__ __forceinline__ uint32_t score_key(float f) {
    if (f != f) return 0u;
    if (f == 0.0f) f = 0.0f;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Exclusive prefix sum over the block of v (blockDim.x a multiple of 32, <= 1024); *total gets
 * the block's sum. Every thread must call it. */
__device__ int block_excl_scan(int v, int *total) {
    __shared__ int wsum[32];
    __shared__ int stot;
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const int inc = warp_scan(v, lane);
    __syncthreads(); /* wsum's and stot's previous use is over */
    if (lane == WARP - 1) wsum[w] = inc;
    __syncthreads();
    if (w == 0) {
        const int x = lane < nw ? wsum[lane] : 0;
        const int xi = warp_scan(x, lane);
        if (lane < nw) wsum[lane] = xi - x; /* each warp's exclusive start */
        if (lane == WARP - 1) stot = xi;    /* lanes past nw added 0 */
    }
    __syncthreads();
    *total = stot;
    return wsum[w] + inc - v;
}

/* Block per row: the k best of the row's n = pos[t] + 1 scores (ties: the lower position), as
 * ft_cpu_index_topk chooses them. A radix select over the 32-bit keys finds the k-th best key
 * K and how many of the keys equal to K are taken (the lowest positions); one ordered pass
 * then writes the kept positions ascending. n <= k: every position. */
#define DSA_TOPK_THREADS 512
__global__ void __launch_bounds__(DSA_TOPK_THREADS) dsa_topk_kernel(int32_t *sel, int32_t *n_sel,
                                                                   int k, const float *scores,
                                                                   int ld_s, const int32_t *pos,
                                                                   int t0) {
    pdl_enter();
    __shared__ unsigned hist[256];
    __shared__ unsigned s_prefix, s_remain;
    const int r = blockIdx.x, t = t0 + r;
    int n = pos[t] + 1;
    int32_t *out = sel + (size_t)t * k;
    if (n <= k) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = i;
        if (threadIdx.x == 0) n_sel[t] = n > 0 ? n : 0;
        return;
    }
    if (n > ld_s) n = ld_s; /* (a row holds ld_s scores) */
    const float *row = scores + (size_t)r * ld_s;
    unsigned prefix = 0, mask = 0, remain = (unsigned)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (int p = threadIdx.x; p < n; p += blockDim.x) {
            const uint32_t u = score_key(row[p]);
            if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) { /* the digit holding the remain-th best of those matching */
            unsigned c = 0;
            int dg = 255;
            for (; dg > 0; dg--) {
                if (c + hist[dg] >= remain) break;
                c += hist[dg];
            }
            s_prefix = prefix | ((unsigned)dg << shift);
            s_remain = remain - c;
        }
        __syncthreads();
        prefix = s_prefix, remain = s_remain, mask |= 255u << shift;
        __syncthreads(); /* s_prefix read by all before the next pass's thread 0 writes it */
    }
    /* prefix: the k-th best key; remain (>= 1): how many of the keys equal to it are kept */
    int eq_seen = 0, taken = 0;
    for (int base = 0; base < n; base += blockDim.x) {
        const int p = base + threadIdx.x;
        const uint32_t u = p < n ? score_key(row[p]) : 0u;
        const int gt = p < n && u > prefix, eq = p < n && u == prefix;
        int eq_tot, take_tot;
        const int eq_before = eq_seen + block_excl_scan(eq, &eq_tot);
        const int take = gt || (eq && eq_before < (int)remain);
        const int at = taken + block_excl_scan(take, &take_tot);
        if (take && at < k) out[at] = p;
        eq_seen += eq_tot, taken += take_tot;
    }
    if (threadIdx.x == 0) n_sel[t] = taken < k ? taken : k;
}

extern "C" void ft_cuda_dsa_topk(int32_t *sel, int32_t *n_sel, int k, const float *scores,
                                 int ld_s, const int32_t *pos, int t0, int rows, cudaStream_t s) {
    if (rows <= 0 || k <= 0) return;
    launch(dsa_topk_kernel, rows, DSA_TOPK_THREADS, 0, s, sel, n_sel, k, scores, ld_s, pos, t0);
}
