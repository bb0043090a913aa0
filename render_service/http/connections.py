"""Connection hygiene for uvicorn: TCP_NODELAY, request-head and body deadlines, a connection cap.

uvicorn (0.30-0.54) leaves gaps that a single client can use (issue 14 §3, §4; issue 25),
measured by ``bench/bench_servers.py``:

- A connection that never sends a byte, or trickles its headers, is never closed: the
  keep-alive timer starts only after a response, and any received byte cancels it.
- A request body has no deadline at all: 300 heads with ``Content-Length: 100000`` and then
  one body byte every 2 s held their requests open for as long as the trickle lasted.
- With ``--workers N`` the shared listening socket is made without ``proto=IPPROTO_TCP``, so
  asyncio never sets ``TCP_NODELAY`` on accepted sockets; a response written as head + body
  then waits for the client's delayed ACK (~40 ms each).
- ``limit_concurrency`` answers 503 only once a request arrives; idle connections past it
  still hold descriptors.

`HardenedProtocol` closes them in uvicorn's own protocol class for httptools (llhttp, the
parser uvicorn picks when it is installed, as in vLLM's ``uvicorn[standard]``; h11, pure Python,
was 19% of a small render's CPU), chosen with
``uvicorn.run(http="render_service.http.connections:HardenedProtocol")``, an import path so
every worker process uses it:

- every accepted TCP socket gets ``TCP_NODELAY``;
- a request head longer than `MAX_HEAD_BYTES` gets 431 and the connection is closed (llhttp
  sets no bound of its own; h11's was 16 KiB); a chunked body's trailers count with its head
  and are dropped (uvicorn put them, unbounded, into the request's headers);
- a ``Transfer-Encoding`` other than plain ``chunked`` (``gzip, chunked``) gets 400 (llhttp
  handed the body over still encoded);
- at most `MAX_PIPELINED` requests queue behind the one being answered (uvicorn's queue has
  no bound); a request refused by the parser (400, 431, or 503 past that bound) is answered
  after the requests before it, then the connection is closed (uvicorn answered it at once,
  and the earlier requests lost their answers);
- a connection has ``timeout_keep_alive`` seconds to deliver a complete request head, from
  its accept and again after every response (idle keep-alive and slow headers alike);
- a request body must arrive by ``body_timeout + bytes received / body_min_rate`` seconds
  after its head (Apache's ``mod_reqtimeout`` rule: a client that keeps sending at the
  minimum rate is never cut); past it, a request not yet answered gets 408 and the
  connection is closed. A response that has started (a pipe's stream) ends the deadline.
  The bounds come from the app (`BodyLimits` on ``app.state.body_limits``);
- a request answered before its body was read (400, 413) keeps its connection while the
  client goes on sending that body at the body's pace (at most `DRAIN_MAX_BYTES`), so a
  client that writes everything before it reads sees the answer, not a reset;
- a client that half-closes (``shutdown(SHUT_WR)``) after whole requests gets their answers,
  then the close (uvicorn took the EOF for a disconnect and dropped them);
- an answer left unread past the transport's high-water mark for the body timeout resets the
  connection (uvicorn waited for the buffer to drain for ever, holding the answer's bytes);
- with TLS (``app.state.tls``) the connection does the handshake itself, under the head
  deadline and counted toward the cap (the loop's own TLS held an unfinished one 60 s, uncounted);
- past ``limit_concurrency`` open connections, a new one gets ``503`` with ``Retry-After``
  and is closed (within `OVER_CAP_WAIT_S`) — unless its request is a probe (``GET /health``),
  answered and then closed: a liveness probe must not fail because the pod is busy;
- early answers (`EarlyAnswers`, ``app.state.early_answers``): a bare probe (``GET /health``, ``/ping``, no body;
  HTTP/1.0 closed after it) is answered from the connection itself, and a POST the
  admission refuses gets its 503 + ``Retry-After`` from the request line alone, before
  uvicorn parses it or a task is made for it (issue 25: under 1.3x load /health took 1.6 s
  and a 503 0.76 s, queued behind the app's work).
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .access_log import cheapen
from .drain import grace_before_cut
from .admission import Admission, refusal_bytes

_UNSET = object()
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST and drops unsent bytes
BUFFER_EXTENSION = "render_service.buffer_up_to"
"""ASGI scope extension: ``scope["extensions"][BUFFER_EXTENSION](nbytes | None)`` raises (or, with
None, restores) how much the connection's transport buffers before pausing the app
(`_HeadWithBody.buffer_up_to`; used by `multimodal.answer.PiecesResponse`)."""
DRAIN_MAX_BYTES = 64 << 20
"""Most body bytes read (and dropped) after a request was answered early, before closing."""
OVER_CAP_WAIT_S = 1.0
"""How long a connection past the cap may take to send a probe before its 503."""
PEER_CHECK_S = (0.05, 0.25, 1.0)
"""After a half-close, when to look for the client's reset: the first waits, then every last one."""
MAX_HEAD_BYTES = 64 << 10
"""Longest request head (request line and headers) accepted; longer ones get 431."""
MAX_PIPELINED = 64
"""Most requests queued on a connection behind the one being answered; the next one gets 503
once they are answered, and the connection is closed (uvicorn's own queue has no bound: one
256 KiB read of small pipelined GETs became ~9 MB of queued requests)."""


class _HeadWithBody:
    """The transport as a response cycle sees it: a response's head leaves with its body.

    uvicorn writes a response head and its body in two calls; on loopback each write is a
    send() that runs the receiver's TCP path too (a fifth of a small render's CPU was the
    two writes). The first write of a cycle (its head) is held until the next one joins it,
    or until the loop's next turn (a stream's head does not wait for its first event); a
    close sends what is held first. Later writes go straight through; a write after the
    transport closed is dropped.
    """

    __slots__ = ("_transport", "_held", "_spent", "_loop")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._held: bytes | None = None
        self._spent = False
        self._loop = loop

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None and not self._spent:
            self._spent = True
            self._held = data
            self._loop.call_soon(self.flush)
            return
        try:
            if held is None:
                self._transport.write(data)
            else:  # one writev (uvloop), not a copy of a body of up to megabytes behind the head
                self._held = None
                self._transport.writelines((held, data))
        except RuntimeError:  # uvloop's "the handler is closed": the client left before connection_lost ran
            if not self._transport.is_closing():
                raise  # (asyncio's transports drop a write after close; so do we)

    def buffer_up_to(self, nbytes: int | None) -> None:
        """Let the transport buffer up to ``nbytes`` before pausing the app's writes (None: the
        default, 64 KiB). For a body whose pieces are views of strings kept anyway (`PiecesResponse`:
        the processor cache's base64), buffering them costs no memory, and writing them without
        a drain between pieces costs less CPU (a 15 MB answer: ~0.85x the server's per request)."""
        try:
            self._transport.set_write_buffer_limits(high=nbytes)
        except RuntimeError:  # uvloop's "the handler is closed": the client left (as in `write`)
            if not self._transport.is_closing():
                raise

    def flush(self) -> None:
        """Send the held head now, if any."""
        if self._held is not None:
            data, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._transport.get_extra_info(name, default)


class _Refused(Exception):
    """Raised from llhttp's headers callback to stop parsing a request the connection refuses
    (its answer is `HardenedProtocol._parse_refusal`)."""


class _Trailers(list):
    """Where llhttp's header callback puts a chunked body's trailer fields once the head is
    complete (uvicorn appends them to ``self.headers``, which is the request's ``scope["headers"]``:
    a trailing ``X-Request-Id`` became the request's, and trailers had no bound). They are
    counted against `MAX_HEAD_BYTES` with the head and dropped (ASGI has no request trailers)."""

    __slots__ = ("protocol", "size")  # size: bytes of the request's head and trailers so far

    def append(self, field: tuple[bytes, bytes]) -> None:
        self.size += len(field[0]) + len(field[1]) + 4
        if self.size > MAX_HEAD_BYTES:
            self.protocol._refuse_in_parser(self.protocol._refuse_head)


@dataclass(frozen=True)
class EarlyAnswers:
    """What the connection answers by itself (``app.state.early_answers``): ``probes`` maps a GET
    path to its status (``/health``: 200, or 503 when the pool is wedged), ``admission``
    refuses a POST under overload before anything else is spent on it."""

    admission: Admission
    probes: dict[bytes, Callable[[], int]]


@dataclass(frozen=True)
class BodyLimits:
    """How long a request body may take: ``timeout`` seconds after the head, extended by one
    second per ``min_rate`` bytes received (``--body-read-timeout``, ``--body-min-rate``)."""

    timeout: float = 20.0
    min_rate: float = 500.0


def _app_state(app: object, name: str, default: object) -> object:
    """``app.state.<name>`` of the Starlette app inside uvicorn's wrappers (each keeps the
    next in ``.app``), else ``default``."""
    for _ in range(8):
        value = getattr(getattr(app, "state", None), name, None)
        if value is not None:
            return value
        app = getattr(app, "app", None)
        if app is None:
            break
    return default


_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([0-9]{1,12})[ \t]*\r\n", re.IGNORECASE)
_PROBE_LINE = re.compile(rb"GET (/[^ ?\r\n]*)(?:\?[^ \r\n]*)? HTTP/1\.([01])\r\n")
_HAS_BODY = re.compile(rb"\r\n(?:content-length|transfer-encoding)[ \t]*:", re.IGNORECASE)
_CLOSE = re.compile(rb"\r\nconnection:[^\r\n]*\bclose\b", re.IGNORECASE)


def _ssl_protocol_class(loop: asyncio.AbstractEventLoop) -> type:
    """The TLS layer ``loop.create_server(ssl=...)`` would use: uvloop's own, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        uvloop = None
    if uvloop is not None and isinstance(loop, uvloop.Loop):
        return uvloop.loop.SSLProtocol
    from asyncio.sslproto import SSLProtocol

    return SSLProtocol


def _whole_request(data: bytes) -> bool:
    """True when ``data`` is exactly one request: its head, a Content-Length body, nothing
    more, and no ``Connection: close`` or ``Transfer-Encoding``."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False
    head = data[:end + 2].lower()
    found = _CONTENT_LENGTH.findall(head)
    if len(found) != 1 or b"\r\ntransfer-encoding:" in head or _CLOSE.search(head) or b" http/1.0\r\n" in head:
        return False
    return len(data) == end + 4 + int(found[0])


class HardenedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with TCP_NODELAY, a head bound, head and body deadlines and a
    connection cap."""

    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _write_timer: asyncio.TimerHandle | None = None
    _write_left = 0  # the transport's buffered bytes when the write timer was armed
    _peer_timer: asyncio.TimerHandle | None = None  # after a half-close: is the client still there?
    _body_cycle: object = None
    _body_started = 0.0
    _body_received = 0
    _in_message = False  # llhttp is inside a request: between on_message_begin and on_message_complete
    _head_bytes = -1  # bytes of a request head still incomplete; -1 once the head is complete
    _head_began = False  # a request head began in the packet being read
    _other_bytes = 0  # bytes of the packet being read that belong to earlier requests (heads, bodies)
    _parse_refusal: Callable[[], None] | None = None  # the answer to a request refused in on_headers_complete
    _eof = False  # the client shut its sending side after whole requests: answer them, then close
    _over_cap = False  # accepted past --max-connections: only a probe is answered
    _refusal: Callable[[], None] | None = None  # a refused request's answer, due after the answers before it
    _tcp: asyncio.Transport | None = None  # the TCP transport while its TLS handshake runs
    _trailers: _Trailers | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self._tcp is None:  # a new TCP connection
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
            tls = self._tls()
            if tls is not None:
                self._shake_hands(transport, tls)
                return
        else:
            self._tcp = None  # its TLS handshake is done: ``transport`` is TLS over it
        super().connection_made(transport)
        cheapen(self.access_logger)
        if self.limit_concurrency is not None and len(self.connections) > self.limit_concurrency:
            # Past the cap: a probe is still answered (a liveness probe failing under load would
            # restart a busy pod); anything else, or nothing within OVER_CAP_WAIT_S, gets 503.
            self._over_cap = True
            self._head_timer = self.loop.call_later(min(OVER_CAP_WAIT_S, self.timeout_keep_alive), self._refuse_over_cap)
            return
        self._arm_head_deadline()

    # -- TLS: the handshake under the head deadline, counted toward the cap -----------

    def _tls(self) -> ssl.SSLContext | None:
        tls = self.config.__dict__.get("_tls", _UNSET)
        if tls is _UNSET:  # once per server: the app is the same for every connection
            tls = self.config._tls = _app_state(self.app, "tls", None)  # type: ignore[attr-defined]
        return tls  # type: ignore[return-value]

    def _shake_hands(self, tcp: asyncio.Transport, tls: ssl.SSLContext) -> None:
        """Put the event loop's TLS layer (its ``SSLProtocol``, as ``create_server(ssl=...)``
        does) between ``tcp`` and this protocol, with ``timeout_keep_alive`` seconds, the head
        deadline, for the handshake; `connection_made` runs again with the TLS transport once
        it is done. uvicorn's ``create_server(ssl=...)`` showed the protocol a connection only
        after its handshake: one that never finished it was held for 60 s (the loop's
        ``ssl_handshake_timeout``) and not counted toward ``--max-connections``; it counts here
        from its accept."""
        self.connections.add(self)
        self._tcp = tcp
        waiter = self.loop.create_future()
        waiter.add_done_callback(self._handshake_ended)
        layer = _ssl_protocol_class(self.loop)(self.loop, self, tls, waiter, server_side=True,
                                               ssl_handshake_timeout=float(self.timeout_keep_alive))
        tcp.set_protocol(layer)  # before the loop starts reading: the ClientHello is the layer's
        layer.connection_made(tcp)

    def _handshake_ended(self, waiter: asyncio.Future) -> None:
        if waiter.cancelled() or waiter.exception() is not None:  # failed, timed out, or the client left
            tcp, self._tcp = self._tcp, None
            self.connections.discard(self)
            if tcp is not None and not tcp.is_closing():
                tcp.abort()

    def _refuse_over_cap(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.write(refusal_bytes(503, "Too many open connections; retry later.", "/"))
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._over_cap:
            early = self._early_answers()
            if early is None or not self._answer_probe(early, data, close=True):
                self._refuse_over_cap()
            return
        if self._refusal is not None:
            return  # a request was refused: nothing after it is read
        cycle = self.cycle
        self._flush_held()
        if not self._in_message and not self.pipeline and (cycle is None or cycle.response_complete):
            early = self._early_answers()
            if early is not None and self._answer_early(early, data):
                return
        self._body_received += len(data)
        self._head_began, self._other_bytes = False, 0
        super().data_received(data)
        if self._head_bytes >= 0 and not self.transport.is_closing():  # a head still coming: bound its bytes
            # A head begun in this packet follows the bytes of the requests before it (the
            # complete head is measured exactly in on_headers_complete).
            self._head_bytes += len(data) - self._other_bytes if self._head_began else len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse_after_answers(self._refuse_head)
                return
        cycle = self.cycle
        if cycle is not None and cycle is not self._body_cycle and cycle.more_body and not cycle.response_complete:
            self._arm_body_deadline(cycle)

    # llhttp's callbacks: where a request is (the door, the head bound, the drain need it)

    def on_message_begin(self) -> None:
        self._in_message = True
        self._head_bytes = 0
        self._head_began = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._head_bytes = -1
        # The head's length in its usual form: "METHOD url HTTP/1.1\r\n", "name: value\r\n" each, "\r\n".
        size = len(self.url) + 14
        coding = None
        for k, v in self.headers:
            size += len(k) + len(v) + 4
            if k == b"transfer-encoding":
                coding = v if coding is None else coding + b", " + v
        if size > MAX_HEAD_BYTES - 32 and size + len(self.parser.get_method()) > MAX_HEAD_BYTES:  # methods are short
            self._refuse_in_parser(self._refuse_head)
        if coding is not None and coding.lower() != b"chunked":
            # llhttp takes "gzip, chunked" and hands over the chunked body still gzipped (uvicorn
            # then parses compressed bytes as the body): a coding we do not undo is refused
            self._refuse_in_parser(lambda: self._refuse(400, f"Transfer-Encoding {coding.decode('latin-1')!r} "
                                                             "is not supported: send the body chunked or with "
                                                             "Content-Length, uncompressed."))
        if len(self.pipeline) >= MAX_PIPELINED:  # refused (503) once the queued requests are answered
            self._refuse_in_parser(lambda: self._refuse(503, f"More than {MAX_PIPELINED} requests pipelined on "
                                                             "one connection; send the rest again on a new connection."))
        self._other_bytes += size + 3
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # a request to answer (not a WebSocket upgrade)
            trailers = self._trailers
            if trailers is None:  # one per connection, never holding anything
                trailers = self._trailers = _Trailers()
                trailers.protocol = self
            trailers.size = size
            self.headers = trailers  # the head is in scope["headers"]; what comes now is trailers
            cycle.transport = _HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]
            self.scope.setdefault("extensions", {})[BUFFER_EXTENSION] = cycle.transport.buffer_up_to

    def on_body(self, body: bytes) -> None:
        self._other_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_message = False
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request llhttp refused (a head over the bound: 431), after the
        answers to the requests before it on the connection (uvicorn's own closed the
        connection at once, and a valid request pipelined before a bad one lost its answer)."""
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete and cycle.more_body:
            # the body of a request whose answer is streaming (a pipe) broke: its body ends here
            # and the answer ends as the app ends it, then the connection closes (a second
            # response written into the first would corrupt it)
            cycle.keep_alive = False
            cycle.more_body = False
            cycle.message_event.set()
            return
        refuse = self._parse_refusal or (  # else llhttp's own: in the API's error shape, not uvicorn's plain text
            lambda: self._refuse(400, f"{msg} (the request could not be parsed as HTTP/1.1)"))
        self._refuse_after_answers(refuse)

    def _refuse_in_parser(self, refuse: Callable[[], None]) -> None:
        """Stop llhttp at this request; ``refuse`` answers it (after the answers before it)
        through uvicorn's ``send_400_response``. Nothing after it is read."""
        self._parse_refusal = refuse
        raise _Refused

    def _refuse_after_answers(self, refuse: Callable[[], None]) -> None:
        """Call ``refuse`` (it answers and closes) now, or, when the refused bytes came after
        whole requests not yet answered, once they are (`on_response_complete`). Refused
        inside a request's body, that request is cut at once, as uvicorn does."""
        cycle = self.cycle
        waiting = cycle is not None and not cycle.response_complete and not cycle.more_body
        if waiting and not self.transport.is_closing():
            self._refusal = refuse  # the refused bytes follow a whole request still being answered
        else:
            self._flush_held()
            refuse()

    def _flush_held(self) -> None:
        """Send a completed answer's held head (a HEAD answer: no body write joins it) before
        anything the connection writes itself."""
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and isinstance(cycle.transport, _HeadWithBody):
            cycle.transport.flush()

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` in the API's error shape and close the connection."""
        self.transport.write(refusal_bytes(status, message, "/"))
        self.transport.close()

    def _refuse_head(self) -> None:
        self._refuse(431, f"The request head is longer than {MAX_HEAD_BYTES} bytes.")

    def _early_answers(self) -> EarlyAnswers | None:
        early = self.config.__dict__.get("_early_answers", _UNSET)
        if early is _UNSET:  # once per server: the app is the same for every connection
            early = self.config._early_answers = _app_state(self.app, "early_answers", None)  # type: ignore[attr-defined]
        return early  # type: ignore[return-value]

    def _answer_probe(self, early: EarlyAnswers, data: bytes, close: bool = False) -> bool:
        """Answer ``data`` if it is exactly one bodiless probe request (``GET /health``); True
        if so. The connection is closed after it when ``close``, when the client asks, or for
        HTTP/1.0 (as uvicorn)."""
        if len(data) > MAX_HEAD_BYTES:  # a probe that long is refused by the head bound, not answered here
            return False
        line = _PROBE_LINE.match(data)
        if (line is None or line[1] not in early.probes or not data.endswith(b"\r\n\r\n")
                or data.count(b"\r\n\r\n") != 1 or _HAS_BODY.search(data)):
            return False  # not a bare probe: a body (its framing is uvicorn's to follow) or more than one request
        status = early.probes[line[1]]()
        closing = close or line[2] == b"0" or _CLOSE.search(data) is not None  # HTTP/1.0: closed, as uvicorn
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\n%s\r\n" % (
            status, b"OK" if status == 200 else b"Service Unavailable", b"connection: close\r\n" if closing else b""))
        if closing:
            self.transport.close()
        else:
            self._unset_keepalive_if_required()
            self._arm_head_deadline()
        return True

    def _answer_early(self, early: EarlyAnswers, data: bytes) -> bool:
        """Answer a new request from its first bytes, before uvicorn parses it or the app
        sees it: a probe (``GET /health``), or a POST the admission refuses (503; the
        connection is kept when the whole request is in ``data``, else closed). True when
        answered."""
        if self._answer_probe(early, data):
            return True
        # the request line's method and path, without copying the rest of the chunk (up to 256 KiB of body)
        sp = data.find(b" ")
        method = data[:sp] if sp >= 0 else data
        end = data.find(b" ", sp + 1) if sp >= 0 else -1
        path = (data[sp + 1:end] if end >= 0 else data[sp + 1:]) if sp >= 0 else b""
        path = path.split(b"?", 1)[0]
        if method == b"POST" and not path.endswith(b"/pipe") and early.admission.overloaded_at_the_door():
            early.admission.refused_at_the_door()
            whole = _whole_request(data)  # all of it here: keep the connection (no reconnect per 503)
            self.transport.write(refusal_bytes(503, "Server is at capacity; retry shortly.",
                                               path.decode("latin-1"), close=not whole))
            if whole:
                self._unset_keepalive_if_required()
                self._arm_head_deadline()
            else:
                self.transport.close()
            return True
        return False

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self._refusal is not None and not self.pipeline and self.cycle.response_complete:
            self._flush_held()
            self._refusal()
        elif self._eof and not self.pipeline and self.cycle.response_complete:
            self._flush_held()
            self.transport.close()  # the client's requests are all answered and it sends no more
        else:
            self._arm_head_deadline()

    def shutdown(self) -> None:
        """uvicorn is shutting down (SIGTERM): start the app's drain (``app.state.drain``), which
        ends its long-lived requests (pipes) properly before uvicorn's own cut."""
        if self._tcp is not None:  # still shaking hands: no request to finish
            self._tcp.abort()
            return
        drain = _app_state(self.app, "drain", None)
        timeout = self.config.timeout_graceful_shutdown
        if drain is not None and timeout is not None:
            drain.begin(grace_before_cut(timeout))
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._tcp is not None:  # lost during the TLS handshake (_handshake_ended ends it)
            return
        for timer in (self._head_timer, self._body_timer, self._write_timer, self._peer_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._write_timer = self._peer_timer = None
        self._trailers = None  # it points back here
        super().connection_lost(exc)

    def eof_received(self) -> bool | None:
        """The client shut its sending side (``shutdown(SHUT_WR)``), which HTTP/1.1 allows once its
        requests are out: whole requests not yet answered are answered, then the connection
        closes (uvicorn closed at once and dropped them). Inside a request, whose rest can never
        come, with nothing to answer, over TLS or HTTP/1.0, it closes now (False: the transport
        closes itself), as before.

        A client that closed its socket sends the same FIN, and its work must still stop
        (`cancel.ClientWatch`): only a write tells them apart (a closed socket answers it with a
        reset). Unless the answer has begun, ``100 Continue`` is sent (an HTTP/1.1 client must
        take a 1xx before any final answer); `_check_peer` then looks for the reset."""
        cycle = self.cycle
        waiting = bool(self.pipeline) or (cycle is not None and not cycle.response_complete)
        if (self._in_message or not waiting or self._over_cap or self.scheme == "https"
                or cycle.scope.get("http_version") == "1.0"):
            return False
        self._eof = True
        if not cycle.response_started:
            cycle.waiting_for_100_continue = False  # said here
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self._peer_timer = self.loop.call_later(PEER_CHECK_S[0], self._check_peer, 1)
        return True

    def _check_peer(self, attempt: int) -> None:
        """After a half-close: end the connection if the client's socket answered a write with
        a reset (it is gone: the request's work stops), else look again later."""
        self._peer_timer = None
        if self.transport.is_closing():
            return
        try:
            gone = self.transport.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0
        except (AttributeError, OSError):
            return
        if gone:
            self.transport.abort()
        else:
            self._peer_timer = self.loop.call_later(PEER_CHECK_S[min(attempt, len(PEER_CHECK_S) - 1)],
                                                    self._check_peer, attempt + 1)

    # -- the answers: a client that does not read them -----------------------------------

    def pause_writing(self) -> None:
        """The transport's buffer is past its high-water mark (the client reads slower than we
        write): the answer's next write waits (uvicorn), and the client has the body timeout
        (`BodyLimits`) to read it below the low-water mark, or at least ``min_rate`` bytes a
        second of it meanwhile (then it has another period: a slow link reading a 6 MB image
        answer), else the connection is dropped with what it holds. A client that sends
        requests and never reads their answers held its connection and the answers' bytes for
        ever."""
        super().pause_writing()
        if self._write_timer is None:
            self._arm_write_timer()

    def _arm_write_timer(self) -> None:
        self._write_left = self.transport.get_write_buffer_size()
        self._write_timer = self.loop.call_later(self._limits().timeout, self._write_stalled)

    def resume_writing(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().resume_writing()

    def _write_stalled(self) -> None:
        self._write_timer = None
        limits = self._limits()
        if self._write_left - self.transport.get_write_buffer_size() >= limits.min_rate * limits.timeout:
            self._arm_write_timer()  # read slowly, but read (nothing is written while paused)
            return
        sock = self.transport.get_extra_info("socket")
        try:  # a reset: a close would leave the kernel's buffer queued behind a window that stays shut
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        except (AttributeError, OSError):
            pass
        self.transport.abort()  # close() would wait for our buffer to drain, which it never does

    # -- the request head --------------------------------------------------------------

    def _arm_head_deadline(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.timeout_keep_alive, self._head_deadline, self.cycle)

    def _head_deadline(self, cycle_when_armed: object) -> None:
        """No new request head since the deadline was armed: close the connection — unless
        the client is still sending the body of a request answered early (a 400 or 413
        before the body was read), at the body's pace (`BodyLimits`) and at most
        `DRAIN_MAX_BYTES`: most clients write the whole body before they read, and closing
        under them resets the connection, so they see ECONNRESET instead of the answer."""
        self._head_timer = None
        idle = self.cycle is None or self.cycle.response_complete
        if self.cycle is cycle_when_armed and idle and not self.transport.is_closing():
            if self.cycle is not None and self._in_message and self._head_bytes < 0 and self._body_on_pace():
                self._arm_head_deadline()
                return
            self.transport.close()

    def _body_on_pace(self) -> bool:
        limits = getattr(self, "_body_limits", None)
        if limits is None or self._body_received > DRAIN_MAX_BYTES:
            return False
        return time.monotonic() < self._body_started + limits.timeout + self._body_received / limits.min_rate

    # -- the request body --------------------------------------------------------------

    def _limits(self) -> BodyLimits:
        limits = self.config.__dict__.get("_body_limits")
        if limits is None:  # once per server: the app is the same for every connection
            limits = self.config._body_limits = _app_state(self.app, "body_limits", BodyLimits())  # type: ignore[attr-defined]
        return limits  # type: ignore[return-value]

    def _arm_body_deadline(self, cycle: object) -> None:
        self._body_cycle = cycle
        self._body_limits = limits = self._limits()
        self._body_started = time.monotonic()
        self._body_received = 0
        self._schedule_body_check(self._body_started + limits.timeout)

    def _schedule_body_check(self, when: float) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
        self._body_timer = self.loop.call_later(max(0.0, when - time.monotonic()), self._body_deadline, self.cycle)

    def _body_deadline(self, cycle: object) -> None:
        """Cut a body that is late: later than its timeout plus what its bytes earned."""
        self._body_timer = None
        c = self.cycle
        if c is not cycle or c is None or not c.more_body or c.response_started or self.transport.is_closing():
            return
        limits = self._body_limits
        deadline = self._body_started + limits.timeout + self._body_received / limits.min_rate
        if time.monotonic() < deadline:
            self._schedule_body_check(deadline)
            return
        c.disconnected = True  # the app's next receive() is http.disconnect; its sends are dropped
        c.message_event.set()
        self.transport.write(refusal_bytes(
            408, f"The request body did not arrive in time (at least {limits.min_rate:.0f} bytes/s after "
                 f"{limits.timeout:g} s); the connection is closed.", c.scope["path"]))
        self.transport.close()
