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
- past ``limit_concurrency`` open connections, a new one gets ``503`` with ``Retry-After``
  and is closed at once.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol

from .admission import refusal_bytes


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
        self._body_received += len(data)
        super().data_received(data)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self.cycle is not None and self.cycle.more_body:
            self._arm_body_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_deadline()

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
        """No new request head since the deadline was armed: close the connection."""
        self._head_timer = None
        idle = self.cycle is None or self.cycle.response_complete
        if self.cycle is cycle_when_armed and idle and not self.transport.is_closing():
            self.transport.close()

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
