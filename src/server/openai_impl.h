/* openai_impl.h — internals shared by openai.c (routes, validation), openai_gen.c (generation
 * responses) and openai_info.c (models, health, stats, tokenize). Not for other modules. */
#ifndef FT_SERVER_OPENAI_IMPL_H
#define FT_SERVER_OPENAI_IMPL_H

#include <jansson.h>

#include "engine/sched.h"
#include "server/openai.h"
#include "server/sse.h"

#include "text/chat.h"

/* Which API a request came through (shapes its response). */
enum ft_api { FT_API_CHAT, FT_API_COMPLETION, FT_API_ANTHROPIC, FT_API_RESPONSES };

/* One generation request between validation and the response. */
struct ft_gen_job {
    enum ft_api api;
    int chat, stream, include_usage;
    int tool_fmt;               /* enum ft_tool_fmt the output is parsed with (0: none) */
    json_t *tools;              /* the request's tools in OpenAI's shape (owned; may be NULL) */
    int forced;                 /* the grammar forces tool calls (finish "tool_calls") */
    int split, in_think;        /* <think> splitting; the prompt already opened <think> */
    int harmony;                /* split harmony channels instead (analysis -> reasoning) */
    int32_t *prompt;            /* malloc'd */
    int n_prompt;
    struct ft_req_params p;     /* stop strings point into the request JSON (copied at submit);
                                   p.logprobs / p.top_logprobs: chat logprobs, completions
                                   logprobs */
    int echo;                   /* /v1/completions: the prompt text comes first */
    char *echo_text;            /* malloc'd: that text */
    char id[48];
    long created;
};

/* A conversation from any of the APIs, in the chat template's terms. */
enum ft_tool_choice { FT_TC_AUTO, FT_TC_NONE, FT_TC_REQUIRED, FT_TC_NAMED };
struct ft_chat_in {
    struct ft_chat_msg *msgs;   /* tool_calls arrays malloc'd per message */
    int n, cap;
    char **owned;               /* strings the messages point into */
    int n_owned, cap_owned;
    json_t *tools;              /* OpenAI-shaped tools list (owned), NULL = none */
    int choice;                 /* enum ft_tool_choice */
    char *choice_name;          /* FT_TC_NAMED */
    int parallel;               /* several calls in one turn (default 1) */
    json_t *format;             /* response_format {"type": ...} (owned), NULL = text */
    int think;                  /* enable_thinking: -1 = the template's default */
};
/* A new message (zeroed) at the end of in, or NULL when out of memory. */
struct ft_chat_msg *ft_chat_in_add(struct ft_chat_in *in, enum ft_chat_role role);
/* Keeps a malloc'd string alive as long as in (takes it; NULL stays NULL). */
const char *ft_chat_in_own(struct ft_chat_in *in, char *s);
void ft_chat_in_free(struct ft_chat_in *in);
/* Validates an OpenAI-shaped tools list and tool_choice into in (400 naming the field). */
int ft_srv_tools(json_t *tools, json_t *choice, json_t *parallel, struct ft_chat_in *in,
                 struct ft_http_resp *resp);
/* Renders in, tokenises, sets up the tool parser and the grammar, submits and answers. */
void ft_srv_chat_submit(struct ft_server *s, const struct ft_http_req *req, struct ft_chat_in *in,
                        struct ft_gen_job *job, struct ft_http_resp *resp);
void ft_gen_job_free(struct ft_gen_job *job);
/* The sampling, limits and stop fields both OpenAI generation endpoints share (400 naming one). */
int ft_srv_common(struct ft_server *s, json_t *root, struct ft_gen_job *job,
                  struct ft_http_resp *resp);
/* The struct ft_logit_mask of grammar g for one request (takes g). */
int ft_srv_mask(struct ft_server *s, struct ft_jg *g, struct ft_logit_mask *out,
                struct ft_http_resp *resp);

/* Field readers: absent or null leaves *out unchanged; a wrong type answers 400 and returns -1. */
int ft_srv_num(json_t *o, const char *key, float *out, struct ft_http_resp *resp);
int ft_srv_int(json_t *o, const char *key, long lo, long hi, long *out, struct ft_http_resp *resp);
int ft_srv_bool(json_t *o, const char *key, int *out, struct ft_http_resp *resp);
/* A JSON list of token ids, each checked against the vocabulary. */
int ft_srv_ids(struct ft_server *s, json_t *a, const char *param, int32_t **ids, int *n,
               struct ft_http_resp *resp);
/* Parses the body into a JSON object, or answers 400 and returns NULL. */
json_t *ft_srv_body(const struct ft_http_req *req, struct ft_http_resp *resp);
/* Answers with j (takes the reference). */
void ft_srv_reply(struct ft_http_resp *resp, int status, json_t *j);

/* Blocks until the request finishes (or the client goes away) and answers with the JSON. */
void ft_srv_wait(struct ft_server *s, struct ft_gen_job *job, struct ft_req *r,
                 struct ft_http_conn *conn, struct ft_http_resp *resp);
/* Sets resp up as an SSE stream of the request's events (takes r). */
void ft_srv_stream(struct ft_server *s, struct ft_gen_job *job, struct ft_req *r,
                   struct ft_http_resp *resp);

/* The Anthropic Messages API (anthropic.c) and the Responses API (responses.c); their response
 * bodies and streams are written by anthropic.c / responses.c through these. */
void ft_srv_messages(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_count_tokens(struct ft_server *s, const struct ft_http_req *req,
                         struct ft_http_resp *resp);
void ft_srv_responses(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);

/* What a finished generation produced (openai_gen.c collects it; every API shapes it). */
struct ft_gen_out {
    struct ft_sbuf reasoning, content;
    struct ft_tool_call_out { char *id, *name, *args; } *calls;
    int n_calls;
    int n_prompt, n_gen;
    int n_cached;               /* prompt tokens the prefix cache held */
    int finish;                 /* enum ft_finish */
    const char *stop_seq;       /* the stop string that ended it (the job's), or NULL */
    json_t *lp;                 /* logprobs requests: one entry per generated token (chat shape) */
    json_t *plp;                /* echo with logprobs: one entry per prompt token (the first
                                   with a null logprob), or NULL */
};
/* Per-API stream writers: called on the connection thread as the output comes. */
struct ft_stream_api {
    void (*start)(void *g);
    void (*text)(void *g, const char *reason, size_t nr, const char *content, size_t nc);
    void (*call)(void *g, int index, const struct ft_tool_call_out *c);
    void (*end)(void *g, int finish, int n_prompt, int n_gen, int tool_calls);
    void (*error)(void *g, const char *message, int status);
    /* optional: a call streamed in pieces: the first with its id and name (and the arguments'
     * start, maybe empty), later ones with id NULL and the next piece of its arguments; NULL:
     * each call goes to `call` once complete */
    void (*call_piece)(void *g, int index, const char *id, const char *name, const char *args,
                       size_t n);
    /* with call_piece: the call streamed in pieces is complete (c->args: all of its arguments,
     * which the pieces add up to) */
    void (*call_done)(void *g, int index, const struct ft_tool_call_out *c);
};
/* The SSE buffer and job of a stream, for the writers (the first field of their context). */
struct ft_stream_base {
    struct ft_server *s;
    struct ft_gen_job job;
    struct ft_sbuf out;
    /* the writers' state (anthropic.c, responses.c): the open block / item, its index, the
     * event count, the text and reasoning so far, the finished output items */
    int open, index, seq;
    struct ft_sbuf text, reason;
    json_t *items;
    int n_cached; /* prompt tokens the prefix cache held (set with the finish) */
    char *stops[FT_MAX_STOP]; /* copies of the request's stop strings */
    const char *stop_seq;     /* the one that ended the output (set with the finish), or NULL */
    json_t *call;             /* responses.c: the function_call item being streamed, or NULL */
    struct ft_sbuf call_args; /* and its arguments so far */
};
json_t *ft_srv_anthropic_message(struct ft_server *s, const struct ft_gen_job *job,
                                 const struct ft_gen_out *o);
extern const struct ft_stream_api ft_anthropic_stream;
json_t *ft_srv_responses_object(struct ft_server *s, const struct ft_gen_job *job,
                                const struct ft_gen_out *o, const char *status);
extern const struct ft_stream_api ft_responses_stream;
/* Rewrites an OpenAI-shaped error response into Anthropic's shape. */
void ft_srv_anthropic_error(struct ft_http_resp *resp);

void ft_srv_models(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_model(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_health(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_stats(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_metrics(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_tokenize(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_detokenize(struct ft_server *s, const struct ft_http_req *req,
                       struct ft_http_resp *resp);

#endif
