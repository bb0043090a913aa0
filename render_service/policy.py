"""Rules render and derender share, decided from the request and the server config.

Both hops must agree on them, or derender parses what render did not prepare for: which
``tool_choice`` a request means, whether a parser runs (and so whether special tokens must
survive decoding), and which keyword arguments the chat template saw. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Any

from .serve.config import ServeConfig
from .errors import bad_request
from .wire.validate import check_types

# vLLM 0.33's types for a chat tool's optional fields (ChatCompletionToolsParam, FunctionDefinition).
_TOOL_TYPES = {"defer_loading": bool}
_TOOL_FUNCTION_TYPES = {"description": str, "strict": bool}

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


def named_tool(tool_choice: str | dict | None) -> str | None:
    """The function name a ``{"type": "function", "function": {"name": N}}`` choice names, else None."""
    if not isinstance(tool_choice, dict):
        return None
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def check_tools(tools: list | None) -> None:
    """``tools``: null, or a non-empty list of ``{"type": "function", "function": {name, parameters}}``.

    Raises:
        ValueError: naming the first bad entry.
    """
    if tools is not None and not tools:
        raise ValueError("tools must not be an empty list; omit it instead")
    for i, tool in enumerate(tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type", "function") != "function":
            raise ValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f"tools[{i}].function.name must be a non-empty string")
        if function.get("parameters") is not None and not isinstance(function["parameters"], dict):
            raise ValueError(f"tools[{i}].function.parameters must be a JSON Schema object")
        check_types(tool, _TOOL_TYPES, f"tools[{i}]")
        check_types(function, _TOOL_FUNCTION_TYPES, f"tools[{i}].function")


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
