"""Rules render and derender share, decided from the request and the server config.

Both hops must agree on them, or derender parses what render did not prepare for: which
``tool_choice`` a request means, whether a parser runs (and so whether special tokens must
survive decoding), and which keyword arguments the chat template saw. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Any, Protocol

from .errors import bad_request


class ServeConfig(Protocol):
    """The server settings these rules read (`render_service.config.serve.ServeConfig` has
    them): a protocol, so this bottom-layer module imports nothing above it."""

    reasoning_parser: str | None
    tool_call_parser: str | None
    enable_auto_tool_choice: bool
    default_chat_template_kwargs: dict
    exclude_tools_when_tool_choice_none: bool

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


def template_tools(config: ServeConfig, tools: list | None, tool_choice: str | dict) -> list | None:
    """The ``tools`` the chat template sees: none under ``tool_choice`` ``none`` with
    ``--exclude-tools-when-tool-choice-none`` (vLLM's flag), else the request's."""
    if tools is not None and tool_choice == "none" and config.exclude_tools_when_tool_choice_none:
        return None
    return tools


def named_tool(tool_choice: str | dict | None) -> str | None:
    """The function name a ``{"type": "function", "function": {"name": N}}`` choice names, else None."""
    if not isinstance(tool_choice, dict):
        return None
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def check_tool_choice(tool_choice: str | dict | None, tools: list | None, *, requires_tools: bool = True) -> None:
    """``tool_choice`` is ``none``/``auto``/``required`` or names a function in ``tools``;
    with ``requires_tools`` (a client request) anything but ``none`` needs tools.

    Raises:
        ValueError: what is wrong, for a 400 naming ``tool_choice``.
    """
    if tool_choice is None:
        return
    if requires_tools and tool_choice != "none" and not tools:
        raise ValueError("tool_choice requires tools")
    if isinstance(tool_choice, dict):
        name = named_tool(tool_choice)
        names = {(t.get("function") or {}).get("name") for t in tools or [] if isinstance(t, dict)}
        if name is None or name not in names:
            raise ValueError(f"tool_choice names a function ({name!r}) that is not in tools")
    elif tool_choice not in ("none", "auto", "required"):
        raise ValueError(f"tool_choice must be none, auto, required or a function object, not {tool_choice!r}")


def parser_active(config: ServeConfig, tool_choice: str | dict) -> bool:
    """A parser will read this request's output: a reasoning parser, or a tool parser with
    a ``tool_choice`` other than ``none``."""
    return bool(config.reasoning_parser) or (tool_parser_active(config) and tool_choice != "none")


def tool_parser_for(config: ServeConfig, tool_choice: str | dict, tools: list | None) -> str | None:
    """The tool parser that reads this request's output, or None: the server's
    ``--tool-call-parser`` when the request has tools and either names a function, says
    ``required``, or says ``auto`` on a server started with ``--enable-auto-tool-choice``."""
    if not tools or config.tool_call_parser is None:
        return None
    if isinstance(tool_choice, dict) or tool_choice == "required" or (
            tool_choice == "auto" and config.enable_auto_tool_choice):
        return config.tool_call_parser
    return None


def skip_special_tokens(requested: bool | None, parser_active: bool, default: bool = True) -> bool:
    """The decoding flag: false whenever a parser runs, since markers such as ``<tool_call>``
    or ``[TOOL_CALLS]`` must survive decoding (wire brief §3.1, shared case 22); else the
    request's value, else ``default`` (the model's generation config, true)."""
    if parser_active:
        return False
    return default if requested is None else requested


def model_skips_special_tokens(bundle: Any) -> bool:
    """The model's own default for ``skip_special_tokens`` (its generation config, else true):
    render and derender both start from it, so the two hops decode alike."""
    return bool((getattr(bundle, "generation_config", None) or {}).get("skip_special_tokens", True))


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
