/* test_model_badinput.c — broken checkpoints: each must give one clear line naming the file and
 * the tensor or field, exit code 2 from the CLI, and no crash. The broken directories are made
 * at run time from a good fixture (copy, then mutate config.json or rewrite the safetensors). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/file.h"
#include "core/threadpool.h"
#include "engine/forward.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "test.h"

#define GOOD FT_TEST_DATA "/models/qwen3_moe"

static char g_root[256];

static const char *g_good = GOOD; /* the fixture make_dir and rewrite copy */

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

/* Makes a fresh directory holding the good fixture's config (with `from` replaced by `to` if
 * given) and, unless skip_weights, its model.safetensors. */
static const char *make_dir(const char *name, const char *from, const char *to, int skip_weights) {
    static char dir[512];
    char path[1024];
    snprintf(dir, sizeof dir, "%s/%s", g_root, name);
    mkdir(dir, 0755);
    char *cfg = NULL;
    size_t n = 0;
    char src[600];
    snprintf(src, sizeof src, "%s/config.json", g_good);
    if (ft_file_read(src, &cfg, &n) != FT_OK) return dir;
    if (from) {
        char *at = strstr(cfg, from);
        if (at) {
            size_t pre = (size_t)(at - cfg), fl = strlen(from), tl = strlen(to);
            char *out = malloc(n - fl + tl + 1);
            memcpy(out, cfg, pre);
            memcpy(out + pre, to, tl);
            memcpy(out + pre + tl, at + fl, n - pre - fl + 1);
            free(cfg);
            cfg = out;
            n = strlen(cfg);
        }
    }
    write_file(ft_path_join(path, sizeof path, dir, "config.json"), cfg, n);
    free(cfg);
    if (!skip_weights) {
        struct ft_map m;
        snprintf(src, sizeof src, "%s/model.safetensors", g_good);
        if (ft_file_map(src, &m) == FT_OK) {
            write_file(ft_path_join(path, sizeof path, dir, "model.safetensors"), m.data, m.size);
            ft_file_unmap(&m);
        }
    }
    return dir;
}

/* Rewrites dir/model.safetensors from the good one, dropping `drop`, or giving `reshape` one
 * row fewer, or retyping `retype` as I16 (same bytes). */
static void rewrite(const char *dir, const char *drop, const char *reshape, const char *retype) {
    struct ft_st_file *f;
    char src[600];
    snprintf(src, sizeof src, "%s/model.safetensors", g_good);
    if (ft_st_open(src, &f) != FT_OK) return;
    int n = ft_st_count(f), k = 0;
    struct ft_st_out *out = calloc((size_t)n, sizeof *out);
    for (int i = 0; i < n; i++) {
        const struct ft_st_tensor *t = ft_st_at(f, i);
        if (drop && !strcmp(t->name, drop)) continue;
        struct ft_st_out *o = &out[k++];
        o->name = t->name;
        o->dtype = t->dtype;
        o->n_dims = t->n_dims;
        memcpy(o->shape, t->shape, sizeof o->shape);
        o->data = t->data;
        if (reshape && !strcmp(t->name, reshape)) o->shape[0]--;
        if (retype && !strcmp(t->name, retype)) o->dtype = FT_DTYPE_I16;
    }
    char path[1024];
    ft_st_write(ft_path_join(path, sizeof path, dir, "model.safetensors"), out, k);
    free(out);
    ft_st_close(f);
}

/* Runs `ft logits` on dir: expects exit 2 and a single stderr line containing each needle. */
static void expect_cli_error(const char *dir, const char *needle1, const char *needle2) {
    char cmd[2048], errpath[600];
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", g_root);
    snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --ids 5,6,7 --out '%s/out.st' -t 1 2>'%s'",
             FT_BIN, dir, g_root, errpath);
    int rc = system(cmd);
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    char *err = NULL;
    size_t n = 0;
    ft_file_read(errpath, &err, &n);
    int lines = 0;
    for (size_t i = 0; err && i < n; i++) lines += err[i] == '\n';
    EXPECT_EQ(lines, 1);
    EXPECT(err && strncmp(err, "ft: ", 4) == 0);
    EXPECT_CONTAINS(err, needle1);
    if (needle2) EXPECT_CONTAINS(err, needle2);
    free(err);
}

static void expect_load_error(const char *dir, enum ft_status want, const char *needle) {
    struct ft_model *m = NULL;
    enum ft_status st = ft_model_load(dir, &m);
    EXPECT_EQ(st, want);
    EXPECT(m == NULL);
    EXPECT_CONTAINS(ft_error(), needle);
    ft_model_free(m);
}

TEST(missing_config) {
    const char *d = make_dir("noconfig", NULL, NULL, 0);
    char path[1024];
    unlink(ft_path_join(path, sizeof path, d, "config.json"));
    expect_load_error(d, FT_ERR_IO, "config.json");
    expect_cli_error(d, "config.json", NULL);
}

TEST(unknown_architecture) {
    const char *d = make_dir("arch", "Qwen3MoeForCausalLM", "FooBarForCausalLM", 0);
    expect_load_error(d, FT_ERR_UNSUPPORTED, "FooBarForCausalLM");
    EXPECT_CONTAINS(ft_error(), "MixtralForCausalLM"); /* lists what is supported */
    expect_cli_error(d, "FooBarForCausalLM", "supported");
}

TEST(invalid_json) {
    const char *d = make_dir("json", "\"hidden_size\": 42,", "\"hidden_size\": 42,,", 0);
    expect_load_error(d, FT_ERR_FORMAT, "config.json");
    expect_cli_error(d, "config.json", NULL);
}

/* fields valid alone whose product overflows an int: refused before anything is sized */
TEST(config_products_overflow) {
    const char *d = make_dir("overflow", "\"head_dim\": 24", "\"head_dim\": 1431655766", 0);
    expect_load_error(d, FT_ERR_FORMAT, "head_dim");
    expect_cli_error(d, "must be below 2^31", "config.json");
}

TEST(config_disagrees_with_weights) {
    const char *d = make_dir("hidden", "\"hidden_size\": 42,", "\"hidden_size\": 48,", 0);
    expect_load_error(d, FT_ERR_FORMAT, "model.embed_tokens.weight");
    expect_cli_error(d, "model.embed_tokens.weight", "config.json");
}

TEST(missing_tensor) {
    const char *d = make_dir("missing", NULL, NULL, 0);
    rewrite(d, "model.layers.1.self_attn.k_proj.weight", NULL, NULL);
    expect_load_error(d, FT_ERR_FORMAT, "model.layers.1.self_attn.k_proj.weight");
    expect_cli_error(d, "model.layers.1.self_attn.k_proj.weight", "missing");
    d = make_dir("missing_expert", NULL, NULL, 0);
    rewrite(d, "model.layers.2.mlp.experts.6.down_proj.weight", NULL, NULL);
    expect_load_error(d, FT_ERR_FORMAT, "model.layers.2.mlp.experts.6.down_proj.weight");
}

TEST(misshaped_tensor) {
    const char *d = make_dir("shape", NULL, NULL, 0);
    rewrite(d, NULL, "model.layers.0.self_attn.q_proj.weight", NULL);
    expect_load_error(d, FT_ERR_FORMAT, "model.layers.0.self_attn.q_proj.weight");
    EXPECT_CONTAINS(ft_error(), "[143, 42]");
    expect_cli_error(d, "q_proj.weight", "expected [144, 42]");
}

TEST(unsupported_dtype) {
    const char *d = make_dir("dtype", NULL, NULL, 0);
    rewrite(d, NULL, NULL, "model.layers.0.mlp.experts.3.up_proj.weight");
    expect_load_error(d, FT_ERR_UNSUPPORTED, "I16");
    EXPECT_CONTAINS(ft_error(), "model.layers.0.mlp.experts.3.up_proj.weight");
    d = make_dir("dtype2", NULL, NULL, 0);
    rewrite(d, NULL, NULL, "model.layers.1.self_attn.o_proj.weight");
    expect_cli_error(d, "o_proj.weight", "I16");
}

TEST(truncated_weights) {
    const char *d = make_dir("trunc", NULL, NULL, 1);
    struct ft_map m;
    char path[1024];
    EXPECT_OK(ft_file_map(GOOD "/model.safetensors", &m));
    write_file(ft_path_join(path, sizeof path, d, "model.safetensors"), m.data, m.size / 2);
    expect_load_error(d, FT_ERR_FORMAT, "model.safetensors");
    expect_cli_error(d, "model.safetensors", NULL);
    /* header length pointing past the end of the file */
    uint8_t hdr[16] = {0xff, 0xff, 0xff, 0x00, 0, 0, 0, 0, '{', '}'};
    write_file(path, hdr, 10);
    expect_cli_error(d, "model.safetensors", "header");
    ft_file_unmap(&m);
}

TEST(no_weights_file) {
    const char *d = make_dir("noweights", NULL, NULL, 1);
    expect_load_error(d, FT_ERR_IO, "model.safetensors");
}

/* --- GGUF files: variants of a good fixture with bytes replaced (same length) or cut off --- */

static const char *gguf_variant(const char *name, const char *src, const char *from,
                                const char *to, size_t keep) {
    static char path[600];
    char in[600];
    snprintf(in, sizeof in, "%s/gguf/models/%s.gguf", FT_TEST_DATA, src);
    snprintf(path, sizeof path, "%s/%s.gguf", g_root, name);
    struct ft_map m;
    if (ft_file_map(in, &m) != FT_OK) return path;
    unsigned char *b = malloc(m.size);
    memcpy(b, m.data, m.size);
    size_t fl = from ? strlen(from) : 0;
    for (size_t i = 0; from && i + fl <= m.size; i++)
        if (memcmp(b + i, from, fl) == 0) memcpy(b + i, to, fl);
    write_file(path, b, keep && keep < m.size ? keep : m.size);
    free(b);
    ft_file_unmap(&m);
    return path;
}

TEST(gguf_truncated) {
    const char *p = gguf_variant("cut", "qwen2_q4km", NULL, NULL, 300000);
    expect_load_error(p, FT_ERR_FORMAT, "cut.gguf");
    expect_cli_error(p, "cut.gguf", NULL);
}

TEST(gguf_unsupported_arch) {
    const char *p = gguf_variant("gemma", "qwen2_q4km", "qwen2", "gemm9", 0);
    expect_load_error(p, FT_ERR_UNSUPPORTED, "'gemm9'");
    EXPECT_CONTAINS(ft_error(), "qwen3moe"); /* lists what is supported */
    expect_cli_error(p, "gemm9", "supported");
}

TEST(gguf_unknown_tensor) {
    const char *p = gguf_variant("extra", "qwen2_q4km", "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight", 0);
    expect_load_error(p, FT_ERR_UNSUPPORTED, "blk.1.ffn_uq.weight");
}

/* a tensor with a name but no reader: without its metadata key the shared expert is not built,
 * and computing without it would be silently wrong */
TEST(gguf_unread_tensor) {
    const char *p = gguf_variant("noshared", "qwen2moe_q8", "expert_shared_feed_forward_length",
                                 "expert_shared_feed_forward_lengtX", 0);
    expect_load_error(p, FT_ERR_UNSUPPORTED, "shared_expert");
    EXPECT_CONTAINS(ft_error(), "no reader");
}

TEST(gguf_missing_experts) {
    const char *p = gguf_variant("noexp", "qwen3moe_q4km", "blk.1.ffn_down_exps", "blk.1.ffn_down_expz", 0);
    expect_load_error(p, FT_ERR_UNSUPPORTED, "blk.1.ffn_down_expz");
}

TEST(gguf_missing_metadata) {
    const char *p = gguf_variant("nolayers", "llama_q40", "llama.block_count", "llama.block_cnt__", 0);
    expect_load_error(p, FT_ERR_FORMAT, "llama.block_count");
}

/* deepseek2 / glm4moe / minimax-m2 (tools/gen_gguf_mla.py): a missing MLA key, half of the
 * split kv_b, a missing gating function (a DeepSeek-V2-style softmax file), a missing shared-
 * expert count (its tensors then have no reader), half of the MLA widths: each one line naming
 * the key or tensor, exit 2 */
TEST(gguf_mla_bad_inputs) {
    const char *p = gguf_variant("nolora", "deepseek2_bf16", "deepseek2.attention.kv_lora_rank",
                                 "deepseek2.attention.kv_lora_ranX", 0);
    expect_load_error(p, FT_ERR_FORMAT, "'deepseek2.attention.kv_lora_rank' is missing");
    expect_cli_error(p, "deepseek2.attention.kv_lora_rank", "missing");
    p = gguf_variant("novb", "deepseek2_bf16", "blk.2.attn_v_b.weight", "blk.2.attn_v_c.weight", 0);
    expect_load_error(p, FT_ERR_FORMAT, "tensor 'blk.2.attn_v_b.weight' is missing");
    expect_cli_error(p, "blk.2.attn_v_b.weight", "attn_k_b");
    p = gguf_variant("softmax", "deepseek2_q8", "deepseek2.expert_gating_func",
                     "deepseek2.expert_gating_fuXc", 0);
    expect_load_error(p, FT_ERR_UNSUPPORTED, "deepseek2.expert_gating_func = 1 (softmax)");
    expect_cli_error(p, "expert_gating_func", "sigmoid");
    p = gguf_variant("noshexp", "glm4moe_bf16", "glm4moe.expert_shared_count",
                     "glm4moe.expert_shared_counX", 0);
    expect_load_error(p, FT_ERR_UNSUPPORTED, "mlp.shared_experts.");
    EXPECT_CONTAINS(ft_error(), "no reader");
    p = gguf_variant("nokmla", "deepseek2_noq_bf16", "deepseek2.attention.key_length_mla",
                     "deepseek2.attention.key_length_mlX", 0);
    expect_load_error(p, FT_ERR_FORMAT, "'deepseek2.attention.key_length_mla' is missing");
    p = gguf_variant("nokn", "minimax_m2_q8", "blk.1.attn_k_norm.weight", "blk.1.attn_k_nrrm.weight", 0);
    expect_load_error(p, FT_ERR_UNSUPPORTED, "blk.1.attn_k_nrrm.weight");
    expect_cli_error(p, "blk.1.attn_k_nrrm.weight", NULL);
}

/* gguf-split shards: a later shard names the first; a missing shard names its file */
TEST(gguf_split_shards) {
    char dir[600], cmd[2048], p[700];
    snprintf(dir, sizeof dir, "%s/split", g_root);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/gguf/models/qwen2_q4km_split/'*.gguf '%s/'", dir,
             FT_TEST_DATA, dir);
    EXPECT(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/qwen2_q4km-00002-of-00003.gguf", dir);
    expect_load_error(p, FT_ERR_INVALID_ARG, "open the first one");
    unlink(p);
    snprintf(p, sizeof p, "%s/qwen2_q4km-00001-of-00003.gguf", dir);
    expect_load_error(p, FT_ERR_IO, "qwen2_q4km-00002-of-00003.gguf");
    expect_cli_error(p, "00002-of-00003", NULL);
}

TEST(gguf_two_files_in_a_directory) {
    char dir[600], cmd[2048];
    snprintf(dir, sizeof dir, "%s/twogguf", g_root);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/gguf/models/qwen2_q4km.gguf' '%s/a.gguf' && "
             "cp '%s/gguf/models/llama_q40.gguf' '%s/b.gguf'", dir, FT_TEST_DATA, dir, FT_TEST_DATA, dir);
    EXPECT(system(cmd) == 0);
    expect_load_error(dir, FT_ERR_INVALID_ARG, "2 .gguf files");
    EXPECT_CONTAINS(ft_error(), "--model");
}

/* Gemma 3 runs on the CPU only for now: an explicit GPU backend is a one-line error that says
 * so, and --backend auto falls back to the CPU. */
/* The model in dir has no CUDA path: cuda and offload refuse it with one line naming the
 * architecture and --backend cpu, and --backend auto runs it on the CPU. */
static void expect_gpu_refused(const char *dir, const char *arch) {
    struct ft_model *m = NULL;
    struct ft_pool *pool = NULL;
    EXPECT_OK(ft_model_load(dir, &m));
    EXPECT_OK(ft_pool_init(&pool, 1));
    if (!m || !pool) goto done;
    struct ft_engine_opts o = {.max_ctx = 32, .max_chunk = 32};
    struct ft_engine *e = NULL;
    for (int b = 0; b < 2; b++) {
        o.backend = b ? FT_BACKEND_OFFLOAD : FT_BACKEND_CUDA;
        EXPECT_EQ(ft_engine_init(&e, m, pool, &o), FT_ERR_UNSUPPORTED);
        EXPECT(e == NULL);
        EXPECT_CONTAINS(ft_error(), "--backend cpu");
        EXPECT_CONTAINS(ft_error(), arch);
    }
    o.backend = FT_BACKEND_CUDA, o.backend_auto = 1;
    EXPECT_OK(ft_engine_init(&e, m, pool, &o));
    if (e) EXPECT_STREQ(ft_engine_backend(e), "cpu");
    ft_engine_free(e);
done:
    ft_pool_free(pool);
    ft_model_free(m);
}

TEST(gemma3_refused_by_gpu_backends) {
    expect_gpu_refused(FT_TEST_DATA "/models/gemma3", "Gemma3ForCausalLM");
}

/* Hybrid (Gated DeltaNet) checkpoints: an unknown layer_types entry, a missing DeltaNet
 * tensor and value heads that are no multiple of the key heads each give one line naming the
 * field or tensor, exit 2; a GPU backend asked for explicitly says to use --backend cpu. */
TEST(hybrid_bad_input) {
    g_good = FT_TEST_DATA "/models/qwen3_5_moe";
    const char *d = make_dir("hyb_types", "\"linear_attention\"", "\"mamba\"", 0);
    expect_load_error(d, FT_ERR_FORMAT, "layer_types[0]");
    expect_cli_error(d, "layer_types[0]", "linear_attention");
    d = make_dir("hyb_missing", NULL, NULL, 0);
    rewrite(d, "model.layers.1.linear_attn.A_log", NULL, NULL);
    expect_load_error(d, FT_ERR_FORMAT, "model.layers.1.linear_attn.A_log");
    expect_cli_error(d, "model.layers.1.linear_attn.A_log", "missing");
    d = make_dir("hyb_heads", "\"linear_num_value_heads\": 4", "\"linear_num_value_heads\": 3", 0);
    expect_load_error(d, FT_ERR_FORMAT, "linear_num_value_heads");
    expect_cli_error(d, "linear_num_value_heads 3", "linear_num_key_heads 2");
    g_good = FT_TEST_DATA "/models/qwen3_5_moe_vl"; /* the wrapper names its tensors in full */
    d = make_dir("hyb_vl_missing", NULL, NULL, 0);
    rewrite(d, "model.language_model.layers.0.linear_attn.conv1d.weight", NULL, NULL);
    expect_cli_error(d, "model.language_model.layers.0.linear_attn.conv1d.weight", "missing");
    g_good = GOOD;
}

/* MLA / sigmoid-router checkpoints: kv_lora_rank missing, a group count that does not divide the
 * experts, a missing latent-attention tensor: one line naming the field or tensor, exit 2. */
TEST(mla_bad_input) {
    g_good = FT_TEST_DATA "/models/deepseek_v3";
    const char *d = make_dir("mla_nolora", "\"kv_lora_rank\": 32", "\"kv_lora_rank_x\": 32", 0);
    expect_load_error(d, FT_ERR_FORMAT, "kv_lora_rank");
    expect_cli_error(d, "kv_lora_rank", "config.json");
    d = make_dir("mla_groups", "\"n_group\": 4", "\"n_group\": 3", 0);
    expect_load_error(d, FT_ERR_FORMAT, "n_group");
    expect_cli_error(d, "'n_group' (3) does not divide the 8 experts", NULL);
    d = make_dir("mla_missing", NULL, NULL, 0);
    rewrite(d, "model.layers.2.self_attn.kv_b_proj.weight", NULL, NULL);
    expect_cli_error(d, "model.layers.2.self_attn.kv_b_proj.weight", "missing");
    /* an FP8 block checkpoint's scale tensor of the wrong shape (DeepSeek's weight_scale_inv) */
    g_good = FT_TEST_DATA "/models/qwen3_moe_fp8";
    d = make_dir("fp8_scale", NULL, NULL, 0);
    rewrite(d, NULL, "model.layers.0.mlp.experts.0.down_proj.weight_scale_inv", NULL);
    expect_cli_error(d, "model.layers.0.mlp.experts.0.down_proj.weight_scale_inv", "[1, 1]");
    g_good = GOOD;
}

/* GLM-5 (DSA) checkpoints: index_topk missing, an indexer tensor missing, a first layer that
 * would reuse a choice no layer made: one line naming the field or tensor, exit 2. The GPU
 * backends (no CUDA indexer yet) refuse it with one line naming --backend cpu; auto runs it on
 * the CPU. */
TEST(dsa_bad_input) {
    g_good = FT_TEST_DATA "/models/glm_moe_dsa";
    const char *d = make_dir("dsa_notopk", "\"index_topk\": 6", "\"index_topk_x\": 6", 0);
    expect_load_error(d, FT_ERR_FORMAT, "'index_topk' is missing");
    expect_cli_error(d, "'index_topk' is missing", "config.json");
    d = make_dir("dsa_noheads", "\"index_n_heads\": 8", "\"index_n_headz\": 8", 0);
    expect_cli_error(d, "'index_n_heads' is missing", NULL);
    d = make_dir("dsa_missing", NULL, NULL, 0);
    rewrite(d, "model.layers.1.self_attn.indexer.wk.weight", NULL, NULL);
    expect_load_error(d, FT_ERR_FORMAT, "model.layers.1.self_attn.indexer.wk.weight");
    expect_cli_error(d, "model.layers.1.self_attn.indexer.wk.weight", "missing");
    d = make_dir("dsa_norm", NULL, NULL, 0);
    rewrite(d, "model.layers.3.self_attn.indexer.k_norm.bias", NULL, NULL);
    expect_cli_error(d, "model.layers.3.self_attn.indexer.k_norm.bias", "missing");
    d = make_dir("dsa_shared0", "\"indexer_types\": [\n    \"full\"", "\"indexer_types\": [\n    \"shared\"", 0);
    expect_cli_error(d, "layer 0's indexer is \"shared\"", "indexer_types");
    g_good = GOOD; /* (the GPU backends run it: test_gpu_model glm_moe_dsa_through_cuda_and_offload) */
}

/* DeepSeek-V4 checkpoints: an unknown layer type, a layer type of another arch, a missing
 * compressor / hash-table tensor, a second K=V head, output groups that do not divide the heads:
 * one line naming the field or tensor, exit 2. The GPU backends refuse it naming --backend cpu;
 * auto runs it on the CPU. */
TEST(v4_bad_input) {
    g_good = FT_TEST_DATA "/models/deepseek_v4";
    const char *d = make_dir("v4_type", "\"sliding_attention\",", "\"windowed_attention\",", 0);
    expect_load_error(d, FT_ERR_FORMAT, "layer_types[0]");
    expect_cli_error(d, "layer_types[0]", "compressed_sparse_attention");
    d = make_dir("v4_full", "\"sliding_attention\",", "\"full_attention\",", 0);
    expect_cli_error(d, "layer_types[0]", "not a DeepSeek-V4 layer type");
    d = make_dir("v4_mlp", "\"hash_moe\",", "\"hash_mlp\",", 0);
    expect_cli_error(d, "mlp_layer_types[0]", "hash_moe");
    d = make_dir("v4_missing", NULL, NULL, 0);
    rewrite(d, "model.layers.1.attn.compressor.wkv.weight", NULL, NULL);
    expect_load_error(d, FT_ERR_FORMAT, "model.layers.1.self_attn.compressor.kv_proj.weight");
    expect_cli_error(d, "model.layers.1.attn.compressor.wkv.weight", "missing");
    d = make_dir("v4_hash", NULL, NULL, 0);
    rewrite(d, "model.layers.0.ffn.gate.tid2eid", NULL, NULL);
    expect_cli_error(d, "model.layers.0.mlp.gate.tid2eid", "missing");
    d = make_dir("v4_kv", "\"num_key_value_heads\": 1", "\"num_key_value_heads\": 2", 0);
    expect_cli_error(d, "num_key_value_heads is 2", "one shared K=V head");
    d = make_dir("v4_groups", "\"o_groups\": 2", "\"o_groups\": 3", 0);
    expect_cli_error(d, "o_groups 3", "num_attention_heads");
    d = make_dir("v4_shape", NULL, NULL, 0);
    rewrite(d, NULL, "model.layers.2.attn.compressor.ape", NULL);
    expect_cli_error(d, "model.layers.2.attn.compressor.ape", "expected [8, 24]");
    g_good = GOOD;
    expect_gpu_refused(FT_TEST_DATA "/models/deepseek_v4", "DeepseekV4ForCausalLM");
}

/* DeepSeek-V2's router: a topk_method the engine does not know is one line naming the field,
 * exit 2 (its group-limited, scaled softmax runs on every backend: test_gpu_model). */
TEST(deepseek_v2_unknown_topk_method) {
    g_good = FT_TEST_DATA "/models/deepseek_v2";
    const char *d = make_dir("dsv2_method", "\"group_limited_greedy\"", "\"top_p_greedy\"", 0);
    expect_cli_error(d, "topk_method", "greedy");
    g_good = GOOD;
}

TEST(bad_flags) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --ids 1,x,3 --out /dev/null 2>/dev/null",
             FT_BIN, GOOD);
    int rc = system(cmd);
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --ids 999999 -n 2 2>/dev/null", FT_BIN, GOOD);
    rc = system(cmd);
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    snprintf(cmd, sizeof cmd, "'%s' bench --model '%s' --synthetic tiny 2>/dev/null", FT_BIN, GOOD);
    rc = system(cmd);
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    /* malformed numbers are refused, not read as 0 */
    snprintf(cmd, sizeof cmd, "'%s' bench --synthetic tiny --synthetic-routing sticky:abc 2>/dev/null", FT_BIN);
    rc = system(cmd);
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    snprintf(cmd, sizeof cmd, "'%s' ctl --temp x generate hi 2>/dev/null", FT_BIN);
    rc = system(cmd);
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    snprintf(cmd, sizeof cmd, "'%s' frobnicate 2>/dev/null", FT_BIN);
    rc = system(cmd);
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    /* this session's flags: a bad value is exit 2 with a line naming the flag and the choices */
    static const char *const bad[][2] = {
        {"run --model '%s' -p hi --cpu-act int4", "--cpu-act: 'int4' is not fast or f32"},
        {"run --model '%s' -p hi --moe-cpu-threads 0", "--moe-cpu-threads: '0' is not a number"},
        {"bench bw --format q3_k%.0s", "unknown expert format 'q3_k'"},
        {"bench bw --cpu-act x%.0s", "--cpu-act: 'x' is not fast or f32"},
        {"bench --synthetic tiny -b 0%.0s", "-b: '0' is not a number in [1, 65536]"},
        {"bench --synthetic tiny --batch 99999999%.0s", "--batch: '99999999' is not a number in [1, 65536]"},
        {"bench --synthetic tiny --moe-cache-policy mru%.0s", "--moe-cache-policy: 'mru' is not lru, lfru or slru"},
        {"bench --synthetic tiny --backend cpu --record-routing /dev/null%.0s",
         "--record-routing: the cpu backend has no expert cache to record (use --backend offload)"},
        {"bench --synthetic tiny --pin-budget probe:lots%.0s", "--pin-budget: 'probe:lots' is not a size"},
        {"serve --model '%s' --max-connections x", "--max-connections: 'x' is not a number in [8, 16384]"},
        {"serve --model '%s' --max-connections 4", "--max-connections: '4' is not a number in [8, 16384]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[256], err[512] = "";
        snprintf(args, sizeof args, bad[i][0], GOOD);
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1 >/dev/null", FT_BIN, args);
        FILE *f = popen(cmd, "r");
        size_t got = f ? fread(err, 1, sizeof err - 1, f) : 0;
        err[got] = 0;
        rc = f ? pclose(f) : -1;
        CHECK_(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "ft %s: exit %d, want 2", args,
               WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
        EXPECT_CONTAINS(err, bad[i][1]);
    }
}

int main(int argc, char **argv) {
    snprintf(g_root, sizeof g_root, "/tmp/ft_badinput_XXXXXX");
    if (!mkdtemp(g_root)) return 1;
    int rc = test_run("model_badinput", argc, argv);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) rc = 1;
    return rc;
}
