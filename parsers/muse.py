"""Muse (Muse Spark, Muse Glimmer): recipient-scoped messages carry reasoning, answer and calls.

Format (vLLM 0.33 ``muse`` / ``muse_glimmer`` / ``musespark1x``; the checkpoint's
``response_schema`` that vLLM ports)::

    <|start|>assistant to=self<|message|>Need the weather.<|eom|>
    <|start|>assistant to=commentary<|message|>Checking.<|eom|>
    <|start|>assistant to=weather.get<|message|><atem:function_calls>
    <atem:invoke name="get_weather"><atem:parameter name="city">Paris</atem:parameter></atem:invoke>
    </atem:function_calls><|eom|>
    <|start|>assistant to=user<|message|>It is sunny.<|eot|>

Theory of operation. The channel machine of :mod:`parsers.channels` (the one Harmony runs
on), with the :data:`MUSE` row: OUT between messages (stray text is content, blank runs
between messages are dropped), HEAD a header up to ``<|message|>`` (output starts here: the
prompt ends with ``<|start|>assistant``), MSG a body up to ``<|eom|>`` / ``<|eot|>``. The recipient decides
where the body goes: ``self`` → reasoning (content when no reasoning parser is set),
``user`` / ``commentary`` → content, ``developer`` → dropped, any other recipient → a tool
message, whose body is read by the ATEM row of :mod:`parsers.formats` (``muse``) on the
framing machine of :mod:`parsers.tools`. Scoping is the point: an ``<atem:invoke>`` quoted
in reasoning or in the answer is text, not a call.
"""

from __future__ import annotations

import re

from .calls import Calls
from .channels import ChannelFormat, ChannelStage, State
from .formats import FORMATS
from .tools import ToolStage

OUT, HEAD, MSG = State
START, MESSAGE = "<|start|>", "<|message|>"
ENDS = ("<|eom|>", "<|eot|>")
MUSE = ChannelFormat(START, MESSAGE, ENDS, restart=False)  # a header quoted in a body is text
TRANSITIONS = MUSE.transitions()
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
REASONING, CONTENT, DROP, TOOL = "r", "c", "-", "t"
_ROUTES = {"self": REASONING, "user": CONTENT, "commentary": CONTENT, "developer": DROP}


class MuseStage(ChannelStage):
    """Turns Muse output into reasoning, content and tool-call events."""

    __slots__ = ("extract", "reasoning", "route", "inner")
    ROW = MUSE

    def __init__(self, calls: Calls, extract_tools: bool, reasoning: bool) -> None:
        super().__init__(calls)
        self.extract = extract_tools
        self.reasoning = reasoning
        self.route = CONTENT
        self.inner: ToolStage | None = None  # the ATEM reader of the current tool message

    def export(self) -> dict:
        return {**super().export(), "route": self.route, "inner": self.inner.export() if self.inner else None}

    def load(self, data: dict) -> None:
        super().load(data)
        self.route = data["route"]
        self.inner = None
        if data["inner"] is not None:
            self.inner = self._reader()
            self.inner.load(data["inner"])

    def _reader(self) -> ToolStage:
        return ToolStage(FORMATS["muse"], self.calls, {})

    def _begin_message(self) -> None:
        found = _RECIPIENT.search(self.header)
        to = found.group(1) if found else "user"
        self.header = ""
        route = _ROUTES.get(to, TOOL)
        if route == REASONING and not self.reasoning:
            route = CONTENT
        if route == TOOL and not self.extract:
            route = CONTENT
        self.route = route
        if route == TOOL:
            self.inner = self._reader()

    def _body(self, s: str) -> None:
        if not s or self.route == DROP:
            return
        if self.route == TOOL:
            events = self.inner.feed(s)  # (the reader takes calls.out whole: put it back after)
            self.calls.out += events
            return
        self._text(self.route == REASONING, s)

    def _end_message(self, cut: bool = False) -> None:
        if self.inner is not None:
            events = self.inner.finish()
            self.calls.out += events
        self.inner, self.route = None, CONTENT


__all__ = ["MuseStage", "MUSE", "State", "TRANSITIONS"]
