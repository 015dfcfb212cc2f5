/* qwen2_moe.c — Qwen2-MoE: Qwen2 attention (q/k/v biases), softmax top-k routing
 * (renormalised only with norm_topk_prob), and a shared expert scaled by sigmoid(x·w_gate). */
#include "model/arch.h"

const struct ft_arch ft_arch_qwen2_moe = {
    .name = "Qwen2MoeForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_QKV_BIAS | FT_ARCH_SHARED_EXPERT | FT_ARCH_SLIDING_QWEN,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .gguf = "qwen2moe",
};
