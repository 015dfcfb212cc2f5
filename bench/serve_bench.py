#!/usr/bin/env python3
"""serve_bench.py — serving benchmark of a running OpenAI-compatible server (`ft serve`,
llama-server, ...) over streamed /v1/completions, with the Python standard library only.

  bench/serve_bench.py --base-url http://127.0.0.1:1919 [--name "ft cuda"] [--model ID]
      [--concurrency 1,4,16,64] [--prompt-tokens 512] [--max-tokens 128] [--min-requests 16]
      [--trace agent [--agent-convs 4 --agent-turns 6 --agent-prefix 2048 --agent-new 256
                      --agent-answer 128 --answer-ids auto]]
      [--prefix-ttft 16384] [--ids 300:150000] [--json PATH] [--deadline S]
  bench/serve_bench.py --compare A.json B.json ...   (one summary row per earlier run)

Every prompt is a list of token ids (`prompt: [ids]`), drawn from --ids LO:HI with a fixed
seed, so two servers get the same prompts. Every request asks for temperature 0 and
`ignore_eos` (ft and llama-server both read that field), so each generates exactly max_tokens
tokens; a stream that reports fewer is counted as "short". Modes (all that are asked for run on
one server, in this order unless --order says otherwise):

- sweep (--concurrency): for each level, rounds of that many concurrent streams, each with its
  own fresh prompt (no prefix-cache hits), until --min-requests streams ran. TTFT = request
  sent to first token chunk; ITL = gaps between token chunks (all streams pooled); TPOT =
  (last token - first token) / (tokens - 1) per stream; aggregate tok/s = generated tokens /
  wall time of the rounds.
- agent (--trace agent): a shared system prefix of P ids is sent once (max_tokens 1), then C
  conversations run at once, T turns each: a turn's prompt is the previous turn's prompt, its
  answer's token ids and N new ids. Per turn: TTFT and the prompt tokens the server says it
  reused (usage.prompt_tokens_details.cached_tokens; llama-server also in timings.cache_n).
  The answer's ids (--answer-ids auto): parsed from the text when it is the peer GGUF's filler
  vocabulary ("x<id>" tokens), else the text through the server's /tokenize, else random ids.
- prefix (--prefix-ttft L): an L-token prompt sent cold, then again (the cache), then a
  different one of the same length (no cache), then that one again.

Output: one markdown table per mode headed by --name, failures (counted, with their messages)
under each table, and with --json the raw numbers (every request's timings). The JSON file is
rewritten after each mode, so a run cut short keeps what finished. --deadline S stops starting
new rounds, turns or requests S seconds after the start. Exit status 0 when every request
succeeded with exactly max_tokens tokens, 1 otherwise, 2 when the server never answered.
"""
import argparse
import http.client
import json
import math
import random
import socket
import statistics
import sys
import threading
import time
import urllib.parse

T0 = time.perf_counter()


def now():
    return time.perf_counter()


class Server:
    """One HTTP endpoint; a new connection per request (no shared state between threads)."""

    def __init__(self, base_url, api_key, timeout):
        u = urllib.parse.urlsplit(base_url if "://" in base_url else "http://" + base_url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.root = u.path.rstrip("/")
        if self.root.endswith("/v1"):
            self.root = self.root[:-3]
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key
        self.timeout = timeout
        self.model = None

    def _conn(self, timeout):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def call(self, method, path, body=None, timeout=30):
        """(status, parsed JSON or text); status 0 and the message when the call itself failed."""
        c = self._conn(timeout)
        try:
            c.request(method, self.root + path, body=None if body is None else json.dumps(body),
                      headers=self.headers)
            r = c.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data)
            except ValueError:
                return r.status, data.decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as e:
            return 0, f"{type(e).__name__}: {e}"
        finally:
            c.close()

    def wait_ready(self, secs):
        deadline = now() + secs
        while True:
            st, _ = self.call("GET", "/health", timeout=5)
            if st == 200 or now() > deadline:
                return st == 200
            time.sleep(0.5)

    def model_id(self):
        st, j = self.call("GET", "/v1/models")
        try:
            return j["data"][0]["id"]
        except (KeyError, IndexError, TypeError):
            return None

    def tokenize(self, text):
        """Token ids of text by the server's /tokenize (ft reads prompt, llama-server content)."""
        st, j = self.call("POST", "/tokenize", {"prompt": text, "content": text,
                                                "add_special_tokens": False, "add_special": False})
        if st == 200 and isinstance(j, dict) and isinstance(j.get("tokens"), list):
            t = j["tokens"]
            if all(isinstance(x, int) for x in t):
                return t
        return None

    def stream(self, ids, max_tokens, keep_text=False):
        """One streamed completion of the token ids: a record of its timings (seconds from the
        moment the request was sent), the usage the server reported, or the error."""
        body = {"prompt": ids, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}, "ignore_eos": True}
        if self.model:
            body["model"] = self.model
        rec = {"prompt_tokens_sent": len(ids), "max_tokens": max_tokens, "ok": False,
               "error": None, "ttft": None, "e2e": None, "tok_t": [], "completion_tokens": None,
               "prompt_tokens": None, "cached_tokens": None, "cache_n": None, "finish": None}
        texts = []
        c = self._conn(self.timeout)
        t0 = now()
        rec["t_start"] = round(t0 - T0, 6)
        try:
            c.request("POST", self.root + "/v1/completions", body=json.dumps(body),
                      headers=self.headers)
            r = c.getresponse()
            if r.status != 200:
                raw = r.read(2000).decode("utf-8", "replace")
                try:
                    msg = json.loads(raw).get("error", raw)
                    msg = msg.get("message", msg) if isinstance(msg, dict) else msg
                except (ValueError, AttributeError):
                    msg = raw
                rec["error"] = f"HTTP {r.status}: {str(msg)[:200]}"
                return rec
            done = False
            while True:
                line = r.readline()
                if not line:
                    break
                t = now() - t0
                line = line.strip()
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                elif line.startswith(b"error:"):
                    rec["error"] = "stream error: " + line[6:].strip().decode("utf-8", "replace")[:200]
                    break
                else:
                    continue
                if payload == b"[DONE]":
                    done = True
                    break
                try:
                    j = json.loads(payload)
                except ValueError:
                    rec["error"] = "bad SSE payload: " + payload[:120].decode("utf-8", "replace")
                    break
                if not isinstance(j, dict):
                    continue
                if j.get("error"):
                    e = j["error"]
                    rec["error"] = "stream error: " + str(e.get("message", e) if isinstance(e, dict) else e)[:200]
                    break
                ch = j.get("choices") or []
                if ch and isinstance(ch[0], dict):
                    txt = ch[0].get("text") or ""
                    fin = ch[0].get("finish_reason")
                    if fin is None or txt:  # a token's chunk (the last may carry text too)
                        rec["tok_t"].append(round(t, 6))
                        texts.append(txt)
                    if fin:
                        rec["finish"] = fin
                u = j.get("usage")
                if isinstance(u, dict):
                    rec["completion_tokens"] = u.get("completion_tokens")
                    rec["prompt_tokens"] = u.get("prompt_tokens")
                    d = u.get("prompt_tokens_details")
                    if isinstance(d, dict) and d.get("cached_tokens") is not None:
                        rec["cached_tokens"] = d.get("cached_tokens")
                tm = j.get("timings")
                if isinstance(tm, dict) and tm.get("cache_n") is not None:
                    rec["cache_n"] = tm.get("cache_n")
            if rec["error"] is None and not done and rec["finish"] is None:
                rec["error"] = "stream ended without [DONE] or a finish_reason"
        except socket.timeout:
            rec["error"] = f"timed out after {self.timeout:.0f} s"
        except (OSError, http.client.HTTPException) as e:
            rec["error"] = f"{type(e).__name__}: {e}"[:200]
        finally:
            c.close()
        t1 = now() - t0
        rec["e2e"] = round(t1, 6)
        if rec["error"]:
            return rec
        if not rec["tok_t"]:
            rec["error"] = "no token chunk in the stream"
            return rec
        if rec["completion_tokens"] is None:  # no usage: one token per chunk
            rec["completion_tokens"] = len(rec["tok_t"])
        if rec["cached_tokens"] is None and rec["cache_n"] is not None:
            rec["cached_tokens"] = rec["cache_n"]
        rec["ttft"] = rec["tok_t"][0]
        n = rec["completion_tokens"]
        span = rec["tok_t"][-1] - rec["tok_t"][0]
        rec["tpot"] = span / (n - 1) if n > 1 and span > 0 else None
        rec["ok"] = True
        if keep_text:
            rec["chunks"] = texts
        return rec


# --- statistics -------------------------------------------------------------------------------

def pct(xs, p):
    """The p-th percentile (linear between closest ranks), None for no values."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100.0
    f, c = math.floor(k), math.ceil(k)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def fmt(x, scale=1.0, nd=3):
    return "-" if x is None else f"{x * scale:.{nd}f}"


def is_short(r):
    return r["ok"] and r["completion_tokens"] != r["max_tokens"]


def failures(recs):
    """(failed count, short count, {message: count})."""
    msgs = {}
    for r in recs:
        if not r["ok"]:
            msgs[r["error"]] = msgs.get(r["error"], 0) + 1
        elif is_short(r):
            m = f"generated {r['completion_tokens']} tokens, not max_tokens {r['max_tokens']}"
            msgs[m] = msgs.get(m, 0) + 1
    return sum(1 for r in recs if not r["ok"]), sum(1 for r in recs if is_short(r)), msgs


def print_failures(msgs):
    for m, n in sorted(msgs.items(), key=lambda kv: -kv[1]):
        print(f"- {n} x {m}")
    if msgs:
        print()


# --- prompts ----------------------------------------------------------------------------------

class Ids:
    """Seeded random token ids in [lo, hi)."""

    def __init__(self, lo, hi, seed):
        self.lo, self.hi, self.rng = lo, hi, random.Random(seed)

    def __call__(self, n):
        return [self.rng.randrange(self.lo, self.hi) for _ in range(n)]


def filler_ids(text):
    """Token ids of text in the peer GGUF's filler vocabulary (id N >= 260 is "x<N>", 258 "x1",
    259 "x2"); None when text is not made of such tokens only."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] != "x":
            return None
        j = i + 1
        while j < n and text[j].isdigit():
            j += 1
        d = text[i + 1:j]
        if not d or d[0] == "0":
            return None
        v = {"1": 258, "2": 259}.get(d, int(d))
        if v < 258 or (v < 260 and len(d) > 1):
            return None
        out.append(v)
        i = j
    return out


def answer_ids(srv, rec, how, gen):
    """(ids of the answer to append to the next prompt, where they came from)."""
    n = rec["completion_tokens"] or rec["max_tokens"]
    text = "".join(rec.get("chunks") or [])
    if how in ("auto", "filler") and rec["ok"]:
        ids = filler_ids(text)
        if ids is not None and len(ids) == n:
            return ids, "filler"
    if how in ("auto", "tokenize") and rec["ok"] and text:
        ids = srv.tokenize(text)
        if ids:
            return ids, "tokenize"
    return gen(n), "random"


# --- running streams at once ------------------------------------------------------------------

def run_parallel(jobs):
    """Runs fn() for each fn in jobs on its own thread, started together; (results in order,
    wall seconds from the first start to the last end)."""
    res = [None] * len(jobs)
    bar = threading.Barrier(len(jobs)) if jobs else None

    def one(i, fn):
        try:
            bar.wait()
        except threading.BrokenBarrierError:
            pass
        try:
            res[i] = fn()
        except Exception as e:  # noqa: BLE001 - a bug here is one failed stream, not a traceback
            res[i] = {"ok": False, "error": f"client: {type(e).__name__}: {e}"[:200],
                      "max_tokens": 0, "completion_tokens": None, "tok_t": []}
    th = [threading.Thread(target=one, args=(i, f), daemon=True) for i, f in enumerate(jobs)]
    t0 = now()
    for t in th:
        t.start()
    for t in th:
        t.join()
    return res, now() - t0


class Bench:
    def __init__(self, a, srv):
        self.a, self.srv = a, srv
        self.lo, self.hi = (int(x) for x in a.ids.split(":"))
        self.out = {"server": a.name, "base_url": a.base_url, "model": srv.model,
                    "args": vars(a), "modes": {}}
        self.all_recs = []

    def late(self):
        return self.a.deadline > 0 and now() - T0 > self.a.deadline

    def save(self):
        if self.a.json:
            with open(self.a.json, "w") as f:
                json.dump(self.out, f, indent=1)

    def keep(self, recs):
        self.all_recs += [r for r in recs if r]
        return recs

    # -- sweep --
    def sweep(self):
        a = self.a
        levels = [int(c) for c in a.concurrency.split(",") if c.strip()]
        gen = Ids(self.lo, self.hi, a.seed + 1)
        print(f"### {a.name}: concurrent streams\n")
        print(f"model `{self.srv.model}`, token-id prompts of {a.prompt_tokens} tokens (a fresh one "
              f"per stream), {a.max_tokens} generated tokens per stream, temperature 0, ignore_eos\n")
        print("| streams | requests | TTFT p50 / p90 / p99 (s) | ITL p50 / p90 / p99 (ms) "
              "| TPOT mean (ms) | tok/s per stream | aggregate tok/s | cached tokens (mean) "
              "| failed | short |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
        rows, msgs = [], {}
        for conc in levels:
            rounds = max(a.rounds, math.ceil(a.min_requests / conc))
            if a.max_rounds > 0:
                rounds = max(a.rounds, min(rounds, a.max_rounds))
            recs, walls, toks, skipped = [], 0.0, 0, 0
            for _ in range(rounds):
                if self.late():
                    skipped += 1
                    continue
                prompts = [gen(a.prompt_tokens) for _ in range(conc)]
                r, wall = run_parallel([lambda p=p: self.srv.stream(p, a.max_tokens) for p in prompts])
                self.keep(r)
                recs += r
                walls += wall
                toks += sum(x["completion_tokens"] or 0 for x in r if x["ok"])
            ok = [x for x in recs if x["ok"]]
            nf, ns, m = failures(recs)
            for k, v in m.items():
                msgs[k] = msgs.get(k, 0) + v
            ttft = [x["ttft"] for x in ok]
            itl = [b - c for x in ok for c, b in zip(x["tok_t"], x["tok_t"][1:])]
            tpot = [x["tpot"] for x in ok if x.get("tpot")]
            tps = [1.0 / x["tpot"] for x in ok if x.get("tpot")]
            cached = [x["cached_tokens"] for x in ok if x["cached_tokens"] is not None]
            summ = {"streams": conc, "rounds": rounds - skipped, "skipped_rounds": skipped,
                    "requests": len(recs), "failed": nf, "short": ns,
                    "ttft_p50": pct(ttft, 50), "ttft_p90": pct(ttft, 90), "ttft_p99": pct(ttft, 99),
                    "itl_p50": pct(itl, 50), "itl_p90": pct(itl, 90), "itl_p99": pct(itl, 99),
                    "tpot_mean": statistics.mean(tpot) if tpot else None,
                    "tps_stream_mean": statistics.mean(tps) if tps else None,
                    "aggregate_tps": toks / walls if walls > 0 else None, "wall_s": walls,
                    "cached_mean": statistics.mean(cached) if cached else None}
            rows.append({"summary": summ, "records": recs})
            print(f"| {conc} | {len(recs)}{' (deadline)' if skipped else ''} | "
                  f"{fmt(summ['ttft_p50'])} / {fmt(summ['ttft_p90'])} / {fmt(summ['ttft_p99'])} | "
                  f"{fmt(summ['itl_p50'], 1e3, 1)} / {fmt(summ['itl_p90'], 1e3, 1)} / "
                  f"{fmt(summ['itl_p99'], 1e3, 1)} | {fmt(summ['tpot_mean'], 1e3, 1)} | "
                  f"{fmt(summ['tps_stream_mean'], 1, 1)} | {fmt(summ['aggregate_tps'], 1, 1)} | "
                  f"{fmt(summ['cached_mean'], 1, 0)} | {nf} | {ns} |", flush=True)
        print()
        print_failures(msgs)
        self.out["modes"]["sweep"] = rows
        self.save()

    # -- agent trace --
    def agent(self):
        a = self.a
        C, T, P, N, M = a.agent_convs, a.agent_turns, a.agent_prefix, a.agent_new, a.agent_answer
        gen = Ids(self.lo, self.hi, a.seed + 2)
        system = gen(P)
        users = [[gen(N) for _ in range(T)] for _ in range(C)]  # the same on every server
        fill = Ids(self.lo, self.hi, a.seed + 3)  # answers when no ids come back
        fill_lock = threading.Lock()
        print(f"### {a.name}: agent trace\n")
        print(f"{C} conversations at once, {T} turns each: a shared system prefix of {P} tokens "
              f"(sent once first, max_tokens 1), then per turn the previous prompt + its answer "
              f"({M} tokens, ids: {a.answer_ids}) + {N} new tokens\n")
        if self.late():
            print("skipped (deadline)\n")
            return
        prime = self.keep([self.srv.stream(system, 1)])[0]
        turns = [[None] * T for _ in range(C)]
        reusable = [[0] * T for _ in range(C)]
        sources = {}

        def conv(c):
            prompt = system + users[c][0]
            reuse = P
            for t in range(T):
                if self.late():
                    break
                rec = self.srv.stream(prompt, M, keep_text=True)
                rec["turn"], rec["conv"] = t + 1, c
                turns[c][t], reusable[c][t] = rec, reuse
                if t + 1 == T:
                    break
                with fill_lock:
                    ids, src = answer_ids(self.srv, rec, a.answer_ids, fill)
                    sources[src] = sources.get(src, 0) + 1
                reuse = len(prompt) + len(ids)
                prompt = prompt + ids + users[c][t + 1]
            return None

        t0 = now()
        run_parallel([lambda c=c: conv(c) for c in range(C)])
        wall = now() - t0
        recs = [r for row in turns for r in row if r]
        self.keep(recs)
        print(f"priming request ({P} tokens, cold): TTFT {fmt(prime['ttft'])} s"
              + ("" if prime["ok"] else f", failed: {prime['error']}") + "\n")
        print("| turn | prompt tokens | TTFT p50 / max (s) | cached tokens (mean) | reusable (mean) "
              "| tok/s per stream | failed | short |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        rows = []
        for t in range(T):
            col = [turns[c][t] for c in range(C) if turns[c][t]]
            ok = [r for r in col if r["ok"]]
            nf, ns, _ = failures(col)
            cached = [r["cached_tokens"] for r in ok if r["cached_tokens"] is not None]
            reu = [reusable[c][t] for c in range(C) if turns[c][t]]
            tps = [1.0 / r["tpot"] for r in ok if r.get("tpot")]
            row = {"turn": t + 1, "requests": len(col), "failed": nf, "short": ns,
                   "prompt_tokens": statistics.mean(r["prompt_tokens_sent"] for r in col) if col else None,
                   "ttft_p50": pct([r["ttft"] for r in ok], 50),
                   "ttft_max": max((r["ttft"] for r in ok), default=None),
                   "cached_mean": statistics.mean(cached) if cached else None,
                   "reusable_mean": statistics.mean(reu) if reu else None,
                   "tps_stream_mean": statistics.mean(tps) if tps else None}
            rows.append(row)
            if not col:
                print(f"| {t + 1} | - | - | - | - | - | skipped (deadline) | - |")
                continue
            print(f"| {t + 1} | {row['prompt_tokens']:.0f} | {fmt(row['ttft_p50'])} / "
                  f"{fmt(row['ttft_max'])} | {fmt(row['cached_mean'], 1, 0)} | "
                  f"{fmt(row['reusable_mean'], 1, 0)} | {fmt(row['tps_stream_mean'], 1, 1)} | "
                  f"{nf} | {ns} |", flush=True)
        ok = [r for r in recs if r["ok"]]
        gen_toks = sum(r["completion_tokens"] for r in ok)
        ttft_all = [r["ttft"] for r in ok]
        print(f"\nall turns: TTFT p50 {fmt(pct(ttft_all, 50))} / p99 {fmt(pct(ttft_all, 99))} s, "
              f"{gen_toks} tokens generated in {wall:.2f} s ({gen_toks / wall if wall else 0:.1f} "
              f"tok/s aggregate); answer ids from: "
              + (", ".join(f"{k} {v}" for k, v in sorted(sources.items())) or "-") + "\n")
        _, _, msgs = failures(recs + [prime])
        print_failures(msgs)
        for r in recs:
            r.pop("chunks", None)
        self.out["modes"]["agent"] = {"prime": prime, "turns": rows, "records": recs,
                                      "answer_ids": sources, "wall_s": wall}
        self.save()

    # -- repeated long prefix --
    def prefix(self):
        a = self.a
        L, M = a.prefix_ttft, a.prefix_max_tokens
        gen = Ids(self.lo, self.hi, a.seed + 4)
        A, B = gen(L), gen(L)
        print(f"### {a.name}: TTFT of a {L}-token prompt, with and without the prefix cache\n")
        print(f"{M} tokens generated per request; the requests run one after another\n")
        print("| request | prompt tokens | TTFT (s) | cached tokens | TTFT / cold |")
        print("| --- | ---: | ---: | ---: | ---: |")
        seq = [("A cold", A), ("A repeated", A), ("B (different, no cache)", B), ("B repeated", B)]
        recs, cold = [], None
        for label, p in seq:
            if self.late():
                print(f"| {label} | {L} | skipped (deadline) | - | - |")
                continue
            r = self.keep([self.srv.stream(p, M)])[0]
            r["label"] = label
            recs.append(r)
            if label == "A cold" and r["ok"]:
                cold = r["ttft"]
            if not r["ok"]:
                print(f"| {label} | {L} | failed | - | - |", flush=True)
                continue
            ratio = f"{r['ttft'] / cold:.3f}" if cold else "-"
            print(f"| {label} | {r['prompt_tokens'] or L} | {fmt(r['ttft'])} | "
                  f"{r['cached_tokens'] if r['cached_tokens'] is not None else '-'} | {ratio} |",
                  flush=True)
        print()
        print_failures(failures(recs)[2])
        self.out["modes"]["prefix"] = recs
        self.save()


def compare(paths):
    """One row per JSON file written by --json: the figures the issue compares."""
    print("| server | agg. tok/s @16 | TTFT p50 / p99 @16 (s) | ITL p50 / p99 @16 (ms) "
          "| agg. tok/s @64 | TTFT p50 / p99 @64 (s) | agent TTFT p50, turns 2+ (s) "
          "| agent cached / reusable | long prompt: cold / repeated / different TTFT (s) "
          "| failed / short |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for p in paths:
        try:
            with open(p) as f:
                j = json.load(f)
        except (OSError, ValueError) as e:
            print(f"| {p}: {type(e).__name__} | | | | | | | | | |")
            continue
        m = j.get("modes", {})
        lv = {r["summary"]["streams"]: r["summary"] for r in m.get("sweep", [])}
        s16, s64 = lv.get(16, {}), lv.get(64, {})
        ag = m.get("agent", {}).get("records", [])
        late = [r["ttft"] for r in ag if r.get("ok") and r.get("turn", 1) > 1]
        turns = m.get("agent", {}).get("turns", [])
        ca = sum((t.get("cached_mean") or 0) * t["requests"] for t in turns[1:])
        re_ = sum((t.get("reusable_mean") or 0) * t["requests"] for t in turns[1:])
        pre = {r.get("label"): r for r in m.get("prefix", [])}
        lp = " / ".join(fmt((pre.get(k) or {}).get("ttft"))
                        for k in ("A cold", "A repeated", "B (different, no cache)"))
        print(f"| {j.get('server')} | {fmt(s16.get('aggregate_tps'), 1, 1)} | "
              f"{fmt(s16.get('ttft_p50'))} / {fmt(s16.get('ttft_p99'))} | "
              f"{fmt(s16.get('itl_p50'), 1e3, 1)} / {fmt(s16.get('itl_p99'), 1e3, 1)} | "
              f"{fmt(s64.get('aggregate_tps'), 1, 1)} | {fmt(s64.get('ttft_p50'))} / "
              f"{fmt(s64.get('ttft_p99'))} | {fmt(pct(late, 50))} | "
              f"{f'{ca / re_:.0%}' if re_ else '-'} | {lp} | "
              f"{j.get('failed', '-')} / {j.get('short', '-')} |")
    return 0


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--compare":
        return compare(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("--base-url", default="http://127.0.0.1:1919")
    ap.add_argument("--name", default=None, help="server name in the tables (default: the URL)")
    ap.add_argument("--model", default=None, help="model id (default: the first of /v1/models)")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--ids", default="300:150000", help="token ids LO:HI the prompts draw from")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", default="1,4,16,64", help="sweep levels ('' = no sweep)")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=1, help="sweep: rounds per level, at least")
    ap.add_argument("--min-requests", type=int, default=16, help="sweep: streams per level, at least")
    ap.add_argument("--max-rounds", type=int, default=0, help="sweep: rounds per level, at most "
                    "(over --min-requests; 0 = no limit)")
    ap.add_argument("--trace", choices=["agent"], default=None)
    ap.add_argument("--agent-convs", type=int, default=4)
    ap.add_argument("--agent-turns", type=int, default=6)
    ap.add_argument("--agent-prefix", type=int, default=2048)
    ap.add_argument("--agent-new", type=int, default=256)
    ap.add_argument("--agent-answer", type=int, default=128)
    ap.add_argument("--answer-ids", choices=["auto", "filler", "tokenize", "random"], default="auto")
    ap.add_argument("--prefix-ttft", type=int, default=0, metavar="L")
    ap.add_argument("--prefix-max-tokens", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2, help="short requests before measuring, one "
                    "at a time, then one burst of short ones at each sweep level")
    ap.add_argument("--order", default="sweep,agent,prefix", help="order of the modes asked for")
    ap.add_argument("--wait", type=float, default=60, help="seconds to wait for /health")
    ap.add_argument("--request-timeout", type=float, default=600)
    ap.add_argument("--deadline", type=float, default=0, help="seconds; 0 = none")
    ap.add_argument("--json", default=None, metavar="PATH")
    a = ap.parse_args()
    a.name = a.name or a.base_url
    try:
        lo, hi = (int(x) for x in a.ids.split(":"))
        assert 0 <= lo < hi
    except (ValueError, AssertionError):
        ap.error("--ids must be LO:HI with 0 <= LO < HI")
    srv = Server(a.base_url, a.api_key, a.request_timeout)
    if not srv.wait_ready(a.wait):
        print(f"### {a.name}: no answer from {a.base_url}/health within {a.wait:.0f} s")
        return 2
    srv.model = a.model or srv.model_id()
    b = Bench(a, srv)
    wid = Ids(lo, hi, 99)
    warm = [srv.stream(wid(16), 4) for _ in range(a.warmup)]
    if warm:  # every batch size the sweep will decode at, once (CUDA graphs, allocations)
        for c in [int(c) for c in a.concurrency.split(",") if c.strip()]:
            warm += run_parallel([lambda p=wid(16): srv.stream(p, 8) for _ in range(c)])[0]
    if warm and not any(w["ok"] for w in warm):
        print(f"### {a.name}: every warm-up request failed: {warm[-1]['error']}\n")
    have = {"sweep": bool(a.concurrency.strip()), "agent": bool(a.trace), "prefix": a.prefix_ttft > 0}
    order = [m.strip() for m in a.order.split(",") if m.strip()]
    if any(m not in have for m in order):
        ap.error("--order takes sweep, agent and prefix")
    order += [m for m in have if m not in order]
    modes = [getattr(b, m) for m in order if have[m]]
    for m in modes:
        try:
            m()
        except Exception as e:  # noqa: BLE001 - one mode's bug must not lose the others
            print(f"\n{m.__name__}: client error {type(e).__name__}: {e}\n", flush=True)
            b.out["modes"][m.__name__ + "_error"] = f"{type(e).__name__}: {e}"
            b.save()
    nf, ns, _ = failures(b.all_recs)
    b.out["failed"], b.out["short"], b.out["requests"] = nf, ns, len(b.all_recs)
    b.out["elapsed_s"] = now() - T0
    b.save()
    print(f"{a.name}: {len(b.all_recs)} requests, {nf} failed, {ns} short, {now() - T0:.1f} s")
    return 0 if nf + ns == 0 and b.all_recs else 1


if __name__ == "__main__":
    sys.exit(main())
