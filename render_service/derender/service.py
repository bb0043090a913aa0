"""Derender requests → OpenAI responses. Pure functions over validated bodies; no HTTP.

`Derenderer` serves one model:

* `chat` / `completion`: non-streaming (§1.6 / §1.7 response shapes).
* `chat_stream` / `completion_stream`: vLLM-compatible stateless streaming — one generate
  chunk plus the previous ``stream_state`` in, ``{"chunk", "stream_state"}`` out. Work
  and state per call are proportional to the chunk and to what is unfinished, not to
  what was streamed before (vLLM replays everything, §3.3 / §8 item 1).
* `StreamSession`: the choices of one stream; rebuilt from ``stream_state`` on each
  stateless call, kept for the whole connection by the pipe (``pipe.py``).

Errors are `OpenAIError` (400 for anything the caller sent wrong, including a bad
``stream_state``).
"""

from __future__ import annotations

import logging
import time
from functools import cached_property
from typing import Any, Callable

from ..config.serve import ServeConfig
from ..errors import OpenAIError, bad_request
from . import assemble
from .choice import ChoiceStream, Delta
from .logprobs import logprob_ids
from ..errors import check_token_ids
from .plan import MAX_CHOICES, Plan, chat_plan, completion_plan
from ..wire.derender import (DerenderChatRequest, DerenderChatStreamRequest, DerenderCompletionRequest,
                             DerenderCompletionStreamRequest)
from ..wire.generate import GenChoice, GenerateResponse
from .live import LiveStreams
from .state import StateCodec, check_secret

log = logging.getLogger(__name__)


class Derenderer:
    """Derender for one loaded model.

    Args:
        bundle: `ModelBundle` (uses ``tokenizer``, ``eos_token_ids``, ``special_tokens``,
            ``served_model_names``, ``max_model_len``, ``fingerprint``).
        config: `ServeConfig` (parsers, ``max_logprobs``, ``stream_state_secret``).
    """

    def __init__(self, bundle: Any, config: ServeConfig) -> None:
        self.bundle = bundle
        self.config = config
        self.tok = bundle.tokenizer
        check_secret(config.stream_state_secret)  # a short secret raises here, not on a stream's first chunk
        self.live = LiveStreams()

    @cached_property
    def codec(self) -> StateCodec:
        """The `stream_state` codec, made on first use (the model fingerprint is made lazily)."""
        return StateCodec(self.bundle.fingerprint, self.config.stream_state_secret)

    # -- checks ----------------------------------------------------------------------
    def model_name(self, model: str | None) -> str:
        """The request's ``model`` or the first served name."""
        return model or self.bundle.served_model_names[0]

    def check_prompt(self, ids: list[int] | None, param: str) -> None:
        """400 for prompt ids beyond ``max_model_len`` or outside the vocabulary."""
        if ids is not None and len(ids) > self.bundle.max_model_len:
            raise bad_request(f"`{param}` has {len(ids)} ids; the limit is max_model_len={self.bundle.max_model_len}.", param)
        check_token_ids(ids, self.tok.vocab_size, param)

    def check_response(self, gen: GenerateResponse, param: str, streaming: bool, n: int | None = None) -> None:
        """400 unless the generate response/chunk is within bounds (wire brief §1.6): choice
        count, distinct indexes below the request's ``n`` (when known: `Plan.n`), non-empty
        ids when not streaming, ids in the vocabulary,
        ``max_model_len``, and at most ``--max-logprobs`` candidates per position (plus the
        sampled token, which the engine lists first)."""
        if not streaming and not gen.choices:
            raise bad_request("The generate response has no choices.", f"{param}.choices")
        if len(gen.choices) > MAX_CHOICES:
            raise bad_request(f"At most {MAX_CHOICES} choices are allowed.", f"{param}.choices")
        limit, max_lp, vocab = self.bundle.max_model_len, self.config.max_logprobs, self.tok.vocab_size
        seen: set[int] = set()
        for i, ch in enumerate(gen.choices):
            ids = ch.token_ids
            if ch.index in seen:
                raise bad_request(f"Choice index {ch.index} appears twice.", f"{param}.choices.{i}.index")
            if n is not None and ch.index >= n:
                raise bad_request(f"Choice index {ch.index} is past the request's n={n} (indexes run from 0 to n-1).",
                                  f"{param}.choices.{i}.index")
            seen.add(ch.index)
            if not streaming and not ids:
                raise bad_request("A choice has no token_ids.", f"{param}.choices.{i}.token_ids")
            if ids and (len(ids) > limit or min(ids) < 0 or max(ids) >= vocab):  # (the message built on error only)
                if len(ids) > limit:
                    raise bad_request(f"A choice has {len(ids)} token_ids; max_model_len is {limit}.",
                                      f"{param}.choices.{i}.token_ids")
                check_token_ids(ids, vocab, f"{param}.choices.{i}.token_ids")
            if ch.logprobs is not None:
                p = f"{param}.choices.{i}"
                if len(ch.logprobs.content) > limit:
                    raise bad_request(f"logprobs.content is longer than max_model_len={limit}.", f"{p}.logprobs")
                if max_lp != -1 and any(len(pos.top_logprobs or []) > max_lp + 1 for pos in ch.logprobs.content):
                    raise bad_request(f"More than {max_lp} top logprobs per position (--max-logprobs).", f"{p}.logprobs")
                check_token_ids(logprob_ids(ch.logprobs), self.tok.vocab_size, f"{p}.logprobs")

    # -- non-streaming ---------------------------------------------------------------
    def _run_whole(self, plan: Plan, prompt: list[int] | None, ch: GenChoice) -> Delta:
        if ch.finish_reason is None:
            ch = ch.model_copy(update={"finish_reason": "stop"})
        delta = ChoiceStream(plan, self.tok, prompt).step(ch)
        assert delta is not None
        return delta

    def chat(self, req: DerenderChatRequest) -> dict:
        """Non-streaming chat derender → ``ChatCompletionResponse`` dict."""
        gen = req.generate_response
        plan = chat_plan(self.bundle, self.config, req.chat_request, req.parse_context, req.sampling_params)
        self.check_response(gen, "generate_response", streaming=False, n=plan.n)
        prompt = req.prompt_token_ids if req.prompt_token_ids is not None else gen.prompt_token_ids
        self.check_prompt(prompt, "prompt_token_ids")
        choices = []
        for ch in gen.choices:
            delta = self._run_whole(plan, prompt, ch)
            choices.append(assemble.chat_choice(ch.index, delta, plan, ch.token_ids, ch))
        completion = sum(len(ch.token_ids or []) for ch in gen.choices)
        return {
            "id": assemble.response_id(gen.request_id, "chat"), "object": "chat.completion",
            "created": gen.created or int(time.time()), "model": self.model_name(req.model), "choices": choices,
            "service_tier": None, "system_fingerprint": None,
            "usage": assemble.usage(self._prompt_tokens(req.prompt_tokens, gen, prompt), completion,
                                    self.prompt_tokens_details(gen)),
            "prompt_logprobs": gen.prompt_logprobs,
            "prompt_token_ids": gen.prompt_token_ids if plan.return_token_ids else None, "prompt_text": None,
            "kv_transfer_params": gen.kv_transfer_params, "ec_transfer_params": gen.ec_transfer_params,
            "metrics": gen.metrics,
        }

    def completion(self, req: DerenderCompletionRequest) -> dict:
        """Non-streaming completions derender → ``CompletionResponse`` dict (choices
        re-indexed across all generate responses, usage summed)."""
        n = len(req.generate_responses)
        if n > self.config.max_batch_prompts:  # one generate response per prompt of the batch render allowed
            raise bad_request(f"At most {self.config.max_batch_prompts} generate responses (one per prompt) are "
                              f"allowed; got {n} (--max-batch-prompts).", "generate_responses")
        for name, lst in (("prompt_tokens", req.prompt_tokens), ("prompt_token_ids", req.prompt_token_ids)):
            if lst is not None and len(lst) != n:
                raise bad_request(f"`{name}` must have one entry per generate response ({n}).", name)
        plan = completion_plan(self.bundle, req.completion_request, req.sampling_params)
        choices, prompt_total, completion_total = [], 0, 0
        for r, gen in enumerate(req.generate_responses):
            self.check_response(gen, f"generate_responses.{r}", streaming=False, n=plan.n)
            prompt = (req.prompt_token_ids[r] if req.prompt_token_ids else None) or gen.prompt_token_ids
            self.check_prompt(prompt, f"prompt_token_ids.{r}")
            prompt_total += self._prompt_tokens(req.prompt_tokens[r] if req.prompt_tokens else None, gen, prompt)
            for ch in gen.choices:
                delta = self._run_whole(plan, prompt, ch)
                choices.append(assemble.completion_choice(len(choices), delta, plan, ch.token_ids, streaming=False,
                                                          passthrough=ch))
                completion_total += len(ch.token_ids or [])
        gens = req.generate_responses
        kv = gens[0].kv_transfer_params if all(g.kv_transfer_params == gens[0].kv_transfer_params for g in gens) else None
        return {
            "id": assemble.response_id(gens[0].request_id, "completion"), "object": "text_completion",
            "created": gens[0].created or int(time.time()), "model": self.model_name(req.model), "choices": choices,
            "service_tier": None, "system_fingerprint": None, "usage": assemble.usage(prompt_total, completion_total),
            "kv_transfer_params": kv, "ec_transfer_params": gens[0].ec_transfer_params if n == 1 else None,
            "metrics": gens[0].metrics if n == 1 else None,
        }

    def prompt_tokens_details(self, gen: GenerateResponse) -> dict | None:
        """The engine's ``usage.prompt_tokens_details`` (e.g. ``cached_tokens``) when the server
        runs with ``--enable-prompt-tokens-details``, else None (as vLLM)."""
        if not self.config.enable_prompt_tokens_details or gen.usage is None:
            return None
        details = getattr(gen.usage, "prompt_tokens_details", None)
        return details if isinstance(details, dict) else None

    def _prompt_tokens(self, given: int | None, gen: GenerateResponse, prompt: list[int] | None) -> int:
        if given is not None:
            return given
        if gen.usage is not None and gen.usage.prompt_tokens:
            return gen.usage.prompt_tokens
        return len(prompt or [])

    # -- stateless streaming ---------------------------------------------------------
    def chat_stream(self, req: DerenderChatStreamRequest) -> dict:
        """One generate chunk → ``{"chunk": chat.completion.chunk, "stream_state": …}``."""
        return self._stream(req, "chat", (req.chat_request, req.parse_context, req.sampling_params),
                            lambda: chat_plan(self.bundle, self.config, req.chat_request, req.parse_context,
                                              req.sampling_params))

    def completion_stream(self, req: DerenderCompletionStreamRequest) -> dict:
        """One generate chunk → ``{"chunk": text_completion chunk, "stream_state": …}``."""
        return self._stream(req, "completion", (req.completion_request, req.sampling_params),
                            lambda: completion_plan(self.bundle, req.completion_request, req.sampling_params))

    def _stream(self, req: Any, api: str, inputs: tuple, make_plan: Callable[[], Plan]) -> dict:
        """``inputs``: the validated request fields ``make_plan`` reads (a live session's plan
        is reused only for equal ones, `live.LiveStreams`)."""
        gen: GenerateResponse = req.generate_chunk
        session = self.live.take(req.stream_state, api, inputs) if req.stream_state is not None else None
        prompt = req.prompt_token_ids  # (a stream's chunks share one list when derender.known kept it)
        if session is None or (prompt is not session.prompt and prompt != session.prompt):  # a live session's passed
            self.check_prompt(req.prompt_token_ids, "prompt_token_ids")
        if session is not None:
            session.resume(req.prompt_token_ids)
        else:
            plan = make_plan()
            if req.stream_state is None:
                payload: dict = {"c": int(time.time()), "pl": len(req.prompt_token_ids or []), "ch": {}}
            else:
                try:
                    payload = self.codec.open(req.stream_state, api)
                    _check_payload(payload, self.bundle.max_model_len)
                except ValueError as exc:
                    raise bad_request(f"Invalid stream_state: {exc}", "stream_state") from None
            session = StreamSession(self, plan, req.prompt_token_ids, payload)
        choices = session.step(gen, streaming_keep_empty=True)
        chunk = session.chunk(gen, choices, self.model_name(req.model), req.prompt_tokens)
        try:
            state = self.codec.seal(session.payload(), api)
        except ValueError as exc:
            raise bad_request(f"Cannot continue this stream statelessly: {exc}.", "generate_chunk") from None
        if not session.finished:  # a finished stream is not continued (a retry is rebuilt from its state)
            self.live.put(state, api, session, inputs)
        return {"chunk": chunk, "stream_state": state}


def _check_payload(payload: dict, max_model_len: int) -> None:
    """The whole top level of an opened state, before anything reads it (a state that passed
    the MAC check is ours, unless the key leaked; either way a bad one is a 400, never a 500).

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


class StreamSession:
    """The choices of one streamed request; shared by stateless calls (rebuilt from the
    payload each call) and by the pipe (kept in memory for the connection)."""

    def __init__(self, d: Derenderer, plan: Plan, prompt: list[int] | None, payload: dict) -> None:
        self.d, self.plan, self.prompt = d, plan, prompt
        self.created, self.prompt_len = payload["c"], payload["pl"]
        self.states: dict[str, Any] = dict(payload["ch"])      # index -> exported state (not yet live)
        self.live: dict[str, ChoiceStream] = {}
        self.restored: set[str] = set()  # choices rebuilt from a client's state
        self.rid = ""

    def resume(self, prompt: list[int] | None) -> None:
        """Continue this live session with the next stateless request (`live.LiveStreams`):
        what a session rebuilt from its own exported state would hold for that request."""
        self.prompt, self.rid = prompt, ""
        self.restored = set(self.live) | set(self.states)

    @property
    def finished(self) -> bool:
        """Every choice seen so far has finished (none waits in ``states``)."""
        return not self.states and all(cs.done for cs in self.live.values())

    def payload(self) -> dict:
        ch = dict(self.states)
        for key, cs in self.live.items():
            ch[key] = cs.export_state()
        return {"c": self.created, "pl": self.prompt_len, "ch": ch}

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

    def step(self, gen: GenerateResponse, streaming_keep_empty: bool) -> list[dict]:
        """Run the chunk's choices; returns OpenAI chunk choices (empty deltas kept or not)."""
        self.d.check_response(gen, "generate_chunk", streaming=True, n=self.plan.n)
        if gen.request_id:
            self.rid = gen.request_id
        limit = self.d.bundle.max_model_len
        out = []
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
            if delta is None or (not streaming_keep_empty and delta.empty and not delta.first):
                continue
            if self.plan.kind == "chat":
                out.append(assemble.chat_chunk_choice(ch.index, delta, self.plan, ch.token_ids, ch))
            else:
                out.append(assemble.completion_choice(ch.index, delta, self.plan, ch.token_ids, streaming=True,
                                                      passthrough=ch))
        return out

    def usage(self, gen: GenerateResponse, prompt_tokens: int | None) -> dict | None:
        if gen.usage is None:
            return None
        p = prompt_tokens if prompt_tokens is not None else gen.usage.prompt_tokens
        return assemble.usage(p, gen.usage.completion_tokens, self.d.prompt_tokens_details(gen))

    def chunk(self, gen: GenerateResponse, choices: list[dict], model: str, prompt_tokens: int | None) -> dict:
        rid = assemble.response_id(self.rid or gen.request_id, self.plan.kind)
        u = self.usage(gen, prompt_tokens)
        if self.plan.kind == "chat":
            return assemble.chat_chunk(rid, self.created, model, choices, u, gen.metrics)
        return assemble.completion_chunk(rid, self.created, model, choices, u, gen.metrics)
