"""Client requests of the Anthropic Messages door.

Field names, types and defaults follow vLLM 0.33's ``AnthropicMessagesRequest``
(``entrypoints/anthropic/protocol.py``; JSON Schema in ``../shared/design/vllm-0.33-schemas/``).
Unknown keys are accepted and ignored; content blocks stay plain data after their shape is
checked, since the converter reads them as data.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from ...wire.limits import MAX_MESSAGES, PassThrough, bounded_list, check_stops, fail_fast_list
from ...wire.openai import VllmTypedFields
from ..wire import Lenient, derender_bodies


_BLOCK_TYPES = ("text", "image", "tool_use", "tool_result", "tool_reference", "thinking", "redacted_thinking")


class AnthropicBlock(Lenient):
    """A content block: ``text``, ``image``, ``tool_use``, ``tool_result``, ``thinking``,
    ``redacted_thinking`` (``tool_reference`` is accepted and ignored, as in vLLM)."""

    type: Literal["text", "image", "tool_use", "tool_result", "tool_reference", "thinking", "redacted_thinking"]
    text: str | None = None
    source: dict[str, Any] | None = None
    id: str | None = None
    tool_use_id: str | None = None
    name: str | None = None
    input: PassThrough | None = None
    content: str | fail_fast_list(PassThrough) | None = None
    is_error: bool | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    tool_name: str | None = None  # tool_reference blocks (vLLM types it; render ignores the block)


class AnthropicMessage(Lenient):
    role: Literal["user", "assistant", "system"]
    content: str | fail_fast_list(AnthropicBlock)


class AnthropicTool(Lenient):
    name: str
    description: str | None = None
    input_schema: PassThrough
    strict: bool | None = None
    defer_loading: bool | None = None


class AnthropicToolChoice(Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class AnthropicThinking(Lenient):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None
    display: Literal["summarized", "omitted", "updates"] | None = None

    @model_validator(mode="after")
    def _budget(self) -> "AnthropicThinking":
        if self.type == "enabled" and (self.budget_tokens is None or self.budget_tokens < 1024):
            raise ValueError("thinking.budget_tokens must be at least 1024")
        return self


class AnthropicMessagesRequest(VllmTypedFields):
    """``POST /v1/messages`` (and ``…/render``) body, as vLLM 0.33 accepts it."""

    model: str = Field(min_length=1)
    messages: bounded_list(AnthropicMessage, MAX_MESSAGES)
    max_tokens: int = Field(gt=0)
    system: str | fail_fast_list(AnthropicBlock) | None = None
    metadata: PassThrough | None = None
    output_config: PassThrough | None = None
    thinking: AnthropicThinking | None = None
    stop_sequences: Annotated[fail_fast_list(str) | None, Field(max_length=4), AfterValidator(check_stops)] = None
    stream: bool | None = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tool_choice: AnthropicToolChoice | None = None
    tools: fail_fast_list(AnthropicTool) | None = None
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    kv_transfer_params: PassThrough | None = None
    ec_transfer_params: PassThrough | None = None
    vllm_xargs: PassThrough | None = None
    chat_template_kwargs: PassThrough | None = None

    @model_validator(mode="after")
    def _budget(self) -> "AnthropicMessagesRequest":
        remote_prefill = bool((self.kv_transfer_params or {}).get("do_remote_decode"))
        if self.thinking is not None and self.thinking.type == "enabled" and not remote_prefill \
                and self.thinking.budget_tokens >= self.max_tokens:
            raise ValueError("thinking.budget_tokens must be less than max_tokens")
        return self


class AnthropicCountTokensRequest(AnthropicMessagesRequest):
    """``POST /v1/messages/count_tokens``: a Messages body without ``max_tokens``."""

    max_tokens: int = Field(default=1, gt=0)

    @model_validator(mode="after")
    def _budget(self) -> "AnthropicCountTokensRequest":  # nothing is generated: no budget to check
        return self


# the derender bodies (``POST /v1/messages/derender``, ``…/pipe``'s header line)
DerenderMessagesRequest, DerenderMessagesStreamRequest, PipeHeader = derender_bodies("Messages", "messages_request", AnthropicMessagesRequest)
