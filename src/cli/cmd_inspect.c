/* cmd_inspect.c — `ft inspect`: what a checkpoint is and how this machine would run it, from
 * config.json and the safetensors headers only (no weights are read). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#ifdef FT_HAVE_CUDA
#include "backend/cuda/device.h"
#endif
#include "cli/cli.h"
#include "cli/opts.h"
#include "core/status.h"
#include "core/sys.h"
#include "engine/sched.h"
#include "format/gguf.h"
#include "format/hfconfig.h"
#include "format/safetensors.h"
#include "mem/residency.h"
#include "model/arch.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/synthetic.h"

static const char k_usage[] =
    "usage: ft inspect (--model DIR|FILE.gguf | --synthetic PRESET[:FMT][@N]) [--pin-budget SIZE]\n"
    "                  [--moe-cpu-layers auto|IDS|N|F|0]\n"
    "  Architecture, hyper-parameters, parameter counts, bytes per expert, host bank size, KV\n"
    "  bytes per token and recurrent state per sequence, and the residency/backend plan on this\n"
    "  machine (pin budget, which MoE layers would stay unpinned for CPU decode). Reads only\n"
    "  headers (--synthetic: a preset of ft bench, sized without making its weights).\n";

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

/* 30.5 B / 151 M / 41 K: parameter counts of any size in three digits. */
static const char *count(double n, char *buf, size_t cap) {
    if (n >= 1e9) snprintf(buf, cap, "%.2f B", n / 1e9);
    else if (n >= 1e6) snprintf(buf, cap, "%.2f M", n / 1e6);
    else snprintf(buf, cap, "%.1f K", n / 1e3);
    return buf;
}

/* 9.00 MiB / 30.1 KiB */
static const char *size(double b, char *buf, size_t cap) {
    if (b >= (1 << 30)) snprintf(buf, cap, "%.2f GiB", gib(b));
    else if (b >= (1 << 20)) snprintf(buf, cap, "%.2f MiB", b / (1 << 20));
    else snprintf(buf, cap, "%.1f KiB", b / 1024);
    return buf;
}

static const char *rope_name(enum ft_rope_type t) {
    switch (t) {
    case FT_ROPE_LINEAR: return "linear";
    case FT_ROPE_LLAMA3: return "llama3";
    case FT_ROPE_YARN: return "yarn";
    default: return "default";
    }
}

/* What the weights add up to, from the safetensors headers or the GGUF tensor infos. */
struct sizes {
    uint64_t params, bytes, expert_params, expert_bytes;
    uint64_t *bank; /* [n_layers] host bank bytes per layer, as loaded */
    uint64_t by_type[FT_GGML_TYPE_COUNT]; /* GGUF: bytes per block format */
};

static enum ft_status st_sizes(const struct ft_st_set *set, int n_layers, struct sizes *z) {
    z->bank = calloc((size_t)n_layers, sizeof *z->bank);
    if (!z->bank) return ft_fail(FT_ERR_OOM, "inspect: out of memory");
    for (int i = 0; i < ft_st_set_count(set); i++) {
        const struct ft_st_tensor *t = ft_st_set_at(set, i);
        uint64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) n *= (uint64_t)t->shape[d];
        size_t nl = strlen(t->name); /* MXFP4 (gpt-oss): two weights per byte, scales are none */
        if (t->dtype == FT_DTYPE_U8 && nl > 7 && !strcmp(t->name + nl - 7, "_blocks")) n *= 2;
        if (t->dtype == FT_DTYPE_U8 && nl > 7 && !strcmp(t->name + nl - 7, "_scales")) n = 0;
        z->params += n;
        z->bytes += t->n_bytes;
        if (!strstr(t->name, ".experts.")) continue;
        z->expert_params += n;
        z->expert_bytes += t->n_bytes;
    }
    ft_model_file_expert_bytes(set, NULL, n_layers, z->bank);
    return FT_OK;
}

/* GGUF: every weight keeps its blocks (memory-mapped dense weights; experts copied into the
 * banks, unless gate and up differ in format: bf16 then). */
static enum ft_status gguf_sizes(const struct ft_gguf_file *f, int n_layers, struct sizes *z) {
    z->bank = calloc((size_t)n_layers, sizeof *z->bank);
    if (!z->bank) return ft_fail(FT_ERR_OOM, "inspect: out of memory");
    for (int64_t i = 0; i < ft_gguf_tensor_count(f); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor_at(f, i);
        z->params += (uint64_t)t->n_elems;
        z->bytes += t->n_bytes;
        z->by_type[t->type] += t->n_bytes;
        if (ft_gguf_expert_layer(t->name) < 0) continue;
        z->expert_params += (uint64_t)t->n_elems;
        z->expert_bytes += t->n_bytes;
    }
    ft_model_file_expert_bytes(NULL, f, n_layers, z->bank);
    return FT_OK;
}

int ft_cmd_inspect(int argc, char **argv) {
    const char *dir = NULL, *pin_budget = NULL, *cpu_layers = NULL, *synthetic = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--model") || !strcmp(argv[i], "-m")) {
            if (!(dir = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--synthetic")) {
            if (!(synthetic = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--pin-budget")) {
            if (!(pin_budget = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--moe-cpu-layers")) {
            if (!(cpu_layers = ft_cli_value(argc, argv, &i))) return 2;
        } else {
            return ft_cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        }
    }
    if (!dir == !synthetic)
        return ft_cli_usage_error("inspect", "give exactly one of --model DIR or --synthetic PRESET");
    struct ft_config c;
    struct ft_st_set *set = NULL;
    struct ft_gguf_file *gf = NULL;
    const struct ft_arch *a = NULL;
    struct sizes z = {0};
    char gpath[4096], label[300];
    int is_gguf = dir ? ft_gguf_model_path(dir, gpath, sizeof gpath) : 0;
    enum ft_status st = is_gguf < 0 ? FT_ERR_INVALID_ARG : FT_OK;
    ft_config_init(&c);
    if (synthetic) {
        struct ft_synthetic_sizes sz;
        snprintf(label, sizeof label, "synthetic:%s", synthetic);
        dir = label;
        ft_config_free(&c);
        st = ft_synthetic_config(synthetic, &c, &a);
        if (st == FT_OK) st = ft_synthetic_sizes(synthetic, &sz);
        if (st == FT_OK)
            z = (struct sizes){.params = sz.params, .bytes = sz.bytes, .expert_params = sz.expert_params,
                               .expert_bytes = sz.expert_bytes, .bank = sz.bank};
    } else if (st == FT_OK && is_gguf) {
        st = ft_gguf_open(gpath, &gf);
        if (st == FT_OK) st = ft_gguf_config(gf, &c, &a);
        if (st == FT_OK) st = gguf_sizes(gf, c.n_layers, &z);
    } else if (st == FT_OK) {
        st = ft_config_load(dir, &c);
        if (st == FT_OK && !(a = ft_arch_find(c.arch)))
            st = ft_fail(FT_ERR_UNSUPPORTED, "%s/config.json: architecture '%s' is not supported "
                         "(supported: %s)", dir, c.arch, ft_arch_list());
        if (st == FT_OK) st = ft_st_set_open(dir, &set);
        if (st == FT_OK) st = st_sizes(set, c.n_layers, &z);
    }
    if (st != FT_OK) {
        free(z.bank);
        ft_st_set_close(set);
        ft_gguf_close(gf);
        ft_config_free(&c);
        return ft_cli_fail(st);
    }
    uint64_t params = z.params, bytes = z.bytes, expert_params = z.expert_params;
    uint64_t expert_bytes = z.expert_bytes;
    int hd = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.n_heads;
    printf("model         %s\narchitecture  %s (%s)\n", dir, c.arch, c.model_type);
    printf("layers        %d, hidden %d, heads %d (kv %d, head_dim %d), vocab %d\n", c.n_layers,
           c.hidden_size, c.n_heads, c.n_kv_heads, hd, c.vocab_size);
    printf("rope          %s, theta %g, factor %g; context %d\n", rope_name(c.rope.type),
           c.rope.theta, c.rope.factor, c.max_position_embeddings);
    if (a->flags & FT_ARCH_V4)
        printf("rope (comp.)  %s, theta %g, factor %g (the compressed layers)\n",
               rope_name(c.rope_compress.type), c.rope_compress.theta > 0 ? c.rope_compress.theta : 160000.0,
               c.rope_compress.factor);
    char b1[32], b2[32];
    printf("parameters    %s total, %s on disk\n", count((double)params, b1, sizeof b1),
           size((double)bytes, b2, sizeof b2));
    if (gf) { /* the file's block formats, and what loading makes of them */
        printf("gguf formats ");
        for (int t = 0; t < FT_GGML_TYPE_COUNT; t++)
            if (z.by_type[t])
                printf(" %s %.0f%%", ft_ggml_type_name(t), 100.0 * (double)z.by_type[t] / (double)bytes);
        printf(" (of the bytes); read in these formats (the GPU widens dense weights to bf16)\n");
    }
    int E = c.n_experts, moe_layers = 0;
    if ((a->flags & FT_ARCH_MOE) && E > 0) {
        int I = ft_config_expert_width(&c, a);
        for (int l = 0; l < c.n_layers; l++) moe_layers += ft_config_layer_is_moe(&c, a, l);
        double per_expert = moe_layers ? (double)expert_bytes / ((double)moe_layers * E) : 0;
        double active = (double)(params - expert_params) +
                        (double)moe_layers * c.n_experts_per_tok * 3.0 * I * c.hidden_size;
        printf("experts       %d per layer in %d MoE layers, top-%d, width %d%s\n", E,
               moe_layers, c.n_experts_per_tok, I,
               c.shared_expert_intermediate_size > 0 ? ", shared expert" : "");
        printf("active        %s parameters per token\n", count(active, b1, sizeof b1));
        printf("expert bytes  %s per expert (gate+up+down), banks %s in all\n",
               size(per_expert, b1, sizeof b1), size((double)expert_bytes, b2, sizeof b2));
    } else {
        printf("experts       none (dense model)\n");
    }
    int n_linear = 0;
    uint64_t state = ft_config_state_bytes(&c, a, &n_linear);
    int n_kvl = c.n_layers - n_linear;
    /* f32: one latent row (GLM-5: and its indexer key), or keys and values */
    const int index_key = (a->flags & FT_ARCH_DSA) ? c.index_head_dim : 0;
    double kv_tok = (a->flags & FT_ARCH_MLA) ? 4.0 * (c.kv_lora_rank + c.qk_rope_head_dim + index_key) * n_kvl
                                             : 2.0 * 4 * (double)c.n_kv_heads * hd * n_kvl;
    double v4_seq = 0;
    int v4_kind[4] = {0};
    if ((a->flags & FT_ARCH_V4) && ft_v4_config_kv(&c, &kv_tok, &v4_seq, v4_kind) == FT_OK) {
        /* DeepSeek-V4: the compressed entries grow with the context, the windows do not */
        printf("kv cache      %s per token (compressed entries, f32: %d CSA layers with their indexer "
               "keys, %d HCA) + %s per sequence (the %d layers' sliding windows and compressors' "
               "pending rows); no full K/V\n", size(kv_tok, b1, sizeof b1), v4_kind[2], v4_kind[3],
               size(v4_seq, b2, sizeof b2), c.n_layers);
    } else {
    printf("kv cache      %s per token (%d %sattention layers)", size(kv_tok, b1, sizeof b1), n_kvl,
           (a->flags & FT_ARCH_MLA) ? "latent " : "");
    if (n_linear)
        printf("; recurrent state %s per sequence (%d Gated DeltaNet layers)", size((double)state, b2, sizeof b2),
               n_linear);
    printf("\n");
    if (n_linear && state > 0) /* ft serve's prefix cache keeps states at block boundaries */
        printf("prefix cache  one recurrent-state checkpoint a cached prompt, %s each: %d fit the "
               "default --prefix-state-mem (%s)\n", size((double)state, b1, sizeof b1),
               (int)(FT_PREFIX_STATE_MEM / state), size((double)FT_PREFIX_STATE_MEM, b2, sizeof b2));
    }
    if (c.mtp_layers > 0)
        printf("mtp           %d multi-token-prediction layer%s in the checkpoint, not used (speculative "
               "decoding with them is a later step)\n", c.mtp_layers, c.mtp_layers > 1 ? "s" : "");
    uint64_t ram = ft_sys_ram_bytes();
    struct ft_platform plat;
    ft_platform_detect(&plat);
    printf("this machine  %d physical cores, %.1f GiB RAM, CPU ISA %s%s\n",
           ft_sys_physical_cores(), gib((double)ram), ft_cpu_isa_name(ft_cpu_isa()),
           plat.kind == FT_PLATFORM_WSL2 ? ", WSL" : "");
    char gpu[400] = "no CUDA in this build";
#ifdef FT_HAVE_CUDA
    int n_dev = ft_cuda_device_count();
    struct ft_cuda_device d;
    snprintf(gpu, sizeof gpu, "no CUDA device found");
    if (n_dev > 0 && ft_cuda_device_query(0, &d) == FT_OK)
        snprintf(gpu, sizeof gpu, "GPU %s, sm_%d%d, %.1f of %.1f GiB free", d.name, d.cc_major,
                 d.cc_minor, gib((double)d.free_bytes), gib((double)d.total_bytes));
#endif
    uint64_t mem = bytes;
    printf("plan          backend cpu (%s); all %s in host RAM (%s of %.1f GiB)%s\n", gpu,
           moe_layers ? "weights and expert banks" : "weights", size((double)mem, b1, sizeof b1),
           gib((double)ram), mem > ram ? ": DOES NOT FIT, loading will fail" : "");
    int rc = 0;
    if (moe_layers) { /* what the residency manager would do with the banks here */
        uint64_t *lb = z.bank;
        z.bank = NULL;
        struct ft_residency_opts ro = {.pin_budget = pin_budget, .cpu_layers = cpu_layers};
        ro.budget.skip_probe = 1;
        struct ft_residency_plan *plan = NULL;
        st = lb ? ft_residency_plan_sizes(c.n_layers, lb, &ro, &plan) : FT_ERR_OOM;
        if (st == FT_OK) {
            char buf[4096];
            ft_residency_format(plan, buf, sizeof buf);
            printf("residency (plan; applied at load by the offload backend):\n%s", buf);
        } else {
            rc = ft_cli_fail(st);
        }
        ft_residency_plan_free(plan);
        free(lb);
    }
    free(z.bank);
    ft_st_set_close(set);
    ft_gguf_close(gf);
    ft_config_free(&c);
    return rc;
}
