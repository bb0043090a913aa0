"""What every front door shares: request ids, lengths, logprob limits, and the
`GenerateRequest` dict (vLLM 0.33 shape, every key present, nulls included; wire brief
§1.3, §1.4, lengths §2.6, ids §2.7).
"""

from __future__ import annotations

import os
from typing import Any

from ..config.serve import ServeConfig
from ..errors import bad_request, check_token_ids
from ..model import ModelBundle
from ..wire.limits import logit_bias_ids
from .sampling import build_sampling_params


_IDS: list[str] = []  # drawn from the OS's CSPRNG 256 at a time: one getrandom() per request was 2% of a small render
os.register_at_fork(after_in_child=_IDS.clear)  # a forked worker never repeats its parent's ids


def new_request_id() -> str:
    """16 random hex characters (vLLM's default request id), from ``os.urandom``."""
    try:
        return _IDS.pop()
    except IndexError:
        block = os.urandom(8 * 256).hex()
        _IDS.extend(block[i:i + 16] for i in range(0, len(block), 16))  # list ops are atomic: threads may share
        return _IDS.pop()


def refuse_beam_search(req: Any) -> None:
    """Raises `OpenAIError` 400: this tier has no beam search."""
    if req.use_beam_search:
        raise bad_request("use_beam_search is not supported.", "use_beam_search")


TRUNCATE_HINT = "Shorten the prompt or set truncate_prompt_tokens."
"""The end of the too-long-prompt message; the front doors name their own fields instead."""


def resolve_max_tokens(bundle: ModelBundle, prompt_len: int, requested: int | None, param: str) -> int:
    """``max_tokens`` per wire brief §2.6, with errors that name both lengths.

    Raises:
        OpenAIError: 400 when the request asks for more than the context, or the prompt
        leaves no room to generate.
    """
    limit = bundle.max_model_len
    if requested is not None and requested > limit:
        raise bad_request(
            f"{param}={requested} is larger than this model's maximum context length of {limit} tokens.", param
        )
    if prompt_len >= limit:
        raise bad_request(
            f"This model's maximum context length is {limit} tokens, and your prompt contains {prompt_len} "
            f"input tokens, which leaves no room for output. {TRUNCATE_HINT}",
            "input_tokens",
        )
    room = limit - prompt_len
    default = bundle.generation_config.get("max_new_tokens")
    want = requested if requested is not None else (default or room)
    return min(room, want)


def check_logprobs(config: ServeConfig, requested: dict[str, int | None]) -> None:
    """Logprob counts above ``--max-logprobs`` are refused up front (vLLM checks them at derender)."""
    if config.max_logprobs < 0:
        return
    for param, value in requested.items():
        if value is not None and value > config.max_logprobs:
            raise bad_request(f"{param}={value} exceeds the server limit --max-logprobs={config.max_logprobs}.", param)


def truncate(token_ids: list, truncate_prompt_tokens: int | None, max_model_len: int,
             side: str | None = None) -> list:
    """Keep ``truncate_prompt_tokens`` ids (-1: the context minus one): the last ones, or the
    first ones with ``truncation_side: "right"`` (vLLM cuts on that side)."""
    if truncate_prompt_tokens is None:
        return token_ids
    keep = max_model_len - 1 if truncate_prompt_tokens == -1 else truncate_prompt_tokens
    if keep > max_model_len:
        raise bad_request(
            f"truncate_prompt_tokens={truncate_prompt_tokens} is larger than the maximum context length {max_model_len}.",
            "truncate_prompt_tokens",
        )
    if not keep:
        return []
    return token_ids[:keep] if side == "right" else token_ids[-keep:]


def check_min_tokens(min_tokens: int, max_tokens: int) -> None:
    """Raises `OpenAIError` 400 when ``min_tokens`` exceeds the resolved ``max_tokens`` (vLLM's
    `SamplingParams` check, param null as there)."""
    if min_tokens > max_tokens:
        raise bad_request(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.")


def token_offsets(bundle: ModelBundle, text: str, add_special_tokens: bool, count: int) -> list[list[int]] | None:
    """``[start, end]`` character offsets of each prompt token in the templated text
    (``return_token_offsets``), from the HF tokenizer; None when they do not line up with
    the ``count`` ids rendered."""
    hf = getattr(bundle.tokenizer, "hf", None)
    if hf is None:
        return None
    offsets = [list(o) for o in hf.encode(text, add_special_tokens=add_special_tokens).offsets]
    return offsets if len(offsets) == count else None


def sampling_params(req: Any, bundle: ModelBundle, max_tokens: int, skip_special: bool, logprobs: int | None,
                    prompt_logprobs: int | None = None, *, structured_outputs: dict | None | bool = True,
                    ) -> dict[str, Any]:
    """`build_sampling_params` with the model's generation defaults and EOS ids.

    Raises:
        OpenAIError: 400 for a ``logit_bias`` or ``allowed_token_ids`` token id outside the
        model's vocabulary (`ModelBundle.vocab_size`), or an empty ``allowed_token_ids``
        (vLLM's engine refuses them; render knows the vocabulary, so the request fails before
        any engine work).
    """
    check_token_ids(logit_bias_ids(req.logit_bias), bundle.vocab_size, "logit_bias")
    allowed = getattr(req, "allowed_token_ids", None)
    if allowed is not None:
        if not allowed:
            raise bad_request("allowed_token_ids must not be empty (no token could be sampled).",
                              param="allowed_token_ids")
        check_token_ids(allowed, bundle.vocab_size, "allowed_token_ids")
    return build_sampling_params(
        req,
        max_tokens=max_tokens,
        generation_config=bundle.generation_config,
        eos_token_ids=bundle.eos_token_ids,
        skip_special_tokens=skip_special,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        structured_outputs=structured_outputs,
    )


def generate_request(
    req: Any,
    *,
    request_id: str,
    token_ids: list[int],
    sampling_params: dict,
    reasoning_ended: bool | None,
    reasoning_parser_kwargs: dict | None,
    parse_context: dict | None,
    features: dict | None = None,
) -> dict[str, Any]:
    """The `GenerateRequest` dict for ``req`` (a validated chat or completions request)."""
    extra = dict(sampling_params.get("extra_args") or {})
    kv = req.kv_transfer_params if req.kv_transfer_params is not None else extra.pop("kv_transfer_params", None)
    if kv is not None and "prompt_token_ids" in kv:
        kv = {k: v for k, v in kv.items() if k != "prompt_token_ids"}
    ec = req.ec_transfer_params if req.ec_transfer_params is not None else extra.pop("ec_transfer_params", None)
    return {
        "request_id": request_id,
        "token_ids": token_ids,
        "token_offsets": None,
        "features": features,
        "content_parts": None,
        "sampling_params": sampling_params,
        "model": req.model,
        "reasoning_ended": reasoning_ended,
        "reasoning_parser_kwargs": reasoning_parser_kwargs,
        "return_token_ids": req.return_token_ids,
        "output_mode": "tokens",
        "parse_context": parse_context,
        "stream": req.stream,
        "stream_options": req.stream_options.model_dump(exclude_none=True) if req.stream and req.stream_options else None,
        "cache_salt": req.cache_salt,
        "priority": req.priority,
        "kv_transfer_params": kv,
        "ec_transfer_params": ec,
    }


def check_prompt_chars(bundle: ModelBundle, text: str, truncate_prompt_tokens: int | None,
                       truncation_side: str | None = None) -> str:
    """vLLM's check before tokenizing: a prompt longer than ``max_model_len`` tokens of the
    longest token can only be refused, so it is refused before the tokenizer spends seconds
    and hundreds of MB on it (a 16 M-character prompt cost 8.4 s and 531 MB before its 400).
    With truncation and an explicit side the text is pre-trimmed instead, as vLLM does.

    Raises:
        OpenAIError: 400 with param ``input_text``.
    """
    limit = bundle.max_model_len * bundle.tokenizer.max_token_chars
    if len(text) <= limit:
        return text
    if truncate_prompt_tokens is None:
        raise bad_request(
            f"This model's maximum context length is {bundle.max_model_len} tokens. However, your prompt contains "
            f"{len(text)} characters (more than {limit} characters, which is the upper bound for "
            f"{bundle.max_model_len} input tokens). Please reduce the length of the input prompt.", "input_text")
    if truncation_side is not None:
        return text[-limit:] if truncation_side == "left" else text[:limit]
    return text
