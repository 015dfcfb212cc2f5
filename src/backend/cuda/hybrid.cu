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

/* --- the chunked forms for prefill-sized steps ---
 * Segments are cut into tiles from their first token (GDN_CONV_TILE tokens for the conv,
 * GDN_BT for the rule; a segment's last tile may be shorter, a segment of 0 tokens has none),
 * numbered in segment order. Cut into tiles of n tokens, a step of T tokens in n_segs segments
 * has at most min(T, cdiv(T, n) + n_segs) of them (gdn_tiles); the kernels launch that many
 * blocks and the ones past the last tile return. */
#define GDN_CONV_TILE 16
#define GDN_BT 64
#define GDN_THREADS 256

/* Tile j of tiles of n tokens: its segment, first token and length; false past the last tile.
 * A scan over the segments (a step holds few). */
__device__ bool gdn_tile(const struct ft_cuda_gdn *g, int n_segs, int j, int n, int *seg, int *t0,
                         int *len) {
    for (int s = 0; s < n_segs; s++) {
        const int a = g->seg_t0[s], b = g->seg_t0[s + 1], nt = (b - a + n - 1) / n;
        if (j < nt) {
            *seg = s, *t0 = a + j * n, *len = min(n, b - *t0);
            return true;
        }
        j -= nt;
    }
    return false;
}

static unsigned gdn_tiles(int T, int n, int n_segs) {
    const size_t t = cdiv(T, n) + (size_t)n_segs;
    return (unsigned)(t < (size_t)T ? t : (size_t)T);
}

/* The conv in two passes so that tiles of one segment can run at once while the conv is done
 * in place: gdn_conv_stage_kernel copies, for each (conv tile, channel), the K-1 inputs before
 * the tile's first token (from the sequence's window, then raw inputs of the segment) into
 * hist [tile][Cc][K-1]; gdn_conv_tile_kernel then runs each (tile, channel) by one thread like
 * gdn_conv_kernel from that history, and the thread of a segment's last tile writes the new
 * window (every read of the old one was in the first pass). Thread per (channel, tile):
 * blockIdx.x * 128 + threadIdx.x the channel, blockIdx.y the tile. */
__global__ void gdn_conv_stage_kernel(const float *x, int ldx, struct ft_cuda_gdn g, int n_segs,
                                      float *hist) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y, K = g.K;
    const int Cc = 2 * g.Hk * g.dk + g.Hv * g.dv;
    int seg, t0, len;
    if (c >= Cc || !gdn_tile(&g, n_segs, j, GDN_CONV_TILE, &seg, &t0, &len)) return;
    const int s0 = g.seg_t0[seg], p = t0 - s0; /* the tile's first token within its segment */
    const float *win = gdn_layer_state(&g, seg) + (size_t)c * (K - 1);
    float *h = hist + ((size_t)j * Cc + c) * (K - 1);
    /* the inputs before token p of the segment: e-th of (window, then the segment's raw inputs) */
    for (int q = 0; q < K - 1; q++) {
        const int e = p + q;
        h[q] = e < K - 1 ? win[e] : x[(size_t)(s0 + e - (K - 1)) * ldx + c];
    }
}

__global__ void gdn_conv_tile_kernel(float *x, int ldx, struct ft_cuda_gdn g, int n_segs,
                                     const float *w, const float *hist) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y, K = g.K;
    const int Cc = 2 * g.Hk * g.dk + g.Hv * g.dv;
    int seg, t0, len;
    if (c >= Cc || !gdn_tile(&g, n_segs, j, GDN_CONV_TILE, &seg, &t0, &len)) return;
    const float *wc = w + (size_t)c * K, *h = hist + ((size_t)j * Cc + c) * (K - 1);
    float hs[FT_CUDA_GDN_MAX_K];
    for (int q = 0; q < K - 1; q++) hs[q] = h[q];
    float raw[GDN_CONV_TILE]; /* the tile's inputs loaded first (the loads overlap) */
#pragma unroll
    for (int i = 0; i < GDN_CONV_TILE; i++) raw[i] = i < len ? x[(size_t)(t0 + i) * ldx + c] : 0.0f;
#pragma unroll
    for (int i = 0; i < GDN_CONV_TILE; i++) {
        if (i >= len) break;
        float y = wc[K - 1] * raw[i];
        for (int q = 0; q < K - 1; q++) y += wc[q] * hs[q];
        for (int q = 0; q + 1 < K - 1; q++) hs[q] = hs[q + 1];
        if (K > 1) hs[K - 2] = raw[i];
        x[(size_t)(t0 + i) * ldx + c] = y / (1.0f + __expf(-y));
    }
    if (t0 + len == g.seg_t0[seg + 1]) {
        float *win = gdn_layer_state(&g, seg) + (size_t)c * (K - 1);
        for (int q = 0; q < K - 1; q++) win[q] = hs[q];
    }
}

/* The chunked gated delta rule. Within a chunk of L <= GDN_BT tokens of one segment and value
 * head, with S0 the state before it, g_i = the cumulative sum of the log-decays (token i
 * included) and k, q normalised as in the recurrent form: the recurrence unrolls to
 *   d_i = beta_i (v_i - e^g_i k_i.S0 - sum_{j<i} e^(g_i-g_j) (k_i.k_j) d_j)   (d_i: the update row)
 * so (I + A) D = diag(beta) V - diag(beta e^g) K S0 with A_ij = beta_i e^(g_i-g_j) k_i.k_j
 * (j < i); with U = (I+A)^-1 diag(beta) V and W = (I+A)^-1 diag(beta e^g) K, D = U - W S0, and
 *   o_i = e^g_i q_i.S0 + sum_{j<=i} e^(g_i-g_j) (q_i.k_j) d_j,
 *   S_L = e^g_L S0 + sum_j e^(g_L-g_j) k_j d_j^T.
 * gdn_chunk_prep_kernel computes what does not depend on S0 for every chunk at once;
 * gdn_chunk_state_kernel runs the chunks of a segment in order. The exponents are differences
 * g_i - g_j with i >= j (never positive). Scratch per token t and value head h (t, h rows):
 * W [T][Hv][dk], P [T][Hv][GDN_BT] (P_ij = e^(g_i-g_j) q_i.k_j for j <= i, else 0), and three
 * scalars sc [T][Hv][3]: rq_i e^g_i, rk_i e^(g_L-g_i) (the factors the raw q, k rows take in
 * the state pass) and e^g_i; U replaces v in x. */

/* One block of GDN_THREADS per (chunk tile blockIdx.x, value head blockIdx.y). Shared: the
 * chunk's k and q rows (stride dk+1 so that column reads of different rows hit different
 * banks), A and per-row scalars; then W is solved in place of q and U in place of k (83 KB at
 * dk = dv = 128: two blocks an SM). The forward substitution runs one thread per column of W
 * or U (column c of row i needs only column c of rows j < i). */
__global__ void __launch_bounds__(GDN_THREADS)
    gdn_chunk_prep_kernel(float *x, int ldx, int b_off, int a_off, struct ft_cuda_gdn g, int n_segs,
                          const float *A, const float *dt_bias, float *Wg, float *Pg, float *sc) {
    pdl_enter();
    extern __shared__ float sm[];
    const int j0 = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    int seg, c0, L;
    if (!gdn_tile(&g, n_segs, j0, GDN_BT, &seg, &c0, &L)) return; /* the whole block */
    const int dk = g.dk, dv = g.dv, Dk = g.Hk * dk, Hv = g.Hv, kh = h / (Hv / g.Hk), lk = dk + 1;
    const int la = GDN_BT + 1;
    float *Ks = sm, *Qs = Ks + GDN_BT * max(lk, dv), *As = Qs + GDN_BT * lk;
    float *rq = As + GDN_BT * la, *rk = rq + GDN_BT, *be = rk + GDN_BT, *gc = be + GDN_BT;
    for (int e = tid; e < L * dk; e += nt) {
        const int i = e / dk, a = e % dk;
        const float *row = x + (size_t)(c0 + i) * ldx + (size_t)kh * dk + a;
        Qs[i * lk + a] = row[0], Ks[i * lk + a] = row[Dk];
    }
    __syncthreads();
    const int wi = tid / WARP, lane = tid % WARP, nw = nt / WARP;
    const float qscale = rsqrtf((float)dk), Ah = A[h], dth = dt_bias[h];
    for (int i = wi; i < L; i += nw) { /* a warp per row: the norms, beta and the log-decay */
        float sq = 0.0f, sk = 0.0f;
        for (int a = lane; a < dk; a += WARP) sq += Qs[i * lk + a] * Qs[i * lk + a], sk += Ks[i * lk + a] * Ks[i * lk + a];
        sq = warp_sum(sq), sk = warp_sum(sk);
        if (lane == 0) {
            const float *row = x + (size_t)(c0 + i) * ldx;
            const float xa = row[a_off + h] + dth, sp = xa > 20.0f ? xa : log1pf(expf(xa));
            rq[i] = qscale / sqrtf(sq + 1e-6f), rk[i] = 1.0f / sqrtf(sk + 1e-6f);
            be[i] = 1.0f / (1.0f + expf(-row[b_off + h])), gc[i] = Ah * sp;
        }
    }
    __syncthreads();
    if (tid == 0)
        for (int i = 1; i < L; i++) gc[i] += gc[i - 1];
    for (int e = tid; e < L * dk; e += nt) {
        const int i = e / dk, a = e % dk;
        Qs[i * lk + a] *= rq[i], Ks[i * lk + a] *= rk[i];
    }
    __syncthreads();
    { /* A and P: a 4 x 4 tile of them a thread (rows 4 ti .., columns 4 tj ..); tiles above
       * the diagonal are zeros. Rows past L are garbage, never stored. */
        static_assert(GDN_BT == 64 && GDN_THREADS == 256, "16 x 16 tiles of 4 x 4");
        const int ti = tid / 16, tj = tid % 16;
        float dq[4][4], dkk[4][4];
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int w = 0; w < 4; w++) dq[u][w] = 0.0f, dkk[u][w] = 0.0f;
        if (tj <= ti && 4 * ti < L) {
            const float *qi = Qs + 4 * ti * lk, *ki = Ks + 4 * ti * lk, *kj = Ks + 4 * tj * lk;
            for (int a = 0; a < dk; a++) {
                float q_[4], ki_[4], kj_[4];
#pragma unroll
                for (int u = 0; u < 4; u++) q_[u] = qi[u * lk + a], ki_[u] = ki[u * lk + a], kj_[u] = kj[u * lk + a];
#pragma unroll
                for (int u = 0; u < 4; u++)
#pragma unroll
                    for (int w = 0; w < 4; w++) dq[u][w] += q_[u] * kj_[w], dkk[u][w] += ki_[u] * kj_[w];
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = 4 * ti + u;
            if (i >= L) break;
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const int jj = 4 * tj + w;
                const float r = jj <= i ? expf(gc[i] - gc[jj]) : 0.0f;
                As[i * la + jj] = jj < i ? be[i] * r * dkk[u][w] : 0.0f;
                Pg[((size_t)(c0 + i) * Hv + h) * GDN_BT + jj] = jj <= i ? r * dq[u][w] : 0.0f;
            }
        }
    }
    __syncthreads(); /* q and k are no longer read: W takes q's place (row stride dk), U k's (dv) */
    float *Ws = Qs, *Us = Ks; /* (W's right-hand sides take k from x) */
    for (int col = tid; col < dk + dv; col += nt) {
        if (col < dk) {
            for (int i = 0; i < L; i++) {
                const float kv = x[(size_t)(c0 + i) * ldx + Dk + (size_t)kh * dk + col] * rk[i];
                float acc = be[i] * expf(gc[i]) * kv, acc2 = 0.0f; /* two chains */
                int jj = 0;
                for (; jj + 1 < i; jj += 2)
                    acc -= As[i * la + jj] * Ws[jj * dk + col], acc2 -= As[i * la + jj + 1] * Ws[(jj + 1) * dk + col];
                if (jj < i) acc -= As[i * la + jj] * Ws[jj * dk + col];
                acc += acc2;
                Ws[i * dk + col] = acc;
                Wg[((size_t)(c0 + i) * Hv + h) * dk + col] = acc;
            }
        } else {
            const int c = col - dk;
            for (int i = 0; i < L; i++) {
                float *v = x + (size_t)(c0 + i) * ldx + 2 * (size_t)Dk + (size_t)h * dv + c;
                float acc = be[i] * *v, acc2 = 0.0f;
                int jj = 0;
                for (; jj + 1 < i; jj += 2)
                    acc -= As[i * la + jj] * Us[jj * dv + c], acc2 -= As[i * la + jj + 1] * Us[(jj + 1) * dv + c];
                if (jj < i) acc -= As[i * la + jj] * Us[jj * dv + c];
                acc += acc2;
                Us[i * dv + c] = acc;
                *v = acc;
            }
        }
    }
    for (int i = tid; i < L; i += nt) {
        float *o = sc + ((size_t)(c0 + i) * Hv + h) * 3;
        o[0] = rq[i] * expf(gc[i]), o[1] = rk[i] * expf(gc[L - 1] - gc[i]), o[2] = expf(gc[i]);
    }
}

static size_t gdn_prep_smem(int dk, int dv) {
    return ((size_t)GDN_BT * (dk + 1 > dv ? dk + 1 : dv) + (size_t)GDN_BT * (dk + 1) +
            (size_t)GDN_BT * (GDN_BT + 1) + 4 * GDN_BT) * sizeof(float);
}

/* One block of GDN_THREADS (8 warps) per (value head blockIdx.x, 32 columns of S blockIdx.y,
 * segment blockIdx.z): the columns of S are independent, so a block keeps S [dk][32] in shared
 * memory and walks the segment's chunks in order: V' = U - W S, O = Q' S + P V',
 * S = e^g_L S + K'^T V' (Q', K': the raw rows times sc's factors), each chunk's rows staged in
 * Xs [GDN_BT][dk] one matrix at a time. Lane = column; warp w holds rows w, w + 8, ... of V'
 * and O, and rows w ra .. w ra + ra - 1 of S (ra = dk / 8 rounded up), so that the lanes of a
 * warp read the same Xs / P entries (broadcasts; four at a time as float4 where dk allows). */
#define GDN_NW (GDN_THREADS / WARP)                 /* warps: 8 */
#define GDN_RW (GDN_BT / GDN_NW)                    /* rows of V' / O a thread: 8 */
#define GDN_SA (FT_CUDA_GDN_MAX_DK / GDN_NW)        /* rows of S a thread, at most: 16 */
__global__ void __launch_bounds__(GDN_THREADS)
    gdn_chunk_state_kernel(float *out, const float *x, int ldx, struct ft_cuda_gdn g,
                           const float *Wg, const float *Pg, const float *sc) {
    pdl_enter();
    extern __shared__ float sm[];
    const int h = blockIdx.x, seg = blockIdx.z, tid = threadIdx.x, nt = GDN_THREADS;
    const int lane = tid % WARP, wi = tid / WARP;
    const int dk = g.dk, dv = g.dv, Dk = g.Hk * dk, Dv = g.Hv * dv, Hv = g.Hv, Cc = 2 * Dk + Dv;
    const int kh = h / (Hv / g.Hk), col = blockIdx.y * WARP + lane, ra = (dk + GDN_NW - 1) / GDN_NW;
    const bool on = col < dv, v4 = dk % 4 == 0, v4s = dk % (4 * GDN_NW) == 0;
    float *Sg = gdn_layer_state(&g, seg) + (size_t)(g.K - 1) * Cc + (size_t)h * dk * dv;
    float *S = sm, *Xs = S + dk * WARP, *Vp = Xs + GDN_BT * dk, *Ps = Vp + GDN_BT * WARP;
    for (int a = wi; a < dk; a += GDN_NW) S[a * WARP + lane] = on ? Sg[(size_t)a * dv + col] : 0.0f;
    const int s0 = g.seg_t0[seg], s1 = g.seg_t0[seg + 1];
    float acc[GDN_RW];
    for (int c0 = s0; c0 < s1; c0 += GDN_BT) { /* uniform over the block */
        const int L = min(GDN_BT, s1 - c0);
        __syncthreads(); /* S written; the last chunk's reads of Xs, Vp, Ps over */
        for (int e = tid; e < GDN_BT * dk; e += nt) {
            const int i = e / dk, a = e % dk;
            Xs[e] = i < L ? Wg[((size_t)(c0 + i) * Hv + h) * dk + a] : 0.0f;
        }
        __syncthreads();
        /* V' = U - W S (rows past L: 0, as Xs's) */
#pragma unroll
        for (int r = 0; r < GDN_RW; r++) {
            const int i = wi + GDN_NW * r;
            acc[r] = on && i < L ? x[(size_t)(c0 + i) * ldx + 2 * (size_t)Dk + (size_t)h * dv + col] : 0.0f;
        }
        if (v4) {
            for (int a = 0; a < dk; a += 4) {
                const float s_0 = S[a * WARP + lane], s_1 = S[(a + 1) * WARP + lane];
                const float s_2 = S[(a + 2) * WARP + lane], s_3 = S[(a + 3) * WARP + lane];
#pragma unroll
                for (int r = 0; r < GDN_RW; r++) {
                    const float4 w4 = *(const float4 *)&Xs[(wi + GDN_NW * r) * dk + a];
                    acc[r] -= w4.x * s_0 + w4.y * s_1 + w4.z * s_2 + w4.w * s_3;
                }
            }
        } else {
            for (int a = 0; a < dk; a++) {
                const float s = S[a * WARP + lane];
#pragma unroll
                for (int r = 0; r < GDN_RW; r++) acc[r] -= Xs[(wi + GDN_NW * r) * dk + a] * s;
            }
        }
#pragma unroll
        for (int r = 0; r < GDN_RW; r++) Vp[(wi + GDN_NW * r) * WARP + lane] = acc[r];
        __syncthreads(); /* V' complete, Xs free */
        for (int e = tid; e < GDN_BT * dk; e += nt) {
            const int i = e / dk, a = e % dk;
            const size_t t = (size_t)(c0 + i);
            Xs[e] = i < L ? x[t * ldx + (size_t)kh * dk + a] * sc[(t * Hv + h) * 3] : 0.0f;
        }
        for (int e = tid; e < GDN_BT * GDN_BT; e += nt) {
            const int i = e / GDN_BT;
            Ps[e] = i < L ? Pg[((size_t)(c0 + i) * Hv + h) * GDN_BT + e % GDN_BT] : 0.0f;
        }
        __syncthreads();
        /* O = Q' S + P V' (P is 0 past the diagonal and V' past row L, so 4 columns at a time) */
#pragma unroll
        for (int r = 0; r < GDN_RW; r++) acc[r] = 0.0f;
        if (v4) {
            for (int a = 0; a < dk; a += 4) {
                const float s_0 = S[a * WARP + lane], s_1 = S[(a + 1) * WARP + lane];
                const float s_2 = S[(a + 2) * WARP + lane], s_3 = S[(a + 3) * WARP + lane];
#pragma unroll
                for (int r = 0; r < GDN_RW; r++) {
                    const float4 q4 = *(const float4 *)&Xs[(wi + GDN_NW * r) * dk + a];
                    acc[r] += q4.x * s_0 + q4.y * s_1 + q4.z * s_2 + q4.w * s_3;
                }
            }
        } else {
            for (int a = 0; a < dk; a++) {
                const float s = S[a * WARP + lane];
#pragma unroll
                for (int r = 0; r < GDN_RW; r++) acc[r] += Xs[(wi + GDN_NW * r) * dk + a] * s;
            }
        }
        for (int jj = 0; jj < L; jj += 4) {
            const float v_0 = Vp[jj * WARP + lane], v_1 = Vp[(jj + 1) * WARP + lane];
            const float v_2 = Vp[(jj + 2) * WARP + lane], v_3 = Vp[(jj + 3) * WARP + lane];
#pragma unroll
            for (int r = 0; r < GDN_RW; r++) {
                const float4 p4 = *(const float4 *)&Ps[(wi + GDN_NW * r) * GDN_BT + jj];
                acc[r] += p4.x * v_0 + p4.y * v_1 + p4.z * v_2 + p4.w * v_3;
            }
        }
#pragma unroll
        for (int r = 0; r < GDN_RW; r++) {
            const int i = wi + GDN_NW * r;
            if (on && i < L) out[(size_t)(c0 + i) * Dv + (size_t)h * dv + col] = acc[r];
        }
        __syncthreads(); /* Xs free */
        for (int e = tid; e < GDN_BT * dk; e += nt) {
            const int i = e / dk, a = e % dk;
            const size_t t = (size_t)(c0 + i);
            Xs[e] = i < L ? x[t * ldx + (size_t)Dk + (size_t)kh * dk + a] * sc[(t * Hv + h) * 3 + 1] : 0.0f;
        }
        __syncthreads();
        /* S = e^g_L S + K'^T V', the thread's rows wi ra + r */
        const float dec = sc[((size_t)(c0 + L - 1) * Hv + h) * 3 + 2];
        float sa[GDN_SA];
#pragma unroll
        for (int r = 0; r < GDN_SA; r++) {
            const int a = wi * ra + r;
            sa[r] = r < ra && a < dk ? dec * S[a * WARP + lane] : 0.0f;
        }
        if (v4s) {
            for (int jj = 0; jj < L; jj++) {
                const float vj = Vp[jj * WARP + lane];
                const float *kr = Xs + jj * dk + wi * ra;
#pragma unroll
                for (int r = 0; r < GDN_SA; r += 4)
                    if (r < ra) {
                        const float4 k4 = *(const float4 *)&kr[r];
                        sa[r] += k4.x * vj, sa[r + 1] += k4.y * vj, sa[r + 2] += k4.z * vj, sa[r + 3] += k4.w * vj;
                    }
            }
        } else {
            for (int jj = 0; jj < L; jj++) {
                const float vj = Vp[jj * WARP + lane];
#pragma unroll
                for (int r = 0; r < GDN_SA; r++)
                    if (r < ra && wi * ra + r < dk) sa[r] += Xs[jj * dk + wi * ra + r] * vj;
            }
        }
#pragma unroll
        for (int r = 0; r < GDN_SA; r++)
            if (r < ra && wi * ra + r < dk) S[(wi * ra + r) * WARP + lane] = sa[r];
    }
    __syncthreads();
    for (int a = wi; a < dk; a += GDN_NW)
        if (on) Sg[(size_t)a * dv + col] = S[a * WARP + lane];
}

static size_t gdn_state_smem(int dk) {
    return ((size_t)dk * WARP + (size_t)GDN_BT * dk + (size_t)GDN_BT * WARP + (size_t)GDN_BT * GDN_BT) *
           sizeof(float);
}

static size_t smem_optin(void) {
    static int v = -1;
    if (v < 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
            v = 48 * 1024, cudaGetLastError();
    }
    return (size_t)v;
}

extern "C" size_t ft_cuda_gdn_chunk_scratch(int Hk, int Hv, int dk, int dv, int K, int T, int n_segs) {
    const size_t Cc = 2 * (size_t)Hk * dk + (size_t)Hv * dv;
    const size_t conv = (size_t)gdn_tiles(T, GDN_CONV_TILE, n_segs) * Cc * (K > 1 ? K - 1 : 1);
    const size_t rule = (size_t)T * Hv * (dk + GDN_BT + 3);
    return conv > rule ? conv : rule;
}

extern "C" void ft_cuda_gdn_conv_chunked(float *x, int ldx, const struct ft_cuda_gdn *g,
                                         const float *w, int T, int n_segs, float *scratch,
                                         cudaStream_t s) {
    const int Cc = 2 * g->Hk * g->dk + g->Hv * g->dv;
    const unsigned nt = gdn_tiles(T, GDN_CONV_TILE, n_segs);
    if (T <= 0 || n_segs <= 0) return;
    if (g->K > 1) launch(gdn_conv_stage_kernel, dim3(cdiv(Cc, 128), nt), 128, 0, s, x, ldx, *g, n_segs, scratch);
    launch(gdn_conv_tile_kernel, dim3(cdiv(Cc, 128), nt), 128, 0, s, x, ldx, *g, n_segs, w, scratch);
}

extern "C" void ft_cuda_gdn_rule_chunked(float *out, float *x, int ldx, int b_off, int a_off,
                                         const struct ft_cuda_gdn *g, const float *A,
                                         const float *dt_bias, int T, int n_segs, float *scratch,
                                         cudaStream_t s) {
    const size_t prep = gdn_prep_smem(g->dk, g->dv), state = gdn_state_smem(g->dk);
    if (T <= 0 || n_segs <= 0) return;
    if (prep > smem_optin() || state > smem_optin()) { /* very wide value heads: the recurrent form */
        ft_cuda_gdn_rule(out, x, ldx, b_off, a_off, g, A, dt_bias, n_segs, s);
        return;
    }
    static size_t set_prep, set_state; /* the opt-in sizes granted so far */
    if (prep > set_prep && cudaFuncSetAttribute(gdn_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)prep) == cudaSuccess)
        set_prep = prep;
    if (state > set_state && cudaFuncSetAttribute(gdn_chunk_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  (int)state) == cudaSuccess)
        set_state = state;
    float *Wg = scratch, *Pg = Wg + (size_t)T * g->Hv * g->dk, *sc = Pg + (size_t)T * g->Hv * GDN_BT;
    launch(gdn_chunk_prep_kernel, dim3(gdn_tiles(T, GDN_BT, n_segs), g->Hv), GDN_THREADS, prep, s, x,
           ldx, b_off, a_off, *g, n_segs, A, dt_bias, Wg, Pg, sc);
    launch(gdn_chunk_state_kernel, dim3(g->Hv, cdiv(g->dv, WARP), n_segs), GDN_THREADS, state, s, out,
           (const float *)x, ldx, *g, (const float *)Wg, (const float *)Pg, (const float *)sc);
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
