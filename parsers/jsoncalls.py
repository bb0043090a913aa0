"""JSON call mechanisms: an arguments object, a ``{"name", "arguments"}`` envelope, lists
and ``;``-sequences of envelopes.

All of them sit on :class:`parsers.jsonstream.JsonValue`, so the arguments text a client
receives is exactly what the model wrote (string-escape aware: a ``</tool_call>`` inside a
JSON string is just text, case 12), released only at safe points (case 10), and closed
never closed by invention: a call the output cuts off ends not complete, and the framing
machine gives its text back as content (:mod:`parsers.calls`).

Body protocol (shared with the XML and Python mechanisms): ``feed(text, pos, final,
calls) -> pos`` consumes from ``text[pos:]`` and returns early at every call boundary;
``status`` is ``more``/``done``/``error``; ``finish(calls)`` ends the input;
``export()``/``load()`` give plain data.

Policy for envelopes (hermes, llama3_json, JSON lists):

* the call opens (``ToolCallStart``) once the ``name`` string is complete and, when
  tools were given, is one of them; an unknown name makes the whole block content;
* ``strict`` (llama3_json) also waits for the ``parameters``/``arguments`` key, so prose
  such as ``{"name": "Alice"}`` never becomes a call (case 18);
* arguments written before the name are held and released after the start (case 14);
* an arguments object is streamed raw; a missing, ``null`` or ``""`` arguments value is
  ``"{}"`` (case 11); a JSON string holding an object is unwrapped; any other value is
  kept as its JSON text;
* keys other than name/arguments are validated and ignored.
"""

from __future__ import annotations

import json
from enum import StrEnum

from .calls import DONE, ERROR, MORE, Calls, Status
from .jsonstream import JsonValue

_WS = " \t\n\r"


def _normalise_raw_args(raw: str) -> str:
    """Arguments given as a non-object JSON value -> arguments JSON text."""
    try:
        value = json.loads(raw)
    except ValueError:
        return "{}"
    if isinstance(value, str):
        inner = value.strip()
        if not inner:
            return "{}"
        try:
            if isinstance(json.loads(inner), dict):
                return inner
        except ValueError:
            pass
    if value is None:
        return "{}"
    return json.dumps(value, ensure_ascii=False)


class Env(StrEnum):
    """Where a ``{"name", "arguments"}`` envelope is; values are the exported codes."""

    OPEN = "{"        # before the opening brace
    FIRST_KEY = "k"   # after '{': a key or '}'
    KEY = "K"         # after ',': a key
    COLON = ":"       # after a key
    VALUE = "v"       # after ':'
    NEXT = ","        # after a value: ',' or '}'


class Items(StrEnum):
    """Where a list (``[…]``) or ``;``-sequence of envelopes is; values are the exported codes."""

    OPEN = "["        # list: before '['
    FIRST = "e"       # list: after '[': an element or ']'
    ELEMENT = "E"     # list: after ',': an element
    NEXT = ","        # list: after an element: ',' or ']'
    WANT = "o"        # sequence: an envelope must come
    AFTER = ";"       # sequence: after an envelope: ';', another envelope, or the end


class JsonArgs:
    """A bare arguments object whose call was already started by the caller (header formats)."""

    kind = "args"
    __slots__ = ("sub", "status")

    def __init__(self, fmt=None) -> None:
        self.sub = JsonValue(require="{")
        self.status = MORE

    def feed(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        pos, rel = self.sub.feed(text, pos)
        calls.args(rel)
        if self.sub.done:
            calls.end()
            self.status = DONE
        elif self.sub.error:
            calls.end(complete=False)  # the JSON broke: the arguments stop where it did
            self.status = ERROR
        return pos

    def finish(self, calls: Calls) -> None:
        rel = self.sub.end_of_input()
        if self.sub.done:
            calls.args(rel)
            calls.end()
        else:  # cut off: the arguments are the partial text, nothing invented
            calls.args(rel + self.sub.cut())
            calls.end(complete=False)
        self.status = DONE

    def export(self) -> list:
        return [self.sub.export(), self.status.value]

    @classmethod
    def load(cls, data: list, fmt=None) -> "JsonArgs":
        obj = cls()
        obj.sub = JsonValue.load(data[0])
        obj.status = Status(data[1])  # (states from before may carry a third, moot, flag)
        return obj


class JsonCall:
    """One ``{"name": …, "arguments": {…}}`` object (see module docstring for the policy)."""

    kind = "envelope"
    __slots__ = ("strict", "name_keys", "arg_keys", "st", "sub", "slot", "cur", "name", "args",
                 "pend", "raw", "started", "status", "in_list")

    NAME_KEYS = ("name",)
    ARG_KEYS = ("arguments", "parameters")

    def __init__(self, fmt=None) -> None:
        self.strict = bool(fmt and fmt.strict)
        self.name_keys = (fmt and fmt.name_keys) or self.NAME_KEYS  # family's keys (Cohere: tool_name)
        self.arg_keys = (fmt and fmt.arg_keys) or self.ARG_KEYS
        self.st = Env.OPEN
        self.sub: JsonValue | None = None
        self.slot = ""         # what the sub-scanner reads: key | name | args | raw | skip
        self.cur = ""          # captured text of key / name / non-object arguments
        self.name: str | None = None
        self.args = ""         # '' not seen | 'obj' streamed object | 'raw' captured value
        self.pend = ""         # arguments released before the call could start
        self.raw = ""          # normalised non-object arguments value
        self.started = False
        self.status = MORE
        self.in_list = False   # an element of a list of calls (set by JsonList, not state)

    # -- plain data -------------------------------------------------------------------
    def export(self) -> list:
        return [self.strict, self.st.value, self.sub.export() if self.sub else None, self.slot,
                self.cur, self.name, self.args, self.pend, self.raw, self.started, self.status]

    @classmethod
    def load(cls, data: list, fmt=None) -> "JsonCall":
        obj = cls(fmt)
        (obj.strict, obj.st, sub, obj.slot, obj.cur, obj.name, obj.args, obj.pend, obj.raw,
         obj.started, obj.status) = data
        obj.sub = JsonValue.load(sub) if sub else None
        obj.st, obj.status = Env(obj.st), Status(obj.status)
        return obj

    # -- scanning ---------------------------------------------------------------------
    def feed(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        n = len(text)
        while pos < n and self.status == MORE and not calls.boundary:
            if self.sub is not None:
                pos = self._feed_sub(text, pos, calls)
                continue
            c = text[pos]
            if c in _WS:
                pos += 1
                continue
            st = self.st
            if st == Env.OPEN and c == "{":
                self.st = Env.FIRST_KEY
            elif st in (Env.FIRST_KEY, Env.KEY) and c == '"':
                self.sub, self.slot, self.cur = JsonValue(), "key", ""
                continue  # the sub-scanner reads the quote
            elif st in (Env.FIRST_KEY, Env.NEXT) and c == "}":
                pos += 1
                self._close(calls)
                break
            elif st == Env.COLON and c == ":":
                self.st = Env.VALUE
            elif st == Env.NEXT:
                if c != ",":
                    return self._fail(pos, calls)
                self.st = Env.KEY
            elif st == Env.VALUE:
                self._open_value(c, calls)
                continue
            else:
                return self._fail(pos, calls)
            pos += 1
        return pos

    def _open_value(self, c: str, calls: Calls) -> None:
        key = self.cur
        self.sub, self.cur = JsonValue(), ""
        if key in self.name_keys and self.name is None:
            self.slot = "name"
        elif key in self.arg_keys and not self.args:
            self.args = self.slot = "obj" if c == "{" else "raw"
            self._maybe_start(calls)
        else:
            self.slot = "skip"

    def _feed_sub(self, text: str, pos: int, calls: Calls) -> int:
        sub = self.sub
        pos, rel = sub.feed(text, pos)
        if self.slot == "obj":
            if self.started:
                calls.args(rel)
            else:
                self.pend += rel
                self._maybe_start(calls)
        elif self.slot != "skip":
            self.cur += rel
        if sub.error:
            return self._fail(pos, calls)
        if sub.done:
            self._value_done(calls)
        return pos

    def _value_done(self, calls: Calls) -> None:
        slot, self.sub = self.slot, None
        if slot == "key":
            self.cur = json.loads(self.cur)
            self.st = Env.COLON
            return
        self.st = Env.NEXT
        if slot == "name":
            value = json.loads(self.cur)
            self.cur = ""
            if not isinstance(value, str):
                self.status = ERROR
                return
            self.name = value
            self._maybe_start(calls)
        elif slot == "raw":
            self.raw = _normalise_raw_args(self.cur)
            self._maybe_start(calls)
        self.cur = ""

    def _in_raw_value(self) -> bool:
        return self.args == "raw" and self.sub is not None and self.slot == "raw"

    def _ready(self, closing: bool) -> bool:
        """Has the envelope shown that it is a call? Its arguments object got past the
        opening brace (a first member, or its end), a non-object arguments value is
        complete, or the envelope closed. Until then broken JSON (``{invalid json}``) is
        text, not a call with invented arguments."""
        if self.args == "obj":
            return self.pend.rstrip(_WS) not in ("", "{")
        if self.args == "raw":
            return not self._in_raw_value()
        return closing

    def _maybe_start(self, calls: Calls, closing: bool = False) -> None:
        if self.started or self.name is None or (self.strict and not self.args):
            return
        if not self._ready(closing):
            return
        # in a list of calls, a name the tools lack is still reported as a call (vLLM
        # returns it; the client answers "unknown tool"), so the calls after it are kept
        if not (calls.valid(self.name) or (self.in_list and calls.plausible(self.name))):
            self.status = ERROR
            return
        calls.start(self.name)
        self.started = True
        calls.args(self.pend)
        self.pend = ""

    def _end_args(self, calls: Calls, cut: bool) -> None:
        """Write what is left of the started call's arguments and end it. ``cut``: the
        envelope stops before its ``}`` (end of output, or its JSON broke): arguments
        still open keep their partial text and the call is not complete."""
        complete = True
        if self.args == "obj" and self.sub is not None and self.slot == "obj":
            calls.args(self.sub.cut())
            complete = False
        elif self._in_raw_value():
            complete = False  # a non-object value is shown only once whole
        elif self.args == "raw":
            calls.args(self.raw)
        elif not self.args:
            calls.args("{}")  # the envelope closed without arguments (case 11)
        self.sub = None
        calls.end(complete)

    def _close(self, calls: Calls) -> None:
        self._maybe_start(calls, closing=True)
        if not self.started:
            self.status = ERROR
            return
        self._end_args(calls, cut=False)
        self.status = DONE

    def _fail(self, pos: int, calls: Calls) -> int:
        if self.started:
            self._end_args(calls, cut=True)
        self.status = ERROR
        return pos

    def finish(self, calls: Calls) -> None:
        if self.sub is not None and self.slot == "name":
            self.sub.end_of_input()
        if not self.started and self.sub is not None and self.slot == "obj":
            self.pend += self.sub.cut()  # held text of the cut-off arguments counts too
            self._maybe_start(calls)
        if self.started:
            self._end_args(calls, cut=True)
            self.status = DONE
        else:
            self.status = ERROR


class JsonList:
    """``[envelope, envelope, …]`` (mistral pre-v11, granite, xlam, ``tool_choice: required``)."""

    kind = "list"
    __slots__ = ("fmt", "st", "env", "status")
    FIRST = Items.OPEN     # state before the first character

    def __init__(self, fmt=None) -> None:
        self.fmt = fmt
        self.st = self.FIRST
        self.env: JsonCall | None = None
        self.status = MORE

    def export(self) -> list:
        return [self.st.value, self.env.export() if self.env else None, self.status]

    @classmethod
    def load(cls, data: list, fmt=None):
        obj = cls(fmt)
        obj.st, env, obj.status = data
        obj.st, obj.status = Items(obj.st), Status(obj.status)
        obj.env = obj._element(JsonCall.load(env, fmt)) if env else None
        return obj

    @staticmethod
    def _element(env: JsonCall) -> JsonCall:
        env.in_list = True
        return env

    def feed(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        n = len(text)
        while pos < n and self.status == MORE and not calls.boundary:
            if self.env is not None:
                pos = self.env.feed(text, pos, final, calls)
                if self.env.status == DONE:
                    self.env = None
                    self.st = self.after_element
                elif self.env.status == ERROR:
                    self.status = ERROR
                continue
            new = self._between(text, pos, final)
            if new is None:  # needs to see more text
                break
            pos = new
        return pos

    after_element = Items.NEXT

    def _between(self, text: str, pos: int, final: bool) -> int | None:
        """Structure outside the elements: ``[`` ``,`` ``]`` (states '[', 'e' first element
        or ']', 'E' element, ',' after an element)."""
        c, st = text[pos], self.st
        if c in _WS:
            return pos + 1
        if st == Items.OPEN and c == "[":
            self.st = Items.FIRST
        elif st in (Items.FIRST, Items.ELEMENT) and c == "{":
            self.env = self._element(JsonCall(self.fmt))
            return pos
        elif st in (Items.FIRST, Items.NEXT) and c == "]":
            self.status = DONE
        elif st == Items.NEXT and c == ",":
            self.st = Items.ELEMENT
        else:
            self.status = ERROR
            return pos
        return pos + 1

    def finish(self, calls: Calls) -> None:
        if self.env is not None:
            self.env.finish(calls)
            self.status = self.env.status
        else:
            self.status = DONE if self.st == self.after_element else ERROR


class JsonSequence(JsonList):
    """Envelopes separated by ``;`` or nothing (llama3_json ``{…}; {…}``, the Llama 4
    template's ``{…}{…}``). Ends before the first character that continues neither."""

    kind = "sequence"
    __slots__ = ()
    FIRST = Items.WANT
    after_element = Items.AFTER

    def _between(self, text: str, pos: int, final: bool) -> int | None:
        n = len(text)
        j = pos
        while j < n and text[j] in _WS:
            j += 1
        if j == n:  # blanks only: after an element they stay unconsumed until we know more
            if self.st == Items.WANT:
                return j
            if final:
                self.status = DONE
            return None
        c = text[j]
        if c == "{":
            self.st, self.env = Items.WANT, self._element(JsonCall(self.fmt))
            return j
        if self.st == Items.AFTER and c == ";":
            self.st = Items.WANT
            return j + 1
        self.status = DONE if self.st == Items.AFTER else ERROR
        return pos


__all__ = ["JsonArgs", "JsonCall", "JsonList", "JsonSequence"]
