/* gpu.h — the CUDA forward pass with every weight resident on the GPU (the `fused` backend):
 * same contract as ft_engine_forward_batch, paged KV cache on the device (block ids shared with
 * the engine's allocator), decode steps of up to 8 tokens captured in CUDA graphs per batch
 * size and replayed, prefill through cuBLAS (grouped GEMMs for the experts).
 * Engine thread only. Built only with FT_HAVE_CUDA. */
#ifndef FT_ENGINE_GPU_H
#define FT_ENGINE_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "engine/forward.h"
#include "moe/offload.h"

struct ft_gpu;

struct ft_gpu_opts {
    int device;
    size_t vram_limit;   /* bytes the engine may allocate (0 = free memory minus headroom) */
    int max_ctx, max_chunk, n_blocks, max_seqs;
    int graphs;          /* capture decode steps in CUDA graphs */
    enum ft_routing routing;
    double routing_param;    /* zipf exponent S (0: 1) / sticky probability of keeping (as given) */
    uint64_t seed;
    /* offload: experts stay in host banks; a GPU cache of slots holds the hot ones */
    int offload;
    int cache_slots;     /* > 0: exactly this many slots */
    double cache_rate;   /* > 0: this fraction of all experts; else auto from free VRAM */
    int verify;          /* -1 default (sample on WSL2, off on Linux), 0 off, 1 sample, 2 all */
    int copy_path;       /* 0 pick the faster at startup, 1 DMA, 2 gather kernel */
    int moe_mode;        /* enum ft_moe_mode: misses fetched (offload), computed on the CPU
                            (cpu), or split between the two (hybrid) */
    const char *pin_budget;  /* --pin-budget (NULL: env / platform default) */
    const char *cpu_layers;  /* --moe-cpu-layers (NULL: auto) */
    int cpu_act_fast;        /* the CPU executor rounds its inputs (--cpu-act fast) */
    int cpu_threads;         /* --moe-cpu-threads: the executor's own pinned pool (0: physical
                                cores) */
    int state_slots;         /* hybrid models: sequences whose recurrent state the GPU holds */
    const char *cache_policy;     /* ft_engine_opts' */
    struct ft_trace *record_routing;
    int hot_set;
    int prefetch;            /* decode: predicted experts of the next MoE layer copied ahead */
    double pred_noise;
};

void ft_gpu_offload_stats(const struct ft_gpu *g, struct ft_gpu_offload_stats *out);
/* Offload: the host residency of the expert banks (returns 0 when not offloading). */
struct ft_residency_stats;
int ft_gpu_residency_stats(const struct ft_gpu *g, struct ft_residency_stats *out);

/* 1 if this build has CUDA and a device is present. */
int ft_gpu_available(void);
/* 1 if this build's GPU kernels compute experts stored as t (bf16, GGML block formats, NVFP4
 * and FP8_B128 rows of any width); 1 in a build without CUDA, whose ft_gpu_init refuses every
 * model. */
int ft_gpu_takes_experts(enum ft_dtype t);
enum ft_status ft_gpu_init(struct ft_gpu **out, const struct ft_model *m,
                           const struct ft_gpu_opts *o);
void ft_gpu_free(struct ft_gpu *g);
/* logits as ft_engine_forward_batch (NULL: not copied back); slots: each segment's recurrent
 * state slot (< state_slots; hybrid models only, else NULL; a segment at position 0 starts
 * its slot from zeros); top1 (may be NULL): each logit
 * row's token found on the device (only ids cross back when logits is NULL): the argmax, or
 * with draws ([rows]) ft_sampler_draw_row's draw, or -1 for a row whose candidates are more
 * than the device sorts (ft_gpu_row_logits then brings its logits to the host). Masked draws
 * take their rows' allow bitmasks from masks (NULL: no row masked), filled into pinned
 * memory after the step's layers are enqueued (so while the device runs them), then copied
 * and applied by the draw on the device: no logits cross back for them either. */
struct ft_draw;
struct ft_draw_masks;
enum ft_status ft_gpu_forward(struct ft_gpu *g, const struct ft_seg *segs, int n_segs,
                              const int *slots, float *logits, int32_t *top1,
                              const struct ft_draw *draws, const struct ft_draw_masks *masks,
                              double *distinct_out);
/* Logit row r of the last ft_gpu_forward into out ([vocab] floats). */
enum ft_status ft_gpu_row_logits(struct ft_gpu *g, int r, float *out);
/* Hybrid models: state slot `slot` (< state_slots; st_floats of ft_model_state_bytes) copied
 * to the host after the work queued so far / overwritten from the host before the next. */
enum ft_status ft_gpu_state_read(struct ft_gpu *g, int slot, float *out);
enum ft_status ft_gpu_state_write(struct ft_gpu *g, int slot, const float *in);
/* Bytes the engine may allocate on device (--vram-limit, else the free VRAM less a margin);
 * 0 without a device. */
size_t ft_gpu_vram_budget(int device, size_t vram_limit);
/* HBM bandwidth probe (device-to-device copy, read + write) in GB/s. */
double ft_gpu_hbm_gbps(void);
size_t ft_gpu_vram_used(const struct ft_gpu *g);

#endif
