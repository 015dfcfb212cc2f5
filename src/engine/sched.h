/* sched.h — the serving engine: one engine thread owns the model, the paged KV cache and the
 * scheduler; requests arrive from HTTP threads through a bounded queue and leave as events on
 * a per-request channel. Continuous batching: every step runs ONE forward over all running
 * sequences (decode tokens plus at most one chunk of prefill), up to max_running sequences.
 * Threading: ft_sched_submit / ft_req_* / ft_sched_stats may be called from any thread;
 * everything else in the engine runs on the engine thread. */
#ifndef FT_ENGINE_SCHED_H
#define FT_ENGINE_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "engine/generate.h"
#include "engine/gpu.h"
#include "mem/residency.h"
#include "engine/sample.h"
#include "model/model.h"
#include "text/tokenizer.h"

struct ft_sched_opts {
    int max_running;      /* sequences decoded together (default 4) */
    int max_prefill;      /* prompt tokens per step (chunked prefill; default 2048 on CPU) */
    int ctx_size;         /* positions one request may use at most (default: model's, <= 32768) */
    int kv_tokens;        /* KV positions in the paged pool for all requests (default ctx_size *
                             max_running, capped by available memory) */
    int queue_cap;        /* waiting requests before submit answers FT_ERR_BUSY (default 64) */
    double request_timeout_s; /* 0 = none: a request running longer is cancelled */
    int engine_draws;     /* 1: steps without penalties drawn by the engine on any backend;
                             0: on a GPU backend (unless FT_ENGINE_DRAW=0) */
    int prefix_cache;     /* 0 (default): on (but for DeepSeek-V4); -1: off (--no-prefix-cache) */
    long long prefix_state_mem; /* hybrid models: host bytes for the prefix cache's recurrent-
                                   state checkpoints (0: FT_PREFIX_STATE_MEM; < 0: none, their
                                   prefix cache off; --prefix-state-mem) */
    struct ft_engine_opts engine; /* backend fields only (backend, device, vram_limit, ...);
                                     the scheduler sets the sizes */
};

/* The default checkpoint budget: 1 GiB, 16 checkpoints of Qwen3.6-35B-A3B (30 DeltaNet layers,
 * 63 MiB each): the latest turn of as many agent conversations. */
#define FT_PREFIX_STATE_MEM (1LL << 30)

struct ft_req_params {
    const int32_t *prompt;  /* copied at submit */
    int n_prompt;
    struct ft_sampling sampling;
    int max_tokens;         /* <= 0: up to the context */
    const char *stop[FT_MAX_STOP]; /* copied at submit */
    int n_stop;
    int ignore_eos;
    int skip_special;       /* detokenisation skips special tokens (default 1) */
    struct ft_logit_mask mask; /* optional token constraint (apply NULL: none); a successful
                                  submit takes it over (freed when the request ends); on a
                                  failed submit the caller still owns it */
    int logprobs;           /* 1: each generated token comes with its log-probabilities (an
                               FT_EV_TEXT event per token, its text possibly empty) */
    int top_logprobs;       /* with logprobs: alternatives per token (0..FT_MAX_TOP_LOGPROBS) */
    int prompt_logprobs;    /* 1: prompt tokens 1 .. n_prompt-1 each come as an FT_EV_TEXT event
                               (empty text, .prompt set) with its log-probabilities under the
                               model given the tokens before it (raw logits, top_logprobs
                               alternatives); such a request skips the prefix cache */
    int prompt_only;        /* 1: the request ends after its prompt (FT_FINISH_LENGTH, nothing
                               generated: max_tokens 0) */
};

enum ft_ev_type { FT_EV_TEXT, FT_EV_DONE, FT_EV_ERROR };

struct ft_event {
    enum ft_ev_type type;
    char *text;             /* FT_EV_TEXT: new text (complete UTF-8); caller frees */
    size_t len;
    struct ft_token_lp *lp; /* FT_EV_TEXT of a logprobs request: the token it came from (its
                               text may be empty or held back); caller frees; else NULL */
    int prompt;             /* FT_EV_TEXT with lp: 1 when lp is a prompt token's (prompt_logprobs) */
    int n_prompt, n_gen;    /* tokens so far (usage) */
    enum ft_finish finish;  /* FT_EV_DONE */
    enum ft_status status;  /* FT_EV_ERROR */
    char message[256];      /* FT_EV_ERROR: one line */
    double ttft_s;          /* FT_EV_DONE: time to first token */
    int n_cached;           /* prompt tokens whose KV the prefix cache held (usage) */
    int stop_index;         /* FT_EV_DONE: which of the request's stop strings ended it, or -1 */
};

struct ft_sched;
struct ft_req;

/* Starts the engine thread. The model, tokenizer and pool must outlive the scheduler. */
enum ft_status ft_sched_init(struct ft_sched **out, const struct ft_model *m,
                             const struct ft_tok *tok, struct ft_pool *pool,
                             const struct ft_sched_opts *o);
/* Stops accepting, cancels queued and running requests (each gets FT_EV_ERROR / DONE with
 * FT_FINISH_CANCELLED), joins the engine thread. */
void ft_sched_shutdown(struct ft_sched *s);
void ft_sched_free(struct ft_sched *s);

/* Queues a request. Fails at once with FT_ERR_INVALID_ARG when it can never fit (prompt +
 * max_tokens over ctx_size or over the whole KV pool, empty prompt, bad sampling), and
 * FT_ERR_BUSY when the queue is full or the scheduler is shutting down. */
enum ft_status ft_sched_submit(struct ft_sched *s, const struct ft_req_params *p,
                               struct ft_req **out);
/* Next event, waiting up to timeout_ms (-1 = forever). Returns 1 with an event, 0 on timeout.
 * After FT_EV_DONE or FT_EV_ERROR there are no more events. */
int ft_req_next_event(struct ft_req *r, struct ft_event *ev, int timeout_ms);
/* The client went away: the engine drops the request at its next step. */
void ft_req_cancel(struct ft_req *r);
/* The HTTP side is done with the handle (always call once, after cancel or the last event). */
void ft_req_release(struct ft_req *r);

struct ft_sched_stats {
    int running, queued;
    long completed, cancelled, failed;
    long prompt_tokens, generated_tokens;
    double gen_tok_per_s;       /* over the last ~10 s */
    double ttft_p50_s, ttft_p95_s, latency_p50_s, latency_p95_s; /* last 256 requests */
    int kv_used_tokens, kv_total_tokens;
    int max_running, ctx_size;
    const char *backend;        /* "cpu", "cuda", "offload" */
    struct ft_gpu_offload_stats cache; /* offload: expert cache (cache.active == 0 otherwise) */
    long prefix_hit_tokens, prefix_query_tokens; /* prompt tokens found in / looked up in the
                                                    prefix cache */
    int has_residency;          /* offload: banks pinned / locked / pageable */
    struct ft_residency_stats residency;
};
void ft_sched_stats(struct ft_sched *s, struct ft_sched_stats *out);
/* The stop token ids the engine ends a request on (read-only; fixed after ft_sched_init). */
int ft_sched_eos(const struct ft_sched *s, const int32_t **ids);

#endif
