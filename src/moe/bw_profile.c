/* bw_profile.c — saving and loading `ft bench bw` profiles (JSON via jansson). */
#include "moe/bw_profile.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/status.h"
#include "core/sys.h"

void ft_bw_profile_path(const struct ft_bw_profile *key, char *buf, size_t cap) {
    char dir[512], g[96], c[96];
    ft_env_cache_dir(dir, sizeof dir);
    ft_env_file_word(key->gpu, g, sizeof g);
    ft_env_file_word(key->cpu, c, sizeof c);
    snprintf(buf, cap, "%s/bw-%s-%s-%s-%llu.json", dir, g, c, key->format,
             (unsigned long long)key->expert_bytes);
}


enum ft_status ft_bw_profile_save(const struct ft_bw_profile *p, char *path, size_t cap) {
    ft_bw_profile_path(p, path, cap);
    ft_env_mkdirs(path);
    json_t *j = json_pack(
        "{s:i, s:s, s:s, s:s, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:{s:f, s:f}}", "version", 1,
        "gpu", p->gpu, "cpu", p->cpu, "format", p->format, "expert_bytes",
        (json_int_t)p->expert_bytes, "threads", p->threads, "dram_read_gbps", p->dram_read_gbps,
        "cpu_expert_gbps", p->cpu_expert_gbps, "cpu_fixed_s", p->cpu_fixed_s, "pinned_h2d_gbps",
        p->pinned_h2d_gbps, "copy_dma_gbps", p->copy_dma_gbps, "copy_gather_gbps",
        p->copy_gather_gbps, "concurrent", "cpu_expert_gbps", p->conc_cpu_expert_gbps,
        "copy_gbps", p->conc_copy_gbps);
    int rc = j ? json_dump_file(j, path, JSON_INDENT(1)) : -1;
    json_decref(j);
    if (rc != 0)
        return ft_fail(FT_ERR_IO, "%s: cannot write the bandwidth profile: %s (set "
                       "FREETOKEN_CACHE to a writable directory)", path, strerror(errno));
    return FT_OK;
}

enum ft_status ft_bw_profile_load(const struct ft_bw_profile *key, struct ft_bw_profile *out,
                                  char *path, size_t cap) {
    ft_bw_profile_path(key, path, cap);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) return ft_fail(FT_ERR_IO, "%s: no bandwidth profile (run `ft bench bw`)", path);
    memset(out, 0, sizeof *out);
    *out = *key;
    double cc = 0, cg = 0;
    int ok = json_unpack(j, "{s:F, s:F, s:F, s:F, s:F, s:F, s:F, s:{s:F, s:F}}", "dram_read_gbps",
                         &out->dram_read_gbps, "cpu_expert_gbps", &out->cpu_expert_gbps,
                         "cpu_fixed_s", &out->cpu_fixed_s, "pinned_h2d_gbps",
                         &out->pinned_h2d_gbps, "copy_dma_gbps", &out->copy_dma_gbps,
                         "copy_gather_gbps", &out->copy_gather_gbps, "dram_read_gbps",
                         &out->dram_read_gbps, "concurrent", "cpu_expert_gbps", &cc, "copy_gbps",
                         &cg) == 0;
    json_decref(j);
    if (!ok || !(out->cpu_expert_gbps > 0))
        return ft_fail(FT_ERR_FORMAT, "%s: not a valid bandwidth profile (run `ft bench bw` "
                       "again)", path);
    out->conc_cpu_expert_gbps = cc;
    out->conc_copy_gbps = cg;
    return FT_OK;
}

int ft_bw_rotation_experts(uint64_t expert_bytes) {
    uint64_t need = 3 * ft_sys_llc_bytes(), n = expert_bytes ? (need + expert_bytes - 1) / expert_bytes : 64;
    return n < 64 ? 64 : n > 4096 ? 4096 : (int)n;
}
