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
#include "core/threadpool.h"
#include "core/timer.h"
#include "core/sys.h"
#include "format/fp_formats.h"
#include "format/ggml_quant.h"
#include "model/model.h"

struct preset {
    const char *name, *arch;
    int layers, hidden, heads, kv_heads, head_dim, experts, top_k, expert_inter, inter, vocab;
    double theta;
    enum ft_dtype experts_dtype; /* the checkpoints' expert format (FT_DTYPE_BF16 = plain) */
    int oai;                     /* gpt-oss: biases, sinks, alternating 128-token windows, YaRN */
};

/* Shapes from the models' published config.json files. qwen3.6-35b-a3b is taken as a plain
 * Qwen3-MoE shape (its hybrid linear-attention layers and shared expert are not modelled).
 * gpt-oss: expert width = intermediate_size; YaRN factor 32 over 4096 positions; layers
 * alternate sliding (even) and full attention; experts MXFP4 as released. */
static const struct preset k_presets[] = {
    {"qwen3-30b-a3b", "Qwen3MoeForCausalLM", 48, 2048, 32, 4, 128, 128, 8, 768, 6144, 151936, 1e6, FT_DTYPE_BF16, 0},
    {"qwen3.6-35b-a3b", "Qwen3MoeForCausalLM", 40, 2048, 16, 2, 256, 256, 8, 512, 5120, 248320, 1e7, FT_DTYPE_BF16, 0},
    {"mixtral-8x7b", "MixtralForCausalLM", 32, 4096, 32, 8, 128, 8, 2, 14336, 14336, 32000, 1e6, FT_DTYPE_BF16, 0},
    {"gpt-oss-20b", "GptOssForCausalLM", 24, 2880, 64, 8, 64, 32, 4, 2880, 2880, 201088, 150000, FT_DTYPE_MXFP4, 1},
    {"gpt-oss-120b", "GptOssForCausalLM", 36, 2880, 64, 8, 64, 128, 4, 2880, 2880, 201088, 150000, FT_DTYPE_MXFP4, 1},
    {"tiny", "Qwen3MoeForCausalLM", 4, 256, 8, 2, 32, 16, 4, 256, 512, 1024, 1e6, FT_DTYPE_BF16, 0},
    {"tiny-gpt-oss", "GptOssForCausalLM", 4, 256, 8, 2, 32, 16, 4, 128, 128, 1024, 150000, FT_DTYPE_MXFP4, 1},
};

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
    return "qwen3-30b-a3b, qwen3.6-35b-a3b, mixtral-8x7b, gpt-oss-20b, gpt-oss-120b, tiny, tiny-gpt-oss; "
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

enum ft_status ft_model_synthetic(const char *preset, struct ft_pool *pool, uint64_t seed,
                                  struct ft_model **out) {
    const struct preset *p = NULL;
    *out = NULL;
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
    struct preset fewer;
    if (n_layers) fewer = *p, fewer.layers = (int)n_layers, p = &fewer;
    enum ft_dtype xdt = p->experts_dtype;
    if (colon && ft_synthetic_format(colon + 1, &xdt) != FT_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", ft_error()); /* ft_fail rewrites the message it reads */
        return ft_fail(FT_ERR_INVALID_ARG, "--synthetic %s: %s", preset, why);
    }
    struct ft_model *m = calloc(1, sizeof *m);
    if (!m) return ft_fail(FT_ERR_OOM, "out of memory");
    enum ft_status st;
    struct ft_config *c = &m->cfg;
    ft_config_init(c);
    snprintf(m->label, sizeof m->label, "synthetic:%s", preset);
    snprintf(c->arch, sizeof c->arch, "%s", p->arch);
    c->n_layers = p->layers;
    c->hidden_size = p->hidden;
    c->n_heads = p->heads;
    c->n_kv_heads = p->kv_heads;
    c->head_dim = p->head_dim;
    c->n_experts = p->experts;
    c->n_experts_per_tok = p->top_k;
    c->moe_intermediate_size = p->expert_inter;
    c->intermediate_size = p->inter;
    c->vocab_size = p->vocab;
    c->max_position_embeddings = 32768;
    c->norm_topk_prob = 1;
    c->rope.theta = p->theta;
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
        if (!(c->sliding = calloc((size_t)p->layers, 1))) goto oom;
        for (int l = 0; l < p->layers; l += 2) c->sliding[l] = 1;
    }
    m->arch = ft_arch_find(p->arch);
    FT_TRY(ft_model_shapes(m));
    int blk = ft_dtype_is_block(xdt) ? ft_ggml_block_size(ft_dtype_ggml(xdt)) : 1;
    if (m->hidden % blk || m->expert_inter % blk) { /* whole blocks */
        st = ft_fail(FT_ERR_INVALID_ARG, "--synthetic %s: %s experts need widths that are multiples "
                     "of %d (%d, %d)", preset, ft_row_schema_for(xdt)->name, blk, m->hidden,
                     m->expert_inter);
        goto fail;
    }
    /* estimate and check RAM before touching gigabytes */
    int H = m->hidden, q = m->n_heads * m->head_dim, kv = m->n_kv_heads * m->head_dim;
    int E = m->n_experts, I = m->expert_inter;
    double experts = (double)E * (2.0 * I * ft_dtype_row_bytes(xdt, H) + (double)H * ft_dtype_row_bytes(xdt, I));
    double need = (double)p->layers * (experts + (double)H * (2 * q + 2 * kv) * 2) + 2.0 * p->vocab * H * 2;
    uint64_t ram = ft_sys_ram_bytes();
    if (ram && need > 0.92 * (double)ram) {
        st = ft_fail(FT_ERR_OOM, "synthetic %s needs %.1f GiB of weights but this machine has "
                     "%.1f GiB RAM (use a smaller preset, e.g. tiny)", preset,
                     need / (1 << 30), (double)ram / (1 << 30));
        goto fail;
    }
    const struct ft_row_schema *xs = ft_row_schema_for(xdt);
    ft_log_info("synthetic %s: generating %.1f GiB of random weights (experts %s)", preset,
                need / (1 << 30), xs->name);
    const int64_t t_gen = ft_time_ns();
    FT_TRY(weight(m, pool, &m->embed, m->vocab, H, &seed));
    FT_TRY(weight(m, pool, &m->lm_head, m->vocab, H, &seed));
    if (!(m->final_norm = ones(m, H))) goto oom;
    for (int l = 0; l < m->n_layers; l++) {
        struct ft_layer *L = &m->layers[l];
        if (!(L->attn_norm = ones(m, H)) || !(L->ffn_norm = ones(m, H))) goto oom;
        FT_TRY(weight(m, pool, &L->wq, q, H, &seed));
        FT_TRY(weight(m, pool, &L->wk, kv, H, &seed));
        FT_TRY(weight(m, pool, &L->wv, kv, H, &seed));
        FT_TRY(weight(m, pool, &L->wo, H, q, &seed));
        FT_TRY(weight(m, pool, &L->router, E, H, &seed));
        if (m->arch->flags & FT_ARCH_QK_NORM) {
            if (!(L->q_norm = ones(m, m->head_dim)) || !(L->k_norm = ones(m, m->head_dim))) goto oom;
        }
        if (p->oai) { /* zero biases and sinks: the same work as learnt ones */
            L->window = c->sliding[l] ? c->sliding_window : 0;
            L->act.limit = (float)c->swiglu_limit;
            L->act.alpha = (float)c->swiglu_alpha;
            if (!(L->bq = zeros(m, (size_t)q)) || !(L->bk = zeros(m, (size_t)kv)) ||
                !(L->bv = zeros(m, (size_t)kv)) || !(L->bo = zeros(m, (size_t)H)) ||
                !(L->sinks = zeros(m, (size_t)m->n_heads)) || !(L->router_bias = zeros(m, (size_t)E)) ||
                !(L->act.gu_bias = zeros(m, (size_t)E * 2 * I)) || !(L->act.down_bias = zeros(m, (size_t)E * H)))
                goto oom;
        }
        L->is_moe = 1;
        FT_TRY(ft_bank_init(&L->bank[0], xs, FT_BANK_GATE_UP, E, 2 * I, H));
        FT_TRY(ft_bank_init(&L->bank[1], xs, FT_BANK_DOWN, E, H, I));
        FT_TRY(ft_bank_fill_random(pool, &L->bank[0], &seed));
        FT_TRY(ft_bank_fill_random(pool, &L->bank[1], &seed));
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
