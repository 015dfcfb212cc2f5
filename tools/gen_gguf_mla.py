#!/usr/bin/env python3
"""gen_gguf_mla.py — llama.cpp GGUF files of the MLA and sigmoid-router families (deepseek2,
glm4moe, minimax-m2), written by llama.cpp's own converter, with their references.

As tools/gen_gguf_hybrid.py (whose helpers this reuses): convert_hf_to_gguf.py of a llama.cpp
source tree (../shared/peers/llama.cpp-*.tar.xz extracted to a temporary folder, or --llama DIR)
turns a Hugging Face checkpoint into tests/data/gguf/models/<name>.gguf, and <name>.ref.safetensors
holds the prompt ids, transformers' fp32 logits at every position and its 12 greedy tokens.

From the safetensors fixtures (BF16; their reference is the fixture's own, the weights being the
same bits; each file's mapping back to Hugging Face's layout is checked to reproduce the
checkpoint):

  deepseek2_bf16      tests/data/models/deepseek_v3 (q LoRA, 2 of 4 groups, one dense layer),
                      scoring_func "sigmoid" added to its config.json as DeepSeek-V3's has it (the
                      converter writes expert_gating_func only from that key): kv_b split into
                      attn_k_b (transposed per head) / attn_v_b, the MQA view of the latent
  deepseek2_noq_bf16  tests/data/models/deepseek_v3_noqlora (plain attn_q, YaRN factor 40 with
                      mscale_all_dim 1: rope.scaling.yarn_log_multiplier 0.1)
  glm47flash_bf16     tests/data/models/glm4_moe_lite (GLM-4.7-Flash, written as deepseek2)
  glm4moe_bf16        tests/data/models/glm4_moe plus a multi-token-prediction layer (layer 3's
                      weights again as layer 4 with random eh_proj / enorm / hnorm /
                      shared_head.norm, num_nextn_predict_layers 1): blk.4.* and blk.4.nextn.*
                      in the file, which the loader must skip
  glm4moe_qknorm_bf16 tests/data/models/glm4_moe_qknorm (per-head QK-norm, 1 of 2 groups)
  minimax_m2_bf16     tests/data/models/minimax_m2 (minimax-m2)

Random ones of sizes whose rows are whole Q8_0 blocks (hidden 64), --outtype q8_0 (routers,
norms and the score-correction biases stay F32, as the converter writes them); reference:
transformers (fp32, eager) on the GGUF dequantised by gguf-py and mapped back to Hugging Face's
layout here (attn_k_b transposed back and joined with attn_v_b into kv_b_proj, experts split):

  deepseek2_q8        DeepSeek-V3: q LoRA 32, latent 64, k_nope 32 (attn_k_b's rows are Q8_0
                      blocks: FreeToken-C joins kv_b in f32), rope 16, v 32, 8 experts top-2 in 2
                      groups (1 kept), one dense layer, a shared expert
  glm4moe_q8          GLM-4.5: q/k/v biases, half-rotary heads of 32, one dense layer
  minimax_m2_q8       MiniMax-M2: QK-norm over all heads, rotary 16 of 32

The fixtures' tokenizer is the tiny one of tests/data/models/qwen3_moe; the converter's
pre-tokenizer hash check is answered "qwen2", and GLM's vocabulary step (which looks up GLM's
special tokens) is the plain GPT-2 one.

Usage (torch, transformers 5.x, numpy and safetensors installed, e.g. the GPU machine's venv):
    python3 tools/gen_gguf_mla.py [--llama LLAMA_CPP_DIR] [--only NAME [--seed N]] [OUT_DIR]
(default OUT_DIR tests/data/gguf/models; deterministic: a rerun writes the same bytes.) The
committed files were made on the GPU machine with its /opt/torch/.venv (torch 2.11, transformers
5.17) and --llama pointing at convert_hf_to_gguf.py, conversion/ and gguf-py/ of the peers tarball.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_gguf_hybrid as gh  # noqa: E402  (llama_tree, load_st, hf_model, run_ref, save_ref)

MODELS = gh.MODELS

# the converter with its tokenizer checks answered (the fixtures' tokenizer is a tiny one)
CONVERT = r"""
import runpy, sys
ll = sys.argv[1]
sys.path[:0] = [ll, ll + "/gguf-py"]
import conversion.base as b
for c in vars(b).values():
    if isinstance(c, type) and "get_vocab_base_pre" in vars(c):
        c.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    if isinstance(c, type) and "_set_vocab_glm" in vars(c):
        c._set_vocab_glm = lambda self: self._set_vocab_gpt2()
sys.argv = [ll + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def convert(ll, src, out, outtype):
    cmd = [sys.executable, "-c", CONVERT, ll, src, "--outtype", outtype, "--outfile", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"converter failed on {src}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")


# ------------------------------------------------------------------ GGUF -> Hugging Face layout

def gguf_to_hf(path):
    """{HF checkpoint name: f32 numpy} from a deepseek2 / glm4moe / minimax-m2 GGUF (dequantised
    by gguf-py), per-expert tensors as save_pretrained writes them"""
    import gguf
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    kv = lambda k, d=None: r.fields[f"{arch}.{k}"].contents() if f"{arch}.{k}" in r.fields else d
    nl = kv("block_count") - kv("nextn_predict_layers", 0)
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float32).reshape(
        [int(n) for n in reversed(x.shape)]) for x in r.tensors}
    moe = "block_sparse_moe" if arch == "minimax-m2" else "mlp"
    ew = ("w1", "w3", "w2") if arch == "minimax-m2" else ("gate_proj", "up_proj", "down_proj")
    sd = {"model.embed_tokens.weight": t.pop("token_embd.weight"),
          "model.norm.weight": t.pop("output_norm.weight")}
    if "output.weight" in t:
        sd["lm_head.weight"] = t.pop("output.weight")
    names = {"attn_norm.weight": "input_layernorm.weight",
             "ffn_norm.weight": "post_attention_layernorm.weight",
             "post_attention_norm.weight": "post_attention_layernorm.weight",
             "attn_q_a.weight": "self_attn.q_a_proj.weight",
             "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
             "attn_q_b.weight": "self_attn.q_b_proj.weight",
             "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
             "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
             "attn_output.weight": "self_attn.o_proj.weight",
             "ffn_gate_inp.weight": f"{moe}.gate.weight",
             "exp_probs_b.bias": (f"{moe}.e_score_correction_bias" if moe != "mlp"
                                  else "mlp.gate.e_score_correction_bias")}
    for p in ("q", "k", "v"):
        for w in ("weight", "bias"):
            names[f"attn_{p}.{w}"] = f"self_attn.{p}_proj.{w}"
        names[f"attn_{p}_norm.weight"] = f"self_attn.{p}_norm.weight"
    for n in ("gate", "up", "down"):
        names[f"ffn_{n}.weight"] = f"mlp.{n}_proj.weight"
        names[f"ffn_{n}_shexp.weight"] = f"mlp.shared_experts.{n}_proj.weight"
    for l in range(nl):
        p, q = f"blk.{l}.", f"model.layers.{l}."
        if p + "attn_k_b.weight" in t:  # [nh, Lr, dn] and [nh, dv, Lr] back into [nh (dn + dv), Lr]
            kb, vb = t.pop(p + "attn_k_b.weight"), t.pop(p + "attn_v_b.weight")
            sd[q + "self_attn.kv_b_proj.weight"] = np.concatenate(
                [kb.transpose(0, 2, 1), vb], axis=1).reshape(-1, kb.shape[1])
        for j, n in enumerate(("gate", "up", "down")):
            if p + f"ffn_{n}_exps.weight" in t:
                x = t.pop(p + f"ffn_{n}_exps.weight")
                for e in range(x.shape[0]):
                    sd[q + f"{moe}.experts.{e}.{ew[j]}.weight"] = x[e]
        for g, h in names.items():
            if p + g in t:
                sd[q + h] = t.pop(p + g)
    left = [n for n in t if not (n.startswith("blk.") and int(n.split(".")[1]) >= nl)]
    if left:  # only the MTP layers' may stay
        sys.exit(f"{path}: tensors not mapped back: {left}")
    return sd


def check_inverse(gguf_path, src):
    """gguf_to_hf of a BF16 file reproduces the checkpoint it was converted from"""
    ref = {k: v.float().numpy() for k, v in gh.load_st(os.path.join(src, "model.safetensors")).items()}
    nl = json.load(open(os.path.join(src, "config.json")))["num_hidden_layers"]
    ref = {k: v for k, v in ref.items() if not k.startswith(f"model.layers.{nl}.")}
    sd = gguf_to_hf(gguf_path)
    if set(ref) != set(sd):
        sys.exit(f"{gguf_path}: names differ from {src}: {sorted(set(ref) ^ set(sd))[:6]}")
    worst = max(float(np.abs(sd[k] - ref[k]).max()) for k in ref)
    if worst:
        sys.exit(f"{gguf_path}: mapped back differs from {src} by {worst:.2e}")
    print(f"  gguf -> HF mapping reproduces {os.path.relpath(src, gh.ROOT)} exactly")


# ------------------------------------------------------------------ fixtures

def edited_copy(src, dst, cfg_extra, mtp):
    """src's checkpoint in dst with cfg_extra in its config.json; mtp: plus one MTP layer (the
    last layer's weights as layer N, random eh_proj / enorm / hnorm / shared_head.norm)"""
    from safetensors.torch import save_file
    shutil.copytree(src, dst)
    cp = os.path.join(dst, "config.json")
    cfg = json.load(open(cp))
    cfg.update(cfg_extra)
    n = cfg["num_hidden_layers"]
    if mtp:
        cfg["num_nextn_predict_layers"] = 1
        sd = gh.load_st(os.path.join(dst, "model.safetensors"))
        last, new = f"model.layers.{n - 1}.", f"model.layers.{n}."
        sd.update({new + k[len(last):]: v.clone() for k, v in sd.items() if k.startswith(last)})
        H = cfg["hidden_size"]
        g = torch.Generator().manual_seed(4343)
        sd[new + "eh_proj.weight"] = (torch.randn(H, 2 * H, generator=g) / (2 * H) ** 0.5).to(torch.bfloat16)
        for k in ("enorm", "hnorm", "shared_head.norm"):
            sd[new + k + ".weight"] = (1 + 0.1 * torch.randn(H, generator=g)).to(torch.bfloat16)
        save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(dst, "model.safetensors"),
                  metadata={"format": "pt"})
    json.dump(cfg, open(cp, "w"), indent=2)


FROM_HF = {  # name -> (fixture, config additions, MTP layer)
    "deepseek2_bf16": ("deepseek_v3", {"scoring_func": "sigmoid"}, False),
    "deepseek2_noq_bf16": ("deepseek_v3_noqlora", {"scoring_func": "sigmoid"}, False),
    "glm47flash_bf16": ("glm4_moe_lite", {"scoring_func": "sigmoid"}, False),
    "glm4moe_bf16": ("glm4_moe", {}, True),
    "glm4moe_qknorm_bf16": ("glm4_moe_qknorm", {}, False),
    "minimax_m2_bf16": ("minimax_m2", {}, False),
}

SMALL = dict(vocab_size=384, hidden_size=64, num_hidden_layers=3, max_position_embeddings=256,
             rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
# The random ones: name -> (config class, model class, seed, config). glm4moe_q8's seed was picked
# (of 5202 and 5210-5217) for ft's --cpu-act fast check (tests/test_model_fixtures.c,
# gguf_fixtures_fast_activations: within 0.1 of the reference at 90% of the positions): its
# router gaps (0.032 at the least) leave room for the int8 rounding of the activations
RANDOM = {
    "deepseek2_q8": ("DeepseekV3Config", "DeepseekV3ForCausalLM", 5101, dict(
        SMALL, num_attention_heads=2, num_key_value_heads=2, intermediate_size=64,
        moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        n_group=2, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, q_lora_rank=32, kv_lora_rank=64, qk_nope_head_dim=32,
        qk_rope_head_dim=16, v_head_dim=32, rope_interleave=True, scoring_func="sigmoid",
        num_nextn_predict_layers=0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "glm4moe_q8": ("Glm4MoeConfig", "Glm4MoeForCausalLM", 5211, dict(
        SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=64,
        moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        n_group=1, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, attention_bias=True, use_qk_norm=False, num_nextn_predict_layers=0,
        partial_rotary_factor=0.5,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5})),
    "minimax_m2_q8": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM", 5303, dict(
        SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=32,
        num_local_experts=8, num_experts_per_tok=2, rotary_dim=16, use_qk_norm=True,
        qk_norm_type="per_layer", scoring_func="sigmoid", use_routing_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.5})),
}


def random_model(dst, cfg_cls, model_cls, kw, seed):
    """a random checkpoint drawn as tools/gen_fixtures.py draws its sigmoid-router ones (final norm
    scaled for logits of sd ~1), saved in bf16 with the fixtures' tokenizer; its prompt ids"""
    import transformers
    import gen_fixtures as gf
    cfg = getattr(transformers, cfg_cls)(**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(cfg).eval().float()
    gf.init_weights(model, seed)
    gf.init_score_bias(model, seed)
    ids = torch.randint(3, kw["vocab_size"], (1, 24), generator=torch.Generator().manual_seed(seed + 1000))
    with torch.no_grad():
        w = model.model.norm.weight
        w.mul_(1.0 / float(model(ids).logits.std()))
        w.copy_(w.to(torch.bfloat16).float())
    model.to(torch.bfloat16).save_pretrained(dst)
    cp = os.path.join(dst, "config.json")
    c = json.load(open(cp))
    for k in ("scoring_func", "rotary_dim", "use_qk_norm", "qk_norm_type", "use_routing_bias"):
        if k in kw:  # descriptive keys the converter reads (transformers may drop them)
            c[k] = kw[k]
    json.dump(c, open(cp, "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copyfile(os.path.join(MODELS, "qwen3_moe", f), os.path.join(dst, f))
    return ids[0]


def dequantised_dir(gguf_path, src, dst):
    """src's config and tokenizer with the GGUF's dequantised weights (f32) in dst"""
    from safetensors.numpy import save_file
    shutil.copytree(src, dst)
    for f in os.listdir(dst):
        if f.endswith(".safetensors"):
            os.remove(os.path.join(dst, f))
    sd = gguf_to_hf(gguf_path)
    save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, os.path.join(dst, "model.safetensors"),
              metadata={"format": "pt"})


def main():
    args = sys.argv[1:]
    ll, only, seed_arg = gh.take(args, "--llama"), gh.take(args, "--only"), gh.take(args, "--seed")
    out = args[0] if args else os.path.join(gh.ROOT, "tests", "data", "gguf", "models")
    os.makedirs(out, exist_ok=True)
    extracted = ll is None
    ll = gh.llama_tree(ll)
    sys.path[:0] = [os.path.join(ll, "gguf-py")]
    tmp = tempfile.mkdtemp(prefix="gguf-mla-")
    ref = lambda name: os.path.join(out, name + ".ref.safetensors")
    gg = lambda name: os.path.join(out, name + ".gguf")
    import gguf

    for name, (fix, extra, mtp) in FROM_HF.items():
        if only not in (None, name):
            continue
        src = os.path.join(MODELS, fix)
        d = os.path.join(tmp, name)
        edited_copy(src, d, extra, mtp)
        convert(ll, d, gg(name), "bf16")
        r = gh.load_st(os.path.join(src, "reference.safetensors"))
        with torch.no_grad():
            dl = float((gh.hf_model(d)(r["ids"].long()[None]).logits[0] - r["logits"]).abs().max())
        if dl > 1e-5:
            sys.exit(f"{name}: the edited checkpoint's logits moved by {dl}")
        shutil.copyfile(os.path.join(src, "reference.safetensors"), ref(name))
        types = sorted({t.tensor_type.name for t in gguf.GGUFReader(gg(name)).tensors})
        print(f"{name}: {os.path.getsize(gg(name))} bytes ({', '.join(types)}); reference: {fix}'s "
              f"(the edited checkpoint's logits {dl:.1e} off it)")
        check_inverse(gg(name), src)

    for name, (cfg_cls, model_cls, seed, kw) in RANDOM.items():
        if only not in (None, name):
            continue
        seed = int(seed_arg) if seed_arg else seed
        d = os.path.join(tmp, name)
        ids = random_model(d, cfg_cls, model_cls, kw, seed)
        convert(ll, d, gg(name), "q8_0")
        dq = os.path.join(tmp, name + "_dq")
        dequantised_dir(gg(name), d, dq)
        model = gh.hf_model(dq)
        logits, greedy, gap = gh.run_ref(model, ids)
        gh.save_ref(ref(name), ids, logits, greedy)
        import gen_fixtures as gf
        rg = gf.router_gaps(model, torch.cat([ids, greedy[:-1]])[None])
        types = sorted({t.tensor_type.name for t in gguf.GGUFReader(gg(name)).tensors})
        print(f"{name}: {os.path.getsize(gg(name))} bytes ({', '.join(types)}); reference: transformers "
              f"on the dequantised file (seed {seed}), logits sd {float(logits.std()):.2f}, greedy "
              f"{greedy.tolist()}, smallest top-1 margin {gap:.3f}, smallest router gap "
              f"{float(rg[rg >= 0].min()) if (rg >= 0).any() else -1:.3f}")
    shutil.rmtree(tmp)
    if extracted:
        shutil.rmtree(os.path.dirname(ll))


if __name__ == "__main__":
    main()
