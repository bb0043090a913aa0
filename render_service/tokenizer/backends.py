"""Encoder backends: the reference Hugging Face `tokenizers` and the fast `fastokens`.

A backend only encodes (text -> list of ids); decoding and vocabulary look-ups stay on
the reference tokenizer. Each backend returns the ids list its library builds, with no
per-token Python work.

Why `fastokens` as the fast backend (measured on this machine, Qwen3 tokenizer, 15k-token
chat prompt, see bench/bench_tokenize.py): HF `tokenizers` ~25 ms, `fastokens` ~0.2 ms.
`fastokens` (PyPI, Apache-2.0) reads the same ``tokenizer.json`` and implements the same
pipeline in Rust; equality is checked per tokenizer at load (`selfcheck.py`).
"""

from __future__ import annotations

from typing import Protocol

import tokenizers

__all__ = ["Backend", "BackendUnavailable", "HfBackend", "FastokensBackend", "make_backend"]


class BackendUnavailable(RuntimeError):
    """The fast backend cannot serve this tokenizer (library missing or pipeline unsupported)."""


class Backend(Protocol):
    """What `TextTokenizer` needs from an encoder."""

    name: str

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` runs the post-processor (BOS/EOS)."""
        ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Ids of each text, without post-processing."""
        ...


class HfBackend:
    """The reference: Hugging Face ``tokenizers.Tokenizer.encode``."""

    name = "hf"

    def __init__(self, hf: tokenizers.Tokenizer) -> None:
        self._hf = hf

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._hf.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._hf.encode_batch(texts, add_special_tokens=False)]


class FastokensBackend:
    """``fastokens.Tokenizer`` built from the same ``tokenizer.json`` text.

    Raises:
        BackendUnavailable: ``fastokens`` is not installed, or it rejects the tokenizer
            (e.g. a pipeline component it does not implement).
    """

    name = "fastokens"

    def __init__(self, hf: tokenizers.Tokenizer, spec_json: str | None = None) -> None:
        try:
            import fastokens
        except ImportError as exc:
            raise BackendUnavailable("fastokens is not installed (it is a core dependency: pip install fastokens)") from exc
        try:
            self._fast = fastokens.Tokenizer.from_json_str(spec_json or hf.to_str())
        except Exception as exc:  # the Rust side raises plain exceptions for unsupported pipelines
            raise BackendUnavailable(f"fastokens cannot load this tokenizer: {exc}") from exc
        # Our own segment cache sits above the backend; a second one would double memory
        # (fastokens turns its cache on when FASTOKENS_SEGMENT_CACHE is set).
        self._fast.enable_segment_cache(0)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._fast.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._fast.encode_batch(texts, add_special_tokens=False)]


def make_backend(kind: str, hf: tokenizers.Tokenizer, spec_json: str | None = None) -> Backend:
    """Backend named ``kind`` (``"hf"`` or ``"fast"``) over ``hf``.

    Raises:
        ValueError: unknown ``kind``.
        BackendUnavailable: the fast backend cannot be built.
    """
    if kind == "hf":
        return HfBackend(hf)
    if kind == "fast":
        return FastokensBackend(hf, spec_json)
    raise ValueError(f"unknown tokenizer backend {kind!r} (expected 'auto', 'hf' or 'fast')")
