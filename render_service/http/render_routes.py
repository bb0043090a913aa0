"""Render routes: ``/v1/chat/completions/render`` (+ ``/render`` alias) and ``/v1/completions/render``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..telemetry import tracing
from ..policy import tool_parser_active
from ..doors import DOORS
from ..doors.completions import render_completion
from ..render import new_request_id, render_chat
from ..render.tool_constraints import unenforced
from ..tokenizer.ids_json import dumps_answer, release
from ..render.known_history import KNOWN
from ..render.media import chat_media_parts, load_media_input, mm_payload
from ..wire.openai import ChatCompletionRequest, CompletionRequest
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


def routes(ctx: AppContext) -> list[Route]:
    """The render routes bound to ``ctx``."""

    async def chat(request: Request) -> JSONResponse:
        body, fresh = await read_json(request, ctx.config.max_body_bytes, KNOWN.parse)  # an agent's history: parsed once
        with tracing.span("parse"):
            req = validate(ChatCompletionRequest, body)
        ctx.check_model(req.model)
        rid = _request_id(request, req.request_id)
        with tracing.span("media"):
            media = await load_media_input(ctx.multimodal, chat_media_parts(req.messages), mm_payload(req))
        inline = (media is None and _little_new(req, fresh) and small_body(request, INLINE_BODY_MAX_BYTES)
                  and ctx.bundle.tokenizer.backend_name != "hf")
        out = await ctx.run_cpu(render_chat, ctx.bundle, ctx.config, req, rid, media, inline=inline)
        ctx.metrics.rendered(request.scope["path"], out)
        parser = ctx.config.tool_call_parser if tool_parser_active(ctx.config) else None
        note = unenforced(parser, req.tools, req.effective_tool_choice)
        # a forced call nothing will enforce (render.tool_constraints): say so rather than fail
        headers = {TOOL_CHOICE_UNCONSTRAINED: note} if note else None
        with tracing.span("serialize"):
            if (out.get("features") or {}).get("kwargs_data"):
                # megabytes of base64 pixels: written from the kept strings in place, not copied into one body
                from ..multimodal.answer import PiecesResponse, answer_pieces   # (a text model never loads it)

                return PiecesResponse(answer_pieces(out), headers=headers)
            # a prompt that extended a cached one brings most of its ids' JSON along (tokenizer.ids_json)
            response = Response(dumps_answer(out), media_type="application/json", headers=headers)
        release(out["token_ids"])  # the answer's bytes are built: the next turn may take the list over
        return response

    async def completion(request: Request) -> JSONResponse:
        body = await read_json(request, ctx.config.max_body_bytes)
        with tracing.span("parse"):
            req = validate(CompletionRequest, body)
        ctx.check_model(req.model)
        rid = _request_id(request, req.request_id)
        out = await ctx.run_cpu(render_completion, ctx.bundle, ctx.config, req, rid)
        ctx.metrics.rendered(request.scope["path"], out)
        with tracing.span("serialize"):
            return JSONResponse(out)

    return [
        Route(DOORS["chat"].render_path, chat, methods=["POST"]),
        Route("/render", chat, methods=["POST"]),
        Route(DOORS["completion"].render_path, completion, methods=["POST"]),
    ]
