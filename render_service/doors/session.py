"""Derender for the Responses and Anthropic Messages back doors: engine tokens → a
``Response`` / an Anthropic ``message``, whole or streamed. No HTTP.

One pipeline for every door over chat (`doors.OVER_CHAT`): the client's request converts
to the same chat conversation render used (``door.to_chat``), which plans the parsers
(`chat_plan`); each choice runs through the chat derender's `ChoiceStream` (detokenizer,
stop strings, reasoning and tool parsers), and its deltas go to the door's event machine
(``door.open_machine``: `ResponsesStream` / `AnthropicStream`). Non-streaming is the stream
fed once.

Bodies (our own routes; vLLM 0.33 has no derender for these APIs), modelled on the chat
derender (wire brief §1.6):

- ``POST /v1/responses/derender``: ``{"generate_response", "prompt_token_ids"?,
  "prompt_tokens"?, "responses_request", "model"?}`` → ``Response``; with ``"stream": true``
  and ``"generate_chunk"`` + ``"stream_state"`` (null first) → ``{"events": [...],
  "stream_state"}``.
- ``POST /v1/messages/derender``: the same with ``"messages_request"`` → ``message`` /
  ``{"events", "stream_state"}``.

``stream_state`` is the chat codec's sealed, versioned value (`StateCodec`), payload
``{"c": created, "pl": prompt length, "cs": ChoiceStream state, "fd": back-door state}``.
One choice per request (these APIs have no ``n``).
"""

from __future__ import annotations

import time
from typing import Any

from ..derender.choice import ChoiceStream
from ..derender.plan import Plan, chat_plan
from ..derender.service import Derenderer
from ..derender.state import StateContentError, resumed_from
from ..errors import OpenAIError, bad_request
from ..wire.derender import ChatRequestFields
from ..wire.generate import GenChoice, GenerateResponse
from . import OVER_CHAT


class FrontDoorSession:
    """One request's single choice through `ChoiceStream` and a back-door machine.

    ``kind``: ``"responses"`` or ``"messages"``; ``request``: the validated client request;
    ``prompt``: the rendered prompt ids (a tail suffices); ``payload``: an opened
    ``stream_state`` payload, or None for a fresh start. Kept in memory by the driver and
    the pipe; rebuilt per call by stateless streaming.
    """

    def __init__(self, d: Derenderer, kind: str, request: Any, prompt: list[int] | None, *, model: str,
                 prompt_tokens: int | None = None, payload: dict | None = None) -> None:
        self.d, self.kind, self.request = d, kind, request
        self.door = OVER_CHAT[kind]
        chat = self.door.to_chat(request)
        self.plan: Plan = chat_plan(d.bundle, d.config, ChatRequestFields.model_validate(chat), None, None)
        if payload is None:
            self.created = int(time.time())
            self.prompt_len = prompt_tokens if prompt_tokens is not None else len(prompt or [])
            self.cs = ChoiceStream(self.plan, d.tok, prompt)
            self.fd: Any = None  # the door's event machine, opened by the first chunk
            self.model = model
        else:
            try:
                self.created, self.prompt_len = int(payload["c"]), int(payload["pl"])
                self.cs = ChoiceStream(self.plan, d.tok, None, payload["cs"])
                self.fd = self.door.restore_machine(payload["fd"]) if payload.get("fd") is not None else None
            except OpenAIError:
                raise
            except Exception:
                raise bad_request("Invalid stream_state: malformed payload; send back the stream_state of the "
                                  "previous response of this route unchanged", "stream_state") from None
            self.model = model

    def payload(self) -> dict:
        return {"c": self.created, "pl": self.prompt_len, "cs": self.cs.export_state(),
                "fd": self.fd.export_state() if self.fd is not None else None}

    def _machine(self, request_id: str) -> Any:
        if self.fd is None:
            self.fd = self.door.open_machine(self, request_id)
        return self.fd

    def step(self, gen: GenerateResponse) -> list[dict]:
        """One engine chunk (or the whole response) → back-door events."""
        self.d.check_response(gen, "generate_chunk", streaming=True)
        one_choice(gen, "generate_chunk")
        limit = self.d.bundle.max_model_len
        fd = self._machine(gen.request_id)
        out: list[dict] = []
        for i, ch in enumerate(gen.choices):
            check_finish_reason(ch.finish_reason, f"generate_chunk.choices.{i}.finish_reason")
            if self.prompt_len + self.cs.n_tokens + len(ch.token_ids or []) > limit:
                raise bad_request(f"Prompt plus output exceed max_model_len={limit}.", "generate_chunk")
            delta = self.cs.step(ch)
            if delta is None:
                continue
            out += self.door.events(fd, delta, self.prompt_len, self.cs.n_tokens)
        return out

    def finish(self, finish_reason: str = "abort") -> list[dict]:
        """End a stream the engine did not finish (cut by the driver): flush as ``finish_reason``."""
        if self.fd is not None and self.fd.finished:
            return []
        out = self.step(GenerateResponse(choices=[GenChoice(index=0, finish_reason=finish_reason, token_ids=[])]))
        return out

    def whole(self, gen: GenerateResponse) -> dict:
        """A complete generate response → the ``Response`` / ``message``."""
        self.d.check_response(gen, "generate_response", streaming=False)
        one_choice(gen, "generate_response")
        ch = gen.choices[0]
        check_finish_reason(ch.finish_reason, "generate_response.choices.0.finish_reason")
        if ch.finish_reason is None:
            ch = ch.model_copy(update={"finish_reason": "stop"})
        events = self.step(gen.model_copy(update={"choices": [ch]}))
        return final_object(self.kind, events)


FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "abort"})


def check_finish_reason(finish_reason: str | None, param: str) -> None:
    """Raise unless ``finish_reason`` is one these APIs can state.

    ``"error"`` (the engine failed mid-generation) is vLLM 0.33's ``_raise_if_error``:
    a 500 ``Internal server error``, never a finished answer. Any other string outside
    ``stop`` / ``length`` / ``tool_calls`` / ``abort`` is a 400: a ``Response`` status or an
    Anthropic ``stop_reason`` cannot say what it means.
    """
    if finish_reason is None or finish_reason in FINISH_REASONS:
        return
    if finish_reason == "error":
        raise OpenAIError(500, "Internal server error: the generation failed (finish_reason \"error\").", param=param)
    raise bad_request(f"Unknown finish_reason {finish_reason!r}; expected one of "
                      f"{', '.join(sorted(FINISH_REASONS))} (or \"error\").", param)


def one_choice(gen: GenerateResponse, param: str) -> None:
    """400 unless ``gen`` carries at most one choice, with index 0: a ``Response`` or a
    ``message`` holds one answer, and dropping the others silently would hide them."""
    if len(gen.choices) > 1:
        raise bad_request(f"This API answers with one choice (index 0); `{param}` has {len(gen.choices)}.",
                          f"{param}.choices")
    if gen.choices and gen.choices[0].index != 0:
        raise bad_request(f"This API answers with one choice, index 0; `{param}` has index {gen.choices[0].index}.",
                          f"{param}.choices.0.index")


def final_object(kind: str, events: list[dict]) -> dict:
    """The finished answer of door ``kind`` (``Response`` / ``message``) that ``events`` (a whole stream) describe."""
    return OVER_CHAT[kind].final(events)


class FrontDoorDerenderer:
    """Stateless derender calls for both back doors, over a chat `Derenderer`."""

    def __init__(self, d: Derenderer) -> None:
        self.d = d

    def _session(self, kind: str, req: Any, payload: dict | None) -> FrontDoorSession:
        request = getattr(req, OVER_CHAT[kind].request_field)
        prompt = req.prompt_token_ids
        self.d.check_prompt(prompt, "prompt_token_ids")
        model = self.d.model_name(req.model or request.model)
        return FrontDoorSession(self.d, kind, request, prompt, model=model, prompt_tokens=req.prompt_tokens,
                                payload=payload)

    def whole(self, kind: str, req: Any) -> dict:
        """Non-streaming: ``Response`` (kind ``responses``) or ``message`` (``messages``)."""
        gen = req.generate_response
        if req.prompt_token_ids is None and gen.prompt_token_ids is not None:
            req = req.model_copy(update={"prompt_token_ids": gen.prompt_token_ids})
        if req.prompt_tokens is None and gen.usage is not None and gen.usage.prompt_tokens:
            req = req.model_copy(update={"prompt_tokens": gen.usage.prompt_tokens})
        return self._session(kind, req, None).whole(gen)

    def stream(self, kind: str, req: Any) -> dict:
        """One generate chunk + the previous ``stream_state`` → ``{"events", "stream_state"}``."""
        payload = None
        if req.stream_state is not None:
            try:
                payload = self.d.codec.open(req.stream_state, kind)
            except ValueError as exc:
                raise bad_request(f"Invalid stream_state: {exc}", "stream_state") from None
        try:
            with resumed_from(payload):
                session = self._session(kind, req, payload)
                events = session.step(req.generate_chunk)
                sealed = self.d.codec.seal(session.payload(), kind)
        except StateContentError as exc:
            raise bad_request(f"Invalid stream_state: {exc}", "stream_state") from None
        return {"events": events, "stream_state": sealed}
