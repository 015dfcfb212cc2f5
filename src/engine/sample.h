/* sample.h — token sampling: repetition/presence/frequency penalties, temperature, top-k,
 * top-p, min-p, seeded draws. Processing order and semantics follow transformers' logits
 * processors (RepetitionPenalty -> Temperature -> TopK -> TopP -> MinP), with OpenAI-style
 * presence/frequency penalties on generated tokens (as vLLM applies them).
 * One sampler per request; not shared between threads. */
#ifndef FT_ENGINE_SAMPLE_H
#define FT_ENGINE_SAMPLE_H

#include <stdint.h>

#include "backend/draw.h"
#include "ft.h"

struct ft_sampling {
    float temperature;        /* <= 0: greedy (argmax) */
    int top_k;                /* <= 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    float repetition_penalty; /* 1: off; HF rule on prompt + generated tokens */
    float presence_penalty;   /* 0: off; on generated tokens */
    float frequency_penalty;  /* 0: off; on generated tokens */
    uint64_t seed;            /* same seed, same output */
};

/* Defaults: temperature 1, everything else off, seed 0 (meaning: pick one from the clock). */
struct ft_sampling ft_sampling_default(void);
/* Checks ranges; errors name the field (temperature, top_p, ...). */
enum ft_status ft_sampling_validate(const struct ft_sampling *p);

struct ft_sampler;

/* A constraint on the next token (a grammar: text/json_grammar.h): apply sets the logits of the
 * tokens it forbids to -INFINITY, accept advances it by the token chosen, free releases ctx.
 * bits (optional) writes the tokens apply leaves alone as a bitmask (words [(vocab + 31) / 32],
 * bit (id & 31) of words[id >> 5] set: allowed; bits past vocab 0), the same set apply keeps.
 * A sampler holding a mask never lets the engine pick the token on its own through a plain
 * greedy step; with bits it may still have the engine draw it (ft_sampler_engine_drawable:
 * the GPU backends mask on the device), else the logits come back to be masked on the host. */
struct ft_logit_mask {
    void (*apply)(void *ctx, float *logits, int vocab);
    void (*accept)(void *ctx, int32_t id);
    void (*free)(void *ctx);
    void *ctx;
    void (*bits)(void *ctx, uint32_t *words, int vocab);
};

/* Words of an allow bitmask over vocab tokens. */
static inline int ft_mask_words(int vocab) { return (vocab + 31) / 32; }
/* logits[id] = -INFINITY for every id < vocab whose bit in words is clear. */
void ft_mask_apply_bits(float *logits, int vocab, const uint32_t *words);

/* A token's log-probability under the model: log_softmax of the logits the model gave (before a
 * mask, the penalties and the temperature, as vLLM reports them by default), and the n_top most
 * likely tokens, most likely first (ties: the lower id). A -inf (or NaN) one reads -9999, what
 * OpenAI writes for it. */
#define FT_MAX_TOP_LOGPROBS 20
struct ft_token_lp {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[FT_MAX_TOP_LOGPROBS];
    float top_lp[FT_MAX_TOP_LOGPROBS];
};
/* The log-probabilities of row logits [vocab] for token id (id < 0: only the top list). */
void ft_logprobs_row(const float *logits, int vocab, int32_t id, int n_top, struct ft_token_lp *out);

enum ft_status ft_sampler_init(struct ft_sampler **out, const struct ft_sampling *p, int vocab);
void ft_sampler_free(struct ft_sampler *s); /* frees its mask too */
/* Takes over the mask (its free runs in ft_sampler_free); apply runs before the penalties. */
void ft_sampler_set_mask(struct ft_sampler *s, const struct ft_logit_mask *m);
/* n_top >= 0: every ft_sampler_sample records the drawn token's log-probabilities (n_top
 * alternatives, at most FT_MAX_TOP_LOGPROBS); like a mask, this keeps the draws on the host
 * (plain_greedy and engine_drawable answer 0). n_top < 0: off (the default). */
enum ft_status ft_sampler_set_logprobs(struct ft_sampler *s, int n_top);
/* The last draw's record, or NULL when logprobs are off or nothing was drawn yet. */
const struct ft_token_lp *ft_sampler_last_logprobs(const struct ft_sampler *s);
/* Records a prompt token (repetition penalty only) or a generated token (all penalties). */
void ft_sampler_add_prompt(struct ft_sampler *s, int32_t id);
void ft_sampler_accept(struct ft_sampler *s, int32_t id);
/* Applies penalties, temperature and the filters to logits in place (removed tokens become
 * -INFINITY). Exposed for tests against transformers' logits processors. */
void ft_sampler_process(struct ft_sampler *s, float *logits);
/* 1 when the token is the plain argmax of the logits (temperature <= 0, no penalty): the engine
 * may then find it on the device (ft_engine_forward_batch_ex's top1) instead. */
int ft_sampler_plain_greedy(const struct ft_sampler *s);
/* The token drawn from softmax(x / T) with the uniform u in [0, 1): the first position whose
 * running sum of e^(x/T - max) passes u times the total (x is divided by T in place; scratch:
 * [V] floats); T <= 0: ft_argmax. What ft_sampler_sample does for a temperature-only request,
 * and what the GPU backend's draw kernel does on the device. */
int32_t ft_draw_softmax(float *x, int V, float T, double u, float *scratch);
/* 1 for a request the engine can draw itself: no penalty (greedy, or any temperature, top-k,
 * top-p and min-p), no logprobs, and no mask or one with bits. */
int ft_sampler_engine_drawable(const struct ft_sampler *s);
/* Such a request's next draw: its parameters and, for temperature > 0, the next uniform from its
 * RNG (one a token, as ft_sampler_sample takes it); masked when it holds a mask, whose words
 * the engine then asks for (ft_sampler_mask_bits, through struct ft_draw_masks). */
void ft_sampler_engine_draw(struct ft_sampler *s, struct ft_draw *d);
/* The allow bitmask of s's next token into words [ft_mask_words(vocab)]: its mask's bits, or
 * every token when it holds none. The grammar advances only in ft_sampler_accept. */
void ft_sampler_mask_bits(struct ft_sampler *s, uint32_t *words);
/* The token d draws from logits (processed in place): what ft_sampler_sample returns for a
 * request with d's parameters and no penalty whose RNG gives d->u. A masked d expects logits
 * masked already (ft_mask_apply_bits). scratch: any sampler of this vocabulary, for its
 * buffers (its own parameters, RNG and counts are left as they were). */
int32_t ft_sampler_draw_row(struct ft_sampler *scratch, const struct ft_draw *d, float *logits);
/* Processes logits (in place) and draws a token. */
int32_t ft_sampler_sample(struct ft_sampler *s, float *logits);

#endif
