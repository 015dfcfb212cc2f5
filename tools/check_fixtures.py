#!/usr/bin/env python3
"""Runs `ft logits` and `ft run` on every fixture under ROOT and compares with its
reference.safetensors (transformers' logits and greedy tokens): max |dlogit| and greedy match.

    python3 tools/check_fixtures.py [--ft build/ft] [--backend B] [--cpu-act f32|fast]
                                    [--ft-args "MORE FT FLAGS"] [--tol 1e-3] [--positions]
                                    [--only NAME ...] [ROOT]
    (default ROOT tests/data/models, --cpu-act f32: the exact path the C test checks; the exit
    status is 1 when a fixture is off by more than --tol or its greedy tokens differ)

Besides the whole prompt (24 tokens: on a GPU backend the prefill path, whose GEMMs read bf16
copies of the activations and whose attention reads fp16 Q/K/V/P) it runs its first 8 tokens
alone: on a GPU backend a step of at most 8 tokens takes the decode path (fp32 activations into
the GEMV kernels, fp32 attention), so `first8` is the GPU's exact path and should stay near
1e-5 like the CPU's. --positions prints each position's error and, for fixtures whose reference
holds `router_gap` (the *_n08 ones: per MoE layer and position the top-k-th minus the next router
logit), the smallest gap at that position: a position far off where a gap is small (below ~2e-2)
is a router near-tie that rounding flipped (another expert chosen), one far off with no small
gap is not explained by rounding.

The C test test_model_fixtures checks the same in CI; this script is for fixtures regenerated
elsewhere (e.g. with another transformers version) and for the GPU machine, whose image has
python3 but no numpy: only the standard library is used."""
import argparse
import array
import json
import os
import shlex
import struct
import subprocess
import sys
import tempfile

DT = {"F32": ("f", 4), "I32": ("i", 4), "F64": ("d", 8)}


def load_st(path):
    """{name: (flat list of values, shape)} of a safetensors file (F32/I32/F64 tensors)"""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__" or v["dtype"] not in DT:
            continue
        code, size = DT[v["dtype"]]
        a, b = v["data_offsets"]
        arr = array.array(code)
        arr.frombytes(raw[8 + n + a:8 + n + b])
        if sys.byteorder != "little":
            arr.byteswap()
        out[k] = (arr, v["shape"])
    return out


def ft_logits(a, d, ids):
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as out:
        cmd = [a.ft, "logits", "--model", d, "--ids", ",".join(map(str, ids)), "--out", out.name,
               "--cpu-act", a.cpu_act] + flags(a)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            return None, r.stderr.strip()
        return load_st(out.name)["logits"][0], None


def flags(a):
    return (["--backend", a.backend] if a.backend else []) + shlex.split(a.ft_args)


def row_err(x, y, t, V):
    return max(abs(x[t * V + i] - y[t * V + i]) for i in range(V))


ap = argparse.ArgumentParser()
ap.add_argument("--ft", default="build/ft")
ap.add_argument("--backend", default=None, help="cpu, cuda, offload, ... (default: ft's own)")
ap.add_argument("--cpu-act", default="f32", choices=["f32", "fast"])
ap.add_argument("--ft-args", default="", help="more ft flags, e.g. \"--moe-backend cpu\"")
ap.add_argument("--tol", type=float, default=1e-3)
ap.add_argument("--positions", action="store_true")
ap.add_argument("--only", nargs="*")
ap.add_argument("root", nargs="?", default="tests/data/models")
a = ap.parse_args()
bad = 0
for name in sorted(os.listdir(a.root)):
    if a.only and name not in a.only:
        continue
    d = os.path.join(a.root, name)
    ref = load_st(os.path.join(d, "reference.safetensors"))
    ids, lg = list(ref["ids"][0]), ref["logits"][0]
    T, V = ref["logits"][1]
    got, err_s = ft_logits(a, d, ids)
    if got is None:
        print(f"{name:18s} FAIL {err_s}")
        bad += 1
        continue
    rows = [row_err(got, lg, t, V) for t in range(T)]
    err = max(rows)
    n8 = min(8, T)
    got8, _ = ft_logits(a, d, ids[:n8])
    err8 = max(row_err(got8, lg, t, V) for t in range(n8)) if got8 else float("nan")
    g = subprocess.run([a.ft, "run", "--model", d, "--ids", ",".join(map(str, ids)), "-n",
                        str(len(ref["greedy"][0])), "--cpu-act", a.cpu_act] + flags(a),
                       capture_output=True, text=True).stdout.strip()
    same = g == ",".join(map(str, ref["greedy"][0]))
    over = err > a.tol or not same
    bad += over
    extra = ""
    if "logits64" in ref:
        l64 = ref["logits64"][0]
        extra = f"  vs fp64 {max(row_err(got, l64, t, V) for t in range(T)):.2e}"
    print(f"{name:18s} max|dlogit| {err:.2e}  first{n8} {err8:.2e}{extra}  greedy "
          f"{'same' if same else 'DIFFERENT'}{'  OVER --tol' if over else ''}")
    if a.positions:
        gaps = None
        if "router_gap" in ref:
            gv, (L, Tg) = ref["router_gap"]
            gaps = [[gv[l * Tg + t] for l in range(L) if gv[l * Tg + t] >= 0] for t in range(Tg)]
        for t in range(T):
            s = f"    position {t:2d}  |dlogit| {rows[t]:.2e}"
            if gaps and gaps[t]:
                gl = min(range(len(gaps[t])), key=lambda i: gaps[t][i])
                s += f"  smallest router gap {gaps[t][gl]:.2e}"
                if rows[t] > 10 * max(1e-2, sorted(rows)[T // 2]):  # far above the median row
                    s += ("  <- near-tie: rounding can flip an expert" if gaps[t][gl] < 2e-2
                          else "  <- NO near-tie here: not explained by a routing flip")
            print(s)
sys.exit(1 if bad else 0)
