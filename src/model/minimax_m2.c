/* minimax_m2.c — MiniMax-M2 (MiniMaxM2ForCausalLM): GQA attention with one RMSNorm over all
 * heads' q and one over all heads' k, partial RoPE (rope_parameters.partial_rotary_factor);
 * a MoE in every layer, experts intermediate_size wide, a sigmoid router with the block's
 * e_score_correction_bias for the choice and always renormalised weights; no shared expert.
 * GGUF: minimax-m2 (gguf_model.c). */
#include "model/arch.h"

const struct ft_arch ft_arch_minimax_m2 = {
    .name = "MiniMaxM2ForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_QK_NORM_ALL | FT_ARCH_SIGMOID_ROUTER | FT_ARCH_NORM_TOPK_ALWAYS,
    .moe_block = "block_sparse_moe", /* as the published checkpoints (and transformers) save it */
    .expert_w = {"w1", "w3", "w2"},
    .expert_width_is_intermediate = 1,
    .gguf = "minimax-m2",
};
