/* residency.h — where each MoE layer's host expert banks live (docs/ARCHITECTURE.md section 4).
 *
 * One pin budget per engine (every pinned byte, banks or other buffers, is charged to it), and a
 * per-layer chain pinned -> locked (mlock) -> pageable. Layers that end up unpinned ("CPU
 * layers") never copy a miss in decode: the CPU executor computes it (their experts that prefill
 * brought into the GPU cache still serve hits there); pinned layers feed the GPU expert cache.
 *
 *   struct ft_residency_plan *plan;
 *   FT_TRY(ft_residency_plan(m, &opts, &plan));     // banks allocated (filled or not)
 *   FT_TRY(ft_residency_apply_async(plan, m));      // starts the registration thread
 *   for each MoE layer l: fill its banks; ft_residency_layer_filled(plan, l);
 *   FT_TRY(ft_residency_wait(plan));                // joins, logs the table
 *   ... ft_residency_layer(plan, l)->got says PINNED / LOCKED / PAGEABLE
 *   ft_residency_plan_free(plan);                   // BEFORE freeing the banks (unpins)
 *
 * Threading: plan/apply/wait/free on the engine thread; one background thread per plan does the
 * registrations; ft_residency_layer_filled and ft_pin_budget_charge/_release may be called from
 * any thread. Nothing here aborts a load: a refused pin or mlock moves that layer down the chain
 * with a log line; only bad flags (and "--moe-cpu-layers 0" that cannot fit) are errors. */
#ifndef FT_MEM_RESIDENCY_H
#define FT_MEM_RESIDENCY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ft.h"
#include "mem/platform.h"

struct ft_model;

/* ---- parsing ---------------------------------------------------------------------------- */

/* "24G", "512M", "0.5T", "64K", "24GiB", "24GB", or a plain number of GiB ("24", "1.5").
 * Binary units. FT_ERR_INVALID_ARG naming `what` ("--pin-budget") on anything else. */
enum ft_status ft_parse_size(const char *s, const char *what, uint64_t *out_bytes);

#define FT_CPU_LAYERS_MAX_IDS 1024
enum ft_cpu_layers_mode {
    FT_CPU_LAYERS_AUTO,     /* "auto" (default): head/tail layers when banks exceed the budget */
    FT_CPU_LAYERS_NONE,     /* "0": every MoE layer pinned, error if the budget cannot hold them */
    FT_CPU_LAYERS_IDS,      /* "3,7,11" (a single id: "3,"): those layer indices */
    FT_CPU_LAYERS_COUNT,    /* "8": that many MoE layers, head/tail like auto */
    FT_CPU_LAYERS_FRACTION, /* "0.25": round(f * MoE layers), head/tail like auto */
};
struct ft_cpu_layers_spec {
    enum ft_cpu_layers_mode mode;
    int count;                        /* COUNT */
    double fraction;                  /* FRACTION, in (0, 1] */
    int n_ids;                        /* IDS */
    int ids[FT_CPU_LAYERS_MAX_IDS];   /* IDS: model layer indices, as written */
};
/* Parses the grammar above; NULL or "" is auto. */
enum ft_status ft_cpu_layers_parse(const char *s, struct ft_cpu_layers_spec *out);
/* The n layers taken from n_moe MoE layers (positions 0..n_moe-1): head = ceil(n/2) from the
 * start, tail = floor(n/2) from the end (so an odd n takes the extra one from the head).
 * Writes 1 into is_cpu[pos] for each; n is clamped to [0, n_moe]. */
void ft_cpu_layers_head_tail(int n_moe, int n, unsigned char *is_cpu);
/* n = ceil(n_moe * (1 - budget/banks)) when banks > budget, else 0 (exact integer arithmetic). */
int ft_cpu_layers_auto_count(int n_moe, uint64_t banks_bytes, uint64_t budget_bytes);

/* ---- pin backend ------------------------------------------------------------------------ */

/* How memory is page-locked. The real ones: "cuda" (cudaHostRegister; FT_HAVE_CUDA and a
 * device) and "none" (no GPU: pinning does not apply, every layer is a host layer). Tests pass
 * a fake. Any callback may be NULL when can_pin is 0. */
struct ft_pin_backend {
    const char *name;
    int can_pin;  /* 0: no GPU; nothing is pinned or probed, layers stay plain host memory */
    void *ctx;
    /* page-lock + map for the GPU; FT_ERR_* with ft_error() set on refusal */
    enum ft_status (*pin)(void *ctx, void *ptr, size_t bytes);
    void (*unpin)(void *ctx, void *ptr, size_t bytes);
    /* OS lock (mlock); FT_ERR_* with ft_error() set (errno text) on refusal */
    enum ft_status (*lock)(void *ctx, void *ptr, size_t bytes);
    void (*unlock)(void *ctx, void *ptr, size_t bytes);
    /* probe: allocate `bytes` of pinned memory (NULL on refusal), free it, clear sticky error */
    void *(*probe_alloc)(void *ctx, size_t bytes);
    void (*probe_free)(void *ctx, void *ptr, size_t bytes);
    void (*clear_error)(void *ctx);
    /* make `device` current for the calling thread (may be NULL): the probe and the
     * registration thread pin in the context of the GPU the engine will use */
    void (*bind)(void *ctx, int device);
};
/* "cuda" when built with CUDA and a device exists, else "none". Static storage. */
const struct ft_pin_backend *ft_pin_backend_default(void);
const struct ft_pin_backend *ft_pin_backend_none(void);

#ifdef FT_TESTING
/* A fake pinner (docs/ARCHITECTURE.md section 7 fault injection): pin succeeds until it would exceed
 * refuse_after_bytes (0 = never refuses), and the fail_call-th pin call (1-based, 0 = never)
 * fails regardless; a refusal leaves a "sticky error" that clear_error must clear (the next
 * pin fails while it is set, like CUDA). lock is the real mlock unless fail_lock. */
struct ft_pin_fake {
    uint64_t refuse_after_bytes;
    int fail_call;
    int fail_lock;
    /* counters */
    _Atomic uint64_t pinned_bytes, peak_pinned_bytes, probe_bytes;
    _Atomic int n_pin_calls, n_refused, n_clears, sticky;
    _Atomic int n_pin_saw_zero;  /* pins of a bank whose first byte was 0 (not filled yet) */
    _Atomic int n_pin_refused;   /* pin (registration, not probe) calls refused */
    _Atomic int n_pin_after_refusal; /* pin calls made after a pin call was refused */
    struct ft_pin_backend be;
};
/* Initialises f (zeroing counters) and returns &f->be. */
const struct ft_pin_backend *ft_pin_fake_init(struct ft_pin_fake *f, uint64_t refuse_after_bytes,
                                              int fail_call);
#endif

/* ---- pin budget ------------------------------------------------------------------------- */

enum ft_pin_source { FT_PIN_SRC_UNCAPPED, FT_PIN_SRC_DEFAULT, FT_PIN_SRC_PROBE, FT_PIN_SRC_ENV,
                     FT_PIN_SRC_FLAG };
const char *ft_pin_source_name(enum ft_pin_source s); /* "uncapped", "default", ... */

#define FT_PIN_UNLIMITED UINT64_MAX
#define FT_PIN_PROBE_STEP ((uint64_t)256 << 20)

/* --emulate-pin-cap SIZE (every build; 0 = off): the CUDA pinner of this process refuses a
 * registration or pinned allocation that would hold more than SIZE pinned at once, as a WSL2
 * driver's wall does, and the budget is chosen as on WSL2 (40% of RAM, probed; the wall is
 * remembered under its own name). Process-wide, like the driver's wall; set before the model
 * loads (cli/opts.c). Nothing else of WSL2 (copy verification, VRAM margin) is emulated. */
void ft_pin_set_emulated_cap(uint64_t bytes);
uint64_t ft_pin_emulated_cap(void);

/* Every pinned byte of one engine. limit_bytes == FT_PIN_UNLIMITED when uncapped. */
struct ft_pin_budget {
    uint64_t limit_bytes;
    enum ft_pin_source source;
    uint64_t default_bytes;       /* 40% of RAM on WSL2 (0 on native) */
    uint64_t probe_ok_bytes;      /* what the probe pinned before its first refusal */
    int probe_refused;            /* 1 if the probe met a refusal */
    uint64_t emulated_cap_bytes;  /* --emulate-pin-cap in force, 0 = none */
    char wall_file[1024];         /* where a wall met is remembered ("" = nowhere, or the budget
                                     was not probed: flag, env, native Linux) */
    _Atomic uint64_t used_bytes;  /* charged now */
};

struct ft_pin_budget_opts {
    const char *flag;         /* --pin-budget value (SIZE, or probe:SIZE: probe up to SIZE), NULL
                                 = unset */
    const char *env;          /* FREETOKEN_PIN_BUDGET_GB value; NULL = read the environment */
    uint64_t ram_bytes;       /* 0 = detect (tests fake it) */
    int skip_probe;           /* 1: never probe (ft inspect) */
    uint64_t probe_step_bytes;/* 0 = FT_PIN_PROBE_STEP */
    const char *wall_file;    /* where the machine's pin wall is remembered: NULL = the profile
                                 directory's pinwall-<kernel>-<RAM>[-emu<cap>].txt
                                 (ft_pin_wall_path), "" = nowhere */
    uint64_t emulated_cap_bytes; /* the pinner's emulated wall; 0 = ft_pin_emulated_cap() */
};
/* The file this machine's pin wall (the pinned bytes at which the driver first refused) is
 * kept in: keyed by the kernel release and the RAM, so a new .wslconfig probes afresh, and by
 * an emulated cap (emulated_cap_bytes > 0: "-emu<MiB>"), so an emulated wall never stands for
 * the real one. */
void ft_pin_wall_path(const struct ft_platform *p, uint64_t ram_bytes, uint64_t emulated_cap_bytes,
                      char *buf, size_t cap);
/* Chooses the budget: flag > env > platform (WSL2, or any host under an emulated cap: 40% of
 * RAM, refined by the probe when the backend can pin; Linux: uncapped). The probe pins in small
 * steps up to the default (or the ceiling of --pin-budget probe:SIZE, on any platform) and
 * never up to a wall a probe met before on this machine: a remembered wall W gives 80% of W
 * less a step without probing; a refusal is remembered. Logs "pin budget X GiB (source: S)"
 * once. */
enum ft_status ft_pin_budget_init(struct ft_pin_budget *b, const struct ft_platform *p,
                                  const struct ft_pin_backend *be,
                                  const struct ft_pin_budget_opts *o);
/* The one-time probe: pins probe_alloc(step) chunks until limit_bytes or the first refusal,
 * frees them all, clears the sticky error. Returns the bytes that succeeded; *refused = 1 if
 * it stopped on a refusal. */
uint64_t ft_pin_probe(const struct ft_pin_backend *be, uint64_t limit_bytes, uint64_t step_bytes,
                      int *refused);
/* Charges bytes about to be pinned; FT_ERR_OOM naming `what`, the budget and the knobs when it
 * would exceed the limit (nothing is charged then). Any thread. */
enum ft_status ft_pin_budget_charge(struct ft_pin_budget *b, uint64_t bytes, const char *what);
void ft_pin_budget_release(struct ft_pin_budget *b, uint64_t bytes);
uint64_t ft_pin_budget_available(const struct ft_pin_budget *b);

/* ---- the plan --------------------------------------------------------------------------- */

enum ft_residency { FT_RES_PINNED, FT_RES_LOCKED, FT_RES_PAGEABLE };
const char *ft_residency_name(enum ft_residency r); /* "pinned", "locked", "pageable" */

struct ft_residency_opts {
    const char *pin_budget;       /* --pin-budget, NULL = unset */
    const char *cpu_layers;       /* --moe-cpu-layers, NULL = auto */
    const struct ft_pin_backend *backend;  /* NULL = ft_pin_backend_default() */
    const struct ft_platform *platform;    /* NULL = ft_platform_detect() */
    struct ft_pin_budget_opts budget;      /* .flag is taken from pin_budget */
    int device;                            /* --device: the GPU whose context pins */
};

struct ft_residency_layer {
    int is_moe;
    uint64_t bytes;            /* both banks */
    int cpu;                   /* planned CPU layer (want LOCKED) */
    enum ft_residency want;    /* PINNED for GPU layers, LOCKED for CPU layers */
    enum ft_residency got;     /* after apply; == want unless something refused */
    int filled;                /* loader said the banks are filled */
    int done;                  /* registration thread finished this layer */
};

struct ft_residency_plan;

/* Plans from allocated banks (m->layers[l].bank[f].bytes; filling may come later). */
enum ft_status ft_residency_plan(const struct ft_model *m, const struct ft_residency_opts *o,
                                 struct ft_residency_plan **out);
/* Plans from sizes only (ft inspect): layer_bytes[l] = bank bytes of layer l, 0 if dense. */
enum ft_status ft_residency_plan_sizes(int n_layers, const uint64_t *layer_bytes,
                                       const struct ft_residency_opts *o,
                                       struct ft_residency_plan **out);
/* Unpins/unlocks whatever was registered (joins the thread first). Accepts NULL. */
void ft_residency_plan_free(struct ft_residency_plan *p);

/* Starts the registration thread; it handles layer l once ft_residency_layer_filled(p, l)
 * (pinning an unfilled lazy mapping would zero-fill it first). m must outlive the plan. */
enum ft_status ft_residency_apply_async(struct ft_residency_plan *p, struct ft_model *m);
void ft_residency_layer_filled(struct ft_residency_plan *p, int layer);
void ft_residency_all_filled(struct ft_residency_plan *p);
/* Waits for every MoE layer (call after all were marked filled), verifies pinned bytes <=
 * budget, logs the table. A layer never marked filled is left pageable. The first pin the
 * driver refuses is the last one asked: the budget is lowered to what is pinned then (so
 * nothing else, the staging ring neither, asks past the wall), the later layers are locked
 * without asking, and a probed budget remembers the wall for the next start. */
enum ft_status ft_residency_wait(struct ft_residency_plan *p);
/* async + all_filled + wait, for banks already filled. */
enum ft_status ft_residency_apply(struct ft_residency_plan *p, struct ft_model *m);

const struct ft_residency_layer *ft_residency_layer(const struct ft_residency_plan *p, int l);
/* 1 if layer l decodes on the CPU executor (not pinned, or no GPU). */
int ft_residency_is_cpu_layer(const struct ft_residency_plan *p, int l);
/* The budget, to charge other pinned buffers (staging, KV offload) against. */
struct ft_pin_budget *ft_residency_budget(struct ft_residency_plan *p);
const struct ft_platform *ft_residency_platform(const struct ft_residency_plan *p);

/* ---- reporting -------------------------------------------------------------------------- */

/* For /v1/stats and /health. Counts are MoE layers; before apply they are the plan's wants. */
struct ft_residency_stats {
    const char *platform;        /* "Linux" / "WSL2" */
    const char *backend;         /* "cuda" / "none" / "fake" */
    const char *budget_source;   /* ft_pin_source_name */
    uint64_t budget_bytes;       /* FT_PIN_UNLIMITED when uncapped */
    uint64_t charged_bytes;      /* every pinned byte charged now (banks + other buffers) */
    uint64_t bank_bytes;         /* all MoE banks */
    int n_moe_layers;
    int n_layers[3];             /* indexed by enum ft_residency */
    uint64_t bytes[3];
    int applied;                 /* 0: plan only (ft inspect) */
    int mlock_failed;            /* some CPU layer could not be mlocked */
    uint64_t memlock_limit_bytes;/* RLIMIT_MEMLOCK soft limit (UINT64_MAX = unlimited) */
    char cpu_layers[256];        /* "0,1,46,47" (truncated with "..."), "" when none */
};
void ft_residency_get_stats(const struct ft_residency_plan *p, struct ft_residency_stats *out);
/* Multi-line human summary for `ft inspect` (no trailing newline issues: lines end in '\n').
 * Returns the length it wanted (snprintf-style). */
size_t ft_residency_format(const struct ft_residency_plan *p, char *buf, size_t cap);

#endif
