/* http.c — the HTTP layer over libmicrohttpd (the only file that includes <microhttpd.h>):
 * thread per connection, body collection with a size limit checked while receiving (the excess
 * is counted and dropped, never buffered), bearer-token auth, CORS, chunked streaming bodies
 * pulled from a callback with disconnect detection, one log line per request (client bytes
 * escaped). Slow clients: libmicrohttpd's own timeout only closes a connection that sends
 * nothing, so one header byte a second would hold a slot for ever; a watchdog thread gives each
 * request head (and then its body) a deadline and shuts the socket of one that misses it. Each
 * client address holds at most max_conns_per_ip connections (libmicrohttpd's per-IP limit).
 * A full table (max_connections, filled from many addresses) does not lock new clients out: a
 * connection arriving then closes the one that has waited longest without a request in flight
 * (no request line yet, an unfinished head, or idle after a response); running requests and
 * uploading bodies are never chosen. libmicrohttpd's own limit sits a spare above ours, so it
 * accepts the newcomer that makes the choice (and absorbs the closes in progress).
 * Called by cmd_serve (start/stop) and, per request, calls the handler of server/openai.c.
 * Threading: every connection has its own thread (MHD_USE_THREAD_PER_CONNECTION); the handler and
 * the stream callbacks of a connection run on that thread and may block. The watchdog list is
 * under h->mu (its entries are created and removed by libmicrohttpd's connection notifications,
 * removed before libmicrohttpd closes the socket, so the watchdog never shuts a reused fd); the
 * counters are atomics; the rest of struct ft_http is read-only after start. */
#define _GNU_SOURCE
#include "server/http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"
#include "server/http_check.h"

/* Bodies past the limit are drained (so the client reads its 413) up to this many times the limit
 * (at least FT_HTTP_DRAIN_MIN bytes); past that the 413 is sent at once and the connection
 * dropped. */
#define FT_HTTP_DRAIN_FACTOR 4
#define FT_HTTP_DRAIN_MIN ((uint64_t)32 << 20)
/* The slowest body upload allowed (bytes a second), on top of header_timeout_s. */
#define FT_HTTP_MIN_UPLOAD_RATE (64 * 1024)
/* A body over the limit is drained at least this fast, else the watchdog answers 413 at once. */
#define FT_HTTP_MIN_DRAIN_RATE (1024 * 1024)
#define FT_HTTP_WATCH_MS 200
/* Connections libmicrohttpd may hold beyond max_connections: newcomers while every connection
 * is busy, and evicted ones whose threads have not closed them yet (libmicrohttpd counts a
 * connection until its listening thread reaps it, so a burst of newcomers leaves as many evicted
 * ones still counted): a quarter of max_connections, at least FT_HTTP_SPARE_MIN. */
#define FT_HTTP_SPARE_MIN 32

/* Where a connection is in its request cycle (for the watchdog). */
enum watch_phase {
    W_FRESH,     /* accepted, no request line yet: deadline = accept + header timeout */
    W_HEAD,      /* request line seen, head incomplete */
    W_BODY,      /* head complete, receiving the body */
    W_DRAIN,     /* receiving a body over the limit, to drop it and answer 413 */
    W_BUSY,      /* the handler or the response owns it: no deadline */
    W_IDLE,      /* keep-alive after a response: deadline = idle timeout */
};

/* One open connection (libmicrohttpd's socket context). */
struct watch {
    struct watch *prev, *next;
    int fd, fired;           /* fired: shut by the watchdog or evicted, closing */
    enum watch_phase phase;
    int64_t deadline_us;     /* 0 = none */
    int64_t since_us;        /* when it entered its phase (the oldest waiter is evicted first) */
    char addr[64];           /* the client's address, for the log */
};

struct ft_http {
    struct MHD_Daemon *d;
    struct ft_http_opts o;
    char *host, *api_key, *cors; /* owned copies */
    int port, quiesced;
    ft_http_handler_fn handler;
    void *ctx;
    _Atomic size_t max_body;
    /* the watchdog */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct watch *watches;
    int n_watches;           /* entries of the list (fired ones included) */
    pthread_t wd;
    int wd_started, wd_stop;
    long n_closed_pending;   /* slow connections closed since the last log line */
    char first_closed[64];
    long n_evicted_pending;  /* connections evicted for a newcomer since the last log line */
    char first_evicted[64];
    int64_t last_log_us, last_limit_log_us, last_evict_log_us;
    /* counts for /metrics */
    _Atomic long by_status[600];
    _Atomic long head_timeouts, connections, evicted;
    _Atomic int open;
};

/* One request on a connection (MHD's con_cls): created on the first call, freed when done. */
struct ft_http_conn {
    struct ft_http *h;
    struct MHD_Connection *mc;
    struct watch *w;         /* NULL if libmicrohttpd gave none */
    int fd;
    char *body;
    size_t len, cap, received, max_body;
    uint64_t declared;       /* Content-Length (0 when none) */
    int too_large, streaming, status, n_tokens;
    char bad[256];           /* a 400 to answer before reading the body ("" = none) */
    int64_t t0_us;
    char method[16], path[256]; /* as received (path without the query string) */
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

/* One line per request; the method and path are the client's bytes, escaped (a "%0a" in the URL
 * arrives here as a newline). */
static void log_request(const char *method, const char *path, int status, int tokens,
                        int64_t t0_us, const char *note) {
    char m[4 * 16], p[4 * 256];
    ft_http_log_escape(m, sizeof m, method, strlen(method));
    ft_http_log_escape(p, sizeof p, path, strlen(path));
    ft_log_info("%s %s %d %d tok %.0f ms%s", m, p, status, tokens,
                (double)(ft_time_us() - t0_us) / 1e3, note);
}

static void count_status(struct ft_http *h, int status) {
    if (status >= 100 && status < 600) atomic_fetch_add(&h->by_status[status], 1);
}

/* --- the watchdog of slow clients ---------------------------------------------------------- */

static struct watch *watch_of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (struct watch *)ci->socket_context : NULL;
}

/* Moves w to phase p with a deadline `after_s` from now (0 = none). */
static void watch_set(struct ft_http *h, struct watch *w, enum watch_phase p, double after_s) {
    if (!w) return;
    pthread_mutex_lock(&h->mu);
    w->phase = p;
    w->since_us = ft_time_us();
    w->deadline_us = after_s > 0 ? w->since_us + (int64_t)(after_s * 1e6) : 0;
    pthread_mutex_unlock(&h->mu);
}

/* The table is full (h->mu held): closes the connection that has waited longest without a
 * request in flight, so the newcomer gets its slot; none when every one is busy. */
static void evict_oldest(struct ft_http *h) {
    static const char k503[] = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                               "Retry-After: 1\r\nContent-Length: 0\r\n\r\n";
    struct watch *victim = NULL;
    int live = 0;
    for (struct watch *w = h->watches; w; w = w->next) {
        if (w->fired) continue;
        live++;
        if (w->fd < 0 || (w->phase != W_FRESH && w->phase != W_HEAD && w->phase != W_IDLE))
            continue;
        if (!victim || w->since_us < victim->since_us) victim = w;
    }
    if (live < h->o.max_connections || !victim) return; /* the rest are closing already */
    victim->fired = 1;
    /* a client in the middle of its head learns why; the others sent nothing to answer */
    if (victim->phase == W_HEAD)
        (void)send(victim->fd, k503, sizeof k503 - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(victim->fd, SHUT_RDWR);
    if (!h->n_evicted_pending)
        snprintf(h->first_evicted, sizeof h->first_evicted, "%s", victim->addr);
    h->n_evicted_pending++;
    atomic_fetch_add(&h->evicted, 1);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode what) {
    struct ft_http *h = cls;
    if (what == MHD_CONNECTION_NOTIFY_STARTED) {
        struct watch *w = calloc(1, sizeof *w);
        atomic_fetch_add(&h->connections, 1);
        atomic_fetch_add(&h->open, 1);
        *socket_ctx = w;
        if (!w) return; /* out of memory: this connection goes unwatched */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        w->fd = ci ? ci->connect_fd : -1;
        ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!ci || !ci->client_addr ||
            getnameinfo(ci->client_addr, ci->client_addr->sa_family == AF_INET6
                        ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
                        w->addr, sizeof w->addr, NULL, 0, NI_NUMERICHOST))
            snprintf(w->addr, sizeof w->addr, "?");
        w->phase = W_FRESH;
        w->since_us = ft_time_us();
        w->deadline_us = w->since_us + (int64_t)h->o.header_timeout_s * 1000000;
        pthread_mutex_lock(&h->mu);
        /* full: make room (when every connection is busy, this one takes a spare slot) */
        if (h->n_watches >= h->o.max_connections) evict_oldest(h);
        w->next = h->watches;
        if (h->watches) h->watches->prev = w;
        h->watches = w;
        h->n_watches++;
        pthread_mutex_unlock(&h->mu);
        return;
    }
    /* closed: libmicrohttpd closes the socket after this returns */
    struct watch *w = *socket_ctx;
    atomic_fetch_sub(&h->open, 1);
    if (!w) return;
    pthread_mutex_lock(&h->mu);
    if (w->prev) w->prev->next = w->next;
    else h->watches = w->next;
    if (w->next) w->next->prev = w->prev;
    h->n_watches--;
    pthread_mutex_unlock(&h->mu);
    free(w);
    *socket_ctx = NULL;
}

/* The request line has arrived (libmicrohttpd's URI log callback): the head's clock starts for
 * a kept-alive connection (a fresh one keeps the deadline of its accept). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *mc) {
    struct ft_http *h = cls;
    struct watch *w = watch_of(mc);
    if (w) {
        pthread_mutex_lock(&h->mu);
        int64_t now = ft_time_us();
        if (w->phase != W_FRESH)
            w->deadline_us = now + (int64_t)h->o.header_timeout_s * 1000000;
        else
            now = w->since_us; /* a fresh connection waits since its accept */
        w->phase = W_HEAD;
        w->since_us = now;
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

static void flush_closed_log(struct ft_http *h, int64_t now) {
    if (!h->n_closed_pending || now - h->last_log_us < 1000000) return;
    ft_log_warn("http: closed %ld connection%s that sent no complete request within %d s "
                "(the first from %s; --header-timeout S allows slower clients)",
                h->n_closed_pending, h->n_closed_pending == 1 ? "" : "s", h->o.header_timeout_s,
                h->first_closed);
    h->n_closed_pending = 0;
    h->last_log_us = now;
}

static void flush_evicted_log(struct ft_http *h, int64_t now) {
    if (!h->n_evicted_pending || now - h->last_evict_log_us < 10000000) return;
    ft_log_warn("http: all %d connections were open; closed %ld idle or slow one%s to make room "
                "for new ones (the first from %s; --max-connections N, --max-conns-per-ip N)",
                h->o.max_connections, h->n_evicted_pending,
                h->n_evicted_pending == 1 ? "" : "s", h->first_evicted);
    h->n_evicted_pending = 0;
    h->last_evict_log_us = now;
}

/* Shuts the sockets of connections past their deadline; libmicrohttpd's thread of each then
 * reads the end of the stream and closes it as it would for a client that went away. One that
 * was sending a request gets a 408 first; an idle kept-alive one is closed quietly. */
static void *watchdog_main(void *arg) {
    static const char k408[] = "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                               "Content-Length: 0\r\n\r\n";
    static const char k413body[] =
        "{\"error\":{\"message\":\"request body is over the limit, checked before it is parsed "
        "or tokenized; raise it with ft serve --max-body SIZE (e.g. 16M)\",\"type\":"
        "\"request_too_large\",\"param\":null,\"code\":413}}";
    char k413[512];
    int n413 = snprintf(k413, sizeof k413, "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\n"
                        "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                        sizeof k413body - 1, k413body);
    struct ft_http *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->wd_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += FT_HTTP_WATCH_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
        int64_t now = ft_time_us();
        for (struct watch *w = h->watches; w; w = w->next) {
            if (w->fired || !w->deadline_us || now < w->deadline_us || w->fd < 0) continue;
            w->fired = 1;
            if (w->phase == W_DRAIN) { /* a body over the limit that comes slowly */
                (void)send(w->fd, k413, (size_t)n413, MSG_NOSIGNAL | MSG_DONTWAIT);
                atomic_fetch_add(&h->by_status[413], 1);
            } else if (w->phase != W_IDLE) {
                if (w->phase != W_FRESH)
                    (void)send(w->fd, k408, sizeof k408 - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (!h->n_closed_pending) snprintf(h->first_closed, sizeof h->first_closed, "%s", w->addr);
                h->n_closed_pending++;
                atomic_fetch_add(&h->head_timeouts, 1);
            }
            shutdown(w->fd, SHUT_RDWR);
        }
        flush_closed_log(h, now);
        flush_evicted_log(h, now);
    }
    h->last_log_us = h->last_evict_log_us = 0;
    flush_closed_log(h, ft_time_us());
    flush_evicted_log(h, ft_time_us());
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static int fd_gone(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (fd < 0 || poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return 1;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int ft_http_client_gone(const struct ft_http_conn *c) { return c && fd_gone(c->fd); }

void ft_http_set_max_body(struct ft_http *h, size_t bytes) {
    if (h && bytes) atomic_store(&h->max_body, bytes);
}

size_t ft_http_max_body(const struct ft_http *h) { return atomic_load(&h->max_body); }

void ft_http_counts(const struct ft_http_conn *c, struct ft_http_counts *out) {
    struct ft_http *h = c->h;
    memset(out, 0, sizeof *out);
    for (int i = 100; i < 600; i++) out->by_status[i] = atomic_load(&h->by_status[i]);
    out->head_timeouts = atomic_load(&h->head_timeouts);
    out->evicted = atomic_load(&h->evicted);
    out->connections = atomic_load(&h->connections);
    out->open = atomic_load(&h->open);
}

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
        /* before each event: a client that went away stops its request within one step */
        if (fd_gone(w->fd)) {
            w->gone = 1;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        ssize_t n = w->fn(w->ctx, buf, max);
        if (n > 0) return n;
        if (n < 0) {
            w->ended = 1;
            return MHD_CONTENT_READER_END_OF_STREAM;
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
    count_status(c->h, c->status);
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
    count_status(c->h, 204);
    enum MHD_Result ok = MHD_queue_response(c->mc, 204, r);
    MHD_destroy_response(r);
    return ok;
}

/* --- request handling --------------------------------------------------------------------- */

static enum MHD_Result send_too_large(struct ft_http_conn *c) {
    char msg[320], got[64] = "";
    if (c->declared) snprintf(got, sizeof got, " of %llu bytes", (unsigned long long)c->declared);
    snprintf(msg, sizeof msg, "request body%s is over the limit of %zu bytes (%.1f MiB), checked "
             "before it is parsed or tokenized; raise it with ft serve --max-body SIZE (e.g. 16M)",
             got, c->max_body, c->max_body / 1048576.0);
    return send_error(c, 413, msg);
}

static enum MHD_Result dispatch(struct ft_http_conn *c) {
    struct ft_http *h = c->h;
    /* the request is complete: generating may take as long as it takes */
    watch_set(h, c->w, W_BUSY, 0);
    if (c->bad[0]) return send_error(c, 400, c->bad);
    if (!strcmp(c->method, "OPTIONS") && h->cors) return send_preflight(c);
    if (c->too_large) return send_too_large(c);
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

/* Bodies past the limit are drained up to this many bytes, then dropped. */
static uint64_t drain_cap(size_t max) {
    uint64_t cap = (uint64_t)max * FT_HTTP_DRAIN_FACTOR;
    return cap > FT_HTTP_DRAIN_MIN ? cap : FT_HTTP_DRAIN_MIN;
}

/* Collects the body: up to the limit into c->body, past it only counted. */
static enum MHD_Result receive(struct ft_http_conn *c, const char *data, size_t n) {
    size_t max = c->max_body;
    c->received += n;
    if (c->received > drain_cap(max)) return MHD_NO; /* drop the connection */
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
    c->max_body = atomic_load(&h->max_body);
    c->w = watch_of(mc);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) c->fd = ci->connect_fd;
    snprintf(c->method, sizeof c->method, "%s", method);
    snprintf(c->path, sizeof c->path, "%s", url);
    char *q = strchr(c->path, '?');
    if (q) *q = 0;
    return c;
}

/* The Content-Length values and whether Transfer-Encoding is present. */
struct head_scan {
    const char *cl[8];
    int n_cl, has_te, expect_continue;
};

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
    struct head_scan *hs = cls;
    if (!key) return MHD_YES;
    if (!strcasecmp(key, "Content-Length")) {
        if (hs->n_cl < 8) hs->cl[hs->n_cl] = value ? value : "";
        hs->n_cl++;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        hs->has_te = 1;
    } else if (!strcasecmp(key, "Expect") && value && !strcasecmp(value, "100-continue")) {
        hs->expect_continue = 1;
    }
    return MHD_YES;
}

/* The head is complete: checks its framing and the declared size before any body is read.
 * Returns 1 to answer at once (c->bad or c->too_large set). */
static int check_head(struct ft_http_conn *c) {
    struct head_scan hs = {0};
    MHD_get_connection_values(c->mc, MHD_HEADER_KIND, scan_header, &hs);
    int n = hs.n_cl < 8 ? hs.n_cl : 8;
    if (hs.n_cl > 8) {
        snprintf(c->bad, sizeof c->bad, "the request has %d Content-Length headers: send one",
                 hs.n_cl);
        return 1;
    }
    uint64_t len = 0;
    if (ft_http_content_length(hs.cl, n, hs.has_te, &len, c->bad, sizeof c->bad) == FT_HTTP_CL_BAD)
        return 1;
    c->declared = len;
    if (len > c->max_body) {
        c->too_large = 1;
        /* a client waiting for "100 Continue", or a body too big to drain: answer now; else
         * read and drop it so the client, still sending, reads the 413 (the watchdog answers
         * it if the body comes slower than FT_HTTP_MIN_DRAIN_RATE) */
        if (hs.expect_continue || len > drain_cap(c->max_body)) return 1;
        watch_set(c->h, c->w, W_DRAIN,
                  c->h->o.header_timeout_s + (double)len / FT_HTTP_MIN_DRAIN_RATE);
        return 0;
    }
    /* the body has header_timeout_s plus what the slowest allowed upload rate needs */
    uint64_t expect = len ? len : hs.has_te ? c->max_body : 0;
    watch_set(c->h, c->w, W_BODY,
              c->h->o.header_timeout_s + (double)expect / FT_HTTP_MIN_UPLOAD_RATE);
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    struct ft_http *h = cls;
    struct ft_http_conn *c = *con_cls;
    if (!c) {
        if (!(c = conn_new(h, mc, url, method))) return MHD_NO;
        *con_cls = c;
        if (check_head(c)) return dispatch(c); /* answer now; MHD closes the connection after it */
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
    char note[300];
    snprintf(note, sizeof note, "%s%s%s", c->bad[0] ? " (" : "", c->bad, c->bad[0] ? ")" : "");
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) snprintf(note, sizeof note, " (not delivered)");
    if (!c->streaming && c->status)
        log_request(c->method, c->path, c->status, c->n_tokens, c->t0_us, note);
    else if (c->too_large) /* the watchdog answered a body over the limit that came slowly */
        log_request(c->method, c->path, 413, 0, c->t0_us, " (body over --max-body, not read)");
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)h->o.conn_timeout_s);
    /* kept alive: the next request line may take the idle timeout to come */
    watch_set(h, c->w, W_IDLE, h->o.conn_timeout_s);
    free(c->body);
    free(c);
    *con_cls = NULL;
}

/* libmicrohttpd's messages (escaped: they may quote the client's bytes). Refused connections
 * (per-address or total limit) are worth a warning, at most one each 10 s. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    struct ft_http *h = cls;
    char buf[512], esc[4 * 512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    ft_http_log_escape(esc, sizeof esc, buf, n);
    if (strstr(buf, "connection limit")) {
        int64_t now = ft_time_us();
        pthread_mutex_lock(&h->mu);
        int say = now - h->last_limit_log_us >= 10000000;
        if (say) h->last_limit_log_us = now;
        pthread_mutex_unlock(&h->mu);
        if (say) {
            ft_log_warn("http: %s (at most %d connections per client address: --max-conns-per-ip "
                        "N; past %d in all a newcomer closes an idle one, refused only when none "
                        "is: --max-connections N)", esc, h->o.max_conns_per_ip,
                        h->o.max_connections);
            return;
        }
    }
    ft_log_debug("http: %s", esc);
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
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (!h->o.max_body_bytes) h->o.max_body_bytes = 1u << 20;
    atomic_init(&h->max_body, h->o.max_body_bytes);
    if (h->o.conn_timeout_s <= 0) h->o.conn_timeout_s = 30;
    if (h->o.header_timeout_s <= 0) h->o.header_timeout_s = 10;
    if (h->o.max_connections <= 0) h->o.max_connections = 512;
    if (h->o.max_conns_per_ip <= 0) h->o.max_conns_per_ip = 128;
    if (h->o.max_conns_per_ip > h->o.max_connections) h->o.max_conns_per_ip = h->o.max_connections;
    int spare = h->o.max_connections / 4 > FT_HTTP_SPARE_MIN ? h->o.max_connections / 4
                                                             : FT_HTTP_SPARE_MIN;
    struct sockaddr_storage ss;
    int v6 = 0;
    enum ft_status st = resolve(h->host, o->port, &ss, &v6);
    if (st != FT_OK) goto fail;
    /* poll(), not select(): connections past FD_SETSIZE must not fail */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)h->o.conn_timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(h->o.max_connections + spare),
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)h->o.max_conns_per_ip,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_END);
    if (!h->d) {
        st = ft_fail(FT_ERR_IO, "cannot listen on %s:%d (port in use or not allowed?); pick "
                     "another with --port", h->host, o->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : o->port;
    if (pthread_create(&h->wd, NULL, watchdog_main, h)) {
        st = ft_fail(FT_ERR_IO, "cannot start the HTTP watchdog thread");
        goto fail;
    }
    h->wd_started = 1;
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
    if (h->wd_started) {
        pthread_mutex_lock(&h->mu);
        h->wd_stop = 1;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->wd, NULL);
    }
    if (h->d) MHD_stop_daemon(h->d);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h->host);
    free(h->api_key);
    free(h->cors);
    free(h);
}
