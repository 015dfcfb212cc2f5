/* policy.h — the per-layer fetch-vs-compute split of the hybrid backend (DESIGN.md section 6):
 * of a step's M missing experts, fetch F over PCIe into cache slots and compute M - F on the
 * CPU, concurrently, choosing F to minimise the slower side. The costs are learnt while the
 * engine runs (running averages per layer): seconds to copy one expert, seconds of CPU time per
 * expert, and the CPU side's fixed cost per layer (each measured, not fitted: the executor
 * times the part of a call that scales with its experts). Pure C; engine thread only. */
#ifndef FT_MOE_POLICY_H
#define FT_MOE_POLICY_H

#include "ft.h"

enum ft_moe_mode { FT_MOE_OFFLOAD, FT_MOE_CPU, FT_MOE_HYBRID };

struct ft_split_costs {
    double copy_s;      /* per expert copied */
    double cpu_s;       /* per expert computed on the CPU (beside copies, under the alone model) */
    double cpu_fixed_s; /* per layer step with any CPU expert */
    long samples_copy, samples_cpu;
    /* the alone model (ft_split_set_alone): per expert computed with no copy running beside it
     * (the copies' DMA reads the same host DRAM), and the host time to issue one copy (the CPU
     * side starts after the issue); decisions counts this layer's calls (exploration) */
    double cpu_alone_s, issue_s;
    long samples_alone, samples_issue, decisions;
    int unused; /* consecutive calls that fetched all or none (ft_split_fetch_count) */
};

struct ft_split {
    enum ft_moe_mode mode;
    int n_layers;
    struct ft_split_costs *layer; /* [n_layers] */
    double alpha;                 /* running-average weight of a new sample (0.1) */
    int alone;                    /* the alone model on (ft_split_set_alone) */
};

/* copy_s / cpu_s: initial guesses per expert (e.g. bytes / PCIe and bytes / DRAM bandwidth). */
enum ft_status ft_split_init(struct ft_split *s, enum ft_moe_mode mode, int n_layers,
                             double copy_s, double cpu_s, double cpu_fixed_s);
void ft_split_free(struct ft_split *s);
/* How many of m misses to fetch (the rest go to the CPU). Under the alone model, every 64th
 * call of a layer takes the other side of the choice (no fetch, or the best with fetches) so
 * that the estimate it rests on does not go stale; without it, after 64 calls in a row that
 * fetched all or none, one call moves one expert to the unused side. */
int ft_split_fetch_count(struct ft_split *s, int layer, int m);
/* The alone model: fetching nothing costs m * cpu_alone + fixed (no copy takes DRAM from the
 * executor), fetching F > 0 costs max(F * copy, F * issue + (M - F) * cpu + fixed) with cpu the
 * cost beside copies; cpu_alone_s starts every layer's estimate (e.g. from the bw profile's
 * alone / concurrent executor rates). The CPU samples then go through ft_split_observe_side. */
void ft_split_set_alone(struct ft_split *s, double cpu_alone_s);
/* A CPU-side sample: n_cpu experts in cpu_s seconds (of which the fixed part is taken to be
 * the current estimate) into cpu_s when copies ran beside it (what ft_split_observe does), else
 * into the alone model's cpu_alone_s. */
void ft_split_observe_side(struct ft_split *s, int layer, int n_cpu, double cpu_s, int beside_copies);
/* The host issued n copies in seconds (the alone model's issue cost). */
void ft_split_observe_issue(struct ft_split *s, int layer, int n, double seconds);
/* Feedback from a finished step: n_copied experts took copy_s seconds; n_cpu took cpu_s
 * (of which the fixed part is taken to be the current estimate). Every estimate is a running
 * average whose samples are first held within [1/10, 3] times it (one stalled step cannot
 * swing the split). */
void ft_split_observe(struct ft_split *s, int layer, int n_copied, double copy_s, int n_cpu,
                      double cpu_s);
/* The CPU side measured in two parts: n_cpu experts in cpu_s seconds, work_s of which scaled
 * with the experts (ft_moe_exec_last_work_s); the rest is a sample of the fixed cost. */
void ft_split_observe_cpu(struct ft_split *s, int layer, int n_cpu, double cpu_s, double work_s);
const char *ft_moe_mode_name(enum ft_moe_mode m);

#endif
