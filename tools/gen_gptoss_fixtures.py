#!/usr/bin/env python3
"""Builds the tiny gpt-oss reference checkpoints under tests/data/models/ (issue 9 groundwork):

  gpt_oss        GptOssForCausalLM, every weight bf16, in the layout transformers 5.x
                 save_pretrained writes for a bf16 gpt-oss (experts fused and transposed:
                 gate_up_proj [E, H, 2I] with gate/up interleaved in the columns, down_proj [E, I, H]);
                 config.json as transformers 5.x writes it (rope_parameters).
  gpt_oss_mxfp4  the same weights, but the experts quantised to MXFP4 and stored as
                 openai/gpt-oss-20b stores them (gate_up_proj_blocks u8 [E, 2I, H/32, 16],
                 gate_up_proj_scales u8 [E, 2I, H/32], down_proj_blocks u8 [E, H, I/32, 16],
                 down_proj_scales u8 [E, H, I/32], biases bf16); config.json spelt as the real
                 model's (4.x rope_scaling + top-level rope_theta, quantization_config mxfp4 with
                 the real modules_to_not_convert, experts_per_token, no swiglu_alpha).

Shapes: vocab 384, hidden 32, 3 layers (sliding window 8 / full / sliding window 8 via layer_types),
6 q heads / 3 kv heads of head_dim 16, 5 experts top-2 of intermediate 64: hidden 32, kv width 48,
intermediate 64, q width 96 and 2*intermediate 128 all differ, so no matrix is square and no size
can stand in for another (K/32 is 1 for gate_up and 2 for down),
attention sinks, q/k/v/o biases, router bias, expert biases, swiglu_limit 7.0 / alpha 1.702,
YaRN (theta 150000, factor 32, beta_fast 32, beta_slow 1, original_max_position_embeddings 4096,
truncate false: the real model's). Weights are drawn so that every feature moves the logits
(sinks N(0.5, 1), router logits std ~3 plus a N(0, 1) bias, gate/up rows with scales 2^U(-1.5, 1.5)
so the swiglu clamps engage), rounded to bf16.

Reference: transformers itself in fp32 with eager attention and the eager (per-expert loop) experts.
`reference.safetensors` holds `ids` [24] i32 (the prompt), `logits` [24, 384] f32 (all positions,
teacher-forced) and `greedy` [12] i32 (transformers' greedy continuation, eos ignored). For
gpt_oss_mxfp4 the reference is the mxfp4 checkpoint loaded by transformers with
Mxfp4Config(dequantize=True) (its own unpacking of the blocks, on CPU); the script checks that this
equals the bf16 model with its experts overwritten by this script's own dequantisation.

MXFP4 quantiser (ours; the OCP MX v1.0 rule): per 32 consecutive elements along K (the input
dimension), shared exponent e = floor(log2(amax)) - 2 (2 = emax of E2M1), scale code E8M0 = e + 127
(an all-zero block gets code 0); every element becomes the nearest E2M1 value of x / 2^e (ties to
the even code, |x / 2^e| >= 6 saturates to +-6, negative values that round to zero keep their sign:
code 0x8). Element 2j of a block is the low nibble of byte j, element 2j+1 the high nibble.

    python3 tools/gen_gptoss_fixtures.py [--out tests/data/models]   writes both fixtures
    python3 tools/gen_gptoss_fixtures.py --check [--out ...]         reloads them with transformers,
        checks the logits/greedy reproduce (printing max |logit| and the greedy tokens), the layout
        facts, runs tests/data/README.md's forward pass as float64 numpy on the files (spec_forward)
        against transformers, and measures how much each feature moves the logits when done wrong

The seed is the first from 4242 whose routing (2nd vs 3rd router logit) and greedy choices (top-1 vs
top-2) are well separated in both fixtures and whose swiglu clamps all engage (4244).
"""
import argparse
import copy
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixture_util import Checks, bf16, greedy_gap, greedy_of, layout  # noqa: E402
T_PROMPT, N_GREEDY, VOCAB = 24, 12, 384
H, INTER, E, TOPK, NQ, NKV, HD = 32, 64, 5, 2, 6, 3, 16
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention"]
YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "original_max_position_embeddings": 4096, "truncate": False}
CONFIG = dict(vocab_size=VOCAB, hidden_size=H, intermediate_size=INTER, num_hidden_layers=len(LAYER_TYPES),
              num_attention_heads=NQ, num_key_value_heads=NKV, head_dim=HD, num_local_experts=E,
              num_experts_per_tok=TOPK, sliding_window=8, layer_types=LAYER_TYPES,
              max_position_embeddings=131072, rms_norm_eps=1e-5, rope_parameters=YARN, swiglu_limit=7.0,
              swiglu_alpha=1.702, attention_bias=True, tie_word_embeddings=False, bos_token_id=1,
              eos_token_id=2, pad_token_id=None, router_aux_loss_coef=0.9)
# modules_to_not_convert of openai/gpt-oss-20b and -120b config.json
NOT_CONVERT = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]
SEED = 4242
MIN_ROUTER_GAP, MIN_GREEDY_GAP = 2e-3, 1e-2

# ----------------------------------------------------------------------------------------- MXFP4

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


def e2m1_encode(y):
    """Nearest E2M1 code (4 bits, sign in bit 3) of each float64 in y; ties go to the even code
    (the candidate whose mantissa bit, bit 0 of the code, is 0); |y| > 6 saturates to 6."""
    mag = np.minimum(np.abs(y), 6.0)
    d = np.abs(mag[..., None] - E2M1)                   # [..., 8]
    best = d.min(-1, keepdims=True)
    tie = (d == best)
    # among the tied candidates prefer an even code (code & 1 == 0)
    even = tie & ((np.arange(8) & 1) == 0)
    code = np.where(even.any(-1), even.argmax(-1), tie.argmax(-1)).astype(np.uint8)
    return code | (np.signbit(y).astype(np.uint8) << 3)


def mxfp4_quantize(w):
    """w: float array [..., R, K] (K % 32 == 0), quantised along K. Returns blocks u8
    [..., R, K/32, 16] and scales u8 [..., R, K/32] (the gpt-oss checkpoint layout)."""
    w = np.asarray(w, dtype=np.float64)
    assert w.shape[-1] % 32 == 0
    g = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = np.abs(g).max(-1)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 2, -127)
    e = np.clip(e, -127, 127)
    scales = (e + 127).astype(np.uint8)
    codes = e2m1_encode(g / np.exp2(e)[..., None])      # exact: dividing by a power of two
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)  # element 2j low nibble, 2j+1 high
    return np.ascontiguousarray(blocks, dtype=np.uint8), np.ascontiguousarray(scales)


def mxfp4_dequantize(blocks, scales):
    """Inverse layout of mxfp4_quantize: [..., R, G, 16] + [..., R, G] -> float32 [..., R, G*32]."""
    lut = np.concatenate([E2M1, -E2M1])
    lo, hi = lut[blocks & 0xF], lut[blocks >> 4]
    v = np.stack([lo, hi], -1).reshape(*blocks.shape[:-1], 32)
    v = v * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return v.reshape(*v.shape[:-2], -1).astype(np.float32)


def experts_to_mxfp4(gate_up, down):
    """Module tensors (gate_up_proj [E, H, 2I], down_proj [E, I, H], float) -> the checkpoint's
    blocks/scales (rows = output features, K = input features) and the dequantised module tensors."""
    gu_b, gu_s = mxfp4_quantize(gate_up.transpose(0, 2, 1))   # [E, 2I, H] rows: g0 u0 g1 u1 ...
    dn_b, dn_s = mxfp4_quantize(down.transpose(0, 2, 1))      # [E, H, I]
    gu_deq = mxfp4_dequantize(gu_b, gu_s).transpose(0, 2, 1)
    dn_deq = mxfp4_dequantize(dn_b, dn_s).transpose(0, 2, 1)
    return (gu_b, gu_s, dn_b, dn_s), (np.ascontiguousarray(gu_deq), np.ascontiguousarray(dn_deq))

# ----------------------------------------------------------------------------------------- model


def new_model(cfg_kw=CONFIG):
    cfg = transformers.GptOssConfig(**copy.deepcopy(cfg_kw))
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"  # the plain per-expert loop, no grouped_mm
    return transformers.GptOssForCausalLM(cfg).eval().to(torch.float32)



def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)

    def rn(*shape):
        return torch.randn(shape, generator=g)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                v = 1.0 + 0.1 * rn(*p.shape)
            elif name.endswith("sinks"):
                v = 0.5 + rn(*p.shape)
            elif name.endswith("router.bias"):
                v = rn(*p.shape)
            elif name.endswith("router.weight"):
                v = 3.0 / p.shape[-1] ** 0.5 * rn(*p.shape)   # router logits std ~3: no near ties
            elif name.endswith("experts.gate_up_proj"):        # [E, H, 2I], fan-in is dim 1
                col = torch.exp2(3.0 * torch.rand((p.shape[0], 1, p.shape[2]), generator=g) - 1.5)
                v = 1.5 * col / p.shape[1] ** 0.5 * rn(*p.shape)
            elif name.endswith("experts.down_proj"):           # [E, I, H], fan-in is dim 1
                v = 1.0 / p.shape[1] ** 0.5 * rn(*p.shape)
            elif name.endswith("bias"):                        # q/k/v/o and expert biases
                v = 0.3 * rn(*p.shape)
            elif "embed" in name:
                v = rn(*p.shape)
            else:                                              # q/k/v/o_proj, lm_head: [out, in]
                v = 1.0 / p.shape[-1] ** 0.5 * rn(*p.shape)
            p.copy_(bf16(v))


def forward_stats(model, ids):
    """Logits of ids [1, T] plus the routing margins (k-th minus (k+1)-th router logit) and the
    fraction of gate/up values the swiglu clamps touch."""
    gaps, clamp = [], {"gate_hi": 0, "up_hi": 0, "up_lo": 0, "n": 0}
    hooks = []
    for layer in model.model.layers:
        def rhook(mod, inp, out):
            v = out[0].detach().sort(-1, descending=True).values
            gaps.append((v[:, TOPK - 1] - v[:, TOPK]).min().item())
        hooks.append(layer.mlp.router.register_forward_hook(rhook))
        ex = layer.mlp.experts
        orig = type(ex)._apply_gate

        def gate(gu, ex=ex, orig=orig):
            lim = ex.limit
            clamp["gate_hi"] += int((gu[..., ::2] > lim).sum())
            clamp["up_hi"] += int((gu[..., 1::2] > lim).sum())
            clamp["up_lo"] += int((gu[..., 1::2] < -lim).sum())
            clamp["n"] += gu[..., ::2].numel()
            return orig(ex, gu)
        ex._apply_gate = gate
    try:
        with torch.no_grad():
            logits = model(ids).logits[0].float()
    finally:
        for hk in hooks:
            hk.remove()
        for layer in model.model.layers:
            del layer.mlp.experts._apply_gate
    return logits, min(gaps), clamp




def build_model(seed):
    torch.manual_seed(seed)
    model = new_model()
    init_weights(model, seed)
    g = torch.Generator().manual_seed(seed + 1000)
    ids = torch.randint(3, VOCAB, (1, T_PROMPT), generator=g)
    with torch.no_grad():
        s = float(model(ids).logits.std())
        w = model.model.norm.weight
        w.copy_(bf16(w * (2.0 / s)))   # logits std near 2
    return model, ids


def set_experts(model, deq):
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            gu, dn = deq[i]
            layer.mlp.experts.gate_up_proj.copy_(torch.from_numpy(gu))
            layer.mlp.experts.down_proj.copy_(torch.from_numpy(dn))

# ----------------------------------------------------------------------------------------- writing


def save_reference(d, ids, logits, greedy):
    save_file({"ids": ids[0].to(torch.int32).contiguous(), "logits": logits.contiguous(),
               "greedy": greedy.to(torch.int32).contiguous()}, os.path.join(d, "reference.safetensors"))


def real_style_config(model):
    """config.json of gpt_oss_mxfp4: the key set and spelling of openai/gpt-oss-20b's config.json
    (transformers 4.55: rope_theta top level, rope_scaling, experts_per_token,
    initial_context_length, no swiglu_alpha; quantization_config mxfp4) with this model's sizes."""
    c = model.config
    rs = {k: v for k, v in YARN.items() if k != "rope_theta"}
    return {
        "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
        "bos_token_id": c.bos_token_id, "eos_token_id": c.eos_token_id, "experts_per_token": TOPK,
        "head_dim": HD, "hidden_act": "silu", "hidden_size": H, "initial_context_length": 4096,
        "initializer_range": 0.02, "intermediate_size": INTER, "layer_types": LAYER_TYPES,
        "max_position_embeddings": c.max_position_embeddings, "model_type": "gpt_oss",
        "num_attention_heads": NQ, "num_experts_per_tok": TOPK, "num_hidden_layers": len(LAYER_TYPES),
        "num_key_value_heads": NKV, "num_local_experts": E, "output_router_logits": False,
        "pad_token_id": None,
        "quantization_config": {"modules_to_not_convert": NOT_CONVERT, "quant_method": "mxfp4"},
        "rms_norm_eps": c.rms_norm_eps, "rope_scaling": rs, "rope_theta": int(YARN["rope_theta"]),
        "router_aux_loss_coef": 0.9, "sliding_window": c.sliding_window, "swiglu_limit": 7.0,
        "tie_word_embeddings": False, "use_cache": True, "vocab_size": VOCAB,
    }


def load_mxfp4_reference(d):
    """The mxfp4 checkpoint through transformers' own loader: Mxfp4Config(dequantize=True), fp32."""
    return transformers.GptOssForCausalLM.from_pretrained(
        d, quantization_config=transformers.Mxfp4Config(dequantize=True), dtype=torch.float32,
        attn_implementation="eager", experts_implementation="eager").eval()


def generate(out):
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for seed in range(SEED, SEED + 100):
        model, ids = build_model(seed)
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        greedy = greedy_of(model, ids, N_GREEDY)
        ggap, same = greedy_gap(model, ids, greedy)
        # routing margins and clamp counts over every token the engine will see (prompt + greedy)
        _, rgap, clamp = forward_stats(model, torch.cat([ids[0], greedy[:-1]])[None])
        # the quantised twin must be as robust
        qmodel = copy.deepcopy(model)
        packs, deqs = [], []
        for layer in model.model.layers:
            p, dq = experts_to_mxfp4(layer.mlp.experts.gate_up_proj.detach().numpy(),
                                     layer.mlp.experts.down_proj.detach().numpy())
            packs.append(p)
            deqs.append(dq)
        set_experts(qmodel, deqs)
        with torch.no_grad():
            qlogits = qmodel(ids).logits[0].float()
        qgreedy = greedy_of(qmodel, ids, N_GREEDY)
        qggap, qsame = greedy_gap(qmodel, ids, qgreedy)
        _, qrgap, qclamp = forward_stats(qmodel, torch.cat([ids[0], qgreedy[:-1]])[None])
        ok = (min(rgap, qrgap) > MIN_ROUTER_GAP and min(ggap, qggap) > MIN_GREEDY_GAP and same and qsame
              and min(clamp["gate_hi"], clamp["up_hi"], clamp["up_lo"]) > 0)
        print(f"seed {seed}: router gap {rgap:.4f}/{qrgap:.4f}, greedy gap {ggap:.4f}/{qggap:.4f}, "
              f"clamps {clamp}{'' if ok else ' -> next seed'}")
        if ok:
            break
    else:
        sys.exit("no seed gave well-separated routing and greedy choices")

    err = [np.sqrt(((dq - w) ** 2).mean() / (w ** 2).mean())
           for layer, dqs in zip(model.model.layers, deqs)
           for w, dq in zip((layer.mlp.experts.gate_up_proj.detach().numpy(),
                             layer.mlp.experts.down_proj.detach().numpy()), dqs)]
    print(f"MXFP4 relative rms error of the expert weights: {min(err):.3f}..{max(err):.3f}")

    # ---- gpt_oss: bf16, transformers' own save layout
    d = os.path.join(out, "gpt_oss")
    os.makedirs(d, exist_ok=True)
    m16 = copy.deepcopy(model).to(torch.bfloat16)
    m16.save_pretrained(d)
    gc = os.path.join(d, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    save_reference(d, ids, logits, greedy)
    print(f"gpt_oss: logits std {float(logits.std()):.3f} max|logit| {float(logits.abs().max()):.3f}, "
          f"greedy {greedy.tolist()}")

    # ---- gpt_oss_mxfp4: the real checkpoint layout
    d = os.path.join(out, "gpt_oss_mxfp4")
    os.makedirs(d, exist_ok=True)
    sd = {}
    for k, v in m16.state_dict().items():
        if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
            continue
        sd[k] = v.contiguous()
    for i, (gu_b, gu_s, dn_b, dn_s) in enumerate(packs):
        p = f"model.layers.{i}.mlp.experts."
        sd[p + "gate_up_proj_blocks"] = torch.from_numpy(gu_b)
        sd[p + "gate_up_proj_scales"] = torch.from_numpy(gu_s)
        sd[p + "down_proj_blocks"] = torch.from_numpy(dn_b)
        sd[p + "down_proj_scales"] = torch.from_numpy(dn_s)
    assert "lm_head.weight" in sd
    save_file(dict(sorted(sd.items())), os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(real_style_config(model), f, indent=2, sort_keys=True)
        f.write("\n")

    # reference: transformers' own mxfp4 loader (dequantize=True on CPU) ...
    ref = load_mxfp4_reference(d)
    with torch.no_grad():
        rlogits = ref(ids).logits[0].float()
    rgreedy = greedy_of(ref, ids, N_GREEDY)
    # ... which must agree exactly with our dequantisation
    for i, layer in enumerate(ref.model.layers):
        gu, dn = deqs[i]
        assert torch.equal(layer.mlp.experts.gate_up_proj.detach(), torch.from_numpy(gu)), i
        assert torch.equal(layer.mlp.experts.down_proj.detach(), torch.from_numpy(dn)), i
    dl = float((rlogits - qlogits).abs().max())
    assert dl < 1e-4 and torch.equal(rgreedy, qgreedy), (dl, rgreedy, qgreedy)
    save_reference(d, ids, rlogits, rgreedy)
    print(f"gpt_oss_mxfp4: logits std {float(rlogits.std()):.3f} max|logit| {float(rlogits.abs().max()):.3f}, "
          f"greedy {rgreedy.tolist()}; Mxfp4Config(dequantize=True) vs own dequantisation: experts "
          f"bit-identical, max|dlogit| {dl:.1e}; vs the bf16 experts: max|dlogit| "
          f"{float((rlogits - logits).abs().max()):.3f}")
    for name in ("gpt_oss", "gpt_oss_mxfp4"):
        dd = os.path.join(out, name)
        print(f"  {name}: " + ", ".join(f"{f} {os.path.getsize(os.path.join(dd, f))}"
                                        for f in sorted(os.listdir(dd))))

# ----------------------------------------------------------------------------------------- spec


def yarn_inv_freq(theta, dim, factor, omp, beta_fast, beta_slow, truncate):
    """YaRN inverse frequencies and the cos/sin scale, from the formulas (float64)."""
    pos = theta ** (np.arange(0, dim, 2) / dim)
    extra, inter = 1.0 / pos, 1.0 / (factor * pos)

    def corr(rot):
        return dim * math.log(omp / (rot * 2 * math.pi)) / (2 * math.log(theta))
    lo, hi = corr(beta_fast), corr(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(dim // 2) - lo) / (hi - lo), 0, 1)   # 0: extrapolate (keep), 1: interpolate
    inv = inter * ramp + extra * (1 - ramp)
    return inv, 0.1 * math.log(factor) + 1.0


def spec_forward(d, ids):
    """The forward pass as tests/data/README.md writes it, in float64 numpy, straight from the
    fixture's files (either layout): the check that the README is the whole spec."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {k: v.float().numpy().astype(np.float64) if v.dtype != torch.uint8 else v.numpy()
         for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    rope = cfg.get("rope_parameters") or dict(cfg["rope_scaling"], rope_theta=cfg["rope_theta"])
    nq, nkv, hd, k_top = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                          cfg["num_experts_per_tok"])
    lim, alpha, eps = cfg["swiglu_limit"], cfg.get("swiglu_alpha", 1.702), cfg["rms_norm_eps"]
    inv, att = yarn_inv_freq(rope["rope_theta"], hd, rope["factor"], rope["original_max_position_embeddings"],
                             rope["beta_fast"], rope["beta_slow"], rope["truncate"])
    T = len(ids)
    ang = np.arange(T)[:, None] * inv[None]                     # [T, hd/2]
    cos, sin = np.cos(ang) * att, np.sin(ang) * att

    def rms(x, g):
        return g * x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)

    def rot(x):                                                  # [T, heads, hd]: NeoX halves
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        c, s_ = cos[:, None], sin[:, None]
        return np.concatenate([a * c - b * s_, b * c + a * s_], -1)

    x = w["model.embed_tokens.weight"][ids]
    for i, lt in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T + w[p + f"self_attn.{n}_proj.bias"]
                   for n in "qkv")
        q, k, v = rot(q.reshape(T, nq, hd)), rot(k.reshape(T, nkv, hd)), v.reshape(T, nkv, hd)
        ii, jj = np.arange(T)[:, None], np.arange(T)[None]
        allowed = jj <= ii
        if lt == "sliding_attention":
            allowed &= jj > ii - cfg["sliding_window"]
        o = np.empty((T, nq, hd))
        for hh in range(nq):
            kv = hh // (nq // nkv)
            sc = np.where(allowed, q[:, hh] @ k[:, kv].T / math.sqrt(hd), -np.inf)
            sink = w[p + "self_attn.sinks"][hh]
            m = np.maximum(sc.max(-1, keepdims=True), sink)
            e = np.exp(sc - m)
            o[:, hh] = e @ v[:, kv] / (e.sum(-1, keepdims=True) + np.exp(sink - m))
        x = x + o.reshape(T, nq * hd) @ w[p + "self_attn.o_proj.weight"].T + w[p + "self_attn.o_proj.bias"]
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        pe = p + "mlp.experts."
        if pe + "gate_up_proj" in w:                             # bf16: [E, H, 2I], [E, I, H]
            gu_w, dn_w = w[pe + "gate_up_proj"], w[pe + "down_proj"]
        else:                                                    # mxfp4: rows are outputs
            gu_w = mxfp4_dequantize(w[pe + "gate_up_proj_blocks"], w[pe + "gate_up_proj_scales"]
                                    ).astype(np.float64).transpose(0, 2, 1)
            dn_w = mxfp4_dequantize(w[pe + "down_proj_blocks"], w[pe + "down_proj_scales"]
                                    ).astype(np.float64).transpose(0, 2, 1)
        rl = h @ w[p + "mlp.router.weight"].T + w[p + "mlp.router.bias"]
        out = np.zeros_like(h)
        for t in range(T):
            top = np.argsort(-rl[t], kind="stable")[:k_top]
            pr = np.exp(rl[t, top] - rl[t, top].max())
            pr /= pr.sum()
            for e_, wt in zip(top, pr):
                gu = h[t] @ gu_w[e_] + w[pe + "gate_up_proj_bias"][e_]
                gate, up = np.minimum(gu[0::2], lim), np.clip(gu[1::2], -lim, lim)
                act = (up + 1) * gate / (1 + np.exp(-alpha * gate))
                out[t] += wt * (act @ dn_w[e_] + w[pe + "down_proj_bias"][e_])
        x = x + out
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T

# ----------------------------------------------------------------------------------------- check



def check(out):
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    expect = Checks()

    # ---- gpt_oss: reload the bf16 checkpoint in fp32
    d16 = os.path.join(out, "gpt_oss")
    ref16 = load_file(os.path.join(d16, "reference.safetensors"))
    ids = ref16["ids"].long()[None]
    m = transformers.GptOssForCausalLM.from_pretrained(d16, dtype=torch.float32, attn_implementation="eager",
                                                       experts_implementation="eager").eval()
    with torch.no_grad():
        lg = m(ids).logits[0].float()
    g = greedy_of(m, ids, N_GREEDY)
    err = float((lg - ref16["logits"]).abs().max())
    print(f"gpt_oss: max|logit| {float(ref16['logits'].abs().max()):.3f}, greedy {g.tolist()}")
    expect(err < 1e-4, f"logits reproduce (max|dlogit| {err:.1e})")
    expect(torch.equal(g.to(torch.int32), ref16["greedy"]), "greedy tokens reproduce")
    lay = layout(os.path.join(d16, "model.safetensors"))
    p = "model.layers.0.mlp.experts."
    expect(lay[p + "gate_up_proj"] == ("BF16", [E, H, 2 * INTER]) and
           lay[p + "down_proj"] == ("BF16", [E, INTER, H]) and
           lay[p + "gate_up_proj_bias"] == ("BF16", [E, 2 * INTER]) and
           lay[p + "down_proj_bias"] == ("BF16", [E, H]) and
           all(dt == "BF16" for dt, _ in lay.values()),
           "bf16 layout: experts gate_up_proj [E, H, 2I], down_proj [E, I, H], all bf16")

    # ---- gpt_oss_mxfp4
    dq = os.path.join(out, "gpt_oss_mxfp4")
    refq = load_file(os.path.join(dq, "reference.safetensors"))
    mq = load_mxfp4_reference(dq)
    with torch.no_grad():
        lq = mq(ids).logits[0].float()
    gq = greedy_of(mq, ids, N_GREEDY)
    err = float((lq - refq["logits"]).abs().max())
    print(f"gpt_oss_mxfp4: max|logit| {float(refq['logits'].abs().max()):.3f}, greedy {gq.tolist()}")
    expect(err < 1e-4, f"logits reproduce with Mxfp4Config(dequantize=True) (max|dlogit| {err:.1e})")
    expect(torch.equal(gq.to(torch.int32), refq["greedy"]), "greedy tokens reproduce")
    expect(torch.equal(refq["ids"], ref16["ids"]), "same prompt as gpt_oss")
    layq = layout(os.path.join(dq, "model.safetensors"))
    expect(layq[p + "gate_up_proj_blocks"] == ("U8", [E, 2 * INTER, H // 32, 16]) and
           layq[p + "gate_up_proj_scales"] == ("U8", [E, 2 * INTER, H // 32]) and
           layq[p + "down_proj_blocks"] == ("U8", [E, H, INTER // 32, 16]) and
           layq[p + "down_proj_scales"] == ("U8", [E, H, INTER // 32]) and
           layq[p + "gate_up_proj_bias"] == ("BF16", [E, 2 * INTER]) and
           layq[p + "down_proj_bias"] == ("BF16", [E, H]),
           "mxfp4 layout: blocks [E, rows, K/32, 16] u8, scales [E, rows, K/32] u8, biases bf16")
    nl = len(LAYER_TYPES)
    expect(len(lay) == 17 * nl + 3 and len(layq) == 19 * nl + 3,
           f"tensor count: bf16 17 per layer + 3 ({len(lay)}), mxfp4 19 per layer + 3 ({len(layq)}; "
           "gpt-oss-20b: 19 x 24 + 3 = 459)")
    expect({k: v for k, v in lay.items() if not k.endswith(("experts.gate_up_proj", "experts.down_proj"))} ==
           {k: v for k, v in layq.items() if not k.endswith(("_blocks", "_scales"))},
           "the other tensors (expert biases included) agree in name, dtype, shape between the fixtures")
    s16, sq_ = load_file(os.path.join(d16, "model.safetensors")), load_file(os.path.join(dq, "model.safetensors"))
    expect(all(torch.equal(s16[k], sq_[k]) for k in sq_ if k in s16), "... and in value")
    # our dequantisation (low nibble first, 2^(s-127), rows transposed) == transformers' own
    sq = load_file(os.path.join(dq, "model.safetensors"))
    own_ok = True
    for i, layer in enumerate(mq.model.layers):
        pp = f"model.layers.{i}.mlp.experts."
        gu = mxfp4_dequantize(sq[pp + "gate_up_proj_blocks"].numpy(), sq[pp + "gate_up_proj_scales"].numpy())
        dn = mxfp4_dequantize(sq[pp + "down_proj_blocks"].numpy(), sq[pp + "down_proj_scales"].numpy())
        own_ok &= np.array_equal(layer.mlp.experts.gate_up_proj.detach().numpy(), gu.transpose(0, 2, 1))
        own_ok &= np.array_equal(layer.mlp.experts.down_proj.detach().numpy(), dn.transpose(0, 2, 1))
    expect(own_ok, "transformers' dequantised experts == ours: element 2j low nibble, x 2^(scale-127), "
           "blocks row r = module column r")
    # swapped nibbles would give other weights
    blk = sq[p + "gate_up_proj_blocks"].numpy()
    sw = mxfp4_dequantize(((blk >> 4) | (blk << 4)).astype(np.uint8), sq[p + "gate_up_proj_scales"].numpy())
    expect(not np.array_equal(sw.transpose(0, 2, 1), mq.model.layers[0].mlp.experts.gate_up_proj.detach().numpy()),
           "high-nibble-first would read different weights")
    codes = np.concatenate([np.concatenate([(sq[k].numpy() & 0xF).ravel(), (sq[k].numpy() >> 4).ravel()])
                            for k in sq if k.endswith("_blocks")])
    scales = np.concatenate([sq[k].numpy().ravel() for k in sq if k.endswith("_scales")])
    print(f"  info  E2M1 codes used: {sorted(set(codes.tolist()))}; E8M0 scales {scales.min()}..{scales.max()}")
    # the unquantised bf16 experts quantise to exactly these blocks (the quantiser is deterministic)
    (b, s, _, _), _ = experts_to_mxfp4(m.model.layers[0].mlp.experts.gate_up_proj.detach().numpy(),
                                       m.model.layers[0].mlp.experts.down_proj.detach().numpy())
    expect(np.array_equal(b, blk) and np.array_equal(s, sq[p + "gate_up_proj_scales"].numpy()),
           "gpt_oss's bf16 experts quantise to gpt_oss_mxfp4's blocks")
    cq = json.load(open(os.path.join(dq, "config.json")))
    expect(cq["quantization_config"] == {"modules_to_not_convert": NOT_CONVERT, "quant_method": "mxfp4"}
           and "rope_scaling" in cq and "rope_parameters" not in cq,
           "mxfp4 config.json: quantization_config and 4.x rope_scaling spelling as the real model")
    rp = mq.config.rope_parameters
    expect(rp["rope_type"] == "yarn" and rp["rope_theta"] == 150000 and rp["truncate"] is False and
           mq.config.swiglu_alpha == 1.702, "transformers reads that config as YaRN theta 150000, "
           "truncate false, swiglu_alpha defaulting to 1.702")

    # ---- the README's spec, run in float64 numpy on the files, against transformers' logits
    for name, ref in (("gpt_oss", ref16), ("gpt_oss_mxfp4", refq)):
        sl = spec_forward(os.path.join(out, name), ref["ids"].long().numpy())
        e_ = float(np.abs(sl - ref["logits"].numpy()).max())
        expect(e_ < 1e-4, f"{name}: the README's forward pass (numpy float64, own YaRN/sinks/window/"
               f"router/swiglu/MXFP4 code) matches transformers: max|dlogit| {e_:.1e}")

    # ---- sensitivity: what each feature does to the gpt_oss logits (all must exceed 1e-3 by far)
    print("sensitivity of gpt_oss's logits (max|dlogit| when a feature is done wrong):")
    base = ref16["logits"]

    def moved(mod):
        with torch.no_grad():
            return float((mod(ids).logits[0].float() - base).abs().max())

    def variant(fn):
        v = copy.deepcopy(m)
        fn(v)
        return moved(v)

    def no_sinks(v):
        for layer in v.model.layers:
            layer.self_attn.sinks.data.fill_(-float("inf"))

    def no_window(v):
        v.config.layer_types = ["full_attention"] * len(LAYER_TYPES)

    def window_9(v):
        v.config.sliding_window = 9

    def rope(**kw):
        def fn(v):
            c = copy.deepcopy(v.config)
            c.rope_parameters = dict(c.rope_parameters, **kw)
            v.model.rotary_emb = type(v.model.rotary_emb)(c)
        return fn

    def no_clamp(v):
        for layer in v.model.layers:
            layer.mlp.experts.limit = float("inf")

    def gate_up_halves(v):   # reading [gate | up] halves instead of interleaved columns
        for layer in v.model.layers:
            w = layer.mlp.experts.gate_up_proj.data
            b = layer.mlp.experts.gate_up_proj_bias.data
            perm = torch.arange(2 * INTER).reshape(2, INTER).t().reshape(-1)
            w.copy_(w[..., perm].clone())
            b.copy_(b[..., perm].clone())

    def softmax_all(v):      # softmax over all experts, then top-k (not renormalised)
        for layer in v.model.layers:
            r = layer.mlp.router

            def fwd(hs, r=r):
                lg = torch.nn.functional.linear(hs, r.weight, r.bias)
                pr = lg.softmax(-1)
                val, idx = pr.topk(r.top_k, -1)
                return lg, val, idx
            r.forward = fwd

    def no_router_bias(v):
        for layer in v.model.layers:
            layer.mlp.router.bias.data.zero_()

    def no_up_plus_one(v):
        for layer in v.model.layers:
            ex = layer.mlp.experts

            def ag(gu, ex=ex):
                gate, up = gu[..., ::2].clamp(max=ex.limit), gu[..., 1::2].clamp(-ex.limit, ex.limit)
                return up * gate * torch.sigmoid(gate * ex.alpha)
            ex._apply_gate = ag

    def alpha_1(v):
        for layer in v.model.layers:
            layer.mlp.experts.alpha = 1.0

    def rope_pairs(v):       # rotating (x[2i], x[2i+1]) pairs (GPT-J) instead of the halves (NeoX)
        def fwd(ids_, orig=v.forward):
            mg = transformers.models.gpt_oss.modeling_gpt_oss
            keep = mg._apply_rotary_emb

            def pairs(x, cos, sin):
                a, b = x[..., 0::2], x[..., 1::2]
                return torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2)
            mg._apply_rotary_emb = pairs
            try:
                return orig(ids_)
            finally:
                mg._apply_rotary_emb = keep
        v.forward = fwd

    cases = [("RoPE on adjacent pairs, not halves", rope_pairs), ("no sinks", no_sinks),
             ("no sliding window", no_window), ("window 9 instead of 8", window_9),
             ("YaRN truncate true", rope(truncate=True)), ("YaRN attention_factor 1", rope(attention_factor=1.0)),
             ("plain RoPE (no YaRN)", rope(rope_type="default")), ("no swiglu clamp", no_clamp),
             ("swiglu alpha 1", alpha_1), ("up instead of (up + 1)", no_up_plus_one),
             ("gate/up as halves, not interleaved", gate_up_halves),
             ("softmax over all experts then top-k", softmax_all), ("router bias dropped", no_router_bias)]
    for what, fn in cases:
        dv = variant(fn)
        expect(dv > 1e-2, f"{what:38s} max|dlogit| {dv:.3f}")
    expect.finish()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "data", "models"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    check(a.out) if a.check else generate(a.out)
