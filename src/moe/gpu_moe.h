/* gpu_moe.h — the GPU half of a MoE block (moe/gpu_moe.c). The CUDA forward pass
 * (engine/gpu.c) runs the router and hands over its choices; this module computes the routed
 * experts: resident, from the layer's device banks; offloaded, the hits and the fetched misses
 * from the expert cache's slots (moe/offload.c) while the CPU executor (moe/cpu_exec.c)
 * computes the misses the split keeps on the host, and joins the parts into the residual.
 * Decode-sized steps (at most FT_GPU_MOE_MAX_T tokens) use GEMVs; prefill a device-side sort
 * and grouped tensor-core GEMMs. Engine thread only; exists only with FT_HAVE_CUDA. */
#ifndef FT_MOE_GPU_MOE_H
#define FT_MOE_GPU_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/swiglu.h"
#include "core/status.h"
#include "moe/offload.h"

#ifdef FT_HAVE_CUDA
#include <cuda_runtime_api.h>

#define FT_GPU_MOE_MAX_T 8 /* decode-sized steps: the forward pass's graph batch sizes */

struct ft_model;
struct ft_gpu_probe;
struct ft_residency_stats;


/* One MoE layer's routed experts on the device. */
struct ft_gpu_experts {
    void *gu, *down;            /* [E][2I, H], [E][H, I] in the banks' formats (NULL: offloaded) */
    int gu_dt, dn_dt;           /* enum ft_dtype of gu / down (bf16 or a block format) */
    float *gu_b, *dn_b;         /* gpt-oss's expert biases [E][2I], [E][H], or NULL */
    enum ft_swiglu act_mode;    /* the experts' activation (struct ft_expert_act's mode) */
    float act_limit, act_alpha;
};

/* The forward pass's device buffers the MoE step reads and writes ([C, ...] rows). */
struct ft_gpu_moe_io {
    float *x;              /* the residual: decode adds the experts' weighted sum into it */
    float *xn;             /* the router's normalised rows (fp32) ... */
    uint16_t *xn16;        /* ... and their bf16 copy (prefill) */
    float *y;              /* prefill: the routed experts' weighted sum lands here */
    int32_t *topk;         /* prefill: the router's choices [T, k] */
    float *topw;           /* the router's weights [T, k] (decode and prefill) */
};

/* The device allocator the engine counts against its VRAM limit. */
struct ft_gpu_alloc {
    ft_dalloc_fn dev; /* NULL when past the limit */
    void *ctx;
};

struct ft_gpu_moe;

/* The MoE step of model m for steps of up to C tokens: the ids and prefill scratch. rounded:
 * the block-format expert GEMVs may round their activations to int8 (--cpu-act fast). */
enum ft_status ft_gpu_moe_init(struct ft_gpu_moe **out, const struct ft_model *m, int C, int rounded,
                               const struct ft_gpu_moe_io *io, const struct ft_gpu_alloc *alloc,
                               cudaStream_t s, struct ft_gpu_probe *probe);
/* Offloading: the expert cache in vram_left bytes, and (cpu / hybrid, or CPU layers) the CPU
 * executor with its own pool of cpu_threads (0: physical cores), cpu_act_fast rounding. */
enum ft_status ft_gpu_moe_offload(struct ft_gpu_moe *gm, const struct ft_offload_opts *o,
                                  size_t vram_left, int cpu_threads, int cpu_act_fast);
void ft_gpu_moe_free(struct ft_gpu_moe *gm);
int ft_gpu_moe_offloading(const struct ft_gpu_moe *gm);

/* Decode: where the router writes layer l's ids [T, k]; then, inside the same span, staging of
 * the ids (and the CPU executor's inputs) to the host when offloading. */
int32_t *ft_gpu_moe_ids(struct ft_gpu_moe *gm, int l);
void ft_gpu_moe_stage(struct ft_gpu_moe *gm, int l, int T);
/* Next-layer prefetch (offloading with opts.prefetch > 0): the next MoE layer after l, and
 * where the forward pass writes its predicted ids and weights [T, k] before l's stage; -1 when
 * there is none to predict. */
int ft_gpu_moe_next_predicted(const struct ft_gpu_moe *gm, int l, int32_t **ids, float **w);
/* Decode: layer l's routed experts, after the router (and its stage) were enqueued. Resident:
 * x += their weighted sum, on the stream. Offloaded: syncs on the ids, plans the split, issues
 * the GPU's share and runs the CPU's; the CPU's output joins x at ft_gpu_moe_join. */
enum ft_status ft_gpu_moe_decode(struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, int l, int T);
/* Decode, at the start of the next span: x += the CPU executor's output of the last layer
 * (from zeros when it had none, so that a span graph holds one shape). */
void ft_gpu_moe_join(struct ft_gpu_moe *gm, int T);
/* The host's wait for a decode step's stream s (T tokens): offloading, under the copy
 * watchdog (ft_offload_sync: FT_ERR_BUSY when given up); else cudaStreamSynchronize. */
enum ft_status ft_gpu_moe_sync(struct ft_gpu_moe *gm, cudaStream_t s, int T);
/* Before a step: FT_OK, or FT_ERR_BUSY while a step the copy watchdog gave up still runs on
 * the GPU (ft_offload_check). */
enum ft_status ft_gpu_moe_check(struct ft_gpu_moe *gm);

/* Prefill: layer l's routed experts for io->topk / topw into io->y; then, after the last
 * layer, ft_gpu_moe_prefill_end. */
enum ft_status ft_gpu_moe_prefill(struct ft_gpu_moe *gm, const struct ft_gpu_experts *X, int l, int T);
void ft_gpu_moe_prefill_end(struct ft_gpu_moe *gm);

/* At the end of a step of T tokens: enqueue the copies of the routing it used; after the
 * stream's sync, the mean count of distinct experts per MoE layer. */
void ft_gpu_moe_step_copies(struct ft_gpu_moe *gm, int T);
double ft_gpu_moe_distinct(const struct ft_gpu_moe *gm, int T);

void ft_gpu_moe_offload_stats(const struct ft_gpu_moe *gm, struct ft_gpu_offload_stats *out);
int ft_gpu_moe_residency_stats(const struct ft_gpu_moe *gm, struct ft_residency_stats *out);

#endif /* FT_HAVE_CUDA */
#endif
