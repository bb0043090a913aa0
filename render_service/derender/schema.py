"""Request bodies of the derender endpoints (vLLM 0.33 shapes, wire brief §1.6-§1.8).

Only the fields derender reads are typed; unknown keys are accepted and ignored, as vLLM
does, so a router can forward whole objects. Token ids are checked against the
vocabulary later (`render_service.errors.check_token_ids`), where the tokenizer is known.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

_LOOSE = ConfigDict(extra="ignore")


class GenTopLogprob(BaseModel):
    """One engine candidate: ``{token_id, logprob, rank}``."""

    model_config = _LOOSE
    token_id: int
    logprob: float
    rank: int | None = None


class GenPositionLogprob(GenTopLogprob):
    """The sampled token at one position, with all engine candidates (sampled first)."""

    top_logprobs: list[GenTopLogprob] | None = None


class GenLogprobs(BaseModel):
    """Tokens-mode logprobs of one choice: ``{"content": [...]}``."""

    model_config = _LOOSE
    content: list[GenPositionLogprob] = Field(default_factory=list)


class GenChoice(BaseModel):
    """A choice of ``GenerateTokensResponse`` / ``GenerateTokensStreamResponse``."""

    model_config = _LOOSE
    index: int = Field(0, ge=0)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    logprobs: GenLogprobs | None = None
    routed_experts: Any = None
    weight_versions: Any = None


class Usage(BaseModel):
    model_config = _LOOSE
    prompt_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    total_tokens: NonNegativeInt = 0


class GenerateResponse(BaseModel):
    """``GenerateTokensResponse`` (non-streaming) and the stream chunk: the stream chunk
    simply lacks the optional keys."""

    model_config = _LOOSE
    request_id: str = ""
    model: str | None = None
    created: int | None = None
    usage: Usage | None = None
    choices: list[GenChoice] = Field(default_factory=list)
    prompt_logprobs: Any = None
    prompt_token_ids: list[int] | None = None
    kv_transfer_params: dict | None = None
    ec_transfer_params: dict | None = None
    metrics: Any = None
    output_mode: Literal["tokens"] | None = None


class ChatRequestFields(BaseModel):
    """The fields of an OpenAI ``ChatCompletionRequest`` that derender reads (§1.3)."""

    model_config = _LOOSE
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = True
    include_reasoning: bool = True
    chat_template_kwargs: dict | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    skip_special_tokens: bool | None = None
    logprobs: bool | int | None = None       # bool for chat, int for completions
    top_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    return_token_ids: bool | None = None
    stream_options: dict | None = None


class ParseContext(BaseModel):
    """The slim parse context render emits in ``GenerateRequest.parse_context`` (§2.5)."""

    model_config = _LOOSE
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = True
    include_reasoning: bool = True
    chat_template_kwargs: dict | None = None
    history_tool_call_cnt: int | None = None


class SamplingFields(BaseModel):
    """The fields of vLLM ``sampling_params`` that derender applies (an extension: with
    ``parse_context`` a router can send these instead of the whole chat request)."""

    model_config = _LOOSE
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    skip_special_tokens: bool | None = None
    logprobs: int | None = None


class _DerenderCommon(BaseModel):
    model_config = _LOOSE
    model: str | None = None
    prompt_token_ids: list[int] | None = None
    sampling_params: SamplingFields | None = None


class DerenderChatRequest(_DerenderCommon):
    """``DerenderChatRequest`` (§1.6) plus ``parse_context``/``sampling_params``."""

    stream: Literal[False] = False
    generate_response: GenerateResponse
    prompt_tokens: int | None = Field(None, ge=0)
    chat_request: ChatRequestFields | None = None
    parse_context: ParseContext | None = None


class DerenderChatStreamRequest(_DerenderCommon):
    """``DerenderChatStreamRequest`` (§1.6): one generate chunk and the previous state."""

    stream: Literal[True]
    generate_chunk: GenerateResponse
    stream_state: dict | None = None
    prompt_tokens: int | None = Field(None, ge=0)
    chat_request: ChatRequestFields | None = None
    parse_context: ParseContext | None = None


class DerenderCompletionRequest(_DerenderCommon):
    """``DerenderCompletionRequest`` (§1.7); ``prompt_token_ids`` is one list per response."""

    stream: Literal[False] = False
    generate_responses: list[GenerateResponse] = Field(min_length=1)
    prompt_tokens: list[NonNegativeInt] | None = None
    prompt_token_ids: list[list[int] | None] | None = None  # type: ignore[assignment]
    completion_request: ChatRequestFields | None = None


class DerenderCompletionStreamRequest(_DerenderCommon):
    """``DerenderCompletionStreamRequest`` (§1.7)."""

    stream: Literal[True]
    generate_chunk: GenerateResponse
    stream_state: dict | None = None
    prompt_tokens: int | None = Field(None, ge=0)
    completion_request: ChatRequestFields | None = None


class PipeHeader(_DerenderCommon):
    """First line of a pipe request: everything but the engine stream itself."""

    prompt_tokens: int | None = Field(None, ge=0)
    chat_request: ChatRequestFields | None = None
    completion_request: ChatRequestFields | None = None
    parse_context: ParseContext | None = None
    stream_options: dict | None = None
