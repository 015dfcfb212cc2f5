/* glm4_moe.c — GLM-4.5 / 4.6 / 4.7 (Glm4MoeForCausalLM): GQA attention with biases on q/k/v,
 * partial RoPE (default half of head_dim, rotate_half) and optional per-head QK-norm
 * (use_qk_norm); the first first_k_dense_replace layers dense, then DeepSeek-V3's sigmoid
 * router and plain shared experts. GLM-4.7-Flash (Glm4MoeLiteForCausalLM): DeepSeek-V3's latent
 * attention with GLM's MoE, its dense layers from mlp_layer_types (default: the first).
 * GGUF: glm4moe here; GLM-4.7-Flash is written as deepseek2 (deepseek_v3.c). */
#include "model/arch.h"

const struct ft_arch ft_arch_glm4_moe = {
    .name = "Glm4MoeForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_SIGMOID_ROUTER | FT_ARCH_SHARED_PLAIN,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .partial_rotary = 0.5,
    .dense_first = 1,
    .n_group = 1,
    .topk_group = 1,
    .routed_scale = 1.0,
    .gguf = "glm4moe",
};

const struct ft_arch ft_arch_glm4_moe_lite = {
    .name = "Glm4MoeLiteForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_MLA | FT_ARCH_SIGMOID_ROUTER | FT_ARCH_SHARED_PLAIN,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .dense_first = 1,
    .n_group = 1,
    .topk_group = 1,
    .routed_scale = 1.8,
};
