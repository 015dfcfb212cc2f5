/* arch.h — what differs between architectures: tensor names, optional parts, router rule.
 * One const struct ft_arch per file under src/model/, listed in registry.c. The loader
 * (model.c) reads these descriptions; nothing else in the engine branches on the arch name.
 * Read-only; any thread. */
#ifndef FT_MODEL_ARCH_H
#define FT_MODEL_ARCH_H

#include "format/hfconfig.h"

enum ft_arch_flag {
    FT_ARCH_QK_NORM = 1 << 0,       /* RMSNorm on q and k per head (Qwen3) */
    FT_ARCH_QKV_BIAS = 1 << 1,      /* q/k/v projections always have biases (Qwen2) */
    FT_ARCH_SHARED_EXPERT = 1 << 2, /* shared expert with a sigmoid gate (Qwen2-MoE) */
    FT_ARCH_MOE = 1 << 3,           /* has routed experts */
    FT_ARCH_SLIDING_ALL = 1 << 4,   /* config sliding_window applies to every layer (Mistral) */
    FT_ARCH_SLIDING_QWEN = 1 << 5,  /* use_sliding_window + max_window_layers rule (Qwen2) */
    FT_ARCH_NORM_TOPK_ALWAYS = 1 << 6, /* top-k weights always renormalised (Mixtral) */
    FT_ARCH_GGUF_QK_PERMUTED = 1 << 7, /* GGUF stores q/k rows interleaved for GGML's rope */
    FT_ARCH_OAI_MOE = 1 << 8,       /* gpt-oss: attention sinks, layer_types windows, router
                                       bias, expert biases, clamped SwiGLU with (up + 1) */
    FT_ARCH_GEMMA = 1 << 9,         /* Gemma 3: (1 + w) norms, embeddings times sqrt(H), norms
                                       after attention and after the MLP, GELU-tanh, local RoPE */
    FT_ARCH_HYBRID = 1 << 10,       /* Qwen3-Next / Qwen3.5: Gated DeltaNet layers among gated
                                       full-attention ones (layer_types; default every 4th full),
                                       q_proj rows per head [q | gate], (1 + w) norms except the
                                       DeltaNet's gated one, partial RoPE (default 0.25) */
    FT_ARCH_GDN_GROUPED = 1 << 11,  /* Qwen3-Next: in_proj_qkvz / in_proj_ba rows grouped per key
                                       head (Qwen3.5: in_proj_qkv, _z, _b, _a) */
    FT_ARCH_MLA = 1 << 12,          /* Multi-head Latent Attention (DeepSeek-V2/V3, Kimi-K2):
                                       q LoRA (or q_proj), latent KV + a shared RoPE key */
    FT_ARCH_SIGMOID_ROUTER = 1 << 13, /* sigmoid scores, e_score_correction_bias for selection,
                                       group-limited top-k, routed_scaling_factor */
    FT_ARCH_SHARED_PLAIN = 1 << 14, /* shared_experts: one ungated MLP of n_shared_experts x
                                       moe_intermediate_size (DeepSeek, GLM) */
    FT_ARCH_QK_NORM_ALL = 1 << 15,  /* q_norm / k_norm over all heads at once (MiniMax-M2) */
    FT_ARCH_DSA = 1 << 16,          /* DeepSeek sparse attention on MLA (GLM-5): a lightning
                                       indexer (self_attn.indexer.*) keeps index_topk positions
                                       per query; RoPE in interleaved pairs whatever the config */
    FT_ARCH_V4 = 1 << 17,           /* DeepSeek-V4 (model/deepseek_v4.c): sliding-window attention
                                       with sinks plus compressed (CSA, indexer top-k) or heavily
                                       compressed (HCA) KV per layer_types, one shared K=V head,
                                       grouped low-rank output, hyper-connections, hash-routed /
                                       sqrtsoftplus MoE with clamped SwiGLU */
};

struct ft_arch {
    const char *name;        /* architectures[0] in config.json */
    unsigned flags;          /* enum ft_arch_flag */
    const char *moe_block;   /* "mlp" or "block_sparse_moe" */
    const char *expert_w[3]; /* per-expert tensor names: gate, up, down */
    /* expert FFN width: moe_intermediate_size, or intermediate_size (Mixtral) */
    int expert_width_is_intermediate;
    /* GGUF general.architecture this arch is read from ("qwen3moe"), NULL if none; gguf_moe:
     * 1 when it is the MoE variant sharing that name (Mixtral: "llama" with experts) */
    const char *gguf;
    int gguf_moe;
    int gguf_norm_topk; /* norm_topk_prob when the GGUF has no expert_weights_norm (llama.cpp's) */
    /* where the language model's tensors are ("model." when NULL; a multimodal wrapper's:
     * "model.language_model.") */
    const char *prefix;
    /* defaults where config.json is silent (transformers' for the arch): the rotated fraction of
     * head_dim (0: 1), the leading dense layers, expert groups and groups kept, the routed
     * weights' scale (0: 1) */
    double partial_rotary;
    int dense_first, n_group, topk_group;
    double routed_scale;
};

/* The arch for config.json's architectures[0], or NULL. */
const struct ft_arch *ft_arch_find(const char *name);
/* The arch for a GGUF general.architecture (has_experts: the file has routed experts), or NULL. */
const struct ft_arch *ft_arch_find_gguf(const char *name, int has_experts);
/* Comma-separated list of supported names (for error messages). */
const char *ft_arch_list(void);

#endif
