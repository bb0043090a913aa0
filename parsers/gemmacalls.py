"""Gemma's ``call:NAME{key:value,…}`` bodies (vLLM ``gemma4``, ``functiongemma``).

Format (Gemma 4 chat template; FunctionGemma model card)::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,opts:{unit:<|"|>C<|"|>},tags:[<|"|>a<|"|>]}<tool_call|>
    <start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>

Keys are bare; strings sit between the family's delimiter (``ToolFormat.quote``) and are
verbatim (no escaping layer, so a ``}`` or ``,`` inside one is text); objects ``{…}`` and
arrays ``[…]`` nest; any other value is a bare literal, typed by the tool's schema for a
top-level parameter (:func:`parsers.schema.coerce`) and otherwise kept as the string the
model wrote, as vLLM 0.33 does (``tags:[2]`` → ``["2"]``). The framing row's header (``call:NAME``, ending at ``{``)
started the call; this body writes the arguments as they come (issue 40): a string value
character by character as JSON string text, an object, array or bare value once whole, up
to the matching ``}``. Cut off by the end of output, the call is not complete: cut inside a
string, its arguments end with that string's text so far; elsewhere they hold the whole
values. The state holds a key, a nested or bare value being read, never the call.
"""

from __future__ import annotations

import json
from enum import StrEnum

from .calls import DONE, MORE, Calls, Status
from .schema import coerce, is_string_only

_WS = " \t\r\n"


class Slot(StrEnum):
    """Where a Gemma call body is; the values are the codes exported states carry."""

    KEY = "k"     # before a key (or the closing '}')
    VALUE = "v"   # after ':'
    STR = "s"     # inside a quoted string value, streamed
    NEST = "n"    # inside an object or array value, collected to its end
    BARE = "b"    # a bare value, collected to ',' or '}'
    AFTER = "a"   # after a value: ',' or '}'


class GemmaCall:
    """Arguments ``key:value,…}`` of one call whose name the header gave (module docstring)."""

    kind = "gemma"
    __slots__ = ("fmt", "status", "slot", "cur", "key", "args", "depth", "inq")

    def __init__(self, fmt=None) -> None:
        self.fmt = fmt
        self.status = MORE
        self.slot = Slot.KEY
        self.cur = ""      # the key, or a nested / bare value, being read
        self.key = ""      # the argument's name (JSON) until its value is written
        self.args = 0      # arguments written
        self.depth = 0     # open { [ inside a nested value
        self.inq = False   # inside a quoted string of a nested value

    def export(self) -> list:
        return [self.status.value, self.slot.value, self.cur, self.key, self.args, self.depth, self.inq]

    @classmethod
    def load(cls, data: list, fmt=None) -> "GemmaCall":
        obj = cls(fmt)
        status, slot, obj.cur, obj.key, obj.args, obj.depth, obj.inq = data
        obj.status, obj.slot = Status(status), Slot(slot)
        return obj

    def feed(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        q, n = self.fmt.quote, len(text)
        while pos < n and self.status == MORE:
            slot, c = self.slot, text[pos]
            if slot == Slot.STR:
                i = text.find(q, pos)
                end = n if i < 0 else i
                if i < 0 and not final:  # a delimiter may be arriving: hold its start
                    end -= _partial(text[pos:], q)
                calls.args(json.dumps(text[pos:end], ensure_ascii=False)[1:-1])
                if i < 0:
                    return end
                calls.args('"')
                self.slot, pos = Slot.AFTER, i + len(q)
            elif slot == Slot.NEST:
                pos = self._nested(text, pos, final, calls)
                if self.slot == Slot.NEST:
                    return pos
            elif slot == Slot.BARE:
                j = pos
                while j < n and text[j] not in ",}":
                    j += 1
                self.cur += text[pos:j]
                if j == n:
                    return n
                raw, self.cur = self.cur.strip(), ""
                types = calls.types(calls.name).get(json.loads(self.key))
                value = raw if not types or is_string_only(types) else json.loads(coerce(raw, types))
                calls.args(self._prefix() + json.dumps(value, ensure_ascii=False))
                self.slot, pos = Slot.AFTER, j
            elif slot == Slot.KEY:
                if not self.cur and (c in _WS or c == ","):
                    pos += 1
                    continue
                if c == "}":  # the call's end (a key cut short before it is dropped)
                    self.cur = ""
                    self._close(calls)
                    return pos + 1
                i, stop = text.find(":", pos), text.find("}", pos)
                if stop >= 0 and (i < 0 or stop < i):
                    self.cur += text[pos:stop]
                    pos = stop
                    continue
                if i < 0:
                    self.cur += text[pos:]
                    return n
                key, self.cur = (self.cur + text[pos:i]).strip(), ""
                if key.startswith(q) and key.endswith(q) and len(key) >= 2 * len(q):
                    key = key[len(q):-len(q)]
                self.key, self.slot, pos = json.dumps(key, ensure_ascii=False), Slot.VALUE, i + 1
            elif c in _WS:
                pos += 1
            elif slot == Slot.VALUE:
                if text.startswith(q, pos):
                    calls.args(self._prefix() + '"')
                    self.slot, pos = Slot.STR, pos + len(q)
                elif q.startswith(text[pos:]) and not final:
                    return pos  # a delimiter may be arriving
                elif c in "{[":
                    self.slot, self.depth, self.inq = Slot.NEST, 0, False
                else:
                    self.slot = Slot.BARE
            elif c == "}":  # the call's end
                self._close(calls)
                return pos + 1
            else:  # AFTER: a ',' (or, missing, the next key)
                self.slot, pos = Slot.KEY, pos + (c == ",")
        return pos

    def _nested(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        """An object or array value: collected to its matching close, then written whole."""
        q, n, start = self.fmt.quote, len(text), pos
        while pos < n:
            if text.startswith(q, pos):
                self.inq = not self.inq
                pos += len(q)
                continue
            if q.startswith(text[pos:]) and not final:
                break  # a delimiter may be arriving
            c = text[pos]
            pos += 1
            if not self.inq and c in "{[":
                self.depth += 1
            elif not self.inq and c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    value, _ = _value(self.cur + text[start:pos], 0, q, None)
                    self.cur = ""
                    calls.args(self._prefix() + json.dumps(value, ensure_ascii=False))
                    self.slot = Slot.AFTER
                    return pos
        self.cur += text[start:pos]
        return pos

    def _prefix(self) -> str:
        self.args += 1
        return ("{" if self.args == 1 else ", ") + self.key + ": "

    def _close(self, calls: Calls) -> None:
        calls.args("}" if self.args else "{}")
        calls.end()
        self.status = DONE

    def finish(self, calls: Calls) -> None:
        """Cut off inside the body: not complete. Cut inside a string, the arguments end
        with its text so far; elsewhere they hold the whole values (a nested or bare value
        cut short is not written) and the object of them is closed (nothing invented)."""
        if self.status == MORE:
            if self.slot != Slot.STR:
                calls.args("}" if self.args else "{}")
            calls.end(complete=False)
            self.status = DONE


def _partial(s: str, q: str) -> int:
    """Length of the longest end of ``s`` that starts ``q``."""
    for k in range(min(len(q) - 1, len(s)), 0, -1):
        if q.startswith(s[-k:]):
            return k
    return 0


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
        if text[i] in "]}":  # (a mismatched closer ends it too: never a value read in place)
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
