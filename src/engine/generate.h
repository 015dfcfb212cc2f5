/* generate.h — one sequence's generation loop: prefill (reusing the KV prefix already in the
 * engine), then sample / detokenise / stop-check token by token, streaming text through a
 * callback. Used by `ft run` and `ft chat`. Engine thread only. */
#ifndef FT_ENGINE_GENERATE_H
#define FT_ENGINE_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/forward.h"
#include "engine/sample.h"
#include "text/tokenizer.h"

#define FT_MAX_STOP 8

struct ft_gen_params {
    struct ft_sampling sampling;
    int max_tokens;              /* generated tokens at most */
    const char *stop[FT_MAX_STOP];
    int n_stop;
    int ignore_eos;
    const int32_t *eos;          /* stop token ids */
    int n_eos;
    int keep_special;            /* decode special tokens' text too (a harmony splitter drops it) */
};

enum ft_finish { FT_FINISH_STOP, FT_FINISH_LENGTH, FT_FINISH_CANCELLED };

struct ft_gen_result {
    int n_prompt, n_cached, n_gen;
    enum ft_finish finish;
    double prefill_s, decode_s;
};

/* Receives text as it becomes final (complete UTF-8, not part of a possible stop string).
 * Returns nonzero to cancel. */
typedef int (*ft_gen_emit_fn)(void *ctx, const char *text, size_t len);

/* Stop-string matcher over streamed text: holds back the bytes that could still begin a stop
 * string; reports a match and truncates the text before it. */
struct ft_stop {
    const char *const *strs;
    int n;
    char *held;        /* text not yet released */
    size_t n_held, cap;
    char *out;         /* bytes released by the last push/flush */
    size_t out_cap;
    int matched;       /* index in strs of the stop string that matched; -1 while none has */
};
void ft_stop_init(struct ft_stop *s, const char *const *strs, int n);
void ft_stop_free(struct ft_stop *s);
/* Appends text; sets out and out_len to the bytes now safe to release; returns 1 when a stop
 * string matched (the released bytes end right before it). */
int ft_stop_push(struct ft_stop *s, const char *text, size_t len, const char **out, size_t *out_len);
/* Everything still held (end of generation without a match). */
void ft_stop_flush(struct ft_stop *s, const char **out, size_t *out_len);

/* 1 when id is one of the n stop token ids. */
int ft_eos_has(const int32_t *eos, int n, int32_t id);
/* End of a sequence that ended without a stop string: the detokeniser's held-back bytes go
 * through the stop matcher, and what it still holds is released; emit gets each non-empty
 * run (its return value is ignored: nothing follows). */
void ft_gen_release_tail(struct ft_detok *dt, struct ft_stop *stop, ft_gen_emit_fn emit, void *ctx);

/* The stop token ids of a model: config/generation_config EOS ids plus the tokenizer's EOS.
 * out holds FT_MAX_EOS + 1 ids; returns the count. */
int ft_eos_ids(const struct ft_config *c, const struct ft_tok *tok, int32_t *out);

/* Runs token id at the engine's next position, then the token after it where the engine finds
 * it (*next: the greedy id, or on a GPU backend a device draw for a request without penalties,
 * its uniform taken from smp as ft_sampler_sample would); otherwise *next = -1 and logits hold
 * the row for ft_sampler_sample. */
enum ft_status ft_gen_step(struct ft_engine *e, struct ft_sampler *smp, int32_t id, float *logits,
                           int32_t *next);

/* Runs prompt then generation. The KV cache keeps `ctx_ids` (the tokens it holds, updated
 * here): the longest common prefix with `prompt` is reused, the rest prefilled. */
enum ft_status ft_generate(struct ft_engine *e, const struct ft_tok *tok, const int32_t *prompt,
                           int n_prompt, const struct ft_gen_params *p, ft_gen_emit_fn emit,
                           void *ctx, int32_t *ctx_ids, struct ft_gen_result *res);

#endif
