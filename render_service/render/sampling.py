"""OpenAI request fields → vLLM ``sampling_params`` (wire brief §2.2).

vLLM serialises `SamplingParams` with msgspec's omit-defaults, so only fields that differ
from the dataclass defaults appear on the wire (``n: 1``, ``temperature: 1.0`` never do).
We build the same dict directly. One deliberate extension (brief §8.4): the model's EOS
ids are added to ``stop_token_ids`` so a tokens-only engine, which has no tokenizer, stops
on them too.
"""

from __future__ import annotations

from typing import Any

from ..wire.generate import OUTPUT_KIND_DELTA, OUTPUT_KIND_FINAL_ONLY
from ..wire.openai import SamplingFields, stop_list

_NEUTRAL = {
    "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
    "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
}


def build_sampling_params(
    req: SamplingFields,
    *,
    max_tokens: int,
    generation_config: dict,
    eos_token_ids: list[int],
    skip_special_tokens: bool,
    logprobs: int | None,
    prompt_logprobs: int | None = None,
) -> dict[str, Any]:
    """The ``sampling_params`` object of a `GenerateRequest`.

    Args:
        req: the validated chat or completions request.
        max_tokens: already resolved against the context (see `request.resolve_max_tokens`).
        generation_config: the model's ``generation_config.json`` (server defaults).
        eos_token_ids: added to ``stop_token_ids`` unless ``ignore_eos``.
        skip_special_tokens: already resolved (parsers force false).
        logprobs: number of top logprobs per token, or None.

    Returns:
        A dict in vLLM field order holding only non-default fields, plus the fields vLLM
        always emits (``stop``, ``stop_token_ids``, ``max_tokens``, ``output_kind``,
        ``skip_clone``, ``bad_words``, ``skip_reading_prefix_cache``).
    """
    sp: dict[str, Any] = {}
    if req.n and req.n != 1:
        sp["n"] = req.n
    for name in ("presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p", "top_k", "min_p"):
        value = getattr(req, name)
        if value is None:
            value = generation_config.get(name)
        if value is not None and value != _NEUTRAL[name]:
            sp[name] = value
    temperature = sp.get("temperature", 1.0)
    if 0 < temperature < 0.01:
        sp["temperature"] = 0.01
    if temperature < 1e-5:  # greedy: vLLM resets the truncation knobs
        for name in ("top_p", "top_k", "min_p"):
            sp.pop(name, None)
    if req.seed is not None and req.seed != -1:
        sp["seed"] = req.seed
    sp["stop"] = stop_list(req.stop)
    stop_ids = list(dict.fromkeys(req.stop_token_ids or []))
    if not req.ignore_eos:
        stop_ids += [i for i in eos_token_ids if i not in stop_ids]
    sp["stop_token_ids"] = stop_ids
    if req.ignore_eos:
        sp["ignore_eos"] = True
    sp["max_tokens"] = max_tokens
    if req.min_tokens:
        sp["min_tokens"] = req.min_tokens
    if logprobs is not None:
        sp["logprobs"] = logprobs
    if prompt_logprobs is not None:
        sp["prompt_logprobs"] = prompt_logprobs
    if not skip_special_tokens:
        sp["skip_special_tokens"] = False
    if not req.spaces_between_special_tokens:
        sp["spaces_between_special_tokens"] = False
    if req.include_stop_str_in_output:
        sp["include_stop_str_in_output"] = True
    sp["output_kind"] = OUTPUT_KIND_DELTA if req.stream else OUTPUT_KIND_FINAL_ONLY
    sp["skip_clone"] = True
    structured = _structured_outputs(req)
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
    return sp


def _structured_outputs(req: SamplingFields) -> dict | None:
    keys = ("json", "regex", "choice", "grammar", "json_object", "structural_tag",
            "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern")
    base = dict(req.structured_outputs or {})
    fmt = req.response_format or {}
    kind = fmt.get("type")
    if kind == "json_object":
        base["json_object"] = True
    elif kind == "json_schema":
        base["json"] = (fmt.get("json_schema") or {}).get("schema")
    if not base:
        return None
    return {k: base.get(k) for k in keys}
