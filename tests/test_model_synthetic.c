/* test_model_synthetic.c — synthetic benchmark models (model/synthetic.c): experts in every
 * format decode (through the format's own spec-checked decoder, format/fp_formats.h and
 * format/ggml_quant.h) to finite values of about 1/sqrt(fan_in) rms, the weights do not depend
 * on the thread count, the gpt-oss shape carries its biases, sinks and alternating windows,
 * the 2025-26 families' presets (Qwen3.5 / 3.6 hybrids, DeepSeek-V3 / Kimi-K2 / GLM-4.7-Flash
 * MLA, GLM-4.5, MiniMax-M2) have their published shapes and run, and bad preset strings are
 * clear errors. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/threadpool.h"
#include "engine/forward.h"
#include "format/fp_formats.h"
#include "format/ggml_quant.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "test.h"

static void dequant(const struct ft_bank *b, int e, int r, float *dst) {
    enum ft_dtype t = b->schema->dtype;
    const uint8_t *row = ft_bank_expert(b, e) + (size_t)r * ft_dtype_row_bytes(t, b->cols);
    if (t == FT_DTYPE_NVFP4) ft_nvfp4_r_dequant_row(row, (size_t)b->cols, dst);
    else if (t == FT_DTYPE_FP8_B128) ft_fp8_b128_dequant_row(row, (size_t)b->cols, dst);
    else if (ft_dtype_is_block(t)) EXPECT_OK(ft_ggml_dequant_row(ft_dtype_ggml(t), row, dst, b->cols));
    else ft_to_f32(dst, row, t, (size_t)b->cols);
}

/* rms over every row of experts 0 and E-1, all finite */
static double bank_rms(const struct ft_bank *b) {
    float *v = malloc((size_t)b->cols * sizeof *v);
    double ss = 0;
    long n = 0, bad = 0;
    for (int e = 0; e < b->n_experts; e += b->n_experts - 1)
        for (int r = 0; r < b->rows; r++) {
            dequant(b, e, r, v);
            for (int k = 0; k < b->cols; k++) {
                if (!isfinite(v[k])) bad++;
                ss += (double)v[k] * v[k];
                n++;
            }
        }
    free(v);
    EXPECT_EQ(bad, 0);
    return sqrt(ss / (double)n);
}

TEST(synthetic_expert_formats_decode_to_unit_variance_outputs) {
    static const char *const fmts[] = {"tiny:bf16", "tiny:mxfp4", "tiny:nvfp4", "tiny:fp8",
                                       "tiny:q4_k", "tiny:q5_k", "tiny:q6_k", "tiny:q8_0",
                                       "tiny:q4_0", "tiny:q4_1", "tiny:q5_0", "tiny:q5_1"};
    static const enum ft_dtype want[] = {
        FT_DTYPE_BF16, FT_DTYPE_MXFP4, FT_DTYPE_NVFP4, FT_DTYPE_FP8_B128, FT_DTYPE_Q4_K, FT_DTYPE_Q5_K,
        FT_DTYPE_Q6_K, FT_DTYPE_Q8_0,  FT_DTYPE_Q4_0, FT_DTYPE_Q4_1,      FT_DTYPE_Q5_0, FT_DTYPE_Q5_1};
    struct ft_pool *p1, *p3;
    EXPECT_OK(ft_pool_init(&p1, 1));
    EXPECT_OK(ft_pool_init(&p3, 3));
    for (int f = 0; f < (int)(sizeof fmts / sizeof fmts[0]); f++) {
        struct ft_model *a = NULL, *b = NULL;
        EXPECT_OK(ft_model_synthetic(fmts[f], p1, 7, &a));
        EXPECT_OK(ft_model_synthetic(fmts[f], p3, 7, &b));
        if (!a || !b) continue;
        for (int l = 0; l < a->n_layers; l += a->n_layers - 1)
            for (int fam = 0; fam < FT_BANK_N_FAMILIES; fam++) {
                const struct ft_bank *x = &a->layers[l].bank[fam], *y = &b->layers[l].bank[fam];
                EXPECT_EQ(x->schema->dtype, want[f]);
                EXPECT(x->row_bytes == y->row_bytes && !memcmp(x->base, y->base, x->row_bytes));
                double rms = bank_rms(x), target = 1.0 / sqrt((double)x->cols);
                fprintf(stderr, "  %-11s layer %d %-7s [%d, %d] rms %.4f (1/sqrt(K) %.4f)\n", fmts[f], l,
                        fam ? "down" : "gate_up", x->rows, x->cols, rms, target);
                EXPECT(rms > 0.5 * target && rms < 2.0 * target);
            }
        ft_model_free(a);
        ft_model_free(b);
    }
    ft_pool_free(p1);
    ft_pool_free(p3);
}

TEST(synthetic_preset_errors) {
    struct ft_pool *pool;
    struct ft_model *m = (struct ft_model *)1;
    EXPECT_OK(ft_pool_init(&pool, 1));
    EXPECT_EQ(ft_model_synthetic("nope", pool, 1, &m), FT_ERR_INVALID_ARG);
    EXPECT(m == NULL);
    EXPECT_CONTAINS(ft_error(), "unknown preset 'nope'");
    EXPECT_EQ(ft_model_synthetic("tiny:q3_k", pool, 1, &m), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "unknown expert format 'q3_k'");
    EXPECT_EQ(ft_model_synthetic("tiny-gpt-oss:q4_k", pool, 1, &m), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "q4_k experts need widths that are multiples of 256 (256, 128)");
    EXPECT_EQ(ft_model_synthetic("tiny:", pool, 1, &m), FT_ERR_INVALID_ARG);
    /* '@N': N layers of the same shapes; a bad count names the fix */
    const char *bad[] = {"tiny@0", "tiny@", "tiny@x", "tiny@2x", "tiny:mxfp4@1025"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        EXPECT_EQ(ft_model_synthetic(bad[i], pool, 1, &m), FT_ERR_INVALID_ARG);
        EXPECT_CONTAINS(ft_error(), "'@' takes a layer count from 1 to 1024");
    }
    char long_name[300];
    memset(long_name, 'a', sizeof long_name - 1);
    memcpy(long_name, "tiny:", 5), long_name[sizeof long_name - 1] = '\0';
    EXPECT_EQ(ft_model_synthetic(long_name, pool, 1, &m), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "is too long");
    struct ft_model *full = NULL;
    EXPECT_OK(ft_model_synthetic("tiny:mxfp4", pool, 1, &full));
    EXPECT_OK(ft_model_synthetic("tiny:mxfp4@1", pool, 1, &m));
    if (full && m) {
        EXPECT(full->n_layers > 1);
        EXPECT_EQ(m->n_layers, 1);
        EXPECT_EQ(m->hidden, full->hidden);
        EXPECT_EQ(m->layers[0].bank[0].schema->dtype, FT_DTYPE_MXFP4);
    }
    ft_model_free(full);
    ft_model_free(m);
    ft_pool_free(pool);
}

/* A steep zipf (S = 30: every rank past the first few has probability below 2^-53, so the
 * draws cannot find top-4 distinct experts) completes: after 64 duplicates a draw takes the
 * first unused expert in rank order (it used to loop for ever). sticky:0 keeps nothing. */
TEST(synthetic_routing_steep_zipf_and_sticky_zero) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 1));
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_synthetic("tiny", pool, 1, &m));
    for (int r = 0; m && r < 2; r++) {
        struct ft_engine_opts eo = {.max_ctx = 32, .max_chunk = 16,
                                    .routing = r ? FT_ROUTING_STICKY : FT_ROUTING_ZIPF,
                                    .routing_param = r ? 0.0 : 30.0};
        struct ft_engine *e = NULL;
        EXPECT_OK(ft_engine_init(&e, m, pool, &eo));
        int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        float *lg = malloc((size_t)m->vocab * sizeof *lg);
        if (e && lg) {
            EXPECT_OK(ft_engine_forward(e, ids, 8, lg, 0));
            EXPECT_OK(ft_engine_forward(e, ids, 1, lg, 0));
            EXPECT(isfinite(lg[0]));
        }
        free(lg);
        ft_engine_free(e);
    }
    ft_model_free(m);
    ft_pool_free(pool);
}

/* tiny-gpt-oss: the gpt-oss presets' wiring (MXFP4 experts, biases, sinks, even layers
 * sliding over 128 tokens, clamped SwiGLU) at a size tests can build */
TEST(synthetic_gpt_oss_wiring) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_synthetic("tiny-gpt-oss", pool, 1, &m));
    if (m) {
        EXPECT_STREQ(m->arch->name, "GptOssForCausalLM");
        EXPECT_EQ(m->layers[0].bank[0].schema->dtype, FT_DTYPE_MXFP4);
        EXPECT_EQ(m->layers[0].window, 128);
        EXPECT_EQ(m->layers[1].window, 0);
        EXPECT(m->layers[1].sinks && m->layers[1].router_bias && m->layers[1].bq && m->layers[1].bo);
        EXPECT(m->layers[1].act.limit == 7.0f && m->layers[1].act.gu_bias && m->layers[1].act.down_bias);
        EXPECT(m->rope_mscale > 1.0f); /* YaRN factor 32: attention factor 0.1 ln 32 + 1 */
        ft_model_free(m);
    }
    ft_pool_free(pool);
}

/* The published shapes, from the configs alone: layer kinds, KV bytes per token (f32, as the
 * CPU engine keeps them: keys and values, or one latent row), recurrent state per sequence. */
TEST(synthetic_presets_have_the_published_shapes) {
    static const struct {
        const char *name;
        const char *arch;
        int layers, linear, moe, kv_per_tok;
        uint64_t state;
    } want[] = {
        /* 30 DeltaNet layers: 3 x (2 x 16 x 128 + 32 x 128) conv floats + 32 x 128 x 128 */
        {"qwen3.6-35b-a3b", "Qwen3_5MoeForCausalLM", 40, 30, 40, 2 * 4 * 2 * 256 * 10, 30ull * (3 * 8192 + 524288) * 4},
        {"qwen3.5-122b-a10b@8", "Qwen3_5MoeForCausalLM", 8, 6, 8, 2 * 4 * 2 * 256 * 2, 6ull * (3 * 12288 + 1048576) * 4},
        {"deepseek-v3", "DeepseekV3ForCausalLM", 61, 0, 58, 4 * (512 + 64) * 61, 0},
        {"kimi-k2@16", "DeepseekV3ForCausalLM", 16, 0, 15, 4 * (512 + 64) * 16, 0},
        {"glm-4.7-flash", "Glm4MoeLiteForCausalLM", 47, 0, 46, 4 * (512 + 64) * 47, 0},
        {"glm-4.5-air", "Glm4MoeForCausalLM", 46, 0, 45, 2 * 4 * 8 * 128 * 46, 0},
        {"minimax-m2@16", "MiniMaxM2ForCausalLM", 16, 0, 16, 2 * 4 * 8 * 128 * 16, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct ft_config c;
        const struct ft_arch *a = NULL;
        EXPECT_OK(ft_synthetic_config(want[i].name, &c, &a));
        if (!a) continue;
        EXPECT_STREQ(a->name, want[i].arch);
        EXPECT_EQ(c.n_layers, want[i].layers);
        int n_linear = 0, moe = 0;
        EXPECT(ft_config_state_bytes(&c, a, &n_linear) == want[i].state);
        EXPECT_EQ(n_linear, want[i].linear);
        for (int l = 0; l < c.n_layers; l++) moe += ft_config_layer_is_moe(&c, a, l);
        EXPECT_EQ(moe, want[i].moe);
        int mla = (a->flags & FT_ARCH_MLA) != 0, kvl = c.n_layers - n_linear;
        int kv = mla ? 4 * (c.kv_lora_rank + c.qk_rope_head_dim) * kvl : 2 * 4 * c.n_kv_heads * c.head_dim * kvl;
        EXPECT_EQ(kv, want[i].kv_per_tok);
        ft_config_free(&c);
    }
}

/* A prefill and a decode step give finite logits. */
static void run_steps(struct ft_model *m, struct ft_pool *pool) {
    struct ft_engine_opts eo = {.max_ctx = 32, .max_chunk = 16};
    struct ft_engine *e = NULL;
    EXPECT_OK(ft_engine_init(&e, m, pool, &eo));
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float *lg = malloc((size_t)m->vocab * sizeof *lg);
    if (e && lg) {
        EXPECT_OK(ft_engine_forward(e, ids, 8, lg, 0));
        EXPECT_OK(ft_engine_forward(e, ids, 1, lg, 0));
        int bad = 0;
        for (int v = 0; v < m->vocab; v++) bad += !isfinite(lg[v]);
        EXPECT_EQ(bad, 0);
    }
    free(lg);
    ft_engine_free(e);
}

/* The tiny presets' wiring (each family at a test size): DeltaNet and gated attention layers,
 * the latent attention with q LoRA and YaRN, groups and leading dense layers, plain shared
 * experts, biases, QK-norm over all heads; all run. */
TEST(synthetic_new_family_wiring) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_synthetic("tiny-qwen3.5", pool, 1, &m));
    if (m) {
        EXPECT_EQ(m->n_gdn, 3);
        EXPECT(m->layers[0].gdn && m->layers[0].gdn_conv && m->layers[0].gdn_A[0] < 0);
        EXPECT(!m->layers[3].gdn && m->layers[3].attn_gate && m->layers[3].q_norm);
        EXPECT_EQ(m->layers[3].wq.rows, 2 * m->n_heads * m->head_dim);
        EXPECT(m->layers[0].has_shared && m->layers[0].sh_score.data);
        EXPECT_EQ(m->rot_dim, 16); /* 0.25 of 64 */
        run_steps(m, pool);
        ft_model_free(m);
    }
    m = NULL;
    EXPECT_OK(ft_model_synthetic("tiny-deepseek", pool, 1, &m));
    if (m) {
        EXPECT(m->mla && m->layers[0].mla && m->layers[0].q_a.data && m->layers[0].uk_t.data);
        EXPECT(!m->layers[0].is_moe && m->layers[1].is_moe && m->layers[1].router_score_bias);
        EXPECT(m->router_sigmoid && m->n_group == 4 && m->topk_group == 2 && m->routed_scale == 2.5f);
        EXPECT(m->layers[1].has_shared && !m->layers[1].sh_score.data && m->shared_inter == 128);
        EXPECT(m->attn_scale > 1.0f / sqrtf(48.0f)); /* YaRN's mscale^2 on the softmax scale */
        run_steps(m, pool);
        ft_model_free(m);
    }
    m = NULL;
    EXPECT_OK(ft_model_synthetic("tiny-glm", pool, 1, &m));
    if (m) {
        EXPECT(m->layers[1].bq && m->layers[1].bk && m->layers[1].bv && !m->layers[1].q_norm);
        EXPECT_EQ(m->rot_dim, 16); /* half of 32 */
        EXPECT(!m->layers[0].is_moe && m->layers[1].is_moe);
        run_steps(m, pool);
        ft_model_free(m);
    }
    m = NULL;
    EXPECT_OK(ft_model_synthetic("tiny-deepseek-v4", pool, 1, &m));
    if (m) { /* HCA, HCA, HCA, CSA (transformers' default schedule), the first 3 hash-routed */
        EXPECT(m->v4 && m->v4->hc == 2 && m->v4->rot == 16 && m->n_kv_heads == 1);
        EXPECT(m->layers[0].v4->kind == 3 && m->layers[3].v4->kind == 2 && m->layers[3].idx_wq.data);
        EXPECT(m->layers[0].v4->hash && m->layers[0].v4->tid2eid && !m->layers[3].v4->hash);
        EXPECT(m->layers[3].has_shared && m->shared_inter == 128 && m->layers[3].router_score_bias);
        run_steps(m, pool);
        ft_model_free(m);
    }
    m = NULL;
    EXPECT_OK(ft_model_synthetic("tiny-minimax", pool, 1, &m));
    if (m) {
        EXPECT(m->layers[0].qk_norm_all && m->layers[0].is_moe && !m->layers[0].has_shared);
        EXPECT_EQ(m->expert_inter, 128);
        EXPECT(m->norm_topk && m->router_sigmoid);
        run_steps(m, pool);
        ft_model_free(m);
    }
    ft_pool_free(pool);
}

/* Real shapes at a few layers, experts Q4_0 to keep them small: Qwen3.6-35B-A3B's three
 * DeltaNet layers and one gated attention layer; GLM-4.7-Flash's dense layer and a MoE one. */
TEST(synthetic_real_shapes_run) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_synthetic("qwen3.6-35b-a3b:q4_0@4", pool, 1, &m));
    if (m) {
        EXPECT(m->n_gdn == 3 && m->gdn_hk == 16 && m->gdn_hv == 32 && m->gdn_dk == 128);
        EXPECT(m->n_experts == 256 && m->top_k == 8 && m->expert_inter == 512 && m->shared_inter == 512);
        EXPECT_EQ(ft_model_state_bytes(m), 3ull * (3 * 8192 + 524288) * 4);
        run_steps(m, pool);
        ft_model_free(m);
    }
    m = NULL;
    EXPECT_OK(ft_model_synthetic("glm-4.7-flash:q4_0@2", pool, 1, &m));
    if (m) {
        EXPECT(m->mla_q_lora == 768 && m->mla_kv_lora == 512 && m->mla_nope == 192 && m->mla_v == 256);
        EXPECT(!m->layers[0].is_moe && m->layers[1].is_moe && m->n_experts == 64 && m->top_k == 4);
        EXPECT(m->routed_scale == 1.8f);
        run_steps(m, pool);
        ft_model_free(m);
    }
    ft_pool_free(pool);
}

/* `ft inspect --synthetic` sizes a preset without making it: the published parameter counts,
 * KV bytes per token and, for the hybrids, the recurrent state per sequence. */
TEST(synthetic_inspect_prints_kv_and_state) {
    static const char *const want[][3] = {
        {"qwen3.6-35b-a3b", "34.66 B total", "kv cache      40.0 KiB per token (10 attention layers); "
         "recurrent state 62.81 MiB per sequence (30 Gated DeltaNet layers)"},
        /* the prefix cache's checkpoints: one recurrent state each, 1 GiB / 62.81 MiB = 16.3 */
        {"qwen3.6-35b-a3b", "prefix cache  one recurrent-state checkpoint a cached prompt",
         "62.81 MiB each: 16 fit the default --prefix-state-mem (1.00 GiB)"},
        {"deepseek-v3", "671.54 B total", "kv cache      137.2 KiB per token (61 latent attention layers)"},
        {"glm-4.7-flash:q4_k@4", "experts       64 per layer in 3 MoE layers", "9.0 KiB per token"},
        /* GLM-5: the latent (512), the rope key (64) and the indexer key (128) in f32, 78 layers */
        {"glm-5", "744.40 B total", "kv cache      214.5 KiB per token (78 latent attention layers)"},
        /* DeepSeek-V4-Flash: 284B / 13B; per token 20 CSA entries (512 + 128 floats / 4) and 23
         * HCA ones (512 / 128), f32; the windows and pending rows a fixed 23.81 MiB a sequence */
        {"deepseek-v4-flash", "284.32 B total", "kv cache      12.9 KiB per token (compressed entries, "
         "f32: 20 CSA layers with their indexer keys, 23 HCA) + 23.81 MiB per sequence"},
    };
    static char out[1 << 14];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "'%s' inspect --synthetic %s 2>/dev/null", FT_BIN, want[i][0]);
        FILE *f = popen(cmd, "r");
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        out[n] = 0;
        int rc = f ? pclose(f) : -1;
        EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
        EXPECT_CONTAINS(out, want[i][1]);
        EXPECT_CONTAINS(out, want[i][2]);
    }
}

TEST_MAIN("model_synthetic")
