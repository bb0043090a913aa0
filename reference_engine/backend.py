"""What the generation loop needs from a model: the `Backend` / `Session` protocol.

Two implementations: `llama_backend.LlamaBackend` (a GGUF run by llama.cpp) and
`scripted.ScriptedBackend` (replays token lists from a JSON file). Both are synchronous and
are driven from one worker thread per request; a backend whose model cannot run two
requests at once exposes a real lock in ``lock``.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SamplingSpec:
    """The subset of vLLM ``SamplingParams`` this engine honours (already validated).

    ``top_k`` ≤ 0 and ``top_p`` = 1 mean "off" (vLLM semantics); ``temperature`` 0 is greedy;
    ``seed`` None draws a fresh seed. ``max_tokens`` None means "until the context is full".
    ``stop_token_ids`` are suppressed until ``min_tokens`` tokens exist, like the model's EOS.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int | None = None
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0


@dataclass(frozen=True)
class Finish:
    """How a choice ended: vLLM ``finish_reason`` (stop|length|abort) and ``stop_reason``
    (the token id that stopped it, or None)."""

    finish_reason: str
    stop_reason: int | None = None


@dataclass(frozen=True)
class KVPrefix:
    """KV state received from another engine, to be used for ``token_ids`` (a strict prefix
    of the prompt). ``payload`` is backend-specific bytes (llama.cpp sequence state; empty
    when scripted) covering ``covered`` positions (None: exactly ``token_ids``); a payload
    that covers more — a decode engine's turn whose tail the new prompt no longer holds —
    is cut to ``len(token_ids)`` positions after loading, so no position past the first
    diverging token is ever used."""

    token_ids: list[int]
    payload: bytes = field(repr=False)
    covered: int | None = None


class KVStateError(Exception):
    """The received KV state cannot be used (wrong model, wrong tokens, corrupt bytes)."""


class Session(Protocol):
    """One request's generation after the prompt is in place."""

    kv_export: bytes | None
    """Backend KV payload for ``prompt[:-1]`` when ``begin(..., export_kv=True)``, else None."""
    end: Finish | None
    """Set when the token just returned is the backend's last (scripted replay exhausted):
    how the choice ends unless a stop rule fired first. Always None for a real model."""

    def next_token(self) -> int:
        """The next sampled token id. Blocks for as long as one decode step takes."""

    def retained(self) -> tuple[list[int], bytes] | None:
        """After sampling: ``(token ids, payload)`` of the KV the session now holds — the
        prompt and every sampled token but the last (never evaluated) — for a later turn of
        the conversation to pull; None when the backend keeps nothing (scripted)."""


class Backend(Protocol):
    """A loaded model (or script) that turns prompt token ids into output token ids."""

    model_id: str
    """Identity checked on KV handoff: prefill and decode must run the same weights."""
    source: str
    """What the operator passed (GGUF path or script path)."""
    default_name: str
    """Served model name when ``--served-model-name`` is absent (vLLM: the model path)."""
    eos_token_ids: list[int]
    max_model_len: int | None
    lock: AbstractContextManager

    def check_prompt(self, prompt: list[int]) -> None:
        """Raise ValueError (→ 400) when this backend can never serve ``prompt``."""

    def begin(
        self,
        prompt: list[int],
        sampling: SamplingSpec,
        kv: KVPrefix | None,
        export_kv: bool,
        cancel: threading.Event,
    ) -> Session:
        """Put ``prompt`` in place (loading ``kv`` for its prefix when given; snapshotting
        ``prompt[:-1]`` into ``session.kv_export`` when ``export_kv``) and return a session
        ready to sample. ``cancel`` lets slow steps give up early.
        Raises `KVStateError` when ``kv`` cannot be loaded."""
