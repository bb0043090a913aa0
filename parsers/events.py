"""Events: the only vocabulary a parser shows the outside world.

A parser turns model output text into a list of these. Concatenating the ``text`` of all
``Content`` events gives the message ``content``; likewise ``Reasoning`` for ``reasoning``.
For one tool call, ``ToolCallStart`` comes first, then zero or more ``ToolCallArguments``
whose texts concatenate to the call's JSON arguments string, then ``ToolCallEnd``.
Arguments are what the model wrote, never completed by invention. A call's events come as
the model writes it (issue 40): a call the output cut off (``finish_reason: "length"``) or
whose JSON broke ends with ``complete=False``, its arguments the text written so far. With
the opt-in ``ParserSpec.cut_calls="content"`` such a call is content instead and every
``ToolCallEnd`` returned is complete (:mod:`parsers.calls`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Content:
    """Answer text for ``message.content`` / ``delta.content``."""

    text: str


@dataclass(frozen=True, slots=True)
class Reasoning:
    """Reasoning text for ``message.reasoning`` / ``delta.reasoning``."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call begins. ``index`` counts calls in this output from 0.

    ``id`` is set only when the model's format carries one (Kimi-K2 writes
    ``functions.NAME:IDX``); otherwise the caller assigns ``chatcmpl-tool-…`` ids.
    """

    index: int
    name: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallArguments:
    """A piece of a call's JSON arguments string (OpenAI ``function.arguments``)."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """The call at ``index`` ends. ``complete``: its arguments string is a valid JSON
    object. Not complete: the output ended (or the model's JSON broke) inside the call;
    the arguments are the text written up to there, a prefix of a JSON object."""

    index: int
    complete: bool = True


Event = Content | Reasoning | ToolCallStart | ToolCallArguments | ToolCallEnd

__all__ = ["Content", "Reasoning", "ToolCallStart", "ToolCallArguments", "ToolCallEnd", "Event"]
