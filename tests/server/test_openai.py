#!/usr/bin/env python3
"""test_openai.py — `ft serve` on the fixture model, driven by the official `openai` client.

Chat (streamed and not), completions (text and token ids), models, usage numbers, stop strings,
seed determinism, greedy output equal to transformers' (text_reference.json), 16 concurrent
clients with some disconnecting midway (every completed greedy answer equals the solo run), the
server still healthy afterwards, and a clean exit on SIGTERM.

Run by ctest (label server): test_openai.py --ft build/ft --model tests/data/models/qwen3_moe
Needs `pip install openai` (tools/setup.sh test puts it in build/venv). Exits 1 on any failure,
including a missing openai package: a skipped test must not pass.
"""
import argparse
import json
import os
import sys
import threading
import time
import urllib.request

try:
    import openai
    from openai import OpenAI
except ImportError:
    print("test_openai: FAIL: the openai package is missing (tools/setup.sh test installs it "
          "into build/venv)")
    sys.exit(1)

from harness import check, finish, run_groups, start_server, stop_server, wait_for


def chat(client, messages, stream=False, **kw):
    """Returns (content, finish_reason, usage) of a chat completion, streamed or not."""
    if not stream:
        r = client.chat.completions.create(model="qwen3_moe", messages=messages, **kw)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage
    text, finish, usage, first = "", None, None, True
    for ch in client.chat.completions.create(model="qwen3_moe", messages=messages, stream=True,
                                             stream_options={"include_usage": True}, **kw):
        if ch.usage:
            usage = ch.usage
        if not ch.choices:
            continue
        if first:
            check(ch.choices[0].delta.role == "assistant", "first delta has role assistant")
            first = False
        text += ch.choices[0].delta.content or ""
        finish = ch.choices[0].finish_reason or finish
    return text, finish, usage


def test_basics(client, refs):
    models = client.models.list()
    check([m.id for m in models.data] == ["qwen3_moe"], "models.list is [qwen3_moe]")
    ref = refs[2]
    for stream in (False, True):
        text, finish, usage = chat(client, ref["messages"], stream=stream, max_tokens=ref["n"],
                                   temperature=0)
        check(text == ref["text"], f"greedy chat (stream={stream}) equals transformers: {text!r}")
        check(finish == "length", f"finish_reason length (stream={stream})")
        check(usage is not None and usage.prompt_tokens == len(ref["prompt_ids"]) and
              usage.completion_tokens == ref["n"] and
              usage.total_tokens == len(ref["prompt_ids"]) + ref["n"], f"usage (stream={stream})")
    ref = refs[3]  # system + user with thinking disabled through chat_template_kwargs
    text, _, usage = chat(client, ref["messages"], max_completion_tokens=ref["n"], temperature=0,
                          extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    check(text == ref["text"], f"greedy chat with enable_thinking=false: {text!r}")
    check(usage.prompt_tokens == len(ref["prompt_ids"]), "prompt tokens with the no-think prompt")


def test_completions(client, refs):
    ref = refs[0]
    r = client.completions.create(model="qwen3_moe", prompt=ref["prompt"], max_tokens=ref["n"],
                                  temperature=0)
    check(r.choices[0].text == ref["text"], f"greedy completion equals transformers: "
          f"{r.choices[0].text!r}")
    check(r.usage.prompt_tokens == len(ref["prompt_ids"]) and
          r.usage.completion_tokens == ref["n"], "completion usage")
    r = client.completions.create(model="qwen3_moe", prompt=ref["prompt_ids"],
                                  max_tokens=ref["n"], temperature=0)
    check(r.choices[0].text == ref["text"], "completion from token ids")
    text = "".join(c.choices[0].text for c in client.completions.create(
        model="qwen3_moe", prompt=ref["prompt"], max_tokens=ref["n"], temperature=0, stream=True)
        if c.choices)
    check(text == ref["text"], "streamed completion")
    # stop strings: the text ends right before the first match, finish_reason "stop"
    cut = ref["text"].index("over")
    for stop in ("over", ["zzz", "over"]):
        r = client.completions.create(model="qwen3_moe", prompt=ref["prompt"],
                                      max_tokens=ref["n"], temperature=0, stop=stop)
        check(r.choices[0].text == ref["text"][:cut] and r.choices[0].finish_reason == "stop",
              f"stop={stop!r}: {r.choices[0].text!r} {r.choices[0].finish_reason}")


def test_seed(client, refs):
    msgs = refs[2]["messages"]
    runs = [chat(client, msgs, max_tokens=16, temperature=1.0, seed=s)[0] for s in (42, 42, 7, 8)]
    check(runs[0] == runs[1], "same seed, same text")
    check(len(set(runs)) > 1, "different seeds give different texts")


def test_errors(client):
    try:
        chat(client, [{"role": "user", "content": "hi"}], n=2)
        check(False, "n=2 is rejected")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "n" in str(e), "n=2 -> 400")
    try:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        check(False, "unknown model is rejected")
    except openai.NotFoundError as e:
        check(e.status_code == 404, "unknown model -> 404")
    try:  # image parts (a multimodal checkpoint's vision tower is not read): a clear 400
        chat(client, [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}])
        check(False, "image input is rejected")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "image input is not supported" in str(e), "image part -> 400")


def test_prefix_cache(client):
    """An agent's next turn resends the conversation: its KV blocks come from the prefix cache
    (usage.prompt_tokens_details.cached_tokens, streamed too) and the answer is the uncached one."""
    system = {"role": "system", "content": "You are a terse assistant. " * 6}
    first = [system, {"role": "user", "content": "Count to five."}]
    r1 = client.chat.completions.create(model="qwen3_moe", messages=first, max_tokens=8,
                                        temperature=0)
    turn2 = first + [{"role": "assistant", "content": r1.choices[0].message.content},
                     {"role": "user", "content": "Now backwards."}]
    r2 = client.chat.completions.create(model="qwen3_moe", messages=turn2, max_tokens=8,
                                        temperature=0)
    c2 = r2.usage.prompt_tokens_details.cached_tokens
    check(c2 >= 16 and c2 % 16 == 0 and c2 < r2.usage.prompt_tokens,
          f"the second turn reuses whole KV blocks of the first ({c2} of {r2.usage.prompt_tokens})")
    text, _, usage = chat(client, turn2, stream=True, max_tokens=8, temperature=0)
    check(text == r2.choices[0].message.content, "the cached answer equals the first one")
    check(usage.prompt_tokens_details.cached_tokens >= c2, "streamed usage reports cached tokens")
    other = [{"role": "system", "content": "Zebra " * 30}, {"role": "user", "content": "Hi"}]
    r3 = client.chat.completions.create(model="qwen3_moe", messages=other, max_tokens=2)
    check(r3.usage.prompt_tokens_details.cached_tokens == 0, "an unrelated prompt hits nothing")


def test_concurrency(client, refs):
    prompts = ["Hello", "Tell me more", "How are you today?", "Once upon a time"]
    solo = {p: chat(client, [{"role": "user", "content": p}], max_tokens=24, temperature=0)[0]
            for p in prompts}
    results, errors = {}, []

    def worker(i):
        p = prompts[i % len(prompts)]
        msgs = [{"role": "user", "content": p}]
        try:
            if i % 5 == 4:  # disconnect after the first chunks
                # ignore_eos: the stream runs to max_tokens (near the fixture's 256-token
                # context) instead of stopping at the tiny model's EOS after a few dozen
                # tokens, so it is still running when the client goes away
                s = client.chat.completions.create(model="qwen3_moe", messages=msgs, stream=True,
                                                   max_tokens=200, temperature=0,
                                                   extra_body={"ignore_eos": True})
                for k, _ in enumerate(s):
                    if k == 2:
                        break
                s.close()
                return
            results[i] = (p, chat(client, msgs, stream=i % 2 == 0, max_tokens=24, temperature=0)[0])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check(not errors, f"no client errors: {errors}")
    check(len(results) == 13, f"13 clients completed ({len(results)})")
    for i, (p, text) in sorted(results.items()):
        check(text == solo[p], f"client {i} ({p!r}) equals the solo greedy run: {text!r} vs "
              f"{solo[p]!r}")


def test_healthy_after(base):
    with urllib.request.urlopen(base + "/health", timeout=10) as r:
        check(json.load(r)["status"] == "ok", "healthy after the load")
    def stats():
        with urllib.request.urlopen(base + "/v1/stats", timeout=10) as r:
            return json.load(r)["requests"]

    # the disconnecting clients' requests end when the server notices them gone (at their
    # next token): wait for that, and for the rest to drain, instead of sampling the counters
    # once the clients have returned
    st = wait_for(lambda: (lambda q: q if q["cancelled"] >= 1 and q["running"] == 0
                           and q["queued"] == 0 else None)(stats()), 15) or stats()
    check(st["running"] == 0 and st["queued"] == 0, f"nothing left running: {st}")
    check(st["cancelled"] >= 1, f"disconnected clients were cancelled: {st}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    refs = json.load(open(os.path.join(a.model, "text_reference.json")))
    # exact fp32 activations: the greedy texts are transformers' on a random tiny model whose
    # top logits nearly tie (the default --cpu-act fast is checked on the real model)
    proc, base = start_server(a.ft, a.model, ["--threads", "2", "--max-running-requests", "4",
                                              "--cpu-act", "f32"],
                              "test_openai")
    t0 = time.time()
    try:
        client = OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
        run_groups([("basics", lambda: test_basics(client, refs)),
                    ("completions", lambda: test_completions(client, refs)),
                    ("seed", lambda: test_seed(client, refs)),
                    ("errors", lambda: test_errors(client)),
                    ("prefix_cache", lambda: test_prefix_cache(client)),
                    ("concurrency", lambda: test_concurrency(client, refs)),
                    ("healthy_after", lambda: test_healthy_after(base))])
    finally:
        rc = stop_server(proc)
    check(rc == 0, f"ft serve exits 0 on SIGTERM (got {rc})")
    finish("test_server_openai", t0)


if __name__ == "__main__":
    main()
