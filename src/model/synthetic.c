/* synthetic.c — models with a real model's shapes and random weights generated in memory, so
 * large shapes can be benchmarked without checkpoints. Dense weights are bf16, uniform in
 * ±sqrt(3/fan_in) (unit-variance outputs); experts are bf16 likewise, or random codes of a
 * packed format (MXFP4, NVFP4, FP8 with 128-block scales) scaled to about the same variance.
 * Routing on such weights collapses, so benchmarks draw expert ids from a seeded distribution
 * instead (engine/forward.h, enum ft_routing).
 * Engine thread; fills in parallel on the pool (first touch places pages near their readers). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/rng.h"
#include "core/status.h"
#include "backend/cpu/ops.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "core/sys.h"
#include "format/fp_formats.h"
#include "format/ggml_quant.h"
#include "model/model.h"
#include "model/synthetic.h"

struct preset {
    const char *name, *arch;
    int layers, hidden, heads, kv_heads, head_dim, experts, top_k, expert_inter, inter, vocab;
    double theta;
    enum ft_dtype experts_dtype; /* the checkpoints' expert format (FT_DTYPE_BF16 = plain) */
    int oai;                     /* gpt-oss: biases, sinks, alternating 128-token windows, YaRN */
    /* the 2025-26 families (0: the preset has none of it) */
    int shared;                  /* Qwen: the gated shared expert's width; DeepSeek / GLM:
                                    n_shared_experts plain shared experts of expert_inter */
    int dense_first;             /* leading dense layers (first_k_dense_replace) */
    int gdn_hk, gdn_hv, gdn_d;   /* Gated DeltaNet key / value heads and head width; every 4th
                                    layer is gated full attention (Qwen3.5 / 3.6) */
    int q_lora, kv_lora, nope, rope, v_dim; /* MLA ranks and per-head widths (kv_lora > 0) */
    int n_group, topk_group;     /* sigmoid router groups (0: none) */
    double routed_scale;         /* routed_scaling_factor (0: 1) */
    double partial;              /* rotated fraction of head_dim (0: the arch's default) */
    double yarn;                 /* YaRN factor over 4096 positions, mscale = mscale_all_dim = 1 */
    int bias;                    /* q/k/v biases (GLM-4.5) */
    int index_topk, index_heads, index_dim; /* DSA's lightning indexer (GLM-5; 0: none) */
    /* DeepSeek-V4 (v4): window, compress rates, output groups and rank, hyper-connection
     * streams (q_lora, index_* and head_dim above) */
    int v4, window, csa, hca, o_groups, o_lora, hc;
};

/* Shapes from the models' published config.json files. qwen3-30b-a3b..tiny-gpt-oss: plain
 * GQA + MoE. gpt-oss: expert width = intermediate_size; YaRN factor 32 over 4096 positions;
 * layers alternate sliding (even) and full attention; experts MXFP4 as released.
 * qwen3.6-35b-a3b / qwen3.5-122b-a10b: 3 Gated DeltaNet layers to 1 gated full-attention one
 * (rotary 64 of 256), 256 experts top-8 plus the gated shared expert. deepseek-v3 / kimi-k2 /
 * glm-4.7-flash: MLA (the latent KV cache), sigmoid routers with plain shared experts, leading
 * dense layers. glm-5: the same plus DSA's indexer (32 heads of 128 keeping 2048 positions; its
 * key in the latent cache row), every layer running it (GLM-5's default schedule). glm-4.5-air: GQA with q/k/v biases, half-rotary. minimax-m2: QK-norm over all
 * heads, rotary 64 of 128, experts intermediate_size wide, no shared expert. The tiny-* ones
 * are the same wiring at test sizes. */
#define GQA_MOE(n, a, L, H, nh, nkv, hd, E, k, I, ff, V, th, dt, o) \
    {.name = n, .arch = a, .layers = L, .hidden = H, .heads = nh, .kv_heads = nkv, .head_dim = hd, \
     .experts = E, .top_k = k, .expert_inter = I, .inter = ff, .vocab = V, .theta = th, \
     .experts_dtype = dt, .oai = o}
static const struct preset k_presets[] = {
    GQA_MOE("qwen3-30b-a3b", "Qwen3MoeForCausalLM", 48, 2048, 32, 4, 128, 128, 8, 768, 6144, 151936, 1e6, FT_DTYPE_BF16, 0),
    GQA_MOE("mixtral-8x7b", "MixtralForCausalLM", 32, 4096, 32, 8, 128, 8, 2, 14336, 14336, 32000, 1e6, FT_DTYPE_BF16, 0),
    GQA_MOE("gpt-oss-20b", "GptOssForCausalLM", 24, 2880, 64, 8, 64, 32, 4, 2880, 2880, 201088, 150000, FT_DTYPE_MXFP4, 1),
    GQA_MOE("gpt-oss-120b", "GptOssForCausalLM", 36, 2880, 64, 8, 64, 128, 4, 2880, 2880, 201088, 150000, FT_DTYPE_MXFP4, 1),
    GQA_MOE("tiny", "Qwen3MoeForCausalLM", 4, 256, 8, 2, 32, 16, 4, 256, 512, 1024, 1e6, FT_DTYPE_BF16, 0),
    GQA_MOE("tiny-gpt-oss", "GptOssForCausalLM", 4, 256, 8, 2, 32, 16, 4, 128, 128, 1024, 150000, FT_DTYPE_MXFP4, 1),
    {.name = "qwen3.6-35b-a3b", .arch = "Qwen3_5MoeForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 40, .hidden = 2048, .heads = 16,
     .kv_heads = 2, .head_dim = 256, .experts = 256, .top_k = 8, .expert_inter = 512, .vocab = 248320,
     .theta = 1e7, .shared = 512, .gdn_hk = 16, .gdn_hv = 32, .gdn_d = 128},
    {.name = "qwen3.5-122b-a10b", .arch = "Qwen3_5MoeForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 48, .hidden = 3072, .heads = 32,
     .kv_heads = 2, .head_dim = 256, .experts = 256, .top_k = 8, .expert_inter = 1024, .vocab = 248320,
     .theta = 1e7, .shared = 1024, .gdn_hk = 16, .gdn_hv = 64, .gdn_d = 128},
    {.name = "deepseek-v3", .arch = "DeepseekV3ForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 61, .hidden = 7168, .heads = 128,
     .experts = 256, .top_k = 8, .expert_inter = 2048, .inter = 18432, .vocab = 129280, .theta = 10000,
     .shared = 1, .dense_first = 3, .q_lora = 1536, .kv_lora = 512, .nope = 128, .rope = 64, .v_dim = 128,
     .n_group = 8, .topk_group = 4, .routed_scale = 2.5, .yarn = 40},
    {.name = "kimi-k2", .arch = "DeepseekV3ForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 61, .hidden = 7168, .heads = 64,
     .experts = 384, .top_k = 8, .expert_inter = 2048, .inter = 18432, .vocab = 163840, .theta = 50000,
     .shared = 1, .dense_first = 1, .q_lora = 1536, .kv_lora = 512, .nope = 128, .rope = 64, .v_dim = 128,
     .n_group = 1, .topk_group = 1, .routed_scale = 2.827, .yarn = 32},
    {.name = "glm-4.7-flash", .arch = "Glm4MoeLiteForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 47, .hidden = 2048, .heads = 20,
     .experts = 64, .top_k = 4, .expert_inter = 1536, .inter = 10240, .vocab = 154880, .theta = 1e6,
     .shared = 1, .dense_first = 1, .q_lora = 768, .kv_lora = 512, .nope = 192, .rope = 64, .v_dim = 256,
     .n_group = 1, .topk_group = 1, .routed_scale = 1.8},
    {.name = "glm-5", .arch = "GlmMoeDsaForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 78, .hidden = 6144, .heads = 64,
     .experts = 256, .top_k = 8, .expert_inter = 2048, .inter = 12288, .vocab = 154880, .theta = 1e6,
     .shared = 1, .dense_first = 3, .q_lora = 2048, .kv_lora = 512, .nope = 192, .rope = 64, .v_dim = 256,
     .n_group = 1, .topk_group = 1, .routed_scale = 2.5, .index_topk = 2048, .index_heads = 32,
     .index_dim = 128},
    {.name = "glm-4.5-air", .arch = "Glm4MoeForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 46, .hidden = 4096, .heads = 96,
     .kv_heads = 8, .head_dim = 128, .experts = 128, .top_k = 8, .expert_inter = 1408, .inter = 10944,
     .vocab = 151552, .theta = 1e6, .shared = 1, .dense_first = 1, .n_group = 1, .topk_group = 1,
     .routed_scale = 1.0, .partial = 0.5, .bias = 1},
    {.name = "minimax-m2", .arch = "MiniMaxM2ForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 62, .hidden = 3072, .heads = 48,
     .kv_heads = 8, .head_dim = 128, .experts = 256, .top_k = 8, .expert_inter = 1536, .inter = 1536,
     .vocab = 200064, .theta = 5e6, .partial = 0.5},
    {.name = "tiny-qwen3.5", .arch = "Qwen3_5MoeForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 4, .hidden = 256, .heads = 4,
     .kv_heads = 2, .head_dim = 64, .experts = 16, .top_k = 4, .expert_inter = 128, .vocab = 1024,
     .theta = 1e7, .shared = 128, .gdn_hk = 2, .gdn_hv = 4, .gdn_d = 32},
    {.name = "tiny-deepseek", .arch = "DeepseekV3ForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 4, .hidden = 256, .heads = 4,
     .experts = 16, .top_k = 4, .expert_inter = 128, .inter = 512, .vocab = 1024, .theta = 10000,
     .shared = 1, .dense_first = 1, .q_lora = 64, .kv_lora = 64, .nope = 32, .rope = 16, .v_dim = 32,
     .n_group = 4, .topk_group = 2, .routed_scale = 2.5, .yarn = 40},
    {.name = "tiny-glm5", .arch = "GlmMoeDsaForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 4, .hidden = 256, .heads = 4,
     .experts = 16, .top_k = 4, .expert_inter = 128, .inter = 512, .vocab = 1024, .theta = 1e6,
     .shared = 1, .dense_first = 1, .q_lora = 64, .kv_lora = 64, .nope = 32, .rope = 16, .v_dim = 32,
     .n_group = 1, .topk_group = 1, .routed_scale = 2.5, .index_topk = 8, .index_heads = 4,
     .index_dim = 32},
    /* DeepSeek-V4-Flash (284B total / 13B active, 43 layers): the widths are transformers 5.17's
     * DeepseekV4Config defaults, which its docstring gives as V4-Flash's (hidden 4096, 64 heads of
     * 512 over one K=V head, q LoRA 1024, 8 output groups of 1024, 256 experts of 2048 top-6 plus
     * one shared, vocab 129280, window 128, compress rates 4 / 128, the indexer's 64 heads of 128
     * keeping 512, 4 hyper-connection streams); layer_types and the 3 hash layers by that
     * class's defaults, the compressed layers' YaRN factor 16 as its __post_init__ says */
    {.name = "deepseek-v4-flash", .arch = "DeepseekV4ForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 43, .hidden = 4096, .heads = 64, .kv_heads = 1, .head_dim = 512, .experts = 256,
     .top_k = 6, .expert_inter = 2048, .vocab = 129280, .theta = 10000, .shared = 1, .q_lora = 1024,
     .routed_scale = 1.5, .partial = 0.125, .yarn = 16, .index_topk = 512, .index_heads = 64,
     .index_dim = 128, .v4 = 1, .window = 128, .csa = 4, .hca = 128, .o_groups = 8, .o_lora = 1024,
     .hc = 4},
    {.name = "tiny-deepseek-v4", .arch = "DeepseekV4ForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 4, .hidden = 256, .heads = 4, .kv_heads = 1, .head_dim = 64, .experts = 16, .top_k = 4,
     .expert_inter = 128, .vocab = 1024, .theta = 10000, .shared = 1, .q_lora = 64, .routed_scale = 1.5,
     .partial = 0.25, .yarn = 16, .index_topk = 8, .index_heads = 4, .index_dim = 32, .v4 = 1,
     .window = 16, .csa = 4, .hca = 16, .o_groups = 2, .o_lora = 64, .hc = 2},
    {.name = "tiny-glm", .arch = "Glm4MoeForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 4, .hidden = 256, .heads = 8,
     .kv_heads = 2, .head_dim = 32, .experts = 16, .top_k = 4, .expert_inter = 128, .inter = 512,
     .vocab = 1024, .theta = 1e6, .shared = 1, .dense_first = 1, .n_group = 1, .topk_group = 1,
     .routed_scale = 1.0, .partial = 0.5, .bias = 1},
    {.name = "tiny-minimax", .arch = "MiniMaxM2ForCausalLM", .experts_dtype = FT_DTYPE_BF16,
     .layers = 4, .hidden = 256, .heads = 8,
     .kv_heads = 2, .head_dim = 32, .experts = 16, .top_k = 4, .expert_inter = 128, .inter = 128,
     .vocab = 1024, .theta = 5e6, .partial = 0.5},
};
#define PRESET_NAMES                                                                              \
    "qwen3-30b-a3b, qwen3.6-35b-a3b, qwen3.5-122b-a10b, deepseek-v3, kimi-k2, glm-4.7-flash, "    \
    "glm-5, deepseek-v4-flash, glm-4.5-air, minimax-m2, mixtral-8x7b, gpt-oss-20b, gpt-oss-120b, "   \
    "tiny, tiny-gpt-oss, tiny-qwen3.5, tiny-deepseek, tiny-glm5, tiny-deepseek-v4, tiny-glm, "       \
    "tiny-minimax"

/* ':FORMAT' names: the bank schema names (mem/bank.c), fp8 for fp8_b128; f16/f32 are not
 * offered (no checkpoint stores experts so) */
static const enum ft_dtype k_formats[] = {
    FT_DTYPE_BF16, FT_DTYPE_MXFP4, FT_DTYPE_NVFP4, FT_DTYPE_FP8_B128, FT_DTYPE_Q4_K, FT_DTYPE_Q5_K,
    FT_DTYPE_Q6_K, FT_DTYPE_Q8_0, FT_DTYPE_Q4_0, FT_DTYPE_Q4_1, FT_DTYPE_Q5_0, FT_DTYPE_Q5_1};
#define FORMAT_NAMES "bf16, mxfp4, nvfp4, fp8, q4_k, q5_k, q6_k, q8_0, q4_0, q4_1, q5_0, q5_1"

enum ft_status ft_synthetic_format(const char *name, enum ft_dtype *out) {
    for (size_t i = 0; i < sizeof k_formats / sizeof k_formats[0]; i++) {
        const char *n = k_formats[i] == FT_DTYPE_FP8_B128 ? "fp8" : ft_row_schema_for(k_formats[i])->name;
        if (!strcmp(n, name) || !strcmp(ft_row_schema_for(k_formats[i])->name, name)) {
            *out = k_formats[i];
            return FT_OK;
        }
    }
    return ft_fail(FT_ERR_INVALID_ARG, "unknown expert format '%s' (known: %s)", name, FORMAT_NAMES);
}

const char *ft_synthetic_presets(void) {
    return PRESET_NAMES "; "
           "':FORMAT' sets the experts' format: " FORMAT_NAMES "; '@N' keeps N layers";
}

/* uniform in [-1, 1) from 24 random bits */
static inline float rand_pm1(uint64_t *s) {
    return (float)(ft_rng_next(s) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

/* the generator state of chunk or row i (fills do not depend on how work is split) */
static inline uint64_t part_seed(uint64_t seed, long i) {
    return seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
}

struct fill_job {
    uint16_t *p;
    size_t n;
    float scale;
    uint64_t seed;
};

static void fill_task(void *ctx, int i, int nt) {
    struct fill_job *j = ctx;
    long lo, hi;
    ft_split((long)((j->n + 4095) / 4096), i, nt, &lo, &hi);
    for (long c = lo; c < hi; c++) { /* seeded per 4096-element chunk: any thread count */
        uint64_t s = part_seed(j->seed, c);
        for (size_t k = (size_t)c * 4096; k < FT_MIN((size_t)(c + 1) * 4096, j->n); k++)
            j->p[k] = ft_f32_to_bf16(rand_pm1(&s) * j->scale);
    }
}

static void rand_bf16(struct ft_pool *pool, void *dst, size_t n, int fan_in, uint64_t *seed) {
    struct fill_job j = {dst, n, sqrtf(3.0f / (float)fan_in), (*seed += 0x632be59bd9b4e019ull)};
    ft_pool_run(pool, fill_task, &j);
}

static enum ft_status weight(struct ft_model *m, struct ft_pool *pool, struct ft_weight *w,
                             int rows, int cols, uint64_t *seed) {
    size_t n = (size_t)rows * cols;
    void *p = ft_model_alloc(m, n * 2);
    if (!p) return ft_fail(FT_ERR_OOM, "synthetic %s: out of memory", m->label);
    *w = (struct ft_weight){p, FT_DTYPE_BF16, rows, cols};
    m->n_params += n;
    rand_bf16(pool, p, n, cols, seed);
    return FT_OK;
}

static float *ones(struct ft_model *m, int n) {
    float *p = ft_model_alloc(m, (size_t)n * sizeof *p);
    for (int i = 0; p && i < n; i++) p[i] = 1.0f;
    if (p) m->n_params += (uint64_t)n;
    return p;
}

/* Expert rows of a packed format: uniformly random codes with scales giving values of about
 * 1/sqrt(fan_in) rms. Uniform e2m1 codes have rms 2.93 ({0, .5, 1, 1.5, 2, 3, 4, 6}: mean square
 * 8.56); FP8 elements are uniform values of rms 64 rounded to e4m3. GGML blocks: random bytes,
 * then the scale fields set so the values are centred with the rms wanted (ggml_block_scales).
 * Each matrix row is seeded by its index, so the weights do not depend on the thread count. */
struct pack_job {
    const struct ft_bank *b;
    uint64_t seed;
    atomic_int oom; /* set by any task that could not allocate its scratch */
};

static void rand_bytes(uint8_t *p, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = ft_rng_next(s);
        memcpy(p + i, &r, FT_MIN(n - i, (size_t)8));
    }
}

static void put_f16(uint8_t *p, float v) {
    uint16_t h = ft_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Sets the scale fields of the GGML blocks of one random row of K elements for values of
 * about rms (codes uniform): the rms of a code c (after the format's offset) is given per type;
 * types with a min (Q4_1, Q5_1, Q4_K, Q5_K) get the one that centres the values. */
static void ggml_block_scales(uint8_t *row, enum ft_dtype dt, int K, float rms, uint64_t *s) {
    int g = ft_dtype_ggml(dt), bs = ft_ggml_block_size(g);
    size_t tb = ft_ggml_type_size(g);
    for (int b = 0; b < K / bs; b++) {
        uint8_t *p = row + (size_t)b * tb;
        switch (dt) {
        case FT_DTYPE_Q8_0: put_f16(p, rms / 73.9f); break;            /* int8 codes */
        case FT_DTYPE_Q4_0: put_f16(p, rms / 4.64f); break;            /* q - 8, q in 0..15 */
        case FT_DTYPE_Q5_0: put_f16(p, rms / 9.25f); break;            /* q - 16, q in 0..31 */
        case FT_DTYPE_Q4_1:                                             /* d q + m */
        case FT_DTYPE_Q5_1: {
            float d = rms / (dt == FT_DTYPE_Q4_1 ? 4.61f : 9.23f);
            put_f16(p, d);
            put_f16(p + 2, -d * (dt == FT_DTYPE_Q4_1 ? 7.5f : 15.5f));
            break;
        }
        case FT_DTYPE_Q4_K: /* d sc q - dmin m, sc, m in 0..63: dmin = mean(q) d centres it */
        case FT_DTYPE_Q5_K: {
            float d = rms / (dt == FT_DTYPE_Q4_K ? 259.0f : 529.0f);
            put_f16(p, d);
            put_f16(p + 2, d * (dt == FT_DTYPE_Q4_K ? 7.5f : 15.5f));
            break;
        }
        case FT_DTYPE_Q6_K: /* d sc (q - 32), int8 scales in [-20, 20] */
            for (int j = 0; j < 16; j++) p[192 + j] = (uint8_t)(int8_t)((int)(ft_rng_next(s) % 41) - 20);
            put_f16(p + 208, rms / 218.0f);
            break;
        default: FT_ASSERT(0);
        }
    }
}

static void pack_task(void *ctx, int i, int nt) {
    struct pack_job *j = ctx;
    const struct ft_bank *b = j->b;
    enum ft_dtype dt = b->schema->dtype;
    int K = b->cols;
    size_t rb = ft_dtype_row_bytes(dt, K);
    float rms = 1.0f / sqrtf((float)K);
    uint8_t *codes = malloc((size_t)K + 16), *scales = malloc((size_t)K / 16 + 16);
    float *sc = malloc(((size_t)K / FT_FP8_BLOCK + 1) * sizeof *sc);
    if (!codes || !scales || !sc) {
        atomic_store_explicit(&j->oom, 1, memory_order_relaxed);
        goto done;
    }
    long lo, hi;
    ft_split((long)b->n_experts * b->rows, i, nt, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        uint8_t *dst = ft_bank_expert(b, (int)(r / b->rows)) + (size_t)(r % b->rows) * rb;
        uint64_t s = part_seed(j->seed, r);
        if (dt == FT_DTYPE_MXFP4) { /* GGML blocks: e8m0 scale, 16 bytes of code pairs */
            uint8_t e = (uint8_t)(127 + lrintf(log2f(rms / 2.93f)));
            for (int k = 0; k < K / 32; k++) {
                dst[(size_t)k * 17] = e;
                rand_bytes(dst + (size_t)k * 17 + 1, 16, &s);
            }
        } else if (ft_dtype_is_block(dt)) {
            rand_bytes(dst, rb, &s);
            ggml_block_scales(dst, dt, K, rms, &s);
        } else if (dt == FT_DTYPE_NVFP4) {
            rand_bytes(codes, ((size_t)K + 1) / 2, &s);
            memset(scales, ft_f32_to_e4m3(1.0f), ((size_t)K + 15) / 16);
            ft_nvfp4_r_pack(dst, codes, scales, rms / 2.93f, 1, (size_t)K);
        } else { /* FT_DTYPE_FP8_B128 */
            for (int k = 0; k < K; k++) codes[k] = ft_f32_to_e4m3(rand_pm1(&s) * 64.0f * 1.7320508f);
            for (int k = 0; k < (K + FT_FP8_BLOCK - 1) / FT_FP8_BLOCK; k++) sc[k] = rms / 64.0f;
            ft_fp8_b128_pack(dst, codes, sc, 1, (size_t)K);
        }
    }
done:
    free(codes);
    free(scales);
    free(sc);
}

enum ft_status ft_bank_fill_random(struct ft_pool *pool, const struct ft_bank *b, uint64_t *seed) {
    if (b->schema->dtype == FT_DTYPE_BF16) {
        for (int e = 0; e < b->n_experts; e++)
            rand_bf16(pool, ft_bank_expert(b, e), (size_t)b->rows * b->cols, b->cols, seed);
        return FT_OK;
    }
    struct pack_job j = {b, (*seed += 0x632be59bd9b4e019ull), 0};
    ft_pool_run(pool, pack_task, &j);
    return atomic_load(&j.oom) ? ft_fail(FT_ERR_OOM, "synthetic experts: out of memory") : FT_OK;
}

static float *zeros(struct ft_model *m, size_t n) {
    float *p = ft_model_alloc(m, n * sizeof *p);
    if (p) memset(p, 0, n * sizeof *p);
    return p;
}

/* n f32 values uniform in [lo, hi) (small per-layer vectors: one thread) */
static float *uniform(struct ft_model *m, size_t n, float lo, float hi, uint64_t *seed) {
    float *p = ft_model_alloc(m, n * sizeof *p);
    uint64_t s = (*seed += 0x632be59bd9b4e019ull);
    for (size_t i = 0; p && i < n; i++) p[i] = lo + (hi - lo) * 0.5f * (rand_pm1(&s) + 1.0f);
    if (p) m->n_params += (uint64_t)n;
    return p;
}

/* "NAME[:FORMAT][@N]": the preset (with N layers if given) and its experts' format. */
static enum ft_status parse_preset(const char *preset, struct preset *out, enum ft_dtype *xdt) {
    const struct preset *p = NULL;
    /* "@N": the preset with N layers (same shapes; quicker to make, for A/B runs of per-layer
     * kernels) */
    const char *at = strchr(preset, '@');
    long n_layers = 0;
    if (at) {
        char *end;
        n_layers = strtol(at + 1, &end, 10);
        if (end == at + 1 || *end || n_layers < 1 || n_layers > 1024)
            return ft_fail(FT_ERR_INVALID_ARG, "--synthetic %s: '@' takes a layer count from 1 to "
                           "1024 (e.g. qwen3-30b-a3b@12)", preset);
    }
    char base[128];
    size_t blen = at ? (size_t)(at - preset) : strlen(preset);
    if (blen >= sizeof base)
        return ft_fail(FT_ERR_INVALID_ARG, "--synthetic: preset '%.40s...' is too long (presets: %s)",
                       preset, ft_synthetic_presets());
    memcpy(base, preset, blen);
    base[blen] = '\0';
    const char *colon = strchr(base, ':');
    size_t nlen = colon ? (size_t)(colon - base) : strlen(base);
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (strlen(k_presets[i].name) == nlen && !strncmp(k_presets[i].name, base, nlen)) p = &k_presets[i];
    if (!p)
        return ft_fail(FT_ERR_INVALID_ARG, "--synthetic: unknown preset '%.*s' (known: %s)", (int)nlen,
                       base, ft_synthetic_presets());
    *out = *p;
    if (n_layers) out->layers = (int)n_layers;
    *xdt = p->experts_dtype;
    if (colon && ft_synthetic_format(colon + 1, xdt) != FT_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", ft_error()); /* ft_fail rewrites the message it reads */
        return ft_fail(FT_ERR_INVALID_ARG, "--synthetic %s: %s", preset, why);
    }
    return FT_OK;
}

/* What the preset's config.json says, as ft_config fields (ft_config_init first). */
static enum ft_status preset_config(const struct preset *p, struct ft_config *c) {
    snprintf(c->arch, sizeof c->arch, "%s", p->arch);
    c->n_layers = p->layers;
    c->hidden_size = p->hidden;
    c->n_heads = p->heads;
    c->n_kv_heads = p->kv_lora ? p->heads : p->kv_heads;
    c->head_dim = p->kv_lora ? p->nope + p->rope : p->head_dim;
    c->n_experts = p->experts;
    c->n_experts_per_tok = p->top_k;
    c->moe_intermediate_size = p->expert_inter;
    c->intermediate_size = p->inter;
    c->vocab_size = p->vocab;
    c->max_position_embeddings = 32768;
    c->norm_topk_prob = 1;
    c->rope.theta = p->theta;
    c->attention_bias = p->bias;
    if (p->partial > 0) c->rope.partial_rotary_factor = p->partial, c->rope.partial_rotary_set = 1;
    if (p->gdn_hv) { /* Qwen3.5 / 3.6: layer_types by full_attention_interval 4 */
        c->linear_num_key_heads = p->gdn_hk, c->linear_num_value_heads = p->gdn_hv;
        c->linear_key_head_dim = c->linear_value_head_dim = p->gdn_d;
        c->linear_conv_kernel_dim = 4;
        c->full_attention_interval = 4;
        c->shared_expert_intermediate_size = p->shared;
        c->max_position_embeddings = 262144;
    } else if (p->shared) { /* DeepSeek / GLM: n_shared_experts of expert_inter */
        c->n_shared_experts = p->shared;
    }
    if (p->kv_lora) {
        c->q_lora_rank = p->q_lora, c->kv_lora_rank = p->kv_lora;
        c->qk_nope_head_dim = p->nope, c->qk_rope_head_dim = p->rope, c->v_head_dim = p->v_dim;
        c->rope_interleave = 1;
    }
    if (p->index_topk) { /* GLM-5: DSA; its config.json's context */
        c->index_topk = p->index_topk, c->index_n_heads = p->index_heads, c->index_head_dim = p->index_dim;
        c->max_position_embeddings = 202752;
    }
    if (ft_arch_find(p->arch)->flags & FT_ARCH_SIGMOID_ROUTER) {
        c->scoring_sigmoid = 1;
        c->n_group = p->n_group, c->topk_group = p->topk_group;
        c->routed_scaling_factor = p->routed_scale > 0 ? p->routed_scale : 1.0;
        c->first_k_dense_replace = p->dense_first;
        c->use_qk_norm = 0;
    }
    if (p->yarn > 0) { /* DeepSeek-V3 / Kimi-K2: mscale = mscale_all_dim = 1 */
        c->rope.type = FT_ROPE_YARN;
        c->rope.factor = p->yarn;
        c->rope.original_max_pos = 4096;
        c->rope.beta_fast = 32, c->rope.beta_slow = 1;
        c->rope.mscale_all_dim = 1;
        c->rope.attention_factor = 1;
        c->max_position_embeddings = (int)(4096 * p->yarn);
    }
    if (p->v4) { /* DeepSeek-V4: its RoPEs (the compressed layers' YaRN, cos / sin unscaled) */
        c->n_kv_heads = 1;
        c->head_dim = p->head_dim;
        c->q_lora_rank = p->q_lora;
        c->sliding_window = p->window;
        c->compress_csa = p->csa, c->compress_hca = p->hca;
        c->o_groups = p->o_groups, c->o_lora_rank = p->o_lora;
        c->hc_mult = p->hc;
        c->scoring_sqrtsoftplus = 1;
        c->swiglu_limit = 10.0;
        c->routed_scaling_factor = p->routed_scale;
        c->n_shared_experts = p->shared;
        c->max_position_embeddings = 1048576;
        c->mtp_layers = 1; /* num_nextn_predict_layers (not built: the engine does not read it) */
        c->rope.type = FT_ROPE_DEFAULT, c->rope.factor = 1, c->rope.attention_factor = 0;
        c->rope.mscale_all_dim = 0;
        c->rope_compress = c->rope;
        c->rope_compress.theta = 160000;
        c->rope_compress.type = FT_ROPE_YARN;
        c->rope_compress.factor = p->yarn;
        c->rope_compress.original_max_pos = (int)(c->max_position_embeddings / p->yarn);
        c->rope_compress.beta_fast = 32, c->rope_compress.beta_slow = 1;
        c->rope_compress.attention_factor = 1;
    }
    if (p->oai) { /* gpt-oss's config.json */
        c->max_position_embeddings = 131072;
        c->rms_norm_eps = 1e-5;
        c->attention_bias = 1;
        c->sliding_window = 128;
        c->swiglu_limit = 7.0;
        c->rope.type = FT_ROPE_YARN;
        c->rope.factor = 32;
        c->rope.original_max_pos = 4096;
        c->rope.beta_fast = 32;
        c->rope.beta_slow = 1;
        c->rope.truncate = 0;
        if (!(c->sliding = calloc((size_t)p->layers, 1))) return ft_fail(FT_ERR_OOM, "out of memory");
        for (int l = 0; l < p->layers; l += 2) c->sliding[l] = 1;
    }
    return FT_OK;
}

enum ft_status ft_synthetic_config(const char *preset, struct ft_config *c, const struct ft_arch **arch) {
    struct preset p;
    enum ft_dtype xdt;
    ft_config_init(c);
    enum ft_status st = parse_preset(preset, &p, &xdt);
    if (st == FT_OK) st = preset_config(&p, c);
    if (st == FT_OK) *arch = ft_arch_find(p.arch);
    return st;
}

/* Elements of layer l's non-expert weights (the RAM estimate; the builders below). */
static double layer_dense(const struct ft_model *m, int l) {
    const double H = m->hidden, nh = m->n_heads;
    const struct ft_layer *L = &m->layers[l];
    double a;
    if (L->v4) {
        const struct ft_v4 *z = m->v4;
        const double hd = m->head_dim, ql = m->cfg.q_lora_rank, n = z->hc, go = (double)z->groups * z->o_lora;
        a = ql * (H + nh * hd) + hd * H + go * nh * hd / z->groups + H * go + 2 * (2 + n) * n * n * H;
        if (L->v4->kind == 2)
            a += 4 * hd * H + 4.0 * z->idx_dim * H + (double)z->idx_heads * z->idx_dim * ql + z->idx_heads * H;
        else if (L->v4->kind == 3)
            a += 2 * hd * H;
    } else if (L->gdn) {
        double Dk = (double)m->gdn_hk * m->gdn_dk, Dv = (double)m->gdn_hv * m->gdn_dv;
        a = H * (2 * Dk + 2 * Dv + 2.0 * m->gdn_hv) + H * Dv;
    } else if (m->mla) {
        double qd = nh * (m->mla_nope + m->mla_rope), Lr = m->mla_kv_lora;
        a = (m->mla_q_lora ? m->mla_q_lora * (H + qd) : H * qd) + (Lr + m->mla_rope) * H +
            nh * Lr * (2.0 * m->mla_nope + m->mla_v) + H * nh * m->mla_v;
        a += (double)m->dsa_heads * m->dsa_dim * m->mla_q_lora + (double)(m->dsa_dim + m->dsa_heads) * H;
    } else {
        double q = nh * m->head_dim, kv = (double)m->n_kv_heads * m->head_dim;
        a = H * ((L->attn_gate ? 2 : 1) * q + 2 * kv) + H * q;
    }
    if (!L->is_moe) return a + 3.0 * H * m->cfg.intermediate_size;
    return a + (double)m->n_experts * H + 3.0 * H * m->shared_inter;
}

/* The layer kinds of m (after ft_model_shapes): DeltaNet, gated attention, MoE. */
static void layer_kinds(struct ft_model *m) {
    for (int l = 0; l < m->n_layers; l++) {
        m->layers[l].gdn = m->cfg.linear && m->cfg.linear[l];
        m->layers[l].attn_gate = !m->layers[l].gdn && (m->arch->flags & FT_ARCH_HYBRID);
        m->layers[l].is_moe = ft_model_layer_is_moe(m, l);
    }
}

/* Bytes of one layer's experts in format xdt (gate_up and down rows). */
static double expert_layer_bytes(const struct ft_model *m, enum ft_dtype xdt) {
    const int H = m->hidden, I = m->expert_inter;
    return (double)m->n_experts * (2.0 * I * ft_dtype_row_bytes(xdt, H) + (double)H * ft_dtype_row_bytes(xdt, I));
}

enum ft_status ft_synthetic_sizes(const char *preset, struct ft_synthetic_sizes *z) {
    struct preset p;
    enum ft_dtype xdt;
    memset(z, 0, sizeof *z);
    enum ft_status st = parse_preset(preset, &p, &xdt);
    if (st != FT_OK) return st;
    struct ft_model *m = calloc(1, sizeof *m);
    if (!m) return ft_fail(FT_ERR_OOM, "out of memory");
    ft_config_init(&m->cfg);
    snprintf(m->label, sizeof m->label, "synthetic:%s", preset);
    FT_TRY(preset_config(&p, &m->cfg));
    m->arch = ft_arch_find(p.arch);
    FT_TRY(ft_model_shapes(m));
    layer_kinds(m);
    if (!(z->bank = calloc((size_t)m->n_layers, sizeof *z->bank))) {
        st = ft_fail(FT_ERR_OOM, "out of memory");
        goto fail;
    }
    const double xb = expert_layer_bytes(m, xdt), xp = 3.0 * m->n_experts * m->hidden * m->expert_inter;
    z->params = z->bytes = 0;
    double dense = 2.0 * m->vocab * m->hidden; /* embeddings and lm_head, bf16 */
    for (int l = 0; l < m->n_layers; l++) {
        dense += layer_dense(m, l);
        if (!m->layers[l].is_moe) continue;
        z->bank[l] = (uint64_t)xb;
        z->expert_params += (uint64_t)xp;
        z->expert_bytes += (uint64_t)xb;
    }
    z->params = (uint64_t)dense + z->expert_params;
    z->bytes = (uint64_t)(2 * dense) + z->expert_bytes;
    ft_model_free(m);
    return FT_OK;
fail:
    free(z->bank);
    z->bank = NULL;
    ft_model_free(m);
    return st;
}

/* A Gated DeltaNet layer: projections, conv taps, decays of -1..-16 (A = -exp(A_log), A_log
 * drawn as transformers initialises it), dt_bias near softplus^-1 of 0.01..0.1. */
static enum ft_status build_gdn(struct ft_model *m, struct ft_pool *pool, struct ft_layer *L, uint64_t *seed) {
    const int H = m->hidden, Hv = m->gdn_hv, K = m->gdn_kernel;
    const int Dk = m->gdn_hk * m->gdn_dk, Dv = Hv * m->gdn_dv, Cc = 2 * Dk + Dv;
    enum ft_status st;
    L->gdn = 1;
    FT_TRY(weight(m, pool, &L->gdn_qkv, Cc, H, seed));
    FT_TRY(weight(m, pool, &L->gdn_z, Dv, H, seed));
    FT_TRY(weight(m, pool, &L->gdn_b, Hv, H, seed));
    FT_TRY(weight(m, pool, &L->gdn_a, Hv, H, seed));
    FT_TRY(weight(m, pool, &L->gdn_out, H, Dv, seed));
    float c = sqrtf(3.0f / (float)K);
    if (!(L->gdn_conv = uniform(m, (size_t)Cc * K, -c, c, seed)) ||
        !(L->gdn_A = uniform(m, (size_t)Hv, -16.0f, -1.0f, seed)) ||
        !(L->gdn_dt = uniform(m, (size_t)Hv, -4.6f, -2.25f, seed)) || !(L->gdn_norm = ones(m, m->gdn_dv)))
        return ft_fail(FT_ERR_OOM, "synthetic %s: out of memory", m->label);
    return FT_OK;
fail:
    return st;
}

/* A latent-attention layer: q LoRA (or q_proj), kv_a, kv_b, and uk_t (random as well: the
 * absorbed form reads it in kv_b's place; the values do not matter here). */
static enum ft_status build_mla(struct ft_model *m, struct ft_pool *pool, struct ft_layer *L, uint64_t *seed) {
    const int H = m->hidden, nh = m->n_heads, dn = m->mla_nope, dr = m->mla_rope, dv = m->mla_v;
    const int Lr = m->mla_kv_lora, ql = m->mla_q_lora;
    enum ft_status st;
    L->mla = 1;
    if (ql > 0) {
        FT_TRY(weight(m, pool, &L->q_a, ql, H, seed));
        FT_TRY(weight(m, pool, &L->q_b, nh * (dn + dr), ql, seed));
        if (!(L->q_a_norm = ones(m, ql))) goto oom;
    } else {
        FT_TRY(weight(m, pool, &L->wq, nh * (dn + dr), H, seed));
    }
    FT_TRY(weight(m, pool, &L->kv_a, Lr + dr, H, seed));
    FT_TRY(weight(m, pool, &L->kv_b, nh * (dn + dv), Lr, seed));
    FT_TRY(weight(m, pool, &L->uk_t, nh * Lr, dn, seed));
    FT_TRY(weight(m, pool, &L->wo, H, nh * dv, seed));
    if (!(L->kv_a_norm = ones(m, Lr))) goto oom;
    if (m->dsa_topk) { /* GLM-5's indexer, every layer running it */
        const int nI = m->dsa_heads, dI = m->dsa_dim;
        L->dsa = 1;
        FT_TRY(weight(m, pool, &L->idx_wq, nI * dI, ql, seed));
        FT_TRY(weight(m, pool, &L->idx_wk, dI, H, seed));
        FT_TRY(weight(m, pool, &L->idx_w, nI, H, seed));
        if (!(L->idx_k_norm = ones(m, dI)) || !(L->idx_k_bias = zeros(m, (size_t)dI))) goto oom;
    }
    return FT_OK;
oom:
    return ft_fail(FT_ERR_OOM, "synthetic %s: out of memory", m->label);
fail:
    return st;
}

/* Grouped-query attention: Qwen3.5's gated q ([q | gate] per head), GLM's q/k/v biases (zero),
 * per-head or all-heads QK-norm, gpt-oss's biases, sinks and windows. */
static enum ft_status build_gqa(struct ft_model *m, struct ft_pool *pool, struct ft_layer *L, int l,
                                uint64_t *seed) {
    const struct ft_config *c = &m->cfg;
    const int H = m->hidden, q = m->n_heads * m->head_dim, kv = m->n_kv_heads * m->head_dim;
    const unsigned fl = m->arch->flags;
    enum ft_status st;
    L->attn_gate = (fl & FT_ARCH_HYBRID) != 0;
    FT_TRY(weight(m, pool, &L->wq, L->attn_gate ? 2 * q : q, H, seed));
    FT_TRY(weight(m, pool, &L->wk, kv, H, seed));
    FT_TRY(weight(m, pool, &L->wv, kv, H, seed));
    FT_TRY(weight(m, pool, &L->wo, H, q, seed));
    if (fl & FT_ARCH_QK_NORM_ALL) {
        if (!(L->q_norm = ones(m, q)) || !(L->k_norm = ones(m, kv))) goto oom;
        L->qk_norm_all = 1;
    } else if (fl & FT_ARCH_QK_NORM) {
        if (!(L->q_norm = ones(m, m->head_dim)) || !(L->k_norm = ones(m, m->head_dim))) goto oom;
    }
    if (c->attention_bias == 1 &&
        (!(L->bq = zeros(m, (size_t)q)) || !(L->bk = zeros(m, (size_t)kv)) || !(L->bv = zeros(m, (size_t)kv))))
        goto oom;
    if (fl & FT_ARCH_OAI_MOE) { /* zero biases and sinks: the same work as learnt ones */
        L->window = c->sliding[l] ? c->sliding_window : 0;
        if (!(L->bo = zeros(m, (size_t)H)) || !(L->sinks = zeros(m, (size_t)m->n_heads))) goto oom;
    }
    return FT_OK;
oom:
    return ft_fail(FT_ERR_OOM, "synthetic %s: out of memory", m->label);
fail:
    return st;
}

/* A DeepSeek-V4 layer's attention: q LoRA, the K=V head, the grouped output, zero sinks and
 * position biases, the compressor (and CSA's indexer), the hyper-connections (zero base, unit
 * scales). */
static enum ft_status build_v4(struct ft_model *m, struct ft_pool *pool, struct ft_layer *L, uint64_t *seed) {
    const struct ft_v4 *z = m->v4;
    struct ft_v4_layer *X = L->v4;
    const int H = m->hidden, nh = m->n_heads, hd = m->head_dim, ql = m->cfg.q_lora_rank, n = z->hc;
    const int G = z->groups, olr = z->o_lora, dI = z->idx_dim, nI = z->idx_heads;
    enum ft_status st;
    for (int s = 0; s < 2; s++) {
        FT_TRY(weight(m, pool, &X->hc_fn[s], (2 + n) * n, n * H, seed));
        if (!(X->hc_base[s] = zeros(m, (size_t)(2 + n) * n)) || !(X->hc_scale[s] = ones(m, 3))) goto oom;
    }
    FT_TRY(weight(m, pool, &L->q_a, ql, H, seed));
    FT_TRY(weight(m, pool, &L->q_b, nh * hd, ql, seed));
    FT_TRY(weight(m, pool, &X->kv, hd, H, seed));
    FT_TRY(weight(m, pool, &X->o_a, G * olr, nh * hd / G, seed));
    FT_TRY(weight(m, pool, &X->o_b, H, G * olr, seed));
    if (!(L->q_a_norm = ones(m, ql)) || !(X->kv_norm = ones(m, hd)) || !(L->sinks = zeros(m, (size_t)nh))) goto oom;
    if (X->kind >= 2) {
        const int ce = X->kind == 2 ? 2 * hd : hd, r = X->kind == 2 ? z->csa : z->hca;
        FT_TRY(weight(m, pool, &X->c_kv, ce, H, seed));
        FT_TRY(weight(m, pool, &X->c_gate, ce, H, seed));
        if (!(X->c_ape = zeros(m, (size_t)r * ce)) || !(X->c_norm = ones(m, hd))) goto oom;
    }
    if (X->kind == 2) {
        FT_TRY(weight(m, pool, &X->i_kv, 2 * dI, H, seed));
        FT_TRY(weight(m, pool, &X->i_gate, 2 * dI, H, seed));
        FT_TRY(weight(m, pool, &L->idx_wq, nI * dI, ql, seed));
        FT_TRY(weight(m, pool, &L->idx_w, nI, H, seed));
        if (!(X->i_ape = zeros(m, (size_t)z->csa * 2 * dI)) || !(X->i_norm = ones(m, dI))) goto oom;
    }
    return FT_OK;
oom:
    return ft_fail(FT_ERR_OOM, "synthetic %s: out of memory", m->label);
fail:
    return st;
}

/* The MLP: dense (leading dense layers), or router + banks + shared expert(s). */
static enum ft_status build_ffn(struct ft_model *m, struct ft_pool *pool, struct ft_layer *L,
                                const struct ft_row_schema *xs, uint64_t *seed) {
    const int H = m->hidden, E = m->n_experts, I = m->expert_inter, Is = m->shared_inter;
    const unsigned fl = m->arch->flags;
    enum ft_status st;
    if (!L->is_moe) {
        const int Id = m->cfg.intermediate_size;
        FT_TRY(weight(m, pool, &L->w_gate, Id, H, seed));
        FT_TRY(weight(m, pool, &L->w_up, Id, H, seed));
        FT_TRY(weight(m, pool, &L->w_down, H, Id, seed));
        return FT_OK;
    }
    FT_TRY(weight(m, pool, &L->router, E, H, seed));
    if ((fl & FT_ARCH_SIGMOID_ROUTER) && !(L->router_score_bias = zeros(m, (size_t)E))) goto oom;
    if (L->v4) { /* DeepSeek-V4: its clamped SwiGLU; hash layers route by token id */
        L->act.mode = FT_SWIGLU_CLAMP, L->act.limit = m->v4->swiglu;
        if (!L->v4->hash && !(L->router_score_bias = zeros(m, (size_t)E))) goto oom;
        if (L->v4->hash) {
            const int V = m->vocab, k = m->top_k;
            int32_t *t = ft_model_alloc(m, (size_t)V * k * sizeof *t);
            uint64_t s = (*seed += 0x632be59bd9b4e019ull);
            if (!t) goto oom;
            for (int v = 0; v < V; v++)
                for (int j = 0; j < k; j++) { /* k distinct experts a token */
                    int id, dup;
                    do {
                        id = (int)(ft_rng_next(&s) % (uint64_t)E), dup = 0;
                        for (int i = 0; i < j; i++) dup |= t[(size_t)v * k + i] == id;
                    } while (dup);
                    t[(size_t)v * k + j] = id;
                }
            L->v4->tid2eid = t;
        }
    }
    if (fl & FT_ARCH_OAI_MOE) {
        L->act.mode = FT_SWIGLU_OAI;
        L->act.limit = (float)m->cfg.swiglu_limit;
        L->act.alpha = (float)m->cfg.swiglu_alpha;
        if (!(L->router_bias = zeros(m, (size_t)E)) || !(L->act.gu_bias = zeros(m, (size_t)E * 2 * I)) ||
            !(L->act.down_bias = zeros(m, (size_t)E * H)))
            goto oom;
    }
    if (Is > 0 && (fl & (FT_ARCH_SHARED_EXPERT | FT_ARCH_SHARED_PLAIN | FT_ARCH_V4))) {
        L->has_shared = 1;
        FT_TRY(weight(m, pool, &L->sh_gate, Is, H, seed));
        FT_TRY(weight(m, pool, &L->sh_up, Is, H, seed));
        FT_TRY(weight(m, pool, &L->sh_down, H, Is, seed));
        if (fl & FT_ARCH_SHARED_EXPERT) FT_TRY(weight(m, pool, &L->sh_score, 1, H, seed));
    }
    FT_TRY(ft_bank_init(&L->bank[0], xs, FT_BANK_GATE_UP, E, 2 * I, H));
    FT_TRY(ft_bank_init(&L->bank[1], xs, FT_BANK_DOWN, E, H, I));
    FT_TRY(ft_bank_fill_random(pool, &L->bank[0], seed));
    FT_TRY(ft_bank_fill_random(pool, &L->bank[1], seed));
    return FT_OK;
oom:
    return ft_fail(FT_ERR_OOM, "synthetic %s: out of memory", m->label);
fail:
    return st;
}

enum ft_status ft_model_synthetic(const char *preset, struct ft_pool *pool, uint64_t seed,
                                  struct ft_model **out) {
    struct preset pr;
    const struct preset *p = &pr;
    enum ft_dtype xdt;
    *out = NULL;
    enum ft_status st = parse_preset(preset, &pr, &xdt);
    if (st != FT_OK) return st;
    struct ft_model *m = calloc(1, sizeof *m);
    if (!m) return ft_fail(FT_ERR_OOM, "out of memory");
    struct ft_config *c = &m->cfg;
    ft_config_init(c);
    snprintf(m->label, sizeof m->label, "synthetic:%s", preset);
    FT_TRY(preset_config(p, c));
    m->arch = ft_arch_find(p->arch);
    FT_TRY(ft_model_shapes(m));
    int blk = ft_dtype_is_block(xdt) ? ft_ggml_block_size(ft_dtype_ggml(xdt)) : 1;
    if (m->hidden % blk || m->expert_inter % blk) { /* whole blocks */
        st = ft_fail(FT_ERR_INVALID_ARG, "--synthetic %s: %s experts need widths that are multiples "
                     "of %d (%d, %d)", preset, ft_row_schema_for(xdt)->name, blk, m->hidden,
                     m->expert_inter);
        goto fail;
    }
    layer_kinds(m); /* first: the estimate reads them */
    /* estimate and check RAM before touching gigabytes */
    const int H = m->hidden;
    const double experts = expert_layer_bytes(m, xdt);
    double need = 2.0 * p->vocab * H * 2;
    for (int l = 0; l < m->n_layers; l++)
        need += layer_dense(m, l) * 2 + (m->layers[l].is_moe ? experts : 0);
    uint64_t ram = ft_sys_ram_bytes();
    if (ram && need > 0.92 * (double)ram) {
        st = ft_fail(FT_ERR_OOM, "synthetic %s needs %.1f GiB of weights but this machine has "
                     "%.1f GiB RAM (use fewer layers, e.g. %s@4, smaller experts, e.g. :q4_k, or "
                     "a smaller preset)", preset, need / (1 << 30), (double)ram / (1 << 30), p->name);
        goto fail;
    }
    const struct ft_row_schema *xs = ft_row_schema_for(xdt);
    ft_log_info("synthetic %s: generating %.1f GiB of random weights (experts %s)", preset,
                need / (1 << 30), xs->name);
    const int64_t t_gen = ft_time_ns();
    FT_TRY(weight(m, pool, &m->embed, m->vocab, H, &seed));
    FT_TRY(weight(m, pool, &m->lm_head, m->vocab, H, &seed));
    if (!(m->final_norm = ones(m, H))) goto oom;
    if (m->v4) { /* the final stream collapse */
        const int n = m->v4->hc;
        FT_TRY(weight(m, pool, &m->v4->hc_head_fn, n, n * H, &seed));
        if (!(m->v4->hc_head_base = zeros(m, (size_t)n)) || !(m->v4->hc_head_scale = ones(m, 1))) goto oom;
    }
    for (int l = 0; l < m->n_layers; l++) {
        struct ft_layer *L = &m->layers[l];
        if (!(L->attn_norm = ones(m, H)) || !(L->ffn_norm = ones(m, H))) goto oom;
        if (L->gdn) FT_TRY(build_gdn(m, pool, L, &seed));
        else if (L->v4) FT_TRY(build_v4(m, pool, L, &seed));
        else if (m->mla) FT_TRY(build_mla(m, pool, L, &seed));
        else FT_TRY(build_gqa(m, pool, L, l, &seed));
        FT_TRY(build_ffn(m, pool, L, xs, &seed));
        int tenth = (l + 1) * 10 / m->n_layers;
        if (need > 4.0 * (1 << 30) && tenth > l * 10 / m->n_layers) /* large presets take minutes */
            ft_log_info("synthetic %s: %d%% (%d of %d layers)", preset, tenth * 10, l + 1, m->n_layers);
    }
    ft_model_sizes(m);
    const double gen_ns = (double)(ft_time_ns() - t_gen) + 1.0;
    if (need > 4.0 * (1 << 30))
        ft_log_info("synthetic %s: generated in %.1f s (%.1f GB/s)", preset, gen_ns / 1e9, need / gen_ns);
    *out = m;
    return FT_OK;
oom:
    st = ft_fail(FT_ERR_OOM, "synthetic %s: out of memory", preset);
fail:
    ft_model_free(m);
    return st;
}
