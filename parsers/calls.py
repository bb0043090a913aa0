"""Per-output tool-call bookkeeping shared by every call mechanism.

``Calls`` numbers the calls, knows whether one is open, checks names against the
request's tools and writes the ``ToolCall*`` events. Mechanisms never build call events
themselves, so "Start, Arguments…, End, index counts from 0" holds for every family.

``boundary`` is raised whenever a call starts or ends; mechanisms return to their caller
at that point so the caller can tell which raw text belonged to a call (everything up to
a boundary) and which may still have to be given back as content.

A call streams as the model writes it (issue 40): its start (name, id) as soon as the name
is known and valid, then its arguments text piece by piece as the body mechanisms release
it, then its end. The concatenated pieces are exactly the whole answer's ``arguments``. A
call the output cuts off (``max_tokens``) or whose JSON breaks ends not complete
(``ToolCallEnd.complete`` false): its arguments are the text the model wrote while it was
still JSON, nothing invented — what vLLM streams, and the same whole (``finish_reason``
stays ``length``). Nothing of an open call is held, so the state stays O(1) in its length.

Opt-in ``hold`` (``ParserSpec.cut_calls="content"``, issue 22's rule): the open call's
events are held (``held``) until it ends; a complete end releases them, one that is not
complete discards them and raises ``cut``: the stage that owns the call gives its raw text
back as content. The price: arguments reach a client only when the call completes, and the
exported state carries the open call's text. The held arguments are kept as pieces (one
``ToolCallArguments`` when released) and exported as a ``[start, end]`` slice of the raw
call text the framing machine carries anyway (``export(raw)``), not a second copy.
"""

from __future__ import annotations

from enum import StrEnum

from .events import Event, ToolCallArguments, ToolCallEnd, ToolCallStart
from .schema import ParamSchema, param_schemas


class Calls:
    """Tool-call counter + event writer. ``out`` holds the events written since the stage
    that owns this object last took them (:meth:`take`); the stage returns them."""

    __slots__ = ("tools", "names", "index", "open", "name", "boundary", "out", "start_event", "arg_parts", "cut",
                 "hold", "_schemas")

    def __init__(self, tools: list[dict] | None, names: list[str] | None, hold: bool = False) -> None:
        self.tools = tools
        self.hold = hold        # opt-in: hold an open call's events until it completes (module docstring)
        self.names = None if names is None else frozenset(names)
        self.index = 0          # index of the next call to start
        self.open = False       # a call has started and not ended
        self.name = ""          # name of the open call
        self.boundary = False
        self.out: list[Event] = []
        self.start_event: ToolCallStart | None = None  # the open call's start, held until it completes
        self.arg_parts: list[str] = []  # its arguments text so far, in pieces (see `held`)
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

    @property
    def held(self) -> list[Event]:
        """The open call's events, as they will be released when it completes: its start and
        one arguments event with all its text so far (``[]`` when no call is open)."""
        events: list[Event] = [] if self.start_event is None else [self.start_event]
        if self.arg_parts:
            text = "".join(self.arg_parts)
            self.arg_parts = [text]
            events.append(ToolCallArguments(self.index, text))
        return events

    def take(self) -> list[Event]:
        """The events written since the last call (and forget them)."""
        out, self.out = self.out, []
        return out

    def start(self, name: str, id: str | None = None) -> None:
        assert not self.open
        if self.hold:
            self.start_event = ToolCallStart(self.index, name, id)
            self.arg_parts = []
        else:
            self.out.append(ToolCallStart(self.index, name, id))
        self.open = True
        self.cut = False
        self.name = name
        self.boundary = True

    def args(self, text: str) -> None:
        if text:
            if self.hold:
                self.arg_parts.append(text)
            else:
                self.out.append(ToolCallArguments(self.index, text))

    def end(self, complete: bool = True) -> None:
        """End the open call; ``complete=False``: the output was cut off inside it, or its
        JSON broke (its arguments are the text written up to there). With ``hold``, a
        complete call's events are released and an incomplete one's dropped, ``cut`` telling
        the owner to give the call's raw text back as content (see the module docstring)."""
        assert self.open
        if not self.hold:
            self.out.append(ToolCallEnd(self.index, complete))
            self.index += 1
        elif complete:
            self.out += self.held
            self.out.append(ToolCallEnd(self.index))
            self.index += 1
        else:
            self.cut = True
        self.start_event, self.arg_parts = None, []
        self.open = False
        self.boundary = True

    def take_cut(self) -> bool:
        """Whether the last call was cut (and forget it)."""
        cut, self.cut = self.cut, False
        return cut

    def export(self, raw: str = "") -> list:
        """Plain data: ``[index, open, name, held, cut]``; ``held`` is ``[[name, id], args]``
        for an open call, where ``args`` is ``[text]``, or ``[start, end]`` when the text is
        ``raw[start:end]`` (``raw``: the owner's exported raw text of the open call)."""
        held: list = []
        for ev in self.held:
            if isinstance(ev, ToolCallStart):
                held.append([ev.name, ev.id])
            else:
                at = raw.find(ev.text) if raw else -1
                held.append([at, at + len(ev.text)] if at >= 0 else [ev.text])
        return [self.index, self.open, self.name, held, self.cut]

    def load(self, data: list, raw: str = "") -> None:
        """Inverse of `export` (``raw``: the same text ``export`` was given). Raises
        TypeError/IndexError for damaged data (a slice outside ``raw``)."""
        self.index, self.open, self.name = data[:3]
        self.start_event, self.arg_parts = None, []
        for item in (data[3] if len(data) > 3 else []):
            if len(item) == 2 and type(item[0]) is str:  # the call's start
                self.start_event = ToolCallStart(self.index, item[0], item[1])
            elif len(item) == 2:  # its arguments, a slice of the raw text
                start, end = item
                if type(start) is not int or type(end) is not int or not 0 <= start <= end <= len(raw):
                    raise IndexError("held arguments outside the raw text")
                self.arg_parts.append(raw[start:end])
            else:
                text = item[0]
                if type(text) is not str:
                    raise TypeError("held arguments are not text")
                self.arg_parts.append(text)
        self.cut = bool(data[4]) if len(data) > 4 else False


class Status(StrEnum):
    """A body mechanism's progress; the values are the codes exported states carry."""

    MORE = "more"    # wants more text
    DONE = "done"    # finished; the framing machine goes on after it
    ERROR = "error"  # not this body after all (or it broke): see the framing machine


MORE, DONE, ERROR = Status

__all__ = ["Calls", "Status", "MORE", "DONE", "ERROR"]
