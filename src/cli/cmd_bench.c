/* cmd_bench.c — `ft bench`: llama-bench style prefill (ppN) and decode (tgN) throughput on a
 * checkpoint or a synthetic model, as a markdown table with mean ± sd over -r repetitions.
 * Next to each figure: weights read per token, achieved GB/s, and the host DRAM read bandwidth
 * measured in the same run (the ceiling of a CPU decode), plus the mean distinct experts per
 * MoE layer per step (routing controls what a figure means; see llama-baseline.md). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/session.h"
#include "core/status.h"
#include "core/sys.h"
#include "core/timer.h"
#include "engine/generate.h"
#include "engine/gpu.h"
#include "engine/sample.h"
#include "moe/cache.h"
#include "moe/trace.h"

static const char k_usage[] =
    "usage: ft bench (--model DIR | --synthetic PRESET) [options]\n"
    "       ft bench bw [options]   (bandwidth profile for the hybrid split; ft bench bw --help)\n"
    "  -p N                 prompt tokens for the prefill test (default 512; 0 skips)\n"
    "  -n N                 generated tokens for the decode test (default 128; 0 skips;\n"
    "                       greedy, each step returning its token id alone)\n"
    "  -r N                 repetitions (default 3)\n"
    "  -b, --batch N        prompt tokens per forward pass (default 2048, as ft serve's\n"
    "                       --max-prefill-length; offload streams the uncached experts\n"
    "                       once per pass, so larger passes copy less)\n"
    "  -t, --threads N      CPU threads (default: physical cores)\n"
    "  -c, --ctx-size N     KV cache positions (default: -p + -n + 8; e.g. 32768 to hold a\n"
    "                       long context's cache beside the weights while measuring)\n"
    "  --synthetic PRESET[:FMT][@N]  random weights of a real shape: qwen3-30b-a3b,\n"
    "                       qwen3.6-35b-a3b, qwen3.5-122b-a10b, deepseek-v3, kimi-k2,\n"
    "                       glm-4.7-flash, glm-4.5-air, minimax-m2, mixtral-8x7b, gpt-oss-20b,\n"
    "                       gpt-oss-120b, tiny, tiny-gpt-oss, tiny-qwen3.5, tiny-deepseek,\n"
    "                       tiny-glm, tiny-minimax; FMT: experts as bf16, mxfp4, nvfp4, fp8, q4_k,\n"
    "                       q5_k, q6_k, q8_0, q4_0, q4_1, q5_0 or q5_1; @N: N layers only\n"
    "  --synthetic-routing R  uniform (default for synthetic), zipf:S, sticky:P (keep an\n"
    "                       expert with probability P), or model (the router; default for\n"
    "                       --model)\n"
    "  --seed N             seed of weights, prompt, routing and sampling (default 1)\n"
    "  --temp T [--top-k K] [--top-p P] [--min-p P]  tgN samples (as ft serve does) instead\n"
    "                       of decoding greedily\n"
    "  --vram-limit A,B,..  --moe-backend A,B,..  --moe-prefetch A,B,..  comma lists: one\n"
    "                       table per combination, each a new engine on the same loaded model\n"
    "  --synthetic-predict P  uniform/zipf routing: the next-layer prefetch's guesses are right\n"
    "                       with probability P (default 0.85; a real router's: 0.8-0.97)\n"
    "  --cycles N           the combinations N times over, alternated (default 1)\n"
    "  --record-routing FILE  offload: write every expert-cache lookup to FILE and compare the\n"
    "                       cache policies and Belady's oracle on it (bench_policy --replay)\n";

static int parse_routing(const char *s, struct ft_engine_opts *eo) {
    eo->routing_param = 0;
    if (!strcmp(s, "uniform")) eo->routing = FT_ROUTING_UNIFORM;
    else if (!strcmp(s, "model")) eo->routing = FT_ROUTING_MODEL;
    else if (!strncmp(s, "zipf:", 5) && !ft_cli_double(s + 5, &eo->routing_param)) eo->routing = FT_ROUTING_ZIPF;
    else if (!strncmp(s, "sticky:", 7) && !ft_cli_double(s + 7, &eo->routing_param)) eo->routing = FT_ROUTING_STICKY;
    else return -1;
    if ((eo->routing == FT_ROUTING_ZIPF && !(eo->routing_param > 0)) ||
        (eo->routing == FT_ROUTING_STICKY && !(eo->routing_param >= 0 && eo->routing_param < 1)))
        return -1;
    return 0;
}

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

struct bench {
    struct ft_session s;
    const char *routing;
    int threads, batch;
    double dram_gbps;
    double ceiling_gbps; /* DRAM read (cpu) or HBM (cuda), measured in this run */
    struct ft_gpu_offload_stats last; /* offload: counters at the previous row */
    char notes[2048];
    int offload_notes;
    struct ft_sampling smp; /* tgN's sampling (--temp ...): sampled when smp.temperature > 0 */
};

/* Appends a line to the notes printed under the table (dropped once they are full). */
static void note(struct bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct bench *b, const char *fmt, ...) {
    size_t cap = sizeof b->notes, used = (size_t)b->offload_notes;
    if (used + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->notes + used, cap - used, fmt, ap);
    va_end(ap);
    if (n > 0) b->offload_notes = (int)(used + (size_t)n < cap - 1 ? used + (size_t)n : cap - 1);
}

/* Offload: hit rate and copy rate since the previous snapshot, printed under a row. For a
 * prefill row (passes > 0) also its ceiling: every pass streams each MoE layer's touched
 * experts (distinct per layer per pass, as measured) but the share of them the slots could
 * hold (slots / MoE layers) over PCIe at the link's rate; tps is the row's mean. For a decode
 * row (decoded: the tokens the snapshot covers) the expert bytes each token moved through
 * each path: copied over PCIe, and read by the CPU executor, with each path's rate. */
static void offload_line(struct bench *b, const char *test, double tps, double distinct,
                         int passes, int tokens, long decoded) {
    struct ft_gpu_offload_stats os;
    ft_engine_offload_stats(b->s.engine, &os);
    if (!os.active) return;
    long h = os.hits - b->last.hits, m = os.misses - b->last.misses;
    double gb = (os.copy_bytes - b->last.copy_bytes) / 1e9, s = os.copy_s - b->last.copy_s;
    note(b, "%s: expert cache hit rate %.1f%% (%ld of %ld lookups), %.2f GB of expert copies at "
        "%.1f GB/s\n", test, h + m ? 100.0 * h / (h + m) : 0.0, h, h + m, gb, s > 0 ? gb / s : 0.0);
    const struct ft_model *md = b->s.model;
    if (decoded > 0) {
        long ce = os.cpu_experts - b->last.cpu_experts;
        double cgb = (double)ce * (double)md->expert_bytes / 1e9, cs = os.cpu_s - b->last.cpu_s;
        note(b, "%s: per token %.1f MB of experts copied over PCIe (%.1f GB/s) and %.1f MB (%.1f "
            "experts) read by the CPU executor (%.1f GB/s while it ran), over %ld tokens\n", test,
            1e3 * gb / decoded, s > 0 ? gb / s : 0.0, 1e3 * cgb / decoded, (double)ce / decoded,
            cs > 0 ? cgb / cs : 0.0, decoded);
        long pf = os.prefetched - b->last.prefetched, pu = os.prefetch_used - b->last.prefetch_used;
        long pl = os.prefetch_late - b->last.prefetch_late;
        if (pf > 0)
            note(b, "%s: next-layer prefetch: %.2f experts a token copied ahead, %.0f%% of them "
                "used (%ld of %ld; %ld late), %.0f%% wasted\n", test, (double)pf / decoded,
                100.0 * pu / pf, pu, pf, pl, 100.0 * (pf - pu) / pf);
    }
    b->last = os;
    int moe = 0;
    for (int l = 0; l < md->n_layers; l++) moe += md->layers[l].is_moe;
    double uncached = moe ? distinct - (double)os.n_slots / moe : 0;
    if (passes <= 0 || moe == 0 || os.pcie_gbps <= 0) return;
    if (uncached <= 0) {
        note(b, "%s: the slots could hold every expert it touches: no PCIe ceiling\n", test);
        return;
    }
    /* the link's rate: the startup probe, or this row's copies where they ran faster (the
     * probe read 49.9 GB/s once while the copies after it moved 54.8: a ceiling must bound) */
    double link = s > 0 && gb / s > os.pcie_gbps ? gb / s : os.pcie_gbps;
    double secs = passes * moe * uncached * (double)md->expert_bytes / (link * 1e9);
    double bound = tokens / secs;
    note(b, "%s: ceiling %.0f tok/s if only the %.1f uncached experts per layer (of %.1f touched) "
        "stream, once per %d-token pass, at %.1f GB/s (the faster of the %.1f GB/s PCIe probe and "
        "these copies); this run: %.0f%%\n", test, bound, uncached, distinct, b->batch, link,
        os.pcie_gbps, 100.0 * tps / bound);
}

static void row(const struct bench *b, const char *test, const double *tps, int reps,
                double bytes_per_tok, double distinct) {
    double m, sd;
    stats(tps, reps, &m, &sd);
    double gbps = bytes_per_tok * m / 1e9;
    printf("| %s | %s | %d | %s | %s | %.2f ± %.2f | %.3f GB | %.1f | %.0f%% | %.1f |\n",
           b->s.model->label, ft_engine_backend(b->s.engine), b->threads, b->routing, test, m, sd,
           bytes_per_tok / 1e9, gbps, 100.0 * gbps / b->ceiling_gbps, distinct);
    fflush(stdout);
}

/* Weight bytes one step reads: dense part + the distinct experts each MoE layer touched. */
static double step_bytes(const struct ft_model *m, double distinct) {
    double b = (double)ft_model_bytes_per_token(m);
    int moe = 0;
    for (int l = 0; l < m->n_layers; l++) moe += m->layers[l].is_moe;
    return b - (double)moe * m->top_k * m->expert_bytes + (double)moe * distinct * m->expert_bytes;
}

/* One decode step after tok, its token into *next. */
static enum ft_status decode_step(struct ft_engine *e, struct ft_sampler *smp, int32_t tok,
                                  float *logits, int32_t *next) {
    const enum ft_status st = ft_gen_step(e, smp, tok, logits, next);
    if (st == FT_OK && *next < 0) *next = ft_sampler_sample(smp, logits);
    return st;
}

/* A hybrid model's recurrent-state checkpoint, as the prefix cache takes one (a pageable host
 * buffer it reuses; one save per 16 decoded tokens of a request, a restore per cached turn):
 * the save and restore times on this backend, measured on a sequence of its own before the
 * single-sequence tests claim the KV blocks. *ms stays 0 when the model keeps no state. */
struct state_cost {
    size_t bytes;
    double save_ms, load_ms;
    char why[160]; /* set when it could not be measured */
};

static void state_measure(struct bench *b, struct state_cost *c) {
    struct ft_engine *e = b->s.engine;
    memset(c, 0, sizeof *c);
    if (!(c->bytes = ft_engine_state_bytes(e))) return;
    int32_t blk[1], tok = 1;
    void *buf = malloc(c->bytes);
    if (!buf || ft_engine_kv_alloc(e, 1, blk) != FT_OK) {
        free(buf);
        snprintf(c->why, sizeof c->why, "no memory or KV block free");
        return;
    }
    struct ft_seg g = {&tok, 1, 0, blk, FT_LOGITS_NONE};
    enum ft_status st = ft_engine_state_load(e, blk, NULL);
    if (st == FT_OK) st = ft_engine_forward_batch(e, &g, 1, NULL);
    if (st == FT_OK) st = ft_engine_state_save(e, blk, buf); /* the buffer's pages, touched */
    enum { K = 8 };
    int64_t t0 = ft_time_us();
    for (int i = 0; i < K && st == FT_OK; i++) st = ft_engine_state_save(e, blk, buf);
    int64_t t1 = ft_time_us();
    for (int i = 0; i < K && st == FT_OK; i++) st = ft_engine_state_load(e, blk, buf);
    int64_t t2 = ft_time_us();
    ft_engine_state_drop(e, blk);
    ft_engine_kv_free(e, blk, 1);
    free(buf);
    if (st != FT_OK) snprintf(c->why, sizeof c->why, "%s", ft_error());
    else c->save_ms = (t1 - t0) / 1e3 / K, c->load_ms = (t2 - t1) / 1e3 / K;
}

/* Under the tgN row (tps tok/s): the checkpoint's cost and its share of a decode step. */
static void state_line(const struct state_cost *c, double tps) {
    if (!c->bytes || tps <= 0) return;
    if (c->why[0]) {
        printf("  state checkpoint: not measured (%s)\n", c->why);
        return;
    }
    const double mb = c->bytes / 1e6, step_ms = 1e3 / tps;
    printf("  state checkpoint (prefix cache): %.1f MB a sequence; save %.2f ms (%.1f GB/s), restore "
           "%.2f ms (%.1f GB/s); one save per 16 decoded tokens adds %.1f%% to a %.2f ms decode step\n",
           mb, c->save_ms, mb / c->save_ms, c->load_ms, mb / c->load_ms, 100.0 * c->save_ms / (16 * step_ms),
           step_ms);
}

static enum ft_status run(struct bench *b, int p, int n, int reps, uint64_t seed) {
    const struct ft_model *m = b->s.model;
    struct ft_engine *e = b->s.engine;
    int32_t *ids = malloc((size_t)(p > 0 ? p : 1) * sizeof *ids);
    float *logits = malloc((size_t)m->vocab * sizeof *logits);
    double *tps = calloc((size_t)reps, sizeof *tps);
    struct ft_sampler *smp = NULL;
    enum ft_status st = FT_OK;
    if (!ids || !logits || !tps) {
        st = ft_fail(FT_ERR_OOM, "bench: out of memory");
        goto done;
    }
    for (int i = 0; i < p; i++) ids[i] = (int32_t)((seed * 2654435761u + (uint64_t)i * 40503u) % (uint64_t)m->vocab);
    /* warm-up, as llama-bench does: one full-size prefill (first kernel loads, cuBLAS plans)
     * and three decode steps (a GPU backend captures its decode graph on the second) */
    struct state_cost sc;
    if (n > 0) state_measure(b, &sc);
    ft_engine_reset(e);
    int32_t w0[4] = {1, 2, 3, 4};
    if ((st = ft_engine_prefill(e, p > 0 ? ids : w0, p > 0 ? p : 4, logits, 0)) != FT_OK) goto done;
    /* decode steps as ft serve and ft run take them (ft_gen_step): the greedy id found on the
     * device, a device draw for sampling without penalties, else the logits to the host
     * sampler */
    const int sampled = b->smp.temperature > 0;
    if ((st = ft_sampler_init(&smp, &b->smp, m->vocab)) != FT_OK) goto done;
    const int engine_draw = sampled && ft_sampler_engine_drawable(smp) && ft_engine_draws_on_device(e);
    for (int i = 0; i < 3 && n > 0; i++) {
        int32_t next;
        if ((st = decode_step(e, smp, w0[0], logits, &next)) != FT_OK) goto done;
    }
    if (p > 0) {
        double distinct = 0;
        for (int r = 0; r < reps; r++) {
            ft_engine_reset(e);
            ft_engine_reset_stats(e);
            int64_t t0 = ft_time_us();
            if ((st = ft_engine_prefill(e, ids, p, logits, 0)) != FT_OK) goto done;
            tps[r] = p / ((ft_time_us() - t0) / 1e6);
            distinct = ft_engine_mean_distinct_experts(e);
        }
        char test[32];
        snprintf(test, sizeof test, "pp%d", p);
        int chunks = (p + b->batch - 1) / b->batch;
        row(b, test, tps, reps, step_bytes(m, distinct) * chunks / p, distinct);
        double mean, sd;
        stats(tps, reps, &mean, &sd);
        offload_line(b, test, mean, distinct, chunks, p, 0);
    }
    if (n > 0) {
        double distinct = 0;
        for (int r = 0; r < reps; r++) {
            ft_engine_reset(e);
            int32_t tok = 1, next;
            if ((st = ft_engine_forward(e, &tok, 1, logits, 0)) != FT_OK) goto done;
            next = ft_argmax(logits, m->vocab);
            ft_engine_reset_stats(e);
            int64_t t0 = ft_time_us();
            for (int i = 0; i < n; i++) {
                tok = next;
                if ((st = decode_step(e, smp, tok, logits, &next)) != FT_OK) goto done;
                ft_sampler_accept(smp, next);
            }
            tps[r] = n / ((ft_time_us() - t0) / 1e6);
            distinct = ft_engine_mean_distinct_experts(e);
        }
        char test[32];
        snprintf(test, sizeof test, "tg%d", n);

        row(b, test, tps, reps, step_bytes(m, distinct), distinct);
        if (sampled) { /* under the row, as it is printed (the table has no column for it) */
            long drawn, back;
            ft_engine_draw_stats(e, &drawn, &back);
            char how[96] = "by the host sampler from each step's logits";
            if (engine_draw)
                snprintf(how, sizeof how, "on the device (%ld of %ld rows back to the host sampler)",
                         back, drawn);
            printf("  %s sampled: temperature %g, top-k %d, top-p %g, min-p %g, seed %llu; tokens drawn %s\n",
                   test, b->smp.temperature, b->smp.top_k, b->smp.top_p, b->smp.min_p,
                   (unsigned long long)b->smp.seed, how);
        }
        /* the snapshot's tokens: each repetition's first token and its n steps, and the
         * warm-up's 3 steps when no prefill row came first */
        offload_line(b, test, 0, distinct, 0, n, (long)reps * (n + 1) + (p > 0 ? 0 : 3));
        double mean, sd;
        stats(tps, reps, &mean, &sd);
        state_line(&sc, mean);
    }
done:
    ft_sampler_free(smp);
    free(ids);
    free(logits);
    free(tps);
    return st;
}

/* One configuration's table: the ceiling, the rows, the offload notes under them. */
static enum ft_status bench_table(struct bench *b, long p, long n, long reps, long seed) {
    int gpu = strcmp(ft_engine_backend(b->s.engine), "cpu") != 0;
    b->ceiling_gbps = gpu ? ft_gpu_hbm_gbps() : b->dram_gbps;
    if (gpu)
        printf("ceiling: GPU HBM %.0f GB/s (device-to-device copy, read + write, measured now); "
               "engine holds %.2f GiB of device memory\n\n", b->ceiling_gbps,
               ft_engine_vram_used(b->s.engine) / 1073741824.0);
    else
        printf("ceiling: host DRAM read %.1f GB/s (measured now, %d threads, 1 GiB buffer)\n\n",
               b->dram_gbps, b->threads);
    const struct ft_model *m = b->s.model;
    const uint64_t kv_tok = ft_model_kv_token_bytes(m);
    if (kv_tok) /* what a long context costs beside the weights */
        printf("kv cache: %d positions, %.2f GiB (%.1f KiB a position, f32)%s\n\n",
               ft_engine_max_ctx(b->s.engine), (double)kv_tok * ft_engine_max_ctx(b->s.engine) / 1073741824.0,
               kv_tok / 1024.0, gpu ? ", in the device memory above" : "");
    printf("| model | backend | threads | routing | test | t/s | weights/token | GB/s | of ceiling | "
           "experts/layer/step |\n|---|---|---:|---|---|---:|---:|---:|---:|---:|\n");
    b->notes[0] = 0, b->offload_notes = 0;
    ft_engine_offload_stats(b->s.engine, &b->last);
    enum ft_status st = run(b, (int)p, (int)n, (int)reps, (uint64_t)seed);
    if (b->last.active)
        printf("\noffload: %d expert slots; %s(warm-up included in the first row's counts)\n"
               "expert copies at %.1f GB/s against the %.1f GB/s pinned host-to-device copy "
               "measured at startup; %ld copies failed verification and were repaired\n",
               b->last.n_slots, b->notes, b->last.copy_gbps, b->last.pcie_gbps, b->last.repaired);
    return st;
}

/* --vram-limit / --moe-backend given as comma lists: the values, split in place */
enum { MAX_LIST = 8 };
static int split_list(char *v, const char **out) {
    int n = 0;
    for (char *t = strtok(v, ","); t; t = strtok(NULL, ",")) {
        if (n == MAX_LIST) return -1;
        out[n++] = t;
    }
    return n;
}

/* --record-routing: the trace saved, and the policies and the oracle replayed on it with the
 * run's slots (every miss admitted) */
static enum ft_status routing_report(const struct bench *b, const char *path, struct ft_trace *t) {
    enum ft_status st;
    struct ft_gpu_offload_stats os;
    ft_engine_offload_stats(b->s.engine, &os);
    t->n_layers = b->s.model->n_layers, t->n_experts = b->s.model->n_experts;
    if (t->oom) return ft_fail(FT_ERR_OOM, "--record-routing: out of memory for the trace");
    FT_TRY(ft_trace_save(t, path));
    uint64_t h[5] = {0}, lk = 0;
    const struct ft_cache_policy *p[4] = {&ft_cache_lru, &ft_cache_lfru, &ft_cache_slru, &ft_cache_markov};
    for (int i = 0; i < 4; i++) FT_TRY(ft_trace_simulate(t, os.n_slots, p[i], &h[i], &lk));
    FT_TRY(ft_trace_oracle(t, os.n_slots, &h[4], &lk));
    struct ft_trace_stats ts;
    ft_trace_stats(t, &ts);
    const double n = lk ? (double)lk : 1;
    printf("routing trace %s: %zu layer steps, %zu lookups; with %d slots (every miss fetched) "
           "LRU %.1f%%, LFRU %.1f%%, SLRU %.1f%%, markov %.1f%%, Belady's oracle %.1f%%; routing "
           "entropy %.3f of uniform, %.1f experts per layer serve 90%% of lookups\n", path, t->n_steps,
           t->n_lookups, os.n_slots, 100 * h[0] / n, 100 * h[1] / n, 100 * h[2] / n, 100 * h[3] / n,
           100 * h[4] / n, ts.entropy, ts.experts90);
    return FT_OK;
fail:
    return st;
}


int ft_cmd_bench(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "bw")) return ft_cmd_bench_bw(argc - 1, argv + 1);
    struct ft_engine_opts be;
    int be_auto;
    ft_cli_backend_init(&be, &be_auto);
    be.hot_set = 0;
    const char *model = NULL, *synthetic = NULL, *routing = NULL, *record = NULL;
    struct ft_trace trace;
    ft_trace_init(&trace, 0, 0);
    long p = 512, n = 128, reps = 3, threads = 0, seed = 1, batch = 2048, top_k = 0, cycles = 1, ctx = 0;
    struct ft_sampling smp = ft_sampling_default();
    smp.temperature = 0; /* greedy unless --temp */
    enum { N_LISTS = 3 };
    char lists[N_LISTS][256] = {"", "", ""}; /* the flags below given as comma lists */
    static const char *const list_flag[N_LISTS] = {"--vram-limit", "--moe-backend", "--moe-prefetch"};
    double pred_acc = 0.85;
    for (int i = 1; i < argc; i++) {
        int li = -1;
        for (int q = 0; q < N_LISTS; q++)
            if (!strcmp(argv[i], list_flag[q])) li = q;
        if (li >= 0 && i + 1 < argc && strchr(argv[i + 1], ',')) {
            if (strlen(argv[++i]) >= sizeof lists[li])
                return ft_cli_usage_error("bench", "%s: the list is longer than %zu characters",
                                          list_flag[li], sizeof lists[li] - 1);
            snprintf(lists[li], sizeof lists[li], "%s", argv[i]);
            continue;
        }
        int rb = ft_cli_backend_flag("bench", argc, argv, &i, &be, &be_auto);
        if (rb < 0) return 2;
        if (rb > 0) continue;
        const char *a = argv[i];
        long *target = NULL, lo = 0, hi = 1 << 20;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(k_usage, stdout);
            fputs(ft_cli_backend_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            if (!(model = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--synthetic")) {
            if (!(synthetic = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--synthetic-routing")) {
            if (!(routing = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-p")) {
            target = &p;
        } else if (!strcmp(a, "-n")) {
            target = &n;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
            target = &batch, lo = 1, hi = 1 << 16;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            target = &ctx, lo = 1, hi = 1 << 24;
        } else if (!strcmp(a, "-r")) {
            target = &reps, lo = 1, hi = 1000;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            target = &threads, lo = 1, hi = 4096;
        } else if (!strcmp(a, "--seed")) {
            target = &seed, lo = 1, hi = 1L << 40;
        } else if (!strcmp(a, "--temp") || !strcmp(a, "--top-p") || !strcmp(a, "--min-p")) {
            const char *v = ft_cli_value(argc, argv, &i);
            double d;
            if (!v || ft_cli_double(v, &d))
                return ft_cli_usage_error("bench", "%s: '%s' is not a number", a, v ? v : "");
            float *f = !strcmp(a, "--temp") ? &smp.temperature : !strcmp(a, "--top-p") ? &smp.top_p : &smp.min_p;
            *f = (float)d;
        } else if (!strcmp(a, "--top-k")) {
            target = &top_k, lo = 0, hi = 1 << 24;
        } else if (!strcmp(a, "--cycles")) {
            target = &cycles, lo = 1, hi = 20;
        } else if (!strcmp(a, "--record-routing")) {
            if (!(record = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--synthetic-predict")) {
            const char *v = ft_cli_value(argc, argv, &i);
            if (!v || ft_cli_double(v, &pred_acc) || !(pred_acc >= 0 && pred_acc <= 1))
                return ft_cli_usage_error("bench", "--synthetic-predict: '%s' is not an accuracy "
                                          "in [0, 1]", v ? v : "");
        } else {
            return ft_cli_usage_error("bench", "unknown option '%s'", a);
        }
        if (target && ft_cli_num("bench", argc, argv, &i, lo, hi, target)) return 2;
    }
    if (!!model == !!synthetic)
        return ft_cli_usage_error("bench", "give exactly one of --model DIR or --synthetic PRESET");
    if (!routing) routing = synthetic ? "uniform" : "model";
    if (ctx && ctx < p + n + 8)
        return ft_cli_usage_error("bench", "-c %ld: the tests need %ld positions (-p + -n + 8); "
                                  "give at least that", ctx, p + n + 8);
    struct ft_engine_opts eo = {.max_ctx = (int)(ctx ? ctx : p + n + 8), .max_chunk = (int)batch,
                              .seed = (uint64_t)seed};
    if (parse_routing(routing, &eo))
        return ft_cli_usage_error("bench", "--synthetic-routing: '%s' is not uniform, model, "
                                  "zipf:S (S > 0) or sticky:P (0 <= P < 1)", routing);
    smp.top_k = (int)top_k, smp.seed = (uint64_t)seed;
    if ((smp.top_k > 0 || smp.top_p < 1 || smp.min_p > 0) && !(smp.temperature > 0))
        return ft_cli_usage_error("bench", "--top-k/--top-p/--min-p sample: give --temp T > 0 too");
    if (ft_sampling_validate(&smp) != FT_OK) return ft_cli_usage_error("bench", "%s", ft_error());
    struct bench b = {.routing = routing, .batch = (int)batch, .smp = smp};
    /* the configurations: every combination of the list flags' values */
    const char *vals[N_LISTS][MAX_LIST];
    int nv[N_LISTS];
    for (int li = 0; li < N_LISTS; li++) {
        nv[li] = 1, vals[li][0] = NULL;
        if (lists[li][0] && (nv[li] = split_list(lists[li], vals[li])) <= 0)
            return ft_cli_usage_error("bench", "%s: give 1 to %d comma-separated values", list_flag[li], MAX_LIST);
    }
    /* combination c: the last flag's value varies fastest; cfg_val: its list values (NULL:
     * that flag was no list) */
    int n_cfg = nv[0] * nv[1] * nv[2];
    if (n_cfg > MAX_LIST * MAX_LIST)
        return ft_cli_usage_error("bench", "more than %d combinations of list values", MAX_LIST * MAX_LIST);
    struct ft_engine_opts cfg[MAX_LIST * MAX_LIST];
    const char *cfg_val[MAX_LIST * MAX_LIST][N_LISTS];
    for (int c = 0; c < n_cfg; c++) {
        struct ft_engine_opts bc = be;
        int ba = be_auto;
        for (int li = N_LISTS - 1, r = c; li >= 0; r /= nv[li], li--) cfg_val[c][li] = vals[li][r % nv[li]];
        for (int li = 0; li < N_LISTS; li++) {
            char *av[3] = {"bench", (char *)list_flag[li], (char *)cfg_val[c][li]};
            int ai = 1;
            if (cfg_val[c][li] && ft_cli_backend_flag("bench", 3, av, &ai, &bc, &ba) < 0) return 2;
        }
        cfg[c] = eo;
        ft_cli_backend_apply(&cfg[c], &bc, ba);
        /* synthetic routing's draws are known a layer early: a predictor as right as a real
         * model's router on the next layer (80-97% published) is emulated with noise */
        if (eo.routing == FT_ROUTING_UNIFORM || eo.routing == FT_ROUTING_ZIPF) cfg[c].pred_noise = 1 - pred_acc;
        if (record) cfg[c].record_routing = &trace;
    }
    enum ft_status st = ft_session_open(&b.s, model, synthetic, (int)threads, &cfg[0]);
    if (st != FT_OK) return ft_cli_fail(st);
    if (record && strcmp(ft_engine_backend(b.s.engine), "offload")) {
        st = ft_fail(FT_ERR_INVALID_ARG, "--record-routing: the %s backend has no expert cache to "
                     "record (use --backend offload)", ft_engine_backend(b.s.engine));
        ft_session_close(&b.s);
        return ft_cli_fail(st);
    }
    b.threads = ft_pool_size(b.s.pool);
    b.dram_gbps = ft_cpu_dram_read_gbps(b.s.pool, (size_t)1 << 30, 3);
    int gpu = strcmp(ft_engine_backend(b.s.engine), "cpu") != 0;
    const struct ft_model *m = b.s.model;
    printf("model: %s, %.2f B params (%.2f B active per token), %.2f MiB per expert; "
           "%d threads, ISA %s, CPU activations %s\n", m->label, m->n_params / 1e9,
           m->n_params_active / 1e9, m->expert_bytes / 1048576.0, b.threads,
           ft_cpu_isa_name(ft_cpu_isa()),
           gpu && strcmp(ft_engine_backend(b.s.engine), "offload") ? "unused (all on the GPU)"
           : cfg[0].cpu_act_fast ? "fast (int8/bf16)" : "f32");
    enum ft_status failed = FT_OK; /* a configuration that failed; the others still run */
    for (int k = 0; k < n_cfg * (int)cycles; k++) {
        const int c = k % n_cfg;
        if (n_cfg * cycles > 1) { /* which combination this table is */
            printf("%s### configuration %d of %d:", k ? "\n" : "", c + 1, n_cfg);
            for (int li = 0; li < N_LISTS; li++)
                if (cfg_val[c][li]) printf(" %s %s", list_flag[li], cfg_val[c][li]);
            if (cycles > 1) printf(" (cycle %d of %ld)", k / n_cfg + 1, cycles);
            printf("\n");
            fflush(stdout);
        }
        if (k > 0) st = ft_session_reopen(&b.s, &cfg[c]);
        if (st == FT_OK) st = bench_table(&b, p, n, reps, seed);
        if (st != FT_OK && n_cfg * cycles > 1) { /* say so, and go on with the next one */
            fflush(stdout);
            fprintf(stderr, "ft bench: configuration %d of %d failed: %s\n", c + 1, n_cfg,
                    ft_error()[0] ? ft_error() : ft_status_str(st));
            failed = st, st = FT_OK;
        }
        if (st != FT_OK) break;
    }
    if (st == FT_OK && record) st = routing_report(&b, record, &trace);
    ft_session_close(&b.s);
    ft_trace_free(&trace);
    if (st == FT_OK && failed != FT_OK) return ft_cli_exit_code(failed);
    return st == FT_OK ? 0 : ft_cli_fail(st);
}
