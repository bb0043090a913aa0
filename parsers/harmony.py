"""Harmony (gpt-oss): channels carry reasoning, answer and tool calls.

Format (OpenAI Harmony, as in the gpt-oss chat template and the vLLM brief §5.3 #8)::

    <|channel|>analysis<|message|>Need weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>

Theory of operation. Three states: OUT (between messages; stray text is content), HEAD
(collecting a message header up to ``<|message|>``; output starts here, because the
prompt ends with ``<|start|>assistant`` and the model may go on with `` to=functions.x``)
and MSG (a message body up to
``<|end|>``/``<|call|>``/``<|return|>``); :data:`TRANSITIONS` is the table of the markers
each state waits for and where they lead. The header decides where the body goes:

* a recipient ``to=functions.NAME`` — or a bare ``to=NAME`` that is not a built-in tool —
  on ANY channel is a tool call (case 20: gpt-oss sometimes calls from ``analysis``);
  its body is streamed as the arguments JSON, verbatim (case 21: non-ASCII stays literal);
  ``<|constrain|>json`` and content types such as ``code`` are hints, not part of the name;
* otherwise ``analysis`` → reasoning; ``final``/``commentary`` → content. Several messages
  on one field are joined with ``\\n``.

With tool extraction off (``tool_choice: none`` or no tool parser) or an unknown function
name, a call's body is content; so is the body of a call cut off by the end of output or
whose JSON breaks (one rule for every family, :mod:`parsers.calls`).
"""

from __future__ import annotations

import re
from enum import StrEnum

from .calls import Calls
from .events import Content, Event, Reasoning
from .jsonstream import JsonValue
from .scanner import find_marker, release_run


class State(StrEnum):
    """Where the Harmony machine is; the values are the codes exported states carry."""

    OUT = "out"    # between messages
    HEAD = "head"  # reading a message header (channel, recipient)
    MSG = "msg"    # inside a message body


OUT, HEAD, MSG = State
START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")

# state -> marker -> next state. Beside the table: leaving MSG ends the message; entering
# MSG reads the header collected in HEAD; a <|channel|> marker starts the header text.
TRANSITIONS: dict[State, dict[str, State]] = {
    OUT: {START: HEAD, CHANNEL: HEAD},
    HEAD: {MESSAGE: MSG, START: HEAD},
    MSG: {**dict.fromkeys(ENDS, OUT), START: HEAD, CHANNEL: HEAD},
}
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_BUILTIN = ("python", "browser.", "container.")
_MAX_HEADER = 1024


def read_header(header: str) -> tuple[str, str | None]:
    """Header text -> ``(channel, function name or None)``."""
    ch = _CHANNEL.search(header)
    channel = ch.group(1) if ch else ""
    rc = _RECIPIENT.search(header)
    if not rc:
        return channel, None
    to = rc.group(1)
    if to.startswith("functions."):
        return channel, to[len("functions."):] or None
    if to == "assistant" or to.startswith(_BUILTIN):
        return channel, None
    return channel, to


class HarmonyStage:
    """Turns Harmony output into reasoning, content and tool-call events."""

    __slots__ = ("calls", "extract", "st", "buf", "header", "route", "sub", "seen", "ws",
                 "stray", "body")

    def __init__(self, calls: Calls, extract_tools: bool) -> None:
        self.calls = calls
        self.extract = extract_tools
        self.st = HEAD         # the prompt ends with "<|start|>assistant": output opens in a header
        self.buf = ""          # held partial marker
        self.header = ""
        self.route = "c"       # body goes to: r reasoning, c content, t tool call
        self.sub: JsonValue | None = None
        self.seen = ""         # fields that already have a message ("r", "c")
        self.ws = ""           # blank stray text between messages (dropped unless text follows)
        self.stray = False     # non-blank stray text was written since the last marker
        self.body = ""         # the open call's body text (content if the call never completes)

    def export(self) -> dict:
        return {"st": self.st.value, "buf": self.buf, "header": self.header, "route": self.route,
                "sub": self.sub.export() if self.sub else None, "seen": self.seen, "ws": self.ws, "stray": self.stray, "body": self.body}

    def load(self, data: dict) -> None:
        self.st, self.buf, self.header = State(data["st"]), data["buf"], data["header"]
        self.route, self.seen = data["route"], data["seen"]  # (an older "emitted" flag is moot)
        self.ws, self.stray, self.body = data["ws"], data["stray"], data.get("body", "")
        self.sub = JsonValue.load(data["sub"]) if data["sub"] else None

    def feed(self, text: str) -> list[Event]:
        """Consume output text; returns the events it completes."""
        self._run(self.buf + text, final=False)
        return self.calls.take()

    def finish(self) -> list[Event]:
        """End of output; returns the last events (a cut-off call ends not complete)."""
        self._run(self.buf, final=True)
        if self.st == MSG:
            self._end_message(cut=True)
        elif self.st == HEAD and "<|" not in self.header and "to=" not in self.header:
            self._stray(self.header)  # never was a header: plain text is content
            self.header = ""
        return self.calls.take()

    def _run(self, buf: str, final: bool) -> None:
        pos = 0
        while True:
            st = self.st
            row = TRANSITIONS[st]
            i, m = find_marker(buf[pos:], tuple(row), final)
            piece = buf[pos:pos + i]
            if st == OUT:
                self._stray(piece)
            elif st == HEAD:
                self.header += piece
                if len(self.header) > _MAX_HEADER:  # not a header after all
                    self.st, header, self.header = OUT, self.header, ""
                    self._text("c", header)
            else:
                self._body(piece)
            if m is None:
                pos += i
                break
            pos += i + len(m)
            self.ws, self.stray = "", False
            if st == MSG:
                self._end_message()
            target = row[m]
            if target == MSG:
                self._begin_message()
            elif target == HEAD:
                self.st, self.header = HEAD, (m if m == CHANNEL else "")
            else:
                self.st = OUT
        self.buf = buf[pos:]

    def _begin_message(self) -> None:
        channel, name = read_header(self.header)
        self.header = ""
        self.st = MSG
        if name is not None and self.extract and self.calls.valid(name):
            self.route = "t"
            self.calls.start(name)
            self.sub = JsonValue(require="{")
            return
        self.route = "r" if channel == "analysis" and name is None else "c"
        if self.route in self.seen:
            self._text(self.route, "\n")
        self.seen += self.route

    def _body(self, s: str) -> None:
        if not s:
            return
        if self.route != "t":
            self._text(self.route, s)
            return
        sub = self.sub
        pos = 0
        if not (sub.done or sub.error):
            pos, rel = sub.feed(s)
            self.body += s[:pos]
            self.calls.args(rel)
            if sub.error:  # the JSON broke: not a call, its text is content
                self.calls.end(complete=False)
                self._give_back()
        self._stray(s[pos:])  # text after the arguments object (or where it broke)

    def _end_message(self, cut: bool = False) -> None:
        if self.route == "t" and self.calls.open:
            sub = self.sub
            rel = sub.end_of_input()
            if sub.done or (sub.empty and not cut):  # whole, or a message without arguments
                self.calls.args(rel if sub.done else "{}")
                self.calls.end()
            else:  # cut off: not a call, its text is content (parsers.calls)
                self.calls.end(complete=False)
                self._give_back()
        self.sub, self.route, self.st, self.body = None, "c", OUT, ""

    def _give_back(self) -> None:
        """The call ended not complete: its body text is content."""
        self.calls.take_cut()
        body, self.body = self.body, ""
        if body:
            self._text("c", body)

    def _stray(self, s: str) -> None:
        """Text outside any message: content, except blanks between messages."""
        s, self.ws, self.stray = release_run(self.ws, self.stray, s)
        if s:
            self._text("c", s)

    def _text(self, route: str, s: str) -> None:
        self.calls.out.append(Reasoning(s) if route == "r" else Content(s))


__all__ = ["HarmonyStage", "read_header"]
