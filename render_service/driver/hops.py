"""The render and derender hops, in this process or on a render server. Same interface:

- ``render(kind, body, request_id) -> list[GenerateRequest dict]`` (one per prompt; chat: one);
- ``derender(kind, payload) -> OpenAI response dict`` — ``payload`` is the body of
  ``POST /v1/{chat/,}completions/derender`` (wire brief §1.6, §1.7), built by
  `derender_payload`;
- ``open_stream(kind, body, prompt_ids) -> stream`` whose ``await step(engine_chunk)``
  returns one OpenAI chunk dict (``chat.completion.chunk`` / ``text_completion``).

`LocalHops` calls the render server's own functions (`render_chat`, `Derenderer`); its
stream keeps a `StreamSession` in memory, like the pipe mode. `RemoteHops` calls a render
server over HTTP; its stream round-trips the sealed ``stream_state``, one call per chunk.
``kind`` is ``"chat"`` or ``"completion"``.

Errors: render problems are `OpenAIError` 4xx for the client (a remote render's 4xx
verbatim); a derender failure is a 502 `HopError` naming ``derender`` (the engine output
or the driver was at fault, not the client).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import httpx
import pydantic

from ..config import ServeConfig
from ..derender.plan import chat_plan, completion_plan
from ..derender.service import Derenderer, StreamSession
from ..errors import OpenAIError
from ..http.common import AppContext, validate
from ..render import render_chat, render_completion
from ..wire.derender import ChatRequestFields, DerenderChatRequest, DerenderCompletionRequest
from ..wire.generate import GenerateResponse
from ..wire.openai import ChatCompletionRequest, CompletionRequest
from .upstream import HopError, post_json

RENDER_PATHS = {"chat": "/v1/chat/completions/render", "completion": "/v1/completions/render"}
DERENDER_PATHS = {"chat": "/v1/chat/completions/derender", "completion": "/v1/completions/derender"}


def derender_payload(kind: str, body: dict, gens: list[dict], prompts: list[list[int]]) -> dict:
    """The non-streaming derender body for the client's ``body`` and the engine responses
    ``gens`` (one per rendered prompt, same order as ``prompts``)."""
    if kind == "chat":
        return {"model": body.get("model"), "generate_response": gens[0], "prompt_tokens": len(prompts[0]),
                "prompt_token_ids": prompts[0], "chat_request": body}
    return {"model": body.get("model"), "generate_responses": gens, "prompt_tokens": [len(p) for p in prompts],
            "prompt_token_ids": prompts, "completion_request": body}


def _derender_failed(exc: Exception) -> HopError:
    message = exc.message if isinstance(exc, OpenAIError) else f"{type(exc).__name__}: {exc}"
    return HopError("derender", 502, f"derender hop failed on the engine output: {message}")


class LocalHops:
    """Render and derender in this process with ``bundle`` (a `ModelBundle`) and ``config``."""

    def __init__(self, bundle: Any, config: ServeConfig) -> None:
        self.ctx = AppContext(bundle=bundle, config=config)
        self.derenderer = Derenderer(bundle, config)

    async def render(self, kind: str, body: dict, request_id: str) -> list[dict]:
        """Raises `OpenAIError` (400 bad request, 404 unknown model)."""
        if kind == "chat":
            req = validate(ChatCompletionRequest, body)
            self.ctx.check_model(req.model)
            return [await self.ctx.run_cpu(render_chat, self.ctx.bundle, self.ctx.config, req, request_id)]
        creq = validate(CompletionRequest, body)
        self.ctx.check_model(creq.model)
        return await self.ctx.run_cpu(render_completion, self.ctx.bundle, self.ctx.config, creq, request_id)

    async def derender(self, kind: str, payload: dict) -> dict:
        try:
            if kind == "chat":
                return await self.ctx.run_cpu(self.derenderer.chat, validate(DerenderChatRequest, payload))
            return await self.ctx.run_cpu(self.derenderer.completion, validate(DerenderCompletionRequest, payload))
        except OpenAIError as exc:
            raise _derender_failed(exc) from None

    def open_stream(self, kind: str, body: dict, prompt_ids: list[int]) -> "LocalStream":
        return LocalStream(self.derenderer, kind, body, prompt_ids)


class LocalStream:
    """Streaming derender of one request with the per-choice state kept in memory."""

    def __init__(self, d: Derenderer, kind: str, body: dict, prompt_ids: list[int]) -> None:
        fields = validate(ChatRequestFields, body)
        if kind == "chat":
            plan = chat_plan(d.bundle, d.config, fields, None, None)
        else:
            plan = completion_plan(d.bundle, fields, None)
        self.session = StreamSession(d, plan, prompt_ids, {"c": int(time.time()), "pl": len(prompt_ids), "ch": {}})
        self.model = body.get("model") or d.bundle.served_model_names[0]
        self.prompt_tokens = len(prompt_ids)

    async def step(self, chunk: dict) -> dict:
        try:
            gen = GenerateResponse.model_validate(chunk)
            choices = self.session.step(gen, streaming_keep_empty=False)
        except (OpenAIError, pydantic.ValidationError) as exc:
            raise _derender_failed(exc) from None
        return self.session.chunk(gen, choices, self.model, self.prompt_tokens)


class RemoteHops:
    """Render and derender on the render server at ``url``; ``client()`` is the driver's
    shared `httpx.AsyncClient`."""

    def __init__(self, url: str, client: Callable[[], httpx.AsyncClient]) -> None:
        self.url = url
        self.client = client

    async def render(self, kind: str, body: dict, request_id: str) -> list[dict]:
        out = await post_json(self.client(), "render", self.url, RENDER_PATHS[kind], body,
                              headers={"X-Request-Id": request_id})
        gens = [out] if kind == "chat" else out
        if not isinstance(gens, list) or not gens or not all(isinstance(g, dict) and g.get("token_ids") for g in gens):
            raise HopError("render", 502, f"render hop failed: {self.url} returned something that is not a GenerateRequest.")
        return gens

    async def derender(self, kind: str, payload: dict) -> dict:
        return await post_json(self.client(), "derender", self.url, DERENDER_PATHS[kind], payload)

    def open_stream(self, kind: str, body: dict, prompt_ids: list[int]) -> "RemoteStream":
        return RemoteStream(self, kind, body, prompt_ids)


class RemoteStream:
    """Stateless streaming derender: each call sends the chunk and the previous
    ``stream_state`` and keeps the returned one (wire brief §1.6)."""

    def __init__(self, hops: RemoteHops, kind: str, body: dict, prompt_ids: list[int]) -> None:
        self.hops, self.kind, self.state = hops, kind, None
        self.fixed = {"stream": True, "model": body.get("model"), "prompt_tokens": len(prompt_ids),
                      "prompt_token_ids": prompt_ids,
                      ("chat_request" if kind == "chat" else "completion_request"): body}

    async def step(self, chunk: dict) -> dict:
        out = await post_json(self.hops.client(), "derender", self.hops.url, DERENDER_PATHS[self.kind],
                              {**self.fixed, "generate_chunk": chunk, "stream_state": self.state})
        if not isinstance(out, dict) or not isinstance(out.get("chunk"), dict):
            raise HopError("derender", 502, f"derender hop failed: {self.hops.url} returned no `chunk`.")
        self.state = out.get("stream_state")
        return out["chunk"]
