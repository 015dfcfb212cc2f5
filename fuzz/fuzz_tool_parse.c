/* fuzz_tool_parse.c — libFuzzer target for text/tool_parse: the input runs through every
 * family's parser, in one piece and then in pieces of the first byte's size; both must give
 * the same content and calls, every call's arguments are a JSON object, and no text is lost
 * when no call is found. Single-threaded. */
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

static void run(enum ft_tool_fmt f, const char *s, size_t n, size_t step, struct run *r) {
    struct ft_tool_parser p;
    ft_tool_parser_init(&p, f, NULL);
    r->text = malloc(n * 2 + 64);
    r->n = 0;
    for (size_t off = 0; off < n;) {
        size_t k = step && step < n - off ? step : n - off;
        ft_tool_parser_push(&p, s + off, k);
        off += k;
        if (p.n_out) memcpy(r->text + r->n, p.out, p.n_out);
        r->n += p.n_out;
        p.n_out = 0;
    }
    ft_tool_parser_finish(&p);
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
