"""Upstreams: which instance gets a request, how a call is made, how a failure is named.

`Pool` orders the instances of one hop for a request: with a conversation key by
rendezvous hashing (the same key lands on the same instance while it is up, and only the
keys of an instance that leaves move), otherwise least-busy with a round-robin tie-break.
The caller walks the order and moves on only when an instance could not be *connected*
to — the request never left, so nothing can be duplicated.

Every failure becomes a `HopError`, an `OpenAIError` whose message starts with the hop
(``prefill``, ``decode``, ``render``, ``derender``): connect failures 503, silence past the
timeout 504, a broken connection or an upstream 5xx 502 (see `error_from_status` for 4xx).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import select
import socket
import urllib.request
from typing import Any, AsyncIterator, Iterator, Sequence

import httpcore
import httpx
import orjson

from ..errors import OpenAIError
from ..wire.sse import SSEReader

_PASS_THROUGH = (400, 413, 422, 429)  # the client's request was refused: say so with the same status


class HopError(OpenAIError):
    """A hop failed. ``unreachable``: the request was never sent (connect failure).
    ``answered``: the upstream finished the request itself (it sent a complete error), so
    there is nothing left to abort there."""

    def __init__(self, hop: str, status: int, message: str, *, unreachable: bool = False,
                 answered: bool = False, param: str | None = None, type: str | None = None) -> None:
        super().__init__(status, message, param=param, type=type)
        self.hop = hop
        self.unreachable = unreachable
        self.answered = answered


def error_from_exception(hop: str, url: str, exc: httpx.HTTPError) -> HopError:
    """httpx transport error → `HopError` (503 connect, 504 timeout, 502 otherwise)."""
    detail = str(exc) or type(exc).__name__
    engine = hop in ("prefill", "decode")
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        hint = (" Nothing accepts connections there: if the engine was running, its process has exited (its log or "
                "exit status names the signal, e.g. SIGSEGV).") if engine else ""
        return HopError(hop, 503, f"{hop} hop failed: cannot connect to {url} ({detail}).{hint}", unreachable=True)
    if isinstance(exc, httpx.TimeoutException):
        return HopError(hop, 504, f"{hop} hop failed: {url} did not answer in time ({type(exc).__name__}).")
    hint = (" An engine process that dies mid-request (a crash such as SIGSEGV) looks like this: check its log and "
            "exit status.") if engine and isinstance(exc, httpx.RemoteProtocolError) else ""
    return HopError(hop, 502, f"{hop} hop failed: the connection to {url} broke ({type(exc).__name__}: {detail}).{hint}")


def upstream_message(content: bytes) -> tuple[str, dict]:
    """The ``error.message`` of an OpenAI-shaped error body (or the raw text), and the error dict."""
    try:
        err = orjson.loads(content).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        err = None
    if isinstance(err, dict):
        return str(err.get("message", "")), err
    return content[:300].decode(errors="replace").strip() or "(empty body)", {}


def error_from_status(hop: str, url: str, status: int, content: bytes) -> HopError:
    """An upstream answered ``status`` ≠ 200 → `HopError`. A render 4xx is the client's own
    error and is passed on verbatim (message, param, type); an engine 400/413/422/429 keeps
    its status (the request was refused); a derender 4xx is the driver's or the engine's
    fault, so 502 like any 5xx."""
    message, err = upstream_message(content)
    if hop == "render" and 400 <= status < 500:
        return HopError(hop, status, message, answered=True, param=err.get("param"), type=err.get("type"))
    if hop in ("prefill", "decode") and status in _PASS_THROUGH:
        return HopError(hop, status, f"{hop} engine at {url} refused the request: {message}", answered=True)
    return HopError(hop, 503 if status == 503 else 502, f"{hop} hop failed: {url} answered {status}: {message}",
                    answered=True)


def error_from_event(hop: str, url: str, err: Any) -> HopError:
    """An ``{"error": {...}}`` event inside an upstream SSE stream → 502 `HopError`."""
    message = err.get("message", "") if isinstance(err, dict) else str(err)
    code = err.get("code") if isinstance(err, dict) else None
    return HopError(hop, 502, f"{hop} hop failed: {url} reported an error ({code}): {message}", answered=True)


class Pool:
    """The instances of one hop and how busy each is (requests in flight through this driver)."""

    def __init__(self, hop: str, urls: Sequence[str]) -> None:
        if not urls:
            raise ValueError(f"{hop}: no upstream URLs")
        self.hop = hop
        self.urls = list(dict.fromkeys(urls))
        self.busy = dict.fromkeys(self.urls, 0)
        self._turn = itertools.count()

    def order(self, key: str | None = None) -> list[str]:
        """Instances to try, best first. ``key`` (a conversation id) → rendezvous order."""
        if key is not None:
            return sorted(self.urls, key=lambda u: _score(key, u), reverse=True)
        start = next(self._turn) % len(self.urls)
        rotated = self.urls[start:] + self.urls[:start]
        return sorted(rotated, key=lambda u: self.busy[u])  # stable: ties keep the rotation

    @contextlib.contextmanager
    def use(self, url: str) -> Iterator[None]:
        """Count a request in flight on ``url`` for the duration of the block."""
        self.busy[url] += 1
        try:
            yield
        finally:
            self.busy[url] -= 1


def _score(key: str, url: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\0{url}".encode(), digest_size=8).digest(), "big")


async def post_json(client: httpx.AsyncClient, hop: str, url: str, path: str, payload: Any,
                    headers: dict[str, str] | None = None) -> Any:
    """POST ``payload`` as JSON to ``url + path``; the decoded 200 body.

    Raises:
        HopError: see the module docstring; a 200 that is not JSON is a 502.
    """
    try:
        r = await client.post(url + path, content=orjson.dumps(payload),
                              headers={"content-type": "application/json", **(headers or {})})
    except httpx.HTTPError as exc:
        raise error_from_exception(hop, url, exc) from None
    if r.status_code != 200:
        raise error_from_status(hop, url, r.status_code, r.content)
    try:
        return orjson.loads(r.content)
    except orjson.JSONDecodeError:
        raise HopError(hop, 502, f"{hop} hop failed: {url}{path} answered 200 with a body that is not JSON.",
                       answered=True) from None


async def sse_data(response: httpx.Response) -> AsyncIterator[bytes]:
    """The ``data`` payloads of an SSE response body, one per event (`wire.sse.SSEReader`).

    Raises:
        SSEError: a line longer than the reader's limit.
    """
    reader = SSEReader()
    async for chunk in response.aiter_bytes():
        for payload in reader.feed(chunk):
            yield payload
    for payload in reader.close():
        yield payload


# -- the HTTP client's plain-TCP network layer ----------------------------------------------

_FLOW_CONTROL_BYTES = 1 << 16


class _TCPStream(httpcore.AsyncNetworkStream):
    """One kept-alive TCP connection to an upstream, on asyncio streams.

    httpcore writes a request's head and its body in two calls; on loopback each write is a
    send() that also runs the receiver's TCP path. Writes are held until the response is
    read, so a request leaves in one writev.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer, self._held = reader, writer, []

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            if self._held:
                self._writer.writelines(self._held)
                self._held = []
                if self._writer.transport.get_write_buffer_size() > _FLOW_CONTROL_BYTES:
                    await self._writer.drain()
            if timeout is None:
                return await self._reader.read(max_bytes)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout("timed out") from None
        except (OSError, RuntimeError) as exc:  # reset, or uvloop's write on a closed handle
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._held.append(buffer)

    async def aclose(self) -> None:
        self._held = []
        self._writer.close()

    def get_extra_info(self, info: str) -> Any:
        sock = self._writer.get_extra_info("socket")
        if info == "is_readable":  # an idle kept-alive connection the server has closed
            return sock is None or bool(select.select([sock], [], [], 0)[0])
        if info == "socket":
            return sock
        if info in ("client_addr", "server_addr"):
            return self._writer.get_extra_info("sockname" if info == "client_addr" else "peername")
        return None


class _TCPBackend(httpcore.AsyncNetworkBackend):
    """Plain TCP for `_TCPStream` (TLS and proxies stay on httpx's own transport)."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None, limit=1 << 20)
        except TimeoutError:
            raise httpcore.ConnectTimeout("timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _TCPStream(reader, writer)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not supported here")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def upstream_client(timeout: httpx.Timeout, limits: httpx.Limits) -> httpx.AsyncClient:
    """The driver's HTTP client for engines and a render server: httpx (its errors, timeouts
    and pool), with plain-HTTP connections on `_TCPBackend` (one write per request, no anyio
    layer: 0.74-0.79x the client CPU of an engine call, measured in-process against a
    scripted engine) unless the environment names an HTTP proxy."""
    if "http" in urllib.request.getproxies():
        return httpx.AsyncClient(timeout=timeout, limits=limits)
    transport = httpx.AsyncHTTPTransport(limits=limits)
    # httpx builds its httpcore pool with no way to name the network backend: the same pool, ours
    transport._pool = httpcore.AsyncConnectionPool(
        max_connections=limits.max_connections, max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry, network_backend=_TCPBackend())
    return httpx.AsyncClient(timeout=timeout, limits=limits, mounts={"http://": transport})
