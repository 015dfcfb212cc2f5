#!/usr/bin/env python3
"""test_router.py — two `ft serve` replicas of the fixture model behind LiteLLM's Router.

FreeToken-C has no cluster of its own: replicas scale out behind a router users already run.
This drives LiteLLM's Python Router (PyPI `litellm`, simple-shuffle over two deployments of one
model name, retries on failure) against two replicas on loopback and checks, from what each
replica counts (/v1/stats requests.completed) and never from timings:
- loading: a replica whose model is still loading answers /health 503 {"status": "loading"},
  /metrics ft:server_ready 0 and a chat request 503; requests through the router all succeed
  meanwhile, every one served by the ready replica (the router retries the 503);
- spread: N requests through the router are served by both replicas, N in all, and each greedy
  answer equals the one a direct request to either replica gets;
- failover: after SIGTERM to one replica (it exits 0), requests through the router still all
  succeed, every one served by the other;
- restart: the stopped replica comes back on its port and takes traffic again.
A replica is held in "loading" by giving it a model directory whose tokenizer.json is a FIFO:
`ft serve` listens first and blocks reading it until the test writes the real file.

LiteLLM runs offline (LITELLM_LOCAL_MODEL_COST_MAP=True: its bundled model map instead of
fetching one; telemetry off), and an audit hook fails the test if anything in this process
connects anywhere but loopback.

Run by ctest (label server): test_router.py --ft build/ft --model tests/data/models/qwen3_moe
Needs the openai and litellm packages (tools/setup.sh test puts them in build/venv).
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

# before litellm is imported: its model cost map from the package, not from the network
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
os.environ.setdefault("LITELLM_LOG", "CRITICAL")

FOREIGN = []  # (event, address) of every connection attempt not to loopback


def audit(event, args):
    if event == "socket.connect":
        a = args[1]
        host = a[0] if isinstance(a, tuple) else str(a)
    elif event == "socket.getaddrinfo":
        host = args[0]
    else:
        return
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host is not None and not (str(host).startswith("127.") or host in ("localhost", "::1")):
        FOREIGN.append((event, host))


sys.addaudithook(audit)

try:
    from openai import OpenAI
    import litellm
    from litellm import Router
    from litellm.router_utils.cooldown_handlers import _get_cooldown_deployments
except ImportError as e:
    print(f"test_router: FAIL: {e} (tools/setup.sh test installs openai and litellm into "
          "build/venv)")
    sys.exit(1)

from harness import (check, finish, free_port, run_groups, spawn_server, stop_server,
                     wait_ready)

litellm.telemetry = False
litellm.suppress_debug_info = True

MODEL_GROUP = "ft-qwen3"  # the name clients ask the router for
PROMPTS = ["Hello", "Name a colour.", "Count to three.", "What is 2+2?"]
N = 16                      # requests per phase
MAX_TOKENS = 8
RETRIES = 24                # a request fails only if 25 random picks all hit a bad replica
COOLDOWN_S = 1              # how long LiteLLM keeps a failing deployment out of rotation


def get(url, timeout=10):
    """(status, body text) of a GET; an HTTP error status is an answer, not an exception."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def completed(base):
    """The replica's count of requests it finished (GET /v1/stats)."""
    st, body = get(base + "/v1/stats")
    return json.loads(body)["requests"]["completed"] if st == 200 else None


def messages(i):
    return [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]


def answer(msg):
    """What a greedy chat answer says: its content and its reasoning (the fixture thinks)."""
    return (msg.content or "", getattr(msg, "reasoning_content", None) or "")


def direct_answers(base, model_id):
    client = OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    out = []
    for i in range(len(PROMPTS)):
        r = client.chat.completions.create(model=model_id, messages=messages(i), temperature=0,
                                           max_tokens=MAX_TOKENS)
        out.append(answer(r.choices[0].message))
    return out


def via_router(router, n, refs, what, start=0):
    """Sends n greedy requests through the router (prompts from PROMPTS[start]); returns how
    many succeeded with the reference answer."""
    ok = 0
    for i in range(start, start + n):
        try:
            r = router.completion(model=MODEL_GROUP, messages=messages(i), temperature=0,
                                  max_tokens=MAX_TOKENS)
        except Exception as e:  # noqa: BLE001 - any failure is a failed request
            print(f"  {what}: request {i} failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        got = answer(r.choices[0].message)
        if got == refs[i % len(PROMPTS)]:
            ok += 1
        else:
            print(f"  {what}: request {i} answered {got!r}, direct {refs[i % len(PROMPTS)]!r}")
    return ok


def loading_dir(model, tmp):
    """A copy of the model directory (symlinks) whose tokenizer.json is a FIFO, and its path."""
    d = os.path.join(tmp, os.path.basename(os.path.normpath(model)))
    os.makedirs(d)
    for f in os.listdir(model):
        if f != "tokenizer.json":
            os.symlink(os.path.abspath(os.path.join(model, f)), os.path.join(d, f))
    fifo = os.path.join(d, "tokenizer.json")
    os.mkfifo(fifo)
    return d, fifo


def feed(fifo, src):
    """Writes the real tokenizer.json into the FIFO the loading replica is blocked on."""
    with open(src, "rb") as s, open(fifo, "wb") as f:
        shutil.copyfileobj(s, f)


class Replicas:
    def __init__(self, ft, model, tmp):
        self.ft, self.model, self.tmp = ft, model, tmp
        self.model_id = os.path.basename(os.path.normpath(model))  # ft serve's default id
        self.args = ["--threads", "1", "--cpu-act", "f32", "--max-running-requests", "2"]
        self.ports = [free_port(), free_port()]
        while self.ports[1] == self.ports[0]:
            self.ports[1] = free_port()
        self.bases = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.procs = [None, None]
        self.logs = [os.path.join(tmp, f"replica{i}.log") for i in range(2)]

    def start(self, i, model=None):
        self.procs[i] = spawn_server(self.ft, model or self.model, self.ports[i], self.args,
                                     self.logs[i])
        return self.procs[i]

    def stop(self, i):
        rc = stop_server(self.procs[i])
        self.procs[i] = None
        return rc

    def stop_all(self):
        return [self.stop(i) for i in range(2) if self.procs[i]]

    def dump_logs(self):
        for i, path in enumerate(self.logs):
            if os.path.exists(path):
                print(f"--- replica {i} log (last lines) ---")
                print("".join(open(path, errors="replace").readlines()[-15:]), end="")


def make_router(bases, model_id):
    """Two deployments of MODEL_GROUP (ids replica0, replica1), simple-shuffle, retries on any
    failure, a failing deployment cooled down for COOLDOWN_S."""
    deployments = [{"model_name": MODEL_GROUP,
                    "litellm_params": {"model": "openai/" + model_id, "api_base": b + "/v1",
                                       "api_key": "unused", "max_retries": 0, "timeout": 120},
                    "model_info": {"id": f"replica{i}"}}
                   for i, b in enumerate(bases)]
    return Router(model_list=deployments, routing_strategy="simple-shuffle",
                  num_retries=RETRIES, retry_after=0, timeout=120, cooldown_time=COOLDOWN_S)


def cooled_down(router):
    """The deployment ids the router is keeping out of rotation now."""
    return sorted(_get_cooldown_deployments(router, None))


def wait_cooldowns(router, what, timeout=60):
    """Waits (bounded) until the router has no deployment in cooldown; returns what was."""
    seen = cooled_down(router)
    deadline = time.time() + timeout
    while cooled_down(router) and time.time() < deadline:
        time.sleep(0.2)
    print(f"  {what}: in cooldown {seen or 'none'}, now {cooled_down(router) or 'none'}")
    check(not cooled_down(router), f"{what}: the router's cooldowns end")
    return seen


def test_loading(rep, router, refs, model_id):
    """Replica 1 loads (held on its tokenizer FIFO) while replica 0 serves."""
    d, fifo = loading_dir(rep.model, rep.tmp)
    p = rep.start(1, d)
    base = rep.bases[1]
    st, body = None, ""
    for _ in range(200):  # until it listens (it does so before loading)
        try:
            st, body = get(base + "/health", timeout=5)
            break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.05)
    h = json.loads(body) if body else {}
    check(st == 503 and h.get("status") == "loading" and h.get("model") == model_id
          and "progress" in h, f"/health while loading: 503 loading (got {st} {body[:120]})")
    st, body = get(base + "/metrics")
    check(st == 200 and any(l.startswith("ft:server_ready{") and l.endswith(" 0")
                            for l in body.splitlines()), "/metrics ft:server_ready 0 while loading")
    st, body = get(base + "/v1/models")
    check(st == 200 and json.loads(body)["data"][0]["id"] == model_id,
          "/v1/models names the model while loading")
    req = urllib.request.Request(base + "/v1/chat/completions", method="POST",
                                 data=json.dumps({"model": model_id,
                                                  "messages": messages(0)}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=10)
        code = 200
    except urllib.error.HTTPError as e:
        code = e.code
    check(code == 503, f"a chat request while loading: 503 (got {code})")

    c0 = completed(rep.bases[0])
    ok = via_router(router, N, refs, "loading")
    check(ok == N, f"all {N} requests through the router succeed while a replica loads ({ok})")
    check(completed(rep.bases[0]) - c0 == N,
          f"the ready replica served all {N} (served {completed(rep.bases[0]) - c0})")

    t = threading.Thread(target=feed, args=(fifo, os.path.join(rep.model, "tokenizer.json")),
                         daemon=True)  # a replica that died never opens the FIFO
    t.start()
    wait_ready(p, "test_router")
    t.join(30)
    st, body = get(base + "/health")
    check(st == 200 and json.loads(body)["status"] == "ok", "/health ok once loaded")
    st, body = get(base + "/metrics")
    check(any(l.startswith("ft:server_ready{") and l.endswith(" 1") for l in body.splitlines()),
          "/metrics ft:server_ready 1 once loaded")
    # LiteLLM cools a deployment down when most of its recent answers were 5xx (503 here)
    wait_cooldowns(router, "after loading")


def test_spread(rep, router, refs):
    check(direct_answers(rep.bases[1], rep.model_id) == refs,
          "both replicas give the same greedy answers directly")
    c = [completed(b) for b in rep.bases]
    ok = via_router(router, N, refs, "spread")
    d = [completed(b) - c[i] for i, b in enumerate(rep.bases)]
    print(f"  spread: replica 0 served {d[0]}, replica 1 served {d[1]}")
    check(ok == N, f"all {N} answers through the router equal the direct ones ({ok})")
    check(d[0] > 0 and d[1] > 0, f"both replicas served some ({d})")
    check(sum(d) == N, f"{N} served in all ({sum(d)})")


def test_failover(rep, router, refs):
    rc = rep.stop(1)
    check(rc == 0, f"the stopped replica exits 0 on SIGTERM (got {rc})")
    c0 = completed(rep.bases[0])
    ok = via_router(router, N, refs, "failover")
    check(ok == N, f"all {N} requests through the router succeed with one replica down ({ok})")
    check(completed(rep.bases[0]) - c0 == N, "the live replica served all of them")
    # a refused connection reaches LiteLLM as a 500 "Connection error": retried at once on the
    # other deployment, and counted towards cooling the dead one down
    print(f"  failover: in cooldown now {cooled_down(router) or 'none'}")


def test_restart(rep, router, refs):
    wait_ready(rep.start(1), "test_router")
    wait_cooldowns(router, "after the restart")
    c1 = completed(rep.bases[1])
    check(c1 == 0, f"the restarted replica starts with no requests ({c1})")
    ok, sent = 0, 0
    while sent < 4 * N and completed(rep.bases[1]) == 0:  # bounded: 2^-64 to miss it
        ok += via_router(router, 1, refs, "restart", start=sent)
        sent += 1
    served = completed(rep.bases[1])
    check(ok == sent, f"all {sent} requests after the restart succeed ({ok})")
    check(served > 0, f"the restarted replica takes traffic again (served {served} of {sent})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    random.seed(34)  # simple-shuffle draws from `random`: the same picks every run
    tmp = tempfile.mkdtemp(prefix="ft_router_")
    rep = Replicas(a.ft, a.model, tmp)
    model_id = rep.model_id
    t0 = time.time()
    rcs = []
    try:
        wait_ready(rep.start(0), "test_router")
        refs = direct_answers(rep.bases[0], model_id)
        router = make_router(rep.bases, model_id)
        run_groups([("loading", lambda: test_loading(rep, router, refs, model_id)),
                    ("spread", lambda: test_spread(rep, router, refs)),
                    ("failover", lambda: test_failover(rep, router, refs)),
                    ("restart", lambda: test_restart(rep, router, refs))])
    finally:
        rcs = rep.stop_all()
    check(all(rc == 0 for rc in rcs), f"the replicas exit 0 on SIGTERM (got {rcs})")
    check(not FOREIGN, f"nothing connected beyond loopback ({FOREIGN[:5]})")
    from harness import FAILS
    if FAILS:
        rep.dump_logs()
    shutil.rmtree(tmp, ignore_errors=True)
    finish("test_server_router", t0)


if __name__ == "__main__":
    main()
