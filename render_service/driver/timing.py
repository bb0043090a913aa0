"""Per-hop timing of one request, its ``Server-Timing`` text, and the driver's Prometheus metrics.

Hops (milliseconds in ``Server-Timing``, seconds in Prometheus):

- ``render``: chat/completions request → `GenerateRequest` (in-process or HTTP);
- ``prefill``: the prefill leg, request sent → response read;
- ``kv_handoff``: prefill done → first decode token received (decode's KV pull, the prompt
  tail it recomputes, and its first step);
- ``decode``: first decode token → decode stream ended (or aborted);
- ``derender``: time spent derendering, summed over chunks;
- ``total``: request received → response complete (or → headers sent, in a stream's header).

Several prompts in one completions request add up their legs' times.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

HOPS = ("render", "prefill", "kv_handoff", "decode", "derender")
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class HopTimer:
    """Durations of one request's hops, plus what decode reported about its KV (``kv_source``)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.kv_source: str | None = None

    def add(self, hop: str, seconds: float) -> None:
        self.seconds[hop] = self.seconds.get(hop, 0.0) + seconds

    @contextlib.contextmanager
    def measure(self, hop: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(hop, time.perf_counter() - t)

    def server_timing(self) -> str:
        """``render;dur=1.2, prefill;dur=30.5, …, total;dur=…, kv;desc="remote"`` (hops so far)."""
        parts = [f"{hop};dur={self.seconds[hop] * 1000:.1f}" for hop in HOPS if hop in self.seconds]
        parts.append(f"total;dur={(time.perf_counter() - self.started) * 1000:.1f}")
        if self.kv_source:
            parts.append(f'kv;desc="{self.kv_source}"')
        return ", ".join(parts)


class DriverMetrics:
    """Prometheus metrics of one driver, in their own registry (several drivers may share a
    process in tests). Names: ``render_service_driver_*``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.hop_seconds = Histogram("render_service_driver_hop_duration_seconds",
                                     "Time spent in each hop of a request (see docs/driver.md)",
                                     ["hop"], buckets=_BUCKETS, registry=r)
        self.requests = Counter("render_service_driver_requests", "Client requests by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.upstream_errors = Counter("render_service_driver_upstream_errors",
                                       "Failed upstream calls by hop and the status sent to the client",
                                       ["hop", "status"], registry=r)
        self.aborts = Counter("render_service_driver_aborts",
                              "Engine legs aborted by the driver, by reason", ["reason"], registry=r)
        self.kv_source = Counter("render_service_driver_decode_kv_source",
                                 "Decode legs by where their prompt KV came from (engine metrics.kv_source)",
                                 ["source"], registry=r)
        self.in_flight = Gauge("render_service_driver_requests_in_flight", "Client requests being served",
                               registry=r)

    def server_load(self) -> int:
        """Client requests being served (``GET /load``)."""
        return int(self.registry.get_sample_value("render_service_driver_requests_in_flight") or 0)

    def observe(self, timer: HopTimer) -> None:
        for hop, s in timer.seconds.items():
            self.hop_seconds.labels(hop).observe(s)
        self.hop_seconds.labels("total").observe(time.perf_counter() - timer.started)
        if timer.kv_source:
            self.kv_source.labels(timer.kv_source).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
