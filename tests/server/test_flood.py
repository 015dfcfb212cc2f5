#!/usr/bin/env python3
"""test_flood.py — `ft serve` while its connection table is full of idle connections from many
client addresses (the per-address cap cannot stop them).

On the fixture model (loopback only; every wait bounded): a stream runs from before the flood
to after it; one client is caught in the middle of its request head; then 600 connections that
send nothing come from 127.0.0.2..127.0.0.201 (3 each, under --max-conns-per-ip), more than
--max-connections (512). While they are open:
- the table is really full (ft:http_connections_open near 512) and the server makes room by
  closing the oldest of them, never more than the limit plus a small spare open;
- the client with a half-sent head, the oldest waiter, is closed with a 503;
- /health answers 200 in under two seconds, five times, each on a new connection; /metrics
  parses; a chat completion succeeds; a second wave of 100 does not change that;
- the stream keeps going and delivers every token;
- the log says so in a line naming --max-connections.
Then the flood closes and everything is as before: few connections open, /health and a chat
completion answer.

Run by ctest (label server): test_flood.py --ft build/ft --model tests/data/models/qwen3_moe
"""
import argparse
import json
import os
import select
import socket
import sys
import tempfile
import threading
import time
import urllib.request

try:
    from openai import OpenAI
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:
    print(f"test_flood: FAIL: {e} (tools/setup.sh test installs openai and prometheus_client "
          "into build/venv)")
    sys.exit(1)

from harness import check, finish, run_groups, start_server, stop_server, wait_for

MAX_CONNS = 512
SPARE = MAX_CONNS // 4  # the spare above it (http.c)
N_ADDR = 200         # 127.0.0.2 .. 127.0.0.201
PER_ADDR = 3


def addr(base):
    host, port = base.rsplit("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def get_json(base, path, timeout=20):
    with urllib.request.urlopen(base + path, timeout=timeout) as r:
        return r.status, json.load(r)


def metrics(base):
    """{sample name: value} for the samples without labels other than model_name."""
    with urllib.request.urlopen(base + "/metrics", timeout=20) as r:
        text = r.read().decode()
    out = {}
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            if not {k for k in s.labels if k != "model_name"}:
                out[s.name] = s.value
    return out


def metrics_now(base):
    """metrics(), or {} when the server does not answer (what the flood is trying for)."""
    try:
        return metrics(base)
    except OSError as e:
        print(f"  /metrics: {e!r}")
        return {}


def connect_many(host, port, srcs):
    """Idle connections from the given source addresses (those refused are counted)."""
    socks, refused = [], 0
    for src in srcs:
        s = socket.socket()
        s.settimeout(5)
        try:
            s.bind((src, 0))
            s.connect((host, port))
            s.setblocking(False)
            socks.append(s)
        except OSError:
            refused += 1
            s.close()
    return socks, refused


def closed_by_server(socks, seen):
    """Adds to `seen` the sockets the server has closed (EOF or reset), and what each got."""
    live = [s for s in socks if s not in seen]
    for i in range(0, len(live), 256):
        rd, _, _ = select.select(live[i:i + 256], [], [], 0)
        for s in rd:
            try:
                b = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                b = b""
            seen[s] = b or b"<eof>"


def timed_health(base):
    t = time.time()
    try:
        st, body = get_json(base, "/health", timeout=5)
        return st == 200 and body.get("status") == "ok", time.time() - t
    except OSError as e:
        print(f"  /health during the flood: {e!r}")
        return False, time.time() - t


def chat_ok(client, what):
    try:
        r = client.chat.completions.create(model="qwen3_moe", max_tokens=8, temperature=0,
                                           messages=[{"role": "user", "content": "Hello"}])
        ok = r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens >= 1
    except Exception as e:  # noqa: BLE001 - reported by the check
        ok = False
        print(f"  chat {what}: {e!r}")
    check(ok, f"a chat completion succeeds {what}")


def test_flood(base, client, log):
    host, port = addr(base)
    running = {}

    def long_stream():  # runs before, through and after the flood
        try:
            n, last = 0, None
            for ch in client.completions.create(model="qwen3_moe", prompt="Once upon a time",
                                                max_tokens=7000, temperature=0, stream=True,
                                                extra_body={"ignore_eos": True},
                                                stream_options={"include_usage": True}):
                last = time.time()
                running.setdefault("chunks", []).append(last)
                if ch.usage:
                    n = ch.usage.completion_tokens
            running["tokens"] = n
        except Exception as e:  # noqa: BLE001 - reported below
            running["error"] = repr(e)
    streamer = threading.Thread(target=long_stream)
    streamer.start()
    wait_for(lambda: get_json(base, "/v1/stats")[1]["requests"]["running"] >= 1, 30)
    open0 = metrics(base).get("ft:http_connections_open", 0)

    # the oldest waiter: a request head sent in part
    half = socket.create_connection((host, port), timeout=5, source_address=("127.0.0.250", 0))
    half.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.3)
    srcs = [f"127.0.0.{2 + i % N_ADDR}" for i in range(N_ADDR * PER_ADDR)]
    acc0 = metrics(base).get("ft:http_connections_total", 0)
    t_flood = time.time()
    socks, refused = connect_many(host, port, srcs)
    seen = {}
    try:
        # the server has taken them all in (its accepted count moves past the flood)
        wait_for(lambda: metrics_now(base).get("ft:http_connections_total", 0) >=
                 acc0 + len(socks), 10, 0.25)
        m = metrics_now(base)
        n_open = m.get("ft:http_connections_open", -1)
        print(f"  flood of {len(socks)} up in {time.time() - t_flood:.1f} s "
              f"({refused} refused at connect), {n_open:.0f} open on the server")
        check(MAX_CONNS - 8 <= n_open <= MAX_CONNS + SPARE,
              f"the table is full but never past the limit and its spare ({n_open}, "
              f"{open0} before)")
        half.settimeout(5)
        try:
            got = half.recv(4096)
        except OSError:
            got = b""
        check(got.startswith(b"HTTP/1.1 503"), f"the half-sent head, the oldest waiter, is "
              f"closed with a 503 ({got[:40]!r})")
        times = [timed_health(base) for _ in range(5)]
        check(all(ok for ok, _ in times) and max(t for _, t in times) < 2.0,
              f"/health answers 200 within 2 s while the table is full "
              f"({[f'{t:.2f}' for _, t in times]})")
        chat_ok(client, "while the table is full")
        wait_for(lambda: closed_by_server(socks, seen) or
                 len(seen) >= len(socks) - MAX_CONNS, 10, 0.2)
        check(len(seen) >= len(socks) - MAX_CONNS,
              f"the server closed the oldest flood connections to make room ({len(seen)} of "
              f"{len(socks)})")
        check(all(v == b"<eof>" for v in seen.values()),
              "an evicted connection that sent nothing gets nothing but the close")
        # a second wave changes nothing
        acc1 = metrics_now(base).get("ft:http_connections_total", 0)
        more, _ = connect_many(host, port, [f"127.0.0.{2 + i}" for i in range(100)])
        socks += more
        wait_for(lambda: metrics_now(base).get("ft:http_connections_total", 0) >=
                 acc1 + len(more), 10, 0.25)
        times = [timed_health(base) for _ in range(3)]
        check(all(ok for ok, _ in times) and max(t for _, t in times) < 2.0,
              f"/health still answers after a second wave ({[f'{t:.2f}' for _, t in times]})")
        m = metrics_now(base)
        check(m.get("ft:http_connections_open", -1) <= MAX_CONNS + SPARE,
              f"still at most the limit and its spare open ({m.get('ft:http_connections_open')})")
        check(m.get("ft:http_evictions_total", 0) >= len(socks) - MAX_CONNS - SPARE,
              f"/metrics counts the evictions ({m.get('ft:http_evictions_total')})")
        try:
            n_running = get_json(base, "/v1/stats")[1]["requests"]["running"]
        except OSError:
            n_running = -1
        check(n_running >= 1 and "error" not in running,
              f"the stream is still running through the flood ({running.get('error')})")
        t_mid = time.time()
    finally:
        for s in socks:
            s.close()
        half.close()
    streamer.join(120)
    chunks = running.get("chunks", [])
    check(running.get("tokens") == 7000, f"the stream running through the flood completes "
          f"({running.get('tokens')}, {running.get('error')})")
    check(any(t_flood < t < t_mid for t in chunks), "the stream delivered tokens during the flood")
    warn = [x for x in open(log, errors="replace").read().splitlines()
            if "to make room" in x and "--max-connections" in x]
    check(1 <= len(warn) <= 5, f"the evictions are told in a few log lines ({len(warn)})")
    # back to normal
    settled = wait_for(lambda: metrics(base).get("ft:http_connections_open", 99) <= open0 + 2,
                       15, 0.25)
    check(settled, f"the flood's connections are gone after it ({metrics(base)})")
    ok, t = timed_health(base)
    check(ok and t < 2.0, f"/health after the flood ({t:.2f} s)")
    chat_ok(client, "after the flood")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    try:  # the flood needs ~700 descriptors on this side
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 2048:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    except (ImportError, ValueError, OSError):
        pass
    log = os.path.join(tempfile.mkdtemp(prefix="ft_flood_"), "serve.log")
    # the flood's connections must outlive the test's checks: a long head timeout
    proc, base = start_server(a.ft, a.model, ["--threads", "1", "-c", "8192", "--host",
                                              "127.0.0.1", "--header-timeout", "60"],
                              "test_flood", log=log)
    t0 = time.time()
    try:
        client = OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
        run_groups([("flood", lambda: test_flood(base, client, log))])
    finally:
        rc = stop_server(proc)
    check(rc == 0, f"ft serve exits 0 on SIGTERM (got {rc})")
    finish("test_server_flood", t0)


if __name__ == "__main__":
    main()
