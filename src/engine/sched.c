/* sched.c — the serving engine thread: admission from a bounded queue (a request is admitted
 * when its whole KV budget, prompt + max_tokens, fits in the free blocks: no preemption is ever
 * needed), continuous batching (one ft_engine_forward_batch per step over every running
 * sequence: one decode token each, plus prompt chunks up to max_prefill), per-request
 * sampling, detokenisation and stop strings, and events to the HTTP threads.
 * Threading: the engine thread owns the engine, running[] and every request's engine-side
 * fields; s->mu guards the queue, `stopping` and the stats; r->mu guards r's event list. */
#include "engine/sched.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/sys.h"
#include "core/status.h"
#include "core/timer.h"
#include "core/watchdog.h"
#include "engine/prefix.h"

#define N_WINDOW 256 /* requests kept for latency percentiles */
#define N_BUCKETS 10 /* seconds of generated-token history for tok/s */
#define PLP_ROWS 64  /* prompt positions a step scores for prompt_logprobs requests (logit rows
                        on top of one a running request) */

struct ev_node {
    struct ft_event ev;
    struct ev_node *next;
};

struct ft_req {
    struct ft_sched *s;
    atomic_int refs;       /* engine + HTTP side */
    atomic_int cancelled;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ev_node *head, *tail;
    struct ft_req *next;   /* queue link (s->mu) */
    /* engine thread only */
    int32_t *prompt;
    int n_prompt, max_tokens;
    struct ft_req_params p;
    char *stop[FT_MAX_STOP];
    int32_t *blocks;
    int n_blocks, n_past, n_gen, prefilled;
    int32_t *hist;         /* the tokens fed so far: the prompt, then each one generated */
    int n_cached;          /* prompt tokens whose KV came from the prefix cache */
    int bound;             /* hybrid models: its recurrent state is bound to r->blocks */
    int ckpt;              /* hybrid models: the prompt position whose state the prefix cache
                              keeps (its prefill stops there once), 0: none */
    int ackpt;             /* hybrid models: the position of the checkpoint its answer moves
                              along (the last block boundary it ran through), 0: none */
    int stop_hit;          /* a stop string matched: text after it is dropped */
    int admitted;          /* moved from the queue to running */
    int32_t last;
    struct ft_sampler *smp;
    struct ft_detok dt;
    struct ft_stop stopper;
    int64_t t_submit_us, t_first_us;
};

struct ft_sched {
    const struct ft_model *m;
    const struct ft_tok *tok;
    struct ft_pool *pool;
    struct ft_sched_opts o;
    struct ft_engine *e;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ft_req *q_head, *q_tail;
    int n_queued, stopping;
    /* engine thread */
    struct ft_req **running;
    int n_running;
    struct ft_seg *segs;
    struct ft_req **seg_req;
    float *logits;          /* [logit_rows, vocab] */
    int logit_rows;         /* max_running; + PLP_ROWS once a prompt_logprobs request came */
    int32_t *top1;          /* [max_running] greedy ids (steps whose tokens are all greedy) */
    /* engine thread: the sampling job's (see sample_rows) */
    struct sample_set *ss;   /* its context (NULL while lent) */
    struct sample_set *lent; /* lent to an abandoned job whose worker is not back, or NULL */
    struct ft_watchdog swd;  /* its limits and hook (FT_TEST_SAMPLE_STALL) */
    long sample_jobs;        /* pool sampling jobs so far (the hook's K) */
    int32_t eos[FT_MAX_EOS + 1];
    int n_eos;
    /* stats (s->mu) */
    long completed, cancelled, failed, prompt_tokens, gen_tokens;
    double ttft[N_WINDOW], latency[N_WINDOW];
    int n_window, i_window;
    long bucket_tokens[N_BUCKETS];
    long bucket_sec[N_BUCKETS];
    int run_snapshot, kv_used_snapshot;
    struct ft_gpu_offload_stats cache_snapshot; /* refreshed after each step (offload) */
    long prefix_hit, prefix_query; /* prompt tokens found in / looked up in the prefix cache */
    /* engine thread: the prefix cache (NULL: off) and its scratch */
    struct ft_prefix *pc;
    int32_t *pc_tmp;
    int hybrid;             /* the cache's hits need state checkpoints (DeltaNet layers) */
    int has_residency;
    struct ft_residency_stats residency;
};

/* --- events --- */

static void push_event(struct ft_req *r, const struct ft_event *ev) {
    struct ev_node *n = malloc(sizeof *n);
    if (!n) return; /* out of memory: the client sees a shortened stream, never a crash */
    n->ev = *ev;
    n->next = NULL;
    pthread_mutex_lock(&r->mu);
    if (r->tail) r->tail->next = n;
    else r->head = n;
    r->tail = n;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void emit_text(struct ft_req *r, const char *text, size_t len) {
    if (!len) return;
    struct ft_event ev = {.type = FT_EV_TEXT, .len = len, .n_prompt = r->n_prompt, .n_gen = r->n_gen};
    ev.text = malloc(len + 1);
    if (!ev.text) return;
    memcpy(ev.text, text, len);
    ev.text[len] = 0;
    push_event(r, &ev);
}

/* A logprobs request's token: its text (possibly none) and its log-probabilities. */
static void emit_token_lp(struct ft_req *r, const char *text, size_t len,
                          const struct ft_token_lp *lp, int prompt) {
    struct ft_event ev = {.type = FT_EV_TEXT, .len = len, .n_prompt = r->n_prompt, .n_gen = r->n_gen,
                          .prompt = prompt};
    ev.text = malloc(len + 1);
    ev.lp = malloc(sizeof *ev.lp);
    if (!ev.text || !ev.lp) {
        free(ev.text), free(ev.lp);
        return;
    }
    memcpy(ev.text, text, len);
    ev.text[len] = 0;
    *ev.lp = *lp;
    push_event(r, &ev);
}

static int emit_cb(void *r, const char *text, size_t len) {
    emit_text(r, text, len);
    return 0;
}

int ft_req_next_event(struct ft_req *r, struct ft_event *ev, int timeout_ms) {
    pthread_mutex_lock(&r->mu);
    if (!r->head && timeout_ms != 0) {
        if (timeout_ms < 0) {
            while (!r->head) pthread_cond_wait(&r->cv, &r->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            while (!r->head && pthread_cond_timedwait(&r->cv, &r->mu, &ts) == 0) {
            }
        }
    }
    struct ev_node *n = r->head;
    if (n) {
        r->head = n->next;
        if (!r->head) r->tail = NULL;
    }
    pthread_mutex_unlock(&r->mu);
    if (!n) return 0;
    *ev = n->ev;
    free(n);
    return 1;
}

static void req_free(struct ft_req *r) {
    for (struct ev_node *n = r->head, *next; n; n = next) {
        next = n->next;
        free(n->ev.text);
        free(n->ev.lp);
        free(n);
    }
    for (int i = 0; i < FT_MAX_STOP; i++) free(r->stop[i]);
    free(r->prompt);
    free(r->blocks);
    free(r->hist);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void ft_req_release(struct ft_req *r) {
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) req_free(r);
}

void ft_req_cancel(struct ft_req *r) {
    if (!r) return;
    atomic_store(&r->cancelled, 1);
    pthread_mutex_lock(&r->s->mu);
    pthread_cond_broadcast(&r->s->cv); /* wake an idle engine so it drops the request */
    pthread_mutex_unlock(&r->s->mu);
}

/* --- engine side --- */

/* Blocks only the prefix cache holds (evictable). */
static int cache_only_blocks(struct ft_sched *s) {
    if (!s->pc) return 0;
    int k = ft_prefix_blocks(s->pc, s->pc_tmp), n = 0; /* a count: no order needed */
    for (int i = 0; i < k; i++) n += ft_engine_kv_refs(s->e, s->pc_tmp[i]) == 1;
    return n;
}

/* KV positions the running requests hold (what the prefix cache alone keeps is reusable) */
static int kv_used_tokens(struct ft_sched *s) {
    return (ft_engine_kv_total_blocks(s->e) - ft_engine_kv_free_blocks(s->e) - cache_only_blocks(s)) *
           FT_KV_BLOCK;
}

static void record_done(struct ft_sched *s, struct ft_req *r, int outcome /* 0 ok 1 cancel 2 fail */) {
    int64_t now = ft_time_us();
    pthread_mutex_lock(&s->mu);
    /* the published running count and KV use change before the client can see the last event */
    if (r->admitted) s->run_snapshot--;
    s->kv_used_snapshot = kv_used_tokens(s);
    if (outcome == 0) s->completed++;
    else if (outcome == 1) s->cancelled++;
    else s->failed++;
    s->prompt_tokens += r->n_prompt;
    if (outcome == 0 && r->t_first_us) {
        s->ttft[s->i_window] = (r->t_first_us - r->t_submit_us) / 1e6;
        s->latency[s->i_window] = (now - r->t_submit_us) / 1e6;
        s->i_window = (s->i_window + 1) % N_WINDOW;
        if (s->n_window < N_WINDOW) s->n_window++;
    }
    pthread_mutex_unlock(&s->mu);
}

/* Ends a request: terminal event, engine-side resources back, engine's reference dropped. */
/* --- prefix cache: the full blocks of r's first n tokens (their KV written) indexed, the
 * cache holding a reference on each it did not hold yet --- */
static void prefix_keep(struct ft_sched *s, const struct ft_req *r, int n) {
    if (!s->pc || !r->hist) return;
    int n_full = FT_MIN(n / FT_KV_BLOCK, r->n_blocks);
    int n_add = ft_prefix_insert(s->pc, r->hist, n_full, r->blocks, s->pc_tmp);
    ft_engine_kv_ref(s->e, s->pc_tmp, n_add);
}

/* Free blocks, plus the cached ones only the cache holds (evictable). */
static int kv_available(struct ft_sched *s) { return ft_engine_kv_free_blocks(s->e) + cache_only_blocks(s); }

/* Evicts least recently used cached blocks only the cache holds until `want` blocks are free. */
static void prefix_evict(struct ft_sched *s, int want) {
    if (!s->pc || ft_engine_kv_free_blocks(s->e) >= want) return;
    int k = ft_prefix_lru(s->pc, s->pc_tmp);
    for (int i = 0; i < k && ft_engine_kv_free_blocks(s->e) < want; i++) {
        const int32_t b = s->pc_tmp[i];
        if (ft_engine_kv_refs(s->e, b) != 1) continue; /* a running sequence reads it */
        ft_prefix_remove(s->pc, b);
        ft_engine_kv_free(s->e, &b, 1);
    }
}

/* Hybrid models: where r's prefill leaves a state checkpoint: the last block boundary at least
 * one block before the end of its prompt, so that the chat template's generation suffix (the
 * few tokens that open the answer, rendered otherwise when the next turn resends this one) lies
 * after it; 0: none (the prompt is too short, or the checkpoint there exists: a reused one). */
static int ckpt_at(const struct ft_sched *s, const struct ft_req *r) {
    if (!s->hybrid || !r->hist) return 0;
    const int b = (r->n_prompt - FT_KV_BLOCK) / FT_KV_BLOCK * FT_KV_BLOCK;
    return b > r->prefilled ? b : 0;
}

/* Hybrid models: the blocks of r's first k * FT_KV_BLOCK positions indexed, and r's recurrent
 * state (the state after those positions) kept on the entry of the block that ends there (which
 * may be another request's with the same tokens), in the buffer of the checkpoint at block
 * boundary from_k when it has one (ft_prefix_state_move; from_k 0: none). 1: kept; 0: out of
 * budget or memory, no checkpoint and nothing else changed; -1: the blocks could not be
 * indexed. */
static int keep_state(struct ft_sched *s, struct ft_req *r, int k, int from_k) {
    prefix_keep(s, r, k * FT_KV_BLOCK);
    if (ft_prefix_match(s->pc, r->hist, k, s->pc_tmp) != k) return -1;
    const int32_t b = s->pc_tmp[k - 1];
    void *buf = ft_prefix_state_move(s->pc, from_k > 0 && from_k < k ? s->pc_tmp[from_k - 1] : -1, b);
    if (!buf) return 0;
    if (ft_engine_state_save(s->e, r->blocks, buf) != FT_OK) {
        ft_log_warn("prefix cache: no state checkpoint at position %d: %s", k * FT_KV_BLOCK, ft_error());
        ft_prefix_state_drop(s->pc, b);
        return 0;
    }
    return 1;
}

/* r's prefill just reached r->ckpt: its state kept there for the next turn. */
static void take_ckpt(struct ft_sched *s, struct ft_req *r) {
    const int k = r->ckpt / FT_KV_BLOCK;
    r->ckpt = 0;
    keep_state(s, r, k, 0);
}

/* r just ran through a block boundary after its prompt (n_past, a multiple of FT_KV_BLOCK):
 * its state kept there, in the buffer r kept at its previous boundary. So when r ends (done,
 * stopped, cancelled) a checkpoint sits on the last boundary its KV blocks cover, exactly the
 * state after those tokens: the next turn, which resends this answer, restores it and prefills
 * only its new tokens. One copy of the state per FT_KV_BLOCK tokens decoded. */
static void take_answer_ckpt(struct ft_sched *s, struct ft_req *r) {
    const int kept = keep_state(s, r, r->n_past / FT_KV_BLOCK, r->ackpt / FT_KV_BLOCK);
    if (kept >= 0) r->ackpt = kept ? r->n_past : 0;
}

static void finish(struct ft_sched *s, struct ft_req *r, enum ft_finish why, enum ft_status err,
                   const char *msg) {
    struct ft_event ev = {.n_prompt = r->n_prompt, .n_gen = r->n_gen, .finish = why,
                          .n_cached = r->n_cached, .stop_index = -1};
    if (err != FT_OK) {
        ev.type = FT_EV_ERROR;
        ev.status = err;
        snprintf(ev.message, sizeof ev.message, "%s", msg ? msg : ft_status_str(err));
    } else {
        ev.type = FT_EV_DONE;
        if (why != FT_FINISH_CANCELLED && !r->stop_hit) ft_gen_release_tail(&r->dt, &r->stopper, emit_cb, r);
        if (why == FT_FINISH_STOP) /* the tail may have completed a stop string too */
            ev.stop_index = r->stopper.matched;
        ev.ttft_s = r->t_first_us ? (r->t_first_us - r->t_submit_us) / 1e6 : 0;
    }
    if (err == FT_OK && r->n_blocks) prefix_keep(s, r, r->n_past); /* the next turn may resend it */
    if (r->n_blocks) ft_engine_kv_free(s->e, r->blocks, r->n_blocks);
    r->n_blocks = 0;
    if (r->bound) ft_engine_state_drop(s->e, r->blocks);
    r->bound = 0;
    ft_sampler_free(r->smp); /* and the mask it holds */
    r->smp = NULL;
    if (r->p.mask.free) r->p.mask.free(r->p.mask.ctx); /* ended before it reached a sampler */
    memset(&r->p.mask, 0, sizeof r->p.mask);
    ft_stop_free(&r->stopper);
    record_done(s, r, err != FT_OK ? 2 : why == FT_FINISH_CANCELLED ? 1 : 0);
    push_event(r, &ev);
    ft_req_release(r);
}

static int blocks_for(int tokens) { return (tokens + FT_KV_BLOCK - 1) / FT_KV_BLOCK; }

/* Moves queued requests to running while their whole KV budget fits (FIFO). Drops cancelled
 * queued requests. Called with s->mu held. */
static void admit(struct ft_sched *s) {
    for (struct ft_req **pp = &s->q_head; *pp;) {
        struct ft_req *r = *pp;
        if (atomic_load(&r->cancelled)) {
            *pp = r->next;
            s->n_queued--;
            pthread_mutex_unlock(&s->mu);
            finish(s, r, FT_FINISH_CANCELLED, FT_OK, NULL);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        pp = &r->next;
    }
    s->q_tail = NULL;
    for (struct ft_req *r = s->q_head; r; r = r->next) s->q_tail = r;
    while (s->q_head && s->n_running < s->o.max_running) {
        struct ft_req *r = s->q_head;
        int need = blocks_for(r->n_prompt + r->max_tokens);
        if (!r->blocks && !(r->blocks = malloc((size_t)need * sizeof *r->blocks))) {
            s->q_head = r->next, s->n_queued--;
            if (!s->q_head) s->q_tail = NULL;
            pthread_mutex_unlock(&s->mu);
            finish(s, r, FT_FINISH_STOP, FT_ERR_OOM, "scheduler: out of memory");
            pthread_mutex_lock(&s->mu);
            continue;
        }
        /* the prompt's leading full blocks from the prefix cache (its last token is always
         * run: its logits start the answer), held before anything is evicted */
        const int max_hit = (r->n_prompt - 1) / FT_KV_BLOCK;
        const void *state = NULL; /* hybrid: the checkpoint the hit ends on */
        int hit = !s->pc || r->p.prompt_logprobs /* its every position is scored */ ? 0
                  : s->hybrid ? ft_prefix_match_state(s->pc, r->prompt, max_hit, r->blocks, &state)
                              : ft_prefix_match(s->pc, r->prompt, max_hit, r->blocks);
        ft_engine_kv_ref(s->e, r->blocks, hit);
        if (need - hit > kv_available(s)) {
            ft_engine_kv_free(s->e, r->blocks, hit);
            break;
        }
        s->q_head = r->next;
        if (!s->q_head) s->q_tail = NULL;
        s->n_queued--;
        prefix_evict(s, need - hit);
        enum ft_status st = ft_engine_kv_alloc(s->e, need - hit, r->blocks + hit);
        if (st != FT_OK) ft_engine_kv_free(s->e, r->blocks, hit);
        if (st == FT_OK) {
            r->n_blocks = need; /* from here on finish() gives them back */
            /* a hybrid sequence's state found by its own block table: its first blocks may
             * be another running sequence's (the prefix cache) */
            if (s->hybrid && s->pc) st = ft_engine_state_load(s->e, r->blocks, state);
            r->bound = st == FT_OK && s->hybrid && s->pc; /* from here on finish() drops it */
        }
        if (st == FT_OK) {
            r->n_past = r->prefilled = r->n_cached = hit * FT_KV_BLOCK;
            s->prefix_hit += r->n_cached, s->prefix_query += s->pc ? r->n_prompt : 0;
            if (s->pc && !(r->hist = malloc((size_t)(r->n_prompt + r->max_tokens) * sizeof *r->hist)))
                st = ft_fail(FT_ERR_OOM, "scheduler: out of memory");
            if (r->hist) memcpy(r->hist, r->prompt, (size_t)r->n_prompt * sizeof *r->hist);
            r->ckpt = ckpt_at(s, r);
        }
        if (st == FT_OK) st = ft_sampler_init(&r->smp, &r->p.sampling, s->m->vocab);
        if (st == FT_OK && r->p.logprobs) st = ft_sampler_set_logprobs(r->smp, r->p.top_logprobs);
        if (st == FT_OK && r->p.prompt_logprobs && s->logit_rows < s->o.max_running + PLP_ROWS) {
            const int rows = s->o.max_running + PLP_ROWS;
            float *l = realloc(s->logits, (size_t)rows * s->m->vocab * sizeof(float));
            if (l) s->logits = l, s->logit_rows = rows;
            else st = ft_fail(FT_ERR_OOM, "scheduler: out of memory (prompt logprobs)");
        }
        if (st != FT_OK) {
            pthread_mutex_unlock(&s->mu);
            finish(s, r, FT_FINISH_STOP, st, ft_error());
            pthread_mutex_lock(&s->mu);
            continue;
        }
        r->admitted = 1;
        s->run_snapshot++;
        s->kv_used_snapshot = kv_used_tokens(s);
        for (int i = 0; i < r->n_prompt; i++) ft_sampler_add_prompt(r->smp, r->prompt[i]);
        if (r->p.mask.apply) ft_sampler_set_mask(r->smp, &r->p.mask);
        memset(&r->p.mask, 0, sizeof r->p.mask);
        ft_detok_init(&r->dt, s->tok, r->p.skip_special);
        ft_stop_init(&r->stopper, (const char *const *)r->stop, r->p.n_stop);
        s->running[s->n_running++] = r;
    }
}

/* The step's tokens drawn from their logits rows, the rows split over the pool: each request
 * has its own sampler (and RNG), so the draws are those of one thread; a 152k vocab costs
 * ~0.25 ms a row with top-k/top-p (bench_sample), a 1 ms step for 4 sampled requests on one
 * thread.
 *
 * Watchdog ("sampling", core/watchdog.h): the pool job runs under ft_pool_run_until, allowed
 * max(10 s, 50x the learned time of draws of as many rows). Past that it is abandoned: the
 * step fails with FT_ERR_BUSY (its requests: 503), the hang is logged once, and no step starts
 * until the stuck worker is back (sample_ready waits at most the floor, then fails the running
 * requests the same way): the server neither hangs nor dies.
 * Ownership: the job's context is the scheduler's sample set, a heap object holding every
 * pointer its tasks read or write: the logits buffer, each row's sampler and logits row, the
 * tokens drawn. The tasks read nothing else (not s, not the requests). When the job is
 * abandoned with a task still running, the set is lent to that task with the logits buffer
 * (s->logits NULL until it is back; admit may allocate another) and the samplers of its rows
 * (taken from their requests, r->smp NULL, before the requests fail and are freed): the
 * scheduler takes them back, and frees the samplers, only once the pool says no task of the
 * job runs (ft_pool_busy 0: the late task has returned). A set still lent when the scheduler
 * is freed is left allocated rather than freed under the task. */
struct sample_set {
    float *logits;           /* [rows, vocab] f32 (the draws rewrite their rows): s->logits */
    float *own;              /* the logits buffer it holds while lent (NULL otherwise) */
    int vocab, rows;
    struct ft_sampler **smp; /* [max_running] each row's request's sampler */
    int *lrow;               /* [max_running] each row's logits row */
    int32_t *out;            /* [max_running] the tokens drawn */
};

static struct sample_set *sample_set_new(int max_rows) {
    struct sample_set *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->smp = calloc((size_t)max_rows, sizeof *j->smp);
    j->lrow = calloc((size_t)max_rows, sizeof *j->lrow);
    j->out = calloc((size_t)max_rows, sizeof *j->out);
    if (j->smp && j->lrow && j->out) return j;
    free(j->smp), free(j->lrow), free(j->out), free(j);
    return NULL;
}

static void sample_set_free(struct sample_set *j) {
    if (!j) return;
    free(j->own);
    free(j->smp), free(j->lrow), free(j->out), free(j);
}

static void sample_task(void *ctx, int i, int n) {
    const struct sample_set *j = ctx;
    long lo, hi;
    ft_split(j->rows, i, n, &lo, &hi);
    for (long r = lo; r < hi; r++)
        j->out[r] = ft_sampler_sample(j->smp[r], j->logits + (size_t)j->lrow[r] * j->vocab);
}

/* The lent set back from a job whose late task has returned: its samplers (their requests
 * long failed) freed, its logits buffer s->logits again unless admit made another. */
static void sample_take_back(struct ft_sched *s) {
    struct sample_set *j = s->lent;
    for (int r = 0; r < j->rows; r++) ft_sampler_free(j->smp[r]);
    if (!s->logits) s->logits = j->own, j->own = NULL;
    free(j->own);
    j->own = NULL, j->rows = 0;
    s->ss = j, s->lent = NULL;
}

/* The sampling job of the step that began at t0 was abandoned: logged once, the set lent when
 * a task still runs; FT_ERR_BUSY. */
static enum ft_status sample_hung(struct ft_sched *s, int64_t t0, int n_segs, const int *samp) {
    struct sample_set *j = s->ss;
    const double waited = (ft_time_ns() - t0) / 1e9;
    char usual[64];
    ft_watchdog_usual(&s->swd, j->rows, usual, sizeof usual);
    const int stuck = ft_watchdog_abandoned(&s->swd, s->pool);
    if (stuck) { /* (the task still runs: what it reads is its own until it is back) */
        for (int i = 0; i < n_segs; i++)
            if (samp[i]) s->seg_req[i]->smp = NULL; /* in j->smp */
        j->own = s->logits;
        s->logits = NULL;
        s->lent = j, s->ss = NULL;
    }
    ft_log_error("sampling: a step's draws of %d rows hung: a thread-pool task did not finish "
                 "within %.1f s (such draws: %s; the limit is the larger of %g s and %dx that), "
                 "given up after %.1f s; its requests fail%s", j->rows,
                 ft_watchdog_limit_ns(&s->swd, j->rows) / 1e9, usual, s->swd.floor_ns / 1e9,
                 FT_WATCHDOG_X, waited, stuck ? "; no new step starts until its stuck worker returns" : "");
    return ft_fail(FT_ERR_BUSY, "sampling: a step's draws of %d rows hung (a thread-pool task not "
                   "finished, given up after %.1f s; such draws: %s); the request failed, retry "
                   "it; if this repeats, look for an overloaded host (fewer -t threads)",
                   j->rows, waited, usual);
}

/* samp[i]: segment i draws its request's next token from its last logits row; row0[i]: its
 * first row in s->logits. The tokens go to s->top1; FT_ERR_BUSY: the job hung (above). */
static enum ft_status sample_rows(struct ft_sched *s, int n_segs, const int *samp, const int *row0) {
    struct sample_set *j = s->ss; /* (not lent: sample_ready took it back before this step) */
    int rows = 0;
    for (int i = 0; i < n_segs; i++) {
        if (!samp[i]) continue;
        j->lrow[rows] = row0[i] + (s->segs[i].want == FT_LOGITS_ALL ? s->segs[i].n - 1 : 0);
        j->smp[rows++] = s->seg_req[i]->smp;
    }
    j->logits = s->logits, j->vocab = s->m->vocab, j->rows = rows;
    if (s->pool && rows > 1) {
        if (s->swd.stall_k && ++s->sample_jobs == s->swd.stall_k)
            ft_pool_stall_next(s->pool, s->swd.stall_ms); /* the hook (FT_TESTING builds) */
        const int64_t t0 = ft_time_ns();
        if (ft_pool_run_until(s->pool, sample_task, j, t0 + ft_watchdog_limit_ns(&s->swd, rows)) != FT_OK)
            return sample_hung(s, t0, n_segs, samp);
        ft_watchdog_learn(&s->swd, rows, ft_time_ns() - t0);
    } else {
        sample_task(j, 0, 1);
    }
    memcpy(s->top1, j->out, (size_t)rows * sizeof *j->out);
    return FT_OK;
}

/* Before a step: 1 when no abandoned sampling task still runs (a lent set is taken back), else,
 * after waiting at most the floor for it, 0 with the running requests failed (FT_ERR_BUSY,
 * "still stuck") and no step run: nothing of a new step may write the buffers it reads. */
static int sample_ready(struct ft_sched *s) {
    if (!s->lent) return 1;
    if (ft_watchdog_check(&s->swd, s->pool) == FT_OK) {
        sample_take_back(s);
        return 1;
    }
    char msg[sizeof ((struct ft_event *)0)->message];
    snprintf(msg, sizeof msg, "%s", ft_error());
    for (int i = 0; i < s->n_running; i++) finish(s, s->running[i], FT_FINISH_STOP, FT_ERR_BUSY, msg);
    s->n_running = 0;
    return 0;
}

/* A new token id for r (drawn by sample_rows, or the greedy id the engine found); returns 1
 * when r is finished. */
static int take_token(struct ft_sched *s, struct ft_req *r, int32_t id) {
    ft_sampler_accept(r->smp, id);
    if (!r->t_first_us) r->t_first_us = ft_time_us();
    if (!r->p.ignore_eos && ft_eos_has(s->eos, s->n_eos, id)) {
        finish(s, r, FT_FINISH_STOP, FT_OK, NULL);
        return 1;
    }
    r->n_gen++;
    pthread_mutex_lock(&s->mu);
    s->gen_tokens++;
    long sec = (long)(ft_time_us() / 1000000);
    int b = (int)(sec % N_BUCKETS);
    if (s->bucket_sec[b] != sec) s->bucket_sec[b] = sec, s->bucket_tokens[b] = 0;
    s->bucket_tokens[b]++;
    pthread_mutex_unlock(&s->mu);
    char piece[FT_DETOK_CAP];
    const char *out;
    size_t n = ft_detok_push(&r->dt, id, piece, sizeof piece), out_len;
    int hit = ft_stop_push(&r->stopper, piece, n, &out, &out_len);
    const struct ft_token_lp *lp = ft_sampler_last_logprobs(r->smp);
    if (lp) emit_token_lp(r, out, out_len, lp, 0);
    else emit_text(r, out, out_len);
    if (hit) {
        r->stop_hit = 1;
        finish(s, r, FT_FINISH_STOP, FT_OK, NULL);
        return 1;
    }
    if (r->n_gen >= r->max_tokens) {
        finish(s, r, FT_FINISH_LENGTH, FT_OK, NULL);
        return 1;
    }
    r->last = id;
    if (r->hist) r->hist[r->n_prompt + r->n_gen - 1] = id; /* fed at the next step */
    return 0;
}

/* A prompt_logprobs request's chunk g, its rows from row0 of s->logits: the row at prompt
 * position p holds the model's guess for token p + 1, so each known next token gets an event
 * (the chunk's last row, when it ends the prompt, is the first generated token's). */
static void prompt_logprobs(struct ft_sched *s, struct ft_req *r, const struct ft_seg *g, int row0) {
    const int p0 = (int)(g->ids - r->prompt);
    for (int j = 0; j < g->n && p0 + j + 1 < r->n_prompt; j++) {
        struct ft_token_lp lp;
        ft_logprobs_row(s->logits + (size_t)(row0 + j) * s->m->vocab, s->m->vocab,
                        r->prompt[p0 + j + 1], r->p.top_logprobs, &lp);
        emit_token_lp(r, "", 0, &lp, 1);
    }
}

/* struct ft_draw_masks' fill for a step's draws (ctx: each row's sampler): the allow bitmask of
 * a constrained request, which the engine then applies where it draws (on the GPU: on the
 * device, no logits back). */
static void draw_mask(void *ctx, int row, uint32_t *words) {
    struct ft_sampler *const *smp = ctx;
    ft_sampler_mask_bits(smp[row], words);
}

/* One engine step over every running request. */
static void step(struct ft_sched *s) {
    int64_t now = ft_time_us();
    int k = 0, n_segs = 0, budget = s->o.max_prefill;
    for (int i = 0; i < s->n_running; i++) { /* drop cancelled and timed-out requests */
        struct ft_req *r = s->running[i];
        if (atomic_load(&r->cancelled)) {
            finish(s, r, FT_FINISH_CANCELLED, FT_OK, NULL);
        } else if (s->o.request_timeout_s > 0 && now - r->t_submit_us > s->o.request_timeout_s * 1e6) {
            char msg[128];
            snprintf(msg, sizeof msg, "request timed out after %.0f s (--request-timeout)",
                     s->o.request_timeout_s);
            finish(s, r, FT_FINISH_CANCELLED, FT_ERR_BUSY, msg);
        } else {
            s->running[k++] = r;
        }
    }
    s->n_running = k;
    /* the prefill budget shares the step with one token per decoding request */
    int n_decode = 0;
    for (int i = 0; i < s->n_running; i++) n_decode += s->running[i]->prefilled == s->running[i]->n_prompt;
    budget = FT_MIN(budget, ft_engine_max_chunk(s->e) - n_decode);
    /* prompt_logprobs requests: their chunks want every row (at most PLP_ROWS a step in all) */
    int plp_budget = s->logit_rows - s->o.max_running, any_all = 0, rows = 0;
    int samp[s->o.max_running], row0[s->o.max_running];
    for (int i = 0; i < s->n_running; i++) {
        struct ft_req *r = s->running[i];
        struct ft_seg *g = &s->segs[n_segs];
        if (r->prefilled < r->n_prompt) {
            if (budget <= 0 || (r->p.prompt_logprobs && plp_budget <= 0)) continue;
            int n = FT_MIN(r->n_prompt - r->prefilled, budget);
            if (r->ckpt) n = FT_MIN(n, r->ckpt - r->prefilled); /* a chunk ends at the checkpoint */
            if (r->p.prompt_logprobs) n = FT_MIN(n, plp_budget), plp_budget -= n;
            budget -= n;
            const int last = r->prefilled + n == r->n_prompt;
            samp[n_segs] = last && !r->p.prompt_only;
            *g = (struct ft_seg){r->prompt + r->prefilled, n, r->n_past, r->blocks,
                                 r->p.prompt_logprobs ? FT_LOGITS_ALL
                                 : samp[n_segs]       ? FT_LOGITS_LAST
                                                      : FT_LOGITS_NONE};
        } else {
            samp[n_segs] = 1;
            *g = (struct ft_seg){&r->last, 1, r->n_past, r->blocks, FT_LOGITS_LAST};
        }
        any_all |= g->want == FT_LOGITS_ALL;
        row0[n_segs] = rows;
        rows += g->want == FT_LOGITS_ALL ? g->n : g->want == FT_LOGITS_LAST;
        s->seg_req[n_segs++] = r;
    }
    if (n_segs == 0) return;
    /* every token of the step greedy without penalties: only the ids cross back (the argmax on
     * the GPU), not a vocab of logits per request; a step scoring a prompt needs its logits */
    int ids_only = !any_all;
    for (int i = 0; i < n_segs; i++)
        if (samp[i]) ids_only &= ft_sampler_plain_greedy(s->seg_req[i]->smp);
    /* on a GPU backend, steps whose requests have no penalty are drawn on the device too, the
     * grammar-constrained ones among them masked there */
    int draw = !ids_only && !any_all && (s->o.engine_draws > 0 || ft_engine_draws_on_device(s->e));
    for (int i = 0; draw && i < n_segs; i++)
        if (samp[i]) draw &= ft_sampler_engine_drawable(s->seg_req[i]->smp);
    enum ft_status st;
    if (draw) {
        struct ft_draw draws[n_segs];
        struct ft_sampler *row_smp[n_segs];
        int n_draws = 0;
        for (int i = 0; i < n_segs; i++)
            if (samp[i]) {
                row_smp[n_draws] = s->seg_req[i]->smp;
                ft_sampler_engine_draw(row_smp[n_draws], &draws[n_draws]);
                n_draws++;
            }
        const struct ft_draw_masks masks = {draw_mask, row_smp};
        st = ft_engine_forward_batch_draw(s->e, s->segs, n_segs, draws, &masks, s->top1);
    } else {
        st = ft_engine_forward_batch_ex(s->e, s->segs, n_segs, ids_only ? NULL : s->logits,
                                        ids_only ? s->top1 : NULL);
        /* the prompt rows scored before sampling, which rewrites its rows in place */
        for (int i = 0; st == FT_OK && any_all && i < n_segs; i++)
            if (s->segs[i].want == FT_LOGITS_ALL) prompt_logprobs(s, s->seg_req[i], &s->segs[i], row0[i]);
        if (st == FT_OK && !ids_only) st = sample_rows(s, n_segs, samp, row0); /* into s->top1 */
    }
    struct ft_req *keep[s->o.max_running];
    k = 0;
    int row = 0;
    for (int i = 0; i < n_segs; i++) {
        struct ft_req *r = s->seg_req[i];
        const struct ft_seg *g = &s->segs[i];
        if (st != FT_OK) { /* its status kept: a hung CPU step (FT_ERR_BUSY) is a 503, retry */
            finish(s, r, FT_FINISH_STOP, st, ft_error());
            continue;
        }
        r->n_past += g->n;
        if (g->ids != &r->last) r->prefilled += g->n;
        if (r->ckpt && r->prefilled == r->ckpt) take_ckpt(s, r);
        if (g->ids != &r->last && r->prefilled == r->n_prompt) prefix_keep(s, r, r->n_past);
        if (s->hybrid && r->hist && !r->p.prompt_only && r->prefilled == r->n_prompt &&
            r->n_past % FT_KV_BLOCK == 0)
            take_answer_ckpt(s, r); /* before its token is taken: it may end r */
        if (g->ids != &r->last && r->prefilled == r->n_prompt && r->p.prompt_only) {
            finish(s, r, FT_FINISH_LENGTH, FT_OK, NULL); /* max_tokens 0: scored, not answered */
            continue;
        }
        if (samp[i] && take_token(s, r, s->top1[row++])) continue;
        keep[k++] = r;
    }
    /* requests that got no segment this step (prefill budget spent) stay running */
    for (int i = 0; i < s->n_running; i++) {
        int seen = 0;
        for (int j = 0; j < n_segs; j++) seen |= s->seg_req[j] == s->running[i];
        if (!seen) keep[k++] = s->running[i];
    }
    memcpy(s->running, keep, (size_t)k * sizeof *keep);
    s->n_running = k;
}

static void *engine_main(void *arg) {
    struct ft_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        admit(s);
        if (s->stopping) break;
        if (s->n_running == 0) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        if (sample_ready(s)) step(s);
        struct ft_gpu_offload_stats cs;
        ft_engine_offload_stats(s->e, &cs);
        pthread_mutex_lock(&s->mu);
        s->cache_snapshot = cs;
    }
    /* shutdown: everything still queued or running ends as cancelled */
    struct ft_req *q = s->q_head;
    s->q_head = s->q_tail = NULL;
    s->n_queued = 0;
    pthread_mutex_unlock(&s->mu);
    for (struct ft_req *next; q; q = next) {
        next = q->next;
        finish(s, q, FT_FINISH_CANCELLED, FT_OK, NULL);
    }
    for (int i = 0; i < s->n_running; i++) finish(s, s->running[i], FT_FINISH_CANCELLED, FT_OK, NULL);
    s->n_running = 0;
    return NULL;
}

/* b bytes as "63.2 MiB" (K, M or G) into buf[32]. */
static const char *size_str(double b, char *buf) {
    const int u = b >= 1 << 30 ? 3 : b >= 1 << 20 ? 2 : 1;
    snprintf(buf, 32, "%.1f %ciB", b / (double)(1ull << (10 * u)), "KMG"[u - 1]);
    return buf;
}

enum ft_status ft_sched_init(struct ft_sched **out, const struct ft_model *m,
                             const struct ft_tok *tok, struct ft_pool *pool,
                             const struct ft_sched_opts *o) {
    *out = NULL;
    struct ft_sched *s = calloc(1, sizeof *s);
    if (!s) return ft_fail(FT_ERR_OOM, "scheduler: out of memory");
    s->m = m;
    s->tok = tok;
    s->pool = pool;
    s->o = *o;
    if (s->o.max_running <= 0) s->o.max_running = 4;
    if (s->o.max_prefill <= 0) s->o.max_prefill = 2048;
    int model_ctx = m->cfg.max_position_embeddings > 0 ? m->cfg.max_position_embeddings : 4096;
    if (s->o.ctx_size <= 0) s->o.ctx_size = FT_MIN(model_ctx, 32768);
    if (s->o.kv_tokens <= 0) s->o.kv_tokens = s->o.ctx_size * s->o.max_running;
    if (s->o.queue_cap <= 0) s->o.queue_cap = 64;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->n_eos = ft_eos_ids(&m->cfg, tok, s->eos);
    struct ft_engine_opts eo = s->o.engine;
    eo.max_ctx = s->o.ctx_size;
    eo.max_chunk = s->o.max_prefill + s->o.max_running;
    eo.kv_tokens = s->o.kv_tokens;
    enum ft_status st = ft_engine_init(&s->e, m, pool, &eo);
    if (st == FT_OK && s->o.max_running > ft_engine_max_seqs(s->e)) {
        ft_log_warn("--max-running-requests %d lowered to %d: the %s backend decodes at most that "
                    "many sequences a step", s->o.max_running, ft_engine_max_seqs(s->e),
                    ft_engine_backend(s->e));
        s->o.max_running = ft_engine_max_seqs(s->e);
    }
    s->running = calloc((size_t)s->o.max_running, sizeof *s->running);
    s->segs = calloc((size_t)s->o.max_running, sizeof *s->segs);
    s->seg_req = calloc((size_t)s->o.max_running, sizeof *s->seg_req);
    s->logits = malloc((size_t)s->o.max_running * m->vocab * sizeof(float));
    s->logit_rows = s->o.max_running;
    s->top1 = calloc((size_t)s->o.max_running, sizeof *s->top1);
    s->ss = sample_set_new(s->o.max_running);
    ft_watchdog_init(&s->swd, "sampling", "an overloaded host (fewer -t threads)", FT_ENV_TEST_SAMPLE_STALL);
    if (st == FT_OK && (!s->running || !s->segs || !s->seg_req || !s->logits || !s->top1 || !s->ss))
        st = ft_fail(FT_ERR_OOM, "scheduler: out of memory");
    const size_t ckpt_bytes = st == FT_OK ? ft_engine_state_bytes(s->e) : 0;
    const long long ckpt_mem = s->o.prefix_state_mem ? s->o.prefix_state_mem : FT_PREFIX_STATE_MEM;
    s->hybrid = m->n_gdn > 0;
    if (st == FT_OK && s->o.prefix_cache >= 0 && !m->v4 &&
        (!s->hybrid || (ckpt_mem > 0 && (size_t)ckpt_mem >= ckpt_bytes))) {
        const int nb = ft_engine_kv_total_blocks(s->e);
        st = ft_prefix_init(&s->pc, nb);
        if (st == FT_OK && !(s->pc_tmp = malloc((size_t)nb * sizeof *s->pc_tmp)))
            st = ft_fail(FT_ERR_OOM, "scheduler: out of memory");
        char b1[32], b2[32];
        if (st == FT_OK && s->hybrid) {
            ft_prefix_set_states(s->pc, ckpt_bytes, (size_t)ckpt_mem);
            ft_log_info("prefix cache: on for %s (hybrid) with recurrent-state checkpoints of %s, "
                        "%d at most in --prefix-state-mem %s", m->arch->name, size_str(ckpt_bytes, b1),
                        ft_prefix_max_states(s->pc), size_str((double)ckpt_mem, b2));
        }
    } else if (st == FT_OK && s->o.prefix_cache >= 0 && m->v4) {
        ft_log_info("prefix cache: off for %s (its sliding windows and compressors keep a state "
                    "per sequence, not per KV block)", m->arch->name);
    } else if (st == FT_OK && s->o.prefix_cache >= 0) {
        char b1[32], b2[32];
        ft_log_info("prefix cache: off for %s (a recurrent-state checkpoint takes %s, "
                    "--prefix-state-mem allows %s)", m->arch->name, size_str(ckpt_bytes, b1),
                    size_str(ckpt_mem > 0 ? (double)ckpt_mem : 0, b2));
    }
    if (st == FT_OK && pthread_create(&s->thread, NULL, engine_main, s) != 0)
        st = ft_fail(FT_ERR_INTERNAL, "scheduler: cannot start the engine thread");
    if (st != FT_OK) {
        ft_sched_free(s);
        return st;
    }
    s->has_residency = ft_engine_residency_stats(s->e, &s->residency);
    s->thread_started = 1;
    ft_log_info("scheduler: backend %s, %d running requests at most, context %d, KV pool %d "
                "tokens (%.2f GiB), prefill chunks of %d", ft_engine_backend(s->e), s->o.max_running, s->o.ctx_size,
                s->o.kv_tokens, 2.0 * m->n_layers * s->o.kv_tokens * m->n_kv_heads * m->head_dim * 4 / 1073741824.0,
                s->o.max_prefill);
    *out = s;
    return FT_OK;
}

void ft_sched_shutdown(struct ft_sched *s) {
    if (!s || !s->thread_started) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->thread_started = 0;
}

void ft_sched_free(struct ft_sched *s) {
    if (!s) return;
    ft_sched_shutdown(s);
    ft_prefix_free(s->pc);
    free(s->pc_tmp);
    ft_engine_free(s->e);
    free(s->running);
    free(s->segs);
    free(s->seg_req);
    free(s->logits);
    free(s->top1);
    /* a sampling task of an abandoned step still running reads the lent set: freed only once
     * it is back (a last wait of at most the floor), else left allocated */
    if (s->lent && ft_pool_drain(s->pool, ft_time_ns() + s->swd.floor_ns) == FT_OK) {
        s->logits = NULL;
        sample_take_back(s);
        free(s->logits);
    }
    if (s->lent)
        ft_log_warn("sampling: a worker is still stuck in an abandoned step; its buffers are left "
                    "allocated");
    sample_set_free(s->ss);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

enum ft_status ft_sched_submit(struct ft_sched *s, const struct ft_req_params *p,
                               struct ft_req **out) {
    *out = NULL;
    if (p->n_prompt <= 0) return ft_fail(FT_ERR_INVALID_ARG, "prompt is empty");
    if (p->n_prompt >= s->o.ctx_size)
        return ft_fail(FT_ERR_INVALID_ARG, "prompt is %d tokens but the context is %d "
                       "(shorten the prompt or start the server with a larger --ctx-size)",
                       p->n_prompt, s->o.ctx_size);
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->m->vocab)
            return ft_fail(FT_ERR_INVALID_ARG, "token id %d out of range [0, %d)", p->prompt[i],
                           s->m->vocab);
    if (p->n_stop < 0 || p->n_stop > FT_MAX_STOP)
        return ft_fail(FT_ERR_INVALID_ARG, "stop: at most %d strings", FT_MAX_STOP);
    enum ft_status st = ft_sampling_validate(&p->sampling);
    if (st != FT_OK) return st;
    int room = s->o.ctx_size - p->n_prompt;
    int max_tokens = p->prompt_only ? 0 : p->max_tokens > 0 ? FT_MIN(p->max_tokens, room) : room;
    if (blocks_for(p->n_prompt + max_tokens) > ft_engine_kv_total_blocks(s->e))
        return ft_fail(FT_ERR_INVALID_ARG, "prompt %d + max_tokens %d tokens can never fit the "
                       "KV cache of %d tokens (lower max_tokens or raise --kv-tokens)",
                       p->n_prompt, max_tokens, ft_engine_kv_total_blocks(s->e) * FT_KV_BLOCK);
    struct ft_req *r = calloc(1, sizeof *r);
    if (!r) return ft_fail(FT_ERR_OOM, "out of memory");
    r->s = s;
    atomic_init(&r->refs, 2);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->p = *p;
    r->p.prompt = NULL;
    memset(&r->p.mask, 0, sizeof r->p.mask); /* taken over only once queued */
    r->n_prompt = p->n_prompt;
    r->max_tokens = max_tokens;
    r->prompt = malloc((size_t)p->n_prompt * sizeof *r->prompt);
    int oom = !r->prompt;
    for (int i = 0; i < p->n_stop; i++) oom |= !(r->stop[i] = strdup(p->stop[i]));
    if (oom) {
        req_free(r);
        return ft_fail(FT_ERR_OOM, "out of memory");
    }
    memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof *r->prompt);
    r->t_submit_us = ft_time_us();
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->n_queued >= s->o.queue_cap) {
        int stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        req_free(r);
        return ft_fail(FT_ERR_BUSY, stopping ? "server is shutting down"
                                             : "too many requests queued (%d); retry later",
                       s->o.queue_cap);
    }
    r->p.mask = p->mask;
    if (s->q_tail) s->q_tail->next = r;
    else s->q_head = r;
    s->q_tail = r;
    s->n_queued++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return FT_OK;
}

int ft_sched_eos(const struct ft_sched *s, const int32_t **ids) {
    *ids = s->eos;
    return s->n_eos;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double q) {
    if (n == 0) return 0;
    double tmp[N_WINDOW];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return tmp[FT_MIN(n - 1, (int)(q * n))];
}

void ft_sched_stats(struct ft_sched *s, struct ft_sched_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->mu);
    out->running = s->run_snapshot;
    out->queued = s->n_queued;
    out->completed = s->completed;
    out->cancelled = s->cancelled;
    out->failed = s->failed;
    out->prompt_tokens = s->prompt_tokens;
    out->generated_tokens = s->gen_tokens;
    long now = (long)(ft_time_us() / 1000000), toks = 0;
    for (int b = 0; b < N_BUCKETS; b++)
        if (s->bucket_sec[b] > now - N_BUCKETS && s->bucket_sec[b] <= now) toks += s->bucket_tokens[b];
    out->gen_tok_per_s = (double)toks / N_BUCKETS;
    out->ttft_p50_s = pct(s->ttft, s->n_window, 0.5);
    out->ttft_p95_s = pct(s->ttft, s->n_window, 0.95);
    out->latency_p50_s = pct(s->latency, s->n_window, 0.5);
    out->latency_p95_s = pct(s->latency, s->n_window, 0.95);
    out->kv_used_tokens = s->kv_used_snapshot;
    out->kv_total_tokens = ft_engine_kv_total_blocks(s->e) * FT_KV_BLOCK;
    out->max_running = s->o.max_running;
    out->ctx_size = s->o.ctx_size;
    out->backend = ft_engine_backend(s->e);
    out->cache = s->cache_snapshot;
    out->prefix_hit_tokens = s->prefix_hit;
    out->prefix_query_tokens = s->prefix_query;
    out->has_residency = s->has_residency; /* fixed after load */
    out->residency = s->residency;
    pthread_mutex_unlock(&s->mu);
}
