"""Derender of every door's stream: engine tokens → the door's answer, whole or streamed.
No HTTP.

One `StreamSession` per stream, whatever the door: each choice runs through the chat
derender's `ChoiceStream` (detokenizer, stop strings, reasoning and tool parsers, planned by
the door: ``door.answer.plan``), and its deltas go to the door's answer builder
(``door.answer``, `answers.py`): OpenAI chunks for chat and completions, the door's event
machine for Responses and Messages. The pipe (pipe.py) and the driver keep a session for the
whole stream; the stateless route (`Derender.stream`) keeps the one it answered with live
(`derender.live.LiveStreams`) and rebuilds one from ``stream_state`` otherwise.

Stateless bodies: chat and completions are vLLM 0.33's (wire brief §1.6 / §1.7), answering
``{"chunk", "stream_state"}``. Responses and Messages (our routes; vLLM has no derender for
them) are modelled on the chat derender:

- ``POST /v1/responses/derender``: ``{"generate_response", "prompt_token_ids"?,
  "prompt_tokens"?, "responses_request", "model"?}`` → ``Response``; with ``"stream": true``
  and ``"generate_chunk"`` + ``"stream_state"`` (null first) → ``{"events": [...],
  "stream_state"}``.
- ``POST /v1/messages/derender``: the same with ``"messages_request"`` → ``message`` /
  ``{"events", "stream_state"}``.

Work and state per call are proportional to the chunk and to what is unfinished, not to
what was streamed before (vLLM replays everything, §3.3 / §8 item 1). Errors are
`OpenAIError` (400 for anything the caller sent wrong, including a bad ``stream_state``).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

from ..derender.choice import ChoiceStream
from ..derender.plan import Plan
from ..derender.service import Derenderer
from ..derender.state import StateContentError, resumed_from
from ..errors import OpenAIError, bad_request
from ..wire.generate import GenChoice, GenerateResponse
from .answers import check_finish_reason, one_choice
from .door import Door

log = logging.getLogger(__name__)


class StreamSession:
    """The choices of one streamed request of ``door``.

    Args:
        d: the model's `Derenderer`.
        door: the `Door`; ``door.answer`` builds what each chunk answers.
        body: the derender body (stream request, pipe header, or the driver's namespace):
            ``model``, ``prompt_tokens`` and the API's request fields.
        plan: ``door.answer.plan`` of ``body``.
        prompt: the rendered prompt ids (a tail suffices); payload: an opened
            ``stream_state`` payload, or None for a fresh start.

    Raises:
        OpenAIError: 400 for a malformed payload.
    """

    def __init__(self, d: Derenderer, door: Door, body: Any, plan: Plan, prompt: list[int] | None,
                 payload: dict | None = None) -> None:
        self.d, self.door, self.plan, self.prompt = d, door, plan, prompt
        self.request = door.answer.request(door, body)
        self.model = door.answer.model(d, door, body)
        self.prompt_tokens: int | None = body.prompt_tokens
        self.created, self.prompt_len = 0, 0
        self.states: dict[str, Any] = {}  # index -> exported state (not yet live)
        self.live: dict[str, ChoiceStream] = {}
        self.restored: set[str] = set()  # choices rebuilt from a client's state
        self.rid = ""
        self.answer = door.answer(door, body)
        self.answer.start(self, payload)
        if payload is not None:
            self.restored |= set(self.live)

    @classmethod
    def open(cls, d: Derenderer, door: Door, body: Any, payload: dict | None = None) -> "StreamSession":
        """A session for ``body``, planned by the door."""
        return cls(d, door, body, door.answer.plan(d, door, body), body.prompt_token_ids, payload)

    def resume(self, body: Any) -> None:
        """Continue this live session with the next stateless request (`live.LiveStreams`):
        what a session rebuilt from its own exported state would hold for that request."""
        self.prompt, self.rid = body.prompt_token_ids, ""
        self.model = self.door.answer.model(self.d, self.door, body)
        self.prompt_tokens = body.prompt_tokens
        self.restored = set(self.live) | set(self.states)

    @property
    def finished(self) -> bool:
        """Every choice seen so far has finished (none waits in ``states``)."""
        return not self.states and all(cs.done for cs in self.live.values())

    def payload(self) -> dict:
        """The ``stream_state`` payload (sealed by the caller)."""
        return self.answer.payload(self)

    def _choice(self, key: str) -> ChoiceStream:
        cs = self.live.get(key)
        if cs is None:
            st = self.states.pop(key, None)
            if st is None:
                cs = ChoiceStream(self.plan, self.d.tok, self.prompt)
            else:
                try:
                    if not isinstance(st, dict):
                        raise ValueError("not an object")
                    cs = ChoiceStream(self.plan, self.d.tok, None, st)
                    self.restored.add(key)
                except OpenAIError:
                    raise
                except Exception as exc:  # includes a parser that cannot resume: the caller's state is bad
                    raise bad_request(f"Invalid stream_state for choice {key}: {exc}", "stream_state") from None
            self.live[key] = cs
        return cs

    def step(self, gen: GenerateResponse, keep_empty: bool = True) -> list[dict]:
        """Run the chunk's choices; returns the door's items for them (chunk choices or
        events; ``keep_empty``: a chunk choice with an empty delta is kept)."""
        self.d.check_response(gen, "generate_chunk", streaming=True, n=self.plan.n)
        if gen.request_id:
            self.rid = gen.request_id
        self.answer.check(self, gen)
        limit = self.d.bundle.max_model_len
        out: list[dict] = []
        for ch in gen.choices:
            cs = self._choice(str(ch.index))
            if self.prompt_len + cs.n_tokens + len(ch.token_ids or []) > limit:
                raise bad_request(f"Prompt plus output exceed max_model_len={limit}.", "generate_chunk")
            try:
                delta = cs.step(ch)
            except OpenAIError:
                raise
            except Exception as exc:
                if str(ch.index) not in self.restored:
                    raise
                # A state we sealed never does this: its content was not ours (leaked key).
                log.warning("restored stream state failed while stepping: %s: %s", type(exc).__name__, exc)
                raise bad_request(f"Invalid stream_state for choice {ch.index}.", "stream_state") from None
            if delta is None or (not keep_empty and delta.empty and not delta.first):
                continue
            out += self.answer.choice(self, ch, delta)
        return out

    def chunk(self, gen: GenerateResponse, items: list[dict]) -> Any:
        """What one engine chunk answers on the stateless route: the OpenAI chunk, or the events."""
        return self.answer.chunk(self, gen, items)

    def finish(self, finish_reason: str = "abort") -> list[dict]:
        """End an event stream the engine did not finish (cut by the driver): flush as ``finish_reason``."""
        if self.answer.finished:
            return []
        return self.step(GenerateResponse(choices=[GenChoice(index=0, finish_reason=finish_reason, token_ids=[])]))

    def whole(self, gen: GenerateResponse) -> dict:
        """A complete generate response → the door's answer (``Response`` / ``message``)."""
        self.d.check_response(gen, "generate_response", streaming=False)
        one_choice(gen, "generate_response")
        ch = gen.choices[0]
        check_finish_reason(ch.finish_reason, "generate_response.choices.0.finish_reason")
        if ch.finish_reason is None:
            ch = ch.model_copy(update={"finish_reason": "stop"})
        return self.door.final(self.step(gen.model_copy(update={"choices": [ch]})))


def driver_body(door: Door, req: Any, prompt: list[int], model: str | None) -> SimpleNamespace:
    """The derender body of a stream the driver derenders in process: the client's validated
    request ``req`` (chat and completions: its derender fields) as the door's request field."""
    return SimpleNamespace(model=model, prompt_token_ids=prompt, prompt_tokens=len(prompt), parse_context=None,
                           sampling_params=None, stream_options=None, **{door.request_field: req})


class Derender:
    """Stateless derender calls for every door, over a model's `Derenderer`."""

    def __init__(self, d: Derenderer) -> None:
        self.d = d

    def whole(self, door: Door, req: Any) -> dict:
        """Non-streaming: the door's whole answer (``ChatCompletionResponse``, ``Response``, …)."""
        return door.answer.whole(self, door, req)

    def open(self, door: Door, body: Any, payload: dict | None = None) -> StreamSession:
        """A session of ``door`` for ``body`` (planned by the door)."""
        return StreamSession.open(self.d, door, body, payload)

    def stream(self, door: Door, req: Any) -> dict:
        """One generate chunk + the previous ``stream_state`` → ``{"chunk" | "events", "stream_state"}``.

        A session this process answered the previous chunk with is continued live when the
        state and the plan's inputs are those it answered with (`derender.live`)."""
        d, answer = self.d, door.answer
        inputs = answer.inputs(door, req)
        state = req.stream_state
        session = d.live.take(state, door.name, inputs) if state is not None else None
        prompt = req.prompt_token_ids  # (a stream's chunks share one list when derender.known kept it)
        if session is None or (prompt is not session.prompt and prompt != session.prompt):  # a live session's passed
            d.check_prompt(prompt, "prompt_token_ids")
        payload = None
        if session is not None:
            session.resume(req)
        elif state is not None:
            try:
                payload = d.codec.open(state, door.name)
            except ValueError as exc:
                raise bad_request(f"Invalid stream_state: {exc}", "stream_state") from None
        try:
            with resumed_from(payload):
                if session is None:
                    session = StreamSession.open(d, door, req, payload)
                out = session.chunk(req.generate_chunk, session.step(req.generate_chunk))
        except StateContentError as exc:
            raise bad_request(f"Invalid stream_state: {exc}", "stream_state") from None
        try:
            sealed = d.codec.seal(session.payload(), door.name)
        except ValueError as exc:
            raise bad_request(f"Cannot continue this stream statelessly: {exc}.", "generate_chunk") from None
        if not session.finished:  # a finished stream is not continued (a retry is rebuilt from its state)
            d.live.put(sealed, door.name, session, inputs)
        return {answer.key: out, "stream_state": sealed}
