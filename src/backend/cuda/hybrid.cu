/* hybrid.cu — kernels of the hybrid and sigmoid-routed architectures (cuda_ops.h): the Gated
 * DeltaNet layers of Qwen3.5 / Qwen3-Next (causal conv with its rolling window, the gated delta
 * rule, the gated RMSNorm), the output gate of their full-attention layers, and the sigmoid
 * router with group-limited top-k (DeepSeek-V3, GLM-4.5, MiniMax-M2). Their CPU twins live in
 * engine/forward.c (gdn_conv_task, gdn_rule_task, route_sigmoid); the fixtures through the
 * CUDA backend compare the two (test_gpu_model). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels.cuh"

/* The state of one DeltaNet layer of a sequence: conv inputs [Cc][K-1], then S [Hv][dk][dv]. */
__device__ __forceinline__ float *gdn_layer_state(const struct ft_cuda_gdn *g, int seg) {
    return g->state + (size_t)g->seg_slot[seg] * g->slot_floats + g->layer_off;
}

/* One thread per (segment, channel): the segment's tokens in order, each after the last K-1
 * inputs (the window kept in the state), then SiLU, in place. */
__global__ void gdn_conv_kernel(float *x, int ldx, struct ft_cuda_gdn g, const float *w) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, seg = blockIdx.y, K = g.K;
    const int Cc = 2 * g.Hk * g.dk + g.Hv * g.dv;
    if (c >= Cc) return;
    float *win = gdn_layer_state(&g, seg) + (size_t)c * (K - 1);
    const float *wc = w + (size_t)c * K;
    float hist[FT_CUDA_GDN_MAX_K];
    for (int q = 0; q < K - 1; q++) hist[q] = win[q];
    for (int t = g.seg_t0[seg]; t < g.seg_t0[seg + 1]; t++) {
        float *u = x + (size_t)t * ldx + c, raw = *u, y = wc[K - 1] * raw;
        for (int q = 0; q < K - 1; q++) y += wc[q] * hist[q];
        for (int q = 0; q + 1 < K - 1; q++) hist[q] = hist[q + 1];
        if (K > 1) hist[K - 2] = raw;
        *u = y / (1.0f + __expf(-y));
    }
    for (int q = 0; q < K - 1; q++) win[q] = hist[q];
}

extern "C" void ft_cuda_gdn_conv(float *x, int ldx, const struct ft_cuda_gdn *g, const float *w,
                                 int n_segs, cudaStream_t s) {
    const int Cc = 2 * g->Hk * g->dk + g->Hv * g->dv;
    launch(gdn_conv_kernel, dim3(cdiv(Cc, 128), n_segs), 128, 0, s, x, ldx, *g, w);
}

/* The gated delta rule, recurrent form: one warp per (value head, 32 columns of S, segment),
 * each lane holding one column of the head's S [dk][dv] in registers through the segment's
 * tokens (columns are independent given k, q, beta and the decay). Per token: q, k of the
 * head's key head L2-normalised (q also by 1/sqrt(dk)), S *= decay, pred = k . S,
 * S += k (beta (v - pred)), o = q . S. */
__global__ void __launch_bounds__(WARP) gdn_rule_kernel(float *out, const float *x, int ldx,
                                                        int b_off, int a_off, struct ft_cuda_gdn g,
                                                        const float *A, const float *dt_bias) {
    pdl_enter();
    const int h = blockIdx.x, lane = threadIdx.x, c = blockIdx.y * WARP + lane, seg = blockIdx.z;
    const int dk = g.dk, dv = g.dv, Dk = g.Hk * dk, Dv = g.Hv * dv, Cc = 2 * Dk + Dv;
    const int kh = h / (g.Hv / g.Hk);
    const bool on = c < dv;
    float *S = gdn_layer_state(&g, seg) + (size_t)(g.K - 1) * Cc + (size_t)h * dk * dv;
    float col[FT_CUDA_GDN_MAX_DK];
#pragma unroll
    for (int a = 0; a < FT_CUDA_GDN_MAX_DK; a++) col[a] = on && a < dk ? S[(size_t)a * dv + c] : 0.0f;
    __shared__ float qs[FT_CUDA_GDN_MAX_DK], ks[FT_CUDA_GDN_MAX_DK];
    const float qscale = rsqrtf((float)dk), Ah = A[h], dth = dt_bias[h];
    for (int t = g.seg_t0[seg]; t < g.seg_t0[seg + 1]; t++) {
        const float *row = x + (size_t)t * ldx;
        float sq = 0.0f, sk = 0.0f;
        for (int a = lane; a < dk; a += WARP) {
            const float qv = row[(size_t)kh * dk + a], kv = row[Dk + (size_t)kh * dk + a];
            qs[a] = qv, ks[a] = kv, sq += qv * qv, sk += kv * kv;
        }
        sq = warp_sum(sq), sk = warp_sum(sk);
        __syncwarp();
        const float rq = qscale / sqrtf(sq + 1e-6f), rk = 1.0f / sqrtf(sk + 1e-6f);
        const float beta = 1.0f / (1.0f + expf(-row[b_off + h]));
        const float xa = row[a_off + h] + dth, sp = xa > 20.0f ? xa : log1pf(expf(xa));
        const float decay = expf(Ah * sp);
        const float v = on ? row[2 * Dk + (size_t)h * dv + c] : 0.0f;
        float pred = 0.0f;
#pragma unroll
        for (int a = 0; a < FT_CUDA_GDN_MAX_DK; a++)
            if (a < dk) col[a] *= decay, pred += ks[a] * rk * col[a];
        const float d = beta * (v - pred);
        float o = 0.0f;
#pragma unroll
        for (int a = 0; a < FT_CUDA_GDN_MAX_DK; a++)
            if (a < dk) col[a] += ks[a] * rk * d, o += qs[a] * rq * col[a];
        if (on) out[(size_t)t * Dv + (size_t)h * dv + c] = o;
        __syncwarp(); /* qs / ks are rewritten by the next token */
    }
#pragma unroll
    for (int a = 0; a < FT_CUDA_GDN_MAX_DK; a++)
        if (on && a < dk) S[(size_t)a * dv + c] = col[a];
}

extern "C" void ft_cuda_gdn_rule(float *out, const float *x, int ldx, int b_off, int a_off,
                                 const struct ft_cuda_gdn *g, const float *A, const float *dt_bias,
                                 int n_segs, cudaStream_t s) {
    launch(gdn_rule_kernel, dim3(g->Hv, cdiv(g->dv, WARP), n_segs), WARP, 0, s, out, x, ldx, b_off,
           a_off, *g, A, dt_bias);
}

/* One warp per (token, value head): o = rmsnorm(o) * w * silu(z), in place. */
__global__ void gated_rmsnorm_kernel(float *o, const float *z, int ldz, const float *w, int rows,
                                     int Hv, int dv, float eps) {
    pdl_enter();
    const int r = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (r >= rows) return;
    const int t = r / Hv, h = r % Hv;
    float *oh = o + (size_t)t * Hv * dv + (size_t)h * dv;
    const float *zh = z + (size_t)t * ldz + (size_t)h * dv;
    float ss = 0.0f;
    for (int c = lane; c < dv; c += WARP) ss += oh[c] * oh[c];
    const float rn = rsqrtf(warp_sum(ss) / (float)dv + eps);
    for (int c = lane; c < dv; c += WARP) oh[c] = oh[c] * rn * w[c] * (zh[c] / (1.0f + __expf(-zh[c])));
}

extern "C" void ft_cuda_gated_rmsnorm(float *o, const float *z, int ldz, const float *w, int T,
                                      int Hv, int dv, float eps, cudaStream_t s) {
    launch(gated_rmsnorm_kernel, cdiv((size_t)T * Hv, 4), 4 * WARP, 0, s, o, z, ldz, w, T * Hv, Hv,
           dv, eps);
}

__global__ void mul_sigmoid_kernel(float *y, const float *gate, size_t n) {
    pdl_enter();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= 1.0f / (1.0f + __expf(-gate[i]));
}

extern "C" void ft_cuda_mul_sigmoid(float *y, const float *gate, size_t n, cudaStream_t s) {
    launch(mul_sigmoid_kernel, cdiv(n, 256), 256, 0, s, y, gate, n);
}

/* One warp per token; sel (scores plus the correction bias) and s in shared memory [2][E] per
 * warp. Group scores (the sum of a group's two best sel) by one lane per group; the topk_group
 * best groups kept (ties: lower group); then k rounds of the warp's argmax over the kept
 * experts (ties: lower id), as route_sigmoid on the CPU. */
__global__ void router_sigmoid_kernel(const float *logits, const float *bias, int T, int E, int k,
                                      int G, int topk_group, int norm, float scale, int32_t *ids,
                                      float *w) {
    pdl_enter();
    extern __shared__ float sm[];
    const int wi = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int t = blockIdx.x * (blockDim.x / WARP) + wi;
    float *sel = sm + (size_t)wi * 2 * E, *sc = sel + E;
    if (t >= T) return;
    const float *l = logits + (size_t)t * E;
    for (int e = lane; e < E; e += WARP) {
        const float s = 1.0f / (1.0f + expf(-l[e]));
        sc[e] = s, sel[e] = s + (bias ? bias[e] : 0.0f);
    }
    __syncwarp();
    if (G > 1) {
        const int gs = E / G;
        float gsc = -INFINITY;
        if (lane < G) {
            float a = -INFINITY, b = -INFINITY;
            for (int x = lane * gs; x < (lane + 1) * gs; x++) {
                if (sel[x] > a) b = a, a = sel[x];
                else if (sel[x] > b) b = sel[x];
            }
            gsc = a + (gs > 1 ? b : 0.0f);
        }
        unsigned keep = 0;
        for (int j = 0; j < topk_group; j++) { /* the best group not yet kept, by the warp */
            float best = lane < G && !(keep >> lane & 1) ? gsc : -INFINITY;
            int bi = lane < G && !(keep >> lane & 1) ? lane : 1 << 30;
            for (int o = 16; o > 0; o >>= 1) {
                const float ob = __shfl_xor_sync(0xffffffffu, best, o);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (ob > best || (ob == best && oi < bi)) best = ob, bi = oi;
            }
            if (bi < G) keep |= 1u << bi;
        }
        for (int e = lane; e < E; e += WARP)
            if (!(keep >> (e / gs) & 1)) sel[e] = -INFINITY;
        __syncwarp();
    }
    float sum = 0.0f;
    for (int r = 0; r < k; r++) {
        float best = -INFINITY;
        int bi = 1 << 30;
        for (int e = lane; e < E; e += WARP)
            if (sel[e] > -INFINITY && (sel[e] > best || bi == 1 << 30)) best = sel[e], bi = e;
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi != 1 << 30 && (bi == 1 << 30 || ob > best || (ob == best && oi < bi))) best = ob, bi = oi;
        }
        if (bi == 1 << 30) bi = 0; /* not reached: the kept groups hold at least k experts */
        const float s = sc[bi];
        __syncwarp();
        if (lane == bi % WARP) sel[bi] = -INFINITY;
        __syncwarp();
        if (lane == 0) ids[(size_t)t * k + r] = bi, w[(size_t)t * k + r] = s;
        sum += s;
    }
    if (lane == 0)
        for (int r = 0; r < k; r++) {
            float *wr = w + (size_t)t * k + r;
            *wr = (norm ? *wr / (sum + 1e-20f) : *wr) * scale;
        }
}

extern "C" void ft_cuda_router_sigmoid(const float *logits, const float *bias, int T, int E, int k,
                                       int n_group, int topk_group, int norm, float scale,
                                       int32_t *ids, float *w, cudaStream_t s) {
    launch(router_sigmoid_kernel, cdiv(T, 4), 4 * WARP, (size_t)4 * 2 * E * sizeof(float), s, logits,
           bias, T, E, k, n_group, topk_group, norm, scale, ids, w);
}
