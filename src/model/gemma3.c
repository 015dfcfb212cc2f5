/* gemma3.c — Gemma 3 text models (Gemma3ForCausalLM): RMSNorm of the form x * (1 + w), input
 * embeddings scaled by sqrt(hidden), q/k norms, a norm on the attention's output and on the MLP's
 * (pre/post_feedforward_layernorm), GELU-tanh gated MLP, sliding window on the layers
 * layer_types marks with their own RoPE base, attention scaled by query_pre_attn_scalar. */
#include "model/arch.h"

const struct ft_arch ft_arch_gemma3 = {
    .name = "Gemma3ForCausalLM",
    .flags = FT_ARCH_QK_NORM | FT_ARCH_GEMMA,
    .gguf = "gemma3",
};
