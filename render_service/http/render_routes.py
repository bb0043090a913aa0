"""Render routes of every door (`doors.DOORS`): ``POST <door.render_path>`` and its aliases.

| route | body | answer |
|---|---|---|
| ``/v1/chat/completions/render`` (alias ``/render``) | ``ChatCompletionRequest`` | ``GenerateRequest`` (vLLM 0.33's) |
| ``/v1/completions/render`` | ``CompletionRequest`` | a list of ``GenerateRequest``, one per prompt |
| ``/v1/responses/render`` | ``ResponsesRequest`` | ``GenerateRequest`` |
| ``/v1/messages/render`` | ``AnthropicMessagesRequest`` | ``GenerateRequest`` |

One handler serves them all; what differs is a `Door` field (request model, ``render``,
``render_body``, ``render_loads``, ``takes_media``, ``forced_tools``, ``render_aliases``).
Errors: every render route answers as vLLM does (OpenAI error shape, also for Messages).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..telemetry import tracing
from ..policy import tool_parser_active
from ..doors import DOORS, Door
from ..errors import OpenAIError
from ..render import new_request_id
from ..render.tool_constraints import unenforced
from ..tokenizer.ids_json import dumps_answer, release
from ..render.media import MediaInput, chat_media_parts, load_media_input, mm_payload
from ..wire.openai import ChatCompletionRequest
from .common import AppContext, JSONResponse, first_header, read_json, small_body
from ..wire.validate import validate


# Response header set when tool_choice required / named reaches the engine unconstrained (why, in words).
TOOL_CHOICE_UNCONSTRAINED = "X-Tool-Choice-Unconstrained"


def _request_id(request: Request, body_id: str | None) -> str:
    """``X-Request-Id`` header, else the body's ``request_id``, else random (wire brief §2.7)."""
    return first_header(request, b"x-request-id") or body_id or new_request_id()


INLINE_NEW_BYTES = 64 * 1024
"""New JSON a render may bring and still run on the event loop: a short question, or an
agent's next turn (a tool result and a reply, ~30 KB a turn in the agent-trace bench)."""
INLINE_MESSAGES = 256
"""An inline render's template pass is bounded by its messages (~5 us each for Qwen3's)..."""
INLINE_BODY_MAX_BYTES = 2 * 1024 * 1024
"""... and by the text it writes (the late turns of the agent-trace bench: ~670 KB bodies)."""


def _little_new(req: ChatCompletionRequest, fresh: int) -> bool:
    """Worth rendering on the event loop: little new JSON (a short question, or an agent's next
    turn over a history parsed before: `KNOWN.parse`), a bounded number of messages, and none
    of what renders or encodes the prompt again (its own template, which runs in a worker
    process; offsets; an assistant mask). The caller bounds the body and leaves out media and
    the HF backend (it would hold the loop for milliseconds); the new text to encode is
    bounded as it runs (`tokenizer.budget`, via `AppContext.run_cpu`)."""
    return (fresh <= INLINE_NEW_BYTES and len(req.messages) <= INLINE_MESSAGES and not _request_template(req)
            and not req.return_token_offsets and not req.return_assistant_tokens_mask)


def _request_template(req: ChatCompletionRequest) -> bool:
    """The request brings its own template, which renders in a worker process: never inline."""
    return req.chat_template is not None or "chat_template" in (req.chat_template_kwargs or {})


async def door_media(ctx: AppContext, door: Door, messages: Any, req: Any) -> MediaInput | None:
    """The images of chat ``messages`` (``req``'s, or its door's chat body's), loaded for ``door``.

    Raises:
        OpenAIError: 400 on a text-only model or for a bad part, its ``param`` in the request's
        own API (``door.in_own_terms``).
    """
    try:
        return await load_media_input(ctx.multimodal, chat_media_parts(messages), mm_payload(req))
    except OpenAIError as err:
        if door.in_own_terms is None:
            raise
        raise door.in_own_terms(err, req) from None


def routes(ctx: AppContext) -> list[Route]:
    """The render route of every door (`doors.DOORS`) bound to ``ctx``, at its path and aliases."""

    def render(door: Door):
        ids_from_body = "request_id" in door.request.model_fields

        async def handle(request: Request) -> Response:
            if door.render_loads is not None:
                body, fresh = await read_json(request, ctx.config.max_body_bytes, door.render_loads)
            else:
                body, fresh = await read_json(request, ctx.config.max_body_bytes), None
            with tracing.span("parse"):
                req = validate(door.request, body)
            ctx.check_model(req.model)
            rid = _request_id(request, req.request_id if ids_from_body else None)
            # a door over chat converts once: its media come from that chat body, which its render takes
            chat = door.render_body(ctx.bundle, ctx.config, req) if door.render_body is not None else None
            media = None
            if door.takes_media:
                with tracing.span("media"):
                    media = await door_media(ctx, door, req.messages if chat is None else chat["messages"], req)
            inline = (fresh is not None and media is None and _little_new(req, fresh)
                      and small_body(request, INLINE_BODY_MAX_BYTES) and ctx.bundle.tokenizer.backend_name != "hf")
            args = (ctx.bundle, ctx.config, req, rid, media) + ((chat,) if chat is not None else ())
            out = await ctx.run_cpu(door.render, *args, inline=inline)
            if not door.over_chat:  # the doors over chat count no prompt tokens (as before one builder)
                ctx.metrics.rendered(request.scope["path"], out)
            headers = None
            if door.forced_tools is not None:
                parser = ctx.config.tool_call_parser if tool_parser_active(ctx.config) else None
                note = unenforced(parser, *door.forced_tools(req))
                # a forced call nothing will enforce (render.tool_constraints): say so rather than fail
                headers = {TOOL_CHOICE_UNCONSTRAINED: note} if note else None
            with tracing.span("serialize"):
                if isinstance(out, list):  # completions: one GenerateRequest per prompt
                    return JSONResponse(out, headers=headers)
                if (out.get("features") or {}).get("kwargs_data"):
                    # megabytes of base64 pixels: written from the kept strings in place, not copied into one body
                    from ..multimodal.answer import PiecesResponse, answer_pieces   # (a text model never loads it)

                    return PiecesResponse(answer_pieces(out), headers=headers)
                # a prompt that extended a cached one brings most of its ids' JSON along (tokenizer.ids_json)
                response = Response(dumps_answer(out), media_type="application/json", headers=headers)
            release(out["token_ids"])  # the answer's bytes are built: the next turn may take the list over
            return response
        return handle

    return [Route(path, handler, methods=["POST"])
            for door, handler in ((door, render(door)) for door in DOORS.values())
            for path in (door.render_path, *door.render_aliases)]
