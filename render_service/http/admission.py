"""Admission to the CPU pool: bounded, fail-fast, measured (issue 14: overload).

Every CPU-bound step of a request (render, tokenize, derender) runs in the worker's CPU
pool. `Admission` sits in front of it: at most ``capacity`` steps run at once; the rest
wait in FIFO order, but no longer than ``max_queue_delay`` and never more than
``max_waiting`` of them. A step that cannot start in time is refused with 503 +
``Retry-After`` (`Overloaded`) instead of queueing behind work the client will have given
up on: llm-d's token-producer gives up after 5 s, so the default delay is 1 s.

Steps of a stream that already started (``deadline=False``) wait without a deadline:
refusing them would cut a stream the client is reading.

It measures what an autoscaler needs (exported by `collector`):

- ``render_service_busy_fraction``: share of pool slots busy, averaged over the last
  ``window`` seconds;
- ``render_service_queue_delay_seconds``: the longest wait to start in that window;
- ``render_service_saturation``: max(busy fraction, queue delay / max_queue_delay), capped
  at 1; 1.0 means requests are being refused;
- ``render_service_rejected_total``: steps refused with 503.

`wedged` tells ``/health`` that every slot has been held by the same steps for longer than
``wedge_after`` seconds: nothing is completing, so the pod should be restarted.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from typing import AsyncIterator

import orjson

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..errors import OpenAIError


class Overloaded(OpenAIError):
    """503 with ``Retry-After``: the pool could not start this request within the queue delay."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(503, message, type="ServiceUnavailableError")
        self.retry_after_s = retry_after_s


def anthropic_shaped(path: str) -> bool:
    """True for the routes whose errors are in Anthropic's shape: ``/v1/messages`` and its
    ``count_tokens`` (`common.ANTHROPIC_PATHS`) and the Messages derender routes (their
    API's shape); ``/v1/messages/render`` is vLLM's and answers in OpenAI's."""
    from .common import ANTHROPIC_PATHS

    path = path.rstrip("/")
    return path in ANTHROPIC_PATHS or path.startswith("/v1/messages/derender")


def error_json(err: OpenAIError, path: str) -> bytes:
    """The JSON body of ``err`` in the error shape of the route at ``path``."""
    if anthropic_shaped(path):
        from ..wire.frontdoors import anthropic_error_body

        return orjson.dumps(anthropic_error_body(err))
    return orjson.dumps(err.body())


def refusal_headers(err: OpenAIError) -> list[tuple[bytes, bytes]]:
    """``Retry-After`` for a 503 (`Overloaded` says how long; anything else 1 s), else nothing."""
    if err.status != 503:
        return []
    return [(b"retry-after", str(getattr(err, "retry_after_s", 1)).encode())]


def refusal_bytes(status: int, message: str, path: str) -> bytes:
    """A whole HTTP/1.1 error response that closes the connection, for answers written by
    the connection itself before (or instead of) the app: the error shape of ``path``,
    ``Retry-After`` on a 503."""
    err = Overloaded(message) if status == 503 else OpenAIError(status, message)
    body = error_json(err, path)
    head = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Error")), b"content-type: application/json",
            b"connection: close", b"content-length: %d" % len(body)]
    head += [k + b": " + v for k, v in refusal_headers(err)]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large", 503: b"Service Unavailable"}


class Admission:
    """A FIFO gate in front of a pool of ``capacity`` slots.

    Args:
        capacity: steps that may run at once (the pool's threads).
        max_queue_delay: seconds a step may wait to start before it gets `Overloaded`.
        max_waiting: steps that may wait at once; more are refused at once. Requests in
            flight (parsed, validated, waiting, running) are bounded by 64 x capacity.
        wedge_after: seconds after which a full pool with no completion counts as wedged.
        window: seconds the busy fraction and queue delay are measured over.
    """

    def __init__(self, capacity: int, max_queue_delay: float, max_waiting: int | None = None,
                 wedge_after: float = 60.0, window: float = 10.0) -> None:
        self.capacity = capacity
        self.max_queue_delay = max_queue_delay
        self.max_waiting = max_waiting if max_waiting is not None else 8 * capacity
        # Requests in flight per worker: enough to absorb bursts at full speed (at ~2,000
        # req/s, 256 in flight is ~0.1 s of work); slow requests are bounded by the pool's
        # queue delay instead.
        self.max_inflight = 64 * max(capacity, 1)
        self.inflight = 0  # requests between body-complete and answer (see AdmissionMiddleware)
        self.loop_lag = 0.0  # how late the event loop runs its timers, seconds (see watch_loop)
        self._watching = False
        self.wedge_after = wedge_after
        self.window = window
        self.running = 0
        self.rejected = 0
        self._waiters: collections.deque[tuple[asyncio.Future, float]] = collections.deque()
        self._started: dict[int, float] = {}  # slot token -> start time
        self._next_token = 0
        self._last_done = time.monotonic()
        # busy-time integral samples and recent queue delays, for the windowed gauges
        self._busy_integral = 0.0
        self._busy_since = time.monotonic()
        self._samples: collections.deque[tuple[float, float]] = collections.deque([(time.monotonic(), 0.0)])
        self._delays: collections.deque[tuple[float, float]] = collections.deque()

    # -- the gate ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def slot(self, deadline: bool = True) -> AsyncIterator[None]:
        """Hold one pool slot for the body of the ``async with``.

        Raises:
            Overloaded: ``deadline`` and the slot did not free up within ``max_queue_delay``,
                or ``max_waiting`` steps are already waiting.
        """
        queued_at = time.monotonic()
        if self.running >= self.capacity or self._waiters:
            if deadline and len(self._waiters) >= self.max_waiting:
                self._refuse(queued_at)
            waiter = asyncio.get_running_loop().create_future()
            entry = (waiter, queued_at)
            self._waiters.append(entry)
            try:
                if deadline:
                    await asyncio.wait_for(asyncio.shield(waiter), self.max_queue_delay)
                else:
                    await waiter
            except asyncio.TimeoutError:
                self._withdraw(entry)
                self._refuse(queued_at)
            except BaseException:
                self._withdraw(entry)
                raise
        else:
            self._account()
            self.running += 1
        now = time.monotonic()
        self._delays.append((now, now - queued_at))
        token = self._next_token = self._next_token + 1
        self._started[token] = now
        try:
            yield
        finally:
            del self._started[token]
            self._last_done = time.monotonic()
            self._release()

    def _withdraw(self, entry: tuple[asyncio.Future, float]) -> None:
        """A waiter gave up; if it had already been handed the slot, pass it on."""
        if entry in self._waiters:
            self._waiters.remove(entry)
        elif entry[0].done() and not entry[0].cancelled():
            self._release()

    def _release(self) -> None:
        while self._waiters:
            waiter, _ = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight on: `running` is unchanged
                return
        self._account()
        self.running -= 1

    def _refuse(self, queued_at: float) -> None:
        self.rejected += 1
        now = time.monotonic()
        self._delays.append((now, now - queued_at))
        raise Overloaded(f"Server is at capacity: the request could not start within "
                         f"{self.max_queue_delay * 1000:.0f} ms; retry shortly.")

    def overloaded_at_the_door(self) -> bool:
        """A new request should be refused before it costs anything: too many in flight, or
        more than the pool can run in flight while the event loop is so far behind that a
        request would wait past the queue delay."""
        self._watch_loop()
        if self.inflight >= self.max_inflight:
            return True
        # Lag alone is not overload (a starved machine, a GC pause): only with a backlog of
        # requests beyond what the pool can run.
        return self.loop_lag > self.max_queue_delay and self.inflight > self.capacity

    def _watch_loop(self, period: float = 0.05) -> None:
        """Measure the event loop's lag: a timer every ``period`` s notes how late it ran.
        Work queued on the loop itself (parsing, validation) is invisible to the pool's
        queue; its lag is the same delay seen from the loop."""
        if self._watching:
            return
        self._watching = True
        loop = asyncio.get_running_loop()

        def tick(expected: float) -> None:
            now = loop.time()
            late = max(0.0, now - expected)
            self.loop_lag = late if late > self.loop_lag else 0.8 * self.loop_lag + 0.2 * late
            if late > 0.001:
                self._delays.append((time.monotonic(), late))
            loop.call_at(now + period, tick, now + period)

        loop.call_at(loop.time() + period, tick, loop.time() + period)

    # -- measurements --------------------------------------------------------------------

    def _account(self) -> None:
        now = time.monotonic()
        self._busy_integral += self.running * (now - self._busy_since)
        self._busy_since = now

    def _trim(self, now: float) -> None:
        while len(self._samples) > 1 and self._samples[1][0] <= now - self.window:
            self._samples.popleft()
        while self._delays and self._delays[0][0] < now - self.window:
            self._delays.popleft()

    def busy_fraction(self) -> float:
        """Share of slots busy over the last ``window`` seconds (0..1)."""
        self._account()
        now = time.monotonic()
        self._samples.append((now, self._busy_integral))
        self._trim(now)
        t0, i0 = self._samples[0]
        elapsed = now - t0
        if elapsed <= 0:
            return min(1.0, self.running / max(self.capacity, 1))
        return min(1.0, (self._busy_integral - i0) / (elapsed * max(self.capacity, 1)))

    def queue_delay(self) -> float:
        """Longest wait to start (seconds) over the last ``window`` seconds."""
        now = time.monotonic()
        self._trim(now)
        waiting = now - self._waiters[0][1] if self._waiters else 0.0
        return max([d for _, d in self._delays] + [waiting])

    def saturation(self) -> float:
        """max(busy fraction, queue delay / max queue delay), capped at 1."""
        return min(1.0, max(self.busy_fraction(), self.queue_delay() / self.max_queue_delay))

    def wedged(self) -> bool:
        """Every slot busy, the oldest for over ``wedge_after`` s, and nothing finished since."""
        if self.running < self.capacity or not self._started:
            return False
        now = time.monotonic()
        oldest = min(self._started.values())
        return now - oldest > self.wedge_after and now - self._last_done > self.wedge_after

    def collector(self) -> "AdmissionCollector":
        """A prometheus collector of the gauges above."""
        return AdmissionCollector(self)


class AdmissionMiddleware:
    """Admission at the door, before a request costs anything (POST, except long-lived
    pipes, which queue per step): a new request is answered 503 + ``Retry-After`` before
    its body is read when `Admission.overloaded_at_the_door` says it could not start in
    time. A request counts as in flight (``admission.inflight``, bounded by
    ``max_inflight``) only once its whole body is in: a client trickling a body holds a
    connection (cut by the body deadline, `connections.HardenedH11Protocol`), never a
    place in the queue — 300 slow uploads used to lock every other POST out."""

    def __init__(self, app, admission: Admission) -> None:
        self.app, self.admission = app, admission

    async def __call__(self, scope, receive, send) -> None:
        a = self.admission
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"].endswith("/pipe"):
            await self.app(scope, receive, send)
            return
        if a.overloaded_at_the_door():
            a.rejected += 1
            a._delays.append((time.monotonic(), a.max_queue_delay))  # a refusal counts as a full queue
            err = Overloaded("Server is at capacity; retry shortly.")
            body = error_json(err, scope["path"])
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
                *refusal_headers(err)]})
            await send({"type": "http.response.body", "body": body})
            return
        counted = False

        async def receive_and_count():
            nonlocal counted
            message = await receive()
            if not counted and message["type"] == "http.request" and not message.get("more_body", False):
                counted = True
                a.inflight += 1
            return message

        try:
            await self.app(scope, receive_and_count, send)
        finally:
            if counted:
                a.inflight -= 1


class AdmissionCollector:
    """Exports an `Admission`'s gauges at scrape time."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def collect(self):
        a = self.admission
        for name, doc, value in (
            ("render_service_saturation", "max(busy fraction, queue delay / max queue delay); 1 = refusing with 503",
             a.saturation()),
            ("render_service_busy_fraction", "share of CPU-pool slots busy over the last window", a.busy_fraction()),
            ("render_service_queue_delay_seconds", "longest wait to start over the last window", a.queue_delay()),
            ("render_service_pool_running", "CPU-pool steps running now", float(a.running)),
            ("render_service_pool_waiting", "CPU-pool steps waiting now", float(len(a._waiters))),
            ("render_service_requests_inflight", "requests admitted and not yet answered", float(a.inflight)),
        ):
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], value)
            yield gauge
        rejected = CounterMetricFamily("render_service_rejected", "requests refused with 503 (overload)")
        rejected.add_metric([], a.rejected)
        yield rejected
