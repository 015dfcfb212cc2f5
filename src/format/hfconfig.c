/* hfconfig.c — config.json / generation_config.json of a Hugging Face checkpoint into struct
 * ft_config, accepting the transformers 4.x spellings (rope_theta + rope_scaling at top level,
 * torch_dtype, num_experts) and the 5.x ones (rope_parameters, dtype, num_local_experts).
 * Called by the model loaders at load time, by `ft inspect`, the tests and fuzz/fuzz_config.c.
 * Threading: pure functions over their arguments; any thread, one cfg per caller.
 * Every value is checked for type and range; errors name the file and the field. */
#include "format/hfconfig.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/status.h"

#define SUPPORTED_ROPE "default, linear, llama3, yarn"

static const char *jtype(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static int is_v4(const struct ft_config *cfg) {
    return !strcmp(cfg->arch, "DeepseekV4ForCausalLM") || !strcmp(cfg->model_type, "deepseek_v4");
}

/* Present and not null. */
static json_t *get(json_t *o, const char *key) {
    json_t *v = o ? json_object_get(o, key) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

/* Integer field in [lo, INT_MAX]; absent/null -> *out = dflt (or an error when required).
 * `where` prefixes the key in messages (e.g. "rope_scaling."). */
static enum ft_status get_int(json_t *o, const char *where, const char *key, const char *label,
                              int required, int dflt, int lo, int *out) {
    json_t *v = get(o, key);
    if (!v) {
        if (required)
            return ft_fail(FT_ERR_FORMAT, "%s: required field '%s%s' is missing", label, where,
                           key);
        *out = dflt;
        return FT_OK;
    }
    if (!json_is_integer(v))
        return ft_fail(FT_ERR_FORMAT, "%s: '%s%s' must be an integer, got %s", label, where, key,
                       jtype(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > INT_MAX)
        return ft_fail(FT_ERR_FORMAT, "%s: '%s%s' = %lld is out of range (must be >= %d)", label,
                       where, key, (long long)x, lo);
    *out = (int)x;
    return FT_OK;
}

/* Number field (integer or real), finite and > lo (or >= lo when `incl`). */
static enum ft_status get_num(json_t *o, const char *where, const char *key, const char *label,
                              double dflt, double lo, int incl, double *out) {
    json_t *v = get(o, key);
    if (!v) {
        *out = dflt;
        return FT_OK;
    }
    if (!json_is_number(v))
        return ft_fail(FT_ERR_FORMAT, "%s: '%s%s' must be a number, got %s", label, where, key,
                       jtype(v));
    double x = json_number_value(v);
    if (!isfinite(x) || (incl ? x < lo : x <= lo))
        return ft_fail(FT_ERR_FORMAT, "%s: '%s%s' = %g is out of range (must be %s %g)", label,
                       where, key, x, incl ? ">=" : ">", lo);
    *out = x;
    return FT_OK;
}

/* Boolean field: 1/0, absent/null -> dflt. */
static enum ft_status get_bool(json_t *o, const char *where, const char *key, const char *label,
                               int dflt, int *out) {
    json_t *v = get(o, key);
    if (!v) {
        *out = dflt;
        return FT_OK;
    }
    if (!json_is_boolean(v))
        return ft_fail(FT_ERR_FORMAT, "%s: '%s%s' must be true or false, got %s", label, where,
                       key, jtype(v));
    *out = json_is_true(v);
    return FT_OK;
}

static enum ft_status get_str(json_t *o, const char *key, const char *label, char *dst,
                              size_t cap) {
    json_t *v = get(o, key);
    if (!v) return FT_OK;
    if (!json_is_string(v))
        return ft_fail(FT_ERR_FORMAT, "%s: '%s' must be a string, got %s", label, key, jtype(v));
    const char *s = json_string_value(v);
    if (strlen(s) >= cap)
        return ft_fail(FT_ERR_FORMAT, "%s: '%s' is too long (%zu bytes, at most %zu)", label, key,
                       strlen(s), cap - 1);
    memcpy(dst, s, strlen(s) + 1);
    return FT_OK;
}

/* bos_token_id (int or null) and eos_token_id (int, list of ints or null). Absent keys leave
 * cfg untouched so generation_config.json can override only what it names. */
static enum ft_status get_special_tokens(json_t *root, const char *label, struct ft_config *cfg) {
    enum ft_status st;
    json_t *b = json_object_get(root, "bos_token_id");
    if (b) {
        if (json_is_null(b)) cfg->bos_token_id = -1;
        else if ((st = get_int(root, "", "bos_token_id", label, 0, -1, 0, &cfg->bos_token_id)))
            return st;
    }
    json_t *e = json_object_get(root, "eos_token_id");
    if (!e) return FT_OK;
    if (json_is_null(e)) {
        cfg->n_eos = 0;
        return FT_OK;
    }
    if (json_is_integer(e)) {
        json_int_t x = json_integer_value(e);
        if (x < 0 || x > INT_MAX)
            return ft_fail(FT_ERR_FORMAT, "%s: 'eos_token_id' = %lld is out of range", label,
                           (long long)x);
        cfg->eos_token_ids[0] = (int)x;
        cfg->n_eos = 1;
        return FT_OK;
    }
    if (!json_is_array(e))
        return ft_fail(FT_ERR_FORMAT, "%s: 'eos_token_id' must be an integer or a list of integers, got %s",
                       label, jtype(e));
    size_t n = json_array_size(e);
    if (n > FT_MAX_EOS)
        return ft_fail(FT_ERR_FORMAT, "%s: 'eos_token_id' lists %zu ids (at most %d supported)",
                       label, n, FT_MAX_EOS);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(e, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT_MAX)
            return ft_fail(FT_ERR_FORMAT, "%s: 'eos_token_id[%zu]' must be a non-negative integer",
                           label, i);
        cfg->eos_token_ids[i] = (int)json_integer_value(x);
    }
    cfg->n_eos = (int)n;
    return FT_OK;
}

/* RoPE: theta from rope_parameters (5.x) or the top level (4.x); scaling from
 * rope_parameters (5.x) or rope_scaling (4.x), typed by "rope_type" or legacy "type". */
/* sub (NULL normally): parse rope_parameters.<sub> alone (DeepSeek-V4's "main" / "compress"),
 * its rope_theta defaulting to theta_dflt. */
static enum ft_status parse_rope(json_t *root, const char *label, struct ft_config *cfg,
                                 const char *sub, double theta_dflt) {
    enum ft_status st = FT_OK;
    struct ft_rope *r = &cfg->rope;
    json_t *rp = get(root, "rope_parameters"), *rs = sub ? NULL : get(root, "rope_scaling");
    if (rp && !json_is_object(rp))
        return ft_fail(FT_ERR_FORMAT, "%s: 'rope_parameters' must be an object, got %s", label,
                       jtype(rp));
    if (rs && !json_is_object(rs))
        return ft_fail(FT_ERR_FORMAT, "%s: 'rope_scaling' must be an object or null, got %s",
                       label, jtype(rs));
    char sub_where[64];
    if (sub) {
        rp = get(rp, sub);
        snprintf(sub_where, sizeof sub_where, "rope_parameters.%s.", sub);
    }
    json_t *sc = rp ? rp : rs;
    const char *where = sub ? sub_where : rp ? "rope_parameters." : "rope_scaling.";
    json_t *full = rp && !sub ? get(rp, "full_attention") : NULL, *slide = rp && !sub ? get(rp, "sliding_attention") : NULL;
    if (full && json_is_object(full) && (!slide || json_is_object(slide)) &&
        json_object_size(rp) == 1 + (slide != NULL)) { /* Gemma 3: one set per layer type */
        if (slide) {
            json_t *st2 = get(slide, "rope_type");
            if (st2 && (!json_is_string(st2) || strcmp(json_string_value(st2), "default")))
                return ft_fail(FT_ERR_UNSUPPORTED, "%s: 'rope_parameters.sliding_attention.rope_type' "
                               "must be \"default\"", label);
            FT_TRY(get_num(slide, "rope_parameters.sliding_attention.", "rope_theta", label, 10000.0,
                           0, 0, &cfg->rope_local_theta));
        }
        sc = full;
        where = "rope_parameters.full_attention.";
    }
    if (sc) {
        const char *k;
        json_t *v;
        json_object_foreach(sc, k, v) {
            if (json_is_object(v))
                return ft_fail(FT_ERR_UNSUPPORTED,
                               "%s: '%s%s': per-layer-type RoPE parameters are not supported",
                               label, where, k);
        }
    }
    double top_theta = theta_dflt;
    if (!sub) FT_TRY(get_num(root, "", "rope_theta", label, 10000.0, 0, 0, &top_theta));
    FT_TRY(get_num(sc, where, "rope_theta", label, top_theta, 0, 0, &r->theta));
    double top_prf;
    FT_TRY(get_num(root, "", "partial_rotary_factor", label, 1.0, 0, 0, &top_prf));
    r->partial_rotary_set = get(root, "partial_rotary_factor") || (sc && get(sc, "partial_rotary_factor"));
    FT_TRY(get_num(sc, where, "partial_rotary_factor", label, top_prf, 0, 0,
                   &r->partial_rotary_factor));
    if (r->partial_rotary_factor > 1)
        return ft_fail(FT_ERR_FORMAT, "%s: 'partial_rotary_factor' = %g must be in (0, 1]", label,
                       r->partial_rotary_factor);

    r->type = FT_ROPE_DEFAULT;
    r->factor = 1;
    r->low_freq_factor = 1;
    r->high_freq_factor = 4;
    r->original_max_pos = cfg->max_position_embeddings;
    r->beta_fast = 32;
    r->beta_slow = 1;
    r->attention_factor = 0;
    r->truncate = 1;

    const char *type = "default";
    json_t *jt = get(sc, "rope_type");
    const char *tkey = "rope_type";
    if (!jt) { /* legacy 4.x spelling */
        jt = get(sc, "type");
        tkey = "type";
    }
    if (jt) {
        if (!json_is_string(jt))
            return ft_fail(FT_ERR_FORMAT, "%s: '%s%s' must be a string, got %s", label, where,
                           tkey, jtype(jt));
        type = json_string_value(jt);
    }
    if (strcmp(type, "default") == 0) return FT_OK;
    if (strcmp(type, "linear") == 0) r->type = FT_ROPE_LINEAR;
    else if (strcmp(type, "llama3") == 0) r->type = FT_ROPE_LLAMA3;
    else if (strcmp(type, "yarn") == 0) r->type = FT_ROPE_YARN;
    else
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: '%s%s' = '%.40s' is not supported (supported: %s)",
                       label, where, tkey, type, SUPPORTED_ROPE);

    /* original_max_position_embeddings: top level wins (Phi-3 style), then the rope dict,
     * then max_position_embeddings (as transformers' standardize_rope_params does). */
    int omp;
    FT_TRY(get_int(sc, where, "original_max_position_embeddings", label, 0,
                   cfg->max_position_embeddings, 1, &omp));
    FT_TRY(get_int(root, "", "original_max_position_embeddings", label, 0, omp, 1, &omp));
    r->original_max_pos = omp;

    if (r->type == FT_ROPE_YARN && !get(sc, "factor")) {
        /* DeepSeek-style: factor from the context ratio */
        if (omp <= 0)
            return ft_fail(FT_ERR_FORMAT, "%s: yarn RoPE needs '%sfactor' or "
                           "'original_max_position_embeddings'", label, where);
        r->factor = (double)cfg->max_position_embeddings / omp;
    } else {
        if (!get(sc, "factor"))
            return ft_fail(FT_ERR_FORMAT, "%s: '%sfactor' is missing (needed by rope_type '%s')",
                           label, where, type);
        FT_TRY(get_num(sc, where, "factor", label, 1, 0, 0, &r->factor));
    }
    if (r->type == FT_ROPE_LLAMA3) {
        FT_TRY(get_num(sc, where, "low_freq_factor", label, 1, 0, 0, &r->low_freq_factor));
        FT_TRY(get_num(sc, where, "high_freq_factor", label, 4, 0, 0, &r->high_freq_factor));
        if (r->high_freq_factor <= r->low_freq_factor)
            return ft_fail(FT_ERR_FORMAT, "%s: '%shigh_freq_factor' (%g) must exceed "
                           "low_freq_factor (%g)", label, where, r->high_freq_factor,
                           r->low_freq_factor);
        if (omp <= 0)
            return ft_fail(FT_ERR_FORMAT, "%s: llama3 RoPE needs '%soriginal_max_position_embeddings'",
                           label, where);
    }
    if (r->type == FT_ROPE_YARN) {
        FT_TRY(get_num(sc, where, "beta_fast", label, 32, 0, 0, &r->beta_fast));
        FT_TRY(get_num(sc, where, "beta_slow", label, 1, 0, 0, &r->beta_slow));
        FT_TRY(get_num(sc, where, "attention_factor", label, 0, 0, 0, &r->attention_factor));
        FT_TRY(get_bool(sc, where, "truncate", label, 1, &r->truncate));
        double msa;
        FT_TRY(get_num(sc, where, "mscale_all_dim", label, 0, 0, 1, &msa));
        r->mscale_all_dim = msa;
        if (r->attention_factor == 0) {
            /* transformers: with mscale and mscale_all_dim both set, the ratio of the two
             * get_mscale values; otherwise 0 (= derive 0.1*ln(factor)+1 at use). */
            double ms;
            FT_TRY(get_num(sc, where, "mscale", label, 0, 0, 1, &ms));
            if (ms != 0 && msa != 0 && r->factor > 1)
                r->attention_factor =
                    (0.1 * ms * log(r->factor) + 1) / (0.1 * msa * log(r->factor) + 1);
            else if (ms != 0 && msa != 0)
                r->attention_factor = 1;
        }
    }
fail:
    return st;
}

/* DeepSeek-V4's two RoPEs: rope_parameters {"main": ..., "compress": ...} as transformers 5.17
 * saves them, or (older configs) one flat set: main then plain RoPE at rope_theta, compress
 * that set at compress_rope_theta (160000), YaRN's attention factor 1 (V4 does not scale cos /
 * sin), as the config class derives them. */
static enum ft_status parse_rope_v4(json_t *root, const char *label, struct ft_config *cfg) {
    enum ft_status st = FT_OK;
    json_t *rp = get(root, "rope_parameters");
    json_t *mn = rp && json_is_object(rp) ? get(rp, "main") : NULL;
    json_t *cp = rp && json_is_object(rp) ? get(rp, "compress") : NULL;
    const double ct = cfg->compress_rope_theta > 0 ? cfg->compress_rope_theta : 160000.0;
    if (mn && cp && json_is_object(mn) && json_is_object(cp)) {
        double top;
        cfg->rope_nested = 1;
        FT_TRY(parse_rope(root, label, cfg, "compress", ct));
        cfg->rope_compress = cfg->rope;
        FT_TRY(get_num(root, "", "rope_theta", label, 10000.0, 0, 0, &top));
        FT_TRY(parse_rope(root, label, cfg, "main", top));
        return FT_OK;
    }
    FT_TRY(parse_rope(root, label, cfg, NULL, -1));
    cfg->rope_compress = cfg->rope;
    cfg->rope_compress.theta = ct;
    if (cfg->rope_compress.type == FT_ROPE_YARN && cfg->rope_compress.attention_factor == 0)
        cfg->rope_compress.attention_factor = 1;
    cfg->rope.type = FT_ROPE_DEFAULT;
    cfg->rope.factor = 1;
fail:
    return st;
}

static enum ft_status parse_moe(json_t *root, const char *label, struct ft_config *cfg) {
    enum ft_status st = FT_OK;
    int ne = 0, nle = 0, nre = 0;
    FT_TRY(get_int(root, "", "num_experts", label, 0, 0, 0, &ne));
    FT_TRY(get_int(root, "", "num_local_experts", label, 0, 0, 0, &nle));
    FT_TRY(get_int(root, "", "n_routed_experts", label, 0, 0, 0, &nre));
    if (ne && nle && ne != nle)
        return ft_fail(FT_ERR_FORMAT, "%s: 'num_experts' (%d) and 'num_local_experts' (%d) disagree",
                       label, ne, nle);
    cfg->n_experts = ne ? ne : nle ? nle : nre;
    json_t *sf = get(root, "scoring_func");
    if (sf && !json_is_string(sf))
        return ft_fail(FT_ERR_FORMAT, "%s: 'scoring_func' must be a string, got %s", label, jtype(sf));
    if (sf && strcmp(json_string_value(sf), "sigmoid") && strcmp(json_string_value(sf), "softmax") &&
        strcmp(json_string_value(sf), "sqrtsoftplus"))
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: 'scoring_func' \"%s\" is not supported (sigmoid, "
                       "softmax, sqrtsoftplus)", label, json_string_value(sf));
    cfg->scoring_sigmoid = sf && !strcmp(json_string_value(sf), "sigmoid");
    cfg->scoring_sqrtsoftplus = sf ? !strcmp(json_string_value(sf), "sqrtsoftplus") : -1;
    json_t *tm = get(root, "topk_method"); /* DeepSeek-V2: greedy / group_limited_greedy; V3: noaux_tc */
    if (tm && (!json_is_string(tm) || (strcmp(json_string_value(tm), "greedy") &&
                                       strcmp(json_string_value(tm), "group_limited_greedy") &&
                                       strcmp(json_string_value(tm), "noaux_tc"))))
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: 'topk_method' must be \"greedy\", "
                       "\"group_limited_greedy\" or \"noaux_tc\"", label);
    cfg->topk_group_limited = tm && !strcmp(json_string_value(tm), "group_limited_greedy");
    FT_TRY(get_int(root, "", "n_group", label, 0, -1, 0, &cfg->n_group));
    FT_TRY(get_int(root, "", "topk_group", label, 0, -1, 0, &cfg->topk_group));
    FT_TRY(get_num(root, "", "routed_scaling_factor", label, -1.0, 0, 0, &cfg->routed_scaling_factor));
    FT_TRY(get_int(root, "", "n_shared_experts", label, 0, 0, 0, &cfg->n_shared_experts));
    FT_TRY(get_int(root, "", "first_k_dense_replace", label, 0, -1, 0, &cfg->first_k_dense_replace));
    json_t *mlt = get(root, "mlp_layer_types"); /* GLM-4.7-Flash: "dense" / "sparse" per layer */
    if (mlt) {
        if (!json_is_array(mlt) || json_array_size(mlt) < (size_t)cfg->n_layers ||
            (!is_v4(cfg) && json_array_size(mlt) != (size_t)cfg->n_layers))
            return ft_fail(FT_ERR_FORMAT, "%s: 'mlp_layer_types' must be a list of %d strings", label,
                           cfg->n_layers);
        if (!cfg->mlp_only && !(cfg->mlp_only = calloc((size_t)cfg->n_layers, 1)))
            return ft_fail(FT_ERR_OOM, "%s: out of memory", label);
        for (int l = 0; l < cfg->n_layers; l++) {
            const char *t = json_string_value(json_array_get(mlt, (size_t)l));
            if (is_v4(cfg)) { /* DeepSeek-V4: hash-routed or top-k routed, every layer MoE */
                if (!t || (strcmp(t, "hash_moe") && strcmp(t, "moe")))
                    return ft_fail(FT_ERR_FORMAT, "%s: 'mlp_layer_types[%d]' must be \"hash_moe\" or "
                                   "\"moe\" (DeepSeek-V4)", label, l);
                if (!cfg->hash_moe && !(cfg->hash_moe = calloc((size_t)cfg->n_layers, 1)))
                    return ft_fail(FT_ERR_OOM, "%s: out of memory", label);
                cfg->hash_moe[l] = !strcmp(t, "hash_moe");
                continue;
            }
            if (!t || (strcmp(t, "dense") && strcmp(t, "sparse")))
                return ft_fail(FT_ERR_FORMAT, "%s: 'mlp_layer_types[%d]' must be \"dense\" or \"sparse\"",
                               label, l);
            cfg->mlp_only[l] |= !strcmp(t, "dense");
        }
        /* the list says, whatever first_k_dense_replace is (transformers reads only the list
         * when given: GLM-5's configs keep first_k_dense_replace 3 beside it) */
        cfg->first_k_dense_replace = 0;
    }
    if (cfg->n_group > 1) {
        if (cfg->n_experts % cfg->n_group)
            return ft_fail(FT_ERR_FORMAT, "%s: 'n_group' (%d) does not divide the %d experts", label,
                           cfg->n_group, cfg->n_experts);
        if (cfg->topk_group < 1 || cfg->topk_group > cfg->n_group)
            return ft_fail(FT_ERR_FORMAT, "%s: 'topk_group' (%d) must be in [1, n_group = %d]", label,
                           cfg->topk_group, cfg->n_group);
    }
    FT_TRY(get_int(root, "", "num_experts_per_tok", label, 0, 0, 0, &cfg->n_experts_per_tok));
    if (cfg->n_experts && cfg->n_experts_per_tok > cfg->n_experts)
        return ft_fail(FT_ERR_FORMAT, "%s: 'num_experts_per_tok' (%d) exceeds the %d experts",
                       label, cfg->n_experts_per_tok, cfg->n_experts);
    if (cfg->n_experts && cfg->n_experts_per_tok < 1)
        return ft_fail(FT_ERR_FORMAT, "%s: 'num_experts_per_tok' must be >= 1 for a MoE model "
                       "(%d experts)", label, cfg->n_experts);
    FT_TRY(get_int(root, "", "moe_intermediate_size", label, 0, 0, 0, &cfg->moe_intermediate_size));
    FT_TRY(get_int(root, "", "shared_expert_intermediate_size", label, 0, 0, 0,
                   &cfg->shared_expert_intermediate_size));
    FT_TRY(get_bool(root, "", "norm_topk_prob", label, -1, &cfg->norm_topk_prob));
    FT_TRY(get_int(root, "", "decoder_sparse_step", label, 0, 1, 1, &cfg->decoder_sparse_step));
    json_t *ml = get(root, "mlp_only_layers");
    if (ml) {
        if (!json_is_array(ml))
            return ft_fail(FT_ERR_FORMAT, "%s: 'mlp_only_layers' must be a list of layer ids, got %s",
                           label, jtype(ml));
        if (json_array_size(ml) > 0) {
            if (!cfg->mlp_only) cfg->mlp_only = calloc((size_t)cfg->n_layers, 1);
            if (!cfg->mlp_only) return ft_fail(FT_ERR_OOM, "%s: out of memory", label);
        }
        for (size_t i = 0; i < json_array_size(ml); i++) {
            json_t *x = json_array_get(ml, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                json_integer_value(x) >= cfg->n_layers)
                return ft_fail(FT_ERR_FORMAT, "%s: 'mlp_only_layers[%zu]' must be a layer id in "
                               "[0, %d)", label, i, cfg->n_layers);
            cfg->mlp_only[json_integer_value(x)] = 1;
        }
    }
fail:
    return st;
}

/* layer_types: one "sliding_attention" / "full_attention" (gpt-oss, Gemma 3) or
 * "linear_attention" (Qwen3-Next, Qwen3.5: Gated DeltaNet) per layer; DeepSeek-V4's
 * "compressed_sparse_attention" / "heavily_compressed_attention" too (v4_attn), or its legacy
 * compress_ratios (0, 4, 128 per layer: the ratio of the layer's compressor, 0 for none). */
static enum ft_status parse_layer_types(json_t *root, const char *label, struct ft_config *cfg) {
    json_t *lt = get(root, "layer_types"), *cr = get(root, "compress_ratios");
    const int v4 = is_v4(cfg);
    if (!lt && cr && v4) {
        if (!json_is_array(cr) || json_array_size(cr) < (size_t)cfg->n_layers)
            return ft_fail(FT_ERR_FORMAT, "%s: 'compress_ratios' must be a list of %d integers (0, 4 "
                           "or 128)", label, cfg->n_layers);
        if (!(cfg->v4_attn = calloc((size_t)cfg->n_layers, 1)))
            return ft_fail(FT_ERR_OOM, "%s: out of memory", label);
        for (int l = 0; l < cfg->n_layers; l++) {
            json_t *x = json_array_get(cr, (size_t)l);
            json_int_t r = json_is_integer(x) ? json_integer_value(x) : -1;
            if (r != 0 && r != 4 && r != 128)
                return ft_fail(FT_ERR_FORMAT, "%s: 'compress_ratios[%d]' must be 0, 4 or 128", label, l);
            cfg->v4_attn[l] = r == 0 ? 1 : r == 4 ? 2 : 3;
        }
        return FT_OK;
    }
    if (!lt) return FT_OK;
    /* transformers' V4 config keeps the first num_hidden_layers entries of a longer list */
    if (!json_is_array(lt) || json_array_size(lt) < (size_t)cfg->n_layers ||
        (!v4 && json_array_size(lt) != (size_t)cfg->n_layers))
        return ft_fail(FT_ERR_FORMAT, "%s: 'layer_types' must be a list of %d strings", label,
                       cfg->n_layers);
    cfg->sliding = calloc((size_t)cfg->n_layers, 1);
    cfg->linear = calloc((size_t)cfg->n_layers, 1);
    cfg->v4_attn = calloc((size_t)cfg->n_layers, 1);
    if (!cfg->sliding || !cfg->linear || !cfg->v4_attn) return ft_fail(FT_ERR_OOM, "%s: out of memory", label);
    int n_linear = 0, n_comp = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)l));
        if (s && strcmp(s, "sliding_attention") == 0) cfg->sliding[l] = 1, cfg->v4_attn[l] = 1;
        else if (s && strcmp(s, "linear_attention") == 0) cfg->linear[l] = 1, n_linear++;
        else if (s && strcmp(s, "compressed_sparse_attention") == 0) cfg->v4_attn[l] = 2, n_comp++;
        else if (s && strcmp(s, "heavily_compressed_attention") == 0) cfg->v4_attn[l] = 3, n_comp++;
        else if (!s || (strcmp(s, "full_attention") && strcmp(s, "deepseek_sparse_attention")))
            return ft_fail(FT_ERR_FORMAT, "%s: 'layer_types[%d]' must be \"full_attention\", "
                           "\"sliding_attention\", \"linear_attention\", "
                           "\"compressed_sparse_attention\" or \"heavily_compressed_attention\"",
                           label, l);
    }
    if (!n_linear) {
        free(cfg->linear);
        cfg->linear = NULL;
    }
    if (!n_comp && !v4) {
        free(cfg->v4_attn);
        cfg->v4_attn = NULL;
    }
    return FT_OK;
}

/* DeepSeek-V4's own keys (model/deepseek_v4.c applies transformers' defaults where absent):
 * compress_rates (or the legacy compress_rate_csa / compress_rate_hca), the hyper-connections,
 * the grouped output projection, num_hash_layers. */
static enum ft_status parse_v4(json_t *root, const char *label, struct ft_config *cfg) {
    enum ft_status st = FT_OK;
    json_t *rates = get(root, "compress_rates");
    if (rates && !json_is_object(rates))
        return ft_fail(FT_ERR_FORMAT, "%s: 'compress_rates' must be an object, got %s", label, jtype(rates));
    FT_TRY(get_int(root, "", "compress_rate_csa", label, 0, 0, 1, &cfg->compress_csa));
    FT_TRY(get_int(root, "", "compress_rate_hca", label, 0, 0, 1, &cfg->compress_hca));
    FT_TRY(get_int(rates, "compress_rates.", "compressed_sparse_attention", label, 0, cfg->compress_csa,
                   1, &cfg->compress_csa));
    FT_TRY(get_int(rates, "compress_rates.", "heavily_compressed_attention", label, 0,
                   cfg->compress_hca, 1, &cfg->compress_hca));
    FT_TRY(get_num(root, "", "compress_rope_theta", label, 0, 0, 0, &cfg->compress_rope_theta));
    FT_TRY(get_int(root, "", "hc_mult", label, 0, 0, 1, &cfg->hc_mult));
    FT_TRY(get_int(root, "", "hc_sinkhorn_iters", label, 0, 0, 1, &cfg->hc_sinkhorn_iters));
    FT_TRY(get_num(root, "", "hc_eps", label, 0, 0, 0, &cfg->hc_eps));
    FT_TRY(get_int(root, "", "o_groups", label, 0, 0, 1, &cfg->o_groups));
    FT_TRY(get_int(root, "", "o_lora_rank", label, 0, 0, 1, &cfg->o_lora_rank));
    FT_TRY(get_int(root, "", "num_hash_layers", label, 0, -1, 0, &cfg->num_hash_layers));
fail:
    return st;
}

/* DeepSeek sparse attention (GLM-5): the indexer's sizes and which layers reuse the previous
 * layer's top-k: indexer_types ("full" / "shared"), else index_topk_pattern ("FSS...", or a list
 * of those words), else transformers' rule: layer i is full when max(i - offset + 1, 0) is a
 * multiple of index_topk_freq (default 1: every layer), offset index_skip_topk_offset (2). */
static enum ft_status parse_dsa(json_t *root, const char *label, struct ft_config *cfg) {
    enum ft_status st = FT_OK;
    FT_TRY(get_int(root, "", "index_topk", label, 0, 0, 1, &cfg->index_topk));
    FT_TRY(get_int(root, "", "index_n_heads", label, 0, 0, 1, &cfg->index_n_heads));
    FT_TRY(get_int(root, "", "index_head_dim", label, 0, 0, 1, &cfg->index_head_dim));
    if (!cfg->index_topk) return FT_OK;
    int freq = 1, offset = 2, n_shared = 0;
    FT_TRY(get_int(root, "", "index_topk_freq", label, 0, 1, 0, &freq));
    FT_TRY(get_int(root, "", "index_skip_topk_offset", label, 0, 2, 0, &offset));
    if (freq < 1) freq = 1;
    json_t *it = get(root, "indexer_types"), *pat = get(root, "index_topk_pattern");
    const char *key = it ? "indexer_types" : "index_topk_pattern";
    json_t *list = it ? it : pat;
    if (list && json_is_string(list) && strlen(json_string_value(list)) != (size_t)cfg->n_layers)
        return ft_fail(FT_ERR_FORMAT, "%s: '%s' must have %d letters F or S", label, key, cfg->n_layers);
    if (list && !json_is_string(list) && (!json_is_array(list) || json_array_size(list) != (size_t)cfg->n_layers))
        return ft_fail(FT_ERR_FORMAT, "%s: '%s' must be a list of %d strings", label, key, cfg->n_layers);
    if (!(cfg->index_shared = calloc((size_t)cfg->n_layers, 1)))
        return ft_fail(FT_ERR_OOM, "%s: out of memory", label);
    for (int l = 0; l < cfg->n_layers; l++) {
        int shared;
        if (list && json_is_string(list)) {
            const char c = json_string_value(list)[l];
            if (c != 'F' && c != 'S')
                return ft_fail(FT_ERR_FORMAT, "%s: '%s'[%d] must be F or S", label, key, l);
            shared = c == 'S';
        } else if (list) {
            const char *s = json_string_value(json_array_get(list, (size_t)l));
            if (!s || (strcmp(s, "full") && strcmp(s, "shared")))
                return ft_fail(FT_ERR_FORMAT, "%s: '%s[%d]' must be \"full\" or \"shared\"", label,
                               key, l);
            shared = !strcmp(s, "shared");
        } else {
            shared = (l - offset + 1 > 0 ? l - offset + 1 : 0) % freq != 0;
        }
        cfg->index_shared[l] = (uint8_t)shared;
        n_shared += shared;
    }
    if (!n_shared) {
        free(cfg->index_shared);
        cfg->index_shared = NULL;
    }
fail:
    return st;
}

/* Parses a JSON document whose top level must be an object (duplicate keys rejected). */
static enum ft_status load_object(const char *json, size_t len, const char *label, json_t **out) {
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    *out = NULL;
    if (!root)
        return ft_fail(FT_ERR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", label,
                       jerr.text, jerr.line, jerr.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return ft_fail(FT_ERR_FORMAT, "%s: top level is not a JSON object", label);
    }
    *out = root;
    return FT_OK;
}

void ft_config_init(struct ft_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->rms_norm_eps = 1e-6;
    cfg->tie_word_embeddings = -1;
    cfg->attention_bias = -1;
    cfg->use_sliding_window = -1;
    cfg->norm_topk_prob = -1;
    cfg->decoder_sparse_step = 1;
    cfg->bos_token_id = -1;
    cfg->gen.do_sample = -1;
    cfg->rope.theta = 10000;
    cfg->rope.factor = 1;
    cfg->rope.partial_rotary_factor = 1;
    cfg->rope.truncate = 1; /* YaRN's floor/ceil of the ramp, as transformers and llama.cpp */
    cfg->swiglu_alpha = 1.702;
    cfg->routed_scaling_factor = -1;
    cfg->n_group = cfg->topk_group = cfg->first_k_dense_replace = -1;
    cfg->rope_interleave = -1;
    cfg->use_qk_norm = -1;
    cfg->num_hash_layers = -1;
    cfg->scoring_sqrtsoftplus = -1;
}

enum ft_status ft_config_parse(const char *json, size_t len, const char *label,
                               struct ft_config *cfg) {
    enum ft_status st = FT_OK;
    json_t *root = NULL, *top = NULL; /* top: the document; root: where the LM fields are */
    if (!label) label = "config.json";
    ft_config_init(cfg);
    FT_TRY(load_object(json, len, label, &root));
    top = root;
    json_t *ar = json_object_get(root, "architectures");
    if (!ar || json_is_null(ar)) {
        st = ft_fail(FT_ERR_FORMAT, "%s: required field 'architectures' is missing (e.g. "
                     "[\"Qwen3MoeForCausalLM\"])", label);
        goto fail;
    }
    if (!json_is_array(ar) || json_array_size(ar) == 0 || !json_is_string(json_array_get(ar, 0))) {
        st = ft_fail(FT_ERR_FORMAT, "%s: 'architectures' must be a non-empty list of strings",
                     label);
        goto fail;
    }
    const char *a0 = json_string_value(json_array_get(ar, 0));
    if (strlen(a0) >= sizeof cfg->arch) {
        st = ft_fail(FT_ERR_FORMAT, "%s: 'architectures[0]' is too long", label);
        goto fail;
    }
    strcpy(cfg->arch, a0);
    FT_TRY(get_str(root, "model_type", label, cfg->model_type, sizeof cfg->model_type));
    if (get(root, "dtype")) /* 5.x spelling wins when both are present */
        FT_TRY(get_str(root, "dtype", label, cfg->torch_dtype, sizeof cfg->torch_dtype));
    else
        FT_TRY(get_str(root, "torch_dtype", label, cfg->torch_dtype, sizeof cfg->torch_dtype));
    /* a multimodal wrapper (Qwen3.5's *ForConditionalGeneration) keeps the language model's
     * fields in text_config; its top level keeps tie_word_embeddings (and the vision config,
     * which the engine does not read) */
    json_t *tc = get(root, "text_config");
    if (tc && !json_is_object(tc)) {
        st = ft_fail(FT_ERR_FORMAT, "%s: 'text_config' must be an object, got %s", label, jtype(tc));
        goto fail;
    }
    if (tc) {
        root = tc;
        cfg->text_config = 1;
    }

    FT_TRY(get_int(root, "", "vocab_size", label, 1, 0, 1, &cfg->vocab_size));
    FT_TRY(get_int(root, "", "hidden_size", label, 1, 0, 1, &cfg->hidden_size));
    FT_TRY(get_int(root, "", "num_hidden_layers", label, 1, 0, 1, &cfg->n_layers));
    FT_TRY(get_int(root, "", "num_attention_heads", label, 1, 0, 1, &cfg->n_heads));
    FT_TRY(get_int(root, "", "num_key_value_heads", label, 0, cfg->n_heads, 1, &cfg->n_kv_heads));
    if (cfg->n_heads % cfg->n_kv_heads != 0) {
        st = ft_fail(FT_ERR_FORMAT, "%s: 'num_key_value_heads' (%d) does not divide "
                     "'num_attention_heads' (%d)", label, cfg->n_kv_heads, cfg->n_heads);
        goto fail;
    }
    /* (MLA models size their heads by qk_nope_head_dim + qk_rope_head_dim instead) */
    if (!get(root, "head_dim") && !get(root, "kv_lora_rank") && cfg->hidden_size % cfg->n_heads != 0) {
        st = ft_fail(FT_ERR_FORMAT, "%s: 'num_attention_heads' (%d) does not divide 'hidden_size' "
                     "(%d) and 'head_dim' is not given", label, cfg->n_heads, cfg->hidden_size);
        goto fail;
    }
    FT_TRY(get_int(root, "", "head_dim", label, 0, cfg->hidden_size / cfg->n_heads, 1,
                   &cfg->head_dim));
    FT_TRY(get_int(root, "", "intermediate_size", label, 0, 0, 0, &cfg->intermediate_size));
    FT_TRY(get_int(root, "", "max_position_embeddings", label, 0, 0, 0,
                   &cfg->max_position_embeddings));
    FT_TRY(get_num(root, "", "rms_norm_eps", label, 1e-6, 0, 0, &cfg->rms_norm_eps));
    FT_TRY(get_bool(top, "", "tie_word_embeddings", label, -1, &cfg->tie_word_embeddings));
    FT_TRY(get_bool(root, "", "attention_bias", label, -1, &cfg->attention_bias));
    FT_TRY(get_int(root, "", "sliding_window", label, 0, 0, 0, &cfg->sliding_window));
    FT_TRY(get_bool(root, "", "use_sliding_window", label, -1, &cfg->use_sliding_window));
    FT_TRY(get_int(root, "", "max_window_layers", label, 0, 0, 0, &cfg->max_window_layers));
    FT_TRY(parse_layer_types(root, label, cfg));
    FT_TRY(get_int(root, "", "full_attention_interval", label, 0, 0, 1, &cfg->full_attention_interval));
    FT_TRY(get_int(root, "", "linear_num_key_heads", label, 0, 0, 1, &cfg->linear_num_key_heads));
    FT_TRY(get_int(root, "", "linear_num_value_heads", label, 0, 0, 1, &cfg->linear_num_value_heads));
    FT_TRY(get_int(root, "", "linear_key_head_dim", label, 0, 0, 1, &cfg->linear_key_head_dim));
    FT_TRY(get_int(root, "", "linear_value_head_dim", label, 0, 0, 1, &cfg->linear_value_head_dim));
    FT_TRY(get_int(root, "", "linear_conv_kernel_dim", label, 0, 0, 1, &cfg->linear_conv_kernel_dim));
    FT_TRY(get_int(root, "", "mtp_num_hidden_layers", label, 0, 0, 0, &cfg->mtp_layers));
    if (!cfg->mtp_layers)
        FT_TRY(get_int(root, "", "num_nextn_predict_layers", label, 0, 0, 0, &cfg->mtp_layers));
    json_t *ql = get(root, "q_lora_rank"); /* null: a plain q_proj */
    if (ql && !json_is_null(ql))
        FT_TRY(get_int(root, "", "q_lora_rank", label, 0, 0, 1, &cfg->q_lora_rank));
    FT_TRY(get_int(root, "", "kv_lora_rank", label, 0, 0, 1, &cfg->kv_lora_rank));
    FT_TRY(get_int(root, "", "qk_nope_head_dim", label, 0, 0, 0, &cfg->qk_nope_head_dim));
    FT_TRY(get_int(root, "", "qk_rope_head_dim", label, 0, 0, 0, &cfg->qk_rope_head_dim));
    FT_TRY(get_int(root, "", "v_head_dim", label, 0, 0, 1, &cfg->v_head_dim));
    FT_TRY(get_bool(root, "", "rope_interleave", label, -1, &cfg->rope_interleave));
    FT_TRY(get_bool(root, "", "use_qk_norm", label, -1, &cfg->use_qk_norm));
    FT_TRY(parse_dsa(root, label, cfg));
    FT_TRY(get_num(root, "", "query_pre_attn_scalar", label, 0, 0, 1, &cfg->query_pre_attn_scalar));
    const char *acts[2] = {"hidden_activation", "hidden_act"};
    for (int i = 0; i < 2; i++) {
        json_t *a = get(root, acts[i]);
        if (a && json_is_string(a) && !strcmp(json_string_value(a), "gelu_pytorch_tanh")) cfg->gelu_tanh = 1;
    }
    const char *caps[2] = {"final_logit_softcapping", "attn_logit_softcapping"};
    for (int i = 0; i < 2; i++)
        if (get(root, caps[i])) {
            st = ft_fail(FT_ERR_UNSUPPORTED, "%s: '%s' is set; logit soft-capping is not supported",
                         label, caps[i]);
            goto fail;
        }
    /* Gemma 3 as transformers 4.5x wrote it: the local RoPE base and the window pattern as
     * their own keys (every P-th layer global) instead of rope_parameters / layer_types */
    if (!cfg->rope_local_theta)
        FT_TRY(get_num(root, "", "rope_local_base_freq", label, 0, 0, 1, &cfg->rope_local_theta));
    int pattern = 0;
    FT_TRY(get_int(root, "", "sliding_window_pattern", label, 0, 0, 1, &pattern));
    if (!pattern) FT_TRY(get_int(root, "", "_sliding_window_pattern", label, 0, 0, 1, &pattern));
    if (!cfg->sliding && pattern > 1 && cfg->sliding_window > 0) {
        cfg->sliding = calloc((size_t)cfg->n_layers, 1);
        if (!cfg->sliding) {
            st = ft_fail(FT_ERR_OOM, "%s: out of memory", label);
            goto fail;
        }
        for (int l = 0; l < cfg->n_layers; l++) cfg->sliding[l] = (l + 1) % pattern != 0;
    }
    FT_TRY(get_num(root, "", "swiglu_limit", label, 0, 0, 1, &cfg->swiglu_limit));
    FT_TRY(get_num(root, "", "swiglu_alpha", label, 1.702, 0, 0, &cfg->swiglu_alpha));
    FT_TRY(parse_v4(root, label, cfg));
    if (is_v4(cfg)) FT_TRY(parse_rope_v4(root, label, cfg));
    else FT_TRY(parse_rope(root, label, cfg, NULL, -1));
    FT_TRY(parse_moe(root, label, cfg));
    FT_TRY(get_special_tokens(top, label, cfg));
    if (tc) FT_TRY(get_special_tokens(tc, label, cfg));
    json_decref(top);
    return FT_OK;
fail:
    json_decref(top);
    ft_config_free(cfg);
    return st;
}

enum ft_status ft_config_parse_generation(const char *json, size_t len, const char *label,
                                          struct ft_config *cfg) {
    enum ft_status st = FT_OK;
    json_t *root = NULL;
    struct ft_gen_defaults *g = &cfg->gen;
    double x;
    if (!label) label = "generation_config.json";
    FT_TRY(load_object(json, len, label, &root));
    if (get(root, "temperature")) {
        FT_TRY(get_num(root, "", "temperature", label, 1, 0, 1, &x));
        g->temperature = (float)x;
        g->has_temperature = 1;
    }
    if (get(root, "top_p")) {
        FT_TRY(get_num(root, "", "top_p", label, 1, 0, 1, &x));
        if (x > 1) {
            st = ft_fail(FT_ERR_FORMAT, "%s: 'top_p' = %g must be in [0, 1]", label, x);
            goto fail;
        }
        g->top_p = (float)x;
        g->has_top_p = 1;
    }
    if (get(root, "top_k")) {
        FT_TRY(get_int(root, "", "top_k", label, 0, 0, 0, &g->top_k));
        g->has_top_k = 1;
    }
    if (get(root, "repetition_penalty")) {
        FT_TRY(get_num(root, "", "repetition_penalty", label, 1, 0, 0, &x));
        g->repetition_penalty = (float)x;
        g->has_repetition_penalty = 1;
    }
    FT_TRY(get_bool(root, "", "do_sample", label, g->do_sample, &g->do_sample));
    FT_TRY(get_special_tokens(root, label, cfg));
fail:
    json_decref(root);
    return st;
}

enum ft_status ft_config_load(const char *dir, struct ft_config *cfg) {
    enum ft_status st = FT_OK;
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    ft_config_init(cfg);
    ft_path_join(path, sizeof path, dir, "config.json");
    if (!ft_file_exists(path))
        return ft_fail(FT_ERR_IO, "%s: not found (is %s a Hugging Face checkpoint directory?)",
                       path, dir);
    FT_TRY(ft_file_read(path, &text, &len));
    FT_TRY(ft_config_parse(text, len, path, cfg));
    free(text);
    text = NULL;
    ft_path_join(path, sizeof path, dir, "generation_config.json");
    if (ft_file_exists(path)) {
        FT_TRY(ft_file_read(path, &text, &len));
        FT_TRY(ft_config_parse_generation(text, len, path, cfg));
    }
fail:
    free(text);
    if (st != FT_OK) ft_config_free(cfg);
    return st;
}

void ft_config_free(struct ft_config *cfg) {
    if (!cfg) return;
    free(cfg->mlp_only);
    free(cfg->sliding);
    free(cfg->linear);
    free(cfg->index_shared);
    free(cfg->v4_attn);
    free(cfg->hash_moe);
    cfg->index_shared = NULL;
    cfg->v4_attn = cfg->hash_moe = NULL;
    cfg->mlp_only = NULL;
    cfg->sliding = NULL;
    cfg->linear = NULL;
}
