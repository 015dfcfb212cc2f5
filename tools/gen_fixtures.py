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

Run where torch and transformers are installed (the GPU machine, or any machine with them):
    python3 tools/gen_fixtures.py [OUT_DIR] [--only NAME ...]   (default tests/data/models)
"""
import json
import os
import sys

import torch
import transformers
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
}
N08 = {"qwen3_moe_n08", "mixtral_n08"}
# seeds picked for top-1 margins of the greedy steps >= 0.04 and router gaps >= 2e-3 (1e-6 is
# the fp32 noise); the default is 1234 + the fixture's index
SEEDS = {"qwen3_moe_n08": 1281, "mixtral_n08": 1269}


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


def router_gaps(model, ids):
    """[layers, T]: per MoE layer and position the k-th minus the (k+1)-th router logit
    (float64), -1 where the layer is dense"""
    k = model.config.num_experts_per_tok
    layers = model.model.layers
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


def build(name, seed):
    cfg_cls, model_cls, extra = FIXTURES[name]
    kw = dict(COMMON)
    kw.update(extra)
    cfg = getattr(transformers, cfg_cls)(**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"  # the plain per-expert loop, no grouped_mm
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(cfg).eval().to(torch.float32)
    gemma = "Gemma" in model_cls
    n08 = name in N08
    if n08:
        init_weights_n08(model, seed)
    else:
        init_weights(model, seed, gemma)
    g = torch.Generator().manual_seed(seed + 1000)
    ids = torch.randint(3, VOCAB, (1, T_PROMPT), generator=g)
    more = {}  # the n08 fixtures' extra reference tensors
    with torch.no_grad():
        logits = model(ids).logits[0].float()
        if not n08:
            # scale the final norm (works for tied embeddings too) so logits have std near 1
            s = float(logits.std())
            w = model.model.norm.weight
            if gemma:  # the norm multiplies by 1 + w
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
                             eos_token_id=None, pad_token_id=0)
    greedy = out[0, T_PROMPT:]
    if n08:
        gap, same = greedy_gap(model, ids, greedy)
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(d)
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


if __name__ == "__main__":
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for i, n in enumerate(FIXTURES):
        if ONLY is None or n in ONLY:
            build(n, SEEDS.get(n, 1234 + i))
