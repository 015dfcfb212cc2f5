#!/usr/bin/env python3
"""gen_gguf_fixtures.py — tiny random GGUF models in llama.cpp's layout, with transformers' logits.

For each fixture below this writes tests/data/gguf/models/<name>.gguf (tensor names, metadata keys
and the llama-arch q/k row interleaving as llama.cpp's convert_hf_to_gguf.py writes them; the
block formats of a Q4_K_M file: Q4_K, Q5_K, Q6_K, Q8_0, Q4_0 and plain F32/F16) and
<name>.ref.safetensors: the prompt ids, transformers' fp32 logits at every position and its
12 greedy tokens, with transformers loading the very same file (`gguf_file=`), so the reference
shares none of FreeToken-C's GGUF code: its own name mapping, un-permutation and dequantisers.

K-quant blocks are random bytes with small, zero-centring super-block scales (gguf-py cannot
quantise to them; their values are whatever the bytes decode to, which both readers must agree
on); Q8_0 and Q4_0 are quantised from Gaussian weights with gguf-py.

Usage: python3 tools/gen_gguf_fixtures.py [OUT_DIR]   (needs numpy, torch, transformers, gguf)
"""
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q

VOCAB = 320
RNG = np.random.default_rng(20261130)


def kquant_blocks(shape, qt):
    """Random valid blocks of a K-quant for a weight of logical numpy shape (..., cols).
    Q4_K/Q5_K decode to d*sc*q - dmin*m with sc, m, q uniform: dmin = d * mean(q) centres the
    weights on zero (a model with biased weights is chaotic, and any rounding then shows)."""
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    *lead, cols = shape
    nb = cols // bs
    raw = RNG.integers(0, 256, size=(*lead, nb, ts), dtype=np.uint8)
    d = RNG.uniform(4.0e-5, 8.0e-5, size=(*lead, nb)).astype(np.float32)
    if qt in (Q.Q4_K, Q.Q5_K):  # d, dmin first
        qmean = 7.5 if qt == Q.Q4_K else 15.5
        dmin = d * qmean * RNG.uniform(0.95, 1.05, size=d.shape)
        raw[..., 0:2] = d.astype(np.float16).view(np.uint8).reshape(*lead, nb, 2)
        raw[..., 2:4] = dmin.astype(np.float16).view(np.uint8).reshape(*lead, nb, 2)
    elif qt == Q.Q6_K:  # ql[128] qh[64] scales[16] d: d * sc * (q - 32), already centred
        raw[..., 192:208] = RNG.integers(-20, 21, size=(*lead, nb, 16), dtype=np.int8).view(np.uint8)
        raw[..., 208:210] = (d * 2).astype(np.float16).view(np.uint8).reshape(*lead, nb, 2)
    return raw.reshape(*lead, nb * ts)


def tensor(shape, qt, std=0.05):
    """(bytes-or-floats to write, ggml type)."""
    if qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        return kquant_blocks(shape, qt), qt
    w = (RNG.standard_normal(shape) * std).astype(np.float32)
    if qt == Q.F32:
        return w, None
    if qt == Q.F16:
        return w.astype(np.float16), None
    return gguf.quants.quantize(w, qt), qt


def norm(n):
    return (1.0 + 0.1 * RNG.standard_normal(n)).astype(np.float32), None


def permute(w_bytes_or_f, n_head, qt):
    """llama.cpp's q/k interleave, on rows (valid for any row format: rows move whole)."""
    rows = w_bytes_or_f.shape[0]
    hd = rows // n_head
    idx = np.arange(rows).reshape(n_head, 2, hd // 2).swapaxes(1, 2).reshape(rows)
    return w_bytes_or_f[idx]


FIXTURES = {
    # Qwen2.5-style: q/k/v biases, tied embeddings, the Q4_K_M mix of formats
    "qwen2_q4km": dict(arch="qwen2", H=256, heads=4, kv=2, hd=64, L=2, I=512, tied=True,
                       types=dict(embd=Q.Q8_0, q=Q.Q4_K, k=Q.Q4_K, v=Q.Q6_K, o=Q.Q5_K,
                                  gate=Q.Q4_K, up=Q.Q4_K, down=Q.Q6_K),
                       bias=True, theta=1000000.0, split=12),
    # Llama: q/k rows interleaved by the converter; Q4_0 / Q8_0 and an F16 head
    "llama_q40": dict(arch="llama", H=256, heads=4, kv=2, hd=64, L=2, I=256, tied=False,
                      types=dict(embd=Q.F16, q=Q.Q4_0, k=Q.Q4_0, v=Q.Q8_0, o=Q.Q4_0,
                                 gate=Q.Q8_0, up=Q.Q8_0, down=Q.Q4_0, out=Q.F16),
                      bias=False, theta=500000.0),
    # Qwen3-MoE: q/k norms, stacked experts in Q4_K (gate/up) and Q6_K (down), F32 router
    "qwen3moe_q4km": dict(arch="qwen3moe", H=256, heads=4, kv=2, hd=64, L=2, I=512, tied=False,
                          E=8, k=2, EI=256,
                          types=dict(embd=Q.Q8_0, q=Q.Q4_K, k=Q.Q4_K, v=Q.Q6_K, o=Q.Q4_K,
                                     egate=Q.Q4_K, eup=Q.Q4_K, edown=Q.Q6_K, out=Q.Q6_K),
                          bias=False, qknorm=True, theta=1000000.0,
                          # transformers' GGUF reader skips these two keys (it relies on the
                          # Qwen3MoeConfig defaults, 768 and False); llama.cpp reads the width
                          # and always renormalises qwen3moe's top-k, so the reference says so
                          hf=dict(moe_intermediate_size=256, norm_topk_prob=True)),
    # Qwen2-MoE: q/k/v biases, a shared expert with a sigmoid gate whose GGUF weight is a vector
    # (ffn_gate_inp_shexp [H]); Q8_0 experts, Q4_0 shared expert
    "qwen2moe_q8": dict(arch="qwen2moe", H=256, heads=4, kv=2, hd=64, L=2, I=512, tied=False,
                        E=3, k=2, EI=128, SI=256,
                        types=dict(embd=Q.Q8_0, q=Q.Q8_0, k=Q.Q8_0, v=Q.Q8_0, o=Q.Q8_0,
                                   egate=Q.Q8_0, eup=Q.Q8_0, edown=Q.Q8_0, sgate=Q.Q4_0,
                                   sup=Q.Q4_0, sdown=Q.Q4_0, out=Q.Q8_0),
                        bias=True, theta=1000000.0,
                        # transformers' reader skips the expert widths (llama.cpp: qwen2moe
                        # does not renormalise its top-k, transformers' default too)
                        hf=dict(moe_intermediate_size=128, shared_expert_intermediate_size=256)),
}


class Recorder:
    """Records GGUFWriter calls so one model can be written whole and split into shards."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name, a, k))

    def write(self, path, arch, split_max_tensors=0):
        w = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
        for name, a, k in self.calls:
            getattr(w, name)(*a, **k)
        finish(w)


def build(name, spec, out_dir):
    arch = spec["arch"]
    path = os.path.join(out_dir, name + ".gguf")
    w = Recorder()
    H, heads, kv, hd, L, I = (spec[k] for k in ("H", "heads", "kv", "hd", "L", "I"))
    w.add_name(name)
    w.add_block_count(L)
    w.add_context_length(512)
    w.add_embedding_length(H)
    w.add_feed_forward_length(I)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(spec["theta"])
    if hd != H // heads:
        w.add_key_length(hd)
        w.add_value_length(hd)
    if "E" in spec:
        w.add_expert_count(spec["E"])
        w.add_expert_used_count(spec["k"])
        w.add_expert_feed_forward_length(spec["EI"])
    if "SI" in spec:
        w.add_expert_shared_feed_forward_length(spec["SI"])
    # a byte-level vocabulary: enough for transformers to build its tokenizer object
    toks = [bytes([b]).decode("latin-1") for b in range(256)] + [f"<x{i}>" for i in range(VOCAB - 256)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_types([1] * VOCAB)
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    t = spec["types"]

    def add(tname, data_qt):
        data, qt = data_qt
        if qt is None:
            w.add_tensor(tname, data)
        else:
            w.add_tensor(tname, data, raw_dtype=qt)

    add("token_embd.weight", tensor((VOCAB, H), t["embd"]))
    add("output_norm.weight", norm(H))
    if not spec["tied"]:
        add("output.weight", tensor((VOCAB, H), t.get("out", Q.Q6_K)))
    for l in range(L):
        p = f"blk.{l}."
        add(p + "attn_norm.weight", norm(H))
        add(p + "ffn_norm.weight", norm(H))
        qd, kd = heads * hd, kv * hd
        wq, tq = tensor((qd, H), t["q"])
        wk, tk = tensor((kd, H), t["k"])
        if arch == "llama":  # the converter's interleave; transformers undoes it on load
            wq, wk = permute(wq, heads, tq), permute(wk, kv, tk)
        add(p + "attn_q.weight", (wq, tq))
        add(p + "attn_k.weight", (wk, tk))
        add(p + "attn_v.weight", tensor((kd, H), t["v"]))
        add(p + "attn_output.weight", tensor((H, qd), t["o"]))
        if spec.get("bias"):
            add(p + "attn_q.bias", tensor((qd,), Q.F32, 0.1))
            add(p + "attn_k.bias", tensor((kd,), Q.F32, 0.1))
            add(p + "attn_v.bias", tensor((kd,), Q.F32, 0.1))
        if spec.get("qknorm"):
            add(p + "attn_q_norm.weight", norm(hd))
            add(p + "attn_k_norm.weight", norm(hd))
        if "E" in spec:
            E, EI = spec["E"], spec["EI"]
            add(p + "ffn_gate_inp.weight", tensor((E, H), Q.F32, 0.5))
            add(p + "ffn_gate_exps.weight", tensor((E, EI, H), t["egate"]))
            add(p + "ffn_up_exps.weight", tensor((E, EI, H), t["eup"]))
            add(p + "ffn_down_exps.weight", tensor((E, H, EI), t["edown"]))
            if "SI" in spec:
                SI = spec["SI"]
                add(p + "ffn_gate_inp_shexp.weight", tensor((H,), Q.F32, 0.5))
                add(p + "ffn_gate_shexp.weight", tensor((SI, H), t["sgate"]))
                add(p + "ffn_up_shexp.weight", tensor((SI, H), t["sup"]))
                add(p + "ffn_down_shexp.weight", tensor((H, SI), t["sdown"]))
        else:
            add(p + "ffn_gate.weight", tensor((I, H), t["gate"]))
            add(p + "ffn_up.weight", tensor((I, H), t["up"]))
            add(p + "ffn_down.weight", tensor((H, I), t["down"]))
    w.write(path, arch)
    if spec.get("split"):  # the same model as llama.cpp's gguf-split shards, in their own folder
        d = os.path.join(out_dir, name + "_split")
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        w.write(os.path.join(d, name + ".gguf"), arch, split_max_tensors=spec["split"])
    return path


def reference(path, out_dir, name, overrides):
    import torch
    from transformers import AutoModelForCausalLM
    from safetensors.torch import save_file

    d, f = os.path.split(path)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                 **overrides)
    model.eval()
    ids = torch.tensor([[int(x) for x in RNG.integers(3, VOCAB, size=24)]])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
        gen = model.generate(ids, max_new_tokens=12, do_sample=False, min_new_tokens=12)
    greedy = gen[0, ids.shape[1]:].to(torch.int32)
    save_file({"ids": ids[0].to(torch.int32).contiguous(), "logits": logits.contiguous(),
               "greedy": greedy.contiguous()}, os.path.join(out_dir, name + ".ref.safetensors"))
    print(f"{name}: {os.path.getsize(path)} bytes, logits |max| {logits.abs().max():.3f}, "
          f"greedy {greedy.tolist()}")


def hf_writer(path, arch, cfg, rope_theta):
    """A GGUFWriter with the keys every model takes from its transformers config.json."""
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(rope_theta)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    return w


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gpt_oss_gguf(out_dir):
    """tests/data/models/gpt_oss_mxfp4 rewritten the way llama.cpp's converter writes gpt-oss:
    arch "gpt-oss", the MoE's input norm as post_attention_norm, attn_sinks, the router as
    ffn_gate_inp (+ bias), gate and up experts split apart (gpt-oss interleaves their rows) and
    repacked into GGML MXFP4 blocks (scale byte, then byte j = element j low / j + 16 high),
    expert biases as ffn_{gate,up,down}_exps.bias. The weights are the safetensors fixture's,
    so its transformers reference.safetensors is this file's reference too."""
    import json
    import shutil
    from safetensors.torch import load_file
    src = os.path.join(os.path.dirname(out_dir), "..", "models", "gpt_oss_mxfp4")
    cfg = json.load(open(os.path.join(src, "config.json")))
    t = {k: (v.float() if v.is_floating_point() else v).numpy() for k, v in
         load_file(os.path.join(src, "model.safetensors")).items()}
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    L, E = cfg["num_hidden_layers"], cfg["num_local_experts"]
    path = os.path.join(out_dir, "gpt_oss_mxfp4.gguf")
    w = hf_writer(path, "gpt-oss", cfg, float(cfg["rope_theta"]))
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])
    w.add_sliding_window(cfg["sliding_window"])
    rs = cfg["rope_scaling"]
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rs["factor"])
    w.add_rope_scaling_orig_ctx_len(rs["original_max_position_embeddings"])

    def mxfp4(blocks, scales):  # [E, rows, nb, 16] + [E, rows, nb] -> GGML MXFP4 bytes
        lo, hi = blocks & 15, blocks >> 4
        el = np.stack([lo, hi], -1).reshape(*blocks.shape[:-1], 32)  # element order
        q = el[..., :16] | (el[..., 16:] << 4)
        return np.concatenate([scales[..., None], q], -1).reshape(*blocks.shape[:2], -1)

    w.add_tensor("token_embd.weight", f32(t["model.embed_tokens.weight"]))
    w.add_tensor("output_norm.weight", f32(t["model.norm.weight"]))
    w.add_tensor("output.weight", f32(t["lm_head.weight"]))
    for l in range(L):
        p, b = f"blk.{l}.", f"model.layers.{l}."
        w.add_tensor(p + "attn_norm.weight", f32(t[b + "input_layernorm.weight"]))
        w.add_tensor(p + "post_attention_norm.weight", f32(t[b + "post_attention_layernorm.weight"]))
        for g, h in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")):
            w.add_tensor(p + g + ".weight", f32(t[b + "self_attn." + h + ".weight"]))
            w.add_tensor(p + g + ".bias", f32(t[b + "self_attn." + h + ".bias"]))
        w.add_tensor(p + "attn_sinks.weight", f32(t[b + "self_attn.sinks"]))
        w.add_tensor(p + "ffn_gate_inp.weight", f32(t[b + "mlp.router.weight"]))
        w.add_tensor(p + "ffn_gate_inp.bias", f32(t[b + "mlp.router.bias"]))
        x = b + "mlp.experts."
        gb, gs = t[x + "gate_up_proj_blocks"], t[x + "gate_up_proj_scales"]
        w.add_tensor(p + "ffn_gate_exps.weight", mxfp4(gb[:, 0::2], gs[:, 0::2]), raw_dtype=Q.MXFP4)
        w.add_tensor(p + "ffn_up_exps.weight", mxfp4(gb[:, 1::2], gs[:, 1::2]), raw_dtype=Q.MXFP4)
        w.add_tensor(p + "ffn_down_exps.weight", mxfp4(t[x + "down_proj_blocks"], t[x + "down_proj_scales"]),
                     raw_dtype=Q.MXFP4)
        gub = f32(t[x + "gate_up_proj_bias"])
        w.add_tensor(p + "ffn_gate_exps.bias", np.ascontiguousarray(gub[:, 0::2]))
        w.add_tensor(p + "ffn_up_exps.bias", np.ascontiguousarray(gub[:, 1::2]))
        w.add_tensor(p + "ffn_down_exps.bias", f32(t[x + "down_proj_bias"]))
    finish(w)
    shutil.copy(os.path.join(src, "reference.safetensors"), os.path.join(out_dir, "gpt_oss_mxfp4.ref.safetensors"))
    print(f"gpt_oss_mxfp4: {os.path.getsize(path)} bytes (reference: the safetensors fixture's)")


def gemma3_gguf(out_dir):
    """tests/data/models/gemma3 rewritten the way llama.cpp's converter writes Gemma 3: arch
    "gemma3", 1 added to every norm weight (llama.cpp computes x * w), the MLP's input norm as
    ffn_norm and its output norm as post_ffw_norm, the attention's output norm as
    post_attention_norm, tied embeddings (no output.weight), F32 tensors. The reference is the
    safetensors fixture's (same weights); its layer_types follow llama.cpp's rule (every sixth
    layer global) and its query_pre_attn_scalar equals head_dim, as llama.cpp assumes."""
    import json
    import shutil
    from safetensors.torch import load_file
    src = os.path.join(os.path.dirname(out_dir), "..", "models", "gemma3")
    cfg = json.load(open(os.path.join(src, "config.json")))
    t = {k: v.float().numpy() for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
    L = cfg["num_hidden_layers"]
    full = cfg["rope_parameters"]["full_attention"]
    path = os.path.join(out_dir, "gemma3.gguf")
    w = hf_writer(path, "gemma3", cfg, full["rope_theta"])
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(full["factor"])
    w.add_sliding_window(cfg["sliding_window"])
    norm = lambda k: np.ascontiguousarray(t[k] + 1.0, dtype=np.float32)
    mat = lambda k: np.ascontiguousarray(t[k], dtype=np.float32)
    w.add_tensor("token_embd.weight", mat("model.embed_tokens.weight"))
    w.add_tensor("output_norm.weight", norm("model.norm.weight"))
    for l in range(L):
        p, b = f"blk.{l}.", f"model.layers.{l}."
        for g, h in (("attn_norm", "input_layernorm"), ("post_attention_norm", "post_attention_layernorm"),
                     ("ffn_norm", "pre_feedforward_layernorm"), ("post_ffw_norm", "post_feedforward_layernorm"),
                     ("attn_q_norm", "self_attn.q_norm"), ("attn_k_norm", "self_attn.k_norm")):
            w.add_tensor(p + g + ".weight", norm(b + h + ".weight"))
        for g, h in (("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
                     ("attn_output", "self_attn.o_proj"), ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                     ("ffn_down", "mlp.down_proj")):
            w.add_tensor(p + g + ".weight", mat(b + h + ".weight"))
    finish(w)
    shutil.copy(os.path.join(src, "reference.safetensors"), os.path.join(out_dir, "gemma3.ref.safetensors"))
    print(f"gemma3: {os.path.getsize(path)} bytes (reference: the safetensors fixture's)")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "gguf", "models")
    os.makedirs(out_dir, exist_ok=True)
    for name, spec in FIXTURES.items():
        reference(build(name, spec, out_dir), out_dir, name, spec.get("hf", {}))
    gpt_oss_gguf(out_dir)
    gemma3_gguf(out_dir)


if __name__ == "__main__":
    main()
