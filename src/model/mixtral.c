/* mixtral.c — Mixtral: Mistral attention, softmax top-k always renormalised, experts named
 * w1 (gate), w3 (up), w2 (down) under block_sparse_moe, expert width = intermediate_size. */
#include "model/arch.h"

const struct ft_arch ft_arch_mixtral = {
    .name = "MixtralForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_SLIDING_ALL | FT_ARCH_NORM_TOPK_ALWAYS | FT_ARCH_GGUF_QK_PERMUTED,
    .moe_block = "block_sparse_moe",
    .expert_w = {"w1", "w3", "w2"},
    .expert_width_is_intermediate = 1,
    .gguf = "llama",
    .gguf_moe = 1,
};
