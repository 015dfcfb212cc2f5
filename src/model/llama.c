/* llama.c — dense Llama and Mistral: the plain decoder (Mistral adds a sliding window). */
#include "model/arch.h"

const struct ft_arch ft_arch_llama = {
    .name = "LlamaForCausalLM", .flags = FT_ARCH_GGUF_QK_PERMUTED, .gguf = "llama"};
const struct ft_arch ft_arch_mistral = {.name = "MistralForCausalLM", .flags = FT_ARCH_SLIDING_ALL};
