/* probe.h — the GPU forward pass's timing, in one object (FT_PROFILE, core/env.h): off, the
 * forward pass holds NULL and each mark is one branch. Level 1: where each decode step's wall
 * time goes on the host (caller, issue, wait with the GPU's own time, copy-out) and the host
 * side of each offloaded layer step (launches before the router sync, the wait, the cache
 * lookup and copies, the expert launches, the CPU experts). Level 2 adds per-op-group GPU
 * times from events, which needs the steps run eagerly (no CUDA graphs). Printed at free.
 * Engine thread only. Built only with FT_HAVE_CUDA. */
#ifndef FT_BACKEND_CUDA_PROBE_H
#define FT_BACKEND_CUDA_PROBE_H

#include <cuda_runtime_api.h>

#include "core/status.h"

/* op groups of a step (level 2) */
enum ft_probe_op { FT_OP_NORM, FT_OP_QKV, FT_OP_KV, FT_OP_ROPE_KV, FT_OP_ATTN, FT_OP_OPROJ, FT_OP_ROUTER,
                   FT_OP_SORT, FT_OP_EXPERTS, FT_OP_SHARED, FT_OP_DENSE, FT_OP_HEAD, FT_OP_N };
/* host phases of an offloaded decode layer step, each ending at its mark */
enum ft_probe_phase { FT_PH_LAUNCH, FT_PH_WAIT, FT_PH_PLAN, FT_PH_ISSUE, FT_PH_CPU, FT_PH_N };

struct ft_gpu_probe;

/* NULL (off) unless FT_PROFILE is 1 or 2; *out NULL and FT_OK when off. */
enum ft_status ft_gpu_probe_init(struct ft_gpu_probe **out);
/* Prints the report (ft_log_info) and frees; NULL is fine. */
void ft_gpu_probe_free(struct ft_gpu_probe *p);
/* 1: steps must run eagerly (per-op events) */
int ft_gpu_probe_eager(const struct ft_gpu_probe *p);

/* A step starts (prefill: kind 1, decode: 0; only decode steps of at most 8 tokens are timed). */
void ft_gpu_probe_step_begin(struct ft_gpu_probe *p, int kind, int timed, cudaStream_t s);
/* The step's work is launched (an event behind it); then its results are synced; then copied. */
void ft_gpu_probe_step_issued(struct ft_gpu_probe *p, cudaStream_t s);
void ft_gpu_probe_step_synced(struct ft_gpu_probe *p);
void ft_gpu_probe_step_end(struct ft_gpu_probe *p);
/* The end of an op group (level 2). */
void ft_gpu_probe_op(struct ft_gpu_probe *p, enum ft_probe_op op, cudaStream_t s);
/* The end of a host phase of an offloaded layer step: the time since the last mark into phase
 * (FT_PH_LAUNCH at the first layer of a step has no last mark: not counted). */
void ft_gpu_probe_phase(struct ft_gpu_probe *p, enum ft_probe_phase ph);

#endif
