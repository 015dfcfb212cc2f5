/* platform.c — WSL2 detection (uname, /proc/version, FT_TESTING override) and the VRAM margin.
 * Any thread; reads procfs and the environment, keeps no state. */
#define _GNU_SOURCE
#include "mem/platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "core/env.h"
#include "core/log.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

enum ft_platform_kind ft_platform_classify(const char *s) {
    if (!s) return FT_PLATFORM_LINUX;
    return (strcasestr(s, "microsoft") || strstr(s, "WSL")) ? FT_PLATFORM_WSL2 : FT_PLATFORM_LINUX;
}

const char *ft_platform_name(enum ft_platform_kind k) {
    return k == FT_PLATFORM_WSL2 ? "WSL2" : "Linux";
}

/* First line of a file into buf (newline stripped); 0 on success. */
static int read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *ok = fgets(buf, (int)cap, f);
    fclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\n")] = 0;
    return 0;
}

void ft_platform_detect(struct ft_platform *out) {
    memset(out, 0, sizeof *out);
    char version[512] = "";
    const char *version_path = "/proc/version";
    struct utsname u;
    if (uname(&u) == 0) snprintf(out->kernel, sizeof out->kernel, "%s", u.release);
#ifdef FT_TESTING
    const char *fake = ft_env_str(FT_ENV_TEST_KERNEL_RELEASE);
    if (fake && *fake) {
        out->faked = 1;
        if (fake[0] == '/') {
            version_path = fake;
            out->kernel[0] = 0; /* the fake file is the whole truth */
        } else {
            snprintf(out->kernel, sizeof out->kernel, "%s", fake);
            version_path = NULL;
        }
    }
#endif
    if (version_path && read_line(version_path, version, sizeof version) != 0) version[0] = 0;
    if (!out->kernel[0] && version[0]) {
        /* "Linux version 5.15.90.1-microsoft-standard-WSL2 (...)": take the release word */
        const char *v = strstr(version, "version ");
        v = v ? v + 8 : version;
        size_t n = strcspn(v, " ");
        snprintf(out->kernel, sizeof out->kernel, "%.*s", (int)FT_MIN(n, sizeof out->kernel - 1), v);
    }
    out->kind = (ft_platform_classify(out->kernel) == FT_PLATFORM_WSL2 ||
                 ft_platform_classify(version) == FT_PLATFORM_WSL2)
                    ? FT_PLATFORM_WSL2
                    : FT_PLATFORM_LINUX;
}

void ft_platform_log(const struct ft_platform *p) {
    if (p->kind == FT_PLATFORM_WSL2)
        ft_log_info("platform: WSL2 (kernel %s)", p->kernel[0] ? p->kernel : "unknown");
    else
        ft_log_info("platform: Linux");
}

void ft_vram_margin(const struct ft_platform *p, uint64_t total, struct ft_vram_margin *out) {
    memset(out, 0, sizeof *out);
    if (p->kind == FT_PLATFORM_WSL2) {
        out->bytes = FT_MAX((uint64_t)2 << 30, total / 100 * 8);
        snprintf(out->reason, sizeof out->reason,
                 "WSL2: max(2 GiB, 8%% of %.1f GiB); GPU allocations go through the dxg bridge, "
                 "whose failure can stop the WSL VM", (double)total / GIB);
    } else {
        out->bytes = FT_MAX((uint64_t)512 << 20, total / 100 * 2);
        snprintf(out->reason, sizeof out->reason,
                 "Linux: max(512 MiB, 2%% of %.1f GiB) for the driver and workspaces",
                 (double)total / GIB);
    }
    if (total && out->bytes > total) out->bytes = total;
    ft_log_info("vram margin %.2f GiB (%s)", (double)out->bytes / GIB, out->reason);
}
