"""Pipe mode for the Responses and Messages back doors: engine SSE bytes in, the API's own
SSE out (``event: <type>\\ndata: {…}\\n\\n``), state held by the connection. Sans-IO.

Request body of ``POST /v1/responses/derender/pipe`` / ``/v1/messages/derender/pipe``: one
JSON header line ``{"model"?, "prompt_token_ids", "prompt_tokens"?, "responses_request" |
"messages_request"}``, then the tokens-only engine's SSE stream as it arrives, in any split
(the chat pipe's contract, `render_service.derender.pipe`). Neither API ends its stream
with ``[DONE]``. An engine error event, a derender failure, or input that ends before the
engine's ``[DONE]`` becomes the API's ``error`` event and ends the stream.
"""

from __future__ import annotations

from typing import Any

import orjson
import pydantic

from ..errors import OpenAIError, bad_request
from ..wire import sse
from . import OVER_CHAT
from ..wire.generate import GenerateResponse
from .session import FrontDoorSession
from ..derender.pipe import PipeSession
from ..derender.service import Derenderer


def _events(events: list[dict]) -> bytes:
    return b"".join(sse.named_event(ev["type"], ev) for ev in events)


class FrontDoorPipe(PipeSession):
    """One piped stream for ``kind`` ``"responses"`` / ``"messages"``: the chat pipe's
    reading of engine SSE (``feed`` / ``close``), this module's events.

    Raises:
        OpenAIError: 400 for a header without the API's request.
    """

    # PipeSession.__init__ is not called: it plans a chat/completion answer; this one plans its own.
    def __init__(self, d: Derenderer, kind: str, header: Any) -> None:
        field = OVER_CHAT[kind].request_field
        request = getattr(header, field)
        if request is None:
            raise bad_request(f"The pipe header needs `{field}`.", field)
        d.check_prompt(header.prompt_token_ids, "prompt_token_ids")
        self.kind = kind
        self.session = FrontDoorSession(d, kind, request, header.prompt_token_ids,
                                        model=d.model_name(header.model or request.model),
                                        prompt_tokens=header.prompt_tokens)
        self.finished = False
        self._reader = sse.SSEReader()

    def _dispatch(self, payload: bytes) -> bytes:
        if sse.is_done(payload):
            self.finished = True
            return _events(self.session.finish("abort"))
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return self._fail(bad_request("An engine SSE event is not JSON."))
        if isinstance(obj, dict) and "error" in obj:
            err = obj["error"] if isinstance(obj["error"], dict) else {"message": str(obj["error"])}
            return self._fail(OpenAIError(502, str(err.get("message", "engine error"))))
        try:
            events = self.session.step(GenerateResponse.model_validate(obj))
        except pydantic.ValidationError as exc:
            return self._fail(bad_request(f"An engine SSE event is not a generate chunk: {exc.errors(include_url=False)[0]['msg']}"))
        except OpenAIError as exc:
            return self._fail(exc)
        return _events(events)

    def _fail(self, err: OpenAIError) -> bytes:
        self.finished = True
        fd = self.session.fd
        seq = fd.seq if fd is not None and hasattr(fd, "seq") else 0
        return _events([OVER_CHAT[self.kind].stream_error(err, seq)])
