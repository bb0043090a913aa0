"""`Driver`: one client request through render → prefill → decode → derender.

Theory of operation
-------------------
For each client request (chat or completions)::

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
   each chunk derendered as it arrives; the response headers are sent once the first decode
   chunk is in, so a failure of any hop up to there is a plain HTTP error (502/503/504)
   rather than an error event. Non-stream clients get the collected output derendered in
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
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Mapping

import httpx
import orjson

from ..errors import OpenAIError, bad_request
from ..render import new_request_id
from ..wire import sse
from ..wire.generate import ENGINE_ID_PREFIX
from .config import DriverConfig
from .frontdoors import KINDS as FRONT_DOORS, FrontDoorFlow
from .hops import LocalHops, RemoteHops, derender_payload
from .legs import decode_leg, prefill_leg
from .timing import DriverMetrics, HopTimer
from .upstream import (HopError, Pool, error_from_event, error_from_exception, error_from_status, post_json,
                       sse_data)

log = logging.getLogger("render_service.driver")

GENERATE_PATH = "/inference/v1/generate"
ABORT_PATH = "/abort_requests"          # wire brief §1.9: unauthenticated on --tokens-only servers

Observer = Callable[[str, dict], None]


@dataclass
class RequestScope:
    """Cleanup owed by one client request: engine legs ``(hop, url, engine_request_id)`` to abort."""

    to_abort: list[tuple[str, str, str]] = field(default_factory=list)
    abort_reason: str = "error"

    @contextlib.contextmanager
    def leg(self, hop: str, url: str, engine_id: str) -> Iterator[None]:
        """Record an abort for this leg if the block ends other than with a complete answer."""
        try:
            yield
        except HopError as exc:
            if not (exc.unreachable or exc.answered):
                self.to_abort.append((hop, url, engine_id))
            raise
        except BaseException:
            self.to_abort.append((hop, url, engine_id))
            raise


class Responder:
    """Writes one HTTP response through ASGI ``send``: a JSON body, or SSE events."""

    def __init__(self, send: Callable[[dict], Awaitable[None]]) -> None:
        self.send = send
        self.started = False
        self.status = 0

    async def json(self, status: int, obj: Any, headers: Mapping[str, str]) -> None:
        body = orjson.dumps(obj)
        await self._start(status, {"content-type": "application/json", "content-length": str(len(body)), **headers})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})

    async def start_events(self, headers: Mapping[str, str]) -> None:
        await self._start(200, {"content-type": "text/event-stream", "cache-control": "no-cache", **headers})

    async def event(self, obj: Any) -> None:
        await self._body(sse.event(obj))

    async def end_events(self, comment: str | None = None) -> None:
        tail = sse.comment(comment) if comment else b""
        await self.send({"type": "http.response.body", "body": tail + sse.DONE, "more_body": False})

    async def raw(self, data: bytes) -> None:
        """Already-framed SSE bytes (the Responses / Messages doors name their events)."""
        await self._body(data)

    async def end(self, data: bytes = b"") -> None:
        """End the body with ``data`` (streams that have no ``[DONE]``)."""
        await self.send({"type": "http.response.body", "body": data, "more_body": False})

    async def _start(self, status: int, headers: Mapping[str, str]) -> None:
        self.started, self.status = True, status
        await self.send({"type": "http.response.start", "status": status,
                         "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]})

    async def _body(self, data: bytes) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": True})


def conversation_key(body: dict, headers: Mapping[str, str]) -> str | None:
    """Session-affinity key: body ``conversation_id``, ``X-Conversation-Id``, body
    ``session_id`` or ``X-Session-ID`` (vLLM's hint, §6.3), first one present."""
    for value in (body.get("conversation_id"), headers.get("x-conversation-id"),
                  body.get("session_id"), headers.get("x-session-id")):
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


class Leg:
    """One rendered prompt on its way through prefill and decode."""

    def __init__(self, driver: "Driver", gen: dict, conversation: str | None, scope: RequestScope,
                 timer: HopTimer) -> None:
        self.driver, self.gen, self.conversation, self.scope, self.timer = driver, gen, conversation, scope, timer
        self.prompt: list[int] = gen["token_ids"]
        self.n = int((gen.get("sampling_params") or {}).get("n") or 1)
        rid = str(gen.get("request_id") or new_request_id())
        self.engine_id = ENGINE_ID_PREFIX + rid
        self.headers = {"X-Request-Id": rid}
        if conversation is not None:
            self.headers["X-Session-ID"] = conversation
        self.kv_params: dict | None = None
        self.prefill_done = 0.0

    async def prefill(self) -> None:
        """Run the prefill leg; keeps its ``kv_transfer_params`` for decode."""
        pool, client = self.driver.pools["prefill"], self.driver.client()
        body = prefill_leg(self.gen)
        with self.timer.measure("prefill"):
            attempts = self.driver.attempts("prefill", self.conversation)
            for url in attempts:
                with pool.use(url), self.scope.leg("prefill", url, self.engine_id):
                    try:
                        resp = await post_json(client, "prefill", url, GENERATE_PATH, body, self.headers)
                    except HopError as exc:
                        if exc.unreachable:
                            attempts.failed(exc)
                            continue
                        raise
                break
        self.prefill_done = time.perf_counter()
        params = resp.get("kv_transfer_params") if isinstance(resp, dict) else None
        self.kv_params = params if isinstance(params, dict) else None
        self.driver.notify("prefill_done", {"request_id": self.engine_id, "url": url,
                                            "kv_transfer_params": self.kv_params})

    async def decode_events(self, continuous_usage: bool) -> AsyncIterator[dict]:
        """The decode leg's SSE chunks as dicts, until ``[DONE]``.

        Raises:
            HopError: connect failure on every instance (503), non-200 answer, an error
            event in the stream (502), timeout (504), broken connection (502).
        """
        pool, client = self.driver.pools["decode"], self.driver.client()
        content = orjson.dumps(decode_leg(self.gen, self.kv_params, continuous_usage))
        headers = {"content-type": "application/json", **self.headers}
        attempts = self.driver.attempts("decode", self.conversation)
        for url in attempts:
            request = client.build_request("POST", url + GENERATE_PATH, content=content, headers=headers)
            with self.scope.leg("decode", url, self.engine_id):
                try:
                    response = await client.send(request, stream=True)
                except httpx.HTTPError as exc:
                    err = error_from_exception("decode", url, exc)
                    if err.unreachable:
                        attempts.failed(err)
                        continue
                    raise err from None
            break
        with pool.use(url), self.scope.leg("decode", url, self.engine_id):
            try:
                if response.status_code != 200:
                    raise error_from_status("decode", url, response.status_code, await response.aread())
                async for data in sse_data(response):
                    if sse.is_done(data):
                        return
                    try:
                        chunk = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        raise HopError("decode", 502, f"decode hop failed: {url} sent an event that is not JSON.") from None
                    if isinstance(chunk, dict) and "error" in chunk:  # the engine ended the request and says why
                        raise error_from_event("decode", url, chunk["error"])
                    yield chunk
                raise HopError("decode", 502, f"decode hop failed: the stream from {url} ended without [DONE].")
            except httpx.HTTPError as exc:
                raise error_from_exception("decode", url, exc) from None
            except sse.SSEError as exc:
                raise HopError("decode", 502, f"decode hop failed: {url} sent an {exc}.") from None
            finally:
                await response.aclose()


class Attempts:
    """The instances of one hop to try for one leg, best first (`Pool.order`). Iterating
    past the last one raises a single 503 that lists every connect failure."""

    def __init__(self, driver: "Driver", pool: Pool, key: str | None) -> None:
        self.driver, self.pool, self.order = driver, pool, pool.order(key)
        self.errors: list[str] = []

    def __iter__(self) -> Iterator[str]:
        yield from self.order
        hop = self.pool.hop
        raise HopError(hop, 503, f"{hop} hop failed: no {hop} engine could be reached: {'; '.join(self.errors)}.")

    def failed(self, err: HopError) -> None:
        """The last instance yielded could not be connected to; the next one is tried."""
        log.warning("%s", err.message)
        self.driver.metrics.upstream_errors.labels(self.pool.hop, "connect").inc()
        self.errors.append(err.message.removeprefix(f"{self.pool.hop} hop failed: ").rstrip("."))


class Collected:
    """A decode stream folded into the non-streaming ``GenerateTokensResponse`` (§1.8)."""

    def __init__(self, leg: Leg) -> None:
        self.leg = leg
        self.request_id = leg.engine_id
        self.choices: dict[int, dict] = {}
        self.usage: dict | None = None
        self.metrics: Any = None
        self.prompt_token_ids: list[int] | None = None

    def add(self, chunk: dict) -> None:
        self.request_id = chunk.get("request_id") or self.request_id
        self.usage = chunk.get("usage") or self.usage
        self.metrics = chunk.get("metrics") or self.metrics
        self.prompt_token_ids = self.prompt_token_ids or chunk.get("prompt_token_ids")
        for c in chunk.get("choices") or []:
            acc = self.choices.setdefault(c.get("index", 0), {"token_ids": [], "finish_reason": None,
                                                             "stop_reason": None, "logprobs": None})
            acc["token_ids"] += c.get("token_ids") or []
            if c.get("finish_reason"):
                acc["finish_reason"], acc["stop_reason"] = c["finish_reason"], c.get("stop_reason")
            if c.get("logprobs"):
                lp = acc["logprobs"] or {"content": []}
                lp["content"] += c["logprobs"].get("content") or []
                acc["logprobs"] = lp

    def response(self) -> dict:
        """Raises `HopError` (502) when a choice ended without a single token."""
        choices = []
        for index in sorted(self.choices):
            c = self.choices[index]
            if not c["token_ids"]:
                raise HopError("decode", 502, f"decode hop failed: the engine ended choice {index} without a token "
                                              f"(finish_reason {c['finish_reason']!r}).", answered=True)
            # A choice cut short by the driver (stop string) has no engine finish: "abort"
            # tells derender nothing was dropped; it reports the stop string it finds.
            choices.append({"index": index, "finish_reason": c["finish_reason"] or "abort",
                            "stop_reason": c["stop_reason"], "token_ids": c["token_ids"], "routed_experts": None,
                            "sampling_mask": None, "weight_versions": None, "logprobs": c["logprobs"]})
        if not choices:
            raise HopError("decode", 502, "decode hop failed: the engine stream carried no tokens.", answered=True)
        completion = sum(len(c["token_ids"]) for c in choices)
        usage = self.usage or {"prompt_tokens": len(self.leg.prompt), "completion_tokens": completion,
                               "total_tokens": len(self.leg.prompt) + completion}
        return {"request_id": self.request_id, "model": None, "created": int(time.time()), "usage": usage,
                "prompt_logprobs": None, "prompt_token_id_logprobs": None,
                "prompt_token_ids": self.prompt_token_ids, "mm_placeholders": None, "metrics": self.metrics,
                "kv_transfer_params": None, "ec_transfer_params": None, "output_mode": "tokens",
                "choices": choices}


def _client_chunk(chunk: dict | None, include_usage: bool) -> dict | None:
    """A derendered chunk as the client should see it: choices with nothing to say dropped
    (a remote derender keeps them), ``usage`` only when asked for; None = send nothing."""
    if chunk is None:
        return None
    choices = [c for c in chunk.get("choices") or [] if not _empty_choice(c)]
    usage = chunk.get("usage") if include_usage else None
    if not choices and usage is None:
        return None
    return {**chunk, "choices": choices, "usage": usage}


def _empty_choice(c: dict) -> bool:
    if c.get("finish_reason") or c.get("logprobs"):
        return False
    delta = c.get("delta")
    if delta is not None:
        return not (delta.get("role") or delta.get("content") or delta.get("reasoning") or delta.get("tool_calls"))
    return not c.get("text")


class Driver:
    """The four-hop driver.

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
        self.pools = {"prefill": Pool("prefill", config.prefill), "decode": Pool("decode", config.decode)}
        self.observer = observer
        self._client: httpx.AsyncClient | None = None
        if config.render:
            self.hops: LocalHops | RemoteHops = RemoteHops(config.render, self.client)
        else:
            if bundle is None:
                raise ValueError("in-process render needs a loaded model bundle")
            self.hops = LocalHops(bundle, config.serve)

    # -- plumbing ----------------------------------------------------------------------
    def client(self) -> httpx.AsyncClient:
        """The shared HTTP client (created on first use, inside the serving event loop)."""
        if self._client is None:
            c = self.config
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(c.timeout, connect=c.connect_timeout),
                limits=httpx.Limits(max_connections=c.max_connections, max_keepalive_connections=256),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def notify(self, event: str, info: dict) -> None:
        if self.observer is not None:
            self.observer(event, info)

    def attempts(self, hop: str, key: str | None) -> "Attempts":
        return Attempts(self, self.pools[hop], key)

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
        """Serve one ``/v1/chat/completions`` (``kind="chat"``) or ``/v1/completions``
        (``"completion"``) request with JSON ``body``; writes the response to ``out``.
        Never raises except `asyncio.CancelledError` (client gone). ``"responses"`` and
        ``"messages"`` go to `FrontDoorFlow`."""
        if kind in FRONT_DOORS:
            return await FrontDoorFlow(self).handle(kind, body, headers, out, scope)
        timer = HopTimer()
        self.metrics.in_flight.inc()
        base_id = headers.get("x-request-id") or body.get("request_id") or new_request_id()
        reply_headers = {"x-request-id": str(base_id)}
        try:
            with timer.measure("render"):
                gens = await self.hops.render(kind, body, str(base_id))
            stream = body.get("stream") is True
            if stream and len(gens) > 1:
                raise bad_request("Streaming several prompts in one request is not supported by the driver; "
                                  "send one request per prompt.", "prompt")
            key = conversation_key(body, headers)
            legs = [Leg(self, g, key, scope, timer) for g in gens]
            if stream:
                await self._stream(kind, body, legs[0], timer, out, reply_headers)
            else:
                await self._whole(kind, body, legs, timer, out, reply_headers)
        except OpenAIError as err:
            if isinstance(err, HopError):
                self.metrics.upstream_errors.labels(err.hop, str(err.status)).inc()
                log.warning("%s", err.message)
            await self._fail(out, err, timer, reply_headers)
        except Exception:
            log.exception("driver failed on a %s request", kind)
            await self._fail(out, OpenAIError(500, "Internal error in the driver; this is a bug, please report it."),
                             timer, reply_headers)
        finally:
            self.metrics.in_flight.dec()
            self.metrics.observe(timer)
            self.metrics.requests.labels(kind, str(out.status or 499)).inc()

    async def _fail(self, out: Responder, err: OpenAIError, timer: HopTimer, headers: dict) -> None:
        if out.started:  # after the 200 of a stream: an error event, then [DONE] (vLLM's way)
            await out.event(err.body())
            await out.end_events(f"server-timing {timer.server_timing()}")
        else:
            await out.json(err.status, err.body(), {**headers, "server-timing": timer.server_timing()})

    async def _decode(self, leg: Leg, session: Any, continuous_usage: bool) -> AsyncIterator[tuple[dict, dict | None]]:
        """Decode chunks, each with its derendered chunk (None without ``session``).
        Stops — cutting decode — once derender has finished every choice the engine has not."""
        timer, first = leg.timer, None
        derendered: set[int] = set()
        engine_done: set[int] = set()
        events = leg.decode_events(continuous_usage)
        try:
            async for chunk in events:
                if first is None:
                    first = time.perf_counter()
                    timer.add("kv_handoff", first - leg.prefill_done)
                metrics = chunk.get("metrics")
                if isinstance(metrics, dict) and metrics.get("kv_source"):
                    timer.kv_source = str(metrics["kv_source"])
                for c in chunk.get("choices") or []:
                    if c.get("finish_reason"):
                        engine_done.add(c.get("index", 0))
                out = None
                if session is not None:
                    with timer.measure("derender"):
                        out = await session.step(chunk)
                    derendered.update(c.get("index", 0) for c in out.get("choices") or [] if c.get("finish_reason"))
                yield chunk, out
                if len(derendered) >= leg.n and len(engine_done) < leg.n:
                    leg.scope.abort_reason = "stop_string"
                    break
        finally:
            await events.aclose()
            if first is not None:
                timer.add("decode", time.perf_counter() - first)

    async def _stream(self, kind: str, body: dict, leg: Leg, timer: HopTimer, out: Responder, headers: dict) -> None:
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage"))
        await leg.prefill()
        session = self.hops.open_stream(kind, body, leg.prompt)
        relay = self._decode(leg, session, bool(opts.get("continuous_usage_stats")))
        produced, usage_sent, last = 0, False, None
        async with contextlib.aclosing(relay):
            item = await anext(relay, None)  # failures up to the first token are plain HTTP errors
            await out.start_events({**headers, "server-timing": timer.server_timing()})
            while item is not None:
                chunk, derendered = item
                produced += sum(len(c.get("token_ids") or []) for c in chunk.get("choices") or [])
                view = _client_chunk(derendered, include_usage)
                if view is not None:
                    await out.event(view)
                    last = view
                    usage_sent |= view.get("usage") is not None and not view["choices"]
                item = await anext(relay, None)
        if include_usage and not usage_sent and last is not None:  # decode was cut before its usage chunk
            usage = {"prompt_tokens": len(leg.prompt), "total_tokens": len(leg.prompt) + produced,
                     "completion_tokens": produced, "prompt_tokens_details": None, "completion_tokens_details": None}
            await out.event({**last, "choices": [], "usage": usage})
        await out.end_events(f"server-timing {timer.server_timing()}")

    async def _whole(self, kind: str, body: dict, legs: list[Leg], timer: HopTimer, out: Responder,
                     headers: dict) -> None:
        stops = body.get("stop")

        async def one(leg: Leg) -> dict:
            await leg.prefill()
            watch = self.hops.open_stream(kind, body, leg.prompt) if stops else None
            collected = Collected(leg)
            async with contextlib.aclosing(self._decode(leg, watch, False)) as relay:
                async for chunk, _ in relay:
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
        payload = derender_payload(kind, body, gens, [leg.prompt for leg in legs])
        with timer.measure("derender"):
            response = await self.hops.derender(kind, payload)
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
