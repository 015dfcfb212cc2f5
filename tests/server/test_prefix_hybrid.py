#!/usr/bin/env python3
"""test_prefix_hybrid.py — the prefix cache of a hybrid (Gated DeltaNet) model through `ft serve`
and the official `openai` client: recurrent-state checkpoints let an agent's next turn reuse the
conversation so far.

Two servers on the same hybrid fixture (exact fp32 activations): one with the prefix cache (the
default) and one with --no-prefix-cache. A conversation's second and third turns report
usage.prompt_tokens_details.cached_tokens (whole KV blocks, streamed too) and give the same greedy
answers as the uncached server; /metrics counts the hits; an unrelated prompt hits nothing; the
startup log says the hybrid prefix cache is on with its checkpoint size; --prefix-state-mem 0
turns it off.

Run by ctest (label server): test_prefix_hybrid.py --ft build/ft --model tests/data/models/qwen3_5_moe
Exits 1 on any failure, including a missing openai package.
"""
import argparse
import os
import re
import sys
import tempfile
import time
import urllib.request

try:
    from openai import OpenAI
except ImportError:
    print("test_prefix_hybrid: FAIL: the openai package is missing (tools/setup.sh test installs it "
          "into build/venv)")
    sys.exit(1)

from harness import check, finish, run_groups, start_server, stop_server

MODEL = "m"
ARGS = ["--threads", "2", "--cpu-act", "f32", "--served-model-name", MODEL]


def ask(client, messages, stream=False):
    """(content, usage) of a greedy chat completion, streamed or not."""
    if not stream:
        r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                           temperature=0)
        return r.choices[0].message.content, r.usage
    text, usage = "", None
    for ch in client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                             temperature=0, stream=True,
                                             stream_options={"include_usage": True}):
        usage = ch.usage or usage
        if ch.choices:
            text += ch.choices[0].delta.content or ""
    return text, usage


def metric(base, name):
    body = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? ([0-9.e+]+)$", body, re.M)
    return float(m.group(1)) if m else None


def test_turns(on, off, base):
    system = {"role": "system", "content": "You are a terse assistant who answers in lists. " * 5}
    turn1 = [system, {"role": "user", "content": "Count to five."}]
    a1, u1 = ask(on, turn1)
    b1, _ = ask(off, turn1)
    check(a1 == b1, f"turn 1 equals the uncached answer: {a1!r} vs {b1!r}")
    check(u1.prompt_tokens_details.cached_tokens == 0, "turn 1: nothing cached yet")
    turn2 = turn1 + [{"role": "assistant", "content": a1},
                     {"role": "user", "content": "Now backwards, please."}]
    a2, u2 = ask(on, turn2)
    b2, v2 = ask(off, turn2)
    c2 = u2.prompt_tokens_details.cached_tokens
    check(c2 >= 16 and c2 % 16 == 0 and c2 < u2.prompt_tokens,
          f"turn 2 restores turn 1's checkpoint: {c2} of {u2.prompt_tokens} prompt tokens cached")
    check(c2 <= u1.prompt_tokens - 16, f"the checkpoint lies a block before turn 1's end ({c2})")
    check(a2 == b2, f"turn 2 equals the uncached answer: {a2!r} vs {b2!r}")
    check(v2.prompt_tokens_details.cached_tokens == 0, "--no-prefix-cache caches nothing")
    turn3 = turn2 + [{"role": "assistant", "content": a2},
                     {"role": "user", "content": "And in French?"}]
    a3, u3 = ask(on, turn3, stream=True)
    b3, _ = ask(off, turn3)
    c3 = u3.prompt_tokens_details.cached_tokens
    check(c3 > c2 and c3 % 16 == 0, f"turn 3 (streamed) restores turn 2's checkpoint: {c3} > {c2}")
    check(a3 == b3, f"turn 3 equals the uncached answer: {a3!r} vs {b3!r}")
    other = [{"role": "system", "content": "Zebra " * 30}, {"role": "user", "content": "Hi"}]
    a4, u4 = ask(on, other)
    check(u4.prompt_tokens_details.cached_tokens == 0 and a4 == ask(off, other)[0],
          "an unrelated prompt hits nothing and is answered as uncached")
    print(f"  cached tokens: turn 2 {c2} of {u2.prompt_tokens}, turn 3 {c3} of {u3.prompt_tokens}; "
          f"answers {a1!r} {a2!r} {a3!r}")
    check(all(len(t) > 0 for t in (a1, a2, a3)), "the answers are not empty")
    hits = metric(base, "ft:prefix_cache_hits_total")
    check(hits == c2 + c3, f"/metrics prefix_cache_hits_total is {hits}, expected {c2 + c3}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="ft_prefix_hybrid_")
    log_on, log_zero = os.path.join(tmp, "on.log"), os.path.join(tmp, "zero.log")
    p_on, base_on = start_server(a.ft, a.model, ARGS, "test_prefix_hybrid", log=log_on)
    p_off, base_off = start_server(a.ft, a.model, ARGS + ["--no-prefix-cache"], "test_prefix_hybrid")
    rcs = []
    try:
        on = OpenAI(base_url=base_on + "/v1", api_key="unused", max_retries=0, timeout=120)
        off = OpenAI(base_url=base_off + "/v1", api_key="unused", max_retries=0, timeout=120)
        run_groups([("turns", lambda: test_turns(on, off, base_on))])
    finally:
        rcs = [stop_server(p_on), stop_server(p_off)]
    check(rcs == [0, 0], f"both servers exit 0 on SIGTERM ({rcs})")
    log = open(log_on).read()
    check(re.search(r"prefix cache: on for \S+ \(hybrid\) with recurrent-state checkpoints of "
                    r"[0-9.]+ [KMG]iB", log) is not None, "the startup log says the hybrid prefix "
          "cache is on and its checkpoint size")
    # --prefix-state-mem 0: no checkpoints, no hybrid prefix cache (said in the log)
    p0, base0 = start_server(a.ft, a.model, ARGS + ["--prefix-state-mem", "0"], "test_prefix_hybrid",
                             log=log_zero)
    try:
        c0 = OpenAI(base_url=base0 + "/v1", api_key="unused", max_retries=0, timeout=120)
        msgs = [{"role": "system", "content": "Be brief. " * 12}, {"role": "user", "content": "Hi"}]
        _, u = ask(c0, msgs)
        _, u = ask(c0, msgs)
        check(u.prompt_tokens_details.cached_tokens == 0, "--prefix-state-mem 0 caches nothing")
    finally:
        stop_server(p0)
    check("prefix cache: off for" in open(log_zero).read(), "--prefix-state-mem 0 is logged as off")
    finish("test_server_prefix_hybrid", t0)


if __name__ == "__main__":
    main()
