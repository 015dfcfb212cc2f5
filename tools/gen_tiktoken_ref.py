#!/usr/bin/env python3
"""gen_tiktoken_ref.py — the Kimi-K2 tiktoken test fixture and its reference ids.

Writes tests/data/tiktoken/:
  tiktoken.model          a small byte-level BPE vocabulary trained here (Kimi's pre-split), in
                          tiktoken's format: base64 of the token's bytes, a space, its rank
  tokenizer_config.json   Kimi-style added_tokens_decoder, bos/eos, a small chat_template
  ref.json                what tiktoken itself gives for it: ids of every test string, FNV-1a
                          hashes of the ids of every line of tests/data/tok/corpus.jsonl, and of
                          long generated texts (tokenization_kimi.py's 400k / 25k cuts)

The reference is tiktoken.Encoding with Kimi's pat_str written as tokenization_kimi.py writes it
(Rust regex syntax, class intersection included), encode(allowed_special="all") over the pieces
tokenization_kimi.py's encode cuts the text into. tests/test_tok_tiktoken.c compares ft with it;
nothing calls tiktoken at test time.

Usage: pip install tiktoken regex; python3 tools/gen_tiktoken_ref.py [--out DIR]
Deterministic (fixed seeds); rerun only when the fixture must change.
"""
import argparse
import base64
import collections
import heapq
import json
import os
import random
import struct

import regex
import tiktoken

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Kimi's pre-tokenizer, as its tokenization_kimi.py joins it (Rust regex syntax)
CONTR = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
UP = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
LO = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
KIMI_PAT = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?" + UP + "*" + LO + "+" + CONTR,
    r"[^\r\n\p{L}\p{N}]?" + UP + "+" + LO + "*" + CONTR,
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])

N_RESERVED = 256
SPECIALS = {  # offset from the number of base tokens -> content (Kimi-K2's layout, abridged)
    0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
    6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
    11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>",
    13: "<|tool_call_begin|>", 14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>",
    17: "<|im_middle|>", 254: "[UNK]", 255: "[PAD]",
}

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}<|im_system|>system<|im_middle|>"
    "{%- elif message['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- else -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
    "{{ message['content'] }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)

# strings that exercise each rule of the pattern and the cuts around it
CASES = [
    "", " ", "a", "Hello world", "hello\nworld\n",
    # Han runs next to Latin, kana, hangul, CJK punctuation (Script=Han only: 。、 are not Han)
    "中文English混合", "我爱北京天安门。", "東京タワーは、とても高い。", "日本語のテキストです",
    "한국어 텍스트와 中文", "漢字かなカナ한글abc", "「引用」『書名』〇々〻", "中文123数字４５６",
    "中a文b字c", "CJK兼容：豈更車賈，扩展B：𠀀𠀁𪚲", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　中文",
    # letters: case runs, titlecase, modifier letters, contractions (case-insensitive)
    "HelloWorld camelCase PascalCase snake_case SCREAMING_CASE", "iPhone eBay McDonald",
    "ǅemal ǈubljana ǋ", "ʰʲʷ modifier ˢ", "it's IT'S It'S we're WE'RE they've I'm I'M",
    "you'll YOU'LL You'Ll he'd HE'D don't DON'T", "'s 's 'S 'Re 'vE", "maſ'ſ ſtar'ſ",
    "rock'n'roll O'Neil l'été", "’s curly ’S quotes",
    # digits: runs longer than 3, other numbers
    "1234567890", "3.14159265358979", "100,000,000", "Ⅻ ² ½ ٣٤٥ ০১২ 𝟙𝟚𝟛", "a1b22c333d4444e55555",
    # punctuation runs with trailing newlines, spaces before them
    "Hello!!!\n\n", "what?!?\r\n\r\n", " ...\n", "(a) [b] {c}\n", "--==>>\n\n\nnext",
    "#include <stdio.h>\nint main(void) { return 0; }\n", "x += 1;\r\n\ty -= 2;\n",
    # whitespace runs: \s+(?!\S), \s*[\r\n]+, tabs, NBSP, NEL, ideographic space, line separators
    "a  b   c    d", "   leading", "trailing   ", "\t\ttabs\tinside\t", "\r\n\r\n", "\n\n\n",
    "a \n b", "a\n\n  b", "x \t \n\t y", "nel\x85here \x85 x", "x \x85y", "\x85 \n", "a\u3000\x85b", "nbsp\xa0\xa0word",
    "em\u2003space\u3000ideo", "line\u2028sep\u2029para", "zero\u200bwidth", "mongol\u180evowel", " \u180e x", "a \u180e\u180eb\u180e \n",
    "ogham\u1680space", "\x0b\x0cvt ff", "\x1c\x1d\x1e\x1f info seps",
    # emoji and other 4-byte UTF-8, ZWJ sequences, variation selectors, skin tones
    "💩", "👨‍👩‍👧‍👦 family", "👍🏽 thumbs", "❤️ heart ☺︎", "🇯🇵🇺🇸 flags", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝓢𝓬𝓻𝓲𝓹𝓽",
    "𓀀𓀁 hieroglyphs", "\U0001F600\U0001F601\U0001F602",
    # combining marks (NFD, stacked), marks after Han, scripts with vowel signs
    "e\u0301te\u0301", "A\u030a vs \u00c5", "Z\u0351\u0325a\u0308\u0347l\u0303g\u0352o\u0301",
    "中\u0301文", "नमस्ते दुनिया", "ภาษาไทย", "مرحبا بالعالم", "Ελληνικά Русский",
    "שָׁלוֹם",
    # special tokens in text, next to text and each other, and lookalikes
    "<|im_system|>system<|im_middle|>You are Kimi.<|im_end|>",
    "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|>",
    "[BOS]text[EOS]", "a[EOT]b", "<|im_end|><|im_end|>", "<|im_end|", "<|im_end |>",
    "[PAD][UNK]", "<|reserved_token_%d|>",  # filled in with a real reserved id below
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get:0"
    "<|tool_call_argument_begin|>{\"a\": 1}<|tool_call_end|><|tool_calls_section_end|>",
    # words only the whole-token lookup reaches (see train())
    "zqxjzqxj", " zqxjzqxj", "zqxjzqxjzqxj",
    # mixed prose
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "Kimi K2 是一个 MoE 模型，它有 1T 参数 (32B activated).\n\nIt's great—isn't it?",
    "Prices: $1,299.99 / €1.299,99 / ¥129,999 — 50% off!!!",
]


def kimi_cut(s):
    """The pieces tokenization_kimi.py's encode hands tiktoken."""
    out = []
    for i in range(0, len(s), 400_000):
        t = s[i:i + 400_000]
        run, space, start = 0, t[0].isspace() if t else False, 0
        for j, ch in enumerate(t):
            now = ch.isspace()
            if space ^ now:
                run, space = 1, now
            else:
                run += 1
                if run > 25_000:
                    out.append(t[start:j])
                    start, run = j, 1
        out.append(t[start:])
    return out


def fnv(ids):
    h = 0xcbf29ce484222325
    for b in struct.pack("<%dI" % len(ids), *ids):
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return "%016x" % h


def bytes_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    m, n = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    return m


def train(texts, n_merges, seed):
    """Byte-level BPE over Kimi's pre-tokens: ranks 0..255 are the bytes (shuffled, so that byte
    ids are not byte values), then one rank per merge of the most frequent adjacent pair."""
    split = regex.compile("(?V1)" + KIMI_PAT)
    words = collections.Counter()
    for t in texts:
        for w in split.findall(t):
            words[w.encode("utf-8")] += 1
    order = list(range(256))
    random.Random(seed).shuffle(order)
    vocab = [bytes([b]) for b in order]  # rank -> bytes
    rank_of = {b: i for i, b in enumerate(vocab)}
    seqs = [[rank_of[bytes([c])] for c in w] for w in words]
    freq = list(words.values())
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for wi, s in enumerate(seqs):
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pairs.items()]
    heapq.heapify(heap)
    while len(vocab) < 256 + n_merges and heap:
        c, p = heapq.heappop(heap)
        if -c != pairs.get(p, 0) or c == 0:
            continue
        new = len(vocab)
        vocab.append(vocab[p[0]] + vocab[p[1]])
        touched = collections.Counter()
        for wi in list(where[p]):
            s, f = seqs[wi], freq[wi]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] -= f
                touched[(a, b)] += 0
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == p:
                    out.append(new)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[wi] = out
            for a, b in zip(out, out[1:]):
                pairs[(a, b)] += f
                where[(a, b)].add(wi)
                touched[(a, b)] += 0
        for q in touched:
            if pairs[q] > 0:
                heapq.heappush(heap, (-pairs[q], q))
    # a token no split into two tokens reaches: only tiktoken's whole-piece lookup finds it
    have = set(vocab)
    for extra in (b"zqxjzqxj",):
        assert not any(extra[:k] in have and extra[k:] in have for k in range(1, len(extra)))
        vocab.append(extra)
    assert len(set(vocab)) == len(vocab)
    return vocab


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/tiktoken"))
    ap.add_argument("--merges", type=int, default=3000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    corpus = []
    with open(os.path.join(ROOT, "tests/data/tok/corpus.jsonl"), encoding="utf-8") as f:
        for line in f:
            corpus.append(json.loads(line))

    rng = random.Random(1234)
    pools = [
        "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
        " ", "  ", "\t", "\n", "\r\n", "\x85", "\xa0", "\u3000", "\u2028", "\u200b", "\x0b", "\u180e",
        "'s", "'S", "'ll", "'LL", "'Re", "'ſ", "’", "!?.,;:-_()[]{}<>\"'/\\|@#$%^&*+=~`",
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年", "。、，！？「」『』〇々〻〆",
        "あいうえおかきくけこがぎぐ", "アイウエオカキクケコガギグー", "가나다라마바사아자차카타파하",
        "éèêëàâäôöûüçñÅåøæß", "\u0301\u0308\u0327\u0303\u20dd", "αβγδεΑΒΓΔΕ", "абвгдАБВГД",
        "ǅǈǋ", "ʰʲʷˢ", "ⅫⅣ²½٣٤০১", "١٢٣", "नमस्ते", "مرحبا", "😀👍🏽❤️🇯🇵👨‍👩‍👧", "𠀀𠀁𪚲", "𝔘𝓢",
        "<|im_end|>", "[BOS]", "<|im_middle|>", "<|im_",
    ]
    fuzz = []
    for _ in range(260):
        s = []
        for _ in range(rng.randint(1, 24)):
            pool = rng.choice(pools)
            if len(pool) > 1 and not pool.startswith(("<|", "[", "'", "\r")) and pool not in (
                    "  ", "’"):
                k = rng.randint(1, 6)
                s.append("".join(rng.choice(pool) for _ in range(k)))
            else:
                s.append(pool)
        fuzz.append("".join(s))

    # merges around the characters where Rust's and PCRE2's classes could part (U+0085, U+180E,
    # U+3002...), so that a wrong split changes the ids
    odd = ["\x85", "\u180e", "\u200b", "\u3000", "\xa0", "\u2028", "\u3002", "\u3001"]
    extra = [" %s%sx\n" % (c, c) for c in odd for _ in range(40)]
    vocab = train(corpus + [c for c in CASES if "zqxj" not in c] + fuzz + extra, args.merges,
                  seed=7)
    n_base = len(vocab)
    with open(os.path.join(args.out, "tiktoken.model"), "w") as f:
        for r, b in enumerate(vocab):
            f.write("%s %d\n" % (base64.b64encode(b).decode(), r))

    specials = {SPECIALS.get(k, "<|reserved_token_%d|>" % (n_base + k)): n_base + k
                for k in range(N_RESERVED)}
    config = {
        "added_tokens_decoder": {
            str(n_base + k): {"content": c, "lstrip": False, "normalized": False,
                              "rstrip": False, "single_word": False, "special": True}
            for k, c in sorted(SPECIALS.items())
        },
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]",
        "eos_token": "[EOS]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1048576,
        "tokenizer_class": "TikTokenTokenizer",
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")

    enc = tiktoken.Encoding("kimi-test", pat_str=KIMI_PAT,
                            mergeable_ranks={b: r for r, b in enumerate(vocab)},
                            special_tokens=specials)

    def encode(s):
        ids = []
        for piece in kimi_cut(s):
            ids.extend(enc.encode(piece, allowed_special="all"))
        assert enc.decode_bytes(ids) == s.encode("utf-8")
        return ids

    cases = [c % (n_base + 100) if "%d" in c else c for c in CASES] + fuzz
    ref = {
        "n_base": n_base,
        "n_vocab": n_base + N_RESERVED,
        "bos": specials["[BOS]"],
        "eos": specials["[EOS]"],
        "specials": {c: i for c, i in specials.items() if not c.startswith("<|reserved_token_")},
        "cases": [{"text": s, "ids": encode(s)} for s in cases],
    }
    # GPT-2-mapped pieces (tokenization_kimi.py's decoder) of some ids
    b2u = bytes_to_unicode()
    ref["pieces"] = {str(r): "".join(b2u[c] for c in vocab[r])
                     for r in list(range(0, n_base, 97)) + [n_base - 1]}
    # every corpus line: number of ids and their hash (null: not valid UTF-8 text)
    hashes = []
    for s in corpus:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            hashes.append(None)
            continue
        ids = encode(s)
        hashes.append([len(ids), fnv(ids)])
    ref["corpus"] = hashes
    # long texts, rebuilt by the test: unit repeated; 25k-character runs and the 400k cut
    longs = []
    for parts, rep in [([("a", 25_001)], 1), ([("ab", 30_000)], 1), ([(" ", 25_003)], 1),
                       ([("中", 26_000)], 1), ([("x", 24_999), ("  \n", 1)], 3),
                       ([("Hello, world! 你好 ", 1)], 25_000), ([("tokenizers", 45_000)], 1),
                       ([("a", 30_000), (" ", 1)], 14)]:
        s = "".join(u * n for u, n in parts) * rep
        ids = encode(s)
        longs.append({"parts": parts, "repeat": rep, "n_ids": len(ids), "fnv": fnv(ids)})
    ref["long"] = longs
    with open(os.path.join(args.out, "ref.json"), "w") as f:
        json.dump(ref, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    sizes = {n: os.path.getsize(os.path.join(args.out, n))
             for n in ("tiktoken.model", "tokenizer_config.json", "ref.json")}
    print("ranks %d, specials %d, cases %d, corpus lines %d, long %d; bytes %s" % (
        n_base, N_RESERVED, len(ref["cases"]), len(hashes), len(longs), sizes))


if __name__ == "__main__":
    main()
