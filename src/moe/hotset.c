/* hotset.c — saving, loading and ranking the expert cache's hot set (see hotset.h). */
#include "moe/hotset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/status.h"

#define HOTSET_MAGIC 0x53485446u /* "FTHS" little-endian */
#define HOTSET_VERSION 1u

void ft_hotset_path(const char *label, int n_layers, int n_experts, uint64_t expert_bytes,
                    char *buf, size_t cap) {
    char dir[512], w[160];
    ft_env_cache_dir(dir, sizeof dir);
    ft_env_file_word(label, w, sizeof w);
    snprintf(buf, cap, "%s/hot-%s-%dx%d-%llu.bin", dir, w, n_layers, n_experts,
             (unsigned long long)expert_bytes);
}

enum ft_status ft_hotset_save(const struct ft_hotset *h, const char *path) {
    ft_env_mkdirs(path);
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path); /* a crash mid-write leaves the old file */
    FILE *f = fopen(tmp, "wb");
    const uint32_t hd[4] = {HOTSET_MAGIC, HOTSET_VERSION, (uint32_t)h->n_layers, (uint32_t)h->n_experts};
    const size_t n = (size_t)h->n_layers * h->n_experts;
    int ok = f && fwrite(hd, sizeof hd, 1, f) == 1 && fwrite(&h->expert_bytes, 8, 1, f) == 1 &&
             fwrite(h->count, sizeof *h->count, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return ft_fail(FT_ERR_IO, "%s: cannot write the expert hot set: %s (set FREETOKEN_CACHE to "
                       "a writable directory)", path, strerror(e));
    }
    return FT_OK;
}

enum ft_status ft_hotset_load(const char *path, int n_layers, int n_experts, uint64_t expert_bytes,
                              struct ft_hotset *h) {
    memset(h, 0, sizeof *h);
    FILE *f = fopen(path, "rb");
    if (!f) return ft_fail(FT_ERR_IO, "%s: no expert hot set yet", path);
    uint32_t hd[4];
    uint64_t eb = 0;
    const size_t n = (size_t)n_layers * n_experts;
    float *c = malloc((n ? n : 1) * sizeof *c);
    int ok = c && fread(hd, sizeof hd, 1, f) == 1 && fread(&eb, 8, 1, f) == 1 &&
             hd[0] == HOTSET_MAGIC && hd[1] == HOTSET_VERSION && hd[2] == (uint32_t)n_layers &&
             hd[3] == (uint32_t)n_experts && eb == expert_bytes && fread(c, sizeof *c, n, f) == n &&
             fgetc(f) == EOF;
    for (size_t i = 0; ok && i < n; i++) ok = c[i] >= 0 && c[i] < 1e30f; /* no NaN, no garbage */
    fclose(f);
    if (!ok) {
        free(c);
        return ft_fail(FT_ERR_FORMAT, "%s: not an expert hot set of this model (%d layers, %d "
                       "experts); delete it, the next run writes a new one", path, n_layers, n_experts);
    }
    h->n_layers = n_layers, h->n_experts = n_experts, h->expert_bytes = expert_bytes, h->count = c;
    return FT_OK;
}

void ft_hotset_free(struct ft_hotset *h) {
    free(h->count);
    memset(h, 0, sizeof *h);
}

int ft_hotset_top(const struct ft_hotset *h, const uint8_t *skip, int n, int32_t *keys) {
    int m = 0;
    const int total = h->n_layers * h->n_experts;
    for (int k = 0; k < total; k++) { /* insertion into the sorted top n */
        const float v = h->count[k];
        if (!(v > 0) || (skip && skip[k / h->n_experts])) continue;
        if (m == n && !(v > h->count[keys[m - 1]])) continue;
        int i = m < n ? m++ : n - 1;
        for (; i > 0 && v > h->count[keys[i - 1]]; i--) keys[i] = keys[i - 1];
        keys[i] = k;
    }
    return m;
}
