#!/usr/bin/env python3
"""gen_gguf_tok.py — vocab-only GGUF files for the GGUF tokenizer test (tests/test_tok_gguf.c).

For each real tokenizer in ../shared/tokenizers/<name>/ (tokenizer.json.xz + tokenizer_config.json,
the same files as tests/data/tok/<name>/), writes tests/data/gguf/tok/<name>.gguf.xz: a GGUF with
no tensors and the tokenizer.ggml.* / tokenizer.chat_template metadata that llama.cpp's
convert_hf_to_gguf.py writes for that model, so the C loader is checked against the conventions
of the converter and the ids HF `tokenizers` gives (tests/data/tok/<name>/ids.jsonl).

What is mimicked, and from which converter path:
  gpt2 (qwen3, llama3, deepseek_v3): ModelBase._set_vocab_gpt2 / get_vocab_base. Tokens by id up
    to config.json's vocab_size; ids the tokenizer does not use become "[PAD<id>]" (UNUSED);
    added tokens are CONTROL when special or when they look special ("<|...|>", "<｜...｜>"),
    else USER_DEFINED (with "▁" written as " "); non-normalized added tokens are stored as
    decode(encode(token)). Merges, special ids, add_bos/add_eos and the chat template come from
    gguf.SpecialVocab(load_merges=True), which also reads config.json. tokenizer.ggml.pre is the
    name the converter's pre-tokenizer hash table gives these tokenizers.
  llama (llama2, a SentencePiece BPE): ModelBase._set_vocab_sentencepiece. The converter reads
    tokenizer.model, which is not among these files, so the pieces, types and scores are
    rebuilt from tokenizer.json: types as SentencePiece reports them (<unk> UNKNOWN, <s>/</s>
    CONTROL, <0xNN> BYTE, else NORMAL), then tokenizer_config.json's added_tokens_decoder entries
    become CONTROL with score -1000 as the converter does. Scores: HF's SentencePiece converter
    wrote tokenizer.json's merges sorted by the merged piece's score, so the piece made by merge
    rank r gets score -r (the first merge that makes it), which gives SentencePiece's "merge the
    pair whose result scores highest" the same order as HF's merge ranks; pieces no merge makes
    (single characters) score below every merge.
config.json is not among the files either: its vocab_size, bos_token_id and eos_token_id (the
values the models publish) are written into the temporary model directory SpecialVocab reads.

Also writes fuzz/corpus/fuzz_gguf/tok_gpt2.gguf and tok_llama.gguf: tiny tokenizer GGUFs seeding
the GGUF fuzzer (which loads the tokenizer of every file it parses).
Run from anywhere (deterministic):   python3 tools/gen_gguf_tok.py [SRC_DIR]
Needs the `gguf` and `tokenizers` packages.
"""
import json
import lzma
import os
import re
import sys
import tempfile

import gguf
from tokenizers import Tokenizer

T = gguf.TokenType
MODELS = {
    # name: GGUF architecture, tokenizer model, tokenizer.ggml.pre, config.json values
    "qwen3": ("qwen3", "gpt2", "qwen2",
              {"vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645}),
    "llama3": ("llama", "gpt2", "llama-bpe",
               {"vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": 128001}),
    "deepseek_v3": ("deepseek2", "gpt2", "deepseek-v3",
                    {"vocab_size": 129280, "bos_token_id": 0, "eos_token_id": 1}),
    "llama2": ("llama", "llama", "default",
               {"vocab_size": 32000, "bos_token_id": 1, "eos_token_id": 2}),
}


def looks_special(s):
    """convert_hf_to_gguf.py's does_token_look_special."""
    return (s in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (s.startswith("<|") and s.endswith("|>"))
            or (s.startswith("<｜") and s.endswith("｜>"))
            or (s.startswith("<unused") and s.endswith(">")))


def gpt2_vocab(tok, vocab_size):
    """Tokens and types as get_vocab_base builds them."""
    rev = {i: s for s, i in tok.get_vocab(with_added_tokens=True).items()}
    added = tok.get_added_tokens_decoder()
    assert max(rev) < vocab_size
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in rev:
            tokens.append(f"[PAD{i}]")
            types.append(T.UNUSED)
            continue
        s = rev[i]
        if i in added:
            if not added[i].normalized:
                s = tok.decode(tok.encode(s, add_special_tokens=False).ids, skip_special_tokens=False)
            if added[i].special or looks_special(s):
                types.append(T.CONTROL)
            else:
                s = s.replace("\u2581", " ")
                types.append(T.USER_DEFINED)
        else:
            types.append(T.NORMAL)
        tokens.append(s)
    return tokens, types


def spm_vocab(tj, config, vocab_size):
    """Tokens, scores and types as _create_vocab_sentencepiece builds them (see the top)."""
    vocab, merges = tj["model"]["vocab"], tj["model"]["merges"]
    rev = {i: s for s, i in vocab.items()}
    assert sorted(rev) == list(range(vocab_size))
    first_rank = {}
    for r, m in enumerate(merges):
        a, b = m.split(" ") if isinstance(m, str) else m
        first_rank.setdefault(vocab[a + b], r)
    unk = tj["model"].get("unk_token")
    tokens, scores, types = [], [], []
    for i in range(vocab_size):
        s = rev[i]
        if s == unk:
            ty, score = T.UNKNOWN, 0.0
        elif s in ("<s>", "</s>"):
            ty, score = T.CONTROL, 0.0
        elif re.fullmatch(r"<0x[0-9A-F]{2}>", s):
            ty, score = T.BYTE, 0.0
        elif i in first_rank:
            ty, score = T.NORMAL, -float(first_rank[i])
        else:
            ty, score = T.NORMAL, -float(len(merges) + i)
        tokens.append(s)
        scores.append(score)
        types.append(ty)
    for sid, d in config.get("added_tokens_decoder", {}).items():
        i = int(sid)
        if i >= vocab_size:
            continue
        s = d["content"]
        if d.get("special") or looks_special(s):
            types[i] = T.CONTROL
        else:
            s = s.replace("\u2581", " ")
            types[i] = T.USER_DEFINED
        scores[i] = -1000.0
        tokens[i] = s
    return tokens, scores, types


def write(name, src, out_dir):
    arch, model, pre, cfg = MODELS[name]
    with lzma.open(os.path.join(src, name, "tokenizer.json.xz"), "rt", encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(src, name, "tokenizer_config.json"), encoding="utf-8") as f:
        config_text = f.read()
    with tempfile.TemporaryDirectory() as d:
        for fn, s in [("tokenizer.json", text), ("tokenizer_config.json", config_text),
                      ("config.json", json.dumps(cfg))]:
            with open(os.path.join(d, fn), "w", encoding="utf-8") as f:
                f.write(s)
        path = os.path.join(d, name + ".gguf")
        w = gguf.GGUFWriter(path, arch)
        w.add_name(name)
        w.add_tokenizer_model(model)
        w.add_tokenizer_pre(pre)
        if model == "gpt2":
            tokens, types = gpt2_vocab(Tokenizer.from_str(text), cfg["vocab_size"])
            w.add_token_list(tokens)
            w.add_token_types(types)
            special = gguf.SpecialVocab(d, load_merges=True)
        else:
            tokens, scores, types = spm_vocab(json.loads(text), json.loads(config_text),
                                              cfg["vocab_size"])
            w.add_token_list(tokens)
            w.add_token_scores(scores)
            w.add_token_types(types)
            special = gguf.SpecialVocab(d, n_vocab=len(tokens))
        special.add_to_gguf(w, quiet=True)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.close()
        with open(path, "rb") as f:
            raw = f.read()
    dst = os.path.join(out_dir, name + ".gguf.xz")
    with open(dst, "wb") as f:
        f.write(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))
    print(f"{name}: {len(tokens)} tokens, {len(special.merges)} merges, "
          f"special {special.special_token_ids}, add {special.add_special_token}, "
          f"{len(raw)} bytes -> {os.path.getsize(dst)} xz")


def write_seeds(out_dir):
    """Two tiny tokenizer GGUFs (gpt2 + qwen2 pre-tokenizer, llama + scores) that seed
    fuzz/fuzz_gguf.c's corpus, so the fuzzer starts inside ft_tok_load_gguf."""
    byte_chars = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a"]
    gpt2 = byte_chars + ["He", "ll", "Hell", "Hello", "\u0120w", "<|im_end|>", "[PAD101]"]
    for name, model in [("tok_gpt2", "gpt2"), ("tok_llama", "llama")]:
        path = os.path.join(out_dir, name + ".gguf")
        w = gguf.GGUFWriter(path, "qwen2" if model == "gpt2" else "llama")
        w.add_tokenizer_model(model)
        if model == "gpt2":
            w.add_tokenizer_pre("qwen2")
            w.add_token_list(gpt2)
            w.add_token_types([T.NORMAL] * (len(gpt2) - 2) + [T.CONTROL, T.UNUSED])
            w.add_token_merges(["H e", "l l", "He ll", "Hell o", "\u0120 w"])
            w.add_eos_token_id(len(gpt2) - 2)
        else:
            toks = ["<unk>", "<s>", "</s>", "<0x0A>", "<0xE4>", "\u2581", "H", "e", "l", "o",
                    "He", "ll", "\u2581He", "llo", "\u2581Hello"]
            w.add_token_list(toks)
            w.add_token_scores([0.0] * 5 + [-float(i) for i in range(10)])
            w.add_token_types([T.UNKNOWN, T.CONTROL, T.CONTROL, T.BYTE, T.BYTE] + [T.NORMAL] * 10)
            w.add_bos_token_id(1)
            w.add_add_bos_token(True)
        w.add_chat_template("{{ messages }}")
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.close()


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "..", "shared", "tokenizers")
    out_dir = os.path.join(root, "tests", "data", "gguf", "tok")
    os.makedirs(out_dir, exist_ok=True)
    for name in MODELS:
        write(name, src, out_dir)
    write_seeds(os.path.join(root, "fuzz", "corpus", "fuzz_gguf"))


if __name__ == "__main__":
    main()
