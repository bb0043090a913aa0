"""Routes of the doors over chat (`doors.OVER_CHAT`: Responses, Anthropic Messages) on ``render-service serve``.

| route | body | answer |
|---|---|---|
| ``POST /v1/responses/render`` | ``ResponsesRequest`` | ``GenerateRequest`` (vLLM 0.33's) |
| ``POST /v1/messages/render`` | ``AnthropicMessagesRequest`` | ``GenerateRequest`` (vLLM 0.33's) |
| ``POST /v1/messages/count_tokens`` | the same without ``max_tokens`` | ``{"input_tokens"}`` (Anthropic's) |
| ``POST /v1/responses/derender`` | ``{generate_response, prompt_token_ids, responses_request}``, or ``stream: true`` with ``generate_chunk`` + ``stream_state`` | ``Response``, or ``{"events", "stream_state"}`` |
| ``POST /v1/messages/derender`` | same with ``messages_request`` | Anthropic ``message``, or ``{"events", "stream_state"}`` |
| ``POST /v1/{responses,messages}/derender/pipe`` | header line + engine SSE bytes | the API's SSE |

Errors: the render routes answer as vLLM does (OpenAI error shape, also for Messages);
the derender routes answer in their API's shape (Anthropic's for Messages).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from ..derender.service import Derenderer
from ..doors import OVER_CHAT, Door
from ..doors.messages.render import count_tokens as anthropic_count_tokens
from ..doors.messages.render import messages_to_chat
from ..doors.messages.wire import AnthropicCountTokensRequest
from ..doors.pipe import FrontDoorPipe
from ..doors.session import FrontDoorDerenderer
from ..errors import OpenAIError
from ..render.media import MediaInput, chat_media_parts, load_media_input, mm_payload
from ..render.request import new_request_id
from .common import AppContext, JSONResponse, error_response, first_header, read_json
from ..wire.validate import validate
from .derender_routes import PipeEndpoint

log = logging.getLogger(__name__)


def routes(ctx: AppContext) -> list[Route]:
    """The routes of every door over chat (`doors.OVER_CHAT`) bound to ``ctx``, and
    ``/v1/messages/count_tokens``."""
    d = Derenderer(ctx.bundle, ctx.config)
    fd = FrontDoorDerenderer(d)

    async def media(door: Door, messages: list[dict], req: Any) -> MediaInput | None:
        """The request's images, loaded as the chat route loads them (400 on a text-only model,
        its ``param`` in the request's own API: ``door.in_own_terms``)."""
        try:
            return await load_media_input(ctx.multimodal, chat_media_parts(messages), mm_payload(req))
        except OpenAIError as err:
            raise door.in_own_terms(err, req) from None

    def render(door: Door):
        async def handle(request: Request) -> JSONResponse:
            req = validate(door.request, await read_json(request, ctx.config.max_body_bytes))
            ctx.check_model(req.model)
            rid = first_header(request, b"x-request-id") or new_request_id()
            loaded = await media(door, door.to_chat(req)["messages"], req)
            return JSONResponse(await ctx.run_cpu(door.render, ctx.bundle, ctx.config, req, rid, loaded))
        return handle

    async def count_tokens(request: Request) -> JSONResponse:
        door = OVER_CHAT["messages"]
        try:
            req = validate(AnthropicCountTokensRequest, await read_json(request, ctx.config.max_body_bytes))
            ctx.check_model(req.model)
            loaded = await media(door, messages_to_chat(req)["messages"], req)
            return JSONResponse(await ctx.run_cpu(anthropic_count_tokens, ctx.bundle, ctx.config, req, loaded))
        except OpenAIError as err:
            return error_response(err, request.url.path)

    def derender(door: Door):
        async def handle(request: Request) -> JSONResponse:
            try:
                body = await read_json(request, ctx.config.max_body_bytes)
                stream = isinstance(body, dict) and body.get("stream") is True
                req = validate(door.derender_stream_request if stream else door.derender_request, body)
                ctx.check_model(req.model)
                fn = fd.stream if stream else fd.whole
                return JSONResponse(await ctx.run_cpu(fn, door.name, req))
            except OpenAIError as err:
                return error_response(err, request.url.path)
            except Exception:  # a bug of ours: say so without leaking internals
                log.exception("%s derender failed", door.name)
                err = OpenAIError(500, "Internal error while derendering.")
                return JSONResponse(door.error_body(err), status_code=500)
        return handle

    out = [Route(door.render_path, render(door), methods=["POST"]) for door in OVER_CHAT.values()]
    out.append(Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]))
    out += [Route(door.derender_path, derender(door), methods=["POST"]) for door in OVER_CHAT.values()]
    out += [Route(door.derender_path + "/pipe", FrontDoorPipeEndpoint(ctx, d, door.name), methods=["POST"])
            for door in OVER_CHAT.values()]
    return out


class FrontDoorPipeEndpoint(PipeEndpoint):
    """The chat pipe's duplex endpoint, answering in the door's own SSE."""

    def open_session(self, raw: Any) -> FrontDoorPipe:
        door = OVER_CHAT[self.kind]
        header = validate(door.pipe_header, raw)
        request = getattr(header, door.request_field)
        self.ctx.check_model(header.model or (request.model if request is not None else None))
        return FrontDoorPipe(self.d, self.kind, header)

    def error_body(self, err: OpenAIError) -> dict:
        return OVER_CHAT[self.kind].error_body(err)
