#!/usr/bin/env python3
"""test_hardening.py — `ft serve` against hostile clients, and GET /metrics.

On the fixture model (loopback only; every wait bounded, no timing asserts: each check is on
what the server did, read from its answers, /v1/stats, /metrics or its log):
- log injection: a URL with %0a / %0d / %1b leaves no forged line in the log (escaped);
- Content-Length: two differing values -> 400, beside Transfer-Encoding -> 400, the same value
  twice is fine;
- a 7 MB body is refused by its size (413 naming --max-body) before anything parses it, both
  when only declared and when sent through the openai client;
- slow loris: 300 connections from 127.0.0.2 sending one header byte a second; while they
  last /health and a chat completion from 127.0.0.1 succeed, no more than --max-conns-per-ip of
  them are ever open, and the server closes all of them (a 408 for a slow head);
- a non-streaming client that disconnects has its request cancelled (not run to max_tokens),
  and so does a streaming one;
- /metrics parses with prometheus_client's text parser, and its counters and histograms move
  after a request.

Run by ctest (label server): test_hardening.py --ft build/ft --model tests/data/models/qwen3_moe
Needs the openai and prometheus_client packages (tools/setup.sh test puts them in build/venv).
"""
import argparse
import json
import os
import re
import select
import socket
import sys
import tempfile
import threading
import time
import urllib.request

try:
    import openai
    from openai import OpenAI
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:
    print(f"test_hardening: FAIL: {e} (tools/setup.sh test installs openai and prometheus_client "
          "into build/venv)")
    sys.exit(1)

from harness import check, finish, run_groups, start_server, stop_server, wait_for

HEADER_TIMEOUT = 2
PER_IP = 16


def addr(base):
    host, port = base.rsplit("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def raw(base, data, src="127.0.0.1", timeout=20, half_close=False):
    """Sends data on a new connection, returns everything the server answers until it closes
    (or the timeout passes)."""
    s = socket.create_connection(addr(base), timeout=timeout, source_address=(src, 0))
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out, deadline = b"", time.time() + timeout
        while time.time() < deadline:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            out += b
            if b"\r\n\r\n" in out and b"Connection: close" not in out:
                head, _, body = out.partition(b"\r\n\r\n")
                m = re.search(rb"Content-Length: (\d+)", head)
                if m and len(body) >= int(m.group(1)):
                    break
        return out
    finally:
        s.close()


def status_of(resp):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", resp)
    return int(m.group(1)) if m else None


def get_json(base, path):
    with urllib.request.urlopen(base + path, timeout=20) as r:
        return json.load(r)


def metrics(base):
    """{(sample name, frozenset of labels other than model_name): value}, and the families."""
    with urllib.request.urlopen(base + "/metrics", timeout=20) as r:
        ctype = r.headers.get("Content-Type", "")
        text = r.read().decode()
    fams = list(text_string_to_metric_families(text))
    out = {}
    for f in fams:
        for s in f.samples:
            labels = frozenset((k, v) for k, v in s.labels.items() if k != "model_name")
            out[(s.name, labels)] = s.value
    return out, {f.name: f.type for f in fams}, ctype


def read_log(path):
    with open(path, errors="replace") as f:
        return f.read()


# --- the attacks --------------------------------------------------------------------------


def test_log_injection(base, log):
    forged = "ft: POST /v1/forged 200 99 tok 1 ms"
    for esc in ("%0a", "%0d%0a", "%1b[2J%0a"):
        r = raw(base, f"GET /nothing{esc}{forged.replace(' ', '%20')} HTTP/1.1\r\nHost: x\r\n"
                f"Connection: close\r\n\r\n".encode())
        check(status_of(r) == 404, f"URL with {esc} answers 404 ({r[:40]!r})")
    seen = wait_for(lambda: read_log(log).count("/nothing") >= 3, 20)
    text = read_log(log)
    check(seen, "the three requests are logged")
    lines = text.splitlines()
    check(not any(line.startswith(forged) or line.startswith("ft: POST /v1/forged")
                  for line in lines), "no forged log line")
    check(not any(line.startswith("[2J") or "\x1b" in line for line in lines),
          "no terminal escape in the log")
    hits = [line for line in lines if "/nothing" in line]
    check(len(hits) == 3 and all("\\x0a" in line for line in hits) and
          any("\\x0d\\x0a" in line for line in hits) and any("\\x1b" in line for line in hits),
          f"each request is one log line with its control bytes escaped: {hits}")


def test_content_length(base):
    body = b'{"prompt": "hi"}'
    n = len(body)
    r = raw(base, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
            b"Content-Length: %d\r\n\r\n" % (n, n + 4) + body)
    check(status_of(r) == 400 and b"Content-Length" in r,
          f"two differing Content-Length headers -> 400 naming them ({r[-160:]!r})")
    r = raw(base, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % n + b"10\r\n" + body + b"\r\n0\r\n\r\n")
    check(status_of(r) == 400, f"Content-Length beside Transfer-Encoding -> 400 ({r[:60]!r})")
    r = raw(base, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (n, n) + body)
    check(status_of(r) == 200 and b'"tokens"' in r,
          f"the same Content-Length twice is accepted ({r[:60]!r})")
    check(get_json(base, "/health")["status"] == "ok", "healthy after the framing attacks")


def test_big_body(base, client):
    declared = 7_000_000
    r = raw(base, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % declared, timeout=30)
    check(status_of(r) == 413 and b"--max-body" in r,
          f"a declared 7 MB body that does not come -> 413 naming --max-body ({r[-220:]!r})")
    r = raw(base, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % declared, timeout=30)
    check(status_of(r) == 413 and b"--max-body" in r and b"7000000" in r,
          f"a 7 MB body announced with Expect: 100-continue -> 413 at once, naming the size and "
          f"--max-body ({r[-220:]!r})")
    st0 = get_json(base, "/v1/stats")
    try:
        client.completions.create(model="qwen3_moe", prompt="x" * declared, max_tokens=1)
        check(False, "a 7 MB prompt is refused")
    except openai.APIStatusError as e:
        check(e.status_code == 413 and "--max-body" in str(e),
              f"a sent 7 MB body -> 413 naming --max-body ({e})")
    st1 = get_json(base, "/v1/stats")
    check(st1["tokens"]["prompt"] == st0["tokens"]["prompt"] and
          st1["requests"]["completed"] == st0["requests"]["completed"],
          "nothing of the big body reached the engine")
    m, _, _ = metrics(base)
    check(m.get(("ft:http_responses_total", frozenset({("code", "413")})), 0) >= 3,
          "/metrics counts the 413s")


def test_slow_loris(base, client, log):
    host, port = addr(base)
    line = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n"
    socks, refused, stop = [], [0], threading.Event()
    running = {}

    def long_stream():  # a request running before and through the attack
        try:
            n = 0
            for ch in client.completions.create(model="qwen3_moe", prompt="Once upon a time",
                                                max_tokens=1500, temperature=0, stream=True,
                                                extra_body={"ignore_eos": True},
                                                stream_options={"include_usage": True}):
                if ch.usage:
                    n = ch.usage.completion_tokens
            running["tokens"] = n
        except Exception as e:  # noqa: BLE001 - reported below
            running["error"] = repr(e)
    streamer = threading.Thread(target=long_stream)
    streamer.start()
    wait_for(lambda: get_json(base, "/v1/stats")["requests"]["running"] >= 1, 30)
    m, _, _ = metrics(base)
    open0 = m.get(("ft:http_connections_open", frozenset()), 0)  # the stream's, this one, ...
    for _ in range(300):
        s = socket.socket()
        s.settimeout(10)
        s.bind(("127.0.0.2", 0))
        try:
            s.connect((host, port))
            s.setblocking(False)
            socks.append(s)
        except OSError:
            refused[0] += 1
            s.close()
    # a slow head whose request line came at once: the server answers 408
    slow_head = socket.create_connection((host, port), timeout=10, source_address=("127.0.0.3", 0))
    slow_head.sendall(b"GET /health HTTP/1.1\r\n")
    # a slow body: complete head, then a byte a second of a 64-byte body
    slow_body = socket.create_connection((host, port), timeout=10, source_address=("127.0.0.3", 0))
    slow_body.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 64\r\n\r\n")
    closed = {}

    def dribble():  # one byte a second on every open socket, for at most 40 s
        for k in range(40):
            for s in socks + [slow_head, slow_body]:
                if s in closed:
                    continue
                try:
                    s.send(line[k:k + 1] if s not in (slow_head, slow_body) else b"x")
                except (BlockingIOError, socket.timeout):
                    pass
                except OSError:
                    closed[s] = b""
            if stop.wait(1.0):
                return

    def reap():  # what the server sends or whether it closed, on every socket
        while not stop.is_set() and len(closed) < len(socks) + 2:
            live = [s for s in socks + [slow_head, slow_body] if s not in closed]
            rd, _, _ = select.select(live, [], [], 0.2)
            for s in rd:
                try:
                    b = s.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    b = b""
                if not b or b.startswith(b"HTTP/"):
                    closed[s] = b
    threads = [threading.Thread(target=dribble), threading.Thread(target=reap)]
    for t in threads:
        t.start()
    try:
        # while the attack runs: /health and a real request from another address succeed
        ok = 0
        for _ in range(3):
            try:
                ok += get_json(base, "/health")["status"] == "ok"
            except OSError as e:
                print(f"  /health during the attack: {e!r}")
        check(ok == 3, f"/health answers during the slow-loris attack ({ok}/3)")
        m, _, _ = metrics(base)
        n_open = m.get(("ft:http_connections_open", frozenset()), -1)
        # (+ the two slow ones from 127.0.0.3, and a few closed ones not yet reaped)
        check(0 < n_open <= open0 + PER_IP + 6, f"at most --max-conns-per-ip {PER_IP} attack "
              f"connections are open ({n_open} in all, {open0} before)")
        r = client.chat.completions.create(model="qwen3_moe", max_tokens=8, temperature=0,
                                           messages=[{"role": "user", "content": "Hello"}])
        check(r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens >= 1,
              "a chat completion succeeds during the attack")
        # the server closes every attack connection though each keeps sending
        wait_for(lambda: len(closed) >= len(socks) + 2, 40, step=0.25)
        check(len(closed) == len(socks) + 2, f"the server closed every slow connection "
              f"({len(closed)} of {len(socks) + 2}; {refused[0]} refused at connect)")
        check(closed.get(slow_head, b"").startswith(b"HTTP/1.1 408"),
              f"a slow head gets a 408 ({closed.get(slow_head, b'')[:40]!r})")
        check(closed.get(slow_body, b"").startswith(b"HTTP/1.1 408"),
              f"a slow body gets a 408 ({closed.get(slow_body, b'')[:40]!r})")
        streamer.join(120)
        check(running.get("tokens") == 1500, f"a stream running through the attack completes "
              f"({running})")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        for s in socks + [slow_head, slow_body]:
            s.close()
    m, _, _ = metrics(base)
    check(m.get(("ft:http_slow_closes_total", frozenset()), 0) >= 3,
          "/metrics counts the slow connections closed")
    warn = [x for x in read_log(log).splitlines() if "that sent no complete request" in x]
    check(1 <= len(warn) <= 45, f"the closes are summarised in a few log lines ({len(warn)})")
    check(get_json(base, "/health")["status"] == "ok", "healthy after the attack")


def test_disconnect(base):
    def idle():
        st = get_json(base, "/v1/stats")
        return st if st["requests"]["running"] == 0 and st["requests"]["queued"] == 0 else None
    for stream in (False, True):
        st0 = wait_for(idle, 60)
        body = json.dumps({"model": "qwen3_moe", "prompt": "Once upon a time", "max_tokens": 8000,
                           "ignore_eos": True, "temperature": 0, "stream": stream}).encode()
        s = socket.create_connection(addr(base), timeout=20)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        # it is generating (tokens counted), then the client goes away
        started = wait_for(lambda: get_json(base, "/v1/stats")["tokens"]["generated"] >
                           st0["tokens"]["generated"] + 16, 60)
        s.close()
        st1 = wait_for(idle, 120)
        check(started and st1 is not None, f"the request ran, then ended (stream={stream})")
        if not (started and st1):
            continue
        r0, r1 = st0["requests"], st1["requests"]
        gen = st1["tokens"]["generated"] - st0["tokens"]["generated"]
        check(r1["cancelled"] == r0["cancelled"] + 1 and r1["completed"] == r0["completed"],
              f"a disconnected client's request is cancelled, not completed (stream={stream}): "
              f"{r0} -> {r1}")
        check(gen < 8000, f"it stopped before max_tokens (stream={stream}): {gen} tokens")


def test_metrics(base, client):
    m0, types, ctype = metrics(base)
    check(ctype.startswith("text/plain") and "version=0.0.4" in ctype,
          f"Prometheus text content type ({ctype})")
    for name, typ in (("ft:num_requests_running", "gauge"), ("ft:num_requests_waiting", "gauge"),
                      ("ft:kv_cache_usage_perc", "gauge"), ("ft:requests", "counter"),
                      ("ft:prompt_tokens", "counter"), ("ft:generation_tokens", "counter"),
                      ("ft:prefix_cache_queries", "counter"), ("ft:prefix_cache_hits", "counter"),
                      ("ft:time_to_first_token_seconds", "histogram"),
                      ("ft:inter_token_latency_seconds", "histogram"),
                      ("ft:e2e_request_latency_seconds", "histogram"),
                      ("ft:http_responses", "counter")):
        check(types.get(name) == typ, f"/metrics has {name} as a {typ} ({types.get(name)})")
    r = client.chat.completions.create(model="qwen3_moe", max_tokens=12, temperature=0,
                                       messages=[{"role": "user", "content": "Tell me more"}])
    m1, _, _ = metrics(base)

    def d(name, **labels):
        k = (name, frozenset(labels.items()))
        return m1.get(k, 0) - m0.get(k, 0)
    u = r.usage
    check(d("ft:requests_total", status="completed") == 1, "requests_total{completed} +1")
    check(d("ft:prompt_tokens_total") == u.prompt_tokens, "prompt_tokens_total += usage")
    check(d("ft:generation_tokens_total") == u.completion_tokens,
          "generation_tokens_total += usage")
    check(d("ft:prefix_cache_queries_total") >= 1, "prefix_cache_queries_total moves")
    check(d("ft:time_to_first_token_seconds_count") == 1, "TTFT histogram +1")
    check(d("ft:e2e_request_latency_seconds_count") == 1, "e2e histogram +1")
    check(1 <= d("ft:inter_token_latency_seconds_count") <= u.completion_tokens - 1,
          f"inter-token histogram + about completion_tokens - 1 "
          f"({d('ft:inter_token_latency_seconds_count')})")
    check(d("ft:time_to_first_token_seconds_bucket", le="+Inf") == 1 and
          d("ft:time_to_first_token_seconds_sum") > 0, "TTFT +Inf bucket and sum move")
    check(d("ft:http_responses_total", code="200") >= 1, "http_responses_total{200} moves")
    check(m1.get(("ft:num_requests_running", frozenset()), -1) == 0, "nothing running after")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    log = os.path.join(tempfile.mkdtemp(prefix="ft_hardening_"), "serve.log")
    proc, base = start_server(a.ft, a.model, ["--threads", "1", "-c", "8192",
                                              "--header-timeout", str(HEADER_TIMEOUT),
                                              "--max-conns-per-ip", str(PER_IP)],
                              "test_hardening", log=log)
    t0 = time.time()
    try:
        client = OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
        run_groups([("metrics", lambda: test_metrics(base, client)),
                    ("log_injection", lambda: test_log_injection(base, log)),
                    ("content_length", lambda: test_content_length(base)),
                    ("big_body", lambda: test_big_body(base, client)),
                    ("disconnect", lambda: test_disconnect(base)),
                    ("slow_loris", lambda: test_slow_loris(base, client, log))])
    finally:
        rc = stop_server(proc)
    check(rc == 0, f"ft serve exits 0 on SIGTERM (got {rc})")
    if len(sys.argv) and os.environ.get("FT_TEST_KEEP_LOG"):
        print(f"log: {log}")
    finish("test_server_hardening", t0)


if __name__ == "__main__":
    main()
