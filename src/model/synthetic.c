/* synthetic.c — models with a real model's shapes and random bf16 weights generated in memory,
 * so large shapes can be benchmarked without checkpoints. Weights are uniform in
 * ±sqrt(3/fan_in) (unit-variance outputs); routing on such weights collapses, so benchmarks
 * draw expert ids from a seeded distribution instead (engine/forward.h, enum ft_routing).
 * Engine thread; fills in parallel on the pool (first touch places pages near their readers). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "core/sys.h"
#include "model/model.h"

struct preset {
    const char *name, *arch;
    int layers, hidden, heads, kv_heads, head_dim, experts, top_k, expert_inter, inter, vocab;
    double theta;
};

/* Shapes from the models' published config.json files. qwen3.6-35b-a3b is taken as a plain
 * Qwen3-MoE shape (its hybrid linear-attention layers and shared expert are not modelled). */
static const struct preset k_presets[] = {
    {"qwen3-30b-a3b", "Qwen3MoeForCausalLM", 48, 2048, 32, 4, 128, 128, 8, 768, 6144, 151936, 1e6},
    {"qwen3.6-35b-a3b", "Qwen3MoeForCausalLM", 40, 2048, 16, 2, 256, 256, 8, 512, 5120, 248320, 1e7},
    {"mixtral-8x7b", "MixtralForCausalLM", 32, 4096, 32, 8, 128, 8, 2, 14336, 14336, 32000, 1e6},
    {"tiny", "Qwen3MoeForCausalLM", 4, 256, 8, 2, 32, 16, 4, 128, 512, 1024, 1e6},
};

const char *ft_synthetic_presets(void) { return "qwen3-30b-a3b, qwen3.6-35b-a3b, mixtral-8x7b, tiny"; }

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
    size_t a = (size_t)lo * 4096, b = FT_MIN((size_t)hi * 4096, j->n);
    uint64_t s = j->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(lo + 1));
    for (size_t k = a; k < b; k++) {
        float u = (float)(ft_rng_next(&s) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        j->p[k] = ft_f32_to_bf16(u * j->scale);
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

enum ft_status ft_model_synthetic(const char *preset, struct ft_pool *pool, uint64_t seed,
                                  struct ft_model **out) {
    const struct preset *p = NULL;
    *out = NULL;
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (!strcmp(k_presets[i].name, preset)) p = &k_presets[i];
    if (!p)
        return ft_fail(FT_ERR_INVALID_ARG, "--synthetic: unknown preset '%s' (known: %s)", preset,
                       ft_synthetic_presets());
    struct ft_model *m = calloc(1, sizeof *m);
    if (!m) return ft_fail(FT_ERR_OOM, "out of memory");
    enum ft_status st;
    struct ft_config *c = &m->cfg;
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
    c->rms_norm_eps = 1e-6;
    c->norm_topk_prob = 1;
    c->decoder_sparse_step = 1;
    c->rope.theta = p->theta;
    c->rope.factor = 1;
    m->arch = ft_arch_find(p->arch);
    FT_TRY(ft_model_shapes(m));
    /* estimate and check RAM before touching gigabytes */
    double need = (double)p->layers * ((double)p->experts * 3 * p->expert_inter * p->hidden +
                                       (double)p->hidden * p->head_dim * (2 * p->heads + 2 * p->kv_heads)) * 2 +
                  2.0 * p->vocab * p->hidden * 2;
    uint64_t ram = ft_sys_ram_bytes();
    if (ram && need > 0.92 * (double)ram) {
        st = ft_fail(FT_ERR_OOM, "synthetic %s needs %.1f GiB of weights but this machine has "
                     "%.1f GiB RAM (use a smaller preset, e.g. tiny)", preset,
                     need / (1 << 30), (double)ram / (1 << 30));
        goto fail;
    }
    ft_log_info("synthetic %s: generating %.1f GiB of random bf16 weights", preset,
                need / (1 << 30));
    int H = m->hidden, q = m->n_heads * m->head_dim, kv = m->n_kv_heads * m->head_dim;
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
        if (m->arch->flags & FT_ARCH_QK_NORM) {
            if (!(L->q_norm = ones(m, m->head_dim)) || !(L->k_norm = ones(m, m->head_dim))) goto oom;
        }
        L->is_moe = 1;
        int E = m->n_experts, I = m->expert_inter;
        FT_TRY(weight(m, pool, &L->router, E, H, &seed));
        const struct ft_row_schema *bf16 = ft_row_schema_for(FT_DTYPE_BF16);
        FT_TRY(ft_bank_init(&L->bank[0], bf16, FT_BANK_GATE_UP, E, 2 * I, H));
        FT_TRY(ft_bank_init(&L->bank[1], bf16, FT_BANK_DOWN, E, H, I));
        for (int e = 0; e < E; e++) {
            rand_bf16(pool, ft_bank_expert(&L->bank[0], e), (size_t)2 * I * H, H, &seed);
            rand_bf16(pool, ft_bank_expert(&L->bank[1], e), (size_t)H * I, I, &seed);
        }
    }
    ft_model_sizes(m);
    *out = m;
    return FT_OK;
oom:
    st = ft_fail(FT_ERR_OOM, "synthetic %s: out of memory", preset);
fail:
    ft_model_free(m);
    return st;
}
