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
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram

from ..continuity import HeldSequence

if TYPE_CHECKING:
    from .legs import Leg


def conversation_key(body: dict, headers: Mapping[str, str]) -> str | None:
    """Session-affinity key: body ``conversation_id``, ``X-Conversation-Id``, body
    ``session_id`` or ``X-Session-ID`` (vLLM's hint, §6.3), first one present."""
    for value in (body.get("conversation_id"), headers.get("x-conversation-id"),
                  body.get("session_id"), headers.get("x-session-id")):
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


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


class KVReuse:
    """The driver's side of bidirectional KV reuse (``drive --kv-reuse``), for chat requests
    with a conversation key. Per request:

    1. `render_body`: the body render gets carries ``previous_turn`` (the conversation's last
       prompt + output), so render reports the ``continuity`` figure;
    2. `prepare`: takes that figure off the rendered request (engines do not take it),
       decides with `plan_reuse`, sets the leg's pull (prefill) and ``retain_kv`` (decode),
       and has the leg report its outcome in response headers:
       ``x-kv-reuse`` (``pulled``, ``pull_failed`` or the fallback reason), ``x-continuity``
       (``common=…; held=…; reason=…``), ``x-prefill-pulled-tokens`` and
       ``x-prefill-computed-tokens`` (from prefill's own metrics);
    3. `finish`: records the turn — prompt, output, decode instance, lease — for the next.

    Metrics (driver registry): ``render_service_driver_kv_reuse_total{outcome}``,
    ``render_service_driver_kv_pulled_tokens_total``,
    ``render_service_driver_continuity_common_prefix_ratio{reason}``.
    """

    def __init__(self, decode_urls: Collection[str], registry: CollectorRegistry, max_conversations: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.decode_urls = tuple(decode_urls)
        self.table = ConversationTable(max_conversations, clock)
        self.outcomes = Counter("render_service_driver_kv_reuse",
                                "Prefill legs of known conversations: 'pulled', or why prefill computed everything",
                                ["outcome"], registry=registry)
        self.pulled_tokens = Counter("render_service_driver_kv_pulled_tokens",
                                     "Prompt tokens prefill took from decode's retained KV", registry=registry)
        self.continuity = Histogram(
            "render_service_driver_continuity_common_prefix_ratio",
            "Common prefix of a turn's prompt with the previous turn's prompt + output, over the latter's length",
            ["reason"], buckets=(0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0), registry=registry)

    def render_body(self, key: str, body: dict) -> dict:
        """``body`` with the conversation's ``previous_turn`` (a client's own is kept)."""
        turn = self.table.get(key)
        if turn is None or body.get("previous_turn") is not None:
            return body
        held = turn.held
        return {**body, "previous_turn": {"prompt_token_ids": list(held.prompt_token_ids),
                                          "output_token_ids": list(held.output_token_ids)}}

    def prepare(self, key: str, leg: "Leg", headers: dict) -> ReusePlan:
        """Plan the leg's prefill; see the class docstring."""
        figure = leg.gen.pop("continuity", None)
        turn = self.table.get(key)
        common = None
        if isinstance(figure, dict) and turn is not None:
            common = figure.get("common_prefix_tokens")
            held = figure.get("held_tokens") or 0
            self.continuity.labels(figure.get("reason") or "extends").observe(common / held if held else 1.0)
            headers["x-continuity"] = f"common={common}; held={held}; reason={figure.get('reason') or 'none'}"
        plan = plan_reuse(turn, common, len(leg.prompt), self.decode_urls, self.table.clock())
        if plan.fallback is not None:
            self.outcomes.labels(plan.fallback).inc()
            headers["x-kv-reuse"] = plan.fallback
        leg.pull, leg.retain, leg.report = plan.pull, True, headers
        return plan

    def observe_prefill(self, leg: "Leg", metrics: dict | None) -> None:
        """Prefill's own figures → the response headers and the counters. A planned pull that
        prefill could not use (the decode engine is gone, the handle was taken) is
        ``pull_failed``: prefill computed the whole prompt."""
        pulled = int(metrics.get("kv_remote_tokens") or 0) if isinstance(metrics, dict) else 0
        if leg.pull is not None:
            outcome = "pulled" if pulled else "pull_failed"
            self.outcomes.labels(outcome).inc()
            if leg.report is not None:
                leg.report["x-kv-reuse"] = outcome
        self.pulled_tokens.inc(pulled)
        if leg.report is not None and isinstance(metrics, dict):
            leg.report["x-prefill-pulled-tokens"] = str(pulled)
            leg.report["x-prefill-computed-tokens"] = str(metrics.get("kv_computed_prompt_tokens"))

    def finish(self, key: str, leg: "Leg") -> None:
        """Record the turn the leg just completed (nothing when decode produced no output)."""
        if not leg.output or leg.decode_url is None:
            return
        lease = leg.kept if isinstance(leg.kept, dict) else None
        # array('i'): 4 bytes a token instead of ~36 for a list of ints (1,024 long conversations add up)
        held = HeldSequence(array("i", leg.prompt), array("i", leg.output))
        self.table.put(key, HeldTurn(held, leg.decode_url, lease, self.table.lease_expiry(lease)))
