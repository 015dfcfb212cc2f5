#!/usr/bin/env python3
"""Builds the tiny random-weight reference checkpoints under tests/data/models/.

For each supported architecture: a transformers model with awkward sizes (hidden 42, not a multiple
of 32; head_dim 24; GQA ratio 3; 7 experts; top-k 3; a dense layer among MoE layers), weights drawn
with a std large enough that the logits spread (std near 1), rounded to bf16 and saved as a bf16
checkpoint. The reference is transformers itself in fp32 (eager attention) on those exact bf16
values: `reference.safetensors` holds `ids` [24] (the prompt), `logits` [24, vocab] f32
(teacher-forced) and `greedy` [12] (transformers' greedy continuation).

The `*_n08` fixtures (issue 25, exact path precision) are drawn another way: every matrix
(routers and embeddings too) N(0, 0.08), every norm weight (q/k norms too) U(0.8, 1.2), the final
norm left as drawn (logits of sd ~0.5). Their reference also holds `logits64` (transformers in
float64 on the same bf16 values, stored as f32: what an exact engine converges to) and
`router_gap` [layers, 24] (top-k-th minus next router logit per MoE layer and prompt position in
float64, -1 on dense layers: where rounding the activations, as the GPU prefill does, can pick
another expert).

The hybrid linear-attention fixtures (HYBRID: qwen3_5_moe, qwen3_5_moe_vl, qwen3_next, qwen3_5)
have 4 layers, Gated DeltaNet ("linear_attention") layers around one full-attention layer (gated
q_proj, partial RoPE 0.25), GDN GQA (2 key heads, 4 or 6 value heads, key head dim 16, value head
dim 12, conv kernel 4). Their (1 + w) RMSNorms are drawn around 0, the GDN's gated RMSNorm (plain
w) around 1, A_log = log U(1, 16), dt_bias N(-2.5, 0.5) (decays exp(g) spread over (0, 1), not
all ~0 as with the model's own dt_bias = 1), embeddings N(0, 1). They are built with the torch
GDN path (no fla / causal-conv1d / kernels package may be importable) and the build checks that
transformers' token-by-token cached path (conv state + recurrent delta rule) reproduces the
teacher-forced (chunked) logits, and that the saved checkpoint reloads to the same logits.
qwen3_5_moe_vl is Qwen3_5MoeForConditionalGeneration with a tiny vision tower, saved in the
published layout (model.language_model.*, model.visual.*, lm_head.*; routed experts fused as
mlp.experts.gate_up_proj [E, 2I, H] / mlp.experts.down_proj [E, H, I], as Qwen/Qwen3.5-*-A*B store
them; transformers' save_pretrained would split them per expert); its reference is text-only.
The others are saved as save_pretrained writes them (model.*, per-expert experts.N.*_proj.weight).
Each hybrid fixture also gets qwen3_moe's tokenizer.json, tokenizer_config.json and
generation_config.json.

The sigmoid-routed MoE fixtures (SIGMOID_MOE: deepseek_v3, deepseek_v3_noqlora, glm4_moe,
glm4_moe_qknorm, glm4_moe_lite, minimax_m2) have 4 layers and 8 routed experts whose router adds
e_score_correction_bias (a buffer: drawn U(-0.3, 0.3), bf16 values, saved as f32 as the published
checkpoints store it) to the sigmoid scores. DeepSeek-V3 / GLM-4.7-Flash (Glm4MoeLite): MLA (4
heads, kv_lora_rank 32, q_lora_rank 24 or none, qk_nope 16, qk_rope 8, v_head_dim 12,
interleaved RoPE), one dense layer then MoE layers with a shared expert, group-limited routing (4
groups, 2 kept), routed_scaling_factor 2.5; deepseek_v3_noqlora has DeepSeek-V3's YaRN (factor 40,
mscale = mscale_all_dim = 1: softmax scale x1.874). GLM-4.5 (Glm4Moe): GQA with q/k/v biases,
partial RoPE 0.5, qk norm in glm4_moe_qknorm (which also has 2 groups, 1 kept). MiniMax-M2: every
layer MoE (no shared expert), q/k RMSNorm over all heads, partial RoPE (rotary_dim 12 of 24). All
are saved as save_pretrained writes them, the published layouts (per-expert
mlp.experts.N.{gate,up,down}_proj.weight; MiniMax-M2 block_sparse_moe.experts.N.w1/w2/w3.weight).
The build checks cached decode against teacher-forced logits, the saved checkpoint reloading, and
that the group-limited choice differs from plain top-k for some token-layer pairs; it copies
qwen3_moe's tokenizer files, and text_reference.json comes from
`python3 tools/gen_text_refs.py tests/data/models/NAME`, as for the hybrid fixtures.

The DeepSeek-V4 fixtures (V4: deepseek_v4, deepseek_v4_fused; build_v4) have 4 layers, one of
each kind and a second CSA one (sliding_attention, compressed_sparse_attention,
heavily_compressed_attention, compressed_sparse_attention: window 6, compress rates 4 and 8), the
shared K=V head of 24 (6 dims rotated; the compressed layers' RoPE with YaRN, factor 4), q LoRA 20,
2 output groups of rank 12, 3 hyper-connection streams, the indexer with 8 heads of 12 keeping
index_topk 3 entries, 8 experts top-3 (the first layer hash-routed by tid2eid, the others
sqrtsoftplus + e_score_correction_bias) with a shared expert, swiglu_limit 1 (the clamps bite).
The prompt is 40 tokens (T_PROMPT_V4): past the window, 10 CSA entries (the indexer drops 7 of
them for the last queries) and 5 HCA ones. Matrices N(0, 1/fan_in) (routers x3), embeddings
N(0, 1), norms 1 + 0.1 N(0, 1), sinks N(0, 0.5), position biases 0.5 N(0, 1), the
hyper-connections' base 0.5 N(0, 1), scales 1 + 0.1 N(0, 1); tid2eid distinct random experts per
token. deepseek_v4 is saved as save_pretrained writes it (transformers' conversion reverted:
model.layers.N.attn.wq_a.weight, ffn.experts.E.w1.weight, head.weight ...); deepseek_v4_fused (the
same weights and reference) with the in-memory names (self_attn.q_a_proj, mlp.experts.gate_up_proj
[E, 2I, H]). The build checks token-by-token cached decode and chunks of 5 against teacher-forced
logits, the reload, and the margins the choices depend on in float64 (indexer top-k-th minus next
score >= 1e-3, router k-th minus next biased score >= 2e-3, greedy top-1 margin >= 0.05), and
that the indexer's choice moves the logits (|index_topk 3 - keep all| > 1e-2).

Run where torch and transformers are installed (the GPU machine, or any machine with them):
    python3 tools/gen_fixtures.py [OUT_DIR] [--only NAME ...]   (default tests/data/models)
"""
import importlib.util
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

from fixture_util import greedy_gap

ARGS = sys.argv[1:sys.argv.index("--only")] if "--only" in sys.argv else sys.argv[1:]
ONLY = sys.argv[sys.argv.index("--only") + 1:] if "--only" in sys.argv else None
OUT = ARGS[0] if ARGS else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models")
T_PROMPT, N_GREEDY, VOCAB = 24, 12, 384

COMMON = dict(vocab_size=VOCAB, hidden_size=42, num_hidden_layers=3, num_attention_heads=6,
              num_key_value_heads=2, head_dim=24, intermediate_size=56, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
MOE = dict(num_experts_per_tok=3, moe_intermediate_size=20)
# the hybrid GDN fixtures: 4 layers, GDN with GQA (2 key heads; 4 or 6 value heads), key head dim
# 16, value head dim 12; attention 6 heads / 2 KV heads, head_dim 24, partial RoPE 0.25 (6 dims)
HYBRID_COMMON = dict(vocab_size=VOCAB, hidden_size=42, num_hidden_layers=4, num_attention_heads=6,
                     num_key_value_heads=2, head_dim=24, max_position_embeddings=256,
                     rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                     linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                     linear_value_head_dim=12, linear_conv_kernel_dim=4,
                     layer_types=["linear_attention"] * 3 + ["full_attention"])
LAYERS_B = dict(layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"])
# Qwen3.5-MoE: every layer MoE with a shared expert, top-k always renormalised (no norm_topk_prob),
# the published RoPE (theta 1e7, interleaved MRoPE; text-only positions make it plain RoPE)
Q35_MOE = dict(MOE, num_experts=7, shared_expert_intermediate_size=28,
               rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                "partial_rotary_factor": 0.25, "mrope_interleaved": True,
                                "mrope_section": [1, 1, 1]})
# DeepSeek-V3 / GLM-4.7-Flash MLA (4 heads; v_head_dim 12 != qk_nope_head_dim 16 on purpose) and
# MoE (8 experts in 4 groups, 2 groups kept, a shared expert, one dense layer first); head_dim
# None: removed from COMMON (the MLA configs derive it from qk_rope_head_dim)
MLA = dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, head_dim=None,
           kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, rope_interleave=True)
DSV3_MOE = dict(MOE, n_routed_experts=8, n_shared_experts=1, n_group=4, topk_group=2,
                routed_scaling_factor=2.5, first_k_dense_replace=1, num_mtp_layers=0)
DSV2_MOE = dict(MOE, n_routed_experts=8, n_shared_experts=1, first_k_dense_replace=1,
                hidden_size=44)  # its config wants hidden_size a multiple of the heads
# GLM-4.5: partial RoPE 0.5, q/k/v biases, 8 experts top-3 with a shared one, one group (as shipped)
GLM4_MOE = dict(MOE, num_hidden_layers=4, partial_rotary_factor=0.5, attention_bias=True,
                use_qk_norm=False, n_routed_experts=8, n_shared_experts=1, n_group=1, topk_group=1,
                routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
                num_mtp_layers=0, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
# GLM-5 (GlmMoeDsa): MLA (q LoRA; interleaved RoPE always) + the DSA lightning indexer (8 heads of
# 16, the first 8 dims rotated, LayerNorm'd key) keeping index_topk 6 of up to 35 positions (the
# prompt is 24: every query past the 6th drops tokens), one shared-top-k layer, GLM-4.7's MoE
GLM_DSA = dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, head_dim=None,
               kv_lora_rank=32, q_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8,
               v_head_dim=12, index_topk=6, index_n_heads=8, index_head_dim=16,
               indexer_types=["full", "full", "shared", "full"],
               mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
               **{k: v for k, v in DSV3_MOE.items() if k not in ("num_mtp_layers", "first_k_dense_replace")},
               num_nextn_predict_layers=0, norm_topk_prob=True,
               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})

# DeepSeek-V4 (build_v4): one layer of each kind, a second CSA one; see the docstring
T_PROMPT_V4 = 40
DSV4 = dict(vocab_size=VOCAB, hidden_size=42, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=1, head_dim=24, q_lora_rank=20, partial_rotary_factor=0.25,
            moe_intermediate_size=20, n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=1,
            layer_types=["sliding_attention", "compressed_sparse_attention",
                         "heavily_compressed_attention", "compressed_sparse_attention"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
            mlp_layer_types=["hash_moe", "moe", "moe", "moe"], sliding_window=6, o_groups=2,
            o_lora_rank=12, index_n_heads=8, index_head_dim=12, index_topk=3, hc_mult=3,
            swiglu_limit=1.0, num_nextn_predict_layers=1, max_position_embeddings=256,
            rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
            rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})

# name -> (config class, model class, extra config)
FIXTURES = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(MOE, num_experts=7, norm_topk_prob=True, mlp_only_layers=[1],
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen3_moe_nonorm": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                         dict(MOE, num_experts=5, norm_topk_prob=False, decoder_sparse_step=2,
                              rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(MOE, num_experts=7, norm_topk_prob=False, mlp_only_layers=[2],
                       shared_expert_intermediate_size=28,
                       rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                        "original_max_position_embeddings": 64})),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(num_experts_per_tok=3, num_local_experts=7, sliding_window=None,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(rope_parameters={"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 16})),
    "mistral": ("MistralConfig", "MistralForCausalLM",
                dict(sliding_window=8, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Gemma 3: (1 + w) norms, sqrt(H) embeddings, post-attention/-MLP norms, GELU-tanh, sliding
    # window and its own RoPE base on the sliding layers, linear RoPE scaling on the full ones
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(tie_word_embeddings=True, sliding_window=8, query_pre_attn_scalar=24,
                    num_hidden_layers=6,  # Gemma 3's pattern: five sliding layers, then a full one
                    layer_types=["sliding_attention"] * 5 + ["full_attention"],
                    rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                     "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                        "rope_theta": 1000000.0}})),
    # issue 25: exact-path precision (N(0, 0.08) matrices, U(0.8, 1.2) norms; N08 below)
    "qwen3_moe_n08": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                      dict(MOE, num_experts=7, norm_topk_prob=True, mlp_only_layers=[1],
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "mixtral_n08": ("MixtralConfig", "MixtralForCausalLM",  # Mixtral's own 8 experts, top-2
                    dict(num_experts_per_tok=2, num_local_experts=8, intermediate_size=28,
                         sliding_window=None,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # hybrid Gated DeltaNet / attention (HYBRID below): built from HYBRID_COMMON, not COMMON
    "qwen3_5_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(Q35_MOE)),
    "qwen3_5_moe_vl": ("Qwen3_5MoeConfig", "Qwen3_5MoeForConditionalGeneration",
                       dict(text_config=dict(HYBRID_COMMON, **Q35_MOE), vision_config=dict(
                           depth=1, hidden_size=16, num_heads=2, intermediate_size=32,
                           out_hidden_size=42, patch_size=2, temporal_patch_size=2,
                           spatial_merge_size=2, num_position_embeddings=16))),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM",
                   dict(MOE, **LAYERS_B, num_experts=7, shared_expert_intermediate_size=28,
                        norm_topk_prob=False, mlp_only_layers=[2], intermediate_size=56,
                        linear_num_value_heads=6,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                         "partial_rotary_factor": 0.25})),
    "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM",
                dict(LAYERS_B, intermediate_size=56, linear_num_value_heads=6,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                      "partial_rotary_factor": 0.25, "mrope_interleaved": True,
                                      "mrope_section": [1, 1, 1]})),
    # sigmoid-routed MoE with e_score_correction_bias (SIGMOID_MOE below): 4 layers, one dense first
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(MLA, **DSV3_MOE, q_lora_rank=24,
                    norm_topk_prob=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "deepseek_v3_noqlora": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(
        MLA, **dict(DSV3_MOE, num_experts_per_tok=2), q_lora_rank=None, norm_topk_prob=False,
        # DeepSeek-V3's YaRN (mscale = mscale_all_dim = 1: cos/sin unscaled, the softmax scale
        # times (0.1 ln(factor) + 1)^2 = 1.874), its factor 40, original context 64 here (4096
        # there; 64 puts the 4 rotary pairs at ramp 0, 0.5, 1, 1: one extrapolated, one blended)
        max_position_embeddings=2560,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "beta_fast": 32,
                         "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 64})),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(GLM4_MOE)),  # GLM-4.5: no groups
    "glm4_moe_qknorm": ("Glm4MoeConfig", "Glm4MoeForCausalLM",
                        dict(GLM4_MOE, use_qk_norm=True, num_experts_per_tok=2, n_group=2, topk_group=1)),
    # GLM-4.7-Flash: DeepSeek-V3's MLA + MoE, the dense/sparse pattern as mlp_layer_types
    "glm4_moe_lite": ("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM", dict(
        MLA, **{k: v for k, v in DSV3_MOE.items() if k != "num_mtp_layers"}, num_nextn_predict_layers=0,
        q_lora_rank=24, norm_topk_prob=True,
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "glm_moe_dsa": ("GlmMoeDsaConfig", "GlmMoeDsaForCausalLM", dict(GLM_DSA)),
    # DeepSeek-V2: V3's MLA with a softmax router: group_limited_greedy (4 groups ranked by their
    # best score, 2 kept), weights times routed_scaling_factor, never renormalised; V2-Lite: no
    # q LoRA, plain greedy top-2
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(
        MLA, **DSV2_MOE, q_lora_rank=24, topk_method="group_limited_greedy", n_group=4, topk_group=2,
        routed_scaling_factor=2.0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "deepseek_v2_lite": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(
        MLA, **dict(DSV2_MOE, num_experts_per_tok=2), q_lora_rank=None, topk_method="greedy",
        n_group=1, topk_group=1, routed_scaling_factor=1.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "deepseek_v4": ("DeepseekV4Config", "DeepseekV4ForCausalLM", dict(DSV4)),
    # MiniMax-M2: every layer MoE (no shared expert, experts of intermediate_size), sigmoid + bias
    # plain top-k (always renormalised), q/k RMSNorm over all heads at once, partial RoPE
    "minimax_m2": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM", dict(
        num_hidden_layers=4, intermediate_size=20, num_local_experts=8, num_experts_per_tok=3,
        # the published config's descriptive keys (transformers reads only rope_parameters)
        rotary_dim=12, use_qk_norm=True, qk_norm_type="per_layer", scoring_func="sigmoid",
        use_routing_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.5})),
}
N08 = {"qwen3_moe_n08", "mixtral_n08"}
HYBRID = {"qwen3_5_moe", "qwen3_5_moe_vl", "qwen3_next", "qwen3_5"}
SIGMOID_MOE = {"deepseek_v3", "deepseek_v3_noqlora", "glm4_moe", "glm4_moe_qknorm",
               "glm4_moe_lite", "minimax_m2", "glm_moe_dsa"}
MLA_SOFTMAX = {"deepseek_v2", "deepseek_v2_lite"}  # MLA with a softmax router: the plain checks
DSA = {"glm_moe_dsa"}  # the lightning indexer: its top-k margins are checked (dsa_selection)
V4 = {"deepseek_v4"}  # DeepSeek-V4: build_v4 (deepseek_v4_fused is written beside it)
FUSED_EXPERTS = {"qwen3_5_moe_vl"}  # saved with the published fused expert tensors
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
# seeds picked for top-1 margins of the greedy steps >= 0.04 (the hybrid and SIGMOID_MOE ones
# >= 0.05) and router gaps >= 2e-3 (1e-6 is the fp32 noise; for SIGMOID_MOE the k-th minus next
# biased sigmoid score among the kept groups, and the topk_group-th minus next group score, over
# prompt + greedy; for DSA also the indexers' top-k-th minus next score >= 1e-3); the default is
# 1234 + the fixture's index (qwen3_5_moe's default 1245 qualifies)
SEEDS = {"qwen3_moe_n08": 1281, "mixtral_n08": 1269,
         "qwen3_5_moe_vl": 1646, "qwen3_next": 1647, "qwen3_5": 1748,
         "deepseek_v3": 1260, "deepseek_v3_noqlora": 1334, "glm4_moe": 1258, "glm4_moe_qknorm": 1293,
         "glm4_moe_lite": 1286, "minimax_m2": 1364, "glm_moe_dsa": 1315, "deepseek_v4": 1236}


def init_weights(model, seed, plus_one_norms=False):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms: around 1 (Gemma's 1 + w too); biases: small
                base = 0.0 if "bias" in name or plus_one_norms else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                std = 1.0 / fan_in ** 0.5
                if "gate.weight" in name or "router" in name:
                    std *= 3.0  # spread router logits so top-k is not near ties
                if "embed" in name:
                    std = 1.0 / fan_in ** 0.5 if plus_one_norms else 1.0  # Gemma scales by sqrt(H)
                p.copy_(std * torch.randn(p.shape, generator=g))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def init_weights_n08(model, seed):
    """every matrix N(0, 0.08), every 1-D weight (all norms here) U(0.8, 1.2), rounded to bf16"""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                assert "norm" in name, name
                p.copy_(0.8 + 0.4 * torch.rand(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def init_weights_hybrid(model, seed):
    """the HYBRID fixtures: matrices N(0, 1/fan_in) (routers x3), token embeddings N(0, 1), the
    (1 + w) RMSNorms (input/post-attention, q/k, final) w ~ 0.1 N(0, 1), the GDN's gated RMSNorm
    (plain w) and LayerNorm weights ~ 1 + 0.1 N(0, 1), biases 0.1 N(0, 1); GDN A_log = log U(1, 16)
    (the model's own range, floor 1), dt_bias N(-2.5, 0.5); all rounded to bf16"""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mname, mod in model.named_modules():
            cls = type(mod).__name__
            for pname, p in mod.named_parameters(recurse=False):
                if pname == "A_log":
                    p.copy_((1.0 + 15.0 * torch.rand(p.shape, generator=g)).log())
                elif pname == "dt_bias":
                    p.copy_(-2.5 + 0.5 * torch.randn(p.shape, generator=g))
                elif cls.endswith("RMSNormGated"):  # w * rms(x) * silu(z)
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
                elif cls.endswith("RMSNorm"):  # (1 + w) * rms(x)
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
                elif p.dim() == 1:  # LayerNorm (vision) weights around 1, biases small
                    p.copy_((0.0 if pname == "bias" else 1.0) + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    if isinstance(mod, torch.nn.Embedding):
                        std = 0.5 if "visual" in mname else 1.0
                    else:  # conv weights [out, in/groups, *kernel]; experts [E, out, in]
                        conv = isinstance(mod, torch.nn.modules.conv._ConvNd)
                        std = 1.0 / (p[0].numel() if conv else p.shape[-1]) ** 0.5
                        if cls.endswith("TopKRouter"):
                            std *= 3.0  # spread router logits so top-k is not near ties
                    p.copy_(std * torch.randn(p.shape, generator=g))
                p.copy_(p.to(torch.bfloat16).to(torch.float32))


def init_score_bias(model, seed):
    """the SIGMOID_MOE routers' e_score_correction_bias (a buffer, zeros in the model, saved in the
    checkpoint): U(-0.3, 0.3), rounded to bf16 (it is stored as f32, as the published checkpoints
    do, and must read the same either way)"""
    g = torch.Generator().manual_seed(seed + 2000)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_((0.6 * torch.rand(b.shape, generator=g) - 0.3).to(torch.bfloat16).float())


def sigmoid_routers(model):
    """[(layer, router module, e_score_correction_bias)] of the SIGMOID_MOE models"""
    out = []
    for i, layer in enumerate(decoder_layers(model)):
        mlp = layer.mlp
        if hasattr(mlp, "gate") and hasattr(mlp, "experts"):
            bias = getattr(mlp.gate, "e_score_correction_bias", getattr(mlp, "e_score_correction_bias", None))
            out.append((i, mlp.gate, bias))
    return out


def router_selection(model, ids):
    """what the sigmoid + bias routers pick for ids [1, T], in float64: per MoE layer and position
    whether the group-limited top-k differs from plain top-k over all experts (both on
    sigmoid + e_score_correction_bias) and from top-k without the bias; the smallest margins the
    choice depends on (k-th minus (k+1)-th biased score among the kept groups' experts; the
    topk_group-th minus the next group score); and that the model's own indices are those"""
    c = model.config
    k, E = c.num_experts_per_tok, c.num_local_experts
    n_group, topk_group = getattr(c, "n_group", 1) or 1, getattr(c, "topk_group", 1) or 1
    st = dict(pairs=0, group_diff=0, bias_diff=0, kgap=float("inf"), ggap=float("inf"), mismatch=0)
    hooks = []
    for i, gate, bias in sigmoid_routers(model):
        def post(mod, args, out, bias=bias):
            x = args[0].reshape(-1, mod.weight.shape[1]).double()
            sc = torch.sigmoid(x @ mod.weight.double().T)
            sfc = sc + bias.double()
            plain = sfc.topk(k, -1).indices.sort(-1).values
            nob = sc.topk(k, -1).indices.sort(-1).values
            if n_group > 1:
                gs = sfc.view(-1, n_group, E // n_group).topk(2, -1).values.sum(-1)
                gtop = gs.topk(topk_group + 1, -1).values
                st["ggap"] = min(st["ggap"], float((gtop[:, topk_group - 1] - gtop[:, topk_group]).min()))
                keep = torch.zeros_like(gs).scatter_(1, gs.topk(topk_group, -1).indices, 1.0)
                keep = keep[:, :, None].expand(-1, -1, E // n_group).reshape(-1, E).bool()
                masked = sfc.masked_fill(~keep, float("-inf"))
            else:
                masked = sfc
            top = masked.topk(k + 1, -1)
            sel = top.indices[:, :k].sort(-1).values
            if (masked > float("-inf")).sum(-1).min() > k:
                st["kgap"] = min(st["kgap"], float((top.values[:, k - 1] - top.values[:, k]).min()))
            st["pairs"] += sel.shape[0]
            st["group_diff"] += int((sel != plain).any(-1).sum())
            st["bias_diff"] += int((sel != nob).any(-1).sum())
            st["mismatch"] += int((out[2].sort(-1).values != sel).any(-1).sum())
        hooks.append(gate.register_forward_hook(post))
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    return st


def dsa_selection(model, full):
    """the DSA indexers' choice on full [1, T] (no cache): per full-indexer layer and query with
    more causal positions than index_topk, the top-k-th minus the next index score in float64
    (ties there would leave the choice to torch.topk's unspecified order), and how many of those
    queries the model's own top-k set differs from the float64 one"""
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import apply_rotary_pos_emb_interleave
    F = torch.nn.functional
    st = dict(queries=0, gap=float("inf"), mismatch=0)
    hooks, want = [], {}

    def pre(mod, args, kwargs):
        x, qr, (cos, sin) = args[0].double(), args[1].double(), args[2]
        B, S, _ = x.shape
        H, D, R, k = mod.n_heads, mod.head_dim, mod.qk_rope_head_dim, mod.index_topk
        q = F.linear(qr, mod.wq_b.weight.double()).view(B, S, H, D)
        kk = F.layer_norm(F.linear(x, mod.wk.weight.double()), (D,), mod.k_norm.weight.double(),
                          mod.k_norm.bias.double(), mod.k_norm.eps)[:, :, None]
        qr_, kr_ = apply_rotary_pos_emb_interleave(q[..., :R], kk[..., :R], cos.double(), sin.double(),
                                                   unsqueeze_dim=2)
        q, kk = torch.cat([qr_, q[..., R:]], -1), torch.cat([kr_, kk[..., R:]], -1)[:, :, 0]
        sc = F.relu(torch.matmul(q, kk.transpose(-1, -2).unsqueeze(1)) * D ** -0.5)
        w = F.linear(x, mod.weights_proj.weight.double()) * H ** -0.5
        idx = torch.matmul(w.unsqueeze(-2), sc).squeeze(-2)[0]  # [S, T]
        idx = idx.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        want[id(mod)] = idx

    def post(mod, args, kwargs, out):
        idx, k = want[id(mod)], mod.index_topk
        for s in range(k, idx.shape[0]):  # s + 1 > k causal positions
            v = idx[s, :s + 1].sort(descending=True).values
            st["gap"] = min(st["gap"], float(v[k - 1] - v[k]))
            st["queries"] += 1
            ref = set(idx[s].topk(k).indices.tolist())
            st["mismatch"] += ref != set(out[0, s].tolist())
    for mod in model.modules():
        if type(mod).__name__.endswith("Indexer"):
            hooks.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
            hooks.append(mod.register_forward_hook(post, with_kwargs=True))
    with torch.no_grad():
        model(full, use_cache=False)
    for h in hooks:
        h.remove()
    return st


def dense_logits(model, ids):
    """logits of ids with every indexer keeping all positions (index_topk beyond the length)"""
    mods = [m for m in model.modules() if type(m).__name__.endswith("Indexer")]
    keep = [m.index_topk for m in mods]
    for m in mods:
        m.index_topk = 1 << 20
    with torch.no_grad():
        out = model(ids).logits[0].float()
    for m, k in zip(mods, keep):
        m.index_topk = k
    return out


def check_norm_conventions(model):
    """{class: 'w' | '1+w' | 'w*silu(z)'} of the model's RMSNorm classes, checked numerically (an
    unexpected convention stops the build: init_weights_hybrid would pick the wrong centre)"""
    seen = {}
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for mod in model.modules():
            cls = type(mod).__name__
            if not cls.endswith(("RMSNorm", "RMSNormGated")) or cls in seen:
                continue
            w = mod.weight.float()
            x = torch.randn(3, w.shape[0], generator=g)
            r = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            if cls.endswith("Gated"):
                z = torch.randn(3, w.shape[0], generator=g)
                ok, conv = torch.allclose(mod(x, z), r * w * torch.nn.functional.silu(z), atol=1e-5), "w*silu(z)"
            else:
                ok, conv = torch.allclose(mod(x), r * (1.0 + w), atol=1e-5), "1+w"
            if not ok:
                sys.exit(f"{cls}: not the expected {conv} RMSNorm")
            seen[cls] = conv
    return seen


def check_torch_gdn_path():
    """the GDN layers must run transformers' torch reference (chunked / recurrent delta rule, conv1d
    by F.conv1d): none of the packages it would dispatch to may be importable"""
    for pkg in ("fla", "causal_conv1d", "kernels"):
        if importlib.util.find_spec(pkg) is not None:
            sys.exit(f"{pkg} is importable: the GDN layers would not run the torch reference path")


def decoder_layers(model):
    base = getattr(model.model, "language_model", model.model)
    return base.layers


def final_norm(model):
    return getattr(model.model, "language_model", model.model).norm.weight


def gdn_stats(model, ids):
    """(decay exp(g), beta) of every GDN layer, value head and prompt position, flattened"""
    decays, betas, hooks = [], [], []

    def pre(mod, args, kwargs):
        x = kwargs.get("hidden_states", args[0] if args else None)
        if hasattr(mod, "in_proj_ba"):  # Qwen3-Next: fused, grouped per key head
            _, _, _, _, b, a = mod.fix_query_key_value_ordering(mod.in_proj_qkvz(x), mod.in_proj_ba(x))
        else:
            b, a = mod.in_proj_b(x), mod.in_proj_a(x)
        gl = -mod.A_log.float().exp() * torch.nn.functional.softplus(a.float() + mod.dt_bias)
        decays.append(gl.exp().flatten())
        betas.append(b.sigmoid().flatten())
    for mod in model.modules():
        if type(mod).__name__.endswith("GatedDeltaNet"):
            hooks.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    return torch.cat(decays), torch.cat(betas)


def stepwise_logits(model, full):
    """logits [T, V] of full [1, T] fed one token at a time through the cache: the GDN layers take
    their recurrent path (conv state + recurrent delta rule) from the second token on"""
    out, pkv = [], None
    with torch.no_grad():
        for t in range(full.shape[1]):
            r = model(full[:, t:t + 1], past_key_values=pkv, use_cache=True)
            pkv = r.past_key_values
            out.append(r.logits[0, -1].float())
    return torch.stack(out)


def router_gaps(model, ids):
    """[layers, T]: per MoE layer and position the k-th minus the (k+1)-th router logit
    (float64), -1 where the layer is dense"""
    k = getattr(model.config, "text_config", model.config).num_experts_per_tok
    layers = decoder_layers(model)
    gaps = torch.full((len(layers), ids.shape[1]), -1.0, dtype=torch.float64)
    hooks = []
    for i, layer in enumerate(layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is None or not hasattr(gate, "weight") or gate.weight.shape[0] < k + 1:
            continue

        def pre(mod, args, i=i, w=gate.weight):
            top = (args[0][0].double() @ w.double().T).topk(k + 1, -1).values
            gaps[i] = top[:, k - 1] - top[:, k]
        hooks.append(layer.mlp.register_forward_pre_hook(pre))
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    return gaps


def init_weights_v4(model, seed):
    """the V4 fixtures' weights (the docstring says how), rounded to bf16; tid2eid distinct random
    experts per token id"""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if "norm" in name and p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif leaf == "sinks":
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif leaf == "position_bias":
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif leaf in ("base", "hc_base"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif leaf in ("scale", "hc_scale"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                std = 1.0 / p.shape[-1] ** 0.5
                if name.endswith("mlp.gate.weight"):
                    std *= 3.0
                p.copy_(std * torch.randn(p.shape, generator=g))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):
                E = model.config.n_routed_experts
                b.copy_(torch.stack([torch.randperm(E, generator=g)[:b.shape[1]] for _ in range(b.shape[0])]))
            elif name.endswith("e_score_correction_bias"):
                b.copy_((0.6 * torch.rand(b.shape, generator=g) - 0.3).to(torch.bfloat16).float())


def v4_logits_cached(model, full, step):
    """logits [T, V] of full [1, T] fed step tokens at a time through transformers' cache"""
    out, pkv = [], None
    with torch.no_grad():
        for t in range(0, full.shape[1], step):
            r = model(full[:, t:t + step], past_key_values=pkv, use_cache=True)
            pkv = r.past_key_values
            out.append(r.logits[0].float())
    return torch.cat(out)


def v4_margins(model, full):
    """in float64 on full [1, T]: the smallest indexer top-k-th minus next score over the queries
    with more visible entries than index_topk (and how many such query-layer pairs), the
    smallest router k-th minus next biased score of the top-k layers"""
    F = torch.nn.functional
    c = model.config
    st = dict(gap=float("inf"), queries=0, rgap=float("inf"))
    hooks = []
    ratio = c.compress_rates["compressed_sparse_attention"]

    def scorer(mod, args, out):
        sc = out[0].double()  # [S, T] before the causal mask
        for s in range(sc.shape[0]):
            nvis = (s + 1) // ratio
            if nvis <= c.index_topk:
                continue
            v = sc[s, :nvis].sort(descending=True).values
            st["gap"] = min(st["gap"], float(v[c.index_topk - 1] - v[c.index_topk]))
            st["queries"] += 1

    def router(mod, args, out):
        x = args[0].reshape(-1, mod.weight.shape[1]).double()
        sc = F.softplus(x @ mod.weight.double().T).sqrt() + mod.e_score_correction_bias.double()
        top = sc.topk(mod.top_k + 1, -1).values
        st["rgap"] = min(st["rgap"], float((top[:, -2] - top[:, -1]).min()))
    for mod in model.modules():
        n = type(mod).__name__
        if n == "DeepseekV4IndexerScorer":
            hooks.append(mod.register_forward_hook(scorer))
        elif n == "DeepseekV4TopKRouter":
            hooks.append(mod.register_forward_hook(router))
    model.double()
    with torch.no_grad():
        model(full, use_cache=False)
    model.float()
    for h in hooks:
        h.remove()
    return st


def build_v4(name, seed):
    """deepseek_v4 and deepseek_v4_fused (the docstring); a failed check stops the build"""
    cfg = transformers.DeepseekV4Config(**FIXTURES[name][2])
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.DeepseekV4ForCausalLM(cfg).eval().to(torch.float32)
    init_weights_v4(model, seed)
    g = torch.Generator().manual_seed(seed + 1000)
    ids = torch.randint(3, VOCAB, (1, T_PROMPT_V4), generator=g)
    with torch.no_grad():
        logits = model(ids).logits[0].float()
        w = model.model.norm.weight
        w.mul_(1.0 / float(logits.std()))
        w.copy_(w.to(torch.bfloat16).float())
        logits = model(ids).logits[0].float()
        greedy, seq, pkv = [], ids, None  # greedy through the cache: prefill, then one at a time
        r = model(ids, use_cache=True)
        for _ in range(N_GREEDY):
            nxt = int(r.logits[0, -1].argmax())
            greedy.append(nxt)
            r = model(torch.tensor([[nxt]]), past_key_values=r.past_key_values, use_cache=True)
    greedy = torch.tensor(greedy)
    full = torch.cat([ids[0], greedy[:-1]])[None]
    with torch.no_grad():
        tf = model(full).logits[0].float()
        mods = [mm for mm in model.modules() if type(mm).__name__ == "DeepseekV4Indexer"]
        for mm in mods:
            mm.index_topk = 1 << 20
        d_dense = float((model(ids).logits[0].float() - logits).abs().max())
        for mm in mods:
            mm.index_topk = cfg.index_topk
    top = tf[T_PROMPT_V4 - 1:].topk(2, -1).values
    gap, same = float((top[:, 0] - top[:, 1]).min()), bool((tf[T_PROMPT_V4 - 1:].argmax(-1) == greedy).all())
    d_step = float((v4_logits_cached(model, full, 1) - tf).abs().max())
    d_chunk = float((v4_logits_cached(model, full, 5) - tf).abs().max())
    mg = v4_margins(model, full)
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(d)
    for f in ("generation_config.json",):
        p = os.path.join(d, f)
        if os.path.exists(p):
            os.remove(p)
    ref = {"ids": ids[0].to(torch.int32).contiguous(), "logits": logits.contiguous(),
           "greedy": greedy.to(torch.int32).contiguous()}
    save_file(ref, os.path.join(d, "reference.safetensors"))
    back, bad, d_load = reload_check("DeepseekV4ForCausalLM", d, ids, logits)
    fused = os.path.join(OUT, name + "_fused")  # the in-memory names, the same weights
    os.makedirs(fused, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(fused, "model.safetensors"), metadata={"format": "pt"})
    shutil.copyfile(os.path.join(d, "config.json"), os.path.join(fused, "config.json"))
    save_file(ref, os.path.join(fused, "reference.safetensors"))
    copy_tokenizer(d)  # the tiny tokenizer: test_model_sched serves it
    copy_tokenizer(fused)
    print(f"{name}: logits std {float(logits.std()):.3f}, greedy {greedy.tolist()}")
    print(f"  smallest greedy top-1 margin {gap:.3f}{'' if same else ' (teacher-forced argmax differs from cached greedy)'}")
    print(f"  |token-by-token cached - teacher-forced| {d_step:.2e}, |chunks of 5 - teacher-forced| {d_chunk:.2e}, "
          f"|reloaded - reference| {d_load:.2e}" + (f", LOADING ISSUES {bad}" if bad else ""))
    print(f"  indexer: {mg['queries']} query-layer pairs drop entries, smallest top-k gap {mg['gap']:.2e}; "
          f"smallest router gap {mg['rgap']:.2e}; |keep all - index_topk| {d_dense:.3f}")
    if (d_step > 1e-4 or d_chunk > 1e-4 or d_load > 1e-5 or bad or not same or gap < 0.05
            or mg["gap"] < 1e-3 or mg["rgap"] < 2e-3 or mg["queries"] == 0 or d_dense < 1e-2):
        sys.exit(f"{name}: a consistency check failed")


def build(name, seed):
    if name in V4:
        return build_v4(name, seed)
    cfg_cls, model_cls, extra = FIXTURES[name]
    hybrid = name in HYBRID
    if "text_config" in extra:  # a composite (multimodal) config: given whole
        kw = dict(extra)
    else:
        kw = dict(HYBRID_COMMON if hybrid else COMMON)
        kw.update(extra)
    sig = name in SIGMOID_MOE
    if (sig or name in MLA_SOFTMAX) and kw.get("head_dim", 0) is None:  # MLA: head_dim is derived
        del kw["head_dim"]
    cfg = getattr(transformers, cfg_cls)(**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"  # the plain per-expert loop, no grouped_mm
    if hybrid:
        check_torch_gdn_path()
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(cfg).eval().to(torch.float32)
    gemma = "Gemma" in model_cls
    n08 = name in N08
    if n08:
        init_weights_n08(model, seed)
    elif hybrid:
        norms = check_norm_conventions(model)
        init_weights_hybrid(model, seed)
    else:
        init_weights(model, seed, gemma)
        if sig:
            init_score_bias(model, seed)
    g = torch.Generator().manual_seed(seed + 1000)
    ids = torch.randint(3, VOCAB, (1, T_PROMPT), generator=g)
    more = {}  # the n08 fixtures' extra reference tensors
    with torch.no_grad():
        logits = model(ids).logits[0].float()
        if not n08:
            # scale the final norm (works for tied embeddings too) so logits have std near 1
            s = float(logits.std())
            w = final_norm(model)
            if gemma or hybrid:  # the norm multiplies by 1 + w
                w.copy_((1.0 + w) / s - 1.0)
            else:
                w.mul_(1.0 / s)
            w.copy_(w.to(torch.bfloat16).float())
            logits = model(ids).logits[0].float()
        else:
            more["router_gap"] = router_gaps(model, ids).float().contiguous()
            model.double()
            more["logits64"] = model(ids).logits[0].float().contiguous()
            model.float()
        out = model.generate(ids, max_new_tokens=N_GREEDY, do_sample=False, min_new_tokens=N_GREEDY,
                             eos_token_id=None, pad_token_id=0,
                             **(dict(output_logits=True, return_dict_in_generate=True) if hybrid or sig else {}))
    if hybrid or sig:
        gen_logits = torch.stack(out.logits)[:, 0].float()  # generate's prefill + cached decode steps
        out = out.sequences
    greedy = out[0, T_PROMPT:]
    if n08 or hybrid or sig:
        gap, same = greedy_gap(model, ids, greedy)
    if hybrid or sig:
        full = torch.cat([ids[0], greedy[:-1]])[None]
        with torch.no_grad():
            tf = model(full).logits[0].float()  # teacher-forced: the chunked delta rule
        d_step = float((stepwise_logits(model, full) - tf).abs().max())
        d_gen = float((gen_logits - tf[T_PROMPT - 1:]).abs().max())
    if name in DSA:
        dsel = dsa_selection(model, full)
        d_dense = float((dense_logits(model, ids) - logits).abs().max())
    if hybrid:
        decay, beta = gdn_stats(model, ids)
        moe = hasattr(getattr(model.config, "text_config", model.config), "num_experts_per_tok")
        rg = router_gaps(model, ids) if moe else torch.tensor([-1.0])
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(d)
    if name in FUSED_EXPERTS:
        # the published layout: save_pretrained splits the fused experts into experts.N.*_proj.weight
        # (transformers' qwen2_moe conversion, reverted on save); Qwen3.5-MoE checkpoints keep them
        # fused. The module names are already model.language_model.* / model.visual.* / lm_head.*
        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    if sig:  # the routers' bias in f32, as the published checkpoints store it
        st_path = os.path.join(d, "model.safetensors")
        with safe_open(st_path, framework="pt") as f:
            sd = {k: f.get_tensor(k) for k in f.keys()}
        sd = {k: v.float() if k.endswith("e_score_correction_bias") else v for k, v in sd.items()}
        save_file(sd, st_path, metadata={"format": "pt"})
    for f in ("generation_config.json",):
        p = os.path.join(d, f)
        if os.path.exists(p):
            os.remove(p)
    save_file({"ids": ids[0].to(torch.int32).contiguous(), "logits": logits.contiguous(),
               "greedy": greedy.to(torch.int32).contiguous(), **more},
              os.path.join(d, "reference.safetensors"))
    print(f"{name}: logits std {float(logits.std()):.3f}, greedy {greedy.tolist()}")
    if n08:
        rg = more["router_gap"]
        print(f"  |fp32 - fp64| {float((logits - more['logits64']).abs().max()):.2e}, smallest router "
              f"gap {float(rg[rg >= 0].min()):.2e}, smallest greedy top-1 margin {gap:.3f}"
              f"{'' if same else ' (teacher-forced argmax differs from generate)'}")
    if name in DSA:
        print(f"  DSA: {dsel['queries']} query-layer pairs drop positions, smallest top-k gap "
              f"{dsel['gap']:.2e}, {dsel['mismatch']} differ from the float64 choice; "
              f"|dense attention - sparse| {d_dense:.3f}")
        if dsel["gap"] < 1e-3 or dsel["mismatch"] or d_dense < 1e-2:
            sys.exit(f"{name}: a DSA check failed")
    if sig:
        report_sigmoid_moe(name, model, model_cls, d, ids, full, logits, gap, same, d_step, d_gen)
    if hybrid:
        copy_tokenizer(d)
        back, bad, d_load = reload_check(model_cls, d, ids, logits)
        print(f"  norms {norms}; smallest greedy top-1 margin {gap:.3f}"
              f"{'' if same else ' (teacher-forced argmax differs from generate)'}"
              + (f", smallest router gap {float(rg[rg >= 0].min()):.2e}" if (rg >= 0).any() else ""))
        print(f"  |token-by-token cached - teacher-forced| {d_step:.2e} over {full.shape[1]} positions, "
              f"|generate prefill+decode - teacher-forced| {d_gen:.2e}, |reloaded - reference| {d_load:.2e}"
              + (f", LOADING ISSUES {bad}" if bad else ""))
        q = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0])
        print(f"  GDN decay exp(g) quantiles {[round(v, 3) for v in decay.quantile(q).tolist()]}, "
              f"beta {[round(v, 3) for v in beta.quantile(q).tolist()]}")
        if d_step > 1e-4 or d_gen > 1e-4 or d_load > 1e-5 or bad or not same:
            sys.exit(f"{name}: a consistency check failed")


def copy_tokenizer(d):
    src = os.path.join(OUT, "qwen3_moe")  # the tiny tokenizer (gen_fixture_tokenizer.py)
    if not os.path.exists(os.path.join(src, "tokenizer.json")):
        src = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models", "qwen3_moe")
    for f in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(src, f), os.path.join(d, f))


def reload_check(model_cls, d, ids, logits):
    """the saved checkpoint at d reloaded by transformers (fp32, eager): the model, the loading
    info's non-empty entries, and max |its logits - logits|"""
    back, info = getattr(transformers, model_cls).from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    back.config._experts_implementation = "eager"
    bad = {k: v for k, v in info.items() if v}
    with torch.no_grad():
        d_load = float((back.eval()(ids).logits[0].float() - logits).abs().max())
    return back, bad, d_load


def report_sigmoid_moe(name, model, model_cls, d, ids, full, logits, gap, same, d_step, d_gen):
    """the SIGMOID_MOE checks: cached decode vs teacher-forced, greedy margins, the routers'
    group-limited / biased choices and their margins, the attention scale, the saved checkpoint
    reloading to the same logits; a failed check stops the build"""
    copy_tokenizer(d)
    back, bad, d_load = reload_check(model_cls, d, ids, logits)
    bias_ok = all(float(b.abs().min()) > 0 and torch.equal(b.float(), b2.float())
                  for (_, _, b), (_, _, b2) in zip(sigmoid_routers(model), sigmoid_routers(back)))
    back.eval()  # f32, as the reference ran (the model itself is bf16 by now)
    rp, rf = router_selection(back, ids), router_selection(back, full)
    attn = decoder_layers(back)[0].self_attn
    c = back.config
    plain = (c.qk_nope_head_dim + c.qk_rope_head_dim if hasattr(c, "qk_nope_head_dim") else attn.head_dim) ** -0.5
    print(f"  smallest greedy top-1 margin {gap:.3f}{'' if same else ' (teacher-forced argmax differs from generate)'}")
    print(f"  |token-by-token cached - teacher-forced| {d_step:.2e} over {full.shape[1]} positions, "
          f"|generate prefill+decode - teacher-forced| {d_gen:.2e}, |reloaded - reference| {d_load:.2e}"
          + (f", LOADING ISSUES {bad}" if bad else ""))
    for what, r in (("prompt", rp), ("prompt+greedy", rf)):
        print(f"  routers ({what}): {r['group_diff']} of {r['pairs']} token-layer pairs pick other experts "
              f"than plain top-k (group-limited), {r['bias_diff']} other than top-k without the bias; "
              f"smallest k-th gap {r['kgap']:.2e}, group gap {r['ggap']:.2e}")
    print(f"  attention scale {attn.scaling:.6f} (1/sqrt(qk head dim) {plain:.6f}, ratio {attn.scaling / plain:.6f}), "
          f"cos/sin factor {back.model.rotary_emb.attention_scaling}")
    if (d_step > 1e-4 or d_gen > 1e-4 or d_load > 1e-5 or bad or not same or not bias_ok
            or rp["mismatch"] or rf["mismatch"] or (c.n_group if hasattr(c, "n_group") else 1) > 1
            and rp["group_diff"] == 0):
        sys.exit(f"{name}: a consistency check failed")


if __name__ == "__main__":
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for i, n in enumerate(FIXTURES):
        if ONLY is None or n in ONLY:
            build(n, SEEDS.get(n, 1234 + i))
