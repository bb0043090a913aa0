"""What operators see from the CLI: --help texts, one spelling of the log level across
subcommands, the engine's start-up line, and drive's warning about unreachable engines."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from conftest import MODELS, REPO, free_port, needs_shared, serve_app
from render_service.serve.cli import add_serve_parser


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="render-service")
    add_serve_parser(parser.add_subparsers(dest="command"))
    return parser


def _help(subcommand: str) -> str:
    parser = argparse.ArgumentParser(prog="render-service")
    sub = parser.add_subparsers(dest="command")
    add_serve_parser(sub)
    from reference_engine import cli as engine_cli
    from render_service.serve import drive as drive_cli

    engine_cli.register(sub)
    drive_cli.register(sub)
    return sub.choices[subcommand].format_help()


def _option_help(text: str, option: str) -> str:
    """The help paragraph of ``option`` in an argparse help text."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(option))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith(" " * 6) or line.strip().startswith("-"):
            break
        block.append(line)
    return " ".join(" ".join(block).split())


def test_serve_help_texts_and_one_default():
    text = _help("serve")
    for option in ("--trust-request-chat-template", "--exclude-tools-when-tool-choice-none", "--uvicorn-log-level"):
        assert len(_option_help(text, option).split()) > 3, f"{option} has no help text"
    model = _option_help(text, "--model")
    assert model.count("default") == 1 and "SmolLM2" in model
    assert "(default: None)" not in text and "(default: False)" not in text
    assert "(default: 8000)" in _option_help(text, "--port")


@pytest.mark.parametrize("subcommand, argv", [
    ("serve", ["serve"]),
    ("drive", ["drive", "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2"]),
    ("engine", ["engine", "--scripted", "s.json"]),
])
def test_log_level_has_both_spellings(subcommand, argv):
    parser = argparse.ArgumentParser(prog="render-service")
    sub = parser.add_subparsers(dest="command")
    add_serve_parser(sub)
    from reference_engine import cli as engine_cli
    from render_service.serve import drive as drive_cli

    engine_cli.register(sub)
    drive_cli.register(sub)
    for spelling in ("--log-level", "--uvicorn-log-level"):
        assert parser.parse_args(argv + [spelling, "DEBUG"]).uvicorn_log_level == "debug"


def test_engine_prints_where_it_listens(tmp_path):
    script = tmp_path / "s.json"
    script.write_text('{"responses": [{"token_ids": [1, 2]}]}')
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "reference_engine", "--scripted", str(script), "--role", "prefill",
                             "--port", str(port)], stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "prefill engine" in line and f"http://127.0.0.1:{port}" in line and str(script) in line


def test_drive_warns_about_unreachable_engines():
    from render_service.serve.drive import unreachable_upstreams
    from render_service.driver.config import DriverConfig

    app = Starlette(routes=[Route("/health", lambda request: PlainTextResponse("ok"))])
    with serve_app(app) as up:
        down = f"http://127.0.0.1:{free_port()}"
        config = DriverConfig(prefill=(up,), decode=(up, down), render=None)
        messages = unreachable_upstreams(config, timeout=2.0)
    assert len(messages) == 1 and "decode engine" in messages[0] and down in messages[0]


def test_serve_loads_neither_bench_nor_engine():
    code = ("import sys\nfrom render_service.serve.cli import main\n"
            "try:\n    main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'bench', 'reference_engine'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60).stdout
    assert out.strip().splitlines()[-1] == "[]"


# What `serve` may import before its arguments are checked: --help and a flag error answer at
# once even on a loaded box (they took 9-17 s when the model stack was imported first).
_HEAVY = {"numpy", "numba", "PIL", "tokenizers", "transformers", "jinja2", "fastokens", "parsers", "uvicorn"}


@pytest.mark.parametrize("argv", [["serve", "--help"], ["serve", "--port", "0"], ["serve", "--no-such-flag"]])
def test_serve_checks_arguments_before_heavy_imports(argv):
    code = ("import sys\nfrom render_service.serve.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(_HEAVY)!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr[-2000:]


def test_auto_tool_choice_without_a_parser_is_refused_before_the_model_loads(tmp_path):
    missing = tmp_path / "no-such-model"
    done = subprocess.run([sys.executable, "-m", "render_service.serve.cli", "serve", str(missing), "--enable-auto-tool-choice",
                           "--host", "127.0.0.1", "--port", str(free_port())],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "render-service: error: --enable-auto-tool-choice requires --tool-call-parser NAME (or auto)"
    # one line: refused before anything tried to load the model, and before any start-up chatter


@pytest.mark.parametrize("argv, says", [
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--port", "abc"], "argument --port: not a whole number: 'abc'"),
    (["--workers", "0"], "must be at least 1, got 0"),
    (["--default-chat-template-kwargs", "{x"], "argument --default-chat-template-kwargs: not valid JSON"),
    (["--config", "/nope.yaml"], "--config /nope.yaml: cannot read it"),
    # past int64 it was taken, then /v1/models and every render without max_tokens answered 400 (fresh user)
    (["--max-model-len", "99999999999999999999"], "argument --max-model-len: a context length must be at most"),
])
def test_a_wrong_serve_flag_is_one_line(argv, says):
    """Refused as `--chat-template /nonexistent` is: one line naming the flag (the 70-line usage came first)."""
    done = subprocess.run([sys.executable, "-m", "render_service.serve.cli", "serve", *argv],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("render-service serve: error: ") and says in done.stderr, done.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_model_loads_exits_quietly(signum):
    """Ctrl-C in the first seconds of `serve` printed a KeyboardInterrupt traceback and died by
    signal (SIGTERM: died by signal); now exit 128 + signal, nothing on stderr. The signal is
    sent from inside the model load, so it lands there whatever the box's speed."""
    code = ("import os, signal, sys, time\nfrom render_service.serve import cli, server\n"
            "def load(*a, **k):\n"
            f"    os.kill(os.getpid(), {int(signum)})\n"
            "    time.sleep(30)\n"
            "server.load_bundle = load\n"
            f"sys.exit(cli.main(['serve', '--host', '127.0.0.1', '--port', '{free_port()}']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 128 + signum, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


@pytest.mark.parametrize("argv", [
    ["drive", "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2"],
    ["engine", "--scripted", "s.json"],
    ["serve"],
])
def test_a_taken_port_is_refused_before_the_model_loads(argv, tmp_path):
    """`drive` and `engine` logged "driving … on" / "… engine … on", loaded, then died on uvicorn's
    Errno 98 (exit 3); now they refuse in one line first, as `serve` does."""
    (tmp_path / "s.json").write_text('{"responses": [{"token_ids": [1, 2]}]}')
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "render_service.serve.cli", *argv, "--host", "127.0.0.1",
                               "--port", str(port)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"render-service{'' if argv[0] == 'serve' else ' ' + argv[0]}: error: cannot "
                                   f"listen on 127.0.0.1:{port}: Address already in use (is another server running "
                                   "there?)"), done.stderr


@pytest.mark.parametrize("host, says", [("999.1.1.1", "not a valid address"),
                                        ("192.0.2.1", "no network interface of this machine has that address")])
def test_a_host_that_cannot_be_listened_on_is_named(host, says):
    """`--host 999.1.1.1` asked "is another server running there?"."""
    done = subprocess.run([sys.executable, "-m", "render_service.serve.cli", "serve", "--host", host,
                           "--port", str(free_port())], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"render-service: error: --host {host}: {says}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "another server" not in done.stderr


def test_a_tool_parser_without_auto_tool_choice_warns(caplog):
    from render_service.serve.preflight import check_tool_parser_flags

    with caplog.at_level("WARNING", logger="render_service"):
        check_tool_parser_flags("hermes", False)
    assert len(caplog.records) == 1
    assert "--tool-call-parser hermes without --enable-auto-tool-choice" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="render_service"):
        check_tool_parser_flags("hermes", True)
        check_tool_parser_flags(None, False)
    assert not caplog.records


@needs_shared
def test_serve_switches_to_fastokens_once_it_serves():
    """`serve` leaves the fast backend's build until uvicorn starts (render_service.serve.cli):
    the server is healthy and renders with HF meanwhile, then says it switched."""
    from cli_server import serve

    with serve(str(MODELS / "qwen3")) as (client, proc):
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        body = {"messages": [{"role": "user", "content": "naïve café 東京 12345"}]}
        first = client.post("/v1/chat/completions/render", json=body).json()["token_ids"]
        deadline = time.monotonic() + 300
        while not any("tokenizer backend fastokens (" in line for line in lines):
            assert time.monotonic() < deadline, "".join(lines)[-2000:]
            time.sleep(0.2)
        assert client.post("/v1/chat/completions/render", json=body).json()["token_ids"] == first
    assert any("encoding with HF while the fastokens backend is built" in line for line in lines)


def test_fast_build_starts_at_the_first_healthy_probe_or_after_the_fallback():
    """`serve` starts the fast tokenizer's build once it has said it is healthy (the first probe
    answered 200), or after the fallback delay when nobody probes; once either way."""
    from types import SimpleNamespace

    from render_service.http.common import AppContext
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_after_health

    def server(fallback_s: float):
        tokenizer = SimpleNamespace(starts=0)
        tokenizer.start_fast_build = lambda: setattr(tokenizer, "starts", tokenizer.starts + 1)
        ctx = AppContext(bundle=None, config=ServeConfig())
        app = Starlette()
        app.state.ctx = ctx
        build_after_health(app, SimpleNamespace(tokenizer=tokenizer), fallback_s=fallback_s)
        return ctx, tokenizer

    async def probe(ctx) -> int:
        status = ctx.probe_status()
        await asyncio.sleep(0)  # the build starts once the probe's answer is written, on the next loop turn
        return status

    ctx, probed = server(fallback_s=60)
    assert probed.starts == 0
    assert asyncio.run(probe(ctx)) == 200 and probed.starts == 1
    assert asyncio.run(probe(ctx)) == 200 and probed.starts == 1  # later probes start nothing
    _, unprobed = server(fallback_s=0.05)
    deadline = time.monotonic() + 30
    while unprobed.starts == 0:
        assert time.monotonic() < deadline, "the fallback never started the build"
        time.sleep(0.05)
    assert unprobed.starts == 1


def test_a_stopping_server_starts_no_fast_build():
    """A server told to stop (Ctrl-C) before the fallback fires must not then begin the
    fastokens build: the build thread is not a daemon, so the process would wait out the
    whole build (~2.4 s on qwen3) before exiting. Stopping is the lifespan's shutdown (no
    connection open) or the drain (connections open), whichever comes first."""
    from types import SimpleNamespace

    from render_service.http.common import AppContext
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_after_health

    def server():
        tokenizer = SimpleNamespace(starts=0)
        tokenizer.start_fast_build = lambda: setattr(tokenizer, "starts", tokenizer.starts + 1)
        app = Starlette()
        app.state.ctx = AppContext(bundle=None, config=ServeConfig())
        build_after_health(app, SimpleNamespace(tokenizer=tokenizer), fallback_s=0.3)
        return app, tokenizer

    async def lifespan(app) -> None:
        events = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
        sent: list[dict] = []

        async def receive() -> dict:
            return next(events)

        async def send(message: dict) -> None:
            sent.append(message)

        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
        assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]

    stopped, stopped_tok = server()
    asyncio.run(lifespan(stopped))
    drained, drained_tok = server()
    drained.state.ctx.drain.draining = True  # Drain.begin, as uvicorn shuts a connection down
    assert asyncio.run(probe_after(drained.state.ctx)) == 200
    time.sleep(0.6)
    assert stopped_tok.starts == 0 and drained_tok.starts == 0


def test_no_fast_build_once_uvicorn_caught_the_signal():
    """Ctrl-C with no connection open: uvicorn's handler sets ``should_exit`` at once, the
    lifespan's shutdown comes ~0.3-0.5 s later; a fallback firing between must start nothing."""
    import signal
    from types import SimpleNamespace

    from render_service.http.common import AppContext
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_after_health

    class Server:  # uvicorn.Server's part that matters: handle_exit installed as the handler
        should_exit = False

        def handle_exit(self, sig, frame) -> None:
            self.should_exit = True

    server = Server()
    previous = signal.signal(signal.SIGINT, server.handle_exit)
    try:
        tokenizer = SimpleNamespace(starts=0)
        tokenizer.start_fast_build = lambda: setattr(tokenizer, "starts", tokenizer.starts + 1)
        app = Starlette()
        app.state.ctx = AppContext(bundle=None, config=ServeConfig())
        build_after_health(app, SimpleNamespace(tokenizer=tokenizer), fallback_s=0.3)
        server.handle_exit(signal.SIGINT, None)
        time.sleep(0.6)
        assert tokenizer.starts == 0
    finally:
        signal.signal(signal.SIGINT, previous)


async def probe_after(ctx) -> int:
    status = ctx.probe_status()
    await asyncio.sleep(0)
    return status


@needs_shared
def test_each_worker_defers_its_fast_build_like_a_single_server(monkeypatch):
    """``--workers N``: every worker (server.app_from_env) leaves its fastokens build until its
    first healthy probe or the fallback, as the single-process server does; built at once it
    took CPU from the worker's own path to ready (both of 2 workers ready 3.5 -> 2.9 s)."""
    import json as _json

    from render_service.serve import server

    monkeypatch.setenv("RENDER_SERVICE_CONFIG", _json.dumps({"model": str(MODELS / "qwen3")}))
    monkeypatch.setattr(server.build_after_health, "__defaults__", (60.0,))
    app = server.app_from_env()
    tokenizer = app.state.ctx.bundle.tokenizer
    assert tokenizer._fast_build is not None  # not started yet
    assert app.state.ctx.on_healthy is not None
    tokenizer.start_fast_build()  # let the test process end with its build done, not pending
    assert tokenizer.wait_fast(300)
