"""Agent turns through a real render server: every turn of a growing coding-agent
conversation (tool calls, tool results, reasoning), and the turns that break plain prefix
reuse (an earlier message edited, a new system prompt, reasoning kept or dropped), answer
exactly transformers' ``apply_chat_template`` ids, while the render-side caches (prefix
tokenization, kept JSON of the ids) really serve the later turns (their counters on /metrics).
"""

from __future__ import annotations

import copy
import re

import httpx
import pytest

from conftest import MODELS, needs_shared, render_server

pytestmark = needs_shared

transformers = pytest.importorskip("transformers", reason="transformers is the parity oracle (dev extra)")

PATH = "/v1/chat/completions/render"


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    assert found, f"{name} missing from /metrics"
    return float(found.group(1))


def _turns() -> list[dict]:
    from bench.corpus import TOOLS
    from bench.workloads.render import AgentTrace

    trace = AgentTrace(turns=7, turn_tokens=500)
    trace.chars_per_token = 4.0
    bodies = [{"messages": copy.deepcopy(messages), "tools": TOOLS} for _, messages in trace.conversation(2)]
    last = bodies[-1]["messages"]
    thinking = copy.deepcopy(last)  # the last assistant turn carries reasoning (kept after the last query)
    thinking[-2]["reasoning_content"] = "The loader reads the file twice; check the cache key."
    bodies.append({"messages": thinking, "tools": TOOLS})
    bodies.append({"messages": thinking + [{"role": "user", "content": "Now write the fix."}], "tools": TOOLS})
    edited = copy.deepcopy(thinking)  # an earlier tool result changed
    edited[4]["content"] = edited[4]["content"].replace("\n", "\n# edited\n", 1)
    bodies.append({"messages": edited, "tools": TOOLS})
    system = copy.deepcopy(last)  # a new system prompt
    system[0]["content"] = "You are a careful reviewer. " + system[0]["content"]
    bodies.append({"messages": system, "tools": TOOLS})
    bodies.append({"messages": last, "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}})
    return bodies


def test_agent_turns_are_exact_and_reuse_the_history():
    from test_render_parity import _oracle_ids

    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "qwen3"))
    with render_server(str(MODELS / "qwen3"), reasoning_parser="qwen3", tool_call_parser="hermes",
                       enable_auto_tool_choice=True) as url, httpx.Client(base_url=url, timeout=60) as client:
        for k, body in enumerate(_turns()):
            resp = client.post(PATH, json=body)
            assert resp.status_code == 200, resp.text
            assert resp.json()["token_ids"] == _oracle_ids(tok, body, None), f"turn {k} differs from transformers"
        metrics = client.get("/metrics").text
    assert _metric(metrics, "render_tokenizer_prefix_cache_hits_total") >= 6
    assert _metric(metrics, "render_tokenizer_prefix_cache_reused_tokens_total") > 10_000
    # the route released each answer's list, and the next turn took it over
    assert _metric(metrics, "render_tokenizer_prefix_cache_taken_over_total") >= 5
