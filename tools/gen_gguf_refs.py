#!/usr/bin/env python3
"""Generates tests/data/gguf/ for tests/test_gguf.c with the reference `gguf` Python package
(PyPI, llama.cpp's own writer and reference dequantisers), so the C reader and block codecs
are checked against code they share nothing with. Run from anywhere (deterministic):
    pip install gguf numpy safetensors && python3 tools/gen_gguf_refs.py
Writes:
  blocks.gguf       metadata of every value type (scalars, strings, arrays of each, nested
                    arrays) and tensors of every block type FreeToken-C computes with
                    (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
                    MXFP4), 1-D to 4-D, filled
                    with random blocks (random bytes; f16 scales drawn finite); "edge.*" tensors
                    hold every zero/subnormal/inf/NaN f16 and bf16 bit pattern and unrestricted scale bytes (inf/NaN/
                    subnormal scales) and are only compared, never dotted
  blocks_ref.safetensors  the same names, F32: gguf.quants.dequantize of each tensor
  align64.gguf      general.alignment = 64, two tensors
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from safetensors.numpy import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gguf")
rng = np.random.default_rng(20250805)


def f16_scales(n, scale=0.01):
    """n finite f16 scale bytes (2 each), varied magnitudes, both signs."""
    v = (rng.standard_normal(n) * scale * np.exp2(rng.integers(-6, 3, n))).astype(np.float16)
    return v.view(np.uint8).reshape(n, 2)


def random_blocks(qt, n_blocks, edge=False):
    """n_blocks random blocks of type qt in GGML layout (uint8 [n_blocks, type_size])."""
    _, ts = gguf.GGML_QUANT_SIZES[qt]
    b = rng.integers(0, 256, (n_blocks, ts), dtype=np.uint8)
    if edge:
        return b
    if qt in (Q.Q8_0, Q.Q4_0, Q.Q5_0):
        b[:, 0:2] = f16_scales(n_blocks)
    elif qt in (Q.Q4_1, Q.Q5_1):  # d, m
        b[:, 0:2] = f16_scales(n_blocks)
        b[:, 2:4] = f16_scales(n_blocks)
    elif qt in (Q.Q4_K, Q.Q5_K):
        b[:, 0:2] = f16_scales(n_blocks, 0.001)
        b[:, 2:4] = f16_scales(n_blocks, 0.001)
    elif qt == Q.Q6_K:
        b[:, 208:210] = f16_scales(n_blocks, 0.001)
    elif qt == Q.MXFP4:
        b[:, 0] = rng.integers(110, 140, n_blocks, dtype=np.uint8)
    return b


def plain(qt, n, edge=False):
    if qt == Q.F32:
        return (rng.standard_normal(n) * np.exp2(rng.integers(-10, 10, n))).astype(np.float32).view(np.uint8)
    if edge:  # every zero/subnormal/inf/NaN bit pattern (f16 exponent 0 or 31), then random ones
        h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
        e = (h >> 10) & 31 if qt == Q.F16 else (h >> 7) & 255
        special = h[(e == 0) | (e == (31 if qt == Q.F16 else 255))]
        rest = rng.integers(0, 65536, n - special.size).astype(np.uint16)
        return np.concatenate([special, rest]).view(np.uint8)
    v = rng.standard_normal(n).astype(np.float32)
    if qt == Q.F16:
        return v.astype(np.float16).view(np.uint8)
    return (v.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)  # BF16 (truncated)


TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.MXFP4, Q.Q4_1, Q.Q5_0,
         Q.Q5_1]
# numpy shapes (outermost first); GGUF stores them reversed (ne[0] = last)
SHAPES = [(512,), (3, 512), (2, 2, 256), (2, 1, 2, 256)]


def tensor_bytes(qt, shape, edge=False):
    blk, ts = gguf.GGML_QUANT_SIZES[qt]
    n = int(np.prod(shape))
    if blk == 1:
        raw = plain(qt, n, edge)
    else:
        raw = random_blocks(qt, n // blk, edge).reshape(-1)
    return raw.reshape(*shape[:-1], shape[-1] // blk * ts)


def add_metadata(w):
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_uint64("t.u64", 18000000000000000000)
    w.add_int64("t.i64", -9000000000000000000)
    w.add_float32("t.f32", 0.15625)
    w.add_float64("t.f64", -1.0e-300)
    w.add_bool("t.bool_t", True)
    w.add_bool("t.bool_f", False)
    w.add_string("t.str", "héllo ✓ wörld")
    w.add_key_value("t.str_nul", "a\0b", V.STRING)
    for name, vt, vals in [
        ("u8", V.UINT8, [0, 1, 255]), ("i8", V.INT8, [-128, 0, 127]),
        ("u16", V.UINT16, [0, 65535]), ("i16", V.INT16, [-32768, 32767]),
        ("u32", V.UINT32, [0, 4294967295]), ("i32", V.INT32, [-2147483648, 2147483647]),
        ("u64", V.UINT64, [0, 18446744073709551615]), ("i64", V.INT64, [-9223372036854775808, 1]),
        ("f32", V.FLOAT32, [1.5, -2.25, 0.0]), ("f64", V.FLOAT64, [3.5, -1e100]),
        ("bool", V.BOOL, [True, False, True]),
    ]:
        w.add_key_value("t.arr_" + name, vals, V.ARRAY, sub_type=vt)
    # a token-list-like string array (index i holds "tok<i>"; some non-ASCII) and scores
    w.add_key_value("t.tokens", [f"tok{i}" if i % 7 else f"ĠŁ{i}" for i in range(5000)], V.ARRAY,
                    sub_type=V.STRING)
    w.add_key_value("t.arr_arr_str", [["a", "bc"], ["", "déf", "g"]], V.ARRAY, sub_type=V.ARRAY)
    w.add_key_value("t.arr_arr_i32", [[1, 2, 3], [-4]], V.ARRAY, sub_type=V.ARRAY)


def main():
    os.makedirs(OUT, exist_ok=True)
    ref = {}
    w = gguf.GGUFWriter(os.path.join(OUT, "blocks.gguf"), arch="fttest")
    w.add_name("ft gguf test")
    add_metadata(w)
    for qt in TYPES:
        for si, shape in enumerate(SHAPES):
            name = f"{qt.name.lower()}.{si}"
            raw = tensor_bytes(qt, shape)
            w.add_tensor(name, raw, raw_dtype=qt)
            ref[name] = np.ascontiguousarray(gguf.quants.dequantize(raw, qt).reshape(shape), np.float32)
    for qt, shape in [(Q.F16, (8192,)), (Q.BF16, (8192,)), (Q.Q8_0, (8, 256)), (Q.Q4_0, (8, 256)),
                      (Q.Q4_K, (8, 256)), (Q.Q5_K, (8, 256)), (Q.Q6_K, (8, 256)), (Q.MXFP4, (8, 512)),
                      (Q.Q4_1, (8, 256)), (Q.Q5_0, (8, 256)), (Q.Q5_1, (8, 256))]:
        name = f"edge.{qt.name.lower()}"
        raw = tensor_bytes(qt, shape, edge=True)
        if qt == Q.MXFP4:  # every exponent byte, twice
            raw.reshape(-1, 17)[:, 0] = np.arange(256, dtype=np.uint8).repeat(2)[: raw.size // 17]
        w.add_tensor(name, raw, raw_dtype=qt)
        with np.errstate(all="ignore"):
            ref[name] = np.ascontiguousarray(gguf.quants.dequantize(raw, qt).reshape(shape), np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file(ref, os.path.join(OUT, "blocks_ref.safetensors"))

    w = gguf.GGUFWriter(os.path.join(OUT, "align64.gguf"), arch="fttest")
    w.add_custom_alignment(64)
    w.add_tensor("a", np.arange(5, dtype=np.float32))
    w.add_tensor("b", np.arange(6, dtype=np.int32).reshape(2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)))


if __name__ == "__main__":
    main()
