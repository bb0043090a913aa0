"""Incremental JSON value scanner that only ever releases text that can still be valid.

Theory of operation. A model writes a JSON value (usually the arguments object of a tool
call) a few characters at a time. We want to stream it to the client *as written*, but
the concatenation of what we stream must always be the prefix of valid JSON (one that
nothing but ``"``, ``}`` and ``]`` would close: ``repair()``) — never characters a
partial-JSON completer made up, never re-sent text (case 10). A call cut off keeps that
prefix as its arguments (``cut()``): nothing is invented to close it (issue 15).

The scanner is a pushdown automaton over characters. ``stack`` holds the open containers,
``mode`` says what is expected next. After each character it knows whether the text seen
so far is at a *safe point*:

=======================  =====================================================
safe                      not safe (held in ``pend`` until the next safe point)
=======================  =====================================================
just after ``{`` or ``[``   after ``,`` or ``:``; inside an object key
inside a string value       inside an escape sequence (``\\``, ``\\u12``)
after a complete value      inside a number or ``true``/``false``/``null``
=======================  =====================================================

At a safe point the pending text is released. ``repair()`` gives the closers for the
released prefix. Raw control characters inside strings (which strict JSON forbids but
models write) are released in escaped form, so released text is always strict JSON.

State is a handful of short strings: the container stack, the mode, and the pending text
(bounded by one key plus one scalar token).
"""

from __future__ import annotations

import json
import re
from enum import StrEnum

_WS = " \t\n\r"
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")
_LITERALS = ("true", "false", "null")
_PARTIAL_TOKEN = re.compile(r"-?(?:0|[1-9]\d*)?(?:\.\d*)?(?:[eE][+-]?\d*)?\Z|t(?:r(?:ue?)?)?\Z|f(?:a(?:l(?:se?)?)?)?\Z|n(?:u(?:ll?)?)?\Z")
_PLAIN_RUN = re.compile(r'[^"\\\x00-\x1f]+')
_HEX = set("0123456789abcdefABCDEF")
_CLOSE = {"{": "}", "[": "]"}


class Mode(StrEnum):
    """What the scanner expects next. The values are one character each (exported state
    stays tiny) and are the codes states exported by earlier versions carry."""

    BEFORE = "B"      # nothing yet, skipping leading whitespace
    VALUE = "V"       # a value must come (after ':' or ',')
    FIRST_ITEM = "v"  # after '[': a value or ']'
    KEY = "K"         # a key must come (after ',')
    FIRST_KEY = "k"   # after '{': a key or '}'
    STR = "S"         # inside a string value
    KSTR = "s"        # inside an object key
    ESC = "E"         # after '\' in a string value
    KESC = "e"        # after '\' in a key
    UNI = "U"         # inside \\uXXXX of a string value (count in ``tok``)
    KUNI = "u"        # inside \\uXXXX of a key
    TOKEN = "N"       # inside a number or literal (text in ``tok``)
    COLON = "C"       # after a key
    AFTER = "A"       # after a value inside a container
    DONE = "D"        # the value is complete
    ERROR = "X"       # the text is not JSON


(BEFORE, VALUE, FIRST_ITEM, KEY, FIRST_KEY, STR, KSTR, ESC, KESC, UNI, KUNI, TOKEN, COLON, AFTER, DONE,
 ERROR) = Mode

_SAFE = frozenset((FIRST_ITEM, FIRST_KEY, STR, AFTER, DONE))


class JsonValue:
    """Scans one JSON value incrementally; see the module docstring.

    ``feed(text, pos)`` consumes characters of ``text`` from ``pos`` until the value is
    complete (``done``), the text is not JSON (``error``; the offending character is not
    consumed) or the text runs out. It returns ``(next_pos, released_text)``.
    ``require`` restricts the first character (``"{"`` for arguments objects).
    """

    __slots__ = ("stack", "mode", "pend", "tok", "require")

    def __init__(self, require: str | None = None) -> None:
        self.stack = ""
        self.mode = BEFORE
        self.pend = ""
        self.tok = ""
        self.require = require

    # -- plain-data state -------------------------------------------------------------
    def export(self) -> list:
        """Plain data: ``[stack, mode, pend, tok, require]``."""
        return [self.stack, self.mode.value, self.pend, str(self.tok), self.require]

    @classmethod
    def load(cls, data: list) -> "JsonValue":
        """Inverse of :meth:`export`."""
        obj = cls(data[4])
        obj.stack, obj.mode, obj.pend, obj.tok = data[0], Mode(data[1]), data[2], data[3]
        return obj

    # -- queries ----------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.mode == DONE

    @property
    def error(self) -> bool:
        return self.mode == ERROR

    @property
    def empty(self) -> bool:
        """Nothing but blanks seen yet."""
        return self.mode == BEFORE

    def repair(self) -> str:
        """Closers that make the released text valid JSON (``""`` when already complete).

        Only meaningful once something was released; a value that never started has no
        repair (the caller decides what an absent value means).
        """
        mode = self.tok if self.mode == ERROR else self.mode
        out = '"' if mode in (STR, ESC, UNI) else ""
        return out + "".join(_CLOSE[c] for c in reversed(self.stack))

    def cut(self) -> str:
        """The input stops here for good: the text still held that the value so far
        consists of (a pending number or literal, the start of a key, a comma), so
        released + returned text is everything written while it was still JSON — no
        closers added. ``""`` after an error (the held text was not JSON)."""
        if self.mode == TOKEN and not self._token_ok():
            if not _PARTIAL_TOKEN.match(self.tok):
                return ""
        elif self.mode == ERROR:
            return ""
        return self._release()

    def end_of_input(self) -> str:
        """The input ended: a pending number/literal completes here. Returns released text.
        A token that can only be the start of one (``tr``, ``1.``) stays pending for
        :meth:`cut`; one that cannot is an error."""
        if self.mode == TOKEN:
            if self._token_ok():
                self.tok = ""
                self._close_value()
                return self._release()
            if not _PARTIAL_TOKEN.match(self.tok):
                self._fail()
        return ""

    # -- scanning ---------------------------------------------------------------------
    def _release(self) -> str:
        out, self.pend = self.pend, ""
        return out

    def _token_ok(self) -> bool:
        return self.tok in _LITERALS or bool(_NUMBER.match(self.tok))

    def _fail(self) -> None:
        self.tok, self.mode = self.mode, ERROR  # remember where it broke, for repair()

    def _close_value(self) -> None:
        self.mode = AFTER if self.stack else DONE

    def feed(self, text: str, pos: int = 0) -> tuple[int, str]:
        out: list[str] = []
        n = len(text)
        while pos < n and self.mode not in (DONE, ERROR):
            mode = self.mode
            c = text[pos]
            if mode == STR or mode == KSTR:
                m = _PLAIN_RUN.match(text, pos)
                if m:
                    self.pend += m.group()
                    pos = m.end()
                    if mode == STR:
                        out.append(self._release())
                    continue
                if c == '"':
                    self.pend += c
                    if mode == STR:
                        self._close_value()
                    else:
                        self.mode = COLON
                elif c == "\\":
                    self.pend += c
                    self.mode = ESC if mode == STR else KESC
                else:  # raw control character: release it escaped
                    self.pend += json.dumps(c)[1:-1]
                pos += 1
            elif mode == ESC or mode == KESC:
                if c == "u":
                    self.mode, self.tok = (UNI if mode == ESC else KUNI), ""
                elif c in '"\\/bfnrt':
                    self.mode = STR if mode == ESC else KSTR
                else:
                    self._fail()
                    break
                self.pend += c
                pos += 1
            elif mode == UNI or mode == KUNI:
                if c not in _HEX:
                    self._fail()
                    break
                self.pend += c
                self.tok += c
                pos += 1
                if len(self.tok) == 4:
                    self.mode, self.tok = (STR if mode == UNI else KSTR), ""
            elif mode == TOKEN:
                if c.isalnum() or c in "+-.":
                    self.tok += c
                    self.pend += c
                    pos += 1
                    if len(self.tok) > 64:
                        self._fail()
                elif self._token_ok():
                    self.tok = ""
                    self._close_value()
                else:
                    self._fail()
            elif c in _WS:
                if mode != BEFORE:
                    self.pend += c
                pos += 1
            elif mode in (BEFORE, VALUE, FIRST_ITEM):
                if self.require and mode == BEFORE and c != self.require:
                    self._fail()
                    break
                if c == "{" or c == "[":
                    self.stack += c
                    self.mode = FIRST_KEY if c == "{" else FIRST_ITEM
                elif c == '"':
                    self.mode = STR
                elif c == "]" and mode == FIRST_ITEM:
                    self.stack = self.stack[:-1]
                    self._close_value()
                elif c == "-" or c.isdigit() or c in "tfn":
                    self.mode, self.tok = TOKEN, c
                else:
                    self._fail()
                    break
                self.pend += c
                pos += 1
            elif mode in (KEY, FIRST_KEY):
                if c == '"':
                    self.mode = KSTR
                elif c == "}" and mode == FIRST_KEY:
                    self.stack = self.stack[:-1]
                    self._close_value()
                else:
                    self._fail()
                    break
                self.pend += c
                pos += 1
            elif mode == COLON:
                if c != ":":
                    self._fail()
                    break
                self.mode = VALUE
                self.pend += c
                pos += 1
            elif mode == AFTER:
                top = self.stack[-1]
                if c == ",":
                    self.mode = KEY if top == "{" else VALUE
                elif c == _CLOSE[top]:
                    self.stack = self.stack[:-1]
                    self._close_value()
                else:
                    self._fail()
                    break
                self.pend += c
                pos += 1
            else:  # pragma: no cover - every mode is handled above
                raise AssertionError(mode)
            if self.mode in _SAFE and self.pend:
                out.append(self._release())
        return pos, "".join(out)


__all__ = ["JsonValue"]
