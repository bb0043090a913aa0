"""The tool-call framing machine: one state machine for every marker-delimited family.

Theory of operation. Content text arrives (after the reasoning stage took its part). A
family is a :class:`parsers.formats.ToolFormat` row: which markers open a tool *section*,
which open one *call*, whether a *header* (name / id) sits between the call marker and
the arguments, which *body* mechanism reads the arguments, and which marker ends a call.
The machine walks five states (:class:`State`); the marker-driven moves are the table
:data:`TRANSITIONS`::

    TEXT --section_begin--> SECTION --call_begin--> HEADER --header_end--> BODY --> AFTER
      |                        ^  \\--section_end--> TEXT                 ^        |
      \\--call_begin (or a call syntax at the very start of output) ----/         |
                                   <------ call_end / next call_begin -------------/

* TEXT releases content through the marker scanner (partial markers held back).
  Blank text before any content or after a call is held: dropped if a call follows (or
  the output ends after calls), released if real content follows. So
  ``</think>\n\n<tool_call>`` gives no content while ``Checking.\n<tool_call>`` keeps
  ``"Checking.\n"`` (vLLM's hermes behaviour), identically for every chunking.
* HEADER collects the call's name (and id, for kimi_k2); a name that is not a valid tool
  makes the call *malformed*.
* BODY hands the characters to a body mechanism (JSON object / envelope / list, XML
  parameters, Python calls), which writes the call events and returns at call boundaries.
* AFTER swallows whitespace (and the family's junk, e.g. deepseek's code fence) up to the
  call's end marker.

Malformed output never raises and never loses text: until a call has *started* (its name
read and valid; a JSON envelope's arguments past their ``{``), every raw character since
the call marker — or since the section marker, while the section has no call yet — is kept
in ``raw`` and goes back to content if the call turns out malformed; scanning goes on in
the section, so a valid call after a broken one is a call (the section's end marker is then
content too if no call follows). A started call streams: a cut or a
break ends it not complete (:mod:`parsers.calls`) and the rest of the text is content
again. With ``Calls.hold`` (opt-in) ``raw`` is kept until the call completes, and a call
cut off or broken goes back to content whole.
"""

from __future__ import annotations

from enum import StrEnum

from .calls import ERROR, MORE, Calls
from .events import Content, Event
from .formats import ToolFormat, parse_header
from .gemmacalls import GemmaCall
from .jsoncalls import JsonArgs, JsonCall, JsonList, JsonSequence
from .namedcalls import KeyedList, PythonLines
from .nestedxml import NestedXmlCall
from .pythonic import PythonCalls
from .scanner import find_marker, release_run
from .xmlcalls import XmlCall

BODIES = {cls.kind: cls for cls in (JsonArgs, JsonCall, JsonList, JsonSequence, XmlCall, PythonCalls,
                                     GemmaCall, KeyedList, PythonLines, NestedXmlCall)}



class State(StrEnum):
    """Where the framing machine is; the values are the codes exported states carry."""

    TEXT = "text"        # content, scanning for a section or call marker
    SECTION = "section"  # inside a tool section, between calls
    HEADER = "header"    # reading a call's name (and id)
    BODY = "body"        # a body mechanism reads the arguments
    AFTER = "after"      # a body ended; up to the call's end marker


TEXT, SECTION, HEADER, BODY, AFTER = State

# Marker kinds are the ToolFormat fields that hold them. ``CALL``: a call begins (HEADER
# when the row has a header, else BODY); ``OUTER``: back where the call began.
SECTION_BEGIN, SECTION_END, CALL_BEGIN, CALL_END = "section_begin", "section_end", "call_begin", "call_end"
CALL, OUTER = "call", "outer"

# state -> marker kind -> next state, for the states that wait for a framing marker; on
# equal markers a later kind wins. Beside the table: TEXT's markers are the row's
# ``text_markers`` (and a call syntax at the very start of output, ``at_start``); AFTER
# looks for the section's end only inside a section; a section ending without a call is
# dropped or given back as content (``_section_without_call``); one the output cuts off
# before any call opened is content (as a call cut before it opened).
TRANSITIONS: dict[State, dict[str, str]] = {
    TEXT: {CALL_BEGIN: CALL, SECTION_BEGIN: SECTION},
    SECTION: {CALL_BEGIN: CALL, SECTION_END: TEXT},
    AFTER: {CALL_BEGIN: CALL, SECTION_END: TEXT, CALL_END: OUTER},
}
_WS = " \t\n\r"
_MAX_HEADER = 512


class ToolStage:
    """Splits content text into ``Content`` and ``ToolCall*`` events for one family.

    ``at_start`` maps a first character of the output to a body kind that opens a call
    without any marker (llama3_json ``{``, pythonic ``[``, ``tool_choice`` modes);
    ``named`` is the function name forced by a named ``tool_choice`` (its bare arguments
    object at the start of output is the call).
    """

    __slots__ = ("base", "fmt", "calls", "at_start", "named", "drop", "scan", "st", "outer", "buf", "raw", "header",
                 "ws", "said", "fresh", "sec0", "gave", "body", "_stop")

    def __init__(self, fmt: ToolFormat, calls: Calls, at_start: dict[str, str],
                 named: str | None = None, drop: tuple[str, ...] | None = None) -> None:
        self.base = fmt        # the row as registered; ``fmt`` is the spelling being read
        self.fmt = fmt
        # content markers never shown: the row's own and its family's framing (the caller
        # adds the reasoning row's framing, parsers.framing)
        self.drop = fmt.content_framing.drop if drop is None else drop
        self.scan = fmt.all_text_markers + self.drop  # what TEXT looks for (derived, not state)
        self.calls = calls
        self.at_start = at_start
        self.named = named
        self.st = TEXT
        self.outer = TEXT      # where a call returns to: TEXT or SECTION
        self.buf = ""          # unconsumed text (held partial marker / undecided lookahead)
        self.raw: list[str] = []  # raw text of a call that has not started yet (pieces)
        self.header = ""
        self.ws = ""           # blank content waiting to see what follows (dropped before/after calls)
        self.said = False      # the current run of content (since the last call) is not blank
        self.fresh = True      # nothing but whitespace seen yet
        self.sec0 = -1         # call index when the current section began
        self.gave = False      # the current section gave a malformed call back as content
        self.body = None

    # -- plain data -------------------------------------------------------------------
    def export(self) -> dict:
        raw = "".join(self.raw)
        self.raw = [raw] if raw else []  # one piece from now on: a stream's next export joins two, not every token's
        return {"st": self.st.value, "outer": self.outer.value, "buf": self.buf, "raw": raw,
                "header": self.header, "ws": self.ws, "said": self.said, "fresh": self.fresh,
                "sec0": self.sec0, "gave": self.gave, "spelling": self._spelling(),
                "body": [self.body.kind, self.body.export()] if self.body else None}

    def _spelling(self) -> int:
        return 0 if self.fmt is self.base else 1 + self.base.spellings.index(self.fmt)

    def load(self, data: dict) -> None:
        k = data.get("spelling", 0)
        self.fmt = self.base.spellings[k - 1] if k else self.base
        for key in ("buf", "header", "ws", "said", "fresh", "sec0"):
            setattr(self, key, data[key])
        self.gave = bool(data.get("gave", False))
        self.st, self.outer = State(data["st"]), State(data["outer"])
        self.raw = [data["raw"]] if data["raw"] else []
        body = data["body"]
        self.body = BODIES[body[0]].load(body[1], self.fmt) if body else None
        reopened = getattr(self.body, "reopened", "")
        if reopened and not self.calls.open:  # an old layout's call, already sent: open again, silently
            self.calls.open, self.calls.name, self.calls.cut = True, reopened, False

    # -- driving ----------------------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        """Consume content text; returns the events it completes."""
        self.buf += text
        self._run(final=False)
        return self.calls.take()

    def finish(self) -> list[Event]:
        """End of output: flush what is held, close what is open; returns the events."""
        self._run(final=True)
        if self.st == HEADER:
            self._malformed()
        if self.st == SECTION and self._empty_section():
            self._malformed()  # a section cut before any call opened: the model's text, content
        if self.ws and not self.calls.index:
            self.calls.out.append(Content(self.ws))  # blank output without calls stays content
        self.ws = ""
        return self.calls.take()

    def _run(self, final: bool) -> None:
        buf, pos = self.buf, 0
        while True:
            new = _STEP[self.st](self, buf, pos, final)
            if new is None:
                break
            pos = new
        self.buf = buf[self._stop:]

    # Each state handler returns the next position to continue from, or None to stop
    # (then ``self._stop`` is where unconsumed text starts).

    def _in_text(self, buf: str, pos: int, final: bool) -> int | None:
        if self.fresh and self.at_start:
            j = _skip_blanks(buf, pos)
            if j == len(buf) and not final:
                self._stop = pos
                return None
            kind = self._start_kind(buf, j, final) if j < len(buf) else None
            if kind == "wait":
                self._stop = pos
                return None
            self.fresh = False
            if kind:
                self.raw = []
                self._open(kind)
                return j
        i, m = find_marker(buf[pos:], self.scan, final)
        self._content(buf[pos:pos + i])
        if m is None:
            self._stop = pos + i
            return None
        if m in self.fmt.label_begin:
            return self._label(buf, pos + i, m, final)
        if m in self.drop and m not in self.base.all_text_markers:
            return pos + i + len(m)  # content-block framing: never shown
        self.fresh = False
        if self.base.spellings:  # the spelling whose marker this is reads the section or call it opens
            self.fmt = next((row for row in (self.base,) + self.base.spellings if m in row.text_markers), self.base)
        if m in self.fmt.section_begin:
            self.raw, self.sec0, self.gave = [m], self.calls.index, False
            self._move(SECTION_BEGIN, m)
        else:
            self.outer = TEXT
            self._move(CALL_BEGIN, m)
        return pos + i + len(m)

    def _label(self, buf: str, at: int, m: str, final: bool) -> int | None:
        """``buf[at:]`` starts with a label marker: skip the label (a name: no blanks) up
        to its end marker (left for the next step), hold it while that may still come,
        else it is content."""
        start = at + len(m)
        i, end = find_marker(buf[start:], self.fmt.label_end, final)
        named = not any(c in _WS for c in buf[start:start + i])
        if end is not None and named:
            return start + i
        if end is None and named and not final and i < _MAX_HEADER:
            self._stop = at
            return None
        self.fresh = False
        self._content(buf[start:start + i])
        return start + i

    def _start_kind(self, buf: str, j: int, final: bool) -> str | None:
        c = buf[j]
        kind = self.at_start.get(c)
        if kind == "list|pythonic":  # '[' opens a JSON list or a Python call list
            k = _skip_blanks(buf, j + 1)
            if k == len(buf):
                return "pythonic" if final else "wait"
            return "list" if buf[k] in "{]" else "pythonic"
        return kind

    def _in_section(self, buf: str, pos: int, final: bool) -> int | None:
        if self.fmt.section_body and self._blank_in_section():  # a JSON object right inside is a call
            j = _skip_blanks(buf, pos)
            if j < len(buf) and buf[j] == "{":
                if self._empty_section():
                    self.raw.append(buf[pos:j])
                self.ws, self.said, self.header = "", False, ""
                self._open(self.fmt.section_body)
                return j
        kinds = self._markers(SECTION)
        i, m = find_marker(buf[pos:], tuple(kinds), final)
        if self._empty_section() and not self.gave:
            self.raw.append(buf[pos:pos + i])
        else:
            self._junk(buf[pos:pos + i])
        if m is None:
            self._stop = pos + i
            return None
        if kinds[m] == SECTION_END and self._empty_section():
            self._section_without_call(m)
        self._move(kinds[m], m)
        return pos + i + len(m)

    def _in_header(self, buf: str, pos: int, final: bool) -> int | None:
        fmt = self.fmt
        if fmt.list_after_begin and not self.header.strip():
            j = _skip_blanks(buf, pos)
            if j < len(buf) and buf[j] == "[":
                self.raw.append(buf[pos:j])
                self._open("list")
                return j
        i, m = find_marker(buf[pos:], fmt.header_end + fmt.header_peek, final)
        self.header += buf[pos:pos + i]
        self.raw.append(buf[pos:pos + i])
        if fmt.header == "blank" and self.header.strip(_WS):
            self._malformed()  # e.g. InternLM's <|action_start|><|interpreter|>: not a call
            return pos + i
        if m is None:
            self._stop = pos + i
            if len(self.header) > _MAX_HEADER:
                self._malformed()
                return pos + i
            return None
        end = pos + i
        if m in fmt.header_end:
            end += len(m)
            self.raw.append(m)
        if fmt.header == "blank":  # the markers only frame the call; its body names it
            self.header = ""
            self._open(fmt.body)
            return end
        closed = fmt.xml is not None and self.header.rstrip().endswith("/")  # <invoke name="f"/>
        name, call_id = parse_header(fmt.header, self.header.rstrip().removesuffix("/") if closed else self.header)
        if name is not None and fmt.doubled_names and not self.calls.valid(name):
            head, dot, tail = name.partition(".")
            name = head if dot and head == tail else name
        if name is None or not self.calls.valid(name):
            self._malformed()
            return end
        self.calls.start(name, call_id)
        self.header = ""
        if closed:  # a call without a body
            self.calls.args("{}")
            self.calls.end()
            self.raw, self.said = [], False
            self.st = AFTER if fmt.call_end else self.outer
            return end
        self._open(fmt.body)
        return end

    def _in_body(self, buf: str, pos: int, final: bool) -> int | None:
        if self.body is None:  # the row has a second body syntax: its first characters decide
            kind = _body_kind(self.fmt, buf, pos, final)
            if kind is None:
                self._stop = pos
                return None
            self.body = BODIES[kind](self.fmt)
        calls, body = self.calls, self.body
        calls.boundary = False
        new = body.feed(buf, pos, final, calls)
        # raw text is kept while it may still become content: until a call starts (with
        # ``hold``, until it completes); a started call streams and is never taken back
        if calls.hold or not (calls.boundary or calls.open):
            self.raw.append(buf[pos:new])
        else:
            self.raw = []
        if self._settle():
            return new
        if body.status == MORE and not calls.boundary:
            # the body took all it could: wait for more text, or end the input here
            if not final:
                self._stop = new
                return None
            body.finish(calls)
            if self._settle():
                return new
        return self._after_body(new)

    def _settle(self) -> bool:
        """After a body step: a call that completed leaves no raw text to keep; one that
        ended not complete (cut off, or its JSON broke) is given back as content, all of
        it from its marker on (True: scanning goes on outside the call)."""
        if self.calls.take_cut():
            self._malformed()
            return True
        if self.calls.boundary and not self.calls.open:
            self.raw = []
        return False

    def _after_body(self, pos: int) -> int:
        status = self.body.status
        if status == MORE:
            return pos
        second = self.body.kind != self.fmt.body  # a second syntax: the dialect's call end follows
        self.body = None
        if status == ERROR and not self.calls.boundary and any(self.raw):
            self._malformed()
            return pos
        self.raw, self.said = [], False
        self.st = AFTER if self.fmt.call_end or (second and self.fmt.xml) else self.outer
        return pos

    def _in_after(self, buf: str, pos: int, final: bool) -> int | None:
        kinds = self._markers(AFTER)
        i, m = find_marker(buf[pos:], tuple(kinds), final)
        self._junk(buf[pos:pos + i])
        if m is None:
            self._stop = pos + i
            return None
        self._move(kinds[m], m)
        return pos + i + len(m)

    # -- helpers ----------------------------------------------------------------------
    def _markers(self, st: State) -> dict[str, str]:
        """``{marker: kind}`` that ``st`` waits for, from :data:`TRANSITIONS` and the row."""
        found: dict[str, str] = {}
        for kind in TRANSITIONS[st]:
            if kind == SECTION_END and st == AFTER and self.outer != SECTION:
                continue
            found.update(dict.fromkeys(getattr(self.fmt, kind), kind))
        if st == AFTER and self.fmt.xml:  # after a body of the row's second syntax
            found.update(dict.fromkeys(self.fmt.xml.call_end, CALL_END))
        return found

    def _move(self, kind: str, marker: str) -> None:
        """Take the transition of the current state for a marker of ``kind``."""
        target = TRANSITIONS[self.st][kind]
        if target == CALL:
            self._begin_call(marker)
            return
        self.ws = ""
        if target == OUTER:
            self.st = self.outer
        else:
            self.st = self.outer = target
    def _begin_call(self, marker: str) -> None:
        self.ws, self.said = "", False
        self.raw.append(marker)  # after the section marker, if the section has no call yet
        self.header = ""
        if self.fmt.header_end or self.fmt.header_peek or self.fmt.list_after_begin:
            self.st = HEADER
        else:
            self._open(self.fmt.body)

    def _open(self, kind: str) -> None:
        self.st = BODY
        if kind == "named":
            self.calls.start(self.named)
            kind = "args"
        # a row with a second body syntax waits for the body's first characters
        self.body = None if kind == self.fmt.body and self.fmt.alt_bodies else BODIES[kind](self.fmt)

    def _malformed(self) -> None:
        """The call never started: its raw text is content (with the section's marker, while
        the section has no call yet), scanning resumes where the call began — inside its
        section, so a valid call after a broken one is still a call (issue 40)."""
        raw, self.raw, self.header = "".join(self.raw), [], ""
        if self.outer == SECTION and self._empty_section():
            self.gave = True  # the section's marker went back to content with the call
        self.st = self.outer
        self.body = None
        self._content(raw)

    def _section_without_call(self, end: str) -> None:
        """A section that held no call: blank, it is dropped (Kimi K2 writes an empty
        tool-calls section; its markers are not answer text); with text, it was not a
        tool section and all of it is content."""
        raw = "".join(self.raw)
        if self._inner(raw).strip(_WS) or self.gave:  # (its marker is content already: so is its end)
            self._content(raw + end)
        self.raw = []

    def _inner(self, raw: str) -> str:
        """``raw`` without the section marker it starts with."""
        return next((raw[len(m):] for m in self.fmt.section_begin if raw.startswith(m)), raw)

    def _blank_in_section(self) -> bool:
        """Only blanks since the section began or its last call (whatever the chunking)."""
        if self._empty_section() and not self.gave:
            return not self._inner("".join(self.raw)).strip(_WS)
        return not self.said

    def _empty_section(self) -> bool:
        return self.calls.index == self.sec0 and not self.calls.open

    def _content(self, s: str, filler: str = _WS) -> None:
        """Content, with blanks (and ``filler``) at the start of a run held: see
        :func:`parsers.scanner.release_run`."""
        if s:
            s, self.ws, self.said = release_run(self.ws, self.said, s, filler)
            if s:
                self.calls.out.append(Content(s))

    def _junk(self, s: str) -> None:
        """Text inside a section or before an end marker: the family's filler (blanks, a
        code fence) is dropped at the next marker; anything else is content."""
        self._content(s, _WS + self.fmt.junk)


def _skip_blanks(buf: str, pos: int) -> int:
    while pos < len(buf) and buf[pos] in _WS:
        pos += 1
    return pos


def _body_kind(fmt: ToolFormat, buf: str, pos: int, final: bool) -> str | None:
    """The body kind whose first characters ``buf[pos:]`` shows (blanks skipped): one of the
    row's ``alt_bodies``, else its own; None while the text is too short to tell."""
    sig = "".join(c for c in buf[pos:pos + 64] if c not in _WS)
    for prefix, kind in fmt.alt_bodies:
        if sig.startswith(prefix):
            return kind
        if prefix.startswith(sig) and not final:
            return None
    return fmt.body


_STEP = {TEXT: ToolStage._in_text, SECTION: ToolStage._in_section, HEADER: ToolStage._in_header,
         BODY: ToolStage._in_body, AFTER: ToolStage._in_after}


__all__ = ["ToolStage", "BODIES"]
