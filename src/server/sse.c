/* sse.c — byte buffer, SSE framing and the <think> splitter (see sse.h). Called by openai.c;
 * every object is owned by one request's thread. */
#define _GNU_SOURCE /* memmem */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

static const char k_open[] = "<think>", k_close[] = "</think>";

int ft_sbuf_add(struct ft_sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void ft_sbuf_free(struct ft_sbuf *b) {
    free(b->p);
    *b = (struct ft_sbuf){0};
}

int ft_sse_json(struct ft_sbuf *b, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return -1;
    int rc = ft_sbuf_add(b, "data: ", 6) | ft_sbuf_add(b, s, strlen(s)) | ft_sbuf_add(b, "\n\n", 2);
    free(s);
    return rc;
}

void ft_think_init(struct ft_think *t, int in_think, int harmony) {
    *t = (struct ft_think){.state = harmony ? FT_HARMONY_HEADER : in_think ? FT_THINK_IN : FT_THINK_START};
}

void ft_think_free(struct ft_think *t) { ft_sbuf_free(&t->hold); }

/* Longest k < strlen(tag) with s[n-k..n) == tag[0..k). */
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t m = strlen(tag) - 1;
    for (size_t k = n < m ? n : m; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

/* Processes w[0..n) from the current state; returns how many trailing bytes must be held. */
static size_t split(struct ft_think *t, const char *w, size_t n, struct ft_sbuf *r,
                    struct ft_sbuf *c) {
    size_t i = 0;
    while (i < n) {
        if (t->state == FT_THINK_START) {
            size_t j = i;
            while (j < n && (w[j] == ' ' || w[j] == '\n' || w[j] == '\r' || w[j] == '\t')) j++;
            size_t rest = n - j, m = sizeof k_open - 1;
            if (rest >= m && !memcmp(w + j, k_open, m)) {
                t->state = FT_THINK_IN, i = j + m;
            } else if (rest < m && !memcmp(w + j, k_open, rest) && j - i < 64) {
                return n - i; /* maybe "<think>" still to come */
            } else {
                t->state = FT_THINK_CONTENT;
            }
        } else if (t->state == FT_THINK_IN) {
            const char *e = memmem(w + i, n - i, k_close, sizeof k_close - 1);
            if (e) {
                ft_sbuf_add(r, w + i, (size_t)(e - (w + i)));
                i = (size_t)(e - w) + sizeof k_close - 1;
                t->state = FT_THINK_AFTER;
            } else {
                size_t k = partial_tag(w + i, n - i, k_close);
                ft_sbuf_add(r, w + i, n - i - k);
                return k;
            }
        } else if (t->state == FT_THINK_AFTER) {
            while (i < n && (w[i] == '\n' || w[i] == '\r')) i++;
            if (i < n) t->state = FT_THINK_CONTENT;
        } else {
            ft_sbuf_add(c, w + i, n - i);
            i = n;
        }
    }
    return 0;
}

/* Harmony: the earliest of the message-ending markers in w[0..n), its length in *len. */
static const char *harmony_end(const char *w, size_t n, size_t *len) {
    static const char *const k_end[] = {"<|end|>", "<|return|>", "<|call|>"};
    const char *best = NULL;
    for (int i = 0; i < 3; i++) {
        const char *e = memmem(w, n, k_end[i], strlen(k_end[i]));
        if (e && (!best || e < best)) best = e, *len = strlen(k_end[i]);
    }
    return best;
}

/* Bytes at the end of w[0..n) that may begin a "<|...|>" marker. */
static size_t harmony_partial(const char *w, size_t n) {
    for (size_t k = n < 12 ? n : 12; k > 0; k--)
        if (w[n - k] == '<' && (k == 1 || w[n - k + 1] == '|') && !memmem(w + n - k, k, "|>", 2))
            return k;
    return 0;
}

static size_t split_harmony(struct ft_think *t, const char *w, size_t n, struct ft_sbuf *r,
                            struct ft_sbuf *c) {
    static const char k_msg[] = "<|message|>";
    size_t i = 0;
    while (i < n) {
        if (t->state == FT_HARMONY_HEADER) {
            while (i < n && (w[i] == ' ' || w[i] == '\n' || w[i] == '\r' || w[i] == '\t')) i++;
            if (i == n) return 0; /* whitespace between messages: dropped */
            /* a header starts with a marker, or with the recipient right after the prompt's
             * "<|start|>assistant" (" to=functions.NAME<|channel|>...") */
            size_t to = n - i < 3 ? n - i : 3;
            int recipient = !memcmp(w + i, "to=", to);
            if (recipient && to < 3) return n - i;
            if (!recipient && (w[i] != '<' || (i + 1 < n && w[i + 1] != '|'))) {
                t->state = FT_HARMONY_BODY, t->analysis = 0, t->call = 0; /* plain answer */
                continue;
            }
            const char *mk = memmem(w + i, n - i, k_msg, sizeof k_msg - 1);
            if (!mk) return n - i < 512 ? n - i : (ft_sbuf_add(c, w + i, n - i), 0);
            const char *ch = memmem(w + i, (size_t)(mk - (w + i)), "<|channel|>analysis", 19);
            /* a message to a function is a tool call: passed on whole, header included, for
             * the harmony tool-call parser (text/tool_parse.h) */
            t->call = memmem(w + i, (size_t)(mk - (w + i)), "to=functions.", 13) != NULL;
            t->analysis = ch != NULL && !t->call;
            if (t->call) {
                ft_sbuf_add(c, "<|start|>assistant ", recipient ? 19 : 18);
                ft_sbuf_add(c, w + i, (size_t)(mk - (w + i)) + sizeof k_msg - 1);
            }
            t->state = FT_HARMONY_BODY;
            i = (size_t)(mk - w) + sizeof k_msg - 1;
        } else {
            size_t len = 0;
            const char *e = harmony_end(w + i, n - i, &len);
            struct ft_sbuf *out = t->analysis ? r : c;
            if (!e) {
                size_t k = harmony_partial(w + i, n - i);
                ft_sbuf_add(out, w + i, n - i - k);
                return k;
            }
            ft_sbuf_add(out, w + i, (size_t)(e - (w + i)));
            if (t->call) ft_sbuf_add(c, "<|call|>", 8);
            i = (size_t)(e - w) + len;
            t->state = FT_HARMONY_HEADER, t->call = 0;
        }
    }
    return 0;
}

void ft_think_push(struct ft_think *t, const char *s, size_t n, struct ft_sbuf *r,
                   struct ft_sbuf *c) {
    if (t->state == FT_THINK_CONTENT && !t->hold.n) {
        ft_sbuf_add(c, s, n);
        return;
    }
    struct ft_sbuf w = t->hold;
    t->hold = (struct ft_sbuf){0};
    if (ft_sbuf_add(&w, s, n)) return;
    size_t k = t->state >= FT_HARMONY_HEADER ? split_harmony(t, w.p, w.n, r, c)
                                             : split(t, w.p, w.n, r, c);
    if (k) ft_sbuf_add(&t->hold, w.p + w.n - k, k);
    ft_sbuf_free(&w);
}

void ft_think_flush(struct ft_think *t, struct ft_sbuf *r, struct ft_sbuf *c) {
    int reasoning = t->state == FT_THINK_IN || (t->state == FT_HARMONY_BODY && t->analysis);
    /* a header cut short ("<|channel|>ana") is dropped; anything else held is text */
    int cut_header = t->state == FT_HARMONY_HEADER && t->hold.n >= 2 && !memcmp(t->hold.p, "<|", 2);
    if (t->hold.n && !cut_header) ft_sbuf_add(reasoning ? r : c, t->hold.p, t->hold.n);
    if (t->state == FT_HARMONY_BODY && t->call) ft_sbuf_add(c, "<|call|>", 8); /* stop token */
    t->hold.n = 0, t->call = 0;
}
