/* bench_args.h — the flags the CPU benchmarks share (bench_cpu, bench_ggml):
 *   --mib M (bytes of weights), --k K (row length), --threads N (pool size, 0: physical
 *   cores), --reps R (best of R runs), --isa 0-3 (force a tier at or below the CPU's, at once).
 * bench_parse fills *a from argv over the defaults already in it; 0 on an unknown flag or a
 * flag without a value (the caller prints its usage). Header-only: each benchmark is one file
 * plus the library. */
#ifndef FT_BENCH_ARGS_H
#define FT_BENCH_ARGS_H

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"

struct bench_args {
    long mib, k;
    int threads, reps;
};

static inline int bench_parse(int argc, char **argv, struct bench_args *a) {
    for (int i = 1; i < argc; i += 2) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return 0;
        if (!strcmp(f, "--mib"))
            a->mib = atol(v);
        else if (!strcmp(f, "--k"))
            a->k = atol(v);
        else if (!strcmp(f, "--threads"))
            a->threads = atoi(v);
        else if (!strcmp(f, "--reps"))
            a->reps = atoi(v);
        else if (!strcmp(f, "--isa"))
            ft_cpu_set_isa((enum ft_cpu_isa)atoi(v));
        else
            return 0;
    }
    return 1;
}

#endif
