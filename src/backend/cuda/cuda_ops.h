/* cuda_ops.h — C launchers of the CUDA kernels (ops.cu) and the cuBLAS wrapper (blas.cu).
 * Each ft_cuda_<op> has a CPU twin ft_cpu_<op> in backend/cpu/ops.h with the same semantics and
 * argument order where both exist; test_gpu_ops compares them. All pointers are device
 * pointers; activations are fp32 unless a name says bf16; weights are bf16 (uint16_t).
 * Launchers only enqueue on `stream` (graph-capturable); errors surface at the next sync
 * through ft_cuda_check. Engine thread only. */
#ifndef FT_BACKEND_CUDA_OPS_H
#define FT_BACKEND_CUDA_OPS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/swiglu.h"
#include "ft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Turns the last CUDA error (sticky or not) into FT_ERR_CUDA naming `what`. */
enum ft_status ft_cuda_check(const char *what);

void ft_cuda_embed(float *out, const uint16_t *table, const int32_t *ids, int T, int H,
                   cudaStream_t s);
/* y = x * rsqrt(mean(x^2) + eps) * w per row; y16 (bf16 copy) may be NULL; y may be NULL. */
void ft_cuda_rmsnorm(float *y, uint16_t *y16, const float *x, const float *w, int rows, int H,
                     float eps, cudaStream_t s);
void ft_cuda_to_bf16(uint16_t *y, const float *x, size_t n, cudaStream_t s);
/* Residual add fused with the next norm: x += y (y may be NULL); xn (and xn16) = rmsnorm(x). */
void ft_cuda_add_rmsnorm(float *x, const float *y, float *xn, uint16_t *xn16, const float *w,
                         int rows, int H, float eps, cudaStream_t s);
/* Fused per-head q/k RMSNorm (norm weights may be NULL), RoPE, and the k/v cache write:
 * q is updated in place; k (after norm + RoPE) and v go to the paged caches. */
void ft_cuda_qk_rope_kv(float *q, const float *k, const float *v, float *k_cache, float *v_cache,
                        const float *q_norm, const float *k_norm, float eps, const int32_t *pos,
                        const float *inv_freq, float mscale, const int32_t *tok_seq,
                        const int32_t *tables, int max_blocks, int block_size, int T, int n_heads,
                        int n_kv_heads, int head_dim, int rot_dim, cudaStream_t s);
/* Causal GQA attention over the paged caches (same masking as ft_cpu_attention_paged), split
 * over positions (flash-decoding): positions [0, max_pos) are cut into n_split chunks, each a
 * block per (token, head); `scratch` holds ft_cuda_attention_scratch() bytes of partials.
 * max_pos bounds pos[t] + 1 of every token (a graph passes the context size). */
size_t ft_cuda_attention_scratch(int T, int n_heads, int head_dim, int n_split);
void ft_cuda_attention(float *out, float *scratch, const float *q, const float *k_cache,
                       const float *v_cache, const int32_t *pos, const int32_t *tok_seq,
                       const int32_t *tables, int max_blocks, int block_size, int T, int n_heads,
                       int n_kv_heads, int head_dim, float scale, int window, const float *sinks,
                       int max_pos, int n_split, cudaStream_t s);
/* The same attention for prefill (tensor cores, fp16 Q/K/V/P with fp32 accumulation and
 * softmax): tiles [n_tiles][2] = (first token, count <= 64) from ft_cuda_attention_tiles, each
 * tile's tokens of one sequence with ascending positions. head_dim <= 256. */
#define FT_CUDA_ATT_TILE 64
int ft_cuda_attention_tiles(int32_t *tiles, const int *seg_len, int n_segs); /* host; returns n_tiles */
void ft_cuda_attention_prefill(float *out, const float *q, const float *k_cache, const float *v_cache,
                               const int32_t *pos, const int32_t *tok_seq, const int32_t *tables,
                               int max_blocks, int block_size, const int32_t *tiles, int n_tiles,
                               int n_heads, int n_kv_heads, int head_dim, float scale, int window,
                               const float *sinks, cudaStream_t s);
void ft_cuda_silu_mul(float *out, const float *gate_up, int T, int I, cudaStream_t s);
/* ft_cpu_swiglu's twin (the activation `mode` on [gate I | up I] rows) */
void ft_cuda_swiglu(float *out, const float *gate_up, int T, int I, enum ft_swiglu mode,
                    float limit, float alpha, cudaStream_t s);
/* Expert biases (gpt-oss). Decode pairs: y[p, :] += bias[eids[p], :] where mask[p] >= 0 (the
 * pairs the GPU computed; mask NULL: eids). Prefill rows sorted by expert (ft_cuda_moe_sort's
 * offsets, R rows): y[r, :] += bias[e(r), :] for the experts with slot_of[e] >= 0 (the batch
 * being computed; slot_of NULL: all). bias: [E, N]. */
void ft_cuda_moe_add_bias(float *y, const float *bias, const int32_t *eids, const int32_t *mask,
                          int P, int N, cudaStream_t s);
void ft_cuda_moe_add_bias_sorted(float *y, const float *bias, const int32_t *offsets,
                                 const int32_t *slot_of, int E, int R, int N, cudaStream_t s);
void ft_cuda_add(float *y, const float *x, size_t n, cudaStream_t s);
/* Holds s until the host stores 1 to gate[0] (gate: the device pointer of mapped pinned
 * int[8]), then clears it; after 20 s without it, increments gate[1] and lets s go on. Stores
 * the GPU's %globaltimer (ns) when it opened to gate[2..3], when it started polling to
 * gate[4..5], and the polls that found it shut to gate[6]. */
void ft_cuda_gate(int *gate, cudaStream_t s);
/* m[0] = the GPU's %globaltimer (ns) when s reaches it (m: mapped pinned memory) */
void ft_cuda_stamp(unsigned long long *m, cudaStream_t s);
/* h_ids[i] = ids[i], h_w[i] = w[i] (h_w NULL: not) for i < n_pairs, h_x[i] = x[i] for i < n_x,
 * the h_* being device pointers of mapped pinned host memory (cudaHostGetDevicePointer); then,
 * seq non-NULL (device unsigned[2], zeroed once), ++seq[0] is stored to h_done[0] (mapped
 * unsigned[4]) once all of those writes are visible to the host, the %globaltimer (ns) of that
 * store to h_done[2..3] before it */
void ft_cuda_stage_out(int32_t *h_ids, const int32_t *ids, float *h_w, const float *w, int n_pairs,
                       float *h_x, const float *x, int n_x, unsigned *seq, unsigned *h_done,
                       cudaStream_t s);
/* y[t, n] += bias[n] for t < T (row stride ldy) */
void ft_cuda_add_bias(float *y, int ldy, const float *bias, int T, int N, cudaStream_t s);
/* y[t, n] (row stride ldy) = x[t, :] · w[n, :] (+ bias[n]) for T <= 8 tokens: GEMV kernel. */
void ft_cuda_gemv(float *y, int ldy, const float *x, const uint16_t *w, const float *bias, int T,
                  int N, int K, cudaStream_t s);
/* The general decode GEMV (T <= 8 per launch; more are split): rows [0, n0) -> y[0] (row stride
 * ldy0), [n0, n0+n1) -> y[1] (stride n1), the rest -> y[2]; biases b[i] may be NULL. With nw,
 * the input is RMS-normalised on the fly (x * rsqrt(mean(x^2) + eps) * nw) and, if xn_out is
 * set, stored there. accumulate: y[0] += result (residual adds). */
struct ft_cuda_gemv_args {
    float *y[3];
    int n0, n1, ldy0;
    const float *b[3];
    const float *x;
    const uint16_t *w;
    const float *nw;
    float eps;
    float *xn_out;
    int accumulate;
    int T, N, K;
};
void ft_cuda_gemv_ex(const struct ft_cuda_gemv_args *a, cudaStream_t s);
/* Routed experts for P = T*k (token, expert) pairs, decode-sized:
 * y[p, :] = W_{ids[p]} · x[p / x_div, :] with W_e = w + e * expert_stride (elements);
 * ids[p] < 0 gives a zero row (a pair computed elsewhere). */
void ft_cuda_moe_gemv(float *y, const float *x, int x_div, const uint16_t *w, size_t expert_stride,
                      const int32_t *ids, int P, int N, int K, cudaStream_t s);
/* out[t, :] (+)= sum_j wts[t*k + j] * y[t*k + j, :]  (accumulate: residual add) */
void ft_cuda_moe_combine(float *out, const float *y, const float *wts, int T, int k, int H,
                         int accumulate, cudaStream_t s);
/* softmax over E, top-k (ties: lower id), optional renormalisation, then weights x scale;
 * G > 1: DeepSeek-V2's group_limited_greedy first (the topk_group of G equal groups with the
 * best single scores keep theirs, the others score 0; G <= 32). E <= 1024, k <= 32. */
void ft_cuda_router_topk(const float *logits, int T, int E, int k, int norm, int G, int topk_group,
                         float scale, int32_t *ids, float *w, cudaStream_t s);
/* Synthetic routing for benchmarks: k distinct ids per token from a hash of (seed, *step,
 * layer, token); router weights kept from the softmax of the router logits [T, E]. sy NULL (or
 * with neither table): uniform. zipf_cdf [E]: the cumulative probabilities of ranks 1..E, each
 * rank mapped to an expert by the layer's permutation (as the CPU's zipf:S). sticky [L, k]
 * (-1 to start; stats: [T, 2] scratch): each choice keeps the layer's previous id with
 * probability keep, token after token (the CPU's sticky:P). */
struct ft_cuda_synth {
    const float *zipf_cdf;
    int32_t *sticky;
    float *stats;
    float keep;
};
void ft_cuda_synthetic_route(int32_t *ids, float *w, const float *logits, int T, int E, int k,
                             uint64_t seed, const uint32_t *step, int layer, int norm,
                             const struct ft_cuda_synth *sy, cudaStream_t s);
void ft_cuda_step_incr(uint32_t *step, cudaStream_t s);
/* y[t, :] += sigmoid(score[t]) * x[t, :] (Qwen2-MoE shared expert) */
void ft_cuda_sigmoid_scale_add(float *y, const float *x, const float *score, int T, int H,
                               cudaStream_t s);
void ft_cuda_argmax(const float *logits, int rows, int V, int32_t *out, cudaStream_t s);
/* Each row's token by draws[row] (on the device; struct ft_draw, engine/sample.h): with
 * temperature alone, from softmax(logits / T) with the uniform u (the first position whose
 * running sum of e^(x/T - max) passes u times the total); with top-k / top-p / min-p, what
 * ft_sampler_draw_row gives, or -1 for a row with more candidates than the device sorts on
 * chip (2048); T <= 0: the argmax. The host's definitions up to rounding. masks (NULL: none):
 * [rows, (V + 31) / 32] allow bitmasks (bit (id & 31) of word id >> 5), read for the rows whose
 * draw is masked: their forbidden tokens count as -inf before anything else, as
 * ft_sampler_draw_row on logits masked by ft_mask_apply_bits. */
struct ft_draw;
void ft_cuda_sample_draw(const float *logits, int rows, int V, const struct ft_draw *draws,
                         const uint32_t *masks, int32_t *out, cudaStream_t s);
/* Lowers that on-chip limit (tests: the host fallback on a small vocabulary); <= 0: 2048.
 * Launches read it when issued: a decode graph keeps the value it was captured with. */
void ft_cuda_sample_draw_set_cap(int cap);
/* Gathers bf16 rows: y[r, :] = x[src[r], :] */
void ft_cuda_gather_bf16(uint16_t *y, const uint16_t *x, const int32_t *src, int rows, int H,
                         cudaStream_t s);
/* y[r, :] = x[src[r], :] (+ x2[src[r], :] when x2 is not NULL) */
void ft_cuda_gather_f32(float *y, const float *x, const float *x2, const int32_t *src, int rows,
                        int H, cudaStream_t s);
/* Sequential-read bandwidth probe: copies `bytes` device-to-device `reps` times; GB/s counting
 * bytes read + written. */
double ft_cuda_d2d_gbps(size_t bytes, int reps);

/* --- hybrid and sigmoid-routed architectures (hybrid.cu) --- */
/* Gated DeltaNet layers. A step's tokens come in segments (one per sequence): segment s holds
 * tokens [seg_t0[s], seg_t0[s + 1]) in order and its sequence's state is slot seg_slot[s];
 * state + slot * slot_floats + layer_off is the layer's state: conv inputs [Cc][K-1], then S
 * [Hv][dk][dv] (Cc = 2 Hk dk + Hv dv), as the CPU engine lays it out. */
#define FT_CUDA_GDN_MAX_DK 128
#define FT_CUDA_GDN_MAX_K 8
struct ft_cuda_gdn {
    float *state;
    size_t slot_floats, layer_off;
    const int32_t *seg_t0, *seg_slot;
    int Hk, Hv, dk, dv, K;
};
/* The causal depthwise conv (w [Cc][K], tap K-1 on the current token) and SiLU, in place over
 * the first Cc columns of x (row stride ldx), updating each sequence's window. */
void ft_cuda_gdn_conv(float *x, int ldx, const struct ft_cuda_gdn *g, const float *w, int n_segs,
                      cudaStream_t s);
/* The gated delta rule over x's rows [q (Hk dk) | k (Hk dk) | v (Hv dv) ...] (after the conv),
 * beta = sigmoid(x[b_off + h]), decay = exp(A[h] softplus(x[a_off + h] + dt_bias[h])): out
 * [T, Hv dv] and each sequence's S updated. dk <= FT_CUDA_GDN_MAX_DK. */
void ft_cuda_gdn_rule(float *out, const float *x, int ldx, int b_off, int a_off,
                      const struct ft_cuda_gdn *g, const float *A, const float *dt_bias, int n_segs,
                      cudaStream_t s);
/* The same two steps in chunked (parallel) forms for prefill-sized steps of T tokens in n_segs
 * segments (any lengths), same results (the conv exactly; the rule within fp32 rounding), each
 * sequence's window and S left where the recurrent kernels leave them. scratch: at least
 * ft_cuda_gdn_chunk_scratch(...) floats, shared by the two (they run one after the other). The
 * chunked rule overwrites x's v columns. */
size_t ft_cuda_gdn_chunk_scratch(int Hk, int Hv, int dk, int dv, int K, int T, int n_segs);
void ft_cuda_gdn_conv_chunked(float *x, int ldx, const struct ft_cuda_gdn *g, const float *w, int T,
                              int n_segs, float *scratch, cudaStream_t s);
void ft_cuda_gdn_rule_chunked(float *out, float *x, int ldx, int b_off, int a_off,
                              const struct ft_cuda_gdn *g, const float *A, const float *dt_bias,
                              int T, int n_segs, float *scratch, cudaStream_t s);
/* o [T, Hv dv] = rmsnorm(o) * w * silu(z) per (token, head) of dv; z rows ldz apart */
void ft_cuda_gated_rmsnorm(float *o, const float *z, int ldz, const float *w, int T, int Hv, int dv,
                           float eps, cudaStream_t s);
/* y[i] *= sigmoid(gate[i]) (Qwen3.5's attention output gate) */
void ft_cuda_mul_sigmoid(float *y, const float *gate, size_t n, cudaStream_t s);
/* The sigmoid router: scores sigmoid(logits), chosen by score + bias (bias may be NULL) within
 * the topk_group of n_group groups (n_group <= 32; <= 1: no groups) with the highest sum of
 * their two best, weights the chosen scores (renormalised when norm) times scale. E <= 1024. */
void ft_cuda_router_sigmoid(const float *logits, const float *bias, int T, int E, int k, int n_group,
                            int topk_group, int norm, float scale, int32_t *ids, float *w,
                            cudaStream_t s);

/* --- Multi-head Latent Attention, absorbed (mla.cu): cache rows [c_kv (Lr) | k_pe (dr)] --- */
#define FT_CUDA_MLA_MAX_L 512 /* the latent rank */
#define FT_CUDA_MLA_MAX_D 640 /* Lr + dr */
#define FT_CUDA_BGEMV_MAX_K 512
/* kva [T, Lr + dr] (the kv_a projection): RMSNorm of the latent (eps 1e-6) times norm_w, RoPE
 * of the shared key (adjacent pairs when pairs, else rotate-half), the row into the cache (rows
 * ld >= Lr + dr floats apart: DSA's indexer key follows). */
void ft_cuda_mla_kv(const float *kva, const float *norm_w, float *cache, int ld, const int32_t *pos,
                    const int32_t *tok_seq, const int32_t *tables, int max_blocks, int block_size,
                    int T, int Lr, int dr, const float *inv_freq, float mscale, int pairs,
                    cudaStream_t s);
/* q [T, nh, dn + dr]: each head's q_pe, rotated, into the last dr of its q_lat row [T, nh, Lr + dr] */
void ft_cuda_mla_q_pe(const float *q, float *q_lat, const int32_t *pos, int T, int nh, int dn,
                      int dr, int Lr, const float *inv_freq, float mscale, int pairs, cudaStream_t s);
/* Per-head GEMV: y[(t nh + h) ldy + n] = sum_k w[h w_stride + n K + k] x[(t nh + h) ldx + k]
 * for n < N, K <= FT_CUDA_BGEMV_MAX_K (bf16 w) */
void ft_cuda_bgemv(float *y, int ldy, const float *x, int ldx, const uint16_t *w, size_t w_stride,
                   int N, int K, int T, int nh, cudaStream_t s);
/* out [T, nh, Lr] = softmax(scale q_lat . rows) . c_kv over each token's positions 0..pos[t]
 * (cache rows ld floats apart), or, when sel is not NULL, over its positions sel[t k_sel + i],
 * i < n_sel[t] (ft_cuda_dsa_topk's choice; the twin of ft_cpu_attention_latent_sel) */
void ft_cuda_mla_attention(float *out, const float *q_lat, const float *cache, int ld,
                           const int32_t *pos, const int32_t *tok_seq, const int32_t *tables,
                           int max_blocks, int block_size, int T, int nh, int Lr, int dr,
                           float scale, const int32_t *sel, const int32_t *n_sel, int k_sel,
                           cudaStream_t s);

/* --- DeepSeek sparse attention's lightning indexer (dsa.cu; the CPU's dsa_index and
 * ft_cpu_index_topk): nI heads of dI, the first dr dims rotated in adjacent pairs; the key of a
 * position at offset off of its cache row (rows ld floats apart) --- */
#define FT_CUDA_DSA_MAX_DIM 128 /* dI */
#define FT_CUDA_DSA_MAX_HEADS 64 /* nI */
/* kw [T, kw_ld]: each token's key projection (dI), then its nI head weights. The key
 * LayerNorm-ed (eps 1e-6, k_norm and k_bias), rotated, into the cache; q [T, nI, dI] (the
 * queries) rotated in place. */
void ft_cuda_dsa_prep(float *q, const float *kw, int kw_ld, const float *k_norm,
                      const float *k_bias, float *cache, int ld, int off, const int32_t *pos,
                      const int32_t *tok_seq, const int32_t *tables, int max_blocks,
                      int block_size, int T, int nI, int dI, int dr, const float *inv_freq,
                      float mscale, cudaStream_t s);
/* scores [rows, ld_s]: row r of token t = t0 + r, positions p <= pos[t]: sum_h (w_scale
 * kw[t, dI + h]) relu(scale q[t, h] . key_p). Rows with pos[t] + 1 <= k are left alone (the
 * top-k keeps all their positions); max_n bounds pos[t] + 1 (a graph passes the context size). */
void ft_cuda_dsa_scores(float *scores, int ld_s, const float *q, const float *kw, int kw_ld,
                        const float *cache, int ld, int off, const int32_t *pos,
                        const int32_t *tok_seq, const int32_t *tables, int max_blocks,
                        int block_size, int t0, int rows, int max_n, int nI, int dI, float scale,
                        float w_scale, int k, cudaStream_t s);
/* Token t = t0 + r's k best of scores[r, 0..pos[t]] into sel[t k ..], ascending, n_sel[t] their
 * count (ties: the lower position; NaN ranks lowest; every position while pos[t] < k): exact,
 * the choice of ft_cpu_index_topk on the same scores. */
void ft_cuda_dsa_topk(int32_t *sel, int32_t *n_sel, int k, const float *scores, int ld_s,
                      const int32_t *pos, int t0, int rows, cudaStream_t s);

/* --- experts in GGML block formats (ggml.cu): dtype is an enum ft_dtype block format; each
 * expert's matrix is expert_stride bytes apart, its rows ft_dtype_row_bytes(dtype, K) --- */
int ft_cuda_block_format(int dtype); /* 1 when the kernels below take dtype */
/* y[p, n] = row n of expert ids[p] . x[p / x_div] (the block twin of ft_cuda_moe_gemv). With
 * rounded set (the engine's --cpu-act fast), the formats ft_cuda_q8_faster names go through the
 * int8-activation kernel (ft_cuda_moe_gemv_q8); every other case through the fp32-x one. */
void ft_cuda_moe_gemv_blocks(float *y, const float *x, int x_div, const void *w,
                             size_t expert_stride, int dtype, const int32_t *ids, int P, int N,
                             int K, int rounded, cudaStream_t s);
/* 1 for the expert formats whose int8-activation GEMV beat the fp32-x one on the H200 (bench_ggml
 * --gpu, bench/RESULTS.md): MXFP4 (2.8x), Q5_K, Q5_1. */
int ft_cuda_q8_faster(int dtype);
/* dst[c] = bf16 [rows, cols] of expert src_of[first + c] (or first + c when src_of is NULL) for
 * c < n; negative ids are skipped, and with offsets (the sorted rows' [E+1] offsets; NULL: none
 * skipped) experts no row is routed to (the grouped GEMM reads no slot of theirs). */
void ft_cuda_dequant_experts(uint16_t *dst, const void *src, size_t expert_stride, int dtype,
                             const int32_t *src_of, const int32_t *offsets, int first, int n,
                             int rows, int cols, cudaStream_t s);
/* The fp32-activation kernel ft_cuda_moe_gemv_blocks ran before the int8 one (every format;
 * ft_cuda_moe_gemv_blocks still runs it for NVFP4 / FP8_B128): benchmarks and tests. */
void ft_cuda_moe_gemv_blocks_f32(float *y, const float *x, int x_div, const void *w,
                                 size_t expert_stride, int dtype, const int32_t *ids, int P, int N,
                                 int K, cudaStream_t s);
/* slot_of[e] = e - first for the experts [first, first + n) present in src_of (or all when NULL),
 * -1 otherwise: the grouped GEMM's map onto a chunk dequantised by ft_cuda_dequant_experts. */
void ft_cuda_chunk_slots(int32_t *slot_of, const int32_t *src_of, int first, int n, int E,
                         cudaStream_t s);

/* --- decode GEMV on GGML block rows with int8 activations (ggml_mmv.cu): each thread block
 * quantises the fp32 input rows it reads to int8 per 32 elements (scale max|x| / 127: the
 * codes of the CPU's ft_ggml_quant_x32) in shared memory, then dp4a's them with the weight
 * codes. Accuracy as ggml_dot.h's x32 dots (against the fp32 input: off by at most
 * sum_blocks (d_b / 2) sum_i |w_i|, ~0.3% of the dot's scale). dtype: an enum ft_dtype --- */
/* 1 for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4. */
int ft_cuda_q8_format(int dtype);
/* ft_cuda_moe_gemv_blocks_f32 for Q8_0 experts whose rows are 16-byte multiples (K % 256 == 0)
 * and whose w, expert_stride and x are 16-byte aligned: the rows staged through shared memory
 * with 16-byte loads (ggml_mmv.cu). Returns 0, launching nothing, when it does not apply. */
int ft_cuda_moe_gemv_q8_0_staged(float *y, const float *x, int x_div, const void *w,
                                 size_t expert_stride, const int32_t *ids, int P, int N, int K,
                                 cudaStream_t s);
/* ft_cuda_moe_gemv_blocks on int8 activations (what it runs for the formats above). */
void ft_cuda_moe_gemv_q8(float *y, const float *x, int x_div, const void *w, size_t expert_stride,
                         int dtype, const int32_t *ids, int P, int N, int K, cudaStream_t s);
/* ft_cuda_gemv_ex's semantics (outputs split at n0 / n1, biases, the fused input RMSNorm and
 * its xn_out, accumulate; a->w is not read) for rows [n_off, n_off + n_rows) of the stacked
 * matrix, read from w (row n_off's first block: several formats can share one stack, one launch
 * per part) in format dtype. Any T (8 tokens a launch); K a multiple of the block. */
void ft_cuda_gemv_q8(const struct ft_cuda_gemv_args *a, const void *w, int dtype, int n_off,
                     int n_rows, cudaStream_t s);
/* Tests: the int8 codes, scales and half sums (sums[2b], sums[2b + 1]) the GEMV computes for
 * rows x [rows, K] (after the fused RMSNorm when nw is set; xn_out: the normalised rows). */
void ft_cuda_quant_q8(int8_t *q, float *d, int16_t *sums, const float *x, int rows, int K,
                      const float *nw, float eps, float *xn_out, cudaStream_t s);

/* --- MoE prefill on the device (moe.cu): routing sort without a host round trip, then one
 * tensor-core GEMM launch per projection over all experts' token groups. --- */
/* counts [E] (zeroed here), offsets [ft_cuda_moe_offsets_len(E, T*k)] (offsets[0..E] the
 * sorted rows' starts, then the grouped GEMM's row tiles), rtok [R] (token of each sorted
 * row), pair_dst [R] (sorted row of each (token, slot) pair) from ids [R = T*k]; each
 * expert's rows in token order. */
size_t ft_cuda_moe_offsets_len(int E, int R);
/* Rows per tile of the grouped GEMMs for E experts and R rows (32 or 64); set_tile_rows forces
 * one (0: the default rule), before the sort whose tile list the GEMM will use. Tests. */
int ft_cuda_moe_tile_rows(int E, int R);
void ft_cuda_moe_set_tile_rows(int tm);
void ft_cuda_moe_sort(int32_t *counts, int32_t *offsets, int32_t *rtok, int32_t *pair_dst,
                      const int32_t *ids, int T, int k, int E, cudaStream_t s);
/* Y[offsets[e] + i, :] = X[offsets[e] + i, :] · W_e^T for every expert e and i < counts[e];
 * X bf16 [R, K], W bf16 [E][N, K], Y fp32 [R, N]; offsets from ft_cuda_moe_sort of R rows.
 * slot_of (device [E], may be NULL): expert e's matrix is w + slot_of[e] * w_stride elements,
 * and experts with slot_of[e] < 0 are skipped (the offload backend's batches); NULL means
 * w + e * N * K. */
void ft_cuda_moe_gemm(float *y, const uint16_t *x, const uint16_t *w, const int32_t *offsets,
                      const int32_t *slot_of, size_t w_stride, int E, int N, int K, int R,
                      cudaStream_t s);
/* 1 when ft_cuda_moe_gemm_q takes experts of dtype with rows of K elements (bf16, or a block
 * format with K % 8 == 0); otherwise dequantise chunks (ft_cuda_dequant_experts) first. */
int ft_cuda_moe_gemm_takes(int dtype, int K);
/* ft_cuda_moe_gemm with W in dtype (bf16 or a block format), each expert's [N] rows of K
 * elements expert_stride bytes apart (slot_of[e] * expert_stride with slot_of), dequantised to
 * bf16 as they are read: the result equals ft_cuda_dequant_experts then ft_cuda_moe_gemm bit
 * for bit, without the scratch copy. */
void ft_cuda_moe_gemm_q(float *y, const uint16_t *x, const void *w, int dtype, size_t expert_stride,
                        const int32_t *offsets, const int32_t *slot_of, int E, int N, int K, int R,
                        cudaStream_t s);
/* The int8 grouped GEMM (moe_q8.cu): ft_cuda_moe_gemm_q's result for weights in Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q4_K or Q5_K with the activations quantised to int8 per 32 elements (as the
 * decode GEMV does: the engine's --cpu-act fast), to f32 rounding of the exact integer sums.
 * takes: 1 for those formats with K % 256 == 0 and w, expert_stride 16-byte aligned. quant:
 * xq [R, K] codes and xd [R, K / 32] 8-byte scale-and-sums of rows x[rows[r]] (rows NULL: x[r]),
 * the codes of ft_cuda_quant_q8. gemm_q8: y [R, N] from those and the experts as for
 * ft_cuda_moe_gemm_q. */
int ft_cuda_moe_gemm_q8_takes(int dtype, int K, const void *w, size_t expert_stride);
void ft_cuda_moe_quant(int8_t *xq, void *xd, const float *x, const int32_t *rows, int R, int K,
                       cudaStream_t s);
void ft_cuda_moe_gemm_q8(float *y, const int8_t *xq, const void *xd, const void *w, int dtype,
                         size_t expert_stride, const int32_t *offsets, const int32_t *slot_of,
                         int E, int N, int K, int R, cudaStream_t s);
/* out[t, :] = sum_j wts[t*k + j] * y[pair_dst[t*k + j], :] (deterministic order) */
void ft_cuda_moe_unsort(float *out, const float *y, const int32_t *pair_dst, const float *wts,
                        int T, int k, int H, cudaStream_t s);

/* --- expert copy engine (copy.cu) --- */
/* n host-to-device copies by DMA: one cudaMemcpyBatchAsync (one cudaMemcpyAsync each if the
 * batch API refuses). Host arrays of pointers and sizes. */
enum ft_status ft_cuda_copy_dma(void *const *dst, const void *const *src, const size_t *bytes,
                                int n, cudaStream_t s);
/* The same through a kernel reading mapped pinned host memory (device pointers of registered
 * memory); misaligned pairs go by DMA. */
enum ft_status ft_cuda_copy_gather(void *const *dst, const void *const *src_mapped,
                                   const size_t *bytes, int n, cudaStream_t s);
/* out[i] = checksum of p[i][0..bytes[i]) as moe/checksum.h defines it (device memory out). */
void ft_cuda_checksums(const void *const *p, const size_t *bytes, int n, uint64_t *out,
                       cudaStream_t s);

/* --- cuBLAS (blas.cu) --- */
struct ft_blas;
enum ft_status ft_blas_init(struct ft_blas **out, cudaStream_t s);
void ft_blas_free(struct ft_blas *b);
/* y[T, N] fp32 (row stride ldy) = x[T, K] bf16 · w[N, K]^T bf16 */
enum ft_status ft_blas_gemm(struct ft_blas *b, float *y, int ldy, const uint16_t *x,
                            const uint16_t *w, int T, int N, int K);
#ifdef __cplusplus
}
#endif
#endif
