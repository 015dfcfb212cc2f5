/* test_server_http.c — `ft serve` on the fixture model, driven over raw sockets: every bad input
 * gets the right status and an OpenAI-shaped error naming the field, and the next good request
 * still succeeds; auth, CORS, body limits, slow-loris bodies, disconnects, greedy output equal to
 * transformers' (text_reference.json), graceful shutdown on SIGTERM. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "test.h"

#define MODEL FT_TEST_DATA "/models/qwen3_moe"
#define KEY "test-key-123"

static pid_t g_pid;
static int g_port;

struct resp {
    int status;
    char head[4096];
    char *body;
    size_t len;
};

static int dial(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        p += k, n -= (size_t)k;
    }
}

/* Decodes a chunked body in place. */
static void dechunk(struct resp *r) {
    size_t i = 0, o = 0;
    while (i < r->len) {
        long n = strtol(r->body + i, NULL, 16);
        char *e = strstr(r->body + i, "\r\n");
        if (!e || n <= 0) break;
        i = (size_t)(e - r->body) + 2;
        memmove(r->body + o, r->body + i, (size_t)n);
        o += (size_t)n, i += (size_t)n + 2;
    }
    r->len = o;
    r->body[o] = 0;
}

/* Reads a whole response (the request said Connection: close). */
static void read_resp(int fd, struct resp *r) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t k;
    while ((k = recv(fd, buf + n, cap - n - 1, 0)) > 0)
        if ((n += (size_t)k) + 1 == cap) buf = realloc(buf, cap *= 2);
    buf[n] = 0;
    memset(r, 0, sizeof *r);
    sscanf(buf, "HTTP/1.%*d %d", &r->status);
    char *e = strstr(buf, "\r\n\r\n");
    size_t hl = e ? (size_t)(e - buf) : n;
    snprintf(r->head, sizeof r->head, "%.*s", (int)hl, buf);
    r->len = e ? n - hl - 4 : 0;
    r->body = malloc(r->len + 1);
    memcpy(r->body, e ? e + 4 : "", r->len);
    r->body[r->len] = 0;
    free(buf);
    if (strcasestr(r->head, "transfer-encoding: chunked")) dechunk(r);
}

/* One request; extra: more header lines ("Name: value\r\n"); auth: send the API key. */
static struct resp req(const char *method, const char *path, const char *body, size_t len,
                       const char *extra, int auth) {
    struct resp r = {0};
    int fd = dial();
    if (fd < 0) return r;
    char h[2048];
    int hl = snprintf(h, sizeof h, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n%s%s\r\n",
                      method, path, len, auth ? "Authorization: Bearer " KEY "\r\n" : "",
                      extra ? extra : "");
    send_all(fd, h, (size_t)hl);
    send_all(fd, body, len);
    read_resp(fd, &r);
    close(fd);
    return r;
}

static struct resp post(const char *path, const char *body) {
    return req("POST", path, body, strlen(body), NULL, 1);
}

static void resp_free(struct resp *r) { free(r->body); }

/* Expects an OpenAI error with this status (and param when given). */
static void expect_error(struct resp r, int status, const char *param) {
    EXPECT_EQ(r.status, status);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL), *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    EXPECT(msg && strlen(msg) > 10);
    EXPECT(json_string_value(json_object_get(e, "type")) != NULL);
    EXPECT_EQ(json_integer_value(json_object_get(e, "code")), status);
    if (param) EXPECT_STREQ(json_string_value(json_object_get(e, "param")), param);
    if (r.status != status) fprintf(stderr, "  body: %s\n", r.body ? r.body : "(none)");
    json_decref(j);
    resp_free(&r);
}

#define GOOD_CHAT "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":2}"

/* After every bad request: a good one succeeds. */
static void expect_good(void) {
    struct resp r = post("/v1/chat/completions", GOOD_CHAT);
    EXPECT_EQ(r.status, 200);
    EXPECT_CONTAINS(r.body, "\"chat.completion\"");
    resp_free(&r);
}

static const char *chat_ref_text(int idx) {
    static char text[4096];
    json_t *j = json_load_file(MODEL "/text_reference.json", 0, NULL);
    snprintf(text, sizeof text, "%s",
             json_string_value(json_object_get(json_array_get(j, (size_t)idx), "text")));
    json_decref(j);
    return text;
}

/* --- server lifecycle --------------------------------------------------------------------- */

static void kill_server(void) {
    if (g_pid > 0) kill(g_pid, SIGKILL);
}

static void start_server(void) {
    int p[2];
    atexit(kill_server);
    if (pipe(p)) return;
    g_pid = fork();
    if (g_pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execl(FT_BIN, FT_BIN, "serve", "--model", MODEL, "--port", "0", "--api-key", KEY,
              "--cors-origins", "https://ok.example", "--http-timeout", "2", "--threads", "2",
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *u = strstr(line, "FreeToken-C ready: serving qwen3_moe on http://127.0.0.1:");
        if (u) {
            g_port = atoi(strrchr(line, ':') + 1);
            break;
        }
    }
    /* keep the pipe open (the server may print more); it closes when we exit */
}

TEST(server_starts_and_is_healthy) {
    start_server();
    EXPECT(g_port > 0);
    struct resp r = req("GET", "/health", "", 0, NULL, 0); /* no key needed */
    EXPECT_EQ(r.status, 200);
    EXPECT_CONTAINS(r.body, "\"ok\"");
    resp_free(&r);
    r = req("GET", "/v1/models", "", 0, NULL, 1);
    EXPECT_EQ(r.status, 200);
    EXPECT_CONTAINS(r.body, "\"id\":\"qwen3_moe\"");
    resp_free(&r);
}

/* --- bad input ---------------------------------------------------------------------------- */

TEST(malformed_json_is_400) {
    expect_error(post("/v1/chat/completions", "{\"messages\": [ {"), 400, NULL);
    expect_error(post("/v1/chat/completions", ""), 400, NULL);
    expect_error(post("/v1/chat/completions", "[1,2]"), 400, NULL);
    expect_good();
}

TEST(wrong_types_name_the_field) {
    expect_error(post("/v1/chat/completions", "{\"messages\":\"hi\"}"), 400, "messages");
    expect_error(post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"x\"}],\"temperature\":\"hot\"}"), 400, "temperature");
    expect_error(post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"x\"}],\"stream\":\"yes\"}"), 400, "stream");
    expect_error(post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"x\"}],\"stop\":[1]}"), 400, "stop");
    expect_error(post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"x\"}],\"top_p\":7}"), 400, "top_p");
    expect_error(post("/v1/chat/completions", "{\"messages\":[{\"role\":\"wizard\",\"content\":"
                      "\"x\"}]}"), 400, "messages");
    expect_error(post("/v1/completions", "{\"prompt\":{\"a\":1}}"), 400, "prompt");
    expect_error(post("/v1/completions", "{\"prompt\":\"x\",\"echo\":true,\"logprobs\":21}"), 400,
                 "logprobs"); /* echo scores the prompt, but at most 20 alternatives */
    expect_error(post("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":0}"), 400,
                 "max_tokens"); /* 0 only scores an echoed prompt */
    expect_good();
}

TEST(unknown_fields_are_accepted) {
    struct resp r = post("/v1/chat/completions",
                         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                         "\"text\":\"Hello\"}]}],\"max_tokens\":2,\"user\":\"u1\",\"frobnicate\":"
                         "{\"x\":[1,2]},\"parallel_tool_calls\":false}");
    EXPECT_EQ(r.status, 200);
    EXPECT_CONTAINS(r.body, "\"usage\"");
    resp_free(&r);
}

TEST(empty_messages_is_400) {
    expect_error(post("/v1/chat/completions", "{\"messages\":[]}"), 400, "messages");
    expect_error(post("/v1/chat/completions", "{}"), 400, "messages");
    expect_good();
}

TEST(bad_limits_are_400) {
    expect_error(post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"x\"}],\"max_tokens\":-5}"), 400, "max_tokens");
    expect_error(post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"x\"}],\"n\":2}"), 400, "n");
    expect_good();
}

TEST(unknown_model_route_and_method) {
    expect_error(post("/v1/chat/completions", "{\"model\":\"gpt-9\",\"messages\":[{\"role\":"
                      "\"user\",\"content\":\"x\"}]}"), 404, "model");
    expect_error(post("/v1/nothing", "{}"), 404, NULL);
    expect_error(req("GET", "/v1/chat/completions", "", 0, NULL, 1), 405, NULL);
    expect_error(req("GET", "/v1/models/other", "", 0, NULL, 1), 404, "model");
    expect_good();
}

TEST(api_key_is_required) {
    expect_error(req("POST", "/v1/chat/completions", GOOD_CHAT, strlen(GOOD_CHAT), NULL, 0), 401,
                 NULL);
    expect_error(req("POST", "/v1/chat/completions", GOOD_CHAT, strlen(GOOD_CHAT),
                     "Authorization: Bearer wrong-key-123\r\n", 0), 401, NULL);
    expect_error(req("GET", "/v1/models", "", 0, "Authorization: Bearer \r\n", 0), 401, NULL);
    expect_good();
}

TEST(invalid_utf8_is_400) {
    const char body[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfe b\"}]}";
    expect_error(req("POST", "/v1/chat/completions", body, sizeof body - 1, NULL, 1), 400, NULL);
    const char tok[] = "{\"prompt\":\"\xc3\x28\"}";
    expect_error(req("POST", "/tokenize", tok, sizeof tok - 1, NULL, 1), 400, NULL);
    expect_good();
}

TEST(huge_body_is_413_and_server_survives) {
    size_t n = 20u << 20;
    char *big = malloc(n);
    memset(big, ' ', n);
    memcpy(big, "{\"messages\":\"", 13);
    expect_error(req("POST", "/v1/chat/completions", big, n, NULL, 1), 413, NULL);
    /* without a Content-Length (chunked): counted while receiving */
    int fd = dial();
    const char *h = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    "Authorization: Bearer " KEY "\r\nTransfer-Encoding: chunked\r\n\r\n";
    send_all(fd, h, strlen(h));
    for (int i = 0; i < 20; i++) {
        char sz[32];
        snprintf(sz, sizeof sz, "%x\r\n", 1u << 20);
        send_all(fd, sz, strlen(sz));
        send_all(fd, big, 1u << 20);
        send_all(fd, "\r\n", 2);
    }
    send_all(fd, "0\r\n\r\n", 5);
    struct resp r;
    read_resp(fd, &r);
    close(fd);
    expect_error(r, 413, NULL);
    free(big);
    expect_good();
}

/* Half a body, then silence: other clients are served meanwhile, and the server drops the stalled
 * connection after --http-timeout (2 s here). */
TEST(slow_loris_partial_body) {
    int fd = dial();
    const char *h = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY
                    "\r\nContent-Length: 200\r\n\r\n{\"messages\":[{\"role\":";
    send_all(fd, h, strlen(h));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 3; i++) expect_good();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    EXPECT((t1.tv_sec - t0.tv_sec) < 2); /* not blocked behind the slow client */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    EXPECT_EQ(poll(&p, 1, 6000), 1); /* closed by the server within the timeout */
    char c[256];
    EXPECT(recv(fd, c, sizeof c, 0) <= 0); /* closed, no response */
    close(fd);
    expect_good();
}

TEST(prompt_over_context_is_400) {
    size_t n = 8000;
    char *body = malloc(n + 200), *p = body;
    p += sprintf(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < 600; i++) p += sprintf(p, "word%d ", i);
    sprintf(p, "\"}],\"max_tokens\":4}");
    expect_error(post("/v1/chat/completions", body), 400, NULL);
    p = body + sprintf(body, "{\"prompt\":[");
    for (int i = 0; i < 300; i++) p += sprintf(p, "%s%d", i ? "," : "", 5 + i % 50);
    sprintf(p, "]}");
    expect_error(post("/v1/completions", body), 400, NULL);
    free(body);
    expect_good();
}

TEST(cors_preflight_and_origin) {
    struct resp r = req("OPTIONS", "/v1/chat/completions", "", 0,
                        "Origin: https://ok.example\r\nAccess-Control-Request-Method: POST\r\n"
                        "Access-Control-Request-Headers: authorization, content-type\r\n", 0);
    EXPECT_EQ(r.status, 204);
    EXPECT(strcasestr(r.head, "Access-Control-Allow-Origin: https://ok.example") != NULL);
    EXPECT(strcasestr(r.head, "Access-Control-Allow-Headers: authorization") != NULL);
    resp_free(&r);
    r = req("GET", "/v1/models", "", 0, "Origin: https://evil.example\r\n", 1);
    EXPECT_EQ(r.status, 200);
    EXPECT(strcasestr(r.head, "Access-Control-Allow-Origin") == NULL);
    resp_free(&r);
    r = req("GET", "/v1/models", "", 0, "Origin: https://ok.example\r\n", 1);
    EXPECT(strcasestr(r.head, "Access-Control-Allow-Origin: https://ok.example") != NULL);
    resp_free(&r);
}

/* --- good requests ------------------------------------------------------------------------ */

TEST(tokenize_detokenize_roundtrip) {
    struct resp r = post("/tokenize", "{\"prompt\":\"Once upon a time\"}");
    EXPECT_EQ(r.status, 200);
    EXPECT_CONTAINS(r.body, "\"tokens\":[366,345,264,350,73]");
    EXPECT_CONTAINS(r.body, "\"count\":5");
    resp_free(&r);
    r = post("/detokenize", "{\"tokens\":[366,345,264,350,73]}");
    EXPECT_EQ(r.status, 200);
    EXPECT_CONTAINS(r.body, "\"prompt\":\"Once upon a time\"");
    resp_free(&r);
    expect_error(post("/detokenize", "{\"tokens\":[1,99999999]}"), 400, "tokens");
    expect_error(post("/detokenize", "{\"tokens\":\"1\"}"), 400, "tokens");
}

TEST(greedy_chat_matches_transformers) {
    struct resp r = post("/v1/chat/completions", "{\"model\":\"qwen3_moe\",\"messages\":[{\"role\":"
                         "\"user\",\"content\":\"Hello\"}],\"max_tokens\":10,\"temperature\":0}");
    EXPECT_EQ(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL), *c = json_array_get(json_object_get(j, "choices"), 0);
    EXPECT_STREQ(json_string_value(json_object_get(json_object_get(c, "message"), "content")),
                 chat_ref_text(2));
    EXPECT_STREQ(json_string_value(json_object_get(c, "finish_reason")), "length");
    json_t *u = json_object_get(j, "usage");
    EXPECT_EQ(json_integer_value(json_object_get(u, "prompt_tokens")), 11);
    EXPECT_EQ(json_integer_value(json_object_get(u, "completion_tokens")), 10);
    EXPECT_EQ(json_integer_value(json_object_get(u, "total_tokens")), 21);
    json_decref(j);
    resp_free(&r);
}

TEST(streaming_chat_is_sse) {
    struct resp r = post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":"
                         "\"Hello\"}],\"max_tokens\":10,\"temperature\":0,\"stream\":true,"
                         "\"stream_options\":{\"include_usage\":true}}");
    EXPECT_EQ(r.status, 200);
    EXPECT(strcasestr(r.head, "Content-Type: text/event-stream") != NULL);
    EXPECT_CONTAINS(r.body, "\"delta\":{\"role\":\"assistant\"");
    EXPECT_CONTAINS(r.body, "\"finish_reason\":\"length\"");
    EXPECT_CONTAINS(r.body, "\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":10");
    size_t n = r.len;
    EXPECT(n > 14 && !strcmp(r.body + n - 14, "data: [DONE]\n\n"));
    /* the deltas concatenate to the greedy text */
    char text[4096] = "";
    for (char *p = r.body; (p = strstr(p, "data: {"));) {
        char *e = strstr(p, "\n\n");
        *e = 0;
        json_t *j = json_loads(p + 6, 0, NULL);
        const char *c = json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta"), "content"));
        if (c) strncat(text, c, sizeof text - strlen(text) - 1);
        json_decref(j);
        p = e + 2;
    }
    EXPECT_STREQ(text, chat_ref_text(2));
    resp_free(&r);
}

TEST(client_disconnect_midstream) {
    for (int k = 0; k < 2; k++) {
        int fd = dial();
        const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":200,"
                        "\"ignore_eos\":true,\"stream\":true}";
        char h[1024];
        int hl = snprintf(h, sizeof h, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                          "Authorization: Bearer " KEY "\r\nContent-Length: %zu\r\n\r\n%s",
                          strlen(b), b);
        send_all(fd, h, (size_t)hl);
        char buf[512];
        EXPECT(recv(fd, buf, sizeof buf, 0) > 0); /* the stream started */
        close(fd);
    }
    usleep(300 * 1000);
    expect_good();
    struct resp r = req("GET", "/v1/stats", "", 0, NULL, 1);
    EXPECT_EQ(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    EXPECT(json_integer_value(json_object_get(json_object_get(j, "requests"), "cancelled")) >= 1);
    EXPECT_EQ(json_integer_value(json_object_get(json_object_get(j, "requests"), "running")), 0);
    json_decref(j);
    resp_free(&r);
}

TEST(graceful_shutdown_on_sigterm) {
    EXPECT(g_pid > 0);
    kill(g_pid, SIGTERM);
    int status = -1;
    for (int i = 0; i < 100 && waitpid(g_pid, &status, WNOHANG) == 0; i++) usleep(100 * 1000);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(dial() < 0); /* no longer listening */
    g_pid = 0;
}

TEST_MAIN("server_http")
