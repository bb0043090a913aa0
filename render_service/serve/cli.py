"""`render-service` command line: ``serve`` (the render tier), ``engine``, ``drive``, ``bench``.

``serve`` flag names follow `vllm launch render` (wire brief §7) so operators can swap
one for the other.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import signal
import sys

from .. import __version__

# Subcommands contributed by other packages of this project: name → (module with
# `register(subparsers)`, one-line help). A module is imported only when its subcommand runs,
# so `serve` never loads the bench or the reference engine.
_SUBCOMMANDS = {
    "engine": ("reference_engine.cli", "reference tokens-only engine (test/demo tool)"),
    "drive": ("render_service.serve.drive", "OpenAI endpoint over render -> prefill -> decode -> derender"),
    "bench": ("bench.cli", "capacity bench for render servers (ours or vLLM's)"),
}


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``PROG: error: MESSAGE``, exit 2), like
    the start-up checks' refusals: the 70-line usage of ``serve`` buried the message. The
    subcommands' parsers are of this class too (argparse makes them of their parent's)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: …)`` only for real values: not for flags that are off, nor for
    options whose default the help text already explains (``--model``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _context_length(value: str) -> int:
    """``8192``, ``8k``, ``1m`` (vLLM accepts k/m/g suffixes)."""
    scale = {"k": 1024, "m": 1024**2, "g": 1024**3}
    v = value.strip().lower()
    try:
        number = int(float(v[:-1]) * scale[v[-1]]) if v and v[-1] in scale else int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a context length: {value!r}") from None
    if number < 2:
        raise argparse.ArgumentTypeError(f"a context length must be at least 2 tokens, got {number}")
    return number


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {value}")
    return number


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def port_type(value: str) -> int:
    """argparse type: a TCP port, 1-65535."""
    number = _positive(value)
    if number > 65535:
        raise argparse.ArgumentTypeError(f"ports go up to 65535, got {number}")
    return number


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model flags ``serve`` and ``drive`` share (read back by `serve_config_from_args`)."""
    from ..config.serve import ServeConfig  # imported once a parser is built: see main
    from .launch_compat import json_object
    p.add_argument("--model", default=None,
                   help="HF tokenizer dir, .gguf file or hub id (default: embedded SmolLM2-135M-Instruct GGUF)")
    p.add_argument("--served-model-name", nargs="+", default=None, help="names accepted in `model`; first is reported")
    p.add_argument("--chat-template", default=None, help="file path or inline Jinja template")
    p.add_argument("--max-model-len", type=_context_length, default=None,
                   help="context length in tokens (8k, 1m ok); default from the model")
    p.add_argument("--reasoning-parser", default=None, help="e.g. qwen3, deepseek_r1, auto")
    p.add_argument("--tool-call-parser", default=None, help="e.g. hermes, llama3_json, auto")
    p.add_argument("--enable-auto-tool-choice", action="store_true", help="required for any tool parser to be active")
    p.add_argument("--default-chat-template-kwargs", type=json_object, default=None,
                   help='JSON, e.g. {"enable_thinking": false}')
    p.add_argument("--tokenizer-backend", choices=("auto", "hf", "fast"), default=ServeConfig.tokenizer_backend,
                   help="auto: the fast backend only where proven equal to HF for this tokenizer")


def add_log_level_argument(p: argparse.ArgumentParser, default: str) -> None:
    """``--uvicorn-log-level`` (alias ``--log-level``) → ``args.uvicorn_log_level``: one
    spelling for serve, drive and engine; any case (vLLM spells the levels in capitals)."""
    p.add_argument("--uvicorn-log-level", "--log-level", dest="uvicorn_log_level", default=default, type=str.lower,
                   choices=("critical", "error", "warning", "info", "debug", "trace"),
                   help="uvicorn's log level (--log-level works too)")


def serve_config_from_args(args: argparse.Namespace, **overrides):
    """`ServeConfig` from the `add_model_arguments` flags; ``overrides`` set the other fields."""
    from ..config.serve import ServeConfig  # imported once a parser is built: see main

    return ServeConfig(**{
        "model": args.model,
        "served_model_name": tuple(args.served_model_name or ()),
        "chat_template": args.chat_template,
        "max_model_len": args.max_model_len,
        "reasoning_parser": args.reasoning_parser,
        "tool_call_parser": args.tool_call_parser,
        "enable_auto_tool_choice": args.enable_auto_tool_choice,
        "default_chat_template_kwargs": args.default_chat_template_kwargs or {},
        "tokenizer_backend": args.tokenizer_backend,
        **overrides,
    })


def add_serve_parser(subparsers: argparse._SubParsersAction) -> None:
    """The ``serve`` subcommand."""
    from ..config.serve import ServeConfig  # imported once a parser is built: see main
    p = subparsers.add_parser(
        "serve", help="run the render/derender server",
        description="Serve render (OpenAI request -> prompt token ids) and derender (engine token ids -> "
                    "OpenAI response). Flag names follow `vllm launch render`.",
        formatter_class=HelpFormatter,
        allow_abbrev=False,  # `--tokenizer` must never be read as `--tokenizer-backend`
    )
    p.add_argument("model_positional", nargs="?", metavar="MODEL", help="same as --model (wins over it, as vLLM)")
    add_model_arguments(p)
    p.add_argument("--host", default=ServeConfig.host,
                   help="listen address (default: every interface, as vLLM; 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port_type, default=ServeConfig.port, help="listen port")
    p.add_argument("--workers", "--api-server-count", "-asc", type=_positive, default=ServeConfig.workers,
                   help="server processes sharing the port (vLLM's --api-server-count)")
    p.add_argument("--api-key", nargs="+", action="extend", default=None,
                   help="guard /v1, /v2, /inference (several keys, as vLLM's `--api-key K1 K2`, or the flag "
                        "repeated; default: env VLLM_API_KEY, as vLLM)")
    p.add_argument("--trust-request-chat-template", action="store_true",
                   help="accept `chat_template` in requests (a client-supplied Jinja template runs in the sandbox)")
    p.add_argument("--exclude-tools-when-tool-choice-none", action="store_true",
                   help="with tool_choice none, render the prompt without the tools (vLLM's flag)")
    p.add_argument("--token-exact-history", action="store_true",
                   help="chat requests with previous_turn render as its exact ids + the new messages "
                        "(a request's token_exact_history overrides; README 'Agent loops')")
    p.add_argument("--content-special-tokens", choices=("parse", "text"), default=ServeConfig.content_special_tokens,
                   help="parse: control-token text in messages becomes control tokens (HF parity); "
                        "text: it stays plain text (no turn forging)")
    p.add_argument("--stream-state-secret", default=os.environ.get("RENDER_SERVICE_STATE_SECRET"),
                   help="HMAC key sealing derender stream_state, at least 32 characters; give every replica behind "
                        "one router the same one (env RENDER_SERVICE_STATE_SECRET; default: a random key per server, "
                        "shared by its --workers)")
    p.add_argument("--max-body-bytes", type=_positive, default=ServeConfig.max_body_bytes, help="larger bodies get 413")
    p.add_argument("--max-queue-delay-ms", type=_positive, default=ServeConfig.max_queue_delay_ms,
                   help="a request that cannot start on the CPU pool within this delay gets 503 + Retry-After "
                        "(keep it under the router's timeout: llm-d's token-producer waits 5 s)")
    p.add_argument("--max-logprobs", type=int, default=ServeConfig.max_logprobs,
                   help="top logprobs allowed per token (-1: no limit)")
    p.add_argument("--max-batch-prompts", type=_positive, default=ServeConfig.max_batch_prompts,
                   help="most prompts in one completions request (more: 400)")
    p.add_argument("--max-batch-prompt-length", type=_positive, default=ServeConfig.max_batch_prompt_length,
                   help="most prompt characters + token ids in one completions request, all prompts together "
                        "(more: 400)")
    add_log_level_argument(p, "info")
    add_connection_arguments(p)
    from ..multimodal import flags as media_flags

    media_flags.add_arguments(p)
    from . import launch_compat

    launch_compat.add_arguments(p)  # last: it accepts every vLLM flag not defined above
    p.set_defaults(func=run_serve)


def build_config(args: argparse.Namespace):
    """`ServeConfig` from parsed ``serve`` arguments."""
    from . import launch_compat
    from ..multimodal import flags as media_flags

    return serve_config_from_args(
        args,
        model=args.model_positional or args.model,  # vLLM: the positional MODEL wins over --model
        host=args.host,
        port=args.port,
        workers=args.workers,
        api_key=tuple(args.api_key or ()) or tuple(filter(None, [os.environ.get("VLLM_API_KEY")])),
        trust_request_chat_template=args.trust_request_chat_template,
        exclude_tools_when_tool_choice_none=args.exclude_tools_when_tool_choice_none,
        token_exact_history=args.token_exact_history,
        content_special_tokens=args.content_special_tokens,
        max_body_bytes=args.max_body_bytes,
        max_logprobs=args.max_logprobs,
        max_batch_prompts=args.max_batch_prompts,
        max_batch_prompt_length=args.max_batch_prompt_length,
        stream_state_secret=args.stream_state_secret,
        max_queue_delay_ms=args.max_queue_delay_ms,
        body_read_timeout=args.body_read_timeout,
        body_min_rate=args.body_min_rate,
        **media_flags.overrides(args),
        **launch_compat.overrides(args),
    )


def run_serve(args: argparse.Namespace) -> int:
    """Load the model, check the parser choices, and serve until interrupted."""
    import uvicorn

    from ..derender.state import MIN_SECRET_CHARS, random_secret
    from .server import StartupError, build_after_health, build_app

    config = build_config(args)
    random_key = config.stream_state_secret is None
    if random_key:
        # One random key for this server and all its --workers (they inherit it through the config).
        config = dataclasses.replace(config, stream_state_secret=random_secret())
    from . import launch_compat

    launch_compat.apply_environment(args)
    try:
        launch_compat.preflight(args, config)  # everything checkable before the model loads
    except launch_compat.StartupCheckError as exc:
        print(f"render-service: error: {exc}", file=sys.stderr)
        return 2
    if config.workers > 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from ..http.metrics import prepare_multiprocess_dir

        prepare_multiprocess_dir()  # before any worker starts: every worker's series merged on /metrics
    try:
        # The fast tokenizer's build waits until the server has said it is healthy (server.build_after_health):
        # it would take CPU and the GIL from the path to /health, and it is not needed to answer correctly.
        app, bundle, config = build_app(config, fast_build_now=False)
    except StartupError as exc:
        print(f"render-service: error: {exc}", file=sys.stderr)
        return 2
    if random_key:  # said once the server will start, not before a refusal
        logging.getLogger("render_service").info(
            "stream_state key: random for this server; to let streams move between replicas give every replica "
            "the same --stream-state-secret / RENDER_SERVICE_STATE_SECRET (at least %d characters)", MIN_SECRET_CHARS)
    scheme = "https" if config.ssl_certfile else "http"
    logging.getLogger("render_service").info(
        "serving %s (context %d tokens) on %s", bundle.model_name, bundle.max_model_len,
        f"{scheme}://{config.host}:{config.port}" if config.host else f"{scheme} port {config.port} of all interfaces",
    )
    connection = {**connection_options(args), "root_path": config.root_path, "access_log": config.access_log}
    if config.workers > 1:
        os.environ["RENDER_SERVICE_CONFIG"] = json.dumps(config.__dict__, default=list)
        uvicorn.run("render_service.serve.server:app_from_env", factory=True, host=config.host, port=config.port,
                    workers=config.workers, log_level=args.uvicorn_log_level, **connection)
    else:  # (with --workers each worker process builds its own app and tokenizer: this one serves nothing)
        build_after_health(app, bundle)
        uvicorn.run(app, host=config.host, port=config.port, log_level=args.uvicorn_log_level, **connection)
    return 0


def add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """Connection hygiene flags shared by ``serve`` and ``drive`` (see `render_service.http.connections`)."""
    from ..config.serve import ServeConfig  # imported once a parser is built: see main
    p.add_argument("--timeout-keep-alive", type=_positive, default=5,
                   help="seconds a connection may go without a complete request head (after accept or a response) "
                        "before it is closed; with TLS, also the most its handshake may take")
    p.add_argument("--max-connections", type=_positive, default=1024,
                   help="open connections per worker process; past it a new connection gets 503 and is closed")
    p.add_argument("--body-read-timeout", type=_positive_float, default=ServeConfig.body_read_timeout, metavar="S",
                   help="seconds a request body may take after its head, plus one per --body-min-rate bytes "
                        "received; a body still incomplete then gets 408 and its connection is closed. An answer "
                        "the client reads slower than --body-min-rate for that long (past the write buffer) "
                        "resets the connection")
    p.add_argument("--body-min-rate", type=_positive_float, default=ServeConfig.body_min_rate, metavar="BYTES_PER_S",
                   help="the slowest body upload, or reading of an answer, that is never cut (see --body-read-timeout)")
    p.add_argument("--graceful-shutdown-timeout", type=_positive, default=30,
                   help="seconds to drain in-flight requests after SIGTERM before they are cut")


def connection_options(args: argparse.Namespace) -> dict:
    """uvicorn keyword arguments for the connection flags."""
    from ..http.access_log import logging_config

    return {"http": "render_service.http.connections:HardenedProtocol", "timeout_keep_alive": args.timeout_keep_alive,
            "limit_concurrency": args.max_connections, "timeout_graceful_shutdown": args.graceful_shutdown_timeout,
            "log_config": logging_config()}


def _subcommand_module(name: str):
    """The module of a subcommand, or None when that part of the project is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            return None
        raise


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``render-service`` console script.

    Until uvicorn takes the signals over (and after it gives them back), Ctrl-C or SIGTERM ends
    the process at once with 128 + the signal's number, as a shell reports it, instead of a
    KeyboardInterrupt traceback or a death by signal: the model's load takes seconds. This
    module imports nothing heavy, so that holds from the first line of `main` on."""
    previous = signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = Parser(prog="render-service", description="CPU front tier for disaggregated LLM serving",
                    allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"render-service {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(sub)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:  # a `vllm launch render` command line as vLLM's parser reads it
        from .launch_compat import expand_command_line

        try:
            argv = expand_command_line(argv, set(sub.choices["serve"]._option_string_actions))
        except ValueError as exc:
            sub.choices["serve"].error(str(exc))
    command = next((a for a in argv if not a.startswith("-")), None)
    for name, (module_name, help_text) in _SUBCOMMANDS.items():
        module = _subcommand_module(module_name) if name == command else None
        if module is not None:
            module.register(sub)
        else:  # listed in --help; its flags are known only once it is chosen
            sub.add_parser(name, help=help_text, add_help=False)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand's parser, so the line names the subcommand
        (sub.choices.get(args.command) or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not hasattr(args, "func"):
        parser.error(f"`{args.command}` is not installed in this environment (pip install -e '.[dev]')")
    return args.func(args) or 0


def _exit_on_signal(signum: int, frame) -> None:
    raise SystemExit(128 + signum)  # not an Exception: no `except Exception` on the loading path swallows it


if __name__ == "__main__":
    sys.exit(main())
