#!/usr/bin/env python3
"""serve_bench.py — serving benchmark of a running `ft serve` (or any OpenAI-compatible server)
with the official `openai` client: time to first token, tokens/s per stream and in aggregate at
1, 4 and 16 concurrent streams. Prints a markdown table.

  bench/serve_bench.py --base-url http://127.0.0.1:1919 --model qwen3_moe \
      [--max-tokens 128] [--prompt-tokens 512] [--concurrency 1,4,16] [--rounds 1]

Each stream is a streamed /v1/completions request with a prompt of about --prompt-tokens tokens
(measured with the server's /tokenize when available), temperature 0 and ignore_eos, so every
stream generates exactly --max-tokens tokens. Completion tokens come from the usage chunk.
TTFT = first text chunk; per-stream tok/s = (tokens - 1) / (end - first token);
aggregate tok/s = all generated tokens / wall time of the round.
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request

from openai import OpenAI


def make_prompt(base, n_tokens, api_key):
    """A prompt of about n_tokens tokens (checked with /tokenize when the server has it)."""
    words = "the quick brown fox jumps over the lazy dog while experts route tokens".split()
    text = " ".join(words[i % len(words)] for i in range(n_tokens))
    try:
        req = urllib.request.Request(base.rstrip("/") + "/tokenize",
                                     data=json.dumps({"prompt": text}).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {api_key}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            count = json.load(r)["count"]
        if count > n_tokens:  # trim proportionally
            keep = max(1, int(len(text.split()) * n_tokens / count))
            text = " ".join(text.split()[:keep])
    except Exception:  # noqa: BLE001 - /tokenize is an ft extension; estimate otherwise
        pass
    return text


def one_stream(client, model, prompt, max_tokens, out):
    try:
        stream_once(client, model, prompt, max_tokens, out)
    except Exception as e:  # noqa: BLE001 - counted and shown under the table
        out.append({"error": str(e)})


def stream_once(client, model, prompt, max_tokens, out):
    t0 = time.perf_counter()
    first = None
    n = 0
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True})
    for ch in stream:
        if ch.choices and ch.choices[0].text and first is None:
            first = time.perf_counter()
        if ch.usage:
            n = ch.usage.completion_tokens
    t1 = time.perf_counter()
    first = first or t1
    out.append({"ttft": first - t0, "tokens": n,
                "tps": (n - 1) / (t1 - first) if n > 1 and t1 > first else 0.0})


def run_round(client, model, prompt, max_tokens, conc):
    results = []
    threads = [threading.Thread(target=one_stream, args=(client, model, prompt, max_tokens, results))
               for _ in range(conc)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return results, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:1919")
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    client = OpenAI(base_url=a.base_url.rstrip("/") + "/v1", api_key=a.api_key, max_retries=0,
                    timeout=3600)
    prompt = make_prompt(a.base_url, a.prompt_tokens, a.api_key)
    run_round(client, a.model, prompt, 4, 1)  # warm-up
    print(f"model `{a.model}`, prompt ~{a.prompt_tokens} tokens, {a.max_tokens} generated tokens "
          f"per stream, greedy\n")
    print("| streams | TTFT p50 (s) | TTFT max (s) | tok/s per stream (mean) | aggregate tok/s "
          "| failed |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    errors = []
    for conc in [int(c) for c in a.concurrency.split(",")]:
        res, walls = [], []
        for _ in range(a.rounds):
            r, wall = run_round(client, a.model, prompt, a.max_tokens, conc)
            errors += [x["error"] for x in r if "error" in x]
            r = [x for x in r if "error" not in x]
            res += r
            walls.append((sum(x["tokens"] for x in r), wall))
        n_fail = conc * a.rounds - len(res)
        if not res:
            print(f"| {conc} | - | - | - | - | {n_fail} |", flush=True)
            continue
        ttft = [x["ttft"] for x in res]
        agg = sum(t for t, _ in walls) / sum(w for _, w in walls)
        print(f"| {conc} | {statistics.median(ttft):.3f} | {max(ttft):.3f} | "
              f"{statistics.mean(x['tps'] for x in res):.2f} | {agg:.2f} | {n_fail} |", flush=True)
    for e in sorted(set(errors)):
        print(f"\nfailed streams: {errors.count(e)} x {e}")


if __name__ == "__main__":
    main()
