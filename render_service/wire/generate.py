"""The tokens-only generate protocol (vLLM 0.33 ``/inference/v1/generate``, wire brief §1.8/§1.9).

One vocabulary for every hop: render emits a `GenerateRequest` (as a dict, every key
present), the engine validates it with `GenerateRequest`, derender reads the engine's
answer with `GenerateResponse`, and `SamplingParams` is vLLM's ``sampling_params`` (field
names and defaults of vLLM ``SamplingParams``) wherever it is read. The response builders
at the end write ``GenerateTokensResponse`` and its stream chunks in vLLM's field order.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, NonNegativeInt, model_validator

from .limits import MAX_COUNT, EngineRequestId, PassThrough, check_nesting, fail_fast_list
from .openai import StreamOptions

ENGINE_ID_PREFIX = "generate-tokens-"   # vLLM's engine-facing request id prefix (§1.8)
OUTPUT_KIND_DELTA = 1                   # vLLM RequestOutputKind.DELTA (streaming)
OUTPUT_KIND_FINAL_ONLY = 2              # vLLM RequestOutputKind.FINAL_ONLY (non-streaming)

_LOOSE = ConfigDict(extra="ignore")

Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Int64 = Annotated[int, Field(ge=-(2**63), lt=2**63)]


Nested = Annotated[Any, AfterValidator(check_nesting)]
"""A pass-through value at most `wire.limits.MAX_NESTING` deep. Declared ``Nested | None``, pydantic's
nullable schema answers null itself: the (Python) check runs only for a value (an engine
chunk's nulls cost six Python calls per chunk when the whole field was checked)."""
NestedDict = Annotated[dict, AfterValidator(check_nesting)]


class _NullIsDefault(BaseModel):
    """Unknown fields are ignored; an explicit null means "use the default" (render emits
    nulls for unset fields)."""

    model_config = _LOOSE

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class SamplingParams(_NullIsDefault):
    """``GenerateRequest.sampling_params``: the vLLM ``SamplingParams`` fields that the
    engine honours or checks and that derender applies (stops, EOS, decoding flags)."""

    n: int = Field(1, ge=1, le=16384)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Int64 | None = None
    max_tokens: Count | None = None
    min_tokens: Count = 0
    stop: str | fail_fast_list(str) | None = None
    stop_token_ids: fail_fast_list(Count) = Field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: Annotated[int, Field(ge=-1, le=MAX_COUNT)] | None = None
    prompt_logprobs: Annotated[int, Field(ge=-1, le=MAX_COUNT)] | None = None


class GenerateRequest(_NullIsDefault):
    """``GenerateRequest`` as far as a tokens-only engine reads it."""

    request_id: EngineRequestId | None = None
    token_ids: fail_fast_list(int) = Field(min_length=1)
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    kv_transfer_params: PassThrough | None = None
    output_mode: str = "tokens"
    return_token_ids: bool = False
    features: Any = None
    content_parts: Any = None


# -- the engine's answer --------------------------------------------------------------------


class GenTopLogprob(BaseModel):
    """One engine candidate: ``{token_id, logprob, rank}``."""

    model_config = _LOOSE
    token_id: int
    logprob: float
    rank: int | None = None


class GenPositionLogprob(GenTopLogprob):
    """The sampled token at one position, with all engine candidates (sampled first)."""

    top_logprobs: fail_fast_list(GenTopLogprob) | None = None


class GenLogprobs(BaseModel):
    """Tokens-mode logprobs of one choice: ``{"content": [...]}``."""

    model_config = _LOOSE
    content: fail_fast_list(GenPositionLogprob) = Field(default_factory=list)


class GenChoice(BaseModel):
    """A choice of ``GenerateTokensResponse`` / ``GenerateTokensStreamResponse``."""

    model_config = _LOOSE
    index: Count = 0
    finish_reason: str | None = None
    stop_reason: Int64 | str | None = None
    token_ids: fail_fast_list(int) | None = None
    logprobs: GenLogprobs | None = None
    routed_experts: Nested | None = None
    weight_versions: Nested | None = None


class Usage(BaseModel):
    model_config = _LOOSE
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    total_tokens: Count = 0
    prompt_tokens_details: dict | None = None  # e.g. {"cached_tokens": N}; derender reports it on request


class GenerateResponse(BaseModel):
    """``GenerateTokensResponse`` (non-streaming) and the stream chunk: the stream chunk
    simply lacks the optional keys."""

    model_config = _LOOSE
    request_id: EngineRequestId = ""
    model: str | None = None
    created: Int64 | None = None
    usage: Usage | None = None
    choices: fail_fast_list(GenChoice) = Field(default_factory=list)
    prompt_logprobs: Nested | None = None
    prompt_token_ids: fail_fast_list(int) | None = None
    kv_transfer_params: NestedDict | None = None
    ec_transfer_params: NestedDict | None = None
    metrics: Nested | None = None
    output_mode: Literal["tokens"] | None = None


# -- builders (the engine's side) -----------------------------------------------------------


class Finished(Protocol):
    """How a choice ended: vLLM ``finish_reason`` (stop|length|abort) and ``stop_reason``."""

    finish_reason: str
    stop_reason: int | None


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """vLLM ``UsageInfo`` with null details."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def choice(token_ids: list[int], finish: Finished | None) -> dict[str, Any]:
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
    finish: Finished,
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
    finish: Finished | None,
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
