/* opts.c — flag parsing helpers for the subcommands. */
#include "cli/opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "engine/generate.h"
#include "server/sse.h"
#include "engine/gpu.h"
#include "format/hfconfig.h"
#include "mem/residency.h"
#include "moe/cache.h"

int ft_cli_exit_code(enum ft_status st) {
    switch (st) {
    case FT_OK: return 0;
    case FT_ERR_INVALID_ARG:
    case FT_ERR_IO:
    case FT_ERR_FORMAT:
    case FT_ERR_UNSUPPORTED: return 2;
    default: return 1;
    }
}

int ft_cli_fail(enum ft_status st) {
    fprintf(stderr, "ft: %s\n", ft_error()[0] ? ft_error() : ft_status_str(st));
    return ft_cli_exit_code(st);
}

int ft_cli_usage_error(const char *cmd, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ft %s: %s (try: ft %s --help)\n", cmd, buf, cmd);
    return 2;
}

const char *ft_cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "ft %s: option %s needs a value\n", argv[0], argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int ft_cli_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int ft_cli_num(const char *cmd, int argc, char **argv, int *i, long lo, long hi, long *out) {
    const char *a = argv[*i], *v = ft_cli_value(argc, argv, i);
    if (!v) return -1;
    if (ft_cli_int(v, lo, hi, out)) {
        ft_cli_usage_error(cmd, "%s: '%s' is not a number in [%ld, %ld]", a, v, lo, hi);
        return -1;
    }
    return 0;
}

int ft_cli_double(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end) return -1;
    *out = v;
    return 0;
}

enum ft_status ft_cli_ids(const char *s, int32_t **ids, int *n) {
    int cap = 16, k = 0;
    int32_t *a = malloc((size_t)cap * sizeof *a);
    const char *p = s;
    if (!a) return ft_fail(FT_ERR_OOM, "out of memory");
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(a);
            return ft_fail(FT_ERR_INVALID_ARG, "--ids: '%s' is not a comma-separated list of "
                           "token ids (e.g. --ids 1,2,3)", s);
        }
        if (k == cap) {
            int32_t *b = realloc(a, (size_t)(cap *= 2) * sizeof *a);
            if (!b) {
                free(a);
                return ft_fail(FT_ERR_OOM, "out of memory");
            }
            a = b;
        }
        a[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(a);
        return ft_fail(FT_ERR_INVALID_ARG, "--ids: empty list (e.g. --ids 1,2,3)");
    }
    *ids = a;
    *n = k;
    return FT_OK;
}

const char ft_cli_sampling_usage[] =
    "  --temp T            temperature (0 = greedy; default from generation_config.json)\n"
    "  --top-k K  --top-p P  --min-p P   filters (defaults from generation_config.json)\n"
    "  --repeat-penalty R  --presence-penalty P  --frequency-penalty F\n"
    "  --seed N            sampling seed (same seed, same output)\n"
    "  --stop STR          stop string (repeatable, up to 8)\n"
    "  --ignore-eos        do not stop at the end-of-sequence token\n";

void ft_cli_sampling_defaults(const struct ft_config *c, struct ft_gen_params *p) {
    p->sampling = ft_sampling_default();
    const struct ft_gen_defaults *g = &c->gen;
    int sample = g->do_sample == 1 || (g->do_sample == -1 && g->has_temperature);
    p->sampling.temperature = sample ? (g->has_temperature ? g->temperature : 1.0f) : 0.0f;
    if (g->has_top_p) p->sampling.top_p = g->top_p;
    if (g->has_top_k) p->sampling.top_k = g->top_k;
    if (g->has_repetition_penalty) p->sampling.repetition_penalty = g->repetition_penalty;
}

static int float_flag(const char *cmd, const char *flag, const char *v, float *out) {
    double d;
    if (!v || ft_cli_double(v, &d)) {
        fprintf(stderr, "ft %s: %s: '%s' is not a number\n", cmd, flag, v ? v : "");
        return -1;
    }
    *out = (float)d;
    return 1;
}

/* The sampling fields a flag can set; bit k of ft_cli_sampling.given is k_sampling_fields[k]. */
#define SAMPLING_FIELD(f) offsetof(struct ft_sampling, f), sizeof(((struct ft_sampling *)0)->f)
static const struct {
    const char *flag, *alias;
    size_t off, size;
    long int_max; /* 0: a float field */
} k_sampling_fields[] = {
    {"--temp", "--temperature", SAMPLING_FIELD(temperature), 0},
    {"--top-p", NULL, SAMPLING_FIELD(top_p), 0},
    {"--min-p", NULL, SAMPLING_FIELD(min_p), 0},
    {"--repeat-penalty", NULL, SAMPLING_FIELD(repetition_penalty), 0},
    {"--presence-penalty", NULL, SAMPLING_FIELD(presence_penalty), 0},
    {"--frequency-penalty", NULL, SAMPLING_FIELD(frequency_penalty), 0},
    {"--top-k", NULL, SAMPLING_FIELD(top_k), 1 << 24},
    {"--seed", NULL, SAMPLING_FIELD(seed), 0x7fffffffL},
};
enum { N_SAMPLING_FIELDS = sizeof k_sampling_fields / sizeof k_sampling_fields[0] };

/* If argv[*i] is a sampling/stop flag, consumes it (and its value) into s and returns 1;
 * 0 if it is not one, -1 (after printing) on a bad value. */
static int sampling_flag(const char *cmd, int argc, char **argv, int *i, struct ft_cli_sampling *s) {
    const char *a = argv[*i];
    struct ft_gen_params *p = &s->p;
    if (!strcmp(a, "--ignore-eos")) {
        p->ignore_eos = 1;
        return 1;
    }
    if (!strcmp(a, "--stop")) {
        const char *v = ft_cli_value(argc, argv, i);
        if (!v || !*v || p->n_stop == FT_MAX_STOP) {
            fprintf(stderr, "ft %s: --stop needs a non-empty string (at most %d)\n", cmd, FT_MAX_STOP);
            return -1;
        }
        p->stop[p->n_stop++] = v;
        return 1;
    }
    int k = 0;
    while (k < N_SAMPLING_FIELDS && strcmp(a, k_sampling_fields[k].flag) &&
           !(k_sampling_fields[k].alias && !strcmp(a, k_sampling_fields[k].alias)))
        k++;
    if (k == N_SAMPLING_FIELDS) return 0;
    const char *v = ft_cli_value(argc, argv, i);
    char *field = (char *)&p->sampling + k_sampling_fields[k].off;
    long n, max = k_sampling_fields[k].int_max;
    if (!max) {
        if (float_flag(cmd, a, v, (float *)field) < 0) return -1;
    } else if (!v || ft_cli_int(v, 0, max, &n)) {
        fprintf(stderr, "ft %s: %s: '%s' is not a non-negative integer\n", cmd, a, v ? v : "");
        return -1;
    } else if (k_sampling_fields[k].size == sizeof p->sampling.seed) {
        p->sampling.seed = (uint64_t)n;
    } else {
        p->sampling.top_k = (int)n;
    }
    s->given |= 1u << k;
    return 1;
}

void ft_cli_apply_sampling(const struct ft_cli_sampling *s, struct ft_gen_params *p) {
    for (int k = 0; k < N_SAMPLING_FIELDS; k++) {
        if (!(s->given & (1u << k))) continue;
        size_t off = k_sampling_fields[k].off;
        memcpy((char *)&p->sampling + off, (const char *)&s->p.sampling + off, k_sampling_fields[k].size);
    }
    if (s->p.ignore_eos) p->ignore_eos = 1;
    for (int k = 0; k < s->p.n_stop && p->n_stop < FT_MAX_STOP; k++) p->stop[p->n_stop++] = s->p.stop[k];
}

const char ft_cli_backend_usage[] =
    "  --backend B         cpu, cuda, offload or auto (default: cuda when the model fits the\n"
    "                      GPU, offload when a MoE model does not, else cpu)\n"
    "  --device N          CUDA device (default 0)\n"
    "  --vram-limit SIZE   device memory the engine may use, e.g. 24G (emulate a smaller card)\n"
    "  --no-graphs         run GPU decode steps eagerly instead of replaying CUDA graphs\n"
    "  --backend offload   experts stay in host RAM; a GPU cache of slots holds the hot ones:\n"
    "  --moe-cache-size N / --moe-cache-rate F   slots (default: what fits --vram-limit)\n"
    "  --moe-cache-policy lru|lfru|slru|markov  eviction (default lru; bench/RESULTS.md)\n"
    "  --moe-prefetch N    decode: copy up to N experts a layer ahead, those the next layer's\n"
    "                      router predicts from the current hidden state (default 0: off)\n"
    "  --no-hot-set        start the cache empty, not from the experts earlier runs used most\n"
    "  --verify-copies off|sample|all   checksum copied experts (default sample on WSL2)\n"
    "  --copy-path auto|dma|gather      expert copy path (default: the faster at startup)\n"
    "  --moe-backend hybrid|offload|cpu  misses: split between PCIe and the CPU by measured\n"
    "                      cost (default), all fetched, or all computed on the CPU\n"
    "  --moe-cpu-threads N  the CPU executor's threads, pinned one per core (default: cores)\n"
    "  --pin-budget SIZE|probe:SIZE / --moe-cpu-layers auto|IDS|N|F|0   host pinning (README:\n"
    "                      Host memory; probe:SIZE probes the driver up to SIZE)\n"
    "  --emulate-pin-cap SIZE  refuse pins past SIZE, as WSL2's driver does (docs/wsl.md)\n"
    "  --cpu-act fast|f32  activations rounded as llama.cpp does (default): int8 for GGML\n"
    "                      blocks (CPU; GPU: some expert formats), bf16 for bf16 weights\n"
    "                      (CPU); f32: exact\n";

int ft_cli_size(const char *s, size_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0)) return -1;
    double mul = 1024.0 * 1024.0 * 1024.0;
    if (*end) {
        switch (*end) {
        case 'K': case 'k': mul = 1024.0; break;
        case 'M': case 'm': mul = 1024.0 * 1024.0; break;
        case 'G': case 'g': mul = 1024.0 * 1024.0 * 1024.0; break;
        case 'T': case 't': mul = 1024.0 * 1024.0 * 1024.0 * 1024.0; break;
        default: return -1;
        }
        if (end[1] && strcmp(end + 1, "B") && strcmp(end + 1, "iB") && strcmp(end + 1, "b")) return -1;
    }
    *out = (size_t)(v * mul);
    return 0;
}

int ft_cli_cpu_act(const char *cmd, const char *v) {
    if (!strcmp(v, "fast")) return 1;
    if (!strcmp(v, "f32")) return 0;
    fprintf(stderr, "ft %s: --cpu-act: '%s' is not fast or f32\n", cmd, v);
    return -1;
}

/* --emulate-pin-cap SIZE: the CUDA pinner's wall, set at once (process-wide, as a driver's
 * wall is; the residency manager reads it when the model loads). 1 taken, -1 a one-line error
 * naming the flag: a bad size, the cpu backend (either flag may come first), no GPU to pin for. */
static int emulate_pin_cap(const char *cmd, const char *v, const struct ft_engine_opts *eo,
                           int backend_auto) {
    size_t b = 0;
    if (ft_cli_size(v, &b) || b < ((size_t)1 << 28)) {
        fprintf(stderr, "ft %s: --emulate-pin-cap: '%s' is not a size of at least 256M (e.g. 1G, "
                "8G)\n", cmd, v);
        return -1;
    }
    if (!backend_auto && eo->backend == FT_BACKEND_CPU) {
        fprintf(stderr, "ft %s: --emulate-pin-cap: the cpu backend pins nothing; use --backend "
                "offload (or drop --emulate-pin-cap)\n", cmd);
        return -1;
    }
#ifndef FT_HAVE_CUDA
    fprintf(stderr, "ft %s: --emulate-pin-cap: this build has no CUDA, so nothing is pinned; "
            "build with -DFT_CUDA=ON (or drop the flag)\n", cmd);
    return -1;
#else
    if (!ft_gpu_available()) {
        fprintf(stderr, "ft %s: --emulate-pin-cap: no CUDA device here, so nothing is pinned "
                "(drop the flag)\n", cmd);
        return -1;
    }
    ft_pin_set_emulated_cap((uint64_t)b);
    return 1;
#endif
}

int ft_cli_backend_flag(const char *cmd, int argc, char **argv, int *i, struct ft_engine_opts *eo,
                        int *backend_auto) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--no-graphs")) {
        eo->no_graphs = 1;
        return 1;
    }
    if (!strcmp(a, "--no-hot-set")) {
        eo->hot_set = 0;
        return 1;
    }
    if (strcmp(a, "--backend") && strcmp(a, "--device") && strcmp(a, "--vram-limit") &&
        strcmp(a, "--moe-cache-size") && strcmp(a, "--moe-cache-rate") &&
        strcmp(a, "--verify-copies") && strcmp(a, "--copy-path") && strcmp(a, "--moe-backend") &&
        strcmp(a, "--pin-budget") && strcmp(a, "--moe-cpu-layers") && strcmp(a, "--cpu-act") &&
        strcmp(a, "--moe-cpu-threads") && strcmp(a, "--moe-cache-policy") && strcmp(a, "--moe-prefetch") &&
        strcmp(a, "--emulate-pin-cap"))
        return 0;
    if (!(v = ft_cli_value(argc, argv, i))) return -1;
    if (!strcmp(a, "--emulate-pin-cap")) return emulate_pin_cap(cmd, v, eo, *backend_auto);
    if (!strcmp(a, "--backend")) {
        *backend_auto = !strcmp(v, "auto");
        if (!strcmp(v, "cpu") && ft_pin_emulated_cap()) {
            fprintf(stderr, "ft %s: --emulate-pin-cap: the cpu backend pins nothing; use --backend "
                    "offload (or drop --emulate-pin-cap)\n", cmd);
            return -1;
        }
        if (!strcmp(v, "cpu")) eo->backend = FT_BACKEND_CPU;
        else if (!strcmp(v, "cuda") || !strcmp(v, "gpu")) eo->backend = FT_BACKEND_CUDA;
        else if (!strcmp(v, "offload")) eo->backend = FT_BACKEND_OFFLOAD;
        else if (!*backend_auto) {
            fprintf(stderr, "ft %s: --backend: '%s' is not cpu, cuda, offload or auto\n", cmd, v);
            return -1;
        }
    } else if (!strcmp(a, "--moe-cache-size")) {
        long n;
        if (ft_cli_int(v, 1, 1L << 30, &n)) {
            fprintf(stderr, "ft %s: --moe-cache-size: '%s' is not a number of slots\n", cmd, v);
            return -1;
        }
        eo->moe_cache_slots = (int)n;
    } else if (!strcmp(a, "--moe-prefetch")) {
        long n;
        if (ft_cli_int(v, 0, FT_PREFETCH_MAX, &n)) {
            fprintf(stderr, "ft %s: --moe-prefetch: '%s' is not a number of experts from 0 to %d\n",
                    cmd, v, FT_PREFETCH_MAX);
            return -1;
        }
        eo->moe_prefetch = (int)n;
    } else if (!strcmp(a, "--moe-cache-policy")) {
        if (!ft_cache_policy_find(v)) {
            fprintf(stderr, "ft %s: --moe-cache-policy: '%s' is not lru, lfru or slru\n", cmd, v);
            return -1;
        }
        eo->cache_policy = v;
    } else if (!strcmp(a, "--moe-cache-rate")) {
        double f;
        if (ft_cli_double(v, &f) || !(f > 0 && f <= 1)) {
            fprintf(stderr, "ft %s: --moe-cache-rate: '%s' is not a fraction in (0, 1]\n", cmd, v);
            return -1;
        }
        eo->moe_cache_rate = f;
    } else if (!strcmp(a, "--verify-copies")) {
        eo->verify_copies = !strcmp(v, "off") ? 0 : !strcmp(v, "sample") ? 1 : !strcmp(v, "all") ? 2 : -2;
        if (eo->verify_copies == -2) {
            fprintf(stderr, "ft %s: --verify-copies: '%s' is not off, sample or all\n", cmd, v);
            return -1;
        }
    } else if (!strcmp(a, "--pin-budget")) {
        size_t b;
        if (ft_cli_size(!strncmp(v, "probe:", 6) ? v + 6 : v, &b)) {
            fprintf(stderr, "ft %s: --pin-budget: '%s' is not a size (e.g. 24G, 512M) or probe:SIZE "
                    "(probe the driver up to SIZE)\n", cmd, v);
            return -1;
        }
        eo->pin_budget = v;
    } else if (!strcmp(a, "--moe-cpu-threads")) {
        long n;
        if (ft_cli_int(v, 1, 4096, &n)) {
            fprintf(stderr, "ft %s: --moe-cpu-threads: '%s' is not a number of threads\n", cmd, v);
            return -1;
        }
        eo->moe_cpu_threads = (int)n;
    } else if (!strcmp(a, "--cpu-act")) {
        if ((eo->cpu_act_fast = ft_cli_cpu_act(cmd, v)) < 0) return -1;
    } else if (!strcmp(a, "--moe-cpu-layers")) {
        eo->cpu_layers = v; /* checked against the model by the residency manager */
    } else if (!strcmp(a, "--moe-backend")) {
        eo->moe_mode = !strcmp(v, "offload") ? 0 : !strcmp(v, "cpu") ? 1
                     : !strcmp(v, "hybrid") || !strcmp(v, "auto") ? 2 : -1;
        if (eo->moe_mode < 0) {
            fprintf(stderr, "ft %s: --moe-backend: '%s' is not hybrid, offload, cpu or auto\n", cmd, v);
            return -1;
        }
    } else if (!strcmp(a, "--copy-path")) {
        eo->copy_path = !strcmp(v, "auto") ? 0 : !strcmp(v, "dma") ? 1 : !strcmp(v, "gather") ? 2 : -1;
        if (eo->copy_path < 0) {
            fprintf(stderr, "ft %s: --copy-path: '%s' is not auto, dma or gather\n", cmd, v);
            return -1;
        }
    } else if (!strcmp(a, "--device")) {
        long d;
        if (ft_cli_int(v, 0, 64, &d)) {
            fprintf(stderr, "ft %s: --device: '%s' is not a device number\n", cmd, v);
            return -1;
        }
        eo->device = (int)d;
    } else if (ft_cli_size(v, &eo->vram_limit) || eo->vram_limit < ((size_t)1 << 28)) {
        fprintf(stderr, "ft %s: --vram-limit: '%s' is not a size of at least 256M (e.g. 24G)\n", cmd, v);
        return -1;
    }
    return 1;
}

void ft_cli_backend_resolve(struct ft_engine_opts *eo, int backend_auto) {
    if (backend_auto) eo->backend = ft_gpu_available() ? FT_BACKEND_CUDA : FT_BACKEND_CPU;
    eo->backend_auto = backend_auto;
}

void ft_cli_backend_init(struct ft_engine_opts *be, int *backend_auto) {
    memset(be, 0, sizeof *be);
    ft_pin_set_emulated_cap(0); /* until --emulate-pin-cap */
    be->verify_copies = -1;
    be->moe_mode = 2;     /* hybrid */
    be->hot_set = 1;      /* ft bench turns it off: its runs must not depend on earlier ones */
    be->moe_prefetch = 0; /* off: bench/RESULTS.md, next-layer prefetch (not a win on every trace) */
    be->cpu_act_fast = 1; /* the CLI's default; a zeroed ft_engine_opts is exact fp32 */
    *backend_auto = 1;
}

void ft_cli_backend_apply(struct ft_engine_opts *eo, const struct ft_engine_opts *be,
                          int backend_auto) {
    eo->backend = be->backend;
    eo->device = be->device;
    eo->vram_limit = be->vram_limit;
    eo->no_graphs = be->no_graphs;
    eo->moe_cache_slots = be->moe_cache_slots;
    eo->moe_cache_rate = be->moe_cache_rate;
    eo->verify_copies = be->verify_copies;
    eo->copy_path = be->copy_path;
    eo->moe_mode = be->moe_mode;
    eo->pin_budget = be->pin_budget;
    eo->cpu_layers = be->cpu_layers;
    eo->cpu_act_fast = be->cpu_act_fast;
    eo->moe_cpu_threads = be->moe_cpu_threads;
    eo->cache_policy = be->cache_policy;
    eo->hot_set = be->hot_set;
    eo->moe_prefetch = be->moe_prefetch;
    ft_cli_backend_resolve(eo, backend_auto);
}

int ft_cli_engine_flag(const char *cmd, int argc, char **argv, int *i, struct ft_engine_opts *be,
                       int *backend_auto, struct ft_cli_sampling *sampling) {
    int r = ft_cli_backend_flag(cmd, argc, argv, i, be, backend_auto);
    return r != 0 ? r : sampling_flag(cmd, argc, argv, i, sampling);
}

/* ---- gpt-oss harmony output in the terminal ---- */

static int harmony_out(struct ft_cli_harmony *h, struct ft_sbuf *r, struct ft_sbuf *c) {
    int rc = 0;
    if (r->n) fwrite(r->p, 1, r->n, stderr), fflush(stderr);
    rc = h->inner(h->inner_ctx, c->p ? c->p : "", c->n); /* even empty: it checks for Ctrl-C */
    ft_sbuf_free(r);
    ft_sbuf_free(c);
    return rc;
}

void ft_cli_harmony_begin(struct ft_cli_harmony *h, const char *template_name,
                          struct ft_gen_params *p, ft_gen_emit_fn inner, void *inner_ctx) {
    *h = (struct ft_cli_harmony){.inner = inner, .inner_ctx = inner_ctx};
    h->on = template_name && !strcmp(template_name, "harmony");
    if (!h->on || !(h->th = malloc(sizeof(struct ft_think)))) {
        h->on = 0;
        return;
    }
    ft_think_init(h->th, 0, 1);
    p->keep_special = 1;
}

int ft_cli_harmony_emit(void *ctx, const char *text, size_t len) {
    struct ft_cli_harmony *h = ctx;
    if (!h->on) return h->inner(h->inner_ctx, text, len);
    struct ft_sbuf r = {0}, c = {0};
    ft_think_push(h->th, text, len, &r, &c);
    return harmony_out(h, &r, &c);
}

void ft_cli_harmony_end(struct ft_cli_harmony *h) {
    if (!h->on) return;
    struct ft_sbuf r = {0}, c = {0};
    ft_think_flush(h->th, &r, &c);
    harmony_out(h, &r, &c);
    ft_think_free(h->th);
    free(h->th);
    h->on = 0;
}
