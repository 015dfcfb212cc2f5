/* engine_draws.h — the check that an engine's own draws (ft_engine_forward_batch_draw: on the
 * GPU backends, on the device) equal ft_sampler_draw_row on the logits the same step returns:
 * four sequences (greedy; temperature 0.9; t 0.7 with top-k 20 and top-p 0.8, Qwen's default;
 * t 1.1 with top-p 0.7 and min-p 0.05), over `steps` decode steps (at most 16), each step run
 * twice at the same positions (logits, then draws). Returns the steps at which all four agree.
 * The same rows masked by allow bitmasks (struct ft_draw_masks), and, with ENGINE_DRAWS_GRAMMAR
 * defined, a JSON grammar's constrained generation drawn by the engine against the host
 * sampler's. Header-only: test_model_sched, test_json_grammar (CPU) and test_gpu_model (CUDA)
 * share it. */
#ifndef FT_TEST_ENGINE_DRAWS_H
#define FT_TEST_ENGINE_DRAWS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "engine/sample.h"
#include "test.h"

enum { ENGINE_DRAW_SEQS = 4 };

static inline int engine_draws_agree(struct ft_engine *e, int V, int steps) {
    int32_t blocks[ENGINE_DRAW_SEQS][1], toks[ENGINE_DRAW_SEQS] = {5, 9, 13, 17};
    for (int q = 0; q < ENGINE_DRAW_SEQS; q++) EXPECT_OK(ft_engine_kv_alloc(e, 1, blocks[q]));
    const struct ft_sampling def = ft_sampling_default();
    struct ft_sampler *scratch = NULL;
    EXPECT_OK(ft_sampler_init(&scratch, &def, V));
    float *lg = malloc((size_t)ENGINE_DRAW_SEQS * V * 4);
    int same = 0;
    for (int t = 0; lg && scratch && t < steps && t < 16; t++) {
        struct ft_seg segs[ENGINE_DRAW_SEQS];
        for (int q = 0; q < ENGINE_DRAW_SEQS; q++)
            segs[q] = (struct ft_seg){&toks[q], 1, t, blocks[q], FT_LOGITS_LAST};
        const float u = (float)fmod(0.13 + 0.37 * t, 1.0);
        const struct ft_draw draws[ENGINE_DRAW_SEQS] = {
            {0.0f, 0.0f, 1.0f, 0.0f, 0, 0},
            {0.9f, u, 1.0f, 0.0f, 0, 0},
            {0.7f, 1.0f - u, 0.8f, 0.0f, 20, 0},
            {1.1f, u, 0.7f, 0.05f, 0, 0},
        };
        int32_t ids[ENGINE_DRAW_SEQS], want[ENGINE_DRAW_SEQS];
        EXPECT_OK(ft_engine_forward_batch_ex(e, segs, ENGINE_DRAW_SEQS, lg, NULL));
        for (int r = 0; r < ENGINE_DRAW_SEQS; r++)
            want[r] = ft_sampler_draw_row(scratch, &draws[r], lg + (size_t)r * V);
        EXPECT_OK(ft_engine_forward_batch_draw(e, segs, ENGINE_DRAW_SEQS, draws, NULL, ids)); /* again */
        int all = 1;
        for (int r = 0; r < ENGINE_DRAW_SEQS; r++) {
            all &= ids[r] == want[r];
            toks[r] = want[r];
        }
        same += all;
    }
    for (int q = 0; q < ENGINE_DRAW_SEQS; q++) ft_engine_kv_free(e, blocks[q], 1);
    free(lg);
    ft_sampler_free(scratch);
    return same;
}

/* --- masked draws: the same rows with allow bitmasks (struct ft_draw_masks) --- */

struct engine_masks {
    uint32_t *words; /* [ENGINE_DRAW_SEQS, ft_mask_words(V)] */
    int n_words, fills;
};

static inline void engine_masks_fill(void *ctx, int row, uint32_t *words) {
    struct engine_masks *m = ctx;
    memcpy(words, m->words + (size_t)row * m->n_words, (size_t)m->n_words * 4);
    m->fills++;
}

/* The four rows of engine_draws_agree, each masked: greedy with about half the tokens allowed
 * (never the unmasked argmax), temperature 0.9 with a single token left, Qwen's top-k 20 /
 * top-p 0.8 with 5 tokens left (fewer than k), top-p 0.7 / min-p 0.05 with a third left. The
 * engine's tokens against ft_sampler_draw_row on the same step's logits masked first
 * (ft_mask_apply_bits), and every drawn token allowed. Returns the steps at which all four
 * agree; *fills: how many masks the engine asked for. */
static inline int engine_masked_draws_agree(struct ft_engine *e, int V, int steps, int *fills) {
    int32_t blocks[ENGINE_DRAW_SEQS][1], toks[ENGINE_DRAW_SEQS] = {5, 9, 13, 17};
    for (int q = 0; q < ENGINE_DRAW_SEQS; q++) EXPECT_OK(ft_engine_kv_alloc(e, 1, blocks[q]));
    const struct ft_sampling def = ft_sampling_default();
    struct ft_sampler *scratch = NULL;
    EXPECT_OK(ft_sampler_init(&scratch, &def, V));
    struct engine_masks em = {NULL, ft_mask_words(V), 0};
    em.words = calloc((size_t)ENGINE_DRAW_SEQS * em.n_words, 4);
    float *lg = malloc((size_t)ENGINE_DRAW_SEQS * V * 4);
    uint64_t rng = 77;
    int same = 0;
    for (int t = 0; lg && em.words && scratch && t < steps && t < 16; t++) {
        struct ft_seg segs[ENGINE_DRAW_SEQS];
        for (int q = 0; q < ENGINE_DRAW_SEQS; q++)
            segs[q] = (struct ft_seg){&toks[q], 1, t, blocks[q], FT_LOGITS_LAST};
        const float u = (float)fmod(0.13 + 0.37 * t, 1.0);
        const struct ft_draw draws[ENGINE_DRAW_SEQS] = {
            {0.0f, 0.0f, 1.0f, 0.0f, 0, 1},
            {0.9f, u, 1.0f, 0.0f, 0, 1},
            {0.7f, 1.0f - u, 0.8f, 0.0f, 20, 1},
            {1.1f, u, 0.7f, 0.05f, 0, 1},
        };
        int32_t ids[ENGINE_DRAW_SEQS], want[ENGINE_DRAW_SEQS];
        EXPECT_OK(ft_engine_forward_batch_ex(e, segs, ENGINE_DRAW_SEQS, lg, NULL));
        memset(em.words, 0, (size_t)ENGINE_DRAW_SEQS * em.n_words * 4);
        for (int r = 0; r < ENGINE_DRAW_SEQS; r++) {
            uint32_t *w = em.words + (size_t)r * em.n_words;
            const int top = ft_argmax(lg + (size_t)r * V, V), keep = r == 1 ? 1 : r == 2 ? 5 : 0;
            for (int k = 0; k < keep; k++) { /* a few tokens, spread over the vocabulary */
                const int id = (int)((t * 131 + r * 977 + k * 7919 + 3) % (unsigned)V);
                w[id >> 5] |= 1u << (id & 31);
            }
            for (int i = 0; !keep && i < V; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                if ((rng >> 33) % (r == 0 ? 2 : 3) == 0) w[i >> 5] |= 1u << (i & 31);
            }
            if (r == 0) w[top >> 5] &= ~(1u << (top & 31));
            float *x = lg + (size_t)r * V;
            ft_mask_apply_bits(x, V, w);
            want[r] = ft_sampler_draw_row(scratch, &draws[r], x);
        }
        const struct ft_draw_masks masks = {engine_masks_fill, &em};
        EXPECT_OK(ft_engine_forward_batch_draw(e, segs, ENGINE_DRAW_SEQS, draws, &masks, ids)); /* again */
        int all = 1;
        for (int r = 0; r < ENGINE_DRAW_SEQS; r++) {
            const uint32_t *w = em.words + (size_t)r * em.n_words;
            CHECK_(ids[r] >= 0 && ids[r] < V && (w[ids[r] >> 5] >> (ids[r] & 31) & 1),
                   "step %d row %d: token %d is not allowed by its mask", t, r, ids[r]);
            all &= ids[r] == want[r];
            toks[r] = want[r];
        }
        same += all;
    }
    for (int q = 0; q < ENGINE_DRAW_SEQS; q++) ft_engine_kv_free(e, blocks[q], 1);
    *fills = em.fills;
    free(lg), free(em.words);
    ft_sampler_free(scratch);
    return same;
}

#ifdef ENGINE_DRAWS_GRAMMAR
/* --- a JSON grammar (text/json_grammar.h) as a request's mask, what server/constrain.c builds --- */
#include "text/json_grammar.h"

struct engine_jg {
    const struct ft_jg *g;
    const struct ft_jg_vocab *v;
    struct ft_jg_state st;
    int32_t end;
};

static inline void engine_jg_apply(void *ctx, float *logits, int n) {
    struct engine_jg *m = ctx;
    for (int i = m->v->n_vocab; i < n; i++) logits[i] = -INFINITY;
    ft_jg_mask(m->g, &m->st, m->v, &m->end, 1, logits);
}

static inline void engine_jg_bits(void *ctx, uint32_t *words, int n) {
    struct engine_jg *m = ctx;
    memset(words, 0, (size_t)ft_mask_words(n) * 4);
    ft_jg_allow(m->g, &m->st, m->v, &m->end, 1, words);
}

static inline void engine_jg_accept(void *ctx, int32_t id) {
    struct engine_jg *m = ctx;
    if (id == m->end) return;
    if (id < 0 || id >= m->v->n_vocab || !m->v->bytes[id]) m->st.dead = 1;
    else ft_jg_feed(m->g, &m->st, m->v->bytes[id], m->v->len[id]);
}

static inline void engine_jg_free(void *ctx) { free(ctx); }

/* struct ft_draw_masks' fill for one row: its sampler's bits. */
static inline void engine_jg_row(void *ctx, int row, uint32_t *words) {
    (void)row;
    ft_sampler_mask_bits(ctx, words);
}

/* Up to max tokens after prompt on a fresh sequence of e (vocab V) under grammar g (end: the
 * stop id), sampled by p: by the engine's masked draws (device 1: ft_engine_forward_batch_draw,
 * the masks from ft_sampler_mask_bits, as the scheduler routes a constrained request) or by
 * the host sampler on the logits (device 0: ft_sampler_sample, the mask applied on the host).
 * The ids into out; returns how many (the end id included), -1 on failure; *ok: every token
 * was accepted by g. */

static inline int engine_grammar_run(struct ft_engine *e, int V, const struct ft_jg *g,
                              const struct ft_jg_vocab *v, int32_t end, const struct ft_sampling *p,
                              const int32_t *prompt, int n_prompt, int device, int32_t *out,
                              int max, int *ok) {
    const int n_blocks = (n_prompt + max + FT_KV_BLOCK - 1) / FT_KV_BLOCK;
    int32_t *blocks = malloc((size_t)n_blocks * 4);
    float *lg = malloc((size_t)V * 4);
    struct ft_sampler *smp = NULL;
    struct engine_jg *m = calloc(1, sizeof *m);
    int n = -1;
    *ok = 0;
    if (!blocks || !lg || !m || ft_sampler_init(&smp, p, V) != FT_OK ||
        ft_engine_kv_alloc(e, n_blocks, blocks) != FT_OK) {
        free(m);
        goto done;
    }
    m->g = g, m->v = v, m->end = end;
    ft_jg_start(g, &m->st);
    ft_sampler_set_mask(smp, &(struct ft_logit_mask){engine_jg_apply, engine_jg_accept,
                                                    engine_jg_free, m, engine_jg_bits});
    if (device && !ft_sampler_engine_drawable(smp)) goto freed;
    int32_t tok = 0;
    for (n = 0; n < max; n++) {
        const int first = n == 0;
        struct ft_seg seg = {first ? prompt : &tok, first ? n_prompt : 1,
                             first ? 0 : n_prompt + n - 1, blocks, FT_LOGITS_LAST};
        enum ft_status st;
        if (device) {
            struct ft_draw d;
            ft_sampler_engine_draw(smp, &d);
            const struct ft_draw_masks masks = {engine_jg_row, smp};
            st = ft_engine_forward_batch_draw(e, &seg, 1, &d, &masks, &tok);
        } else {
            st = ft_engine_forward_batch(e, &seg, 1, lg);
            if (st == FT_OK) tok = ft_sampler_sample(smp, lg);
        }
        if (st != FT_OK) {
            fprintf(stderr, "  grammar run: %s\n", ft_error());
            n = -1;
            break;
        }
        out[n] = tok;
        ft_sampler_accept(smp, tok); /* the grammar advances */
        if (tok == end) {
            n++;
            break;
        }
    }
    *ok = n >= 0 && !m->st.dead;
freed:
    ft_engine_kv_free(e, blocks, n_blocks);
done:
    ft_sampler_free(smp);
    free(blocks), free(lg);
    return n;
}
#endif

#endif
