/* generate.c — the single-sequence generation loop and the stop-string matcher. */
#include "engine/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/timer.h"

void ft_stop_init(struct ft_stop *s, const char *const *strs, int n) {
    memset(s, 0, sizeof *s);
    s->strs = strs;
    s->n = n;
    s->matched = -1;
}

void ft_stop_free(struct ft_stop *s) {
    free(s->held);
    free(s->out);
    s->held = s->out = NULL;
}

static int grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    char *b = realloc(*buf, need * 2);
    if (!b) return -1;
    *buf = b;
    *cap = need * 2;
    return 0;
}

enum ft_status ft_gen_step(struct ft_engine *e, struct ft_sampler *smp, int32_t id, float *logits,
                           int32_t *next) {
    *next = -1;
    if (ft_sampler_plain_greedy(smp)) return ft_engine_forward_greedy(e, &id, 1, next);
    if (ft_engine_draws_on_device(e) && ft_sampler_engine_drawable(smp)) {
        struct ft_draw d;
        ft_sampler_engine_draw(smp, &d);
        return ft_engine_forward_draw(e, &id, 1, &d, next);
    }
    return ft_engine_forward(e, &id, 1, logits, 0);
}

/* Moves held[0, n) to the output buffer and shifts the rest of held to the front. */
static void release(struct ft_stop *s, size_t n, size_t drop, const char **out, size_t *out_len) {
    memcpy(s->out, s->held, n);
    memmove(s->held, s->held + n + drop, s->n_held - n - drop);
    s->n_held -= n + drop;
    *out = s->out;
    *out_len = n;
}

int ft_stop_push(struct ft_stop *s, const char *text, size_t len, const char **out,
                 size_t *out_len) {
    if (grow(&s->held, &s->cap, s->n_held + len + 1) || grow(&s->out, &s->out_cap, s->n_held + len + 1)) {
        *out = text; /* out of memory: cannot hold back, release as is */
        *out_len = len;
        return 0;
    }
    memcpy(s->held + s->n_held, text, len);
    s->n_held += len;
    s->held[s->n_held] = 0;
    size_t first = s->n_held;
    for (int i = 0; i < s->n; i++) {
        const char *m = strstr(s->held, s->strs[i]);
        if (m && (size_t)(m - s->held) < first) first = (size_t)(m - s->held), s->matched = i;
    }
    if (first < s->n_held) {
        release(s, first, s->n_held - first, out, out_len);
        return 1;
    }
    size_t keep = 0; /* longest tail that is a proper prefix of a stop string */
    for (int i = 0; i < s->n; i++) {
        size_t L = strlen(s->strs[i]);
        for (size_t k = FT_MIN(L ? L - 1 : 0, s->n_held); k > keep; k--)
            if (!memcmp(s->held + s->n_held - k, s->strs[i], k)) {
                keep = k;
                break;
            }
    }
    release(s, s->n_held - keep, 0, out, out_len);
    return 0;
}

void ft_stop_flush(struct ft_stop *s, const char **out, size_t *out_len) {
    if (grow(&s->out, &s->out_cap, s->n_held + 1)) {
        *out = s->held;
        *out_len = s->n_held;
        s->n_held = 0;
        return;
    }
    release(s, s->n_held, 0, out, out_len);
}

int ft_eos_ids(const struct ft_config *c, const struct ft_tok *tok, int32_t *out) {
    int n = 0;
    for (int i = 0; i < c->n_eos && i < FT_MAX_EOS; i++) out[n++] = c->eos_token_ids[i];
    if (ft_tok_eos(tok) >= 0) out[n++] = ft_tok_eos(tok);
    return n;
}

int ft_eos_has(const int32_t *eos, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (eos[i] == id) return 1;
    return 0;
}

void ft_gen_release_tail(struct ft_detok *dt, struct ft_stop *stop, ft_gen_emit_fn emit, void *ctx) {
    char piece[FT_DETOK_CAP];
    size_t n = ft_detok_flush(dt, piece, sizeof piece), out_len;
    const char *out;
    if (!ft_stop_push(stop, piece, n, &out, &out_len)) {
        if (out_len) emit(ctx, out, out_len);
        ft_stop_flush(stop, &out, &out_len);
    }
    if (out_len) emit(ctx, out, out_len);
}

enum ft_status ft_generate(struct ft_engine *e, const struct ft_tok *tok, const int32_t *prompt,
                           int n_prompt, const struct ft_gen_params *p, ft_gen_emit_fn emit,
                           void *ctx, int32_t *ctx_ids, struct ft_gen_result *res) {
    memset(res, 0, sizeof *res);
    res->n_prompt = n_prompt;
    int max_ctx = ft_engine_max_ctx(e), vocab = ft_tok_n_vocab(tok);
    if (n_prompt <= 0) return ft_fail(FT_ERR_INVALID_ARG, "prompt is empty");
    if (n_prompt >= max_ctx)
        return ft_fail(FT_ERR_INVALID_ARG, "prompt is %d tokens but the context holds %d "
                       "(raise --ctx-size or shorten the prompt)", n_prompt, max_ctx);
    struct ft_sampler *smp = NULL;
    struct ft_stop stop;
    ft_stop_init(&stop, p->stop, p->n_stop);
    float *logits = NULL;
    enum ft_status st = ft_sampler_init(&smp, &p->sampling, vocab);
    if (st != FT_OK) goto done;
    logits = malloc((size_t)vocab * sizeof *logits);
    if (!logits) {
        st = ft_fail(FT_ERR_OOM, "out of memory");
        goto done;
    }
    /* reuse the common prefix (at least one token is always recomputed for its logits) */
    int keep = 0, n_past = ft_engine_n_past(e);
    while (keep < n_past && keep < n_prompt - 1 && ctx_ids[keep] == prompt[keep]) keep++;
    keep = ft_engine_truncate(e, keep); /* a hybrid model keeps all of it or none */
    res->n_cached = keep;
    for (int i = 0; i < n_prompt; i++) ft_sampler_add_prompt(smp, prompt[i]);
    int64_t t0 = ft_time_us();
    st = ft_engine_prefill(e, prompt + keep, n_prompt - keep, logits, 0);
    if (st != FT_OK) goto done;
    memcpy(ctx_ids + keep, prompt + keep, (size_t)(n_prompt - keep) * sizeof *prompt);
    int64_t t1 = ft_time_us();
    res->prefill_s = (t1 - t0) / 1e6;
    struct ft_detok dt;
    ft_detok_init(&dt, tok, !p->keep_special);
    char piece[FT_DETOK_CAP];
    res->finish = FT_FINISH_LENGTH;
    int stopped = 0;
    int max_gen = FT_MIN(p->max_tokens, max_ctx - n_prompt);
    int32_t next = -1; /* the engine's token (greedy, or drawn on the GPU), else sample here */
    for (int g = 0; g < max_gen; g++) {
        int32_t id = next >= 0 ? next : ft_sampler_sample(smp, logits);
        ft_sampler_accept(smp, id);
        if (!p->ignore_eos && ft_eos_has(p->eos, p->n_eos, id)) {
            res->finish = FT_FINISH_STOP;
            break;
        }
        res->n_gen++;
        size_t n = ft_detok_push(&dt, id, piece, sizeof piece);
        const char *out;
        size_t out_len;
        int hit = ft_stop_push(&stop, piece, n, &out, &out_len);
        if (out_len && emit(ctx, out, out_len)) {
            res->finish = FT_FINISH_CANCELLED;
            break;
        }
        if (hit) {
            res->finish = FT_FINISH_STOP;
            stopped = 1;
            break;
        }
        if (g + 1 == max_gen) break; /* the last token needs no forward */
        ctx_ids[ft_engine_n_past(e)] = id;
        st = ft_gen_step(e, smp, id, logits, &next);
        if (st != FT_OK) goto done;
    }
    if (res->finish != FT_FINISH_CANCELLED && !stopped) ft_gen_release_tail(&dt, &stop, emit, ctx);
    res->decode_s = (ft_time_us() - t1) / 1e6;
done:
    ft_stop_free(&stop);
    ft_sampler_free(smp);
    free(logits);
    return st;
}
