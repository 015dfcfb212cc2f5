/* openai_impl.h — internals shared by openai.c (routes, validation), openai_gen.c (generation
 * responses) and openai_info.c (models, health, stats, tokenize). Not for other modules. */
#ifndef FT_SERVER_OPENAI_IMPL_H
#define FT_SERVER_OPENAI_IMPL_H

#include <jansson.h>

#include "engine/sched.h"
#include "server/openai.h"
#include "server/sse.h"

/* One generation request between validation and the response. */
struct ft_gen_job {
    int chat, stream, include_usage;
    int split, in_think;        /* <think> splitting; the prompt already opened <think> */
    int harmony;                /* split harmony channels instead (analysis -> reasoning) */
    int32_t *prompt;            /* malloc'd */
    int n_prompt;
    struct ft_req_params p;     /* stop strings point into the request JSON (copied at submit) */
    char id[48];
    long created;
};

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

void ft_srv_models(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_model(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_health(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_stats(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_tokenize(struct ft_server *s, const struct ft_http_req *req, struct ft_http_resp *resp);
void ft_srv_detokenize(struct ft_server *s, const struct ft_http_req *req,
                       struct ft_http_resp *resp);

#endif
