#!/usr/bin/env python3
"""Gives the tiny qwen3_moe fixture a real (tiny) tokenizer so text paths can be tested end to
end: a byte-level BPE trained by HF `tokenizers` to exactly the fixture's vocab (384 = 5 special
tokens + 256 bytes + 123 merges), Qwen-style pre-tokenizer, and a tokenizer_config.json carrying
Qwen3's real ChatML chat template (from ../shared/tokenizers/qwen3).

    python3 tools/gen_fixture_tokenizer.py [FIXTURE_DIR]   (default tests/data/models/qwen3_moe)
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
DIR = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "data", "models", "qwen3_moe")
QWEN3_CFG = os.path.join(HERE, "..", "..", "shared", "tokenizers", "qwen3", "tokenizer_config.json")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
TEXT = ["The quick brown fox jumps over the lazy dog.", "Hello, world! How are you today?",
        "FreeToken-C serves mixture of experts models on the hardware people own.",
        "user assistant system think", "Once upon a time there was a tiny model."] * 50

tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=SPECIAL, show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(TEXT, trainer)
assert tok.get_vocab_size() == 384, tok.get_vocab_size()
tok.save(os.path.join(DIR, "tokenizer.json"))
with open(QWEN3_CFG) as f:
    template = json.load(f)["chat_template"]
cfg = {"chat_template": template, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
       "bos_token": None, "add_bos_token": False, "model_max_length": 256}
with open(os.path.join(DIR, "tokenizer_config.json"), "w") as f:
    json.dump(cfg, f, indent=1)
with open(os.path.join(DIR, "generation_config.json"), "w") as f:
    json.dump({"eos_token_id": [2, 0], "temperature": 0.6, "top_p": 0.95, "top_k": 20}, f, indent=1)
print("ids of 'Hello, world!':", tok.encode("Hello, world!").ids)
