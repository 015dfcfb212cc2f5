/* sys.c — host facts from sysfs/procfs. Any thread. */
#define _GNU_SOURCE
#include "core/sys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

uint64_t ft_sys_ram_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return (pages > 0 && psz > 0) ? (uint64_t)pages * (uint64_t)psz : 0;
}

int ft_sys_logical_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* (package, core) of logical CPU c from sysfs; -1 when unknown */
static long core_key(int c) {
    char path[128];
    long core = -1, pkg = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (fscanf(f, "%ld", &core) != 1) core = -1;
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
    if ((f = fopen(path, "r"))) {
        if (fscanf(f, "%ld", &pkg) != 1) pkg = 0;
        fclose(f);
    }
    return core < 0 ? -1 : pkg * 1000000 + core;
}

/* Counts distinct (package, core) pairs in sysfs; falls back to logical CPUs. */
int ft_sys_physical_cores(void) {
    int n_cpu = ft_sys_logical_cpus();
    int n = 0;
    long *seen = calloc((size_t)n_cpu, sizeof *seen);
    if (!seen) return n_cpu;
    for (int c = 0; c < n_cpu; c++) {
        long key = core_key(c);
        if (key < 0) continue;
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= seen[i] == key;
        if (!dup) seen[n++] = key;
    }
    free(seen);
    return n > 0 ? n : n_cpu;
}

int ft_sys_core_cpus(int *out, int cap) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    int n = 0;
    long *keys = calloc((size_t)(cap > 0 ? cap : 1), sizeof *keys);
    if (!keys) return 0;
    for (int c = 0; c < CPU_SETSIZE && n < cap; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        long k = core_key(c);
        int dup = 0;
        for (int i = 0; i < n && k >= 0; i++) dup |= keys[i] == k;
        if (dup) continue; /* an SMT sibling of a core already taken */
        keys[n] = k;
        out[n++] = c;
    }
    free(keys);
    return n;
}

void ft_sys_cpu_model(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = 0;
        snprintf(buf, cap, "%s", c);
        break;
    }
    fclose(f);
}

uint64_t ft_sys_llc_bytes(void) {
    uint64_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            unsigned long long v = strtoull(buf, &end, 10);
            v *= *end == 'K' ? 1024ull : *end == 'M' ? 1048576ull : *end == 'G' ? 1073741824ull : 1ull;
            if (v > best) best = v;
        }
        fclose(f);
    }
    return best ? best : (uint64_t)32 << 20;
}

void *ft_sys_alloc_pages(size_t bytes) {
    if (bytes == 0) bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    /* expert banks: transparent huge pages where the kernel offers them ("madvise" mode), so
     * the first touch faults 2 MiB at a time and the executor's streams miss the TLB less;
     * advice only (ignored where unsupported) */
    if (bytes >= ((size_t)4 << 20)) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

void ft_sys_free_pages(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 1);
}

