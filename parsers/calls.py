"""Per-output tool-call bookkeeping shared by every call mechanism.

``Calls`` numbers the calls, knows whether one is open, checks names against the
request's tools and writes the ``ToolCall*`` events. Mechanisms never build call events
themselves, so "Start, Arguments…, End, index counts from 0" holds for every family.

``boundary`` is raised whenever a call starts or ends; mechanisms return to their caller
at that point so the caller can tell which raw text belonged to a call (everything up to
a boundary) and which may still have to be given back as content.

One rule for every family (issue 22): a call is returned only once it is complete. The
events of the open call are held (``held``) until it ends; a complete end releases them,
an end that is not complete (the output was cut off by ``max_tokens`` inside the call, or
its JSON broke) discards them and raises ``cut``: the stage that owns the call gives the
call's raw text back as content, streamed or not — what vLLM's whole answers do, and
what a client can act on (never a ``tool_calls`` entry with broken JSON arguments).
"""

from __future__ import annotations

from enum import StrEnum

from .events import Event, ToolCallArguments, ToolCallEnd, ToolCallStart
from .schema import ParamSchema, param_schemas


class Calls:
    """Tool-call counter + event writer. ``out`` holds the events written since the stage
    that owns this object last took them (:meth:`take`); the stage returns them."""

    __slots__ = ("tools", "names", "index", "open", "name", "boundary", "out", "held", "cut", "_schemas")

    def __init__(self, tools: list[dict] | None, names: list[str] | None) -> None:
        self.tools = tools
        self.names = None if names is None else frozenset(names)
        self.index = 0          # index of the next call to start
        self.open = False       # a call has started and not ended
        self.name = ""          # name of the open call
        self.boundary = False
        self.out: list[Event] = []
        self.held: list[Event] = []  # events of the open call, released when it completes
        self.cut = False        # the last call ended not complete: its raw text is content
        self._schemas: dict[str, dict[str, ParamSchema]] = {}

    def valid(self, name: str) -> bool:
        """A usable function name: non-empty, one line, and one of the tools if any were given."""
        return self.plausible(name) and (self.names is None or name in self.names)

    @staticmethod
    def plausible(name: str) -> bool:
        """Could be a function name at all: non-empty, one line, at most 256 characters."""
        return bool(name) and "\n" not in name and len(name) <= 256

    def types(self, name: str) -> dict[str, list[str]]:
        """Schema types of tool ``name``'s parameters."""
        return {k: v.types for k, v in self.schemas(name).items()}

    def schemas(self, name: str, known: dict | None = None) -> dict[str, ParamSchema]:
        """Resolved schemas of tool ``name``'s parameters (cached per output); ``known``: the
        call's arguments read so far that can select a schema branch (not cached)."""
        if known:
            return param_schemas(self.tools, name, known)
        if name not in self._schemas:
            self._schemas[name] = param_schemas(self.tools, name)
        return self._schemas[name]

    def take(self) -> list[Event]:
        """The events written since the last call (and forget them)."""
        out, self.out = self.out, []
        return out

    def start(self, name: str, id: str | None = None) -> None:
        assert not self.open
        self.held = [ToolCallStart(self.index, name, id)]
        self.open = True
        self.cut = False
        self.name = name
        self.boundary = True

    def args(self, text: str) -> None:
        if text:
            self.held.append(ToolCallArguments(self.index, text))

    def end(self, complete: bool = True) -> None:
        """End the open call. Complete: its events are released. Not complete (cut off, or
        its JSON broke): they are dropped and ``cut`` tells the owner to give the call's
        raw text back as content (see the module docstring)."""
        assert self.open
        if complete:
            self.out += self.held
            self.out.append(ToolCallEnd(self.index))
            self.index += 1
        else:
            self.cut = True
        self.held = []
        self.open = False
        self.boundary = True

    def take_cut(self) -> bool:
        """Whether the last call was cut (and forget it)."""
        cut, self.cut = self.cut, False
        return cut

    def export(self) -> list:
        return [self.index, self.open, self.name, [_export_event(e) for e in self.held], self.cut]

    def load(self, data: list) -> None:
        self.index, self.open, self.name = data[:3]
        self.held = [_load_event(e, self.index) for e in data[3]] if len(data) > 3 else []
        self.cut = bool(data[4]) if len(data) > 4 else False


def _export_event(ev: Event) -> list:
    """A held event (a call's start or an arguments piece) as plain data."""
    if isinstance(ev, ToolCallStart):
        return [ev.name, ev.id]
    return [ev.text]


def _load_event(data: list, index: int) -> Event:
    return ToolCallStart(index, data[0], data[1]) if len(data) == 2 else ToolCallArguments(index, data[0])


class Status(StrEnum):
    """A body mechanism's progress; the values are the codes exported states carry."""

    MORE = "more"    # wants more text
    DONE = "done"    # finished; the framing machine goes on after it
    ERROR = "error"  # not this body after all (or it broke): see the framing machine


MORE, DONE, ERROR = Status

__all__ = ["Calls", "Status", "MORE", "DONE", "ERROR"]
