#!/usr/bin/env python3
"""gen_tok_corpus.py — writes tests/data/tok/corpus.jsonl, the tokenizer parity corpus.

Deterministic (fixed seed): one JSON string per line, so newlines, tabs and CR are representable.
Covers English prose, code, Chinese, Japanese, Korean, Arabic, other scripts, emoji (ZWJ, flags,
skin tones), numbers of many digits, whitespace runs, special-token text and NFC-sensitive text.
Run:  python3 tools/gen_tok_corpus.py [out.jsonl]   then tools/gen_tok_refs.py for reference ids.
"""
import json
import os
import random
import sys

R = random.Random(20240611)

WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have "
         "an they which one you were all we her she there would their will when who him been has "
         "more if no out so said what up its about than into them can only other new some could "
         "time these two may first then do any like my now over such our man me even most made "
         "after also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own see "
         "men work long get here between both life being under never day same another know while "
         "last might us great old year off come since against go came right used take three "
         "tokenizer engine inference mixture experts memory bandwidth throughput latency GPU CPU "
         "don't isn't we're they've I'm you'll he'd It's DON'T WE'RE THEY'LL Hello World OpenAI "
         "naïve café résumé coöperate façade jalapeño Zürich São Paulo Kraków").split()
ZH = ["我们今天去公园散步，天气非常好。", "机器学习是人工智能的一个分支。", "这个模型有三百亿个参数，但每次只激活三十亿。",
      "北京是中华人民共和国的首都。", "请把这段文字翻译成英文：你好，世界！", "《红楼梦》是中国古典小说。",
      "繁體中文與簡體中文並存。", "他说：“我明天再来。”"]
JA = ["今日はいい天気ですね。", "東京タワーに行きたいです。", "カタカナとひらがなと漢字を混ぜて書きます。",
      "ソフトウェアエンジニアリングは楽しい！", "ｶﾀｶﾅの半角もあります。", "「こんにちは」と彼女は言った。"]
KO = ["안녕하세요, 만나서 반갑습니다.", "한국어는 한글로 씁니다.", "서울은 대한민국의 수도입니다.",
      "오늘 날씨가 정말 좋네요!", "인공지능 모델을 로컬에서 실행합니다."]
AR = ["مرحبا بالعالم", "اللغة العربية جميلة جدا.", "هذا نموذج لغوي كبير يعمل على المعالج.",
      "السلام عليكم ورحمة الله", "الأرقام العربية: ٠١٢٣٤٥٦٧٨٩"]
OTHER = ["Привет, как дела? Москва — столица России.", "Γειά σου Κόσμε! Αθήνα.", "नमस्ते दुनिया, यह हिंदी है।",
         "שלום עולם", "สวัสดีครับ ประเทศไทย", "Xin chào thế giới, tiếng Việt có dấu.",
         "Ünïcödé çhàrâctérs ñ ø å ß Æ œ", "Türkçe ğüşıöç İstanbul", "ქართული ენა", "Հայերեն լեզու",
         "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝐛𝐨𝐥𝐝 ∑∫∂√∞≠≤≥", "© ® ™ € £ ¥ § ¶ † ‡ • … ‰ ′ ″"]
EMOJI = ["😀", "😂", "🤖", "🚀", "❤️", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "🧑‍💻", "✨", "🔥",
         "🥲", "🫠", "☕", "⚡", "🎉", "👩🏿‍🔬", "1️⃣", "#️⃣"]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
           "</tool_call>", "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_5|>", "<s>", "</s>", "<unk>",
           "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
           "<|fim_prefix|>", "<|vision_start|>", "<|im_start", "im_end|>", "<|", "|>", "< s >"]
CODE = [
    'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
    'for (int i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}\n',
    '#include <stdio.h>\nint main(void) { printf("hello, %s\\n", "world"); return 0; }',
    '{\n  "name": "freetoken",\n  "version": "0.1.0",\n  "tags": ["moe", "gpu"]\n}',
    'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;',
    'const x = await fetch(`https://example.com/api?q=${encodeURIComponent(q)}`);',
    'fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u32> = (0..10).collect();\n    Ok(())\n}',
    '    x = [i**2 for i in range(100) if i % 3 == 0]  # squares\n',
    '<div class="row"><a href="/x?a=1&amp;b=2">link</a></div>',
    'git commit -m "fix: handle \\r\\n line endings" && git push origin main',
    '$ cmake -S . -B build -DFT_CUDA=OFF && cmake --build build -j2',
    'if (a != b && c <= d || !e) { return -1; } // early exit',
    'print(f"{value:>10.3f} | {name!r:<20}")',
    'matrix[i][j] += alpha * x[i] * y[j];\r\n',
    '\t\tcase FT_DTYPE_BF16: return 2;\n\t\tdefault: break;',
]


def words(n):
    out = []
    for i in range(n):
        w = R.choice(WORDS)
        if i == 0 or R.random() < 0.05:
            w = w[:1].upper() + w[1:]
        out.append(w)
    s = " ".join(out)
    for p in [",", ";", ":", " -", " —"]:
        if R.random() < 0.3:
            k = R.randrange(len(s))
            k = s.find(" ", k)
            if k > 0:
                s = s[:k] + p + s[k:]
    return s + R.choice([".", ".", ".", "!", "?", "...", ""])


def number():
    kind = R.randrange(6)
    n = R.randint(1, 40)
    digits = "".join(R.choice("0123456789") for _ in range(n))
    if kind == 0:
        return digits
    if kind == 1:
        return f"{int(digits):,}"
    if kind == 2:
        return digits + "." + "".join(R.choice("0123456789") for _ in range(R.randint(1, 12)))
    if kind == 3:
        return f"{R.uniform(-1e6, 1e6):.{R.randint(0, 8)}e}"
    if kind == 4:
        return f"0x{R.getrandbits(64):x}"
    return f"{R.randint(1, 31)}/{R.randint(1, 12)}/{R.randint(1900, 2100)} {R.randint(0, 23):02d}:{R.randint(0, 59):02d}"


def ws():
    return "".join(R.choice([" ", "  ", "    ", "\t", "\n", "\n\n", "\r\n", " \t ", "\u00a0", "\u3000", "\u2009", "\u200b", "\v", "\f"])
                   for _ in range(R.randint(1, 6)))


def rand_unicode(n):
    out = []
    ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x4e00, 0x9fff),
              (0x3040, 0x30ff), (0xac00, 0xd7a3), (0x600, 0x6ff), (0x1f300, 0x1f64f), (0x2000, 0x206f),
              (0x300, 0x36f), (0xe000, 0xe0ff), (0x10000, 0x1007f), (0x20000, 0x2a6df)]
    for _ in range(n):
        a, b = R.choice(ranges)
        out.append(chr(R.randint(a, b)))
    return "".join(out)


def mixed():
    parts = []
    for _ in range(R.randint(2, 6)):
        k = R.randrange(10)
        parts.append([lambda: words(R.randint(2, 10)), lambda: R.choice(ZH), lambda: R.choice(JA),
                      lambda: R.choice(KO), lambda: R.choice(AR), lambda: R.choice(OTHER),
                      lambda: "".join(R.choice(EMOJI) for _ in range(R.randint(1, 4))), number, ws,
                      lambda: R.choice(SPECIAL)][k]())
    sep = R.choice([" ", "", "\n", " "])
    return sep.join(parts)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "tok", "corpus.jsonl")
    lines = ["", " ", "\n", "a", "Hello world", " Hello world", "Hello  world", "hello\nworld\n",
             "   leading spaces", "trailing spaces   ", "\t\ttabs\tinside\t", "\r\n\r\n", "💩",
             "e\u0301t\u00e9", "Å vs A\u030a", "ﬁ ligature ² ½ Ⅻ", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>",
             "<｜begin▁of▁sentence｜>Hi<｜User｜>2+2?<｜Assistant｜><think>\n4\n</think>",
             "<s>[INST] hi [/INST]</s>", "a<s>b", " <s> ", "<unk>", "<|im_start|><|im_start|>",
             "1234567890123456789012345678901234567890", "3.14159265358979", "100,000,000", "▁already▁spm",
             "'s 't 're 've 'm 'll 'd 'S 'T 'RE", "I'M HE'LL", "\u00a0nbsp\u00a0", "\u3000全角\u3000",
             "x" * 300, "ab" * 200, " " * 50 + "x", "\n" * 20, "😀" * 30, "中文" * 100]
    for s in ZH + JA + KO + AR + OTHER + CODE + SPECIAL + EMOJI:
        lines.append(s)
    gens = [(words, 500), (None, 0)]
    for _ in range(500):
        lines.append(words(R.randint(3, 40)))
    for _ in range(200):
        lines.append(" ".join(number() for _ in range(R.randint(1, 5))))
    for _ in range(150):
        c = R.choice(CODE)
        lines.append(c if R.random() < 0.5 else c.replace("    ", "\t").replace("\n", ws()))
    for _ in range(100):
        lines.append(" ".join(R.sample(ZH, 2)))
    for _ in range(80):
        lines.append("".join(R.sample(JA, 2)))
    for _ in range(80):
        lines.append(" ".join(R.sample(KO, 2)))
    for _ in range(80):
        lines.append(" ".join(R.sample(AR, 2)))
    for _ in range(80):
        lines.append(" ".join(R.sample(OTHER, 2)))
    for _ in range(100):
        lines.append(words(R.randint(1, 6)) + " " + "".join(R.choice(EMOJI) for _ in range(R.randint(1, 5))))
    for _ in range(150):
        lines.append(words(R.randint(1, 5)) + ws() + words(R.randint(1, 5)) + ws())
    for _ in range(150):
        lines.append(R.choice(SPECIAL) + words(R.randint(1, 5)) + R.choice(["", " ", "\n"]) + R.choice(SPECIAL))
    for _ in range(100):
        lines.append(rand_unicode(R.randint(1, 30)))
    for _ in range(350):
        lines.append(mixed())
    _ = gens
    with open(out, "w", encoding="utf-8") as f:
        for s in lines:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    print(f"{out}: {len(lines)} lines")


if __name__ == "__main__":
    main()
