"""Render for the Responses and Messages front doors: convert, then the chat path."""

from __future__ import annotations

from typing import Any

from render_service.errors import bad_request
from render_service.http.common import validate
from render_service.render.chat import render_chat
from render_service.render.request import new_request_id
from render_service.wire.openai import ChatCompletionRequest

from staging_f.anthropic_in import messages_to_chat
from staging_f.responses_in import responses_to_chat


def render_responses(bundle, config, req) -> dict[str, Any]:
    """A `ResponsesRequest` → the `GenerateRequest` vLLM 0.33 returns for it: the chat
    render of the converted conversation with Responses' own envelope — ``request_id`` is
    the body's (default ``resp_<hex>``), no ``parse_context`` / ``reasoning_ended``, and
    ``extra_args`` always present (vLLM passes a dict)."""
    chat = validate(ChatCompletionRequest, responses_to_chat(req))
    gen = render_chat(bundle, config, chat, "")
    gen["request_id"] = req.request_id or f"resp_{new_request_id()}"
    gen["parse_context"] = None
    gen["reasoning_ended"] = None
    sp = gen["sampling_params"]
    extra = {k: v for k, v in (req.vllm_xargs or {}).items()}
    gen["sampling_params"] = _with_extra_args(sp, extra)
    return gen


def render_messages(bundle, config, req, request_id: str) -> dict[str, Any]:
    """An `AnthropicMessagesRequest` → the `GenerateRequest` (``chatcmpl-<request_id>``)."""
    body = messages_to_chat(req)
    budget = body.pop("thinking_token_budget", None)
    gen = render_chat(bundle, config, validate(ChatCompletionRequest, body), request_id)
    if budget is not None:
        gen["sampling_params"]["thinking_token_budget"] = budget
    return gen


def _with_extra_args(sp: dict, extra: dict) -> dict:
    out = {}
    for k, v in sp.items():
        if k == "bad_words" and "extra_args" not in sp:
            out["extra_args"] = extra
        if k != "extra_args":
            out[k] = v
        else:
            out[k] = extra
    return out
