/* qwen3_next.c — Qwen3-Next (Qwen3-Next-80B-A3B): three Gated DeltaNet layers to one gated
 * full-attention layer, their input projections grouped per key head (in_proj_qkvz,
 * in_proj_ba); MoE with a gated shared expert, norm_topk_prob, dense layers from
 * mlp_only_layers / decoder_sparse_step. */
#include "model/arch.h"

const struct ft_arch ft_arch_qwen3_next = {
    .name = "Qwen3NextForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_QK_NORM | FT_ARCH_SHARED_EXPERT | FT_ARCH_HYBRID |
             FT_ARCH_GDN_GROUPED,
    .partial_rotary = 0.25,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    /* llama.cpp's qwen3next (in_proj_qkvz split into attn_qkv and attn_gate, ssm_ba as is:
     * gguf_model.c) always renormalises the top-k, whatever norm_topk_prob was */
    .gguf = "qwen3next",
    .gguf_norm_topk = 1,
};
