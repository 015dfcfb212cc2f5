/* session.c — opens pool, model and engine for a subcommand; logs the load time. */
#include "cli/session.h"

#include <string.h>

#include "backend/cpu/ops.h"
#include "core/log.h"
#include "core/timer.h"
#include "engine/gpu.h"
#include "mem/residency.h"
#include "model/arch.h"

enum ft_status ft_session_open(struct ft_session *s, const char *model_dir, const char *synthetic,
                               int threads, const struct ft_engine_opts *eo) {
    memset(s, 0, sizeof *s);
    int64_t t0 = ft_time_us();
    enum ft_status st = ft_pool_init(&s->pool, threads);
    if (st != FT_OK) return st;
    struct ft_residency_opts ro = {.pin_budget = eo->pin_budget, .cpu_layers = eo->cpu_layers,
                                   .device = eo->device};
    if (synthetic) {
        st = ft_model_synthetic(synthetic, s->pool, eo->seed ? eo->seed : 1, &s->model);
        /* offload: the banks pinned for the model, as a checkpoint's loader does, so that every
         * engine opened on it (ft bench's configurations) keeps the same pins */
        if (st == FT_OK && eo->backend == FT_BACKEND_OFFLOAD && (s->model->arch->flags & FT_ARCH_MOE) &&
            ft_gpu_available()) { /* (no GPU: the engine says so next) */
            st = ft_residency_plan(s->model, &ro, &s->model->residency);
            if (st == FT_OK) st = ft_residency_apply(s->model->residency, s->model);
        }
    } else { /* offload: the banks are registered while the checkpoint is read */
        struct ft_load_opts lo = {.residency = eo->backend == FT_BACKEND_OFFLOAD ? &ro : NULL};
        st = ft_model_load_opts(model_dir, &lo, &s->model);
    }
    if (st == FT_OK) st = ft_engine_init(&s->engine, s->model, s->pool, eo);
    if (st != FT_OK) {
        ft_session_close(s);
        return st;
    }
    s->load_s = (double)(ft_time_us() - t0) / 1e6;
    ft_log_info("loaded %s (%s) in %.2f s; %d threads, CPU ISA %s", s->model->label,
                s->model->cfg.arch, s->load_s, ft_pool_size(s->pool), ft_cpu_isa_name(ft_cpu_isa()));
    return FT_OK;
}

enum ft_status ft_session_reopen(struct ft_session *s, const struct ft_engine_opts *eo) {
    ft_engine_free(s->engine);
    s->engine = NULL;
    return ft_engine_init(&s->engine, s->model, s->pool, eo);
}

void ft_session_close(struct ft_session *s) {
    ft_engine_free(s->engine);
    ft_model_free(s->model);
    ft_pool_free(s->pool);
    memset(s, 0, sizeof *s);
}
