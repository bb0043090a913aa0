"""Strings that tell two tokenizer implementations apart.

Used at load time (small corpus: backend self-check) and by the tests (large corpus).
The strings aim at the places where implementations drift: pre-tokenizer regex
classes (letters/marks/numbers/punctuation per script), digit grouping, contractions,
whitespace runs before words and newlines, Unicode normalization (NFC vs NFD input),
multi-codepoint emoji, and added tokens (each one alone, glued to text, adjacent to
another, surrounded by spaces for ``lstrip``/``rstrip``, and near-miss look-alikes).
"""

from __future__ import annotations

import random

__all__ = ["fixed_samples", "special_samples", "random_samples", "chat_like_prompts", "selfcheck_corpus", "large_corpus"]

_FIXED = (
    "",
    " ",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm fine, you're late, they'll go, we'd see, it's DON'T WON'T I'M",
    "naïve café résumé Ångström façade coöperate",
    "cafe\u0301 e\u0301te\u0301 A\u030a n\u0303",  # NFD input: normalizers differ here
    "Привет, как дела? Всё хорошо.",
    "你好，世界！今天天气很好。我们去公园吧。",
    "こんにちは世界。カタカナとひらがなと漢字。",
    "안녕하세요 세계",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "สวัสดีชาวโลก",
    "Γειά σου Κόσμε",
    "😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇺🇸🇫🇷 ❤️ 🏳️‍🌈 🦙",
    "1 12 123 1234 12345 123456 1234567890 3.14159 1,234,567.89 -42 +7 1e-9 0x1F 007",
    "٠١٢٣٤٥٦٧٨٩ ²³ ½ Ⅻ ①②",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A(B):\n\tpass\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }  // C\r\n",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "<div class=\"x\">&nbsp;&lt;tag&gt;</div>",
    "SELECT * FROM t WHERE a <> b AND c != 'd';",
    "    leading spaces",
    "trailing spaces    ",
    "a  b   c    d     e",
    "\n\n\n",
    "line1\nline2\r\nline3\rline4",
    "tab\tseparated\t\tvalues\t",
    " \t \n \u00a0 \u3000 \u2003 \u200b end",
    "mixed\u00a0nbsp and\u2028line separator",
    "!!!??? ... --- *** ### $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}}",
    "https://example.com/path?q=1&r=2#frag user@example.org",
    "ZWJ\u200dZWNJ\u200cBOM\ufeff",
    "\x00\x01\x07\x1b[31mred\x1b[0m\x7f",
    "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ　１２３",
    "\U0001d400\U0001d401 𝕏 ﬁ ﬂ ẞ ß",
)

_POOLS = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " " * 8 + "\t\n\r",
    ".,;:!?'\"()[]{}<>/\\|@#$%^&*-_=+~`",
    "éèêëàâäôöûüçñøåæœÅÉÑ",
    "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
    "的一是不了人我在有他这为之大来以个中上们",
    "あいうえおかきくけこアイウエオ",
    "가나다라마바사",
    "ابتثجحخدذ",
    "😀😂🤖🦙👍🏽❤️‍🔥🇯🇵",
    "\u0301\u0308\u200d\u00a0\u3000",
    "٠١٢٣٤٥٦٧٨٩",
)

_WORDS = (
    "the", " the", "The", "token", "izer", " ization", "  ", "\n", "\n\n", " 2024", "'s", "'S", "'ll",
    "def", " return", "()", "):", "{\"", "\"}", "<", ">", "</", "/>", "|", "<|", "|>", "▁", "Ġ", "Ċ",
)


def fixed_samples() -> list[str]:
    """Hand-picked edge cases (multilingual, emoji, digits, code, whitespace, control chars)."""
    return list(_FIXED)


def special_samples(added_tokens: list[str], compact: bool = False) -> list[str]:
    """Strings built around every added token: alone, in text, adjacent, spaced, and look-alikes.

    Args:
        added_tokens: contents of the tokenizer's added tokens (special or not).
        compact: one string per token (all its variants joined) instead of ~13.
    """
    if compact:
        return ["\n".join(special_samples([tok, added_tokens[(i + 1) % len(added_tokens)]])[:13])
                for i, tok in enumerate(added_tokens)]
    out: list[str] = []
    for i, tok in enumerate(added_tokens):
        other = added_tokens[(i + 1) % len(added_tokens)]
        out += [
            tok,
            f"a{tok}b",
            f" {tok} ",
            f"  {tok}\n\n",
            f"text {tok}text\n{tok}{other}",
            f"{tok}{tok}",
            f"x {tok} 12 {other} y",
        ]
        if len(tok) > 2:  # near misses: must NOT be matched as the added token
            out += [tok[:-1], tok[1:], f" {tok[:-1]} {tok[1:]}", tok.upper(), tok.lower(),
                    tok[:len(tok) // 2] + " " + tok[len(tok) // 2:]]
    return out


def random_samples(n: int, seed: int = 0, added_tokens: list[str] | None = None, max_len: int = 60) -> list[str]:
    """``n`` random strings mixing scripts, digits, whitespace runs, emoji and added tokens.

    Deterministic for a given ``seed``.
    """
    rng = random.Random(seed)
    pieces = list(_WORDS) + list(added_tokens or ())
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, max_len // 4)):
            r = rng.random()
            if r < 0.25:
                parts.append(rng.choice(pieces))
            else:
                pool = rng.choice(_POOLS)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def chat_like_prompts(added_tokens: list[str], n: int, seed: int = 0) -> list[str]:
    """``n`` prompt-shaped strings: corpus text interleaved with added tokens, newlines, spaces.

    For checking that encoding a prompt in segments equals encoding it whole.
    """
    rng = random.Random(seed)
    texts = fixed_samples() + random_samples(200, seed + 1, added_tokens)
    glue = ("", "", "\n", " ", "  ", "\n\n", "user\n", "assistant\n", "\t")
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if added_tokens and rng.random() < 0.5:
                parts.append(rng.choice(glue) + rng.choice(added_tokens) + rng.choice(glue))
            parts.append(rng.choice(texts))
        out.append("".join(parts))
    return out


def selfcheck_corpus(added_tokens: list[str], n_random: int = 200, seed: int = 0) -> list[str]:
    """Fixed + one string per added token + ``n_random`` random strings (load-time self-check)."""
    return (fixed_samples() + special_samples(added_tokens, compact=True)
            + random_samples(n_random, seed, added_tokens))


def large_corpus(added_tokens: list[str], n_random: int, seed: int = 7, max_len: int = 60) -> list[str]:
    """The large corpus the test suite runs: fixed + all per-token variants + ``n_random`` random."""
    return fixed_samples() + special_samples(added_tokens) + random_samples(n_random, seed, added_tokens, max_len)
