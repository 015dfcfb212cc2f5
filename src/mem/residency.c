/* residency.c — pin budget, pin probe, --moe-cpu-layers, and the per-layer pinned -> locked ->
 * pageable chain (docs/ARCHITECTURE.md section 4; issue 6). Engine thread for plan/apply/wait/free; one
 * background registration thread per plan; budget charges are atomic (any thread). Every
 * decision is logged through core/log; nothing here aborts a load. */
#define _GNU_SOURCE
#include "mem/residency.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "core/env.h"
#include "core/log.h"
#include "core/status.h"
#include "core/sys.h"
#include "core/timer.h"
#include "model/model.h"
#ifdef FT_HAVE_CUDA
#include "backend/cuda/pin.h"
#endif

#define GIB (1024.0 * 1024.0 * 1024.0)
static double gib(uint64_t b) { return (double)b / GIB; }

/* ---- parsing ---------------------------------------------------------------------------- */

enum ft_status ft_parse_size(const char *s, const char *what, uint64_t *out) {
    const char *p = s ? s : "";
    while (isspace((unsigned char)*p)) p++;
    char *end = NULL;
    errno = 0;
    double v = (*p == '-' || *p == '+') ? NAN : strtod(p, &end);
    if (end == p || errno || !isfinite(v) || v < 0) goto bad;
    /* strtod accepts hex and "inf"; only plain decimals here */
    for (const char *q = p; q < end; q++)
        if (!isdigit((unsigned char)*q) && *q != '.') goto bad;
    double unit = GIB;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': unit = 1024.0; break;
        case 'M': unit = 1024.0 * 1024.0; break;
        case 'G': unit = GIB; break;
        case 'T': unit = GIB * 1024.0; break;
        default: goto bad;
        }
        end++;
        if (!strcmp(end, "iB") || !strcmp(end, "ib") || !strcmp(end, "B") || !strcmp(end, "b"))
            end += strlen(end);
        if (*end) goto bad;
    }
    double bytes = floor(v * unit);
    if (bytes >= 18446744073709551615.0) goto bad;
    *out = (uint64_t)bytes;
    return FT_OK;
bad:
    return ft_fail(FT_ERR_INVALID_ARG,
                   "%s '%s': not a size (write e.g. 24G, 512M, 0.5T, or a plain number of GiB)",
                   what, s ? s : "");
}

enum ft_status ft_cpu_layers_parse(const char *s, struct ft_cpu_layers_spec *out) {
    memset(out, 0, sizeof *out);
    if (!s || !*s || !strcmp(s, "auto")) return FT_OK;
    const char *what = "--moe-cpu-layers";
    if (strchr(s, ',')) {
        out->mode = FT_CPU_LAYERS_IDS;
        const char *p = s;
        while (*p) {
            if (!isdigit((unsigned char)*p))
                return ft_fail(FT_ERR_INVALID_ARG, "%s '%s': expected a layer id at '%s' (write "
                               "ids as 3,7,11; a single id as 3,)", what, s, p);
            char *end;
            long id = strtol(p, &end, 10);
            if (id > 1000000)
                return ft_fail(FT_ERR_INVALID_ARG, "%s '%s': layer id %ld is out of range", what, s, id);
            for (int i = 0; i < out->n_ids; i++)
                if (out->ids[i] == id)
                    return ft_fail(FT_ERR_INVALID_ARG, "%s '%s': layer %ld is listed twice", what, s, id);
            if (out->n_ids == FT_CPU_LAYERS_MAX_IDS)
                return ft_fail(FT_ERR_INVALID_ARG, "%s: more than %d ids", what, FT_CPU_LAYERS_MAX_IDS);
            out->ids[out->n_ids++] = (int)id;
            p = end;
            if (*p == ',') p++;
            else if (*p) return ft_fail(FT_ERR_INVALID_ARG, "%s '%s': unexpected '%c'", what, s, *p);
        }
        return FT_OK;
    }
    int all_digits = 1, dots = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '.') dots++;
        else if (!isdigit((unsigned char)*p)) all_digits = 0;
    }
    if (!all_digits || dots > 1 || s[0] == '.' || s[strlen(s) - 1] == '.')
        return ft_fail(FT_ERR_INVALID_ARG, "%s '%s': expected auto, ids (3,7,11), a count (8), a "
                       "fraction (0.25) or 0", what, s);
    if (dots) {
        double f = strtod(s, NULL);
        if (f > 1.0)
            return ft_fail(FT_ERR_INVALID_ARG, "%s '%s': a fraction must be in [0, 1]", what, s);
        out->mode = f == 0.0 ? FT_CPU_LAYERS_NONE : FT_CPU_LAYERS_FRACTION;
        out->fraction = f;
        return FT_OK;
    }
    long n = strtol(s, NULL, 10);
    if (n > 1000000 || strlen(s) > 7)
        return ft_fail(FT_ERR_INVALID_ARG, "%s '%s': count out of range", what, s);
    out->mode = n == 0 ? FT_CPU_LAYERS_NONE : FT_CPU_LAYERS_COUNT;
    out->count = (int)n;
    return FT_OK;
}

void ft_cpu_layers_head_tail(int n_moe, int n, unsigned char *is_cpu) {
    n = FT_MAX(0, FT_MIN(n, n_moe));
    int head = (n + 1) / 2, tail = n / 2;
    for (int i = 0; i < head; i++) is_cpu[i] = 1;
    for (int i = 0; i < tail; i++) is_cpu[n_moe - 1 - i] = 1;
}

int ft_cpu_layers_auto_count(int n_moe, uint64_t banks, uint64_t budget) {
    if (n_moe <= 0 || banks <= budget) return 0;
    /* ceil(L * (banks - budget) / banks) without overflow or rounding: 128-bit product */
    unsigned __int128 num = (unsigned __int128)(unsigned)n_moe * (banks - budget);
    uint64_t n = (uint64_t)((num + banks - 1) / banks);
    return (int)FT_MIN(n, (uint64_t)n_moe);
}

/* "0-1,46-47" into buf from a 0/1 mask over model layers. */
static void format_ids(const unsigned char *mask, int n, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        if (!mask[i]) continue;
        int j = i;
        while (j + 1 < n && mask[j + 1]) j++;
        char part[32];
        if (j > i) snprintf(part, sizeof part, "%s%d-%d", len ? "," : "", i, j);
        else snprintf(part, sizeof part, "%s%d", len ? "," : "", i);
        if (len + strlen(part) + 4 >= cap) {
            snprintf(buf + len, cap - len, "...");
            return;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s", part);
        i = j;
    }
}

/* ---- pin backends ----------------------------------------------------------------------- */

static enum ft_status os_lock(void *ctx, void *ptr, size_t bytes) {
    (void)ctx;
    if (mlock(ptr, bytes) == 0) return FT_OK;
    return ft_fail(FT_ERR_OOM, "mlock(%.2f GiB): %s", gib(bytes), strerror(errno));
}

static void os_unlock(void *ctx, void *ptr, size_t bytes) {
    (void)ctx;
    munlock(ptr, bytes);
}

static const struct ft_pin_backend k_none = {
    .name = "none", .can_pin = 0, .lock = os_lock, .unlock = os_unlock,
};

const struct ft_pin_backend *ft_pin_backend_none(void) { return &k_none; }

/* --emulate-pin-cap: the wall the CUDA pinner (backend/cuda/pin.cu) enforces, and what the
 * budget's policy keys on. Process-wide, as a driver's wall is. */
static _Atomic uint64_t g_emulated_cap;

void ft_pin_set_emulated_cap(uint64_t bytes) {
    atomic_store(&g_emulated_cap, bytes);
#ifdef FT_HAVE_CUDA
    ft_cuda_pin_set_cap(bytes);
#endif
}

uint64_t ft_pin_emulated_cap(void) { return atomic_load(&g_emulated_cap); }

#ifdef FT_HAVE_CUDA
static enum ft_status cuda_pin(void *ctx, void *ptr, size_t bytes) {
    (void)ctx;
    return ft_cuda_host_register(ptr, bytes);
}
static void cuda_unpin(void *ctx, void *ptr, size_t bytes) {
    (void)ctx, (void)bytes;
    ft_cuda_host_unregister(ptr);
}
static void *cuda_probe_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    return ft_cuda_host_alloc_pinned(bytes);
}
static void cuda_probe_free(void *ctx, void *ptr, size_t bytes) {
    (void)ctx, (void)bytes;
    ft_cuda_free_host(ptr);
}
static void cuda_clear(void *ctx) {
    (void)ctx;
    ft_cuda_clear_error();
}
static void cuda_bind(void *ctx, int device) {
    (void)ctx;
    ft_cuda_bind_device(device);
}
static const struct ft_pin_backend k_cuda = {
    .name = "cuda", .can_pin = 1, .pin = cuda_pin, .unpin = cuda_unpin, .lock = os_lock,
    .unlock = os_unlock, .probe_alloc = cuda_probe_alloc, .probe_free = cuda_probe_free,
    .clear_error = cuda_clear, .bind = cuda_bind,
};
#endif

const struct ft_pin_backend *ft_pin_backend_default(void) {
#ifdef FT_HAVE_CUDA
    if (ft_cuda_pin_available()) return &k_cuda;
#endif
    return &k_none;
}

#ifdef FT_TESTING
static int fake_refuses(struct ft_pin_fake *f, uint64_t bytes) {
    int call = ++f->n_pin_calls;
    if (f->sticky || (f->fail_call && call == f->fail_call) ||
        (f->refuse_after_bytes && f->pinned_bytes + bytes > f->refuse_after_bytes)) {
        f->n_refused++;
        f->sticky = 1;
        return 1;
    }
    return 0;
}
static enum ft_status fake_pin(void *ctx, void *ptr, size_t bytes) {
    struct ft_pin_fake *f = ctx;
    if (*(const unsigned char *)ptr == 0) f->n_pin_saw_zero++;
    if (f->n_pin_refused) f->n_pin_after_refusal++;
    if (fake_refuses(f, bytes) && ++f->n_pin_refused)
        return ft_fail(FT_ERR_CUDA, "cudaHostRegister(%.2f GiB): out of memory (fake, call %d)",
                       gib(bytes), f->n_pin_calls);
    f->pinned_bytes += bytes;
    if (f->pinned_bytes > f->peak_pinned_bytes) f->peak_pinned_bytes = (uint64_t)f->pinned_bytes;
    return FT_OK;
}
static void fake_unpin(void *ctx, void *ptr, size_t bytes) {
    struct ft_pin_fake *f = ctx;
    (void)ptr;
    f->pinned_bytes -= bytes;
}
static enum ft_status fake_lock(void *ctx, void *ptr, size_t bytes) {
    struct ft_pin_fake *f = ctx;
    if (f->fail_lock) return ft_fail(FT_ERR_OOM, "mlock(%.2f GiB): fake refusal", gib(bytes));
    return os_lock(NULL, ptr, bytes);
}
static void *fake_probe_alloc(void *ctx, size_t bytes) {
    struct ft_pin_fake *f = ctx;
    if (fake_refuses(f, bytes)) return NULL;
    f->pinned_bytes += bytes;
    f->probe_bytes += bytes;
    if (f->pinned_bytes > f->peak_pinned_bytes) f->peak_pinned_bytes = (uint64_t)f->pinned_bytes;
    return (void *)(uintptr_t)0x1000; /* never dereferenced */
}
static void fake_probe_free(void *ctx, void *ptr, size_t bytes) {
    struct ft_pin_fake *f = ctx;
    (void)ptr;
    f->pinned_bytes -= bytes;
}
static void fake_clear(void *ctx) {
    struct ft_pin_fake *f = ctx;
    f->n_clears++;
    f->sticky = 0;
}

const struct ft_pin_backend *ft_pin_fake_init(struct ft_pin_fake *f, uint64_t refuse_after_bytes,
                                              int fail_call) {
    memset(f, 0, sizeof *f);
    f->refuse_after_bytes = refuse_after_bytes;
    f->fail_call = fail_call;
    f->be = (struct ft_pin_backend){
        .name = "fake", .can_pin = 1, .ctx = f, .pin = fake_pin, .unpin = fake_unpin,
        .lock = fake_lock, .unlock = os_unlock, .probe_alloc = fake_probe_alloc,
        .probe_free = fake_probe_free, .clear_error = fake_clear,
    };
    return &f->be;
}
#endif

/* ---- pin budget ------------------------------------------------------------------------- */

const char *ft_pin_source_name(enum ft_pin_source s) {
    static const char *const names[] = {"uncapped", "default", "probe", "env", "flag"};
    return (unsigned)s < 5 ? names[s] : "?";
}

uint64_t ft_pin_probe(const struct ft_pin_backend *be, uint64_t limit, uint64_t step, int *refused) {
    *refused = 0;
    if (!be->can_pin || !be->probe_alloc || step == 0) return 0;
    size_t cap = (size_t)(limit / step) + 1, n = 0;
    void **chunks = calloc(cap, sizeof *chunks);
    if (!chunks) return 0;
    uint64_t ok = 0;
    while (ok + step <= limit && n < cap) {
        void *c = be->probe_alloc(be->ctx, step);
        if (!c) {
            *refused = 1;
            break;
        }
        chunks[n++] = c;
        ok += step;
    }
    for (size_t i = 0; i < n; i++) be->probe_free(be->ctx, chunks[i], step);
    free(chunks);
    if (be->clear_error) be->clear_error(be->ctx); /* a refusal leaves a sticky CUDA error */
    return ok;
}

void ft_pin_wall_path(const struct ft_platform *p, uint64_t ram_bytes, uint64_t emulated_cap_bytes,
                      char *buf, size_t cap) {
    char dir[512], k[160], emu[40] = "";
    ft_env_cache_dir(dir, sizeof dir);
    ft_env_file_word(p->kernel[0] ? p->kernel : ft_platform_name(p->kind), k, sizeof k);
    if (emulated_cap_bytes)
        snprintf(emu, sizeof emu, "-emu%llu", (unsigned long long)(emulated_cap_bytes >> 20));
    snprintf(buf, cap, "%s/pinwall-%s-%llu%s.txt", dir, k, (unsigned long long)(ram_bytes >> 20), emu);
}

/* The remembered wall in bytes, 0 when none (or unreadable) */
static uint64_t wall_read(const char *path) {
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    unsigned long long w = 0;
    if (f) {
        if (fscanf(f, "pin-wall-bytes %llu", &w) != 1) w = 0;
        fclose(f);
    }
    return w;
}

static void wall_write(const char *path, uint64_t wall) {
    if (!path || !*path) return;
    ft_env_mkdirs(path);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "pin-wall-bytes %llu\n", (unsigned long long)wall);
        fclose(f);
    }
    if (!f) ft_log_warn("pin probe: cannot remember the wall in %s; the next start probes again", path);
}

/* The probe up to ceiling, never to a remembered wall; b's limit from it (keep: the limit when
 * nothing refuses) */
static void probe_budget(struct ft_pin_budget *b, const struct ft_pin_backend *be,
                         const struct ft_pin_budget_opts *o, const char *wall_path, uint64_t ceiling,
                         uint64_t keep) {
    const uint64_t step = o->probe_step_bytes ? o->probe_step_bytes : FT_PIN_PROBE_STEP;
    const uint64_t wall = wall_read(wall_path);
    b->limit_bytes = keep;
    if (wall && wall <= ceiling + step) { /* met before: below it, without probing */
        const uint64_t safe = wall > step ? wall - step : 0;
        b->limit_bytes = FT_MIN(keep, safe / 10 * 8);
        b->probe_ok_bytes = safe, b->probe_refused = 1;
        b->source = FT_PIN_SRC_PROBE;
        snprintf(b->wall_file, sizeof b->wall_file, "%s", wall_path);
        ft_log_info("pin probe: this machine's driver refused at %.2f GiB before (%s); keeping 80%% "
                    "of what stays below it, without probing", gib(wall), wall_path);
        return;
    }
    snprintf(b->wall_file, sizeof b->wall_file, "%s", wall_path ? wall_path : "");
    b->probe_ok_bytes = ft_pin_probe(be, ceiling, step, &b->probe_refused);
    if (b->probe_refused) {
        b->limit_bytes = b->probe_ok_bytes / 10 * 8;
        b->source = FT_PIN_SRC_PROBE;
        ft_log_info("pin probe: the driver refused after %.2f GiB (%.0f MiB steps); "
                    "keeping 80%%", gib(b->probe_ok_bytes), (double)step / (1 << 20));
        wall_write(wall_path, b->probe_ok_bytes + step);
    } else {
        ft_log_info("pin probe: %.2f GiB pinned without refusal; keeping %s", gib(b->probe_ok_bytes),
                    keep == b->default_bytes ? "the default (40% of RAM)" : "it");
    }
}

enum ft_status ft_pin_budget_init(struct ft_pin_budget *b, const struct ft_platform *p,
                                  const struct ft_pin_backend *be,
                                  const struct ft_pin_budget_opts *o) {
    static const struct ft_pin_budget_opts k_no_opts;
    if (!o) o = &k_no_opts;
    memset(b, 0, sizeof *b);
    b->limit_bytes = FT_PIN_UNLIMITED;
    b->source = FT_PIN_SRC_UNCAPPED;
    const char *env = o->env ? o->env : ft_env_str(FT_ENV_PIN_BUDGET_GB);
    enum ft_status st = FT_OK;
    const uint64_t ram = o->ram_bytes ? o->ram_bytes : ft_sys_ram_bytes();
    const uint64_t emu = be->can_pin ? (o->emulated_cap_bytes ? o->emulated_cap_bytes
                                                              : ft_pin_emulated_cap()) : 0;
    b->emulated_cap_bytes = emu;
    char wall_path[1024];
    if (o->wall_file) snprintf(wall_path, sizeof wall_path, "%s", o->wall_file);
    else ft_pin_wall_path(p, ram, emu, wall_path, sizeof wall_path);
    if (emu)
        ft_log_info("--emulate-pin-cap %.2f GiB: the %s pinner refuses past %.2f GiB pinned, as a "
                    "WSL2 driver's wall; the pin budget is chosen as on WSL2", gib(emu), be->name,
                    gib(emu));
    if (o->flag && !strncmp(o->flag, "probe:", 6)) { /* the user's ceiling, above the default */
        uint64_t ceiling = 0;
        FT_TRY(ft_parse_size(o->flag + 6, "--pin-budget probe:", &ceiling));
        b->default_bytes = p->kind == FT_PLATFORM_WSL2 || emu ? ram / 10 * 4 : 0;
        b->source = FT_PIN_SRC_FLAG;
        if (be->can_pin && !o->skip_probe) probe_budget(b, be, o, wall_path, ceiling, ceiling);
        else b->limit_bytes = ceiling;
    } else if (o->flag) {
        FT_TRY(ft_parse_size(o->flag, "--pin-budget", &b->limit_bytes));
        b->source = FT_PIN_SRC_FLAG;
    } else if (env && *env) {
        FT_TRY(ft_parse_size(env, "FREETOKEN_PIN_BUDGET_GB", &b->limit_bytes));
        b->source = FT_PIN_SRC_ENV;
    } else if (p->kind == FT_PLATFORM_WSL2 || emu) {
        b->default_bytes = ram / 10 * 4;
        b->limit_bytes = b->default_bytes;
        b->source = FT_PIN_SRC_DEFAULT;
        if (be->can_pin && !o->skip_probe) probe_budget(b, be, o, wall_path, b->default_bytes, b->default_bytes);
    }
    if (b->limit_bytes == FT_PIN_UNLIMITED)
        ft_log_info("pin budget unlimited (source: uncapped)");
    else
        ft_log_info("pin budget %.2f GiB (source: %s)", gib(b->limit_bytes),
                    ft_pin_source_name(b->source));
    return FT_OK;
fail:
    return st;
}

enum ft_status ft_pin_budget_charge(struct ft_pin_budget *b, uint64_t bytes, const char *what) {
    uint64_t used = atomic_load(&b->used_bytes);
    do {
        if (b->limit_bytes != FT_PIN_UNLIMITED && (used > b->limit_bytes ||
                                                   bytes > b->limit_bytes - used))
            return ft_fail(FT_ERR_OOM, "pin budget: %s needs %.2f GiB pinned but %.2f of %.2f GiB "
                           "(source: %s) is left; raise it with --pin-budget or "
                           "FREETOKEN_PIN_BUDGET_GB (docs/wsl.md)", what, gib(bytes),
                           gib(b->limit_bytes - FT_MIN(used, b->limit_bytes)),
                           gib(b->limit_bytes), ft_pin_source_name(b->source));
    } while (!atomic_compare_exchange_weak(&b->used_bytes, &used, used + bytes));
    return FT_OK;
}

void ft_pin_budget_release(struct ft_pin_budget *b, uint64_t bytes) {
    atomic_fetch_sub(&b->used_bytes, bytes);
}

uint64_t ft_pin_budget_available(const struct ft_pin_budget *b) {
    if (b->limit_bytes == FT_PIN_UNLIMITED) return FT_PIN_UNLIMITED;
    uint64_t used = atomic_load(&((struct ft_pin_budget *)b)->used_bytes);
    return used >= b->limit_bytes ? 0 : b->limit_bytes - used;
}

/* ---- the plan --------------------------------------------------------------------------- */

struct ft_residency_plan {
    struct ft_platform platform;
    struct ft_pin_budget budget;
    const struct ft_pin_backend *be;
    int n_layers, n_moe;
    struct ft_residency_layer *layers;   /* [n_layers] */
    uint64_t bank_bytes;
    int all_pinned;                      /* --moe-cpu-layers 0 */
    int device;                          /* bound on the registration thread */
    /* registration thread */
    struct ft_model *m;
    pthread_t thread;
    int started, applied;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int closing, stop;                   /* wait() called / free() called */
    int mlock_failed;
    int wall_met;                        /* the driver refused a pin: none is asked again */
    int64_t reg_ns, wait_ns; /* pinning and locking the banks; the loader's wait for it at the end */
};

const char *ft_residency_name(enum ft_residency r) {
    return r == FT_RES_PINNED ? "pinned" : r == FT_RES_LOCKED ? "locked" : "pageable";
}

/* Marks the CPU layers from the spec; fails on bad ids/counts and on "0" that cannot fit. */
static enum ft_status choose_cpu_layers(struct ft_residency_plan *p,
                                        const struct ft_cpu_layers_spec *s, const char *text) {
    int L = p->n_moe, n = 0;
    uint64_t avail = ft_pin_budget_available(&p->budget);
    unsigned char *pos_cpu = calloc((size_t)L + 1, 1);
    int *moe_ids = calloc((size_t)L + 1, sizeof *moe_ids);
    enum ft_status st = FT_OK;
    if (!pos_cpu || !moe_ids) {
        st = ft_fail(FT_ERR_OOM, "residency plan: out of memory");
        goto fail;
    }
    for (int l = 0, k = 0; l < p->n_layers; l++)
        if (p->layers[l].is_moe) moe_ids[k++] = l;
    switch (s->mode) {
    case FT_CPU_LAYERS_AUTO:
        n = ft_cpu_layers_auto_count(L, p->bank_bytes, avail);
        break;
    case FT_CPU_LAYERS_NONE:
        if (p->bank_bytes > avail) {
            st = ft_fail(FT_ERR_INVALID_ARG, "--moe-cpu-layers 0: the expert banks need %.2f GiB "
                         "pinned but the pin budget has %.2f GiB (source: %s); use "
                         "--moe-cpu-layers auto, or raise the budget with --pin-budget or "
                         "FREETOKEN_PIN_BUDGET_GB (docs/wsl.md)", gib(p->bank_bytes), gib(avail),
                         ft_pin_source_name(p->budget.source));
            goto fail;
        }
        break;
    case FT_CPU_LAYERS_COUNT:
        if (s->count > L) {
            st = ft_fail(FT_ERR_INVALID_ARG, "--moe-cpu-layers %s: the model has only %d MoE "
                         "layers", text, L);
            goto fail;
        }
        n = s->count;
        break;
    case FT_CPU_LAYERS_FRACTION: n = (int)floor(s->fraction * L + 0.5); break;
    case FT_CPU_LAYERS_IDS:
        for (int i = 0; i < s->n_ids; i++) {
            int id = s->ids[i];
            if (id >= p->n_layers || !p->layers[id].is_moe) {
                st = ft_fail(FT_ERR_INVALID_ARG, "--moe-cpu-layers %s: layer %d %s", text, id,
                             id >= p->n_layers ? "does not exist (the model has fewer layers)"
                                               : "is a dense layer (it has no experts)");
                goto fail;
            }
            p->layers[id].cpu = 1;
        }
        break;
    }
    if (s->mode != FT_CPU_LAYERS_IDS) {
        ft_cpu_layers_head_tail(L, n, pos_cpu);
        for (int k = 0; k < L; k++) p->layers[moe_ids[k]].cpu = pos_cpu[k];
    }
fail:
    free(pos_cpu);
    free(moe_ids);
    return st;
}

enum ft_status ft_residency_plan_sizes(int n_layers, const uint64_t *layer_bytes,
                                       const struct ft_residency_opts *o,
                                       struct ft_residency_plan **out) {
    static const struct ft_residency_opts k_no_opts;
    if (!o) o = &k_no_opts;
    *out = NULL;
    enum ft_status st = FT_OK;
    struct ft_cpu_layers_spec *spec = malloc(sizeof *spec);
    struct ft_residency_plan *p = calloc(1, sizeof *p);
    if (p) {
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
    }
    if (!p || !spec || !(p->layers = calloc((size_t)FT_MAX(n_layers, 1), sizeof *p->layers))) {
        st = ft_fail(FT_ERR_OOM, "residency plan: out of memory");
        goto fail;
    }
    FT_TRY(ft_cpu_layers_parse(o->cpu_layers, spec));
    if (o->platform) p->platform = *o->platform;
    else ft_platform_detect(&p->platform);
    ft_platform_log(&p->platform);
    p->be = o->backend ? o->backend : ft_pin_backend_default();
    p->device = o->device;
    if (p->be->bind) p->be->bind(p->be->ctx, p->device); /* the probe pins in its context */
    p->n_layers = n_layers;
    for (int l = 0; l < n_layers; l++) {
        p->layers[l].is_moe = layer_bytes[l] > 0;
        p->layers[l].bytes = layer_bytes[l];
        p->n_moe += p->layers[l].is_moe;
        p->bank_bytes += layer_bytes[l];
    }
    struct ft_pin_budget_opts bo = o->budget;
    bo.flag = o->pin_budget;
    FT_TRY(ft_pin_budget_init(&p->budget, &p->platform, p->be, &bo));
    const char *text = o->cpu_layers && *o->cpu_layers ? o->cpu_layers : "auto";
    if (!p->be->can_pin) {
        for (int l = 0; l < n_layers; l++) {
            p->layers[l].cpu = p->layers[l].is_moe;
            p->layers[l].want = p->layers[l].got = FT_RES_PAGEABLE;
        }
        if (p->n_moe)
            ft_log_info("residency: no GPU (pin backend %s): all %d MoE layers (%.2f GiB) stay in "
                        "host memory and decode on the CPU; --moe-cpu-layers does not apply",
                        p->be->name, p->n_moe, gib(p->bank_bytes));
        *out = p;
        free(spec);
        return FT_OK;
    }
    FT_TRY(choose_cpu_layers(p, spec, text));
    p->all_pinned = spec->mode == FT_CPU_LAYERS_NONE;
    unsigned char *mask = calloc((size_t)n_layers + 1, 1);
    int n_cpu = 0, head = 0;
    uint64_t gpu_bytes = 0;
    for (int l = 0; l < n_layers; l++) {
        struct ft_residency_layer *y = &p->layers[l];
        y->want = y->got = !y->is_moe ? FT_RES_PAGEABLE : y->cpu ? FT_RES_LOCKED : FT_RES_PINNED;
        if (y->is_moe && !y->cpu) gpu_bytes += y->bytes;
        if (mask && y->cpu) mask[l] = 1;
        n_cpu += y->cpu;
    }
    for (int l = 0; l < n_layers && (p->layers[l].cpu || !p->layers[l].is_moe); l++)
        head += p->layers[l].cpu;
    char ids[256] = "";
    if (mask) format_ids(mask, n_layers, ids, sizeof ids);
    free(mask);
    uint64_t avail = ft_pin_budget_available(&p->budget);
    if (spec->mode == FT_CPU_LAYERS_AUTO && n_cpu)
        ft_log_info("--moe-cpu-layers auto: banks %.2f GiB > pin budget %.2f GiB; %d of %d MoE "
                    "layers stay unpinned for CPU decode (head %d + tail %d: layers %s)",
                    gib(p->bank_bytes), gib(avail), n_cpu, p->n_moe, head, n_cpu - head, ids);
    else if (spec->mode != FT_CPU_LAYERS_AUTO && spec->mode != FT_CPU_LAYERS_NONE)
        ft_log_info("--moe-cpu-layers %s: %d of %d MoE layers decode their misses on the CPU (layers %s)", text,
                    n_cpu, p->n_moe, n_cpu ? ids : "none");
    if (gpu_bytes > avail)
        ft_log_warn("--moe-cpu-layers %s: the pinned layers need %.2f GiB but the pin budget has "
                    "%.2f GiB; layers that do not fit will be locked for the CPU instead", text,
                    gib(gpu_bytes), gib(avail));
    *out = p;
    free(spec);
    return FT_OK;
fail:
    free(spec);
    ft_residency_plan_free(p);
    return st;
}

enum ft_status ft_residency_plan(const struct ft_model *m, const struct ft_residency_opts *o,
                                 struct ft_residency_plan **out) {
    uint64_t *bytes = calloc((size_t)FT_MAX(m->n_layers, 1), sizeof *bytes);
    if (!bytes) return ft_fail(FT_ERR_OOM, "residency plan: out of memory");
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].is_moe)
            for (int f = 0; f < FT_BANK_N_FAMILIES; f++) bytes[l] += m->layers[l].bank[f].bytes;
    enum ft_status st = ft_residency_plan_sizes(m->n_layers, bytes, o, out);
    free(bytes);
    return st;
}

/* ---- applying --------------------------------------------------------------------------- */

/* Pins (or locks) every bank of layer l; on a refusal undoes what it did. */
/* Unpins (pin) or unlocks layer l's banks of the first n_fam families. */
static void release_banks(const struct ft_residency_plan *p, int l, int pin, int n_fam) {
    for (int f = 0; f < n_fam; f++) {
        struct ft_bank *b = &p->m->layers[l].bank[f];
        if (!b->base || !b->bytes) continue;
        if (pin) p->be->unpin(p->be->ctx, b->base, b->bytes);
        else p->be->unlock(p->be->ctx, b->base, b->bytes);
    }
}

static enum ft_status lock_banks(struct ft_residency_plan *p, int l, int pin) {
    struct ft_layer *L = &p->m->layers[l];
    const struct ft_pin_backend *be = p->be;
    enum ft_status st = FT_OK;
    int f = 0;
    for (; f < FT_BANK_N_FAMILIES; f++) {
        struct ft_bank *b = &L->bank[f];
        if (!b->base || !b->bytes) continue;
        st = pin ? be->pin(be->ctx, b->base, b->bytes) : be->lock(be->ctx, b->base, b->bytes);
        if (st != FT_OK) break;
    }
    if (st != FT_OK) release_banks(p, l, pin, f); /* the families before the one refused */
    return st;
}

static void memlock_limit_text(char *buf, size_t cap, uint64_t *limit) {
    struct rlimit r;
    if (getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) {
        snprintf(buf, cap, "unlimited");
        if (limit) *limit = UINT64_MAX;
        return;
    }
    snprintf(buf, cap, "%llu", (unsigned long long)(r.rlim_cur / 1024));
    if (limit) *limit = (uint64_t)r.rlim_cur;
}

/* Layer l's pin was refused below the budget: the driver's wall is at most what was charged
 * with it. Nothing past it is asked again: the budget becomes what is pinned now (the staging
 * ring and other buffers then fit or stay off), the later GPU layers are locked without asking,
 * and a probed budget remembers the wall (the lower of it and the one on file) for the next
 * start. */
static void wall_met(struct ft_residency_plan *p, int l) {
    struct ft_pin_budget *b = &p->budget;
    const uint64_t at = atomic_load(&b->used_bytes); /* with this layer's charge */
    char why[512];
    snprintf(why, sizeof why, "%s", ft_error());
    ft_pin_budget_release(b, p->layers[l].bytes);
    p->wall_met = 1;
    b->limit_bytes = atomic_load(&b->used_bytes);
    int later = 0;
    for (int k = l + 1; k < p->n_layers; k++) later += p->layers[k].is_moe && p->layers[k].want == FT_RES_PINNED;
    ft_log_info("layer %d: pinning %.2f GiB refused (%s); the layer moves to the CPU (mlock). No "
                "pin is asked past a refusal: the pin budget is now the %.2f GiB pinned, and %d "
                "later layers are locked for the CPU without asking", l, gib(p->layers[l].bytes),
                why, gib(b->limit_bytes), later);
    if (b->wall_file[0] && (b->source == FT_PIN_SRC_PROBE || b->source == FT_PIN_SRC_DEFAULT)) {
        const uint64_t known = wall_read(b->wall_file);
        if (!known || at < known) wall_write(b->wall_file, at);
    }
}

static void register_layer(struct ft_residency_plan *p, int l) {
    struct ft_residency_layer *y = &p->layers[l];
    const struct ft_pin_backend *be = p->be;
    /* a plan made from the checkpoint's sizes before loading: charge what the banks hold */
    uint64_t actual = 0;
    for (int f = 0; f < FT_BANK_N_FAMILIES; f++) actual += p->m->layers[l].bank[f].bytes;
    y->bytes = actual;
    if (y->want == FT_RES_PAGEABLE) {
        y->got = FT_RES_PAGEABLE;
        return;
    }
    if (y->want == FT_RES_PINNED && !p->wall_met) { /* (past a refusal: never asked again) */
        char what[64];
        snprintf(what, sizeof what, "layer %d expert banks", l);
        if (ft_pin_budget_charge(&p->budget, y->bytes, what) != FT_OK) {
            ft_log_info("layer %d: %s; the layer moves to the CPU (mlock)", l, ft_error());
        } else if (lock_banks(p, l, 1) != FT_OK) {
            wall_met(p, l);
            if (be->clear_error) be->clear_error(be->ctx);
        } else {
            y->got = FT_RES_PINNED;
            return;
        }
    }
    if (lock_banks(p, l, 0) == FT_OK) {
        y->got = FT_RES_LOCKED;
        return;
    }
    y->got = FT_RES_PAGEABLE;
    if (!p->mlock_failed) {
        char lim[32];
        memlock_limit_text(lim, sizeof lim, NULL);
        ft_log_warn("layer %d: %s; RLIMIT_MEMLOCK (`ulimit -l`) is %s%s: CPU layers stay in "
                    "pageable memory and may be swapped out; raise `ulimit -l` (docs/wsl.md)",
                    l, ft_error(), lim, strcmp(lim, "unlimited") ? " KiB" : "");
    }
    p->mlock_failed = 1;
}

static void *registration_thread(void *arg) {
    struct ft_residency_plan *p = arg;
    if (p->be->bind) p->be->bind(p->be->ctx, p->device);
    for (int l = 0; l < p->n_layers; l++) {
        struct ft_residency_layer *y = &p->layers[l];
        if (!y->is_moe) continue;
        pthread_mutex_lock(&p->mu);
        while (!y->filled && !p->closing && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        int filled = y->filled, stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        if (!filled) {
            y->got = FT_RES_PAGEABLE;
            ft_log_warn("layer %d: the loader never marked its banks filled; left pageable", l);
        } else {
            int64_t t0 = ft_time_ns();
            register_layer(p, l);
            p->reg_ns += ft_time_ns() - t0;
        }
        pthread_mutex_lock(&p->mu);
        y->done = 1;
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

enum ft_status ft_residency_apply_async(struct ft_residency_plan *p, struct ft_model *m) {
    if (p->started) return ft_fail(FT_ERR_INTERNAL, "residency: apply called twice");
    if (m->n_layers != p->n_layers)
        return ft_fail(FT_ERR_INTERNAL, "residency: plan for %d layers applied to a model of %d",
                       p->n_layers, m->n_layers);
    p->m = m;
    for (int l = 0; l < p->n_layers; l++) p->layers[l].got = FT_RES_PAGEABLE;
    if (pthread_create(&p->thread, NULL, registration_thread, p) != 0)
        return ft_fail(FT_ERR_INTERNAL, "residency: cannot start the registration thread");
    p->started = 1;
    return FT_OK;
}

void ft_residency_layer_filled(struct ft_residency_plan *p, int l) {
    if (!p || l < 0 || l >= p->n_layers) return;
    pthread_mutex_lock(&p->mu);
    p->layers[l].filled = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void ft_residency_all_filled(struct ft_residency_plan *p) {
    for (int l = 0; p && l < p->n_layers; l++) ft_residency_layer_filled(p, l);
}

static void count_classes(const struct ft_residency_plan *p, int use_got, int n[3], uint64_t b[3]) {
    memset(n, 0, 3 * sizeof *n);
    memset(b, 0, 3 * sizeof *b);
    for (int l = 0; l < p->n_layers; l++) {
        const struct ft_residency_layer *y = &p->layers[l];
        if (!y->is_moe) continue;
        int r = use_got ? y->got : y->want;
        n[r]++;
        b[r] += y->bytes;
    }
}

enum ft_status ft_residency_wait(struct ft_residency_plan *p) {
    if (!p->started) return ft_fail(FT_ERR_INTERNAL, "residency: wait without apply");
    int64_t t0 = ft_time_ns();
    pthread_mutex_lock(&p->mu);
    p->closing = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    p->wait_ns = ft_time_ns() - t0;
    p->started = 0;
    p->applied = 1;
    /* a plan made from the checkpoint's sizes now knows the banks' own (registration charged
     * those); "0" was checked against the estimate, so say so if a layer did not make it */
    p->bank_bytes = 0;
    for (int l = 0; l < p->n_layers; l++) {
        const struct ft_residency_layer *y = &p->layers[l];
        if (!y->is_moe) continue;
        p->bank_bytes += y->bytes;
        if (p->all_pinned && y->got != FT_RES_PINNED)
            ft_log_warn("--moe-cpu-layers 0: layer %d could not be pinned (%.2f GiB; pin budget "
                        "%.2f GiB charged of its limit); it decodes on the CPU", l, gib(y->bytes),
                        gib(atomic_load(&p->budget.used_bytes)));
    }
    int n[3];
    uint64_t b[3];
    count_classes(p, 1, n, b);
    unsigned char *mask = calloc((size_t)p->n_layers + 1, 1);
    char ids[3][256] = {"", "", ""};
    for (int r = 0; r < 3 && mask; r++) {
        for (int l = 0; l < p->n_layers; l++)
            mask[l] = p->layers[l].is_moe && (int)p->layers[l].got == r;
        format_ids(mask, p->n_layers, ids[r], sizeof ids[r]);
    }
    free(mask);
    char budget[64];
    if (p->budget.limit_bytes == FT_PIN_UNLIMITED) snprintf(budget, sizeof budget, "unlimited");
    else snprintf(budget, sizeof budget, "%.2f GiB", gib(p->budget.limit_bytes));
    ft_log_info("residency of %d MoE layers (pin backend %s, budget %s, %.2f GiB charged; "
                "pinning took %.1f s beside the load, %.1f s of it after):",
                p->n_moe, p->be->name, budget, gib(atomic_load(&p->budget.used_bytes)),
                p->reg_ns / 1e9, p->wait_ns / 1e9);
    for (int r = 0; r < 3; r++)
        ft_log_info("  %-8s %4d layers %9.2f GiB%s%s", ft_residency_name((enum ft_residency)r),
                    n[r], gib(b[r]), n[r] && r != FT_RES_PINNED ? "  layers " : "",
                    n[r] && r != FT_RES_PINNED ? ids[r] : "");
    /* the promise of issue 6: never cross the cap */
    if (p->budget.limit_bytes != FT_PIN_UNLIMITED && b[FT_RES_PINNED] > p->budget.limit_bytes)
        return ft_fail(FT_ERR_INTERNAL, "residency: %.2f GiB pinned exceeds the pin budget "
                       "%.2f GiB (a bug)", gib(b[FT_RES_PINNED]), gib(p->budget.limit_bytes));
    return FT_OK;
}

enum ft_status ft_residency_apply(struct ft_residency_plan *p, struct ft_model *m) {
    enum ft_status st = ft_residency_apply_async(p, m);
    if (st != FT_OK) return st;
    ft_residency_all_filled(p);
    return ft_residency_wait(p);
}

void ft_residency_plan_free(struct ft_residency_plan *p) {
    if (!p) return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    for (int l = 0; p->m && l < p->n_layers; l++) {
        struct ft_residency_layer *y = &p->layers[l];
        if (!y->is_moe || !y->done || y->got == FT_RES_PAGEABLE) continue;
        release_banks(p, l, y->got == FT_RES_PINNED, FT_BANK_N_FAMILIES);
        if (y->got == FT_RES_PINNED) ft_pin_budget_release(&p->budget, y->bytes);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->layers);
    free(p);
}

const struct ft_residency_layer *ft_residency_layer(const struct ft_residency_plan *p, int l) {
    return (p && l >= 0 && l < p->n_layers) ? &p->layers[l] : NULL;
}

int ft_residency_is_cpu_layer(const struct ft_residency_plan *p, int l) {
    const struct ft_residency_layer *y = ft_residency_layer(p, l);
    if (!y || !y->is_moe) return 0;
    return (p->applied ? y->got : y->want) != FT_RES_PINNED;
}

struct ft_pin_budget *ft_residency_budget(struct ft_residency_plan *p) { return &p->budget; }

const struct ft_platform *ft_residency_platform(const struct ft_residency_plan *p) {
    return &p->platform;
}

/* ---- reporting -------------------------------------------------------------------------- */

void ft_residency_get_stats(const struct ft_residency_plan *p, struct ft_residency_stats *out) {
    memset(out, 0, sizeof *out);
    out->platform = ft_platform_name(p->platform.kind);
    out->backend = p->be->name;
    out->budget_source = ft_pin_source_name(p->budget.source);
    out->budget_bytes = p->budget.limit_bytes;
    out->charged_bytes = atomic_load(&((struct ft_residency_plan *)p)->budget.used_bytes);
    out->bank_bytes = p->bank_bytes;
    out->n_moe_layers = p->n_moe;
    out->applied = p->applied;
    out->mlock_failed = p->mlock_failed;
    count_classes(p, p->applied, out->n_layers, out->bytes);
    char lim[32];
    memlock_limit_text(lim, sizeof lim, &out->memlock_limit_bytes);
    unsigned char *mask = calloc((size_t)p->n_layers + 1, 1);
    if (!mask) return;
    for (int l = 0; l < p->n_layers; l++) mask[l] = (unsigned char)ft_residency_is_cpu_layer(p, l);
    format_ids(mask, p->n_layers, out->cpu_layers, sizeof out->cpu_layers);
    free(mask);
}

size_t ft_residency_format(const struct ft_residency_plan *p, char *buf, size_t cap) {
    struct ft_residency_stats s;
    ft_residency_get_stats(p, &s);
    char budget[96], lim[32];
    if (s.budget_bytes == FT_PIN_UNLIMITED) snprintf(budget, sizeof budget, "unlimited (uncapped)");
    else snprintf(budget, sizeof budget, "%.2f GiB (source: %s)", gib(s.budget_bytes),
                  s.budget_source);
    memlock_limit_text(lim, sizeof lim, NULL);
    if (!s.n_moe_layers)
        return (size_t)snprintf(buf, cap, "residency     no expert banks (dense model)\n");
    return (size_t)snprintf(
        buf, cap,
        "platform      %s%s%s%s\n"
        "pin budget    %s, pin backend %s\n"
        "banks         %.2f GiB in %d MoE layers\n"
        "residency     %s%d pinned (%.2f GiB), %d locked (%.2f GiB), %d pageable (%.2f GiB)\n"
        "cpu layers    %s%s\n"
        "ulimit -l     %s%s\n",
        s.platform, p->platform.kind == FT_PLATFORM_WSL2 ? " (kernel " : "",
        p->platform.kind == FT_PLATFORM_WSL2 ? p->platform.kernel : "",
        p->platform.kind == FT_PLATFORM_WSL2 ? ")" : "", budget, s.backend, gib(s.bank_bytes),
        s.n_moe_layers, s.applied ? "" : "planned: ", s.n_layers[FT_RES_PINNED],
        gib(s.bytes[FT_RES_PINNED]), s.n_layers[FT_RES_LOCKED], gib(s.bytes[FT_RES_LOCKED]),
        s.n_layers[FT_RES_PAGEABLE], gib(s.bytes[FT_RES_PAGEABLE]),
        s.cpu_layers[0] ? s.cpu_layers : "none",
        s.cpu_layers[0] ? " (misses decoded on the CPU executor)" : "", lim,
        strcmp(lim, "unlimited") ? " KiB" : "");
}
