/* registry.c — the list of supported architectures. Adding one: a new file under src/model/
 * defining a const struct ft_arch, plus one line here. */
#include <string.h>

#include "model/arch.h"

extern const struct ft_arch ft_arch_llama, ft_arch_mistral, ft_arch_qwen2, ft_arch_qwen3,
    ft_arch_qwen2_moe, ft_arch_qwen3_moe, ft_arch_mixtral, ft_arch_gpt_oss, ft_arch_gemma3,
    ft_arch_qwen3_next, ft_arch_qwen3_5, ft_arch_qwen3_5_vl, ft_arch_qwen3_5_moe, ft_arch_qwen3_5_moe_vl,
    ft_arch_deepseek_v2, ft_arch_deepseek_v3, ft_arch_glm4_moe, ft_arch_glm4_moe_lite, ft_arch_minimax_m2,
    ft_arch_glm_moe_dsa, ft_arch_deepseek_v4;

static const struct ft_arch *const k_archs[] = {
    &ft_arch_llama,     &ft_arch_mistral,   &ft_arch_qwen2,   &ft_arch_qwen3,
    &ft_arch_qwen2_moe, &ft_arch_qwen3_moe, &ft_arch_mixtral, &ft_arch_gpt_oss, &ft_arch_gemma3,
    &ft_arch_qwen3_next, &ft_arch_qwen3_5, &ft_arch_qwen3_5_vl, &ft_arch_qwen3_5_moe,
    &ft_arch_qwen3_5_moe_vl, &ft_arch_deepseek_v2, &ft_arch_deepseek_v3, &ft_arch_glm4_moe, &ft_arch_glm4_moe_lite,
    &ft_arch_minimax_m2, &ft_arch_glm_moe_dsa, &ft_arch_deepseek_v4,
};

const struct ft_arch *ft_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (strcmp(k_archs[i]->name, name) == 0) return k_archs[i];
    return NULL;
}

const struct ft_arch *ft_arch_find_gguf(const char *name, int has_experts) {
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++) {
        const struct ft_arch *a = k_archs[i];
        if (!a->gguf || strcmp(a->gguf, name) != 0) continue;
        if (has_experts && !(a->flags & FT_ARCH_MOE)) continue; /* "llama" with experts: Mixtral */
        if (!has_experts && a->gguf_moe) continue;
        return a;
    }
    return NULL;
}

const char *ft_arch_list(void) {
    static char buf[1024];
    if (!buf[0]) {
        for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++) {
            if (i) strcat(buf, ", ");
            strcat(buf, k_archs[i]->name);
        }
    }
    return buf;
}
