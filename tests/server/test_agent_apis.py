#!/usr/bin/env python3
"""test_agent_apis.py — tool calls, structured output, the Anthropic Messages API and the
Responses API of `ft serve`, driven by the official `openai` and `anthropic` clients.

On the random-weight fixture (qwen3_moe, Qwen3 template, Hermes tool calls) only what the
grammar enforces can be checked: a required / named tool call parsed (and streamed), json_object
and a json_schema honoured (validated with jsonschema), the same through /v1/messages and
/v1/responses, a tool-result round trip accepted, bad input answered 400 in each API's shape and
the server still up. With --real (the default real model, Qwen2.5-Coder-0.5B-Instruct) the
answers must also make sense: the forced call names the city, the model answers from the tool's
content, several calls in one turn are parsed.

Run by ctest (label server):
  test_agent_apis.py --ft build/ft --model tests/data/models/qwen3_moe
  test_agent_apis.py --ft build/ft --model models/.../qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --real
Needs openai, anthropic and jsonschema (tools/setup.sh test installs them into build/venv).
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.request

try:
    import anthropic
    import jsonschema
    import openai
    from openai import OpenAI
except ImportError as e:
    print(f"test_agent_apis: FAIL: {e.name} is missing (tools/setup.sh test installs it into "
          "build/venv)")
    sys.exit(1)

from harness import check, finish, run_groups, start_server, stop_server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12, "description": "the city name"}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"},
    "kind": {"enum": ["cat", "dog"]}, "tags": {"type": "array", "maxItems": 2,
                                               "items": {"type": "boolean"}}},
    "required": ["name", "age", "kind", "tags"], "additionalProperties": False}
MODEL = "m"
REAL = False


def post(base, path, body):
    """(status, JSON) of a raw POST (bad input the clients would refuse to send)."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def args_of(call):
    try:
        return json.loads(call.function.arguments)
    except (ValueError, TypeError):
        return None


def test_forced_tool_call(client):
    msgs = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, tools=[WEATHER, TIME],
                                       tool_choice="required", max_tokens=200, temperature=0)
    c = r.choices[0]
    check(c.finish_reason == "tool_calls", f"required: finish_reason tool_calls ({c.finish_reason})")
    calls = c.message.tool_calls or []
    check(len(calls) >= 1, "required: a tool call came back")
    if calls:
        a = args_of(calls[0])
        check(calls[0].id.startswith("call_") and calls[0].type == "function", "call id and type")
        check(calls[0].function.name in ("get_weather", "get_time"), "call names a tool")
        check(isinstance(a, dict) and isinstance(a.get("city"), str), f"arguments JSON: {a}")
        if REAL:
            check(calls[0].function.name == "get_weather" and "paris" in a.get("city", "").lower(),
                  f"the real model asks for Paris' weather: {calls[0].function}")
    # named: only that function
    r = client.chat.completions.create(
        model=MODEL, messages=msgs, tools=[WEATHER, TIME], max_tokens=200, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = r.choices[0].message.tool_calls or []
    check(len(calls) == 1 and calls[0].function.name == "get_time", "named tool_choice honoured")
    # streamed: delta.tool_calls chunks add up to a call
    acc, fin = {}, None
    for ch in client.chat.completions.create(model=MODEL, messages=msgs, tools=[WEATHER],
                                             tool_choice="required", max_tokens=200,
                                             temperature=0, stream=True):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        for tc in d.tool_calls or []:
            e = acc.setdefault(tc.index, {"id": None, "name": "", "args": ""})
            e["id"] = tc.id or e["id"]
            if tc.function:
                e["name"] += tc.function.name or ""
                e["args"] += tc.function.arguments or ""
        fin = ch.choices[0].finish_reason or fin
    check(fin == "tool_calls", f"streamed: finish_reason tool_calls ({fin})")
    check(0 in acc and acc[0]["name"] == "get_weather" and acc[0]["id"].startswith("call_"),
          f"streamed tool call: {acc}")
    if 0 in acc:
        check(isinstance(json.loads(acc[0]["args"]).get("city"), str), "streamed arguments parse")


def test_round_trip_and_parallel(client):
    msgs = [{"role": "user", "content": "What is the weather in Paris right now?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1",
             "content": "{\"temperature_celsius\": 37, \"sky\": \"clear\"}"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, tools=[WEATHER],
                                       max_tokens=60, temperature=0)
    text = r.choices[0].message.content or ""
    check(r.usage.prompt_tokens > 100, "round trip: the tools and the result are in the prompt")
    if REAL:
        check("37" in text, f"the real model answers from the tool's content: {text!r}")
    if REAL:  # the real model calls once per city when asked about two (in the forced format)
        r = client.chat.completions.create(
            model=MODEL, tools=[WEATHER], max_tokens=200, temperature=0, tool_choice="required",
            messages=[{"role": "user", "content": "What's the weather in Paris and in London? "
                                                  "Call the tool once for each city."}])
        calls = r.choices[0].message.tool_calls or []
        cities = sorted(args_of(c).get("city", "").lower() for c in calls if args_of(c))
        check(len(calls) >= 2 and r.choices[0].finish_reason == "tool_calls",
              f"parallel calls parsed: {cities}")
    else:  # the grammar allows several calls; a random model stops after one or goes on
        r = client.chat.completions.create(model=MODEL, tools=[WEATHER, TIME], max_tokens=400,
                                           temperature=0, tool_choice="required",
                                           parallel_tool_calls=True,
                                           messages=[{"role": "user", "content": "Paris, London"}])
        calls = r.choices[0].message.tool_calls or []
        check(len(calls) >= 1 and all(args_of(c) is not None for c in calls),
              f"every call of a turn parses ({len(calls)} calls)")


def test_structured_output(client):
    r = client.chat.completions.create(
        model=MODEL, max_tokens=300, temperature=0,
        messages=[{"role": "user", "content": "Describe a pet as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "pet", "strict": True,
                                                                "schema": SCHEMA}})
    text = r.choices[0].message.content
    try:
        doc = json.loads(text)
        jsonschema.validate(doc, SCHEMA)
        ok = True
    except Exception as e:  # noqa: BLE001 - any failure is the check's
        ok = False
        print(f"    {e}")
    check(ok and r.choices[0].finish_reason == "stop", f"json_schema honoured: {text!r}")
    # json_object: an object (the random model is given room; the real one answers briefly)
    r = client.chat.completions.create(
        model=MODEL, max_tokens=400 if REAL else 40, temperature=0,
        messages=[{"role": "user", "content": "Reply with a JSON object with key a = 1."}],
        response_format={"type": "json_object"})
    text = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":
        check(isinstance(json.loads(text), dict), f"json_object is an object: {text!r}")
    else:
        check(text.lstrip().startswith("{"), f"json_object starts an object: {text!r}")


def test_stop_sequences(ac):
    """stop_sequences: the greedy text cut at a piece of itself, stop_reason "stop_sequence" and
    stop_sequence naming the one that matched (blocking and streamed); one never seen leaves
    end_turn / max_tokens with stop_sequence null."""
    kw = dict(model=MODEL, max_tokens=24, extra_body={"temperature": 0, "top_k": 1},
              messages=[{"role": "user", "content": "Count to ten."}])
    full = ac.messages.create(**kw).content[0].text
    cut = len(full) // 2
    stop = full[cut:cut + 3]
    if len(full) < 8 or not stop.strip():
        check(False, f"stop_sequences: the fixture's text is too short to cut ({full!r})")
        return
    first = full.index(stop)
    m = ac.messages.create(stop_sequences=["\x01never", stop], **kw)
    check(m.stop_reason == "stop_sequence" and m.stop_sequence == stop,
          f"stop_sequences: stop_reason {m.stop_reason}, stop_sequence {m.stop_sequence!r}")
    check(m.content[0].text == full[:first], f"stop_sequences: text cut before it "
          f"({m.content[0].text!r} vs {full[:first]!r})")
    with ac.messages.stream(stop_sequences=[stop], **kw) as st:
        for _ in st:
            pass
        final = st.get_final_message()
    check(final.stop_reason == "stop_sequence" and final.stop_sequence == stop and
          final.content[0].text == full[:first],
          f"streamed stop_sequences: {final.stop_reason} {final.stop_sequence!r}")
    m = ac.messages.create(stop_sequences=["\x01never"], **kw)
    check(m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None,
          f"stop_sequences not met: {m.stop_reason} {m.stop_sequence!r}")


def test_messages(base):
    ac = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)
    m = ac.messages.create(model=MODEL, max_tokens=16, extra_body={"temperature": 0, "top_k": 1}, system="Be brief.",
                           messages=[{"role": "user", "content": "Say hi."}])
    check(m.type == "message" and m.role == "assistant" and m.content and
          m.content[0].type == "text", "messages: a text block")
    check(m.stop_reason in ("end_turn", "max_tokens") and m.usage.output_tokens <= 16 and
          m.usage.input_tokens > 0, f"messages: stop_reason {m.stop_reason}, usage")
    kinds, text = [], ""
    with ac.messages.stream(model=MODEL, max_tokens=16, extra_body={"temperature": 0, "top_k": 1}, system="Be brief.",
                            messages=[{"role": "user", "content": "Say hi."}]) as st:
        for ev in st:
            kinds.append(ev.type)
        final = st.get_final_message()
    check(kinds[0] == "message_start" and "content_block_start" in kinds and
          "content_block_delta" in kinds and kinds[-1] == "message_stop",
          f"messages stream events: {sorted(set(kinds))}")
    check(final.content[0].type == "text" and final.content[0].text == m.content[0].text,
          "streamed message equals the blocking one")
    u0, u1 = m.usage, final.usage
    check((u1.cache_read_input_tokens or 0) >= 16 and
          u1.input_tokens + u1.cache_read_input_tokens == u0.input_tokens + (u0.cache_read_input_tokens or 0),
          f"the resent prompt's KV blocks came from the prefix cache (usage {u1})")
    test_stop_sequences(ac)
    tool = {"name": "get_weather", "description": "Current weather of a city.",
            "input_schema": WEATHER["function"]["parameters"]}
    for stream in (False, True):
        kw = dict(model=MODEL, max_tokens=200, extra_body={"temperature": 0}, tools=[tool],
                  tool_choice={"type": "any"},
                  messages=[{"role": "user", "content": "Weather in Paris?"}])
        if stream:
            with ac.messages.stream(**kw) as st:
                for _ in st:
                    pass
                m = st.get_final_message()
        else:
            m = ac.messages.create(**kw)
        uses = [b for b in m.content if b.type == "tool_use"]
        check(m.stop_reason == "tool_use" and uses and uses[0].name == "get_weather" and
              isinstance(uses[0].input.get("city"), str) and uses[0].id.startswith("toolu_"),
              f"messages tool_use (stream={stream}): {m.content}")
    # tool_result round trip
    m = ac.messages.create(model=MODEL, max_tokens=40, extra_body={"temperature": 0}, tools=[tool], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "{\"temperature_celsius\": 37, \"sky\": \"clear\"}"}]}])
    check(m.content and m.content[0].type == "text", "messages: tool_result accepted")
    if REAL:
        check("37" in m.content[0].text, f"answer from the tool_result: {m.content[0].text!r}")
    n = ac.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "Say hi."}])
    check(n.input_tokens > 0, f"count_tokens: {n.input_tokens}")


def test_responses(client):
    tool = {"type": "function", "name": "get_weather", "description": "Current weather of a city.",
            "parameters": WEATHER["function"]["parameters"]}
    r = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[tool],
                                tool_choice="required", max_output_tokens=200, temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    check(r.status == "completed" and calls and calls[0].name == "get_weather" and
          isinstance(json.loads(calls[0].arguments).get("city"), str) and
          calls[0].call_id.startswith("call_"), f"responses function_call: {r.output}")
    r2 = client.responses.create(model=MODEL, max_output_tokens=30, temperature=0, tools=[tool],
                                 input=[{"role": "user", "content": "Weather in Paris?"},
                                        {"type": "function_call", "call_id": "call_1",
                                         "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                                        {"type": "function_call_output", "call_id": "call_1",
                                         "output": "37 degrees"}])
    check(r2.output and r2.output_text is not None, "responses: function_call_output accepted")
    types, done = [], None
    for ev in client.responses.create(model=MODEL, input="Weather in Paris?", tools=[tool],
                                      tool_choice="required", max_output_tokens=200,
                                      temperature=0, stream=True):
        types.append(ev.type)
        if ev.type == "response.completed":
            done = ev.response
    check(types[0] == "response.created" and types[-1] == "response.completed" and
          "response.function_call_arguments.done" in types, f"responses stream: {types}")
    check(done is not None and any(o.type == "function_call" for o in done.output),
          "streamed response ends with the call")
    text = ""
    for ev in client.responses.create(model=MODEL, input="Say hi.", max_output_tokens=8,
                                      temperature=0, stream=True):
        if ev.type == "response.output_text.delta":
            text += ev.delta
    check(len(text) > 0, "responses stream: output_text deltas")


def test_bad_input(base):
    msgs = [{"role": "user", "content": "hi"}]
    bad_chat = [
        {"messages": msgs, "tools": "nope"},
        {"messages": msgs, "tools": [{"type": "function", "function": {"name": 3}}]},
        {"messages": msgs, "tools": [WEATHER], "tool_choice": "sometimes"},
        {"messages": msgs, "tool_choice": "required"},
        {"messages": msgs, "tools": [WEATHER], "tool_choice": {"type": "function",
                                                                "function": {"name": "nope"}}},
        {"messages": msgs, "response_format": {"type": "xml"}},
        {"messages": msgs, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "pattern": "^a"}}}},
        {"messages": msgs, "parallel_tool_calls": "yes"},
        {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": 1}]}]},
    ]
    for body in bad_chat:
        st, j = post(base, "/v1/chat/completions", dict(body, max_tokens=4))
        check(st == 400 and j.get("error", {}).get("type") == "invalid_request_error",
              f"chat 400 for {json.dumps(body)[:80]}: {st} {j}")
    st, j = post(base, "/v1/chat/completions", dict(bad_chat[6], max_tokens=4))
    check("pattern" in j.get("error", {}).get("message", ""), "the unsupported keyword is named")
    for body in [{"messages": msgs}, {"max_tokens": 4, "messages": [{"role": "system",
                                                                     "content": "x"}]},
                 {"max_tokens": 4, "messages": msgs, "tools": [{"name": 1}]},
                 {"max_tokens": 4, "messages": msgs, "tool_choice": {"type": "maybe"}},
                 {"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "x"}]}]}]:
        st, j = post(base, "/v1/messages", body)
        check(st == 400 and j.get("type") == "error" and
              j.get("error", {}).get("type") == "invalid_request_error",
              f"messages 400 (Anthropic shape) for {json.dumps(body)[:70]}: {st} {j}")
    st, j = post(base, "/v1/messages/count_tokens", {"messages": 5})
    check(st == 400 and j.get("type") == "error", "count_tokens 400")
    for body in [{"input": 5}, {"input": []}, {"input": "x", "tools": [{"type": "web_search"}]},
                 {"input": "x", "previous_response_id": "resp_1"},
                 {"input": [{"type": "mystery"}]},
                 {"input": "x", "text": {"format": {"type": "yaml"}}}]:
        st, j = post(base, "/v1/responses", body)
        check(st == 400 and "error" in j, f"responses 400 for {json.dumps(body)[:70]}: {st}")
    with urllib.request.urlopen(base + "/health", timeout=10) as r:
        check(r.status == 200, "server still healthy after bad input")


def test_created_and_finish(client):
    r = client.chat.completions.create(model=MODEL, max_tokens=2, temperature=0,
                                       messages=[{"role": "user", "content": "hi"}])
    check(abs(r.created - time.time()) < 600, f"created is Unix time ({r.created})")
    check(r.choices[0].finish_reason in ("stop", "length"), "finish_reason is OpenAI's")


def main():
    global MODEL, REAL
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--real", action="store_true")
    a = ap.parse_args()
    REAL = a.real
    t0 = time.time()
    proc, base = start_server(a.ft, a.model, ["--ctx-size", "2048", "--served-model-name", "m"],
                              "test_agent_apis", timeout=120)
    client = OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=300)
    try:
        groups = [("forced tool calls", lambda: test_forced_tool_call(client)),
                  ("tool result round trip, parallel calls", lambda: test_round_trip_and_parallel(client)),
                  ("structured output", lambda: test_structured_output(client)),
                  ("anthropic messages", lambda: test_messages(base)),
                  ("responses", lambda: test_responses(client)),
                  ("bad input", lambda: test_bad_input(base)),
                  ("created, finish_reason", lambda: test_created_and_finish(client))]
        if REAL:
            groups = groups[:5]
        run_groups(groups)
    finally:
        rc = stop_server(proc)
        check(rc == 0, f"clean exit on SIGTERM ({rc})")
    finish("test_agent_apis", t0)


if __name__ == "__main__":
    main()
