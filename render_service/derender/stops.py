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

Cost: all stop strings share one Aho-Corasick automaton, so a push costs time linear in
the pushed text (plus the held suffix once when a state is restored), whatever the number
or length of the stop strings; a naive ``find`` per stop costs their product per piece,
which let one request stall the event loop (issue 14 §2). The automaton's state *is* the
held suffix (the longest suffix of the text that is a proper prefix of a stop string is
the deepest trie node with children on the failure chain), so the exported state stays
the held text and a state from any replica resumes exactly. pyahocorasick was tried
and not used: it keeps its automaton state private, and the held suffix needs it.

Limits (checked before any automaton is built, `wire.limits.check_stop_limits`; vLLM has none, OpenAI
allows 4 strings): at most `MAX_STOP_STRINGS` strings of at most `MAX_STOP_CHARS` characters each.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..wire.limits import check_stop_limits


class _Automaton:
    """Aho-Corasick automaton over a tuple of stop strings (immutable, shared via cache).

    Node 0 is the root. Per node: ``goto`` (trie edges), ``fail`` (failure link),
    ``out`` (lowest list index of a stop string that ends here, along the failure chain,
    or -1) and ``hold`` (depth of the deepest node on the failure chain, itself included,
    that has children: the held-back length when the text ends in this node).
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        goto: list[dict[str, int]] = [{}]
        depth, out = [0], [-1]
        for index, stop in enumerate(stops):
            node = 0
            for ch in stop:
                nxt = goto[node].get(ch)
                if nxt is None:
                    nxt = len(goto)
                    goto[node][ch] = nxt
                    goto.append({})
                    depth.append(depth[node] + 1)
                    out.append(-1)
                node = nxt
            if out[node] < 0:
                out[node] = index
        fail = [0] * len(goto)
        hold = [0] * len(goto)
        queue = list(goto[0].values())
        for node in queue:  # breadth-first: a node's failure target is shallower, so done first
            f = fail[node]
            if out[f] >= 0 and (out[node] < 0 or out[f] < out[node]):
                out[node] = out[f]
            hold[node] = depth[node] if goto[node] else hold[f]
            for ch, child in goto[node].items():
                g = f
                while g and ch not in goto[g]:
                    g = fail[g]
                fail[child] = goto[g].get(ch, 0)
                queue.append(child)
        self.stops, self.goto, self.fail, self.out, self.hold = stops, goto, fail, out, hold
        self.starts = re.compile("[" + "".join(re.escape(ch) for ch in goto[0]) + "]")

    def step(self, node: int, ch: str) -> int:
        """The node after reading ``ch`` in ``node``."""
        goto, fail = self.goto, self.fail
        while True:
            nxt = goto[node].get(ch)
            if nxt is not None:
                return nxt
            if node == 0:
                return 0
            node = fail[node]

    def scan(self, buf: str, start: int, node: int, guard: int) -> tuple[int, int, int]:
        """Read ``buf[start:]`` from ``node``. Returns ``(node, end, stop_index)`` for the
        first match ending at ``end > guard`` (``stop_index`` -1 and ``end`` = len(buf)
        when there is none; ``node`` is then the state after the whole text)."""
        out, step, starts = self.out, self.step, self.starts
        i, n = start, len(buf)
        while i < n:
            if node == 0:  # skip in C to the next character that can begin a stop string
                m = starts.search(buf, i)
                if m is None:
                    return 0, n, -1
                i = m.start()
            node = step(node, buf[i])
            i += 1
            if out[node] >= 0 and i > guard:
                return node, i, out[node]
        return node, n, -1


@lru_cache(maxsize=128)
def _automaton(stops: tuple[str, ...]) -> _Automaton:
    return _Automaton(stops)


class StopMatcher:
    """Find the first stop string in text that arrives in pieces.

    Args:
        stops: the request's stop strings (empty strings are ignored).
        include_stop_str_in_output: keep the matched string in the released text.
        state: a previous `export_state` value, or None to start.

    Raises:
        ValueError: ``stops`` over `MAX_STOP_STRINGS` / `MAX_STOP_CHARS`, or a malformed ``state``.

    Attributes:
        stopped: the matched stop string once found; afterwards all input is discarded.
    """

    def __init__(self, stops: list[str], include_stop_str_in_output: bool = False, state: dict | None = None) -> None:
        check_stop_limits(stops)
        self.stops = [s for s in stops if s]
        self.include = include_stop_str_in_output
        self.held = ""
        self.protected = 0  # leading chars of `held` that no match may end within
        self.stopped: str | None = None
        self._ac = _automaton(tuple(self.stops)) if self.stops else None
        self._node = 0  # automaton state after `held`
        if state:
            held, protected, stopped = state.get("held", ""), state.get("protected", 0), state.get("stopped")
            if not isinstance(held, str) or type(protected) is not int or not 0 <= protected <= len(held):
                raise ValueError("stop state: malformed held text")
            if len(held) > max((len(s) for s in self.stops), default=0):
                raise ValueError("stop state: held text longer than any stop string")
            if stopped is not None and stopped not in self.stops:
                raise ValueError("stop state: the matched stop string is not among the request's stop strings")
            self.held, self.protected, self.stopped = held, protected, stopped
            if self._ac is not None:
                for ch in held:
                    self._node = self._ac.step(self._node, ch)

    def export_state(self) -> dict:
        """``{"held": str, "protected": int, "stopped": str|None}``; ``held`` is bounded by
        the longest stop string."""
        return {"held": self.held, "protected": self.protected, "stopped": self.stopped}

    def push(self, text: str, protected: bool = False) -> str:
        """Add ``text``; return what can be released now. ``protected`` marks text of the
        first ``min_tokens`` tokens (no match may end inside it). Time linear in ``text``."""
        if self.stopped is not None:
            return ""
        ac = self._ac
        if ac is None:
            return text
        buf = self.held + text
        guard = len(buf) if protected else self.protected
        node, end, index = ac.scan(buf, len(self.held), self._node, guard)
        if index >= 0:
            stop = ac.stops[index]
            self.stopped, self.held, self.protected, self._node = stop, "", 0, 0
            return buf[:end] if self.include else buf[:end - len(stop)]
        cut = len(buf) - ac.hold[node]
        self.held = buf[cut:]
        self.protected = max(0, guard - cut)
        self._node = node
        return buf[:cut]

    def flush(self) -> str:
        """Generation ended for another reason: release the held-back text."""
        out, self.held, self.protected, self._node = self.held, "", 0, 0
        return out if self.stopped is None else ""
