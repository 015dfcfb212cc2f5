"""fixture_util.py — what the quantised-fixture generators (gen_gptoss_fixtures.py,
gen_quant_fixtures.py) share: bf16 rounding, transformers' greedy continuation and its margin,
a safetensors file's layout, and the pass/fail bookkeeping of their --check modes."""
import sys

import torch
from safetensors import safe_open


def bf16(t):
    """t rounded to bf16, kept as f32"""
    return t.to(torch.bfloat16).to(torch.float32)


def greedy_of(model, ids, n):
    """n greedy tokens after the prompt ids [1, T] (no EOS stop)"""
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return out[0, ids.shape[1]:]


def greedy_gap(model, ids, greedy):
    """min over the greedy steps of top1 - top2 (teacher-forced), and whether the teacher-forced
    argmax reproduces the cached generate() tokens."""
    full = torch.cat([ids[0], greedy[:-1]])[None]
    with torch.no_grad():
        lg = model(full).logits[0, ids.shape[1] - 1:].float()
    top = lg.topk(2, -1).values
    return float((top[:, 0] - top[:, 1]).min()), bool((lg.argmax(-1) == greedy).all())


def layout(path):
    """{name: (dtype, shape)} of a safetensors file"""
    with safe_open(path, framework="pt") as f:
        return {k: (str(f.get_slice(k).get_dtype()), list(f.get_slice(k).get_shape())) for k in f.keys()}


class Checks:
    """expect(cond, what) prints ok/FAIL per check; finish() exits non-zero if any failed."""

    def __init__(self):
        self.bad = 0

    def __call__(self, cond, what):
        print(("  ok    " if cond else "  FAIL  ") + what)
        self.bad += not cond

    def finish(self):
        if self.bad:
            sys.exit(f"{self.bad} check(s) failed")
        print("all checks passed")
