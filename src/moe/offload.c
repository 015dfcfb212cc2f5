/* offload.c — the offload backend's expert cache (docs/ARCHITECTURE.md section 5): experts stay in the
 * host banks (registered: pinned and mapped), the GPU keeps a pool of slots, misses are copied
 * by batched DMA or by a gather kernel reading mapped memory (probed, timed, the faster chosen
 * at startup), and an integrity guard checks copied slots against checksums taken when the
 * banks were filled, re-copying through the other path on a mismatch.
 * Engine thread only. Built only with FT_HAVE_CUDA. */
#include "moe/offload.h"

#ifdef FT_HAVE_CUDA

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "core/env.h"
#include "core/log.h"
#include "core/status.h"
#include "core/sys.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "core/watchdog.h"
#include "core/checksum.h"
#include "moe/policy.h"
#include "mem/platform.h"
#include "mem/residency.h"
#include "model/model.h"
#include "moe/bw_profile.h"
#include "moe/hotset.h"
#include "backend/cuda/device.h"
#include "backend/cuda/pin.h"

/* The staging ring of unpinned layers' decode copies: what the pin budget has left beside the
 * pinned layers, at most FT_STAGING_BYTES, in FT_STAGING_CHUNKS chunks (a multiple of 256 bytes)
 * so that a memcpy into one overlaps the DMA out of the one before; none below 256-byte chunks. */
#define FT_STAGING_CHUNKS 8
#define FT_STAGING_BYTES ((uint64_t)32 << 20)
/* Prefill's memcpy threads: one per physical core, at most this many. The CPU executor's pool
 * is idle while a prefill step streams its experts, so the ring's memcpy may have the cores:
 * with 4 threads it fed 18.5 GB/s against 53.8 GB/s of pinned DMA (bench/RESULTS.md, issue 28);
 * one thread reads DRAM at ~10 GB/s, 16 at ~90 GB/s (docs/DESIGN.md section 9). Decode's copies
 * stay on their one thread (the engine's or the stager's), beside the executor. */
#define FT_STAGING_THREADS_MAX 16
#define RING_SEGS 32 /* pieces of expert matrices in one chunk's memcpy job */

enum { PATH_DMA = 1, PATH_GATHER = 2 };

struct ft_offload {
    const struct ft_model *m;
    int n_layers, E, n_slots, path, verify, warned;
    size_t gu_bytes, dn_bytes;      /* slot pitch: the largest expert matrix of any layer (GGUF
                                       files mix formats across layers, e.g. Q4_K and Q6_K) */
    uint8_t *slot_gu, *slot_dn;     /* [S][gu_bytes], [S][dn_bytes]: each layer's rows as its banks */
    struct ft_cache *cache;
    cudaStream_t cs;                /* copy stream */
    cudaEvent_t ev_copied, ev_t0, ev_t1, ev_t2; /* t2: the fetched experts done (decode) */
    cudaEvent_t ev_stage[2], ev_free[2]; /* prefill streaming: buffer copied / buffer read */
    cudaEvent_t ev_pf0, ev_pf1;     /* a layer's prefill copies, first start to last end */
    int pf_pending, pf_copying;
    int32_t *pf_slot_of;            /* [E] pageable: a prefill batch's slot map */
    int32_t pf_stage[32];           /* prefill's borrowed slots (2 * PF_BATCH), held for the step */
    int pf_held;
    /* a batch of the next layer's uncached experts, copied into buffer pre_buf (pre_b slots a
     * buffer) while this layer computed; pre_layer -1: none */
    int pre_layer, pre_n, pre_buf, pre_b;
    long pre_unused;                /* prefetched experts the layer did not route to */
    int32_t pre_e[16];
    int timing_pending, t2_pending;
    uint64_t *sums;                 /* [L][E][2] host checksums (verify != off; else the probe's) */
    const uint8_t **map_gu, **map_dn;/* [L] device pointers of mapped banks, NULL if unregistered */
    int32_t *h_slots;               /* pinned staging [2 max_pairs] */
    int32_t *slots_tmp;             /* [max(E, max_pairs)] */
    int plan_nf, plan_n; /* ft_offload_decode_plan's fills and pairs */
    struct ft_cache_fill *fills;
    uint64_t *d_sums, *h_dsums;     /* [2 * max fills] */
    void **cp_dst;
    const void **cp_src;
    size_t *cp_bytes;
    int max_fills;
    long copies, mismatches, repaired, verify_rr, fault_seen;
    double bytes, copy_s, pcie_gbps;
    int fault_kind, fault_at;       /* FT_TESTING: 1 no-op, 2 zero, the fault_at-th expert copy */
    struct ft_split split;          /* fetch-vs-compute split (offload / cpu / hybrid) */
    struct ft_residency_plan *plan; /* which banks are pinned (GPU layers) or CPU layers */
    int own_plan;                   /* 0: the plan is the model's (registered while loading) */
    uint8_t *cpu_layer;             /* [L] 1: decode this layer's misses on the CPU */
    int n_cpu_layers;
    /* layers whose banks are not pinned (over the pin budget) still fill cache slots: their
     * copies (decode's and prefill's) go through a ring of pinned chunks, a CPU memcpy into
     * chunk r overlapping the DMA out of chunk r - 1 */
    uint8_t *staged;                /* [L] */
    int n_staged;
    uint8_t *ring;                  /* FT_STAGING_CHUNKS x FT_STAGING_CHUNK bytes, pinned */
    cudaEvent_t ev_ring[FT_STAGING_CHUNKS]; /* chunk r's DMA is done */
    size_t chunk;                   /* bytes of a chunk */
    struct ft_pool *stage_pool;     /* prefill's memcpy into a chunk, split over the cores */
    /* decode with a CPU executor: a staged layer's copies run on the stager thread (the whole
     * copy_fills of the plan's fills, on the copy stream), while the engine thread computes the
     * CPU's experts; ft_offload_decode_finish waits for it */
    struct stager {
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int started, posted, done, quit, device;
        enum ft_status st;
    } stg;
    int stg_pending;                /* the plan's copies were posted to the stager */
    /* the hot set: loaded at start (the cache warmed from it), saved at free; off for
     * synthetic models, whose every run would otherwise start from the last one's routing */
    struct ft_hotset hot;
    char hot_path[1100];
    int hot_on;
    long warmed;
    int ring_next;
    long staged_copies;
    int pending_layer, pending_n;   /* the last copy batch, for the split's feedback */
    /* decode's next-layer prefetch: after a layer's own copies, the experts predicted for the
     * next MoE layer (its router applied to this layer's residual; synthetic routing: its
     * draws, each replaced at random with probability pred_noise) that are not resident are
     * copied ahead, at most dp_max a layer, while no earlier prefetch is still in flight */
    int dp_max, dp_layer, dp_n, dp_pending, plan_late;
    double pred_noise;
    uint64_t dp_rng;
    int32_t dp_e[FT_PREFETCH_MAX], dp_slot[FT_PREFETCH_MAX];
    cudaEvent_t ev_dp0, ev_dp1;     /* the last prefetch's copies, first start and end */
    long dp_issued, dp_used, dp_late;
    int64_t plan_us;                /* when the last decode plan ran */
    double layer_s;                 /* running mean of the time between two decode plans */
    /* the copy watchdog (ft_offload_sync): limits learnt per step size, the incident; the
     * decode copy batches so far (FT_TEST_COPY_STALL's count) */
    struct ft_watchdog wd;
    long copy_batches;
    int32_t *miss;                  /* [max_fills] distinct misses of a step */
    long cpu_experts, steps;
    double cpu_s;
};

static int prefetch_landed(struct ft_offload *f, int layer, const int32_t *ids, int n);

/* Copies bytes from pageable src to device dst on the copy stream through the staging ring
 * (decode: one thread). */
static enum ft_status ring_copy(struct ft_offload *f, uint8_t *dst, const uint8_t *src, size_t bytes) {
    for (size_t off = 0; off < bytes; off += f->chunk) {
        const size_t n = bytes - off < f->chunk ? bytes - off : f->chunk;
        const int r = f->ring_next;
        f->ring_next = (r + 1) % FT_STAGING_CHUNKS;
        uint8_t *chunk = f->ring + (size_t)r * f->chunk;
        if (cudaEventSynchronize(f->ev_ring[r]) != cudaSuccess) return ft_cuda_check("staging ring");
        memcpy(chunk, src + off, n);
        if (cudaMemcpyAsync(dst + off, chunk, n, cudaMemcpyHostToDevice, f->cs) != cudaSuccess ||
            cudaEventRecord(f->ev_ring[r], f->cs) != cudaSuccess)
            return ft_cuda_check("staged expert copy");
    }
    return FT_OK;
}

/* Prefill's staged copies: expert matrices (pageable src -> device dst) packed back to back
 * into whole chunks, each chunk's memcpy one job of the stage pool, its bytes split evenly
 * over the threads in 4 KiB units, then one DMA per piece out of the chunk. Packing keeps the
 * jobs few and full (a Q8_0 30B expert's down matrix alone is 1.7 MB of a 4 MiB chunk). */
struct ring_piece {
    uint8_t *dst; /* device (a piece) / the chunk (a job's segment) */
    const uint8_t *src;
    size_t n;
};
struct ring_job {
    struct ring_piece seg[RING_SEGS]; /* dst: where in the chunk */
    int n;
    size_t total;
};

static void ring_task(void *ctx, int i, int n) {
    const struct ring_job *j = ctx;
    long lo, hi;
    ft_split((long)((j->total + 4095) >> 12), i, n, &lo, &hi);
    size_t a = (size_t)lo << 12, b = (size_t)hi << 12, off = 0;
    if (b > j->total) b = j->total;
    for (int s = 0; s < j->n && off < b; off += j->seg[s].n, s++) {
        const size_t x = a > off ? a : off, y = b < off + j->seg[s].n ? b : off + j->seg[s].n;
        if (x < y) memcpy(j->seg[s].dst + (x - off), j->seg[s].src + (x - off), y - x);
    }
}

static enum ft_status ring_stage(struct ft_offload *f, const struct ring_piece *pc, int n) {
    int i = 0;
    size_t done = 0; /* of piece i */
    while (i < n && !pc[i].n) i++;
    while (i < n) {
        const int r = f->ring_next;
        f->ring_next = (r + 1) % FT_STAGING_CHUNKS;
        uint8_t *chunk = f->ring + (size_t)r * f->chunk;
        if (cudaEventSynchronize(f->ev_ring[r]) != cudaSuccess) return ft_cuda_check("staging ring");
        struct ring_job j = {.n = 0};
        uint8_t *to[RING_SEGS];
        while (i < n && j.n < RING_SEGS && j.total < f->chunk) {
            const size_t take = pc[i].n - done < f->chunk - j.total ? pc[i].n - done : f->chunk - j.total;
            j.seg[j.n] = (struct ring_piece){chunk + j.total, pc[i].src + done, take};
            to[j.n++] = pc[i].dst + done;
            j.total += take, done += take;
            if (done == pc[i].n)
                for (i++, done = 0; i < n && !pc[i].n;) i++;
        }
        ft_pool_run(f->stage_pool, ring_task, &j);
        for (int k = 0; k < j.n; k++)
            if (cudaMemcpyAsync(to[k], j.seg[k].dst, j.seg[k].n, cudaMemcpyHostToDevice, f->cs) != cudaSuccess)
                return ft_cuda_check("staged expert copy");
        if (cudaEventRecord(f->ev_ring[r], f->cs) != cudaSuccess) return ft_cuda_check("staged expert copy");
    }
    return FT_OK;
}

static const uint8_t *bank_src(const struct ft_offload *f, int l, int fam, int e, int mapped) {
    const struct ft_bank *b = &f->m->layers[l].bank[fam];
    if (!mapped) return ft_bank_expert(b, e);
    const uint8_t *base = fam ? f->map_dn[l] : f->map_gu[l];
    return base ? base + (size_t)e * b->stride : NULL;
}

/* Issues the copies of n fills through `path` on the copy stream (2 matrices each). */
static enum ft_status issue(struct ft_offload *f, const struct ft_cache_fill *fl, int n, int path) {
    int c = 0, np = 0;
    struct ring_piece pc[RING_SEGS]; /* prefill's staged matrices, packed by ring_stage */
    const int pack = f->pf_copying && f->stage_pool;
    for (int i = 0; i < n; i++) {
        int l = fl[i].layer, e = fl[i].expert, sl = fl[i].slot;
        int fault = 0;
#ifdef FT_TESTING
        if (f->fault_kind && ++f->fault_seen == f->fault_at) fault = f->fault_kind;
#endif
        uint8_t *dst[2] = {f->slot_gu + (size_t)sl * f->gu_bytes, f->slot_dn + (size_t)sl * f->dn_bytes};
        size_t bytes[2] = {f->m->layers[l].bank[0].row_bytes, f->m->layers[l].bank[1].row_bytes};
        for (int fam = 0; fam < 2; fam++) {
            if (fault == 1) continue; /* the copy silently does nothing (the WSL2 failure mode) */
            if (fault == 2) {
                cudaMemsetAsync(dst[fam], 0, bytes[fam], f->cs);
                continue;
            }
            if (f->staged[l] && pack) { /* an unpinned bank: through the ring, packed */
                pc[np++] = (struct ring_piece){dst[fam], bank_src(f, l, fam, e, 0), bytes[fam]};
                enum ft_status st = np == RING_SEGS ? ring_stage(f, pc, np) : FT_OK;
                if (st != FT_OK) return st;
                if (np == RING_SEGS) np = 0;
                continue;
            }
            if (f->staged[l]) { /* an unpinned bank: through the ring */
                enum ft_status st = ring_copy(f, dst[fam], bank_src(f, l, fam, e, 0), bytes[fam]);
                if (st != FT_OK) return st;
                continue;
            }
            const uint8_t *src = bank_src(f, l, fam, e, path == PATH_GATHER);
            int by_gather = path == PATH_GATHER && src;
            if (!src) src = bank_src(f, l, fam, e, 0);
            if (by_gather) {
                void *d = dst[fam];
                const void *s = src;
                enum ft_status st = ft_cuda_copy_gather(&d, &s, &bytes[fam], 1, f->cs);
                if (st != FT_OK) return st;
            } else {
                f->cp_dst[c] = dst[fam], f->cp_src[c] = src, f->cp_bytes[c++] = bytes[fam];
            }
        }
        f->bytes += (double)(bytes[0] + bytes[1]);
        f->copies++;
        f->staged_copies += f->staged[l];
    }
    if (np) {
        enum ft_status st = ring_stage(f, pc, np);
        if (st != FT_OK) return st;
    }
    return ft_cuda_copy_dma(f->cp_dst, f->cp_src, f->cp_bytes, c, f->cs);
}

static enum ft_status copy_hung(struct ft_offload *f, const char *what_hung, int T, int64_t t0);

/* Device checksums of the fills' slots against the host's; returns the number of mismatching
 * fills and compacts them to the front of fl, or -1 when the copy stream did not finish within
 * the copy watchdog's limit (the caller reports it: copy_hung). */
static int verify(struct ft_offload *f, struct ft_cache_fill *fl, int n) {
    if (n <= 0) return 0;
    const void *p[2 * n > 0 ? 2 * n : 1];
    size_t b[2 * n > 0 ? 2 * n : 1];
    for (int i = 0; i < n; i++) {
        const struct ft_layer *L = &f->m->layers[fl[i].layer];
        p[2 * i] = f->slot_gu + (size_t)fl[i].slot * f->gu_bytes;
        p[2 * i + 1] = f->slot_dn + (size_t)fl[i].slot * f->dn_bytes;
        b[2 * i] = L->bank[0].row_bytes, b[2 * i + 1] = L->bank[1].row_bytes;
    }
    ft_cuda_checksums(p, b, 2 * n, f->d_sums, f->cs);
    cudaMemcpyAsync(f->h_dsums, f->d_sums, (size_t)2 * n * 8, cudaMemcpyDeviceToHost, f->cs);
    const enum ft_status ws = ft_cuda_stream_wait(f->cs, ft_time_ns() + ft_watchdog_limit_ns(&f->wd, n));
    if (ws == FT_ERR_BUSY) return -1;
    if (ws != FT_OK) cudaGetLastError(); /* as before: the sums then do not match */
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t *want = f->sums + ((size_t)fl[i].layer * f->E + fl[i].expert) * 2;
        if (f->h_dsums[2 * i] != want[0] || f->h_dsums[2 * i + 1] != want[1]) fl[bad++] = fl[i];
    }
    return bad;
}

/* The previous copy batch's time (surely complete once the caller has synchronised) into the
 * copy statistics; fed to the split policy as seconds per expert of that layer, up to the end
 * of the fetched experts' own work where decode marked it (ft_offload_decode_done): that GPU
 * tail is the copy side's too (counting the copies alone, it ended the layer step ~20 us after
 * the CPU). */
static void collect_timing(struct ft_offload *f) {
    if (!f->timing_pending) return;
    float ms = 0, ms2 = 0;
    if (cudaEventElapsedTime(&ms, f->ev_t0, f->ev_t1) == cudaSuccess) {
        f->copy_s += ms / 1e3;
        if (f->t2_pending) {
            if (cudaEventSynchronize(f->ev_t2) == cudaSuccess &&
                cudaEventElapsedTime(&ms2, f->ev_t0, f->ev_t2) == cudaSuccess)
                ms = ms2 > ms ? ms2 : ms;
            else
                cudaGetLastError(); /* that call's error only: the copies' own time stands */
        }
        if (f->pending_n > 0)
            ft_split_observe_copy(&f->split, f->pending_layer, f->pending_n, ms / 1e3);
    }
    f->timing_pending = 0, f->t2_pending = 0;
}

void ft_offload_decode_done(struct ft_offload *f, cudaStream_t s) {
    if (!f->timing_pending || f->pf_copying) return;
    cudaEventRecord(f->ev_t2, s);
    f->t2_pending = 1;
}

/* The span of prefill copies since the last collection (first start to latest end), into the
 * copy statistics only: it includes waits for a staging buffer, so it is not a per-expert
 * cost for the split. !wait: while a copy is still running (the next layer's prefetch) the
 * span is left open and grows with the next copies. */
static void collect_prefill_timing(struct ft_offload *f, int wait) {
    if (!f->pf_pending || (!wait && cudaEventQuery(f->ev_pf1) != cudaSuccess)) return;
    float ms = 0;
    if (cudaEventSynchronize(f->ev_pf1) == cudaSuccess &&
        cudaEventElapsedTime(&ms, f->ev_pf0, f->ev_pf1) == cudaSuccess)
        f->copy_s += ms / 1e3;
    f->pf_pending = 0;
}

/* Copies the fills, verifies (all or a rotating sample), repairs through the other path.
 * Decode batches are timed one by one for the split; prefill's (pf_copying) as a whole. */
static enum ft_status copy_and_verify(struct ft_offload *f, const struct ft_cache_fill *fl, int n) {
    if (n == 0) return FT_OK;
    if (!f->pf_copying) {
        collect_timing(f);
        cudaEventRecord(f->ev_t0, f->cs);
    }
    enum ft_status st = issue(f, fl, n, f->path);
    if (st != FT_OK) return st;
    if (!f->pf_copying) {
        cudaEventRecord(f->ev_t1, f->cs);
        f->timing_pending = 1;
        f->pending_layer = fl[0].layer, f->pending_n = n;
    }
    if (f->verify) {
        struct ft_cache_fill chk[n];
        int m = 0;
        for (int i = 0; i < n; i++) /* sample: one copy in four, rotating */
            if (f->verify == 2 || (f->verify_rr++ % 4) == 0) chk[m++] = fl[i];
        const int64_t t0 = ft_time_ns();
        int bad = verify(f, chk, m);
        if (bad < 0) return copy_hung(f, "the verification of an expert copy batch", m, t0);
        if (bad) {
            f->mismatches += bad;
            if (!f->warned++)
                ft_log_warn("expert copy verification: %d of %d checked copies did not match their "
                            "checksum (a dropped or zeroed DMA); re-copying through the %s path, "
                            "and verifying every copy from now on; counted in /v1/stats", bad, m,
                            f->path == PATH_DMA ? "gather" : "DMA");
            f->verify = 2; /* one silent copy seen: no later one goes unchecked */
            int other = f->path == PATH_DMA && f->map_gu ? PATH_GATHER : PATH_DMA;
            if ((st = issue(f, chk, bad, other)) != FT_OK) return st;
            const int64_t t1 = ft_time_ns();
            const int again = verify(f, chk, bad);
            if (again < 0) return copy_hung(f, "the verification of an expert copy batch", bad, t1);
            if (again)
                return ft_fail(FT_ERR_CUDA, "expert copies fail verification on both paths "
                               "(layer %d expert %d): the host-to-device copies are unreliable "
                               "here; see docs/wsl.md", chk[0].layer, chk[0].expert);
            f->repaired += bad;
        }
    }
    cudaEventRecord(f->ev_copied, f->cs);
    return FT_OK;
}

/* copy_and_verify; when it fails, the fills' slots are forgotten so that no later step takes a
 * slot whose copy did not land for a hit. */
static enum ft_status copy_fills(struct ft_offload *f, const struct ft_cache_fill *fl, int n) {
    enum ft_status st = copy_and_verify(f, fl, n);
    for (int i = 0; st != FT_OK && i < n; i++) ft_cache_drop(f->cache, fl[i].layer, fl[i].expert);
    return st;
}

enum ft_status ft_offload_decode_plan(struct ft_offload *f, int layer, const int32_t *ids, int n,
                                      int *cpu_pairs, int *n_cpu) {
    collect_timing(f);
    collect_prefill_timing(f, 1);
    const int64_t now = ft_time_us(); /* a layer step's length, for the prefetch's budget */
    const double dt = (double)(now - f->plan_us) / 1e6;
    if (f->plan_us && dt < 5e-3) f->layer_s = f->layer_s > 0 ? 0.9 * f->layer_s + 0.1 * dt : dt;
    f->plan_us = now;
    ft_cache_probe(f->cache, layer, ids, n, f->slots_tmp);
    int m = 0; /* distinct misses */
    for (int i = 0; i < n; i++) {
        if (f->slots_tmp[i] >= 0) continue;
        int dup = 0;
        for (int j = 0; j < m; j++) dup |= f->miss[j] == ids[i];
        if (!dup) f->miss[m++] = ids[i];
    }
    /* a staged layer's copies wait for a memcpy; beside a CPU executor they run on the stager
     * thread, overlapped with the CPU's experts (done on the executor's worker 0 they cost 60.7
     * tok/s against 72.8 computing every such miss: H200, 8 GiB pin budget, zipf:1.2); without
     * the stager they are computed */
    const int no_fetch = f->cpu_layer[layer] ||
                         (f->staged[layer] && f->split.mode != FT_MOE_OFFLOAD && !f->stg.started);
    int fetch = no_fetch ? 0 : ft_split_fetch_count(&f->split, layer, m);
    if (fetch < m) { /* fetch the most used first: sort the misses by use count, descending */
        const uint32_t *fq = f->cache->freq + (size_t)layer * f->E;
        for (int i = 1; i < m; i++)
            for (int j = i; j > 0 && fq[f->miss[j]] > fq[f->miss[j - 1]]; j--) {
                int32_t t = f->miss[j];
                f->miss[j] = f->miss[j - 1], f->miss[j - 1] = t;
            }
    }
    f->plan_nf = 0, f->plan_n = n;
    enum ft_status st = ft_cache_admit(f->cache, layer, f->miss, fetch, f->fills, &f->plan_nf);
    if (st != FT_OK) return st;
    /* the experts prefetched for this layer: used or not; those whose copy has not landed
     * yet go with the fetched ones, behind the copies (late) */
    const int late = prefetch_landed(f, layer, ids, n);
    *n_cpu = 0;
    for (int i = 0; i < n; i++) { /* the two lists of ft_offload_decode_slots */
        int32_t sl = f->cache->slot_of[(size_t)layer * f->E + ids[i]], fetched = 0;
        for (int j = 0; sl >= 0 && j < f->plan_nf; j++) fetched |= f->fills[j].slot == sl;
        for (int j = 0; sl >= 0 && late && j < f->dp_n; j++) fetched |= f->dp_slot[j] == sl;
        f->h_slots[i] = fetched ? -2 : sl, f->h_slots[n + i] = fetched ? sl : -2;
        if (sl < 0) cpu_pairs[(*n_cpu)++] = i;
    }
    f->plan_late = late, f->dp_n = 0, f->dp_layer = -1;
    f->cpu_experts += m - fetch;
    if ((++f->steps & 1023) == 0 && f->split.mode == FT_MOE_HYBRID) {
        const struct ft_split_costs *c = &f->split.layer[layer];
        ft_log_info("hybrid split, layer %d: fetch %d of %d misses (copy %.3f ms/expert, CPU "
                    "%.3f ms/expert beside copies, %.3f alone, + %.3f ms per step; learnt over "
                    "%ld/%ld/%ld samples)", layer, fetch, m, 1e3 * c->copy_s, 1e3 * c->cpu_s,
                    1e3 * c->cpu_solo_s, 1e3 * c->cpu_fixed_s, c->samples_copy, c->samples_cpu,
                    c->samples_solo);
    }
    return FT_OK;
}

int ft_offload_decode_slots(struct ft_offload *f, int32_t *d_slots, cudaStream_t s) {
    int n = f->plan_n, second = f->plan_nf + f->plan_late;
    /* s was synchronised by the caller, so the staging is free to overwrite */
    cudaMemcpyAsync(d_slots, f->h_slots, (size_t)(second ? 2 * n : n) * sizeof *d_slots,
                    cudaMemcpyHostToDevice, s);
    return second;
}

enum ft_status ft_offload_decode_copies(struct ft_offload *f, cudaStream_t s) {
    if (f->plan_nf && f->stg.started && f->staged[f->fills[0].layer]) { /* to the stager */
        pthread_mutex_lock(&f->stg.mu);
        f->stg.posted = 1, f->stg.done = 0;
        pthread_cond_broadcast(&f->stg.cv);
        pthread_mutex_unlock(&f->stg.mu);
        f->stg_pending = 1;
        return FT_OK;
    }
    if (f->plan_nf && f->wd.stall_k && ++f->copy_batches == f->wd.stall_k) /* FT_TEST_COPY_STALL */
        ft_cuda_stall_stream(f->cs, f->wd.stall_ms < 0 ? -f->wd.stall_ms : f->wd.stall_ms);
    enum ft_status st = copy_fills(f, f->fills, f->plan_nf);
    if (st != FT_OK) return st;
    if (f->plan_nf) cudaStreamWaitEvent(s, f->ev_copied, 0);
    if (f->plan_late) cudaStreamWaitEvent(s, f->ev_dp1, 0); /* late prefetched experts */
    return FT_OK;
}

/* Layer `layer`'s step has come: counts how the prefetch made for it (if any) went, and
 * returns 1 when some of its experts are routed to but their copies are still running. */
static int prefetch_landed(struct ft_offload *f, int layer, const int32_t *ids, int n) {
    if (!f->dp_n) return 0;
    if (f->dp_layer != layer) return 0; /* another step came first: wasted, counted as unused */
    int used = 0;
    for (int j = 0; j < f->dp_n; j++) {
        int hit = 0;
        for (int i = 0; i < n; i++) hit |= ids[i] == f->dp_e[j];
        used += hit;
    }
    f->dp_used += used;
    if (!used || cudaEventQuery(f->ev_dp1) == cudaSuccess) return 0;
    cudaGetLastError(); /* cudaErrorNotReady is not an error of the stream */
    f->dp_late += used;
    return 1;
}

/* Adds the last prefetch's copy time to the copy statistics once its copies are done; returns
 * 0 while they are still running. */
static int prefetch_collect(struct ft_offload *f) {
    if (!f->dp_pending) return 1;
    if (cudaEventQuery(f->ev_dp1) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    float ms = 0;
    if (cudaEventElapsedTime(&ms, f->ev_dp0, f->ev_dp1) == cudaSuccess) f->copy_s += ms / 1e3;
    f->dp_pending = 0;
    return 1;
}

static uint64_t dp_next(struct ft_offload *f) { /* splitmix64 */
    uint64_t z = (f->dp_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

enum ft_status ft_offload_decode_prefetch(struct ft_offload *f, int layer, const int32_t *pred, int n) {
    if (!f->dp_max || layer < 0 || layer >= f->n_layers || f->verify || f->cpu_layer[layer] ||
        f->staged[layer] || f->split.mode == FT_MOE_CPU || !prefetch_collect(f))
        return FT_OK; /* off, nothing to copy ahead, or the last prefetch still on the link */
    /* as many as the link can copy before the next layer's plan, behind this layer's own
     * copies (one more lands late, and the next layer's GPU side waits for it) */
    const double c = f->split.layer[layer].copy_s;
    const double room = f->layer_s - f->plan_nf * c;
    const int budget = c > 0 && room > 0 ? FT_MIN((int)(room / c), f->dp_max) : 0;
    int32_t want[FT_PREFETCH_MAX];
    int nw = 0;
    for (int i = 0; i < n && nw < budget; i++) {
        int32_t e = pred[i];
        if (f->pred_noise > 0 && (double)(dp_next(f) >> 11) * 0x1p-53 < f->pred_noise)
            e = (int32_t)(dp_next(f) % (uint64_t)f->E); /* synthetic routing: a wrong guess */
        if (e < 0 || e >= f->E || f->cache->slot_of[(size_t)layer * f->E + e] >= 0) continue;
        int dup = 0;
        for (int j = 0; j < nw; j++) dup |= want[j] == e;
        if (!dup) want[nw++] = e;
    }
    if (!nw) return FT_OK;
    struct ft_cache_fill fl[FT_PREFETCH_MAX];
    int nf = ft_cache_prefetch(f->cache, layer, want, nw, fl);
    if (!nf) return FT_OK;
    cudaEventRecord(f->ev_dp0, f->cs);
    enum ft_status st = issue(f, fl, nf, f->path);
    if (st != FT_OK) {
        for (int i = 0; i < nf; i++) ft_cache_drop(f->cache, fl[i].layer, fl[i].expert);
        return st;
    }
    cudaEventRecord(f->ev_dp1, f->cs);
    f->dp_pending = 1, f->dp_layer = layer, f->dp_n = nf, f->dp_issued += nf;
    for (int i = 0; i < nf; i++) f->dp_e[i] = fl[i].expert, f->dp_slot[i] = fl[i].slot;
    return FT_OK;
}

int ft_offload_decode_deferred(const struct ft_offload *f) { return f->stg_pending; }

enum ft_status ft_offload_decode_finish(struct ft_offload *f, cudaStream_t s) {
    if (!f->stg_pending) return FT_OK;
    pthread_mutex_lock(&f->stg.mu);
    while (!f->stg.done) pthread_cond_wait(&f->stg.cv, &f->stg.mu);
    enum ft_status st = f->stg.st;
    pthread_mutex_unlock(&f->stg.mu);
    f->stg_pending = 0;
    if (st != FT_OK) return st;
    cudaStreamWaitEvent(s, f->ev_copied, 0); /* recorded by the stager after its copies */
    return FT_OK;
}

void ft_offload_observe_cpu(struct ft_offload *f, int layer, int n_experts, double seconds) {
    f->cpu_s += seconds;
    ft_split_observe_cpu(&f->split, layer, n_experts, seconds, f->plan_nf > 0);
}

/* Uploads the slot map of one prefill batch (experts[i] -> slots[i], the rest -1) on s and
 * runs it. The map goes from pageable memory, which cudaMemcpyAsync copies out before it
 * returns, so the next batch may rewrite it while this one is still queued. */
static enum ft_status run_batch(struct ft_offload *f, const int32_t *experts, const int32_t *slots,
                                int n, int32_t *d_slot_of, cudaStream_t s,
                                ft_offload_batch_fn fn, void *ctx) {
    for (int e = 0; e < f->E; e++) f->pf_slot_of[e] = -1;
    for (int i = 0; i < n; i++) f->pf_slot_of[experts[i]] = slots[i];
    cudaMemcpyAsync(d_slot_of, f->pf_slot_of, (size_t)f->E * 4, cudaMemcpyHostToDevice, s);
    return fn(ctx, 0, n);
}

/* copy_fills for prefill: timed as one span per layer (ev_pf0 at the layer's first copy, ev_pf1
 * after its latest), not per batch for the split. */
static enum ft_status prefill_copy(struct ft_offload *f, const struct ft_cache_fill *fl, int n) {
    if (!f->pf_pending) cudaEventRecord(f->ev_pf0, f->cs);
    f->pf_copying = 1;
    enum ft_status st = copy_fills(f, fl, n);
    f->pf_copying = 0;
    cudaEventRecord(f->ev_pf1, f->cs);
    f->pf_pending = 1;
    return st;
}

/* Copies n experts of `layer` into buffer buf's first n slots (b slots a buffer) on the copy
 * stream, after the compute that last read that buffer when `wait`. */
static enum ft_status stage_copy(struct ft_offload *f, int layer, const int32_t *experts, int n,
                                 int buf, int b, int wait) {
    if (wait) cudaStreamWaitEvent(f->cs, f->ev_free[buf], 0);
    for (int i = 0; i < n; i++)
        f->fills[i] = (struct ft_cache_fill){layer, experts[i], f->pf_stage[buf * b + i]};
    enum ft_status st = prefill_copy(f, f->fills, n);
    cudaEventRecord(f->ev_stage[buf], f->cs);
    return st;
}

/* The next MoE layer this backend streams (not a CPU layer), or -1. */
static int next_gpu_moe_layer(const struct ft_offload *f, int layer) {
    for (int l = layer + 1; l < f->n_layers; l++)
        if (f->m->layers[l].is_moe) return f->cpu_layer[l] ? -1 : l;
    return -1;
}

/* Prefill: the layer's cached experts are computed where they are (no copy, and they stay
 * cached); misses go into free slots while the pool has any (admitted: a cold cache fills up
 * during the first prompts), and the rest stream through slots borrowed from the pool for the
 * whole step, two buffers of up to PF_BATCH experts, the copy of batch j+1 overlapping the
 * compute of batch j. Streamed experts are not admitted: a long prompt touches every expert
 * of every layer, and admitting them would evict, in LRU order, everything decode had cached
 * (the whole pool, for a model larger than it) and leave the prompt itself a hit rate near 0.
 * When a pass touches nearly every expert of a layer, the next layer's will be touched too:
 * its first uncached experts (in id order) are copied into the free buffer while this layer's
 * last batch computes and the next layer's attention and router run, when the copy stream
 * would otherwise idle (a layer's misses are known only after its router). */
#define PF_BATCH 16
enum ft_status ft_offload_prefill(struct ft_offload *f, int layer, const int32_t *experts, int n,
                                  int32_t *d_slot_of, cudaStream_t s, ft_offload_batch_fn fn,
                                  void *ctx) {
    collect_timing(f);
    collect_prefill_timing(f, 0);
    ft_cache_probe(f->cache, layer, experts, n, f->slots_tmp); /* experts are distinct */
    int nh = 0, m = 0, np = 0, has_pre = f->pre_layer == layer && f->pre_n > 0;
    int32_t hit_e[n > 0 ? n : 1], hit_s[n > 0 ? n : 1], sl[PF_BATCH], pre_e[PF_BATCH], pre_s[PF_BATCH];
    int32_t *stage = f->pf_stage;
    f->pre_layer = -1;
    for (int i = 0; i < n; i++) {
        int pi = -1;
        for (int j = 0; has_pre && j < f->pre_n; j++)
            if (f->pre_e[j] == experts[i]) pi = j;
        if (f->slots_tmp[i] >= 0) hit_e[nh] = experts[i], hit_s[nh++] = f->slots_tmp[i];
        else if (pi >= 0) pre_e[np] = experts[i], pre_s[np++] = stage[f->pre_buf * f->pre_b + pi];
        else f->miss[m++] = experts[i];
    }
    /* the streaming buffers first (free slots first, held for the whole step: ft_offload_
     * prefill_end gives them back), then misses into what is still free */
    int want = m < 2 * PF_BATCH ? m : 2 * PF_BATCH;
    if (f->pf_held < want) f->pf_held += ft_cache_borrow(f->cache, want - f->pf_held, stage + f->pf_held);
    int nfree = ft_cache_free_slots(f->cache), adm = m < nfree ? m : nfree, nf = 0;
    enum ft_status st = ft_cache_admit(f->cache, layer, f->miss, adm, f->fills, &nf);
    if (st == FT_OK && nf) {
        st = prefill_copy(f, f->fills, nf);
        /* s's next work (their batch) waits for these copies alone: the wait takes ev_copied
         * as recorded now, before the staging copies re-record it */
        cudaStreamWaitEvent(s, f->ev_copied, 0);
    }
    if (st != FT_OK) return st;
    for (int i = 0; i < nf; i++) hit_e[nh] = f->fills[i].expert, hit_s[nh++] = f->fills[i].slot;
    const int32_t *rest = f->miss + adm;
    m -= adm;
    f->cache->misses[layer] += (uint64_t)(m + np);
    if (has_pre) f->pre_unused += f->pre_n - np;
    int first_done = 0;
    if (m && f->pf_held < 2 && f->pf_held < m) { /* the step's experts hold the pool: run them, then borrow */
        if (nh && (st = run_batch(f, hit_e, hit_s, nh, d_slot_of, s, fn, ctx)) != FT_OK) return st;
        cudaEventRecord(f->ev_free[0], s);
        cudaStreamWaitEvent(f->cs, f->ev_free[0], 0); /* the borrowed slots may be theirs */
        first_done = 1;
        ft_cache_new_step(f->cache);
        f->pf_held += ft_cache_borrow(f->cache, want - f->pf_held, stage + f->pf_held);
        if (f->pf_held < 1)
            return ft_fail(FT_ERR_BUSY, "expert cache: no slot to stream layer %d's experts "
                           "through (raise --moe-cache-size)", layer);
    }
    int got = f->pf_held < want ? f->pf_held : want;
    int nbuf = got >= 2 ? 2 : 1, b = got >= 2 ? got / 2 : 1;
    /* a prefetched batch sits in buffer pre_buf: it runs first, batch 0 goes to the other
     * buffer, and buffers keep pre_b slots so the two never overlap */
    int shift = 0;
    if (has_pre) nbuf = 2, b = f->pre_b, shift = 1 - f->pre_buf;
    int nb = m ? (m + b - 1) / b : 0;
#define BUF(j) (((j) + shift) % nbuf)
#define CNT(j) ((j) * b + b < m ? b : m - (j) * b)
#define STAGE(j) stage_copy(f, layer, rest + (j) * b, CNT(j), BUF(j), b, (j) + has_pre >= nbuf)
    if (nb && (st = STAGE(0)) != FT_OK) return st;
    if (!first_done && nh && (st = run_batch(f, hit_e, hit_s, nh, d_slot_of, s, fn, ctx)) != FT_OK)
        return st; /* overlaps the first staging copy */
    if (np) { /* copied while the previous layer computed */
        cudaStreamWaitEvent(s, f->ev_stage[f->pre_buf], 0);
        if ((st = run_batch(f, pre_e, pre_s, np, d_slot_of, s, fn, ctx)) != FT_OK) return st;
    }
    if (has_pre) cudaEventRecord(f->ev_free[f->pre_buf], s);
    for (int j = 0; j < nb; j++) {
        int buf = BUF(j), cnt = CNT(j);
        if (nbuf == 2 && j + 1 < nb && (st = STAGE(j + 1)) != FT_OK)
            return st; /* the other buffer, while this batch computes */
        cudaStreamWaitEvent(s, f->ev_stage[buf], 0);
        for (int i = 0; i < cnt; i++) sl[i] = stage[buf * b + i];
        if ((st = run_batch(f, rest + j * b, sl, cnt, d_slot_of, s, fn, ctx)) != FT_OK) return st;
        cudaEventRecord(f->ev_free[buf], s);
        if (nbuf == 1 && j + 1 < nb && (st = STAGE(j + 1)) != FT_OK) return st;
    }
    /* prefetch into a buffer of pb slots: the one the last batch did not use, whose last
     * reader recorded ev_free; where this layer's buffers had another size (few misses) the
     * regions may overlap, so the copy waits for everything queued on s */
    int nl = next_gpu_moe_layer(f, layer);
    if (nl >= 0 && f->pf_held >= 2 && 8 * n >= 7 * f->E) {
        int pb = f->pf_held / 2 < PF_BATCH ? f->pf_held / 2 : PF_BATCH, buf = 0, safe, k = 0;
        if (nb == 0) {
            safe = !has_pre || f->pre_b == pb;
            buf = has_pre && safe ? 1 - f->pre_buf : 0;
        } else {
            safe = nbuf == 2 && b == pb;
            buf = safe ? BUF(nb) : 0;
        }
        int32_t e_pre[PF_BATCH];
        const int32_t *so = f->cache->slot_of + (size_t)nl * f->E;
        for (int e = 0; e < f->E && k < pb; e++)
            if (so[e] < 0) e_pre[k++] = e;
        if (k) {
            if (!safe) cudaEventRecord(f->ev_free[buf], s);
            if ((st = stage_copy(f, nl, e_pre, k, buf, pb, 1)) != FT_OK) return st;
            memcpy(f->pre_e, e_pre, (size_t)k * sizeof *e_pre);
            f->pre_layer = nl, f->pre_n = k, f->pre_buf = buf, f->pre_b = pb;
        }
    }
#undef BUF
#undef CNT
#undef STAGE
    return FT_OK;
}

void ft_offload_prefill_end(struct ft_offload *f, cudaStream_t s) {
    collect_prefill_timing(f, 1);
    if (!f->pf_held) return;
    /* copies into these slots (decode's, once they are free) wait for the step's last read */
    cudaEventRecord(f->ev_free[0], s);
    cudaStreamWaitEvent(f->cs, f->ev_free[0], 0);
    ft_cache_return(f->cache);
    f->pf_held = 0;
    f->pre_layer = -1;
}

/* Times n experts of layer l through `path` (2 reps, the second timed); 0 when unusable. */
static double probe(struct ft_offload *f, int l, int n, int path) {
    struct ft_cache_fill fl[n];
    for (int i = 0; i < n; i++) fl[i] = (struct ft_cache_fill){l, i, i};
    int verify_was = f->verify;
    float ms = 0;
    for (int rep = 0; rep < 2; rep++) {
        cudaEventRecord(f->ev_t0, f->cs);
        if (issue(f, fl, n, path) != FT_OK) return 0;
        cudaEventRecord(f->ev_t1, f->cs);
        cudaEventSynchronize(f->ev_t1);
        cudaEventElapsedTime(&ms, f->ev_t0, f->ev_t1);
    }
    /* the pattern must arrive intact (checked even when the guard is off) */
    struct ft_cache_fill chk[n];
    memcpy(chk, fl, sizeof chk);
    f->verify = verify_was;
    int bad = verify(f, chk, n);
    if (bad < 0) bad = n; /* not even finished: unusable */
    const struct ft_layer *L = &f->m->layers[fl[0].layer];
    double per = (double)(L->bank[0].row_bytes + L->bank[1].row_bytes); /* all of one layer */
    f->copies -= 2 * n; /* probes are not serving copies */
    f->bytes -= 2.0 * n * per;
    if (bad) {
        ft_log_warn("copy path %s failed its startup check (%d of %d experts wrong): disabled",
                    path == PATH_DMA ? "DMA" : "gather", bad, n);
        return 0;
    }
    return ms > 0 ? n * per / (ms * 1e-3) / 1e9 : 0;
}

/* Host checksums of experts [lo, hi) of the flattened (MoE layer, expert) list. */
struct sum_job {
    struct ft_offload *f;
    long n;
};

static void checksum_range(struct ft_offload *f, long lo, long hi) {
    for (long i = lo; i < hi; i++) {
        int l = (int)(i / f->E), e = (int)(i % f->E);
        if (!f->m->layers[l].is_moe) continue;
        for (int fam = 0; fam < 2; fam++) {
            const struct ft_bank *b = &f->m->layers[l].bank[fam];
            f->sums[((size_t)l * f->E + e) * 2 + fam] = ft_checksum(ft_bank_expert(b, e), b->row_bytes);
        }
    }
}

static void checksum_task(void *ctx, int i, int n) {
    struct sum_job *j = ctx;
    long lo, hi;
    ft_split(j->n, i, n, &lo, &hi);
    checksum_range(j->f, lo, hi);
}

/* The host checksums the copies are checked against: with the guard on, of every expert, on
 * one thread per core; with it off, only of the pn experts of layer l0 the startup probe
 * copies (summing 54 GiB of experts on one thread doubled a 30B model's load time). */
static void checksum_banks(struct ft_offload *f, int l0, int pn) {
    if (!f->verify) {
        checksum_range(f, (long)l0 * f->E, (long)l0 * f->E + pn);
        return;
    }
    int64_t t0 = ft_time_us();
    struct sum_job j = {f, (long)f->n_layers * f->E};
    struct ft_pool *pool = NULL;
    if (ft_pool_init(&pool, 0) == FT_OK) {
        ft_pool_run(pool, checksum_task, &j);
        ft_pool_free(pool);
    } else { /* no threads: one is enough, only slower */
        ft_error_clear();
        checksum_range(f, 0, j.n);
    }
    ft_log_info("offload: copy guard's checksums of every expert in %.1f s", (ft_time_us() - t0) / 1e6);
}

/* Pins the banks through the residency manager (pin budget, WSL2 caps, the pinned -> mlock ->
 * pageable chain) and records the mapped device pointers of the pinned ones for the gather
 * path. Layers left unpinned are CPU layers: their misses are computed on the CPU. */
static enum ft_status copy_fills(struct ft_offload *f, const struct ft_cache_fill *fl, int n);

/* The stager thread: copy_fills of the posted plan, one job at a time. */
static void *stager_main(void *arg) {
    struct ft_offload *f = arg;
    struct stager *g = &f->stg;
    cudaSetDevice(g->device);
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->posted && !g->quit) pthread_cond_wait(&g->cv, &g->mu);
        if (g->quit) break;
        g->posted = 0;
        pthread_mutex_unlock(&g->mu);
        enum ft_status st = copy_fills(f, f->fills, f->plan_nf);
        pthread_mutex_lock(&g->mu);
        g->st = st, g->done = 1;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static void stager_start(struct ft_offload *f, int device) {
    struct stager *g = &f->stg;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->device = device;
    g->started = pthread_create(&g->thread, NULL, stager_main, f) == 0;
    if (!g->started) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
}

static void stager_stop(struct ft_offload *f) {
    struct stager *g = &f->stg;
    if (!g->started) return;
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    g->started = 0;
}

static enum ft_status register_banks(struct ft_offload *f, const struct ft_offload_opts *o) {
    struct ft_residency_opts ro = {.pin_budget = o->pin_budget, .cpu_layers = o->cpu_layers,
                                   .device = o->device};
    enum ft_status st = FT_OK;
    if (f->m->residency) { /* the loader registered the banks as it read them */
        f->plan = f->m->residency;
    } else {
        f->own_plan = 1;
        st = ft_residency_plan(f->m, &ro, &f->plan);
        if (st == FT_OK) st = ft_residency_apply(f->plan, (struct ft_model *)f->m);
    }
    if (st != FT_OK) return st;
    /* --moe-cpu-layers auto (the default): the layers over the budget keep their cache slots;
     * an explicit choice of CPU layers is kept as asked */
    int stage = !o->cpu_layers || !*o->cpu_layers || !strcmp(o->cpu_layers, "auto"), unpinned = 0;
    for (int l = 0; l < f->n_layers; l++)
        unpinned += f->m->layers[l].is_moe && ft_residency_is_cpu_layer(f->plan, l);
    struct ft_pin_budget *b = ft_residency_budget(f->plan);
    uint64_t left = ft_pin_budget_available(b);
    f->chunk = (size_t)((left < FT_STAGING_BYTES ? left : FT_STAGING_BYTES) / FT_STAGING_CHUNKS / 256 * 256);
    const size_t rb = (size_t)FT_STAGING_CHUNKS * f->chunk;
    if (stage && unpinned && !rb) {
        ft_log_warn("pin budget: too small to keep a staging ring beside the pinned layers; the %d "
                    "layers over it decode their misses on the CPU", unpinned);
        stage = 0;
    }
    if (stage && unpinned) { /* the ring, inside the pin budget */
        if (ft_pin_budget_charge(b, rb, "the expert staging ring") != FT_OK) {
            ft_log_warn("%s; the layers over the budget decode their misses on the CPU", ft_error());
            stage = 0;
        } else {
            enum ft_status ast = FT_OK;
            if (!(f->ring = ft_cuda_staging_alloc(rb, &ast))) {
                ft_pin_budget_release(b, rb);
                stage = 0;
                ft_log_warn("expert staging ring: %s; the layers over the pin budget decode their "
                            "misses on the CPU", ft_error());
            }
        }
        for (int r = 0; stage && r < FT_STAGING_CHUNKS; r++)
            if (cudaEventCreateWithFlags(&f->ev_ring[r], cudaEventDisableTiming) != cudaSuccess)
                return ft_cuda_check("staging ring events");
        const int nt = ft_sys_physical_cores() < FT_STAGING_THREADS_MAX ? ft_sys_physical_cores()
                                                                         : FT_STAGING_THREADS_MAX;
        if (stage && nt > 1 && ft_pool_init(&f->stage_pool, nt) != FT_OK) {
            ft_error_clear(); /* one thread copies then, only slower */
            f->stage_pool = NULL;
        }
    }
    for (int l = 0; l < f->n_layers; l++) {
        if (!f->m->layers[l].is_moe) continue;
        if (ft_residency_is_cpu_layer(f->plan, l)) {
            /* over the pin budget: staged, or a CPU layer where the user asked for CPU layers */
            if (stage) f->staged[l] = 1, f->n_staged++;
            else f->cpu_layer[l] = 1, f->n_cpu_layers++;
            continue;
        }
        for (int fam = 0; fam < 2; fam++) {
            void *dptr = NULL;
            if (cudaHostGetDevicePointer(&dptr, f->m->layers[l].bank[fam].base, 0) != cudaSuccess) {
                cudaGetLastError(); /* registered but not mapped: DMA only for this bank */
                continue;
            }
            (fam ? f->map_dn : f->map_gu)[l] = dptr;
        }
    }
    if (f->n_staged && o->moe_mode != FT_MOE_OFFLOAD) stager_start(f, o->device);
    if (f->n_staged)
        ft_log_info("pin budget: %d MoE layers over it stay unpinned and fill their cache slots "
                    "through a pinned staging ring of %d x %.2f MiB (prefill's memcpy on %d "
                    "threads)", f->n_staged, FT_STAGING_CHUNKS, f->chunk / 1048576.0,
                    f->stage_pool ? ft_pool_size(f->stage_pool) : 1);
    return FT_OK;
}

/* Fills free slots with the hot set's most used experts (the least used admitted first, so that
 * recency ranks the hottest last to go), copied as prefill copies are, then waits for them. */
static enum ft_status warm_cache(struct ft_offload *f) {
    int32_t *keys = malloc((size_t)f->n_slots * sizeof *keys);
    if (!keys) return ft_fail(FT_ERR_OOM, "offload: out of memory");
    const int n = ft_hotset_top(&f->hot, f->cpu_layer, ft_cache_free_slots(f->cache), keys);
    const double gib = (double)n * (double)(f->gu_bytes + f->dn_bytes) / 1073741824.0;
    const int64_t t0 = ft_time_us();
    enum ft_status st = FT_OK;
    if (n) ft_log_info("warming the expert cache from %s: %d experts (%.2f GiB)", f->hot_path, n, gib);
    int nb = 0;
    for (int i = n - 1; i >= 0 && st == FT_OK; i--) {
        const int32_t l = keys[i] / f->E, e = keys[i] % f->E;
        int nf = 0;
        ft_cache_new_step(f->cache);
        st = ft_cache_admit(f->cache, l, &e, 1, f->fills + nb, &nf);
        f->cache->misses[l] -= (uint64_t)nf; /* not a lookup */
        nb += nf;
        if (st == FT_OK && (nb == f->max_fills || i == 0)) { /* a batch of copies */
            st = prefill_copy(f, f->fills, nb);
            f->warmed += nb, f->copies -= nb, nb = 0; /* counted apart from serving copies */
        }
    }
    free(keys);
    if (st == FT_OK && cudaStreamSynchronize(f->cs) != cudaSuccess) st = ft_cuda_check("warming the expert cache");
    collect_prefill_timing(f, 1);
    if (st == FT_OK && n)
        ft_log_info("expert cache warm: %ld experts in %.2f s", f->warmed, (ft_time_us() - t0) / 1e6);
    return st;
}

/* The hot set of this run (each expert's uses) plus half the last one's, for the next start. */
static void save_hot(struct ft_offload *f) {
    long lookups = 0;
    for (int l = 0; l < f->n_layers; l++) lookups += (long)(f->cache->hits[l] + f->cache->misses[l]);
    if (!f->hot_on || lookups == 0) return;
    const size_t n = (size_t)f->n_layers * f->E;
    struct ft_hotset h = {f->n_layers, f->E, f->gu_bytes + f->dn_bytes, calloc(n, sizeof(float))};
    if (!h.count) return;
    for (size_t k = 0; k < n; k++)
        h.count[k] = (float)f->cache->freq[k] + (f->hot.count ? 0.5f * f->hot.count[k] : 0.0f);
    if (ft_hotset_save(&h, f->hot_path) != FT_OK) ft_log_warn("%s", ft_error());
    ft_hotset_free(&h);
}

enum ft_status ft_offload_sync(struct ft_offload *f, cudaStream_t s, int T) {
    const int64_t t0 = ft_time_ns(), limit = ft_watchdog_limit_ns(&f->wd, T);
    enum ft_status st = ft_cuda_stream_wait(s, t0 + limit);
    if (st == FT_OK) ft_watchdog_learn(&f->wd, T, ft_time_ns() - t0);
    if (st != FT_ERR_BUSY) return st;
    char what_hung[64];
    snprintf(what_hung, sizeof what_hung, "a decode step of %d tokens", T);
    return copy_hung(f, what_hung, T, t0);
}

/* A wait begun at t0 on the GPU behind the expert copies (what_hung: a decode step, the
 * verification of its copies; T: the watchdog's size class, tokens or copies) was given
 * up: logged once per incident, FT_ERR_BUSY, and no step starts until the GPU is done
 * (ft_offload_check). */
static enum ft_status copy_hung(struct ft_offload *f, const char *what_hung, int T, int64_t t0) {
    /* what is still running; the stall kept out of the copy costs */
    const int copying = cudaStreamQuery(f->cs) == cudaErrorNotReady;
    cudaGetLastError();
    f->timing_pending = 0, f->t2_pending = 0;
    const double waited = (ft_time_ns() - t0) / 1e9;
    char usual[64];
    ft_watchdog_usual(&f->wd, T, usual, sizeof usual);
    const char *what = copying ? "a host-to-device expert copy has not completed"
                               : "the GPU's work behind the expert copies has not completed";
    if (!f->wd.stuck)
        ft_log_error("expert copy: %s hung: %s within %.1f s (such waits: %s; the limit is the "
                     "larger of %g s and %dx that); its requests fail and no new step starts "
                     "until the GPU is done", what_hung, what, waited, usual, f->wd.floor_ns / 1e9,
                     FT_WATCHDOG_X);
    f->wd.stuck = 1, f->wd.stuck_ns = ft_time_ns();
    return ft_fail(FT_ERR_BUSY, "expert copy: %s hung (%s, given up after %.1f s; such waits: "
                   "%s); the request failed, retry it; if this repeats, look for a PCIe or driver "
                   "fault (docs/wsl.md)", what_hung, what, waited, usual);
}

enum ft_status ft_offload_check(struct ft_offload *f, cudaStream_t s) {
    if (!f || !f->wd.stuck) return FT_OK;
    const int64_t deadline = ft_time_ns() + f->wd.floor_ns;
    enum ft_status st = ft_cuda_stream_wait(f->cs, deadline);
    if (st == FT_OK) st = ft_cuda_stream_wait(s, deadline);
    if (st == FT_OK) {
        f->wd.stuck = 0;
        ft_log_warn("expert copy: the GPU work of the abandoned step completed after %.1f s; "
                    "serving again", (ft_time_ns() - f->wd.stuck_ns) / 1e9);
        return FT_OK;
    }
    if (st != FT_ERR_BUSY) return st;
    return ft_fail(FT_ERR_BUSY, "expert copy: the GPU work of a step abandoned %.1f s ago has not "
                   "completed, so no new step can start; retry later (if it never completes, "
                   "restart the server and look for a PCIe or driver fault)",
                   (ft_time_ns() - f->wd.stuck_ns) / 1e9);
}

enum ft_status ft_offload_init(struct ft_offload **out, const struct ft_model *m,
                               const struct ft_offload_opts *o, size_t avail_bytes, int max_pairs,
                               ft_dalloc_fn dalloc, void *dctx) {
    *out = NULL;
    struct ft_offload *f = calloc(1, sizeof *f);
    if (!f) return ft_fail(FT_ERR_OOM, "offload: out of memory");
    f->m = m;
    f->n_layers = m->n_layers;
    f->E = m->n_experts;
    ft_watchdog_init(&f->wd, "expert copy", "a PCIe or driver fault", FT_ENV_TEST_COPY_STALL);
    int l0 = -1, n_moe = 0;
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].is_moe) n_moe++, l0 = l0 < 0 ? l : l0;
    enum ft_status st = FT_OK;
    if (l0 < 0) {
        st = ft_fail(FT_ERR_INVALID_ARG, "--backend offload: this model has no experts");
        goto fail;
    }
    for (int l = 0; l < m->n_layers; l++) {
        if (!m->layers[l].is_moe) continue;
        f->gu_bytes = FT_MAX(f->gu_bytes, m->layers[l].bank[0].row_bytes);
        f->dn_bytes = FT_MAX(f->dn_bytes, m->layers[l].bank[1].row_bytes);
    }
    size_t slot_bytes = f->gu_bytes + f->dn_bytes, total = (size_t)n_moe * f->E;
    size_t want = o->cache_slots > 0 ? (size_t)o->cache_slots
                : o->cache_rate > 0 ? (size_t)(o->cache_rate * (double)total + 0.999)
                                    : avail_bytes / slot_bytes;
    if (want > total) want = total;
    /* one token's experts must fit; a batched decode step that needs more than the pool is
     * refused with a message naming --moe-cache-size (ft_cache_admit) */
    size_t need = (size_t)m->top_k;
    if (want < need) {
        if (o->cache_slots > 0 || o->cache_rate > 0)
            st = ft_fail(FT_ERR_INVALID_ARG, "offload: --moe-cache-size/--moe-cache-rate gives %zu expert "
                         "slots, but one token needs %zu (this model's top-k); give at least %zu",
                         want, need, need);
        else
            st = ft_fail(FT_ERR_OOM, "offload: %zu expert slots (%.1f MiB each) fit, but one token "
                         "needs %zu; raise --vram-limit or --moe-cache-size", want,
                         slot_bytes / 1048576.0, need);
        goto fail;
    }
    f->n_slots = (int)want;
    f->slot_gu = dalloc(dctx, f->n_slots * f->gu_bytes);
    f->slot_dn = f->slot_gu ? dalloc(dctx, f->n_slots * f->dn_bytes) : NULL;
    if (!f->slot_dn) {
        st = FT_ERR_OOM; /* dalloc set the message */
        goto fail;
    }
    f->max_fills = f->n_slots > max_pairs ? f->n_slots : max_pairs;
    if (f->max_fills < f->E) f->max_fills = f->E;
    int nf = f->max_fills;
    f->fills = calloc((size_t)nf, sizeof *f->fills);
    f->miss = calloc((size_t)nf, sizeof *f->miss);
    f->slots_tmp = calloc((size_t)nf, sizeof *f->slots_tmp);
    f->pf_slot_of = calloc((size_t)f->E, sizeof *f->pf_slot_of);
    f->cp_dst = calloc((size_t)2 * nf, sizeof *f->cp_dst);
    f->cp_src = calloc((size_t)2 * nf, sizeof *f->cp_src);
    f->cp_bytes = calloc((size_t)2 * nf, sizeof *f->cp_bytes);
    f->map_gu = calloc((size_t)f->n_layers, sizeof *f->map_gu);
    f->map_dn = calloc((size_t)f->n_layers, sizeof *f->map_dn);
    f->cpu_layer = calloc((size_t)f->n_layers, 1);
    f->staged = calloc((size_t)f->n_layers, 1);
    f->pre_layer = -1, f->dp_layer = -1;
    f->dp_max = o->prefetch < FT_PREFETCH_MAX ? o->prefetch : FT_PREFETCH_MAX;
    f->pred_noise = o->pred_noise;
    f->dp_rng = 0x9e3779b97f4a7c15ull;
    f->sums = calloc(total ? (size_t)f->n_layers * f->E * 2 : 1, sizeof *f->sums);
    if (!f->fills || !f->miss || !f->slots_tmp || !f->pf_slot_of || !f->cp_dst || !f->cp_src || !f->cp_bytes || !f->map_gu ||
        !f->map_dn || !f->cpu_layer || !f->staged || !f->sums) {
        st = ft_fail(FT_ERR_OOM, "offload: out of memory for its staging buffers");
        goto fail;
    }
    /* pinned through the counted allocator (backend/cuda/pin.h), so that --emulate-pin-cap's
     * wall and the pin stats see them, and freed by ft_cuda_free_host */
    f->h_slots = ft_cuda_staging_alloc((size_t)2 * nf * 4, &st);
    f->h_dsums = ft_cuda_staging_alloc((size_t)2 * nf * 8, &st);
    if (st != FT_OK) goto fail;
    if (!(f->d_sums = dalloc(dctx, (size_t)2 * nf * 8))) {
        st = FT_ERR_OOM; /* dalloc set the message */
        goto fail;
    }
    if (cudaStreamCreateWithFlags(&f->cs, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&f->ev_copied, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&f->ev_stage[0], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&f->ev_stage[1], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&f->ev_free[0], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&f->ev_free[1], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreate(&f->ev_pf0) != cudaSuccess || cudaEventCreate(&f->ev_pf1) != cudaSuccess ||
        cudaEventCreate(&f->ev_t0) != cudaSuccess || cudaEventCreate(&f->ev_t1) != cudaSuccess ||
        cudaEventCreate(&f->ev_t2) != cudaSuccess || cudaEventCreate(&f->ev_dp0) != cudaSuccess ||
        cudaEventCreate(&f->ev_dp1) != cudaSuccess) {
        st = ft_cuda_check("offload streams/events");
        goto fail;
    }
    if ((st = ft_cache_init(&f->cache, f->n_slots, m->n_layers, f->E, ft_cache_policy_find(o->policy))) != FT_OK)
        goto fail;
    if (o->record) ft_cache_record(f->cache, o->record);
    struct ft_platform plat;
    ft_platform_detect(&plat); /* the same detection the residency manager and VRAM margin use */
    f->verify = o->verify >= 0 ? o->verify : plat.kind == FT_PLATFORM_WSL2;
#ifdef FT_TESTING
    const char *fault = ft_env_str(FT_ENV_TEST_COPY_FAULT); /* "noop:K" or "zero:K" */
    if (fault && (!strncmp(fault, "noop:", 5) || !strncmp(fault, "zero:", 5))) {
        f->fault_kind = fault[0] == 'n' ? 1 : 2;
        f->fault_at = atoi(fault + 5);
    }
#endif
    if ((st = register_banks(f, o)) != FT_OK) goto fail;
    for (int l = l0; l < m->n_layers; l++) /* the probes time a pinned layer where there is one */
        if (m->layers[l].is_moe && f->map_gu[l]) {
            l0 = l;
            break;
        }
    int pn = f->n_slots < 8 ? f->n_slots : 8;
    if (pn > f->E) pn = f->E;
    checksum_banks(f, l0, pn); /* also what the startup probe checks against */
    int fk = f->fault_kind;
    f->fault_kind = 0; /* probes are not the copies a fault test targets */
    double dma = probe(f, l0, pn, PATH_DMA), gather = f->map_gu[l0] ? probe(f, l0, pn, PATH_GATHER) : 0;
    f->fault_kind = fk;
    /* the probes left experts in slots the cache does not know about: clear them, so that a
     * copy that silently does nothing shows up as a mismatch, never as a lucky stale hit */
    cudaMemset(f->slot_gu, 0, f->n_slots * f->gu_bytes);
    cudaMemset(f->slot_dn, 0, f->n_slots * f->dn_bytes);
    f->pcie_gbps = dma > gather ? dma : gather;
    f->path = o->copy_path ? o->copy_path : (gather > dma ? PATH_GATHER : PATH_DMA);
    if ((f->path == PATH_DMA && dma == 0) || (f->path == PATH_GATHER && gather == 0))
        f->path = dma > 0 ? PATH_DMA : gather > 0 ? PATH_GATHER : 0;
    if (!f->path) {
        st = ft_fail(FT_ERR_CUDA, "offload: neither copy path delivers experts intact on this "
                     "machine (see docs/wsl.md)");
        goto fail;
    }
    /* the split starts from the `ft bench bw` profile of this GPU, CPU and expert size when
     * there is one (the rates measured with both sides busy, and the CPU's alone), else from
     * the probe and a DRAM guess; then it learns from the running engine */
    double per_expert = (double)slot_bytes, c_copy = per_expert / (f->pcie_gbps * 1e9);
    double c_cpu = per_expert / 60e9, c_solo = c_cpu, c_fixed = 50e-6;
    struct ft_bw_profile key = {.expert_bytes = slot_bytes}, prof;
    struct ft_cuda_device dev;
    char ppath[1024];
    snprintf(key.format, sizeof key.format, "%s", m->layers[l0].bank[0].schema->name);
    ft_sys_cpu_model(key.cpu, sizeof key.cpu);
    if (ft_cuda_device_query(o->device, &dev) == FT_OK) snprintf(key.gpu, sizeof key.gpu, "%.127s", dev.name);
    const int have_prof = ft_bw_profile_load(&key, &prof, ppath, sizeof ppath) == FT_OK;
    if (have_prof) {
        double cg = prof.conc_copy_gbps > 0 ? prof.conc_copy_gbps : prof.copy_dma_gbps;
        double xg = prof.conc_cpu_expert_gbps > 0 ? prof.conc_cpu_expert_gbps : prof.cpu_expert_gbps;
        if (cg > 0) c_copy = per_expert / (cg * 1e9);
        c_cpu = per_expert / (xg * 1e9);
        c_solo = prof.cpu_expert_gbps > 0 ? per_expert / (prof.cpu_expert_gbps * 1e9) : c_cpu;
        c_fixed = prof.cpu_fixed_s;
        ft_log_info("hybrid split starts from the profile %s (copy %.1f GB/s, CPU %.1f GB/s beside "
                    "copies, %.1f alone)", ppath, cg, xg, prof.cpu_expert_gbps > 0 ? prof.cpu_expert_gbps : xg);
    }
    ft_error_clear();
    st = ft_split_init(&f->split, (enum ft_moe_mode)o->moe_mode, f->n_layers, c_copy, c_cpu, c_solo, c_fixed);
    if (st != FT_OK) goto fail;
    f->hot_on = o->hot_set && strncmp(m->label, "synthetic:", 10) != 0;
    if (f->hot_on) {
        ft_hotset_path(m->label, f->n_layers, f->E, f->gu_bytes + f->dn_bytes, f->hot_path, sizeof f->hot_path);
        enum ft_status hs = ft_hotset_load(f->hot_path, f->n_layers, f->E, f->gu_bytes + f->dn_bytes, &f->hot);
        if (hs == FT_OK) st = warm_cache(f);
        else if (hs == FT_ERR_FORMAT) ft_log_warn("%s", ft_error());
        ft_error_clear();
        if (st != FT_OK) goto fail;
    }
    ft_log_info("offload (%s): %d expert slots (%.2f GiB, %.0f%% of %zu experts); copy paths: DMA "
                "%.1f GB/s, gather %.1f GB/s -> %s; copy verification %s",
                ft_moe_mode_name((enum ft_moe_mode)o->moe_mode), f->n_slots,
                f->n_slots * (double)slot_bytes / 1073741824.0, 100.0 * f->n_slots / total, total,
                dma, gather, f->path == PATH_DMA ? "DMA" : "gather",
                f->verify == 2 ? "all" : f->verify ? "sample" : "off");
    *out = f;
    return FT_OK;
fail:
    ft_offload_free(f);
    return st;
}

void ft_offload_free(struct ft_offload *f) {
    if (!f) return;
    if (f->stg_pending) ft_offload_decode_finish(f, f->cs);
    stager_stop(f);
    if (f->cs) cudaStreamSynchronize(f->cs);
    if (f->cache) save_hot(f);
    ft_hotset_free(&f->hot);
    for (int r = 0; r < FT_STAGING_CHUNKS; r++)
        if (f->ev_ring[r]) cudaEventDestroy(f->ev_ring[r]);
    ft_pool_free(f->stage_pool);
    if (f->ring) { /* before the plan, whose budget it was charged to */
        ft_cuda_free_host(f->ring);
        ft_pin_budget_release(ft_residency_budget(f->plan), (uint64_t)FT_STAGING_CHUNKS * f->chunk);
    }
    if (f->own_plan) ft_residency_plan_free(f->plan); /* unpins and unlocks the banks */
    if (f->cs) cudaStreamDestroy(f->cs);
    if (f->ev_copied) cudaEventDestroy(f->ev_copied);
    if (f->ev_t0) cudaEventDestroy(f->ev_t0);
    if (f->ev_t1) cudaEventDestroy(f->ev_t1);
    if (f->ev_t2) cudaEventDestroy(f->ev_t2);
    if (f->ev_dp0) cudaEventDestroy(f->ev_dp0);
    if (f->ev_dp1) cudaEventDestroy(f->ev_dp1);
    if (f->ev_pf0) cudaEventDestroy(f->ev_pf0);
    if (f->ev_pf1) cudaEventDestroy(f->ev_pf1);
    for (int i = 0; i < 2; i++) {
        if (f->ev_stage[i]) cudaEventDestroy(f->ev_stage[i]);
        if (f->ev_free[i]) cudaEventDestroy(f->ev_free[i]);
    }
    ft_cuda_free_host(f->h_slots);
    ft_cuda_free_host(f->h_dsums);
    ft_cache_free(f->cache);
    ft_split_free(&f->split);
    free(f->fills), free(f->miss), free(f->slots_tmp), free(f->pf_slot_of), free(f->cp_dst), free(f->cp_src), free(f->cp_bytes);
    free(f->map_gu), free(f->map_dn), free(f->cpu_layer), free(f->staged), free(f->sums);
    if (f->slot_gu) cudaFree(f->slot_gu); /* allocated through the backend's counted allocator */
    if (f->slot_dn) cudaFree(f->slot_dn);
    if (f->d_sums) cudaFree(f->d_sums);
    free(f);
}

const void *ft_offload_gu(const struct ft_offload *f) { return f->slot_gu; }
int ft_offload_has_cpu_layers(const struct ft_offload *f) { return f->n_cpu_layers > 0; }
const struct ft_residency_plan *ft_offload_residency(const struct ft_offload *f) { return f->plan; }
const void *ft_offload_down(const struct ft_offload *f) { return f->slot_dn; }

size_t ft_offload_slot_bytes(const struct ft_offload *f, int fam) { return fam ? f->dn_bytes : f->gu_bytes; }

void ft_offload_get_stats(const struct ft_offload *f, struct ft_gpu_offload_stats *out) {
    memset(out, 0, sizeof *out);
    if (!f) return;
    out->active = 1;
    out->n_slots = f->n_slots;
    out->path = f->path;
    for (int l = 0; l < f->n_layers; l++) out->hits += (long)f->cache->hits[l], out->misses += (long)f->cache->misses[l];
    out->misses += f->cpu_experts; /* a miss computed on the CPU is still a miss of the cache */
    out->hit_rate = out->hits + out->misses ? (double)out->hits / (double)(out->hits + out->misses) : 0;
    out->copy_bytes = f->bytes;
    out->cpu_experts = f->cpu_experts;
    out->cpu_s = f->cpu_s;
    out->copy_s = f->copy_s;
    out->copies = f->copies;
    out->mismatches = f->mismatches;
    out->repaired = f->repaired;
    out->prefetch_unused = f->pre_unused;
    out->prefetched = f->dp_issued, out->prefetch_used = f->dp_used, out->prefetch_late = f->dp_late;
    out->copy_gbps = f->copy_s > 0 ? f->bytes / f->copy_s / 1e9 : 0;
    out->staged = f->staged_copies, out->staged_layers = f->n_staged, out->warmed = f->warmed;
    out->verify = f->verify;
    out->pcie_gbps = f->pcie_gbps;
}

#endif
