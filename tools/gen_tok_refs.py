#!/usr/bin/env python3
"""gen_tok_refs.py — reference token ids for the tokenizer parity test (tests/test_tokenizer.c).

For each real tokenizer in ../shared/tokenizers/<name>/ (see tests/data/README.md), copies
tokenizer.json.xz and tokenizer_config.json into tests/data/tok/<name>/ and writes
tests/data/tok/<name>/ids.jsonl: one line per corpus line, {"ids": [...], "rt": true|false}, the ids
from HF `tokenizers` (encode with add_special_tokens=False) and whether
decode(ids, skip_special_tokens=False) gives the line back exactly.
Run after tools/gen_tok_corpus.py:   python3 tools/gen_tok_refs.py [SRC_DIR]
"""
import json
import lzma
import os
import shutil
import sys

from tokenizers import Tokenizer

NAMES = ["qwen3", "llama3", "deepseek_v3", "llama2"]


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "..", "shared", "tokenizers")
    data = os.path.join(root, "tests", "data", "tok")
    with open(os.path.join(data, "corpus.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(l) for l in f]
    for name in NAMES:
        dst = os.path.join(data, name)
        os.makedirs(dst, exist_ok=True)
        for fn in ["tokenizer.json.xz", "tokenizer_config.json"]:
            shutil.copyfile(os.path.join(src, name, fn), os.path.join(dst, fn))
        with lzma.open(os.path.join(dst, "tokenizer.json.xz"), "rt", encoding="utf-8") as f:
            tok = Tokenizer.from_str(f.read())
        n_rt = 0
        with open(os.path.join(dst, "ids.jsonl"), "w", encoding="utf-8") as f:
            for s in lines:
                ids = tok.encode(s, add_special_tokens=False).ids
                rt = tok.decode(ids, skip_special_tokens=False) == s
                n_rt += rt
                f.write(json.dumps({"ids": ids, "rt": rt}, separators=(",", ":")) + "\n")
        print(f"{name}: {len(lines)} lines, {n_rt} round-trip")


if __name__ == "__main__":
    main()
