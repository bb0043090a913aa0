"""One-connection streaming derender: engine SSE bytes in, OpenAI SSE bytes out. Sans-IO.

For routers that can pipe a response body into a request body. The request body of
``POST /v1/chat/completions/derender/pipe`` (or ``/v1/completions/derender/pipe``) is:

1. one line of JSON (the header), ending in ``\\n``::

       {"model": …, "prompt_token_ids": [...], "prompt_tokens": …,
        "chat_request": {…} | "parse_context": {…} | "completion_request": {…},
        "sampling_params": {…}, "stream_options": {"include_usage": true}}

   (same fields and meaning as the stateless stream request, minus ``generate_chunk`` /
   ``stream_state``; ``stream_options`` defaults to the chat request's);
2. then the raw bytes of the tokens-only engine's SSE stream (``data: {…}\\n\\n`` …
   ``data: [DONE]``), forwarded as they arrive, in any split.

The response is OpenAI SSE (``data: {chat.completion.chunk}\\n\\n`` … ``data: [DONE]\\n\\n``),
written as input arrives. State lives in the connection: no ``stream_state`` is sent.
An engine ``data: {"error": …}`` event is forwarded and followed by ``[DONE]``; so is a
derender error (bad token id, …) in the shape ``{"error": {message, type, param, code}}``.
With ``include_usage`` a final ``choices: []`` chunk carries usage (the engine's if it sent
one, else counted here). Input that ends without ``[DONE]`` gets an error event.

`PipeSession.feed(bytes) -> bytes` and `close() -> bytes` do all of this without I/O.
"""

from __future__ import annotations

import time

import orjson
import pydantic

from ..errors import OpenAIError, bad_request
from ..wire import sse
from ..wire.derender import PipeHeader
from ..wire.generate import GenerateResponse
from . import assemble
from .plan import chat_plan, completion_plan
from .service import Derenderer, StreamSession


class PipeSession:
    """One piped stream.

    Args:
        d: the model's `Derenderer`.
        kind: ``"chat"`` or ``"completion"``.
        header: the validated first line.

    Raises:
        OpenAIError: 400 for a header that cannot be planned (missing parse context, …).
    """

    def __init__(self, d: Derenderer, kind: str, header: PipeHeader) -> None:
        d.check_prompt(header.prompt_token_ids, "prompt_token_ids")
        if kind == "chat":
            plan = chat_plan(d.bundle, d.config, header.chat_request, header.parse_context, header.sampling_params)
        else:
            plan = completion_plan(d.bundle, header.completion_request, header.sampling_params)
        prompt = header.prompt_token_ids
        self.session = StreamSession(d, plan, prompt, {"c": int(time.time()), "pl": len(prompt or []), "ch": {}})
        req = header.chat_request if kind == "chat" else header.completion_request
        opts = header.stream_options or (req.stream_options if req is not None else None) or {}
        self.include_usage = bool(opts.get("include_usage"))
        self.model = d.model_name(header.model)
        self.header_prompt_tokens = header.prompt_tokens
        self.prompt_tokens = header.prompt_tokens if header.prompt_tokens is not None else len(prompt or [])
        self.finished = False
        self._usage_sent = False
        self._reader = sse.SSEReader()

    def feed(self, data: bytes) -> bytes:
        """Engine SSE bytes in (any split); OpenAI SSE bytes out (possibly empty)."""
        if self.finished:
            return b""
        try:
            payloads = self._reader.feed(data)
        except sse.SSEError as exc:
            return self._fail(bad_request(f"An engine {exc}."))
        return self._dispatch_all(payloads)

    def close(self) -> bytes:
        """End of the request body."""
        if self.finished:
            return b""
        out = self._dispatch_all(self._reader.close())
        if self.finished:
            return out
        return out + self._fail(OpenAIError(502, "The engine stream ended without `data: [DONE]`."))

    # -- internals -------------------------------------------------------------------
    def _dispatch_all(self, payloads: list[bytes]) -> bytes:
        out: list[bytes] = []
        for payload in payloads:
            out.append(self._dispatch(payload))
            if self.finished:
                break
        return b"".join(out)

    def _dispatch(self, payload: bytes) -> bytes:
        if sse.is_done(payload):
            return self._done()
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return self._fail(bad_request("An engine SSE event is not JSON."))
        if isinstance(obj, dict) and "error" in obj:
            self.finished = True
            return sse.event(obj) + sse.DONE
        try:
            gen = GenerateResponse.model_validate(obj)
            choices = self.session.step(gen, streaming_keep_empty=False)
        except pydantic.ValidationError as exc:
            return self._fail(bad_request(f"An engine SSE event is not a generate chunk: {exc.errors(include_url=False)[0]['msg']}"))
        except OpenAIError as exc:
            return self._fail(exc)
        if not choices and (gen.usage is None or not self.include_usage):
            return b""
        self._usage_sent |= gen.usage is not None and not choices
        return sse.event(self.session.chunk(gen, choices, self.model, self.header_prompt_tokens))

    def _done(self) -> bytes:
        self.finished = True
        out = b""
        if self.include_usage and not self._usage_sent:
            done = sum(cs.n_tokens for cs in self.session.live.values())
            rid = assemble.response_id(self.session.rid, self.session.plan.kind)
            u = assemble.usage(self.prompt_tokens, done)
            make = assemble.chat_chunk if self.session.plan.kind == "chat" else assemble.completion_chunk
            out = sse.event(make(rid, self.session.created, self.model, [], u))
        return out + sse.DONE

    def _fail(self, err: OpenAIError) -> bytes:
        self.finished = True
        return sse.event(err.body()) + sse.DONE
