/* ops.h — the CPU backend: every op of the forward pass on fp32 activations, with weights in
 * F32, F16 or BF16 read in place (fp32 accumulation). The same functions are the reference
 * the CUDA ops are tested against (docs/ARCHITECTURE.md section 7: ft_cpu_<op>, same argument order as
 * ft_cuda_<op>).
 * Threading: functions taking a pool run on it and must be called from one thread at a time
 * (the engine thread); the others are single-threaded and reentrant. POOL_COPY: the CPU
 * forward's watchdog (core/threadpool.h, ft_pool_watch) may abandon a job whose context is on
 * the caller's stack while a wedged task still runs. A watched ft_pool_run hands the tasks the
 * pool's own copy of that context, taken when the job starts (so even a task wedged before its first line
 * reads a live one), and every pool task here also copies it at entry; a late task then reads
 * only that copy and the engine's buffers it points to, never the caller's frame.
 * Layouts are row-major; shapes are given in the comments as [rows, cols]. */
#ifndef FT_BACKEND_CPU_OPS_H
#define FT_BACKEND_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/swiglu.h"
#include "core/threadpool.h"
#include "format/quant.h"

enum ft_cpu_isa { FT_ISA_SCALAR, FT_ISA_AVX2, FT_ISA_AVX512, FT_ISA_AVX512_BF16 };

/* Detects the best tier once (cpuid + OS xsave support); later calls are free. */
enum ft_cpu_isa ft_cpu_isa(void);
const char *ft_cpu_isa_name(enum ft_cpu_isa isa);
/* Forces a tier at or below what the CPU has (tests compare tiers); returns the tier used. */
enum ft_cpu_isa ft_cpu_set_isa(enum ft_cpu_isa isa);

/* y[t, n] = sum_k x[t, k] * w[n, k]  for t in [0,T), n in [n0, n1).
 * x: [T, K] f32 with row stride ldx; w: [N, K] of type wt (rows contiguous, K elements each);
 * y: [T, *] f32 with row stride ldy (column n written at y[t*ldy + n]).
 * Single-threaded kernel: callers tile rows over threads (the MoE executor does this).
 * Each weight row is read once for all T tokens (register-blocked over tokens). */
void ft_cpu_matmul_rows(float *y, int ldy, const float *x, int ldx, const void *w,
                        enum ft_dtype wt, int T, int n0, int n1, int K);

/* ---- rounded activations (`--cpu-act fast`, the default of the CLI) ----
 * x can be rounded once per matmul and shared by every row that reads it: for block formats
 * to 8-bit codes with a scale per block of elements (ggml_quant.h states the format and the
 * error bound), the rows then dotted in integers; for bf16 weights on CPUs with AVX512-BF16
 * to bf16 (each x moves by at most 2^-9 of itself), the rows dotted by vdpbf16ps. Each is
 * about twice as fast per core as the fp32 kernels. Approximate: the result is the exact dot
 * of the weights with the rounded x (typically ~0.3% of the dot's scale for int8). Results do
 * not depend on T, the row range or the thread count, so batched and solo runs stay equal. */

/* Bytes of one token of K elements rounded for weights of dtype wt; 0 when there is no such
 * kernel for wt at that K on this CPU tier (the caller then uses ft_cpu_matmul_rows). At most
 * 2 * K. */
size_t ft_cpu_xq_bytes(enum ft_dtype wt, int K);
/* xq[T, ft_cpu_xq_bytes(wt, K)] = x[T, K] (row stride ldx) quantised; single-threaded. */
void ft_cpu_xq_quant(enum ft_dtype wt, const float *x, int ldx, int K, int T, void *xq);
/* ft_cpu_matmul_rows with x given as ft_cpu_xq_quant's xq (for the same wt and K). */
void ft_cpu_matmul_rows_xq(float *y, int ldy, const void *xq, const void *w, enum ft_dtype wt,
                           int T, int n0, int n1, int K);
/* The pool quantises the T tokens (rows split over the workers); one caller at a time. */
void ft_cpu_xq_quant_pool(struct ft_pool *pool, enum ft_dtype wt, const float *x, int ldx, int K,
                          int T, void *xq);

/* y[T, N] = x[T, K] · w[N, K]^T (+ bias[N] when not NULL), rows split over the pool. */
void ft_cpu_matmul(struct ft_pool *pool, float *y, const float *x, const void *w,
                   enum ft_dtype wt, const float *bias, int T, int N, int K);

/* out[T, H] = table[ids[t], :] converted to f32. */
void ft_cpu_embed(float *out, const void *table, enum ft_dtype wt, const int32_t *ids, int T,
                  int H);

/* y[T, H] = x * rsqrt(mean(x^2) + eps) * w[H]; y may alias x. */
void ft_cpu_rmsnorm(float *y, const float *x, const float *w, int T, int H, float eps);

/* Rotate-half (GPT-NeoX / HF) RoPE in place on x: [T, n_heads, head_dim].
 * Pairs (i, i + rot_dim/2) for i < rot_dim/2 are rotated by angle pos[t] * inv_freq[i];
 * cos and sin are multiplied by mscale (YaRN attention factor; 1 otherwise). */
void ft_cpu_rope(float *x, const int32_t *pos, const float *inv_freq, float mscale, int T,
                 int n_heads, int head_dim, int rot_dim);

/* Causal GQA attention over a KV cache.
 * q: [T, n_heads, head_dim]; k, v: [S, n_kv_heads, head_dim] (S >= max(pos)+1, rows for
 * positions 0..pos[t] valid); out: [T, n_heads, head_dim].
 * Token t attends to cache positions p with p <= pos[t] and, when window > 0,
 * p > pos[t] - window. Softmax of q·k * scale in fp32. Heads x tokens split over the pool. */
void ft_cpu_attention(struct ft_pool *pool, float *out, const float *q, const float *k,
                      const float *v, const int32_t *pos, int T, int n_heads, int n_kv_heads,
                      int head_dim, float scale, int window);

/* Multi-head latent attention (MLA's absorbed form) over a paged cache of one shared row per
 * position: cache [n_blocks * block_size, d_qk] (the latent, then the rotated key part), found
 * as ft_cpu_attention_paged finds its rows. q: [T, n_heads, d_qk] (each head's query already in
 * the latent space); token t attends to positions p <= pos[t]; out: [n_heads, T, d_v], the
 * softmax-weighted sum of the first d_v dims of the rows (d_v <= d_qk). Softmax in fp32 of
 * q . row * scale. Heads x tokens split over the pool. */
void ft_cpu_attention_latent(struct ft_pool *pool, float *out, const float *q, const float *cache,
                             const int32_t *pos, const int32_t *const *blocks, int block_size, int T,
                             int n_heads, int d_qk, int d_v, float scale);

/* ft_cpu_attention_latent over rows ld floats apart (ld >= d_qk: the rows carry more, as DSA's
 * indexer key) restricted, when sel is not NULL, to the positions sel[t * k_sel + i], i <
 * n_sel[t] (ascending, each <= pos[t]: ft_cpu_index_topk's choice). */
void ft_cpu_attention_latent_sel(struct ft_pool *pool, float *out, const float *q, const float *cache,
                                 int ld, const int32_t *pos, const int32_t *const *blocks,
                                 int block_size, int T, int n_heads, int d_qk, int d_v, float scale,
                                 const int32_t *sel, const int32_t *n_sel, int k_sel);

/* DeepSeek sparse attention's lightning indexer: token t's index score of a cached position
 * p <= pos[t] is sum_h w[t, h] relu(scale q[t, h] . key_p), key_p the dim floats at offset off
 * of p's cache row (rows ld apart, paged as ft_cpu_attention_latent's); sel[t * k ..] gets the
 * k best positions ascending (ties: the lower position; every position while pos[t] < k) and
 * n_sel[t] their count. q: [T, n_heads, dim]; w: [T, n_heads]. Tokens split over the pool. */
void ft_cpu_index_topk(struct ft_pool *pool, int32_t *sel, int32_t *n_sel, int k, const float *q,
                       const float *w, const float *cache, int ld, int off, const int32_t *pos,
                       const int32_t *const *blocks, int block_size, int T, int n_heads, int dim,
                       float scale);

/* Paged KV variant (continuous batching): k, v are pools [n_blocks * block_size, n_kv_heads,
 * head_dim]; token t (of any sequence) finds cache position p at row
 * blocks[t][p / block_size] * block_size + p % block_size. Same masking as above. sinks (may be
 * NULL): per head a logit that joins the softmax's denominator (gpt-oss attention sinks). */
void ft_cpu_attention_paged(struct ft_pool *pool, float *out, const float *q, const float *k,
                            const float *v, const int32_t *pos, const int32_t *const *blocks,
                            int block_size, int T, int n_heads, int n_kv_heads, int head_dim,
                            float scale, int window, const float *sinks);

/* out[T, I] = silu(gate_up[t, 0:I]) * gate_up[t, I:2I]; gate_up: [T, 2I]. */
void ft_cpu_silu_mul(float *out, const float *gate_up, int T, int I);
/* The activation `mode` (backend/swiglu.h) on the same layout: PLAIN is ft_cpu_silu_mul; OAI
 * gpt-oss's g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g *
 * sigmoid(alpha * g); CLAMP DeepSeek-V4's, the same clamps, out = u * g * sigmoid(g). */
void ft_cpu_swiglu(float *out, const float *gate_up, int T, int I, enum ft_swiglu mode, float limit,
                   float alpha);
/* The same with GELU (tanh approximation, torch's gelu(approximate="tanh")) on the gate. */
void ft_cpu_gelu_tanh_mul(float *out, const float *gate_up, int T, int I);

/* y[i] = e^(x[i] - shift) (0 where x[i] is -inf or NaN, as the GPU's draw skips NaN; the
 * vector tiers within 2 ulp of expf),
 * returning the sum of y added in double: the sampler's weights over a vocabulary. */
double ft_cpu_exp_shift(float *y, const float *x, int n, float shift);
/* y[n] += x[n] */
void ft_cpu_add(float *y, const float *x, size_t n);
/* In-place softmax over n values (max-subtracted, fp32). */
void ft_cpu_softmax(float *x, int n);
/* The k largest of x[0..n) in descending order (ties: lower index first). */
void ft_cpu_topk(const float *x, int n, int k, int *idx, float *val);
static inline float ft_sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

/* Host DRAM read bandwidth in GB/s (1e9 bytes/s): every pool thread streams its share of a
 * `bytes` buffer `reps` times with the widest loads the ISA has; best rep is reported. */
double ft_cpu_dram_read_gbps(struct ft_pool *pool, size_t bytes, int reps);

#endif
