"""OpenAI request fields → vLLM ``sampling_params`` (wire brief §2.2).

Field for field what vLLM 0.33's render writes (checked against its recorded answers in
``tests/fixtures/vllm``). One deliberate extension (brief §8.4): the model's EOS ids are
added to ``stop_token_ids`` so a tokens-only engine, which has no tokenizer, stops on them
too.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import bad_request
from ..wire.generate import OUTPUT_KIND_DELTA, OUTPUT_KIND_FINAL_ONLY
from ..wire.openai import SamplingFields, stop_list

# Values vLLM's render fills in when neither the request nor generation_config sets them.
_DEFAULTS = {
    "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
    "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
}
_GREEDY_EPS = 1e-5      # vLLM `_SAMPLING_EPS`: below it sampling is greedy
_MIN_TEMPERATURE = 0.01  # vLLM `_MAX_TEMP`: smaller positive temperatures are raised to it
_CONSTRAINT_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
_STRUCTURED_KEYS = ("json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace",
                    "disable_additional_properties", "whitespace_pattern", "structural_tag")


def build_sampling_params(
    req: SamplingFields,
    *,
    max_tokens: int,
    generation_config: dict,
    eos_token_ids: list[int],
    skip_special_tokens: bool,
    logprobs: int | None,
    prompt_logprobs: int | None = None,
    structured_outputs: dict | None | bool = True,
) -> dict[str, Any]:
    """The ``sampling_params`` object of a `GenerateRequest`, as vLLM 0.33's render writes it.

    vLLM encodes `SamplingParams` with msgspec's omit-defaults, which omits a field only when
    it holds the dataclass's own default object. So the penalties, ``temperature``,
    ``top_p`` and ``min_p`` that render fills in (from the request, else generation_config,
    else vLLM's defaults) always appear, even at neutral values, while integer fields equal
    to their default (``n: 1``, ``top_k: 0``, ``min_tokens: 0``) do not; greedy sampling
    resets ``top_p``/``top_k``/``min_p`` to the defaults, which then vanish (all recorded
    from vLLM in ``tests/fixtures/vllm``).

    Args:
        req: the validated chat or completions request.
        max_tokens: already resolved against the context (see `request.resolve_max_tokens`).
        generation_config: the model's ``generation_config.json`` (server defaults).
        eos_token_ids: added to ``stop_token_ids`` unless ``ignore_eos`` (our one deliberate
            extension, brief §8.4: a tokens-only engine has no tokenizer to know them).
        skip_special_tokens: already resolved (parsers force false).
        logprobs: number of top logprobs per token, or None.
        prompt_logprobs: number of prompt logprobs, or None.
        structured_outputs: True derives the constraint from the request's
            ``structured_outputs`` / ``response_format``; a dict or None replaces it (a tool
            constraint from `render.tool_constraints`).

    Returns:
        The dict, keys in vLLM's field order.
    """
    sp: dict[str, Any] = {}
    if req.n and req.n != 1:
        sp["n"] = req.n
    resolved = {}
    for name, default in _DEFAULTS.items():
        value = getattr(req, name)
        if value is None:
            value = generation_config.get(name, default)
        resolved[name] = value
    if 0 < resolved["temperature"] < _MIN_TEMPERATURE:
        resolved["temperature"] = _MIN_TEMPERATURE
    greedy = resolved["temperature"] < _GREEDY_EPS
    for name in ("presence_penalty", "frequency_penalty", "repetition_penalty", "temperature"):
        sp[name] = float(resolved[name])
    if getattr(req, "watermarking", None) is not None:
        sp["watermarking"] = req.watermarking
    if not greedy:
        sp["top_p"] = float(resolved["top_p"])
        if resolved["top_k"] != 0:
            sp["top_k"] = int(resolved["top_k"])
        sp["min_p"] = float(resolved["min_p"])
    if req.seed is not None and req.seed != -1:
        sp["seed"] = req.seed
    stops = stop_list(req.stop)
    sp["stop"] = stops
    stop_ids = list(dict.fromkeys(req.stop_token_ids or []))
    if not req.ignore_eos:
        stop_ids += [i for i in eos_token_ids if i not in stop_ids]
    sp["stop_token_ids"] = stop_ids
    if req.ignore_eos:
        sp["ignore_eos"] = True
    sp["max_tokens"] = max_tokens
    if req.min_tokens:
        sp["min_tokens"] = req.min_tokens
    logprob_token_ids = getattr(req, "logprob_token_ids", None)
    if logprobs is not None and logprob_token_ids is None:
        sp["logprobs"] = logprobs
    if prompt_logprobs is not None:
        sp["prompt_logprobs"] = prompt_logprobs
    if logprob_token_ids is not None:
        sp["logprob_token_ids"] = list(logprob_token_ids)
    if not skip_special_tokens:
        sp["skip_special_tokens"] = False
    if not req.spaces_between_special_tokens:
        sp["spaces_between_special_tokens"] = False
    if req.include_stop_str_in_output:
        sp["include_stop_str_in_output"] = True
    sp["output_kind"] = OUTPUT_KIND_DELTA if req.stream else OUTPUT_KIND_FINAL_ONLY
    if getattr(req, "stream_interval", None) is not None:
        sp["stream_interval"] = req.stream_interval
    sp["skip_clone"] = True
    if stops and not req.include_stop_str_in_output and max(len(s) for s in stops) > 1:
        # Characters the engine holds back from each delta to check stop strings.
        sp["output_text_buffer_length"] = max(len(s) for s in stops) - 1
    structured = structured_outputs_params(req) if structured_outputs is True else structured_outputs
    if structured is not None:
        sp["structured_outputs"] = structured
    if req.logit_bias:
        sp["logit_bias"] = {str(int(k)): max(-100.0, min(100.0, v)) for k, v in req.logit_bias.items()}
    if req.allowed_token_ids:
        sp["allowed_token_ids"] = req.allowed_token_ids
    if req.vllm_xargs:
        sp["extra_args"] = dict(req.vllm_xargs)
    sp["bad_words"] = list(req.bad_words or [])
    sp["skip_reading_prefix_cache"] = prompt_logprobs is not None
    if getattr(req, "thinking_token_budget", None) is not None:
        sp["thinking_token_budget"] = req.thinking_token_budget
    if getattr(req, "repetition_detection", None) is not None:
        sp["repetition_detection"] = req.repetition_detection.model_dump()
    if getattr(req, "routed_experts_prompt_start", 0):
        sp["routed_experts_prompt_start"] = req.routed_experts_prompt_start
    return sp


def structured_outputs_object(**fields: Any) -> dict[str, Any]:
    """vLLM's `StructuredOutputsParams` as its render writes it: every public key, the two
    flags as booleans (a null there is refused by vLLM's `GenerateRequest`), and the private
    backend fields vLLM's encoder keeps."""
    out = {k: fields.get(k) for k in _STRUCTURED_KEYS}
    out["disable_any_whitespace"] = bool(out["disable_any_whitespace"])
    out["disable_additional_properties"] = bool(out["disable_additional_properties"])
    out["_backend"] = None
    out["_backend_was_auto"] = False
    return out


def structured_outputs_params(req: SamplingFields) -> dict | None:
    """The request's own output constraint: ``structured_outputs`` with ``response_format``
    applied on top (wire brief §2.2), or None.

    Raises:
        OpenAIError: 400 when that makes more than one kind of constraint (``regex`` and
            ``json_object``…), as vLLM 0.33's `StructuredOutputsParams` refuses it.
    """
    base = {k: v for k, v in (req.structured_outputs or {}).items() if v is not None}
    fmt = req.response_format or {}
    kind = fmt.get("type")
    if kind == "json_object":
        base["json_object"] = True
    elif kind == "json_schema":
        base["json"] = (fmt.get("json_schema") or {}).get("schema")
    elif kind == "structural_tag":
        base["structural_tag"] = json.dumps(fmt)
    if not base:
        return None
    kinds = [k for k in _CONSTRAINT_KINDS if base.get(k) is not None]
    if len(kinds) > 1:  # vLLM's StructuredOutputsParams check: the engine can apply one grammar
        raise bad_request("You can only use one kind of structured outputs constraint but multiple are specified: "
                          f"{', '.join(kinds)}.")
    return structured_outputs_object(**base)
