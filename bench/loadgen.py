"""Load generation: run a workload's sessions against one target, closed or open loop.

Theory of operation. A *phase* runs sessions (see `bench.workloads.base`) against one base
URL with one async httpx client until a bound is reached: ``duration`` seconds since the
phase started or ``max_requests`` requests issued. Bounds are checked before every
request, so a session that is under way when a bound is hit stops there ("cut"); requests
already sent are awaited. A hard limit of ``duration + timeout + 5`` seconds cancels what
is still pending (those requests count as the error ``cancelled``).

- Closed loop (``concurrency=N``): N workers, each runs sessions back to back.
- Open loop (``rate=R``): sessions start at Poisson arrivals (exponential gaps, mean 1/R,
  seeded), whatever the server's state. The first request of a session is timed from its
  scheduled arrival, not from when it was sent, so client-side queueing counts as latency
  (no coordinated omission); later requests of a session from when the previous answer
  arrived. How late the client itself sent each first request is recorded too
  (``send_lag_s``): when it grows, the client, not the server, is the bottleneck.

Error accounting is exact: every issued request ends as exactly one success or one error,
``issued == ok + sum(errors.values())``. Error keys: ``HTTP <status> <error.type>`` for a
non-200 answer (type from the OpenAI error body when there is one), ``HTTP 200 invalid
JSON`` / ``HTTP 200 invalid response`` / ``stream error <type>`` / ``stream ended without
[DONE]`` for a 200 that breaks the wire contract, the httpx exception name (``ConnectError``,
``ReadTimeout``, …) for transport failures, ``cancelled`` for the hard limit. A failed
request ends its session (later calls may depend on its answer).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from render_service.wire import sse

from .workloads import Call, InvalidResponse, Session, Workload

_JSON = {"content-type": "application/json"}
_SAMPLE_CHARS = 300


@dataclass(frozen=True)
class LoadSpec:
    """Closed loop (``concurrency``) or open loop (``rate`` sessions per second)."""

    concurrency: int | None = None
    rate: float | None = None

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("give exactly one of concurrency or rate")
        if (self.concurrency is not None and self.concurrency < 1) or (self.rate is not None and self.rate <= 0):
            raise ValueError("concurrency must be >= 1 and rate > 0")

    def describe(self, unit: str = "request") -> str:
        if self.rate is not None:
            return f"open loop, {self.rate:g} {unit}s/s (Poisson)"
        return f"closed loop, concurrency {self.concurrency}"

    def as_dict(self) -> dict:
        return {"mode": "open", "rate": self.rate} if self.rate is not None else {"mode": "closed", "concurrency": self.concurrency}


@dataclass(frozen=True)
class Bounds:
    """Stop issuing after ``duration`` s or ``max_requests`` requests; per-request ``timeout`` s."""

    duration: float
    max_requests: int | None = None
    timeout: float = 60.0


@dataclass
class PhaseResult:
    """What one phase measured. ``samples`` are the successes as (latency s, tag)."""

    issued: int = 0
    ok: int = 0
    errors: Counter = field(default_factory=Counter)
    error_samples: dict[str, str] = field(default_factory=dict)
    samples: list[tuple[float, dict]] = field(default_factory=list)
    sessions_started: int = 0
    sessions_completed: int = 0
    sessions_failed: int = 0
    sessions_cut: int = 0
    elapsed: float = 0.0
    client_cpu_s: float = 0.0


class _Failed(Exception):
    def __init__(self, key: str, detail: Any = "") -> None:
        super().__init__(key)
        self.key = key
        text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
        self.detail = text[:_SAMPLE_CHARS]


def _status_key(status: int, body: bytes) -> str:
    try:
        err = orjson.loads(body).get("error")
        etype = err.get("type") if isinstance(err, dict) else None
    except (orjson.JSONDecodeError, AttributeError):
        etype = None
    return f"HTTP {status} {etype}" if isinstance(etype, str) and etype else f"HTTP {status}"


class Phase:
    """One phase against one target; see the module docstring. Use `run`."""

    def __init__(self, client: httpx.AsyncClient, workload: Workload, load: LoadSpec, bounds: Bounds,
                 first_session: int, seed: int = 0, progress=None) -> None:
        self.client, self.workload, self.load, self.bounds = client, workload, load, bounds
        self.first_session, self.seed, self.progress = first_session, seed, progress
        self.result = PhaseResult()
        self.loop = asyncio.get_running_loop()
        self.t0 = self.end = 0.0

    def _may_issue(self) -> bool:
        cap = self.bounds.max_requests
        return self.loop.time() < self.end and (cap is None or self.result.issued < cap)

    async def run(self) -> PhaseResult:
        """Run to the bounds; returns the filled `PhaseResult`."""
        cpu0 = time.process_time()
        self.t0 = self.loop.time()
        self.end = self.t0 + self.bounds.duration
        main = self._closed() if self.load.concurrency is not None else self._open()
        try:
            await asyncio.wait_for(main, self.bounds.duration + self.bounds.timeout + 5)
        except asyncio.TimeoutError:
            pass  # pending requests were cancelled and counted as errors
        self.result.elapsed = self.loop.time() - self.t0
        self.result.client_cpu_s = time.process_time() - cpu0
        return self.result

    async def _closed(self) -> None:
        indices = itertools.count(self.first_session)

        async def worker() -> None:
            while self._may_issue():
                started = self._start(next(indices))
                if started is not None:
                    await self._drive(*started, None)

        await asyncio.gather(*(worker() for _ in range(self.load.concurrency)))

    async def _open(self) -> None:
        rng = random.Random(self.seed)
        tasks, arrival = [], self.t0
        for index in itertools.count(self.first_session):
            arrival += rng.expovariate(self.load.rate)
            if arrival >= self.end:
                break
            started = self._start(index)  # build the first request before it is due, not after
            await asyncio.sleep(max(0.0, arrival - self.loop.time()))
            if not self._may_issue():
                if started is not None:
                    started[0].close()
                break
            if started is not None:
                tasks.append(asyncio.ensure_future(self._drive(*started, arrival)))
        if tasks:
            await asyncio.gather(*tasks)

    def _start(self, index: int) -> tuple[Session, Call] | None:
        """Session ``index`` and its first call (None for an empty session)."""
        gen = self.workload.session(index)
        try:
            return gen, next(gen)
        except StopIteration:
            return None

    async def _drive(self, gen: Session, call: Call, due: float | None) -> None:
        """Send the session's calls in order until it ends, fails or a bound is hit."""
        res, first = self.result, True
        while True:
            if not self._may_issue():
                if not first:  # a session that never sent anything did not start
                    res.sessions_cut += 1
                gen.close()
                return
            if first:
                res.sessions_started += 1
                first = False
            ok, answer = await self._request(call, due)
            if not ok:
                res.sessions_failed += 1
                gen.close()
                return
            due = None
            try:
                call = gen.send(answer)
            except StopIteration:
                res.sessions_completed += 1
                return

    async def _request(self, call: Call, due: float | None) -> tuple[bool, Any]:
        res = self.result
        res.issued += 1
        now = self.loop.time()
        start = now if due is None else due
        tag = dict(call.tag) if due is None else {**call.tag, "send_lag_s": now - due}
        try:
            try:
                answer = await (self._sse(call, start, tag) if call.sse else self._json(call))
                measured = call.check(answer) if call.check else None
            except InvalidResponse as exc:
                raise _Failed("HTTP 200 invalid response", exc) from None
            except httpx.HTTPError as exc:
                raise _Failed(type(exc).__name__, exc) from None
            except OSError as exc:
                raise _Failed(type(exc).__name__, exc) from None
        except _Failed as failed:
            self._count_error(failed.key, failed.detail)
            return False, None
        except asyncio.CancelledError:
            self._count_error("cancelled", "the phase's hard time limit cancelled this request")
            raise
        res.ok += 1
        res.samples.append((self.loop.time() - start, {**tag, **(measured or {})}))
        if self.progress is not None:
            self.progress.update(1)
        return True, answer

    def _count_error(self, key: str, detail: str) -> None:
        self.result.errors[key] += 1
        self.result.error_samples.setdefault(key, detail)
        if self.progress is not None:
            self.progress.update(1)

    async def _json(self, call: Call) -> Any:
        r = await self.client.post(call.path, content=orjson.dumps(call.body), headers=_JSON)
        if r.status_code != 200:
            raise _Failed(_status_key(r.status_code, r.content), r.content)
        try:
            return orjson.loads(r.content)
        except orjson.JSONDecodeError:
            raise _Failed("HTTP 200 invalid JSON", r.content) from None

    async def _sse(self, call: Call, start: float, tag: dict) -> list:
        events: list = []
        async with self.client.stream("POST", call.path, content=orjson.dumps(call.body), headers=_JSON) as r:
            if r.status_code != 200:
                body = await r.aread()
                raise _Failed(_status_key(r.status_code, body), body)
            reader = sse.SSEReader()
            async for data in r.aiter_bytes():
                try:
                    payloads = reader.feed(data)
                except sse.SSEError as exc:
                    raise _Failed("HTTP 200 invalid SSE", str(exc)) from None
                for payload in payloads:
                    if sse.is_done(payload):
                        return events
                    if "ttft_s" not in tag:
                        tag["ttft_s"] = self.loop.time() - start
                    try:
                        event = orjson.loads(payload)
                    except orjson.JSONDecodeError:
                        raise _Failed("HTTP 200 invalid JSON", payload) from None
                    if isinstance(event, dict) and "error" in event:
                        err = event["error"]
                        raise _Failed(f"stream error {err.get('type') if isinstance(err, dict) else ''}".strip(), payload)
                    events.append(event)
        raise _Failed("stream ended without [DONE]", f"{len(events)} events before the end")


def make_client(base_url: str, load: LoadSpec, timeout: float) -> httpx.AsyncClient:
    """An async client for one target: keep-alive, no proxies from the environment (traffic
    must go where the URL says), enough connections for the load."""
    conns = load.concurrency if load.concurrency is not None else 1000
    return httpx.AsyncClient(base_url=base_url, timeout=timeout, trust_env=False,
                             limits=httpx.Limits(max_connections=conns, max_keepalive_connections=conns))


async def run_phase(base_url: str, workload: Workload, load: LoadSpec, bounds: Bounds, first_session: int,
                    seed: int = 0, progress=None) -> PhaseResult:
    """Run one phase against ``base_url`` (see the module docstring)."""
    async with make_client(base_url, load, bounds.timeout) as client:
        return await Phase(client, workload, load, bounds, first_session, seed, progress).run()
