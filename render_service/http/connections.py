"""Connection hygiene for uvicorn: TCP_NODELAY, a request-head deadline, a connection cap.

uvicorn (0.30-0.54, h11) leaves three gaps that a single client can use (issue 14 §3, §4),
measured by ``bench/bench_servers.py``:

- A connection that never sends a byte, or trickles its headers, is never closed: the
  keep-alive timer starts only after a response, and any received byte cancels it.
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
- past ``limit_concurrency`` open connections, a new one gets ``503`` with ``Retry-After``
  and is closed at once.
"""

from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol

_BUSY_BODY = b'{"error":{"message":"Too many open connections; retry later.","type":"ServiceUnavailable","code":503}}'
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
         b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class HardenedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with TCP_NODELAY, a request-head deadline and a connection cap."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        super().connection_made(transport)
        if self.limit_concurrency is not None and len(self.connections) > self.limit_concurrency:
            transport.write(_BUSY)
            transport.close()
            return
        self._arm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

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
