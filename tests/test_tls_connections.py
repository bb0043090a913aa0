"""TLS connections (``serve --ssl-certfile/--ssl-keyfile``) under the same connection bounds as
plain HTTP: a connection that never completes its handshake is closed at the head deadline
(``--timeout-keep-alive``) and counts toward ``--max-connections`` while it shakes hands.

uvicorn hands TLS to the event loop (``create_server(ssl=...)``): a connection reaches the HTTP
protocol only once its handshake is done, so a client that connects and sends nothing (or
half a ClientHello) was held for asyncio's ``ssl_handshake_timeout`` (60 s), outside every
bound, and any number of them were free (vLLM 0.33 the same). Real `render-service serve` on
loopback with a throwaway PKI (tests/certs.py).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from typing import Iterator

import pytest

from test_hostile import spawned_serve_process


@contextlib.contextmanager
def tls_serve(tmp_path, *flags: str) -> Iterator[tuple[tuple[str, int], ssl.SSLContext]]:
    """`render-service serve` with TLS as a child process, healthy; yields its address and a
    client context that trusts its CA."""
    from certs import make_pki

    pki = make_pki(tmp_path)
    context = ssl.create_default_context(cafile=str(pki.ca))
    with spawned_serve_process("--ssl-certfile", str(pki.server_cert), "--ssl-keyfile", str(pki.server_key), *flags,
                               scheme="https", verify=context) as (_, url):
        host, port = url.removeprefix("https://").split(":")
        yield (host, int(port)), context


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _status(address: tuple[str, int], context: ssl.SSLContext, path: str = "/v1/models") -> int:
    with socket.create_connection(address, timeout=10) as raw, context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
        return int(tls.recv(4096).split(b" ")[1])


@pytest.mark.parametrize("sent", [b"", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"], ids=["nothing", "half-a-hello"])
def test_a_handshake_that_never_completes_is_closed_at_the_head_deadline(tmp_path, sent):
    with tls_serve(tmp_path, "--timeout-keep-alive", "2") as (address, context):
        with socket.create_connection(address, timeout=10) as sock:
            sock.sendall(sent)
            started = time.monotonic()
            closed = _closed_within(sock, 20)
        assert closed and time.monotonic() - started < 10, time.monotonic() - started
        assert _status(address, context) == 200


def test_connections_shaking_hands_count_toward_max_connections(tmp_path):
    """Two silent connections fill ``--max-connections 2``: a third client is past the cap (503,
    its probe still answered); once the deadline has closed them, it is served again. Handshakes
    that fail or complete leave no count behind."""
    with tls_serve(tmp_path, "--timeout-keep-alive", "5", "--max-connections", "2") as (address, context):
        silent = [socket.create_connection(address, timeout=10) for _ in range(2)]
        time.sleep(0.3)
        try:
            assert _status(address, context) == 503
            assert _status(address, context, "/health") == 200
        finally:
            for sock in silent:
                assert _closed_within(sock, 10)
                sock.close()
        for _ in range(3):  # failed handshakes: plain HTTP and garbage
            with socket.create_connection(address, timeout=10) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _closed_within(sock, 10)
        assert [_status(address, context) for _ in range(6)] == [200] * 6
