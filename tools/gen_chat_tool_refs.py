#!/usr/bin/env python3
"""gen_chat_tool_refs.py - reference renderings with tools for tests/test_chat.c.

Like tools/gen_chat_refs.py, but the conversations carry OpenAI-style `tools` and assistant
`tool_calls` (arguments as objects, as vLLM passes them to the template after parsing the
request's JSON strings) and `tool` results. Renders them with transformers' own chat-template
code (chat_template_utils.render_jinja_template, what apply_chat_template(..., tools=...) runs)
on the real template strings of the families whose renderers write tools, and writes
tests/data/chat/tools_<family>.json in gen_chat_refs.py's format plus options.tools and
messages[].tool_calls.

Usage: build-agent/venv/bin/python tools/gen_chat_tool_refs.py   (needs transformers + jinja2)
"""
import json
import os

from transformers.utils import chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "chat")

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


def call(i, name, args):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


U = lambda c: {"role": "user", "content": c}
S = lambda c: {"role": "system", "content": c}
A = lambda c, calls=None: dict({"role": "assistant", "content": c},
                               **({"tool_calls": calls} if calls else {}))
T = lambda c, i: {"role": "tool", "content": c, "tool_call_id": f"call_{i}", "name": f"call_{i}"}

CONVS = [
    ("tools_user", [U("Weather in Paris?")], [WEATHER]),
    ("tools_system", [S("Be brief."), U("Weather in Paris?")], [WEATHER, TIME]),
    ("call_roundtrip", [U("Weather in Paris?"), A("", [call(1, "get_weather", {"city": "Paris"})]),
                        T('{"temp": 21.5}', 1)], [WEATHER]),
    ("call_with_content", [S("sys"), U("Weather?"),
                           A("Let me check.", [call(1, "get_weather",
                                                    {"city": "Zürich", "days": 2, "scale": 1.0,
                                                     "nested": {"a": [1, 2.5, None, True]}})]),
                           T("sunny", 1), A("It is sunny."), U("Thanks")], [WEATHER]),
    ("parallel_calls", [U("Paris and time?"),
                        A("", [call(1, "get_weather", {"city": "Paris"}), call(2, "get_time", {})]),
                        T("20", 1), T("12:00", 2)], [WEATHER, TIME]),
    ("calls_no_tools", [U("q"), A("", [call(1, "get_time", {})]), T("x", 1)], []),
]

FAMILIES = [("qwen2", os.path.join(OUT, "qwen2", "tokenizer_config.json")),
            ("qwen3", os.path.join(ROOT, "..", "shared", "tokenizers", "qwen3",
                                   "tokenizer_config.json"))]


def main():
    for family, path in FAMILIES:
        with open(path, encoding="utf-8") as f:
            template = json.load(f)["chat_template"]
        cases = []
        for name, msgs, tools in CONVS:
            for agp in (1, 0):
                opts = {"add_generation_prompt": agp, "enable_thinking": -1, "bos_token": None,
                        "eos_token": None, "date": None, "tools": tools}
                rendered, _ = ctu.render_jinja_template(
                    conversations=[msgs], tools=tools or None, chat_template=template,
                    add_generation_prompt=bool(agp))
                cases.append({"name": f"{name}/agp{agp}", "messages": msgs, "options": opts,
                              "expected": rendered[0]})
        out = os.path.join(OUT, f"tools_{family}.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"family": family, "source": path.replace(ROOT + "/", ""),
                       "template": template, "cases": cases}, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"{out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
