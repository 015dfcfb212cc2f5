/* cmd_ctl.c — `ft ctl`: talks to a running `ft serve` over a plain HTTP/1.1 socket (no client
 * library): health, stats, models (pretty JSON) and generate (a streamed chat completion whose
 * text is printed as it arrives). Single-threaded. */
#define _GNU_SOURCE /* memmem */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/opts.h"

static const char k_usage[] =
    "usage: ft ctl [--base-url URL] [--api-key KEY] COMMAND\n"
    "  health | stats | models      print the server's JSON answer\n"
    "  generate \"PROMPT\"            stream a chat completion to stdout\n"
    "  --base-url URL               default http://127.0.0.1:1919\n"
    "  --api-key KEY                sent as 'Authorization: Bearer KEY'\n"
    "  -n, --max-tokens N           generate: tokens at most (default 256)\n"
    "  --temp T                     generate: temperature (default: the model's)\n";

struct http_out {
    int status, chunked, in_body;
    char *buf;            /* raw bytes not consumed yet */
    size_t n, cap;
    long chunk_left;      /* chunked: data bytes left; -1 size line, -3 CRLF, -2 finished */
    void (*sink)(void *ctx, const char *p, size_t n);
    void *ctx;
};

static int connect_to(const char *host, const char *port) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *a;
    if (getaddrinfo(host, port, &hints, &res)) return -1;
    int fd = -1;
    for (a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen)) close(fd), fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* Consumes as much of o->buf as possible: headers, then (chunked or plain) body to the sink. */
static void consume(struct http_out *o) {
    size_t i = 0;
    if (!o->in_body) {
        char *e = memmem(o->buf, o->n, "\r\n\r\n", 4);
        if (!e) return;
        *e = 0;
        sscanf(o->buf, "HTTP/%*s %d", &o->status);
        for (char *p = o->buf; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        o->chunked = strstr(o->buf, "transfer-encoding: chunked") != NULL;
        o->in_body = 1, o->chunk_left = -1;
        i = (size_t)(e - o->buf) + 4;
    }
    while (i < o->n) {
        if (!o->chunked) {
            o->sink(o->ctx, o->buf + i, o->n - i);
            i = o->n;
        } else if (o->chunk_left == -1) { /* size line */
            char *e = memmem(o->buf + i, o->n - i, "\r\n", 2);
            if (!e) break;
            long size = strtol(o->buf + i, NULL, 16);
            i = (size_t)(e - o->buf) + 2;
            o->chunk_left = size ? size : -2;
        } else if (o->chunk_left == -3) { /* CRLF after a chunk's data */
            if (o->n - i < 2) break;
            i += 2, o->chunk_left = -1;
        } else if (o->chunk_left == -2) { /* after the last chunk */
            i = o->n;
        } else {
            size_t k = o->n - i < (size_t)o->chunk_left ? o->n - i : (size_t)o->chunk_left;
            o->sink(o->ctx, o->buf + i, k);
            i += k, o->chunk_left -= (long)k;
            if (!o->chunk_left) o->chunk_left = -3;
        }
    }
    memmove(o->buf, o->buf + i, o->n - i);
    o->n -= i;
}

/* Sends one request and streams the response body to o->sink. Returns the HTTP status or -1. */
static int request(const char *base, const char *key, const char *method, const char *path,
                   const char *body, struct http_out *o) {
    char host[256] = "127.0.0.1", port[16] = "1919";
    if (sscanf(base, "http://%255[^:/]:%15[0-9]", host, port) < 1) {
        fprintf(stderr, "ft ctl: --base-url '%s' must look like http://HOST:PORT\n", base);
        return -1;
    }
    int fd = connect_to(host, port);
    if (fd < 0) {
        fprintf(stderr, "ft ctl: cannot connect to %s (is `ft serve` running?)\n", base);
        return -1;
    }
    char hdr[1024];
    int hl = snprintf(hdr, sizeof hdr, "%s %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n%s%s%s\r\n",
                      method, path, host, port, body ? strlen(body) : 0,
                      key ? "Authorization: Bearer " : "", key ? key : "", key ? "\r\n" : "");
    if (write(fd, hdr, (size_t)hl) != hl || (body && write(fd, body, strlen(body)) < 0)) {
        close(fd);
        return -1;
    }
    for (;;) {
        if (o->n + 4096 > o->cap) o->buf = realloc(o->buf, o->cap = (o->cap + 4096) * 2);
        ssize_t k = read(fd, o->buf + o->n, o->cap - o->n - 1);
        if (k <= 0) break;
        o->n += (size_t)k;
        consume(o);
    }
    close(fd);
    free(o->buf);
    return o->status ? o->status : -1;
}

static void sink_collect(void *ctx, const char *p, size_t n) {
    struct http_out *body = ctx; /* reused as a plain buffer */
    body->buf = realloc(body->buf, body->n + n + 1);
    memcpy(body->buf + body->n, p, n);
    body->n += n;
    body->buf[body->n] = 0;
}

/* SSE: prints each chunk's delta text; reasoning goes to stderr. */
static void sink_sse(void *ctx, const char *p, size_t n) {
    struct http_out *acc = ctx;
    sink_collect(acc, p, n);
    char *e;
    while (acc->buf && (e = strstr(acc->buf, "\n\n"))) {
        *e = 0;
        if (!strncmp(acc->buf, "data: ", 6) && strcmp(acc->buf + 6, "[DONE]")) {
            json_t *j = json_loads(acc->buf + 6, 0, NULL);
            json_t *d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
            const char *r = json_string_value(json_object_get(d, "reasoning_content"));
            const char *c = json_string_value(json_object_get(d, "content"));
            const char *err = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
            if (r) fputs(r, stderr);
            if (c) fputs(c, stdout);
            if (err) fprintf(stderr, "\nft ctl: server error: %s\n", err);
            fflush(stdout);
            json_decref(j);
        }
        size_t used = (size_t)(e - acc->buf) + 2;
        memmove(acc->buf, acc->buf + used, acc->n - used + 1);
        acc->n -= used;
    }
}

static int print_json(int status, const char *text) {
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    printf("%s\n", s ? s : text ? text : "");
    free(s);
    json_decref(j);
    return status == 200 ? 0 : 1;
}

int ft_cmd_ctl(int argc, char **argv) {
    const char *base = "http://127.0.0.1:1919", *key = NULL, *cmd = NULL, *prompt = NULL, *temp = NULL;
    double temperature = 0;
    long max_tokens = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return printf("%s", k_usage), 0;
        else if (!strcmp(a, "--base-url")) { if (!(base = ft_cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--api-key")) { if (!(key = ft_cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--temp")) {
            if (!(temp = ft_cli_value(argc, argv, &i))) return 2;
            if (ft_cli_double(temp, &temperature) || !(temperature >= 0))
                return ft_cli_usage_error("ctl", "--temp: '%s' is not a temperature >= 0", temp);
        }
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            const char *v = ft_cli_value(argc, argv, &i);
            if (!v || ft_cli_int(v, 1, 1 << 24, &max_tokens))
                return ft_cli_usage_error("ctl", "%s needs a positive number", a);
        } else if (!cmd) cmd = a;
        else if (!prompt) prompt = a;
        else return ft_cli_usage_error("ctl", "unexpected argument '%s'", a);
    }
    const char *path = !cmd ? NULL : !strcmp(cmd, "health") ? "/health"
                     : !strcmp(cmd, "stats") ? "/v1/stats" : !strcmp(cmd, "models") ? "/v1/models"
                     : !strcmp(cmd, "generate") ? "/v1/chat/completions" : NULL;
    if (!path) return ft_cli_usage_error("ctl", "give one of health, stats, models, generate");
    struct http_out acc = {0}, o = {.ctx = &acc};
    if (strcmp(cmd, "generate")) {
        o.sink = sink_collect;
        int st = request(base, key, "GET", path, NULL, &o);
        int rc = st < 0 ? 1 : print_json(st, acc.buf);
        free(acc.buf);
        return rc;
    }
    if (!prompt) return ft_cli_usage_error("ctl", "generate needs a prompt");
    json_t *req = json_pack("{s:[{s:s, s:s}], s:b, s:i}", "messages", "role", "user", "content",
                            prompt, "stream", 1, "max_tokens", (int)max_tokens);
    if (temp) json_object_set_new(req, "temperature", json_real(temperature));
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    o.sink = sink_sse;
    int st = request(base, key, "POST", path, body, &o);
    free(body);
    if (st != 200 && acc.buf) print_json(st, acc.buf);
    else printf("\n");
    free(acc.buf);
    return st == 200 ? 0 : 1;
}
