/* gpt_oss.c — gpt-oss (GptOssForCausalLM): attention with q/k/v/o biases and a learnt sink
 * logit per head, sliding window (128) on the layers layer_types marks, YaRN RoPE; a router with
 * a bias whose top-k logits are softmaxed (= softmax then renormalised top-k); experts with
 * biases and a clamped SwiGLU (gate <= limit, |up| <= limit, (up + 1) * gate * sigmoid(alpha gate))
 * over interleaved gate/up columns, expert width intermediate_size. */
#include "model/arch.h"

const struct ft_arch ft_arch_gpt_oss = {
    .name = "GptOssForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_NORM_TOPK_ALWAYS | FT_ARCH_OAI_MOE,
    .moe_block = "mlp",
    .expert_width_is_intermediate = 1,
    .gguf = "gpt-oss",
};
