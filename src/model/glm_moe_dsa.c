/* glm_moe_dsa.c — GLM-5 / GLM-5.1 (GlmMoeDsaForCausalLM, transformers' glm_moe_dsa): DeepSeek-V3's
 * latent attention (q LoRA, interleaved-pair RoPE always) plus DeepSeek sparse attention: per
 * layer a lightning indexer (self_attn.indexer.{wq_b, wk, k_norm, weights_proj}) scores every
 * cached position for each query, sum over its index_n_heads heads of weight x relu(q . k), and
 * attention keeps the index_topk best (every position while there are fewer); indexer_types
 * "shared" layers reuse the previous layer's choice. The indexer key of each position lives in
 * the KV cache row beside the latent. The first first_k_dense_replace layers dense (3), then
 * the sigmoid router (groups, e_score_correction_bias, routed_scaling_factor 2.5) and one plain
 * shared expert. No GGUF mapping yet. */
#include "model/arch.h"

const struct ft_arch ft_arch_glm_moe_dsa = {
    .name = "GlmMoeDsaForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_MLA | FT_ARCH_DSA | FT_ARCH_SIGMOID_ROUTER | FT_ARCH_SHARED_PLAIN,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .dense_first = 3,
    .n_group = 1,
    .topk_group = 1,
    .routed_scale = 2.5,
};
