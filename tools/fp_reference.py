#!/usr/bin/env python3
"""fp_reference.py - the quantised formats' rules, written out from the published specs, and the
test vectors of tests/test_fp_formats.c (tests/data/fp/*.safetensors, ~120 KB).

Independent of the C code (src/format/fp_formats.c): values are decoded from the bit fields with
exact rational arithmetic (fractions.Fraction), and encoders pick the nearest representable value
by exact comparison over the format's whole value table (ties: the code whose last mantissa bit
is 0), instead of the C code's bit arithmetic.

Specs:
  * OCP 8-bit Floating Point Specification (OFP8) rev 1.0: E4M3 bias 7, no infinities,
    S.1111.111 = NaN, max normal S.1111.110 = 448; E5M2 bias 15, IEEE 754 special values
    (S.11111.00 = inf, S.11111.{01,10,11} = NaN), max 57344. Subnormals (exponent field 0):
    (-1)^S * 2^(1-bias) * 0.M.
  * OCP Microscaling Formats (MX) v1.0: E2M1 (FP4) bias 1, no inf/NaN, subnormal 0.M * 2^0;
    E8M0 scale X = 2^(E-127), E = 0xFF is NaN, no sign, no zero; MXFP4 block = 32 E2M1 elements
    sharing one E8M0 scale, value = X * P_i; a NaN scale makes the whole block NaN. Conversion
    to FP4 saturates to the maximum normal (+-6).
  * NVIDIA NVFP4 (Blackwell / TensorRT-Model-Optimizer): 16 E2M1 elements share one E4M3 scale
    (UE4M3: unsigned, always >= 0 in practice), plus one FP32 per-tensor scale (weight_scale_2):
    x = e2m1 * e4m3_scale * weight_scale_2. ModelOpt stores weight [N, K/2] uint8 (element 2j in
    the low nibble), weight_scale [N, K/16] float8_e4m3fn, weight_scale_2 fp32 scalar.
  * FP8 block quantisation (DeepSeek-V3, Qwen3-FP8): weight [N, K] float8_e4m3fn,
    weight_scale_inv [ceil(N/128), ceil(K/128)] fp32, x = fp8 * scale_inv of its block.
  * gpt-oss MXFP4 checkpoints: *_blocks uint8 [..., n_blocks, 16], *_scales uint8 [..., n_blocks];
    element 2j of a block in the low nibble of byte j.

Rounding of the products (FreeToken's definition, fp_formats.h): the exact product of element and
scales rounded once to f32. Here: float64 products (exact: at most 2+4+24 significant bits) cast
to float32 (one correctly rounded step, subnormals included).

Second reference where the installed packages allow: torch float8_e4m3fn / float8_e5m2 /
float8_e8m0fnu decoding of every code and torch's float8 conversions of every encoder case; the
MXFP4 / NVFP4 / FP8 rows are recomputed with torch float32 ops the way the model code does it.
Any disagreement aborts (exit 1). --check compares with the stored files instead of writing.

Usage: python3 tools/fp_reference.py [--out tests/data/fp] [--check] [--no-torch]
"""
import argparse
import os
import sys
from fractions import Fraction

import numpy as np
from safetensors.numpy import load_file, save_file

NAN = float("nan")


# ---------------------------------------------------------------- scalar formats, from the specs
class MiniFloat:
    """A sign + `ebits` exponent + `mbits` mantissa code; `special(code_mag)` returns None for a
    finite code or the float special value (inf / nan) the spec assigns to that magnitude."""

    def __init__(self, name, ebits, mbits, bias, special):
        self.name, self.ebits, self.mbits, self.bias, self.special = name, ebits, mbits, bias, special
        self.n_mag = 1 << (ebits + mbits)

    def exact(self, mag):
        """Exact rational value of a finite non-negative magnitude code."""
        e, m = mag >> self.mbits, mag & ((1 << self.mbits) - 1)
        if e == 0:  # subnormal: 2^(1-bias) * 0.M
            return Fraction(m, 1 << self.mbits) * Fraction(2) ** (1 - self.bias)
        return (1 + Fraction(m, 1 << self.mbits)) * Fraction(2) ** (e - self.bias)

    def decode(self, code):
        sign = -1.0 if code >> (self.ebits + self.mbits) & 1 else 1.0
        mag = code & (self.n_mag - 1)
        sp = self.special(mag)
        if sp is not None:
            return sp if np.isnan(sp) else sign * sp
        return sign * float(self.exact(mag))  # exact in float64 and float32

    def finite_mags(self):
        return [m for m in range(self.n_mag) if self.special(m) is None]


E4M3 = MiniFloat("e4m3", 4, 3, 7, lambda m: NAN if m == 0x7F else None)
E5M2 = MiniFloat("e5m2", 5, 2, 15, lambda m: (float("inf") if m == 0x7C else NAN) if m >= 0x7C else None)
E2M1 = MiniFloat("e2m1", 2, 1, 1, lambda m: None)


def e8m0_decode(code):
    """OCP MX v1.0 E8M0: 2^(E-127), 0xFF = NaN."""
    if code == 0xFF:
        return NAN
    return float(Fraction(2) ** (code - 127))


def ue4m3_decode(code):
    """NVFP4's unsigned E4M3 block scale: the magnitude bits of E4M3 (sign bit ignored)."""
    return E4M3.decode(code & 0x7F)


def round_nearest_even(fmt, x):
    """Magnitude code nearest to |x| (ties to the even code), over the finite values plus the
    first value past the largest one (as if the exponent range went on): returns
    (mag_code, overflowed)."""
    a = abs(Fraction(x))
    mags = fmt.finite_mags()
    top = mags[-1]
    # the next value after the largest finite one, with an unbounded exponent: one more step of
    # the top binade's spacing; its code would be top + 1 (mantissa parity continues)
    step = fmt.exact(top) - fmt.exact(top - 1)
    cands = [(fmt.exact(m), m) for m in mags] + [(fmt.exact(top) + step, top + 1)]
    best = None
    for v, m in cands:
        d = abs(v - a)
        if best is None or d < best[0] or (d == best[0] and m % 2 == 0):
            best = (d, m)
    return best[1], best[1] > top


def encode(fmt, x, overflow):
    """Encoder rule of fp_formats.h: RNE; overflow = 'saturate' (to the largest finite) or
    'inf' (IEEE). NaN: E4M3/E5M2 all-ones magnitude with the sign; E2M1 +0."""
    sign_bit = 1 << (fmt.ebits + fmt.mbits)
    neg = np.signbit(np.float32(x))
    if np.isnan(x):
        return 0 if fmt is E2M1 else (sign_bit if neg else 0) | (fmt.n_mag - 1)
    top = fmt.finite_mags()[-1]
    if np.isinf(x):
        mag = top if overflow == "saturate" else top + 1
    else:
        mag, over = round_nearest_even(fmt, float(x))
        if over:
            mag = top if overflow == "saturate" else top + 1  # E5M2: top + 1 = 0x7C = inf
    return (sign_bit if neg else 0) | mag


ENCODERS = {"e4m3": (E4M3, "saturate"), "e5m2": (E5M2, "inf"), "e2m1": (E2M1, "saturate")}


def encoder_cases(fmt, rng):
    """Every representable value, every midpoint between neighbours (ties), one f32 ulp either
    side of each midpoint, subnormals of f32, overflow, inf, NaN, random values; both signs."""
    vals = sorted(set(float(fmt.exact(m)) for m in fmt.finite_mags()))
    top = vals[-1]
    nxt = top + (vals[-1] - vals[-2])
    xs = []
    for v in vals + [nxt]:
        xs.append(v)
    for a, b in zip(vals + [top], vals[1:] + [nxt]):
        mid = np.float32((a + b) / 2)  # exact: a binade's midpoint has one more bit
        assert Fraction(float(mid)) == (Fraction(a) + Fraction(b)) / 2
        xs += [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))]
    xs += [1e-45, 1e-40, 1.1754942e-38, vals[1] / 4, top * 1.01, top * 4, 1e30, 3.4e38,
           float("inf")]
    xs += list(rng.standard_normal(200) * top / 3) + list(np.exp(rng.uniform(-25, 12, 200)))
    xs = [np.float32(x) for x in xs]
    xs = xs + [-x for x in xs] + [np.float32(NAN), -np.float32(NAN)]
    return np.array(xs, dtype=np.float32)


# ---------------------------------------------------------------- rows
def e2m1_table():
    return np.array([E2M1.decode(c) for c in range(16)], dtype=np.float64)


def unpack_nibbles(packed, n):
    """Packed bytes [..., n/2] -> codes [..., n]; element 2j in the low nibble of byte j."""
    lo, hi = packed & 15, packed >> 4
    out = np.stack([lo, hi], axis=-1).reshape(*packed.shape[:-1], -1)
    return out[..., :n]


def mxfp4_dequant(blocks, scales, n):
    """blocks u8 [R, nb, 16], scales u8 [R, nb] -> f32 [R, n]."""
    R, nb = scales.shape
    codes = unpack_nibbles(blocks.reshape(R, nb * 16), n)
    s = np.array([e8m0_decode(int(c)) for c in scales.ravel()]).reshape(R, nb)
    v = e2m1_table()[codes] * np.repeat(s, 32, axis=1)[:, :n]  # exact in float64
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np.float32)


def nvfp4_dequant(w, scales, scale_2, n):
    """w u8 [R, ceil(n/2)], scales u8 [R, ceil(n/16)] e4m3, scale_2 f32 [R] -> f32 [R, n]."""
    R = w.shape[0]
    codes = unpack_nibbles(w, n)
    s = np.array([E4M3.decode(int(c)) for c in scales.ravel()]).reshape(scales.shape)
    v = e2m1_table()[codes] * np.repeat(s, 16, axis=1)[:, :n] * scale_2.astype(np.float64)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np.float32)


def fp8_block_dequant(w, scale_inv, bn, bk):
    N, K = w.shape
    t = np.array([E4M3.decode(c) for c in range(256)])
    s = np.repeat(np.repeat(scale_inv.astype(np.float64), bn, axis=0), bk, axis=1)[:N, :K]
    with np.errstate(over="ignore", invalid="ignore"):
        return (t[w] * s).astype(np.float32)


def make_rows(rng):
    t = {}
    # MXFP4: 8 rows x 1024 elements = 256 blocks, whose scales are every e8m0 code once
    R, n = 8, 1024
    t["mxfp4.blocks"] = rng.integers(0, 256, (R, n // 32, 16), dtype=np.uint8)
    t["mxfp4.scales"] = rng.permutation(256).astype(np.uint8).reshape(R, n // 32)
    t["mxfp4.deq"] = mxfp4_dequant(t["mxfp4.blocks"], t["mxfp4.scales"], n)
    # a partial last block (n = 70: 3 blocks), gpt-oss-like scales around 2^-6..2^2
    t["mxfp4_tail.blocks"] = rng.integers(0, 256, (1, 3, 16), dtype=np.uint8)
    t["mxfp4_tail.scales"] = rng.integers(121, 130, (1, 3), dtype=np.uint8)
    t["mxfp4_tail.deq"] = mxfp4_dequant(t["mxfp4_tail.blocks"], t["mxfp4_tail.scales"], 70)
    # NVFP4: 8 rows x 512 = 256 blocks, scales = every e4m3 code (NaN, negatives, subnormals)
    R, n = 8, 512
    t["nvfp4.w"] = rng.integers(0, 256, (R, n // 2), dtype=np.uint8)
    t["nvfp4.scales"] = rng.permutation(256).astype(np.uint8).reshape(R, n // 16)
    t["nvfp4.scale_2"] = np.array([1.0, 1 / (6 * 448), 3.7e-3, 0.1234567, 1e-30, 1e-40, 1e30,
                                   -2.5], dtype=np.float32)
    t["nvfp4.deq"] = nvfp4_dequant(t["nvfp4.w"], t["nvfp4.scales"], t["nvfp4.scale_2"], n)
    # odd length: 37 elements, 19 bytes, 3 scales; realistic positive scales
    t["nvfp4_tail.w"] = rng.integers(0, 256, (1, 19), dtype=np.uint8)
    t["nvfp4_tail.scales"] = rng.integers(0x20, 0x60, (1, 3), dtype=np.uint8)
    t["nvfp4_tail.scale_2"] = np.array([2.1e-4], dtype=np.float32)
    t["nvfp4_tail.deq"] = nvfp4_dequant(t["nvfp4_tail.w"], t["nvfp4_tail.scales"],
                                        t["nvfp4_tail.scale_2"], 37)
    # FP8 128x128 blocks, partial in both directions: N = 130, K = 136
    N, K = 130, 136
    w = rng.integers(0, 256, (N, K), dtype=np.uint8)
    w[w & 0x7F == 0x7F] = 0x3C  # keep NaN codes out of the big case (the code table has them)
    t["fp8b.w"] = w
    t["fp8b.scale_inv"] = np.exp(rng.uniform(-12, 2, (2, 2))).astype(np.float32)
    t["fp8b.deq"] = fp8_block_dequant(w, t["fp8b.scale_inv"], 128, 128)
    # small blocks [bn, bk] = [4, 8] over N = 10, K = 21, every code, extreme scales
    N, K, bn, bk = 10, 21, 4, 8
    t["fp8s.w"] = rng.permutation(np.resize(np.arange(256), N * K)).astype(np.uint8).reshape(N, K)
    t["fp8s.block"] = np.array([bn, bk], dtype=np.int32)
    t["fp8s.scale_inv"] = np.array([[1.0, 2.0 ** -20, 1e-38], [3e36, 0.37, -1.5],
                                    [1e-45, 7.0, 0.0]], dtype=np.float32)
    t["fp8s.deq"] = fp8_block_dequant(t["fp8s.w"], t["fp8s.scale_inv"], bn, bk)
    # per-tensor FP8: 4 rows x 256 (every code once per row), one scale per row
    t["fp8t.w"] = np.stack([rng.permutation(256) for _ in range(4)]).astype(np.uint8)
    t["fp8t.scale"] = np.array([1.0, 0.0123, 1e-38, 2.5e35], dtype=np.float32)
    t["fp8t.deq"] = fp8_block_dequant(t["fp8t.w"], t["fp8t.scale"].reshape(4, 1), 1, 256)
    return t


def make_codes():
    return {
        "e4m3": np.array([E4M3.decode(c) for c in range(256)], dtype=np.float32),
        "e5m2": np.array([E5M2.decode(c) for c in range(256)], dtype=np.float32),
        "e2m1": np.array([E2M1.decode(c) for c in range(16)], dtype=np.float32),
        "e8m0": np.array([e8m0_decode(c) for c in range(256)], dtype=np.float32),
        "ue4m3": np.array([ue4m3_decode(c) for c in range(256)], dtype=np.float32),
    }


def make_encode(rng):
    t = {}
    for name, (fmt, overflow) in ENCODERS.items():
        xs = encoder_cases(fmt, rng)
        t[name + ".in"] = xs
        t[name + ".out"] = np.array([encode(fmt, x, overflow) for x in xs], dtype=np.uint8)
    return t


# ---------------------------------------------------------------- self-checks
def same_f32(a, b):
    """Bit-equal, except that any NaN equals any NaN."""
    a, b = np.asarray(a, np.float32).ravel(), np.asarray(b, np.float32).ravel()
    both_nan = np.isnan(a) & np.isnan(b)
    return a.shape == b.shape and bool(np.all(both_nan | (a.view(np.uint32) == b.view(np.uint32))))


def check_spec_facts(codes):
    """Values the specs state outright."""
    e4, e5, e2, e8 = codes["e4m3"], codes["e5m2"], codes["e2m1"], codes["e8m0"]
    assert e4[0x7E] == 448 and np.isnan(e4[0x7F]) and np.isnan(e4[0xFF]) and e4[1] == 2.0 ** -9
    assert e4[0x08] == 2.0 ** -6 and e4[0x07] == 7 * 2.0 ** -9 and np.signbit(e4[0x80])
    assert np.isnan(e4).sum() == 2
    assert e5[0x7B] == 57344 and e5[0x7C] == np.inf and e5[0xFC] == -np.inf and e5[1] == 2.0 ** -16
    assert np.isnan(e5).sum() == 6
    assert list(e2[:8]) == [0, 0.5, 1, 1.5, 2, 3, 4, 6] and list(e2[8:]) == [-0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert e8[127] == 1 and e8[0] == np.float32(2.0 ** -127) and e8[254] == np.float32(2.0 ** 127)
    assert np.isnan(e8[255])


def check_torch(codes, enc, rows):
    import torch

    def tview(dtype, n=256):
        return torch.arange(n, dtype=torch.int32).to(torch.uint8).view(dtype).float().numpy()

    assert same_f32(codes["e4m3"], tview(torch.float8_e4m3fn)), "e4m3 decode vs torch"
    assert same_f32(codes["e5m2"], tview(torch.float8_e5m2)), "e5m2 decode vs torch"
    n_checks = 2
    if hasattr(torch, "float8_e8m0fnu"):
        assert same_f32(codes["e8m0"], tview(torch.float8_e8m0fnu)), "e8m0 decode vs torch"
        n_checks += 1
    for name, dt in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
        got = torch.from_numpy(enc[name + ".in"]).to(dt).view(torch.uint8).numpy()
        bad = np.nonzero(got != enc[name + ".out"])[0]
        assert bad.size == 0, f"{name} encode vs torch at {enc[name + '.in'][bad[:5]]}: " \
                              f"{got[bad[:5]]} vs {enc[name + '.out'][bad[:5]]}"
        n_checks += 1
    # rows the way model code computes them, in torch float32
    lut = torch.tensor(codes["e2m1"])
    for key, n in (("mxfp4", 1024), ("mxfp4_tail", 70)):
        b = torch.from_numpy(rows[key + ".blocks"]).long()
        R = b.shape[0]
        flat = b.reshape(R, -1)
        v = torch.stack([lut[flat & 15], lut[flat >> 4]], -1).reshape(R, -1)
        e = torch.from_numpy(rows[key + ".scales"]).int() - 127
        v = torch.ldexp(v, torch.repeat_interleave(e, 32, dim=1).float())[:, :n]
        nan = torch.repeat_interleave(torch.from_numpy(rows[key + ".scales"]) == 255, 32, 1)[:, :n]
        v[nan] = float("nan")  # gpt-oss's ldexp gives inf * 0 / inf for E = 255; the spec: NaN
        assert same_f32(rows[key + ".deq"], v.numpy()), key + " vs torch"
        n_checks += 1
    for key, n in (("nvfp4", 512), ("nvfp4_tail", 37)):
        w = torch.from_numpy(rows[key + ".w"]).long()
        R = w.shape[0]
        v = torch.stack([lut[w & 15], lut[w >> 4]], -1).reshape(R, -1)[:, :n]
        s = torch.from_numpy(rows[key + ".scales"]).view(torch.float8_e4m3fn).float()
        s = torch.repeat_interleave(s, 16, dim=1)[:, :n]
        v = (v * s) * torch.from_numpy(rows[key + ".scale_2"])[:, None]
        assert same_f32(rows[key + ".deq"], v.numpy()), key + " vs torch"
        n_checks += 1
    for key in ("fp8b", "fp8s"):
        bn, bk = rows[key + ".block"] if key + ".block" in rows else (128, 128)
        w = torch.from_numpy(rows[key + ".w"]).view(torch.float8_e4m3fn).float()
        s = torch.from_numpy(rows[key + ".scale_inv"])
        s = s.repeat_interleave(int(bn), 0).repeat_interleave(int(bk), 1)[: w.shape[0], : w.shape[1]]
        assert same_f32(rows[key + ".deq"], (w * s).numpy()), key + " vs torch"
        n_checks += 1
    return n_checks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "fp"))
    ap.add_argument("--check", action="store_true", help="compare with the stored files")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch cross-check")
    args = ap.parse_args()

    rng = np.random.default_rng(20240609)
    files = {"codes": make_codes(), "encode": make_encode(rng), "rows": make_rows(rng)}
    check_spec_facts(files["codes"])
    if not args.no_torch:
        n = check_torch(files["codes"], files["encode"], files["rows"])
        print(f"torch {__import__('torch').__version__}: {n} cross-checks agree")
    for name, t in files.items():
        path = os.path.join(args.out, name + ".safetensors")
        if args.check:
            old = load_file(path)
            assert sorted(old) == sorted(t), f"{path}: tensor names differ"
            for k in t:
                assert old[k].dtype == t[k].dtype and old[k].shape == t[k].shape, f"{path}:{k}"
                ok = same_f32(old[k], t[k]) if t[k].dtype == np.float32 else np.array_equal(old[k], t[k])
                assert ok, f"{path}: {k} differs"
            print(f"{path}: same")
        else:
            os.makedirs(args.out, exist_ok=True)
            save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, path,
                      metadata={"generator": "tools/fp_reference.py"})
            print(f"{path}: {len(t)} tensors, {os.path.getsize(path)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
