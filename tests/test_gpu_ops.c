/* test_gpu_ops.c — every CUDA op against its CPU twin on random inputs of awkward shapes
 * (label gpu: runs on the GPU machine with `make test-gpu`). The measure is the normalised
 * mean squared error NMSE = sum (gpu - cpu)^2 / sum cpu^2, with a threshold per op: 1e-10 for
 * fp32 arithmetic (only summation order differs), 1e-8 for bf16-input GEMMs compared against
 * the CPU on the same bf16-rounded inputs. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ggml_dot.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/cuda_ops.h"
#include "core/threadpool.h"
#include "format/fp_formats.h"
#include "format/ggml_quant.h"
#include "ggml_fill.h"
#include "engine/forward.h"
#include "engine/sample.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "test.h"

static uint64_t g_rng = 12345;
static float frand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static float *rnd(size_t n) {
    float *p = malloc(n * 4);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}
static uint16_t *rnd_bf16(size_t n, float scale) {
    uint16_t *p = malloc(n * 2);
    for (size_t i = 0; i < n; i++) p[i] = ft_f32_to_bf16(frand() * scale);
    return p;
}
static void *up(const void *h, size_t bytes) {
    void *d = NULL;
    cudaMalloc(&d, bytes ? bytes : 4);
    if (h) cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    else cudaMemset(d, 0, bytes ? bytes : 4);
    return d;
}
static float *down(const float *d, size_t n) {
    float *h = malloc(n * 4);
    cudaDeviceSynchronize();
    cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost);
    return h;
}
static double nmse(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? num / den : num;
}
#define EXPECT_NMSE(gpu, cpu, n, thr, what)                                                  \
    do {                                                                                     \
        double e_ = nmse(gpu, cpu, n);                                                       \
        fprintf(stderr, "  %-34s NMSE %.2e (threshold %.0e)\n", what, e_, (double)(thr));   \
        CHECK_(e_ <= (thr), "%s: NMSE %g > %g", what, e_, (double)(thr));                   \
    } while (0)

static struct ft_pool *g_pool;

TEST(gemv_matches_cpu) {
    int Ks[] = {42, 24, 2048, 768, 4104}, Ns[] = {7, 130, 1536}, Ts[] = {1, 3, 8};
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t c = 0; c < 3; c++) {
                int K = Ks[a], N = Ns[b], T = Ts[c];
                uint16_t *w = rnd_bf16((size_t)N * K, 0.1f);
                float *x = rnd((size_t)T * K), *bias = rnd(N), *ref = malloc((size_t)T * N * 4);
                ft_cpu_matmul(g_pool, ref, x, w, FT_DTYPE_BF16, bias, T, N, K);
                float *dx = up(x, (size_t)T * K * 4), *dy = up(NULL, (size_t)T * N * 4);
                float *db = up(bias, (size_t)N * 4);
                uint16_t *dw = up(w, (size_t)N * K * 2);
                ft_cuda_gemv(dy, N, dx, dw, db, T, N, K, 0);
                float *got = down(dy, (size_t)T * N);
                char what[64];
                snprintf(what, sizeof what, "gemv T=%d N=%d K=%d", T, N, K);
                EXPECT_NMSE(got, ref, (size_t)T * N, 1e-10, what);
                free(w), free(x), free(bias), free(ref), free(got);
                cudaFree(dx), cudaFree(dy), cudaFree(db), cudaFree(dw);
            }
    EXPECT_OK(ft_cuda_check("gemv"));
}

/* One token with the fused input norm (its normalised input stored too), a bias and the
 * accumulate epilogue, against the CPU on the input normalised in double. */
TEST(gemv_one_token_fused_norm) {
    int Ks[] = {2048, 4096, 264}, N = 300;
    for (size_t a = 0; a < 3; a++) {
        int K = Ks[a];
        uint16_t *w = rnd_bf16((size_t)N * K, 0.1f);
        float *x = rnd(K), *nw = rnd(K), *bias = rnd(N), *y0 = rnd(N);
        float *xn = malloc((size_t)K * 4), *ref = malloc((size_t)N * 4);
        double ss = 0;
        for (int k = 0; k < K; k++) ss += (double)x[k] * x[k];
        double r = 1.0 / sqrt(ss / K + 1e-6);
        for (int k = 0; k < K; k++) xn[k] = (float)(x[k] * r * nw[k]);
        ft_cpu_matmul(g_pool, ref, xn, w, FT_DTYPE_BF16, bias, 1, N, K);
        for (int n = 0; n < N; n++) ref[n] += y0[n];
        float *dx = up(x, (size_t)K * 4), *dnw = up(nw, (size_t)K * 4), *db = up(bias, (size_t)N * 4);
        float *dy = up(y0, (size_t)N * 4), *dxn = up(NULL, (size_t)K * 4);
        uint16_t *dw = up(w, (size_t)N * K * 2);
        struct ft_cuda_gemv_args ga = {{dy, NULL, NULL}, N, 0, N, {db, NULL, NULL}, dx, dw, dnw,
                                       1e-6f, dxn, 1, 1, N, K};
        ft_cuda_gemv_ex(&ga, 0);
        float *got = down(dy, (size_t)N), *gxn = down(dxn, (size_t)K);
        char what[80];
        snprintf(what, sizeof what, "gemv K=%d, fused norm", K);
        EXPECT_NMSE(got, ref, (size_t)N, 1e-10, what);
        snprintf(what, sizeof what, "gemv K=%d: the normalised input", K);
        EXPECT_NMSE(gxn, xn, (size_t)K, 1e-12, what);
        free(w), free(x), free(nw), free(bias), free(y0), free(xn), free(ref), free(got), free(gxn);
        cudaFree(dx), cudaFree(dnw), cudaFree(db), cudaFree(dy), cudaFree(dxn), cudaFree(dw);
    }
    EXPECT_OK(ft_cuda_check("gemv fused norm"));
}

/* Expert GEMVs on Qwen3-30B-A3B's down shape (K = 768) and an odd N, with a pair the CPU
 * computes (id -1: a zero row), against the CPU. */
TEST(moe_gemv_down_shape) {
    int E = 4, P = 6, N = 301, K = 768;
    uint16_t *w = rnd_bf16((size_t)E * N * K, 0.1f);
    float *x = rnd((size_t)P * K), *ref = malloc((size_t)P * N * 4);
    int32_t ids[6] = {3, 0, -1, 2, 3, 1};
    for (int p = 0; p < P; p++) {
        if (ids[p] < 0) {
            memset(ref + (size_t)p * N, 0, (size_t)N * 4);
            continue;
        }
        ft_cpu_matmul_rows(ref + (size_t)p * N, N, x + (size_t)p * K, K,
                           w + (size_t)ids[p] * N * K, FT_DTYPE_BF16, 1, 0, N, K);
    }
    uint16_t *dw = up(w, (size_t)E * N * K * 2);
    float *dx = up(x, (size_t)P * K * 4), *dy = up(NULL, (size_t)P * N * 4);
    int32_t *dids = up(ids, sizeof ids);
    ft_cuda_moe_gemv(dy, dx, 1, dw, (size_t)N * K, dids, P, N, K, 0);
    float *got = down(dy, (size_t)P * N);
    EXPECT_NMSE(got, ref, (size_t)P * N, 1e-10, "moe gemv, down shape");
    for (int n = 0; n < N; n++) EXPECT(got[2 * N + n] == 0.0f);
    free(w), free(x), free(ref), free(got);
    cudaFree(dw), cudaFree(dx), cudaFree(dy), cudaFree(dids);
    EXPECT_OK(ft_cuda_check("moe gemv down shape"));
}

TEST(gemm_bf16_matches_cpu) {
    struct ft_blas *b;
    EXPECT_OK(ft_blas_init(&b, 0));
    int T = 37, N = 300, K = 264;
    uint16_t *w = rnd_bf16((size_t)N * K, 0.1f), *x16 = rnd_bf16((size_t)T * K, 1.0f);
    float *x = malloc((size_t)T * K * 4), *ref = malloc((size_t)T * N * 4);
    ft_to_f32(x, x16, FT_DTYPE_BF16, (size_t)T * K);
    ft_cpu_matmul(g_pool, ref, x, w, FT_DTYPE_BF16, NULL, T, N, K);
    uint16_t *dw = up(w, (size_t)N * K * 2), *dx = up(x16, (size_t)T * K * 2);
    float *dy = up(NULL, (size_t)T * N * 4);
    EXPECT_OK(ft_blas_gemm(b, dy, N, dx, dw, T, N, K));
    float *got = down(dy, (size_t)T * N);
    EXPECT_NMSE(got, ref, (size_t)T * N, 1e-8, "cublas gemm bf16 T=37 N=300 K=264");
    ft_blas_free(b);
    free(w), free(x16), free(x), free(ref), free(got);
    cudaFree(dw), cudaFree(dx), cudaFree(dy);
}

TEST(norm_embed_elementwise) { /* RoPE: see fused_norm_rope_kv_and_add_norm */
    int T = 5, H = 42, V = 50;
    float *x = rnd((size_t)T * H), *w = rnd(H), *ref = malloc((size_t)T * H * 4);
    float *dx = up(x, (size_t)T * H * 4), *dw = up(w, H * 4), *dy = up(NULL, (size_t)T * H * 4);
    uint16_t *dy16 = up(NULL, (size_t)T * H * 2);
    ft_cpu_rmsnorm(ref, x, w, T, H, 1e-6f);
    ft_cuda_rmsnorm(dy, dy16, dx, dw, T, H, 1e-6f, 0);
    float *got = down(dy, (size_t)T * H);
    EXPECT_NMSE(got, ref, (size_t)T * H, 1e-10, "rmsnorm H=42");
    free(got);
    /* embed */
    uint16_t *tab = rnd_bf16((size_t)V * H, 1.0f), *dtab = up(tab, (size_t)V * H * 2);
    int32_t ids[5] = {0, 49, 7, 7, 23}, *dids = up(ids, 20);
    ft_cpu_embed(ref, tab, FT_DTYPE_BF16, ids, T, H);
    ft_cuda_embed(dy, dtab, dids, T, H, 0);
    got = down(dy, (size_t)T * H);
    EXPECT_NMSE(got, ref, (size_t)T * H, 0, "embed");
    free(got);
    /* silu_mul and add */
    float *gu = rnd((size_t)T * 2 * 20), *dgu = up(gu, (size_t)T * 40 * 4);
    ft_cpu_silu_mul(ref, gu, T, 20);
    ft_cuda_silu_mul(dy, dgu, T, 20, 0);
    got = down(dy, (size_t)T * 20);
    EXPECT_NMSE(got, ref, (size_t)T * 20, 1e-10, "silu_mul");
    free(got);
    EXPECT_OK(ft_cuda_check("elementwise"));
    free(x), free(w), free(ref), free(tab), free(gu);
    cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dy16), cudaFree(dtab), cudaFree(dids), cudaFree(dgu);
}

/* The tensor-core prefill attention against the CPU twin: two sequences in one step (the
 * second continues a cached prefix, so its queries start at position 30), tiles that end
 * mid-sequence, sliding windows, sinks, and head dims that need padding (24) up to 256.
 * fp16 Q/K/V/P carry about 3 significant digits: the threshold is NMSE 1e-5 (bf16 inputs
 * measured 6e-6 to 8e-6; an indexing or masking bug gives NMSE near 1). */
TEST(prefill_attention_matches_cpu) {
    enum { NH = 4, NKV = 2, BS = 16, MB = 8, NB = 2 * MB, T0 = 100, T1 = 70, T = T0 + T1 };
    int hds[] = {24, 64, 128, 256};
    for (int hi = 0; hi < 4; hi++) {
        int hd = hds[hi], kvd = NKV * hd;
        float *kp = rnd((size_t)NB * BS * kvd), *vp = rnd((size_t)NB * BS * kvd);
        float *q = rnd((size_t)T * NH * hd), *ref = malloc((size_t)T * NH * hd * 4);
        int32_t tables[2 * MB], pos[T], seq[T], lens[2] = {T0, T1}, tiles[2 * 8];
        for (int b = 0; b < MB; b++) tables[b] = 2 * b + 1, tables[MB + b] = 2 * b; /* interleaved */
        const int32_t *blocks[T];
        for (int t = 0; t < T; t++) {
            seq[t] = t >= T0;
            pos[t] = t < T0 ? t : 30 + (t - T0);
            blocks[t] = tables + seq[t] * MB;
        }
        int nt = ft_cuda_attention_tiles(tiles, lens, 2);
        CHECK_(nt == 4 && tiles[2] == 64 && tiles[3] == 36 && tiles[4] == 100 && tiles[7] == 6,
               "attention tiles: %d tiles, second (%d, %d)", nt, tiles[2], tiles[3]);
        float sinks[NH];
        for (int h = 0; h < NH; h++) sinks[h] = 2.0f * frand();
        float *dsinks = up(sinks, sizeof sinks), *dk = up(kp, (size_t)NB * BS * kvd * 4);
        float *dv = up(vp, (size_t)NB * BS * kvd * 4), *dq = up(q, (size_t)T * NH * hd * 4);
        float *dout = up(NULL, (size_t)T * NH * hd * 4);
        int32_t *dpos = up(pos, sizeof pos), *dseq = up(seq, sizeof seq), *dtab = up(tables, sizeof tables);
        int32_t *dtiles = up(tiles, sizeof tiles);
        for (int variant = 0; variant < 3; variant++) { /* full, window 9, window 70 with sinks */
            int win = variant == 0 ? 0 : variant == 1 ? 9 : 70;
            const float *sk = variant == 2 ? sinks : NULL;
            float scale = 3.0f / sqrtf((float)hd); /* scores of sd ~1: peaked enough to show a mask error */
            ft_cpu_attention_paged(g_pool, ref, q, kp, vp, pos, blocks, BS, T, NH, NKV, hd, scale, win, sk);
            cudaMemset(dout, 0, (size_t)T * NH * hd * 4);
            ft_cuda_attention_prefill(dout, dq, dk, dv, dpos, dseq, dtab, MB, BS, dtiles, nt, NH, NKV,
                                      hd, scale, win, sk ? dsinks : NULL, 0);
            EXPECT_OK(ft_cuda_check("prefill attention"));
            float *got = down(dout, (size_t)T * NH * hd);
            char what[80];
            snprintf(what, sizeof what, "prefill attention hd=%d window=%d%s", hd, win, sk ? " sinks" : "");
            EXPECT_NMSE(got, ref, (size_t)T * NH * hd, 1e-5, what);
            free(got);
        }
        cudaFree(dk), cudaFree(dv), cudaFree(dq), cudaFree(dout), cudaFree(dpos), cudaFree(dseq);
        cudaFree(dtab), cudaFree(dtiles), cudaFree(dsinks);
        free(kp), free(vp), free(q), free(ref);
    }
}

TEST(paged_attention_matches_cpu) {
    enum { NH = 6, NKV = 2, BS = 16, NB = 12, T = 4 };
    int hds[] = {24, 128};
    for (int hi = 0; hi < 2; hi++) {
        int hd = hds[hi], kvd = NKV * hd;
        float *kp = rnd((size_t)NB * BS * kvd), *vp = rnd((size_t)NB * BS * kvd);
        float *q = rnd((size_t)T * NH * hd), *ref = malloc((size_t)T * NH * hd * 4);
        int32_t t0[4] = {7, 2, 11, 0}, t1[3] = {9, 4, 3};
        int32_t tables[2 * 4] = {7, 2, 11, 0, 9, 4, 3, 0};
        int32_t pos[T] = {60, 61, 20, 0}, seq[T] = {0, 0, 1, 1};
        const int32_t *blocks[T] = {t0, t0, t1, t1};
        float sinks[NH];
        for (int h = 0; h < NH; h++) sinks[h] = 2.0f * frand();
        float *dsinks = up(sinks, sizeof sinks);
        for (int window = 0; window <= 18; window += 9) { /* 18: no window, with sinks */
            const float *sk = window == 18 ? sinks : NULL;
            int win = window == 18 ? 0 : window;
            ft_cpu_attention_paged(g_pool, ref, q, kp, vp, pos, blocks, BS, T, NH, NKV, hd, 0.3f, win, sk);
            float *dk = up(kp, (size_t)NB * BS * kvd * 4), *dv = up(vp, (size_t)NB * BS * kvd * 4);
            float *dq = up(q, (size_t)T * NH * hd * 4), *dout = up(NULL, (size_t)T * NH * hd * 4);
            int32_t *dpos = up(pos, sizeof pos), *dseq = up(seq, sizeof seq), *dtab = up(tables, sizeof tables);
            for (int split = 1; split <= 7; split += 3) { /* one chunk, and flash-decoding chunks */
                float *dpart = up(NULL, ft_cuda_attention_scratch(T, NH, hd, split));
                cudaMemset(dout, 0, (size_t)T * NH * hd * 4);
                ft_cuda_attention(dout, dpart, dq, dk, dv, dpos, dseq, dtab, 4, BS, T, NH, NKV, hd,
                                  0.3f, win, sk ? dsinks : NULL, 64, split, 0);
                float *got = down(dout, (size_t)T * NH * hd);
                char what[80];
                snprintf(what, sizeof what, "paged attention hd=%d window=%d%s split=%d", hd, win,
                         sk ? " sinks" : "", split);
                EXPECT_NMSE(got, ref, (size_t)T * NH * hd, 1e-10, what);
                free(got);
                cudaFree(dpart);
            }
            cudaFree(dk), cudaFree(dv), cudaFree(dq), cudaFree(dout), cudaFree(dpos), cudaFree(dseq), cudaFree(dtab);
        }
        free(kp), free(vp), free(q), free(ref);
        cudaFree(dsinks);
    }
}

/* gpt-oss's expert pieces: the clamped SwiGLU, and expert biases on decode pairs (one pair left
 * to the CPU) and on prefill rows sorted by expert (empty experts, a batch mask). */
TEST(gpt_oss_expert_ops) {
    enum { R = 9, I = 37, E = 5, N = 29 };
    float *gu = rnd((size_t)R * 2 * I), *ref = malloc((size_t)R * I * 4);
    for (int i = 0; i < R * 2 * I; i++) gu[i] *= 12.0f; /* beyond the limit on both sides */
    ft_cpu_swiglu(ref, gu, R, I, FT_SWIGLU_OAI, 7.0f, 1.702f);
    float *dgu = up(gu, (size_t)R * 2 * I * 4), *dout = up(NULL, (size_t)R * I * 4);
    ft_cuda_swiglu(dout, dgu, R, I, FT_SWIGLU_OAI, 7.0f, 1.702f, 0);
    float *got = down(dout, (size_t)R * I);
    EXPECT_NMSE(got, ref, (size_t)R * I, 1e-10, "clamped swiglu (limit 7, alpha 1.702)");
    free(got);
    ft_cpu_swiglu(ref, gu, R, I, FT_SWIGLU_CLAMP, 7.0f, 0.0f); /* DeepSeek-V4's */
    ft_cuda_swiglu(dout, dgu, R, I, FT_SWIGLU_CLAMP, 7.0f, 0.0f, 0);
    got = down(dout, (size_t)R * I);
    EXPECT_NMSE(got, ref, (size_t)R * I, 1e-10, "V4 clamped swiglu (limit 7)");
    free(got);
    float *bias = rnd((size_t)E * N), *y = rnd((size_t)R * N), *want = malloc((size_t)R * N * 4);
    float *dbias = up(bias, (size_t)E * N * 4), *dy = up(y, (size_t)R * N * 4);
    /* decode pairs: expert ids, and slots with pair 4 computed on the CPU (-1) */
    int32_t eids[R] = {4, 0, 2, 2, 1, 3, 0, 4, 1}, mask[R] = {0, 1, 2, 3, -1, 5, 6, 7, 8};
    int32_t *deids = up(eids, sizeof eids), *dmask = up(mask, sizeof mask);
    memcpy(want, y, (size_t)R * N * 4);
    for (int p = 0; p < R; p++)
        for (int n = 0; n < N && mask[p] >= 0; n++) want[p * N + n] += bias[eids[p] * N + n];
    ft_cuda_moe_add_bias(dy, dbias, deids, dmask, R, N, 0);
    got = down(dy, (size_t)R * N);
    EXPECT_NMSE(got, want, (size_t)R * N, 1e-12, "expert bias on decode pairs");
    free(got);
    /* prefill rows sorted by expert: experts 1 and 3 empty; the batch holds 0, 2 and 4 but not
     * 2's slot (-1), so 2's rows stay as they were */
    int32_t offs[E + 1] = {0, 3, 3, 6, 6, 9}, slot_of[E] = {0, -1, -1, -1, 1};
    int32_t *doffs = up(offs, sizeof offs), *dslot = up(slot_of, sizeof slot_of);
    cudaMemcpy(dy, y, (size_t)R * N * 4, cudaMemcpyHostToDevice);
    memcpy(want, y, (size_t)R * N * 4);
    for (int e = 0; e < E; e++)
        for (int r = offs[e]; r < offs[e + 1]; r++)
            for (int n = 0; n < N && slot_of[e] >= 0; n++) want[r * N + n] += bias[e * N + n];
    ft_cuda_moe_add_bias_sorted(dy, dbias, doffs, dslot, E, R, N, 0);
    got = down(dy, (size_t)R * N);
    EXPECT_NMSE(got, want, (size_t)R * N, 1e-12, "expert bias on sorted rows, batch mask");
    free(got);
    EXPECT_OK(ft_cuda_check("gpt-oss ops"));
    free(gu), free(ref), free(bias), free(y), free(want);
    cudaFree(dgu), cudaFree(dout), cudaFree(dbias), cudaFree(dy), cudaFree(deids), cudaFree(dmask);
    cudaFree(doffs), cudaFree(dslot);
}

TEST(moe_router_and_experts) {
    int T = 3, E = 7, k = 3, H = 42, I = 20;
    float *logits = rnd((size_t)T * E);
    float *dl = up(logits, (size_t)T * E * 4), *dw = up(NULL, (size_t)T * k * 4);
    int32_t *dids = up(NULL, (size_t)T * k * 4);
    for (int norm = 0; norm <= 1; norm++) {
        ft_cuda_router_topk(dl, T, E, k, norm, 0, 0, 1.0f, dids, dw, 0);
        int32_t ids[9];
        float w[9];
        cudaDeviceSynchronize();
        cudaMemcpy(ids, dids, sizeof ids, cudaMemcpyDeviceToHost);
        cudaMemcpy(w, dw, sizeof w, cudaMemcpyDeviceToHost);
        for (int t = 0; t < T; t++) {
            float p[7], rv[3];
            int ri[3];
            memcpy(p, logits + t * E, sizeof p);
            ft_cpu_softmax(p, E);
            ft_cpu_topk(p, E, k, ri, rv);
            float s = norm ? rv[0] + rv[1] + rv[2] : 1.0f;
            for (int j = 0; j < k; j++) {
                EXPECT_EQ(ids[t * k + j], ri[j]);
                EXPECT_NEAR(w[t * k + j], rv[j] / s, 1e-6);
            }
        }
    }
    /* DeepSeek-V2's group_limited_greedy by its definition: the topk_group groups with the best
     * single probability keep theirs (ties: lower group), the rest 0, top-k, weights x scale */
    {
        enum { GT = 5, GE = 16, GG = 4, GK = 3 };
        float *gl = rnd((size_t)GT * GE);
        float *dgl = up(gl, (size_t)GT * GE * 4), *dgw = up(NULL, (size_t)GT * GK * 4);
        int32_t *dgi = up(NULL, (size_t)GT * GK * 4);
        for (int norm = 0; norm <= 1; norm++) {
            ft_cuda_router_topk(dgl, GT, GE, GK, norm, GG, 2, 2.5f, dgi, dgw, 0);
            int32_t gi[GT * GK];
            float gw[GT * GK];
            cudaDeviceSynchronize();
            cudaMemcpy(gi, dgi, sizeof gi, cudaMemcpyDeviceToHost);
            cudaMemcpy(gw, dgw, sizeof gw, cudaMemcpyDeviceToHost);
            for (int t = 0; t < GT; t++) {
                float p[GE], best[GG], rv[GK];
                int ri[GK], keep[GG] = {0};
                memcpy(p, gl + t * GE, sizeof p);
                ft_cpu_softmax(p, GE);
                for (int g = 0; g < GG; g++) {
                    best[g] = p[g * 4];
                    for (int x = 1; x < 4; x++) best[g] = fmaxf(best[g], p[g * 4 + x]);
                }
                for (int r = 0; r < 2; r++) {
                    int bg = -1;
                    for (int g = 0; g < GG; g++)
                        if (!keep[g] && (bg < 0 || best[g] > best[bg])) bg = g;
                    keep[bg] = 1;
                }
                for (int x = 0; x < GE; x++)
                    if (!keep[x / 4]) p[x] = 0.0f;
                ft_cpu_topk(p, GE, GK, ri, rv);
                float s = norm ? rv[0] + rv[1] + rv[2] : 1.0f;
                for (int j = 0; j < GK; j++) {
                    EXPECT_EQ(gi[t * GK + j], ri[j]);
                    EXPECT_NEAR(gw[t * GK + j], 2.5f * rv[j] / s, 1e-5);
                    EXPECT(keep[gi[t * GK + j] / 4]);
                }
            }
        }
        free(gl);
        cudaFree(dgl), cudaFree(dgw), cudaFree(dgi);
    }
    /* expert GEMVs over (token, expert) pairs + weighted combine vs the CPU executor's kernel */
    uint16_t *gu = rnd_bf16((size_t)E * 2 * I * H, 0.2f), *dn = rnd_bf16((size_t)E * H * I, 0.2f);
    float *x = rnd((size_t)T * H), *ref = calloc((size_t)T * H, 4);
    int32_t ids[9];
    float w[9];
    cudaMemcpy(ids, dids, sizeof ids, cudaMemcpyDeviceToHost);
    cudaMemcpy(w, dw, sizeof w, cudaMemcpyDeviceToHost);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            float g[40], a[20], y[42];
            int e = ids[t * k + j];
            ft_cpu_matmul_rows(g, 40, x + t * H, H, gu + (size_t)e * 2 * I * H, FT_DTYPE_BF16, 1, 0, 40, H);
            ft_cpu_silu_mul(a, g, 1, I);
            ft_cpu_matmul_rows(y, H, a, I, dn + (size_t)e * H * I, FT_DTYPE_BF16, 1, 0, H, I);
            for (int h = 0; h < H; h++) ref[t * H + h] += w[t * k + j] * y[h];
        }
    uint16_t *dgu = up(gu, (size_t)E * 2 * I * H * 2), *ddn = up(dn, (size_t)E * H * I * 2);
    float *dx = up(x, (size_t)T * H * 4), *dmgu = up(NULL, (size_t)T * k * 2 * I * 4);
    float *dmact = up(NULL, (size_t)T * k * I * 4), *dmy = up(NULL, (size_t)T * k * H * 4);
    float *dout = up(NULL, (size_t)T * H * 4);
    ft_cuda_moe_gemv(dmgu, dx, k, dgu, (size_t)2 * I * H, dids, T * k, 2 * I, H, 0);
    ft_cuda_silu_mul(dmact, dmgu, T * k, I, 0);
    ft_cuda_moe_gemv(dmy, dmact, 1, ddn, (size_t)H * I, dids, T * k, H, I, 0);
    ft_cuda_moe_combine(dout, dmy, dw, T, k, H, 0, 0);
    float *got = down(dout, (size_t)T * H);
    EXPECT_NMSE(got, ref, (size_t)T * H, 1e-10, "moe gemv + combine (7 experts, top-3)");
    /* argmax */
    float lg[2 * 300];
    for (int i = 0; i < 600; i++) lg[i] = frand();
    lg[137] = 5.0f, lg[300 + 299] = 6.0f;
    float *dlg = up(lg, sizeof lg);
    int32_t *dam = up(NULL, 8), am[2];
    ft_cuda_argmax(dlg, 2, 300, dam, 0);
    cudaDeviceSynchronize();
    cudaMemcpy(am, dam, 8, cudaMemcpyDeviceToHost);
    EXPECT_EQ(am[0], 137);
    EXPECT_EQ(am[1], 299);
    EXPECT_OK(ft_cuda_check("moe ops"));
    free(logits), free(gu), free(dn), free(x), free(ref), free(got);
    cudaFree(dl), cudaFree(dw), cudaFree(dids), cudaFree(dgu), cudaFree(ddn), cudaFree(dx);
    cudaFree(dmgu), cudaFree(dmact), cudaFree(dmy), cudaFree(dout), cudaFree(dlg), cudaFree(dam);
}

/* The device argmax (greedy ids without logits crossing back) against ft_argmax, the host's:
 * rows of a real vocab (151,936) with a tie for the largest value, one with NaNs and -inf
 * around it, one all -inf and one all NaN. */
TEST(argmax_matches_host) {
    const int V = 151936, R = 5;
    float *lg = malloc((size_t)R * V * 4);
    for (size_t i = 0; i < (size_t)R * V; i++) lg[i] = frand();
    lg[90001] = lg[120000] = 7.0f;                                /* row 0: a tie */
    for (int i = 0; i < V; i += 3) lg[V + i] = i % 2 ? NAN : -INFINITY; /* row 1 */
    lg[V + 5] = NAN, lg[V + 77777] = 9.0f;
    for (int i = 0; i < V; i++) lg[2 * V + i] = -INFINITY, lg[3 * V + i] = NAN;
    float *dlg = up(lg, (size_t)R * V * 4);
    int32_t *dam = up(NULL, R * 4), am[5];
    ft_cuda_argmax(dlg, R, V, dam, 0);
    cudaDeviceSynchronize();
    cudaMemcpy(am, dam, sizeof am, cudaMemcpyDeviceToHost);
    EXPECT_EQ(am[0], 90001);
    EXPECT_EQ(am[1], 77777);
    for (int r = 0; r < R; r++) EXPECT_EQ(am[r], ft_argmax(lg + (size_t)r * V, V));
    EXPECT_OK(ft_cuda_check("argmax"));
    free(lg);
    cudaFree(dlg), cudaFree(dam);
}

/* The router's stage-out into mapped host memory: ids, weights and rows land there, and the
 * done flag counts launches (a multi-block launch stores it once, after every block's writes):
 * the host polls the flag, with no stream sync, and then reads the data. */
TEST(stage_out_flag_after_data) {
    const int shapes[4][2] = {{8, 2048}, {64, 16384}, {16, 0}, {1, 300}}; /* pairs, rows' floats */
    int32_t *h_ids, ids[64];
    float *h_w, *h_x, w[64], *x = rnd(16384);
    unsigned *h_done, *m_done;
    void *p[4];
    cudaHostAlloc((void **)&h_ids, 64 * 4, cudaHostAllocMapped);
    cudaHostAlloc((void **)&h_w, 64 * 4, cudaHostAllocMapped);
    cudaHostAlloc((void **)&h_x, 16384 * 4, cudaHostAllocMapped);
    cudaHostAlloc((void **)&h_done, 16, cudaHostAllocMapped);
    *h_done = 0;
    cudaHostGetDevicePointer(&p[0], h_ids, 0), cudaHostGetDevicePointer(&p[1], h_w, 0);
    cudaHostGetDevicePointer(&p[2], h_x, 0), cudaHostGetDevicePointer(&p[3], h_done, 0);
    m_done = p[3];
    for (int i = 0; i < 64; i++) ids[i] = i * 7 + 1, w[i] = frand();
    int32_t *d_ids = up(ids, sizeof ids);
    float *d_w = up(w, sizeof w), *d_x = up(x, 16384 * 4);
    unsigned *d_seq = up(NULL, 8);
    for (int rep = 0; rep < 3; rep++) {
        for (int c = 0; c < 4; c++) {
            int np = shapes[c][0], nx = shapes[c][1];
            memset(h_ids, 0xff, 64 * 4), memset(h_w, 0, 64 * 4), memset(h_x, 0, 16384 * 4);
            unsigned want = (unsigned)(rep * 4 + c + 1);
            ft_cuda_stage_out(p[0], d_ids, p[1], d_w, np, p[2], d_x, nx, d_seq, m_done, 0);
            long polls = 0;
            while (__atomic_load_n(h_done, __ATOMIC_ACQUIRE) != want && polls < 2000000000L) polls++;
            EXPECT_EQ(*h_done, want);
            int bad = 0;
            for (int i = 0; i < np; i++) bad += h_ids[i] != ids[i] || h_w[i] != w[i];
            for (int i = 0; i < nx; i++) bad += h_x[i] != x[i];
            EXPECT_EQ(bad, 0);
            cudaDeviceSynchronize();
        }
    }
    /* without seq: the data, and no flag */
    ft_cuda_stage_out(p[0], d_ids, NULL, d_w, 5, NULL, d_x, 0, NULL, NULL, 0);
    cudaDeviceSynchronize();
    EXPECT_EQ(*h_done, 12u);
    EXPECT_EQ(h_ids[4], ids[4]);
    EXPECT_OK(ft_cuda_check("stage_out"));
    cudaFreeHost(h_ids), cudaFreeHost(h_w), cudaFreeHost(h_x), cudaFreeHost(h_done);
    cudaFree(d_ids), cudaFree(d_w), cudaFree(d_x), cudaFree(d_seq);
    free(x);
}

/* The device draw (ft_cuda_sample_draw: tokens for temperature-only requests without logits
 * crossing back) against its definition computed here in double, on a real vocab (151,936)
 * and on vocabs smaller than the block (37, 1000); T 0 rows against ft_argmax; and against the
 * host's ft_draw_softmax with the same (T, u), which may differ only where rounding moves a
 * boundary. */
TEST(sample_draw_matches_definition) {
    const int Vs[3] = {151936, 1000, 37};
    int bad = 0, differ = 0, total = 0;
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi], R = 16;
        float *lg = malloc((size_t)R * V * 4), *y = malloc((size_t)V * 4), *scratch = malloc((size_t)V * 4);
        struct ft_draw draws[16];
        for (size_t i = 0; i < (size_t)R * V; i++) lg[i] = 4.0f * frand();
        lg[3] = -INFINITY;
        for (int r = 0; r < R; r++)
            draws[r] = (struct ft_draw){r % 4 == 0 ? 0.0f : 0.5f + 0.25f * (float)(r % 5),
                                        (float)((r * 7919 + vi * 131) % 1000) / 1000.0f, 1.0f, 0.0f, 0, 0};
        float *dlg = up(lg, (size_t)R * V * 4);
        struct ft_draw *dd = up(draws, sizeof draws);
        int32_t *dout = up(NULL, R * 4), out[16];
        ft_cuda_sample_draw(dlg, R, V, dd, NULL, dout, 0);
        cudaDeviceSynchronize();
        cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
        for (int r = 0; r < R; r++) {
            const float *x = lg + (size_t)r * V, T = draws[r].temperature;
            total++;
            if (!(T > 0)) {
                bad += out[r] != ft_argmax(x, V);
                continue;
            }
            if (out[r] < 0 || out[r] >= V) {
                bad++;
                continue;
            }
            double mx = -INFINITY, z = 0, before = 0;
            for (int i = 0; i < V; i++) mx = fmax(mx, (double)(x[i] / T));
            for (int i = 0; i < V; i++) z += exp((double)(x[i] / T) - mx);
            for (int i = 0; i < out[r]; i++) before += exp((double)(x[i] / T) - mx);
            const double at = before + exp((double)(x[out[r]] / T) - mx), u = draws[r].u;
            bad += !(before <= u * z + 1e-4 * z && at > u * z - 1e-4 * z);
            memcpy(y, x, (size_t)V * 4);
            differ += out[r] != ft_draw_softmax(y, V, T, u, scratch);
        }
        free(lg), free(y), free(scratch);
        cudaFree(dlg), cudaFree(dd), cudaFree(dout);
    }
    fprintf(stderr, "  device draws: %d of %d off their definition, %d differ from the host's\n", bad,
            total, differ);
    EXPECT_EQ(bad, 0);
    CHECK_(differ <= 2, "%d of %d device draws differ from the host's", differ, total);
    EXPECT_OK(ft_cuda_check("sample draw"));
}

/* Top-k / top-p / min-p drawn on the device against the host sampler's definition
 * (ft_sampler_draw_row with the same parameters and uniform) on a real vocab (151,936) and two
 * small ones (1,000; 1,001, whose rows are read a value at a time), peaked rows (a few strong
 * tokens over a spread: a model's typical row) under Qwen's default, top-k alone (k 1, 50, with ties), top-p alone, min-p alone and mixed; a flat
 * row under top-p 0.95 has more candidates than the device sorts and must come back as -1
 * (the host's), and with the cap lowered to 8 every row either comes back as -1 or as before.
 * Rounding may move a boundary: at most 2 of the rows may differ. */
TEST(filtered_draws_match_host) {
    const int Vs[3] = {151936, 1000, 1001}; /* 1001: rows not 16-byte aligned (one value a load) */
    const struct ft_draw cfg[8] = {
        {0.7f, 0.0f, 0.8f, 0.0f, 20, 0}, {1.0f, 0.0f, 1.0f, 0.0f, 1, 0},  {0.8f, 0.0f, 1.0f, 0.0f, 50, 0},
        {1.0f, 0.0f, 0.9f, 0.0f, 0, 0},  {1.0f, 0.0f, 1.0f, 0.1f, 0, 0},  {1.1f, 0.0f, 0.7f, 0.05f, 0, 0},
        {0.6f, 0.0f, 0.95f, 0.02f, 40, 0}, {1.0f, 0.0f, 0.95f, 0.0f, 0, 0}, /* the last on a flat row */
    };
    const struct ft_sampling def = ft_sampling_default();
    int differ = 0, total = 0, overflow_ok = 0, capped_ok = 0, capped_sent = 0, bad = 0;
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi], R = 32;
        struct ft_sampler *scratch = NULL;
        EXPECT_OK(ft_sampler_init(&scratch, &def, V));
        float *lg = malloc((size_t)R * V * 4), *y = malloc((size_t)V * 4);
        struct ft_draw draws[32];
        for (int r = 0; r < R; r++) {
            float *x = lg + (size_t)r * V;
            const int flat = r % 8 == 7;
            for (int i = 0; i < V; i++) x[i] = flat ? 0.1f * frand() : 1.5f * frand() - 6.5f;
            for (int j = 0; !flat && j < 12; j++) x[(r * 7919 + j * 104729) % V] = 6.0f + (float)(j % 5);
            if (r % 8 == 2) x[(r * 31) % V] = x[(r * 7919) % V]; /* a tie at the top */
            draws[r] = cfg[r % 8];
            draws[r].u = (float)((r * 7919 + vi * 131) % 1000) / 1000.0f;
        }
        float *dlg = up(lg, (size_t)R * V * 4);
        struct ft_draw *dd = up(draws, sizeof draws);
        int32_t *dout = up(NULL, R * 4), out[32], capped[32];
        ft_cuda_sample_draw(dlg, R, V, dd, NULL, dout, 0);
        cudaDeviceSynchronize();
        cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
        ft_cuda_sample_draw_set_cap(8);
        ft_cuda_sample_draw(dlg, R, V, dd, NULL, dout, 0);
        cudaDeviceSynchronize();
        cudaMemcpy(capped, dout, sizeof capped, cudaMemcpyDeviceToHost);
        ft_cuda_sample_draw_set_cap(0);
        for (int r = 0; r < R; r++) {
            memcpy(y, lg + (size_t)r * V, (size_t)V * 4);
            const int32_t want = ft_sampler_draw_row(scratch, &draws[r], y);
            capped_ok += capped[r] == -1 || capped[r] == out[r]; /* sent back, or fits: the same */
            capped_sent += capped[r] == -1;
            if (r % 8 == 7 && V > 2048) { /* flat under top-p 0.95: the host's */
                overflow_ok += out[r] == -1;
                continue;
            }
            total++;
            bad += out[r] < 0 || out[r] >= V;
            if (out[r] != want)
                fprintf(stderr, "  V %d row %d (t %.2f k %d p %.2f min-p %.2f u %.3f): device %d, host %d\n", V,
                        r, draws[r].temperature, draws[r].top_k, draws[r].top_p, draws[r].min_p,
                        draws[r].u, out[r], want);
            differ += out[r] != want;
        }
        free(lg), free(y);
        ft_sampler_free(scratch);
        cudaFree(dlg), cudaFree(dd), cudaFree(dout);
    }
    fprintf(stderr, "  filtered device draws: %d of %d differ from the host's; %d flat rows sent "
            "back; with the cap at 8, %d of 96 rows sent back, %d as uncapped\n", differ, total,
            overflow_ok, capped_sent, capped_ok - capped_sent);
    EXPECT_EQ(bad, 0);
    CHECK_(differ <= 2, "%d of %d filtered device draws differ from the host's", differ, total);
    EXPECT_EQ(overflow_ok, 4);
    EXPECT_EQ(capped_ok, 96);
    EXPECT(capped_sent >= 24); /* at least the top-k 20, 40 and 50 rows */
    EXPECT_OK(ft_cuda_check("filtered sample draw"));
}

/* Masked draws on the device (grammar-constrained decoding: ft_cuda_sample_draw with allow
 * bitmasks) against the host's definition, ft_sampler_draw_row on the row masked first
 * (ft_mask_apply_bits), on a real vocab (151,936), one not a multiple of 32 whose rows are read
 * a value at a time (1,001) and one smaller than a warp's word (37): the masked argmax (its
 * unmasked argmax forbidden), temperature alone, top-k 20 with top-p 0.8, top-p, min-p, top-p
 * with min-p and top-k 50, each with about half the tokens allowed, with a single token
 * allowed (which must come out), with 5 (fewer than k) and with a third. Every drawn token is
 * allowed; rounding may move a boundary in at most 2 rows; rows not marked masked ignore the
 * masks (the unmasked draw). */
TEST(masked_draws_match_host) {
    const int Vs[3] = {151936, 1001, 37};
    const struct ft_draw cfg[8] = {
        {0.0f, 0.0f, 1.0f, 0.0f, 0, 1},  {0.9f, 0.0f, 1.0f, 0.0f, 0, 1},   {0.7f, 0.0f, 0.8f, 0.0f, 20, 1},
        {1.0f, 0.0f, 0.9f, 0.0f, 0, 1},  {1.0f, 0.0f, 1.0f, 0.1f, 0, 1},   {1.1f, 0.0f, 0.7f, 0.05f, 0, 1},
        {0.8f, 0.0f, 1.0f, 0.0f, 50, 1}, {0.6f, 0.0f, 0.95f, 0.02f, 40, 1},
    };
    const struct ft_sampling def = ft_sampling_default();
    int differ = 0, total = 0, bad = 0, single = 0, single_ok = 0, unmasked_same = 0;
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi], R = 32, W = (V + 31) / 32;
        struct ft_sampler *scratch = NULL;
        EXPECT_OK(ft_sampler_init(&scratch, &def, V));
        float *lg = malloc((size_t)R * V * 4), *y = malloc((size_t)V * 4);
        uint32_t *mk = calloc((size_t)R * W, 4);
        struct ft_draw draws[32], plain[32];
        for (int r = 0; r < R; r++) {
            float *x = lg + (size_t)r * V;
            uint32_t *w = mk + (size_t)r * W;
            for (int i = 0; i < V; i++) x[i] = 1.5f * frand() - 6.5f;
            int strong[12];
            for (int j = 0; j < 12; j++) x[strong[j] = (r * 7919 + j * 104729) % V] = 6.0f + (float)(j % 5);
            const int kind = (r / 8) % 4; /* half; one token; five; a third */
            if (kind == 1 || kind == 2)
                for (int k = 0; k < (kind == 1 ? 1 : 5); k++) {
                    const int id = (r * 389 + k * 1013 + V - 1) % V; /* V - 1 too: the last word */
                    w[id >> 5] |= 1u << (id & 31);
                }
            else
                for (int i = 0; i < V; i++)
                    if ((unsigned)(i * 2654435761u + r) % (kind == 0 ? 2 : 3) == 0) w[i >> 5] |= 1u << (i & 31);
            if (kind == 0 || kind == 3) /* the strong tokens allowed but the strongest */
                for (int j = 0; j < 12; j++) {
                    const int top = ft_argmax(x, V);
                    if (strong[j] == top) w[top >> 5] &= ~(1u << (top & 31));
                    else w[strong[j] >> 5] |= 1u << (strong[j] & 31);
                }
            draws[r] = cfg[r % 8];
            draws[r].u = (float)((r * 7919 + vi * 131) % 1000) / 1000.0f;
            plain[r] = draws[r], plain[r].masked = 0;
        }
        float *dlg = up(lg, (size_t)R * V * 4);
        struct ft_draw *dd = up(draws, sizeof draws), *dp = up(plain, sizeof plain);
        uint32_t *dmk = up(mk, (size_t)R * W * 4);
        int32_t *dout = up(NULL, R * 4), out[32], pout[32], nout[32];
        ft_cuda_sample_draw(dlg, R, V, dd, dmk, dout, 0);
        cudaDeviceSynchronize();
        cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
        ft_cuda_sample_draw(dlg, R, V, dp, dmk, dout, 0); /* masks given, rows not masked */
        cudaDeviceSynchronize();
        cudaMemcpy(pout, dout, sizeof pout, cudaMemcpyDeviceToHost);
        ft_cuda_sample_draw(dlg, R, V, dp, NULL, dout, 0);
        cudaDeviceSynchronize();
        cudaMemcpy(nout, dout, sizeof nout, cudaMemcpyDeviceToHost);
        for (int r = 0; r < R; r++) {
            const uint32_t *w = mk + (size_t)r * W;
            memcpy(y, lg + (size_t)r * V, (size_t)V * 4);
            ft_mask_apply_bits(y, V, w);
            const int32_t want = ft_sampler_draw_row(scratch, &draws[r], y);
            unmasked_same += pout[r] == nout[r];
            total++;
            const int allowed = out[r] >= 0 && out[r] < V && (w[out[r] >> 5] >> (out[r] & 31) & 1);
            bad += !allowed;
            if ((r / 8) % 4 == 1) single++, single_ok += out[r] == want;
            if (draws[r].temperature <= 0) bad += out[r] != want; /* the argmax: exact */
            if (out[r] != want)
                fprintf(stderr, "  V %d row %d (t %.2f k %d p %.2f min-p %.2f u %.3f): device %d, host %d\n",
                        V, r, draws[r].temperature, draws[r].top_k, draws[r].top_p, draws[r].min_p,
                        draws[r].u, out[r], want);
            differ += out[r] != want;
        }
        free(lg), free(y), free(mk);
        ft_sampler_free(scratch);
        cudaFree(dlg), cudaFree(dd), cudaFree(dp), cudaFree(dmk), cudaFree(dout);
    }
    fprintf(stderr, "  masked device draws: %d of %d differ from the host's, %d not allowed; single-token "
            "rows %d of %d\n", differ, total, bad, single_ok, single);
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(single_ok, single);
    EXPECT_EQ(unmasked_same, total);
    CHECK_(differ <= 2, "%d of %d masked device draws differ from the host's", differ, total);
    EXPECT_OK(ft_cuda_check("masked sample draw"));
}

/* Uniform synthetic routing: 8 distinct ids of 64 per token, every
 * expert chosen at 1/8 of the rate within chi-square's p = 0.001 (63 dof: 103.4). */
TEST(synthetic_routing_uniform) {
    enum { T = 2048, E = 64, K = 8 };
    float *logits = rnd((size_t)T * E);
    float *dl = up(logits, sizeof(float) * T * E), *dw = up(NULL, sizeof(float) * T * K);
    int32_t *dids = up(NULL, sizeof(int32_t) * T * K);
    static int32_t ids[T * K];
    uint32_t *dstep = up(NULL, 4);
    {
        ft_cuda_synthetic_route(dids, dw, dl, T, E, K, 11, dstep, 2, 1, NULL, 0);
        cudaDeviceSynchronize();
        cudaMemcpy(ids, dids, sizeof ids, cudaMemcpyDeviceToHost);
        int count[E] = {0}, distinct = 1;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < K; j++) {
                int v = ids[t * K + j];
                distinct &= v >= 0 && v < E;
                if (v < 0 || v >= E) continue;
                count[v]++;
                for (int i = 0; i < j; i++) distinct &= ids[t * K + i] != v;
            }
        double e = (double)T * K / E, chi2 = 0;
        for (int i = 0; i < E; i++) chi2 += (count[i] - e) * (count[i] - e) / e;
        fprintf(stderr, "  uniform: chi-square %.1f over %d experts\n", chi2, E);
        EXPECT(distinct);
        CHECK_(chi2 <= 103.4, "uniform: chi-square %.1f", chi2);
    }
    EXPECT_OK(ft_cuda_check("uniform synthetic routing"));
    free(logits);
    cudaFree(dl), cudaFree(dw), cudaFree(dids), cudaFree(dstep);
}

/* Synthetic routing on the GPU: distinct ids per token; zipf:1.2 puts rank 1's expert (the
 * layer's permutation of rank 0) at its probability 1/H(E, 1.2) within a few sd; sticky:1.0
 * repeats the first token's ids for every later token (and sticky:0.0 does not). */
TEST(synthetic_routing_zipf_and_sticky) {
    enum { T = 512, E = 16, K = 2, LAYER = 3 };
    float *logits = rnd((size_t)T * E);
    float *dl = up(logits, sizeof(float) * T * E), *dw = up(NULL, sizeof(float) * T * K);
    int32_t *dids = up(NULL, sizeof(int32_t) * T * K), ids[T * K];
    uint32_t *dstep = up(NULL, 4);
    double z = 0;
    float cdf[E];
    for (int r = 1; r <= E; r++) z += pow(r, -1.2);
    double a = 0;
    for (int r = 1; r <= E; r++) cdf[r - 1] = (float)((a += pow(r, -1.2)) / z);
    cdf[E - 1] = 1.0f;
    struct ft_cuda_synth sy = {.zipf_cdf = up(cdf, sizeof cdf)};
    ft_cuda_synthetic_route(dids, dw, dl, T, E, K, 7, dstep, LAYER, 1, &sy, 0);
    cudaDeviceSynchronize();
    cudaMemcpy(ids, dids, sizeof ids, cudaMemcpyDeviceToHost);
    int top = (int)(((uint64_t)0 * 2654435761u + (uint64_t)LAYER * 40503u) % E), n_top = 0, distinct = 1;
    int rank_of[E], count[E] = {0}, sums = 1;
    for (int r = 0; r < E; r++) rank_of[(int)(((uint64_t)r * 2654435761u + (uint64_t)LAYER * 40503u) % E)] = r;
    float wts[T * K];
    cudaMemcpy(wts, dw, sizeof wts, cudaMemcpyDeviceToHost);
    for (int t = 0; t < T; t++) {
        distinct &= ids[t * K] != ids[t * K + 1] && ids[t * K] >= 0 && ids[t * K] < E &&
                    ids[t * K + 1] >= 0 && ids[t * K + 1] < E;
        n_top += ids[t * K] == top; /* first choice: one plain zipf draw */
        if (ids[t * K] >= 0 && ids[t * K] < E) count[rank_of[ids[t * K]]]++;
        sums &= fabsf(wts[t * K] + wts[t * K + 1] - 1.0f) < 1e-5f; /* renormalised */
    }
    double p = 1.0 / z, sd = sqrt(T * p * (1 - p)), chi2 = 0;
    for (int r = 0; r < E; r++) { /* every rank at its probability (15 dof; 37.7 is p = 0.001) */
        double e = T * pow(r + 1, -1.2) / z;
        chi2 += (count[r] - e) * (count[r] - e) / e;
    }
    fprintf(stderr, "  zipf:1.2 over %d experts: rank-1 expert %d first in %d of %d tokens (expected "
            "%.0f +- %.0f), chi-square over the ranks %.1f\n", E, top, n_top, T, T * p, sd, chi2);
    EXPECT(distinct && sums);
    CHECK_(fabs(n_top - T * p) <= 5 * sd, "zipf: %d rank-1 draws, expected %.0f", n_top, T * p);
    CHECK_(chi2 <= 37.7, "zipf: chi-square %.1f over 16 ranks (p < 0.001)", chi2);
    int32_t *dsticky = up(NULL, 4 * 8 * K);
    float *dstats = up(NULL, sizeof(float) * 2 * T);
    for (int keep = 1; keep >= 0; keep--) {
        cudaMemset(dsticky, 0xff, 4 * 8 * K);
        struct ft_cuda_synth ss = {.sticky = dsticky, .stats = dstats, .keep = (float)keep};
        ft_cuda_synthetic_route(dids, dw, dl, T, E, K, 7, dstep, LAYER, 1, &ss, 0);
        cudaDeviceSynchronize();
        cudaMemcpy(ids, dids, sizeof ids, cudaMemcpyDeviceToHost);
        int same = 0;
        distinct = 1;
        for (int t = 1; t < T; t++) {
            same += ids[t * K] == ids[0] && ids[t * K + 1] == ids[1];
            distinct &= ids[t * K] != ids[t * K + 1];
        }
        fprintf(stderr, "  sticky:%d: %d of %d tokens repeat the first token's ids\n", keep, same, T - 1);
        EXPECT(distinct);
        if (keep) EXPECT_EQ(same, T - 1);
        else CHECK_(same < T / 10, "sticky:0 repeated the first ids %d times", same);
        int32_t state[8 * K];
        cudaMemcpy(state, dsticky, sizeof state, cudaMemcpyDeviceToHost);
        int others = 1; /* only layer LAYER's slots move */
        for (int i = 0; i < 8 * K; i++)
            if (i / K != LAYER) others &= state[i] == -1;
        EXPECT(others);
        if (keep) { /* the state carries to the next step: the same ids again */
            int first[K] = {ids[0], ids[1]};
            ft_cuda_synthetic_route(dids, dw, dl, 4, E, K, 7, dstep, LAYER, 1, &ss, 0);
            cudaDeviceSynchronize();
            cudaMemcpy(ids, dids, sizeof(int32_t) * 4 * K, cudaMemcpyDeviceToHost);
            for (int t = 0; t < 4; t++) EXPECT(ids[t * K] == first[0] && ids[t * K + 1] == first[1]);
        }
    }
    EXPECT_OK(ft_cuda_check("synthetic routing"));
    free(logits);
    cudaFree(dl), cudaFree(dw), cudaFree(dids), cudaFree(dstep), cudaFree((void *)sy.zipf_cdf);
    cudaFree(dsticky), cudaFree(dstats);
}

/* Fused q/k norm + RoPE + cache write, and the fused residual add + norm, against the CPU ops. */
TEST(fused_norm_rope_kv_and_add_norm) {
    enum { T = 3, NH = 6, NKV = 2, HD = 24, ROT = 16, BS = 16 };
    float *q = rnd(T * NH * HD), *k = rnd(T * NKV * HD), *v = rnd(T * NKV * HD);
    float *qn = rnd(HD), *kn = rnd(HD), inv[ROT / 2];
    for (int i = 0; i < ROT / 2; i++) inv[i] = 1.0f / powf(100.0f, 2.0f * i / ROT);
    int32_t pos[T] = {0, 21, 5}, seq[T] = {0, 0, 1}, tab[2 * 2] = {3, 1, 0, 2};
    float *dq = up(q, sizeof(float) * T * NH * HD), *dk = up(k, sizeof(float) * T * NKV * HD);
    float *dv = up(v, sizeof(float) * T * NKV * HD), *dqn = up(qn, HD * 4), *dkn = up(kn, HD * 4);
    float *dinv = up(inv, sizeof inv), *dkc = up(NULL, 4 * BS * NKV * HD * 4), *dvc = up(NULL, 4 * BS * NKV * HD * 4);
    int32_t *dpos = up(pos, sizeof pos), *dseq = up(seq, sizeof seq), *dtab = up(tab, sizeof tab);
    ft_cuda_qk_rope_kv(dq, dk, dv, dkc, dvc, dqn, dkn, 1e-6f, dpos, dinv, 1.1f, dseq, dtab, 2, BS, T,
                       NH, NKV, HD, ROT, 0);
    ft_cpu_rmsnorm(q, q, qn, T * NH, HD, 1e-6f);
    ft_cpu_rmsnorm(k, k, kn, T * NKV, HD, 1e-6f);
    ft_cpu_rope(q, pos, inv, 1.1f, T, NH, HD, ROT);
    ft_cpu_rope(k, pos, inv, 1.1f, T, NKV, HD, ROT);
    float *gq = down(dq, T * NH * HD), *kc = down(dkc, 4 * BS * NKV * HD), *vc = down(dvc, 4 * BS * NKV * HD);
    EXPECT_NMSE(gq, q, T * NH * HD, 1e-10, "fused q norm + rope");
    float gk[T * NKV * HD], gv[T * NKV * HD];
    for (int t = 0; t < T; t++) {
        size_t row = (size_t)tab[seq[t] * 2 + pos[t] / BS] * BS + pos[t] % BS;
        memcpy(gk + t * NKV * HD, kc + row * NKV * HD, NKV * HD * 4);
        memcpy(gv + t * NKV * HD, vc + row * NKV * HD, NKV * HD * 4);
    }
    EXPECT_NMSE(gk, k, T * NKV * HD, 1e-10, "fused k norm + rope -> paged cache");
    EXPECT_NMSE(gv, v, T * NKV * HD, 0, "v -> paged cache");
    /* add + norm */
    int H = 300;
    float *x = rnd(2 * H), *y = rnd(2 * H), *w = rnd(H), *ref = malloc(2 * H * 4);
    float *dx = up(x, 2 * H * 4), *dy = up(y, 2 * H * 4), *dw = up(w, H * 4), *dxn = up(NULL, 2 * H * 4);
    ft_cuda_add_rmsnorm(dx, dy, dxn, NULL, dw, 2, H, 1e-6f, 0);
    ft_cpu_add(x, y, 2 * H);
    ft_cpu_rmsnorm(ref, x, w, 2, H, 1e-6f);
    float *gx = down(dx, 2 * H), *gn = down(dxn, 2 * H);
    EXPECT_NMSE(gx, x, 2 * H, 0, "residual add");
    EXPECT_NMSE(gn, ref, 2 * H, 1e-10, "fused add + rmsnorm");
    EXPECT_OK(ft_cuda_check("fused ops"));
    free(q), free(k), free(v), free(qn), free(kn), free(gq), free(kc), free(vc);
    free(x), free(y), free(w), free(ref), free(gx), free(gn);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dqn), cudaFree(dkn), cudaFree(dinv);
    cudaFree(dkc), cudaFree(dvc), cudaFree(dpos), cudaFree(dseq), cudaFree(dtab);
    cudaFree(dx), cudaFree(dy), cudaFree(dw), cudaFree(dxn);
}

/* Fused q/k/v GEMV (three outputs) and the device-side MoE prefill (sort, tensor-core grouped
 * GEMM, un-sort) against the CPU on the same bf16-rounded activations. */
TEST(fused_qkv_and_moe_prefill) {
    int T = 5, K = 264, n0 = 72, n1 = 24, n2 = 24, N = n0 + n1 + n2;
    uint16_t *w = rnd_bf16((size_t)N * K, 0.1f);
    float *x = rnd((size_t)T * K), *b1 = rnd(n1), *ref = malloc((size_t)T * N * 4);
    ft_cpu_matmul(g_pool, ref, x, w, FT_DTYPE_BF16, NULL, T, N, K);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < n1; n++) ref[t * N + n0 + n] += b1[n];
    uint16_t *dw = up(w, (size_t)N * K * 2);
    float *dx = up(x, (size_t)T * K * 4), *db1 = up(b1, n1 * 4);
    float *dy0 = up(NULL, (size_t)T * n0 * 4), *dy1 = up(NULL, (size_t)T * n1 * 4), *dy2 = up(NULL, (size_t)T * n2 * 4);
    struct ft_cuda_gemv_args ga = {{dy0, dy1, dy2}, n0, n1, n0, {NULL, db1, NULL}, dx, dw, NULL,
                                   0.0f, NULL, 0, T, N, K};
    ft_cuda_gemv_ex(&ga, 0);
    float *y0 = down(dy0, (size_t)T * n0), *y1 = down(dy1, (size_t)T * n1), *y2 = down(dy2, (size_t)T * n2);
    float *got = malloc((size_t)T * N * 4);
    for (int t = 0; t < T; t++) {
        memcpy(got + t * N, y0 + t * n0, (size_t)n0 * 4);
        memcpy(got + t * N + n0, y1 + t * n1, (size_t)n1 * 4);
        memcpy(got + t * N + n0 + n1, y2 + t * n2, (size_t)n2 * 4);
    }
    EXPECT_NMSE(got, ref, (size_t)T * N, 1e-10, "gemv3 fused q/k/v with bias");
    free(w), free(x), free(b1), free(ref), free(y0), free(y1), free(y2), free(got);
    cudaFree(dw), cudaFree(dx), cudaFree(db1), cudaFree(dy0), cudaFree(dy1), cudaFree(dy2);
    /* MoE prefill: 70 tokens, 9 experts, top-3, H = 136 (K % 8 == 0 path) and H = 42 (tails);
     * with H = 136 every token's first choice is expert 0, whose 70 rows take three row tiles */
    int Hs[2] = {136, 42};
    for (int hv = 0; hv < 4; hv++) { /* each H with 32- and 64-row tiles */
        int hi = hv / 2, TT = 70, E = 9, k = 3, H = Hs[hi], I = 40, R = TT * k, tm = hv % 2 ? 64 : 32;
        ft_cuda_moe_set_tile_rows(tm);
        int32_t *ids = malloc((size_t)R * 4);
        float *wts = rnd(R);
        for (int t = 0; t < TT; t++)
            for (int j = 0; j < k; j++)
                ids[t * k + j] = hi == 0 ? (j == 0 ? 0 : 1 + (t * 7 + j * 2) % (E - 1))
                                         : (t * 7 + j * 2 + (t % 3 == 0 ? 0 : 1)) % E;
        uint16_t *gu = rnd_bf16((size_t)E * 2 * I * H, 0.2f), *dn = rnd_bf16((size_t)E * H * I, 0.2f);
        uint16_t *x16 = rnd_bf16((size_t)TT * H, 1.0f);
        float *xf = malloc((size_t)TT * H * 4), *ref2 = calloc((size_t)TT * H, 4);
        ft_to_f32(xf, x16, FT_DTYPE_BF16, (size_t)TT * H);
        for (int t = 0; t < TT; t++)
            for (int j = 0; j < k; j++) {
                float g[80], a[40], y[136];
                uint16_t a16[40];
                int e = ids[t * k + j];
                ft_cpu_matmul_rows(g, 2 * I, xf + t * H, H, gu + (size_t)e * 2 * I * H, FT_DTYPE_BF16, 1, 0, 2 * I, H);
                ft_cpu_silu_mul(a, g, 1, I);
                for (int i = 0; i < I; i++) a16[i] = ft_f32_to_bf16(a[i]), a[i] = ft_bf16_to_f32(a16[i]);
                ft_cpu_matmul_rows(y, H, a, I, dn + (size_t)e * H * I, FT_DTYPE_BF16, 1, 0, H, I);
                for (int h = 0; h < H; h++) ref2[t * H + h] += wts[t * k + j] * y[h];
            }
        int32_t *dids = up(ids, (size_t)R * 4), *dcnt = up(NULL, E * 4), *doff = up(NULL, ft_cuda_moe_offsets_len(E, R) * 4);
        int32_t *drtok = up(NULL, (size_t)R * 4), *dpd = up(NULL, (size_t)R * 4);
        uint16_t *dgu = up(gu, (size_t)E * 2 * I * H * 2), *ddn = up(dn, (size_t)E * H * I * 2);
        uint16_t *dx16 = up(x16, (size_t)TT * H * 2), *dxg = up(NULL, (size_t)R * H * 2);
        uint16_t *dact16 = up(NULL, (size_t)R * I * 2);
        float *dmgu = up(NULL, (size_t)R * 2 * I * 4), *dact = up(NULL, (size_t)R * I * 4);
        float *dmy = up(NULL, (size_t)R * H * 4), *dout = up(NULL, (size_t)TT * H * 4), *dw2 = up(wts, (size_t)R * 4);
        ft_cuda_moe_sort(dcnt, doff, drtok, dpd, dids, TT, k, E, 0);
        ft_cuda_gather_bf16(dxg, dx16, drtok, R, H, 0);
        ft_cuda_moe_gemm(dmgu, dxg, dgu, doff, NULL, 0, E, 2 * I, H, R, 0);
        ft_cuda_silu_mul(dact, dmgu, R, I, 0);
        ft_cuda_to_bf16(dact16, dact, (size_t)R * I, 0);
        ft_cuda_moe_gemm(dmy, dact16, ddn, doff, NULL, 0, E, H, I, R, 0);
        ft_cuda_moe_unsort(dout, dmy, dpd, dw2, TT, k, H, 0);
        float *got2 = down(dout, (size_t)TT * H);
        char what[64];
        snprintf(what, sizeof what, "moe prefill sort+wmma gemm H=%d tile %d", H, tm);
        EXPECT_NMSE(got2, ref2, (size_t)TT * H, 1e-5, what);
        EXPECT_OK(ft_cuda_check("moe prefill"));
        free(ids), free(wts), free(gu), free(dn), free(x16), free(xf), free(ref2), free(got2);
        cudaFree(dids), cudaFree(dcnt), cudaFree(doff), cudaFree(drtok), cudaFree(dpd);
        cudaFree(dgu), cudaFree(ddn), cudaFree(dx16), cudaFree(dxg), cudaFree(dact16), cudaFree(dmgu);
        cudaFree(dact), cudaFree(dmy), cudaFree(dout), cudaFree(dw2);
    }
    ft_cuda_moe_set_tile_rows(0);
}

/* Row r's exact values on the CPU: GGML blocks, or the NVFP4 / FP8_B128 rows carrying scales */
static void cpu_row(enum ft_dtype t, const uint8_t *row, float *out, int K) {
    if (t == FT_DTYPE_NVFP4) ft_nvfp4_r_dequant_row(row, (size_t)K, out);
    else if (t == FT_DTYPE_FP8_B128) ft_fp8_b128_dequant_row(row, (size_t)K, out);
    else ft_ggml_dequant_row(ft_dtype_ggml(t), row, out, K);
}

/* Experts in every GGML block format (and NVFP4 / FP8_B128 rows, also of odd widths): the prefill dequantiser is bit-identical to the CPU's
 * (bf16 of the exact value), skipping experts whose source id is negative and honouring the
 * expert stride; the decode GEMV reads the blocks and matches the CPU's block dot (fp32, only the
 * summation order differs); the chunk map selects the chunk's present experts. */
TEST(block_format_experts) {
    static const enum ft_dtype fmts[] = {FT_DTYPE_Q8_0, FT_DTYPE_Q4_0, FT_DTYPE_Q4_1,
                                         FT_DTYPE_Q5_0, FT_DTYPE_Q5_1, FT_DTYPE_Q4_K,
                                         FT_DTYPE_Q5_K, FT_DTYPE_Q6_K, FT_DTYPE_MXFP4,
                                         FT_DTYPE_NVFP4, FT_DTYPE_FP8_B128, FT_DTYPE_Q8_0,
                                         FT_DTYPE_NVFP4, FT_DTYPE_FP8_B128, FT_DTYPE_FP8_B128};
    /* Q8_0 at 160: rows of 170 bytes, so not the staged kernel (16-byte rows) but the general
     * one with half-word loads; the last three: rows of widths that are not a multiple of 8
     * (the element-wise paths) */
    static const int widths[] = {512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 160, 42, 42, 20};
    const int E = 3, N = 40, P = 5;
    uint64_t rng = 7;
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        enum ft_dtype t = fmts[f];
        const int K = widths[f];
        EXPECT(ft_cuda_block_format(t));
        size_t rb = ft_dtype_row_bytes(t, K), stride = rb * N + 64; /* padded like a slot pitch */
        uint8_t *w = calloc((size_t)E, stride);
        for (int e = 0; e < E; e++) fill_matrix(t, w + (size_t)e * stride, N, K, &rng);
        void *dw = up(w, (size_t)E * stride);
        /* dequantise experts 1 and 2 (src ids 2 and 0; id -1 at position 0 is skipped) */
        int32_t src_of[3] = {-1, 2, 0};
        int32_t *dsrc = up(src_of, sizeof src_of);
        uint16_t *ddq = up(NULL, (size_t)3 * N * K * 2);
        cudaMemset(ddq, 0xff, (size_t)3 * N * K * 2);
        ft_cuda_dequant_experts(ddq, dw, stride, t, dsrc, NULL, 0, 3, N, K, 0);
        uint16_t *dq = malloc((size_t)3 * N * K * 2);
        cudaDeviceSynchronize();
        cudaMemcpy(dq, ddq, (size_t)3 * N * K * 2, cudaMemcpyDeviceToHost);
        long bad = 0;
        float row[512];
        for (int c = 1; c < 3; c++)
            for (int r = 0; r < N; r++) {
                cpu_row(t, w + (size_t)src_of[c] * stride + (size_t)r * rb, row, K);
                for (int i = 0; i < K; i++) bad += dq[((size_t)c * N + r) * K + i] != ft_f32_to_bf16(row[i]);
            }
        for (size_t i = 0; i < (size_t)N * K; i++) bad += dq[i] != 0xffff; /* skipped: untouched */
        CHECK_(bad == 0, "%s: %ld dequantised elements differ from the CPU's", ft_dtype_name(t), bad);
        /* with the sorted rows' offsets: expert 1 has no rows, so chunk 1 stays untouched */
        int32_t offs[4] = {0, 1, 1, 3};
        int32_t *doffs = up(offs, sizeof offs);
        cudaMemset(ddq, 0xff, (size_t)3 * N * K * 2);
        ft_cuda_dequant_experts(ddq, dw, stride, t, dsrc, doffs, 0, 3, N, K, 0);
        cudaDeviceSynchronize();
        cudaMemcpy(dq, ddq, (size_t)3 * N * K * 2, cudaMemcpyDeviceToHost);
        long kept = 0, bad2 = 0;
        for (size_t i = 0; i < (size_t)N * K; i++) kept += dq[(size_t)N * K + i] == 0xffff;
        for (int r = 0; r < N; r++) {
            cpu_row(t, w + (size_t)src_of[2] * stride + (size_t)r * rb, row, K);
            for (int i = 0; i < K; i++) bad2 += dq[((size_t)2 * N + r) * K + i] != ft_f32_to_bf16(row[i]);
        }
        CHECK_(kept == (long)N * K && bad2 == 0, "%s: with offsets, %ld of %ld elements of the expert "
               "with no rows untouched, %ld of the routed one wrong", ft_dtype_name(t), kept,
               (long)N * K, bad2);
        cudaFree(doffs);
        /* decode GEMV: pairs (token p / 2 ... ) with one pair left to the CPU (id -1) */
        int32_t ids[5] = {2, 0, -1, 1, 2};
        float *x = rnd((size_t)3 * K), *ref = calloc((size_t)P * N, 4);
        for (int p = 0; p < P; p++)
            if (ids[p] >= 0)
                ft_cpu_matmul_rows(ref + (size_t)p * N, N, x + (size_t)(p / 2) * K, K,
                                   w + (size_t)ids[p] * stride, t, 1, 0, N, K);
        int32_t *dids = up(ids, sizeof ids);
        float *dx = up(x, (size_t)3 * K * 4), *dy = up(NULL, (size_t)P * N * 4);
        ft_cuda_moe_gemv_blocks_f32(dy, dx, 2, dw, stride, t, dids, P, N, K, 0);
        float *got = down(dy, (size_t)P * N);
        char what[64];
        snprintf(what, sizeof what, "moe gemv %s blocks fp32 x, K %d", ft_dtype_name(t), K);
        EXPECT_NMSE(got, ref, (size_t)P * N, 1e-10, what);
        free(got);
        /* what the engine runs with rounded activations: the int8 kernel for the formats where
         * it is faster (q8_experts checks it closely); here against the fp32 dot within the
         * int8 rounding of x (Q8_THR) */
        cudaMemset(dy, 0xff, (size_t)P * N * 4);
        ft_cuda_moe_gemv_blocks(dy, dx, 2, dw, stride, t, dids, P, N, K, 1, 0);
        got = down(dy, (size_t)P * N);
        snprintf(what, sizeof what, "moe gemv %s blocks, K %d", ft_dtype_name(t), K);
        const int q8 = ft_cuda_q8_faster(t) && ft_cuda_q8_format(t);
        EXPECT_NMSE(got, ref, (size_t)P * N, q8 ? 1e-4 : 1e-10, what);
        free(w), free(dq), free(x), free(ref), free(got);
        cudaFree(dw), cudaFree(dsrc), cudaFree(ddq), cudaFree(dids), cudaFree(dx), cudaFree(dy);
    }
    /* chunk map: experts [4, 8) of 10, expert 5 absent from the source map */
    int32_t src_of[10] = {0, 1, 2, 3, 4, -1, 6, 7, 8, 9}, want[10] = {-1, -1, -1, -1, 0, -1, 2, 3, -1, -1};
    int32_t *dsrc = up(src_of, sizeof src_of), *dmap = up(NULL, sizeof src_of), got[10];
    ft_cuda_chunk_slots(dmap, dsrc, 4, 4, 10, 0);
    cudaDeviceSynchronize();
    cudaMemcpy(got, dmap, sizeof got, cudaMemcpyDeviceToHost);
    EXPECT(memcmp(got, want, sizeof got) == 0);
    cudaFree(dsrc), cudaFree(dmap);
    EXPECT_OK(ft_cuda_check("block-format experts"));
}

/* The grouped GEMM reading block-format experts itself (ft_cuda_moe_gemm_q): for every format
 * it takes, with 32- and 64-row tiles, through a slot map with a padded pitch and one absent
 * expert, the output equals dequantise-then-GEMM (ft_cuda_dequant_experts + ft_cuda_moe_gemm)
 * bit for bit, the absent expert's rows are left alone, and every row matches the double dot of
 * the CPU's exact values rounded to bf16 (what both kernels multiply; only fp32 summation order
 * differs: NMSE 1e-10). bf16 experts against ft_cuda_moe_gemm; odd NVFP4 widths not taken. */
TEST(moe_gemm_block_formats) {
    static const enum ft_dtype fmts[] = {FT_DTYPE_Q8_0, FT_DTYPE_Q4_0, FT_DTYPE_Q4_1,
                                         FT_DTYPE_Q5_0, FT_DTYPE_Q5_1, FT_DTYPE_Q4_K,
                                         FT_DTYPE_Q5_K, FT_DTYPE_Q6_K, FT_DTYPE_MXFP4,
                                         FT_DTYPE_NVFP4, FT_DTYPE_FP8_B128, FT_DTYPE_NVFP4,
                                         FT_DTYPE_FP8_B128, FT_DTYPE_BF16};
    static const int widths[] = {512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 40, 40, 264};
    const int E = 4, N = 72, T = 37, k = 2, R = T * k, S = 3;
    const int32_t slot_of[4] = {2, 0, -1, 1}; /* expert 2 absent (another batch's) */
    EXPECT(!ft_cuda_moe_gemm_takes(FT_DTYPE_NVFP4, 42) && ft_cuda_moe_gemm_takes(FT_DTYPE_Q6_K, 256));
    int32_t ids[74], offs[5];
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) ids[t * k + j] = (3 * t + 5 * j + t / 7) % E;
    uint64_t rng = 11;
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++)
        for (int tm = 32; tm <= 64; tm += 32) {
            enum ft_dtype t = fmts[f];
            const int K = widths[f];
            EXPECT(ft_cuda_moe_gemm_takes(t, K));
            ft_cuda_moe_set_tile_rows(tm);
            size_t rb = ft_dtype_row_bytes(t, K), stride = rb * N + 64;
            uint8_t *w = calloc((size_t)S, stride);
            for (int e = 0; e < S; e++) fill_matrix(t, w + (size_t)e * stride, N, K, &rng);
            uint16_t *x = rnd_bf16((size_t)R * K, 1.0f);
            void *dw = up(w, (size_t)S * stride);
            int32_t *dids = up(ids, sizeof ids), *dcnt = up(NULL, E * 4), *drtok = up(NULL, R * 4);
            int32_t *doff = up(NULL, ft_cuda_moe_offsets_len(E, R) * 4), *dpd = up(NULL, R * 4);
            int32_t *dslot = up(slot_of, sizeof slot_of), *dchunk = up(NULL, E * 4);
            uint16_t *dx = up(x, (size_t)R * K * 2), *ddq = up(NULL, (size_t)E * N * K * 2);
            float *dy = up(NULL, (size_t)R * N * 4), *dy2 = up(NULL, (size_t)R * N * 4);
            cudaMemset(dy, 0xff, (size_t)R * N * 4), cudaMemset(dy2, 0xff, (size_t)R * N * 4);
            ft_cuda_moe_sort(dcnt, doff, drtok, dpd, dids, T, k, E, 0);
            ft_cuda_moe_gemm_q(dy, dx, dw, t, stride, doff, dslot, E, N, K, R, 0);
            if (t == FT_DTYPE_BF16) {
                ft_cuda_moe_gemm(dy2, dx, dw, doff, dslot, stride / 2, E, N, K, R, 0);
            } else {
                ft_cuda_chunk_slots(dchunk, dslot, 0, E, E, 0);
                ft_cuda_dequant_experts(ddq, dw, stride, t, dslot, doff, 0, E, N, K, 0);
                ft_cuda_moe_gemm(dy2, dx, ddq, doff, dchunk, (size_t)N * K, E, N, K, R, 0);
            }
            float *got = down(dy, (size_t)R * N), *want = down(dy2, (size_t)R * N);
            cudaMemcpy(offs, doff, sizeof offs, cudaMemcpyDeviceToHost);
            float *ref = malloc((size_t)R * N * 4), *gp = malloc((size_t)R * N * 4), *row = malloc((size_t)K * 4);
            size_t n = 0;
            long untouched = 0, absent = 0;
            for (int e = 0; e < E; e++)
                for (int i = offs[e]; i < offs[e + 1]; i++) {
                    if (slot_of[e] < 0) {
                        absent += N;
                        for (int c = 0; c < N; c++) {
                            uint32_t u;
                            memcpy(&u, &got[(size_t)i * N + c], 4);
                            untouched += u == 0xffffffffu;
                        }
                        continue;
                    }
                    for (int c = 0; c < N; c++) {
                        const uint8_t *wr = w + (size_t)slot_of[e] * stride + (size_t)c * rb;
                        if (t == FT_DTYPE_BF16) ft_to_f32(row, wr, FT_DTYPE_BF16, (size_t)K);
                        else cpu_row(t, wr, row, K);
                        double a = 0;
                        for (int q = 0; q < K; q++)
                            a += (double)ft_bf16_to_f32(ft_f32_to_bf16(row[q])) * ft_bf16_to_f32(x[(size_t)i * K + q]);
                        ref[n] = (float)a, gp[n++] = got[(size_t)i * N + c];
                    }
                }
            char what[80];
            snprintf(what, sizeof what, "moe gemm %s K %d tile %d fused", ft_dtype_name(t), K, tm);
            EXPECT_NMSE(gp, ref, n, 1e-10, what);
            CHECK_(memcmp(got, want, (size_t)R * N * 4) == 0, "%s: differs from dequantise-then-GEMM", what);
            CHECK_(absent > 0 && untouched == absent, "%s: %ld of %ld absent expert's outputs untouched",
                   what, untouched, absent);
            free(w), free(x), free(got), free(want), free(ref), free(gp), free(row);
            cudaFree(dw), cudaFree(dids), cudaFree(dcnt), cudaFree(drtok), cudaFree(doff), cudaFree(dpd);
            cudaFree(dslot), cudaFree(dchunk), cudaFree(dx), cudaFree(ddq), cudaFree(dy), cudaFree(dy2);
        }
    ft_cuda_moe_set_tile_rows(0);
    EXPECT_OK(ft_cuda_check("moe gemm block formats"));
}

/* ---- int8-activation GEMV (ggml_mmv.cu) ----
 * References: (1) the CPU's quantiser ft_ggml_quant_x32: the GPU's codes, scales and half sums
 * must be the same bits; (2) the double-precision dot of the exactly dequantised weights with
 * those quantised activations (d * c): the kernel differs only by f32 rounding of its per-block
 * terms and their sum, so Q8_EXACT_THR = 1e-9 (a wrong code, nibble or scale anywhere gives
 * NMSE > 1e-6); (3) the CPU's own x32 dot (ft_ggml_dot_rows_x32) where it has the format, the
 * same bound; (4) the fp32 dot on the unquantised x: int8 rounding per 32 elements leaves a
 * relative rms error of about (max|x| / 127) / sqrt(12) / rms(x) = 0.4% for uniform x, NMSE
 * ~2e-5, so Q8_THR = 1e-4. */
#define Q8_EXACT_THR 1e-9
#define Q8_THR 1e-4

/* The int8 grouped GEMM (moe_q8.cu). References: (1) the GEMV's quantiser (ft_cuda_quant_q8,
 * itself checked against the CPU's above) on the tokens the sorted rows come from: the same
 * codes, scales and sums; (2) the double-precision dot of the exactly dequantised weights with
 * those dequantised codes (d * c), Q8_EXACT_THR; (3) the fp32 dot on the unquantised x, Q8_THR.
 * Every format it takes, K of one and of several stages (512, 768: Q6_K rows of 630 bytes, only
 * 2-byte aligned), a second, partial tile of weight rows (N = 200), experts of 1-3 row tiles,
 * both tile sizes, and an absent expert. */
TEST(moe_gemm_int8_formats) {
    static const enum ft_dtype fmts[] = {FT_DTYPE_Q8_0, FT_DTYPE_Q4_0, FT_DTYPE_Q4_1, FT_DTYPE_Q5_0,
                                         FT_DTYPE_Q5_1, FT_DTYPE_Q4_K, FT_DTYPE_Q5_K, FT_DTYPE_Q6_K};
    const int E = 4, N = 200, k = 2, S = 3;
    const int32_t slot_of[4] = {2, 0, -1, 1}; /* expert 2 absent (another batch's) */
    EXPECT(!ft_cuda_moe_gemm_q8_takes(FT_DTYPE_MXFP4, 512, NULL, 0));
    EXPECT(ft_cuda_moe_gemm_q8_takes(FT_DTYPE_Q6_K, 768, (void *)2, 630 * 3));
    EXPECT(!ft_cuda_moe_gemm_q8_takes(FT_DTYPE_Q8_0, 480, NULL, 0));
    EXPECT(!ft_cuda_moe_gemm_q8_takes(FT_DTYPE_Q8_0, 512, (void *)8, 0));
    uint64_t rng = 29;
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++)
        for (int K = 512; K <= 768; K += 256)
            for (int T = 37; T <= 150; T += 113)
                for (int tm = 32; tm <= 64; tm += 32) {
                    enum ft_dtype t = fmts[f];
                    const int R = T * k, nb = K / 32;
                    ft_cuda_moe_set_tile_rows(tm);
                    int32_t *ids = malloc((size_t)R * 4), *offs = malloc((E + 1) * 4), *rtok = malloc((size_t)R * 4);
                    for (int i = 0; i < T; i++)
                        for (int j = 0; j < k; j++) ids[i * k + j] = (3 * i + 5 * j + i / 7) % E;
                    size_t rb = ft_dtype_row_bytes(t, K), stride = rb * N + 64;
                    uint8_t *w = calloc((size_t)S, stride);
                    for (int e = 0; e < S; e++) fill_matrix(t, w + (size_t)e * stride, N, K, &rng);
                    float *x = rnd((size_t)T * K);
                    void *dw = up(w, (size_t)S * stride);
                    EXPECT(ft_cuda_moe_gemm_q8_takes(t, K, dw, stride));
                    int32_t *dids = up(ids, (size_t)R * 4), *dcnt = up(NULL, E * 4), *drtok = up(NULL, (size_t)R * 4);
                    int32_t *doff = up(NULL, ft_cuda_moe_offsets_len(E, R) * 4), *dpd = up(NULL, (size_t)R * 4);
                    int32_t *dslot = up(slot_of, sizeof slot_of);
                    float *dx = up(x, (size_t)T * K * 4), *dy = up(NULL, (size_t)R * N * 4);
                    int8_t *dq = up(NULL, (size_t)R * K), *dq1 = up(NULL, (size_t)T * K);
                    uint8_t *dd = up(NULL, (size_t)R * nb * 8);
                    float *dd1 = up(NULL, (size_t)T * nb * 4);
                    int16_t *dh1 = up(NULL, (size_t)T * nb * 4);
                    cudaMemset(dy, 0xff, (size_t)R * N * 4);
                    ft_cuda_moe_sort(dcnt, doff, drtok, dpd, dids, T, k, E, 0);
                    ft_cuda_moe_quant(dq, dd, dx, drtok, R, K, 0);
                    ft_cuda_moe_gemm_q8(dy, dq, dd, dw, t, stride, doff, dslot, E, N, K, R, 0);
                    ft_cuda_quant_q8(dq1, dd1, dh1, dx, T, K, NULL, 0.0f, NULL, 0);
                    float *got = down(dy, (size_t)R * N);
                    int8_t *q = malloc((size_t)R * K), *q1 = malloc((size_t)T * K);
                    uint8_t *qd = malloc((size_t)R * nb * 8);
                    float *d1 = malloc((size_t)T * nb * 4);
                    int16_t *h1 = malloc((size_t)T * nb * 4);
                    cudaMemcpy(offs, doff, (E + 1) * 4, cudaMemcpyDeviceToHost);
                    cudaMemcpy(rtok, drtok, (size_t)R * 4, cudaMemcpyDeviceToHost);
                    cudaMemcpy(q, dq, (size_t)R * K, cudaMemcpyDeviceToHost);
                    cudaMemcpy(qd, dd, (size_t)R * nb * 8, cudaMemcpyDeviceToHost);
                    cudaMemcpy(q1, dq1, (size_t)T * K, cudaMemcpyDeviceToHost);
                    cudaMemcpy(d1, dd1, (size_t)T * nb * 4, cudaMemcpyDeviceToHost);
                    cudaMemcpy(h1, dh1, (size_t)T * nb * 4, cudaMemcpyDeviceToHost);
                    long bad_codes = 0;
                    for (int r = 0; r < R; r++) {
                        const int tk = rtok[r];
                        bad_codes += memcmp(q + (size_t)r * K, q1 + (size_t)tk * K, (size_t)K) != 0;
                        for (int b = 0; b < nb; b++) {
                            float dv;
                            int16_t hv[2];
                            memcpy(&dv, qd + ((size_t)r * nb + b) * 8, 4), memcpy(hv, qd + ((size_t)r * nb + b) * 8 + 4, 4);
                            bad_codes += dv != d1[(size_t)tk * nb + b] || hv[0] != h1[2 * ((size_t)tk * nb + b)] ||
                                         hv[1] != h1[2 * ((size_t)tk * nb + b) + 1];
                        }
                    }
                    char what[96];
                    snprintf(what, sizeof what, "int8 moe gemm %s K %d T %d tile %d", ft_dtype_name(t), K, T, tm);
                    CHECK_(bad_codes == 0, "%s: %ld rows' codes differ from the GEMV quantiser's", what, bad_codes);
                    float *ref = malloc((size_t)R * N * 4), *reff = malloc((size_t)R * N * 4);
                    float *gp = malloc((size_t)R * N * 4), *row = malloc((size_t)K * 4);
                    size_t n = 0;
                    long untouched = 0, absent = 0;
                    for (int e = 0; e < E; e++)
                        for (int i = offs[e]; i < offs[e + 1]; i++) {
                            const int tk = rtok[i];
                            for (int c = 0; c < N; c++) {
                                if (slot_of[e] < 0) {
                                    uint32_t u;
                                    memcpy(&u, &got[(size_t)i * N + c], 4);
                                    absent++, untouched += u == 0xffffffffu;
                                    continue;
                                }
                                cpu_row(t, w + (size_t)slot_of[e] * stride + (size_t)c * rb, row, K);
                                double a = 0, af = 0;
                                for (int j = 0; j < K; j++) {
                                    a += (double)row[j] * ((double)d1[(size_t)tk * nb + j / 32] * q1[(size_t)tk * K + j]);
                                    af += (double)row[j] * x[(size_t)tk * K + j];
                                }
                                ref[n] = (float)a, reff[n] = (float)af, gp[n++] = got[(size_t)i * N + c];
                            }
                        }
                    EXPECT_NMSE(gp, ref, n, Q8_EXACT_THR, what);
                    EXPECT_NMSE(gp, reff, n, Q8_THR, what);
                    CHECK_(absent > 0 && untouched == absent, "%s: %ld of %ld absent expert's outputs untouched",
                           what, untouched, absent);
                    free(ids), free(offs), free(rtok), free(w), free(x), free(got), free(q), free(q1), free(qd);
                    free(d1), free(h1), free(ref), free(reff), free(gp), free(row);
                    cudaFree(dw), cudaFree(dids), cudaFree(dcnt), cudaFree(drtok), cudaFree(doff), cudaFree(dpd);
                    cudaFree(dslot), cudaFree(dx), cudaFree(dy), cudaFree(dq), cudaFree(dq1), cudaFree(dd);
                    cudaFree(dd1), cudaFree(dh1);
                }
    ft_cuda_moe_set_tile_rows(0);
    EXPECT_OK(ft_cuda_check("int8 moe gemm"));
}

/* Row x (K elements) as ft_ggml_quant_x32 quantises it, unpacked: codes c[K], scales d[K / 32],
 * half sums h[2 K / 32]. */
static void cpu_q8_row(const float *x, int K, int8_t *c, float *d, int16_t *h) {
    const int nb = K / 32;
    uint8_t *xq = malloc(ft_ggml_x32_bytes(K));
    ft_ggml_quant_x32(x, K, K, 1, xq);
    for (int b = 0; b < nb; b++) {
        int ch = b / 16, cb = nb - 16 * ch < 16 ? nb - 16 * ch : 16;
        for (int j = 0; j < 32; j++)
            c[32 * b + j] = (int8_t)xq[512 * ch + 4 * cb * (j / 4) + 4 * (b % 16) + j % 4];
    }
    memcpy(d, xq + 32 * (size_t)nb, (size_t)nb * 4);
    memcpy(h, xq + 36 * (size_t)nb, (size_t)nb * 4);
    free(xq);
}

/* ref[t, n] = sum_i w_n[i] * d c_i in double over the CPU-quantised rows x[t] */
static void q8_ref(float *ref, int ldr, const uint8_t *w, size_t rb, enum ft_dtype t, int N, int K,
                   const float *x, int T) {
    int8_t *c = malloc(K);
    float *d = malloc(K / 32 * 4), *row = malloc((size_t)K * 4);
    int16_t *h = malloc(K / 32 * 4);
    for (int tt = 0; tt < T; tt++) {
        cpu_q8_row(x + (size_t)tt * K, K, c, d, h);
        for (int n = 0; n < N; n++) {
            ft_ggml_dequant_row(ft_dtype_ggml(t), w + (size_t)n * rb, row, K);
            double acc = 0;
            for (int i = 0; i < K; i++) acc += (double)row[i] * ((double)d[i / 32] * c[i]);
            ref[(size_t)tt * ldr + n] = (float)acc;
        }
    }
    free(c), free(d), free(row), free(h);
}

static const enum ft_dtype k_q8_fmts[] = {FT_DTYPE_Q8_0, FT_DTYPE_Q4_0, FT_DTYPE_Q4_1,
                                          FT_DTYPE_Q5_0, FT_DTYPE_Q5_1, FT_DTYPE_Q4_K,
                                          FT_DTYPE_Q5_K, FT_DTYPE_Q6_K, FT_DTYPE_MXFP4};

/* The GPU's activation codes are the CPU's, bit for bit: plain rows (with an all-zero block
 * and one below 1e-30, both coded 0) and rows through the fused RMSNorm (the codes of its
 * normalised output, which must match the norm computed in double). */
TEST(q8_codes_match_cpu) {
    const int Ks[] = {32, 96, 544, 2048}, R = 3;
    for (size_t a = 0; a < 4; a++) {
        const int K = Ks[a], nb = K / 32;
        float *x = rnd((size_t)R * K), *nw = rnd(K);
        for (int i = 0; i < K; i++) x[i] *= 3.0f;                     /* row 0: larger values */
        for (int i = 0; i < 32; i++) x[(size_t)K + i] = 0.0f;          /* row 1, block 0: zeros */
        if (nb > 1) for (int i = 32; i < 64; i++) x[(size_t)K + i] = 1e-35f; /* block 1: tiny */
        float *dx = up(x, (size_t)R * K * 4), *dnw = up(nw, (size_t)K * 4), *dxn = up(NULL, (size_t)R * K * 4);
        int8_t *dq = up(NULL, (size_t)R * K);
        float *dd = up(NULL, (size_t)R * nb * 4);
        int16_t *dh = up(NULL, (size_t)R * nb * 4);
        for (int norm = 0; norm < 2; norm++) {
            ft_cuda_quant_q8(dq, dd, dh, dx, R, K, norm ? dnw : NULL, 1e-6f, norm ? dxn : NULL, 0);
            cudaDeviceSynchronize();
            int8_t *gq = malloc((size_t)R * K), *cq = malloc(K);
            float *gd = malloc((size_t)R * nb * 4), *cd = malloc((size_t)nb * 4);
            int16_t *gh = malloc((size_t)R * nb * 4), *ch = malloc((size_t)nb * 4);
            float *xn = norm ? down(dxn, (size_t)R * K) : NULL;
            cudaMemcpy(gq, dq, (size_t)R * K, cudaMemcpyDeviceToHost);
            cudaMemcpy(gd, dd, (size_t)R * nb * 4, cudaMemcpyDeviceToHost);
            cudaMemcpy(gh, dh, (size_t)R * nb * 4, cudaMemcpyDeviceToHost);
            long bad = 0;
            for (int r = 0; r < R; r++) {
                const float *src = norm ? xn + (size_t)r * K : x + (size_t)r * K;
                cpu_q8_row(src, K, cq, cd, ch);
                bad += memcmp(cq, gq + (size_t)r * K, K) != 0;
                bad += memcmp(cd, gd + (size_t)r * nb, (size_t)nb * 4) != 0;
                bad += memcmp(ch, gh + (size_t)r * nb * 2, (size_t)nb * 4) != 0;
            }
            CHECK_(bad == 0, "K %d%s: %ld rows' codes, scales or sums differ from the CPU's", K,
                   norm ? " (fused norm)" : "", bad);
            EXPECT(gq[K] == 0 && gd[nb] == 0.0f); /* the zero block */
            if (norm) { /* the normalised rows against the norm in double */
                float *xr = malloc((size_t)R * K * 4);
                for (int r = 0; r < R; r++) {
                    double ss = 0;
                    for (int k = 0; k < K; k++) ss += (double)x[(size_t)r * K + k] * x[(size_t)r * K + k];
                    double rr = 1.0 / sqrt(ss / K + 1e-6);
                    for (int k = 0; k < K; k++) xr[(size_t)r * K + k] = (float)(x[(size_t)r * K + k] * rr * nw[k]);
                }
                char what[64];
                snprintf(what, sizeof what, "q8 fused norm K=%d", K);
                EXPECT_NMSE(xn, xr, (size_t)R * K, 1e-12, what);
                free(xr);
            } else if (nb > 1) {
                EXPECT(gq[(size_t)K + 32] == 0 && gq[(size_t)K + 63] == 0); /* below 1e-30: coded 0 */
            }
            free(gq), free(cq), free(gd), free(cd), free(gh), free(ch), free(xn);
        }
        free(x), free(nw);
        cudaFree(dx), cudaFree(dnw), cudaFree(dxn), cudaFree(dq), cudaFree(dd), cudaFree(dh);
    }
    EXPECT_OK(ft_cuda_check("q8 codes"));
}

/* The dense GEMV in every int8 format: T of 1, 3, 8 and 11 (two launches), K of one block row
 * step (256: no K split) and of several (2304: split over warps), N not a multiple of the
 * rows per warp; against references (2), (3) and (4) above. */
TEST(q8_gemv_dense) {
    const int Ks[] = {256, 2304, 96}, Ts[] = {1, 3, 8, 11}, N = 70;
    uint64_t rng = 99;
    for (size_t f = 0; f < sizeof k_q8_fmts / sizeof k_q8_fmts[0]; f++)
        for (size_t a = 0; a < 3; a++) {
            const enum ft_dtype t = k_q8_fmts[f];
            const int K = Ks[a], gt = ft_dtype_ggml(t);
            if (K % ft_ggml_block_size(gt)) continue; /* 96: the 32-element formats only */
            EXPECT(ft_cuda_q8_format(t));
            const size_t rb = ft_dtype_row_bytes(t, K);
            uint8_t *w = malloc(rb * N);
            fill_matrix(t, w, N, K, &rng);
            void *dw = up(w, rb * N);
            for (size_t b = 0; b < 4; b++) {
                const int T = Ts[b];
                float *x = rnd((size_t)T * K), *ref = malloc((size_t)T * N * 4), *r32 = malloc((size_t)T * N * 4);
                float *dx = up(x, (size_t)T * K * 4), *dy = up(NULL, (size_t)T * N * 4);
                struct ft_cuda_gemv_args ga = {{dy, NULL, NULL}, N, 0, N, {NULL, NULL, NULL}, dx, NULL,
                                               NULL, 0.0f, NULL, 0, T, N, K};
                ft_cuda_gemv_q8(&ga, dw, t, 0, N, 0);
                float *got = down(dy, (size_t)T * N);
                char what[80];
                q8_ref(ref, N, w, rb, t, N, K, x, T);
                snprintf(what, sizeof what, "q8 gemv %s T=%d K=%d", ft_dtype_name(t), T, K);
                EXPECT_NMSE(got, ref, (size_t)T * N, Q8_EXACT_THR, what);
                if (ft_ggml_x32_supported(gt)) { /* the CPU's own int8 dot */
                    void *xq = malloc(ft_ggml_x32_bytes(K) * T);
                    ft_ggml_quant_x32(x, K, K, T, xq);
                    ft_ggml_dot_rows_x32(gt, w, rb, N, xq, T, r32, N);
                    snprintf(what, sizeof what, "  vs the CPU x32 dot");
                    EXPECT_NMSE(got, r32, (size_t)T * N, Q8_EXACT_THR, what);
                    free(xq);
                }
                ft_cpu_matmul_rows(r32, N, x, K, w, t, T, 0, N, K);
                snprintf(what, sizeof what, "  vs the fp32 dot");
                EXPECT_NMSE(got, r32, (size_t)T * N, Q8_THR, what);
                free(x), free(ref), free(r32), free(got);
                cudaFree(dx), cudaFree(dy);
            }
            free(w);
            cudaFree(dw);
        }
    EXPECT_OK(ft_cuda_check("q8 gemv dense"));
}

/* A stacked matrix of two formats (Q4_K rows then Q6_K rows, as a Q4_K_M file's q|k|v may be),
 * one launch per part, into three outputs whose split points are not the parts' boundary, with
 * biases, the accumulate epilogue and the fused norm (its normalised rows stored too); the
 * reference quantises those normalised rows on the CPU. */
TEST(q8_gemv_stacked_parts) {
    const int K = 512, NA = 44, NB = 29, N = NA + NB, n0 = 30, n1 = 25, T = 3;
    uint64_t rng = 5;
    const size_t ra = ft_dtype_row_bytes(FT_DTYPE_Q4_K, K), rbb = ft_dtype_row_bytes(FT_DTYPE_Q6_K, K);
    uint8_t *w = malloc(ra * NA + rbb * NB);
    fill_matrix(FT_DTYPE_Q4_K, w, NA, K, &rng);
    fill_matrix(FT_DTYPE_Q6_K, w + ra * NA, NB, K, &rng);
    float *x = rnd((size_t)T * K), *nw = rnd(K), *b0 = rnd(n0), *b2 = rnd(N - n0 - n1);
    float *y0 = rnd((size_t)T * n0), *y1 = rnd((size_t)T * n1), *y2 = rnd((size_t)T * (N - n0 - n1));
    uint8_t *dw = up(w, ra * NA + rbb * NB);
    float *dx = up(x, (size_t)T * K * 4), *dnw = up(nw, (size_t)K * 4), *dxn = up(NULL, (size_t)T * K * 4);
    float *db0 = up(b0, (size_t)n0 * 4), *db2 = up(b2, (size_t)(N - n0 - n1) * 4);
    float *dy0 = up(y0, (size_t)T * n0 * 4), *dy1 = up(y1, (size_t)T * n1 * 4);
    float *dy2 = up(y2, (size_t)T * (N - n0 - n1) * 4);
    struct ft_cuda_gemv_args ga = {{dy0, dy1, dy2}, n0, n1, n0, {db0, NULL, db2}, dx, NULL, dnw,
                                   1e-6f, dxn, 1, T, N, K};
    ft_cuda_gemv_q8(&ga, dw, FT_DTYPE_Q4_K, 0, NA, 0);
    ft_cuda_gemv_q8(&ga, dw + ra * NA, FT_DTYPE_Q6_K, NA, NB, 0);
    float *xn = down(dxn, (size_t)T * K), *full = malloc((size_t)T * N * 4);
    q8_ref(full, N, w, ra, FT_DTYPE_Q4_K, NA, K, xn, T);
    q8_ref(full + NA, N, w + ra * NA, rbb, FT_DTYPE_Q6_K, NB, K, xn, T);
    float *ref[3] = {malloc((size_t)T * n0 * 4), malloc((size_t)T * n1 * 4), malloc((size_t)T * (N - n0 - n1) * 4)};
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            int o = n < n0 ? 0 : n < n0 + n1 ? 1 : 2, col = n - (o > 0 ? n0 : 0) - (o > 1 ? n1 : 0);
            int ld = o == 0 ? n0 : o == 1 ? n1 : N - n0 - n1;
            const float *yi = o == 0 ? y0 : o == 1 ? y1 : y2, *bi = o == 0 ? b0 : o == 2 ? b2 : NULL;
            ref[o][(size_t)t * ld + col] = yi[(size_t)t * ld + col] + full[(size_t)t * N + n] + (bi ? bi[col] : 0.0f);
        }
    float *g0 = down(dy0, (size_t)T * n0), *g1 = down(dy1, (size_t)T * n1), *g2 = down(dy2, (size_t)T * (N - n0 - n1));
    EXPECT_NMSE(g0, ref[0], (size_t)T * n0, Q8_EXACT_THR, "q8 stacked parts: output 0");
    EXPECT_NMSE(g1, ref[1], (size_t)T * n1, Q8_EXACT_THR, "q8 stacked parts: output 1");
    EXPECT_NMSE(g2, ref[2], (size_t)T * (N - n0 - n1), Q8_EXACT_THR, "q8 stacked parts: output 2");
    free(w), free(x), free(nw), free(b0), free(b2), free(y0), free(y1), free(y2), free(xn), free(full);
    free(ref[0]), free(ref[1]), free(ref[2]), free(g0), free(g1), free(g2);
    cudaFree(dw), cudaFree(dx), cudaFree(dnw), cudaFree(dxn), cudaFree(db0), cudaFree(db2);
    cudaFree(dy0), cudaFree(dy1), cudaFree(dy2);
    EXPECT_OK(ft_cuda_check("q8 stacked parts"));
}

/* Experts through the int8 kernel: pairs sharing tokens (x_div 2), a pair left to the CPU (-1:
 * zeros) and one to another launch (-2: untouched), an expert stride padded to 16 bytes (the
 * formats' aligned loads) and to 2 (the byte-load variant), K with and without a K split. */
TEST(q8_experts) {
    const int E = 3, N = 37, P = 6, Ks[] = {256, 1280};
    const int32_t ids[6] = {2, 0, -1, 1, -2, 2};
    uint64_t rng = 17;
    for (size_t f = 0; f < sizeof k_q8_fmts / sizeof k_q8_fmts[0]; f++)
        for (int a = 0; a < 2; a++)
            for (int pad = 0; pad < 2; pad++) {
                const enum ft_dtype t = k_q8_fmts[f];
                const int K = Ks[a];
                const size_t rb = ft_dtype_row_bytes(t, K), stride = rb * N + (pad ? 2 : 64);
                uint8_t *w = calloc((size_t)E, stride);
                for (int e = 0; e < E; e++) fill_matrix(t, w + (size_t)e * stride, N, K, &rng);
                float *x = rnd((size_t)3 * K), *ref = malloc((size_t)P * N * 4), *r32 = malloc((size_t)P * N * 4);
                for (int p = 0; p < P; p++) {
                    for (int n = 0; n < N; n++) ref[(size_t)p * N + n] = r32[(size_t)p * N + n] = ids[p] == -2 ? 7.0f : 0.0f;
                    if (ids[p] < 0) continue;
                    q8_ref(ref + (size_t)p * N, N, w + (size_t)ids[p] * stride, rb, t, N, K, x + (size_t)(p / 2) * K, 1);
                    ft_cpu_matmul_rows(r32 + (size_t)p * N, N, x + (size_t)(p / 2) * K, K,
                                       w + (size_t)ids[p] * stride, t, 1, 0, N, K);
                }
                void *dw = up(w, (size_t)E * stride);
                int32_t *dids = up(ids, sizeof ids);
                float *init = malloc((size_t)P * N * 4); /* garbage, the -2 pair's rows 7 */
                for (size_t i = 0; i < (size_t)P * N; i++) init[i] = i / N == 4 ? 7.0f : 1e30f;
                float *dx = up(x, (size_t)3 * K * 4), *dy = up(init, (size_t)P * N * 4);
                free(init);
                ft_cuda_moe_gemv_q8(dy, dx, 2, dw, stride, t, dids, P, N, K, 0);
                float *got = down(dy, (size_t)P * N);
                char what[80];
                snprintf(what, sizeof what, "q8 experts %s K=%d stride%s", ft_dtype_name(t), K,
                         pad ? " +2" : " +64");
                EXPECT_NMSE(got, ref, (size_t)P * N, Q8_EXACT_THR, what);
                EXPECT_NMSE(got, r32, (size_t)P * N, Q8_THR, "  vs the fp32 dot");
                long kept = 0;
                for (int n = 0; n < N; n++) kept += got[(size_t)4 * N + n] == 7.0f && got[(size_t)2 * N + n] == 0.0f;
                CHECK_(kept == N, "%s: pairs -1 / -2: %ld of %d rows right", ft_dtype_name(t), kept, N);
                free(w), free(x), free(ref), free(r32), free(got);
                cudaFree(dw), cudaFree(dids), cudaFree(dx), cudaFree(dy);
            }
    EXPECT_OK(ft_cuda_check("q8 experts"));
}

static double max_abs_err(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

static struct ft_engine *cuda_engine(const struct ft_model *m, int ctx, int graphs, int fast) {
    struct ft_engine_opts eo = {.max_ctx = ctx, .max_chunk = 64, .kv_tokens = 4 * ctx,
                                .backend = FT_BACKEND_CUDA, .no_graphs = !graphs, .cpu_act_fast = fast};
    struct ft_engine *e = NULL;
    EXPECT_OK(ft_engine_init(&e, m, g_pool, &eo));
    return e;
}

/* The GGUF fixtures through the cuda backend with rounded activations (cpu_act_fast, the CLI's
 * default: block-format dense weights kept in blocks and every block matmul of decode on int8
 * activations), under the policy test_model_fixtures' check_int8 gives the CPU's int8 path:
 * the prompt's logits within tol of transformers' at 90% of the positions at least, and decode
 * (the prompt one token at a time) within tol of the exact cuda engine at 90% of the steps (a
 * router of these tiny random models that nearly ties may pick another expert; greedy tokens
 * are not compared, the random-block fixtures' top-1 margins go down to 0.01). tol: 0.1, 0.3
 * for gpt_oss_mxfp4 (hidden size 32: one int8 block a row; logits of sd 2). The fast engine's
 * graph replays equal its eager steps bit for bit (the int8 kernels are deterministic). */
TEST(gguf_fixtures_int8_through_cuda) {
    const char *fx[] = {"qwen2_q4km", "llama_q40", "qwen3moe_q4km", "qwen2moe_q8", "gpt_oss_mxfp4"};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        const double tol = strstr(fx[i], "gpt_oss") ? 0.3 : 0.1;
        char path[512], refp[512];
        snprintf(path, sizeof path, "%s/gguf/models/%s.gguf", FT_TEST_DATA, fx[i]);
        snprintf(refp, sizeof refp, "%s/gguf/models/%s.ref.safetensors", FT_TEST_DATA, fx[i]);
        struct ft_st_file *f = NULL;
        struct ft_model *m = NULL;
        EXPECT_OK(ft_st_open(refp, &f));
        EXPECT_OK(ft_model_load(path, &m));
        if (!f || !m) {
            ft_model_free(m), ft_st_close(f);
            continue;
        }
        const int32_t *ids = ft_st_find(f, "ids")->data;
        const float *ref = ft_st_find(f, "logits")->data;
        const int T = (int)ft_st_find(f, "ids")->shape[0], V = m->vocab;
        struct ft_engine *e8 = cuda_engine(m, T + 4, 1, 1), *eager = cuda_engine(m, T + 4, 0, 1);
        struct ft_engine *e32 = cuda_engine(m, T + 4, 1, 0);
        float *lg = malloc((size_t)T * V * 4), *l8 = malloc((size_t)V * 4), *le = malloc((size_t)V * 4);
        float *l32 = malloc((size_t)V * 4);
        int over = 0, dec_over = 0, replay_diff = 0;
        double worst = 0, dec_worst = 0;
        if (e8 && eager && e32) {
            EXPECT_OK(ft_engine_prefill(e8, ids, T, lg, 1));
            for (int t = 0; t < T; t++) {
                double d = max_abs_err(lg + (size_t)t * V, ref + (size_t)t * V, (size_t)V);
                over += !(d <= tol);
                if (!(d <= worst)) worst = d;
            }
            ft_engine_reset(e8);
            for (int t = 0; t < T; t++) {
                EXPECT_OK(ft_engine_forward(e8, ids + t, 1, l8, 0));
                EXPECT_OK(ft_engine_forward(eager, ids + t, 1, le, 0));
                EXPECT_OK(ft_engine_forward(e32, ids + t, 1, l32, 0));
                replay_diff += memcmp(l8, le, (size_t)V * 4) != 0;
                double d = max_abs_err(l8, l32, (size_t)V);
                dec_over += !(d <= tol);
                if (!(d <= dec_worst)) dec_worst = d;
            }
        }
        fprintf(stderr, "  %-14s int8: prompt |dlogit| vs transformers > %.2g at %d of %d positions "
                "(max %.2e); decode vs exact > %.2g at %d of %d steps (max %.2e)\n", fx[i], tol, over,
                T, worst, tol, dec_over, T, dec_worst);
        CHECK_(over * 10 <= T, "%s int8: %d of %d prompt positions off transformers by more than %g",
               fx[i], over, T, tol);
        CHECK_(dec_over * 10 <= T, "%s int8: %d of %d decode steps off the exact engine by more than %g",
               fx[i], dec_over, T, tol);
        CHECK_(replay_diff == 0, "%s int8: %d graph replays differ from eager", fx[i], replay_diff);
        free(lg), free(l8), free(le), free(l32);
        ft_engine_free(e8), ft_engine_free(eager), ft_engine_free(e32);
        ft_model_free(m);
        ft_st_close(f);
    }
}

/* --- Gated DeltaNet: the chunked prefill kernels against the recurrent ones and a double
 * recurrence on the host (the recurrence gdn_rule_task in engine/forward.c runs), over
 * segments of awkward lengths in permuted state slots from a random non-zero state. --- */

/* The host reference of one step: conv (+ SiLU) in place over x's first Cc columns, then the
 * rule into out [T][Hv dv], state [slot][Cc (K-1) + Hv dk dv] advanced; in double. */
static void gdn_host_step(float *x, int ldx, int b_off, int a_off, float *out, float *state,
                          size_t slot_floats, const int *t0, const int *slot, int n_segs, int Hk,
                          int Hv, int dk, int dv, int K, const float *w, const float *A,
                          const float *dt) {
    const int Dk = Hk * dk, Dv = Hv * dv, Cc = 2 * Dk + Dv;
    double *S = malloc((size_t)dk * dv * sizeof(double)), *o = malloc((size_t)dv * sizeof(double));
    for (int s = 0; s < n_segs; s++) {
        float *st = state + (size_t)slot[s] * slot_floats;
        for (int c = 0; c < Cc; c++) {
            float *win = st + (size_t)c * (K - 1);
            for (int t = t0[s]; t < t0[s + 1]; t++) {
                float *u = x + (size_t)t * ldx + c, raw = *u;
                double y = (double)w[(size_t)c * K + K - 1] * raw;
                for (int q = 0; q < K - 1; q++) y += (double)w[(size_t)c * K + q] * win[q];
                for (int q = 0; q + 1 < K - 1; q++) win[q] = win[q + 1];
                if (K > 1) win[K - 2] = raw;
                *u = (float)(y / (1.0 + exp(-y)));
            }
        }
        for (int h = 0; h < Hv; h++) {
            float *Sf = st + (size_t)(K - 1) * Cc + (size_t)h * dk * dv;
            const int kh = h / (Hv / Hk);
            for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] = Sf[i];
            for (int t = t0[s]; t < t0[s + 1]; t++) {
                const float *row = x + (size_t)t * ldx, *q = row + (size_t)kh * dk, *k = q + Dk;
                double sq = 0, sk = 0;
                for (int a = 0; a < dk; a++) sq += (double)q[a] * q[a], sk += (double)k[a] * k[a];
                const double rq = 1.0 / sqrt((double)dk) / sqrt(sq + 1e-6), rk = 1.0 / sqrt(sk + 1e-6);
                const double beta = 1.0 / (1.0 + exp(-(double)row[b_off + h]));
                const double xa = (double)row[a_off + h] + dt[h], sp = xa > 20.0 ? xa : log1p(exp(xa));
                const double decay = exp((double)A[h] * sp);
                for (int c = 0; c < dv; c++) {
                    double pred = 0;
                    for (int a = 0; a < dk; a++) S[(size_t)a * dv + c] *= decay, pred += k[a] * rk * S[(size_t)a * dv + c];
                    const double d = beta * (row[2 * Dk + (size_t)h * dv + c] - pred);
                    o[c] = 0;
                    for (int a = 0; a < dk; a++) S[(size_t)a * dv + c] += k[a] * rk * d, o[c] += q[a] * rq * S[(size_t)a * dv + c];
                    out[(size_t)t * Dv + (size_t)h * dv + c] = (float)o[c];
                }
            }
            for (size_t i = 0; i < (size_t)dk * dv; i++) Sf[i] = (float)S[i];
        }
    }
    free(S), free(o);
}

/* max |a - b| over max |b| (b the reference), printed and bounded */
static int gdn_close(const float *a, const float *b, size_t n, double tol, const char *what) {
    double mb = 0;
    for (size_t i = 0; i < n; i++) if (fabs(b[i]) > mb) mb = fabs(b[i]);
    const double e = max_abs_err(a, b, n), rel = mb > 0 ? e / mb : e;
    fprintf(stderr, "  %-44s max abs %.2e  rel %.2e (bound %.0e)\n", what, e, rel, tol);
    return rel <= tol;
}

TEST(gdn_chunked_matches_recurrent) {
    /* corr: keys nearly alike, beta near 1 and decay near 1 (the hard case for (I + A)^-1) */
    struct { int Hk, Hv, dk, dv, K, corr; } shapes[] = {{2, 4, 128, 128, 4, 0}, {1, 2, 16, 24, 4, 0},
                                                         {3, 3, 32, 40, 3, 0},  {1, 4, 18, 20, 2, 0},
                                                         {2, 4, 128, 128, 4, 1}};
    const int lens[] = {1, 5, 63, 64, 65, 200, 0, 130, 9}, n_segs = (int)(sizeof lens / sizeof lens[0]);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int Hk = shapes[si].Hk, Hv = shapes[si].Hv, dk = shapes[si].dk, dv = shapes[si].dv, K = shapes[si].K;
        const char *tag = shapes[si].corr ? "alike " : "";
        const int Dk = Hk * dk, Dv = Hv * dv, Cc = 2 * Dk + Dv;
        const int b_off = Cc + Dv, a_off = b_off + Hv, ldx = a_off + Hv + 3; /* q k v | z | b | a | pad */
        int t0[16], slot[16], T = 0;
        const int n_slots = n_segs + 1; /* slot n_segs is used by no segment: it must stay as it is */
        for (int s = 0; s < n_segs; s++) t0[s] = T, T += lens[s], slot[s] = (s * 4 + 3) % n_segs;
        t0[n_segs] = T;
        const size_t slot_floats = (size_t)Cc * (K - 1) + (size_t)Hv * dk * dv + 7;
        const size_t layer_off = 5; /* the layer's state is not at the slot's start */
        float *x = rnd((size_t)T * ldx), *st = rnd(n_slots * slot_floats), *w = rnd((size_t)Cc * K);
        float A[8], dt[8];
        for (int i = 0; i < (int)((size_t)T * ldx); i++) x[i] *= 2.0f;
        for (int t = 0; shapes[si].corr && t < T; t++) {
            for (int c = 0; c < Dk; c++) x[(size_t)t * ldx + Dk + c] = x[Dk + c] + 0.02f * frand();
            for (int h = 0; h < Hv; h++) x[(size_t)t * ldx + b_off + h] = 6.0f, x[(size_t)t * ldx + a_off + h] = -8.0f;
        }
        for (size_t i = 0; i < n_slots * slot_floats; i++) st[i] *= 0.5f;
        for (int h = 0; h < Hv; h++) A[h] = -expf(1.2f * frand()), dt[h] = 2.0f * frand() - 1.0f;
        A[0] = -0.01f; /* a head that barely forgets */
        int32_t segtab[32];
        for (int s = 0; s <= n_segs; s++) segtab[s] = t0[s];
        for (int s = 0; s < n_segs; s++) segtab[n_segs + 1 + s] = slot[s];
        int32_t *dseg = up(segtab, (size_t)(2 * n_segs + 1) * 4);
        float *dx1 = up(x, (size_t)T * ldx * 4), *dx2 = up(x, (size_t)T * ldx * 4);
        float *dst1 = up(st, n_slots * slot_floats * 4), *dst2 = up(st, n_slots * slot_floats * 4);
        float *dw = up(w, (size_t)Cc * K * 4), *dA = up(A, Hv * 4), *ddt = up(dt, Hv * 4);
        float *do1 = up(NULL, (size_t)T * Dv * 4), *do2 = up(NULL, (size_t)T * Dv * 4);
        float *dscr = up(NULL, ft_cuda_gdn_chunk_scratch(Hk, Hv, dk, dv, K, T, n_segs) * 4);
        struct ft_cuda_gdn g1 = {dst1 + layer_off, slot_floats, 0, dseg, dseg + n_segs + 1, Hk, Hv, dk, dv, K};
        struct ft_cuda_gdn g2 = g1;
        g2.state = dst2 + layer_off;
        /* host reference from the same inputs (layer_off applied through the state pointer) */
        float *hx = malloc((size_t)T * ldx * 4), *hst = malloc(n_slots * slot_floats * 4);
        float *ho = calloc((size_t)T * Dv, 4);
        memcpy(hx, x, (size_t)T * ldx * 4), memcpy(hst, st, n_slots * slot_floats * 4);
        gdn_host_step(hx, ldx, b_off, a_off, ho, hst + layer_off, slot_floats, t0, slot, n_segs, Hk, Hv,
                      dk, dv, K, w, A, dt);
        char what[96];
        ft_cuda_gdn_conv(dx1, ldx, &g1, dw, n_segs, 0);
        ft_cuda_gdn_conv_chunked(dx2, ldx, &g2, dw, T, n_segs, dscr, 0);
        float *x1 = down(dx1, (size_t)T * ldx), *x2 = down(dx2, (size_t)T * ldx);
        float *c1 = malloc((size_t)T * Cc * 4), *c2 = malloc((size_t)T * Cc * 4), *ch = malloc((size_t)T * Cc * 4);
        for (int t = 0; t < T; t++) {
            memcpy(c1 + (size_t)t * Cc, x1 + (size_t)t * ldx, (size_t)Cc * 4);
            memcpy(c2 + (size_t)t * Cc, x2 + (size_t)t * ldx, (size_t)Cc * 4);
            memcpy(ch + (size_t)t * Cc, hx + (size_t)t * ldx, (size_t)Cc * 4);
        }
        snprintf(what, sizeof what, "%sHk %d Hv %d dk %d dv %d K %d conv chunked/recurrent", tag, Hk, Hv, dk, dv, K);
        CHECK_(gdn_close(c2, c1, (size_t)T * Cc, 1e-6, what), "%s", what);
        snprintf(what, sizeof what, "%sHk %d Hv %d dk %d dv %d K %d conv recurrent/host", tag, Hk, Hv, dk, dv, K);
        CHECK_(gdn_close(c1, ch, (size_t)T * Cc, 1e-5, what), "%s", what);
        ft_cuda_gdn_rule(do1, dx1, ldx, b_off, a_off, &g1, dA, ddt, n_segs, 0);
        ft_cuda_gdn_rule_chunked(do2, dx2, ldx, b_off, a_off, &g2, dA, ddt, T, n_segs, dscr, 0);
        float *o1 = down(do1, (size_t)T * Dv), *o2 = down(do2, (size_t)T * Dv);
        float *s1 = down(dst1, n_slots * slot_floats), *s2 = down(dst2, n_slots * slot_floats);
        EXPECT_OK(ft_cuda_check("gdn chunked"));
        snprintf(what, sizeof what, "%sHk %d Hv %d dk %d dv %d K %d rule chunked/recurrent", tag, Hk, Hv, dk, dv, K);
        CHECK_(gdn_close(o2, o1, (size_t)T * Dv, 2e-5, what), "%s", what);
        snprintf(what, sizeof what, "%sHk %d Hv %d dk %d dv %d K %d rule chunked/host", tag, Hk, Hv, dk, dv, K);
        CHECK_(gdn_close(o2, ho, (size_t)T * Dv, 5e-5, what), "%s", what);
        snprintf(what, sizeof what, "%sHk %d Hv %d dk %d dv %d K %d rule recurrent/host", tag, Hk, Hv, dk, dv, K);
        CHECK_(gdn_close(o1, ho, (size_t)T * Dv, 5e-5, what), "%s", what);
        snprintf(what, sizeof what, "%sHk %d Hv %d dk %d dv %d K %d state chunked/recurrent", tag, Hk, Hv, dk, dv, K);
        CHECK_(gdn_close(s2, s1, n_slots * slot_floats, 2e-5, what), "%s", what);
        snprintf(what, sizeof what, "%sHk %d Hv %d dk %d dv %d K %d state chunked/host", tag, Hk, Hv, dk, dv, K);
        CHECK_(gdn_close(s2, hst, n_slots * slot_floats, 5e-5, what), "%s", what);
        /* the unused slot and the floats around the layer's state untouched */
        long moved = 0;
        for (size_t i = 0; i < n_slots * slot_floats; i++) {
            const size_t in_slot = i % slot_floats, sl = i / slot_floats;
            const int used = sl < (size_t)n_segs && in_slot >= layer_off &&
                             in_slot < layer_off + (size_t)Cc * (K - 1) + (size_t)Hv * dk * dv;
            if (!used) moved += s2[i] != st[i];
        }
        CHECK_(moved == 0, "%ld state floats outside the layer's state changed", moved);
        free(x), free(st), free(w), free(hx), free(hst), free(ho), free(x1), free(x2), free(c1), free(c2),
            free(ch), free(o1), free(o2), free(s1), free(s2);
        cudaFree(dseg), cudaFree(dx1), cudaFree(dx2), cudaFree(dst1), cudaFree(dst2), cudaFree(dw),
            cudaFree(dA), cudaFree(ddt), cudaFree(do1), cudaFree(do2), cudaFree(dscr);
    }
}

/* The Qwen3.6-35B-A3B shape (16 key heads, 32 value heads, dk = dv = 128, conv 4): one 512-token
 * prompt, then four prompts of 100, 300, 1 and 111 tokens in one step; the chunked kernels
 * against the recurrent ones (outputs and states), and the time of each (printed). */
TEST(gdn_chunked_at_qwen36_shape) {
    const int Hk = 16, Hv = 32, dk = 128, dv = 128, K = 4, Dk = Hk * dk, Dv = Hv * dv, Cc = 2 * Dk + Dv;
    const int b_off = Cc + Dv, a_off = b_off + Hv, ldx = a_off + Hv;
    const int lens_a[] = {512}, lens_b[] = {100, 300, 1, 111};
    const int *lens[2] = {lens_a, lens_b}, n_of[2] = {1, 4};
    for (int cse = 0; cse < 2; cse++) {
        const int n_segs = n_of[cse];
        int32_t segtab[16];
        int T = 0;
        for (int s = 0; s < n_segs; s++) segtab[s] = T, T += lens[cse][s], segtab[n_segs + 1 + s] = n_segs - 1 - s;
        segtab[n_segs] = T;
        const size_t slot_floats = (size_t)Cc * (K - 1) + (size_t)Hv * dk * dv;
        float *x = rnd((size_t)T * ldx), *st = rnd(n_segs * slot_floats), *w = rnd((size_t)Cc * K);
        float A[32], dt[32];
        for (size_t i = 0; i < n_segs * slot_floats; i++) st[i] *= 0.1f;
        for (int h = 0; h < Hv; h++) A[h] = -expf(2.0f * frand() + 1.0f), dt[h] = frand() - 3.0f;
        int32_t *dseg = up(segtab, (size_t)(2 * n_segs + 1) * 4);
        float *dx0 = up(x, (size_t)T * ldx * 4), *dx = up(NULL, (size_t)T * ldx * 4);
        float *dst0 = up(st, n_segs * slot_floats * 4), *dst = up(NULL, n_segs * slot_floats * 4);
        float *dw = up(w, (size_t)Cc * K * 4), *dA = up(A, Hv * 4), *ddt = up(dt, Hv * 4);
        float *dout = up(NULL, (size_t)T * Dv * 4);
        float *dscr = up(NULL, ft_cuda_gdn_chunk_scratch(Hk, Hv, dk, dv, K, T, n_segs) * 4);
        struct ft_cuda_gdn g = {dst, slot_floats, 0, dseg, dseg + n_segs + 1, Hk, Hv, dk, dv, K};
        float *res[2][2] = {{NULL, NULL}, {NULL, NULL}}; /* [recurrent, chunked][out, state] */
        double ms[2] = {0, 0};
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        for (int rep = 0; rep < 4; rep++)
            for (int chunked = 0; chunked < 2; chunked++) {
                cudaMemcpy(dx, dx0, (size_t)T * ldx * 4, cudaMemcpyDeviceToDevice);
                cudaMemcpy(dst, dst0, n_segs * slot_floats * 4, cudaMemcpyDeviceToDevice);
                cudaEventRecord(e0, 0);
                if (chunked) {
                    ft_cuda_gdn_conv_chunked(dx, ldx, &g, dw, T, n_segs, dscr, 0);
                    ft_cuda_gdn_rule_chunked(dout, dx, ldx, b_off, a_off, &g, dA, ddt, T, n_segs, dscr, 0);
                } else {
                    ft_cuda_gdn_conv(dx, ldx, &g, dw, n_segs, 0);
                    ft_cuda_gdn_rule(dout, dx, ldx, b_off, a_off, &g, dA, ddt, n_segs, 0);
                }
                cudaEventRecord(e1, 0);
                cudaEventSynchronize(e1);
                float t_ms = 0;
                cudaEventElapsedTime(&t_ms, e0, e1);
                if (rep > 0) ms[chunked] += t_ms / 3.0; /* the first run warms up */
                if (rep == 0) res[chunked][0] = down(dout, (size_t)T * Dv), res[chunked][1] = down(dst, n_segs * slot_floats);
            }
        EXPECT_OK(ft_cuda_check("gdn at the Qwen3.6 shape"));
        char what[96];
        snprintf(what, sizeof what, "Qwen3.6 shape, %d segment(s), T %d: out", n_segs, T);
        CHECK_(gdn_close(res[1][0], res[0][0], (size_t)T * Dv, 2e-5, what), "%s", what);
        snprintf(what, sizeof what, "Qwen3.6 shape, %d segment(s), T %d: state", n_segs, T);
        CHECK_(gdn_close(res[1][1], res[0][1], n_segs * slot_floats, 2e-5, what), "%s", what);
        fprintf(stderr, "  conv + rule of one layer: recurrent %.3f ms, chunked %.3f ms (%.1fx)\n", ms[0], ms[1],
                ms[1] > 0 ? ms[0] / ms[1] : 0.0);
        cudaEventDestroy(e0), cudaEventDestroy(e1);
        for (int i = 0; i < 4; i++) free(res[i / 2][i % 2]);
        free(x), free(st), free(w);
        cudaFree(dseg), cudaFree(dx0), cudaFree(dx), cudaFree(dst0), cudaFree(dst), cudaFree(dw),
            cudaFree(dA), cudaFree(ddt), cudaFree(dout), cudaFree(dscr);
    }
}

/* DSA's top-k (ft_cuda_dsa_topk) against a host reference: (score desc, position asc), the first
 * k, ascending. Scores random, or drawn from 5 values (ties everywhere), or all equal; n up to
 * 40,000; k < n and k >= n. The first differing position is printed. */
static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }
static const float *g_sc;
static int cmp_rank(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    if (g_sc[x] != g_sc[y]) return g_sc[x] > g_sc[y] ? -1 : 1;
    return x - y;
}
TEST(dsa_topk_matches_host) {
    const int ns[] = {1, 5, 6, 7, 100, 1000, 2049, 40000}, ks[] = {1, 6, 2048};
    for (int kind = 0; kind < 3; kind++)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++) {
                const int n = ns[a], k = ks[b], rows = 3;
                float *sc = malloc((size_t)rows * n * 4);
                int32_t pos[3];
                for (int r = 0; r < rows; r++) {
                    pos[r] = n - 1 - r * (n / 4); /* each row's context shorter than the last */
                    for (int p = 0; p < n; p++) {
                        float v = frand();
                        sc[(size_t)r * n + p] = kind == 0 ? v : kind == 1 ? (float)((int)(v * 2.5f + 2.5f)) * 0.5f : 0.25f;
                    }
                    if (kind == 1 && n > 3) sc[(size_t)r * n + 2] = -0.0f, sc[(size_t)r * n + 3] = 0.0f;
                }
                float *dsc = up(sc, (size_t)rows * n * 4);
                int32_t *dpos = up(pos, sizeof pos), *dsel = up(NULL, (size_t)rows * k * 4), *dn = up(NULL, rows * 4);
                ft_cuda_dsa_topk(dsel, dn, k, dsc, n, dpos, 0, rows, NULL);
                int32_t *sel = malloc((size_t)rows * k * 4), nsel[3];
                cudaDeviceSynchronize();
                cudaMemcpy(sel, dsel, (size_t)rows * k * 4, cudaMemcpyDeviceToHost);
                cudaMemcpy(nsel, dn, sizeof nsel, cudaMemcpyDeviceToHost);
                int *ord = malloc((size_t)n * sizeof *ord), ok = cudaGetLastError() == cudaSuccess;
                for (int r = 0; r < rows && ok; r++) {
                    const int m = pos[r] + 1, want = m < k ? m : k;
                    for (int p = 0; p < m; p++) ord[p] = p;
                    g_sc = sc + (size_t)r * n;
                    qsort(ord, (size_t)m, sizeof *ord, cmp_rank);
                    qsort(ord, (size_t)want, sizeof *ord, cmp_int);
                    if (nsel[r] != want) {
                        fprintf(stderr, "  kind %d n %d k %d row %d: %d kept, want %d\n", kind, n, k, r, nsel[r], want);
                        ok = 0;
                    }
                    for (int i = 0; i < want && ok; i++)
                        if (sel[(size_t)r * k + i] != ord[i]) {
                            fprintf(stderr, "  kind %d n %d k %d row %d: kept[%d] = %d, want %d\n", kind, n, k, r, i,
                                    sel[(size_t)r * k + i], ord[i]);
                            ok = 0;
                        }
                }
                CHECK_(ok, "dsa top-k: kind %d n %d k %d differs from the host", kind, n, k);
                free(sc), free(sel), free(ord);
                cudaFree(dsc), cudaFree(dpos), cudaFree(dsel), cudaFree(dn);
            }
}

/* The latent attention over selected positions (ft_cuda_mla_attention with sel; rows ld wide
 * as DSA's, paged through a permuted block table) against ft_cpu_attention_latent_sel, and the
 * same with sel NULL against the full ft_cpu_attention_latent_sel. */
TEST(mla_attention_selected_matches_cpu) {
    const int nh = 5, Lr = 64, dr = 16, D = Lr + dr, ld = D + 24, T = 4, bs = 16, nb = 8, k = 9;
    const int32_t pos[4] = {0, 8, 37, 120};
    int32_t table[8], tok_seq[4] = {0, 0, 0, 0}, sel[4 * 9], nsel[4];
    for (int i = 0; i < nb; i++) table[i] = (i * 5 + 3) % nb;
    const int32_t *blocks[4] = {table, table, table, table};
    float *cache = rnd((size_t)nb * bs * ld), *q = rnd((size_t)T * nh * D);
    for (int t = 0; t < T; t++) { /* every 3rd position from the last, at most k, ascending */
        int c = 0;
        for (int p = pos[t]; p >= 0 && c < k; p -= 3) sel[t * k + c++] = p;
        nsel[t] = c;
        for (int i = 0; i < c / 2; i++) {
            int32_t x = sel[t * k + i];
            sel[t * k + i] = sel[t * k + c - 1 - i], sel[t * k + c - 1 - i] = x;
        }
    }
    float *dc = up(cache, (size_t)nb * bs * ld * 4), *dq = up(q, (size_t)T * nh * D * 4);
    float *dout = up(NULL, (size_t)T * nh * Lr * 4);
    int32_t *dpos = up(pos, sizeof pos), *dts = up(tok_seq, sizeof tok_seq), *dtab = up(table, sizeof table);
    int32_t *dsel = up(sel, sizeof sel), *dn = up(nsel, sizeof nsel);
    float *ref = malloc((size_t)T * nh * Lr * 4), *got_t = malloc((size_t)T * nh * Lr * 4);
    for (int pass = 0; pass < 2; pass++) {
        const int use = pass == 0;
        ft_cpu_attention_latent_sel(g_pool, ref, q, cache, ld, pos, blocks, bs, T, nh, D, Lr, 0.11f,
                                    use ? sel : NULL, use ? nsel : NULL, use ? k : 0);
        ft_cuda_mla_attention(dout, dq, dc, ld, dpos, dts, dtab, nb, bs, T, nh, Lr, dr, 0.11f,
                              use ? dsel : NULL, dn, k, NULL);
        float *got = down(dout, (size_t)T * nh * Lr); /* [T, nh, Lr] -> the CPU's [nh, T, Lr] */
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++)
                memcpy(got_t + ((size_t)h * T + t) * Lr, got + ((size_t)t * nh + h) * Lr, (size_t)Lr * 4);
        for (int i = 0; i < T * nh * Lr; i++)
            if (fabsf(got_t[i] - ref[i]) > 1e-4f) {
                fprintf(stderr, "  %s: first mismatch head %d token %d dim %d: %g vs %g\n",
                        use ? "selected" : "full", i / (T * Lr), i / Lr % T, i % Lr, got_t[i], ref[i]);
                break;
            }
        EXPECT_NMSE(got_t, ref, (size_t)T * nh * Lr, 1e-10, use ? "MLA attention, selected" : "MLA attention, full (ld)");
        free(got);
    }
    free(cache), free(q), free(ref), free(got_t);
    cudaFree(dc), cudaFree(dq), cudaFree(dout), cudaFree(dpos), cudaFree(dts), cudaFree(dtab),
        cudaFree(dsel), cudaFree(dn);
}

int main(int argc, char **argv) {
    if (ft_pool_init(&g_pool, 0) != FT_OK) return 1;
    int rc = test_run("gpu_ops", argc, argv);
    ft_pool_free(g_pool);
    return rc;
}
