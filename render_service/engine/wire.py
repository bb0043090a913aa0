"""Wire shapes of the tokens-only generate server (vLLM 0.33, wire brief §1.8/§1.9).

Request side: pydantic models for the fields this engine reads (others are ignored) and
`sampling_spec`, which applies vLLM's ``SamplingParams`` range checks plus the tokens-only
handler checks (no ``stop`` strings) and this engine's limits (``n`` = 1, no logprobs).
Response side: builders for ``GenerateTokensResponse``, stream chunks and the usage chunk,
fields in vLLM's order.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import OpenAIError, bad_request
from .backend import Finish, SamplingSpec


class _Lenient(BaseModel):
    """Unknown fields are ignored; an explicit null means "use the default" (render emits
    nulls for unset sampling fields)."""

    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class SamplingParamsIn(_Lenient):
    """``GenerateRequest.sampling_params`` (vLLM ``SamplingParams`` field names/defaults):
    every `SamplingSpec` field, plus the ones this engine only checks."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int | None = None
    min_tokens: int = 0
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: int | None = None
    prompt_logprobs: int | None = None


class StreamOptions(_Lenient):
    """``stream_options``; vLLM defaults ``include_usage`` to true once the object is sent."""

    include_usage: bool = True
    continuous_usage_stats: bool = False


class GenerateRequestIn(_Lenient):
    """``GenerateRequest`` as far as a tokens-only engine needs it."""

    request_id: str | None = None
    token_ids: list[int] = Field(min_length=1)
    sampling_params: SamplingParamsIn = Field(default_factory=SamplingParamsIn)
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    kv_transfer_params: dict[str, Any] | None = None
    output_mode: str = "tokens"
    return_token_ids: bool = False
    features: Any = None
    content_parts: Any = None


def _check(ok: bool, message: str, field: str) -> None:
    if not ok:
        raise bad_request(message, param=f"sampling_params.{field}")


def sampling_spec(sp: SamplingParamsIn) -> SamplingSpec:
    """Validate and convert. Raises `OpenAIError` 400 naming ``sampling_params.<field>``."""
    _check(sp.n == 1, f"n={sp.n} is not supported: this reference engine returns exactly one choice (n=1)", "n")
    _check(0.0 <= sp.temperature <= 2.0, f"temperature must be in [0, 2], got {sp.temperature}", "temperature")
    _check(0.0 < sp.top_p <= 1.0, f"top_p must be in (0, 1], got {sp.top_p}", "top_p")
    _check(sp.top_k >= -1, f"top_k must be -1 or 0 (disable) or at least 1, got {sp.top_k}", "top_k")
    _check(0.0 <= sp.min_p <= 1.0, f"min_p must be in [0, 1], got {sp.min_p}", "min_p")
    _check(-2.0 <= sp.presence_penalty <= 2.0, "presence_penalty must be in [-2, 2]", "presence_penalty")
    _check(-2.0 <= sp.frequency_penalty <= 2.0, "frequency_penalty must be in [-2, 2]", "frequency_penalty")
    _check(0.0 < sp.repetition_penalty <= 2.0, "repetition_penalty must be in (0, 2]", "repetition_penalty")
    _check(sp.max_tokens is None or sp.max_tokens >= 1, f"max_tokens must be at least 1, got {sp.max_tokens}", "max_tokens")
    _check(sp.min_tokens >= 0, f"min_tokens must be non-negative, got {sp.min_tokens}", "min_tokens")
    _check(
        sp.max_tokens is None or sp.min_tokens <= sp.max_tokens,
        f"min_tokens ({sp.min_tokens}) must be less than or equal to max_tokens ({sp.max_tokens})",
        "min_tokens",
    )
    _check(not sp.stop, "stop strings are not supported on a tokens-only server; use stop_token_ids", "stop")
    _check(all(t >= 0 for t in sp.stop_token_ids), "stop_token_ids must be non-negative", "stop_token_ids")
    _check(sp.logprobs is None, "logprobs are not supported by this reference engine", "logprobs")
    _check(sp.prompt_logprobs is None, "prompt_logprobs are not supported by this reference engine", "prompt_logprobs")
    same = {name: getattr(sp, name) for name in SamplingSpec.__dataclass_fields__}
    return SamplingSpec(**{**same, "top_k": max(sp.top_k, 0), "stop_token_ids": tuple(sp.stop_token_ids)})


def check_request(req: GenerateRequestIn) -> None:
    """Request-level checks of the tokens-only handler. Raises `OpenAIError` 400."""
    if any(t < 0 for t in req.token_ids):
        raise bad_request("token_ids must be non-negative", param="token_ids")
    if req.output_mode != "tokens":
        raise bad_request(
            f"output_mode {req.output_mode!r} needs a tokenizer; this tokens-only engine only supports 'tokens'",
            param="output_mode",
        )
    if req.features is not None or req.content_parts is not None:
        raise bad_request("multimodal inputs are not supported by this reference engine", param="features")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """vLLM ``UsageInfo`` with null details."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def choice(token_ids: list[int], finish: Finish | None) -> dict[str, Any]:
    """One ``GenerateTokensChoice`` / stream choice (tokens mode: no logprobs here)."""
    return {
        "index": 0,
        "finish_reason": None if finish is None else finish.finish_reason,
        "stop_reason": None if finish is None else finish.stop_reason,
        "token_ids": token_ids,
        "routed_experts": None,
        "sampling_mask": None,
        "weight_versions": None,
        "logprobs": None,
    }


def generate_response(
    *,
    request_id: str,
    model: str,
    prompt_token_ids: list[int] | None,
    token_ids: list[int],
    finish: Finish,
    num_prompt: int,
    metrics: dict | None,
    kv_transfer_params: dict | None,
) -> dict[str, Any]:
    """Non-streaming ``GenerateTokensResponse`` (§1.8 field order)."""
    return {
        "request_id": request_id,
        "model": model,
        "created": int(time.time()),
        "usage": usage(num_prompt, len(token_ids)),
        "prompt_logprobs": None,
        "prompt_token_id_logprobs": None,
        "prompt_token_ids": prompt_token_ids,
        "mm_placeholders": None,
        "metrics": metrics,
        "kv_transfer_params": kv_transfer_params,
        "ec_transfer_params": None,
        "output_mode": "tokens",
        "choices": [choice(token_ids, finish)],
    }


def stream_chunk(
    request_id: str,
    token_ids: list[int],
    finish: Finish | None,
    *,
    usage_info: dict | None = None,
    prompt_token_ids: list[int] | None = None,
    metrics: dict | None = None,
) -> dict[str, Any]:
    """One SSE token chunk: null ``prompt_token_ids``/``metrics`` are omitted, ``usage`` kept."""
    chunk: dict[str, Any] = {"request_id": request_id}
    if prompt_token_ids is not None:
        chunk["prompt_token_ids"] = prompt_token_ids
    chunk["usage"] = usage_info
    if metrics is not None:
        chunk["metrics"] = metrics
    chunk["output_mode"] = "tokens"
    chunk["choices"] = [choice(token_ids, finish)]
    return chunk


def usage_chunk(request_id: str, usage_info: dict, metrics: dict | None) -> dict[str, Any]:
    """The final ``choices: []`` chunk sent with ``stream_options.include_usage``."""
    chunk: dict[str, Any] = {"request_id": request_id, "usage": usage_info}
    if metrics is not None:
        chunk["metrics"] = metrics
    chunk["output_mode"] = "tokens"
    chunk["choices"] = []
    return chunk

