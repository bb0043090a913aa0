"""`render-service drive`: flags (serve/flags.py) → `DriverConfig` → a served `Driver` (see ``docs/driver.md``)."""

from __future__ import annotations

import argparse
import logging
import sys

from ..driver.config import DriverConfig

DESCRIPTION = (
    "Four-hop driver: an OpenAI endpoint that renders each request (in this process, or on "
    "--render URL), prefills it on a tokens-only engine, decodes it on another with the "
    "prefill's KV, and derenders the tokens back into an OpenAI response."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``drive`` subcommand (``set_defaults(func=run)``)."""
    from .flags import DRIVE, add_flags

    p = subparsers.add_parser("drive", help="OpenAI endpoint over render -> prefill -> decode -> derender",
                              description=DESCRIPTION)
    add_flags(p, DRIVE)
    p.set_defaults(func=run)


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

    from .cli import connection_options
    from .flags import driver_config
    from .preflight import check_port
    from .startup_check import StartupCheckError
    from .server import StartupError
    from ..driver.app import create_app
    from ..http.drain import CUT_MARGIN_S, DrainingServer

    try:
        config = driver_config(args)
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
    options = connection_options(config.serve)
    grace = options.pop("timeout_graceful_shutdown")
    server = DrainingServer(uvicorn.Config(app, host=config.host, port=config.port, log_level=args.uvicorn_log_level,
                                           timeout_graceful_shutdown=grace + CUT_MARGIN_S, **options),
                            app.state.drain, grace)
    server.run()
    return 0
