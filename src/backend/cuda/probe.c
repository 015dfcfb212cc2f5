/* probe.c — the GPU forward pass's timing (see probe.h). Engine thread only. */
#ifdef FT_HAVE_CUDA
#include "backend/cuda/probe.h"

#include <stdlib.h>

#include "core/env.h"
#include "core/log.h"
#include "core/timer.h"

enum { MAX_EV = 1024 };

struct ft_gpu_probe {
    int level, kind, timed;
    /* level 2: an event after each op group of the step; sums per kind (0 decode, 1 prefill),
     * the first step of each kind (lazy module loads) not summed */
    cudaEvent_t ev[MAX_EV];
    int n_ev, ev_op[MAX_EV];
    double op_ms[2][FT_OP_N];
    long op_steps[2], op_seen[2];
    /* offloaded layer steps' host phases */
    int64_t ph_ns[FT_PH_N], ph_last;
    long ph_steps, ph_cpu;
    /* decode steps: caller (between two decode steps in a row), issue, wait, copy-out */
    cudaEvent_t st_ev[2];
    int64_t t_enter, t_issued, t_synced, st_last, st_ns[4];
    double st_gpu_ms;
    long st_n, st_gaps;
};

enum ft_status ft_gpu_probe_init(struct ft_gpu_probe **out) {
    *out = NULL;
    int level = ft_env_int(FT_ENV_PROFILE, 0);
    if (level <= 0) return FT_OK;
    struct ft_gpu_probe *p = calloc(1, sizeof *p);
    if (!p) return ft_fail(FT_ERR_OOM, "FT_PROFILE: out of memory");
    p->level = level >= 2 ? 2 : 1;
    for (int i = 0; p->level == 2 && i < MAX_EV; i++) cudaEventCreate(&p->ev[i]);
    for (int i = 0; i < 2; i++) cudaEventCreate(&p->st_ev[i]);
    ft_log_info("FT_PROFILE=%d: GPU step timing on%s", p->level,
                p->level == 2 ? ", per-op events (steps run eagerly, without CUDA graphs)" : "");
    *out = p;
    return FT_OK;
}

int ft_gpu_probe_eager(const struct ft_gpu_probe *p) { return p && p->level == 2; }

void ft_gpu_probe_op(struct ft_gpu_probe *p, enum ft_probe_op op, cudaStream_t s) {
    if (!p || p->level < 2 || p->n_ev >= MAX_EV) return;
    cudaEventRecord(p->ev[p->n_ev], s);
    p->ev_op[p->n_ev++] = op;
}

void ft_gpu_probe_step_begin(struct ft_gpu_probe *p, int kind, int timed, cudaStream_t s) {
    if (!p) return;
    p->kind = kind, p->timed = timed, p->n_ev = 0, p->ph_last = 0;
    if (!timed) p->st_last = 0; /* a prefill step between: no caller gap */
    p->t_enter = ft_time_ns();
    if (timed) cudaEventRecord(p->st_ev[0], s);
    ft_gpu_probe_op(p, FT_OP_NORM, s); /* the step's start */
}

void ft_gpu_probe_step_issued(struct ft_gpu_probe *p, cudaStream_t s) {
    if (!p) return;
    if (p->timed) cudaEventRecord(p->st_ev[1], s);
    p->t_issued = ft_time_ns();
    if (p->n_ev > 1) { /* level 2: collect this step's op groups */
        cudaEventSynchronize(p->ev[p->n_ev - 1]);
        if (p->op_seen[p->kind]++ > 0) {
            for (int i = 1; i < p->n_ev; i++) {
                float ms = 0;
                cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]);
                p->op_ms[p->kind][p->ev_op[i]] += ms;
            }
            p->op_steps[p->kind]++;
        }
        p->t_issued = ft_time_ns();
    }
}

void ft_gpu_probe_step_synced(struct ft_gpu_probe *p) {
    if (p) p->t_synced = ft_time_ns();
}

void ft_gpu_probe_step_end(struct ft_gpu_probe *p) {
    if (!p || !p->timed) return;
    int64_t t_done = ft_time_ns();
    float ms = 0;
    cudaEventElapsedTime(&ms, p->st_ev[0], p->st_ev[1]);
    if (p->st_last) p->st_ns[0] += p->t_enter - p->st_last, p->st_gaps++;
    p->st_ns[1] += p->t_issued - p->t_enter, p->st_ns[2] += p->t_synced - p->t_issued;
    p->st_ns[3] += t_done - p->t_synced, p->st_gpu_ms += ms;
    p->st_n++, p->st_last = t_done;
}

void ft_gpu_probe_phase(struct ft_gpu_probe *p, enum ft_probe_phase ph) {
    if (!p) return;
    int64_t t = ft_time_ns();
    if (p->ph_last) p->ph_ns[ph] += t - p->ph_last;
    if (ph == FT_PH_LAUNCH) p->ph_steps++;
    if (ph == FT_PH_CPU) p->ph_cpu++;
    p->ph_last = t;
}

static void report(const struct ft_gpu_probe *p) {
    static const char *const names[FT_OP_N] = {"norms+residual", "q(kv) proj", "k+v proj",
                                               "qk-norm+rope+kv write", "attention", "o proj",
                                               "router+top-k", "moe sort+gather", "routed experts",
                                               "shared expert", "dense mlp", "final norm+lm_head"};
    for (int kind = 0; kind < 2; kind++) {
        const double *ms = p->op_ms[kind];
        long n = p->op_steps[kind];
        double tot = 0;
        for (int c = 0; c < FT_OP_N; c++) tot += ms[c];
        if (!n || tot <= 0) continue;
        ft_log_info("GPU %s profile over %ld eager steps: %.3f ms per step", kind ? "prefill" : "decode",
                    n, tot / n);
        for (int c = 0; c < FT_OP_N; c++)
            if (ms[c] > 0)
                ft_log_info("  %-24s %8.3f ms  %5.1f%%", names[c], ms[c] / n, 100.0 * ms[c] / tot);
    }
    if (p->ph_steps) {
        const double n = (double)p->ph_steps;
        ft_log_info("offload decode, host side per layer step (%ld steps, %ld with CPU experts): "
                    "launches before the router sync %.1f us, waiting for it %.1f, cache lookup "
                    "and copies %.1f, expert launches %.1f, CPU experts %.1f (%.1f where any)",
                    p->ph_steps, p->ph_cpu, p->ph_ns[FT_PH_LAUNCH] / 1e3 / n, p->ph_ns[FT_PH_WAIT] / 1e3 / n,
                    p->ph_ns[FT_PH_PLAN] / 1e3 / n, p->ph_ns[FT_PH_ISSUE] / 1e3 / n,
                    p->ph_ns[FT_PH_CPU] / 1e3 / n, p->ph_cpu ? p->ph_ns[FT_PH_CPU] / 1e3 / p->ph_cpu : 0.0);
    }
    if (p->st_n) {
        const double n = (double)p->st_n;
        ft_log_info("step timing over %ld decode steps, us each: caller %.1f, issue %.1f, wait %.1f "
                    "(GPU %.1f), copy-out %.1f", p->st_n, p->st_ns[0] / 1e3 / (p->st_gaps ? p->st_gaps : 1),
                    p->st_ns[1] / 1e3 / n, p->st_ns[2] / 1e3 / n, p->st_gpu_ms * 1e3 / n,
                    p->st_ns[3] / 1e3 / n);
    }
}

void ft_gpu_probe_free(struct ft_gpu_probe *p) {
    if (!p) return;
    report(p);
    for (int i = 0; p->level == 2 && i < MAX_EV; i++) cudaEventDestroy(p->ev[i]);
    for (int i = 0; i < 2; i++) cudaEventDestroy(p->st_ev[i]);
    free(p);
}

#endif
