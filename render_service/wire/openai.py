"""Client requests render takes: OpenAI Chat Completions / Completions, vLLM extensions.

Field names, types and defaults follow vLLM 0.33's `ChatCompletionRequest` and
`CompletionRequest` (wire brief §1.3, §1.4). Unknown keys are accepted and ignored, as
vLLM does, so routers can send one body to either implementation.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, field_validator, model_validator

from .. import policy
from .limits import MAX_MESSAGES, LogitBias, PassThrough, RequestId, StopStrings, bounded_list, fail_fast_list
from .validate import FieldError, check_types



class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class PreviousTurn(_Lenient):
    """The previous turn of the same conversation, as the engine holds it (extension, README
    "Agent loops"): the prompt it was given and the ids it generated, reasoning included."""

    prompt_token_ids: fail_fast_list(NonNegativeInt) = Field(min_length=1)
    output_token_ids: fail_fast_list(NonNegativeInt) = Field(default_factory=list)


class StreamOptions(_Lenient):
    """``stream_options`` of client requests and of ``GenerateRequest`` (vLLM defaults:
    neither usage nor continuous usage unless asked)."""

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class RepetitionDetection(_Lenient):
    """``repetition_detection``: stop on repeated N-gram patterns (vLLM 0.33)."""

    max_pattern_size: NonNegativeInt = 0
    min_pattern_size: NonNegativeInt = 0
    min_count: NonNegativeInt = 0

    def model_dump(self, **kwargs):  # only the three fields vLLM sends on
        return {"max_pattern_size": self.max_pattern_size, "min_pattern_size": self.min_pattern_size,
                "min_count": self.min_count}


class VllmTypedFields(_Lenient):
    """Fields of every vLLM 0.33 front-door request that render does not act on but vLLM
    type-checks: typed here so a body vLLM refuses is refused here too (a 400, not ignored)."""

    mm_payload: Literal["tensors", "none"] | None = None
    return_mm_kwargs: bool | None = None
    watermarking: bool | None = None


class SamplingFields(VllmTypedFields):
    """Sampling fields shared by chat and completions (wire brief §2.2)."""

    model: str | None = None
    n: int | None = Field(default=1, ge=1, le=16384)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    stop: StopStrings = None
    stop_token_ids: fail_fast_list(NonNegativeInt) | None = None
    ignore_eos: bool = False
    min_tokens: NonNegativeInt = 0
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool = True
    logit_bias: LogitBias = None
    allowed_token_ids: fail_fast_list(NonNegativeInt) | None = None
    bad_words: fail_fast_list(str) | None = None
    # -1 (the context minus one) or a count; 0 would render an empty prompt, which no engine takes
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=2**31 - 1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    request_id: RequestId | None = None
    cache_salt: str | None = None
    priority: int = 0
    kv_transfer_params: PassThrough | None = None
    ec_transfer_params: PassThrough | None = None
    vllm_xargs: PassThrough | None = None
    return_token_ids: bool | None = None
    add_special_tokens: bool = False
    use_beam_search: bool = False
    response_format: PassThrough | None = None
    structured_outputs: PassThrough | None = None
    logprob_token_ids: fail_fast_list(NonNegativeInt) | None = None
    thinking_token_budget: int | None = Field(default=None, ge=-1)
    repetition_detection: RepetitionDetection | None = None
    stream_interval: int | None = Field(default=None, ge=1)
    routed_experts_prompt_start: NonNegativeInt = 0
    truncation_side: Literal["left", "right"] | None = None
    return_token_offsets: bool = False
    # typed as vLLM types them, otherwise unused
    user: str | None = None
    session_id: str | None = None
    length_penalty: float = 1.0
    return_tokens_as_token_ids: bool | None = None
    return_weight_versions: bool = False

    @field_validator("truncate_prompt_tokens")
    @classmethod
    def _truncate_keeps_tokens(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("truncate_prompt_tokens must be -1 or at least 1 (0 would leave an empty prompt)")
        return value

    @model_validator(mode="after")
    def _stop_strings(self) -> "SamplingFields":
        fmt = self.response_format
        if fmt is not None:
            if fmt.get("type") not in ("text", "json_object", "json_schema", "structural_tag"):
                raise ValueError("response_format.type must be text, json_object, json_schema or structural_tag")
            if fmt.get("type") == "json_schema" and not isinstance(fmt.get("json_schema"), dict):
                raise ValueError("response_format json_schema needs a json_schema object")
            if fmt.get("type") == "json_schema":
                check_types(fmt["json_schema"], RESPONSE_FORMAT_SCHEMA_TYPES, "response_format.json_schema")
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        if any(s == "" for s in stops):
            raise ValueError("stop strings must not be empty")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options can only be set when stream is true")
        kinds = [k for k in ("json", "regex", "choice") if (self.structured_outputs or {}).get(k) is not None]
        if len(kinds) > 1:
            raise ValueError("You can only use one kind of constraints for structured outputs ('json', 'regex' or "
                             "'choice').")
        if self.cache_salt is not None and (
            not self.cache_salt or len(self.cache_salt) > 128 or any(c in self.cache_salt for c in "@/\\\0")
        ):
            raise ValueError("cache_salt must be 1-128 characters without @ / \\ or NUL")
        return self


class ChatCompletionRequest(SamplingFields):
    """OpenAI chat request as vLLM's render endpoint takes it."""

    messages: bounded_list(dict[str, Any], MAX_MESSAGES)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    tools: fail_fast_list(PassThrough) | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    include_reasoning: bool = True
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    chat_template: str | None = None
    chat_template_kwargs: PassThrough | None = None
    documents: fail_fast_list(PassThrough) | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    logprobs: bool = False
    top_logprobs: int | None = Field(default=0, ge=-1)
    prompt_logprobs: int | None = Field(default=None, ge=-1)
    echo: bool = False
    # Extensions for agent loops (render.turns): the continuity figure and token-exact history.
    previous_turn: PreviousTurn | None = None
    token_exact_history: bool | None = None
    return_assistant_tokens_mask: bool = False  # vLLM main (GenerateRequest.assistant_tokens_mask)
    return_prompt_text: bool | None = None  # vLLM types it; render does not act on it

    @field_validator("messages")
    @classmethod
    def _message_fields(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, message in enumerate(messages):
            if not _plain_message(message):  # the rare message that needs a closer look (or a 400)
                check_message_fields(message, f"messages.{i}")
        return messages

    @model_validator(mode="after")
    def _consistency(self) -> "ChatCompletionRequest":
        check_tools(self.tools)
        policy.check_tool_choice(self.tool_choice, self.tools)
        if policy.named_tool(self.tool_choice) is not None and any(
                (self.structured_outputs or {}).get(k) is not None for k in ("json", "regex", "choice")):
            raise ValueError("You can only either use constraints for structured outputs or tools, not both.")
        if self.logprob_token_ids is not None and not self.logprobs:
            raise ValueError("when using `logprob_token_ids`, `logprobs` must be set to true.")
        if self.stream and self.prompt_logprobs is not None and (self.prompt_logprobs > 0 or self.prompt_logprobs == -1):
            raise ValueError("`prompt_logprobs` are not available when `stream=True`.")
        if self.continue_final_message and self.add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt cannot both be true")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs: true")
        return self

    @property
    def effective_tool_choice(self) -> str | dict:
        """``tool_choice`` with vLLM's default (`policy.effective_tool_choice`): what render,
        its turn logic and the render route all read, decided in one place."""
        return policy.effective_tool_choice(self.tool_choice, self.tools)


class CompletionRequest(SamplingFields):
    """OpenAI legacy completions request (wire brief §1.4)."""

    prompt: str | fail_fast_list(str) | fail_fast_list(NonNegativeInt) | fail_fast_list(fail_fast_list(NonNegativeInt))
    max_tokens: int | None = Field(default=16, ge=1)
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = Field(default=None, ge=-1)
    prompt_logprobs: int | None = Field(default=None, ge=-1)
    add_special_tokens: bool = True

    @model_validator(mode="after")
    def _prompt_shape(self) -> "CompletionRequest":
        if self.suffix:
            raise ValueError("suffix (fill-in-the-middle) is not supported by this model's renderer")
        p = self.prompt
        if isinstance(p, list) and not p:
            raise ValueError("prompt must not be empty")
        if isinstance(p, list) and any(isinstance(x, list) and not x for x in p):
            raise ValueError("token-id prompts must not be empty")
        return self

    def prompts(self) -> list[str | list[int]]:
        """The prompt(s) as a list: each a string or a list of token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [list(p)]
        return list(p)


def stop_list(stop: str | list[str] | None) -> list[str]:
    """``stop`` as a list (str → [str], null → [])."""
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


# Message fields every vLLM 0.33 message type (ChatCompletion*MessageParam, and the custom-role
# one that takes any role) types; null stays allowed where clients send it for "absent".
# Fields only some types declare (``refusal``) are free in the custom-role one. Arguments
# may also be an object: our documented extension (render.messages).
_MESSAGE_TYPES = {"role": str, "name": str, "tool_call_id": str}
_CALL_TYPES = {"id": str, "type": str}
_FUNCTION_TYPES = {"name": str, "arguments": (str, dict)}
RESPONSE_FORMAT_SCHEMA_TYPES = {"name": str, "description": str, "strict": bool}


def check_message_fields(message: Any, where: str) -> None:
    """Raise ValueError unless ``message``'s typed fields have vLLM's types: ``role``,
    ``name``, ``tool_call_id`` strings; ``tool_calls`` a list of calls whose
    ``id`` (required, as vLLM), ``type`` and ``function.name`` are strings and ``function.arguments`` a JSON
    string (or an object: our documented extension, `render.messages`)."""
    _check_object(message, _MESSAGE_TYPES, where)
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        raise ValueError(f"{where}.tool_calls must be a list")
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls.{j}"
        _check_object(call, _CALL_TYPES, at)
        if call.get("id") is None:  # vLLM 0.33 refuses a call without id (tool results name it)
            raise ValueError(f"{at}.id is required")
        if call.get("function") is not None:
            _check_object(call["function"], _FUNCTION_TYPES, f"{at}.function")


def _exact(types: dict[str, Any]) -> tuple[tuple[str, frozenset[type]], ...]:
    """``types`` as the exact types `_plain_message` accepts (null included): JSON gives no subclasses."""
    return tuple((key, frozenset((*(kind if isinstance(kind, tuple) else (kind,)), type(None))))
                 for key, kind in types.items())


_EXACT_MESSAGE, _EXACT_CALL, _EXACT_FUNCTION = _exact(_MESSAGE_TYPES), _exact(_CALL_TYPES), _exact(_FUNCTION_TYPES)


def _plain_message(message: Any) -> bool:
    """True when `check_message_fields` would pass ``message`` for certain: every typed field
    null or of exactly its type, every tool call with its ``id``. A fast path (an agent's
    82-message history was a third of a late turn's validation, mostly building the
    ``where`` strings); False sends the message through `check_message_fields`."""
    if type(message) is not dict:
        return False
    get = message.get
    for key, kinds in _EXACT_MESSAGE:
        if type(get(key)) not in kinds:
            return False
    calls = get("tool_calls")
    if calls is None:
        return True
    if type(calls) is not list:
        return False
    for call in calls:
        if type(call) is not dict or call.get("id") is None:
            return False
        for key, kinds in _EXACT_CALL:
            if type(call.get(key)) not in kinds:
                return False
        function = call.get("function")
        if function is not None:
            if type(function) is not dict:
                return False
            for key, kinds in _EXACT_FUNCTION:
                if type(function.get(key)) not in kinds:
                    return False
    return True


def _check_object(value: Any, types: dict[str, Any], where: str) -> None:
    """Raise ValueError unless ``value`` is an object whose fields have ``types`` (`check_types`)."""
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    check_types(value, types, where)


# vLLM 0.33's types for a chat tool's optional fields (ChatCompletionToolsParam, FunctionDefinition).
_TOOL_TYPES = {"defer_loading": bool}
_TOOL_FUNCTION_TYPES = {"description": str, "strict": bool}


def check_tools(tools: list | None) -> None:
    """``tools``: null, or a non-empty list of ``{"type": "function", "function": {name, parameters}}``.

    Raises:
        ValueError: naming the first bad entry.
    """
    if tools is not None and not tools:
        raise FieldError("tools must not be an empty list; omit it instead", "tools")
    for i, tool in enumerate(tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type", "function") != "function":
            raise FieldError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}", f"tools[{i}]")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise FieldError(f"tools[{i}].function.name must be a non-empty string", f"tools[{i}].function.name")
        if function.get("parameters") is not None and not isinstance(function["parameters"], dict):
            raise FieldError(f"tools[{i}].function.parameters must be a JSON Schema object",
                             f"tools[{i}].function.parameters")
        check_types(tool, _TOOL_TYPES, f"tools[{i}]")
        check_types(function, _TOOL_FUNCTION_TYPES, f"tools[{i}].function")
