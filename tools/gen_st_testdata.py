#!/usr/bin/env python3
"""Generates tests/data/st/ fixtures with the reference Python `safetensors` package, so that
tests/test_safetensors.c checks the C reader against files it did not write itself.
Values are simple closed forms the C test recomputes. Run from the repo root:
    python3 tools/gen_st_testdata.py
"""
import json
import os

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "st")


def mixed():
    return {
        "a.f32": (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3),   # i*0.5-1
        "b.f16": (np.arange(4, dtype=np.float16) + 1).reshape(2, 2),         # i+1
        "c.i64": np.array([-1, 0, 1 << 40], dtype=np.int64),
        "d.scalar": np.array(3.25, dtype=np.float32),                        # shape []
        "e.empty": np.zeros((0, 5), dtype=np.uint8),
        "f.i8": np.array([-128, 127, 0, 5], dtype=np.int8).reshape(1, 4),
    }


def main():
    os.makedirs(ROOT, exist_ok=True)
    save_file(mixed(), os.path.join(ROOT, "py_mixed.safetensors"),
              metadata={"format": "pt", "note": "ft test"})
    # A 2-shard checkpoint with an index, as transformers writes it.
    d = os.path.join(ROOT, "sharded")
    os.makedirs(d, exist_ok=True)
    shards = {
        "model-00001-of-00002.safetensors": {
            "model.embed.weight": (np.arange(12, dtype=np.float32)).reshape(4, 3),
            "model.layers.0.w": np.full((2, 2), 7, dtype=np.int32),
        },
        "model-00002-of-00002.safetensors": {
            "model.layers.1.w": np.full((3,), 9, dtype=np.int32),
            "lm_head.weight": (np.arange(12, dtype=np.float32) * -1).reshape(4, 3),
        },
    }
    weight_map, total = {}, 0
    for fname, tensors in shards.items():
        save_file(tensors, os.path.join(d, fname), metadata={"format": "pt"})
        for k, v in tensors.items():
            weight_map[k] = fname
            total += v.nbytes
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
