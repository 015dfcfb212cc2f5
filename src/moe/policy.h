/* policy.h — the per-layer fetch-vs-compute split of the hybrid backend (docs/ARCHITECTURE.md section 6):
 * of a step's M missing experts, fetch F over PCIe into cache slots and compute M - F on the
 * CPU, concurrently, choosing F to minimise the slower side. The costs are learnt while the
 * engine runs (running averages per layer): seconds to copy one expert, and seconds of CPU time
 * per expert twice, with copies running beside the CPU and without: the copies read the same
 * DRAM the CPU experts stream, so fetching one of four misses can cost the CPU more than it
 * saves (a split pricing the CPU at one rate fell ~10% below the cpu backend; this one stays
 * within 5% of the better of cpu and offload: bench/RESULTS.md). The CPU side's fixed cost per
 * layer stays where it starts (the bw profile's, or 50 us). Pure C; engine thread only. */
#ifndef FT_MOE_POLICY_H
#define FT_MOE_POLICY_H

#include "ft.h"

enum ft_moe_mode { FT_MOE_OFFLOAD, FT_MOE_CPU, FT_MOE_HYBRID };

struct ft_split_costs {
    double copy_s;      /* per expert copied */
    double cpu_s;       /* per expert computed on the CPU while copies run beside it */
    double cpu_solo_s;  /* per expert computed on the CPU with no copies beside it */
    double cpu_fixed_s; /* per layer step with any CPU expert (stays where it started) */
    long samples_copy, samples_cpu, samples_solo;
    int unused;   /* consecutive calls that fetched all or none (ft_split_fetch_count) */
    int fetching; /* consecutive calls that fetched some but not all */
};

struct ft_split {
    enum ft_moe_mode mode;
    int n_layers;
    struct ft_split_costs *layer; /* [n_layers] */
    double alpha;                 /* running-average weight of a new sample (0.1) */
};

/* copy_s / cpu_s / cpu_solo_s: initial guesses per expert (e.g. bytes / PCIe and bytes / DRAM
 * bandwidth, the CPU's with copies beside it and without). */
enum ft_status ft_split_init(struct ft_split *s, enum ft_moe_mode mode, int n_layers,
                             double copy_s, double cpu_s, double cpu_solo_s, double cpu_fixed_s);
void ft_split_free(struct ft_split *s);
/* How many of m misses to fetch (the rest go to the CPU): the F of least
 * F = 0:  m * cpu_solo + fixed
 * F > 0:  max(F * copy, (m - F) * cpu + fixed [F < m]).
 * So that no estimate goes stale: after 64 calls of a layer in a row that fetched all or none,
 * one call moves one expert to the unused side; after 64 that fetched some but not all (8
 * while the CPU alone has fewer than 8 samples), one call fetches none. */
int ft_split_fetch_count(struct ft_split *s, int layer, int m);
/* Feedback from a finished step: n experts took `seconds` to copy; n experts took `seconds` on
 * the CPU (of which the fixed part is taken to be the current estimate), beside_copies: while
 * this step's copies ran. Every estimate is a running average whose samples are first held
 * within [1/10, 3] times it (one stalled step cannot swing the split); its first 8 samples
 * are averaged with the starting guess. */
void ft_split_observe_copy(struct ft_split *s, int layer, int n, double seconds);
void ft_split_observe_cpu(struct ft_split *s, int layer, int n, double seconds, int beside_copies);
const char *ft_moe_mode_name(enum ft_moe_mode m);

#endif
