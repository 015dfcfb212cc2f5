/* sys.h — facts about the host: RAM, cores, WSL. Any thread. */
#ifndef FT_CORE_SYS_H
#define FT_CORE_SYS_H

#include <stddef.h>
#include <stdint.h>

uint64_t ft_sys_ram_bytes(void);   /* physical RAM */
int ft_sys_physical_cores(void);   /* physical cores (SMT siblings counted once), >= 1 */
int ft_sys_logical_cpus(void);     /* online logical CPUs, >= 1 */
/* One logical CPU per physical core among those this process may run on (sched_getaffinity),
 * in CPU order, into out[0..cap); returns how many (0 when the affinity cannot be read). */
int ft_sys_core_cpus(int *out, int cap);
/* The CPU's model name (/proc/cpuinfo), or "unknown CPU". */
void ft_sys_cpu_model(char *buf, size_t cap);
/* Bytes of the largest (last-level) CPU cache, from sysfs; 32 MiB when unknown. */
uint64_t ft_sys_llc_bytes(void);

/* A spin-wait loop's pause (PAUSE on x86: frees the sibling hyperthread's pipeline). */
static inline void ft_sys_pause(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

/* Page-aligned allocation (zeroed lazily by the kernel); free with ft_sys_free_pages. */
void *ft_sys_alloc_pages(size_t bytes);
void ft_sys_free_pages(void *p, size_t bytes);

#endif
