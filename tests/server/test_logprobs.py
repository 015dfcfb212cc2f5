#!/usr/bin/env python3
"""test_logprobs.py — chat `logprobs` / `top_logprobs` and /v1/completions `logprobs` / `echo` of
`ft serve`, driven by the official `openai` client, streamed and not.

Checked on the random-weight fixture (qwen3_moe): every logprob is finite and <= 0, the
alternatives come most likely first, a greedy token is its own top alternative (logprob equal to
the first one's), the probabilities of the alternatives sum to at most 1, the same tokens and
numbers come back streamed, one entry per completion token, the token texts put together give the
completion text, echo puts the prompt first, and bad values are a 400.

Run by ctest (label server):
  test_logprobs.py --ft build/ft --model tests/data/models/qwen3_moe
Needs openai (tools/setup.sh test installs it into build/venv).
"""
import argparse
import json
import math
import sys
import time
import urllib.error
import urllib.request

try:
    import openai
    from openai import OpenAI
except ImportError as e:
    print(f"test_logprobs: FAIL: {e.name} is missing (tools/setup.sh test installs it into "
          "build/venv)")
    sys.exit(1)

from harness import check, finish, run_groups, start_server, stop_server

MODEL = "m"
MSGS = [{"role": "user", "content": "Count: one two three"}]


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def good(x):
    return isinstance(x, float) and math.isfinite(x) and x <= 0


def check_entry(e, k, greedy, what):
    """One chat logprobs entry (openai's ChatCompletionTokenLogprob)."""
    check(good(e.logprob), f"{what}: logprob {e.logprob} finite and <= 0")
    check(e.bytes is not None and bytes(e.bytes).decode("utf-8", "replace") is not None,
          f"{what}: bytes given")
    tops = e.top_logprobs
    check(len(tops) == k, f"{what}: {len(tops)} alternatives, asked {k}")
    lps = [t.logprob for t in tops]
    check(all(good(x) for x in lps), f"{what}: alternatives finite and <= 0")
    check(lps == sorted(lps, reverse=True), f"{what}: alternatives most likely first")
    check(sum(math.exp(x) for x in lps) <= 1 + 1e-4, f"{what}: alternatives sum to <= 1")
    if greedy and tops:
        check(tops[0].token == e.token and abs(tops[0].logprob - e.logprob) < 1e-5,
              f"{what}: greedy token {e.token!r} is the first alternative ({tops[0].token!r})")


def test_chat(client):
    r = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=12, temperature=0,
                                       logprobs=True, top_logprobs=5)
    ch = r.choices[0]
    content = ch.logprobs.content
    check(len(content) == r.usage.completion_tokens,
          f"one entry per completion token ({len(content)} / {r.usage.completion_tokens})")
    for i, e in enumerate(content):
        check_entry(e, 5, True, f"chat token {i}")
    text = "".join(e.token for e in content)
    msg = (ch.message.reasoning_content or "") if hasattr(ch.message, "reasoning_content") else ""
    check(text.replace("<think>", "").replace("</think>", "").strip() != "" or not content,
          "token texts are there")
    check((ch.message.content or "") in text or msg, "the content is made of the tokens' texts")
    # streamed: the same tokens and numbers
    s = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=12, temperature=0,
                                       logprobs=True, top_logprobs=5, stream=True)
    got = []
    for chunk in s:
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            got += chunk.choices[0].logprobs.content
    check([e.token for e in got] == [e.token for e in content],
          f"streamed tokens are the same ({len(got)} / {len(content)})")
    check(all(abs(a.logprob - b.logprob) < 1e-4 for a, b in zip(got, content)),
          "streamed logprobs are the same")
    # logprobs without alternatives; sampled (not greedy) tokens
    r = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=8, temperature=1.0,
                                       seed=7, logprobs=True)
    for i, e in enumerate(r.choices[0].logprobs.content):
        check_entry(e, 0, False, f"sampled token {i}")
    # off: null
    r = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=4, temperature=0)
    check(r.choices[0].logprobs is None, "no logprobs unless asked")


def test_completions(client):
    prompt = "The numbers are one, two,"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=10, temperature=0,
                                  logprobs=3)
    lp = r.choices[0].logprobs
    n = r.usage.completion_tokens
    check(len(lp.tokens) == n and len(lp.token_logprobs) == n and len(lp.top_logprobs) == n
          and len(lp.text_offset) == n, f"one entry per token ({len(lp.tokens)} / {n})")
    check(all(good(x) for x in lp.token_logprobs), "token_logprobs finite and <= 0")
    for i, (t, x, top) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
        vals = list(top.values())
        check(1 <= len(top) <= 3 and all(good(v) for v in vals), f"token {i}: top dict {top}")
        check(t in top and abs(top[t] - x) < 1e-5 and abs(max(vals) - x) < 1e-5,
              f"token {i}: greedy {t!r} is the most likely")
    check("".join(lp.tokens) == r.choices[0].text, "the tokens make the text")
    check(lp.text_offset == sorted(lp.text_offset) and (not n or lp.text_offset[0] == 0),
          f"text offsets count from the completion's start: {lp.text_offset}")
    s = client.completions.create(model=MODEL, prompt=prompt, max_tokens=10, temperature=0,
                                  logprobs=3, stream=True)
    toks, lps, offs = [], [], []
    for chunk in s:
        c = chunk.choices[0] if chunk.choices else None
        if c and c.logprobs:
            toks += c.logprobs.tokens
            lps += c.logprobs.token_logprobs
            offs += c.logprobs.text_offset
    check(toks == lp.tokens, "streamed tokens are the same")
    check(all(abs(a - b) < 1e-4 for a, b in zip(lps, lp.token_logprobs)), "and their logprobs")
    check(offs == lp.text_offset, "and their offsets")
    # logprobs=0: the tokens' own logprobs, no alternatives
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0,
                                  logprobs=0)
    lp = r.choices[0].logprobs
    check(len(lp.token_logprobs) == r.usage.completion_tokens and lp.top_logprobs is None,
          "logprobs=0: token logprobs, no alternatives")


def test_echo(client):
    prompt = "Echo this prompt"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0,
                                  echo=True)
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)
    check(r.choices[0].text == prompt + plain.choices[0].text,
          f"echo: the prompt, then the completion ({r.choices[0].text!r})")
    s = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0,
                                  echo=True, stream=True)
    text = "".join(c.choices[0].text for c in s if c.choices)
    check(text == r.choices[0].text, "streamed echo is the same")


def test_bad_input(base):
    for body, what in [
        ({"messages": MSGS, "logprobs": "yes"}, "chat logprobs not a boolean"),
        ({"messages": MSGS, "logprobs": True, "top_logprobs": 21}, "top_logprobs over 20"),
        ({"messages": MSGS, "logprobs": True, "top_logprobs": -1}, "top_logprobs negative"),
        ({"messages": MSGS, "top_logprobs": 2}, "top_logprobs without logprobs"),
    ]:
        st, j = post(base, "/v1/chat/completions", dict(body, max_tokens=2))
        check(st == 400 and "error" in j, f"{what}: 400 ({st})")
    for body, what in [
        ({"prompt": "x", "logprobs": True}, "completions logprobs a boolean"),
        ({"prompt": "x", "logprobs": 21}, "completions logprobs over 20"),
        ({"prompt": "x", "echo": 1}, "echo not a boolean"),
    ]:
        st, j = post(base, "/v1/completions", dict(body, max_tokens=2))
        check(st == 400 and "error" in j, f"{what}: 400 ({st})")
    st, j = post(base, "/v1/completions", {"prompt": "x", "max_tokens": 2, "logprobs": None})
    check(st == 200, f"logprobs null is off ({st})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    t0 = time.time()
    proc, base = start_server(a.ft, a.model, ["--ctx-size", "1024", "--served-model-name", "m"],
                              "test_logprobs", timeout=120)
    client = OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=300)
    try:
        run_groups([("chat logprobs", lambda: test_chat(client)),
                    ("completions logprobs", lambda: test_completions(client)),
                    ("echo", lambda: test_echo(client)),
                    ("bad input", lambda: test_bad_input(base))])
        st, _ = post(base, "/v1/completions", {"prompt": "still up", "max_tokens": 1})
        check(st == 200, "the server is still up")
    finally:
        rc = stop_server(proc)
        check(rc == 0, f"clean exit on SIGTERM ({rc})")
    finish("test_logprobs", t0)


if __name__ == "__main__":
    main()
