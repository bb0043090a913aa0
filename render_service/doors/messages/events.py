"""The Anthropic Messages door's events: one choice's deltas → an Anthropic ``message``
/ its stream events. Sans-IO; the state is a few counters, bounded whatever the output
length (Anthropic's events never repeat earlier text).

Streaming (Anthropic's event grammar, as vLLM 0.33's ``message_stream_converter`` emits
it)::

    message_start
    per content block, in order of appearance (thinking, text, tool_use):
      content_block_start, content_block_delta* (thinking_delta | text_delta |
      input_json_delta), [signature_delta for thinking], content_block_stop
    message_delta (stop_reason, stop_sequence, usage), message_stop

Non-streaming is the same machine fed one whole delta; `AnthropicMessage` folds events
into the ``message`` exactly as the SDKs accumulate them, so both answers agree by
construction. ``stop_reason``: ``max_tokens`` on ``length``; ``tool_use`` when a tool
was called; ``stop_sequence`` (+ the string) when a stop string matched; else
``end_turn`` (vLLM's ``_to_anthropic_stop_reason``). A thinking block's ``signature``
is derived from the message id and block index (stable, so a client can send it back);
an answer with no block gets one empty text block, streamed too.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def stop_reason(finish_reason: str | None, stop: int | str | None, tool_used: bool) -> tuple[str | None, str | None]:
    """OpenAI ``finish_reason`` / ``stop_reason`` → Anthropic ``(stop_reason, stop_sequence)``."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason not in ("stop", "tool_calls"):
        return None, None
    if tool_used:
        return "tool_use", None
    if isinstance(stop, str):
        return "stop_sequence", stop
    return "end_turn", None


def signature(message_id: str, index: int) -> str:
    """The ``signature`` of thinking block ``index``: 32 hex, stable for the message."""
    return hashlib.sha256(f"{message_id}:{index}".encode()).hexdigest()[:32]


class AnthropicStream:
    """Deltas of one choice → Anthropic stream events (dicts, each with its ``type``).

    Args:
        message_id: the message ``id``; model: its ``model``; input_tokens: prompt length.
        state: `export_state` of an earlier call, or None.

    Raises:
        ValueError: a malformed ``state``.
    """

    def __init__(self, message_id: str = "", model: str = "", input_tokens: int = 0, state: dict | None = None) -> None:
        if state is None:
            self.id, self.model, self.input_tokens = message_id, model, input_tokens
            self.index, self.open, self.tool_used, self.started, self.finished = 0, None, False, False, False
            return
        try:
            self.id, self.model, self.input_tokens = str(state["id"]), str(state["m"]), int(state["in"])
            self.index, self.open = int(state["i"]), state["o"]
            self.tool_used, self.started, self.finished = bool(state["tu"]), bool(state["st"]), bool(state["fin"])
            if self.open not in (None, "thinking", "text", "tool_use"):
                raise ValueError(f"unknown open block {self.open!r}")
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed Anthropic stream state ({exc})") from None

    def export_state(self) -> dict:
        """Plain JSON-able state (a few scalars)."""
        return {"id": self.id, "m": self.model, "in": self.input_tokens, "i": self.index, "o": self.open,
                "tu": self.tool_used, "st": self.started, "fin": self.finished}

    def step(self, delta: Any, output_tokens: int = 0) -> list[dict]:
        """One `Delta` → events; ``output_tokens`` (tokens so far) is read when it finishes."""
        if self.finished:
            return []
        out: list[dict] = []
        if not self.started:
            self.started = True
            out.append({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
                "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}})
        if delta.reasoning:
            out += self._text("thinking", delta.reasoning)
        if delta.content:
            out += self._text("text", delta.content)
        for call in delta.tool_calls:
            if call.name is not None:
                out += self._close()
                self.open, self.tool_used = "tool_use", True
                out.append({"type": "content_block_start", "index": self.index,
                            "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}})
            if call.arguments and self.open == "tool_use":
                out.append({"type": "content_block_delta", "index": self.index,
                            "delta": {"type": "input_json_delta", "partial_json": call.arguments}})
        if delta.finish_reason is not None:
            out += self.finish(delta.finish_reason, delta.stop_reason, output_tokens)
        return out

    def finish(self, finish_reason: str, stop: int | str | None, output_tokens: int) -> list[dict]:
        """Close the open block (or send the one empty text block) and end the message."""
        if self.finished:
            return []
        out = self._close()
        if self.index == 0:
            out += [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                    {"type": "content_block_stop", "index": 0}]
            self.index = 1
        self.finished = True
        reason, sequence = stop_reason(finish_reason, stop, self.tool_used)
        out += [{"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                 "usage": {"input_tokens": self.input_tokens, "output_tokens": output_tokens}},
                {"type": "message_stop"}]
        return out

    def _text(self, kind: str, text: str) -> list[dict]:
        out: list[dict] = []
        if self.open != kind:
            out += self._close()
            self.open = kind
            block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else {"type": "text", "text": ""}
            out.append({"type": "content_block_start", "index": self.index, "content_block": block})
        field = "thinking" if kind == "thinking" else "text"
        out.append({"type": "content_block_delta", "index": self.index, "delta": {"type": f"{field}_delta", field: text}})
        return out

    def _close(self) -> list[dict]:
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":
            out.append({"type": "content_block_delta", "index": self.index,
                        "delta": {"type": "signature_delta", "signature": signature(self.id, self.index)}})
        out.append({"type": "content_block_stop", "index": self.index})
        self.open, self.index = None, self.index + 1
        return out


class AnthropicMessage:
    """Folds stream events into the ``message`` (as the Anthropic SDK accumulates them);
    holds the whole message, so it serves non-streaming answers and connection-held streams."""

    def __init__(self) -> None:
        self.message: dict | None = None
        self._json: dict[int, str] = {}

    def add(self, ev: dict) -> None:
        kind = ev["type"]
        if kind == "message_start":
            self.message = json.loads(json.dumps(ev["message"]))
        elif kind == "content_block_start":
            self.message["content"].append(dict(ev["content_block"]))
        elif kind == "content_block_delta":
            block, d = self.message["content"][ev["index"]], ev["delta"]
            if d["type"] == "text_delta":
                block["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                block["thinking"] += d["thinking"]
            elif d["type"] == "signature_delta":
                block["signature"] = d["signature"]
            elif d["type"] == "input_json_delta":
                self._json[ev["index"]] = self._json.get(ev["index"], "") + d["partial_json"]
        elif kind == "content_block_stop":
            raw = self._json.pop(ev["index"], None)
            if raw is not None:
                try:
                    self.message["content"][ev["index"]]["input"] = json.loads(raw)
                except ValueError:
                    self.message["content"][ev["index"]]["input"] = {}
        elif kind == "message_delta":
            self.message.update(ev["delta"])
            self.message["usage"] = dict(ev["usage"])
