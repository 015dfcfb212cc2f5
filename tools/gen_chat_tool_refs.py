#!/usr/bin/env python3
"""gen_chat_tool_refs.py - reference renderings with tools for tests/test_chat.c.

Like tools/gen_chat_refs.py, but the conversations carry OpenAI-style `tools` and assistant
`tool_calls` and `tool` results. Renders them with transformers' own chat-template code
(chat_template_utils.render_jinja_template, what apply_chat_template(..., tools=...) runs) on the
real template strings of the families whose renderers write tools, and writes
tests/data/chat/tools_<family>.json in gen_chat_refs.py's format plus options.tools and
messages[].tool_calls; `expected: null` + `error` where the real template raises.

Tool-call arguments: the templates that write them with `tojson` (Qwen, Mistral, gpt-oss) get
objects, as vLLM passes them after parsing the request's JSON strings; the templates that
concatenate them as text (DeepSeek-V3) get the JSON string itself (an object there is a
TypeError in the template). tests/test_chat.c passes an object as its compact JSON text and a
string as is, which is what the server hands the renderer (the request's arguments string).

A message's "reasoning" is passed as reasoning_content and, for gpt-oss, as thinking; a tool
message's "name" is passed as tool_call_id. Tool call ids have 9 characters (Mistral requires it).
Where a template raises on content null (`"x" in None`: Qwen3, gpt-oss), the case is rendered
again with "" and marked null_as_empty: the C renderers treat null content as "" throughout.
strftime_now is pinned to options.date (gpt-oss "Current date:").

Usage: /tmp/h4-venv/bin/python tools/gen_chat_tool_refs.py [FAMILY...]   (needs transformers +
jinja2; FAMILY names limit the run to those outputs, e.g. kimi_k2)
"""
import datetime as _dt
import json
import os
import sys

from transformers.utils import chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "chat")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "tokenizers")
DATE = "2025-08-05"


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        y, m, d = (int(x) for x in DATE.split("-"))
        return cls(y, m, d, 12, 0, 0)


ctu.datetime = _FixedDatetime  # strftime_now() reads the module's datetime at call time

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city (°C, ünïcode).",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "days": {"type": "integer", "minimum": 1},
        "scale": {"type": "number", "default": 0.5},
        "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Local time.",
                                         "parameters": {"type": "object", "properties": {}}}}
# every branch of gpt-oss' TypeScript rendering (and more JSON for the others)
RICH = {"type": "function", "function": {
    "name": "search", "description": "Search the docs.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "What to look for"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ids": {"type": "array", "items": {"type": "integer"}, "nullable": True},
        "flags": {"type": "array", "items": {"type": "boolean"}},
        "scores": {"type": "array", "items": {"type": "number"}},
        "any_list": {"type": "array"},
        "points": {"type": "array", "items": {"type": "object", "properties": {
            "x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x"]}},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "filter": {"type": "object", "properties": {
            "lang": {"type": "string", "enum": ["en", "fr"]},
            "exact": {"type": "boolean"},
            "inner": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "required": ["lang"]},
        "opts": {"type": "object"},
        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast",
                 "description": "Speed"},
        "limit": {"type": "integer", "default": 10},
        "note": {"type": "string", "nullable": True, "default": None},
        "either": {"type": ["string", "number"]},
        "single": {"type": ["string"]},
        "choice": {"oneOf": [{"type": "string", "description": "a name"},
                             {"type": "integer", "default": 3}]},
        "objs": {"oneOf": [{"type": "object"}, {"type": "string"}], "default": "x"},
        "anything": {"description": "No type"}},
        "required": ["query", "mode"]}}}
NOPARAMS = {"type": "function", "function": {"name": "ping", "description": "Ping."}}
NODESC = {"type": "function", "function": {"name": "nodesc", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}}}}}
INTDEF = {"type": "function", "function": {"name": "intdef", "description": "d", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "enum": [1, 2], "default": 1}}}}}


def call(i, name, args):
    return {"id": f"call{i:05d}", "type": "function",
            "function": {"name": name, "arguments": args}}


U = lambda c: {"role": "user", "content": c}
S = lambda c: {"role": "system", "content": c}
T = lambda c, i: {"role": "tool", "content": c, "name": f"call{i:05d}"}


def A(c, calls=None, reasoning=None):
    m = {"role": "assistant", "content": c}
    if calls:
        m["tool_calls"] = calls
    if reasoning is not None:
        m["reasoning"] = reasoning
    return m


CONVS = [
    ("tools_user", [U("Weather in Paris?")], [WEATHER]),
    ("tools_system", [S("Be brief."), U("Weather in Paris?")], [WEATHER, TIME]),
    ("call_roundtrip", [U("Weather in Paris?"), A("", [call(1, "get_weather", {"city": "Paris"})]),
                        T('{"temp": 21.5}', 1)], [WEATHER]),
    ("call_null_content", [U("Weather in Paris?"),
                           A(None, [call(1, "get_weather", {"city": "Paris"})]),
                           T('{"temp": 21.5}', 1)], [WEATHER]),
    ("call_with_content", [S("sys"), U("Weather?"),
                           A("Let me check.", [call(1, "get_weather",
                                                    {"city": "Zürich", "days": 2, "scale": 1.0,
                                                     "nested": {"a": [1, 2.5, None, True]}})]),
                           T("sunny", 1), A("It is sunny."), U("Thanks")], [WEATHER]),
    ("call_then_answer", [U("Weather?"), A(None, [call(1, "get_weather", {"city": "Oslo"})]),
                          T("rain", 1), A("Rain in Oslo."), U("And Rome?")], [WEATHER]),
    ("parallel_calls", [U("Paris and time?"),
                        A("", [call(1, "get_weather", {"city": "Paris"}), call(2, "get_time", {})]),
                        T("20", 1), T("12:00", 2)], [WEATHER, TIME]),
    ("parallel_null", [U("Paris and time?"),
                       A(None, [call(1, "get_weather", {"city": "Paris"}),
                                call(2, "get_time", {})]),
                       T("20", 1), T("12:00", 2)], [WEATHER, TIME]),
    ("two_rounds", [S("Use tools."), U("Paris?"),
                    A(None, [call(1, "get_weather", {"city": "Paris"})]), T("20", 1),
                    A(None, [call(2, "get_time", {})]), T("12:00", 2)], [WEATHER, TIME]),
    ("calls_no_tools", [U("q"), A("", [call(1, "get_time", {})]), T("x", 1)], []),
    ("reasoning_call", [U("Weather?"), A("", [call(1, "get_weather", {"city": "Nice"})],
                                         reasoning="Need the tool."), T("hot", 1)], [WEATHER]),
    ("rich_schema", [S("Search well."), U("Find docs")], [RICH, NOPARAMS]),
    ("same_user_twice", [U("hi"), A("hello"), U("hi")], [TIME]),
    ("tool_result_json", [U("t?"), A(None, [call(3, "get_time", {})]),
                          T('{"time": "12:00", "tz": "CET"}', 3), A("Noon.")], [TIME]),
    ("tool_no_description", [U("x")], [NODESC]),
    ("enum_default_not_string", [U("x")], [INTDEF]),
    ("bad_call_id", [U("t?"), A(None, [{"id": "c1", "type": "function",
                                        "function": {"name": "get_time", "arguments": {}}}]),
                     {"role": "tool", "content": "x", "name": "c1"}], [TIME]),
]

# (output name, template file, bos, eos, arguments as text?)
# The templates under tests/data/chat/{llama3_1,llama3_2,qwen3_coder,glm4_6,glm4_7,minimax_m2} are
# the models' own chat templates as llama.cpp stores them in models/templates/ (fetched from the
# Hugging Face repos by its scripts/get_chat_template.py; taken here from the copy vendored in the
# llama-cpp-python 0.3.36 sdist on PyPI): meta-llama/Llama-3.1-8B-Instruct (the same text as
# Llama-3.3-70B-Instruct), meta-llama/Llama-3.2-3B-Instruct, Qwen3-Coder.jinja
# (Qwen/Qwen3-Coder-30B-A3B-Instruct), GLM-4.6.jinja (zai-org/GLM-4.6), GLM-4.7-Flash.jinja
# (zai-org/GLM-4.7-Flash), MiniMax-M2.jinja (MiniMaxAI/MiniMax-M2).
# tests/data/chat/kimi_k2/chat_template.jinja is moonshotai/Kimi-K2-Instruct's chat_template.jinja
# (the tool-call revision: tool_declare turn, "## Return of" tool turns), taken from the copy of
# that checkpoint's tokenizer files in alibaba/rtp-llm
# (rtp_llm/test/model_test/fake_test/testdata/kimi_k2/tokenizer/chat_template.jinja, 1881 bytes);
# the same text as the Kimi-K2 template in llama.cpp's Kimi-K2 json_schema regression test and as
# moonshotai/Kimi-K2-Instruct-0905's (whose last lines also close the final turn only when it is
# followed by one). Its tool-call arguments are written as text when they are a string, which is
# what a client sends: rendered here as text (arguments as text: True).
FAMILIES = [
    ("qwen2", os.path.join(OUT, "qwen2", "tokenizer_config.json"), None, None, False),
    ("qwen3", os.path.join(SHARED, "qwen3", "tokenizer_config.json"), None, None, False),
    ("mistral", os.path.join(OUT, "mistral", "tokenizer_config.json"), "<s>", "</s>", False),
    ("deepseek3", os.path.join(SHARED, "deepseek_v3", "tokenizer_config.json"),
     "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", True),
    ("harmony", os.path.join(OUT, "gpt_oss", "chat_template.jinja"), "<|startoftext|>",
     "<|return|>", False),
    ("llama3_1", os.path.join(OUT, "llama3_1", "chat_template.jinja"), "<|begin_of_text|>",
     "<|eot_id|>", False),
    ("llama3_2", os.path.join(OUT, "llama3_2", "chat_template.jinja"), "<|begin_of_text|>",
     "<|eot_id|>", False),
    ("qwen3_coder", os.path.join(OUT, "qwen3_coder", "chat_template.jinja"), None, None, False),
    ("glm4_6", os.path.join(OUT, "glm4_6", "chat_template.jinja"), None, None, False),
    ("glm4_7", os.path.join(OUT, "glm4_7", "chat_template.jinja"), None, None, False),
    ("minimax_m2", os.path.join(OUT, "minimax_m2", "chat_template.jinja"), None, None, False),
    ("kimi_k2", os.path.join(OUT, "kimi_k2", "chat_template.jinja"), "[BOS]", "[EOS]", True),
]
# Templates that print a null content as the text "None" (GLM's and MiniMax's visible_text
# macro writes `{{ content }}`): rendered with "" instead, marked null_as_empty, as the C
# renderers treat null as "" throughout.
NONE_AS_TEXT = {"glm4_6", "glm4_7", "minimax_m2", "kimi_k2"}  # Kimi: a tool turn's {{ content }}
# Extra conversations for the families with a thinking switch or a single-call rule.
EXTRA = {
    "glm4_6": [("no_think", [U("hi")], [TIME], 0), ("no_think_tools", [U("Paris?")], [WEATHER], 0),
               ("think_on", [U("hi")], [], 1)],
    "glm4_7": [("no_think", [U("hi")], [TIME], 0), ("think_on", [U("hi")], [], 1),
               ("think_history", [U("a"), A("b", reasoning="r1"), U("c"),
                                  A("d", [call(4, "get_time", {})], reasoning="r2"),
                                  T("x", 4)], [TIME], -1)],
    "minimax_m2": [("think_history", [U("a"), A("b", reasoning="r1"), U("c"),
                                      A("<think>r2</think>d", [call(4, "get_time", {})]),
                                      T("x", 4)], [TIME], -1),
                   ("calls_mixed_args", [U("w"), A("", [call(5, "get_weather", {
                       "city": "Bern", "days": 3, "nested": {"k": [1, "ü"]}, "flag": False})]),
                       T("ok", 5)], [WEATHER], -1)],
    "qwen3_coder": [("calls_mixed_args", [U("w"), A("  Checking. ", [call(5, "get_weather", {
        "city": "Bern", "days": 3, "scale": 1.5, "nested": {"k": [1, "ü"]}, "flag": False,
        "none": None})]), T("ok", 5)], [WEATHER], -1),
                    ("tool_first", [T("orphan", 1), U("q")], [TIME], -1)],
    "llama3_2": [],
    # Kimi's own call ids (functions.NAME:IDX), named turns, a call with text before it
    "kimi_k2": [("kimi_ids", [S("Use tools."), U("Paris and time?"),
                              A("Checking both.", [
                                  {"id": "functions.get_weather:0", "type": "function",
                                   "function": {"name": "get_weather",
                                                "arguments": {"city": "Paris", "days": 2}}},
                                  {"id": "functions.get_time:1", "type": "function",
                                   "function": {"name": "get_time", "arguments": {}}}]),
                              {"role": "tool", "content": '{"temp": 20}',
                               "name": "functions.get_weather:0"},
                              {"role": "tool", "content": "12:00\nCET",
                               "name": "functions.get_time:1"},
                              A("20 °C, noon."), U("Thanks")], [WEATHER, TIME], -1),
                ("named_turns", [dict(S("sys"), name="policy"), dict(U("hi"), name="alice"),
                                 dict(A("hello"), name="kimi"), U("bye")], [], -1),
                ("tool_first", [T("orphan", 1), U("q")], [TIME], -1)],
    "llama3_1": [("calls_mixed_args", [U("w"), A(None, [call(5, "get_weather", {
        "city": "Bern", "days": 3, "nested": {"k": [1, "ü"]}})]), T('{"t": 1}', 5)],
                  [WEATHER], -1),
                 ("no_user_after_system", [S("sys")], [TIME], -1)],
}


def load_template(path):
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jinja"):
            return f.read()
        return json.load(f)["chat_template"]


def to_template(msgs, family, args_text):
    out = []
    for m in msgs:
        d = {"role": m["role"], "content": m["content"]}
        if "reasoning" in m:
            d["reasoning_content"] = m["reasoning"]
            if family == "harmony":
                d["thinking"] = m["reasoning"]
        if "name" in m:
            d["tool_call_id"] = m["name"]
            if family == "kimi_k2" and m["role"] != "tool":  # its header writes a message's name
                d["name"] = m["name"]
        if "tool_calls" in m:
            d["tool_calls"] = [dict(c, function=dict(c["function"], arguments=json.dumps(
                c["function"]["arguments"], ensure_ascii=False)) if args_text else c["function"])
                for c in m["tool_calls"]]
        out.append(d)
    return out


def main():
    only = set(sys.argv[1:])  # family names: regenerate just those
    for family, path, bos, eos, args_text in FAMILIES:
        if only and family not in only:
            continue
        template = load_template(path)
        cases = []
        convs = [(n, m, t, -1) for n, m, t in CONVS] + EXTRA.get(family, [])
        if family in EXTRA:  # the new families: plain chats too (no tools at all)
            convs += [("plain", [S(" Be brief. "), U(" hi "), A(" hello "), U("bye")], [], -1),
                      ("plain_user", [U("hi")], [], -1),
                      ("plain_think", [U("a"), A("<think>\nr\n</think>\n\nb"), U("c")], [], -1)]
        for name, msgs, tools, think in convs:
            for agp in (1, 0):
                opts = {"add_generation_prompt": agp, "enable_thinking": think, "bos_token": bos,
                        "eos_token": eos, "date": DATE, "tools": tools}
                kw = {}
                if think >= 0:
                    kw["enable_thinking"] = bool(think)
                if bos is not None:
                    kw["bos_token"] = bos
                if eos is not None:
                    kw["eos_token"] = eos
                tmsgs = to_template(msgs, family, args_text)
                case = {"name": f"{name}/agp{agp}", "messages": msgs, "options": opts}
                if family in NONE_AS_TEXT and any(m["content"] is None for m in tmsgs):
                    tmsgs = [dict(m, content="") if m["content"] is None else m for m in tmsgs]
                    case["null_as_empty"] = True
                if args_text:  # what the test passes the renderer: the text itself
                    case["messages"] = [dict(m, tool_calls=t["tool_calls"]) if "tool_calls" in m
                                        else m for m, t in zip(msgs, tmsgs)]
                try:
                    try:
                        rendered, _ = ctu.render_jinja_template(
                            conversations=[tmsgs], tools=tools or None, chat_template=template,
                            add_generation_prompt=bool(agp), **kw)
                        case["expected"] = rendered[0]
                    except TypeError as e:
                        if "NoneType" not in str(e):
                            raise
                            # content null (what OpenAI clients send with tool_calls) where the
                        # template tests `"x" in content`: the renderer treats it as ""
                        tmsgs = [dict(m, content="") if m["content"] is None else m
                                 for m in tmsgs]
                        rendered, _ = ctu.render_jinja_template(
                            conversations=[tmsgs], tools=tools or None, chat_template=template,
                            add_generation_prompt=bool(agp), **kw)
                        case["expected"] = rendered[0]
                        case["null_as_empty"] = True
                except Exception as e:  # the template raised: the C renderer must fail too
                    case["expected"] = None
                    case["error"] = f"{type(e).__name__}: {e}"
                cases.append(case)
        out = os.path.join(OUT, f"tools_{family}.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"family": family, "source": os.path.relpath(path, ROOT),
                       "template": template, "cases": cases}, f, indent=1, ensure_ascii=False)
            f.write("\n")
        n_err = sum(1 for c in cases if c["expected"] is None)
        print(f"{out}: {len(cases)} cases ({n_err} expected errors)")


if __name__ == "__main__":
    main()
