"""Derender routes: thin HTTP adapters over `render_service.derender`.

| route | body | response |
|---|---|---|
| ``POST /v1/chat/completions/derender`` (alias ``POST /derender``) | ``DerenderChatRequest`` (``stream`` absent/false) or ``DerenderChatStreamRequest`` (``stream: true``) | ``ChatCompletionResponse`` or ``{"chunk", "stream_state"}`` |
| ``POST /v1/completions/derender`` | ``DerenderCompletionRequest`` / ``…StreamRequest`` | ``CompletionResponse`` or ``{"chunk", "stream_state"}`` |
| ``POST /v1/chat/completions/derender/pipe`` | header line + engine SSE bytes (see `render_service.derender.pipe`) | OpenAI SSE, written as input arrives |
| ``POST /v1/completions/derender/pipe`` | same, completions | OpenAI SSE |

Shapes: wire brief §1.6, §1.7; ``stream_state`` format: `render_service.derender.state`.
Small requests (few token ids, small body) are derendered on the event loop (a thread hop
costs more than the work); everything else, and every step of a pipe, goes through the
CPU pool's admission, so no client can hold the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import orjson
import pydantic
from starlette.requests import Request
from starlette.routing import Route

from ..derender.pipe import PipeSession
from .drain import Ended, answer_cut, shutting_down
from .responder import Responder
from ..derender.service import Derenderer
from ..errors import OpenAIError, bad_request
from ..doors import DOORS
from ..derender.known import KnownBody, KnownFields
from ..wire.derender import (ChatRequestFields, DerenderChatRequest, DerenderChatStreamRequest,
                             DerenderCompletionRequest, DerenderCompletionStreamRequest, PipeHeader)
from .admission import refusal_headers
from .common import AppContext, error_response, parse_body, read_json, small_body
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
    """The derender routes for ``ctx.bundle``."""
    d = Derenderer(ctx.bundle, ctx.config)
    # a stream's prompt ids and chat_request / completion_request come with every chunk: validated once (derender.known)
    chat = (_known("chat_request"), (DerenderChatRequest, d.chat), (DerenderChatStreamRequest, d.chat_stream))
    completion = (_known("completion_request"), (DerenderCompletionRequest, d.completion),
                  (DerenderCompletionStreamRequest, d.completion_stream))
    ctx.metrics.add_collector(_KeptStateCollector(d.live, (chat[0], completion[0])))
    return [
        *(Route(path, DerenderEndpoint(ctx, path, *chat), methods=["POST"])
          for path in (DOORS["chat"].derender_path, "/derender")),
        Route(DOORS["completion"].derender_path, DerenderEndpoint(ctx, DOORS["completion"].derender_path, *completion),
              methods=["POST"]),
        Route(DOORS["chat"].derender_path + "/pipe", PipeEndpoint(ctx, d, "chat"), methods=["POST"]),
        Route(DOORS["completion"].derender_path + "/pipe", PipeEndpoint(ctx, d, "completion"), methods=["POST"]),
    ]


def _known(request_field: str) -> KnownBody:
    """The kept fields of a derender route whose API's request comes as ``request_field``."""
    return KnownBody(("prompt_token_ids", request_field), KnownFields(request_field, ChatRequestFields))


class DerenderEndpoint:
    """Raw ASGI endpoint of a JSON derender route (``stream`` picks the streamed model and
    function): a streamed chunk is the hottest request there is, so it is called as an ASGI
    app (by `http.front` straight, else by Starlette's router without its request/response
    wrapper) and writes its two answer messages itself, without a Response object. The
    answer's head is what starlette's `JSONResponse` sends: ``content-length``, then
    ``content-type: application/json``."""

    def __init__(self, ctx: AppContext, path: str, known: KnownBody, plain: tuple[type, Callable],
                 streamed: tuple[type, Callable]) -> None:
        self.ctx, self.known, self.plain, self.streamed = ctx, known, plain, streamed
        self.chunks = ctx.metrics.derender_chunks.labels(path)  # the route's counter, looked up once

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        ctx = self.ctx
        try:
            request = Request(scope, receive)
            body = await read_json(request, ctx.config.max_body_bytes, self.known.loads)
            model, fn = self.streamed if isinstance(body, dict) and body.get("stream") is True else self.plain
            req = self.known.validate(model, body)
            ctx.check_model(req.model)
            inline = small_body(request) and _token_count(body) < INLINE_TOKENS
            result = fn(req) if inline else await ctx.run_cpu(fn, req)
            if model is self.streamed[0]:
                self.chunks.inc()
            out = orjson.dumps(result)
        except OpenAIError as err:
            return await error_response(err)(scope, receive, send)
        except Exception:  # a bug of ours: say so without leaking internals
            log.exception("derender failed")
            return await error_response(OpenAIError(500, "Internal error while derendering."))(scope, receive, send)
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

    def __init__(self, ctx: AppContext, d: Derenderer, kind: str) -> None:
        self.ctx, self.d, self.kind = ctx, d, kind

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
            await answer_cut(out, self.kind)
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

    def open_session(self, raw: Any) -> PipeSession:
        """The session for a parsed header line (subclasses serve other APIs).

        Raises:
            OpenAIError: 400 for a bad header, 404 for an unknown model.
        """
        header = validate(PipeHeader, raw)
        self.ctx.check_model(header.model)
        return PipeSession(self.d, self.kind, header)

    def error_body(self, err: OpenAIError) -> dict:
        """The JSON body of an error answered before the stream starts."""
        return err.body()

    async def _error(self, send: Callable, err: OpenAIError) -> None:
        body = orjson.dumps(self.error_body(err))
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   *refusal_headers(err)]
        await send({"type": "http.response.start", "status": err.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


__all__ = ["routes", "DerenderEndpoint", "PipeEndpoint"]
