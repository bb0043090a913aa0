"""Which decode engine holds which conversation's KV, and whether prefill may pull it.

Bidirectional KV reuse (issue 16): after turn N, the decode engine keeps the KV of
``prompt_N + output_N`` under a lease and says where (``kv_transfer_params`` of its last
chunk). On turn N+1 of the same conversation (client ``conversation_id``), prefill pulls
those blocks and computes only the tokens after them — but only up to the first token
where the new prompt leaves the held sequence (`render_service.continuity`): KV past that
point belongs to text the prompt no longer holds, and using it gives wrong output.

`ConversationTable` keeps, per conversation key, the last turn's `HeldTurn` (LRU-bounded).
`plan_reuse` is the whole decision, pure: pull ``n`` tokens from ``url``, or a full
prefill and the reason why (reported per request and counted by the driver):

``no_history``        first turn, or the conversation was evicted;
``no_lease``          the decode engine kept no KV (an old engine, an aborted answer);
``lease_expired``     the lease ran out (``kv_lease_duration`` on the decode engine);
``instance_gone``     the decode engine that holds it is no longer in the pool;
``continuity_broken`` the new prompt shares fewer than ``min_tokens`` tokens with it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Collection

from ..continuity import HeldSequence

FALLBACKS = ("no_history", "no_lease", "lease_expired", "instance_gone", "continuity_broken")


@dataclass(frozen=True)
class HeldTurn:
    """What the driver knows after a turn of a conversation.

    ``held``: the turn's prompt and output ids. ``decode_url``: the decode engine that
    generated it. ``lease``: that engine's retained-KV ``kv_transfer_params`` (None when it
    kept nothing). ``expires_at``: monotonic time the lease ends (``inf`` without a lease).
    """

    held: HeldSequence
    decode_url: str
    lease: dict | None
    expires_at: float = float("inf")


@dataclass(frozen=True)
class ReusePlan:
    """``pull`` is the ``kv_transfer_params`` fields that send prefill to the decode
    engine's blocks (None: full prefill, ``fallback`` says why); ``tokens``: how many prompt
    tokens may be taken from them at most (never past the first diverging token)."""

    pull: dict | None
    tokens: int
    fallback: str | None


def plan_reuse(turn: HeldTurn | None, common_prefix_tokens: int | None, prompt_tokens: int,
               decode_urls: Collection[str], now: float, min_tokens: int = 1) -> ReusePlan:
    """Decide whether turn N+1's prefill pulls turn N's KV from decode.

    Args:
        turn: the conversation's last turn, or None.
        common_prefix_tokens: the continuity figure of the new prompt against
            ``turn.held`` (None: not known, so nothing may be reused).
        prompt_tokens: length of the new prompt (prefill always computes its last token).
        decode_urls: the decode instances currently in the pool.
        now: monotonic time.
        min_tokens: a shorter common prefix is not worth a pull.
    """
    if turn is None:
        return ReusePlan(None, 0, "no_history")
    if not turn.lease:
        return ReusePlan(None, 0, "no_lease")
    if now >= turn.expires_at:
        return ReusePlan(None, 0, "lease_expired")
    if turn.decode_url not in decode_urls:
        return ReusePlan(None, 0, "instance_gone")
    covered = int(turn.lease.get("remote_num_tokens") or 0)
    tokens = min(common_prefix_tokens or 0, covered, prompt_tokens - 1)
    if tokens < max(1, min_tokens):
        return ReusePlan(None, 0, "continuity_broken")
    pull = {k: turn.lease[k] for k in ("remote_engine_id", "remote_host", "remote_port", "remote_block_ids")
            if k in turn.lease}
    return ReusePlan({**pull, "remote_num_tokens": tokens}, tokens, None)


class ConversationTable:
    """Last turn per conversation key; at most ``max_entries`` (least recently used dropped).

    Thread-safe. ``clock`` is injectable for tests.
    """

    def __init__(self, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._items: OrderedDict[str, HeldTurn] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str | None) -> HeldTurn | None:
        if key is None:
            return None
        with self._lock:
            turn = self._items.get(key)
            if turn is not None:
                self._items.move_to_end(key)
            return turn

    def put(self, key: str, turn: HeldTurn) -> None:
        with self._lock:
            self._items[key] = turn
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def lease_expiry(self, lease: dict | None) -> float:
        """Monotonic end of ``lease`` from its ``kv_lease_duration`` seconds (inf without)."""
        if not lease:
            return float("inf")
        duration = lease.get("kv_lease_duration")
        return self.clock() + float(duration) if isinstance(duration, (int, float)) else float("inf")

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
