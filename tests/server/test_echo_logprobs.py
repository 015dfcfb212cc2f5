#!/usr/bin/env python3
"""test_echo_logprobs.py — /v1/completions `echo: true` with `logprobs: N` (the prompt's tokens
scored, OpenAI's legacy shape) and `max_tokens: 0` (prompt scoring only), driven by the official
`openai` client.

The reference is independent of the server: `ft logits` (teacher-forced logits of every position,
checked against transformers by test_model_fixtures) on the same token ids, turned into
log-softmax here. Every prompt token's logprob must be that within 1e-3 (both at --cpu-act f32),
the alternatives the reference's largest ones. Run on two servers: one with prompt chunks of 7
tokens (chunked prefill, chunk ends off the KV blocks), one with the default 2048 (the scheduler
then scores at most 64 prompt rows a step). Also: the prefix cache is bypassed for a scored
prompt (after the same prompt was cached), streamed equals not streamed, requests scored
together with others give their solo numbers, bad values are a 400 naming the field.

Run by ctest (label server):
  test_echo_logprobs.py --ft build/ft --model tests/data/models/qwen3_moe
Needs openai (tools/setup.sh test installs it into build/venv).
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

try:
    from openai import OpenAI
except ImportError as e:
    print(f"test_echo_logprobs: FAIL: {e.name} is missing (tools/setup.sh test installs it into "
          "build/venv)")
    sys.exit(1)

from harness import check, finish, run_groups, start_server, stop_server

MODEL = "m"
PROMPT = ("Counting sheep: one sheep, two sheep, three sheep, four sheep. The farmer counted "
          "them again at dusk, and every evening the numbers came out the same, forty two.")
OTHER = "A second prompt, scored at the same time as the first one: alpha beta gamma delta."
TOL = 1e-3


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def read_logits(path):
    """The F32 'logits' tensor [T, vocab] of a safetensors file, as a list of rows."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    t = head["logits"]
    assert t["dtype"] == "F32", t
    rows, vocab = t["shape"]
    lo, hi = t["data_offsets"]
    flat = struct.unpack(f"<{rows * vocab}f", data[lo:hi])
    return [flat[r * vocab:(r + 1) * vocab] for r in range(rows)]


def log_softmax(row):
    m = max(row)
    lse = m + math.log(sum(math.exp(x - m) for x in row))
    return [x - lse for x in row]


def reference(ft, model, ids):
    """log-softmax of ft logits' teacher-forced rows for ids (row i predicts ids[i + 1])."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "l.safetensors")
        subprocess.run([ft, "logits", "--model", model, "--backend", "cpu", "--cpu-act", "f32",
                        "--ids", ",".join(map(str, ids)), "--out", out], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return [log_softmax(r) for r in read_logits(out)]


def check_prompt_part(lp, ids, ref, k, what):
    """The first len(ids) entries of a completions logprobs object against the reference."""
    n = len(ids)
    check(len(lp.tokens) >= n and len(lp.token_logprobs) >= n, f"{what}: {n} prompt entries")
    check(lp.token_logprobs[0] is None, f"{what}: the first prompt token's logprob is null")
    worst = 0.0
    for i in range(1, min(n, len(lp.token_logprobs))):
        x = lp.token_logprobs[i]
        if x is None:
            worst = float("inf")
            continue
        worst = max(worst, abs(x - ref[i - 1][ids[i]]))
    check(worst < TOL, f"{what}: prompt token logprobs within {TOL} of ft logits' log-softmax "
          f"(worst {worst:.2e})")
    if k:
        check(lp.top_logprobs[0] is None, f"{what}: the first token has no alternatives")
        bad = 0
        for i in range(1, n):
            top = lp.top_logprobs[i]
            want = sorted(ref[i - 1], reverse=True)[:k]
            vals = sorted(top.values(), reverse=True)
            if len(top) == k:  # no two alternatives share a text: all of them are there
                bad += any(abs(a - b) > TOL for a, b in zip(vals, want))
            else:  # texts collide in the dict (the likelier kept): each one of the k largest
                bad += (not vals or abs(vals[0] - want[0]) > TOL or
                        any(min(abs(v - w) for w in want) > TOL for v in vals))
        check(bad == 0, f"{what}: alternatives are the reference's {k} largest ({bad} rows off)")
    else:
        check(lp.top_logprobs is None, f"{what}: logprobs 0: no alternatives")
    offs, o = [], 0
    for t in lp.tokens:
        offs.append(o)
        o += len(t)
    check(lp.text_offset[:n] == offs[:n], f"{what}: prompt offsets count the tokens' texts from 0")


def test_scored(ft, model, client, base, ids):
    ref = reference(ft, model, ids)
    n = len(ids)
    # max_tokens 0: the prompt scored, nothing generated
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=0, echo=True, logprobs=3)
    ch = r.choices[0]
    check(ch.text == PROMPT, "max_tokens 0: the text is the prompt")
    check(ch.finish_reason == "length" and r.usage.completion_tokens == 0,
          f"max_tokens 0: finish length, 0 tokens ({ch.finish_reason}, {r.usage.completion_tokens})")
    check(len(ch.logprobs.tokens) == n, f"max_tokens 0: {len(ch.logprobs.tokens)} entries, {n} tokens")
    check("".join(ch.logprobs.tokens) == PROMPT, "the prompt's token texts make the prompt")
    check_prompt_part(ch.logprobs, ids, ref, 3, "max_tokens 0")
    scored = ch.logprobs
    # with a greedy completion after it: the prompt part unchanged, then the generated tokens
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=5, echo=True, logprobs=2,
                                  temperature=0)
    ch, lp = r.choices[0], r.choices[0].logprobs
    g = r.usage.completion_tokens
    check(len(lp.tokens) == n + g and len(lp.text_offset) == n + g,
          f"echo + 5 tokens: {len(lp.tokens)} entries for {n} + {g}")
    check_prompt_part(lp, ids, ref, 2, "echo + generation")
    check(ch.text == PROMPT + "".join(lp.tokens[n:]), "text: the prompt, then the generated tokens")
    best = max(ref[n - 1])
    check(g > 0 and abs(lp.token_logprobs[n] - best) < TOL,
          f"the first generated token (greedy) has the last row's largest logprob "
          f"({lp.token_logprobs[n] if g else None} / {best:.5f})")
    check(lp.text_offset[n] == len(PROMPT), "generated offsets continue after the prompt")
    # logprobs 0: the prompt tokens' own logprobs, no alternatives
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=0, echo=True, logprobs=0)
    check_prompt_part(r.choices[0].logprobs, ids, ref, 0, "logprobs 0")
    # streamed: the same entries, the echo chunk carrying the prompt's
    s = client.completions.create(model=MODEL, prompt=ids, max_tokens=5, echo=True, logprobs=2,
                                  temperature=0, stream=True)
    toks, lps, offs, text = [], [], [], ""
    for c in s:
        if not c.choices:
            continue
        text += c.choices[0].text
        if c.choices[0].logprobs:
            toks += c.choices[0].logprobs.tokens
            lps += c.choices[0].logprobs.token_logprobs
            offs += c.choices[0].logprobs.text_offset
    check(text == ch.text, "streamed: the same text")
    check(toks == lp.tokens and offs == lp.text_offset, "streamed: the same tokens and offsets")
    check(lps[0] is None and all(abs(a - b) < 1e-5 for a, b in zip(lps[1:], lp.token_logprobs[1:])),
          "streamed: the same logprobs")
    # a string prompt: the same tokens as its ids
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=0, echo=True, logprobs=3)
    check(r.choices[0].logprobs.tokens == scored.tokens and
          r.choices[0].logprobs.token_logprobs == scored.token_logprobs,
          "a string prompt scores as its token ids")


def test_prefix_cache(ft, model, client, ids):
    ref = reference(ft, model, ids)
    plain = [client.completions.create(model=MODEL, prompt=ids, max_tokens=1, temperature=0)
             for _ in range(2)]
    cached = plain[1].usage.prompt_tokens_details.cached_tokens
    check(cached and cached > 0, f"the prompt is in the prefix cache ({cached} tokens cached)")
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=1, echo=True, logprobs=1)
    check(r.usage.prompt_tokens_details.cached_tokens == 0,
          "a scored prompt does not take the cached prefix")
    check_prompt_part(r.choices[0].logprobs, ids, ref, 1, "after the prefix cache held it")


def test_together(ft, model, client, base, ids):
    other = post(base, "/tokenize", {"prompt": OTHER})[1]["tokens"]
    solo_a = client.completions.create(model=MODEL, prompt=ids, max_tokens=4, echo=True,
                                       logprobs=2, temperature=0)
    solo_b = client.completions.create(model=MODEL, prompt=other, max_tokens=0, echo=True,
                                       logprobs=2)
    solo_c = client.completions.create(model=MODEL, prompt="Plain generation beside them",
                                       max_tokens=12, temperature=0)
    got = {}

    def run(key, **kw):
        got[key] = client.completions.create(model=MODEL, **kw)

    jobs = [threading.Thread(target=run, args=("a",), kwargs=dict(prompt=ids, max_tokens=4,
                                                                    echo=True, logprobs=2,
                                                                    temperature=0)),
            threading.Thread(target=run, args=("b",), kwargs=dict(prompt=other, max_tokens=0,
                                                                    echo=True, logprobs=2)),
            threading.Thread(target=run, args=("c",), kwargs=dict(prompt="Plain generation beside them",
                                                                    max_tokens=12, temperature=0))]
    for j in jobs:
        j.start()
    for j in jobs:
        j.join()
    for key, solo in (("a", solo_a), ("b", solo_b)):
        a, b = got[key].choices[0].logprobs, solo.choices[0].logprobs
        same = a.tokens == b.tokens and all(
            (x is None and y is None) or abs(x - y) < 1e-4 for x, y in zip(a.token_logprobs, b.token_logprobs))
        check(same, f"request {key} scored beside others gives its solo numbers")
    check(got["c"].choices[0].text == solo_c.choices[0].text,
          "a plain request beside scored ones gives its solo text")
    check_prompt_part(got["b"].choices[0].logprobs, other, reference(ft, model, other), 2,
                      "the second prompt, scored beside others")


def test_bad_input(base):
    for body, field, what in [
        ({"prompt": "x", "echo": True, "logprobs": 21}, "logprobs", "echo with logprobs over 20"),
        ({"prompt": "x", "echo": True, "logprobs": -1}, "logprobs", "echo with negative logprobs"),
        ({"prompt": "x", "echo": True, "logprobs": "3"}, "logprobs", "logprobs a string"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens", "max_tokens 0 without echo"),
        ({"prompt": "x", "echo": True, "max_tokens": -1}, "max_tokens", "max_tokens negative"),
        ({"prompt": "x", "echo": "yes", "logprobs": 1}, "echo", "echo not a boolean"),
        ({"prompt": [], "echo": True, "logprobs": 1, "max_tokens": 0}, "prompt", "empty prompt"),
        ({"prompt": [1, 99999], "echo": True, "logprobs": 1}, "prompt", "token id out of range"),
    ]:
        st, j = post(base, "/v1/completions", body)
        err = j.get("error", {})
        check(st == 400 and err.get("param") == field and err.get("message"),
              f"{what}: 400 naming {field} ({st}, {err.get('param')})")
    st, j = post(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                               "max_tokens": 0})
    check(st == 400 and j["error"]["param"] == "max_tokens", f"chat max_tokens 0: 400 ({st})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    t0 = time.time()
    for prefill in ("7", "2048"):
        proc, base = start_server(a.ft, a.model, ["--ctx-size", "1024", "--served-model-name", "m",
                                                  "--cpu-act", "f32", "--max-prefill-length",
                                                  prefill], "test_echo_logprobs", timeout=120)
        client = OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=300)
        try:
            ids = post(base, "/tokenize", {"prompt": PROMPT})[1]["tokens"]
            print(f"prompt chunks of {prefill}: {len(ids)} prompt tokens", flush=True)
            run_groups([(f"echo + logprobs (prefill {prefill})",
                         lambda: test_scored(a.ft, a.model, client, base, ids)),
                        (f"prefix cache bypassed (prefill {prefill})",
                         lambda: test_prefix_cache(a.ft, a.model, client, ids)),
                        (f"scored beside others (prefill {prefill})",
                         lambda: test_together(a.ft, a.model, client, base, ids)),
                        (f"bad input (prefill {prefill})", lambda: test_bad_input(base))])
            st, _ = post(base, "/v1/completions", {"prompt": "still up", "max_tokens": 1})
            check(st == 200, "the server is still up")
        finally:
            rc = stop_server(proc)
            check(rc == 0, f"clean exit on SIGTERM ({rc})")
    finish("test_echo_logprobs", t0)


if __name__ == "__main__":
    main()
