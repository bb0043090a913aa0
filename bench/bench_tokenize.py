"""Tokenization cost of a rendered chat prompt: HF `tokenizers` vs fast backend vs segment cache.

Issue 6. Prints ms per encode (median) and ratios against HF `tokenizers` measured in this
same run, for the Qwen3 tokenizer (../shared/models/qwen3):

1. one ~9k-token chat prompt, unique text every iteration (no cache can help):
   HF, fastokens, tiktoken built from the same BPE ranks (for comparison only), fastokens + segment cache (cold);
2. an agent loop: 10 turns over a growing conversation (each turn adds a user and an
   assistant message, ~900 tokens); HF and fastokens re-encode everything, the segment
   cache only the new messages, so its per-turn cost should stay flat while k grows.

Every encoding is checked against HF before it is timed. Usage:
``python bench/bench_tokenize.py [--model DIR] [--iters N]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import unicodedata
from pathlib import Path

import tokenizers

from render_service.derender.detokenize import UNICODE_TO_BYTE
from render_service.tokenizer import DEFAULT_SEGMENT_CACHE_BYTES, TextTokenizer
from render_service.tokenizer.backends import FastokensBackend

WORDS_PER_MESSAGE = 250  # 10 turns ~ 9k Qwen3 tokens

_WORDS = (
    "the of and to in is that for it as with was on be by this are or from at which an have not but "
    "tokenizer render prompt engine request response stream token model server cache segment latency "
    "Rayleigh scattering explains why the sky is blue during the day and red at sunset because shorter "
    "wavelengths scatter more strongly than longer ones 2024 3.14 42 1,000 naïve café 東京 北京 сервер "
    "def return import class self None True False {} [] () => == != <= >= // # ; : , . ! ? 'quoted' \"dq\""
).split()


def _message(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    for i in range(0, n_words, rng.randint(8, 20)):  # sentences, newlines, unique numbers
        words[i] = f"{words[i]}.\n{rng.randint(0, 10**6)}"
    return " ".join(words)


def _chat(rng: random.Random, turns: int, words_per_message: int) -> list[str]:
    """Rendered Qwen-style prompts after each turn (ChatML + assistant generation prompt)."""
    text = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    prompts = []
    for _ in range(turns):
        text += f"<|im_start|>user\n{_message(rng, words_per_message)}<|im_end|>\n"
        text += f"<|im_start|>assistant\n<think>\n\n</think>\n\n{_message(rng, words_per_message)}<|im_end|>\n"
        prompts.append(text + "<|im_start|>assistant\n")
    return prompts


def _tiktoken_encoder(hf: tokenizers.Tokenizer):
    """tiktoken Encoding from the same byte-level BPE ranks (Qwen's regex; NFC done in Python)."""
    import tiktoken

    added = hf.get_added_tokens_decoder()
    ranks = {bytes(UNICODE_TO_BYTE[c] for c in tok): i for tok, i in hf.get_vocab(with_added_tokens=False).items()}
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    enc = tiktoken.Encoding("qwen-bench", pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens={t.content: i for i, t in added.items()})
    return lambda text: enc.encode(unicodedata.normalize("NFC", text), allowed_special="all")


def _time(fn, text: str) -> tuple[float, list[int]]:
    t0 = time.perf_counter()
    ids = fn(text)
    return (time.perf_counter() - t0) * 1000, ids


def main() -> None:
    default_model = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "qwen3"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=default_model, help="HF tokenizer dir (default: shared qwen3)")
    ap.add_argument("--iters", type=int, default=15, help="unique prompts per method (default 15)")
    ap.add_argument("--conversations", type=int, default=5, help="agent-loop conversations (default 5)")
    args = ap.parse_args()

    hf = tokenizers.Tokenizer.from_file(str(args.model / "tokenizer.json"))
    fast = FastokensBackend(hf)
    # the fast backend runs without the segment cache by default; force it on to measure it
    cached = TextTokenizer.from_hf(hf, backend="fast", name=args.model.name,
                                   segment_cache_bytes=DEFAULT_SEGMENT_CACHE_BYTES)
    methods = {
        "hf tokenizers": lambda s: hf.encode(s, add_special_tokens=False).ids,
        "fastokens": lambda s: fast.encode(s),
        "fastokens + segment cache (cold)": cached.encode,
    }
    try:
        methods["tiktoken (same ranks, NFC in Python)"] = _tiktoken_encoder(hf)
    except Exception as exc:  # noqa: BLE001 - optional comparison row
        print(f"(tiktoken row skipped: {exc})")

    rng = random.Random(1234)
    prompts = [_chat(rng, 10, WORDS_PER_MESSAGE)[-1] for _ in range(args.iters + 2)]  # 10 turns of history
    n_tokens = len(hf.encode(prompts[0]).ids)
    print(f"tokenizer {args.model.name}; prompt {len(prompts[0]):,} chars, {n_tokens:,} tokens; "
          f"{args.iters} unique prompts per method, median ms per encode")
    for name, fn in methods.items():  # exactness first; also warms up each path
        ok = all(fn(p) == hf.encode(p).ids for p in prompts[:2])
        if not ok:
            print(f"  !! {name} differs from HF on this prompt; its figure is not comparable")
    base = None
    for name, fn in methods.items():
        ms = statistics.median(_time(fn, p)[0] for p in prompts[2:])
        base = base or ms
        print(f"  {name:<40} {ms:8.3f} ms   x{base / ms:7.1f} vs HF")

    print(f"\nagent loop: 10 turns over a growing conversation (median of {args.conversations} conversations), "
          "ms per turn; the cached encoders see each conversation's earlier turns only")
    hf_cached = TextTokenizer.from_hf(hf, backend="hf")
    loop = {"hf tokenizers": methods["hf tokenizers"], "hf + segment cache": hf_cached.encode,
            "fastokens": methods["fastokens"], "fastokens + segment cache": cached.encode}
    per_turn: dict[str, list[list[float]]] = {name: [[] for _ in range(10)] for name in loop}
    sizes: list[int] = []
    for _ in range(args.conversations):
        conv = _chat(rng, 10, WORDS_PER_MESSAGE)  # fresh text: the cache only knows this conversation's past turns
        sizes = [len(hf.encode(p).ids) for p in conv]
        for k, prompt in enumerate(conv):
            want = hf.encode(prompt).ids
            for name, fn in loop.items():
                ms, ids = _time(fn, prompt)
                assert ids == want, f"{name} differs from HF at turn {k + 1}"
                per_turn[name][k].append(ms)
    print(f"  {'turn':>4} {'tokens':>7} " + " ".join(f"{n:>26}" for n in loop) + "   fast+cache x vs HF")
    for k in range(10):
        row = [statistics.median(per_turn[n][k]) for n in loop]
        print(f"  {k + 1:>4} {sizes[k]:>7,} " + " ".join(f"{v:>26.3f}" for v in row) + f"   x{row[0] / row[-1]:.0f}")
    stats = cached.cache_stats()
    print(f"\nsegment cache: {stats['hits']:,} hits, {stats['misses']:,} misses, {stats['entries']:,} entries, "
          f"{stats['bytes'] / 2**20:.1f} MiB of {stats['max_bytes'] / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
