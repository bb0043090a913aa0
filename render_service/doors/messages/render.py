"""Anthropic Messages request → the one internal conversation (an OpenAI chat request body).

Everything Messages-specific about *render* lives here; the chat front door does the rest,
so a Messages prompt is token-identical to the one vLLM 0.33 builds: its render converts
with the same function its ``/v1/messages`` uses
(``entrypoints/anthropic/serving.py::AnthropicServingMessages.to_chat_completion_request``).
The rules:

- ``system`` (a string, or its text blocks joined with no separator) → one leading
  ``system`` message; a ``system``-role message inside ``messages`` stays where it is,
  unless the chat template refuses a system message after the first turn (vLLM's probe,
  `merges_inline_system`): then its text joins the leading one.
  Blocks starting ``x-anthropic-billing-header`` (Claude Code's per-request hash) are dropped.
- Content blocks: ``text`` → text parts (a lone text part becomes plain string content);
  ``thinking`` → the message's ``reasoning`` (joined); ``redacted_thinking`` is dropped;
  ``tool_use`` → a tool call whose arguments are ``json.dumps(input)``; a user's
  ``tool_result`` → a ``tool`` message *before* the user's remaining text (its text blocks
  joined with ``"\\n"``); an assistant's ``tool_result`` → a text part ``"Tool result: …"``.
  A user message left with no content is dropped.
- ``max_tokens`` → ``max_completion_tokens``; ``stop_sequences`` → ``stop``;
  ``tool_choice`` ``auto``/``any``/``tool``/``none`` → ``auto``/``required``/named/``none``,
  ``disable_parallel_tool_use`` → ``parallel_tool_calls: false``; ``tools[].input_schema``
  → ``parameters``; ``thinking.enabled.budget_tokens`` → ``thinking_token_budget``;
  ``thinking.disabled`` → ``reasoning_effort: "none"``; ``output_config.effort`` →
  ``reasoning_effort``, ``output_config.format`` → a ``json_schema`` response format;
  ``stream`` → ``stream_options`` with usage (every Anthropic stream reports it).
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox

from ...config.serve import ServeConfig
from ...errors import OpenAIError
from ...wire.validate import validate
from ...model import ModelBundle
from .wire import AnthropicMessagesRequest
from ...wire.openai import ChatCompletionRequest
from ...multimodal import anthropic_image_url
from ...render.chat import render_chat
from ...render.turns import carry_agent_loop_fields
from ...render.media import MediaInput
from ...render.request import TRUNCATE_HINT

BILLING_HEADER = "x-anthropic-billing-header"
_PASS_FIELDS = ("model", "temperature", "top_p", "top_k", "cache_salt", "kv_transfer_params", "ec_transfer_params",
                "vllm_xargs", "chat_template_kwargs")
# Block types that carry images, in a request or inside a tool_result.
IMAGE_BLOCK = "image"


def messages_render_body(bundle: ModelBundle, config: ServeConfig, req: Any) -> dict[str, Any]:
    """The chat body `render_messages` renders for ``req`` (a Messages or count_tokens request):
    `messages_to_chat` under this server's template and flags, with the agent-loop fields."""
    source = bundle.chat_template.source if bundle.chat_template is not None else None
    effort = disabled_thinking_effort(bundle, config) if req.thinking is not None and req.thinking.type == "disabled" else "none"
    return carry_agent_loop_fields(req, messages_to_chat(req, effort, merges_inline_system(source)))


def render_messages(bundle: ModelBundle, config: ServeConfig, req: AnthropicMessagesRequest,
                    request_id: str, media: MediaInput | None = None, body: dict | None = None) -> dict[str, Any]:
    """An Anthropic Messages request → the `GenerateRequest` (``chatcmpl-<request_id>``, as
    vLLM's messages render names it). ``thinking.budget_tokens`` becomes
    ``sampling_params.thinking_token_budget`` (vLLM's place for it). ``media``: the loaded
    ``image`` blocks (`render.media.load_media_input` over the converted messages).

    ``body``: `messages_render_body` of ``req`` when the caller made it already (for the media).

    Raises:
        OpenAIError: 400 as the chat door raises.
    """
    source = bundle.chat_template.source if bundle.chat_template is not None else None
    body = dict(body if body is not None else messages_render_body(bundle, config, req))
    budget = body.pop("thinking_token_budget", None)
    try:
        gen = render_chat(bundle, config, validate(ChatCompletionRequest, body), request_id, media)
    except OpenAIError as err:
        raise in_messages_terms(err, req, merges_inline_system(source)) from None
    if budget is not None:
        gen["sampling_params"]["thinking_token_budget"] = budget
    if req.tools is None and req.tool_choice is None and gen.get("parse_context") is not None:
        # vLLM 0.33 builds the chat request of a Messages body without the OpenAI default
        # (tool_choice "none" when there are no tools): its parse_context says null
        gen["parse_context"]["tool_choice"] = None
    return gen


def count_tokens(bundle: ModelBundle, config: ServeConfig, req: AnthropicMessagesRequest,
                 media: MediaInput | None = None, body: dict | None = None) -> dict[str, int]:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": len(prompt)}`` of the prompt
    `render_messages` would build (images expanded)."""
    return {"input_tokens": len(render_messages(bundle, config, req, "count", media, body)["token_ids"])}


def messages_to_chat(req: Any, disabled_thinking_effort: str = "none", merge_inline_system: bool = False) -> dict[str, Any]:
    """A validated `AnthropicMessagesRequest` → an OpenAI chat request body (plain dict).

    ``disabled_thinking_effort``: the ``reasoning_effort`` that ``thinking.type: disabled``
    maps to (vLLM's ``--anthropic-disabled-thinking-effort``; ``none`` for templates that
    honour it). ``merge_inline_system``: fold ``system``-role messages into the leading one
    (`merges_inline_system` of the server's template).
    """
    messages = _chat_messages(req, merge_inline_system)[0]
    body: dict[str, Any] = {k: getattr(req, k) for k in _PASS_FIELDS if getattr(req, k) is not None}
    body.update(messages=messages, max_tokens=req.max_tokens, max_completion_tokens=req.max_tokens)
    if req.stop_sequences is not None:
        body["stop"] = list(req.stop_sequences)
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    config = req.output_config or {}
    fmt = config.get("format") if isinstance(config, dict) else None
    if isinstance(fmt, dict) and fmt.get("schema") is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": fmt.get("type", "json_schema"), "schema": fmt["schema"]}}
    if isinstance(config, dict) and config.get("effort") is not None:
        body["reasoning_effort"] = config["effort"]
    if req.thinking is not None:
        if req.thinking.type == "disabled":
            body["reasoning_effort"] = disabled_thinking_effort
        elif req.thinking.type == "enabled":
            body["thinking_token_budget"] = req.thinking.budget_tokens
    if req.tool_choice is not None:
        body["parallel_tool_calls"] = not req.tool_choice.disable_parallel_tool_use
        kind = req.tool_choice.type
        body["tool_choice"] = ({"type": "function", "function": {"name": req.tool_choice.name}} if kind == "tool"
                               else {"any": "required"}.get(kind, kind))
    if req.tools is not None:
        body["tools"] = [{"type": "function", "function": _function(t)} for t in req.tools]
    return body


_EFFORTS = ("low", "medium", "high", "xhigh", "max")
_disabled_effort: dict[tuple[str, str], str] = {}


def disabled_thinking_effort(bundle: ModelBundle, config: ServeConfig) -> str:
    """The ``reasoning_effort`` that ``thinking: {"type": "disabled"}`` maps to: ``"none"``
    when the template renders ``none`` differently from every real effort, else ``"low"``
    (the template cannot turn thinking off, or refuses ``none``). vLLM 0.33's
    ``--anthropic-disabled-thinking-effort auto`` probe on ``[{"role": "user", "content": "Hi"}]``;
    decided once per model and config. ``--anthropic-disabled-thinking-effort`` other than
    ``auto`` names the effort outright."""
    if config.anthropic_disabled_thinking_effort != "auto":
        return config.anthropic_disabled_thinking_effort
    key = (bundle.fingerprint, repr(config))
    if key not in _disabled_effort:
        def prompt(effort: str) -> list[int] | None:
            probe = ChatCompletionRequest(messages=[{"role": "user", "content": "Hi"}], reasoning_effort=effort)
            try:
                return render_chat(bundle, config, probe, "probe")["token_ids"]
            except OpenAIError:
                return None
        none = prompt("none")
        _disabled_effort[key] = "low" if none is None or any(prompt(e) == none for e in _EFFORTS) else "none"
    return _disabled_effort[key]


@functools.lru_cache(maxsize=16)
def merges_inline_system(chat_template: str | None) -> bool:
    """True when ``chat_template`` refuses a ``system`` message after the first turn (Qwen's
    ``loop.first`` guard and kin), so inline system messages must be merged into the first.

    vLLM 0.33's probe, reproduced exactly (its Jinja settings, no special tokens, no tools):
    render ``[system, user, system, user]`` and see whether the template raises.
    """
    if not chat_template:
        return True
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    probe = [{"role": role, "content": "t"} for role in ("system", "user", "system", "user")]
    try:
        env.from_string(chat_template).render(messages=probe, add_generation_prompt=False)
    except jinja2.TemplateError:
        return True
    return False


def _function(tool: Any) -> dict:
    fn = {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}
    for key in ("strict", "defer_loading"):
        if getattr(tool, key) is not None:
            fn[key] = getattr(tool, key)
    return fn


def _system_text(system: Any) -> str:
    if not system:
        return ""
    if isinstance(system, str):
        return system
    return "".join(b.text for b in system if b.type == "text" and b.text and not b.text.startswith(BILLING_HEADER))


def _chat_messages(req: Any, merge_inline_system: bool) -> tuple[list[dict], list[tuple[str, list[str]]]]:
    """The chat messages of ``req`` and, for each, its origin: the Anthropic field it came
    from (``system``, ``messages.2``) and the field of each of its content parts."""
    messages: list[dict] = []
    origins: list[tuple[str, list[str]]] = []
    system = _system_text(req.system)
    if merge_inline_system:
        inline = (_system_text(m.content) for m in req.messages if m.role == "system")
        system += "".join(t for t in inline if not t.startswith(BILLING_HEADER))
    if system:
        messages.append({"role": "system", "content": system})
        origins.append(("system", []))
    for i, msg in enumerate(req.messages):
        if not (merge_inline_system and msg.role == "system"):
            _convert_message(msg, messages, f"messages.{i}", origins)
    return messages, origins


def in_messages_terms(err: OpenAIError, req: Any, merge_inline_system: bool) -> OpenAIError:
    """``err`` from the chat render of ``req``'s converted conversation with its ``param``
    (chat's ``messages.N.content.M...``) renamed to the Anthropic block it came from."""
    err.message = err.message.replace(TRUNCATE_HINT, "Shorten the messages (this API has no truncation).")
    parts = (err.param or "").split(".")
    if len(parts) < 2 or parts[0] != "messages" or not parts[1].isdigit():
        return err
    origins = _chat_messages(req, merge_inline_system)[1]
    n = int(parts[1])
    if n >= len(origins):
        return err
    where, part_origins = origins[n]
    if len(parts) >= 4 and parts[2] == "content" and parts[3].isdigit() and int(parts[3]) < len(part_origins):
        err.param = ".".join([part_origins[int(parts[3])], *parts[4:]])
    else:
        err.param = where
    return err


def _convert_message(msg: Any, out: list[dict], param: str, origins: list[tuple[str, list[str]]]) -> None:
    if msg.role == "system":
        text = msg.content if isinstance(msg.content, str) else "".join(
            b.text for b in msg.content if b.type == "text" and b.text and not b.text.startswith(BILLING_HEADER))
        if text and not text.startswith(BILLING_HEADER):
            out.append({"role": "system", "content": text})
            origins.append((param, []))
        return
    converted: dict[str, Any] = {"role": msg.role}
    if isinstance(msg.content, str):
        converted["content"] = msg.content
        out.append(converted)
        origins.append((param, []))
        return
    parts: list[dict] = []
    part_origins: list[str] = []
    calls: list[dict] = []
    reasoning: list[str] = []
    for j, block in enumerate(msg.content):
        where = f"{param}.content.{j}"
        if block.type == "text" and block.text:
            parts.append({"type": "text", "text": block.text})
            part_origins.append(where)
        elif block.type == IMAGE_BLOCK and block.source:
            parts.append({"type": "image_url", "image_url": {"url": anthropic_image_url(block.source, f"{where}.source")}})
            part_origins.append(where)
        elif block.type == "thinking" and block.thinking is not None:
            reasoning.append(block.thinking)
        elif block.type == "tool_use":
            calls.append({"id": block.id or f"call_{int(time.time())}", "type": "function",
                          "function": {"name": block.name or "", "arguments": json.dumps(block.input or {})}})
        elif block.type == "tool_result":
            if msg.role == "user":
                _user_tool_result(block, out, where, origins)
            else:
                parts.append({"type": "text", "text": f"Tool result: {str(block.content) if block.content else ''}"})
                part_origins.append(where)
    if reasoning:
        converted["reasoning"] = "".join(reasoning)
    if calls:
        converted["tool_calls"] = calls
    if parts:
        converted["content"] = parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts
    if not (msg.role == "user" and "content" not in converted):
        out.append(converted)
        origins.append((param, part_origins))


def _user_tool_result(block: Any, out: list[dict], param: str, origins: list[tuple[str, list[str]]]) -> None:
    images: list[str] = []
    image_origins: list[str] = []
    if isinstance(block.content, str):
        text = block.content
    elif isinstance(block.content, list):
        texts = []
        for k, item in enumerate(block.content):
            if not isinstance(item, dict):
                continue
            if item.get("type") == "text":
                texts.append(item.get("text", ""))
            elif item.get("type") == IMAGE_BLOCK:
                images.append(anthropic_image_url(item.get("source"), f"{param}.content.{k}.source"))
                image_origins.append(f"{param}.content.{k}")
        text = "\n".join(texts)
    else:
        text = ""
    out.append({"role": "tool", "tool_call_id": block.tool_use_id or "", "content": text or ""})
    origins.append((param, []))
    if images:
        out.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}} for u in images]})
        origins.append((param, image_origins))
