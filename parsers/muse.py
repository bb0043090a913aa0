"""Muse (Muse Spark, Muse Glimmer): recipient-scoped messages carry reasoning, answer and calls.

Format (vLLM 0.33 ``muse`` / ``muse_glimmer`` / ``musespark1x``; the checkpoint's
``response_schema`` that vLLM ports)::

    <|start|>assistant to=self<|message|>Need the weather.<|eom|>
    <|start|>assistant to=commentary<|message|>Checking.<|eom|>
    <|start|>assistant to=weather.get<|message|><atem:function_calls>
    <atem:invoke name="get_weather"><atem:parameter name="city">Paris</atem:parameter></atem:invoke>
    </atem:function_calls><|eom|>
    <|start|>assistant to=user<|message|>It is sunny.<|eot|>

Theory of operation. The same three states as :mod:`parsers.harmony`: OUT between
messages (stray text is content, blank runs between messages are dropped), HEAD collecting
a header up to ``<|message|>`` (output starts here: the prompt ends with
``<|start|>assistant``), MSG a body up to ``<|eom|>`` / ``<|eot|>``. The recipient decides
where the body goes: ``self`` → reasoning (content when no reasoning parser is set),
``user`` / ``commentary`` → content, ``developer`` → dropped, any other recipient → a tool
message, whose body is read by the ATEM row of :mod:`parsers.formats` (``muse``) on the
framing machine of :mod:`parsers.tools`. Scoping is the point: an ``<atem:invoke>`` quoted
in reasoning or in the answer is text, not a call.
"""

from __future__ import annotations

import re
from enum import StrEnum

from .calls import Calls
from .events import Content, Event, Reasoning
from .formats import FORMATS
from .scanner import find_marker, release_run
from .tools import ToolStage


class State(StrEnum):
    """Where the Muse machine is; the values are the codes exported states carry."""

    OUT = "out"    # between messages
    HEAD = "head"  # reading a message header (the recipient)
    MSG = "msg"    # inside a message body


OUT, HEAD, MSG = State
START, MESSAGE = "<|start|>", "<|message|>"
ENDS = ("<|eom|>", "<|eot|>")

# state -> marker -> next state; leaving MSG ends the message, entering it reads the header.
TRANSITIONS: dict[State, dict[str, State]] = {
    OUT: {START: HEAD},
    HEAD: {MESSAGE: MSG, START: HEAD},
    MSG: {**dict.fromkeys(ENDS, OUT), START: HEAD},
}
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_MAX_HEADER = 1024
REASONING, CONTENT, DROP, TOOL = "r", "c", "-", "t"
_ROUTES = {"self": REASONING, "user": CONTENT, "commentary": CONTENT, "developer": DROP}


class MuseStage:
    """Turns Muse output into reasoning, content and tool-call events."""

    __slots__ = ("calls", "extract", "reasoning", "st", "buf", "header", "route", "inner", "ws", "stray")

    def __init__(self, calls: Calls, extract_tools: bool, reasoning: bool) -> None:
        self.calls = calls
        self.extract = extract_tools
        self.reasoning = reasoning
        self.st = HEAD         # the prompt ends with "<|start|>assistant"
        self.buf = ""          # held partial marker
        self.header = ""
        self.route = CONTENT
        self.inner: ToolStage | None = None  # the ATEM reader of the current tool message
        self.ws = ""           # blank stray text between messages
        self.stray = False     # non-blank stray text since the last marker

    def export(self) -> dict:
        return {"st": self.st.value, "buf": self.buf, "header": self.header, "route": self.route,
                "inner": self.inner.export() if self.inner else None, "ws": self.ws, "stray": self.stray}

    def load(self, data: dict) -> None:
        self.st, self.buf, self.header = State(data["st"]), data["buf"], data["header"]
        self.route, self.ws, self.stray = data["route"], data["ws"], data["stray"]
        self.inner = None
        if data["inner"] is not None:
            self.inner = self._reader()
            self.inner.load(data["inner"])

    def feed(self, text: str) -> list[Event]:
        """Consume output text; returns the events it completes."""
        return self._run(self.buf + text, final=False)

    def finish(self) -> list[Event]:
        """End of output; returns the last events (a cut-off call ends not complete)."""
        out = self._run(self.buf, final=True)
        if self.st == MSG:
            out += self._end_message()
        elif self.st == HEAD and "to=" not in self.header:
            out += self._stray(self.header)  # never was a header: plain text is content
            self.header = ""
        return out

    def _reader(self) -> ToolStage:
        return ToolStage(FORMATS["muse"], self.calls, {})

    def _run(self, buf: str, final: bool) -> list[Event]:
        out: list[Event] = []
        pos = 0
        while True:
            st = self.st
            row = TRANSITIONS[st]
            i, m = find_marker(buf[pos:], tuple(row), final)
            piece = buf[pos:pos + i]
            if st == OUT:
                out += self._stray(piece)
            elif st == HEAD:
                self.header += piece
                if len(self.header) > _MAX_HEADER:  # not a header after all
                    self.st, header, self.header = OUT, self.header, ""
                    out.append(Content(header))
            else:
                out += self._body(piece)
            if m is None:
                pos += i
                break
            pos += i + len(m)
            self.ws, self.stray = "", False
            if st == MSG:
                out += self._end_message()
            target = row[m]
            if target == MSG:
                self._begin_message()
            else:
                self.st = target
                self.header = ""
        self.buf = buf[pos:]
        return out

    def _begin_message(self) -> None:
        found = _RECIPIENT.search(self.header)
        to = found.group(1) if found else "user"
        self.header, self.st = "", MSG
        route = _ROUTES.get(to, TOOL)
        if route == REASONING and not self.reasoning:
            route = CONTENT
        if route == TOOL and not self.extract:
            route = CONTENT
        self.route = route
        if route == TOOL:
            self.inner = self._reader()

    def _body(self, s: str) -> list[Event]:
        if not s or self.route == DROP:
            return []
        if self.route == TOOL:
            return self.inner.feed(s)
        return [Reasoning(s) if self.route == REASONING else Content(s)]

    def _end_message(self) -> list[Event]:
        out = self.inner.finish() if self.inner is not None else []
        self.inner, self.route, self.st = None, CONTENT, OUT
        return out

    def _stray(self, s: str) -> list[Event]:
        """Text outside any message: content, except blanks between messages."""
        s, self.ws, self.stray = release_run(self.ws, self.stray, s)
        return [Content(s)] if s else []


__all__ = ["MuseStage", "State", "TRANSITIONS"]
