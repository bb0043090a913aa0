"""Python call-list bodies: ``[get_weather(city="Paris"), f(a=-1, b="x]")]``.

Format (vLLM ``pythonic`` / ``llama4_pythonic``, Llama 3.2 / Llama 4 / ToolACE): a Python
list of calls with keyword arguments only; values are Python literals (``True`` → ``true``,
``None`` → ``null``, tuples → arrays); dotted names are allowed.

Streaming rule: a call is written only when its text is complete (its closing
parenthesis at depth 0) and ``ast`` accepts it, so nothing wrong is ever sent. The text of
the call in progress is kept (it is unfinished) and checked as it grows — before the
``(`` it must look like a dotted identifier — so prose such as ``[Note] …`` is given back
as content at its first impossible character instead of being held to the end.
Brackets and quotes inside string literals do not count (``"x]"``).
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


class PythonCalls:
    """One ``[call, call, …]`` list (see module docstring)."""

    kind = "pythonic"
    __slots__ = ("st", "cur", "depth", "quote", "status")

    def __init__(self, fmt=None) -> None:
        self.st = Calling.OPEN
        self.cur: list[str] = []  # text of the call in progress, in pieces (joined when complete)
        self.depth = 0         # open brackets inside the call
        self.quote = ""        # open string delimiter inside the call (' " ''' \"\"\")
        self.status = MORE

    def export(self) -> list:
        return [self.st.value, "".join(self.cur), self.depth, self.quote, self.status]

    @classmethod
    def load(cls, data: list, fmt=None) -> "PythonCalls":
        obj = cls()
        obj.st, cur, obj.depth, obj.quote, obj.status = data
        obj.cur = [cur] if cur else []
        obj.st, obj.status = Calling(obj.st), Status(obj.status)
        return obj

    def feed(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        n = len(text)
        while pos < n and self.status == MORE and not calls.boundary:
            if self.st == Calling.CALL:
                new = self._in_call(text, pos, final, calls)
                if new == pos and self.status == MORE:
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
            else:
                self.status = ERROR
        return pos

    def _in_call(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        n = len(text)
        start = pos
        while pos < n:
            c = text[pos]
            q = self.quote
            if q:
                if c == "\\":
                    if pos + 1 == n and not final:
                        break  # need the escaped character too
                    pos = min(pos + 2, n)
                    continue
                if text.startswith(q, pos):
                    self.quote = ""
                    pos += len(q)
                    continue
                if len(q) == 3 and c == q[0] and pos + 3 > n and not final:
                    break  # might be the closing triple quote
                pos += 1
                continue
            if c in "'\"":
                if pos + 3 > n and not final and text[pos:] == c * (n - pos):
                    break  # one or three quotes? wait for more
                self.quote = c * 3 if text.startswith(c * 3, pos) else c
                pos += len(self.quote)
                continue
            if self.depth == 0 and c != "(":
                if not _NAME_SO_FAR.match("".join(self.cur) + text[start:pos + 1]):
                    self.cur.append(text[start:pos])
                    self.status = ERROR
                    return pos
                pos += 1
                continue
            if c in _OPEN:
                self.depth += 1
            elif c in _CLOSE:
                self.depth -= 1
                if self.depth == 0:
                    pos += 1
                    self.cur.append(text[start:pos])
                    self._emit(calls)
                    return pos
            pos += 1
        self.cur.append(text[start:pos])
        return pos

    def _emit(self, calls: Calls) -> None:
        parsed = call_to_json("".join(self.cur))
        # a name the tools lack is still reported as a call, as vLLM does and as in JSON
        # lists, so the calls after it are kept (issue 15)
        if parsed is None or not calls.plausible(parsed[0]):
            self.status = ERROR
            return
        calls.start(parsed[0])
        calls.args(parsed[1])
        calls.end()
        self.st, self.cur = Calling.NEXT, []

    def finish(self, calls: Calls) -> None:
        # an unfinished call is never guessed; a list missing only its ']' is accepted
        self.status = DONE if self.st == Calling.NEXT else ERROR


__all__ = ["PythonCalls", "call_to_json"]
