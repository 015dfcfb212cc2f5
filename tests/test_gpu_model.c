/* test_gpu_model.c — every fixture through the CUDA backend (label gpu, GPU machine only):
 * prefill logits (bf16 GEMM inputs) within 5e-2 of transformers, token-by-token decode logits
 * (fp32 GEMV path) within 1e-3, identical greedy tokens, CUDA graph replay bit-identical to eager,
 * and three sequences batched in one step equal to each run alone. The GGUF fixtures too, at
 * tolerances for bf16 copies of weights transformers holds in fp32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"
#include "core/sys.h"
#include "core/timer.h"
#include "core/threadpool.h"
#include "backend/cuda/cuda_ops.h"
#include "engine/forward.h"
#include "engine/gpu.h"
#include "engine/sched.h"
#include "mem/residency.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "text/tok_bytes.h"
#include "text/tokenizer.h"
#define ENGINE_DRAWS_GRAMMAR
#include "engine_draws.h"
#include "core/env.h"
#include "test.h"

static const char *const k_fixtures[] = {
    "qwen3_moe", "qwen3_moe_nonorm", "qwen2_moe", "mixtral", "llama", "mistral", "qwen2", "qwen3",
    /* hybrid (Gated DeltaNet + gated attention) and sigmoid-routed families */
    "qwen3_5_moe", "qwen3_5_moe_vl", "qwen3_next", "qwen3_5", "glm4_moe", "glm4_moe_qknorm",
    "minimax_m2",
    /* latent attention (absorbed) with the grouped sigmoid router */
    "deepseek_v3", "deepseek_v3_noqlora", "glm4_moe_lite",
    /* latent attention with DeepSeek-V2's softmax routers: group-limited and scaled, and plain */
    "deepseek_v2", "deepseek_v2_lite"};

static double max_err(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

static struct ft_pool *g_pool;

static struct ft_engine *gpu_engine(const struct ft_model *m, int ctx, int graphs) {
    struct ft_engine_opts eo = {.max_ctx = ctx, .max_chunk = 64, .kv_tokens = 4 * ctx,
                                .backend = FT_BACKEND_CUDA, .no_graphs = !graphs};
    struct ft_engine *e = NULL;
    EXPECT_OK(ft_engine_init(&e, m, g_pool, &eo));
    return e;
}

/* A fixture's checkpoint (a directory, or for "x.gguf" the GGUF file) and its reference. */
static const char *fixture(const char *name, char *dir, size_t cap, char *ref, size_t rcap) {
    size_t n = strlen(name);
    if (n > 5 && !strcmp(name + n - 5, ".gguf")) {
        snprintf(dir, cap, "%s/gguf/models/%s", FT_TEST_DATA, name);
        snprintf(ref, rcap, "%s/gguf/models/%.*s.ref.safetensors", FT_TEST_DATA, (int)n - 5, name);
    } else {
        snprintf(dir, cap, "%s/models/%s", FT_TEST_DATA, name);
        snprintf(ref, rcap, "%s/models/%s/reference.safetensors", FT_TEST_DATA, name);
    }
    return dir;
}

/* GGUF fixtures: transformers holds their dequantised weights in fp32, the GPU in bf16 */
/* Through cuda against transformers: a whole-prompt prefill's logits at every position (its
 * first n_prefill positions when n_prefill > 0), the prompt token by token on the decode path
 * (graph replay and eager identical), the greedy continuation, and the same with the argmax on
 * the device. */
static void check_n(const char *name, int n_prefill, double prefill_tol, double decode_tol) {
    char dir[512], path[1024];
    fixture(name, dir, sizeof dir, path, sizeof path);
    struct ft_st_file *f = NULL;
    struct ft_model *m = NULL;
    EXPECT_OK(ft_st_open(path, &f));
    EXPECT_OK(ft_model_load(dir, &m));
    if (!f || !m) goto done;
    const int32_t *ids = ft_st_find(f, "ids")->data, *greedy = ft_st_find(f, "greedy")->data;
    const float *ref = ft_st_find(f, "logits")->data;
    int T = (int)ft_st_find(f, "ids")->shape[0], G = (int)ft_st_find(f, "greedy")->shape[0], V = m->vocab;
    struct ft_engine *e = gpu_engine(m, T + G, 1), *eager = gpu_engine(m, T + G, 0);
    if (!e || !eager) goto done2;
    float *lg = malloc((size_t)T * V * 4), *l1 = malloc((size_t)V * 4), *l2 = malloc((size_t)V * 4);
    EXPECT_OK(ft_engine_prefill(e, ids, T, lg, 1));
    const int P = n_prefill > 0 && n_prefill < T ? n_prefill : T;
    double pe = max_err(lg, ref, (size_t)P * V), mean = 0, var = 0;
    for (size_t i = 0; i < (size_t)T * V; i++) mean += ref[i];
    mean /= (double)T * V;
    for (size_t i = 0; i < (size_t)T * V; i++) var += (ref[i] - mean) * (ref[i] - mean);
    /* bf16 activations err relative to the values: the tolerance is for logits of sd 1 (most
     * fixtures) and scales with a larger sd (2 for gpt_oss and the NVFP4/FP8 fixtures) */
    double sd = sqrt(var / ((double)T * V));
    if (sd > 1) prefill_tol *= sd;
    if (pe > prefill_tol) /* where it is off: a router near-tie moves one position, a bug most */
        for (int t = 0; t < P; t++)
            fprintf(stderr, "    %s prefill position %d: max |dlogit| %.3e\n", name, t,
                    max_err(lg + (size_t)t * V, ref + (size_t)t * V, V));
    /* decode path: the prompt one token at a time (GEMV kernels; graphs from the 2nd step) */
    ft_engine_reset(e);
    double de = 0;
    for (int t = 0; t < T; t++) {
        EXPECT_OK(ft_engine_forward(e, ids + t, 1, l1, 0));
        EXPECT_OK(ft_engine_forward(eager, ids + t, 1, l2, 0));
        CHECK_(!memcmp(l1, l2, (size_t)V * 4), "%s: graph replay differs from eager at step %d", name, t);
        double d = max_err(l1, ref + (size_t)t * V, V);
        de = d > de ? d : de;
    }
    /* greedy continuation */
    int same = 1;
    for (int g = 0; g < G && same; g++) {
        int32_t next = ft_argmax(l1, V);
        same = next == greedy[g];
        if (g + 1 < G) EXPECT_OK(ft_engine_forward(e, &next, 1, l1, 0));
    }
    /* the same continuation with the argmax on the device and ids alone coming back
     * (ft_engine_forward_greedy), graph replayed (its ids-only graph captured on the 2nd step)
     * and eager */
    int same_ids = 1;
    for (int pass = 0; pass < 2; pass++) {
        struct ft_engine *x = pass ? eager : e;
        ft_engine_reset(x);
        for (int t = 0; t < T; t++) /* the prompt as above: the same cache, the same near-ties */
            EXPECT_OK(ft_engine_forward(x, ids + t, 1, l2, 0));
        int32_t next = ft_argmax(l2, V);
        for (int g = 0; g < G && same_ids; g++) {
            same_ids = next == greedy[g];
            if (!same_ids)
                fprintf(stderr, "    %s ids-only (%s) greedy token %d is %d, transformers %d\n", name,
                        pass ? "eager" : "graph", g, next, greedy[g]);
            if (g + 1 < G) EXPECT_OK(ft_engine_forward_greedy(x, &next, 1, &next));
        }
    }
    fprintf(stderr, "  %-18s prefill max|dlogit| %.2e  decode %.2e  greedy %s, ids-only %s\n", name,
            pe, de, same ? "same" : "DIFFERENT", same_ids ? "same" : "DIFFERENT");
    CHECK_(same_ids, "%s: greedy ids found on the GPU differ from transformers", name);
    CHECK_(pe <= prefill_tol, "%s: prefill max |dlogit| %g > %g", name, pe, prefill_tol);
    CHECK_(de <= decode_tol, "%s: decode max |dlogit| %g > %g", name, de, decode_tol);
    CHECK_(same, "%s: greedy tokens differ from transformers", name);
    free(lg), free(l1), free(l2);
done2:
    ft_engine_free(e);
    ft_engine_free(eager);
done:
    ft_model_free(m);
    ft_st_close(f);
}

static void check(const char *name, double prefill_tol, double decode_tol) {
    check_n(name, 0, prefill_tol, decode_tol);
}

TEST(fixtures_through_cuda) {
    /* the DeltaNet layers carry bf16 rounding of their projections through the recurrence and
     * MLA through two more projections: those fixtures' prefill (bf16 GEMM inputs) is looser;
     * their decode path (fp32) is not */
    for (size_t i = 0; i < sizeof k_fixtures / sizeof k_fixtures[0]; i++) {
        const char *f = k_fixtures[i];
        int loose = strstr(f, "qwen3_5") || strstr(f, "next") || strstr(f, "deepseek") || strstr(f, "lite");
        /* deepseek_v2_lite's position 2 has top-2 router gaps of 1.8e-3 and 2.0e-3 (softmax
         * probabilities, layers 2 and 3, transformers in fp32): the bf16 prefill flips a choice
         * there (0.39 on the H200); its fp32 decode path stays within 2.7e-6 */
        check(f, strstr(f, "v2_lite") ? 0.5 : loose ? 1.5e-1 : 5e-2, 1e-3);
    }
}

TEST(gguf_fixtures_through_cuda) {
    const char *g[] = {"qwen2_q4km.gguf", "llama_q40.gguf", "qwen3moe_q4km.gguf", "qwen2moe_q8.gguf",
                       "qwen35moe_q8.gguf", "qwen35_q8.gguf", "qwen3next_bf16.gguf"};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) /* the last three hybrid, as above */
        check(g[i], i >= 4 ? 1.5e-1 : 5e-2, i >= 4 ? 6e-2 : 3e-2);
}

/* Three sequences decoding together in one step give the logits each gets alone. */
TEST(batched_decode_equals_solo) {
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/qwen3_moe", &m));
    if (!m) return;
    int V = m->vocab;
    struct ft_engine *e = gpu_engine(m, 64, 1);
    int32_t blocks[3][4];
    for (int s = 0; s < 3; s++) EXPECT_OK(ft_engine_kv_alloc(e, 4, blocks[s]));
    int32_t prompts[3][5] = {{5, 6, 7, 8, 9}, {100, 3, 44, 9, 9}, {300, 301, 302, 303, 304}};
    int lens[3] = {5, 3, 4};
    float solo[3][384], batch[3 * 384];
    for (int s = 0; s < 3; s++) { /* alone: prefill then one decode step */
        struct ft_seg g = {prompts[s], lens[s], 0, blocks[s], FT_LOGITS_LAST};
        EXPECT_OK(ft_engine_forward_batch(e, &g, 1, solo[s]));
        int32_t nx = 17;
        struct ft_seg d = {&nx, 1, lens[s], blocks[s], FT_LOGITS_LAST};
        EXPECT_OK(ft_engine_forward_batch(e, &d, 1, solo[s]));
    }
    for (int rep = 0; rep < 3; rep++) { /* together (eager, capture, replay) */
        int32_t nx[3] = {17, 17, 17};
        struct ft_seg d[3];
        for (int s = 0; s < 3; s++) d[s] = (struct ft_seg){&nx[s], 1, lens[s], blocks[s], FT_LOGITS_LAST};
        EXPECT_OK(ft_engine_forward_batch(e, d, 3, batch));
        for (int s = 0; s < 3; s++)
            CHECK_(max_err(batch + s * V, solo[s], V) <= 1e-5, "rep %d seq %d: batched != solo", rep, s);
    }
    ft_engine_free(e);
    ft_model_free(m);
}

/* A hybrid model's sequences each keep their own recurrent state on the GPU: three sequences
 * prefilled alone, then decoded together (graph captured, replayed), give the logits each gets
 * decoding alone; and a step mixing one sequence's decode with another's whole prompt gives
 * that prompt's logits as prefilling it alone (both through the prefill GEMMs). */
TEST(hybrid_sequences_keep_their_own_state) {
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/qwen3_5_moe", &m));
    if (!m) return;
    const int V = m->vocab;
    struct ft_engine *solo = gpu_engine(m, 64, 1), *tog = gpu_engine(m, 64, 1);
    if (!solo || !tog) goto done;
    int32_t bs[3][4], bt[3][4], prompts[3][12];
    const int lens[3] = {12, 10, 11};
    for (int s = 0; s < 3; s++) {
        EXPECT_OK(ft_engine_kv_alloc(solo, 4, bs[s]));
        EXPECT_OK(ft_engine_kv_alloc(tog, 4, bt[s]));
        for (int t = 0; t < 12; t++) prompts[s][t] = (s * 97 + t * 31 + 3) % V;
    }
    float *a = malloc((size_t)3 * V * 4), *b = malloc((size_t)3 * V * 4);
    for (int s = 0; s < 3; s++) {
        struct ft_seg g = {prompts[s], lens[s], 0, bs[s], FT_LOGITS_LAST};
        EXPECT_OK(ft_engine_forward_batch(solo, &g, 1, a));
        if (s < 2) {
            g.blocks = bt[s];
            EXPECT_OK(ft_engine_forward_batch(tog, &g, 1, b));
        }
    }
    /* tog: sequence 0 decodes one token while sequence 2 prefills its whole prompt */
    int32_t first = 17;
    struct ft_seg mix[2] = {{&first, 1, lens[0], bt[0], FT_LOGITS_LAST},
                            {prompts[2], lens[2], 0, bt[2], FT_LOGITS_LAST}};
    EXPECT_OK(ft_engine_forward_batch(tog, mix, 2, b));
    CHECK_(max_err(b + V, a, V) <= 5e-2, "a prompt prefilled beside a decode differs from alone by %g",
           max_err(b + V, a, V));
    /* solo: sequence 0's token in a step of the same path (beside a fourth sequence's prompt) */
    int32_t b4[4];
    EXPECT_OK(ft_engine_kv_alloc(solo, 4, b4));
    struct ft_seg d0[2] = {{&first, 1, lens[0], bs[0], FT_LOGITS_LAST},
                           {prompts[2], lens[2], 0, b4, FT_LOGITS_LAST}};
    EXPECT_OK(ft_engine_forward_batch(solo, d0, 2, a));
    CHECK_(max_err(b, a, V) <= 1e-5, "the mixed step's decode row differs by %g", max_err(b, a, V));
    int pos[3] = {lens[0] + 1, lens[1], lens[2]};
    for (int step = 0; step < 4; step++) {
        int32_t nx[3];
        struct ft_seg d[3];
        for (int s = 0; s < 3; s++) {
            nx[s] = (step * 7 + s * 13 + 1) % V;
            d[s] = (struct ft_seg){&nx[s], 1, pos[s], bt[s], FT_LOGITS_LAST};
        }
        EXPECT_OK(ft_engine_forward_batch(tog, d, 3, b));
        for (int s = 0; s < 3; s++) {
            d[s].blocks = bs[s];
            EXPECT_OK(ft_engine_forward_batch(solo, &d[s], 1, a));
            CHECK_(max_err(b + (size_t)s * V, a, V) <= 1e-5, "step %d seq %d: batched != solo by %g",
                   step, s, max_err(b + (size_t)s * V, a, V));
            pos[s]++;
        }
    }
    free(a), free(b);
done:
    ft_engine_free(solo);
    ft_engine_free(tog);
    ft_model_free(m);
}

/* Tokens drawn on the device (ft_engine_forward_batch_draw: its graph captured on the second
 * step, replayed after) equal ft_sampler_draw_row on the logits the same step gives, for a
 * greedy row, a temperature row and two filtered rows (top-k with top-p; top-p with min-p)
 * over several steps, but where rounding moves a boundary (at most one step). Then again with
 * the device's candidate limit lowered to 8: the filtered rows come back to the host
 * (ft_gpu_row_logits) and the tokens are still the host's. */
TEST(device_draws_match_host_draws) {
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/qwen3_moe", &m));
    if (!m) return;
    const int steps = 8;
    for (int capped = 0; capped < 2; capped++) {
        ft_cuda_sample_draw_set_cap(capped ? 8 : 0);
        struct ft_engine *e = gpu_engine(m, 64, 1);
        const int same = e ? engine_draws_agree(e, m->vocab, steps) : 0;
        fprintf(stderr, "  device draws%s equal the host's at %d of %d steps\n",
                capped ? " (candidates capped at 8)" : "", same, steps);
        CHECK_(same >= steps - 1, "device draws%s equal the host's at %d of %d steps",
               capped ? " (capped)" : "", same, steps);
        ft_engine_free(e);
    }
    ft_cuda_sample_draw_set_cap(0);
    ft_model_free(m);
}

static const char *jg_bytes_of(void *ctx, int32_t id, size_t *len, int *special) {
    return ft_tok_bytes(ctx, id, len, special);
}

/* Grammar-constrained draws on the device (the mask applied there, no logits back): rows masked
 * by allow bitmasks (about half the tokens without the argmax, one token, five under top-k 20,
 * a third under top-p with min-p; engine_draws.h) equal ft_sampler_draw_row on the same logits
 * masked on the host, graphs on; a JSON-schema request drawn by the engine, greedy and seeded
 * top-k/top-p, gives exactly the tokens of the host sampler masking the logits itself (the
 * same engine, logits back); and not one of the engine's rows went to the host. */
TEST(device_masked_draws_match_host_masking) {
    struct ft_model *m = NULL;
    struct ft_tok *tok = NULL;
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/qwen3_moe", &m));
    EXPECT_OK(ft_tok_load(FT_TEST_DATA "/models/qwen3_moe", &tok));
    struct ft_engine *e = m ? gpu_engine(m, 128, 1) : NULL;
    struct ft_jg_vocab v = {0};
    struct ft_jg *g = NULL;
    if (!e || !tok) goto done;
    long rows0, host0, rows1, host1;
    ft_engine_draw_stats(e, &rows0, &host0);
    const int steps = 8;
    int fills = 0;
    const int same = engine_masked_draws_agree(e, m->vocab, steps, &fills);
    fprintf(stderr, "  masked device draws equal the host's at %d of %d steps\n", same, steps);
    CHECK_(same >= steps - 1, "masked device draws equal the host's at %d of %d steps", same, steps);
    EXPECT_EQ(fills, 4 * steps);
    EXPECT_OK(ft_jg_vocab_init(&v, ft_tok_n_vocab(tok), jg_bytes_of, tok));
    json_error_t je;
    json_t *sch = json_loads("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
                             "\"maxLength\":6},\"kind\":{\"enum\":[\"cat\",\"dog\"]},\"n\":{\"type\":"
                             "\"integer\"}},\"required\":[\"name\",\"kind\"]}", 0, &je);
    EXPECT(sch != NULL);
    if (sch) EXPECT_OK(ft_jg_compile_schema(sch, 1, &g));
    json_decref(sch);
    const int32_t end = ft_tok_find(tok, "<|im_end|>"), prompt[6] = {11, 42, 7, 99, 3, 250};
    int drawn = 0;
    for (int mode = 0; g && mode < 2; mode++) {
        struct ft_sampling sp = ft_sampling_default();
        if (mode == 0) sp.temperature = 0;
        else sp.temperature = 0.8f, sp.top_k = 20, sp.top_p = 0.9f, sp.seed = 5;
        int32_t a[48], b[48];
        int ok_a = 0, ok_b = 0;
        long r0, h0, r1, h1;
        ft_engine_draw_stats(e, &r0, &h0);
        const int na = engine_grammar_run(e, m->vocab, g, &v, end, &sp, prompt, 6, 1, a, 48, &ok_a);
        ft_engine_draw_stats(e, &r1, &h1);
        const int nb = engine_grammar_run(e, m->vocab, g, &v, end, &sp, prompt, 6, 0, b, 48, &ok_b);
        fprintf(stderr, "  %s: %d tokens drawn on the device (%ld rows, %ld to the host), %d by the "
                "host sampler\n", mode ? "sampled" : "greedy", na, r1 - r0, h1 - h0, nb);
        CHECK_(na > 0 && na == nb && !memcmp(a, b, (size_t)na * 4), "%s: device and host tokens differ",
               mode ? "sampled" : "greedy");
        EXPECT(ok_a && ok_b);
        EXPECT_EQ(r1 - r0, (long)na);
        drawn += na > 0 ? na : 0;
    }
    ft_engine_draw_stats(e, &rows1, &host1);
    EXPECT_EQ(rows1 - rows0, (long)(4 * steps + drawn));
    EXPECT_EQ(host1 - host0, 0L);
done:
    ft_jg_free(g);
    if (v.bytes) ft_jg_vocab_free(&v);
    ft_engine_free(e);
    ft_tok_free(tok);
    ft_model_free(m);
}

/* All-position logits of a prompt longer than one lm_head pass (64 rows): GPU vs CPU engine. */
TEST(all_logits_in_several_passes) {
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/llama", &m));
    if (!m) return;
    enum { T = 150 };
    int32_t ids[T];
    for (int t = 0; t < T; t++) ids[t] = (t * 37 + 11) % m->vocab;
    struct ft_engine_opts co = {.max_ctx = T, .max_chunk = T};
    struct ft_engine_opts go = {.max_ctx = T, .max_chunk = T, .backend = FT_BACKEND_CUDA};
    struct ft_engine *ce = NULL, *ge = NULL;
    EXPECT_OK(ft_engine_init(&ce, m, g_pool, &co));
    EXPECT_OK(ft_engine_init(&ge, m, g_pool, &go));
    float *a = malloc((size_t)T * m->vocab * 4), *b = malloc((size_t)T * m->vocab * 4);
    if (ce && ge) {
        EXPECT_OK(ft_engine_prefill(ce, ids, T, a, 1));
        EXPECT_OK(ft_engine_prefill(ge, ids, T, b, 1));
        double e = max_err(a, b, (size_t)T * m->vocab);
        fprintf(stderr, "  150 positions, GPU vs CPU max|dlogit| %.2e\n", e);
        CHECK_(e <= 5e-2, "all-position GPU logits differ from CPU by %g", e);
    }
    free(a), free(b);
    ft_engine_free(ce);
    ft_engine_free(ge);
    ft_model_free(m);
}

/* --backend auto on the GPU: a model that fits stays resident; a MoE model over the VRAM budget
 * (--vram-limit) goes to the offload backend and gives the resident logits; a dense one over it
 * is refused naming --backend cpu; --backend offload on a dense model runs it resident. */
TEST(backend_auto_picks_offload_when_over_the_limit) {
    struct ft_model *moe = NULL, *dense = NULL;
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/qwen3_moe", &moe));
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/llama", &dense));
    if (!moe || !dense) return;
    struct ft_engine_opts ao = {.max_ctx = 64, .max_chunk = 64, .backend = FT_BACKEND_CUDA, .backend_auto = 1};
    struct ft_engine *re = NULL, *oe = NULL, *de = NULL;
    EXPECT_OK(ft_engine_init(&re, moe, g_pool, &ao));
    if (re) EXPECT_STREQ(ft_engine_backend(re), "cuda");
    size_t resident = re ? ft_engine_vram_used(re) : 0, experts = 0;
    for (int l = 0; l < moe->n_layers; l++)
        experts += moe->layers[l].is_moe ? moe->expert_bytes * (size_t)moe->n_experts : 0;
    /* a limit below what all experts resident took, above what offload needs with a few slots */
    struct ft_engine_opts lo = ao;
    size_t est = moe->dense_bytes + experts + (size_t)moe->n_layers * 1024 * 8 * moe->n_kv_heads * moe->head_dim;
    lo.vram_limit = (resident < est ? resident : est) - experts / 2; /* est: forward.c's estimate */
    lo.moe_cache_slots = 4; /* prefill streams the layer's experts through them in batches */
    EXPECT_OK(ft_engine_init(&oe, moe, g_pool, &lo));
    if (re && oe) {
        EXPECT_STREQ(ft_engine_backend(oe), "offload");
        int32_t ids[12] = {1, 7, 42, 3, 99, 5, 8, 13, 21, 34, 55, 89}; /* > 8: the prefill path */
        size_t V = (size_t)moe->vocab;
        float *a = malloc(12 * V * 4), *b = malloc(12 * V * 4);
        EXPECT_OK(ft_engine_prefill(re, ids, 12, a, 1));
        EXPECT_OK(ft_engine_prefill(oe, ids, 12, b, 1));
        double e = max_err(a, b, 12 * V);
        CHECK_(e <= 1e-4, "auto-offloaded logits differ from resident by %g", e);
        free(a), free(b);
    }
    struct ft_engine_opts dl = ao;
    dl.vram_limit = 4096;
    EXPECT_EQ(ft_engine_init(&de, dense, g_pool, &dl), FT_ERR_UNSUPPORTED);
    EXPECT(strstr(ft_error(), "--backend cpu") != NULL);
    struct ft_engine_opts doff = {.max_ctx = 64, .max_chunk = 64, .backend = FT_BACKEND_OFFLOAD};
    EXPECT_OK(ft_engine_init(&de, dense, g_pool, &doff));
    if (de) EXPECT_STREQ(ft_engine_backend(de), "cuda");
    ft_engine_free(re), ft_engine_free(oe), ft_engine_free(de);
    ft_model_free(moe), ft_model_free(dense);
}

/* The offload backend with a cache far smaller than the experts (nearly every expert misses):
 * prefill (several batches per layer) and token-by-token decode logits bit-identical to the
 * resident backend, through each copy path, and with injected copy faults (a copy that does
 * nothing, a copy that zeroes) caught by the checksums and repaired. */
static int g_verify = 2; /* offload_case's --verify-copies (capped_case's with g_fault) */
static const char *g_fault; /* capped_case: FT_TEST_COPY_FAULT for the offload engine */
static int g_capped_mode;   /* capped_case's --moe-backend: 0 offload, 2 hybrid */
static int g_prefetch;      /* offload_case's / split_case's --moe-prefetch */

static void offload_case(const char *name, int slots, int path, const char *fault) {
    char dir[512], ref[512];
    fixture(name, dir, sizeof dir, ref, sizeof ref);
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(dir, &m));
    if (!m) return;
    int T = 24, V = m->vocab;
    int32_t ids[24];
    for (int t = 0; t < T; t++) ids[t] = (t * 53 + 7) % V;
    struct ft_engine_opts ro = {.max_ctx = 48, .max_chunk = 64, .backend = FT_BACKEND_CUDA, .no_graphs = 1};
    struct ft_engine_opts oo = ro;
    oo.backend = FT_BACKEND_OFFLOAD, oo.moe_cache_slots = slots, oo.copy_path = path, oo.verify_copies = g_verify;
    oo.no_graphs = 0; /* decode spans as graphs from their second step (span graphs) */
    oo.moe_mode = 0; /* every miss fetched */
    oo.moe_prefetch = g_prefetch;
    if (fault) setenv("FT_TEST_COPY_FAULT", fault, 1);
    ft_env_reload();
    struct ft_engine *re = NULL, *oe = NULL;
    EXPECT_OK(ft_engine_init(&re, m, g_pool, &ro));
    EXPECT_OK(ft_engine_init(&oe, m, g_pool, &oo));
    unsetenv("FT_TEST_COPY_FAULT"); ft_env_reload();
    float *a = malloc((size_t)T * V * 4), *b = malloc((size_t)T * V * 4);
    int same_prefill = 0, same_decode = 1;
    if (re && oe) {
        EXPECT_OK(ft_engine_prefill(re, ids, T, a, 1));
        EXPECT_OK(ft_engine_prefill(oe, ids, T, b, 1));
        same_prefill = !memcmp(a, b, (size_t)T * V * 4);
        for (int g = 0; g < 12; g++) { /* decode continues from the prompt */
            int32_t nx = (g * 31 + 5) % V;
            EXPECT_OK(ft_engine_forward(re, &nx, 1, a, 0));
            EXPECT_OK(ft_engine_forward(oe, &nx, 1, b, 0));
            same_decode &= !memcmp(a, b, (size_t)V * 4);
        }
        struct ft_gpu_offload_stats os;
        ft_engine_offload_stats(oe, &os);
        fprintf(stderr, "  %-16s slots %d path %d fault %-7s: prefill %s, decode %s; hit rate %.2f, "
                "%ld copies, %ld repaired, %ld prefetched (%ld used)\n", name, slots, path,
                fault ? fault : "none", same_prefill ? "identical" : "DIFFERENT",
                same_decode ? "identical" : "DIFFERENT", os.hit_rate, os.copies, os.repaired,
                os.prefetched, os.prefetch_used);
        CHECK_(os.active && os.misses > 0 &&
               os.copies == os.misses + os.repaired + os.prefetch_unused + os.prefetched,
               "%s: one copy per miss, per repair and per prefetch (%ld misses, %ld copies, "
               "%ld prefill prefetches unused, %ld decode prefetches)", name, os.misses, os.copies,
               os.prefetch_unused, os.prefetched);
        if (g_prefetch && !g_verify)
            CHECK_(os.prefetched > 0 && os.prefetch_used <= os.prefetched,
                   "%s: --moe-prefetch %d copied %ld experts ahead (%ld used)", name, g_prefetch,
                   os.prefetched, os.prefetch_used);
        if (fault) CHECK_(os.mismatches >= 1 && os.repaired == os.mismatches, "%s: fault %s not caught and repaired", name, fault);
        if (fault) CHECK_(os.verify == 2, "%s: verification after a mismatch is %d, not every copy", name, os.verify);
    }
    CHECK_(same_prefill, "%s: offload prefill differs from resident", name);
    CHECK_(same_decode, "%s: offload decode differs from resident", name);
    free(a), free(b);
    ft_engine_free(re);
    ft_engine_free(oe);
    ft_model_free(m);
}

/* cpu and hybrid: the misses the split keeps are computed by the CPU executor (fp32, other
 * summation order), so the logits match the resident backend closely and the tokens exactly. */
static void split_case(const char *name, int mode) {
    char dir[512], ref[512];
    fixture(name, dir, sizeof dir, ref, sizeof ref);
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(dir, &m));
    if (!m) return;
    int T = 24, V = m->vocab, G = 16;
    int32_t ids[24];
    for (int t = 0; t < T; t++) ids[t] = (t * 53 + 7) % V;
    struct ft_engine_opts ro = {.max_ctx = 48, .max_chunk = 64, .backend = FT_BACKEND_CUDA, .no_graphs = 1};
    struct ft_engine_opts oo = ro;
    oo.backend = FT_BACKEND_OFFLOAD, oo.moe_cache_slots = 4, oo.moe_mode = mode;
    oo.moe_prefetch = g_prefetch;
    oo.no_graphs = 0; /* decode spans as graphs from their second step (span graphs) */
    struct ft_engine *re = NULL, *oe = NULL;
    EXPECT_OK(ft_engine_init(&re, m, g_pool, &ro));
    EXPECT_OK(ft_engine_init(&oe, m, g_pool, &oo));
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    double err = 0;
    int same = 1;
    if (re && oe) {
        EXPECT_OK(ft_engine_prefill(re, ids, T, a, 0));
        EXPECT_OK(ft_engine_prefill(oe, ids, T, b, 0));
        for (int g = 0; g < G; g++) { /* greedy decode on each, token by token */
            int32_t x = ft_argmax(a, V), y = ft_argmax(b, V);
            same &= x == y;
            err = fmax(err, max_err(a, b, V));
            EXPECT_OK(ft_engine_forward(re, &x, 1, a, 0));
            EXPECT_OK(ft_engine_forward(oe, &y, 1, b, 0));
        }
        struct ft_gpu_offload_stats os;
        ft_engine_offload_stats(oe, &os);
        fprintf(stderr, "  %-16s moe %-6s: greedy %s, max|dlogit| %.2e; %ld copies, %ld misses on the CPU\n",
                name, mode == 1 ? "cpu" : "hybrid", same ? "same" : "DIFFERENT", err, os.copies, os.cpu_experts);
        /* cpu mode computes every decode miss on the CPU; hybrid decides by cost (on these
         * tiny experts a copy is cheaper than the CPU's fixed cost, so it mostly fetches) */
        if (mode == 1) CHECK_(os.cpu_experts > 0, "%s: the CPU computed no expert", name);
    }
    CHECK_(same, "%s: greedy tokens differ from the resident backend", name);
    CHECK_(err <= 1e-3, "%s: max |dlogit| %g > 1e-3", name, err);
    free(a), free(b);
    ft_engine_free(re);
    ft_engine_free(oe);
    ft_model_free(m);
}

/* The residency manager under a pin budget smaller than the banks (real cudaHostRegister): a
 * layer stays unpinned, pinned bytes stay under the budget, and the tokens are the resident
 * backend's. With --moe-cpu-layers auto the unpinned layer still fills cache slots, its copies
 * through the pinned staging ring; with CPU layers asked for (cpu_layers, e.g. "1") its misses
 * decode on the CPU. at_load: the banks are registered while the checkpoint is read
 * (ft_model_load_opts with a residency, as `ft run/serve --backend offload` load), and the
 * offload engine adopts that plan instead of registering again. */
static void capped_case(const char *name, int at_load, const char *cpu_layers) {
    char dir[512], ref[512];
    fixture(name, dir, sizeof dir, ref, sizeof ref);
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(dir, &m)); /* the resident reference, and the banks' size */
    if (!m) return;
    uint64_t banks = 0;
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].is_moe) banks += m->layers[l].bank[0].bytes + m->layers[l].bank[1].bytes;
    char budget[32];
    snprintf(budget, sizeof budget, "%lluK", (unsigned long long)(banks * 6 / 10 / 1024));
    struct ft_model *om = m;
    if (at_load) {
        struct ft_residency_opts ro = {.pin_budget = budget};
        struct ft_load_opts lo = {.residency = &ro};
        om = NULL;
        EXPECT_OK(ft_model_load_opts(dir, &lo, &om));
        if (!om) {
            ft_model_free(m);
            return;
        }
    }
    int V = m->vocab;
    struct ft_engine_opts ro = {.max_ctx = 48, .max_chunk = 64, .backend = FT_BACKEND_CUDA, .no_graphs = 1};
    struct ft_engine_opts oo = ro;
    oo.backend = FT_BACKEND_OFFLOAD, oo.moe_cache_slots = 4, oo.moe_mode = g_capped_mode, oo.pin_budget = budget;
    oo.cpu_layers = cpu_layers;
    if (g_fault) oo.verify_copies = g_verify, setenv("FT_TEST_COPY_FAULT", g_fault, 1), ft_env_reload();
    struct ft_engine *re = NULL, *oe = NULL;
    EXPECT_OK(ft_engine_init(&re, m, g_pool, &ro));
    EXPECT_OK(ft_engine_init(&oe, om, g_pool, &oo));
    if (g_fault) unsetenv("FT_TEST_COPY_FAULT"), ft_env_reload();
    if (re && oe) {
        struct ft_residency_stats rs;
        EXPECT(ft_engine_residency_stats(oe, &rs));
        fprintf(stderr, "  %-18s %s: budget %s of %.1f KiB of banks: %d pinned, %d locked, "
                "%d pageable, %.1f KiB charged, cpu layers '%s'\n", name,
                at_load ? "registered at load" : "registered by the engine", budget, banks / 1024.0,
                rs.n_layers[0], rs.n_layers[1], rs.n_layers[2], rs.charged_bytes / 1024.0,
                rs.cpu_layers);
        EXPECT(rs.charged_bytes <= rs.budget_bytes);
        EXPECT(rs.n_layers[0] >= 1);                  /* some layers pinned */
        EXPECT(rs.n_layers[1] + rs.n_layers[2] >= 1); /* and some left to the CPU */
        int32_t ids[24];
        for (int t = 0; t < 24; t++) ids[t] = (t * 53 + 7) % V;
        float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
        EXPECT_OK(ft_engine_prefill(re, ids, 24, a, 0));
        EXPECT_OK(ft_engine_prefill(oe, ids, 24, b, 0));
        int same = 1;
        for (int g = 0; g < 12; g++) {
            int32_t x = ft_argmax(a, V), y = ft_argmax(b, V);
            same &= x == y;
            EXPECT_OK(ft_engine_forward(re, &x, 1, a, 0));
            EXPECT_OK(ft_engine_forward(oe, &y, 1, b, 0));
        }
        struct ft_gpu_offload_stats os;
        ft_engine_offload_stats(oe, &os);
        CHECK_(same, "%s capped budget: greedy tokens differ from the resident backend", name);
        fprintf(stderr, "  %-18s cpu layers %s: %d layers staged, %ld of %ld copies staged, %ld "
                "misses on the CPU\n", name, cpu_layers ? cpu_layers : "auto", os.staged_layers,
                os.staged, os.copies, os.cpu_experts);
        if (g_capped_mode) { /* hybrid: the split picks; staged copies run on the stager thread */
            CHECK_(os.staged_layers >= 1, "%s hybrid: no layer staged", name);
        } else if (cpu_layers) {
            CHECK_(os.cpu_experts > 0 && os.staged == 0, "%s: the CPU layer's misses were not "
                   "computed on the CPU", name);
        } else {
            CHECK_(os.staged_layers >= 1 && os.staged > 0 && os.cpu_experts == 0,
                   "%s: the unpinned layer's misses were not copied through the staging ring", name);
        }
        if (g_fault) CHECK_(os.mismatches >= 1 && os.repaired == os.mismatches && os.verify == 2,
                            "%s: the zeroed staged copy (%s) was not caught, repaired and followed "
                            "by verifying every copy (%ld mismatches, %ld repaired, verify %d)",
                            name, g_fault, os.mismatches, os.repaired, os.verify);
        free(a), free(b);
    }
    ft_engine_free(re);
    ft_engine_free(oe);
    if (om != m) ft_model_free(om);
    ft_model_free(m);
}

TEST(offload_with_capped_pin_budget) {
    capped_case("qwen3_moe", 0, NULL);
    capped_case("qwen3_moe", 1, NULL);
    capped_case("qwen3_moe", 0, "1");
    capped_case("qwen3moe_q4km.gguf", 1, NULL);
    /* the quantised formats and gpt-oss, staged and with CPU layers (#9) */
    capped_case("gpt_oss_mxfp4", 1, NULL);
    capped_case("gpt_oss_mxfp4", 0, "1");
    capped_case("qwen3_moe_nvfp4", 0, NULL);
    capped_case("qwen3_moe_fp8", 1, "1");
    /* a zeroed copy of the first (staged: head layers stay unpinned) expert under sampled
     * verification: caught, repaired, and every later copy verified */
    g_fault = "zero:1", g_verify = 1;
    capped_case("qwen3_moe", 0, NULL);
    g_fault = NULL, g_verify = 2;
    /* hybrid beside staged layers: their fetched copies on the stager thread while the CPU
     * computes, the tokens still the resident backend's */
    g_capped_mode = 2;
    capped_case("qwen3_moe", 0, NULL);
    capped_case("qwen3_moe", 1, NULL);
    capped_case("qwen3moe_q4km.gguf", 1, NULL);
    g_fault = "zero:1", g_verify = 1; /* a zeroed first copy, caught by the sample */
    capped_case("qwen3_moe", 0, NULL);
    g_fault = NULL, g_verify = 2, g_capped_mode = 0;
}

/* gpt-oss (sinks, alternating windows, router and expert biases, clamped SwiGLU; bf16 and MXFP4
 * experts) resident, offloaded, and with misses on the CPU; NVFP4 experts (read in place by the
 * GEMV, dequantised to bf16 for prefill); FP8 128x128-block experts of widths 42 and 20 (the
 * element-wise paths for widths that are not a multiple of 8).
 * gpt-oss's prefill tolerance is 0.1 (0.2 at its logits' sd of 2), not 0.05: its tiny router
 * nearly ties, so bf16 activations move it more. Measured 2026-11-30: the GPU's bf16 prefill is off
 * transformers by at most 0.158 (position 1; 0.01-0.11 elsewhere), and the CPU engine with bf16
 * activations (`ft logits --cpu-act fast` on an AVX512-BF16 host) gives the same per-position
 * profile (0.158 at position 1, max 0.11 elsewhere), so the GPU adds no error of its own;
 * exact fp32 decode stays within 1e-3. */
TEST(gpt_oss_nvfp4_fp8_through_cuda) {
    check("qwen3_moe_nvfp4", 5e-2, 3e-2);
    split_case("qwen3_moe_nvfp4", 2);
    offload_case("qwen3_moe_nvfp4", 3, 1, NULL);
    check("qwen3_moe_fp8", 5e-2, 3e-2);
    split_case("qwen3_moe_fp8", 2);
    offload_case("qwen3_moe_fp8", 3, 1, NULL);
    check("gpt_oss", 0.1, 1e-3);
    check("gpt_oss_mxfp4", 0.1, 1e-3);
    check("gpt_oss_mxfp4.gguf", 0.1, 1e-3);
    split_case("gpt_oss", 1);
    split_case("gpt_oss_mxfp4", 2);
    offload_case("gpt_oss", 3, 1, NULL);
    offload_case("gpt_oss_mxfp4", 3, 2, NULL);
}

TEST(cpu_and_hybrid_match_resident) {
    const char *moe[] = {"qwen3_moe", "qwen3_moe_nonorm", "qwen2_moe", "mixtral"};
    for (int i = 0; i < 4; i++) {
        split_case(moe[i], 1);
        split_case(moe[i], 2);
    }
    split_case("qwen3moe_q4km.gguf", 2);
    const char *more[] = {"qwen3_5_moe", "qwen3_next", "glm4_moe", "minimax_m2", "qwen35moe_q8.gguf",
                          "deepseek_v3", "glm4_moe_lite"};
    for (int i = 0; i < 7; i++) split_case(more[i], 2);
    /* FT_PROFILE's probe changes no result: level 1 times the steps and the layer steps' host
     * side; level 2 adds per-op events and runs eagerly (spans kernel by kernel, no graphs) */
    setenv("FT_PROFILE", "1", 1);
    ft_env_reload();
    split_case("qwen3_moe", 2);
    split_case("qwen2_moe", 1);
    setenv("FT_PROFILE", "2", 1);
    ft_env_reload();
    split_case("qwen3_moe", 2);
    split_case("mixtral", 1);
    offload_case("qwen3_moe", 3, 1, NULL);
    unsetenv("FT_PROFILE");
    ft_env_reload();
}

/* The CPU executor's watchdog on the offload backend (FT_TEST_EXEC_STALL, FT_TESTING builds):
 * --moe-backend cpu sends every decode miss to the executor, and a worker of its 2nd call
 * sleeps 1.5 s (the floor 200 ms). That step fails with FT_ERR_BUSY well before the stall ends,
 * a step while the worker is still asleep fails too, and once it is back the same engine, reset,
 * gives the resident backend's greedy tokens and logits again (max |dlogit| 1e-3, as
 * split_case). */
TEST(offload_hung_cpu_step_fails_the_step_not_the_process) {
    char dir[512], ref[512];
    fixture("qwen3_moe", dir, sizeof dir, ref, sizeof ref);
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(dir, &m));
    if (!m) return;
    const int T = 24, V = m->vocab, G = 6;
    int32_t ids[24];
    for (int t = 0; t < T; t++) ids[t] = (t * 53 + 7) % V;
    struct ft_engine_opts ro = {.max_ctx = 48, .max_chunk = 64, .backend = FT_BACKEND_CUDA, .no_graphs = 1};
    struct ft_engine_opts oo = ro;
    oo.backend = FT_BACKEND_OFFLOAD, oo.moe_cache_slots = 4, oo.moe_mode = 1, oo.moe_cpu_threads = 4;
    struct ft_engine *re = NULL, *oe = NULL;
    EXPECT_OK(ft_engine_init(&re, m, g_pool, &ro));
    setenv("FT_TEST_EXEC_STALL", "2:1500:200", 1);
    ft_env_reload();
    EXPECT_OK(ft_engine_init(&oe, m, g_pool, &oo)); /* the executor reads the hook here */
    unsetenv("FT_TEST_EXEC_STALL");
    ft_env_reload();
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    if (re && oe) {
        const int64_t t0 = ft_time_ns();
        enum ft_status st = ft_engine_prefill(oe, ids, T, b, 0);
        for (int g = 0; st == FT_OK && g < G; g++) {
            int32_t y = ft_argmax(b, V);
            st = ft_engine_forward(oe, &y, 1, b, 0);
        }
        const double failed_s = (ft_time_ns() - t0) / 1e9;
        fprintf(stderr, "  stalled executor step: %s after %.2f s: %s\n", ft_status_str(st), failed_s,
                st == FT_OK ? "" : ft_error());
        EXPECT_EQ(st, FT_ERR_BUSY);
        CHECK_(failed_s < 1.2, "the stalled step failed after %.2f s (stall 1.5 s, floor 0.2 s)", failed_s);
        int32_t y = 1;
        ft_engine_reset(oe);
        st = ft_engine_prefill(oe, ids, T, b, 0);
        if (st == FT_OK) st = ft_engine_forward(oe, &y, 1, b, 0);
        EXPECT_EQ(st, FT_ERR_BUSY); /* the worker is still asleep */
        usleep((useconds_t)FT_MAX(0, (int)(1800000 - (ft_time_ns() - t0) / 1000)));
        ft_engine_reset(oe);
        EXPECT_OK(ft_engine_prefill(re, ids, T, a, 0));
        EXPECT_OK(ft_engine_prefill(oe, ids, T, b, 0));
        int same = 1;
        double err = 0;
        for (int g = 0; g < G; g++) {
            int32_t x = ft_argmax(a, V), z = ft_argmax(b, V);
            same &= x == z;
            err = fmax(err, max_err(a, b, V));
            EXPECT_OK(ft_engine_forward(re, &x, 1, a, 0));
            EXPECT_OK(ft_engine_forward(oe, &z, 1, b, 0));
        }
        fprintf(stderr, "  after the stall: greedy %s, max|dlogit| %.2e\n", same ? "same" : "DIFFERENT", err);
        CHECK_(same && err <= 1e-3, "after the stall: tokens %s, max |dlogit| %g", same ? "same" : "differ", err);
    }
    free(a), free(b);
    ft_engine_free(re);
    ft_engine_free(oe);
    ft_model_free(m);
}

TEST(offload_matches_resident) {
    const char *moe[] = {"qwen3_moe", "qwen3_moe_nonorm", "qwen2_moe", "mixtral"};
    for (int i = 0; i < 4; i++) offload_case(moe[i], i == 1 ? 3 : 4, 1, NULL);
    offload_case("qwen3_moe", 4, 2, NULL);   /* gather kernel path */
    offload_case("mixtral", 5, 2, NULL);
    offload_case("qwen3_moe", 4, 1, "noop:3"); /* the 3rd expert copy does nothing */
    offload_case("qwen2_moe", 4, 2, "zero:5"); /* the 5th is zeroed */
    g_verify = 1; /* sampled: the 1st copy is in the sample, and after it every copy is checked */
    offload_case("qwen3_moe", 4, 1, "zero:1");
    g_verify = 2;
    offload_case("qwen3moe_q4km.gguf", 5, 1, NULL); /* GGUF experts dequantised into banks */
    offload_case("qwen3_5_moe", 4, 1, NULL);
    offload_case("qwen3_next", 4, 2, NULL);
    offload_case("glm4_moe", 4, 1, NULL);
    offload_case("minimax_m2", 4, 1, NULL);
    offload_case("deepseek_v3", 4, 1, NULL);
    offload_case("glm4_moe_lite", 4, 2, NULL);
    offload_case("deepseek_v2", 4, 1, NULL); /* the group-limited, scaled softmax router */
}

/* Next-layer prefetch (--moe-prefetch): decode copies the experts the next layer's router
 * predicts into slots ahead of it; what is resident changes, never a result: offloaded decode
 * stays bit-identical to resident (every miss fetched), and hybrid's tokens the same. Copies
 * unverified (verification turns prefetch off), slots few enough that most guesses miss. */
TEST(prefetch_changes_no_result) {
    g_prefetch = 2, g_verify = 0;
    const char *moe[] = {"qwen3_moe", "qwen2_moe", "mixtral", "qwen3_5_moe", "deepseek_v3",
                         "glm4_moe", "minimax_m2", "deepseek_v2"};
    for (int i = 0; i < 8; i++) offload_case(moe[i], 6, 1, NULL);
    offload_case("qwen3_moe", 6, 2, NULL); /* gather path */
    split_case("qwen3_moe", 2);
    split_case("qwen3_5_moe", 2);
    g_prefetch = 0, g_verify = 2;
}

/* The load check (#28): a weight zeroed on the device right after its upload
 * (FT_TEST_UPLOAD_FAULT=K) changes the logits when nothing checks (the fault is real), and with
 * --verify-copies the upload check finds it and copies it again: logits bit-identical to a
 * clean engine's. */
static void upload_fault_case(const char *name, int k) {
    char dir[512], ref[512];
    fixture(name, dir, sizeof dir, ref, sizeof ref);
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(dir, &m));
    if (!m) return;
    int T = 12, V = m->vocab;
    int32_t ids[12];
    for (int t = 0; t < T; t++) ids[t] = (t * 53 + 7) % V;
    struct ft_engine_opts o = {.max_ctx = 32, .max_chunk = 64, .backend = FT_BACKEND_CUDA, .no_graphs = 1};
    float *ref_l = malloc((size_t)T * V * 4), *l = malloc((size_t)T * V * 4);
    int differs = 0, same = 0;
    for (int run = 0; run < 3; run++) { /* clean; fault unchecked; fault checked */
        char kv[16];
        snprintf(kv, sizeof kv, "%d", k);
        if (run) setenv("FT_TEST_UPLOAD_FAULT", kv, 1);
        ft_env_reload();
        o.verify_copies = run == 2 ? 1 : 0;
        struct ft_engine *e = NULL;
        EXPECT_OK(ft_engine_init(&e, m, g_pool, &o));
        unsetenv("FT_TEST_UPLOAD_FAULT");
        ft_env_reload();
        if (!e) continue;
        EXPECT_OK(ft_engine_prefill(e, ids, T, run ? l : ref_l, 1));
        if (run == 1) differs = memcmp(ref_l, l, (size_t)T * V * 4) != 0;
        if (run == 2) same = !memcmp(ref_l, l, (size_t)T * V * 4);
        ft_engine_free(e);
    }
    fprintf(stderr, "  %-16s upload %d zeroed: unchecked %s, checked %s\n", name, k,
            differs ? "differs" : "SAME", same ? "identical" : "DIFFERENT");
    CHECK_(differs, "%s: zeroing upload %d changed nothing (the fault hook did not fire)", name, k);
    CHECK_(same, "%s: the upload check did not repair upload %d", name, k);
    free(ref_l), free(l);
    ft_model_free(m);
}

TEST(upload_check_repairs_a_zeroed_weight) {
    upload_fault_case("qwen3_moe", 1);   /* the embedding */
    upload_fault_case("qwen3_moe", 4);   /* a layer's norm */
    upload_fault_case("qwen3_5_moe", 9); /* a DeltaNet layer's */
    upload_fault_case("deepseek_v3", 7); /* an MLA layer's */
}

/* The hot set (moe/hotset.h): an offload engine with hot_set on saves its experts' uses when
 * freed; the next one warms its cache from that file before its first step (the warmed slots
 * must hold the right experts: its greedy tokens and logits are the resident backend's). */
TEST(offload_warms_its_cache_from_the_hot_set) {
    char dir[] = "/tmp/ft_hot_XXXXXX", fdir[512], ref[512];
    if (!mkdtemp(dir)) return;
    setenv("FREETOKEN_CACHE", dir, 1);
    ft_env_reload();
    fixture("qwen3_moe", fdir, sizeof fdir, ref, sizeof ref);
    struct ft_model *m = NULL;
    EXPECT_OK(ft_model_load(fdir, &m));
    struct ft_engine_opts ro = {.max_ctx = 48, .max_chunk = 64, .backend = FT_BACKEND_CUDA, .no_graphs = 1};
    struct ft_engine_opts oo = ro;
    oo.backend = FT_BACKEND_OFFLOAD, oo.moe_cache_slots = 6, oo.moe_mode = 0, oo.hot_set = 1;
    const int V = m ? m->vocab : 1;
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    long warmed[2] = {-1, -1};
    for (int run = 0; m && run < 2; run++) {
        struct ft_engine *re = NULL, *oe = NULL;
        EXPECT_OK(ft_engine_init(&re, m, g_pool, &ro));
        EXPECT_OK(ft_engine_init(&oe, m, g_pool, &oo));
        if (!re || !oe) {
            ft_engine_free(re), ft_engine_free(oe);
            break;
        }
        struct ft_gpu_offload_stats os;
        ft_engine_offload_stats(oe, &os);
        warmed[run] = os.warmed;
        int32_t ids[16];
        for (int t = 0; t < 16; t++) ids[t] = (t * 29 + 3 + run) % V;
        EXPECT_OK(ft_engine_prefill(re, ids, 16, a, 0));
        EXPECT_OK(ft_engine_prefill(oe, ids, 16, b, 0));
        int same = 1;
        float err = 0;
        for (int g = 0; g < 10; g++) {
            for (int v = 0; v < V; v++) err = fmaxf(err, fabsf(a[v] - b[v]));
            int32_t x = ft_argmax(a, V), y = ft_argmax(b, V);
            same &= x == y;
            EXPECT_OK(ft_engine_forward(re, &x, 1, a, 0));
            EXPECT_OK(ft_engine_forward(oe, &y, 1, b, 0));
        }
        fprintf(stderr, "  run %d: %ld experts warmed at start, max |dlogit| %g\n", run, warmed[run], err);
        CHECK_(same, "hot set run %d: greedy tokens differ from the resident backend", run);
        CHECK_(err <= 0.05f, "hot set run %d: max |dlogit| %g", run, err);
        ft_engine_free(re);
        ft_engine_free(oe); /* writes the hot set */
    }
    EXPECT_EQ(warmed[0], 0);
    CHECK_(warmed[1] > 0, "the second engine warmed %ld experts from the hot set", warmed[1]);
    free(a), free(b);
    ft_model_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    EXPECT(system(cmd) == 0);
    unsetenv("FREETOKEN_CACHE");
    ft_env_reload();
}

/* One greedy request (logprobs on) to its end on s: generated ids and log-probabilities into
 * ids/lp (n_gen of them), its cached prompt tokens returned (-1 on failure). */
static int gpu_sched_run(struct ft_sched *s, const int32_t *prompt, int n, int32_t *ids, float *lp,
                         int *n_gen) {
    struct ft_req_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = 10, .skip_special = 1,
                              .logprobs = 1, .ignore_eos = 1};
    p.sampling = ft_sampling_default();
    p.sampling.temperature = 0;
    struct ft_req *r = NULL;
    struct ft_event ev;
    int cached = -1;
    *n_gen = 0;
    EXPECT_OK(ft_sched_submit(s, &p, &r));
    while (r && ft_req_next_event(r, &ev, 60000)) {
        if (ev.type != FT_EV_TEXT) {
            EXPECT_EQ(ev.type, FT_EV_DONE);
            cached = ev.type == FT_EV_DONE ? ev.n_cached : -1;
            break;
        }
        if (ev.lp && *n_gen < 10) ids[*n_gen] = ev.lp->id, lp[(*n_gen)++] = ev.lp->logprob;
        free(ev.text), free(ev.lp);
    }
    if (r) ft_req_release(r);
    return cached;
}

/* The hybrid prefix cache on a GPU backend: a state read from its device slot and written into
 * another sequence's (sharing the first's KV blocks below it) continues exactly as the
 * original; through the scheduler, a second turn restoring the first's checkpoint reports 48
 * cached tokens and the greedy tokens of the same request without the cache. */
static void gpu_prefix_case(const struct ft_model *m, const struct ft_tok *tok, enum ft_backend be) {
    const char *bn = be == FT_BACKEND_CUDA ? "cuda" : "offload";
    const int V = m->vocab;
    struct ft_engine_opts eo = {.max_ctx = 96, .max_chunk = 64, .kv_tokens = 192, .backend = be,
                                .no_graphs = 1};
    struct ft_engine *e = NULL;
    EXPECT_OK(ft_engine_init(&e, m, g_pool, &eo));
    if (e) {
        enum { P = 32, N = 16 };
        int32_t ids[P + N], a[3], c[3];
        for (int t = 0; t < P + N; t++) ids[t] = (t * 41 + 9) % V;
        void *st = malloc(ft_engine_state_bytes(e));
        float *la = malloc((size_t)N * V * 4), *lc = malloc((size_t)N * V * 4);
        EXPECT_OK(ft_engine_kv_alloc(e, 3, a));
        memcpy(c, a, 2 * sizeof *c);
        ft_engine_kv_ref(e, a, 2);
        EXPECT_OK(ft_engine_kv_alloc(e, 1, c + 2));
        EXPECT_OK(ft_engine_state_load(e, a, NULL));
        struct ft_seg g = {ids, P, 0, a, FT_LOGITS_NONE};
        EXPECT_OK(ft_engine_forward_batch(e, &g, 1, NULL));
        EXPECT_OK(ft_engine_state_save(e, a, st));
        EXPECT_OK(ft_engine_state_load(e, c, st));
        struct ft_seg ga = {ids + P, N, P, a, FT_LOGITS_ALL}, gc = {ids + P, N, P, c, FT_LOGITS_ALL};
        EXPECT_OK(ft_engine_forward_batch(e, &ga, 1, la));
        EXPECT_OK(ft_engine_forward_batch(e, &gc, 1, lc));
        const double d = max_err(la, lc, (size_t)N * V);
        fprintf(stderr, "  %-8s state slot read/write: restored sequence max |dlogit| %g\n", bn, d);
        CHECK_(d <= 1e-5, "%s: a restored state continues %g off the original", bn, d);
        ft_engine_state_drop(e, a), ft_engine_state_drop(e, c);
        free(st), free(la), free(lc);
        ft_engine_free(e);
    }
    struct ft_sched_opts off = {.max_running = 2, .max_prefill = 64, .ctx_size = 192, .prefix_cache = -1};
    off.engine.backend = be;
    struct ft_sched_opts on = off;
    on.prefix_cache = 0;
    struct ft_sched *s0 = NULL, *s1 = NULL;
    EXPECT_OK(ft_sched_init(&s0, m, tok, g_pool, &off));
    EXPECT_OK(ft_sched_init(&s1, m, tok, g_pool, &on));
    if (s0 && s1) {
        int32_t t1[70], t2[106], ga[10], gb[10];
        float pa[10], pb[10];
        int na = 0, nb = 0;
        for (int t = 0; t < 106; t++) t2[t] = t < 66 ? (t * 37 + 5) % V : (t * 53 + 11) % V;
        memcpy(t1, t2, 66 * sizeof *t1);
        for (int t = 66; t < 70; t++) t1[t] = (t * 11 + 300) % V; /* turn 1's generation suffix */
        EXPECT_EQ(gpu_sched_run(s1, t1, 70, ga, pa, &na), 0);
        const int cached = gpu_sched_run(s1, t2, 106, ga, pa, &na);
        EXPECT_EQ(gpu_sched_run(s0, t2, 106, gb, pb, &nb), 0);
        int same = na == nb && na > 0;
        float err = 0;
        for (int i = 0; same && i < na; i++) same &= ga[i] == gb[i], err = fmaxf(err, fabsf(pa[i] - pb[i]));
        fprintf(stderr, "  %-8s second turn: %d cached, tokens %s, max |dlogprob| %g\n", bn, cached,
                same ? "identical" : "DIFFERENT", err);
        CHECK_(cached == 48, "%s: the second turn cached %d tokens, expected 48", bn, cached);
        CHECK_(same && err <= 5e-2, "%s: the cached second turn's tokens differ from the uncached", bn);
    }
    ft_sched_free(s0);
    ft_sched_free(s1);
}

TEST(hybrid_prefix_cache_through_cuda_and_offload) {
    struct ft_model *m = NULL;
    struct ft_tok *tok = NULL;
    EXPECT_OK(ft_model_load(FT_TEST_DATA "/models/qwen3_5_moe", &m));
    EXPECT_OK(ft_tok_load(FT_TEST_DATA "/models/qwen3_5_moe", &tok));
    if (m && tok) {
        gpu_prefix_case(m, tok, FT_BACKEND_CUDA);
        gpu_prefix_case(m, tok, FT_BACKEND_OFFLOAD);
    }
    ft_tok_free(tok);
    ft_model_free(m);
}

/* GLM-5's DeepSeek sparse attention (glm_moe_dsa: index_topk 6 of a 24-token prompt, so the
 * indexer drops positions from the 7th on; a "shared" layer reuses the choice): through cuda as
 * every fixture, offload and hybrid against resident, and a prefill in chunks of 10 (prefill
 * kernels over a context past index_topk, the last chunk of 4 on the decode path) then greedy
 * decode with graphs, against transformers. */
TEST(glm_moe_dsa_through_cuda_and_offload) {
    /* The whole prefill is checked on positions 0-22: position 23's third MoE layer has the
     * prompt's narrowest routing decision, a group-score gap of 3.4e-3 (sigmoid scores plus
     * bias, transformers and the CPU in fp32; every other decision of the 72 is 6.5e-3 or
     * wider), and the bf16 prefill's hidden state is ~1e-2 off, so it picks the other group
     * there (1.36 off on the H200). The decode path (fp32), the greedy ids and the chunked
     * prefill below cover position 23. */
    check_n("glm_moe_dsa", 23, 1.5e-1, 1e-3);
    offload_case("glm_moe_dsa", 4, 1, NULL);
    offload_case("glm_moe_dsa", 4, 2, NULL);
    split_case("glm_moe_dsa", 2);
    char dir[512], path[1024];
    fixture("glm_moe_dsa", dir, sizeof dir, path, sizeof path);
    struct ft_st_file *f = NULL;
    struct ft_model *m = NULL;
    EXPECT_OK(ft_st_open(path, &f));
    EXPECT_OK(ft_model_load(dir, &m));
    if (f && m) {
        const int32_t *ids = ft_st_find(f, "ids")->data, *greedy = ft_st_find(f, "greedy")->data;
        const float *ref = ft_st_find(f, "logits")->data;
        const int T = (int)ft_st_find(f, "ids")->shape[0], G = (int)ft_st_find(f, "greedy")->shape[0], V = m->vocab;
        struct ft_engine_opts eo = {.max_ctx = T + G, .max_chunk = 10, .kv_tokens = 4 * (T + G),
                                    .backend = FT_BACKEND_CUDA};
        struct ft_engine *e = NULL;
        EXPECT_OK(ft_engine_init(&e, m, g_pool, &eo));
        float *lg = malloc((size_t)T * V * 4);
        if (e && lg) {
            EXPECT_OK(ft_engine_prefill(e, ids, T, lg, 1));
            const double pe = max_err(lg, ref, (size_t)T * V);
            ft_engine_reset(e);
            EXPECT_OK(ft_engine_prefill(e, ids, T, lg, 0));
            int same = 1;
            for (int g = 0; g < G && same; g++) {
                int32_t next = ft_argmax(lg, V);
                same = next == greedy[g];
                if (!same) fprintf(stderr, "    glm_moe_dsa chunked: greedy token %d is %d, transformers %d\n", g, next, greedy[g]);
                if (g + 1 < G) EXPECT_OK(ft_engine_forward(e, &next, 1, lg, 0));
            }
            fprintf(stderr, "  glm_moe_dsa chunks of 10: prefill max|dlogit| %.2e, greedy %s\n", pe,
                    same ? "same" : "DIFFERENT");
            CHECK_(pe <= 1.5e-1, "glm_moe_dsa chunked prefill max |dlogit| %g > 0.15", pe);
            CHECK_(same, "glm_moe_dsa: greedy tokens after a chunked prefill differ from transformers");
        }
        free(lg);
        ft_engine_free(e);
    }
    ft_model_free(m);
    ft_st_close(f);
}

int main(int argc, char **argv) {
    if (ft_pool_init(&g_pool, 0) != FT_OK) return 1;
    int rc = test_run("gpu_model", argc, argv);
    ft_pool_free(g_pool);
    return rc;
}
