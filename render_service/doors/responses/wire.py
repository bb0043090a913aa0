"""Client requests of the OpenAI Responses door.

Field names, types and defaults follow vLLM 0.33's ``ResponsesRequest``
(``entrypoints/openai/responses/protocol.py``; JSON Schema in
``../shared/design/vllm-0.33-schemas/``). Unknown keys are accepted and ignored; items stay
plain dicts after their shape is checked, since the converter reads them as data.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...wire.limits import (MAX_MESSAGES, LogitBias, PassThrough, RequestId, StopStrings, bounded_list,
                            fail_fast_list)
from ...wire.openai import VllmTypedFields
from ...wire.validate import FieldError, check_types
from ..wire import derender_bodies


_MESSAGE_ROLES = ("user", "assistant", "system", "developer")
_ITEM_REQUIRED = {"function_call": ("call_id", "name", "arguments"), "function_call_output": ("call_id", "output"),
                  "reasoning": ("summary",)}
# vLLM 0.33's types of the item fields render does not read (ResponsesRequest.json).
_STATUS = frozenset({"in_progress", "completed", "incomplete"})
_ITEM_TYPES = {
    "function_call": {"call_id": str, "name": str, "arguments": str, "id": str, "namespace": str, "async": bool,
                      "status": _STATUS},
    "function_call_output": {"call_id": str, "id": str, "name": str, "namespace": str, "status": _STATUS},
    "message": {"phase": frozenset({"commentary", "final_answer"})},
}
# Tool types a Responses request may carry (render reads the function ones).
_TOOL_KINDS = frozenset({
    "function", "file_search", "computer", "computer_use_preview", "web_search", "web_search_2025_08_26", "mcp",
    "code_interpreter", "programmatic_tool_calling", "image_generation", "local_shell", "shell", "custom",
    "namespace", "tool_search", "web_search_preview", "web_search_preview_2025_03_11", "apply_patch"})
_FUNCTION_TOOL_TYPES = {"name": str, "description": str, "strict": bool, "defer_loading": bool, "async": bool}


def _check_item(i: int, item: Any) -> None:
    if not isinstance(item, dict):
        raise ValueError(f"input[{i}] must be an object")
    kind = item.get("type")
    check_types(item, _ITEM_TYPES.get(kind or "message", {}), f"input[{i}]")
    if kind in _ITEM_REQUIRED:
        missing = [k for k in _ITEM_REQUIRED[kind] if item.get(k) is None]
        if missing:
            raise ValueError(f"input[{i}] ({kind}) needs {', '.join(missing)}")
        if kind == "reasoning":
            for key in ("summary", "content"):
                parts = item.get(key) or []
                if not isinstance(parts, list) or not all(isinstance(p, dict) and isinstance(p.get("text"), str)
                                                          for p in parts):
                    raise ValueError(f"input[{i}].{key} must be a list of {{type, text}} parts")
        return
    if kind not in (None, "message"):
        raise ValueError(f"input[{i}] has unsupported type {kind!r}")
    if item.get("role") not in _MESSAGE_ROLES:
        raise ValueError(f"input[{i}].role must be one of {', '.join(_MESSAGE_ROLES)}")
    content = item.get("content")
    if not isinstance(content, (str, list)):
        raise ValueError(f"input[{i}].content must be a string or a list of content parts")
    for j, part in enumerate(content if isinstance(content, list) else []):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise ValueError(f"input[{i}].content[{j}] must be an object with a type")


# vLLM 0.33's ``include`` values (ResponsesRequest.json).
RESPONSES_INCLUDABLE = Literal["code_interpreter_call.outputs", "computer_call_output.output.image_url",
                               "file_search_call.results", "message.input_image.image_url",
                               "message.output_text.logprobs", "reasoning.encrypted_content"]


class ResponsesRequest(VllmTypedFields):
    """``POST /v1/responses`` (and ``…/render``) body, as vLLM 0.33 accepts it."""

    input: str | bounded_list(Any, MAX_MESSAGES)
    model: str | None = None
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    previous_response_id: str | None = None
    prompt: Any = None
    tools: fail_fast_list(PassThrough) = Field(default_factory=list)
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] = "auto"
    parallel_tool_calls: bool | None = True
    text: PassThrough | None = None
    reasoning: PassThrough | None = None
    include: fail_fast_list(RESPONSES_INCLUDABLE) | None = None
    include_reasoning: bool = True
    top_logprobs: int | None = Field(default=0, ge=0, le=20)
    truncation: Literal["auto", "disabled"] | None = "disabled"
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    stop: StopStrings = None
    stop_token_ids: fail_fast_list(int) | None = None
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool = True
    logit_bias: LogitBias = None
    structured_outputs: PassThrough | None = None
    chat_template_kwargs: PassThrough | None = None
    stream: bool | None = False
    store: bool | None = True
    background: bool | None = False
    metadata: dict[str, str] | None = None
    user: str | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] = "auto"
    max_tool_calls: int | None = None
    request_id: RequestId | None = None
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    priority: int = 0
    kv_transfer_params: PassThrough | None = None
    ec_transfer_params: PassThrough | None = None
    vllm_xargs: PassThrough | None = None
    # typed as vLLM types them, otherwise unused
    session_id: str | None = None
    enable_response_messages: bool = False
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = None

    @field_validator("input")
    @classmethod
    def _items(cls, v: Any) -> Any:
        if isinstance(v, list):
            for i, item in enumerate(v):
                _check_item(i, item)
        return v

    @field_validator("tools")
    @classmethod
    def _tools(cls, v: list[dict]) -> list[dict]:
        for i, tool in enumerate(v):
            if tool.get("type") not in _TOOL_KINDS:
                raise ValueError(f"tools[{i}].type must be one of {', '.join(sorted(_TOOL_KINDS))}")
            if tool["type"] == "function":
                if not isinstance(tool.get("name"), str) or not tool["name"]:
                    raise FieldError(f"tools[{i}].name must be a non-empty string", f"tools[{i}].name")
                check_types(tool, _FUNCTION_TOOL_TYPES, f"tools[{i}]")
                if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
                    raise ValueError(f"tools[{i}].parameters must be a JSON Schema object")
        return v

    @model_validator(mode="after")
    def _consistency(self) -> "ResponsesRequest":
        if self.prompt is not None:
            raise ValueError("prompt template is not supported")
        if self.background and self.store is False:
            raise ValueError("background can only be used when `store` is true")
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        fmt = (self.text or {}).get("format")
        if fmt is not None:
            kind = fmt.get("type") if isinstance(fmt, dict) else None
            if kind not in ("text", "json_object", "json_schema"):
                raise ValueError("text.format.type must be text, json_object or json_schema")
            if kind == "json_schema" and (not isinstance(fmt.get("name"), str) or not isinstance(fmt.get("schema"), dict)):
                raise ValueError("text.format json_schema needs a name and a schema object")
        if isinstance(self.tool_choice, dict) and self.tool_choice.get("type") == "function":
            names = {t.get("name") for t in self.tools if t.get("type") == "function"}
            if self.tool_choice.get("name") not in names:
                raise ValueError("Tool choice 'function' not found in 'tools' parameter.")
        return self


# the derender bodies (``POST /v1/responses/derender``, ``…/pipe``'s header line)
DerenderResponsesRequest, DerenderResponsesStreamRequest, PipeHeader = derender_bodies("Responses", "responses_request", ResponsesRequest)
