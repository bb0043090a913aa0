"""OpenAI Responses request → the one internal conversation (an OpenAI chat request body).

Everything Responses-specific about *render* lives here; the chat front door does the rest
(template, tokens, sampling), so a Responses prompt is token-identical to the chat prompt
vLLM 0.33 builds for it. Rules, as vLLM 0.33 applies them
(``entrypoints/openai/responses/utils.py::construct_input_messages``,
``ResponsesRequest.build_chat_params`` / ``to_sampling_params``):

- ``instructions`` → a leading ``system`` message; a string ``input`` → one ``user`` message.
- Items in order: ``function_call`` joins the preceding assistant message as a tool call
  (else starts one); ``reasoning`` (``content[0]``, else ``summary[0]``) and an assistant
  ``message`` (``content[0].text``) fill the preceding assistant message when it has no
  reasoning / content yet; ``function_call_output`` → a ``tool`` message; anything else
  (user / system / developer messages, ``input_text`` parts) passes through, with
  ``input_image`` parts as chat ``image_url`` parts.
- A last assistant ``message`` / ``reasoning`` item with status ``in_progress`` or
  ``incomplete`` is continued (``continue_final_message``) instead of answered.
- ``tool_choice`` ``{"type": "function", "name"}`` → chat's named form; ``text.format``
  → ``response_format``; ``reasoning.effort`` → ``reasoning_effort``; ``max_output_tokens``
  → ``max_completion_tokens``; ``truncation: "auto"`` → ``truncate_prompt_tokens: -1``;
  output logprobs only when ``include`` lists ``message.output_text.logprobs``.
- ``previous_response_id`` is refused: this tier keeps no responses (vLLM's render does too).
"""

from __future__ import annotations

from typing import Any

from ...errors import OpenAIError, bad_request
from ...wire.validate import validate
from ...model import ModelBundle
from ...config.serve import ServeConfig
from .wire import ResponsesRequest
from ...wire.openai import ChatCompletionRequest
from ...render.chat import render_chat
from ...render.media import MediaInput
from ...render.turns import carry_agent_loop_fields
from ...render.request import TRUNCATE_HINT, new_request_id

# Responses fields that mean the same in a chat request.
_SAME_FIELDS = ("model", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                "frequency_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "include_stop_str_in_output",
                "skip_special_tokens", "spaces_between_special_tokens", "logit_bias", "parallel_tool_calls",
                "include_reasoning", "chat_template_kwargs", "stream", "cache_salt", "priority",
                "kv_transfer_params", "ec_transfer_params", "vllm_xargs", "structured_outputs")
OUTPUT_LOGPROBS = "message.output_text.logprobs"


def responses_render_body(bundle: ModelBundle, config: ServeConfig, req: Any) -> dict[str, Any]:
    """The chat body `render_responses` renders for ``req``: `responses_to_chat` with the
    agent-loop fields."""
    return carry_agent_loop_fields(req, responses_to_chat(req))


def render_responses(bundle: ModelBundle, config: ServeConfig, req: ResponsesRequest,
                     media: MediaInput | None = None, body: dict | None = None) -> dict[str, Any]:
    """A Responses request → the `GenerateRequest` vLLM 0.33 returns for it: the chat render
    of the converted conversation in Responses' own envelope — ``request_id`` is the body's
    (default ``resp_<16 hex>``; vLLM ignores ``X-Request-Id`` here), no ``parse_context`` or
    ``reasoning_ended``, and ``sampling_params.extra_args`` always present (vLLM passes a dict).
    ``media``: the request's loaded ``input_image`` parts (`render.media.load_media_input`
    over the converted messages), as for chat.

    ``body``: `responses_render_body` of ``req`` when the caller made it already (for the media).

    Raises:
        OpenAIError: 400 as `responses_to_chat` and the chat door raise.
    """
    if body is None:
        body = responses_render_body(bundle, config, req)
    try:
        chat = validate(ChatCompletionRequest, body)
        gen = render_chat(bundle, config, chat, "", media)
    except OpenAIError as err:
        raise in_input_terms(err, req) from None
    gen["request_id"] = req.request_id or f"resp_{new_request_id()}"
    gen["parse_context"] = None
    gen["reasoning_ended"] = None
    # vLLM's field order: extra_args comes just before bad_words.
    params = [(k, v) for k, v in gen["sampling_params"].items() if k != "extra_args"]
    at = next((i for i, (k, _) in enumerate(params) if k == "bad_words"), len(params))
    params.insert(at, ("extra_args", dict(req.vllm_xargs or {})))
    gen["sampling_params"] = dict(params)
    return gen


def responses_to_chat(req: Any) -> dict[str, Any]:
    """A validated `ResponsesRequest` → an OpenAI chat request body (plain dict).

    Raises:
        OpenAIError: 400 ``invalid_request_error`` for ``previous_response_id``; 400 for
        encrypted reasoning and tool choices this tier cannot express.
    """
    if req.previous_response_id is not None:
        raise OpenAIError(400, "previous_response_id is not supported by the stateless render endpoint.",
                          param="previous_response_id", type="invalid_request_error")
    body: dict[str, Any] = {k: getattr(req, k) for k in _SAME_FIELDS if getattr(req, k) is not None}
    body["messages"] = input_messages(req.instructions, req.input)
    tools = function_tools(req.tools)
    if tools:
        body["tools"] = tools
        body["tool_choice"] = chat_tool_choice(req.tool_choice)
    if req.max_output_tokens is not None:
        body["max_completion_tokens"] = req.max_output_tokens
    fmt = (req.text or {}).get("format") if isinstance(req.text, dict) else None
    if fmt and fmt.get("type") in ("json_object", "json_schema"):
        if req.structured_outputs is not None:
            raise bad_request("Cannot specify both structured_outputs and text.format", "structured_outputs")
        body["response_format"] = _response_format(fmt)
    effort = (req.reasoning or {}).get("effort") if isinstance(req.reasoning, dict) else None
    if effort is not None:
        body["reasoning_effort"] = effort
    if continues_final_message(req.input):
        body["add_generation_prompt"], body["continue_final_message"] = False, True
    if req.truncation not in (None, "disabled"):
        body["truncate_prompt_tokens"] = -1
    if req.include and OUTPUT_LOGPROBS in req.include:
        body["logprobs"], body["top_logprobs"] = True, req.top_logprobs or 0
    return body


def input_messages(instructions: str | None, items: str | list[dict]) -> list[dict]:
    """``instructions`` + ``input`` → chat messages (vLLM's ``construct_input_messages``).

    Raises:
        OpenAIError: 400 (param ``input``) when there is no message at all.
    """
    return _messages_and_origins(instructions, items)[0]


def _messages_and_origins(instructions: str | None, items: str | list[dict]) -> tuple[list[dict], list[str]]:
    """The chat messages and, for each, the Responses field it came from (``instructions``,
    ``input``, ``input.3``)."""
    messages: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
    origins = ["instructions"] * len(messages)
    if isinstance(items, str):
        return messages + [{"role": "user", "content": items}], origins + ["input"]
    for i, item in enumerate(items):
        message = _item_message(item, messages[-1] if messages else None, f"input.{i}")
        if message is not None:
            messages.append(message)
            origins.append(f"input.{i}")
    if not messages:
        raise bad_request("`input` must be a non-empty string or list of items.", "input")
    return messages, origins


def in_input_terms(err: OpenAIError, req: Any) -> OpenAIError:
    """``err`` from the chat render of ``req``'s converted conversation with its ``param``
    (``messages.N...``) renamed to the Responses field message N came from (``input.I...``;
    content parts keep their index, `_part` converts them one for one)."""
    err.message = err.message.replace(TRUNCATE_HINT, 'Shorten the input or set truncation to "auto".')
    param = err.param or ""
    head, _, rest = param.partition(".")
    if head != "messages":
        return err
    origins = _messages_and_origins(req.instructions, req.input)[1]
    index, _, tail = rest.partition(".")
    if not index.isdigit() or int(index) >= len(origins):
        err.param = "input"
        return err
    origin = origins[int(index)]
    err.param = f"{origin}.{tail}" if tail and origin.startswith("input.") else origin
    return err


def _item_message(item: dict, prev: dict | None, param: str) -> dict | None:
    """The chat message for one input item, or None when it was merged into ``prev``."""
    assistant = prev if prev is not None and prev.get("role") == "assistant" else None
    kind = item.get("type")
    if kind == "function_call":
        call = {"id": item["call_id"], "type": "function",
                "function": {"name": _call_name(item), "arguments": item["arguments"]}}
        if assistant is not None:
            assistant.setdefault("tool_calls", []).append(call)
            return None
        return {"role": "assistant", "tool_calls": [call]}
    if kind == "reasoning":
        if item.get("encrypted_content"):
            raise bad_request("Encrypted content is not supported.", f"{param}.encrypted_content")
        parts = item.get("content") or item.get("summary") or []
        text = parts[0].get("text", "") if parts else ""
        if assistant is not None and assistant.get("reasoning") is None:
            assistant["reasoning"] = text
            return None
        return {"role": "assistant", "reasoning": text}
    if kind == "function_call_output":
        return {"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")}
    if item.get("role") == "assistant":
        content = item.get("content")
        if isinstance(content, str):
            text = content
        else:
            first = content[0] if content else ""
            text = first.get("text", "") if isinstance(first, dict) else first
        if assistant is not None and assistant.get("content") is None:
            assistant["content"] = text
            return None
        return {"role": "assistant", "content": text}
    message = dict(item)
    if isinstance(message.get("content"), list):
        message["content"] = [_part(p, f"{param}.content.{j}") for j, p in enumerate(message["content"])]
    return message


def _part(part: Any, param: str) -> Any:
    """``input_image`` (``image_url`` a URL string) → chat's ``image_url`` part, which the
    chat path's media loading reads; other parts pass through.

    Raises:
        OpenAIError: 400 for an ``input_image`` without an ``image_url`` (``file_id`` needs
        the Files API, which a stateless render tier has not).
    """
    if isinstance(part, dict) and part.get("type") == "input_image":
        if not part.get("image_url"):
            raise bad_request("An input_image part needs `image_url` (a URL or a data URL); `file_id` is not "
                              "supported here.", f"{param}.image_url")
        return {"type": "image_url", "image_url": {"url": part.get("image_url")}}
    return part


def _call_name(item: dict) -> str:
    namespace = item.get("namespace")
    return f"{namespace}.{item['name']}" if namespace else item["name"]


def continues_final_message(items: str | list[dict]) -> bool:
    """A last assistant message / reasoning item still ``in_progress`` or ``incomplete``
    is continued rather than answered (vLLM's ``should_continue_final_message``)."""
    if isinstance(items, str) or not items:
        return False
    last = items[-1]
    if last.get("type", "message") not in ("message", "reasoning"):
        return False
    if last.get("type") != "reasoning" and last.get("role") != "assistant":
        return False
    return last.get("status") in ("in_progress", "incomplete")


def function_tools(tools: list[dict] | None) -> list[dict] | None:
    """Responses' flat function tools → chat tools (``{"type": "function", "function": {…}}``),
    keys as vLLM dumps them (``strict`` only when set). Other tool types are not rendered."""
    out = []
    for tool in tools or []:
        if tool.get("type") != "function":
            continue
        fn = {"name": tool["name"], "description": tool.get("description"), "parameters": tool.get("parameters")}
        if tool.get("strict") is not None:
            fn["strict"] = tool["strict"]
        out.append({"type": "function", "function": fn})
    return out or None


def chat_tool_choice(choice: Any) -> Any:
    """Responses ``tool_choice`` → chat's.

    Raises:
        OpenAIError: 400 for forms other than ``none`` / ``auto`` / ``required`` / a function.
    """
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad_request(f"tool_choice {choice!r} is not supported: use none, auto, required or a function.",
                      "tool_choice")


def _response_format(fmt: dict) -> dict:
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt.get("schema"),
                                                  "description": fmt.get("description"), "strict": fmt.get("strict")}}
