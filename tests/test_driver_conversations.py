"""The driver's reuse decision (`plan_reuse`) and its conversation table, as plain values."""

from __future__ import annotations

from render_service.continuity import HeldSequence
from render_service.driver.conversations import ConversationTable, HeldTurn, plan_reuse

LEASE = {"remote_engine_id": "e1", "remote_host": "127.0.0.1", "remote_port": 9, "remote_block_ids": [[4]],
         "remote_num_tokens": 30, "kv_lease_duration": 10.0}
HELD = HeldSequence(list(range(20)), list(range(20, 31)))
URLS = ("http://d1",)


def turn(**kw) -> HeldTurn:
    return HeldTurn(**{"held": HELD, "decode_url": "http://d1", "lease": LEASE, "expires_at": 100.0, **kw})


def test_pull_never_passes_the_common_prefix_or_the_lease():
    plan = plan_reuse(turn(), 25, 40, URLS, now=1.0)
    assert plan.fallback is None and plan.tokens == 25
    assert plan.pull == {"remote_engine_id": "e1", "remote_host": "127.0.0.1", "remote_port": 9,
                         "remote_block_ids": [[4]], "remote_num_tokens": 25}
    assert plan_reuse(turn(), 31, 40, URLS, now=1.0).tokens == 30      # the lease covers 30 tokens
    assert plan_reuse(turn(), 31, 20, URLS, now=1.0).tokens == 19      # prefill computes the last token


def test_fallbacks():
    assert plan_reuse(None, None, 40, URLS, 1.0).fallback == "no_history"
    assert plan_reuse(turn(lease=None), 25, 40, URLS, 1.0).fallback == "no_lease"
    assert plan_reuse(turn(), 25, 40, URLS, now=100.0).fallback == "lease_expired"
    assert plan_reuse(turn(), 25, 40, ("http://d2",), 1.0).fallback == "instance_gone"
    assert plan_reuse(turn(), 0, 40, URLS, 1.0).fallback == "continuity_broken"
    assert plan_reuse(turn(), None, 40, URLS, 1.0).fallback == "continuity_broken"
    assert plan_reuse(turn(), 5, 40, URLS, 1.0, min_tokens=8).fallback == "continuity_broken"


def test_table_is_lru_bounded_and_times_leases():
    now = [5.0]
    table = ConversationTable(max_entries=2, clock=lambda: now[0])
    assert table.lease_expiry(LEASE) == 15.0 and table.lease_expiry(None) == float("inf")
    for key in ("a", "b"):
        table.put(key, turn())
    table.get("a")
    table.put("c", turn())
    assert table.get("b") is None and table.get("a") is not None and len(table) == 2
    assert table.get(None) is None
