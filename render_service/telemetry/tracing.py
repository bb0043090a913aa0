"""``--otlp-traces-endpoint``: one OpenTelemetry trace per request, exported over OTLP/HTTP.

Off by default, and then free: nothing here imports OpenTelemetry, and `span` is a shared
no-op context manager. `setup` (at start-up, in each ``--workers`` process) imports the
standard SDK lazily; `TracingMiddleware` opens a server span per HTTP request that continues
an incoming W3C ``traceparent``; the pipeline marks its steps with ``span("parse")``,
``"template"``, ``"tokenize"``, ``"media"``, ``"serialize"`` (children of the request's span,
in the worker thread too, since `AppContext.run_cpu` runs in a copy of the request's context).

The exporter speaks OTLP/HTTP protobuf to ``ENDPOINT`` (``…/v1/traces`` is appended unless the
URL already has a path), the protocol OpenTelemetry's SDK ships without gRPC.
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc`` (vLLM's default) needs the gRPC exporter installed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("render_service.tracing")

_NOOP = contextlib.nullcontext()
_tracer: Any = None  # an opentelemetry Tracer once `setup` ran
_provider: Any = None


class TracingUnavailable(RuntimeError):
    """``--otlp-traces-endpoint`` cannot be honoured here; the message says why and what to install."""


def _traces_url(endpoint: str) -> str:
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise TracingUnavailable(f"--otlp-traces-endpoint {endpoint}: expected http(s)://HOST:PORT[/v1/traces]")
    path = parts.path if parts.path not in ("", "/") else "/v1/traces"
    return f"{parts.scheme}://{parts.netloc}{path}"


def setup(endpoint: str | None, service_name: str = "render-service") -> None:
    """Start exporting spans to ``endpoint`` (None: tracing stays off).

    Raises:
        TracingUnavailable: the OpenTelemetry SDK or the exporter for the chosen protocol is not
            installed (``pip install 'render-service[otel]'``), or the endpoint is not a URL.
    """
    global _tracer, _provider
    if not endpoint or _tracer is not None:
        return
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            url = endpoint
        elif protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            url = _traces_url(endpoint)
        else:
            raise TracingUnavailable(f"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL={protocol}: expected http/protobuf or grpc")
    except ImportError as exc:
        raise TracingUnavailable(
            f"--otlp-traces-endpoint needs the OpenTelemetry SDK and its OTLP {protocol} exporter ({exc.name} is "
            "missing): pip install 'render-service[otel]'") from None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url), schedule_delay_millis=500))
    _provider, _tracer = provider, provider.get_tracer("render_service")
    log.info("exporting OpenTelemetry traces to %s (%s)", url, protocol)


def enabled() -> bool:
    """True once `setup` started an exporter."""
    return _tracer is not None


def span(name: str, **attributes: Any):
    """A child span of the current request's span, as a context manager; a shared no-op when
    tracing is off."""
    if _tracer is None:
        return _NOOP
    return _tracer.start_as_current_span(name, attributes=attributes or None)


def shutdown() -> None:
    """Flush the spans not exported yet (at process exit)."""
    if _provider is not None:
        _provider.shutdown()


class TracingMiddleware:
    """ASGI middleware: a ``SERVER`` span named ``METHOD PATH`` per HTTP request, continuing the
    caller's ``traceparent`` / ``tracestate`` (W3C trace context, what llm-d's token-producer
    sends), with the status code and ``X-Request-Id`` as attributes."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or _tracer is None:
            await self.app(scope, receive, send)
            return
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or []}
        parent = TraceContextTextMapPropagator().extract(headers)
        name = f"{scope.get('method', 'GET')} {scope.get('path', '')}"
        with _tracer.start_as_current_span(name, context=parent, kind=SpanKind.SERVER, attributes={
                "http.request.method": scope.get("method", ""), "url.path": scope.get("path", ""),
                "render.request_id": headers.get("x-request-id", "")}) as server_span:

            async def send_status(message) -> None:
                if message["type"] == "http.response.start":
                    server_span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        server_span.set_status(Status(StatusCode.ERROR))
                await send(message)

            await self.app(scope, receive, send_status)
