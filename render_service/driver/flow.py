"""`Driver`: one client request through render → prefill → decode → derender.

Theory of operation
-------------------
For each client request, whatever its door (chat, completions, Responses, Messages: the
door's flow renders it and words the answer)::

    render ─▶ for each rendered prompt:  prefill leg ─▶ decode leg (always SSE) ─┐
                                                                                 ▼
    client ◀── OpenAI JSON or SSE ◀────────────── derender (per chunk or whole) ◀┘

1. **render** (`hops`) gives one `GenerateRequest` per prompt; its ``request_id``
   (``chatcmpl-<id>``, ``<id>`` = ``X-Request-Id`` | body ``request_id`` | random) is sent as
   ``X-Request-Id`` on both legs, so both engines call the request
   ``generate-tokens-<request_id>`` — the id `abort` uses.
2. **prefill** (`legs.prefill_leg`) on the prefill pool; its ``kv_transfer_params`` go to
   decode verbatim.
3. **decode** (`legs.decode_leg`) is streamed whatever the client asked. Stream clients get
   each chunk derendered as it arrives; the response headers are sent once the decode
   engine has answered 200 (before its first token, so the client's TTFT is the engine's),
   so a failure of any hop up to there is a plain HTTP error (502/503/504) rather than an
   error event. Non-stream clients get the collected output derendered in
   one call; when they sent ``stop`` strings each chunk also goes through a streaming
   derender, only to notice the stop early.
4. When derender has finished every choice but the engine has not (a stop string),
   decode is cut: its connection is closed at once and ``/abort_requests`` follows.

Abort bookkeeping: a leg that did not end on its own (cancelled by a client disconnect,
cut by a stop string, timed out, broken) is recorded in the request's `RequestScope`; the
HTTP layer calls `Driver.flush_aborts` once the request is over, which posts
``{"request_ids": [...]}`` to each engine's ``/abort_requests`` (closing the connection
already aborts on vLLM and on the reference engine; the explicit call covers proxies in
between). Connect failures are retried on the next instance of the hop (nothing was sent);
nothing else is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Callable, Mapping

import httpx
import orjson

from ..doors import DOORS
from ..errors import OpenAIError, bad_request
from ..render import new_request_id
from .config import DriverConfig
from .conversations import KVReuse, conversation_key
from .doors import DoorFlow, Sent
from .hops import LocalHops, RemoteHops
from .legs import Collected, Leg, RequestScope, Upstreams, relay
from ..http.responder import Responder, client_chunk
from .timing import DriverMetrics, HopTimer
from .upstream import HopError

log = logging.getLogger("render_service.driver")

ABORT_PATH = "/abort_requests"          # wire brief §1.9: unauthenticated on --tokens-only servers

Observer = Callable[[str, dict], None]


class Driver:
    """The four-hop driver: one `handle` for every door (`doors.DOORS`).

    Args:
        config: `DriverConfig`.
        bundle: the `ModelBundle` for in-process render/derender (required unless
            ``config.render`` names a render server).
        observer: optional ``observer(event, info)`` called synchronously at hop boundaries
            (``"prefill_done"`` with ``request_id``, ``url``, ``kv_transfer_params``) — for
            tracing, and for tests that fail an engine at a precise moment.
    """

    def __init__(self, config: DriverConfig, bundle: Any = None, observer: Observer | None = None) -> None:
        self.config = config
        self.metrics = DriverMetrics()
        self.kv_reuse = KVReuse(config.decode, self.metrics.registry) if config.kv_reuse else None
        self.upstreams = Upstreams(config, self.metrics, self.kv_reuse, observer)
        self.pools = self.upstreams.pools
        self.client = self.upstreams.client
        if config.render:
            self.hops: LocalHops | RemoteHops = RemoteHops(config.render, self.client)
        else:
            if bundle is None:
                raise ValueError("in-process render needs a loaded model bundle")
            self.hops = LocalHops(bundle, config.serve)
        chat = ChatFlow(self.hops)
        doors = DoorFlow(self.hops, self.upstreams, config.render)
        self.flows: dict[str, ChatFlow | DoorFlow] = {
            name: doors if door.over_chat else chat for name, door in DOORS.items()}
        self.doors = doors

    async def aclose(self) -> None:
        await self.upstreams.aclose()

    async def flush_aborts(self, scope: RequestScope) -> None:
        """Post ``/abort_requests`` for every leg recorded in ``scope`` (best effort, bounded
        by ``abort_timeout``)."""
        if not scope.to_abort:
            return
        by_url: dict[str, list[str]] = {}
        for _, url, engine_id in scope.to_abort:
            by_url.setdefault(url, [])
            if engine_id not in by_url[url]:
                by_url[url].append(engine_id)
        self.metrics.aborts.labels(scope.abort_reason).inc(len(scope.to_abort))
        scope.to_abort.clear()

        async def one(url: str, ids: list[str]) -> None:
            try:
                await self.client().post(url + ABORT_PATH, content=orjson.dumps({"request_ids": ids}),
                                         headers={"content-type": "application/json"},
                                         timeout=self.config.abort_timeout)
            except httpx.HTTPError as exc:
                log.info("abort of %s on %s failed: %s", ids, url, exc)

        await asyncio.gather(*(one(u, ids) for u, ids in by_url.items()))

    async def health(self) -> tuple[int, dict]:
        """``/health`` of every upstream: 200 when each hop has a healthy instance, else 503."""
        hops = {"prefill": self.config.prefill, "decode": self.config.decode}
        if self.config.render:
            hops["render"] = (self.config.render,)

        async def check(url: str) -> str:
            try:
                r = await self.client().get(url + "/health", timeout=min(2.0, self.config.timeout))
                return "ok" if r.status_code == 200 else f"status {r.status_code}"
            except httpx.HTTPError as exc:
                return f"unreachable ({type(exc).__name__})"

        flat = [(hop, url) for hop, urls in hops.items() for url in urls]
        states = await asyncio.gather(*(check(url) for _, url in flat))
        body: dict[str, dict[str, str]] = {hop: {} for hop in hops}
        for (hop, url), state in zip(flat, states):
            body[hop][url] = state
        ok = all("ok" in urls.values() for urls in body.values())
        return (200 if ok else 503), body

    # -- one request ---------------------------------------------------------------------
    async def handle(self, kind: str, body: dict, headers: Mapping[str, str], out: Responder,
                     scope: RequestScope) -> None:
        """Serve one request of door ``kind`` (``"chat"``, ``"completion"``, ``"responses"``,
        ``"messages"``: `doors.DOORS`) with JSON ``body``; writes the response to ``out``.
        Never raises except `asyncio.CancelledError` (client gone). The door's flow
        (`ChatFlow` / `doors.DoorFlow`) renders, streams or collects, and words errors."""
        flow = self.flows[kind]
        timer = HopTimer()
        self.metrics.in_flight.inc()
        base_id = str(flow.request_id(body, headers))
        reply_headers = {"x-request-id": base_id}
        key = conversation_key(body, headers)
        reuse = self.kv_reuse if DOORS[kind].conversation and key is not None else None
        sent = Sent()
        try:
            with timer.measure("render"):
                rendered_body = reuse.render_body(key, body) if reuse is not None else body
                gens, request = await flow.render(kind, rendered_body, body, base_id)
            stream = body.get("stream") is True
            if stream and len(gens) > 1:
                raise bad_request("Streaming several prompts in one request is not supported by the driver; "
                                  "send one request per prompt.", "prompt")
            legs = [Leg(self.upstreams, g, key, scope, timer) for g in gens]
            if reuse is not None:
                reuse.prepare(key, legs[0], reply_headers)
            if stream:  # the head leaves when decode starts, not with its first token
                legs[0].on_decode_start = lambda: out.start_events({**reply_headers, "server-timing": timer.server_timing()})
                await flow.stream(kind, body, request, legs[0], timer, out, reply_headers, sent)
            else:
                await flow.whole(kind, body, request, legs, timer, out, reply_headers)
            if reuse is not None:
                reuse.finish(key, legs[0])
        except OpenAIError as err:
            if isinstance(err, HopError):
                self.metrics.upstream_errors.labels(err.hop, str(err.status)).inc()
                log.warning("%s", err.message)
            await flow.fail(kind, out, err, timer, reply_headers, sent)
        except Exception:
            log.exception("driver failed on a %s request", kind)
            await flow.fail(kind, out, OpenAIError(500, "Internal error in the driver; this is a bug, please report it."),
                            timer, reply_headers, sent)
        finally:
            self.metrics.in_flight.dec()
            self.metrics.observe(timer)
            self.metrics.requests.labels(kind, str(out.status or 499)).inc()


class ChatFlow:
    """The chat and completions doors through the hops: OpenAI JSON or ``data:`` SSE."""

    def __init__(self, hops: LocalHops | RemoteHops) -> None:
        self.hops = hops

    @staticmethod
    def request_id(body: dict, headers: Mapping[str, str]) -> str:
        """``X-Request-Id``, else the body's ``request_id``, else random."""
        return headers.get("x-request-id") or body.get("request_id") or new_request_id()

    async def render(self, kind: str, rendered_body: dict, body: dict, base_id: str) -> tuple[list[dict], Any]:
        gens, request = await self.hops.render(DOORS[kind], rendered_body, base_id)
        if request is rendered_body:  # a remote derender needs no history ids
            request = body
        return gens, request

    async def fail(self, kind: str, out: Responder, err: OpenAIError, timer: HopTimer, headers: dict,
                   sent: Sent) -> None:
        if out.started:  # after the 200 of a stream: an error event, then [DONE] (vLLM's way)
            await out.event(err.body())
            await out.end_events(f"server-timing {timer.server_timing()}")
        else:
            await out.json(err.status, err.body(), {**headers, "server-timing": timer.server_timing()})

    async def stream(self, kind: str, body: dict, request: Any, leg: Leg, timer: HopTimer, out: Responder,
                     headers: dict, sent: Sent) -> None:
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage"))
        await leg.prefill()
        session = self.hops.open_stream(DOORS[kind], request, body, leg.prompt)
        chunks = relay(leg, session, bool(opts.get("continuous_usage_stats")))
        produced, usage_sent, last = 0, False, None
        async with contextlib.aclosing(chunks):
            item = await anext(chunks, None)  # failures up to the first token are plain HTTP errors
            await out.start_events({**headers, "server-timing": timer.server_timing()})
            while item is not None:
                chunk, derendered = item
                produced += sum(len(c.get("token_ids") or []) for c in chunk.get("choices") or [])
                view = client_chunk(derendered, include_usage)
                if view is not None:
                    await out.event(view)
                    last = view
                    usage_sent |= view.get("usage") is not None and not view["choices"]
                item = await anext(chunks, None)
        if include_usage and not usage_sent and last is not None:  # decode was cut before its usage chunk
            usage = {"prompt_tokens": len(leg.prompt), "total_tokens": len(leg.prompt) + produced,
                     "completion_tokens": produced, "prompt_tokens_details": None, "completion_tokens_details": None}
            await out.event({**last, "choices": [], "usage": usage})
        await out.end_events(f"server-timing {timer.server_timing()}")

    async def whole(self, kind: str, body: dict, request: Any, legs: list[Leg], timer: HopTimer, out: Responder,
                    headers: dict) -> None:
        stops = body.get("stop")

        async def one(leg: Leg) -> dict:
            await leg.prefill()
            watch = self.hops.open_stream(DOORS[kind], request, body, leg.prompt) if stops else None
            collected = Collected(leg)
            async with contextlib.aclosing(relay(leg, watch, False)) as chunks:
                async for chunk, _ in chunks:
                    collected.add(chunk)
            return collected.response()

        if len(legs) == 1:
            gens = [await one(legs[0])]
        else:
            try:
                async with asyncio.TaskGroup() as tg:
                    tasks = [tg.create_task(one(leg)) for leg in legs]
            except BaseExceptionGroup as group:
                raise _first_error(group) from None
            gens = [t.result() for t in tasks]
        with timer.measure("derender"):
            response = await self.hops.derender(DOORS[kind], request, gens, [leg.prompt for leg in legs])
        await out.json(200, response, {**headers, "server-timing": timer.server_timing()})


def _first_error(group: BaseExceptionGroup) -> BaseException:
    """The exception to report from a failed group: an `OpenAIError` if there is one."""
    flat: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        e = stack.pop(0)
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        else:
            flat.append(e)
    return next((e for e in flat if isinstance(e, OpenAIError)), flat[0])
