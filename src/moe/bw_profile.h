/* bw_profile.h — the bandwidth profile `ft bench bw` measures and the hybrid split starts from
 * (docs/ARCHITECTURE.md section 6): host DRAM read, CPU-executor and copy-engine rates per expert format and
 * size, alone and while both run at once. Stored as JSON in the user's cache directory, keyed by
 * GPU name, CPU model, expert format and expert bytes. Any thread (no shared state). */
#ifndef FT_MOE_BW_PROFILE_H
#define FT_MOE_BW_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"

struct ft_bw_profile {
    char gpu[128], cpu[128], format[16];
    uint64_t expert_bytes;
    int threads;
    double dram_read_gbps;      /* host DRAM read, all threads */
    double cpu_expert_gbps;     /* CPU executor, k experts of one token, expert bytes / s */
    double cpu_fixed_s;         /* the executor's fixed cost per layer step */
    double pinned_h2d_gbps;     /* one large pinned host-to-device copy */
    double copy_dma_gbps, copy_gather_gbps; /* expert-sized copies by each path */
    double conc_cpu_expert_gbps, conc_copy_gbps; /* both at once */
};

/* Experts to rotate over when timing the executor, so that no step finds its weights in the
 * last-level cache: at least 64, and enough to span 3x the LLC (64 MXFP4 experts of
 * Qwen3-30B-A3B's shape, 160 MB, fit a 300 MiB L3 and measured the cache, not DRAM). */
int ft_bw_rotation_experts(uint64_t expert_bytes);

/* The file a profile with this key lives in ($FREETOKEN_CACHE, else $XDG_CACHE_HOME/freetoken,
 * else ~/.cache/freetoken). */
void ft_bw_profile_path(const struct ft_bw_profile *key, char *buf, size_t cap);
enum ft_status ft_bw_profile_save(const struct ft_bw_profile *p, char *path, size_t cap);
/* Loads the profile matching key's gpu/cpu/format/expert_bytes; FT_ERR_IO when there is none. */
enum ft_status ft_bw_profile_load(const struct ft_bw_profile *key, struct ft_bw_profile *out,
                                  char *path, size_t cap);

#endif
