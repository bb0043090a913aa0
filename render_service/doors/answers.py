"""What a door answers with, as a derender stream goes (``s`` below: the stream's session): the one `StreamSession` (session.py)
runs the choices through the chat derender; a door's answer builder (``Door.answer``) plans
them, turns each choice's deltas into the API's own output and frames that for the stateless
route, the pipe and the driver.

- `ChunkAnswer` (chat, completions): one OpenAI chunk per engine chunk, its choices built by
  `derender.assemble`; stateless answer ``{"chunk", "stream_state"}``; the pipe's SSE is
  ``data: {chunk}`` ended by ``data: [DONE]``. Any number of choices (``n``).
- `EventAnswer` (Responses, Messages): the door's event machine (``door.open_machine``) turns
  the deltas into the API's events; stateless answer ``{"events", "stream_state"}``; the
  pipe's SSE is ``event: <type>`` without ``[DONE]``. One choice (these APIs have no ``n``).

``stream_state`` payloads (sealed by `derender.state.StateCodec` for the door's name):
chunks ``{"c": created, "pl": prompt length, "ch": {index: ChoiceStream state}}``, events
``{"c", "pl", "cs": ChoiceStream state, "fd": event machine state}``.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from ..derender import assemble
from ..derender.choice import ChoiceStream, Delta
from ..derender.plan import MAX_CHOICES, Plan, chat_plan, completion_plan
from ..errors import OpenAIError, bad_request
from ..wire import sse
from ..wire.derender import ChatRequestFields
from ..wire.generate import GenChoice, GenerateResponse


class ChunkAnswer:
    """OpenAI chunks (`ChatAnswer`, `CompletionAnswer`): the choices `derender.assemble` builds.

    ``body``: the derender body (stream request or pipe header) with the API's request
    (``chat_request`` / ``completion_request``), ``sampling_params``, ``stream_options``.
    """

    key, key_type = "chunk", dict  # the stateless answer's key, and its value's type
    kind = ""  # assemble's name of the API: "chat" | "completion"
    streams_empty = False  # the pipe and the driver send no chunk for an empty delta
    request_fields: type | None = ChatRequestFields  # the request's model (the keys it reads: `derender.known`)
    finished = False  # (event machines only)

    def __init__(self, door: Any, body: Any) -> None:
        req = self.request(door, body)
        opts = getattr(body, "stream_options", None) or (req.stream_options if req is not None else None) or {}
        self.include_usage = bool(opts.get("include_usage"))
        self.usage_sent = False

    @staticmethod
    def model(d: Any, door: Any, body: Any) -> str:
        return d.model_name(body.model)

    @staticmethod
    def driver_request(req: Any) -> ChatRequestFields:
        """The fields derender reads, taken from the driver's validated client request (no
        second validation)."""
        values = {name: getattr(req, name) for name in ChatRequestFields.model_fields if hasattr(req, name)}
        opts = values.get("stream_options")
        if isinstance(opts, BaseModel):
            values["stream_options"] = opts.model_dump()
        return ChatRequestFields.model_construct(**values)

    @staticmethod
    def view(door: Any, answer: dict) -> dict:
        """What the driver's decode loop reads of one chunk's answer (its ``choices``' finish)."""
        return answer

    @staticmethod
    def check_header(door: Any, body: Any) -> None:
        """Nothing: a chat pipe header may carry ``parse_context`` alone."""

    # -- state -------------------------------------------------------------------------
    def start(self, s: Any, payload: dict | None) -> None:
        if payload is None:
            s.created, s.prompt_len = int(time.time()), len(s.prompt or [])
            return
        try:
            _check_payload(payload, s.d.bundle.max_model_len)
        except ValueError as exc:
            raise bad_request(f"Invalid stream_state: {exc}", "stream_state") from None
        s.created, s.prompt_len = payload["c"], payload["pl"]
        s.states = dict(payload["ch"])

    def payload(self, s: Any) -> dict:
        ch = dict(s.states)
        for key, cs in s.live.items():
            ch[key] = cs.export_state()
        return {"c": s.created, "pl": s.prompt_len, "ch": ch}

    # -- output ------------------------------------------------------------------------
    def check(self, s: Any, gen: GenerateResponse) -> None:
        """Nothing beyond the session's checks (any number of choices)."""

    def choice(self, s: Any, ch: GenChoice, delta: Delta) -> list[dict]:
        if self.kind == "chat":
            return [assemble.chat_chunk_choice(ch.index, delta, s.plan, ch.token_ids, ch)]
        return [assemble.completion_choice(ch.index, delta, s.plan, ch.token_ids, streaming=True, passthrough=ch)]

    def chunk(self, s: Any, gen: GenerateResponse, choices: list[dict]) -> dict:
        rid = assemble.response_id(s.rid or gen.request_id, self.kind)
        u = None
        if gen.usage is not None:
            p = s.prompt_tokens if s.prompt_tokens is not None else gen.usage.prompt_tokens
            u = assemble.usage(p, gen.usage.completion_tokens, s.d.prompt_tokens_details(gen))
        make = assemble.chat_chunk if self.kind == "chat" else assemble.completion_chunk
        return make(rid, s.created, s.model, choices, u, gen.metrics)

    # -- pipe --------------------------------------------------------------------------
    def sse(self, s: Any, gen: GenerateResponse, choices: list[dict]) -> bytes:
        if not choices and (gen.usage is None or not self.include_usage):
            return b""
        self.usage_sent |= gen.usage is not None and not choices
        return sse.event(self.chunk(s, gen, choices))

    def done(self, s: Any) -> bytes:
        out = b""
        if self.include_usage and not self.usage_sent:
            done = sum(cs.n_tokens for cs in s.live.values())
            rid = assemble.response_id(s.rid, self.kind)
            prompt = s.prompt_tokens if s.prompt_tokens is not None else s.prompt_len
            make = assemble.chat_chunk if self.kind == "chat" else assemble.completion_chunk
            out = sse.event(make(rid, s.created, s.model, [], assemble.usage(prompt, done)))
        return out + sse.DONE

    def engine_error(self, s: Any, obj: dict) -> bytes:
        """An engine ``{"error": …}`` event: forwarded, then the end."""
        return sse.event(obj) + sse.DONE

    @staticmethod
    async def end_cut(out: Any, door: Any, err: OpenAIError) -> None:
        """End a started stream the server's drain cut (``out``: an `http.responder.Responder`):
        an error event, then ``[DONE]`` (vLLM's way)."""
        await out.event(door.error_body(err))
        await out.end_events("shutdown")

    def fail(self, s: Any, err: OpenAIError) -> bytes:
        return sse.event(err.body()) + sse.DONE


class ChatAnswer(ChunkAnswer):
    """``chat.completion.chunk``s; the plan is `chat_plan` of ``chat_request`` /
    ``parse_context`` / ``sampling_params``."""

    kind = "chat"
    many_prompts = False  # render gives one GenerateRequest

    @staticmethod
    def whole_fields(gens: list, prompts: list[list[int]]) -> dict:
        """The engine output of a non-streaming derender body (wire brief §1.6), one prompt."""
        return {"generate_response": gens[0], "prompt_tokens": len(prompts[0]), "prompt_token_ids": prompts[0]}

    @staticmethod
    def request(door: Any, body: Any) -> Any:
        return body.chat_request

    @staticmethod
    def plan(d: Any, door: Any, body: Any) -> Plan:
        return chat_plan(d.bundle, d.config, body.chat_request, body.parse_context, body.sampling_params)

    @staticmethod
    def inputs(door: Any, body: Any) -> tuple:
        """The validated fields `plan` reads (a live session is reused only for equal ones)."""
        return body.chat_request, body.parse_context, body.sampling_params

    @staticmethod
    def whole(derender: Any, door: Any, req: Any) -> dict:
        return derender.d.chat(req)


class CompletionAnswer(ChunkAnswer):
    """``text_completion`` chunks; the plan is `completion_plan` of ``completion_request``."""

    kind = "completion"
    many_prompts = True  # render gives one GenerateRequest per prompt

    @staticmethod
    def whole_fields(gens: list, prompts: list[list[int]]) -> dict:
        """The engine outputs of a non-streaming derender body (wire brief §1.7), one per prompt."""
        return {"generate_responses": gens, "prompt_tokens": [len(p) for p in prompts], "prompt_token_ids": prompts}

    @staticmethod
    def request(door: Any, body: Any) -> Any:
        return body.completion_request

    @staticmethod
    def plan(d: Any, door: Any, body: Any) -> Plan:
        return completion_plan(d.bundle, body.completion_request, body.sampling_params)

    @staticmethod
    def inputs(door: Any, body: Any) -> tuple:
        return body.completion_request, body.sampling_params

    @staticmethod
    def whole(derender: Any, door: Any, req: Any) -> dict:
        return derender.d.completion(req)


def _check_payload(payload: dict, max_model_len: int) -> None:
    """The whole top level of an opened chunk state, before anything reads it (a state that
    passed the MAC check is ours, unless the key leaked; either way a bad one is a 400).

    Raises:
        ValueError: a field of the wrong type or out of range.
    """
    c, pl, ch = payload.get("c"), payload.get("pl"), payload.get("ch")
    if type(c) is not int or not 0 <= c < 1 << 40 or type(pl) is not int or not 0 <= pl <= max_model_len:
        raise ValueError("stream_state payload is malformed")
    if not isinstance(ch, dict) or len(ch) > MAX_CHOICES:
        raise ValueError("stream_state payload is malformed (choices)")
    for key, value in ch.items():
        if not (key.isdigit() and key.isascii() and int(key) < MAX_CHOICES) or not isinstance(value, dict):
            raise ValueError("stream_state payload is malformed (choice entry)")


FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "abort"})


def check_finish_reason(finish_reason: str | None, param: str) -> None:
    """Raise unless ``finish_reason`` is one the event APIs can state.

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


class EventAnswer:
    """A door's own events (Responses, Messages) from its event machine.

    ``body``: the derender body (stream request or pipe header) carrying the client request
    under ``door.request_field``, or a namespace with that attribute (the driver).
    """

    key, key_type = "events", list
    streams_empty = True  # the machine decides what an empty delta sends
    request_fields: type | None = None  # (a lenient request: kept by its bytes only)

    def __init__(self, door: Any, body: Any) -> None:
        self.door = door
        self.machine: Any = None  # opened by the first chunk (it names the response id)

    @staticmethod
    def request(door: Any, body: Any) -> Any:
        return getattr(body, door.request_field)

    @staticmethod
    def plan(d: Any, door: Any, body: Any) -> Plan:
        chat = door.to_chat(getattr(body, door.request_field))
        return chat_plan(d.bundle, d.config, ChatRequestFields.model_validate(chat), None, None)

    @staticmethod
    def inputs(door: Any, body: Any) -> tuple:
        return (getattr(body, door.request_field),)

    @staticmethod
    def model(d: Any, door: Any, body: Any) -> str:
        return d.model_name(body.model or getattr(body, door.request_field).model)

    @staticmethod
    def driver_request(req: Any) -> Any:
        return req

    @staticmethod
    def view(door: Any, events: list[dict]) -> dict:
        """``{"choices", "events"}``: ``choices`` tells the driver's decode loop when the stream has ended."""
        done = any(ev["type"] in door.done_events for ev in events)
        return {"choices": [{"index": 0, "finish_reason": "stop"}] if done else [], "events": events}

    @staticmethod
    def check_header(door: Any, body: Any) -> None:
        """400 for a pipe header without the API's request."""
        if getattr(body, door.request_field) is None:
            raise bad_request(f"The pipe header needs `{door.request_field}`.", door.request_field)

    @staticmethod
    def whole(derender: Any, door: Any, req: Any) -> dict:
        """``derender``: the `session.Derender` answering."""
        gen = req.generate_response
        if req.prompt_token_ids is None and gen.prompt_token_ids is not None:
            req = req.model_copy(update={"prompt_token_ids": gen.prompt_token_ids})
        if req.prompt_tokens is None and gen.usage is not None and gen.usage.prompt_tokens:
            req = req.model_copy(update={"prompt_tokens": gen.usage.prompt_tokens})
        derender.d.check_prompt(req.prompt_token_ids, "prompt_token_ids")
        return derender.open(door, req).whole(gen)

    # -- state -------------------------------------------------------------------------
    def start(self, s: Any, payload: dict | None) -> None:
        if payload is None:
            s.created = int(time.time())
            s.prompt_len = s.prompt_tokens if s.prompt_tokens is not None else len(s.prompt or [])
            s.live["0"] = ChoiceStream(s.plan, s.d.tok, s.prompt)
            return
        try:
            s.created, s.prompt_len = int(payload["c"]), int(payload["pl"])
            s.live["0"] = ChoiceStream(s.plan, s.d.tok, None, payload["cs"])
            self.machine = self.door.restore_machine(payload["fd"]) if payload.get("fd") is not None else None
        except OpenAIError:
            raise
        except Exception:
            raise bad_request("Invalid stream_state: malformed payload; send back the stream_state of the "
                              "previous response of this route unchanged", "stream_state") from None

    def payload(self, s: Any) -> dict:
        return {"c": s.created, "pl": s.prompt_len, "cs": s.live["0"].export_state(),
                "fd": self.machine.export_state() if self.machine is not None else None}

    # -- output ------------------------------------------------------------------------
    def check(self, s: Any, gen: GenerateResponse) -> None:
        one_choice(gen, "generate_chunk")
        if self.machine is None:
            self.machine = self.door.open_machine(s, gen.request_id)
        for i, ch in enumerate(gen.choices):
            check_finish_reason(ch.finish_reason, f"generate_chunk.choices.{i}.finish_reason")

    def choice(self, s: Any, ch: GenChoice, delta: Delta) -> list[dict]:
        return self.door.events(self.machine, delta, s.prompt_len, s.live["0"].n_tokens)

    def chunk(self, s: Any, gen: GenerateResponse, events: list[dict]) -> list[dict]:
        return events

    @property
    def finished(self) -> bool:
        return self.machine is not None and self.machine.finished

    # -- pipe --------------------------------------------------------------------------
    def sse(self, s: Any, gen: GenerateResponse, events: list[dict]) -> bytes:
        return b"".join(sse.named_event(ev["type"], ev) for ev in events)

    def done(self, s: Any) -> bytes:
        return self.sse(s, None, s.finish("abort"))

    @staticmethod
    async def end_cut(out: Any, door: Any, err: OpenAIError) -> None:
        """End a started stream the server's drain cut: the API's ``error`` event (no ``[DONE]``)."""
        await out.end(sse.named_event("error", door.stream_error(err, 0)))

    def engine_error(self, s: Any, obj: dict) -> bytes:
        err = obj["error"] if isinstance(obj["error"], dict) else {"message": str(obj["error"])}
        return self.fail(s, OpenAIError(502, str(err.get("message", "engine error"))))

    def fail(self, s: Any, err: OpenAIError) -> bytes:
        seq = self.machine.seq if self.machine is not None and hasattr(self.machine, "seq") else 0
        ev = self.door.stream_error(err, seq)
        return sse.named_event(ev["type"], ev)
