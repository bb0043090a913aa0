"""bench_agent_loop's per-turn figures from recorded turns (no servers, no timing)."""

from __future__ import annotations

import argparse

from bench.bench_agent_loop import _continuity, summarise, table


def row(ttft, text, reuse, pulled, computed, continuity=None):
    return {"ttft_s": ttft, "text": text, "reuse": reuse, "pulled": pulled, "computed": computed,
            "continuity": continuity}


def test_summary_per_turn():
    turns = {
        "off": [[row(1.0, "a", None, None, None), row(2.0, "b", None, None, None)]],
        "on": [[row(1.0, "a", "no_history", 0, 50),
                row(0.5, "b", "pulled", 60, 30, "common=60; held=61; reason=reasoning_dropped")]],
    }
    result = summarise(turns, argparse.Namespace(turns=2, conversations=1, tool_chars=10, max_tokens=4, edit_turn=None))
    t2 = result["turns"][1]
    assert (t2["ttft_off_ms"], t2["ttft_on_ms"], t2["pulled_tokens"], t2["computed_tokens"]) == (2000, 500, 60, 30)
    assert t2["prompt_tokens"] == 90 and t2["continuity_reasons"] == ["reasoning_dropped"]
    assert abs(t2["continuity"] - 60 / 61) < 1e-9 and result["turns_with_different_answers"] == 0
    assert "4.00x" in table(result)
    turns["on"][0][1]["text"] = "c"
    assert summarise(turns, argparse.Namespace(turns=2, conversations=1, tool_chars=10,
                                               max_tokens=4, edit_turn=None))["turns_with_different_answers"] == 1
    assert _continuity(None) == (None, None) and _continuity("common=3; held=3; reason=none") == (1.0, "none")
