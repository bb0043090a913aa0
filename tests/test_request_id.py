"""``X-Request-Id`` that is not ASCII: refused with a 400 naming it, on render and on drive.

HTTP carries a header's non-ASCII bytes as opaque latin-1: Starlette decodes them so, and the
id came back garbled in the answer's ``request_id`` (``é`` → ``Ã©``; vLLM 0.33 the same,
recorded in ``fixtures/vllm/recorded/connection-edges.json``) while the echoed header kept the
raw bytes; drive could not put it in its engine requests at all. An id is for matching
records, so a garbled one is worse than a refusal. Real servers on loopback, raw bytes on the
wire (an HTTP client would refuse to send them).
"""

from __future__ import annotations

import json
import socket
from typing import Iterator

import pytest

from conftest import free_port, serve_app
from test_hostile import spawned_serve

RENDER = b"/v1/chat/completions/render"
BODY = b'{"model":null,"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":4}'


def _post(address: tuple[str, int], path: bytes, request_id: bytes) -> tuple[int, dict]:
    """POST ``BODY`` with ``X-Request-Id: request_id`` (raw bytes); the status and the JSON answer."""
    with socket.create_connection(address, timeout=60) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     b"X-Request-Id: %s\r\nContent-Length: %d\r\n\r\n%s" % (path, request_id, len(BODY), BODY))
        out = b""
        while data := sock.recv(65536):
            out += data
    head, _, body = out.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        body = b"".join(body.split(b"\r\n")[1::2])
    return int(head.split(b" ")[1]), json.loads(body)


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


@pytest.fixture(scope="module")
def render_address() -> Iterator[tuple[str, int]]:
    with spawned_serve("--enable-request-id-headers") as url:
        yield _address(url)


@pytest.fixture(scope="module")
def drive_address(tmp_path_factory) -> Iterator[tuple[str, int]]:
    from reference_engine.testing import EngineProcess
    from render_service.driver.app import create_app
    from render_service.driver.config import DriverConfig
    from render_service.driver.flow import Driver
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import load_bundle

    script = tmp_path_factory.mktemp("engine") / "script.json"
    script.write_text(json.dumps({"model": "scripted", "responses": [{"token_ids": [28, 2]}]}))
    with EngineProcess("--scripted", str(script), role="both") as engine:
        driver = Driver(DriverConfig(prefill=(engine.url,), decode=(engine.url,), serve=ServeConfig()),
                        load_bundle(ServeConfig()))
        with serve_app(create_app(driver), port=free_port()) as url:
            yield _address(url)


@pytest.mark.parametrize("request_id", ["é-ü-1".encode(), "id-\u65e5\u672c".encode(), b"id-\xff"], ids=["latin", "cjk", "not-utf8"])
def test_a_non_ascii_request_id_is_refused_on_render(render_address, request_id):
    status, answer = _post(render_address, RENDER, request_id)
    assert status == 400 and answer["error"]["param"] == "X-Request-Id", answer


@pytest.mark.parametrize("request_id", ["é-ü-1".encode(), b"id-\xff"], ids=["latin", "not-utf8"])
def test_a_non_ascii_request_id_is_refused_on_drive(drive_address, request_id):
    status, answer = _post(drive_address, b"/v1/chat/completions", request_id)
    assert status == 400 and answer["error"]["param"] == "X-Request-Id", answer


@pytest.mark.parametrize("path,address", [(RENDER, "render_address"), (b"/v1/chat/completions", "drive_address")])
def test_an_ascii_request_id_comes_back_exactly(request, path, address):
    request_id = b"Req_42.a-b~c:d/e=f+g"
    status, answer = _post(request.getfixturevalue(address), path, request_id)
    assert status == 200 and answer["id" if path != RENDER else "request_id"] == "chatcmpl-" + request_id.decode(), answer
