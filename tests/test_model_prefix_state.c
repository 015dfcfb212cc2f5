/* test_model_prefix_state.c — the prefix cache of hybrid (Gated DeltaNet) models: recurrent-state
 * checkpoints at KV-block boundaries. On the tiny qwen3_5_moe and qwen3_next fixtures (CPU, exact
 * fp32 activations), a request that reuses another's blocks and checkpoint must give exactly the
 * logits (top log-probabilities within 1e-5) and greedy tokens of the same request on an engine
 * without the cache; a request diverging before the checkpoint reuses nothing; a tiny budget
 * evicts checkpoints; requests restoring checkpoints run batched together. */
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "engine/forward.h"
#include "engine/sched.h"
#include "model/model.h"
#include "test.h"

#define QWEN35 FT_TEST_DATA "/models/qwen3_5_moe"
#define QNEXT FT_TEST_DATA "/models/qwen3_next"
#define TOL 1e-5
#define MAX_GEN 12

static float max_err(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

/* Engine level: a's state saved after P tokens and loaded into c, which shares a's KV blocks
 * below P; then a (other tokens) and c continue in one batch. Each must give every logit row
 * of a fresh engine that ran its whole sequence in one chunk. */
static void engine_case(const char *dir) {
    struct ft_pool *pool = NULL;
    struct ft_model *m = NULL;
    struct ft_engine *e = NULL, *ref = NULL;
    EXPECT_OK(ft_pool_init(&pool, 2));
    EXPECT_OK(ft_model_load(dir, &m));
    struct ft_engine_opts eo = {.max_ctx = 96, .max_chunk = 96, .kv_tokens = 96 * 3};
    if (m) EXPECT_OK(ft_engine_init(&e, m, pool, &eo));
    if (m) EXPECT_OK(ft_engine_init(&ref, m, pool, &eo));
    if (!e || !ref) goto done;
    enum { P = 48, NA = 20, NC = 32 };
    const int V = m->vocab;
    int32_t ids[P + NC], alt[P + NA], a[6], c[6];
    for (int i = 0; i < P + NC; i++) ids[i] = (i * 37 + 5) % V;
    memcpy(alt, ids, P * sizeof *alt);
    for (int i = P; i < P + NA; i++) alt[i] = (i * 53 + 11) % V;
    const size_t bytes = ft_engine_state_bytes(e);
    EXPECT(bytes > 0 && bytes == ft_model_state_bytes(m));
    void *ckpt = malloc(bytes);
    float *lg = malloc((size_t)(NA + NC) * V * sizeof *lg), *want = malloc((size_t)(P + NC) * V * sizeof *want);
    EXPECT_OK(ft_engine_kv_alloc(e, 6, a));
    memcpy(c, a, 3 * sizeof *c); /* c holds a's first three blocks (positions < P) */
    ft_engine_kv_ref(e, a, 3);
    EXPECT_OK(ft_engine_kv_alloc(e, 3, c + 3));
    EXPECT_EQ(ft_engine_state_save(e, a, ckpt), FT_ERR_INVALID_ARG); /* never ran: no state */
    EXPECT_OK(ft_engine_state_load(e, a, NULL));
    struct ft_seg s1 = {ids, P, 0, a, FT_LOGITS_NONE};
    EXPECT_OK(ft_engine_forward_batch(e, &s1, 1, NULL));
    EXPECT_OK(ft_engine_state_save(e, a, ckpt));
    EXPECT_OK(ft_engine_state_load(e, c, ckpt));
    memset(ckpt, 0x7f, bytes); /* the engine holds its own copy */
    struct ft_seg s2[2] = {{alt + P, NA, P, a, FT_LOGITS_ALL}, {ids + P, NC, P, c, FT_LOGITS_ALL}};
    EXPECT_OK(ft_engine_forward_batch(e, s2, 2, lg));
    EXPECT_OK(ft_engine_prefill(ref, ids, P + NC, want, 1));
    const float ec = max_err(lg + (size_t)NA * V, want + (size_t)P * V, (size_t)NC * V);
    ft_engine_reset(ref);
    EXPECT_OK(ft_engine_prefill(ref, alt, P + NA, want, 1));
    const float ea = max_err(lg, want + (size_t)P * V, (size_t)NA * V);
    printf("  %-12s restored state: max |dlogit| %.2e (restored), %.2e (its source)\n",
           m->arch->name, ec, ea);
    CHECK_(ec <= TOL && ea <= TOL, "%s: logits after a restored state differ by %g / %g", dir, ec, ea);
    /* dropped: c cannot continue; a still can */
    ft_engine_state_drop(e, c);
    struct ft_seg s3 = {ids + P + NC - 1, 1, P + NC, c, FT_LOGITS_LAST};
    EXPECT_EQ(ft_engine_forward_batch(e, &s3, 1, lg), FT_ERR_INVALID_ARG);
    struct ft_seg s4 = {alt, 1, P + NA, a, FT_LOGITS_LAST};
    EXPECT_OK(ft_engine_forward_batch(e, &s4, 1, lg));
    ft_engine_state_drop(e, a);
    ft_engine_kv_free(e, c, 6);
    ft_engine_kv_free(e, a, 6);
    EXPECT_EQ(ft_engine_kv_free_blocks(e), ft_engine_kv_total_blocks(e));
    free(ckpt), free(lg), free(want);
done:
    ft_engine_free(e);
    ft_engine_free(ref);
    ft_model_free(m);
    ft_pool_free(pool);
}

TEST(engine_state_save_and_load_are_exact) {
    engine_case(QWEN35);
    engine_case(QNEXT);
}

/* --- scheduler level --- */

struct out {
    char text[1024];
    int cached, n;
    struct ft_token_lp lp[MAX_GEN];
};

static struct ft_req *submit(struct ft_sched *s, const int32_t *ids, int n) {
    struct ft_req_params p = {.prompt = ids, .n_prompt = n, .max_tokens = MAX_GEN, .skip_special = 1,
                              .logprobs = 1, .top_logprobs = 5, .ignore_eos = 1};
    p.sampling = ft_sampling_default();
    p.sampling.temperature = 0;
    struct ft_req *r = NULL;
    EXPECT_OK(ft_sched_submit(s, &p, &r));
    return r;
}

static void collect(struct ft_req *r, struct out *o) {
    memset(o, 0, sizeof *o);
    o->cached = -1;
    struct ft_event ev;
    size_t len = 0;
    while (r && ft_req_next_event(r, &ev, 60000)) {
        if (ev.type == FT_EV_TEXT) {
            if (ev.lp && o->n < MAX_GEN) o->lp[o->n++] = *ev.lp;
            if (len + ev.len < sizeof o->text) memcpy(o->text + len, ev.text, ev.len), len += ev.len;
            free(ev.text), free(ev.lp);
            continue;
        }
        EXPECT_EQ(ev.type, FT_EV_DONE);
        o->cached = ev.n_cached;
        break;
    }
    if (r) ft_req_release(r);
}

static void run(struct ft_sched *s, const int32_t *ids, int n, struct out *o) { collect(submit(s, ids, n), o); }

/* got against want (the same request without the cache): the same tokens and text, every
 * token's top log-probabilities within TOL; the largest difference into *err. */
static int same(const struct out *got, const struct out *want, float *err) {
    int ok = got->n == want->n && got->n > 0 && !strcmp(got->text, want->text);
    for (int i = 0; ok && i < got->n; i++) {
        const struct ft_token_lp *g = &got->lp[i], *w = &want->lp[i];
        ok &= g->id == w->id && g->n_top == w->n_top;
        *err = fmaxf(*err, fabsf(g->logprob - w->logprob));
        for (int k = 0; ok && k < g->n_top; k++) {
            ok &= g->top_id[k] == w->top_id[k];
            *err = fmaxf(*err, fabsf(g->top_lp[k] - w->top_lp[k]));
        }
    }
    return ok && *err <= TOL;
}

struct rig {
    struct ft_pool *pool;
    struct ft_model *m;
    struct ft_tok *tok;
    struct ft_sched *off; /* the reference: --no-prefix-cache */
};

static int rig_open(struct rig *g, const char *dir) {
    memset(g, 0, sizeof *g);
    struct ft_sched_opts off = {.max_running = 1, .max_prefill = 64, .ctx_size = 192, .prefix_cache = -1};
    if (ft_pool_init(&g->pool, 2) || ft_model_load(dir, &g->m) || ft_tok_load(dir, &g->tok)) return -1;
    return ft_sched_init(&g->off, g->m, g->tok, g->pool, &off) == FT_OK ? 0 : -1;
}

static void rig_close(struct rig *g) {
    ft_sched_free(g->off);
    ft_tok_free(g->tok);
    ft_model_free(g->m);
    ft_pool_free(g->pool);
}

/* A conversation's turns: turn 1 is `len` tokens of seed; turn 2 resends turn 1 but for its
 * last 4 tokens (the chat template's generation suffix, rendered otherwise in the history),
 * then `more` new ones. */
static int turn(int32_t *ids, int seed, int len, int more, int V) {
    for (int i = 0; i < len - 4; i++) ids[i] = (i * 37 + seed * 101 + 5) % V;
    for (int i = len - 4; i < len; i++) ids[i] = (i * 11 + seed * 7 + 300) % V;
    if (!more) return len;
    for (int i = len - 4; i < len - 4 + more; i++) ids[i] = (i * 53 + seed * 13 + 11) % V;
    return len - 4 + more;
}

/* One request on `on`: its cached tokens as expected and its output the uncached one's. */
static void expect_turn(struct rig *g, struct ft_sched *on, const int32_t *ids, int n, int cached,
                        const char *what) {
    struct out got, want;
    float err = 0;
    run(on, ids, n, &got);
    run(g->off, ids, n, &want);
    CHECK_(got.cached == cached, "%s %s: %d prompt tokens cached, expected %d", g->m->arch->name, what,
           got.cached, cached);
    CHECK_(same(&got, &want, &err), "%s %s: '%s' (%d tokens) != uncached '%s' (%d), max |dlogprob| %g",
           g->m->arch->name, what, got.text, got.n, want.text, want.n, err);
    CHECK_(want.cached == 0, "cache off: %d cached", want.cached);
}

/* Agent turns: turn 2 restores turn 1's checkpoint (block 3 of 70 tokens: position 48), turn 3
 * turn 2's (106 tokens: 80); a prompt diverging at token 20 finds block 0 but no checkpoint. */
static void turns_case(const char *dir) {
    struct rig g;
    struct ft_sched *on = NULL;
    struct ft_sched_opts o = {.max_running = 2, .max_prefill = 64, .ctx_size = 192};
    EXPECT(rig_open(&g, dir) == 0);
    if (g.off) EXPECT_OK(ft_sched_init(&on, g.m, g.tok, g.pool, &o));
    if (!on) goto done;
    const int V = g.m->vocab;
    int32_t t1[80], t2[120], t3[150], div[80];
    const int n1 = turn(t1, 1, 70, 0, V), n2 = turn(t2, 1, 70, 40, V);
    memcpy(t3, t2, (size_t)n2 * sizeof *t3);
    for (int i = n2; i < n2 + 30; i++) t3[i] = (i * 29 + 3) % V;
    memcpy(div, t1, sizeof div);
    div[20] = (div[20] + 1) % V;
    expect_turn(&g, on, t1, n1, 0, "turn 1");
    expect_turn(&g, on, t2, n2, 48, "turn 2");
    expect_turn(&g, on, t3, n2 + 30, 80, "turn 3");
    expect_turn(&g, on, div, n1, 0, "diverging at token 20");
    expect_turn(&g, on, t1, n1, 48, "turn 1 again");
    struct ft_sched_stats st;
    ft_sched_stats(on, &st);
    EXPECT_EQ(st.prefix_hit_tokens, 48 + 80 + 48);
    EXPECT_EQ(st.prefix_query_tokens, 2 * n1 + n2 + n2 + 30 + n1);
done:
    ft_sched_free(on);
    rig_close(&g);
}

TEST(hybrid_turns_restore_checkpoints_exactly) {
    turns_case(QWEN35);
    turns_case(QNEXT);
}

/* An agent's next turn resends the model's answer: turn 1 (70 prompt tokens) runs 70 + 11
 * tokens (its 12th is sampled, not run), so its answer's checkpoint sits at position 80, not
 * at its prompt's 48; turn 2 (turn 1, its answer, 20 new tokens) restores it and prefills 22. */
static void answer_case(const char *dir) {
    struct rig g;
    struct ft_sched *on = NULL;
    struct ft_sched_opts o = {.max_running = 1, .max_prefill = 64, .ctx_size = 192};
    EXPECT(rig_open(&g, dir) == 0);
    if (g.off) EXPECT_OK(ft_sched_init(&on, g.m, g.tok, g.pool, &o));
    if (!on) goto done;
    const int V = g.m->vocab;
    int32_t t1[80], t2[120];
    const int n1 = turn(t1, 3, 70, 0, V);
    struct out a;
    run(on, t1, n1, &a);
    EXPECT_EQ(a.n, MAX_GEN);
    memcpy(t2, t1, (size_t)n1 * sizeof *t2);
    int n2 = n1;
    for (int i = 0; i < a.n; i++) t2[n2++] = a.lp[i].id;
    for (int i = 0; i < 20; i++, n2++) t2[n2] = (n2 * 31 + 7) % V;
    expect_turn(&g, on, t2, n2, 80, "turn 2 resending turn 1's answer");
done:
    ft_sched_free(on);
    rig_close(&g);
}

TEST(hybrid_answer_checkpoint_serves_the_next_turn) {
    answer_case(QWEN35);
    answer_case(QNEXT);
}

/* A budget of two checkpoints (a request keeps two: at its prompt's end and at its answer's,
 * here position 48 and 80 of 70 + 11 tokens run): the second conversation's evict the first's
 * (whose KV blocks stay indexed but cannot be used without them); a budget under one
 * checkpoint, or none, turns the hybrid prefix cache off. */
TEST(hybrid_checkpoint_budget_evicts_and_disables) {
    struct rig g;
    struct ft_sched *on = NULL;
    EXPECT(rig_open(&g, QWEN35) == 0);
    if (!g.off) goto done;
    const int V = g.m->vocab;
    const long long one = (long long)ft_model_state_bytes(g.m);
    int32_t a1[80], a2[120], b1[80], b2[120];
    const int n1 = turn(a1, 1, 70, 0, V), n2 = turn(a2, 1, 70, 30, V);
    turn(b1, 2, 70, 0, V), turn(b2, 2, 70, 30, V);
    struct ft_sched_opts o = {.max_running = 1, .max_prefill = 64, .ctx_size = 192,
                              .prefix_state_mem = 2 * one};
    EXPECT_OK(ft_sched_init(&on, g.m, g.tok, g.pool, &o));
    if (!on) goto done;
    expect_turn(&g, on, a1, n1, 0, "a1");
    expect_turn(&g, on, b1, n1, 0, "b1");          /* its checkpoints (48, 80) evict a1's */
    expect_turn(&g, on, b2, n2, 48, "b2");         /* b1's; then its own (80, 96) evict them */
    expect_turn(&g, on, a2, n2, 0, "a2 evicted");  /* a1's blocks indexed, no checkpoint */
    expect_turn(&g, on, a2, n2, 80, "a2 again");   /* its own, just taken */
    ft_sched_free(on);
    on = NULL;
    const long long under[2] = {one - 1, -1};
    for (int i = 0; i < 2; i++) {
        o.prefix_state_mem = under[i];
        EXPECT_OK(ft_sched_init(&on, g.m, g.tok, g.pool, &o));
        if (!on) break;
        expect_turn(&g, on, a1, n1, 0, "small budget a1");
        expect_turn(&g, on, a1, n1, 0, "small budget a1 again");
        ft_sched_free(on);
        on = NULL;
    }
done:
    ft_sched_free(on);
    rig_close(&g);
}

/* Continuous batching: three requests restore checkpoints at once, two of them the same one
 * (their first blocks shared with each other), prefilled in chunks of 8 beside the others'
 * decode steps; each gives exactly its uncached output. */
TEST(hybrid_checkpoints_restored_batched) {
    struct rig g;
    struct ft_sched *on = NULL;
    EXPECT(rig_open(&g, QWEN35) == 0);
    struct ft_sched_opts o = {.max_running = 3, .max_prefill = 8, .ctx_size = 192};
    if (g.off) EXPECT_OK(ft_sched_init(&on, g.m, g.tok, g.pool, &o));
    if (!on) goto done;
    const int V = g.m->vocab;
    int32_t a1[80], b1[80], x[3][120];
    const int n1 = turn(a1, 1, 70, 0, V), n2 = turn(x[0], 1, 70, 30, V);
    turn(b1, 2, 70, 0, V), turn(x[1], 2, 70, 30, V), turn(x[2], 1, 70, 30, V);
    for (int i = 70; i < n2; i++) x[2][i] = (i * 7 + 1) % V; /* a1's prefix, another ending */
    struct out got[3], want;
    run(on, a1, n1, &got[0]);
    run(on, b1, n1, &got[1]);
    struct ft_req *r[3];
    for (int i = 0; i < 3; i++) r[i] = submit(on, x[i], n2);
    for (int i = 0; i < 3; i++) collect(r[i], &got[i]);
    for (int i = 0; i < 3; i++) {
        float err = 0;
        run(g.off, x[i], n2, &want);
        CHECK_(got[i].cached == 48, "batched request %d: %d cached, expected 48", i, got[i].cached);
        CHECK_(same(&got[i], &want, &err), "batched request %d: '%s' != uncached '%s' (max |dlogprob| %g)",
               i, got[i].text, want.text, err);
    }
    struct ft_sched_stats st;
    ft_sched_stats(on, &st);
    EXPECT_EQ(st.kv_used_tokens, 0); /* only the cache holds blocks now */
done:
    ft_sched_free(on);
    rig_close(&g);
}

/* DeepSeek-V4's per-sequence state has no checkpoints: its prefix cache stays off. */
TEST(v4_prefix_cache_stays_off) {
    struct rig g;
    struct ft_sched *on = NULL;
    EXPECT(rig_open(&g, FT_TEST_DATA "/models/deepseek_v4") == 0);
    struct ft_sched_opts o = {.max_running = 1, .max_prefill = 64, .ctx_size = 64};
    if (g.off) EXPECT_OK(ft_sched_init(&on, g.m, g.tok, g.pool, &o));
    if (!on) goto done;
    int32_t ids[48];
    for (int i = 0; i < 48; i++) ids[i] = 3 + (i * 31) % (g.m->vocab - 3);
    struct out a, b;
    run(on, ids, 48, &a);
    run(on, ids, 48, &b);
    EXPECT(a.cached == 0 && b.cached == 0 && !strcmp(a.text, b.text));
done:
    ft_sched_free(on);
    rig_close(&g);
}

TEST_MAIN("model_prefix_state")
