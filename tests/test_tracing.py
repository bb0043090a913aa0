"""``--otlp-traces-endpoint`` (issue 26): a real server exports one trace per request to an
OTLP/HTTP receiver on loopback, continuing the caller's ``traceparent``, with a span per
pipeline step; a server without the flag never imports OpenTelemetry."""

from __future__ import annotations

import contextlib
import http.server
import subprocess
import sys
import threading
import time

import httpx
import pytest

from conftest import free_port

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402


class _Receiver(http.server.BaseHTTPRequestHandler):
    spans: list = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                _Receiver.spans.extend(scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def _receiver():
    _Receiver.spans = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Receiver.spans
    finally:
        server.shutdown()


@contextlib.contextmanager
def _server(*argv: str):
    from cli_server import serve

    with serve(*argv) as (client, _):
        yield client


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def test_each_request_is_a_trace_continuing_the_callers_traceparent():
    with _receiver() as (endpoint, spans), _server("--otlp-traces-endpoint", endpoint) as client:
        headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
        chat = client.post("/v1/chat/completions/render", headers=headers,
                           json={"messages": [{"role": "user", "content": "hi"}]})
        cmpl = client.post("/v1/completions/render", json={"prompt": "hi"})
        assert chat.status_code == 200 and cmpl.status_code == 200
        deadline = time.monotonic() + 20
        while len({s.trace_id for s in spans if s.name.startswith("POST ")}) < 2:
            assert time.monotonic() < deadline, f"spans received: {[s.name for s in spans]}"
            time.sleep(0.1)
    ours = [s for s in spans if s.trace_id.hex() == TRACE_ID]
    server = next(s for s in ours if s.name == "POST /v1/chat/completions/render")
    assert server.parent_span_id.hex() == PARENT_ID and server.kind == server.SPAN_KIND_SERVER
    children = {s.name for s in ours if s.parent_span_id == server.span_id}
    assert {"parse", "media", "template", "tokenize", "serialize"} <= children
    status = {a.key: a.value.int_value for a in server.attributes}["http.response.status_code"]
    assert status == 200
    fresh = next(s for s in spans if s.name == "POST /v1/completions/render")
    assert fresh.trace_id.hex() != TRACE_ID and not fresh.parent_span_id  # no traceparent: a new trace
    assert {"parse", "tokenize", "serialize"} <= {s.name for s in spans if s.parent_span_id == fresh.span_id}


def test_a_server_without_the_flag_never_imports_opentelemetry():
    code = ("import sys\nfrom render_service.config.serve import ServeConfig\nfrom render_service.serve.server import build_app\n"
            "from starlette.testclient import TestClient\n"
            "app, _, _ = build_app(ServeConfig())\n"
            "with TestClient(app) as c:\n"
            "    assert c.post('/v1/chat/completions/render', json={'messages': [{'role': 'user', 'content': 'hi'}]})"
            ".status_code == 200\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_bad_endpoint_stops_start_up(capsys):
    from render_service.serve import cli

    assert cli.main(["serve", "--otlp-traces-endpoint", "ftp://x", "--port", str(free_port())]) == 2
    assert "--otlp-traces-endpoint ftp://x" in capsys.readouterr().err
