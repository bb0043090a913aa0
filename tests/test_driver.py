"""Driver over real processes on loopback: scripted tokens-only engines, the Qwen3 tokenizer.

Engines are `python -m reference_engine --scripted` processes replaying token ids of
real Qwen3 text (reasoning + ``<tool_call>``, a stop string, a long answer), chosen by the
tail of the rendered prompt. The driver runs in-process (uvicorn thread) with render and
derender either in-process or on a real render server (``--render URL``); clients are the
OpenAI SDK and raw httpx. Faults are real too: a port with nothing behind it, a prefill
engine SIGKILLed right after it handed off its KV, clients that hang up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from conftest import free_port, needs_shared, qwen3_hermes, serve_app

pytestmark = needs_shared

openai = pytest.importorskip("openai", reason="openai SDK not installed")

from render_service.config.serve import ServeConfig  # noqa: E402
from render_service.driver.app import create_app  # noqa: E402
from render_service.driver.config import DriverConfig  # noqa: E402
from render_service.driver.flow import Driver  # noqa: E402
from render_service.driver.upstream import Pool  # noqa: E402
from reference_engine.testing import EngineProcess  # noqa: E402
from render_service.http.app import create_app as create_render_app  # noqa: E402
from render_service.wire.openai import ChatCompletionRequest  # noqa: E402
from render_service.render import render_chat  # noqa: E402

CHAT = "/v1/chat/completions"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                   "required": ["city"]}}}]
TOOL_ARGS = {"city": "Paris", "unit": "celsius"}
TOOL_TEXT = ("<think>\nThe user wants the current weather in Paris, so I call get_weather.\n</think>\n\n"
             "<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": TOOL_ARGS}) + "\n</tool_call>")
NO_THINK = "<think>\nEasy.\n</think>\n\n"  # Qwen3 prompts open in reasoning: answers close it first
STOP_TEXT = NO_THINK + "one two three STOP" + " and then it goes on" * 15
PLAIN_TEXT = "Paris is the capital of France."
LONG_TEXT = " la" * 300

# user message → (scripted output text, per-token delay in seconds; None = none)
SCENARIOS = {
    "What is the weather in Paris right now?": (TOOL_TEXT, None),
    "Count to three, then say STOP.": (STOP_TEXT, 0.03),
    "Sing a very long song.": (LONG_TEXT, 0.02),
    "Think for a long while first.": ("Done.", 5.0),
    "What is the capital of France?": (NO_THINK + PLAIN_TEXT, None),
}


def body_for(user: str, **extra) -> dict:
    body = {"messages": [{"role": "user", "content": user}], **extra}
    if user.startswith("What is the weather"):
        body["tools"] = TOOLS
    return body


def counters(*engines: EngineProcess) -> dict[str, int]:
    """Engine ``/stats`` counters summed over ``engines``."""
    total: dict[str, int] = {}
    for eng in engines:
        for k, v in httpx.get(eng.url + "/stats", timeout=5).json()["counters"].items():
            total[k] = total.get(k, 0) + v
    return total


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@dataclasses.dataclass
class World:
    bundle: object
    cfg: ServeConfig
    script: Path
    p1: EngineProcess
    d1: EngineProcess
    d2: EngineProcess
    d_re: EngineProcess
    local: str          # driver URL, in-process render/derender
    remote: str         # driver URL, render/derender on a render server
    model: str
    eos: int

    @contextlib.contextmanager
    def driver(self, prefill: list[str], decode: list[str], observer=None, **kw) -> Iterator[tuple[str, Driver]]:
        config = DriverConfig(prefill=tuple(prefill), decode=tuple(decode), serve=self.cfg, **kw)
        drv = Driver(config, self.bundle, observer)
        with serve_app(create_app(drv)) as url:
            yield url, drv


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    bundle, cfg = qwen3_hermes()
    tok = bundle.tokenizer
    eos = tok.token_to_id("<|im_end|>")
    responses = []
    for user, (text, delay) in SCENARIOS.items():
        prompt = render_chat(bundle, cfg, ChatCompletionRequest.model_validate(body_for(user)), "x")["token_ids"]
        entry = {"match": prompt[-10:], "token_ids": tok.encode(text) + [eos]}
        if delay is not None:
            entry["token_delay"] = delay
        responses.append(entry)
    responses.append({"token_ids": tok.encode("Hello there, friend.") + [eos]})  # anything else (completions)
    script = tmp_path_factory.mktemp("driver") / "script.json"
    script.write_text(json.dumps({"model": "scripted", "responses": responses}))
    s = str(script)
    with EngineProcess("--scripted", s, role="prefill") as p1, EngineProcess("--scripted", s, role="decode") as d1, \
            EngineProcess("--scripted", s, role="decode") as d2, \
            EngineProcess("--scripted", s, "--kv-load-failure-policy", "recompute", role="decode") as d_re, \
            serve_app(create_render_app(bundle, cfg)) as render_url:
        base = DriverConfig(prefill=(p1.url,), decode=(d1.url, d2.url), serve=cfg)
        local = Driver(base, bundle)
        remote = Driver(dataclasses.replace(base, render=render_url))
        with serve_app(create_app(local)) as local_url, serve_app(create_app(remote)) as remote_url:
            yield World(bundle, cfg, script, p1, d1, d2, d_re, local_url, remote_url,
                        bundle.served_model_names[0], eos)


def sdk(url: str) -> "openai.OpenAI":
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=30)


def sse(r: httpx.Response) -> tuple[list[dict], list[str]]:
    """(data objects, comment lines) of an SSE response; checks it ends with [DONE]."""
    blocks = [b for b in r.text.split("\n\n") if b.strip()]
    assert blocks[-1] == "data: [DONE]", blocks[-3:]
    data = [json.loads(b[6:]) for b in blocks[:-1] if b.startswith("data: {")]
    comments = [b[2:] for b in blocks if b.startswith(": ")]
    return data, comments


def timing(header: str) -> dict[str, str]:
    """``Server-Timing`` → {name: dur or desc}."""
    out = {}
    for part in header.split(","):
        name, _, param = part.strip().partition(";")
        out[name] = param.split("=", 1)[1].strip('"') if "=" in param else ""
    return out


# -- the OpenAI SDK against the driver ---------------------------------------------------

@pytest.mark.parametrize("where", ["local", "remote"])
def test_sdk_stream_tool_call(world, where):
    client = sdk(getattr(world, where))
    stream = client.chat.completions.create(model=world.model, stream=True,
                                            **body_for("What is the weather in Paris right now?"))
    reasoning, content, names, args, ids, finish = "", "", {}, {}, {}, None
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta
            reasoning += (d.model_extra or {}).get("reasoning") or ""
            content += d.content or ""
            for tc in d.tool_calls or []:
                if tc.id:
                    ids[tc.index] = tc.id
                if tc.function and tc.function.name:
                    names[tc.index] = names.get(tc.index, "") + tc.function.name
                if tc.function and tc.function.arguments:
                    args[tc.index] = args.get(tc.index, "") + tc.function.arguments
            finish = ch.finish_reason or finish
    assert names == {0: "get_weather"} and json.loads(args[0]) == TOOL_ARGS
    assert ids[0].startswith("chatcmpl-tool-")
    assert finish == "tool_calls"
    assert "weather in Paris" in reasoning and content.strip() == ""


@pytest.mark.parametrize("where", ["local", "remote"])
def test_sdk_non_stream_tool_call_with_server_timing(world, where):
    raw = sdk(getattr(world, where)).chat.completions.with_raw_response.create(
        model=world.model, **body_for("What is the weather in Paris right now?"))
    resp = raw.parse()
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == TOOL_ARGS
    assert "weather in Paris" in choice.message.model_extra["reasoning"]
    t = timing(raw.headers["server-timing"])
    assert {"render", "prefill", "kv_handoff", "decode", "derender", "total"} <= t.keys()
    assert t["kv"] == "remote"  # the decode engine loaded prefill's KV
    assert resp.model_extra["metrics"]["kv_source"] == "remote"
    assert resp.usage.completion_tokens == len(world.bundle.tokenizer.encode(TOOL_TEXT)) + 1


def test_stream_sends_timing_comment_usage_and_request_id(world):
    body = body_for("What is the capital of France?", stream=True, stream_options={"include_usage": True})
    r = httpx.post(world.local + CHAT, json=body, headers={"X-Request-Id": "drv-1"}, timeout=30)
    assert r.status_code == 200 and r.headers["x-request-id"] == "drv-1"
    head = timing(r.headers["server-timing"])
    assert {"render", "prefill"} <= head.keys() and "kv_handoff" not in head  # sent before the first token
    data, comments = sse(r)
    assert {d["id"] for d in data} == {"chatcmpl-drv-1"}
    assert "".join(c["delta"].get("content") or "" for d in data for c in d["choices"]).strip() == PLAIN_TEXT
    assert data[-1]["choices"] == [] and data[-1]["usage"]["completion_tokens"] == \
        len(world.bundle.tokenizer.encode(NO_THINK + PLAIN_TEXT)) + 1
    (comment,) = comments
    assert comment.startswith("server-timing ")
    tail = timing(comment[len("server-timing "):])
    assert {"render", "prefill", "kv_handoff", "decode", "derender", "total"} <= tail.keys()
    assert tail["kv"] == "remote"


@pytest.mark.parametrize("where", ["local", "remote"])
def test_completions_endpoint(world, where):
    url = getattr(world, where) + "/v1/completions"
    r = httpx.post(url, json={"prompt": "Say hello.", "max_tokens": 20}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == "Hello there, friend."
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    r = httpx.post(url, json={"prompt": "Say hello.", "stream": True}, timeout=30)
    data, _ = sse(r)
    assert "".join(c["text"] for d in data for c in d["choices"]) == "Hello there, friend."
    r = httpx.post(url, json={"prompt": ["Say hello.", "Say it again."], "max_tokens": 20}, timeout=30)
    assert [c["text"] for c in r.json()["choices"]] == ["Hello there, friend."] * 2  # one P/D pair per prompt


# -- stop strings end decode early --------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_aborts_decode(world, stream):
    engines = (world.d1, world.d2)
    before = counters(*engines)
    r = httpx.post(world.local + CHAT, timeout=30,
                   json=body_for("Count to three, then say STOP.", stop=["STOP"], stream=stream))
    assert r.status_code == 200, r.text
    if stream:
        data, _ = sse(r)
        choices = [c for d in data for c in d["choices"]]
        content = "".join(c["delta"].get("content") or "" for c in choices)
        final = choices[-1]
    else:
        final = r.json()["choices"][0]
        content = final["message"]["content"]
    assert content.lstrip("\n") == "one two three "  # cut right before the stop string
    assert (final["finish_reason"], final["stop_reason"]) == ("stop", "STOP")
    full = len(world.bundle.tokenizer.encode(STOP_TEXT)) + 1
    assert wait_for(lambda: counters(*engines)["requests_aborted"] == before["requests_aborted"] + 1)
    # decode was cut: the engines generated well under the whole script (counted, not timed)
    assert counters(*engines)["generated_tokens"] - before["generated_tokens"] < full / 2


def test_stream_head_leaves_when_decode_starts_not_with_its_first_token(world, tmp_path):
    """A decode engine that waits 60 s before its first token: the client has the 200 head
    (status, event-stream, request id, Server-Timing with prefill) long before any token
    exists, so its TTFT is measured where the engine spends it. Hanging up then aborts decode."""
    tok = world.bundle.tokenizer
    answer = tok.encode("Done.") + [world.eos]
    fast, slow = tmp_path / "fast.json", tmp_path / "slow.json"
    fast.write_text(json.dumps({"model": "scripted", "responses": [{"token_ids": answer}]}))
    slow.write_text(json.dumps({"model": "scripted", "token_delay": 60.0, "responses": [{"token_ids": answer}]}))
    with EngineProcess("--scripted", str(fast), role="prefill") as p, \
            EngineProcess("--scripted", str(slow), role="decode") as d, \
            world.driver([p.url], [d.url]) as (url, _):
        with httpx.stream("POST", url + CHAT, timeout=httpx.Timeout(30, read=20),
                          json=body_for("What is the capital of France?", stream=True),
                          headers={"X-Request-Id": "early-head"}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["x-request-id"] == "early-head"
            assert "prefill" in timing(r.headers["server-timing"])
            assert counters(d)["generated_tokens"] == 0  # the engine is still before its first token
        assert wait_for(lambda: counters(d)["requests_aborted"] == 1)


@pytest.mark.parametrize("where", ["local", "remote"])
def test_stop_reason_on_eos_is_null_as_vllms_server_says(world, where):
    """A tokens-only engine names the EOS it stopped on (vLLM 0.32 --tokens-only answered
    ``stop_reason: 2``, ../shared/design/vllm-cpu-engine.md; the scripted engine here replays
    that: render puts EOS among the stop ids); vLLM's server says null. With ``ignore_eos``
    and the EOS among the request's own ``stop_token_ids`` vLLM's server names it."""
    body = body_for("What is the capital of France?")
    prompt = render_chat(world.bundle, world.cfg, ChatCompletionRequest.model_validate(body), "x")["token_ids"]
    engine = httpx.post(world.d1.url + "/inference/v1/generate", timeout=30,
                        json={"token_ids": prompt, "sampling_params": {"stop_token_ids": [world.eos]}}).json()
    assert (engine["choices"][0]["finish_reason"], engine["choices"][0]["stop_reason"]) == ("stop", world.eos)
    url = getattr(world, where) + CHAT
    for extra, expected in (({}, None), ({"ignore_eos": True, "stop_token_ids": [world.eos]}, world.eos)):
        r = httpx.post(url, json={**body, **extra}, timeout=30)
        choice = r.json()["choices"][0]
        assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", expected), r.text
        assert choice["message"]["content"].strip() == PLAIN_TEXT
        data, _ = sse(httpx.post(url, json={**body, **extra, "stream": True}, timeout=30))
        (last,) = [c for d in data for c in d["choices"] if c.get("finish_reason")]
        assert (last["finish_reason"], last["stop_reason"]) == ("stop", expected)


# -- client disconnects abort the engine legs ------------------------------------------------

def test_client_disconnect_mid_stream_aborts_decode(world):
    engines = (world.d1, world.d2)
    before = counters(*engines)["requests_aborted"]
    with httpx.stream("POST", world.local + CHAT, timeout=30,
                      json=body_for("Sing a very long song.", stream=True)) as r:
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                seen += 1
                if seen == 3:
                    break  # hang up mid-stream
    assert wait_for(lambda: counters(*engines)["requests_aborted"] == before + 1)
    metrics = httpx.get(world.local + "/metrics").text
    assert 'render_service_driver_aborts_total{reason="client_disconnect"}' in metrics


def test_client_disconnect_during_prefill_aborts_prefill(world):
    before = counters(world.p1)["requests_aborted"]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(world.local + CHAT, json=body_for("Think for a long while first."), timeout=0.5)
    assert wait_for(lambda: counters(world.p1)["requests_aborted"] == before + 1, timeout=3)


# -- engines down ----------------------------------------------------------------------------

def test_decode_or_prefill_down_is_503_naming_the_hop(world):
    dead = f"http://127.0.0.1:{free_port()}"
    body = body_for("What is the capital of France?")
    for prefill, decode, hop in (([world.p1.url], [dead], "decode"), ([dead], [world.d1.url], "prefill")):
        with world.driver(prefill, decode) as (url, _):
            for stream in (False, True):
                r = httpx.post(url + CHAT, json={**body, "stream": stream}, timeout=30)
                err = r.json()["error"]
                assert r.status_code == 503 and err["code"] == 503 and err["type"] == "ServiceUnavailableError"
                assert err["message"].startswith(f"{hop} hop failed") and dead in err["message"]
            health = httpx.get(url + "/health", timeout=10)
            assert health.status_code == 503 and health.json()[hop][dead].startswith("unreachable")


def test_silent_prefill_times_out_with_504_and_is_aborted(world):
    before = counters(world.p1)["requests_aborted"]
    with world.driver([world.p1.url], [world.d1.url], timeout=0.5) as (url, _):
        r = httpx.post(url + CHAT, json=body_for("Think for a long while first."), timeout=30)
    err = r.json()["error"]
    assert r.status_code == 504 and err["type"] == "GatewayTimeoutError"
    assert err["message"].startswith("prefill hop failed") and world.p1.url in err["message"]
    assert wait_for(lambda: counters(world.p1)["requests_aborted"] == before + 1, timeout=3)


def test_unreachable_decode_is_skipped_for_the_next_one(world):
    dead = f"http://127.0.0.1:{free_port()}"
    pool = Pool("decode", [dead, world.d1.url])
    key = next(k for k in (f"conv-{i}" for i in range(100)) if pool.order(k)[0] == dead)
    with world.driver([world.p1.url], [dead, world.d1.url]) as (url, _):
        r = httpx.post(url + CHAT, json=body_for("What is the capital of France?", conversation_id=key), timeout=30)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].strip() == PLAIN_TEXT


def test_prefill_killed_after_handoff(world):
    """Prefill answers with its KV params and dies before decode pulls them: decode with
    ``kv_load_failure_policy fail`` makes it a 502 naming the hop; ``recompute`` answers."""
    body = body_for("What is the capital of France?")
    for decode, policy in ((world.d1, "fail"), (world.d_re, "recompute")):
        with EngineProcess("--scripted", str(world.script), role="prefill") as doomed:
            def kill(event: str, info: dict) -> None:
                if event == "prefill_done":
                    doomed.kill()

            with world.driver([doomed.url], [decode.url], observer=kill) as (url, _):
                r = httpx.post(url + CHAT, json=body, timeout=30)
                if policy == "fail":
                    err = r.json()["error"]
                    assert r.status_code == 502 and err["message"].startswith("decode hop failed")
                    assert "KV transfer from the prefill engine failed" in err["message"]
                else:
                    assert r.status_code == 200, r.text
                    assert r.json()["choices"][0]["message"]["content"].strip() == PLAIN_TEXT
                    assert r.json()["metrics"]["kv_source"] == "recompute"
                    assert timing(r.headers["server-timing"])["kv"] == "recompute"
                # the next request finds the prefill engine gone
                r = httpx.post(url + CHAT, json=body, timeout=30)
                assert r.status_code == 503 and r.json()["error"]["message"].startswith("prefill hop failed")


# -- routing -------------------------------------------------------------------------------

def test_conversation_id_pins_the_decode_engine(world):
    engines = (world.d1, world.d2)
    body = body_for("What is the capital of France?")

    def per_engine() -> list[int]:
        return [counters(e)["requests"] for e in engines]

    before = per_engine()
    for extra, headers in (({"conversation_id": "conv-A"}, {}), ({}, {"X-Conversation-Id": "conv-A"}),
                           ({"session_id": "conv-A"}, {}), ({}, {"X-Session-ID": "conv-A"})):
        r = httpx.post(world.local + CHAT, json={**body, **extra}, headers=headers, timeout=30)
        assert r.status_code == 200
    got = [a - b for a, b in zip(per_engine(), before)]
    assert sorted(got) == [0, 4]

    before = per_engine()
    for _ in range(4):  # no key: least busy, ties in turn
        assert httpx.post(world.local + CHAT, json=body, timeout=30).status_code == 200
    assert [a - b for a, b in zip(per_engine(), before)] == [2, 2]


# -- small routes and errors -----------------------------------------------------------------

def test_models_health_metrics(world):
    for url in (world.local, world.remote):
        assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == world.model
        h = httpx.get(url + "/health", timeout=10)
        assert h.status_code == 200 and h.json()["decode"] == {world.d1.url: "ok", world.d2.url: "ok"}
    assert httpx.post(world.local + CHAT, json=body_for("What is the capital of France?"), timeout=30).status_code == 200
    text = httpx.get(world.local + "/metrics").text
    for hop in ("render", "prefill", "kv_handoff", "decode", "derender", "total"):
        assert f'render_service_driver_hop_duration_seconds_count{{hop="{hop}"}}' in text
    assert 'render_service_driver_requests_total{endpoint="chat",status="200"}' in text
    assert 'render_service_driver_decode_kv_source_total{source="remote"}' in text


@pytest.mark.parametrize("where", ["local", "remote"])
def test_client_errors_keep_their_status(world, where):
    url = getattr(world, where)
    r = httpx.post(url + CHAT, json={**body_for("Hi"), "model": "nope"}, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    r = httpx.post(url + CHAT, json={"messages": "not a list"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == 400
    r = httpx.post(url + CHAT, content=b"{oops", headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_long_x_request_id_is_refused_before_any_hop(world, where):
    """drive sends X-Request-Id to both engines and into every answer: past the bound it is
    a 400 naming it (as serve), not echoed; at the bound it is served."""
    from render_service.wire.limits import MAX_REQUEST_ID_CHARS

    url = getattr(world, where)
    r = httpx.post(url + CHAT, json=body_for("Hi"), headers={"X-Request-Id": "r" * 60_000}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "X-Request-Id", r.text[:200]
    assert "x-request-id" not in r.headers and len(r.content) < 1000
    ok = httpx.post(url + CHAT, json={**body_for("Hi"), "max_tokens": 2},
                    headers={"X-Request-Id": "r" * MAX_REQUEST_ID_CHARS}, timeout=60)
    assert ok.status_code == 200 and ok.headers["x-request-id"] == "r" * MAX_REQUEST_ID_CHARS


def test_constraints_the_reference_engine_cannot_enforce_are_a_400(world):
    """response_format and a required tool_choice are refused by the engine, never ignored."""
    for extra in ({"response_format": {"type": "json_object"}}, {"tools": TOOLS, "tool_choice": "required"}):
        r = httpx.post(world.local + CHAT, json={**body_for("What is the capital of France?"), **extra}, timeout=30)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert "prefill engine" in err["message"] and "not enforced by this reference engine" in err["message"]


def test_load_counts_client_requests_in_flight(world):
    """`GET /load` as on serve: the requests being served (tester item 9)."""
    assert httpx.get(world.local + "/load").json() == {"server_load": 0}
    slow = threading.Thread(target=lambda: httpx.post(
        world.local + CHAT, json={**body_for("Sing a very long song."), "max_tokens": 60}, timeout=60))
    slow.start()
    try:
        assert wait_for(lambda: httpx.get(world.local + "/load").json() == {"server_load": 1})
    finally:
        slow.join(timeout=60)
    assert wait_for(lambda: httpx.get(world.local + "/load").json() == {"server_load": 0})
