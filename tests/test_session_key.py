"""http/session_key.py: every render route's answer names its conversation in ``X-Session-ID``
(the caller's key, else one derived from the conversation's opening, equal on every turn), so a
proxy can route a conversation's turns to one replica (issue 39)."""

from __future__ import annotations

import httpx
import pytest

from bench.bench_replicas import reuse
from conftest import render_server
from render_service.http.session_key import session_key

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
USER = {"role": "user", "content": "Fix the failing test in parser.py."}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"parser.py\"}"}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "def parse(): ..."}


def chat_turns() -> list[dict]:
    return [{"messages": [SYSTEM, USER]}, {"messages": [SYSTEM, USER, CALL, RESULT]},
            {"messages": [SYSTEM, USER, CALL, RESULT, {"role": "assistant", "content": "Done."},
                          {"role": "user", "content": "Thanks; now the docs."}]}]


def test_derived_key_is_the_same_every_turn_and_differs_between_conversations():
    keys = {session_key([], body) for body in chat_turns()}
    assert len(keys) == 1 and next(iter(keys)).startswith("open-")
    other = session_key([], {"messages": [SYSTEM, {"role": "user", "content": "Another task."}]})
    assert other not in keys
    assert session_key([], {"messages": [{**SYSTEM, "content": "Another agent."}, USER]}) not in keys


def test_responses_string_input_and_later_item_list_share_a_key():
    first = session_key([], {"instructions": "Be brief.", "input": "hi"})
    later = session_key([], {"instructions": "Be brief.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"role": "user", "content": "more"}]})
    assert first == later
    assert session_key([], {"instructions": "Be long.", "input": "hi"}) != first


def test_callers_key_wins_in_order_and_odd_keys_are_hashed():
    body = {"messages": [USER], "prompt_cache_key": "pck"}
    assert session_key([(b"x-smg-routing-key", b"smg"), (b"x-dynamo-session-id", b"dyn")], body) == "dyn"
    assert session_key([(b"x-smg-routing-key", b"smg")], body) == "smg"
    assert session_key([], body) == "pck"
    assert session_key([(b"x-session-id", b"a\r\nb" * 3)], body).startswith("key-")
    assert session_key([], {"prompt_cache_key": "\u00e9t\u00e9", "messages": [USER]}).startswith("key-")


def test_malformed_bodies_give_no_key():
    for body in (None, [], "x", {"messages": "x"}, {"messages": [1]}, {"prompt": 3}, {}):
        assert session_key([], body) is None


@pytest.fixture(scope="module")
def server():
    with render_server() as url:
        yield url


def test_every_render_route_echoes_the_key(server):
    turns = chat_turns()
    with httpx.Client(base_url=server, timeout=60) as client:
        model = client.get("/v1/models").json()["data"][0]["id"]
        keys = []
        for body in turns:
            answer = client.post("/v1/chat/completions/render", json={"model": None, **body})
            assert answer.status_code == 200, answer.text
            keys.append(answer.headers["x-session-id"])
        assert len(set(keys)) == 1 and keys[0] == session_key([], turns[0])
        sent = client.post("/render", json=turns[1], headers={"X-Session-ID": "conv-7"})
        assert sent.headers["x-session-id"] == "conv-7"
        completion = client.post("/v1/completions/render", json={"prompt": "Once upon a time"})
        assert completion.status_code == 200 and completion.headers["x-session-id"].startswith("open-")
        responses = client.post("/v1/responses/render", json={"input": "hi", "instructions": "Be brief."})
        assert responses.status_code == 200, responses.text
        assert responses.headers["x-session-id"] == session_key([], {"input": "hi", "instructions": "Be brief."})
        messages = client.post("/v1/messages/render", json={"model": model, "max_tokens": 8, "system": "Be brief.",
                                                            "messages": [{"role": "user", "content": "hi"}]},
                               headers={"X-Dynamo-Session-ID": "dyn-1"})
        assert messages.status_code == 200, messages.text
        assert messages.headers["x-session-id"] == "dyn-1"
        refused = client.post("/v1/chat/completions/render", json={"messages": "not a list"})
        assert refused.status_code == 400 and "x-session-id" not in refused.headers


def test_reuse_counters_weigh_tokens_taken_from_the_turn_before(server):
    system = {"role": "system", "content": "You are a careful coding agent. " * 120}  # past the cache's 2048 chars
    turns = [[system, USER], [system, USER, CALL, RESULT]]
    with httpx.Client(base_url=server, timeout=60) as client:
        before = reuse(server)
        lengths = [len(client.post("/render", json={"messages": m}).json()["token_ids"]) for m in turns]
        reused, tokenized = (a - b for a, b in zip(reuse(server), before))
    assert reused + tokenized == sum(lengths)
    assert lengths[0] // 2 < reused < lengths[1]  # the second turn took most of the first's tokens
