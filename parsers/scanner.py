"""Marker scanner: find literal markers in streamed text, holding back only what must wait.

Every parser in this package splits text at literal markers (``<think>``, ``<tool_call>``,
``<|channel|>``, ``[TOOL_CALLS]`` …). In a stream a marker can arrive split across feeds
(``"def</th"`` + ``"ink> answer"``), so text that *might* be the start of a marker cannot
be released yet. The rule used everywhere: hold back exactly the longest suffix of the
buffer that is a strict prefix of some marker that is still possible in the current
state; release everything before it. At ``finish`` nothing can complete any more, so the
held text is plain text.

The scanner is a pure function over ``(buffer, markers)``; the caller keeps the held
suffix as its state (a short string, never longer than the longest marker).
"""

from __future__ import annotations

from collections.abc import Sequence


def find_marker(buf: str, markers: Sequence[str], final: bool) -> tuple[int, str | None]:
    """Locate the first marker in ``buf``.

    Returns ``(pos, marker)`` for the earliest complete marker (on a tie the longest one
    wins). When there is none, returns ``(pos, None)`` where ``buf[:pos]`` is safe to
    release and ``buf[pos:]`` must be held back because it could still grow into a marker
    (``pos == len(buf)`` when ``final`` is true or nothing can grow).

    A complete match is also held back (``(pos, None)``) when a *longer* marker starts
    with it and the buffer ends before that longer marker could be decided, so
    ``<tool_call>`` never wins over a longer marker it prefixes before the text settles;
    and when the buffer ends inside a marker that would start *before* it (``\n</think>\n``
    containing ``</think>``), so the earliest marker wins however the text is split.
    """
    best = -1
    best_marker: str | None = None
    for m in markers:
        if not m:
            continue
        i = buf.find(m)
        if i >= 0 and (best < 0 or i < best or (i == best and len(m) > len(best_marker))):
            best, best_marker = i, m
    if best_marker is not None:
        if not final:
            tail = buf[best:]
            for m in markers:
                if len(m) > len(tail) and m.startswith(tail):
                    return best, None
            held = len(buf) - held_suffix_len(buf, markers)
            if held < best:  # a marker that starts earlier (``\n</think>`` vs ``</think>``) may still come
                return held, None
        return best, best_marker
    if final:
        return len(buf), None
    return len(buf) - held_suffix_len(buf, markers), None


def held_suffix_len(buf: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``buf`` that is a strict prefix of a marker."""
    longest = max((len(m) for m in markers), default=0)
    for k in range(min(len(buf), longest - 1), 0, -1):
        tail = buf[-k:]
        for m in markers:
            if len(m) > k and m.startswith(tail):
                return k
    return 0


def release_run(held: str, started: bool, text: str, filler: str = " \t\r\n") -> tuple[str, str, bool]:
    """Blank text at the start of a run of content waits to see what follows.

    Between tool calls (or Harmony messages) models write newlines that are not part of
    the answer; they must be dropped if the next thing is another call, but kept if real
    text follows. Deciding on the text, not on how it was chunked, keeps streaming equal
    to non-streaming. ``held``/``started`` are the caller's state (held blanks; whether the
    current run already has real text). Returns ``(text to release now, held, started)``;
    the caller drops ``held`` at the next marker.
    """
    if started:
        return text, held, True
    text = held + text
    if not text.strip(filler):
        return "", text, False
    return text, "", True


__all__ = ["find_marker", "held_suffix_len", "release_run"]
