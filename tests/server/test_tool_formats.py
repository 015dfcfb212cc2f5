#!/usr/bin/env python3
"""test_tool_formats.py — the tool-call families beyond Hermes through `ft serve`, with the
official `openai` client, on the random-weight fixture (its own template is Qwen3's, so each
family is chosen with --chat-template; the tool format follows the family).

- llama3_1 (Llama 3.1-3.3 JSON calls): a required and a named call are enforced by the grammar,
  parsed, streamed as delta.tool_calls chunks with finish_reason "tool_calls", and a tool-result
  round trip is rendered; two calls in one assistant message are a 400 (the template takes one).
- glm4, minimax, qwen3_coder (XML calls), deepseek3 and harmony (gpt-oss): tools with tool_choice
  auto are accepted; "required" and a named function are enforced by the grammar on these random
  weights (which would not call by themselves): finish_reason "tool_calls", the named function
  only, arguments valid against the tool's schema (jsonschema), and the same call streamed; a
  tool-result round trip is rendered.
- --tool-parser with an unknown name is a one-line usage error listing the names.
The server must stay up through all of it.

Run by ctest (label server):
  test_tool_formats.py --ft build/ft --model tests/data/models/qwen3_moe
"""
import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

try:
    import jsonschema
    from openai import OpenAI
except ImportError:
    print("test_tool_formats: FAIL: openai or jsonschema is missing (tools/setup.sh test "
          "installs them into build/venv)")
    sys.exit(1)

from harness import check, finish, run_groups, start_server, stop_server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time.",
    "parameters": {"type": "object", "properties": {}}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
# a schema with a raw string, an integer (JSON in the XML families), an enum and an optional
# object parameter
FORECAST = {"type": "function", "function": {
    "name": "get_forecast", "description": "Forecast of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 10},
        "days": {"type": "integer"},
        "units": {"type": "string", "enum": ["metric", "imperial"]},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}},
                  "required": ["lat"], "additionalProperties": False}},
        "required": ["city", "days", "units"], "additionalProperties": False}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME, FORECAST)}


def valid_call(name, call, names):
    """1 when call is one of names with arguments valid against its schema."""
    if call.function.name not in names:
        return False
    try:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    except (ValueError, jsonschema.ValidationError) as e:
        print(f"  {name}: {call.function.name} {call.function.arguments!r}: {e}", flush=True)
        return False
    return True


def forced(client, name):
    """required and named calls, blocking and streamed, on weights that would not call."""
    tools = [WEATHER, TIME, FORECAST]
    for choice, names in (("required", ("get_weather", "get_time", "get_forecast")),
                          ({"type": "function", "function": {"name": "get_forecast"}},
                           ("get_forecast",))):
        what = "required" if choice == "required" else "named"
        kw = dict(model="m", messages=ASK, tools=tools, tool_choice=choice, max_tokens=700,
                  temperature=0, parallel_tool_calls=False)
        r = client.chat.completions.create(**kw)
        c = r.choices[0]
        calls = c.message.tool_calls or []
        check(c.finish_reason == "tool_calls" and len(calls) == 1,
              f"{name} {what}: one call, finish_reason tool_calls ({c.finish_reason}, {calls}, "
              f"{c.message.content!r})")
        check(all(valid_call(name, k, names) for k in calls),
              f"{name} {what}: arguments valid against the schema")
        acc, fin = {}, None
        for ch in client.chat.completions.create(stream=True, **kw):
            if not ch.choices:
                continue
            for tc in ch.choices[0].delta.tool_calls or []:
                e = acc.setdefault(tc.index, ["", ""])
                e[0] += (tc.function.name or "") if tc.function else ""
                e[1] += (tc.function.arguments or "") if tc.function else ""
            fin = ch.choices[0].finish_reason or fin
        check(fin == "tool_calls" and [v[0] for v in acc.values()] ==
              [k.function.name for k in calls] and
              [v[1] for v in acc.values()] == [k.function.arguments for k in calls],
              f"{name} {what}: streamed call equals the blocking one ({acc})")


def post(base, body):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def llama31(client, base):
    r = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME],
                                       tool_choice="required", max_tokens=120, temperature=0)
    c = r.choices[0]
    calls = c.message.tool_calls or []
    check(c.finish_reason == "tool_calls", f"llama3_1 required: finish_reason ({c.finish_reason})")
    check(len(calls) >= 1 and calls[0].function.name in ("get_weather", "get_time"),
          f"llama3_1 required: a call ({calls})")
    check(all(isinstance(json.loads(k.function.arguments), dict) for k in calls),
          "llama3_1: arguments are a JSON object text")
    acc, fin = {}, None
    for ch in client.chat.completions.create(
            model="m", messages=ASK, tools=[WEATHER, TIME], max_tokens=120, temperature=0,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True):
        if not ch.choices:
            continue
        for tc in ch.choices[0].delta.tool_calls or []:
            e = acc.setdefault(tc.index, {"id": None, "name": "", "args": ""})
            e["id"] = tc.id or e["id"]
            e["name"] += tc.function.name or ""
            e["args"] += tc.function.arguments or ""
        fin = ch.choices[0].finish_reason or fin
    check(fin == "tool_calls", f"llama3_1 streamed: finish_reason ({fin})")
    check(list(acc) == [0] and acc[0]["name"] == "get_weather" and acc[0]["id"],
          f"llama3_1 streamed named call: {acc}")
    if 0 in acc:
        check(isinstance(json.loads(acc[0]["args"]).get("city"), str), "streamed arguments")
    trip = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 37}"}]
    r = client.chat.completions.create(model="m", messages=trip, tools=[WEATHER], max_tokens=8,
                                       temperature=0)
    check(r.usage.prompt_tokens > 150, f"llama3_1 round trip rendered ({r.usage.prompt_tokens})")
    two = dict(trip[1])
    two["tool_calls"] = trip[1]["tool_calls"] * 2
    st, j = post(base, {"model": "m", "messages": ASK + [two, trip[2], trip[2]],
                        "tools": [WEATHER], "max_tokens": 4})
    check(st == 400 and "one per message" in j.get("error", {}).get("message", ""),
          f"llama3_1: two calls in one message are a 400 ({st} {j})")


def xml_family(name):
    def run(client, base):
        r = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME],
                                           max_tokens=8, temperature=0)
        check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"),
              f"{name}: tools with tool_choice auto answered")
        forced(client, name)
        st, j = post(base, {"model": "m", "messages": ASK, "tools": [{
            "type": "function", "function": {"name": "bad name"}}], "tool_choice": "required"})
        check(st == 400 and "bad name" in j.get("error", {}).get("message", ""),
              f"{name}: a name the format cannot write is a 400 naming it ({st} {j})")
        trip = ASK + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
        st, j = post(base, {"model": "m", "messages": trip, "tools": [WEATHER], "max_tokens": 4})
        check(st == 200, f"{name}: a tool-result round trip is rendered ({st} {j})")
        st, j = post(base, {"model": "m", "messages": ASK, "tools": [{"type": "function"}]})
        check(st == 400, f"{name}: a tool without a function is a 400 ({st})")
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    t0 = time.time()
    bad = subprocess.run([a.ft, "serve", "--model", a.model, "--tool-parser", "bogus"],
                         capture_output=True, text=True, timeout=60)
    msg = bad.stderr.strip()
    check(bad.returncode == 2 and "harmony" in msg and "\n" not in msg,
          f"--tool-parser bogus: one-line usage error ({bad.returncode} {msg!r})")
    families = [("llama3_1", llama31)] + [(f, xml_family(f)) for f in
                                          ("glm4", "minimax", "qwen3_coder", "deepseek3",
                                           "harmony")]
    for fam, fn in families:
        proc, base = start_server(a.ft, a.model, ["--ctx-size", "2048", "--served-model-name",
                                                  "m", "--chat-template", fam],
                                  "test_tool_formats", timeout=120)
        client = OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=300)
        try:
            run_groups([(fam, lambda: fn(client, base))])
        finally:
            rc = stop_server(proc)
            check(rc == 0, f"{fam}: clean exit on SIGTERM ({rc})")
    finish("test_tool_formats", t0)


if __name__ == "__main__":
    main()
