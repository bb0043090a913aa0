"""Stop strings over streamed text: sans-IO, state = the held-back suffix.

A tokens-only engine cannot apply stop strings (wire brief §1.8), so derender does. Text
arrives in pieces; a piece is released as soon as no stop string can still *end* inside
it. Only the longest suffix of the text that is a proper prefix of some stop string is
held back (at most ``max(len(stop)) - 1`` characters), so a stop string that spans tokens
— or starts in the middle of one — is caught before any of it is sent (shared case 30;
vLLM answers 400 for stop strings while streaming, §3.4).

Match rule (wire brief §3.2 step 4): the match that *ends* earliest wins, ties go to the
earlier entry of the list; a match must end after the text of the first ``min_tokens``
tokens ("protected" text). The text is cut before the match, or after it with
``include_stop_str_in_output``. Non-streaming uses the same object with one ``push``.
"""

from __future__ import annotations


class StopMatcher:
    """Find the first stop string in text that arrives in pieces.

    Args:
        stops: the request's stop strings (empty strings are ignored).
        include_stop_str_in_output: keep the matched string in the released text.
        state: a previous `export_state` value, or None to start.

    Attributes:
        stopped: the matched stop string once found; afterwards all input is discarded.
    """

    def __init__(self, stops: list[str], include_stop_str_in_output: bool = False, state: dict | None = None) -> None:
        self.stops = [s for s in stops if s]
        self.include = include_stop_str_in_output
        self.held = ""
        self.protected = 0  # leading chars of `held` that no match may end within
        self.stopped: str | None = None
        if state:
            held, protected, stopped = state.get("held", ""), state.get("protected", 0), state.get("stopped")
            if not isinstance(held, str) or type(protected) is not int or not 0 <= protected <= len(held):
                raise ValueError("stop state: malformed held text")
            if stopped is not None and stopped not in self.stops:
                raise ValueError("stop state: the matched stop string is not among the request's stop strings")
            self.held, self.protected, self.stopped = held, protected, stopped

    def export_state(self) -> dict:
        """``{"held": str, "protected": int, "stopped": str|None}``; ``held`` is bounded by
        the longest stop string."""
        return {"held": self.held, "protected": self.protected, "stopped": self.stopped}

    def push(self, text: str, protected: bool = False) -> str:
        """Add ``text``; return what can be released now. ``protected`` marks text of the
        first ``min_tokens`` tokens (no match may end inside it)."""
        if self.stopped is not None:
            return ""
        if not self.stops:
            return text
        buf = self.held + text
        guard = len(buf) if protected else self.protected
        best: tuple[int, int, str] | None = None  # (end, start, stop)
        for stop in self.stops:
            start = buf.find(stop, max(0, guard - len(stop) + 1))
            if start >= 0 and (best is None or start + len(stop) < best[0]):
                best = (start + len(stop), start, stop)
        if best is not None:
            end, start, stop = best
            self.stopped, self.held, self.protected = stop, "", 0
            return buf[:end] if self.include else buf[:start]
        keep = self._partial_suffix(buf)
        cut = len(buf) - keep
        self.held = buf[cut:]
        self.protected = max(0, guard - cut)
        return buf[:cut]

    def flush(self) -> str:
        """Generation ended for another reason: release the held-back text."""
        out, self.held, self.protected = self.held, "", 0
        return out if self.stopped is None else ""

    def _partial_suffix(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of a stop string."""
        longest = max(len(s) for s in self.stops) - 1
        for k in range(min(longest, len(buf)), 0, -1):
            tail = buf[-k:]
            if any(len(s) > k and s.startswith(tail) for s in self.stops):
                return k
        return 0
