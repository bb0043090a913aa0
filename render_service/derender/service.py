"""Derender requests → OpenAI responses. Pure functions over validated bodies; no HTTP.

`Derenderer` serves one model:

* `chat` / `completion`: non-streaming (§1.6 / §1.7 response shapes).
* the checks of a derender body (prompt ids, generate responses), the ``stream_state``
  codec and the streams kept live, which every door's stream uses
  (`render_service.doors.session.StreamSession`).

Errors are `OpenAIError` (400 for anything the caller sent wrong, including a bad
``stream_state``).
"""

from __future__ import annotations

import logging
import time
from functools import cached_property
from typing import Any

from ..config.serve import ServeConfig
from ..errors import bad_request
from . import assemble
from .choice import ChoiceStream, Delta
from .logprobs import logprob_ids
from ..errors import check_token_ids
from .plan import MAX_CHOICES, Plan, chat_plan, completion_plan
from ..wire.derender import DerenderChatRequest, DerenderCompletionRequest
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
