"""Responses and Messages derender on a real server: whole answers, stateless streaming
with the sealed ``stream_state``, pipe mode, and bad input in each API's error shape.

Streaming ≡ non-streaming: every way of cutting a short output into chunks (and, for a
longer one, every single cut plus one-token chunks and random cuts) must fold to the
non-streaming object, in process (the sans-IO session) and over HTTP.
"""

from __future__ import annotations

import itertools
import json
import random
import re

import httpx
import orjson
import pytest

from conftest import MODELS, needs_shared, qwen3_hermes, render_server

pytestmark = needs_shared

from render_service.doors import DOORS  # noqa: E402
from render_service.doors.session import Derender  # noqa: E402
from render_service.derender.service import Derenderer  # noqa: E402
from render_service.wire.validate import validate  # noqa: E402
from render_service.doors.messages.render import render_messages  # noqa: E402
from render_service.doors.responses.render import render_responses  # noqa: E402
from render_service.doors.messages.wire import AnthropicMessagesRequest, DerenderMessagesRequest, DerenderMessagesStreamRequest
from render_service.doors.responses.wire import DerenderResponsesRequest, DerenderResponsesStreamRequest, ResponsesRequest

TOOL_TEXT = ("<think>\nThe user wants the weather.\n</think>\n\nLet me check.<tool_call>\n"
             + json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}}) + "\n</tool_call>")
SHORT_TEXT = "<think>\nOk.\n</think>\n\nHi there!"
LONG_TEXT = "<think>\nLong.\n</think>\n\n" + " la" * 300
TOOLS = {"responses": [{"type": "function", "name": "get_weather", "parameters": {"type": "object",
                        "properties": {"city": {"type": "string"}}}}],
         "messages": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]}
BODIES = {"responses": (DerenderResponsesRequest, DerenderResponsesStreamRequest),
          "messages": (DerenderMessagesRequest, DerenderMessagesStreamRequest)}


@pytest.fixture(scope="module")
def qwen():
    return qwen3_hermes()


@pytest.fixture(scope="module")
def url():
    with render_server(str(MODELS / "qwen3"), reasoning_parser="qwen3", tool_call_parser="hermes",
                       enable_auto_tool_choice=True) as u:
        yield u


def request_for(kind: str, model: str, **extra) -> dict:
    if kind == "responses":
        return {"input": "Weather in Paris?", "tools": TOOLS[kind], **extra}
    return {"model": model, "max_tokens": 512, "tools": TOOLS[kind],
            "messages": [{"role": "user", "content": "Weather in Paris?"}], **extra}


def setup(qwen, kind: str, text: str, **extra):
    """(request, prompt ids, output ids, engine request id) for ``text`` as the model's answer."""
    bundle, cfg = qwen
    model = bundle.served_model_names[0]
    req = request_for(kind, model, **extra)
    if kind == "responses":
        gen = render_responses(bundle, cfg, validate(ResponsesRequest, {**req, "request_id": "resp_fixed"}))
    else:
        gen = render_messages(bundle, cfg, validate(AnthropicMessagesRequest, req), "fixed")
    tok = bundle.tokenizer
    return req, gen["token_ids"], tok.encode(text) + [tok.token_to_id("<|im_end|>")], "generate-tokens-" + gen["request_id"]


def whole_body(kind, req, prompt, ids, rid, finish="stop"):
    return {"generate_response": {"request_id": rid, "choices": [{"index": 0, "finish_reason": finish, "token_ids": ids}]},
            "prompt_token_ids": prompt, f"{kind}_request": req}


def chunk_bodies(kind, req, prompt, parts, rid, finish="stop"):
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        yield {"stream": True, "prompt_token_ids": prompt, f"{kind}_request": req,
               "generate_chunk": {"request_id": rid, "choices": [{"index": 0, "finish_reason": finish if last else None,
                                                                  "token_ids": part}]}}


def cut(ids, cuts):
    bounds = [0, *cuts, len(ids)]
    return [ids[a:b] for a, b in zip(bounds, bounds[1:])]


def calls_named(obj):
    """Tool-call ids are random per derender: name them by order of appearance."""
    text = json.dumps(obj)
    for n, found in enumerate(dict.fromkeys(re.findall(r"chatcmpl-tool-[0-9a-f]+", text))):
        text = text.replace(found, f"call-{n}")
    out = json.loads(text)
    out.pop("created_at", None)
    return out


def run_stream(fd, kind, req, prompt, parts, rid, finish="stop"):
    state, events, sizes = None, [], []
    for body in chunk_bodies(kind, req, prompt, parts, rid, finish):
        out = fd.stream(DOORS[kind], validate(BODIES[kind][1], {**body, "stream_state": state}))
        state = out["stream_state"]
        events += out["events"]
        sizes.append(orjson.loads(state["s"]))
    return events, sizes


def check_grammar(kind, events):
    types = [e["type"] for e in events]
    if kind == "responses":
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert types[:2] == ["response.created", "response.in_progress"]
        assert types[-1] in ("response.completed", "response.incomplete")
        return
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    open_block = None
    for e in events[1:-2]:
        if e["type"] == "content_block_start":
            assert open_block is None
            open_block = e["index"]
        elif e["type"] == "content_block_delta":
            assert e["index"] == open_block
        elif e["type"] == "content_block_stop":
            assert e["index"] == open_block
            open_block = None
    assert open_block is None


@pytest.mark.parametrize("kind", ["responses", "messages"])
def test_every_chunking_of_a_short_answer_folds_to_the_whole(qwen, kind):
    bundle, cfg = qwen
    fd = Derender(Derenderer(bundle, cfg))
    req, prompt, ids, rid = setup(qwen, kind, SHORT_TEXT)
    whole = calls_named(fd.whole(DOORS[kind], validate(BODIES[kind][0], whole_body(kind, req, prompt, ids, rid))))
    n = 0
    for mask in itertools.product((False, True), repeat=len(ids) - 1):
        parts = cut(ids, [i + 1 for i, c in enumerate(mask) if c])
        events, _ = run_stream(fd, kind, req, prompt, parts, rid)
        check_grammar(kind, events)
        assert calls_named(DOORS[kind].final(events)) == whole
        n += 1
    assert n == 2 ** (len(ids) - 1) >= 256


@pytest.mark.parametrize("kind", ["responses", "messages"])
def test_tool_call_chunkings_fold_to_the_whole(qwen, kind):
    bundle, cfg = qwen
    fd = Derender(Derenderer(bundle, cfg))
    req, prompt, ids, rid = setup(qwen, kind, TOOL_TEXT)
    whole = calls_named(fd.whole(DOORS[kind], validate(BODIES[kind][0], whole_body(kind, req, prompt, ids, rid))))
    if kind == "responses":
        assert [i["type"] for i in whole["output"]] == ["reasoning", "message", "function_call"]
        assert json.loads(whole["output"][2]["arguments"]) == {"city": "Paris"}
    else:
        assert [b["type"] for b in whole["content"]] == ["thinking", "text", "tool_use"]
        assert whole["content"][2]["input"] == {"city": "Paris"} and whole["stop_reason"] == "tool_use"
    rng = random.Random(12)
    chunkings = [[i] for i in range(1, len(ids))] + [list(range(1, len(ids)))]
    chunkings += [sorted(rng.sample(range(1, len(ids)), rng.randint(1, len(ids) - 1))) for _ in range(20)]
    for cuts in chunkings:
        events, _ = run_stream(fd, kind, req, prompt, cut(ids, cuts), rid)
        check_grammar(kind, events)
        assert calls_named(DOORS[kind].final(events)) == whole


@pytest.mark.parametrize("kind", ["responses", "messages"])
def test_stream_state_stays_bounded(qwen, kind):
    """The chat part of the state (detokenizer, parser) and the back door's counters do
    not grow with the output; Responses additionally carries the output it must repeat in
    its closing events (``acc``/``done``), and nothing else grows."""
    bundle, cfg = qwen
    fd = Derender(Derenderer(bundle, cfg))
    req, prompt, ids, rid = setup(qwen, kind, LONG_TEXT)
    _, payloads = run_stream(fd, kind, req, prompt, [[i] for i in ids], rid)
    assert len(ids) > 300

    def size(p):
        fdst = dict(p["fd"] or {})
        for repeated in ("acc", "done"):
            fdst.pop(repeated, None)
        return len(orjson.dumps(p["cs"])) + len(orjson.dumps(fdst))

    middle, late = [size(p) for p in payloads[20:60]], [size(p) for p in payloads[-60:-2]]
    assert max(late) <= max(middle) + 8  # a digit or two of counters, nothing that scales with output
    if kind == "messages":
        assert max(len(json.dumps(p)) for p in payloads) < 2000


def test_length_finish(qwen):
    bundle, cfg = qwen
    fd = Derender(Derenderer(bundle, cfg))
    for kind in ("responses", "messages"):
        req, prompt, ids, rid = setup(qwen, kind, SHORT_TEXT)
        out = fd.whole(DOORS[kind], validate(BODIES[kind][0], whole_body(kind, req, prompt, ids[:-3], rid, finish="length")))
        if kind == "responses":
            assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "max_output_tokens"}
        else:
            assert out["stop_reason"] == "max_tokens"


def test_abort_is_cancelled_not_completed(qwen):
    bundle, cfg = qwen
    fd = Derender(Derenderer(bundle, cfg))
    req, prompt, ids, rid = setup(qwen, "responses", SHORT_TEXT)
    out = fd.whole(DOORS["responses"], validate(BODIES["responses"][0], whole_body("responses", req, prompt, ids[:-3], rid,
                                                                            finish="abort")))
    assert out["status"] == "cancelled" and out["incomplete_details"] is None
    assert out["output"][-1]["status"] == "incomplete"


# -- over HTTP -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["responses", "messages"])
def test_http_failed_or_unknown_finish_is_an_error_not_an_answer(qwen, url, kind):
    req, prompt, ids, rid = setup(qwen, kind, SHORT_TEXT)
    r = httpx.post(f"{url}/v1/{kind}/derender", json=whole_body(kind, req, prompt, ids, rid, finish="error"))
    assert r.status_code == 500, r.text
    assert (r.json()["error"]["type"] == "api_error") if kind == "messages" else (r.json()["error"]["code"] == 500)
    r = httpx.post(f"{url}/v1/{kind}/derender", json=whole_body(kind, req, prompt, ids, rid, finish="bogus"))
    assert r.status_code == 400 and "bogus" in r.json()["error"]["message"], r.text
    body = list(chunk_bodies(kind, req, prompt, [ids], rid, finish="error"))[0]
    r = httpx.post(f"{url}/v1/{kind}/derender", json={**body, "stream_state": None})
    assert r.status_code == 500, r.text


@pytest.mark.parametrize("kind", ["responses", "messages"])
def test_http_stateless_stream_and_pipe_equal_whole(qwen, url, kind):
    req, prompt, ids, rid = setup(qwen, kind, TOOL_TEXT)
    whole = httpx.post(f"{url}/v1/{kind}/derender", json=whole_body(kind, req, prompt, ids, rid), timeout=30)
    assert whole.status_code == 200, whole.text
    parts = cut(ids, list(range(3, len(ids), 4)))
    state, events = None, []
    for body in chunk_bodies(kind, req, prompt, parts, rid):
        r = httpx.post(f"{url}/v1/{kind}/derender", json={**body, "stream_state": state}, timeout=30)
        assert r.status_code == 200, r.text
        state, events = r.json()["stream_state"], events + r.json()["events"]
    check_grammar(kind, events)
    assert calls_named(DOORS[kind].final(events)) == calls_named(whole.json())

    # Pipe: the header line, then the engine's SSE bytes in awkward splits.
    header = {"prompt_token_ids": prompt, f"{kind}_request": req}
    engine = b"".join(b"data: " + orjson.dumps({"request_id": rid, "choices": [
        {"index": 0, "token_ids": p, "finish_reason": "stop" if i == len(parts) - 1 else None}]}) + b"\n\n"
        for i, p in enumerate(parts)) + b"data: [DONE]\n\n"
    raw = orjson.dumps(header) + b"\n" + engine

    def body_chunks():
        for i in range(0, len(raw), 37):
            yield raw[i:i + 37]

    r = httpx.post(f"{url}/v1/{kind}/derender/pipe", content=body_chunks(), timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in r.text.split("\n\n") if b.strip()]
    piped = []
    for block in blocks:
        name, data = block.split("\n", 1)
        ev = json.loads(data.removeprefix("data: "))
        assert name == "event: " + ev["type"]
        piped.append(ev)
    assert "[DONE]" not in r.text
    assert calls_named(DOORS[kind].final(piped)) == calls_named(whole.json())


def test_http_bad_input_in_each_api_shape(qwen, url):
    req, prompt, ids, rid = setup(qwen, "messages", SHORT_TEXT)
    r = httpx.post(f"{url}/v1/messages/derender", json={"generate_response": {"choices": []}, "messages_request": req})
    assert r.status_code == 400 and r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{url}/v1/messages/derender", json={**whole_body("messages", req, prompt, [10**7], rid)})
    assert r.status_code == 400 and r.json()["type"] == "error"
    body = next(chunk_bodies("messages", req, prompt, [ids], rid))
    r = httpx.post(f"{url}/v1/messages/derender", json={**body, "stream_state": {"v": 1, "fp": "x", "s": "{}", "mac": "0"}})
    assert r.status_code == 400 and "stream_state" in r.json()["error"]["message"]
    rreq, rprompt, rids, rrid = setup(qwen, "responses", SHORT_TEXT)
    r = httpx.post(f"{url}/v1/responses/derender", json={"generate_response": {"choices": []}, "responses_request": rreq})
    assert r.status_code == 400 and set(r.json()) == {"error"} and r.json()["error"]["code"] == 400
    r = httpx.post(f"{url}/v1/responses/derender", json=whole_body("responses", {"input": 5}, rprompt, rids, rrid))
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("responses_request")
    r = httpx.post(f"{url}/v1/messages/derender/pipe", content=b"not json\n")
    assert r.status_code == 400 and r.json()["type"] == "error"
    # A pipe whose engine stream breaks off: the API's error event ends the stream.
    r = httpx.post(f"{url}/v1/responses/derender/pipe",
                   content=orjson.dumps({"prompt_token_ids": rprompt, "responses_request": rreq}) + b"\n"
                   + b"data: " + orjson.dumps({"request_id": rrid, "choices": [{"index": 0, "token_ids": rids[:3]}]}) + b"\n\n")
    last = [b for b in r.text.split("\n\n") if b.strip()][-1]
    assert last.startswith("event: error") and json.loads(last.split("data: ", 1)[1])["type"] == "error"


MALFORMED = [
    [], "x", 5, None, {"input": [5]}, {"input": [{"role": "user", "content": [7]}]},
    {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}]},
    {"input": [{"type": "reasoning", "summary": "x"}]}, {"input": "hi", "tools": [5]},
    {"input": "hi", "tool_choice": {"type": "function"}}, {"input": "hi", "text": {"format": 3}},
    {"input": "hi", "reasoning": {"effort": "huge"}}, {"input": "hi", "top_logprobs": 99},
    {"input": "hi", "max_output_tokens": 10**30}, {"input": "hi", "top_k": -7}, {"input": "hi", "stop": [""]},
    {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "input": 3}]}]},
    {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": 3}]}]},
    {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "ftp"}}]}]},
    {"model": "m", "max_tokens": 5, "system": [{"type": "nope"}], "messages": [{"role": "user", "content": "x"}]},
    {"model": "m", "max_tokens": 5, "tool_choice": {"type": "tool"}, "tools": [{"name": "f", "input_schema": {}}],
     "messages": [{"role": "user", "content": "x"}]},
    {"model": "m", "max_tokens": -1, "messages": [{"role": "user", "content": "x"}]},
    {"model": "m", "max_tokens": 5, "temperature": 9, "messages": [{"role": "user", "content": "x"}]},
    {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result", "content": 5}]}]},
    {"input": [{"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text"}]}]},
]


@pytest.mark.parametrize("path", ["/v1/responses/render", "/v1/messages/render", "/v1/messages/count_tokens",
                                  "/v1/responses/derender", "/v1/messages/derender"])
def test_malformed_bodies_are_4xx_never_5xx(url, path):
    model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
    for body in MALFORMED:
        if isinstance(body, dict) and body.get("model") == "m":
            body = {**body, "model": model}
        if path.endswith("derender"):
            kind = "responses" if "responses" in path else "messages"
            body = {"generate_response": {"choices": [{"index": 0, "token_ids": [1]}]}, f"{kind}_request": body}
        r = httpx.post(url + path, content=json.dumps(body), headers={"content-type": "application/json"}, timeout=30)
        assert 400 <= r.status_code < 500 or r.status_code == 200, (path, body, r.status_code, r.text[:300])
        assert r.status_code != 200 or path.endswith("derender"), (path, body, r.text[:300])


@pytest.mark.parametrize("kind", ["responses", "messages"])
def test_one_choice_with_index_0_or_a_400(qwen, url, kind):
    """A ``Response`` / ``message`` holds one answer: other choices are refused, never dropped."""
    req, prompt, ids, rid = setup(qwen, kind, SHORT_TEXT)
    two = whole_body(kind, req, prompt, ids, rid)
    two["generate_response"]["choices"].append({"index": 1, "finish_reason": "stop", "token_ids": ids})
    other = whole_body(kind, req, prompt, ids, rid)
    other["generate_response"]["choices"][0]["index"] = 5
    chunk = next(chunk_bodies(kind, req, prompt, [ids], rid))
    chunk["generate_chunk"]["choices"][0]["index"] = 5
    for body, param in ((two, "generate_response.choices"), (other, "generate_response.choices.0.index"),
                        (chunk, "generate_chunk.choices.0.index")):
        r = httpx.post(f"{url}/v1/{kind}/derender", json=body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert "one choice" in err["message"]
        assert (r.json()["type"] == "error") if kind == "messages" else (err["param"] == param)


def test_stream_state_of_another_route_says_so(qwen, url):
    """A state sent to another derender route names the route it belongs to (not a key error)."""
    req, prompt, ids, rid = setup(qwen, "responses", SHORT_TEXT)
    chat = httpx.post(f"{url}/v1/chat/completions/derender", json={
        "stream": True, "prompt_token_ids": prompt, "chat_request": {"messages": []},
        "generate_chunk": {"request_id": rid, "choices": [{"index": 0, "token_ids": ids[:2]}]}})
    assert chat.status_code == 200, chat.text
    body = next(chunk_bodies("responses", req, prompt, [ids[2:4]], rid))
    r = httpx.post(f"{url}/v1/responses/derender", json={**body, "stream_state": chat.json()["stream_state"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream_state"
    assert "/v1/chat/completions/derender" in r.json()["error"]["message"], r.text
    first = httpx.post(f"{url}/v1/responses/derender", json={**body, "stream_state": None})
    mreq = request_for("messages", qwen[0].served_model_names[0])
    mbody = next(chunk_bodies("messages", mreq, prompt, [ids[4:6]], rid))
    r = httpx.post(f"{url}/v1/messages/derender", json={**mbody, "stream_state": first.json()["stream_state"]})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert "/v1/responses/derender" in r.json()["error"]["message"], r.text
    r = httpx.post(f"{url}/v1/chat/completions/derender", json={
        "stream": True, "prompt_token_ids": prompt, "chat_request": {"messages": []},
        "stream_state": first.json()["stream_state"],
        "generate_chunk": {"request_id": rid, "choices": [{"index": 0, "token_ids": ids[:2]}]}})
    assert r.status_code == 400 and "/v1/responses/derender" in r.json()["error"]["message"], r.text
