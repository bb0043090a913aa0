"""A family's response framing: markup around the answer that is never answer text.

Framing is a property of the model's output, not of which parser happens to be active
(issue 22): Kimi K3 wraps its answer in ``<|open|>response<|sep|>…<|close|>response<|sep|>``
and ends with ``<|close|>message<|sep|>``, Command 3/4 in ``<|START_RESPONSE|>`` /
``<|START_TEXT|>``, Hunyuan-A13B in ``<answer>``, and PLaMo 3 ends its message with
``<|plamo:tag|>``. So the same :class:`Framing` applies with the reasoning parser alone,
with ``tool_choice: "none"`` and with the tool parser; the reasoning and tool rows of a
family (:mod:`parsers.reasoning`, :mod:`parsers.formats`) both carry it.

* ``drop``: markers removed from content wherever they stand;
* ``blocks``: ``(open, close)`` pairs whose whole block is not content when no tool parser
  reads it (Kimi K3's ``tools`` channel with the reasoning parser alone or
  ``tool_choice: "none"``: the calls are not run, and their markup is not an answer);
* ``stop``: the end of the model's message; nothing after it is output.

:class:`StopFilter` applies ``stop`` before every other stage; :class:`ContentFilter` is the
content stage when no tool parser reads the output (the tool machine drops the markers
itself, :mod:`parsers.tools`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .calls import Calls
from .events import Content, Event
from .scanner import find_marker


@dataclass(frozen=True)
class Framing:
    """One family's framing markers (see the module docstring)."""

    drop: tuple[str, ...] = ()
    blocks: tuple[tuple[str, str], ...] = ()
    stop: tuple[str, ...] = ()

    def __add__(self, other: "Framing") -> "Framing":
        return _sum(self, other)


@lru_cache(maxsize=256)  # a handful of rows: each parser would otherwise rebuild the same sum
def _sum(a: Framing, b: Framing) -> Framing:
    return Framing(_union(a.drop, b.drop), _union(a.blocks, b.blocks), _union(a.stop, b.stop))


def _union(a: tuple, b: tuple) -> tuple:
    return tuple(dict.fromkeys(a + b))


NONE = Framing()

# Per family, shared by its reasoning and tool rows (the markers are the models' own: the
# vLLM 0.33 parsers for these names and, for Command, the Command R7B chat template).
FRAMINGS = {
    "kimi_k3": Framing(drop=("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>"),
                       blocks=(("<|open|>tools<|sep|>", "<|close|>tools<|sep|>"),)),
    "cohere": Framing(drop=("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>")),
    "hunyuan_a13b": Framing(drop=("\n</answer>", "</answer>", "<answer>\n", "<answer>")),
    "plamo3": Framing(stop=("<|plamo:tag|>",)),
}


class StopFilter:
    """Cuts the output at the family's end-of-message marker (held while partial)."""

    __slots__ = ("stop", "buf", "done")

    def __init__(self, stop: tuple[str, ...]) -> None:
        self.stop = stop
        self.buf = ""
        self.done = False

    def feed(self, text: str, final: bool) -> str:
        """The text that is still output (everything before a stop marker)."""
        if self.done:
            return ""
        buf = self.buf + text
        i, m = find_marker(buf, self.stop, final)
        self.buf = "" if m is not None else buf[i:]
        self.done = m is not None
        return buf[:i]

    def export(self) -> list:
        return [self.buf, self.done]

    def load(self, data: list) -> None:
        self.buf, self.done = data


class ContentFilter:
    """No tool extraction (no tool parser, or ``tool_choice: none``): all text is content,
    without the family's framing markers and hidden blocks."""

    __slots__ = ("calls", "framing", "buf", "block")

    def __init__(self, calls: Calls, framing: Framing = NONE) -> None:
        self.calls = calls
        self.framing = framing
        self.buf = ""      # a held partial marker
        self.block = ""    # the close marker of the hidden block we are in ("" outside)

    def feed(self, text: str) -> list[Event]:
        return self._run(text, final=False)

    def finish(self) -> list[Event]:
        return self._run("", final=True)

    def _run(self, text: str, final: bool) -> list[Event]:
        fr = self.framing
        if not (fr.drop or fr.blocks):
            return [Content(text)] if text else []
        buf, out, pos = self.buf + text, [], 0
        opens = {o: c for o, c in fr.blocks}
        while True:
            markers = (self.block,) if self.block else fr.drop + tuple(opens)
            i, m = find_marker(buf[pos:], markers, final)
            if not self.block and i:
                out.append(Content(buf[pos:pos + i]))
            if m is None:
                pos += i
                break
            pos += i + len(m)
            self.block = "" if self.block else opens.get(m, "")
        self.buf = buf[pos:]
        if final and self.block:
            self.block = ""  # an unclosed block stays hidden
        return out

    def export(self) -> dict:
        return {"buf": self.buf, "block": self.block} if self.buf or self.block else {}

    def load(self, data: dict) -> None:
        self.buf, self.block = data.get("buf", ""), data.get("block", "")


__all__ = ["Framing", "StopFilter", "ContentFilter", "NONE", "FRAMINGS"]
