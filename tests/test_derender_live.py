"""Live stream sessions (render_service.derender.live): a stateless stream whose next chunk
comes back to the same process continues on the objects that sealed its state, and answers
exactly as a process that rebuilds everything from the state (checked chunk by chunk against
a `Derenderer` that keeps nothing); a replayed state, a changed request or a state from
elsewhere is rebuilt."""

from __future__ import annotations

import orjson
import pytest

from conftest import needs_shared, qwen3_hermes
from render_service.derender.live import LiveStreams
from render_service.derender.service import Derenderer
from render_service.doors import DOORS
from render_service.doors.session import Derender
from render_service.wire.derender import DerenderChatStreamRequest
from render_service.wire.validate import validate

pytestmark = needs_shared

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]
OUTPUT = ('<think>\nThe loader needs a rewrite.\n</think>\n\n<tool_call>\n{"name": "write_file", "arguments": '
          '{"path": "src/loader.py", "content": "def load(p):\\n    return open(p).read()  # 中文 😀\\n"}}\n</tool_call>')


@pytest.fixture(scope="module")
def qwen():
    bundle, cfg = qwen3_hermes()
    return bundle, cfg, bundle.tokenizer.encode(OUTPUT) + [151645]


def body(ids: list[int], last: bool, state: dict | None, **chat) -> dict:
    choice = {"index": 0, "token_ids": ids, "finish_reason": "stop" if last else None}
    return {"stream": True, "stream_state": state, "prompt_token_ids": [151644, 77091, 198],
            "chat_request": {"messages": [], "tools": TOOLS, **chat},
            "generate_chunk": {"request_id": "chatcmpl-live", "choices": [choice]}}


def call(d: Derenderer, b: dict) -> dict:
    """One chunk as over HTTP: the body and the answer each go through JSON."""
    req = validate(DerenderChatStreamRequest, orjson.loads(orjson.dumps(b)))
    return orjson.loads(orjson.dumps(Derender(d).stream(DOORS["chat"], req)))


def comparable(answer: dict) -> dict:
    """The answer without the random ``chatcmpl-tool-…`` ids."""
    for choice in answer["chunk"]["choices"]:
        for tc in choice["delta"].get("tool_calls") or []:
            tc.pop("id", None)
    return answer


def test_a_kept_session_answers_as_one_rebuilt_from_its_state(qwen):
    bundle, cfg, ids = qwen
    kept, rebuilt = Derenderer(bundle, cfg), Derenderer(bundle, cfg)
    rebuilt.live = LiveStreams(0)
    state, calls = None, []
    for k, token in enumerate(ids):
        b = body([token], k == len(ids) - 1, state)
        mine = call(kept, b)
        assert comparable(mine) == comparable(call(rebuilt, b)), f"chunk {k}"
        state = mine["stream_state"]
        calls += mine["chunk"]["choices"][0]["delta"].get("tool_calls") or []
    assert kept.live.hits == len(ids) - 1 and rebuilt.live.hits == 0
    assert len(kept.live) == 0  # the finished stream is not kept
    joined: dict[int, list[str]] = {}  # the call's name first, then its argument fragments as they were written
    for c in calls:
        name, args = joined.setdefault(c["index"], ["", ""])
        joined[c["index"]] = [name + (c["function"].get("name") or ""), args + (c["function"].get("arguments") or "")]
    assert sum(1 for c in calls if c["function"].get("arguments")) > 1  # streamed, not held to the end
    assert [(name, orjson.loads(args)) for name, args in joined.values()] == \
        [("write_file", {"path": "src/loader.py", "content": "def load(p):\n    return open(p).read()  # 中文 😀\n"})]


def test_a_replayed_or_changed_request_is_rebuilt_from_its_state(qwen):
    bundle, cfg, ids = qwen
    kept, rebuilt = Derenderer(bundle, cfg), Derenderer(bundle, cfg)
    rebuilt.live = LiveStreams(0)
    state = None
    for k in range(20):  # into the call: its held text is in the state
        state = call(kept, body([ids[k]], False, state))["stream_state"]
    retry = body(ids[20:24], False, state)
    first = comparable(call(kept, retry))
    assert comparable(call(kept, retry)) == first == comparable(call(rebuilt, retry))  # the entry was taken once
    # inside the reasoning, the same state with other plan inputs: the kept session (and its plan) is not used
    state = None
    for k in range(4):
        state = call(kept, body([ids[k]], False, state))["stream_state"]
    hits = kept.live.hits
    changed = body(ids[4:8], False, state, include_reasoning=False)
    answer = comparable(call(kept, changed))
    assert answer == comparable(call(rebuilt, changed)) and "reasoning" not in answer["chunk"]["choices"][0]["delta"]
    assert kept.live.hits == hits


def test_kept_sessions_are_bounded():
    live = LiveStreams(2)
    for n in range(5):
        live.put({"v": 1, "fp": "f", "s": "{}", "mac": str(n)}, "chat", object(), ())
    assert len(live) == 2
    assert live.take({"v": 1, "fp": "f", "s": "{}", "mac": "0"}, "chat", ()) is None  # dropped first
    assert live.take({"v": 1, "fp": "f", "s": "{}", "mac": "4"}, "completion", ()) is None  # another route family
    assert live.take({"v": 1, "fp": "f", "s": "{}", "mac": "3"}, "chat", ()) is not None
    assert len(live) == 0  # both were taken: a miss on the wrong family drops the entry too


def test_kept_state_is_bounded_in_size(monkeypatch):
    from render_service.derender import live as live_mod

    monkeypatch.setattr(live_mod, "MAX_KEPT_TOTAL_CHARS", 250)
    live = LiveStreams(100)
    for n in range(5):
        live.put({"v": 1, "fp": "f", "s": "x" * 100, "mac": str(n)}, "chat", object(), ())
    assert len(live) == 2  # 200 characters kept, the three oldest dropped
    live.put({"v": 1, "fp": "f", "s": "x" * (live_mod.MAX_KEPT_STATE_CHARS + 1), "mac": "big"}, "chat", object(), ())
    assert len(live) == 2


def test_a_kept_session_still_checks_a_changed_prompt(qwen):
    from render_service.errors import OpenAIError

    bundle, cfg, ids = qwen
    kept = Derenderer(bundle, cfg)
    state = None
    for k in range(3):
        state = call(kept, body([ids[k]], False, state))["stream_state"]
    bad = {**body([ids[3]], False, state), "prompt_token_ids": [151644, 10**7]}
    with pytest.raises(OpenAIError) as err:
        call(kept, bad)
    assert err.value.status == 400 and err.value.param == "prompt_token_ids"
    assert kept.live.hits == 3 and len(kept.live) == 0  # taken, failed, not kept: a retry rebuilds from the state
    assert call(kept, body([ids[3]], False, state))["chunk"]["choices"][0]["index"] == 0


def test_kept_sessions_and_known_fields_are_counted_in_metrics():
    """Over HTTP: a stream's chunks after the first continue on the kept session and reuse the
    validated chat_request; /metrics says how often (an operator sees whether the router keeps
    a stream on one replica)."""
    import re

    import httpx

    from conftest import MODELS, render_server

    with render_server(model=str(MODELS / "qwen3"), reasoning_parser="qwen3", tool_call_parser="hermes",
                       enable_auto_tool_choice=True) as url:
        bundle, _ = qwen3_hermes()
        ids = bundle.tokenizer.encode(OUTPUT)[:12]
        state = None
        with httpx.Client(base_url=url, timeout=30) as client:
            for k, token in enumerate(ids):
                r = client.post("/v1/chat/completions/derender", json=body([token], k == len(ids) - 1, state))
                assert r.status_code == 200, r.text
                state = r.json()["stream_state"]
            text = client.get("/metrics").text

    def value(series: str) -> float:
        found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
        assert found, series
        return float(found.group(1))

    assert value("render_service_derender_live_continued_total") == len(ids) - 1
    assert value('render_service_derender_known_fields_hits_total{field="chat_request"}') == len(ids) - 1
    assert value("render_service_derender_live_streams") == 0  # the stream finished
    # every series once (both derender routes keep prompt_token_ids: it was listed twice, which a
    # Prometheus scrape refuses)
    series = [line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert sorted(s for s in set(series) if series.count(s) > 1) == []
