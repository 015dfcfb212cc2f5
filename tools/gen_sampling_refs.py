#!/usr/bin/env python3
"""Reference for the sampler: random logits processed by transformers' own logits processors
(RepetitionPenalty -> Temperature -> TopK -> TopP -> MinP, the order generate() uses), written
to tests/data/sampling/refs.json (removed tokens as null). test_sample.c must reproduce them."""
import json
import os

import torch
from transformers.generation.logits_process import (MinPLogitsWarper,
                                                    RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "sampling", "refs.json")
V = 64
CASES = [
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0),
    dict(temperature=0.7, top_k=10, top_p=1.0, min_p=0.0, repetition_penalty=1.0),
    dict(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0, repetition_penalty=1.0),
    dict(temperature=1.3, top_k=0, top_p=0.5, min_p=0.0, repetition_penalty=1.0),
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1, repetition_penalty=1.0),
    dict(temperature=0.8, top_k=20, top_p=0.95, min_p=0.05, repetition_penalty=1.3),
    dict(temperature=1.0, top_k=1, top_p=1.0, min_p=0.0, repetition_penalty=1.0),
    dict(temperature=2.0, top_k=40, top_p=0.8, min_p=0.0, repetition_penalty=0.8),
]

g = torch.Generator().manual_seed(7)
out = []
for i, c in enumerate(CASES):
    logits = (torch.randn(1, V, generator=g) * 3).float()
    history = torch.randint(0, V, (1, 12), generator=g)
    x = logits.clone()
    if c["repetition_penalty"] != 1.0:
        x = RepetitionPenaltyLogitsProcessor(c["repetition_penalty"])(history, x)
    if c["temperature"] != 1.0:
        x = TemperatureLogitsWarper(c["temperature"])(history, x)
    if c["top_k"] > 0:
        x = TopKLogitsWarper(c["top_k"])(history, x)
    if c["top_p"] < 1.0:
        x = TopPLogitsWarper(c["top_p"])(history, x)
    if c["min_p"] > 0:
        x = MinPLogitsWarper(c["min_p"])(history, x)
    out.append(dict(params=c, history=history[0].tolist(), logits=logits[0].tolist(),
                    expected=[None if v == float("-inf") else v for v in x[0].tolist()]))
with open(OUT, "w") as f:
    json.dump(out, f)
print(f"wrote {len(out)} cases to {OUT}")
