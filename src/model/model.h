/* model.h — a loaded model: config, arch, every weight the forward pass reads.
 * Dense weights are used in place from the read-only checkpoint mapping when their dtype and
 * alignment allow (else copied); 1-D parameters (norms, biases) are converted to f32; routed
 * experts are repacked into per-layer host banks (mem/bank.h).
 * Built once on the engine thread; read-only afterwards (any thread may read). */
#ifndef FT_MODEL_MODEL_H
#define FT_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "format/hfconfig.h"
#include "format/quant.h"
#include "format/safetensors.h"
#include "mem/bank.h"
#include "model/arch.h"

struct ft_pool;
struct ft_gguf_file;


/* A matmul weight [rows, cols] (y = x · W^T), rows contiguous. */
struct ft_weight {
    const void *data;
    enum ft_dtype dtype;
    int rows, cols;
};

/* A DeepSeek-V4 layer's own weights (ft_layer.v4; shapes from ft_v4, hd the head width, ce the
 * compressor's entry width: hd for HCA, 2 hd for CSA (two overlapping series), dI the indexer's). */
struct ft_v4_layer {
    int kind;                   /* 1 sliding window only, 2 CSA (ratio csa, indexer), 3 HCA */
    int hash;                   /* hash-routed MoE (tid2eid) */
    struct ft_weight kv;        /* [hd, H] the shared K=V head */
    float *kv_norm;             /* [hd] */
    struct ft_weight o_a;       /* [G olr, nh hd / G]: group g's rows [g olr, (g + 1) olr) */
    struct ft_weight o_b;       /* [H, G olr] */
    struct ft_weight c_kv, c_gate; /* compressor [ce, H] */
    float *c_ape;               /* [ratio, ce] position_bias */
    float *c_norm;              /* [hd] */
    struct ft_weight i_kv, i_gate; /* the indexer's compressor [2 dI, H] (CSA) */
    float *i_ape;               /* [ratio, 2 dI] */
    float *i_norm;              /* [dI] */
    /* hyper-connections: fn [(2 + n) n, n H], base [(2 + n) n], scale [3]; attention then MLP */
    struct ft_weight hc_fn[2];
    float *hc_base[2], *hc_scale[2];
    int32_t *tid2eid;           /* [vocab, k] hash layers' experts per token id */
};

struct ft_layer {
    float *attn_norm;           /* [H] f32 */
    float *ffn_norm;            /* [H] f32 */
    struct ft_weight wq;        /* [n_heads*hd, H] */
    struct ft_weight wk, wv;    /* [n_kv*hd, H] */
    struct ft_weight wo;        /* [H, n_heads*hd] */
    float *bq, *bk, *bv, *bo;   /* biases or NULL */
    float *q_norm, *k_norm;     /* [hd] f32 or NULL (Qwen3); qk_norm_all: [nh hd] / [nkv hd] */
    int qk_norm_all;            /* q_norm / k_norm over all heads at once (MiniMax-M2) */
    float *sinks;               /* [n_heads] attention sink logits or NULL (gpt-oss) */
    float *post_attn_norm;      /* [H] norm of the attention's output or NULL (Gemma 3) */
    float *post_ffn_norm;       /* [H] norm of the MLP's output or NULL (Gemma 3) */
    int rope_local;             /* this layer rotates with inv_freq_local (Gemma 3 sliding) */
    int attn_gate;              /* wq is [n_heads * 2 hd, H], per head [q | gate]: the attention
                                   output is multiplied by sigmoid(gate) before wo (Qwen3.5) */
    /* Gated DeltaNet (linear attention) in place of attention when gdn (Qwen3-Next / Qwen3.5);
     * Dk = Hk dk, Dv = Hv dv (ft_model's gdn_* sizes), Cc = 2 Dk + Dv conv channels */
    int gdn;
    struct ft_weight gdn_qkv;   /* [Cc, H]: q (Hk x dk), k (Hk x dk), v (Hv x dv) rows */
    struct ft_weight gdn_z;     /* [Dv, H] the output gate */
    struct ft_weight gdn_b;     /* [Hv, H] beta = sigmoid(b) */
    struct ft_weight gdn_a;     /* [Hv, H] decay input */
    float *gdn_conv;            /* [Cc, K] f32: causal depthwise conv, tap K-1 on the current token */
    float *gdn_A;               /* [Hv] f32: -exp(A_log) */
    float *gdn_dt;              /* [Hv] f32: dt_bias */
    float *gdn_norm;            /* [dv] f32: the gated RMSNorm's weight (used as is) */
    struct ft_weight gdn_out;   /* [H, Dv] */
    /* Multi-head Latent Attention in place of wq/wk/wv when mla (ft_model's mla_* sizes: L the
     * latent, dn / dr the per-head q-k widths without / with RoPE, dv the value width) */
    int mla;
    struct ft_weight q_a;       /* [q_lora, H] (q LoRA), or none (wq [nh (dn + dr), H]) */
    float *q_a_norm;            /* [q_lora] */
    struct ft_weight q_b;       /* [nh (dn + dr), q_lora] */
    struct ft_weight kv_a;      /* [L + dr, H]: the latent, then the shared RoPE key */
    float *kv_a_norm;           /* [L] */
    float *bq_a, *bkv_a;        /* biases of q_a and kv_a (attention_bias) or NULL */
    struct ft_weight kv_b;      /* [nh (dn + dv), L]: per head k_nope rows, then v rows */
    struct ft_weight uk_t;      /* [nh L, dn] bf16: each head's k_nope rows of kv_b transposed,
                                   to carry q_nope into the latent space (the absorbed form) */
    /* DeepSeek sparse attention's lightning indexer (GLM-5; ft_model's dsa_* sizes: nI heads of
     * dI, the first dr dims rotated): dsa 1 runs it, 2 reuses the previous layer's choice */
    int dsa;
    struct ft_weight idx_wq;    /* [nI dI, q_lora]: the queries, from the normalised q LoRA */
    struct ft_weight idx_wk;    /* [dI, H]: the key */
    float *idx_k_norm, *idx_k_bias; /* [dI] the key's LayerNorm (eps 1e-6) */
    struct ft_weight idx_w;     /* [nI, H]: weights_proj, each head's weight for the query */
    float *router_score_bias;   /* [E] e_score_correction_bias (choice only) or NULL */
    struct ft_v4_layer *v4;     /* DeepSeek-V4's own weights (q_a, q_a_norm, q_b, sinks, idx_wq,
                                   idx_w and the MoE fields above are shared), or NULL */
    int window;                 /* sliding window (0 = full attention) */
    int is_moe;
    /* dense MLP (is_moe == 0) */
    struct ft_weight w_gate, w_up; /* [I, H] */
    struct ft_weight w_down;       /* [H, I] */
    /* MoE (is_moe == 1) */
    struct ft_weight router;       /* [E, H] */
    struct ft_bank bank[FT_BANK_N_FAMILIES]; /* gate_up [E][2I, H], down [E][H, I] */
    float *router_bias;            /* [E] or NULL (gpt-oss) */
    struct ft_expert_act act;      /* the experts' activation and biases */
    int has_shared;
    struct ft_weight sh_gate, sh_up; /* [Is, H] */
    struct ft_weight sh_down;        /* [H, Is] */
    struct ft_weight sh_score;       /* [1, H]: sigmoid gate of the shared expert */
};

/* DeepSeek-V4's sizes (ft_model.v4), transformers' defaults where config.json is silent. */
struct ft_v4 {
    int window;                 /* sliding_window (128) */
    int csa, hca;               /* compress_rates (4, 128) */
    int rot;                    /* rotated trailing dims of a head (qk_rope_head_dim, 64) */
    int hc, hc_iters;           /* hc_mult streams (4), Sinkhorn iterations (20) */
    float hc_eps;               /* (1e-6) */
    int groups, o_lora;         /* o_groups (8), o_lora_rank (1024) */
    int idx_topk, idx_heads, idx_dim; /* the CSA layers' indexer (512, 64, 128) */
    int scoring;                /* 0 softmax, 1 sigmoid, 2 sqrtsoftplus (the default) */
    float swiglu;               /* swiglu_limit (10) */
    int n_kind[4];              /* layers of each kind (1 sliding, 2 CSA, 3 HCA) */
    int n_hash;                 /* hash-routed MoE layers */
    float *inv_freq_c;          /* [rot / 2] the compressed layers' RoPE (compress_rope_theta) */
    float mscale_c;
    struct ft_weight hc_head_fn;/* [n, n H] the final stream collapse */
    float *hc_head_base, *hc_head_scale; /* [n], [1] */
};

struct ft_model {
    struct ft_config cfg;
    const struct ft_arch *arch;
    struct ft_st_set *st;       /* checkpoint tensors (NULL for synthetic models) */
    struct ft_gguf_file *gguf;  /* the GGUF file behind st, or NULL (safetensors) */
    char label[4096];           /* directory, GGUF file or synthetic preset name */
    int n_layers, hidden, n_heads, n_kv_heads, head_dim, vocab;
    int n_experts, top_k, expert_inter, norm_topk, shared_inter;
    /* Gated DeltaNet layers (n_gdn of them; 0: none): key / value heads and widths, conv
     * kernel; each sequence keeps ft_model_state_bytes of recurrent state */
    int n_gdn, gdn_hk, gdn_hv, gdn_dk, gdn_dv, gdn_kernel;
    /* MLA sizes (mla: the attention layers use them): q LoRA rank (0: q_proj), latent rank,
     * per-head widths; rope_pairs: RoPE rotates adjacent pairs (2i, 2i + 1) */
    int mla, mla_q_lora, mla_kv_lora, mla_nope, mla_rope, mla_v, rope_pairs;
    /* DeepSeek sparse attention (0: none): positions kept per query, indexer heads and width;
     * an MLA KV cache row is then [latent (L) | rotated key (dr) | indexer key (dI)] */
    int dsa_topk, dsa_heads, dsa_dim;
    /* sigmoid router: groups of experts (n_group <= 1: none), groups kept, routed weights' scale */
    int router_sigmoid, n_group, topk_group;
    int router_group_max;       /* softmax router, groups ranked by their best score (DeepSeek-V2) */
    float routed_scale;
    float rms_eps;
    struct ft_v4 *v4;           /* DeepSeek-V4 (FT_ARCH_V4), or NULL */
    struct ft_weight embed;     /* [V, H] */
    struct ft_weight lm_head;   /* [V, H] (may alias embed) */
    float *final_norm;          /* [H] f32 */
    struct ft_layer *layers;    /* [n_layers] */
    float *inv_freq;            /* [rot_dim/2] */
    float *inv_freq_local;      /* [rot_dim/2] RoPE of the local layers, or NULL */
    float rope_mscale;
    float embed_scale;          /* input embeddings times this (Gemma: sqrt(hidden)); 0 = 1 */
    float attn_scale;           /* q.k scale (Gemma: 1/sqrt(query_pre_attn_scalar)); 0 = 1/sqrt(hd) */
    int gelu_tanh;              /* dense MLP activation: GELU-tanh instead of SiLU */
    int rot_dim;
    struct ft_residency_plan *residency; /* banks registered as they loaded (ft_load_opts), or
                                            NULL; freed (unpinned) before the banks */
    /* sizes, for inspect/bench */
    uint64_t n_params, n_params_active, expert_bytes, dense_bytes;
    /* owned buffers */
    void **owned;
    int n_owned, cap_owned;
};

/* Rows [r0, r0 + n) of w, as a weight of its own (a view: no copy). */
struct ft_weight ft_weight_rows(const struct ft_weight *w, int r0, int n);

/* Loads a Hugging Face checkpoint directory, or a llama.cpp GGUF file (a path ending in
 * .gguf, or a directory holding one and no config.json). */
enum ft_status ft_model_load(const char *dir, struct ft_model **out);
/* The same, calling progress(ctx, fraction of layers loaded) after each layer (may be NULL).
 * Models of a few GB and more also log their progress every 10%. */
typedef void (*ft_progress_fn)(void *ctx, double fraction);
enum ft_status ft_model_load_ex(const char *dir, ft_progress_fn progress, void *ctx,
                                struct ft_model **out);
/* The same with options. residency (may be NULL): plan where the MoE layers' banks will live
 * (mem/residency.h: pin budget, pinned -> mlock -> pageable) from the checkpoint's expert sizes
 * before any layer is read, then register each layer on the plan's background thread as soon
 * as its banks are filled, while the loader reads the next ones; the load waits for the last
 * registration (the table is logged) and leaves the plan in m->residency for the offload
 * backend to adopt. */
struct ft_residency_opts;
struct ft_load_opts {
    ft_progress_fn progress;
    void *progress_ctx;
    const struct ft_residency_opts *residency;
};
enum ft_status ft_model_load_opts(const char *dir, const struct ft_load_opts *o,
                                  struct ft_model **out);
/* Bytes of each layer's expert tensors in a checkpoint (GGUF blk.N.ffn_*_exps, or safetensors
 * model.layers.N.*.experts.*; give one of gguf and st), into bank[0..n_layers) (zeroed first):
 * what the banks will hold, but for their alignment padding and the scales FP8/NVFP4
 * repacking moves into rows. */
struct ft_gguf_file;
/* The layer of a GGUF routed-expert tensor ("blk.N.ffn_{gate,up,down,...}_exps.*"), else -1. */
int ft_gguf_expert_layer(const char *name);
void ft_model_file_expert_bytes(const struct ft_st_set *st, const struct ft_gguf_file *gguf,
                                int n_layers, uint64_t *bank);
void ft_model_free(struct ft_model *m);

/* Computes RoPE inverse frequencies and the attention factor from cfg (rot_dim/2 values). */
enum ft_status ft_rope_init(const struct ft_config *cfg, int head_dim, float **inv_freq,
                            int *rot_dim, float *mscale);

/* For model builders (model.c, synthetic.c): an allocation freed with the model; derives
 * shapes, layers[] and RoPE tables from cfg/arch; computes the size fields after loading. */
void *ft_model_alloc(struct ft_model *m, size_t bytes);
enum ft_status ft_model_shapes(struct ft_model *m);
void ft_model_sizes(struct ft_model *m);

/* Synthetic models: real shapes, random bf16 weights generated in memory (benchmarks). */
const char *ft_synthetic_presets(void);
enum ft_status ft_model_synthetic(const char *preset, struct ft_pool *pool, uint64_t seed,
                                  struct ft_model **out);
/* The expert format a ':FORMAT' name stands for (bf16, mxfp4, nvfp4, fp8, q4_k, ...). */
enum ft_status ft_synthetic_format(const char *name, enum ft_dtype *out);
/* Fills every expert of b with the synthetic models' random weights (values of about
 * 1/sqrt(b->cols) rms in b's format), on the pool; advances *seed. */
struct ft_bank;
enum ft_status ft_bank_fill_random(struct ft_pool *pool, const struct ft_bank *b, uint64_t *seed);

/* 1 if layer l has routed experts (mlp_only_layers, decoder_sparse_step). */
int ft_model_layer_is_moe(const struct ft_model *m, int l);
/* The same rules from a config alone (ft inspect reads no weights): whether layer l is an MoE
 * layer, and the routed experts' width. */
int ft_config_layer_is_moe(const struct ft_config *c, const struct ft_arch *a, int l);
int ft_config_expert_width(const struct ft_config *c, const struct ft_arch *a);

/* Bytes of weights read per decoded token (dense + k active experts per MoE layer + head). */
uint64_t ft_model_bytes_per_token(const struct ft_model *m);
/* Bytes of recurrent state one sequence keeps (the Gated DeltaNet layers' conv windows and
 * delta-rule states, f32); 0 for a model without such layers. */
uint64_t ft_model_state_bytes(const struct ft_model *m);
/* The width of a position's KV cache row in one layer (floats): MLA's latent + rope key (+ the
 * DSA indexer key), else n_kv_heads x head_dim (keys and values each). */
int ft_model_kv_dim(const struct ft_model *m);
/* KV cache bytes one position takes over every attention layer (f32, as the engines keep it);
 * DeepSeek-V4's per-layer compressed entries and windows are not counted (0 for it). */
uint64_t ft_model_kv_token_bytes(const struct ft_model *m);
/* The same from a config alone (ft inspect): bytes per sequence, and the DeltaNet layers. */
uint64_t ft_config_state_bytes(const struct ft_config *c, const struct ft_arch *a, int *n_linear);

/* DeepSeek-V4 (model/deepseek_v4.c): sizes and defaults into m->v4 (from ft_model_shapes);
 * one layer's tensors (from the loader); the tensor-name spellings a checkpoint may use for a
 * transformers-5.17 name (alt 0: save_pretrained's, 1: DeepSeek's own, as transformers'
 * conversion maps them; 0 once there are no more). */
enum ft_status ft_v4_shapes(struct ft_model *m);
enum ft_status ft_v4_load_layer(struct ft_model *m, int l);
enum ft_status ft_v4_load_globals(struct ft_model *m);
int ft_v4_alias(const char *name, int alt, char *out, size_t cap);
/* The same sizes from a config alone (ft inspect): KV cache bytes per token (the compressed
 * entries, f32) and per sequence (the windows and the compressors' pending rows); the layers
 * of each kind ([1] sliding, [2] CSA, [3] HCA). */
enum ft_status ft_v4_config_kv(const struct ft_config *c, double *per_token, double *per_seq,
                               int n_kind[4]);

#endif
