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


def add_serve_parser(subparsers: argparse._SubParsersAction) -> None:
    """The ``serve`` subcommand (its flags: `flags.FLAGS`)."""
    from .flags import serve_parser

    serve_parser(subparsers).set_defaults(func=run_serve)


def apply_environment(args: argparse.Namespace) -> None:
    """``--download-dir`` and ``--hf-token`` as the Hugging Face hub client reads them (environment,
    inherited by ``--workers``), for a ``--model`` hub id."""
    if args.download_dir:
        os.environ["HF_HUB_CACHE"] = args.download_dir
    if isinstance(args.hf_token, str):
        os.environ["HF_TOKEN"] = args.hf_token


def run_serve(args: argparse.Namespace) -> int:
    """Load the model, check the parser choices, and serve until interrupted."""
    import uvicorn

    from ..derender.state import MIN_SECRET_CHARS, random_secret
    from .server import StartupError, build_after_health, build_app

    from .flags import serve_config

    config = serve_config(args)
    random_key = config.stream_state_secret is None
    if random_key:
        # One random key for this server and all its --workers (they inherit it through the config).
        config = dataclasses.replace(config, stream_state_secret=random_secret())
    from .preflight import preflight
    from .startup_check import StartupCheckError

    apply_environment(args)
    try:
        preflight(args, config)  # everything checkable before the model loads
    except StartupCheckError as exc:
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
    connection = {**connection_options(config), "root_path": config.root_path, "access_log": config.access_log}
    if config.workers > 1:
        os.environ["RENDER_SERVICE_CONFIG"] = json.dumps(config.__dict__, default=list)
        uvicorn.run("render_service.serve.server:app_from_env", factory=True, host=config.host, port=config.port,
                    workers=config.workers, log_level=args.uvicorn_log_level, **connection)
    else:  # (with --workers each worker process builds its own app and tokenizer: this one serves nothing)
        build_after_health(app, bundle)
        uvicorn.run(app, host=config.host, port=config.port, log_level=args.uvicorn_log_level, **connection)
    return 0


def connection_options(config) -> dict:
    """uvicorn keyword arguments for a `ServeConfig`'s connection fields."""
    from ..http.access_log import logging_config

    return {"http": "render_service.http.connections:HardenedProtocol", "timeout_keep_alive": config.timeout_keep_alive,
            "limit_concurrency": config.max_connections, "timeout_graceful_shutdown": config.graceful_shutdown_timeout,
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
    from .flags import command_parser

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser, sub = command_parser(__version__)
    add_serve_parser(sub)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:  # a `vllm launch render` command line as vLLM's parser reads it
        from .command_line import expand_command_line

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
