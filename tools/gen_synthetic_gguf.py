#!/usr/bin/env python3
"""gen_synthetic_gguf.py — a Qwen3-30B-A3B-shaped GGUF with random Q4_K_M-style blocks.

For benchmarks on machines without the real checkpoint (the GPU machine has no network): the
real model's shapes and llama.cpp's names and metadata, Q4_K attention/experts, Q6_K attn_v and
output, ffn_down_exps alternating Q6_K (even layers) and Q4_K (odd layers) as Q4_K_M files mix
them, F32 norms and routers. K-quant blocks are random bytes with zero-centring super-block
scales. Needs only Python 3 and numpy (no gguf package): the file format is written here.

    python3 tools/gen_synthetic_gguf.py OUT.gguf [--layers 48] [--experts 128] [--seed 1]

~17 GB at full size; written streaming, one tensor at a time.
"""
import argparse
import struct

import numpy as np

Q4_K, Q6_K, F32 = 12, 14, 0
BLOCK = {Q4_K: (256, 144), Q6_K: (256, 210), F32: (1, 4)}


def kv_str(k, v):
    kb, vb = k.encode(), v.encode()
    return struct.pack("<Q", len(kb)) + kb + struct.pack("<I", 8) + struct.pack("<Q", len(vb)) + vb


def kv_u32(k, v):
    kb = k.encode()
    return struct.pack("<Q", len(kb)) + kb + struct.pack("<II", 4, v)


def kv_f32(k, v):
    kb = k.encode()
    return struct.pack("<Q", len(kb)) + kb + struct.pack("<If", 6, v)


def blocks(rng, qt, n_elems):
    """Random valid blocks for n_elems elements of type qt (bytes)."""
    if qt == F32:
        return (1.0 + 0.1 * rng.standard_normal(n_elems)).astype(np.float32).tobytes()
    bs, ts = BLOCK[qt]
    nb = n_elems // bs
    raw = rng.integers(0, 256, size=(nb, ts), dtype=np.uint8)
    d = rng.uniform(4.0e-5, 8.0e-5, size=nb).astype(np.float32)
    if qt == Q4_K:
        raw[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(nb, 2)
        raw[:, 2:4] = (d * 7.5).astype(np.float16).view(np.uint8).reshape(nb, 2)
    else:
        raw[:, 192:208] = rng.integers(-20, 21, size=(nb, 16), dtype=np.int8).view(np.uint8)
        raw[:, 208:210] = (d * 2).astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    H, heads, kv, hd, E, k, EI, V = 2048, 32, 4, 128, a.experts, 8, 768, 151936
    L = a.layers
    tensors = [("token_embd.weight", [H, V], Q4_K), ("output_norm.weight", [H], F32),
               ("output.weight", [H, V], Q6_K)]
    for l in range(L):
        p = f"blk.{l}."
        tensors += [(p + "attn_norm.weight", [H], F32), (p + "ffn_norm.weight", [H], F32),
                    (p + "attn_q.weight", [H, heads * hd], Q4_K),
                    (p + "attn_k.weight", [H, kv * hd], Q4_K),
                    (p + "attn_v.weight", [H, kv * hd], Q6_K),
                    (p + "attn_output.weight", [heads * hd, H], Q4_K),
                    (p + "attn_q_norm.weight", [hd], F32), (p + "attn_k_norm.weight", [hd], F32),
                    (p + "ffn_gate_inp.weight", [H, E], F32),
                    (p + "ffn_gate_exps.weight", [H, EI, E], Q4_K),
                    (p + "ffn_up_exps.weight", [H, EI, E], Q4_K),
                    (p + "ffn_down_exps.weight", [EI, H, E], Q6_K if l % 2 == 0 else Q4_K)]
    kvs = [kv_str("general.architecture", "qwen3moe"), kv_str("general.name", "synthetic qwen3-30b-a3b Q4_K_M"),
           kv_u32("qwen3moe.block_count", L), kv_u32("qwen3moe.context_length", 40960),
           kv_u32("qwen3moe.embedding_length", H), kv_u32("qwen3moe.feed_forward_length", 6144),
           kv_u32("qwen3moe.attention.head_count", heads), kv_u32("qwen3moe.attention.head_count_kv", kv),
           kv_u32("qwen3moe.attention.key_length", hd), kv_u32("qwen3moe.attention.value_length", hd),
           kv_f32("qwen3moe.rope.freq_base", 1000000.0),
           kv_f32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6),
           kv_u32("qwen3moe.expert_count", E), kv_u32("qwen3moe.expert_used_count", k),
           kv_u32("qwen3moe.expert_feed_forward_length", EI)]
    infos, off = b"", 0
    sizes = []
    for name, ne, qt in tensors:
        n = int(np.prod(ne))
        bs, ts = BLOCK[qt]
        size = n // bs * ts
        nb = name.encode()
        infos += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne))
        infos += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", qt, off)
        sizes.append((n, size))
        off += (size + 31) // 32 * 32
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    rng = np.random.default_rng(a.seed)
    with open(a.out, "wb") as f:
        f.write(head + b"\0" * ((32 - len(head) % 32) % 32))
        for (name, ne, qt), (n, size) in zip(tensors, sizes):
            data = blocks(rng, qt, n)
            assert len(data) == size
            f.write(data + b"\0" * ((32 - size % 32) % 32))
    print(f"{a.out}: {len(tensors)} tensors, {off / 2**30:.2f} GiB of data")


if __name__ == "__main__":
    main()
