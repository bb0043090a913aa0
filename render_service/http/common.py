"""Shared HTTP plumbing: the app context, JSON in/out, errors in the OpenAI shape."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import hmac
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..config.serve import ServeConfig
from ..errors import OpenAIError, bad_request
from ..tokenizer.budget import ENCODE_BUDGET, OverBudget
from .drain import Drain
from .cancel import watch_client
from .admission import Admission, error_json, refusal_headers
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
    drain: Drain = field(default_factory=Drain)  # ends pipes at shutdown (driver.drain, http.connections)
    # called once, at the first probe answered 200 (`serve`: the fast tokenizer's build, server.build_after_health)
    on_healthy: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        if self.admission is None:
            self.admission = Admission(CPU_THREADS, self.config.max_queue_delay_ms / 1000)

    async def run_cpu(self, fn: Callable[..., T], *args: Any, deadline: bool = True, inline: bool = False) -> T:
        """Run CPU-bound ``fn(*args)`` off the event loop (tokenizers releases the GIL).

        Waits for a pool slot at most ``--max-queue-delay-ms`` (``deadline=False`` for the
        steps of a stream that already started: they wait their turn). ``inline``: a step
        too small to be worth the hand-off to a pool thread (it costs more than rendering a
        short chat) runs on the event loop when a slot is free and nothing is queued, holding
        that slot; otherwise it queues like any step. On the loop it may encode at most
        `INLINE_ENCODE_CHARS` of new text (`tokenizer.budget`); one that would encode more
        is run again on the pool.

        Raises:
            Overloaded: 503, the pool could not start ``fn`` in time.
        """
        if inline:
            # a step that turns out to encode more than a small text goes to the pool after all
            token = ENCODE_BUDGET.set(INLINE_ENCODE_CHARS)
            try:
                ran, answer = self.admission.run_now(fn, *args)
            except OverBudget:
                ran = False
                self.admission.moved_to_pool += 1
            finally:
                ENCODE_BUDGET.reset(token)
            if ran:
                return answer
        watch_client()  # the thread runs in a copy of this request's context: it sees CLIENT_GONE (http.cancel)
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await self.admission.run(self.executor, call, deadline)

    def probe_status(self) -> int:
        """``/health`` and ``/ping``: 200, or 503 when the pool is wedged (every slot held,
        nothing finishing), so liveness restarts the pod."""
        if self.admission.wedged():
            return 503
        if self.on_healthy is not None:  # (probes run on the event loop: one caller at a time)
            hook, self.on_healthy = self.on_healthy, None
            asyncio.get_running_loop().call_soon(hook)  # once this probe's answer is written
        return 200

    def check_model(self, model: str | None) -> None:
        """404 unless ``model`` is null, one of the served names (wire brief §0) or a
        ``--lora-modules`` adapter name (rendered as the base model; `model` passes through)."""
        if model is None:  # (most derender chunks: the list below is built only for a name)
            return
        names = [*self.bundle.served_model_names, *(m["name"] for m in self.config.lora_modules)]
        if model not in names:
            raise OpenAIError(
                404, f"The model `{model}` does not exist. Valid aliases: {', '.join(names)}.", param="model"
            )


class JSONResponse(Response):
    """orjson-encoded JSON response (token id lists go straight to bytes)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(err: OpenAIError, path: str = "") -> JSONResponse:
    """``err`` in the error shape of the route at ``path`` (OpenAI's, ``code`` = HTTP status;
    Anthropic's on the Messages routes: `admission.error_json`), with ``Retry-After`` on a 503."""
    return Response(error_json(err, path), status_code=err.status, media_type="application/json",
                    headers={k.decode(): v.decode() for k, v in refusal_headers(err)} or None)


async def http_error_response(request: Request, exc: HTTPException) -> JSONResponse:
    """starlette's own errors (no route: 404; a route without this method: 405, with its
    ``Allow`` header) in the error shape of the door that owns ``path`` (`admission.error_json`:
    Anthropic's clients parse Anthropic's shape, even for a 405). An exception handler of serve,
    drive and the reference engine."""
    path = request.url.path
    if exc.status_code == 404:
        message = f"Not Found: no route {path} on this server."
        hint = getattr(request.app.state, "not_found_hints", {}).get(path.rstrip("/"))
        if hint:
            message = f"{message} {hint}"
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        message = f"Method Not Allowed: {request.method} {path}" + (f"; it takes {allowed}." if allowed else ".")
    else:
        message = str(exc.detail)
    err = OpenAIError(exc.status_code, message)
    return Response(error_json(err, path), status_code=err.status, media_type="application/json", headers=exc.headers)


PARSED_BODY = "render_service.body"
"""Scope key under which `read_json` leaves what it parsed (read by `session_key.echo`)."""

INLINE_ENCODE_CHARS = 64 * 1024
"""New text a step on the event loop may encode (~16k tokens: about a millisecond)."""

INLINE_BODY_BYTES = 16 * 1024
"""A request whose declared body is at most this small may be handled on the event loop
(a short render, a derender chunk with its stop strings and stream_state): the hand-off to
a pool thread costs more than the work."""


def first_header(request: Request, name: bytes) -> str | None:
    """The first ``name`` header's value (``name`` lower-case), as ``request.headers.get`` gives
    it (Latin-1), read from the raw headers: no Headers object per request."""
    for k, v in request.scope["headers"]:
        if k == name:
            return v.decode("latin-1")
    return None


def small_body(request: Request, limit: int = INLINE_BODY_BYTES) -> bool:
    """The request declares a body of at most ``limit`` bytes (``Content-Length``, the first
    one, read from the raw headers: no Headers object per request)."""
    for k, v in request.scope["headers"]:
        if k == b"content-length":
            return v.isdigit() and int(v) <= limit
    return False


async def read_json(request: Request, max_bytes: int, loads: Callable[[bytes], Any] = orjson.loads) -> Any:
    """Parse the body as JSON: what ``loads`` makes of its bytes (orjson's value, or e.g.
    `render.known_history.KNOWN.parse`'s value and count; ``loads`` raises orjson's errors).

    Raises:
        OpenAIError: 400 for a non-JSON content type or malformed JSON (vLLM answers 400, not
        415, for the content type), 415 for a compressed body (any ``Content-Encoding`` but
        ``identity``: routers send JSON uncompressed, and inflating would need its own size
        limit), 413 when the body exceeds ``max_bytes``, 408 when the body never arrives (the
        client hung up, or the connection's body deadline answered 408 already).
    """
    ctype = encoding = declared = None
    for k, v in request.scope["headers"]:  # the first of each, as Headers.get; no Headers object per request
        if k == b"content-type":
            ctype = v if ctype is None else ctype
        elif k == b"content-encoding":
            encoding = v if encoding is None else encoding
        elif k == b"content-length":
            declared = v if declared is None else declared
    if ctype is not None:
        ctype = ctype.decode("latin-1").split(";")[0].strip().lower()
        if ctype not in ("application/json", ""):
            raise bad_request(f"Unsupported Content-Type {ctype!r}; expected application/json.")
    if encoding is not None:
        encoding = encoding.decode("latin-1").strip().lower()
        if encoding not in ("identity", ""):
            raise OpenAIError(415, f"Content-Encoding {encoding!r} is not supported; send the body uncompressed.")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise OpenAIError(413, f"Request body is {declared.decode()} bytes; the limit is {max_bytes}.")
    chunks, size, more = [], 0, True
    while more:
        message = await request.receive()
        if message["type"] != "http.request":  # the client hung up mid-body, or the body deadline answered 408
            raise OpenAIError(408, "The request body did not arrive: the client went away or was too slow "
                                   "(--body-read-timeout, --body-min-rate).")
        chunk, more = message.get("body", b""), message.get("more_body", False)
        size += len(chunk)
        if size > max_bytes:
            raise OpenAIError(413, f"Request body exceeds the limit of {max_bytes} bytes.")
        chunks.append(chunk)
    # nothing a parse makes is garbage: the collector, run every 700 new containers, took ~7x
    # orjson's own time on the loop for a body of small ones (tests/test_body_parse_gc.py)
    enabled = gc.isenabled()
    gc.disable()
    try:
        out = parse_body(chunks[0] if len(chunks) == 1 else b"".join(chunks), loads)
    finally:
        if enabled:
            gc.enable()
    # `KNOWN.parse` answers (value, bytes parsed anew): the value is what the session key reads
    request.scope[PARSED_BODY] = out[0] if type(out) is tuple else out
    return out


MAX_BODY_DEPTH = 1024
"""Deepest nesting of lists and objects in any body, on every route: orjson's own limit (it
parses without Python recursion and refuses deeper text as ``depth limit exceeded``). A
parser that recurses on Python's stack (msgspec's scan in `derender.known`) stops sooner,
at Python's recursion limit, and hands the body to orjson, so the limit is this one
wherever the body goes."""


def parse_body(data: bytes, loads: Callable[[bytes], Any] = orjson.loads, what: str = "Request body") -> Any:
    """The one parse of every client body (JSON routes through `read_json`, the derender
    pipes' header line): what ``loads`` makes of ``data`` (``loads`` raises orjson's errors);
    ``what`` names the bytes in the messages.

    Raises:
        OpenAIError: 400 for bytes that are not UTF-8 (saying so, with the first bad byte's
        offset), for malformed JSON (orjson's message), and for nesting deeper than
        `MAX_BODY_DEPTH` (orjson's, or a ``RecursionError`` of a parser that stops sooner),
        never a 500.
    """
    try:
        return loads(data)
    except orjson.JSONDecodeError as exc:
        if exc.msg.startswith("str is not valid UTF-8"):  # orjson says "surrogates not allowed" for any bad byte
            raise bad_request(f"{what} is not UTF-8 (JSON text must be UTF-8, RFC 8259 §8.1): "
                              f"{_utf8_error(data)}.") from None
        raise bad_request(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise bad_request(f"{what} is not valid JSON: nested deeper than {MAX_BODY_DEPTH} levels.") from None


def _utf8_error(data: bytes) -> str:
    """Where ``data`` stops being UTF-8, in words."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"byte 0x{data[exc.start]:02x} at offset {exc.start} ({exc.reason})"
    return "it holds a lone surrogate"


def authorized(headers: list[tuple[bytes, bytes]], keys: tuple[str, ...]) -> bool:
    """True when the first ``Authorization`` header is ``Bearer <one of keys>`` (as vLLM:
    with several such headers the first one counts). Compared in constant time."""
    auth = next((v for k, v in headers if k == b"authorization"), b"")
    token = auth[7:] if auth[:7].lower() == b"bearer " else b""
    return any(hmac.compare_digest(token, k.encode()) for k in keys)


def unauthorized() -> OpenAIError:
    """The 401 of a missing or wrong API key."""
    return OpenAIError(401, "Missing or invalid API key.", type="AuthenticationError")
