#!/usr/bin/env python3
"""Runs `ft logits` and `ft run` on every fixture under ROOT and compares with its
reference.safetensors (transformers' logits and greedy tokens): max |dlogit| and greedy match.

    python3 tools/check_fixtures.py [--ft build/ft] [ROOT]   (default tests/data/models)

The C test test_model_fixtures checks the same in CI; this script is for fixtures regenerated
elsewhere (e.g. with another transformers version on the GPU machine)."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file

ap = argparse.ArgumentParser()
ap.add_argument("--ft", default="build/ft")
ap.add_argument("root", nargs="?", default="tests/data/models")
a = ap.parse_args()
bad = 0
for name in sorted(os.listdir(a.root)):
    d = os.path.join(a.root, name)
    ref = load_file(os.path.join(d, "reference.safetensors"))
    ids = ",".join(map(str, ref["ids"].tolist()))
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as out:
        r = subprocess.run([a.ft, "logits", "--model", d, "--ids", ids, "--out", out.name],
                           capture_output=True, text=True)
        if r.returncode:
            print(f"{name:18s} FAIL {r.stderr.strip()}")
            bad += 1
            continue
        err = float(np.abs(load_file(out.name)["logits"] - ref["logits"]).max())
    g = subprocess.run([a.ft, "run", "--model", d, "--ids", ids, "-n", str(len(ref["greedy"]))],
                       capture_output=True, text=True).stdout.strip()
    same = g == ",".join(map(str, ref["greedy"].tolist()))
    bad += err > 1e-3 or not same
    print(f"{name:18s} max|dlogit| {err:.2e}  greedy {'same' if same else 'DIFFERENT'}")
sys.exit(1 if bad else 0)
