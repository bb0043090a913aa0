"""The driver's flow for the doors over chat (`doors.OVER_CHAT`: ``POST /v1/responses``,
``POST /v1/messages``), run by `Driver.handle` like every door, over the same four hops and
per-hop timing as chat.

render (``door.render``, or the render server's ``door.render_path``) → prefill leg →
decode leg (SSE) → derender into the API's own objects: the door's `StreamSession` kept in memory
for in-process derender, or the render server's stateless ``door.derender_path`` with the
sealed ``stream_state`` round-tripped.

Streams are ``event: <type>`` SSE without ``[DONE]`` (both APIs end on their own last
event); errors are the door's own (``door.error_body`` / ``door.stream_error``): an HTTP
error up to the first token, an ``error`` event after it. A stop string matched in
derender cuts decode and aborts it, as for chat.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Mapping

from ..doors import OVER_CHAT, Door
from ..doors.session import StreamSession, driver_body
from ..errors import OpenAIError
from ..render.request import new_request_id
from ..wire import sse
from ..wire.generate import GenerateResponse
from ..wire.validate import validate
from .hops import LocalHops, RemoteHops, derender_failed
from .legs import Collected, Leg, Upstreams, relay
from .timing import HopTimer
from .upstream import HopError, post_json

log = logging.getLogger("render_service.driver")

class Sent:
    """What one stream has written: the Responses ``sequence_number`` its next event takes,
    so an ``error`` event after a cut continues the count instead of restarting at 0."""

    def __init__(self) -> None:
        self.next_sequence_number = 0

    def count(self, ev: dict) -> None:
        if "sequence_number" in ev:
            self.next_sequence_number = ev["sequence_number"] + 1


class DoorFlow:
    """The doors over chat (`doors.OVER_CHAT`: Responses, Messages) through the hops: render
    and derender in process (``hops`` a `LocalHops`) or on the render server at
    ``render_url``; answers in the door's own JSON, SSE events and errors."""

    def __init__(self, hops: LocalHops | RemoteHops, upstreams: Upstreams, render_url: str | None) -> None:
        self.hops, self.upstreams, self.render_url = hops, upstreams, render_url

    @staticmethod
    def request_id(body: dict, headers: Mapping[str, str]) -> str:
        """``X-Request-Id``, else random."""
        return headers.get("x-request-id") or new_request_id()

    async def render(self, kind: str, rendered_body: dict, body: dict, base_id: str) -> tuple[list[dict], Any]:
        """``([GenerateRequest], the validated request)``."""
        door = OVER_CHAT[kind]
        req = validate(door.request, rendered_body)
        return [await self._render(door, req, rendered_body, base_id)], req

    async def count_tokens(self, door: Door, body: Any) -> tuple[int, dict]:
        """``POST <door.count_tokens_path>`` (``/v1/messages/count_tokens``) → ``(status, body)``:
        the prompt length render gives (a remote render is asked for the prompt itself), errors
        in the door's shape."""
        try:
            req = validate(door.count_tokens_request, body)
            if isinstance(self.hops, LocalHops):
                hops = self.hops
                hops.check_model(req.model)
                return 200, await hops.run_cpu(door.count_tokens, hops.bundle, hops.config, req)
            gen = await self._render(door, req, {**body, "max_tokens": req.max_tokens}, new_request_id())
            return 200, {"input_tokens": len(gen["token_ids"])}
        except OpenAIError as err:
            return err.status, door.error_body(err)

    async def _render(self, door: Door, req: Any, body: dict, base_id: str) -> dict:
        hops = self.hops
        if isinstance(hops, LocalHops):
            hops.check_model(req.model)
            return await hops.run_cpu(door.render, hops.bundle, hops.config, req, base_id)
        gen = await post_json(self.upstreams.client(), "render", self.render_url, door.render_path, body,
                              headers={"X-Request-Id": base_id})
        if not isinstance(gen, dict) or not gen.get("token_ids"):
            raise HopError("render", 502, f"render hop failed: {self.render_url} returned no GenerateRequest.")
        return gen

    async def stream(self, kind: str, body: dict, req: Any, leg: Leg, timer: HopTimer, out: Any, headers: dict,
                     sent: Sent) -> None:
        await leg.prefill()
        session = self.hops.open_stream(OVER_CHAT[kind], req, body, leg.prompt)
        chunks = relay(leg, session, False)
        finished = False
        async with contextlib.aclosing(chunks):
            item = await anext(chunks, None)  # failures up to the first token are plain HTTP errors
            await out.start_events({**headers, "server-timing": timer.server_timing()})
            while item is not None:
                _, view = item
                for ev in view["events"]:
                    await out.raw(sse.named_event(ev["type"], ev))
                    sent.count(ev)
                finished |= bool(view["choices"])
                item = await anext(chunks, None)
        if not finished:  # the engine stream ended without a finish: close what is open
            for ev in session.finish():
                await out.raw(sse.named_event(ev["type"], ev))
                sent.count(ev)
        await out.end(sse.comment(f"server-timing {timer.server_timing()}"))

    async def whole(self, kind: str, body: dict, req: Any, legs: list[Leg], timer: HopTimer, out: Any,
                    headers: dict) -> None:
        door, (leg,) = OVER_CHAT[kind], legs
        await leg.prefill()
        watch = self.hops.open_stream(door, req, body, leg.prompt) if door.stops(req) else None
        collected = Collected(leg)
        async with contextlib.aclosing(relay(leg, watch, False)) as chunks:
            async for chunk, _ in chunks:
                collected.add(chunk)
        gen = collected.response()
        with timer.measure("derender"):
            response = await self._derender(door, req, body, gen, leg.prompt)
        await out.json(200, response, {**headers, "server-timing": timer.server_timing()})

    async def _derender(self, door: Door, req: Any, body: dict, gen: dict, prompt: list[int]) -> dict:
        hops = self.hops
        if isinstance(hops, LocalHops):
            d = hops.derenderer

            def run() -> dict:
                session = StreamSession.open(d, door, driver_body(door, req, prompt, req.model))
                return session.whole(GenerateResponse.model_validate(gen))
            try:
                return await hops.run_cpu(run)
            except OpenAIError as exc:
                raise derender_failed(exc) from None
        payload = {"model": body.get("model"), "generate_response": gen, "prompt_tokens": len(prompt),
                   "prompt_token_ids": prompt, door.request_field: body}
        return await post_json(self.upstreams.client(), "derender", self.render_url, door.derender_path, payload)

    async def fail(self, kind: str, out: Any, err: OpenAIError, timer: HopTimer, headers: dict, sent: Sent) -> None:
        door = OVER_CHAT[kind]
        if out.started:
            ev = door.stream_error(err, sent.next_sequence_number)
            await out.raw(sse.named_event(ev["type"], ev))
            await out.end(sse.comment(f"server-timing {timer.server_timing()}"))
        else:
            await out.json(err.status, door.error_body(err), {**headers, "server-timing": timer.server_timing()})
