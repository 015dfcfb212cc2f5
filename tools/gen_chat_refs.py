#!/usr/bin/env python3
"""gen_chat_refs.py - reference renderings for tests/test_chat.c.

Renders a fixed set of conversations with the *real* chat template strings through
transformers' own chat-template renderer (transformers.utils.chat_template_utils, the code that
tokenizer.apply_chat_template(..., tokenize=False) runs: message normalisation, the sandboxed jinja2
environment with trim_blocks/lstrip_blocks, tojson, raise_exception, strftime_now) and writes one
JSON file per family to tests/data/chat/<family>.json:

  {"family": NAME (the file's name up to "_"), "source": where the template came from, "template": the template string,
   "cases": [{"name", "messages": [{"role", "content", "reasoning"?, "name"?}],
              "options": {"add_generation_prompt", "enable_thinking" (-1 = not passed),
                          "bos_token", "eos_token", "date"},
              "expected": rendered string, or null with "error": the template's exception}]}

A message's "reasoning" is passed to the template as reasoning_content (transformers aliases it to
"thinking" for gpt-oss); a tool message's "name" is passed as name and tool_call_id. strftime_now is
pinned to options.date so the gpt-oss "Current date:" line is reproducible.

Usage: python3 tools/gen_chat_refs.py [--check]   (needs transformers + jinja2)
  --check  also renders every case of the families with a real tokenizer.json in ../shared/tokenizers
           through PreTrainedTokenizerFast.apply_chat_template(tokenize=False) and asserts the same text.
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


def tok_str(v):
    if isinstance(v, dict):  # {"__type": "AddedToken", "content": ...}
        return v.get("content")
    return v


def load_config(path):
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    return cfg.get("chat_template"), tok_str(cfg.get("bos_token")), tok_str(cfg.get("eos_token"))


def U(c):
    return {"role": "user", "content": c}


def A(c, reasoning=None):
    m = {"role": "assistant", "content": c}
    if reasoning is not None:
        m["reasoning"] = reasoning
    return m


def S(c):
    return {"role": "system", "content": c}


def T(c, name=None):
    m = {"role": "tool", "content": c}
    if name is not None:
        m["name"] = name
    return m


# Conversations shared by every family (a template that rejects one records the error).
CONVS = [
    ("user_only", [U("Hello!")]),
    ("system_user", [S("You are a helpful assistant."), U("What is 2+2?")]),
    ("multi_turn", [S("Be brief."), U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")]),
    ("multi_turn_no_system", [U("Hi"), A("Hello!"), U("How are you?"), A("Fine, thanks."), U("Bye")]),
    ("ends_with_assistant", [U("Say yes."), A("Yes.")]),
    ("whitespace", [S("  sys with spaces \n"), U("\n  padded user\t \n"), A("  padded reply \n\n"),
                    U("next\n")]),
    ("unicode", [U("héllo 世界 🌍 مرحبا"), A("こんにちは\u00a0!"), U("ok\u3000")]),
    ("tool", [S("Use tools."), U("Weather in Paris?"), A("Let me check."),
              T('{"temp": 21}', "call12345"), U("Thanks")]),
    ("two_tools", [U("Run both."), A("Running."), T("result one", "call00001"),
                   T("result two", "call00002"), A("Done.")]),
    ("reasoning_history", [U("What is 3*7?"), A("21.", reasoning="3*7 = 21."), U("And 4*5?")]),
    ("reasoning_last", [U("What is 3*7?"), A("21.", reasoning="\n3 times 7 is 21.\n")]),
    ("think_in_content", [U("Q1"), A("<think>\nreason here\n</think>\n\nAnswer one."), U("Q2"),
                          A("<think>more</think>Answer two.")]),
    ("empty_reasoning", [U("Q"), A("A", reasoning="")]),
    ("special_in_content", [U("<|im_end|> [INST] <|channel|> literal")]),
    ("mid_system", [U("a"), A("b"), S("late system"), U("c")]),
    ("tool_response_user", [U("real question"), A("x"), U("<tool_response>\nout\n</tool_response>")]),
]

FAMILIES = [
    ("qwen3", os.path.join(SHARED, "qwen3", "tokenizer_config.json"),
     "Qwen/Qwen3 tokenizer_config.json (../shared/tokenizers/qwen3)"),
    ("llama3", os.path.join(SHARED, "llama3", "tokenizer_config.json"),
     "Meta Llama-3 tokenizer_config.json (../shared/tokenizers/llama3)"),
    ("deepseek3", os.path.join(SHARED, "deepseek_v3", "tokenizer_config.json"),
     "DeepSeek-V3 tokenizer_config.json (../shared/tokenizers/deepseek_v3)"),
    ("llama2", os.path.join(OUT, "llama2", "tokenizer_config.json"),
     "meta-llama/Llama-2-7b-chat-hf chat_template (tests/data/chat/llama2, see tests/data/README.md)"),
    ("mistral", os.path.join(OUT, "mistral", "tokenizer_config.json"),
     "mistralai/Mistral-7B-Instruct-v0.3 chat_template (tests/data/chat/mistral, see tests/data/README.md)"),
    ("mistral_v01", os.path.join(OUT, "mistral_v01", "tokenizer_config.json"),
     "mistralai/Mixtral-8x7B-Instruct-v0.1 chat_template (tests/data/chat/mistral_v01, see tests/data/README.md)"),
    ("qwen2", os.path.join(OUT, "qwen2", "tokenizer_config.json"),
     "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF tokenizer.chat_template (tests/data/chat/qwen2, see tests/data/README.md)"),
    ("chatml", os.path.join(OUT, "chatml", "tokenizer_config.json"),
     "the generic ChatML template of the transformers chat-templating docs (tests/data/chat/chatml)"),
    ("harmony", os.path.join(OUT, "gpt_oss", "chat_template.jinja"),
     "openai/gpt-oss-20b chat_template.jinja (tests/data/chat/gpt_oss, see tests/data/README.md)"),
]


def to_template_messages(msgs):
    out = []
    for m in msgs:
        d = {"role": m["role"], "content": m["content"]}
        if "reasoning" in m:
            d["reasoning_content"] = m["reasoning"]
        if "name" in m:
            d["name"] = m["name"]
            d["tool_call_id"] = m["name"]
        out.append(d)
    return out


def render(template, msgs, opts):
    kwargs = {}
    if opts["bos_token"] is not None:
        kwargs["bos_token"] = opts["bos_token"]
    if opts["eos_token"] is not None:
        kwargs["eos_token"] = opts["eos_token"]
    if opts["enable_thinking"] != -1:
        kwargs["enable_thinking"] = bool(opts["enable_thinking"])
    conv = ctu._normalize_chat_messages(to_template_messages(msgs))
    rendered, _ = ctu.render_jinja_template(
        conversations=[conv], chat_template=template,
        add_generation_prompt=bool(opts["add_generation_prompt"]), **kwargs)
    return rendered[0]


def check_with_tokenizers():
    import lzma
    import tempfile
    from transformers import PreTrainedTokenizerFast
    for family, folder in [("qwen3", "qwen3"), ("llama3", "llama3"), ("deepseek3", "deepseek_v3"),
                           ("llama2", "llama2")]:
        base = os.path.join(SHARED, folder)
        tmp = tempfile.mkdtemp()
        with lzma.open(os.path.join(base, "tokenizer.json.xz")) as src, \
                open(os.path.join(tmp, "tokenizer.json"), "wb") as dst:
            dst.write(src.read())
        _, bos, eos = load_config(os.path.join(base, "tokenizer_config.json"))
        with open(os.path.join(OUT, family + ".json"), encoding="utf-8") as f:
            ref = json.load(f)
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(tmp, "tokenizer.json"),
                                      bos_token=bos, eos_token=eos)
        tok.chat_template = ref["template"]
        bad = 0
        for c in ref["cases"]:
            if c["expected"] is None:
                continue
            kw = {}
            if c["options"]["enable_thinking"] != -1:
                kw["enable_thinking"] = bool(c["options"]["enable_thinking"])
            out = tok.apply_chat_template(to_template_messages(c["messages"]), tokenize=False,
                                          add_generation_prompt=bool(c["options"]["add_generation_prompt"]),
                                          **kw)
            bad += out != c["expected"]
        print(f"{family}: apply_chat_template differs on {bad} cases", file=sys.stderr)
        if bad:
            sys.exit(1)


def main():
    for family, path, source in FAMILIES:
        if path.endswith(".jinja"):
            with open(path, encoding="utf-8") as f:
                template = f.read()
            bos, eos = "<|startoftext|>", "<|return|>"
        else:
            template, bos, eos = load_config(path)
        thinking_modes = [-1, 0, 1] if family == "qwen3" else [-1]
        cases = []
        for name, msgs in CONVS:
            for agp in (1, 0):
                for et in thinking_modes:
                    opts = {"add_generation_prompt": agp, "enable_thinking": et,
                            "bos_token": bos, "eos_token": eos, "date": DATE}
                    case = {"name": f"{name}/agp{agp}" + (f"/think{et}" if et != -1 else ""),
                            "messages": msgs, "options": opts}
                    try:
                        case["expected"] = render(template, msgs, opts)
                    except Exception as e:  # the template raised: the C renderer must fail too
                        case["expected"] = None
                        case["error"] = f"{type(e).__name__}: {e}"
                    cases.append(case)
        doc = {"family": family.split("_")[0], "source": source, "template": template, "cases": cases}
        out = os.path.join(OUT, family + ".json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")
        n_err = sum(1 for c in cases if c["expected"] is None)
        print(f"{out}: {len(cases)} cases ({n_err} expected errors)", file=sys.stderr)


if __name__ == "__main__":
    main()
    if "--check" in sys.argv[1:]:
        check_with_tokenizers()
