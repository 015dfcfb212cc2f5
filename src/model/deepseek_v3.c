/* deepseek_v3.c — DeepSeek-V3 / R1 and Kimi-K2 (DeepseekV3ForCausalLM): Multi-head Latent
 * Attention (q LoRA or q_proj; the KV cache holds the normalised latent and the rotated shared
 * key, attention runs in the absorbed form), interleaved-pair RoPE (rope_interleave, default
 * on) with YaRN's softmax scale; the first first_k_dense_replace layers dense, then a MoE with
 * a sigmoid router (e_score_correction_bias for the choice only, n_group / topk_group
 * group-limited top-k, norm_topk_prob, routed_scaling_factor) and plain shared experts.
 * llama.cpp's GGUF files (deepseek2, GLM-4.7-Flash's too: its differences are metadata):
 * gguf_model.c. */
#include "model/arch.h"

/* DeepSeek-V2 / V2-Lite / V2.5 (DeepseekV2ForCausalLM): the same MLA (RoPE always on adjacent
 * pairs) and plain shared experts; the router is a softmax over all experts, its top-k
 * ("greedy") or, with topk_method "group_limited_greedy", the top-k within the topk_group of
 * n_group groups whose best score is highest; the weights are the scores (never renormalised)
 * times routed_scaling_factor. */
const struct ft_arch ft_arch_deepseek_v2 = {
    .name = "DeepseekV2ForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_MLA | FT_ARCH_SHARED_PLAIN,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .routed_scale = 1,
};

const struct ft_arch ft_arch_deepseek_v3 = {
    .name = "DeepseekV3ForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_MLA | FT_ARCH_SIGMOID_ROUTER | FT_ARCH_SHARED_PLAIN,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .dense_first = 3,
    .n_group = 8,
    .topk_group = 4,
    .routed_scale = 2.5,
    .gguf = "deepseek2",
};
