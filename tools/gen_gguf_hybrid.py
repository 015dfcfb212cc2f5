#!/usr/bin/env python3
"""gen_gguf_hybrid.py — llama.cpp GGUF files of the hybrid Gated DeltaNet models (qwen35moe,
qwen35, qwen3next), written by llama.cpp's own converter, with their references.

The converter (convert_hf_to_gguf.py of a llama.cpp source tree; not part of FreeToken-C: it is
run from ../shared/peers/llama.cpp-*.tar.xz, extracted to a temporary folder, or from --llama)
turns a Hugging Face checkpoint into tests/data/gguf/models/<name>.gguf:

  qwen35moe_bf16  tests/data/models/qwen3_5_moe plus a multi-token-prediction layer (mtp.*, random,
                  mtp_num_hidden_layers 1: written as blk.4.* / blk.4.nextn.*, not read), BF16
                  (1-D tensors, norms, conv and routers F32, as the converter always writes them).
                  Reference: the safetensors fixture's (transformers ignores mtp.*; checked here)
  qwen35_bf16     tests/data/models/qwen3_5 (dense, 6 value heads on 2 key heads), BF16; its reference
  qwen3next_bf16  a random Qwen3-Next of tests/data/models/qwen3_next's sizes (6 value heads on 2
                  key heads, value head 12 != key head 16), but every layer MoE (llama.cpp's
                  converter cannot map mlp_only_layers' dense MLPs) and norm_topk_prob=True
                  (llama.cpp always renormalises qwen3next's top-k; the file has no key for it),
                  BF16. Reference: transformers on that checkpoint
  qwen35moe_q8    a random Qwen3.5-MoE (hidden 64, 4 value heads of 16 on 2 key heads, 4 experts of
                  32, top-2), --outtype q8_0 (every matrix Q8_0 but the routers; conv, norms, ssm_a,
                  ssm_dt F32): ssm_out's 32-blocks straddle value heads (FreeToken-C keeps llama.cpp's
                  tiled head order and repeats the key heads)
  qwen35_q8       a random dense Qwen3.5 (6 value heads of 32 on 2 key heads), Q8_0: value heads are
                  whole blocks (FreeToken-C moves ssm_out's blocks back to Hugging Face's order)
  (random ones: drawn as tools/gen_fixtures.py draws its hybrid fixtures; the Qwen3.5 ones with
  each key head's weights near its query head's, see correlate_qk)

The Q8_0 files' reference: the GGUF dequantised by gguf-py, its tensors mapped back to Hugging
Face's layout here (undoing the converter's transforms: 1 + w norms, A = -exp(A_log), the
value-head reorder grouped -> tiled, split experts, squeezed conv), loaded into transformers (fp32,
eager) and run. That mapping is checked first on the BF16 files, against the safetensors fixtures
they came from (equal up to the float rounding of log(exp(A_log))).

The fixtures' tokenizer is the tiny one of tests/data/models/qwen3_moe, which the converter's
pre-tokenizer hash list does not know: the converter's get_vocab_base_pre is replaced by one that
says "qwen2" (the rest of it runs unchanged).

Usage (where torch, transformers 5.x, numpy and safetensors are installed, e.g. the venv of
tools/gen_fixtures.py):
    python3 tools/gen_gguf_hybrid.py [--llama LLAMA_CPP_DIR] [--only NAME [--seed N]] [OUT_DIR]
(default OUT_DIR tests/data/gguf/models; deterministic: a rerun writes the same bytes. --only
NAME --seed N rebuilds one fixture from another seed, to look for a better one.)
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
MODELS = os.path.join(ROOT, "tests", "data", "models")
N_GREEDY = 12

# runs the converter with its tokenizer-hash check answered (the fixture's tokenizer is not in it)
CONVERT = r"""
import runpy, sys
ll = sys.argv[1]
sys.path[:0] = [ll, ll + "/gguf-py"]
import conversion.base as b
for c in vars(b).values():
    if isinstance(c, type) and "get_vocab_base_pre" in vars(c):
        c.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
sys.argv = [ll + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def llama_tree(arg):
    if arg:
        return arg
    tars = sorted(glob.glob(os.path.join(ROOT, "..", "shared", "peers", "llama.cpp-*.tar.xz")))
    if not tars:
        sys.exit("no llama.cpp tree: pass --llama DIR (../shared/peers/llama.cpp-*.tar.xz not found)")
    tmp = tempfile.mkdtemp(prefix="llama-conv-")
    want = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
    with tarfile.open(tars[-1]) as t:
        members = [m for m in t.getmembers() if m.name.partition("/")[2].startswith(want)]
        t.extractall(tmp, members=members, filter="data")
    (top,) = {m.name.partition("/")[0] for m in members}
    return os.path.join(tmp, top)


def convert(ll, src, out, outtype, mtp):
    cmd = [sys.executable, "-c", CONVERT, ll, src, "--outtype", outtype, "--outfile", out]
    if not mtp:
        cmd.append("--no-mtp")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"converter failed on {src}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")


def load_st(path):
    from safetensors.torch import load_file
    return load_file(path)


def hf_model(d, **overrides):
    import transformers
    cfg = transformers.AutoConfig.from_pretrained(d, **overrides)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    cls = getattr(transformers, cfg.architectures[0])
    return cls.from_pretrained(d, config=cfg, dtype=torch.float32).eval()


def run_ref(model, ids):
    """logits [T, V] f32 (teacher-forced), greedy [N_GREEDY] (cached generate)"""
    from fixture_util import greedy_gap
    with torch.no_grad():
        logits = model(ids[None]).logits[0].float()
        out = model.generate(ids[None], max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    greedy = out[0, ids.shape[0]:]
    gap, same = greedy_gap(model, ids[None], greedy)
    if not same:
        sys.exit("teacher-forced argmax differs from generate()")
    return logits, greedy, gap


def save_ref(path, ids, logits, greedy):
    from safetensors.torch import save_file
    save_file({"ids": ids.to(torch.int32).contiguous(), "logits": logits.contiguous(),
               "greedy": greedy.to(torch.int32).contiguous()}, path)
    os.chmod(path, 0o644)


# ------------------------------------------------------------------ GGUF -> Hugging Face layout

def untile(a, axis, hk, hv):
    """value heads along `axis` (whole heads of equal size) from llama.cpp's tiled order
    (position j * Hk + g) back to Hugging Face's grouped one (g * r + j)"""
    r = hv // hk
    a = np.moveaxis(a, axis, 0)
    sh = a.shape
    a = a.reshape(r, hk, sh[0] // hv, *sh[1:]).swapaxes(0, 1).reshape(sh)
    return np.moveaxis(a, 0, axis)


def gguf_to_hf(path):
    """{HF in-memory name: f32 numpy} from a qwen35 / qwen35moe GGUF (dequantised by gguf-py)"""
    import gguf
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    kv = lambda k: r.fields[f"{arch}.{k}"].contents()
    nl = kv("block_count") - (kv("nextn_predict_layers") if f"{arch}.nextn_predict_layers" in r.fields else 0)
    hk, hv, dk = kv("ssm.group_count"), kv("ssm.time_step_rank"), kv("ssm.state_size")
    dv = kv("ssm.inner_size") // hv
    dkk = hk * dk
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float32).reshape(
        [int(n) for n in reversed(x.shape)]) for x in r.tensors}
    sd = {"model.embed_tokens.weight": t["token_embd.weight"],
          "model.norm.weight": t["output_norm.weight"] - 1}
    if "output.weight" in t:
        sd["lm_head.weight"] = t["output.weight"]
    for l in range(nl):
        p, q = f"blk.{l}.", f"model.layers.{l}."
        g = lambda n: t.pop(p + n)
        sd[q + "input_layernorm.weight"] = g("attn_norm.weight") - 1
        sd[q + "post_attention_layernorm.weight"] = g("post_attention_norm.weight") - 1
        if p + "ssm_a" in t:
            a = q + "linear_attn."
            qkv = g("attn_qkv.weight")
            sd[a + "in_proj_qkv.weight"] = np.concatenate([qkv[:2 * dkk], untile(qkv[2 * dkk:], 0, hk, hv)])
            sd[a + "in_proj_z.weight"] = untile(g("attn_gate.weight"), 0, hk, hv)
            sd[a + "in_proj_b.weight"] = untile(g("ssm_beta.weight"), 0, hk, hv)
            sd[a + "in_proj_a.weight"] = untile(g("ssm_alpha.weight"), 0, hk, hv)
            conv = g("ssm_conv1d.weight")
            sd[a + "conv1d.weight"] = np.concatenate([conv[:2 * dkk], untile(conv[2 * dkk:], 0, hk, hv)])[:, None, :]
            sd[a + "A_log"] = np.log(-untile(g("ssm_a"), 0, hk, hv))
            sd[a + "dt_bias"] = untile(g("ssm_dt.bias"), 0, hk, hv)
            sd[a + "norm.weight"] = g("ssm_norm.weight")
            sd[a + "out_proj.weight"] = untile(g("ssm_out.weight"), 1, hk, hv)
        else:
            for gn, hn in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"),
                           ("attn_output", "o_proj")):
                sd[q + f"self_attn.{hn}.weight"] = g(gn + ".weight")
            sd[q + "self_attn.q_norm.weight"] = g("attn_q_norm.weight") - 1
            sd[q + "self_attn.k_norm.weight"] = g("attn_k_norm.weight") - 1
        if p + "ffn_gate_exps.weight" in t:
            sd[q + "mlp.gate.weight"] = g("ffn_gate_inp.weight")
            sd[q + "mlp.experts.gate_up_proj"] = np.concatenate(
                [g("ffn_gate_exps.weight"), g("ffn_up_exps.weight")], axis=1)
            sd[q + "mlp.experts.down_proj"] = g("ffn_down_exps.weight")
            for n in ("gate", "up", "down"):
                sd[q + f"mlp.shared_expert.{n}_proj.weight"] = g(f"ffn_{n}_shexp.weight")
            sd[q + "mlp.shared_expert_gate.weight"] = g("ffn_gate_inp_shexp.weight").reshape(1, -1)
        else:
            for n in ("gate", "up", "down"):
                sd[q + f"mlp.{n}_proj.weight"] = g(f"ffn_{n}.weight")
    glob_ = ("token_embd.weight", "output_norm.weight", "output.weight")
    left = [n for n in t if n not in glob_ and not (n.startswith("blk.") and int(n.split(".")[1]) >= nl)]
    if left:  # only the MTP layers' may stay
        sys.exit(f"{path}: tensors not mapped back: {left}")
    return sd


def check_inverse(gguf_path, src):
    """gguf_to_hf of a BF16 file reproduces the checkpoint it was converted from"""
    ref = {k: v.float().numpy() for k, v in load_st(os.path.join(src, "model.safetensors")).items()
           if not k.startswith("mtp.")}
    sd = gguf_to_hf(gguf_path)
    ref = fuse_experts(ref)
    if set(ref) != set(sd):
        sys.exit(f"{gguf_path}: names differ from {src}: {sorted(set(ref) ^ set(sd))[:6]}")
    worst = max(float(np.abs(sd[k] - ref[k]).max() / (np.abs(ref[k]).max() + 1e-30)) for k in ref)
    if worst > 1e-6:
        sys.exit(f"{gguf_path}: mapped back differs from {src} by {worst:.2e} (relative)")
    print(f"  gguf -> HF mapping reproduces {os.path.relpath(src, ROOT)} (max rel. diff {worst:.1e})")


def fuse_experts(sd):
    """per-expert mlp.experts.N.{gate,up,down}_proj.weight (save_pretrained's layout) fused into
    transformers' in-memory gate_up_proj [E, 2I, H] / down_proj [E, H, I]"""
    out, per = {}, {}
    for k, v in sd.items():
        parts = k.split(".")
        if ".mlp.experts." in k and parts[5].isdecimal():
            per.setdefault(".".join(parts[:5]), {})[(int(parts[5]), parts[6])] = v
        else:
            out[k] = v
    for pre, d in per.items():
        E = 1 + max(e for e, _ in d)
        out[pre + ".gate_up_proj"] = np.stack([np.concatenate([d[e, "gate_proj"], d[e, "up_proj"]]) for e in range(E)])
        out[pre + ".down_proj"] = np.stack([d[e, "down_proj"] for e in range(E)])
    return out


# ------------------------------------------------------------------ fixtures

def with_mtp(src, dst, seed):
    """src's checkpoint plus a random MTP layer (mtp.*) and mtp_num_hidden_layers 1 in dst"""
    from safetensors.torch import save_file
    shutil.copytree(src, dst)
    cfg = json.load(open(os.path.join(dst, "config.json")))
    cfg["mtp_num_hidden_layers"] = 1
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    H, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, I, S = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: (torch.randn(s, generator=g) / s[-1] ** 0.5).to(torch.bfloat16)
    nrm = lambda n: (0.1 * torch.randn(n, generator=g)).to(torch.bfloat16)
    sd = load_st(os.path.join(dst, "model.safetensors"))
    m, a = "mtp.", "mtp.layers.0."
    sd.update({m + "fc.weight": rnd(H, 2 * H), m + "pre_fc_norm_embedding.weight": nrm(H),
               m + "pre_fc_norm_hidden.weight": nrm(H), m + "norm.weight": nrm(H),
               a + "input_layernorm.weight": nrm(H), a + "post_attention_layernorm.weight": nrm(H),
               a + "self_attn.q_proj.weight": rnd(2 * nh * hd, H), a + "self_attn.k_proj.weight": rnd(nkv * hd, H),
               a + "self_attn.v_proj.weight": rnd(nkv * hd, H), a + "self_attn.o_proj.weight": rnd(H, nh * hd),
               a + "self_attn.q_norm.weight": nrm(hd), a + "self_attn.k_norm.weight": nrm(hd),
               a + "mlp.gate.weight": rnd(E, H), a + "mlp.experts.gate_up_proj": rnd(E, 2 * I, H),
               a + "mlp.experts.down_proj": rnd(E, H, I),
               a + "mlp.shared_expert.gate_proj.weight": rnd(S, H), a + "mlp.shared_expert.up_proj.weight": rnd(S, H),
               a + "mlp.shared_expert.down_proj.weight": rnd(H, S), a + "mlp.shared_expert_gate.weight": rnd(1, H)})
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(dst, "model.safetensors"),
              metadata={"format": "pt"})


def correlate_qk(model, noise, seed):
    """each DeltaNet key head's rows of in_proj_qkv and conv channels = its query head's plus noise
    (relative std `noise`): independent random q and k are near orthogonal, so many value heads'
    outputs are small sums of larger terms, which the gated RMSNorm then scales up with whatever
    rounding they carry; int8-rounded activations (ft's --cpu-act fast) would move the logits by
    ~1 at most positions"""
    c = model.config
    dk = c.linear_num_key_heads * c.linear_key_head_dim
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, mod in model.named_modules():
            if name.endswith("linear_attn"):
                for w in (mod.in_proj_qkv.weight, mod.conv1d.weight):
                    q = w[:dk]
                    w[dk:2 * dk] = (q + noise * q.std() * torch.randn(q.shape, generator=g)).to(torch.bfloat16).float()


def random_hybrid(dst, cfg_cls, model_cls, kw, seed):
    """a random hybrid checkpoint drawn as tools/gen_fixtures.py draws its HYBRID ones (final norm
    scaled for logits of sd ~1), saved in bf16 with the fixtures' tokenizer"""
    import transformers
    import gen_fixtures as gf
    cfg = getattr(transformers, cfg_cls)(**{k: v for k, v in kw.items() if k != "qk_noise"})
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(cfg).eval().float()
    gf.init_weights_hybrid(model, seed)
    if "qk_noise" in kw:
        correlate_qk(model, kw["qk_noise"], seed + 7)
    ids = torch.randint(3, kw["vocab_size"], (1, 24), generator=torch.Generator().manual_seed(seed + 1000))
    with torch.no_grad():
        s = float(model(ids).logits.std())
        w = model.model.norm.weight
        w.copy_(((1.0 + w) / s - 1.0).to(torch.bfloat16).float())
    model.to(torch.bfloat16).save_pretrained(dst)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copyfile(os.path.join(MODELS, "qwen3_moe", f), os.path.join(dst, f))
    return ids[0]


HYB = dict(vocab_size=384, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
           head_dim=32, hidden_size=64, max_position_embeddings=256, rms_norm_eps=1e-6,
           bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, linear_conv_kernel_dim=4,
           layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25,
                            "mrope_interleaved": True, "mrope_section": [2, 1, 1]})
# The random ones: name -> (config class, model class, seed, --outtype, config). Seeds picked for
# greedy top-1 margins >= 0.03 and for ft's --cpu-act fast check (tests/test_model_fixtures.c,
# gguf_fixtures_fast_activations: int8 / bf16 activations within 0.1 of the reference at 90% of the
# positions) passing with room: these tiny random hybrids are touchy there (an emulation of the
# int8 rounding in transformers moves their logits as much), a router flip moves a position by ~1
RANDOM = {
    # Qwen3-Next as tests/data/models/qwen3_next but every layer MoE (llama.cpp's qwen3next has no
    # dense layers: its converter cannot map mlp_only_layers' MLPs) and norm_topk_prob=True (what
    # llama.cpp computes)
    "qwen3next_bf16": ("Qwen3NextConfig", "Qwen3NextForCausalLM", 3113, "bf16", None),
    "qwen35moe_q8": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", 4301, "q8_0",
                     dict(HYB, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                          linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2,
                          moe_intermediate_size=32, shared_expert_intermediate_size=32, qk_noise=0.3)),
    "qwen35_q8": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", 4054, "q8_0",
                  dict(HYB, linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=32,
                       linear_value_head_dim=32, intermediate_size=64, qk_noise=0.3)),
}


def next_config():
    import gen_fixtures as gf
    return dict(gf.HYBRID_COMMON, **gf.MOE, **gf.LAYERS_B, num_experts=7, shared_expert_intermediate_size=28,
                norm_topk_prob=True, linear_num_value_heads=6,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})


def take(args, flag):
    if flag not in args:
        return None
    i = args.index(flag)
    v = args[i + 1]
    del args[i:i + 2]
    return v


def main():
    args = sys.argv[1:]
    ll, only, seed_arg = take(args, "--llama"), take(args, "--only"), take(args, "--seed")
    out = args[0] if args else os.path.join(ROOT, "tests", "data", "gguf", "models")
    os.makedirs(out, exist_ok=True)
    extracted = ll is None
    ll = llama_tree(ll)
    sys.path[:0] = [HERE, os.path.join(ll, "gguf-py")]
    import gen_fixtures as gf
    tmp = tempfile.mkdtemp(prefix="gguf-hybrid-")
    ref = lambda name: os.path.join(out, name + ".ref.safetensors")
    gg = lambda name: os.path.join(out, name + ".gguf")

    if only in (None, "qwen35moe_bf16"):  # the fixture with an MTP layer the loader must skip
        src = os.path.join(MODELS, "qwen3_5_moe")
        d = os.path.join(tmp, "qwen3_5_moe_mtp")
        with_mtp(src, d, 4242)
        convert(ll, d, gg("qwen35moe_bf16"), "bf16", mtp=True)
        r = load_st(os.path.join(src, "reference.safetensors"))
        with torch.no_grad():
            dl = float((hf_model(d)(r["ids"].long()[None]).logits[0] - r["logits"]).abs().max())
        if dl > 1e-5:
            sys.exit(f"the MTP tensors changed transformers' logits by {dl}")
        shutil.copyfile(os.path.join(src, "reference.safetensors"), ref("qwen35moe_bf16"))
        print(f"qwen35moe_bf16: {os.path.getsize(gg('qwen35moe_bf16'))} bytes; reference: qwen3_5_moe's "
              f"(its logits with the MTP tensors present: {dl:.1e} off)")
        check_inverse(gg("qwen35moe_bf16"), src)

    if only in (None, "qwen35_bf16"):
        src = os.path.join(MODELS, "qwen3_5")
        convert(ll, src, gg("qwen35_bf16"), "bf16", mtp=False)
        shutil.copyfile(os.path.join(src, "reference.safetensors"), ref("qwen35_bf16"))
        print(f"qwen35_bf16: {os.path.getsize(gg('qwen35_bf16'))} bytes; reference: qwen3_5's")
        check_inverse(gg("qwen35_bf16"), src)

    for name, (cfg_cls, model_cls, seed, outtype, kw) in RANDOM.items():
        if only not in (None, name):
            continue
        seed = int(seed_arg) if seed_arg else seed
        kw = kw or next_config()
        d = os.path.join(tmp, name)
        ids = random_hybrid(d, cfg_cls, model_cls, kw, seed)
        convert(ll, d, gg(name), outtype, mtp=False)
        model = hf_model(d)
        if outtype != "bf16":  # the file's dequantised weights
            sd = {k: torch.from_numpy(v) for k, v in gguf_to_hf(gg(name)).items()}
            missing, unexpected = model.load_state_dict(sd, strict=False)
            if missing or unexpected:
                sys.exit(f"{name}: state dict mismatch: missing {missing}, unexpected {unexpected}")
        logits, greedy, gap = run_ref(model, ids)
        save_ref(ref(name), ids, logits, greedy)
        moe = hasattr(model.config, "num_experts_per_tok")
        rg = gf.router_gaps(model, torch.cat([ids, greedy[:-1]])[None]) if moe else torch.tensor([-1.0])
        import gguf
        types = sorted({t.tensor_type.name for t in gguf.GGUFReader(gg(name)).tensors})
        how = "its checkpoint" if outtype == "bf16" else "the dequantised file"
        print(f"{name}: {os.path.getsize(gg(name))} bytes ({', '.join(types)}); reference: transformers "
              f"on {how} (seed {seed}), logits sd {float(logits.std()):.2f}, greedy {greedy.tolist()}, "
              f"smallest top-1 margin {gap:.3f}"
              + (f", smallest router gap {float(rg[rg >= 0].min()):.3f}" if (rg >= 0).any() else ""))
    shutil.rmtree(tmp)
    if extracted:
        shutil.rmtree(os.path.dirname(ll))


if __name__ == "__main__":
    main()
