/* qwen3_moe.c — Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B, Qwen3.6-35B-A3B as a plain Qwen3-MoE shape):
 * q/k RMSNorm, softmax top-k with optional renormalisation (norm_topk_prob), dense layers from
 * mlp_only_layers and decoder_sparse_step. */
#include "model/arch.h"

const struct ft_arch ft_arch_qwen3_moe = {
    .name = "Qwen3MoeForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_QK_NORM | FT_ARCH_SLIDING_QWEN,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .gguf = "qwen3moe",
    .gguf_norm_topk = 1,
};
