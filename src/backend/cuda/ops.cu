/* ops.cu — the CUDA kernels of the forward pass and their C launchers (cuda_ops.h).
 * Design: fp32 activations, bf16 weights read with 16-byte loads where rows allow, one warp per
 * output row in the GEMVs (decode is bound by weight bytes), block-level reductions for norms,
 * a warp-per-position-stripe online softmax for attention over the paged cache.
 * Every launcher only enqueues on its stream, so a decode step can be captured in a graph. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels.cuh"
extern "C" {
}
#include "core/status.h"
#include "backend/draw.h"
#include "core/checksum.h"

using namespace nvcuda;

extern "C" enum ft_status ft_cuda_check(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return ft_fail(FT_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return FT_OK;
}

/* --- elementwise / norms --- */

__global__ void embed_kernel(float *out, const uint16_t *table, const int32_t *ids, int H) {
    pdl_enter();
    const uint16_t *row = table + (size_t)ids[blockIdx.x] * H;
    for (int h = threadIdx.x; h < H; h += blockDim.x) out[(size_t)blockIdx.x * H + h] = bf2f(row[h]);
}

extern "C" void ft_cuda_embed(float *out, const uint16_t *table, const int32_t *ids, int T, int H,
                              cudaStream_t s) {
    launch(embed_kernel, T, 256, 0, s, out, table, ids, H);
}

/* x += y (y may be NULL); xn = rmsnorm(x) * w, optional bf16 copy: the residual add fused
 * with the next norm. */
__global__ void add_rmsnorm_kernel(float *x, const float *y, float *xn, uint16_t *xn16,
                                   const float *w, int H, float eps) {
    pdl_enter();
    float *xr = x + (size_t)blockIdx.x * H;
    const float *yr = y ? y + (size_t)blockIdx.x * H : NULL;
    float ss = 0.0f;
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        float v = xr[h] + (yr ? yr[h] : 0.0f);
        if (yr) xr[h] = v;
        ss += v * v;
    }
    float r = rsqrtf(block_sum(ss) / (float)H + eps);
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        float v = xr[h] * r * w[h];
        if (xn) xn[(size_t)blockIdx.x * H + h] = v;
        if (xn16) xn16[(size_t)blockIdx.x * H + h] = f2bf(v);
    }
}

extern "C" void ft_cuda_add_rmsnorm(float *x, const float *y, float *xn, uint16_t *xn16,
                                    const float *w, int rows, int H, float eps, cudaStream_t s) {
    int threads = H >= 1024 ? 1024 : H >= 256 ? 256 : 64;
    launch(add_rmsnorm_kernel, rows, threads, 0, s, x, y, xn, xn16, w, H, eps);
}

/* The plain norm is the fused one with nothing to add (x is then only read). */
extern "C" void ft_cuda_rmsnorm(float *y, uint16_t *y16, const float *x, const float *w, int rows,
                                int H, float eps, cudaStream_t s) {
    ft_cuda_add_rmsnorm((float *)x, NULL, y, y16, w, rows, H, eps, s);
}

/* Block per (token, head) over q heads then k heads: optional per-head RMSNorm, RoPE, and for
 * k/v heads the write into the paged caches. head_dim <= 256 (one thread per element). */
__global__ void qk_rope_kv_kernel(float *q, const float *k, const float *v, float *kc, float *vc,
                                  const float *q_norm, const float *k_norm, float eps,
                                  const int32_t *pos, const float *inv_freq, float mscale,
                                  const int32_t *tok_seq, const int32_t *tables, int max_blocks,
                                  int bs, int n_heads, int n_kv_heads, int hd, int rot_dim) {
    pdl_enter();
    int t = blockIdx.x, hh = blockIdx.y, i = threadIdx.x, is_k = hh >= n_heads;
    int head = is_k ? hh - n_heads : hh;
    __shared__ float buf[256];
    const float *src = is_k ? k + ((size_t)t * n_kv_heads + head) * hd
                            : q + ((size_t)t * n_heads + head) * hd;
    const float *nw = is_k ? k_norm : q_norm;
    float val = i < hd ? src[i] : 0.0f;
    if (nw) { /* every thread takes part in the reduction */
        float r = rsqrtf(block_sum(val * val) / (float)hd + eps);
        val = i < hd ? val * r * nw[i] : 0.0f;
    }
    if (i < hd) buf[i] = val;
    __syncthreads();
    int half = rot_dim / 2;
    if (i < rot_dim) {
        int j = i < half ? i : i - half;
        float ang = (float)pos[t] * inv_freq[j];
        float c = cosf(ang) * mscale, sn = sinf(ang) * mscale;
        val = i < half ? buf[i] * c - buf[i + half] * sn : buf[i] * c + buf[i - half] * sn;
    }
    if (i >= hd) return;
    if (!is_k) {
        q[((size_t)t * n_heads + head) * hd + i] = val;
        return;
    }
    size_t row = (cache_row(tables, max_blocks, tok_seq[t], pos[t], bs) * n_kv_heads + head) * hd;
    kc[row + i] = val;
    vc[row + i] = v[((size_t)t * n_kv_heads + head) * hd + i];
}

extern "C" void ft_cuda_qk_rope_kv(float *q, const float *k, const float *v, float *k_cache,
                                   float *v_cache, const float *q_norm, const float *k_norm,
                                   float eps, const int32_t *pos, const float *inv_freq,
                                   float mscale, const int32_t *tok_seq, const int32_t *tables,
                                   int max_blocks, int block_size, int T, int n_heads,
                                   int n_kv_heads, int head_dim, int rot_dim, cudaStream_t s) {
    int threads = (head_dim + 31) / 32 * 32;
    launch(qk_rope_kv_kernel, dim3(T, n_heads + n_kv_heads), threads, 0, s, q, k, v, k_cache,
           v_cache, q_norm, k_norm, eps, pos, inv_freq, mscale, tok_seq, tables, max_blocks,
           block_size, n_heads, n_kv_heads, head_dim, rot_dim);
}

__global__ void to_bf16_kernel(uint16_t *y, const float *x, size_t n) {
    pdl_enter();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = f2bf(x[i]);
}

extern "C" void ft_cuda_to_bf16(uint16_t *y, const float *x, size_t n, cudaStream_t s) {
    launch(to_bf16_kernel, cdiv(n, 256), 256, 0, s, y, x, n);
}

/* --- attention: flash-decoding. Positions are split into chunks of `ch`; a block per
 * (token, head, chunk) runs an online softmax with each warp on a stripe of positions, merges
 * its warps, and writes a partial (max, sum, acc); a second kernel merges the chunks. This keeps
 * the GPU busy even for one token at a long context. head_dim <= 256. --- */
#define ATT_WARPS 4
#define ATT_MAXD 8 /* head_dim / 32 rounded up */

__global__ void attention_split_kernel(float *part, const float *q, const float *kc, const float *vc,
                                       const int32_t *pos, const int32_t *tok_seq,
                                       const int32_t *tables, int max_blocks, int bs, int n_heads,
                                       int n_kv_heads, int hd, float scale, int window, int ch,
                                       int n_split) {
    pdl_enter();
    int t = blockIdx.x, h = blockIdx.y, sp = blockIdx.z, lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    int kvh = h / (n_heads / n_kv_heads), seq = tok_seq[t];
    size_t kv_stride = (size_t)n_kv_heads * hd;
    float *pp = part + (((size_t)t * n_heads + h) * n_split + sp) * (hd + 2);
    int p1 = pos[t] + 1, p0 = window > 0 ? max(0, p1 - window) : 0;
    int a = p0 + sp * ch, b = min(p1, a + ch);
    if (a >= b) {
        if (threadIdx.x == 0) pp[0] = -INFINITY, pp[1] = 0.0f;
        return;
    }
    const float *qh = q + ((size_t)t * n_heads + h) * hd;
    float qr[ATT_MAXD], acc[ATT_MAXD];
#pragma unroll
    for (int j = 0; j < ATT_MAXD; j++) {
        int d = lane + j * WARP;
        qr[j] = d < hd ? qh[d] * scale : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int p = a + w; p < b; p += ATT_WARPS) {
        size_t row = cache_row(tables, max_blocks, seq, p, bs) * kv_stride + (size_t)kvh * hd;
        float kr[ATT_MAXD], vr[ATT_MAXD], sc = 0.0f;
#pragma unroll
        for (int j = 0; j < ATT_MAXD; j++) { /* K and V loads issued together */
            int d = lane + j * WARP;
            kr[j] = d < hd ? kc[row + d] : 0.0f;
            vr[j] = d < hd ? vc[row + d] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < ATT_MAXD; j++) sc += qr[j] * kr[j];
        sc = warp_sum(sc);
        float mn = fmaxf(m, sc), corr = __expf(m - mn), e = __expf(sc - mn);
        l = l * corr + e;
#pragma unroll
        for (int j = 0; j < ATT_MAXD; j++) acc[j] = acc[j] * corr + e * vr[j];
        m = mn;
    }
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS], sacc[ATT_WARPS][ATT_MAXD * WARP];
    if (lane == 0) sm[w] = m, sl[w] = l;
#pragma unroll
    for (int j = 0; j < ATT_MAXD; j++) sacc[w][lane + j * WARP] = acc[j];
    __syncthreads();
    if (w != 0) return;
    float M = -INFINITY;
    for (int i = 0; i < ATT_WARPS; i++) M = fmaxf(M, sm[i]);
    float L = 0.0f, o[ATT_MAXD] = {0};
    for (int i = 0; i < ATT_WARPS; i++) {
        if (sl[i] == 0.0f) continue;
        float c = __expf(sm[i] - M);
        L += sl[i] * c;
#pragma unroll
        for (int j = 0; j < ATT_MAXD; j++) o[j] += sacc[i][lane + j * WARP] * c;
    }
    if (lane == 0) pp[0] = M, pp[1] = L;
#pragma unroll
    for (int j = 0; j < ATT_MAXD; j++) {
        int d = lane + j * WARP;
        if (d < hd) pp[2 + d] = o[j];
    }
}

/* sinks (may be NULL): per head a logit that joins the softmax's denominator with no value
 * (gpt-oss), as ft_cpu_attention_paged */
__global__ void attention_merge_kernel(float *out, const float *part, const float *sinks,
                                       int n_heads, int hd, int n_split) {
    pdl_enter();
    int t = blockIdx.x, h = blockIdx.y;
    const float *pp = part + ((size_t)t * n_heads + h) * n_split * (hd + 2);
    float M = sinks ? sinks[h] : -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, pp[(size_t)s * (hd + 2)]);
    float *oh = out + ((size_t)t * n_heads + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float L = sinks ? __expf(sinks[h] - M) : 0.0f, o = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float *q = pp + (size_t)s * (hd + 2);
            if (q[1] == 0.0f) continue;
            float c = __expf(q[0] - M);
            L += q[1] * c;
            o += q[2 + d] * c;
        }
        oh[d] = L > 0.0f ? o / L : 0.0f;
    }
}

extern "C" size_t ft_cuda_attention_scratch(int T, int n_heads, int head_dim, int n_split) {
    return (size_t)T * n_heads * n_split * (head_dim + 2) * sizeof(float);
}

extern "C" void ft_cuda_attention(float *out, float *scratch, const float *q, const float *k_cache,
                                  const float *v_cache, const int32_t *pos, const int32_t *tok_seq,
                                  const int32_t *tables, int max_blocks, int block_size, int T,
                                  int n_heads, int n_kv_heads, int head_dim, float scale, int window,
                                  const float *sinks, int max_pos, int n_split, cudaStream_t s) {
    int ch = (max_pos + n_split - 1) / n_split;
    if (ch < 1) ch = 1;
    launch(attention_split_kernel, dim3(T, n_heads, n_split), ATT_WARPS * WARP, 0, s, scratch, q,
           k_cache, v_cache, pos, tok_seq, tables, max_blocks, block_size, n_heads, n_kv_heads,
           head_dim, scale, window, ch, n_split);
    launch(attention_merge_kernel, dim3(T, n_heads), head_dim <= 128 ? 128 : 256, 0, s, out,
           scratch, sinks, n_heads, head_dim, n_split);
}

/* --- attention for prefill: a tensor-core flash-attention. A block takes one tile of up to
 * FA_BQ query tokens of one sequence (ascending positions) and one head, and walks the
 * sequence's paged K/V in FA_BK-position steps: K and V are converted to fp16 in shared memory,
 * S = Q K^T and O += P V run on WMMA (fp16 in, fp32 accumulation; fp16 rather than bf16 for
 * its 3 more mantissa bits: bf16 scores moved gpt-oss's prefill logits 1.5x further from
 * transformers; inputs are clamped to fp16's range), and each warp keeps the
 * online softmax of its own 16 query rows (running max and sum in shared memory, O in shared
 * memory so rows can be rescaled), so warps only meet at the K/V loads. HD is head_dim rounded
 * up to 32/64/128/256 (the padding columns are zeros). Unlike the flash-decoding kernel above,
 * each K/V position is read once per 64 query tokens instead of once per token. --- */
#define FA_BQ FT_CUDA_ATT_TILE
#define FA_BK 64

template <int HD>
struct fa_smem {
    static constexpr int LDH = HD + 8, LDP = FA_BK + 8, LDS = FA_BK + 4, LDO = HD + 4;
    static constexpr size_t bytes = (size_t)(FA_BQ + 2 * FA_BK) * LDH * 2 + (size_t)FA_BQ * LDP * 2 +
                                    (size_t)FA_BQ * (LDS + LDO) * 4;
};

__device__ __forceinline__ __half fa_h(float v) { return __float2half_rn(fminf(fmaxf(v, -65504.f), 65504.f)); }

/* 4 floats of row `src` from column c (hd valid, the rest zero) scaled, as fp16 into dst */
template <int HD>
__device__ __forceinline__ void fa_row_load(__half *dst, const float *src, int hd, int c, float scale) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (src && c + 3 < hd && (hd & 3) == 0) {
        v = *(const float4 *)(src + c);
    } else if (src) {
        v.x = c < hd ? src[c] : 0.f, v.y = c + 1 < hd ? src[c + 1] : 0.f;
        v.z = c + 2 < hd ? src[c + 2] : 0.f, v.w = c + 3 < hd ? src[c + 3] : 0.f;
    }
    dst[c] = fa_h(v.x * scale), dst[c + 1] = fa_h(v.y * scale);
    dst[c + 2] = fa_h(v.z * scale), dst[c + 3] = fa_h(v.w * scale);
}

template <int HD>
__global__ void __launch_bounds__(128) flash_prefill_kernel(
    float *out, const float *q, const float *kc, const float *vc, const int32_t *pos,
    const int32_t *tok_seq, const int32_t *tables, int max_blocks, int bs, const int32_t *tiles,
    int n_heads, int n_kv_heads, int hd, float scale, int window, const float *sinks) {
    using SM = fa_smem<HD>;
    extern __shared__ __align__(128) unsigned char fa_raw[];
    __half *Qs = (__half *)fa_raw, *Ks = Qs + FA_BQ * SM::LDH, *Vs = Ks + FA_BK * SM::LDH;
    __half *Ps = Vs + FA_BK * SM::LDH;
    float *Ss = (float *)(Ps + FA_BQ * SM::LDP), *Os = Ss + FA_BQ * SM::LDS;
    __shared__ float row_m[FA_BQ], row_l[FA_BQ];
    __shared__ int row_p[FA_BQ];
    __shared__ long long row_off[FA_BK];
    pdl_enter();
    int t0 = tiles[2 * blockIdx.x], n = tiles[2 * blockIdx.x + 1], h = blockIdx.y;
    int kvh = h / (n_heads / n_kv_heads), seq = tok_seq[t0];
    int tid = threadIdx.x, w = tid / WARP, lane = tid % WARP;
    size_t kv_stride = (size_t)n_kv_heads * hd;
    for (int i = tid; i < FA_BQ * HD / 4; i += blockDim.x) {
        int r = i / (HD / 4), c = (i % (HD / 4)) * 4;
        const float *src = r < n ? q + ((size_t)(t0 + r) * n_heads + h) * hd : NULL;
        fa_row_load<HD>(Qs + r * SM::LDH, src, hd, c, scale);
        *(float4 *)(Os + r * SM::LDO + c) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (tid < FA_BQ) row_m[tid] = -INFINITY, row_l[tid] = 0.f, row_p[tid] = tid < n ? pos[t0 + tid] : -1;
    int p_first = pos[t0], hi = pos[t0 + n - 1] + 1;
    int lo = window > 0 ? max(0, p_first + 1 - window) : 0;
    int r = 16 * w + lane / 2, half = lane & 1; /* this lane's softmax row and half of it */
    for (int k0 = lo; k0 < hi; k0 += FA_BK) {
        __syncthreads(); /* everyone is done with the previous K/V (and Q/row_p are written) */
        if (tid < FA_BK) /* the tile's cache rows, looked up once (-1: past the end) */
            row_off[tid] = k0 + tid < hi ? (long long)(cache_row(tables, max_blocks, seq, k0 + tid, bs) *
                                                       kv_stride + (size_t)kvh * hd) : -1;
        __syncthreads();
        if (hd == HD) { /* whole rows: G chunks of K and of V in flight before any conversion */
            constexpr int PER = FA_BK * HD / 4 / 128, G = PER < 8 ? PER : 8;
#pragma unroll
            for (int g0 = 0; g0 < PER; g0 += G) {
                float4 kr[G], vr[G];
#pragma unroll
                for (int j = 0; j < G; j++) {
                    int i = tid + (g0 + j) * 128, rr = i / (HD / 4), c = (i % (HD / 4)) * 4;
                    long long o = row_off[rr];
                    kr[j] = vr[j] = make_float4(0.f, 0.f, 0.f, 0.f);
                    if (o >= 0) kr[j] = __ldg((const float4 *)(kc + o + c)), vr[j] = __ldg((const float4 *)(vc + o + c));
                }
#pragma unroll
                for (int j = 0; j < G; j++) {
                    int i = tid + (g0 + j) * 128, rr = i / (HD / 4), c = (i % (HD / 4)) * 4;
                    __half2 k01 = __halves2half2(fa_h(kr[j].x), fa_h(kr[j].y)), k23 = __halves2half2(fa_h(kr[j].z), fa_h(kr[j].w));
                    __half2 v01 = __halves2half2(fa_h(vr[j].x), fa_h(vr[j].y)), v23 = __halves2half2(fa_h(vr[j].z), fa_h(vr[j].w));
                    *(__half2 *)(Ks + rr * SM::LDH + c) = k01, *(__half2 *)(Ks + rr * SM::LDH + c + 2) = k23;
                    *(__half2 *)(Vs + rr * SM::LDH + c) = v01, *(__half2 *)(Vs + rr * SM::LDH + c + 2) = v23;
                }
            }
        } else {
            for (int i = tid; i < FA_BK * HD / 4; i += blockDim.x) {
                int rr = i / (HD / 4), c = (i % (HD / 4)) * 4;
                long long o = row_off[rr];
                fa_row_load<HD>(Ks + rr * SM::LDH, o >= 0 ? kc + o : NULL, hd, c, 1.0f);
                fa_row_load<HD>(Vs + rr * SM::LDH, o >= 0 ? vc + o : NULL, hd, c, 1.0f);
            }
        }
        __syncthreads();
        { /* S = Q K^T for this warp's 16 rows */
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FA_BK / 16];
#pragma unroll
            for (int j = 0; j < FA_BK / 16; j++) wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
            for (int kk = 0; kk < HD; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::load_matrix_sync(a, Qs + 16 * w * SM::LDH + kk, SM::LDH);
#pragma unroll
                for (int j = 0; j < FA_BK / 16; j++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                    wmma::load_matrix_sync(b, Ks + 16 * j * SM::LDH + kk, SM::LDH);
                    wmma::mma_sync(acc[j], a, b, acc[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < FA_BK / 16; j++)
                wmma::store_matrix_sync(Ss + 16 * w * SM::LDS + 16 * j, acc[j], SM::LDS, wmma::mem_row_major);
        }
        __syncwarp();
        { /* online softmax of row r (two lanes per row, 32 columns each) */
            int pr = row_p[r];
            float *srow = Ss + r * SM::LDS;
            float mx = -INFINITY;
            for (int c = half * 32; c < half * 32 + 32; c++) {
                int p = k0 + c;
                int ok = pr >= 0 && p <= pr && p < hi && (window <= 0 || p > pr - window);
                float v = ok ? srow[c] : -INFINITY;
                srow[c] = v;
                mx = fmaxf(mx, v);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            float m_old = row_m[r], m_new = fmaxf(m_old, mx);
            float corr = m_new == -INFINITY ? 1.0f : __expf(m_old - m_new), sum = 0.0f;
            for (int c = half * 32; c < half * 32 + 32; c++) {
                float e = srow[c] == -INFINITY ? 0.0f : __expf(srow[c] - m_new);
                Ps[r * SM::LDP + c] = __float2half_rn(e);
                sum += e;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            if (corr != 1.0f) /* the row's max moved: rescale what it has summed so far */
                for (int c = half * (HD / 2); c < half * (HD / 2) + HD / 2; c++) Os[r * SM::LDO + c] *= corr;
            __syncwarp();
            if (!half) row_m[r] = m_new, row_l[r] = row_l[r] * corr + sum;
        }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < HD / 16; j++) { /* O += P V for this warp's rows */
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
            float *op = Os + 16 * w * SM::LDO + 16 * j;
            wmma::load_matrix_sync(o, op, SM::LDO, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < FA_BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
                wmma::load_matrix_sync(a, Ps + 16 * w * SM::LDP + kk, SM::LDP);
                wmma::load_matrix_sync(b, Vs + kk * SM::LDH + 16 * j, SM::LDH);
                wmma::mma_sync(o, a, b, o);
            }
            wmma::store_matrix_sync(op, o, SM::LDO, wmma::mem_row_major);
        }
        __syncwarp();
    }
    __syncwarp();
    if (r < n) { /* the sink joins the denominator; each lane writes half of its row */
        float m = row_m[r], L = row_l[r], f = 1.0f;
        if (sinks) {
            float ms = fmaxf(m, sinks[h]), sc = m == -INFINITY ? 0.0f : __expf(m - ms);
            L = L * sc + __expf(sinks[h] - ms);
            f = sc;
        }
        f = L > 0.0f ? f / L : 0.0f;
        float *o = out + ((size_t)(t0 + r) * n_heads + h) * hd;
        for (int c = half * (HD / 2); c < half * (HD / 2) + HD / 2 && c < hd; c++) o[c] = Os[r * SM::LDO + c] * f;
    }
}

template <int HD>
static void flash_launch(float *out, const float *q, const float *kc, const float *vc,
                         const int32_t *pos, const int32_t *tok_seq, const int32_t *tables,
                         int max_blocks, int bs, const int32_t *tiles, int n_tiles, int n_heads,
                         int n_kv_heads, int hd, float scale, int window, const float *sinks,
                         cudaStream_t s) {
    static int attr_set; /* per instance: opt in to more than 48 KiB of dynamic shared memory */
    if (!attr_set) {
        cudaFuncSetAttribute(flash_prefill_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)fa_smem<HD>::bytes);
        attr_set = 1;
    }
    launch(flash_prefill_kernel<HD>, dim3(n_tiles, n_heads), 128, fa_smem<HD>::bytes, s, out, q, kc,
           vc, pos, tok_seq, tables, max_blocks, bs, tiles, n_heads, n_kv_heads, hd, scale, window, sinks);
}

extern "C" int ft_cuda_attention_tiles(int32_t *tiles, const int *seg_len, int n_segs) {
    int n = 0, t = 0;
    for (int i = 0; i < n_segs; t += seg_len[i++])
        for (int o = 0; o < seg_len[i]; o += FA_BQ, n++) {
            tiles[2 * n] = t + o;
            tiles[2 * n + 1] = seg_len[i] - o < FA_BQ ? seg_len[i] - o : FA_BQ;
        }
    return n;
}


extern "C" void ft_cuda_attention_prefill(float *out, const float *q, const float *k_cache,
                                          const float *v_cache, const int32_t *pos,
                                          const int32_t *tok_seq, const int32_t *tables,
                                          int max_blocks, int block_size, const int32_t *tiles,
                                          int n_tiles, int n_heads, int n_kv_heads, int head_dim,
                                          float scale, int window, const float *sinks,
                                          cudaStream_t s) {
    if (n_tiles <= 0) return;
#define FA_ARGS out, q, k_cache, v_cache, pos, tok_seq, tables, max_blocks, block_size, tiles, n_tiles, \
                n_heads, n_kv_heads, head_dim, scale, window, sinks, s
    if (head_dim <= 32) flash_launch<32>(FA_ARGS);
    else if (head_dim <= 64) flash_launch<64>(FA_ARGS);
    else if (head_dim <= 128) flash_launch<128>(FA_ARGS);
    else flash_launch<256>(FA_ARGS);
#undef FA_ARGS
}

__global__ void add_bias_kernel(float *y, int ldy, const float *bias, int N) {
    pdl_enter();
    for (int n = threadIdx.x; n < N; n += blockDim.x) y[(size_t)blockIdx.x * ldy + n] += bias[n];
}

extern "C" void ft_cuda_add_bias(float *y, int ldy, const float *bias, int T, int N, cudaStream_t s) {
    launch(add_bias_kernel, T, 256, 0, s, y, ldy, bias, N);
}

__global__ void silu_mul_kernel(float *out, const float *gu, int I, size_t n) {
    pdl_enter();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t t = i / I, j = i % I;
    float g = gu[t * 2 * I + j], u = gu[t * 2 * I + I + j];
    out[i] = g / (1.0f + __expf(-g)) * u;
}

extern "C" void ft_cuda_silu_mul(float *out, const float *gate_up, int T, int I, cudaStream_t s) {
    size_t n = (size_t)T * I;
    launch(silu_mul_kernel, cdiv(n, 256), 256, 0, s, out, gate_up, I, n);
}

/* the clamped modes of enum ft_swiglu: OAI (u + 1) g sigmoid(alpha g), CLAMP u g sigmoid(g) */
__global__ void swiglu_clamped_kernel(float *out, const float *gu, int I, size_t n, int mode,
                                      float limit, float alpha) {
    pdl_enter();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t t = i / I, j = i % I;
    float g = fminf(gu[t * 2 * I + j], limit), u = fminf(fmaxf(gu[t * 2 * I + I + j], -limit), limit);
    if (mode == FT_SWIGLU_CLAMP) out[i] = u * (g / (1.0f + __expf(-g)));
    else out[i] = (u + 1.0f) * (g / (1.0f + __expf(-alpha * g)));
}

extern "C" void ft_cuda_swiglu(float *out, const float *gate_up, int T, int I, enum ft_swiglu mode,
                               float limit, float alpha, cudaStream_t s) {
    size_t n = (size_t)T * I;
    if (mode == FT_SWIGLU_PLAIN) ft_cuda_silu_mul(out, gate_up, T, I, s);
    else launch(swiglu_clamped_kernel, cdiv(n, 256), 256, 0, s, out, gate_up, I, n, (int)mode, limit, alpha);
}

/* y[p, :] += bias[eids[p], :] for the pairs the GPU computed (mask[p] >= 0) */
__global__ void moe_add_bias_kernel(float *y, const float *bias, const int32_t *eids,
                                    const int32_t *mask, int N) {
    pdl_enter();
    int p = blockIdx.x;
    if (mask[p] < 0) return;
    const float *b = bias + (size_t)eids[p] * N;
    for (int n = threadIdx.x; n < N; n += blockDim.x) y[(size_t)p * N + n] += b[n];
}

extern "C" void ft_cuda_moe_add_bias(float *y, const float *bias, const int32_t *eids,
                                     const int32_t *mask, int P, int N, cudaStream_t s) {
    launch(moe_add_bias_kernel, P, 256, 0, s, y, bias, eids, mask ? mask : eids, N);
}

/* rows sorted by expert: row r belongs to the e with offsets[e] <= r < offsets[e + 1] */
__global__ void moe_add_bias_sorted_kernel(float *y, const float *bias, const int32_t *offsets,
                                           const int32_t *slot_of, int E, int N) {
    pdl_enter();
    int r = blockIdx.x, lo = 0, hi = E; /* the last e with offsets[e] <= r */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (offsets[mid] <= r) lo = mid;
        else hi = mid;
    }
    if (slot_of && slot_of[lo] < 0) return; /* not in this batch: its rows are done in another */
    const float *b = bias + (size_t)lo * N;
    for (int n = threadIdx.x; n < N; n += blockDim.x) y[(size_t)r * N + n] += b[n];
}

extern "C" void ft_cuda_moe_add_bias_sorted(float *y, const float *bias, const int32_t *offsets,
                                            const int32_t *slot_of, int E, int R, int N,
                                            cudaStream_t s) {
    if (R > 0) launch(moe_add_bias_sorted_kernel, R, 256, 0, s, y, bias, offsets, slot_of, E, N);
}

__global__ void add_kernel(float *y, const float *x, size_t n) {
    pdl_enter();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

extern "C" void ft_cuda_add(float *y, const float *x, size_t n, cudaStream_t s) {
    launch(add_kernel, cdiv(n, 256), 256, 0, s, y, x, n);
}

/* The GPU's %globaltimer: ns, comparable across kernels (and, offset by a constant, with the
 * host's CLOCK_REALTIME) */
__device__ __forceinline__ unsigned long long globaltimer(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* A span launched before the CPU experts it adds are done waits here: one thread polls
 * gate[0] (mapped pinned memory) until the host sets it, then clears it. After 20 s without it
 * (a hung CPU side) it counts gate[1] and lets the stream go on, for the host to fail the step.
 * gate[2..3] and gate[4..5]: the GPU's times it opened and it started polling, gate[6] the
 * polls that found it shut (FT_STEP_TIMING). */
__global__ void gate_kernel(volatile int *gate) {
    pdl_enter();
    if (threadIdx.x) return;
    const unsigned long long t0 = globaltimer();
    *(volatile unsigned long long *)(gate + 4) = t0;
    int polls = 0;
    while (gate[0] == 0) {
        polls++;
        __nanosleep(256);
        if (globaltimer() - t0 > 20000000000ull) {
            gate[1] = gate[1] + 1;
            break;
        }
    }
    gate[0] = 0;
    gate[6] = polls;
    *(volatile unsigned long long *)(gate + 2) = globaltimer(); /* when it opened, for FT_STEP_TIMING */
    __threadfence_system();
}

extern "C" void ft_cuda_gate(int *gate, cudaStream_t s) {
    launch(gate_kernel, 1, 32, 0, s, (volatile int *)gate);
}

/* FT_STEP_TIMING: the GPU's %globaltimer (ns) into mapped memory, once what precedes it on
 * the stream is done */
__global__ void stamp_kernel(volatile unsigned long long *m) {
    pdl_enter();
    *m = globaltimer();
    __threadfence_system();
}

extern "C" void ft_cuda_stamp(unsigned long long *m, cudaStream_t s) {
    launch(stamp_kernel, 1, 1, 0, s, (volatile unsigned long long *)m);
}

/* The router's results for the host in one kernel instead of three copies (each a graph
 * memcpy node of its own): h_* are mapped pinned memory, written across PCIe. seq (device
 * memory, {count, blocks done}) non-NULL: the last block to finish stores the launch's number
 * (count + 1) to h_done (mapped), after every block's writes were fenced, so that the host can
 * poll it instead of syncing the stream (FT_ROUTER_SPIN=1), and its time (FT_STEP_TIMING). */
__global__ void stage_out_kernel(int32_t *h_ids, const int32_t *ids, float *h_w, const float *w,
                                 int n_pairs, float *h_x, const float *x, int n_x, unsigned *seq,
                                 volatile unsigned *h_done) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_pairs) {
        h_ids[i] = ids[i];
        if (h_w) h_w[i] = w[i];
    }
    if (i < n_x) h_x[i] = x[i];
    if (!seq) return;
    __threadfence_system(); /* this thread's writes reach the host before the count below */
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(&seq[1], 1u) == gridDim.x - 1) { /* the last block */
        __threadfence();
        seq[1] = 0;
        unsigned v = seq[0] + 1;
        seq[0] = v;
        *(volatile unsigned long long *)(h_done + 2) = globaltimer(); /* for FT_STEP_TIMING */
        __threadfence_system();
        h_done[0] = v;
    }
}

extern "C" void ft_cuda_stage_out(int32_t *h_ids, const int32_t *ids, float *h_w, const float *w,
                                  int n_pairs, float *h_x, const float *x, int n_x, unsigned *seq,
                                  unsigned *h_done, cudaStream_t s) {
    int n = n_pairs > n_x ? n_pairs : n_x;
    launch(stage_out_kernel, cdiv(n, 256), 256, 0, s, h_ids, ids, h_w, w, n_pairs, h_x, x, n_x, seq,
           (volatile unsigned *)h_done);
}

/* --- GEMV: one warp per output row, TT tokens at once; 16-byte weight loads when K % 8 == 0 --- */
#define GEMV_WARPS 8

template <int TT>
__device__ __forceinline__ void dot8(float acc[TT], uint4 u, const float *x, int ldx, int k, int T,
                                     const float *nw) {
    float wf[8] = {__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                   __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u),
                   __uint_as_float(u.z << 16), __uint_as_float(u.z & 0xffff0000u),
                   __uint_as_float(u.w << 16), __uint_as_float(u.w & 0xffff0000u)};
    if (nw) { /* fused input norm: the per-channel weight folds into w; 1/rms comes at the end */
        float4 na = *(const float4 *)(nw + k), nb = *(const float4 *)(nw + k + 4);
        wf[0] *= na.x, wf[1] *= na.y, wf[2] *= na.z, wf[3] *= na.w;
        wf[4] *= nb.x, wf[5] *= nb.y, wf[6] *= nb.z, wf[7] *= nb.w;
    }
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t >= T) break;
        const float4 *xv = (const float4 *)(x + (size_t)t * ldx + k);
        float4 a = xv[0], b = xv[1];
        acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                  wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
    }
}

template <int TT>
__device__ __forceinline__ void row_dot(float acc[TT], const uint16_t *wr, const float *x, int ldx,
                                        int K, int lane, int T, const float *nw) {
    if ((K & 7) == 0) {
        const uint4 *w4 = (const uint4 *)wr;
        int n8 = K / 8;
        /* up to four 16-byte loads in flight per lane before any arithmetic */
        for (int c = lane; c < n8; c += 4 * WARP) {
            uint4 u[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                u[j] = c + j * WARP < n8 ? __ldg(w4 + c + j * WARP) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (c + j * WARP < n8) dot8<TT>(acc, u[j], x, ldx, (c + j * WARP) * 8, T, nw);
        }
    } else {
        for (int k = lane; k < K; k += WARP) {
            float wf = bf2f(wr[k]) * (nw ? nw[k] : 1.0f);
#pragma unroll
            for (int t = 0; t < TT; t++)
                if (t < T) acc[t] += wf * x[(size_t)t * ldx + k];
        }
    }
}

/* The fused input RMSNorm of the GEMV kernels (a.nw set): every block computes each token's
 * 1/rms into r_s (x rows are small, L2 resident), and block 0 stores the normalised input in
 * a.xn_out when asked. Every thread of the block calls it. */
__device__ void gemv_norm(const struct ft_cuda_gemv_args &a, float *r_s) {
    if (!a.nw) return;
    for (int t = 0; t < a.T; t++) {
        float ss = 0.0f;
        for (int k = threadIdx.x; k < a.K; k += blockDim.x) {
            float v = a.x[(size_t)t * a.K + k];
            ss += v * v;
        }
        ss = block_sum(ss);
        if (threadIdx.x == 0) r_s[t] = rsqrtf(ss / (float)a.K + a.eps);
    }
    __syncthreads();
    if (blockIdx.x == 0 && a.xn_out)
        for (int t = 0; t < a.T; t++)
            for (int k = threadIdx.x; k < a.K; k += blockDim.x)
                a.xn_out[(size_t)t * a.K + k] = a.x[(size_t)t * a.K + k] * r_s[t] * a.nw[k];
}

/* Stores row n's dot v for token t: through 1/rms (fused norm), plus the bias, into whichever
 * of the up to three outputs row n belongs to, added to it when a.accumulate. */
__device__ __forceinline__ void gemv_store(const struct ft_cuda_gemv_args &a, int n, int t,
                                           float v, const float *r_s) {
    float *y = a.y[0];
    const float *b = a.b[0];
    int col = n, ld = a.ldy0;
    if (n >= a.n0 + a.n1) y = a.y[2], b = a.b[2], col = n - a.n0 - a.n1, ld = a.N - a.n0 - a.n1;
    else if (n >= a.n0) y = a.y[1], b = a.b[1], col = n - a.n0, ld = a.n1;
    v = v * (a.nw ? r_s[t] : 1.0f) + (b ? b[col] : 0.0f);
    float *o = y + (size_t)t * ld + col;
    *o = a.accumulate ? *o + v : v;
}

/* One warp per output row over concatenated weights whose rows go to up to three outputs
 * (fused q/k/v), with an optional fused input RMSNorm (norm weight folded into the weights,
 * 1/rms per token applied at the end; block 0 also stores the normalised input) and an
 * optional accumulate epilogue (y += result: the residual add of o_proj / down_proj). */
template <int TT>
__global__ void gemv_fused_kernel(struct ft_cuda_gemv_args a) {
    int lane = threadIdx.x % WARP, n = blockIdx.x * GEMV_WARPS + threadIdx.x / WARP;
    if (n < a.N) /* this warp's weight row into L2 while the previous kernel finishes */
        for (size_t off = (size_t)lane * 128; off < (size_t)a.K * 2; off += WARP * 128)
            prefetch_l2((const char *)(a.w + (size_t)n * a.K) + off);
    pdl_enter();
    __shared__ float r_s[8];
    gemv_norm(a, r_s);
    if (n >= a.N) return;
    float acc[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) acc[t] = 0.0f;
    row_dot<TT>(acc, a.w + (size_t)n * a.K, a.x, a.K, a.K, lane, a.T, a.nw);
#pragma unroll
    for (int t = 0; t < TT; t++) {
        float v = warp_sum(acc[t]);
        if (lane == 0 && t < a.T) gemv_store(a, n, t, v, r_s);
    }
}

/* Few output rows (the router: N = E = 128): one block per row, its 256 threads splitting K
 * (one 16-byte load each per 2048 elements), so the GEMV spreads over N SMs instead of N / 8
 * and each thread waits for one load round instead of a warp for K / 256. Same fused norm,
 * outputs and epilogue as gemv_fused_kernel; K % 8 == 0. The block's partial sums are added in
 * a fixed order: deterministic. */
template <int TT>
__global__ void gemv_splitk_kernel(struct ft_cuda_gemv_args a) {
    int n = blockIdx.x, tid = threadIdx.x, n8 = a.K / 8;
    const uint16_t *wr = a.w + (size_t)n * a.K;
    if ((size_t)tid * 128 < (size_t)a.K * 2) prefetch_l2((const char *)wr + (size_t)tid * 128);
    pdl_enter();
    __shared__ float r_s[8];
    __shared__ float part[TT][GEMV_WARPS];
    gemv_norm(a, r_s);
    float acc[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) acc[t] = 0.0f;
    const uint4 *w4 = (const uint4 *)wr;
    for (int c = tid; c < n8; c += blockDim.x) dot8<TT>(acc, __ldg(w4 + c), a.x, a.K, c * 8, a.T, a.nw);
    int lane = tid % WARP, w = tid / WARP;
#pragma unroll
    for (int t = 0; t < TT; t++) {
        float v = warp_sum(acc[t]);
        if (lane == 0) part[t][w] = v;
    }
    __syncthreads();
    if (tid >= TT || tid >= a.T) return;
    float v = 0.0f;
    for (int i = 0; i < GEMV_WARPS; i++) v += part[tid][i];
    gemv_store(a, n, tid, v, r_s);
}

/* The most rows a GEMV takes the block-per-row kernel for: the router (128) and o_proj (2048 rows
 * of 4096: a warp a row gave 256 blocks, 2 an SM); 512 and 8192 were measured slower. */
#define SPLITK_MAX_N 2048

extern "C" void ft_cuda_gemv_ex(const struct ft_cuda_gemv_args *args, cudaStream_t s) {
    dim3 grid(cdiv(args->N, GEMV_WARPS));
    int th = GEMV_WARPS * WARP;
    const int splitk = args->N <= SPLITK_MAX_N && args->K % 8 == 0;
    for (int t0 = 0; t0 < args->T; t0 += 8) { /* 8 tokens per launch */
        struct ft_cuda_gemv_args a = *args;
        a.T = args->T - t0 < 8 ? args->T - t0 : 8;
        a.x += (size_t)t0 * a.K;
        if (a.xn_out) a.xn_out += (size_t)t0 * a.K;
        a.y[0] += (size_t)t0 * a.ldy0;
        if (a.y[1]) a.y[1] += (size_t)t0 * a.n1;
        if (a.y[2]) a.y[2] += (size_t)t0 * (a.N - a.n0 - a.n1);
        if (splitk) {
            if (a.T == 1) launch(gemv_splitk_kernel<1>, args->N, th, 0, s, a);
            else if (a.T == 2) launch(gemv_splitk_kernel<2>, args->N, th, 0, s, a);
            else if (a.T <= 4) launch(gemv_splitk_kernel<4>, args->N, th, 0, s, a);
            else launch(gemv_splitk_kernel<8>, args->N, th, 0, s, a);
        } else if (a.T == 1)
            launch(gemv_fused_kernel<1>, grid, th, 0, s, a);
        else if (a.T == 2)
            launch(gemv_fused_kernel<2>, grid, th, 0, s, a);
        else if (a.T <= 4)
            launch(gemv_fused_kernel<4>, grid, th, 0, s, a);
        else
            launch(gemv_fused_kernel<8>, grid, th, 0, s, a);
    }
}

extern "C" void ft_cuda_gemv(float *y, int ldy, const float *x, const uint16_t *w,
                             const float *bias, int T, int N, int K, cudaStream_t s) {
    struct ft_cuda_gemv_args a = {{y, NULL, NULL}, N, 0, ldy, {bias, NULL, NULL}, x, w, NULL, 0.0f, NULL, 0, T, N, K};
    ft_cuda_gemv_ex(&a, s);
}

__global__ void moe_gemv_kernel(float *y, const float *x, int x_div, const uint16_t *w,
                                size_t expert_stride, const int32_t *ids, int N, int K) {
    pdl_enter();
    int lane = threadIdx.x % WARP, n = blockIdx.x * GEMV_WARPS + threadIdx.x / WARP, p = blockIdx.y;
    if (n >= N) return;
    if (ids[p] < 0) { /* -1: a pair the CPU computes (hybrid), 0 here; -2: another launch's */
        if (lane == 0 && ids[p] == -1) y[(size_t)p * N + n] = 0.0f;
        return;
    }
    float acc[1] = {0.0f};
    row_dot<1>(acc, w + (size_t)ids[p] * expert_stride + (size_t)n * K, x + (size_t)(p / x_div) * K,
               K, K, lane, 1, NULL);
    float v = warp_sum(acc[0]);
    if (lane == 0) y[(size_t)p * N + n] = v;
}

extern "C" void ft_cuda_moe_gemv(float *y, const float *x, int x_div, const uint16_t *w,
                                 size_t expert_stride, const int32_t *ids, int P, int N, int K,
                                 cudaStream_t s) {
    const dim3 grid(cdiv(N, GEMV_WARPS), P);
    launch(moe_gemv_kernel, grid, GEMV_WARPS * WARP, 0, s, y, x, x_div, w, expert_stride, ids, N, K);
}

/* One thread per (token, column), blocks along the columns: one block per token (the old
 * layout) took 12.5 us of a decode layer under ncu, each thread walking 8 columns x k pairs. */
__global__ void moe_combine_kernel(float *out, const float *y, const float *wts, int k, int H,
                                   int accumulate) {
    pdl_enter();
    int t = blockIdx.y, h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) return;
    float a = 0.0f;
    for (int j = 0; j < k; j++) a += wts[t * k + j] * y[((size_t)t * k + j) * H + h];
    out[(size_t)t * H + h] = accumulate ? out[(size_t)t * H + h] + a : a;
}

extern "C" void ft_cuda_moe_combine(float *out, const float *y, const float *wts, int T, int k,
                                    int H, int accumulate, cudaStream_t s) {
    launch(moe_combine_kernel, dim3(cdiv(H, 128), T), 128, 0, s, out, y, wts, k, H, accumulate);
}

/* --- router: one warp per token; values kept in registers (E <= 1024) --- */
#define RT_MAX (1024 / WARP)

/* NV = E / 32 rounded up to a power of two: every loop over a lane's values unrolled and each
 * value indexed at compile time, so v stays in registers (a loop of RT_MAX with the chosen
 * expert's slot written by a run-time index put v in local memory, on every decode layer) */
template <int NV>
__global__ void router_topk_kernel(const float *logits, int T, int E, int k, int norm, int G,
                                   int topk_group, float scale, int32_t *ids, float *w) {
    pdl_enter();
    int t = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (t >= T) return;
    const float *l = logits + (size_t)t * E;
    float v[NV];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int e = lane + j * WARP;
        v[j] = e < E ? l[e] : -INFINITY;
        mx = fmaxf(mx, v[j]);
    }
    mx = warp_max(mx);
    float z = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int e = lane + j * WARP;
        v[j] = e < E ? __expf(v[j] - mx) : -1.0f;
        z += e < E ? v[j] : 0.0f;
    }
    z = warp_sum(z);
    if (G > 1) { /* DeepSeek-V2's group_limited_greedy: only the topk_group groups with the best
                  * single scores keep theirs (ties: the lower group), the others score 0 */
        const int gs = E / G;
        float gbest[32];
        for (int g = 0; g < G; g++) {
            float b = -1.0f;
#pragma unroll
            for (int j = 0; j < NV; j++) {
                int e = lane + j * WARP;
                if (e < E && e / gs == g) b = fmaxf(b, v[j]);
            }
            gbest[g] = warp_max(b);
        }
        uint32_t keep = 0;
        for (int r = 0; r < topk_group && r < G; r++) {
            int bg = -1;
            for (int g = 0; g < G; g++)
                if (!(keep >> g & 1) && (bg < 0 || gbest[g] > gbest[bg])) bg = g;
            keep |= 1u << bg;
        }
#pragma unroll
        for (int j = 0; j < NV; j++) {
            int e = lane + j * WARP;
            if (e < E && !(keep >> (e / gs) & 1)) v[j] = 0.0f;
        }
    }
    float sum = 0.0f;
    for (int r = 0; r < k; r++) {
        float best = -1.0f;
        int bi = 1 << 30;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            int e = lane + j * WARP;
            if (v[j] > best || (v[j] == best && e < bi)) best = v[j], bi = e;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ob > best || (ob == best && oi < bi)) best = ob, bi = oi;
        }
#pragma unroll
        for (int j = 0; j < NV; j++)
            if (bi == lane + j * WARP) v[j] = -1.0f;
        if (lane == 0) {
            ids[t * k + r] = bi;
            w[t * k + r] = best / z;
        }
        sum += best / z;
    }
    if (norm && lane == 0)
        for (int r = 0; r < k; r++) w[t * k + r] /= sum;
    if (scale != 1.0f && lane == 0)
        for (int r = 0; r < k; r++) w[t * k + r] *= scale;
}

extern "C" void ft_cuda_router_topk(const float *logits, int T, int E, int k, int norm, int G,
                                    int topk_group, float scale, int32_t *ids, float *w, cudaStream_t s) {
#define RT_GO(nv)                                                                              \
    launch(router_topk_kernel<nv>, cdiv(T, 4), 4 * WARP, 0, s, logits, T, E, k, norm, G,          \
           topk_group, scale, ids, w)
    if (E <= 32) RT_GO(1);
    else if (E <= 64) RT_GO(2);
    else if (E <= 128) RT_GO(4);
    else if (E <= 256) RT_GO(8);
    else if (E <= 512) RT_GO(16);
    else RT_GO(RT_MAX);
#undef RT_GO
}

/* uniform in [0, 1) from the top 24 bits */
__device__ __forceinline__ float unit24(uint64_t s) { return (float)(s >> 40) * (1.0f / 16777216.0f); }

/* One id: uniform, or zipf (cdf: [E] cumulative probabilities of ranks 1..E) mapped through the
 * layer's permutation of experts (rank r -> (r * 2654435761 + layer * 40503) mod E, as the CPU) */
__device__ __forceinline__ int synth_draw(uint64_t *st, int E, const float *cdf, int layer) {
    *st = ft_mix64(*st + 0x9e3779b97f4a7c15ull);
    if (!cdf) return (int)(*st % (uint64_t)E);
    float u = unit24(*st);
    int lo = 0, hi = E - 1; /* the first rank whose cdf reaches u */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] >= u) hi = mid;
        else lo = mid + 1;
    }
    return (int)(((uint64_t)lo * 2654435761u + (uint64_t)layer * 40503u) % (uint64_t)E);
}

/* The first expert not among ids[0..j) in rank order (zipf: through the layer's permutation)
 * or id order: a draw's fallback after 64 duplicates (a steep zipf leaves too few reachable
 * ranks to fill k without it), as the CPU's synth_unused. */
__device__ __forceinline__ int synth_unused(const int32_t *ids, int j, int layer, int E, int zipf) {
    for (int r = 0; r < E; r++) {
        int id = zipf ? (int)(((uint64_t)r * 2654435761u + (uint64_t)layer * 40503u) % (uint64_t)E) : r;
        int used = 0;
        for (int i = 0; i < j; i++) used |= ids[i] == id;
        if (!used) return id;
    }
    return 0;
}

/* softmax statistics of each token's router logits (max, sum of exp) into stats[t] */
__device__ __forceinline__ void router_stats(const float *l, int E, int lane, float *mx, float *z) {
    float m = -INFINITY, s = 0.0f;
    for (int e = lane; e < E; e += WARP) m = fmaxf(m, l[e]);
    m = warp_max(m);
    for (int e = lane; e < E; e += WARP) s += __expf(l[e] - m);
    *mx = m, *z = warp_sum(s);
}

/* k distinct ids, one after another: each drawn until it differs from those before it (after
 * 64 duplicates, the first unused in rank order: synth_unused). */
__device__ __forceinline__ void synth_draw_serial(int32_t *got, int k, uint64_t *st, int E,
                                                  const float *cdf, int layer) {
    for (int j = 0; j < k; j++) {
        int id, dup, tries = 0;
        do {
            id = synth_draw(st, E, cdf, layer);
            dup = 0;
            for (int i = 0; i < j; i++) dup |= got[i] == id;
            if (dup && ++tries >= 64) id = synth_unused(got, j, layer, E, cdf != NULL), dup = 0;
        } while (dup);
        got[j] = id;
    }
}

#define SYNTH_MAX_K 32 /* the GPU backend allows k <= 32 (gpu.c) */

/* One warp per token: softmax statistics over E by the warp, then lane j < k draws the j-th id
 * from a stream of its own; lanes whose id an earlier lane holds draw again, all at once, until
 * the k differ (one round most steps: 8 of 128 collide with probability ~0.2). A steep zipf that
 * leaves them colliding 64 rounds falls back to lane 0's serial draws. Weights: the router's
 * softmax at those ids (normalised over the k when norm). Lane 0 drawing all k one after another
 * (the CPU's order) decoded ~6% slower. */
__global__ void synth_route_kernel(int32_t *ids, float *w, const float *logits, int T, int E,
                                       int k, uint64_t seed, const uint32_t *step, int layer,
                                       int norm, const float *cdf) {
    pdl_enter();
    int t = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (t >= T) return;
    const float *l = logits + (size_t)t * E;
    const uint32_t s0 = *step;
    float mx, z;
    router_stats(l, E, lane, &mx, &z);
    const uint64_t base = ft_mix64(seed ^ ft_mix64(((uint64_t)s0 << 40) ^ ((uint64_t)layer << 20) ^ (uint64_t)t));
    uint64_t st = lane ? ft_mix64(base ^ (0x632be59bd9b4e019ull * (uint64_t)lane)) : base;
    int id = lane < k ? synth_draw(&st, E, cdf, layer) : -1 - lane;
    int tries = 0;
    for (;; tries++) {
        int dup = 0;
        for (int i = 0; i < k - 1; i++) {
            const int o = __shfl_sync(0xffffffffu, id, i);
            dup |= i < lane && o == id;
        }
        if (!__any_sync(0xffffffffu, dup)) break;
        if (tries == 64) break;
        if (dup) id = synth_draw(&st, E, cdf, layer);
    }
    if (tries == 64) { /* lane 0 draws them one after another */
        int32_t got[SYNTH_MAX_K];
        uint64_t s1 = base;
        if (lane == 0) synth_draw_serial(got, k, &s1, E, cdf, layer);
        for (int j = 0; j < k; j++) {
            const int v = __shfl_sync(0xffffffffu, lane == 0 ? got[j] : 0, 0);
            if (lane == j) id = v;
        }
    }
    const float g = lane < k ? __expf(l[id] - mx) / z : 0.0f;
    const float sum = warp_sum(g);
    if (lane < k) ids[t * k + lane] = id, w[t * k + lane] = norm ? g / sum : g;
}

/* Sticky routing (temporally correlated): each of the k choices keeps the layer's previous id
 * with probability keep, else draws a new uniform one, token after token (the state carries
 * across tokens, as on the CPU); a duplicate forgets its slot and redraws. Statistics first, a
 * warp per token; then one thread walks the tokens in order. */
__global__ void synth_stats_kernel(float *stats, const float *logits, int T, int E) {
    pdl_enter();
    int t = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (t >= T) return;
    float mx, z;
    router_stats(logits + (size_t)t * E, E, lane, &mx, &z);
    if (!lane) stats[2 * t] = mx, stats[2 * t + 1] = z;
}

__global__ void synth_sticky_kernel(int32_t *ids, float *w, const float *logits, const float *stats,
                                    int T, int E, int k, uint64_t seed, const uint32_t *step,
                                    int layer, int norm, float keep, int32_t *prev) {
    pdl_enter();
    if (threadIdx.x || blockIdx.x) return;
    uint64_t st = ft_mix64(seed ^ ft_mix64(((uint64_t)*step << 40) ^ ((uint64_t)layer << 20)));
    int pv[32], cur[32]; /* the layer's state and the token's ids in registers (k <= 32) */
    for (int j = 0; j < k; j++) pv[j] = prev[j];
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        float sum = 0.0f, wt[32];
        for (int j = 0; j < k; j++) {
            int id, dup;
            do {
                st = ft_mix64(st + 0x9e3779b97f4a7c15ull);
                if (pv[j] >= 0 && unit24(st) < keep) {
                    id = pv[j];
                } else {
                    st = ft_mix64(st + 0x9e3779b97f4a7c15ull);
                    id = pv[j] = (int)(st % (uint64_t)E);
                }
                dup = 0;
                for (int i = 0; i < j; i++) dup |= cur[i] == id;
                if (dup) pv[j] = -1;
            } while (dup); /* uniform redraws: E >= k distinct ids are always reachable */
            cur[j] = id;
            wt[j] = __expf(l[id] - stats[2 * t]) / stats[2 * t + 1];
            sum += wt[j];
        }
        for (int j = 0; j < k; j++) {
            ids[t * k + j] = cur[j];
            w[t * k + j] = norm ? wt[j] / sum : wt[j];
        }
    }
    for (int j = 0; j < k; j++) prev[j] = pv[j];
}

extern "C" void ft_cuda_synthetic_route(int32_t *ids, float *w, const float *logits, int T, int E,
                                        int k, uint64_t seed, const uint32_t *step, int layer,
                                        int norm, const struct ft_cuda_synth *sy, cudaStream_t s) {
    if (sy && sy->sticky) {
        launch(synth_stats_kernel, cdiv(T, 4), 4 * WARP, 0, s, sy->stats, logits, T, E);
        launch(synth_sticky_kernel, 1, 32, 0, s, ids, w, logits, (const float *)sy->stats, T, E, k,
               seed, step, layer, norm, sy->keep, sy->sticky + (size_t)layer * k);
        return;
    }
    launch(synth_route_kernel, cdiv(T, 4), 4 * WARP, 0, s,
           ids, w, logits, T, E, k, seed, step, layer, norm,
           sy ? (const float *)sy->zipf_cdf : (const float *)NULL);
}

__global__ void step_incr_kernel(uint32_t *step) {
    pdl_enter();
    (*step)++;
}

extern "C" void ft_cuda_step_incr(uint32_t *step, cudaStream_t s) {
    launch(step_incr_kernel, 1, 1, 0, s, step);
}

__global__ void sigmoid_scale_add_kernel(float *y, const float *x, const float *score, int H) {
    pdl_enter();
    int t = blockIdx.x;
    float g = 1.0f / (1.0f + __expf(-score[t]));
    for (int h = threadIdx.x; h < H; h += blockDim.x) y[(size_t)t * H + h] += g * x[(size_t)t * H + h];
}

extern "C" void ft_cuda_sigmoid_scale_add(float *y, const float *x, const float *score, int T,
                                          int H, cudaStream_t s) {
    launch(sigmoid_scale_add_kernel, T, 256, 0, s, y, x, score, H);
}



#define DRAW_THREADS 1024

/* Top-k / top-p / min-p on the device (ft_sampler_process's definition, then its draw): every
 * token a filter can keep is a candidate, the candidates (at most DRAW_CAP) are sorted on chip by
 * (x desc, id asc), the filters cut that order, and the survivors are drawn from in id order.
 * A row with more candidates (a flat distribution under top-p or min-p, a top-k beyond the cap
 * or whose k-th token lies more than 32 below the maximum) gets -1, and the host samples it
 * from its logits (ft_gpu_row_logits). */
#define DRAW_CAP 2048
static int g_draw_cap = DRAW_CAP;

extern "C" void ft_cuda_sample_draw_set_cap(int cap) {
    g_draw_cap = cap > 0 && cap < DRAW_CAP ? cap : DRAW_CAP;
}

struct draw_shared {
    unsigned long long key[DRAW_CAP]; /* (x as a key that sorts descending) << 32 | id, later id << 32 | x */
    double a[DRAW_CAP];               /* weights, then their running sums */
    double red[DRAW_THREADS / WARP];  /* block reductions */
    int n, m;
};

/* A float's bits as a key that sorts ascending for descending values (the host's desc_key). */
__device__ __forceinline__ uint32_t draw_key(float f) {
    uint32_t u = __float_as_uint(f);
    u = u & 0x80000000u ? ~u : u | 0x80000000u;
    return ~u;
}

__device__ __forceinline__ float draw_key_value(uint32_t k) {
    uint32_t u = ~k;
    return __uint_as_float(u & 0x80000000u ? u & 0x7fffffffu : ~u);
}

/* a[0..n) replaced by its inclusive running sums: each thread a contiguous chunk. */
__device__ void block_scan_d(double *a, int n, double *red) {
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid % WARP, w = tid / WARP, nw = nt / WARP;
    const int ch = (n + nt - 1) / nt, i0 = tid * ch, i1 = min(n, i0 + ch);
    double t = 0;
    for (int i = i0; i < i1; i++) t += a[i], a[i] = t;
    const double incl = warp_scan(t, lane);
    __syncthreads();
    if (lane == WARP - 1) red[w] = incl;
    __syncthreads();
    if (w == 0) {
        const double r = warp_scan(lane < nw ? red[lane] : 0.0, lane);
        if (lane < nw) red[lane] = r;
    }
    __syncthreads();
    const double off = (w ? red[w - 1] : 0.0) + incl - t;
    for (int i = i0; i < i1; i++) a[i] += off;
    __syncthreads();
}

/* key[0..n) sorted ascending (n <= DRAW_CAP; padded to a power of two with the largest key). */
__device__ void block_sort_keys(unsigned long long *key, int n) {
    int P = 1;
    while (P < n) P <<= 1;
    for (int i = n + threadIdx.x; i < P; i += blockDim.x) key[i] = ~0ull;
    __syncthreads();
    for (int k = 2; k <= P; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < P; i += blockDim.x) {
                const int o = i ^ j;
                if (o <= i) continue;
                const unsigned long long x = key[i], y = key[o];
                if ((x > y) == ((i & k) == 0)) key[i] = y, key[o] = x;
            }
            __syncthreads();
        }
}

/* 1 when token i is allowed by the row's bitmask mk (NULL: every token). */
__device__ __forceinline__ int draw_allowed(const uint32_t *mk, int i) {
    return !mk || (__ldg(mk + (i >> 5)) >> (i & 31) & 1u);
}

/* f(i, x) for every i of row l over V, x = l[i] / T, or -inf for a token its mask mk forbids:
 * 16 values a thread in flight (four float4 loads) where the row is 16-byte aligned; a block's
 * single pass over a 152k row otherwise waits an L2 latency per value. */
template <typename F>
__device__ __forceinline__ void row_each(const float *l, int V, float T, const uint32_t *mk, F &&f) {
    const int tid = threadIdx.x, nt = blockDim.x;
    if ((V & 3) || ((uintptr_t)l & 15)) {
        for (int i = tid; i < V; i += nt) f(i, draw_allowed(mk, i) ? l[i] / T : -INFINITY);
        return;
    }
    /* four values from b (a multiple of 4: their mask bits lie in one word) */
    auto four = [&](int b, float4 a) {
        const uint32_t w = mk ? __ldg(mk + (b >> 5)) >> (b & 31) : 0xfu;
        f(b, w & 1u ? a.x / T : -INFINITY), f(b + 1, w & 2u ? a.y / T : -INFINITY);
        f(b + 2, w & 4u ? a.z / T : -INFINITY), f(b + 3, w & 8u ? a.w / T : -INFINITY);
    };
    const float4 *l4 = (const float4 *)l;
    const int V4 = V >> 2;
    int i = tid;
    for (; i + 3 * nt < V4; i += 4 * nt) {
        float4 a[4];
#pragma unroll
        for (int u = 0; u < 4; u++) a[u] = __ldg(l4 + i + u * nt);
#pragma unroll
        for (int u = 0; u < 4; u++) four(4 * (i + u * nt), a[u]);
    }
    for (; i < V4; i += nt) four(4 * i, __ldg(l4 + i));
}

/* The token the filters of d leave drawn with d.u, from row l over V (x = l / T, its maximum
 * mx; -inf where the mask mk forbids, and never a candidate); -1 when more than cap tokens are
 * candidates, or (top-k) fewer than k lie within 32 of the maximum. Every thread of the block
 * calls it. The candidates' bound comes from passes that
 * count and weigh the tokens above 8 thresholds each: 4 apart below mx, then 0.5 apart in the
 * first 4-wide band that holds top_p of the mass (top-p; two more 0.5-wide bands for margin, as
 * the host's bands) or k tokens (top-k: that band split in 8 again, up to 3 more times, until
 * the tokens above it fit the cap). */
__device__ int draw_filtered(const float *l, int V, float T, float mx, const struct ft_draw &d,
                             const uint32_t *mk, int cap, struct draw_shared &sh) {
    const int tid = threadIdx.x, nt = blockDim.x;
    const int k_on = d.top_k > 0 && d.top_k < V, p_on = d.top_p < 1.0f, m_on = d.min_p > 0.0f;
    float tau;         /* the candidates: x >= tau */
    double tail = 0.0; /* the mass below tau, e^(x - mx) in float as the host's weights */
    if (k_on || p_on) {
        float top = mx, step = 4.0f, t_found = -INFINITY;
        int found = 0, b = 63;
        for (int pass = 0; pass < (k_on ? 5 : 2); pass++) {
            float c[8], zt = 0.0f;
            int cn[8];
#pragma unroll
            for (int j = 0; j < 8; j++) c[j] = 0.0f, cn[j] = 0;
            row_each(l, V, T, mk, [&](int, float v) {
                if (v != v) return;
                const float w = expf(v - mx);
                zt += w;
#pragma unroll
                for (int j = 0; j < 8; j++)
                    if (v > top - step * (float)(j + 1)) c[j] += w, cn[j]++;
            });
            const double target = (double)d.top_p * block_sum<double>(zt);
            int first = 8;
            double n_first = 0.0;
#pragma unroll
            for (int j = 7; j >= 0; j--) {
                const double got = block_sum<double>((double)cn[j]);
                const double mass = k_on ? 0.0 : block_sum<double>(c[j]);
                if (k_on ? got >= (double)d.top_k : mass >= target) first = j, n_first = got;
            }
            /* pass 0: beyond 32 below mx; later: rounding moved the sums (keep the last bound) */
            if (first == 8) break;
            t_found = top - step * (float)(first + 1), found = 1;
            b = pass == 0 ? 8 * first + 7 : 8 * (b / 8) + first;
            if (pass >= 1 && (!k_on || n_first <= (double)cap)) break;
            top -= step * (float)first, step *= 0.125f; /* top-k: split the band again */
        }
        if (k_on) {
            if (!found) return -1;
            tau = nextafterf(t_found, INFINITY); /* x > t_found */
        } else {
            b = !found ? 63 : b + 2 < 63 ? b + 2 : 63;
            tau = b == 63 ? -INFINITY : mx - 0.5f * (float)(b + 1);
        }
    } else {
        tau = mx + logf(d.min_p) - 1.0f;
    }
    /* count the candidates; the mass of the others. A masked row's -inf tokens are none: the
     * host keeps them only while tau is -inf, and its top-p then drops them (no mass) */
    if (mk && tau == -INFINITY) tau = nextafterf(-INFINITY, 0.0f); /* the lowest finite */
    int cnt = 0;
    double tl = 0.0;
    row_each(l, V, T, mk, [&](int, float v) {
        if (v >= tau) cnt++;
        else if (v == v) tl += (double)expf(v - mx);
    });
    const int n = (int)block_sum<double>((double)cnt);
    if (n > cap || n < 1) return -1;
    if (!k_on) tail = block_sum<double>(tl);
    if (tid == 0) sh.n = 0;
    __syncthreads();
    row_each(l, V, T, mk, [&](int i, float v) {
        if (v >= tau) sh.key[atomicAdd(&sh.n, 1)] = (unsigned long long)draw_key(v) << 32 | (uint32_t)i;
    });
    __syncthreads();
    block_sort_keys(sh.key, n);
#define KEY_X(k) draw_key_value((uint32_t)((k) >> 32))
    int keep = n;
    if (k_on) { /* the k-th largest, and every tie of it */
        if (d.top_k > n) return -1;
        const float kth = KEY_X(sh.key[d.top_k - 1]);
        int ge = 0;
        for (int i = tid; i < n; i += nt) ge += KEY_X(sh.key[i]) >= kth;
        keep = (int)block_sum<double>((double)ge);
    }
    if (p_on || m_on) {
        const int n1 = keep; /* the top-k survivors, or every candidate */
        double zc = 0.0;
        for (int i = tid; i < n1; i += nt) zc += exp((double)KEY_X(sh.key[i]) - (double)mx);
        double z = block_sum<double>(zc) + (k_on ? 0.0 : tail);
        if (p_on) { /* the smallest prefix whose mass reaches top_p (the crossing one stays) */
            for (int r = tid; r < n1; r += nt) sh.a[r] = exp((double)KEY_X(sh.key[n1 - 1 - r]) - (double)mx);
            __syncthreads();
            block_scan_d(sh.a, n1, sh.red); /* a[r]: the mass of sorted n1-1-r .. n1-1 */
            const double base = k_on ? 0.0 : tail, limit = 1.0 - (double)d.top_p;
            int over = 0;
            for (int i = 1 + tid; i < n1; i += nt) over += (base + sh.a[n1 - 1 - i]) / z > limit;
            keep = 1 + (int)block_sum<double>((double)over);
            double zk = 0.0;
            for (int i = tid; i < keep; i += nt) zk += exp((double)KEY_X(sh.key[i]) - (double)mx);
            z = block_sum<double>(zk);
        }
        if (m_on) { /* probabilities against min_p times the top one's */
            const double bar = (double)d.min_p * (1.0 / z);
            int ok = 0;
            for (int i = 1 + tid; i < keep; i += nt) ok += exp((double)KEY_X(sh.key[i]) - (double)mx) / z >= bar;
            keep = 1 + (int)block_sum<double>((double)ok);
        }
    }
    /* the draw over the survivors in id order, as the host's */
    const float top = KEY_X(sh.key[0]);
    __syncthreads();
    for (int i = tid; i < keep; i += nt) {
        const unsigned long long k = sh.key[i];
        sh.key[i] = (unsigned long long)(uint32_t)k << 32 | __float_as_uint(KEY_X(k));
    }
    __syncthreads();
    block_sort_keys(sh.key, keep);
    for (int i = tid; i < keep; i += nt)
        sh.a[i] = exp((double)__uint_as_float((uint32_t)sh.key[i]) - (double)top);
    __syncthreads();
    block_scan_d(sh.a, keep, sh.red);
    const double target = (double)d.u * sh.a[keep - 1];
    if (tid == 0) sh.m = keep - 1;
    __syncthreads();
    for (int i = tid; i < keep; i += nt)
        if (sh.a[i] > target && (i == 0 || sh.a[i - 1] <= target)) atomicMin(&sh.m, i);
    __syncthreads();
#undef KEY_X
    return (int)(sh.key[sh.m] >> 32);
}

/* Each row's token drawn from softmax(logits / T) with the uniform u: the first position whose
 * running sum of e^(x/T - max) passes u times the total (the host sampler's definition, up to
 * rounding); T <= 0 gives the argmax (first position of the largest, as ft_argmax). One block
 * of 1024 threads a row; every pass reads the row coalesced: the maximum over the whole block,
 * then each warp's contiguous segment summed by its lanes, the segment totals scanned, and the
 * warp whose segment holds the target walks it 32 positions at a time (a warp scan each).
 * draws: [rows] (temperature, u, and a filter: draw_filtered); NULL: every row's argmax
 * (ft_cuda_argmax). masks: [rows, (V + 31) / 32] allow bitmasks, read for the rows drawn
 * masked (a forbidden token is -inf before the temperature and the filters, as the host
 * sampler masks first); NULL: no row masked. */
__global__ void __launch_bounds__(DRAW_THREADS) sample_draw_kernel(const float *logits, int V, const struct ft_draw *draws,
                                   const uint32_t *masks, int32_t *out, int cap) {
    pdl_enter();
    __shared__ struct draw_shared sh;
    __shared__ float s_val[DRAW_THREADS / WARP];
    __shared__ int s_idx[DRAW_THREADS / WARP];
    __shared__ int s_found;
    const float *l = logits + (size_t)blockIdx.x * V;
    struct ft_draw d = draws ? draws[blockIdx.x] : ft_draw{0.0f, 0.0f, 1.0f, 0.0f, 0, 0};
    const uint32_t *mk = masks && d.masked ? masks + (size_t)blockIdx.x * ((V + 31) / 32) : NULL;
    const float T = d.temperature, u = d.u;
    const int tid = threadIdx.x, lane = tid % WARP, w = tid / WARP, nw = blockDim.x / WARP;
    /* the largest x / T and its first position (NaN never; -inf can win, as ft_argmax), and
     * how many tokens are above -inf */
    float best = -INFINITY;
    int bi = 0x7fffffff, n_fin = 0;
    for (int i = tid; i < V; i += blockDim.x) {
        const float v = !draw_allowed(mk, i) ? -INFINITY : T > 0 ? l[i] / T : l[i];
        if (v > best || (bi == 0x7fffffff && v == best)) best = v, bi = i;
        n_fin += v > -INFINITY;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ob > best || (ob == best && oi < bi)) best = ob, bi = oi;
    }
    if (lane == 0) s_val[w] = best, s_idx[w] = bi;
    if (tid == 0) s_found = 0x7fffffff;
    __syncthreads();
    best = s_val[0], bi = s_idx[0];
    for (int i = 1; i < nw; i++)
        if (s_val[i] > best || (s_val[i] == best && s_idx[i] < bi)) best = s_val[i], bi = s_idx[i];
    const float mx = best;
    if (!(T > 0) || bi == 0x7fffffff) { /* greedy (or every value NaN: 0, as ft_argmax) */
        if (tid == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
        return;
    }
    /* a masked row with at most k tokens above -inf: the host's top-k keeps them all */
    if (mk && d.top_k > 0 && d.top_k < V && block_sum<double>((double)n_fin) <= (double)d.top_k) d.top_k = 0;
    if ((d.top_k > 0 && d.top_k < V) || d.top_p < 1.0f || d.min_p > 0.0f) {
        const int id = draw_filtered(l, V, T, mx, d, mk, cap, sh);
        if (tid == 0) out[blockIdx.x] = id;
        return;
    }
    /* each warp's segment: its mass and its last position with any */
    const int S = (V + nw - 1) / nw, s0 = w * S, s1 = s0 + S < V ? s0 + S : V;
    float sum = 0.0f;
    int last = -1;
    for (int i = s0 + lane; i < s1; i += WARP) {
        const float v = draw_allowed(mk, i) ? l[i] / T : -INFINITY, e = v == -INFINITY ? 0.0f : __expf(v - mx);
        if (e > 0.0f) sum += e, last = i;
    }
    sum = warp_sum(sum);
    for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    __syncthreads(); /* s_val and s_idx are reused */
    if (lane == 0) s_val[w] = sum, s_idx[w] = last;
    __syncthreads();
    if (w == 0) { /* the segments' inclusive prefix sums */
        const float t = warp_scan(lane < nw ? s_val[lane] : 0.0f, lane);
        if (lane < nw) s_val[lane] = t;
    }
    __syncthreads();
    const float incl = s_val[w], excl = w ? s_val[w - 1] : 0.0f, target = u * s_val[nw - 1];
    if (excl < incl && excl <= target && target < incl) { /* this warp's segment holds it */
        float acc = excl;
        int pick = -1;
        for (int r = s0; r < s1 && pick < 0; r += WARP) {
            const int i = r + lane;
            float e = 0.0f;
            if (i < s1) {
                const float v = draw_allowed(mk, i) ? l[i] / T : -INFINITY;
                e = v == -INFINITY ? 0.0f : __expf(v - mx);
            }
            const float c = warp_scan(e, lane); /* the 32 weights' running sums */
            const unsigned hit = __ballot_sync(0xffffffffu, e > 0.0f && acc + c > target);
            if (hit) pick = r + __ffs(hit) - 1;
            acc += __shfl_sync(0xffffffffu, c, WARP - 1);
        }
        if (lane == 0) atomicMin(&s_found, pick >= 0 ? pick : s_idx[w]); /* rounding: its last */
    }
    __syncthreads();
    if (tid == 0) {
        int lm = -1; /* rounding can leave the target past the total: the last with any mass */
        for (int i = 0; i < nw; i++) lm = max(lm, s_idx[i]);
        out[blockIdx.x] = s_found != 0x7fffffff ? s_found : lm >= 0 ? lm : bi;
    }
}

extern "C" void ft_cuda_sample_draw(const float *logits, int rows, int V, const struct ft_draw *draws,
                                    const uint32_t *masks, int32_t *out, cudaStream_t s) {
    launch(sample_draw_kernel, rows, DRAW_THREADS, 0, s, logits, V, draws, masks, out, g_draw_cap);
}

extern "C" void ft_cuda_argmax(const float *logits, int rows, int V, int32_t *out, cudaStream_t s) {
    launch(sample_draw_kernel, rows, DRAW_THREADS, 0, s, logits, V, (const struct ft_draw *)NULL,
           (const uint32_t *)NULL, out, g_draw_cap);
}

__global__ void gather_bf16_kernel(uint16_t *y, const uint16_t *x, const int32_t *src, int H) {
    pdl_enter();
    int r = blockIdx.x;
    for (int h = threadIdx.x; h < H; h += blockDim.x) y[(size_t)r * H + h] = x[(size_t)src[r] * H + h];
}

extern "C" void ft_cuda_gather_bf16(uint16_t *y, const uint16_t *x, const int32_t *src, int rows,
                                    int H, cudaStream_t s) {
    if (rows > 0) launch(gather_bf16_kernel, rows, 256, 0, s, y, x, src, H);
}

__global__ void gather_f32_kernel(float *y, const float *x, const float *x2, const int32_t *src, int H) {
    pdl_enter();
    int r = blockIdx.x;
    for (int h = threadIdx.x; h < H; h += blockDim.x)
        y[(size_t)r * H + h] = x[(size_t)src[r] * H + h] + (x2 ? x2[(size_t)src[r] * H + h] : 0.0f);
}

extern "C" void ft_cuda_gather_f32(float *y, const float *x, const float *x2, const int32_t *src,
                                   int rows, int H, cudaStream_t s) {
    if (rows > 0) launch(gather_f32_kernel, rows, 256, 0, s, y, x, x2, src, H);
}

extern "C" double ft_cuda_d2d_gbps(size_t bytes, int reps) {
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
        cudaFree(a);
        cudaGetLastError();
        return 0.0;
    }
    cudaMemset(a, 1, bytes);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int r = 0; r < reps + 1; r++) {
        cudaEventRecord(e0);
        cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r > 0 && ms < best) best = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)bytes / (best * 1e-3) / 1e9;
}
