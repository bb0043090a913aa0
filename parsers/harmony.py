"""Harmony (gpt-oss): channels carry reasoning, answer and tool calls.

Format (OpenAI Harmony, as in the gpt-oss chat template and the vLLM brief §5.3 #8)::

    <|channel|>analysis<|message|>Need weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>

Theory of operation. The channel machine of :mod:`parsers.channels` (OUT between messages,
HEAD a header up to ``<|message|>`` — output starts here, because the prompt ends with
``<|start|>assistant`` and the model may go on with `` to=functions.x`` — MSG a body up to
``<|end|>``/``<|call|>``/``<|return|>``), with the :data:`HARMONY` row. The header decides
where the body goes:

* a recipient ``to=functions.NAME`` — or a bare ``to=NAME`` that is not a built-in tool —
  on ANY channel is a tool call (case 20: gpt-oss sometimes calls from ``analysis``);
  its body is streamed as the arguments JSON, verbatim (case 21: non-ASCII stays literal);
  ``<|constrain|>json`` and content types such as ``code`` are hints, not part of the name;
* otherwise ``analysis`` → reasoning; ``final``/``commentary`` → content. Several messages
  on one field are joined with ``\\n``.

With tool extraction off (``tool_choice: none`` or no tool parser) or an unknown function
name, a call's body is content. A call's arguments stream as written; one cut off by the end
of output or whose JSON breaks ends not complete (with ``Calls.hold``: its body is content;
one rule for every family, :mod:`parsers.calls`).
"""

from __future__ import annotations

import re

from .calls import Calls
from .channels import ChannelFormat, ChannelStage, State
from .jsonstream import JsonValue

OUT, HEAD, MSG = State
START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
HARMONY = ChannelFormat(START, MESSAGE, ENDS, channel=CHANNEL)
TRANSITIONS = HARMONY.transitions()
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_BUILTIN = ("python", "browser.", "container.")


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


class HarmonyStage(ChannelStage):
    """Turns Harmony output into reasoning, content and tool-call events."""

    __slots__ = ("extract", "route", "sub", "seen", "body")
    ROW = HARMONY

    def __init__(self, calls: Calls, extract_tools: bool) -> None:
        super().__init__(calls)
        self.extract = extract_tools
        self.route = "c"       # body goes to: r reasoning, c content, t tool call
        self.sub: JsonValue | None = None
        self.seen = ""         # fields that already have a message ("r", "c")
        self.body = ""         # the open call's body text (content if the call never completes)

    def export(self) -> dict:
        return {**super().export(), "route": self.route, "sub": self.sub.export() if self.sub else None,
                "seen": self.seen, "body": self.body}

    def load(self, data: dict) -> None:
        super().load(data)
        self.route, self.seen = data["route"], data["seen"]  # (an older "emitted" flag is moot)
        self.body = data.get("body", "")
        self.sub = JsonValue.load(data["sub"]) if data["sub"] else None

    def _header_like(self, header: str) -> bool:
        return "<|" in header or "to=" in header

    def _begin_message(self) -> None:
        channel, name = read_header(self.header)
        self.header = ""
        if name is not None and self.extract and self.calls.valid(name):
            self.route = "t"
            self.calls.start(name)
            self.sub = JsonValue(require="{")
            return
        self.route = "r" if channel == "analysis" and name is None else "c"
        if self.route in self.seen:
            self._text(self.route == "r", "\n")
        self.seen += self.route

    def _body(self, s: str) -> None:
        if not s:
            return
        if self.route != "t":
            self._text(self.route == "r", s)
            return
        sub = self.sub
        pos = 0
        if not (sub.done or sub.error):
            pos, rel = sub.feed(s)
            if self.calls.hold:
                self.body += s[:pos]
            self.calls.args(rel)
            if sub.error:  # the JSON broke: the call ends there (with hold: its text is content)
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
            else:  # cut off: the text written so far, not complete (with hold: content, parsers.calls)
                self.calls.args(rel + sub.cut())
                self.calls.end(complete=False)
                self._give_back()
        self.sub, self.route, self.body = None, "c", ""

    def _give_back(self) -> None:
        """The call ended not complete: with ``Calls.hold`` its body text is content."""
        if not self.calls.take_cut():
            return
        body, self.body = self.body, ""
        if body:
            self._text(False, body)


__all__ = ["HarmonyStage", "read_header", "HARMONY"]
