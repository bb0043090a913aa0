"""Message preparation: OpenAI chat messages → the plain data a chat template expects.

Clients speak the OpenAI Chat Completions format; templates were written for Hugging
Face's conversation dicts. The differences that break prompts in the wild, and our rule
for each:

- ``content`` as a list of parts (case 03): text-only templates get the text parts joined
  with ``"\\n"`` (vLLM's ``string`` content format); templates that loop over
  ``message['content']`` get ``[{"type": "text", "text": …}]`` parts. Media parts
  (``image_url``, ``video_url``) reach such templates as ``{"type": "image"}`` /
  ``{"type": "video"}`` in place, as vLLM passes them, when the model takes media
  (`render.media`); otherwise, or for a text-only template, they are refused.
- assistant ``tool_calls[].function.arguments`` arrives as a JSON *string* (OpenAI) or an
  object. Templates with an ``arguments is string`` branch (Qwen3, Hermes) get it as sent,
  so a string is written verbatim — the tokens the model generated, not a re-serialisation
  (issue 15); templates that can only apply ``tojson``/``items`` get a mapping (a string
  would be double-encoded, case 01); templates that concatenate arguments as text
  (DeepSeek-R1) get the JSON string. Malformed JSON strings pass through unchanged.
- ``reasoning_content`` (older clients) is the same as ``reasoning``: the template room
  (`model.templates`) gives a past turn's reasoning under every name templates read.
- ``content: null`` (OpenAI's assistant tool-call turn) stays null for templates that test
  ``content is none`` (DeepSeek-V3/R1 write history tool calls only then) and becomes ``""``
  for the rest, which read content as text (Qwen3's ``'</think>' in content`` fails on null,
  and on the missing key that transformers 5 would leave).
- ``developer`` messages, for a template that never names the role, become ``system`` and
  every system message merges into one leading message (vLLM 0.33's rule, `render.roles`):
  applied here, so chat, Responses and Messages bodies all get it, with the template that
  renders them (a request's own ``chat_template`` included).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import bad_request
from ..model.templates import ChatTemplate
from .roles import developer_as_system

_TEXT_PART_TYPES = ("text", "input_text", "output_text")


def prepare_messages(messages: list[Any], template: ChatTemplate, media: bool | dict[str, str] = False) -> list[dict]:
    """Normalise OpenAI ``messages`` for ``template`` (``media``: the model takes image/video parts;
    a ``{modality: placeholder string}`` when vLLM writes that string into string-format content
    for each item, MiniCPM-V's ``(<image>./</image>)``).

    Returns a new list of plain dicts (the request is not mutated), ``developer`` mapped to
    ``system`` where vLLM maps it (`render.roles.developer_as_system`).

    Raises:
        OpenAIError: 400 for an empty list, a message that is not an object, a missing
        ``role``, or a non-text content part.
    """
    if not isinstance(messages, list) or not messages:
        raise bad_request("`messages` must be a non-empty list.", "messages")
    out = []
    null = None if template.null_content == "none" else ""
    content_format, arguments_form = template.content_format, template.arguments_form
    text_stays = not (media and content_format == "openai")  # string content is kept as it is (`_content`)
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise bad_request(f"messages[{i}] must be an object.", f"messages.{i}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise bad_request(f"messages[{i}].role must be a non-empty string.", f"messages.{i}.role")
        prepared = dict(message)
        content = prepared.get("content")
        if content is None:
            prepared["content"] = null
        elif not (text_stays and content.__class__ is str):
            prepared["content"] = _content(content, content_format, f"messages.{i}.content", media)
        if prepared.get("tool_calls"):
            prepared["tool_calls"] = _tool_calls(prepared["tool_calls"], arguments_form, f"messages.{i}.tool_calls")
        out.append(prepared)
    return developer_as_system(out, template.source)  # every door's conversation meets the template here


def _content(content: Any, content_format: str, param: str, media: bool | dict[str, str] = False) -> Any:
    if isinstance(content, str) and media and content_format == "openai":
        # vLLM hands an openai-format template a list of parts even for string content; a
        # template that only reads parts (LLaVA's selectattr('type', 'equalto', 'text')) drops a bare string
        return [{"type": "text", "text": content}]
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request("content must be a string, a list of content parts, or null.", param)
    parts: list[dict] = []
    placeholders: list[str] = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
            continue
        if not isinstance(part, dict):
            raise bad_request("each content part must be an object.", f"{param}.{j}")
        kind = part.get("type", "text")
        field = "refusal" if kind == "refusal" else "text"
        modality = _media_modality(part)
        if modality is not None and media and content_format == "openai":
            parts.append({"type": modality, **{k: v for k, v in part.items() if k not in _MEDIA_PART_FIELDS}})
        elif modality is not None and isinstance(media, dict) and modality in media:
            placeholders.append(media[modality])
        elif modality is not None:
            why = "this model takes no media" if not media else "its chat template takes text only"
            raise bad_request(f"content part type {kind!r} is not supported: {why}.", f"{param}.{j}.type")
        elif kind in _TEXT_PART_TYPES or kind == "refusal":
            if not isinstance(part.get(field), str):
                raise bad_request(f"a {kind!r} content part needs a string `{field}`.", f"{param}.{j}.{field}")
            parts.append({"type": "text", "text": part[field]})
        else:
            raise bad_request(
                f"content part type {kind!r} is not supported by this render service.", f"{param}.{j}.type"
            )
    if content_format == "openai":
        return parts
    text = "\n".join(p["text"] for p in parts)
    return _with_placeholders(text, placeholders, param) if placeholders else text


def _with_placeholders(text: str, placeholders: list[str], param: str) -> str:
    """vLLM's string-format content with media: each item's placeholder not already typed in the
    text goes in front, ``"\n"``-joined (``get_full_multimodal_text_prompt``, interleave off).

    Raises:
        OpenAIError: 400 when the text holds more of a placeholder than there are items.
    """
    missing: list[str] = []
    for placeholder in dict.fromkeys(placeholders):
        n = placeholders.count(placeholder) - text.count(placeholder)
        if n < 0:
            raise bad_request(f"Found more '{placeholder}' placeholders in input prompt than actual multimodal data items.",
                              "messages")
        missing += [placeholder] * n
    return "\n".join(missing + [text]) if text else "\n".join(missing)


# Media part types and the fields vLLM strips before the template sees ``{"type": modality, ...}``.
_MEDIA_PART_TYPES = {"image_url": "image", "input_image": "image", "video_url": "video"}
_MEDIA_PART_FIELDS = frozenset({"type", "image_url", "video_url", "input_image", "uuid", "detail"})


def _media_modality(part: dict) -> str | None:
    """``"image"`` / ``"video"`` for a media part, else None (vLLM 0.33's part parsing).

    A part is read by its ``type``; one with no ``type``, or with a ``uuid``, by which URL key it has.
    """
    kind, uuid = part.get("type"), part.get("uuid")
    if kind in _MEDIA_PART_TYPES and uuid is None:
        return _MEDIA_PART_TYPES[kind]
    if kind is None or uuid is not None:
        if "image_url" in part:
            return "image"
        if "video_url" in part:
            return "video"
    return None


def _tool_calls(tool_calls: Any, arguments_form: str, param: str) -> list:
    if not isinstance(tool_calls, list):
        raise bad_request("tool_calls must be a list.", param)
    out = []
    for k, call in enumerate(tool_calls):
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            raise bad_request("each tool call needs a `function` object.", f"{param}.{k}")
        function = dict(call["function"])
        function["arguments"] = _arguments(function.get("arguments"), arguments_form)
        # Templates read the function either nested (tool_call.function.name) or flat (tool_call.name).
        out.append({**call, "function": function})
    return out


def _arguments(arguments: Any, form: str) -> Any:
    if form == "verbatim":
        return {} if arguments is None else arguments
    if form == "mapping":
        if isinstance(arguments, str):
            try:
                return json.loads(arguments)
            except ValueError:
                return arguments
        return {} if arguments is None else arguments
    if isinstance(arguments, str):
        return arguments
    return json.dumps({} if arguments is None else arguments, ensure_ascii=False)


def history_tool_call_count(messages: list[Any]) -> int:
    """Number of tool calls in earlier assistant turns (Kimi-style sequential ids, wire brief §2.5)."""
    return sum(
        len(m.get("tool_calls") or []) for m in messages if isinstance(m, dict) and m.get("role") == "assistant"
    )
