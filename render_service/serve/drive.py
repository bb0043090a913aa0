"""`render-service drive`: flags → `DriverConfig` → a served `Driver` (see ``docs/driver.md``)."""

from __future__ import annotations

import argparse
import logging
import sys

from .cli import (add_connection_arguments, add_log_level_argument, add_model_arguments,
                   connection_options, port_type, serve_config_from_args)
from ..driver.config import DriverConfig, split_urls

DESCRIPTION = (
    "Four-hop driver: an OpenAI endpoint that renders each request (in this process, or on "
    "--render URL), prefills it on a tokens-only engine, decodes it on another with the "
    "prefill's KV, and derenders the tokens back into an OpenAI response."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``drive`` flags (model flags as in ``serve``)."""
    p.add_argument("--prefill", required=True, type=split_urls, metavar="URL[,URL...]",
                   help="tokens-only prefill engine(s), e.g. http://127.0.0.1:8100")
    p.add_argument("--decode", required=True, type=split_urls, metavar="URL[,URL...]",
                   help="tokens-only decode engine(s)")
    p.add_argument("--render", default=None, metavar="URL",
                   help="render server to render/derender on (default: in this process with the model flags)")
    add_model_arguments(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_type, default=8192)
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="seconds an upstream may stay silent before its hop fails with 504 (default 600)")
    p.add_argument("--kv-reuse", action="store_true",
                   help="bidirectional KV for chat conversations (conversation_id / X-Conversation-Id): decode keeps "
                        "its answer's KV and the next turn's prefill pulls it, never past the first token where "
                        "the new prompt leaves it (engines must support retain_kv, as the reference engine does)")
    p.add_argument("--connect-timeout", type=float, default=5.0, metavar="S",
                   help="seconds to connect to an upstream before trying the next one (default 5)")
    add_log_level_argument(p, "info")
    add_connection_arguments(p)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``drive`` subcommand (``set_defaults(func=run)``)."""
    p = subparsers.add_parser("drive", help="OpenAI endpoint over render -> prefill -> decode -> derender",
                              description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> DriverConfig:
    """Raises ValueError for bad URLs or timeouts."""
    return DriverConfig(prefill=args.prefill, decode=args.decode, render=(args.render or "").rstrip("/") or None,
                        serve=serve_config_from_args(args, body_read_timeout=args.body_read_timeout,
                                                     body_min_rate=args.body_min_rate),
                        host=args.host, port=args.port, timeout=args.timeout,
                        connect_timeout=args.connect_timeout, kv_reuse=args.kv_reuse)


def build_driver(config: DriverConfig):
    """``(driver, resolved config)``: loads the model unless ``config.render`` is set.

    Raises:
        StartupError: the model cannot be loaded or the parser flags are wrong.
    """
    import dataclasses

    from .server import load_bundle, resolve_parsers
    from ..driver.flow import Driver

    bundle = None
    if config.render is None:
        bundle = load_bundle(config.serve)
        config = dataclasses.replace(config, serve=resolve_parsers(config.serve, bundle))
    return Driver(config, bundle), config


_WHAT = {"prefill": "engine", "decode": "engine", "render": "server"}


def unreachable_upstreams(config: DriverConfig, timeout: float = 2.0) -> list[str]:
    """One line per prefill/decode/render URL whose ``/health`` does not answer 200 now.

    Only a warning at start-up: engines often start after the driver, and requests fail
    over to the next instance of a hop anyway."""
    import httpx

    urls = [("prefill", u) for u in config.prefill] + [("decode", u) for u in config.decode]
    if config.render:
        urls.append(("render", config.render))
    out = []
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        for hop, url in urls:
            try:
                status = client.get(url + "/health").status_code
            except httpx.HTTPError as exc:
                out.append(f"{hop} {_WHAT[hop]} {url} is not reachable ({type(exc).__name__}); requests will fail over "
                           f"to the other {hop} instances, or fail with 503, until it is up")
                continue
            if status != 200:
                out.append(f"{hop} {_WHAT[hop]} {url} answers /health with {status}")
    return out


def run(args: argparse.Namespace) -> int:
    """Start the driver and serve until interrupted; 2 for bad flags or a model that will not load."""
    import uvicorn

    from .preflight import StartupCheckError, check_port
    from .server import StartupError
    from ..driver.app import create_app
    from ..http.drain import CUT_MARGIN_S, DrainingServer

    try:
        config = config_from_args(args)
        check_port(config.host, config.port)  # before the model loads, as `serve`
        driver, config = build_driver(config)
    except (ValueError, StartupError, StartupCheckError) as exc:
        print(f"render-service drive: error: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per upstream call is noise
    where = config.render or "in process"
    logging.getLogger("render_service.driver").info(
        "driving prefill %s, decode %s, render %s on http://%s:%d",
        ",".join(config.prefill), ",".join(config.decode), where, config.host, config.port)
    for message in unreachable_upstreams(config):
        print(f"render-service drive: warning: {message}", file=sys.stderr, flush=True)
    # On SIGTERM: requests in flight get --graceful-shutdown-timeout s, then the drain ends them
    # (error event + [DONE], engine legs aborted) before uvicorn's own, later, cut.
    app = create_app(driver)
    options = connection_options(args)
    grace = options.pop("timeout_graceful_shutdown")
    server = DrainingServer(uvicorn.Config(app, host=config.host, port=config.port, log_level=args.uvicorn_log_level,
                                           timeout_graceful_shutdown=grace + CUT_MARGIN_S, **options),
                            app.state.drain, grace)
    server.run()
    return 0
