"""A seeded corpus of hard lines for tokenizer parity: each line mixes a few kinds of text.

Kinds: English prose with contractions, code, JSON, CJK and other scripts, emoji (ZWJ
sequences, skin tones, flags, variation selectors), numbers with long digit runs and non-ASCII
digits, whitespace runs (tabs, CR/LF, no-break and ideographic spaces), unusual code points
(C0/C1 controls, unassigned and private-use code points, noncharacters, stacked combining marks,
BOM, bidi controls) and the vocabulary's own special and added tokens embedded in text.  The
first lines carry every special token of the vocabulary, so any sample of the corpus has them
all; the rest are random.
"""

from __future__ import annotations

import json
import random
import unicodedata
from collections.abc import Callable, Sequence

_WORDS = ("the quick brown fox jumps over lazy dog tokenizer model server request schema grammar "
          "value string number object array null true false parse stream token merge byte regex "
          "Hello World OpenAI JSON HTTP URL API GPU CPU naïve café résumé Zürich São Paulo").split()
_CONTRACTIONS = ("don't", "I'M", "we've", "they'RE", "she'll", "it's", "He'd", "CAN'T", "y'all",
                 "o'clock", "rock'n'roll", "'tis", "l'été")
_CODE = (
    "def f(x: int) -> int:\n    return x ** 2  # square\n",
    "for (let i = 0; i < n; ++i) { sum += a[i]; }\n",
    "if __name__ == \"__main__\":\n\tmain()\n",
    "#include <stdio.h>\nint main(void){printf(\"%d\\n\", 42);return 0;}\n",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;\n",
    "fn main() { let v: Vec<u8> = vec![0xFF, 0x10]; println!(\"{:?}\", v); }\n",
    "    \t  x = [i for i in range(10) if i % 2 == 0]\r\n",
    "<div class=\"a\"><s>old</s><br/></div>\n",
    "git commit -m 'fix: handle \\r\\n' && echo $?\n",
    "λx. x → ∀y ∈ ℝ: y² ≥ 0\n",
)
_SCRIPTS = (
    "你好，世界！今天天气很好。", "日本語のテキスト、カタカナとひらがな。", "한국어 문장입니다.",
    "Привет, мир! Ёжик", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "Γειά σου Κόσμε", "Ελληνικά ΚΕΦΑΛΑΙΑ", "ﬁ ﬂ ŉ ǅ ẞ ß İ ı", "𝕳𝖊𝖑𝖑𝖔 𝔀𝓸𝓻𝓵𝓭",
)
_EMOJI = ("😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "❤️", "☺︎", "🧑🏿‍💻", "🫠", "#️⃣", "1️⃣", "🤷‍♀️")
_SPACES = (" ", "  ", "\t", "\n", "\r\n", "\n\n\n", "\u00a0", "\u3000", "\u2028", "\u2009", " \t \n ",
           "\r", "\x0b", "\x0c", "\u200b")
_ODD = ("\x00", "\x01", "\x1b[31m", "\x7f", "\x85", "\x9f", "\ufeff", "\u200d", "\u202e", "\u2066",
        "\ufffd", "\ufffe", "\uffff", "\ue000", "\U000f0000", "\U0010fffd", "e\u0301", "e\u0301\u0302",
        "Z\u0351\u0352\u0353\u0354\u0355", "\u0041\u030a", "\u212b", "\u00c5", "\u1e9b\u0323",
        "\u0301", "\uac00\u11a8", "\u1100\u1161\u11a8", "\U0001d15e")


def _unassigned(rng: random.Random) -> str:
    """A code point no Unicode version (of this Python) assigns."""
    while True:
        cp = rng.choice((rng.randrange(0x0370, 0x3000), rng.randrange(0x10000, 0x30000),
                         rng.randrange(0xe0080, 0xeffff)))
        if unicodedata.category(chr(cp)) == "Cn" and not 0xd800 <= cp < 0xe000:
            return chr(cp)


def _english(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) if rng.random() > 0.2 else rng.choice(_CONTRACTIONS)
             for _ in range(rng.randint(3, 14))]
    if rng.random() < 0.3:
        words[0] = words[0].upper()
    return " ".join(words) + rng.choice((".", "!", "?", "...", ",", ";", ":", ""))


def _json_value(rng: random.Random, depth: int = 0) -> object:
    pick = rng.randrange(7 if depth < 3 else 4)
    if pick == 0:
        return rng.randint(-10**12, 10**12)
    if pick == 1:
        return round(rng.uniform(-1e6, 1e6), rng.randint(0, 9))
    if pick == 2:
        return rng.choice((_english(rng), rng.choice(_SCRIPTS), rng.choice(_EMOJI), "a\"b\\c\n"))
    if pick == 3:
        return rng.choice((True, False, None))
    if pick in (4, 5):
        return {rng.choice(_WORDS): _json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def _json(rng: random.Random) -> str:
    value = {rng.choice(_WORDS): _json_value(rng) for _ in range(rng.randint(1, 4))}
    indent = rng.choice((None, None, 2, "\t"))
    return json.dumps(value, ensure_ascii=rng.random() < 0.3, indent=indent)


def _number(rng: random.Random) -> str:
    run = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 48)))
    return rng.choice((
        run, f"{run}.{rng.randint(0, 99999)}", f"-{run}e-{rng.randint(1, 300)}", f"{int(run):,}",
        f"0x{rng.getrandbits(64):X}", "١٢٣٤٥٦٧٨٩٠", "１２３４５", "²³¹ ½ ⅓ Ⅻ", f"v{run[:3]}.{run[-2:]}",
        f"{run[:4]}-{run[4:6] or '01'}-07T12:34:56Z", f"${run[:7]}.99", f"{run}%", f"+1 (555) {run[:7]}"))


def _whitespace(rng: random.Random) -> str:
    return "".join(rng.choice(_SPACES) * rng.randint(1, 6) for _ in range(rng.randint(1, 4)))


def _odd(rng: random.Random) -> str:
    parts = [rng.choice(_ODD) if rng.random() < 0.7 else _unassigned(rng) for _ in range(rng.randint(1, 4))]
    return rng.choice(("", "x", " word", "ab")).join(parts)


_KINDS: tuple[Callable[[random.Random], str], ...] = (
    _english, _english, lambda r: r.choice(_CODE), _json, lambda r: r.choice(_SCRIPTS),
    lambda r: "".join(r.choice(_EMOJI) for _ in range(r.randint(1, 5))), _number, _whitespace, _odd)


def _with_specials(rng: random.Random, text: str, specials: Sequence[str]) -> str:
    """``specials`` put into ``text`` at random cuts (ends, mid-word), each bare, between
    spaces or newlines, or doubled."""
    cuts = sorted(rng.randrange(len(text) + 1) for _ in specials)
    out, start = [], 0
    for cut, special in zip(cuts, specials, strict=True):
        out.append(text[start:cut])
        out.append(rng.choice((special, special, f" {special} ", f"\n{special}\n", special * 2)))
        start = cut
    out.append(text[start:])
    return "".join(out)


def corpus(specials: Sequence[str], lines: int, seed: int = 0) -> list[str]:
    """``lines`` lines of mixed text; the first ones hold every string of ``specials``."""
    rng = random.Random(seed)
    out: list[str] = []
    pending = list(specials)
    while len(out) < lines:
        text = "".join(rng.choice(_KINDS)(rng) + rng.choice(("", " ", "\n", ""))
                       for _ in range(rng.randint(1, 4)))
        # Every special string first (three to a line), then one line in three gets a random one.
        take = [pending.pop(0) for _ in range(min(3, len(pending)))]
        if not take and specials and rng.random() < 0.33:
            take = [rng.choice(specials)]
        text = _with_specials(rng, text, take)
        if rng.random() < 0.05 and specials:  # a special token's string cut short or split
            s = rng.choice(specials)
            text += s[: rng.randrange(1, len(s))] + " " + s[1:]
        out.append(text)
    return out
