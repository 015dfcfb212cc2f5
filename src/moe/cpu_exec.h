/* cpu_exec.h — the CPU expert executor (docs/ARCHITECTURE.md section 6): computes routed experts for a
 * batch of tokens straight from the host banks. Two passes over the pool, gate/up then down,
 * their rows claimed in guided stretches through an atomic cursor; each weight byte is read
 * once per call. Engine thread only (it drives the pool). */
#ifndef FT_MOE_CPU_EXEC_H
#define FT_MOE_CPU_EXEC_H

#include "core/threadpool.h"
#include "mem/bank.h"

struct ft_moe_exec;

/* Scratch for up to max_tokens tokens x top_k experts, hidden H, expert width I. */
enum ft_status ft_moe_exec_init(struct ft_moe_exec **out, int max_tokens, int top_k, int n_experts,
                                int H, int I);
void ft_moe_exec_free(struct ft_moe_exec *x);
/* on: round each pass's inputs once to int8 / bf16 where the bank format has such a kernel
 * (backend/cpu/ops.h: ft_cpu_xq_bytes), as --cpu-act fast; off (the default): exact fp32. */
void ft_moe_exec_set_fast_act(struct ft_moe_exec *x, int on);

/* Where a call's time goes (for bench_exec; off by default): phase wall times summed over
 * calls, and per pass how long the workers took to start, were busy and waited at its end. */
enum { FT_EXEC_GATHER, /* rows by expert, the gate/up inputs (rounded once per token) */
       FT_EXEC_PASS1, FT_EXEC_ACT /* bias, activation, the down inputs rounded */, FT_EXEC_PASS2,
       FT_EXEC_COMBINE, FT_EXEC_PHASES };
struct ft_moe_exec_timing {
    int64_t calls;
    int64_t ns[FT_EXEC_PHASES];
    /* [0]: gate/up pass, [1]: down pass; summed over calls */
    int64_t start_max_ns[2];  /* launch to the last worker's first task */
    int64_t busy_mean_ns[2];  /* a worker's first task start to its last task end, mean */
    int64_t busy_max_ns[2];   /* the same, the slowest worker */
    int64_t tasks[2];         /* stretches claimed */
};
/* on: 1 zeroes the sums and starts timing, 2 resumes, 0 pauses (the sums kept) */
void ft_moe_exec_set_timing(struct ft_moe_exec *x, int on);
struct ft_moe_exec_timing ft_moe_exec_timing(const struct ft_moe_exec *x);
/* fn(ctx) runs once in the next call, on the calling thread (the pool's worker 0) at the start
 * of the gate/up pass while the other workers already compute: work the caller must do (the
 * hybrid's copy and kernel launches) overlaps the CPU experts instead of delaying them. */
void ft_moe_exec_set_hook(struct ft_moe_exec *x, void (*fn)(void *), void *ctx);

/* on: the whole call as one pool job (the passes' rows on one cursor, each expert's down rows
 * waiting only for its own gate/up rows) instead of four; the same output bits. Default from
 * FT_EXEC_FUSED (1). */
void ft_moe_exec_set_fused(struct ft_moe_exec *x, int on);

/* on: the watchdog (cpu_exec.c): a step not finished within max(10 s, 50x its learned time) is
 * abandoned and the run returns -1; off (the default): runs wait as long as a step takes, and
 * never return -1. Only for callers that handle -1 (the CPU engine: engine/forward.c). */
void ft_moe_exec_set_watchdog(struct ft_moe_exec *x, int on);
/* The watchdog's limit now for a step of n_pairs pairs (INT64_MAX when off): for tests. */
int64_t ft_moe_exec_limit_ns(const struct ft_moe_exec *x, int n_pairs);
/* The watchdog (cpu_exec.c): FT_OK when the executor can start a step on pool; FT_ERR_BUSY
 * (ft_error() says why and what to do) when a worker of a step it abandoned is still running
 * after a wait bounded by the watchdog's floor. A caller whose step shares pool or buffers
 * with the executor calls it before the step's first job; the run calls check it too. */
enum ft_status ft_moe_exec_check(struct ft_moe_exec *x, struct ft_pool *pool);

/* out[T, H] += sum_j w[t, j] * expert_{ids[t, j]}(x[t]) with expert(x) = down(silu(gate x) * up x),
 * or with act (may be NULL: that plain form) its biases and clamped SwiGLU.
 * ids, w: [T, k]. Returns the number of distinct experts used, or (the watchdog on) -1 with
 * ft_error() set (and out undefined) when the step hung past the watchdog's limit and was
 * abandoned (logged once), or could not start as a worker of such a step is still stuck
 * (ft_moe_exec_check). */
int ft_moe_exec_run(struct ft_moe_exec *x, struct ft_pool *pool, const struct ft_bank *gate_up,
                    const struct ft_bank *down, const struct ft_expert_act *act, const float *in,
                    const int *ids, const float *w, int T, int k, float *out);

/* The same for an arbitrary list of (token, expert, weight) pairs: out[tok[p], :] += w[p] *
 * expert_{ids[p]}(in[tok[p]]). The hybrid backend runs the misses it keeps on the CPU. */
int ft_moe_exec_run_pairs(struct ft_moe_exec *x, struct ft_pool *pool,
                          const struct ft_bank *gate_up, const struct ft_bank *down,
                          const struct ft_expert_act *act, const float *in, const int *tok,
                          const int *ids, const float *w, int n_pairs, float *out);

#endif
