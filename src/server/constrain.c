/* constrain.c — grammar-constrained decoding for the server: the vocabulary as bytes (built once,
 * on the first constrained request) and the struct ft_logit_mask wrapping a compiled grammar for
 * one request. The mask runs on the engine thread (or its CPU pool), one request per mask.
 * Called by openai.c (ft_srv_chat_submit). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "server/openai_impl.h"
#include "text/tok_bytes.h"
#include "text/tool_parse.h"
#include "text/tokenizer.h"

struct mask_ctx {
    struct ft_jg *g;            /* owned */
    const struct ft_jg_vocab *v;
    struct ft_jg_state st;
    int32_t end[FT_MAX_EOS + 1];
    int n_end;
};

/* Special tokens stay out of the grammar's reach, except the tool-call markers of any family
 * (a marker may be a special token: Mistral's [TOOL_CALLS]). */
static const char *bytes_of(void *ctx, int32_t id, size_t *len, int *special) {
    const struct ft_tok *tok = ctx;
    const char *b = ft_tok_bytes(tok, id, len, special);
    if (b && *special) {
        for (int f = 0; f < FT_TOOLS_N; f++)
            for (const char *const *m = ft_tool_fmt_markers(f); *m; m++)
                if (strlen(*m) == *len && !memcmp(*m, b, *len)) *special = 0;
    }
    return b;
}

static const struct ft_jg_vocab *vocab(struct ft_server *s) {
    pthread_mutex_lock(&s->vocab_mu);
    if (!s->vocab_ready &&
        ft_jg_vocab_init(&s->vocab, ft_tok_n_vocab(s->tok), bytes_of, (void *)s->tok) == FT_OK)
        s->vocab_ready = 1;
    pthread_mutex_unlock(&s->vocab_mu);
    return s->vocab_ready ? &s->vocab : NULL;
}

static void m_apply(void *ctx, float *logits, int n) {
    struct mask_ctx *m = ctx;
    if (n < m->v->n_vocab) return; /* cannot happen: the model's vocab covers the tokenizer's */
    for (int i = m->v->n_vocab; i < n; i++) logits[i] = -INFINITY; /* padding ids */
    ft_jg_mask(m->g, &m->st, m->v, m->end, m->n_end, logits);
}

/* The same set as m_apply's, as the engine's allow bitmask (padding ids never allowed). */
static void m_bits(void *ctx, uint32_t *words, int n) {
    struct mask_ctx *m = ctx;
    const int nv = m->v->n_vocab, nw = (n + 31) / 32;
    if (n < nv) { /* cannot happen (m_apply then masks nothing either) */
        memset(words, 0xff, (size_t)nw * sizeof *words);
        if (n & 31) words[nw - 1] = (1u << (n & 31)) - 1;
        return;
    }
    ft_jg_allow(m->g, &m->st, m->v, m->end, m->n_end, words); /* its words, the rest zero */
    const int used = (nv + 31) / 32;
    memset(words + used, 0, (size_t)(nw - used) * sizeof *words);
}

static void m_accept(void *ctx, int32_t id) {
    struct mask_ctx *m = ctx;
    for (int i = 0; i < m->n_end; i++)
        if (m->end[i] == id) return;
    if (id < 0 || id >= m->v->n_vocab || !m->v->bytes[id]) {
        m->st.dead = 1;
        return;
    }
    ft_jg_feed(m->g, &m->st, m->v->bytes[id], m->v->len[id]);
}

static void m_free(void *ctx) {
    struct mask_ctx *m = ctx;
    ft_jg_free(m->g);
    free(m);
}

int ft_srv_mask(struct ft_server *s, struct ft_jg *g, struct ft_logit_mask *out,
                struct ft_http_resp *resp) {
    const struct ft_jg_vocab *v = vocab(s);
    struct mask_ctx *m = v ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        ft_jg_free(g);
        ft_http_error(resp, 500, NULL, "out of memory (grammar vocabulary)");
        return -1;
    }
    m->g = g, m->v = v;
    ft_jg_start(g, &m->st);
    const int32_t *eos;
    int n = ft_sched_eos(s->sched, &eos);
    for (int i = 0; i < n && i < FT_MAX_EOS + 1; i++) m->end[m->n_end++] = eos[i];
    *out = (struct ft_logit_mask){m_apply, m_accept, m_free, m, m_bits};
    return 0;
}

void ft_server_free(struct ft_server *s) {
    if (s->vocab_ready) ft_jg_vocab_free(&s->vocab);
    s->vocab_ready = 0;
    pthread_mutex_destroy(&s->vocab_mu);
}
