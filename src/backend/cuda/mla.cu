/* mla.cu — Multi-head Latent Attention in the absorbed form (cuda_ops.h), the twin of the CPU's
 * mla_attention (engine/forward.c) and ft_cpu_attention_latent: the cache row of a position is
 * [c_kv (Lr) | k_pe (dr)], each head's q_nope is carried into the latent space by its rows of
 * W_UK, scores are q_lat . row, and the weighted sum of the c_kv goes through the head's W_UV
 * after attention. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels.cuh"

/* RoPE of one pair of a dr-wide rotated part: adjacent (2i, 2i + 1) when pairs, else (i,
 * i + dr / 2); *o0, *o1 may alias *x0, *x1. */
__device__ __forceinline__ void rope_pair(float *o0, float *o1, float x0, float x1, int p, float inv,
                                          float msc) {
    const float a = (float)p * inv, c = cosf(a) * msc, s = sinf(a) * msc;
    *o0 = x0 * c - x1 * s;
    *o1 = x1 * c + x0 * s;
}

/* Block per token: the latent's RMSNorm (eps 1e-6, as transformers), the shared key's RoPE,
 * the row into the paged cache. */
__global__ void mla_kv_kernel(const float *kva, const float *norm_w, float *cache, int ld, const int32_t *pos,
                              const int32_t *tok_seq, const int32_t *tables, int max_blocks, int bs,
                              int Lr, int dr, const float *inv_freq, float msc, int pairs) {
    pdl_enter();
    const int t = blockIdx.x, D = Lr + dr, half = dr / 2;
    const float *row = kva + (size_t)t * D;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < Lr; i += blockDim.x) ss += row[i] * row[i];
    const float r = rsqrtf(block_sum(ss) / (float)Lr + 1e-6f);
    float *dst = cache + cache_row(tables, max_blocks, tok_seq[t], pos[t], bs) * ld;
    for (int i = threadIdx.x; i < Lr; i += blockDim.x) dst[i] = row[i] * r * norm_w[i];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const int i0 = pairs ? 2 * i : i, i1 = pairs ? 2 * i + 1 : i + half;
        rope_pair(dst + Lr + i0, dst + Lr + i1, row[Lr + i0], row[Lr + i1], pos[t], inv_freq[i], msc);
    }
}

extern "C" void ft_cuda_mla_kv(const float *kva, const float *norm_w, float *cache, int ld,
                               const int32_t *pos, const int32_t *tok_seq, const int32_t *tables,
                               int max_blocks, int block_size, int T, int Lr, int dr,
                               const float *inv_freq, float mscale, int pairs, cudaStream_t s) {
    launch(mla_kv_kernel, T, 256, 0, s, kva, norm_w, cache, ld, pos, tok_seq, tables, max_blocks,
           block_size, Lr, dr, inv_freq, mscale, pairs);
}

/* Block per (token, head): the rotated q_pe into the last dr of the head's q_lat row. */
__global__ void mla_q_pe_kernel(const float *q, float *ql, const int32_t *pos, int nh, int dn, int dr,
                                int Lr, const float *inv_freq, float msc, int pairs) {
    pdl_enter();
    const int t = blockIdx.x, h = blockIdx.y, half = dr / 2;
    const float *pe = q + ((size_t)t * nh + h) * (dn + dr) + dn;
    float *o = ql + ((size_t)t * nh + h) * (Lr + dr) + Lr;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const int i0 = pairs ? 2 * i : i, i1 = pairs ? 2 * i + 1 : i + half;
        rope_pair(o + i0, o + i1, pe[i0], pe[i1], pos[t], inv_freq[i], msc);
    }
}

extern "C" void ft_cuda_mla_q_pe(const float *q, float *q_lat, const int32_t *pos, int T, int nh,
                                 int dn, int dr, int Lr, const float *inv_freq, float mscale,
                                 int pairs, cudaStream_t s) {
    launch(mla_q_pe_kernel, dim3(T, nh), 64, 0, s, q, q_lat, pos, nh, dn, dr, Lr, inv_freq, mscale,
           pairs);
}

/* A warp per (output row n, head h): the row's K weights in registers (K <= 512), then its dot
 * with every token's x row of head h. */
#define BGEMV_ROWS 8
__global__ void __launch_bounds__(BGEMV_ROWS *WARP) bgemv_kernel(float *y, int ldy, const float *x,
                                                                int ldx, const uint16_t *w,
                                                                size_t w_stride, int N, int K, int T,
                                                                int nh) {
    pdl_enter();
    const int lane = threadIdx.x % WARP, n = blockIdx.x * BGEMV_ROWS + threadIdx.x / WARP;
    const int h = blockIdx.y;
    if (n >= N) return;
    const uint16_t *wr = w + (size_t)h * w_stride + (size_t)n * K;
    float wv[FT_CUDA_BGEMV_MAX_K / WARP];
#pragma unroll
    for (int j = 0; j < FT_CUDA_BGEMV_MAX_K / WARP; j++) {
        const int k = lane + j * WARP;
        wv[j] = k < K ? bf2f(wr[k]) : 0.0f;
    }
    for (int t = 0; t < T; t++) {
        const float *xr = x + ((size_t)t * nh + h) * ldx;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < FT_CUDA_BGEMV_MAX_K / WARP; j++) {
            const int k = lane + j * WARP;
            if (k < K) s += wv[j] * xr[k];
        }
        s = warp_sum(s);
        if (lane == 0) y[((size_t)t * nh + h) * ldy + n] = s;
    }
}

extern "C" void ft_cuda_bgemv(float *y, int ldy, const float *x, int ldx, const uint16_t *w,
                              size_t w_stride, int N, int K, int T, int nh, cudaStream_t s) {
    launch(bgemv_kernel, dim3(cdiv(N, BGEMV_ROWS), nh), BGEMV_ROWS * WARP, 0, s, y, ldy, x, ldx, w,
           w_stride, N, K, T, nh);
}

/* Block per (token, MLA_HG heads), a warp per head: the token's causal positions (or, with
 * sel, its n_sel[t] selected ones in their order) in tiles of MLA_TP cache rows (ld floats
 * apart) staged in shared memory, an online softmax per head, each lane holding Lr / 32 of the
 * head's weighted latent sum. A selected position outside 0..pos[t] is skipped. */
#define MLA_HG 8
#define MLA_TP 8
__global__ void __launch_bounds__(MLA_HG *WARP) mla_attention_kernel(
    float *out, const float *q_lat, const float *cache, int ld, const int32_t *pos,
    const int32_t *tok_seq, const int32_t *tables, int max_blocks, int bs, int nh, int Lr, int dr,
    float scale, const int32_t *sel, const int32_t *n_sel, int k_sel) {
    pdl_enter();
    __shared__ float qs[MLA_HG][FT_CUDA_MLA_MAX_D], ks[MLA_TP][FT_CUDA_MLA_MAX_D];
    __shared__ int ok[MLA_TP];
    const int D = Lr + dr, t = blockIdx.x, w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int h = blockIdx.y * MLA_HG + w, last = pos[t], seq = tok_seq[t];
    const int32_t *at = sel ? sel + (size_t)t * k_sel : NULL;
    int n = sel ? n_sel[t] : last + 1;
    if (sel && n > k_sel) n = k_sel;
    for (int i = threadIdx.x; i < MLA_HG * D; i += blockDim.x) {
        const int hw = i / D, d = i % D, hh = blockIdx.y * MLA_HG + hw;
        qs[hw][d] = hh < nh ? q_lat[((size_t)t * nh + hh) * D + d] : 0.0f;
    }
    float acc[FT_CUDA_MLA_MAX_L / WARP];
#pragma unroll
    for (int j = 0; j < FT_CUDA_MLA_MAX_L / WARP; j++) acc[j] = 0.0f;
    float mx = -INFINITY, sum = 0.0f;
    for (int p0 = 0; p0 < n; p0 += MLA_TP) {
        __syncthreads(); /* the previous tile is read (and qs written) */
        for (int i = threadIdx.x; i < MLA_TP * D; i += blockDim.x) {
            const int pi = i / D, d = i % D, j = p0 + pi;
            const int p = j < n ? (at ? at[j] : j) : -1, valid = p >= 0 && p <= last;
            ks[pi][d] = valid ? cache[cache_row(tables, max_blocks, seq, p, bs) * ld + d] : 0.0f;
            if (d == 0) ok[pi] = valid;
        }
        __syncthreads();
        const int np = n - p0 < MLA_TP ? n - p0 : MLA_TP;
        for (int pi = 0; pi < np; pi++) {
            if (!ok[pi]) continue; /* the same for the whole warp */
            float sc = 0.0f;
            for (int d = lane; d < D; d += WARP) sc += qs[w][d] * ks[pi][d];
            sc = warp_sum(sc) * scale;
            const float nm = fmaxf(mx, sc), corr = expf(mx - nm), pw = expf(sc - nm);
            sum = sum * corr + pw;
#pragma unroll
            for (int j = 0; j < FT_CUDA_MLA_MAX_L / WARP; j++) {
                const int c = lane + j * WARP;
                if (c < Lr) acc[j] = acc[j] * corr + pw * ks[pi][c];
            }
            mx = nm;
        }
    }
    if (h >= nh) return;
#pragma unroll
    for (int j = 0; j < FT_CUDA_MLA_MAX_L / WARP; j++) {
        const int c = lane + j * WARP;
        if (c < Lr) out[((size_t)t * nh + h) * Lr + c] = sum > 0.0f ? acc[j] / sum : 0.0f;
    }
}

extern "C" void ft_cuda_mla_attention(float *out, const float *q_lat, const float *cache, int ld,
                                      const int32_t *pos, const int32_t *tok_seq,
                                      const int32_t *tables, int max_blocks, int block_size, int T,
                                      int nh, int Lr, int dr, float scale, const int32_t *sel,
                                      const int32_t *n_sel, int k_sel, cudaStream_t s) {
    launch(mla_attention_kernel, dim3(T, cdiv(nh, MLA_HG)), MLA_HG * WARP, 0, s, out, q_lat, cache,
           ld, pos, tok_seq, tables, max_blocks, block_size, nh, Lr, dr, scale, sel, n_sel, k_sel);
}
