/* platform.h — which kind of host this is, for the residency manager (docs/ARCHITECTURE.md section 4):
 * native Linux (pinned memory uncapped) or WSL2 (the Windows driver caps pinned memory, and GPU
 * allocations go through the dxg bridge). Also: the VRAM margin to leave on this platform.
 * Called by mem/residency.c at load and by `ft inspect`. Any thread; no state. */
#ifndef FT_MEM_PLATFORM_H
#define FT_MEM_PLATFORM_H

#include <stdint.h>

enum ft_platform_kind { FT_PLATFORM_LINUX, FT_PLATFORM_WSL2 };

struct ft_platform {
    enum ft_platform_kind kind;
    char kernel[160];   /* kernel release ("5.15.90.1-microsoft-standard-WSL2") */
    int faked;          /* 1 when FT_TEST_KERNEL_RELEASE supplied it (FT_TESTING builds) */
};

/* WSL2 when the kernel release or /proc/version contains "microsoft" (any case) or "WSL".
 * FT_TESTING builds honour FT_TEST_KERNEL_RELEASE: a release string, or (when it starts with
 * '/') a file read in place of /proc/version, so tests can fake WSL2 on any machine. */
void ft_platform_detect(struct ft_platform *out);
/* Classifies a kernel release / version string the same way (for tests and tools). */
enum ft_platform_kind ft_platform_classify(const char *release_or_version);
const char *ft_platform_name(enum ft_platform_kind k);   /* "Linux" / "WSL2" */
/* Logs "platform: WSL2 (kernel 5.15.90.1-microsoft-standard-WSL2)" or "platform: Linux". */
void ft_platform_log(const struct ft_platform *p);

/* VRAM to leave unallocated on a GPU of total_bytes. WSL2: max(2 GiB, 8%) because every device
 * allocation goes through the dxg bridge and a refused one (dxgkio_make_resident: Ioctl failed:
 * -12) can take the whole WSL VM down; native Linux: max(512 MiB, 2%) for the driver, cuBLAS
 * workspaces and fragmentation. Big buffers are allocated once at load, never grown mid-serve. */
struct ft_vram_margin {
    uint64_t bytes;
    char reason[200];
};
/* Fills out and logs "vram margin X GiB (reason)". */
void ft_vram_margin(const struct ft_platform *p, uint64_t vram_total_bytes,
                    struct ft_vram_margin *out);

#endif
