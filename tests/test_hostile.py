"""Hostile input and overload (issue 14): one test per class of attack, each able to fail
before its fix. Real servers on loopback; no assertion depends on the machine being idle
(waits are generous upper bounds on events that otherwise never happen).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from typing import Iterator

import httpx
import pytest

from conftest import free_port, needs_shared


@contextlib.contextmanager
def spawned_serve(*flags: str) -> Iterator[str]:
    """`render-service serve` (embedded SmolLM2) as a child process; yields its URL."""
    with spawned_serve_process(*flags) as (_, url):
        yield url


@contextlib.contextmanager
def spawned_serve_process(*flags: str, scheme: str = "http", verify=True) -> Iterator[tuple[subprocess.Popen, str]]:
    """`render-service serve` as a child process, healthy; yields it and its URL (terminated
    at the end unless it already exited). With TLS flags: ``scheme="https"`` and ``verify`` an
    ``ssl.SSLContext`` that trusts the server's certificate."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "render_service.serve.cli", "serve", "--port", str(port),
                             "--uvicorn-log-level", "warning", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"{scheme}://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/health", timeout=2, verify=verify).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("server did not start: " + proc.stderr.read().decode()[-2000:])
            time.sleep(0.2)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> bool:
    """True when the server closes ``sock`` within ``seconds`` (sending ``trickle`` a byte a second)."""
    sock.settimeout(1.0)
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        try:
            if sent < len(trickle):
                sock.sendall(trickle[sent:sent + 1])
                sent += 1
            if sock.recv(4096) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


# -- 3. connections: idle and slow-header sockets, a connection cap, TCP_NODELAY ----------

@pytest.fixture(scope="module")
def tight_server() -> Iterator[str]:
    with spawned_serve("--timeout-keep-alive", "1", "--max-connections", "8", "--max-body-bytes", str(1 << 20)) as url:
        yield url


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def test_idle_connection_is_closed(tight_server):
    with _connect(tight_server) as sock:
        assert _closed_within(sock, 20), "a socket that never sends a byte stays open"


def test_slow_header_connection_is_closed(tight_server):
    with _connect(tight_server) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        assert _closed_within(sock, 20, trickle=b"X-Slow: " + b"a" * 40), "trickled headers keep the socket open"


def test_connections_past_the_cap_get_503_and_others_still_served(tight_server):
    held = [_connect(tight_server) for _ in range(12)]
    try:
        extra = held[-1]
        extra.settimeout(10)
        answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and b"retry-after" in answer.lower()
    finally:
        for s in held:
            s.close()
    assert httpx.get(tight_server + "/health", timeout=10).status_code == 200


def test_a_probe_past_the_connection_cap_is_still_answered(tight_server):
    """A liveness probe that found the cap full got 503, and Kubernetes restarted a pod for
    being busy. Past the cap a probe is answered (and its connection closed); anything else
    still gets 503."""
    held = [_connect(tight_server) for _ in range(10)]
    try:
        probe, other = _connect(tight_server), _connect(tight_server)
        probe.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        other.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        for sock in (probe, other):
            sock.settimeout(10)
        assert probe.recv(4096).startswith(b"HTTP/1.1 200")
        assert probe.recv(4096) == b""  # closed after the probe: it holds no descriptor past the cap
        assert other.recv(4096).startswith(b"HTTP/1.1 503")
        probe.close()
        other.close()
    finally:
        for s in held:
            s.close()


@pytest.mark.parametrize("framing", [b"Content-Length: %d\r\n", b"Transfer-Encoding: chunked\r\n"])
def test_early_413_reaches_a_client_that_sends_its_whole_body_first(tight_server, framing):
    """Most clients (httpx, requests) write the whole body before reading: the 413 must be
    readable then, not lost to a connection reset."""
    size = 16 << 20
    with _connect(tight_server) as sock:
        head = framing % size if b"%d" in framing else framing
        sock.sendall(b"POST /v1/chat/completions/render HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\n" + head + b"\r\n")
        chunk = b" " * (1 << 20)
        for _ in range(size >> 20):
            sock.sendall(chunk if b"%d" in framing else b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 413")


@pytest.mark.parametrize("pieces", [1, 40], ids=["one-write", "trickled"])
def test_a_request_head_past_the_bound_gets_431_and_the_server_keeps_answering(tight_server, pieces):
    """llhttp bounds no head: without ours, one connection could grow a header list without end.
    Sent whole (one read holds it all) or in pieces (the head never completes), it is a 431."""
    from render_service.http.connections import MAX_HEAD_BYTES

    head = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(MAX_HEAD_BYTES // 1000 + 2)) + b"\r\n")
    with _connect(tight_server) as sock:
        step = -(-len(head) // pieces)
        try:
            for i in range(0, len(head), step):
                sock.sendall(head[i:i + step])
                time.sleep(0.005 if pieces > 1 else 0)
        except OSError:
            pass  # closed under us once the bound was passed: the answer is still readable
        sock.settimeout(10)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert b"longer than" in answer
    assert httpx.get(tight_server + "/v1/models", headers={"X-Pad": "a" * 8000}, timeout=10).status_code == 200


def test_every_accepted_socket_gets_tcp_nodelay():
    """uvicorn --workers N hands workers a socket made without proto=IPPROTO_TCP, and asyncio
    then never sets TCP_NODELAY (~40 ms per response). The protocol sets it itself."""
    import asyncio

    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from render_service.http.connections import HardenedProtocol

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, as uvicorn's bind_socket
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0

    async def main() -> None:
        config = Config(app=lambda *a: None, timeout_keep_alive=1)
        config.load()
        transport, _ = await asyncio.get_running_loop().connect_accepted_socket(
            lambda: HardenedProtocol(config=config, server_state=ServerState(), app_state={}), sock=accepted)
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        transport.close()

    try:
        asyncio.run(main())
    finally:
        client.close()
        listener.close()


# -- overload: fail fast with 503 + Retry-After, saturation visible, /health when wedged ---

CHAT = {"model": None, "messages": [{"role": "user", "content": "hi"}]}


def test_overload_answers_503_with_retry_after_and_health_stays_up():
    from render_service.config.serve import ServeConfig
    from render_service.http.admission import Admission
    from render_service.serve.server import build_app
    from conftest import serve_app

    app, _, _ = build_app(ServeConfig(max_queue_delay_ms=50))
    release = _saturated(app, run_time=0.0)  # a pool that frees no thread: every render must wait
    with serve_app(app) as url:
        try:
            r = httpx.post(url + "/v1/chat/completions/render", json=CHAT, timeout=30)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == 503
            assert httpx.get(url + "/health", timeout=10).status_code == 200
            metrics = httpx.get(url + "/metrics", timeout=10).text
            assert "render_service_saturation 1.0" in metrics
            assert "render_service_rejected_total 1.0" in metrics
        finally:
            release.set()
        app.state.ctx.admission = Admission(1, 1.0, wedge_after=0.0)
        app.state.ctx.admission.running, app.state.ctx.admission._started = 1, {1: 0.0}
        assert httpx.get(url + "/health", timeout=10).status_code == 503


# -- 2. derender: stop strings bounded, work off the event loop, SSE events capped ---------

DERENDER = "/v1/chat/completions/derender"


def _derender_body(**chat_request) -> dict:
    return {"generate_response": {"choices": [{"index": 0, "token_ids": [28, 29, 30], "finish_reason": "stop"}]},
            "prompt_token_ids": [1, 2], "chat_request": {"messages": [], **chat_request}}


@pytest.fixture(scope="module")
def smol_url() -> Iterator[str]:
    from conftest import render_server

    with render_server() as url:
        yield url


@pytest.mark.parametrize("stop", [["s%d" % i for i in range(65)], ["x" * 1001]])
def test_stop_strings_past_the_limits_are_400(smol_url, stop):
    r = httpx.post(smol_url + DERENDER, json=_derender_body(stop=stop), timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop", r.text
    ok = httpx.post(smol_url + DERENDER, json=_derender_body(stop=stop[:64] if len(stop) > 1 else ["x" * 1000]),
                    timeout=30)
    assert ok.status_code == 200, ok.text


def test_pipe_work_goes_through_the_pool_admission():
    """A pipe used to derender every event on the event loop; now its steps queue for the
    CPU pool like everything else (here: a pool that never frees a slot → 503 at open)."""
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app
    from conftest import serve_app

    app, _, _ = build_app(ServeConfig(max_queue_delay_ms=50))
    release = _saturated(app, run_time=0.0)
    header = {"prompt_token_ids": [1, 2], "chat_request": {"messages": []}}
    body = orjson_line(header) + b'data: {"choices":[{"index":0,"token_ids":[28],"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    with serve_app(app) as url:
        try:
            r = httpx.post(url + "/v1/chat/completions/derender/pipe", content=body, timeout=30)
            assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
        finally:
            release.set()


def orjson_line(obj) -> bytes:
    import orjson

    return orjson.dumps(obj) + b"\n"


def test_sse_event_without_blank_lines_is_capped():
    """`data:` lines with no blank line between them used to accumulate without limit."""
    from render_service.wire.sse import SSEError, SSEReader

    reader = SSEReader(max_line_bytes=1024)
    with pytest.raises(SSEError, match="event"):
        for _ in range(200):
            reader.feed(b"data: xxxxxxxx\n")


# -- 5, 7. every client number range-checked, nesting capped, no empty prompt -------------

BIG = 2**64 - 1


def _deep(levels: int) -> dict:
    obj: dict = {}
    for _ in range(levels):
        obj = {"a": obj}
    return obj


@pytest.mark.parametrize("route,body,param", [
    (DERENDER, {**_derender_body(), "prompt_tokens": BIG}, "prompt_tokens"),
    ("/v1/completions/derender", {"generate_responses": [{"choices": [
        {"index": 0, "token_ids": [28], "finish_reason": "stop"}], "usage": {
        "prompt_tokens": BIG, "completion_tokens": 1, "total_tokens": 1}}]}, "generate_responses.0.usage.prompt_tokens"),
    (DERENDER, {"stream": True, "generate_chunk": {"choices": [{"index": 0, "token_ids": [28]}],
                "usage": {"prompt_tokens": 1, "completion_tokens": BIG, "total_tokens": 1}},
                "prompt_token_ids": [1], "chat_request": {"messages": []}}, "generate_chunk.usage.completion_tokens"),
    (DERENDER, {**_derender_body(), "generate_response": {
        "choices": [{"index": 0, "token_ids": [28], "finish_reason": "stop"}], "metrics": _deep(300)}},
     "generate_response.metrics"),
    (DERENDER, {"generate_response": {"choices": [{"index": BIG, "token_ids": [28], "finish_reason": "stop"}]},
                "chat_request": {"messages": []}}, "generate_response.choices.0.index"),
    ("/v1/chat/completions/render", {"messages": [{"role": "user", "content": "hi"}], "truncate_prompt_tokens": 0},
     "truncate_prompt_tokens"),
])
def test_out_of_range_numbers_and_deep_nesting_are_400(smol_url, route, body, param):
    r = httpx.post(smol_url + route, json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_pipe_header_with_a_huge_count_is_an_error_not_a_dropped_connection(smol_url):
    header = {"prompt_token_ids": [1, 2], "prompt_tokens": BIG, "chat_request": {"messages": []},
              "stream_options": {"include_usage": True}}
    body = orjson_line(header) + b'data: {"choices":[{"index":0,"token_ids":[28],"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    r = httpx.post(smol_url + "/v1/chat/completions/derender/pipe", content=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_tokens", r.text


# -- 6. stream states: unforgeable by default, validated after the MAC, largest n fits ---

SECRET = "k" * 32


@pytest.fixture(scope="module")
def keyed() -> Iterator[tuple[str, object]]:
    """A server with a known secret (the attacker who has the key, for the validation tests)
    and its codec."""
    from render_service.config.serve import ServeConfig
    from render_service.derender.state import StateCodec
    from render_service.serve.server import build_app
    from conftest import serve_app

    app, bundle, _ = build_app(ServeConfig(stream_state_secret=SECRET))
    with serve_app(app) as url:
        yield url, StateCodec(bundle.fingerprint, SECRET), bundle


def _stream_body(state=None, ids=(28, 29), n=1, **chat) -> dict:
    return {"stream": True, "stream_state": state, "prompt_token_ids": [1, 2],
            "generate_chunk": {"choices": [{"index": i, "token_ids": list(ids)} for i in range(n)]},
            "chat_request": {"messages": [], **chat}}


def test_default_key_is_not_derivable_from_public_model_files():
    """The default key used to be derived from the model fingerprint (public tokenizer files),
    so anyone could seal a state. Seal one that way: it must be refused."""
    import hashlib
    import hmac

    import orjson

    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app
    from conftest import serve_app

    app, bundle, _ = build_app(ServeConfig())
    fp = hashlib.sha256(bundle.fingerprint.encode()).hexdigest()[:16]
    key = hashlib.sha256(b"render-service stream_state\0" + bundle.fingerprint.encode()).digest()
    s = orjson.dumps({"c": 1, "pl": 2, "ch": {}}).decode()
    forged = {"v": 1, "fp": fp, "s": s, "mac": hmac.new(key, f"1|{fp}|{s}".encode(), hashlib.sha256).hexdigest()[:32]}
    with serve_app(app) as url:
        first = httpx.post(url + DERENDER, json=_stream_body(), timeout=30)
        assert first.status_code == 200
        r = httpx.post(url + DERENDER, json=_stream_body(forged), timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "stream_state", r.text
        ok = httpx.post(url + DERENDER, json=_stream_body(first.json()["stream_state"]), timeout=30)
        assert ok.status_code == 200, ok.text


def test_short_secret_refuses_to_start():
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import StartupError, build_app

    with pytest.raises(StartupError, match="32"):
        build_app(ServeConfig(stream_state_secret="replace-me"))


def test_non_ascii_mac_is_400(keyed):
    url, codec, _ = keyed
    state = codec.seal({"c": 1, "pl": 2, "ch": {}})
    state["mac"] = "é" * 32
    r = httpx.post(url + DERENDER, json=_stream_body(state), timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream_state", r.text


def _mutations(value):
    """Type-swapped and out-of-range variants of every leaf of a JSON value, one at a time."""
    if isinstance(value, dict):
        for key, item in value.items():
            for variant in _mutations(item):
                yield {**value, key: variant}
            yield {k: v for k, v in value.items() if k != key}
    elif isinstance(value, list):
        for i, item in enumerate(value):
            for variant in _mutations(item):
                yield value[:i] + [variant] + value[i + 1:]
        yield value + [value[-1] if value else 0]
    for odd in (None, -1, 2**40, "x", 1.5, True, [], {}):
        if odd != value or type(odd) is not type(value):
            yield odd


def test_sealed_but_malformed_states_are_400_never_500(keyed):
    """With the key (leaked), every field of a state is still checked: no mutation of a real
    state may give a 500."""
    import orjson

    url, codec, _ = keyed
    first = httpx.post(url + DERENDER, json=_stream_body(stop=["zz9"], tools=None), timeout=30)
    payload = orjson.loads(first.json()["stream_state"]["s"])
    statuses = {}
    with httpx.Client(base_url=url, timeout=30) as client:
        for variant in _mutations(payload):
            if not isinstance(variant, dict):
                continue
            r = client.post(DERENDER, json=_stream_body(codec.seal(variant), stop=["zz9"]))
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code in (200, 400), (variant, r.text)
    assert statuses.get(400, 0) > 10


def test_largest_n_stream_continues(keyed):
    """n = 16,384 (vLLM's limit): the second chunk used to fail, its state past the 1 MiB cap."""
    url, _, _ = keyed
    first = httpx.post(url + DERENDER, json=_stream_body(n=16384), timeout=120)
    assert first.status_code == 200, first.text[:300]
    second = httpx.post(url + DERENDER, json=_stream_body(first.json()["stream_state"], n=16384), timeout=120)
    assert second.status_code == 200, second.text[:300]


# -- 1. request templates: killable worker, budget, limits, client leave, /tokenize auth ---

RENDER = "/v1/chat/completions/render"
LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def _with_template(template: str) -> dict:
    return {"messages": [{"role": "user", "content": "hi"}], "chat_template": template}


@pytest.fixture(scope="module")
def trusting() -> Iterator[tuple[str, object]]:
    from render_service.config.serve import ServeConfig
    from render_service.model import template_sandbox
    from render_service.serve.server import build_app
    from conftest import serve_app

    app, _, _ = build_app(ServeConfig(trust_request_chat_template=True, api_key=("secret-key",)))
    with serve_app(app) as url:
        yield url, template_sandbox
    template_sandbox.shared_sandbox().close()


AUTH = {"Authorization": "Bearer secret-key"}


@pytest.mark.parametrize("template,says", [
    ("{{ (9**(9**8)) % 7 }}", "bits"),          # held the interpreter 65 s
    ("{{ 'a' * 10**10 }}", "repetition"),       # was a 500 (MemoryError)
    (LOOPS, "did not finish"),                  # never ended
])
def test_template_bombs_are_400_and_the_server_keeps_answering(trusting, template, says):
    url, _ = trusting
    r = httpx.post(url + RENDER, json=_with_template(template), headers=AUTH, timeout=60)
    assert r.status_code == 400 and says in r.json()["error"]["message"], r.text
    assert httpx.get(url + "/health", timeout=10).status_code == 200
    ok = httpx.post(url + RENDER, json=_with_template("{% for m in messages %}{{ m.content }}{% endfor %}"),
                    headers=AUTH, timeout=60)
    assert ok.status_code == 200, ok.text


def test_four_runaway_templates_do_not_stop_health(trusting):
    import concurrent.futures

    url, _ = trusting
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        runaways = [pool.submit(httpx.post, url + RENDER, json=_with_template(LOOPS), headers=AUTH, timeout=120)
                    for _ in range(4)]
        # health is asked once all four are being served (or one was already answered), not after a guess
        deadline = time.monotonic() + 60
        while (httpx.get(url + "/load", timeout=10).json()["server_load"] < 4
               and not any(f.done() for f in runaways)):
            assert time.monotonic() < deadline, "the four runaway requests never arrived"
            time.sleep(0.05)
        assert httpx.get(url + "/health", timeout=10).status_code == 200
        assert all(f.result().status_code in (400, 503) for f in runaways)


def test_a_client_that_leaves_stops_its_template(trusting):
    """With a 60 s budget, the worker is still killed soon after the client goes away."""
    url, template_sandbox = trusting
    sandbox = template_sandbox.shared_sandbox()
    limits = sandbox.limits
    sandbox.limits = template_sandbox.TemplateLimits(timeout_s=60, workers=limits.workers)
    try:
        killed = sandbox.killed
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + RENDER, json=_with_template(LOOPS + "{{ 1 }}"), headers=AUTH, timeout=1.0)
        deadline = time.monotonic() + 20
        while sandbox.killed == killed and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sandbox.killed > killed, "the template kept running after its client left"
    finally:
        sandbox.limits = limits


def test_tokenize_with_a_request_template_needs_the_api_key(trusting):
    url, _ = trusting
    body = _with_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert httpx.post(url + "/tokenize", json=body, timeout=30).status_code == 401
    assert httpx.post(url + "/tokenize", json=body, headers=AUTH, timeout=30).status_code == 200
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(url + "/tokenize", json=plain, timeout=30).status_code == 200  # as vLLM: /tokenize is open


# -- 9. auth details as vLLM: VLLM_API_KEY, the first Authorization header, OPTIONS ---------

def test_auth_takes_the_first_header_and_lets_options_through(trusting):
    url, _ = trusting
    two = [("Authorization", "Bearer secret-key"), ("Authorization", "Bearer wrong")]
    assert httpx.post(url + RENDER, json=CHAT, headers=two, timeout=30).status_code == 200
    assert httpx.post(url + RENDER, json=CHAT, headers=two[::-1], timeout=30).status_code == 401
    assert httpx.options(url + RENDER, timeout=30).status_code != 401


def test_vllm_api_key_environment_fallback(monkeypatch):
    import argparse

    from render_service.serve.cli import add_serve_parser
    from render_service.serve.flags import serve_config

    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers())
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert serve_config(parser.parse_args(["serve"])).api_key == ("from-env",)
    assert serve_config(parser.parse_args(["serve", "--api-key", "flag"])).api_key == ("flag",)


# -- 8. shutdown: drive ends in-flight streams with an error event + [DONE], aborts engines --

def test_drive_shutdown_ends_streams_with_an_error_event_and_aborts_the_engine(tmp_path):
    import json
    import threading

    import uvicorn

    from reference_engine.testing import EngineProcess
    from render_service.config.serve import ServeConfig
    from render_service.driver.app import create_app as create_driver_app
    from render_service.driver.config import DriverConfig
    from render_service.http.drain import CUT_MARGIN_S, DrainingServer
    from render_service.driver.flow import Driver
    from render_service.serve.server import load_bundle

    script = tmp_path / "slow.json"
    script.write_text(json.dumps({"model": "scripted", "token_delay": 0.05, "responses": [{"token_ids": [28] * 2000}]}))
    bundle = load_bundle(ServeConfig())
    with EngineProcess("--scripted", str(script), role="both") as engine:
        driver = Driver(DriverConfig(prefill=(engine.url,), decode=(engine.url,), serve=ServeConfig()), bundle)
        app = create_driver_app(driver)
        port = free_port()
        server = DrainingServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                               timeout_graceful_shutdown=1 + CUT_MARGIN_S), app.state.drain, 1.0)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        aborted = httpx.get(engine.url + "/stats", timeout=5).json()["counters"].get("requests_aborted", 0)
        lines = []
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", timeout=60,
                          json={"messages": [{"role": "user", "content": "sing"}], "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    lines.append(line)
                    if len(lines) == 2:
                        server.should_exit = True  # what SIGTERM does
        thread.join(30)
        assert lines[-1] == "data: [DONE]", lines[-3:]
        assert json.loads(lines[-2].removeprefix("data: "))["error"]["code"] == 503
        stats = lambda: httpx.get(engine.url + "/stats", timeout=5).json()["counters"].get("requests_aborted", 0)
        deadline = time.monotonic() + 10
        while stats() == aborted and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stats() > aborted, "decode kept generating for a stream the driver had ended"


def test_serve_exits_on_sigterm_despite_an_idle_pipe():
    """An idle pipe (or a runaway request) kept `serve` up forever after SIGTERM."""
    import signal

    with spawned_serve_process("--graceful-shutdown-timeout", "1") as (proc, url):
        with _connect(url) as sock:
            sock.sendall(b"POST /v1/chat/completions/derender/pipe HTTP/1.1\r\nHost: x\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            header = orjson_line({"prompt_token_ids": [1], "chat_request": {"messages": []}})
            sock.sendall(b"%x\r\n%s\r\n" % (len(header), header))  # then nothing more: an idle pipe
            sock.settimeout(30)
            assert sock.recv(64).startswith(b"HTTP/1.1 200")  # the pipe is open, waiting for engine bytes
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) is not None


def test_requests_past_the_in_flight_bound_are_refused_at_the_door():
    """Bounded admission per worker: past max_inflight a request is answered 503 before
    its body is read (the event loop's own queue is otherwise unbounded)."""
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app
    from conftest import serve_app

    app, _, _ = build_app(ServeConfig())
    app.state.ctx.admission.max_inflight = 0
    with serve_app(app) as url:
        r = httpx.post(url + "/v1/chat/completions/render", json=CHAT, timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert httpx.get(url + "/health", timeout=10).status_code == 200


def test_prompt_longer_than_the_context_can_hold_is_refused_before_tokenizing(smol_url, monkeypatch):
    """vLLM refuses text past max_model_len x the longest token before tokenizing; a
    16 M-character prompt used to be tokenized first (8.4 s, 531 MB)."""
    from render_service.serve.server import load_bundle
    from render_service.config.serve import ServeConfig

    bundle = load_bundle(ServeConfig())
    limit = bundle.max_model_len * bundle.tokenizer.max_token_chars
    text = "a" * (limit + 1)
    for route, body in (("/v1/completions/render", {"prompt": text}), ("/tokenize", {"prompt": text}),
                        ("/v1/chat/completions/render", {"messages": [{"role": "user", "content": text}]})):
        r = httpx.post(smol_url + route, json=body, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "input_text", r.text[:300]


# -- issue 25: work bounded by a request's size, slow bodies, admission under overload -----

def hardened_server(app, **uvicorn_options):
    """``app`` under uvicorn with our connection protocol (as `serve` runs it), in a thread."""
    from conftest import serve_app
    from render_service.http.connections import HardenedProtocol

    return serve_app(app, http=HardenedProtocol, **uvicorn_options)


def _listed_count(r: httpx.Response) -> int:
    """The error count a 400's message starts with ("N validation error(s): ...")."""
    message = r.json()["error"]["message"]
    return int(message.split(" ", 1)[0])


@pytest.mark.parametrize("route,body,param", [
    ("/detokenize", {"tokens": ["a"] * 1_000_000}, "tokens.0"),
    ("/v1/completions/render", {"prompt": [-1] * 600_000}, "prompt"),
    ("/v1/chat/completions/render", {"messages": [{"role": "user", "content": "hi"}],
                                     "logit_bias": {str(i): "x" for i in range(200_000)}}, "logit_bias"),
    (DERENDER, {"generate_response": {"choices": [{"index": 0, "token_ids": [None] * 500_000}]},
                "chat_request": {"messages": []}}, "generate_response.choices.0.token_ids.0"),
    (DERENDER, {**_derender_body(), "prompt_token_ids": ["a"] * 500_000}, "prompt_token_ids.0"),
])
def test_a_huge_invalid_list_is_one_error_not_one_per_item(smol_url, route, body, param):
    """pydantic checked every item and built one error each, on the event loop: 1,000,000
    bad tokens held /detokenize (and /health with it) for 5-8 s. Lists now stop at their
    first bad item; the message gives the count and the first few."""
    r = httpx.post(smol_url + route, json=body, timeout=120)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["param"] == param
    assert _listed_count(r) <= 5, r.text[:300]
    assert httpx.get(smol_url + "/health", timeout=30).status_code == 200


def test_health_answers_while_a_huge_invalid_body_is_refused(smol_url):
    """/health keeps answering while 1,000,000 bad tokens are refused (a generous bound: the
    probe must not wait for the whole refusal, which used to take 5-8 s)."""
    import threading

    body = {"tokens": ["a"] * 1_000_000}
    done = threading.Event()
    answers: list[int] = []

    def big() -> None:
        answers.append(httpx.post(smol_url + "/detokenize", json=body, timeout=120).status_code)
        done.set()

    threading.Thread(target=big, daemon=True).start()
    probes = 0
    while not done.is_set():
        assert httpx.get(smol_url + "/health", timeout=30).status_code == 200
        probes += 1
    assert answers == [400] and probes >= 1


def _read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """(head, body) of one HTTP/1.1 response with a Content-Length, read from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data[:200]!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return head, body


def _slow_upload(url: str, path: str = "/v1/chat/completions/render", length: int = 100_000) -> socket.socket:
    sock = _connect(url)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {length}\r\n\r\n{{".encode())
    return sock


def test_a_trickled_body_gets_408_at_its_deadline():
    """A body had no deadline: one byte every 2 s kept a request open for as long as it
    lasted. Now it must arrive within --body-read-timeout plus one second per
    --body-min-rate bytes, else 408 and the connection is closed."""
    with spawned_serve("--body-read-timeout", "1", "--body-min-rate", "100") as url:
        with _slow_upload(url) as sock:
            sock.settimeout(0.5)
            answer, deadline = b"", time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    sock.sendall(b" ")
                    chunk = sock.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
            assert b'"code":408' in answer
        with _slow_upload(url) as sock:  # a client that hangs up mid-body
            pass
        # neither is a server error (they were counted as 5xx, with a traceback in the log): wait
        # until the app has answered both, then look
        def answered_408() -> tuple[float, list[str]]:
            lines = [line for line in httpx.get(url + "/metrics").text.splitlines() if not line.startswith("#")]
            ours = [line for line in lines if line.startswith("render_service_requests_total")]
            return sum(float(line.rsplit(" ", 1)[1]) for line in ours if 'status="408"' in line), lines
        deadline = time.monotonic() + 30
        while (count := answered_408())[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert count[0] >= 2
        assert not [line for line in count[1] if 'status="5' in line]
        # a body sent at the minimum rate is never cut: 600 bytes at ~300 bytes/s
        body = orjson_line({"model": None, "messages": [{"role": "user", "content": "hi " * 150}]})
        with _connect(url) as sock:
            sock.sendall(b"POST /v1/chat/completions/render HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body))
            for i in range(0, len(body), 30):
                sock.sendall(body[i:i + 30])
                time.sleep(0.1)
            sock.settimeout(30)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")


def test_slow_uploads_do_not_lock_out_a_render():
    """Requests still sending their bodies counted against the in-flight bound: 300 slow
    uploads got every other POST a 503. Here the bound is 8 and 12 uploads trickle."""
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, _, _ = build_app(ServeConfig())
    app.state.ctx.admission.max_inflight = 8
    with hardened_server(app) as url:
        uploads = [_slow_upload(url) for _ in range(12)]
        try:
            time.sleep(0.5)
            for s in uploads:
                s.sendall(b" ")
            r = httpx.post(url + "/v1/chat/completions/render", json=CHAT, timeout=30)
            assert r.status_code == 200, r.text[:300]
            # the render leaves the count once its ASGI call returns (just after the client has
            # the answer); the twelve uploads, still open, must not be in it
            deadline = time.monotonic() + 10
            while app.state.ctx.admission.inflight and time.monotonic() < deadline:
                time.sleep(0.01)
            assert app.state.ctx.admission.inflight == 0
        finally:
            for s in uploads:
                s.close()


def test_a_pool_thread_starts_the_next_step_without_the_event_loop():
    """The suspected mechanism of issue 25's collapse, verified: a pool slot passed to the
    next waiter only when the event loop got round to it, so a busy loop held slots idle.
    Here the loop is blocked while the first step ends: the second must start anyway."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from render_service.http.admission import Admission

    started: dict[str, float] = {}
    first_may_end = threading.Event()

    def step(name: str) -> str:
        started[name] = time.monotonic()
        if name == "first":
            first_may_end.wait(10)
        return name

    async def main() -> float:
        gate = Admission(capacity=1, max_queue_delay=30)
        pool = ThreadPoolExecutor(1)
        runs = [asyncio.ensure_future(gate.run(pool, lambda n=n: step(n))) for n in ("first", "second")]
        await asyncio.sleep(0.2)  # both queued, the first running
        first_may_end.set()
        time.sleep(1.0)  # the event loop is busy (blocked) while the first step ends
        unblocked = time.monotonic()
        assert await asyncio.gather(*runs) == ["first", "second"]
        pool.shutdown()
        return unblocked

    unblocked = asyncio.run(main())
    assert started["second"] < unblocked, "the second step waited for the event loop to free the slot"


def test_admission_refuses_past_the_queue_delay_and_measures_saturation():
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from render_service.http.admission import Admission, Overloaded

    async def main() -> None:
        gate = Admission(capacity=1, max_queue_delay=0.05, wedge_after=0.0)
        pool = ThreadPoolExecutor(1)
        release = threading.Event()
        holder = asyncio.ensure_future(gate.run(pool, lambda: release.wait(10)))
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded):
            await gate.run(pool, lambda: None)
        assert gate.wedged()  # the only slot held longer than wedge_after, nothing finished
        assert gate.saturation() == 1.0 and gate.rejected == 1
        release.set()
        await holder
        assert await gate.run(pool, lambda: 7, deadline=False) == 7  # freed: the next one starts at once
        assert not gate.wedged()
        pool.shutdown()

    asyncio.run(main())


def test_saturation_is_0_when_nothing_waited_behind_a_late_loop():
    """An idle server read a saturation of 0.11-0.33 for ten seconds after a request: the
    loop's timer ran late during the request's own work (a first render compiling its
    template) or a stall no request waited on, and that lateness counted as queue delay.
    It counts only while more than one request is in flight (deploy/README: 0 when idle)."""
    import asyncio
    import time

    from render_service.http.admission import Admission

    async def main() -> None:
        gate = Admission(capacity=1, max_queue_delay=1.0)
        gate.overloaded_at_the_door()  # starts the loop's watch, as the first request does
        await asyncio.sleep(0.1)
        for inflight in (0, 1):
            gate.inflight = inflight
            time.sleep(0.3)  # the loop stalls: no tick for 0.3 s
            await asyncio.sleep(0.1)
            assert gate.saturation() == 0.0, (inflight, gate.saturation())
        gate.inflight = 2  # a second request waited behind the stall: a queue delay
        time.sleep(0.3)
        await asyncio.sleep(0.1)
        assert gate.saturation() >= 0.2

    asyncio.run(main())


def _saturated(app, run_time: float = 10.0):
    """Occupy every thread of ``app``'s CPU pool; steps are taken to last ``run_time`` s.
    Returns the event that frees them."""
    import threading

    ctx = app.state.ctx
    release = threading.Event()
    for _ in range(ctx.admission.capacity):
        ctx.executor.submit(lambda: ctx.admission._run_job(0, time.monotonic(), lambda: release.wait(60), False))
    deadline = time.monotonic() + 10
    while ctx.admission.running < ctx.admission.capacity and time.monotonic() < deadline:
        time.sleep(0.01)
    ctx.admission.run_time = run_time
    return release


@pytest.mark.parametrize("path,shape", [("/v1/chat/completions/render", "openai"), ("/v1/messages/count_tokens", "anthropic")])
def test_overload_is_refused_at_the_door_before_the_body_is_read(path, shape):
    """A request that could not start within --max-queue-delay-ms is answered 503 +
    Retry-After as soon as its head is in (here: its body is never sent), in the route's
    error shape; /health and /load keep answering; /load names the saturation."""
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, _, _ = build_app(ServeConfig(max_queue_delay_ms=500))
    with hardened_server(app) as url:
        release = _saturated(app)
        try:
            with _slow_upload(url, path, length=100_000) as sock:
                sock.settimeout(20)
                head, body = _read_response(sock)
            assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head.lower(), head
            import orjson

            error = orjson.loads(body)
            if shape == "anthropic":
                assert error["type"] == "error" and error["error"]["type"] == "overloaded_error", error
            else:
                assert error["error"]["code"] == 503, error
            assert httpx.get(url + "/health", timeout=10).status_code == 200
            load = httpx.get(url + "/load", timeout=10).json()
            assert load["saturation"] == 1.0, load
        finally:
            release.set()
        r = httpx.post(url + "/v1/chat/completions/render", json=CHAT, timeout=30)
        assert r.status_code == 200, r.text[:300]


# -- issue 25, low items: a sealed state of the wrong inner type, long request ids ----------

@needs_shared
def test_front_door_streams_resumed_from_a_sealed_malformed_state_are_400_never_500():
    """With the real secret a client can seal any inner value: a Messages or Responses stream
    resumed from a state whose tool parser entry had the wrong type gave 500 ("Internal
    error while derendering"). Every mutation of the choice state is a 200 or a 400."""
    import orjson

    from conftest import MODELS, serve_app
    from render_service.config.serve import ServeConfig
    from render_service.derender.state import StateCodec
    from render_service.serve.server import build_app

    app, bundle, _ = build_app(ServeConfig(model=str(MODELS / "qwen3"), reasoning_parser="qwen3",
                                           tool_call_parser="hermes", enable_auto_tool_choice=True,
                                           stream_state_secret=SECRET))
    codec, tok = StateCodec(bundle.fingerprint, SECRET), bundle.tokenizer
    first = tok.encode('<think>hmm</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par', False)
    rest = tok.encode('is"}}\n</tool_call>', False)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    requests = {"responses": {"input": "hi", "tools": [{"type": "function", "name": "get_weather", "parameters": schema}]},
                "messages": {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                             "tools": [{"name": "get_weather", "input_schema": schema}]}}

    def body(kind: str, state, ids) -> dict:
        return {"stream": True, "stream_state": state, "prompt_token_ids": [1, 2],
                "generate_chunk": {"choices": [{"index": 0, "token_ids": ids}]}, f"{kind}_request": requests[kind]}

    with serve_app(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        for kind in requests:
            r = client.post(f"/v1/{kind}/derender", json=body(kind, None, first))
            assert r.status_code == 200, r.text[:300]
            payload = orjson.loads(r.json()["stream_state"]["s"])
            statuses: dict[int, int] = {}
            for variant in _mutations(payload["cs"]):
                r = client.post(f"/v1/{kind}/derender", json=body(kind, codec.seal({**payload, "cs": variant}, kind), rest))
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                assert r.status_code in (200, 400), (kind, variant, r.text[:300])
            assert statuses.get(400, 0) > 10, statuses


@pytest.mark.parametrize("route", ["/v1/chat/completions/render", "/v1/completions/render", "/v1/messages/render"])
def test_a_long_request_id_is_refused_not_echoed(smol_url, route):
    """A 1 MiB request_id and a 60 KB X-Request-Id were echoed back whole (into the engine
    request and every log line too). Refused with a 400 naming them, not cut: a cut id would
    no longer match the client's records (vLLM 0.33 echoes any length)."""
    from render_service.wire.limits import MAX_REQUEST_ID_CHARS

    body: dict = ({"prompt": "hi"} if "completions/render" in route and "chat" not in route else
            {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    body["model"] = httpx.get(smol_url + "/v1/models", timeout=30).json()["data"][0]["id"]
    r = httpx.post(smol_url + route, json=body, headers={"X-Request-Id": "r" * 60_000}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "X-Request-Id", r.text[:200]
    assert len(r.content) < 1000 and "x-request-id" not in r.headers
    if route != "/v1/messages/render":  # Messages has no body request_id
        r = httpx.post(smol_url + route, json={**body, "request_id": "r" * (1 << 20)}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "request_id", r.text[:200]
        assert len(r.content) < 2000
    ok = httpx.post(smol_url + route, json=body, headers={"X-Request-Id": "r" * MAX_REQUEST_ID_CHARS}, timeout=30)
    assert ok.status_code == 200 and "r" * MAX_REQUEST_ID_CHARS in ok.text


@pytest.mark.parametrize("ctype,size", [(b"text/plain", 3 << 20), (b"application/json", 3 << 20)])
def test_an_early_answer_reaches_a_slow_client_that_sends_its_whole_body_first(tight_server, ctype, size):
    """An early 400 (a non-JSON Content-Type) or 413 (Content-Length over the cap) was
    followed by a close at the keep-alive deadline while a slower client was still sending:
    the client saw ECONNRESET. Here 3 MiB go at ~1 MiB/s against a 1 s deadline; the client
    reads only after sending everything."""
    with _connect(tight_server) as sock:
        sock.sendall(b"POST /v1/chat/completions/render HTTP/1.1\r\nHost: x\r\nContent-Type: " + ctype +
                     b"\r\nContent-Length: %d\r\n\r\n" % size)
        chunk = b" " * (64 << 10)
        for _ in range(size // len(chunk)):
            sock.sendall(chunk)
            time.sleep(0.06)
        sock.settimeout(10)
        head, body = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 400" if ctype == b"text/plain" else b"HTTP/1.1 413"), head


def test_a_quiet_pipe_ends_with_an_error_event_and_done_at_shutdown():
    """A derender pipe whose engine side went quiet was cut at the graceful timeout after
    SIGTERM: no error event, no [DONE], no chunked terminator. Now the drain ends it first."""
    import signal

    with spawned_serve_process("--graceful-shutdown-timeout", "2") as (proc, url):
        with _connect(url) as sock:
            sock.sendall(b"POST /v1/chat/completions/derender/pipe HTTP/1.1\r\nHost: x\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            first = orjson_line({"prompt_token_ids": [1], "chat_request": {"messages": []}})
            first += b'data: {"choices":[{"index":0,"token_ids":[28, 29]}]}\n\n'
            sock.sendall(b"%x\r\n%s\r\n" % (len(first), first))  # then nothing more: the engine went quiet
            sock.settimeout(30)
            answer = sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            proc.send_signal(signal.SIGTERM)
            while chunk := sock.recv(65536):
                answer += chunk
        assert b'"code":503' in answer and b"data: [DONE]" in answer, answer[-400:]
        assert answer.endswith(b"0\r\n\r\n"), answer[-100:]
        assert proc.wait(30) is not None


@pytest.mark.parametrize("route,where", [
    ("/v1/chat/completions/derender", "generate_response"), ("/v1/completions/derender", "generate_responses"),
    ("/v1/chat/completions/derender", "generate_chunk"), ("/v1/responses/derender", "generate_response"),
])
def test_a_long_engine_request_id_is_refused_not_echoed(smol_url, route, where):
    """A derender's ``generate_response.request_id`` of 1 MiB was echoed whole into the
    answer (and every chunk of a stream). Bounded generously: a client's id (512) with the
    engine's prefixes and suffixes fits."""
    from render_service.wire.limits import MAX_ENGINE_REQUEST_ID_CHARS, MAX_REQUEST_ID_CHARS

    def body(rid: str) -> dict:
        gen = {"request_id": rid, "choices": [{"index": 0, "token_ids": [28, 29], "finish_reason": "stop"}]}
        extra = {"responses_request": {"input": "hi"}} if "responses" in route else {"chat_request": {"messages": []}}
        if where == "generate_responses":
            return {"generate_responses": [gen]}
        return {where: gen, "stream": where == "generate_chunk", **extra}

    r = httpx.post(smol_url + route, json=body("r" * (1 << 20)), timeout=30)
    param = f"{where}.0.request_id" if where == "generate_responses" else f"{where}.request_id"
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text[:300]
    assert len(r.content) < 2000
    engine_id = "chatcmpl-generate-tokens-" + "r" * MAX_REQUEST_ID_CHARS + "-0-1234abcd"
    assert len(engine_id) <= MAX_ENGINE_REQUEST_ID_CHARS
    ok = httpx.post(smol_url + route, json=body(engine_id), timeout=30)
    assert ok.status_code == 200, ok.text[:300]


@pytest.mark.parametrize("route,request_field,n,where", [
    ("/v1/chat/completions/derender", "chat_request", 1, "generate_response"),
    ("/v1/chat/completions/derender", "chat_request", 2, "generate_chunk"),
    ("/v1/completions/derender", "completion_request", 3, "generate_responses"),
    ("/v1/completions/derender", "sampling_params", 2, "generate_chunk"),
])
def test_a_choice_index_past_n_is_refused(smol_url, route, request_field, n, where):
    """An engine choice whose ``index`` is not below the ``n`` the body states (the client
    request's or ``sampling_params``') was echoed into the answer; now a 400 naming it.
    Indexes below ``n`` pass, and so do any when the body states no ``n``."""
    limit = n

    def body(indexes: list[int]) -> dict:
        choices = [{"index": i, "token_ids": [28, 29], "finish_reason": "stop"} for i in indexes]
        req = {"n": n}
        if request_field == "chat_request":
            req["messages"] = []
        gen = {"choices": choices}
        out = {"generate_responses": [gen]} if where == "generate_responses" else {where: gen, "stream": where == "generate_chunk"}
        return {**out, request_field: req}

    r = httpx.post(smol_url + route, json=body([0, limit]), timeout=30)
    param = f"{where}.0.choices.1.index" if where == "generate_responses" else f"{where}.choices.1.index"
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text[:300]
    assert f"n={limit}" in r.json()["error"]["message"]
    ok = httpx.post(smol_url + route, json=body(list(range(limit))), timeout=30)
    assert ok.status_code == 200, ok.text[:300]
    unsaid = body([0, limit])
    unsaid[request_field].pop("n")
    assert httpx.post(smol_url + route, json=unsaid, timeout=30).status_code == 200


def test_tool_call_arguments_nested_past_the_recursion_limit_are_a_plain_400(smol_url):
    """A past tool call's arguments nested ~1000 deep (JSON text here: decoded for the template;
    an object reaches a template's JSON encoder the same way) came back as 'Invalid request
    (RecursionError): maximum recursion depth exceeded…' (the fresh user): a 400, but naming
    Python's internals, not what to change."""
    deep = '{"a":' * 1010 + "1" + "}" * 1010
    arguments = '"' + deep.replace('"', '\\"') + '"'
    body = ('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": '
            '[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ' + arguments + '}}]}, '
            '{"role": "tool", "tool_call_id": "c1", "content": "ok"}]}')
    r = httpx.post(smol_url + "/v1/chat/completions/render", content=body,
                   headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "Recursion" not in message and "nested too deeply" in message, message
