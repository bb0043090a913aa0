"""One body discipline for every POST route (issue 38 item 7): the render server's routes
(render, derender with its raw endpoints and byte-kept fields, the pipes, the doors, tokenize),
the driver's (`drive`) and the reference engine's answer a body nested past
`http.common.MAX_BODY_DEPTH`, or bytes that are no JSON, with the same 400, never a 5xx.

The routes are read from each app, so a route added later is covered without a line here;
a route with no sample body below is tried with the bodies any route must refuse.
"""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import free_port, serve_app
from render_service.http.common import MAX_BODY_DEPTH

PROMPT = list(range(1, 301))  # a derender body past `derender.known.MIN_BODY_BYTES`: split by its bytes
CHOICE = {"index": 0, "token_ids": [28, 29, 30], "finish_reason": "stop"}
CHUNK = {"index": 0, "token_ids": [28, 29]}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def _samples() -> dict[str, list[dict]]:
    chat_derender = [
        {"generate_response": {"choices": [CHOICE]}, "prompt_token_ids": PROMPT, "chat_request": CHAT},
        {"stream": True, "generate_chunk": {"choices": [CHUNK]}, "prompt_token_ids": PROMPT, "chat_request": CHAT},
    ]
    return {
        "/v1/chat/completions/render": [CHAT],
        "/render": [CHAT],
        "/v1/completions/render": [{"prompt": "hi"}],
        "/v1/responses/render": [{"input": "hi"}],
        "/v1/messages/render": [MESSAGES],
        "/v1/messages/count_tokens": [MESSAGES],
        "/tokenize": [{"prompt": "hi"}, CHAT],
        "/detokenize": [{"tokens": [28, 29]}],
        "/v1/chat/completions/derender": chat_derender,
        "/derender": chat_derender,
        "/v1/completions/derender": [
            {"generate_responses": [{"choices": [CHOICE]}], "prompt_token_ids": [PROMPT],
             "completion_request": {"prompt": "hi"}},
            {"stream": True, "generate_chunk": {"choices": [CHUNK]}, "prompt_token_ids": PROMPT,
             "completion_request": {"prompt": "hi"}}],
        "/v1/responses/derender": [{"generate_response": {"choices": [CHOICE]}, "prompt_token_ids": PROMPT,
                                    "responses_request": {"input": "hi"}}],
        "/v1/messages/derender": [{"generate_response": {"choices": [CHOICE]}, "prompt_token_ids": PROMPT,
                                   "messages_request": MESSAGES}],
        # the pipes: the header line (the engine's SSE follows it)
        "/v1/chat/completions/derender/pipe": [{"prompt_token_ids": PROMPT, "chat_request": CHAT}],
        "/v1/completions/derender/pipe": [{"prompt_token_ids": PROMPT, "completion_request": {"prompt": "hi"}}],
        "/v1/responses/derender/pipe": [{"prompt_token_ids": PROMPT, "responses_request": {"input": "hi"}}],
        "/v1/messages/derender/pipe": [{"prompt_token_ids": PROMPT, "messages_request": MESSAGES}],
        # drive
        "/v1/chat/completions": [{**CHAT, "max_tokens": 2}],
        "/v1/completions": [{"prompt": "hi", "max_tokens": 2}],
        "/v1/responses": [{"input": "hi", "max_output_tokens": 2}],
        "/v1/messages": [MESSAGES],
        # the reference engine
        "/inference/v1/generate": [{"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}}],
        "/inference/v1/abort_requests": [{"request_ids": ["x"]}],
        "/abort_requests": [{"request_ids": ["x"]}],
    }


SAMPLES = _samples()
PIPE_EVENTS = b'data: {"choices":[{"index":0,"token_ids":[28],"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
HOLE = "\x00hole"


def deep(depth: int, kind: str = "[") -> bytes:
    """``depth`` nested lists (``[``) or objects (``{``) as JSON text, built without recursion."""
    if kind == "[":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def with_value(body: dict, path: tuple, value: bytes) -> bytes:
    """``body`` as JSON with the value at ``path`` (keys and list indexes; one past the end
    adds it) replaced by the JSON text ``value``."""
    body = json.loads(json.dumps(body))
    node = body
    for key in path[:-1]:
        node = node[key]
    if isinstance(node, list) and path[-1] == len(node):
        node.append(HOLE)
    else:
        node[path[-1]] = HOLE
    return json.dumps(body).encode().replace(json.dumps(HOLE).encode(), value)


def paths(value, prefix: tuple = ()) -> Iterator[tuple]:
    """Every place in ``value`` a value may go: each member and item, and one more of each."""
    if isinstance(value, dict):
        yield prefix + ("zz_extra",)
        for key, item in value.items():
            yield prefix + (key,)
            yield from paths(item, prefix + (key,))
    elif isinstance(value, list):
        yield prefix + (len(value),)
        for i, item in enumerate(value[:3]):
            yield prefix + (i,)
            yield from paths(item, prefix + (i,))


def post_routes(app) -> list[str]:
    """The app's POST routes (every route that reads a body)."""
    return sorted(r.path for r in app.routes if "POST" in (getattr(r, "methods", None) or ()) and r.path != "/ping")


def send(client: httpx.Client, path: str, content: bytes) -> httpx.Response:
    if path.endswith("/pipe"):
        content = content + b"\n" + PIPE_EVENTS
    return client.post(path, content=content, headers={"content-type": "application/json"})


def check(r: httpx.Response, path: str, content: bytes) -> None:
    """Never a 5xx; an answer that is no stream is the API's JSON error shape."""
    assert r.status_code < 500, (path, content[:200], r.status_code, r.text[:400])
    if r.status_code >= 400:
        assert "error" in r.json(), (path, r.text[:300])


# -- the three servers ------------------------------------------------------------------

@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, tuple[str, list[str]]]]:
    """name -> (base URL, its POST routes): ``serve`` (the default model), the reference
    engine (scripted) and ``drive`` over it (render in process)."""
    from reference_engine.app import EngineConfig, create_app as engine_app
    from reference_engine.scripted import ScriptedBackend
    from render_service.driver.app import create_app as drive_app
    from render_service.driver.config import DriverConfig
    from render_service.driver.flow import Driver
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, bundle, cfg = build_app(ServeConfig())
    port = free_port()  # the prefill engine advertises its port for the KV fetch
    eng = engine_app(ScriptedBackend([{"token_ids": [28, 29]}]), EngineConfig(port=port))
    with serve_app(app) as serve_url, serve_app(eng, port=port) as engine_url:
        drv = drive_app(Driver(DriverConfig(prefill=(engine_url,), decode=(engine_url,), serve=cfg), bundle))
        with serve_app(drv) as drive_url:
            yield {"serve": (serve_url, post_routes(app)), "engine": (engine_url, post_routes(eng)),
                   "drive": (drive_url, post_routes(drv))}


def test_the_sample_bodies_are_answered_and_every_route_has_one(servers):
    """The bodies the tests below nest into are ones the routes take (so the 400s below are
    the nesting's), and no POST route is left without one."""
    for name, (url, routes) in servers.items():
        assert set(routes) <= set(SAMPLES), (name, sorted(set(routes) - set(SAMPLES)))
        with httpx.Client(base_url=url, timeout=60) as client:
            for path in routes:
                for body in SAMPLES[path]:
                    r = send(client, path, json.dumps(body).encode())
                    assert r.status_code == 200, (name, path, r.text[:300])


@pytest.mark.parametrize("name", ["serve", "drive", "engine"])
def test_every_route_refuses_nesting_past_the_limit_with_a_400(servers, name):
    """Thousands of levels anywhere in the body (a derender's ``token_ids`` was a 500:
    msgspec's scan recursed past Python's limit) are a 400 on every route; just below
    Python's recursion limit (where msgspec stops but orjson does not) is never a 5xx."""
    url, routes = servers[name]
    with httpx.Client(base_url=url, timeout=60) as client:
        for path in routes:
            for body in SAMPLES.get(path, [{}]):
                for place in [None, *paths(body)]:
                    for depth, kind in ((MAX_BODY_DEPTH + 1, "["), (5000, "{"), (990, "[")):
                        content = deep(depth, kind) if place is None else with_value(body, place, deep(depth, kind))
                        r = send(client, path, content)
                        check(r, path, content)
                        if depth > MAX_BODY_DEPTH:
                            assert r.status_code == 400, (path, place, r.text[:300])
                            assert "depth" in r.json()["error"]["message"] or "nested" in r.json()["error"]["message"]


def json_values(max_leaves: int = 8):
    scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                                            max_size=4),
                        max_leaves=max_leaves)


@st.composite
def hostile_bodies(draw, routes: list[str]) -> tuple[str, bytes]:
    """A route and a body: a sample with one value swapped for random JSON or for nesting of
    random depth and kind, random JSON, or random bytes."""
    path = draw(st.sampled_from(routes))
    body = draw(st.sampled_from(SAMPLES.get(path, [{}])))
    how = draw(st.sampled_from(["value", "nesting", "json", "bytes"]))
    if how == "bytes":
        return path, draw(st.binary(max_size=64))
    if how == "json":
        return path, json.dumps(draw(json_values())).encode()
    place = draw(st.sampled_from(list(paths(body)) or [("zz_extra",)]))
    if how == "value":
        return path, with_value(body, place, json.dumps(draw(json_values())).encode())
    depth = draw(st.integers(1, 3 * MAX_BODY_DEPTH))
    return path, with_value(body, place, deep(depth, draw(st.sampled_from("[{"))))


@pytest.mark.parametrize("name", ["serve", "drive", "engine"])
def test_fuzzed_bodies_are_never_a_5xx(servers, name):
    url, routes = servers[name]
    with httpx.Client(base_url=url, timeout=60) as client:
        @settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(hostile_bodies(routes))
        def run(case: tuple[str, bytes]) -> None:
            path, content = case
            check(send(client, path, content), path, content)

        run()


@pytest.mark.parametrize("name", ["serve", "drive", "engine"])
def test_a_body_that_is_not_utf8_is_named_so(servers, name):
    """A Latin-1 body was refused with orjson's "str is not valid UTF-8: surrogates not
    allowed" (there is no surrogate in it): the 400 says the body is not UTF-8, and where."""
    url, routes = servers[name]
    latin1 = '{"prompt": "café", "messages": [{"role": "user", "content": "café"}]}'.encode("latin-1")
    with httpx.Client(base_url=url, timeout=60) as client:
        for path in routes:
            r = send(client, path, latin1)
            message = r.json()["error"]["message"]
            assert r.status_code == 400 and "not UTF-8" in message and "surrogate" not in message, (path, r.text)
            assert "byte 0xe9 at offset 15" in message, message
