"""The connection layer (render_service.http.connections) against unusual but legal clients:
probes with bodies or HTTP/1.0, heads at the 64 KiB bound, a request head behind a body in
one packet, HEAD answers racing a probe. Real `render-service serve` on loopback, raw sockets;
each test failed before its fix.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from typing import Iterator

import pytest

from test_hostile import spawned_serve

BODY = b'{"model":null,"messages":[{"role":"user","content":"hi"}]}'


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    """A server whose keep-alive deadline (30 s) is far longer than any wait below: a
    connection closed within seconds was closed on purpose."""
    with spawned_serve("--timeout-keep-alive", "30", "--max-body-bytes", str(1 << 20)) as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def _read_all(sock: socket.socket, seconds: float) -> tuple[bytes, bool]:
    """Everything the server sends within ``seconds``, and whether it closed the connection."""
    sock.settimeout(0.2)
    out, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        if not data:
            return out, True
        out += data
    return out, False


def _post(body: bytes = BODY, path: bytes = b"/v1/chat/completions/render") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (path, len(body)) + body)


@pytest.mark.parametrize("head,body", [
    (b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 36\r\n\r\n", b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", b"0\r\n\r\n"),
], ids=["content-length", "chunked"])
def test_a_probe_with_a_body_keeps_its_framing(server, head, body):
    """The door answered ``GET /health`` from its head alone, so a body sent after it was
    parsed as the next request: a smuggled ``GET /v1/models`` was answered, a chunked
    terminator got 400. A probe with a body is uvicorn's to parse."""
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(head)
        time.sleep(0.3)  # the body in its own packet, after the door has seen the head
        sock.sendall(body)
        out, _ = _read_all(sock, 2)
    assert out.count(b"HTTP/1.1 ") == 1 and out.startswith(b"HTTP/1.1 200"), out[:400]


def test_an_http_1_0_probe_is_answered_and_closed(server):
    """An HTTP/1.0 client without keep-alive reads to the end of the connection; the door's
    probe answer kept it open until the keep-alive deadline (uvicorn closes it)."""
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        out, closed = _read_all(sock, 5)
    assert out.startswith(b"HTTP/1.1 200") and closed, (out, closed)


@pytest.mark.parametrize("size,status", [(65536, b"200"), (65537, b"431")])
@pytest.mark.parametrize("split", [0, 2], ids=["one-write", "last-crlf-apart"])
def test_the_head_bound_is_exact_and_independent_of_packets(server, size, status, split):
    """A head of exactly 64 KiB is served and one byte more is a 431, however it is cut into
    packets (the bound counted the parsed pieces, missing the request line's bytes, in one
    packet, and the raw bytes in several)."""
    base = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: "
    head = base + b"a" * (size - len(base) - 4) + b"\r\n\r\n"
    assert len(head) == size
    with socket.create_connection(server, timeout=10) as sock:
        for piece in ([head] if not split else [head[:-split], head[-split:]]):
            sock.sendall(piece)
            time.sleep(0.2)
        out, _ = _read_all(sock, 2)
    assert out.startswith(b"HTTP/1.1 " + status), out[:200]


def test_a_head_behind_a_body_in_one_packet_is_not_counted_with_the_body(server):
    """The head bound counted every byte of the packet a head began in: a 70 KB body with the
    next request's first bytes behind it was a 431 (and the POST's answer was lost)."""
    body = BODY + b" " * 70_000  # JSON's whitespace: a big body, a short prompt
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(_post(body) + b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.3)
        sock.sendall(b"\r\n")
        out, _ = _read_all(sock, 3)
    assert out.startswith(b"HTTP/1.1 200") and out.count(b"HTTP/1.1 200") == 2, out[:300]


def test_a_head_answer_is_never_overtaken_by_a_probe(server):
    """A HEAD response's head was held for the loop's next turn (no body write joins it); a
    probe arriving in between was answered by the door first, so the two answers crossed.
    HEAD /metrics does its work in one step of the loop, which opens the window wide."""
    crossed = 0
    for i in range(40):
        with socket.create_connection(server, timeout=10) as sock:
            sock.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep((i % 8) * 0.0005)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            out = b""
            sock.settimeout(5)
            while out.count(b"\r\n\r\n") < 2:
                data = sock.recv(65536)
                if not data:
                    break
                out += data
        crossed += not out.startswith(b"HTTP/1.1 200 OK\r\ndate:")  # the door's answer has no date
    assert crossed == 0, f"{crossed} of 40 HEAD answers came after the probe's"


def test_a_client_that_leaves_before_its_answer_leaves_no_error():
    """uvloop raises on a write to a transport it has closed (asyncio's drop it), and a client
    gone between the close and ``connection_lost`` made the answer's write raise: two
    tracebacks ("unhandled error", "Exception in ASGI application") per such client, at ERROR.
    Its answer is dropped instead."""
    import json
    import struct

    from test_hostile import spawned_serve_process

    body = json.dumps({"model": None, "messages": [{"role": "user", "content": "word " * 6000}]}).encode()
    with spawned_serve_process() as (proc, url):
        host, port = url.removeprefix("http://").split(":")
        for _ in range(12):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(_post(body) * 2)  # rendered in the pool: the answer comes in a later turn of the loop
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset
        time.sleep(2)
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        proc.terminate()
        log = proc.communicate(timeout=30)[1].decode(errors="replace")
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize("bad", [b"BAD\x01 / HTTP/1.1\r\n\r\n",
                                 b"GET /v1/models HTTP/1.1\r\nX-Pad: " + b"a" * (70 << 10)], ids=["invalid", "head-too-long"])
def test_requests_before_a_refused_one_are_answered_first(server, bad):
    """uvicorn's httptools protocol answers a request it cannot parse with 400 and closes at
    once, so valid requests pipelined before it lost their answers (h11 answered them).
    They are answered, in order, then the 400 (or 431)."""
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(_post() + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + bad)
        out, closed = _read_all(sock, 5)
    assert out.startswith(b"HTTP/1.1 200") and closed, out[:300]
    assert out.count(b"HTTP/1.1 200 OK") == 2 and out.rstrip().count(b"HTTP/1.1 4") == 1, out[-600:]
    assert out.index(b"HTTP/1.1 4") > out.rindex(b"HTTP/1.1 200"), out[-600:]


def test_a_body_refused_mid_way_is_answered_at_once(server):
    """A chunked body whose framing breaks is the request's own error: 400 at once (its
    handler gets the disconnect), not after a wait for the rest of a body that never comes."""
    head = (b"POST /v1/chat/completions/render HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(head + b"5\r\n{\"mod\r\n")
        time.sleep(0.3)
        sock.sendall(b"zz\r\n")
        started = time.monotonic()
        out, closed = _read_all(sock, 10)
    assert out.startswith(b"HTTP/1.1 400") and closed and time.monotonic() - started < 5, out[:200]


def test_pipelined_requests_past_the_queue_bound_get_503_after_the_others():
    """uvicorn queues every request parsed from a read behind the one being answered: a
    client that pipelines 256 KiB of small GETs and reads nothing made ~7,000 queued requests
    (~9 MB) per connection. Past `MAX_PIPELINED` the next one is refused (503, after the
    answers before it) and nothing more is read."""
    from render_service.http.connections import MAX_PIPELINED

    with spawned_serve("--timeout-keep-alive", "30") as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * (MAX_PIPELINED + 50))
            out, closed = _read_all(sock, 10)
    answered = out.count(b"HTTP/1.1 200 OK")
    assert MAX_PIPELINED <= answered <= MAX_PIPELINED + 1 and closed, (answered, closed)
    assert out.count(b"HTTP/1.1 503") == 1 and out.rindex(b"HTTP/1.1 503") > out.rindex(b"HTTP/1.1 200"), out[-400:]


def test_a_pipe_whose_framing_breaks_ends_its_stream_with_an_error_event(server):
    """A pipe's answer streams while its body still arrives: a chunk framing error then wrote
    uvicorn's raw ``HTTP/1.1 400`` into the middle of the SSE answer (and no terminating
    chunk, no ``[DONE]``). The body ends there; the stream ends as a pipe whose engine stopped
    early does: an error event, ``[DONE]``, the end of the chunked answer, and the close."""
    header = b'{"prompt_token_ids":[1,2],"chat_request":{"messages":[]}}\n'
    event = b'data: {"request_id":"p","choices":[{"index":0,"token_ids":[504],"finish_reason":null}]}\n\n'
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions/derender/pipe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(header + event) + header + event + b"\r\n")
        time.sleep(0.3)
        sock.sendall(b"zz\r\nxx\r\n")
        out, closed = _read_all(sock, 5)
    assert out.startswith(b"HTTP/1.1 200") and out.count(b"HTTP/1.1 ") == 1, out[-400:]
    assert b'"error"' in out and b"data: [DONE]" in out and out.endswith(b"0\r\n\r\n") and closed, out[-400:]


def test_an_unparsable_request_is_answered_in_the_api_error_shape(server):
    """llhttp's refusals were uvicorn's plain-text ``Invalid HTTP request received.``; every
    other error of this server is JSON in the OpenAI shape."""
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions/render HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
        out, closed = _read_all(sock, 5)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head and closed, out[:300]
    assert json.loads(body)["error"]["type"] == "BadRequestError"


def test_a_probe_over_the_head_bound_is_431_even_in_one_read(server):
    """The door answered ``GET /health`` from one read before the head bound was checked: a
    66-100 KB probe head got 200."""
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(head)
        out, _ = _read_all(sock, 3)
    assert out.startswith(b"HTTP/1.1 431"), out[:200]


# -- last session's leftovers (each failed before its fix) --------------------------------

def _chunked_post(body: bytes = BODY, path: bytes = b"/v1/chat/completions/render", coding: bytes = b"chunked") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: %s\r\n\r\n"
            % (path, coding) + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")


BIG_BODY = json.dumps({"model": None, "messages": [{"role": "user", "content": "word " * 6000}]}).encode()


@pytest.mark.parametrize("request_bytes", [_chunked_post(), _post(BIG_BODY), _post() + _post(BIG_BODY)],
                         ids=["chunked", "rendered-in-the-pool", "pipelined"])
def test_a_client_that_half_closes_after_its_request_gets_its_answers(server, request_bytes):
    """An HTTP/1.1 client may shut its sending side once its request is out (``shutdown(SHUT_WR)``);
    uvicorn (and vLLM 0.33) took the EOF for a disconnect and dropped every answer not yet written.
    The answers come (after a ``100 Continue``: see the next tests), then the connection closes."""
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(request_bytes)
        sock.shutdown(socket.SHUT_WR)
        out, closed = _read_all(sock, 10)
    assert out.count(b"HTTP/1.1 200 OK") == request_bytes.count(b"POST ") and closed, out[:300]


def test_a_half_close_inside_a_request_closes_the_connection(server):
    """A request cut by the client's EOF can never complete: the connection closes at once
    (its handler gets the disconnect), as before."""
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(_post()[:-5])
        sock.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        out, closed = _read_all(sock, 5)
    assert out == b"" and closed and time.monotonic() - started < 3, out[:300]


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"deflate, chunked", b"identity, chunked"])
def test_a_transfer_coding_other_than_chunked_is_refused(server, coding):
    """llhttp accepts ``Transfer-Encoding: gzip, chunked`` and hands over the chunked body still
    gzipped; uvicorn (and vLLM 0.33) then parsed the compressed bytes as if they were the body
    (a plain-JSON body sent so rendered as if the header were absent). Refused: 400 in the API's
    error shape, naming the header, and the connection closes (its body is not read)."""
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(_chunked_post(coding=coding))
        out, closed = _read_all(sock, 5)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and closed, out[:300]
    error = json.loads(body)["error"]
    assert error["type"] == "BadRequestError" and "Transfer-Encoding" in error["message"], error


def test_a_chunked_body_is_still_served(server):
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(_chunked_post(coding=b"Chunked"))
        out, _ = _read_all(sock, 3)
    assert out.startswith(b"HTTP/1.1 200"), out[:300]


def test_a_client_that_never_reads_its_answer_is_dropped_and_others_are_served():
    """A client that asks for a large answer and never reads it held its connection, and the
    answer's bytes in the server's buffer, with no deadline (uvicorn waits for the buffer to
    drain for ever). Once the buffer is past its high-water mark the client has
    ``--body-read-timeout`` seconds to read; past it the connection is reset. Another client is
    served meanwhile."""
    body = json.dumps({"model": None, "prompt": ["1" * 8000] * 400, "max_tokens": 4}).encode()
    # ~10 MB of token ids: past what the kernel buffers for a socket (4 MB at most by default)
    with spawned_serve("--timeout-keep-alive", "60", "--body-read-timeout", "2") as url:
        host, port = url.removeprefix("http://").split(":")
        hog = socket.socket()
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little for it
        hog.connect((host, int(port)))
        with hog:
            hog.sendall(_post(body, b"/v1/completions/render"))
            started, reset = time.monotonic(), False
            while not reset and time.monotonic() - started < 40:
                with socket.create_connection((host, int(port)), timeout=10) as other:  # served meanwhile
                    other.sendall(_post())
                    out, _ = _read_all(other, 0.5)
                    assert out.startswith(b"HTTP/1.1 200"), out[:200]
                reset = hog.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNRESET  # reads nothing
    assert reset, "the connection of a client that reads nothing was kept for 40 s"



def test_a_client_that_reads_its_large_answer_slowly_gets_all_of_it():
    """A client on a slow link reads a large answer (an image render's ~6 MB) for longer than
    ``--body-read-timeout``: the answer sits past the high-water mark all that time, yet the
    client reads. It was reset mid-answer at the timeout; a connection is reset only when a
    period passes with less read than ``--body-min-rate`` allows."""
    body = json.dumps({"model": None, "prompt": ["1" * 8000] * 400, "max_tokens": 4}).encode()
    with spawned_serve("--timeout-keep-alive", "60", "--body-read-timeout", "1") as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.socket() as reader:
            reader.connect((host, int(port)))
            reader.settimeout(30)
            reader.sendall(_post(body, b"/v1/completions/render"))
            out, started = b"", time.monotonic()
            while time.monotonic() - started < 60:
                try:
                    data = reader.recv(65536)
                except ConnectionResetError:
                    break
                if not data:
                    break
                out += data
                head, _, rest = out.partition(b"\r\n\r\n")
                length = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
                if length and len(rest) >= int(length[0].split(b":")[1]):
                    break
                time.sleep(0.02)  # ~3 MB/s at most: the answer takes a few periods to read
    assert out.startswith(b"HTTP/1.1 200"), out[:200]
    assert len(rest) == int(length[0].split(b":")[1]) and time.monotonic() - started > 2, (len(rest), time.monotonic() - started)

# -- fresh probes (each failed before its fix) ------------------------------------------------

def _chunked_with_trailers(trailers: bytes) -> bytes:
    return (b"POST /v1/chat/completions/render HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n" + trailers + b"\r\n")


def test_trailers_past_the_head_bound_are_refused(server):
    """A chunked body's trailer fields went through uvicorn's header callback into the request's
    header list, with no bound (the head bound ends with the head, --max-body-bytes counts only
    the body): 300 MB of trailers grew the server by ~340 MB, then the request was answered.
    Trailers count against the head bound (431 past it) and are dropped, as ASGI has no place
    for them."""
    trailer = b"X-T: " + b"a" * 1000 + b"\r\n"
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(_chunked_with_trailers(trailer * 100))  # ~100 KB
        out, closed = _read_all(sock, 5)
    assert out.startswith(b"HTTP/1.1 431") and closed, out[:300]


def test_small_trailers_are_accepted_and_not_taken_for_headers(server):
    """A trailer is not a header: a trailing ``Content-Type`` or ``X-Request-Id`` changes nothing."""
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(_chunked_with_trailers(b"X-Request-Id: from-the-trailer\r\nX-Checksum: 1\r\n"))
        out, _ = _read_all(sock, 3)
    assert out.startswith(b"HTTP/1.1 200") and b"from-the-trailer" not in out, out[:400]


@pytest.mark.parametrize("leave", ["close", "half-close"])
def test_a_client_that_closes_while_its_template_renders_stops_it(leave):
    """A client that closes its socket sends the same FIN as one that half-closes; answering a
    half-closed client must not keep a render going for one that is gone (issue 14 §1: the
    template sandbox kills the worker of a client that left). With ``half-close`` the client
    is still there but reads nothing more after its FIN either: the work goes on, and its
    answer comes."""
    from conftest import serve_app
    from render_service.model import template_sandbox
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app
    from test_hostile import LOOPS

    app, _, _ = build_app(ServeConfig(trust_request_chat_template=True))
    sandbox = template_sandbox.shared_sandbox()
    limits = sandbox.limits
    sandbox.limits = template_sandbox.TemplateLimits(timeout_s=60 if leave == "close" else 3, workers=limits.workers)
    try:
        with serve_app(app, http="render_service.http.connections:HardenedProtocol") as url:
            host, port = url.removeprefix("http://").split(":")
            body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "chat_template": LOOPS}).encode()
            killed = sandbox.killed
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(_post(body))
            time.sleep(0.5)  # the render has started in the pool
            if leave == "close":
                sock.close()
                deadline = time.monotonic() + 20
                while sandbox.killed == killed and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert sandbox.killed > killed, "the template kept running after its client left"
            else:
                sock.shutdown(socket.SHUT_WR)
                out, closed = _read_all(sock, 15)  # the 3 s template budget runs out: a 400 comes
                sock.close()
                assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 4") and closed, out[:300]
    finally:
        sandbox.limits = limits
        sandbox.close()
