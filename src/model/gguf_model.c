/* gguf_model.c — a llama.cpp GGUF file as a model (model.h). The hyper-parameters come from
 * its metadata into struct ft_config; its tensors are renamed to the Hugging Face names
 * model.c reads, with GGML's dimension order reversed into row-major shapes, kept in their
 * block formats (the CPU matmuls dot the blocks; the GPU dequantises dense weights to bf16 at
 * upload), llama-arch q/k rows un-interleaved; stacked experts (ffn_*_exps) are copied into
 * banks in their block format (bank.h row schemas). Qwen3-Next / Qwen3.5 DeltaNet layers (ssm_*,
 * attn_qkv, attn_gate) become the flat Hugging Face tensors load_gdn reads: rows regrouped,
 * Qwen3.5's value heads moved back from llama.cpp's tiled order (or the key heads repeated
 * where ssm_out's blocks forbid that), A = -exp(A_log) back into A_log. deepseek2 (DeepSeek-V3,
 * Kimi-K2, GLM-4.7-Flash): the MLA sizes from attention.*_mla / kv_lora_rank (the file's
 * head_count_kv 1 and key_length kv_lora + rope are llama.cpp's MQA view), attn_k_b / attn_v_b
 * joined back into kv_b; deepseek2, glm4moe, minimax-m2: the sigmoid router's keys
 * (expert_gating_func, groups, weights scale, leading dense layers, shared experts) with
 * llama.cpp's defaults. Multi-token-prediction layers (nextn) are skipped.
 * Engine thread, once, from ft_model_load_ex. */
#include "model/gguf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/status.h"
#include "format/ggml_quant.h"
#include "format/gguf.h"

struct name_map {
    const char *gguf, *hf; /* hf: "%s" stands for the arch's MoE block ("mlp") */
};

static const struct name_map k_globals[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

static const struct name_map k_layer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate_inp.weight", "%s.gate.weight"},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
    /* gpt-oss (llama.cpp's converter): the MoE's input norm, attention sinks, router bias */
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"attn_sinks.weight", "self_attn.sinks"},
    {"ffn_gate_inp.bias", "%s.router.bias"},
    /* Gemma 3: the MLP's output norm */
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    /* MLA (deepseek2); attn_k_b + attn_v_b are joined back into kv_b (mla_kv_b) */
    {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
    {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"}, /* files from before the split */
    /* sigmoid routers: the score-correction bias (for the choice only) */
    {"exp_probs_b.bias", "%s.gate.e_score_correction_bias"},
};

/* DeepSeek / GLM's plain shared experts (FT_ARCH_SHARED_PLAIN) */
static const struct name_map k_shared_plain[] = {
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
};

/* stacked experts [E][rows][cols]: gate and up into the gate_up bank, down into the down bank */
/* gpt-oss's expert biases, read with the experts */
static const char *const k_expert_bias[3] = {"ffn_gate_exps.bias", "ffn_up_exps.bias",
                                             "ffn_down_exps.bias"};
static const char *const k_experts[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                         "ffn_down_exps.weight"};

/* ------------------------------------------------------------------ metadata */

static const char *key(char *buf, size_t cap, const char *arch, const char *name) {
    snprintf(buf, cap, "%s.%s", arch, name);
    return buf;
}

/* An integer key that must be there and fit in [1, INT_MAX / 2]. */
static enum ft_status req_int(const struct ft_gguf_file *f, const char *arch, const char *name,
                              int *out) {
    char k[160];
    uint64_t v;
    if (ft_gguf_get_u64(f, key(k, sizeof k, arch, name), &v) != FT_OK)
        return ft_fail(FT_ERR_FORMAT, "%s: metadata key '%s' is missing or not an integer (not a "
                       "complete llama.cpp model file?)", ft_gguf_label(f), k);
    if (v == 0 || v > (1u << 30))
        return ft_fail(FT_ERR_FORMAT, "%s: metadata key '%s' = %llu is out of range",
                       ft_gguf_label(f), k, (unsigned long long)v);
    *out = (int)v;
    return FT_OK;
}

/* An optional integer key: *out unchanged when absent; present but wrong is an error. */
static enum ft_status opt_int(const struct ft_gguf_file *f, const char *arch, const char *name,
                              int *out) {
    char k[160];
    if (!ft_gguf_get(f, key(k, sizeof k, arch, name))) return FT_OK;
    return req_int(f, arch, name, out);
}

static enum ft_status opt_f64(const struct ft_gguf_file *f, const char *arch, const char *name,
                              double *out) {
    char k[160];
    if (!ft_gguf_get(f, key(k, sizeof k, arch, name))) return FT_OK;
    return ft_gguf_get_f64(f, k, out);
}

static int has_tensor(const struct ft_gguf_file *f, const char *fmt, int l) {
    char n[160];
    snprintf(n, sizeof n, fmt, l);
    return ft_gguf_find(f, n) != NULL;
}

static void add_eos(struct ft_config *c, const struct ft_gguf_file *f, const char *k) {
    uint64_t id;
    if (ft_gguf_get_u64(f, k, &id) != FT_OK || id > INT32_MAX) return;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] == (int)id) return;
    if (c->n_eos < FT_MAX_EOS) c->eos_token_ids[c->n_eos++] = (int)id;
}

/* An optional count that may be 0 (leading_dense_block_count, expert_shared_count): *out
 * unchanged when absent. */
static enum ft_status opt_count(const struct ft_gguf_file *f, const char *arch, const char *name,
                                int *out) {
    char k[160];
    uint64_t v;
    if (!ft_gguf_get(f, key(k, sizeof k, arch, name))) return FT_OK;
    if (ft_gguf_get_u64(f, k, &v) != FT_OK || v > (1u << 30))
        return ft_fail(FT_ERR_FORMAT, "%s: metadata key '%s' must be an integer in [0, 2^30]",
                       ft_gguf_label(f), k);
    *out = (int)v;
    return FT_OK;
}

/* Head sizes of grouped-query attention: key_length (default hidden / heads) = value_length,
 * rope.dimension_count of them rotated. */
static enum ft_status head_config(const struct ft_gguf_file *f, const char *a,
                                  const struct ft_arch *arch, struct ft_config *c) {
    enum ft_status st = FT_OK;
    const char *lbl = ft_gguf_label(f);
    char k[160];
    c->head_dim = c->hidden_size / c->n_heads;
    FT_TRY(opt_int(f, a, "attention.key_length", &c->head_dim));
    int vlen = c->head_dim, rot = c->head_dim;
    FT_TRY(opt_int(f, a, "attention.value_length", &vlen));
    const int have_rot = ft_gguf_get(f, key(k, sizeof k, a, "rope.dimension_count")) != NULL;
    FT_TRY(opt_int(f, a, "rope.dimension_count", &rot));
    if (vlen != c->head_dim)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: key_length %d != value_length %d is not supported",
                       lbl, c->head_dim, vlen);
    if (c->head_dim < 2 || rot < 2 || rot > c->head_dim || rot % 2)
        return ft_fail(FT_ERR_FORMAT, "%s: head size %d and rope.dimension_count %d are inconsistent "
                       "(need an even count in [2, head size])", lbl, c->head_dim, rot);
    if (have_rot || !(arch->flags & FT_ARCH_HYBRID)) { /* hybrid: else the arch's 0.25 */
        c->rope.partial_rotary_factor = (double)rot / c->head_dim;
        c->rope.partial_rotary_set = 1;
        c->rope.rot_dims = rot;
    }
    return FT_OK;
fail:
    return st;
}

/* deepseek2 (DeepSeek-V3, Kimi-K2, GLM-4.7-Flash): the latent ranks, the per-head widths
 * (attention.key_length_mla / value_length_mla; files written before those keys existed give
 * them in key_length / value_length, which MLA-era files use for the MQA view: kv_lora_rank +
 * rope and kv_lora_rank), rope.dimension_count = the RoPE part, rotated in adjacent pairs
 * (GGML's normal rope; the converter does not permute). q_lora_rank absent: a plain attn_q. */
static enum ft_status mla_config(const struct ft_gguf_file *f, const char *a, struct ft_config *c) {
    enum ft_status st = FT_OK;
    const char *lbl = ft_gguf_label(f);
    int klen = 0, vlen = 0, kmla = 0, vmla = 0;
    FT_TRY(req_int(f, a, "attention.kv_lora_rank", &c->kv_lora_rank));
    FT_TRY(opt_int(f, a, "attention.q_lora_rank", &c->q_lora_rank));
    FT_TRY(req_int(f, a, "rope.dimension_count", &c->qk_rope_head_dim));
    FT_TRY(opt_int(f, a, "attention.key_length_mla", &kmla));
    FT_TRY(opt_int(f, a, "attention.value_length_mla", &vmla));
    if (!kmla != !vmla)
        return ft_fail(FT_ERR_FORMAT, "%s: metadata key '%s.attention.%s_length_mla' is missing (the "
                       "other one is there)", lbl, a, kmla ? "value" : "key");
    if (!kmla) { /* a file from before the MQA view: the heads' own widths */
        FT_TRY(req_int(f, a, "attention.key_length", &klen));
        FT_TRY(req_int(f, a, "attention.value_length", &vlen));
    }
    klen = kmla ? kmla : klen, vlen = vmla ? vmla : vlen;
    if (klen <= c->qk_rope_head_dim || c->qk_rope_head_dim % 2)
        return ft_fail(FT_ERR_FORMAT, "%s: %s.rope.dimension_count %d must be even and below the key "
                       "width %d (attention.key_length%s)", lbl, a, c->qk_rope_head_dim, klen,
                       kmla ? "_mla" : "");
    c->qk_nope_head_dim = klen - c->qk_rope_head_dim;
    c->v_head_dim = vlen;
    c->head_dim = klen;
    c->n_kv_heads = c->n_heads; /* head_count_kv 1 is the MQA view of the latent */
    c->rope_interleave = 1;
    c->rope.rot_dims = c->qk_rope_head_dim;
    c->rope.partial_rotary_factor = 1;
    c->rope.partial_rotary_set = 1;
    return FT_OK;
fail:
    return st;
}

/* deepseek2's YaRN as llama.cpp runs it: the rotated values unscaled (it cancels GGML's own
 * attention factor) and the softmax scale times mscale^2, mscale = 1 + 0.1 mscale_all_dim
 * ln(factor); the converter stores 0.1 mscale_all_dim as yarn_log_multiplier. */
static enum ft_status mla_yarn(const struct ft_gguf_file *f, const char *a, struct ft_config *c) {
    double ylm = 0;
    enum ft_status st = opt_f64(f, a, "rope.scaling.yarn_log_multiplier", &ylm);
    if (st != FT_OK) return st;
    c->rope.mscale_all_dim = ylm / 0.1;
    if (c->rope.attention_factor == 0) c->rope.attention_factor = 1;
    return FT_OK;
}

/* Sigmoid routers (deepseek2, glm4moe, minimax-m2): expert_gating_func must be sigmoid (2;
 * deepseek2 files without it are DeepSeek-V2's softmax, but for llama.cpp's exception of
 * GLM-4.7-Flash: 47 or 48 layers and 154880 tokens), the groups, the routed scale, the leading
 * dense layers and the plain shared experts, llama.cpp's defaults where the file is silent
 * (no groups, scale 1, none dense, none shared). */
static enum ft_status router_config(const struct ft_gguf_file *f, const char *a,
                                    const struct ft_arch *arch, struct ft_config *c) {
    enum ft_status st = FT_OK;
    const char *lbl = ft_gguf_label(f);
    char k[160];
    uint64_t fn = 2;
    if (ft_gguf_get(f, key(k, sizeof k, a, "expert_gating_func"))) {
        FT_TRY(ft_gguf_get_u64(f, k, &fn));
    } else if (arch->flags & FT_ARCH_MLA) {
        int glm_flash = (c->n_layers == 47 || c->n_layers == 48) && c->vocab_size == 154880;
        fn = glm_flash ? 2 : 1;
    }
    if (fn != 2)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: %s = %llu (%s) is not supported: this engine reads the "
                       "sigmoid-routed %s files (expert_gating_func 2, as DeepSeek-V3, Kimi-K2, GLM and "
                       "MiniMax-M2 are converted); a DeepSeek-V2-style softmax router is not", lbl, k,
                       (unsigned long long)fn, fn == 1 ? "softmax" : "not sigmoid", a);
    c->scoring_sigmoid = 1;
    c->n_group = c->topk_group = 1;
    c->routed_scaling_factor = 1;
    c->first_k_dense_replace = 0;
    c->n_shared_experts = 0;
    FT_TRY(opt_int(f, a, "expert_group_count", &c->n_group));
    FT_TRY(opt_int(f, a, "expert_group_used_count", &c->topk_group));
    FT_TRY(opt_f64(f, a, "expert_weights_scale", &c->routed_scaling_factor));
    FT_TRY(opt_count(f, a, "leading_dense_block_count", &c->first_k_dense_replace));
    FT_TRY(opt_count(f, a, "expert_shared_count", &c->n_shared_experts));
    if (c->n_experts % c->n_group || c->topk_group > c->n_group)
        return ft_fail(FT_ERR_FORMAT, "%s: %s.expert_group_count %d must divide expert_count %d and "
                       "be at least expert_group_used_count %d", lbl, a, c->n_group, c->n_experts,
                       c->topk_group);
    if (!(c->routed_scaling_factor > 0))
        return ft_fail(FT_ERR_FORMAT, "%s: %s.expert_weights_scale = %g must be > 0", lbl, a,
                       c->routed_scaling_factor);
    return FT_OK;
fail:
    return st;
}

/* Whether a Qwen3.5 file's value heads are in llama.cpp's tiled order (its converter moves
 * Hugging Face's value head g * r + j, the j-th of key head g, to j * Hk + g, so that GGML's
 * repeat of q and k lines up) and some DeltaNet layer's ssm_out is in blocks that straddle
 * value heads: its columns cannot be moved back to the grouped order. Such a file is read in
 * its own tiled order instead, with the key heads repeated once per value head (Hk := Hv): value
 * head p then reads key head p, as its tiled position p = j * Hk + g asks (key head g = p % Hk). */
static int gdn_keep_tiled(const struct ft_gguf_file *f, const struct ft_arch *arch,
                          const struct ft_config *c) {
    if ((arch->flags & FT_ARCH_GDN_GROUPED) || c->linear_num_key_heads == c->linear_num_value_heads)
        return 0;
    for (int l = 0; l < c->n_layers; l++) {
        char n[64];
        snprintf(n, sizeof n, "blk.%d.ssm_out.weight", l);
        const struct ft_gguf_tensor *g = ft_gguf_find(f, n);
        int bs = g ? ft_ggml_block_size(g->type) : 1;
        if (bs > 1 && c->linear_value_head_dim % bs) return bs;
    }
    return 0;
}

/* Qwen3-Next / Qwen3.5: the DeltaNet sizes (ssm.*), which layers are DeltaNet ones
 * (attention.recurrent_layers, else every full_attention_interval-th layer is attention). */
static enum ft_status hybrid_config(const struct ft_gguf_file *f, const char *a,
                                    const struct ft_arch *arch, struct ft_config *c) {
    enum ft_status st = FT_OK;
    const char *lbl = ft_gguf_label(f);
    char k[160];
    int dv_all = 0;
    FT_TRY(req_int(f, a, "ssm.conv_kernel", &c->linear_conv_kernel_dim));
    FT_TRY(req_int(f, a, "ssm.state_size", &c->linear_key_head_dim));
    FT_TRY(req_int(f, a, "ssm.group_count", &c->linear_num_key_heads));
    FT_TRY(req_int(f, a, "ssm.time_step_rank", &c->linear_num_value_heads));
    FT_TRY(req_int(f, a, "ssm.inner_size", &dv_all));
    if (dv_all % c->linear_num_value_heads || c->linear_num_value_heads % c->linear_num_key_heads)
        return ft_fail(FT_ERR_FORMAT, "%s: %s.ssm.inner_size %d / ssm.time_step_rank %d / "
                       "ssm.group_count %d: need whole value heads, a whole number per key head",
                       lbl, a, dv_all, c->linear_num_value_heads, c->linear_num_key_heads);
    c->linear_value_head_dim = dv_all / c->linear_num_value_heads;
    FT_TRY(opt_int(f, a, "full_attention_interval", &c->full_attention_interval));
    const struct ft_gguf_value *rl = ft_gguf_get(f, key(k, sizeof k, a, "attention.recurrent_layers"));
    if (rl) { /* one flag per block, MTP layers (false) included */
        if (rl->type != FT_GGUF_ARRAY || rl->v.arr.items || rl->v.arr.n < (uint64_t)c->n_layers)
            return ft_fail(FT_ERR_FORMAT, "%s: %s must be an array of %d flags", lbl, k, c->n_layers);
        if (!(c->linear = calloc((size_t)c->n_layers, 1))) return ft_fail(FT_ERR_OOM, "%s: out of memory", lbl);
        for (int l = 0; l < c->n_layers; l++) c->linear[l] = ft_gguf_arr_u64(rl, (uint64_t)l) != 0;
    }
    int bs = gdn_keep_tiled(f, arch, c);
    if (bs) {
        ft_log_info("%s: the DeltaNet value heads stay in llama.cpp's tiled order (ssm_out's blocks "
                    "of %d straddle value heads of %d): the %d key heads are repeated to %d, one "
                    "per value head", lbl, bs, c->linear_value_head_dim, c->linear_num_key_heads,
                    c->linear_num_value_heads);
        c->linear_num_key_heads = c->linear_num_value_heads;
    }
    return FT_OK;
fail:
    return st;
}

enum ft_status ft_gguf_config(const struct ft_gguf_file *f, struct ft_config *c,
                              const struct ft_arch **arch_out) {
    enum ft_status st = FT_OK;
    const char *lbl = ft_gguf_label(f), *a = NULL;
    ft_config_init(c);
    if (ft_gguf_get_str(f, "general.architecture", &a) != FT_OK)
        return ft_fail(FT_ERR_FORMAT, "%s: general.architecture is missing (not a llama.cpp model "
                       "file?)", lbl);
    char k[160];
    uint64_t n_exp = 0;
    if (ft_gguf_get(f, key(k, sizeof k, a, "expert_count"))) FT_TRY(ft_gguf_get_u64(f, k, &n_exp));
    const struct ft_arch *arch = ft_arch_find_gguf(a, n_exp > 0);
    if (!arch)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: GGUF architecture '%s'%s is not supported "
                       "(supported: llama, qwen2, qwen3, qwen2moe, qwen3moe, qwen3next, qwen35, "
                       "qwen35moe, deepseek2, glm4moe, minimax-m2, gpt-oss, gemma3, and llama "
                       "with experts as Mixtral)", lbl, a, n_exp ? " with experts" : "");
    *arch_out = arch;
    snprintf(c->arch, sizeof c->arch, "%s", arch->name);
    snprintf(c->model_type, sizeof c->model_type, "%s", a);
    FT_TRY(req_int(f, a, "block_count", &c->n_layers));
    /* llama.cpp counts multi-token-prediction layers (blk.N.nextn.*, after the trunk) in
     * block_count; they are not read */
    int nextn = 0;
    FT_TRY(opt_count(f, a, "nextn_predict_layers", &nextn));
    if (nextn >= c->n_layers)
        return ft_fail(FT_ERR_FORMAT, "%s: %s.nextn_predict_layers = %d leaves no layer of "
                       "block_count %d", lbl, a, nextn, c->n_layers);
    c->n_layers -= nextn;
    c->mtp_layers = nextn;
    FT_TRY(req_int(f, a, "embedding_length", &c->hidden_size));
    FT_TRY(req_int(f, a, "attention.head_count", &c->n_heads));
    c->n_kv_heads = c->n_heads;
    FT_TRY(opt_int(f, a, "attention.head_count_kv", &c->n_kv_heads));
    FT_TRY(opt_int(f, a, "feed_forward_length", &c->intermediate_size));
    FT_TRY(opt_int(f, a, "context_length", &c->max_position_embeddings));
    FT_TRY(opt_f64(f, a, "attention.layer_norm_rms_epsilon", &c->rms_norm_eps));
    FT_TRY(opt_f64(f, a, "rope.freq_base", &c->rope.theta));
    FT_TRY(arch->flags & FT_ARCH_MLA ? mla_config(f, a, c) : head_config(f, a, arch, c));
    const char *rs = NULL;
    if (ft_gguf_get(f, key(k, sizeof k, a, "rope.scaling.type"))) FT_TRY(ft_gguf_get_str(f, k, &rs));
    if (rs && strcmp(rs, "none") != 0) {
        if (strcmp(rs, "linear") == 0) {
            c->rope.type = FT_ROPE_LINEAR;
        } else if (strcmp(rs, "yarn") == 0) {
            c->rope.type = FT_ROPE_YARN;
        } else {
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: %s = '%s' is not supported (none, linear, "
                           "yarn)", lbl, k, rs);
        }
        FT_TRY(opt_f64(f, a, "rope.scaling.factor", &c->rope.factor));
        FT_TRY(opt_int(f, a, "rope.scaling.original_context_length", &c->rope.original_max_pos));
        FT_TRY(opt_f64(f, a, "rope.scaling.attn_factor", &c->rope.attention_factor));
        FT_TRY(opt_f64(f, a, "rope.scaling.yarn_beta_fast", &c->rope.beta_fast));
        FT_TRY(opt_f64(f, a, "rope.scaling.yarn_beta_slow", &c->rope.beta_slow));
        if (arch->flags & FT_ARCH_MLA) FT_TRY(mla_yarn(f, a, c));
    }
    if (!ft_gguf_find(f, "token_embd.weight"))
        return ft_fail(FT_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", lbl);
    int64_t vocab = ft_gguf_find(f, "token_embd.weight")->ne[1];
    if (vocab <= 0 || vocab > (1 << 30))
        return ft_fail(FT_ERR_FORMAT, "%s: token_embd.weight has %lld rows", lbl, (long long)vocab);
    c->vocab_size = (int)vocab;
    c->tie_word_embeddings = ft_gguf_find(f, "output.weight") ? 0 : 1;
    c->attention_bias = 0; /* hybrid models: layer 0 may be a DeltaNet one */
    for (int l = 0; l < c->n_layers; l++) c->attention_bias |= has_tensor(f, "blk.%d.attn_q.bias", l);
    if (n_exp) {
        if (n_exp > (1u << 20))
            return ft_fail(FT_ERR_FORMAT, "%s: %s = %llu is out of range", lbl, k,
                           (unsigned long long)n_exp);
        c->n_experts = (int)n_exp;
        FT_TRY(req_int(f, a, "expert_used_count", &c->n_experts_per_tok));
        FT_TRY(opt_int(f, a, "expert_feed_forward_length", &c->moe_intermediate_size));
        FT_TRY(opt_int(f, a, "expert_shared_feed_forward_length", &c->shared_expert_intermediate_size));
        c->norm_topk_prob = arch->gguf_norm_topk;
        if (ft_gguf_get(f, key(k, sizeof k, a, "expert_weights_norm")))
            FT_TRY(ft_gguf_get_bool(f, k, &c->norm_topk_prob));
        if (arch->flags & FT_ARCH_SIGMOID_ROUTER) FT_TRY(router_config(f, a, arch, c));
        /* dense layers among MoE ones: those without stacked experts (Qwen3 mlp_only_layers) */
        c->mlp_only = calloc((size_t)c->n_layers, 1);
        if (!c->mlp_only) return ft_fail(FT_ERR_OOM, "%s: out of memory", lbl);
        for (int l = 0; l < c->n_layers; l++)
            c->mlp_only[l] = !has_tensor(f, "blk.%d.ffn_gate_exps.weight", l) &&
                             has_tensor(f, "blk.%d.ffn_gate.weight", l);
    }
    if (arch->flags & FT_ARCH_GEMMA) { /* Gemma 3, as llama.cpp runs it */
        /* sliding window on every layer but each sixth (llama.cpp's swa pattern 6), the local
         * layers' RoPE base 10000, GELU-tanh; the norms' 1 + w is already in the file */
        FT_TRY(opt_int(f, a, "attention.sliding_window", &c->sliding_window));
        c->sliding = calloc((size_t)c->n_layers, 1);
        if (!c->sliding) return ft_fail(FT_ERR_OOM, "%s: out of memory", lbl);
        for (int l = 0; l < c->n_layers; l++) c->sliding[l] = (l + 1) % 6 != 0;
        c->rope_local_theta = 10000.0;
        c->gelu_tanh = 1;
        /* llama.cpp: 1/sqrt(hidden / heads) for the 62-layer 27B (query_pre_attn_scalar 168),
         * 1/sqrt(head size) for the others, as their configs say */
        c->query_pre_attn_scalar = c->n_layers == 62 ? (double)c->hidden_size / c->n_heads : c->head_dim;
    }
    if (arch->flags & FT_ARCH_OAI_MOE) { /* gpt-oss, as llama.cpp runs it */
        /* the expert width is intermediate_size here; sliding window on the even layers
         * (llama.cpp's swa pattern 2 = gpt-oss's layer_types); YaRN without truncation;
         * SwiGLU clamped at 7 with alpha 1.702 (llama.cpp's constants for this arch) */
        if (c->moe_intermediate_size) c->intermediate_size = c->moe_intermediate_size;
        FT_TRY(opt_int(f, a, "attention.sliding_window", &c->sliding_window));
        c->sliding = calloc((size_t)c->n_layers, 1);
        if (!c->sliding) return ft_fail(FT_ERR_OOM, "%s: out of memory", lbl);
        for (int l = 0; l < c->n_layers; l++) c->sliding[l] = l % 2 == 0;
        c->rope.truncate = 0;
        c->swiglu_limit = 7.0;
        c->swiglu_alpha = 1.702;
    }
    if (arch->flags & FT_ARCH_HYBRID) FT_TRY(hybrid_config(f, a, arch, c));
    if ((arch->flags & FT_ARCH_SIGMOID_ROUTER) && !(arch->flags & (FT_ARCH_MLA | FT_ARCH_QK_NORM_ALL))) {
        /* GLM-4.5: QK-norm per head when the file has it (use_qk_norm) */
        c->use_qk_norm = 0;
        for (int l = 0; l < c->n_layers; l++) c->use_qk_norm |= has_tensor(f, "blk.%d.attn_q_norm.weight", l);
    }
    uint64_t id;
    if (ft_gguf_get_u64(f, "tokenizer.ggml.bos_token_id", &id) == FT_OK && id <= INT32_MAX)
        c->bos_token_id = (int)id;
    add_eos(c, f, "tokenizer.ggml.eos_token_id");
    add_eos(c, f, "tokenizer.ggml.eot_token_id");
    add_eos(c, f, "tokenizer.ggml.eom_token_id");
    return FT_OK;
fail:
    return st;
}

/* ------------------------------------------------------------------ tensors */

/* Reverses GGML's dims into a row-major shape. */
static void hf_shape(const struct ft_gguf_tensor *g, struct ft_st_tensor *t) {
    t->n_dims = g->n_dims;
    for (int d = 0; d < g->n_dims; d++) t->shape[d] = g->ne[g->n_dims - 1 - d];
}

/* Rows [0, rows) of g dequantised into bf16 at dst (tmp: ne[0] floats). */
static enum ft_status dequant_rows_bf16(const struct ft_gguf_tensor *g, const uint8_t *src,
                                        int64_t rows, uint16_t *dst, float *tmp) {
    int64_t n = g->ne[0];
    size_t rb = ft_ggml_row_bytes(g->type, n);
    for (int64_t r = 0; r < rows; r++) {
        enum ft_status st = ft_ggml_dequant_row(g->type, src + (size_t)r * rb, tmp, n);
        if (st != FT_OK) return st;
        for (int64_t i = 0; i < n; i++) dst[(size_t)r * n + i] = ft_f32_to_bf16(tmp[i]);
    }
    return FT_OK;
}

static enum ft_status unsupported_type(const struct ft_gguf_file *f, const struct ft_gguf_tensor *g) {
    return ft_fail(FT_ERR_UNSUPPORTED, "%s: tensor '%s' is %s, which this engine cannot read yet "
                   "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, "
                   "MXFP4; pick a file quantised with those, e.g. Q4_K_M or Q8_0)", ft_gguf_label(f), g->name,
                   ft_ggml_type_name(g->type));
}

/* llama.cpp's converter interleaves each head's rows (GGML rope rotates adjacent pairs,
 * Hugging Face rotates halves): row 2i+p of a head came from row p*hd/2+i. Undone here. */
static void unpermute_rows(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes,
                           int head_dim) {
    int half = head_dim / 2;
    for (int64_t r = 0; r < rows; r++) {
        int64_t h = r / head_dim, j = r % head_dim, i = j / 2, p = j % 2;
        memcpy(dst + (size_t)(h * head_dim + p * half + i) * row_bytes, src + (size_t)r * row_bytes,
               row_bytes);
    }
}

/* One GGUF tensor into t under hf_name, in its own format (the matmuls read GGML blocks), in
 * place in the file's mapping, or copied when its rows must be un-permuted. */
static enum ft_status convert(struct ft_model *m, const struct ft_gguf_tensor *g, const char *hf_name,
                              int permute, struct ft_st_tensor *t) {
    const struct ft_gguf_file *f = m->gguf;
    char *nm = ft_model_alloc(m, strlen(hf_name) + 1);
    if (!nm) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    strcpy(nm, hf_name);
    t->name = nm;
    t->file = ft_gguf_label(f);
    hf_shape(g, t);
    t->dtype = ft_dtype_from_ggml(g->type);
    if (t->dtype == FT_DTYPE_COUNT || !ft_ggml_can_compute(g->type)) return unsupported_type(f, g);
    if (g->ne[0] <= 0 || g->n_elems <= 0)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' has no elements", t->file, g->name);
    t->n_bytes = g->n_bytes;
    t->data = g->data;
    if (!permute) return FT_OK;
    int64_t rows = g->n_elems / g->ne[0];
    size_t rb = ft_dtype_row_bytes(t->dtype, g->ne[0]);
    if (g->n_dims == 1 && !ft_dtype_is_packed(t->dtype)) /* a q/k bias: its elements move */
        rows = g->ne[0], rb = ft_dtype_size(t->dtype);
    if (rows % m->head_dim || m->head_dim % 2)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' has %lld rows, not whole heads of %d",
                       t->file, g->name, (long long)rows, m->head_dim);
    uint8_t *buf = ft_model_alloc(m, t->n_bytes);
    if (!buf) return ft_fail(FT_ERR_OOM, "%s: out of memory converting '%s'", m->label, g->name);
    unpermute_rows(buf, g->data, rows, rb, m->head_dim);
    t->data = buf;
    return FT_OK;
}

/* ------------------------------------------------------------------ DeltaNet layers */

/* A DeltaNet layer's tensors as llama.cpp writes them, and the Hugging Face layout load_gdn
 * reads (Qwen3.5's flat in_proj_qkv / _z / _b / _a, value heads grouped per key head). */
struct gdn_file {
    int Hk, Hv, dk, dv, K; /* the file's sizes (Hk: ssm.group_count) */
    int tiled;             /* Qwen3.5 converter: value heads in tiled order (gdn_keep_tiled) */
    int keep;              /* left tiled, the key heads repeated to Hv (m->gdn_hk == Hv) */
};

enum gdn_rows { /* what an output row of a rebuilt tensor is */
    GR_QKV,   /* in_proj_qkv / conv1d channels: q | k | v */
    GR_Z,     /* in_proj_z: v-head rows of dv */
    GR_HEAD,  /* in_proj_b / _a: one row per value head */
    GR_BA_B,  /* Qwen3-Next ssm_ba, per key head [b of its r value heads | a of them] */
    GR_BA_A,
    GR_IN_QKV, /* legacy Qwen3-Next ssm_in (in_proj_qkvz as is), per key head [q | k | v | z] */
    GR_IN_Z,
};

/* The file's value head that Hugging Face's value head h (= g * r + j) is. */
static int gdn_vhead(const struct gdn_file *x, int h) {
    int r = x->Hv / x->Hk;
    return x->tiled && !x->keep ? (h % r) * x->Hk + h / r : h;
}

/* The file's row for output row i of a tensor of kind w. */
static int64_t gdn_src_row(const struct gdn_file *x, enum gdn_rows w, int64_t i) {
    const int r = x->Hv / x->Hk, dk = x->dk, dv = x->dv, Dk = x->Hk * dk;
    const int64_t gs = 2 * dk + 2 * (int64_t)r * dv; /* a key head's rows in ssm_in */
    switch (w) {
    case GR_QKV: {
        int64_t dko = (int64_t)(x->keep ? x->Hv : x->Hk) * dk; /* the output's key rows */
        if (i < 2 * dko) {
            int64_t part = i / dko, head = i % dko / dk; /* kept tiled: value head p reads key
                                                            head p % Hk */
            return part * Dk + (x->keep ? head % x->Hk : head) * dk + i % dk;
        }
        i -= 2 * dko;
        return 2 * (int64_t)Dk + (int64_t)gdn_vhead(x, (int)(i / dv)) * dv + i % dv;
    }
    case GR_Z:
        return (int64_t)gdn_vhead(x, (int)(i / dv)) * dv + i % dv;
    case GR_HEAD:
        return gdn_vhead(x, (int)i);
    case GR_BA_B:
    case GR_BA_A:
        return i / r * 2 * r + (w == GR_BA_A ? r : 0) + i % r;
    case GR_IN_QKV:
        if (i < 2 * (int64_t)Dk) return i % Dk / dk * gs + (i / Dk) * dk + i % dk;
        i -= 2 * (int64_t)Dk;
        return i / ((int64_t)r * dv) * gs + 2 * dk + i % ((int64_t)r * dv);
    case GR_IN_Z:
        return i / ((int64_t)r * dv) * gs + 2 * dk + (int64_t)r * dv + i % ((int64_t)r * dv);
    }
    return 0;
}

static enum ft_status gdn_bad_shape(const struct ft_model *m, const struct ft_gguf_tensor *g,
                                    const char *want) {
    return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' has GGML shape {%lld, %lld, %lld}, expected %s "
                   "(from the ssm.* metadata)", ft_gguf_label(m->gguf), g->name, (long long)g->ne[0],
                   (long long)g->ne[1], (long long)g->ne[2], want);
}

/* t = rows of g ([in_rows, cols] row-major, any format: rows move whole) picked by w. */
static enum ft_status gdn_rows(struct ft_model *m, const struct ft_gguf_tensor *g, const char *hf,
                               const struct gdn_file *x, enum gdn_rows w, int64_t in_rows,
                               int64_t out_rows, int64_t cols, struct ft_st_tensor *t) {
    if (g->n_dims != 2 || g->ne[0] != cols || g->ne[1] != in_rows) {
        char want[64];
        snprintf(want, sizeof want, "{%lld, %lld}", (long long)cols, (long long)in_rows);
        return gdn_bad_shape(m, g, want);
    }
    enum ft_status st = convert(m, g, hf, 0, t);
    if (st != FT_OK) return st;
    t->shape[0] = out_rows;
    if ((w == GR_QKV || w == GR_Z || w == GR_HEAD) && !x->tiled) return FT_OK; /* as it is */
    size_t rb = ft_ggml_row_bytes(g->type, cols);
    uint8_t *buf = ft_model_alloc(m, (size_t)out_rows * rb);
    if (!buf) return ft_fail(FT_ERR_OOM, "%s: out of memory converting '%s'", m->label, g->name);
    for (int64_t i = 0; i < out_rows; i++)
        memcpy(buf + (size_t)i * rb, (const uint8_t *)g->data + (size_t)gdn_src_row(x, w, i) * rb, rb);
    t->data = buf;
    t->n_bytes = (size_t)out_rows * rb;
    return FT_OK;
}

/* ssm_a (A = -exp(A_log)) back into A_log, or ssm_dt.bias, in Hugging Face's head order (f32). */
static enum ft_status gdn_vec(struct ft_model *m, const struct ft_gguf_tensor *g, const char *hf,
                              const struct gdn_file *x, int is_a, struct ft_st_tensor *t) {
    enum ft_dtype dt = ft_dtype_from_ggml(g->type);
    if (g->n_dims != 1 || g->ne[0] != x->Hv) {
        char want[32];
        snprintf(want, sizeof want, "{%d}", x->Hv);
        return gdn_bad_shape(m, g, want);
    }
    if (dt != FT_DTYPE_F32 && dt != FT_DTYPE_F16 && dt != FT_DTYPE_BF16)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: tensor '%s' is %s (F32, F16 or BF16 expected)",
                       ft_gguf_label(m->gguf), g->name, ft_ggml_type_name(g->type));
    enum ft_status st = convert(m, g, hf, 0, t);
    if (st != FT_OK) return st;
    float *v = ft_model_alloc(m, (size_t)2 * x->Hv * sizeof *v);
    if (!v) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    ft_to_f32(v + x->Hv, g->data, dt, (size_t)x->Hv);
    for (int h = 0; h < x->Hv; h++) {
        float a = v[x->Hv + gdn_vhead(x, h)];
        if (is_a && !(a < 0))
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s'[%d] = %g; llama.cpp stores -exp(A_log) "
                           "there, which is < 0", ft_gguf_label(m->gguf), g->name, h, (double)a);
        v[h] = is_a ? logf(-a) : a; /* load_gdn takes -exp() of it again */
    }
    t->dtype = FT_DTYPE_F32;
    t->data = v;
    t->n_bytes = (size_t)x->Hv * sizeof *v;
    return FT_OK;
}

/* ssm_out [H, Dv]: its columns (value heads of dv) back in grouped order, moved in whole
 * blocks (gdn_keep_tiled made sure a head is whole blocks), or as is. */
static enum ft_status gdn_out(struct ft_model *m, const struct ft_gguf_tensor *g, const char *hf,
                              const struct gdn_file *x, struct ft_st_tensor *t) {
    if (g->n_dims != 2 || g->ne[0] != (int64_t)x->Hv * x->dv || g->ne[1] != m->hidden) {
        char want[64];
        snprintf(want, sizeof want, "{%d, %d}", x->Hv * x->dv, m->hidden);
        return gdn_bad_shape(m, g, want);
    }
    enum ft_status st = convert(m, g, hf, 0, t);
    if (st != FT_OK || !x->tiled || x->keep) return st;
    if (x->dv % ft_ggml_block_size(g->type))
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: tensor '%s' (%s) has blocks straddling value heads "
                       "but other layers' do not", ft_gguf_label(m->gguf), g->name,
                       ft_ggml_type_name(g->type));
    size_t rb = ft_ggml_row_bytes(g->type, g->ne[0]), hb = ft_ggml_row_bytes(g->type, x->dv);
    uint8_t *buf = ft_model_alloc(m, t->n_bytes);
    if (!buf) return ft_fail(FT_ERR_OOM, "%s: out of memory converting '%s'", m->label, g->name);
    for (int64_t row = 0; row < g->ne[1]; row++)
        for (int h = 0; h < x->Hv; h++)
            memcpy(buf + (size_t)row * rb + (size_t)h * hb,
                   (const uint8_t *)g->data + (size_t)row * rb + (size_t)gdn_vhead(x, h) * hb, hb);
    t->data = buf;
    return FT_OK;
}

/* One DeltaNet tensor of layer l (suffix: its name after "blk.l.") into ts[*k] (ssm_ba and
 * ssm_in into two); 0 when suffix is not one. */
static enum ft_status gdn_tensor(struct ft_model *m, const struct gdn_file *x,
                                 const struct ft_gguf_tensor *g, int l, const char *suffix,
                                 struct ft_st_tensor *ts, int64_t *k, int *done) {
    const int H = m->hidden, Dk = x->Hk * x->dk, Dv = x->Hv * x->dv, Cc = 2 * Dk + Dv;
    const int Cc_out = 2 * m->gdn_hk * x->dk + Dv; /* the key heads repeated when kept tiled */
    char n0[160], n1[160];
    enum ft_status st = FT_OK;
    *done = 1;
#define HF(buf, s) (snprintf(buf, sizeof buf, "model.layers.%d.linear_attn.%s", l, s), buf)
    if (!strcmp(suffix, "attn_qkv.weight")) {
        st = gdn_rows(m, g, HF(n0, "in_proj_qkv.weight"), x, GR_QKV, Cc, Cc_out, H, &ts[(*k)++]);
    } else if (!strcmp(suffix, "attn_gate.weight")) {
        st = gdn_rows(m, g, HF(n0, "in_proj_z.weight"), x, GR_Z, Dv, Dv, H, &ts[(*k)++]);
    } else if (!strcmp(suffix, "ssm_beta.weight") || !strcmp(suffix, "ssm_alpha.weight")) {
        HF(n0, suffix[4] == 'b' ? "in_proj_b.weight" : "in_proj_a.weight");
        st = gdn_rows(m, g, n0, x, GR_HEAD, x->Hv, x->Hv, H, &ts[(*k)++]);
    } else if (!strcmp(suffix, "ssm_ba.weight")) { /* Qwen3-Next: split per key head */
        st = gdn_rows(m, g, HF(n0, "in_proj_b.weight"), x, GR_BA_B, 2 * x->Hv, x->Hv, H, &ts[(*k)++]);
        if (st == FT_OK)
            st = gdn_rows(m, g, HF(n1, "in_proj_a.weight"), x, GR_BA_A, 2 * x->Hv, x->Hv, H, &ts[(*k)++]);
    } else if (!strcmp(suffix, "ssm_in.weight")) { /* early Qwen3-Next files: in_proj_qkvz as is */
        if (x->tiled) {
            *done = 0;
            return FT_OK;
        }
        st = gdn_rows(m, g, HF(n0, "in_proj_qkv.weight"), x, GR_IN_QKV, Cc + Dv, Cc, H, &ts[(*k)++]);
        if (st == FT_OK)
            st = gdn_rows(m, g, HF(n1, "in_proj_z.weight"), x, GR_IN_Z, Cc + Dv, Dv, H, &ts[(*k)++]);
    } else if (!strcmp(suffix, "ssm_conv1d.weight")) { /* {K, Cc} -> [Cc, 1, K] */
        enum ft_dtype dt = ft_dtype_from_ggml(g->type);
        if (dt != FT_DTYPE_F32 && dt != FT_DTYPE_F16 && dt != FT_DTYPE_BF16)
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: tensor '%s' is %s (F32, F16 or BF16 expected)",
                           ft_gguf_label(m->gguf), g->name, ft_ggml_type_name(g->type));
        struct ft_st_tensor *t = &ts[(*k)++];
        st = gdn_rows(m, g, HF(n0, "conv1d.weight"), x, GR_QKV, Cc, Cc_out, x->K, t);
        t->n_dims = 3;
        t->shape[0] = Cc_out, t->shape[1] = 1, t->shape[2] = x->K;
    } else if (!strcmp(suffix, "ssm_a")) {
        st = gdn_vec(m, g, HF(n0, "A_log"), x, 1, &ts[(*k)++]);
    } else if (!strcmp(suffix, "ssm_dt.bias")) {
        st = gdn_vec(m, g, HF(n0, "dt_bias"), x, 0, &ts[(*k)++]);
    } else if (!strcmp(suffix, "ssm_norm.weight")) { /* shared by the value heads, plain w */
        st = convert(m, g, HF(n0, "norm.weight"), 0, &ts[(*k)++]);
    } else if (!strcmp(suffix, "ssm_out.weight")) {
        st = gdn_out(m, g, HF(n0, "out_proj.weight"), x, &ts[(*k)++]);
    } else {
        *done = 0;
    }
#undef HF
    return st;
}

/* ------------------------------------------------------------------ MLA */

/* kv_b_proj [nh (dn + dv), Lr] (per head its dn k_nope rows, then its dv v rows) from llama.cpp's
 * split of it: attn_k_b {dn, Lr, nh} (k_nope rows transposed per head, for the absorbed form)
 * and attn_v_b {Lr, dv, nh}. Kept in their format when both are the same plain float format;
 * otherwise dequantised to f32 (the k_nope part is transposed, which moves values across GGML
 * blocks: f32 keeps every dequantised value exact). */
static enum ft_status mla_kv_b(struct ft_model *m, const struct ft_gguf_tensor *kb, int l,
                               struct ft_st_tensor *t) {
    const struct ft_gguf_file *f = m->gguf;
    const int nh = m->n_heads, dn = m->mla_nope, dv = m->mla_v, Lr = m->mla_kv_lora;
    char vn[64], hf[96];
    snprintf(vn, sizeof vn, "blk.%d.attn_v_b.weight", l);
    const struct ft_gguf_tensor *vb = ft_gguf_find(f, vn);
    if (!vb)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' is missing (attn_k_b is there: MLA needs both)",
                       ft_gguf_label(f), vn);
    const struct ft_gguf_tensor *g[2] = {kb, vb};
    const int64_t want[2][3] = {{dn, Lr, nh}, {Lr, dv, nh}};
    for (int i = 0; i < 2; i++) {
        if (g[i]->n_dims != 3 || g[i]->ne[0] != want[i][0] || g[i]->ne[1] != want[i][1] ||
            g[i]->ne[2] != want[i][2])
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' has GGML shape {%lld, %lld, %lld}, expected "
                           "{%lld, %lld, %lld} (from the attention.*_mla, kv_lora_rank and head_count "
                           "metadata)", ft_gguf_label(f), g[i]->name, (long long)g[i]->ne[0],
                           (long long)g[i]->ne[1], (long long)g[i]->ne[2], (long long)want[i][0],
                           (long long)want[i][1], (long long)want[i][2]);
        if (ft_dtype_from_ggml(g[i]->type) == FT_DTYPE_COUNT || !ft_ggml_can_compute(g[i]->type))
            return unsupported_type(f, g[i]);
    }
    enum ft_dtype dk = ft_dtype_from_ggml(kb->type), dvt = ft_dtype_from_ggml(vb->type);
    enum ft_dtype out = dk == dvt && !ft_dtype_is_packed(dk) ? dk : FT_DTYPE_F32;
    const size_t es = ft_dtype_size(out), rows = (size_t)nh * (dn + dv);
    uint8_t *buf = ft_model_alloc(m, rows * Lr * es);
    float *tmp = malloc((size_t)(Lr > dn ? Lr : dn) * sizeof *tmp);
    if (!buf || !tmp) {
        free(tmp);
        return ft_fail(FT_ERR_OOM, "%s: out of memory joining '%s'", m->label, kb->name);
    }
    const size_t kr = ft_ggml_row_bytes(kb->type, dn), vr = ft_ggml_row_bytes(vb->type, Lr);
    for (int h = 0; h < nh; h++) {
        uint8_t *head = buf + (size_t)h * (dn + dv) * Lr * es;
        for (int c = 0; c < Lr; c++) { /* k_b row (h, c): element i goes to kv_b row i, column c */
            const uint8_t *src = (const uint8_t *)kb->data + ((size_t)h * Lr + c) * kr;
            if (out != FT_DTYPE_F32) {
                for (int i = 0; i < dn; i++) memcpy(head + ((size_t)i * Lr + c) * es, src + (size_t)i * es, es);
                continue;
            }
            ft_to_f32(tmp, src, dk, (size_t)dn);
            for (int i = 0; i < dn; i++) memcpy(head + ((size_t)i * Lr + c) * es, &tmp[i], es);
        }
        for (int j = 0; j < dv; j++) { /* v_b rows as they are */
            const uint8_t *src = (const uint8_t *)vb->data + ((size_t)h * dv + j) * vr;
            uint8_t *dst = head + ((size_t)dn + j) * Lr * es;
            if (out != FT_DTYPE_F32) memcpy(dst, src, (size_t)Lr * es);
            else ft_to_f32((float *)dst, src, dvt, (size_t)Lr);
        }
    }
    free(tmp);
    snprintf(hf, sizeof hf, "model.layers.%d.self_attn.kv_b_proj.weight", l);
    char *nm = ft_model_alloc(m, strlen(hf) + 1);
    if (!nm) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    t->name = strcpy(nm, hf);
    t->file = ft_gguf_label(f);
    t->n_dims = 2;
    t->shape[0] = (int64_t)rows, t->shape[1] = Lr;
    t->dtype = out;
    t->data = buf;
    t->n_bytes = rows * Lr * es;
    return FT_OK;
}

/* "blk.12.attn_q.weight" -> 12 and "attn_q.weight"; -1 when not a layer tensor. */
static int split_layer(const char *name, const char **suffix) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long l = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || l < 0 || l > (1 << 20)) return -1;
    *suffix = end + 1;
    return (int)l;
}

enum ft_status ft_gguf_model_tensors(struct ft_model *m) {
    const struct ft_gguf_file *f = m->gguf;
    const char *lbl = ft_gguf_label(f);
    int64_t n = ft_gguf_tensor_count(f), k = 0, cap = 2 * n + 1; /* ssm_ba, ssm_in: two each */
    struct ft_st_tensor *ts = ft_model_alloc(m, (size_t)cap * sizeof *ts);
    if (!ts) return ft_fail(FT_ERR_OOM, "%s: out of memory", lbl);
    memset(ts, 0, (size_t)cap * sizeof *ts);
    int qk_perm = (m->arch->flags & FT_ARCH_GGUF_QK_PERMUTED) != 0, n_mtp = 0;
    int blocks = m->n_layers + m->cfg.mtp_layers;
    struct gdn_file gx = {0};
    if (m->n_gdn) {
        char key_hk[160];
        uint64_t hk = 0;
        snprintf(key_hk, sizeof key_hk, "%s.ssm.group_count", m->cfg.model_type);
        if (ft_gguf_get_u64(f, key_hk, &hk) != FT_OK || hk == 0 || m->gdn_hv % (int)hk)
            return ft_fail(FT_ERR_FORMAT, "%s: bad %s", lbl, key_hk);
        gx.Hk = (int)hk, gx.Hv = m->gdn_hv, gx.dk = m->gdn_dk, gx.dv = m->gdn_dv, gx.K = m->gdn_kernel;
        gx.tiled = !(m->arch->flags & FT_ARCH_GDN_GROUPED) && gx.Hk != gx.Hv;
        gx.keep = gx.tiled && m->gdn_hk != gx.Hk;
    }
    for (int64_t i = 0; i < n; i++) {
        const struct ft_gguf_tensor *g = ft_gguf_tensor_at(f, i);
        const char *suffix = NULL, *hf = NULL;
        char name[256];
        int l = split_layer(g->name, &suffix), permute = 0;
        if (l >= 0 && (l >= m->n_layers || !strncmp(suffix, "nextn.", 6)) && l < blocks) {
            n_mtp++; /* a multi-token-prediction layer's (nextn_predict_layers) */
            continue;
        } else if (l >= m->n_layers) {
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' is past block_count %d", lbl, g->name,
                           blocks);
        } else if (l >= 0) {
            int skip = 0, done = 0;
            if (m->cfg.linear && m->cfg.linear[l]) {
                enum ft_status st = gdn_tensor(m, &gx, g, l, suffix, ts, &k, &done);
                if (st != FT_OK) return st;
                if (done) continue;
            }
            for (int e = 0; e < 3; e++)
                skip |= !strcmp(suffix, k_experts[e]) || !strcmp(suffix, k_expert_bias[e]);
            if (skip) continue; /* filled into the banks by ft_gguf_load_experts */
            if (!strcmp(suffix, "attn_v_b.weight") && has_tensor(f, "blk.%d.attn_k_b.weight", l))
                continue; /* read with attn_k_b */
            if (!strcmp(suffix, "attn_v_b.weight"))
                return ft_fail(FT_ERR_FORMAT, "%s: tensor 'blk.%d.attn_k_b.weight' is missing "
                               "(attn_v_b is there: MLA needs both)", lbl, l);
            if (!strcmp(suffix, "attn_k_b.weight")) {
                enum ft_status st = mla_kv_b(m, g, l, &ts[k++]);
                if (st != FT_OK) return st;
                continue;
            }
            for (size_t j = 0; (m->arch->flags & FT_ARCH_SHARED_PLAIN) && !hf && j < 3; j++)
                if (strcmp(suffix, k_shared_plain[j].gguf) == 0) hf = k_shared_plain[j].hf;
            for (size_t j = 0; !hf && j < sizeof k_layer / sizeof k_layer[0]; j++)
                if (strcmp(suffix, k_layer[j].gguf) == 0) hf = k_layer[j].hf;
            if (hf && (m->arch->flags & FT_ARCH_OAI_MOE) && !strcmp(suffix, "ffn_gate_inp.weight"))
                hf = "%s.router.weight"; /* gpt-oss names its router "router" */
            if (hf && (m->arch->flags & FT_ARCH_GEMMA) && !strcmp(suffix, "ffn_norm.weight"))
                hf = "pre_feedforward_layernorm.weight"; /* Gemma: post_attention_norm is the other */
            if (hf) {
                char tail[128];
                snprintf(tail, sizeof tail, hf, m->arch->moe_block ? m->arch->moe_block : "mlp");
                snprintf(name, sizeof name, "model.layers.%d.%s", l, tail);
                permute = qk_perm && (!strncmp(suffix, "attn_q.", 7) || !strncmp(suffix, "attn_k.", 7));
            }
        } else if (strcmp(g->name, "rope_freqs.weight") == 0) {
            continue; /* applied by ft_gguf_rope_freqs */
        } else {
            for (size_t j = 0; !hf && j < sizeof k_globals / sizeof k_globals[0]; j++)
                if (strcmp(g->name, k_globals[j].gguf) == 0) hf = k_globals[j].hf;
            if (hf) snprintf(name, sizeof name, "%s", hf);
        }
        if (!hf)
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: tensor '%s' has no place in a %s model (a "
                           "variant this engine does not know; loading it without that tensor "
                           "would give wrong output)", lbl, g->name, m->cfg.model_type);
        enum ft_status st = convert(m, g, name, permute, &ts[k]);
        if (st != FT_OK) return st;
        if (l >= 0 && strcmp(suffix, "ffn_gate_inp_shexp.weight") == 0 && ts[k].n_dims == 1) {
            ts[k].n_dims = 2; /* GGUF keeps the shared-expert gate as a vector: [1, H] */
            ts[k].shape[1] = ts[k].shape[0], ts[k].shape[0] = 1;
        }
        k++;
    }
    if (n_mtp)
        ft_log_info("%s: the %d multi-token-prediction layer%s (%d tensors, nextn) %s not read "
                    "(speculative decoding with them is not implemented yet)", lbl,
                    m->cfg.mtp_layers, m->cfg.mtp_layers == 1 ? "" : "s", n_mtp,
                    m->cfg.mtp_layers == 1 ? "is" : "are");
    return ft_st_set_wrap(ts, (int)k, lbl, &m->st);
}

enum ft_status ft_gguf_rope_freqs(struct ft_model *m) {
    const struct ft_gguf_tensor *g = ft_gguf_find(m->gguf, "rope_freqs.weight");
    if (!g) return FT_OK;
    if (g->type != FT_GGML_F32 || g->n_elems != m->rot_dim / 2)
        return ft_fail(FT_ERR_FORMAT, "%s: rope_freqs.weight must be F32 [%d]", ft_gguf_label(m->gguf),
                       m->rot_dim / 2);
    for (int i = 0; i < m->rot_dim / 2; i++) { /* GGML divides each frequency by its factor */
        float ff;
        memcpy(&ff, (const uint8_t *)g->data + 4 * (size_t)i, 4);
        if (!(ff > 0))
            return ft_fail(FT_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g must be > 0",
                           ft_gguf_label(m->gguf), i, (double)ff);
        m->inv_freq[i] /= ff;
    }
    return FT_OK;
}

/* gpt-oss: the experts' biases (ffn_{gate,up}_exps.bias [E, I] into [E][gate | up], and
 * ffn_down_exps.bias [E, H]) and the clamped SwiGLU. */
static enum ft_status load_expert_act(struct ft_model *m, int l, struct ft_layer *L) {
    const struct ft_gguf_file *f = m->gguf;
    int E = m->n_experts, I = m->expert_inter, H = m->hidden;
    float *gu = ft_model_alloc(m, (size_t)E * 2 * I * sizeof *gu);
    float *dn = ft_model_alloc(m, (size_t)E * H * sizeof *dn);
    if (!gu || !dn) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    for (int j = 0; j < 3; j++) {
        char n[160];
        snprintf(n, sizeof n, "blk.%d.%s", l, k_expert_bias[j]);
        const struct ft_gguf_tensor *g = ft_gguf_find(f, n);
        int w = j < 2 ? I : H;
        if (!g || g->n_elems != (int64_t)E * w || g->ne[0] != w ||
            (g->type != FT_GGML_F32 && g->type != FT_GGML_F16 && g->type != FT_GGML_BF16))
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' must be a plain [%d, %d] (gpt-oss expert "
                           "bias)", ft_gguf_label(f), n, E, w);
        for (int e = 0; e < E; e++) /* gate then up in one row per expert, like the banks */
            ft_to_f32(j < 2 ? gu + (size_t)e * 2 * I + (size_t)j * I : dn + (size_t)e * H,
                      (const uint8_t *)g->data + (size_t)e * ft_ggml_row_bytes(g->type, w),
                      ft_dtype_from_ggml(g->type), (size_t)w);
    }
    L->act = (struct ft_expert_act){(float)m->cfg.swiglu_limit, (float)m->cfg.swiglu_alpha, gu, dn, FT_SWIGLU_OAI};
    return FT_OK;
}

enum ft_status ft_gguf_load_experts(struct ft_model *m, int l, struct ft_layer *L) {
    const struct ft_gguf_file *f = m->gguf;
    if (m->arch->flags & FT_ARCH_OAI_MOE) {
        enum ft_status st = load_expert_act(m, l, L);
        if (st != FT_OK) return st;
    }
    int E = m->n_experts, I = m->expert_inter, H = m->hidden;
    const struct ft_gguf_tensor *g[3];
    for (int j = 0; j < 3; j++) {
        char n[160];
        snprintf(n, sizeof n, "blk.%d.%s", l, k_experts[j]);
        g[j] = ft_gguf_find(f, n);
        int64_t c = j < 2 ? H : I, r = j < 2 ? I : H;
        if (!g[j])
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' is missing (layer %d is an MoE layer)",
                           ft_gguf_label(f), n, l);
        if (g[j]->n_dims != 3 || g[j]->ne[0] != c || g[j]->ne[1] != r || g[j]->ne[2] != E)
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected "
                           "[%d, %lld, %lld] (experts, rows, cols)", ft_gguf_label(f), n,
                           (long long)g[j]->ne[2], (long long)g[j]->ne[1], (long long)g[j]->ne[0],
                           E, (long long)r, (long long)c);
        if (ft_dtype_from_ggml(g[j]->type) == FT_DTYPE_COUNT || !ft_ggml_can_compute(g[j]->type))
            return unsupported_type(f, g[j]);
    }
    /* the banks keep the file's blocks when gate and up share a format (Q4_K_M does); else
     * both are dequantised to bf16 */
    enum ft_dtype tg = ft_dtype_from_ggml(g[0]->type), td = ft_dtype_from_ggml(g[2]->type);
    int native = g[0]->type == g[1]->type;
    const struct ft_row_schema *sgu = ft_row_schema_for(native ? tg : FT_DTYPE_BF16);
    const struct ft_row_schema *sd = ft_row_schema_for(td);
    enum ft_status st = ft_bank_init(&L->bank[FT_BANK_GATE_UP], sgu, FT_BANK_GATE_UP, E, 2 * I, H);
    if (st == FT_OK) st = ft_bank_init(&L->bank[FT_BANK_DOWN], sd, FT_BANK_DOWN, E, H, I);
    float *tmp = malloc((size_t)(H > I ? H : I) * sizeof *tmp);
    if (st == FT_OK && !tmp) st = ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    for (int e = 0; st == FT_OK && e < E; e++)
        for (int j = 0; st == FT_OK && j < 3; j++) {
            int64_t rows = g[j]->ne[1];
            size_t per = ft_ggml_row_bytes(g[j]->type, g[j]->ne[0]) * (size_t)rows;
            const uint8_t *src = (const uint8_t *)g[j]->data + per * (size_t)e;
            uint8_t *dst = ft_bank_expert(&L->bank[j < 2 ? 0 : 1], e);
            if (j == 2 || native) { /* the file's bytes: up's rows follow gate's */
                memcpy(dst + (j == 1 ? per : 0), src, per);
                continue;
            }
            st = dequant_rows_bf16(g[j], src, rows, (uint16_t *)dst + (j == 1 ? (size_t)I * H : 0), tmp);
        }
    free(tmp);
    return st;
}
