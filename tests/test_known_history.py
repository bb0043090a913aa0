"""`render.known_history`: a chat body whose messages an earlier body already had is parsed
only past them, and the value is orjson's own, whatever the body does — grows, edits an
earlier message, repeats the ``messages`` key, is written with other spacing, breaks off —
and through a real server the prompt ids stay transformers' while the history is reused.
"""

from __future__ import annotations

import copy
import json
import re

import httpx
import orjson
import pytest

from conftest import MODELS, needs_shared, render_server
from render_service.render import known_history
from render_service.render.known_history import KnownHistory

PATH = "/v1/chat/completions/render"


def _reused() -> float:
    return known_history.LOOKUPS.labels("reused")._value.get()


def _conversation(turns: int = 8, result_chars: int = 6000) -> list[list[dict]]:
    """The messages before each turn of a growing agent conversation (~6 KB tool results)."""
    from bench.workloads.render import AgentLoop

    loop = AgentLoop(turns=turns, turn_tokens=result_chars // 4)
    loop.chars_per_token = 4.0
    return [copy.deepcopy(messages) for _, messages in loop.conversation(7)]


def _body(messages: list[dict], **extra) -> bytes:
    from bench.corpus import TOOLS

    return orjson.dumps({"messages": messages, "tools": TOOLS, **extra})


def _same(cache: KnownHistory, body: bytes):
    got = cache.loads(body)
    assert got == orjson.loads(body)
    assert list(got) == list(orjson.loads(body))  # key order too
    return got


def test_growing_conversation_reuses_each_earlier_body():
    cache = KnownHistory(min_reused_share=0)
    bodies = [_body(m) for m in _conversation()]
    before = _reused()
    for body in bodies:
        _same(cache, body)
    kept = sum(len(b) >= known_history.MIN_BODY_BYTES for b in bodies)
    assert kept >= 5
    assert _reused() - before == kept - 1  # every large body but the first took the one before


def test_edits_spacing_and_other_writers_parse_as_orjson():
    cache = KnownHistory(min_reused_share=0)
    turns = _conversation()
    last = turns[-1]
    for messages in turns:
        _same(cache, _body(messages))
    edited = copy.deepcopy(last)  # an earlier tool result changed: only the messages before it are reused
    edited[4]["content"] = "# edited\n" + edited[4]["content"]
    before = _reused()
    _same(cache, _body(edited))
    assert _reused() - before == 1
    _same(cache, _body(last + [{"role": "user", "content": "and now?"}]))
    system = copy.deepcopy(last)  # a new system prompt: nothing in common
    system[0]["content"] = "Be brief. " + system[0]["content"]
    _same(cache, _body(system))
    # another writer's spacing and escapes (json.dumps defaults), whole or for one message only
    _same(cache, json.dumps({"messages": last, "tools": None}).encode())
    def written(messages: list[bytes]) -> bytes:
        return b'{"messages":[' + b",".join(messages) + b'],"tools":null}'

    odd = b" \n " + json.dumps(last[3], indent=1).encode()  # message 3 spaced: msgspec finds where it ends
    mixed = [orjson.dumps(m) for m in last[:3]] + [odd]
    _same(cache, written(mixed))
    grown = written(mixed + [orjson.dumps(m) for m in last[4:]])
    before = _reused()
    assert _same(cache, grown)["messages"] == last
    assert _reused() - before == 1  # the odd message's end was found by msgspec's scan


@pytest.mark.parametrize("key", [b'"messages"', b'"messag\\u0065s"'])
def test_a_later_messages_key_wins_as_in_orjson(key):
    cache = KnownHistory(min_reused_share=0)
    turns = _conversation()
    for messages in turns:
        _same(cache, _body(messages))
    body = _body(turns[-1] + [{"role": "user", "content": "x"}])
    for first in (b"0", b"1", b'{"role":"user","content":"y"}'):  # whatever the later array starts with
        twice = body[:-1] + b"," + key + b":[" + first + b',{"role":"user","content":"z"}]}'
        assert _same(cache, twice)["messages"][-1] == {"role": "user", "content": "z"}


def test_broken_or_odd_bodies_raise_or_parse_as_orjson():
    cache = KnownHistory(min_reused_share=0)
    turns = _conversation()
    for messages in turns:
        _same(cache, _body(messages))
    body = _body(turns[-1] + [{"role": "user", "content": "x"}])
    for broken in (body[:-1], body + b"]", body[:-40] + b"\xff" + body[-39:], body.replace(b"x\"}]", b"x\"}}]")):
        with pytest.raises(orjson.JSONDecodeError) as ours:
            cache.loads(broken)
        with pytest.raises(orjson.JSONDecodeError) as theirs:
            orjson.loads(broken)
        assert str(ours.value) == str(theirs.value)
    # messages that are no objects, a top level that is no object, trailing whitespace
    _same(cache, body[:-2] + b",0,1]}")
    _same(cache, b"[" + body + b"]")
    _same(cache, body + b" \n")


def test_kept_bodies_are_bounded():
    cache = KnownHistory(max_entries=3, max_bytes=10**9, max_cold=2)
    for index in range(6):
        messages = _conversation(turns=6)[-1]
        messages[1] = {"role": "user", "content": f"Ticket {index}."}  # a conversation of its own
        for turn in range(3):  # its first body is cold; each later one extends the one before
            _same(cache, _body(messages + [{"role": "user", "content": f"turn {turn}"}] * (turn + 1)))
        _same(cache, _body([{"role": "system", "content": f"system {index} " * 3000}, {"role": "user", "content": "q"}]))
    assert len(cache._bodies) == 3 and len(cache._cold) == 2
    small = KnownHistory(max_entries=64, max_bytes=100_000)
    for messages in _conversation(turns=12):
        _same(small, _body(messages))
    assert small._bytes <= 100_000


def test_kept_values_count_against_the_bound_not_just_their_bytes():
    """A body of tiny JSON values parses to ~20x its bytes in Python objects (``{}`` is 3
    bytes, a dict 64 and its pointer 8): four such 28 MiB bodies sent to a server grew it by
    1.5 GB while ``max_bytes`` (128 MiB) counted only their bytes. What is kept, values
    included, stays within the bound."""
    import gc
    import tracemalloc

    bound = 2 * 1024 * 1024
    cache = KnownHistory(max_bytes=bound)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(6):
            parts = b",".join([b"{}"] * 150_000)  # ~450 KB of empty objects in one message
            body = b'{"messages":[{"role":"user","content":"c%d"},{"role":"assistant","content":"a"},' % index
            cache.parse(body + b'{"role":"user","content":[' + parts + b"]}]}")
            del body, parts
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept <= 2 * bound, f"{kept >> 20} MiB kept under a {bound >> 20} MiB bound"


@needs_shared
def test_agent_turns_through_a_server_are_exact_and_parse_the_history_once():
    transformers = pytest.importorskip("transformers", reason="transformers is the parity oracle (dev extra)")
    from bench.corpus import TOOLS
    from test_render_parity import _oracle_ids

    turns = _conversation(turns=9, result_chars=10000)  # the last prompt: past the event loop's 64K-character budget
    last = turns[-1]
    thinking = copy.deepcopy(last)
    thinking[-2]["reasoning_content"] = "The loader reads the file twice; check the cache key."
    edited = copy.deepcopy(thinking)
    edited[4]["content"] = edited[4]["content"].replace("\n", "\n# edited\n", 1)
    system = copy.deepcopy(last)
    system[0]["content"] = "You are a careful reviewer. " + system[0]["content"]
    bodies = [{"messages": m, "tools": TOOLS} for m in turns]
    bodies += [{"messages": thinking, "tools": TOOLS},
               {"messages": thinking + [{"role": "user", "content": "Now write the fix."}], "tools": TOOLS},
               {"messages": edited, "tools": TOOLS},
               {"messages": system, "tools": TOOLS},
               {"messages": last, "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}},
               {"messages": last + [{"role": "user", "content": "Again, without tools."}]}]
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "qwen3"))
    with render_server(str(MODELS / "qwen3"), reasoning_parser="qwen3", tool_call_parser="hermes",
                       enable_auto_tool_choice=True) as url, httpx.Client(base_url=url, timeout=60) as client:
        before, moved_before = _metric(client.get("/metrics").text), _moved(client.get("/metrics").text)
        for k, body in enumerate(bodies):
            resp = client.post(PATH, content=orjson.dumps(body), headers={"content-type": "application/json"})
            assert resp.status_code == 200, resp.text
            assert resp.json()["token_ids"] == _oracle_ids(tok, body, None), f"turn {k} differs from transformers"
        broken = orjson.dumps(bodies[-1])[:-1]
        resp = client.post(PATH, content=broken, headers={"content-type": "application/json"})
        with pytest.raises(orjson.JSONDecodeError) as exc:
            orjson.loads(broken)
        assert resp.status_code == 400 and resp.json()["error"]["message"] == f"Request body is not valid JSON: {exc.value}"
        reused = _metric(client.get("/metrics").text) - before
        moved = _moved(client.get("/metrics").text) - moved_before
    assert reused >= 10  # turns 3-9 (the bodies past 16 KiB) and the variants that share the start
    # a turn whose history was parsed before renders on the event loop; the one without tools
    # shares its history's JSON but not its prompt (the tools come first): too much to encode
    # there, so it went to the pool (tokenizer.budget) and still answered exactly
    assert moved >= 1


def _moved(text: str) -> float:
    found = re.search(r"^render_service_inline_moved_total ([0-9.e+]+)$", text, re.M)
    assert found, "render_service_inline_moved_total missing from /metrics"
    return float(found.group(1))


def _metric(text: str) -> float:
    found = re.search(r'^render_service_known_history_lookups_total\{outcome="reused"\} ([0-9.e+]+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_image_conversation_reuses_its_history_and_answers_as_a_fresh_parse():
    """A growing conversation with an image in its first message on the vision model: each
    turn whose history is reused answers byte for byte what the same body answers when
    nothing is reused (a leading space: no kept body starts like it) — ids, mm hashes,
    placeholders, tensors."""
    from conftest import fixture_module
    from test_multimodal_units import ANSWERS

    if not (MODELS / "qwen2.5-vl-instruct").is_dir():
        pytest.skip("../shared/models/qwen2.5-vl-instruct not present")
    record = fixture_module("vllm_mm/record.py")
    case = next(c for c in ANSWERS["cases"] if c["name"] == "single_jpeg_640x480")
    first = record.resolve(case["request"])
    messages = first["messages"]
    turns = []
    for k in range(4):
        messages = messages + [{"role": "assistant", "content": f"It is a photo ({k})."},
                               {"role": "user", "content": f"What else is in it? ({k})"}]
        turns.append({**first, "messages": messages, "request_id": f"turn{k}"})
    vl = MODELS / "qwen2.5-vl-instruct"
    with render_server(str(vl), mm_hash_model_id=ANSWERS["model_id"],
                       served_model_name=(str(vl), ANSWERS["model_id"])) as url, \
            httpx.Client(base_url=url, timeout=120) as client:
        headers = {"content-type": "application/json"}
        assert client.post(PATH, content=orjson.dumps(turns[0]), headers=headers).status_code == 200  # kept
        for body in turns[1:]:
            before = _metric(client.get("/metrics").text)
            reused = client.post(PATH, content=orjson.dumps(body), headers=headers)
            assert _metric(client.get("/metrics").text) == before + 1
            fresh = client.post(PATH, content=b" " + orjson.dumps(body), headers=headers)
            assert reused.status_code == fresh.status_code == 200, reused.text
            assert reused.content == fresh.content
            assert reused.json()["features"]["mm_hashes"]


def test_a_caller_changing_its_list_does_not_change_what_is_kept():
    cache = KnownHistory(min_reused_share=0)
    turns = _conversation()
    for messages in turns[:-1]:
        cache.loads(_body(messages))["messages"][-1] = {"role": "user", "content": "changed by the caller"}
    _same(cache, _body(turns[-1]))


def test_a_body_sharing_little_with_a_kept_one_is_parsed_once_plainly():
    """The rest of a body past its known messages is parsed twice, so the known part is taken
    only when it is most of the body (`MIN_REUSED_SHARE`): an agent's next turn is; another
    conversation sharing only the first messages is parsed plainly (same value either way)."""
    cache = KnownHistory()
    turns = _conversation()
    for messages in turns:
        _same(cache, _body(messages))
    last = turns[-1]
    other = copy.deepcopy(last)  # the same opening, then another conversation
    for message in other[3:]:
        if isinstance(message.get("content"), str):
            message["content"] = "Another task. " + message["content"]
    before = _reused()
    _same(cache, _body(other))
    assert _reused() == before  # parsed plainly
    _same(cache, _body(last + [{"role": "user", "content": "and now?"}]))
    assert _reused() == before + 1  # the next turn takes its history
