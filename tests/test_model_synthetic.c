/* test_model_synthetic.c — synthetic benchmark models (model/synthetic.c): experts in every
 * format decode (through the format's own spec-checked decoder, format/fp_formats.h and
 * format/ggml_quant.h) to finite values of about 1/sqrt(fan_in) rms, the weights do not depend
 * on the thread count, the gpt-oss shape carries its biases, sinks and alternating windows,
 * and bad preset strings are clear errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "engine/forward.h"
#include "format/fp_formats.h"
#include "format/ggml_quant.h"
#include "model/model.h"
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

TEST_MAIN("model_synthetic")
