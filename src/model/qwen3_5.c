/* qwen3_5.c — Qwen3.5 / Qwen3.6, dense and MoE (Qwen3.6-35B-A3B, Qwen3.5-122B-A10B): the
 * Qwen3-Next hybrid with flat DeltaNet projections (in_proj_qkv, _z, _b, _a); the MoE always
 * renormalises its top-k. Text-only *ForCausalLM checkpoints and the published multimodal
 * wrappers (*ForConditionalGeneration: text_config, tensors under model.language_model.; the
 * vision tower is not read). mRoPE reduces to plain RoPE for text positions. llama.cpp's GGUF
 * files (qwen35, qwen35moe; their value heads in llama.cpp's tiled order): gguf_model.c. */
#include "model/arch.h"

#define QWEN35_FLAGS (FT_ARCH_QK_NORM | FT_ARCH_HYBRID)
#define QWEN35_MOE_FLAGS (QWEN35_FLAGS | FT_ARCH_MOE | FT_ARCH_SHARED_EXPERT | FT_ARCH_NORM_TOPK_ALWAYS)

const struct ft_arch ft_arch_qwen3_5 = {
    .name = "Qwen3_5ForCausalLM",
    .flags = QWEN35_FLAGS,
    .partial_rotary = 0.25,
    .gguf = "qwen35",
};

const struct ft_arch ft_arch_qwen3_5_vl = {
    .name = "Qwen3_5ForConditionalGeneration",
    .flags = QWEN35_FLAGS,
    .partial_rotary = 0.25,
    .prefix = "model.language_model.",
};

const struct ft_arch ft_arch_qwen3_5_moe = {
    .name = "Qwen3_5MoeForCausalLM",
    .flags = QWEN35_MOE_FLAGS,
    .partial_rotary = 0.25,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .gguf = "qwen35moe",
};

const struct ft_arch ft_arch_qwen3_5_moe_vl = {
    .name = "Qwen3_5MoeForConditionalGeneration",
    .flags = QWEN35_MOE_FLAGS,
    .partial_rotary = 0.25,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .prefix = "model.language_model.",
};
