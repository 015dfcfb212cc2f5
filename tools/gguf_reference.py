#!/usr/bin/env python3
"""Reference outputs for a GGUF model, computed by transformers (gguf_file=).

    tools/gguf_reference.py MODEL.gguf "The capital of France is" 16 > ref.json

Prints one JSON object: the tokenizer's ids for the prompt (with and without special
tokens), the chat-template rendering of a fixed one-turn conversation with the generation
prompt, the greedy continuation (N tokens) of both the raw prompt and the chat prompt, and
the top-5 float32 logits at the last prompt position and the top-20 at every position. transformers dequantises the GGUF
tensors to float32, so these are the numbers of the dequantised weights: a C engine that
reads the same file should match the ids exactly and the logits to float tolerance.

Needs: torch, transformers, accelerate, gguf (pip). CPU only; a 0.5B model takes ~40 s
to load and dequantise on 2 cores.
"""
import argparse
import hashlib
import json
import os
import re
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF dequantiser has its own bar

CHAT_MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for buf in iter(lambda: f.read(1 << 22), b""):
            h.update(buf)
    return h.hexdigest()


def gguf_facts(path):
    """A few header fields, read with the gguf package (no tensor data)."""
    try:
        import gguf
    except ImportError:
        return {}
    r = gguf.GGUFReader(path)
    facts = {}
    for key in ("general.architecture", "general.name", "general.license",
                "tokenizer.ggml.model", "tokenizer.ggml.pre"):
        f = r.fields.get(key)
        if f is not None:
            facts[key] = f.contents()
    hist = {}
    for t in r.tensors:
        hist[t.tensor_type.name] = hist.get(t.tensor_type.name, 0) + 1
    facts["tensor_types"] = dict(sorted(hist.items()))
    facts["has_output_weight"] = any(t.name == "output.weight" for t in r.tensors)
    return facts


def topk(logits_row, k=5):
    import torch
    v, i = torch.topk(logits_row.float(), k)
    return {"ids": [int(x) for x in i], "values": [float(x) for x in v]}


def greedy(model, tok, ids, n):
    import torch
    inp = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=n,
                             do_sample=False, temperature=None, top_p=None, top_k=None,
                             pad_token_id=tok.pad_token_id if tok.pad_token_id is not None
                             else tok.eos_token_id)
    new = [int(x) for x in out[0, len(ids):]]
    return {"ids": new, "text": tok.decode(new, skip_special_tokens=False)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", help="path to the .gguf file")
    ap.add_argument("prompt", help="raw prompt text")
    ap.add_argument("n", type=int, nargs="?", default=16, help="tokens to generate (16)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--no-hash", action="store_true", help="skip the file's sha256")
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    if a.threads:
        torch.set_num_threads(a.threads)

    path = os.path.abspath(a.gguf)
    d, name = os.path.dirname(path), os.path.basename(path)
    res = {"file": name, "size": os.path.getsize(path)}
    if not a.no_hash:
        res["sha256"] = sha256(path)
    res.update(gguf_facts(path))

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    res["tokenizer_load_s"] = round(time.time() - t0, 2)
    res["vocab_size"] = len(tok)
    res["special"] = {"bos": tok.bos_token_id, "eos": tok.eos_token_id,
                      "pad": tok.pad_token_id}

    res["prompt"] = a.prompt
    ids = tok(a.prompt, add_special_tokens=True)["input_ids"]
    res["prompt_ids"] = ids
    res["prompt_ids_no_special"] = tok(a.prompt, add_special_tokens=False)["input_ids"]

    chat_text = None
    if tok.chat_template:
        chat_text = tok.apply_chat_template(CHAT_MESSAGES, tokenize=False,
                                            add_generation_prompt=True)
        res["chat_messages"] = CHAT_MESSAGES
        res["chat_text"] = chat_text
        res["chat_ids"] = tok(chat_text, add_special_tokens=False)["input_ids"]
    else:
        res["chat_text"] = None

    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    model.eval()
    res["model_load_s"] = round(time.time() - t0, 2)
    res["model_class"] = type(model).__name__
    res["tie_word_embeddings"] = bool(getattr(model.config, "tie_word_embeddings", False))

    t0 = time.time()
    with torch.no_grad():
        logits = model(torch.tensor([ids], dtype=torch.long)).logits
    res["last_logits_top5"] = topk(logits[0, -1])
    res["position_top20"] = [topk(logits[0, p], 20) for p in range(len(ids))]
    res["greedy"] = greedy(model, tok, ids, a.n)
    if chat_text is not None:
        res["chat_greedy"] = greedy(model, tok, res["chat_ids"], a.n)
    res["compute_s"] = round(time.time() - t0, 2)

    text = json.dumps(res, ensure_ascii=False, indent=1)
    # lists of numbers on one line each
    text = re.sub(r"\[\s+([-+0-9.eE,\s]+?)\s+\]",
                  lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]", text)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
