/* http.c — the HTTP layer over libmicrohttpd (the only file that includes <microhttpd.h>):
 * thread per connection, body collection with a size limit checked while receiving (the excess
 * is counted and dropped, never buffered), bearer-token auth, CORS, chunked streaming bodies
 * pulled from a callback with disconnect detection, one log line per request.
 * Called by cmd_serve (start/stop) and, per request, calls the handler of server/openai.c.
 * Threading: every connection has its own thread (MHD_USE_THREAD_PER_CONNECTION); the handler and
 * the stream callbacks of a connection run on that thread and may block. struct ft_http is
 * read-only after start. */
#define _GNU_SOURCE
#include "server/http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"

/* Bodies past the limit are drained (so the client reads its 413) up to this many times the limit;
 * past that the connection is dropped. */
#define FT_HTTP_DRAIN_FACTOR 4

struct ft_http {
    struct MHD_Daemon *d;
    struct ft_http_opts o;
    char *host, *api_key, *cors; /* owned copies */
    int port, quiesced;
    ft_http_handler_fn handler;
    void *ctx;
};

/* One request on a connection (MHD's con_cls): created on the first call, freed when done. */
struct ft_http_conn {
    struct ft_http *h;
    struct MHD_Connection *mc;
    int fd;
    char *body;
    size_t len, cap, received;
    int too_large, streaming, status, n_tokens;
    int64_t t0_us;
    char method[16], path[256];
};

/* A streamed response's state, owned by MHD's response object. */
struct stream_wrap {
    struct ft_http *h;
    int fd, gone, ended;
    ft_http_stream_fn fn;
    void *ctx;
    void (*free_fn)(void *ctx);
    int (*tokens_fn)(void *ctx);
    int64_t t0_us;
    char method[16], path[256];
};

static void log_request(const char *method, const char *path, int status, int tokens,
                        int64_t t0_us, const char *note) {
    ft_log_info("%s %s %d %d tok %.0f ms%s", method, path, status, tokens,
                (double)(ft_time_us() - t0_us) / 1e3, note);
}

static int fd_gone(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (fd < 0 || poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return 1;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int ft_http_client_gone(const struct ft_http_conn *c) { return fd_gone(c->fd); }

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "internal_error" : "invalid_request_error";
    }
}

void ft_http_json(struct ft_http_resp *resp, int status, char *text) {
    free(resp->body);
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = text;
    resp->body_len = text ? strlen(text) : 0;
}

void ft_http_error(struct ft_http_resp *resp, int status, const char *param, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:s, s:s, s:s?, s:i}}", "error", "message", msg, "type",
                          error_type(status), "param", param, "code", status);
    char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    ft_http_json(resp, status, text ? text : strdup("{\"error\":{\"message\":\"error\"}}"));
}

/* --- CORS and auth ------------------------------------------------------------------------ */

/* The Access-Control-Allow-Origin value for this request's Origin, or NULL. */
static const char *cors_allow(const struct ft_http *h, struct MHD_Connection *mc) {
    if (!h->cors) return NULL;
    const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
    if (!strcmp(h->cors, "*")) return "*";
    if (!origin) return NULL;
    size_t n = strlen(origin);
    for (const char *p = h->cors; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        while (k && p[0] == ' ') p++, k--;
        while (k && p[k - 1] == ' ') k--;
        if (k == n && !memcmp(p, origin, n)) return origin;
        if (!e) break;
        p = e + 1;
    }
    return NULL;
}

static void add_cors(const struct ft_http *h, struct MHD_Connection *mc, struct MHD_Response *r) {
    const char *allow = cors_allow(h, mc);
    if (!allow) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
    if (strcmp(allow, "*")) MHD_add_response_header(r, "Vary", "Origin");
}

/* Constant-time compare of the bearer token with the configured key. */
static int auth_ok(const struct ft_http *h, struct MHD_Connection *mc) {
    const char *a = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7)) return 0;
    a += 7;
    size_t n = strlen(h->api_key), m = strlen(a);
    unsigned diff = (unsigned)(n != m);
    for (size_t i = 0; i < m; i++) diff |= (unsigned char)a[i] ^ (unsigned char)h->api_key[i % n];
    return diff == 0;
}

/* --- responses ---------------------------------------------------------------------------- */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    struct stream_wrap *w = cls;
    for (;;) {
        ssize_t n = w->fn(w->ctx, buf, max);
        if (n > 0) return n;
        if (n < 0) {
            w->ended = 1;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (fd_gone(w->fd)) {
            w->gone = 1;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    struct stream_wrap *w = cls;
    int tokens = w->tokens_fn ? w->tokens_fn(w->ctx) : 0;
    log_request(w->method, w->path, 200, tokens, w->t0_us, w->gone || !w->ended ? " (client went away)" : "");
    if (w->free_fn) w->free_fn(w->ctx);
    free(w);
}

static struct MHD_Response *make_stream(struct ft_http_conn *c, struct ft_http_resp *resp) {
    struct stream_wrap *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    *w = (struct stream_wrap){.h = c->h, .fd = c->fd, .fn = resp->stream, .ctx = resp->stream_ctx,
                              .free_fn = resp->stream_free, .tokens_fn = resp->stream_tokens,
                              .t0_us = c->t0_us};
    memcpy(w->method, c->method, sizeof w->method);
    memcpy(w->path, c->path, sizeof w->path);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, w, stream_free);
    if (!r) {
        free(w);
        return NULL;
    }
    c->streaming = 1;
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return r;
}

/* Queues resp on the connection; frees what it does not hand to MHD. */
static enum MHD_Result send_resp(struct ft_http_conn *c, struct ft_http_resp *resp) {
    struct MHD_Response *r = NULL;
    if (resp->stream) {
        r = make_stream(c, resp);
        if (!r && resp->stream_free) resp->stream_free(resp->stream_ctx);
    } else {
        r = MHD_create_response_from_buffer(resp->body_len, resp->body ? resp->body : (char *)"",
                                            resp->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (!r) free(resp->body);
    }
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type",
                            resp->content_type ? resp->content_type : "application/json");
    add_cors(c->h, c->mc, r);
    c->status = resp->status ? resp->status : 200;
    c->n_tokens = resp->n_tokens;
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)c->status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_error(struct ft_http_conn *c, int status, const char *msg) {
    struct ft_http_resp resp = {0};
    ft_http_error(&resp, status, NULL, "%s", msg);
    return send_resp(c, &resp);
}

static enum MHD_Result send_preflight(struct ft_http_conn *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    add_cors(c->h, c->mc, r);
    const char *hdrs = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND,
                                                   "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            hdrs ? hdrs : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    c->status = 204;
    enum MHD_Result ok = MHD_queue_response(c->mc, 204, r);
    MHD_destroy_response(r);
    return ok;
}

/* --- request handling --------------------------------------------------------------------- */

static enum MHD_Result dispatch(struct ft_http_conn *c) {
    struct ft_http *h = c->h;
    if (!strcmp(c->method, "OPTIONS") && h->cors) return send_preflight(c);
    if (c->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "request body is over the limit of %zu bytes (raise it with "
                 "ft serve --max-body-mb)", h->o.max_body_bytes);
        return send_error(c, 413, msg);
    }
    if (h->api_key && strcmp(c->path, "/health") && !auth_ok(h, c->mc))
        return send_error(c, 401, "missing or wrong API key: send the header 'Authorization: "
                          "Bearer KEY' with the key given to ft serve --api-key");
    struct ft_http_req req = {.method = c->method, .path = c->path,
                              .body = c->body ? c->body : "", .body_len = c->len, .conn = c};
    struct ft_http_resp resp = {.status = 200};
    /* the connection timeout guards slow uploads, not slow generations */
    MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    h->handler(h->ctx, &req, &resp);
    return send_resp(c, &resp);
}

/* Collects the body: up to the limit into c->body, past it only counted. */
static enum MHD_Result receive(struct ft_http_conn *c, const char *data, size_t n) {
    size_t max = c->h->o.max_body_bytes;
    c->received += n;
    if (c->received > max * FT_HTTP_DRAIN_FACTOR) return MHD_NO; /* drop the connection */
    if (c->received > max) {
        c->too_large = 1;
        free(c->body);
        c->body = NULL;
        c->len = c->cap = 0;
        return MHD_YES;
    }
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->len + n + 1) cap *= 2;
        char *b = realloc(c->body, cap);
        if (!b) return MHD_NO;
        c->body = b, c->cap = cap;
    }
    memcpy(c->body + c->len, data, n);
    c->len += n;
    c->body[c->len] = 0;
    return MHD_YES;
}

static struct ft_http_conn *conn_new(struct ft_http *h, struct MHD_Connection *mc,
                                     const char *url, const char *method) {
    struct ft_http_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->h = h, c->mc = mc, c->t0_us = ft_time_us(), c->fd = -1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) c->fd = ci->connect_fd;
    snprintf(c->method, sizeof c->method, "%s", method);
    snprintf(c->path, sizeof c->path, "%s", url);
    char *q = strchr(c->path, '?');
    if (q) *q = 0;
    return c;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    struct ft_http *h = cls;
    struct ft_http_conn *c = *con_cls;
    if (!c) {
        if (!(c = conn_new(h, mc, url, method))) return MHD_NO;
        *con_cls = c;
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > h->o.max_body_bytes * FT_HTTP_DRAIN_FACTOR) {
            c->too_large = 1;
            return dispatch(c); /* answer now; MHD closes the connection after it */
        }
        return MHD_YES;
    }
    if (*upload_size) {
        enum MHD_Result ok = receive(c, upload, *upload_size);
        *upload_size = 0;
        return ok;
    }
    return dispatch(c);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    struct ft_http *h = cls;
    struct ft_http_conn *c = *con_cls;
    if (!c) return;
    if (!c->streaming && c->status)
        log_request(c->method, c->path, c->status, c->n_tokens, c->t0_us,
                    toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (not delivered)");
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)h->o.conn_timeout_s);
    free(c->body);
    free(c);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    ft_log_debug("http: %s", buf);
}

/* --- lifecycle ---------------------------------------------------------------------------- */

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

static enum ft_status resolve(const char *host, int port, struct sockaddr_storage *ss, int *v6) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *res = NULL;
    char sport[16];
    snprintf(sport, sizeof sport, "%d", port);
    int rc = getaddrinfo(host, sport, &hints, &res);
    if (rc || !res)
        return ft_fail(FT_ERR_INVALID_ARG, "--host %s: cannot resolve (%s); use an address such "
                       "as 127.0.0.1 or 0.0.0.0", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return FT_OK;
}

enum ft_status ft_http_start(struct ft_http **out, const struct ft_http_opts *o,
                             ft_http_handler_fn handler, void *ctx) {
    struct ft_http *h = calloc(1, sizeof *h);
    if (!h) return ft_fail(FT_ERR_OOM, "out of memory");
    h->o = *o;
    h->host = strdup(o->host && *o->host ? o->host : "127.0.0.1");
    h->api_key = dup_or_null(o->api_key);
    h->cors = dup_or_null(o->cors_origins);
    h->handler = handler, h->ctx = ctx;
    if (!h->o.max_body_bytes) h->o.max_body_bytes = 8u << 20;
    if (h->o.conn_timeout_s <= 0) h->o.conn_timeout_s = 30;
    if (h->o.max_connections <= 0) h->o.max_connections = 256;
    struct sockaddr_storage ss;
    int v6 = 0;
    enum ft_status st = resolve(h->host, o->port, &ss, &v6);
    if (st != FT_OK) goto fail;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)h->o.conn_timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)h->o.max_connections,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_END);
    if (!h->d) {
        st = ft_fail(FT_ERR_IO, "cannot listen on %s:%d (port in use or not allowed?); pick "
                     "another with --port", h->host, o->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : o->port;
    *out = h;
    return FT_OK;
fail:
    ft_http_stop(h);
    return st;
}

int ft_http_port(const struct ft_http *h) { return h->port; }

void ft_http_quiesce(struct ft_http *h) {
    if (!h || !h->d || h->quiesced) return;
    MHD_socket s = MHD_quiesce_daemon(h->d);
    if (s != MHD_INVALID_SOCKET) close(s);
    h->quiesced = 1;
}

void ft_http_stop(struct ft_http *h) {
    if (!h) return;
    if (h->d) MHD_stop_daemon(h->d);
    free(h->host);
    free(h->api_key);
    free(h->cors);
    free(h);
}
