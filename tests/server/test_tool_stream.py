#!/usr/bin/env python3
"""test_tool_stream.py — streamed tool calls whose arguments arrive in pieces, as OpenAI streams
them: a call's first delta.tool_calls entry carries its index, id, type and name (and maybe the
start of its arguments), later ones only the index and the next piece of function.arguments.

For the JSON-argument families (Hermes/Qwen <tool_call>: the fixture's own Qwen3 template;
Llama 3.1 JSON and Mistral through --chat-template), on the random-weight fixture with the call
forced by the grammar (a named tool_choice, and "required"), greedy: the official openai client's
ChatCompletionStreamState accumulates the stream; its final arguments must equal the
non-streamed response's, parse as a JSON object, and at least one call must have come in more
than one piece; id and name come once per call. The Anthropic Messages stream (a tool_use
block's input_json_delta pieces) and the Responses stream (function_call_arguments.delta) send
the arguments in pieces the same way: the official anthropic client's accumulated message has
the blocking one's tool_use input, the openai client's accumulated Responses snapshot the
blocking function_call arguments (and .done says the same), in more than one piece. The XML,
DeepSeek and harmony families stream the same way (qwen3_coder, glm4, minimax: the name once
read, then a string parameter's value as it comes, any other parameter whole when it closes;
deepseek3: the name once read, then the fenced JSON object's bytes as they come; harmony: its
JSON body), with the same checks. The server must stay up.

Run by ctest (label server):
  test_tool_stream.py --ft build/ft --model tests/data/models/qwen3_moe [--family deepseek3 ...]
"""
import argparse
import json
import sys
import time

try:
    import anthropic
    from openai import OpenAI
    from openai.lib.streaming.chat import ChatCompletionStreamState
except ImportError:
    print("test_tool_stream: FAIL: openai or anthropic is missing (tools/setup.sh test installs "
          "them into build/venv)")
    sys.exit(1)

from harness import check, finish, run_groups, start_server, stop_server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 24},
        "days": {"type": "integer"},
        "units": {"type": "string", "enum": ["metric", "imperial"]}},
        "required": ["city", "days", "units"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 8}},
                   "required": ["tz"]}}}
ASK = [{"role": "user", "content": "Weather in Paris for three days, and the time there?"}]


def one(client, fam, choice, what, **extra):
    kw = dict(model="m", messages=ASK, tools=[WEATHER, TIME], tool_choice=choice,
              max_tokens=400, temperature=0, **extra)
    r = client.chat.completions.create(**kw)
    want = r.choices[0].message.tool_calls or []
    check(r.choices[0].finish_reason == "tool_calls" and want,
          f"{fam} {what}: a call, not streamed ({r.choices[0].finish_reason}, {len(want)})")
    state = ChatCompletionStreamState()
    pieces, named, ids, fin = {}, {}, {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        state.handle_chunk(chunk)
        if not chunk.choices:
            continue
        fin = chunk.choices[0].finish_reason or fin
        for tc in chunk.choices[0].delta.tool_calls or []:
            if tc.function and tc.function.arguments:
                pieces[tc.index] = pieces.get(tc.index, 0) + 1
            if tc.id or (tc.function and tc.function.name):
                named[tc.index] = named.get(tc.index, 0) + 1
                ids[tc.index] = tc.id
                check(tc.id and tc.type == "function" and tc.function.name,
                      f"{fam} {what}: call {tc.index}'s first delta has id, type and name")
    check(fin == "tool_calls", f"{fam} {what}: streamed finish_reason ({fin})")
    got = state.get_final_completion().choices[0].message.tool_calls or []
    check(len(got) == len(want), f"{fam} {what}: {len(got)} calls streamed, {len(want)} not")
    for i, (g, w) in enumerate(zip(got, want)):
        check(named.get(i) == 1, f"{fam} {what}: call {i} named once ({named.get(i)})")
        check(g.function.name == w.function.name and g.id and g.id == ids.get(i),
              f"{fam} {what}: call {i} name and id ({g.function.name} {g.id} / {w.function.name})")
        check(g.function.arguments == w.function.arguments,
              f"{fam} {what}: call {i} accumulated arguments equal the non-streamed "
              f"({g.function.arguments!r} / {w.function.arguments!r})")
        try:
            ok = isinstance(json.loads(g.function.arguments), dict)
        except ValueError:
            ok = False
        check(ok, f"{fam} {what}: call {i} arguments are a JSON object ({g.function.arguments!r})")
    split = max(pieces.values()) if pieces else 0
    check(split > 1, f"{fam} {what}: a call's arguments came in several pieces (most {split})")
    return split


def messages(base, fam, choice, what, pieces_wanted):
    """Anthropic: the streamed tool_use blocks equal the blocking ones, their input in pieces."""
    ac = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in (WEATHER, TIME)]
    kw = dict(model="m", max_tokens=400, tools=tools, tool_choice=choice,
              messages=ASK, extra_body={"temperature": 0})
    m = ac.messages.create(**kw)
    want = [(b.name, b.input) for b in m.content if b.type == "tool_use"]
    check(m.stop_reason == "tool_use" and want, f"{fam} messages {what}: tool_use ({m.content})")
    pieces, raw = {}, {}
    with ac.messages.stream(**kw) as st:
        for ev in st:
            if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
                pieces[ev.index] = pieces.get(ev.index, 0) + 1
                raw[ev.index] = raw.get(ev.index, "") + ev.delta.partial_json
        final = st.get_final_message()
    got = [(b.name, b.input) for b in final.content if b.type == "tool_use"]
    check(final.stop_reason == "tool_use" and got == want,
          f"{fam} messages {what}: streamed tool_use equals the blocking one ({got} / {want})")
    check(all(json.loads(v) in [w[1] for w in want] for v in raw.values()),
          f"{fam} messages {what}: the joined partial_json pieces parse to the input ({raw})")
    split = max(pieces.values()) if pieces else 0
    check(split > 1 if pieces_wanted else split >= 1,
          f"{fam} messages {what}: input_json_delta pieces per block (most {split})")
    return split


def responses(client, fam, choice, what, pieces_wanted):
    """Responses: the accumulated function_call arguments equal the blocking ones."""
    tools = [{"type": "function", "name": t["function"]["name"],
              "description": t["function"]["description"],
              "parameters": t["function"]["parameters"]} for t in (WEATHER, TIME)]
    kw = dict(model="m", input=ASK[0]["content"], tools=tools, tool_choice=choice,
              max_output_tokens=400, temperature=0, parallel_tool_calls=False)
    r = client.responses.create(**kw)
    want = [(o.name, o.arguments) for o in r.output if o.type == "function_call"]
    check(r.status == "completed" and want, f"{fam} responses {what}: a function_call ({r.output})")
    snap, done, pieces = {}, {}, {}
    with client.responses.stream(**kw) as st:
        for ev in st:
            if ev.type == "response.function_call_arguments.delta":
                snap[ev.output_index] = ev.snapshot  # the client's accumulated arguments
                pieces[ev.output_index] = pieces.get(ev.output_index, 0) + 1
            elif ev.type == "response.function_call_arguments.done":
                done[ev.output_index] = ev.arguments
        final = st.get_final_response()
    got = [(o.name, o.arguments) for o in final.output if o.type == "function_call"]
    check(got == want and [a for _, a in want] == list(snap.values()) == list(done.values()),
          f"{fam} responses {what}: accumulated arguments equal the blocking ones "
          f"({snap} / {done} / {want})")
    split = max(pieces.values()) if pieces else 0
    check(split > 1 if pieces_wanted else split >= 1,
          f"{fam} responses {what}: argument deltas per call (most {split})")
    return split


def family(fam, base):
    def run(client):
        n = one(client, fam, {"type": "function", "function": {"name": "get_weather"}}, "named")
        # one call (random weights would go on listing calls to the token limit)
        one(client, fam, "required", "required", parallel_tool_calls=False)
        a = messages(base, fam, {"type": "tool", "name": "get_weather"}, "named", True)
        messages(base, fam, {"type": "any", "disable_parallel_tool_use": True}, "required", True)
        r = responses(client, fam, {"type": "function", "name": "get_weather"}, "named", True)
        responses(client, fam, "required", "required", True)
        print(f"  {fam}: named call's arguments in {n} chat / {a} messages / {r} responses "
              f"pieces", flush=True)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ft", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--family", action="append",
                    help="only these --chat-template families (hermes: the model's own)")
    a = ap.parse_args()
    t0 = time.time()
    for fam in (None, "llama3_1", "mistral", "qwen3_coder", "harmony", "glm4",
                "minimax", "deepseek3"):
        if a.family and (fam or "hermes") not in a.family:
            continue
        args = ["--ctx-size", "2048", "--served-model-name", "m"]
        if fam:
            args += ["--chat-template", fam]
        name = fam or "hermes (qwen3)"
        proc, base = start_server(a.ft, a.model, args, "test_tool_stream", timeout=120)
        client = OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=300)
        try:
            run_groups([(name, lambda: family(name, base)(client))])
            r = client.chat.completions.create(model="m", messages=ASK, max_tokens=2)
            check(r.choices[0].finish_reason in ("stop", "length"), f"{name}: still up")
        finally:
            rc = stop_server(proc)
            check(rc == 0, f"{name}: clean exit on SIGTERM ({rc})")
    finish("test_tool_stream", t0)


if __name__ == "__main__":
    main()
