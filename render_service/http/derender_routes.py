"""Derender routes of every door (`doors.DOORS`): thin HTTP adapters over `doors.session`.

| route | body | response |
|---|---|---|
| ``POST /v1/chat/completions/derender`` (alias ``POST /derender``) | ``DerenderChatRequest`` (``stream`` absent/false) or ``DerenderChatStreamRequest`` (``stream: true``) | ``ChatCompletionResponse`` or ``{"chunk", "stream_state"}`` |
| ``POST /v1/completions/derender`` | ``DerenderCompletionRequest`` / ``…StreamRequest`` | ``CompletionResponse`` or ``{"chunk", "stream_state"}`` |
| ``POST /v1/responses/derender`` | ``{generate_response, prompt_token_ids, responses_request}``, or ``stream: true`` with ``generate_chunk`` + ``stream_state`` | ``Response``, or ``{"events", "stream_state"}`` |
| ``POST /v1/messages/derender`` | same with ``messages_request`` | Anthropic ``message``, or ``{"events", "stream_state"}`` |
| ``POST <each of those>/pipe`` | header line + engine SSE bytes (see `render_service.doors.pipe`) | the API's SSE, written as input arrives |

Shapes: wire brief §1.6, §1.7; ``stream_state`` format: `render_service.derender.state`.
Errors are in the door's shape (``door.error_body``: Anthropic's for Messages).
Small requests (few token ids, small body) are derendered on the event loop (a thread hop
costs more than the work); everything else, and every step of a pipe, goes through the
CPU pool's admission, so no client can hold the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Callable

import orjson
import pydantic
from pydantic import create_model
from starlette.requests import Request
from starlette.routing import Route

from .drain import Ended, answer_cut, shutting_down
from .responder import Responder
from ..derender.service import Derenderer
from ..errors import OpenAIError, bad_request
from ..doors import DOORS, Door
from ..doors.pipe import Pipe
from ..doors.session import Derender
from ..derender.known import KnownBody, KnownFields
from .admission import refusal_headers
from .common import AppContext, parse_body, read_json, small_body
from ..wire.validate import validate

log = logging.getLogger(__name__)

INLINE_TOKENS = 256  # below this many ids, and a small body (common.small_body), a request is derendered inline


def _token_count(body: dict) -> int:
    gens = body.get("generate_responses") or [body.get("generate_response") or body.get("generate_chunk") or {}]
    total = 0
    for g in gens:
        for ch in (g.get("choices") or []) if isinstance(g, dict) else []:
            ids = ch.get("token_ids") if isinstance(ch, dict) else None
            total += len(ids) if isinstance(ids, list) else 0
    return total


def routes(ctx: AppContext) -> list[Route]:
    """The derender routes of every door for ``ctx.bundle``."""
    d = Derenderer(ctx.bundle, ctx.config)
    derender = Derender(d)
    out, known = [], []
    for door in DOORS.values():
        # a stream's prompt ids and the API's request come with every chunk: validated once (derender.known)
        body = _known(door)
        known.append(body)
        whole, stream = functools.partial(derender.whole, door), functools.partial(derender.stream, door)
        out += [Route(path, DerenderEndpoint(ctx, path, door, body, whole, stream), methods=["POST"])
                for path in (door.derender_path, *door.derender_aliases)]
        out.append(Route(door.derender_path + "/pipe", PipeEndpoint(ctx, d, door), methods=["POST"]))
    ctx.metrics.add_collector(_KeptStateCollector(d.live, tuple(known)))
    return out


def _known(door: Door) -> KnownBody:
    """The kept fields of ``door``'s derender route (its API's request comes as ``door.request_field``)."""
    fields = door.answer.request_fields  # a parsed request kept by the keys it reads (chat, completions)
    fallback = KnownFields(door.request_field, fields) if fields is not None else None
    return KnownBody(("prompt_token_ids", door.request_field), fallback)


@functools.cache
def _nullable(model: type, field: str) -> type:
    """``model`` with a required ``field`` that also admits null (what `KnownBody` validates a
    body with, the field's known value set after); ``model`` itself when it admits null."""
    info = model.model_fields[field]
    if not info.is_required():
        return model
    return create_model(model.__name__, __base__=model, **{field: (info.annotation | None, ...)})


async def send_error(send: Callable, door: Door, err: OpenAIError, pipe: bool = False) -> None:
    """Answer ``err`` in ``door``'s shape, ``Retry-After`` on a 503; the head as each route
    always sent it (a JSON route: starlette's order; a pipe: content-type first)."""
    body = orjson.dumps(door.error_body(err))
    length, kind = (b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")
    headers = [kind, length, *refusal_headers(err)] if pipe else [*refusal_headers(err), length, kind]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class DerenderEndpoint:
    """Raw ASGI endpoint of a JSON derender route (``stream`` picks the streamed model and
    function): a streamed chunk is the hottest request there is, so it is called as an ASGI
    app (by `http.front` straight, else by Starlette's router without its request/response
    wrapper) and writes its two answer messages itself, without a Response object. The
    answer's head is what starlette's `JSONResponse` sends: ``content-length``, then
    ``content-type: application/json``."""

    def __init__(self, ctx: AppContext, path: str, door: Door, known: KnownBody, whole: Callable,
                 stream: Callable) -> None:
        self.ctx, self.door, self.known = ctx, door, known
        field = door.request_field
        self.plain = (door.derender_request, _nullable(door.derender_request, field), whole)
        self.streamed = (door.derender_stream_request, _nullable(door.derender_stream_request, field), stream)
        self.chunks = ctx.metrics.derender_chunks.labels(path)  # the route's counter, looked up once

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        ctx = self.ctx
        try:
            request = Request(scope, receive)
            body = await read_json(request, ctx.config.max_body_bytes, self.known.loads)
            streamed = isinstance(body, dict) and body.get("stream") is True
            model, kept, fn = self.streamed if streamed else self.plain
            field = self.door.request_field
            if isinstance(body, dict) and field in body and body[field] is None:
                req = validate(model, body)  # the model's own answer to a null request
            else:
                req = self.known.validate(kept, body)
            ctx.check_model(req.model)
            inline = small_body(request) and _token_count(body) < INLINE_TOKENS
            result = fn(req) if inline else await ctx.run_cpu(fn, req)
            if streamed:
                self.chunks.inc()
            out = orjson.dumps(result)
        except OpenAIError as err:
            return await send_error(send, self.door, err)
        except Exception:  # a bug of ours: say so without leaking internals
            log.exception("%s derender failed", self.door.name)
            return await send_error(send, self.door, OpenAIError(500, "Internal error while derendering."))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(out)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": out})


class _KeptStateCollector:
    """/metrics: how often a stream's chunk continued on a kept session (`derender.live`) and
    its request fields were already validated (`derender.known`), read at scrape time."""

    def __init__(self, live: Any, known: tuple[KnownBody, ...]) -> None:
        self.live, self.known = live, known

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        continued = CounterMetricFamily("render_service_derender_live_continued",
                                        "Streamed derender chunks continued on this process's kept session")
        continued.add_metric([], self.live.hits)
        kept = GaugeMetricFamily("render_service_derender_live_streams", "Streams kept live for their next chunk")
        kept.add_metric([], len(self.live))
        known = CounterMetricFamily("render_service_derender_known_fields_hits",
                                    "Streamed chunks whose request fields were validated before", labels=["field"])
        per_field: dict[str, int] = {}  # one sample per field: both routes keep prompt_token_ids
        for body in self.known:
            for field, hits in body.hits.items():
                fallback = body.fallback if body.fallback is not None and body.fallback.field == field else None
                per_field[field] = per_field.get(field, 0) + hits + (fallback.hits if fallback is not None else 0)
        for field, hits in per_field.items():
            known.add_metric([field], hits)
        yield from (continued, kept, known)


class PipeEndpoint:
    """Raw ASGI endpoint: reads the request body while writing the response (full duplex
    over HTTP/1.1 chunked transfer; a client that first sends everything also works)."""

    MAX_HEADER_BYTES = 32 * 1024 * 1024

    def __init__(self, ctx: AppContext, d: Derenderer, door: Door) -> None:
        self.ctx, self.d, self.door = ctx, d, door

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        buf, more = b"", True
        while b"\n" not in buf and more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            buf += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(buf) > min(self.MAX_HEADER_BYTES, self.ctx.config.max_body_bytes) and b"\n" not in buf:
                return await self._error(send, OpenAIError(413, "The pipe header line is too long."))
        line, _, rest = buf.partition(b"\n")
        try:
            raw = parse_body(line, what="The first line of a pipe request (its JSON header object)")
            session = await self.ctx.run_cpu(self.open_session, raw)
        except OpenAIError as err:
            return await self._error(send, err)
        except pydantic.ValidationError as exc:  # pragma: no cover - validate() converts these
            return await self._error(send, bad_request(str(exc)))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        ended = Ended()
        work = asyncio.create_task(self._stream(session, rest, more, receive, send))
        self.ctx.drain.track(work, ended)
        try:
            await asyncio.wait({work})
        finally:
            self.ctx.drain.untrack(work)
            work.cancel()  # when we were cancelled ourselves
        if shutting_down(work, ended):  # shutdown: an error event and the stream's end, not a cut
            out = Responder(send)
            out.started = True
            await answer_cut(out, self.door)
            return
        work.result()

    async def _stream(self, session: Any, rest: bytes, more: bool, receive: Callable, send: Callable) -> None:
        """The body of a started pipe: engine bytes in, the API's SSE out."""
        # Each event's derender runs in the pool: a started stream waits its turn (no deadline).
        out = await self.ctx.run_cpu(session.feed, rest, deadline=False)
        while more:
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            more = msg.get("more_body", False)
            out = await self.ctx.run_cpu(session.feed, msg.get("body", b""), deadline=False)
        out += await self.ctx.run_cpu(session.close, deadline=False)
        await send({"type": "http.response.body", "body": out, "more_body": False})

    def open_session(self, raw: Any) -> Pipe:
        """The pipe for a parsed header line.

        Raises:
            OpenAIError: 400 for a bad header, 404 for an unknown model.
        """
        door = self.door
        header = validate(door.pipe_header, raw)
        self.ctx.check_model(header.model or getattr(getattr(header, door.request_field), "model", None))
        return Pipe(self.d, door, header)

    async def _error(self, send: Callable, err: OpenAIError) -> None:
        await send_error(send, self.door, err, pipe=True)


__all__ = ["routes", "DerenderEndpoint", "PipeEndpoint"]
