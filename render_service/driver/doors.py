"""The driver's Responses and Anthropic Messages doors: ``POST /v1/responses`` and
``POST /v1/messages`` over the same four hops and per-hop timing as chat.

render (`render_responses` / `render_messages`, or the render server's ``…/render``) →
prefill leg → decode leg (SSE) → derender into the API's own objects: a `FrontDoorSession`
kept in memory for in-process derender, or the render server's stateless
``/v1/{responses,messages}/derender`` with the sealed ``stream_state`` round-tripped.

Streams are ``event: <type>`` SSE without ``[DONE]`` (both APIs end on their own last
event); errors are the API's own (`error_body` / `stream_error_event`): an HTTP error up
to the first token, an ``error`` event after it. A stop string matched in derender cuts
decode and aborts it, as for chat.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Mapping

from ..doors.session import FrontDoorSession
from ..errors import OpenAIError
from ..http.common import validate
from ..doors.messages.render import count_tokens as anthropic_count_tokens
from ..doors.messages.render import render_messages
from ..render.request import new_request_id
from ..doors.responses.render import render_responses
from ..wire import sse
from ..doors.wire import (AnthropicCountTokensRequest, AnthropicMessagesRequest, ResponsesRequest, error_body,
                               stream_error_event)
from ..wire.generate import GenerateResponse
from .hops import LocalHops
from .timing import HopTimer
from .upstream import HopError, post_json

log = logging.getLogger("render_service.driver")

KINDS = ("responses", "messages")
_REQUESTS = {"responses": ResponsesRequest, "messages": AnthropicMessagesRequest}
_RENDER_PATHS = {"responses": "/v1/responses/render", "messages": "/v1/messages/render"}
_DERENDER_PATHS = {"responses": "/v1/responses/derender", "messages": "/v1/messages/derender"}


class _LocalStream:
    """In-process derender of one request; ``step`` returns ``{"choices", "events"}`` where
    ``choices`` tells the driver's decode loop when derender has finished."""

    def __init__(self, hops: LocalHops, kind: str, req: Any, prompt: list[int]) -> None:
        d = hops.derenderer
        self.session = FrontDoorSession(d, kind, req, prompt, model=d.model_name(req.model))

    async def step(self, chunk: dict) -> dict:
        try:
            events = self.session.step(GenerateResponse.model_validate(chunk))
        except Exception as exc:
            raise _derender_failed(exc) from None
        return _view(events)

    def finish(self) -> list[dict]:
        return self.session.finish("abort")


class _RemoteStream:
    """Stateless derender on the render server: each chunk with the previous ``stream_state``."""

    def __init__(self, driver: Any, kind: str, body: dict, prompt: list[int]) -> None:
        self.driver, self.kind, self.state, self.done = driver, kind, None, False
        self.fixed = {"stream": True, "model": body.get("model"), "prompt_tokens": len(prompt),
                      "prompt_token_ids": prompt, f"{kind}_request": body}

    async def step(self, chunk: dict) -> dict:
        out = await post_json(self.driver.client(), "derender", self.driver.config.render, _DERENDER_PATHS[self.kind],
                              {**self.fixed, "generate_chunk": chunk, "stream_state": self.state})
        if not isinstance(out, dict) or not isinstance(out.get("events"), list):
            raise HopError("derender", 502, f"derender hop failed: {self.driver.config.render} returned no `events`.")
        self.state = out.get("stream_state")
        return _view(out["events"])

    def finish(self) -> list[dict]:
        return []


class _Sent:
    """What one stream has written: the Responses ``sequence_number`` its next event takes,
    so an ``error`` event after a cut continues the count instead of restarting at 0."""

    def __init__(self) -> None:
        self.next_sequence_number = 0

    def count(self, ev: dict) -> None:
        if "sequence_number" in ev:
            self.next_sequence_number = ev["sequence_number"] + 1


def _view(events: list[dict]) -> dict:
    done = any(ev["type"] in ("response.completed", "response.incomplete", "message_stop") for ev in events)
    return {"choices": [{"index": 0, "finish_reason": "stop"}] if done else [], "events": events}


def _derender_failed(exc: Exception) -> HopError:
    message = exc.message if isinstance(exc, OpenAIError) else f"{type(exc).__name__}: {exc}"
    return HopError("derender", 502, f"derender hop failed on the engine output: {message}")


class FrontDoorFlow:
    """Serves one Responses / Messages request on ``driver`` (a `Driver`)."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    async def handle(self, kind: str, body: dict, headers: Mapping[str, str], out: Any, scope: Any) -> None:
        """Like `Driver.handle` for ``kind`` ``"responses"`` / ``"messages"``; never raises
        except `asyncio.CancelledError`."""
        from .flow import conversation_key
        from .legs import Leg

        drv, timer = self.driver, HopTimer()
        drv.metrics.in_flight.inc()
        base_id = str(headers.get("x-request-id") or new_request_id())
        reply = {"x-request-id": base_id}
        key = conversation_key(body, headers)
        sent = _Sent()
        reuse = drv.kv_reuse if key is not None else None  # bidirectional KV (conversations.KVReuse)
        try:
            rendered_body = reuse.render_body(key, body) if reuse is not None else body
            req = validate(_REQUESTS[kind], rendered_body)
            with timer.measure("render"):
                gen = await self._render(kind, req, rendered_body, base_id)
            leg = Leg(drv, gen, key, scope, timer)
            if reuse is not None:
                reuse.prepare(key, leg, reply)
            if body.get("stream") is True:
                await self._stream(kind, req, body, leg, timer, out, reply, sent)
            else:
                await self._whole(kind, req, body, leg, timer, out, reply)
            if reuse is not None:
                reuse.finish(key, leg)
        except OpenAIError as err:
            if isinstance(err, HopError):
                drv.metrics.upstream_errors.labels(err.hop, str(err.status)).inc()
                log.warning("%s", err.message)
            await self._fail(kind, out, err, timer, reply, sent)
        except Exception:
            log.exception("driver failed on a %s request", kind)
            await self._fail(kind, out, OpenAIError(500, "Internal error in the driver; this is a bug, please report it."),
                             timer, reply, sent)
        finally:
            drv.metrics.in_flight.dec()
            drv.metrics.observe(timer)
            drv.metrics.requests.labels(kind, str(out.status or 499)).inc()

    async def count_tokens(self, body: Any) -> tuple[int, dict]:
        """``POST /v1/messages/count_tokens`` → ``(status, body)``: the prompt length render
        gives (a remote render is asked for the prompt itself), errors in Anthropic's shape."""
        try:
            req = validate(AnthropicCountTokensRequest, body)
            if isinstance(self.driver.hops, LocalHops):
                hops = self.driver.hops
                hops.check_model(req.model)
                return 200, await hops.run_cpu(anthropic_count_tokens, hops.bundle, hops.config, req)
            gen = await self._render("messages", req, {**body, "max_tokens": req.max_tokens}, new_request_id())
            return 200, {"input_tokens": len(gen["token_ids"])}
        except OpenAIError as err:
            return err.status, error_body("messages", err)

    async def _render(self, kind: str, req: Any, body: dict, base_id: str) -> dict:
        hops = self.driver.hops
        if isinstance(hops, LocalHops):
            hops.check_model(req.model)
            if kind == "responses":
                return await hops.run_cpu(render_responses, hops.bundle, hops.config, req)
            return await hops.run_cpu(render_messages, hops.bundle, hops.config, req, base_id)
        gen = await post_json(self.driver.client(), "render", self.driver.config.render, _RENDER_PATHS[kind], body,
                              headers={"X-Request-Id": base_id})
        if not isinstance(gen, dict) or not gen.get("token_ids"):
            raise HopError("render", 502, f"render hop failed: {self.driver.config.render} returned no GenerateRequest.")
        return gen

    def _open(self, kind: str, req: Any, body: dict, prompt: list[int]) -> _LocalStream | _RemoteStream:
        hops = self.driver.hops
        if isinstance(hops, LocalHops):
            return _LocalStream(hops, kind, req, prompt)
        return _RemoteStream(self.driver, kind, body, prompt)

    async def _stream(self, kind: str, req: Any, body: dict, leg: Any, timer: HopTimer, out: Any, headers: dict,
                      sent: _Sent) -> None:
        await leg.prefill()
        session = self._open(kind, req, body, leg.prompt)
        relay = self.driver._decode(leg, session, False)
        finished = False
        async with contextlib.aclosing(relay):
            item = await anext(relay, None)  # failures up to the first token are plain HTTP errors
            await out.start_events({**headers, "server-timing": timer.server_timing()})
            while item is not None:
                _, view = item
                for ev in view["events"]:
                    await out.raw(sse.named_event(ev["type"], ev))
                    sent.count(ev)
                finished |= bool(view["choices"])
                item = await anext(relay, None)
        if not finished:  # the engine stream ended without a finish: close what is open
            for ev in session.finish():
                await out.raw(sse.named_event(ev["type"], ev))
                sent.count(ev)
        await out.end(sse.comment(f"server-timing {timer.server_timing()}"))

    async def _whole(self, kind: str, req: Any, body: dict, leg: Any, timer: HopTimer, out: Any, headers: dict) -> None:
        from .legs import Collected

        await leg.prefill()
        stops = (req.stop if kind == "responses" else req.stop_sequences)
        watch = self._open(kind, req, body, leg.prompt) if stops else None
        collected = Collected(leg)
        async with contextlib.aclosing(self.driver._decode(leg, watch, False)) as relay:
            async for chunk, _ in relay:
                collected.add(chunk)
        gen = collected.response()
        with timer.measure("derender"):
            response = await self._derender(kind, req, body, gen, leg.prompt)
        await out.json(200, response, {**headers, "server-timing": timer.server_timing()})

    async def _derender(self, kind: str, req: Any, body: dict, gen: dict, prompt: list[int]) -> dict:
        hops = self.driver.hops
        if isinstance(hops, LocalHops):
            d = hops.derenderer

            def run() -> dict:
                session = FrontDoorSession(d, kind, req, prompt, model=d.model_name(req.model))
                return session.whole(GenerateResponse.model_validate(gen))
            try:
                return await hops.run_cpu(run)
            except OpenAIError as exc:
                raise _derender_failed(exc) from None
        payload = {"model": body.get("model"), "generate_response": gen, "prompt_tokens": len(prompt),
                   "prompt_token_ids": prompt, f"{kind}_request": body}
        return await post_json(self.driver.client(), "derender", self.driver.config.render, _DERENDER_PATHS[kind],
                               payload)

    async def _fail(self, kind: str, out: Any, err: OpenAIError, timer: HopTimer, headers: dict, sent: _Sent) -> None:
        if out.started:
            ev = stream_error_event(kind, err, sent.next_sequence_number)
            await out.raw(sse.named_event(ev["type"], ev))
            await out.end(sse.comment(f"server-timing {timer.server_timing()}"))
        else:
            await out.json(err.status, error_body(kind, err), {**headers, "server-timing": timer.server_timing()})


__all__ = ["FrontDoorFlow", "KINDS"]
