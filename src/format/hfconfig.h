/* hfconfig.h — config.json and generation_config.json of a Hugging Face checkpoint, in both
 * the transformers 4.x and 5.x spellings, into one plain struct. Read once at load. */
#ifndef FT_FORMAT_HFCONFIG_H
#define FT_FORMAT_HFCONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"

enum ft_rope_type { FT_ROPE_DEFAULT, FT_ROPE_LINEAR, FT_ROPE_LLAMA3, FT_ROPE_YARN };

struct ft_rope {
    enum ft_rope_type type;
    double theta;              /* rope_theta (default 10000) */
    double factor;             /* linear / llama3 / yarn scaling factor (1 = none) */
    double low_freq_factor;    /* llama3 (default 1) */
    double high_freq_factor;   /* llama3 (default 4) */
    int original_max_pos;      /* llama3 / yarn original_max_position_embeddings */
    double beta_fast;          /* yarn (default 32) */
    double beta_slow;          /* yarn (default 1) */
    double attention_factor;   /* yarn mscale; 0 = derive 0.1*ln(factor)+1 */
    double mscale_all_dim;     /* yarn (DeepSeek): the softmax scale times mscale(factor, it)^2 */
    int truncate;              /* yarn: 1 (default) floors/ceils the correction range */
    double partial_rotary_factor; /* fraction of head_dim rotated (default 1) */
    int partial_rotary_set;    /* the config gives it (else Qwen3-Next / Qwen3.5 use 0.25) */
    int rot_dims;              /* rotated dims when known exactly (GGUF rope.dimension_count), 0 */
};

#define FT_MAX_EOS 8

struct ft_gen_defaults {
    int has_temperature, has_top_p, has_top_k, has_repetition_penalty;
    float temperature, top_p, repetition_penalty;
    int top_k;
    int do_sample; /* -1 when absent */
};

struct ft_config {
    char arch[96];       /* architectures[0], e.g. "Qwen3MoeForCausalLM" */
    char model_type[64]; /* "qwen3_moe" */
    char torch_dtype[16];/* "bfloat16" ("dtype" in 5.x) or "" */
    int vocab_size;
    int hidden_size;
    int n_layers;
    int n_heads;
    int n_kv_heads;           /* default n_heads */
    int head_dim;             /* default hidden/heads */
    int intermediate_size;    /* dense MLP width (0 if absent) */
    int max_position_embeddings;
    double rms_norm_eps;      /* default 1e-6 */
    int tie_word_embeddings;  /* default 0 unless the arch says otherwise (-1 = absent) */
    int attention_bias;       /* -1 = absent */
    int sliding_window;       /* 0 = none (null or absent) */
    int use_sliding_window;   /* -1 = absent */
    int max_window_layers;
    struct ft_rope rope;
    /* MoE (0 when dense) */
    int n_experts;            /* num_experts or num_local_experts */
    int n_experts_per_tok;
    int moe_intermediate_size;
    int shared_expert_intermediate_size;
    int norm_topk_prob;       /* -1 = absent */
    int decoder_sparse_step;  /* default 1 */
    uint8_t *mlp_only;        /* [n_layers]: 1 if mlp_only_layers lists the layer; may be NULL */
    uint8_t *sliding;         /* [n_layers]: layer_types (gpt-oss): 1 "sliding_attention", 0
                                 "full_attention"; NULL when the config has no layer_types */
    uint8_t *linear;          /* [n_layers]: layer_types "linear_attention" (Gated DeltaNet
                                 layers of Qwen3-Next / Qwen3.5); NULL when none is listed */
    int full_attention_interval; /* hybrid models without layer_types: every N-th layer is full
                                    attention (0 = absent; the arch's default applies) */
    /* Gated DeltaNet sizes (0 = absent): key and value heads, their widths, conv kernel */
    int linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim;
    int linear_conv_kernel_dim;
    int mtp_layers;           /* mtp_num_hidden_layers / num_nextn_predict_layers: multi-token-
                                 prediction layers (not used) */
    /* Multi-head Latent Attention (DeepSeek-V2/V3, Kimi-K2, GLM-4.7-Flash; 0 when absent):
     * q LoRA rank (0: plain q_proj), latent KV rank, per-head q/k widths without and with RoPE,
     * v width; rope_interleave (-1 absent) */
    int q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    int rope_interleave;
    /* sigmoid routers (DeepSeek-V3, GLM-4.5, MiniMax-M2): scoring_func "sigmoid", groups of
     * experts of which topk_group are kept (n_group 0 or 1: none), the routed weights' scale;
     * shared experts (n_shared_experts x moe_intermediate_size); the first dense layers
     * (n_group, topk_group, first_k_dense_replace, routed_scaling_factor: -1 absent) */
    int scoring_sigmoid;
    int topk_group_limited;   /* DeepSeek-V2's topk_method "group_limited_greedy": softmax
                                 scores, the groups of the highest best score kept */
    int n_group, topk_group;
    double routed_scaling_factor;
    int n_shared_experts;
    int first_k_dense_replace;
    /* DeepSeek sparse attention (GLM-5): the lightning indexer's heads and head width, the
     * positions each query keeps (0 when absent); index_shared [n_layers]: 1 where the layer
     * reuses the previous layer's choice (indexer_types "shared", index_topk_pattern "S", or the
     * index_topk_freq / index_skip_topk_offset rule), NULL when no layer does */
    int index_topk, index_n_heads, index_head_dim;
    uint8_t *index_shared;
    int use_qk_norm;          /* GLM-4.5: -1 absent */
    int text_config;          /* the LM fields came from a multimodal wrapper's text_config */
    /* DeepSeek-V4 (0 / NULL where the config is silent; model/deepseek_v4.c applies
     * transformers' defaults): v4_attn [n_layers] from layer_types or compress_ratios, 1
     * "sliding_attention", 2 "compressed_sparse_attention", 3 "heavily_compressed_attention", 0
     * another word (NULL: neither key); hash_moe [n_layers] from mlp_layer_types "hash_moe" (1) /
     * "moe" (0), NULL when absent; compress_rates (compress_rate_csa / _hca), compress_rope_theta,
     * the compressed layers' RoPE (rope_compress: rope_parameters.compress, rope_nested 1 when the
     * config nests main / compress; else derived from the flat rope parameters), the
     * hyper-connections (hc_mult, hc_sinkhorn_iters, hc_eps), the grouped output projection
     * (o_groups, o_lora_rank), num_hash_layers (-1 absent), scoring_func "sqrtsoftplus" (1; 0
     * another function, -1 absent) */
    uint8_t *v4_attn;
    uint8_t *hash_moe;
    int compress_csa, compress_hca;
    double compress_rope_theta;
    struct ft_rope rope_compress;
    int rope_nested;
    int hc_mult, hc_sinkhorn_iters;
    double hc_eps;
    int o_groups, o_lora_rank;
    int num_hash_layers;
    int scoring_sqrtsoftplus;
    double swiglu_limit;      /* gpt-oss clamped SwiGLU: limit (0 = plain SwiGLU) and alpha */
    double swiglu_alpha;
    /* Gemma 3: RoPE of the sliding layers (rope_parameters.sliding_attention; 0 = the same as
     * every layer's), attention scale 1/sqrt(query_pre_attn_scalar) (0 = head_dim), and the MLP's
     * activation (hidden_activation / hidden_act "gelu_pytorch_tanh") */
    double rope_local_theta;
    double query_pre_attn_scalar;
    int gelu_tanh;
    /* special tokens (from config.json, overridden by generation_config.json) */
    int bos_token_id;         /* -1 = absent */
    int eos_token_ids[FT_MAX_EOS];
    int n_eos;
    struct ft_gen_defaults gen;
};

/* Zeroes cfg and sets every field's documented default (the state before parsing; GGUF
 * metadata is read onto it too). */
void ft_config_init(struct ft_config *cfg);
/* Parses config.json text (label names the source in errors). Missing required fields
 * (hidden_size, num_hidden_layers, num_attention_heads, vocab_size, architectures) and
 * wrongly typed or out-of-range values are FT_ERR_FORMAT naming the field. Fuzz entry point. */
enum ft_status ft_config_parse(const char *json, size_t len, const char *label,
                               struct ft_config *cfg);
/* Parses generation_config.json text into cfg->gen and the eos/bos ids. */
enum ft_status ft_config_parse_generation(const char *json, size_t len, const char *label,
                                          struct ft_config *cfg);
/* Reads dir/config.json and, if present, dir/generation_config.json. */
enum ft_status ft_config_load(const char *dir, struct ft_config *cfg);
void ft_config_free(struct ft_config *cfg);

#endif
