/* fuzz_tool_parse.c — libFuzzer target for text/tool_parse: the input runs through every
 * family's parser, in one piece and then in pieces of the first byte's size; both must give
 * the same content and calls, every call's arguments are a JSON object, and no text is lost
 * when no call is found. The pieces are read as a stream reads them (server/openai_gen.c, by
 * tool_calls index): each index is named once, the indices named are 0, 1, 2, ... in order,
 * the calls' indices rise, and a call shown live gets arguments pieces that add up to its
 * final arguments, byte for byte. Single-threaded. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tool_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
    char *text;
    size_t n;
    int n_calls;
    char *calls; /* names and args, joined */
};

#define N_IDX 64

/* What a stream has sent under each index (the names and the argument bytes). */
struct sent {
    int n_reported, n_named;
    int named[N_IDX];
    char *args[N_IDX];
    size_t n_args[N_IDX];
};

static void send_args(struct sent *t, int i, const char *a, size_t n) {
    char *q = realloc(t->args[i], t->n_args[i] + n + 1);
    if (!q) abort();
    memcpy(q + t->n_args[i], a, n);
    t->args[i] = q;
    t->n_args[i] += n;
}

static void name_index(struct sent *t, int i) {
    if (t->named[i] || i != t->n_named) abort(); /* named twice, or out of order */
    t->named[i] = 1;
    t->n_named++;
}

static void read_stream(const struct ft_tool_parser *p, struct sent *t) {
    for (; t->n_reported < p->n_calls; t->n_reported++) {
        const struct ft_tool_call *c = &p->calls[t->n_reported];
        const int i = c->index;
        if (t->n_reported && i <= p->calls[t->n_reported - 1].index) abort();
        if (i >= N_IDX) continue;
        const size_t n = strlen(c->args);
        if (!t->named[i]) {
            name_index(t, i);
        } else if (t->n_args[i] > n || memcmp(t->args[i], c->args, t->n_args[i])) {
            abort(); /* what went out is not the start of the final arguments */
        }
        send_args(t, i, c->args + t->n_args[i], n - t->n_args[i]);
    }
    for (int j = 0; j < p->n_live && p->live_index + j < N_IDX; j++) {
        const struct ft_tool_live *l = &p->live[j];
        const int i = p->live_index + j;
        if (l->no_stream || !l->name_done) break;
        if (!t->named[i]) name_index(t, i);
        if (l->n_args < t->n_args[i]) abort(); /* live arguments only grow */
        send_args(t, i, l->args + t->n_args[i], l->n_args - t->n_args[i]);
    }
}

static void run(enum ft_tool_fmt f, const char *s, size_t n, size_t step, struct run *r) {
    struct ft_tool_parser p;
    struct sent t;
    memset(&t, 0, sizeof t);
    ft_tool_parser_init(&p, f, NULL);
    r->text = malloc(n * 2 + 64);
    r->n = 0;
    for (size_t off = 0; off < n;) {
        size_t k = step && step < n - off ? step : n - off;
        ft_tool_parser_push(&p, s + off, k);
        read_stream(&p, &t);
        off += k;
        if (p.n_out) memcpy(r->text + r->n, p.out, p.n_out);
        r->n += p.n_out;
        p.n_out = 0;
    }
    ft_tool_parser_finish(&p);
    read_stream(&p, &t);
    for (int i = 0; i < N_IDX; i++) free(t.args[i]);
    if (p.n_out) memcpy(r->text + r->n, p.out, p.n_out);
    r->n += p.n_out;
    r->n_calls = p.n_calls;
    size_t total = 1;
    for (int i = 0; i < p.n_calls; i++) total += strlen(p.calls[i].name) + strlen(p.calls[i].args) + 2;
    r->calls = calloc(1, total);
    for (int i = 0; i < p.n_calls; i++) {
        json_t *a = json_loads(p.calls[i].args, 0, NULL);
        if (!json_is_object(a)) abort();
        json_decref(a);
        strcat(r->calls, p.calls[i].name);
        strcat(r->calls, "\n");
        strcat(r->calls, p.calls[i].args);
        strcat(r->calls, "\n");
    }
    if (p.oom) abort();
    ft_tool_parser_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    const char *s = (const char *)data;
    size_t step = size ? (data[0] % 7) + 1 : 1;
    for (int f = 0; f < FT_TOOLS_N; f++) {
        struct run a, b;
        run((enum ft_tool_fmt)f, s, size, 0, &a);
        run((enum ft_tool_fmt)f, s, size, step, &b);
        if (a.n_calls != b.n_calls || strcmp(a.calls, b.calls)) abort();
        if (a.n != b.n || memcmp(a.text, b.text, a.n)) abort();
        if (!a.n_calls && (a.n != size || memcmp(a.text, s, size))) abort();
        free(a.text), free(b.text), free(a.calls), free(b.calls);
    }
    return 0;
}
