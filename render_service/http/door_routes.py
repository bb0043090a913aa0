"""Routes of the doors over chat (`doors.OVER_CHAT`: Responses, Anthropic Messages) on ``render-service serve``.

| route | body | answer |
|---|---|---|
| ``POST /v1/responses/render`` | ``ResponsesRequest`` | ``GenerateRequest`` (vLLM 0.33's) |
| ``POST /v1/messages/render`` | ``AnthropicMessagesRequest`` | ``GenerateRequest`` (vLLM 0.33's) |
| ``POST /v1/messages/count_tokens`` | the same without ``max_tokens`` | ``{"input_tokens"}`` (Anthropic's) |

Errors: the render routes answer as vLLM does (OpenAI error shape, also for Messages).
Their derender routes are every door's (`http.derender_routes`).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from ..doors import DOORS, OVER_CHAT, Door
from ..errors import OpenAIError
from ..render.media import MediaInput, chat_media_parts, load_media_input, mm_payload
from ..render.request import new_request_id
from .common import AppContext, JSONResponse, error_response, first_header, read_json
from ..wire.validate import validate

log = logging.getLogger(__name__)


def routes(ctx: AppContext) -> list[Route]:
    """The routes of every door over chat (`doors.OVER_CHAT`) bound to ``ctx``, and
    ``/v1/messages/count_tokens``."""
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
            body = door.render_body(ctx.bundle, ctx.config, req)  # converted once: the media come from it
            loaded = await media(door, body["messages"], req)
            return JSONResponse(await ctx.run_cpu(door.render, ctx.bundle, ctx.config, req, rid, loaded, body))
        return handle

    def count_tokens(door: Door):
        async def handle(request: Request) -> JSONResponse:
            try:
                req = validate(door.count_tokens_request, await read_json(request, ctx.config.max_body_bytes))
                ctx.check_model(req.model)
                body = door.render_body(ctx.bundle, ctx.config, req)
                loaded = await media(door, body["messages"], req)
                return JSONResponse(await ctx.run_cpu(door.count_tokens, ctx.bundle, ctx.config, req, loaded, body))
            except OpenAIError as err:
                return error_response(err, request.url.path)
        return handle

    out = [Route(door.render_path, render(door), methods=["POST"]) for door in OVER_CHAT.values()]
    out += [Route(door.count_tokens_path, count_tokens(door), methods=["POST"])
            for door in DOORS.values() if door.count_tokens is not None]
    return out
