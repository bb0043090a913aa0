"""Request metrics: vLLM's HTTP series, plus ours (one registry per app, served on ``/metrics``).

vLLM's render server instruments every route but ``/metrics``, ``/health``, ``/load``,
``/ping``, ``/version`` and ``/server_info`` with `prometheus-fastapi-instrumentator`'s
defaults, and dashboards and llm-d's autoscaling read those series; we install the same
library the same way, so the names and labels are the same:
``http_requests_total{handler,method,status}`` (status grouped ``2xx``/``4xx``/…),
``http_request_duration_seconds{handler,method}``, ``http_request_duration_highr_seconds``,
``http_request_size_bytes{handler}``, ``http_response_size_bytes{handler}``.

Ours (documented in the README):
``render_service_requests_total{route,status}`` (exact status code),
``render_service_request_duration_seconds{route}`` (finer buckets, for render's millisecond
latencies), ``render_service_prompt_tokens_total{route}`` (prompt tokens rendered),
``render_service_derender_chunks_total{route}`` (streamed chunks derendered) and
``render_service_requests_in_flight`` (also ``GET /load``'s ``server_load``).
"""

from __future__ import annotations

import time

import prometheus_client
from prometheus_fastapi_instrumentator import Instrumentator
from starlette.types import ASGIApp, Receive, Scope, Send

# The handlers vLLM leaves out of the HTTP series (entrypoints/serve/instrumentator/metrics.py).
EXCLUDED_HANDLERS = ["/metrics", "/health", "/load", "/ping", "/version", "/server_info"]
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServiceMetrics:
    """The app's metric registry and our own series; `install` wires the middlewares."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        r = self.registry
        self.requests = prometheus_client.Counter(
            "render_service_requests", "Requests by route and exact status code", ["route", "status"], registry=r)
        self.latency = prometheus_client.Histogram(
            "render_service_request_duration_seconds", "Time from request to last response byte, by route",
            ["route"], buckets=_LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = prometheus_client.Counter(
            "render_service_prompt_tokens", "Prompt tokens rendered", ["route"], registry=r)
        self.derender_chunks = prometheus_client.Counter(
            "render_service_derender_chunks", "Streamed chunks derendered", ["route"], registry=r)
        self.in_flight = prometheus_client.Gauge(
            "render_service_requests_in_flight", "Requests being served (GET /load reports the same)", registry=r)
        self._in_flight = 0

    @property
    def server_load(self) -> int:
        """Requests in flight, the ``/load`` route's own request excluded."""
        return max(self._in_flight - 1, 0)

    def install(self, app, routes: list) -> None:
        """Add vLLM's HTTP instrumentation and ours to ``app`` (a Starlette app)."""
        Instrumentator(excluded_handlers=EXCLUDED_HANDLERS, registry=self.registry).add().instrument(app)
        paths = {getattr(r, "path", None) for r in routes} - {None}
        app.add_middleware(_RouteStats, metrics=self, paths=paths)

    def rendered(self, route: str, result) -> None:
        """Count the prompt tokens of a render answer (one `GenerateRequest` or a list of them)."""
        items = result if isinstance(result, list) else [result]
        self.prompt_tokens.labels(route).inc(sum(len(item.get("token_ids") or ()) for item in items))


class _RouteStats:
    """In-flight count, per-route status and latency (routes the app serves; others are ``other``)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, paths: set[str]) -> None:
        self.app, self.metrics, self.paths = app, metrics, paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope.get("path", "") if scope.get("path", "") in self.paths else "other"
        status = 500
        m = self.metrics

        async def send_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        m._in_flight += 1
        m.in_flight.inc()
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send_status)
        finally:
            m._in_flight -= 1
            m.in_flight.dec()
            m.latency.labels(route).observe(time.perf_counter() - start)
            m.requests.labels(route, str(status)).inc()
