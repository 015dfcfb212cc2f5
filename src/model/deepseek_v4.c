/* deepseek_v4.c — DeepSeek-V4 (DeepseekV4ForCausalLM, transformers 5.17's deepseek_v4): its
 * sizes and defaults, its layers' tensors and the checkpoint spellings they may come in. The
 * forward pass is engine/forward_v4.c.
 *
 * Every layer attends through one shared K=V head (head_dim, the last qk_rope_head_dim dims
 * rotated in interleaved pairs, the output rotated back) over a sliding window of
 * sliding_window tokens with per-head sinks; layer_types adds compressed entries:
 * "compressed_sparse_attention" (CSA) one per compress_rates[csa] (4) tokens from two
 * overlapping series, of which a lightning indexer keeps the index_topk best per query;
 * "heavily_compressed_attention" (HCA) one per compress_rates[hca] (128) tokens, all kept.
 * Sliding layers rotate with rope_theta, the compressed ones with compress_rope_theta (and the
 * config's YaRN, cos / sin unscaled). q LoRA, an unweighted per-head RMSNorm on q, the output
 * through o_groups low-rank groups (o_a_proj) then o_b_proj. The residual is hc_mult streams
 * mixed around each sublayer by hyper-connections (Sinkhorn-normalised comb). Every layer is
 * MoE: mlp_layer_types "hash_moe" layers (the first num_hash_layers = 3 by default) take their
 * experts from tid2eid[token id], the others top-k of sqrtsoftplus scores + e_score_correction_bias;
 * weights the scores renormalised times routed_scaling_factor (1.5); one shared expert; SwiGLU
 * clamped at swiglu_limit (10). The multi-token-prediction layer (mtp.*) is not read.
 *
 * Tensor names: transformers' in-memory ones (model.layers.N.self_attn.q_a_proj.weight,
 * mlp.experts.gate_up_proj [E, 2I, H] / down_proj [E, H, I]) are what the loader asks for;
 * ft_v4_alias gives the spellings save_pretrained writes (model.layers.N.attn.wq_a.weight,
 * ffn.experts.E.w1.weight, head.weight: transformers' conversion reverted) and DeepSeek's
 * own (the same without "model.", embed.weight, hc_head_fn, *.scale for FP8's scale_inv). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/status.h"
#include "format/fp_formats.h"
#include "model/arch.h"
#include "model/model.h"
#include "model/model_impl.h"

const struct ft_arch ft_arch_deepseek_v4 = {
    .name = "DeepseekV4ForCausalLM",
    .flags = FT_ARCH_MOE | FT_ARCH_V4,
    .moe_block = "mlp",
    .expert_w = {"gate_proj", "up_proj", "down_proj"},
    .routed_scale = 1.5,
};

/* transformers' DeepseekV4Config defaults */
#define V4_WINDOW 128
#define V4_CSA 4
#define V4_HCA 128
#define V4_HC 4
#define V4_HC_ITERS 20
#define V4_GROUPS 8
#define V4_OLORA 1024
#define V4_TOPK 512
#define V4_IHEADS 64
#define V4_IDIM 128
#define V4_HASH 3
#define V4_SWIGLU 10.0

/* The sizes a config gives, transformers' defaults where it is silent; kind[l] / hash[l] per
 * layer (either may be NULL). label NULL: no messages (ft inspect reports its own). */
static enum ft_status resolve(const struct ft_config *c, const char *label, struct ft_v4 *z,
                              uint8_t *kind, uint8_t *hash) {
    const int n = c->n_layers, hd = c->head_dim;
    memset(z, 0, sizeof *z);
    z->window = c->sliding_window > 0 ? c->sliding_window : V4_WINDOW;
    z->csa = c->compress_csa > 0 ? c->compress_csa : V4_CSA;
    z->hca = c->compress_hca > 0 ? c->compress_hca : V4_HCA;
    double prf = c->rope.partial_rotary_set ? c->rope.partial_rotary_factor
                 : c->qk_rope_head_dim > 0 ? (double)c->qk_rope_head_dim / hd : 64.0 / 512.0;
    z->rot = (int)(hd * prf + 1e-9) & ~1;
    z->hc = c->hc_mult > 0 ? c->hc_mult : V4_HC;
    z->hc_iters = c->hc_sinkhorn_iters > 0 ? c->hc_sinkhorn_iters : V4_HC_ITERS;
    z->hc_eps = (float)(c->hc_eps > 0 ? c->hc_eps : 1e-6);
    z->groups = c->o_groups > 0 ? c->o_groups : V4_GROUPS;
    z->o_lora = c->o_lora_rank > 0 ? c->o_lora_rank : V4_OLORA;
    z->idx_topk = c->index_topk > 0 ? c->index_topk : V4_TOPK;
    z->idx_heads = c->index_n_heads > 0 ? c->index_n_heads : V4_IHEADS;
    z->idx_dim = c->index_head_dim > 0 ? c->index_head_dim : V4_IDIM;
    z->scoring = c->scoring_sqrtsoftplus != 0 ? 2 : c->scoring_sigmoid ? 1 : 0;
    z->swiglu = (float)(c->swiglu_limit > 0 ? c->swiglu_limit : V4_SWIGLU);
    const int n_hash = c->num_hash_layers >= 0 ? c->num_hash_layers : V4_HASH;
    for (int l = 0; l < n; l++) {
        int k;
        if (c->v4_attn) {
            k = c->v4_attn[l];
            if (!k)
                return label ? ft_fail(FT_ERR_FORMAT, "%s/config.json: 'layer_types[%d]' is not a DeepSeek-V4 "
                                       "layer type (sliding_attention, compressed_sparse_attention, "
                                       "heavily_compressed_attention)", label, l)
                             : FT_ERR_FORMAT;
        } else { /* transformers' default: 2 HCA, then HCA / CSA alternating */
            k = l < 2 ? 3 : (l - 2) % 2 ? 2 : 3;
        }
        if (c->mlp_only && c->mlp_only[l])
            return label ? ft_fail(FT_ERR_FORMAT, "%s/config.json: 'mlp_layer_types[%d]' is \"dense\"; "
                                   "every DeepSeek-V4 layer is \"hash_moe\" or \"moe\"", label, l)
                         : FT_ERR_FORMAT;
        int h = c->hash_moe ? c->hash_moe[l] : l < n_hash;
        z->n_kind[k]++;
        z->n_hash += h;
        if (kind) kind[l] = (uint8_t)k;
        if (hash) hash[l] = (uint8_t)h;
    }
    if (!label) return FT_OK;
    const int nh = c->n_heads;
    if (c->n_kv_heads != 1)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: num_key_value_heads is %d; DeepSeek-V4 has one "
                       "shared K=V head (1)", label, c->n_kv_heads);
    if (z->rot <= 0 || z->rot > hd)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: the rotated dims (qk_rope_head_dim / "
                       "partial_rotary_factor: %d) must be in (0, head_dim %d]", label, z->rot, hd);
    if (c->q_lora_rank <= 0)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: 'q_lora_rank' is missing (DeepSeek-V4's q "
                       "LoRA)", label);
    if (nh % z->groups || ((int64_t)nh * hd) % z->groups)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: o_groups %d does not divide the %d heads "
                       "(num_attention_heads)", label, z->groups, nh);
    if (z->n_kind[2] && z->idx_dim < z->rot)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: index_head_dim %d is below the %d rotated dims",
                       label, z->idx_dim, z->rot);
    if (z->window < 1 || z->csa < 1 || z->hca < 1)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: sliding_window and compress_rates must be >= 1",
                       label);
    return FT_OK;
}

enum ft_status ft_v4_config_kv(const struct ft_config *c, double *per_token, double *per_seq,
                               int n_kind[4]) {
    struct ft_v4 z;
    uint8_t *kind = malloc((size_t)c->n_layers);
    if (!kind) return FT_ERR_OOM;
    enum ft_status st = resolve(c, NULL, &z, kind, NULL);
    const double hd = c->head_dim, dI = z.idx_dim;
    *per_token = *per_seq = 0;
    for (int l = 0; st == FT_OK && l < c->n_layers; l++) {
        *per_seq += 4.0 * z.window * hd; /* the window's K=V rows */
        if (kind[l] == 2) {
            *per_token += 4.0 * (hd + dI) / z.csa;
            *per_seq += 4.0 * 2 * z.csa * 2 * (2 * hd + 2 * dI); /* two windows of kv and gate rows */
        } else if (kind[l] == 3) {
            *per_token += 4.0 * hd / z.hca;
            *per_seq += 4.0 * z.hca * 2 * hd;
        }
    }
    memcpy(n_kind, z.n_kind, sizeof z.n_kind);
    free(kind);
    return st;
}

enum ft_status ft_v4_shapes(struct ft_model *m) {
    struct ft_config *c = &m->cfg;
    if (!(m->arch->flags & FT_ARCH_V4)) { /* its layer and MLP kinds belong to no other arch */
        for (int l = 0; l < m->n_layers; l++) {
            if (c->v4_attn && c->v4_attn[l] >= 2)
                return ft_fail(FT_ERR_UNSUPPORTED, "%s/config.json: 'layer_types[%d]' is a compressed "
                               "attention (DeepSeek-V4's), which %s does not have", m->label, l,
                               m->arch->name);
            if (c->hash_moe && c->hash_moe[l])
                return ft_fail(FT_ERR_UNSUPPORTED, "%s/config.json: 'mlp_layer_types[%d]' is "
                               "\"hash_moe\" (DeepSeek-V4's), which %s does not have", m->label, l,
                               m->arch->name);
        }
        return FT_OK;
    }
    struct ft_v4 *z = ft_model_alloc(m, sizeof *z);
    uint8_t *kind = ft_model_alloc(m, (size_t)m->n_layers), *hash = ft_model_alloc(m, (size_t)m->n_layers);
    if (!z || !kind || !hash) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    enum ft_status st = resolve(c, m->label, z, kind, hash);
    if (st != FT_OK) return st;
    if (m->n_experts <= 0)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: 'n_routed_experts' is missing (every "
                       "DeepSeek-V4 layer is MoE)", m->label);
    for (int l = 0; l < m->n_layers; l++) {
        struct ft_v4_layer *X = ft_model_alloc(m, sizeof *X);
        if (!X) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
        memset(X, 0, sizeof *X);
        X->kind = kind[l], X->hash = hash[l];
        m->layers[l].v4 = X;
        m->layers[l].is_moe = 1;
    }
    m->v4 = z;
    m->n_kv_heads = 1;
    m->head_dim = c->head_dim;
    m->shared_inter = c->moe_intermediate_size; /* transformers' shared MLP, whatever n_shared_experts */
    m->norm_topk = 1;                           /* the V4 routers always renormalise */
    m->routed_scale = (float)(c->routed_scaling_factor >= 0 ? c->routed_scaling_factor : 1.5);
    /* both RoPEs rotate the last rot dims; the main one is ft_model_shapes' inv_freq */
    c->rope.partial_rotary_factor = (double)z->rot / m->head_dim;
    c->rope.partial_rotary_set = 1;
    c->rope.rot_dims = z->rot;
    struct ft_config cc = *c;
    cc.rope = c->rope_compress;
    if (cc.rope.theta <= 0) cc.rope.theta = c->compress_rope_theta > 0 ? c->compress_rope_theta : 160000.0;
    cc.rope.rot_dims = z->rot;
    float *f = NULL;
    int rd;
    if ((st = ft_rope_init(&cc, m->head_dim, &f, &rd, &z->mscale_c)) != FT_OK) return st;
    z->inv_freq_c = ft_model_alloc(m, (size_t)(rd / 2) * sizeof(float));
    if (z->inv_freq_c) memcpy(z->inv_freq_c, f, (size_t)(rd / 2) * sizeof(float));
    free(f);
    if (!z->inv_freq_c) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    return FT_OK;
}

/* A 2-D f32 copy of a [rows, cols] tensor (position_bias), as load_vec reads 1-D ones. */
static enum ft_status load_mat_f32(struct ft_model *m, const char *name, int rows, int cols, float **out) {
    const struct ft_st_tensor *t;
    enum ft_status st = ft_model_get_tensor(m, name, 2, rows, cols, &t);
    if (st != FT_OK) return st;
    if (t->dtype != FT_DTYPE_F32 && t->dtype != FT_DTYPE_BF16 && t->dtype != FT_DTYPE_F16)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: tensor '%s' is %s (F32/BF16/F16 only)", t->file, name,
                       ft_dtype_name(t->dtype));
    float *p = ft_model_alloc(m, (size_t)rows * cols * sizeof *p);
    if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    ft_to_f32(p, t->data, t->dtype, (size_t)rows * cols);
    m->n_params += (uint64_t)rows * cols;
    m->dense_bytes += ft_dtype_row_bytes(t->dtype, (int64_t)rows * cols);
    *out = p;
    return FT_OK;
}

/* tid2eid [vocab, k] (integers) as int32, every id an expert. */
static enum ft_status load_tid2eid(struct ft_model *m, const char *name, int32_t **out) {
    const int V = m->vocab, k = m->top_k, E = m->n_experts;
    const struct ft_st_tensor *t = ft_model_find(m, name);
    if (!t)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' is missing (a hash_moe layer's token -> "
                       "experts table; do mlp_layer_types / num_hash_layers match the weights?)",
                       m->label, name);
    if ((t->dtype != FT_DTYPE_I64 && t->dtype != FT_DTYPE_I32) || t->n_dims != 2 || t->shape[0] != V ||
        t->shape[1] != k)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' must be I64 or I32 [%d, %d] (vocab_size, "
                       "num_experts_per_tok), got %s", t->file, name, V, k, ft_dtype_name(t->dtype));
    int32_t *p = ft_model_alloc(m, (size_t)V * k * sizeof *p);
    if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    for (size_t i = 0; i < (size_t)V * k; i++) {
        int64_t v;
        if (t->dtype == FT_DTYPE_I64) memcpy(&v, (const uint8_t *)t->data + 8 * i, 8);
        else {
            int32_t w;
            memcpy(&w, (const uint8_t *)t->data + 4 * i, 4);
            v = w;
        }
        if (v < 0 || v >= E)
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' routes token %zu to expert %lld (of %d)",
                           t->file, name, i / k, (long long)v, E);
        p[i] = (int32_t)v;
    }
    *out = p;
    return FT_OK;
}

#define NAME(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

/* One FP4 expert matrix [rows, K] as the published DeepSeek-V4 checkpoints store it: `name` I8
 * [rows, K/2] (two e2m1 codes a byte, element 2j in the low nibble, as DeepSeek's and
 * transformers' dequantisers read it) and <name>_scale_inv, spelt `.scale` there, F8_E8M0 (or U8
 * exponent bytes) [rows, K/32]: value = e2m1 * 2^(scale - 127) (OCP MX v1.0), into the bank's
 * MXFP4 rows at dst. */
static enum ft_status fp4_matrix(struct ft_model *m, const char *name, int rows, int K, uint8_t *dst) {
    char sn[300];
    snprintf(sn, sizeof sn, "%s_scale_inv", name);
    const struct ft_st_tensor *w = ft_model_find(m, name), *s = ft_model_find(m, sn);
    if (!w || w->dtype != FT_DTYPE_I8 || w->n_dims != 2 || w->shape[0] != rows || w->shape[1] != K / 2)
        return ft_fail(FT_ERR_FORMAT, "%s: FP4 expert tensor '%s' must be I8 [%d, %d] (two e2m1 a byte, "
                       "like the layer's first expert)", m->label, w ? w->name : name, rows, K / 2);
    if (!s && strcmp(w->name, name)) /* name the scales as the weight's file spells them */
        snprintf(sn, sizeof sn, "%.*sscale", (int)(strlen(w->name) - strlen("weight")), w->name);
    if (!s || (s->dtype != FT_DTYPE_F8_E8M0 && s->dtype != FT_DTYPE_U8) || s->n_dims != 2 ||
        s->shape[0] != rows || s->shape[1] != K / 32)
        return ft_fail(FT_ERR_FORMAT, "%s: FP4 expert tensor '%s' needs its scales '%s' F8_E8M0 [%d, %d] "
                       "(one E8M0 per 32 inputs, as DeepSeek-V4 checkpoints store them)", m->label,
                       w->name, s ? s->name : sn, rows, K / 32);
    if (ft_mxfp4_pack_ggml(dst, w->data, s->data, (size_t)rows, (size_t)K))
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' holds NaN scales (E8M0 0xFF): a corrupt download?",
                       s->file, s->name);
    return FT_OK;
}

/* The routed experts: FP4 ones (I8 weights, DeepSeek's expert_dtype "fp4") repacked into MXFP4
 * banks, gate rows then up rows; any other dtype by the common loader (BF16, FP8 + scales). */
static enum ft_status load_experts(struct ft_model *m, int l, struct ft_layer *L) {
    const int E = m->n_experts, I = m->expert_inter, H = m->hidden;
    char n[256];
    const struct ft_st_tensor *t = ft_model_find(m, NAME(n, "model.layers.%d.mlp.experts.0.gate_proj.weight", l));
    if (!t || t->dtype != FT_DTYPE_I8) return ft_model_load_experts(m, l, L);
    if (H % 32 || I % 32)
        return ft_fail(FT_ERR_FORMAT, "%s: FP4 experts need hidden_size and moe_intermediate_size "
                       "multiples of 32 (%d, %d)", m->label, H, I);
    const struct ft_row_schema *mx = ft_row_schema_for(FT_DTYPE_MXFP4);
    enum ft_status st;
    FT_TRY(ft_bank_init(&L->bank[FT_BANK_GATE_UP], mx, FT_BANK_GATE_UP, E, 2 * I, H));
    FT_TRY(ft_bank_init(&L->bank[FT_BANK_DOWN], mx, FT_BANK_DOWN, E, H, I));
    const size_t half = (size_t)I * ft_dtype_row_bytes(FT_DTYPE_MXFP4, H); /* the gate rows */
    for (int e = 0; e < E; e++) {
        uint8_t *gu = ft_bank_expert(&L->bank[FT_BANK_GATE_UP], e);
        FT_TRY(fp4_matrix(m, NAME(n, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e), I, H, gu));
        FT_TRY(fp4_matrix(m, NAME(n, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e), I, H, gu + half));
        FT_TRY(fp4_matrix(m, NAME(n, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e), H, I,
                          ft_bank_expert(&L->bank[FT_BANK_DOWN], e)));
    }
    return FT_OK;
fail:
    return st;
}

enum ft_status ft_v4_load_layer(struct ft_model *m, int l) {
    const struct ft_v4 *z = m->v4;
    struct ft_layer *L = &m->layers[l];
    struct ft_v4_layer *X = L->v4;
    const int H = m->hidden, nh = m->n_heads, hd = m->head_dim, ql = m->cfg.q_lora_rank, n = z->hc;
    const int G = z->groups, olr = z->o_lora, dI = z->idx_dim, nI = z->idx_heads;
    char b[256];
    enum ft_status st;
#define P(...) NAME(b, "model.layers.%d." __VA_ARGS__)
    FT_TRY(ft_model_load_vec(m, P("input_layernorm.weight", l), H, &L->attn_norm));
    FT_TRY(ft_model_load_vec(m, P("post_attention_layernorm.weight", l), H, &L->ffn_norm));
    static const char *const site[2] = {"attn_hc", "ffn_hc"};
    for (int s = 0; s < 2; s++) {
        FT_TRY(ft_model_load_weight(m, P("%s.fn", l, site[s]), (2 + n) * n, n * H, &X->hc_fn[s]));
        FT_TRY(ft_model_load_vec(m, P("%s.base", l, site[s]), (2 + n) * n, &X->hc_base[s]));
        FT_TRY(ft_model_load_vec(m, P("%s.scale", l, site[s]), 3, &X->hc_scale[s]));
    }
    FT_TRY(ft_model_load_weight(m, P("self_attn.q_a_proj.weight", l), ql, H, &L->q_a));
    FT_TRY(ft_model_load_vec(m, P("self_attn.q_a_norm.weight", l), ql, &L->q_a_norm));
    FT_TRY(ft_model_load_weight(m, P("self_attn.q_b_proj.weight", l), nh * hd, ql, &L->q_b));
    FT_TRY(ft_model_load_weight(m, P("self_attn.kv_proj.weight", l), hd, H, &X->kv));
    FT_TRY(ft_model_load_vec(m, P("self_attn.kv_norm.weight", l), hd, &X->kv_norm));
    FT_TRY(ft_model_load_weight(m, P("self_attn.o_a_proj.weight", l), G * olr, nh * hd / G, &X->o_a));
    FT_TRY(ft_model_load_weight(m, P("self_attn.o_b_proj.weight", l), H, G * olr, &X->o_b));
    FT_TRY(ft_model_load_vec(m, P("self_attn.sinks", l), nh, &L->sinks));
    if (X->kind >= 2) {
        const int ce = X->kind == 2 ? 2 * hd : hd, r = X->kind == 2 ? z->csa : z->hca;
        FT_TRY(ft_model_load_weight(m, P("self_attn.compressor.kv_proj.weight", l), ce, H, &X->c_kv));
        FT_TRY(ft_model_load_weight(m, P("self_attn.compressor.gate_proj.weight", l), ce, H, &X->c_gate));
        FT_TRY(load_mat_f32(m, P("self_attn.compressor.position_bias", l), r, ce, &X->c_ape));
        FT_TRY(ft_model_load_vec(m, P("self_attn.compressor.kv_norm.weight", l), hd, &X->c_norm));
    }
    if (X->kind == 2) {
#define I(...) P("self_attn.compressor.indexer." __VA_ARGS__)
        FT_TRY(ft_model_load_weight(m, I("kv_proj.weight", l), 2 * dI, H, &X->i_kv));
        FT_TRY(ft_model_load_weight(m, I("gate_proj.weight", l), 2 * dI, H, &X->i_gate));
        FT_TRY(load_mat_f32(m, I("position_bias", l), z->csa, 2 * dI, &X->i_ape));
        FT_TRY(ft_model_load_vec(m, I("kv_norm.weight", l), dI, &X->i_norm));
        FT_TRY(ft_model_load_weight(m, I("q_b_proj.weight", l), nI * dI, ql, &L->idx_wq));
        FT_TRY(ft_model_load_weight(m, I("scorer.weights_proj.weight", l), nI, H, &L->idx_w));
#undef I
    }
    FT_TRY(ft_model_load_weight(m, P("mlp.gate.weight", l), m->n_experts, H, &L->router));
    if (X->hash) FT_TRY(load_tid2eid(m, P("mlp.gate.tid2eid", l), &X->tid2eid));
    else if (ft_model_find(m, P("mlp.gate.e_score_correction_bias", l)))
        FT_TRY(ft_model_load_vec(m, b, m->n_experts, &L->router_score_bias));
    L->act.mode = FT_SWIGLU_CLAMP;
    L->act.limit = z->swiglu;
    FT_TRY(load_experts(m, l, L));
    const int Is = m->shared_inter;
    L->has_shared = 1;
    FT_TRY(ft_model_load_weight(m, P("mlp.shared_experts.gate_proj.weight", l), Is, H, &L->sh_gate));
    FT_TRY(ft_model_load_weight(m, P("mlp.shared_experts.up_proj.weight", l), Is, H, &L->sh_up));
    FT_TRY(ft_model_load_weight(m, P("mlp.shared_experts.down_proj.weight", l), H, Is, &L->sh_down));
#undef P
    return FT_OK;
fail:
    return st;
}

enum ft_status ft_v4_load_globals(struct ft_model *m) {
    struct ft_v4 *z = m->v4;
    const int n = z->hc;
    enum ft_status st;
    FT_TRY(ft_model_load_weight(m, "model.hc_head.hc_fn", n, n * m->hidden, &z->hc_head_fn));
    FT_TRY(ft_model_load_vec(m, "model.hc_head.hc_base", n, &z->hc_head_base));
    FT_TRY(ft_model_load_vec(m, "model.hc_head.hc_scale", 1, &z->hc_head_scale));
    return FT_OK;
fail:
    return st;
}

/* transformers' deepseek_v4 conversion (DeepSeek's names -> its own), read backwards: each
 * in-memory piece and what a checkpoint calls it, in the order they must apply */
static const char *const k_rules[][2] = {
    {".self_attn.compressor.indexer.scorer.weights_proj.", ".attn.indexer.weights_proj."},
    {".self_attn.compressor.indexer.q_b_proj.", ".attn.indexer.wq_b."},
    {".self_attn.compressor.indexer.", ".attn.indexer.compressor."},
    {".self_attn.q_b_proj.", ".attn.wq_b."},
    {".self_attn.", ".attn."},
    {".mlp.shared_experts.gate_proj.", ".ffn.shared_experts.w1."},
    {".mlp.shared_experts.down_proj.", ".ffn.shared_experts.w2."},
    {".mlp.shared_experts.up_proj.", ".ffn.shared_experts.w3."},
    {".mlp.gate.e_score_correction_bias", ".ffn.gate.bias"},
    {".mlp.", ".ffn."},
    {".input_layernorm.", ".attn_norm."},
    {".post_attention_layernorm.", ".ffn_norm."},
    {".attn_hc.fn", ".hc_attn_fn"},
    {".attn_hc.base", ".hc_attn_base"},
    {".attn_hc.scale", ".hc_attn_scale"},
    {".ffn_hc.fn", ".hc_ffn_fn"},
    {".ffn_hc.base", ".hc_ffn_base"},
    {".ffn_hc.scale", ".hc_ffn_scale"},
    {".sinks", ".attn_sink"},
    {".kv_norm.", ".norm."},
    {".position_bias", ".ape"},
    {".q_a_proj.", ".wq_a."},
    {".q_a_norm.", ".q_norm."},
    {".kv_proj.", ".wkv."},
    {".o_a_proj.", ".wo_a."},
    {".o_b_proj.", ".wo_b."},
    {".gate_proj.", ".wgate."}, /* the compressors' (the experts' are renamed before) */
};

/* Replaces the first `from` in s (cap bytes) by `to`; 0 when absent. */
static int replace(char *s, size_t cap, const char *from, const char *to) {
    char *at = strstr(s, from);
    size_t fl = strlen(from), tl = strlen(to), n = strlen(s);
    if (!at || n - fl + tl + 1 > cap) return 0;
    memmove(at + tl, at + fl, n - (size_t)(at - s) - fl + 1);
    memcpy(at, to, tl);
    return 1;
}

int ft_v4_alias(const char *name, int alt, char *out, size_t cap) {
    if (alt > 3 || strlen(name) + 16 > cap) return 0;
    const int own = alt % 2, scale = alt >= 2; /* DeepSeek's own names; FP8's ".scale" */
    const size_t sl = strlen("weight_scale_inv"), n = strlen(name);
    if (scale && (n < sl || strcmp(name + n - sl, "weight_scale_inv"))) return 0;
    snprintf(out, cap, "%s", name);
    /* per-expert w1 / w3 / w2 (gate, up, down) */
    char *e = strstr(out, ".experts.");
    if (e && isdigit((unsigned char)e[9])) {
        char *q = e + 9;
        while (isdigit((unsigned char)*q)) q++;
        static const char *const k_e[3][2] = {{".gate_proj.", ".w1."}, {".up_proj.", ".w3."}, {".down_proj.", ".w2."}};
        for (int i = 0; i < 3; i++)
            if (!strncmp(q, k_e[i][0], strlen(k_e[i][0]))) {
                replace(q, cap - (size_t)(q - out), k_e[i][0], k_e[i][1]);
                break;
            }
    }
    if (!strncmp(out, "model.layers.", 13))
        for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++) replace(out, cap, k_rules[i][0], k_rules[i][1]);
    if (!strcmp(out, "lm_head.weight")) snprintf(out, cap, "head.weight");
    if (own) {
        static const char *const k_top[][2] = {{"model.embed_tokens.weight", "embed.weight"},
                                               {"model.hc_head.hc_fn", "hc_head_fn"},
                                               {"model.hc_head.hc_base", "hc_head_base"},
                                               {"model.hc_head.hc_scale", "hc_head_scale"}};
        for (size_t i = 0; i < sizeof k_top / sizeof k_top[0]; i++)
            if (!strcmp(out, k_top[i][0])) snprintf(out, cap, "%s", k_top[i][1]);
        if (!strncmp(out, "model.", 6)) memmove(out, out + 6, strlen(out + 6) + 1);
    }
    if (scale) replace(out, cap, "weight_scale_inv", "scale");
    return 1;
}
