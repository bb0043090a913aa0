"""Admission to the CPU pool: bounded, fail-fast, measured (issues 14 and 25: overload).

Every CPU-bound step of a request (render, tokenize, derender) runs in the worker's CPU
pool. `Admission` sits in front of it: at most ``capacity`` steps run at once (fewer while
the event loop runs late: `Admission._adapt`); the rest wait in FIFO order in the pool's own
queue, but no longer than ``max_queue_delay`` and never more than ``max_waiting`` of them.
A step that cannot start in time is refused with 503 + ``Retry-After`` (`Overloaded`)
instead of queueing behind work the client will have given up on: llm-d's token-producer
gives up after 5 s, so the default delay is 1 s.

A new request is refused before anything is spent on it when it could not start in time
(`Admission.overloaded_at_the_door`): by the connection from its request line
(`connections.Door`), else by `front.Front`. Every refusal has one body builder,
in the route's error shape (`error_json`, `refusal_bytes`). 503 means overload and nothing
else (llm-d retries once on any 5xx; some routers open a breaker for 5 s).

Steps of a stream that already started (``deadline=False``) wait without a deadline:
refusing them would cut a stream the client is reading.

It measures what an autoscaler needs (exported by `collector`):

- ``render_service_busy_fraction``: share of pool slots busy, averaged over the last
  ``window`` seconds;
- ``render_service_queue_delay_seconds``: the longest wait to start in that window;
- ``render_service_saturation``: max(busy fraction, queue delay / max_queue_delay, expected
  wait / max_queue_delay), capped at 1; 1.0 means new requests are being refused (also in
  ``GET /load`` as ``saturation``, for a router);
- ``render_service_rejected_total``: steps refused with 503;
- ``render_service_inline_moved_total``: steps begun on the event loop that had more new
  text to encode than it may take (`tokenizer.budget`), then run on the pool.

`wedged` tells ``/health`` that every slot has been held by the same steps for longer than
``wedge_after`` seconds: nothing is completing, so the pod should be restarted.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import time
from typing import Any, Callable, TypeVar

import orjson

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..errors import OpenAIError
from ..wire.limits import MAX_REQUEST_ID_CHARS

T = TypeVar("T")

LAG_SHARE = 0.25
"""An event loop later than this share of the queue delay refuses new requests at the door
(with a backlog): what it runs late comes on top of every answer (bench/bench_overload.py:
at 1 x the queue delay the 200s' p99 was 2.4-4 s at 1.5x load; at 0.25 x, 1.0 s)."""


class Overloaded(OpenAIError):
    """503 with ``Retry-After``: the pool could not start this request within the queue delay."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(503, message, type="ServiceUnavailableError")
        self.retry_after_s = retry_after_s


def error_json(err: OpenAIError, path: str) -> bytes:
    """The JSON body of ``err`` in the error shape of the route at ``path`` (the door's that
    owns it: `doors.error_body_for`; Anthropic's on the Messages routes but its render)."""
    from ..doors import error_body_for

    return orjson.dumps(error_body_for(path)(err))


def refusal_headers(err: OpenAIError) -> list[tuple[bytes, bytes]]:
    """``Retry-After`` for a 503 (`Overloaded` says how long; anything else 1 s), else nothing."""
    if err.status != 503:
        return []
    return [(b"retry-after", str(getattr(err, "retry_after_s", 1)).encode())]


def refusal_bytes(status: int, message: str, path: str, close: bool = True) -> bytes:
    """A whole HTTP/1.1 error response, for answers written by the connection itself before
    (or instead of) the app: the error shape of ``path``, ``Retry-After`` on a 503,
    ``Connection: close`` unless ``close`` is False."""
    err = Overloaded(message) if status == 503 else OpenAIError(status, message)
    body = error_json(err, path)
    head = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Error")), b"content-type: application/json",
            b"content-length: %d" % len(body)]
    head += [k + b": " + v for k, v in refusal_headers(err)] + ([b"connection: close"] if close else [])
    return b"\r\n".join(head) + b"\r\n\r\n" + body


_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large",
            431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class Admission:
    """A FIFO gate in front of a pool of ``capacity`` threads.

    The gate is the pool's own queue: a step is handed to the executor at once and a pool
    thread takes the next one the moment it is free, without waiting for the event loop.
    (The gate used to free a slot only when the loop got round to it: a loop busy at the
    door held idle slots for as long as it lagged, so waiting steps timed out into 503s
    while the pool sat idle — issue 25's 1.3/s served at 1.3x capacity.) A step that
    cannot start within ``max_queue_delay`` is refused: withdrawn from the queue by the
    loop at its deadline, or skipped by the thread that reaches it too late.

    Args:
        capacity: steps that may run at once (the pool's threads).
        max_queue_delay: seconds a step may wait to start before it gets `Overloaded`.
        max_waiting: steps that may wait at once; more are refused at once.
        wedge_after: seconds after which a full pool with no completion counts as wedged.
        window: seconds the busy fraction and queue delay are measured over.
    """

    def __init__(self, capacity: int, max_queue_delay: float, max_waiting: int | None = None,
                 wedge_after: float = 60.0, window: float = 10.0) -> None:
        self.capacity = capacity
        self.max_queue_delay = max_queue_delay
        self.max_waiting = max_waiting if max_waiting is not None else 8 * capacity
        # Requests in flight per worker (bodies in, not yet answered): enough to absorb
        # bursts at full speed (at ~2,000 req/s, 256 in flight is ~0.1 s of work); slow
        # requests are bounded by the pool's queue delay instead.
        self.max_inflight = 64 * max(capacity, 1)
        self.inflight = 0  # requests between body-complete and answer (counted by front.Front)
        self.loop_lag = 0.0  # how late the event loop runs its timers, seconds (see watch_loop)
        self._watching = False
        self.wedge_after = wedge_after
        self.window = window
        self.running = 0
        self.rejected = 0
        self.moved_to_pool = 0  # steps begun on the event loop that went to the pool (tokenizer.budget)
        self.run_time = 0.0  # moving average of a step's run time, seconds
        self._lock = threading.Lock()  # pool threads and the loop both update the counts below
        self._room = threading.Condition(self._lock)  # a pool thread waits here for `allowed`
        self.allowed = capacity  # steps allowed to run now: fewer while the event loop lags (_adapt)
        self._waiting: dict[int, float] = {}  # job token -> queued time, oldest first
        self._started: dict[int, float] = {}  # job token -> start time
        self._next_token = 0
        self._last_done = time.monotonic()
        # busy-time integral samples and recent queue delays, for the windowed gauges
        self._busy_integral = 0.0
        self._busy_since = time.monotonic()
        self._samples: collections.deque[tuple[float, float]] = collections.deque([(time.monotonic(), 0.0)])
        self._delays: collections.deque[tuple[float, float]] = collections.deque()

    # -- the gate ------------------------------------------------------------------------

    async def run(self, executor: concurrent.futures.Executor, fn: Callable[[], T], deadline: bool = True) -> T:
        """``fn()`` on ``executor`` (a pool of ``capacity`` threads), FIFO behind the steps
        already queued. ``deadline=False`` (the steps of a stream that already started)
        waits as long as it takes.

        Raises:
            Overloaded: ``deadline`` and ``fn`` could not start within ``max_queue_delay``,
                or ``max_waiting`` steps were already waiting.
        """
        queued_at = time.monotonic()
        with self._lock:
            if deadline and len(self._waiting) >= self.max_waiting and self.running >= self.capacity:
                self._refuse(queued_at)
            token = self._next_token = self._next_token + 1
            self._waiting[token] = queued_at
        job = executor.submit(self._run_job, token, queued_at, fn, deadline)
        answer = asyncio.wrap_future(job)
        if not deadline:
            return await answer
        try:
            return await asyncio.wait_for(asyncio.shield(answer), self.max_queue_delay)
        except asyncio.TimeoutError:
            if job.cancel():  # still queued: withdraw it (a running one is waited for)
                with self._lock:
                    self._waiting.pop(token, None)
                    self._refuse(queued_at)
            return await answer

    def run_now(self, fn: Callable[..., T], *args: Any) -> tuple[bool, T | None]:
        """``(True, fn(*args))`` run on the calling thread (the event loop) at once, holding a
        slot, when one is free and no step is queued: a step smaller than the hand-off to a pool
        thread. ``(False, None)`` otherwise, and the caller queues it with `run`."""
        with self._lock:
            if self._waiting or self.running >= self.allowed:
                return False, None
            self._account()
            self.running += 1
            started = time.monotonic()
            self._delays.append((started, 0.0))
        try:
            return True, fn(*args)
        finally:
            with self._lock:
                self._account()
                self.running -= 1
                self._last_done = time.monotonic()
                self.run_time += 0.1 * (self._last_done - started - self.run_time)
                self._room.notify()

    def _run_job(self, token: int, queued_at: float, fn: Callable[[], T], deadline: bool) -> T:
        """On a pool thread: start ``fn`` unless its queue delay has passed; count it."""
        with self._lock:
            while self.running >= self.allowed:  # the loop is starved: leave it a core (see _adapt)
                left = queued_at + self.max_queue_delay - time.monotonic()
                if deadline and left <= 0:
                    break
                self._room.wait(left if deadline else None)
            self._waiting.pop(token, None)
            now = time.monotonic()
            if deadline and now - queued_at > self.max_queue_delay:
                self._refuse(queued_at)
            self._account()
            self.running += 1
            self._started[token] = now
            self._delays.append((now, now - queued_at))
        try:
            return fn()
        finally:
            with self._lock:
                self._account()
                self.running -= 1
                started = self._started.pop(token)
                self._last_done = time.monotonic()
                self.run_time += 0.1 * (self._last_done - started - self.run_time)
                self._room.notify()

    def _refuse(self, queued_at: float) -> None:
        """Count a refusal and raise `Overloaded` (called with ``_lock`` held). A refusal counts
        as a full queue in the delay gauge, however early the timer fired (uvloop's run up to a
        millisecond early: 49.5 ms waited of 50 read as a saturation of 0.99 while refusing)."""
        self.rejected += 1
        now = time.monotonic()
        self._delays.append((now, max(now - queued_at, self.max_queue_delay)))
        raise Overloaded(f"Server is at capacity: the request could not start within "
                         f"{self.max_queue_delay * 1000:.0f} ms; retry shortly.")

    def overloaded_at_the_door(self) -> bool:
        """A new request should be refused before it costs anything: too many in flight, or
        it would wait past the queue delay — behind the steps already queued for the pool
        (each as long as the recent average), plus the event loop's lag when more requests
        are in flight than the pool can run — or the loop runs later than `LAG_SHARE` of the
        queue delay with such a backlog (lag alone, a starved machine or a GC pause, is not
        overload)."""
        self._watch_loop()
        if self.inflight >= self.max_inflight:
            return True
        lag = self.loop_lag if self.inflight > self.capacity else 0.0
        return lag > LAG_SHARE * self.max_queue_delay or lag + self.expected_wait() > self.max_queue_delay

    def expected_wait(self) -> float:
        """Seconds a step queued now would wait to start: the steps ahead of it, ``allowed``
        at a time, each taking the recent average run time (0 while a thread is free)."""
        if self.running < self.allowed:
            return 0.0
        return (len(self._waiting) + 1) / max(self.allowed, 1) * self.run_time

    def refused_at_the_door(self) -> None:
        """Count a refusal at the door (it counts as a full queue in the delay gauge)."""
        self.rejected += 1
        self._delays.append((time.monotonic(), self.max_queue_delay))

    def _watch_loop(self, period: float = 0.05) -> None:
        """Measure the event loop's lag: a timer every ``period`` s notes how late it ran.
        Work queued on the loop itself (parsing, validation) is invisible to the pool's
        queue; its lag is the same delay seen from the loop, and counts in the queue delay
        gauge while more than one request is in flight (someone waited on it)."""
        if self._watching:
            return
        self._watching = True
        loop = asyncio.get_running_loop()

        def tick(expected: float) -> None:
            now = loop.time()
            late = max(0.0, now - expected)
            self.loop_lag = late if late > self.loop_lag else 0.8 * self.loop_lag + 0.2 * late
            if late > 0.001 and self.inflight > 1:
                # a queue delay only when a request could wait behind the loop: with one in flight
                # the late tick is its own work (a first render compiling its template: ~0.2 s) or
                # a stall nobody waited on (GC, a starved machine), and an idle server read 0.1-0.3
                self._delays.append((time.monotonic(), late))
            self._adapt(late, period)
            loop.call_at(now + period, tick, now + period)

        loop.call_at(loop.time() + period, tick, loop.time() + period)

    def _adapt(self, late: float, period: float) -> None:
        """Fewer pool steps at once while the event loop runs late, more again once it keeps
        time (one step per tick either way, between 1 and ``capacity``).

        The pool's threads compete with the event loop for the cores: under overload all of
        them are always runnable, the loop gets a thread's share of the CPU, and every
        request's parsing, door check and answer waits behind it (measured on 2 cores: p50
        1.5-6 s at 1-1.5x capacity, /health up to 2 s). Holding a thread back gives the
        loop a core, so requests are answered (or refused) in time."""
        with self._lock:
            if late > period and self.allowed > 1:
                self.allowed -= 1
            elif late < period / 5 and self.allowed < self.capacity:
                self.allowed += 1
                self._room.notify()

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
        with self._lock:
            return self._busy_fraction()

    def _busy_fraction(self) -> float:
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
        with self._lock:
            return self._queue_delay()

    def _queue_delay(self) -> float:
        now = time.monotonic()
        self._trim(now)
        oldest = next(iter(self._waiting.values()), None)
        waiting = now - oldest if oldest is not None else 0.0
        return max([d for _, d in self._delays] + [waiting])

    def saturation(self) -> float:
        """max(busy fraction, queue delay / max queue delay, expected wait / max queue
        delay), capped at 1: 1.0 means new requests are being refused."""
        delay = max(self.queue_delay(), self.expected_wait())
        return min(1.0, max(self.busy_fraction(), delay / self.max_queue_delay))

    def wedged(self) -> bool:
        """Every slot busy, the oldest for over ``wedge_after`` s, and nothing finished since."""
        with self._lock:
            if self.running < self.capacity or not self._started:
                return False
            oldest = min(self._started.values())
        now = time.monotonic()
        return now - oldest > self.wedge_after and now - self._last_done > self.wedge_after

    def collector(self) -> "AdmissionCollector":
        """A prometheus collector of the gauges above."""
        return AdmissionCollector(self)


async def send_error(send, err: OpenAIError, path: str) -> None:
    """Answer ``err`` (ASGI) in the error shape of ``path``, with ``Retry-After`` on a 503."""
    body = error_json(err, path)
    await send({"type": "http.response.start", "status": err.status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), *refusal_headers(err)]})
    await send({"type": "http.response.body", "body": body})


class RequestIdLimitMiddleware:
    """An ``X-Request-Id`` past `MAX_REQUEST_ID_CHARS` or not ASCII is a 400 (for apps without
    `front.Front`, which checks the same: ``drive``, whose id goes to both engines
    and into every answer)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and (bad := bad_request_id(scope["headers"])) is not None:
            await send_error(send, bad, scope["path"])
            return
        await self.app(scope, receive, send)


LONG_REQUEST_ID = OpenAIError(400, f"X-Request-Id may be at most {MAX_REQUEST_ID_CHARS} characters.",
                               param="X-Request-Id")
NON_ASCII_REQUEST_ID = OpenAIError(400, "X-Request-Id must be ASCII (printable characters, e.g. a UUID).",
                                   param="X-Request-Id")


def bad_request_id(headers: list[tuple[bytes, bytes]]) -> OpenAIError | None:
    """The refusal of an ``X-Request-Id`` header longer than `MAX_REQUEST_ID_CHARS` (it would be
    echoed in every answer and log line) or not ASCII (HTTP carries other bytes as opaque
    latin-1: the id came back garbled in the answer's ``request_id``, as in vLLM 0.33, and drive
    could not forward it to its engines); None when it is fine or absent."""
    for k, v in headers:
        if k == b"x-request-id":
            if len(v) > MAX_REQUEST_ID_CHARS:
                return LONG_REQUEST_ID
            if not v.isascii():
                return NON_ASCII_REQUEST_ID
    return None


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
            ("render_service_pool_waiting", "CPU-pool steps waiting now", float(len(a._waiting))),
            ("render_service_requests_inflight", "requests admitted and not yet answered", float(a.inflight)),
        ):
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], value)
            yield gauge
        rejected = CounterMetricFamily("render_service_rejected", "requests refused with 503 (overload)")
        rejected.add_metric([], a.rejected)
        yield rejected
        moved = CounterMetricFamily("render_service_inline_moved",
                                    "steps begun on the event loop that had more text to encode than it may take, "
                                    "then run on the pool")
        moved.add_metric([], a.moved_to_pool)
        yield moved
