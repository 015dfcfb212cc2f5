#!/usr/bin/env python3
"""gen_gguf_mla_legacy.py — deepseek2_legacy_bf16.gguf: tests/data/gguf/models/deepseek2_bf16.gguf
(tools/gen_gguf_mla.py) as llama.cpp's converter wrote deepseek2 files before it split kv_b for
the absorbed form: one blk.N.attn_kv_b.weight {kv_lora_rank, n_head (qk_nope + v)} instead of
attn_k_b / attn_v_b, attention.key_length / value_length the heads' own widths (qk_nope + rope,
v), head_count_kv = head_count, and no attention.key_length_mla / value_length_mla. Every other
key and tensor is copied as it is; the reference is deepseek2_bf16's (the same weights).

Needs only numpy and the gguf package (pip install gguf). Deterministic.
Usage: python3 tools/gen_gguf_mla_legacy.py [DIR]   (default tests/data/gguf/models)
"""
import os
import shutil
import sys

import numpy as np

import gguf

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "data", "gguf", "models")
    src, out = os.path.join(d, "deepseek2_bf16.gguf"), os.path.join(d, "deepseek2_legacy_bf16.gguf")
    r = gguf.GGUFReader(src)
    a = "deepseek2"
    val = lambda k: r.fields[f"{a}.{k}"].contents()
    nh, kmla, vmla = val("attention.head_count"), val("attention.key_length_mla"), val("attention.value_length_mla")
    rope, lr = val("rope.dimension_count"), val("attention.kv_lora_rank")
    dn = kmla - rope
    w = gguf.GGUFWriter(out, a)
    new = {f"{a}.attention.key_length": kmla, f"{a}.attention.value_length": vmla,
           f"{a}.attention.head_count_kv": nh}
    drop = {f"{a}.attention.key_length_mla", f"{a}.attention.value_length_mla"}
    for f in r.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF.") or f.name in drop:
            continue
        vt = f.types[0]
        sub = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, new.get(f.name, f.contents()), vt, sub_type=sub)
    tensors = []  # (name, uint8 bytes [rows, row bytes] or the reader's array, ggml type)
    by_name = {t.name: t for t in r.tensors}
    for t in r.tensors:
        if t.name.endswith("attn_v_b.weight"):
            continue
        if t.name.endswith("attn_k_b.weight"):
            if t.tensor_type != gguf.GGMLQuantizationType.BF16:
                sys.exit(f"{t.name}: BF16 expected")
            vb = by_name[t.name.replace("attn_k_b", "attn_v_b")]
            kb = np.frombuffer(t.data.tobytes(), np.uint16).reshape(nh, lr, dn)
            vv = np.frombuffer(vb.data.tobytes(), np.uint16).reshape(nh, -1, lr)
            kv = np.concatenate([kb.transpose(0, 2, 1), vv], axis=1).reshape(-1, lr)
            tensors.append((t.name.replace("attn_k_b", "attn_kv_b"),
                            np.ascontiguousarray(kv).view(np.uint8), gguf.GGMLQuantizationType.BF16))
            continue
        tensors.append((t.name, t.data, t.tensor_type))
    for name, data, tt in tensors:
        w.add_tensor_info(name, data.shape, data.dtype, data.nbytes, tt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, data, _ in tensors:
        w.write_tensor_data(data)
    w.close()
    shutil.copyfile(os.path.join(d, "deepseek2_bf16.ref.safetensors"),
                    os.path.join(d, "deepseek2_legacy_bf16.ref.safetensors"))
    print(f"{out}: {os.path.getsize(out)} bytes, {len(tensors)} tensors (attn_kv_b joined, {nh} kv heads)")


if __name__ == "__main__":
    main()
