"""Per-output tool-call bookkeeping shared by every call mechanism.

``Calls`` numbers the calls, knows whether one is open, checks names against the
request's tools and writes the ``ToolCall*`` events. Mechanisms never build call events
themselves, so "Start, Arguments…, End, index counts from 0" holds for every family.

``boundary`` is raised whenever a call starts or ends; mechanisms return to their caller
at that point so the caller can tell which raw text belonged to a call (everything up to
a boundary) and which may still have to be given back as content.
"""

from __future__ import annotations

from enum import StrEnum

from .events import Event, ToolCallArguments, ToolCallEnd, ToolCallStart
from .schema import ParamSchema, param_schemas


class Calls:
    """Tool-call counter + event writer. ``out`` holds the events written since the stage
    that owns this object last took them (:meth:`take`); the stage returns them."""

    __slots__ = ("tools", "names", "index", "open", "name", "boundary", "out", "_schemas")

    def __init__(self, tools: list[dict] | None, names: list[str] | None) -> None:
        self.tools = tools
        self.names = None if names is None else frozenset(names)
        self.index = 0          # index of the next call to start
        self.open = False       # a call has started and not ended
        self.name = ""          # name of the open call
        self.boundary = False
        self.out: list[Event] = []
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

    def schemas(self, name: str) -> dict[str, ParamSchema]:
        """Resolved schemas of tool ``name``'s parameters (cached per output)."""
        if name not in self._schemas:
            self._schemas[name] = param_schemas(self.tools, name)
        return self._schemas[name]

    def take(self) -> list[Event]:
        """The events written since the last call (and forget them)."""
        out, self.out = self.out, []
        return out

    def start(self, name: str, id: str | None = None) -> None:
        assert not self.open
        self.out.append(ToolCallStart(self.index, name, id))
        self.open = True
        self.name = name
        self.boundary = True

    def args(self, text: str) -> None:
        if text:
            self.out.append(ToolCallArguments(self.index, text))

    def end(self, complete: bool = True) -> None:
        """End the open call; ``complete=False``: its arguments are cut off (partial text)."""
        assert self.open
        self.out.append(ToolCallEnd(self.index, complete))
        self.index += 1
        self.open = False
        self.boundary = True

    def export(self) -> list:
        return [self.index, self.open, self.name]

    def load(self, data: list) -> None:
        self.index, self.open, self.name = data


class Status(StrEnum):
    """A body mechanism's progress; the values are the codes exported states carry."""

    MORE = "more"    # wants more text
    DONE = "done"    # finished; the framing machine goes on after it
    ERROR = "error"  # not this body after all (or it broke): see the framing machine


MORE, DONE, ERROR = Status

__all__ = ["Calls", "Status", "MORE", "DONE", "ERROR"]
