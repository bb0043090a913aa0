"""Start-up: config → loaded model → checked parser choices → ASGI app.

Everything that can be wrong with an operator's flags is found here, before the port
opens, and reported as one `StartupError` line rather than a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import threading
from pathlib import Path

from parsers import api as parsers_api

from .generation import generation_config
from .middleware import RequestIdHeaderMiddleware, RequestLogMiddleware
from .preflight import load_plugin
from .startup_check import StartupCheckError
from .tls import tls_context
from ..config.serve import ServeConfig
from ..derender.state import MIN_SECRET_CHARS
from ..model import ModelBundle, ModelLoadError, load_model

log = logging.getLogger("render_service.serve.server")


class StartupError(RuntimeError):
    """The server cannot start with this configuration; the message says why."""


def resolve_parsers(config: ServeConfig, bundle: ModelBundle) -> ServeConfig:
    """Check ``--reasoning-parser`` / ``--tool-call-parser`` names and resolve ``auto``.

    Raises:
        StartupError: unknown parser name, ``--enable-auto-tool-choice`` without a tool parser,
            or a parser this model cannot drive (``hf``/``beam`` without the checkpoint's
            ``response_template``, or one lacking the field the parser reads).
    """
    reasoning, tool = config.reasoning_parser, config.tool_call_parser
    if config.enable_auto_tool_choice and not tool:
        raise StartupError("--enable-auto-tool-choice requires --tool-call-parser NAME (or auto)")
    if not reasoning and not tool:
        return config
    if "auto" in (reasoning, tool):
        source = bundle.chat_template.source if bundle.chat_template else ""
        found_reasoning, found_tool = parsers_api.detect_parsers(source, bundle.response_template)
        if reasoning == "auto":
            reasoning = found_reasoning
            log.info("--reasoning-parser auto picked %s from the chat template", reasoning or "none")
        if tool == "auto":
            tool = found_tool
            log.info("--tool-call-parser auto picked %s from the chat template", tool or "none")
            if tool is None and config.enable_auto_tool_choice:
                raise StartupError("--tool-call-parser auto found no known tool-call format in the chat template")
    if reasoning and reasoning not in parsers_api.reasoning_parser_names():
        raise StartupError(
            f"unknown --reasoning-parser {reasoning!r}; known: {', '.join(sorted(parsers_api.reasoning_parser_names()))}"
        )
    if tool and tool not in parsers_api.tool_parser_names():
        raise StartupError(
            f"unknown --tool-call-parser {tool!r}; known: {', '.join(sorted(parsers_api.tool_parser_names()))}"
        )
    try:  # as vLLM: a parser the model cannot feed (hf without response_template …) fails here, not per request
        parsers_api.create_parser(parsers_api.ParserSpec(reasoning=reasoning, tool=tool,
                                                         response_template=bundle.response_template))
    except ValueError as exc:
        flags = " ".join(f"{flag} {name}" for flag, name in (("--reasoning-parser", reasoning),
                                                              ("--tool-call-parser", tool)) if name)
        raise StartupError(f"{flags}: {exc}") from None
    return dataclasses.replace(config, reasoning_parser=reasoning, tool_call_parser=tool)


def load_bundle(config: ServeConfig, *, fast_build_now: bool = True) -> ModelBundle:
    """Load the model named by ``config`` (or the embedded default); ``fast_build_now``: see
    `load_model`.

    Raises:
        StartupError: the model cannot be loaded.
    """
    try:
        bundle = load_model(
            config.tokenizer or config.model,
            chat_template=config.chat_template,
            max_model_len=config.max_model_len,
            served_model_name=config.served_model_name or ((config.model,) if config.tokenizer and config.model
                                                           else ()),
            tokenizer_backend=config.tokenizer_backend,
            fast_build_now=fast_build_now,
        )
    except ModelLoadError as exc:
        raise StartupError(str(exc)) from None
    model_config = bundle.generation_config
    if config.tokenizer and config.model and Path(config.model, "generation_config.json").is_file():
        model_config = json.loads(Path(config.model, "generation_config.json").read_text())
    bundle.generation_config = generation_config(model_config, config)
    if config.chat_template_content_format != "auto" and bundle.chat_template is not None:
        bundle.chat_template.content_format = config.chat_template_content_format
    return bundle


def build_app(config: ServeConfig, *, fast_build_now: bool = True):
    """``(app, bundle, resolved_config)`` for ``config``; with ``fast_build_now=False`` the caller
    starts the tokenizer's background build (``bundle.tokenizer.start_fast_build()``).

    Raises:
        StartupError: see `load_bundle` and `resolve_parsers`.
    """
    from ..http.app import create_app

    secret = config.stream_state_secret
    if secret is not None and len(secret) < MIN_SECRET_CHARS:
        raise StartupError(f"--stream-state-secret / RENDER_SERVICE_STATE_SECRET must be at least {MIN_SECRET_CHARS} "
                           "characters (e.g. `openssl rand -hex 32`)")
    try:  # again here: each --workers process imports the plugins itself
        load_plugin(config.tool_parser_plugin, "--tool-parser-plugin")
        load_plugin(config.reasoning_parser_plugin, "--reasoning-parser-plugin")
    except StartupCheckError as exc:
        raise StartupError(str(exc)) from None
    bundle = load_bundle(config, fast_build_now=fast_build_now)
    config = resolve_parsers(config, bundle)
    app = create_app(bundle, config)
    app.state.tls = tls_context(config)  # the handshake is the connection's (http/connections.py)
    if config.enable_log_requests:
        app.add_middleware(RequestLogMiddleware, max_log_len=config.max_log_len)
    if config.enable_request_id_headers:
        app.add_middleware(RequestIdHeaderMiddleware)
    if config.otlp_traces_endpoint:
        from ..telemetry import tracing

        try:
            tracing.setup(config.otlp_traces_endpoint)  # each --workers process exports its own spans
        except tracing.TracingUnavailable as exc:
            raise StartupError(str(exc)) from None
        app.add_middleware(tracing.TracingMiddleware)
    if config.allowed_origins:  # vLLM's CORS flags, outermost as in vLLM
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.allowed_origins),
                           allow_methods=list(config.allowed_methods), allow_headers=list(config.allowed_headers),
                           allow_credentials=config.allow_credentials)
    return app, bundle, config


FAST_BUILD_FALLBACK_S = 1.0


def _exit_requested() -> bool:
    """True once uvicorn has caught SIGINT or SIGTERM: its handler is a bound ``Server.handle_exit``
    and ``should_exit`` is set at once, ~0.3-0.5 s before the lifespan's shutdown (read-only: a
    handler of another kind answers False)."""
    server = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
    return bool(getattr(server, "should_exit", False))


def build_after_health(app, bundle: ModelBundle, fallback_s: float = FAST_BUILD_FALLBACK_S) -> None:
    """Start ``bundle``'s background fast tokenizer build (left waiting by ``fast_build_now=False``)
    once ``app`` has answered its first healthy probe (``/health``, ``/ping``), or ``fallback_s``
    seconds from now when no probe came by then; never once the server is stopping (its
    lifespan's shutdown, or ``app.state.ctx.drain`` begun as uvicorn shuts connections down).

    The build is not needed to answer correctly (HF encodes until fastokens is proven equal), and
    begun during start-up it held the GIL long enough to delay the first ``/health`` by ~0.45 s
    (qwen3; 1.87 vs 1.43 s to /health with --tokenizer-backend hf). Its thread is not a daemon,
    so one begun by a stopping server held the exit for the whole build (Ctrl-C 0.85 s after
    the socket listened: 2.5 s to exit instead of 0.3 s).
    """
    ctx = app.state.ctx
    stopping = threading.Event()

    def start() -> None:
        if not (stopping.is_set() or ctx.drain.draining or _exit_requested()):
            bundle.tokenizer.start_fast_build()

    ctx.on_healthy = start
    timer = threading.Timer(fallback_s, start)
    timer.daemon = True  # a server stopped before it fires has no build to start
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a):
        try:
            async with inner(a) as state:
                yield state
        finally:
            stopping.set()
            timer.cancel()

    app.router.lifespan_context = lifespan
    timer.start()


def app_from_env():
    """ASGI app factory for ``--workers N`` (each uvicorn worker process builds its own)."""
    raw = json.loads(os.environ["RENDER_SERVICE_CONFIG"])
    fields = {f.name: f for f in dataclasses.fields(ServeConfig)}
    kwargs = {k: tuple(v) if isinstance(v, list) and k in fields else v for k, v in raw.items() if k in fields}
    # each worker defers its fastokens build as the single-process server does (see build_after_health)
    app, bundle, _ = build_app(ServeConfig(**kwargs), fast_build_now=False)
    build_after_health(app, bundle)
    return app
