"""The channel machine: messages with a header and a body, for Harmony and Muse.

Harmony (gpt-oss, :mod:`parsers.harmony`) and Muse (:mod:`parsers.muse`) write their output
as messages ``<|start|>assistant HEADER<|message|>BODY<END>``; the header (channel,
recipient) decides where the body goes. One machine reads both; a family is a
:class:`ChannelFormat` row (its markers) and a subclass that routes a message by its
header (``_begin_message``, ``_body``, ``_end_message``).

Theory of operation. Three states: OUT (between messages; stray text is content, blank runs
between messages are dropped), HEAD (collecting a header up to the message marker; output
starts here, because the prompt ends with ``<|start|>assistant``) and MSG (a body up to one
of the end markers). :meth:`ChannelFormat.transitions` is the table of the markers each
state waits for and where they lead: leaving MSG ends the message, entering MSG reads the
header, a channel marker (Harmony's ``<|channel|>``) starts the header text. A header longer
than ``_MAX_HEADER`` was no header: it is content.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .calls import Calls
from .events import Content, Event, Reasoning
from .scanner import find_marker, release_run


class State(StrEnum):
    """Where a channel machine is; the values are the codes exported states carry."""

    OUT = "out"    # between messages
    HEAD = "head"  # reading a message header
    MSG = "msg"    # inside a message body


OUT, HEAD, MSG = State
_MAX_HEADER = 1024


@dataclass(frozen=True)
class ChannelFormat:
    """One channel family's markers: a message ``start``, the ``message`` marker ending its
    header, the ``ends`` of a body, and a ``channel`` marker that also opens a header (or
    none). ``restart``: a start (or channel) marker inside a body ends the message and opens
    the next (Harmony); False: a body ends only at one of its ``ends``, so a header quoted in
    reasoning or an answer is text (Muse: calls are scoped by their message)."""

    start: str
    message: str
    ends: tuple[str, ...]
    channel: str = ""
    restart: bool = True

    def transitions(self) -> dict[State, dict[str, State]]:
        """state -> marker -> next state."""
        opens = {self.start: HEAD, **({self.channel: HEAD} if self.channel else {})}
        return {OUT: dict(opens), HEAD: {self.message: MSG, self.start: HEAD},
                MSG: {**dict.fromkeys(self.ends, OUT), **(opens if self.restart else {})}}


class ChannelStage:
    """Base of the channel machines (see the module docstring). Events go to ``calls.out``."""

    __slots__ = ("calls", "table", "st", "buf", "header", "ws", "stray")
    ROW: ChannelFormat

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.table = self.ROW.transitions()
        self.st = HEAD         # the prompt ends with "<|start|>assistant"
        self.buf = ""          # held partial marker
        self.header = ""
        self.ws = ""           # blank stray text between messages (dropped unless text follows)
        self.stray = False     # non-blank stray text was written since the last marker

    def export(self) -> dict:
        return {"st": self.st.value, "buf": self.buf, "header": self.header, "ws": self.ws, "stray": self.stray}

    def load(self, data: dict) -> None:
        self.st, self.buf, self.header = State(data["st"]), data["buf"], data["header"]
        self.ws, self.stray = data["ws"], data["stray"]

    def feed(self, text: str) -> list[Event]:
        """Consume output text; returns the events it completes."""
        self._run(self.buf + text, final=False)
        return self.calls.take()

    def finish(self) -> list[Event]:
        """End of output; returns the last events (a cut-off call ends not complete, parsers.calls)."""
        self._run(self.buf, final=True)
        if self.st == MSG:
            self._end_message(cut=True)
            self.st = OUT
        elif self.st == HEAD and not self._header_like(self.header):
            self._stray(self.header)  # never was a header: plain text is content
            self.header = ""
        return self.calls.take()

    def _run(self, buf: str, final: bool) -> None:
        pos = 0
        while True:
            st = self.st
            row = self.table[st]
            i, m = find_marker(buf[pos:], tuple(row), final)
            piece = buf[pos:pos + i]
            if st == OUT:
                self._stray(piece)
            elif st == HEAD:
                self.header += piece
                if len(self.header) > _MAX_HEADER:  # not a header after all
                    self.st, header, self.header = OUT, self.header, ""
                    self._text(False, header)
            else:
                self._body(piece)
            if m is None:
                pos += i
                break
            pos += i + len(m)
            self.ws, self.stray = "", False
            if st == MSG:
                self._end_message()
                self.st = OUT
            target = row[m]
            if target == MSG:
                self.st = MSG
                self._begin_message()
            else:
                self.st = target
                self.header = m if m == self.ROW.channel else ""
        self.buf = buf[pos:]

    def _stray(self, s: str) -> None:
        """Text outside any message: content, except blanks between messages."""
        s, self.ws, self.stray = release_run(self.ws, self.stray, s)
        if s:
            self._text(False, s)

    def _text(self, reasoning: bool, s: str) -> None:
        self.calls.out.append(Reasoning(s) if reasoning else Content(s))

    # -- the family's routing ------------------------------------------------------------
    def _header_like(self, header: str) -> bool:
        """Whether text left in HEAD at the end is a header (else it is content)."""
        return "to=" in header

    def _begin_message(self) -> None:
        raise NotImplementedError

    def _body(self, s: str) -> None:
        raise NotImplementedError

    def _end_message(self, cut: bool = False) -> None:
        raise NotImplementedError


__all__ = ["ChannelFormat", "ChannelStage", "State"]
