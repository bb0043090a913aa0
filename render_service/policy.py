"""Rules render and derender share, decided from the request and the server config.

Both hops must agree on them, or derender parses what render did not prepare for: which
``tool_choice`` a request means, whether a parser runs (and so whether special tokens must
survive decoding), and which keyword arguments the chat template saw. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Any

from .config import ServeConfig
from .errors import bad_request

# Keys the template takes as its own arguments; a request cannot set them through kwargs.
_RESERVED_TEMPLATE_KWARGS = ("messages", "tools", "documents", "add_generation_prompt", "continue_final_message")


def tool_parser_active(config: ServeConfig) -> bool:
    """A tool parser runs only with both ``--enable-auto-tool-choice`` and ``--tool-call-parser``."""
    return bool(config.enable_auto_tool_choice and config.tool_call_parser)


def parser_configured(config: ServeConfig) -> bool:
    """True when the server runs a reasoning parser or an auto tool-call parser."""
    return bool(config.reasoning_parser) or tool_parser_active(config)


def effective_tool_choice(tool_choice: str | dict | None, tools: list | None) -> str | dict:
    """``tool_choice`` with vLLM's default: ``auto`` when tools are given, else ``none``."""
    if tool_choice is not None:
        return tool_choice
    return "auto" if tools else "none"


def parser_active(config: ServeConfig, tool_choice: str | dict) -> bool:
    """A parser will read this request's output: a reasoning parser, or a tool parser with
    a ``tool_choice`` other than ``none``."""
    return bool(config.reasoning_parser) or (tool_parser_active(config) and tool_choice != "none")


def skip_special_tokens(requested: bool | None, parser_active: bool, default: bool = True) -> bool:
    """The decoding flag: false whenever a parser runs, since markers such as ``<tool_call>``
    or ``[TOOL_CALLS]`` must survive decoding (wire brief §3.1, shared case 22); else the
    request's value, else ``default`` (the model's generation config, true)."""
    if parser_active:
        return False
    return default if requested is None else requested


def require_tool_parser(config: ServeConfig, tool_choice: str | dict) -> None:
    """Render refuses a ``tool_choice`` other than ``none`` when no tool parser runs.

    Raises:
        OpenAIError: 400 naming ``tool_choice`` (vLLM's message for ``auto``).
    """
    if tool_choice == "none" or tool_parser_active(config):
        return
    if tool_choice == "auto":
        raise bad_request(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set.', "tool_choice"
        )
    raise bad_request(
        f"tool_choice {tool_choice!r} requires a tool parser (--enable-auto-tool-choice --tool-call-parser NAME).",
        "tool_choice",
    )


def template_kwargs(config: ServeConfig, request_kwargs: dict[str, Any], reasoning_effort: str | None) -> dict:
    """The chat template's extra keyword arguments: the server's
    ``--default-chat-template-kwargs``, overridden by the request's (null and ``"auto"``
    values keep the default), plus ``reasoning_effort`` (which also sets ``enable_thinking``
    unless given). The template's own argument names are dropped."""
    kwargs = {**config.default_chat_template_kwargs}
    kwargs.update({k: v for k, v in request_kwargs.items() if v is not None and v != "auto"})
    if reasoning_effort is not None:
        kwargs["reasoning_effort"] = reasoning_effort
        kwargs.setdefault("enable_thinking", reasoning_effort != "none")
    for reserved in _RESERVED_TEMPLATE_KWARGS:
        kwargs.pop(reserved, None)
    return kwargs
