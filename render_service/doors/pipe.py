"""One-connection streaming derender for every door: engine SSE bytes in, the API's SSE out.
Sans-IO.

For routers that can pipe a response body into a request body. The request body of
``POST <door.derender_path>/pipe`` (``/v1/chat/completions/derender/pipe``,
``/v1/completions/derender/pipe``, ``/v1/responses/derender/pipe``,
``/v1/messages/derender/pipe``) is:

1. one line of JSON (the header), ending in ``\\n``: the door's stateless stream request
   minus ``generate_chunk`` / ``stream_state`` (``door.pipe_header``)::

       {"model": …, "prompt_token_ids": [...], "prompt_tokens": …,
        "chat_request": {…} | "parse_context": {…} | "completion_request": {…}
        | "responses_request": {…} | "messages_request": {…},
        "sampling_params": {…}, "stream_options": {"include_usage": true}}

   (chat and completions: ``stream_options`` defaults to the request's);
2. then the raw bytes of the tokens-only engine's SSE stream (``data: {…}\\n\\n`` …
   ``data: [DONE]``), forwarded as they arrive, in any split.

The response is written as input arrives; state lives in the connection (no
``stream_state``). Chat and completions answer OpenAI SSE (``data: {chunk}`` …
``data: [DONE]``): an engine ``data: {"error": …}`` event is forwarded and followed by
``[DONE]``; so is a derender error, in the shape ``{"error": {message, type, param,
code}}``; with ``include_usage`` a final ``choices: []`` chunk carries usage (the engine's if
it sent one, else counted here). Responses and Messages answer their own
``event: <type>`` SSE without ``[DONE]``; an engine error or a derender failure becomes the
API's ``error`` event and ends the stream. Input that ends without ``[DONE]`` is an error.

`Pipe.feed(bytes) -> bytes` and `close() -> bytes` do all of this without I/O.
"""

from __future__ import annotations

from typing import Any

import orjson
import pydantic

from ..derender.service import Derenderer
from ..errors import OpenAIError, bad_request
from ..wire import sse
from ..wire.generate import GenerateResponse
from .door import Door
from .session import StreamSession


class Pipe:
    """One piped stream of ``door``.

    Args:
        d: the model's `Derenderer`.
        door: the `Door`.
        header: the validated first line (``door.pipe_header``).

    Raises:
        OpenAIError: 400 for a header that cannot be planned (no request, missing parse context, …).
    """

    def __init__(self, d: Derenderer, door: Door, header: Any) -> None:
        door.answer.check_header(door, header)
        d.check_prompt(header.prompt_token_ids, "prompt_token_ids")
        self.session = StreamSession.open(d, door, header)
        self.answer = self.session.answer
        self.finished = False
        self._reader = sse.SSEReader()

    def feed(self, data: bytes) -> bytes:
        """Engine SSE bytes in (any split); the API's SSE bytes out (possibly empty)."""
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
            self.finished = True
            return self.answer.done(self.session)
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return self._fail(bad_request("An engine SSE event is not JSON."))
        if isinstance(obj, dict) and "error" in obj:
            self.finished = True
            return self.answer.engine_error(self.session, obj)
        try:
            gen = GenerateResponse.model_validate(obj)
            items = self.session.step(gen, keep_empty=self.answer.streams_empty)
        except pydantic.ValidationError as exc:
            return self._fail(bad_request(f"An engine SSE event is not a generate chunk: {exc.errors(include_url=False)[0]['msg']}"))
        except OpenAIError as exc:
            return self._fail(exc)
        return self.answer.sse(self.session, gen, items)

    def _fail(self, err: OpenAIError) -> bytes:
        self.finished = True
        return self.answer.fail(self.session, err)
