/* test_hfconfig.c — config.json / generation_config.json parsing: real 4.x and 5.x Qwen3-MoE
 * configs, every RoPE type in both spellings, and every malformed field (status and message). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"
#include "core/status.h"
#include "format/hfconfig.h"
#include "test.h"

/* A small dense Llama-style base config; `patch` (a JSON object) is merged over it, and a
 * patch value of "DEL" removes the key. Returns the parse status. */
static const char *k_base =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":1000,"
    "\"hidden_size\":256,\"num_hidden_layers\":4,\"num_attention_heads\":8,"
    "\"num_key_value_heads\":2,\"intermediate_size\":512,\"max_position_embeddings\":4096,"
    "\"rms_norm_eps\":1e-5,\"rope_theta\":500000.0,\"bos_token_id\":1,\"eos_token_id\":2}";

static enum ft_status parse_patched(const char *patch, struct ft_config *cfg) {
    json_error_t e;
    json_t *base = json_loads(k_base, 0, &e), *p = json_loads(patch ? patch : "{}", 0, &e);
    if (!base || !p) {
        fprintf(stderr, "bad test patch: %s\n", patch);
        return FT_ERR_INTERNAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(p, k, v) {
        if (json_is_string(v) && strcmp(json_string_value(v), "DEL") == 0) json_object_del(base, k);
        else json_object_set(base, k, v);
    }
    char *s = json_dumps(base, 0);
    enum ft_status st = ft_config_parse(s, strlen(s), "m/config.json", cfg);
    free(s);
    json_decref(base);
    json_decref(p);
    return st;
}

/* Expects `patch` to fail with `want_st` and a message naming the file and `field`. */
static void expect_bad(const char *patch, enum ft_status want_st, const char *field,
                       const char *also) {
    struct ft_config cfg;
    enum ft_status st = parse_patched(patch, &cfg);
    CHECK_(st == want_st, "patch %s: status %d, want %d (%s)", patch, st, want_st, ft_error());
    EXPECT_CONTAINS(ft_error(), "m/config.json");
    EXPECT_CONTAINS(ft_error(), field);
    if (also) EXPECT_CONTAINS(ft_error(), also);
    EXPECT(cfg.mlp_only == NULL);
    ft_config_free(&cfg);
}

static void expect_qwen3_30b(const struct ft_config *c) {
    EXPECT_STREQ(c->arch, "Qwen3MoeForCausalLM");
    EXPECT_STREQ(c->model_type, "qwen3_moe");
    EXPECT_STREQ(c->torch_dtype, "bfloat16");
    EXPECT_EQ(c->vocab_size, 151936);
    EXPECT_EQ(c->hidden_size, 2048);
    EXPECT_EQ(c->n_layers, 48);
    EXPECT_EQ(c->n_heads, 32);
    EXPECT_EQ(c->n_kv_heads, 4);
    EXPECT_EQ(c->head_dim, 128);
    EXPECT_EQ(c->intermediate_size, 6144);
    EXPECT_EQ(c->max_position_embeddings, 40960);
    EXPECT_NEAR(c->rms_norm_eps, 1e-6, 1e-12);
    EXPECT_EQ(c->tie_word_embeddings, 0);
    EXPECT_EQ(c->attention_bias, 0);
    EXPECT_EQ(c->sliding_window, 0);
    EXPECT_EQ(c->use_sliding_window, 0);
    EXPECT_EQ(c->max_window_layers, 48);
    EXPECT_EQ(c->rope.type, FT_ROPE_DEFAULT);
    EXPECT_NEAR(c->rope.theta, 1e6, 0);
    EXPECT_NEAR(c->rope.factor, 1, 0);
    EXPECT_NEAR(c->rope.partial_rotary_factor, 1, 0);
    EXPECT_EQ(c->n_experts, 128);
    EXPECT_EQ(c->n_experts_per_tok, 8);
    EXPECT_EQ(c->moe_intermediate_size, 768);
    EXPECT_EQ(c->shared_expert_intermediate_size, 0);
    EXPECT_EQ(c->norm_topk_prob, 1);
    EXPECT_EQ(c->decoder_sparse_step, 1);
    EXPECT_EQ(c->bos_token_id, 151643);
}

TEST(qwen3_moe_4x_spelling) {
    struct ft_config c;
    EXPECT_OK(ft_config_load(FT_TEST_DATA "/config/qwen3_moe_4x", &c));
    expect_qwen3_30b(&c);
    EXPECT(c.mlp_only == NULL); /* [] */
    EXPECT_EQ(c.n_eos, 1);
    EXPECT_EQ(c.eos_token_ids[0], 151645);
    EXPECT_EQ(c.gen.has_temperature, 0); /* no generation_config.json */
    EXPECT_EQ(c.gen.do_sample, -1);
    ft_config_free(&c);
    ft_config_free(&c); /* idempotent */
    ft_config_free(NULL);
}

TEST(qwen3_moe_5x_spelling_with_generation) {
    /* written by transformers 5.x: dtype, rope_parameters, num_local_experts */
    struct ft_config c;
    EXPECT_OK(ft_config_load(FT_TEST_DATA "/config/qwen3_moe_5x", &c));
    expect_qwen3_30b(&c);
    EXPECT(c.mlp_only != NULL);
    if (c.mlp_only) {
        EXPECT_EQ(c.mlp_only[0], 1);
        EXPECT_EQ(c.mlp_only[1], 0);
        EXPECT_EQ(c.mlp_only[47], 1);
    }
    /* generation_config.json overrides eos with its list */
    EXPECT_EQ(c.n_eos, 2);
    EXPECT_EQ(c.eos_token_ids[0], 151645);
    EXPECT_EQ(c.eos_token_ids[1], 151643);
    EXPECT(c.gen.has_temperature && c.gen.has_top_p && c.gen.has_top_k);
    EXPECT_NEAR(c.gen.temperature, 0.6, 1e-6);
    EXPECT_NEAR(c.gen.top_p, 0.95, 1e-6);
    EXPECT_EQ(c.gen.top_k, 20);
    EXPECT_EQ(c.gen.has_repetition_penalty, 0);
    EXPECT_EQ(c.gen.do_sample, 1);
    ft_config_free(&c);
}

TEST(load_missing_dir) {
    struct ft_config c;
    EXPECT_EQ(ft_config_load("/nonexistent/ckpt", &c), FT_ERR_IO);
    EXPECT_CONTAINS(ft_error(), "/nonexistent/ckpt/config.json: not found");
    EXPECT_CONTAINS(ft_error(), "is /nonexistent/ckpt a Hugging Face checkpoint directory?");
}

TEST(load_bad_generation_names_file) {
    char d[128], p[256];
    snprintf(d, sizeof d, "/tmp/ft_test_cfg_%d", (int)getpid());
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/config.json", d);
    FILE *f = fopen(p, "w");
    fputs(k_base, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/generation_config.json", d);
    f = fopen(p, "w");
    fputs("{\"temperature\":\"hot\"}", f);
    fclose(f);
    struct ft_config c;
    EXPECT_EQ(ft_config_load(d, &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "generation_config.json: 'temperature' must be a number");
    remove(p);
    EXPECT_OK(ft_config_load(d, &c));
    EXPECT_EQ(c.eos_token_ids[0], 2);
    ft_config_free(&c);
    snprintf(p, sizeof p, "%s/config.json", d);
    remove(p);
    EXPECT_EQ(rmdir(d), 0);
}

TEST(dense_defaults) {
    struct ft_config c;
    EXPECT_OK(parse_patched(NULL, &c));
    EXPECT_STREQ(c.arch, "LlamaForCausalLM");
    EXPECT_EQ(c.head_dim, 32); /* 256 / 8 */
    EXPECT_EQ(c.n_kv_heads, 2);
    EXPECT_STREQ(c.torch_dtype, "");
    EXPECT_EQ(c.tie_word_embeddings, -1);
    EXPECT_EQ(c.attention_bias, -1);
    EXPECT_EQ(c.use_sliding_window, -1);
    EXPECT_EQ(c.norm_topk_prob, -1);
    EXPECT_EQ(c.decoder_sparse_step, 1);
    EXPECT_EQ(c.n_experts, 0);
    EXPECT(c.mlp_only == NULL);
    EXPECT_NEAR(c.rope.theta, 500000, 0);
    EXPECT_EQ(c.rope.type, FT_ROPE_DEFAULT);
    ft_config_free(&c);
    /* defaults when optional fields are absent or null */
    EXPECT_OK(parse_patched("{\"num_key_value_heads\":\"DEL\",\"rms_norm_eps\":\"DEL\","
                            "\"rope_theta\":\"DEL\",\"head_dim\":null,\"bos_token_id\":null,"
                            "\"eos_token_id\":null,\"sliding_window\":null}", &c));
    EXPECT_EQ(c.n_kv_heads, 8);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_NEAR(c.rms_norm_eps, 1e-6, 0);
    EXPECT_NEAR(c.rope.theta, 10000, 0);
    EXPECT_EQ(c.bos_token_id, -1);
    EXPECT_EQ(c.n_eos, 0);
    EXPECT_EQ(c.sliding_window, 0);
    ft_config_free(&c);
    /* explicit values, torch_dtype vs dtype */
    EXPECT_OK(parse_patched("{\"head_dim\":64,\"tie_word_embeddings\":true,\"attention_bias\":true,"
                            "\"sliding_window\":4096,\"use_sliding_window\":true,"
                            "\"torch_dtype\":\"float16\",\"eos_token_id\":[2,3,4]}", &c));
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.tie_word_embeddings, 1);
    EXPECT_EQ(c.attention_bias, 1);
    EXPECT_EQ(c.sliding_window, 4096);
    EXPECT_EQ(c.use_sliding_window, 1);
    EXPECT_STREQ(c.torch_dtype, "float16");
    EXPECT_EQ(c.n_eos, 3);
    EXPECT_EQ(c.eos_token_ids[2], 4);
    ft_config_free(&c);
    EXPECT_OK(parse_patched("{\"dtype\":\"bfloat16\",\"torch_dtype\":\"float32\"}", &c));
    EXPECT_STREQ(c.torch_dtype, "bfloat16");
    ft_config_free(&c);
}

TEST(moe_fields) {
    struct ft_config c;
    /* Mixtral spelling */
    EXPECT_OK(parse_patched("{\"num_local_experts\":8,\"num_experts_per_tok\":2}", &c));
    EXPECT_EQ(c.n_experts, 8);
    EXPECT_EQ(c.n_experts_per_tok, 2);
    ft_config_free(&c);
    /* Qwen2-MoE spelling */
    EXPECT_OK(parse_patched("{\"num_experts\":60,\"num_experts_per_tok\":4,\"moe_intermediate_size\":"
                            "1408,\"shared_expert_intermediate_size\":5632,\"norm_topk_prob\":false,"
                            "\"decoder_sparse_step\":2,\"mlp_only_layers\":[3]}", &c));
    EXPECT_EQ(c.n_experts, 60);
    EXPECT_EQ(c.moe_intermediate_size, 1408);
    EXPECT_EQ(c.shared_expert_intermediate_size, 5632);
    EXPECT_EQ(c.norm_topk_prob, 0);
    EXPECT_EQ(c.decoder_sparse_step, 2);
    EXPECT(c.mlp_only && c.mlp_only[3] == 1 && c.mlp_only[0] == 0);
    ft_config_free(&c);
    EXPECT(c.mlp_only == NULL);
}

/* ---------------------------------------------------------------- RoPE */

TEST(rope_linear_both_spellings) {
    struct ft_config c;
    EXPECT_OK(parse_patched("{\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}}", &c));
    EXPECT_EQ(c.rope.type, FT_ROPE_LINEAR);
    EXPECT_NEAR(c.rope.factor, 2, 0);
    EXPECT_NEAR(c.rope.theta, 500000, 0);
    ft_config_free(&c);
    EXPECT_OK(parse_patched("{\"rope_theta\":\"DEL\",\"rope_parameters\":{\"rope_type\":\"linear\","
                            "\"factor\":4,\"rope_theta\":10000.0}}", &c));
    EXPECT_EQ(c.rope.type, FT_ROPE_LINEAR);
    EXPECT_NEAR(c.rope.factor, 4, 0);
    EXPECT_NEAR(c.rope.theta, 10000, 0);
    ft_config_free(&c);
}

TEST(rope_llama3_both_spellings) {
    /* Llama 3.1 as written by transformers 4.x */
    struct ft_config c;
    EXPECT_OK(parse_patched("{\"max_position_embeddings\":131072,\"rope_scaling\":{\"factor\":8.0,"
                            "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                            "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"}}", &c));
    EXPECT_EQ(c.rope.type, FT_ROPE_LLAMA3);
    EXPECT_NEAR(c.rope.factor, 8, 0);
    EXPECT_NEAR(c.rope.low_freq_factor, 1, 0);
    EXPECT_NEAR(c.rope.high_freq_factor, 4, 0);
    EXPECT_EQ(c.rope.original_max_pos, 8192);
    EXPECT_NEAR(c.rope.theta, 500000, 0);
    ft_config_free(&c);
    /* 5.x: theta inside rope_parameters */
    EXPECT_OK(parse_patched("{\"rope_theta\":\"DEL\",\"max_position_embeddings\":131072,"
                            "\"rope_parameters\":{\"factor\":32.0,\"low_freq_factor\":2.0,"
                            "\"high_freq_factor\":8.0,\"original_max_position_embeddings\":8192,"
                            "\"rope_theta\":500000.0,\"rope_type\":\"llama3\"}}", &c));
    EXPECT_EQ(c.rope.type, FT_ROPE_LLAMA3);
    EXPECT_NEAR(c.rope.factor, 32, 0);
    EXPECT_NEAR(c.rope.low_freq_factor, 2, 0);
    EXPECT_NEAR(c.rope.high_freq_factor, 8, 0);
    EXPECT_NEAR(c.rope.theta, 500000, 0);
    ft_config_free(&c);
}

TEST(rope_yarn_variants) {
    struct ft_config c;
    /* Qwen2.5 / Qwen3 long-context recipe, 4.x legacy "type" */
    EXPECT_OK(parse_patched("{\"rope_scaling\":{\"factor\":4.0,\"original_max_position_embeddings\":"
                            "32768,\"type\":\"yarn\"}}", &c));
    EXPECT_EQ(c.rope.type, FT_ROPE_YARN);
    EXPECT_NEAR(c.rope.factor, 4, 0);
    EXPECT_EQ(c.rope.original_max_pos, 32768);
    EXPECT_NEAR(c.rope.beta_fast, 32, 0);
    EXPECT_NEAR(c.rope.beta_slow, 1, 0);
    EXPECT_NEAR(c.rope.attention_factor, 0, 0);
    EXPECT_EQ(c.rope.truncate, 1);
    ft_config_free(&c);
    /* 5.x, original_max_position_embeddings falls back to max_position_embeddings;
     * explicit betas, attention_factor, truncate false */
    EXPECT_OK(parse_patched("{\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":2,\"rope_theta\":"
                            "150000,\"beta_fast\":16,\"beta_slow\":2,\"attention_factor\":1.25,"
                            "\"truncate\":false}}", &c));
    EXPECT_EQ(c.rope.type, FT_ROPE_YARN);
    EXPECT_EQ(c.rope.original_max_pos, 4096);
    EXPECT_NEAR(c.rope.theta, 150000, 0);
    EXPECT_NEAR(c.rope.beta_fast, 16, 0);
    EXPECT_NEAR(c.rope.beta_slow, 2, 0);
    EXPECT_NEAR(c.rope.attention_factor, 1.25, 0);
    EXPECT_EQ(c.rope.truncate, 0);
    ft_config_free(&c);
    /* DeepSeek-style mscale / mscale_all_dim: ratio of the two get_mscale values */
    EXPECT_OK(parse_patched("{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":40,"
                            "\"original_max_position_embeddings\":4096,\"mscale\":1.0,"
                            "\"mscale_all_dim\":0.5}}", &c));
    double want = (0.1 * 1.0 * log(40) + 1) / (0.1 * 0.5 * log(40) + 1);
    EXPECT_NEAR(c.rope.attention_factor, want, 1e-12);
    ft_config_free(&c);
    /* factor absent: max_position_embeddings / original */
    EXPECT_OK(parse_patched("{\"max_position_embeddings\":16384,\"rope_scaling\":{\"rope_type\":"
                            "\"yarn\",\"original_max_position_embeddings\":4096}}", &c));
    EXPECT_NEAR(c.rope.factor, 4, 0);
    ft_config_free(&c);
    /* top-level original_max_position_embeddings wins (Phi-3 style) */
    EXPECT_OK(parse_patched("{\"original_max_position_embeddings\":2048,\"rope_scaling\":{"
                            "\"rope_type\":\"yarn\",\"factor\":2,\"original_max_position_embeddings\":"
                            "4096}}", &c));
    EXPECT_EQ(c.rope.original_max_pos, 2048);
    ft_config_free(&c);
}

TEST(rope_default_and_partial) {
    struct ft_config c;
    EXPECT_OK(parse_patched("{\"rope_scaling\":{\"rope_type\":\"default\"},\"partial_rotary_factor\":0.5}", &c));
    EXPECT_EQ(c.rope.type, FT_ROPE_DEFAULT);
    EXPECT_NEAR(c.rope.partial_rotary_factor, 0.5, 0);
    ft_config_free(&c);
    EXPECT_OK(parse_patched("{\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1e4,"
                            "\"partial_rotary_factor\":0.25}}", &c));
    EXPECT_NEAR(c.rope.partial_rotary_factor, 0.25, 0);
    EXPECT_NEAR(c.rope.theta, 1e4, 0);
    ft_config_free(&c);
    EXPECT_OK(parse_patched("{\"rope_scaling\":null}", &c));
    EXPECT_EQ(c.rope.type, FT_ROPE_DEFAULT);
    ft_config_free(&c);
}

TEST(rope_unsupported_and_bad) {
    expect_bad("{\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2}}", FT_ERR_UNSUPPORTED,
               "rope_scaling.rope_type", "'dynamic' is not supported (supported: default, linear, llama3, yarn)");
    expect_bad("{\"rope_parameters\":{\"rope_type\":\"longrope\",\"rope_theta\":1e4}}", FT_ERR_UNSUPPORTED,
               "rope_parameters.rope_type", "'longrope'");
    expect_bad("{\"rope_scaling\":{\"type\":\"su\"}}", FT_ERR_UNSUPPORTED, "rope_scaling.type", "'su'");
    expect_bad("{\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"default\"},\"other\":{}}}",
               FT_ERR_UNSUPPORTED, "rope_parameters.full_attention", "per-layer-type");
    expect_bad("{\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"default\"},"
               "\"sliding_attention\":{\"rope_type\":\"linear\",\"factor\":2}}}",
               FT_ERR_UNSUPPORTED, "sliding_attention.rope_type", "default");
    expect_bad("{\"rope_scaling\":{\"rope_type\":\"linear\"}}", FT_ERR_FORMAT, "rope_scaling.factor", "missing");
    expect_bad("{\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":\"2\"}}", FT_ERR_FORMAT,
               "rope_scaling.factor", "must be a number");
    expect_bad("{\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,"
               "\"high_freq_factor\":1}}", FT_ERR_FORMAT, "high_freq_factor", NULL);
    expect_bad("{\"rope_scaling\":{\"rope_type\":7}}", FT_ERR_FORMAT, "rope_scaling.rope_type", "must be a string");
    expect_bad("{\"rope_scaling\":[1]}", FT_ERR_FORMAT, "rope_scaling", "object");
    expect_bad("{\"rope_parameters\":3}", FT_ERR_FORMAT, "rope_parameters", "object");
    expect_bad("{\"rope_theta\":-1}", FT_ERR_FORMAT, "rope_theta", "out of range");
    expect_bad("{\"partial_rotary_factor\":1.5}", FT_ERR_FORMAT, "partial_rotary_factor", NULL);
    expect_bad("{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,\"truncate\":\"no\"}}",
               FT_ERR_FORMAT, "rope_scaling.truncate", "true or false");
    expect_bad("{\"max_position_embeddings\":\"DEL\",\"rope_scaling\":{\"rope_type\":\"yarn\"}}",
               FT_ERR_FORMAT, "rope_scaling.factor", NULL);
}

/* ---------------------------------------------------------------- bad fields */

TEST(rejects_bad_json_and_missing) {
    struct ft_config c;
    EXPECT_EQ(ft_config_parse("{\"a\":", 5, "x/config.json", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "x/config.json: not valid JSON");
    EXPECT_EQ(ft_config_parse("[]", 2, "x/config.json", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "not a JSON object");
    EXPECT_EQ(ft_config_parse("{\"a\":1,\"a\":2}", 13, "x/config.json", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "duplicate");
    expect_bad("{\"architectures\":\"DEL\"}", FT_ERR_FORMAT, "'architectures' is missing", NULL);
    expect_bad("{\"architectures\":[]}", FT_ERR_FORMAT, "architectures", "non-empty list");
    expect_bad("{\"architectures\":\"LlamaForCausalLM\"}", FT_ERR_FORMAT, "architectures", NULL);
    expect_bad("{\"vocab_size\":\"DEL\"}", FT_ERR_FORMAT, "'vocab_size' is missing", NULL);
    expect_bad("{\"hidden_size\":\"DEL\"}", FT_ERR_FORMAT, "'hidden_size' is missing", NULL);
    expect_bad("{\"num_hidden_layers\":\"DEL\"}", FT_ERR_FORMAT, "'num_hidden_layers' is missing", NULL);
    expect_bad("{\"num_attention_heads\":\"DEL\"}", FT_ERR_FORMAT, "'num_attention_heads' is missing", NULL);
    expect_bad("{\"model_type\":5}", FT_ERR_FORMAT, "'model_type' must be a string", NULL);
}

TEST(rejects_bad_types_and_ranges) {
    expect_bad("{\"hidden_size\":\"abc\"}", FT_ERR_FORMAT, "'hidden_size' must be an integer", "got a string");
    expect_bad("{\"hidden_size\":-256}", FT_ERR_FORMAT, "'hidden_size' = -256 is out of range", NULL);
    expect_bad("{\"hidden_size\":0}", FT_ERR_FORMAT, "'hidden_size'", NULL);
    expect_bad("{\"hidden_size\":256.0}", FT_ERR_FORMAT, "'hidden_size' must be an integer", NULL);
    expect_bad("{\"hidden_size\":4294967296}", FT_ERR_FORMAT, "'hidden_size'", "out of range");
    expect_bad("{\"vocab_size\":true}", FT_ERR_FORMAT, "'vocab_size' must be an integer", "boolean");
    expect_bad("{\"num_hidden_layers\":-1}", FT_ERR_FORMAT, "num_hidden_layers", NULL);
    expect_bad("{\"intermediate_size\":-5}", FT_ERR_FORMAT, "intermediate_size", NULL);
    expect_bad("{\"num_attention_heads\":7,\"num_key_value_heads\":1}", FT_ERR_FORMAT, "'num_attention_heads' (7) does not divide 'hidden_size' (256)", "head_dim");
    expect_bad("{\"num_key_value_heads\":3}", FT_ERR_FORMAT, "'num_key_value_heads' (3) does not divide 'num_attention_heads' (8)", NULL);
    expect_bad("{\"num_key_value_heads\":0}", FT_ERR_FORMAT, "num_key_value_heads", NULL);
    expect_bad("{\"head_dim\":-64}", FT_ERR_FORMAT, "head_dim", NULL);
    expect_bad("{\"rms_norm_eps\":\"1e-6\"}", FT_ERR_FORMAT, "'rms_norm_eps' must be a number", NULL);
    expect_bad("{\"rms_norm_eps\":0}", FT_ERR_FORMAT, "rms_norm_eps", "out of range");
    expect_bad("{\"tie_word_embeddings\":1}", FT_ERR_FORMAT, "'tie_word_embeddings' must be true or false", NULL);
    expect_bad("{\"attention_bias\":\"false\"}", FT_ERR_FORMAT, "attention_bias", NULL);
    expect_bad("{\"use_sliding_window\":0}", FT_ERR_FORMAT, "use_sliding_window", NULL);
    expect_bad("{\"sliding_window\":-1}", FT_ERR_FORMAT, "sliding_window", NULL);
    expect_bad("{\"max_window_layers\":\"x\"}", FT_ERR_FORMAT, "max_window_layers", NULL);
    expect_bad("{\"max_position_embeddings\":[]}", FT_ERR_FORMAT, "max_position_embeddings", "an array");
    expect_bad("{\"bos_token_id\":-3}", FT_ERR_FORMAT, "bos_token_id", NULL);
    expect_bad("{\"bos_token_id\":\"<s>\"}", FT_ERR_FORMAT, "bos_token_id", NULL);
    expect_bad("{\"eos_token_id\":\"</s>\"}", FT_ERR_FORMAT, "eos_token_id", "list of integers");
    expect_bad("{\"eos_token_id\":[1,\"2\"]}", FT_ERR_FORMAT, "eos_token_id[1]", NULL);
    expect_bad("{\"eos_token_id\":-2}", FT_ERR_FORMAT, "eos_token_id", NULL);
    expect_bad("{\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", FT_ERR_FORMAT, "eos_token_id", "at most 8");
}

TEST(rejects_bad_moe) {
    expect_bad("{\"num_experts\":8,\"num_local_experts\":16}", FT_ERR_FORMAT, "num_local_experts", "disagree");
    expect_bad("{\"num_experts\":8,\"num_experts_per_tok\":9}", FT_ERR_FORMAT, "num_experts_per_tok", NULL);
    expect_bad("{\"num_experts\":8}", FT_ERR_FORMAT, "num_experts_per_tok", ">= 1");
    expect_bad("{\"num_experts\":\"8\"}", FT_ERR_FORMAT, "'num_experts' must be an integer", NULL);
    expect_bad("{\"moe_intermediate_size\":-1}", FT_ERR_FORMAT, "moe_intermediate_size", NULL);
    expect_bad("{\"shared_expert_intermediate_size\":1.5}", FT_ERR_FORMAT, "shared_expert_intermediate_size", NULL);
    expect_bad("{\"norm_topk_prob\":\"yes\"}", FT_ERR_FORMAT, "norm_topk_prob", NULL);
    expect_bad("{\"decoder_sparse_step\":0}", FT_ERR_FORMAT, "decoder_sparse_step", NULL);
    expect_bad("{\"mlp_only_layers\":[0,4]}", FT_ERR_FORMAT, "mlp_only_layers[1]", "[0, 4)");
    expect_bad("{\"mlp_only_layers\":[-1]}", FT_ERR_FORMAT, "mlp_only_layers[0]", NULL);
    expect_bad("{\"mlp_only_layers\":[\"1\"]}", FT_ERR_FORMAT, "mlp_only_layers[0]", NULL);
    expect_bad("{\"mlp_only_layers\":3}", FT_ERR_FORMAT, "mlp_only_layers", "list");
}

/* ---------------------------------------------------------------- generation */

TEST(generation_config) {
    struct ft_config c;
    EXPECT_OK(parse_patched(NULL, &c));
    const char *g = "{\"temperature\":0.7,\"top_p\":0.8,\"top_k\":40,\"repetition_penalty\":1.05,"
                    "\"do_sample\":false,\"bos_token_id\":7,\"eos_token_id\":[9,10],"
                    "\"transformers_version\":\"4.51.0\"}";
    EXPECT_OK(ft_config_parse_generation(g, strlen(g), "m/generation_config.json", &c));
    EXPECT(c.gen.has_temperature && c.gen.has_top_p && c.gen.has_top_k && c.gen.has_repetition_penalty);
    EXPECT_NEAR(c.gen.temperature, 0.7, 1e-6);
    EXPECT_NEAR(c.gen.top_p, 0.8, 1e-6);
    EXPECT_EQ(c.gen.top_k, 40);
    EXPECT_NEAR(c.gen.repetition_penalty, 1.05, 1e-6);
    EXPECT_EQ(c.gen.do_sample, 0);
    EXPECT_EQ(c.bos_token_id, 7);
    EXPECT_EQ(c.n_eos, 2);
    EXPECT_EQ(c.eos_token_ids[1], 10);
    /* a generation config without ids leaves them alone; an int eos overrides */
    EXPECT_OK(ft_config_parse_generation("{}", 2, "g", &c));
    EXPECT_EQ(c.n_eos, 2);
    EXPECT_OK(ft_config_parse_generation("{\"eos_token_id\":11}", 19, "g", &c));
    EXPECT_EQ(c.n_eos, 1);
    EXPECT_EQ(c.eos_token_ids[0], 11);
    ft_config_free(&c);

    static const struct { const char *json, *field; } bad[] = {
        {"{\"temperature\":\"hot\"}", "'temperature' must be a number"},
        {"{\"temperature\":-1}", "'temperature'"},
        {"{\"top_p\":1.5}", "'top_p' = 1.5 must be in [0, 1]"},
        {"{\"top_p\":[]}", "'top_p'"},
        {"{\"top_k\":0.5}", "'top_k' must be an integer"},
        {"{\"top_k\":-1}", "'top_k'"},
        {"{\"repetition_penalty\":0}", "'repetition_penalty'"},
        {"{\"do_sample\":\"true\"}", "'do_sample' must be true or false"},
        {"{\"eos_token_id\":{}}", "'eos_token_id'"},
        {"{\"bos_token_id\":1.5}", "'bos_token_id'"},
        {"[1]", "not a JSON object"},
        {"{", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_OK(parse_patched(NULL, &c));
        EXPECT_EQ(ft_config_parse_generation(bad[i].json, strlen(bad[i].json),
                                             "m/generation_config.json", &c), FT_ERR_FORMAT);
        EXPECT_CONTAINS(ft_error(), "m/generation_config.json");
        EXPECT_CONTAINS(ft_error(), bad[i].field);
        ft_config_free(&c);
    }
}

/* Qwen3.5's multimodal wrapper: the language model's fields in text_config (the vision config
 * beside it is not read), tie_word_embeddings and the special tokens from the top level too;
 * layer_types with linear_attention layers and the DeltaNet sizes; an unknown layer type. */
TEST(hybrid_text_config_and_layer_types) {
    static const char *vl =
        "{\"architectures\":[\"Qwen3_5MoeForConditionalGeneration\"],\"model_type\":\"qwen3_5_moe\","
        "\"tie_word_embeddings\":false,\"image_token_id\":248056,\"vision_config\":{\"depth\":27,"
        "\"hidden_size\":1152},\"text_config\":{\"vocab_size\":248320,\"hidden_size\":2048,"
        "\"num_hidden_layers\":4,\"num_attention_heads\":16,\"num_key_value_heads\":2,"
        "\"head_dim\":256,\"tie_word_embeddings\":true,\"eos_token_id\":248044,"
        "\"layer_types\":[\"linear_attention\",\"linear_attention\",\"linear_attention\","
        "\"full_attention\"],\"linear_num_key_heads\":16,\"linear_num_value_heads\":32,"
        "\"linear_key_head_dim\":128,\"linear_value_head_dim\":128,\"linear_conv_kernel_dim\":4,"
        "\"num_experts\":256,\"num_experts_per_tok\":8,\"moe_intermediate_size\":512,"
        "\"shared_expert_intermediate_size\":512,\"mtp_num_hidden_layers\":1,"
        "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000,"
        "\"mrope_section\":[11,11,10],\"mrope_interleaved\":true}}}";
    struct ft_config c;
    EXPECT_OK(ft_config_parse(vl, strlen(vl), "vl/config.json", &c));
    EXPECT_STREQ(c.arch, "Qwen3_5MoeForConditionalGeneration");
    EXPECT_EQ(c.text_config, 1);
    EXPECT_EQ(c.hidden_size, 2048);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.n_experts, 256);
    EXPECT_EQ(c.tie_word_embeddings, 0); /* the wrapper's own, not text_config's */
    EXPECT_EQ(c.n_eos, 1);
    EXPECT_EQ(c.eos_token_ids[0], 248044);
    EXPECT(c.linear != NULL);
    if (c.linear) EXPECT(c.linear[0] && c.linear[1] && c.linear[2] && !c.linear[3]);
    EXPECT_EQ(c.linear_num_value_heads, 32);
    EXPECT_EQ(c.linear_key_head_dim, 128);
    EXPECT_EQ(c.mtp_layers, 1);
    EXPECT_NEAR(c.rope.theta, 1e7, 0);
    EXPECT_EQ(c.rope.partial_rotary_set, 0); /* the arch's 0.25 applies at load */
    ft_config_free(&c);
    EXPECT_EQ(parse_patched("{\"layer_types\":[\"full_attention\",\"mamba\",\"full_attention\","
                            "\"full_attention\"]}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "layer_types[1]");
    EXPECT_EQ(parse_patched("{\"text_config\":3}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "text_config");
    /* the MoE fields of the sigmoid-router families, wrong in type or value */
    EXPECT_EQ(parse_patched("{\"mlp_layer_types\":[\"dense\",\"sparse\"]}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "mlp_layer_types");
    EXPECT_EQ(parse_patched("{\"mlp_layer_types\":[\"dense\",\"sparse\",\"moe\",\"dense\"]}", &c),
              FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "mlp_layer_types[2]");
    EXPECT_EQ(parse_patched("{\"scoring_func\":\"relu\"}", &c), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "scoring_func");
    EXPECT_EQ(parse_patched("{\"scoring_func\":3}", &c), FT_ERR_FORMAT);
    EXPECT_EQ(parse_patched("{\"topk_method\":\"random\"}", &c), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "topk_method");
    EXPECT_EQ(parse_patched("{\"topk_method\":1}", &c), FT_ERR_UNSUPPORTED);
    EXPECT_OK(parse_patched("{\"topk_method\":\"group_limited_greedy\",\"n_group\":2,\"topk_group\":1}", &c));
    EXPECT_EQ(c.topk_group_limited, 1);
    EXPECT_EQ(parse_patched("{\"num_experts\":8,\"num_experts_per_tok\":2,\"n_group\":4,"
                            "\"topk_group\":5}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "topk_group");
    EXPECT_EQ(parse_patched("{\"q_lora_rank\":\"big\"}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "q_lora_rank");
    EXPECT_OK(parse_patched("{\"q_lora_rank\":null,\"mlp_layer_types\":[\"dense\",\"sparse\","
                            "\"sparse\",\"dense\"]}", &c));
    EXPECT_EQ(c.q_lora_rank, 0);
    EXPECT(c.mlp_only && c.mlp_only[0] && !c.mlp_only[1] && c.mlp_only[3]);
    ft_config_free(&c);
    EXPECT_OK(parse_patched("{\"partial_rotary_factor\":0.5}", &c));
    EXPECT_EQ(c.rope.partial_rotary_set, 1);
    EXPECT(c.linear == NULL);
    ft_config_free(&c);
}

/* DeepSeek sparse attention (GLM-5): the indexer's sizes, which layers reuse the previous
 * choice (indexer_types, index_topk_pattern, or transformers' freq / offset rule), the
 * deepseek_sparse_attention layer type; mlp_layer_types wins over first_k_dense_replace. */
TEST(dsa_indexer_fields) {
    struct ft_config c;
    EXPECT_OK(parse_patched("{\"index_topk\":2048,\"index_n_heads\":32,\"index_head_dim\":128,"
                            "\"first_k_dense_replace\":3,\"layer_types\":[\"deepseek_sparse_attention\","
                            "\"deepseek_sparse_attention\",\"deepseek_sparse_attention\","
                            "\"deepseek_sparse_attention\"],\"mlp_layer_types\":[\"dense\",\"sparse\","
                            "\"sparse\",\"sparse\"]}", &c));
    EXPECT_EQ(c.index_topk, 2048);
    EXPECT_EQ(c.index_n_heads, 32);
    EXPECT_EQ(c.index_head_dim, 128);
    EXPECT(c.index_shared == NULL); /* the default rule: every layer full */
    EXPECT_EQ(c.first_k_dense_replace, 0);
    EXPECT(c.linear == NULL && c.sliding && !c.sliding[0]);
    ft_config_free(&c);
    EXPECT_OK(parse_patched("{\"index_topk\":8,\"indexer_types\":[\"full\",\"shared\",\"full\","
                            "\"shared\"]}", &c));
    EXPECT(c.index_shared && !c.index_shared[0] && c.index_shared[1] && !c.index_shared[2] &&
           c.index_shared[3]);
    ft_config_free(&c);
    EXPECT_OK(parse_patched("{\"index_topk\":8,\"index_topk_pattern\":\"FFSS\"}", &c));
    EXPECT(c.index_shared && !c.index_shared[1] && c.index_shared[2] && c.index_shared[3]);
    ft_config_free(&c);
    /* freq 2, offset 2: layer i full when max(i - 1, 0) is even: F F S F */
    EXPECT_OK(parse_patched("{\"index_topk\":8,\"index_topk_freq\":2}", &c));
    EXPECT(c.index_shared && !c.index_shared[0] && !c.index_shared[1] && c.index_shared[2] &&
           !c.index_shared[3]);
    ft_config_free(&c);
    EXPECT_EQ(parse_patched("{\"index_topk\":8,\"indexer_types\":[\"full\",\"half\",\"full\","
                            "\"full\"]}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "indexer_types[1]");
    EXPECT_EQ(parse_patched("{\"index_topk\":8,\"index_topk_pattern\":\"FS\"}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "index_topk_pattern");
    EXPECT_EQ(parse_patched("{\"index_topk\":0}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "index_topk");
    EXPECT_EQ(parse_patched("{\"index_n_heads\":\"many\"}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "index_n_heads");
}

/* DeepSeek-V4's keys: layer_types with its compressed kinds (or the legacy compress_ratios),
 * compress_rates (or compress_rate_csa / _hca), mlp_layer_types hash_moe / moe, the two RoPEs
 * nested (main / compress, as transformers 5.17 saves them) or flat (rope_theta for the sliding
 * layers; the scaling at compress_rope_theta with YaRN's attention factor 1), sqrtsoftplus. */
TEST(deepseek_v4_fields) {
    struct ft_config c;
    EXPECT_OK(parse_patched("{\"architectures\":[\"DeepseekV4ForCausalLM\"],\"model_type\":\"deepseek_v4\","
                            "\"layer_types\":[\"sliding_attention\",\"compressed_sparse_attention\","
                            "\"heavily_compressed_attention\",\"compressed_sparse_attention\"],"
                            "\"compress_rates\":{\"compressed_sparse_attention\":4,"
                            "\"heavily_compressed_attention\":64},\"mlp_layer_types\":[\"hash_moe\","
                            "\"moe\",\"moe\",\"moe\"],\"scoring_func\":\"sqrtsoftplus\",\"hc_mult\":4,"
                            "\"o_groups\":8,\"o_lora_rank\":1024,\"rope_parameters\":{\"main\":{\"rope_type\":"
                            "\"default\",\"rope_theta\":10000.0,\"partial_rotary_factor\":0.125},\"compress\":"
                            "{\"rope_type\":\"yarn\",\"factor\":16.0,\"original_max_position_embeddings\":65536,"
                            "\"rope_theta\":160000.0,\"partial_rotary_factor\":0.125,\"attention_factor\":1.0}}}", &c));
    EXPECT(c.v4_attn && c.v4_attn[0] == 1 && c.v4_attn[1] == 2 && c.v4_attn[2] == 3 && c.v4_attn[3] == 2);
    EXPECT(c.hash_moe && c.hash_moe[0] && !c.hash_moe[1]);
    EXPECT_EQ(c.compress_csa, 4);
    EXPECT_EQ(c.compress_hca, 64);
    EXPECT_EQ(c.scoring_sqrtsoftplus, 1);
    EXPECT(c.hc_mult == 4 && c.o_groups == 8 && c.o_lora_rank == 1024 && c.rope_nested);
    EXPECT(c.rope.type == FT_ROPE_DEFAULT && c.rope.theta == 10000.0 && c.rope.partial_rotary_factor == 0.125);
    EXPECT(c.rope_compress.type == FT_ROPE_YARN && c.rope_compress.theta == 160000.0 &&
           c.rope_compress.factor == 16.0 && c.rope_compress.original_max_pos == 65536 &&
           c.rope_compress.attention_factor == 1.0);
    ft_config_free(&c);
    EXPECT_OK(parse_patched("{\"architectures\":[\"DeepseekV4ForCausalLM\"],\"compress_ratios\":[0,4,128,4],"
                            "\"compress_rate_hca\":128,\"compress_rope_theta\":80000.0,\"rope_scaling\":{"
                            "\"type\":\"yarn\",\"factor\":16.0,\"original_max_position_embeddings\":256}}", &c));
    EXPECT(c.v4_attn && c.v4_attn[0] == 1 && c.v4_attn[1] == 2 && c.v4_attn[2] == 3 && c.v4_attn[3] == 2);
    EXPECT(c.hash_moe == NULL && c.scoring_sqrtsoftplus == -1 && c.compress_hca == 128 && !c.rope_nested);
    EXPECT(c.rope.type == FT_ROPE_DEFAULT && c.rope.theta == 500000.0);
    EXPECT(c.rope_compress.type == FT_ROPE_YARN && c.rope_compress.theta == 80000.0 &&
           c.rope_compress.attention_factor == 1.0);
    ft_config_free(&c);
    EXPECT_EQ(parse_patched("{\"architectures\":[\"DeepseekV4ForCausalLM\"],\"compress_ratios\":[0,4,8,4]}", &c),
              FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "compress_ratios[2]");
    EXPECT_EQ(parse_patched("{\"architectures\":[\"DeepseekV4ForCausalLM\"],\"mlp_layer_types\":[\"moe\","
                            "\"dense\",\"moe\",\"moe\"]}", &c), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "mlp_layer_types[1]");
    /* another arch's config never takes them */
    EXPECT_OK(parse_patched("{\"layer_types\":[\"full_attention\",\"compressed_sparse_attention\","
                            "\"full_attention\",\"full_attention\"]}", &c));
    EXPECT(c.v4_attn && c.v4_attn[1] == 2); /* refused by the loader (ft_v4_shapes) */
    ft_config_free(&c);
}

TEST_MAIN("hfconfig")
