/* session.h — what every model subcommand sets up: thread pool, model (checkpoint or
 * synthetic), engine. */
#ifndef FT_CLI_SESSION_H
#define FT_CLI_SESSION_H

#include "core/threadpool.h"
#include "engine/forward.h"
#include "model/model.h"

struct ft_session {
    struct ft_pool *pool;
    struct ft_model *model;
    struct ft_engine *engine;
    double load_s;
};

/* Exactly one of model_dir / synthetic is set. threads <= 0: physical cores. */
enum ft_status ft_session_open(struct ft_session *s, const char *model_dir, const char *synthetic,
                               int threads, const struct ft_engine_opts *eo);
/* A new engine with other options (backend, VRAM limit, MoE backend) on the same pool and
 * model; the model's pinned banks stay. On failure the session has no engine: close it. */
enum ft_status ft_session_reopen(struct ft_session *s, const struct ft_engine_opts *eo);
void ft_session_close(struct ft_session *s);

#endif
