"""Request metrics: vLLM's HTTP series and ours, one middleware, merged across ``--workers``.

vLLM's render server instruments every route but ``/metrics``, ``/health``, ``/load``,
``/ping``, ``/version`` and ``/server_info`` with `prometheus-fastapi-instrumentator`'s
defaults, and dashboards and llm-d's autoscaling read those series. We produce the same
series — names, labels, buckets, help texts — from our own middleware:
``http_requests_total{handler,method,status}`` (status grouped ``2xx``/``4xx``/…),
``http_request_duration_seconds{handler,method}`` (buckets 0.1, 0.5, 1),
``http_request_duration_highr_seconds`` (no labels, 21 buckets),
``http_request_size_bytes{handler}`` and ``http_response_size_bytes{handler}`` (summaries of
the ``Content-Length`` headers, 0 without one); ``handler`` is the route's path, ``none``
for a path no route serves. (The library's middleware built a Request, a Response and
an Info object and matched every route per request: 30 % of a small render's CPU, with
our second middleware.)

Ours (documented in the README):
``render_service_requests_total{route,status}`` (exact status code),
``render_service_request_duration_seconds{route}`` (finer buckets, for render's millisecond
latencies), ``render_service_prompt_tokens_total{route}`` (prompt tokens rendered),
``render_service_derender_chunks_total{route}`` (streamed chunks derendered) and
``render_service_requests_in_flight`` (also ``GET /load``'s ``server_load``, per worker).

In one process the series are `plain_metrics` families (plain numbers, no locks: they are
updated from the event loop only); with several workers, prometheus_client's own classes.

Several workers (``serve --workers N``): `prepare_multiprocess_dir` sets
``PROMETHEUS_MULTIPROC_DIR`` before the workers start, so every worker's series live in
memory-mapped files there (prometheus_client's multiprocess mode) and whichever worker
answers ``/metrics`` merges them all: counters and histograms are summed over every worker
that ever ran (so they never go back when a worker is replaced), in-flight gauges summed
over live workers. Series computed at scrape time (the tokenizer cache's, admission's, the
process collector's) are mirrored into such files by each worker once a second and at each
of its scrapes (`_Mirror`): counters summed, gauges summed over live workers except the
ratios (saturation, busy fraction, queue delay: the busiest worker's) and the start time (the
oldest live worker's).
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import shutil
import tempfile
import time
from typing import Any, Iterable

import prometheus_client
from prometheus_client import multiprocess, values
from starlette.types import ASGIApp, Receive, Scope, Send

from . import plain_metrics

try:
    from starlette.routing import get_route_path
except ImportError:  # starlette < 0.35
    def get_route_path(scope: Scope) -> str:
        return scope["path"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# The handlers vLLM leaves out of the HTTP series (entrypoints/serve/instrumentator/metrics.py);
# like the library, each is a regular expression searched in the handler.
EXCLUDED_HANDLERS = ["/metrics", "/health", "/load", "/ping", "/version", "/server_info"]
# prometheus-fastapi-instrumentator 7/8 `metrics.default()` buckets (vLLM uses the defaults).
HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10, 30, 60)
LOWR_BUCKETS = (0.1, 0.5, 1)
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# How mirrored gauges merge (default: summed over live workers). Ratios of one worker's capacity:
# the pod reports its busiest worker; a start time: the oldest live worker's.
_GAUGE_MODES = {"render_service_saturation": "livemax", "render_service_busy_fraction": "livemax",
                "render_service_queue_delay_seconds": "livemax", "process_max_fds": "livemax", "python_info": "livemax",
                "process_start_time_seconds": "livemin"}
MIRROR_PERIOD_S = 1.0


def multiprocess_mode() -> bool:
    """True when prometheus_client keeps values in ``PROMETHEUS_MULTIPROC_DIR`` (the variable
    was set before it was imported: a ``--workers`` worker)."""
    return bool(os.environ.get(MULTIPROC_ENV)) and values.ValueClass is not values.MutexValue


def prepare_multiprocess_dir() -> str:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` for ``--workers`` processes about to start: the
    operator's directory if set (its stale ``*.db`` files removed, as prometheus_client
    requires), else a new one under the temporary directory (``TMPDIR``; on a read-only
    root file system mount one there), removed at exit. Returns the directory."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        os.makedirs(given, exist_ok=True)
        for stale in glob.glob(os.path.join(given, "*.db")):
            os.remove(stale)
        return given
    path = tempfile.mkdtemp(prefix="render-service-metrics-")
    atexit.register(shutil.rmtree, path, True)
    os.environ[MULTIPROC_ENV] = path
    return path


class ServiceMetrics:
    """The app's request series, its scrape-time collectors, and ``/metrics``' text.

    `RequestMetrics` (the render server's `front.Front`) counts requests; `add_collector` registers a
    collector read at scrape time (tokenizer cache, admission); `exposition` is the body of
    ``/metrics`` (this worker's series, or every worker's merged in multiprocess mode).
    """

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        self.multiprocess = multiprocess_mode()
        r = self.registry
        # one process: lock-free families (plain_metrics); several: the library's, kept in shared files
        lib = prometheus_client if self.multiprocess else plain_metrics
        counter, histogram, summary = lib.Counter, lib.Histogram, lib.Summary
        # vLLM's series, with prometheus-fastapi-instrumentator's names and help texts
        self.http_total = counter("http_requests_total", "Total number of requests by method, status and handler.",
                                  ("method", "status", "handler"), registry=r)
        self.http_in_size = summary(
            "http_request_size_bytes", "Content length of incoming requests by handler. Only value of header is "
            "respected. Otherwise ignored. No percentile calculated. ", ("handler",), registry=r)
        self.http_out_size = summary(
            "http_response_size_bytes", "Content length of outgoing responses by handler. Only value of header is "
            "respected. Otherwise ignored. No percentile calculated. ", ("handler",), registry=r)
        self.http_highr = histogram(
            "http_request_duration_highr_seconds", "Latency with many buckets but no API specific labels. Made for "
            "more accurate percentile calculations. ", buckets=HIGHR_BUCKETS, registry=r)
        self.http_lowr = histogram(
            "http_request_duration_seconds", "Latency with only few buckets by handler. Made to be only used if "
            "aggregation by handler is important. ", ("method", "handler"), buckets=LOWR_BUCKETS, registry=r)
        # ours
        self.requests = counter("render_service_requests", "Requests by route and exact status code",
                                ["route", "status"], registry=r)
        self.latency = histogram("render_service_request_duration_seconds",
                                 "Time from request to last response byte, by route", ["route"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = counter("render_service_prompt_tokens", "Prompt tokens rendered", ["route"], registry=r)
        self.derender_chunks = counter("render_service_derender_chunks", "Streamed chunks derendered", ["route"],
                                       registry=r)
        self.in_flight = lib.Gauge(
            "render_service_requests_in_flight", "Requests being served (GET /load reports the same)",
            registry=r, multiprocess_mode="livesum")
        self._in_flight = 0
        self._collectors: list[Any] = []
        self._mirror = _Mirror() if self.multiprocess else None

    @property
    def server_load(self) -> int:
        """Requests in flight in this worker, the ``/load`` route's own request excluded."""
        return max(self._in_flight - 1, 0)

    def add_collector(self, collector) -> None:
        """Read ``collector`` (a prometheus collector) at every scrape (mirrored in multiprocess mode)."""
        self._collectors.append(collector)

    def rendered(self, route: str, result) -> None:
        """Count the prompt tokens of a render answer (one `GenerateRequest` or a list of them)."""
        items = result if isinstance(result, list) else [result]
        self.prompt_tokens.labels(route).inc(sum(len(item.get("token_ids") or ()) for item in items))

    def tick(self) -> None:
        """Mirror the scrape-time collectors now if a period has passed (multiprocess mode)."""
        if self._mirror is not None:
            self._mirror.maybe_publish(self._scrape_time_collectors())

    def _scrape_time_collectors(self) -> list:
        return [*self._collectors, prometheus_client.PROCESS_COLLECTOR, prometheus_client.PLATFORM_COLLECTOR]

    def exposition(self) -> bytes:
        """The ``/metrics`` body in Prometheus' text format."""
        if self._mirror is None:
            registry = prometheus_client.CollectorRegistry()
            for c in self._collectors:
                registry.register(c)
            return b"".join(prometheus_client.generate_latest(r)
                            for r in (prometheus_client.REGISTRY, registry, self.registry))
        self._mirror.publish(self._scrape_time_collectors())
        _forget_dead_workers(os.environ[MULTIPROC_ENV])
        merged = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)
        return prometheus_client.generate_latest(merged)


class RequestMetrics:
    """Pure ASGI middleware: every request series above from one send wrapper.

    Label children are cached per (handler, method, status), so a request costs a few
    dictionary look-ups and value increments.
    """

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, paths: set[str]) -> None:
        self.app, self.metrics, self.paths = app, metrics, paths
        excluded = [re.compile(p) for p in EXCLUDED_HANDLERS]
        self._excluded = {h for h in [*paths, "none"] if any(p.search(h) for p in excluded)}
        self._children: dict[tuple, tuple] = {}

    def _bound(self, route: str, handler: str, method: str, status: int) -> tuple:
        key = (route, method, status)
        found = self._children.get(key)
        if found is None:
            m = self.metrics
            ours = (m.requests.labels(route, str(status)), m.latency.labels(route))
            http = None if handler in self._excluded else (
                m.http_total.labels(method, f"{str(status)[0]}xx", handler), m.http_lowr.labels(method, handler),
                m.http_in_size.labels(handler), m.http_out_size.labels(handler))
            found = self._children[key] = (ours, http)
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = get_route_path(scope)
        status, out_size = 500, 0

        async def send_wrapper(message) -> None:
            nonlocal status, out_size
            if message["type"] == "http.response.start":
                status = message["status"]
                for k, v in message.get("headers") or ():
                    if k.lower() == b"content-length":
                        out_size = int(v)
                        break
            await send(message)

        m = self.metrics
        m._in_flight += 1
        m.in_flight.inc()
        start = time.perf_counter()
        try:
            await self.handle(scope, receive, send_wrapper)
        finally:
            elapsed = max(time.perf_counter() - start, 0.0)
            m._in_flight -= 1
            m.in_flight.dec()
            known = path in self.paths
            (requests, latency), http = self._bound(path if known else "other", path if known else "none",
                                                    scope["method"], int(status))
            requests.inc()
            latency.observe(elapsed)
            if http is not None:
                total, lowr, in_size, out = http
                total.inc()
                lowr.observe(elapsed)
                m.http_highr.observe(elapsed)
                in_size.observe(_content_length(scope["headers"]))
                out.observe(out_size)
            m.tick()


    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The request inside the series: the wrapped app (`front.Front` does more here)."""
        await self.app(scope, receive, send)


def _content_length(headers: Iterable[tuple[bytes, bytes]]) -> int:
    for k, v in headers:
        if k == b"content-length":
            try:
                return int(v)
            except ValueError:
                return 0
    return 0


class _Mirror:
    """Copies scrape-time collectors into multiprocess files, so any worker's scrape sees
    every worker's values: counter families → counters (incremented by what they grew),
    gauge families → gauges (``livesum``, or as `_GAUGE_MODES` says)."""

    def __init__(self) -> None:
        self._metrics: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._last: dict[tuple, float] = {}
        self._next = 0.0

    def maybe_publish(self, collectors: list) -> None:
        now = time.monotonic()
        if now >= self._next:
            self.publish(collectors, now)

    def publish(self, collectors: list, now: float | None = None) -> None:
        self._next = (time.monotonic() if now is None else now) + MIRROR_PERIOD_S
        for collector in collectors:
            for family in collector.collect():
                if family.type not in ("counter", "gauge", "info"):
                    continue
                for sample in family.samples:
                    if family.type == "counter" and not sample.name.endswith("_total"):
                        continue  # `_created`: per process, meaningless summed
                    self._set(family, sample)

    def _set(self, family, sample) -> None:
        labels = tuple(sorted(sample.labels))
        key = (family.name, labels)
        metric = self._metrics.get(key)
        if metric is None:
            if family.type == "counter":
                metric = prometheus_client.Counter(family.name, family.documentation or family.name, labels,
                                                   registry=None)
            else:
                mode = _GAUGE_MODES.get(family.name, "livesum")
                metric = prometheus_client.Gauge(family.name, family.documentation or family.name, labels,
                                                 registry=None, multiprocess_mode=mode)
            self._metrics[key] = metric
        child = metric.labels(*(sample.labels[k] for k in labels)) if labels else metric
        if family.type == "counter":
            sample_key = (key, tuple(sample.labels[k] for k in labels))
            grew = sample.value - self._last.get(sample_key, 0.0)
            if grew > 0:
                child.inc(grew)
                self._last[sample_key] = sample.value
        else:
            child.set(sample.value)


_LIVE_FILE = re.compile(r"gauge_live\w+_(\d+)\.db$")


def _forget_dead_workers(path: str) -> None:
    """Drop the live gauges of workers that are gone (uvicorn replaced them), as
    prometheus_client's ``mark_process_dead`` would if the supervisor were ours."""
    for name in os.listdir(path):
        m = _LIVE_FILE.match(name)
        if m is None:
            continue
        pid = int(m.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, path)
        except PermissionError:
            pass
