"""Scripted backend: replays token sequences from a JSON file, no model needed.

For parser, derender and driver tests that need a tokens-only engine with exact,
repeatable output. Script file format (JSON)::

    {
      "model": "scripted",             # optional: default served model name
      "eos_token_ids": [2],            # optional: ids that stop generation like a model EOS
      "max_model_len": 8192,           # optional: prompts this long or longer get a 400
      "token_delay": 0.0,              # optional: seconds to wait before each token
      "responses": [
        {"match": [77091, 198],        # optional: the prompt must END with these ids
         "token_ids": [9707, 0, 2],    # the tokens to replay, in order (non-empty)
         "finish_reason": "stop",      # optional: reported with the last id (default "stop")
         "stop_reason": null,          # optional: reported with that finish_reason
         "token_delay": 0.05}          # optional: overrides the top-level delay
      ]
    }

A bare JSON list is shorthand for ``{"responses": [...]}``.

Choosing a response: the first entry whose ``match`` is a suffix of the prompt; otherwise
the entries without ``match`` in round-robin order (one step per request). A prefill leg
(``do_remote_decode``) takes the current round-robin entry without advancing, so a
P→D pair sees the same entry as one ``both`` request would. No entry → 400.

Replay obeys the normal stop rules (``max_tokens``, ``stop_token_ids``, ``eos_token_ids``
unless ``ignore_eos``); ``min_tokens`` only delays stopping, it cannot invent tokens.
Sampling parameters are otherwise ignored. KV handoff works with an empty payload: the
blob still carries the prompt prefix, so decode checks it like the real thing.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .backend import Finish, KVPrefix, SamplingSpec

_FINISH_REASONS = ("stop", "length")


@dataclass(frozen=True)
class ScriptedResponse:
    """One entry of the script (see the module docstring)."""

    token_ids: list[int]
    match: list[int] | None = None
    finish_reason: str = "stop"
    stop_reason: int | None = None
    token_delay: float | None = None


class NoScriptedResponse(ValueError):
    """No entry of the script applies to this prompt."""


def _id_list(value: Any, where: str, non_empty: bool = False) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value):
        raise ValueError(f"{where} must be a list of non-negative integers")
    if non_empty and not value:
        raise ValueError(f"{where} must not be empty (an engine always produces at least one token)")
    return value


def parse_script(data: Any) -> tuple[dict[str, Any], list[ScriptedResponse]]:
    """Validate decoded script JSON. Returns (settings, responses). Raises ValueError
    naming the offending field."""
    if isinstance(data, list):
        data = {"responses": data}
    if not isinstance(data, dict) or not isinstance(data.get("responses"), list) or not data["responses"]:
        raise ValueError('script must be {"responses": [...]} or a non-empty list')
    responses = []
    for i, entry in enumerate(data["responses"]):
        where = f"responses[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object")
        match = entry.get("match")
        finish = entry.get("finish_reason", "stop")
        if finish not in _FINISH_REASONS:
            raise ValueError(f"{where}.finish_reason must be one of {_FINISH_REASONS}")
        delay = entry.get("token_delay")
        if delay is not None and (not isinstance(delay, (int, float)) or delay < 0):
            raise ValueError(f"{where}.token_delay must be a non-negative number")
        stop_reason = entry.get("stop_reason")
        if stop_reason is not None and not isinstance(stop_reason, int):
            raise ValueError(f"{where}.stop_reason must be an integer or null")
        responses.append(
            ScriptedResponse(
                token_ids=_id_list(entry.get("token_ids"), f"{where}.token_ids", non_empty=True),
                match=None if match is None else _id_list(match, f"{where}.match"),
                finish_reason=finish,
                stop_reason=stop_reason,
                token_delay=delay,
            )
        )
    delay = data.get("token_delay", 0.0)
    if not isinstance(delay, (int, float)) or delay < 0:
        raise ValueError("token_delay must be a non-negative number")
    max_len = data.get("max_model_len")
    if max_len is not None and (not isinstance(max_len, int) or max_len < 2):
        raise ValueError("max_model_len must be an integer >= 2")
    model = data.get("model", "scripted")
    if not isinstance(model, str) or not model:
        raise ValueError("model must be a non-empty string")
    settings = {
        "model": model,
        "eos_token_ids": _id_list(data.get("eos_token_ids", []), "eos_token_ids"),
        "max_model_len": max_len,
        "token_delay": float(delay),
    }
    return settings, responses


class ScriptedSession:
    """Replays one `ScriptedResponse`."""

    def __init__(self, response: ScriptedResponse, delay: float, cancel: threading.Event, kv_export: bytes | None):
        self._response = response
        self._next = 0
        self._delay = delay
        self._cancel = cancel
        self.kv_export = kv_export
        self.end: Finish | None = None

    def next_token(self) -> int:
        """Next scripted id after the delay (the wait ends early on cancel; the caller
        checks cancel again). Sets ``end`` on the last id."""
        if self._delay:
            self._cancel.wait(self._delay)
        ids = self._response.token_ids
        token = ids[self._next]
        self._next += 1
        if self._next == len(ids):
            self.end = Finish(self._response.finish_reason, self._response.stop_reason)
        return token

    def retained(self) -> None:
        """A script holds no KV to hand to a later turn."""
        return None


class ScriptedBackend:
    """`Backend` that replays a script. Requests run concurrently (no model to guard)."""

    model_id = "scripted"

    def __init__(self, data: Any, source: str = "scripted"):
        settings, self.responses = parse_script(data)
        self.source = source
        self.default_name = settings["model"]
        self.eos_token_ids = settings["eos_token_ids"]
        self.max_model_len = settings["max_model_len"]
        self.token_delay = settings["token_delay"]
        # no delay anywhere: a replay takes microseconds, so the engine runs it on its event loop
        self.instant = not self.token_delay and not any(r.token_delay for r in self.responses)
        self.lock = contextlib.nullcontext()
        self._rr_lock = threading.Lock()
        self._rr_next = 0

    @classmethod
    def from_file(cls, path: str | Path) -> "ScriptedBackend":
        """Load a script file. Raises ValueError (bad JSON or format) or OSError."""
        try:
            data = orjson.loads(Path(path).read_bytes())
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from None
        try:
            return cls(data, source=str(path))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def pick(self, prompt: list[int], advance: bool = True) -> ScriptedResponse:
        """The entry for ``prompt`` (module docstring rules). Raises `NoScriptedResponse`."""
        for r in self.responses:
            if r.match is not None and len(r.match) <= len(prompt) and prompt[len(prompt) - len(r.match) :] == r.match:
                return r
        pool = [r for r in self.responses if r.match is None]
        if not pool:
            raise NoScriptedResponse("no scripted response matches the end of this prompt")
        with self._rr_lock:
            chosen = pool[self._rr_next % len(pool)]
            if advance:
                self._rr_next += 1
        return chosen

    def check_prompt(self, prompt: list[int]) -> None:
        """Raise `NoScriptedResponse` (a ValueError) when no entry applies to ``prompt``."""
        self.pick(prompt, advance=False)

    def begin(
        self, prompt: list[int], sampling: SamplingSpec, kv: KVPrefix | None, export_kv: bool, cancel: threading.Event
    ) -> ScriptedSession:
        """Start replaying the entry for ``prompt``; ``kv`` is accepted as is (the blob's
        prefix was already checked). The exported payload is empty."""
        response = self.pick(prompt, advance=not export_kv)
        delay = self.token_delay if response.token_delay is None else response.token_delay
        return ScriptedSession(response, delay, cancel, b"" if export_kv else None)
