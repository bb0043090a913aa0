"""Streams this process continued last, kept live: the next chunk of a stateless stream that
comes back here skips reopening and rebuilding its state.

A stateless streamed derender seals its whole state into every answer (`state.StateCodec`)
and rebuilds it from the next request: MAC check, JSON parse, a parser built and loaded per
choice — the largest part of a chunk's derender work once the parsers' own step is small. A
router usually sends one stream's chunks to the same replica, one after the other, so the
objects that sealed the state are still here: `LiveStreams` keeps them, keyed by the sealed
state they answered with, and hands them back when exactly that state (and the same request
fields the plan was made from) comes in again.

Exact by construction:

* an entry is taken, never read: the first request that brings a state back gets the live
  objects and the entry is gone, so a retry, a duplicate or a replay of that state (or any
  state sealed before it) is rebuilt from the state itself, as without this cache;
* only a state equal to the sealed object we returned (``v``, ``fp``, ``s``, ``mac``: the
  payload string compared whole) for the same route family hits; anything else is opened
  and checked as before;
* the plan is reused only when the request's plan inputs (``chat_request`` /
  ``parse_context`` / ``sampling_params`` / ``completion_request``, as validated) equal those
  it was made from; otherwise the entry is dropped and the state rebuilt;
* a live session continues exactly as one rebuilt from its exported state: the invariant
  the parsers' and derender's restore tests check for every family and chunking (the pipe
  route keeps sessions live for a whole connection on the same ground).

A stream whose every choice has finished is not kept (the caller decides: nothing continues
it). Bounded: at most ``capacity`` entries and `MAX_KEPT_TOTAL_CHARS` of sealed state among them
(least recently stored dropped first; the live objects hold about as much again), and a
session whose sealed state exceeds `MAX_KEPT_STATE_CHARS` is not kept. Thread-safe (the CPU
pool runs derender calls in threads).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

DEFAULT_CAPACITY = 1024
"""Streams kept per process: a chunk of any stream beyond the last 1,024 continued here is
rebuilt from its state (correct, only slower)."""
MAX_KEPT_STATE_CHARS = 256 * 1024
"""Sessions whose sealed payload is longer than this are not kept (bounds the memory held)."""
MAX_KEPT_TOTAL_CHARS = 16 * 1024 * 1024
"""Most sealed-payload characters kept over all entries (a typical stream's is 0.1-5 KB)."""


class LiveStreams:
    """``sealed state -> (session, plan inputs)`` for the streams continued last.

    Args:
        capacity: most entries kept; 0 keeps none.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[dict, str, Any, tuple]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0  # requests served by a kept session (the rest were rebuilt from their state)
        self._chars = 0  # sealed-payload characters kept

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, state: Any, api: str, inputs: tuple) -> Any | None:
        """The live session that answered with exactly ``state`` on route family ``api`` for
        equal plan ``inputs``, removed from the cache; None when there is none (then the
        caller opens ``state`` as usual)."""
        if not self.capacity or not isinstance(state, dict):
            return None
        mac = state.get("mac")
        if not isinstance(mac, str):
            return None
        with self._lock:
            entry = self._entries.pop(mac, None)
            if entry is None:
                return None
            self._chars -= len(entry[0]["s"])
        sealed, issuer, session, made_from = entry
        if issuer != api or state != sealed or inputs != made_from:
            return None
        self.hits += 1
        return session

    def put(self, sealed: dict, api: str, session: Any, inputs: tuple) -> None:
        """Keep ``session``, which answered with ``sealed`` on ``api`` for plan ``inputs``."""
        if not self.capacity or len(sealed["s"]) > MAX_KEPT_STATE_CHARS:
            return
        with self._lock:
            old = self._entries.pop(sealed["mac"], None)
            if old is not None:
                self._chars -= len(old[0]["s"])
            self._entries[sealed["mac"]] = (sealed, api, session, inputs)
            self._chars += len(sealed["s"])
            while len(self._entries) > self.capacity or self._chars > MAX_KEPT_TOTAL_CHARS:
                self._chars -= len(self._entries.popitem(last=False)[1][0]["s"])


__all__ = ["LiveStreams", "DEFAULT_CAPACITY", "MAX_KEPT_STATE_CHARS", "MAX_KEPT_TOTAL_CHARS"]
