"""Routes of the Responses and Anthropic Messages front doors on ``render-service serve``.

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

from ..derender.frontdoor_pipe import FrontDoorPipe
from ..derender.frontdoors import FrontDoorDerenderer
from ..derender.service import Derenderer
from ..errors import OpenAIError
from ..render.anthropic import count_tokens as anthropic_count_tokens
from ..render.anthropic import in_messages_terms, messages_to_chat, render_messages
from ..render.media import MediaInput, chat_media_parts, load_media_input, mm_payload
from ..render.request import new_request_id
from ..render.responses import in_input_terms, render_responses, responses_to_chat
from ..wire.frontdoors import (AnthropicCountTokensRequest, AnthropicMessagesRequest, DerenderMessagesRequest,
                               DerenderMessagesStreamRequest, DerenderResponsesRequest, DerenderResponsesStreamRequest,
                               FrontDoorPipeHeader, ResponsesRequest, error_body)
from .common import AppContext, JSONResponse, error_response, read_json, validate
from .derender_routes import PipeEndpoint

log = logging.getLogger(__name__)

_DERENDER_BODIES = {"responses": (DerenderResponsesRequest, DerenderResponsesStreamRequest),
                    "messages": (DerenderMessagesRequest, DerenderMessagesStreamRequest)}


def routes(ctx: AppContext) -> list[Route]:
    """The Responses / Messages routes bound to ``ctx``."""
    d = Derenderer(ctx.bundle, ctx.config)
    fd = FrontDoorDerenderer(d)

    async def media(messages: list[dict], req: Any) -> MediaInput | None:
        """The request's images, loaded as the chat route loads them (400 on a text-only model,
        its ``param`` in the request's own API: `in_input_terms` / `in_messages_terms`)."""
        try:
            return await load_media_input(ctx.multimodal, chat_media_parts(messages), mm_payload(req))
        except OpenAIError as err:
            raise (in_input_terms(err, req) if isinstance(req, ResponsesRequest)
                   else in_messages_terms(err, req, False)) from None

    async def responses_render(request: Request) -> JSONResponse:
        req = validate(ResponsesRequest, await read_json(request, ctx.config.max_body_bytes))
        ctx.check_model(req.model)
        loaded = await media(responses_to_chat(req)["messages"], req)
        return JSONResponse(await ctx.run_cpu(render_responses, ctx.bundle, ctx.config, req, loaded))

    async def messages_render(request: Request) -> JSONResponse:
        req = validate(AnthropicMessagesRequest, await read_json(request, ctx.config.max_body_bytes))
        ctx.check_model(req.model)
        rid = request.headers.get("x-request-id") or new_request_id()
        loaded = await media(messages_to_chat(req)["messages"], req)
        return JSONResponse(await ctx.run_cpu(render_messages, ctx.bundle, ctx.config, req, rid, loaded))

    async def count_tokens(request: Request) -> JSONResponse:
        try:
            req = validate(AnthropicCountTokensRequest, await read_json(request, ctx.config.max_body_bytes))
            ctx.check_model(req.model)
            loaded = await media(messages_to_chat(req)["messages"], req)
            return JSONResponse(await ctx.run_cpu(anthropic_count_tokens, ctx.bundle, ctx.config, req, loaded))
        except OpenAIError as err:
            return error_response(err, request.url.path)

    def derender(kind: str):
        plain, streamed = _DERENDER_BODIES[kind]

        async def handle(request: Request) -> JSONResponse:
            try:
                body = await read_json(request, ctx.config.max_body_bytes)
                stream = isinstance(body, dict) and body.get("stream") is True
                req = validate(streamed if stream else plain, body)
                ctx.check_model(req.model)
                fn = fd.stream if stream else fd.whole
                return JSONResponse(await ctx.run_cpu(fn, kind, req))
            except OpenAIError as err:
                return error_response(err, request.url.path)
            except Exception:  # a bug of ours: say so without leaking internals
                log.exception("%s derender failed", kind)
                err = OpenAIError(500, "Internal error while derendering.")
                return JSONResponse(error_body(kind, err), status_code=500)
        return handle

    return [
        Route("/v1/responses/render", responses_render, methods=["POST"]),
        Route("/v1/messages/render", messages_render, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/responses/derender", derender("responses"), methods=["POST"]),
        Route("/v1/messages/derender", derender("messages"), methods=["POST"]),
        Route("/v1/responses/derender/pipe", FrontDoorPipeEndpoint(ctx, d, "responses"), methods=["POST"]),
        Route("/v1/messages/derender/pipe", FrontDoorPipeEndpoint(ctx, d, "messages"), methods=["POST"]),
    ]


class FrontDoorPipeEndpoint(PipeEndpoint):
    """The chat pipe's duplex endpoint, answering in the Responses / Messages SSE."""

    def open_session(self, raw: Any) -> FrontDoorPipe:
        header = validate(FrontDoorPipeHeader, raw)
        request = header.responses_request if self.kind == "responses" else header.messages_request
        self.ctx.check_model(header.model or (request.model if request is not None else None))
        return FrontDoorPipe(self.d, self.kind, header)

    def error_body(self, err: OpenAIError) -> dict:
        return error_body(self.kind, err)
