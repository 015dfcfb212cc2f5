/* http.h — a small HTTP/1.1 server over libmicrohttpd: one thread per connection, bodies
 * collected up to a limit (413 past it, never buffered), optional bearer-token auth (401) and
 * CORS, chunked streaming responses pulled from a callback, one log line per request.
 * Hostile clients: a connection must send its whole request head within header_timeout_s (a
 * watchdog closes it otherwise, so one header byte a second cannot hold a slot), each client
 * address holds at most max_conns_per_ip connections, a full table (max_connections) makes room
 * for a newcomer by closing the oldest connection with no request in flight, differing
 * Content-Length headers are a 400, and client bytes are escaped before they reach the log.
 * The routes live in the caller (server/openai.c) behind one handler function, so no other file
 * sees libmicrohttpd.
 * Threading: the handler and stream callbacks run on the connection's own thread; many run at
 * once. ft_http_start/stop are called by one thread (the CLI). */
#ifndef FT_SERVER_HTTP_H
#define FT_SERVER_HTTP_H

#include <stddef.h>
#include <sys/types.h>

#include "ft.h"

struct ft_http_opts {
    const char *host;         /* bind address (default 127.0.0.1) */
    int port;                 /* 0 = any free port (ft_http_port tells which) */
    const char *api_key;      /* NULL = no auth; else "Authorization: Bearer KEY" required */
    const char *cors_origins; /* NULL = CORS off; "*" or "https://a.example,https://b.example" */
    size_t max_body_bytes;    /* default 1 MiB (ft_http_set_max_body changes it later) */
    int conn_timeout_s;       /* idle connections are closed after this (default 30) */
    int header_timeout_s;     /* a request head must arrive within this of the connection's
                                 start or of its request line (default 10) */
    int max_connections;      /* default 512; when all are open, a new connection closes the
                                 one idle (or without a complete head) the longest */
    int max_conns_per_ip;     /* default 128; 0 = the default */
};

/* What the server has answered so far (for /metrics). */
struct ft_http_counts {
    long by_status[600];      /* responses by HTTP status (100..599) */
    long head_timeouts;       /* connections closed for a request head or body that came too slowly */
    long connections;         /* connections accepted so far */
    long evicted;             /* idle or slow-head connections closed to make room for new ones */
    int open;                 /* connections open now */
};

struct ft_http_conn;

struct ft_http_req {
    const char *method;       /* "GET", "POST", ... */
    const char *path;         /* without the query string */
    const char *body;         /* NUL-terminated copy of the body ("" when none) */
    size_t body_len;
    struct ft_http_conn *conn;
};

/* Streaming body: writes up to max bytes into buf and returns how many; 0 = nothing yet (it
 * should have waited a short while, ~100 ms; the connection is then checked for a disconnect and
 * the callback called again); FT_HTTP_STREAM_END when finished. */
#define FT_HTTP_STREAM_END ((ssize_t)-1)
typedef ssize_t (*ft_http_stream_fn)(void *ctx, char *buf, size_t max);

struct ft_http_resp {
    int status;
    const char *content_type; /* default application/json */
    char *body;               /* malloc'd; taken over by http.c */
    size_t body_len;
    /* or a streamed body (chunked): */
    ft_http_stream_fn stream;
    void *stream_ctx;
    void (*stream_free)(void *ctx); /* called once the stream ends or the client went away */
    int (*stream_tokens)(void *ctx); /* tokens generated so far (for the request log) */
    int n_tokens;             /* for the request log (non-streamed) */
};

typedef void (*ft_http_handler_fn)(void *ctx, const struct ft_http_req *req,
                                   struct ft_http_resp *resp);

struct ft_http;

enum ft_status ft_http_start(struct ft_http **out, const struct ft_http_opts *o,
                             ft_http_handler_fn handler, void *ctx);
/* The port actually bound (useful with port 0). */
int ft_http_port(const struct ft_http *h);
/* Stops accepting new connections; running ones continue. */
void ft_http_quiesce(struct ft_http *h);
/* Closes every connection and joins the threads. Accepts NULL. */
void ft_http_stop(struct ft_http *h);

/* The body limit from now on (e.g. derived from the context once the model is loaded); any
 * thread. */
void ft_http_set_max_body(struct ft_http *h, size_t bytes);
size_t ft_http_max_body(const struct ft_http *h);

/* The counts of the server this request came to. */
void ft_http_counts(const struct ft_http_conn *c, struct ft_http_counts *out);

/* 1 when the client of this request has closed its connection (0 for a request with no
 * connection, as fuzz_server hands the handler). */
int ft_http_client_gone(const struct ft_http_conn *c);
/* Sets resp to an OpenAI-shaped error: {"error": {"message", "type", "param", "code"}}. The type
 * follows the status (invalid_request_error, authentication_error, not_found_error, ...). */
void ft_http_error(struct ft_http_resp *resp, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Sets resp to a JSON body (takes the text, a malloc'd string). */
void ft_http_json(struct ft_http_resp *resp, int status, char *text);

#endif
