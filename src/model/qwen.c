/* qwen.c — dense Qwen2 (q/k/v biases, optional sliding window in upper layers) and Qwen3
 * (q/k RMSNorm, no biases). */
#include "model/arch.h"

const struct ft_arch ft_arch_qwen2 = {
    .name = "Qwen2ForCausalLM", .flags = FT_ARCH_QKV_BIAS | FT_ARCH_SLIDING_QWEN, .gguf = "qwen2"};
const struct ft_arch ft_arch_qwen3 = {
    .name = "Qwen3ForCausalLM", .flags = FT_ARCH_QK_NORM | FT_ARCH_SLIDING_QWEN, .gguf = "qwen3"};
