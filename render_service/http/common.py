"""Shared HTTP plumbing: the app context, JSON in/out, errors in the OpenAI shape."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..config import ServeConfig
from ..errors import OpenAIError, bad_request
from ..wire.validate import validate  # noqa: F401  (routes import it from here)
from .admission import Admission, Overloaded
from .metrics import ServiceMetrics

T = TypeVar("T")
CPU_THREADS = 4  # render/derender steps running at once per worker process


@dataclass
class AppContext:
    """What every route needs: the loaded model, the config, a CPU pool.

    ``bundle`` is a `render_service.model.ModelBundle`.
    """

    bundle: Any
    config: ServeConfig
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=CPU_THREADS, thread_name_prefix="cpu"))
    admission: Admission | None = None  # built from ``config`` when not given
    # `render_service.multimodal.MultimodalRenderer` when the model takes images/video, else None.
    multimodal: Any = None
    metrics: ServiceMetrics = field(default_factory=ServiceMetrics)  # request series, /load

    def __post_init__(self) -> None:
        if self.admission is None:
            self.admission = Admission(CPU_THREADS, self.config.max_queue_delay_ms / 1000)

    async def run_cpu(self, fn: Callable[..., T], *args: Any, deadline: bool = True, inline: bool = False) -> T:
        """Run CPU-bound ``fn(*args)`` off the event loop (tokenizers releases the GIL).

        Waits for a pool slot at most ``--max-queue-delay-ms`` (``deadline=False`` for the
        steps of a stream that already started: they wait their turn). ``inline``: a step
        too small to be worth the hand-off to a pool thread (it costs more than rendering a
        short chat) runs on the event loop, still holding its slot.

        Raises:
            Overloaded: 503, the pool could not start ``fn`` in time.
        """
        async with self.admission.slot(deadline):
            if inline:
                return fn(*args)
            # The thread runs in a copy of this request's context (it sees CLIENT_GONE, see http.cancel).
            call = functools.partial(contextvars.copy_context().run, fn, *args)
            return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    def check_model(self, model: str | None) -> None:
        """404 unless ``model`` is null or one of the served names (wire brief §0)."""
        names = self.bundle.served_model_names
        if model is not None and model not in names:
            raise OpenAIError(
                404, f"The model `{model}` does not exist. Valid aliases: {', '.join(names)}.", param="model"
            )


class JSONResponse(Response):
    """orjson-encoded JSON response (token id lists go straight to bytes)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(err: OpenAIError) -> JSONResponse:
    """The OpenAI error shape with ``code`` = HTTP status (and ``Retry-After`` on overload)."""
    headers = {"Retry-After": str(err.retry_after_s)} if isinstance(err, Overloaded) else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


async def http_error_response(request: Request, exc: HTTPException) -> JSONResponse:
    """starlette's own errors (no route: 404; a route without this method: 405, with its
    ``Allow`` header) in the OpenAI error shape (Anthropic's on `ANTHROPIC_PATHS`). An exception handler of serve, drive and
    the reference engine."""
    path = request.url.path
    if exc.status_code == 404:
        message = f"Not Found: no route {path} on this server."
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        message = f"Method Not Allowed: {request.method} {path}" + (f"; it takes {allowed}." if allowed else ".")
    else:
        message = str(exc.detail)
    err = OpenAIError(exc.status_code, message)
    if path.rstrip("/") in ANTHROPIC_PATHS:  # Anthropic's clients parse Anthropic's shape, even for a 405
        from ..wire.frontdoors import anthropic_error_body

        return JSONResponse(anthropic_error_body(err), status_code=err.status, headers=exc.headers)
    return JSONResponse(err.body(), status_code=err.status, headers=exc.headers)


ANTHROPIC_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})
"""The routes that answer in Anthropic's error shape (``/v1/messages/render`` is vLLM's, OpenAI-shaped)."""


async def read_json(request: Request, max_bytes: int) -> Any:
    """Parse the body as JSON.

    Raises:
        OpenAIError: 400 for a non-JSON content type or malformed JSON (vLLM answers 400, not
        415, for the content type), 415 for a compressed body (any ``Content-Encoding`` but
        ``identity``: routers send JSON uncompressed, and inflating would need its own size
        limit), 413 when the body exceeds ``max_bytes``.
    """
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype not in ("application/json", ""):
        raise bad_request(f"Unsupported Content-Type {ctype!r}; expected application/json.")
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", ""):
        raise OpenAIError(415, f"Content-Encoding {encoding!r} is not supported; send the body uncompressed.")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise OpenAIError(413, f"Request body is {declared} bytes; the limit is {max_bytes}.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise OpenAIError(413, f"Request body exceeds the limit of {max_bytes} bytes.")
        chunks.append(chunk)
    try:
        return orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"Request body is not valid JSON: {exc}") from None


