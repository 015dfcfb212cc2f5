/* test_model_sched.c — the serving engine on the qwen3_moe fixture: batched, chunked generation
 * must give every request exactly transformers' greedy text (text_reference.json) whatever runs
 * beside it; cancellation, admission limits, queue limits and shutdown behave. */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/log.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "engine/sched.h"
#include "engine_draws.h"
#include "model/model.h"
#include "test.h"

#define M FT_TEST_DATA "/models/qwen3_moe"

struct fixture {
    struct ft_pool *pool;
    struct ft_model *m;
    struct ft_tok *tok;
    json_t *ref;
};

static int open_fixture(struct fixture *f) {
    memset(f, 0, sizeof *f);
    if (ft_pool_init(&f->pool, 2) || ft_model_load(M, &f->m) || ft_tok_load(M, &f->tok)) return -1;
    f->ref = json_load_file(M "/text_reference.json", 0, NULL);
    return f->ref ? 0 : -1;
}

static void close_fixture(struct fixture *f) {
    json_decref(f->ref);
    ft_tok_free(f->tok);
    ft_model_free(f->m);
    ft_pool_free(f->pool);
}

/* Prompt ids of reference case i. */
static int case_prompt(const struct fixture *f, int i, int32_t *ids) {
    json_t *a = json_object_get(json_array_get(f->ref, (size_t)i), "prompt_ids");
    for (size_t j = 0; j < json_array_size(a); j++) ids[j] = (int32_t)json_integer_value(json_array_get(a, j));
    return (int)json_array_size(a);
}

static struct ft_req_params greedy(const int32_t *ids, int n, int max_tokens) {
    struct ft_req_params p = {.prompt = ids, .n_prompt = n, .max_tokens = max_tokens, .skip_special = 1};
    p.sampling = ft_sampling_default();
    p.sampling.temperature = 0;
    return p;
}

/* Collects a request's text until its terminal event. */
static char *collect(struct ft_req *r, struct ft_event *last) {
    size_t cap = 4096, n = 0;
    char *out = calloc(cap, 1);
    struct ft_event ev;
    while (ft_req_next_event(r, &ev, 20000)) {
        if (ev.type == FT_EV_TEXT) {
            if (n + ev.len + 1 < cap) memcpy(out + n, ev.text, ev.len), n += ev.len;
            free(ev.text);
            continue;
        }
        *last = ev;
        break;
    }
    out[n] = 0;
    return out;
}

TEST(batched_requests_match_transformers) {
    struct fixture f;
    EXPECT(open_fixture(&f) == 0);
    /* small prefill chunks so prompts are split and interleaved with other requests' decode */
    struct ft_sched_opts o = {.max_running = 3, .max_prefill = 5, .ctx_size = 128};
    struct ft_sched *s = NULL;
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    enum { N = 8 };
    int32_t ids[N][128];
    struct ft_req *r[N] = {0};
    for (int i = 0; i < N; i++) {
        int c = i % 5, n = case_prompt(&f, c, ids[i]);
        int want = (int)json_integer_value(json_object_get(json_array_get(f.ref, (size_t)c), "n"));
        struct ft_req_params p = greedy(ids[i], n, want);
        EXPECT_OK(ft_sched_submit(s, &p, &r[i]));
    }
    for (int i = 0; i < N; i++) {
        struct ft_event last = {0};
        char *text = collect(r[i], &last);
        const char *want = json_string_value(json_object_get(json_array_get(f.ref, (size_t)(i % 5)), "text"));
        CHECK_(!strcmp(text, want), "request %d: '%s' != transformers '%s'", i, text, want);
        EXPECT_EQ(last.type, FT_EV_DONE);
        free(text);
        ft_req_release(r[i]);
    }
    struct ft_sched_stats st;
    usleep(100000);
    ft_sched_stats(s, &st);
    EXPECT_EQ(st.completed, N);
    EXPECT_EQ(st.kv_used_tokens, 0);
    EXPECT_EQ(st.running, 0);
    ft_sched_free(s);
    close_fixture(&f);
}

/* Sampled requests (seeded: temperature, top-k, top-p, and one greedy with a repetition
 * penalty, which also needs its logits) give the same text batched, their tokens drawn in
 * parallel over the pool, as each alone; and a plain greedy request beside them (the step then
 * copies logits for every row) still gives transformers' text. */
TEST(sampled_requests_same_text_alone_and_batched) {
    struct fixture f;
    EXPECT(open_fixture(&f) == 0);
    struct ft_sched_opts o = {.max_running = 4, .max_prefill = 64, .ctx_size = 128};
    enum { N = 3 };
    int32_t ids[N + 1][128];
    struct ft_req_params p[N + 1];
    for (int i = 0; i <= N; i++) p[i] = greedy(ids[i], case_prompt(&f, i, ids[i]), 24);
    p[0].sampling.temperature = 0.8f, p[0].sampling.top_p = 0.9f, p[0].sampling.seed = 7;
    p[1].sampling.temperature = 1.2f, p[1].sampling.top_k = 5, p[1].sampling.seed = 11;
    p[2].sampling.repetition_penalty = 1.3f; /* greedy, penalised */
    for (int i = 0; i <= N; i++) p[i].ignore_eos = 1;
    char *alone[N] = {0};
    for (int i = 0; i < N; i++) {
        struct ft_sched *s = NULL;
        struct ft_req *r = NULL;
        EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
        EXPECT_OK(ft_sched_submit(s, &p[i], &r));
        struct ft_event last = {0};
        alone[i] = r ? collect(r, &last) : NULL;
        if (r) ft_req_release(r);
        ft_sched_free(s);
    }
    struct ft_sched *s = NULL;
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    struct ft_req *r[N + 1] = {0};
    for (int i = 0; i <= N; i++) EXPECT_OK(ft_sched_submit(s, &p[i], &r[i]));
    for (int i = 0; i <= N; i++) {
        struct ft_event last = {0};
        char *text = r[i] ? collect(r[i], &last) : NULL;
        if (i < N) {
            CHECK_(text && alone[i] && !strcmp(text, alone[i]) && strlen(text) > 0,
                   "request %d: batched '%s' != alone '%s'", i, text ? text : "", alone[i] ? alone[i] : "");
        } else { /* greedy: transformers' text, as far as its reference goes */
            const char *want = json_string_value(json_object_get(json_array_get(f.ref, (size_t)i), "text"));
            CHECK_(text && want && !strncmp(text, want, strlen(want) < strlen(text) ? strlen(want) : strlen(text)),
                   "greedy request beside sampled ones: '%s' against transformers '%s'", text ? text : "", want);
        }
        free(text);
        if (r[i]) ft_req_release(r[i]);
    }
    for (int i = 0; i < N; i++) free(alone[i]);
    ft_sched_free(s);
    close_fixture(&f);
}

/* Temperature-only requests drawn by the engine (engine_draws: the GPU backends' path, here on
 * the CPU): a seeded one gives the same text batched beside a greedy one as alone, and the
 * greedy one still gives transformers' text. */
TEST(engine_drawn_requests_same_text_alone_and_batched) {
    struct fixture f;
    EXPECT(open_fixture(&f) == 0);
    struct ft_sched_opts o = {.max_running = 4, .max_prefill = 64, .ctx_size = 128, .engine_draws = 1};
    int32_t ids[2][128];
    struct ft_req_params p[2];
    for (int i = 0; i < 2; i++) p[i] = greedy(ids[i], case_prompt(&f, i, ids[i]), 24), p[i].ignore_eos = 1;
    p[0].sampling.temperature = 0.9f, p[0].sampling.seed = 21;
    char *alone = NULL;
    struct ft_sched *s = NULL;
    struct ft_req *r[2] = {0};
    struct ft_event last = {0};
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    EXPECT_OK(ft_sched_submit(s, &p[0], &r[0]));
    if (r[0]) alone = collect(r[0], &last), ft_req_release(r[0]);
    ft_sched_free(s);
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    for (int i = 0; i < 2; i++) EXPECT_OK(ft_sched_submit(s, &p[i], &r[i]));
    char *text[2] = {r[0] ? collect(r[0], &last) : NULL, r[1] ? collect(r[1], &last) : NULL};
    CHECK_(alone && text[0] && strlen(alone) > 0 && !strcmp(alone, text[0]),
           "engine-drawn request: batched '%s' != alone '%s'", text[0] ? text[0] : "", alone ? alone : "");
    const char *want = json_string_value(json_object_get(json_array_get(f.ref, 1), "text"));
    CHECK_(text[1] && want && !strncmp(text[1], want, strlen(want) < strlen(text[1]) ? strlen(want) : strlen(text[1])),
           "greedy beside an engine-drawn request: '%s' against transformers '%s'", text[1] ? text[1] : "", want);
    for (int i = 0; i < 2; i++) {
        free(text[i]);
        if (r[i]) ft_req_release(r[i]);
    }
    free(alone);
    ft_sched_free(s);
    close_fixture(&f);
}

/* The engine's own draws (ft_engine_forward_batch_draw: what the GPU backend does on the
 * device) equal ft_sampler_draw_row on the logits the same step returns, here on the CPU
 * backend (engine_draws.h: greedy, temperature, top-k with top-p, top-p with min-p rows). */
TEST(engine_draws_match_host_draws) {
    struct fixture f;
    EXPECT(open_fixture(&f) == 0);
    struct ft_engine_opts eo = {.max_ctx = 64, .max_chunk = 16, .kv_tokens = 128};
    struct ft_engine *e = NULL;
    EXPECT_OK(ft_engine_init(&e, f.m, f.pool, &eo));
    if (e) EXPECT_EQ(engine_draws_agree(e, f.m->vocab, 6), 6);
    ft_engine_free(e);
    close_fixture(&f);
}

TEST(cancel_admission_queue_and_shutdown) {
    struct fixture f;
    EXPECT(open_fixture(&f) == 0);
    /* a long context keeps the running request busy for seconds: no race with the submits below */
    struct ft_sched_opts o = {.max_running = 1, .ctx_size = 2048, .queue_cap = 1};
    struct ft_sched *s = NULL;
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    int32_t ids[128];
    int n = case_prompt(&f, 0, ids);
    /* a prompt over the context, and bad sampling: rejected at once */
    static int32_t big[2100];
    struct ft_req_params p = greedy(big, 2100, 4);
    struct ft_req *r = NULL;
    EXPECT_EQ(ft_sched_submit(s, &p, &r), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "context");
    p = greedy(ids, n, 4);
    p.sampling.top_p = 7;
    EXPECT_EQ(ft_sched_submit(s, &p, &r), FT_ERR_INVALID_ARG);
    /* a long request occupies the only slot; one more waits; the next is refused (busy) */
    struct ft_req *longr, *queued, *refused = NULL;
    p = greedy(ids, n, 0);
    p.ignore_eos = 1;
    EXPECT_OK(ft_sched_submit(s, &p, &longr));
    struct ft_event ev;
    EXPECT(ft_req_next_event(longr, &ev, 5000) && ev.type == FT_EV_TEXT); /* it is running */
    free(ev.text);
    p = greedy(ids, n, 3);
    EXPECT_OK(ft_sched_submit(s, &p, &queued));
    EXPECT_EQ(ft_sched_submit(s, &p, &refused), FT_ERR_BUSY);
    /* cancel the long one: it ends as cancelled and the queued one then runs to completion */
    ft_req_cancel(longr);
    struct ft_event last = {0};
    free(collect(longr, &last));
    EXPECT_EQ(last.type, FT_EV_DONE);
    EXPECT_EQ(last.finish, FT_FINISH_CANCELLED);
    ft_req_release(longr);
    free(collect(queued, &last));
    EXPECT_EQ(last.finish, FT_FINISH_LENGTH);
    EXPECT_EQ(last.n_gen, 3);
    ft_req_release(queued);
    /* shutdown with a request running: it ends cancelled, nothing hangs */
    p = greedy(ids, n, 0);
    p.ignore_eos = 1;
    EXPECT_OK(ft_sched_submit(s, &p, &longr));
    EXPECT(ft_req_next_event(longr, &ev, 5000) && ev.type == FT_EV_TEXT);
    free(ev.text);
    ft_sched_shutdown(s);
    free(collect(longr, &last));
    EXPECT_EQ(last.finish, FT_FINISH_CANCELLED);
    ft_req_release(longr);
    EXPECT_EQ(ft_sched_submit(s, &p, &r), FT_ERR_BUSY);
    ft_sched_free(s);
    close_fixture(&f);
}

TEST(stop_strings_and_eos) {
    struct fixture f;
    EXPECT(open_fixture(&f) == 0);
    struct ft_sched_opts o = {.max_running = 2, .ctx_size = 128};
    struct ft_sched *s = NULL;
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    int32_t ids[128];
    int n = case_prompt(&f, 0, ids);
    const char *full = json_string_value(json_object_get(json_array_get(f.ref, 0), "text"));
    struct ft_req_params p = greedy(ids, n, 12);
    p.stop[0] = "ick";
    p.n_stop = 1;
    struct ft_req *r;
    EXPECT_OK(ft_sched_submit(s, &p, &r));
    struct ft_event last = {0};
    char *text = collect(r, &last);
    const char *at = strstr(full, "ick");
    EXPECT(at && strlen(text) == (size_t)(at - full) && !strncmp(text, full, strlen(text)));
    EXPECT_EQ(last.finish, FT_FINISH_STOP);
    free(text);
    ft_req_release(r);
    ft_sched_free(s);
    close_fixture(&f);
}

/* One greedy request on s to its end: its text, and the prompt tokens the prefix cache held. */
static char *run_one(struct ft_sched *s, const int32_t *ids, int n, int max_tokens, int *cached) {
    struct ft_req_params p = greedy(ids, n, max_tokens);
    struct ft_req *r = NULL;
    struct ft_event last = {0};
    EXPECT_OK(ft_sched_submit(s, &p, &r));
    if (!r) return calloc(1, 1);
    char *text = collect(r, &last);
    EXPECT_EQ(last.type, FT_EV_DONE);
    if (cached) *cached = last.n_cached;
    ft_req_release(r);
    return text;
}

/* The prefix cache: a request resending another's prompt (and more) reuses its full KV blocks
 * (all but the last prompt token's block) and generates exactly the text it gets without the
 * cache; under a KV pool of one context, distinct prompts evict the cached blocks, least
 * recently used first, and every request still completes with the uncached text. */
TEST(prefix_cache_reuses_blocks_and_changes_no_token) {
    struct fixture f;
    EXPECT(open_fixture(&f) == 0);
    enum { N = 6, LEN = 70 };
    int32_t ids[N][LEN];
    for (int i = 0; i < N; i++)
        for (int t = 0; t < LEN; t++) ids[i][t] = (t < 40 ? t * 37 + 11 : t * 53 + i * 101) % f.m->vocab;
    struct ft_sched_opts off = {.max_running = 2, .max_prefill = 64, .ctx_size = 96, .prefix_cache = -1};
    struct ft_sched_opts on = off;
    on.prefix_cache = 0;
    struct ft_sched *s0 = NULL, *s1 = NULL;
    EXPECT_OK(ft_sched_init(&s0, f.m, f.tok, f.pool, &off));
    EXPECT_OK(ft_sched_init(&s1, f.m, f.tok, f.pool, &on));
    if (!s0 || !s1) goto done;
    char *want[N];
    for (int i = 0; i < N; i++) { /* off (--no-prefix-cache): nothing is ever reused */
        int c0 = -1;
        want[i] = run_one(s0, ids[i], LEN, 12, &c0);
        CHECK_(c0 == 0, "prefix cache off: request %d had %d cached tokens", i, c0);
    }
    int cached = -1;
    char *a = run_one(s1, ids[0], 40, 12, &cached); /* the shared first 40 tokens alone */
    EXPECT_EQ(cached, 0);
    free(a);
    for (int i = 0; i < N; i++) { /* each shares those 40: two full blocks come from the cache */
        char *t = run_one(s1, ids[i], LEN, 12, &cached);
        CHECK_(!strcmp(t, want[i]), "request %d with the prefix cache: '%s' != '%s'", i, t, want[i]);
        CHECK_(cached == 32, "request %d: %d prompt tokens cached, expected 32", i, cached);
        free(t);
    }
    char *again = run_one(s1, ids[3], LEN, 12, &cached); /* the same prompt again: 4 full blocks */
    CHECK_(!strcmp(again, want[3]) && cached == 64, "repeat: %d cached, '%s'", cached, again);
    free(again);
    struct ft_sched_stats st;
    ft_sched_stats(s1, &st);
    EXPECT_EQ(st.prefix_hit_tokens, N * 32 + 64);
    EXPECT_EQ(st.prefix_query_tokens, 40 + (N + 1) * LEN);
    EXPECT_EQ(st.kv_used_tokens, 0); /* only the cache holds blocks now */
    for (int i = 0; i < N; i++) free(want[i]);
    ft_sched_free(s1);
    s1 = NULL;
    /* a pool of one context (96 tokens: 6 blocks): every admission evicts */
    struct ft_sched_opts tight = on;
    tight.max_running = 1, tight.kv_tokens = 96;
    EXPECT_OK(ft_sched_init(&s1, f.m, f.tok, f.pool, &tight));
    for (int round = 0; s1 && round < 2; round++)
        for (int i = 0; i < N; i++) {
            char *w = run_one(s0, ids[i], 50, 20, NULL), *t = run_one(s1, ids[i], 50, 20, &cached);
            CHECK_(!strcmp(t, w), "tight pool, request %d: '%s' != '%s'", i, t, w);
            free(w), free(t);
        }
done:
    ft_sched_free(s0);
    ft_sched_free(s1);
    close_fixture(&f);
}

/* A watchdog's fault hook (FT_TESTING builds): env = "3:1500:200" stalls a worker of the 3rd
 * watched call 1.5 s, the floor 200 ms. The request of that step fails with FT_ERR_BUSY well
 * before the stall ends (no hang), the hang is logged once; a request while the worker is
 * still stuck fails fast ("still stuck"); once it is back, the same scheduler gives exactly the
 * text of a run without the fault, twice, and says the worker came back, once. who: the log
 * lines' and errors' subject. */
static pthread_mutex_t g_wd_mu = PTHREAD_MUTEX_INITIALIZER;
static const char *g_wd_who;
static int g_wd_hung, g_wd_back;

static void wd_sink(void *ctx, enum ft_log_level lvl, const char *line) {
    (void)ctx;
    pthread_mutex_lock(&g_wd_mu);
    if (lvl == FT_LOG_ERROR && strstr(line, g_wd_who) && strstr(line, "hung")) g_wd_hung++;
    if (strstr(line, g_wd_who) && strstr(line, "came back")) g_wd_back++;
    pthread_mutex_unlock(&g_wd_mu);
}

static void hung_step_case(const char *env, const char *val, const char *who) {
    struct fixture f;
    EXPECT(open_fixture(&f) == 0);
    int32_t ids[128];
    int n = case_prompt(&f, 0, ids);
    struct ft_sched_opts o = {.max_running = 2, .max_prefill = 64, .ctx_size = 128};
    struct ft_sched *s = NULL;
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    char *clean = s ? run_one(s, ids, n, 12, NULL) : NULL;
    ft_sched_free(s);

    pthread_mutex_lock(&g_wd_mu);
    g_wd_who = who, g_wd_hung = g_wd_back = 0;
    pthread_mutex_unlock(&g_wd_mu);
    setenv(env, val, 1);
    ft_env_reload();
    ft_log_set_sink(wd_sink, NULL);
    s = NULL;
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    if (!s) goto done;
    int64_t t0 = ft_time_ns();
    struct ft_req_params p = greedy(ids, n, 12);
    struct ft_req *r = NULL;
    struct ft_event last = {0};
    EXPECT_OK(ft_sched_submit(s, &p, &r));
    free(r ? collect(r, &last) : NULL);
    double failed_s = (ft_time_ns() - t0) / 1e9;
    EXPECT_EQ(last.type, FT_EV_ERROR);
    EXPECT_EQ(last.status, FT_ERR_BUSY);
    EXPECT_CONTAINS(last.message, who);
    EXPECT_CONTAINS(last.message, "hung");
    CHECK_(failed_s < 1.2, "%s: the stalled step's request ended after %.2f s (stall 1.5 s, floor "
           "0.2 s)", env, failed_s);
    if (r) ft_req_release(r);

    /* the worker is still asleep: the next step waits at most the floor, then fails */
    r = NULL, last = (struct ft_event){0};
    EXPECT_OK(ft_sched_submit(s, &p, &r));
    free(r ? collect(r, &last) : NULL);
    EXPECT_EQ(last.type, FT_EV_ERROR);
    EXPECT_EQ(last.status, FT_ERR_BUSY);
    EXPECT_CONTAINS(last.message, "still stuck");
    if (r) ft_req_release(r);
    EXPECT((ft_time_ns() - t0) / 1e9 < 1.5);

    usleep((useconds_t)FT_MAX(0, (int)(1700000 - (ft_time_ns() - t0) / 1000)));
    for (int rep = 0; rep < 2; rep++) {
        char *after = run_one(s, ids, n, 12, NULL);
        CHECK_(clean && !strcmp(after, clean), "%s: after the hang (%d): '%s', without the fault "
               "'%s'", env, rep, after, clean ? clean : "");
        free(after);
    }
    ft_sched_free(s);
    pthread_mutex_lock(&g_wd_mu);
    EXPECT_EQ(g_wd_hung, 1);
    EXPECT_EQ(g_wd_back, 1);
    pthread_mutex_unlock(&g_wd_mu);
done:
    ft_log_set_sink(NULL, NULL);
    unsetenv(env);
    ft_env_reload();
    free(clean);
    close_fixture(&f);
}

/* The CPU executor's watchdog: a worker of the 3rd executor call stalls. */
TEST(hung_executor_step_fails_its_request_and_the_next_one_is_served) {
    hung_step_case("FT_TEST_EXEC_STALL", "3:1500:200", "cpu executor");
}

/* The CPU forward's watchdog over its own pool jobs: a worker of the 3rd watched pool job after
 * the engine's init (the first step's v projection of layer 0) holds its task. */
TEST(hung_forward_pool_job_fails_its_request_and_the_next_one_is_served) {
    hung_step_case("FT_TEST_POOL_STALL", "3:1500:200", "cpu forward");
}

/* The same with the worker wedged before its task's first line (-MS): it has read nothing of
 * the job's context when the step is abandoned, and reads the pool's copy when it wakes. The
 * rest of the abandoned step touches neither the job's inputs nor its outputs (each op of
 * engine/forward.c stops right after an abandoned job), so this runs under ThreadSanitizer
 * too (make tsan): the late task's writes race with nothing. */
TEST(forward_pool_task_wedged_before_it_starts_fails_its_request_only) {
    hung_step_case("FT_TEST_POOL_STALL", "3:-1500:200", "cpu forward");
}

/* The scheduler's sampling job under its watchdog: two seeded sampled requests (their rows drawn
 * over the pool) and val "2:[-]1500:200" in FT_TEST_SAMPLE_STALL: a worker of the 2nd pool
 * sampling job stalls 1.5 s after its rows, or before it draws them (-MS: it then draws from the
 * samplers of requests that have failed, which the scheduler keeps until it is back). Both
 * requests of that step fail with FT_ERR_BUSY ("sampling ... hung") well before the stall
 * ends, logged once; a request while the worker is still stuck fails after the floor ("still
 * stuck"); once it is back, the same scheduler gives both requests exactly the texts of a run
 * without the fault, twice, and says the worker came back, once. */
static void sample_stall_case(const char *val) {
    struct fixture f;
    EXPECT(open_fixture(&f) == 0);
    int32_t ids[2][128];
    struct ft_req_params p[2];
    for (int i = 0; i < 2; i++) p[i] = greedy(ids[i], case_prompt(&f, i, ids[i]), 10), p[i].ignore_eos = 1;
    p[0].sampling.temperature = 0.8f, p[0].sampling.top_p = 0.9f, p[0].sampling.seed = 7;
    p[1].sampling.temperature = 1.2f, p[1].sampling.top_k = 5, p[1].sampling.seed = 11;
    struct ft_sched_opts o = {.max_running = 2, .max_prefill = 64, .ctx_size = 128};
    char *clean[2] = {0};
    struct ft_sched *s = NULL;
    struct ft_req *r[2] = {0};
    struct ft_event last = {0};
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    for (int i = 0; s && i < 2; i++) EXPECT_OK(ft_sched_submit(s, &p[i], &r[i]));
    for (int i = 0; i < 2; i++) {
        clean[i] = r[i] ? collect(r[i], &last) : NULL;
        EXPECT_EQ(last.type, FT_EV_DONE);
        if (r[i]) ft_req_release(r[i]), r[i] = NULL;
    }
    ft_sched_free(s);

    pthread_mutex_lock(&g_wd_mu);
    g_wd_who = "sampling", g_wd_hung = g_wd_back = 0;
    pthread_mutex_unlock(&g_wd_mu);
    setenv("FT_TEST_SAMPLE_STALL", val, 1);
    ft_env_reload();
    ft_log_set_sink(wd_sink, NULL);
    s = NULL;
    EXPECT_OK(ft_sched_init(&s, f.m, f.tok, f.pool, &o));
    if (!s) goto done;
    int64_t t0 = ft_time_ns();
    for (int i = 0; i < 2; i++) EXPECT_OK(ft_sched_submit(s, &p[i], &r[i]));
    for (int i = 0; i < 2; i++) {
        last = (struct ft_event){0};
        free(r[i] ? collect(r[i], &last) : NULL);
        EXPECT_EQ(last.type, FT_EV_ERROR);
        EXPECT_EQ(last.status, FT_ERR_BUSY);
        EXPECT_CONTAINS(last.message, "sampling");
        EXPECT_CONTAINS(last.message, "hung");
        if (r[i]) ft_req_release(r[i]), r[i] = NULL;
    }
    const double failed_s = (ft_time_ns() - t0) / 1e9;
    CHECK_(failed_s < 1.2, "%s: the stalled step's requests ended after %.2f s (stall 1.5 s, floor "
           "0.2 s)", val, failed_s);
    /* still stuck: the next step waits at most the floor, then its request fails */
    last = (struct ft_event){0};
    EXPECT_OK(ft_sched_submit(s, &p[0], &r[0]));
    free(r[0] ? collect(r[0], &last) : NULL);
    EXPECT_EQ(last.type, FT_EV_ERROR);
    EXPECT_EQ(last.status, FT_ERR_BUSY);
    EXPECT_CONTAINS(last.message, "still stuck");
    if (r[0]) ft_req_release(r[0]), r[0] = NULL;
    EXPECT((ft_time_ns() - t0) / 1e9 < 1.5);

    usleep((useconds_t)FT_MAX(0, (int)(1700000 - (ft_time_ns() - t0) / 1000)));
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < 2; i++) EXPECT_OK(ft_sched_submit(s, &p[i], &r[i]));
        for (int i = 0; i < 2; i++) {
            last = (struct ft_event){0};
            char *after = r[i] ? collect(r[i], &last) : NULL;
            EXPECT_EQ(last.type, FT_EV_DONE);
            CHECK_(after && clean[i] && !strcmp(after, clean[i]), "%s: request %d after the hang "
                   "(%d): '%s', without the fault '%s'", val, i, rep, after ? after : "",
                   clean[i] ? clean[i] : "");
            free(after);
            if (r[i]) ft_req_release(r[i]), r[i] = NULL;
        }
    }
    ft_sched_free(s);
    pthread_mutex_lock(&g_wd_mu);
    EXPECT_EQ(g_wd_hung, 1);
    EXPECT_EQ(g_wd_back, 1);
    pthread_mutex_unlock(&g_wd_mu);
done:
    ft_log_set_sink(NULL, NULL);
    unsetenv("FT_TEST_SAMPLE_STALL");
    ft_env_reload();
    for (int i = 0; i < 2; i++) free(clean[i]);
    close_fixture(&f);
}

TEST(sampling_task_wedged_before_its_draws_fails_its_step_only) {
    sample_stall_case("2:-1500:200");
}

TEST(sampling_task_wedged_after_its_draws_fails_its_step_only) {
    sample_stall_case("2:1500:200");
}

/* DeepSeek-V4 through the scheduler: prompts past its window and compressors, prefilled in
 * chunks of 5 beside other requests' decode steps (continuous batching), give each request the
 * text it gets alone. */
TEST(v4_batched_requests_same_text_as_alone) {
    const char *dir = FT_TEST_DATA "/models/deepseek_v4";
    struct ft_pool *pool = NULL;
    struct ft_model *m = NULL;
    struct ft_tok *tok = NULL;
    EXPECT(ft_pool_init(&pool, 2) == FT_OK && ft_model_load(dir, &m) == FT_OK && ft_tok_load(dir, &tok) == FT_OK);
    if (!m || !tok) goto done;
    enum { N = 4 };
    int32_t ids[N][40];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 40; j++) ids[i][j] = 3 + (j * (31 + 6 * i) + 7 * i) % (m->vocab - 3);
    char *alone[N] = {0};
    for (int pass = 0; pass < 2; pass++) {
        struct ft_sched_opts o = {.max_running = pass ? 3 : 1, .max_prefill = pass ? 5 : 64, .ctx_size = 64};
        struct ft_sched *s = NULL;
        EXPECT_OK(ft_sched_init(&s, m, tok, pool, &o));
        if (!s) break;
        struct ft_req *r[N] = {0};
        for (int i = 0; i < N; i++) {
            struct ft_req_params p = greedy(ids[i], 28 + 4 * i, 10);
            p.ignore_eos = 1;
            EXPECT_OK(ft_sched_submit(s, &p, &r[i]));
        }
        for (int i = 0; i < N; i++) {
            struct ft_event last = {0};
            char *text = r[i] ? collect(r[i], &last) : NULL;
            EXPECT_EQ(last.type, FT_EV_DONE);
            if (!pass) alone[i] = text;
            else {
                CHECK_(text && alone[i] && !strcmp(text, alone[i]), "request %d batched: '%s', alone '%s'", i,
                       text ? text : "", alone[i] ? alone[i] : "");
                free(text);
            }
            if (r[i]) ft_req_release(r[i]);
        }
        ft_sched_free(s);
    }
    for (int i = 0; i < N; i++) free(alone[i]);
done:
    ft_tok_free(tok);
    ft_model_free(m);
    ft_pool_free(pool);
}

TEST_MAIN("model_sched")
