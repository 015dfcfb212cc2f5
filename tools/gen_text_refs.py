#!/usr/bin/env python3
"""Text-level references for the qwen3_moe fixture (which has a tiny real tokenizer, see
gen_fixture_tokenizer.py): transformers' greedy generations from a raw prompt and from chat
conversations rendered with the fixture's chat template, decoded with skip_special_tokens.
Written to tests/data/models/qwen3_moe/text_reference.json; test_model_text.c compares
`ft run` and `ft chat` output with them."""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
D = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "data", "models", "qwen3_moe")
tok = AutoTokenizer.from_pretrained(D)
model = AutoModelForCausalLM.from_pretrained(D, dtype=torch.float32, attn_implementation="eager").eval()
model.config._experts_implementation = "eager"
EOS = [2, 0]


def greedy(ids, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                             eos_token_id=EOS, pad_token_id=0)
    gen = out[0, len(ids):].tolist()
    return tok.decode(gen, skip_special_tokens=True), gen


cases = []
for prompt, n in [("Once upon a time", 12), ("The quick brown fox", 16)]:
    ids = tok(prompt, add_special_tokens=True)["input_ids"]
    text, gen = greedy(ids, n)
    cases.append(dict(kind="raw", prompt=prompt, n=n, prompt_ids=ids, ids=gen, text=text))
for msgs, think, n in [([{"role": "user", "content": "Hello"}], True, 10),
                       ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How are you today?"}], False, 10)]:
    rendered = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=think)
    ids = tok(rendered, add_special_tokens=False)["input_ids"]
    text, gen = greedy(ids, n)
    cases.append(dict(kind="chat", messages=msgs, enable_thinking=think, n=n, rendered=rendered,
                      prompt_ids=ids, ids=gen, text=text))
# a second chat turn, with the first answer in the history (what `ft chat` does)
first = cases[2]
msgs = first["messages"] + [{"role": "assistant", "content": first["text"]}, {"role": "user", "content": "Tell me more"}]
rendered = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=True)
ids = tok(rendered, add_special_tokens=False)["input_ids"]
text, gen = greedy(ids, 10)
cases.append(dict(kind="chat", messages=msgs, enable_thinking=True, n=10, rendered=rendered,
                  prompt_ids=ids, ids=gen, text=text))
with open(os.path.join(D, "text_reference.json"), "w") as f:
    json.dump(cases, f, indent=1, ensure_ascii=False)
for c in cases:
    print(c["kind"], repr(c["text"]))
