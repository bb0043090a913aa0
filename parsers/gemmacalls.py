"""Gemma's ``call:NAME{key:value,…}`` bodies (vLLM ``gemma4``, ``functiongemma``).

Format (Gemma 4 chat template; FunctionGemma model card)::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,opts:{unit:<|"|>C<|"|>},tags:[<|"|>a<|"|>]}<tool_call|>
    <start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>

Keys are bare; strings sit between the family's delimiter (``ToolFormat.quote``) and are
verbatim (no escaping layer, so a ``}`` or ``,`` inside one is text); objects ``{…}`` and
arrays ``[…]`` nest; any other value is a bare literal, typed by the tool's schema for a
top-level parameter (:func:`parsers.schema.coerce`) and otherwise kept as the string the
model wrote, as vLLM 0.33 does (``tags:[2]`` → ``["2"]``). The framing row's header (``call:NAME``, ending at ``{``)
started the call; this body reads up to the matching ``}`` and writes the arguments once.
Cut off by the end of output, the call is not complete (issue 15): cut inside a string,
its arguments end with that string's text so far; elsewhere they hold the whole values.
"""

from __future__ import annotations

import json

from .calls import Calls
from .collected import Collected, close_started
from .schema import coerce, is_string_only

_WS = " \t\r\n"


class GemmaCall(Collected):
    """Arguments ``key:value,…}`` of one call whose name the header gave."""

    kind = "gemma"
    __slots__ = ("depth", "inq")

    def __init__(self, fmt=None) -> None:
        super().__init__(fmt)
        self.depth = 0     # open { [ inside the arguments
        self.inq = False   # inside a quoted string

    def _export_extra(self) -> list:
        return [self.depth, self.inq]

    def _load_extra(self, extra: list) -> None:
        self.depth, self.inq = extra

    def _scan(self, text: str, final: bool) -> tuple[int | None, int]:
        q = self.fmt.quote
        i, n = self.mark, len(text)
        while i < n:
            if text.startswith(q, i):
                self.inq = not self.inq
                i += len(q)
                continue
            if q.startswith(text[i:]) and not final:
                break  # a delimiter may be arriving
            if not self.inq:
                c = text[i]
                if c in "{[":
                    self.depth += 1
                elif c in "}]":
                    if self.depth == 0:
                        return i + 1, i + 1
                    self.depth -= 1
            i += 1
        self.mark = i
        return None, len(text)

    def _emit(self, body: str, calls: Calls, complete: bool) -> bool:
        if complete:
            body = body[:-1]  # the closing brace
        types = calls.types(calls.name)
        value, _ = _object(body, 0, self.fmt.quote, types, top=True)
        args = json.dumps(value, ensure_ascii=False)
        if not complete and value and body.rstrip(_WS) and not body.rstrip(_WS).endswith(","):
            if self.inq and self.depth == 0 and isinstance(value[next(reversed(value))], str):
                args = args[:-2]  # cut inside a string: its text so far, no quote or brace invented
            else:  # cut inside a bare value or a nested one: only the whole values are kept
                value.popitem()
                args = json.dumps(value, ensure_ascii=False)
        return close_started(calls, args, complete)


def _skip(text: str, i: int) -> int:
    while i < len(text) and (text[i] in _WS or text[i] == ","):
        i += 1
    return i


def _object(text: str, i: int, q: str, types: dict | None, top: bool = False) -> tuple[dict, int]:
    """Pairs ``key:value`` from ``text[i:]`` up to a ``}`` (consumed) or the end."""
    out: dict = {}
    while True:
        i = _skip(text, i)
        if i >= len(text):
            return out, i
        if text[i] == "}" and not top:
            return out, i + 1
        colon = text.find(":", i)
        if colon < 0:
            return out, len(text)  # a key cut off by the end of output: dropped
        key = text[i:colon].strip()
        if key.startswith(q) and key.endswith(q) and len(key) >= 2 * len(q):
            key = key[len(q):-len(q)]
        value, i = _value(text, _skip_ws(text, colon + 1), q, (types or {}).get(key))
        out[key] = value


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _array(text: str, i: int, q: str) -> tuple[list, int]:
    out: list = []
    while True:
        i = _skip(text, i)
        if i >= len(text):
            return out, i
        if text[i] == "]":
            return out, i + 1
        value, i = _value(text, i, q, None)
        out.append(value)


def _value(text: str, i: int, q: str, types: list[str] | None):
    if text.startswith(q, i):
        end = text.find(q, i + len(q))
        if end < 0:
            return text[i + len(q):], len(text)
        return text[i + len(q):end], end + len(q)
    if i < len(text) and text[i] == "{":
        return _object(text, i + 1, q, None)
    if i < len(text) and text[i] == "[":
        return _array(text, i + 1, q)
    j = i
    while j < len(text) and text[j] not in ",}]":
        j += 1
    raw = text[i:j].strip()
    if not types or is_string_only(types):
        return raw, j
    return json.loads(coerce(raw, types)), j


__all__ = ["GemmaCall"]
