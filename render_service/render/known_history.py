"""A chat body's JSON parsed only past the messages an earlier body already had.

An agent resends its whole conversation every turn: turn N+1's body is turn N's with a
few messages appended (some 670 KB, of which ~30 KB new, on the 41st turn of the
agent-trace bench), and parsing all of it was an eighth of the turn. `KnownHistory.loads`
keeps, for recent large bodies, where each element of the ``messages`` array ends and
the element values orjson made of them. A new body whose bytes start with such a body's
bytes up to the end of its ``j``-th message is parsed as

    head + SENTINEL + rest        (head: the bytes up to and including the array's "[",
                                   rest: the new body from the end of message j on)

and element 0 of the result is replaced by the j known messages. This is exact:

- the known bytes are equal (compared, never hashed), and a JSON value's parse depends
  only on its own bytes, so those j elements parse to the values kept;
- the shortened text is valid JSON exactly when the body is (a run of complete array
  elements replaced by one);
- it is parsed twice, with sentinels ``0`` and ``1``: only when element 0 of the result's
  ``messages`` follows the sentinel is that array the one the known elements belong to
  (a later duplicate ``"messages"`` key, however spelt, would win in the body as in the
  shortened text and keep its own first element in both parses);
- an element boundary is trusted only when the bytes there are an object that
  re-serialises (orjson) to exactly those bytes, or msgspec's scan of the body says so,
  and objects are prefix-free (an object value ends at its own closing brace).

Anything else — a body under `MIN_BODY_BYTES`, no match, a shortened text that does not
parse — goes through plain ``orjson.loads(body)``, so errors read as before. The kept
values are shared between requests: render never mutates a client's message objects
(`render.messages.prepare_messages` copies). Bounded by `MAX_ENTRIES` bodies and
`MAX_BYTES` of them and their parsed messages, of which bodies no later one has extended
yet (one-shot traffic, or a conversation's first large turn) are at most `MAX_COLD`, so a
lookup compares few;
Prometheus counts lookups by outcome and the bytes not re-parsed.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any

import msgspec
import orjson
from prometheus_client import Counter

MIN_BODY_BYTES = 16 * 1024
"""Smaller bodies parse in microseconds: they are neither kept nor looked up."""
MAX_ENTRIES = 64
MAX_COLD = 8
MIN_REUSED_SHARE = 0.5
"""The rest of a body is parsed twice (two sentinels), so a known part is taken only when it is
more than this share of the body: another conversation's last turn, which shares just its
system prompt with a kept body, is parsed once, plainly (it cost a cold render 3-14% more)."""
MAX_BYTES = 128 * 1024 * 1024
"""Bytes of kept bodies and of their parsed messages (`_weights`: tiny JSON values parse to ~20x
their bytes, so the values are counted, not taken to cost about as much as the bytes)."""
MAX_SHARE_OF_ONE = 16
"""A body whose messages weigh more than ``max_bytes`` / this (8 MiB: several images as data URLs) is
not kept, ..."""
MAX_OBJECTS = 32 * 1024
"""... nor one whose new messages hold more objects than this (an agent's 82-message history holds
~1000; the walk, ~0.2 us an object on the event loop, stops here: ~6 ms)."""

LOOKUPS = Counter("render_service_known_history_lookups_total",
                  "Chat bodies of at least 16 KiB by how their messages were parsed: 'reused' (an earlier "
                  "body's messages taken for its common prefix), 'parsed' (no earlier body matched)",
                  ["outcome"])
REUSED_BYTES = Counter("render_service_known_history_reused_bytes_total",
                       "Bytes of chat bodies not parsed again because an earlier body had them")

_WHITESPACE = b" \t\n\r"
_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ELEMENTS = msgspec.json.Decoder(list[msgspec.Raw])


class _Body:
    """A kept body: its bytes, where its ``messages`` array opens (``start``, just past the
    "["), the parsed messages, and the end offsets of the first ``len(ends)`` of them."""

    __slots__ = ("data", "start", "messages", "ends", "key", "extends", "weights", "size")

    def __init__(self, data: bytes, start: int, messages: list, ends: list[int], extends: bool,
                 weights: list[int]) -> None:
        self.data, self.start, self.messages, self.ends, self.extends = data, start, messages, ends, extends
        self.weights = weights  # weights[i]: what messages[:i + 1] hold (`_weights`)
        self.size = len(data) + weights[-1]  # what it counts against max_bytes
        # the bytes through the first two messages: what a later body of the conversation starts with
        self.key = memoryview(data)[:ends[1]]

    def complete_ends(self) -> bool:
        """Find every message's end (once, when a later body first matches): True when found."""
        if len(self.ends) == len(self.messages):
            return True
        ends = self.ends + _ends(self.data, self.ends[-1], self.messages[len(self.ends):], False)
        if len(ends) < len(self.messages):
            more = _scanned_ends(self.data, ends[-1], len(ends), len(self.messages))
            if more is None:
                return False
            ends += more
        self.ends = ends
        return True

    def common(self, body: bytes) -> int:
        """How many leading messages ``body`` has byte for byte (0 when it does not start
        with this body's first two)."""
        data, ends = memoryview(self.data), self.ends
        if body.startswith(data[:ends[-1]]):
            return len(ends)
        lo, hi = 2, len(ends) - 1  # body has the first lo messages, not the first hi+1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if body.startswith(data[:ends[mid - 1]]):
                lo = mid
            else:
                hi = mid - 1
        return lo


class KnownHistory:
    """`loads` with a memory of recent large chat bodies (see the module docstring).
    Thread-safe; one per process (`KNOWN`)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES, max_cold: int = MAX_COLD,
                 min_reused_share: float = MIN_REUSED_SHARE) -> None:
        self.max_entries, self.max_bytes, self.max_cold = max_entries, max_bytes, max_cold
        self.min_reused_share = min_reused_share
        # id -> body, least recently used first: those that extended a kept body, and the rest (cold)
        self._bodies: OrderedDict[int, _Body] = OrderedDict()
        self._cold: OrderedDict[int, _Body] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def loads(self, body: bytes) -> Any:
        """``orjson.loads(body)``, equal in value; raises what it raises."""
        return self.parse(body)[0]

    def parse(self, body: bytes) -> tuple[Any, int]:
        """``(orjson.loads(body), bytes of it parsed anew)``: the count is ``len(body)`` less the
        messages taken from a known body. Raises what ``orjson.loads`` raises."""
        if len(body) < MIN_BODY_BYTES:
            return orjson.loads(body), len(body)
        found = self._match(body)
        if found is not None and found[0].ends[found[1] - 1] - found[0].start > self.min_reused_share * len(body):
            known, count = found
            out = _with_known(body, known, count)
            if out is not None:
                reused = known.ends[count - 1] - known.start
                LOOKUPS.labels("reused").inc()
                REUSED_BYTES.inc(reused)
                self._keep(body, out["messages"], known.start, known.ends[:count], len(out["messages"]), True,
                           known.weights[:count])
                return out, len(body) - reused
        LOOKUPS.labels("parsed").inc()
        out = orjson.loads(body)
        messages = out.get("messages") if isinstance(out, dict) else None
        # a first question (system + user) is not kept: most are never continued (render-9k's)
        start = _array_start(body) if isinstance(messages, list) and len(messages) > 2 else None
        if start is not None:
            self._keep(body, messages, start, [], 2, False)
        return out, len(body)

    def _match(self, body: bytes) -> tuple[_Body, int] | None:
        """The most recent kept body ``body`` starts like, and how many messages they share."""
        with self._lock:
            candidates = [*reversed(self._bodies.values()), *reversed(self._cold.values())]
        for known in candidates:
            if body.startswith(known.key):
                with self._lock:
                    complete = known.complete_ends()
                    count = known.common(body) if complete else 0
                    if count == len(known.messages):  # the new body has all of it: it replaces it
                        self._forget(known)
                return (known, count) if complete else None
        return None

    def _forget(self, known: _Body) -> None:
        if (self._bodies if known.extends else self._cold).pop(id(known), None) is not None:
            self._bytes -= known.size

    def _keep(self, body: bytes, messages: list, start: int, ends: list[int], upto: int, extends: bool,
              weights: tuple | list = ()) -> None:
        """Keep ``body``, whose first ``len(ends)`` message ends are known, when the ends
        of its first two are: those through message ``upto`` are looked for now, as orjson
        writes them; the rest when a later body matches (`_Body.complete_ends`). ``weights``:
        those of its first messages, known from the body it extends (the rest are weighed
        here), unless its messages weigh more than a share of ``max_bytes``."""
        ends = ends + _ends(body, ends[-1] if ends else start, messages[len(ends):upto], not ends)
        if len(ends) < 2:
            return
        weights = _weights(messages, list(weights), self.max_bytes // MAX_SHARE_OF_ONE)
        if weights is None:
            return
        entry = _Body(body, start, list(messages), ends, extends, weights)  # the caller may change its list
        with self._lock:
            (self._bodies if extends else self._cold)[id(entry)] = entry
            self._bytes += entry.size
            while self._cold and (len(self._cold) > self.max_cold or self._bytes > self.max_bytes):
                self._forget(next(iter(self._cold.values())))
            while self._bodies and (len(self._bodies) > self.max_entries or self._bytes > self.max_bytes):
                self._forget(next(iter(self._bodies.values())))


def _weights(messages: list, weights: list[int], limit: int) -> list[int] | None:
    """``weights`` (those of the first messages) extended to every message: ``weights[i]`` is
    the bytes of the Python objects ``messages[:i + 1]`` hold, each with the pointer to it
    (``sys.getsizeof``; shared ones, such as orjson's cached keys, counted each time). None,
    and the walk stops, past ``limit`` bytes or `MAX_OBJECTS` objects walked."""
    total, left = weights[-1] if weights else 0, MAX_OBJECTS
    for message in messages[len(weights):]:
        stack = [message]
        while stack:
            item = stack.pop()
            total += sys.getsizeof(item) + 8
            left -= 1
            if total > limit or left < 0:
                return None
            kind = type(item)
            if kind is dict:
                stack.extend(item.keys())
                stack.extend(item.values())
            elif kind is list:
                stack.extend(item)
        weights.append(total)
    return weights


def _with_known(body: bytes, known: _Body, count: int) -> dict | None:
    """``body`` parsed with its first ``count`` messages taken from ``known``; None when
    the shortened text does not parse or its ``messages`` is not the known array."""
    head, rest = memoryview(body)[:known.start], memoryview(body)[known.ends[count - 1]:]
    try:
        zero = orjson.loads(b"".join((head, b"0", rest)))
        one = orjson.loads(b"".join((head, b"1", rest)))
    except orjson.JSONDecodeError:
        return None
    if not (_opens_with(zero, 0) and _opens_with(one, 1)):
        return None
    zero["messages"] = known.messages[:count] + zero["messages"][1:]
    return zero


def _opens_with(parsed: Any, sentinel: int) -> bool:
    messages = parsed.get("messages") if isinstance(parsed, dict) else None
    return isinstance(messages, list) and bool(messages) and type(messages[0]) is int and messages[0] == sentinel


def _skip(data: bytes, at: int) -> int:
    while at < len(data) and data[at] in _WHITESPACE:
        at += 1
    return at


def _array_start(body: bytes) -> int | None:
    """Just past the "[" after the first ``"messages"`` key (a guess the sentinel check verifies)."""
    at = body.find(b'"messages"')
    if at < 0:
        return None
    at = _skip(body, at + len(b'"messages"'))
    if body[at:at + 1] != b":":
        return None
    at = _skip(body, at + 1)
    return at + 1 if body[at:at + 1] == b"[" else None


def _ends(body: bytes, at: int, values: list, first: bool) -> list[int]:
    """End offsets of ``values`` as consecutive array elements from ``at`` (after the "["
    when ``first``, else after the previous element), each an object written exactly as
    orjson writes it, up to the first one written otherwise."""
    ends: list[int] = []
    for value in values:
        if not isinstance(value, dict):
            break
        at = _skip(body, at)
        if not first:
            if body[at:at + 1] != b",":
                break
            at = _skip(body, at + 1)
        first = False
        raw = orjson.dumps(value)
        if not body.startswith(raw, at):
            break
        at += len(raw)
        ends.append(at)
    return ends


def _scanned_ends(body: bytes, at: int, done: int, total: int) -> list[int] | None:
    """`_ends` for a body not written as orjson writes it: msgspec finds each element's
    bytes (a scan of the whole body); the ends of elements ``done`` to ``total``."""
    try:
        raw = _TOP_LEVEL.decode(body).get("messages")
        elements = _ELEMENTS.decode(raw) if raw is not None else None
    except msgspec.DecodeError:
        return None
    if elements is None or len(elements) != total:
        return None
    ends = []
    for element in elements[done:]:
        element = memoryview(element)
        if element[:1] != b"{":
            return None
        at = _skip(body, at)
        if body[at:at + 1] != b",":
            return None
        at = _skip(body, at + 1)
        if not body.startswith(element, at):
            return None
        at += len(element)
        ends.append(at)
    return ends


KNOWN = KnownHistory()
"""The process's memory of recent large chat bodies."""
