"""Connection hygiene for uvicorn: TCP_NODELAY, request-head and body deadlines, a connection cap.

uvicorn (0.30-0.54, h11) leaves gaps that a single client can use (issue 14 §3, §4; issue 25),
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

`HardenedH11Protocol` closes them in uvicorn's own protocol class (chosen with
``uvicorn.run(http="render_service.http.connections:HardenedH11Protocol")``, an import path
so every worker process uses it):

- every accepted TCP socket gets ``TCP_NODELAY``;
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
- past ``limit_concurrency`` open connections, a new one gets ``503`` with ``Retry-After``
  and is closed at once;
- the door (`Door`, ``app.state.door``): a probe (``GET /health``, ``/ping``) is answered
  from the connection itself, and a POST the admission refuses gets its 503 + ``Retry-After``
  from the request line alone, before uvicorn parses it or a task is made for it (issue 25:
  under 1.3x load /health took 1.6 s and a 503 0.76 s, queued behind the app's work).
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from dataclasses import dataclass
from typing import Callable

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .drain import grace_before_cut
from .admission import Admission, refusal_bytes

_UNSET = object()
DRAIN_MAX_BYTES = 64 << 20
"""Most body bytes read (and dropped) after a request was answered early, before closing."""


@dataclass(frozen=True)
class Door:
    """What the connection answers by itself (``app.state.door``): ``probes`` maps a GET
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


def _whole_request(data: bytes) -> bool:
    """True when ``data`` is exactly one request: its head, a Content-Length body, nothing
    more, and no ``Connection: close`` or ``Transfer-Encoding``."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False
    head = data[:end + 2].lower()
    found = _CONTENT_LENGTH.findall(head)
    if len(found) != 1 or b"\r\ntransfer-encoding:" in head or b"\r\nconnection: close" in head:
        return False
    return len(data) == end + 4 + int(found[0])


class HardenedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with TCP_NODELAY, head and body deadlines and a connection cap."""

    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _body_started = 0.0
    _body_received = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        super().connection_made(transport)
        if self.limit_concurrency is not None and len(self.connections) > self.limit_concurrency:
            transport.write(refusal_bytes(503, "Too many open connections; retry later.", "/"))
            transport.close()
            return
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        if (self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]
                and (self.cycle is None or self.cycle.response_complete)):
            door = self.config.__dict__.get("_door", _UNSET)
            if door is _UNSET:  # once per server: the app is the same for every connection
                door = self.config._door = _app_state(self.app, "door", None)  # type: ignore[attr-defined]
            if door is not None and self._answer_at_the_door(door, data):
                return
        self._body_received += len(data)
        super().data_received(data)

    def _answer_at_the_door(self, door: Door, data: bytes) -> bool:
        """Answer a new request from its first bytes, before uvicorn parses it or the app
        sees it: a probe (``GET /health``), or a POST the admission refuses (503; the
        connection is kept when the whole request is in ``data``, else closed). True when
        answered."""
        method, _, rest = data.partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        if method == b"GET" and path in door.probes and data.endswith(b"\r\n\r\n") and data.count(b"\r\n\r\n") == 1:
            status = door.probes[path]()
            closing = b"\r\nconnection: close" in data.lower()
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\n%s\r\n" % (
                status, b"OK" if status == 200 else b"Service Unavailable", b"connection: close\r\n" if closing else b""))
            if closing:
                self.transport.close()
            else:
                self._unset_keepalive_if_required()
                self._arm_head_deadline()
            return True
        if method == b"POST" and not path.endswith(b"/pipe") and door.admission.overloaded_at_the_door():
            door.admission.refused_at_the_door()
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

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self.cycle is not None and self.cycle.more_body:
            self._arm_body_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_deadline()

    def shutdown(self) -> None:
        """uvicorn is shutting down (SIGTERM): start the app's drain (``app.state.drain``), which
        ends its long-lived requests (pipes) properly before uvicorn's own cut."""
        drain = _app_state(self.app, "drain", None)
        timeout = self.config.timeout_graceful_shutdown
        if drain is not None and timeout is not None:
            drain.begin(grace_before_cut(timeout))
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None
        super().connection_lost(exc)

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
            if self.cycle is not None and self.conn.their_state is h11.SEND_BODY and self._body_on_pace():
                self._arm_head_deadline()
                return
            self.transport.close()

    def _body_on_pace(self) -> bool:
        limits = getattr(self, "_body_limits", None)
        if limits is None or self._body_received > DRAIN_MAX_BYTES:
            return False
        return time.monotonic() < self._body_started + limits.timeout + self._body_received / limits.min_rate

    # -- the request body --------------------------------------------------------------

    def _arm_body_deadline(self) -> None:
        limits = self.config.__dict__.get("_body_limits")
        if limits is None:  # once per server: the app is the same for every connection
            limits = self.config._body_limits = _app_state(self.app, "body_limits", BodyLimits())  # type: ignore[attr-defined]
        self._body_limits = limits
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
