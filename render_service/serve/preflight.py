"""Start-up checks that need no model: run before it loads (`preflight`), each refusal one line
(exit 2): parser names (``auto`` among the choices), plugin files, an unreadable template file,
the vLLM flags not served, TLS files, LoRA adapters, a port in use."""

from __future__ import annotations

import argparse
import errno
import importlib.util
import logging
import socket
import sys
from pathlib import Path

from .lora import check_lora_modules
from .startup_check import StartupCheckError
from .tls import check_tls
from .vllm_compat import ignored_flags, refused_flags

log = logging.getLogger("render_service.serve.cli")


def check_port(host: str, port: int) -> None:
    """That ``host:port`` can be listened on now (an empty ``host`` is every interface), so a
    server that cannot serve says so before it loads anything.

    Raises:
        StartupCheckError: ``host`` is no address or name this machine resolves, no interface
            here has it, or the port is taken (another server) or not ours to take.
    """
    where = f"{host}:{port}" if host else f"port {port} of all interfaces"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except socket.gaierror as exc:
            raise StartupCheckError(f"--host {host}: not a valid address or a host name this machine resolves "
                                    f"({exc.strerror})") from None
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise StartupCheckError(f"--host {host}: no network interface of this machine has that address "
                                        "(127.0.0.1: this machine only; leave it out for every interface)") from None
            hint = " (is another server running there?)" if exc.errno == errno.EADDRINUSE else ""
            raise StartupCheckError(f"cannot listen on {where}: {exc.strerror or exc}{hint}") from None


def load_plugin(path: str | None, flag: str) -> None:
    """Import a parser plugin file (vLLM's ``--*-parser-plugin``): it registers its format on import.

    Raises:
        StartupCheckError: the file is missing or fails to import.
    """
    if not path:
        return
    file = Path(path)
    if not file.is_file():
        raise StartupCheckError(f"{flag} {path}: no such file")
    name = f"render_service_plugin_{file.stem}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure of the plugin is the operator's to fix
        sys.modules.pop(name, None)
        raise StartupCheckError(f"{flag} {path} failed to import: {type(exc).__name__}: {exc}") from None


def check_parser_names(reasoning: str | None, tool: str | None) -> None:
    """Raises `StartupCheckError` for an unknown name, listing the choices (``auto`` first)."""
    from parsers import api as parsers_api

    for flag, name, known in (("--reasoning-parser", reasoning, parsers_api.reasoning_parser_names()),
                              ("--tool-call-parser", tool, parsers_api.tool_parser_names())):
        if name and name != "auto" and name not in known:
            raise StartupCheckError(f"invalid choice for {flag}: {name!r} (choose from auto, {', '.join(known)})")


def check_tool_parser_flags(tool: str | None, auto_tool_choice: bool) -> None:
    """``--enable-auto-tool-choice`` needs a ``--tool-call-parser`` (refused here, before the model
    loads); a parser without ``--enable-auto-tool-choice`` starts but reads only the requests that
    force a call, which is rarely what an operator meant: one warning line says so.

    Raises:
        StartupCheckError: ``--enable-auto-tool-choice`` without ``--tool-call-parser``.
    """
    if auto_tool_choice and not tool:
        raise StartupCheckError("--enable-auto-tool-choice requires --tool-call-parser NAME (or auto)")
    if tool and not auto_tool_choice:
        log.warning("--tool-call-parser %s without --enable-auto-tool-choice: tool calls are parsed only for "
                    "requests with tool_choice \"required\" or a named function; tool_choice \"auto\" (the default "
                    "when a request sends tools) is refused with 400, as in vLLM. Add --enable-auto-tool-choice to "
                    "parse the calls a model makes on its own.", tool)


def check_chat_template(value: str | None) -> None:
    """A ``--chat-template`` that is not inline Jinja must be a readable file."""
    if not value or "{{" in value or "{%" in value:
        return
    try:
        Path(value).read_text()
    except OSError as exc:
        raise StartupCheckError(f"--chat-template {value}: cannot read it ({exc.strerror or exc}); give a readable "
                                "file or an inline Jinja template") from None


def preflight(args: argparse.Namespace, config) -> None:
    """Every check that needs no model, before the model loads; then the one warning line for
    flags that have no effect here.

    Raises:
        StartupCheckError: the first problem found.
    """
    load_plugin(config.tool_parser_plugin, "--tool-parser-plugin")
    load_plugin(config.reasoning_parser_plugin, "--reasoning-parser-plugin")
    check_parser_names(config.reasoning_parser, config.tool_call_parser)
    check_tool_parser_flags(config.tool_call_parser, config.enable_auto_tool_choice)
    check_chat_template(config.chat_template)
    if config.generation_config not in ("auto", "vllm") and not Path(config.generation_config).is_dir():
        raise StartupCheckError(f"--generation-config {config.generation_config}: expected auto, vllm or a folder")
    refused = refused_flags(args)
    if refused:
        raise StartupCheckError("; ".join(refused))
    check_tls(config)
    check_lora_modules(config)
    from ..telemetry import tracing

    try:
        tracing.setup(config.otlp_traces_endpoint)
    except tracing.TracingUnavailable as exc:
        raise StartupCheckError(str(exc)) from None
    check_port(config.host, config.port)
    ignored = ignored_flags(args)
    if ignored:
        log.warning("no effect on a CPU render tier (accepted for `vllm launch render` compatibility): %s",
                    " ".join(ignored))
    if getattr(args, "trust_remote_code", False):
        log.info("--trust-remote-code: accepted; this server never runs model code")
