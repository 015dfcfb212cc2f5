/* test_model_fixtures.c — every architecture against transformers: the tiny bf16 checkpoints
 * under tests/data/models (tools/gen_fixtures.py; gpt_oss and its MXFP4 twin from
 * tools/gen_gptoss_fixtures.py; qwen3_moe_fp8 / _nvfp4 from tools/gen_quant_fixtures.py;
 * deepseek_v4_fp4, DeepSeek-V4-Flash's spelling (FP4 experts, FP8 + E8M0 block scales), from
 * tools/gen_v4_quant_fixture.py; the
 * *_n08 ones of issue 25 also with float64 logits) with transformers' fp32 logits for a 24-token
 * prompt and its 12 greedy tokens. Checks max |logit - reference| <= 1e-3 at every position,
 * identical greedy tokens, chunked prefill == one-shot prefill, and the ISA tiers agree.
 * The GGUF fixtures (tests/data/gguf/models, tools/gen_gguf_fixtures.py: Q4_K_M-style mixes,
 * Q4_0/Q8_0, stacked Q4_K/Q6_K experts) are checked against transformers loading the same
 * .gguf file, at the same tolerance: both compute with the exact dequantised values; those of
 * llama.cpp's converter (tools/gen_gguf_hybrid.py, tools/gen_gguf_mla.py) against the bf16
 * checkpoint they came from, or transformers on the dequantised Q8_0 file. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/ops.h"
#include "core/threadpool.h"
#include "engine/forward.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "test.h"

static const char *const k_fixtures[] = {"qwen3_moe", "qwen3_moe_nonorm", "qwen2_moe", "mixtral",
                                         "llama",     "mistral",          "qwen2",     "qwen3",
                                         "gpt_oss",   "gpt_oss_mxfp4",    "qwen3_moe_fp8", "qwen3_moe_nvfp4",
                                         "gemma3",    "qwen3_moe_n08",    "mixtral_n08",
                                         "qwen3_5_moe", "qwen3_5_moe_vl",  "qwen3_next", "qwen3_5",
                                         "deepseek_v3", "deepseek_v3_noqlora", "glm4_moe",
                                         "glm4_moe_qknorm", "glm4_moe_lite", "minimax_m2",
                                         "glm_moe_dsa", "deepseek_v2", "deepseek_v2_lite",
                                         "deepseek_v4", "deepseek_v4_fused", "deepseek_v4_fp4"};

/* issue 25's exact-path fixtures: N(0, 0.08) matrices, U(0.8, 1.2) norms (QK-norm in
 * qwen3_moe_n08), logits of sd 0.5; their reference holds transformers in float64 too */
static const char *const k_exact[] = {"qwen3_moe_n08", "mixtral_n08"};
#define EXACT_TOL 1e-4

static const char *const k_gguf[] = {"qwen2_q4km", "llama_q40", "qwen3moe_q4km", "qwen2moe_q8",
                                     "qwen2_q4km_split", "gpt_oss_mxfp4", "gemma3",
                                     "qwen35moe_bf16", "qwen35_bf16", "qwen3next_bf16",
                                     "qwen35moe_q8", "qwen35_q8",
                                     /* tools/gen_gguf_mla.py: llama.cpp's converter on the MLA and
                                        sigmoid-router fixtures (bf16) and random Q8_0 ones */
                                     "deepseek2_bf16", "deepseek2_noq_bf16", "glm47flash_bf16",
                                     "glm4moe_bf16", "glm4moe_qknorm_bf16", "minimax_m2_bf16",
                                     "deepseek2_q8", "glm4moe_q8", "minimax_m2_q8",
                                     /* tools/gen_gguf_mla_legacy.py: one attn_kv_b, as files
                                        converted before llama.cpp split it */
                                     "deepseek2_legacy_bf16"};
#define GGUF_TOL 1e-3

struct ref {
    struct ft_st_file *f;
    const int32_t *ids, *greedy;
    const float *logits;
    int T, n_greedy, vocab;
};

static int load_ref(const char *path, struct ref *r) {
    if (ft_st_open(path, &r->f) != FT_OK) return -1;
    const struct ft_st_tensor *ids = ft_st_find(r->f, "ids"), *lg = ft_st_find(r->f, "logits"),
                              *gr = ft_st_find(r->f, "greedy");
    if (!ids || !lg || !gr || ids->dtype != FT_DTYPE_I32 || lg->dtype != FT_DTYPE_F32) return -1;
    r->ids = ids->data;
    r->logits = lg->data;
    r->greedy = gr->data;
    r->T = (int)ids->shape[0];
    r->vocab = (int)lg->shape[1];
    r->n_greedy = (int)gr->shape[0];
    return 0;
}

static double max_err(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

/* model: a checkpoint directory or .gguf file; ref: its reference.safetensors */
static void check_model(const char *name, const char *model, const char *ref, double tol,
                        struct ft_pool *pool, int chunk) {
    struct ref r = {0};
    struct ft_model *m = NULL;
    struct ft_engine *e = NULL;
    EXPECT(load_ref(ref, &r) == 0);
    EXPECT_OK(ft_model_load(model, &m));
    if (!m || !r.f) goto done;
    EXPECT_EQ(m->vocab, r.vocab);
    struct ft_engine_opts eo = {.max_ctx = r.T + r.n_greedy, .max_chunk = chunk};
    EXPECT_OK(ft_engine_init(&e, m, pool, &eo));
    if (!e) goto done;
    float *logits = malloc((size_t)r.T * m->vocab * sizeof *logits);
    EXPECT_OK(ft_engine_prefill(e, r.ids, r.T, logits, 1));
    double err = max_err(logits, r.logits, (size_t)r.T * m->vocab);
    fprintf(stderr, "  %-18s chunk %2d  max |dlogit| %.2e\n", name, chunk, err);
    CHECK_(err <= tol, "%s: max |logit - transformers| = %g > %g", name, err, tol);
    /* greedy continuation, teacher-forced prompt then decode one token at a time */
    ft_engine_reset(e);
    EXPECT_OK(ft_engine_prefill(e, r.ids, r.T, logits, 0));
    int same = 1;
    for (int g = 0; g < r.n_greedy; g++) {
        int32_t next = ft_argmax(logits, m->vocab);
        if (next != r.greedy[g]) {
            fprintf(stderr, "  %s: greedy token %d is %d, transformers %d\n", name, g, next,
                    r.greedy[g]);
            same = 0;
            break;
        }
        if (g + 1 < r.n_greedy && ft_engine_forward(e, &next, 1, logits, 0) != FT_OK) same = 0;
    }
    CHECK_(same, "%s: greedy tokens differ from transformers", name);
    /* the same continuation with ids alone from each decode step (ft_engine_forward_greedy) */
    ft_engine_reset(e);
    EXPECT_OK(ft_engine_prefill(e, r.ids, r.T, logits, 0));
    int32_t next = ft_argmax(logits, m->vocab);
    for (int g = 0; g < r.n_greedy && same; g++) {
        CHECK_(next == r.greedy[g], "%s: ids-only greedy token %d is %d, transformers %d", name, g,
               next, r.greedy[g]);
        if (next != r.greedy[g]) break;
        if (g + 1 < r.n_greedy) EXPECT_OK(ft_engine_forward_greedy(e, &next, 1, &next));
    }
    free(logits);
done:
    ft_engine_free(e);
    ft_model_free(m);
    ft_st_close(r.f);
}

static void check_fixture(const char *name, struct ft_pool *pool, int chunk) {
    char dir[512], ref[600];
    snprintf(dir, sizeof dir, "%s/models/%s", FT_TEST_DATA, name);
    snprintf(ref, sizeof ref, "%s/reference.safetensors", dir);
    check_model(name, dir, ref, 1e-3, pool, chunk);
}

static void gguf_paths(const char **name, char *path, char *ref, size_t cap) {
    snprintf(path, cap, "%s/gguf/models/%s.gguf", FT_TEST_DATA, *name);
    if (!strcmp(*name, "qwen2_q4km_split")) /* a folder of gguf-split shards: the first opens all */
        snprintf(path, cap, "%s/gguf/models/qwen2_q4km_split", FT_TEST_DATA), *name = "qwen2_q4km";
    snprintf(ref, cap, "%s/gguf/models/%s.ref.safetensors", FT_TEST_DATA, *name);
}


static void check_gguf_fixture(const char *name, struct ft_pool *pool, int chunk) {
    char path[512], ref[512];
    gguf_paths(&name, path, ref, sizeof path);
    check_model(name, path, ref, GGUF_TOL, pool, chunk);
}

TEST(fixtures_match_transformers) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    for (size_t i = 0; i < sizeof k_fixtures / sizeof k_fixtures[0]; i++)
        check_fixture(k_fixtures[i], pool, 512);
    ft_pool_free(pool);
}

/* Chunked prefill (5 tokens per call, crossing the KV cache boundary mid-prompt) and a
 * 3-thread pool must give the same logits as well. */
TEST(fixtures_chunked_prefill_and_odd_pool) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 3));
    check_fixture("qwen3_moe", pool, 5);
    check_fixture("mistral", pool, 5); /* sliding window 8 across chunks */
    check_fixture("qwen2_moe", pool, 7);
    check_fixture("gpt_oss", pool, 5); /* sliding window 8 on alternate layers, sinks */
    check_fixture("gemma3", pool, 5);  /* sliding layers with their own RoPE base */
    check_fixture("qwen3_moe_n08", pool, 5);
    /* Gated DeltaNet layers: the conv window and the delta-rule state carried across chunks of
     * 5, of 3 (shorter than the conv kernel) and of 1 */
    check_fixture("qwen3_5_moe", pool, 5);
    check_fixture("qwen3_next", pool, 3);
    check_fixture("qwen3_5", pool, 1);
    /* the latent KV cache across chunks; sigmoid routers per chunk */
    check_fixture("deepseek_v3", pool, 5);
    check_fixture("deepseek_v3_noqlora", pool, 3);
    check_fixture("glm4_moe_lite", pool, 7);
    check_fixture("minimax_m2", pool, 5);
    /* DSA: the indexer keys cached beside the latents across chunks, top-k per query */
    check_fixture("glm_moe_dsa", pool, 5);
    check_fixture("glm_moe_dsa", pool, 1);
    /* DeepSeek-V4: the windows, the compressors' pending rows and entries, the indexer's keys
     * carried across chunks of 5 and of 1 (40 prompt tokens: past the window of 6, 10 CSA entries
     * of which the indexer keeps 3, 5 HCA ones) */
    check_fixture("deepseek_v4", pool, 5);
    check_fixture("deepseek_v4", pool, 1);
    check_fixture("deepseek_v4_fp4", pool, 7);
    ft_pool_free(pool);
}

/* Models that keep a state per sequence (the DeltaNet hybrids' recurrent state; DeepSeek-V4's
 * windows, compressors' pending rows and compressed entries) give each sequence its solo
 * logits when it shares a batch: a (la tokens) runs its first `split` alone, then its rest beside
 * all of b (lb) in one step, then a decode step; a freed sequence's state goes with its blocks,
 * and a new sequence in its place starts clean; a sequence cannot continue from a position it
 * did not reach (no state); truncation keeps all or nothing. */
static void state_case(const char *dir, int threads, int max_chunk, int la, int lb, int split) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, threads));
    struct ft_model *m = NULL;
    struct ft_engine *e = NULL, *solo = NULL;
    EXPECT_OK(ft_model_load(dir, &m));
    struct ft_engine_opts eo = {.max_ctx = 48, .max_chunk = max_chunk, .kv_tokens = 144};
    if (m) EXPECT_OK(ft_engine_init(&e, m, pool, &eo));
    if (m) EXPECT_OK(ft_engine_init(&solo, m, pool, &eo));
    if (!e || !solo) goto done;
    const int V = m->vocab;
    int32_t a[48], b[48], blocks[3][3];
    for (int i = 0; i < la; i++) a[i] = (i * 37 + 5) % V;
    for (int i = 0; i < lb; i++) b[i] = (i * 53 + 11) % V;
    for (int s = 0; s < 3; s++) EXPECT_OK(ft_engine_kv_alloc(e, 3, blocks[s]));
    float *lg = malloc((size_t)4 * V * sizeof *lg), *ra = malloc((size_t)2 * V * sizeof *ra);
    float *rb = malloc((size_t)V * sizeof *rb);
    int32_t more = 7;
    /* solo references: a's last logits, then after one more token; b's */
    EXPECT_OK(ft_engine_prefill(solo, a, la, ra, 0));
    EXPECT_OK(ft_engine_forward(solo, &more, 1, ra + V, 0));
    ft_engine_reset(solo);
    EXPECT_OK(ft_engine_prefill(solo, b, lb, rb, 0));
    struct ft_seg s1 = {a, split, 0, blocks[0], FT_LOGITS_NONE};
    EXPECT_OK(ft_engine_forward_batch(e, &s1, 1, NULL));
    struct ft_seg s2[2] = {{a + split, la - split, split, blocks[0], FT_LOGITS_LAST},
                           {b, lb, 0, blocks[1], FT_LOGITS_LAST}};
    EXPECT_OK(ft_engine_forward_batch(e, s2, 2, lg));
    EXPECT(max_err(lg, ra, V) <= 1e-4);
    EXPECT(max_err(lg + V, rb, V) <= 1e-4);
    struct ft_seg s3 = {&more, 1, la, blocks[0], FT_LOGITS_LAST};
    EXPECT_OK(ft_engine_forward_batch(e, &s3, 1, lg));
    EXPECT(max_err(lg, ra + V, V) <= 1e-4);
    /* b's blocks freed and taken again: a new sequence on them matches b's solo run */
    ft_engine_kv_free(e, blocks[1], 3);
    EXPECT_OK(ft_engine_kv_alloc(e, 3, blocks[1]));
    struct ft_seg s4 = {b, lb, 0, blocks[1], FT_LOGITS_LAST};
    EXPECT_OK(ft_engine_forward_batch(e, &s4, 1, lg));
    EXPECT(max_err(lg, rb, V) <= 1e-4);
    /* a sequence that never ran cannot continue mid-way */
    struct ft_seg s5 = {b, 2, 4, blocks[2], FT_LOGITS_LAST};
    EXPECT_EQ(ft_engine_forward_batch(e, &s5, 1, lg), FT_ERR_INVALID_ARG);
    /* truncation of such a model's own sequence: all or nothing */
    ft_engine_reset(solo);
    EXPECT_OK(ft_engine_prefill(solo, a, 12, lg, 0));
    EXPECT_EQ(ft_engine_truncate(solo, 12), 12);
    EXPECT_EQ(ft_engine_truncate(solo, 5), 0);
    free(lg), free(ra), free(rb);
done:
    ft_engine_free(e);
    ft_engine_free(solo);
    ft_model_free(m);
    ft_pool_free(pool);
}

TEST(hybrid_sequences_keep_their_own_state) {
    state_case(FT_TEST_DATA "/models/qwen3_5_moe", 2, 32, 12, 9, 7);
}

/* DeepSeek-V4's prompts pass the window (6), several CSA / HCA entries and the indexer's top-3. */
TEST(v4_sequences_keep_their_own_state) {
    state_case(FT_TEST_DATA "/models/deepseek_v4", 3, 64, 30, 22, 17);
}

/* DeepSeek's own tensor names (its checkpoints as transformers' conversion reads them: no
 * "model." prefix, embed.weight, hc_head_fn, layers.N.attn.wq_a.weight ...) load to the same
 * logits as save_pretrained's. */
TEST(v4_deepseek_spelling) {
    char dir[64], path[700];
    snprintf(dir, sizeof dir, "/tmp/ft_v4_own_%d", (int)getpid());
    snprintf(path, sizeof path, "mkdir -p %s && cp %s/models/deepseek_v4/config.json %s/", dir, FT_TEST_DATA, dir);
    EXPECT(system(path) == 0);
    struct ft_st_file *f = NULL;
    EXPECT_OK(ft_st_open(FT_TEST_DATA "/models/deepseek_v4/model.safetensors", &f));
    if (!f) return;
    const int n = ft_st_count(f);
    struct ft_st_out *out = calloc((size_t)n, sizeof *out);
    char (*names)[160] = calloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) {
        const struct ft_st_tensor *t = ft_st_at(f, i);
        const char *nm = t->name;
        if (!strcmp(nm, "model.embed_tokens.weight")) nm = "embed.weight";
        else if (!strncmp(nm, "model.hc_head.", 14)) snprintf(names[i], sizeof names[i], "hc_head_%s", nm + 17), nm = names[i];
        else if (!strncmp(nm, "model.", 6)) nm += 6;
        if (nm != names[i]) snprintf(names[i], sizeof names[i], "%s", nm);
        out[i] = (struct ft_st_out){names[i], t->dtype, t->n_dims, {0}, t->data};
        memcpy(out[i].shape, t->shape, sizeof out[i].shape);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    EXPECT_OK(ft_st_write(path, out, n));
    free(out), free(names);
    ft_st_close(f);
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    check_model("deepseek_v4 (own names)", dir, FT_TEST_DATA "/models/deepseek_v4/reference.safetensors", 1e-3,
                pool, 512);
    ft_pool_free(pool);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    EXPECT(system(path) == 0);
}

/* deepseek_v4_fp4 as DeepSeek-V4-Flash stores it: its experts land in MXFP4 banks, the FP8
 * matrices as FP8_B128 rows, and a copy with one scale tensor missing, of the wrong shape, of
 * the wrong dtype or holding a NaN (E8M0 0xFF) fails to load with an error naming it. */
static void v4_fp4_broken(const char *what, const char *victim, int how, const char *want) {
    char dir[96], path[700];
    snprintf(dir, sizeof dir, "/tmp/ft_v4_fp4_%d", (int)getpid());
    snprintf(path, sizeof path, "rm -rf %s && mkdir -p %s && cp %s/models/deepseek_v4_fp4/config.json %s/",
             dir, dir, FT_TEST_DATA, dir);
    EXPECT(system(path) == 0);
    struct ft_st_file *f = NULL;
    EXPECT_OK(ft_st_open(FT_TEST_DATA "/models/deepseek_v4_fp4/model.safetensors", &f));
    if (!f) return;
    const int n = ft_st_count(f);
    struct ft_st_out *out = calloc((size_t)n, sizeof *out);
    uint8_t *nan = NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const struct ft_st_tensor *t = ft_st_at(f, i);
        out[k] = (struct ft_st_out){t->name, t->dtype, t->n_dims, {0}, t->data};
        memcpy(out[k].shape, t->shape, sizeof out[k].shape);
        if (!strcmp(t->name, victim)) {
            if (how == 0) continue;                                /* missing */
            if (how == 1) out[k].shape[1] = t->shape[1] / 2;       /* wrong shape */
            if (how == 2) out[k].dtype = FT_DTYPE_I8;              /* wrong dtype */
            if (how == 3) {                                        /* a NaN scale */
                nan = malloc(t->n_bytes);
                memcpy(nan, t->data, t->n_bytes);
                nan[1] = 0xff;
                out[k].data = nan;
            }
        }
        k++;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    EXPECT_OK(ft_st_write(path, out, k));
    free(out), free(nan);
    ft_st_close(f);
    struct ft_model *m = NULL;
    enum ft_status st = ft_model_load(dir, &m);
    CHECK_(st != FT_OK, "deepseek_v4_fp4 with %s loaded", what);
    if (st != FT_OK) EXPECT_CONTAINS(ft_error(), want);
    ft_model_free(m);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    EXPECT(system(path) == 0);
}

TEST(v4_published_quant_spelling) {
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/deepseek_v4_fp4", &m));
    if (m) {
        const struct ft_layer *L = &m->layers[1];
        EXPECT_EQ(L->bank[FT_BANK_GATE_UP].schema->dtype, FT_DTYPE_MXFP4);
        EXPECT_EQ(L->bank[FT_BANK_DOWN].schema->dtype, FT_DTYPE_MXFP4);
        EXPECT_EQ(L->q_a.dtype, FT_DTYPE_FP8_B128);
        EXPECT_EQ(L->v4->o_a.dtype, FT_DTYPE_FP8_B128);
        EXPECT_EQ(L->sh_down.dtype, FT_DTYPE_FP8_B128);
        EXPECT_EQ(L->v4->c_kv.dtype, FT_DTYPE_BF16); /* the compressors ship in BF16 */
        EXPECT_EQ(L->act.mode, FT_SWIGLU_CLAMP);
    }
    ft_model_free(m);
    const char *sc = "layers.2.ffn.experts.5.w3.scale";
    v4_fp4_broken("an expert scale missing", sc, 0, sc);
    v4_fp4_broken("an expert scale of the wrong shape", sc, 1, sc);
    v4_fp4_broken("an expert scale of the wrong dtype", sc, 2, "F8_E8M0");
    v4_fp4_broken("a NaN expert scale", sc, 3, sc);
    v4_fp4_broken("an FP8 block scale missing", "layers.3.attn.wq_a.scale", 0, "layers.3.attn.wq_a.weight");
    v4_fp4_broken("an FP8 block scale of the wrong shape", "layers.0.ffn.shared_experts.w2.scale", 1,
                  "F32/BF16/F16/F8_E8M0 [2, 1]");
}

/* Every ISA tier this CPU has must reproduce transformers too (scalar is the plain reference). */
TEST(fixtures_every_isa_tier) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    enum ft_cpu_isa best = ft_cpu_isa();
    for (int t = FT_ISA_SCALAR; t <= (int)best; t++) {
        enum ft_cpu_isa got = ft_cpu_set_isa((enum ft_cpu_isa)t);
        if ((int)got != t) continue;
        fprintf(stderr, "  tier %s\n", ft_cpu_isa_name(got));
        check_fixture("mixtral", pool, 512);
        check_fixture("llama", pool, 512);
        check_fixture("gpt_oss_mxfp4", pool, 512); /* MXFP4 expert blocks in every tier */
        check_fixture("qwen3_moe_fp8", pool, 512); /* FP8 rows, partial 128-blocks */
        check_fixture("qwen3_moe_nvfp4", pool, 512);
        check_fixture("deepseek_v4_fp4", pool, 512); /* FP4 experts as MXFP4, FP8 + E8M0 scales */
    }
    ft_cpu_set_isa(best);
    ft_pool_free(pool);
}

/* The exact path (fp32 activations on bf16 weights) stays at fp32's own noise: within 1e-4 of
 * transformers' fp32 logits and of its float64 ones (logits64) on every ISA tier, where one
 * step rounded to 10 or 8 mantissa bits (fp16/TF32, bf16) would cost 1e-3 to 1e-2. Measured:
 * ~1e-6 from both, transformers fp32 itself ~1e-6 from float64. */
TEST(exact_path_precision) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    enum ft_cpu_isa best = ft_cpu_isa();
    for (int t = FT_ISA_SCALAR; t <= (int)best; t++) {
        if ((int)ft_cpu_set_isa((enum ft_cpu_isa)t) != t) continue;
        for (size_t i = 0; i < sizeof k_exact / sizeof k_exact[0]; i++) {
            char dir[512], refp[600];
            snprintf(dir, sizeof dir, "%s/models/%s", FT_TEST_DATA, k_exact[i]);
            snprintf(refp, sizeof refp, "%s/reference.safetensors", dir);
            struct ref r = {0};
            struct ft_model *m = NULL;
            struct ft_engine *e = NULL;
            float *lg = NULL;
            EXPECT(load_ref(refp, &r) == 0);
            const struct ft_st_tensor *l64 = r.f ? ft_st_find(r.f, "logits64") : NULL;
            EXPECT(l64 && l64->dtype == FT_DTYPE_F32);
            EXPECT_OK(ft_model_load(dir, &m));
            struct ft_engine_opts eo = {.max_ctx = r.T, .max_chunk = 512};
            if (m && l64) EXPECT_OK(ft_engine_init(&e, m, pool, &eo));
            size_t n = (size_t)r.T * r.vocab;
            if (e && (lg = malloc(n * sizeof *lg))) {
                EXPECT_OK(ft_engine_prefill(e, r.ids, r.T, lg, 1));
                double e32 = max_err(lg, r.logits, n), e64 = max_err(lg, l64->data, n),
                       hf = max_err(r.logits, l64->data, n);
                fprintf(stderr, "  %-12s %-14s |ft - fp32| %.2e  |ft - fp64| %.2e  (transformers fp32 "
                        "- fp64 %.2e)\n", ft_cpu_isa_name((enum ft_cpu_isa)t), k_exact[i], e32, e64, hf);
                CHECK_(e32 <= EXACT_TOL && e64 <= EXACT_TOL, "%s (%s): exact path %g from transformers "
                       "fp32, %g from fp64 (> %g)", k_exact[i], ft_cpu_isa_name((enum ft_cpu_isa)t),
                       e32, e64, EXACT_TOL);
            }
            free(lg);
            ft_engine_free(e);
            ft_model_free(m);
            ft_st_close(r.f);
        }
    }
    ft_cpu_set_isa(best);
    ft_pool_free(pool);
}

/* Gemma 3 configs as transformers 4.5x wrote them (google/gemma-3-*: rope_theta +
 * rope_scaling for the global layers, rope_local_base_freq, sliding_window_pattern, no
 * layer_types / rope_parameters) give the same model. */
TEST(gemma3_legacy_config_spelling) {
    char src[600], dir[64], path[2048];
    snprintf(src, sizeof src, "%s/models/gemma3", FT_TEST_DATA);
    snprintf(dir, sizeof dir, "/tmp/ft_gemma3_legacy_%d", (int)getpid()); /* not the cwd */
    snprintf(path, sizeof path, "mkdir -p %s && cp %s/model.safetensors %s/", dir, src, dir);
    EXPECT(system(path) == 0);
    snprintf(path, sizeof path, "%s/config.json", src);
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    EXPECT(c != NULL);
    if (!c) return;
    json_object_del(c, "layer_types");
    json_object_del(c, "rope_parameters");
    json_object_set_new(c, "rope_theta", json_real(1000000.0));
    json_object_set_new(c, "rope_scaling", json_pack("{s:s, s:f}", "rope_type", "linear", "factor", 4.0));
    json_object_set_new(c, "rope_local_base_freq", json_real(10000.0));
    json_object_set_new(c, "sliding_window_pattern", json_integer(6));
    snprintf(path, sizeof path, "%s/config.json", dir);
    EXPECT(json_dump_file(c, path, 0) == 0);
    json_decref(c);
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    snprintf(path, sizeof path, "%s/reference.safetensors", src);
    check_model("gemma3 (4.5x config)", dir, path, 1e-3, pool, 512);
    ft_pool_free(pool);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    EXPECT(system(path) == 0);
}

/* llama.cpp files: names, metadata, q/k interleave (llama), block formats, stacked experts */
TEST(gguf_fixtures_match_transformers) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    for (size_t i = 0; i < sizeof k_gguf / sizeof k_gguf[0]; i++) {
        check_gguf_fixture(k_gguf[i], pool, 512);
        check_gguf_fixture(k_gguf[i], pool, 5);
    }
    ft_pool_free(pool);
}

/* --cpu-act fast (the CLI's default): activations rounded to int8 (block formats) or bf16
 * (bf16 weights) move the logits off the exact ones by the rounding of x. The prompt's logits
 * must stay within the fixture's tolerance of transformers' at 90% of the positions at least,
 * and decode (transformers' greedy tokens fed back one at a time, the T = 1 kernels) within
 * it of the exact fp32 engine's (itself checked against transformers above) at 90% of the
 * steps: a position whose router picks another expert because of the rounding (these tiny
 * random routers nearly tie) moves by more, and no more than one in ten may. Greedy tokens are
 * not compared: the random-block fixtures have top-1 margins down to 0.01. chunk 5 gives the
 * same logits bit for bit (per-token rounding and accumulation do not depend on T).
 * Tolerances: 0.1 for hidden sizes of 256 or more; 0.3 for gpt_oss_mxfp4, whose hidden size 32
 * is a single int8 block per row (its logits have sd 2). */
static void check_int8(const char *name, double tol, struct ft_pool *pool, int chunk) {
    char path[512], refp[512];
    gguf_paths(&name, path, refp, sizeof path);
    struct ref r = {0};
    struct ft_model *m = NULL;
    struct ft_engine *e8 = NULL, *e32 = NULL, *ec = NULL;
    float *lg8 = NULL, *lg32 = NULL, *lgc = NULL;
    EXPECT(load_ref(refp, &r) == 0);
    EXPECT_OK(ft_model_load(path, &m));
    if (!m || !r.f) goto done;
    struct ft_engine_opts eo = {.max_ctx = r.T + r.n_greedy, .max_chunk = 512, .cpu_act_fast = 1};
    EXPECT_OK(ft_engine_init(&e8, m, pool, &eo));
    eo.max_chunk = chunk;
    EXPECT_OK(ft_engine_init(&ec, m, pool, &eo));
    eo.cpu_act_fast = 0;
    EXPECT_OK(ft_engine_init(&e32, m, pool, &eo));
    int V = m->vocab;
    size_t n = (size_t)r.T * V;
    lg8 = malloc(n * sizeof *lg8), lg32 = malloc(n * sizeof *lg32), lgc = malloc(n * sizeof *lgc);
    if (!e8 || !ec || !e32 || !lg8 || !lg32 || !lgc) goto done;
    EXPECT_OK(ft_engine_prefill(e8, r.ids, r.T, lg8, 1));
    EXPECT_OK(ft_engine_prefill(ec, r.ids, r.T, lgc, 1));
    double worst = 0, dec_worst = 0, chunked = max_err(lg8, lgc, n);
    int over = 0, dec_over = 0, steps = r.n_greedy - 1;
    for (int t = 0; t < r.T; t++) {
        double d = max_err(lg8 + (size_t)t * V, r.logits + (size_t)t * V, (size_t)V);
        over += !(d <= tol);
        if (!(d <= worst)) worst = d;
    }
    EXPECT_OK(ft_engine_prefill(e32, r.ids, r.T, lg32, 1));
    double moved = max_err(lg8, lg32, n); /* the rounded path ran where it exists */
    const int fast = ft_engine_fast_matrices(m) > 0;
    CHECK_(fast ? moved > 0 : moved == 0, "%s fast: logits moved by %g from fp32 (this tier %s "
           "rounded activations for it)", name, moved, fast ? "has" : "has no");
    for (int g = 0; g < steps; g++) { /* lg8 / lg32 rows 0 hold the decode logits */
        EXPECT_OK(ft_engine_forward(e8, &r.greedy[g], 1, lg8, 0));
        EXPECT_OK(ft_engine_forward(e32, &r.greedy[g], 1, lg32, 0));
        double d = max_err(lg8, lg32, (size_t)V);
        dec_over += !(d <= tol);
        if (!(d <= dec_worst)) dec_worst = d;
    }
    fprintf(stderr, "  %-18s fast: prompt |dlogit| vs transformers > %.2g at %d of %d positions "
            "(max %.2e); decode vs fp32 > %.2g at %d of %d steps (max %.2e)\n", name, tol, over,
            r.T, worst, tol, dec_over, steps, dec_worst);
    CHECK_(over * 10 <= r.T, "%s fast: %d of %d prompt positions off transformers by more than %g",
           name, over, r.T, tol);
    CHECK_(dec_over * 10 <= steps, "%s fast: %d of %d decode steps off fp32 by more than %g", name,
           dec_over, steps, tol);
    CHECK_(chunked == 0, "%s fast: chunk %d differs from one-shot prefill by %g", name, chunk, chunked);
done:
    free(lg8), free(lg32), free(lgc);
    ft_engine_free(e8), ft_engine_free(ec), ft_engine_free(e32);
    ft_model_free(m);
    ft_st_close(r.f);
}

TEST(gguf_fixtures_fast_activations) {
    struct ft_pool *pool;
    EXPECT_OK(ft_pool_init(&pool, 2));
    enum ft_cpu_isa best = ft_cpu_isa();
    for (int t = FT_ISA_SCALAR; t <= (int)best; t++) {
        if ((int)ft_cpu_set_isa((enum ft_cpu_isa)t) != t) continue;
        fprintf(stderr, "  tier %s\n", ft_cpu_isa_name((enum ft_cpu_isa)t));
        for (size_t i = 0; i < sizeof k_gguf / sizeof k_gguf[0]; i++)
            check_int8(k_gguf[i], strstr(k_gguf[i], "gpt_oss") ? 0.3 : 0.1, pool, 5);
    }
    ft_cpu_set_isa(best);
    ft_pool_free(pool);
}

TEST_MAIN("model_fixtures")
