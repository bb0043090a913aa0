"""Call bodies read whole: the body's text is collected up to its end, then converted once.

For formats whose arguments are not JSON text (MiniMax M3's nested elements) or whose call
name sits inside the body (Apertus ``[{"f": {…}}]``,
OLMo 3 ``f(a=1)`` lines), streaming argument pieces would mean re-serialising a guess;
these bodies hold the body text (undecided, so it belongs in the state) and write each
call's events once its text is complete. The framing machine (:mod:`parsers.tools`)
still streams content, finds the markers and gives a body's text back as content if no
call came of it.

A subclass supplies ``_scan(text, final) -> (end, keep)``: ``end`` the length of the body
in ``text`` (the collected text plus the new text), or None while it is unfinished, and
then ``keep`` the length of ``text`` that is surely body (a possible partial end marker
after it stays with the framing machine, which holds it); and
``_emit(body, calls, complete) -> bool``: write the call events, False if the text is
not a call. ``complete`` is False when the output ended inside the body.
"""

from __future__ import annotations

from .calls import DONE, ERROR, MORE, Calls


class Collected:
    """Base of the collect-then-convert bodies (see module docstring)."""

    kind = ""
    __slots__ = ("fmt", "text", "mark", "status")

    def __init__(self, fmt=None) -> None:
        self.fmt = fmt
        self.text = ""     # body text collected so far
        self.mark = 0      # subclass scan position inside ``text`` (plain int, resumable)
        self.status = MORE

    def export(self) -> list:
        return [self.text, self.mark, self.status, self._export_extra()]

    @classmethod
    def load(cls, data: list, fmt=None):
        obj = cls(fmt)
        obj.text, obj.mark, obj.status, extra = data
        obj._load_extra(extra)
        return obj

    def _export_extra(self) -> list:
        return []

    def _load_extra(self, extra: list) -> None:
        pass

    def feed(self, text: str, pos: int, final: bool, calls: Calls) -> int:
        if self.status != MORE or calls.boundary:
            return pos
        start = len(self.text)
        whole = self.text + text[pos:]
        end, keep = self._scan(whole, final)
        if end is None:
            self.text = whole[:keep]
            return pos + keep - start
        self.text = ""
        self._done(whole[:end], calls, True)
        return pos + end - start

    def finish(self, calls: Calls) -> None:
        if self.status == MORE:
            body, self.text = self.text, ""
            self._done(body, calls, False)

    def _done(self, body: str, calls: Calls, complete: bool) -> None:
        self.status = DONE if self._emit(body, calls, complete) else ERROR

    # -- subclass hooks -------------------------------------------------------------------
    def _scan(self, text: str, final: bool) -> tuple[int | None, int]:
        raise NotImplementedError

    def _emit(self, body: str, calls: Calls, complete: bool) -> bool:
        raise NotImplementedError


def close_started(calls: Calls, args: str, complete: bool = True) -> bool:
    """Arguments of a call the framing machine already started (header formats);
    ``complete=False``: the output ended inside the call (see :class:`parsers.events.ToolCallEnd`)."""
    calls.args(args)
    calls.end(complete)
    return True


__all__ = ["Collected", "close_started"]
