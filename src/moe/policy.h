/* policy.h — the per-layer fetch-vs-compute split of the hybrid backend (DESIGN.md section 6):
 * of a step's M missing experts, fetch F over PCIe into cache slots and compute M - F on the
 * CPU, concurrently, choosing F to minimise the slower side. The costs are learnt while the
 * engine runs (running averages per layer): seconds to copy one expert, seconds of CPU time per
 * expert (the CPU side's fixed cost per layer stays where it starts: the bw profile's, or
 * 50 us). Pure C; engine thread only. */
#ifndef FT_MOE_POLICY_H
#define FT_MOE_POLICY_H

#include "ft.h"

enum ft_moe_mode { FT_MOE_OFFLOAD, FT_MOE_CPU, FT_MOE_HYBRID };

struct ft_split_costs {
    double copy_s;      /* per expert copied */
    double cpu_s;       /* per expert computed on the CPU */
    double cpu_fixed_s; /* per layer step with any CPU expert (stays where it started) */
    long samples_copy, samples_cpu;
    int unused; /* consecutive calls that fetched all or none (ft_split_fetch_count) */
};

struct ft_split {
    enum ft_moe_mode mode;
    int n_layers;
    struct ft_split_costs *layer; /* [n_layers] */
    double alpha;                 /* running-average weight of a new sample (0.1) */
};

/* copy_s / cpu_s: initial guesses per expert (e.g. bytes / PCIe and bytes / DRAM bandwidth). */
enum ft_status ft_split_init(struct ft_split *s, enum ft_moe_mode mode, int n_layers,
                             double copy_s, double cpu_s, double cpu_fixed_s);
void ft_split_free(struct ft_split *s);
/* How many of m misses to fetch (the rest go to the CPU). After 64 calls of a layer in a row
 * that fetched all or none, one call moves one expert to the unused side, so that its estimate
 * cannot go stale. */
int ft_split_fetch_count(struct ft_split *s, int layer, int m);
/* Feedback from a finished step: n_copied experts took copy_s seconds; n_cpu took cpu_s
 * (of which the fixed part is taken to be the current estimate). Every estimate is a running
 * average whose samples are first held within [1/10, 3] times it (one stalled step cannot
 * swing the split). */
void ft_split_observe(struct ft_split *s, int layer, int n_copied, double copy_s, int n_cpu,
                      double cpu_s);
const char *ft_moe_mode_name(enum ft_moe_mode m);

#endif
