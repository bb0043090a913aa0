"""The official OpenAI and Anthropic SDKs against ``render-service drive``: Responses and
Messages over the four hops, streamed and not, with tools and thinking.

Real processes on loopback: scripted tokens-only engines (prefill, decode) replaying real
Qwen3 text chosen by the tail of the rendered prompt, the driver with render/derender in
process ("local") or on a render server ("remote", stateless ``stream_state`` per chunk).
The SDKs' own event parsers and accumulators read every event; the accumulated objects
must equal the non-streaming answers (ids, which are per request, aside).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator

import httpx
import pytest

from conftest import needs_shared, qwen3_hermes, serve_app

pytestmark = needs_shared

openai = pytest.importorskip("openai", reason="openai SDK not installed")
anthropic = pytest.importorskip("anthropic", reason="anthropic SDK not installed")

from reference_engine.testing import EngineProcess  # noqa: E402
from render_service.driver.app import create_app  # noqa: E402
from render_service.driver.config import DriverConfig  # noqa: E402
from render_service.driver.flow import Driver  # noqa: E402
from render_service.http.app import create_app as create_render_app  # noqa: E402
from render_service.wire.validate import validate  # noqa: E402
from render_service.doors.messages.render import render_messages  # noqa: E402
from render_service.doors.responses.render import render_responses  # noqa: E402
from render_service.doors.messages.wire import AnthropicMessagesRequest  
from render_service.doors.responses.wire import ResponsesRequest  # noqa: E402

WEATHER = "What is the weather in Paris right now?"
TOOL_ARGS = {"city": "Paris", "unit": "celsius"}
TOOL_TEXT = ("<think>\nThe user wants the current weather in Paris, so I call get_weather.\n</think>\n\n"
             "<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": TOOL_ARGS}) + "\n</tool_call>")
TOOL_OUTPUT = '{"temp_c": 18, "sky": "sunny"}'
ANSWER = "It is 18 degrees and sunny in Paris."
THINK_Q = "Think it through: what is 17 * 23?"
THINK_TEXT = "<think>\n17 * 23 = 17 * 20 + 17 * 3 = 340 + 51 = 391.\n</think>\n\n17 × 23 = 391."
STOP_Q = "Count to three, then say STOP."
STOP_TEXT = "<think>\nEasy.\n</think>\n\none two three STOP" + " and then it goes on" * 15
OPENAI_TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather for a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                                "required": ["city"]}}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Current weather for a city",
                    "input_schema": OPENAI_TOOLS[0]["parameters"]}]
PLACEHOLDER_CALL = "call_placeholder"


def responses_turn2(first_output: list[dict]) -> list[dict]:
    """Turn two of the Responses tool loop: the question, turn one's output items, the tool's answer."""
    call = next(i for i in first_output if i["type"] == "function_call")
    return [{"role": "user", "content": WEATHER}, *first_output,
            {"type": "function_call_output", "call_id": call["call_id"], "output": TOOL_OUTPUT}]


def messages_turn2(first_content: list[dict]) -> list[dict]:
    call = next(b for b in first_content if b["type"] == "tool_use")
    return [{"role": "user", "content": WEATHER}, {"role": "assistant", "content": first_content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": TOOL_OUTPUT}]}]


@dataclasses.dataclass
class World:
    local: str
    remote: str
    model: str
    bundle: Any
    cfg: Any
    prefill: str


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    bundle, cfg = qwen3_hermes()
    tok, model = bundle.tokenizer, bundle.served_model_names[0]
    eos = tok.token_to_id("<|im_end|>")

    def responses_prompt(**body: Any) -> list[int]:
        return render_responses(bundle, cfg, validate(ResponsesRequest, body))["token_ids"]

    def messages_prompt(**body: Any) -> list[int]:
        return render_messages(bundle, cfg, validate(AnthropicMessagesRequest, {"model": model, "max_tokens": 64, **body}),
                               "x")["token_ids"]

    fake_call = [{"type": "function_call", "call_id": PLACEHOLDER_CALL, "name": "get_weather",
                  "arguments": json.dumps(TOOL_ARGS)}]
    fake_use = [{"type": "tool_use", "id": PLACEHOLDER_CALL, "name": "get_weather", "input": TOOL_ARGS}]
    script = [
        (responses_prompt(input=WEATHER, tools=OPENAI_TOOLS), TOOL_TEXT),
        (responses_prompt(input=responses_turn2(fake_call), tools=OPENAI_TOOLS), "<think>\nGot it.\n</think>\n\n" + ANSWER),
        (messages_prompt(messages=messages_turn2(fake_use), tools=ANTHROPIC_TOOLS), "<think>\nGot it.\n</think>\n\n" + ANSWER),
        (messages_prompt(messages=[{"role": "user", "content": THINK_Q}]), THINK_TEXT),
        (messages_prompt(messages=[{"role": "user", "content": STOP_Q}]), STOP_TEXT),
    ]
    # The tool-call turn's prompt tail is the same for both APIs (same conversation, same tools).
    responses = [{"match": prompt[-10:], "token_ids": tok.encode(text) + [eos]} for prompt, text in script]
    path = tmp_path_factory.mktemp("doors") / "script.json"
    path.write_text(json.dumps({"model": "scripted", "responses": responses}))
    with EngineProcess("--scripted", str(path), role="prefill") as p1, \
            EngineProcess("--scripted", str(path), role="decode") as d1, \
            serve_app(create_render_app(bundle, cfg)) as render_url:
        base = DriverConfig(prefill=(p1.url,), decode=(d1.url,), serve=cfg)
        local, remote = Driver(base, bundle), Driver(dataclasses.replace(base, render=render_url))
        with serve_app(create_app(local)) as local_url, serve_app(create_app(remote)) as remote_url:
            yield World(local_url, remote_url, model, bundle, cfg, p1.url)


def oai(url: str) -> "openai.OpenAI":
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=30)


def ant(url: str) -> "anthropic.Anthropic":
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=30)


_PER_REQUEST = {"id", "call_id", "created_at", "signature"}


def same(obj: Any) -> Any:
    """``obj`` without the values that differ per request (ids, timestamps, signatures)."""
    if isinstance(obj, dict):
        return {k: same(v) for k, v in obj.items() if k not in _PER_REQUEST}
    if isinstance(obj, list):
        return [same(v) for v in obj]
    return obj


def dump(model: Any) -> dict:
    return model.model_dump(mode="json", exclude_none=True)


# -- OpenAI Responses ----------------------------------------------------------------------

@pytest.mark.parametrize("where", ["local", "remote"])
def test_responses_tool_call_stream_equals_non_stream(world, where):
    client = oai(getattr(world, where))
    resp = client.responses.create(model=world.model, input=WEATHER, tools=OPENAI_TOOLS)
    assert resp.status == "completed" and resp.id.startswith("resp_")
    kinds = [item.type for item in resp.output]
    assert kinds == ["reasoning", "function_call"]
    call = resp.output[1]
    assert call.name == "get_weather" and json.loads(call.arguments) == TOOL_ARGS
    assert "weather in Paris" in resp.output[0].content[0].text
    assert resp.usage.output_tokens > 0 and resp.usage.input_tokens > 100

    events = list(client.responses.create(model=world.model, input=WEATHER, tools=OPENAI_TOOLS, stream=True))
    seq = [e.sequence_number for e in events]
    assert seq == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert {"response.function_call_arguments.delta", "response.function_call_arguments.done",
            "response.reasoning_text.delta", "response.output_item.done"} <= {e.type for e in events}
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == TOOL_ARGS
    assert same(dump(events[-1].response)) == same(dump(resp))

    with client.responses.stream(model=world.model, input=WEATHER, tools=OPENAI_TOOLS) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert same(dump(final)) == same(dump(resp))


@pytest.mark.parametrize("where", ["local", "remote"])
def test_responses_two_turn_tool_loop_streamed(world, where):
    client = oai(getattr(world, where))
    first = client.responses.create(model=world.model, input=WEATHER, tools=OPENAI_TOOLS)
    second_input = responses_turn2([dump(item) for item in first.output])
    text = ""
    completed = None
    for ev in client.responses.create(model=world.model, input=second_input, tools=OPENAI_TOOLS, stream=True):
        if ev.type == "response.output_text.delta":
            text += ev.delta
        if ev.type == "response.completed":
            completed = ev.response
    assert text.strip() == ANSWER
    assert completed.output_text.strip() == ANSWER
    whole = client.responses.create(model=world.model, input=second_input, tools=OPENAI_TOOLS)
    assert same(dump(whole)) == same(dump(completed))


def test_responses_bad_input_is_openai_4xx(world):
    r = httpx.post(world.local + "/v1/responses", json={"input": "Hi", "previous_response_id": "resp_1"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error" and r.json()["error"]["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError):
        oai(world.local).responses.create(model=world.model, input=[{"type": "nonsense"}])
    r = httpx.post(world.local + "/v1/responses", json={"model": "nope", "input": "Hi"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


def test_responses_server_timing(world):
    r = httpx.post(world.local + "/v1/responses", json={"input": WEATHER, "tools": OPENAI_TOOLS}, timeout=30)
    assert r.status_code == 200
    timing = r.headers["server-timing"]
    for hop in ("render", "prefill", "kv_handoff", "decode", "derender"):
        assert hop in timing, timing


# -- Anthropic Messages --------------------------------------------------------------------

@pytest.mark.parametrize("where", ["local", "remote"])
def test_messages_tool_use_stream_equals_create(world, where):
    client = ant(getattr(world, where))
    kw = dict(model=world.model, max_tokens=512, tools=ANTHROPIC_TOOLS, messages=[{"role": "user", "content": WEATHER}])
    msg = client.messages.create(**kw)
    assert [b.type for b in msg.content] == ["thinking", "tool_use"]
    assert msg.stop_reason == "tool_use" and msg.content[1].input == TOOL_ARGS and msg.content[1].name == "get_weather"
    assert "weather in Paris" in msg.content[0].thinking and msg.content[0].signature
    with client.messages.stream(**kw) as stream:
        kinds = [ev.type for ev in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert same(dump(final)) == same(dump(msg))

    # Turn two: the tool's answer.
    kw2 = {**kw, "messages": messages_turn2([dump(b) for b in msg.content])}
    answer = client.messages.create(**kw2)
    assert answer.stop_reason == "end_turn" and answer.content[-1].text.strip() == ANSWER
    with client.messages.stream(**kw2) as stream:
        assert "".join(stream.text_stream).strip() == ANSWER
        assert same(dump(stream.get_final_message())) == same(dump(answer))


@pytest.mark.parametrize("where", ["local", "remote"])
def test_messages_thinking_stream_equals_create(world, where):
    client = ant(getattr(world, where))
    kw = dict(model=world.model, max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024},
              messages=[{"role": "user", "content": THINK_Q}])
    msg = client.messages.create(**kw)
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert "340 + 51" in msg.content[0].thinking and msg.content[1].text.strip() == "17 × 23 = 391."
    assert msg.stop_reason == "end_turn" and msg.usage.output_tokens > 0
    thinking = ""
    with client.messages.stream(**kw) as stream:
        for ev in stream:
            if ev.type == "thinking":
                thinking += ev.thinking
        final = stream.get_final_message()
    assert thinking == msg.content[0].thinking
    assert same(dump(final)) == same(dump(msg))


def test_messages_stop_sequence(world):
    client = ant(world.local)
    kw = dict(model=world.model, max_tokens=256, stop_sequences=["STOP"], messages=[{"role": "user", "content": STOP_Q}])
    msg = client.messages.create(**kw)
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "STOP"
    assert msg.content[-1].text.strip() == "one two three"
    with client.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    # usage counts what the engine generated before decode was cut, which depends on timing.
    assert same({**dump(final), "usage": None}) == same({**dump(msg), "usage": None})


def test_messages_bad_input_is_anthropic_4xx(world):
    r = httpx.post(world.local + "/v1/messages", json={"model": world.model, "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error" and body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as info:
        ant(world.local).messages.create(model=world.model, max_tokens=10, messages=[{"role": "tool", "content": "x"}])
    assert info.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        ant(world.local).messages.create(model="nope", max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
    r = httpx.post(world.local + "/v1/messages", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["type"] == "error"


@pytest.mark.parametrize("where", ["local", "remote"])
def test_messages_count_tokens(world, where):
    """Claude Code asks ``count_tokens`` before long requests: the SDK call gets the prompt length."""
    client = ant(getattr(world, where))
    got = client.messages.count_tokens(model=world.model, tools=ANTHROPIC_TOOLS,
                                       messages=[{"role": "user", "content": WEATHER}])
    msg = client.messages.create(model=world.model, max_tokens=512, tools=ANTHROPIC_TOOLS,
                                 messages=[{"role": "user", "content": WEATHER}])
    assert got.input_tokens == msg.usage.input_tokens > 100
    r = httpx.post(getattr(world, where) + "/v1/messages/count_tokens", json={"model": world.model})
    assert r.status_code == 400 and r.json()["type"] == "error"


def test_unreachable_decode_is_an_error_in_each_api_shape(world):
    """A hop that fails before the first token is a plain HTTP error in the API's shape."""
    from conftest import free_port

    config = DriverConfig(prefill=(world.prefill,), decode=(f"http://127.0.0.1:{free_port()}",), serve=world.cfg)
    with serve_app(create_app(Driver(config, world.bundle))) as url:
        for stream in (False, True):
            r = httpx.post(url + "/v1/messages", timeout=30, json={
                "model": world.model, "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": THINK_Q}]})
            assert r.status_code == 503 and r.json()["type"] == "error" and r.json()["error"]["type"] == "overloaded_error"
            r = httpx.post(url + "/v1/responses", timeout=30, json={"input": WEATHER, "stream": stream})
            assert r.status_code == 503 and r.json()["error"]["code"] == 503


def test_decode_cut_mid_stream_ends_with_an_error_event_continuing_the_count(world):
    """A decode engine that drops its stream after a few tokens: the Responses ``error``
    event takes the next ``sequence_number``, it does not restart at 0."""
    import asyncio

    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    ids = world.bundle.tokenizer.encode("one two three four five six seven eight")

    async def generate(request):
        rid = "generate-tokens-" + (request.headers.get("x-request-id") or "x")

        async def body():
            for t in ids[:6]:
                yield "data: " + json.dumps({"request_id": rid, "choices": [{"index": 0, "token_ids": [t],
                                                                            "finish_reason": None}]}) + "\n\n"
                await asyncio.sleep(0.002)
            raise RuntimeError("decode engine dropped the stream")
        return StreamingResponse(body(), media_type="text/event-stream")

    breaking = Starlette(routes=[Route("/inference/v1/generate", generate, methods=["POST"])])
    with serve_app(breaking) as decode_url:
        config = DriverConfig(prefill=(world.prefill,), decode=(decode_url,), serve=world.cfg)
        with serve_app(create_app(Driver(config, world.bundle))) as url:
            with httpx.stream("POST", url + "/v1/responses", timeout=30, json={"input": WEATHER, "tools": OPENAI_TOOLS, "stream": True}) as r:
                events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "error", events[-1]
    assert [ev["sequence_number"] for ev in events] == list(range(len(events)))


def test_wrong_method_on_messages_is_anthropic_shaped(world):
    r = httpx.get(world.local + "/v1/messages", timeout=30)
    assert r.status_code == 405 and r.json()["type"] == "error", r.text
    assert r.json()["error"]["type"] == "invalid_request_error" and "POST" in r.json()["error"]["message"]
    r = httpx.get(world.local + "/v1/responses", timeout=30)
    assert r.status_code == 405 and r.json()["error"]["code"] == 405
