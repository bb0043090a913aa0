"""The render and derender hops, in this process or on a render server. Same interface:

- ``render(door, body, request_id) -> (gens, request)``: one `GenerateRequest` dict per
  prompt (chat: one), and the client request as this hop's derender takes it back;
- ``derender(door, request, gens, prompts) -> OpenAI response dict`` for the engine
  responses ``gens`` (one per rendered prompt, same order as ``prompts``);
- ``open_stream(door, request, body, prompt_ids) -> stream`` (any door) whose
  ``await step(engine_chunk)`` returns the door's view of one chunk: the OpenAI chunk dict
  (``chat.completion.chunk`` / ``text_completion``), or ``{"choices", "events"}``.

`LocalHops` validates the client body once, into the typed request the door's render takes,
and hands derender typed objects built from it (the engine's output is validated, as it
comes from outside); its stream keeps the door's `StreamSession` in memory, like the pipe mode.
`RemoteHops` calls a render server over HTTP with the bodies of wire brief §1.6/§1.7; its
stream round-trips the sealed ``stream_state``, one call per chunk. ``door``: a `Door` of
`doors.DOORS` (render and derender: chat or completions; streams: any).

Errors: render problems are `OpenAIError` 4xx for the client (a remote render's 4xx
verbatim); a derender failure is a 502 `HopError` naming ``derender`` (the engine output
or the driver was at fault, not the client).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

import httpx
import pydantic

from ..config.serve import ServeConfig
from ..derender.service import Derenderer
from ..doors import Door
from ..doors.session import Derender, StreamSession, driver_body
from ..errors import OpenAIError
from ..wire.generate import GenerateResponse
from ..wire.validate import validate
from .upstream import HopError, post_json

T = TypeVar("T")


def derender_failed(exc: Exception) -> HopError:
    """A derender failure on the engine's output: the 502 `HopError` naming ``derender``."""
    message = exc.message if isinstance(exc, OpenAIError) else f"{type(exc).__name__}: {exc}"
    return HopError("derender", 502, f"derender hop failed on the engine output: {message}")


def _engine_output(gen: dict) -> GenerateResponse:
    """An engine response/chunk as derender reads it. Raises `HopError` 502 when it is not one."""
    try:
        return GenerateResponse.model_validate(gen)
    except pydantic.ValidationError as exc:
        raise derender_failed(exc) from None


class LocalHops:
    """Render and derender in this process with ``bundle`` (a `ModelBundle`) and ``config``;
    CPU-heavy work runs on a small thread pool so the event loop keeps serving."""

    def __init__(self, bundle: Any, config: ServeConfig) -> None:
        self.bundle, self.config = bundle, config
        self.derenderer = Derenderer(bundle, config)
        self.derender_calls = Derender(self.derenderer)
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="cpu")

    async def run_cpu(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread pool (tokenizers releases the GIL)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def check_model(self, model: str | None) -> None:
        """404 unless ``model`` is null or one of the served names (wire brief §0)."""
        names = self.bundle.served_model_names
        if model is not None and model not in names:
            raise OpenAIError(404, f"The model `{model}` does not exist. Valid aliases: {', '.join(names)}.",
                              param="model")

    async def render(self, door: Door, body: dict, request_id: str) -> tuple[list[dict], Any]:
        """Raises `OpenAIError` (400 bad request, 404 unknown model)."""
        req = validate(door.request, body)
        self.check_model(req.model)
        out = await self.run_cpu(door.render, self.bundle, self.config, req, request_id)
        return (out if door.answer.many_prompts else [out]), req

    async def derender(self, door: Door, req: Any, gens: list[dict], prompts: list[list[int]]) -> dict:
        responses = [_engine_output(g) for g in gens]
        call = door.derender_request.model_construct(
            stream=False, model=req.model, **door.answer.whole_fields(responses, prompts),
            **{door.request_field: door.answer.driver_request(req)})
        try:
            return await self.run_cpu(self.derender_calls.whole, door, call)
        except OpenAIError as exc:
            raise derender_failed(exc) from None

    def open_stream(self, door: Door, req: Any, body: dict, prompt_ids: list[int]) -> "LocalStream":
        """``req``: the validated client request (``body`` is the remote hops')."""
        return LocalStream(self.derenderer, door, req, prompt_ids)


class LocalStream:
    """Streaming derender of one request of any door, its session kept in memory."""

    def __init__(self, d: Derenderer, door: Door, req: Any, prompt_ids: list[int]) -> None:
        answer = door.answer
        self.session = StreamSession.open(d, door, driver_body(door, answer.driver_request(req), prompt_ids, req.model))

    async def step(self, chunk: dict) -> dict:
        s, gen = self.session, _engine_output(chunk)
        try:
            items = s.step(gen, keep_empty=s.answer.streams_empty)
        except Exception as exc:
            raise derender_failed(exc) from None
        return s.door.answer.view(s.door, s.chunk(gen, items))

    def finish(self) -> list[dict]:
        """The events that close a stream the engine did not finish (event doors; chunks: none)."""
        return self.session.finish("abort")


class RemoteHops:
    """Render and derender on the render server at ``url``; ``client()`` is the driver's
    shared `httpx.AsyncClient`. The client body travels as it came."""

    def __init__(self, url: str, client: Callable[[], httpx.AsyncClient]) -> None:
        self.url = url
        self.client = client

    async def render(self, door: Door, body: dict, request_id: str) -> tuple[list[dict], dict]:
        out = await post_json(self.client(), "render", self.url, door.render_path, body,
                              headers={"X-Request-Id": request_id})
        gens = out if door.answer.many_prompts else [out]
        if not isinstance(gens, list) or not gens or not all(isinstance(g, dict) and g.get("token_ids") for g in gens):
            raise HopError("render", 502, f"render hop failed: {self.url} returned something that is not a GenerateRequest.")
        return gens, body

    async def derender(self, door: Door, body: dict, gens: list[dict], prompts: list[list[int]]) -> dict:
        payload = {"model": body.get("model"), **door.answer.whole_fields(gens, prompts), door.request_field: body}
        return await post_json(self.client(), "derender", self.url, door.derender_path, payload)

    def open_stream(self, door: Door, req: Any, body: dict, prompt_ids: list[int]) -> "RemoteStream":
        """``body``: the client body as it came (``req`` is the local hops')."""
        return RemoteStream(self, door, body, prompt_ids)


class RemoteStream:
    """Stateless streaming derender: each call sends the chunk and the previous
    ``stream_state`` and keeps the returned one (wire brief §1.6)."""

    def __init__(self, hops: RemoteHops, door: Door, body: dict, prompt_ids: list[int]) -> None:
        self.hops, self.door, self.state = hops, door, None
        self.fixed = {"stream": True, "model": body.get("model"), "prompt_tokens": len(prompt_ids),
                      "prompt_token_ids": prompt_ids, door.request_field: body}

    async def step(self, chunk: dict) -> dict:
        door, key = self.door, self.door.answer.key
        out = await post_json(self.hops.client(), "derender", self.hops.url, door.derender_path,
                              {**self.fixed, "generate_chunk": chunk, "stream_state": self.state})
        if not isinstance(out, dict) or not isinstance(out.get(key), door.answer.key_type):
            raise HopError("derender", 502, f"derender hop failed: {self.hops.url} returned no `{key}`.")
        self.state = out.get("stream_state")
        return door.answer.view(door, out[key])

    def finish(self) -> list[dict]:
        return []
