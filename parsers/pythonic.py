"""Python call-list bodies: ``[get_weather(city="Paris"), f(a=-1, b="x]")]``.

Format (vLLM ``pythonic`` / ``llama4_pythonic``, Llama 3.2 / Llama 4 / ToolACE): a Python
list of calls with keyword arguments only; values are Python literals (``True`` → ``true``,
``None`` → ``null``, tuples → arrays); dotted names are allowed.

Streaming rule (issue 40): a call starts at its first argument's ``=`` (or its ``)``) — before
that, the text must look like ``dotted.name(key=`` at every character, so prose such as
``[Note] …`` is given back as content at its first impossible character — and its arguments
are written as they come: a string value character by character as JSON string text (Python
escapes decoded, ``"a" "b"`` joined, a raw newline read as ``\n``), any other value (number,
``True``, a list …) once whole, translated by ``ast.literal_eval``. What arrives joins to
exactly :func:`call_to_json`'s arguments for the whole call. A call that breaks after it
started, or is cut off, ends not complete (:mod:`parsers.calls`); text after the break is
content. Brackets and quotes inside string literals do not count (``"x]"``). The state
holds the name, the argument name, a literal value or an escape sequence being read.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from enum import StrEnum

from .calls import DONE, ERROR, MORE, Calls, Status

_WS = " \t\n\r"
_NAME_SO_FAR = re.compile(r"[A-Za-z_][\w.]*\Z")
_OPEN, _CLOSE = "([{", ")]}"
_KEYWORD_ARG = re.compile(r"([(,]\s*)([A-Za-z_]\w*)(\s*=(?!=))")


def _as_python(src: str) -> tuple[str, dict[str, str]]:
    """Make a model's call text acceptable to ``ast``: argument names that are Python
    keywords (``from=1``: JSON-schema property names need not be identifiers Python
    allows) become placeholders, returned as ``{placeholder: name}``; raw newlines inside
    one-line string literals (models write them; Python does not allow them) become
    ``\\n``. Everything else is left as written."""
    out: list[str] = []
    names: dict[str, str] = {}
    quote, depth, i, n = "", 0, 0, len(src)
    while i < n:
        c = src[i]
        if quote:
            if c == "\\":
                out.append(src[i:i + 2])
                i += 2
                continue
            if src.startswith(quote, i):
                out.append(quote)
                i += len(quote)
                quote = ""
                continue
            out.append("\\n" if c == "\n" and len(quote) == 1 else c)
            i += 1
            continue
        if c in "'\"":
            quote = c * 3 if src.startswith(c * 3, i) else c
            out.append(quote)
            i += len(quote)
            continue
        depth += (c in _OPEN) - (c in _CLOSE)
        m = _KEYWORD_ARG.match(src, i) if depth == 1 and c in "(," else None
        if m and keyword.iskeyword(m.group(2)):
            alias = f"_kw{len(names)}_"
            names[alias] = m.group(2)
            out.append(m.group(1) + alias + m.group(3))
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out), names


def call_to_json(src: str) -> tuple[str, str] | None:
    """``'f(a=1, b=None)'`` -> ``('f', '{"a": 1, "b": null}')``; None if not a keyword-only call.

    Argument names may be Python keywords (``f(from=1)``) and one-line strings may hold
    raw newlines (see :func:`_as_python`)."""
    code, renamed = _as_python(src.strip())
    try:
        node = ast.parse(code, mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if not isinstance(node, ast.Call) or node.args:
        return None
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    parts.append(func.id)
    args = {}
    for kw in node.keywords:
        if kw.arg is None:
            return None
        try:
            args[renamed.get(kw.arg, kw.arg)] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    try:
        # allow_nan=False: 1e999 is no JSON number (never "Infinity" in arguments), so no call
        return ".".join(reversed(parts)), json.dumps(args, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None


class Calling(StrEnum):
    """Where a Python call list is; the values are the codes exported states carry."""

    OPEN = "["        # before '['
    FIRST = "e"       # after '[': a call or ']'
    ELEMENT = "E"     # after ',': a call
    CALL = "c"        # inside a call
    NEXT = ","        # after a call: ',' or ']'


class Slot(StrEnum):
    """Where a call in progress is; the values are the codes exported states carry."""

    NAME = "n"    # the dotted function name, up to '('
    KEY = "k"     # before an argument name (or the call's ')')
    VALUE = "v"   # after '=': the value's first character decides string or literal
    STR = "s"     # inside a string value, streamed
    SEP = "e"     # after a string literal: another one (concatenated), ',' or ')'
    LIT = "l"     # any other value, collected to its end
    AFTER = "a"   # after a literal value: ',' or ')'


_ESC_LEN = {"x": 4, "u": 6, "U": 10}
_MAX_ESC = 12  # longest escape sequence read (``\N{…}`` names longer than this are refused)


class PythonCalls:
    """One ``[call, call, …]`` list (see module docstring)."""

    kind = "pythonic"
    __slots__ = ("st", "cur", "depth", "quote", "status", "slot", "name", "key", "args", "reopened")

    def __init__(self, fmt=None) -> None:
        self.st = Calling.OPEN
        self.cur: list[str] = []  # the name, key, literal value or escape sequence being read
        self.depth = 0         # open brackets inside a literal value
        self.quote = ""        # open string delimiter
        self.status = MORE
        self.slot = Slot.NAME
        self.name = ""         # the call's name once its '(' is read
        self.key = ""          # the argument's name (JSON) until its value is written
        self.args = 0          # arguments begun; the call starts with the first
        self.reopened = ""     # loaded from the whole-call layout: this call was open (not exported)

    def export(self) -> list:
        return [self.st.value, "".join(self.cur), self.depth, self.quote, self.status, self.slot.value, self.name,
                self.key, self.args]

    @classmethod
    def load(cls, data: list, fmt=None) -> "PythonCalls":
        if len(data) == 5:
            return cls._load_whole_call_layout(data)
        obj = cls()
        obj.st, cur, obj.depth, obj.quote, obj.status, obj.slot, obj.name, obj.key, obj.args = data
        obj.cur = [cur] if cur else []
        obj.st, obj.status, obj.slot = Calling(obj.st), Status(obj.status), Slot(obj.slot)
        return obj

    @classmethod
    def _load_whole_call_layout(cls, data: list) -> "PythonCalls":
        """A state exported before calls streamed (``[st, text, depth, quote, status]``: inside a
        call, ``text`` is the call so far, read whole at its end): the call so far is read again
        into today's slots. Its events are dropped: the exporting code had sent them already
        (tests/test_parsers_compat.py, a rolling upgrade's stream_state)."""
        st, text, depth, quote, status = data
        obj = cls()
        if Calling(st) != Calling.CALL or not text:
            obj.st, obj.depth, obj.quote, obj.status = Calling(st), depth, quote, Status(status)
            obj.cur = [text] if text else []
            return obj
        obj.st, scratch, pos = Calling.CALL, Calls(None, None), 0
        while pos < len(text) and obj.status == MORE:
            scratch.boundary = False  # the call's start stops a read at a boundary: read on
            new = obj._in_call(text, pos, False, scratch)
            if new == pos:
                break
            pos = new
        obj.reopened = obj.name  # the call the stage's Calls must hold open (`ToolStage.load`)
        return obj

    def feed(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        n = len(text)
        while pos < n and self.status == MORE and not calls.boundary:
            if self.st == Calling.CALL:
                new = self._in_call(text, pos, final, calls)
                if new == pos and self.status == MORE and not calls.boundary:
                    break  # needs to see more characters (quote or escape at the end)
                pos = new
                continue
            c = text[pos]
            st = self.st
            if c in _WS:
                pos += 1
            elif st == Calling.OPEN and c == "[":
                self.st, pos = Calling.FIRST, pos + 1
            elif st in (Calling.FIRST, Calling.NEXT) and c == "]":
                self.status, pos = DONE, pos + 1
            elif st == Calling.NEXT and c == ",":
                self.st, pos = Calling.ELEMENT, pos + 1
            elif st in (Calling.FIRST, Calling.ELEMENT) and (c.isalpha() or c == "_"):
                self.st, self.cur, self.depth, self.quote = Calling.CALL, [], 0, ""
                self.slot, self.name, self.key, self.args = Slot.NAME, "", "", 0
            else:
                self.status = ERROR
        return pos

    # -- one call, streamed: its name, then argument by argument ----------------------------
    def _in_call(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        """Reads ``text[pos:]`` until the call ends or breaks, a call boundary, or more text
        is needed; returns the next position (``pos`` itself: wait for more)."""
        n = len(text)
        while pos < n and self.status == MORE and not calls.boundary:
            if self.slot == Slot.STR:
                new = self._in_string(text, pos, final, calls)
            elif self.slot == Slot.LIT:
                new = self._in_literal(text, pos, final, calls)
            else:
                new = self._between(text, pos, final, calls)
            if new == pos:
                break
            pos = new
        return pos

    def _between(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        c, slot = text[pos], self.slot
        if slot == Slot.NAME:
            name = "".join(self.cur)
            if c == "(" and name:
                self.name, self.cur, self.slot = name, [], Slot.KEY
                return pos + 1 if calls.plausible(name) else self._fail(pos, calls)
            if not _NAME_SO_FAR.match(name + c):
                return self._fail(pos, calls)
            self.cur.append(c)
            return pos + 1
        if slot == Slot.KEY and c in _WS and self.cur and not self.cur[-1].endswith(" "):
            self.cur.append(" ")  # the name ended: only '=' may follow
            return pos + 1
        if c in _WS:
            return pos + 1
        if slot == Slot.KEY:
            key = "".join(self.cur).rstrip()
            if c == ")" and not key:
                return self._close(pos + 1, calls)
            if c == "=" and key:
                return self._begin_value(pos + 1, calls, key)
            if (c.isalnum() or c == "_") and (key or not c.isdigit()) and not (self.cur and self.cur[-1].endswith(" ")):
                self.cur.append(c)
                return pos + 1
            return self._fail(pos, calls)
        if slot == Slot.VALUE or (slot == Slot.SEP and c in "'\""):
            if c in "'\"":  # a string ("a" "b" after one: the same string goes on)
                if pos + 3 > len(text) and not final and text[pos:] == c * (len(text) - pos):
                    return pos  # one or three quotes? wait for more
                if slot == Slot.VALUE:
                    calls.args(self._prefix() + '"')
                self.quote = c * 3 if text.startswith(c * 3, pos) else c
                self.slot = Slot.STR
                return pos + len(self.quote)
            self.slot, self.depth = Slot.LIT, 0
            return pos
        if c == "," or c == ")":  # SEP / AFTER: the argument ended
            if slot == Slot.SEP:
                calls.args('"')
            self.slot = Slot.KEY
            return pos + 1 if c == "," else self._close(pos + 1, calls)
        return self._fail(pos, calls)

    def _in_string(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        """A string value's characters, written as JSON string text as they come."""
        n, q, out = len(text), self.quote, []
        if self.cur:  # an escape sequence begun in an earlier piece
            pos = self._escape(text, pos, final, out, calls)
        while 0 <= pos < n:
            c = text[pos]
            if c == "\\":
                pos = self._escape(text, pos, final, out, calls)
                continue
            if c == q[0]:
                if text.startswith(q, pos):
                    self.slot, self.quote = Slot.SEP, ""
                    pos += len(q)
                    break
                if len(q) == 3 and pos + 3 > n and not final:
                    break  # might be the closing triple quote
            # a raw newline in a one-line string is read as "\n" (as call_to_json reads it)
            out.append(json.dumps(c, ensure_ascii=False)[1:-1])
            pos += 1
        calls.args("".join(out))
        return -pos - 1 if pos < 0 else pos

    def _escape(self, text: str, pos: int, final: bool, out: list[str], calls: Calls) -> int:
        """The escape sequence at ``text[pos:]`` (its start may be held in ``cur``): its JSON
        text appended to ``out``. Returns the position after it; ``len(text)`` with the
        unfinished sequence held in ``cur``; ``-pos - 1`` when it is no Python escape (the
        call breaks there)."""
        held = "".join(self.cur)
        seq = held + text[pos:pos + _MAX_ESC]
        need = _ESC_LEN.get(seq[1], 2) if len(seq) >= 2 else 0
        if len(seq) >= 2 and seq[1] == "N":
            need = seq.find("}") + 1
        elif len(seq) >= 2 and seq[1] in "01234567":
            k = 2
            while k < 4 and k < len(seq) and seq[k] in "01234567":
                k += 1
            need = k if k < len(seq) or k == 4 or final else 0
        if not need or len(seq) < need:
            if final or len(seq) >= _MAX_ESC:
                self.cur = []
                return self._break(pos, calls, out)
            self.cur = [seq]
            return len(text)
        self.cur = []
        try:
            value = ast.literal_eval('"' + seq[:need] + '"')
        except (SyntaxError, ValueError):
            return self._break(pos, calls, out)
        out.append(json.dumps(value, ensure_ascii=False)[1:-1])
        return pos + need - len(held)

    def _break(self, pos: int, calls: Calls, out: list[str]) -> int:
        calls.args("".join(out))
        out.clear()
        self._fail(pos, calls)
        return -pos - 1

    def _in_literal(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        """A non-string value (number, ``True``, a list …): collected to the ``,`` or ``)``
        that ends it, then written as JSON."""
        n, start = len(text), pos
        while pos < n:
            c = text[pos]
            q = self.quote
            if q:
                if c == "\\":
                    if pos + 1 == n and not final:
                        break
                    pos = min(pos + 2, n)
                    continue
                if text.startswith(q, pos):
                    self.quote = ""
                    pos += len(q)
                    continue
                if len(q) == 3 and c == q[0] and pos + 3 > n and not final:
                    break
                pos += 1
                continue
            if c in "'\"":
                if pos + 3 > n and not final and text[pos:] == c * (n - pos):
                    break
                self.quote = c * 3 if text.startswith(c * 3, pos) else c
                pos += len(self.quote)
                continue
            if self.depth == 0 and c in ",)":
                self.cur.append(text[start:pos])
                return self._end_literal(pos, calls)
            if c in _OPEN:
                self.depth += 1
            elif c in _CLOSE:
                self.depth -= 1
            pos += 1
        self.cur.append(text[start:pos])
        return pos

    def _end_literal(self, pos: int, calls: Calls) -> int:
        src, self.cur = "".join(self.cur).strip(), []
        try:
            value = json.dumps(ast.literal_eval(_as_python(src)[0]), ensure_ascii=False, allow_nan=False)
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            return self._fail(pos, calls)
        calls.args(self._prefix() + value)
        self.slot = Slot.AFTER
        return pos

    def _begin_value(self, pos: int, calls: Calls, key: str) -> int:
        if not self.args:  # the first argument's '=': it is a call now
            calls.start(self.name)
        self.args += 1
        self.key, self.cur, self.slot = json.dumps(key, ensure_ascii=False), [], Slot.VALUE
        return pos

    def _prefix(self) -> str:
        head = "{" if self.args == 1 else ", "
        return head + self.key + ": "

    def _close(self, pos: int, calls: Calls) -> int:
        if not self.args:
            calls.start(self.name)
        calls.args("}" if self.args else "{}")
        calls.end()
        self.st, self.cur, self.slot = Calling.NEXT, [], Slot.NAME
        return pos

    def _fail(self, pos: int, calls: Calls) -> int:
        """Not a call (before it started: the framing machine gives its text back), or a
        started call that breaks here: it ends not complete and what follows is content."""
        if self.args:
            calls.end(complete=False)
        self.status = ERROR
        return pos

    def finish(self, calls: Calls) -> None:
        # a list missing only its ']' is accepted; a call cut off after it started ends
        # not complete (a value cut before its end is not written; nothing is guessed)
        if self.st == Calling.CALL and self.args and self.status == MORE:
            calls.end(complete=False)
            self.status = DONE
            return
        self.status = DONE if self.st == Calling.NEXT else ERROR


__all__ = ["PythonCalls", "call_to_json"]
