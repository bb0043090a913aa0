"""Request bodies of the derender endpoints (vLLM 0.33 shapes, wire brief §1.6-§1.7).

Only the fields derender reads are typed; unknown keys are accepted and ignored, as vLLM
does, so a router can forward whole objects. Token ids are checked against the
vocabulary later (`render_service.errors.check_token_ids`), where the tokenizer is known.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from .generate import Count, GenerateResponse, SamplingParams
from .limits import PassThrough, fail_fast_list

_LOOSE = ConfigDict(extra="ignore")


class ParseSource(BaseModel):
    """What the reasoning and tool-call parsers read of a request: the whole ``chat_request``
    and render's slim ``parse_context`` both carry it."""

    model_config = _LOOSE
    tools: fail_fast_list(PassThrough) | None = None
    tool_choice: str | PassThrough | None = None
    parallel_tool_calls: bool | None = True
    include_reasoning: bool = True
    chat_template_kwargs: PassThrough | None = None


class ChatRequestFields(ParseSource):
    """The fields of an OpenAI ``ChatCompletionRequest`` that derender reads (§1.3)."""

    reasoning_effort: str | None = None
    stop: str | fail_fast_list(str) | None = None
    stop_token_ids: fail_fast_list(int) | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    skip_special_tokens: bool | None = None
    logprobs: bool | int | None = None       # bool for chat, int for completions
    top_logprobs: int | None = None
    logprob_token_ids: fail_fast_list(int) | None = None
    return_token_ids: bool | None = None
    stream_options: dict | None = None
    n: Count | None = None                   # choices asked for: an engine choice's index is below it


class ParseContext(ParseSource):
    """The slim parse context render emits in ``GenerateRequest.parse_context`` (§2.5)."""

    history_tool_call_cnt: int | None = None
    # An extension: render's judgement from the prompt text, so derender need not decode
    # prompt ids to find out whether generation starts inside reasoning.
    starts_in_reasoning: bool | None = None


class _DerenderCommon(BaseModel):
    model_config = _LOOSE
    model: str | None = None
    prompt_token_ids: fail_fast_list(int) | None = None
    sampling_params: SamplingParams | None = None


class DerenderChatRequest(_DerenderCommon):
    """``DerenderChatRequest`` (§1.6) plus ``parse_context``/``sampling_params``."""

    stream: Literal[False] = False
    generate_response: GenerateResponse
    prompt_tokens: Count | None = None
    chat_request: ChatRequestFields | None = None
    parse_context: ParseContext | None = None


class _DerenderStreamCommon(_DerenderCommon):
    """What every streaming derender request carries: one generate chunk and the state the
    previous call returned."""

    stream: Literal[True]
    generate_chunk: GenerateResponse
    stream_state: dict | None = None
    prompt_tokens: Count | None = None


class DerenderChatStreamRequest(_DerenderStreamCommon):
    """``DerenderChatStreamRequest`` (§1.6): one generate chunk and the previous state."""

    chat_request: ChatRequestFields | None = None
    parse_context: ParseContext | None = None


class DerenderCompletionRequest(_DerenderCommon):
    """``DerenderCompletionRequest`` (§1.7); ``prompt_token_ids`` is one list per response."""

    stream: Literal[False] = False
    generate_responses: fail_fast_list(GenerateResponse) = Field(min_length=1)
    prompt_tokens: fail_fast_list(Count) | None = None
    prompt_token_ids: fail_fast_list(fail_fast_list(int) | None) | None = None  # type: ignore[assignment]
    completion_request: ChatRequestFields | None = None


class DerenderCompletionStreamRequest(_DerenderStreamCommon):
    """``DerenderCompletionStreamRequest`` (§1.7)."""

    completion_request: ChatRequestFields | None = None


class PipeHeader(_DerenderCommon):
    """First line of a pipe request: everything but the engine stream itself."""

    prompt_tokens: Count | None = None
    chat_request: ChatRequestFields | None = None
    completion_request: ChatRequestFields | None = None
    parse_context: ParseContext | None = None
    stream_options: dict | None = None
